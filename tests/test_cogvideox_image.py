"""The CogVideoX image-to-video first frame (vidax.models.cogvideox.image) against diffusers' ``VideoProcessor``,
configured as ``CogVideoXImageToVideoPipeline`` configures it, and PyTorch's ``interpolate``."""

import numpy as np
import pytest
import torch
from PIL import Image

from vidax.core.images import ImageError
from vidax.models.cogvideox.image import image_frames, nearest_indices


@pytest.fixture(scope="module")
def processor():
    from diffusers.video_processor import VideoProcessor

    return VideoProcessor(vae_scale_factor=8)  # CogVideoXImageToVideoPipeline.__init__: vae_scale_factor_spatial


def _ours(image, h, w):
    """Our frames as the processor returns them: ``(B, 3, H, W)`` in ``[-1, 1]``."""
    return (image_frames(image, h, w) * 2.0 - 1.0).transpose(0, 3, 1, 2)


def test_nearest_indices_equal_torch_interpolate():
    """PyTorch's legacy nearest rule (float32 scale, floor; identity and ``i >> 1`` special cases) for every
    pair of sizes up to 64 and some video sizes, where float32 rounding decides the index (14 -> 46 at output
    23: 23 * float32(14 / 46) = 6.9999995). Rows and columns of a 4-D tensor of each dtype the reference may
    resize, as it resizes images (``upsample_nearest2d``; the 1-D kernel rounds otherwise for float64)."""
    pairs = [(i, o) for i in range(1, 65) for o in range(1, 65)]
    pairs += [(1080, 480), (1920, 720), (719, 720), (721, 720), (4000, 768), (1361, 1360), (333, 1360), (480, 720)]
    for dtype in (torch.float32, torch.float64):
        for in_size, out_size in pairs:
            x = torch.arange(in_size, dtype=dtype)
            rows = torch.nn.functional.interpolate(x.reshape(1, 1, in_size, 1), size=(out_size, 1)).reshape(-1)
            cols = torch.nn.functional.interpolate(x.reshape(1, 1, 1, in_size), size=(1, out_size)).reshape(-1)
            ours = nearest_indices(in_size, out_size)
            for want in (rows, cols):
                np.testing.assert_array_equal(ours, want.numpy().astype(np.int64), err_msg=f"{in_size} -> {out_size}")


@pytest.mark.parametrize("size", [(45, 70), (16, 24), (20, 30), (32, 48), (7, 100)],
                         ids=["down", "exactly-2x", "up", "same", "mixed"])
def test_float_arrays_are_resized_as_diffusers_resizes_arrays(processor, size):
    """Arrays take the reference's tensor path: ``interpolate`` (nearest), no ``/ 255``, then ``2x - 1``."""
    x = np.random.default_rng(0).uniform(0, 1, (2, *size, 3)).astype(np.float32)
    ref = processor.preprocess([x[0], x[1]], height=32, width=48).numpy()
    np.testing.assert_array_equal(_ours(x, 32, 48), ref)
    np.testing.assert_array_equal(_ours(x[1], 32, 48), ref[1:])  # (H, W, 3) is a batch of one


def test_uint8_arrays_are_divided_by_255_first(processor):
    """The reference's array path takes [0, 1] floats (uint8 would be used unscaled); ours scales uint8 first."""
    x = np.random.default_rng(1).integers(0, 256, (1, 45, 70, 3), dtype=np.uint8)
    ref = processor.preprocess([x[0].astype(np.float32) / 255.0], height=32, width=48).numpy()
    np.testing.assert_array_equal(_ours(x, 32, 48), ref)


@pytest.mark.parametrize("size", [(45, 70), (20, 30), (32, 48), (480, 720)])
def test_pil_images_and_files_are_resized_with_lanczos_as_diffusers(processor, size, tmp_path):
    """PIL images (and files) take the reference's PIL path: Pillow Lanczos resize, ``/ 255``, ``2x - 1``;
    from a file as diffusers' ``load_image`` (RGB) hands it to the pipeline."""
    from diffusers.utils import load_image

    pixels = np.random.default_rng(2).integers(0, 256, (*size, 3), dtype=np.uint8)
    image = Image.fromarray(pixels)
    ref = processor.preprocess(image, height=32, width=48).numpy()
    np.testing.assert_array_equal(_ours(image, 32, 48), ref)
    image.save(tmp_path / "i.png")
    from_file = processor.preprocess(load_image(str(tmp_path / "i.png")), height=32, width=48).numpy()
    np.testing.assert_array_equal(_ours(tmp_path / "i.png", 32, 48), from_file)
    if size != (32, 48):  # a resize filter, not a selection: Lanczos differs from the nearest rule of arrays
        assert np.abs(_ours(image, 32, 48) - _ours(pixels, 32, 48)).max() > 0.05
    both = _ours([image, tmp_path / "i.png"], 32, 48)  # a list: one image per prompt
    np.testing.assert_array_equal(both, np.concatenate([ref, ref]))


def test_non_rgb_images_are_converted_to_rgb_first(tmp_path):
    """diffusers' load_image converts to RGB before the processor resizes; so does vidax (the processor alone
    keeps the mode and fails on grayscale or RGBA)."""
    rgba = Image.fromarray(np.random.default_rng(3).integers(0, 256, (40, 60, 4), dtype=np.uint8), mode="RGBA")
    want = np.asarray(rgba.convert("RGB").resize((48, 32), resample=Image.Resampling.LANCZOS), np.float32) / 255
    np.testing.assert_array_equal(image_frames(rgba, 32, 48)[0], want)
    gray = rgba.convert("L")
    out = image_frames(gray, 32, 48)[0]
    assert out.shape == (32, 48, 3) and np.array_equal(out[..., 0], out[..., 2])


@pytest.mark.parametrize("image, error, message", [
    (np.zeros((32, 48), np.float32), ImageError, r"RGB \(H, W, 3\) or \(B, H, W, 3\)"),
    (np.zeros((32, 48, 4), np.uint8), ImageError, r"RGB \(H, W, 3\)"),
    (np.full((32, 48, 3), 1.5, np.float32), ImageError, r"values in \[0, 1\]"),
    (np.full((32, 48, 3), np.nan, np.float32), ImageError, r"values in \[0, 1\]"),
    (np.zeros((32, 48, 3), np.int32), ImageError, "uint8 or float"),
    ([], ImageError, "empty list"),
    ([np.zeros((2, 32, 48, 3), np.uint8)], ImageError, "single images"),
    ("/nonexistent.png", ImageError, "file not found"),
    (Image.new("RGB", (8, 8)), ImageError, "at least 16 pixels"),
    (3, TypeError, "expected a path, a PIL image, an array"),
])
def test_bad_images_are_named(image, error, message):
    with pytest.raises(error, match=message):
        image_frames(image, 32, 48)
