"""The two torchvision functions the Cosmos-Predict2.5 references call, restated for the tests (never in the product).

Why not torchvision itself: the issue asks for torchvision 0.28.0 (the release that matches the pinned torch 2.13.0),
but its only wheel reachable here (PyPI, and the machine's wheel mirror) is the CUDA build, and it does not import
beside the CPU build of torch 2.13.0 that the test extra pins ("RuntimeError: operator torchvision::nms does not
exist": its compiled ops fail to load, then its meta registrations fail). The CPU build lives on
download.pytorch.org, which neither this machine nor CI reaches. diffusers imports torchvision only when it is
installed (``is_torchvision_available()``), so the tests hand the reference modules this module in its place.

What is restated, from torchvision 0.28 (``torchvision/transforms/functional.py`` and ``_functional_tensor.py``):

* ``transforms.functional.resize(img, size, interpolation=InterpolationMode.NEAREST)`` for a tensor and a
  two-element ``size``: ``torch.nn.functional.interpolate(img, size=size, mode="nearest")`` (antialias applies
  only to bilinear/bicubic; the tensor path casts a non-float input to float and back, a no-op for the float
  padding mask CosmosTransformer3DModel resizes).
* ``transforms.functional.to_tensor(pic)`` for a PIL image: its pixels as a ``(C, H, W)`` tensor, uint8 divided
  by 255 into the default float dtype.

:func:`install` puts this module where diffusers' Cosmos modules look for torchvision.
"""

from __future__ import annotations

import enum
import sys
import types

import numpy as np
import torch


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"


def resize(img: torch.Tensor, size, interpolation=InterpolationMode.NEAREST, max_size=None, antialias=True):
    if interpolation is not InterpolationMode.NEAREST or max_size is not None:
        raise NotImplementedError("only the nearest resize to a given (h, w) is restated")
    if len(size) != 2:
        raise NotImplementedError("only a two-element size is restated")
    squeeze = img.ndim < 4
    x = img[None] if squeeze else img
    dtype = x.dtype
    out = torch.nn.functional.interpolate(x.float() if not x.is_floating_point() else x, size=list(size),
                                          mode="nearest")
    if out.dtype != dtype:
        out = out.round().to(dtype)
    return out[0] if squeeze else out


def to_tensor(pic) -> torch.Tensor:
    arr = np.array(pic, np.uint8, copy=True)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    img = torch.from_numpy(arr).permute(2, 0, 1).contiguous()
    return img.to(dtype=torch.get_default_dtype()).div(255)


functional = types.SimpleNamespace(resize=resize, to_tensor=to_tensor, InterpolationMode=InterpolationMode)
transforms = types.SimpleNamespace(functional=functional, InterpolationMode=InterpolationMode)


def install() -> None:
    """Hand this restatement to the diffusers Cosmos modules as their ``torchvision`` / ``transforms``."""
    import diffusers.models.transformers.transformer_cosmos as tc
    import diffusers.pipelines.cosmos.pipeline_cosmos2_5_predict as pc

    tc.transforms = transforms
    pc.torchvision = types.SimpleNamespace(transforms=transforms)
    sys.modules.setdefault("_vidax_tests_torchvision", sys.modules[__name__])
