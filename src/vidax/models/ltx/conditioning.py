"""LTX-Video conditioning: images and videos placed at frames of the generated video.

Two references, as for text-to-video (:mod:`vidax.models.ltx.pipeline`):

``LTXImageToVideoPipeline`` (folders whose ``model_index.json`` names ``LTXPipeline`` or
``LTXImageToVideoPipeline``)
    One image, the first frame. Its latent (sampled from the VAE posterior, normalised) *is* latent frame 0;
    those tokens get timestep 0 and are never stepped (``image_to_video_latents``).

``LTXConditionPipeline`` (0.9.5+ folders)
    Any number of :class:`LTXVideoCondition` items (an image or a video, a frame index, a strength). At frame 0
    the condition's latents are blended into the first latent frames (``lerp(noise, latents, strength)``);
    elsewhere they become *extra tokens* before the video's (their own RoPE coordinates, shifted by the frame
    index), blended with fresh noise; a video longer than two latent frames at a later index puts its tail
    into the video's frames and keeps the first two as extra tokens. Every token carries a conditioning
    strength; its timestep is ``min(t, 1000 (1 - strength))`` and it is stepped only while ``t / 1000 <
    1 - strength``. Fully conditioned tokens get fresh noise ``scale * (t / 1000)^2`` each step
    (``image_cond_noise_scale``). (``condition_latents``; the sampling loop in the pipeline.)

Random draws are requested through a :class:`Draws` in the reference's order, so a caller can substitute
another implementation's noise (tests do).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.core.images import ImageError, load_image, vae_pixels

#: Latent frames a later-index video condition keeps as extra tokens (the reference's ``num_prefix_latent_frames``).
PREFIX_LATENT_FRAMES = 2


@dataclass(frozen=True)
class LTXVideoCondition:
    """One conditioning item of ``LTXConditionPipeline`` (diffusers ``LTXVideoCondition``).

    Attributes:
      image: a path, ``PIL.Image`` or uint8 array ``(H, W, 3)``; or None with ``video``.
      video: frames (a sequence of images, or a uint8 array ``(F, H, W, 3)``); ``8k + 1`` frames are used (a
        longer video is cut to fit the generated video from ``frame_index`` on, then to ``8k + 1``).
      frame_index: the video frame the condition starts at (0: the first frame).
      strength: 1.0 holds the condition fixed; less lets the sampler change it.
    """

    image: Any = None
    video: Any = None
    frame_index: int = 0
    strength: float = 1.0


class Draws:
    """The pipeline's random draws: ``draw(purpose, index, shape)`` from a PRNG key, or from ``override``.

    Purposes: ``"latents"`` (the initial noise), ``"posterior"`` (VAE posterior sample of condition ``index``),
    ``"condition"`` (the noise a later-index condition is blended with), ``"image_cond"`` (step ``index``'s
    conditioning noise), ``"decode"`` (index 0: the decode noise; index 1: the key of the 0.9.1 decoder's injected
    noise). ``override(purpose, index, shape)`` may return an array (used as is) or None (drawn from the key).
    """

    def __init__(self, key: jax.Array, override: Callable[[str, int, tuple], Any] | None = None):
        self._key, self._override = key, override

    def __call__(self, purpose: str, index: int, shape: tuple[int, ...]) -> jax.Array:
        if self._override is not None:
            a = self._override(purpose, index, tuple(shape))
            if a is not None:
                if tuple(np.shape(a)) != tuple(shape):
                    raise ValueError(f"noise for {purpose} {index} has shape {tuple(np.shape(a))}, expected {tuple(shape)}")
                return jnp.asarray(a, jnp.float32)
        return jax.random.normal(self.key(purpose, index), shape, jnp.float32)

    def key(self, purpose: str, index: int) -> jax.Array:
        """The PRNG key of draw ``(purpose, index)`` (for functions that draw their own noise from a key)."""
        return jax.random.fold_in(jax.random.fold_in(self._key, _PURPOSES.index(purpose)), index)


_PURPOSES = ("latents", "posterior", "condition", "image_cond", "decode")


def condition_pixels(cond: LTXVideoCondition, height: int, width: int, num_frames: int, temporal: int) -> np.ndarray:
    """A condition's frames as the VAE's input (diffusers ``VideoProcessor.preprocess`` / ``preprocess_video``).

    A video is cut as the reference's ``trim_conditioning_sequence``: at most ``num_frames - frame_index`` frames,
    then down to ``temporal k + 1``.

    Returns:
      float32 ``(1, 3, T, height, width)`` in ``[-1, 1]``, ``T = temporal k + 1``.

    Raises:
      ValueError: neither or both of image and video; a frame index outside the video; a strength outside
        ``[0, 1]``; a video too short to keep a frame. ImageError: an unreadable or tiny image.
    """
    if (cond.image is None) == (cond.video is None):
        raise ValueError("an LTXVideoCondition takes exactly one of image and video")
    if isinstance(cond.frame_index, bool) or not (isinstance(cond.frame_index, (int, np.integer))
                                                  and 0 <= cond.frame_index < num_frames):
        raise ValueError(f"condition frame_index={cond.frame_index!r} must be an integer in [0, {num_frames - 1}] "
                         f"(a frame of the {num_frames}-frame video)")
    if isinstance(cond.strength, bool) or not (isinstance(cond.strength, (int, float, np.number))
                                               and 0.0 <= cond.strength <= 1.0):
        raise ValueError(f"condition strength={cond.strength!r} must be in [0, 1] (1.0: held fixed)")
    if cond.image is not None:
        frames = [load_image(cond.image, "condition image")]
    else:
        video = cond.video
        frames = [load_image(f, f"condition video frame {i}") for i, f in enumerate(list(video))]
        n = min(len(frames), num_frames - cond.frame_index)
        n = (n - 1) // temporal * temporal + 1
        if n < 1:
            raise ValueError(f"condition video has {len(frames)} frames: at least 1 is needed")
        frames = frames[:n]
    pixels = np.stack([vae_pixels(f, height, width) for f in frames], axis=1)  # (3, T, H, W)
    return pixels[None]


def image_to_video_latents(noise: jax.Array, image_latents: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``LTXImageToVideoPipeline.prepare_latents``: the image latent as frame 0, noise elsewhere.

    Args:
      noise: ``(B, C, F, h, w)``; image_latents: normalised ``(1 or B, C, 1, h, w)``.

    Returns:
      ``latents (B, C, F, h, w)`` and the per-frame conditioning mask ``(F,)`` (1 on frame 0).
    """
    mask = jnp.zeros((noise.shape[2],), jnp.float32).at[0].set(1.0)
    m = mask[None, None, :, None, None]
    latents = jnp.broadcast_to(image_latents, noise.shape) * m + noise * (1 - m)
    return latents, mask


@dataclass
class Conditioned:
    """The sampler's inputs after conditioning (``LTXConditionPipeline.prepare_latents``).

    Attributes:
      tokens: float32 ``(B, n_extra + S, C)``: extra condition tokens, then the video's tokens.
      mask: float32 ``(B, n_extra + S)`` conditioning strength per token.
      pixel_coords: ``(n_extra + S, 3)`` (frame, y, x) of each token in the decoded video.
      n_extra: extra tokens to drop before decoding.
    """

    tokens: jax.Array
    mask: jax.Array
    pixel_coords: np.ndarray
    n_extra: int


def grid_pixels(grid: tuple[int, int, int], spatial: int, temporal: int, frame_index: int = 0) -> np.ndarray:
    """``_prepare_video_ids`` then ``_scale_video_ids``: each token of a ``(F, H, W)`` latent grid at its first
    decoded pixel, latent frame ``f`` at frame ``max(0, temporal f + 1 - temporal) + frame_index``.

    Returns:
      int64 ``(F * H * W, 3)`` (frame, y, x), tokens in ``(f, h, w)`` order.
    """
    f, h, w = np.meshgrid(*(np.arange(n) for n in grid), indexing="ij")
    frames = np.maximum(f * temporal + 1 - temporal, 0) + frame_index
    return np.stack([frames, h * spatial, w * spatial], axis=-1).reshape(-1, 3)


def condition_latents(noise: jax.Array, items: Sequence[tuple[LTXVideoCondition, int, jax.Array]],
                      draws: Draws, spatial: int, temporal: int) -> Conditioned:
    """Place conditions into the noise as ``LTXConditionPipeline.prepare_latents`` does.

    Args:
      noise: float32 ``(B, C, F, h, w)`` initial latents.
      items: per condition ``(condition, number of its video frames, normalised latents (1, C, Tc, h, w))``, in
        the caller's order.
      draws: the random draws (``"condition"`` for a later-index condition's blend noise).
      spatial, temporal: the VAE's compression.

    Returns:
      :class:`Conditioned`.

    """
    b, c, f, h, w = noise.shape
    latents = noise
    frame_mask = jnp.zeros((b, f), jnp.float32)
    extra_tokens, extra_pixels, extra_masks = [], [], []
    for k, (cond, data_frames, z) in enumerate(items):
        strength, index = float(cond.strength), int(cond.frame_index)
        n = z.shape[2]
        if index == 0:
            head = latents[:, :, :n]
            latents = latents.at[:, :, :n].set(head + strength * (z - head))  # torch.lerp(head, z, strength)
            frame_mask = frame_mask.at[:, :n].set(strength)
            continue
        # A video of temporal k + 1 >= temporal + 1 frames has at least two latent frames (the reference checks it).
        if data_frames > 1 and n > PREFIX_LATENT_FRAMES:
            start = index // temporal + PREFIX_LATENT_FRAMES
            end = start + n - PREFIX_LATENT_FRAMES
            part = latents[:, :, start:end]
            latents = latents.at[:, :, start:end].set(part + strength * (z[:, :, PREFIX_LATENT_FRAMES:] - part))
            frame_mask = frame_mask.at[:, start:end].set(strength)
            z = z[:, :, :PREFIX_LATENT_FRAMES]
        blend = draws("condition", k, z.shape)
        z = blend + strength * (z - blend)
        tokens = jnp.moveaxis(z.reshape(z.shape[0], c, -1), 1, 2)
        extra_tokens.append(jnp.broadcast_to(tokens, (b, *tokens.shape[1:])))
        extra_pixels.append(grid_pixels((z.shape[2], h, w), spatial, temporal, index))
        extra_masks.append(jnp.full((b, tokens.shape[1]), strength, jnp.float32))
    tokens = jnp.moveaxis(latents.reshape(b, c, -1), 1, 2)
    mask = jnp.repeat(frame_mask, h * w, axis=1)  # the reference gathers the frame mask by each token's frame
    pixels = grid_pixels((f, h, w), spatial, temporal)
    n_extra = sum(t.shape[1] for t in extra_tokens)
    if extra_tokens:
        tokens = jnp.concatenate([*extra_tokens, tokens], axis=1)
        mask = jnp.concatenate([*extra_masks, mask], axis=1)
        pixels = np.concatenate([*extra_pixels, pixels], axis=0)
    return Conditioned(tokens=tokens, mask=mask, pixel_coords=pixels, n_extra=n_extra)


__all__ = ["Conditioned", "Draws", "ImageError", "LTXVideoCondition", "PREFIX_LATENT_FRAMES", "condition_latents",
           "condition_pixels", "grid_pixels", "image_to_video_latents"]
