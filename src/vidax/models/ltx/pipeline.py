"""LTX-Video text-to-video and image/video conditioning (:class:`LTXPipeline`): prompt (and frames) in, uint8 frames out.

Follows diffusers ``pipelines/ltx/pipeline_ltx.py`` (``LTXPipeline``) and, for checkpoints whose
``model_index.json`` names it (LTX-Video 0.9.5+, 0.9.7 / 0.9.8), ``pipeline_ltx_condition.py``
(``LTXConditionPipeline``); text-to-video steps below, conditioning in :mod:`vidax.models.ltx.conditioning`:

1. prompts tokenized to ``max_sequence_length`` T5 tokens (128; 256 for the condition pipeline), right
   padding, and encoded by the T5 v1.1 encoder in float32 (paper Table 4 fault 2): ``LTXPipeline`` without an
   attention mask (every padding token attends and is attended, as its reference calls the encoder), the
   condition pipeline with it; either way padded rows are masked in the transformer's cross-attention;
2. Gaussian latents ``(B, 128, F', H/32, W/32)``, ``F' = (num_frames - 1) / 8 + 1``, packed to tokens
   ``(B, F' H' W', 128)`` (:func:`pack_latents`);
3. the schedule: ``LTXPipeline`` passes ``sigmas = linspace(1, 1/n, n)`` and the dynamic shift
   ``mu = calculate_shift(tokens, ...)`` from the scheduler config; the condition pipeline passes
   ``timesteps = 1000 * linear_quadratic_schedule(n)`` (or the caller's list: the distilled models'
   ``[1000, 993, 987, 981, 975, 909, 725, 0.03]``);
4. RoPE coordinates: ``LTXPipeline`` scales the latent grid by ``(8 / frame_rate, 32, 32)``; the condition
   pipeline puts each token at its first decoded pixel, latent frame ``f`` at video frame
   ``max(0, 8 f - 7)``, divided by ``frame_rate``;
5. classifier-free guidance over a ``[negative, prompt]`` batch (on for ``guidance_scale > 1``), then the
   guidance rescale (``guidance_rescale > 0``: :func:`vidax.schedulers.guidance.rescale_noise_cfg`);
6. Euler steps (``FlowMatchEulerDiscreteScheduler``; the condition pipeline steps per token, on minus the
   prediction, which is the same update);
7. latents unpacked, denormalised with the VAE's ``latents_mean`` / ``latents_std`` / ``scaling_factor``;
   for a timestep-conditioned VAE (0.9.1+) mixed with noise, ``(1 - s) z + s n`` with ``s =
   decode_noise_scale`` (default ``decode_timestep``), and decoded at ``decode_timestep``; frames
   ``clip(x / 2 + 0.5, 0, 1)``.

The sampling loop is a host loop around one compiled transformer step (both CFG halves in one batch),
compiled ahead of time, so it compiles once per run. The sampler state stays float32.

With ``dp * tp * sp > 1`` the transformer runs on a ``(data, tensor, sequence)`` mesh
(:mod:`vidax.core.sharding`): parameters loaded already sharded by :data:`vidax.models.ltx.sharding.LTX_RULES`,
CFG halves over ``data``, heads and FFN width over ``tensor``, video tokens over ``sequence``. The text encoder
and the VAE stay on one device. ``offload_chunk`` keeps the blocks in host memory and streams them
(:mod:`vidax.core.offload`).
"""

from __future__ import annotations

import contextlib
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
from vidax.core.inputs import check_dtype, check_finite_video, check_guidance, check_seed, integer_problems, is_integer, prompt_batch
from vidax.core.offload import block_plan
from vidax.core.placement import first_device, mesh_context, parallel_metrics, to_mesh
from vidax.core.progress import Progress, as_progress
from vidax.core.residency import OnDemand, keep_resident
from vidax.core.sharding import optional_mesh
from vidax.encoders.t5 import encode as t5_encode
from vidax.encoders.tokenizer import Tokenizer
from vidax.models.ltx import step as ltx_step
from vidax.models.ltx.conditioning import (Draws, LTXVideoCondition, condition_latents, condition_pixels, grid_pixels,
                                           image_to_video_latents)
from vidax.models.ltx import vae as lvae
from vidax.models.ltx.config import LTXVideoTransformerConfig
from vidax.models.ltx.layout import resolve_checkpoint
from vidax.models.ltx.sharding import LTX_RULES, check_parallel
from vidax.models.ltx.transformer import grid_coords, rope_tables, video_coords
from vidax.schedulers import scheduler_from_config
from vidax.schedulers.flow_euler import calculate_shift
from vidax.video import VideoOutput, finish_metrics

#: ``model_index.json`` class whose sampling semantics a folder gets (see the module docstring).
CONDITION_PIPELINE = "LTXConditionPipeline"
#: Highest frame rate accepted (frames per second): the video's rate, and the RoPE time scale.
MAX_FRAME_RATE = 1000
#: T5 tokens per prompt: the reference pipelines' ``max_sequence_length`` defaults.
MAX_SEQUENCE_LENGTH = {"LTXPipeline": 128, "LTXImageToVideoPipeline": 128, CONDITION_PIPELINE: 256}


@contextlib.contextmanager
def _nothing():
    yield None


def linear_quadratic_schedule(num_steps: int, threshold_noise: float = 0.025, linear_steps: int | None = None) -> np.ndarray:
    """The condition pipeline's default sigmas (diffusers ``pipeline_ltx_condition.linear_quadratic_schedule``).

    The noise level falls linearly to ``threshold_noise`` over the first ``linear_steps`` steps (default half),
    then quadratically to 0; computed in Python floats, returned as float32 (``torch.tensor`` of the list).

    Returns:
      float32 ``(num_steps,)`` sigmas, from 1 down (the final 0 not included); ``[1.0]`` for one step.
    """
    if linear_steps is None:
        linear_steps = num_steps // 2
    if num_steps < 2:
        return np.array([1.0], np.float32)
    linear = [i * threshold_noise / linear_steps for i in range(linear_steps)]
    step_diff = linear_steps - threshold_noise * num_steps
    quadratic_steps = num_steps - linear_steps
    quadratic_coef = step_diff / (linear_steps * quadratic_steps**2)
    linear_coef = threshold_noise / linear_steps - 2 * step_diff / (quadratic_steps**2)
    const = quadratic_coef * (linear_steps**2)
    quadratic = [quadratic_coef * (i**2) + linear_coef * i + const for i in range(linear_steps, num_steps)]
    return np.array([1.0 - x for x in linear + quadratic], np.float32)


def pack_latents(latents: jax.Array) -> jax.Array:
    """``(B, C, F, H, W)`` latents -> ``(B, F * H * W, C)`` tokens in ``(f, h, w)`` order (``_pack_latents``,
    patch sizes 1)."""
    b, c = latents.shape[:2]
    return jnp.moveaxis(latents.reshape(b, c, -1), 1, 2)


def unpack_latents(tokens: jax.Array, grid: tuple[int, int, int]) -> jax.Array:
    """Inverse of :func:`pack_latents`: ``(B, F * H * W, C)`` -> ``(B, C, F, H, W)``."""
    b, _, c = tokens.shape
    return jnp.moveaxis(tokens, 1, 2).reshape(b, c, *grid)


def latent_grid(vae_cfg: lvae.LTXVideoVAEConfig, height: int, width: int, num_frames: int) -> tuple[int, int, int]:
    """``(F', H', W')`` latent grid of a ``num_frames x height x width`` video."""
    s, t = vae_cfg.spatial_compression, vae_cfg.temporal_compression
    return (num_frames - 1) // t + 1, height // s, width // s


def check_inputs(vae_cfg: lvae.LTXVideoVAEConfig, height: int, width: int, num_frames: int, frame_rate: float) -> None:
    """Reject sizes the model cannot run, naming the nearest valid values. Runs before any compute.

    * ``num_frames = 8k + 1`` (the VAE decodes ``F'`` latent frames to ``8 (F' - 1) + 1``; the reference silently
      returns fewer frames otherwise);
    * ``height``, ``width`` positive multiples of 32 (the VAE's spatial compression; the reference raises too);
    * ``frame_rate`` in ``(0, 1000]`` frames per second (it scales the RoPE time coordinate and is the video's rate).

    Raises:
      ValueError: one message listing every problem with its fix.
    """
    problems = integer_problems(num_frames=num_frames, height=height, width=width)
    t, s = vae_cfg.temporal_compression, vae_cfg.spatial_compression
    if is_integer(num_frames) and (num_frames < 1 or (num_frames - 1) % t):
        lo = max(1, (int(num_frames) - 1) // t * t + 1)
        problems.append(f"num_frames={num_frames} must be of the form {t}k+1 (the VAE decodes F latent frames to "
                        f"{t}(F-1)+1 frames; e.g. 121 or 161): use {lo} or {lo + t}")
    for name, v in (("height", height), ("width", width)):
        if is_integer(v) and (v < s or v % s):
            lo = int(v) // s * s
            problems.append(f"{name}={v} must be a positive multiple of {s}: use "
                            + (f"{lo} or {lo + s}" if lo >= s else f"{s}"))
    if (isinstance(frame_rate, bool) or not isinstance(frame_rate, (int, float, np.number)) or not np.isfinite(frame_rate)
            or not 0 < frame_rate <= MAX_FRAME_RATE):
        problems.append(f"frame_rate={frame_rate!r} must be a number of frames per second in (0, {MAX_FRAME_RATE}] "
                        "(e.g. 25)")
    if problems:
        raise ValueError("; ".join(problems))


def _check_fraction(value, name: str, example: str, upper: float | None = 1.0) -> None:
    """Raise ValueError unless ``value`` is a real number in ``[0, upper]`` (``[0, inf)`` with ``upper=None``)."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float, np.number)) and np.isfinite(value) and value >= 0
    if not ok or (upper is not None and value > upper):
        span = "[0, 1]" if upper == 1.0 else "zero or positive"
        raise ValueError(f"{name}={value!r} must be a number in {span} (e.g. {example})")


#: The LTX-Video pipeline's result: :class:`vidax.video.VideoOutput` (frames ``(B, F, H, W, 3)``, ``fps`` the call's
#: ``frame_rate``, metrics, latents ``(B, 128, F', H/32, W/32)`` normalised, before decoding); the old name kept.
LTXOutput = VideoOutput


class LTXPipeline:
    """LTX-Video (0.9.x, 2B and 13B) text-to-video, image-to-video and frame conditioning, loaded once from a
    diffusers-layout (or vidax-converted) folder; it samples as the pipeline class the folder names.

    Example::

        pipe = LTXPipeline.from_pretrained("LTX-Video-0.9.8-13B-distilled", dtype="bfloat16")
        out = pipe("a red panda in the snow", height=704, width=1216, num_frames=121, num_inference_steps=8,
                   timesteps=[1000, 993, 987, 981, 975, 909, 725, 0.03], guidance_scale=1.0,
                   decode_timestep=0.05, decode_noise_scale=0.025)
        write_video(out.frames[0], "panda.mp4", fps=out.fps)
    """

    def __init__(self, folder: Path, pipeline_class: str, transformer_cfg: LTXVideoTransformerConfig,
                 transformer_params: dict, vae_cfg, vae_params: dict, text_cfg, text_params: dict, tokenizer: Tokenizer,
                 scheduler_config: dict, attention: str = "auto", mesh=None, rules=LTX_RULES, block_chunks=None,
                 offload_overlap: bool = True):
        self.folder = folder
        self.pipeline_class = pipeline_class
        self.transformer_cfg = transformer_cfg
        # With chunked blocks (host loop, offloading) the blocks are block_chunks and transformer_params holds the rest.
        self.transformer_params = transformer_params
        self.block_chunks = block_chunks
        self.offload_overlap = offload_overlap
        self.vae_cfg = vae_cfg
        self.vae_params = vae_params
        # The VAE's encoder side (image conditioning): from_pretrained loads it on first use.
        encoder = {k: vae_params[k] for k in lvae.ENCODER_PARTS if k in vae_params}
        self.vae_encoder = OnDemand(lambda: encoder, encoder if "encoder" in encoder else None)
        self.text_cfg = text_cfg
        self.text_encoder = OnDemand(lambda: text_params, text_params)
        self.tokenizer = tokenizer
        self.scheduler_config = scheduler_config
        self.attention = AttentionImpl(attention)
        self.mesh = mesh
        self.rules = rules
        self._step = jax.jit(ltx_step.cfg_step,
                             static_argnames=("cfg", "attention_impl", "guided", "rescale", "mesh", "rules"))
        self.load_seconds = 0.0
        self.progress: bool | Progress = True  # the calls' default (from_pretrained's progress)
        self._attention_ran: str | None = None

    @property
    def condition_semantics(self) -> bool:
        """Whether this folder samples as ``LTXConditionPipeline`` (its ``model_index.json`` says so)."""
        return self.pipeline_class == CONDITION_PIPELINE

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike, *, dtype: Any = "bfloat16", text_encoder_dtype: Any = "float32",
                        vae_dtype: Any = "float32", attention: str = "auto", dp: int = 1, tp: int = 1, sp: int = 1,
                        devices: list | None = None, text_encoder_residency: str = "auto", block_loop: str = "auto",
                        offload_chunk: int | None = None, offload_overlap: bool = True,
                        progress: bool | Progress = True,
                        compile_cache: bool | str | os.PathLike = True) -> LTXPipeline:
        """Load a diffusers-layout LTX-Video folder.

        Args:
          folder: ``model_index.json`` (``LTXPipeline``, ``LTXImageToVideoPipeline`` or ``LTXConditionPipeline``),
            ``transformer/``, ``vae/``, ``text_encoder/``, ``tokenizer/``, ``scheduler/``.
          dtype: transformer weight dtype ("bfloat16" or "float32"), cast on the host; the AdaLN tables, the
            timestep embedder and the norm scales stay float32.
          text_encoder_dtype: T5 dtype, float32 by default (paper Table 4 fault 2).
          vae_dtype: VAE dtype.
          attention: attention implementation (:mod:`vidax.core.attention`); ``"auto"``: cuDNN / splash / the CPU
            flash kernel (121 frames at 1216x704 are 15,504 tokens).
          dp, tp, sp: data, tensor and sequence parallel sizes of the transformer's mesh; all 1: one device. tp
            must divide the head count (32); any sp runs.
          devices: the mesh's devices (default all; their count must be ``dp * tp * sp``).
          text_encoder_residency: ``"free"`` (the float32 T5 weights freed after each encoding, loaded again from
            the memory-mapped files when needed), ``"resident"``, or ``"auto"`` (freed on accelerators).
          block_loop: ``"scan"``, ``"host"`` (one compiled block program called per block), or ``"auto"`` (host on
            the CPU backend).
          offload_chunk: keep the blocks in host memory and stream ``offload_chunk`` blocks at a time to the
            devices (any value from 1 to the layer count); None: resident.
          offload_overlap: with offloading, copy the next chunk while the current one computes.
          progress: show the loading stage (:class:`vidax.core.progress.Progress`; False: nothing).
          compile_cache: JAX's persistent compilation cache (:func:`vidax.core.compile_cache.enable_for_api`): True,
            its default directory (unless ``VIDAX_COMPILE_CACHE=off``); a path; False: off.

        Raises:
          CheckpointError: a missing part (named), a text encoder whose width is not the transformer's
            ``caption_channels``, latent channels that differ between the transformer and the VAE, or weights
            that do not match their configuration (all mismatches listed at once).
          ValueError: an unsupported configuration, a mesh that does not cover the devices, a tp that does not
            divide the head count, an unknown ``block_loop`` or a bad ``offload_chunk``, before any weight is read.
        """
        dtype, text_encoder_dtype = check_dtype(dtype), check_dtype(text_encoder_dtype, "text_encoder_dtype")
        vae_dtype = check_dtype(vae_dtype, "vae_dtype")
        t0 = time.perf_counter()
        enable_for_api(compile_cache)
        trim_after_compiles()
        ckpt = resolve_checkpoint(folder)
        tcfg, vcfg, ecfg = ckpt.transformer_config(), ckpt.vae_config(), ckpt.text_encoder_config()
        if ecfg.d_model != tcfg.caption_channels:
            raise CheckpointError(f"{ckpt.folder}: the text encoder is {ecfg.d_model} wide but the transformer expects "
                                  f"caption_channels={tcfg.caption_channels}; the components belong to different models")
        if tcfg.in_channels != vcfg.latent_channels or tcfg.out_channels != vcfg.latent_channels:
            raise CheckpointError(f"{ckpt.folder}: the transformer takes {tcfg.in_channels} and makes {tcfg.out_channels} "
                                  f"latent channels, the VAE's latents have {vcfg.latent_channels}; the components "
                                  "belong to different models")
        mesh = optional_mesh(dp, tp, sp, devices=devices)
        if mesh is not None:
            check_parallel(tcfg, mesh, LTX_RULES)
        plan = block_plan(tcfg.num_layers, offload_chunk, block_loop)
        # The VAE's encoder side is loaded on demand, at the first image; text-to-video never reads it.
        tparams, chunks, vparams, eparams, tokenizer = ckpt.load_components(
            tcfg, vcfg, ecfg, dtype=dtype, vae_dtype=vae_dtype, text_encoder_dtype=text_encoder_dtype, plan=plan,
            mesh=mesh, rules=LTX_RULES, decoder_parts=lvae.DECODER_PARTS, progress=progress)
        pipe = cls(ckpt.folder, ckpt.pipeline_class, tcfg, tparams, vcfg, vparams, ecfg, eparams, tokenizer,
                   ckpt.scheduler_config(), attention, mesh=mesh, block_chunks=chunks, offload_overlap=offload_overlap)
        pipe.text_encoder = OnDemand(lambda: ckpt.load_text_encoder(ecfg, text_encoder_dtype), eparams,
                                     keep=keep_resident(text_encoder_residency))
        pipe.vae_encoder = OnDemand(lambda: ckpt.load_vae(vcfg, vae_dtype, lvae.ENCODER_PARTS))
        pipe.load_seconds = time.perf_counter() - t0
        pipe.progress = progress
        return pipe

    # -- stages ----------------------------------------------------------

    def encode_prompt(self, prompts: list[str], max_sequence_length: int) -> tuple[jax.Array, jax.Array]:
        """T5 states and lengths for ``prompts`` (the reference's ``_get_t5_prompt_embeds``).

        The condition pipeline passes the attention mask to the encoder; ``LTXPipeline`` does not (padding
        tokens attend to each other and to the prompt, which changes every row's states).

        Returns:
          float32 ``(B, max_sequence_length, d_model)`` states (padded rows as T5 computes them; the transformer
          masks them), int32 ``(B,)`` token counts.
        """
        ids, mask = self.tokenizer(list(prompts), max_length=max_sequence_length)
        encoder_mask = mask if self.condition_semantics else np.ones_like(mask)
        states = t5_encode(self.text_encoder.get(), self.text_cfg, ids, encoder_mask)
        jax.block_until_ready(states)
        self.text_encoder.release()
        return states, jnp.asarray(mask.sum(axis=1), jnp.int32)

    def schedule(self, num_inference_steps: int, timesteps, tokens: int):
        """The Euler scheduler and its state for one call (see the module docstring, step 3).

        Raises:
          ValueError: a step count that is not a positive integer, explicit timesteps that do not strictly decrease,
            or a schedule the folder's scheduler configuration cannot build (named: e.g. ``LTXConditionPipeline``
            semantics with a dynamically shifted configuration, which diffusers refuses too).
        """
        config = self.scheduler_config
        where = self.folder / "scheduler" / "scheduler_config.json"
        if config.get("_class_name", "FlowMatchEulerDiscreteScheduler") != "FlowMatchEulerDiscreteScheduler":
            raise ValueError(f"{where}: LTX-Video samples with FlowMatchEulerDiscreteScheduler; this configuration "
                             f"names {config.get('_class_name')!r}")
        if timesteps is None:
            if isinstance(num_inference_steps, bool) or not isinstance(num_inference_steps, (int, np.integer)) \
                    or num_inference_steps < 1:
                raise ValueError(f"num_inference_steps={num_inference_steps!r} must be a positive integer (e.g. 30, or 8 "
                                 "with the distilled timesteps)")
        else:
            ts = np.asarray(timesteps, np.float64)
            if ts.ndim == 1 and ts.size > 1 and not np.all(np.diff(ts) < 0):
                raise ValueError(f"timesteps {list(np.asarray(timesteps).tolist())} must strictly decrease (from noise "
                                 "at 1000 towards 0), e.g. 1000, 993, 987, 981, 975, 909, 725, 0.03")
        try:
            scheduler = scheduler_from_config(config)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from e
        if self.condition_semantics:
            if scheduler.use_dynamic_shifting:  # the reference fails too (set_timesteps without mu)
                raise ValueError(f"{where}: use_dynamic_shifting is true, but {self.pipeline_class} folders sample their "
                                 "own timesteps without a shift; set it to false")
            if timesteps is None:
                timesteps = linear_quadratic_schedule(num_inference_steps) * np.float32(1000.0)
            return scheduler, scheduler.set_timesteps(timesteps=timesteps)
        mu = calculate_shift(tokens, config.get("base_image_seq_len", 256), config.get("max_image_seq_len", 4096),
                             config.get("base_shift", 0.5), config.get("max_shift", 1.15))
        if timesteps is not None:
            return scheduler, scheduler.set_timesteps(timesteps=timesteps, mu=mu)
        sigmas = np.linspace(1.0, 1 / num_inference_steps, num_inference_steps)
        return scheduler, scheduler.set_timesteps(num_inference_steps, sigmas=sigmas, mu=mu)

    def rope(self, grid: tuple[int, int, int], frame_rate: float,
             pixel_coords: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """RoPE tables for the latent ``grid`` (module docstring, step 4), or for the condition pipeline's tokens at
        ``pixel_coords`` ``(S, 3)`` (extra condition tokens included)."""
        cfg, s, t = self.transformer_cfg, self.vae_cfg.spatial_compression, self.vae_cfg.temporal_compression
        if not self.condition_semantics:
            return rope_tables(cfg, grid_coords(cfg, grid, (t / frame_rate, s, s)))
        pixels = grid_pixels(grid, s, t) if pixel_coords is None else pixel_coords
        return rope_tables(cfg, video_coords(pixels, frame_rate))

    def encode_condition(self, pixels: np.ndarray, noise_fn) -> jax.Array:
        """A condition's latents, as the references make them: the VAE posterior *sampled*
        (``latent_dist.sample``: ``mean + exp(logvar / 2) * noise``), then normalised with the latent statistics.

        Args:
          pixels: float32 ``(1, 3, T, H, W)`` in ``[-1, 1]`` (:func:`~vidax.models.ltx.conditioning.condition_pixels`).
          noise_fn: ``shape -> noise`` of the posterior sample.

        Returns:
          float32 normalised latents ``(1, C, (T - 1) / 8 + 1, H / 32, W / 32)``.
        """
        params = self.vae_encoder.get()
        mean, logvar = lvae.encode(params, self.vae_cfg, jnp.asarray(pixels))
        z = mean + jnp.exp(0.5 * logvar) * noise_fn(mean.shape)
        return lvae.normalize_latents(params, z)

    def decode_latents(self, latents: jax.Array, decode_timestep: float, decode_noise_scale: float | None,
                       draws: Draws, decoder_noise=None, tiling: lvae.LTXVideoTiling | None = None,
                       on_tile: Callable[[], None] | None = None) -> np.ndarray:
        """``(B, 128, F', h, w)`` normalised latents -> float32 video ``(B, F, H, W, 3)`` in ``[0, 1]``.

        Args:
          decode_timestep, decode_noise_scale: see :meth:`__call__` (used by timestep-conditioned VAEs only).
          draws: the call's random draws (``"decode"``: the noise mixed into the latents; the 0.9.1 decoder's
            injected noise comes from the same key).
          decoder_noise: the decoder's injected noise per call (:func:`vidax.models.ltx.vae.decode`'s ``noise``)
            instead of drawing it.
          tiling: decode in tiles (:class:`vidax.models.ltx.vae.LTXVideoTiling`), or None.
          on_tile: called after each decoder call (progress).
        """
        z = lvae.denormalize_latents(self.vae_params, jnp.asarray(latents, jnp.float32), self.vae_cfg.scaling_factor)
        timestep = None
        if self.vae_cfg.timestep_conditioning:
            scale = decode_timestep if decode_noise_scale is None else decode_noise_scale
            z = (1 - scale) * z + scale * draws("decode", 0, z.shape)
            timestep = jnp.full((z.shape[0],), decode_timestep, jnp.float32)
        key = None if decoder_noise is not None else draws.key("decode", 1)
        video = lvae.decode(self.vae_params, self.vae_cfg, z, timestep=timestep, key=key, noise=decoder_noise,
                            tiling=tiling, on_tile=on_tile)
        video = np.asarray(video, np.float32)
        check_finite_video(video)
        return np.clip(video.transpose(0, 2, 3, 4, 1) / 2 + 0.5, 0.0, 1.0)

    def __call__(
        self,
        prompt: str | list[str],
        negative_prompt: str | list[str] | None = None,
        *,
        image: Any = None,
        last_image: Any = None,
        conditions: list[LTXVideoCondition] | None = None,
        height: int = 512,
        width: int = 704,
        num_frames: int = 161,
        frame_rate: float = 25,
        num_inference_steps: int = 50,
        timesteps: list[float] | np.ndarray | None = None,
        guidance_scale: float = 3.0,
        guidance_rescale: float = 0.0,
        sampler: str | None = None,
        image_cond_noise_scale: float = 0.15,
        decode_timestep: float = 0.0,
        decode_noise_scale: float | None = None,
        max_sequence_length: int | None = None,
        seed: int = 0,
        latents: np.ndarray | None = None,
        decode_noise: np.ndarray | None = None,
        noise: Callable[[str, int, tuple], Any] | None = None,
        decoder_noise=None,
        vae_tiling: lvae.LTXVideoTiling | bool | None = None,
        output_type: str = "uint8",
        progress: bool | Progress | None = None,
    ) -> VideoOutput:
        """Generate videos, from text alone or conditioned on images / videos (:mod:`vidax.models.ltx.conditioning`).

        Args:
          prompt: one prompt or a list (batch).
          negative_prompt: for classifier-free guidance; default "" (as diffusers).
          image: a first frame (path, ``PIL.Image`` or uint8 array): image-to-video, as ``LTXImageToVideoPipeline``
            (``LTXPipeline`` folders) or ``LTXConditionPipeline`` with one condition at frame 0, strength 1.
          last_image: with ``image``, a last frame (``LTXConditionPipeline`` folders): conditions at frames 0 and
            ``num_frames - 1``, strength 1 (first-last-frame-to-video).
          conditions: ``LTXConditionPipeline`` folders only: :class:`~vidax.models.ltx.conditioning.LTXVideoCondition`
            items (images or videos at frame indices, with strengths).
          height, width: pixels, multiples of 32 (704 x 1216 for the paper's presets); conditions are resized to it.
          num_frames: ``8k + 1`` frames (121, 161).
          frame_rate: frames per second of the video (scales the RoPE time axis; the output's ``fps``).
          num_inference_steps: sampler steps (ignored when ``timesteps`` are given: their count).
          timesteps: explicit timesteps in ``[0, 1000]`` (the distilled models' list), or None for the default
            schedule (module docstring, step 3).
          guidance_scale: CFG scale; guidance is off at 1.0 or below (the distilled models run at 1.0).
          guidance_rescale: rescale factor in ``[0, 1]`` (0.7 for the dev models' presets); 0: off.
          sampler: ``"euler"`` or None (the only sampler the references use for LTX-Video).
          image_cond_noise_scale: the condition pipeline's per-step noise on fully conditioned tokens, times
            ``(t / 1000)^2`` (0: off).
          decode_timestep: the timestep-conditioned VAE's decode timestep (0.05 for 0.9.8).
          decode_noise_scale: noise mixed into the latents before decoding (default: ``decode_timestep``).
          max_sequence_length: T5 tokens (default 128, or 256 for the condition pipeline's checkpoints).
          seed: PRNG seed of every random draw (initial noise, posterior samples, conditioning and decode noise).
          latents: explicit initial noise float32 ``(B, 128, F', H/32, W/32)`` instead of drawing it.
          decode_noise: explicit decode noise, the latents' shape.
          noise: ``(purpose, index, shape) -> array or None`` replacing any random draw
            (:class:`~vidax.models.ltx.conditioning.Draws`; reproducing another implementation's noise).
          decoder_noise: explicit noise of the 0.9.1 VAE decoder's injection (see :meth:`decode_latents`).
          vae_tiling: decode in tiles: True (the reference's ``enable_tiling()`` defaults), a
            :class:`~vidax.models.ltx.vae.LTXVideoTiling`, or None/False (untiled).
          output_type: "uint8" frames in [0, 255], or "float" frames in [0, 1].
          progress: show each stage's progress (:class:`vidax.core.progress.Progress`; False: nothing); default:
            ``from_pretrained``'s.

        Returns:
          :class:`vidax.video.VideoOutput`: frames ``(B, F, H, W, 3)`` at ``frame_rate``, normalised latents,
          metrics (:data:`vidax.video.COMMON_METRICS`).

        Raises:
          ValueError: invalid sizes or frame rate (:func:`check_inputs`), mismatched prompt batches or latents, a
            seed outside ``[0, 2**32)``, a non-finite guidance scale, a guidance rescale outside ``[0, 1]``, bad
            timesteps, an unknown output type, bad conditions (frame index, strength, image) or conditions an
            ``LTXPipeline`` folder cannot take.
        """
        tcfg, vcfg = self.transformer_cfg, self.vae_cfg
        check_inputs(vcfg, height, width, num_frames, frame_rate)
        if sampler not in (None, "euler"):
            raise ValueError(f"sampler={sampler!r} is not an LTX-Video sampler; LTX-Video samples with 'euler'")
        if last_image is not None:
            if image is None or conditions:
                raise ValueError("last_image needs image (the first frame), and no conditions")
            if not self.condition_semantics:
                raise ValueError(f"last_image needs an LTXConditionPipeline checkpoint (LTX-Video 0.9.5+); "
                                 f"{self.folder} is an {self.pipeline_class} folder, which takes image only")
            if num_frames < 2:
                raise ValueError("last_image needs a video of more than one frame (e.g. num_frames=121)")
            conditions = [LTXVideoCondition(image=image),
                          LTXVideoCondition(image=last_image, frame_index=num_frames - 1)]
            image = None
        if output_type not in ("uint8", "float"):
            raise ValueError(f"output_type must be 'uint8' or 'float', got {output_type!r}")
        guidance_scale, seed = check_guidance(guidance_scale), check_seed(seed)
        guidance_rescale = check_guidance(guidance_rescale, "guidance_rescale")
        if not 0.0 <= guidance_rescale <= 1.0:
            raise ValueError(f"guidance_rescale={guidance_rescale} must be in [0, 1] (0.7 for the dev models; 0: off)")
        _check_fraction(image_cond_noise_scale, "image_cond_noise_scale", "0.15; 0: off", upper=None)
        _check_fraction(decode_timestep, "decode_timestep", "0.05 for 0.9.8")
        if decode_noise_scale is not None:
            _check_fraction(decode_noise_scale, "decode_noise_scale", "0.025 for 0.9.8; default: decode_timestep")
        if max_sequence_length is not None and (isinstance(max_sequence_length, bool)
                                                or not isinstance(max_sequence_length, (int, np.integer))
                                                or max_sequence_length < 1):
            raise ValueError(f"max_sequence_length={max_sequence_length!r} must be a positive integer (128 or 256)")
        conds = self._conditions(image, conditions)
        prompts, negatives = prompt_batch(prompt, negative_prompt)
        grid = latent_grid(vcfg, height, width, num_frames)
        b = len(prompts)
        shape = (b, vcfg.latent_channels, *grid)
        if latents is not None and tuple(np.shape(latents)) != shape:
            raise ValueError(f"latents have shape {tuple(np.shape(latents))}, expected {shape} (B, C, F, H, W) for "
                             "these sizes")
        guided = guidance_scale > 1.0
        rescale = guided and guidance_rescale > 0.0
        check_parallel(tcfg, self.mesh, self.rules, batch=2 * b if guided else b)
        max_len = max_sequence_length or MAX_SEQUENCE_LENGTH.get(self.pipeline_class, 128)
        progress = as_progress(self.progress if progress is None else progress)
        metrics: dict[str, Any] = {"load_s": self.load_seconds}

        t0 = time.perf_counter()
        with progress.stage("text encoder"):
            text, lengths = self.encode_prompt(negatives + prompts if guided else prompts, max_len)
            context = text.astype(self.compute_dtype)
            jax.block_until_ready(context)
        metrics["text_encoder_s"] = time.perf_counter() - t0

        explicit = {"latents": latents, "decode": decode_noise}

        def override(purpose, index, shape):
            if explicit.get(purpose) is not None:
                return explicit[purpose]
            return None if noise is None else noise(purpose, index, shape)

        draws = Draws(jax.random.key(seed), override)
        s_count = int(np.prod(grid))
        scheduler, state = self.schedule(num_inference_steps, timesteps, s_count)
        with progress.stage("VAE encode", total=len(conds), unit="condition") if conds else _nothing() as stage:
            x0, mask, cos, sin, n_extra = self._initial_latents(conds, shape, draws, height, width, num_frames,
                                                               frame_rate, metrics, stage)
        metrics.update(parallel_metrics(self.mesh, self.rules, tcfg.num_attention_heads, self.attention))
        vae_device = first_device(self.vae_params)
        x, cos, sin, lengths, mask = to_mesh((x0, jnp.asarray(cos), jnp.asarray(sin), lengths, mask), self.mesh,
                                             self.rules)
        init = x if mask is not None and self.condition_semantics else None
        context = to_mesh(context, self.mesh, self.rules, split_batch=True)
        g, gr = to_mesh((jnp.float32(guidance_scale), jnp.float32(guidance_rescale)), self.mesh, self.rules)

        with mesh_context(self.mesh):
            t0 = time.perf_counter()
            t_shape = (b,) if mask is None else (b, x.shape[1])
            tb0 = to_mesh(jnp.zeros(t_shape, jnp.float32), self.mesh, self.rules)
            with progress.stage("compiling"), recording() as ran:
                compiled = self.compile_step(x, tb0, context, lengths, cos, sin, g, gr, guided=guided, rescale=rescale)
            self._attention_ran = metrics["attention"] = ran_label(ran, self.attention, self._attention_ran)
            metrics["compile_s"] = time.perf_counter() - t0
            metrics["block_loop"] = self.block_loop
            step_times = []
            with progress.stage("denoising", total=state.num_inference_steps, unit="step") as stage:
                for i in range(state.num_inference_steps):
                    ts = time.perf_counter()
                    t = jnp.float32(state.timesteps[i])
                    if init is not None and image_cond_noise_scale > 0:
                        # Fresh noise on fully conditioned tokens, growing with the noise level (motion continuity).
                        fresh = to_mesh(draws("image_cond", i, x.shape), self.mesh, self.rules)
                        held = (mask > 1.0 - 1e-6)[..., None]
                        tt = t / 1000.0
                        x = jnp.where(held, init + (image_cond_noise_scale * fresh) * (tt * tt), x)
                    tb = jnp.full((b,), t, jnp.float32)
                    if mask is None:
                        per_token = None
                    elif self.condition_semantics:
                        per_token = jnp.minimum(tb[:, None], (1.0 - mask) * 1000.0)
                    else:
                        per_token = tb[:, None] * (1.0 - mask)
                    tm = to_mesh(tb if per_token is None else per_token, self.mesh, self.rules)
                    pred = compiled(self.transformer_params, x, tm, context, lengths, cos, sin, g, gr)
                    if self.condition_semantics:
                        stepped, state = scheduler.step(state, -pred, x, i,
                                                        per_token_timesteps=tb[:, None] if per_token is None else tm)
                        if mask is not None:  # tokens stop moving once t falls to their conditioning strength
                            stepped = jnp.where((t / 1000.0 - 1e-6 < (1.0 - mask))[..., None], stepped, x)
                    else:
                        stepped, state = scheduler.step(state, pred, x, i)
                        if mask is not None:  # the image frame is never stepped
                            stepped = jnp.where((mask > 0)[..., None], x, stepped)
                    x = stepped
                    jax.block_until_ready(x)
                    step_times.append(time.perf_counter() - ts)
                    stage.update()
        metrics["step_s"] = float(np.median(step_times)) if step_times else 0.0
        metrics["sampling_s"] = float(np.sum(step_times))

        t0 = time.perf_counter()
        if self.mesh is not None:
            x = jax.device_put(x, vae_device)  # the VAE runs on one device
        final = unpack_latents(x[:, n_extra:], grid)
        tiling = lvae.LTXVideoTiling() if vae_tiling is True else (vae_tiling or None)
        with progress.stage("VAE decode", unit="tile") as stage:
            frames = self.decode_latents(final, decode_timestep, decode_noise_scale, draws, decoder_noise, tiling,
                                         on_tile=stage.update)
        metrics["vae_decode_s"] = time.perf_counter() - t0
        if output_type == "uint8":
            frames = np.round(frames * 255.0).astype(np.uint8)
        fps = float(frame_rate)
        finish_metrics(metrics, height=height, width=width, num_frames=num_frames,
                       num_inference_steps=state.num_inference_steps, fps=fps)
        return VideoOutput(frames=frames, fps=fps, metrics=metrics, latents=np.asarray(final))

    def _conditions(self, image, conditions) -> list[LTXVideoCondition]:
        """The call's conditions (``image`` is one at frame 0, strength 1), checked against the folder's semantics."""
        if isinstance(conditions, LTXVideoCondition):
            conditions = [conditions]
        if image is not None and conditions:
            raise ValueError("pass either image (a first frame) or conditions, not both")
        conds = list(conditions or []) + ([LTXVideoCondition(image=image)] if image is not None else [])
        if not all(isinstance(c, LTXVideoCondition) for c in conds):
            raise ValueError("conditions must be LTXVideoCondition items (vidax.models.ltx.conditioning)")
        if conds and not self.condition_semantics and (len(conds) > 1 or conds[0].image is None
                                                       or conds[0].frame_index != 0 or conds[0].strength != 1.0):
            raise ValueError(f"{self.folder}: an {self.pipeline_class} checkpoint conditions on one image at frame 0 "
                             "(image=...); conditions at other frames, videos and strengths need an "
                             "LTXConditionPipeline checkpoint (LTX-Video 0.9.5+)")
        return conds

    def _initial_latents(self, conds, shape, draws: Draws, height, width, num_frames, frame_rate, metrics, stage):
        """The sampler's starting tokens, conditioning mask (None: text only), RoPE tables and extra token count."""
        grid = shape[2:]
        s, t = self.vae_cfg.spatial_compression, self.vae_cfg.temporal_compression
        pixels = [condition_pixels(c, height, width, num_frames, t) for c in conds]  # checks before any compute
        if not conds:
            x = pack_latents(draws("latents", 0, shape))
            cos, sin = self.rope(grid, frame_rate)
            return x, None, cos, sin, 0
        t0 = time.perf_counter()
        if not self.condition_semantics:  # LTXImageToVideoPipeline: posterior first, then the noise
            z = self.encode_condition(pixels[0], lambda sh: draws("posterior", 0, sh))
            jax.block_until_ready(z)
            stage.update()
            latents, frame_mask = image_to_video_latents(draws("latents", 0, shape), z)
            metrics["vae_encode_s"] = time.perf_counter() - t0
            mask = jnp.broadcast_to(jnp.repeat(frame_mask, grid[1] * grid[2])[None], (shape[0], int(np.prod(grid))))
            cos, sin = self.rope(grid, frame_rate)
            return pack_latents(latents), mask, cos, sin, 0
        noise = draws("latents", 0, shape)  # LTXConditionPipeline: the noise first, then each condition
        items = []
        for k, (c, px) in enumerate(zip(conds, pixels)):
            items.append((c, px.shape[2], jax.block_until_ready(
                self.encode_condition(px, lambda sh, k=k: draws("posterior", k, sh)))))
            stage.update()
        out = condition_latents(noise, items, draws, s, t)
        metrics["vae_encode_s"] = time.perf_counter() - t0
        cos, sin = self.rope(grid, frame_rate, out.pixel_coords)
        return out.tokens, out.mask, cos, sin, out.n_extra

    @property
    def block_loop(self) -> str:
        """``"scan"``, ``"host"`` (one-block chunks in device memory) or ``"offload"`` (chunks in host memory)."""
        if self.block_chunks is None:
            return "scan"
        return "host" if self.block_chunks.in_device_memory else "offload"

    @property
    def compute_dtype(self) -> np.dtype:
        """The transformer's weight dtype (``from_pretrained``'s ``dtype``)."""
        blocks = self.transformer_params["blocks"] if self.block_chunks is None else self.block_chunks.chunks[0]
        return blocks["attn1"]["to_q"]["kernel"].dtype

    def compile_step(self, x, t, context, lengths, cos, sin, g, gr, *, guided: bool, rescale: bool):
        """Compile the guided transformer step for these inputs (placed as :meth:`__call__` places them).

        Returns:
          ``step(params, x, t, context, lengths, cos, sin, g, gr) -> prediction``: the scanned step, or with chunked
          blocks the prologue, the block program per chunk and the epilogue (:func:`vidax.models.ltx.step.compile_step`).
        """
        kw = dict(cfg=self.transformer_cfg, guided=guided, rescale=rescale, mesh=self.mesh, rules=self.rules)
        if self.block_chunks is None:
            return self._step.lower(self.transformer_params, x, t, context, lengths, cos, sin, g, gr,
                                    attention_impl=self.attention, **kw).compile()
        return ltx_step.compile_step(self.transformer_params, self.block_chunks, x, t, context, lengths, cos, sin, g, gr,
                                     attention=self.attention, overlap=self.offload_overlap, **kw)

    def transformer_tree(self) -> dict:
        """The transformer's whole parameter tree, blocks stacked ``(num_layers, ...)`` whatever the block loop."""
        if self.block_chunks is None:
            return self.transformer_params
        return {**self.transformer_params, "blocks": self.block_chunks.stacked()}
