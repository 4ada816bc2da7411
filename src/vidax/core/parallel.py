"""Collectives of tensor and sequence parallelism, as seen from inside one ``shard_map`` shard.

A transformer block is written once against a :class:`ShardContext`. On one device (the
default ``ShardContext()``) every hook is the identity and the block is the reference math; inside
``shard_map`` the same block becomes

- **Megatron tensor parallelism** (Shoeybi et al., 2019): column-parallel q/k/v and FFN-up (each
  shard holds a slice of the output features and *its own slice* of the bias), row-parallel
  output and FFN-down (:meth:`ShardContext.row_linear`: partial products are summed over the
  ``tensor`` axis *without* the bias, then the replicated bias is added once, paper Table 4
  fault 5);
- **DeepSpeed-Ulysses sequence parallelism** (Jacobs et al., 2023): tokens are split over the
  ``sequence`` axis everywhere except inside attention, where :meth:`ShardContext.seq_to_heads`
  (an ``all_to_all``) trades the token split for a head split, and
  :meth:`ShardContext.heads_to_seq` trades it back;
- norms over a tensor-split feature axis (Wan's QK-RMSNorm across all heads) take their mean
  over all shards (:meth:`ShardContext.rms_norm`, a ``psum`` of the sum of squares).

The two compose: with ``tp x sp`` shards, each holds ``H / tp`` heads for ``S / sp`` tokens
outside attention and ``H / (tp * sp)`` heads for all ``S`` tokens inside it. When sp does not
divide ``H / tp`` (Wan 1.3B's 12 heads at tp=4, sp=2), self-attention instead all-gathers keys
and values over ``sequence`` (:func:`sequence_mode`).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np


@dataclass(frozen=True)
class ShardContext:
    """The mesh axes a ``shard_map`` body is split over (None: not split).

    Attributes:
      tensor: axis name over which heads / FFN width are split (column/row parallel linears).
      sequence: axis name over which tokens are split.
      ulysses: self-attention over the split tokens by Ulysses ``all_to_all`` (True), or by
        all-gathering keys and values (False; for head counts sp does not divide; see
        :func:`sequence_mode`).
    """

    tensor: str | None = None
    sequence: str | None = None
    ulysses: bool = True

    def psum_tensor(self, x: jax.Array) -> jax.Array:
        """Sum partial results over the ``tensor`` axis (identity on one device)."""
        return x if self.tensor is None else jax.lax.psum(x, self.tensor)

    def row_linear(self, p: dict, x: jax.Array, out_dtype=None) -> jax.Array:
        """Row-parallel ``x @ kernel + bias``: this shard's rows of ``kernel``, reduced over ``tensor``.

        The bias is replicated on every shard; it is added once, *after* the reduction (adding
        it before the ``psum`` would add it ``tp`` times: paper Table 4 fault 5).

        Args:
          p: ``{"kernel": (in / tp, out), "bias": (out,) optional}``.
          x: ``(..., in / tp)``, cast to the kernel dtype; the product accumulates and is reduced
            in float32.
          out_dtype: result dtype; default the kernel's.

        Returns:
          ``(..., out)``, the same on every ``tensor`` shard.
        """
        w = p["kernel"]
        y = jnp.matmul(x.astype(w.dtype), w, preferred_element_type=jnp.float32)
        y = self.psum_tensor(y)
        if "bias" in p:
            y = y + p["bias"].astype(jnp.float32)
        return y.astype(out_dtype or w.dtype)

    def rms_norm(self, x: jax.Array, p: dict | None, full_dim: int, eps: float, out_dtype=None) -> jax.Array:
        """RMSNorm over a last axis that may be split over ``tensor``, computed in float32.

        ``mean(x^2)`` is the ``psum`` over shards of the local sum of squares divided by
        ``full_dim`` (reference: ``torch.nn.RMSNorm`` over ``heads * head_dim``, Wan's
        ``qk_norm="rms_norm_across_heads"``).

        Args:
          x: ``(..., full_dim / tp)``.
          p: ``{"scale": (full_dim / tp,)}`` (this shard's slice) or None.
          full_dim: the unsplit width.
          out_dtype: default ``x.dtype``.
        """
        xf = x.astype(jnp.float32)
        ss = self.psum_tensor(jnp.sum(jnp.square(xf), axis=-1, keepdims=True))
        y = xf * jax.lax.rsqrt(ss / full_dim + eps)
        if p is not None:
            y = y * p["scale"].astype(jnp.float32)
        return y.astype(out_dtype or x.dtype)

    def seq_to_heads(self, x: jax.Array) -> jax.Array:
        """Ulysses forward ``all_to_all``: ``(B, S / sp, H, D)`` -> ``(B, S, H / sp, D)``.

        Shard ``i`` keeps heads ``[i H/sp, (i+1) H/sp)`` and receives every shard's tokens, in
        shard order (so the full sequence is in order).
        """
        if self.sequence is None:
            return x
        return jax.lax.all_to_all(x, self.sequence, split_axis=2, concat_axis=1, tiled=True)

    def heads_to_seq(self, x: jax.Array) -> jax.Array:
        """Inverse of :meth:`seq_to_heads`: ``(B, S, H / sp, D)`` -> ``(B, S / sp, H, D)``."""
        if self.sequence is None:
            return x
        return jax.lax.all_to_all(x, self.sequence, split_axis=1, concat_axis=2, tiled=True)

    def gather_sequence(self, x: jax.Array) -> jax.Array:
        """All-gather the token axis: ``(B, S / sp, ...)`` -> ``(B, S, ...)``, in shard order."""
        if self.sequence is None:
            return x
        return jax.lax.all_gather(x, self.sequence, axis=1, tiled=True)

    def to_attention(self, q: jax.Array, k: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Self-attention inputs ``(B, S / sp, H, D)`` in the layout attention runs in.

        ``ulysses``: all three to ``(B, S, H / sp, D)`` (:meth:`seq_to_heads`). Otherwise (the
        local head count is not divisible by sp): queries stay ``(B, S / sp, H, D)``, keys and
        values are all-gathered to ``(B, S, H, D)`` (each shard attends its own queries to all keys).
        """
        if self.sequence is None:
            return q, k, v
        if self.ulysses:
            return self.seq_to_heads(q), self.seq_to_heads(k), self.seq_to_heads(v)
        return q, self.gather_sequence(k), self.gather_sequence(v)

    def from_attention(self, o: jax.Array) -> jax.Array:
        """Attention output back to ``(B, S / sp, H, D)`` (inverse of :meth:`to_attention` for queries)."""
        return self.heads_to_seq(o) if self.ulysses else o


def sequence_mode(local_heads: int, sp: int) -> str:
    """How self-attention is sequence-parallel for ``local_heads`` heads per tensor shard.

    Returns:
      ``"ulysses"`` when sp divides ``local_heads`` (an ``all_to_all`` to a head split: each of
      the sp shards gets whole heads for the full sequence), else ``"kv_all_gather"`` (queries
      stay split by tokens; keys and values are all-gathered: ``sp`` times the key/value
      memory of Ulysses and about ``sp / 2`` times its traffic, but valid for any head count).
    """
    return "ulysses" if local_heads % sp == 0 else "kv_all_gather"


def padded_length(n: int, multiple: int) -> int:
    """Smallest multiple of ``multiple`` that is ``>= n``."""
    return -(-n // multiple) * multiple


def pad_axis(x: jax.Array | np.ndarray, axis: int, length: int):
    """Zero-pad ``x`` along ``axis`` to ``length`` (no-op if already that long); NumPy in, NumPy out."""
    pad = length - x.shape[axis]
    if pad < 0:
        raise ValueError(f"cannot pad axis {axis} of length {x.shape[axis]} down to {length}")
    if pad == 0:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, pad)
    return np.pad(x, widths) if isinstance(x, np.ndarray) else jnp.pad(x, widths)
