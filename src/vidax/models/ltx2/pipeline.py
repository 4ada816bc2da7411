"""LTX-2.5 text/image-to-video with audio: ``LTX2Pipeline``.

References: diffusers 0.42.1 ``pipelines/ltx2/pipeline_ltx2.py`` ``LTX2Pipeline.__call__`` (text-to-video) and
``pipeline_ltx2_image2video.py`` ``LTX2ImageToVideoPipeline.__call__`` (first-frame conditioning) for the dev path;
upstream Lightricks/LTX-2 (``ltx_pipelines/distilled.py`` stage 1, ``utils/samplers.py``
``euler_ancestral_denoising_loop``, ``ltx_core/components/diffusion_steps.py``) for the distilled path.

Dev path, as diffusers: the prompt and the negative prompt through the Gemma tokenizer, the Gemma text tower (every
hidden state) and the connectors; video latents (packed tokens, frame-major) and audio latents (``(B, L, C M)``)
drawn or given; the dev schedule (:func:`vidax.models.ltx2.schedule.dev_schedule`); per step the transformer's
passes (the ``[negative, positive]`` batch for CFG, the positive one with STG blocks perturbed, the positive one with
the audio<->video cross-attention isolated), guidance combined in x0 space (CFG, STG, modality isolation, then
``guidance_rescale``) for video and audio with their own scales, and the Euler step; then the timestep-conditioned
video VAE decode and the audio VAE + vocoder. Image-to-video keeps the first latent frame clean (per-token
timesteps ``t (1 - mask)``, the step applied to the other frames).

Distilled path, as upstream (diffusers runs the same sigmas through its plain Euler scheduler, a departure): the
eight fixed sigmas, one positive-prompt pass per step (no guidance), the ancestral Euler step (``eta = 1``) with
fresh noise per step and per modality, the conditioned tokens re-anchored after every step, the terminal step
taking the denoised prediction.

Device programs: the transformer is called only through ``self._forward`` (the signature of
:func:`vidax.models.ltx2.transformer._forward`; the mesh / offload variants slot in there), each distinct pass
(CFG batch, STG, modality) compiled once per call shape; the guidance combine and the step are one jitted program;
RoPE tables are built once per call. The Gemma weights are loaded on demand and freed after encoding on
accelerators (``text_encoder_residency``).
"""

from __future__ import annotations

import math
import os
import time
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec
import numpy as np

from vidax.core.attention import AttentionImpl, ran_label, recording
from vidax.core.compile_cache import enable_for_api
from vidax.core.inputs import check_dtype, check_finite_video, check_seed, is_integer
from vidax.core.progress import Progress, as_progress
from vidax.core.residency import OnDemand, keep_resident
from vidax.models.ltx2 import schedule as sched
from vidax.video import VideoOutput, finish_metrics

#: diffusers ``pipelines/ltx2/utils.py`` ``DEFAULT_NEGATIVE_PROMPT`` (upstream ltx-pipelines' constants), used when
#: ``negative_prompt`` is None.
DEFAULT_NEGATIVE_PROMPT = (
    "blurry, out of focus, overexposed, underexposed, low contrast, washed out colors, excessive noise, "
    "grainy texture, poor lighting, flickering, motion blur, distorted proportions, unnatural skin tones, "
    "deformed facial features, asymmetrical face, missing facial features, extra limbs, disfigured hands, "
    "wrong hand count, artifacts around text, inconsistent perspective, camera shake, incorrect depth of "
    "field, background too sharp, background clutter, distracting reflections, harsh shadows, inconsistent "
    "lighting direction, color banding, cartoonish rendering, 3D CGI look, unrealistic materials, uncanny "
    "valley effect, incorrect ethnicity, wrong gender, exaggerated expressions, wrong gaze direction, "
    "mismatched lip sync, silent or muted audio, distorted voice, robotic voice, echo, background noise, "
    "off-sync audio, incorrect dialogue, added dialogue, repetitive speech, jittery movement, awkward "
    "pauses, incorrect timing, unnatural transitions, inconsistent framing, tilted camera, flat lighting, "
    "inconsistent tone, cinematic oversaturation, stylized filters, or AI artifacts."
)

#: The reference's call defaults (``LTX2Pipeline.__call__``).
DEFAULTS = dict(num_inference_steps=30, guidance_scale=3.0, stg_scale=1.0, modality_scale=3.0, guidance_rescale=0.7,
                audio_guidance_scale=7.0, audio_stg_scale=1.0, audio_modality_scale=3.0, audio_guidance_rescale=0.7,
                spatio_temporal_guidance_blocks=(28,))

#: Image-conditioning H.264 CRF (diffusers ``resolve_default_image_crf``): 18 for the Gemma 4 (LTX-2.5) generation,
#: 33 before.
LTX2_5_IMAGE_CRF, DEFAULT_IMAGE_CRF = 18, 33

#: Upstream's per-step noise generator is seeded ``seed + 10000`` (``ANCESTRAL_NOISE_SEED_OFFSET``).
ANCESTRAL_NOISE_SEED_OFFSET = 10000

MAX_SIDE = 8192
MAX_FRAMES = 8 * 256 + 1


# --------------------------------------------------------------------------- input checks (before anything heavy)


def check_sizes(height: Any, width: Any, num_frames: Any, spatial: int = 32, temporal: int = 8) -> None:
    """Validate the output size: ``height`` / ``width`` multiples of ``spatial`` in ``[spatial, 8192]``,
    ``num_frames`` = ``temporal k + 1`` in ``[1, 2049]``.

    Raises:
      ValueError: naming the argument and the nearest valid values.
    """
    for name, v in (("height", height), ("width", width)):
        if not is_integer(v):
            raise ValueError(f"{name} must be an integer multiple of {spatial}, got {v!r}")
        if v < spatial or v % spatial or v > MAX_SIDE:
            lo = min(max(v // spatial * spatial, spatial), MAX_SIDE)
            hi = min(lo + spatial, MAX_SIDE)
            near = f"{lo} or {hi}" if lo != hi and spatial <= v <= MAX_SIDE else f"{lo}"
            raise ValueError(f"{name}={v} must be a multiple of {spatial} from {spatial} to {MAX_SIDE}: use {near}")
    if not is_integer(num_frames):
        raise ValueError(f"num_frames must be an integer {temporal}k + 1, got {num_frames!r}")
    if num_frames < 1 or (num_frames - 1) % temporal or num_frames > MAX_FRAMES:
        lo = min(max((num_frames - 1) // temporal * temporal + 1, 1), MAX_FRAMES)
        hi = min(lo + temporal, MAX_FRAMES)
        near = f"{lo} or {hi}" if lo != hi and 1 <= num_frames <= MAX_FRAMES else f"{lo}"
        raise ValueError(f"num_frames={num_frames} must be {temporal}k + 1 from 1 to {MAX_FRAMES}: use {near}")


def _check_scale(name: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) or not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {v!r}")
    if not -1e4 <= float(v) <= 1e4:
        raise ValueError(f"{name}={v} is out of range (|value| <= 10000)")
    return float(v)


# --------------------------------------------------------------------------- latents layout (LTX2Pipeline)


def pack_latents(latents: jax.Array) -> jax.Array:
    """``(B, C, F, H, W)`` -> ``(B, F H W, C)`` tokens, frame-major (``_pack_latents`` with patch sizes 1)."""
    b, c, f, h, w = latents.shape
    return jnp.asarray(latents).transpose(0, 2, 3, 4, 1).reshape(b, f * h * w, c)


def unpack_latents(tokens: jax.Array, f: int, h: int, w: int) -> jax.Array:
    """Inverse of :func:`pack_latents`."""
    b, _, c = tokens.shape
    return jnp.asarray(tokens).reshape(b, f, h, w, c).transpose(0, 4, 1, 2, 3)


def _rescale(guided: jax.Array, cond: jax.Array, r: float) -> jax.Array:
    """``rescale_noise_cfg``: unbiased standard deviations over every axis but the batch, as torch's ``std``."""
    axes = tuple(range(1, cond.ndim))
    std_c = jnp.std(cond, axis=axes, keepdims=True, ddof=1)
    std_g = jnp.std(guided, axis=axes, keepdims=True, ddof=1)
    return r * (guided * (std_c / std_g)) + (1 - r) * guided


def _guided_x0(x, v, v_stg, v_mod, sigma, scales, cfg: bool, rescale: bool):
    """The guided x0 of one modality (``LTX2Pipeline.__call__``'s delta formulation). ``v``: ``(2, ...)``
    ``[negative, positive]`` with CFG, else ``(1, ...)``; ``scales``: (guidance, stg, modality, rescale)."""
    g_cfg, g_stg, g_mod, g_res = scales
    if cfg:
        x0 = x - v[1:] * sigma
        delta = (g_cfg - 1) * (x0 - (x - v[:1] * sigma))
    else:
        x0 = x - v * sigma
        delta = 0.0
    if v_stg is not None:
        delta = delta + g_stg * (x0 - (x - v_stg * sigma))
    if v_mod is not None:
        delta = delta + (g_mod - 1) * (x0 - (x - v_mod * sigma))
    guided = x0 + delta
    return _rescale(guided, x0, g_res) if rescale else guided


@partial(jax.jit, static_argnames=("cfg", "rescale_video", "rescale_audio"))
def _dev_step(x, a, v, av, v_stg, a_stg, v_mod, a_mod, sigma, sigma_next, video_scales, audio_scales, keep,
              *, cfg: bool, rescale_video: bool, rescale_audio: bool):
    """Guidance in x0 space, back to velocity, the Euler step; ``keep`` ``(1, S, 1)`` 1 on the conditioned tokens
    (left as they are: the image-to-video pipeline steps frames ``1:`` only) or None."""
    x0 = _guided_x0(x, v, v_stg, v_mod, sigma, video_scales, cfg, rescale_video)
    a0 = _guided_x0(a, av, a_stg, a_mod, sigma, audio_scales, cfg, rescale_audio)
    x_new = sched.euler_step(x, (x - x0) / sigma, sigma, sigma_next)
    a_new = sched.euler_step(a, (a - a0) / sigma, sigma, sigma_next)
    if keep is not None:
        x_new = jnp.where(keep > 0, x, x_new)
    return x_new, a_new


@partial(jax.jit, static_argnames=("terminal",))
def _distilled_step(x, a, v, av, sigma, sigma_next, noise_v, noise_a, denoise_mask, clean, *, terminal: bool):
    """Upstream's ancestral loop step for both modalities: x0 = x - sigma_token v (``X0Model``), re-anchored
    (``post_process_latent``), then the terminal short-cut or the ancestral step and the re-anchoring again."""
    d = x - v * (sigma * denoise_mask)
    d = d * denoise_mask + clean * (1 - denoise_mask)
    ad = a - av * sigma
    if terminal:
        return d, ad
    x_new = sched.ancestral_step(x, d, sigma, sigma_next, noise_v)
    x_new = x_new * denoise_mask + clean * (1 - denoise_mask)
    return x_new, sched.ancestral_step(a, ad, sigma, sigma_next, noise_a)


# --------------------------------------------------------------------------- image conditioning


def apply_image_crf(image: np.ndarray, crf: int) -> np.ndarray:
    """Re-compress one RGB frame with H.264 at ``crf`` and decode it back (diffusers
    ``apply_image_conditioning_crf``, upstream ``media_io.preprocess``): the compression the model was trained on.

    Args:
      image: uint8 ``(H, W, 3)``. crf: 0 returns it unchanged.

    Returns:
      uint8 ``(H', W', 3)`` with ``H'``, ``W'`` rounded down to even sizes.
    """
    if crf == 0:
        return image
    import io

    import av

    with io.BytesIO() as buf:
        container = av.open(buf, "w", format="mp4")
        try:
            stream = container.add_stream("libx264", rate=1, options={"crf": str(crf), "preset": "veryfast"})
            h, w = image.shape[0] // 2 * 2, image.shape[1] // 2 * 2
            image = image[:h, :w]
            stream.height, stream.width = h, w
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24").reformat(format="yuv420p")
            container.mux(stream.encode(frame))
            container.mux(stream.encode())
        finally:
            container.close()
        data = buf.getvalue()
    with io.BytesIO(data) as buf:
        container = av.open(buf)
        try:
            stream = next(s for s in container.streams if s.type == "video")
            out = next(container.decode(stream))
        finally:
            container.close()
        return out.to_ndarray(format="rgb24")


def image_pixels(image, height: int, width: int, crf: int) -> np.ndarray:
    """A conditioning image as the VAE's input (``LTX2ImageToVideoPipeline``: CRF re-compression of the RGB
    image, then ``VideoProcessor(resample="bilinear").preprocess``: PIL bilinear resize to ``(width, height)``,
    ``/ 255``, ``2x - 1``).

    Returns:
      float32 ``(1, 3, 1, height, width)`` in ``[-1, 1]``.
    """
    from PIL import Image

    from vidax.core.images import load_image

    img = load_image(image).convert("RGB")
    if crf:
        img = Image.fromarray(apply_image_crf(np.asarray(img), crf))
    img = img.resize((width, height), resample=Image.Resampling.BILINEAR).convert("RGB")
    x = np.asarray(img).astype(np.float32) / 255.0
    return np.ascontiguousarray((2.0 * x - 1.0).transpose(2, 0, 1))[None, :, None]


# --------------------------------------------------------------------------- the pipeline


class LTX2Pipeline:
    """LTX-2 / LTX-2.5 text-to-video and image-to-video with audio (see the module docstring).

    Example::

        pipe = LTX2Pipeline.from_pretrained("LTX-2.5", dtype="bfloat16")
        out = pipe("a fox runs through snow, wind howling", height=704, width=1216, num_frames=121)
        write_video(out.frames[0], "fox.mp4", fps=out.fps, audio=out.audio[0], sample_rate=out.sample_rate)
    """

    def __init__(self, folder, *, tokenizer, text_encoder: OnDemand, text_cfg, connectors_params: dict,
                 connectors_cfg, transformer_params: dict, transformer_cfg, vae_params: dict, vae_cfg,
                 vae_encoder: OnDemand, audio_vae_params: dict, audio_vae_cfg, vocoder_params: dict, vocoder_cfg,
                 scheduler_config: dict, dtype: Any = "bfloat16", attention: str = "auto", forward=None,
                 image_crf: int = LTX2_5_IMAGE_CRF, vae_dtype: Any = None):
        from vidax.models.ltx2 import transformer as ltx_transformer

        self.folder = folder
        self.tokenizer = tokenizer
        self.text_encoder = text_encoder
        self.text_cfg = text_cfg
        self.connectors_params, self.connectors_cfg = connectors_params, connectors_cfg
        self.transformer_params, self.transformer_cfg = transformer_params, transformer_cfg
        self.vae_params, self.vae_cfg, self.vae_encoder = vae_params, vae_cfg, vae_encoder
        self.audio_vae_params, self.audio_vae_cfg = audio_vae_params, audio_vae_cfg
        self.vocoder_params, self.vocoder_cfg = vocoder_params, vocoder_cfg
        self.scheduler_config = scheduler_config
        self.compute_dtype = jnp.dtype(dtype)
        self.attention = AttentionImpl(attention)
        # The one seam to the transformer: a callable with transformer._forward's signature (positional arrays,
        # keyword statics); block_loop.make_forward's mesh / offload variants replace it.
        self._forward = forward if forward is not None else ltx_transformer._forward
        self.image_crf = image_crf
        self.vae_dtype = jnp.dtype(vae_params["latents_mean"].dtype) if vae_dtype is None else jnp.dtype(vae_dtype)
        self.diffusion_decoder: OnDemand | None = None  # loaded at the first decoder="diffusion" call
        self.diffusion_decoder_cfg = None
        self.distilled = False  # the layout / family marks a distilled checkpoint
        self.load_seconds = 0.0
        self.progress: bool | Progress = True
        self._attention_ran: str | None = None

    @property
    def fps(self) -> float:
        return 24.0

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike, *, dtype: Any = "bfloat16", vae_dtype: Any = "float32",
                        attention: str | None = None, dp: int = 1, tp: int = 1, sp: int = 1,
                        offload_chunk: int | None = None, offload_overlap: bool = True, block_loop: str | None = None,
                        text_encoder_residency: str | None = None, progress: bool | Progress | None = None,
                        compile_cache: bool | str | os.PathLike = True) -> LTX2Pipeline:
        """Load a diffusers LTX-2 folder (``LTX2Pipeline.save_pretrained``'s subfolders).

        Args:
          folder: the folder.
          dtype: the transformer's and the connectors' weight dtype (``bfloat16`` or ``float32``; AdaLN tables,
            embedders and norm scales stay float32). The Gemma text tower uses it too.
          vae_dtype: the video VAE's dtype. The audio VAE and the vocoder are float32.
          attention: attention implementation (:mod:`vidax.core.attention`; None: ``auto``).
          dp, tp, sp: the transformer's ``(data, tensor, sequence)`` mesh (:mod:`vidax.models.ltx2.sharding`: heads
            and FFN widths of both streams over ``tensor``, video and audio tokens over ``sequence``, the batch over
            ``data``); its weights are read already sharded. The text tower and the VAEs run on one device.
          offload_chunk: keep the transformer's blocks in host memory and stream them to the devices this many at a
            time (None: resident); offload_overlap: copy the next chunk while one computes.
          block_loop: ``"scan"``, ``"host"`` or ``"auto"`` / None (host loop on CPU, scan elsewhere)
            (:func:`vidax.models.ltx2.block_loop.plans_for`).
          text_encoder_residency: ``"free"`` (Gemma freed after each encoding, reloaded from the files),
            ``"resident"``, ``"auto"`` / None (freed on accelerators).
          progress: show the loading stage. compile_cache: JAX's persistent compilation cache.

        Raises:
          ValueError: a mesh the model cannot use (tp must divide the head counts and FFN widths), more devices
            than there are, a bad ``offload_chunk`` or ``block_loop``, a bad dtype; before any weight is read.
          CheckpointError: missing or mismatched components (named).
        """
        from vidax.core.sharding import optional_mesh
        from vidax.models.ltx2 import block_loop as ltx_loop
        from vidax.models.ltx2 import loading
        from vidax.models.ltx2 import sharding as ltx_sharding
        from vidax.models.ltx2 import vae as lvae
        from vidax.models.ltx2.layout import resolve_checkpoint

        for name, v in (("dp", dp), ("tp", tp), ("sp", sp)):
            if not is_integer(v) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        loop = block_loop or "auto"
        mesh = optional_mesh(dp, tp, sp)
        tcfg0 = resolve_checkpoint(folder).source("transformer").cfg  # the configuration alone, no weight read
        ltx_sharding.check_parallel(tcfg0, mesh)
        ltx_loop.plans_for(tcfg0, offload_chunk, loop)
        residency = text_encoder_residency or "auto"
        keep_text = keep_resident(residency)
        dtype = check_dtype(dtype)
        vae_dtype = check_dtype(vae_dtype, "vae_dtype")
        attention = AttentionImpl(attention or "auto")
        t0 = time.perf_counter()
        enable_for_api(compile_cache)
        tokenizer = loading.load_tokenizer(folder)
        sched_config = loading.scheduler_config(folder)
        sched.scheduler_settings(sched_config)
        model_type = loading.text_encoder_model_type(folder)
        crf = LTX2_5_IMAGE_CRF if model_type in ("gemma4_unified", "gemma4") else DEFAULT_IMAGE_CRF
        with as_progress(progress).stage("loading", total=6, unit="part") as stage:
            tparams, tcfg = loading.load_component(
                folder, "transformer", dtype,
                shardings=ltx_sharding.param_shardings(tcfg0, mesh, offload_chunk, loop))
            stage.update()
            cparams, ccfg = loading.load_component(folder, "connectors", dtype)
            stage.update()
            eparams, ecfg = loading.load_component(folder, "text_encoder", dtype)
            stage.update()
            vparams, vcfg = loading.load_component(folder, "vae", vae_dtype)
            stage.update()
            aparams, acfg = loading.load_component(folder, "audio_vae", np.float32)
            stage.update()
            voparams, vocfg = loading.load_component(folder, "vocoder", np.float32)
            stage.update()
        text = OnDemand(lambda: loading.load_component(folder, "text_encoder", dtype)[0], eparams, keep=keep_text)
        encoder = OnDemand(lambda: loading.load_component(folder, "vae", vae_dtype, parts=lvae.ENCODER_PARTS)[0],
                           keep=keep_text)
        program = ltx_loop.make_forward(tparams, tcfg, mesh=mesh, offload_chunk=offload_chunk,
                                        overlap=offload_overlap, block_loop=loop, attention_impl=attention)
        tparams = getattr(program, "params", tparams)  # without "blocks" when they stream in chunks
        pipe = cls(folder, tokenizer=tokenizer, text_encoder=text, text_cfg=ecfg, connectors_params=cparams,
                   connectors_cfg=ccfg, transformer_params=tparams, transformer_cfg=tcfg, vae_params=vparams,
                   vae_cfg=vcfg, vae_encoder=encoder, audio_vae_params=aparams, audio_vae_cfg=acfg,
                   vocoder_params=voparams, vocoder_cfg=vocfg, scheduler_config=sched_config, dtype=dtype,
                   attention=attention, image_crf=crf, vae_dtype=vae_dtype, forward=program)
        pipe.check_components()
        if not keep_text:
            text.release()
        pipe.load_seconds = time.perf_counter() - t0
        pipe.progress = True if progress is None else progress
        return pipe

    def check_components(self) -> None:
        """The components fit each other (widths, channels), checked from their configurations.

        Raises:
          CheckpointError: naming the mismatch.
        """
        from vidax.checkpoint.errors import CheckpointError

        t, c, e = self.transformer_cfg, self.connectors_cfg, self.text_cfg
        a = self.audio_vae_cfg
        problems = []
        if e.hidden_size != c.caption_channels:
            problems.append(f"the text encoder is {e.hidden_size} wide, the connectors take {c.caption_channels}")
        if t.patch_size != 1 or t.patch_size_t != 1:
            problems.append(f"transformer patch sizes {(t.patch_size_t, t.patch_size)} (LTX-2 uses 1)")
        if t.in_channels != self.vae_cfg.latent_channels:
            problems.append(f"the transformer takes {t.in_channels} video channels, the VAE has "
                            f"{self.vae_cfg.latent_channels}")
        mel = (a.mel_bins or 64) // 4
        if t.audio_in_channels != a.latent_channels * mel:
            problems.append(f"the transformer takes {t.audio_in_channels} audio features, the audio VAE packs "
                            f"{a.latent_channels} x {mel}")
        if problems:
            raise CheckpointError(f"{self.folder}: components do not fit: " + "; ".join(problems))

    # -- stages ----------------------------------------------------------

    def _precision(self):
        import contextlib
        return jax.default_matmul_precision("highest") if self.compute_dtype == jnp.float32 else \
            contextlib.nullcontext()

    def encode_prompt(self, prompts: list[str], max_sequence_length: int = 1024):
        """Gemma + connectors: ``(video_ctx (B, L, D), audio_ctx (B, L, Da))`` float32 (the connectors' mask is all
        ones, so the transformer's text bias is zero and is not passed)."""
        from vidax.encoders import gemma
        from vidax.models.ltx2.connectors import encode_text

        ids, mask = self.tokenizer(prompts, max_sequence_length)
        with self._precision():
            hs = gemma.encode(self.text_encoder.get(), self.text_cfg, ids, mask, attention_impl=self.attention,
                              precision=None)
            video, audio, _ = encode_text(self.connectors_params, self.connectors_cfg, hs, mask,
                                          attention_impl=self.attention, precision=None)
            jax.block_until_ready((video, audio))
        self.text_encoder.release()
        return video, audio

    def encode_image(self, pixels: np.ndarray) -> jax.Array:
        """``(1, 3, 1, H, W)`` pixels -> normalised first-frame latents ``(1, C, 1, h, w)`` (the posterior's mode,
        ``(z - mean) / std``: ``_normalize_latents`` without the scaling factor, as the image-to-video pipeline)."""
        from vidax.models.ltx2 import vae as lvae

        params = self.vae_encoder.get()
        mean, _ = lvae.encode(params, self.vae_cfg, jnp.asarray(pixels, jnp.float32))
        self.vae_encoder.release()
        m = self.vae_params["latents_mean"].astype(jnp.float32).reshape(1, -1, 1, 1, 1)
        s = self.vae_params["latents_std"].astype(jnp.float32).reshape(1, -1, 1, 1, 1)
        return (mean.astype(jnp.float32) - m) / s

    def _normalize_video(self, latents) -> jax.Array:
        """``_normalize_latents`` with the VAE's scaling factor (explicit ``latents``)."""
        m = self.vae_params["latents_mean"].astype(jnp.float32).reshape(1, -1, 1, 1, 1)
        s = self.vae_params["latents_std"].astype(jnp.float32).reshape(1, -1, 1, 1, 1)
        return (jnp.asarray(latents, jnp.float32) - m) * self.vae_cfg.scaling_factor / s

    def _has_diffusion_decoder(self) -> bool:
        from vidax.models.ltx2.layout import resolve_checkpoint

        return resolve_checkpoint(self.folder).has_diffusion_decoder

    def _pass(self, x, a, ctx, actx, timestep, audio_timestep, sigma, ropes, stg=None, isolate=False,
              use_cross_timestep=True):
        """One transformer pass through ``self._forward``."""
        return self._forward(self.transformer_params, x, a, ctx, actx, timestep, audio_timestep, sigma, sigma, ropes,
                             None, None, None, stg, None, cfg=self.transformer_cfg,
                             attention_impl=self.attention.value, use_cross_timestep=use_cross_timestep,
                             isolate_modalities=isolate)

    def _diffusion_decoder(self) -> tuple[dict, Any]:
        """The diffusion decoder's ``(params, cfg)``, loaded at first use (in the VAE's dtype; freed after each
        decode on accelerators, as the text encoder)."""
        from vidax.models.ltx2 import loading

        if self.diffusion_decoder is None:
            params, cfg = loading.load_component(self.folder, "diffusion_decoder", self.vae_dtype)
            self.diffusion_decoder_cfg = cfg
            self.diffusion_decoder = OnDemand(
                lambda: loading.load_component(self.folder, "diffusion_decoder", self.vae_dtype)[0], params,
                keep=self.vae_encoder.keep)
        return self.diffusion_decoder.get(), self.diffusion_decoder_cfg

    # -- call ------------------------------------------------------------

    def __call__(self, prompt: str, negative_prompt: str | None = None, *, image: Any = None, last_image: Any = None,
                 height: int = 704, width: int = 1216, num_frames: int = 121, frame_rate: float = 24.0,
                 num_inference_steps: int | None = None, guidance_scale: float | None = None,
                 stg_scale: float | None = None, modality_scale: float | None = None,
                 guidance_rescale: float | None = None, audio_guidance_scale: float | None = None,
                 audio_stg_scale: float | None = None, audio_modality_scale: float | None = None,
                 audio_guidance_rescale: float | None = None, spatio_temporal_guidance_blocks: Any = None,
                 seed: int = 0, latents: Any = None, audio_latents: Any = None, noise: Any = None,
                 step_noises: Any = None, distilled: bool | None = None, image_crf: int | None = None,
                 decode_timestep: float = 0.0, decode_noise_scale: float | None = None,
                 use_cross_timestep: bool = True, max_sequence_length: int = 1024, return_audio: bool = True,
                 vae_tiling: Any = None, decoder: str = "conv", decoder_noise: Any = None, output_type: str = "uint8",
                 progress: bool | Progress | None = None) -> VideoOutput:
        """Generate a video and its audio track.

        Args:
          prompt, negative_prompt: text; ``negative_prompt`` None: :data:`DEFAULT_NEGATIVE_PROMPT` (unused without
            CFG and on the distilled path).
          image: the first frame (path, PIL image or uint8 array): image-to-video. last_image: not supported.
          height, width: pixels, multiples of 32. num_frames: ``8k + 1`` (121 default; no duration head: the
            LTX-2.5 duration prediction is not ported). frame_rate: the video's rate (RoPE time axis and audio
            length; ``VideoOutput.fps``).
          num_inference_steps: dev steps (default 30). guidance_scale, stg_scale, modality_scale, guidance_rescale
            and the audio_ ones: the reference's (3, 1, 3, 0.7 / 7, 1, 3, 0.7); the audio ones default to these
            defaults, not to the video values. spatio_temporal_guidance_blocks: block indices for STG (default
            the reference's ``[28]``, dropped on a model with fewer blocks, where the reference's STG term is 0;
            given indices must be blocks of the model).
          seed: the noise seed (JAX's PRNG: the same seed does not give the reference's torch noise).
          latents: explicit video latents ``(1, C, F, h, w)`` in the VAE's space (normalised with its statistics
            and scaling factor, as the reference does with unpacked latents); with an ``image`` the first latent
            frame is the condition (the image is then not encoded, as the reference).
          audio_latents: explicit ``(1, C, L, M)`` audio latents in the audio VAE's space (normalised).
          noise: the standard normal video noise ``(1, C, F, h, w)`` drawn when ``latents`` is None (to replay a
            reference's draws).
          step_noises: distilled only: per step ``(video (1, F h w, C), audio (1, L, C M))`` standard normal noise
            of the ancestral steps (default: drawn from ``seed + 10000``, as upstream seeds its loop).
          distilled: upstream's distilled sampling (8 fixed sigmas, no guidance, ancestral Euler); None: the
            pipeline's ``distilled`` attribute.
          image_crf: H.264 CRF of the conditioning image (None: 18 for LTX-2.5's Gemma 4 generation, 33 before;
            0: none).
          decode_timestep, decode_noise_scale: the timestep-conditioned VAE decode's (the reference's defaults).
          use_cross_timestep: LTX-2.3 / 2.5 cross-modal AdaLN timesteps. max_sequence_length: prompt tokens.
          return_audio: False skips the audio VAE and the vocoder (``audio`` / ``sample_rate`` None).
          vae_tiling: None (one decoder call, as the reference without ``enable_tiling``) or a
            :class:`vidax.core.ltx_tiling.LTXVideoTiling` (the reference's tiled / framewise decode).
          decoder: ``"conv"`` (the video VAE's decoder) or ``"diffusion"`` (the folder's ``diffusion_decoder``: the
            reference's ``output_type="latent"`` latents, denormalised with the VAE's statistics, through
            ``LTX2VideoDiffusionDecodePipeline(denormalize=False)``; :mod:`vidax.models.ltx2.diffusion_decoder`).
          decoder_noise: the diffusion decoder's canvas noise (its ``noise=``; default drawn from ``seed``).
          output_type: ``"uint8"`` or ``"float"`` (``[0, 1]``).

        Returns:
          :class:`vidax.video.VideoOutput`: ``frames (1, num_frames, height, width, 3)``, ``fps=frame_rate``,
          ``audio (1, channels, samples)`` float32 and ``sample_rate``, ``latents`` the final video latents
          ``(1, C, F, h, w)`` (normalised), metrics.

        Raises:
          ValueError: bad sizes (named, with the nearest valid values), scales, seeds, latents or noises of the
            wrong shape, guidance on the distilled path; all before any model runs.
        """
        tcfg, vcfg, acfg = self.transformer_cfg, self.vae_cfg, self.audio_vae_cfg
        sc, tc = vcfg.spatial_compression, vcfg.temporal_compression
        check_sizes(height, width, num_frames, sc, tc)
        if last_image is not None:
            raise ValueError("last_image: the LTX-2 pipeline conditions on a first frame only; pass image=")
        if output_type not in ("uint8", "float"):
            raise ValueError(f"output_type must be 'uint8' or 'float', got {output_type!r}")
        frame_rate = _check_scale("frame_rate", frame_rate)
        if not 0 < frame_rate <= 1000:
            raise ValueError(f"frame_rate={frame_rate} must be in (0, 1000]")
        seed = check_seed(seed)
        if not is_integer(max_sequence_length) or not 1 <= max_sequence_length <= 4096:
            raise ValueError(f"max_sequence_length must be an integer in 1..4096, got {max_sequence_length!r}")
        distilled = self.distilled if distilled is None else bool(distilled)
        f, h, w = (num_frames - 1) // tc + 1, height // sc, width // sc
        tokens = f * h * w
        audio_frames = acfg.latent_frames(num_frames, frame_rate)
        if audio_frames < 1:
            raise ValueError(f"num_frames={num_frames} at frame_rate={frame_rate} gives no audio latent frame")
        mel = (acfg.mel_bins or 64) // 4
        ca = acfg.latent_channels
        video_shape, audio_shape = (1, tcfg.in_channels, f, h, w), (1, ca, audio_frames, mel)
        for name, v, shape in (("latents", latents, video_shape), ("audio_latents", audio_latents, audio_shape),
                               ("noise", noise, video_shape)):
            if v is not None and tuple(np.shape(v)) != shape:
                raise ValueError(f"{name} must have shape {shape} for {num_frames} frames at {height}x{width} "
                                 f"({frame_rate} fps); got {tuple(np.shape(v))}")
        if distilled:
            for name, v, neutral in (("guidance_scale", guidance_scale, 1.0), ("stg_scale", stg_scale, 0.0),
                                     ("modality_scale", modality_scale, 1.0)):
                if v is not None and v != neutral:
                    raise ValueError(f"{name}={v}: the distilled model samples without guidance (leave it unset)")
            if num_inference_steps not in (None, len(sched.DISTILLED_SIGMA_VALUES) - 1):
                raise ValueError(f"num_inference_steps={num_inference_steps}: the distilled schedule has "
                                 f"{len(sched.DISTILLED_SIGMA_VALUES) - 1} fixed steps")
            sigmas, timesteps = sched.distilled_schedule()
            steps = len(timesteps)
            if step_noises is not None:
                if len(step_noises) != steps:
                    raise ValueError(f"step_noises must hold {steps} (video, audio) pairs, got {len(step_noises)}")
                for i, (nv, na) in enumerate(step_noises):
                    if tuple(np.shape(nv)) != (1, tokens, tcfg.in_channels) or \
                            tuple(np.shape(na)) != (1, audio_frames, tcfg.audio_in_channels):
                        raise ValueError(f"step_noises[{i}] must be ((1, {tokens}, {tcfg.in_channels}), "
                                         f"(1, {audio_frames}, {tcfg.audio_in_channels})); got "
                                         f"({np.shape(nv)}, {np.shape(na)})")
        else:
            if step_noises is not None:
                raise ValueError("step_noises: only the distilled sampler draws noise per step")
            sigmas, timesteps = sched.dev_schedule(self.scheduler_config, DEFAULTS["num_inference_steps"]
                                                   if num_inference_steps is None else num_inference_steps, tokens)
            steps = len(timesteps)

        def pick(name, v):
            return _check_scale(name, DEFAULTS[name] if v is None else v)

        gs, stg, ms, gr = (pick(n, v) for n, v in (("guidance_scale", guidance_scale), ("stg_scale", stg_scale),
                                                  ("modality_scale", modality_scale),
                                                  ("guidance_rescale", guidance_rescale)))
        ags, astg, ams, agr = (pick(n, v) for n, v in (
            ("audio_guidance_scale", audio_guidance_scale), ("audio_stg_scale", audio_stg_scale),
            ("audio_modality_scale", audio_modality_scale), ("audio_guidance_rescale", audio_guidance_rescale)))
        do_cfg = not distilled and (gs > 1 or ags > 1)
        do_stg = not distilled and (stg > 0 or astg > 0)
        do_mod = not distilled and (ms > 1 or ams > 1)
        stg_flags = None
        if do_stg and spatio_temporal_guidance_blocks is None:
            # The reference's default blocks that this model has. A smaller model than the release (a demo, a
            # tiny test model) may have none: diffusers then perturbs nothing and its STG term is 0, so the pass
            # is skipped here, the same result.
            blocks = [b for b in DEFAULTS["spatio_temporal_guidance_blocks"] if b < tcfg.num_layers]
            do_stg = bool(blocks)
        if do_stg:
            blocks = list(blocks if spatio_temporal_guidance_blocks is None else spatio_temporal_guidance_blocks)
            if not blocks:
                raise ValueError("spatio_temporal_guidance_blocks is empty but STG is on (stg_scale or "
                                 "audio_stg_scale > 0): give block indices or set both scales to 0")
            bad = [b for b in blocks if not is_integer(b) or not 0 <= b < tcfg.num_layers]
            if bad:
                raise ValueError(f"spatio_temporal_guidance_blocks {bad} are not blocks of this model "
                                 f"(0..{tcfg.num_layers - 1})")
            if not tcfg.perturbed_attn:
                raise ValueError("STG needs a transformer with perturbed_attn; set stg_scale=audio_stg_scale=0")
            flags = np.zeros((tcfg.num_layers,), bool)
            flags[blocks] = True
            stg_flags = (jnp.asarray(flags), jnp.zeros((1,), jnp.float32))
        if vae_tiling is not None:
            from vidax.core.ltx_tiling import LTXVideoTiling
            if not isinstance(vae_tiling, LTXVideoTiling):
                raise ValueError(f"vae_tiling must be None or an LTXVideoTiling, got {type(vae_tiling).__name__}")
        if decoder not in ("conv", "diffusion"):
            raise ValueError(f"decoder must be 'conv' (the VAE's decoder) or 'diffusion', got {decoder!r}")
        if decoder == "diffusion" and not self._has_diffusion_decoder():
            raise ValueError(f"decoder='diffusion': {self.folder} has no diffusion decoder (a diffusion_decoder/ "
                             "folder, or Lightricks' diffusion VAE file beside a release file); use the VAE's "
                             "decoder (decoder='conv')")
        if decoder_noise is not None and decoder != "diffusion":
            raise ValueError("decoder_noise is the diffusion decoder's; pass decoder='diffusion' with it")
        if image_crf is not None and (not is_integer(image_crf) or not 0 <= image_crf <= 51):
            raise ValueError(f"image_crf must be an integer in 0..51, got {image_crf!r}")
        pixels = None
        if image is not None and latents is None:
            pixels = image_pixels(image, height, width, self.image_crf if image_crf is None else image_crf)

        progress = as_progress(self.progress if progress is None else progress)
        metrics: dict[str, Any] = {"load_s": self.load_seconds, "vae_encode_s": 0.0}
        key = jax.random.key(seed)

        # -- text
        t0 = time.perf_counter()
        with progress.stage("prompt (Gemma + connectors)"):
            if do_cfg:
                neg = DEFAULT_NEGATIVE_PROMPT if negative_prompt is None else negative_prompt
                ctx, actx = self.encode_prompt([neg, prompt], max_sequence_length)
            else:
                ctx, actx = self.encode_prompt([prompt], max_sequence_length)
        metrics["text_encoder_s"] = time.perf_counter() - t0

        # -- latents
        if latents is not None:
            x = pack_latents(self._normalize_video(latents))
        else:
            n = jnp.asarray(noise, jnp.float32) if noise is not None else \
                jax.random.normal(jax.random.fold_in(key, 0), video_shape, jnp.float32)
            if pixels is not None:
                t1 = time.perf_counter()
                with progress.stage("VAE encode"):
                    z0 = self.encode_image(pixels)
                    jax.block_until_ready(z0)
                metrics["vae_encode_s"] = time.perf_counter() - t1
                n = n.at[:, :, :1].set(z0)
            x = pack_latents(n)
        if audio_latents is not None:
            from vidax.models.ltx2 import audio_vae as lavae
            a = lavae.pack_latents(lavae.normalize_latents(self.audio_vae_params, jnp.asarray(audio_latents,
                                                                                              jnp.float32)))
        else:
            a = jax.random.normal(jax.random.fold_in(key, 1), (1, audio_frames, ca * mel), jnp.float32)
        conditioned = image is not None
        keep = None
        if conditioned:
            keep = jnp.zeros((1, tokens, 1), jnp.float32).at[:, : h * w].set(1.0)

        # -- positions (once per call)
        from vidax.models.ltx2 import transformer as ltx_transformer

        vc = ltx_transformer.video_coords(tcfg, f, h, w, fps=frame_rate)
        ac = ltx_transformer.audio_coords(tcfg, audio_frames)
        ropes = jax.tree_util.tree_map(jnp.asarray, ltx_transformer.rope_tables(tcfg, vc, ac))

        rows = 2 if do_cfg else 1
        pos_ctx, pos_actx = (ctx[1:], actx[1:]) if do_cfg else (ctx, actx)
        video_scales = jnp.asarray([gs, stg, ms, gr], jnp.float32)
        audio_scales = jnp.asarray([ags, astg, ams, agr], jnp.float32)
        noise_key = jax.random.key(seed + ANCESTRAL_NOISE_SEED_OFFSET)
        # The latents committed to the device from the start: a step's outputs are, and a jitted program seeing an
        # uncommitted input at step 0 and a committed one at step 1 would compile twice.
        mesh = getattr(self._forward, "mesh", None)  # a mesh program's outputs are replicated on its mesh
        x, a = jax.device_put((x, a), NamedSharding(mesh, PartitionSpec()) if mesh is not None else jax.devices()[0])
        clean = x
        denoise_mask = (1.0 - keep) if keep is not None else jnp.ones((1, tokens, 1), jnp.float32)

        def timestep_inputs(t: np.float32, b: int):
            tt = jnp.full((b, 1), t, jnp.float32)
            vt = tt * (1.0 - keep[:, :, 0]) if keep is not None else tt
            return vt, tt

        metrics["compile_s"] = 0.0
        step_times = []
        with progress.stage("denoising", total=steps, unit="step") as stage, recording() as ran, self._precision():
            for i in range(steps):
                ts = time.perf_counter()
                sigma, sigma_next, t = sigmas[i], sigmas[i + 1], timesteps[i]
                if distilled:
                    vt, at = timestep_inputs(t, 1)
                    v, av = self._pass(x, a, ctx, actx, vt, at, at, ropes, use_cross_timestep=use_cross_timestep)
                    terminal = bool(sigma_next == 0)
                    if terminal:
                        nv = na = None
                    elif step_noises is not None:
                        nv, na = (jnp.asarray(step_noises[i][0], jnp.float32),
                                  jnp.asarray(step_noises[i][1], jnp.float32))
                    else:
                        kv, ka = jax.random.split(jax.random.fold_in(noise_key, i))
                        nv = jax.random.normal(kv, x.shape, jnp.float32)
                        na = jax.random.normal(ka, a.shape, jnp.float32)
                    x, a = _distilled_step(x, a, v, av, sigma, sigma_next, nv, na, denoise_mask, clean,
                                           terminal=terminal)
                else:
                    vt, at = timestep_inputs(t, rows)
                    xin = jnp.concatenate([x, x]) if do_cfg else x
                    ain = jnp.concatenate([a, a]) if do_cfg else a
                    v, av = self._pass(xin, ain, ctx, actx, vt, at, at, ropes,
                                       use_cross_timestep=use_cross_timestep)
                    v_stg = a_stg = v_mod = a_mod = None
                    if do_stg or do_mod:
                        vt1, at1 = vt[:1], at[:1]
                    if do_stg:
                        v_stg, a_stg = self._pass(x, a, pos_ctx, pos_actx, vt1, at1, at1, ropes, stg=stg_flags,
                                                  use_cross_timestep=use_cross_timestep)
                    if do_mod:
                        v_mod, a_mod = self._pass(x, a, pos_ctx, pos_actx, vt1, at1, at1, ropes, isolate=True,
                                                  use_cross_timestep=use_cross_timestep)
                    x, a = _dev_step(x, a, v, av, v_stg, a_stg, v_mod, a_mod, jnp.float32(sigma),
                                     jnp.float32(sigma_next), video_scales, audio_scales, keep, cfg=do_cfg,
                                     rescale_video=gr > 0, rescale_audio=agr > 0)
                jax.block_until_ready((x, a))
                step_times.append(time.perf_counter() - ts)
                stage.update()
        self._attention_ran = metrics["attention"] = ran_label(ran, self.attention, self._attention_ran)
        steady = float(np.median(step_times[1:])) if len(step_times) > 1 else 0.0
        metrics["compile_s"] += max(step_times[0] - steady, 0.0)
        metrics["step_s"] = steady if len(step_times) > 1 else step_times[0]
        metrics["sampling_s"] = float(np.sum(step_times))

        # -- decode
        from vidax.models.ltx2 import vae as lvae

        z = unpack_latents(x, f, h, w)
        t0 = time.perf_counter()
        with progress.stage("VAE decode" if decoder == "conv" else "diffusion decode"), self._precision():
            if decoder == "diffusion":
                from vidax.models.ltx2 import diffusion_decoder as ddec

                dparams, dcfg = self._diffusion_decoder()
                zd = lvae.denormalize_latents(self.vae_params, z, vcfg.scaling_factor)
                video = ddec.decode(dparams, dcfg, zd, seed=seed, noise=decoder_noise, denormalize=False)
                self.diffusion_decoder.release()
            else:
                dnoise = jax.random.normal(jax.random.fold_in(key, 2), z.shape, jnp.float32) \
                    if vcfg.timestep_conditioning else None
                zd, dt = lvae.prepare_decode_latents(self.vae_params, vcfg, z, decode_timestep, decode_noise_scale,
                                                     dnoise)
                video = lvae.decode(self.vae_params, vcfg, zd, dt, tiling=vae_tiling)
            video = np.asarray(jnp.clip(video.astype(jnp.float32) / 2 + 0.5, 0.0, 1.0))
        metrics["vae_decode_s"] = time.perf_counter() - t0
        metrics["decoder"] = decoder
        check_finite_video(video)
        frames = np.ascontiguousarray(video.transpose(0, 2, 3, 4, 1))
        if output_type == "uint8":
            frames = np.round(frames * 255.0).astype(np.uint8)
        audio = rate = None
        metrics["audio_decode_s"] = 0.0
        if return_audio:
            from vidax.models.ltx2 import audio_vae as lavae
            from vidax.models.ltx2.audio import decode_audio

            t0 = time.perf_counter()
            with progress.stage("audio decode"), self._precision():
                wave, rate = decode_audio(self.audio_vae_params, acfg, self.vocoder_params, self.vocoder_cfg,
                                          lavae.unpack_latents(a, mel))
                audio = np.asarray(wave, np.float32)
            metrics["audio_decode_s"] = time.perf_counter() - t0
        metrics.update(self._forward.metrics() if hasattr(self._forward, "metrics") else {"block_loop": "scan"})
        finish_metrics(metrics, height=height, width=width, num_frames=frames.shape[1], num_inference_steps=steps,
                       fps=frame_rate)
        return VideoOutput(frames=frames, fps=frame_rate, metrics=metrics, latents=np.asarray(z), audio=audio,
                           sample_rate=rate)
