"""LTX-2's audio-video diffusion transformer in JAX.

Follows diffusers 0.42.1 ``models/transformers/transformer_ltx2.py`` (``LTX2VideoTransformer3DModel``,
``LTX2VideoTransformerBlock``, ``LTX2Attention`` with ``LTX2AudioVideoAttnProcessor``,
``LTX2AudioVideoRotaryPosEmbed``, ``LTX2AdaLayerNormSingle``) and upstream Lightricks/LTX-2 ``ltx-core``
``model/transformer/rope.py`` (``precompute_freqs_cis``, ``generate_freq_grid_np``) for the rotary tables.

Two token streams run side by side through ``num_layers`` identical blocks (stacked, one ``lax.scan``: one
compiled block program). Each block, per stream: AdaLN-modulated self-attention with RoPE; text cross-attention
(with ``cross_attn_mod``: the query AdaLN-modulated and gated, the text keys/values modulated by a per-block prompt
table plus, with ``use_prompt_adaln_single``, a sigma embedding); audio->video and video->audio cross-attention
with temporal-only RoPE, modulated by per-block tables plus global cross-attention embeddings; an AdaLN-modulated
GELU-tanh feed-forward. Attentions RMSNorm q and k across heads; ``gated_attn`` multiplies each head's output by
``2 sigmoid(to_gate_logits(query input))``.

Precision: the residual streams, every norm, modulation and RoPE rotation are float32; matmuls run in the weights'
dtype (bf16 or fp32) with float32 accumulation; the AdaLN tables, the timestep / cross-attention / prompt
embedders and the q/k norm scales are float32 leaves (paper fault 4b). The RoPE tables are built on the host in
numpy: frequencies ``theta^linspace(0, 1, n) * pi / 2`` in float64 rounded to float32 (upstream
``generate_freq_grid_np``), positions and angles in float32, as upstream and diffusers do; they stay float32 in a
bf16 run (upstream casts them to the compute dtype; diffusers keeps float32).

:func:`_forward` is :func:`prologue`, :func:`run_blocks` and :func:`epilogue`; the block is written against a
:class:`BlockParallel` (one device by default), so the mesh and offload programs of
:mod:`vidax.models.ltx2.block_loop` run the same block inside ``shard_map`` and on chunks of the stack.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.core.attention import AttentionImpl, attention
from vidax.core.layers import layer_norm, linear
from vidax.core.mmdit import time_proj
from vidax.core.parallel import ShardContext
from vidax.core.params import ParamSpec, SpecTree, linear_spec
from vidax.models.ltx2.config import LTX2TransformerConfig

ATTENTIONS = ("attn1", "audio_attn1", "attn2", "audio_attn2", "audio_to_video_attn", "video_to_audio_attn")
_MAX_TOKENS = 1 << 22


# --------------------------------------------------------------------------- parameters


def _attn_dims(cfg: LTX2TransformerConfig, name: str) -> tuple[int, int, int, bool]:
    """(query width, key/value input width, heads, gated) of one block attention; inner width heads * head_dim."""
    d, da = cfg.inner_dim, cfg.audio_inner_dim
    h, ha = cfg.num_attention_heads, cfg.audio_num_attention_heads
    return {"attn1": (d, d, h, cfg.gated_attn), "audio_attn1": (da, da, ha, cfg.audio_gated_attn),
            "attn2": (d, cfg.cross_attention_dim, h, cfg.gated_attn),
            "audio_attn2": (da, cfg.audio_cross_attention_dim, ha, cfg.audio_gated_attn),
            "audio_to_video_attn": (d, da, ha, cfg.gated_attn),
            "video_to_audio_attn": (da, d, ha, cfg.audio_gated_attn)}[name]


def _head_dim(cfg: LTX2TransformerConfig, name: str) -> int:
    return cfg.attention_head_dim if name in ("attn1", "attn2") else cfg.audio_attention_head_dim


def _attention_specs(cfg: LTX2TransformerConfig, name: str) -> dict:
    n = cfg.num_layers
    q_dim, kv_dim, heads, gated = _attn_dims(cfg, name)
    inner = heads * _head_dim(cfg, name)
    spec = {"to_q": linear_spec(q_dim, inner, ("embed", "heads"), layers=n, bias=cfg.attention_bias),
            "to_k": linear_spec(kv_dim, inner, ("embed", "heads"), layers=n, bias=cfg.attention_bias),
            "to_v": linear_spec(kv_dim, inner, ("embed", "heads"), layers=n, bias=cfg.attention_bias),
            "to_out": linear_spec(inner, q_dim, ("heads", "embed"), layers=n, bias=cfg.attention_out_bias),
            "norm_q": {"scale": ParamSpec((n, inner), fp32=True, axes=("layers", "heads"))},
            "norm_k": {"scale": ParamSpec((n, inner), fp32=True, axes=("layers", "heads"))}}
    if gated:
        spec["to_gate_logits"] = linear_spec(q_dim, heads, ("embed", "heads"), layers=n)
    return spec


def _adaln_specs(dim: int, rows: int) -> dict:
    """``LTX2AdaLayerNormSingle``: timestep MLP ``256 -> dim -> dim`` and ``linear`` to ``rows * dim``, float32."""
    return {"timestep_embedder": {"linear_1": linear_spec(256, dim, (None, "embed"), fp32=True),
                                  "linear_2": linear_spec(dim, dim, ("embed", None), fp32=True)},
            "linear": linear_spec(dim, rows * dim, (None, None), fp32=True)}


def _table(*shape: int) -> ParamSpec:
    return ParamSpec(shape, fp32=True, axes=(None,) * len(shape))


def _block_table(layers: int, *shape: int) -> ParamSpec:
    """A per-block AdaLN table stacked over the blocks (float32; the ``layers`` axis lets the loader place it in
    offload chunks from any layout, an already stacked vidax file included)."""
    return ParamSpec((layers,) + shape, fp32=True, axes=("layers",) + (None,) * len(shape))


def transformer_specs(cfg: LTX2TransformerConfig) -> SpecTree:
    """Spec tree of ``LTX2VideoTransformer3DModel`` (blocks stacked under ``blocks``; AdaLN leaves float32)."""
    d, da, n = cfg.inner_dim, cfg.audio_inner_dim, cfg.num_layers
    rows, arows = (9 if cfg.cross_attn_mod else 6), (9 if cfg.audio_cross_attn_mod else 6)
    blocks: dict = {name: _attention_specs(cfg, name) for name in ATTENTIONS}
    blocks["ff"] = {"proj_in": linear_spec(d, 4 * d, ("embed", "mlp"), layers=n, bias=cfg.ff_bias),
                    "proj_out": linear_spec(4 * d, d, ("mlp", "embed"), layers=n, bias=cfg.ff_bias)}
    blocks["audio_ff"] = {"proj_in": linear_spec(da, 4 * da, ("embed", "mlp"), layers=n, bias=cfg.audio_ff_bias),
                          "proj_out": linear_spec(4 * da, da, ("mlp", "embed"), layers=n, bias=cfg.audio_ff_bias)}
    blocks["scale_shift_table"] = _block_table(n, rows, d)
    blocks["audio_scale_shift_table"] = _block_table(n, arows, da)
    if cfg.prompt_modulation:
        blocks["prompt_scale_shift_table"] = _block_table(n, 2, d)
        blocks["audio_prompt_scale_shift_table"] = _block_table(n, 2, da)
    blocks["video_a2v_cross_attn_scale_shift_table"] = _block_table(n, 5, d)
    blocks["audio_a2v_cross_attn_scale_shift_table"] = _block_table(n, 5, da)
    specs: SpecTree = {
        "proj_in": linear_spec(cfg.in_channels, d, (None, "embed")),
        "audio_proj_in": linear_spec(cfg.audio_in_channels, da, (None, "embed")),
        "time_embed": _adaln_specs(d, rows),
        "audio_time_embed": _adaln_specs(da, arows),
        "av_cross_attn_video_scale_shift": _adaln_specs(d, 4),
        "av_cross_attn_audio_scale_shift": _adaln_specs(da, 4),
        "av_cross_attn_video_a2v_gate": _adaln_specs(d, 1),
        "av_cross_attn_audio_v2a_gate": _adaln_specs(da, 1),
        "scale_shift_table": _table(2, d),
        "audio_scale_shift_table": _table(2, da),
        "proj_out": linear_spec(d, cfg.out_ch, ("embed", None)),
        "audio_proj_out": linear_spec(da, cfg.audio_out_ch, ("embed", None)),
        "blocks": blocks,
    }
    if cfg.use_keyframes_abs_pos_embedding:
        specs["keyframes_abs_pos_embedding"] = ParamSpec((1, d), axes=(None, "embed"))
    if cfg.use_prompt_embeddings:
        for name, width in (("caption_projection", d), ("audio_caption_projection", da)):
            specs[name] = {"linear_1": linear_spec(cfg.caption_channels, width, (None, "embed")),
                           "linear_2": linear_spec(width, width, ("embed", None))}
    if cfg.prompt_adaln:
        specs["prompt_adaln"] = _adaln_specs(d, 2)
        specs["audio_prompt_adaln"] = _adaln_specs(da, 2)
    return specs


# --------------------------------------------------------------------------- positions and RoPE (host, numpy)


def video_coords(cfg: LTX2TransformerConfig, num_frames: int, height: int, width: int,
                 fps: float = 24.0) -> np.ndarray:
    """float32 ``(3, F*H*W, 2)`` pixel-space ``[start, end)`` bounds of each latent token (frames in seconds),
    ``LTX2AudioVideoRotaryPosEmbed.prepare_video_coords`` in its float32 operation order."""
    f32 = np.float32
    axes = [np.arange(0, s, dtype=f32) for s in (num_frames, height, width)]
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=0).reshape(3, -1)
    lat = np.stack([grid, grid + f32(1)], axis=-1)  # patch sizes are 1
    pix = lat * np.asarray(cfg.vae_scale_factors, f32)[:, None, None]
    pix[0] = np.maximum(pix[0] + f32(cfg.causal_offset) - f32(cfg.vae_scale_factors[0]), f32(0)) / f32(fps)
    return pix


def audio_coords(cfg: LTX2TransformerConfig, num_frames: int, shift: int = 0) -> np.ndarray:
    """float32 ``(1, T, 2)`` ``[start, end)`` seconds of each audio latent frame
    (``LTX2AudioVideoRotaryPosEmbed.prepare_audio_coords``)."""
    f32 = np.float32
    sf = f32(cfg.audio_scale_factor)
    g = np.arange(shift, num_frames + shift, dtype=f32)

    def seconds(mel):
        mel = np.maximum(mel + f32(cfg.causal_offset) - sf, f32(0))
        return mel * f32(cfg.audio_hop_length) / f32(cfg.audio_sampling_rate)

    return np.stack([seconds(g * sf), seconds((g + f32(1)) * sf)], axis=-1)[None]


_grid_video_coords, _grid_audio_coords = video_coords, audio_coords


def rope_table(cfg: LTX2TransformerConfig, coords: np.ndarray, max_pos: tuple[float, ...], dim: int,
               heads: int) -> tuple[np.ndarray, np.ndarray]:
    """float32 ``(cos, sin)`` for ``coords`` ``(P, T, 2)``: ``(T, dim)`` interleaved, ``(T, heads, dim/2/heads)``
    split.

    Upstream ``precompute_freqs_cis`` with ``use_middle_indices_grid``: positions are the bounds' midpoints over
    ``max_pos``; frequencies ``theta^linspace(0, 1, dim // (2P))`` in float64 (``generate_freq_grid_np``; in float32
    without ``rope_double_precision``) times ``pi/2``, rounded to float32; angles ``(2 pos - 1) freq`` in float32,
    ordered frequency-major; the missing ``dim/2 - P n`` (split) or ``dim % 2P`` (interleaved) leading entries are
    ``cos 1, sin 0``."""
    f32 = np.float32
    p_dims = coords.shape[0]
    mid = (coords[..., 0] + coords[..., 1]) / f32(2)  # (P, T)
    frac = np.stack([mid[i] / f32(max_pos[i]) for i in range(p_dims)], axis=-1)  # (T, P)
    ftype = np.float64 if cfg.rope_double_precision else np.float32
    n = dim // (2 * p_dims)
    freqs = (np.power(ftype(cfg.rope_theta), np.linspace(0.0, 1.0, n, dtype=ftype)) * np.pi / 2).astype(f32)
    ang = (frac[..., None] * f32(2) - f32(1)) * freqs  # (T, P, n)
    ang = np.swapaxes(ang, -1, -2).reshape(ang.shape[0], -1)  # (T, n * P), frequency-major
    cos, sin = np.cos(ang).astype(f32), np.sin(ang).astype(f32)
    t = ang.shape[0]
    if cfg.rope_type == "interleaved":
        cos, sin = np.repeat(cos, 2, axis=-1), np.repeat(sin, 2, axis=-1)
        pad = dim % (2 * p_dims)
    else:
        pad = dim // 2 - cos.shape[-1]
    cos = np.concatenate([np.ones((t, pad), f32), cos], axis=-1)
    sin = np.concatenate([np.zeros((t, pad), f32), sin], axis=-1)
    if cfg.rope_type == "split":
        return cos.reshape(t, heads, -1), sin.reshape(t, heads, -1)
    return cos, sin


def rope_tables(cfg: LTX2TransformerConfig, vcoords: np.ndarray, acoords: np.ndarray) -> dict[str, tuple]:
    """The four tables of a forward: video / audio self-attention, and the temporal-only video / audio tables of the
    cross-modal attentions (width ``audio_cross_attention_dim``, base ``max(pos_embed_max_pos,
    audio_pos_embed_max_pos)`` frames). Coordinates ``(3, S, 2)`` / ``(1, T, 2)`` shared by the batch give tables
    without a batch axis; per-sample ``(B, 3, S, 2)`` / ``(B, 1, T, 2)`` give tables with a leading ``B``."""
    if vcoords.ndim == 4 or acoords.ndim == 4:
        b = vcoords.shape[0] if vcoords.ndim == 4 else acoords.shape[0]
        vb = vcoords if vcoords.ndim == 4 else np.broadcast_to(vcoords, (b, *vcoords.shape))
        ab = acoords if acoords.ndim == 4 else np.broadcast_to(acoords, (b, *acoords.shape))
        per = [rope_tables(cfg, vb[i], ab[i]) for i in range(b)]
        return {k: tuple(np.stack([t[k][j] for t in per]) for j in range(2)) for k in per[0]}
    cross_max = max(cfg.pos_embed_max_pos, cfg.audio_pos_embed_max_pos)
    return {
        "video": rope_table(cfg, vcoords, (cfg.pos_embed_max_pos, cfg.base_height, cfg.base_width), cfg.inner_dim,
                            cfg.num_attention_heads),
        "audio": rope_table(cfg, acoords, (cfg.audio_pos_embed_max_pos,), cfg.audio_inner_dim,
                            cfg.audio_num_attention_heads),
        "ca_video": rope_table(cfg, vcoords[:1], (cross_max,), cfg.audio_cross_attention_dim,
                               cfg.num_attention_heads),
        "ca_audio": rope_table(cfg, acoords[:1], (cross_max,), cfg.audio_cross_attention_dim,
                               cfg.audio_num_attention_heads),
    }


def _rotate(x: jax.Array, table: tuple, rope_type: str) -> jax.Array:
    """Rotate float32 ``x`` ``(B, T, W)``: interleaved pairs over ``W`` (table ``(T, W)``), or split halves of each
    of ``g`` groups of ``W / g`` (table ``(T, g, r)``); tables may carry a leading ``B``."""
    cos, sin = table
    if rope_type == "interleaved":
        pairs = x.reshape(*x.shape[:-1], -1, 2)
        rot = jnp.stack([-pairs[..., 1], pairs[..., 0]], axis=-1).reshape(x.shape)
        return x * cos + rot * sin
    b, t, w = x.shape
    g = cos.shape[-2]
    xh = x.reshape(b, t, g, w // g)
    half = xh.shape[-1] // 2
    first, second = xh[..., :half], xh[..., half:]
    return jnp.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1).reshape(b, t, w)


# --------------------------------------------------------------------------- block


def _rms(x: jax.Array, scale: jax.Array | None = None, eps: float = 1e-6) -> jax.Array:
    x = x.astype(jnp.float32)
    y = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + eps)
    return y if scale is None else y * scale.astype(jnp.float32)


def _rms_heads(x: jax.Array, scale: jax.Array, eps: float, par: ShardContext, full: int) -> jax.Array:
    """RMSNorm across all heads (``full`` features) of float32 ``x`` whose last axis may be this tensor shard's
    slice (the mean of squares summed over ``tensor``); on one device exactly :func:`_rms`."""
    if par.tensor is None:
        return _rms(x, scale, eps)
    ss = par.psum_tensor(jnp.sum(jnp.square(x), axis=-1, keepdims=True))
    return x * jax.lax.rsqrt(ss / full + eps) * scale.astype(jnp.float32)


def _tp(par: ShardContext) -> int:
    return 1 if par.tensor is None else jax.lax.axis_size(par.tensor)


def _attend(p: dict, x: jax.Array, ctx: jax.Array, heads: int, eps: float, rope_type: str, impl,
            q_rope=None, k_rope=None, bias=None, perturb=None, par: ShardContext = ShardContext(),
            kv_valid: int | None = None) -> jax.Array:
    """``LTX2Attention`` with ``LTX2AudioVideoAttnProcessor``: float32 ``x (B, S, Dq)`` attends float32
    ``ctx (B, L, Dkv)``; returns float32 ``(B, S, Dq)``. ``perturb``: ``(on, mask (B,))`` of
    ``LTX2PerturbedAttnProcessor`` (STG): where ``on``, the attention output becomes ``lerp(v, out, mask)``.

    Inside ``shard_map`` (``par``): the projections hold this tensor shard's ``heads / tp`` heads (q/k RMSNorm
    across all heads by a ``psum``; ``to_out`` row-parallel); with ``par.sequence`` both ``x`` and ``ctx`` are
    split by tokens and attention runs in :meth:`ShardContext.to_attention`'s layout (Ulysses ``all_to_all``, or
    keys / values all-gathered); ``kv_valid``: the real key count when ``ctx``'s tokens are zero-padded (the padded
    keys are masked)."""
    dtype = p["to_q"]["kernel"].dtype
    xd, cd = x.astype(dtype), ctx.astype(dtype)
    q = linear(p["to_q"], xd, jnp.float32)
    k = linear(p["to_k"], cd, jnp.float32)
    full = q.shape[-1] * _tp(par)
    q = _rms_heads(q, p["norm_q"]["scale"], eps, par, full)
    k = _rms_heads(k, p["norm_k"]["scale"], eps, par, full)
    v = linear(p["to_v"], cd)
    if q_rope is not None:
        q, k = _rotate(q, q_rope, rope_type), _rotate(k, k_rope, rope_type)
    b, s, w = q.shape
    heads = heads // _tp(par)
    qh, kh, vh = (q.astype(dtype).reshape(b, s, heads, -1), k.astype(dtype).reshape(b, k.shape[1], heads, -1),
                  v.reshape(b, v.shape[1], heads, -1))
    qh, kh, vh = par.to_attention(qh, kh, vh)
    lengths = None if kv_valid is None else jnp.full((b,), kv_valid, jnp.int32)
    o = attention(qh, kh, vh, implementation=impl, kv_lengths=lengths,
                  bias=None if bias is None else (bias[:, None] if bias.ndim == 3 else bias[:, None, None, :]))
    o = par.from_attention(o)
    if perturb is not None:
        on, pm = perturb
        o32, v32 = o.reshape(b, s, w).astype(jnp.float32), v.astype(jnp.float32)
        lerp = v32 + pm[:, None, None] * (o32 - v32)
        o = jnp.where(on, lerp, o32).astype(dtype).reshape(b, s, heads, -1)
    if "to_gate_logits" in p:
        gates = 2.0 * jax.nn.sigmoid(linear(p["to_gate_logits"], xd, jnp.float32))
        o = (o.astype(jnp.float32) * gates[..., None]).astype(dtype)
    return par.row_linear(p["to_out"], o.reshape(b, s, w), jnp.float32)


def _ff(p: dict, x: jax.Array, par: ShardContext = ShardContext()) -> jax.Array:
    dtype = p["proj_in"]["kernel"].dtype
    g = jax.nn.gelu(linear(p["proj_in"], x.astype(dtype), jnp.float32), approximate=True)
    return par.row_linear(p["proj_out"], g.astype(dtype), jnp.float32)


@dataclass(frozen=True)
class BlockParallel:
    """How a block runs inside ``shard_map`` (:mod:`vidax.models.ltx2.block_loop`); the default is one device.

    Attributes:
      video: the :class:`ShardContext` of the attention over video tokens with the video heads (``attn1``).
      audio: that of the attentions with the audio heads over split tokens (``audio_attn1``, ``audio_to_video_attn``,
        ``video_to_audio_attn``): its ``ulysses`` is whether sp divides the audio heads per tensor shard.
      video_tokens, audio_tokens: the real token counts when a stream is zero-padded to a multiple of sp (the padded
        keys are masked in every attention that reads them), else None.
    """

    video: ShardContext = ShardContext()
    audio: ShardContext = ShardContext()
    video_tokens: int | None = None
    audio_tokens: int | None = None


def _mod(table: jax.Array, emb: jax.Array) -> list[jax.Array]:
    """``get_mod_params``: float32 ``table (n, D) + emb (B, N, n*D)`` split into ``n`` rows ``(B, N, D)`` (``N``: 1,
    or one per token for per-token timesteps)."""
    b, n = emb.shape[:2]
    vals = table.astype(jnp.float32)[None, None] + emb.reshape(b, n, table.shape[0], -1)
    return [vals[:, :, i] for i in range(table.shape[0])]


def block(p: dict, x: jax.Array, a: jax.Array, ctx: jax.Array, actx: jax.Array, cond: dict, ropes: dict,
          cfg: LTX2TransformerConfig, impl, text_bias=None, audio_text_bias=None, perturb=None,
          cross_modal: bool = True, self_bias=None,
          par: BlockParallel = None) -> tuple[jax.Array, jax.Array]:
    """One ``LTX2VideoTransformerBlock`` (``use_a2v_cross_attention`` and ``use_v2a_cross_attention`` on, no masks)
    on float32 video ``x (B, S, D)`` and audio ``a (B, T, Da)``; ``cond``: the embeddings of
    :func:`_conditioning`; ``text_bias`` / ``audio_text_bias``: optional float32 ``(B, L)`` additive scores of the
    text cross-attentions; ``perturb``: ``(on, mask)`` STG of both self-attentions; ``cross_modal`` false:
    ``isolate_modalities``; ``self_bias``: optional float32 ``(B, S, S)`` additive scores of the video
    self-attention; ``par``: the :class:`BlockParallel` of a ``shard_map`` body (default: one device). Returns
    the updated float32 streams."""
    par = par or BlockParallel()
    pv, pa, pt = par.video, par.audio, ShardContext(tensor=par.video.tensor)
    eps, rt = cfg.norm_eps, cfg.rope_type
    h, ha = cfg.num_attention_heads, cfg.audio_num_attention_heads
    vm = _mod(p["scale_shift_table"], cond["temb"])
    am = _mod(p["audio_scale_shift_table"], cond["temb_audio"])
    with jax.named_scope("self_attention"):
        xn = _rms(x, None, eps) * (1 + vm[1]) + vm[0]
        x = x + _attend(p["attn1"], xn, xn, h, eps, rt, impl, ropes["video"], ropes["video"], bias=self_bias,
                        perturb=perturb, par=pv, kv_valid=par.video_tokens) * vm[2]
        an = _rms(a, None, eps) * (1 + am[1]) + am[0]
        a = a + _attend(p["audio_attn1"], an, an, ha, eps, rt, impl, ropes["audio"], ropes["audio"],
                        perturb=perturb, par=pa, kv_valid=par.audio_tokens) * am[2]
    with jax.named_scope("text_cross_attention"):
        if cfg.prompt_modulation:
            if cfg.prompt_adaln:
                kv_shift, kv_scale = _mod(p["prompt_scale_shift_table"], cond["temb_prompt"])
                akv_shift, akv_scale = _mod(p["audio_prompt_scale_shift_table"], cond["temb_prompt_audio"])
            else:
                kv_shift, kv_scale = p["prompt_scale_shift_table"].astype(jnp.float32)
                akv_shift, akv_scale = p["audio_prompt_scale_shift_table"].astype(jnp.float32)
            ctx = ctx * (1 + kv_scale) + kv_shift
            actx = actx * (1 + akv_scale) + akv_shift
        xn = _rms(x, None, eps)
        if cfg.cross_attn_mod:
            xn = xn * (1 + vm[7]) + vm[6]
        o = _attend(p["attn2"], xn, ctx, h, eps, rt, impl, bias=text_bias, par=pt)
        x = x + (o * vm[8] if cfg.cross_attn_mod else o)
        an = _rms(a, None, eps)
        if cfg.audio_cross_attn_mod:
            an = an * (1 + am[7]) + am[6]
        o = _attend(p["audio_attn2"], an, actx, ha, eps, rt, impl, bias=audio_text_bias, par=pt)
        a = a + (o * am[8] if cfg.audio_cross_attn_mod else o)
    if cross_modal:
        with jax.named_scope("audio_video_cross_attention"):
            xn, an = _rms(x, None, eps), _rms(a, None, eps)
            vt, at = p["video_a2v_cross_attn_scale_shift_table"], p["audio_a2v_cross_attn_scale_shift_table"]
            v_a2v_scale, v_a2v_shift, v_v2a_scale, v_v2a_shift = _mod(vt[:4], cond["video_ca_scale_shift"])
            a_a2v_scale, a_a2v_shift, a_v2a_scale, a_v2a_shift = _mod(at[:4], cond["audio_ca_scale_shift"])
            a2v_gate = _mod(vt[4:], cond["video_ca_gate"])[0]
            v2a_gate = _mod(at[4:], cond["audio_ca_gate"])[0]
            o = _attend(p["audio_to_video_attn"], xn * (1 + v_a2v_scale) + v_a2v_shift,
                        an * (1 + a_a2v_scale) + a_a2v_shift, ha, eps, rt, impl, ropes["ca_video"], ropes["ca_audio"],
                        par=pa, kv_valid=par.audio_tokens)
            x = x + a2v_gate * o
            o = _attend(p["video_to_audio_attn"], an * (1 + a_v2a_scale) + a_v2a_shift,
                        xn * (1 + v_v2a_scale) + v_v2a_shift, ha, eps, rt, impl, ropes["ca_audio"], ropes["ca_video"],
                        par=pa, kv_valid=par.video_tokens)
            a = a + v2a_gate * o
    with jax.named_scope("feed_forward"):
        x = x + _ff(p["ff"], _rms(x, None, eps) * (1 + vm[4]) + vm[3], pt) * vm[5]
        a = a + _ff(p["audio_ff"], _rms(a, None, eps) * (1 + am[4]) + am[3], pt) * am[5]
    return x, a


# --------------------------------------------------------------------------- model


def _adaln(p: dict, t: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``LTX2AdaLayerNormSingle`` on float32 ``t (B, N)``: float32 ``(linear(silu(emb)) (B, N, rows*D),
    emb (B, N, D))``."""
    tp = p["timestep_embedder"]
    b, n = t.shape
    emb = linear(tp["linear_2"], jax.nn.silu(linear(tp["linear_1"], time_proj(t.reshape(-1)), jnp.float32)),
                 jnp.float32)
    out = linear(p["linear"], jax.nn.silu(emb), jnp.float32)
    return out.reshape(b, n, -1), emb.reshape(b, n, -1)


def _conditioning(params: dict, cfg: LTX2TransformerConfig, timestep, audio_timestep, sigma, audio_sigma,
                  use_cross_timestep: bool) -> dict:
    temb, emb = _adaln(params["time_embed"], timestep)
    temb_audio, aemb = _adaln(params["audio_time_embed"], audio_timestep)
    cond = {"temb": temb, "temb_audio": temb_audio, "emb": emb, "emb_audio": aemb}
    if cfg.prompt_adaln:
        cond["temb_prompt"] = _adaln(params["prompt_adaln"], sigma)[0]
        cond["temb_prompt_audio"] = _adaln(params["audio_prompt_adaln"], audio_sigma)[0]
    gate_factor = cfg.cross_attn_timestep_scale_multiplier / cfg.timestep_scale_multiplier
    vt = audio_sigma if use_cross_timestep else timestep
    at = sigma if use_cross_timestep else audio_timestep
    cond["video_ca_scale_shift"] = _adaln(params["av_cross_attn_video_scale_shift"], vt)[0]
    cond["video_ca_gate"] = _adaln(params["av_cross_attn_video_a2v_gate"], vt * gate_factor)[0]
    cond["audio_ca_scale_shift"] = _adaln(params["av_cross_attn_audio_scale_shift"], at)[0]
    cond["audio_ca_gate"] = _adaln(params["av_cross_attn_audio_v2a_gate"], at * gate_factor)[0]
    return cond


def _head(p_table: jax.Array, emb: jax.Array, p_proj: dict, x: jax.Array) -> jax.Array:
    vals = p_table.astype(jnp.float32)[None, None] + emb[:, :, None]
    y = layer_norm(x, None, 1e-6) * (1 + vals[:, :, 1]) + vals[:, :, 0]
    return linear(p_proj, y.astype(p_proj["kernel"].dtype), jnp.float32)


def _caption(p: dict, x: jax.Array) -> jax.Array:
    """``PixArtAlphaTextProjection`` (linear, GELU-tanh, linear), float32."""
    dtype = p["linear_1"]["kernel"].dtype
    g = jax.nn.gelu(linear(p["linear_1"], x.astype(dtype), jnp.float32), approximate=True)
    return linear(p["linear_2"], g.astype(dtype), jnp.float32)


def prologue(params: dict, x, a, ctx, actx, timestep, audio_timestep, sigma, audio_sigma, keyframes, *,
             cfg: LTX2TransformerConfig, use_cross_timestep: bool) -> tuple:
    """:func:`_forward` before the blocks: float32 ``(x (B, S, D), a (B, T, Da), ctx, actx, cond)`` (``cond``: the
    embeddings of :func:`_conditioning`)."""
    cond = _conditioning(params, cfg, timestep, audio_timestep, sigma, audio_sigma, use_cross_timestep)
    x = linear(params["proj_in"], x.astype(params["proj_in"]["kernel"].dtype), jnp.float32)
    a = linear(params["audio_proj_in"], a.astype(params["audio_proj_in"]["kernel"].dtype), jnp.float32)
    if keyframes is not None:
        emb = params["keyframes_abs_pos_embedding"].astype(jnp.float32)
        x = x + (keyframes > 0).astype(jnp.float32) * emb
    ctx, actx = ctx.astype(jnp.float32), actx.astype(jnp.float32)
    if cfg.use_prompt_embeddings:
        ctx, actx = _caption(params["caption_projection"], ctx), _caption(params["audio_caption_projection"], actx)
    return x, a, ctx, actx, cond


def run_blocks(blocks: dict, x, a, ctx, actx, cond, ropes, text_bias, audio_text_bias, flags, perturbation_mask,
               self_bias, *, cfg: LTX2TransformerConfig, impl: AttentionImpl, isolate_modalities: bool,
               par: BlockParallel | None = None) -> tuple[jax.Array, jax.Array]:
    """The stacked ``blocks`` (all, or a chunk) under one ``lax.scan`` on the float32 streams; ``flags``: None or
    bool ``(layers,)`` the STG blocks of this stack, ``perturbation_mask`` ``(B,)``; ``par``: inside ``shard_map``
    (:class:`BlockParallel`)."""

    def step(carry, xs):
        blk, on = xs
        perturb = None if flags is None else (on, perturbation_mask)
        return block(blk, *carry, ctx, actx, cond, ropes, cfg, impl, text_bias, audio_text_bias, perturb,
                     not isolate_modalities, self_bias, par), None

    (x, a), _ = jax.lax.scan(step, (x, a), (blocks, flags))
    return x, a


def epilogue(params: dict, x, a, cond) -> tuple[jax.Array, jax.Array]:
    """:func:`_forward` after the blocks: the output heads, float32 ``(video, audio)``."""
    out = _head(params["scale_shift_table"], cond["emb"], params["proj_out"], x)
    aout = _head(params["audio_scale_shift_table"], cond["emb_audio"], params["audio_proj_out"], a)
    return out, aout


@partial(jax.jit, static_argnames=("cfg", "attention_impl", "use_cross_timestep", "isolate_modalities"))
def _forward(params, x, a, ctx, actx, timestep, audio_timestep, sigma, audio_sigma, ropes, keyframes, text_bias,
             audio_text_bias, stg, self_bias, *,
             cfg: LTX2TransformerConfig, attention_impl: str, use_cross_timestep: bool, isolate_modalities: bool):
    impl = AttentionImpl(attention_impl)
    x, a, ctx, actx, cond = prologue(params, x, a, ctx, actx, timestep, audio_timestep, sigma, audio_sigma,
                                     keyframes, cfg=cfg, use_cross_timestep=use_cross_timestep)
    flags, pm = (None, None) if stg is None else stg
    x, a = run_blocks(params["blocks"], x, a, ctx, actx, cond, ropes, text_bias, audio_text_bias, flags, pm,
                      self_bias, cfg=cfg, impl=impl, isolate_modalities=isolate_modalities)
    return epilogue(params, x, a, cond)


def _per_sample(v: Any, b: int, name: str, tokens: int | None = None) -> jax.Array:
    """float32 ``(B, 1)`` from a scalar or ``(B,)``, or ``(B, tokens)`` from a per-token ``(B, tokens)``."""
    shape = tuple(np.shape(v))
    if tokens is not None and shape == (b, tokens):
        return jnp.asarray(v, jnp.float32)
    arr = jnp.asarray(v, jnp.float32).reshape(-1)
    if arr.shape[0] == 1:
        arr = jnp.broadcast_to(arr, (b,))
    if arr.shape != (b,):
        extra = f" or ({b}, {tokens})" if tokens is not None else ""
        raise ValueError(f"{name} must be a scalar or (B,) = ({b},){extra}; got shape {shape}")
    return arr[:, None]


def forward(params: dict, cfg: LTX2TransformerConfig, hidden_states: Any, audio_hidden_states: Any,
            encoder_hidden_states: Any, audio_encoder_hidden_states: Any, timestep: Any, *,
            num_frames: int | None = None, height: int | None = None, width: int | None = None,
            audio_num_frames: int | None = None, fps: float = 24.0, video_coords: Any = None, audio_coords: Any = None,
            audio_timestep: Any = None, sigma: Any = None, audio_sigma: Any = None,
            use_cross_timestep: bool = False, video_keyframes_mask: Any = None,
            encoder_attention_mask: Any = None, audio_encoder_attention_mask: Any = None,
            isolate_modalities: bool = False, spatio_temporal_guidance_blocks: Any = None,
            perturbation_mask: Any = None, video_self_attention_mask: Any = None,
            attention_impl: AttentionImpl | str = AttentionImpl.XLA,
            precision: str | None = "highest", program: Any = None) -> tuple[jax.Array, jax.Array]:
    """``LTX2VideoTransformer3DModel.forward`` (every input but the a2v / v2a / audio self-attention masks, which
    the reference's forward never passes either).

    Args:
      params: tree of :func:`transformer_specs` (:func:`vidax.models.ltx2.keymap.load_transformer`).
      hidden_states: ``(B, F*H*W, in_channels)`` patchified video latents (frame-major).
      audio_hidden_states: ``(B, audio_num_frames, audio_in_channels)``.
      encoder_hidden_states, audio_encoder_hidden_states: ``(B, L, cross_attention_dim)`` /
        ``(B, L, audio_cross_attention_dim)`` text contexts (the connectors' outputs; ``caption_channels`` wide
        with ``use_prompt_embeddings``).
      timestep: scalar, ``(B,)`` or per token ``(B, F*H*W)``, already times ``timestep_scale_multiplier``;
        ``audio_timestep`` (scalar, ``(B,)`` or ``(B, audio_num_frames)``) defaults to it.
      sigma, audio_sigma: scalar or ``(B,)``; read by ``prompt_adaln`` and with ``use_cross_timestep``; ``sigma``
        defaults to ``timestep / timestep_scale_multiplier`` (per-sample timesteps only), ``audio_sigma`` to
        ``sigma``.
      video_keyframes_mask: optional ``(B, F*H*W, 1)``, non-zero on tokens that get ``keyframes_abs_pos_embedding``
        (needs ``use_keyframes_abs_pos_embedding``).
      encoder_attention_mask, audio_encoder_attention_mask: optional ``(B, L)`` 1 for text tokens, 0 for padding;
        as the reference, an additive ``-10000 (1 - mask)`` score bias on the text cross-attention.
      video_self_attention_mask: optional ``(B, S, S)`` multiplicative mask in ``[0, 1]`` of the video
        self-attention; as the reference, an additive ``-10000 (1 - mask)`` score bias (audio unaffected).
      isolate_modalities: skip the audio<->video cross-attention in every block (modality guidance).
      spatio_temporal_guidance_blocks: block indices whose self-attentions (video and audio) are perturbed (STG,
        needs ``perturbed_attn``): output ``lerp(v, attention, perturbation_mask)``; ``perturbation_mask``
        ``(B,)`` defaults to zeros (all samples perturbed: the values alone).
      num_frames, height, width: the latent grid; fps: the video frame rate (RoPE time axis); audio_num_frames.
      video_coords, audio_coords: optional explicit RoPE positions, ``(B, 3, S, 2)`` / ``(B, 1, T, 2)`` (or without
        ``B``, shared) ``[start, end)`` bounds as ``prepare_video_coords`` / ``prepare_audio_coords`` give them;
        they take precedence over the grid arguments, as in the reference.
      program: the device program, called as :func:`_forward` (default :func:`_forward`; a mesh / offload program of
        :func:`vidax.models.ltx2.block_loop.make_forward`, then ``params`` is its ``.params``).

    Returns:
      float32 ``(video (B, F*H*W, out_channels), audio (B, audio_num_frames, audio_out_channels))``.

    Raises:
      ValueError: shapes that do not fit the configuration or the grid.
    """
    x, a = np.shape(hidden_states), np.shape(audio_hidden_states)
    b = x[0] if len(x) == 3 else -1
    if video_coords is not None:
        vc = np.asarray(video_coords, np.float32)
        if vc.shape[-3:-2] != (3,) or vc.shape[-1] != 2 or vc.ndim not in (3, 4):
            raise ValueError(f"video_coords must be (B, 3, S, 2) or (3, S, 2); got {vc.shape}")
        tokens = vc.shape[-2]
    elif None in (num_frames, height, width):
        raise ValueError("give num_frames, height and width, or video_coords")
    else:
        tokens = num_frames * height * width
        if min(num_frames, height, width) <= 0 or tokens > _MAX_TOKENS:
            raise ValueError(f"latent grid {(num_frames, height, width)} is empty or over {_MAX_TOKENS} tokens")
        vc = _grid_video_coords(cfg, num_frames, height, width, fps)
    if audio_coords is not None:
        ac = np.asarray(audio_coords, np.float32)
        if ac.shape[-3:-2] != (1,) or ac.shape[-1] != 2 or ac.ndim not in (3, 4):
            raise ValueError(f"audio_coords must be (B, 1, T, 2) or (1, T, 2); got {ac.shape}")
        audio_num_frames = ac.shape[-2]
    elif audio_num_frames is None:
        raise ValueError("give audio_num_frames or audio_coords")
    elif not 0 < audio_num_frames <= _MAX_TOKENS:
        raise ValueError(f"audio_num_frames={audio_num_frames} must be in 1..{_MAX_TOKENS}")
    else:
        ac = _grid_audio_coords(cfg, audio_num_frames)
    for name, c in (("video_coords", vc), ("audio_coords", ac)):
        if c.ndim == 4 and c.shape[0] != b:
            raise ValueError(f"{name} batch {c.shape[0]} differs from the latents' {b}")
    if len(x) != 3 or x[1:] != (tokens, cfg.in_channels) or not 0 < tokens <= _MAX_TOKENS:
        raise ValueError(f"hidden_states must be (B, {tokens}, {cfg.in_channels}); got {x}")
    if a != (b, audio_num_frames, cfg.audio_in_channels) or not 0 < audio_num_frames <= _MAX_TOKENS:
        raise ValueError(f"audio_hidden_states must be ({b}, {audio_num_frames}, {cfg.audio_in_channels}); got {a}")
    cw = cfg.caption_channels if cfg.use_prompt_embeddings else None
    for name, v, w in (("encoder_hidden_states", encoder_hidden_states, cw or cfg.cross_attention_dim),
                       ("audio_encoder_hidden_states", audio_encoder_hidden_states,
                        cw or cfg.audio_cross_attention_dim)):
        s = np.shape(v)
        if len(s) != 3 or s[0] != b or s[2] != w:
            raise ValueError(f"{name} must be ({b}, L, {w}); got {s}")
    t = _per_sample(timestep, b, "timestep", tokens)
    if audio_timestep is None and t.shape[1] != 1:
        raise ValueError("a per-token timestep needs an explicit audio_timestep")
    at = t if audio_timestep is None else _per_sample(audio_timestep, b, "audio_timestep", audio_num_frames)
    if sigma is None and t.shape[1] != 1:
        raise ValueError("a per-token timestep needs an explicit sigma")
    sg = t / cfg.timestep_scale_multiplier if sigma is None else _per_sample(sigma, b, "sigma")
    asg = sg if audio_sigma is None else _per_sample(audio_sigma, b, "audio_sigma")
    kf = None
    if video_keyframes_mask is not None:
        if not cfg.use_keyframes_abs_pos_embedding:
            raise ValueError("video_keyframes_mask needs a model with use_keyframes_abs_pos_embedding")
        if np.shape(video_keyframes_mask) != (b, tokens, 1):
            raise ValueError(f"video_keyframes_mask must be ({b}, {tokens}, 1); got {np.shape(video_keyframes_mask)}")
        kf = jnp.asarray(video_keyframes_mask, jnp.float32)
    stg = None
    if spatio_temporal_guidance_blocks:
        if not cfg.perturbed_attn:
            raise ValueError("spatio_temporal_guidance_blocks needs a model with perturbed_attn")
        idx = sorted({int(i) for i in spatio_temporal_guidance_blocks})
        if idx[0] < 0 or idx[-1] >= cfg.num_layers:
            raise ValueError(f"spatio_temporal_guidance_blocks {idx} outside 0..{cfg.num_layers - 1}")
        flags = np.zeros((cfg.num_layers,), bool)
        flags[idx] = True
        pm = np.zeros((b,), np.float32) if perturbation_mask is None else np.asarray(perturbation_mask, np.float32)
        if pm.reshape(-1).shape != (b,):
            raise ValueError(f"perturbation_mask must be ({b},); got {pm.shape}")
        stg = (jnp.asarray(flags), jnp.asarray(pm.reshape(-1)))
    self_bias = None
    if video_self_attention_mask is not None:
        if np.shape(video_self_attention_mask) != (b, tokens, tokens):
            raise ValueError(f"video_self_attention_mask must be ({b}, {tokens}, {tokens}); "
                             f"got {np.shape(video_self_attention_mask)}")
        self_bias = (1.0 - jnp.asarray(video_self_attention_mask, jnp.float32)) * -10000.0
    masks = []
    for name, m, c in (("encoder_attention_mask", encoder_attention_mask, encoder_hidden_states),
                       ("audio_encoder_attention_mask", audio_encoder_attention_mask, audio_encoder_hidden_states)):
        if m is None:
            masks.append(None)
            continue
        if np.shape(m) != tuple(np.shape(c)[:2]):
            raise ValueError(f"{name} must be {tuple(np.shape(c)[:2])}; got {np.shape(m)}")
        masks.append((1.0 - jnp.asarray(m, jnp.float32)) * -10000.0)
    ropes = rope_tables(cfg, vc, ac)
    ropes = jax.tree_util.tree_map(jnp.asarray, ropes)
    ctx = contextlib.nullcontext() if precision is None else jax.default_matmul_precision(precision)
    with ctx:
        return (program or _forward)(params, jnp.asarray(hidden_states), jnp.asarray(audio_hidden_states),
                        jnp.asarray(encoder_hidden_states), jnp.asarray(audio_encoder_hidden_states), t, at, sg, asg,
                        ropes, kf, *masks, stg, self_bias, cfg=cfg, isolate_modalities=bool(isolate_modalities),
                        attention_impl=AttentionImpl(attention_impl).value,
                        use_cross_timestep=bool(use_cross_timestep))


def load_transformer(folder: str | Path, dtype: Any = np.float32, **load_kwargs):
    """Load diffusers' ``transformer/`` folder strictly (see :func:`vidax.models.ltx2.keymap.load_transformer`)."""
    from vidax.models.ltx2.keymap import load_transformer as _load
    return _load(folder, dtype, **load_kwargs)
