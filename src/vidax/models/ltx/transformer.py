"""The LTX-Video diffusion transformer, as pure functions over a parameter dict.

Follows diffusers ``models/transformers/transformer_ltx.py`` (``LTXVideoTransformer3DModel``,
``LTXVideoTransformerBlock``, ``LTXAttention`` with ``LTXVideoAttnProcessor``,
``LTXVideoRotaryPosEmbed``, ``apply_rotary_emb``), ``models/normalization.py``
(``AdaLayerNormSingle``, ``RMSNorm``) and ``models/embeddings.py``
(``PixArtAlphaCombinedTimestepSizeEmbeddings``, ``PixArtAlphaTextProjection``).

Architecture: video tokens (one per latent pixel: ``patch_size = patch_size_t = 1`` in every
release) are projected by ``proj_in``; every block runs self-attention with 3D RoPE over the
tokens, cross-attention to the projected T5 tokens (padding masked), and a GELU FFN, with
PixArt-style AdaLN-single modulation: one timestep embedding projected to ``6 * dim`` values for
the whole model, plus a learned ``scale_shift_table`` per block. Timesteps are per sample ``(B,)``
or per token ``(B, S)`` (the conditioning pipelines give conditioning tokens their own noise level).

Tokens come in packed, ``(B, S, in_channels)``, as the reference's transformer takes them; the
pipelines pack and unpack latents (:func:`vidax.models.ltx.pipeline`). RoPE positions are given as
fractional coordinates ``(S, 3)`` (frame, row, column divided by the reference's base sizes 20,
2048, 2048), built on the host by :func:`grid_coords` (``LTXPipeline``) or :func:`video_coords`
(``LTXConditionPipeline``).

Stages: condition embedding (timestep, caption) -> ``proj_in`` -> blocks (stacked, under
``lax.scan``: one block compiles once) -> AdaLN head -> ``proj_out``. Each stage sits in a
``jax.named_scope``.

Parallelism (``forward(..., mesh=...)``): the block stack runs inside one ``shard_map`` over the
``(data, tensor, sequence)`` mesh: Megatron tensor parallelism over heads (q/k/v, the across-heads
QK-RMSNorm reduced over shards, RoPE tables cut per head) and FFN width, DeepSpeed-Ulysses sequence
parallelism over video tokens (text keys not split). Shardings come from
:data:`vidax.models.ltx.sharding.LTX_RULES`.

Precision: the residual stream between and inside blocks is float32 whatever the weight dtype
(paper Table 4 fault 1; the reference keeps it in the model dtype); matmul inputs are cast to the
weight dtype; norms compute in float32; the timestep embedder, the AdaLN projection, the AdaLN
tables (``scale_shift_table``, paper Table 4 fault 4) and the norm scales are float32 leaves.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding

from vidax.core.attention import AttentionImpl, attention, is_kernel
from vidax.core.embeddings import timestep_embedding
from vidax.core.layers import gelu_tanh, layer_norm, linear, rms_norm
from vidax.core.parallel import ShardContext, pad_axis, padded_length, sequence_mode
from vidax.core.params import ParamSpec, SpecTree, linear_spec
from vidax.core.rope import apply_rope_interleaved, linspace_f32
from vidax.core.sharding import ShardingRules, axis_size
from vidax.models.ltx.config import LTXVideoTransformerConfig
from vidax.models.ltx.sharding import LTX_RULES, check_parallel

#: Epsilon of the q/k RMSNorms (fixed in diffusers' ``LTXAttention``).
QK_NORM_EPS = 1e-5
#: Epsilon of the output LayerNorm (``norm_out``, fixed in the reference).
OUT_NORM_EPS = 1e-6
#: Width of the sinusoidal timestep features (``PixArtAlphaCombinedTimestepSizeEmbeddings``).
TIMESTEP_FEATURES = 256
#: The RoPE coordinate bases (frames, height, width) of ``LTXVideoRotaryPosEmbed`` and its theta.
ROPE_BASE = (20, 2048, 2048)
ROPE_THETA = 10000.0

# --------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------


def _attention_specs(cfg: LTXVideoTransformerConfig, layers: int) -> dict:
    d = cfg.dim
    qkv = {n: linear_spec(d, d, ("embed", "heads"), layers=layers, bias=cfg.attention_bias) for n in ("to_q", "to_k", "to_v")}
    return {
        **qkv,
        "norm_q": {"scale": ParamSpec((layers, d), fp32=True, axes=("layers", "heads"))},
        "norm_k": {"scale": ParamSpec((layers, d), fp32=True, axes=("layers", "heads"))},
        "to_out": linear_spec(d, d, ("heads", "embed"), layers=layers, bias=cfg.attention_out_bias),
    }


def transformer_specs(cfg: LTXVideoTransformerConfig) -> SpecTree:
    """The spec tree of an LTX-Video transformer: every parameter's shape, fp32 pin and logical axes.

    Block parameters lead with a ``layers`` axis of size ``num_layers``. Paths follow the diffusers
    module names, except ``transformer_blocks`` -> ``blocks``, ``to_out.0`` -> ``to_out`` and the
    feed-forward pair ``ff/up``, ``ff/down`` (diffusers ``ff.net.0.proj``, ``ff.net.2``).
    """
    d, L = cfg.dim, cfg.num_layers
    blocks: SpecTree = {}
    if cfg.norm_elementwise_affine:
        blocks["norm1"] = {"scale": ParamSpec((L, d), fp32=True, axes=("layers", "embed"))}
        blocks["norm2"] = {"scale": ParamSpec((L, d), fp32=True, axes=("layers", "embed"))}
    blocks.update({
        "attn1": _attention_specs(cfg, L),
        "attn2": _attention_specs(cfg, L),
        "ff": {
            "up": linear_spec(d, cfg.ff_inner_dim, ("embed", "mlp"), layers=L),
            "down": linear_spec(cfg.ff_inner_dim, d, ("mlp", "embed"), layers=L),
        },
        "scale_shift_table": ParamSpec((L, 6, d), fp32=True, axes=("layers", None, "embed")),
    })
    return {
        "proj_in": linear_spec(cfg.in_channels, d, (None, "embed")),
        "scale_shift_table": ParamSpec((2, d), fp32=True, axes=(None, "embed")),
        "time_embed": {
            "emb": {"timestep_embedder": {
                "linear_1": linear_spec(TIMESTEP_FEATURES, d, (None, "embed"), fp32=True),
                "linear_2": linear_spec(d, d, ("embed", None), fp32=True),
            }},
            "linear": linear_spec(d, 6 * d, ("embed", None), fp32=True),
        },
        "caption_projection": {
            "linear_1": linear_spec(cfg.caption_channels, d, (None, "embed")),
            "linear_2": linear_spec(d, d, ("embed", None)),
        },
        "blocks": blocks,
        "proj_out": linear_spec(d, cfg.out_channels, ("embed", None)),
    }


# --------------------------------------------------------------------------------------------
# RoPE coordinates and tables (host, NumPy float32 as the reference computes them)
# --------------------------------------------------------------------------------------------


def grid_coords(cfg: LTXVideoTransformerConfig, grid: tuple[int, int, int],
                rope_interpolation_scale: tuple[float, float, float]) -> np.ndarray:
    """Fractional RoPE coordinates of a token grid, as ``LTXPipeline`` makes the transformer build them.

    Token ``(f, h, w)`` sits at ``(f * s_t * patch_size_t / 20, h * s_h * patch_size / 2048,
    w * s_w * patch_size / 2048)`` with ``rope_interpolation_scale = (s_t, s_h, s_w)`` (the pipeline
    passes ``(vae_temporal_compression / frame_rate, vae_spatial_compression, vae_spatial_compression)``).
    Float32, in the reference's operation order (``LTXVideoRotaryPosEmbed._prepare_video_coords``).

    Args:
      grid: ``(F, H, W)`` tokens (latent frames, rows, columns).

    Returns:
      float32 ``(F * H * W, 3)``, tokens in ``(f, h, w)`` raster order.
    """
    f, h, w = grid
    axes = [np.arange(n, dtype=np.float32) for n in (f, h, w)]
    patch = (cfg.patch_size_t, cfg.patch_size, cfg.patch_size)
    scaled = [((a * np.float32(s)) * np.float32(p)) / np.float32(base)
              for a, s, p, base in zip(axes, rope_interpolation_scale, patch, ROPE_BASE)]
    mesh = np.meshgrid(*scaled, indexing="ij")
    return np.stack([m.reshape(-1) for m in mesh], axis=-1).astype(np.float32)


def video_coords(pixel_coords: np.ndarray, frame_rate: float) -> np.ndarray:
    """Fractional RoPE coordinates from ``LTXConditionPipeline``'s pixel coordinates.

    The condition pipeline gives each token its position in the decoded video, ``(frame, y, x)``
    (``_scale_video_ids``: the latent frame ``f`` at frame ``max(0, 8 f + 1 - 8)``), multiplies the
    frame by ``1 / frame_rate`` and the transformer divides by the bases ``(20, 2048, 2048)``; float32
    in that order.

    Args:
      pixel_coords: ``(S, 3)`` ``(frame, y, x)`` per token, any numeric dtype.
      frame_rate: frames per second.

    Returns:
      float32 ``(S, 3)``.
    """
    c = np.asarray(pixel_coords, np.float32).copy()
    c[:, 0] = c[:, 0] * np.float32(1.0 / frame_rate)
    return (c / np.asarray(ROPE_BASE, np.float32)).astype(np.float32)


def rope_tables(cfg: LTXVideoTransformerConfig, coords: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``cos, sin`` of LTX-Video's 3D RoPE for tokens at fractional ``coords``, cut per head.

    ``LTXVideoRotaryPosEmbed``: ``dim // 6`` frequencies ``theta ** linspace(0, 1) * pi / 2`` per axis,
    angle ``freq * (2 * coord - 1)``, interleaved per frequency as (frame, row, column), each angle
    rotating one adjacent feature pair of the whole ``dim`` width; the first ``(dim % 6) / 2`` pairs are
    not rotated. Computed in float32 in the reference's operation order (the model was trained with
    float32 tables, whose top angles reach ``theta * pi / 2`` ~ 1.6e4 rad, where a float32 ulp is 1e-3).

    Args:
      coords: float32 ``(S, 3)`` from :func:`grid_coords` or :func:`video_coords`.

    Returns:
      float32 ``cos, sin``, each ``(S, num_attention_heads, attention_head_dim / 2)``: pair ``j`` of head
      ``h`` is pair ``h * head_dim / 2 + j`` of the full width.
    """
    d = cfg.dim
    n = d // 6
    freqs = (np.power(np.float64(ROPE_THETA), linspace_f32(0.0, 1.0, n).astype(np.float64))).astype(np.float32)
    freqs = (freqs * np.float32(math.pi)) / np.float32(2.0)
    grid = np.asarray(coords, np.float32) * np.float32(2.0) - np.float32(1.0)  # (S, 3)
    angles = (freqs[None, :, None] * grid[:, None, :]).reshape(len(grid), 3 * n)  # pairs (freq, axis)
    cos = np.cos(angles.astype(np.float64)).astype(np.float32)
    sin = np.sin(angles.astype(np.float64)).astype(np.float32)
    pad = (d % 6) // 2
    if pad:
        cos = np.concatenate([np.ones((len(grid), pad), np.float32), cos], axis=1)
        sin = np.concatenate([np.zeros((len(grid), pad), np.float32), sin], axis=1)
    shape = (len(grid), cfg.num_attention_heads, cfg.attention_head_dim // 2)
    return cos.reshape(shape), sin.reshape(shape)


# --------------------------------------------------------------------------------------------
# Forward
# --------------------------------------------------------------------------------------------


def _self_attention(p, x, cos, sin, cfg, impl, par, valid_tokens):
    b, s, _ = x.shape
    hd = cfg.attention_head_dim
    # Column-parallel q/k/v (this shard's heads); the RMSNorm spans all heads (psum over tensor shards).
    q = par.rms_norm(linear(p["to_q"], x), p["norm_q"], cfg.dim, QK_NORM_EPS)
    k = par.rms_norm(linear(p["to_k"], x), p["norm_k"], cfg.dim, QK_NORM_EPS)
    v = linear(p["to_v"], x).reshape(b, s, -1, hd)
    q = apply_rope_interleaved(q.reshape(b, s, -1, hd), cos, sin)
    k = apply_rope_interleaved(k.reshape(b, s, -1, hd), cos, sin)
    # Ulysses: (B, S/sp, H/tp, hd) -> (B, S, H/(tp*sp), hd) and back (or keys/values all-gathered).
    q, k, v = par.to_attention(q, k, v)
    kv_lengths = None if valid_tokens in (None, k.shape[1]) else jnp.full((b,), valid_tokens, jnp.int32)
    o = par.from_attention(attention(q, k, v, implementation=impl, kv_lengths=kv_lengths))
    return par.row_linear(p["to_out"], o.reshape(b, s, -1), jnp.float32)


def _cross_attention(p, x, context, context_lengths, cfg, impl, par):
    # Text keys are not sequence-split: every shard attends its tokens to all text tokens, for its heads.
    b, s, _ = x.shape
    hd = cfg.attention_head_dim
    q = par.rms_norm(linear(p["to_q"], x), p["norm_q"], cfg.dim, QK_NORM_EPS).reshape(b, s, -1, hd)
    k = par.rms_norm(linear(p["to_k"], context), p["norm_k"], cfg.dim, QK_NORM_EPS)
    k = k.reshape(b, context.shape[1], -1, hd)
    v = linear(p["to_v"], context).reshape(b, context.shape[1], -1, hd)
    # The reference adds -10000 to padded keys' scores; masking them out is the same to float32 precision.
    o = attention(q, k, v, implementation=impl, kv_lengths=context_lengths)
    return par.row_linear(p["to_out"], o.reshape(b, s, -1), jnp.float32)


def _modulation(table: jax.Array, temb: jax.Array, n: int) -> list[jax.Array]:
    """AdaLN pieces ``table + temb``: ``n`` float32 arrays ``(B, 1 or S, D)``.

    Args:
      table: ``(n, D)``; temb: ``(B, 1 or S, n, D)``.
    """
    mod = table.astype(jnp.float32)[None, None] + temb
    return [mod[:, :, i] for i in range(n)]


def block(p: dict, x: jax.Array, context: jax.Array, context_lengths: jax.Array | None, temb6: jax.Array, cos, sin,
          cfg: LTXVideoTransformerConfig, impl: AttentionImpl, par: ShardContext = ShardContext(),
          valid_tokens: int | None = None) -> jax.Array:
    """One ``LTXVideoTransformerBlock``.

    Written once for one device and for one ``shard_map`` shard (``par`` supplies the collectives;
    identity by default). Shapes are per shard.

    Args:
      p: one block's parameters (no ``layers`` axis); q/k/v, FFN-up and the QK-norm scales hold this
        shard's ``1/tp`` of their features, ``to_out``/FFN-down ``1/tp`` of their rows.
      x: float32 residual stream ``(B, S/sp, D)``.
      context: projected text ``(B, L, D)``, compute dtype (not split).
      context_lengths: int32 ``(B,)`` valid text tokens per sample (right padding), or None (all valid).
      temb6: float32 ``(B, 1, 6, D)`` per sample, or ``(B, S/sp, 6, D)`` per token.
      cos, sin: float32 RoPE tables ``(S/sp, H/tp, head_dim/2)``.
      valid_tokens: video tokens before padding (padded keys are masked); None: no padding.

    Returns:
      float32 ``(B, S/sp, D)``.
    """
    dtype = p["attn1"]["to_q"]["kernel"].dtype
    eps = cfg.norm_eps
    shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = _modulation(p["scale_shift_table"], temb6, 6)
    with jax.named_scope("self_attention"):
        h = (rms_norm(x, p.get("norm1"), eps, jnp.float32) * (1.0 + scale_msa) + shift_msa).astype(dtype)
        x = x + _self_attention(p["attn1"], h, cos, sin, cfg, impl, par, valid_tokens) * gate_msa
    with jax.named_scope("cross_attention"):
        # No norm and no gate before the cross-attention (the reference feeds the residual stream itself).
        x = x + _cross_attention(p["attn2"], x.astype(dtype), context, context_lengths, cfg, impl, par)
    with jax.named_scope("ff"):
        h = (rms_norm(x, p.get("norm2"), eps, jnp.float32) * (1.0 + scale_mlp) + shift_mlp).astype(dtype)
        # Column-parallel up (own bias slice), row-parallel down (bias once, after the reduction).
        x = x + par.row_linear(p["ff"]["down"], gelu_tanh(linear(p["ff"]["up"], h)), jnp.float32) * gate_mlp
    return x


def condition_embedding(params: dict, timestep: jax.Array, encoder_hidden_states: jax.Array,
                        cfg: LTXVideoTransformerConfig):
    """Timestep and caption embeddings (``AdaLayerNormSingle``, ``PixArtAlphaTextProjection``).

    Args:
      timestep: ``(B,)`` per sample or ``(B, S)`` per token, in ``[0, 1000]``; converted to float32.
      encoder_hidden_states: ``(B, L, caption_channels)`` T5 states.

    Returns:
      ``embedded_timestep`` float32 ``(B, 1 or S, D)`` (the head's modulation input), ``temb6`` float32
      ``(B, 1 or S, 6, D)`` (the blocks'), and the projected context ``(B, L, D)`` in the compute dtype.
    """
    b = timestep.shape[0]
    te = params["time_embed"]
    with jax.named_scope("time_embed"):
        freq = timestep_embedding(timestep.reshape(-1), TIMESTEP_FEATURES, flip_sin_to_cos=True, downscale_freq_shift=0)
        mlp = te["emb"]["timestep_embedder"]
        emb = linear(mlp["linear_2"], jax.nn.silu(linear(mlp["linear_1"], freq, jnp.float32)), jnp.float32)
        temb6 = linear(te["linear"], jax.nn.silu(emb), jnp.float32)
        emb, temb6 = emb.reshape(b, -1, cfg.dim), temb6.reshape(b, -1, 6, cfg.dim)
    cp = params["caption_projection"]
    dtype = cp["linear_2"]["kernel"].dtype
    with jax.named_scope("caption_projection"):
        ctx = linear(cp["linear_2"], gelu_tanh(linear(cp["linear_1"], encoder_hidden_states, jnp.float32)))
    return emb, temb6, ctx.astype(dtype)


def run_blocks(blocks: dict, x: jax.Array, context: jax.Array, context_lengths: jax.Array | None, temb6: jax.Array,
               cos: jax.Array, sin: jax.Array, *, cfg: LTXVideoTransformerConfig,
               attention_impl: AttentionImpl | str = AttentionImpl.XLA, mesh: Mesh | None = None,
               rules: ShardingRules = LTX_RULES, valid_tokens: int | None = None) -> jax.Array:
    """Run a stack of blocks (all, or a chunk: the offloading hook) under ``lax.scan``.

    On a mesh the scan runs inside one ``shard_map`` over every mesh axis: batch over ``data``,
    tokens over ``sequence`` (Ulysses), heads and FFN width over ``tensor`` (Megatron).

    Args:
      blocks: stacked block parameters (leading ``layers`` axis, any length).
      x: float32 ``(B, S_pad, D)``, ``S_pad`` divisible by sp (:func:`forward_prologue` pads).
      context: ``(B, L, D)`` projected text, compute dtype; context_lengths: int32 ``(B,)`` or None.
      temb6: float32 ``(B, 1, 6, D)``, or per token ``(B, S_pad, 6, D)``.
      cos, sin: float32 ``(S_pad, H, head_dim/2)``.
      cfg, attention_impl, mesh, rules: static; ``mesh`` None runs on one device.
      valid_tokens: ``S`` before padding (padded keys masked); None: no padding.

    Returns:
      float32 ``(B, S_pad, D)``; on a mesh sharded ``P(data, sequence, None)``.
    """
    impl = AttentionImpl(attention_impl)

    def scan(blocks, x, context, context_lengths, temb6, cos, sin, par):
        def body(x, p):
            return block(p, x, context, context_lengths, temb6, cos, sin, cfg, impl, par, valid_tokens), None

        return jax.lax.scan(body, x, blocks)[0]

    if mesh is None:
        return scan(blocks, x, context, context_lengths, temb6, cos, sin, ShardContext())
    check_parallel(cfg, mesh, rules)
    tp = axis_size(mesh, rules.mesh_axes("heads"))
    sp = axis_size(mesh, rules.mesh_axes("tokens"))
    ulysses = sequence_mode(cfg.num_attention_heads // tp, sp) == "ulysses"
    par = ShardContext(tensor=rules.mesh_axes("heads"), sequence=rules.mesh_axes("tokens"), ulysses=ulysses)
    io = block_io_specs(rules, per_token=temb6.shape[1] != 1)
    in_specs = (rules.param_specs(transformer_specs(cfg))["blocks"], io["x"], io["context"],
                None if context_lengths is None else io["context_lengths"], io["temb6"], io["cos"], io["sin"])
    # Kernel calls (Pallas, cuDNN, FFI) carry no varying-manual-axes types; the einsum paths keep the check.
    fn = jax.shard_map(partial(scan, par=par), mesh=mesh, in_specs=in_specs, out_specs=io["x"],
                       check_vma=not is_kernel(impl))
    return fn(blocks, x, context, context_lengths, temb6, cos, sin)


def block_io_specs(rules: ShardingRules = LTX_RULES, per_token: bool = False) -> dict:
    """``PartitionSpec`` of each :func:`run_blocks` input on a mesh.

    Returns:
      ``{"x": P(data, sequence, None), "context": P(data, None, None), "context_lengths": P(data),
      "temb6": P(data, None, None, None)`` (per token ``P(data, sequence, None, None)``), ``"cos", "sin":
      P(sequence, tensor, None)}`` under :data:`LTX_RULES`.
    """
    table = rules.spec(("tokens", "heads", None))
    return {"x": rules.spec(("batch", "tokens", "embed")), "context": rules.spec(("batch", None, "embed")),
            "context_lengths": rules.spec(("batch",)),
            "temb6": rules.spec(("batch", "tokens" if per_token else None, None, "embed")),
            "cos": table, "sin": table}


def output_head(params: dict, x: jax.Array, embedded_timestep: jax.Array) -> jax.Array:
    """``norm_out`` (LayerNorm, no affine), AdaLN with the model's ``scale_shift_table`` (shift, scale), ``proj_out``.

    Args:
      x: float32 ``(B, S, D)``; embedded_timestep: float32 ``(B, 1 or S, D)``.

    Returns:
      float32 ``(B, S, out_channels)``.
    """
    with jax.named_scope("head"):
        shift, scale = _modulation(params["scale_shift_table"], embedded_timestep[:, :, None, :], 2)
        x = layer_norm(x, None, OUT_NORM_EPS) * (1.0 + scale) + shift
        return linear(params["proj_out"], x, jnp.float32)


def check_inputs(cfg: LTXVideoTransformerConfig, hidden_shape: tuple[int, ...], timestep_shape: tuple[int, ...],
                 context_shape: tuple[int, ...], rope_shape: tuple[int, ...],
                 lengths_shape: tuple[int, ...] | None) -> None:
    """Check the shapes of :func:`forward`'s inputs against each other and the configuration.

    Raises:
      ValueError: naming the input whose shape is wrong and the shape expected.
    """
    if len(hidden_shape) != 3 or hidden_shape[2] != cfg.in_channels:
        raise ValueError(f"hidden_states has shape {tuple(hidden_shape)}; expected packed latents (B, S, "
                         f"{cfg.in_channels}) (pack (B, C, F, H, W) latents with vidax.models.ltx.pipeline.pack_latents)")
    b, s, _ = hidden_shape
    if tuple(timestep_shape) not in ((b,), (b, s)):
        raise ValueError(f"timestep has shape {tuple(timestep_shape)}; expected ({b},) or per token ({b}, {s})")
    if len(context_shape) != 3 or context_shape[0] != b or context_shape[2] != cfg.caption_channels:
        raise ValueError(f"encoder_hidden_states has shape {tuple(context_shape)}; expected ({b}, L, "
                         f"{cfg.caption_channels})")
    want = (s, cfg.num_attention_heads, cfg.attention_head_dim // 2)
    if tuple(rope_shape) != want:
        raise ValueError(f"RoPE tables have shape {tuple(rope_shape)}; expected {want} (rope_tables for these tokens)")
    if lengths_shape is not None and tuple(lengths_shape) != (b,):
        raise ValueError(f"encoder_attention_lengths has shape {tuple(lengths_shape)}; expected ({b},)")


@partial(jax.jit, static_argnames=("cfg", "attention_impl", "mesh", "rules"))
def forward(
    params: dict,
    hidden_states: jax.Array,
    timestep: jax.Array,
    encoder_hidden_states: jax.Array,
    encoder_attention_lengths: jax.Array | None,
    cos: jax.Array,
    sin: jax.Array,
    *,
    cfg: LTXVideoTransformerConfig,
    attention_impl: AttentionImpl | str = AttentionImpl.XLA,
    mesh: Mesh | None = None,
    rules: ShardingRules = LTX_RULES,
) -> jax.Array:
    """Predict the flow (velocity) for a batch of packed latent tokens (``LTXVideoTransformer3DModel.forward``).

    Stages: :func:`forward_prologue` (embeddings, padding to a multiple of sp) -> :func:`run_blocks` ->
    :func:`forward_epilogue` (head). Outside the blocks the computation is partitioned by GSPMD.

    Args:
      params: parameter tree of :func:`transformer_specs` (on a mesh: placed with
        ``rules.param_shardings(transformer_specs(cfg), mesh)`` or loaded with ``shardings=rules.sharding_fn(mesh)``).
      hidden_states: ``(B, S, in_channels)`` packed latent tokens, any float dtype.
      timestep: ``(B,)`` or per token ``(B, S)``, in ``[0, 1000]``.
      encoder_hidden_states: ``(B, L, caption_channels)`` T5 states (padded rows are masked).
      encoder_attention_lengths: int32 ``(B,)`` valid text tokens per sample (the reference's
        ``encoder_attention_mask`` as right-padding lengths), or None: all ``L`` valid.
      cos, sin: :func:`rope_tables` for these tokens, ``(S, heads, head_dim / 2)``.
      cfg: the architecture (static); attention_impl: see :mod:`vidax.core.attention` (static).
      mesh: a :func:`vidax.core.sharding.make_mesh` mesh (static), or None for one device.
      rules: sharding rules (static), default :data:`vidax.models.ltx.sharding.LTX_RULES`.

    Returns:
      float32 ``(B, S, out_channels)``.

    Raises:
      ValueError: input shapes that do not match (:func:`check_inputs`); a mesh the model cannot use
        (:func:`vidax.models.ltx.sharding.check_parallel`).
    """
    x, emb, temb6, ctx, cos, sin = forward_prologue(params, hidden_states, timestep, encoder_hidden_states,
                                                    encoder_attention_lengths, cos, sin, cfg=cfg, mesh=mesh,
                                                    rules=rules)
    s = hidden_states.shape[1]
    with jax.named_scope("blocks"):
        x = run_blocks(params["blocks"], x, ctx, encoder_attention_lengths, temb6, cos, sin, cfg=cfg,
                       attention_impl=attention_impl, mesh=mesh, rules=rules, valid_tokens=s)
    return forward_epilogue(params, x, emb, tokens=s)


def forward_prologue(params: dict, hidden_states: jax.Array, timestep: jax.Array, encoder_hidden_states: jax.Array,
                     encoder_attention_lengths: jax.Array | None, cos: jax.Array, sin: jax.Array, *,
                     cfg: LTXVideoTransformerConfig, mesh: Mesh | None = None, rules: ShardingRules = LTX_RULES):
    """:func:`forward` up to the blocks (uses only the parameters outside ``params["blocks"]``).

    Args and raises: as :func:`forward`.

    Returns:
      the :func:`run_blocks` inputs and the head's: float32 ``x (B, S_pad, D)``, ``embedded_timestep (B, 1 or S,
      D)``, ``temb6 (B, 1 or S_pad, 6, D)``, ``context (B, L, D)`` compute dtype, ``cos, sin (S_pad, H, hd/2)``.
    """
    check_inputs(cfg, hidden_states.shape, timestep.shape, encoder_hidden_states.shape, cos.shape,
                 None if encoder_attention_lengths is None else encoder_attention_lengths.shape)
    check_parallel(cfg, mesh, rules, hidden_states.shape[0])
    if mesh is not None:
        hidden_states = jax.lax.with_sharding_constraint(hidden_states, NamedSharding(mesh, rules.spec(("batch", None, None))))
    emb, temb6, ctx = condition_embedding(params, timestep, encoder_hidden_states, cfg)
    with jax.named_scope("proj_in"):
        x = linear(params["proj_in"], hidden_states, jnp.float32)
    n = padded_length(x.shape[1], axis_size(mesh, rules.mesh_axes("tokens")))
    x = pad_axis(x, 1, n)
    cos, sin = pad_axis(jnp.asarray(cos, jnp.float32), 0, n), pad_axis(jnp.asarray(sin, jnp.float32), 0, n)
    if temb6.shape[1] != 1:  # per-token timesteps: padded with the tokens (padded rows are cut after the blocks)
        temb6 = pad_axis(temb6, 1, n)
    return x, emb, temb6, ctx, cos, sin


def forward_epilogue(params: dict, x: jax.Array, embedded_timestep: jax.Array, *, tokens: int) -> jax.Array:
    """:func:`forward` after the blocks: padding cut, :func:`output_head`.

    Args:
      x: float32 ``(B, S_pad, D)``; embedded_timestep: float32 ``(B, 1 or S, D)``; tokens: ``S`` (static).

    Returns:
      float32 ``(B, S, out_channels)``.
    """
    return output_head(params, x[:, :tokens], embedded_timestep)


def num_tokens(grid: tuple[int, int, int]) -> int:
    """Video tokens of a ``(F, H, W)`` latent grid (one per latent pixel: patch sizes are 1)."""
    return math.prod(grid)
