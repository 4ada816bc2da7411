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


def nearest_indices(in_size: int, out_size: int) -> np.ndarray:
    """Source index of each output index under PyTorch's legacy ``"nearest"`` interpolation.

    Follows ATen ``UpSample.h`` ``nearest_idx``: the identity when the sizes agree, ``i >> 1`` when the
    output is exactly twice the input, else ``min(floor(i * scale), in_size - 1)`` with
    ``scale = float32(in_size) / out_size`` and the product in float32.

    Returns:
      int64 ``(out_size,)``.
    """
    i = np.arange(out_size)
    if out_size == in_size:
        return i
    if out_size == 2 * in_size:
        return i >> 1
    scale = np.float32(in_size) / np.float32(out_size)
    return np.minimum(np.floor(i.astype(np.float32) * scale).astype(np.int64), in_size - 1)


def resize_nearest(x: np.ndarray, height: int, width: int) -> np.ndarray:
    """``(B, H, W, C)`` -> ``(B, height, width, C)`` as ``torch.nn.functional.interpolate(size=(height, width))``
    with its default mode (``"nearest"``): a pure selection of pixels, so the dtype and values are kept."""
    rows = nearest_indices(x.shape[1], height)
    cols = nearest_indices(x.shape[2], width)
    return x[:, rows][:, :, cols]


#: Largest conditioning video accepted, in pixels per frame and in decoded frames (bounds decoding work; only the
#: frames a pipeline keeps are held in memory).
MAX_VIDEO_PIXELS = 8192 * 8192
MAX_VIDEO_FRAMES = 100_000


def load_video(video: Any, what: str = "video", keep_last: int | None = None) -> list:
    """A conditioning video as a list of RGB ``PIL.Image`` frames (what diffusers' ``load_video`` hands a pipeline).

    Args:
      video: a path to a video file (decoded with PyAV), a list of PIL images / uint8 ``(H, W, 3)`` arrays, or a
        uint8 array ``(T, H, W, 3)``.
      what: name used in messages (``"--video"``).
      keep_last: keep only the last ``keep_last`` frames (a pipeline that conditions on the clip's end); every
        frame is still decoded and counted, but at most ``keep_last`` are held.

    Returns:
      list of RGB ``PIL.Image`` of one size, in order (at most ``keep_last``).

    Raises:
      ImageError (a ValueError): a missing or unreadable file, no video stream or no frames, frames of different
        sizes, a side below :data:`MIN_IMAGE_SIDE`, more than :data:`MAX_VIDEO_PIXELS` pixels per frame or
        :data:`MAX_VIDEO_FRAMES` frames, an array of another dtype or shape.
      TypeError: another input type.
    """
    import collections

    from PIL import Image

    keep = collections.deque(maxlen=keep_last if keep_last else None)

    def check_size(w: int, h: int) -> None:
        if min(w, h) < MIN_IMAGE_SIDE:
            raise ImageError(f"{what} is {w}x{h} pixels; at least {MIN_IMAGE_SIDE} pixels per side are needed")
        if w * h > MAX_VIDEO_PIXELS:
            raise ImageError(f"{what} is {w}x{h} pixels per frame, over the {MAX_VIDEO_PIXELS:,} accepted; "
                             "resize it first (the generated video is far smaller)")

    if isinstance(video, (str, os.PathLike)):
        import av

        path = Path(video)
        if path.is_dir():
            raise ImageError(f"{what} {path} is a folder; pass a video file")
        if not path.is_file():
            raise ImageError(f"{what} {path}: file not found")
        count = 0
        try:
            with av.open(str(path)) as container:
                if not container.streams.video:
                    raise ImageError(f"{what} {path}: no video stream in the file")
                stream = container.streams.video[0]
                check_size(int(stream.codec_context.width or MIN_IMAGE_SIDE),
                           int(stream.codec_context.height or MIN_IMAGE_SIDE))
                for frame in container.decode(stream):
                    count += 1
                    if count > MAX_VIDEO_FRAMES:
                        raise ImageError(f"{what} {path}: more than {MAX_VIDEO_FRAMES:,} frames; cut the part to "
                                         "condition on first")
                    check_size(frame.width, frame.height)
                    keep.append(frame.to_image().convert("RGB"))
        except ImageError:
            raise
        except (av.error.FFmpegError, OSError, ValueError) as e:
            raise ImageError(f"{what} {path}: not a readable video ({type(e).__name__}: {e})") from e
        if not keep:
            raise ImageError(f"{what} {path}: the video has no frames")
        frames = list(keep)
    elif isinstance(video, np.ndarray) or (isinstance(video, (list, tuple)) and video):
        items = list(video) if not isinstance(video, np.ndarray) else None
        if items is None:
            if video.dtype != np.uint8 or video.ndim != 4 or video.shape[-1] != 3:
                raise ImageError(f"{what}: arrays must be uint8 (T, H, W, 3); got {video.dtype} {video.shape}")
            items = list(video)
        if len(items) > MAX_VIDEO_FRAMES:
            raise ImageError(f"{what}: more than {MAX_VIDEO_FRAMES:,} frames")
        frames = []
        for item in items[-keep_last:] if keep_last else items:
            if isinstance(item, Image.Image):
                img = item
            elif isinstance(item, np.ndarray) and item.dtype == np.uint8 and item.ndim == 3 and item.shape[-1] == 3:
                img = Image.fromarray(item)
            else:
                raise ImageError(f"{what}: frames must be PIL images or uint8 (H, W, 3) arrays, got "
                                 f"{type(item).__name__}")
            check_size(img.width, img.height)
            frames.append(img.convert("RGB"))
    elif isinstance(video, (list, tuple)):
        raise ImageError(f"{what} is an empty list of frames")
    else:
        raise TypeError(f"{what}: expected a path, a list of frames or a uint8 (T, H, W, 3) array, "
                        f"got {type(video).__name__}")
    if len({f.size for f in frames}) > 1:
        raise ImageError(f"{what}: frames of different sizes ({sorted({f.size for f in frames})})")
    return frames
