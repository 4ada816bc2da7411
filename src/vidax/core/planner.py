"""Memory planning without weights: candidate splits, XLA's per-device memory, a cost model.

A model's planner (:mod:`vidax.models.wan.planner`) compiles its step for each candidate
``(dp, tp, sp, offload chunk)`` on abstract inputs (``jax.ShapeDtypeStruct`` s with shardings:
nothing is allocated, no weight is read) and reads the per-device sizes from
``compiled.memory_analysis()``. This module holds what is not model-specific: the
:class:`Estimate` record, :func:`compiled_bytes`, the devices to compile for, the ranking
(:func:`cost_key`), the recommendation and the printed table.

The per-device peak of one compiled function is ``arguments + outputs + temporaries - aliased``
(donated inputs reused as outputs are counted once). XLA reports the partitioned (per-device)
module, so these are per-device figures.

Cost model ("fastest"), lexicographic, lower first:

1. resident before offloaded: streaming the whole block stack from host memory every step is
   by far the slowest path (paper Figure 2(b): 141.7 s per step at chunk 1, 111.3 s resident);
2. fewer chunk launches per step (larger chunks: fewer host round trips and better overlap);
3. fewer bytes moved between devices per step (:func:`vidax.models.wan.planner.comm_bytes`:
   tensor parallelism all-reduces the residual stream three times per block, Ulysses moves q, k,
   v and the attention output once each, data parallelism moves nothing);
4. more data parallelism (independent halves, no synchronisation).

Compute is the same for every split of the same devices (each divides the work by the device
count), so it does not enter the ranking.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import jax
import numpy as np

GiB = float(1 << 30)


@dataclass(frozen=True)
class Split:
    """One candidate: mesh sizes and the offload chunk (None: blocks resident)."""

    dp: int
    tp: int
    sp: int
    offload: int | None = None

    def label(self) -> str:
        return f"dp={self.dp} tp={self.tp} sp={self.sp} " + ("resident" if self.offload is None else f"offload {self.offload}")


@dataclass
class Estimate:
    """The planner's figures for one :class:`Split`, per device and per step.

    Attributes:
      split: the candidate.
      peak_bytes: per-device peak (the largest phase), bytes.
      phases: ``{phase: bytes}``: ``"step"`` (resident), or ``"prologue"``, ``"chunks"``,
        ``"epilogue"`` (offloaded), each the live bytes of that phase on one device.
      comm_bytes: bytes each device sends per step (cost model).
      transfer_bytes: bytes each device receives from host memory per step (offloaded weights).
      launches: chunk launches per step (0 resident).
      fits: ``peak_bytes + reserve <= budget`` (None without a budget).
      error: why this split could not be compiled (then the figures are 0).
    """

    split: Split
    peak_bytes: int = 0
    phases: dict[str, int] = field(default_factory=dict)
    comm_bytes: int = 0
    transfer_bytes: int = 0
    launches: int = 0
    fits: bool | None = None
    error: str | None = None


def compiled_bytes(compiled) -> int:
    """Per-device bytes of a compiled function: ``arguments + outputs + temporaries - aliased``.

    Source: ``compiled.memory_analysis()`` (``argument_size_in_bytes``, ``output_size_in_bytes``,
    ``temp_size_in_bytes``, ``alias_size_in_bytes``), plus the host-side counterparts when the
    backend reports them (they are 0 on CPU).

    Raises:
      RuntimeError: the backend returns no memory analysis.
    """
    m = compiled.memory_analysis()
    if m is None:
        raise RuntimeError("this backend returns no compiled memory analysis")
    total = m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes
    return int(total)


#: XLA options of the planner's compilations on the CPU backend. XLA:CPU's YNNPACK fusions (for
#: example a whole attention: dot, softmax, dot) allocate their intermediates inside the library,
#: outside XLA's buffer assignment, so ``memory_analysis()`` does not see them (a (2, 4, 2048, 2048)
#: score matrix: 12 MiB of temporaries reported, 170 MiB used). Without them every buffer is in the
#: analysis; accelerator backends have no such fusions.
CPU_COMPILER_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}


def compiler_options(platform: str) -> dict | None:
    """XLA options for compiling a step whose memory the planner reads (:data:`CPU_COMPILER_OPTIONS` on CPU)."""
    return dict(CPU_COMPILER_OPTIONS) if platform == "cpu" else None


def sharded_bytes(abstract) -> int:
    """Bytes on one device of a tree of ``jax.ShapeDtypeStruct`` s with shardings (the largest shard)."""
    total = 0
    for a in jax.tree.leaves(abstract):
        shape = a.sharding.shard_shape(a.shape) if getattr(a, "sharding", None) is not None else a.shape
        total += int(np.prod(shape, dtype=np.int64)) * np.dtype(a.dtype).itemsize
    return total


def planning_devices(n: int) -> tuple[list, str]:
    """``n`` devices to compile on, and a note on what they are.

    The default backend's devices when it has ``n`` (compiling for the real target); otherwise
    ``n`` CPU devices, which exist only if the process was started with
    ``XLA_FLAGS=--xla_force_host_platform_device_count>=n`` (``vidax plan`` sets it before JAX
    starts). Compiled memory is then XLA:CPU's analysis of the same partitioned program, which
    stands in for the accelerator's (fusion and layouts differ by backend).

    Raises:
      ValueError: fewer than ``n`` devices of either kind.
    """
    devices = jax.devices()
    if len(devices) >= n:
        return devices[:n], f"{n} x {devices[0].platform} ({devices[0].device_kind})"
    cpus = jax.devices("cpu")
    if len(cpus) >= n:
        return cpus[:n], f"{n} simulated CPU devices (XLA:CPU memory analysis standing in for {devices[0].platform})"
    raise ValueError(f"planning for {n} devices needs {n} devices to compile on; this process has {len(devices)} "
                     f"{devices[0].platform} and {len(cpus)} CPU devices. Start it with "
                     f"XLA_FLAGS=--xla_force_host_platform_device_count={n} (vidax plan does this itself).")


def device_memory_bytes(device=None) -> int | None:
    """The memory one device can allocate (``memory_stats()["bytes_limit"]``), or None where the backend
    does not say (the CPU backend)."""
    device = device if device is not None else jax.local_devices()[0]
    try:
        stats = device.memory_stats() or {}
    except Exception:
        return None
    return int(stats["bytes_limit"]) if "bytes_limit" in stats else None


def host_memory_bytes() -> int:
    """Physical memory of this host (``sysconf``), bytes."""
    return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def cost_key(e: Estimate) -> tuple:
    """Ranking key of the module's cost model (smaller is faster)."""
    s = e.split
    return (s.offload is not None, e.launches, e.comm_bytes, -s.dp, s.tp)


def recommend(estimates: Sequence[Estimate]) -> Estimate | None:
    """The fastest estimate (by :func:`cost_key`) that fits; None if none fits or none was compiled."""
    ok = [e for e in estimates if e.error is None and e.fits is not False]
    return min(ok, key=cost_key) if ok else None


def format_bytes(n: float) -> str:
    """``n`` bytes as GiB (or MiB below one GiB), for the report."""
    return f"{n / GiB:.2f} GiB" if abs(n) >= GiB else f"{n / 2**20:.1f} MiB"


def format_table(estimates: Sequence[Estimate], budget: int | None, reserve: int = 0) -> list[str]:
    """Lines of the planner's report: one row per split, fastest first (by :func:`cost_key`)."""
    rows = sorted(estimates, key=lambda e: (e.error is not None, cost_key(e)))
    head = f"{'split':<30} {'peak/device':>12}  {'comm/step':>11} {'host->dev/step':>14}  {'fits':<4}  phases"
    lines = [head, "-" * (len(head) + 40)]
    for e in rows:
        if e.error is not None:
            lines.append(f"{e.split.label():<30} {'-':>12}  not compiled: {e.error[:80]}")
            continue
        phases = ", ".join(f"{k} {format_bytes(v)}" for k, v in e.phases.items())
        fits = "-" if e.fits is None else ("yes" if e.fits else "no")
        lines.append(f"{e.split.label():<30} {format_bytes(e.peak_bytes):>12}  {format_bytes(e.comm_bytes):>11} "
                     f"{format_bytes(e.transfer_bytes):>14}  {fits:<4}  {phases}")
    if budget is not None:
        lines.append(f"budget {format_bytes(budget)} per device" + (f" minus {format_bytes(reserve)} reserved" if reserve else ""))
    return lines
