"""Rotary position embeddings.

Tables are built on the host in float64, as the references build them
(diffusers ``get_1d_rotary_pos_embed(freqs_dtype=float64)``): at positions in the
hundreds, float32 or bf16 angles lose the low bits that distinguish neighbours.
They are cast to float32 only when handed to the device.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def rope_frequencies(dim: int, positions: np.ndarray, theta: float = 10000.0) -> np.ndarray:
    """Angles ``pos * theta^(-2j/dim)`` for ``j < dim/2``, float64.

    Args:
      dim: rotary width (even).
      positions: ``(N,)`` positions.

    Returns:
      float64 ``(N, dim/2)``.
    """
    if dim % 2:
        raise ValueError(f"rotary width must be even, got {dim}")
    inv = 1.0 / (theta ** (np.arange(0, dim, 2, dtype=np.float64)[: dim // 2] / dim))
    return np.outer(np.asarray(positions, dtype=np.float64), inv)


def rope_3d_angles(head_dim: int, grid: tuple[int, int, int], theta: float = 10000.0) -> np.ndarray:
    """Wan-style 3D RoPE angles for a ``(F, H, W)`` token grid, float64.

    The head dimension splits into ``t_dim = head_dim - 2 * (2 * (head_dim // 6))``
    and ``h_dim = w_dim = 2 * (head_dim // 6)``; each axis gets 1D RoPE over its own
    index (diffusers ``WanRotaryPosEmbed``, Wan ``rope_params``).

    Returns:
      float64 ``(F * H * W, head_dim / 2)`` angles, tokens in ``(f, h, w)`` raster order.
    """
    h_dim = w_dim = 2 * (head_dim // 6)
    t_dim = head_dim - h_dim - w_dim
    f, h, w = grid
    at = rope_frequencies(t_dim, np.arange(f), theta)
    ah = rope_frequencies(h_dim, np.arange(h), theta)
    aw = rope_frequencies(w_dim, np.arange(w), theta)
    angles = np.concatenate(
        [
            np.broadcast_to(at[:, None, None, :], (f, h, w, at.shape[-1])),
            np.broadcast_to(ah[None, :, None, :], (f, h, w, ah.shape[-1])),
            np.broadcast_to(aw[None, None, :, :], (f, h, w, aw.shape[-1])),
        ],
        axis=-1,
    )
    return angles.reshape(f * h * w, head_dim // 2)


def linspace_f32(start: float, stop: float, n: int) -> np.ndarray:
    """``torch.linspace(start, stop, n, dtype=float32)`` by its scalar formula, in float32.

    PyTorch's CPU kernel computes ``start + step * i`` for the first half and ``stop - step * (n - 1 - i)``
    for the second, with ``step = (stop - start) / (n - 1)``, all in float32. Its vectorised loop instead
    steps ``base + k * step`` from the start of each SIMD vector (8 or 16 lanes by the CPU's instruction
    set), so beyond one vector the reference itself differs by an ulp between machines; this function
    follows the scalar formula, which those vectorised values agree with up to the first vector's length.

    Returns:
      float32 ``(n,)``.
    """
    a, b = np.float32(start), np.float32(stop)
    if n == 1:
        return np.array([a], np.float32)
    step = (b - a) / np.float32(n - 1)
    i = np.arange(n)
    lo = a + step * i.astype(np.float32)
    hi = b - step * (n - 1 - i).astype(np.float32)
    return np.where(i < n // 2, lo, hi).astype(np.float32)


def rope_cos_sin(angles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``cos`` and ``sin`` of host float64 angles, as float32 arrays ready for the device."""
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def apply_rope_interleaved(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotate adjacent pairs ``(x[2j], x[2j+1])`` by the table's angles.

    Args:
      x: ``(B, S, H, D)``.
      cos, sin: ``(S, D/2)`` float32, the same for every head, or ``(S, H, D/2)``, one table per head
        (a rotation over all heads' features, as LTX-Video's, cut per head).

    Returns:
      ``(B, S, H, D)`` in ``x.dtype``, computed in float32.
    """
    xf = x.astype(jnp.float32).reshape(*x.shape[:-1], x.shape[-1] // 2, 2)
    x1, x2 = xf[..., 0], xf[..., 1]
    c = cos[None] if cos.ndim == 3 else cos[None, :, None, :]
    s = sin[None] if sin.ndim == 3 else sin[None, :, None, :]
    out = jnp.stack([x1 * c - x2 * s, x1 * s + x2 * c], axis=-1)
    return out.reshape(x.shape).astype(x.dtype)
