"""Cosmos3 text- and image-to-video (:class:`Cosmos3Pipeline`): a prompt (and a first frame) in, uint8 frames out.

Follows diffusers 0.42.1 ``pipelines/cosmos/pipeline_cosmos3_omni.py`` (``Cosmos3OmniPipeline``) for video
generation (sound and action generation are not run):

1. the prompt and the negative prompt (default ``""``) with the metadata sentences (duration, resolution; inverse
   ones for the negative), the system prompt, Qwen3-VL's chat frame, then ``[eos, <|vision_start|>]``
   (:mod:`vidax.models.cosmos3.text`); text positions ``arange`` on the three mRoPE axes;
2. the understanding stream run once per prompt (:func:`vidax.models.cosmos3.transformer.und_prefill`): its
   per-layer keys and values for the generation path are a function of the prompt only (the understanding tokens
   attend causally among themselves and never to the video tokens), so they are computed once per call and reused
   at every step, where the reference recomputes the whole joint sequence per step (same values);
3. latents float32 ``(1, 48, (F - 1) / 4 + 1, H / 16, W / 16)`` (``(B, C, T, H, W)``): Gaussian noise, or explicit
   ``latents`` used as given; image-to-video: the first frame (:mod:`vidax.models.cosmos3.conditioning`) through the
   Wan2.2 VAE (posterior mean, normalised by the VAE's statistics) replaces latent frame 0 of the noise, which stays
   a clean conditioning frame (its tokens get no timestep embedding, its velocity is 0);
4. vision positions: the temporal axis starts at the prompt's length plus the modality margin (15000), modulated
   by ``fps / base_fps`` where the model enables it; the spatial axes restart at 0;
5. each step: the generation stream over the latents (cast to the transformer's dtype) for ``[cond, uncond]`` in
   one batch, the velocity float32, ``uncond + s (cond - uncond)`` when ``guidance_scale != 1`` (the reference's
   test), then the UniPC step on float32 latents (:mod:`vidax.models.cosmos3.schedule`); the transformer is given
   the step's integer timestep;
6. latents de-normalised and decoded by the Wan2.2 VAE; frames ``clip(x / 2 + 0.5, 0, 1)``.

The sampling loop is a host loop around one compiled generation step (compiled once per run;
:func:`vidax.models.cosmos3.block_loop.make_gen_step`, the CFG batch built in its prologue and the guidance in its
epilogue). With ``dp * tp * sp > 1`` the transformer runs on a ``(data, tensor, sequence)`` mesh (its parameters
loaded already sharded; tensor parallelism over heads and MLPs, Ulysses sequence parallelism over the vision
tokens); with ``offload_chunk`` its layers stay in host memory and stream to the devices, for the prefill and every
step. Odd latent sizes are zero-padded to the transformer's patch and cropped after, as the reference packs them
(inside the transformer).
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from vidax.core import wan_vae
from vidax.core.attention import AttentionImpl, ran_label, recording
from vidax.core.compile_cache import enable_for_api
from vidax.core.inputs import check_dtype, check_finite_video, check_seed, is_integer
from vidax.core.placement import first_device, mesh_context
from vidax.core.progress import Progress, as_progress
from vidax.core.sharding import optional_mesh
from vidax.models.cosmos3 import text as ctext
from vidax.models.cosmos3.family import check_sizes
from vidax.models.cosmos3.layout import check_tokenizer, resolve_checkpoint
from vidax.models.cosmos3.presets import DEFAULT_FPS, DEFAULT_GUIDANCE_SCALE, DEFAULT_STEPS
from vidax.video import VideoOutput, finish_metrics

#: Prompt rows are padded to a multiple of this many tokens (one compiled prefill and step per bucket).
PROMPT_BUCKET = 64


def check_inputs(height: Any, width: Any, num_frames: Any, fps: Any = DEFAULT_FPS, output_type: str = "uint8") -> None:
    """Sizes, rate and output type, before any compute (:func:`vidax.models.cosmos3.family.check_sizes`).

    Raises:
      ValueError: every problem named with its fix.
    """
    check_sizes(height, width, num_frames)
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not (0 < fps <= 240):
        raise ValueError(f"fps={fps!r} must be a number in (0, 240] (the model is told the rate)")
    if output_type not in ("uint8", "float"):
        raise ValueError(f"output_type must be 'uint8' or 'float', got {output_type!r}")


def guide(velocity: jax.Array, guidance_scale: jax.Array | None) -> jax.Array:
    """The step's velocity from the generation stream's float32 output ``(B, C, T, H, W)``: rows ``[cond, uncond]``
    combined as the reference does, ``uncond + s (cond - uncond)``; without guidance the single row."""
    if guidance_scale is None:
        return velocity
    cond, uncond = velocity[:1], velocity[1:2]
    return uncond + guidance_scale * (cond - uncond)


class Cosmos3Pipeline:
    """Cosmos3 (Nano, Edge) text- and image-to-video, loaded once from a diffusers or converted folder.

    Example::

        pipe = Cosmos3Pipeline.from_pretrained("Cosmos3-Nano", dtype="bfloat16", tp=4)
        out = pipe("a robot arm stacks red cubes on a table", height=704, width=1280, num_frames=93)
        out = pipe("the robot arm keeps welding", image="first.png", height=704, width=1280, num_frames=93)
        write_video(out.frames[0], "world.mp4", fps=out.fps)
    """

    def __init__(self, ckpt, transformer_cfg, transformer_params: dict, vae_cfg, vae_params: dict, tokenizer,
                 scheduler, *, dtype: Any = "bfloat16", attention: str = "auto", mesh=None, stacks=None,
                 offload_overlap: bool = True):
        self.ckpt = ckpt
        self.folder = ckpt.folder
        self.transformer_cfg = transformer_cfg
        self.transformer_params = transformer_params  # without the layer stack when it is offloaded
        self.stacks = stacks or {}
        self.offload_overlap = offload_overlap
        self.vae_cfg = vae_cfg
        self.vae_params = vae_params
        self.tokenizer = tokenizer  # vidax.models.cosmos3.text.Cosmos3Tokenizer
        self.scheduler = scheduler  # FlowUniPCMultistepScheduler; its states' model_timesteps feed the transformer
        self.compute_dtype = jnp.dtype(dtype)
        self.attention = AttentionImpl(attention)
        self.mesh = mesh
        self.load_seconds = 0.0
        self.progress: bool | Progress = True
        self._attention_ran: str | None = None
        self._compiled: dict = {}

    @property
    def fps(self) -> float:
        """24: diffusers' default rate (a call's ``fps`` is the rate its video is written at)."""
        return DEFAULT_FPS

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike, *, dtype: Any = "bfloat16", vae_dtype: Any = "float32",
                        attention: str = "auto", dp: int = 1, tp: int = 1, sp: int = 1, devices: list | None = None,
                        offload_chunk: int | None = None, offload_overlap: bool = True, block_loop: str = "auto",
                        text_encoder_residency: str = "auto", progress: bool | Progress = True,
                        compile_cache: bool | str | os.PathLike = True) -> Cosmos3Pipeline:
        """Load a Cosmos3 folder (diffusers layout or ``vidax convert``'s).

        Args:
          folder: see :mod:`vidax.models.cosmos3.layout`.
          dtype: the transformer's weight and compute dtype ("bfloat16" or "float32"; the timestep embedder stays
            float32).
          vae_dtype: the VAE's dtype.
          attention: attention implementation (:mod:`vidax.core.attention`).
          dp, tp, sp: the transformer's mesh sizes.
          devices: the mesh's devices (default all).
          offload_chunk: keep the layers in host memory and stream ``offload_chunk`` at a time to the devices (for
            the prompt's prefill and every step). None: resident.
          offload_overlap: copy the next chunk while the current one computes.
          block_loop: ``"scan"``, ``"host"`` or ``"auto"`` (:func:`vidax.models.cosmos3.block_loop.plans_for`).
          text_encoder_residency: accepted for the common interface (Cosmos3 has no separate text encoder: the
            prompt runs through the backbone).
          progress: show the loading stage.
          compile_cache: JAX's persistent compilation cache (:func:`vidax.core.compile_cache.enable_for_api`).

        Raises:
          CheckpointError: a missing part or tokenizer (named), components that do not fit each other, or weights
            that do not match their configuration.
          ValueError: a bad dtype, mesh, ``block_loop`` or ``offload_chunk``; raised before any weight is read.
        """
        from vidax.models.cosmos3 import loading

        dtype = check_dtype(dtype)
        vae_dtype = check_dtype(vae_dtype, "vae_dtype")
        t0 = time.perf_counter()
        enable_for_api(compile_cache)
        ckpt = resolve_checkpoint(folder)
        check_tokenizer(ckpt)
        tcfg, vcfg = loading.transformer_config(ckpt), loading.vae_config(ckpt)
        tokenizer = loading.load_tokenizer(ckpt)
        loading.check_components(ckpt, tcfg, vcfg, tokenizer)
        scheduler = loading.make_scheduler(ckpt)
        mesh = optional_mesh(dp, tp, sp, devices=devices)
        from vidax.models.cosmos3.block_loop import plans_for
        from vidax.models.cosmos3.sharding import check_parallel

        check_parallel(tcfg, mesh)
        plans_for(tcfg, offload_chunk, block_loop)  # (checks the chunk and the loop before any weight is read)
        with as_progress(progress).stage("loading", total=2, unit="part") as stage:
            tparams, stacks = loading.load_transformer(ckpt, tcfg, dtype, mesh=mesh, offload_chunk=offload_chunk,
                                                       block_loop=block_loop)
            stage.update()
            vparams = loading.load_vae(ckpt, vcfg, vae_dtype)
            stage.update()
            jax.block_until_ready((tparams, vparams))
        pipe = cls(ckpt, tcfg, tparams, vcfg, vparams, tokenizer, scheduler, dtype=dtype, attention=attention,
                   mesh=mesh, stacks=stacks, offload_overlap=offload_overlap)
        pipe.load_seconds = time.perf_counter() - t0
        pipe.progress = progress
        return pipe

    # -- stages ----------------------------------------------------------

    @property
    def vae_params_dtype(self):
        return jax.tree_util.tree_leaves(self.vae_params)[0].dtype

    def latent_shape(self, height: int, width: int, num_frames: int) -> tuple[int, int, int, int, int]:
        """The latents' shape ``(1, 48, (F - 1) / 4 + 1, H / 16, W / 16)`` for these sizes."""
        s, t = self.vae_cfg.spatial_compression, self.vae_cfg.temporal_compression
        return (1, self.vae_cfg.z_dim, (num_frames - 1) // t + 1, height // s, width // s)

    def tokenize(self, prompt: str, negative_prompt: str | None, *, num_frames: int, height: int, width: int,
                 fps: float, use_system_prompt: bool | None = None, add_resolution_template: bool = True,
                 add_duration_template: bool = True) -> tuple[list[int], list[int]]:
        """``(cond_ids, uncond_ids)`` (:meth:`vidax.models.cosmos3.text.Cosmos3Tokenizer.tokenize_prompt`; the
        folder's ``default_use_system_prompt`` unless given)."""
        if use_system_prompt is None:
            use_system_prompt = self.ckpt.default_use_system_prompt
        return self.tokenizer.tokenize_prompt(prompt, negative_prompt, num_frames=num_frames, height=height,
                                              width=width, fps=fps, use_system_prompt=bool(use_system_prompt),
                                              add_resolution_template=add_resolution_template,
                                              add_duration_template=add_duration_template)

    def vision_positions(self, offsets: tuple[int, ...], grid: tuple[int, int, int], fps: float) -> np.ndarray:
        """float32 ``(B, 3, N)`` positions of the ``N = T * h' * w'`` vision tokens, one row per prompt offset."""
        cfg = self.transformer_cfg
        rows = [ctext.vision_position_ids(*grid, off, reset_spatial_indices=cfg.unified_3d_mrope_reset_spatial_ids,
                                          fps=fps if cfg.enable_fps_modulation else None,
                                          base_fps=float(cfg.base_fps),
                                          temporal_compression_factor=self.vae_cfg.temporal_compression)[0]
                for off in offsets]
        return np.stack(rows).astype(np.float32)

    def encode_condition(self, pixels: np.ndarray) -> jax.Array:
        """The first frame ``(3, H, W)`` in ``[-1, 1]`` -> its normalised latent frame ``(1, 48, 1, h, w)`` (the
        posterior mean; the VAE is causal in time, so the reference's encode of the frame repeated over the whole
        clip gives the same first latent frame)."""
        video = jnp.asarray(pixels[None, :, None], self.vae_params_dtype)
        mean, _ = wan_vae.encode(self.vae_params, self.vae_cfg, video)
        return wan_vae.normalize_latents(self.vae_cfg, mean.astype(self.vae_params_dtype)).astype(jnp.float32)

    def decode_latents(self, latents: jax.Array, on_chunk=None) -> np.ndarray:
        """``(1, 48, T, h, w)`` latents -> float32 video ``(1, F, H, W, 3)`` in ``[0, 1]``."""
        z = wan_vae.denormalize_latents(self.vae_cfg, jnp.asarray(latents, self.vae_params_dtype))
        video = np.asarray(wan_vae.decode(self.vae_params, self.vae_cfg, z, on_chunk=on_chunk), np.float32)
        check_finite_video(video)
        return np.clip(video.transpose(0, 2, 3, 4, 1) / 2 + 0.5, 0.0, 1.0)

    @property
    def block_loop(self) -> str:
        """``"scan"``, ``"host"`` or ``"offload"``."""
        from vidax.models.cosmos3.block_loop import loop_name

        return loop_name(self.stacks)

    def _prefill_fn(self):
        """``prefill(params, input_ids, position_ids, lengths) -> UndCache`` for this placement
        (:func:`vidax.models.cosmos3.block_loop.make_prefill`)."""
        from vidax.models.cosmos3.block_loop import make_prefill

        return make_prefill(self.transformer_params, self.stacks, cfg=self.transformer_cfg, attention=self.attention,
                            mesh=self.mesh, overlap=self.offload_overlap)

    def _step_fn(self, guided: bool):
        """``step(params, cache, (lengths, x, timestep, position_ids, noisy), (guidance_scale,)) -> float32 velocity
        (1, C, T, H, W)``: the latents cast to the transformer's dtype and repeated for every prompt row in the
        prologue, the generation stream, the guidance in the epilogue
        (:func:`vidax.models.cosmos3.block_loop.make_gen_step`)."""
        from vidax.models.cosmos3.block_loop import GenArgs, make_gen_step

        dtype = self.compute_dtype

        def prepare(lengths, x, timestep, position_ids, noisy):
            latents = jnp.broadcast_to(x.astype(dtype), (lengths.shape[0], *x.shape[1:]))
            return GenArgs(lengths, latents, timestep, position_ids, noisy)

        def finish(velocity, guidance_scale):
            return guide(velocity.astype(jnp.float32), guidance_scale if guided else None)

        return make_gen_step(self.transformer_params, self.stacks, cfg=self.transformer_cfg, attention=self.attention,
                             prepare=prepare, finish=finish, mesh=self.mesh, overlap=self.offload_overlap)

    def __call__(
        self,
        prompt: str | list[str],
        negative_prompt: str | list[str] | None = None,
        *,
        image: Any = None,
        last_image: Any = None,
        video: Any = None,
        height: int = 720,
        width: int = 1280,
        num_frames: int = 189,
        num_inference_steps: int = DEFAULT_STEPS,
        guidance_scale: float = DEFAULT_GUIDANCE_SCALE,
        fps: float = DEFAULT_FPS,
        seed: int = 0,
        latents: np.ndarray | None = None,
        use_system_prompt: bool | None = None,
        add_resolution_template: bool = True,
        add_duration_template: bool = True,
        output_type: str = "uint8",
        progress: bool | Progress | None = None,
    ) -> VideoOutput:
        """Generate a video from text, or from a first frame (``image``).

        Args:
          prompt: one prompt (a one-element list is taken as the reference takes its first entry).
          negative_prompt: the unconditional prompt (default ``""``: only the inverse metadata sentences).
          image: image-to-video's first frame (a path, a PIL image or a uint8 ``(H, W, 3)`` array), scaled to cover
            the video and center-cropped as the reference does.
          last_image, video: must be None (no last-frame or video conditioning in vidax's Cosmos3).
          height, width: pixels, multiples of 16 (diffusers' default 720 x 1280).
          num_frames: ``4k + 1`` frames (1: an image; diffusers' default 189).
          num_inference_steps: sampler steps (35).
          guidance_scale: classifier-free guidance (6.0); exactly 1: one row per step, no negative prompt.
          fps: the rate the model is told (metadata sentence, temporal positions) and the video's (24).
          seed: PRNG seed of the initial noise.
          latents: explicit initial latents float32 ``(1, 48, T', H/16, W/16)``, used as given (image-to-video
            included, as the reference).
          use_system_prompt: prepend the system prompt (default: the folder's ``default_use_system_prompt``).
          add_resolution_template, add_duration_template: the metadata sentences.
          output_type: "uint8" frames in [0, 255], or "float" frames in [0, 1].
          progress: show progress.

        Returns:
          :class:`vidax.video.VideoOutput` with frames ``(1, F, H, W, 3)`` at ``fps``.

        Raises:
          ValueError: several prompts, a ``last_image`` or ``video``, an image for one frame, invalid sizes or rate,
            mismatched latents, a bad seed, guidance scale or step count, an unknown output type, too long a prompt;
            unreadable images (:class:`vidax.core.images.ImageError`).
        """
        if last_image is not None or video is not None:
            raise ValueError("vidax's Cosmos3 runs text- and image-to-video: pass image= (the first frame) only")
        check_inputs(height, width, num_frames, fps, output_type)
        if isinstance(prompt, (list, tuple)):
            if len(prompt) != 1:
                raise ValueError(f"Cosmos3 generates one video per call (got {len(prompt)} prompts), as the reference")
            prompt = prompt[0]
        if isinstance(negative_prompt, (list, tuple)):
            if len(negative_prompt) != 1:
                raise ValueError(f"one negative prompt per call (got {len(negative_prompt)})")
            negative_prompt = negative_prompt[0]
        if image is not None and num_frames == 1:
            raise ValueError("image-to-video needs more than one frame; one frame is text-to-image (no image)")
        seed = check_seed(seed)
        if not is_integer(num_inference_steps) or num_inference_steps < 1:
            raise ValueError(f"num_inference_steps must be a positive integer, got {num_inference_steps!r}")
        n = int(num_inference_steps)
        if isinstance(guidance_scale, bool) or not isinstance(guidance_scale, (int, float)) \
                or not math.isfinite(guidance_scale):
            raise ValueError(f"guidance_scale must be a finite number, got {guidance_scale!r}")
        guided = guidance_scale != 1.0  # the reference's do_classifier_free_guidance
        shape = self.latent_shape(height, width, num_frames)
        if latents is not None and tuple(np.shape(latents)) != shape:
            raise ValueError(f"latents have shape {tuple(np.shape(latents))}, expected {shape} (B, C, T, H, W) for "
                             "these sizes")
        pixels = None
        if image is not None:
            from vidax.models.cosmos3.conditioning import conditioning_pixels

            pixels = conditioning_pixels(image, height, width)
        cond_ids, uncond_ids = self.tokenize(prompt, negative_prompt, num_frames=num_frames, height=height,
                                             width=width, fps=float(fps), use_system_prompt=use_system_prompt,
                                             add_resolution_template=add_resolution_template,
                                             add_duration_template=add_duration_template)
        progress = as_progress(self.progress if progress is None else progress)
        metrics: dict[str, Any] = {"load_s": self.load_seconds, "vae_encode_s": 0.0}
        cfg = self.transformer_cfg
        packed = ctext.pack_prompts([cond_ids, uncond_ids] if guided else [cond_ids],
                                    pad_id=self.tokenizer.tokenizer.pad_id,
                                    temporal_modality_margin=cfg.unified_3d_mrope_temporal_modality_margin,
                                    multiple=PROMPT_BUCKET)
        mesh = self.mesh
        from vidax.models.cosmos3.sharding import check_parallel

        check_parallel(cfg, mesh, batch=len(packed.lengths))

        def put(x):
            """Step inputs committed to the device (one device) or replicated on the mesh (the transformer's
            shard_map splits the work): committed like the sampler's outputs, so the first step's programs serve
            every step."""
            if mesh is None:
                return jax.device_put(x, first_device(self.vae_params))
            return jax.device_put(x, NamedSharding(mesh, PartitionSpec()))

        with mesh_context(mesh):
            t0 = time.perf_counter()
            with progress.stage("prompt (understanding stream)"), recording() as ran_prefill:
                if "prefill" not in self._compiled:
                    self._compiled["prefill"] = self._prefill_fn()
                prefill = self._compiled["prefill"]
                lengths = put(packed.lengths)
                cache = prefill(self.transformer_params, put(packed.input_ids), put(packed.position_ids), lengths)
                jax.block_until_ready(cache)
            metrics["text_encoder_s"] = time.perf_counter() - t0

            _, c, t, h, w = shape
            p = cfg.latent_patch_size
            grid = (t, -(-h // p), -(-w // p))
            positions = put(self.vision_positions(packed.vision_offsets, grid, float(fps)))
            noisy_np = np.ones((len(packed.lengths), t), np.float32)
            if pixels is not None:
                noisy_np[:, 0] = 0.0
            noisy = put(noisy_np)

            if latents is None:
                x = jax.random.normal(jax.random.key(seed), shape, jnp.float32)
                if pixels is not None:
                    t1 = time.perf_counter()
                    with progress.stage("VAE encode"):
                        z0 = self.encode_condition(pixels)
                        x = x.at[:, :, :1].set(jnp.asarray(z0))
                        jax.block_until_ready(x)
                    metrics["vae_encode_s"] = time.perf_counter() - t1
            else:
                x = jnp.asarray(latents, jnp.float32)
            x = put(x)

            state = self.scheduler.set_timesteps(n)
            model_timesteps = np.asarray(state.model_timesteps, np.float32)
            steps = int(state.num_inference_steps)
            rows = len(packed.lengths)
            g = put(np.float32(guidance_scale))

            def timestep(i):
                return put(np.full((rows,), model_timesteps[i], np.float32))

            if ("step", guided) not in self._compiled:
                self._compiled[("step", guided)] = self._step_fn(guided)
            step = self._compiled[("step", guided)]
            metrics["compile_s"] = 0.0

            step_times = []
            with progress.stage("denoising", total=steps, unit="step") as stage, recording() as ran:
                for i in range(steps):
                    ts = time.perf_counter()
                    v = step(self.transformer_params, cache, (lengths, x, timestep(i), positions, noisy), (g,))
                    x, state = self.scheduler.step(state, v, x, i)
                    jax.block_until_ready(x)
                    step_times.append(time.perf_counter() - ts)
                    stage.update()
        self._attention_ran = metrics["attention"] = ran_label(ran | ran_prefill, self.attention, self._attention_ran)
        # the first step compiled its program(s): counted as compile time less a step's run
        steady = float(np.median(step_times[1:])) if len(step_times) > 1 else 0.0
        metrics["compile_s"] += max(step_times[0] - steady, 0.0)
        metrics["step_s"] = steady if len(step_times) > 1 else step_times[0]
        metrics["sampling_s"] = float(np.sum(step_times))
        metrics["block_loop"] = self.block_loop
        metrics["prompt_tokens"] = [int(v) for v in packed.lengths]

        t0 = time.perf_counter()
        x = jax.device_put(x, first_device(self.vae_params))
        with progress.stage("VAE decode", total=t, unit="frame") as stage:
            frames = self.decode_latents(x, on_chunk=stage.update)
        metrics["vae_decode_s"] = time.perf_counter() - t0
        if output_type == "uint8":
            frames = np.round(frames * 255.0).astype(np.uint8)
        finish_metrics(metrics, height=height, width=width, num_frames=frames.shape[1], num_inference_steps=steps,
                       fps=fps)
        return VideoOutput(frames=frames, fps=fps, metrics=metrics, latents=np.asarray(x))


__all__ = ["Cosmos3Pipeline", "check_inputs", "guide"]
