"""Memory planner for Cosmos-Predict2.5: which (dp, tp, sp, offload chunk) fits, and which is fastest.

As the other planners (docs/design.md, "Planner"; the shared parts in :mod:`vidax.core.planner`), the transformer step
is compiled for every candidate split on abstract shapes (no weight read, nothing allocated) exactly as the pipeline
compiles it (:func:`vidax.models.cosmos_predict25.pipeline.step_hooks` around the transformer: the conditioning
latents mixed in, per-frame timesteps, the ``[negative, prompt]`` batch, the guidance and the conditioning frames'
velocity): resident (:func:`vidax.models.cosmos_predict25.block_loop.compile_whole`, the blocks under ``lax.scan``),
or offloaded (:func:`~vidax.models.cosmos_predict25.block_loop.compile_pieces`: prologue, one block program at the
chunk size, epilogue); per-device bytes from ``compiled.memory_analysis()``. With classifier-free guidance
(``guidance_scale > 1``: the release's 7.0) the step runs a batch of 2 x prompts.

The rest of the pipeline is counted on the first device of the mesh (where the text encoder and the VAE run), beside
whatever of the transformer stays there:

``text encoder``
    Qwen2.5-VL-7B's language model (Cosmos-Reason1-7B: 7.07 billion parameters, 28 layers x 3584, in
    ``text_encoder_dtype``, float32 by default as the pipeline loads it: 26.3 GiB), and its program
    (:func:`vidax.models.cosmos_predict25.text._normalized_states`, compiled: the 512 tokens' states and the
    all-layers output ``(B, 512, 28 x 3584 = 100352)``, 205 MB per prompt in float32, written in place); with
    guidance the prompts' output is kept while the negative prompts are encoded. On accelerators the pipeline frees
    the encoder after each use (``text_encoder_residency="auto"``), so it shares device memory with the
    transformer's weights only, not with its step (``text_resident=True``: counted in every phase).
``vae encode`` (image- and video-to-world, ``conditioning_frames`` > 0)
    The Wan2.1 encoder's chunk programs (the first frame, then 4 frames at a time; compiled) over the conditioning
    frames at the video's size.
``vae decode``
    The Wan2.1 decoder run one latent frame at a time (:func:`vidax.core.wan_vae.decode`): its head program, then its
    tail program on two frames at a time, both compiled with the cache of a later frame, while the frames already
    decoded (float32) wait; then the concatenation of all frames (the frames and the video).
VAE weights
    The whole Wan2.1 VAE (the pipeline loads encoder and decoder), ``vae_dtype``, from loading on: every phase; the
    prompt embeddings (float32 ``(2B, 512, 100352)``) from the text encoder on: every later phase.

Not counted: the sampler's state (a few latent-sized float32 arrays, 22 MB each at 1280x704, 93 frames), the host side
(offloaded chunks live in host memory).
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
from vidax.core.params import abstract_params
from vidax.core.planner import (Estimate, PipelinePlan, Split, candidate_splits, chunk_of, compiled_bytes,
                                default_chunks, format_bytes, layer_bytes, plan_candidates,
                                planning_devices, recommend, sharded_bytes, step_compiler_options, weight_bytes,
                                with_shardings)
from vidax.core.sharding import make_mesh
from vidax.core.wan_vae_memory import vae_decode_bytes, vae_encode_bytes, vae_part_specs
from vidax.encoders.llama import LlamaConfig, llama_specs
from vidax.encoders.qwen2_5_vl import config_from_dict
from vidax.models.cosmos_predict25.config import CosmosTransformerConfig
from vidax.models.cosmos_predict25.sharding import COSMOS_PREDICT25_RULES
from vidax.models.cosmos_predict25.text import MAX_SEQUENCE_LENGTH, embed_dim
from vidax.models.cosmos_predict25.transformer import STACK, num_tokens, transformer_specs

#: The released text encoder: nvidia/Cosmos-Reason1-7B's language model (Qwen2.5-VL-7B-Instruct's architecture,
#: its ``config.json``); its 28 layers' states, concatenated, are the transformer's 100352-wide context.
COSMOS_REASON1_7B: LlamaConfig = config_from_dict({
    "model_type": "qwen2_5_vl_text", "vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944,
    "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-6,
    "max_position_embeddings": 128000, "rope_theta": 1000000.0,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}, "Cosmos-Reason1-7B")

#: The pipeline's conditioning-frame timestep as the planner compiles it (any value gives the same program; None
#: would too: the timestep is per frame either way).
_CONDITIONAL_FRAME_TIMESTEP = 1e-4
#: The release's guidance (any value > 1 gives the same program).
_GUIDANCE = 7.0


@dataclass(frozen=True)
class CosmosPredict25Model:
    """What the planner sizes: the transformer, the VAE and the text encoder (configurations only).

    Attributes:
      transformer: the diffusion transformer.
      vae: the Wan2.1 VAE.
      text_encoder: Qwen2.5-VL's language model (Cosmos-Reason1-7B).
      folder, variant: the checkpoint folder and the release's variant it was read from (None: a preset's model).
    """

    transformer: CosmosTransformerConfig
    vae: wan_vae.WanVAEConfig = field(default_factory=wan_vae.WanVAEConfig)
    text_encoder: LlamaConfig = COSMOS_REASON1_7B
    folder: str | None = None
    variant: str | None = None

    @property
    def text_tokens(self) -> int:
        """Context tokens every cross-attention reads: the prompt padded to 512."""
        return MAX_SEQUENCE_LENGTH

    @property
    def text_width(self) -> int:
        """Features per context token from the text encoder: layers x hidden size (100352 for the release)."""
        return embed_dim(self.text_encoder)


#: The released architectures (``CosmosTransformerConfig.from_original``) with the release's VAE and text encoder.
ARCHITECTURES: dict[str, CosmosPredict25Model] = {
    size: CosmosPredict25Model(CosmosTransformerConfig.from_original(size)) for size in ("2B", "14B")
}
#: The release each preset runs (:data:`vidax.models.cosmos_predict25.presets.PRESETS`).
PRESET_SIZES = {"cosmos-predict2.5-2b-t2v": "2B", "cosmos-predict2.5-14b-t2v": "14B"}


def preset_architecture(preset: Any) -> CosmosPredict25Model:
    """The released model of a preset (``cosmos-predict2.5-2b-t2v``: the 2B; ``-14b-t2v``: the 14B).

    Raises:
      ValueError: a preset the planner does not know (the known ones named).
    """
    name = getattr(preset, "name", preset)
    if name not in PRESET_SIZES:
        raise ValueError(f"the planner knows the presets {', '.join(PRESET_SIZES)}; got {name!r} (pass --checkpoint)")
    return ARCHITECTURES[PRESET_SIZES[name]]


def folder_architecture(folder: str | Path, variant: str | None = None) -> CosmosPredict25Model:
    """The model of a checkpoint folder, any layout, from its configuration files (an original release: the
    transformer's ``.pt`` header and the VAE's, for their shapes); no weight is read.

    Raises:
      CheckpointError: a folder the family does not read (:func:`vidax.models.cosmos_predict25.layout.
        resolve_checkpoint`), or a configuration it does not take.
    """
    from vidax.core.config_values import read_json
    from vidax.models.cosmos_predict25.layout import resolve_checkpoint
    from vidax.models.cosmos_predict25.loading import transformer_config, vae_config

    ckpt = resolve_checkpoint(Path(folder), variant=variant)
    path = ckpt.text_encoder / "config.json"
    text = config_from_dict(read_json(path), str(path))
    return CosmosPredict25Model(transformer_config(ckpt), vae_config(ckpt), text, folder=str(ckpt.folder),
                                variant=ckpt.variant)


# -- weights ---------------------------------------------------------------------------------------------------------


def parameter_counts(cfg: CosmosTransformerConfig) -> dict[str, int]:
    """Parameters of a transformer by kind.

    Returns:
      ``{"total", "fp32" (float32-pinned leaves), "adaln" (the blocks' AdaLN-LoRA projections, all float32),
      "blocks" (the stack), "resident" (outside the stack: what stays on the device when offloading)}``. The 2B
      release: 2.06 billion (0.19 billion of them float32, 0.18 billion the AdaLN-LoRA); the 14B: 14.37 billion
      (0.68 billion float32, 0.57 billion AdaLN-LoRA); diffusers' ``CosmosTransformer3DModel`` counts the same.
    """
    from vidax.core.params import flatten

    out = dict.fromkeys(("total", "fp32", "adaln", "blocks", "resident"), 0)
    for path, spec in flatten(transformer_specs(cfg)):
        n = math.prod(spec.shape)
        parts = path.split("/")
        out["total"] += n
        out["fp32"] += n if spec.fp32 else 0
        out["adaln"] += n if parts[0] == STACK and parts[1] in ("norm1", "norm2", "norm3") else 0
        out["blocks" if parts[0] == STACK else "resident"] += n
    return out


def transformer_bytes(cfg: CosmosTransformerConfig, dtype: Any = "bfloat16") -> int:
    """Bytes of a transformer's weights in ``dtype``, its float32-pinned leaves at 4 bytes (all of them, on one
    device)."""
    return weight_bytes(transformer_specs(cfg), dtype)


def text_encoder_bytes(model: CosmosPredict25Model, dtype: Any = "float32") -> int:
    """Weight bytes of the text encoder as the pipeline loads it: Qwen2.5-VL's language model (its embedding table,
    layers and final norm; not the vision tower nor the LM head), norm scales float32. The release: 7.07 billion
    parameters, 28.3 GB (26.3 GiB) in float32."""
    return weight_bytes(llama_specs(model.text_encoder), dtype)


def vae_bytes(model: CosmosPredict25Model, dtype: Any = "float32", parts: Sequence[str] | None = None) -> int:
    """Weight bytes of the VAE (``parts``: top-level parts of :func:`vidax.core.wan_vae.vae_specs`; default the
    whole VAE, as the pipeline loads it)."""
    return weight_bytes(_vae_specs(model.vae, parts), dtype)


def _vae_specs(vae: wan_vae.WanVAEConfig, parts: Sequence[str] | None = None):
    return vae_part_specs(vae, parts)


# -- the text encoder -----------------------------------------------------------------------------------------------


def text_encoder_program_bytes(model: CosmosPredict25Model, batch: int, dtype: Any = "float32",
                               attention: str = "xla", options: dict | None = None) -> dict:
    """Device bytes of one prompt encoding (:func:`vidax.models.cosmos_predict25.text.prompt_embeds` for ``batch``
    prompts), compiled on abstract weights: the token embeddings ``(B, 512, hidden)`` in, every layer's normalised
    state out ``(B, 512, layers x hidden)`` in the weights' dtype (the pipeline's), plus the layer loop's
    temporaries. The weights are not included (the program's arguments hold only the layers it reads).

    Returns:
      ``{"program": input + output + temporaries bytes, "output": the embeddings' bytes, "input": bytes}``.
    """
    from vidax.models.cosmos_predict25.text import _normalized_states

    cfg = model.text_encoder
    wdtype = jnp.dtype(dtype)
    params = abstract_params(llama_specs(cfg), wdtype)
    x = jax.ShapeDtypeStruct((batch, MAX_SEQUENCE_LENGTH, cfg.hidden_size), jnp.float32)
    compiled = _normalized_states.lower(params, x, cfg=cfg, attention_impl=AttentionImpl(attention).value,
                                        out_dtype=wdtype.name).compile(options)
    m = compiled.memory_analysis()
    x_bytes = batch * MAX_SEQUENCE_LENGTH * cfg.hidden_size * 4
    out = m.output_size_in_bytes
    return {"program": int(x_bytes + out + m.temp_size_in_bytes - m.alias_size_in_bytes), "output": int(out),
            "input": x_bytes}


# -- the VAE ---------------------------------------------------------------------------------------------------------


def latent_shape(model: CosmosPredict25Model, height: int, width: int, num_frames: int,
                 prompts: int = 1) -> tuple[int, int, int, int, int]:
    """The noise latents ``(B, 16, (F - 1) / 4 + 1, H / 8, W / 8)`` of ``num_frames`` frames of ``height x width``."""
    s, r = model.vae.spatial_compression, model.vae.temporal_compression
    return (prompts, model.vae.z_dim, (num_frames - 1) // r + 1, height // s, width // s)


# -- the step ---------------------------------------------------------------------------------------------------------


def comm_bytes(cfg: CosmosTransformerConfig, batch: int, tokens: int, frames: int, dtype, dp: int, tp: int,
               sp: int) -> int:
    """Bytes one device sends per step in the block stack (the cost model's communication term).

    Per block, over the video tokens (padded to a multiple of sp and split over it): tensor parallelism all-reduces
    three float32 ``(B/dp, S/sp, dim)`` partial sums (the row-parallel outputs of the self-attention, the
    cross-attention and the feed-forward; a ring sends ``2 (tp-1)/tp`` of the buffer) and gathers the three AdaLN-LoRA
    vectors ``(B/dp, frames, 3 dim)`` (a zero-filled all-reduce); Ulysses sends ``(sp-1)/sp`` of the self-attention's
    q, k, v and output ``(B/dp, S/sp, dim/tp)`` in the weight dtype (the key/value all-gather mode: ``sp - 1`` times k
    and v); the cross-attention's queries stay split (its 512 text tokens are replicated: nothing sent); dp sends
    nothing.
    """
    from vidax.core.parallel import padded_length, sequence_mode

    b = batch // dp
    rows = padded_length(tokens, sp) // sp
    dim = cfg.dim
    reduce = 0.0
    if tp > 1:
        ring = 2 * (tp - 1) / tp
        reduce = ring * 3 * (b * rows * dim * 4 + b * frames * 3 * dim * 4)
    seq = 0.0
    if sp > 1:
        part = b * rows * (dim // tp) * np.dtype(dtype).itemsize
        seq = (4 * (sp - 1) / sp if sequence_mode(cfg.num_attention_heads // tp, sp) == "ulysses"
               else 2 * (sp - 1)) * part
    return int(cfg.num_layers * (reduce + seq))


def step_inputs(model: CosmosPredict25Model, mesh, shape: tuple[int, ...], guided: bool) -> tuple[tuple, tuple]:
    """The pipeline step's arguments as it places them (:meth:`~vidax.models.cosmos_predict25.pipeline.
    CosmosPredict25Pipeline.compile_step`), abstract: ``((x, sigma, prompt_embeds, cond_latents, indicator),
    (gt_velocity, indicator))``; the float32 text embeddings hold 2B rows with guidance, split over ``data`` where dp
    divides them; the rest replicated."""
    b, c, t = shape[:3]
    tb = 2 * b if guided else b
    rep = NamedSharding(mesh, PartitionSpec())
    dp = mesh.shape["data"]
    text = NamedSharding(mesh, COSMOS_PREDICT25_RULES.spec(("batch", None, None)) if dp > 1 and tb % dp == 0
                         else PartitionSpec())
    f32 = jnp.float32
    latents = jax.ShapeDtypeStruct(shape, f32, sharding=rep)
    indicator = jax.ShapeDtypeStruct((b, 1, t, 1, 1), f32, sharding=rep)
    args = (latents, jax.ShapeDtypeStruct((b,), f32, sharding=rep),
            jax.ShapeDtypeStruct((tb, model.text_tokens, model.transformer.context_in_channels), f32, sharding=text),
            latents, indicator)
    return args, (latents, indicator)


def _compile_args(model, dp, tp, sp, devices, shape, dtype, guided, attention):
    from vidax.models.cosmos_predict25.pipeline import step_hooks

    cfg = model.transformer
    mesh = make_mesh(dp, tp, sp, devices=list(devices))
    specs = transformer_specs(cfg)
    params = with_shardings(abstract_params(specs, dtype), COSMOS_PREDICT25_RULES.param_shardings(specs, mesh))
    args, finish_args = step_inputs(model, mesh, shape, guided)
    prepare, finish = step_hooks(dtype, _GUIDANCE if guided else None, _CONDITIONAL_FRAME_TIMESTEP)
    common = dict(cfg=cfg, attention=AttentionImpl(attention), prepare=prepare, finish=finish, mesh=mesh,
                  rules=COSMOS_PREDICT25_RULES,
                  compiler_options=step_compiler_options(mesh.devices.flat[0].platform, dtype))
    return mesh, params, args, finish_args, common


def estimate_split(model: CosmosPredict25Model, dp: int, tp: int, sp: int, devices: Sequence, *, shape: tuple, dtype,
                   guided: bool = True, chunks: Sequence[int] = (), resident: bool = True,
                   attention: str = "chunked", overlap: bool = True,
                   first_device: dict | None = None) -> list[Estimate]:
    """Compile one mesh split (resident and/or at each offload chunk size) and estimate its per-device memory.

    Args:
      model: the model; dp, tp, sp: the split; devices: ``dp * tp * sp`` devices to compile on.
      shape: the noise latents ``(B, 16, T, H, W)``; dtype: transformer weight dtype.
      guided: classifier-free guidance (the transformer batch is 2B).
      chunks: offload chunk sizes; resident: also estimate the resident step.
      attention: attention implementation compiled; overlap: count the second chunk buffer.
      first_device: the rest of the pipeline on the first device (:func:`plan_cosmos_predict25`): ``{"always": bytes
        in every phase, "step": bytes beside the step, phase: bytes}`` for its phases (``"text encoder"``, ``"vae
        encode"``, ``"vae decode"``); the transformer's weights on that device are added to each here.

    Returns:
      one :class:`~vidax.core.planner.Estimate` per configuration (resident first); phases ``"step"`` or
      ``"prologue"``, ``"chunks"``, ``"epilogue"``, plus the first device's.
    """
    from vidax.core.placement import mesh_context
    from vidax.models.cosmos_predict25.block_loop import compile_pieces, compile_whole

    cfg = model.transformer
    dtype = jnp.dtype(dtype)
    mesh, params, args, finish_args, common = _compile_args(model, dp, tp, sp, devices, shape, dtype, guided,
                                                            attention)
    batch = shape[0] * (2 if guided else 1)
    comm = comm_bytes(cfg, batch, num_tokens(cfg, shape), shape[2], dtype, dp, tp, sp)
    extra = dict(first_device or {})
    always = extra.pop("always", 0)
    beside_step = always + extra.pop("step", 0)

    def rest(weights: int) -> dict:
        """The first device's phases outside the step, beside ``weights`` bytes of the transformer."""
        return {k: weights + always + v for k, v in extra.items()}

    out = []
    with mesh_context(mesh):
        if resident:
            c = compile_whole(params, args, finish_args, **common)  # as measure_resident_peak compiles it
            phases = {"step": compiled_bytes(c) + beside_step, **rest(sharded_bytes(params))}
            out.append(Estimate(Split(dp, tp, sp), peak_bytes=max(phases.values()), phases=phases, comm_bytes=comm))
        res = {k: v for k, v in params.items() if k != STACK}
        r_bytes, in_bytes = sharded_bytes(res), sharded_bytes((args, finish_args))
        layer = layer_bytes(params[STACK])  # one block, per device
        for n in chunks:
            plan = ChunkPlan(cfg.num_layers, n)
            pro_c, program, epi_c = compile_pieces(res, chunk_of(params[STACK], n), args, finish_args,
                                                   padded_layers=plan.padded_layers - plan.num_layers, **common)
            phases = {
                "prologue": compiled_bytes(pro_c) + sharded_bytes(finish_args) + beside_step,
                "chunks": compiled_bytes(program) + r_bytes + in_bytes + (n * layer if overlap else 0) + beside_step,
                "epilogue": compiled_bytes(epi_c) + in_bytes + beside_step,
                **rest(r_bytes),
            }
            out.append(Estimate(Split(dp, tp, sp, n), peak_bytes=max(phases.values()), phases=phases, comm_bytes=comm,
                                transfer_bytes=plan.padded_layers * layer, launches=plan.num_chunks))
    return out


def measure_resident_peak(model: CosmosPredict25Model, shape: tuple, dtype="float32", guided: bool = True,
                          attention: str = "chunked") -> dict:
    """The resident step on one device, compiled as :func:`estimate_split` compiles it for ``dp = tp = sp = 1``, run
    on random weights and inputs; its peak measured by :func:`vidax.core.planner.measure_peak` (a resident-set-size
    delta on the CPU backend: run it in a fresh process started with ``MALLOC_MMAP_THRESHOLD_=65536``).

    Returns:
      ``{"estimate": compiled bytes, "measured": peak bytes, "runtime_overhead", "device_peak"}``.
    """
    from vidax.core.placement import mesh_context
    from vidax.core.planner import measure_peak
    from vidax.models.cosmos_predict25.block_loop import compile_whole

    dtype = jnp.dtype(dtype)
    mesh, params, args, finish_args, common = _compile_args(model, 1, 1, 1, jax.local_devices()[:1], shape, dtype,
                                                            guided, attention)
    with mesh_context(mesh):
        compiled = compile_whole(params, args, finish_args, **common)
        return measure_peak(compiled, (params, args, finish_args))


# -- the plan ---------------------------------------------------------------------------------------------------------


def plan_cosmos_predict25(model: CosmosPredict25Model | CosmosTransformerConfig, *, height: int, width: int,
                          num_frames: int, dtype="bfloat16", devices: int, memory_bytes: int | None = None,
                          reserve_bytes: int = 0, guided: bool = True, prompts: int = 1,
                          chunks: Sequence[int] | None = None, splits: Sequence[tuple[int, int, int]] | None = None,
                          attention: str = "auto", overlap: bool = True, model_name: str | None = None,
                          offload_if_needed: bool = False, text_encoder_dtype: Any = "float32",
                          vae_dtype: Any = "float32", conditioning_frames: int = 0, text_resident: bool = False,
                          first_device: bool = True, log: Callable[[str], None] | None = None) -> PipelinePlan:
    """Estimate every candidate split's per-device peak for one generation setting, and recommend one.

    Args:
      model: the model (:class:`CosmosPredict25Model`), or a transformer configuration alone (then
        ``first_device=False``: the step only).
      height, width, num_frames: the video (pixels, frames); dtype: transformer weight dtype.
      devices: devices of the run (the mesh size, ``dp * tp * sp``).
      memory_bytes: per-device budget; None: report without a fit test.
      reserve_bytes: per-device memory kept free for anything not counted.
      guided: classifier-free guidance (``guidance_scale > 1``: a batch of 2 x prompts).
      prompts: prompts per call.
      chunks: offload chunk sizes to try (default :func:`vidax.core.planner.default_chunks`: 14, 7, 2, 1 for the 2B's
        28 blocks, 18, 9, 4, 2, 1 for the 14B's 36); ``()``: none.
      splits: ``(dp, tp, sp)`` candidates (default :func:`vidax.core.planner.candidate_splits`).
      attention: implementation to compile ("auto": resolved for the compile target's backend).
      overlap: offloading with copy/compute overlap (two chunk buffers) or serial (one).
      model_name: name for the report.
      offload_if_needed: compile the offloaded candidates only if no resident split fits the budget.
      text_encoder_dtype, vae_dtype: the pipeline's (float32 by default).
      conditioning_frames: pixel frames the VAE encodes for image- (1) or video-to-world (5 for 2 latent frames);
        0: text-to-world.
      text_resident: the text encoder stays loaded (``text_encoder_residency="resident"``; the CPU default): counted
        in every phase, not only in its own.
      first_device: count the text encoder and the VAE on the first device (the module docstring).
      log: progress callback (one line per split).

    Returns:
      :class:`vidax.core.planner.PipelinePlan`.

    Raises:
      ValueError: sizes the model does not take; fewer devices to compile on than ``devices``
        (:func:`vidax.core.planner.planning_devices`); no split of ``devices`` the model can run.
    """
    from vidax.models.cosmos_predict25.family import check_sizes

    t0 = time.perf_counter()
    check_sizes(height, width, num_frames)
    if isinstance(model, CosmosTransformerConfig):
        model, first_device = CosmosPredict25Model(model), False
    cfg = model.transformer
    devs, target = planning_devices(devices)
    shape = latent_shape(model, height, width, num_frames, prompts)
    num_tokens(cfg, shape)  # a grid beyond the position table: refused before anything compiles
    batch = prompts * (2 if guided else 1)
    splits = (list(splits) if splits is not None
              else candidate_splits(devices, batch, cfg.num_attention_heads, cfg.mlp_dim))
    if not splits:
        raise ValueError(f"no (dp, tp, sp) split of {devices} devices runs this model (heads "
                         f"{cfg.num_attention_heads}, MLP width {cfg.mlp_dim}, batch {batch})")
    chunks = default_chunks(cfg.num_layers) if chunks is None else list(chunks)
    impl = resolve_implementation(attention, devs[0].platform)
    extra, notes = None, []
    if first_device:
        text_w = text_encoder_bytes(model, text_encoder_dtype)
        vae_w = vae_bytes(model, vae_dtype)
        # (the layer loop over bfloat16 weights: XLA:CPU would hoist their float32 copies, step_compiler_options)
        options = step_compiler_options(devs[0].platform, text_encoder_dtype)
        with jax.default_device(devs[0]):
            text = text_encoder_program_bytes(model, prompts, text_encoder_dtype, options=options)
            decode = vae_decode_bytes(model.vae, shape, vae_dtype)
            encode = (vae_encode_bytes(model.vae, conditioning_frames, height, width, vae_dtype, prompts)
                      if conditioning_frames else None)
        # The prompt embeddings (float32, both halves) from the text encoder on; a mesh step reads its own placed
        # copy of them, the first device keeps the pipeline's.
        embeds = batch * model.text_tokens * model.text_width * 4
        kept = text_w if text_resident else 0
        extra = {"always": vae_w + kept,
                 "step": embeds if devices > 1 else 0,
                 # the negative prompts encoded while the prompts' embeddings wait
                 "text encoder": (0 if text_resident else text_w) + text["program"]
                                 + (text["output"] if guided else 0),
                 "vae decode": embeds + decode["peak"] - decode["decoder_weights"]}
        if encode is not None:
            extra["vae encode"] = embeds + encode["program"] - encode["encoder_weights"]
        notes = [("text encoder", f"Qwen2.5-VL {format_bytes(text_w)} ({np.dtype(text_encoder_dtype)}), its program "
                  f"{format_bytes(text['program'])} (all-layers output {format_bytes(text['output'])} per call), "
                  + ("kept loaded (every phase)" if text_resident else "freed after use (its own phase)")),
                 ("VAE", f"Wan2.1 weights {format_bytes(vae_w)} ({np.dtype(vae_dtype)}, every phase); decode "
                  f"{format_bytes(decode['peak'])} one latent frame at a time ({decode['frames']} frames "
                  f"{format_bytes(decode['video'])}, cache {format_bytes(decode['cache'])})"
                  + (f"; encode of {conditioning_frames} frame(s) {format_bytes(encode['program'])}"
                     if encode is not None else "")),
                 ("prompt embeddings", f"{format_bytes(embeds)} (float32, {batch} x {model.text_tokens} x "
                  f"{model.text_width}) after the text encoder")]
    estimates = plan_candidates(
        splits, lambda dp, tp, sp, **kw: estimate_split(
            model, dp, tp, sp, devs, shape=shape, dtype=dtype, guided=guided, attention=impl, overlap=overlap,
            first_device=extra, **kw),
        chunks=chunks, memory_bytes=memory_bytes, reserve_bytes=reserve_bytes, offload_if_needed=offload_if_needed,
        log=log)
    settings = dict(model=model_name, default_model="Cosmos-Predict2.5 transformer", height=height, width=width,
                    num_frames=num_frames, dtype=str(jnp.dtype(dtype)), tokens=num_tokens(cfg, shape),
                    text_tokens=model.text_tokens, batch=batch, attention=impl.value, devices=devices,
                    task="t2v" if not conditioning_frames else "i2v" if conditioning_frames == 1 else "v2v",
                    first_device_notes=notes,
                    decode_hint="the VAE decode is that peak: it decodes one latent frame at a time and has no "
                                "spatial tiling; plan fewer frames or a smaller size")
    return PipelinePlan(estimates, recommend(estimates), memory_bytes, reserve_bytes, target,
                        time.perf_counter() - t0, settings)


__all__ = ["ARCHITECTURES", "COSMOS_REASON1_7B", "PRESET_SIZES", "CosmosPredict25Model", "comm_bytes",
           "estimate_split", "folder_architecture", "latent_shape", "measure_resident_peak", "parameter_counts",
           "plan_cosmos_predict25", "preset_architecture", "step_inputs", "text_encoder_bytes",
           "text_encoder_program_bytes", "transformer_bytes", "vae_bytes", "vae_decode_bytes", "vae_encode_bytes"]
