"""Per-layer weight offloading: stacked block weights in host memory, streamed to the device in chunks.

Paper section 2 ("Per-layer weight offloading", after ZeRO-Offload, Ren et al., 2021): the
parameters of the repeated blocks stay in host memory; groups of ``chunk`` consecutive blocks
are copied into device memory just before they run, and one compiled chunk function (the
model's block loop over a chunk of stacked parameters) serves every chunk.

Host memory
    Each chunk is a ``jax.Array`` in a host *memory kind* of the devices it belongs to
    (:func:`host_memory_kind`: ``pinned_host`` where the backend has it, which GPU and TPU
    backends and, in this JAX, the CPU backend do; else ``unpinned_host``). Pinned (page-locked)
    memory is what lets a GPU/TPU copy engine read it asynchronously. A backend without host
    memory kinds keeps the chunks as NumPy arrays (``device_put`` from NumPy is the same
    host-to-device copy, from pageable memory). The chunk arrays carry the *same* sharding as the
    resident parameters (``NamedSharding(mesh, spec, memory_kind=...)``), so under a mesh each
    device receives only its own shard of a chunk.

Chunks
    ``ceil(L / chunk)`` chunks of exactly ``chunk`` layers: when ``chunk`` does not divide the
    layer count, the last chunk is padded with zero layers, so every chunk has one shape and one
    sharding and the chunk function compiles once. A zero layer must be the identity of the
    model's block (true for Wan: every residual branch ends in a linear layer whose kernel and
    bias are zero, so it adds exactly 0); the padding costs the compute of ``padded - L`` layers.

Overlap (:func:`stream`)
    ``jax.device_put`` returns immediately and copies in the background. With ``overlap=True``
    the copy of chunk ``i + 1`` is issued before chunk ``i``'s computation is dispatched, so the
    two run concurrently; the host waits for chunk ``i - 1``'s result first, so at most two chunks
    are ever in device memory (the one computing, the one arriving): two fixed-size device
    buffers that the allocator hands back and forth (chunks have one size). ``overlap=False`` is
    the paper's serial mode: copy, wait, compute, wait.

Several stacks
    A model with more than one block stack (HunyuanVideo: dual-stream, then single-stream blocks)
    chunks each stack with one chunk size (:func:`block_plans`: one :class:`ChunkPlan` per stack,
    keyed by the stack's parameter subtree), loads them with one placement
    (:func:`block_placement` with that mapping), splits them off together (:func:`split_stacks`)
    and streams the chunks of all stacks as one sequence (:func:`stream_stacks`), so the copy of the
    next stack's first chunk overlaps the previous stack's last chunk and the two-chunk bound holds
    across the boundary (the stacks' chunks may differ in size).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, SingleDeviceSharding

from vidax.core.params import flatten, unflatten

#: Host memory kinds, in order of preference.
HOST_MEMORY_KINDS = ("pinned_host", "unpinned_host")


def host_memory_kind(device: Any = None) -> str | None:
    """The host memory kind to keep offloaded weights in, for ``device`` (default: first local device).

    Returns:
      ``"pinned_host"`` if the device can address it (GPU, TPU, and the CPU backend of this JAX:
      ``jax.devices("cpu")[0].addressable_memories()`` lists ``device``, ``pinned_host`` and
      ``unpinned_host``), else ``"unpinned_host"``, else None (no host memory kinds: keep NumPy).
    """
    device = device if device is not None else jax.local_devices()[0]
    try:
        kinds = {m.kind for m in device.addressable_memories()}
    except Exception:  # a backend without memory APIs
        return None
    return next((k for k in HOST_MEMORY_KINDS if k in kinds), None)


def with_memory_kind(sharding: Any, kind: str | None) -> Any:
    """``sharding`` in memory ``kind`` (None -> None: NumPy host arrays)."""
    if kind is None:
        return None
    return sharding.with_memory_kind(kind)


def device_sharding(sharding: Any = None) -> Any:
    """The device-memory version of a parameter sharding; None -> the first local device."""
    if sharding is None:
        return SingleDeviceSharding(jax.local_devices()[0])
    return sharding.with_memory_kind("device") if sharding.memory_kind not in (None, "device") else sharding


@dataclass(frozen=True)
class ChunkPlan:
    """How ``num_layers`` stacked layers split into chunks of ``chunk`` layers.

    Attributes:
      num_layers: layers of the stack (>= 1).
      chunk: layers per chunk, ``1 <= chunk <= num_layers``.
      memory: where the chunks live: ``"host"`` (offloading: a host memory kind, copied to the
        device every step) or ``"device"`` (resident in device memory; the block loop runs on the
        host over them with nothing to copy, see :func:`stream` and docs/design.md, "Block loop").

    Raises (at construction):
      ValueError: a chunk size outside ``[1, num_layers]`` (the message lists the sizes that
        divide the layer count, which need no padding); an unknown ``memory``.
    """

    num_layers: int
    chunk: int
    memory: str = "host"

    def __post_init__(self):
        if self.memory not in ("host", "device"):
            raise ValueError(f"ChunkPlan.memory must be 'host' or 'device', got {self.memory!r}")
        if not (isinstance(self.chunk, (int, np.integer)) and 1 <= self.chunk <= self.num_layers):
            divs = [d for d in range(1, self.num_layers + 1) if self.num_layers % d == 0]
            raise ValueError(f"offload chunk must be an integer between 1 and the {self.num_layers} layers, got "
                             f"{self.chunk!r}; sizes that divide {self.num_layers} (no padding): {divs}")

    @property
    def num_chunks(self) -> int:
        return -(-self.num_layers // self.chunk)

    @property
    def padded_layers(self) -> int:
        """Layers including the zero padding of the last chunk."""
        return self.num_chunks * self.chunk

    def bounds(self, i: int) -> tuple[int, int]:
        """Real layers ``[lo, hi)`` of chunk ``i`` (``hi - lo < chunk`` only for a padded last chunk)."""
        lo = i * self.chunk
        return lo, min(self.num_layers, lo + self.chunk)


@dataclass
class OffloadedStack:
    """Stacked block parameters kept in host memory as equal chunks, fetched to the device on demand.

    Attributes:
      chunks: ``num_chunks`` parameter trees (nested dicts like the stacked blocks), each leaf
        ``(chunk, *layer_shape)`` in host memory (a host memory kind, or NumPy).
      device_shardings: tree of the same structure: each leaf's device sharding (the resident
        parameter's sharding; a ``SingleDeviceSharding`` without a mesh).
      plan: the :class:`ChunkPlan`.
    """

    chunks: list[dict]
    device_shardings: dict
    plan: ChunkPlan
    _abstract: Any = field(default=None, repr=False)

    @classmethod
    def from_chunk_leaves(cls, leaves: dict, device_shardings: dict, num_layers: int,
                          memory: str = "host") -> OffloadedStack:
        """Build from a loaded tree whose leaves are tuples of chunk arrays.

        Args:
          leaves: nested dict, each leaf a tuple ``(chunk_0, ..., chunk_{n-1})`` as
            :func:`vidax.checkpoint.loader.load_params` returns for a
            :class:`~vidax.checkpoint.loader.LayerChunks` placement.
          device_shardings: nested dict of the leaves' device shardings.
          num_layers: the unpadded layer count.
          memory: where the chunks were placed (:attr:`ChunkPlan.memory`).

        Raises:
          ValueError: leaves with different chunk counts or chunk sizes.
        """
        flat = dict(flatten(leaves))
        counts = {len(v) for v in flat.values()}
        sizes = {v[0].shape[0] for v in flat.values()}
        if len(counts) != 1 or len(sizes) != 1:
            raise ValueError(f"chunked leaves disagree: chunk counts {counts}, chunk sizes {sizes}")
        n = counts.pop()
        plan = ChunkPlan(num_layers, sizes.pop(), memory)
        if plan.num_chunks != n:
            raise ValueError(f"{n} chunks of {plan.chunk} layers do not cover {num_layers} layers")
        chunks = [unflatten({p: v[i] for p, v in flat.items()}) for i in range(n)]
        return cls(chunks, device_shardings, plan)

    @classmethod
    def from_stacked(cls, stacked: dict, chunk: int, device_shardings: dict | None = None,
                     memory_kind: str | None = "auto") -> OffloadedStack:
        """Split resident (or host) stacked parameters into host-memory chunks (tests, benchmarks).

        Reads each leaf to the host once (``np.asarray``; one process only), pads the last chunk
        with zeros and places every chunk with the leaf's sharding in host memory. Loading a
        checkpoint straight into chunks goes through ``load_params`` with
        :class:`~vidax.checkpoint.loader.LayerChunks` instead (no device copy first).

        Args:
          stacked: nested dict of arrays ``(L, ...)``.
          chunk: layers per chunk.
          device_shardings: per-leaf device shardings; default each leaf's own sharding (a jax
            Array), else the first local device.
          memory_kind: host memory kind, "auto" (:func:`host_memory_kind`), or None (NumPy chunks);
            ``"device"``: the chunks stay in device memory (the host block loop).

        Raises:
          ValueError: see :class:`ChunkPlan`; leaves with different layer counts.
        """
        flat = dict(flatten(stacked))
        layers = {a.shape[0] for a in flat.values()}
        if len(layers) != 1:
            raise ValueError(f"stacked leaves have different layer counts: {sorted(layers)}")
        plan = ChunkPlan(layers.pop(), chunk, "device" if memory_kind == "device" else "host")
        if device_shardings is None:
            device_shardings = unflatten({p: device_sharding(getattr(a, "sharding", None)) for p, a in flat.items()})
        dev = dict(flatten(device_shardings))
        kind = host_memory_kind() if memory_kind == "auto" else memory_kind
        whole = {p: np.asarray(a) for p, a in flat.items()}
        chunks = []
        for i in range(plan.num_chunks):
            lo, hi = plan.bounds(i)
            tree = {}
            for p, a in whole.items():
                host = np.zeros((plan.chunk, *a.shape[1:]), a.dtype)
                host[: hi - lo] = a[lo:hi]
                tree[p] = host if kind is None else jax.device_put(host, with_memory_kind(dev[p], kind))
            chunks.append(unflatten(tree))
        return cls(chunks, device_shardings, plan)

    @property
    def num_chunks(self) -> int:
        return self.plan.num_chunks

    @property
    def in_device_memory(self) -> bool:
        """Whether the chunks already live in device memory (the host block loop; nothing to fetch)."""
        return self.plan.memory == "device"

    def stacked(self) -> dict:
        """The blocks as one stacked tree, each leaf ``(num_layers, ...)`` in device memory (a copy: tools, tests)."""
        chunks = [self.chunks[i] if self.in_device_memory else self.fetch(i) for i in range(self.num_chunks)]
        return jax.tree.map(lambda *c: jnp.concatenate(c)[: self.plan.num_layers], *chunks)

    def fetch(self, i: int) -> dict:
        """Start copying chunk ``i`` to device memory; returns at once (``jax.device_put`` is asynchronous)."""
        return jax.device_put(self.chunks[i], self.device_shardings)

    def abstract_chunk(self) -> dict:
        """``jax.ShapeDtypeStruct`` tree of one chunk in device memory (to compile the chunk function)."""
        if self._abstract is None:
            self._abstract = jax.tree.map(
                lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), self.chunks[0], self.device_shardings)
        return self._abstract

    def chunk_bytes(self) -> int:
        """Bytes of one chunk, all devices together (its global size)."""
        return sum(int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize for _, a in flatten(self.chunks[0]))

    def chunk_bytes_per_device(self) -> int:
        """Bytes of one chunk on one device (its shard, for a sharded stack)."""
        total = 0
        for (_, a), (_, s) in zip(flatten(self.chunks[0]), flatten(self.device_shardings)):
            shape = s.shard_shape(a.shape) if isinstance(s, NamedSharding) else a.shape
            total += int(np.prod(shape)) * np.dtype(a.dtype).itemsize
        return total


def block_plan(num_layers: int, offload_chunk: int | None, block_loop: str = "auto") -> ChunkPlan | None:
    """How a transformer's blocks are placed (the pipelines' ``offload_chunk`` and ``block_loop`` options).

    Returns:
      a host-memory :class:`~vidax.core.offload.ChunkPlan` of ``offload_chunk`` blocks (offloading); one
      block per chunk in device memory for the host block loop; None for stacked blocks under ``scan``.

    Raises:
      ValueError: an unknown ``block_loop``; see :class:`~vidax.core.offload.ChunkPlan`.
    """
    if block_loop not in ("auto", "scan", "host"):
        raise ValueError(f"block_loop must be 'auto', 'scan' or 'host', got {block_loop!r}")
    if offload_chunk is not None:
        return ChunkPlan(num_layers, offload_chunk)
    if block_loop == "host" or (block_loop == "auto" and jax.default_backend() == "cpu"):
        return ChunkPlan(num_layers, 1, memory="device")
    return None


def block_plans(num_layers: Mapping[str, int], offload_chunk: int | None,
                block_loop: str = "auto") -> dict[str, ChunkPlan] | None:
    """:func:`block_plan` for a transformer with several block stacks, one ``offload_chunk`` for all of them.

    Args:
      num_layers: ``{stack: layers}``, the stacks keyed by their parameter subtree (e.g.
        ``{"transformer_blocks": 20, "single_transformer_blocks": 40}``), in the order they run.
      offload_chunk, block_loop: as :func:`block_plan`; the chunk size applies to each stack (a stack
        whose layer count it does not divide gets a zero-padded last chunk).

    Returns:
      ``{stack: ChunkPlan}`` (same keys and order), or None for stacked blocks under ``scan``.

    Raises:
      ValueError: an unknown ``block_loop``; an ``offload_chunk`` that is not an integer between 1 and the
        smallest stack's layer count (the message gives each stack's count and the sizes that divide all
        of them).
    """
    if offload_chunk is not None:
        top = min(num_layers.values())
        if isinstance(offload_chunk, bool) or not (isinstance(offload_chunk, (int, np.integer))
                                                   and 1 <= offload_chunk <= top):
            counts = ", ".join(f"{name} {n}" for name, n in num_layers.items())
            common = [d for d in range(1, top + 1) if all(n % d == 0 for n in num_layers.values())]
            raise ValueError(f"offload chunk must be an integer between 1 and {top}, the layers of the smallest block "
                             f"stack (it applies to each stack: {counts}), got {offload_chunk!r}; sizes that divide "
                             f"every stack (no padding): {common}")
    plans = {name: block_plan(n, offload_chunk, block_loop) for name, n in num_layers.items()}
    return None if all(p is None for p in plans.values()) else plans


def _stack_plans(plan: ChunkPlan | Mapping[str, ChunkPlan] | None) -> dict[str, ChunkPlan]:
    """A bare plan is the one stack ``"blocks"`` (Wan, CogVideoX, LTX)."""
    if plan is None:
        return {}
    return {"blocks": plan} if isinstance(plan, ChunkPlan) else dict(plan)


def block_placement(plan: ChunkPlan | Mapping[str, ChunkPlan] | None, mesh: Any = None, rules: Any = None):
    """The loader's ``shardings`` for a transformer whose block stacks are stacked leaves.

    Args:
      plan: None (every leaf resident); a :class:`ChunkPlan` for the one stack ``"blocks/..."``
        (:func:`block_plan`); or ``{stack: ChunkPlan}`` for the stacks ``"stack/..."`` of a model with
        several (:func:`block_plans`).
      mesh, rules: the transformer's mesh and its :class:`~vidax.core.sharding.ShardingRules`
        (None mesh: one device).

    Returns:
      None (one device, nothing chunked), or ``(path, spec) -> sharding``: the resident sharding of
      ``rules`` on ``mesh``, and for a stack's leaves a :class:`~vidax.checkpoint.loader.LayerChunks` of
      its plan's ``chunk`` layers with that sharding in the plan's memory (``"device"``, or the backend's
      host memory kind: :func:`host_memory_kind`; None: NumPy chunks).
    """
    from vidax.checkpoint.loader import LayerChunks

    resident = None if mesh is None else rules.sharding_fn(mesh)
    plans = _stack_plans(plan)
    if not plans:
        return resident
    host = host_memory_kind()
    prefixes = [(name + "/", p, "device" if p.memory == "device" else host) for name, p in plans.items()]

    def placement(path, spec):
        sharding = None if resident is None else resident(path, spec)
        for prefix, p, kind in prefixes:
            if path.startswith(prefix):
                return LayerChunks(with_memory_kind(device_sharding(sharding), kind), p.chunk)
        return sharding

    return placement


def split_stacks(params: dict, specs: dict, plans: Mapping[str, ChunkPlan] | None, mesh: Any = None,
                 rules: Any = None) -> tuple[dict, dict[str, OffloadedStack]]:
    """``(params without the stacks, {stack: OffloadedStack})`` (``(params, {})`` without ``plans``).

    ``params`` is what :func:`vidax.checkpoint.loader.load_params` returned for the
    :func:`block_placement` of ``plans`` (each stack's leaves tuples of chunks); a stack's device
    shardings are the resident ones of ``rules`` on ``mesh`` (None mesh: the first local device).
    ``params`` itself loses the stacks' subtrees.
    """
    if not plans:
        return params, {}
    from vidax.core.params import map_specs

    device = (rules.param_shardings(specs, mesh) if mesh is not None
              else map_specs(lambda *_: device_sharding(None), specs))
    stacks = {name: OffloadedStack.from_chunk_leaves(params.pop(name), device[name], p.num_layers, p.memory)
              for name, p in plans.items()}
    return params, stacks


def split_blocks(params: dict, specs: dict, plan: ChunkPlan | None, mesh: Any = None,
                 rules: Any = None) -> tuple[dict, OffloadedStack | None]:
    """``(params, None)``, or with ``plan`` ``(params without "blocks", the blocks as an OffloadedStack)``.

    ``params`` is what :func:`vidax.checkpoint.loader.load_params` returned for the
    :func:`block_placement` of ``plan`` (its ``"blocks"`` leaves tuples of chunks); the stack's device
    shardings are the resident ones of ``rules`` on ``mesh`` (None mesh: the first local device).
    """
    if plan is None:
        return params, None
    params, stacks = split_stacks(params, specs, {"blocks": plan}, mesh, rules)
    return params, stacks["blocks"]


def stream(stack: OffloadedStack, run_chunk: Callable[[dict, Any], Any], carry: Any, *, overlap: bool = True,
           timings: list | None = None) -> Any:
    """Run ``carry = run_chunk(chunk_params, carry)`` over every chunk, fetching weights from host memory.

    Args:
      stack: the offloaded blocks.
      run_chunk: ``(device chunk tree, carry) -> carry``, normally one compiled function (it may
        donate ``carry``).
      carry: the activations entering the first chunk (any pytree of device arrays).
      overlap: True: the copy of chunk ``i + 1`` is issued before chunk ``i`` is dispatched and
        runs while it computes; before that copy the host waits for chunk ``i - 1`` to finish, so
        at most two chunks occupy device memory. False (the paper's mode): each copy is waited
        for, then its computation, before the next copy starts.
      timings: if a list, per chunk ``(seconds waiting for the copy, seconds of compute)`` is
        appended (only measured with ``overlap=False``, where the phases are separate).

    Returns:
      the carry after the last chunk (not waited for with ``overlap=True``, nor for chunks already
      in device memory).

    Chunks already in device memory (:attr:`OffloadedStack.in_device_memory`) are not fetched:
    every ``run_chunk`` is dispatched at once, without waiting, as the calls of one program.
    """
    return stream_stacks([(stack, run_chunk)], carry, overlap=overlap, timings=timings)


def stream_stacks(stages: Sequence[tuple[OffloadedStack, Callable[[dict, Any], Any]]], carry: Any, *,
                  overlap: bool = True, timings: list | None = None) -> Any:
    """:func:`stream` over several stacks in turn: ``stages`` is ``[(stack, run_chunk), ...]`` in running order.

    The chunks of all stages form one sequence, so with ``overlap`` the first chunk of a stack is copied
    while the last chunk of the stack before it computes, and at most two chunks (of whichever stacks)
    occupy device memory at any time. Stacks in device memory are not fetched (if every stack is, every
    ``run_chunk`` is dispatched at once, without waiting).

    Returns:
      the carry after the last chunk of the last stage (not waited for, as :func:`stream`).
    """
    steps = [(stack, i, run) for stack, run in stages for i in range(stack.num_chunks)]
    if all(stack.in_device_memory for stack, _ in stages):
        for stack, i, run in steps:
            carry = run(stack.chunks[i], carry)
        return carry

    def fetch(k: int):
        stack, i, _ = steps[k]
        return stack.chunks[i] if stack.in_device_memory else stack.fetch(i)

    n = len(steps)
    if not overlap:
        import time

        for k in range(n):
            t0 = time.perf_counter()
            chunk = jax.block_until_ready(fetch(k))
            t1 = time.perf_counter()
            carry = jax.block_until_ready(steps[k][2](chunk, carry))
            del chunk
            if timings is not None:
                timings.append((t1 - t0, time.perf_counter() - t1))
        return carry
    nxt = fetch(0)
    for k in range(n):
        cur, nxt = nxt, None
        if k + 1 < n:
            # carry is chunk k-1's output: once it is ready, chunk k-1's weights are released, and
            # the copy of chunk k+1 takes their place while chunk k computes.
            jax.block_until_ready(carry)
            nxt = fetch(k + 1)
        carry = steps[k][2](cur, carry)
        del cur
    return carry


__all__ = ["HOST_MEMORY_KINDS", "ChunkPlan", "OffloadedStack", "block_placement", "block_plan", "block_plans",
           "device_sharding", "host_memory_kind", "split_blocks", "split_stacks", "stream", "stream_stacks",
           "with_memory_kind"]


def stacks_loop_name(stacks: Mapping[str, OffloadedStack] | None) -> str:
    """``"scan"`` (no chunks), ``"host"`` (one-block chunks in device memory) or ``"offload"`` (host memory)."""
    if not stacks:
        return "scan"
    return "host" if all(s.in_device_memory for s in stacks.values()) else "offload"


def stack_metrics(stacks: Mapping[str, OffloadedStack] | None, overlap: bool) -> dict:
    """A pipeline's block-loop metrics: ``{"block_loop": ...}`` (:func:`stacks_loop_name`), and with offloading
    ``"offload"``: the Wan pipeline's keys over every stack (``chunks`` and ``padded_layers`` summed,
    ``chunk_bytes_per_device`` the largest chunk's), plus ``"stacks"``: ``{stack: {"chunks", "padded_layers",
    "chunk_bytes_per_device"}}``."""
    out: dict[str, Any] = {"block_loop": stacks_loop_name(stacks)}
    if out["block_loop"] != "offload":
        return out
    per = {name: {"chunks": s.num_chunks, "padded_layers": s.plan.padded_layers,
                  "chunk_bytes_per_device": s.chunk_bytes_per_device()} for name, s in stacks.items()}
    first = next(iter(stacks.values()))
    leaf = jax.tree.leaves(first.chunks[0])[0]
    out["offload"] = {"chunk": first.plan.chunk, "chunks": sum(p["chunks"] for p in per.values()),
                      "padded_layers": sum(p["padded_layers"] for p in per.values()), "overlap": overlap,
                      "chunk_bytes_per_device": max(p["chunk_bytes_per_device"] for p in per.values()),
                      "host_memory_kind": leaf.sharding.memory_kind if isinstance(leaf, jax.Array) else "numpy",
                      "stacks": per}
    return out
