"""The image-to-video pipeline's first frame, prepared as the reference prepares it.

diffusers 0.42.1 ``CogVideoXImageToVideoPipeline.__call__`` calls
``self.video_processor.preprocess(image, height=height, width=width)`` with a default
``VideoProcessor`` (``VaeImageProcessor`` config: ``do_resize=True``, ``resample="lanczos"``,
``reducing_gap=None``, ``do_normalize=True``, ``do_convert_rgb=False``) and
``resize_mode="default"`` (a plain resize to ``(width, height)``: the aspect ratio is not kept, nothing is
cropped or padded). The target size is first floored to a multiple of ``vae_scale_factor`` (8), a no-op
for the sizes the pipeline accepts (multiples of 16). Then, by input type:

* PIL images: ``image.resize((width, height), resample=LANCZOS, reducing_gap=None)`` (Pillow returns an
  unchanged copy at the same size), ``np.array(image).astype(float32) / 255``. The processor does not
  convert to RGB (other modes fail there); diffusers' ``load_image`` gives RGB images, and vidax converts
  every image (and file path, opened by :func:`vidax.core.images.load_image`) to RGB before resizing;
* tensors (and lists of NumPy arrays, which take the same path): ``torch.nn.functional.interpolate(x,
  size=(height, width))``, whose default mode is PyTorch's legacy ``"nearest"``: output index ``i``
  reads input index ``min(floor(float32(i) * float32(in / out)), in - 1)`` (the identity at the same
  size, ``i >> 1`` at exactly twice the size). No ``/ 255``: the values are taken to be in ``[0, 1]``;

then ``2 x - 1`` in float32. Both resizes are reproduced here without PyTorch (tested equal to
``VideoProcessor.preprocess``); :func:`image_frames` returns the ``[0, 1]`` frames and
:meth:`~vidax.models.cogvideox.pipeline.CogVideoXImageToVideoPipeline.encode_image` applies ``2 x - 1``.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from vidax.core.images import ImageError, load_image, nearest_indices, resize_nearest


def _pil_frame(image: Any, height: int, width: int) -> np.ndarray:
    """A path or PIL image as the reference's PIL path: Lanczos resize, RGB, float32 ``/ 255``; ``(H, W, 3)``."""
    from PIL import Image

    # RGB first, as diffusers' load_image hands images to the pipeline (the processor itself does not
    # convert, and fails on other modes); an RGB image is unchanged by it. Then the processor's resize.
    img = load_image(image, "image").convert("RGB")
    img = img.resize((width, height), resample=Image.Resampling.LANCZOS, reducing_gap=None)
    return np.asarray(img).astype(np.float32) / 255.0


def _array_frames(image: Any, height: int, width: int) -> np.ndarray:
    """A uint8 or float ``[0, 1]`` array ``(H, W, 3)`` / ``(B, H, W, 3)`` as the reference's tensor path."""
    arr = np.asarray(image)
    if arr.ndim == 3:
        arr = arr[None]
    if arr.ndim != 4 or arr.shape[-1] != 3:
        raise ImageError(f"image arrays must be RGB (H, W, 3) or (B, H, W, 3), got shape {tuple(np.shape(image))}")
    if arr.dtype == np.uint8:
        x = arr.astype(np.float32) / 255.0
    elif np.issubdtype(arr.dtype, np.floating):
        x = arr.astype(np.float32)
        if not np.isfinite(x).all() or x.min() < 0.0 or x.max() > 1.0:
            raise ImageError(f"float image arrays must hold values in [0, 1], got [{x.min()}, {x.max()}] "
                             "(pass uint8 for 0-255 pixels)")
    else:
        raise ImageError(f"image arrays must be uint8 or float in [0, 1], got {arr.dtype}")
    if 0 in x.shape[1:3]:
        raise ImageError(f"image array has an empty side: shape {tuple(np.shape(image))}")
    return resize_nearest(x, height, width)


def image_frames(image: Any, height: int, width: int) -> np.ndarray:
    """Conditioning images as the VAE's first frames (``VideoProcessor.preprocess`` before ``2 x - 1``).

    Args:
      image: a path, a PIL image (resized with Pillow's Lanczos filter, as the reference resizes PIL
        images), a uint8 or float ``[0, 1]`` array ``(H, W, 3)`` or ``(B, H, W, 3)`` (resized by
        PyTorch's legacy nearest-neighbour rule, as the reference resizes tensors; uint8 values are
        divided by 255 first, since the reference's array path takes ``[0, 1]`` floats and does not
        scale), or a list/tuple of those (one image each) for a batch. To resize an array as a picture
        (Lanczos), pass ``PIL.Image.fromarray(array)``.
      height, width: the video's size in pixels.

    Returns:
      float32 ``(B, height, width, 3)`` in ``[0, 1]``.

    Raises:
      ImageError (a ValueError): a missing or unreadable file, an image below 16 pixels a side
        (:func:`vidax.core.images.load_image`), an array of another shape, dtype or value range, an
        empty list.
      TypeError: another input type.
    """
    from PIL import Image

    if isinstance(image, (str, os.PathLike, Image.Image)):
        return _pil_frame(image, height, width)[None]
    if isinstance(image, (list, tuple)):
        if not image:
            raise ImageError("image is an empty list: pass one image per prompt")
        frames = [image_frames(im, height, width) for im in image]
        if any(f.shape[0] != 1 for f in frames):
            raise ImageError("a list of images takes single images (paths, PIL images or (H, W, 3) arrays)")
        return np.concatenate(frames)
    if isinstance(image, np.ndarray) or hasattr(image, "__array__"):
        return _array_frames(image, height, width)
    raise TypeError(f"image: expected a path, a PIL image, an array or a list of them, got {type(image).__name__}")


__all__ = ["ImageError", "image_frames", "nearest_indices", "resize_nearest"]
