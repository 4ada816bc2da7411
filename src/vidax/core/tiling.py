"""Tiled VAE decoding: the linear cross-fade between overlapping tiles that the reference VAEs use.

diffusers' ``blend_t`` / ``blend_v`` / ``blend_h`` (``AutoencoderKLCogVideoX``, ``AutoencoderKLLTXVideo``) fade the
first ``extent`` slices of a tile in from the last ``extent`` of its neighbour, with Python-float weights
``(1 - y / extent, y / extent)`` that PyTorch rounds to float32. The tile loops (and the in-place write-back of
each blended tile before it serves as the next one's neighbour, paper Table 4 fault 14) stay in each VAE.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def blend(a: jax.Array, b: jax.Array, extent: int, axis: int) -> jax.Array:
    """``b`` with its first ``extent`` slices along ``axis`` faded in from ``a``'s last ``extent``.

    Args:
      a: the neighbour tile (before ``b`` along ``axis``); b: the tile, any shape of the same rank.
      extent: overlap in elements (clipped to both tiles' sizes; 0 or less returns ``b``).
      axis: the blended axis (2: time, 3: height, 4: width for ``(B, C, T, H, W)`` tiles).

    Returns:
      ``b``'s shape and dtype: ``a[-e:] * (1 - y/e) + b[:e] * (y/e)`` for ``y < e``, then ``b[e:]``.
    """
    extent = min(a.shape[axis], b.shape[axis], extent)
    if extent <= 0:
        return b
    y = np.arange(extent, dtype=np.float64)
    shape = [1] * b.ndim
    shape[axis] = extent
    wa, wb = (1 - y / extent).astype(np.float32).reshape(shape), (y / extent).astype(np.float32).reshape(shape)
    tail = jax.lax.slice_in_dim(a, a.shape[axis] - extent, a.shape[axis], axis=axis)
    head = jax.lax.slice_in_dim(b, 0, extent, axis=axis)
    rest = jax.lax.slice_in_dim(b, extent, b.shape[axis], axis=axis)
    return jnp.concatenate([(tail * wa + head * wb).astype(b.dtype), rest], axis=axis)
