"""Memory planner for Cosmos3 (Nano, Edge): which (dp, tp, sp, offload chunk) fits, and which is fastest.

As the other planners (docs/design.md, "Planner"; the shared parts in :mod:`vidax.core.planner`), the transformer's
programs are compiled for every candidate split on abstract shapes (no weight read, nothing allocated) as the
pipeline runs them (:mod:`vidax.models.cosmos3.block_loop`), and the per-device bytes read from
``compiled.memory_analysis()``. Cosmos3 has no separate text encoder: the prompt runs through the backbone's
understanding ("und") weights, so the transformer has two phases per call:

``prefill``
    The und stream over the prompt rows once per call (:func:`vidax.models.cosmos3.transformer.und_prefill`; with
    guidance the prompt and the negative prompt, a batch of 2 x prompts, padded to ``prompt_tokens``): the und weights
    of every layer and ``embed_tokens`` read, the und cache ``UndCache(k, v)`` written, each ``(num_layers, B, L,
    kv_heads, head_dim)`` in the weights' dtype (Nano, bf16, 512 tokens, CFG: 151 MB; split over tp by key/value
    heads).
``step``
    The generation stream at every denoising step (:func:`vidax.models.cosmos3.block_loop.make_gen_step` as the
    pipeline builds it: the latents cast and repeated for the CFG rows in the prologue, the guidance in the
    epilogue), with the und cache resident as an argument. Offloaded: its prologue, one chunk program (which slices
    its layers of the cache) and its epilogue; the prefill likewise streams the chunks once (its chunk program, the
    chunks' caches kept, then joined).

Both phases hold the whole transformer's weights on the device (resident), though each program reads only its
stream's: a program's unused weights are pruned from its arguments by ``jit``, so they are added back here. The
rest of the pipeline is counted on the first device of the mesh:

VAE weights
    The whole Wan2.2 VAE (the pipeline loads encoder and decoder; 48 latent channels, 16x space, 4x time), in
    ``vae_dtype``: every phase.
``vae decode``
    The Wan2.2 decoder one latent frame at a time (:func:`vidax.core.wan_vae_memory.vae_decode_bytes`), beside the
    transformer's weights and the und cache (the pipeline's call still holds it).

Not counted: the sampler's state (a few float32 latent-sized arrays: 7.8 MB each at 1280x704, 93 frames), the
host side (offloaded chunks live in host memory), the image-to-video VAE encode of one frame.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from vidax.core import wan_vae
from vidax.core.attention import AttentionImpl, resolve_implementation
from vidax.core.offload import ChunkPlan
from vidax.core.params import abstract_params, flatten
from vidax.core.planner import (Estimate, PipelinePlan, Split, candidate_splits, chunk_of, compiled_bytes,
                                default_chunks, format_bytes, layer_bytes, plan_candidates, planning_devices,
                                recommend, sharded_bytes, step_compiler_options, weight_bytes, with_shardings)
from vidax.core.sharding import make_mesh
from vidax.core.wan_vae_memory import vae_decode_bytes, vae_weight_bytes
from vidax.models.cosmos3.config import Cosmos3TransformerConfig
from vidax.models.cosmos3.sharding import COSMOS3_RULES, io_specs
from vidax.models.cosmos3.transformer import STACK, UndCache, num_tokens, transformer_specs

#: The prompt rows the planner sizes: padded to 512 tokens (the pipeline pads to the next multiple of 64; the system
#: prompt, the chat frame and the metadata sentences take about 60 tokens, a detailed prompt a few hundred more).
PROMPT_TOKENS = 512
#: The release's guidance (any value other than 1 gives the same programs).
_GUIDANCE = 6.0


@dataclass(frozen=True)
class Cosmos3Model:
    """What the planner sizes: the transformer and the VAE (configurations only), and the prompt length.

    Attributes:
      transformer: the backbone (both streams).
      vae: the Wan2.2 VAE.
      prompt_tokens: the padded prompt length ``L`` of the und prefill and cache.
      folder: the checkpoint folder it was read from (None: a preset's model).
    """

    transformer: Cosmos3TransformerConfig
    vae: wan_vae.WanVAEConfig = field(default_factory=lambda: wan_vae.WAN22_VAE_ORIGINAL)
    prompt_tokens: int = PROMPT_TOKENS
    folder: str | None = None


#: The released architectures (:data:`vidax.models.cosmos3.config.RELEASE_CONFIGS`) with the Wan2.2 VAE.
ARCHITECTURES: dict[str, Cosmos3Model] = {
    name: Cosmos3Model(Cosmos3TransformerConfig.from_release(name)) for name in ("nano", "edge")
}
#: The release each preset runs (:data:`vidax.models.cosmos3.presets.PRESETS`).
PRESET_SIZES = {"cosmos3-nano-t2v": "nano", "cosmos3-edge-t2v": "edge"}


def preset_architecture(preset: Any) -> Cosmos3Model:
    """The released model of a preset (``cosmos3-nano-t2v``: Nano; ``cosmos3-edge-t2v``: Edge).

    Raises:
      ValueError: a preset the planner does not know (the known ones named).
    """
    name = getattr(preset, "name", preset)
    if name not in PRESET_SIZES:
        raise ValueError(f"the planner knows the presets {', '.join(PRESET_SIZES)}; got {name!r} (pass --checkpoint)")
    return ARCHITECTURES[PRESET_SIZES[name]]


def folder_architecture(folder: str | Path) -> Cosmos3Model:
    """The model of a checkpoint folder (diffusers or vidax layout), from its configuration files; no weight is read.

    Raises:
      CheckpointError: a folder the family does not read (:func:`vidax.models.cosmos3.layout.resolve_checkpoint`).
      ValueError: a configuration it does not take.
    """
    from vidax.models.cosmos3.layout import resolve_checkpoint
    from vidax.models.cosmos3.loading import transformer_config, vae_config

    ckpt = resolve_checkpoint(Path(folder))
    return Cosmos3Model(transformer_config(ckpt), vae_config(ckpt), folder=str(ckpt.folder))


# -- weights ---------------------------------------------------------------------------------------------------------


def parameter_counts(cfg: Cosmos3TransformerConfig) -> dict[str, int]:
    """Parameters of a transformer (video generation: no ``lm_head``, sound or action heads) by kind.

    Returns:
      ``{"total", "und" (embed_tokens and the layers' understanding weights: what the prefill reads), "gen" (the
      layers' generation weights), "layers" (the stack, both streams), "resident" (outside the stack: what stays on
      the device when offloading), "fp32" (float32-pinned leaves: the time embedder)}``. Nano: 14.53 billion, Edge
      3.09 billion (:mod:`vidax.models.cosmos3.config`).
    """
    from vidax.models.cosmos3.transformer import UND_ATTN_KEYS, UND_LAYER_KEYS

    out = dict.fromkeys(("total", "und", "gen", "layers", "resident", "fp32"), 0)
    for path, spec in flatten(transformer_specs(cfg)):
        n = math.prod(spec.shape)
        parts = path.split("/")
        out["total"] += n
        out["fp32"] += n if spec.fp32 else 0
        if parts[0] == STACK:
            out["layers"] += n
            und = parts[1] in UND_LAYER_KEYS and (parts[1] != "self_attn" or parts[2] in UND_ATTN_KEYS)
            out["und" if und else "gen"] += n
        else:
            out["resident"] += n
            out["und"] += n if parts[0] == "embed_tokens" else 0
    return out


def transformer_bytes(cfg: Cosmos3TransformerConfig, dtype: Any = "bfloat16") -> int:
    """Bytes of a transformer's weights in ``dtype`` (its float32-pinned leaves at 4 bytes), on one device."""
    return weight_bytes(transformer_specs(cfg), dtype)


def vae_bytes(model: Cosmos3Model, dtype: Any = "float32") -> int:
    """Weight bytes of the whole Wan2.2 VAE as the pipeline loads it (the release: 0.70 billion parameters)."""
    return vae_weight_bytes(model.vae, dtype)


def cache_bytes(cfg: Cosmos3TransformerConfig, batch: int, prompt_tokens: int, dtype: Any = "bfloat16",
                layers: int | None = None) -> int:
    """Bytes of the und cache ``UndCache(k, v)``: ``2 x (layers, batch, L, kv_heads, head_dim)`` in ``dtype`` (on
    one device)."""
    layers = cfg.num_hidden_layers if layers is None else layers
    return 2 * layers * batch * prompt_tokens * cfg.num_key_value_heads * cfg.head_dim * np.dtype(dtype).itemsize


def latent_shape(model: Cosmos3Model, height: int, width: int, num_frames: int,
                 prompts: int = 1) -> tuple[int, int, int, int, int]:
    """The latents ``(B, 48, (F - 1) / 4 + 1, H / 16, W / 16)`` of ``num_frames`` frames of ``height x width``."""
    s, r = model.vae.spatial_compression, model.vae.temporal_compression
    return (prompts, model.vae.z_dim, (num_frames - 1) // r + 1, height // s, width // s)


# -- the cost model ---------------------------------------------------------------------------------------------------


def comm_bytes(cfg: Cosmos3TransformerConfig, batch: int, tokens: int, dtype, dp: int, tp: int, sp: int) -> int:
    """Bytes one device sends per denoising step in the gen layers (the cost model's communication term; the prefill
    runs once per call and is not counted).

    Per layer, over the vision tokens (padded to a multiple of sp and split over it): tensor parallelism all-reduces
    two float32 ``(B/dp, N/sp, hidden)`` partial sums (the attention's ``to_add_out`` and the MLP's ``down_proj``; a
    ring sends ``2 (tp-1)/tp`` of the buffer); Ulysses sends ``(sp-1)/sp`` of the queries and the attention output
    ``(B/dp, N/sp, heads x head_dim / tp)`` and of the keys and values (``kv_heads x head_dim / tp`` wide) in the weight
    dtype (the key/value all-gather mode: ``sp - 1`` times the keys and values); the und cache is replicated over
    ``sequence`` (nothing sent); dp sends nothing.
    """
    from vidax.core.parallel import padded_length, sequence_mode

    b = batch // dp
    rows = padded_length(tokens, sp) // sp
    hidden, w = cfg.hidden_size, np.dtype(dtype).itemsize
    reduce = 2 * (tp - 1) / tp * 2 * b * rows * hidden * 4 if tp > 1 else 0.0
    seq = 0.0
    if sp > 1:
        q = b * rows * cfg.num_attention_heads * cfg.head_dim // tp * w
        kv = b * rows * cfg.num_key_value_heads * cfg.head_dim // tp * w
        seq = ((sp - 1) / sp * (2 * q + 2 * kv) if sequence_mode(cfg.num_attention_heads // tp, sp) == "ulysses"
               else (sp - 1) * 2 * kv)
    return int(cfg.num_hidden_layers * (reduce + seq))


# -- the programs -----------------------------------------------------------------------------------------------------


def step_hooks(dtype: Any, guided: bool):
    """``(prepare, finish)`` of the pipeline's gen step (:meth:`vidax.models.cosmos3.pipeline.Cosmos3Pipeline.
    _step_fn`): the float32 latents ``(1, C, T, H, W)`` cast to ``dtype`` and repeated for every prompt row, and the
    guidance ``uncond + s (cond - uncond)`` on the float32 velocity."""
    from vidax.models.cosmos3.block_loop import GenArgs
    from vidax.models.cosmos3.pipeline import guide

    def prepare(lengths, x, timestep, position_ids, noisy):
        latents = jnp.broadcast_to(x.astype(dtype), (lengths.shape[0], *x.shape[1:]))
        return GenArgs(lengths, latents, timestep, position_ids, noisy)

    def finish(velocity, guidance_scale):
        return guide(velocity.astype(jnp.float32), guidance_scale if guided else None)

    return prepare, finish


def program_inputs(model: Cosmos3Model, mesh, shape: tuple[int, ...], guided: bool, dtype: Any,
                   cache_layers: int | None = None) -> dict:
    """The abstract inputs of the prefill and the gen step, placed as the pipeline places them (replicated on the
    mesh; the und cache as the prefill leaves it: key/value heads over ``tensor``, rows over ``data``).

    Returns:
      ``{"prefill": (input_ids (B, L), position_ids (B, 3, L), lengths (B,)), "cache": UndCache, "args": (lengths,
      latents (1, C, T, H, W), timestep (B,), position_ids (B, 3, N), noisy (B, T)), "finish_args": (guidance,)}``
      with ``B`` = 2 x prompts with guidance.
    """
    cfg = model.transformer
    b, c, t, h, w = shape
    rows = b * (2 if guided else 1)
    L = model.prompt_tokens
    rep = NamedSharding(mesh, PartitionSpec())

    def sds(s, dt, sharding=rep):
        return jax.ShapeDtypeStruct(s, dt, sharding=sharding)

    cache_sharding = NamedSharding(mesh, io_specs(COSMOS3_RULES)["cache"])
    layers = cfg.num_hidden_layers if cache_layers is None else cache_layers
    kv = sds((layers, rows, L, cfg.num_key_value_heads, cfg.head_dim), jnp.dtype(dtype), cache_sharding)
    n = num_tokens(cfg, shape)
    lengths = sds((rows,), jnp.int32)
    return {"prefill": (sds((rows, L), jnp.int32), sds((rows, 3, L), jnp.float32), lengths),
            "cache": UndCache(kv, kv),
            "args": (lengths, sds((1, c, t, h, w), jnp.float32), sds((rows,), jnp.float32),
                     sds((rows, 3, n), jnp.float32), sds((rows, t), jnp.float32)),
            "finish_args": (sds((), jnp.float32),)}


def program_bytes(compiled, *abstract_args) -> int:
    """Per-device bytes of a compiled program with all of ``abstract_args`` live: :func:`vidax.core.planner.
    compiled_bytes` with the arguments ``jit`` pruned (weights of the other stream, unread inputs) added back, since
    the pipeline holds them on the device all the same."""
    m = compiled.memory_analysis()
    return compiled_bytes(compiled) - int(m.argument_size_in_bytes) + sharded_bytes(abstract_args)


def _setup(model, dp, tp, sp, devices, shape, dtype, guided, attention):
    cfg = model.transformer
    mesh = make_mesh(dp, tp, sp, devices=list(devices))
    specs = transformer_specs(cfg)
    params = with_shardings(abstract_params(specs, dtype), COSMOS3_RULES.param_shardings(specs, mesh))
    options = step_compiler_options(mesh.devices.flat[0].platform, dtype)
    prepare, finish = step_hooks(dtype, guided)
    return mesh, params, options, prepare, finish


def compile_resident(model: Cosmos3Model, mesh, params, inputs: dict, *, prepare, finish, attention, options,
                     single_device: bool = False):
    """The resident prefill and gen step compiled as :mod:`vidax.models.cosmos3.block_loop` builds them without
    stacks (the layers under ``lax.scan``): ``(prefill, step)`` compiled. ``single_device``: without the mesh argument
    (one device, as the pipeline runs without a mesh)."""
    from vidax.core.placement import replicated
    from vidax.models.cosmos3.transformer import gen_forward, und_prefill

    cfg = model.transformer
    impl = AttentionImpl(attention)
    m = None if single_device else mesh

    def prefill(params, ids, pos, lengths):
        return und_prefill(params, cfg, ids, pos, lengths, attention_impl=impl, mesh=m, rules=COSMOS3_RULES)

    def whole(params, cache, args, finish_args):
        a = prepare(*args)
        out = gen_forward(params, cfg, cache, a.lengths, a.latents, a.timestep, a.position_ids, a.noisy,
                          attention_impl=impl, mesh=m, rules=COSMOS3_RULES)
        return replicated(finish(out, *finish_args), m)

    pre = jax.jit(prefill).lower(params, *inputs["prefill"]).compile(options)
    step = jax.jit(whole).lower(params, inputs["cache"], inputs["args"], inputs["finish_args"]).compile(options)
    return pre, step


def _strip(info):
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), info)


def compile_offloaded(model: Cosmos3Model, mesh, resident: dict, chunk: dict, inputs: dict, *, prepare, finish,
                      attention, options) -> dict:
    """The offloaded programs as :func:`vidax.models.cosmos3.block_loop.make_prefill` and
    :func:`~vidax.models.cosmos3.block_loop.make_gen_step` build them with chunks: the prefill's embedding and chunk
    program, the gen step's prologue, chunk program and epilogue (``{name: compiled}``); ``inputs`` from
    :func:`program_inputs` with the cache padded to the chunks' layer count."""
    from vidax.core.placement import replicated
    from vidax.models.cosmos3.transformer import (gen_epilogue, gen_prologue_sharded, run_gen_layers, run_und_layers,
                                                  und_embed)

    cfg = model.transformer
    impl = AttentionImpl(attention)
    n = next(iter(jax.tree.leaves(chunk))).shape[0]
    out = {}
    embed = jax.jit(lambda params, ids, pos: und_embed(params, cfg, ids, pos))
    out["embed"] = embed.lower(resident, *inputs["prefill"][:2]).compile(options)
    x, (cos, sin) = _strip(out["embed"].out_info)
    und = jax.jit(lambda chunk, x, cos, sin, lengths: run_und_layers(
        chunk, x, cos, sin, lengths, cfg=cfg, attention_impl=impl, mesh=mesh, rules=COSMOS3_RULES),
        donate_argnums=(1,))
    out["und chunk"] = und.lower(chunk, x, cos, sin, inputs["prefill"][2]).compile(options)

    def prologue(params, args):
        a = prepare(*args)
        x, gen_inputs, _ = gen_prologue_sharded(params, cfg, a.lengths, a.latents, a.timestep, a.position_ids,
                                                a.noisy, mesh, COSMOS3_RULES)
        return x, gen_inputs, a.noisy

    out["prologue"] = jax.jit(prologue).lower(resident, inputs["args"]).compile(options)
    gx, gen_inputs, noisy = _strip(out["prologue"].out_info)
    tokens = inputs["args"][3].shape[2]

    def layers(chunk, x, start, cache, gen_inputs):
        part = UndCache(*(jax.lax.dynamic_slice_in_dim(c, start, n, axis=0) for c in cache))
        x = run_gen_layers(chunk, part, x, gen_inputs, cfg=cfg, attention_impl=impl, num_valid=tokens, mesh=mesh,
                           rules=COSMOS3_RULES)
        return x, start + n

    start = jax.ShapeDtypeStruct((), jnp.int32, sharding=NamedSharding(mesh, PartitionSpec()))
    out["gen chunk"] = jax.jit(layers, donate_argnums=(1,)).lower(chunk, gx, start, inputs["cache"],
                                                                  gen_inputs).compile(options)

    def epilogue(params, x, noisy, args, finish_args):
        a = prepare(*args)
        return replicated(finish(gen_epilogue(params, cfg, x, a.latents.shape, noisy), *finish_args), mesh)

    out["epilogue"] = jax.jit(epilogue).lower(resident, gx, noisy, inputs["args"],
                                              inputs["finish_args"]).compile(options)
    return out


def estimate_split(model: Cosmos3Model, dp: int, tp: int, sp: int, devices: Sequence, *, shape: tuple, dtype,
                   guided: bool = True, chunks: Sequence[int] = (), resident: bool = True,
                   attention: str = "chunked", overlap: bool = True,
                   first_device: dict | None = None) -> list[Estimate]:
    """Compile one mesh split (resident and/or at each offload chunk size) and estimate its per-device memory.

    Args:
      model: the model; dp, tp, sp: the split; devices: ``dp * tp * sp`` devices to compile on.
      shape: the latents ``(B, 48, T, H, W)``; dtype: the transformer's weight dtype.
      guided: classifier-free guidance (2 x prompts rows in the prefill and the step).
      chunks: offload chunk sizes; resident: also estimate the resident placement.
      attention: attention implementation compiled; overlap: count the second chunk buffer.
      first_device: the rest of the pipeline on the first device (:func:`plan_cosmos3`): ``{"always": bytes in every
        phase, "vae decode": the decode's bytes beside its weights}``; the transformer's weights and the und cache on
        that device are added here.

    Returns:
      one :class:`~vidax.core.planner.Estimate` per configuration (resident first); phases ``"prefill"``,
      ``"step"`` (resident) or ``"prefill"``, ``"prologue"``, ``"chunks"``, ``"epilogue"`` (offloaded), plus
      ``"vae decode"`` with ``first_device``.
    """
    from vidax.core.placement import mesh_context

    cfg = model.transformer
    dtype = jnp.dtype(dtype)
    mesh, params, options, prepare, finish = _setup(model, dp, tp, sp, devices, shape, dtype, guided, attention)
    batch = shape[0] * (2 if guided else 1)
    comm = comm_bytes(cfg, batch, num_tokens(cfg, shape), dtype, dp, tp, sp)
    extra = dict(first_device or {})
    always = extra.pop("always", 0)
    decode = extra.pop("vae decode", None)
    out = []
    with mesh_context(mesh):
        if resident:
            inputs = program_inputs(model, mesh, shape, guided, dtype)
            pre, step = compile_resident(model, mesh, params, inputs, prepare=prepare, finish=finish,
                                         attention=attention, options=options)
            phases = {"prefill": program_bytes(pre, params, inputs["prefill"]) + always,
                      "step": program_bytes(step, params, inputs["cache"], inputs["args"], inputs["finish_args"])
                      + always}
            if decode is not None:
                phases["vae decode"] = sharded_bytes((params, inputs["cache"])) + always + decode
            out.append(Estimate(Split(dp, tp, sp), peak_bytes=max(phases.values()), phases=phases, comm_bytes=comm))
        res = {k: v for k, v in params.items() if k != STACK}
        r_bytes = sharded_bytes(res)
        layer = layer_bytes(params[STACK])  # one layer (both streams), per device
        for n in chunks:
            plan = ChunkPlan(cfg.num_hidden_layers, n)
            inputs = program_inputs(model, mesh, shape, guided, dtype, cache_layers=plan.padded_layers)
            progs = compile_offloaded(model, mesh, res, chunk_of(params[STACK], n), inputs, prepare=prepare,
                                      finish=finish, attention=attention, options=options)
            cache = sharded_bytes(inputs["cache"])
            args = sharded_bytes((inputs["args"], inputs["finish_args"]))
            buffer = n * layer if overlap else 0
            # the prefill: a chunk program beside the chunk caches written so far (at the last chunk all but its
            # own), the next chunk copying in; then the join: every chunk's cache and the joined one
            und_chunk = program_bytes(progs["und chunk"], chunk_of(params[STACK], n), *_strip(
                progs["embed"].out_info), inputs["prefill"][2])
            prefill = max(und_chunk + r_bytes + sharded_bytes(inputs["prefill"]) + buffer
                          + cache * (plan.num_chunks - 1) // plan.num_chunks,
                          2 * cache + r_bytes,
                          program_bytes(progs["embed"], res, inputs["prefill"][:2]))
            phases = {
                "prefill": prefill + always,
                "prologue": program_bytes(progs["prologue"], res, inputs["args"]) + cache + always,
                "chunks": compiled_bytes(progs["gen chunk"]) + r_bytes + args + buffer + always,
                "epilogue": program_bytes(progs["epilogue"], res, *_strip(progs["prologue"].out_info)[::2],
                                          inputs["args"], inputs["finish_args"]) + cache + always,
            }
            if decode is not None:
                phases["vae decode"] = r_bytes + cache + always + decode
            out.append(Estimate(Split(dp, tp, sp, n), peak_bytes=max(phases.values()), phases=phases, comm_bytes=comm,
                                transfer_bytes=plan.padded_layers * layer, launches=plan.num_chunks))
    return out


def measure_resident_peak(model: Cosmos3Model, shape: tuple, dtype="float32", guided: bool = True,
                          attention: str = "chunked") -> dict:
    """The resident gen step on one device, compiled as :func:`estimate_split` compiles it for ``dp = tp = sp = 1``
    (the und cache an argument), run on random weights and inputs; its peak measured by
    :func:`vidax.core.planner.measure_peak` (a resident-set-size delta on the CPU backend: run it in a fresh process
    started with ``MALLOC_MMAP_THRESHOLD_=65536``).

    Returns:
      ``{"estimate": the planner's bytes (:func:`program_bytes`), "measured": peak bytes, "runtime_overhead",
      "device_peak"}``.
    """
    from vidax.core.placement import mesh_context
    from vidax.core.planner import measure_peak

    dtype = jnp.dtype(dtype)
    devices = jax.local_devices()[:1]
    mesh, params, options, prepare, finish = _setup(model, 1, 1, 1, devices, shape, dtype, guided, attention)
    with mesh_context(mesh):
        inputs = program_inputs(model, mesh, shape, guided, dtype)
        _, step = compile_resident(model, mesh, params, inputs, prepare=prepare, finish=finish, attention=attention,
                                   options=options)
        args = (params, inputs["cache"], inputs["args"], inputs["finish_args"])
        r = measure_peak(step, args)
    return {**r, "estimate": program_bytes(step, *args)}


# -- the plan ---------------------------------------------------------------------------------------------------------


def plan_cosmos3(model: Cosmos3Model | Cosmos3TransformerConfig, *, height: int, width: int, num_frames: int,
                 dtype="bfloat16", devices: int, memory_bytes: int | None = None, reserve_bytes: int = 0,
                 guided: bool = True, prompts: int = 1, chunks: Sequence[int] | None = None,
                 splits: Sequence[tuple[int, int, int]] | None = None, attention: str = "auto", overlap: bool = True,
                 model_name: str | None = None, offload_if_needed: bool = False, vae_dtype: Any = "float32",
                 first_device: bool = True, log: Callable[[str], None] | None = None) -> PipelinePlan:
    """Estimate every candidate split's per-device peak for one generation setting, and recommend one.

    Args:
      model: the model (:class:`Cosmos3Model`), or a transformer configuration alone (then ``first_device=False``:
        the transformer's phases only, the Wan2.2 VAE's shapes assumed for the latents).
      height, width, num_frames: the video (pixels, frames); dtype: the transformer's weight dtype.
      devices: devices of the run (the mesh size, ``dp * tp * sp``).
      memory_bytes: per-device budget; None: report without a fit test.
      reserve_bytes: per-device memory kept free for anything not counted.
      guided: classifier-free guidance (``guidance_scale != 1``: 2 x prompts rows in the prefill and every step).
      prompts: prompts per call (the pipeline takes one).
      chunks: offload chunk sizes to try (default :func:`vidax.core.planner.default_chunks`: 18, 9, 4, 2, 1 for Nano's
        36 layers, 14, 7, 2, 1 for Edge's 28); ``()``: none.
      splits: ``(dp, tp, sp)`` candidates (default :func:`vidax.core.planner.candidate_splits`: tp dividing the 8
        key/value heads and the MLP width).
      attention: implementation to compile ("auto": resolved for the compile target's backend).
      overlap: offloading with copy/compute overlap (two chunk buffers) or serial (one).
      model_name: name for the report.
      offload_if_needed: compile the offloaded candidates only if no resident split fits the budget.
      vae_dtype: the VAE's (float32 by default, as the pipeline loads it).
      first_device: count the VAE (weights and decode) on the first device.
      log: progress callback (one line per split).

    Returns:
      :class:`vidax.core.planner.PipelinePlan`.

    Raises:
      ValueError: sizes the model does not take (:func:`vidax.models.cosmos3.family.check_sizes`); fewer devices to
        compile on than ``devices`` (:func:`vidax.core.planner.planning_devices`); no split the model can run.
    """
    from vidax.models.cosmos3.family import check_sizes

    t0 = time.perf_counter()
    check_sizes(height, width, num_frames)
    if isinstance(model, Cosmos3TransformerConfig):
        model, first_device = Cosmos3Model(model), False
    cfg = model.transformer
    devs, target = planning_devices(devices)
    shape = latent_shape(model, height, width, num_frames, prompts)
    batch = prompts * (2 if guided else 1)
    splits = (list(splits) if splits is not None
              else candidate_splits(devices, batch, cfg.num_key_value_heads, cfg.intermediate_size))
    if not splits:
        raise ValueError(f"no (dp, tp, sp) split of {devices} devices runs this model (key/value heads "
                         f"{cfg.num_key_value_heads}, MLP width {cfg.intermediate_size}, batch {batch})")
    chunks = default_chunks(cfg.num_hidden_layers) if chunks is None else list(chunks)
    impl = resolve_implementation(attention, devs[0].platform)
    wdtype = jnp.dtype(dtype)
    extra, notes = None, []
    if first_device:
        vae_w = vae_bytes(model, vae_dtype)
        with jax.default_device(devs[0]):
            decode = vae_decode_bytes(model.vae, shape, vae_dtype)
        extra = {"always": vae_w, "vae decode": decode["peak"] - decode["decoder_weights"]}
        notes = [("VAE", f"Wan2.2 weights {format_bytes(vae_w)} ({np.dtype(vae_dtype)}, every phase); decode "
                  f"{format_bytes(decode['peak'])} one latent frame at a time ({decode['frames']} frames "
                  f"{format_bytes(decode['video'])}, cache {format_bytes(decode['cache'])})")]
    notes.append(("und cache", f"{format_bytes(cache_bytes(cfg, batch, model.prompt_tokens, wdtype))} before the "
                  f"tensor split ({cfg.num_hidden_layers} layers x {batch} prompt rows x {model.prompt_tokens} tokens "
                  f"x {cfg.num_key_value_heads} kv heads x {cfg.head_dim}, keys and values, {wdtype}): written by "
                  "the prefill, read at every step"))
    estimates = plan_candidates(
        splits, lambda dp, tp, sp, **kw: estimate_split(
            model, dp, tp, sp, devs, shape=shape, dtype=dtype, guided=guided, attention=impl, overlap=overlap,
            first_device=extra, **kw),
        chunks=chunks, memory_bytes=memory_bytes, reserve_bytes=reserve_bytes, offload_if_needed=offload_if_needed,
        log=log)
    settings = dict(model=model_name, default_model="Cosmos3 transformer", height=height, width=width,
                    num_frames=num_frames, dtype=str(wdtype), tokens=num_tokens(cfg, shape),
                    text_tokens=model.prompt_tokens, batch=batch, attention=impl.value, devices=devices,
                    first_device_notes=notes,
                    decode_hint="the VAE decode is that peak: it decodes one latent frame at a time and has no "
                                "spatial tiling; plan fewer frames or a smaller size")
    return PipelinePlan(estimates, recommend(estimates), memory_bytes, reserve_bytes, target,
                        time.perf_counter() - t0, settings,
                        scope="(the whole pipeline: the transformer's prefill and step on every device, the und cache "
                              "between them; the VAE's weights and its decode on the first device; --reserve-gb keeps "
                              "room for anything else)")


__all__ = ["ARCHITECTURES", "PRESET_SIZES", "PROMPT_TOKENS", "Cosmos3Model", "cache_bytes", "comm_bytes",
           "compile_offloaded", "compile_resident", "estimate_split", "folder_architecture", "latent_shape",
           "measure_resident_peak", "parameter_counts", "plan_cosmos3", "preset_architecture", "program_bytes",
           "program_inputs", "step_hooks", "transformer_bytes", "vae_bytes"]
