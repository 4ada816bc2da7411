"""The HunyuanVideo MMDiT pieces shared by HunyuanVideo 13B and HunyuanVideo-1.5, as pure functions.

Both families (``models/hunyuanvideo``, ``models/hunyuanvideo15``) are MMDiTs after Flux with the same math in these
parts (diffusers ``transformer_hunyuan_video.py`` and ``transformer_hunyuan_video15.py``; the original repositories'
``hyvideo/modules`` and ``hyvideo/models/transformers/modules``):

* the sinusoidal timestep projection (``Timesteps(256, flip_sin_to_cos=True)``, the original's ``timestep_embedding``)
  and the two-linear embedders (``TimestepEmbedding``, ``PixArtAlphaTextProjection``): :func:`time_proj`,
  :func:`timestep_mlp`, :func:`mlp2`;
* the token refiner over the LLM text states (``HunyuanVideoTokenRefiner`` / ``HunyuanVideo15TokenRefiner``, the
  original's ``SingleTokenRefiner``): :func:`token_refiner_specs`, :func:`refine_text`;
* 3D RoPE over the video tokens (``HunyuanVideoRotaryPosEmbed`` / ``HunyuanVideo15RotaryPosEmbed``):
  :func:`rope_tables`;
* the dual-stream block (``HunyuanVideoTransformerBlock`` / ``HunyuanVideo15TransformerBlock``, the original's
  ``MMDoubleStreamBlock``) with its joint attention over ``[video; text]`` (text padding as one key length per sample,
  never a dense mask: paper Table 4 fault 6), Megatron tensor parallelism and Ulysses sequence parallelism through
  :class:`vidax.core.parallel.ShardContext`: :func:`double_block_specs`, :func:`double_block`, :func:`joint_attention`,
  :func:`run_stack`;
* the final AdaLN head and unpatchify (``AdaLayerNormContinuous`` + ``proj_out``): :func:`output_head`;
* the block programs of the host block loop and of offloading (:func:`io_shardings`, :func:`stack_program`).

A family passes its frozen configuration as ``cfg``; these functions read only ``cfg.num_attention_heads`` and
``cfg.attention_head_dim`` (:class:`HeadsConfig`). Parameter trees follow the families' spec trees (kernels
``(in, out)``; stacked blocks with a leading ``layers`` axis). Precision: residual streams float32, matmul inputs in the
weight dtype with float32 accumulation, norms in float32.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from vidax.core.attention import AttentionImpl, attention, is_kernel
from vidax.core.layers import gelu_tanh, layer_norm, linear, rms_norm
from vidax.core.parallel import ShardContext, sequence_mode
from vidax.core.params import ParamSpec, SpecTree, linear_spec
from vidax.core.rope import apply_rope_interleaved
from vidax.core.sharding import ShardingRules, axis_size

#: Epsilon of every LayerNorm (blocks, refiner, head) and of the RMS q/k norms (diffusers ``eps=1e-6``).
NORM_EPS = 1e-6
#: Width of the sinusoidal timestep / guidance projection (``Timesteps(num_channels=256)``).
TIME_PROJ_DIM = 256


class HeadsConfig(Protocol):
    """What these functions read of a family's configuration."""

    num_attention_heads: int
    attention_head_dim: int


# --------------------------------------------------------------------------------------------
# Parameter declarations
# --------------------------------------------------------------------------------------------


def layer_norm_spec(dim: int, layers: int | None = None) -> dict:
    """An affine LayerNorm's ``{"scale", "bias"}``, float32 (optionally stacked)."""
    lead, lead_axes = ((layers,), ("layers",)) if layers else ((), ())
    return {"scale": ParamSpec((*lead, dim), fp32=True, axes=(*lead_axes, "embed")),
            "bias": ParamSpec((*lead, dim), fp32=True, axes=(*lead_axes, "embed"))}


def rms_spec(head_dim: int, layers: int) -> dict:
    """A stacked per-head RMS norm's ``{"scale"}``, float32."""
    return {"scale": ParamSpec((layers, head_dim), fp32=True, axes=("layers", None))}


def embedder_spec(n_in: int, dim: int) -> dict:
    """``TimestepEmbedding`` / ``PixArtAlphaTextProjection``: two linears, float32."""
    return {"linear_1": linear_spec(n_in, dim, (None, "embed"), fp32=True),
            "linear_2": linear_spec(dim, dim, ("embed", "embed"), fp32=True)}


def token_refiner_specs(text_dim: int, dim: int, mlp_dim: int, layers: int) -> SpecTree:
    """``context_embedder`` (the token refiner) of width ``dim`` over ``text_dim``-wide states, ``layers`` blocks of
    MLP width ``mlp_dim``: ``time_text_embed`` (timestep and pooled-text embedders, float32), ``proj_in``, and the
    stacked ``token_refiner/refiner_blocks``. Replicated on a mesh (it runs before the block stacks)."""
    d, R = dim, layers
    block = {
        "norm1": layer_norm_spec(d, R),
        "attn": {n: linear_spec(d, d, ("embed", None), layers=R) for n in ("to_q", "to_k", "to_v")}
        | {"to_out": linear_spec(d, d, (None, "embed"), layers=R)},
        "norm2": layer_norm_spec(d, R),
        "ff": {"up": linear_spec(d, mlp_dim, ("embed", None), layers=R),
               "down": linear_spec(mlp_dim, d, (None, "embed"), layers=R)},
        "norm_out": {"linear": linear_spec(d, 2 * d, ("embed", None), layers=R, fp32=True)},
    }
    return {"time_text_embed": {"timestep_embedder": embedder_spec(TIME_PROJ_DIM, d),
                                "text_embedder": embedder_spec(text_dim, d)},
            "proj_in": linear_spec(text_dim, d, (None, "embed")),
            "token_refiner": {"refiner_blocks": block}}


def adaln_spec(dim: int, layers: int, n: int) -> dict:
    """A stacked AdaLN projection ``dim -> n dim`` (float32, output features split over ``adaln``)."""
    return {"linear": linear_spec(dim, n * dim, ("embed", "adaln"), layers=layers, fp32=True)}


def double_block_specs(dim: int, head_dim: int, mlp_dim: int, layers: int) -> SpecTree:
    """The stacked dual-stream blocks (diffusers ``transformer_blocks``): AdaLN projections ``norm1`` /
    ``norm1_context`` (6 vectors each), the video stream's ``to_q/k/v``, ``to_out`` and ``ff``, the text stream's
    ``add_q/k/v_proj``, ``to_add_out`` and ``ff_context`` (q/k/v and FFN-up column-parallel over ``heads`` / ``mlp``,
    the output projections row-parallel), per-head RMS q/k norms."""
    L, d, hd = layers, dim, head_dim

    def col(n_out: int = d, axis: str = "heads") -> dict:
        return linear_spec(d, n_out, ("embed", axis), layers=L)

    def row(n_in: int = d, axis: str = "heads") -> dict:
        return linear_spec(n_in, d, (axis, "embed"), layers=L)

    return {
        "norm1": adaln_spec(d, L, 6),
        "norm1_context": adaln_spec(d, L, 6),
        "attn": {n: col() for n in ("to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj")}
        | {n: rms_spec(hd, L) for n in ("norm_q", "norm_k", "norm_added_q", "norm_added_k")}
        | {"to_out": row(), "to_add_out": row()},
        "ff": {"up": col(mlp_dim, "mlp"), "down": row(mlp_dim, "mlp")},
        "ff_context": {"up": col(mlp_dim, "mlp"), "down": row(mlp_dim, "mlp")},
    }


def output_head_specs(dim: int, out_features: int) -> SpecTree:
    """``norm_out`` (``AdaLayerNormContinuous``'s ``dim -> 2 dim`` projection read as ``scale_linear`` and
    ``shift_linear``, float32) and ``proj_out`` (``dim -> out_features``)."""
    return {"norm_out": {"scale_linear": linear_spec(dim, dim, ("embed", "embed"), fp32=True),
                         "shift_linear": linear_spec(dim, dim, ("embed", "embed"), fp32=True)},
            "proj_out": linear_spec(dim, out_features, ("embed", None))}


# --------------------------------------------------------------------------------------------
# Timestep embedding
# --------------------------------------------------------------------------------------------


def mlp2(p: dict, x: jax.Array) -> jax.Array:
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


def timestep_mlp(p: dict, t: jax.Array) -> jax.Array:
    """:func:`time_proj` then ``TimestepEmbedding`` (linear, SiLU, linear), float32 ``(N, dim)``."""
    return mlp2(p, time_proj(t))


# --------------------------------------------------------------------------------------------
# Token refiner
# --------------------------------------------------------------------------------------------


def _refiner_block(p: dict, h: jax.Array, temb_act: jax.Array, lengths: jax.Array, head_dim: int,
                   impl: AttentionImpl) -> jax.Array:
    """``HunyuanVideoIndividualTokenRefinerBlock`` on float32 ``h (B, L, dim)``."""
    b, n, _ = h.shape
    dtype = p["attn"]["to_q"]["kernel"].dtype
    gate_msa, gate_mlp = jnp.split(linear(p["norm_out"]["linear"], temb_act, jnp.float32)[:, None, :], 2, axis=-1)
    x = layer_norm(h, p["norm1"], NORM_EPS).astype(dtype)
    q, k, v = (linear(p["attn"][name], x).reshape(b, n, -1, head_dim) for name in ("to_q", "to_k", "to_v"))
    o = attention(q, k, v, implementation=impl, kv_lengths=lengths)
    # The 13B reference's mask is (query valid AND key valid), with key 0 always on: a padded query row attends key 0
    # alone, so its output is v_0 exactly. (HunyuanVideo-1.5's reference gives padded rows zeros and then zeroes
    # them: they never reach a valid token there.)
    padded = jnp.arange(n)[None, :] >= lengths[:, None]
    o = jnp.where(padded[:, :, None, None], v[:, :1], o)
    h = h + linear(p["attn"]["to_out"], o.reshape(b, n, -1), jnp.float32) * gate_msa
    x = layer_norm(h, p["norm2"], NORM_EPS).astype(dtype)
    return h + linear(p["ff"]["down"], jax.nn.silu(linear(p["ff"]["up"], x)), jnp.float32) * gate_mlp


def refine_text(p: dict, encoder_hidden_states: jax.Array, encoder_attention_mask: jax.Array, timestep: jax.Array,
                head_dim: int, attention_impl: AttentionImpl | str = AttentionImpl.XLA) -> jax.Array:
    """The token refiner (``context_embedder``): the text states refined by their own small transformer.

    Conditioning: the timestep embedding plus the text states mean-pooled over the mask (float32) projected by
    ``PixArtAlphaTextProjection``; each block gates its attention and MLP (``HunyuanVideoAdaNorm``). Self-attention
    sees the valid text tokens (a right-padded mask, as the reference's key mask assumes). Outside ``shard_map`` an
    attention kernel is run per shard by :func:`vidax.core.attention.attention` under ``jax.set_mesh``; the
    HunyuanVideo-1.5 prologue wraps this whole function in an explicit ``shard_map`` instead (paper Table 4 fault 7).

    Args:
      p: the ``context_embedder`` subtree of :func:`token_refiner_specs`.
      encoder_hidden_states: ``(B, L, text_dim)``; encoder_attention_mask: ``(B, L)``, nonzero on valid tokens (right
        padding; at least one valid token per sample, as the reference's mean pooling divides by the count);
        timestep: float32 ``(B,)``.
      head_dim: the refiner's head width (the transformer's ``attention_head_dim``).

    Returns:
      float32 ``(B, L, dim)``.
    """
    mask = encoder_attention_mask != 0
    m = mask.astype(jnp.float32)[..., None]
    pooled = jnp.sum(encoder_hidden_states.astype(jnp.float32) * m, axis=1) / jnp.sum(m, axis=1)
    tt = p["time_text_embed"]
    temb = timestep_mlp(tt["timestep_embedder"], timestep) + mlp2(tt["text_embedder"], pooled)
    h = linear(p["proj_in"], encoder_hidden_states, jnp.float32)
    lengths = jnp.sum(mask, axis=1, dtype=jnp.int32)
    impl, temb_act = AttentionImpl(attention_impl), jax.nn.silu(temb)

    def body(h, blk):
        return _refiner_block(blk, h, temb_act, lengths, head_dim, impl), None

    return jax.lax.scan(body, h, p["token_refiner"]["refiner_blocks"])[0]


# --------------------------------------------------------------------------------------------
# RoPE
# --------------------------------------------------------------------------------------------


def rope_tables(grid: tuple[int, int, int], rope_axes_dim: tuple[int, ...],
                rope_theta: float) -> tuple[jax.Array, jax.Array]:
    """3D RoPE ``cos, sin`` of the video tokens (diffusers ``HunyuanVideoRotaryPosEmbed``), float32.

    Each head's features split into ``rope_axes_dim`` groups rotated by the frame, row and column index
    (integer positions); group widths ``(16, 56, 56)`` in the releases. Frequencies ``theta ** (-2j / width)`` and
    angles in float32, as the reference computes them (``get_1d_rotary_pos_embed`` with its default float32
    frequencies); built in the program from the static grid (no host table).

    Returns:
      ``cos, sin``: float32 ``(T' * H' * W', head_dim / 2)``, tokens in ``(t, h, w)`` raster order, one angle per
      adjacent feature pair (the reference's ``repeat_interleave(2)`` table halved).
    """
    parts = []
    for axis, (n, width) in enumerate(zip(grid, rope_axes_dim)):
        freqs = (1.0 / (np.float32(rope_theta) ** (np.arange(0, width, 2, dtype=np.float32)[: width // 2]
                                                   / np.float32(width)))).astype(np.float32)
        angles = jnp.arange(n, dtype=jnp.float32)[:, None] * jnp.asarray(freqs)[None, :]  # (n, width / 2)
        shape = [1, 1, 1, width // 2]
        shape[axis] = n
        parts.append(jnp.broadcast_to(angles.reshape(shape), (*grid, width // 2)))
    angles = jnp.concatenate(parts, axis=-1).reshape(math.prod(grid), -1)
    return jnp.cos(angles), jnp.sin(angles)


# --------------------------------------------------------------------------------------------
# Blocks (written once for one device and for one shard_map shard)
# --------------------------------------------------------------------------------------------


class BlockInputs(NamedTuple):
    """What every block reads besides its streams (a pytree; the families' ``forward_prologue`` builds it).

    Attributes:
      temb: float32 ``(B, dim)`` conditioning.
      token_replace_emb: float32 ``(B, dim)`` timestep-0 conditioning (13B ``token_replace`` models), else None.
      first_frame: bool ``(S_pad,)``, True on the first latent frame's video tokens (``token_replace``), else None.
      cos, sin: float32 ``(S_pad, head_dim / 2)`` RoPE tables of the video tokens (padding rows: any value).
      kv_lengths: int32 ``(B,)``: valid keys of the joint sequence ``[video; text]``, ``S + valid text tokens`` (the
        valid text tokens first).
    """

    temb: jax.Array
    token_replace_emb: jax.Array | None
    first_frame: jax.Array | None
    cos: jax.Array
    sin: jax.Array
    kv_lengths: jax.Array


def modulation(p: dict, acts: jax.Array, n: int, par: ShardContext) -> list[jax.Array]:
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


def modulations(p: dict, temb_act: jax.Array, replace_act: jax.Array | None, inputs: BlockInputs, n: int,
                par: ShardContext) -> tuple[list[jax.Array], list[jax.Array]]:
    """An AdaLN projection's ``n`` vectors for the video rows and per sample.

    Returns:
      ``(video, sample)``: lists of ``n`` float32 arrays; ``sample`` ``(B, 1, dim)`` (the timestep-t vectors);
      ``video`` the same, or per token ``(B, S_local, dim)`` for ``token_replace`` (the timestep-0 vectors on the
      first latent frame's tokens, ``HunyuanVideoTokenReplaceAdaLayerNormZero``).
    """
    if replace_act is None:
        sample = [v[:, None] for v in modulation(p, temb_act, n, par)]
        return sample, sample
    b = temb_act.shape[0]
    both = modulation(p, jnp.concatenate([temb_act, replace_act]), n, par)  # one gather for both
    sel = inputs.first_frame[None, :, None]
    return [jnp.where(sel, v[b:, None], v[:b, None]) for v in both], [v[:b, None] for v in both]


def _qk(p: dict, name: str, norm: str, x: jax.Array, head_dim: int, rope) -> jax.Array:
    """Projection, per-head RMS norm (float32), RoPE if given; float32 ``(B, S, heads, head_dim)``."""
    b, s, _ = x.shape
    y = rms_norm(linear(p[name], x, jnp.float32).reshape(b, s, -1, head_dim), p[norm], NORM_EPS)
    return y if rope is None else apply_rope_interleaved(y, *rope)


def keys_in_order(k: jax.Array, video_rows: int, text_rows: int, video_tokens: int) -> jax.Array:
    """Joint keys as they arrive from the shards, ``[video_0; text_0; video_1; text_1; ...]`` (``video_rows`` and
    ``text_rows`` per shard), reordered to ``[video[:video_tokens]; text]``: the valid keys first and the text
    padding last, so that one key length per sample masks all padding. One shard: ``[video; text]`` unchanged."""
    b, n, h, d = k.shape
    shards = n // (video_rows + text_rows)
    blocks = k.reshape(b, shards, video_rows + text_rows, h, d)
    video = blocks[:, :, :video_rows].reshape(b, shards * video_rows, h, d)[:, :video_tokens]
    text = blocks[:, :, video_rows:].reshape(b, shards * text_rows, h, d)
    return jnp.concatenate([video, text], axis=1)


#: Parameter names of the video and the text stream in :func:`joint_attention` (the dual-stream blocks').
VIDEO = {"q": "to_q", "k": "to_k", "v": "to_v", "norm_q": "norm_q", "norm_k": "norm_k"}
TEXT = {"q": "add_q_proj", "k": "add_k_proj", "v": "add_v_proj", "norm_q": "norm_added_q", "norm_k": "norm_added_k"}


def joint_attention(p: dict, names: tuple[dict, dict], nx: jax.Array, nc: jax.Array, inputs: BlockInputs,
                    cfg: HeadsConfig, impl: AttentionImpl, par: ShardContext,
                    video_tokens: int) -> tuple[jax.Array, jax.Array]:
    """``HunyuanVideoAttnProcessor2_0`` on this shard's video rows ``nx (B, Sx, dim)`` and text rows
    ``nc (B, Lc, dim)``.

    ``names``: the video and text streams' ``{"q", "k", "v", "norm_q", "norm_k"}`` parameter names (:data:`VIDEO`,
    :data:`TEXT`; the 13B single-stream blocks use the video names for both). Column-parallel q/k/v (this shard's
    heads), RMS q/k norms, RoPE on video queries and keys, then attention over the whole joint sequence with text
    padding masked by ``inputs.kv_lengths``.

    Ulysses (``par.sequence``): each shard concatenates its video and text rows; one ``all_to_all`` per q/k/v trades
    the token split for a head split (or, where sp does not divide the local heads, keys and values are
    all-gathered); the gathered keys arrive shard by shard and are put in order by :func:`keys_in_order`; queries need
    no order.

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
    k, v = keys_in_order(k, sx, lc, video_tokens), keys_in_order(v, sx, lc, video_tokens)
    o = par.from_attention(attention(q, k, v, implementation=impl, kv_lengths=inputs.kv_lengths))
    o = o.reshape(*o.shape[:2], -1)
    return o[:, :sx], o[:, sx:]


def feed_forward(p: dict, x: jax.Array, par: ShardContext) -> jax.Array:
    """``FeedForward(activation_fn="gelu-approximate")``: column-parallel up, row-parallel down (bias once)."""
    return par.row_linear(p["down"], gelu_tanh(linear(p["up"], x)), jnp.float32)


def double_block(p: dict, x: jax.Array, c: jax.Array, inputs: BlockInputs, cfg: HeadsConfig,
                 impl: AttentionImpl, par: ShardContext = ShardContext(), video_tokens: int | None = None):
    """One dual-stream block (``HunyuanVideoTransformerBlock`` / ``HunyuanVideoTokenReplaceTransformerBlock`` /
    ``HunyuanVideo15TransformerBlock``).

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
    shift, scale, gate, shift2, scale2, gate2 = modulations(p["norm1"], temb_act, replace_act, inputs, 6, par)[0]
    c_shift, c_scale, c_gate, c_shift2, c_scale2, c_gate2 = (
        v[:, None] for v in modulation(p["norm1_context"], temb_act, 6, par))
    with jax.named_scope("attention"):
        nx = (layer_norm(x, None, NORM_EPS) * (1.0 + scale) + shift).astype(dtype)
        nc = (layer_norm(c, None, NORM_EPS) * (1.0 + c_scale) + c_shift).astype(dtype)
        ax, ac = joint_attention(p["attn"], (VIDEO, TEXT), nx, nc, inputs, cfg, impl, par, video_tokens)
        x = x + par.row_linear(p["attn"]["to_out"], ax, jnp.float32) * gate
        c = c + par.row_linear(p["attn"]["to_add_out"], ac, jnp.float32) * c_gate
    with jax.named_scope("ff"):
        nx = (layer_norm(x, None, NORM_EPS) * (1.0 + scale2) + shift2).astype(dtype)
        nc = (layer_norm(c, None, NORM_EPS) * (1.0 + c_scale2) + c_shift2).astype(dtype)
        x = x + gate2 * feed_forward(p["ff"], nx, par)
        c = c + c_gate2 * feed_forward(p["ff_context"], nc, par)
    return x, c


#: A block function: ``(params, x, c, inputs, cfg, impl, par, video_tokens) -> (x, c)``.
BlockFn = Callable[..., tuple[jax.Array, jax.Array]]


def block_io_specs(rules: ShardingRules) -> dict:
    """``PartitionSpec`` of each :func:`run_stack` input on a mesh.

    Returns:
      ``{"stream": (batch, tokens, embed)`` (x and c), ``"temb": (batch, None)``, ``"first_frame": (tokens,)``,
      ``"rope": (tokens, None)`` (cos and sin), ``"kv_lengths": (batch,)}`` under ``rules``.
    """
    return {"stream": rules.spec(("batch", "tokens", "embed")), "temb": rules.spec(("batch", None)),
            "first_frame": rules.spec(("tokens",)), "rope": rules.spec(("tokens", None)),
            "kv_lengths": rules.spec(("batch",))}


def run_stack(block_fn: BlockFn, blocks: dict, x: jax.Array, c: jax.Array, inputs: BlockInputs, *,
              block_specs: SpecTree, cfg: HeadsConfig, video_tokens: int,
              attention_impl: AttentionImpl | str = AttentionImpl.XLA, mesh: Mesh | None = None,
              rules: ShardingRules | None = None) -> tuple[jax.Array, jax.Array]:
    """Run a stack of blocks (all, or a chunk: the offloading hook) under ``lax.scan``.

    On a mesh the scan runs inside one ``shard_map`` over every mesh axis: batch over ``data``, both streams'
    rows over ``sequence`` (Ulysses), heads, MLP width and AdaLN features over ``tensor`` (Megatron), the
    collectives written in :class:`vidax.core.parallel.ShardContext`. The family checks the mesh first.

    Args:
      block_fn: one block (:func:`double_block`, or a family's own).
      blocks: stacked parameters (leading ``layers`` axis, any length).
      x: float32 video stream ``(B, S_pad, dim)``; c: float32 text stream ``(B, L_pad, dim)`` (padded to multiples
        of sp).
      inputs: :class:`BlockInputs`.
      block_specs: the stack's spec subtree (for the parameters' ``PartitionSpec`` s on a mesh).
      cfg: the family's configuration (static); video_tokens: ``S``, video tokens before padding (static).
      attention_impl, mesh, rules: static; ``mesh`` None runs on one device.

    Returns:
      float32 ``(x, c)``, same shapes; on a mesh sharded ``P(data, sequence, None)``.
    """
    impl = AttentionImpl(attention_impl)

    def scan(blocks, x, c, inputs, par):
        def body(carry, p):
            return block_fn(p, *carry, inputs, cfg, impl, par, video_tokens), None

        return jax.lax.scan(body, (x, c), blocks)[0]

    if mesh is None:
        return scan(blocks, x, c, inputs, ShardContext())
    tp = axis_size(mesh, rules.mesh_axes("heads"))
    sp = axis_size(mesh, rules.mesh_axes("tokens"))
    ulysses = sequence_mode(cfg.num_attention_heads // tp, sp) == "ulysses"
    par = ShardContext(tensor=rules.mesh_axes("heads"), sequence=rules.mesh_axes("tokens"), ulysses=ulysses)
    io = block_io_specs(rules)
    spec_inputs = BlockInputs(io["temb"], None if inputs.token_replace_emb is None else io["temb"],
                              None if inputs.first_frame is None else io["first_frame"], io["rope"], io["rope"],
                              io["kv_lengths"])
    in_specs = (rules.param_specs(block_specs), io["stream"], io["stream"], spec_inputs)
    # Kernel calls (Pallas, cuDNN, FFI) carry no varying-manual-axes types; the einsum paths keep the check.
    fn = jax.shard_map(partial(scan, par=par), mesh=mesh, in_specs=in_specs, out_specs=(io["stream"], io["stream"]),
                       check_vma=not is_kernel(impl))
    return fn(blocks, x, c, inputs)


# --------------------------------------------------------------------------------------------
# Head
# --------------------------------------------------------------------------------------------


def output_head(params: dict, x: jax.Array, temb: jax.Array, grid: tuple[int, int, int],
                patch: tuple[int, int, int], out_channels: int) -> jax.Array:
    """``norm_out`` (``AdaLayerNormContinuous``: LayerNorm, ``* (1 + scale) + shift``), ``proj_out``, unpatchify.

    Args:
      params: holds :func:`output_head_specs`' ``norm_out`` and ``proj_out``.
      x: float32 video tokens ``(B, S, dim)``; temb: float32 ``(B, dim)``; grid: ``(T', H', W')``;
      patch: ``(p_t, p, p)``.

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
    pt, ph, pw = patch
    c = out_channels
    x = x.reshape(b, t, h, w, c, pt, ph, pw).transpose(0, 4, 1, 5, 2, 6, 3, 7)
    return x.reshape(b, c, t * pt, h * ph, w * pw)


# --------------------------------------------------------------------------------------------
# Block programs (host block loop, offloading)
# --------------------------------------------------------------------------------------------


def io_shardings(mesh: Mesh | None, rules: ShardingRules | None,
                 token_replace: bool = False) -> tuple[Any, BlockInputs]:
    """``(stream sharding, BlockInputs of shardings)`` of a block program's inputs: :func:`block_io_specs` on a
    mesh, else the first local device (committed, so every block call hits one compilation). The ``token_replace``
    fields are None unless ``token_replace``."""
    from vidax.core.offload import device_sharding

    if mesh is None:
        one = device_sharding(None)
        return one, BlockInputs(one, one if token_replace else None, one if token_replace else None, one, one, one)
    io = {k: NamedSharding(mesh, v) for k, v in block_io_specs(rules).items()}
    return io["stream"], BlockInputs(io["temb"], io["temb"] if token_replace else None,
                                     io["first_frame"] if token_replace else None, io["rope"], io["rope"],
                                     io["kv_lengths"])


def stack_program(run_chunk: Callable, name: str, block_specs: SpecTree, mesh: Mesh | None,
                  rules: ShardingRules | None, token_replace: bool = False):
    """The one jitted block program of a stack: ``fn(chunk, x, c, inputs) -> (x, c)`` with ``x``, ``c`` donated and
    entering and leaving with one sharding (:func:`io_shardings`), so every chunk of every step reuses one
    compilation.

    Args:
      run_chunk: ``(blocks, x, c, inputs) -> (x, c)`` (a family's ``run_blocks`` over one chunk).
      name: the traced function's name (what compile-event listeners see).
      block_specs: the stack's spec subtree (the chunk's shardings on a mesh).
    """
    def chunk(blocks, x, c, inputs):
        return run_chunk(blocks, x, c, inputs)

    chunk.__name__ = chunk.__qualname__ = name
    stream, inputs = io_shardings(mesh, rules, token_replace)
    if mesh is None:
        return jax.jit(chunk, donate_argnums=(1, 2), out_shardings=(stream, stream))
    return jax.jit(chunk, donate_argnums=(1, 2), out_shardings=(stream, stream),
                   in_shardings=(rules.param_shardings(block_specs, mesh), stream, stream, inputs))


def replicated_shard_map(fn: Callable, mesh: Mesh, rules: ShardingRules, batch_args: tuple[bool, ...],
                         batch_out: bool = True) -> Callable:
    """``fn`` run per ``data`` shard inside an explicit ``shard_map`` over every mesh axis, replicated over the
    others (paper Table 4 fault 7: a kernel call GSPMD cannot partition, e.g. the token refiner's attention, inside a
    sharded jit).

    Args:
      fn: a function of arrays (pytrees), every output batch-leading when ``batch_out``.
      batch_args: per positional argument, whether it is split over ``data`` on its leading (batch) axis (True) or
        replicated (False: parameters).
    """
    batch = rules.spec(("batch",))
    in_specs = tuple(batch if b else PartitionSpec() for b in batch_args)
    return jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=batch if batch_out else PartitionSpec(),
                         check_vma=False)


__all__ = ["NORM_EPS", "TEXT", "TIME_PROJ_DIM", "VIDEO", "BlockInputs", "HeadsConfig", "adaln_spec", "block_io_specs",
           "double_block", "double_block_specs", "embedder_spec", "feed_forward", "io_shardings", "joint_attention",
           "keys_in_order", "layer_norm_spec", "mlp2", "modulation", "modulations", "output_head",
           "output_head_specs", "refine_text", "replicated_shard_map", "rms_spec", "rope_tables", "run_stack",
           "stack_program", "time_proj", "time_proj_frequencies", "timestep_mlp", "token_refiner_specs"]
