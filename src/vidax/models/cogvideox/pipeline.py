"""CogVideoX text-to-video (:class:`CogVideoXPipeline`) and image-to-video
(:class:`CogVideoXImageToVideoPipeline`): prompt (and image) in, uint8 frames out.

Follows diffusers ``pipelines/cogvideo/pipeline_cogvideox.py`` (``CogVideoXPipeline``):

1. prompts tokenized to 226 T5 tokens (right padding, ``</s>`` appended) and encoded by the
   T5 v1.1 encoder *without* an attention mask (the reference passes none: every padding
   token is attended and kept; paper Table 4 fault 2 is why the encoder runs in float32);
2. Gaussian latents ``(B, F', C, H/8, W/8)`` in the reference's ``(B, F, C, H, W)`` layout with
   ``F' = (num_frames - 1) / 4 + 1``; CogVideoX1.5 (``patch_size_t = 2``) pads ``F'`` to a
   multiple of 2 with extra frames that are dropped *from the front* before decoding;
3. position tables (2B sin-cos; 5B / 1.5 RoPE) built once on the host;
4. classifier-free guidance over a ``[negative, prompt]`` batch, ``uncond + g (cond - uncond)``,
   with the reference's dynamic ``g`` (:func:`vidax.schedulers.guidance_scale_at`) if asked;
5. the CogVideoX DDIM or DPM sampler (:mod:`vidax.schedulers.cogvideox`; DPM draws fresh noise
   every step, from a JAX key or from a caller's ``step_noise``);
6. latents divided by the VAE ``scaling_factor`` and decoded (optionally in spatial tiles);
   frames ``clip(x / 2 + 0.5, 0, 1)``.

Image-to-video adds VAE-encoded image latents on the channel axis (see the class).

The sampling loop is a host loop around one compiled transformer step (both CFG halves in one
batch), compiled ahead of time, so it compiles once per run. The sampler state stays float32
(the reference rounds the latents to the transformer dtype after every step).

With ``dp * tp * sp > 1`` the transformer runs on a ``(data, tensor, sequence)`` mesh
(:mod:`vidax.core.sharding`): its parameters are loaded already sharded by
:data:`vidax.models.cogvideox.sharding.COGVIDEOX_RULES`, the CFG halves are split over ``data``,
heads, FFN width and AdaLN projections over ``tensor`` and the joint text + video sequence over
``sequence``. The text encoder and the VAE stay on one device. ``offload_chunk`` keeps the blocks in
host memory and streams them to the devices a chunk at a time (:mod:`vidax.core.offload`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint.errors import CheckpointError
from vidax.core.attention import AttentionImpl, ran_label, recording
from vidax.core.compile_cache import enable_for_api
from vidax.core.host_memory import trim_after_compiles
from vidax.core.inputs import (check_dtype, check_finite_video, check_guidance, check_seed, integer_problems,
                               is_integer, prompt_batch)
from vidax.core.offload import OffloadedStack, block_plan
from vidax.core.placement import first_device, mesh_context, parallel_metrics, replicated, to_mesh
from vidax.core.progress import Progress, as_progress
from vidax.core.residency import OnDemand, keep_resident
from vidax.core.sharding import optional_mesh
from vidax.encoders.t5 import encode as t5_encode
from vidax.encoders.tokenizer import Tokenizer
from vidax.models.cogvideox import block_loop as cog_block_loop
from vidax.models.cogvideox import vae as cvae
from vidax.models.cogvideox.config import CogVideoXTransformerConfig, CogVideoXVAEConfig
from vidax.models.cogvideox.image import image_frames
from vidax.models.cogvideox.layout import resolve_checkpoint
from vidax.models.cogvideox.sharding import COGVIDEOX_RULES, check_parallel
from vidax.models.cogvideox.transformer import forward, position_tables
from vidax.schedulers import CogVideoXDPMScheduler, guidance_scale_at, scheduler_from_config
from vidax.video import VideoOutput, finish_metrics

#: T5 tokens per prompt (the pipeline's ``max_sequence_length`` and the transformers' ``max_text_seq_length``).
MAX_SEQUENCE_LENGTH = 226
SAMPLERS = {"ddim": "CogVideoXDDIMScheduler", "dpm": "CogVideoXDPMScheduler"}


def latent_frames(cfg: CogVideoXTransformerConfig, num_frames: int) -> tuple[int, int]:
    """``(latent frames, padding frames)`` for ``num_frames`` video frames.

    ``(num_frames - 1) // temporal_compression_ratio + 1`` latent frames; CogVideoX1.5 adds
    ``padding`` frames to reach a multiple of ``patch_size_t`` (dropped again before decoding).
    """
    f = (num_frames - 1) // cfg.temporal_compression_ratio + 1
    pt = cfg.temporal_patch
    return f, (pt - f % pt) % pt


def check_inputs(cfg: CogVideoXTransformerConfig, vae_cfg: CogVideoXVAEConfig, height: int, width: int,
                 num_frames: int) -> None:
    """Reject sizes the model cannot run, naming the nearest valid values. Runs before any compute.

    Rules:

    * ``num_frames = 8k + 1`` (49 for CogVideoX, 81 for 1.5): the VAE decodes its first chunk of
      an odd number of latent frames to ``4 (n - 1) + 1`` frames and every later pair to 8, so
      only an odd latent count gives back ``num_frames`` frames (the reference silently returns
      3 more frames for ``8k + 5``);
    * ``height`` and ``width`` positive multiples of 16 (VAE 8x, patch 2);
    * CogVideoX1.5: the token grid within the training grid (RoPE tables of that size are sliced);
    * learned positions (5B I2V): exactly the training resolution.

    Raises:
      ValueError: one message listing every problem with its fix.
    """
    problems = integer_problems(num_frames=num_frames, height=height, width=width)
    step = 2 * vae_cfg.temporal_compression
    if is_integer(num_frames) and (num_frames < 1 or (num_frames - 1) % step):
        lo = max(1, (int(num_frames) - 1) // step * step + 1)
        problems.append(
            f"num_frames={num_frames} must be of the form {step}k+1 (an odd number of latent frames, which the "
            f"VAE decodes back to exactly num_frames; 49 for CogVideoX, 81 for CogVideoX1.5): use {lo} or {lo + step}"
        )
    multiple = vae_cfg.spatial_compression * cfg.patch_size
    for name, v in (("height", height), ("width", width)):
        if is_integer(v) and (v < multiple or v % multiple):
            lo = int(v) // multiple * multiple
            choice = f"{lo} or {lo + multiple}" if lo >= multiple else f"{multiple}"
            problems.append(f"{name}={v} must be a positive multiple of {multiple}: use {choice}")
    s = vae_cfg.spatial_compression
    if cfg.patch_size_t is not None and not problems:
        max_h, max_w = cfg.sample_height * s, cfg.sample_width * s
        if height > max_h or width > max_w:
            problems.append(f"{height}x{width} exceeds this CogVideoX1.5 model's RoPE grid: at most {max_h}x{max_w} pixels")
    if cfg.use_learned_positional_embeddings and (height, width) != (cfg.sample_height * s, cfg.sample_width * s):
        problems.append(f"this model has a learned position table: generate at exactly "
                        f"{cfg.sample_height * s}x{cfg.sample_width * s} (height x width)")
    if problems:
        raise ValueError("; ".join(problems))


#: The CogVideoX pipelines' result: :class:`vidax.video.VideoOutput` (frames ``(B, F, H, W, 3)``, ``fps`` 8, or 16
#: for CogVideoX1.5, metrics, latents ``(B, F', C, H/8, W/8)``); the old name kept.
CogVideoXOutput = VideoOutput


class CogVideoXPipeline:
    """CogVideoX text-to-video (2B, 5B, 1.5-5B), loaded once from a diffusers-layout folder.

    Example::

        pipe = CogVideoXPipeline.from_pretrained("CogVideoX-5b", dtype="bfloat16")
        out = pipe("a panda playing guitar", height=480, width=720, num_frames=49,
                   sampler="dpm", use_dynamic_cfg=True)
        write_video(out.frames[0], "panda.mp4", fps=out.fps)
    """

    #: transformer input channels per VAE latent channel: 1 (noise) here, 2 (noise + image) for image-to-video.
    _CONDITION_CHANNELS = 1
    _TASK = "text-to-video"

    def __init__(self, folder: Path, transformer_cfg: CogVideoXTransformerConfig, transformer_params: dict,
                 vae_cfg: CogVideoXVAEConfig, vae_params: dict, text_cfg, text_params: dict, tokenizer: Tokenizer,
                 scheduler_config: dict, attention: str = "auto", mesh=None, rules=COGVIDEOX_RULES,
                 block_chunks: OffloadedStack | None = None, offload_overlap: bool = True):
        self.folder = folder
        self.transformer_cfg = transformer_cfg
        # With the host block loop (one block per chunk, device memory) or offloading (chunks in host memory)
        # the blocks are block_chunks and transformer_params holds the parameters outside them.
        self.transformer_params = transformer_params
        self.block_chunks = block_chunks
        self.offload_overlap = offload_overlap
        self.vae_cfg = vae_cfg
        self.vae_params = vae_params
        # The VAE's encoder side: from_pretrained loads only the decoder side into vae_params, and this on
        # first use (image-to-video's first image).
        encoder = {k: vae_params[k] for k in cvae.ENCODER_PARTS if k in vae_params} or None
        self.vae_encoder = OnDemand(lambda: encoder, encoder)
        self.text_cfg = text_cfg
        # The T5 weights (float32: paper fault 2); from_pretrained may make them freed after each encoding.
        self.text_encoder = OnDemand(lambda: text_params, text_params)
        self.tokenizer = tokenizer
        self.scheduler_config = scheduler_config
        self.attention = AttentionImpl(attention)
        self.mesh = mesh  # None: one device
        self.rules = rules
        self._step = jax.jit(_cfg_step, static_argnames=("cfg", "attention_impl", "guided", "mesh", "rules"))
        self.load_seconds = 0.0
        self.progress: bool | Progress = True  # the calls' default (from_pretrained's progress)
        self._attention_ran: str | None = None

    @property
    def text_params(self) -> dict:
        """The T5 encoder's parameters (loaded again from the checkpoint if they were freed)."""
        return self.text_encoder.get()

    @property
    def fps(self) -> int:
        """Frame rate of the training videos: 16 for CogVideoX1.5, 8 for CogVideoX."""
        return 16 if self.transformer_cfg.patch_size_t is not None else 8

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike, *, dtype: Any = "bfloat16", text_encoder_dtype: Any = "float32",
                        vae_dtype: Any = "float32", attention: str = "auto", dp: int = 1, tp: int = 1, sp: int = 1,
                        devices: list | None = None, text_encoder_residency: str = "auto",
                        block_loop: str = "auto", offload_chunk: int | None = None,
                        offload_overlap: bool = True, progress: bool | Progress = True,
                        compile_cache: bool | str | os.PathLike = True) -> CogVideoXPipeline:
        """Load a diffusers-layout CogVideoX text-to-video folder.

        Args:
          folder: ``model_index.json``, ``transformer/``, ``vae/``, ``text_encoder/``, ``tokenizer/``,
            ``scheduler/``.
          dtype: transformer weight dtype ("bfloat16" or "float32"). Checkpoint tensors are cast on
            the host (the 2B model's fp16 weights become bf16); norms, embedders and AdaLN
            projections stay float32.
          text_encoder_dtype: T5 dtype, float32 by default (paper Table 4 fault 2).
          vae_dtype: VAE dtype.
          attention: attention implementation (see :mod:`vidax.core.attention`). Default ``"auto"``:
            the joint sequence is long (17,776 tokens at 480x720x49), so the ``(B, H, S, S)`` scores
            of ``"xla"`` do not fit; ``auto`` picks cuDNN / splash / query-chunked attention.
          dp, tp, sp: data, tensor and sequence parallel sizes of the transformer's mesh
            (:func:`vidax.core.sharding.make_mesh`); all 1: one device, no mesh. tp must divide the
            head count (30 for CogVideoX-2b, 48 for the 5B models); any sp runs.
          devices: the mesh's devices (default all; their count must be ``dp * tp * sp``).
          text_encoder_residency: ``"free"``: the float32 T5 weights are freed after each encoding and
            loaded again (memory-mapped, already checked) when another prompt comes (paper fault 2);
            ``"resident"``: kept; ``"auto"``: freed on accelerators, kept on the CPU backend
            (:func:`vidax.core.residency.keep_resident`).
          block_loop: ``"scan"`` (the blocks under ``lax.scan`` in one step program), ``"host"`` (one
            compiled block program called per block from the host, over per-block weights in device
            memory: :mod:`vidax.models.cogvideox.block_loop`), or ``"auto"``: ``"host"`` on the CPU
            backend, ``"scan"`` elsewhere (docs/design.md, "Block loop"). Same values either way.
            Ignored (but checked) with ``offload_chunk``.
          offload_chunk: keep the blocks in host memory (``pinned_host`` where the backend has it) and
            stream ``offload_chunk`` blocks at a time to the devices, each step (any value from 1 to the
            layer count: 30 for CogVideoX-2b, 42 for the 5B models; the last chunk is zero-padded);
            None: the blocks stay in device memory. Same values as resident.
          offload_overlap: with offloading, copy the next chunk while the current one computes (at most
            two chunks in device memory); False: copy, wait, compute, wait (one chunk).
          progress: show the loading stage (:class:`vidax.core.progress.Progress`; False: nothing).
          compile_cache: JAX's persistent compilation cache (:func:`vidax.core.compile_cache.enable_for_api`): True,
            its default directory (unless ``VIDAX_COMPILE_CACHE=off``); a path; False: off.

        Raises:
          CheckpointError: a missing part (named), a text encoder whose width is not the
            transformer's ``text_embed_dim``, a checkpoint of the other task, or weights that do
            not match their configuration (all mismatches listed at once).
          ValueError: an unsupported configuration; a mesh that does not cover the devices, a tp
            that does not divide the head count (valid sizes listed), an unknown ``block_loop``, or an
            ``offload_chunk`` that is not an integer in ``[1, num_layers]`` (the sizes that need no
            padding listed), raised before any weight is read.
        """
        dtype, text_encoder_dtype = check_dtype(dtype), check_dtype(text_encoder_dtype, "text_encoder_dtype")
        vae_dtype = check_dtype(vae_dtype, "vae_dtype")
        t0 = time.perf_counter()
        enable_for_api(compile_cache)
        trim_after_compiles()  # return each large compilation's freed host heap to the OS (core.host_memory)
        ckpt = resolve_checkpoint(folder)
        tcfg, vcfg, ecfg = ckpt.transformer_config(), ckpt.vae_config(), ckpt.text_encoder_config()
        if tcfg.in_channels != cls._CONDITION_CHANNELS * vcfg.latent_channels:
            kind = "an image-to-video" if tcfg.in_channels == 2 * vcfg.latent_channels else "a text-to-video"
            use = "CogVideoXImageToVideoPipeline" if kind == "an image-to-video" else "CogVideoXPipeline"
            raise CheckpointError(
                f"{ckpt.folder}: the transformer takes {tcfg.in_channels} latent channels and the VAE makes "
                f"{vcfg.latent_channels}: this is {kind} checkpoint ({ckpt.pipeline_class}); {cls.__name__} runs "
                f"{cls._TASK}: use {use}"
            )
        if ecfg.d_model != tcfg.text_embed_dim:
            raise CheckpointError(
                f"{ckpt.folder}: the text encoder is {ecfg.d_model} wide but the transformer expects text_embed_dim="
                f"{tcfg.text_embed_dim}; the components belong to different models"
            )
        mesh = optional_mesh(dp, tp, sp, devices=devices)
        if mesh is not None:
            check_parallel(tcfg, mesh, COGVIDEOX_RULES)
        plan = block_plan(tcfg.num_layers, offload_chunk, block_loop)
        # The VAE's encoder side is loaded on demand, at the first image; text-to-video never reads it.
        tparams, chunks, vparams, eparams, tokenizer = ckpt.load_components(
            tcfg, vcfg, ecfg, dtype=dtype, vae_dtype=vae_dtype, text_encoder_dtype=text_encoder_dtype, plan=plan,
            mesh=mesh, rules=COGVIDEOX_RULES, decoder_parts=cvae.DECODER_PARTS, progress=progress)
        pipe = cls(ckpt.folder, tcfg, tparams, vcfg, vparams, ecfg, eparams, tokenizer, ckpt.scheduler_config(),
                   attention, mesh=mesh, block_chunks=chunks, offload_overlap=offload_overlap)
        pipe.text_encoder = OnDemand(lambda: ckpt.load_text_encoder(ecfg, text_encoder_dtype), eparams,
                                     keep=keep_resident(text_encoder_residency))
        pipe.vae_encoder = OnDemand(lambda: ckpt.load_vae(vcfg, vae_dtype, cvae.ENCODER_PARTS))
        pipe.load_seconds = time.perf_counter() - t0
        pipe.progress = progress
        return pipe

    # -- stages ----------------------------------------------------------

    def encode_prompt(self, prompts: list[str]) -> jax.Array:
        """T5 states for ``prompts``: float32 ``(B, 226, d_model)`` (``_get_t5_prompt_embeds``).

        All 226 positions are kept and attend to each other, padding included, as in the reference
        (it calls the encoder without an attention mask).
        """
        ids, _ = self.tokenizer(list(prompts), max_length=MAX_SEQUENCE_LENGTH)
        states = t5_encode(self.text_encoder.get(), self.text_cfg, ids, np.ones_like(ids))
        jax.block_until_ready(states)
        self.text_encoder.release()  # freed now unless kept resident (text_encoder_residency)
        return states

    def make_scheduler(self, sampler: str | None = None):
        """The checkpoint's scheduler configuration as DDIM (``"ddim"``), DPM (``"dpm"``) or as saved (None).

        Raises:
          ValueError: an unknown sampler name, or a configuration the samplers do not support.
        """
        config = dict(self.scheduler_config)
        if sampler is not None:
            if sampler not in SAMPLERS:
                raise ValueError(f"unknown sampler {sampler!r}; choose one of {sorted(SAMPLERS)}")
            config["_class_name"] = SAMPLERS[sampler]
        return scheduler_from_config(config)

    def decode_latents(self, latents: jax.Array, tiling: cvae.VAETiling | None = None, on_chunk=None) -> np.ndarray:
        """``(B, F', C, h, w)`` diffusion latents -> float32 video ``(B, F, H, W, 3)`` in ``[0, 1]`` (``on_chunk``:
        called after each decoded chunk, for progress)."""
        z = cvae.unscale_latents(self.vae_cfg, jnp.swapaxes(jnp.asarray(latents, jnp.float32), 1, 2))
        video = np.asarray(cvae.decode(self.vae_params, self.vae_cfg, z, tiling=tiling, on_chunk=on_chunk), np.float32)
        check_finite_video(video)
        return np.clip(video.transpose(0, 2, 3, 4, 1) / 2 + 0.5, 0.0, 1.0)

    def __call__(
        self,
        prompt: str | list[str],
        negative_prompt: str | list[str] | None = None,
        *,
        image: Any = None,
        last_image: Any = None,
        height: int = 480,
        width: int = 720,
        num_frames: int = 49,
        num_inference_steps: int = 50,
        guidance_scale: float = 6.0,
        use_dynamic_cfg: bool = False,
        sampler: str | None = None,
        seed: int = 0,
        latents: np.ndarray | None = None,
        step_noise: Callable[[int], np.ndarray] | None = None,
        vae_tiling: cvae.VAETiling | bool | None = None,
        output_type: str = "uint8",
        progress: bool | Progress | None = None,
    ) -> VideoOutput:
        """Generate videos.

        Args:
          prompt: one prompt or a list (batch).
          negative_prompt: for classifier-free guidance; default "" (as diffusers).
          image, last_image: must be None: this is a text-to-video checkpoint (the keywords are the
            interface every vidax pipeline shares; image-to-video is
            :class:`CogVideoXImageToVideoPipeline` on an I2V folder, and CogVideoX has no last-frame
            conditioning).
          height, width: pixels, multiples of 16 (480 x 720 for CogVideoX, 768 x 1360 for 1.5).
          num_frames: ``8k + 1`` frames (49; 81 for 1.5); see :func:`check_inputs`.
          num_inference_steps: sampler steps.
          guidance_scale: CFG scale; guidance is off at 1.0 or below.
          use_dynamic_cfg: the reference's timestep-dependent guidance scale.
          sampler: ``"ddim"``, ``"dpm"``, or None for the checkpoint's scheduler (DDIM).
          seed: PRNG seed of the initial noise and of the DPM sampler's per-step noise.
          latents: explicit initial latents float32 ``(B, F' + padding, C, H/8, W/8)`` (see
            :func:`latent_frames`) instead of noise.
          step_noise: DPM only: ``step_noise(i)`` gives step ``i``'s noise (latents' shape) instead
            of drawing it from ``seed`` (for reproducing another implementation's noise).
          vae_tiling: decode in spatial tiles: True (the reference's ``enable_tiling()`` defaults),
            a :class:`~vidax.models.cogvideox.vae.VAETiling`, or None/False (untiled).
          output_type: "uint8" frames in [0, 255], or "float" frames in [0, 1].
          progress: show a progress bar.

        Returns:
          :class:`CogVideoXOutput` with frames ``(B, F, H, W, 3)``.

        Raises:
          ValueError: an ``image`` or ``last_image`` (named with the pipeline that takes images), invalid
            sizes (see :func:`check_inputs`), mismatched prompt batches or latents, a seed outside
            ``[0, 2**32)`` or a non-finite guidance scale (:mod:`vidax.core.inputs`), an unknown sampler
            or output type.
        """
        if image is not None or last_image is not None:
            given = " and ".join(n for n, v in (("image", image), ("last_image", last_image)) if v is not None)
            raise ValueError(
                f"{self.folder} is a CogVideoX text-to-video checkpoint and takes no {given}: image-to-video runs "
                "CogVideoXImageToVideoPipeline on an image-to-video folder (CogVideoX-5b-I2V, CogVideoX1.5-5B-I2V)"
                + (", and CogVideoX has no last-frame conditioning" if last_image is not None else ""))
        return self._generate(prompt, negative_prompt, None, height=height, width=width, num_frames=num_frames,
                              num_inference_steps=num_inference_steps, guidance_scale=guidance_scale,
                              use_dynamic_cfg=use_dynamic_cfg, sampler=sampler, seed=seed, latents=latents,
                              step_noise=step_noise, vae_tiling=vae_tiling, output_type=output_type, progress=progress)

    def _prepare(self, prompt, negative_prompt, height, width, num_frames, output_type, latents):
        """Checks shared by the text- and image-to-video calls; returns ``(prompts, negatives, noise shape, pad)``."""
        tcfg = self.transformer_cfg
        check_inputs(tcfg, self.vae_cfg, height, width, num_frames)
        if output_type not in ("uint8", "float"):
            raise ValueError(f"output_type must be 'uint8' or 'float', got {output_type!r}")
        prompts, negatives = prompt_batch(prompt, negative_prompt)
        f, pad = latent_frames(tcfg, num_frames)
        s = self.vae_cfg.spatial_compression
        shape = (len(prompts), f + pad, self.vae_cfg.latent_channels, height // s, width // s)
        if latents is not None and tuple(latents.shape) != shape:
            raise ValueError(f"latents have shape {tuple(latents.shape)}, expected {shape} (B, F, C, H, W) for these sizes")
        return prompts, negatives, shape, pad

    def _generate(self, prompt, negative_prompt, condition, *, height, width, num_frames, num_inference_steps,
                  guidance_scale, use_dynamic_cfg, sampler, seed, latents, step_noise, vae_tiling, output_type,
                  progress) -> CogVideoXOutput:
        """The sampling run behind both pipelines.

        ``condition``: None (text-to-video), or a function ``(noise shape, key) -> (B, F, C, h, w)`` latents
        concatenated to the noisy latents on the channel axis at every step (image-to-video).
        """
        tcfg = self.transformer_cfg
        prompts, negatives, shape, pad = self._prepare(prompt, negative_prompt, height, width, num_frames,
                                                       output_type, latents)
        guidance_scale, seed = check_guidance(guidance_scale), check_seed(seed)
        guided = guidance_scale > 1.0
        b = len(prompts)
        check_parallel(tcfg, self.mesh, self.rules, batch=2 * b if guided else b)
        scheduler = self.make_scheduler(sampler)
        stochastic = isinstance(scheduler, CogVideoXDPMScheduler)
        if step_noise is not None and not stochastic:
            raise ValueError("step_noise is for the DPM sampler; this run uses DDIM")
        tiling = cvae.VAETiling() if vae_tiling is True else (vae_tiling or None)
        progress = as_progress(self.progress if progress is None else progress)
        metrics: dict[str, Any] = {"load_s": self.load_seconds}

        t0 = time.perf_counter()
        with progress.stage("text encoder"):
            text = self.encode_prompt(negatives + prompts if guided else prompts)  # [uncond, cond], as the reference
            dtype = self.compute_dtype
            context = text.astype(dtype)
            jax.block_until_ready(context)
        metrics["text_encoder_s"] = time.perf_counter() - t0

        state = scheduler.set_timesteps(num_inference_steps)
        latent_key, noise_key, image_key = jax.random.split(jax.random.key(seed), 3)
        cond = None
        if condition is not None:  # the image through the VAE encoder
            t0 = time.perf_counter()
            with progress.stage("VAE encode"):
                cond = condition(shape, image_key)
                jax.block_until_ready(cond)
            metrics["vae_encode_s"] = time.perf_counter() - t0
        if latents is None:
            x = jax.random.normal(latent_key, shape, jnp.float32) * scheduler.init_noise_sigma
        else:
            x = jnp.asarray(latents, jnp.float32)
        # Placed once: the 2B sin-cos table is (tokens x width) floats, not to be re-sent every step.
        positions = jax.tree.map(jnp.asarray, position_tables(tcfg, shape))
        ofs = jnp.full((1,), 2.0, jnp.float32) if tcfg.ofs_embed_dim else None  # the I2V pipeline's fixed ofs
        metrics.update(parallel_metrics(self.mesh, self.rules, tcfg.num_attention_heads, self.attention))
        aux_device = first_device(self.vae_params)
        # On a mesh: the context split over data (the CFG halves), the rest replicated.
        x, positions, cond, ofs = to_mesh((x, positions, cond, ofs), self.mesh, self.rules)
        context = to_mesh(context, self.mesh, self.rules, split_batch=True)

        with mesh_context(self.mesh):
            t0 = time.perf_counter()
            t_abstract, g_first = to_mesh((jnp.zeros((b,), jnp.float32), jnp.float32(guidance_scale)), self.mesh,
                                          self.rules)
            with progress.stage("compiling"), recording() as ran:
                compiled = self.compile_step(self.transformer_params, x, t_abstract, context, positions, g_first, cond,
                                             ofs, guided=guided)
            self._attention_ran = metrics["attention"] = ran_label(ran, self.attention, self._attention_ran)
            metrics["compile_s"] = time.perf_counter() - t0
            metrics.update(self._block_metrics())

            step_times = []
            n = state.num_inference_steps
            with progress.stage("denoising", total=n, unit="step") as stage:
                for i in range(n):
                    ts = time.perf_counter()
                    t = state.timesteps[i]
                    g = to_mesh(jnp.float32(guidance_scale_at(guidance_scale, t, n, use_dynamic_cfg)), self.mesh,
                                self.rules)
                    tb = to_mesh(jnp.full((b,), t, jnp.float32), self.mesh, self.rules)
                    pred = compiled(self.transformer_params, x, tb, context, positions, g, cond, ofs)
                    if stochastic:
                        noise = None if step_noise is None else jnp.asarray(step_noise(i), jnp.float32)
                        key = None if step_noise is not None else jax.random.fold_in(noise_key, i)
                        x, state = scheduler.step(state, pred, x, i, noise=noise, key=key)
                    else:
                        x, state = scheduler.step(state, pred, x, i)
                    jax.block_until_ready(x)
                    step_times.append(time.perf_counter() - ts)
                    stage.update()
        metrics["step_s"] = float(np.median(step_times)) if step_times else 0.0
        metrics["sampling_s"] = float(np.sum(step_times))

        t0 = time.perf_counter()
        if self.mesh is not None:
            x = jax.device_put(x, aux_device)  # the VAE runs on one device
        x = x[:, pad:]  # CogVideoX1.5: the padding frames are dropped from the front, as the reference does
        with progress.stage("VAE decode", unit="chunk") as stage:
            frames = self.decode_latents(x, tiling, on_chunk=stage.update)
        metrics["vae_decode_s"] = time.perf_counter() - t0
        if output_type == "uint8":
            frames = np.round(frames * 255.0).astype(np.uint8)
        finish_metrics(metrics, height=height, width=width, num_frames=num_frames,
                       num_inference_steps=state.num_inference_steps, fps=self.fps)
        return VideoOutput(frames=frames, fps=self.fps, metrics=metrics, latents=np.asarray(x))

    @property
    def block_loop(self) -> str:
        """``"scan"``, ``"host"`` (one-block chunks in device memory, a host loop) or ``"offload"`` (chunks
        streamed from host memory)."""
        if self.block_chunks is None:
            return "scan"
        return "host" if self.block_chunks.in_device_memory else "offload"

    def _block_metrics(self) -> dict:
        """``{"block_loop": ...}``, and with offloading ``"offload"``: the keys of the Wan pipeline's."""
        out: dict[str, Any] = {"block_loop": self.block_loop}
        stack = self.block_chunks
        if stack is None or stack.in_device_memory:
            return out
        leaf = jax.tree.leaves(stack.chunks[0])[0]
        out["offload"] = {"chunk": stack.plan.chunk, "chunks": stack.num_chunks,
                          "padded_layers": stack.plan.padded_layers, "overlap": self.offload_overlap,
                          "chunk_bytes_per_device": stack.chunk_bytes_per_device(),
                          "host_memory_kind": leaf.sharding.memory_kind if isinstance(leaf, jax.Array) else "numpy"}
        return out

    @property
    def compute_dtype(self) -> np.dtype:
        """The transformer's weight dtype (``from_pretrained``'s ``dtype``)."""
        blocks = self.transformer_params["blocks"] if self.block_chunks is None else self.block_chunks.chunks[0]
        return blocks["attn1"]["to_q"]["kernel"].dtype

    def compile_step(self, params, x, t, context, positions, g, cond, ofs, *, guided: bool = True):
        """Compile the guided transformer step for these inputs (placed as :meth:`__call__` places them).

        Returns:
          ``step(params, x, t, context, positions, g, cond, ofs) -> prediction``: the scanned step, or with
          chunked blocks (host block loop, offloading) its prologue, the block program per chunk and its
          epilogue (:func:`vidax.models.cogvideox.block_loop.compile_step`), with the same contract.
        """
        if self.block_chunks is None:
            return self._step.lower(params, x, t, context, positions, g, cond, ofs, cfg=self.transformer_cfg,
                                    attention_impl=self.attention, guided=guided, mesh=self.mesh,
                                    rules=self.rules).compile()
        return cog_block_loop.compile_step(params, self.block_chunks, x, t, context, positions, g, cond, ofs,
                                           cfg=self.transformer_cfg, attention=self.attention, guided=guided,
                                           mesh=self.mesh, rules=self.rules, overlap=self.offload_overlap)

    def transformer_tree(self) -> dict:
        """The transformer's whole parameter tree as :func:`transformer_specs` declares it, blocks stacked
        ``(num_layers, ...)`` whatever the block loop (a device copy with the host loop; tools and tests)."""
        if self.block_chunks is None:
            return self.transformer_params
        return {**self.transformer_params, "blocks": self.block_chunks.stacked()}

    def compilations(self) -> int:
        """How many times this pipeline has compiled its scanned step (``block_loop="scan"``)."""
        return self._step._cache_size()

def _cfg_step(params, latents, timestep, context, positions, guidance_scale, cond=None, ofs=None, *, cfg,
              attention_impl, guided, mesh=None, rules=COGVIDEOX_RULES):
    """One guided transformer evaluation: both CFG halves in one batch of 2B.

    Args:
      latents: float32 ``(B, F, C, H, W)``.
      timestep: float32 ``(B,)``.
      context: ``(2B, 226, text_dim)`` (negatives, then prompts) if ``guided`` else ``(B, ...)``.
      guidance_scale: float32 scalar (traced: the dynamic CFG scale changes every step).
      cond: image-to-video: ``(B, F, C, H, W)`` image latents, concatenated after ``latents`` on the
        channel axis (both CFG halves get them); None for text-to-video.
      ofs: CogVideoX1.5 I2V ``ofs`` ``(1,)``, else None.
      mesh, rules: the transformer's mesh and sharding rules (None: one device); with dp = 2 the
        two CFG halves run on the two ``data`` shards.

    Returns:
      float32 ``(B, F, C, H, W)``: ``uncond + g * (cond - uncond)`` (replicated on a mesh).
    """
    x = latents if cond is None else jnp.concatenate([latents, cond.astype(latents.dtype)], axis=2)
    kw = dict(cfg=cfg, attention_impl=attention_impl, mesh=mesh, rules=rules)
    if not guided:
        return replicated(forward(params, x, timestep, context, positions, ofs, **kw), mesh)
    both = forward(params, jnp.concatenate([x, x]), jnp.concatenate([timestep, timestep]), context, positions, ofs,
                   **kw)
    uncond, text = jnp.split(both, 2)
    return replicated(uncond + guidance_scale * (text - uncond), mesh)


class CogVideoXImageToVideoPipeline(CogVideoXPipeline):
    """CogVideoX image-to-video (5B-I2V, 1.5-5B-I2V): the first frame given, the rest generated.

    Follows diffusers ``pipelines/cogvideo/pipeline_cogvideox_image2video.py``
    (``CogVideoXImageToVideoPipeline``): the image (in ``[0, 1]``, mapped to ``[-1, 1]``) is
    encoded by the VAE as a one-frame video and *sampled* from its latent distribution
    (``mean + std * noise``), scaled by the VAE ``scaling_factor`` (divided by it when the VAE config
    says ``invert_scale_latents``, CogVideoX1.5), followed by zero latent frames up to the noise
    latents' length; at every step these image latents are concatenated to the noisy latents on the
    channel axis (the transformer takes ``2 x 16`` channels). CogVideoX1.5 also passes ``ofs = 2.0``
    and pads the latent frames as text-to-video does (the image then sits in the padding frame that
    is dropped before decoding, exactly as in the reference). The 5B-I2V transformer has a learned
    position table and runs at 480 x 720 only.

    An image of another size is resized to ``height x width`` as the reference's
    ``VideoProcessor.preprocess`` resizes it: PIL images and files with Pillow's Lanczos filter, arrays
    by PyTorch's nearest-neighbour rule (:mod:`vidax.models.cogvideox.image`).

    Example::

        pipe = CogVideoXImageToVideoPipeline.from_pretrained("CogVideoX-5b-I2V", dtype="bfloat16")
        out = pipe("a cat surfing a wave", image="cat.png", height=480, width=720, num_frames=49)
    """

    _CONDITION_CHANNELS = 2
    _TASK = "image-to-video"

    def encode_image(self, image: np.ndarray, key: jax.Array, image_noise: np.ndarray | None = None) -> jax.Array:
        """Image latents ``(B, 1, C, h, w)`` in diffusion space (``prepare_latents``'s ``image_latents`` before padding).

        Args:
          image: ``(B, H, W, 3)`` uint8, or float in ``[0, 1]``, at the video's size
            (:func:`vidax.models.cogvideox.image.image_frames` prepares any input so).
          key: JAX key of the posterior sample's noise (unless ``image_noise`` is given).
          image_noise: optional ``(B, C, 1, h, w)`` standard normal noise of the posterior sample.
        """
        img = np.asarray(image)
        x = img.astype(np.float32) / 255.0 if img.dtype == np.uint8 else img.astype(np.float32)
        x = jnp.asarray(x).transpose(0, 3, 1, 2)[:, :, None] * 2.0 - 1.0  # (B, 3, 1, H, W) in [-1, 1]
        mean, logvar = cvae.encode({**self.vae_params, **self.vae_encoder.get()}, self.vae_cfg, x)
        noise = jax.random.normal(key, mean.shape, jnp.float32) if image_noise is None else jnp.asarray(image_noise, jnp.float32)
        if noise.shape != mean.shape:
            raise ValueError(f"image_noise has shape {tuple(noise.shape)}, expected {tuple(mean.shape)}")
        z = jnp.swapaxes(mean + jnp.exp(0.5 * logvar) * noise, 1, 2)
        sf = self.vae_cfg.scaling_factor
        return (1 / sf) * z if self.vae_cfg.invert_scale_latents else sf * z

    def __call__(
        self,
        prompt: str | list[str],
        negative_prompt: str | list[str] | None = None,
        *,
        image: Any = None,
        last_image: Any = None,
        height: int = 480,
        width: int = 720,
        num_frames: int = 49,
        num_inference_steps: int = 50,
        guidance_scale: float = 6.0,
        use_dynamic_cfg: bool = False,
        sampler: str | None = None,
        seed: int = 0,
        latents: np.ndarray | None = None,
        step_noise: Callable[[int], np.ndarray] | None = None,
        image_noise: np.ndarray | None = None,
        vae_tiling: cvae.VAETiling | bool | None = None,
        output_type: str = "uint8",
        progress: bool | Progress | None = None,
    ) -> VideoOutput:
        """Generate videos that start from ``image``.

        Args:
          image: required, the first frame, one per prompt: a file path, a PIL image, a uint8 or float
            ``[0, 1]`` array ``(H, W, 3)`` or ``(B, H, W, 3)``, or a list of images. Any size: resized to
            ``height x width`` as the reference resizes it (PIL images and files: Pillow Lanczos; arrays:
            PyTorch's nearest-neighbour rule; :func:`vidax.models.cogvideox.image.image_frames`).
          last_image: must be None (CogVideoX has no last-frame conditioning).
          image_noise: the VAE posterior sample's noise ``(B, C, 1, H/8, W/8)``; default from ``seed``.
          Others: as :meth:`CogVideoXPipeline.__call__`.

        Raises:
          ValueError: no ``image``, a ``last_image``, a number of images other than the prompts'; an
            unreadable, too small or malformed image (:class:`vidax.core.images.ImageError`); and
            everything :meth:`CogVideoXPipeline.__call__` raises.
          TypeError: an image of another type.
        """
        if image is None:
            raise ValueError(f"{type(self).__name__} needs image=: the first frame (a path, a PIL image or an RGB "
                             "array); text-to-video runs CogVideoXPipeline on a text-to-video folder")
        if last_image is not None:
            raise ValueError("CogVideoX has no last-frame conditioning: pass image= (the first frame) only, "
                             "without last_image")
        n_prompts = len(prompt_batch(prompt)[0])
        check_inputs(self.transformer_cfg, self.vae_cfg, height, width, num_frames)  # before resizing to them
        img = image_frames(image, height, width)
        if img.shape[0] != n_prompts:
            raise ValueError(f"{img.shape[0]} images for {n_prompts} prompts; pass one image per prompt")
        pt = self.transformer_cfg.patch_size_t

        def condition(shape, key):
            b, f, c, h, w = shape
            z = self.encode_image(img, key, image_noise)
            cond = jnp.concatenate([z, jnp.zeros((b, f - 1, c, h, w), z.dtype)], axis=1)
            if pt is not None:  # reference: prepend cond[:, : F % p_t] (empty once F is padded to a multiple)
                cond = jnp.concatenate([cond[:, : cond.shape[1] % pt], cond], axis=1)
            return cond

        return self._generate(prompt, negative_prompt, condition, height=height, width=width, num_frames=num_frames,
                              num_inference_steps=num_inference_steps, guidance_scale=guidance_scale,
                              use_dynamic_cfg=use_dynamic_cfg, sampler=sampler, seed=seed, latents=latents,
                              step_noise=step_noise, vae_tiling=vae_tiling, output_type=output_type, progress=progress)
