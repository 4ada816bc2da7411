"""Memory planning without weights: candidate splits, XLA's per-device memory, a cost model.

A model's planner (:mod:`vidax.models.wan.planner`) compiles its step for each candidate
``(dp, tp, sp, offload chunk)`` on abstract inputs (``jax.ShapeDtypeStruct`` s with shardings:
nothing is allocated, no weight is read) and reads the per-device sizes from
``compiled.memory_analysis()``. This module holds what is not model-specific: the
:class:`Estimate` record, :func:`compiled_bytes`, the devices to compile for, the ranking
(:func:`cost_key`), the recommendation and the printed table; and what every family planner does the same
way: weights by dtype (:func:`weight_bytes`), the candidate splits and chunk sizes, the compile options of a
step (:func:`step_compiler_options`), the loop over candidates (:func:`plan_candidates`), the result with its
report (:class:`PipelinePlan`) and the measured peak that checks an estimate (:func:`measure_peak`).

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

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

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


# -- shared by the family planners ------------------------------------------------------------------------------------


def weight_bytes(specs, dtype: Any) -> int:
    """Bytes of a spec tree's weights in ``dtype`` (float32-pinned leaves at 4 bytes,
    :func:`vidax.core.params.abstract_params`)."""
    from vidax.core.params import abstract_params, flatten

    return sum(math.prod(a.shape) * np.dtype(a.dtype).itemsize for _, a in flatten(abstract_params(specs, dtype)))


def with_shardings(tree, shardings):
    """An abstract tree (``jax.ShapeDtypeStruct`` s) with the matching tree of shardings attached."""
    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), tree, shardings)


def layer_bytes(stack) -> int:
    """Per-device bytes of one layer of a stacked abstract subtree (leading ``layers`` axis, shardings attached)."""
    from jax.sharding import NamedSharding, PartitionSpec

    def one(a):
        spec = PartitionSpec(*tuple(a.sharding.spec)[1:])
        return jax.ShapeDtypeStruct(a.shape[1:], a.dtype, sharding=NamedSharding(a.sharding.mesh, spec))

    return sharded_bytes(jax.tree.map(one, stack))


def chunk_of(stack, n: int):
    """The abstract stacked subtree with its leading ``layers`` axis cut to ``n`` (one offload chunk)."""
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct((n, *a.shape[1:]), a.dtype, sharding=a.sharding), stack)


def candidate_splits(devices: int, batch: int, *widths: int) -> list[tuple[int, int, int]]:
    """Every ``(dp, tp, sp)`` with ``dp * tp * sp == devices`` a model can run: dp divides the transformer batch
    (2 x prompts with classifier-free guidance), tp every one of ``widths`` (the head count, the MLP width); any sp
    (token streams are padded to a multiple of it)."""
    from vidax.core.sharding import divisors

    out = []
    for dp in divisors(devices):
        if batch % dp:
            continue
        for tp in divisors(devices // dp):
            if any(w % tp for w in widths):
                continue
            out.append((dp, tp, devices // (dp * tp)))
    return out


def default_chunks(*stack_layers: int) -> list[int]:
    """Offload chunk sizes to try, one size for every stack: sizes that divide every stack's layer count, up to half
    the largest, thinned to roughly halving steps from the largest (40 layers: 20, 10, 5, 2, 1; 30: 15, 6, 3, 1;
    HunyuanVideo's 20 and 40: 20, 10, 5, 2, 1; HunyuanVideo-1.5's 54: 27, 9, 3, 1)."""
    from vidax.core.sharding import divisors

    common = math.gcd(*stack_layers)
    top = max(stack_layers) // 2
    out: list[int] = []
    for d in sorted((d for d in divisors(common) if d <= top), reverse=True):
        if not out or d <= out[-1] / 2 or d == 1:
            out.append(d)
    return out


def joint_comm_bytes(*, dim: int, heads: int, dual_layers: int, single_layers: int, batch: int, tokens: int,
                     text_tokens: int, dtype: Any, dp: int, tp: int, sp: int) -> int:
    """Bytes one device sends per step in the block stacks of a joint-attention (MMDiT) transformer (the cost model's
    communication term; HunyuanVideo, HunyuanVideo-1.5).

    Per block, over the joint rows (video and context, each padded to a multiple of sp and split over it): tensor
    parallelism all-reduces float32 ``(B/dp, rows/sp, dim)`` partial sums (a ring sends ``2 (tp-1)/tp`` of the
    buffer): two per dual-stream block (attention and feed-forward outputs), one per single-stream block (its one
    output projection); Ulysses sends ``(sp-1)/sp`` of q, k, v and the attention output ``(B/dp, rows/sp, dim/tp)`` in
    the weight dtype (the key/value all-gather mode sends ``sp - 1`` times k and v instead); dp sends nothing. The
    AdaLN gathers (``B x 6 dim`` per block) are negligible.
    """
    from vidax.core.parallel import padded_length, sequence_mode

    b = batch // dp
    rows = (padded_length(tokens, sp) + padded_length(text_tokens, sp)) // sp
    w = np.dtype(dtype).itemsize
    reduce = 2 * (tp - 1) / tp * b * rows * dim * 4 if tp > 1 else 0.0
    seq = 0.0
    if sp > 1:
        part = b * rows * (dim // tp) * w
        seq = (4 * (sp - 1) / sp if sequence_mode(heads // tp, sp) == "ulysses" else 2 * (sp - 1)) * part
    return int(dual_layers * (2 * reduce + seq) + single_layers * (reduce + seq))


def step_compiler_options(platform: str, dtype: Any) -> dict | None:
    """XLA options of a planner's step compilations: :func:`compiler_options`, and on CPU for weights below float32
    ``while-loop-invariant-code-motion`` disabled.

    XLA:CPU has no bfloat16 matmul: it converts the weights to float32 before each dot, and its loop-invariant code
    motion hoists that conversion out of a block loop, so the whole stack's weights in float32 become temporaries.
    Accelerators multiply bfloat16 natively and hold no such copy; with the pass disabled each block converts its own
    weights and the figures are the accelerator's layout of the same program. (A bfloat16 run *on* the CPU backend
    does hold the hoisted copies.)
    """
    options = compiler_options(platform)
    if platform == "cpu" and np.dtype(dtype).itemsize < 4:
        options = {**options, "xla_disable_hlo_passes": "while-loop-invariant-code-motion"}
    return options


def plan_candidates(splits: Sequence[tuple[int, int, int]], estimate: Callable[..., list[Estimate]], *,
                    chunks: Sequence[int], memory_bytes: int | None = None, reserve_bytes: int = 0,
                    offload_if_needed: bool = False, log: Callable[[str], None] | None = None) -> list[Estimate]:
    """Compile every candidate: ``estimate(dp, tp, sp, chunks=..., resident=...)`` per split, in one pass (resident
    and every chunk size), or with ``offload_if_needed`` a resident pass first and the offloaded one only if no
    resident split fits ``memory_bytes`` (the cost model ranks every resident split first). A split that fails to
    compile is recorded with its error and does not hide the others; ``fits`` is set against the budget."""
    estimates: list[Estimate] = []
    passes = [(True, [])] + ([(False, list(chunks))] if chunks else []) if offload_if_needed else [(True, list(chunks))]
    for resident, sizes in passes:
        if not resident and any(e.fits for e in estimates):
            break  # a resident split fits: it outranks every offloaded one
        for dp, tp, sp in splits:
            ts = time.perf_counter()
            try:
                est = estimate(dp, tp, sp, chunks=sizes, resident=resident)
            except Exception as e:  # one split failing to compile must not hide the others
                est = [Estimate(Split(dp, tp, sp), error=f"{type(e).__name__}: {e}")]
            for e in est:
                if memory_bytes is not None and e.error is None:
                    e.fits = e.peak_bytes + reserve_bytes <= memory_bytes
            estimates += est
            if log:
                log(f"  dp={dp} tp={tp} sp={sp}: {len(est)} configurations compiled in {time.perf_counter() - ts:.1f}s")
    return estimates


@dataclass
class PipelinePlan:
    """A family planner's result when it counts the whole pipeline (the step on every device, the rest of the
    pipeline on the first).

    Attributes:
      estimates: every candidate's :class:`Estimate` (per device; the first device's phases).
      recommended: the fastest that fits (None: none fits).
      budget_bytes: per-device budget (None: not checked), reserve_bytes: kept free.
      target: what was compiled on (:func:`planning_devices`).
      seconds: planning time.
      settings: the planned run: ``model``, ``width``, ``height``, ``num_frames``, ``tokens``, ``text_tokens``,
        ``batch``, ``dtype``, ``attention``; ``first_device_notes`` (``[(name, note)]``, printed under the header);
        ``decode_hint`` (printed when no split fits and the VAE decode, or the phase ``decode_phase`` names, is the
        smallest peak).
      scope: what ``vidax plan`` prints after the report.
    """

    estimates: list[Estimate]
    recommended: Estimate | None
    budget_bytes: int | None
    reserve_bytes: int
    target: str
    seconds: float
    settings: dict = field(default_factory=dict)
    scope: str = ("(the whole pipeline: the transformer step on every device; the text encoders, the VAE weights and "
                  "its decode on the first device; --reserve-gb keeps room for anything else)")

    def report(self) -> str:
        """The printed report: settings, the first device's other figures, one row per split, the recommendation."""
        s = self.settings
        lines = [f"vidax plan: {s.get('model') or s.get('default_model', 'transformer')} {s['width']}x{s['height']}, "
                 f"{s['num_frames']} frames ({s['tokens']} video + {s['text_tokens']} text tokens x {s['batch']}), "
                 f"{s['dtype']} weights, attention {s['attention']}; " + (
                     f"estimated analytically in {self.seconds:.1f}s" if self.target == "analytic"
                     else f"compiled on {self.target} in {self.seconds:.1f}s"),
                 ("per-device peak = exact weights per shard + activations by the family planner's closed forms; "
                  if self.target == "analytic" else
                  "per-device peak = arguments + outputs + temporaries - aliased, from compiled.memory_analysis(); ")
                 + "the first device also holds:"]
        for name, note in s.get("first_device_notes", []):
            lines.append(f"  {name}: {note}")
        lines += format_table(self.estimates, self.budget_bytes, self.reserve_bytes)
        if self.recommended is None:
            fitting = [e for e in self.estimates if e.error is None]
            best = min(fitting, key=lambda e: e.peak_bytes) if fitting else None
            lines.append("recommended: none fits" + (f"; the smallest peak is {best.split.label()} "
                                                    f"({format_bytes(best.peak_bytes)})" if best else ""))
            decode = s.get("decode_phase", "vae decode")
            if best is not None and best.phases.get(decode, 0) == best.peak_bytes and s.get("decode_hint"):
                lines.append(f"  ({s['decode_hint']})")
        else:
            lines.append(f"recommended: {self.recommended.split.label()} "
                         f"(peak {format_bytes(self.recommended.peak_bytes)} per device)")
        return "\n".join(lines)


# -- measuring a compiled program's peak (CPU) ------------------------------------------------------------------------


def measure_peak(compiled, args: Sequence, seed: int = 0) -> dict:
    """Run a compiled program on random arguments on the first device and measure its peak memory (CPU).

    The CPU backend has no ``memory_stats()``, so the peak is a resident-set-size delta. Method (for checking a
    planner's estimate; run it in a fresh process started with ``MALLOC_MMAP_THRESHOLD_=65536`` so that every large
    buffer is its own mapping, returned to the system when freed): allocate the arguments (``A`` bytes, known
    exactly); run the program once (the runtime's one-time allocations, thread pools and the like, happen here; they
    are not step memory and an accelerator's ``peak_bytes_in_use`` would not count them either); free its output;
    read the resident set size ``R`` (``VmRSS``); reset the kernel's peak mark (``5`` to ``/proc/self/clear_refs``);
    run it again; measured peak = ``VmHWM - R + A``: arguments + everything the run added at its highest. Where the
    device reports ``memory_stats()["peak_bytes_in_use"]`` (GPU, TPU) that is returned too.

    Args:
      compiled: ``jax.stages.Compiled`` (compile it with the planner's options, so the program measured is the
        program estimated).
      args: its positional arguments as ``jax.ShapeDtypeStruct`` trees (None leaves stay None); filled with
        ``0.02 * N(0, 1)`` (integers: ones).

    Returns:
      ``{"estimate": compiled bytes (:func:`compiled_bytes`), "measured": peak bytes, "runtime_overhead": bytes the
      first run left behind beyond the arguments, "device_peak": bytes or None}``.
    """
    import gc

    dev = jax.local_devices()[0]
    estimate = compiled_bytes(compiled)
    gc.collect()
    base = _status_kib("VmRSS")
    rng = np.random.default_rng(seed)

    def make(a):
        if np.issubdtype(np.dtype(a.dtype), np.integer):
            host = np.ones(a.shape, a.dtype)
        else:
            host = (rng.standard_normal(a.shape, dtype=np.float32) * 0.02).astype(a.dtype)
        out = jax.device_put(host, dev)
        out.block_until_ready()
        return out

    arrays = jax.tree.map(make, tuple(args))
    arg_bytes = sum(int(a.nbytes) for a in jax.tree.leaves(arrays))
    jax.block_until_ready(compiled(*arrays))  # warm-up: one-time runtime allocations happen here
    gc.collect()
    settled = _status_kib("VmRSS")  # arguments + whatever the runtime keeps after the first run
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current RSS
    except OSError:
        pass
    out = compiled(*arrays)
    jax.block_until_ready(out)
    peak = _status_kib("VmHWM")
    stats = dev.memory_stats() or {}
    return {"estimate": estimate, "measured": (peak - settled) * 1024 + arg_bytes,
            "runtime_overhead": (settled - base) * 1024 - arg_bytes, "device_peak": stats.get("peak_bytes_in_use")}


def _status_kib(field_name: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field_name}")
