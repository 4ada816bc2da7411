"""The one attention entry point.

Every model calls :func:`attention`; the implementation is chosen by an enum,
not by the model. Padding is given as per-sample key lengths (right padding),
never as a dense ``(B, H, Sq, Sk)`` mask (paper Table 4 fault 6), so kernels
that skip invalid key blocks can be dropped in behind the same call.

Implementations:

``xla``
    Plain einsum attention: scores ``(B, H, Sq, Sk)`` in float32, softmax in
    float32. The reference the others are tested against.
``chunked``
    The same math over query chunks inside ``lax.map``, so only
    ``(B, H, chunk, Sk)`` scores exist at a time: memory O(chunk * Sk) instead of
    O(Sq * Sk), for long video sequences on backends without a flash kernel.
"""

from __future__ import annotations

import enum
import math

import jax
import jax.numpy as jnp


class AttentionImpl(str, enum.Enum):
    XLA = "xla"
    CHUNKED = "chunked"


def _scores_softmax_values(q, k, v, scale, kv_lengths, bias):
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32) * scale
    if bias is not None:
        s = s + bias.astype(jnp.float32)
    if kv_lengths is not None:
        valid = jnp.arange(k.shape[1])[None, :] < kv_lengths[:, None]  # (B, Sk)
        s = jnp.where(valid[:, None, None, :], s, -jnp.inf)
    p = jax.nn.softmax(s, axis=-1)
    if kv_lengths is not None:
        # A row with no valid key (length 0) gives zeros, not NaN.
        p = jnp.where(jnp.isnan(p), 0.0, p)
    return jnp.einsum("bhqk,bkhd->bqhd", p.astype(v.dtype), v, preferred_element_type=jnp.float32)


def attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    implementation: AttentionImpl | str = AttentionImpl.XLA,
    kv_lengths: jax.Array | None = None,
    bias: jax.Array | None = None,
    scale: float | None = None,
    query_chunk_size: int = 1024,
) -> jax.Array:
    """Multi-head attention ``softmax(q k^T * scale + bias) v``.

    Args:
      q: ``(B, Sq, H, D)``.
      k, v: ``(B, Sk, H, D)``.
      implementation: an :class:`AttentionImpl` (or its string value).
      kv_lengths: optional ``(B,)`` int32 count of valid keys per sample (keys at or past
        it are ignored; right padding).
      bias: optional additive score bias broadcastable to ``(B, H, Sq, Sk)`` (T5's relative
        position bias); only small models use it.
      scale: score scale; default ``1 / sqrt(D)``.
      query_chunk_size: query rows per chunk for ``chunked``.

    Returns:
      ``(B, Sq, H, D)`` in ``q.dtype``; accumulation in float32.

    Raises:
      ValueError: unknown implementation.
    """
    impl = AttentionImpl(implementation)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if impl is AttentionImpl.XLA or q.shape[1] <= query_chunk_size:
        return _scores_softmax_values(q, k, v, scale, kv_lengths, bias).astype(q.dtype)
    b, sq, h, d = q.shape
    n = -(-sq // query_chunk_size)
    pad = n * query_chunk_size - sq
    qp = jnp.pad(q, ((0, 0), (0, pad), (0, 0), (0, 0))).reshape(b, n, query_chunk_size, h, d).swapaxes(0, 1)
    if bias is not None and bias.shape[-2] != 1:
        bias = jnp.broadcast_to(bias, (*bias.shape[:-2], sq, bias.shape[-1]))
        bias = jnp.pad(bias, [(0, 0)] * (bias.ndim - 2) + [(0, pad), (0, 0)])
        bias = jnp.moveaxis(bias.reshape(*bias.shape[:-2], n, query_chunk_size, bias.shape[-1]), -3, 0)

        def body(args):
            qc, bc = args
            return _scores_softmax_values(qc, k, v, scale, kv_lengths, bc)

        out = jax.lax.map(body, (qp, bias))
    else:
        out = jax.lax.map(lambda qc: _scores_softmax_values(qc, k, v, scale, kv_lengths, bias), qp)
    out = out.swapaxes(0, 1).reshape(b, n * query_chunk_size, h, d)[:, :sq]
    return out.astype(q.dtype)
