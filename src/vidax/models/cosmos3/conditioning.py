"""Cosmos3 image-to-video's first frame, prepared as diffusers' ``_preprocess_conditioning_image`` does
(``pipelines/cosmos/pipeline_cosmos3_omni.py``): the RGB image scaled (aspect kept) to cover ``height x width``
with torch's antialiased bilinear ``F.interpolate(..., mode="bilinear", align_corners=False, antialias=True)`` to
``ceil(scale * size)``, center-cropped (offset ``round((resized - size) / 2)``), rounded, clamped to ``[0, 255]``
and mapped to ``[-1, 1]`` by ``x / 127.5 - 1``.

The resampling restates torch's CPU kernel (``UpSampleKernel.cpp``, ``_compute_indices_weights_aa``): per output
index ``i`` the center ``scale * (i + 0.5)``, support ``max(scale, 1)``, triangle weights of
``(j - center + 0.5) / max(scale, 1)`` normalised to sum 1; the width pass first, then the height pass, in float32.
"""

from __future__ import annotations

import math

import numpy as np


def _aa_weights(in_size: int, out_size: int) -> np.ndarray:
    """``(out_size, in_size)`` float32 resampling matrix of torch's antialiased bilinear kernel."""
    scale = in_size / out_size
    support = scale if scale >= 1.0 else 1.0
    invscale = 1.0 / scale if scale >= 1.0 else 1.0
    m = np.zeros((out_size, in_size), np.float64)
    for i in range(out_size):
        center = scale * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), in_size)
        j = np.arange(lo, hi)
        w = np.maximum(0.0, 1.0 - np.abs((j - center + 0.5) * invscale))
        total = w.sum()
        m[i, lo:hi] = w / total if total != 0 else w
    return m.astype(np.float32)


def resize_antialiased(x: np.ndarray, height: int, width: int) -> np.ndarray:
    """float32 ``(C, H, W)`` -> ``(C, height, width)`` (torch's bilinear, ``antialias=True``,
    ``align_corners=False``)."""
    x = np.asarray(x, np.float32)
    _, h, w = x.shape
    if w != width:
        x = np.einsum("chw,ow->cho", x, _aa_weights(w, width)).astype(np.float32)
    if h != height:
        x = np.einsum("chw,oh->cow", x, _aa_weights(h, height)).astype(np.float32)
    return x


def conditioning_pixels(image, height: int, width: int) -> np.ndarray:
    """The first frame in ``[-1, 1]``, float32 ``(3, height, width)``.

    Args:
      image: a path, a PIL image or a uint8 ``(H, W, 3)`` array (:func:`vidax.core.images.load_image`).

    Raises:
      vidax.core.images.ImageError: an unreadable or unsupported image.
    """
    from vidax.core.images import load_image

    pil = load_image(image).convert("RGB")
    x = np.asarray(pil, np.uint8).transpose(2, 0, 1).astype(np.float32)
    sh, sw = x.shape[1:]
    scale = max(width / sw, height / sh)
    rh, rw = math.ceil(scale * sh), math.ceil(scale * sw)
    x = resize_antialiased(x, rh, rw)
    top, left = round((rh - height) / 2), round((rw - width) / 2)
    x = x[:, top:top + height, left:left + width]
    return (np.clip(np.round(x), 0, 255) / np.float32(127.5) - np.float32(1.0)).astype(np.float32)
