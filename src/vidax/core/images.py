"""Conditioning images: loading (paths, PIL images, arrays) and the VAE's input frame, shared by the pipelines."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

#: Smallest image side accepted as a conditioning frame, in pixels.
MIN_IMAGE_SIDE = 16


class ImageError(ValueError):
    """A conditioning image is missing, unreadable or too small."""


def load_image(image: Any, what: str = "image"):
    """A conditioning image as a decoded ``PIL.Image`` (mode kept; converted where used).

    Args:
      image: a path (str / PathLike), a ``PIL.Image``, or a uint8 array ``(H, W, 3)`` / ``(H, W, 4)`` / ``(H, W)``.
      what: name used in messages (``"image"``, ``"last image"``).

    Raises:
      ImageError: the file does not exist or is not a readable image, or a side is below
        :data:`MIN_IMAGE_SIDE` pixels (a ValueError; the CLI prints it).
      TypeError: another input type.
    """
    from PIL import Image, UnidentifiedImageError

    if isinstance(image, (str, os.PathLike)):
        path = Path(image)
        if path.is_dir():
            raise ImageError(f"{what} {path} is a folder; pass an image file")
        if not path.is_file():
            raise ImageError(f"{what} {path}: file not found")
        try:
            with Image.open(path) as f:
                f.load()
                img = f.copy()
        except Image.DecompressionBombError as e:
            raise ImageError(f"{what} {path}: {e}; resize it first (the video is far smaller)") from e
        except (UnidentifiedImageError, OSError, SyntaxError) as e:
            raise ImageError(f"{what} {path}: not a readable image ({type(e).__name__}: {e})") from e
    elif isinstance(image, Image.Image):
        img = image
    elif isinstance(image, np.ndarray):
        if image.dtype != np.uint8 or not (image.ndim == 2 or (image.ndim == 3 and image.shape[-1] in (3, 4))):
            raise ImageError(f"{what}: arrays must be uint8 (H, W, 3), (H, W, 4) or (H, W); got {image.dtype} {image.shape}")
        img = Image.fromarray(image)
    else:
        raise TypeError(f"{what}: expected a path, a PIL image or a uint8 array, got {type(image).__name__}")
    if img.mode in ("I", "I;16", "I;16B", "I;16L", "I;16N", "F"):
        # PIL converts these to 8-bit RGB by clipping to 255 (16-bit images come out nearly white), as the
        # reference pipelines' PIL preprocessing does too.
        warnings.warn(f"{what} is a {img.mode} (16-bit or float) image; it is converted to 8-bit RGB by clipping "
                      "values above 255, as the reference does: save it as 8-bit RGB to keep its tones")
    if min(img.size) < MIN_IMAGE_SIDE:
        raise ImageError(f"{what} is {img.width}x{img.height} pixels; at least {MIN_IMAGE_SIDE} pixels per side are needed")
    return img


def vae_pixels(image, height: int, width: int) -> np.ndarray:
    """An image as the VAE's input frame (diffusers ``VideoProcessor.preprocess``).

    PIL resize to ``(width, height)`` with Lanczos, then ``convert("RGB")``, ``/ 255`` in float32,
    ``2x - 1``.

    Returns:
      float32 ``(3, height, width)`` in ``[-1, 1]``.
    """
    from PIL import Image

    img = image.resize((width, height), resample=Image.Resampling.LANCZOS).convert("RGB")
    x = np.asarray(img).astype(np.float32) / 255.0
    return np.ascontiguousarray((2.0 * x - 1.0).transpose(2, 0, 1))
