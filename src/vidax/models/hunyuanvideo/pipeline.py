"""HunyuanVideo 13B text-to-video (:class:`HunyuanVideoPipeline`) and image-to-video
(:class:`HunyuanVideoImageToVideoPipeline`): prompt (and image) in, uint8 frames out.

Follows diffusers 0.42.1 ``pipelines/hunyuan_video/pipeline_hunyuan_video.py`` (``HunyuanVideoPipeline``) and
``pipeline_hunyuan_video_image2video.py`` (``HunyuanVideoImageToVideoPipeline``):

1. each prompt wrapped in the reference's template, tokenized (Llama-3, right padding, 256 tokens after the template)
   and encoded by the Llama text tower (the hidden state two layers before the last, the template's tokens cropped;
   image-to-video: LLaVA, with the image's tokens in the prompt), plus the CLIP-L pooled output
   (:mod:`vidax.models.hunyuanvideo.text`);
2. Gaussian latents ``(B, 16, (num_frames - 1) / 4 + 1, H / 8, W / 8)`` (``(B, C, T, H, W)``, as the reference);
3. flow-matching Euler over ``sigmas = linspace(1, 0, n + 1)[:-1]`` shifted by ``flow_shift`` (7.0 in the release's
   scheduler configuration);
4. embedded guidance: the guidance-distilled transformer takes ``guidance_scale * 1000`` as an input (one evaluation
   per step); true classifier-free guidance runs only with a negative prompt and ``true_cfg_scale > 1``
   (``neg + s (pos - neg)``, both halves batched in one evaluation);
5. latents divided by the VAE ``scaling_factor`` (0.476986) and decoded (optionally in tiles); frames
   ``clip(x / 2 + 0.5, 0, 1)``.

The sampling loop is a host loop around one compiled transformer step, compiled ahead of time (once per run). The
sampler state stays float32 (the reference rounds the latents to the transformer dtype after each step).

With ``dp * tp * sp > 1`` the transformer runs on a ``(data, tensor, sequence)`` mesh: its parameters are loaded
already sharded by :data:`vidax.models.hunyuanvideo.sharding.HUNYUAN_VIDEO_RULES`; the text encoders and the VAE stay
on one device.
"""

from __future__ import annotations

import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint.errors import CheckpointError
from vidax.core.attention import AttentionImpl, ran_label, recording
from vidax.core.compile_cache import enable_for_api
from vidax.core.host_memory import trim_after_compiles
from vidax.core.images import load_image, vae_pixels
from vidax.core.inputs import check_dtype, check_finite_video, check_guidance, check_seed, prompt_batch
from vidax.core.placement import first_device, mesh_context, parallel_metrics, replicated, to_mesh
from vidax.core.progress import Progress, as_progress
from vidax.core.residency import keep_resident
from vidax.core.sharding import optional_mesh
from vidax.models.hunyuanvideo import block_loop as hv_block_loop
from vidax.models.hunyuanvideo import vae as hvae
from vidax.models.hunyuanvideo.family import check_sizes
from vidax.models.hunyuanvideo.layout import check_tokenizers, resolve_checkpoint
from vidax.models.hunyuanvideo.loading import load_components
from vidax.models.hunyuanvideo.presets import I2V_BUCKET_BASE, size_for_image
from vidax.models.hunyuanvideo.sharding import HUNYUAN_VIDEO_RULES, check_parallel
from vidax.models.hunyuanvideo.transformer import forward, guidance_input
from vidax.schedulers import scheduler_from_config
from vidax.video import VideoOutput, finish_metrics

#: The image-to-video pipeline mixes the image latents into the initial noise at ``t = 0.999`` (``prepare_latents``).
I2V_NOISE_T = 0.999
#: frames the image-to-video ``latent_concat`` model's output drops from the front (``video[:, :, 4:]``).
LATENT_CONCAT_DROPPED_FRAMES = 4


def check_inputs(height: Any, width: Any, num_frames: Any, output_type: str = "uint8") -> None:
    """Sizes and output type, before any compute (:func:`vidax.models.hunyuanvideo.family.check_sizes`).

    Raises:
      ValueError: every problem named with its fix.
    """
    check_sizes(height, width, num_frames)
    if output_type not in ("uint8", "float"):
        raise ValueError(f"output_type must be 'uint8' or 'float', got {output_type!r}")


class HunyuanVideoPipeline:
    """HunyuanVideo 13B text-to-video, loaded once from a diffusers, original-release or converted folder.

    Example::

        pipe = HunyuanVideoPipeline.from_pretrained("HunyuanVideo", dtype="bfloat16", tp=4, offload_chunk=20)
        out = pipe("a cat walks on the grass, realistic style", height=720, width=1280, num_frames=129)
        write_video(out.frames[0], "cat.mp4", fps=out.fps)
    """

    TASK = "t2v"

    def __init__(self, ckpt, transformer_cfg, transformer_params: dict, vae_cfg, vae_params: dict, text,
                 scheduler_config: dict, attention: str = "auto", mesh=None, rules=HUNYUAN_VIDEO_RULES,
                 block_chunks: dict | None = None, offload_overlap: bool = True):
        self.ckpt = ckpt
        self.folder = ckpt.folder
        self.transformer_cfg = transformer_cfg
        # With the host block loop or offloading the two block stacks are block_chunks ({stack: OffloadedStack},
        # vidax.models.hunyuanvideo.block_loop) and transformer_params holds the parameters outside them.
        self.transformer_params = transformer_params
        self.block_chunks = block_chunks or None
        self.offload_overlap = offload_overlap
        self.vae_cfg = vae_cfg
        self.vae_params = vae_params
        self.text = text  # vidax.models.hunyuanvideo.loading.TextEncoders
        self.scheduler_config = scheduler_config
        self.attention = AttentionImpl(attention)
        self.mesh = mesh
        self.rules = rules
        self._step = jax.jit(_step, static_argnames=("cfg", "attention_impl", "guided", "mesh", "rules"))
        self.load_seconds = 0.0
        self.progress: bool | Progress = True
        self._attention_ran: str | None = None

    @property
    def fps(self) -> int:
        """24: the frame rate of the release's videos."""
        return 24

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike, *, dtype: Any = "bfloat16", text_encoder_dtype: Any = "float32",
                        vae_dtype: Any = "float32", attention: str = "auto", dp: int = 1, tp: int = 1, sp: int = 1,
                        devices: list | None = None, text_encoder_residency: str = "auto",
                        block_loop: str = "auto", offload_chunk: int | None = None, offload_overlap: bool = True,
                        progress: bool | Progress = True,
                        compile_cache: bool | str | os.PathLike = True) -> HunyuanVideoPipeline:
        """Load a HunyuanVideo folder (diffusers layout, the original release's ``ckpts``, or ``vidax convert``'s).

        Args:
          folder: see :mod:`vidax.models.hunyuanvideo.layout`.
          dtype: transformer weight dtype ("bfloat16" or "float32"); norms, embedders and modulation projections stay
            float32.
          text_encoder_dtype: the Llama / LLaVA weights' dtype (float32 by default; the text tower runs once per
            prompt); CLIP-L (123M parameters) stays float32.
          vae_dtype: VAE dtype.
          attention: attention implementation (:mod:`vidax.core.attention`); ``"auto"`` picks cuDNN / splash / the
            fused CPU kernel.
          dp, tp, sp: the transformer's mesh sizes; tp must divide the head count (24 for the release).
          devices: the mesh's devices (default all).
          text_encoder_residency: ``"free"`` frees the text encoders after each encoding (loaded again for the next
            prompt), ``"resident"`` keeps them, ``"auto"``: freed on accelerators, kept on the CPU backend.
          block_loop: ``"scan"`` (each block stack under ``lax.scan`` in one step program), ``"host"`` (one compiled
            block program per stack kind, called per block from the host over per-block weights in device memory:
            :mod:`vidax.models.hunyuanvideo.block_loop`), or ``"auto"``: ``"host"`` on the CPU backend, ``"scan"``
            elsewhere (docs/design.md, "Block loop"). Same values either way. Ignored (but checked) with
            ``offload_chunk``.
          offload_chunk: keep both block stacks in host memory (``pinned_host`` where the backend has it) and stream
            ``offload_chunk`` blocks at a time to the devices, each step; the size applies to each stack (the
            paper's row: 20, the 20 dual-stream blocks in one chunk and the 40 single-stream blocks in two), from 1
            to the smaller stack's block count (20), a stack it does not divide zero-padded. None: resident. Same
            values as resident.
          offload_overlap: with offloading, copy the next chunk while the current one computes (at most two chunks
            in device memory); False: copy, wait, compute, wait (one chunk).
          progress: show the loading stage.
          compile_cache: JAX's persistent compilation cache (:func:`vidax.core.compile_cache.enable_for_api`).

        Raises:
          CheckpointError: a missing part or tokenizer (named), a folder of the other task, components that do not
            fit each other, or weights that do not match their configuration (all mismatches listed).
          ValueError: a bad dtype, mesh or tp (a tp that does not divide the head count: the valid sizes listed), an
            unknown ``block_loop``, or an ``offload_chunk`` that is not an integer in ``[1, num_layers]`` (the sizes
            that need no padding listed); all raised before any weight is read.
        """
        dtype, text_encoder_dtype = check_dtype(dtype), check_dtype(text_encoder_dtype, "text_encoder_dtype")
        vae_dtype = check_dtype(vae_dtype, "vae_dtype")
        t0 = time.perf_counter()
        enable_for_api(compile_cache)
        trim_after_compiles()
        ckpt = resolve_checkpoint(folder)
        if ckpt.task != cls.TASK:
            use = "HunyuanVideoImageToVideoPipeline" if ckpt.task == "i2v" else "HunyuanVideoPipeline"
            raise CheckpointError(f"{ckpt.folder}: this is a HunyuanVideo {ckpt.task.upper()} checkpoint "
                                  f"({ckpt.pipeline_class}); {cls.__name__} runs {cls.TASK.upper()}: use {use}")
        check_tokenizers(ckpt)
        tcfg, vcfg = ckpt.transformer_config(), ckpt.vae_config()
        mesh = optional_mesh(dp, tp, sp, devices=devices)
        if mesh is not None:
            check_parallel(tcfg, mesh, HUNYUAN_VIDEO_RULES)
        plans = hv_block_loop.plans_for(tcfg, offload_chunk, block_loop)
        tparams, chunks, vparams, text = load_components(
            ckpt, tcfg, vcfg, dtype=dtype, vae_dtype=vae_dtype, text_encoder_dtype=text_encoder_dtype, mesh=mesh,
            rules=HUNYUAN_VIDEO_RULES, keep_text=keep_resident(text_encoder_residency), progress=progress, plans=plans)
        pipe = cls(ckpt, tcfg, tparams, vcfg, vparams, text, ckpt.scheduler_config(), attention, mesh=mesh,
                   block_chunks=chunks, offload_overlap=offload_overlap)
        pipe.load_seconds = time.perf_counter() - t0
        pipe.progress = progress
        return pipe

    # -- stages ----------------------------------------------------------

    def encode_prompt(self, prompts: list[str], images: list | None = None) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``(prompt_embeds (B, L, 4096) float32, prompt_attention_mask (B, L) int32, pooled (B, 768) float32)``
        for ``prompts`` (and, image-to-video, one PIL image per prompt); see :mod:`vidax.models.hunyuanvideo.text`."""
        return self.text.encode(prompts, images)

    def make_scheduler(self, flow_shift: float | None = None):
        """The checkpoint's flow-matching Euler scheduler, its shift replaced by ``flow_shift`` if given.

        Raises:
          ValueError: a scheduler configuration the sampler does not support, or a bad shift.
        """
        overrides = {} if flow_shift is None else {"shift": float(flow_shift)}
        return scheduler_from_config(dict(self.scheduler_config), **overrides)

    def decode_latents(self, latents: jax.Array, tiling=None, on_chunk=None) -> np.ndarray:
        """``(B, C, T, h, w)`` diffusion latents -> float32 video ``(B, F, H, W, 3)`` in ``[0, 1]``."""
        z = jnp.asarray(latents, jnp.float32) / self.vae_cfg.scaling_factor
        video = np.asarray(hvae.decode(self.vae_params, self.vae_cfg, z, tiling=tiling, on_tile=on_chunk), np.float32)
        check_finite_video(video)
        return np.clip(video.transpose(0, 2, 3, 4, 1) / 2 + 0.5, 0.0, 1.0)

    def latent_shape(self, batch: int, height: int, width: int, num_frames: int) -> tuple[int, int, int, int, int]:
        """The noise latents' shape ``(B, C, T, H / 8, W / 8)`` for these sizes."""
        s, t = self.vae_cfg.spatial_compression_ratio, self.vae_cfg.temporal_compression_ratio
        return (batch, self.noise_channels, (num_frames - 1) // t + 1, height // s, width // s)

    @property
    def noise_channels(self) -> int:
        """Latent channels of the noise (the transformer's input channels for text-to-video)."""
        return self.transformer_cfg.in_channels

    @property
    def compute_dtype(self) -> np.dtype:
        """The transformer's weight dtype (``from_pretrained``'s ``dtype``)."""
        return self.transformer_params["proj_out"]["kernel"].dtype  # (the blocks may be chunks: block_chunks)

    @property
    def block_loop(self) -> str:
        """``"scan"``, ``"host"`` (one-block chunks in device memory, a host loop) or ``"offload"`` (chunks streamed
        from host memory)."""
        return hv_block_loop.loop_name(self.block_chunks)

    def compile_step(self, params, x, t, context, mask, pooled, guidance, true_cfg, *, guided: bool):
        """Compile the transformer step for these inputs (placed as the call places them).

        Returns:
          ``step(params, x, t, context, mask, pooled, guidance, true_cfg) -> prediction``: the scanned :func:`_step`,
          or with chunked blocks (host block loop, offloading) its prologue, one block program per stack kind called
          per chunk, and its epilogue (:func:`vidax.models.hunyuanvideo.block_loop.compile_step`), same contract.
        """
        kw = dict(cfg=self.transformer_cfg, guided=guided, mesh=self.mesh, rules=self.rules)
        if self.block_chunks is None:
            return self._step.lower(params, x, t, context, mask, pooled, guidance, true_cfg,
                                    attention_impl=self.attention, **kw).compile()
        return hv_block_loop.compile_step(params, self.block_chunks, x, t, context, mask, pooled, guidance, true_cfg,
                                          attention=self.attention, overlap=self.offload_overlap, **kw)

    def transformer_tree(self) -> dict:
        """The transformer's whole parameter tree, both stacks stacked ``(layers, ...)`` whatever the block loop (a
        device copy with chunks; tools and tests)."""
        return hv_block_loop.stacked_tree(self.transformer_params, self.block_chunks)

    def __call__(
        self,
        prompt: str | list[str],
        negative_prompt: str | list[str] | None = None,
        *,
        image: Any = None,
        last_image: Any = None,
        height: int = 720,
        width: int = 1280,
        num_frames: int = 129,
        num_inference_steps: int = 50,
        guidance_scale: float = 6.0,
        true_cfg_scale: float = 1.0,
        flow_shift: float | None = None,
        seed: int = 0,
        latents: np.ndarray | None = None,
        vae_tiling: Any = None,
        output_type: str = "uint8",
        progress: bool | Progress | None = None,
    ) -> VideoOutput:
        """Generate videos.

        Args:
          prompt: one prompt or a list (batch).
          negative_prompt: used only with ``true_cfg_scale > 1`` (true classifier-free guidance), as the reference.
          image, last_image: must be None: this is a text-to-video checkpoint (image-to-video is
            :class:`HunyuanVideoImageToVideoPipeline` on an I2V folder).
          height, width: pixels, multiples of 16 (720 x 1280 for the release).
          num_frames: ``4k + 1`` frames (129).
          num_inference_steps: sampler steps.
          guidance_scale: the embedded guidance of the guidance-distilled transformer (6.0); not CFG.
          true_cfg_scale: with ``negative_prompt``, true CFG above 1 (two transformer evaluations per step).
          flow_shift: replaces the scheduler configuration's shift (7.0).
          seed: PRNG seed of the initial noise.
          latents: explicit initial latents float32 ``(B, 16, T', H/8, W/8)`` instead of noise.
          vae_tiling: decode in tiles: True (the reference's ``enable_tiling()`` sizes), a
            :class:`~vidax.models.hunyuanvideo.vae.VAETiling`, or None/False.
          output_type: "uint8" frames in [0, 255], or "float" frames in [0, 1].
          progress: show progress.

        Returns:
          :class:`vidax.video.VideoOutput` with frames ``(B, F, H, W, 3)`` at 24 fps.

        Raises:
          ValueError: an ``image`` or ``last_image``, invalid sizes, mismatched prompt batches or latents, a bad seed
            or guidance scale, an unknown output type.
        """
        if image is not None or last_image is not None:
            given = " and ".join(n for n, v in (("image", image), ("last_image", last_image)) if v is not None)
            raise ValueError(f"{self.folder} is a HunyuanVideo text-to-video checkpoint and takes no {given}: "
                             "image-to-video runs HunyuanVideoImageToVideoPipeline on an image-to-video folder "
                             "(HunyuanVideo-I2V)" + (", and HunyuanVideo has no last-frame conditioning"
                                                     if last_image is not None else ""))
        check_inputs(height, width, num_frames, output_type)
        return self._generate(prompt, negative_prompt, None, height=height, width=width, num_frames=num_frames,
                              num_inference_steps=num_inference_steps, guidance_scale=guidance_scale,
                              true_cfg_scale=true_cfg_scale, flow_shift=flow_shift, seed=seed, latents=latents,
                              vae_tiling=vae_tiling, output_type=output_type, progress=progress)

    def _guidance_input(self, guidance_scale: float, batch: int) -> jax.Array | None:
        """``guidance_scale * 1000`` per sample, rounded to the transformer dtype as the reference builds it
        (:func:`vidax.models.hunyuanvideo.transformer.guidance_input`); None for a transformer without a guidance
        embedder (the reference's image-to-video pipeline passes none; its text-to-video one passes it and the
        transformer ignores it)."""
        if not self.transformer_cfg.guidance_embeds:
            return None
        return jnp.asarray(guidance_input(guidance_scale, batch, self.compute_dtype))

    def _generate(self, prompt, negative_prompt, condition, *, height, width, num_frames, num_inference_steps,
                  guidance_scale, true_cfg_scale, flow_shift, seed, latents, vae_tiling, output_type,
                  progress) -> VideoOutput:
        """The sampling run behind both pipelines.

        ``condition``: None (text-to-video), or an :class:`_ImageCondition` (image-to-video): the images for the
        text encoder, the image latents and how the model input and the step are assembled from them.
        """
        tcfg = self.transformer_cfg
        prompts, negatives = prompt_batch(prompt, negative_prompt)
        guidance_scale = check_guidance(guidance_scale)
        true_cfg_scale = check_guidance(true_cfg_scale, "true_cfg_scale")
        seed = check_seed(seed)
        guided = true_cfg_scale > 1.0 and negative_prompt is not None  # diffusers' do_true_cfg
        b = len(prompts)
        shape = self.latent_shape(b, height, width, num_frames)
        if latents is not None and tuple(np.shape(latents)) != shape:
            raise ValueError(f"latents have shape {tuple(np.shape(latents))}, expected {shape} (B, C, T, H, W) for "
                             "these sizes")
        check_parallel(tcfg, self.mesh, self.rules, batch=2 * b if guided else b)
        scheduler = self.make_scheduler(flow_shift)
        # None: the reference's default (frame tiles only); True: its enable_tiling() (frames and space).
        tiling = hvae.VAETiling() if vae_tiling is True else (vae_tiling or None)
        progress = as_progress(self.progress if progress is None else progress)
        metrics: dict[str, Any] = {"load_s": self.load_seconds}

        t0 = time.perf_counter()
        with progress.stage("text encoder"):
            images = None if condition is None else condition.text_images(b)
            embeds, mask, pooled = self.encode_prompt(prompts, images)
            if guided:  # [negative, prompt] in one batch, as CogVideoX (the reference runs them one after the other)
                neg_images = None if condition is None else condition.negative_text_images(b, height, width)
                n_embeds, n_mask, n_pooled = self.encode_prompt(negatives, neg_images)
                embeds, n_embeds = _same_length(embeds, n_embeds)
                mask, n_mask = _same_length(mask, n_mask)
                embeds = jnp.concatenate([n_embeds, embeds])
                mask = jnp.concatenate([n_mask, mask])
                pooled = jnp.concatenate([n_pooled, pooled])
            dtype = self.compute_dtype
            context, pooled = embeds.astype(dtype), pooled.astype(dtype)
            mask = jnp.asarray(mask, jnp.int32)
            jax.block_until_ready((context, pooled, mask))
        metrics["text_encoder_s"] = time.perf_counter() - t0

        n = int(num_inference_steps)
        state = scheduler.set_timesteps(n, sigmas=np.linspace(1.0, 0.0, n + 1)[:-1])
        key = jax.random.key(seed)
        if latents is None:
            x = jax.random.normal(key, shape, jnp.float32)
        else:
            x = jnp.asarray(latents, jnp.float32)
        if condition is not None:
            t0 = time.perf_counter()
            with progress.stage("VAE encode"):
                x = condition.prepare(self, x)
                jax.block_until_ready(x)
            metrics["vae_encode_s"] = time.perf_counter() - t0
        guidance = self._guidance_input(guidance_scale, b)
        metrics.update(parallel_metrics(self.mesh, self.rules, tcfg.num_attention_heads, self.attention))
        aux_device = first_device(self.vae_params)
        rules = self.rules
        x_in = x if condition is None else condition.model_input(x)
        x_in, guidance, true_cfg = to_mesh((x_in, guidance, jnp.float32(true_cfg_scale)), self.mesh, rules)
        context, mask, pooled = to_mesh((context, mask, pooled), self.mesh, rules, split_batch=True)

        with mesh_context(self.mesh):
            t0 = time.perf_counter()
            tb0 = to_mesh(jnp.zeros((b,), jnp.float32), self.mesh, rules)
            with progress.stage("compiling"), recording() as ran:
                compiled = self.compile_step(self.transformer_params, x_in, tb0, context, mask, pooled, guidance,
                                             true_cfg, guided=guided)
            self._attention_ran = metrics["attention"] = ran_label(ran, self.attention, self._attention_ran)
            metrics["compile_s"] = time.perf_counter() - t0
            metrics.update(hv_block_loop.block_metrics(self.block_chunks, self.offload_overlap))

            step_times = []
            with progress.stage("denoising", total=n, unit="step") as stage:
                for i in range(n):
                    ts = time.perf_counter()
                    tb = to_mesh(jnp.full((b,), state.timesteps[i], jnp.float32), self.mesh, rules)
                    x_in = x if condition is None else condition.model_input(x)
                    x_in = to_mesh(x_in, self.mesh, rules)
                    pred = compiled(self.transformer_params, x_in, tb, context, mask, pooled, guidance, true_cfg)
                    if condition is None:
                        x, state = scheduler.step(state, pred, x, i)
                    else:
                        x, state = condition.step(scheduler, state, pred, x, i)
                    jax.block_until_ready(x)
                    step_times.append(time.perf_counter() - ts)
                    stage.update()
        metrics["step_s"] = float(np.median(step_times)) if step_times else 0.0
        metrics["sampling_s"] = float(np.sum(step_times))

        t0 = time.perf_counter()
        if self.mesh is not None:
            x = jax.device_put(x, aux_device)
        with progress.stage("VAE decode", unit="chunk") as stage:
            frames = self.decode_latents(x, tiling, on_chunk=stage.update)
        if condition is not None:
            frames = condition.output_frames(frames)
        metrics["vae_decode_s"] = time.perf_counter() - t0
        if output_type == "uint8":
            frames = np.round(frames * 255.0).astype(np.uint8)
        finish_metrics(metrics, height=height, width=width, num_frames=frames.shape[1], num_inference_steps=n,
                       fps=self.fps)
        return VideoOutput(frames=frames, fps=self.fps, metrics=metrics, latents=np.asarray(x))


def _same_length(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Two ``(B, L, ...)`` arrays right-padded with zeros to the same ``L`` (prompt and negative prompt batches)."""
    la, lb = a.shape[1], b.shape[1]
    if la == lb:
        return a, b

    def pad(x, to):
        widths = [(0, 0)] * x.ndim
        widths[1] = (0, to - x.shape[1])
        return jnp.pad(x, widths)

    top = max(la, lb)
    return pad(a, top), pad(b, top)


def _step(params, x, timestep, context, mask, pooled, guidance, true_cfg_scale, *, cfg, attention_impl, guided,
          mesh=None, rules=HUNYUAN_VIDEO_RULES):
    """One transformer evaluation, with true CFG over a ``[negative, prompt]`` batch when ``guided``.

    Args:
      x: the model input ``(B, C_in, T, H, W)`` (noise latents, or image-to-video's assembled input), float32.
      timestep: float32 ``(B,)`` in ``[0, 1000]``.
      context, mask, pooled: ``(2B, L, D)``, ``(2B, L)``, ``(2B, P)`` if ``guided`` else ``B`` rows.
      guidance: float32 ``(B,)``: ``guidance_scale * 1000`` (ignored by a transformer without a guidance embedder).
      true_cfg_scale: float32 scalar.

    Returns:
      float32 ``(B, C_out, T, H, W)`` (replicated on a mesh).
    """
    kw = dict(cfg=cfg, attention_impl=attention_impl, mesh=mesh, rules=rules)
    x = x.astype(context.dtype)  # the reference feeds latents in the transformer dtype
    if not guided:
        return replicated(forward(params, x, timestep, context, mask, pooled, guidance, **kw), mesh)
    both = forward(params, jnp.concatenate([x, x]), jnp.concatenate([timestep, timestep]), context, mask, pooled,
                   None if guidance is None else jnp.concatenate([guidance, guidance]), **kw)
    neg, pos = jnp.split(both.astype(jnp.float32), 2)
    return replicated(neg + true_cfg_scale * (pos - neg), mesh)


class _ImageCondition:
    """The image-to-video conditioning of one call (diffusers ``HunyuanVideoImageToVideoPipeline``).

    ``latent_concat`` (the first HunyuanVideo-I2V release, 33 input channels): the model input is
    ``[latents, image_latents, mask]`` on the channel axis, with the image latents and the mask (1) on the first
    latent frame only and zeros after; the first 4 decoded frames are dropped. ``token_replace`` (the later release):
    the model input's first latent frame is the image latents, and only frames 1.. are stepped.

    In both the initial latents are ``0.999 noise + 0.001 image_latents`` (the image latents repeated over time), as the
    reference's ``prepare_latents``.
    """

    def __init__(self, pipe: HunyuanVideoImageToVideoPipeline, images: list, height: int, width: int):
        self.kind = pipe.transformer_cfg.image_condition_type
        self.images = images  # PIL RGB images, one per prompt
        self.pixels = np.stack([vae_pixels(img, height, width) for img in images])  # (B, 3, H, W) in [-1, 1]
        self.image_latents = None

    def text_images(self, batch: int) -> list:
        return self.images

    def negative_text_images(self, batch: int, height: int, width: int) -> list:
        """True CFG's negative prompt is encoded with a black image of the video's size, as the reference."""
        from PIL import Image

        return [Image.new("RGB", (width, height), 0)] * batch

    def prepare(self, pipe, noise: jax.Array) -> jax.Array:
        """Image latents (the mode of the VAE posterior, scaled) and the initial latents."""
        z = pipe.encode_image(self.pixels)  # (B, C, 1, h, w)
        frames = noise.shape[2]
        full = jnp.broadcast_to(z, (*z.shape[:2], frames, *z.shape[3:]))
        x = noise * I2V_NOISE_T + full * (1 - I2V_NOISE_T)
        if self.kind == "latent_concat":
            self.image_latents = jnp.concatenate([z, jnp.zeros_like(full[:, :, 1:])], axis=2)
            mask = jnp.zeros((z.shape[0], 1, *full.shape[2:]), jnp.float32).at[:, :, 0].set(1.0)
            self.mask = mask
        else:
            self.image_latents = z
        return x

    def model_input(self, x: jax.Array) -> jax.Array:
        if self.kind == "latent_concat":
            return jnp.concatenate([x, self.image_latents, self.mask], axis=1)
        return jnp.concatenate([self.image_latents, x[:, :, 1:]], axis=2)

    def step(self, scheduler, state, pred, x, i):
        if self.kind == "latent_concat":
            return scheduler.step(state, pred, x, i)
        rest, state = scheduler.step(state, pred[:, :, 1:], x[:, :, 1:], i)
        return jnp.concatenate([self.image_latents, rest], axis=2), state

    def output_frames(self, frames: np.ndarray) -> np.ndarray:
        return frames[:, LATENT_CONCAT_DROPPED_FRAMES:] if self.kind == "latent_concat" else frames


class HunyuanVideoImageToVideoPipeline(HunyuanVideoPipeline):
    """HunyuanVideo-I2V: the first frame given, the rest generated (both releases: ``latent_concat`` and
    ``token_replace``; see :class:`_ImageCondition`).

    The image conditions the video twice: through the VAE (its latents in the model input) and through LLaVA (its
    576 CLIP-L/336 tokens in the prompt; :mod:`vidax.models.hunyuanvideo.text`). It is resized to ``height x width``
    as the reference's ``VideoProcessor.preprocess`` does (Pillow Lanczos, no crop). Without a size the original
    release's bucket for the image's aspect ratio is used (:func:`vidax.models.hunyuanvideo.presets.size_for_image`;
    diffusers needs a size).

    Example::

        pipe = HunyuanVideoImageToVideoPipeline.from_pretrained("HunyuanVideo-I2V", dtype="bfloat16", tp=4)
        out = pipe("a man waves a firework stick", image="man.jpg", num_frames=129)
    """

    TASK = "i2v"

    @property
    def noise_channels(self) -> int:
        if self.transformer_cfg.image_condition_type == "latent_concat":
            return (self.transformer_cfg.in_channels - 1) // 2
        return self.transformer_cfg.in_channels

    def encode_image(self, pixels: np.ndarray) -> jax.Array:
        """``(B, 3, H, W)`` pixels in ``[-1, 1]`` -> scaled image latents ``(B, C, 1, h, w)`` (posterior mode)."""
        x = jnp.asarray(pixels, jnp.float32)[:, :, None]
        mean, _ = hvae.encode(self.vae_params, self.vae_cfg, x)
        return hvae.scale_latents(self.vae_cfg, mean)

    def __call__(
        self,
        prompt: str | list[str],
        negative_prompt: str | list[str] | None = None,
        *,
        image: Any = None,
        last_image: Any = None,
        height: int | None = None,
        width: int | None = None,
        num_frames: int = 129,
        num_inference_steps: int = 50,
        guidance_scale: float = 1.0,
        true_cfg_scale: float = 1.0,
        flow_shift: float | None = None,
        i2v_resolution: str = "720p",
        seed: int = 0,
        latents: np.ndarray | None = None,
        vae_tiling: Any = None,
        output_type: str = "uint8",
        progress: bool | Progress | None = None,
    ) -> VideoOutput:
        """Generate videos that start from ``image``.

        Args:
          image: required: the first frame (a path, a PIL image or a uint8 array), or one per prompt.
          last_image: must be None (HunyuanVideo has no last-frame conditioning).
          height, width: pixels (multiples of 16); both None: the original release's bucket for the image's aspect
            ratio at ``i2v_resolution``.
          guidance_scale: embedded guidance (diffusers' I2V default 1.0; the original release's scripts use 6.0).
          i2v_resolution: ``"720p"``, ``"540p"`` or ``"360p"``: the bucket size when no size is given.
          Others: as :meth:`HunyuanVideoPipeline.__call__`. The ``latent_concat`` model returns ``num_frames - 4``
          frames (the reference drops the first four decoded frames).

        Raises:
          ValueError: no ``image``, a ``last_image``, a number of images other than the prompts', only one of
            height/width, an unknown ``i2v_resolution``; unreadable images (:class:`vidax.core.images.ImageError`);
            and what :meth:`HunyuanVideoPipeline.__call__` raises.
        """
        if image is None:
            raise ValueError(f"{type(self).__name__} needs image=: the first frame (a path, a PIL image or an RGB "
                             "array); text-to-video runs HunyuanVideoPipeline on a text-to-video folder")
        if last_image is not None:
            raise ValueError("HunyuanVideo has no last-frame conditioning: pass image= (the first frame) only")
        if (height is None) != (width is None):
            raise ValueError("pass both height and width, or neither (the size then follows the image)")
        if i2v_resolution not in I2V_BUCKET_BASE:
            raise ValueError(f"i2v_resolution must be one of {sorted(I2V_BUCKET_BASE)}, got {i2v_resolution!r}")
        check_inputs(height, width, num_frames, output_type)
        prompts, _ = prompt_batch(prompt)
        images = image if isinstance(image, (list, tuple)) else [image] * len(prompts)
        images = [load_image(img).convert("RGB") for img in images]
        if len(images) != len(prompts):
            raise ValueError(f"{len(images)} images for {len(prompts)} prompts; pass one image per prompt")
        if height is None:
            height, width = size_for_image(images[0].width, images[0].height, I2V_BUCKET_BASE[i2v_resolution])
        condition = _ImageCondition(self, images, height, width)
        return self._generate(prompt, negative_prompt, condition, height=height, width=width, num_frames=num_frames,
                              num_inference_steps=num_inference_steps, guidance_scale=guidance_scale,
                              true_cfg_scale=true_cfg_scale, flow_shift=flow_shift, seed=seed, latents=latents,
                              vae_tiling=vae_tiling, output_type=output_type, progress=progress)
