"""The HunyuanVideo diffusion transformer, as pure functions over a parameter dict.

Follows diffusers ``models/transformers/transformer_hunyuan_video.py`` (``HunyuanVideoTransformer3DModel``,
``HunyuanVideoConditionEmbedding``, ``HunyuanVideoTokenRefiner``, ``HunyuanVideoRotaryPosEmbed``,
``HunyuanVideoTransformerBlock``, ``HunyuanVideoSingleTransformerBlock`` and their ``TokenReplace``
variants, ``HunyuanVideoAttnProcessor2_0``), with ``models/normalization.py`` (``AdaLayerNormZero``,
``AdaLayerNormZeroSingle``, ``AdaLayerNormContinuous``) and ``models/embeddings.py``
(``get_timestep_embedding``, ``TimestepEmbedding``, ``PixArtAlphaTextProjection``,
``get_1d_rotary_pos_embed``, ``apply_rotary_emb``).

Architecture (an MMDiT after Flux): the latents ``(B, C, T, H, W)`` are cut into ``(p_t, p, p)`` patches
(video tokens); the Llama text states are refined by a small transformer of their own (the token
refiner, conditioned on the timestep and on the text mean-pooled over its mask); the timestep, the
pooled CLIP projection and (guidance-distilled models) the guidance scale make one conditioning
vector. Then ``num_layers`` dual-stream blocks (video and text each with their own weights and AdaLN,
joint attention over ``[video; text]``) and ``num_single_layers`` single-stream blocks (shared weights,
attention and MLP in parallel from one normalised input, one output projection over both), RMS q/k
norms per head, 3D RoPE (theta 256; frame, row and column axes of 16, 56 and 56 features) on the video
tokens only, and a final AdaLN head. ``token_replace`` image-to-video models modulate the first latent
frame's tokens with the timestep-0 conditioning (``token_replace_emb``: no guidance term).

Text padding: the reference masks padded text *keys* everywhere (a key mask built from the mask's sum:
right padding). Here it is per-sample key lengths (:func:`vidax.core.attention.attention`'s
``kv_lengths``), never a dense mask (paper Table 4 fault 6). Padded query rows are computed as the
reference computes them (they attend the valid keys; in the refiner only key 0, which the reference's
mask always lets through) and never reach a valid token: they are never keys, and the output keeps the
video tokens only. So every row, padded or not, matches the reference.

Layout: latents ``(B, C, T, H, W)``, as the reference and its pipeline keep them.

Stages (each in a ``jax.named_scope``): :func:`condition_embedding` -> :func:`refine_text` ->
:func:`embed_video` -> :func:`run_blocks` (dual-stream stack, then single-stream stack, each stacked
under ``lax.scan``: one block compiles once per kind) -> :func:`output_head`. :func:`forward_prologue` /
:func:`run_blocks` / :func:`forward_epilogue` are the offloading hook, as in the other families.

Parallelism (``forward(..., mesh=...)``): each block stack runs inside one ``shard_map`` over the
``(data, tensor, sequence)`` mesh. Megatron tensor parallelism over heads, MLP width and the AdaLN
projections' outputs (:mod:`vidax.models.hunyuanvideo.sharding`); DeepSpeed-Ulysses over the joint
sequence: the video stream and the text stream are *both* split over ``sequence`` (each zero-padded to a
multiple of sp), so the dual-stream blocks apply the video weights to video rows and the text weights to
text rows with no wasted work, and the shards are balanced. For attention each shard concatenates its
video and text rows; one ``all_to_all`` per q/k/v trades the token split for a head split (or, where sp
does not divide the local heads, keys and values are all-gathered); the gathered keys arrive shard by
shard, ``[video_0; text_0; video_1; text_1; ...]``, and are reordered (static slices) to
``[video[:S]; text]`` so that one key length per sample (``S + text length``) excludes both the video
padding and the text padding; queries need no order.

Precision: the video and text residual streams stay float32 between and inside the blocks (paper
Table 4 fault 1); matmul inputs are cast to the weight dtype with float32 accumulation; LayerNorms and
RMSNorms compute in float32; the AdaLN projections, the timestep / guidance / pooled-text embedders (of
the model and of the refiner), the patch embedding and all norm parameters are float32 leaves (the
reference runs them in the model dtype, bfloat16 in the released pipelines: nothing here is less
precise).
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
from vidax.core.embeddings import patch_embed
from vidax.core.layers import gelu_tanh, layer_norm, linear, rms_norm
from vidax.core.parallel import ShardContext, pad_axis, padded_length, sequence_mode
from vidax.core.params import ParamSpec, SpecTree, linear_spec
from vidax.core.rope import apply_rope_interleaved
from vidax.core.sharding import ShardingRules, axis_size
from vidax.models.hunyuanvideo.config import HunyuanVideoTransformerConfig
from vidax.models.hunyuanvideo.sharding import HUNYUAN_VIDEO_RULES, check_parallel

#: Epsilon of every LayerNorm (blocks, refiner, head) and of the RMS q/k norms (diffusers ``eps=1e-6``).
NORM_EPS = 1e-6
#: Width of the sinusoidal timestep / guidance projection (``Timesteps(num_channels=256)``).
TIME_PROJ_DIM = 256

#: The two block stacks: ``kind`` of :func:`run_blocks` -> parameter subtree.
STACKS = {"double": "transformer_blocks", "single": "single_transformer_blocks"}

# --------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------


def _layer_norm_spec(dim: int, layers: int | None = None) -> dict:
    lead, lead_axes = ((layers,), ("layers",)) if layers else ((), ())
    return {"scale": ParamSpec((*lead, dim), fp32=True, axes=(*lead_axes, "embed")),
            "bias": ParamSpec((*lead, dim), fp32=True, axes=(*lead_axes, "embed"))}


def _rms_spec(head_dim: int, layers: int) -> dict:
    return {"scale": ParamSpec((layers, head_dim), fp32=True, axes=("layers", None))}


def _embedder_spec(n_in: int, dim: int) -> dict:
    """``TimestepEmbedding`` / ``PixArtAlphaTextProjection``: two linears, float32."""
    return {"linear_1": linear_spec(n_in, dim, (None, "embed"), fp32=True),
            "linear_2": linear_spec(dim, dim, ("embed", "embed"), fp32=True)}


def transformer_specs(cfg: HunyuanVideoTransformerConfig) -> SpecTree:
    """The spec tree of a HunyuanVideo transformer: every parameter's shape, fp32 pin and logical axes.

    Stacked blocks lead with a ``layers`` axis: ``transformer_blocks`` (``num_layers``),
    ``single_transformer_blocks`` (``num_single_layers``), ``context_embedder/token_refiner/refiner_blocks``
    (``num_refiner_layers``). Paths are diffusers' module names except the split fused tensors and the
    feed-forward pairs (see :mod:`vidax.models.hunyuanvideo.keymap`). Kernels are ``(in, out)``; the patch
    kernel is ``(p_t, p, p, in_channels, dim)``.
    """
    d, hd = cfg.dim, cfg.attention_head_dim
    L, S, R = cfg.num_layers, cfg.num_single_layers, cfg.num_refiner_layers
    p, pt = cfg.patch_size, cfg.patch_size_t

    def col(layers: int, n_out: int = d, axis: str = "heads") -> dict:  # column-parallel
        return linear_spec(d, n_out, ("embed", axis), layers=layers)

    def row(layers: int, n_in: int = d, axis: str = "heads", bias: bool = True) -> dict:  # row-parallel
        return linear_spec(n_in, d, (axis, "embed"), layers=layers, bias=bias)

    def adaln(layers: int, n: int) -> dict:
        return {"linear": linear_spec(d, n * d, ("embed", "adaln"), layers=layers, fp32=True)}

    refiner_block = {
        "norm1": _layer_norm_spec(d, R),
        "attn": {n: linear_spec(d, d, ("embed", None), layers=R) for n in ("to_q", "to_k", "to_v")}
        | {"to_out": linear_spec(d, d, (None, "embed"), layers=R)},
        "norm2": _layer_norm_spec(d, R),
        "ff": {"up": linear_spec(d, cfg.refiner_mlp_dim, ("embed", None), layers=R),
               "down": linear_spec(cfg.refiner_mlp_dim, d, (None, "embed"), layers=R)},
        "norm_out": {"linear": linear_spec(d, 2 * d, ("embed", None), layers=R, fp32=True)},
    }
    time_text = {"timestep_embedder": _embedder_spec(TIME_PROJ_DIM, d),
                 "text_embedder": _embedder_spec(cfg.pooled_projection_dim, d)}
    if cfg.guidance_embeds:
        time_text["guidance_embedder"] = _embedder_spec(TIME_PROJ_DIM, d)
    attn_single = {n: col(S) for n in ("to_q", "to_k", "to_v")} | {"norm_q": _rms_spec(hd, S),
                                                                     "norm_k": _rms_spec(hd, S)}
    return {
        "x_embedder": {"proj": {
            "kernel": ParamSpec((pt, p, p, cfg.in_channels, d), fp32=True, axes=(None, None, None, None, "embed")),
            "bias": ParamSpec((d,), fp32=True, axes=("embed",)),
        }},
        "context_embedder": {
            "time_text_embed": {"timestep_embedder": _embedder_spec(TIME_PROJ_DIM, d),
                                "text_embedder": _embedder_spec(cfg.text_embed_dim, d)},
            "proj_in": linear_spec(cfg.text_embed_dim, d, (None, "embed")),
            "token_refiner": {"refiner_blocks": refiner_block},
        },
        "time_text_embed": time_text,
        "transformer_blocks": {
            "norm1": adaln(L, 6),
            "norm1_context": adaln(L, 6),
            "attn": {n: col(L) for n in ("to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj")}
            | {n: _rms_spec(hd, L) for n in ("norm_q", "norm_k", "norm_added_q", "norm_added_k")}
            | {"to_out": row(L), "to_add_out": row(L)},
            "ff": {"up": col(L, cfg.mlp_dim, "mlp"), "down": row(L, cfg.mlp_dim, "mlp")},
            "ff_context": {"up": col(L, cfg.mlp_dim, "mlp"), "down": row(L, cfg.mlp_dim, "mlp")},
        },
        "single_transformer_blocks": {
            "norm": adaln(S, 3),
            "attn": attn_single,
            "proj_mlp": col(S, cfg.mlp_dim, "mlp"),
            # diffusers' proj_out over [attention (dim); MLP (mlp_dim)], read as two row-parallel kernels + one bias.
            "proj_out": {"attn": {"kernel": row(S)["kernel"]},
                         "mlp": {"kernel": row(S, cfg.mlp_dim, "mlp")["kernel"]},
                         "bias": ParamSpec((S, d), axes=("layers", "embed"))},
        },
        "norm_out": {"scale_linear": linear_spec(d, d, ("embed", "embed"), fp32=True),
                     "shift_linear": linear_spec(d, d, ("embed", "embed"), fp32=True)},
        "proj_out": linear_spec(d, pt * p * p * cfg.out_channels, ("embed", None)),
    }


# --------------------------------------------------------------------------------------------
# Shapes, positions
# --------------------------------------------------------------------------------------------


def token_grid(cfg: HunyuanVideoTransformerConfig, latent_shape: tuple[int, ...]) -> tuple[int, int, int]:
    """``(T', H', W')`` token grid of latents ``(B, C, T, H, W)``.

    Raises:
      ValueError: not 5-D, or frames / height / width not divisible by ``(patch_size_t, patch_size, patch_size)``.
    """
    if len(latent_shape) != 5:
        raise ValueError(f"latents must be (B, C, T, H, W), got shape {tuple(latent_shape)}")
    _, _, t, h, w = latent_shape
    pt, p = cfg.patch_size_t, cfg.patch_size
    if t % pt or h % p or w % p:
        raise ValueError(f"latent frames/height/width {(t, h, w)} must be divisible by (patch_size_t, patch_size, "
                         f"patch_size) = {(pt, p, p)}")
    return t // pt, h // p, w // p


def num_tokens(cfg: HunyuanVideoTransformerConfig, latent_shape: tuple[int, ...]) -> int:
    """Video tokens of latents of ``latent_shape`` (the text tokens come on top)."""
    return math.prod(token_grid(cfg, latent_shape))


def rope_tables(cfg: HunyuanVideoTransformerConfig, grid: tuple[int, int, int]) -> tuple[jax.Array, jax.Array]:
    """3D RoPE ``cos, sin`` of the video tokens (diffusers ``HunyuanVideoRotaryPosEmbed``), float32.

    Each head's features split into ``rope_axes_dim`` groups rotated by the frame, row and column index
    (integer positions); group widths ``(16, 56, 56)`` in the release. Frequencies
    ``theta ** (-2j / width)`` and angles in float32, as the reference computes them (``get_1d_rotary_pos_embed``
    with its default float32 frequencies); built in the program from the static grid (no host table).

    Returns:
      ``cos, sin``: float32 ``(T' * H' * W', head_dim / 2)``, tokens in ``(t, h, w)`` raster order, one angle per
      adjacent feature pair (the reference's ``repeat_interleave(2)`` table halved).
    """
    parts = []
    for axis, (n, width) in enumerate(zip(grid, cfg.rope_axes_dim)):
        freqs = (1.0 / (np.float32(cfg.rope_theta) ** (np.arange(0, width, 2, dtype=np.float32)[: width // 2]
                                                        / np.float32(width)))).astype(np.float32)
        angles = jnp.arange(n, dtype=jnp.float32)[:, None] * jnp.asarray(freqs)[None, :]  # (n, width / 2)
        shape = [1, 1, 1, width // 2]
        shape[axis] = n
        parts.append(jnp.broadcast_to(angles.reshape(shape), (*grid, width // 2)))
    angles = jnp.concatenate(parts, axis=-1).reshape(math.prod(grid), -1)
    return jnp.cos(angles), jnp.sin(angles)


# --------------------------------------------------------------------------------------------
# Embeddings outside the blocks
# --------------------------------------------------------------------------------------------


def _mlp2(p: dict, x: jax.Array) -> jax.Array:
    """Linear, SiLU, linear (``TimestepEmbedding``, ``PixArtAlphaTextProjection(act_fn="silu")``), float32."""
    return linear(p["linear_2"], jax.nn.silu(linear(p["linear_1"], x, jnp.float32)), jnp.float32)


def time_proj_frequencies() -> np.ndarray:
    """The 128 frequencies of :func:`time_proj`: the reference's float32 values, built in its operation order
    (``float32(-ln 10000) * arange(128) / 128`` in float32, then ``exp``, here in float64 rounded once).

    PyTorch's float32 ``exp`` (its SIMD kernel) is an ulp away from the correctly rounded value in a few entries (3
    of 128 on this project's CPU) and no float32 table is canonical; frequencies rounded from float64 exponents
    (:func:`vidax.core.embeddings.timestep_embedding`) are an ulp away in 87. The guidance-distilled models embed
    ``guidance_scale * 1000`` (6000), where an ulp of a frequency is 4e-4 rad, so the exponents follow the
    reference.

    Returns:
      float32 ``(128,)``.
    """
    half = TIME_PROJ_DIM // 2
    exponent = np.float32(-math.log(10000.0)) * np.arange(half, dtype=np.float32) / np.float32(half)
    return np.exp(exponent.astype(np.float64)).astype(np.float32)


def time_proj(t: jax.Array) -> jax.Array:
    """``Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0)``: float32 ``(N, 256)``, ``[cos, sin]`` of
    ``t * frequency`` (the product in float32, as the reference), frequencies :func:`time_proj_frequencies`."""
    args = t.astype(jnp.float32)[:, None] * jnp.asarray(time_proj_frequencies())[None, :]
    return jnp.concatenate([jnp.cos(args), jnp.sin(args)], axis=-1)


def _timestep_mlp(p: dict, t: jax.Array) -> jax.Array:
    """:func:`time_proj` then ``TimestepEmbedding`` (linear, SiLU, linear), float32."""
    return _mlp2(p, time_proj(t))


def guidance_input(guidance_scale: float, batch: int, dtype) -> np.ndarray:
    """The ``guidance`` input of a guidance-distilled model as the reference pipelines build it for weights of
    ``dtype``: ``tensor([guidance_scale] * batch, dtype=dtype) * 1000.0`` (diffusers ``HunyuanVideoPipeline``; the
    original repository's ``sample_video`` the same way), i.e. the scale rounded to ``dtype``, multiplied in float32
    and rounded to ``dtype`` again. In bfloat16, 6.0 gives 6016, not 6000 (an 8-bit significand steps by 32 there).

    Returns:
      float32 ``(batch,)`` (exact values of ``dtype``).
    """
    dtype = np.dtype(dtype)
    scale = np.full((batch,), guidance_scale, np.float64).astype(dtype).astype(np.float32)
    return (scale * np.float32(1000.0)).astype(dtype).astype(np.float32)


def condition_embedding(params: dict, timestep: jax.Array, pooled_projections: jax.Array, guidance: jax.Array | None,
                        cfg: HunyuanVideoTransformerConfig) -> tuple[jax.Array, jax.Array | None]:
    """``time_text_embed`` (``HunyuanVideoConditionEmbedding``).

    Args:
      timestep: float32 ``(B,)``; pooled_projections: ``(B, pooled_projection_dim)``;
      guidance: float32 ``(B,)`` (``guidance_scale * 1000``) for guidance-distilled models, else None.

    Returns:
      ``temb``: float32 ``(B, dim)`` = timestep + pooled text (+ guidance) embeddings; ``token_replace_emb``:
      float32 ``(B, dim)`` = timestep-0 + pooled text embeddings (no guidance term, as the reference) for
      ``token_replace`` models, else None.
    """
    p = params["time_text_embed"]
    pooled = _mlp2(p["text_embedder"], pooled_projections.astype(jnp.float32))
    temb = _timestep_mlp(p["timestep_embedder"], timestep) + pooled
    if cfg.guidance_embeds:
        temb = temb + _timestep_mlp(p["guidance_embedder"], guidance)
    token_replace = None
    if cfg.image_condition_type == "token_replace":
        token_replace = _timestep_mlp(p["timestep_embedder"], jnp.zeros_like(timestep)) + pooled
    return temb, token_replace


def _refiner_block(p: dict, h: jax.Array, temb_act: jax.Array, lengths: jax.Array,
                   cfg: HunyuanVideoTransformerConfig, impl: AttentionImpl) -> jax.Array:
    """``HunyuanVideoIndividualTokenRefinerBlock`` on float32 ``h (B, L, dim)``."""
    b, n, _ = h.shape
    dtype = p["attn"]["to_q"]["kernel"].dtype
    gate_msa, gate_mlp = jnp.split(linear(p["norm_out"]["linear"], temb_act, jnp.float32)[:, None, :], 2, axis=-1)
    x = layer_norm(h, p["norm1"], NORM_EPS).astype(dtype)
    q, k, v = (linear(p["attn"][name], x).reshape(b, n, -1, cfg.attention_head_dim)
               for name in ("to_q", "to_k", "to_v"))
    o = attention(q, k, v, implementation=impl, kv_lengths=lengths)
    # The reference's mask is (query valid AND key valid), with key 0 always on: a padded query row attends key 0
    # alone, so its output is v_0 exactly.
    padded = jnp.arange(n)[None, :] >= lengths[:, None]
    o = jnp.where(padded[:, :, None, None], v[:, :1], o)
    h = h + linear(p["attn"]["to_out"], o.reshape(b, n, -1), jnp.float32) * gate_msa
    x = layer_norm(h, p["norm2"], NORM_EPS).astype(dtype)
    return h + linear(p["ff"]["down"], jax.nn.silu(linear(p["ff"]["up"], x)), jnp.float32) * gate_mlp


def refine_text(params: dict, encoder_hidden_states: jax.Array, encoder_attention_mask: jax.Array,
                timestep: jax.Array, cfg: HunyuanVideoTransformerConfig,
                attention_impl: AttentionImpl | str = AttentionImpl.XLA) -> jax.Array:
    """``context_embedder`` (``HunyuanVideoTokenRefiner``): the text states refined by their own small transformer.

    Conditioning: the timestep embedding plus the text states mean-pooled over the mask (float32) projected by
    ``PixArtAlphaTextProjection``; each block gates its attention and MLP (``HunyuanVideoAdaNorm``). Self-attention
    sees the valid text tokens (a right-padded mask, as the reference's key mask assumes).

    Args:
      encoder_hidden_states: ``(B, L, text_embed_dim)``; encoder_attention_mask: ``(B, L)``, nonzero on valid
        tokens (right padding); timestep: float32 ``(B,)``.

    Returns:
      float32 ``(B, L, dim)``.
    """
    p = params["context_embedder"]
    mask = encoder_attention_mask != 0
    m = mask.astype(jnp.float32)[..., None]
    pooled = jnp.sum(encoder_hidden_states.astype(jnp.float32) * m, axis=1) / jnp.sum(m, axis=1)
    tt = p["time_text_embed"]
    temb = _timestep_mlp(tt["timestep_embedder"], timestep) + _mlp2(tt["text_embedder"], pooled)
    h = linear(p["proj_in"], encoder_hidden_states, jnp.float32)
    lengths = jnp.sum(mask, axis=1, dtype=jnp.int32)
    impl, temb_act = AttentionImpl(attention_impl), jax.nn.silu(temb)

    def body(h, blk):
        return _refiner_block(blk, h, temb_act, lengths, cfg, impl), None

    return jax.lax.scan(body, h, p["token_refiner"]["refiner_blocks"])[0]


def embed_video(params: dict, latents: jax.Array, cfg: HunyuanVideoTransformerConfig) -> jax.Array:
    """``x_embedder`` (``Conv3d``, kernel = stride = ``(p_t, p, p)``): float32 ``(B, T'H'W', dim)``, raster order."""
    return patch_embed(params["x_embedder"]["proj"], latents, (cfg.patch_size_t, cfg.patch_size, cfg.patch_size))


# --------------------------------------------------------------------------------------------
# Blocks (written once for one device and for one shard_map shard)
# --------------------------------------------------------------------------------------------


class BlockInputs(NamedTuple):
    """What every block reads besides its streams (a pytree; :func:`forward_prologue` builds it).

    Attributes:
      temb: float32 ``(B, dim)`` conditioning.
      token_replace_emb: float32 ``(B, dim)`` timestep-0 conditioning (``token_replace`` models), else None.
      first_frame: bool ``(S_pad,)``, True on the first latent frame's video tokens (``token_replace``), else None.
      cos, sin: float32 ``(S_pad, head_dim / 2)`` RoPE tables of the video tokens (padding rows: any value).
      kv_lengths: int32 ``(B,)``: valid keys of the joint sequence ``[video; text]``, ``S + text length``.
    """

    temb: jax.Array
    token_replace_emb: jax.Array | None
    first_frame: jax.Array | None
    cos: jax.Array
    sin: jax.Array
    kv_lengths: jax.Array


def _modulation(p: dict, acts: jax.Array, n: int, par: ShardContext) -> list[jax.Array]:
    """An AdaLN projection's ``n`` vectors, float32 ``(rows, dim)`` each, in the reference's chunk order.

    On a mesh each tensor shard holds ``n dim / tp`` output features (with their bias slice): it writes its
    slice into a zero row and the rows are summed over ``tensor`` (an exact all-gather, invariant over
    ``tensor`` for ``shard_map``'s type check).
    """
    mod = linear(p["linear"], acts, jnp.float32)
    if par.tensor is not None:
        width = mod.shape[-1]
        full = jnp.zeros((mod.shape[0], width * jax.lax.axis_size(par.tensor)), mod.dtype)
        mod = par.psum_tensor(jax.lax.dynamic_update_slice_in_dim(full, mod, jax.lax.axis_index(par.tensor) * width, 1))
    return jnp.split(mod, n, axis=-1)


def _modulations(p: dict, temb_act: jax.Array, replace_act: jax.Array | None, inputs: BlockInputs, n: int,
                 par: ShardContext) -> tuple[list[jax.Array], list[jax.Array]]:
    """An AdaLN projection's ``n`` vectors for the video rows and per sample.

    Returns:
      ``(video, sample)``: lists of ``n`` float32 arrays; ``sample`` ``(B, 1, dim)`` (the timestep-t vectors);
      ``video`` the same, or per token ``(B, S_local, dim)`` for ``token_replace`` (the timestep-0 vectors on the
      first latent frame's tokens, ``HunyuanVideoTokenReplaceAdaLayerNormZero``).
    """
    if replace_act is None:
        sample = [v[:, None] for v in _modulation(p, temb_act, n, par)]
        return sample, sample
    b = temb_act.shape[0]
    both = _modulation(p, jnp.concatenate([temb_act, replace_act]), n, par)  # one gather for both
    sel = inputs.first_frame[None, :, None]
    return [jnp.where(sel, v[b:, None], v[:b, None]) for v in both], [v[:b, None] for v in both]


def _qk(p: dict, name: str, norm: str, x: jax.Array, head_dim: int, rope) -> jax.Array:
    """Projection, per-head RMS norm (float32), RoPE if given; float32 ``(B, S, heads, head_dim)``."""
    b, s, _ = x.shape
    y = rms_norm(linear(p[name], x, jnp.float32).reshape(b, s, -1, head_dim), p[norm], NORM_EPS)
    return y if rope is None else apply_rope_interleaved(y, *rope)


def _keys_in_order(k: jax.Array, video_rows: int, text_rows: int, video_tokens: int) -> jax.Array:
    """Joint keys as they arrive from the shards, ``[video_0; text_0; video_1; text_1; ...]`` (``video_rows`` and
    ``text_rows`` per shard), reordered to ``[video[:video_tokens]; text]``: the valid keys first and the text
    padding last, so that one key length per sample masks all padding. One shard: ``[video; text]`` unchanged."""
    b, n, h, d = k.shape
    shards = n // (video_rows + text_rows)
    blocks = k.reshape(b, shards, video_rows + text_rows, h, d)
    video = blocks[:, :, :video_rows].reshape(b, shards * video_rows, h, d)[:, :video_tokens]
    text = blocks[:, :, video_rows:].reshape(b, shards * text_rows, h, d)
    return jnp.concatenate([video, text], axis=1)


def _joint_attention(p: dict, names: tuple[dict, dict], nx: jax.Array, nc: jax.Array, inputs: BlockInputs,
                     cfg: HunyuanVideoTransformerConfig, impl: AttentionImpl, par: ShardContext,
                     video_tokens: int) -> tuple[jax.Array, jax.Array]:
    """``HunyuanVideoAttnProcessor2_0`` on this shard's video rows ``nx (B, Sx, dim)`` and text rows
    ``nc (B, Lc, dim)``.

    ``names``: the video and text streams' ``{"q", "k", "v", "norm_q", "norm_k"}`` parameter names (the same in the
    single-stream blocks). Column-parallel q/k/v (this shard's heads), RMS q/k norms, RoPE on video queries and
    keys, then attention over the whole joint sequence with text padding masked (module docstring).

    Returns:
      the attention outputs of this shard's video and text rows, ``(B, Sx, dim/tp)`` and ``(B, Lc, dim/tp)``, in the
      weight dtype (the input of the row-parallel output projections).
    """
    hd, dtype = cfg.attention_head_dim, p[names[0]["q"]]["kernel"].dtype
    rope = (inputs.cos, inputs.sin)
    streams = []
    for x, n, r in ((nx, names[0], rope), (nc, names[1], None)):
        q = _qk(p, n["q"], n["norm_q"], x, hd, r).astype(dtype)
        k = _qk(p, n["k"], n["norm_k"], x, hd, r).astype(dtype)
        v = linear(p[n["v"]], x).reshape(*x.shape[:2], -1, hd)
        streams.append((q, k, v))
    sx, lc = nx.shape[1], nc.shape[1]
    q, k, v = (jnp.concatenate([a, b], axis=1) for a, b in zip(*streams))
    # Ulysses: (B, Sx + Lc, H/tp, hd) -> (B, sp (Sx + Lc), H/(tp sp), hd) and back (or keys/values all-gathered).
    q, k, v = par.to_attention(q, k, v)
    k, v = _keys_in_order(k, sx, lc, video_tokens), _keys_in_order(v, sx, lc, video_tokens)
    o = par.from_attention(attention(q, k, v, implementation=impl, kv_lengths=inputs.kv_lengths))
    o = o.reshape(*o.shape[:2], -1)
    return o[:, :sx], o[:, sx:]


def _ff(p: dict, x: jax.Array, par: ShardContext) -> jax.Array:
    """``FeedForward(activation_fn="gelu-approximate")``: column-parallel up, row-parallel down (bias once)."""
    return par.row_linear(p["down"], gelu_tanh(linear(p["up"], x)), jnp.float32)


_VIDEO = {"q": "to_q", "k": "to_k", "v": "to_v", "norm_q": "norm_q", "norm_k": "norm_k"}
_TEXT = {"q": "add_q_proj", "k": "add_k_proj", "v": "add_v_proj", "norm_q": "norm_added_q", "norm_k": "norm_added_k"}


def double_block(p: dict, x: jax.Array, c: jax.Array, inputs: BlockInputs, cfg: HunyuanVideoTransformerConfig,
                 impl: AttentionImpl, par: ShardContext = ShardContext(), video_tokens: int | None = None):
    """One dual-stream block (``HunyuanVideoTransformerBlock`` / ``HunyuanVideoTokenReplaceTransformerBlock``).

    Args:
      p: one block's parameters (no ``layers`` axis); on a mesh, this shard's slices.
      x: float32 video rows ``(B, Sx, dim)``; c: float32 text rows ``(B, Lc, dim)`` (this shard's).
      inputs: :class:`BlockInputs` (this shard's rows of the per-token ones).
      video_tokens: ``S``, the video tokens before padding (default: all rows of ``x``, one device).

    Returns:
      float32 ``(x, c)``, same shapes.
    """
    video_tokens = x.shape[1] if video_tokens is None else video_tokens
    dtype = p["attn"]["to_q"]["kernel"].dtype
    temb_act = jax.nn.silu(inputs.temb)
    replace_act = None if inputs.token_replace_emb is None else jax.nn.silu(inputs.token_replace_emb)
    shift, scale, gate, shift2, scale2, gate2 = _modulations(p["norm1"], temb_act, replace_act, inputs, 6, par)[0]
    c_shift, c_scale, c_gate, c_shift2, c_scale2, c_gate2 = (
        v[:, None] for v in _modulation(p["norm1_context"], temb_act, 6, par))
    with jax.named_scope("attention"):
        nx = (layer_norm(x, None, NORM_EPS) * (1.0 + scale) + shift).astype(dtype)
        nc = (layer_norm(c, None, NORM_EPS) * (1.0 + c_scale) + c_shift).astype(dtype)
        ax, ac = _joint_attention(p["attn"], (_VIDEO, _TEXT), nx, nc, inputs, cfg, impl, par, video_tokens)
        x = x + par.row_linear(p["attn"]["to_out"], ax, jnp.float32) * gate
        c = c + par.row_linear(p["attn"]["to_add_out"], ac, jnp.float32) * c_gate
    with jax.named_scope("ff"):
        nx = (layer_norm(x, None, NORM_EPS) * (1.0 + scale2) + shift2).astype(dtype)
        nc = (layer_norm(c, None, NORM_EPS) * (1.0 + c_scale2) + c_shift2).astype(dtype)
        x = x + gate2 * _ff(p["ff"], nx, par)
        c = c + c_gate2 * _ff(p["ff_context"], nc, par)
    return x, c


def single_block(p: dict, x: jax.Array, c: jax.Array, inputs: BlockInputs, cfg: HunyuanVideoTransformerConfig,
                 impl: AttentionImpl, par: ShardContext = ShardContext(), video_tokens: int | None = None):
    """One single-stream block (``HunyuanVideoSingleTransformerBlock`` / its ``TokenReplace`` variant).

    The reference concatenates ``[video; text]`` and splits them again at the end of the block; every operation
    but attention is per token with shared weights, so the two streams are kept apart here (the layout
    :func:`double_block` uses) and meet in attention. Attention and MLP read the same normalised input; the output
    projection over ``[attention; MLP]`` is the sum of its two row-parallel halves, reduced once, bias once.

    Args and returns: as :func:`double_block`.
    """
    video_tokens = x.shape[1] if video_tokens is None else video_tokens
    dtype = p["attn"]["to_q"]["kernel"].dtype
    temb_act = jax.nn.silu(inputs.temb)
    replace_act = None if inputs.token_replace_emb is None else jax.nn.silu(inputs.token_replace_emb)
    (shift, scale, gate), (c_shift, c_scale, c_gate) = _modulations(p["norm"], temb_act, replace_act, inputs, 3, par)
    nx = (layer_norm(x, None, NORM_EPS) * (1.0 + scale) + shift).astype(dtype)
    nc = (layer_norm(c, None, NORM_EPS) * (1.0 + c_scale) + c_shift).astype(dtype)
    with jax.named_scope("attention"):
        ax, ac = _joint_attention(p["attn"], (_VIDEO, _VIDEO), nx, nc, inputs, cfg, impl, par, video_tokens)
    po = p["proj_out"]

    def out(a: jax.Array, n: jax.Array) -> jax.Array:
        m = gelu_tanh(linear(p["proj_mlp"], n))
        y = (jnp.matmul(a.astype(po["attn"]["kernel"].dtype), po["attn"]["kernel"], preferred_element_type=jnp.float32)
             + jnp.matmul(m.astype(po["mlp"]["kernel"].dtype), po["mlp"]["kernel"], preferred_element_type=jnp.float32))
        return par.psum_tensor(y) + po["bias"].astype(jnp.float32)

    with jax.named_scope("mlp_out"):
        x = x + gate * out(ax, nx)
        c = c + c_gate * out(ac, nc)
    return x, c


_BLOCKS = {"double": double_block, "single": single_block}


# --------------------------------------------------------------------------------------------
# Forward
# --------------------------------------------------------------------------------------------


def run_blocks(blocks: dict, x: jax.Array, c: jax.Array, inputs: BlockInputs, *, kind: str,
               cfg: HunyuanVideoTransformerConfig, video_tokens: int,
               attention_impl: AttentionImpl | str = AttentionImpl.XLA, mesh: Mesh | None = None,
               rules: ShardingRules = HUNYUAN_VIDEO_RULES) -> tuple[jax.Array, jax.Array]:
    """Run a stack of blocks of one kind (all, or a chunk: the offloading hook) under ``lax.scan``.

    On a mesh the scan runs inside one ``shard_map`` over every mesh axis: batch over ``data``, both streams'
    rows over ``sequence`` (Ulysses), heads, MLP width and AdaLN features over ``tensor`` (Megatron), the
    collectives written in :class:`vidax.core.parallel.ShardContext`.

    Args:
      blocks: stacked parameters of ``params[STACKS[kind]]`` (leading ``layers`` axis, any length).
      x: float32 video stream ``(B, S_pad, dim)``; c: float32 text stream ``(B, L_pad, dim)`` (from
        :func:`forward_prologue`, padded to multiples of sp).
      inputs: :class:`BlockInputs`.
      kind: ``"double"`` or ``"single"`` (static).
      video_tokens: ``S``, video tokens before padding (static).
      cfg, attention_impl, mesh, rules: static; ``mesh`` None runs on one device.

    Returns:
      float32 ``(x, c)``, same shapes; on a mesh sharded ``P(data, sequence, None)``.
    """
    impl = AttentionImpl(attention_impl)
    fn_block = _BLOCKS[kind]

    def scan(blocks, x, c, inputs, par):
        def body(carry, p):
            return fn_block(p, *carry, inputs, cfg, impl, par, video_tokens), None

        return jax.lax.scan(body, (x, c), blocks)[0]

    if mesh is None:
        return scan(blocks, x, c, inputs, ShardContext())
    check_parallel(cfg, mesh, rules)
    tp = axis_size(mesh, rules.mesh_axes("heads"))
    sp = axis_size(mesh, rules.mesh_axes("tokens"))
    ulysses = sequence_mode(cfg.num_attention_heads // tp, sp) == "ulysses"
    par = ShardContext(tensor=rules.mesh_axes("heads"), sequence=rules.mesh_axes("tokens"), ulysses=ulysses)
    io = block_io_specs(rules)
    spec_inputs = BlockInputs(io["temb"], None if inputs.token_replace_emb is None else io["temb"],
                              None if inputs.first_frame is None else io["first_frame"], io["rope"], io["rope"],
                              io["kv_lengths"])
    in_specs = (rules.param_specs(transformer_specs(cfg))[STACKS[kind]], io["stream"], io["stream"], spec_inputs)
    # Kernel calls (Pallas, cuDNN, FFI) carry no varying-manual-axes types; the einsum paths keep the check.
    fn = jax.shard_map(partial(scan, par=par), mesh=mesh, in_specs=in_specs, out_specs=(io["stream"], io["stream"]),
                       check_vma=not is_kernel(impl))
    return fn(blocks, x, c, inputs)


def block_io_specs(rules: ShardingRules = HUNYUAN_VIDEO_RULES) -> dict:
    """``PartitionSpec`` of each :func:`run_blocks` input on a mesh.

    Returns:
      ``{"stream": P(data, sequence, None)`` (x and c), ``"temb": P(data, None)``, ``"first_frame": P(sequence)``,
      ``"rope": P(sequence, None)`` (cos and sin), ``"kv_lengths": P(data)}`` under :data:`HUNYUAN_VIDEO_RULES`.
    """
    return {"stream": rules.spec(("batch", "tokens", "embed")), "temb": rules.spec(("batch", None)),
            "first_frame": rules.spec(("tokens",)), "rope": rules.spec(("tokens", None)),
            "kv_lengths": rules.spec(("batch",))}


def output_head(params: dict, x: jax.Array, temb: jax.Array, grid: tuple[int, int, int],
                cfg: HunyuanVideoTransformerConfig) -> jax.Array:
    """``norm_out`` (``AdaLayerNormContinuous``: LayerNorm, ``* (1 + scale) + shift``), ``proj_out``, unpatchify.

    Args:
      x: float32 video tokens ``(B, S, dim)``; temb: float32 ``(B, dim)``; grid: ``(T', H', W')``.

    Returns:
      float32 ``(B, out_channels, T, H, W)``.
    """
    with jax.named_scope("head"):
        act = jax.nn.silu(temb)
        scale = linear(params["norm_out"]["scale_linear"], act, jnp.float32)[:, None]
        shift = linear(params["norm_out"]["shift_linear"], act, jnp.float32)[:, None]
        x = linear(params["proj_out"], layer_norm(x, None, NORM_EPS) * (1.0 + scale) + shift, jnp.float32)
    # Features in (C, p_t, p, p) order, as the reference reshapes them.
    b = x.shape[0]
    t, h, w = grid
    pt, p, c = cfg.patch_size_t, cfg.patch_size, cfg.out_channels
    x = x.reshape(b, t, h, w, c, pt, p, p).transpose(0, 4, 1, 5, 2, 6, 3, 7)
    return x.reshape(b, c, t * pt, h * p, w * p)


def check_inputs(cfg: HunyuanVideoTransformerConfig, latent_shape, timestep_shape, text_shape, mask_shape,
                 pooled_shape, guidance_shape) -> None:
    """Check the shapes of :func:`forward`'s inputs (before anything is traced).

    Raises:
      ValueError: every mismatch at once, naming the input, its shape and the expected one.
    """
    token_grid(cfg, latent_shape)
    b, ch = latent_shape[:2]
    problems = []
    if ch != cfg.in_channels:
        problems.append(f"latents have {ch} channels, the transformer takes in_channels={cfg.in_channels}"
                        + (" (noise, image latents and mask concatenated)" if cfg.image_condition_type ==
                           "latent_concat" else ""))
    if math.prod(timestep_shape) not in (1, b) or len(timestep_shape) > 1:
        problems.append(f"timestep shape {tuple(timestep_shape)} (expected ({b},) or a scalar)")
    if len(text_shape) != 3 or text_shape[0] != b or text_shape[2] != cfg.text_embed_dim:
        problems.append(f"encoder_hidden_states shape {tuple(text_shape)} (expected ({b}, L, {cfg.text_embed_dim}))")
    elif tuple(mask_shape) != tuple(text_shape[:2]):
        problems.append(f"encoder_attention_mask shape {tuple(mask_shape)} (expected {tuple(text_shape[:2])})")
    if tuple(pooled_shape) != (b, cfg.pooled_projection_dim):
        problems.append(f"pooled_projections shape {tuple(pooled_shape)} (expected ({b}, {cfg.pooled_projection_dim}))")
    if cfg.guidance_embeds and guidance_shape is None:
        problems.append("guidance is None, but this transformer is guidance-distilled (guidance_embeds=true): pass "
                        "guidance = guidance_scale * 1000 per sample")
    elif not cfg.guidance_embeds and guidance_shape is not None:
        problems.append("guidance was given, but this transformer has no guidance embedder (guidance_embeds=false): "
                        "pass guidance=None")
    elif guidance_shape is not None and (math.prod(guidance_shape) not in (1, b) or len(guidance_shape) > 1):
        problems.append(f"guidance shape {tuple(guidance_shape)} (expected ({b},) or a scalar)")
    if problems:
        raise ValueError("HunyuanVideo transformer inputs: " + "; ".join(problems))


@partial(jax.jit, static_argnames=("cfg", "attention_impl", "mesh", "rules"))
def forward(
    params: dict,
    latents: jax.Array,
    timestep: jax.Array,
    encoder_hidden_states: jax.Array,
    encoder_attention_mask: jax.Array,
    pooled_projections: jax.Array,
    guidance: jax.Array | None = None,
    *,
    cfg: HunyuanVideoTransformerConfig,
    attention_impl: AttentionImpl | str = AttentionImpl.XLA,
    mesh: Mesh | None = None,
    rules: ShardingRules = HUNYUAN_VIDEO_RULES,
) -> jax.Array:
    """Predict the flow-matching velocity for a batch of latents (diffusers ``HunyuanVideoTransformer3DModel.forward``).

    Stages: :func:`forward_prologue` (conditioning, token refiner, patch embedding, padding) ->
    :func:`run_blocks` (dual-stream stack, then single-stream stack) -> :func:`forward_epilogue` (head,
    unpatchify). Outside the block stacks GSPMD partitions the computation (batch over ``data``; embedders,
    refiner and head replicated); call it under ``jax.set_mesh(mesh)`` (``vidax.core.placement.mesh_context``) so
    that attention kernels outside ``shard_map`` (the refiner's) run per shard.

    Args:
      params: parameter tree of :func:`transformer_specs` (on a mesh: placed with
        ``rules.param_shardings(transformer_specs(cfg), mesh)``, or loaded with
        ``load_params(..., shardings=rules.sharding_fn(mesh))``).
      latents: ``(B, in_channels, T, H, W)`` (any float dtype); ``latent_concat`` models: noise, image latents
        and mask concatenated on channels by the caller. ``T`` divisible by ``patch_size_t``, ``H, W`` by
        ``patch_size``.
      timestep: ``(B,)`` (or a scalar) timesteps in ``[0, 1000]``, converted to float32.
      encoder_hidden_states: ``(B, L, text_embed_dim)`` Llama states (any float dtype).
      encoder_attention_mask: ``(B, L)`` (bool / int / float), nonzero on valid tokens; padding on the right (the
        reference's joint mask counts the valid tokens). A sample needs at least one valid token (the reference's
        mean pooling divides by the count).
      pooled_projections: ``(B, pooled_projection_dim)`` pooled CLIP text projection.
      guidance: ``(B,)`` (or a scalar) ``guidance_scale * 1000`` for guidance-distilled models
        (``cfg.guidance_embeds``), else None; used as given (float32). The reference pipelines build it in the
        transformer dtype (bf16: 6.0 -> 6016): :func:`guidance_input` does the same.
      cfg: the architecture (static).
      attention_impl: see :mod:`vidax.core.attention` (static).
      mesh: a :func:`vidax.core.sharding.make_mesh` mesh (static), or None for one device.
      rules: sharding rules (static), default :data:`HUNYUAN_VIDEO_RULES`.

    Returns:
      float32 ``(B, out_channels, T, H, W)``.

    Raises:
      ValueError: an input of the wrong shape, a missing (or unexpected) ``guidance``
        (:func:`check_inputs`); a mesh the model cannot use (:func:`vidax.models.hunyuanvideo.sharding.check_parallel`).
    """
    x, c, inputs = forward_prologue(params, latents, timestep, encoder_hidden_states, encoder_attention_mask,
                                    pooled_projections, guidance, cfg=cfg, attention_impl=attention_impl, mesh=mesh,
                                    rules=rules)
    s = num_tokens(cfg, latents.shape)
    for kind in ("double", "single"):
        with jax.named_scope(STACKS[kind]):
            x, c = run_blocks(params[STACKS[kind]], x, c, inputs, kind=kind, cfg=cfg, video_tokens=s,
                              attention_impl=attention_impl, mesh=mesh, rules=rules)
    return forward_epilogue(params, x, inputs.temb, cfg=cfg, latent_shape=tuple(latents.shape))


def forward_prologue(params: dict, latents: jax.Array, timestep: jax.Array, encoder_hidden_states: jax.Array,
                     encoder_attention_mask: jax.Array, pooled_projections: jax.Array,
                     guidance: jax.Array | None = None, *, cfg: HunyuanVideoTransformerConfig,
                     attention_impl: AttentionImpl | str = AttentionImpl.XLA, mesh: Mesh | None = None,
                     rules: ShardingRules = HUNYUAN_VIDEO_RULES):
    """:func:`forward` up to the block stacks.

    Args and raises: as :func:`forward` (``params`` need not hold the block stacks).

    Returns:
      ``(x, c, inputs)``: float32 video stream ``(B, S_pad, dim)`` and refined text stream ``(B, L_pad, dim)``
      (zero-padded to multiples of sp), and the :class:`BlockInputs`.
    """
    guidance_shape = None if guidance is None else jnp.shape(guidance)
    check_inputs(cfg, latents.shape, jnp.shape(timestep), encoder_hidden_states.shape, encoder_attention_mask.shape,
                 pooled_projections.shape, guidance_shape)
    b = latents.shape[0]
    check_parallel(cfg, mesh, rules, b)
    grid = token_grid(cfg, latents.shape)
    if mesh is not None:
        latents = jax.lax.with_sharding_constraint(
            latents, NamedSharding(mesh, rules.spec(("batch",) + (None,) * (latents.ndim - 1))))
    timestep = jnp.broadcast_to(jnp.asarray(timestep, jnp.float32).reshape(-1), (b,))
    if guidance is not None:
        guidance = jnp.broadcast_to(jnp.asarray(guidance, jnp.float32).reshape(-1), (b,))
    with jax.named_scope("time_text_embed"):
        temb, token_replace = condition_embedding(params, timestep, pooled_projections, guidance, cfg)
    with jax.named_scope("context_embedder"):
        c = refine_text(params, encoder_hidden_states, encoder_attention_mask, timestep, cfg, attention_impl)
    with jax.named_scope("x_embedder"):
        x = embed_video(params, latents, cfg)
    s, n_text = x.shape[1], c.shape[1]
    sp = axis_size(mesh, rules.mesh_axes("tokens"))
    s_pad = padded_length(s, sp)
    x, c = pad_axis(x, 1, s_pad), pad_axis(c, 1, padded_length(n_text, sp))
    cos, sin = (pad_axis(t, 0, s_pad) for t in rope_tables(cfg, grid))
    first = jnp.arange(s_pad) < grid[1] * grid[2] if token_replace is not None else None
    kv_lengths = s + jnp.sum(encoder_attention_mask != 0, axis=1, dtype=jnp.int32)
    return x, c, BlockInputs(temb, token_replace, first, cos, sin, kv_lengths)


def forward_epilogue(params: dict, x: jax.Array, temb: jax.Array, *, cfg: HunyuanVideoTransformerConfig,
                     latent_shape: tuple[int, ...]) -> jax.Array:
    """:func:`forward` after the block stacks: the video tokens (padding cut), then :func:`output_head`.

    Args:
      x: float32 video stream ``(B, S_pad, dim)`` from :func:`run_blocks`; temb: float32 ``(B, dim)``
        (``BlockInputs.temb``); latent_shape: the transformer input's shape ``(B, C, T, H, W)``.

    Returns:
      float32 ``(B, out_channels, T, H, W)``.
    """
    grid = token_grid(cfg, latent_shape)
    return output_head(params, x[:, :math.prod(grid)], temb, grid, cfg)
