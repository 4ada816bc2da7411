"""Placing a pipeline's per-step inputs on the transformer's mesh, and what the pipelines report of it.

Shared by the pipelines: the sampler state stays replicated (so every step's inputs keep the compiled
shardings), the text context's CFG halves are split over ``data`` where dp divides them, the VAE and
the text encoder run on one device.
"""

from __future__ import annotations

import contextlib
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from vidax.core.attention import AttentionImpl, resolve_implementation
from vidax.core.parallel import sequence_mode
from vidax.core.sharding import ShardingRules, axis_size


def first_device(tree: Any):
    """The device of the first leaf of a parameter tree (the VAE's / text encoder's device)."""
    return next(iter(jax.tree.leaves(tree)[0].devices()))


def mesh_context(mesh: Mesh | None):
    """``jax.set_mesh(mesh)``, or nothing without a mesh (attention kernels outside ``shard_map`` then see the
    mesh and run per shard, paper Table 4 fault 7)."""
    return contextlib.nullcontext() if mesh is None else jax.set_mesh(mesh)


def replicated(x: jax.Array, mesh: Mesh | None) -> jax.Array:
    """``x`` constrained to be replicated on ``mesh`` (inside a jitted step); unchanged without a mesh."""
    return x if mesh is None else jax.lax.with_sharding_constraint(x, NamedSharding(mesh, PartitionSpec()))


def to_mesh(tree: Any, mesh: Mesh | None, rules: ShardingRules, split_batch: bool = False) -> Any:
    """Put step inputs (any pytree; None leaves kept) on ``mesh``: replicated, or with ``split_batch`` the leading
    axis over the ``batch`` rule's mesh axes where dp divides it (the context's CFG halves).

    On several hosts the mesh spans other processes' devices: every process passes the same host value, and
    ``device_put`` places this process's shards of it. Without a mesh: ``tree`` unchanged.
    """
    if mesh is None:
        return tree
    dp = axis_size(mesh, rules.mesh_axes("batch"))

    def place(a):
        split = split_batch and dp > 1 and a.ndim >= 1 and a.shape[0] % dp == 0
        spec = rules.spec(("batch",) + (None,) * (a.ndim - 1)) if split else PartitionSpec()
        sharding = NamedSharding(mesh, spec)
        if not sharding.is_fully_addressable:
            a = np.asarray(a)
        return jax.device_put(a, sharding)

    return jax.tree.map(place, tree)


def parallel_metrics(mesh: Mesh | None, rules: ShardingRules, num_heads: int, attention: AttentionImpl | str) -> dict:
    """``{"mesh": {"dp", "tp", "sp"}, "attention": implementation, "sequence_parallel": None | "ulysses" |
    "kv_all_gather"}`` of a transformer with ``num_heads`` heads on ``mesh``."""
    sizes = {"dp": 1, "tp": 1, "sp": 1}
    if mesh is not None:
        sizes = {k: axis_size(mesh, rules.mesh_axes(n)) for k, n in (("dp", "batch"), ("tp", "heads"), ("sp", "tokens"))}
    mode = sequence_mode(num_heads // sizes["tp"], sizes["sp"]) if sizes["sp"] > 1 else None
    return {"mesh": sizes, "attention": resolve_implementation(attention).value, "sequence_parallel": mode}
