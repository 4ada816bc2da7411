"""Memory planner for the Wan2.1 text-to-video step: which (dp, tp, sp, offload chunk) fits, and which is fastest.

For every candidate split of ``devices`` the guided transformer step is compiled on abstract
shapes (``vidax.core.params.abstract_params`` with the mesh's shardings; no weight loaded,
nothing allocated) exactly as the pipeline compiles it: resident (``pipeline._cfg_step``), or
offloaded (``pipeline.compile_offloaded_step``: prologue, one chunk function per chunk size,
epilogue). Per-device bytes come from ``compiled.memory_analysis()``
(:func:`vidax.core.planner.compiled_bytes`).

Phases of an offloaded step, each the bytes live on one device:

``prologue``
    the compiled prologue (its arguments are the resident parameters and the step inputs).
``chunks``
    the compiled chunk function for ``N`` layers (one chunk, the block-loop activations, its
    temporaries) + the resident parameters + the step inputs + ``temb`` (kept for the head) +
    the next chunk arriving in the second buffer (overlap).
``epilogue``
    the compiled epilogue + the step inputs.

Not counted: the text encoder and the VAE (they run on the first device before and after the
loop: pass ``reserve_bytes`` for them), the sampler's history (a few latent-sized arrays).

Attention compiles as ``auto`` resolves it for the devices' platform (on CPU the fused ``cpu_flash``
custom call, whose few MiB of per-thread scratch XLA's analysis does not see; ``chunked`` where the
native module is not built), unless another implementation is requested.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from vidax.core.attention import AttentionImpl, resolve_implementation
from vidax.core.offload import ChunkPlan
from vidax.core.parallel import padded_length, sequence_mode
from vidax.core.params import abstract_params
from vidax.core.planner import (Estimate, Split, compiled_bytes, compiler_options, format_bytes, format_table,
                                measure_peak, planning_devices, recommend, sharded_bytes)
from vidax.core.sharding import divisors, make_mesh
from vidax.models.wan.config import PRESETS, WanPreset, WanTransformerConfig
from vidax.models.wan.sharding import WAN_RULES
from vidax.models.wan.transformer import num_tokens, transformer_specs

#: Transformer architectures of the presets' models (config.json of the released checkpoints).
ARCHITECTURES: dict[str, WanTransformerConfig] = {
    "Wan2.1-T2V-1.3B": WanTransformerConfig(num_attention_heads=12, attention_head_dim=128, ffn_dim=8960, num_layers=30),
    "Wan2.1-T2V-14B": WanTransformerConfig(num_attention_heads=40, attention_head_dim=128, ffn_dim=13824, num_layers=40),
}
TEXT_LEN = 512
VAE_TEMPORAL, VAE_SPATIAL = 4, 8


def preset_architecture(preset: WanPreset) -> WanTransformerConfig:
    """The transformer configuration of a preset's model.

    Raises:
      ValueError: a preset whose model the planner does not know or does not run (image-conditioned
        tasks), naming the ones it does.
    """
    if preset.task != "t2v" or preset.model not in ARCHITECTURES:
        ok = sorted(n for n, p in PRESETS.items() if p.task == "t2v" and p.model in ARCHITECTURES)
        raise ValueError(f"the planner covers the Wan2.1 text-to-video step; preset {preset.name!r} ({preset.model}, "
                         f"{preset.task}) is not one of its presets: {', '.join(ok)} (or pass --checkpoint)")
    return ARCHITECTURES[preset.model]


def latent_shape(cfg: WanTransformerConfig, height: int, width: int, num_frames: int, prompts: int = 1) -> tuple:
    """``(B, C, T, H, W)`` latents of a ``num_frames`` x ``height`` x ``width`` video."""
    return (prompts, cfg.in_channels, (num_frames - 1) // VAE_TEMPORAL + 1, height // VAE_SPATIAL, width // VAE_SPATIAL)


def candidate_splits(cfg: WanTransformerConfig, devices: int, batch: int) -> list[tuple[int, int, int]]:
    """Every ``(dp, tp, sp)`` with ``dp * tp * sp == devices`` the model can run: dp divides the
    transformer batch (2 x prompts with guidance), tp divides the head count and the FFN width;
    any sp (tokens are padded)."""
    out = []
    for dp in divisors(devices):
        if batch % dp:
            continue
        for tp in divisors(devices // dp):
            if cfg.num_attention_heads % tp or cfg.ffn_dim % tp:
                continue
            out.append((dp, tp, devices // (dp * tp)))
    return out


def default_chunks(num_layers: int) -> list[int]:
    """Offload chunk sizes to try: divisors of the layer count up to half of it, thinned to roughly
    halving steps from the largest (40 layers: 20, 10, 5, 2, 1; 30: 15, 6, 3, 1)."""
    out: list[int] = []
    for d in sorted((d for d in divisors(num_layers) if d <= num_layers // 2), reverse=True):
        if not out or d <= out[-1] / 2 or d == 1:
            out.append(d)
    return out


def comm_bytes(cfg: WanTransformerConfig, batch: int, tokens: int, dtype, dp: int, tp: int, sp: int) -> int:
    """Bytes one device sends per step in the block stack (the cost model's communication term).

    Per block: tensor parallelism all-reduces three float32 ``(B/dp, S/sp, D)`` partial sums
    (self-attention, cross-attention and FFN outputs; a ring all-reduce sends ``2 (tp-1)/tp``
    of the buffer); Ulysses sends ``(sp-1)/sp`` of each of q, k, v and the attention output
    ``(B/dp, S/sp, D/tp)`` in the compute dtype (the key/value all-gather mode sends ``sp - 1``
    times k and v instead); data parallelism sends nothing.
    """
    b, s = batch // dp, padded_length(tokens, sp) // sp
    w = np.dtype(dtype).itemsize
    per_layer = 0.0
    if tp > 1:
        per_layer += 3 * 2 * (tp - 1) / tp * b * s * cfg.dim * 4
    if sp > 1:
        part = b * s * (cfg.dim // tp) * w
        if sequence_mode(cfg.num_attention_heads // tp, sp) == "ulysses":
            per_layer += 4 * (sp - 1) / sp * part
        else:
            per_layer += 2 * (sp - 1) * part
    return int(per_layer * cfg.num_layers)


def _abstract(tree, shardings):
    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), tree, shardings)


def _inputs(cfg, mesh, shape, dtype, guided):
    b = shape[0]
    rep = NamedSharding(mesh, PartitionSpec())
    dp = mesh.shape["data"]
    ctx_batch = 2 * b if guided else b
    ctx_spec = WAN_RULES.spec(("batch", None, None)) if dp > 1 and ctx_batch % dp == 0 else PartitionSpec()
    s = num_tokens(cfg, shape)
    half = cfg.attention_head_dim // 2
    return dict(
        x=jax.ShapeDtypeStruct(shape, jnp.float32, sharding=rep),
        t=jax.ShapeDtypeStruct((b,), jnp.float32, sharding=rep),
        context=jax.ShapeDtypeStruct((ctx_batch, TEXT_LEN, cfg.text_dim), dtype, sharding=NamedSharding(mesh, ctx_spec)),
        cos=jax.ShapeDtypeStruct((s, half), jnp.float32, sharding=rep),
        sin=jax.ShapeDtypeStruct((s, half), jnp.float32, sharding=rep),
        g=jax.ShapeDtypeStruct((), jnp.float32, sharding=rep),
    )


def estimate_split(cfg: WanTransformerConfig, dp: int, tp: int, sp: int, devices: Sequence, *, shape: tuple,
                   dtype, guided: bool = True, chunks: Sequence[int] = (), resident: bool = True,
                   attention: str = "chunked", overlap: bool = True) -> list[Estimate]:
    """Compile one mesh split (resident and/or at each offload chunk size) and estimate its memory.

    Args:
      cfg: the transformer; dp, tp, sp: the split; devices: ``dp * tp * sp`` devices to compile on.
      shape: latents ``(B, C, T, H, W)``; dtype: weight dtype; guided: classifier-free guidance (batch 2B).
      chunks: offload chunk sizes to estimate; resident: also estimate the resident step.
      attention: attention implementation compiled; overlap: count the second chunk buffer.

    Returns:
      one :class:`~vidax.core.planner.Estimate` per configuration (resident first), per device.
    """
    from vidax.models.wan.pipeline import _cfg_step, compile_offloaded_step

    dtype = jnp.dtype(dtype)
    mesh = make_mesh(dp, tp, sp, devices=list(devices))
    specs = transformer_specs(cfg)
    params = _abstract(abstract_params(specs, dtype), WAN_RULES.param_shardings(specs, mesh))
    inp = _inputs(cfg, mesh, shape, dtype, guided)
    batch = shape[0] * (2 if guided else 1)
    comm = comm_bytes(cfg, batch, num_tokens(cfg, shape), dtype, dp, tp, sp)
    impl = AttentionImpl(attention)
    options = compiler_options(mesh.devices.flat[0].platform)
    out = []
    with jax.set_mesh(mesh):
        if resident:
            step = jax.jit(_cfg_step, static_argnames=("cfg", "attention_impl", "guided", "mesh", "rules"))
            c = step.lower(params, inp["x"], inp["t"], inp["context"], inp["cos"], inp["sin"], inp["g"], cfg=cfg,
                           attention_impl=impl, guided=guided, mesh=mesh, rules=WAN_RULES).compile(options)
            b = compiled_bytes(c)
            out.append(Estimate(Split(dp, tp, sp), peak_bytes=b, phases={"step": b}, comm_bytes=comm))
        if chunks:
            res = {k: v for k, v in params.items() if k != "blocks"}
            r_bytes, in_bytes = sharded_bytes(res), sharded_bytes(inp)
            layer = sharded_bytes(jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape[1:], a.dtype, sharding=NamedSharding(
                mesh, PartitionSpec(*tuple(a.sharding.spec)[1:]))), params["blocks"]))
            abstract_chunks = [jax.tree.map(lambda a: jax.ShapeDtypeStruct((n, *a.shape[1:]), a.dtype, sharding=a.sharding),
                                            params["blocks"]) for n in chunks]
            pro_c, chunk_cs, epi_c = compile_offloaded_step(
                res, abstract_chunks, inp["x"], inp["t"], inp["context"], inp["cos"], inp["sin"], inp["g"], cfg=cfg,
                attention=impl, guided=guided, mesh=mesh, rules=WAN_RULES, compiler_options=options)
            temb_bytes = batch * cfg.dim * 4 // dp  # float32 (B, D) over data, kept for the head
            pro_b, epi_b = compiled_bytes(pro_c), compiled_bytes(epi_c) + in_bytes
            for n, chunk_c in zip(chunks, chunk_cs):
                plan = ChunkPlan(cfg.num_layers, n)
                phases = {
                    "prologue": pro_b,
                    "chunks": compiled_bytes(chunk_c) + r_bytes + in_bytes + temb_bytes + (n * layer if overlap else 0),
                    "epilogue": epi_b,
                }
                out.append(Estimate(Split(dp, tp, sp, n), peak_bytes=max(phases.values()), phases=phases,
                                    comm_bytes=comm, transfer_bytes=plan.padded_layers * layer,
                                    launches=plan.num_chunks))
    return out


@dataclass
class WanPlan:
    """The planner's result.

    Attributes:
      estimates: every candidate's :class:`~vidax.core.planner.Estimate`.
      recommended: the fastest that fits (None: none fits).
      budget_bytes: per-device memory budget (None: not checked), reserve_bytes: kept free.
      target: what was compiled on (:func:`vidax.core.planner.planning_devices`).
      seconds: planning time.
      settings: the planned run (sizes, dtype, tokens, attention).
    """

    estimates: list[Estimate]
    recommended: Estimate | None
    budget_bytes: int | None
    reserve_bytes: int
    target: str
    seconds: float
    settings: dict = field(default_factory=dict)

    def report(self) -> str:
        """The printed report: settings, one row per split, the recommendation."""
        s = self.settings
        lines = [f"vidax plan: {s.get('model') or 'Wan transformer'} {s['width']}x{s['height']}, {s['num_frames']} frames "
                 f"({s['tokens']} tokens x {s['batch']}), {s['dtype']} weights, attention {s['attention']}; "
                 f"compiled on {self.target} in {self.seconds:.1f}s",
                 "per-device peak = arguments + outputs + temporaries - aliased, from compiled.memory_analysis()"]
        lines += format_table(self.estimates, self.budget_bytes, self.reserve_bytes)
        if self.recommended is None:
            fitting = [e for e in self.estimates if e.error is None]
            best = min(fitting, key=lambda e: e.peak_bytes) if fitting else None
            lines.append("recommended: none fits" + (f"; the smallest peak is {best.split.label()} "
                                                    f"({format_bytes(best.peak_bytes)})" if best else ""))
        else:
            lines.append(f"recommended: {self.recommended.split.label()} "
                         f"(peak {format_bytes(self.recommended.peak_bytes)} per device)")
        return "\n".join(lines)


def plan_wan(cfg: WanTransformerConfig, *, height: int, width: int, num_frames: int, dtype="bfloat16", devices: int,
             memory_bytes: int | None = None, reserve_bytes: int = 0, guided: bool = True, prompts: int = 1,
             chunks: Sequence[int] | None = None, splits: Sequence[tuple[int, int, int]] | None = None,
             attention: str = "auto", overlap: bool = True, model: str | None = None,
             offload_if_needed: bool = False, log: Callable[[str], None] | None = None) -> WanPlan:
    """Estimate every candidate split's per-device peak for one generation setting, and recommend one.

    Args:
      cfg: the transformer architecture.
      height, width, num_frames: the video (pixels, frames); dtype: transformer weight dtype.
      devices: devices of the run (the mesh size, ``dp * tp * sp``).
      memory_bytes: per-device budget; None: report without a fit test.
      reserve_bytes: per-device memory kept for the rest of the pipeline (VAE, text encoder).
      guided: classifier-free guidance (the step runs a batch of 2 x prompts).
      chunks: offload chunk sizes to try (default :func:`default_chunks`); ``()``: none.
      splits: ``(dp, tp, sp)`` candidates (default :func:`candidate_splits`).
      attention: implementation to compile ("auto": resolved for the compile target's backend).
      overlap: offloading with copy/compute overlap (two chunk buffers) or serial (one).
      model: name for the report; log: progress callback (one line per split).
      offload_if_needed: compile the offloaded candidates only if no resident split fits the budget
        (the cost model ranks every resident split first, so they cannot be recommended
        otherwise); for ``generate --auto-split``, where only the recommendation matters.

    Returns:
      :class:`WanPlan`.

    Raises:
      ValueError: fewer devices to compile on than ``devices`` (see
        :func:`vidax.core.planner.planning_devices`); no split of ``devices`` the model can run.
    """
    t0 = time.perf_counter()
    devs, target = planning_devices(devices)
    shape = latent_shape(cfg, height, width, num_frames, prompts)
    batch = prompts * (2 if guided else 1)
    splits = list(splits) if splits is not None else candidate_splits(cfg, devices, batch)
    if not splits:
        raise ValueError(f"no (dp, tp, sp) split of {devices} devices fits this model (heads "
                         f"{cfg.num_attention_heads}, batch {batch})")
    chunks = default_chunks(cfg.num_layers) if chunks is None else list(chunks)
    impl = resolve_implementation(attention, devs[0].platform)
    estimates: list[Estimate] = []
    passes = [(True, [])] + ([(False, chunks)] if chunks else []) if offload_if_needed else [(True, chunks)]
    for resident, sizes in passes:
        if not resident and any(e.fits for e in estimates):
            break  # a resident split fits: it outranks every offloaded one
        for dp, tp, sp in splits:
            ts = time.perf_counter()
            try:
                est = estimate_split(cfg, dp, tp, sp, devs, shape=shape, dtype=dtype, guided=guided, chunks=sizes,
                                     resident=resident, attention=impl, overlap=overlap)
            except Exception as e:  # one split failing to compile must not hide the others
                est = [Estimate(Split(dp, tp, sp), error=f"{type(e).__name__}: {e}")]
            for e in est:
                if memory_bytes is not None and e.error is None:
                    e.fits = e.peak_bytes + reserve_bytes <= memory_bytes
            estimates += est
            if log:
                log(f"  dp={dp} tp={tp} sp={sp}: {len(est)} configurations compiled in {time.perf_counter() - ts:.1f}s")
    settings = dict(model=model, height=height, width=width, num_frames=num_frames, dtype=str(jnp.dtype(dtype)),
                    tokens=num_tokens(cfg, shape), batch=batch, attention=impl.value, devices=devices)
    return WanPlan(estimates, recommend(estimates), memory_bytes, reserve_bytes, target, time.perf_counter() - t0,
                   settings)


def measure_resident_peak(cfg: WanTransformerConfig, shape: tuple, dtype="float32", guided: bool = True,
                          attention: str = "chunked") -> dict:
    """Run the resident guided step once on the first device and measure its peak memory (CPU):
    :func:`vidax.core.planner.measure_peak` (a resident-set-size delta; run it in a fresh process started with
    ``MALLOC_MMAP_THRESHOLD_=65536``).

    The step is compiled with the planner's options (:func:`vidax.core.planner.compiler_options`),
    so the program measured is the program estimated.

    Returns:
      ``{"estimate": compiled bytes, "measured": peak bytes, "runtime_overhead": bytes the first run
      left behind beyond the arguments, "device_peak": bytes or None}``.
    """
    from vidax.models.wan.pipeline import _cfg_step

    dtype = jnp.dtype(dtype)
    dev = jax.local_devices()[0]
    specs = transformer_specs(cfg)
    abstract = abstract_params(specs, dtype)
    b = shape[0]
    s = num_tokens(cfg, shape)
    ctx_batch = 2 * b if guided else b
    args_abstract = (abstract, jax.ShapeDtypeStruct(shape, jnp.float32), jax.ShapeDtypeStruct((b,), jnp.float32),
                     jax.ShapeDtypeStruct((ctx_batch, TEXT_LEN, cfg.text_dim), dtype),
                     jax.ShapeDtypeStruct((s, cfg.attention_head_dim // 2), jnp.float32),
                     jax.ShapeDtypeStruct((s, cfg.attention_head_dim // 2), jnp.float32),
                     jax.ShapeDtypeStruct((), jnp.float32))
    step = jax.jit(_cfg_step, static_argnames=("cfg", "attention_impl", "guided", "mesh", "rules"))
    compiled = step.lower(*args_abstract, cfg=cfg, attention_impl=AttentionImpl(attention), guided=guided).compile(
        compiler_options(dev.platform))
    return measure_peak(compiled, args_abstract)
