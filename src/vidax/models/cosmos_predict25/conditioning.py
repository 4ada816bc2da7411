"""The conditioning frames of Cosmos-Predict2.5's image- and video-to-world, prepared as the reference prepares them.

diffusers 0.42.1 ``Cosmos2_5_PredictBasePipeline.__call__`` (``pipelines/cosmos/pipeline_cosmos2_5_predict.py``):

* image-to-world: ``torchvision.transforms.functional.to_tensor(image)`` (the pixels ``/ 255``), followed by zero
  frames, then ``VideoProcessor.preprocess_video`` on that tensor: each frame resized by
  ``torch.nn.functional.interpolate(size=(height, width))`` in its default (legacy ``"nearest"``) mode
  (:func:`vidax.core.images.resize_nearest`), then ``2 x - 1``. One conditioning pixel frame, one latent frame.
* video-to-world: the frames as PIL images (what ``diffusers.utils.load_video`` gives) through
  ``VideoProcessor.preprocess_video`` with the pipeline's ``resample="bilinear"``: each frame resized by Pillow's
  bilinear filter to ``(width, height)``, ``/ 255``, ``2 x - 1``; then the last ``4 (n - 1) + 1`` frames for ``n``
  conditional latent frames (1 or 2), the rest of the clip padded with the last frame.

The reference VAE-encodes the whole ``num_frames`` clip (the conditioning frames, then zeros or the repeated last
frame) and keeps the first ``n`` latent frames (the condition mask is zero after them). The Wan VAE is causal in
time: latent frame ``k`` depends on pixel frames ``0 .. 4k`` only, so encoding just the ``4 (n - 1) + 1``
conditioning frames gives the same ``n`` latent frames (:func:`conditioning_pixels` returns only those).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vidax.core.images import ImageError, load_image, load_video, resize_nearest


def image_pixels(image: Any, height: int, width: int) -> np.ndarray:
    """An image-to-world image as the VAE's first frame (see the module docstring).

    Args:
      image: a path, a PIL image or a uint8 ``(H, W, 3)`` array (:func:`vidax.core.images.load_image`).
      height, width: the video's size in pixels.

    Returns:
      float32 ``(3, 1, height, width)`` in ``[-1, 1]``.

    Raises:
      ImageError (a ValueError): an unreadable or too small image.
    """
    img = load_image(image, "image").convert("RGB")
    x = np.asarray(img, np.float32)[None] / np.float32(255.0)  # to_tensor: uint8 / 255 in float32
    x = resize_nearest(x, height, width)[0]
    return np.ascontiguousarray((2.0 * x - 1.0).transpose(2, 0, 1)[:, None])


def video_pixels(video: Any, height: int, width: int, num_latent_conditional_frames: int) -> np.ndarray:
    """A video-to-world clip's conditioning frames as the VAE's input (see the module docstring).

    Args:
      video: a path, a list of PIL images / uint8 arrays, or a uint8 ``(T, H, W, 3)`` array
        (:func:`vidax.core.images.load_video`).
      height, width: the video's size in pixels.
      num_latent_conditional_frames: 1 or 2.

    Returns:
      float32 ``(3, 4 (n - 1) + 1, height, width)`` in ``[-1, 1]``: the clip's last frames.

    Raises:
      ImageError (a ValueError): an unreadable clip, or one shorter than the conditioning needs.
    """
    from PIL import Image

    need = 4 * (num_latent_conditional_frames - 1) + 1
    frames = load_video(video, "video", keep_last=need)
    if len(frames) < need:
        raise ImageError(f"the input video has {len(frames)} frame(s) but video-to-world with "
                         f"{num_latent_conditional_frames} conditional latent frame(s) needs at least {need}")
    x = np.stack([np.asarray(f.resize((width, height), resample=Image.Resampling.BILINEAR), np.float32)
                  for f in frames]) / np.float32(255.0)
    return np.ascontiguousarray((2.0 * x - 1.0).transpose(3, 0, 1, 2))


def conditioning_pixels(image: Any, video: Any, height: int, width: int,
                        num_latent_conditional_frames: int) -> tuple[np.ndarray | None, int]:
    """The VAE input of a call's conditioning and how many latent frames it conditions.

    Returns:
      ``(pixels (3, F, H, W) float32 or None, latent frames)``: image-to-world 1 frame / 1 latent frame,
      video-to-world ``4 (n - 1) + 1`` frames / ``n``, text-to-world ``(None, 0)``.

    Raises:
      ValueError: both an image and a video.
    """
    if image is not None and video is not None:
        raise ValueError("pass image= (image-to-world) or video= (video-to-world), not both")
    if image is not None:
        return image_pixels(image, height, width), 1
    if video is not None:
        return video_pixels(video, height, width, num_latent_conditional_frames), num_latent_conditional_frames
    return None, 0


__all__ = ["conditioning_pixels", "image_pixels", "video_pixels"]
