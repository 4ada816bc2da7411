"""The CogVideoX diffusion transformer, as pure functions over a parameter dict.

Follows diffusers ``models/transformers/cogvideox_transformer_3d.py``
(``CogVideoXTransformer3DModel``, ``CogVideoXBlock``), ``models/embeddings.py``
(``CogVideoXPatchEmbed``, ``get_3d_sincos_pos_embed``, ``get_3d_rotary_pos_embed``,
``TimestepEmbedding``), ``models/normalization.py`` (``CogVideoXLayerNormZero``,
``AdaLayerNorm(chunk_dim=1)``) and ``models/attention_processor.py``
(``CogVideoXAttnProcessor2_0``), and the RoPE set-up of
``pipelines/cogvideo/pipeline_cogvideox.py`` (``_prepare_rotary_positional_embeddings``).

Architecture: text tokens (226, projected from T5) and video tokens are concatenated into one
sequence; every block runs *joint* self-attention over both, with an "expert" adaptive
LayerNorm: one LayerNorm, but separate shift/scale/gate vectors for the text and the video
tokens (``CogVideoXLayerNormZero``). RoPE (5B, 1.5) rotates the video tokens' q and k only; the
2B model instead adds a fixed 3D sin-cos table to the video tokens at the input. The 5B I2V
model adds a learned table to the whole sequence. CogVideoX1.5 patches 2 latent frames per
token (``patch_size_t = 2``) with a linear layer and builds its RoPE grid by slicing tables of
the training size (``max_size``) instead of stretching a crop over it.

Layout: latents are ``(B, F, C, H, W)``, as the reference (and its pipeline) keeps them.

Stages: condition embedding (timestep, ``ofs``) -> patch embedding (text and video) ->
position table -> joint stream (text then video tokens) -> blocks (stacked, under ``lax.scan``:
one block compiles once) -> video tokens -> final norm, AdaLN head -> unpatchify. Each stage
sits in a ``jax.named_scope``.

Parallelism (``forward(..., mesh=...)``): the block stack runs inside one ``shard_map`` over the
``(data, tensor, sequence)`` mesh, as Wan's does: Megatron tensor parallelism over heads, FFN
width and the AdaLN projections' outputs, DeepSpeed-Ulysses sequence parallelism over the
*joint* text + video sequence (split as one stream, padded to a multiple of sp, padded keys
masked). The expert AdaLN picks the text or video vectors per token, and RoPE uses a joint
table whose text rows are the identity rotation, so both stay right wherever the text/video
boundary falls among the shards. Shardings come from
:data:`vidax.models.cogvideox.sharding.COGVIDEOX_RULES`.

Precision: the text and video residual streams stay float32 between and inside the blocks
(paper Table 4 fault 1); matmul inputs are cast to the weight dtype; LayerNorms compute in
float32; the timestep/ofs embedders, the AdaLN projections (``norm1``/``norm2``/``norm_out``
``.linear``), the patch embedding and all norm parameters are float32 leaves.
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
from vidax.core.embeddings import patchify, timestep_embedding
from vidax.core.layers import gelu_tanh, layer_norm, linear
from vidax.core.parallel import ShardContext, pad_axis, padded_length, sequence_mode
from vidax.core.params import ParamSpec, SpecTree, linear_spec
from vidax.core.rope import apply_rope_interleaved, linspace_f32
from vidax.core.sharding import ShardingRules, axis_size
from vidax.models.cogvideox.config import CogVideoXTransformerConfig
from vidax.models.cogvideox.sharding import COGVIDEOX_RULES, check_parallel

#: Epsilon of the per-head q/k LayerNorms (diffusers ``Attention(qk_norm="layer_norm", eps=1e-6)``).
QK_NORM_EPS = 1e-6

# --------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------


def _norm(dim: int, axis: str | None, layers: int | None = None) -> dict:
    lead, lead_axes = ((layers,), ("layers",)) if layers else ((), ())
    return {
        "scale": ParamSpec((*lead, dim), fp32=True, axes=(*lead_axes, axis)),
        "bias": ParamSpec((*lead, dim), fp32=True, axes=(*lead_axes, axis)),
    }


def num_learned_positions(cfg: CogVideoXTransformerConfig) -> int:
    """Rows of the learned ``pos_embedding`` table: text tokens plus the training-size video tokens."""
    frames = (cfg.sample_frames - 1) // cfg.temporal_compression_ratio + 1
    return cfg.max_text_seq_length + (cfg.sample_height // cfg.patch_size) * (cfg.sample_width // cfg.patch_size) * frames


def transformer_specs(cfg: CogVideoXTransformerConfig) -> SpecTree:
    """The spec tree of a CogVideoX transformer: every parameter's shape, fp32 pin and logical axes.

    Block parameters lead with a ``layers`` axis of size ``num_layers``. Paths follow the diffusers
    module names, except ``transformer_blocks`` -> ``blocks`` and the feed-forward pair
    ``ff/up``, ``ff/down`` (diffusers ``ff.net.0.proj``, ``ff.net.2``).
    """
    d, L, t = cfg.dim, cfg.num_layers, cfg.time_embed_dim
    hd, p = cfg.attention_head_dim, cfg.patch_size
    if cfg.patch_size_t is None:  # CogVideoX 1.0: Conv2d over each latent frame
        proj = {"kernel": ParamSpec((p, p, cfg.in_channels, d), fp32=True, axes=(None, None, None, "embed"))}
        if cfg.patch_bias:
            proj["bias"] = ParamSpec((d,), fp32=True, axes=("embed",))
    else:  # CogVideoX 1.5: Linear over (C, p_t, p, p) patches (always with a bias)
        proj = linear_spec(cfg.patch_features, d, (None, "embed"), fp32=True)
    patch_embed = {"proj": proj, "text_proj": linear_spec(cfg.text_embed_dim, d, (None, "embed"), fp32=True)}
    if cfg.use_learned_positional_embeddings:
        patch_embed["pos_embedding"] = ParamSpec((1, num_learned_positions(cfg), d), fp32=True, axes=(None, None, "embed"))

    def ada(n_out: int, layers: int | None = None, axis: str | None = None) -> dict:
        return {"linear": linear_spec(t, n_out, (None, axis), layers=layers, fp32=True), "norm": _norm(d, "embed", layers)}

    specs: SpecTree = {
        "patch_embed": patch_embed,
        "time_embedding": {
            "linear_1": linear_spec(d, t, ("embed", None), fp32=True),
            "linear_2": linear_spec(t, t, (None, None), fp32=True),
        },
    }
    if cfg.ofs_embed_dim:
        o = cfg.ofs_embed_dim
        specs["ofs_embedding"] = {
            "linear_1": linear_spec(o, o, (None, None), fp32=True),
            "linear_2": linear_spec(o, o, (None, None), fp32=True),
        }
    specs["blocks"] = {
        # The blocks' AdaLN projections: output features over "adaln" (split over tensor, gathered in the block).
        "norm1": ada(6 * d, L, "adaln"),
        "attn1": {
            "to_q": linear_spec(d, d, ("embed", "heads"), layers=L, bias=cfg.attention_bias),
            "to_k": linear_spec(d, d, ("embed", "heads"), layers=L, bias=cfg.attention_bias),
            "to_v": linear_spec(d, d, ("embed", "heads"), layers=L, bias=cfg.attention_bias),
            "norm_q": _norm(hd, None, L),
            "norm_k": _norm(hd, None, L),
            "to_out": linear_spec(d, d, ("heads", "embed"), layers=L),
        },
        "norm2": ada(6 * d, L, "adaln"),
        "ff": {
            "up": linear_spec(d, cfg.ff_inner_dim, ("embed", "mlp"), layers=L),
            "down": linear_spec(cfg.ff_inner_dim, d, ("mlp", "embed"), layers=L),
        },
    }
    specs["norm_final"] = _norm(d, "embed")
    specs["norm_out"] = ada(2 * d)
    specs["proj_out"] = linear_spec(d, cfg.out_channels * cfg.temporal_patch * p * p, ("embed", None))
    return specs


# --------------------------------------------------------------------------------------------
# Position tables (host, NumPy)
# --------------------------------------------------------------------------------------------


class PositionTables(NamedTuple):
    """Per-shape position inputs of :func:`forward` (a pytree; absent entries are ``None``).

    Attributes:
      cos, sin: float32 ``(S_video, head_dim / 2)`` RoPE tables (RoPE models), else None.
      pos_embed: float32 additive table: ``(S_video, dim)`` sin-cos for the video tokens (2B; and
        the 5B I2V model at a frame count other than its training one, as the reference does), or
        None (RoPE models; the learned table of the I2V model at its training size).
    """

    cos: np.ndarray | None
    sin: np.ndarray | None
    pos_embed: np.ndarray | None


def token_grid(cfg: CogVideoXTransformerConfig, latent_shape: tuple[int, ...]) -> tuple[int, int, int]:
    """``(F', H', W')`` token grid of latents ``(B, F, C, H, W)``.

    Raises:
      ValueError: frames not divisible by ``patch_size_t`` or height/width not by ``patch_size``.
    """
    _, f, _, h, w = latent_shape
    pt, p = cfg.temporal_patch, cfg.patch_size
    if f % pt or h % p or w % p:
        raise ValueError(
            f"latent frames/height/width {(f, h, w)} must be divisible by (patch_size_t, patch_size, patch_size) = "
            f"{(pt, p, p)}"
        )
    return f // pt, h // p, w // p


def _sincos_1d(dim: int, pos: np.ndarray) -> np.ndarray:
    # diffusers get_1d_sincos_pos_embed_from_grid: float64 frequencies, [sin, cos] halves.
    omega = np.arange(dim // 2, dtype=np.float64) / (dim / 2.0)
    omega = 1.0 / 10000**omega
    out = np.outer(pos.astype(np.float64).reshape(-1), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)


def sincos_pos_embed(cfg: CogVideoXTransformerConfig, grid: tuple[int, int, int]) -> np.ndarray:
    """The 3D sin-cos table of the video tokens (diffusers ``get_3d_sincos_pos_embed``).

    Per token ``(t, h, w)``: ``dim/4`` temporal features of ``t / temporal_interpolation_scale``,
    then ``3 dim / 8`` of the *column* ``w / s`` and ``3 dim / 8`` of the *row* ``h / s``
    (``s = spatial_interpolation_scale``; the reference's ``meshgrid(..., indexing="xy")`` puts
    ``w`` first). Grids are float32, frequencies and sin/cos float64 as in the reference.

    Returns:
      float32 ``(F' * H' * W', dim)``, tokens in ``(t, h, w)`` raster order.
    """
    f, h, w = grid
    d = cfg.dim
    ds, dt = 3 * d // 4, d // 4
    s = np.float32(cfg.spatial_interpolation_scale)
    emb_w = _sincos_1d(ds // 2, np.arange(w, dtype=np.float32) / s)  # (w, ds/2)
    emb_h = _sincos_1d(ds // 2, np.arange(h, dtype=np.float32) / s)  # (h, ds/2)
    spatial = np.concatenate(
        [np.broadcast_to(emb_w[None, :, :], (h, w, ds // 2)), np.broadcast_to(emb_h[:, None, :], (h, w, ds // 2))],
        axis=-1,
    ).reshape(h * w, ds)
    temporal = _sincos_1d(dt, np.arange(f, dtype=np.float32) / np.float32(cfg.temporal_interpolation_scale))
    table = np.concatenate(
        [np.broadcast_to(temporal[:, None, :], (f, h * w, dt)), np.broadcast_to(spatial[None], (f, h * w, ds))], axis=-1
    )
    return table.reshape(f * h * w, d).astype(np.float32)


def _rope_1d(dim: int, pos: np.ndarray, theta: float = 10000.0) -> np.ndarray:
    # diffusers get_1d_rotary_pos_embed(use_real=True) with its default float32 frequencies.
    freqs = np.float32(1.0) / (np.float32(theta) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
    return np.outer(pos.astype(np.float32), freqs.astype(np.float32)).astype(np.float32)  # (S, dim/2)


def resize_crop_region(src: tuple[int, int], tgt_width: int, tgt_height: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """diffusers ``get_resize_crop_region_for_grid``: the grid fitted inside the training grid, centred.

    Python's ``round`` (half to even), as the reference.
    """
    h, w = src
    if h / w > tgt_height / tgt_width:
        rh, rw = tgt_height, int(round(tgt_height / h * w))
    else:
        rw, rh = tgt_width, int(round(tgt_width / w * h))
    top, left = int(round((tgt_height - rh) / 2.0)), int(round((tgt_width - rw) / 2.0))
    return (top, left), (top + rh, left + rw)


def rope_angles(cfg: CogVideoXTransformerConfig, grid: tuple[int, int, int]) -> np.ndarray:
    """3D RoPE angles of the video tokens (diffusers ``get_3d_rotary_pos_embed``), float32.

    The head splits into ``head_dim/4`` temporal, ``3 head_dim/8`` row and ``3 head_dim/8`` column
    channels. CogVideoX 1.0 (``grid_type="linspace"``): positions stretch the token grid over its
    crop of the training grid (``sample_height/p x sample_width/p``), e.g. row ``i`` sits at
    ``top + i * (bottom*(n-1)/n - top)/(n-1)``, and frame ``t`` at ``t (F-1)/F * F/(F-1)``.
    CogVideoX 1.5 (``grid_type="slice"``): plain integer positions, from tables of the training
    size that are then sliced, so the grid may not exceed it.

    The reference computes these in float32 (``torch.linspace``, float32 frequencies), and so
    does this function, operation for operation.

    Returns:
      float32 ``(F' * H' * W', head_dim / 2)``, tokens in ``(t, h, w)`` order.

    Raises:
      ValueError: a CogVideoX 1.5 grid larger than the training grid (the reference fails too).
    """
    f, gh, gw = grid
    p = cfg.patch_size
    base_h, base_w = cfg.sample_height // p, cfg.sample_width // p
    if cfg.patch_size_t is None:
        (top, left), (bottom, right) = resize_crop_region((gh, gw), base_w, base_h)
        pos_h = linspace_f32(top, bottom * (gh - 1) / gh, gh)
        pos_w = linspace_f32(left, right * (gw - 1) / gw, gw)
        pos_t = linspace_f32(0, f * (f - 1) / f, f)
    else:
        if gh > base_h or gw > base_w:
            raise ValueError(
                f"CogVideoX1.5 RoPE: token grid {gh}x{gw} exceeds the training grid {base_h}x{base_w} "
                f"(sample_height/patch_size x sample_width/patch_size); use at most "
                f"{base_h * p * 8}x{base_w * p * 8} pixels"
            )
        pos_h, pos_w, pos_t = (np.arange(n, dtype=np.float32) for n in (gh, gw, f))
    hd = cfg.attention_head_dim
    dim_t, dim_hw = hd // 4, hd // 8 * 3
    at, ah, aw = _rope_1d(dim_t, pos_t), _rope_1d(dim_hw, pos_h), _rope_1d(dim_hw, pos_w)
    angles = np.concatenate(
        [
            np.broadcast_to(at[:, None, None, :], (f, gh, gw, at.shape[-1])),
            np.broadcast_to(ah[None, :, None, :], (f, gh, gw, ah.shape[-1])),
            np.broadcast_to(aw[None, None, :, :], (f, gh, gw, aw.shape[-1])),
        ],
        axis=-1,
    )
    return angles.reshape(f * gh * gw, -1)


def position_tables(cfg: CogVideoXTransformerConfig, latent_shape: tuple[int, ...]) -> PositionTables:
    """The position inputs of :func:`forward` for latents of shape ``(B, F, C, H, W)``, built on the host.

    Raises:
      ValueError: sizes the patches do not divide; a learned-position model (5B I2V) at another
        height/width than its training size (the reference raises too); a 1.5 grid beyond its
        training grid.
    """
    grid = token_grid(cfg, latent_shape)
    cos = sin = pos = None
    if cfg.use_rotary_positional_embeddings:
        angles = rope_angles(cfg, grid)
        cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    if cfg.use_learned_positional_embeddings:
        _, f, _, h, w = latent_shape
        if (h, w) != (cfg.sample_height, cfg.sample_width):
            raise ValueError(
                f"this CogVideoX transformer has a learned position table for {cfg.sample_height * 8}x"
                f"{cfg.sample_width * 8} pixels (latent {cfg.sample_height}x{cfg.sample_width}); got latent {h}x{w}: "
                "generate at that resolution"
            )
        if (f - 1) * cfg.temporal_compression_ratio + 1 != cfg.sample_frames:
            # diffusers CogVideoXPatchEmbed: at another frame count it replaces the learned table by sin-cos.
            pos = sincos_pos_embed(cfg, grid)
    elif not cfg.use_rotary_positional_embeddings:
        pos = sincos_pos_embed(cfg, grid)
    return PositionTables(cos, sin, pos)


# --------------------------------------------------------------------------------------------
# Forward
# --------------------------------------------------------------------------------------------


def _patch_embed(p: dict, latents: jax.Array, cfg: CogVideoXTransformerConfig) -> jax.Array:
    """Video tokens ``(B, S, D)`` float32 from latents ``(B, F, C, H, W)`` (``CogVideoXPatchEmbed.proj``)."""
    ps = cfg.patch_size
    k = p["proj"]["kernel"]
    if cfg.patch_size_t is None:
        # Conv2d (kernel == stride == p) per frame: features in (p_h, p_w, C) order (DHWIO kernel rows).
        tokens = patchify(jnp.swapaxes(latents, 1, 2), (1, ps, ps))
        kernel = k.reshape(-1, k.shape[-1])
    else:
        # Linear over features in (C, p_t, p_h, p_w) order, as the reference permutes them.
        b, f, c, h, w = latents.shape
        pt = cfg.patch_size_t
        x = latents.reshape(b, f // pt, pt, c, h // ps, ps, w // ps, ps)
        tokens = x.transpose(0, 1, 4, 6, 3, 2, 5, 7).reshape(b, -1, c * pt * ps * ps)
        kernel = k
    y = jnp.matmul(tokens.astype(kernel.dtype), kernel, preferred_element_type=jnp.float32)
    if "bias" in p["proj"]:
        y = y + p["proj"]["bias"].astype(jnp.float32)
    return y


def _unpatchify(x: jax.Array, grid: tuple[int, int, int], cfg: CogVideoXTransformerConfig) -> jax.Array:
    """``(B, S, C * p_t * p * p)`` (features in ``(C, p_t, p, p)`` order) -> ``(B, F, C, H, W)``."""
    b = x.shape[0]
    f, h, w = grid
    pt, p, c = cfg.temporal_patch, cfg.patch_size, cfg.out_channels
    x = x.reshape(b, f, h, w, c, pt, p, p).transpose(0, 1, 5, 4, 2, 6, 3, 7)
    return x.reshape(b, f * pt, c, h * p, w * p)


def _ada_norm(p: dict, x: jax.Array, shift: jax.Array, scale: jax.Array, eps: float) -> jax.Array:
    return layer_norm(x, p, eps) * (1.0 + scale[:, None, :]) + shift[:, None, :]


def _adaln(p: dict, temb_act: jax.Array, text: jax.Array, par: ShardContext):
    """The expert AdaLN vectors of one ``CogVideoXLayerNormZero``, per token of the joint stream.

    ``p["linear"]`` maps ``silu(temb)`` to ``shift, scale, gate`` of the video tokens, then
    ``enc_shift, enc_scale, enc_gate`` of the text tokens (``6 dim`` features). On a mesh each
    tensor shard holds ``6 dim / tp`` of the output features (with their bias slice): the shard
    writes its slice into a zero row and the rows are summed over ``tensor`` (an all-gather that
    is exact, and invariant over ``tensor`` for ``shard_map``'s type check, on every JAX version).

    Args:
      temb_act: float32 ``(B, time_embed_dim)``.
      text: bool ``(S_local,)``: which tokens of this shard's slice of the joint stream are text.

    Returns:
      float32 ``shift, scale, gate``, each ``(B, S_local, dim)``: the text vectors on text tokens,
      the video vectors on the others.
    """
    mod = linear(p["linear"], temb_act, jnp.float32)  # (B, 6 dim / tp)
    if par.tensor is not None:
        width = mod.shape[-1]
        full = jnp.zeros((mod.shape[0], width * jax.lax.axis_size(par.tensor)), mod.dtype)
        mod = par.psum_tensor(jax.lax.dynamic_update_slice_in_dim(full, mod, jax.lax.axis_index(par.tensor) * width, 1))
    shift, scale, gate, e_shift, e_scale, e_gate = jnp.split(mod, 6, axis=-1)
    sel = text[None, :, None]

    def pick(video, txt):
        return jnp.where(sel, txt[:, None, :], video[:, None, :])

    return pick(shift, e_shift), pick(scale, e_scale), pick(gate, e_gate)


def _attention(p, h, cos, sin, cfg, impl, par, valid_tokens):
    """``CogVideoXAttnProcessor2_0`` on this shard's slice of the joint sequence ``h (B, S/sp, D)``.

    Column-parallel q/k/v (this shard's ``H/tp`` heads), per-head q/k LayerNorm, RoPE from the
    joint table (identity rows on text tokens: RoPE rotates video tokens only), Ulysses exchange
    (or key/value all-gather), attention over the whole joint sequence with padded keys masked,
    row-parallel ``to_out`` (bias once). Returns float32 ``(B, S/sp, D)``.
    """
    b, s, _ = h.shape
    hd = cfg.attention_head_dim
    dtype = p["to_q"]["kernel"].dtype

    def qk(name: str, norm: str) -> jax.Array:
        y = linear(p[name], h, jnp.float32).reshape(b, s, -1, hd)
        y = layer_norm(y, p[norm], QK_NORM_EPS)
        if cos is not None:
            y = apply_rope_interleaved(y, cos, sin)
        return y.astype(dtype)

    q, k = qk("to_q", "norm_q"), qk("to_k", "norm_k")
    v = linear(p["to_v"], h).reshape(b, s, -1, hd)
    # Ulysses: (B, S/sp, H/tp, hd) -> (B, S, H/(tp*sp), hd) and back (or keys/values all-gathered).
    q, k, v = par.to_attention(q, k, v)
    kv_lengths = None if valid_tokens in (None, k.shape[1]) else jnp.full((b,), valid_tokens, jnp.int32)
    o = par.from_attention(attention(q, k, v, implementation=impl, kv_lengths=kv_lengths))
    return par.row_linear(p["to_out"], o.reshape(b, s, -1), jnp.float32)


def block(p: dict, h: jax.Array, temb_act: jax.Array, text: jax.Array, cos, sin, cfg: CogVideoXTransformerConfig,
          impl: AttentionImpl, par: ShardContext = ShardContext(), valid_tokens: int | None = None) -> jax.Array:
    """One ``CogVideoXBlock`` on the joint stream (text tokens, then video tokens, then padding).

    Written once for one device and for one ``shard_map`` shard (``par`` supplies the collectives;
    identity by default). The reference keeps two streams and concatenates them around attention
    and the FFN; every operation but attention is per token, so one joint stream with per-token
    AdaLN vectors (text or video expert, selected by ``text``) is the same computation.

    Args:
      p: one block's parameters (no ``layers`` axis); q/k/v, FFN-up and the AdaLN projections hold
        this shard's ``1/tp`` of their output features, ``to_out``/FFN-down ``1/tp`` of their rows.
      h: float32 joint stream ``(B, S/sp, D)``.
      temb_act: float32 ``silu(temb)`` ``(B, time_embed_dim)``.
      text: bool ``(S/sp,)``, True on text tokens.
      cos, sin: joint RoPE tables ``(S/sp, head_dim/2)`` (cos 1, sin 0 on text rows), or None.
      valid_tokens: joint tokens before padding (padded keys are masked); None: no padding.

    Returns:
      float32 ``(B, S/sp, D)``.
    """
    eps = cfg.norm_eps
    dtype = p["attn1"]["to_q"]["kernel"].dtype
    with jax.named_scope("attention"):
        shift, scale, gate = _adaln(p["norm1"], temb_act, text, par)
        n = (layer_norm(h, p["norm1"]["norm"], eps) * (1.0 + scale) + shift).astype(dtype)
        h = h + gate * _attention(p["attn1"], n, cos, sin, cfg, impl, par, valid_tokens)
    with jax.named_scope("ff"):
        shift, scale, gate = _adaln(p["norm2"], temb_act, text, par)
        n = (layer_norm(h, p["norm2"]["norm"], eps) * (1.0 + scale) + shift).astype(dtype)
        # Column-parallel up (own bias slice), row-parallel down (bias once, after the reduction).
        h = h + gate * par.row_linear(p["ff"]["down"], gelu_tanh(linear(p["ff"]["up"], n)), jnp.float32)
    return h


def _timestep_mlp(p: dict, t: jax.Array, dim: int, cfg: CogVideoXTransformerConfig) -> jax.Array:
    """``Timesteps(dim, flip_sin_to_cos, freq_shift)`` then ``TimestepEmbedding`` (linear, SiLU, linear), float32."""
    e = timestep_embedding(t, dim, flip_sin_to_cos=cfg.flip_sin_to_cos, downscale_freq_shift=cfg.freq_shift)
    return linear(p["linear_2"], jax.nn.silu(linear(p["linear_1"], e, jnp.float32)), jnp.float32)


def embed_inputs(params: dict, latents: jax.Array, timestep: jax.Array, context: jax.Array,
                 pos_embed: jax.Array | None, ofs: jax.Array | None, cfg: CogVideoXTransformerConfig):
    """The stages before the blocks.

    Returns:
      ``x`` float32 ``(B, S, D)`` video tokens, ``c`` float32 ``(B, L, D)`` text tokens, ``temb``
      float32 ``(B, time_embed_dim)``.
    """
    with jax.named_scope("time_embedding"):
        temb = _timestep_mlp(params["time_embedding"], timestep, cfg.dim, cfg)
        if "ofs_embedding" in params:
            if ofs is None:
                raise ValueError("this CogVideoX1.5 image-to-video transformer needs `ofs` (the pipeline passes 2.0)")
            # (1,) broadcasts over the batch, as the reference's ofs_emb does.
            temb = temb + _timestep_mlp(params["ofs_embedding"], jnp.asarray(ofs, jnp.float32).reshape(-1), cfg.ofs_embed_dim, cfg)
    pe = params["patch_embed"]
    with jax.named_scope("patch_embed"):
        c = linear(pe["text_proj"], context, jnp.float32)
        x = _patch_embed(pe, latents, cfg)
        n_text = c.shape[1]
        if pos_embed is not None or "pos_embedding" in pe:
            if n_text != cfg.max_text_seq_length:
                raise ValueError(
                    f"this CogVideoX transformer adds a position table over {cfg.max_text_seq_length} text tokens plus "
                    f"the video tokens; got {n_text} text tokens: encode prompts to max_text_seq_length tokens"
                )
        if pos_embed is not None:  # sin-cos, video tokens only (the reference's table is zero over the text)
            x = x + jnp.asarray(pos_embed, jnp.float32)[None]
        elif "pos_embedding" in pe:  # learned, over text and video tokens
            table = pe["pos_embedding"][0].astype(jnp.float32)
            if table.shape[0] != n_text + x.shape[1]:
                raise ValueError(f"learned position table has {table.shape[0]} rows for {n_text + x.shape[1]} tokens")
            c = c + table[None, :n_text]
            x = x + table[None, n_text:]
    return x, c, temb


def join_tokens(x: jax.Array, c: jax.Array, cos: jax.Array | None, sin: jax.Array | None, sp: int = 1):
    """The joint stream the blocks run on: text tokens, then video tokens, zero-padded to a multiple of ``sp``.

    Args:
      x: float32 video tokens ``(B, S, D)``; c: float32 text tokens ``(B, L, D)``.
      cos, sin: video RoPE tables ``(S, head_dim/2)``, or None (sin-cos models).
      sp: sequence-parallel size.

    Returns:
      ``h`` float32 ``(B, N_pad, D)`` with ``N = L + S`` and ``N_pad`` the next multiple of ``sp``;
      ``text`` bool ``(N_pad,)`` (True on the first ``L`` rows); joint ``cos, sin`` ``(N_pad,
      head_dim/2)`` with cos 1 and sin 0 on the text rows (an exact identity rotation) or None;
      and ``N``.
    """
    n_text = c.shape[1]
    n = n_text + x.shape[1]
    n_pad = padded_length(n, sp)
    h = pad_axis(jnp.concatenate([c, x], axis=1), 1, n_pad)
    text = jnp.arange(n_pad) < n_text
    if cos is not None:
        ones, zeros = jnp.ones((n_text, cos.shape[1]), jnp.float32), jnp.zeros((n_text, sin.shape[1]), jnp.float32)
        cos = pad_axis(jnp.concatenate([ones, jnp.asarray(cos, jnp.float32)]), 0, n_pad)
        sin = pad_axis(jnp.concatenate([zeros, jnp.asarray(sin, jnp.float32)]), 0, n_pad)
    return h, text, cos, sin, n


def run_blocks(blocks: dict, h: jax.Array, temb: jax.Array, text: jax.Array, cos: jax.Array | None,
               sin: jax.Array | None, *, cfg: CogVideoXTransformerConfig,
               attention_impl: AttentionImpl | str = AttentionImpl.XLA, mesh: Mesh | None = None,
               rules: ShardingRules = COGVIDEOX_RULES, valid_tokens: int | None = None) -> jax.Array:
    """Run a stack of blocks (all, or a chunk: the offloading hook) under ``lax.scan``.

    On a mesh the scan runs inside one ``shard_map`` over every mesh axis: batch over ``data``,
    the joint sequence over ``sequence`` (Ulysses), heads, FFN width and AdaLN features over
    ``tensor`` (Megatron), the collectives written in :class:`vidax.core.parallel.ShardContext`.

    Args:
      blocks: stacked block parameters (leading ``layers`` axis, any length).
      h: float32 joint stream ``(B, N_pad, D)`` from :func:`join_tokens`.
      temb: float32 ``(B, time_embed_dim)``.
      text: bool ``(N_pad,)``; cos, sin: joint RoPE tables ``(N_pad, head_dim/2)`` or None.
      cfg, attention_impl, mesh, rules: static; ``mesh`` None runs on one device.
      valid_tokens: ``N`` before padding; padded keys are masked. None: no padding.

    Returns:
      float32 ``(B, N_pad, D)``; on a mesh sharded ``P(data, sequence, None)``.
    """
    impl = AttentionImpl(attention_impl)
    temb_act = jax.nn.silu(temb)
    rope = None if cos is None else (cos, sin)

    def scan(blocks, h, temb_act, text, rope, par):
        c, s = (None, None) if rope is None else rope

        def body(h, p):
            return block(p, h, temb_act, text, c, s, cfg, impl, par, valid_tokens), None

        return jax.lax.scan(body, h, blocks)[0]

    if mesh is None:
        return scan(blocks, h, temb_act, text, rope, ShardContext())
    check_parallel(cfg, mesh, rules)
    tp = axis_size(mesh, rules.mesh_axes("heads"))
    sp = axis_size(mesh, rules.mesh_axes("tokens"))
    ulysses = sequence_mode(cfg.num_attention_heads // tp, sp) == "ulysses"
    par = ShardContext(tensor=rules.mesh_axes("heads"), sequence=rules.mesh_axes("tokens"), ulysses=ulysses)
    io = block_io_specs(rules)
    table = io["cos"]
    in_specs = (rules.param_specs(transformer_specs(cfg))["blocks"], io["h"], io["temb"], io["text"],
                None if rope is None else (table, table))
    # Kernel calls (Pallas, cuDNN, FFI) carry no varying-manual-axes types; the einsum paths keep the check.
    kernel = is_kernel(impl)
    fn = jax.shard_map(partial(scan, par=par), mesh=mesh, in_specs=in_specs, out_specs=io["h"], check_vma=not kernel)
    return fn(blocks, h, temb_act, text, rope)


def block_io_specs(rules: ShardingRules = COGVIDEOX_RULES) -> dict:
    """``PartitionSpec`` of each :func:`run_blocks` input on a mesh.

    Returns:
      ``{"h": P(data, sequence, None), "temb": P(data, None), "text": P(sequence), "cos", "sin":
      P(sequence, None)}`` under :data:`COGVIDEOX_RULES`.
    """
    table = rules.spec(("tokens", None))
    return {"h": rules.spec(("batch", "tokens", "embed")), "temb": rules.spec(("batch", None)),
            "text": rules.spec(("tokens",)), "cos": table, "sin": table}


def output_head(params: dict, x: jax.Array, temb: jax.Array, grid: tuple[int, int, int],
                cfg: CogVideoXTransformerConfig) -> jax.Array:
    """``norm_final``, ``norm_out`` (AdaLN, ``shift, scale`` order), ``proj_out``, unpatchify; float32 ``(B, F, C, H, W)``."""
    with jax.named_scope("head"):
        x = layer_norm(x, params["norm_final"], cfg.norm_eps)
        shift, scale = jnp.split(linear(params["norm_out"]["linear"], jax.nn.silu(temb), jnp.float32), 2, axis=-1)
        x = _ada_norm(params["norm_out"]["norm"], x, shift, scale, cfg.norm_eps)
        x = linear(params["proj_out"], x, jnp.float32)
    return _unpatchify(x, grid, cfg)


@partial(jax.jit, static_argnames=("cfg", "attention_impl", "mesh", "rules"))
def forward(
    params: dict,
    latents: jax.Array,
    timestep: jax.Array,
    context: jax.Array,
    positions: PositionTables,
    ofs: jax.Array | None = None,
    *,
    cfg: CogVideoXTransformerConfig,
    attention_impl: AttentionImpl | str = AttentionImpl.XLA,
    mesh: Mesh | None = None,
    rules: ShardingRules = COGVIDEOX_RULES,
) -> jax.Array:
    """Predict the model output (v-prediction for the released models) for a batch of latents.

    Stages: :func:`embed_inputs` -> :func:`join_tokens` (text then video tokens, padded to a
    multiple of sp) -> :func:`run_blocks` -> video tokens cut out -> :func:`output_head`. Outside
    the blocks the computation is partitioned by GSPMD (batch over ``data``; the small embedders
    and head replicated).

    Args:
      params: parameter tree of :func:`transformer_specs` (on a mesh: placed with
        ``rules.param_shardings(transformer_specs(cfg), mesh)``, or loaded with
        ``load_params(..., shardings=rules.sharding_fn(mesh))``).
      latents: ``(B, F, in_channels, H, W)`` latent video (any float dtype); ``F`` divisible by
        ``patch_size_t`` (1.5), ``H, W`` by ``patch_size``.
      timestep: ``(B,)`` timesteps in ``[0, 1000)`` (converted to float32).
      context: ``(B, L, text_embed_dim)`` T5 states (``L = max_text_seq_length`` = 226 wherever a
        position table is added).
      positions: :func:`position_tables` for this latent shape.
      ofs: the CogVideoX1.5 I2V ``ofs`` value(s) (``(1,)`` or ``(B,)``), else None.
      cfg: the architecture (static).
      attention_impl: see :mod:`vidax.core.attention` (static).
      mesh: a :func:`vidax.core.sharding.make_mesh` mesh (static), or None for one device.
      rules: sharding rules (static), default :data:`vidax.models.cogvideox.sharding.COGVIDEOX_RULES`.

    Returns:
      float32 ``(B, F, out_channels, H, W)``.

    Raises:
      ValueError: sizes the patches do not divide, a text length other than
        ``max_text_seq_length`` with a position table, a missing ``ofs``; a mesh the model cannot
        use (see :func:`vidax.models.cogvideox.sharding.check_parallel`).
    """
    h, temb, text, cos, sin = forward_prologue(params, latents, timestep, context, positions, ofs, cfg=cfg, mesh=mesh,
                                               rules=rules)
    with jax.named_scope("blocks"):
        h = run_blocks(params["blocks"], h, temb, text, cos, sin, cfg=cfg, attention_impl=attention_impl, mesh=mesh,
                       rules=rules, valid_tokens=joint_tokens(cfg, latents.shape, context.shape[1]))
    return forward_epilogue(params, h, temb, cfg=cfg, latent_shape=tuple(latents.shape), text_tokens=context.shape[1])


def forward_prologue(params: dict, latents: jax.Array, timestep: jax.Array, context: jax.Array,
                     positions: PositionTables, ofs: jax.Array | None = None, *, cfg: CogVideoXTransformerConfig,
                     mesh: Mesh | None = None, rules: ShardingRules = COGVIDEOX_RULES):
    """:func:`forward` up to the blocks: :func:`embed_inputs`, then :func:`join_tokens`.

    Args and raises: as :func:`forward` (``params`` need not hold ``"blocks"``).

    Returns:
      the :func:`run_blocks` inputs ``(h, temb, text, cos, sin)``: float32 ``h (B, N_pad, D)``, ``temb
      (B, time_embed_dim)``, bool ``text (N_pad,)``, joint RoPE tables or None.
    """
    check_parallel(cfg, mesh, rules, latents.shape[0])
    token_grid(cfg, latents.shape)  # the patch checks, before anything is traced
    if mesh is not None:
        latents = jax.lax.with_sharding_constraint(
            latents, NamedSharding(mesh, rules.spec(("batch",) + (None,) * (latents.ndim - 1))))
    x, c, temb = embed_inputs(params, latents, timestep, context, positions.pos_embed, ofs, cfg)
    sp = axis_size(mesh, rules.mesh_axes("tokens"))
    h, text, cos, sin, _ = join_tokens(x, c, positions.cos, positions.sin, sp)
    return h, temb, text, cos, sin


def forward_epilogue(params: dict, h: jax.Array, temb: jax.Array, *, cfg: CogVideoXTransformerConfig,
                     latent_shape: tuple[int, ...], text_tokens: int) -> jax.Array:
    """:func:`forward` after the blocks: the video tokens cut out of the joint stream, then :func:`output_head`.

    Args:
      h: float32 joint stream ``(B, N_pad, D)`` from :func:`run_blocks`; temb: float32 ``(B, time_embed_dim)``.
      latent_shape: the transformer input's shape ``(B, F, C, H, W)``; text_tokens: ``L``.

    Returns:
      float32 ``(B, F, out_channels, H, W)``.
    """
    grid = token_grid(cfg, latent_shape)
    return output_head(params, h[:, text_tokens:text_tokens + math.prod(grid)], temb, grid, cfg)


def joint_tokens(cfg: CogVideoXTransformerConfig, latent_shape: tuple[int, ...], text_tokens: int) -> int:
    """Tokens of the joint stream before padding: ``text_tokens`` plus :func:`num_tokens`."""
    return text_tokens + num_tokens(cfg, latent_shape)


def num_tokens(cfg: CogVideoXTransformerConfig, latent_shape: tuple[int, ...]) -> int:
    """Video tokens the transformer sees for latents of ``latent_shape`` (text tokens come on top)."""
    return math.prod(token_grid(cfg, latent_shape))
