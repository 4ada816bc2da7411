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
position table -> blocks (stacked, under ``lax.scan``: one block compiles once) -> final norm,
AdaLN head -> unpatchify. Each stage sits in a ``jax.named_scope``.

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

from vidax.core.attention import AttentionImpl, attention
from vidax.core.embeddings import patchify, timestep_embedding
from vidax.core.layers import gelu_tanh, layer_norm, linear
from vidax.core.params import ParamSpec, SpecTree
from vidax.core.rope import apply_rope_interleaved
from vidax.models.cogvideox.config import CogVideoXTransformerConfig

#: Epsilon of the per-head q/k LayerNorms (diffusers ``Attention(qk_norm="layer_norm", eps=1e-6)``).
QK_NORM_EPS = 1e-6

# --------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------


def _linear(n_in: int, n_out: int, axes: tuple, *, layers: int | None = None, fp32: bool = False,
            bias: bool = True) -> dict:
    lead, lead_axes = ((layers,), ("layers",)) if layers else ((), ())
    spec = {"kernel": ParamSpec((*lead, n_in, n_out), fp32=fp32, axes=(*lead_axes, *axes))}
    if bias:
        spec["bias"] = ParamSpec((*lead, n_out), fp32=fp32, axes=(*lead_axes, axes[1]))
    return spec


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
        proj = _linear(cfg.patch_features, d, (None, "embed"), fp32=True)
    patch_embed = {"proj": proj, "text_proj": _linear(cfg.text_embed_dim, d, (None, "embed"), fp32=True)}
    if cfg.use_learned_positional_embeddings:
        patch_embed["pos_embedding"] = ParamSpec((1, num_learned_positions(cfg), d), fp32=True, axes=(None, None, "embed"))

    def ada(n_out: int, layers: int | None = None) -> dict:
        return {"linear": _linear(t, n_out, (None, None), layers=layers, fp32=True), "norm": _norm(d, "embed", layers)}

    specs: SpecTree = {
        "patch_embed": patch_embed,
        "time_embedding": {
            "linear_1": _linear(d, t, ("embed", None), fp32=True),
            "linear_2": _linear(t, t, (None, None), fp32=True),
        },
    }
    if cfg.ofs_embed_dim:
        o = cfg.ofs_embed_dim
        specs["ofs_embedding"] = {
            "linear_1": _linear(o, o, (None, None), fp32=True),
            "linear_2": _linear(o, o, (None, None), fp32=True),
        }
    specs["blocks"] = {
        "norm1": ada(6 * d, L),
        "attn1": {
            "to_q": _linear(d, d, ("embed", "heads"), layers=L, bias=cfg.attention_bias),
            "to_k": _linear(d, d, ("embed", "heads"), layers=L, bias=cfg.attention_bias),
            "to_v": _linear(d, d, ("embed", "heads"), layers=L, bias=cfg.attention_bias),
            "norm_q": _norm(hd, None, L),
            "norm_k": _norm(hd, None, L),
            "to_out": _linear(d, d, ("heads", "embed"), layers=L),
        },
        "norm2": ada(6 * d, L),
        "ff": {
            "up": _linear(d, cfg.ff_inner_dim, ("embed", "mlp"), layers=L),
            "down": _linear(cfg.ff_inner_dim, d, ("mlp", "embed"), layers=L),
        },
    }
    specs["norm_final"] = _norm(d, "embed")
    specs["norm_out"] = ada(2 * d)
    specs["proj_out"] = _linear(d, cfg.out_channels * cfg.temporal_patch * p * p, ("embed", None))
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


def _linspace_f32(start: float, stop: float, n: int) -> np.ndarray:
    """``torch.linspace(start, stop, n, dtype=float32)`` on the CPU, operation for operation."""
    a, b = np.float32(start), np.float32(stop)
    if n == 1:
        return np.array([a], np.float32)
    step = (b - a) / np.float32(n - 1)
    i = np.arange(n)
    lo = a + step * i.astype(np.float32)
    hi = b - step * (n - 1 - i).astype(np.float32)
    return np.where(i < n // 2, lo, hi).astype(np.float32)


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
        pos_h = _linspace_f32(top, bottom * (gh - 1) / gh, gh)
        pos_w = _linspace_f32(left, right * (gw - 1) / gw, gw)
        pos_t = _linspace_f32(0, f * (f - 1) / f, f)
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


def _attention(p, h, n_text, cos, sin, cfg, impl):
    """``CogVideoXAttnProcessor2_0`` on the joint sequence ``h (B, L + S, D)``; returns float32 ``(B, L + S, D)``."""
    b, s, _ = h.shape
    heads, hd = cfg.num_attention_heads, cfg.attention_head_dim
    dtype = p["to_q"]["kernel"].dtype

    def qk(name: str, norm: str) -> jax.Array:
        y = linear(p[name], h, jnp.float32).reshape(b, s, heads, hd)
        y = layer_norm(y, p[norm], QK_NORM_EPS)
        if cos is not None:  # RoPE on the video tokens only
            y = jnp.concatenate([y[:, :n_text], apply_rope_interleaved(y[:, n_text:], cos, sin)], axis=1)
        return y.astype(dtype)

    q, k = qk("to_q", "norm_q"), qk("to_k", "norm_k")
    v = linear(p["to_v"], h).reshape(b, s, heads, hd)
    o = attention(q, k, v, implementation=impl)
    return linear(p["to_out"], o.reshape(b, s, heads * hd), jnp.float32)


def block(p: dict, x: jax.Array, c: jax.Array, temb_act: jax.Array, cos, sin, cfg: CogVideoXTransformerConfig,
          impl: AttentionImpl) -> tuple[jax.Array, jax.Array]:
    """One ``CogVideoXBlock``.

    Args:
      p: one block's parameters (no ``layers`` axis).
      x: float32 video stream ``(B, S, D)``; c: float32 text stream ``(B, L, D)``.
      temb_act: float32 ``silu(temb)`` ``(B, time_embed_dim)``.
      cos, sin: RoPE tables ``(S, head_dim/2)`` or None.

    Returns:
      the updated ``(x, c)``, float32.
    """
    eps, n_text = cfg.norm_eps, c.shape[1]
    dtype = p["attn1"]["to_q"]["kernel"].dtype
    with jax.named_scope("attention"):
        mod = linear(p["norm1"]["linear"], temb_act, jnp.float32)
        shift, scale, gate, e_shift, e_scale, e_gate = jnp.split(mod, 6, axis=-1)
        h = jnp.concatenate([_ada_norm(p["norm1"]["norm"], c, e_shift, e_scale, eps),
                             _ada_norm(p["norm1"]["norm"], x, shift, scale, eps)], axis=1).astype(dtype)
        a = _attention(p["attn1"], h, n_text, cos, sin, cfg, impl)
        x = x + gate[:, None, :] * a[:, n_text:]
        c = c + e_gate[:, None, :] * a[:, :n_text]
    with jax.named_scope("ff"):
        mod = linear(p["norm2"]["linear"], temb_act, jnp.float32)
        shift, scale, gate, e_shift, e_scale, e_gate = jnp.split(mod, 6, axis=-1)
        h = jnp.concatenate([_ada_norm(p["norm2"]["norm"], c, e_shift, e_scale, eps),
                             _ada_norm(p["norm2"]["norm"], x, shift, scale, eps)], axis=1).astype(dtype)
        ff = linear(p["ff"]["down"], gelu_tanh(linear(p["ff"]["up"], h)), jnp.float32)
        x = x + gate[:, None, :] * ff[:, n_text:]
        c = c + e_gate[:, None, :] * ff[:, :n_text]
    return x, c


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


def run_blocks(blocks: dict, x: jax.Array, c: jax.Array, temb: jax.Array, cos, sin, *,
               cfg: CogVideoXTransformerConfig, attention_impl: AttentionImpl | str = AttentionImpl.XLA):
    """Run a stack of blocks (all, or a chunk: the offloading hook) under ``lax.scan``.

    Args:
      blocks: stacked block parameters (leading ``layers`` axis, any length).
      x, c: float32 video ``(B, S, D)`` and text ``(B, L, D)`` streams.
      temb: float32 ``(B, time_embed_dim)``.
      cos, sin: RoPE tables or None.

    Returns:
      ``(x, c)`` float32.
    """
    impl = AttentionImpl(attention_impl)
    temb_act = jax.nn.silu(temb)

    def body(carry, p):
        return block(p, *carry, temb_act, cos, sin, cfg, impl), None

    return jax.lax.scan(body, (x, c), blocks)[0]


def output_head(params: dict, x: jax.Array, temb: jax.Array, grid: tuple[int, int, int],
                cfg: CogVideoXTransformerConfig) -> jax.Array:
    """``norm_final``, ``norm_out`` (AdaLN, ``shift, scale`` order), ``proj_out``, unpatchify; float32 ``(B, F, C, H, W)``."""
    with jax.named_scope("head"):
        x = layer_norm(x, params["norm_final"], cfg.norm_eps)
        shift, scale = jnp.split(linear(params["norm_out"]["linear"], jax.nn.silu(temb), jnp.float32), 2, axis=-1)
        x = _ada_norm(params["norm_out"]["norm"], x, shift, scale, cfg.norm_eps)
        x = linear(params["proj_out"], x, jnp.float32)
    return _unpatchify(x, grid, cfg)


@partial(jax.jit, static_argnames=("cfg", "attention_impl"))
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
) -> jax.Array:
    """Predict the model output (v-prediction for the released models) for a batch of latents.

    Args:
      params: parameter tree of :func:`transformer_specs`.
      latents: ``(B, F, in_channels, H, W)`` latent video (any float dtype); ``F`` divisible by
        ``patch_size_t`` (1.5), ``H, W`` by ``patch_size``.
      timestep: ``(B,)`` timesteps in ``[0, 1000)`` (converted to float32).
      context: ``(B, L, text_embed_dim)`` T5 states (``L = max_text_seq_length`` = 226 wherever a
        position table is added).
      positions: :func:`position_tables` for this latent shape.
      ofs: the CogVideoX1.5 I2V ``ofs`` value(s) (``(1,)`` or ``(B,)``), else None.
      cfg: the architecture (static).
      attention_impl: see :mod:`vidax.core.attention` (static).

    Returns:
      float32 ``(B, F, out_channels, H, W)``.

    Raises:
      ValueError: sizes the patches do not divide, a text length other than
        ``max_text_seq_length`` with a position table, a missing ``ofs``.
    """
    grid = token_grid(cfg, latents.shape)
    x, c, temb = embed_inputs(params, latents, timestep, context, positions.pos_embed, ofs, cfg)
    cos = None if positions.cos is None else jnp.asarray(positions.cos, jnp.float32)
    sin = None if positions.sin is None else jnp.asarray(positions.sin, jnp.float32)
    with jax.named_scope("blocks"):
        x, _ = run_blocks(params["blocks"], x, c, temb, cos, sin, cfg=cfg, attention_impl=attention_impl)
    return output_head(params, x, temb, grid, cfg)


def num_tokens(cfg: CogVideoXTransformerConfig, latent_shape: tuple[int, ...]) -> int:
    """Video tokens the transformer sees for latents of ``latent_shape`` (text tokens come on top)."""
    return math.prod(token_grid(cfg, latent_shape))
