"""The Cosmos-Predict2.5 diffusion transformer, as pure functions over a parameter dict.

Follows diffusers ``models/transformers/transformer_cosmos.py`` (``CosmosTransformer3DModel`` in its Predict2.5
configuration: ``CosmosPatchEmbed``, ``CosmosRotaryPosEmbed``, ``CosmosLearnablePositionalEmbed``, ``CosmosEmbedding``,
``CosmosAdaLayerNormZero``, ``CosmosAdaLayerNorm``, ``CosmosTransformerBlock``, ``CosmosAttnProcessor2_0``) and the
original network (nvidia-cosmos/cosmos-predict2.5 ``_src/predict2/networks/minimal_v4_dit.py`` ``MiniTrainDIT`` under
``minimal_v1_lvg_dit.py`` ``MinimalV1LVGDiT``); the one difference that changes numbers (the q/k norms' epsilon) is
the configuration's ``qk_norm_eps`` (docs/design.md, "Cosmos-Predict2.5").

Architecture (a DiT with cross-attention): the latents ``(B, 16, T, H, W)``, the condition-mask channel (1 on the
conditioning latent frames) and the padding-mask channel are concatenated and cut into ``(p_t, p_h, p_w)`` patches,
flattened in the reference's element order (tokens ``(t, h, w)``, features ``(c, p_t, p_h, p_w)``) and embedded by one
linear layer. The timestep (the flow-matching sigma in [0, 1], one per sample or one per latent frame) is embedded
sinusoidally (``dim`` wide, ``[cos, sin]``) into ``emb`` (that embedding RMS-normalised) and ``temb`` (two linears,
``3 dim`` wide: the AdaLN-LoRA vector). Every block is

    x = x + pos_emb                                   (the learnable extra position embedding, when configured)
    x = x + gate1 * self_attention(AdaLN1(x))         (RMS q/k norms, 3D RoPE)
    x = x + gate2 * cross_attention(AdaLN2(x), text)  (RMS q/k norms, no RoPE, no mask)
    x = x + gate3 * ffn(AdaLN3(x))                    (GELU)

with ``AdaLN_i(x) = LayerNorm(x) * (1 + scale) + shift`` and ``(shift, scale, gate) = linear_2(linear_1(silu(emb))) +
temb`` (AdaLN-LoRA: a ``dim -> 256 -> 3 dim`` projection per block and per norm); the head is the same AdaLN (two
vectors, ``temb``'s first ``2 dim``), a linear layer and the unpatchify, whose features are ``(p_h, p_w, p_t, c)``: not
the inverse of the patch embedding's order, as the reference has it. The text context is the concatenated Qwen2.5-VL
hidden states (100352 wide) through ``crossattn_proj`` (Linear + GELU) to 1024. The network's output is the velocity,
used as is (no EDM preconditioning).

Per-frame timesteps (``timestep (B, 1, T, 1, 1)``, the conditioning frames at a small sigma): the embeddings and the
AdaLN vectors are computed per latent frame, ``(B, T, .)``, and each token takes its frame's row (a gather by a
token -> frame index inside the blocks; a reshape in the head), never a ``(B, S, 3 dim)`` table as the reference
builds.

Layout: latents ``(B, C, T, H, W)`` as the reference and its pipeline keep them; tokens ``(B, S, dim)``.

Stages (each in a ``jax.named_scope``): :func:`forward_prologue` (time embedding, patch embedding, text projection,
tables, padding to a multiple of sp) -> :func:`run_blocks` (the stack under ``lax.scan``: one block compiles once) ->
:func:`forward_epilogue` (head, unpatchify); the three are the hook of the host block loop and of weight offloading
(:mod:`vidax.models.cosmos_predict25.block_loop`).

Parallelism (``forward(..., mesh=...)``): the block stack runs inside one ``shard_map`` over the ``(data, tensor,
sequence)`` mesh (rules in :mod:`vidax.models.cosmos_predict25.sharding`); the collectives are
:class:`vidax.core.parallel.ShardContext`'s. Outside it GSPMD partitions the per-sample work by batch.

Precision: the residual stream stays float32 (paper Table 4 fault 1); matmul inputs are cast to the weight dtype with
float32 accumulation; LayerNorms, RMSNorms and RoPE compute in float32; the patch embedding, the timestep embedder and
its RMSNorm, every AdaLN-LoRA projection, the learnable position tables and the norm scales are float32 leaves.
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding

from vidax.core.attention import AttentionImpl, attention, is_kernel
from vidax.core.embeddings import timestep_embedding
from vidax.core.images import nearest_indices
from vidax.core.layers import gelu, layer_norm, linear, rms_norm
from vidax.core.parallel import ShardContext, pad_axis, padded_length, sequence_mode
from vidax.core.params import ParamSpec, SpecTree, linear_spec
from vidax.core.sharding import ShardingRules, axis_size
from vidax.models.cosmos_predict25.config import CosmosTransformerConfig
from vidax.models.cosmos_predict25.sharding import COSMOS_PREDICT25_RULES, block_io_specs, check_parallel

#: The block stack's parameter subtree.
STACK = "transformer_blocks"
#: Epsilon of the blocks' and the head's LayerNorms and of the timestep embedding's RMSNorm (the reference's 1e-6).
NORM_EPS = 1e-6
#: Epsilon of the learnable position embedding's normalisation (``CosmosLearnablePositionalEmbed.eps``).
POS_EMB_EPS = 1e-6
#: RoPE base before the per-axis NTK factor (``CosmosRotaryPosEmbed``).
ROPE_THETA = 10000.0

# --------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------


def _adaln_specs(dim: int, lora: int, n: int, layers: int | None) -> dict:
    """An AdaLN-LoRA projection ``dim -> lora -> n dim`` (no biases, float32; the up-projection split over
    ``adaln``)."""
    return {"linear_1": linear_spec(dim, lora, ("embed", None), layers=layers, fp32=True, bias=False),
            "linear_2": linear_spec(lora, n * dim, (None, "adaln" if layers else None), layers=layers, fp32=True,
                                    bias=False)}


def _attention_specs(dim: int, head_dim: int, context_dim: int, layers: int) -> dict:
    def col(n_in: int, axis: str | None) -> dict:
        return linear_spec(n_in, dim, (axis, "heads"), layers=layers, bias=False)

    norm = {"scale": ParamSpec((layers, head_dim), fp32=True, axes=("layers", None))}
    context_axis = "embed" if context_dim == dim else None
    return {"to_q": col(dim, "embed"), "to_k": col(context_dim, context_axis), "to_v": col(context_dim, context_axis),
            "norm_q": norm, "norm_k": norm, "to_out": linear_spec(dim, dim, ("heads", "embed"), layers=layers,
                                                                    bias=False)}


def transformer_specs(cfg: CosmosTransformerConfig) -> SpecTree:
    """The spec tree of a Cosmos-Predict2.5 transformer: every parameter's shape, fp32 pin and logical axes.

    Paths are diffusers' module names (:mod:`vidax.models.cosmos_predict25.keymap` lists the exceptions: ``ff/up``,
    ``ff/down`` for ``ff.net.0.proj`` / ``ff.net.2``, ``crossattn_proj`` for ``crossattn_proj.0``, ``to_out`` for
    ``to_out.0``, norm weights as ``scale``). Kernels are ``(in, out)``; none of the layers has a bias except
    ``crossattn_proj``. The blocks are stacked under ``transformer_blocks`` (leading ``layers`` axis).
    ``learnable_pos_embed`` exists with ``extra_pos_embed_type="learnable"``, ``crossattn_proj`` with
    ``use_crossattn_projection``.
    """
    d, hd, r, L = cfg.dim, cfg.attention_head_dim, cfg.adaln_lora_dim, cfg.num_layers
    pt, ph, pw = cfg.patch_size
    specs: SpecTree = {
        "patch_embed": {"proj": linear_spec(cfg.patch_embed_in_channels * pt * ph * pw, d, (None, "embed"),
                                            fp32=True, bias=False)},
        "time_embed": {
            "t_embedder": {"linear_1": linear_spec(d, d, ("embed", None), fp32=True, bias=False),
                           "linear_2": linear_spec(d, 3 * d, (None, None), fp32=True, bias=False)},
            "norm": {"scale": ParamSpec((d,), fp32=True, axes=("embed",))},
        },
        STACK: {
            "norm1": _adaln_specs(d, r, 3, L),
            "attn1": _attention_specs(d, hd, d, L),
            "norm2": _adaln_specs(d, r, 3, L),
            "attn2": _attention_specs(d, hd, cfg.text_embed_dim, L),
            "norm3": _adaln_specs(d, r, 3, L),
            "ff": {"up": linear_spec(d, cfg.mlp_dim, ("embed", "mlp"), layers=L, bias=False),
                   "down": linear_spec(cfg.mlp_dim, d, ("mlp", "embed"), layers=L, bias=False)},
        },
        "norm_out": _adaln_specs(d, r, 2, None),
        "proj_out": linear_spec(d, pt * ph * pw * cfg.out_channels, ("embed", None), bias=False),
    }
    if cfg.extra_pos_embed_type == "learnable":
        specs["learnable_pos_embed"] = {f"pos_emb_{axis}": ParamSpec((n, d), fp32=True, axes=(None, "embed"))
                                        for axis, n in zip("thw", cfg.max_grid)}
    if cfg.use_crossattn_projection:
        specs["crossattn_proj"] = linear_spec(cfg.crossattn_proj_in_channels, cfg.encoder_hidden_states_channels,
                                              (None, None))
    return specs


# --------------------------------------------------------------------------------------------
# Shapes
# --------------------------------------------------------------------------------------------


def token_grid(cfg: CosmosTransformerConfig, latent_shape: tuple[int, ...]) -> tuple[int, int, int]:
    """``(T', H', W')`` token grid of latents ``(B, C, T, H, W)``.

    Raises:
      ValueError: not 5-D; frames / height / width not divisible by ``patch_size``; a grid beyond
        ``max_size // patch_size`` (the RoPE position range and the learnable tables' rows: the original asserts the
        same bound, diffusers fails on the tables).
    """
    if len(latent_shape) != 5:
        raise ValueError(f"latents must be (B, C, T, H, W), got shape {tuple(latent_shape)}")
    sizes = tuple(latent_shape[2:])
    if any(n < 1 or n % p for n, p in zip(sizes, cfg.patch_size)):
        raise ValueError(f"latent frames/height/width {sizes} must be positive multiples of patch_size "
                         f"{cfg.patch_size}")
    grid = tuple(n // p for n, p in zip(sizes, cfg.patch_size))
    if any(g > m for g, m in zip(grid, cfg.max_grid)):
        raise ValueError(f"latent frames/height/width {sizes} give a token grid {grid} beyond the transformer's "
                         f"max_size {cfg.max_size} // patch_size {cfg.patch_size} = {cfg.max_grid}")
    return grid


def num_tokens(cfg: CosmosTransformerConfig, latent_shape: tuple[int, ...]) -> int:
    """Video tokens of latents of ``latent_shape``."""
    return math.prod(token_grid(cfg, latent_shape))


# --------------------------------------------------------------------------------------------
# Embeddings outside the blocks
# --------------------------------------------------------------------------------------------


def _rope_frequencies(width: int, scale: float) -> np.ndarray:
    """``1 / theta ** (arange(0, width, 2) / width)`` with ``theta = 10000 * scale ** (width / (width - 2))`` (the NTK
    factor in Python floats, the rest in float32, as ``CosmosRotaryPosEmbed`` computes it)."""
    theta = ROPE_THETA * scale ** (width / (width - 2))
    exponents = np.arange(0, width, 2, dtype=np.float32)[: width // 2] / np.float32(width)
    return (np.float32(1.0) / np.power(np.float32(theta), exponents)).astype(np.float32)


def rope_tables(cfg: CosmosTransformerConfig, grid: tuple[int, int, int]) -> tuple[jax.Array, jax.Array]:
    """3D RoPE ``cos, sin`` of the tokens (``CosmosRotaryPosEmbed`` with ``fps=None``, as the Predict2.5 pipeline and
    the original network with ``rope_enable_fps_modulation=False`` call it), float32 ``(T'H'W', head_dim / 2)``.

    The head's first half holds the frame, row and column angles (widths :attr:`CosmosTransformerConfig.rope_dims`,
    44 + 42 + 42 for 128), its second half the same angles again (the reference's ``cat([t, h, w] * 2)``), rotated
    as halves (``rotate_half``, not interleaved pairs). Integer positions; frequencies in float32 as the reference's;
    built in the program from the static grid.
    """
    parts = []
    for axis, (n, width, scale) in enumerate(zip(grid, cfg.rope_dims, cfg.rope_scale)):
        angles = jnp.arange(n, dtype=jnp.float32)[:, None] * jnp.asarray(_rope_frequencies(width, scale))[None, :]
        shape = [1, 1, 1, width // 2]
        shape[axis] = n
        parts.append(jnp.broadcast_to(angles.reshape(shape), (*grid, width // 2)))
    angles = jnp.concatenate(parts, axis=-1).reshape(math.prod(grid), -1)
    return jnp.cos(angles), jnp.sin(angles)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """``x * cos + rotate_half(x) * sin`` (diffusers ``apply_rotary_emb(use_real=True, use_real_unbind_dim=-2)``,
    Transformer Engine's ``apply_rotary_pos_emb``), in float32.

    Args:
      x: ``(B, S, H, D)``; cos, sin: float32 ``(S, D / 2)`` (the table's halves are equal).

    Returns:
      float32 ``(B, S, H, D)``.
    """
    x = x.astype(jnp.float32)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def learnable_pos_embedding(params: dict, cfg: CosmosTransformerConfig, grid: tuple[int, int, int]) -> jax.Array:
    """``learnable_pos_embed`` (``CosmosLearnablePositionalEmbed``, the original's ``LearnablePosEmbAxis``): the
    per-axis tables summed over the grid, each token's vector divided by ``eps + |v| / sqrt(dim)``; float32
    ``(T'H'W', dim)``, added to the stream at the start of every block."""
    p = params["learnable_pos_embed"]
    t, h, w = grid
    f32 = jnp.float32
    emb = (p["pos_emb_t"][:t].astype(f32)[:, None, None] + p["pos_emb_h"][:h].astype(f32)[None, :, None]
           + p["pos_emb_w"][:w].astype(f32)[None, None, :])
    emb = emb.reshape(t * h * w, -1)
    norm = jnp.sqrt(jnp.sum(jnp.square(emb), axis=-1, keepdims=True))
    return emb / (POS_EMB_EPS + norm * np.float32(math.sqrt(1.0 / cfg.dim)))


def time_embedding(params: dict, timestep: jax.Array, cfg: CosmosTransformerConfig) -> tuple[jax.Array, jax.Array]:
    """``time_embed`` (``CosmosEmbedding``; the original's ``t_embedder`` and ``t_embedding_norm``).

    Args:
      timestep: float32 ``(N,)`` sigmas in [0, 1] (one per sample, or per sample and latent frame).

    Returns:
      ``(temb, emb)``: float32 ``(N, 3 dim)`` (the AdaLN-LoRA vector: ``linear_2(silu(linear_1(proj)))``) and
      ``(N, dim)`` (``RMSNorm(proj)``), with ``proj`` the ``dim``-wide ``[cos, sin]`` sinusoidal projection
      (``Timesteps(dim, flip_sin_to_cos=True, downscale_freq_shift=0)``).
    """
    p = params["time_embed"]
    proj = timestep_embedding(timestep, cfg.dim)
    h = jax.nn.silu(linear(p["t_embedder"]["linear_1"], proj, jnp.float32))
    temb = linear(p["t_embedder"]["linear_2"], h, jnp.float32)
    return temb, rms_norm(proj, p["norm"], NORM_EPS, out_dtype=jnp.float32)


def project_context(params: dict, encoder_hidden_states: jax.Array, cfg: CosmosTransformerConfig) -> jax.Array:
    """The cross-attentions' context: ``crossattn_proj`` (Linear + GELU, erf) of the text states with
    ``use_crossattn_projection`` (float32 ``(B, L, text_embed_dim)``), else the states as given."""
    if not cfg.use_crossattn_projection:
        return encoder_hidden_states
    return gelu(linear(params["crossattn_proj"], encoder_hidden_states, jnp.float32))


def patchify(x: jax.Array, patch_size: tuple[int, int, int]) -> jax.Array:
    """``(B, C, T, H, W) -> (B, T'H'W', C p_t p_h p_w)``: tokens in ``(t, h, w)`` raster order, features in
    ``(c, p_t, p_h, p_w)`` order (``CosmosPatchEmbed``; the original's ``"b c (t r) (h m) (w n) -> b t h w (c r m
    n)"``)."""
    b, c, t, h, w = x.shape
    pt, ph, pw = patch_size
    x = x.reshape(b, c, t // pt, pt, h // ph, ph, w // pw, pw).transpose(0, 2, 4, 6, 1, 3, 5, 7)
    return x.reshape(b, (t // pt) * (h // ph) * (w // pw), c * pt * ph * pw)


def unpatchify(x: jax.Array, grid: tuple[int, int, int], patch_size: tuple[int, int, int], channels: int) -> jax.Array:
    """``(B, T'H'W', p_h p_w p_t C) -> (B, C, T, H, W)`` with the features in ``(p_h, p_w, p_t, c)`` order, as
    ``proj_out``'s are (the reference's ``unflatten(2, (p_h, p_w, p_t, -1))`` and ``permute(0, 7, 1, 6, 2, 4, 3,
    5)``; the original's ``"B T H W (p1 p2 t C) -> B C (T t) (H p1) (W p2)"``): not the inverse of :func:`patchify`."""
    b = x.shape[0]
    t, h, w = grid
    pt, ph, pw = patch_size
    x = x.reshape(b, t, h, w, ph, pw, pt, channels).transpose(0, 7, 1, 6, 2, 4, 3, 5)
    return x.reshape(b, channels, t * pt, h * ph, w * pw)


def embed_latents(params: dict, latents: jax.Array, condition_mask: jax.Array | None, padding_mask: jax.Array | None,
                  cfg: CosmosTransformerConfig) -> jax.Array:
    """``patch_embed`` of ``[latents, condition_mask, padding_mask]`` concatenated on channels: float32
    ``(B, T'H'W', dim)``.

    Args:
      latents: ``(B, out_channels, T, H, W)``.
      condition_mask: ``(B, 1, T, H, W)`` or None (zeros) with a condition channel (``cfg.condition_channels``).
      padding_mask: ``(B or 1, 1, Hm, Wm)`` resized to ``(H, W)`` by PyTorch's nearest rule
        (:func:`vidax.core.images.nearest_indices`) and repeated over the frames, or None (zeros: the pipeline's
        padding mask); with ``concat_padding_mask``.
    """
    b, _, t, h, w = latents.shape
    parts = [latents.astype(jnp.float32)]
    if cfg.condition_channels:
        mask = jnp.zeros((b, 1, t, h, w), jnp.float32) if condition_mask is None else condition_mask
        parts.append(jnp.broadcast_to(mask.astype(jnp.float32), (b, 1, t, h, w)))
    if cfg.concat_padding_mask:
        if padding_mask is None:
            pad = jnp.zeros((b, 1, t, h, w), jnp.float32)
        else:
            rows = nearest_indices(padding_mask.shape[2], h)
            cols = nearest_indices(padding_mask.shape[3], w)
            pad = padding_mask.astype(jnp.float32)[:, :, rows][:, :, :, cols]
            pad = jnp.broadcast_to(pad[:, :, None], (b, 1, t, h, w))
        parts.append(pad)
    x = jnp.concatenate(parts, axis=1)
    return linear(params["patch_embed"]["proj"], patchify(x, cfg.patch_size), jnp.float32)


# --------------------------------------------------------------------------------------------
# Blocks (written once for one device and for one shard_map shard)
# --------------------------------------------------------------------------------------------


class BlockInputs(NamedTuple):
    """What every block reads besides the residual stream (a pytree; :func:`forward_prologue` builds it).

    Attributes:
      emb: float32 ``(B, F, dim)``: the RMS-normalised timestep embedding, per sample (``F = 1``) or per latent frame
        (``F = T``).
      temb: float32 ``(B, F, 3 dim)``: the timestep's AdaLN-LoRA vector.
      frame_index: int32 ``(S_pad,)``: each token's latent frame (``F > 1``), else None.
      cos, sin: float32 ``(S_pad, head_dim / 2)`` RoPE tables (padding rows: zeros).
      pos_emb: float32 ``(S_pad, dim)`` learnable position embedding, or None.
      context: ``(B, L, text_embed_dim)`` the projected text.
      context_lengths: int32 ``(B,)`` valid text tokens per sample (right padding), or None (all valid).
      kv_lengths: int32 ``(B,)`` the video tokens ``S`` (the keys past it are padding), or None (no padding).
    """

    emb: jax.Array
    temb: jax.Array
    frame_index: jax.Array | None
    cos: jax.Array
    sin: jax.Array
    pos_emb: jax.Array | None
    context: jax.Array
    context_lengths: jax.Array | None
    kv_lengths: jax.Array | None


def adaln_modulation(p: dict, emb_act: jax.Array, temb: jax.Array, n: int,
                     par: ShardContext = ShardContext()) -> list[jax.Array]:
    """An AdaLN-LoRA modulation's ``n`` vectors (``CosmosAdaLayerNormZero`` / ``CosmosAdaLayerNorm``): ``linear_2(
    linear_1(emb_act)) + temb[..., :n dim]`` split in ``n``, float32 ``(B, F, dim)`` each, in the reference's order
    (shift, scale[, gate]).

    On a mesh each tensor shard holds ``n dim / tp`` output features of ``linear_2``: it writes its slice into a zero
    row and the rows are summed over ``tensor`` (an exact all-gather, invariant over ``tensor`` for ``shard_map``'s
    type check).
    """
    mod = linear(p["linear_2"], linear(p["linear_1"], emb_act, jnp.float32), jnp.float32)
    if par.tensor is not None:
        width = mod.shape[-1]
        full = jnp.zeros((*mod.shape[:-1], width * jax.lax.axis_size(par.tensor)), mod.dtype)
        start = jax.lax.axis_index(par.tensor) * width
        mod = par.psum_tensor(jax.lax.dynamic_update_slice_in_dim(full, mod, start, mod.ndim - 1))
    mod = mod + temb[..., : mod.shape[-1]]
    return jnp.split(mod, n, axis=-1)


def _per_token(v: jax.Array, frame_index: jax.Array | None) -> jax.Array:
    """A per-frame vector ``(B, F, dim)`` for this shard's tokens: ``(B, 1, dim)`` (``F = 1``, broadcast) or the
    tokens' frames' rows ``(B, S_local, dim)``."""
    return v if frame_index is None else jnp.take(v, frame_index, axis=1)


def self_attention(p: dict, nx: jax.Array, inputs: BlockInputs, cfg: CosmosTransformerConfig, impl: AttentionImpl,
                   par: ShardContext) -> jax.Array:
    """``attn1`` (``CosmosAttnProcessor2_0`` without context) on this shard's rows ``nx (B, S_local, dim)``:
    column-parallel q/k/v (this shard's heads), RMS q/k norms and RoPE in float32, Ulysses ``all_to_all`` (or keys and
    values all-gathered), the padded keys masked, row-parallel ``to_out``. Float32 ``(B, S_local, dim)``."""
    b, s, _ = nx.shape
    hd, dtype = cfg.attention_head_dim, p["to_q"]["kernel"].dtype

    def qk(name: str, norm: str) -> jax.Array:
        y = rms_norm(linear(p[name], nx, jnp.float32).reshape(b, s, -1, hd), p[norm], cfg.qk_norm_eps)
        return apply_rope(y, inputs.cos, inputs.sin).astype(dtype)

    q, k = qk("to_q", "norm_q"), qk("to_k", "norm_k")
    v = linear(p["to_v"], nx).reshape(b, s, -1, hd)
    q, k, v = par.to_attention(q, k, v)
    o = par.from_attention(attention(q, k, v, implementation=impl, kv_lengths=inputs.kv_lengths))
    return par.row_linear(p["to_out"], o.reshape(b, s, -1), jnp.float32)


def cross_attention(p: dict, nx: jax.Array, inputs: BlockInputs, cfg: CosmosTransformerConfig, impl: AttentionImpl,
                    par: ShardContext) -> jax.Array:
    """``attn2`` on this shard's rows ``nx (B, S_local, dim)`` against the whole text context: column-parallel q/k/v,
    RMS q/k norms (no RoPE), the text padding masked by ``context_lengths`` when given (the Predict2.5 pipeline passes
    no mask), row-parallel ``to_out``. Float32 ``(B, S_local, dim)``."""
    b, s, _ = nx.shape
    hd, dtype = cfg.attention_head_dim, p["to_q"]["kernel"].dtype
    c = inputs.context
    q = rms_norm(linear(p["to_q"], nx, jnp.float32).reshape(b, s, -1, hd), p["norm_q"], cfg.qk_norm_eps, dtype)
    k = rms_norm(linear(p["to_k"], c, jnp.float32).reshape(b, c.shape[1], -1, hd), p["norm_k"], cfg.qk_norm_eps,
                 dtype)
    v = linear(p["to_v"], c).reshape(b, c.shape[1], -1, hd)
    o = attention(q, k, v, implementation=impl, kv_lengths=inputs.context_lengths)
    return par.row_linear(p["to_out"], o.reshape(b, s, -1), jnp.float32)


def feed_forward(p: dict, x: jax.Array, par: ShardContext) -> jax.Array:
    """``FeedForward(activation_fn="gelu", bias=False)`` (the original's ``GPT2FeedForward``): column-parallel up,
    GELU (erf), row-parallel down; float32."""
    return par.row_linear(p["down"], gelu(linear(p["up"], x)), jnp.float32)


def block(p: dict, x: jax.Array, inputs: BlockInputs, cfg: CosmosTransformerConfig, impl: AttentionImpl,
          par: ShardContext = ShardContext()) -> jax.Array:
    """One ``CosmosTransformerBlock`` (the original's ``Block`` with AdaLN-LoRA).

    Args:
      p: one block's parameters (no ``layers`` axis); on a mesh, this shard's slices.
      x: float32 stream ``(B, S_local, dim)`` (this shard's rows).
      inputs: :class:`BlockInputs` (this shard's rows of the per-token ones).

    Returns:
      float32 ``(B, S_local, dim)``.
    """
    dtype = p["attn1"]["to_q"]["kernel"].dtype
    if inputs.pos_emb is not None:
        x = x + inputs.pos_emb[None]
    emb_act = jax.nn.silu(inputs.emb)

    def adaln(name: str, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        shift, scale, gate = (_per_token(v, inputs.frame_index)
                              for v in adaln_modulation(p[name], emb_act, inputs.temb, 3, par))
        return (layer_norm(x, None, NORM_EPS) * (1.0 + scale) + shift).astype(dtype), gate

    with jax.named_scope("self_attention"):
        nx, gate = adaln("norm1", x)
        x = x + gate * self_attention(p["attn1"], nx, inputs, cfg, impl, par)
    with jax.named_scope("cross_attention"):
        nx, gate = adaln("norm2", x)
        x = x + gate * cross_attention(p["attn2"], nx, inputs, cfg, impl, par)
    with jax.named_scope("ff"):
        nx, gate = adaln("norm3", x)
        x = x + gate * feed_forward(p["ff"], nx, par)
    return x


def block_input_specs(inputs: BlockInputs, rules: ShardingRules) -> BlockInputs:
    """The ``PartitionSpec`` s of a :class:`BlockInputs` on a mesh (None where ``inputs`` has None):
    :func:`vidax.models.cosmos_predict25.sharding.block_io_specs`."""
    io = block_io_specs(rules)

    def opt(a, spec):
        return None if a is None else spec

    return BlockInputs(io["frames"], io["frames"], opt(inputs.frame_index, io["tokens"]), io["table"], io["table"],
                       opt(inputs.pos_emb, io["table"]), io["context"], opt(inputs.context_lengths, io["lengths"]),
                       opt(inputs.kv_lengths, io["lengths"]))


def run_blocks(blocks: dict, x: jax.Array, inputs: BlockInputs, *, cfg: CosmosTransformerConfig,
               attention_impl: AttentionImpl | str = AttentionImpl.XLA, mesh: Mesh | None = None,
               rules: ShardingRules = COSMOS_PREDICT25_RULES) -> jax.Array:
    """Run blocks (all, or a chunk: the offloading hook) under ``lax.scan``.

    On a mesh the scan runs inside one ``shard_map`` over every mesh axis: batch over ``data``, tokens over
    ``sequence`` (Ulysses), heads, MLP width and AdaLN features over ``tensor`` (Megatron).

    Args:
      blocks: stacked parameters of ``params["transformer_blocks"]`` (leading ``layers`` axis, any length).
      x: float32 stream ``(B, S_pad, dim)`` (from :func:`forward_prologue`, padded to a multiple of sp).
      inputs: :class:`BlockInputs`.
      cfg, attention_impl, mesh, rules: static; ``mesh`` None runs on one device.

    Returns:
      float32 ``(B, S_pad, dim)``; on a mesh sharded ``P(data, sequence, None)``.

    Raises:
      ValueError: a mesh the model cannot use (:func:`vidax.models.cosmos_predict25.sharding.check_parallel`).
    """
    impl = AttentionImpl(attention_impl)

    def scan(blocks, x, inputs, par):
        def body(x, p):
            return block(p, x, inputs, cfg, impl, par), None

        return jax.lax.scan(body, x, blocks)[0]

    if mesh is None:
        return scan(blocks, x, inputs, ShardContext())
    check_parallel(cfg, mesh, rules)
    tp = axis_size(mesh, rules.mesh_axes("heads"))
    sp = axis_size(mesh, rules.mesh_axes("tokens"))
    ulysses = sequence_mode(cfg.num_attention_heads // tp, sp) == "ulysses"
    par = ShardContext(tensor=rules.mesh_axes("heads"), sequence=rules.mesh_axes("tokens"), ulysses=ulysses)
    io = block_io_specs(rules)
    in_specs = (rules.param_specs(transformer_specs(cfg)[STACK]), io["stream"], block_input_specs(inputs, rules))
    # Kernel calls (Pallas, cuDNN, FFI) carry no varying-manual-axes types; the einsum paths keep the check.
    fn = jax.shard_map(partial(scan, par=par), mesh=mesh, in_specs=in_specs, out_specs=io["stream"],
                       check_vma=not is_kernel(impl))
    return fn(blocks, x, inputs)


# --------------------------------------------------------------------------------------------
# Forward
# --------------------------------------------------------------------------------------------


def _shape(a) -> tuple[int, ...] | None:
    return None if a is None else tuple(jnp.shape(a))


def check_inputs(cfg: CosmosTransformerConfig, latent_shape, timestep_shape, text_shape, condition_shape=None,
                 padding_shape=None, lengths_shape=None) -> None:
    """Check the shapes of :func:`forward`'s inputs (before anything is traced).

    Raises:
      ValueError: every mismatch at once, naming the input, its shape and the expected one (and
        :func:`token_grid`'s).
    """
    token_grid(cfg, latent_shape)
    b, ch, t, h, w = latent_shape
    problems = []
    if ch != cfg.latent_channels:
        problems.append(f"latents have {ch} channels, the transformer takes {cfg.latent_channels} latent channels "
                        "(the condition and padding masks are separate inputs)")
    if condition_shape is not None:
        if not cfg.condition_channels:
            problems.append("condition_mask was given, but this transformer has no condition-mask channel "
                            f"(in_channels={cfg.in_channels} = out_channels): pass condition_mask=None")
        elif condition_shape != (b, 1, t, h, w):
            problems.append(f"condition_mask shape {condition_shape} (expected {(b, 1, t, h, w)})")
    per_frame = (b, 1, t, 1, 1)
    if len(timestep_shape) == 5:
        if timestep_shape != per_frame:
            problems.append(f"timestep shape {timestep_shape} (expected ({b},), a scalar or {per_frame})")
        elif cfg.patch_size[0] != 1 and t > 1:
            problems.append(f"per-frame timesteps {timestep_shape} need patch_size[0] = 1 (the reference gives each "
                            f"latent frame's timestep to one token frame; patch_size is {cfg.patch_size}): pass one "
                            "timestep per sample")
    elif len(timestep_shape) > 1 or math.prod(timestep_shape) not in (1, b):
        problems.append(f"timestep shape {timestep_shape} (expected ({b},), a scalar or {per_frame})")
    width = cfg.context_in_channels
    if len(text_shape) != 3 or text_shape[0] != b or text_shape[1] < 1 or text_shape[2] != width:
        problems.append(f"encoder_hidden_states shape {text_shape} (expected ({b}, L, {width}))")
    if padding_shape is not None:
        if not cfg.concat_padding_mask:
            problems.append("padding_mask was given, but this transformer takes none (concat_padding_mask=false)")
        elif len(padding_shape) != 4 or padding_shape[0] not in (1, b) or padding_shape[1] != 1 or min(
                padding_shape[2:]) < 1:
            problems.append(f"padding_mask shape {padding_shape} (expected (1 or {b}, 1, H, W))")
    if lengths_shape is not None and lengths_shape != (b,):
        problems.append(f"encoder_lengths shape {lengths_shape} (expected ({b},))")
    if problems:
        raise ValueError("Cosmos-Predict2.5 transformer inputs: " + "; ".join(problems))


@partial(jax.jit, static_argnames=("cfg", "attention_impl", "mesh", "rules"))
def forward(
    params: dict,
    latents: jax.Array,
    timestep: jax.Array,
    encoder_hidden_states: jax.Array,
    condition_mask: jax.Array | None = None,
    padding_mask: jax.Array | None = None,
    encoder_lengths: jax.Array | None = None,
    *,
    cfg: CosmosTransformerConfig,
    attention_impl: AttentionImpl | str = AttentionImpl.XLA,
    mesh: Mesh | None = None,
    rules: ShardingRules = COSMOS_PREDICT25_RULES,
) -> jax.Array:
    """Predict the flow-matching velocity (diffusers ``CosmosTransformer3DModel.forward``; the original
    ``MinimalV1LVGDiT.forward`` after its timestep scale). The output is the velocity as is: no EDM preconditioning.

    Stages: :func:`forward_prologue` -> :func:`run_blocks` -> :func:`forward_epilogue`.

    Args:
      params: parameter tree of :func:`transformer_specs` (on a mesh: placed with
        ``rules.param_shardings(transformer_specs(cfg), mesh)``, or loaded with
        :func:`vidax.models.cosmos_predict25.keymap.load_transformer`).
      latents: ``(B, out_channels, T, H, W)`` (any float dtype): the noisy latents, already mixed with the
        conditioning latents on the conditioning frames. ``T, H, W`` multiples of ``patch_size`` and within
        ``max_size``.
      timestep: float32 sigmas in [0, 1] (the original network's ``timestep_scale`` x its timesteps): ``(B,)`` or a
        scalar, or ``(B, 1, T, 1, 1)`` one per latent frame (the conditioning frames at the conditional-frame sigma,
        e.g. 0.0001; needs ``patch_size[0] = 1``).
      encoder_hidden_states: ``(B, L, context_in_channels)`` text states (100352-wide concatenated Qwen2.5-VL layers
        for the releases, projected by ``crossattn_proj``), any float dtype.
      condition_mask: ``(B, 1, T, H, W)``, 1 on the conditioning latent frames; None: zeros (text-to-world). Only
        with a condition channel (``in_channels = out_channels + 1``).
      padding_mask: ``(B or 1, 1, Hm, Wm)`` at any resolution (nearest-resized to ``(H, W)`` as torchvision's
        resize picks pixels); None: zeros, what the Predict2.5 pipeline passes.
      encoder_lengths: int32 ``(B,)`` valid text tokens per sample (right padding, at least 1), or None: every token
        attended, as the Predict2.5 pipeline does (no attention mask).
      cfg, attention_impl, mesh, rules: static; see :mod:`vidax.core.attention`, :func:`vidax.core.sharding.make_mesh`,
        :data:`vidax.models.cosmos_predict25.sharding.COSMOS_PREDICT25_RULES`.

    Returns:
      float32 ``(B, out_channels, T, H, W)``.

    Raises:
      ValueError: an input of the wrong shape (:func:`check_inputs`); a mesh the model cannot use
        (:func:`vidax.models.cosmos_predict25.sharding.check_parallel`).
    """
    x, inputs = forward_prologue(params, latents, timestep, encoder_hidden_states, condition_mask, padding_mask,
                                 encoder_lengths, cfg=cfg, mesh=mesh, rules=rules)
    with jax.named_scope(STACK):
        x = run_blocks(params[STACK], x, inputs, cfg=cfg, attention_impl=attention_impl, mesh=mesh, rules=rules)
    return forward_epilogue(params, x, inputs, cfg=cfg, latent_shape=tuple(latents.shape))


def forward_prologue(params: dict, latents: jax.Array, timestep: jax.Array, encoder_hidden_states: jax.Array,
                     condition_mask: jax.Array | None = None, padding_mask: jax.Array | None = None,
                     encoder_lengths: jax.Array | None = None, *, cfg: CosmosTransformerConfig,
                     mesh: Mesh | None = None,
                     rules: ShardingRules = COSMOS_PREDICT25_RULES) -> tuple[jax.Array, BlockInputs]:
    """:func:`forward` up to the block stack.

    Args and raises: as :func:`forward` (``params`` need not hold the block stack).

    Returns:
      ``(x, inputs)``: the float32 stream ``(B, S_pad, dim)`` (zero-padded to a multiple of sp) and the
      :class:`BlockInputs`.
    """
    check_inputs(cfg, tuple(latents.shape), _shape(timestep), _shape(encoder_hidden_states), _shape(condition_mask),
                 _shape(padding_mask), _shape(encoder_lengths))
    b, t = latents.shape[0], latents.shape[2]
    check_parallel(cfg, mesh, rules, b)
    grid = token_grid(cfg, latents.shape)
    if mesh is not None:
        latents = jax.lax.with_sharding_constraint(
            latents, NamedSharding(mesh, rules.spec(("batch",) + (None,) * (latents.ndim - 1))))
    timestep = jnp.asarray(timestep, jnp.float32)
    if timestep.ndim == 5:  # (B, 1, T, 1, 1): one per latent frame (diffusers flattens it to (B T,) too)
        frames, timestep = t, timestep.reshape(b * t)
    else:
        frames, timestep = 1, jnp.broadcast_to(timestep.reshape(-1), (b,))
    with jax.named_scope("time_embed"):
        temb, emb = time_embedding(params, timestep, cfg)
        temb, emb = temb.reshape(b, frames, -1), emb.reshape(b, frames, -1)
    with jax.named_scope("patch_embed"):
        x = embed_latents(params, latents, condition_mask, padding_mask, cfg)
    with jax.named_scope("crossattn_proj"):
        context = project_context(params, encoder_hidden_states, cfg)
    s = x.shape[1]
    s_pad = padded_length(s, axis_size(mesh, rules.mesh_axes("tokens")))
    x = pad_axis(x, 1, s_pad)
    cos, sin = (pad_axis(a, 0, s_pad) for a in rope_tables(cfg, grid))
    pos_emb = None
    if cfg.extra_pos_embed_type == "learnable":
        with jax.named_scope("learnable_pos_embed"):
            pos_emb = pad_axis(learnable_pos_embedding(params, cfg, grid), 0, s_pad)
    frame_index = None
    if frames > 1:
        frame_index = jnp.minimum(jnp.arange(s_pad, dtype=jnp.int32) // (grid[1] * grid[2]), frames - 1)
    kv_lengths = jnp.full((b,), s, jnp.int32) if s_pad != s else None
    lengths = None
    if encoder_lengths is not None:
        lengths = jnp.clip(jnp.asarray(encoder_lengths, jnp.int32), 0, encoder_hidden_states.shape[1])
    return x, BlockInputs(emb, temb, frame_index, cos, sin, pos_emb, context, lengths, kv_lengths)


def forward_epilogue(params: dict, x: jax.Array, inputs: BlockInputs, *, cfg: CosmosTransformerConfig,
                     latent_shape: tuple[int, ...], padded_layers: int = 0) -> jax.Array:
    """:func:`forward` after the block stack: the tokens (padding cut), ``norm_out`` (AdaLN-LoRA, two vectors),
    ``proj_out``, :func:`unpatchify`.

    Args:
      x: float32 stream ``(B, S_pad, dim)`` from :func:`run_blocks`; inputs: the :class:`BlockInputs`;
      latent_shape: the latents' shape ``(B, C, T, H, W)``.
      padded_layers: zero blocks run after the real ones (an offloaded stack's padded last chunk). A zero block is
        the identity but for the learnable position embedding it adds first; that many embeddings are taken off
        again here (exact to float32 rounding).

    Returns:
      float32 ``(B, out_channels, T, H, W)``.
    """
    grid = token_grid(cfg, latent_shape)
    t, h, w = grid
    b, s = x.shape[0], t * h * w
    x = x[:, :s]
    if padded_layers and inputs.pos_emb is not None:
        x = x - padded_layers * inputs.pos_emb[None, :s]
    with jax.named_scope("head"):
        shift, scale = adaln_modulation(params["norm_out"], jax.nn.silu(inputs.emb), inputs.temb, 2)
        # (B, F, dim) per sample (F = 1) or per latent frame (F = T'): the tokens of one frame are contiguous.
        x = x.reshape(b, t, h * w, -1)
        x = layer_norm(x, None, NORM_EPS) * (1.0 + scale[:, :, None]) + shift[:, :, None]
        x = linear(params["proj_out"], x.reshape(b, s, -1), jnp.float32)
    return unpatchify(x, grid, cfg.patch_size, cfg.out_channels)


__all__ = ["NORM_EPS", "POS_EMB_EPS", "ROPE_THETA", "STACK", "BlockInputs", "adaln_modulation", "apply_rope", "block",
           "block_input_specs", "check_inputs", "cross_attention", "embed_latents", "feed_forward", "forward",
           "forward_epilogue", "forward_prologue", "learnable_pos_embedding", "num_tokens",
           "patchify", "project_context", "rope_tables", "run_blocks", "self_attention", "time_embedding",
           "token_grid", "transformer_specs", "unpatchify"]
