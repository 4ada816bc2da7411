"""The Wan2.1 diffusion transformer, as pure functions over a parameter dict.

Follows diffusers ``models/transformers/transformer_wan.py``
(``WanTransformer3DModel``, ``WanTransformerBlock``, ``WanAttention``,
``WanTimeTextImageEmbedding``, ``WanRotaryPosEmbed``) and the Wan repository's
``wan/modules/model.py``.

Stages: patch embedding -> condition embedding (timestep, text) -> blocks
(stacked, run under ``lax.scan``: one block compiles once) -> AdaLN head ->
unpatchify. Each stage sits in a ``jax.named_scope``.

Precision: the residual stream between and inside blocks is float32 whatever
the weight dtype (paper Table 4 fault 1: a bf16 residual over 40 blocks washes
out 720p output); matmul inputs are cast to the weight dtype; norms, the
condition embedder and the AdaLN tables are float32 leaves.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from vidax.core.attention import AttentionImpl, attention
from vidax.core.embeddings import patch_embed, timestep_embedding, unpatchify
from vidax.core.layers import gelu_tanh, layer_norm, linear, rms_norm
from vidax.core.params import ParamSpec, SpecTree
from vidax.core.rope import apply_rope_interleaved, rope_3d_angles, rope_cos_sin
from vidax.models.wan.config import WanTransformerConfig


def _linear_spec(n_in: int, n_out: int, axes: tuple, *, layers: int | None = None, fp32: bool = False) -> dict:
    lead = (layers,) if layers else ()
    lead_axes = ("layers",) if layers else ()
    return {
        "kernel": ParamSpec((*lead, n_in, n_out), fp32=fp32, axes=(*lead_axes, *axes)),
        "bias": ParamSpec((*lead, n_out), fp32=fp32, axes=(*lead_axes, axes[1])),
    }


def transformer_specs(cfg: WanTransformerConfig) -> SpecTree:
    """The spec tree of a Wan2.1 transformer: every parameter's shape, fp32 pin and logical axes.

    Blocks are stacked: each block parameter leads with a ``layers`` axis of size ``num_layers``.
    """
    d, L = cfg.dim, cfg.num_layers
    pt, ph, pw = cfg.patch_size

    def attn() -> dict:
        return {
            "to_q": _linear_spec(d, d, ("embed", "heads"), layers=L),
            "to_k": _linear_spec(d, d, ("embed", "heads"), layers=L),
            "to_v": _linear_spec(d, d, ("embed", "heads"), layers=L),
            "to_out": _linear_spec(d, d, ("heads", "embed"), layers=L),
            "norm_q": {"scale": ParamSpec((L, d), fp32=True, axes=("layers", "heads"))},
            "norm_k": {"scale": ParamSpec((L, d), fp32=True, axes=("layers", "heads"))},
        }

    blocks = {
        "attn1": attn(),
        "attn2": attn(),
        "ffn": {
            "up": _linear_spec(d, cfg.ffn_dim, ("embed", "mlp"), layers=L),
            "down": _linear_spec(cfg.ffn_dim, d, ("mlp", "embed"), layers=L),
        },
        "scale_shift_table": ParamSpec((L, 1, 6, d), fp32=True, axes=("layers", None, None, "embed")),
    }
    if cfg.cross_attn_norm:
        blocks["norm2"] = {
            "scale": ParamSpec((L, d), fp32=True, axes=("layers", "embed")),
            "bias": ParamSpec((L, d), fp32=True, axes=("layers", "embed")),
        }
    return {
        "patch_embedding": {
            "kernel": ParamSpec((pt, ph, pw, cfg.in_channels, d), axes=(None, None, None, None, "embed")),
            "bias": ParamSpec((d,), axes=("embed",)),
        },
        "condition_embedder": {
            "time_embedder": {
                "linear_1": _linear_spec(cfg.freq_dim, d, (None, "embed"), fp32=True),
                "linear_2": _linear_spec(d, d, ("embed", "embed2"), fp32=True),
            },
            "time_proj": _linear_spec(d, 6 * d, ("embed", None), fp32=True),
            "text_embedder": {
                "linear_1": _linear_spec(cfg.text_dim, d, (None, "embed"), fp32=True),
                "linear_2": _linear_spec(d, d, ("embed", "embed2"), fp32=True),
            },
        },
        "blocks": blocks,
        "proj_out": _linear_spec(d, cfg.out_channels * pt * ph * pw, ("embed", None)),
        "scale_shift_table": ParamSpec((1, 2, d), fp32=True, axes=(None, None, "embed")),
    }


def rope_tables(cfg: WanTransformerConfig, latent_shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """3D RoPE ``cos, sin`` for a latent of shape ``(B, C, T, H, W)``, built on the host in float64.

    Returns:
      two float32 arrays ``(T/p_t * H/p_h * W/p_w, attention_head_dim / 2)``.

    Raises:
      ValueError: a grid axis longer than ``rope_max_seq_len``.
    """
    grid = _grid(cfg, latent_shape)
    if max(grid) > cfg.rope_max_seq_len:
        raise ValueError(f"token grid {grid} exceeds rope_max_seq_len={cfg.rope_max_seq_len}")
    return rope_cos_sin(rope_3d_angles(cfg.attention_head_dim, grid))


def _grid(cfg: WanTransformerConfig, latent_shape: tuple[int, ...]) -> tuple[int, int, int]:
    _, _, t, h, w = latent_shape
    pt, ph, pw = cfg.patch_size
    if t % pt or h % ph or w % pw:
        raise ValueError(f"latent frames/height/width {(t, h, w)} must be divisible by patch_size {cfg.patch_size}")
    return t // pt, h // ph, w // pw


def _self_attention(p, x, cos, sin, cfg, impl):
    b, s, _ = x.shape
    heads = cfg.num_attention_heads
    q = rms_norm(linear(p["to_q"], x), p["norm_q"], cfg.eps)
    k = rms_norm(linear(p["to_k"], x), p["norm_k"], cfg.eps)
    v = linear(p["to_v"], x)
    q = apply_rope_interleaved(q.reshape(b, s, heads, -1), cos, sin)
    k = apply_rope_interleaved(k.reshape(b, s, heads, -1), cos, sin)
    o = attention(q, k, v.reshape(b, s, heads, -1), implementation=impl)
    return linear(p["to_out"], o.reshape(b, s, -1))


def _cross_attention(p, x, context, cfg, impl):
    b, s, _ = x.shape
    heads = cfg.num_attention_heads
    q = rms_norm(linear(p["to_q"], x), p["norm_q"], cfg.eps).reshape(b, s, heads, -1)
    k = rms_norm(linear(p["to_k"], context), p["norm_k"], cfg.eps).reshape(b, context.shape[1], heads, -1)
    v = linear(p["to_v"], context).reshape(b, context.shape[1], heads, -1)
    o = attention(q, k, v, implementation=impl)
    return linear(p["to_out"], o.reshape(b, s, -1))


def block(p: dict, x: jax.Array, context: jax.Array, temb6: jax.Array, cos, sin, cfg: WanTransformerConfig, impl) -> jax.Array:
    """One Wan transformer block (diffusers ``WanTransformerBlock``), per-sample AdaLN.

    Args:
      p: one block's parameters (no ``layers`` axis).
      x: float32 residual stream ``(B, S, D)``.
      context: text tokens after the text embedder ``(B, L, D)``, compute dtype.
      temb6: float32 ``(B, 6, D)`` time projection.
      cos, sin: RoPE tables ``(S, head_dim/2)``.

    Returns:
      float32 ``(B, S, D)``.
    """
    dtype = p["attn1"]["to_q"]["kernel"].dtype
    mod = p["scale_shift_table"].astype(jnp.float32) + temb6  # (B, 6, D)
    shift_msa, scale_msa, gate_msa, c_shift, c_scale, c_gate = (mod[:, i : i + 1] for i in range(6))

    with jax.named_scope("self_attention"):
        h = (layer_norm(x, None, cfg.eps) * (1 + scale_msa) + shift_msa).astype(dtype)
        x = x + _self_attention(p["attn1"], h, cos, sin, cfg, impl).astype(jnp.float32) * gate_msa
    with jax.named_scope("cross_attention"):
        h = layer_norm(x, p.get("norm2"), cfg.eps).astype(dtype) if cfg.cross_attn_norm else x.astype(dtype)
        x = x + _cross_attention(p["attn2"], h, context, cfg, impl).astype(jnp.float32)
    with jax.named_scope("ffn"):
        h = (layer_norm(x, None, cfg.eps) * (1 + c_scale) + c_shift).astype(dtype)
        ff = linear(p["ffn"]["down"], gelu_tanh(linear(p["ffn"]["up"], h)))
        x = x + ff.astype(jnp.float32) * c_gate
    return x


def condition_embedding(p: dict, cfg: WanTransformerConfig, timestep: jax.Array, context: jax.Array):
    """Time and text embeddings (diffusers ``WanTimeTextImageEmbedding``).

    Args:
      timestep: ``(B,)`` timesteps in ``[0, 1000]``, converted to float32.
      context: ``(B, L, text_dim)`` text encoder output.

    Returns:
      ``temb`` float32 ``(B, D)``, ``temb6`` float32 ``(B, 6, D)``, projected context float32 ``(B, L, D)``.
    """
    t_freq = timestep_embedding(timestep, cfg.freq_dim, flip_sin_to_cos=True, downscale_freq_shift=0)
    te = p["time_embedder"]
    temb = linear(te["linear_2"], jax.nn.silu(linear(te["linear_1"], t_freq, jnp.float32)), jnp.float32)
    temb6 = linear(p["time_proj"], jax.nn.silu(temb), jnp.float32).reshape(temb.shape[0], 6, cfg.dim)
    tx = p["text_embedder"]
    ctx = linear(tx["linear_2"], gelu_tanh(linear(tx["linear_1"], context, jnp.float32)), jnp.float32)
    return temb, temb6, ctx


@partial(jax.jit, static_argnames=("cfg", "attention_impl"))
def forward(
    params: dict,
    latents: jax.Array,
    timestep: jax.Array,
    context: jax.Array,
    cos: jax.Array,
    sin: jax.Array,
    *,
    cfg: WanTransformerConfig,
    attention_impl: AttentionImpl | str = AttentionImpl.XLA,
) -> jax.Array:
    """Predict the flow (velocity) for a batch of video latents.

    Args:
      params: parameter tree of :func:`transformer_specs`.
      latents: ``(B, in_channels, T, H, W)`` latent video (any float dtype).
      timestep: ``(B,)`` timesteps in ``[0, 1000]`` (float32).
      context: ``(B, L, text_dim)`` text encoder states (L = 512 for Wan).
      cos, sin: RoPE tables from :func:`rope_tables` for this latent shape.
      cfg: the architecture (static).
      attention_impl: attention implementation (static), see :mod:`vidax.core.attention`.

    Returns:
      float32 ``(B, out_channels, T, H, W)``.
    """
    dtype = params["patch_embedding"]["kernel"].dtype
    grid = _grid(cfg, latents.shape)
    impl = AttentionImpl(attention_impl)
    with jax.named_scope("patch_embedding"):
        x = patch_embed(params["patch_embedding"], latents, cfg.patch_size).astype(jnp.float32)
    with jax.named_scope("condition_embedder"):
        temb, temb6, ctx = condition_embedding(params["condition_embedder"], cfg, timestep, context)
        ctx = ctx.astype(dtype)

    def body(x, p):
        return block(p, x, ctx, temb6, cos, sin, cfg, impl), None

    with jax.named_scope("blocks"):
        x, _ = jax.lax.scan(body, x, params["blocks"])
    with jax.named_scope("head"):
        shift, scale = (params["scale_shift_table"] + temb[:, None, :]).swapaxes(0, 1)[:, :, None, :]
        x = (layer_norm(x, None, cfg.eps) * (1 + scale) + shift).astype(dtype)
        x = linear(params["proj_out"], x, jnp.float32)
    return unpatchify(x, grid, cfg.patch_size, cfg.out_channels)


def num_tokens(cfg: WanTransformerConfig, latent_shape: tuple[int, ...]) -> int:
    """Sequence length the transformer sees for a latent of ``latent_shape``."""
    return math.prod(_grid(cfg, latent_shape))
