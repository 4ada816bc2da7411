"""HunyuanVideo-1.5 text-to-video (:class:`HunyuanVideo15Pipeline`) and image-to-video
(:class:`HunyuanVideo15ImageToVideoPipeline`): prompt (and image) in, uint8 frames out.

Follows diffusers 0.42.1 ``pipelines/hunyuan_video1_5/pipeline_hunyuan_video1_5.py`` and
``pipeline_hunyuan_video1_5_image2video.py``, and the original repository (Tencent-Hunyuan/HunyuanVideo-1.5
``hyvideo/pipelines/hunyuan_video_pipeline.py``) where the two differ (docs/design.md, "HunyuanVideo-1.5"):

1. each prompt in Qwen2.5-VL's chat template with the release's system message, encoded by its language model (the
   hidden state two layers before the last, the template cropped, 1000 tokens, right padding); its quoted texts
   through the byT5 glyph encoder (zeros without any) (:mod:`vidax.models.hunyuanvideo15.text`);
2. image-to-video: the image resized to cover the video's size and centre-cropped, then encoded twice: by SigLIP
   (its 729 ``last_hidden_state`` tokens, the transformer's image stream) and by the VAE (the posterior mode, scaled:
   the condition latents of the first latent frame, with a mask of ones there); text-to-video feeds zero condition
   latents, a zero mask and no image stream (the reference's zeros, which the transformer masks out);
3. Gaussian latents ``(B, 32, (num_frames - 1) / 4 + 1, H / 16, W / 16)`` (``(B, C, T, H, W)``);
4. flow-matching Euler over ``sigmas = linspace(1, 0, n + 1)[:-1]`` shifted by the variant's ``flow_shift``;
5. classifier-free guidance as diffusers' ``ClassifierFreeGuidance`` guider: ``uncond + s (cond - uncond)`` (or the
   original formulation), optionally rescaled, only at the steps within its ``[start, stop)`` fraction and when
   ``s != 1``; the negative prompt defaults to ``""``. Both halves run in one ``[negative, prompt]`` batch;
6. the step-distilled (MeanFlow) transformer also takes the next step's timestep (0 at the last), as the original
   pipeline passes it (diffusers passes none);
7. latents divided by the VAE ``scaling_factor`` and decoded in the original's spatial tiles (256 px, overlap
   0.125; one tile at small sizes); frames ``clip(x / 2 + 0.5, 0, 1)``.

The sampling loop is a host loop around one compiled transformer step (compiled ahead of time, once per run; two
programs when the guider leaves some steps unguided). The sampler state stays float32 and the timesteps stay float32
as the original's (diffusers rounds both to the transformer dtype).

With ``dp * tp * sp > 1`` the transformer runs on a ``(data, tensor, sequence)`` mesh: its parameters are loaded
already sharded by :data:`vidax.models.hunyuanvideo15.sharding.HUNYUAN_VIDEO15_RULES`; the encoders and the VAE stay
on one device.
"""

from __future__ import annotations

import math
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
from vidax.core.placement import first_device, mesh_context, parallel_metrics, to_mesh
from vidax.core.progress import Progress, as_progress
from vidax.core.residency import keep_resident
from vidax.core.sharding import optional_mesh
from vidax.models.hunyuanvideo15 import block_loop as hv_block_loop
from vidax.models.hunyuanvideo15 import vae as hvae
from vidax.models.hunyuanvideo15.block_loop import TransformerInputs
from vidax.models.hunyuanvideo15.family import check_sizes
from vidax.models.hunyuanvideo15.layout import check_tokenizers, resolve_checkpoint
from vidax.models.hunyuanvideo15.loading import load_components, transformer_config, vae_config
from vidax.models.hunyuanvideo15.presets import BUCKET_BASE, closest_size
from vidax.models.hunyuanvideo15.sharding import HUNYUAN_VIDEO15_RULES, check_parallel
from vidax.schedulers import scheduler_from_config
from vidax.video import VideoOutput, finish_metrics

#: The VAE tiles the pipeline decodes in by default: the original pipeline's (256 px, overlap 0.125).
DEFAULT_TILING = hvae.ORIGINAL_TILING


def check_inputs(height: Any, width: Any, num_frames: Any, output_type: str = "uint8") -> None:
    """Sizes and output type, before any compute (:func:`vidax.models.hunyuanvideo15.family.check_sizes`).

    Raises:
      ValueError: every problem named with its fix.
    """
    check_sizes(height, width, num_frames)
    if output_type not in ("uint8", "float"):
        raise ValueError(f"output_type must be 'uint8' or 'float', got {output_type!r}")


class Guider:
    """diffusers' ``ClassifierFreeGuidance`` (``guiders/classifier_free_guidance.py``) from a
    ``guider/guider_config.json``.

    Attributes:
      guidance_scale: ``s``; guidance is off when ``s == 1`` (``s == 0`` with the original formulation).
      guidance_rescale: ``phi`` of ``rescale_noise_cfg`` (0: none).
      use_original_formulation: ``cond + s (cond - uncond)`` instead of ``uncond + s (cond - uncond)``.
      start, stop: the fraction of steps ``[start, stop)`` that are guided.
      enabled: guidance at all.
    """

    def __init__(self, config: dict, guidance_scale: float | None = None):
        def number(key, default):
            value = config.get(key, default)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise CheckpointError(f"guider config: {key}={value!r} should be a finite number")
            return float(value)

        def flag(key, default):
            value = config.get(key, default)
            if not isinstance(value, bool):
                raise CheckpointError(f"guider config: {key}={value!r} should be true or false")
            return value

        cls = config.get("_class_name", "ClassifierFreeGuidance")
        if cls != "ClassifierFreeGuidance":
            raise CheckpointError(f"guider config: {cls!r} is not supported (only ClassifierFreeGuidance)")
        self.guidance_scale = (number("guidance_scale", 7.5) if guidance_scale is None
                               else check_guidance(guidance_scale))
        self.guidance_rescale = number("guidance_rescale", 0.0)
        self.use_original_formulation = flag("use_original_formulation", False)
        self.start, self.stop = number("start", 0.0), number("stop", 1.0)
        self.enabled = flag("enabled", True)
        if not (0.0 <= self.start < 1.0 and self.start <= self.stop <= 1.0):
            raise CheckpointError(f"guider config: start={self.start}, stop={self.stop}: expected 0 <= start < 1 "
                                  "and start <= stop <= 1")
        if not 0.0 <= self.guidance_rescale <= 1.0:
            raise CheckpointError(f"guider config: guidance_rescale={self.guidance_rescale} should be in [0, 1]")

    @property
    def uses_negative(self) -> bool:
        """Whether a negative prompt is encoded at all (diffusers: ``guider._enabled and num_conditions > 1`` before
        the steps are known)."""
        return self.enabled and not self._close()

    def _close(self) -> bool:
        return math.isclose(self.guidance_scale, 0.0 if self.use_original_formulation else 1.0)

    def guided(self, step: int, num_inference_steps: int) -> bool:
        """``_is_cfg_enabled`` at ``step`` of ``num_inference_steps``."""
        if not self.enabled or self._close():
            return False
        return int(self.start * num_inference_steps) <= step < int(self.stop * num_inference_steps)

    def combine(self, both: jax.Array) -> jax.Array:
        """``[uncond, cond]`` predictions stacked on the batch axis -> the guided prediction (float32)."""
        uncond, cond = jnp.split(both.astype(jnp.float32), 2)
        base = cond if self.use_original_formulation else uncond
        pred = base + self.guidance_scale * (cond - uncond)
        if self.guidance_rescale > 0.0:  # rescale_noise_cfg: std over every axis but the batch
            axes = tuple(range(1, cond.ndim))
            std_cond = jnp.std(cond, axis=axes, keepdims=True, ddof=1)
            std_cfg = jnp.std(pred, axis=axes, keepdims=True, ddof=1)
            rescaled = pred * (std_cond / std_cfg)
            pred = self.guidance_rescale * rescaled + (1.0 - self.guidance_rescale) * pred
        return pred


def step_hooks(dtype: Any, guider: Guider | None):
    """The pipeline's work around the transformer in a compiled step (``prepare`` in its prologue, ``finish`` in its
    epilogue; :func:`vidax.models.hunyuanvideo15.block_loop.compile_step`).

    ``prepare(x, timestep, prompt_embeds, prompt_embeds_mask, prompt_embeds_2, prompt_embeds_mask_2, cond,
    image_embeds, timestep_r)``: the latents ``(B, 32, T, h, w)`` and the condition channels ``(B, 33, T, h, w)``
    concatenated (``[latents, condition latents, mask]``) in ``dtype``; with a ``guider`` the video inputs doubled
    for the ``[negative, prompt]`` batch (the text inputs come doubled). ``finish(prediction)``: the guided
    combination (float32 ``(B, 32, T, h, w)``), or the prediction in float32.
    """
    guided = guider is not None

    def prepare(x, t, emb, mask, emb2, mask2, cond, image_embeds, t_r):
        latents = jnp.concatenate([x, cond], axis=1).astype(dtype)  # [latents, condition latents, mask]
        if guided:
            latents, t = jnp.concatenate([latents, latents]), jnp.concatenate([t, t])
            image_embeds = None if image_embeds is None else jnp.concatenate([image_embeds, image_embeds])
            t_r = None if t_r is None else jnp.concatenate([t_r, t_r])
        return TransformerInputs(latents, t, emb.astype(dtype), mask, emb2.astype(dtype), mask2,
                                 None if image_embeds is None else image_embeds.astype(dtype), t_r)

    def finish(pred):
        return guider.combine(pred) if guided else pred.astype(jnp.float32)

    return prepare, finish


class HunyuanVideo15Pipeline:
    """HunyuanVideo-1.5 text-to-video, loaded once from a diffusers, official-release or converted folder.

    Example::

        pipe = HunyuanVideo15Pipeline.from_pretrained("ckpts", variant="720p_t2v", dtype="bfloat16", tp=4)
        out = pipe('a neon sign that says "OPEN" flickers in the rain', num_frames=121, num_inference_steps=30)
        write_video(out.frames[0], "open.mp4", fps=out.fps)
    """

    TASK = "t2v"

    def __init__(self, ckpt, transformer_cfg, transformer_params: dict, stacks: dict, vae_cfg, vae_params: dict,
                 text, image_encoder, attention: str = "auto", mesh=None, rules=HUNYUAN_VIDEO15_RULES,
                 offload_overlap: bool = True):
        self.ckpt = ckpt
        self.folder = ckpt.folder
        self.transformer_cfg = transformer_cfg
        self.transformer_params = transformer_params  # without the block stack when stacks are chunks
        self.stacks = stacks or None
        self.offload_overlap = offload_overlap
        self.vae_cfg = vae_cfg
        self.vae_params = vae_params
        self.text = text  # vidax.models.hunyuanvideo15.loading.TextEncoders
        self.image_encoder = image_encoder  # loading.ImageEncoder (image-to-video) or None
        self.scheduler_config = ckpt.scheduler_config()
        self.guider_config = ckpt.guider_config()
        self.attention = AttentionImpl(attention)
        self.mesh = mesh
        self.rules = rules
        self.load_seconds = 0.0
        self.progress: bool | Progress = True
        self._attention_ran: str | None = None

    @property
    def fps(self) -> int:
        """24: the frame rate of the release's videos."""
        return 24

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike, *, variant: str | None = None, dtype: Any = "bfloat16",
                        text_encoder_dtype: Any = "float32", image_encoder_dtype: Any = "float32",
                        vae_dtype: Any = "float32", attention: str = "auto", dp: int = 1, tp: int = 1, sp: int = 1,
                        devices: list | None = None, text_encoder_residency: str = "auto", block_loop: str = "auto",
                        offload_chunk: int | None = None, offload_overlap: bool = True,
                        progress: bool | Progress = True,
                        compile_cache: bool | str | os.PathLike = True) -> HunyuanVideo15Pipeline:
        """Load a HunyuanVideo-1.5 folder (diffusers layout, the official release's ``ckpts``, or ``vidax
        convert``'s).

        Args:
          folder: see :mod:`vidax.models.hunyuanvideo15.layout`.
          variant: the official release's transformer to run (``"480p_t2v"``, ``"720p_i2v_distilled"``, ...;
            :data:`~vidax.models.hunyuanvideo15.presets.VARIANTS`); None: the task's 720p one (or the one present).
            A diffusers or converted folder holds one transformer and ignores it.
          dtype: transformer weight dtype ("bfloat16" or "float32"); norms, embedders and modulation tables stay
            float32.
          text_encoder_dtype: Qwen2.5-VL's and byT5's weights (float32 by default: they run once per prompt).
          image_encoder_dtype: SigLIP's weights (image-to-video).
          vae_dtype: VAE dtype.
          attention: attention implementation (:mod:`vidax.core.attention`).
          dp, tp, sp: the transformer's mesh sizes; tp must divide the head count (16 for the release).
          devices: the mesh's devices (default all).
          text_encoder_residency: ``"free"`` frees the encoders after each encoding, ``"resident"`` keeps them,
            ``"auto"``: freed on accelerators, kept on the CPU backend.
          block_loop: ``"scan"``, ``"host"`` or ``"auto"`` (host on the CPU backend), as the other families
            (:mod:`vidax.models.hunyuanvideo15.block_loop`). Same values either way.
          offload_chunk: keep the 54 blocks in host memory and stream ``offload_chunk`` at a time to the devices
            (1 to 54; a size that does not divide 54 zero-pads the last chunk). None: resident.
          offload_overlap: copy the next chunk while the current one computes.
          progress: show the loading stage.
          compile_cache: JAX's persistent compilation cache (:func:`vidax.core.compile_cache.enable_for_api`).

        Raises:
          CheckpointError: a missing part, tokenizer or variant (named, with those present), a folder of the other
            task, components that do not fit each other, or weights that do not match their configuration.
          ValueError: a bad dtype, mesh or tp, an unknown ``block_loop``, or a bad ``offload_chunk``; all raised before
            any weight is read.
        """
        dtype = check_dtype(dtype)
        text_encoder_dtype = check_dtype(text_encoder_dtype, "text_encoder_dtype")
        image_encoder_dtype = check_dtype(image_encoder_dtype, "image_encoder_dtype")
        vae_dtype = check_dtype(vae_dtype, "vae_dtype")
        t0 = time.perf_counter()
        enable_for_api(compile_cache)
        trim_after_compiles()
        ckpt = resolve_checkpoint(folder, variant=variant, task=cls.TASK if variant is None else None)
        if ckpt.task != cls.TASK:
            use = "HunyuanVideo15ImageToVideoPipeline" if ckpt.task == "i2v" else "HunyuanVideo15Pipeline"
            what = f"variant {ckpt.variant}" if ckpt.variant else f"checkpoint ({ckpt.pipeline_class})"
            raise CheckpointError(f"{ckpt.folder}: this HunyuanVideo-1.5 {what} runs {ckpt.task.upper()}; "
                                  f"{cls.__name__} runs {cls.TASK.upper()}: use {use}")
        check_tokenizers(ckpt)
        tcfg, vcfg = transformer_config(ckpt), vae_config(ckpt)
        mesh = optional_mesh(dp, tp, sp, devices=devices)
        if mesh is not None:
            check_parallel(tcfg, mesh, HUNYUAN_VIDEO15_RULES)
        plans = hv_block_loop.plans_for(tcfg, offload_chunk, block_loop)
        attention_impl = AttentionImpl(attention)
        tparams, stacks, vparams, text, image = load_components(
            ckpt, tcfg, vcfg, dtype=dtype, vae_dtype=vae_dtype, text_encoder_dtype=text_encoder_dtype,
            image_encoder_dtype=image_encoder_dtype, mesh=mesh, rules=HUNYUAN_VIDEO15_RULES,
            keep_encoders=keep_resident(text_encoder_residency), progress=progress, plans=plans,
            attention=AttentionImpl.XLA if attention_impl == AttentionImpl.AUTO else attention_impl)
        pipe = cls(ckpt, tcfg, tparams, stacks, vcfg, vparams, text, image, attention, mesh=mesh,
                   offload_overlap=offload_overlap)
        pipe.load_seconds = time.perf_counter() - t0
        pipe.progress = progress
        return pipe

    # -- stages ----------------------------------------------------------

    def make_scheduler(self, flow_shift: float | None = None):
        """The checkpoint's flow-matching Euler scheduler, its shift replaced by ``flow_shift`` if given.

        Raises:
          ValueError: a scheduler configuration the sampler does not support, or a bad shift.
        """
        overrides = {} if flow_shift is None else {"shift": float(flow_shift)}
        return scheduler_from_config(dict(self.scheduler_config), **overrides)

    def make_guider(self, guidance_scale: float | None = None) -> Guider:
        """The checkpoint's guider (``guider/guider_config.json``, or the variant's scale), its scale replaced if
        given."""
        return Guider(self.guider_config, guidance_scale)

    def decode_latents(self, latents: jax.Array, tiling=DEFAULT_TILING, on_tile=None) -> np.ndarray:
        """``(B, 32, T, h, w)`` diffusion latents -> float32 video ``(B, F, H, W, 3)`` in ``[0, 1]``."""
        z = hvae.unscale_latents(self.vae_cfg, jnp.asarray(latents, jnp.float32))
        video = np.asarray(hvae.decode(self.vae_params, self.vae_cfg, z, tiling=tiling, on_tile=on_tile), np.float32)
        check_finite_video(video)
        return np.clip(video.transpose(0, 2, 3, 4, 1) / 2 + 0.5, 0.0, 1.0)

    def latent_shape(self, batch: int, height: int, width: int, num_frames: int) -> tuple[int, int, int, int, int]:
        """The noise latents' shape ``(B, 32, (F - 1) / 4 + 1, H / 16, W / 16)`` for these sizes."""
        return (batch, self.vae_cfg.latent_channels, hvae.latent_frames(self.vae_cfg, num_frames),
                height // self.vae_cfg.spatial_compression_ratio, width // self.vae_cfg.spatial_compression_ratio)

    @property
    def compute_dtype(self) -> np.dtype:
        """The transformer's weight dtype (``from_pretrained``'s ``dtype``)."""
        return self.transformer_params["proj_out"]["kernel"].dtype

    @property
    def block_loop(self) -> str:
        """``"scan"``, ``"host"`` or ``"offload"``."""
        return hv_block_loop.loop_name(self.stacks)

    def transformer_tree(self) -> dict:
        """The whole transformer parameter tree, the stack stacked (a device copy with chunks; tools and tests)."""
        return hv_block_loop.stacked_tree(self.transformer_params, self.stacks)

    def compile_step(self, args: tuple, guider: Guider | None):
        """Compile one sampler step's transformer evaluation for these inputs (placed as the call places them).

        ``args``: ``(x (B, 32, T, h, w) float32, timestep (B,), prompt_embeds, prompt_embeds_mask, prompt_embeds_2,
        prompt_embeds_mask_2, cond (B, 33, T, h, w), image_embeds or None, timestep_r or None)``, the text inputs
        ``2B`` rows ``[negative, prompt]`` when ``guider`` is given.

        Returns:
          ``step(params, args) -> float32 (B, 32, T, h, w)`` (guided when ``guider`` is given).
        """
        prepare, finish = step_hooks(self.compute_dtype, guider)
        return hv_block_loop.compile_step(
            self.transformer_params, self.stacks, args, cfg=self.transformer_cfg, attention=self.attention,
            prepare=prepare, finish=finish, mesh=self.mesh, rules=self.rules, overlap=self.offload_overlap)

    def __call__(
        self,
        prompt: str | list[str],
        negative_prompt: str | list[str] | None = None,
        *,
        image: Any = None,
        last_image: Any = None,
        height: int | None = None,
        width: int | None = None,
        num_frames: int = 121,
        num_inference_steps: int = 50,
        guidance_scale: float | None = None,
        flow_shift: float | None = None,
        seed: int = 0,
        latents: np.ndarray | None = None,
        vae_tiling: Any = None,
        output_type: str = "uint8",
        progress: bool | Progress | None = None,
    ) -> VideoOutput:
        """Generate videos.

        Args:
          prompt: one prompt or a list (batch). Text in double quotes (``"..."`` or curly quotes) is also given to
            the byT5 glyph encoder, for text rendered in the video.
          negative_prompt: the unconditional prompt of classifier-free guidance (default ``""``).
          image, last_image: must be None: this is a text-to-video checkpoint.
          height, width: pixels, multiples of 16; both None: the transformer's bucket size at 16:9 (1280x720 at
            720p, 848x480 at 480p), as diffusers.
          num_frames: ``4k + 1`` frames (121).
          num_inference_steps: sampler steps (50; the paper's rows 30; the step-distilled variant 12).
          guidance_scale: classifier-free guidance; None: the checkpoint guider's (6.0; 1.0 for the CFG-distilled
            variants, which then run one evaluation per step).
          flow_shift: replaces the scheduler configuration's shift (5 at 480p, 9 for 720p T2V, 7 for 720p I2V).
          seed: PRNG seed of the initial noise.
          latents: explicit initial latents float32 ``(B, 32, T', H/16, W/16)`` instead of noise.
          vae_tiling: None / True: the original's 256-pixel tiles (overlap 0.125); False: one call; or a
            :class:`~vidax.models.hunyuanvideo15.vae.VAETiling`.
          output_type: "uint8" frames in [0, 255], or "float" frames in [0, 1].
          progress: show progress.

        Returns:
          :class:`vidax.video.VideoOutput` with frames ``(B, F, H, W, 3)`` at 24 fps.

        Raises:
          ValueError: an ``image`` or ``last_image``, only one of height/width, invalid sizes, mismatched prompt
            batches or latents, a bad seed or guidance scale, an unknown output type.
        """
        if image is not None or last_image is not None:
            given = " and ".join(n for n, v in (("image", image), ("last_image", last_image)) if v is not None)
            raise ValueError(f"{self.folder} is a HunyuanVideo-1.5 text-to-video checkpoint and takes no {given}: "
                             "image-to-video runs HunyuanVideo15ImageToVideoPipeline on an image-to-video folder or "
                             "variant" + (", and HunyuanVideo-1.5 has no last-frame conditioning"
                                          if last_image is not None else ""))
        if (height is None) != (width is None):
            raise ValueError("pass both height and width, or neither (the transformer's 16:9 bucket size)")
        if height is None:
            height, width = closest_size(9, 16, self.transformer_cfg.target_size)
        check_inputs(height, width, num_frames, output_type)
        return self._generate(prompt, negative_prompt, None, height=height, width=width, num_frames=num_frames,
                              num_inference_steps=num_inference_steps, guidance_scale=guidance_scale,
                              flow_shift=flow_shift, seed=seed, latents=latents, vae_tiling=vae_tiling,
                              output_type=output_type, progress=progress)

    def _generate(self, prompt, negative_prompt, images, *, height, width, num_frames, num_inference_steps,
                  guidance_scale, flow_shift, seed, latents, vae_tiling, output_type, progress) -> VideoOutput:
        """The sampling run behind both pipelines (``images``: None, or one PIL image per prompt, already resized
        and cropped to ``height x width``)."""
        tcfg = self.transformer_cfg
        prompts, negatives = prompt_batch(prompt, "" if negative_prompt is None else negative_prompt)
        seed = check_seed(seed)
        n = int(num_inference_steps)
        if n < 1:
            raise ValueError(f"num_inference_steps must be at least 1, got {num_inference_steps}")
        guider = self.make_guider(guidance_scale)
        b = len(prompts)
        shape = self.latent_shape(b, height, width, num_frames)
        if latents is not None and tuple(np.shape(latents)) != shape:
            raise ValueError(f"latents have shape {tuple(np.shape(latents))}, expected {shape} (B, C, T, H, W) for "
                             "these sizes")
        guided_steps = [guider.guided(i, n) for i in range(n)]
        check_parallel(tcfg, self.mesh, self.rules, batch=2 * b if any(guided_steps) else b)
        scheduler = self.make_scheduler(flow_shift)
        tiling = DEFAULT_TILING if vae_tiling in (None, True) else (vae_tiling or None)
        progress = as_progress(self.progress if progress is None else progress)
        metrics: dict[str, Any] = {"load_s": self.load_seconds}

        t0 = time.perf_counter()
        with progress.stage("text encoder"):
            text = self.text.encode(prompts)
            if guider.uses_negative:  # [negative, prompt] in one batch
                neg = self.text.encode(negatives)
                text = tuple(jnp.concatenate([jnp.asarray(a), jnp.asarray(p)]) for a, p in zip(neg, text))
            text = tuple(jnp.asarray(a) for a in text)
            jax.block_until_ready(text)
        metrics["text_encoder_s"] = time.perf_counter() - t0

        state = scheduler.set_timesteps(n, sigmas=np.linspace(1.0, 0.0, n + 1)[:-1])
        if latents is None:
            x = jax.random.normal(jax.random.key(seed), shape, jnp.float32)
        else:
            x = jnp.asarray(latents, jnp.float32)
        cond = jnp.zeros((b, shape[1] + 1, *shape[2:]), jnp.float32)  # condition latents and mask: zero for T2V
        image_embeds = None
        if images is not None:
            t0 = time.perf_counter()
            with progress.stage("image encoder"):
                image_embeds = self.image_encoder.encode(images)
                jax.block_until_ready(image_embeds)
            metrics["image_encoder_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            with progress.stage("VAE encode"):
                cond = self.condition_latents(images, shape)
                jax.block_until_ready(cond)
            metrics["vae_encode_s"] = time.perf_counter() - t0
        metrics.update(parallel_metrics(self.mesh, self.rules, tcfg.num_attention_heads, self.attention))
        aux_device = first_device(self.vae_params)
        rules = self.rules
        full = text if any(guided_steps) else None
        cond_only = tuple(a[-b:] for a in text) if guider.uses_negative else text

        def timestep_r(i):
            if not tcfg.use_meanflow:
                return None
            r = state.timesteps[i + 1] if i + 1 < n else 0.0
            return to_mesh(jnp.full((b,), r, jnp.float32), self.mesh, rules)

        x, cond_m, image_m = to_mesh((x, cond, image_embeds), self.mesh, rules)  # replicated, as the prediction
        with mesh_context(self.mesh):
            t0 = time.perf_counter()
            programs = {}
            with progress.stage("compiling"), recording() as ran:
                for guided in sorted(set(guided_steps), reverse=True):
                    texts = to_mesh(full if guided else cond_only, self.mesh, rules, split_batch=True)
                    args = (x, to_mesh(jnp.zeros((b,), jnp.float32), self.mesh, rules),
                            *texts, cond_m, image_m, timestep_r(0))
                    programs[guided] = (self.compile_step(args, guider if guided else None), texts)
            self._attention_ran = metrics["attention"] = ran_label(ran, self.attention, self._attention_ran)
            metrics["compile_s"] = time.perf_counter() - t0
            metrics.update(hv_block_loop.block_metrics(self.stacks, self.offload_overlap))

            step_times = []
            with progress.stage("denoising", total=n, unit="step") as stage:
                for i in range(n):
                    ts = time.perf_counter()
                    compiled, texts = programs[guided_steps[i]]
                    tb = to_mesh(jnp.full((b,), state.timesteps[i], jnp.float32), self.mesh, rules)
                    args = (x, tb, *texts, cond_m, image_m, timestep_r(i))
                    pred = compiled(self.transformer_params, args)
                    x, state = scheduler.step(state, pred, x, i)
                    jax.block_until_ready(x)
                    step_times.append(time.perf_counter() - ts)
                    stage.update()
        metrics["step_s"] = float(np.median(step_times)) if step_times else 0.0
        metrics["sampling_s"] = float(np.sum(step_times))

        t0 = time.perf_counter()
        if self.mesh is not None:
            x = jax.device_put(x, aux_device)
        with progress.stage("VAE decode", unit="tile") as stage:
            frames = self.decode_latents(x, tiling, on_tile=stage.update)
        metrics["vae_decode_s"] = time.perf_counter() - t0
        if output_type == "uint8":
            frames = np.round(frames * 255.0).astype(np.uint8)
        finish_metrics(metrics, height=height, width=width, num_frames=frames.shape[1], num_inference_steps=n,
                       fps=self.fps)
        return VideoOutput(frames=frames, fps=self.fps, metrics=metrics, latents=np.asarray(x))


def crop_to_size(image, height: int, width: int):
    """An image resized to cover ``height x width`` and centre-cropped to it, as the original pipeline prepares the
    reference image (``get_image_condition_latents``: scale ``max(W / w, H / h)``, sizes rounded, Lanczos, then
    torchvision's ``CenterCrop``). diffusers' ``resize(..., resize_mode="crop")`` floors the resized size instead
    (docs/design.md).

    Returns:
      a PIL RGB image of ``width x height``.
    """
    from PIL import Image

    scale = max(width / image.width, height / image.height)
    w, h = int(round(image.width * scale)), int(round(image.height * scale))
    resized = image.convert("RGB").resize((w, h), resample=Image.Resampling.LANCZOS)
    top, left = int(round((h - height) / 2.0)), int(round((w - width) / 2.0))
    return resized.crop((left, top, left + width, top + height))


class HunyuanVideo15ImageToVideoPipeline(HunyuanVideo15Pipeline):
    """HunyuanVideo-1.5 image-to-video: the first frame given, the rest generated.

    The image conditions the video twice: through SigLIP (its 729 tokens, the transformer's image stream) and through
    the VAE (its latents as the first latent frame's condition channels, with a mask of ones there). It is resized to
    cover the video's size and centre-cropped (:func:`crop_to_size`). Without a size the release's bucket for the
    image's aspect ratio at the transformer's resolution (``target_size``: 640 at 480p, 960 at 720p) is used, as both
    references do.

    Example::

        pipe = HunyuanVideo15ImageToVideoPipeline.from_pretrained("ckpts", variant="480p_i2v", dtype="bfloat16")
        out = pipe("the cat turns its head to the camera", image="cat.png", num_frames=121)
    """

    TASK = "i2v"

    def condition_latents(self, images: list, shape: tuple[int, ...]) -> jax.Array:
        """The condition channels ``(B, 33, T, h, w)``: the images' scaled VAE latents (posterior mode) on the first
        latent frame and zeros after, then the mask (ones on the first latent frame)."""
        h, w = images[0].height, images[0].width  # already cropped to the video's size: no resampling
        pixels = np.stack([vae_pixels(img, h, w) for img in images])[:, :, None]  # (B, 3, 1, H, W) in [-1, 1]
        z = hvae.encode_latents(self.vae_params, self.vae_cfg, jnp.asarray(pixels))  # (B, 32, 1, h, w)
        b, c, t, h, w = shape
        first = jnp.zeros((b, c, t, h, w), jnp.float32).at[:, :, :1].set(z.astype(jnp.float32))
        mask = jnp.zeros((b, 1, t, h, w), jnp.float32).at[:, :, 0].set(1.0)
        return jnp.concatenate([first, mask], axis=1)

    def __call__(
        self,
        prompt: str | list[str],
        negative_prompt: str | list[str] | None = None,
        *,
        image: Any = None,
        last_image: Any = None,
        height: int | None = None,
        width: int | None = None,
        num_frames: int = 121,
        num_inference_steps: int = 50,
        guidance_scale: float | None = None,
        flow_shift: float | None = None,
        seed: int = 0,
        latents: np.ndarray | None = None,
        vae_tiling: Any = None,
        output_type: str = "uint8",
        progress: bool | Progress | None = None,
    ) -> VideoOutput:
        """Generate videos that start from ``image``.

        Args:
          image: required: the first frame (a path, a PIL image or a uint8 array), or one per prompt.
          last_image: must be None (HunyuanVideo-1.5 has no last-frame conditioning).
          height, width: pixels (multiples of 16); both None: the release's bucket for the first image's aspect
            ratio (:func:`vidax.models.hunyuanvideo15.presets.closest_size`).
          Others: as :meth:`HunyuanVideo15Pipeline.__call__`.

        Raises:
          ValueError: no ``image``, a ``last_image``, a number of images other than the prompts', only one of
            height/width; unreadable images (:class:`vidax.core.images.ImageError`); and what
            :meth:`HunyuanVideo15Pipeline.__call__` raises.
        """
        if image is None:
            raise ValueError(f"{type(self).__name__} needs image=: the first frame (a path, a PIL image or an RGB "
                             "array); text-to-video runs HunyuanVideo15Pipeline on a text-to-video folder or variant")
        if last_image is not None:
            raise ValueError("HunyuanVideo-1.5 has no last-frame conditioning: pass image= (the first frame) only")
        if (height is None) != (width is None):
            raise ValueError("pass both height and width, or neither (the size then follows the image)")
        check_inputs(height, width, num_frames, output_type)
        prompts, _ = prompt_batch(prompt)
        images = image if isinstance(image, (list, tuple)) else [image] * len(prompts)
        images = [load_image(img).convert("RGB") for img in images]
        if len(images) != len(prompts):
            raise ValueError(f"{len(images)} images for {len(prompts)} prompts; pass one image per prompt")
        if height is None:
            base = self.transformer_cfg.target_size
            height, width = closest_size(images[0].height, images[0].width, base)
        images = [crop_to_size(img, height, width) for img in images]
        return self._generate(prompt, negative_prompt, images, height=height, width=width, num_frames=num_frames,
                              num_inference_steps=num_inference_steps, guidance_scale=guidance_scale,
                              flow_shift=flow_shift, seed=seed, latents=latents, vae_tiling=vae_tiling,
                              output_type=output_type, progress=progress)


__all__ = ["BUCKET_BASE", "DEFAULT_TILING", "Guider", "HunyuanVideo15ImageToVideoPipeline", "HunyuanVideo15Pipeline",
           "crop_to_size", "step_hooks"]
