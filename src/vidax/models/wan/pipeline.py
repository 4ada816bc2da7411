"""Wan2.1 text-to-video: prompt in, uint8 frames out.

Follows diffusers ``pipelines/wan/pipeline_wan.py`` (``WanPipeline``): prompts
cleaned and tokenized to 512 tokens, UMT5 states cut at each prompt's length
and zero-filled, seeded Gaussian latents ``(B, 16, 1 + (F-1)/4, H/8, W/8)``,
classifier-free guidance ``uncond + g * (cond - uncond)``, the scheduler's step,
latents de-normalised with the VAE's mean/std, VAE decode, frames mapped from
``[-1, 1]`` to ``[0, 255]``.

Checkpoints load from either published layout (diffusers, or the original Wan2.1 release);
:mod:`vidax.models.wan.layout` detects which and names the files and key maps.

The sampling loop is a host Python loop around one compiled transformer step
(both CFG halves in one batch); shapes are static, so it compiles once per run.

With ``dp * tp * sp > 1`` the transformer runs on a ``(data, tensor, sequence)`` mesh
(:mod:`vidax.core.sharding`): its parameters are loaded already sharded by
:data:`vidax.models.wan.sharding.WAN_RULES`, the CFG halves are split over ``data``, heads over
``tensor`` and tokens over ``sequence``. The text encoder and VAE stay on the first device.

With ``offload_chunk=N`` the transformer's blocks are loaded straight into host memory as
chunks of N blocks (:mod:`vidax.core.offload`) and streamed into device memory during each
step, the copy of the next chunk overlapping the current chunk's compute
(:mod:`vidax.models.wan.offload`).

On several hosts (after ``jax.distributed.initialize()``) every process runs this same program:
each reads from the checkpoint only the shards its own devices hold
(:func:`vidax.checkpoint.loader.load_params` with ``make_array_from_callback``), the text encoder
and the VAE run on each process's first local device, and only process 0 shows progress.
"""

from __future__ import annotations

import os
from functools import partial
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.loader import load_params
from vidax.checkpoint.reader import CountingReader
from vidax.core.attention import AttentionImpl, ran_label, recording
from vidax.core.compile_cache import enable_for_api
from vidax.core.host_memory import trim_after_compiles
from vidax.core.inputs import check_dtype, check_guidance, check_seed, integer_problems, is_integer, prompt_batch
from vidax.core.offload import ChunkPlan, OffloadedStack, block_placement, block_plan, split_blocks
from vidax.core.placement import first_device, mesh_context, parallel_metrics, replicated
from vidax.core.progress import Progress, as_progress
from vidax.core.residency import OnDemand, keep_resident
from vidax.core.sharding import axis_size, optional_mesh
from vidax.encoders.t5 import encode_prompts, t5_specs
from vidax.encoders.tokenizer import Tokenizer, clean_prompt
from vidax.core import wan_vae
from vidax.models.wan.layout import DIFFUSERS_PARTS, ORIGINAL_T2V_FLOW_SHIFT, resolve_checkpoint
from vidax.models.wan.sharding import WAN_RULES, check_parallel
from vidax.models.wan import offload as wan_offload
from vidax.models.wan.transformer import (forward, forward_epilogue, forward_prologue, num_tokens, rope_tables,
                                          transformer_specs)
from vidax.schedulers import scheduler_from_config
from vidax.video import VideoOutput, finish_metrics, frames_from_video

# The parts a diffusers-layout Wan checkpoint folder must have.
PARTS = DIFFUSERS_PARTS
VAE_SCALE_TEMPORAL = 4
VAE_SCALE_SPATIAL = 8
MAX_SEQUENCE_LENGTH = 512


def check_inputs(height: int, width: int, num_frames: int, spatial_multiple: int = 16) -> None:
    """Reject sizes the model cannot run, naming the nearest valid values. Runs before any compute.

    Raises:
      ValueError: a size that is not an integer, ``num_frames`` not of the form ``4k + 1``, or
        ``height``/``width`` not a positive multiple of ``spatial_multiple`` (VAE factor 8 times patch size 2).
    """
    problems = integer_problems(num_frames=num_frames, height=height, width=width)
    if is_integer(num_frames) and (num_frames < 1 or (num_frames - 1) % VAE_SCALE_TEMPORAL):
        lo = max(1, (int(num_frames) - 1) // VAE_SCALE_TEMPORAL * VAE_SCALE_TEMPORAL + 1)
        hi = lo + VAE_SCALE_TEMPORAL
        problems.append(f"num_frames={num_frames} must be of the form 4k+1 (the VAE compresses time 4x): use {lo} or {hi}")
    for name, v in (("height", height), ("width", width)):
        if is_integer(v) and (v < spatial_multiple or v % spatial_multiple):
            lo = int(v) // spatial_multiple * spatial_multiple
            choice = f"{lo} or {lo + spatial_multiple}" if lo >= spatial_multiple else f"{spatial_multiple}"
            problems.append(f"{name}={v} must be a positive multiple of {spatial_multiple}: use {choice}")
    if problems:
        raise ValueError("; ".join(problems))


def check_checkpoint_dir(folder: str | os.PathLike) -> Path:
    """Check that ``folder`` is a Wan2.1 checkpoint in either layout, naming any missing part.

    Layouts (see :mod:`vidax.models.wan.layout`): diffusers (``model_index.json``,
    ``transformer/``, ``vae/``, ``text_encoder/``, ``tokenizer/``, ``scheduler/``) or the
    original Wan2.1 release (``config.json``, ``diffusion_pytorch_model*.safetensors``,
    ``Wan2.1_VAE.pth``, ``models_t5_umt5-xxl-enc-bf16.pth``, ``google/umt5-xxl/``).

    Returns:
      ``folder`` as a Path.

    Raises:
      CheckpointError: the folder is missing, matches neither layout (the message says what
        each needs), or lacks parts of its layout (all named).
    """
    return resolve_checkpoint(folder).folder


#: The Wan pipelines' result: :class:`vidax.video.VideoOutput` (frames ``(B, F, H, W, 3)``, fps, metrics, latents
#: ``(B, z, T, H/f, W/f)``); the old name kept.
WanOutput = VideoOutput


class WanPipeline:
    """Wan2.1 text-to-video, loaded once from a diffusers-layout or original-release folder.

    Example::

        pipe = WanPipeline.from_pretrained("Wan2.1-T2V-1.3B-Diffusers", dtype="bfloat16")
        out = pipe("a red panda in the snow", height=480, width=832, num_frames=81)
        frames = out.frames[0]  # uint8 (81, 480, 832, 3)
    """

    def __init__(self, folder: Path, transformer_cfg, transformer_params, vae_cfg, vae_params,
                 text_cfg, text_params, tokenizer, scheduler_config, attention: str = "xla", layout: str = "diffusers",
                 mesh=None, rules=WAN_RULES, offload: OffloadedStack | None = None, offload_overlap: bool = True):
        self.folder = folder
        self.layout = layout  # "diffusers" or "original" (vidax.models.wan.layout)
        self.transformer_cfg = transformer_cfg
        self.transformer_params = transformer_params
        self.vae_cfg = vae_cfg
        self.vae_params = vae_params
        # The VAE's encoder side: from_pretrained loads only the decoder side into vae_params, and this on
        # first use (image-to-video's first image); text-to-video never reads it.
        encoder = {k: vae_params[k] for k in wan_vae.ENCODER_PARTS if k in vae_params} or None
        self.vae_encoder = OnDemand(lambda: encoder, encoder)
        self.text_cfg = text_cfg
        # The UMT5 weights (float32: paper fault 2); from_pretrained may make them freed after each encoding.
        self.text_encoder = OnDemand(lambda: text_params, text_params)
        self.tokenizer = tokenizer
        self.scheduler_config = scheduler_config
        # make_scheduler's schedule=None: the layout's own reference grid (from_pretrained: the checkpoint's).
        self.schedule_default = "original" if layout == "original" else "diffusers"
        self.attention = AttentionImpl(attention)
        self.mesh = mesh  # None: one device
        self.rules = rules
        # One jitted step per pipeline, so its compilation count is observable (tests) and per run.
        self._step = jax.jit(_cfg_step, static_argnames=("cfg", "attention_impl", "guided", "mesh", "rules"))
        self.load_seconds = 0.0
        self.progress: bool | Progress = True  # the calls' default (from_pretrained's progress)
        # Chunked blocks (offloading, or the host block loop): transformer_params then holds only the
        # parameters outside the blocks, and offload the blocks (vidax.core.offload.OffloadedStack).
        self.offload = offload
        self.offload_overlap = offload_overlap
        self.load_stats: dict[str, Any] = {}
        self._attention_ran: str | None = None  # what the step's attention ran last time it was traced

    @property
    def text_params(self) -> dict:
        """The UMT5 encoder's parameters (loaded again from the checkpoint if they were freed)."""
        return self.text_encoder.get()

    @classmethod
    def from_pretrained(
        cls,
        folder: str | os.PathLike,
        *,
        dtype: Any = "bfloat16",
        text_encoder_dtype: Any = "float32",
        vae_dtype: Any = "float32",
        attention: str = "auto",
        dp: int = 1,
        tp: int = 1,
        sp: int = 1,
        devices: list | None = None,
        offload_chunk: int | None = None,
        offload_overlap: bool = True,
        text_encoder_residency: str = "auto",
        block_loop: str = "auto",
        progress: bool | Progress = True,
        compile_cache: bool | str | os.PathLike = True,
    ) -> WanPipeline:
        """Load a Wan2.1 T2V folder in either layout, detected by :func:`vidax.models.wan.layout.resolve_checkpoint`.

        Args:
          folder: diffusers layout: ``model_index.json``, ``transformer/``, ``vae/``,
            ``text_encoder/``, ``tokenizer/``, ``scheduler/`` (as ``WanPipeline.save_pretrained``
            writes them). Original Wan2.1 release: ``config.json`` +
            ``diffusion_pytorch_model*.safetensors``, ``Wan2.1_VAE.pth``,
            ``models_t5_umt5-xxl-enc-bf16.pth``, ``google/umt5-xxl/``; it has no scheduler config,
            so sampling uses the Wan repository's UniPC settings (:data:`WAN_UNIPC`) with flow shift
            5.0 (``generate.py``'s t2v default) unless ``flow_shift`` is passed to the call.
          dtype: transformer weight dtype ("bfloat16" or "float32"); norms, embedders and
            AdaLN tables stay float32 regardless.
          text_encoder_dtype: UMT5 dtype, float32 by default (paper Table 4 fault 2).
          vae_dtype: VAE dtype.
          attention: attention implementation: "auto" (cuDNN on GPU, splash on TPU, vidax's
            fused cpu_flash kernel on CPU), "xla", "chunked", "cudnn", "splash" or "cpu_flash"
            (:mod:`vidax.core.attention`).
          dp, tp, sp: data, tensor and sequence parallel sizes of the transformer's mesh
            (:func:`vidax.core.sharding.make_mesh`); all 1: one device, no mesh.
          devices: the mesh's devices (default all; their count must be ``dp * tp * sp``).
          offload_chunk: None: the transformer's blocks are resident in device memory. N: they
            are loaded straight into host memory (``pinned_host`` where the backend has it) as
            chunks of N blocks, with the resident shardings, and streamed to the devices chunk by
            chunk in every step (:mod:`vidax.core.offload`); N need not divide the layer count
            (the last chunk is zero-padded).
          offload_overlap: with offloading, copy chunk ``i + 1`` while chunk ``i`` computes (True)
            or serially (False, the paper's mode).
          text_encoder_residency: ``"free"``: the float32 UMT5 weights are freed after each encoding and
            loaded again (memory-mapped, already checked) when another prompt comes (paper fault 2);
            ``"resident"``: kept; ``"auto"``: freed on accelerators, kept on the CPU backend
            (:func:`vidax.core.residency.keep_resident`).
          block_loop: how a step runs the resident blocks: ``"scan"``, one program with the blocks under
            ``lax.scan`` over the stacked weights; ``"host"``, one compiled block program called once per
            block from the host, over per-block weights in device memory; ``"auto"``: ``"host"`` on the CPU
            backend (XLA:CPU copies each block's weights out of the stacked array inside ``scan``: the
            1.3B-width step at 128 tokens 0.36 -> 0.30 s, docs/design.md "Block loop"), ``"scan"`` elsewhere.
            Both compile the block once and compute the same values. With ``offload_chunk`` the blocks
            stream from host memory instead, and this is not used.
          progress: show the loading stage (:class:`vidax.core.progress.Progress`; False: nothing).
          compile_cache: JAX's persistent compilation cache (:mod:`vidax.core.compile_cache`): True, its default
            directory (unless ``VIDAX_COMPILE_CACHE=off``); a path; False: off.

        Raises:
          CheckpointError: a missing part (named), a corrupt file, a text encoder whose width is
            not the transformer's ``text_dim``, or weights that do not match their configuration
            (all mismatches listed at once).
          ValueError: a dtype other than bfloat16 / float32; an unsupported configuration; a mesh that
            does not cover the devices, a tp that does not divide the head count (valid sizes
            listed), an offload chunk outside ``[1, num_layers]``, or an unknown ``block_loop``, raised
            before any weight is read.

        Checkpoints this class does not run (image-conditioned, two experts, the Wan2.2 VAE) load as
        :class:`vidax.models.wan.pipeline_i2v.WanImageToVideoPipeline`, a subclass with the same call.
        """
        dtype, text_encoder_dtype = check_dtype(dtype), check_dtype(text_encoder_dtype, "text_encoder_dtype")
        vae_dtype = check_dtype(vae_dtype, "vae_dtype")
        if cls is WanPipeline:
            from vidax.models.wan.pipeline_i2v import WanImageToVideoPipeline, needs_general_pipeline

            if needs_general_pipeline(folder):
                options = {k: v for k, v in locals().items() if k not in ("cls", "folder", "WanImageToVideoPipeline",
                                                                          "needs_general_pipeline")}
                return WanImageToVideoPipeline.from_pretrained(folder, **options)
        t0 = time.perf_counter()
        enable_for_api(compile_cache)
        trim_after_compiles()  # return each large compilation's freed host heap to the OS (core.host_memory)
        ckpt = resolve_checkpoint(folder)
        tcfg = ckpt.transformer_config()
        mesh = optional_mesh(dp, tp, sp, devices=devices)
        if mesh is not None:
            check_parallel(tcfg, mesh, WAN_RULES)
        plan = block_plan(tcfg.num_layers, offload_chunk, block_loop)
        with as_progress(progress).stage("loading", total=4, unit="part") as stage:
            pipe = cls._load(ckpt, tcfg, mesh, plan, dtype, text_encoder_dtype, vae_dtype, attention,
                             text_encoder_residency, offload_overlap, stage)
        pipe.load_seconds = time.perf_counter() - t0
        pipe.progress = progress
        return pipe

    @classmethod
    def _load(cls, ckpt, tcfg, mesh, plan, dtype, text_encoder_dtype, vae_dtype, attention, text_encoder_residency,
              offload_overlap, stage) -> WanPipeline:
        maps = ckpt.maps
        treader = CountingReader(ckpt.transformer_reader())
        tparams, offload = load_transformer(treader, maps.transformer_keymap(tcfg), tcfg, dtype,
                                            source=str(ckpt.transformer_weights), mesh=mesh, plan=plan)
        stage.update()
        vreader = ckpt.vae_reader()
        vcfg = ckpt.vae_config(vreader)

        def load_vae(parts, reader=None):
            return load_params(reader or ckpt.vae_reader(), maps.vae_keymap(vcfg), wan_vae.vae_specs(vcfg),
                               jnp.dtype(vae_dtype), source=str(ckpt.vae_weights), parts=parts)

        # The encoder side (40% of the Wan2.1 VAE) is loaded on demand (vae_encoder).
        vparams = load_vae(wan_vae.DECODER_PARTS, vreader)
        stage.update()
        ereader = ckpt.text_encoder_reader()
        ecfg = ckpt.text_encoder_config(ereader)
        if ecfg.d_model != tcfg.text_dim:
            raise CheckpointError(
                f"{ckpt.folder}: the text encoder is {ecfg.d_model} wide but the transformer expects text_dim="
                f"{tcfg.text_dim}; the components belong to different models"
            )
        keep_text = keep_resident(text_encoder_residency)

        def load_text_encoder(reader=None):
            return load_params(reader or ckpt.text_encoder_reader(), maps.text_encoder_keymap(ecfg), t5_specs(ecfg),
                               jnp.dtype(text_encoder_dtype), source=str(ckpt.text_encoder_weights))

        eparams = load_text_encoder(ereader)
        stage.update()
        tokenizer = Tokenizer.from_folder(ckpt.tokenizer)
        sched_cfg = ckpt.scheduler_config()
        if sched_cfg is None:
            # Original release: the Wan repository's T2V sampler (wan/text2video.py: FlowUniPCMultistepScheduler,
            # the configuration below) at generate.py's default t2v shift; flow_shift / presets override it.
            sched_cfg = {"_class_name": "UniPCMultistepScheduler", **WAN_UNIPC, "flow_shift": ORIGINAL_T2V_FLOW_SHIFT}
        pipe = cls(ckpt.folder, tcfg, tparams, vcfg, vparams, ecfg, eparams, tokenizer, sched_cfg, attention,
                   layout=ckpt.layout, mesh=mesh, offload=offload, offload_overlap=offload_overlap)
        pipe.schedule_default = ckpt.schedule_default  # a converted folder keeps its source's
        pipe.text_encoder = OnDemand(load_text_encoder, eparams, keep=keep_text)
        pipe.vae_encoder = OnDemand(lambda: load_vae(wan_vae.ENCODER_PARTS))
        jax.block_until_ready((tparams, vparams, eparams, None if offload is None else offload.chunks))
        stage.update()
        # Bytes of the transformer checkpoint this process read (its own shards on several hosts).
        pipe.load_stats = {"transformer_bytes_read": treader.bytes_read}
        return pipe

    # -- stages ----------------------------------------------------------

    def encode_prompt(self, prompts: list[str]) -> jax.Array:
        """UMT5 states for ``prompts``: float32 ``(B, 512, 4096)``, rows past each prompt's length zero."""
        ids, mask = self.tokenizer([clean_prompt(p) for p in prompts], max_length=MAX_SEQUENCE_LENGTH)
        states = encode_prompts(self.text_encoder.get(), self.text_cfg, ids, mask, MAX_SEQUENCE_LENGTH)
        jax.block_until_ready(states)
        self.text_encoder.release()  # freed now unless kept resident (text_encoder_residency)
        return states

    def make_scheduler(self, sampler: str | None = None, flow_shift: float | None = None,
                       schedule: str | None = None):
        """The sampler for this run: the checkpoint's own (UniPC for Wan) or flow-matching Euler.

        Args:
          sampler: None (the checkpoint's ``scheduler_config.json``), "unipc" or "euler".
          flow_shift: overrides the configured shift (3.0 for 480p, 5.0 for 720p).
          schedule: UniPC's sigma grid: "original" (the Wan repository's ``wan/utils/fm_solvers_unipc.py``)
            or "diffusers" (diffusers' ``UniPCMultistepScheduler``); None: :attr:`schedule_default`, the
            layout's own reference ("original" for the original release and folders converted from it).
            Euler always uses diffusers' grid (the Wan repository has no Euler sampler).

        Raises:
          ValueError: an unknown sampler or schedule (the valid values named).
        """
        schedule = self.schedule_default if schedule is None else schedule
        if schedule not in SCHEDULE_GRIDS:
            raise ValueError(f"unknown schedule {schedule!r}; choose one of {', '.join(map(repr, SCHEDULE_GRIDS))} "
                             "or None (the checkpoint's own)")
        config = dict(self.scheduler_config)
        configured_shift = config.get("flow_shift", config.get("shift", 1.0))
        if flow_shift is None and (isinstance(configured_shift, bool) or not isinstance(configured_shift, (int, float))
                                   or not configured_shift > 0):
            raise ValueError(f"{self.folder / 'scheduler' / 'scheduler_config.json'}: flow_shift={configured_shift!r} "
                             "must be a positive number (3.0 at 480p, 5.0 at 720p)")
        shift = float(flow_shift if flow_shift is not None else configured_shift)
        if sampler is None:
            sampler = "euler" if config.get("_class_name") == "FlowMatchEulerDiscreteScheduler" else "unipc"
        if sampler == "unipc":
            if config.get("_class_name") != "UniPCMultistepScheduler":
                config = {"_class_name": "UniPCMultistepScheduler", **WAN_UNIPC}
            config["flow_shift"] = shift
            config["sigma_grid"] = SCHEDULE_GRIDS[schedule]
        elif sampler == "euler":
            config = {"_class_name": "FlowMatchEulerDiscreteScheduler",
                      "num_train_timesteps": config.get("num_train_timesteps", 1000), "shift": shift}
        else:
            raise ValueError(f"unknown sampler {sampler!r}; choose 'unipc' or 'euler'")
        return scheduler_from_config(config)

    def __call__(
        self,
        prompt: str | list[str],
        negative_prompt: str | list[str] | None = None,
        *,
        image: Any = None,
        last_image: Any = None,
        height: int = 480,
        width: int = 832,
        num_frames: int = 81,
        num_inference_steps: int = 50,
        guidance_scale: float = 5.0,
        flow_shift: float | None = None,
        sampler: str | None = None,
        seed: int = 0,
        latents: np.ndarray | None = None,
        output_type: str = "uint8",
        progress: bool | Progress | None = None,
        schedule: str | None = None,
    ) -> VideoOutput:
        """Generate videos.

        Args:
          prompt: one prompt or a list (batch).
          negative_prompt: for classifier-free guidance; default "" (as diffusers).
          image, last_image: not taken: a Wan2.1 text-to-video checkpoint (the common call's keywords; image-to-video
            checkpoints load as :class:`~vidax.models.wan.pipeline_i2v.WanImageToVideoPipeline`).
          height, width: pixels, multiples of 16.
          num_frames: 4k+1 frames.
          num_inference_steps: sampler steps.
          guidance_scale: CFG scale; guidance is off at 1.0 or below.
          flow_shift: sigma shift; default the checkpoint scheduler's.
          sampler: "unipc" (default for Wan checkpoints) or "euler".
          schedule: UniPC's sigma grid, "original" (the Wan repository's) or "diffusers"; None: the
            checkpoint layout's own (see :meth:`make_scheduler`).
          seed: PRNG seed of the initial noise (drawn once for the whole latent).
          latents: explicit initial latents float32 ``(B, 16, (F-1)/4+1, H/8, W/8)`` instead of noise.
          output_type: "uint8" frames in [0, 255], or "float" frames in [0, 1].
          progress: show each stage's progress (:class:`vidax.core.progress.Progress`; False: nothing); default:
            ``from_pretrained``'s.

        Returns:
          :class:`vidax.video.VideoOutput`: frames ``(B, F, H, W, 3)`` at 16 fps, latents ``(B, 16, T, H/8, W/8)``,
          metrics (:data:`vidax.video.COMMON_METRICS` and the block loop, mesh and bytes read).

        Raises:
          ValueError: an image (this checkpoint is text-to-video), invalid sizes (see :func:`check_inputs`; the token
            grid within ``rope_max_seq_len``), mismatched prompt batches or latents, a prompt
            that is not a string (or list of them), a seed outside ``[0, 2**32)``, a non-finite guidance scale
            (:mod:`vidax.core.inputs`).
          FloatingPointError: the decoded video holds NaN values (e.g. NaN weights) instead of black frames.
        """
        if image is not None or last_image is not None:
            raise ValueError(f"{self.folder} is a Wan2.1 text-to-video checkpoint: it takes no image (image-to-video "
                             "needs an I2V, FLF2V or Wan2.2 checkpoint)")
        check_inputs(height, width, num_frames)
        prompts, negatives = prompt_batch(prompt, negative_prompt)
        guidance_scale, seed = check_guidance(guidance_scale), check_seed(seed)
        guided = guidance_scale > 1.0
        b = len(prompts)
        check_parallel(self.transformer_cfg, self.mesh, self.rules, batch=2 * b if guided else b)
        shape = (b, self.transformer_cfg.in_channels, (num_frames - 1) // VAE_SCALE_TEMPORAL + 1,
                 height // VAE_SCALE_SPATIAL, width // VAE_SCALE_SPATIAL)
        if latents is not None and tuple(latents.shape) != shape:
            raise ValueError(f"latents have shape {tuple(latents.shape)}, expected {shape} for these sizes")
        # Host-side tables and the sampler first: a token grid beyond rope_max_seq_len or a bad sampler fails before
        # any compute.
        cos, sin = rope_tables(self.transformer_cfg, shape)
        scheduler = self.make_scheduler(sampler, flow_shift, schedule)
        progress = as_progress(self.progress if progress is None else progress)
        metrics: dict[str, Any] = {"load_s": self.load_seconds}

        t0 = time.perf_counter()
        with progress.stage("text encoder"):
            text = self.encode_prompt(prompts + negatives if guided else prompts)
            dtype = self.transformer_params["patch_embedding"]["kernel"].dtype
            context = text.astype(dtype)
            jax.block_until_ready(context)
        metrics["text_encoder_s"] = time.perf_counter() - t0

        state = scheduler.set_timesteps(num_inference_steps)
        if latents is None:
            x = jax.random.normal(jax.random.key(seed), shape, jnp.float32)
        else:
            x = jnp.asarray(latents, jnp.float32)
        cos, sin = jnp.asarray(cos), jnp.asarray(sin)
        g = jnp.float32(guidance_scale)
        metrics.update(parallel_metrics(self.mesh, self.rules, self.transformer_cfg.num_attention_heads,
                                        self.attention))
        aux_device = first_device(self.vae_params)
        x, context, cos, sin, g = self._to_mesh(x, context, cos, sin, g)

        with mesh_context(self.mesh):
            t0 = time.perf_counter()
            t = self._to_mesh(np.zeros((b,), np.float32))[0]
            with progress.stage("compiling"), recording() as ran:
                compiled = self.compile_step(self.transformer_params, x, t, context, cos, sin, g, guided=guided)
            self._attention_ran = metrics["attention"] = ran_label(ran, self.attention, self._attention_ran)
            metrics.update(self._block_metrics())
            metrics["compile_s"] = time.perf_counter() - t0

            step_times = []
            with progress.stage("denoising", total=state.num_inference_steps, unit="step") as stage:
                for i in range(state.num_inference_steps):
                    ts = time.perf_counter()
                    t = self._to_mesh(np.full((b,), state.timesteps[i], np.float32))[0]
                    noise_pred = compiled(self.transformer_params, x, t, context, cos, sin, g)
                    x, state = scheduler.step(state, noise_pred, x, i)
                    jax.block_until_ready(x)
                    step_times.append(time.perf_counter() - ts)
                    stage.update()
        metrics["step_s"] = float(np.median(step_times)) if step_times else 0.0
        metrics["sampling_s"] = float(np.sum(step_times))
        metrics.update(self.load_stats)

        t0 = time.perf_counter()
        x = jax.device_put(_local(x), aux_device)  # the VAE runs on one device (of each process)
        with progress.stage("VAE decode", total=x.shape[2], unit="chunk") as stage:
            video = wan_vae.decode(self.vae_params, self.vae_cfg, wan_vae.denormalize_latents(self.vae_cfg, x),
                                   on_chunk=stage.update)
            video = np.asarray(video, np.float32)
        metrics["vae_decode_s"] = time.perf_counter() - t0
        frames = frames_from_video(video, output_type)
        finish_metrics(metrics, height=height, width=width, num_frames=num_frames,
                       num_inference_steps=state.num_inference_steps, fps=self.fps)
        return VideoOutput(frames=frames, fps=self.fps, metrics=metrics, latents=np.asarray(x))

    @property
    def fps(self) -> int:
        """The frame rate of the model's videos: 24 for Wan2.2 TI2V-5B (its VAE), 16 for the others."""
        return 24 if self.vae_cfg.patch_size else 16


    def compilations(self) -> int:
        """How many times this pipeline has compiled its scanned step (``block_loop="scan"``; the host block
        loop and offloading compile their pieces in :func:`compile_offloaded_step`)."""
        return self._step._cache_size()

    def compile_step(self, params, x, t, context, cos, sin, g, *, guided: bool = True, stack: OffloadedStack | None = None):
        """Compile the text-to-video transformer step (both CFG halves when ``guided``) for these inputs.

        Args:
          params: the transformer parameters (without ``"blocks"`` when the blocks are chunked:
            offloading or the host block loop).
          x, t, context, cos, sin, g: the step's inputs (placed as :meth:`__call__` places them).
          guided: classifier-free guidance (batch of both halves).
          stack: the chunked blocks; default this pipeline's (:attr:`offload`).

        Returns:
          ``step(params, x, t, context, cos, sin, g) -> noise_pred``: the compiled resident step (blocks
          under ``scan``), or the prologue, the block loop over the chunks (streamed from host memory
          when offloaded) and the epilogue (:func:`compile_offloaded_step`), with the same contract.
        """
        stack = self.offload if stack is None else stack
        if stack is None:
            return self._step.lower(params, x, t, context, cos, sin, g, cfg=self.transformer_cfg,
                                    attention_impl=self.attention, guided=guided, mesh=self.mesh,
                                    rules=self.rules).compile()
        pro_c, chunk_c, epi_c = compile_offloaded_step(
            params, stack.abstract_chunk(), x, t, context, cos, sin, g, cfg=self.transformer_cfg,
            attention=self.attention, guided=guided, mesh=self.mesh, rules=self.rules)
        overlap = self.offload_overlap

        def step(params, x, t, context, cos, sin, g):
            h, temb, temb6, ctx, cos_p, sin_p = pro_c(params, x, t, context, cos, sin)
            h = wan_offload.run_stack(stack, chunk_c, h, ctx, temb6, cos_p, sin_p, overlap=overlap)
            return epi_c(params, h, temb, g)

        return step

    def transformer_tree(self, expert: int | None = None) -> dict:
        """The transformer's whole parameter tree as :func:`~vidax.models.wan.transformer.transformer_specs`
        declares it: the blocks stacked ``(num_layers, ...)`` whatever the block loop (a device copy when they
        are chunked). For tools and tests; :meth:`__call__` uses the parameters as placed.

        Args:
          expert: for a two-expert pipeline (:class:`~vidax.models.wan.pipeline_i2v.WanImageToVideoPipeline`),
            which expert (0: high noise, 1: low noise); default the pipeline's own transformer.
        """
        from vidax.models.wan.pipeline_i2v import OffloadedExpert

        if expert is None and self.transformer_params is not None:
            params, stack = self.transformer_params, self.offload
        else:
            p = self.experts.get(expert or 0)
            params, stack = (p.resident, p.stack) if isinstance(p, OffloadedExpert) else (p, None)
        return params if stack is None else {**params, "blocks": stack.stacked()}

    @property
    def block_loop(self) -> str:
        """``"scan"``, ``"host"`` (per-block weights in device memory) or ``"offload"`` (chunks streamed from host memory)."""
        if self.offload is None:
            return "scan"
        return "host" if self.offload.in_device_memory else "offload"

    def _block_metrics(self) -> dict:
        out = {"block_loop": self.block_loop}
        stack = self.offload
        if stack is None or stack.in_device_memory:
            return out
        leaf = jax.tree.leaves(stack.chunks[0])[0]
        out["offload"] = {"chunk": stack.plan.chunk, "chunks": stack.num_chunks, "padded_layers": stack.plan.padded_layers,
                          "overlap": self.offload_overlap, "chunk_bytes_per_device": stack.chunk_bytes_per_device(),
                          "host_memory_kind": leaf.sharding.memory_kind if isinstance(leaf, jax.Array) else "numpy"}
        return out

    def _to_mesh(self, *arrays):
        """Step inputs onto the mesh: ``context`` (2B, ...) split over ``data`` where dp divides it
        (the CFG halves), everything else replicated. Without a mesh: unchanged.

        On several hosts the mesh spans other processes' devices: every process passes the same
        host value (NumPy), and ``device_put`` places this process's shards of it.
        """
        if self.mesh is None:
            return arrays
        dp = axis_size(self.mesh, self.rules.mesh_axes("batch"))
        out = []
        for a in arrays:
            split = a.ndim == 3 and a.shape[0] % dp == 0 and dp > 1  # context (B', L, text_dim)
            spec = self.rules.spec(("batch", None, None)) if split else jax.sharding.PartitionSpec()
            sharding = jax.sharding.NamedSharding(self.mesh, spec)
            if not sharding.is_fully_addressable:
                a = np.asarray(a)
            out.append(jax.device_put(a, sharding))
        return tuple(out)

def load_transformer(reader, keymap, cfg, dtype, *, source: str, mesh=None, plan: ChunkPlan | None = None):
    """Load a Wan transformer, placed once: resident on its mesh, or with its blocks in host memory.

    Args:
      reader, keymap: the checkpoint and its layout's key map.
      cfg: the architecture; dtype: the compute dtype of the unpinned leaves.
      source: the checkpoint's name for error messages.
      mesh: the transformer's mesh (None: one device).
      plan: with offloading, the :class:`~vidax.core.offload.ChunkPlan`: the blocks are loaded straight into
        host memory as chunks (``pinned_host`` where the backend has it), with the resident shardings;
        with ``plan.memory == "device"`` (the host block loop), into device memory as chunks.

    Returns:
      ``(params, None)``, or with ``plan`` ``(resident params without "blocks", OffloadedStack)``.

    Raises:
      CheckpointError: see :func:`vidax.checkpoint.loader.load_params`.
    """
    specs = transformer_specs(cfg)
    params = load_params(reader, keymap, specs, jnp.dtype(dtype), source=source,
                         shardings=block_placement(plan, mesh, WAN_RULES))
    return split_blocks(params, specs, plan, mesh, WAN_RULES)


def _local(x):
    """A single-device copy of a replicated array for code that runs per process (the VAE): on several
    hosts the global array's local shard; otherwise the array itself."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        return x.addressable_data(0)
    return x


# The UniPC configuration of the Wan2.1 diffusers checkpoints (scheduler/scheduler_config.json).
WAN_UNIPC = {
    "num_train_timesteps": 1000,
    "prediction_type": "flow_prediction",
    "use_flow_sigmas": True,
    "flow_shift": 3.0,
    "solver_order": 2,
    "solver_type": "bh2",
    "predict_x0": True,
    "lower_order_final": True,
    "final_sigmas_type": "zero",
    "timestep_spacing": "linspace",
    "disable_corrector": [],
    "thresholding": False,
}

# make_scheduler's schedule values and the UniPC sigma_grid each selects (vidax.schedulers.unipc).
SCHEDULE_GRIDS = {"diffusers": "diffusers", "original": "wan"}


def _cfg_step(params, latents, timestep, context, cos, sin, guidance_scale, *, cfg, attention_impl, guided,
              mesh=None, rules=WAN_RULES):
    """One guided transformer evaluation: both CFG halves in one batch of 2B.

    Args:
      latents: float32 ``(B, C, T, H, W)``.
      timestep: float32 ``(B,)``.
      context: ``(2B, 512, text_dim)`` (prompts, then negatives) if ``guided`` else ``(B, ...)``.
      mesh, rules: the transformer's mesh and sharding rules (None: one device); with dp = 2 the
        two CFG halves run on the two ``data`` shards.

    Returns:
      float32 ``(B, C, T, H, W)``: ``uncond + g * (cond - uncond)``.
    """
    x = latents.astype(params["patch_embedding"]["kernel"].dtype)
    if not guided:
        return replicated(forward(params, x, timestep, context, cos, sin, cfg=cfg, attention_impl=attention_impl,
                                   mesh=mesh, rules=rules), mesh)
    both = forward(params, jnp.concatenate([x, x]), jnp.concatenate([timestep, timestep]), context, cos, sin,
                   cfg=cfg, attention_impl=attention_impl, mesh=mesh, rules=rules)
    cond, uncond = jnp.split(both, 2)
    return replicated(uncond + guidance_scale * (cond - uncond), mesh)


def compile_offloaded_step(resident, chunk, x, t, context, cos, sin, g, *, cfg, attention, guided: bool, mesh=None,
                           rules=WAN_RULES, compiler_options: dict | None = None):
    """Compile the three pieces of an offloaded guided step ahead of time.

    Args:
      resident: the parameters outside ``"blocks"`` (arrays, or ``jax.ShapeDtypeStruct`` s with
        shardings: the planner compiles without weights).
      chunk: ``jax.ShapeDtypeStruct`` tree of one chunk of blocks in device memory
        (:meth:`vidax.core.offload.OffloadedStack.abstract_chunk`), any number of layers; or a list
        of such trees (the planner: one chunk function per chunk size, prologue and epilogue once).
      x, t, context, cos, sin, g: the step inputs (arrays or abstract), as for :func:`_cfg_step`.
      cfg, attention, guided, mesh, rules: as for :func:`_cfg_step`.
      compiler_options: XLA options for the three compilations (the planner's, see
        :func:`vidax.core.planner.compiler_options`).

    Returns:
      ``(prologue, chunk_fn, epilogue)`` compiled: ``prologue(resident, x, t, context, cos, sin) ->
      (h, temb, temb6, ctx, cos_p, sin_p)``; ``chunk_fn(chunk, h, ctx, temb6, cos_p, sin_p) -> h``
      (``h`` donated; the function :func:`vidax.models.wan.offload.chunk_function` names
      ``_offload_chunk``; a list of them for a list of chunks); ``epilogue(resident, h, temb, g) ->
      noise_pred`` float32 ``(B, C, T, H, W)``.
    """
    return compile_offloaded(_cfg_prologue, (resident, x, t, context, cos, sin), dict(cfg=cfg, guided=guided, mesh=mesh,
                             rules=rules), resident, chunk, g, latent_shape=x.shape, cfg=cfg, attention=attention,
                             guided=guided, mesh=mesh, rules=rules, compiler_options=compiler_options)


def compile_offloaded(prologue, inputs: tuple, static: dict, resident, chunk, g, *, latent_shape, cfg, attention,
                      guided: bool, mesh=None, rules=WAN_RULES, per_token: bool = False, compiler_options=None):
    """Compile an offloaded step from its prologue: :func:`compile_offloaded_step` for any step's inputs.

    Args:
      prologue: ``prologue(*inputs, **static) -> (x, temb, temb6, ctx, cos, sin)``, the block-loop
        inputs for the (CFG) batch (e.g. :func:`_cfg_prologue`; the image pipeline's own).
      inputs, static: its arguments (arrays or abstract) and static keyword arguments.
      resident, chunk, g, cfg, attention, guided, mesh, rules, compiler_options: as :func:`compile_offloaded_step`.
      latent_shape: the sampled latents' shape ``(B, C, T, H, W)`` (before the CFG batch).
      per_token: ``temb6`` / ``temb`` are per token (Wan2.2 TI2V image-to-video).

    Returns:
      ``(prologue, chunk_fn, epilogue)`` compiled, as :func:`compile_offloaded_step`.
    """
    batch = latent_shape[0] * (2 if guided else 1)
    full_shape = (batch, *latent_shape[1:])
    io = wan_offload.io_shardings(mesh, rules, per_token)
    names = ("x", "temb", "temb6", "ctx", "cos", "sin")
    pro = jax.jit(prologue, static_argnames=tuple(static), out_shardings=tuple(io[n] for n in names))
    pro_c = pro.lower(*inputs, **static).compile(compiler_options)
    outs = jax.eval_shape(partial(pro, **static), *inputs)
    ab = {n: jax.ShapeDtypeStruct(o.shape, o.dtype, sharding=io[n]) for n, o in zip(names, outs)}
    run = wan_offload.chunk_function(cfg, attention, mesh, rules, num_tokens(cfg, full_shape), per_token)
    chunk_c = [run.lower(c, ab["x"], ab["ctx"], ab["temb6"], ab["cos"], ab["sin"]).compile(compiler_options)
               for c in (chunk if isinstance(chunk, list) else [chunk])]
    chunk_c = chunk_c if isinstance(chunk, list) else chunk_c[0]
    epi = jax.jit(_cfg_epilogue, static_argnames=("cfg", "latent_shape", "guided", "mesh"))
    epi_c = epi.lower(resident, ab["x"], ab["temb"], g, cfg=cfg, latent_shape=full_shape, guided=guided,
                      mesh=mesh).compile(compiler_options)
    return pro_c, chunk_c, epi_c


def _cfg_prologue(params, latents, timestep, context, cos, sin, *, cfg, guided, mesh=None, rules=WAN_RULES):
    """The offloaded step before the blocks: CFG batch (as :func:`_cfg_step`) and the transformer's prologue.

    Returns:
      the inputs of the block loop for the batch of 2B (guided) or B:
      ``x, temb, temb6, ctx, cos, sin`` (:func:`vidax.models.wan.transformer.forward_prologue`).
    """
    x = latents.astype(params["patch_embedding"]["kernel"].dtype)
    if guided:
        x, timestep = jnp.concatenate([x, x]), jnp.concatenate([timestep, timestep])
    check_parallel(cfg, mesh, rules, x.shape[0])
    return forward_prologue(params, x, timestep, context, cos, sin, cfg=cfg, mesh=mesh, rules=rules)


def _cfg_epilogue(params, x, temb, guidance_scale, *, cfg, latent_shape, guided, mesh=None):
    """The offloaded step after the blocks: the transformer's head, then the CFG combination (as :func:`_cfg_step`)."""
    out = forward_epilogue(params, x, temb, cfg=cfg, latent_shape=latent_shape)
    if guided:
        cond, uncond = jnp.split(out, 2)
        out = uncond + guidance_scale * (cond - uncond)
    return replicated(out, mesh)


