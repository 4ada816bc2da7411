"""The Wan family beyond Wan2.1 T2V: image-to-video, first-last-frame, Wan2.2 TI2V-5B and A14B.

Follows diffusers ``pipelines/wan/pipeline_wan_i2v.py`` (``WanImageToVideoPipeline``) and, for
text-to-video with the Wan2.2 checkpoints, ``pipelines/wan/pipeline_wan.py`` (``WanPipeline`` with
``transformer_2`` / ``boundary_ratio`` / ``expand_timesteps``). One class,
:class:`WanImageToVideoPipeline`, runs every Wan checkpoint; :class:`vidax.models.wan.pipeline.WanPipeline`
hands the checkpoints it does not run itself (image-conditioned, two experts, the Wan2.2 VAE) to it.

Conditioning, as the reference builds it:

Wan2.1 I2V / FLF2V and Wan2.2 I2V A14B (``in_channels = 36``)
    The first frame (and, FLF2V, the last) is resized to the output size (PIL Lanczos), mapped to
    ``[-1, 1]`` and placed in an otherwise black video of ``num_frames`` frames, VAE-encoded (the
    mean) and normalised: 16 channels. A frame mask (1 for given frames, 0 elsewhere; the first
    frame repeated 4 times, then folded into ``(4, T)``) adds 4 channels: the 20 condition channels
    are concatenated to the 16 noise channels at every step. Wan2.1 I2V also feeds the CLIP
    ViT-H/14 penultimate hidden states of the image(s) (:mod:`vidax.encoders.clip`) to
    cross-attention (FLF2V: first then last frame, 2 x 257 tokens).
Wan2.2 TI2V-5B (``expand_timesteps``)
    Only the first frame is encoded (one latent frame of 48 channels). Each step the first latent
    frame is *replaced* by it (``(1 - mask) * condition + mask * latents``) and its tokens get
    timestep 0 while the others get ``t`` (per-token AdaLN); after the loop the first frame is
    replaced once more. Text-to-video with this checkpoint has no condition (all tokens at ``t``;
    per-sample AdaLN, which is the same computation).
Wan2.2 A14B (``boundary_ratio``)
    Two experts switched at the boundary timestep (:mod:`vidax.models.wan.experts`), each with its
    guidance scale (``guidance_scale`` for the high-noise expert, ``guidance_scale_2`` for the
    low-noise one).

Output size for an image (:func:`size_for_image`): the reference example's rule (diffusers
``WanImageToVideoPipeline`` docstring): ``h = round(sqrt(max_area * H / W)) // m * m`` and
``w = round(sqrt(max_area * W / H)) // m * m`` with ``m = vae_spatial * patch`` (16 for Wan2.1 and
A14B, 32 for TI2V-5B). The Wan repository's ``generate.py`` floors instead of rounding
(``wan/image2video.py``) and Wan2.2 TI2V uses ``best_output_size``; they can differ by one
multiple. Sizes and frame counts the model cannot run are rounded down as the reference does
(``num_frames`` to ``4k + 1``, height/width to multiples of ``m``) with a warning.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.loader import load_params
from vidax.core.attention import ran_label, recording
from vidax.core.inputs import check_dtype, check_guidance, check_seed, prompt_batch
from vidax.core.offload import OffloadedStack, block_plan
from vidax.core.placement import first_device, mesh_context, parallel_metrics, replicated
from vidax.core.progress import Progress, as_progress
from vidax.encoders.clip import CLIPImageProcessorConfig, clip_specs, encode_images, preprocess_images
from vidax.models.wan import offload as wan_offload
from vidax.core import wan_vae
from vidax.models.wan.experts import HIGH_NOISE, ExpertSet, boundary_timestep, both_fit, expert_for_timestep
from vidax.models.wan.layout import resolve_checkpoint
from vidax.models.wan.pipeline import WanPipeline, compile_offloaded, load_transformer
from vidax.models.wan.sharding import WAN_RULES, check_parallel
from vidax.models.wan.transformer import forward, forward_prologue, rope_tables, transformer_specs
from vidax.core.images import ImageError, load_image, vae_pixels  # noqa: F401 (ImageError, load_image: re-exported)
from vidax.video import VideoOutput, finish_metrics, frames_from_video

#: Output area when neither a size nor ``max_area`` is given (480 x 832, the 480p presets).
DEFAULT_MAX_AREA = 480 * 832
TEMPORAL = 4  # VAE temporal compression of every Wan VAE


# --------------------------------------------------------------------------- images


def size_for_image(image_height: int, image_width: int, max_area: int, multiple: int) -> tuple[int, int]:
    """Output ``(height, width)`` for an image: its aspect ratio at about ``max_area`` pixels.

    The reference example's rule (diffusers ``WanImageToVideoPipeline``):
    ``height = round(sqrt(max_area * ar)) // multiple * multiple``,
    ``width = round(sqrt(max_area / ar)) // multiple * multiple`` with ``ar = image_height / image_width``.

    Raises:
      ImageError: the aspect ratio is so extreme that a side rounds to 0.
    """
    aspect = image_height / image_width
    height = round(np.sqrt(max_area * aspect)) // multiple * multiple
    width = round(np.sqrt(max_area / aspect)) // multiple * multiple
    if height < multiple or width < multiple:
        raise ImageError(f"an image of {image_width}x{image_height} at max area {max_area} gives a {width}x{height} "
                         f"video; each side must be at least {multiple} pixels")
    return int(height), int(width)


def frame_mask(num_frames: int, latent_h: int, latent_w: int, last_frame: bool) -> np.ndarray:
    """The 4 mask channels of Wan I2V / FLF2V (diffusers ``WanImageToVideoPipeline.prepare_latents``).

    Per video frame 1 if given (the first; FLF2V also the last), else 0; the first frame's value is
    repeated 4 times so the ``num_frames + 3`` values fold into ``(4, T)`` with
    ``T = (num_frames - 1) / 4 + 1`` (latent frame ``j`` holds video frames ``4j-3 .. 4j``).

    Returns:
      float32 ``(1, 4, T, latent_h, latent_w)``.
    """
    m = np.ones((num_frames, latent_h, latent_w), np.float32)
    m[1 : num_frames - 1 if last_frame else num_frames] = 0
    m = np.concatenate([np.repeat(m[:1], TEMPORAL, axis=0), m[1:]], axis=0)
    t = m.shape[0] // TEMPORAL
    return np.ascontiguousarray(m.reshape(t, TEMPORAL, latent_h, latent_w).transpose(1, 0, 2, 3)[None])


# --------------------------------------------------------------------------- the step


def _video_step(params, latents, condition, mask, timestep, context, image_context, cos, sin, guidance_scale, *,
                cfg, attention_impl, guided, mode, mesh=None, rules=WAN_RULES):
    """One guided transformer evaluation for every Wan task; both CFG halves in one batch.

    Args:
      latents: float32 ``(B, z, T, h, w)``, the sampler's state.
      condition: ``"concat"``: float32 ``(B, 20, T, h, w)`` (mask + image latents), concatenated to the
        latents' channels; ``"expand"``: float32 ``(1, z, 1, h, w)`` first-frame latents; else None.
      mask: ``"expand"``: float32 ``(1, 1, T, h, w)`` (0 on the first latent frame, 1 elsewhere), else None.
      timestep: float32 ``(B,)``.
      context: ``(2B or B, 512, text_dim)`` (prompts, then negatives).
      image_context: float32 ``(B, L_img, image_dim)`` CLIP states, or None.
      guidance_scale: float32 scalar (this step's expert's).
      mode: static: ``"t2v"``, ``"concat"`` or ``"expand"``.

    Returns:
      float32 ``(B, z, T, h, w)``: ``uncond + g * (cond - uncond)`` (or the conditional prediction).
    """
    x, ts, img = _transformer_inputs(params, latents, condition, mask, timestep, image_context, cfg=cfg,
                                     guided=guided, mode=mode)
    out = forward(params, x, ts, context, cos, sin, image_context=img, cfg=cfg, attention_impl=attention_impl,
                  mesh=mesh, rules=rules)
    if not guided:
        return replicated(out, mesh)
    cond, uncond = jnp.split(out, 2)
    return replicated(uncond + guidance_scale * (cond - uncond), mesh)


def _transformer_inputs(params, latents, condition, mask, timestep, image_context, *, cfg, guided, mode):
    """The transformer's ``(latents, timestep, image_context)`` for one step of :func:`_video_step`: the
    condition applied per ``mode``, cast to the weight dtype, and with ``guided`` the CFG batch of 2B."""
    dtype = params["patch_embedding"]["kernel"].dtype
    b = latents.shape[0]
    if mode == "concat":
        x = jnp.concatenate([latents, condition.astype(latents.dtype)], axis=1)
        ts = timestep
    elif mode == "expand":
        x = (1 - mask) * condition + mask * latents
        pt, ph, pw = cfg.patch_size
        # diffusers: (first_frame_mask[0][0][:, ::2, ::2] * t).flatten(), one row per sample.
        ts = (mask[0, 0, ::pt, ::ph, ::pw][None] * timestep[:, None, None, None]).reshape(b, -1)
    else:
        x, ts = latents, timestep
    x = x.astype(dtype)
    if not guided:
        return x, ts, image_context
    img2 = None if image_context is None else jnp.concatenate([image_context, image_context])
    return jnp.concatenate([x, x]), jnp.concatenate([ts, ts]), img2


def _video_prologue(params, latents, condition, mask, timestep, context, image_context, cos, sin, *, cfg, guided,
                    mode, mesh=None, rules=WAN_RULES):
    """The offloaded :func:`_video_step` before the blocks: its inputs, then the transformer's prologue.

    Returns:
      ``x, temb, temb6, ctx, cos, sin`` (:func:`vidax.models.wan.transformer.forward_prologue`).
    """
    x, ts, img = _transformer_inputs(params, latents, condition, mask, timestep, image_context, cfg=cfg,
                                     guided=guided, mode=mode)
    check_parallel(cfg, mesh, rules, x.shape[0])
    return forward_prologue(params, x, ts, context, cos, sin, cfg=cfg, mesh=mesh, rules=rules, image_context=img)


@dataclass
class OffloadedExpert:
    """A transformer with chunked blocks: the resident parameters and the block chunks.

    Attributes:
      resident: the parameters outside ``"blocks"`` (device memory).
      stack: the blocks (:class:`vidax.core.offload.OffloadedStack`): streamed from host memory every
        step (offloading), or one block per chunk in device memory (the host block loop).
    """

    resident: dict
    stack: OffloadedStack


# --------------------------------------------------------------------------- the pipeline


def needs_general_pipeline(folder: str | os.PathLike) -> bool:
    """Whether a checkpoint needs :class:`WanImageToVideoPipeline` (reads only config files).

    True for an image-conditioned transformer (CLIP ``image_dim``, or more input than output
    channels: Wan2.1 I2V / FLF2V, Wan2.2 I2V A14B), two experts (Wan2.2 A14B), per-token timesteps
    (``expand_timesteps``) or a Wan2.2 VAE (``patch_size``); False for Wan2.1 T2V.

    Raises:
      CheckpointError: see :func:`vidax.models.wan.layout.resolve_checkpoint`.
    """
    ckpt = resolve_checkpoint(folder)
    tcfg = ckpt.transformer_config()
    if tcfg.has_image_input or tcfg.in_channels != tcfg.out_channels:
        return True
    if ckpt.transformer_2_config_path is not None or ckpt.expand_timesteps:
        return True
    if ckpt.vae_config_path is not None:
        import json

        return json.loads(ckpt.vae_config_path.read_text()).get("patch_size") is not None
    return False


class WanImageToVideoPipeline(WanPipeline):
    """Every Wan task: I2V, FLF2V (Wan2.1), TI2V-5B (Wan2.2), A14B T2V / I2V (Wan2.2), and T2V.

    Example::

        pipe = WanImageToVideoPipeline.from_pretrained("Wan2.1-I2V-14B-480P-Diffusers", dtype="bfloat16")
        out = pipe("a cat surfing", image="cat.png", num_frames=81)        # size from the image, 480p area
        out = pipe("a flower blooming", image="bud.png", last_image="bloom.png")  # FLF2V checkpoint

    The call signature extends :meth:`WanPipeline.__call__` (``prompt, negative_prompt`` positional,
    the rest by keyword), so the T2V code paths can run this class unchanged.

    Attributes (besides :class:`WanPipeline`'s):
      experts: :class:`vidax.models.wan.experts.ExpertSet` (one expert, or two for Wan2.2 A14B).
      boundary_ratio: ``model_index.json``'s, or None.
      expand_timesteps: Wan2.2 TI2V-5B per-token timesteps.
      image_encoder: ``(params, CLIPVisionConfig)`` for Wan2.1 I2V / FLF2V, else None.
      image_processor: :class:`vidax.encoders.clip.CLIPImageProcessorConfig`, or None.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.experts: ExpertSet | None = None
        self.boundary_ratio: float | None = None
        self.expand_timesteps = False
        self.image_encoder = None
        self.image_processor: CLIPImageProcessorConfig | None = None
        self._video_step = jax.jit(_video_step, static_argnames=("cfg", "attention_impl", "guided", "mode", "mesh",
                                                                  "rules"))

    @classmethod
    def from_pretrained(
        cls,
        folder: str | os.PathLike,
        *,
        dtype: Any = "bfloat16",
        image_encoder_dtype: Any = "float32",
        expert_residency: str = "auto",
        **kwargs,
    ) -> WanImageToVideoPipeline:
        """Load any Wan checkpoint folder (diffusers layout for the image and two-expert parts).

        Everything :meth:`WanPipeline.from_pretrained` loads (the high-noise / only transformer,
        VAE, text encoder, tokenizer, scheduler; mesh options), plus the parts ``model_index.json``
        names: ``transformer_2/`` (the low-noise expert), ``image_encoder/`` (CLIP vision,
        transformers layout), ``image_processor/`` (``preprocessor_config.json``), and the settings
        ``boundary_ratio`` and ``expand_timesteps``.

        Args:
          folder: the checkpoint folder.
          dtype: transformer weight dtype (both experts).
          image_encoder_dtype: CLIP dtype (float32 in the reference example).
          expert_residency: ``"both"`` experts on the device; ``"active"``: one at a time, the
            low-noise expert loaded (already sharded) when the boundary is crossed, after the other
            is freed; ``"auto"``: ``"both"`` if two experts take at most 70% of device memory
            (always on CPU), else ``"active"``.
          **kwargs: the other options of :meth:`WanPipeline.from_pretrained` (``text_encoder_dtype``,
            ``vae_dtype``, ``attention``, ``dp``, ``tp``, ``sp``, ``devices``).

        Raises:
          CheckpointError: a missing or mismatched part (named); experts of different architectures.
          ValueError: an unknown residency, or "active" with the host block loop; see
            :meth:`WanPipeline.from_pretrained`.

        With weight offloading (``offload_chunk``, :mod:`vidax.core.offload`) every expert's blocks are
        loaded straight into host memory as chunks and streamed each step; only their resident
        parameters (embedders, head) are on the device, so both experts stay loaded ("both").
        """
        if expert_residency not in ("auto", "both", "active"):
            raise ValueError(f"expert_residency must be 'auto', 'both' or 'active', got {expert_residency!r}")
        dtype, image_encoder_dtype = check_dtype(dtype), check_dtype(image_encoder_dtype, "image_encoder_dtype")
        ckpt = resolve_checkpoint(folder)
        tcfg2 = ckpt.transformer_2_config()
        if tcfg2 is not None and tcfg2 != ckpt.transformer_config():
            raise CheckpointError(f"{ckpt.folder}: transformer/ and transformer_2/ have different configurations; "
                                  "the two experts of a Wan2.2 A14B checkpoint share one architecture")
        planned = block_plan(ckpt.transformer_config().num_layers, kwargs.get("offload_chunk"),
                             kwargs.get("block_loop", "auto"))
        if planned is not None and planned.memory == "device" and expert_residency == "active":
            raise ValueError("expert_residency='active' swaps whole stacked experts: pass block_loop='scan' with it "
                             "(the host block loop, the CPU default, keeps both experts' blocks resident)")
        t0 = time.perf_counter()
        pipe = super().from_pretrained(folder, dtype=dtype, **kwargs)
        tcfg, mesh = pipe.transformer_cfg, pipe.mesh
        maps = ckpt.maps
        shardings = None if mesh is None else WAN_RULES.sharding_fn(mesh)

        plan = None if pipe.offload is None else pipe.offload.plan

        def loader(reader_fn, weights):
            def load():
                if plan is None:
                    return load_params(reader_fn(), maps.transformer_keymap(tcfg), transformer_specs(tcfg),
                                       jnp.dtype(dtype), source=str(weights), shardings=shardings)
                return OffloadedExpert(*load_transformer(reader_fn(), maps.transformer_keymap(tcfg), tcfg, dtype,
                                                         source=str(weights), mesh=mesh, plan=plan))
            return load

        high = pipe.transformer_params if plan is None else OffloadedExpert(pipe.transformer_params, pipe.offload)
        loaders = [loader(ckpt.transformer_reader, ckpt.transformer_weights)]
        if tcfg2 is not None:
            loaders.append(loader(ckpt.transformer_2_reader, ckpt.transformer_2_weights))
        residency = "both" if plan is not None else expert_residency
        if residency == "auto":
            nbytes = sum(a.nbytes for a in jax.tree.leaves(high))
            devices = None if mesh is None else list(mesh.devices.flat)
            residency = "both" if len(loaders) == 1 or both_fit(nbytes, devices) else "active"
        pipe.experts = ExpertSet(loaders, residency, resident={HIGH_NOISE: high})
        pipe.transformer_params = None  # owned by pipe.experts (swapped out in "active" mode)
        pipe.boundary_ratio = ckpt.boundary_ratio
        pipe.expand_timesteps = ckpt.expand_timesteps
        if ckpt.scheduler_config_path is None and "original_flow_shift" in ckpt.pipeline_config:
            # Original Wan2.2 A14B release: no scheduler config; generate.py's shift (T2V 12.0, I2V 5.0).
            pipe.scheduler_config = {**pipe.scheduler_config, "flow_shift": ckpt.pipeline_config["original_flow_shift"]}
        if tcfg.has_image_input:
            if ckpt.image_encoder is None:
                raise CheckpointError(f"{ckpt.folder}: the transformer takes CLIP image tokens (image_dim="
                                      f"{tcfg.image_dim}) but the checkpoint has no image encoder (diffusers "
                                      "image_encoder/, or the original release's models_clip_*.pth)")
            creader, ckeymap, ccfg = ckpt.image_encoder_source()
            cparams = load_params(creader, ckeymap, clip_specs(ccfg), jnp.dtype(image_encoder_dtype),
                                  source=str(ckpt.image_encoder))
            if ccfg.hidden_size != tcfg.image_dim:
                raise CheckpointError(f"{ckpt.folder}: the image encoder is {ccfg.hidden_size} wide but the transformer "
                                      f"expects image_dim={tcfg.image_dim}")
            pipe.image_encoder = (cparams, ccfg)
            # Without image_processor/ (the original release): CLIP's settings at the encoder's input size.
            size = ccfg.image_size
            pipe.image_processor = (CLIPImageProcessorConfig.from_folder(ckpt.image_processor)
                                    if ckpt.image_processor is not None
                                    else CLIPImageProcessorConfig(shortest_edge=size, crop_size=(size, size)))
        pipe.load_seconds += time.perf_counter() - t0
        return pipe

    # -- properties ------------------------------------------------------------------

    @property
    def latent_channels(self) -> int:
        """Channels of the sampled latents (the VAE's ``z_dim``: 16, or 48 for Wan2.2 TI2V-5B)."""
        return self.vae_cfg.z_dim

    @property
    def spatial_factor(self) -> int:
        """Pixels per latent pixel (8, or 16 with the Wan2.2 VAE)."""
        return self.vae_cfg.spatial_compression

    @property
    def size_multiple(self) -> int:
        """Height and width must be multiples of this: VAE factor x transformer patch (16, or 32 for TI2V-5B)."""
        return self.spatial_factor * self.transformer_cfg.patch_size[1]

    @property
    def condition_mode(self) -> str:
        """``"concat"`` (mask + image latents as extra channels), ``"expand"`` (TI2V first-frame
        replacement with per-token timesteps) or ``"t2v"`` (no image condition)."""
        if self.transformer_cfg.in_channels == self.latent_channels + 4 + self.latent_channels:
            return "concat"
        return "expand" if self.expand_timesteps else "t2v"

    # -- stages ----------------------------------------------------------------------

    def encode_image(self, images: list) -> jax.Array:
        """CLIP penultimate hidden states of ``images`` (PIL): float32 ``(len(images), 257, 1280)``."""
        params, cfg = self.image_encoder
        return encode_images(params, cfg, preprocess_images(images, self.image_processor))

    def check_size(self, height: int, width: int, num_frames: int) -> tuple[int, int, int]:
        """Round a size the model cannot run down as the reference does, warning about each change.

        ``num_frames`` to ``num_frames // 4 * 4 + 1`` (at least 1), height and width down to
        multiples of :attr:`size_multiple`.

        Returns:
          ``(height, width, num_frames)``.

        Raises:
          ValueError: a non-positive value, or a side that rounds to 0.
        """
        for name, v in (("height", height), ("width", width), ("num_frames", num_frames)):
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{name}={v} must be a positive integer")
        if num_frames % TEMPORAL != 1:
            rounded = max(num_frames // TEMPORAL * TEMPORAL + 1, 1)
            way = "down to" if rounded < num_frames else "up to"
            warnings.warn(f"num_frames - 1 must be divisible by {TEMPORAL}; rounding num_frames={num_frames} {way} "
                          f"{rounded} (as the reference does)", UserWarning, stacklevel=3)
            num_frames = rounded
        m = self.size_multiple
        h, w = height // m * m, width // m * m
        if h < m or w < m:
            raise ValueError(f"height={height} and width={width} must be at least {m} (multiples of {m})")
        if (h, w) != (height, width):
            warnings.warn(f"height and width must be multiples of {m}; adjusting ({height}, {width}) -> ({h}, {w}) "
                          "(as the reference does)", UserWarning, stacklevel=3)
        return int(h), int(w), int(num_frames)

    def output_size(self, image=None, height: int | None = None, width: int | None = None,
                    max_area: int | None = None) -> tuple[int, int]:
        """The video size ``(height, width)``: explicit ``height``/``width``; else from the image's aspect
        ratio at ``max_area`` (default :data:`DEFAULT_MAX_AREA`; :func:`size_for_image`); else 480 x 832.

        Raises:
          ValueError: only one of height and width given.
        """
        if (height is None) != (width is None):
            raise ValueError("pass both height and width, or neither (the size then follows the image)")
        if height is not None:
            return height, width
        if image is None:
            return 480, 832
        return size_for_image(image.height, image.width, max_area or DEFAULT_MAX_AREA, self.size_multiple)

    def prepare_condition(self, image, last_image, batch: int, height: int, width: int, num_frames: int,
                          on_chunk=None):
        """VAE-encode the conditioning frame(s): the ``condition`` (and ``mask``) of :func:`_video_step`
        (``on_chunk``: called after each encoded chunk, for progress).

        Returns:
          ``(condition, mask)``: ``"concat"``: float32 ``(B, 4 + z, T, h, w)`` and None;
          ``"expand"``: float32 ``(1, z, 1, h, w)`` and ``(1, 1, T, h, w)``.
        """
        f = self.spatial_factor
        lh, lw = height // f, width // f
        t = (num_frames - 1) // TEMPORAL + 1
        first = vae_pixels(image, height, width)
        if self.condition_mode == "expand":
            video = first[None, :, None]
        else:
            frames = [first[:, None], np.zeros((3, num_frames - (2 if last_image is not None else 1), height, width),
                                               np.float32)]
            if last_image is not None:
                frames.append(vae_pixels(last_image, height, width)[:, None])
            video = np.concatenate(frames, axis=1)[None]
        device = first_device(self.vae_params)
        # The encoder side is loaded at the first image (a text-only TI2V run never reads it).
        vae = {**self.vae_params, **self.vae_encoder.get()}
        mean, _ = wan_vae.encode(vae, self.vae_cfg, jax.device_put(jnp.asarray(video), device), on_chunk=on_chunk)
        latent = wan_vae.normalize_latents(self.vae_cfg, mean.astype(jnp.float32))  # retrieve_latents(argmax)
        if self.condition_mode == "expand":
            mask = np.ones((1, 1, t, lh, lw), np.float32)
            mask[:, :, 0] = 0
            return latent, jnp.asarray(mask)
        mask = jnp.asarray(frame_mask(num_frames, lh, lw, last_image is not None))
        cond = jnp.concatenate([mask, latent], axis=1)
        return jnp.broadcast_to(cond, (batch, *cond.shape[1:])), None

    # -- generation ------------------------------------------------------------------

    def __call__(
        self,
        prompt: str | list[str],
        negative_prompt: str | list[str] | None = None,
        *,
        image: Any = None,
        last_image: Any = None,
        height: int | None = None,
        width: int | None = None,
        max_area: int | None = None,
        num_frames: int = 81,
        num_inference_steps: int = 50,
        guidance_scale: float = 5.0,
        guidance_scale_2: float | None = None,
        flow_shift: float | None = None,
        sampler: str | None = None,
        seed: int = 0,
        latents: np.ndarray | None = None,
        output_type: str = "uint8",
        progress: bool | Progress | None = None,
        schedule: str | None = None,
    ) -> VideoOutput:
        """Generate videos, from an image (I2V), two images (FLF2V) or text alone (T2V).

        Args:
          prompt: one prompt or a list (batch).
          image: the first frame: a path, a PIL image or a uint8 array (see :func:`load_image`);
            required by image-conditioned checkpoints (36 input channels), optional for TI2V-5B,
            not accepted by text-only checkpoints.
          negative_prompt: for classifier-free guidance; default "".
          last_image: the last frame (FLF2V; Wan2.1 needs an FLF2V checkpoint, Wan2.2 A14B I2V takes it too).
          height, width: output size; default from the image at ``max_area`` (:func:`size_for_image`),
            or 480 x 832 without an image. Rounded down to multiples of :attr:`size_multiple` with a warning.
          max_area: target pixel count for the image rule (default 480 * 832).
          num_frames: ``4k + 1`` frames (others are rounded down with a warning, as the reference does).
          num_inference_steps, flow_shift, sampler, seed, schedule: as :meth:`WanPipeline.__call__`.
          guidance_scale: CFG scale (of the high-noise expert for A14B); guidance is off at 1.0 or below.
          guidance_scale_2: the low-noise expert's scale (A14B only; default ``guidance_scale``).
          latents: explicit initial noise float32 ``(B, z, (F-1)/4+1, H/f, W/f)``.
          output_type: "uint8" or "float".
          progress: show each stage's progress (:class:`vidax.core.progress.Progress`; False: nothing); default:
            ``from_pretrained``'s.

        Returns:
          :class:`vidax.video.VideoOutput`: frames ``(B, F, H, W, 3)`` at :attr:`fps`; metrics
          (:data:`vidax.video.COMMON_METRICS`) add ``image_encoder_s``, ``expert_switch_step`` and ``expert_swaps``.

        Raises:
          ImageError: a missing, unreadable or too small image. ValueError: an image for a text-only
          checkpoint or none for an image checkpoint, a last image without FLF2V support,
          ``guidance_scale_2`` without a second expert, mismatched prompts or latents, and the argument
          checks of :meth:`WanPipeline.__call__`. FloatingPointError: a decoded video with NaN values.
        """
        tcfg = self.transformer_cfg
        mode = self.condition_mode
        if mode == "expand" and image is None:
            mode = "t2v"  # TI2V-5B text-to-video: every token at t (per-sample AdaLN computes the same)
        if image is None and mode == "concat":
            raise ValueError("this checkpoint is image-to-video: pass image= (the first frame; --image on the "
                             "command line)")
        if image is not None and mode == "t2v":
            raise ValueError("this checkpoint is text-to-video only: it takes no image")
        if last_image is not None and (image is None or mode != "concat"):
            raise ValueError("last_image needs image and a first-last-frame capable checkpoint (36 input channels)")
        if last_image is not None and tcfg.has_image_input and tcfg.pos_embed_seq_len is None:
            raise ValueError("this Wan2.1 I2V checkpoint has no FLF2V image position embedding (pos_embed_seq_len); "
                             "use an FLF2V checkpoint for last_image")
        if guidance_scale_2 is not None and self.boundary_ratio is None:
            raise ValueError("guidance_scale_2 is only supported by two-expert checkpoints (boundary_ratio set)")
        image = None if image is None else load_image(image, "image")
        last_image = None if last_image is None else load_image(last_image, "last image")
        h0, w0 = self.output_size(image, height, width, max_area)
        height, width, num_frames = self.check_size(h0, w0, num_frames)
        if last_image is not None and num_frames < 1 + TEMPORAL:
            raise ValueError(f"with last_image, num_frames must be at least {1 + TEMPORAL} (first and last frame "
                             f"are different frames), got {num_frames}")
        if guidance_scale_2 is None:
            guidance_scale_2 = guidance_scale
        prompts, negatives = prompt_batch(prompt, negative_prompt)
        guidance_scale = check_guidance(guidance_scale)
        guidance_scale_2 = check_guidance(guidance_scale_2, "guidance_scale_2")
        seed = check_seed(seed)
        guided = guidance_scale > 1.0
        b = len(prompts)
        check_parallel(tcfg, self.mesh, self.rules, batch=2 * b if guided else b)
        f = self.spatial_factor
        shape = (b, self.latent_channels, (num_frames - 1) // TEMPORAL + 1, height // f, width // f)
        if latents is not None and tuple(latents.shape) != shape:
            raise ValueError(f"latents have shape {tuple(latents.shape)}, expected {shape} for these sizes")
        # Host-side tables and the sampler first: a token grid beyond rope_max_seq_len or a bad sampler fails before
        # anything is computed.
        cos, sin = rope_tables(tcfg, (b, tcfg.in_channels, *shape[2:]))
        scheduler = self.make_scheduler(sampler, flow_shift, schedule)
        progress = as_progress(self.progress if progress is None else progress)
        metrics: dict[str, Any] = {"load_s": self.load_seconds}

        t0 = time.perf_counter()
        with progress.stage("text encoder"):
            text = self.encode_prompt(prompts + negatives if guided else prompts)
            dtype = _compute_dtype(self.experts)
            context = text.astype(dtype)
            jax.block_until_ready(context)
        metrics["text_encoder_s"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        image_context = None
        if tcfg.has_image_input:
            with progress.stage("image encoder"):
                states = self.encode_image([image] if last_image is None else [image, last_image])
                # FLF2V: first frame's tokens then the last frame's, one row per sample (diffusers views (2B, L) as
                # (B, 2L)).
                states = states.reshape(1, -1, states.shape[-1])
                image_context = jnp.broadcast_to(states, (b, *states.shape[1:])).astype(dtype)
                jax.block_until_ready(image_context)
        metrics["image_encoder_s"] = time.perf_counter() - t0

        condition = mask = None
        if mode != "t2v":
            t0 = time.perf_counter()
            frames_in = 1 if mode == "expand" else num_frames
            with progress.stage("VAE encode", total=(frames_in - 1) // TEMPORAL + 1, unit="chunk") as stage:
                condition, mask = self.prepare_condition(image, last_image, b, height, width, num_frames,
                                                         on_chunk=stage.update)
                jax.block_until_ready(condition)
            metrics["vae_encode_s"] = time.perf_counter() - t0

        state = scheduler.set_timesteps(num_inference_steps)
        boundary = boundary_timestep(self.boundary_ratio, scheduler.num_train_timesteps)
        if latents is None:
            x = jax.random.normal(jax.random.key(seed), shape, jnp.float32)
        else:
            x = jnp.asarray(latents, jnp.float32)
        cos, sin = jnp.asarray(cos), jnp.asarray(sin)
        scales = (jnp.float32(guidance_scale), jnp.float32(guidance_scale_2))
        step_args = dict(cfg=tcfg, attention_impl=self.attention, guided=guided, mode=mode, mesh=self.mesh,
                         rules=self.rules)
        metrics.update(parallel_metrics(self.mesh, self.rules, self.transformer_cfg.num_attention_heads,
                                        self.attention))
        aux_device = first_device(self.vae_params)
        x, context, cos, sin = self._to_mesh(x, context, cos, sin)
        condition, mask, image_context = (None if a is None else self._to_mesh(a)[0]
                                          for a in (condition, mask, image_context))
        scales = self._to_mesh(*scales)
        swaps_before = self.experts.swaps

        with mesh_context(self.mesh):
            t0 = time.perf_counter()
            t_arg = self._to_mesh(jnp.zeros((b,), jnp.float32))[0]
            first = expert_for_timestep(state.timesteps[0], boundary) if state.num_inference_steps else HIGH_NOISE
            with progress.stage("compiling"), recording() as ran:
                if self.offload is None:
                    compiled = self._video_step.lower(self.experts.get(first), x, condition, mask, t_arg, context,
                                                      image_context, cos, sin, scales[0], **step_args).compile()
                else:
                    compiled = self._compile_offloaded_video(x, condition, mask, t_arg, context, image_context, cos,
                                                             sin, scales[0], guided=guided, mode=mode)
            self._attention_ran = metrics["attention"] = ran_label(ran, self.attention, self._attention_ran)
            metrics.update(self._block_metrics())
            metrics["compile_s"] = time.perf_counter() - t0

            step_times, experts_used = [], []
            with progress.stage("denoising", total=state.num_inference_steps, unit="step") as stage:
                for i in range(state.num_inference_steps):
                    ts = time.perf_counter()
                    k = expert_for_timestep(state.timesteps[i], boundary)
                    params = self.experts.get(k)
                    experts_used.append(k)
                    t_arg = self._to_mesh(jnp.full((b,), state.timesteps[i], jnp.float32))[0]
                    noise_pred = compiled(params, x, condition, mask, t_arg, context, image_context, cos, sin,
                                          scales[k])
                    x, state = scheduler.step(state, noise_pred, x, i)
                    jax.block_until_ready(x)
                    step_times.append(time.perf_counter() - ts)
                    stage.update()
        metrics["step_s"] = float(np.median(step_times)) if step_times else 0.0
        metrics["sampling_s"] = float(np.sum(step_times))
        metrics["experts"] = experts_used
        metrics["expert_switch_step"] = next((i for i, k in enumerate(experts_used) if k != HIGH_NOISE), None)
        metrics["expert_swaps"] = self.experts.swaps - swaps_before
        metrics["expert_residency"] = self.experts.residency

        t0 = time.perf_counter()
        x = jax.device_put(x, aux_device)
        if mode == "expand":
            x = (1 - jax.device_put(mask, aux_device)) * jax.device_put(condition, aux_device) \
                + jax.device_put(mask, aux_device) * x
        with progress.stage("VAE decode", total=x.shape[2], unit="chunk") as stage:
            video = wan_vae.decode(self.vae_params, self.vae_cfg, wan_vae.denormalize_latents(self.vae_cfg, x),
                                   on_chunk=stage.update)
            video = np.asarray(video, np.float32)
        metrics["vae_decode_s"] = time.perf_counter() - t0
        frames = frames_from_video(video, output_type)
        finish_metrics(metrics, height=height, width=width, num_frames=num_frames,
                       num_inference_steps=state.num_inference_steps, fps=self.fps)
        return VideoOutput(frames=frames, fps=self.fps, metrics=metrics, latents=np.asarray(x))

    def compilations(self) -> int:
        """How many times the step has been compiled by this pipeline."""
        return self._video_step._cache_size()

    def _compile_offloaded_video(self, x, condition, mask, t, context, image_context, cos, sin, g, *, guided, mode):
        """Compile the offloaded :func:`_video_step` ahead of time (prologue, one chunk function, epilogue).

        Returns:
          ``step(expert, x, condition, mask, t, context, image_context, cos, sin, g) -> noise_pred`` for an
          :class:`OffloadedExpert` (every expert has the same shapes and shardings: one compilation).
        """
        expert = self.experts.get(self.experts.resident()[0])
        static = dict(cfg=self.transformer_cfg, guided=guided, mode=mode, mesh=self.mesh, rules=self.rules)
        inputs = (expert.resident, x, condition, mask, t, context, image_context, cos, sin)
        pro_c, chunk_c, epi_c = compile_offloaded(
            _video_prologue, inputs, static, expert.resident, expert.stack.abstract_chunk(), g, latent_shape=x.shape,
            cfg=self.transformer_cfg, attention=self.attention, guided=guided, mesh=self.mesh, rules=self.rules,
            per_token=mode == "expand")
        overlap = self.offload_overlap

        def step(expert, x, condition, mask, t, context, image_context, cos, sin, g):
            h, temb, temb6, ctx, cos_p, sin_p = pro_c(expert.resident, x, condition, mask, t, context, image_context,
                                                      cos, sin)
            h = wan_offload.run_stack(expert.stack, chunk_c, h, ctx, temb6, cos_p, sin_p, overlap=overlap)
            return epi_c(expert.resident, h, temb, g)

        return step


def _compute_dtype(experts: ExpertSet):
    # The resident expert's weight dtype (both experts share it); never triggers a swap.
    params = experts.get(experts.resident()[0])
    params = params.resident if isinstance(params, OffloadedExpert) else params
    return params["patch_embedding"]["kernel"].dtype
