"""Timestep and patch embeddings shared by the diffusion transformers."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np


def timestep_embedding(
    timesteps: jax.Array,
    dim: int,
    *,
    flip_sin_to_cos: bool = True,
    downscale_freq_shift: float = 0.0,
    max_period: float = 10000.0,
    scale: float = 1.0,
) -> jax.Array:
    """Sinusoidal timestep embedding, computed in float32 from float32 timesteps.

    Follows diffusers ``embeddings.get_timestep_embedding`` (``Timesteps``):
    ``freqs = exp(-log(max_period) * arange(dim/2) / (dim/2 - downscale_freq_shift))``,
    ``emb = [sin(t * freqs), cos(t * freqs)]``, halves swapped if ``flip_sin_to_cos``.

    Args:
      timesteps: ``(N,)`` timesteps in the model's units (0..1000 for Wan), any dtype;
        converted to float32 first.
      dim: embedding width (even).

    Returns:
      float32 ``(N, dim)``.
    """
    if dim % 2:
        raise ValueError(f"timestep embedding width must be even, got {dim}")
    half = dim // 2
    # Frequencies are constants: computed on the host in float64 and rounded once to float32.
    freqs = np.exp(-math.log(max_period) * np.arange(half, dtype=np.float64) / (half - downscale_freq_shift))
    freqs = jnp.asarray(freqs.astype(np.float32))
    args = timesteps.astype(jnp.float32)[:, None] * freqs[None, :]
    args = scale * args
    sin, cos = jnp.sin(args), jnp.cos(args)
    return jnp.concatenate([cos, sin] if flip_sin_to_cos else [sin, cos], axis=-1)


def patchify(x: jax.Array, patch_size: tuple[int, int, int]) -> jax.Array:
    """Cut a video latent into flattened 3D patches.

    Args:
      x: ``(B, C, T, H, W)``; ``T, H, W`` divisible by ``patch_size``.
      patch_size: ``(p_t, p_h, p_w)``.

    Returns:
      ``(B, T/p_t * H/p_h * W/p_w, p_t * p_h * p_w * C)``, tokens in ``(t, h, w)`` raster
      order, features in ``(p_t, p_h, p_w, C)`` order (the order of a channels-last
      ``DHWIO`` conv kernel reshaped to a matrix).
    """
    b, c, t, h, w = x.shape
    pt, ph, pw = patch_size
    x = x.reshape(b, c, t // pt, pt, h // ph, ph, w // pw, pw)
    x = x.transpose(0, 2, 4, 6, 3, 5, 7, 1)
    return x.reshape(b, (t // pt) * (h // ph) * (w // pw), pt * ph * pw * c)


def patch_embed(p: dict, x: jax.Array, patch_size: tuple[int, int, int]) -> jax.Array:
    """3D patch embedding, equal to a ``Conv3d`` with ``kernel_size == stride == patch_size``.

    Args:
      p: ``{"kernel": (p_t, p_h, p_w, C, D), "bias": (D,)}`` (layout ``conv3d``).
      x: ``(B, C, T, H, W)``.

    Returns:
      ``(B, N, D)`` tokens in ``(t, h, w)`` raster order, float32 accumulation, kernel dtype.
    """
    k = p["kernel"]
    tokens = patchify(x, patch_size)
    y = jnp.matmul(tokens.astype(k.dtype), k.reshape(-1, k.shape[-1]), preferred_element_type=jnp.float32)
    return (y + p["bias"].astype(jnp.float32)).astype(k.dtype)


def unpatchify(x: jax.Array, grid: tuple[int, int, int], patch_size: tuple[int, int, int], channels: int) -> jax.Array:
    """Inverse of :func:`patchify`.

    Args:
      x: ``(B, N, p_t * p_h * p_w * C)`` with features in ``(p_t, p_h, p_w, C)`` order.
      grid: ``(T/p_t, H/p_h, W/p_w)``.

    Returns:
      ``(B, C, T, H, W)``.
    """
    b = x.shape[0]
    f, h, w = grid
    pt, ph, pw = patch_size
    x = x.reshape(b, f, h, w, pt, ph, pw, channels)
    x = x.transpose(0, 7, 1, 4, 2, 5, 3, 6)
    return x.reshape(b, channels, f * pt, h * ph, w * pw)
