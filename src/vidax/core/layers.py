"""Shared layers as pure functions over parameter dicts.

Parameters follow :mod:`vidax.checkpoint.keymap`'s layouts: a linear layer is
``{"kernel": (in, out), "bias": (out,)}``, a norm ``{"scale": (D,), "bias": (D,)}``.

Precision: matmuls take their inputs in the kernel's dtype (bf16 weights run
bf16 matmuls) and accumulate in float32; normalisations always compute in
float32, as the references' ``FP32LayerNorm`` and ``RMSNorm`` under autocast do.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def linear(p: dict, x: jax.Array, out_dtype=None) -> jax.Array:
    """``x @ kernel + bias``.

    Args:
      p: ``{"kernel": (in, out), "bias": (out,) optional}``.
      x: ``(..., in)``; cast to the kernel's dtype for the matmul.
      out_dtype: result dtype; default the kernel's dtype. The product accumulates in float32.

    Returns:
      ``(..., out)``.
    """
    w = p["kernel"]
    out_dtype = out_dtype or w.dtype
    y = jnp.matmul(x.astype(w.dtype), w, preferred_element_type=jnp.float32)
    if "bias" in p:
        y = y + p["bias"].astype(jnp.float32)
    return y.astype(out_dtype)


def layer_norm(x: jax.Array, p: dict | None = None, eps: float = 1e-6) -> jax.Array:
    """LayerNorm over the last axis, computed in float32 (reference: ``FP32LayerNorm``).

    Args:
      x: ``(..., D)``, any float dtype.
      p: ``{"scale": (D,), "bias": (D,)}``, or ``None`` for ``elementwise_affine=False``.

    Returns:
      float32 ``(..., D)``.
    """
    x = x.astype(jnp.float32)
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    y = (x - mean) * jax.lax.rsqrt(var + eps)
    if p is not None:
        y = y * p["scale"].astype(jnp.float32)
        if "bias" in p:
            y = y + p["bias"].astype(jnp.float32)
    return y


def rms_norm(x: jax.Array, p: dict | None = None, eps: float = 1e-6, out_dtype=None) -> jax.Array:
    """RMSNorm over the last axis in float32 (reference: ``torch.nn.RMSNorm``, T5 ``LayerNorm``).

    Args:
      x: ``(..., D)``.
      p: ``{"scale": (D,)}`` or ``None``.
      out_dtype: result dtype; default ``x.dtype``.

    Returns:
      ``(..., D)``.
    """
    out_dtype = out_dtype or x.dtype
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(jnp.square(xf), axis=-1, keepdims=True) + eps)
    if p is not None:
        y = y * p["scale"].astype(jnp.float32)
    return y.astype(out_dtype)


def gelu_tanh(x: jax.Array) -> jax.Array:
    """GELU, tanh approximation (PyTorch ``approximate="tanh"``)."""
    return jax.nn.gelu(x, approximate=True)


def gelu(x: jax.Array) -> jax.Array:
    """GELU, exact erf form (PyTorch default)."""
    return jax.nn.gelu(x, approximate=False)
