"""What every family's demo checkpoint writer shares: random weights in a reference layout, versions, the marker.

The families' demo writers (``vidax.models.<family>.demo``) build tiny random-weight checkpoints in the exact files
and tensor names of the published releases, without PyTorch, so that ``vidax demo``, ``make demo`` and the tests run
the real loading and generation path. The pieces here are the ones that do not depend on a family: drawing random
parameters for a spec tree (:func:`random_params`), writing them back through a key map (:func:`random_state_dict`),
the library versions the configs claim, and the marker file that says "random weights".
"""

from __future__ import annotations

import math

import numpy as np

from vidax.checkpoint.writer import to_state_dict
from vidax.core.params import SpecTree, flatten, unflatten

#: The reference library versions the demo configs carry (the versions the parity tests pin).
DIFFUSERS_VERSION = "0.42.1"
TRANSFORMERS_VERSION = "5.24.0"

#: The file that marks a folder as a demo checkpoint (random weights), beside ``model_index.json``.
DEMO_MARKER = "VIDAX_DEMO_CHECKPOINT.txt"


def demo_marker_text(name: str) -> str:
    """The marker file's text for a demo of ``name`` (e.g. ``"Wan2.1"``)."""
    return (f"vidax demo checkpoint: {name} architecture at a tiny size with RANDOM weights.\n"
            "It makes noise, not video; it exists to exercise the real loading and generation path.\n")


def random_params(specs: SpecTree, rng: np.random.Generator) -> dict:
    """Random float32 host parameters for a spec tree, initialised so activations stay O(1).

    Kernels: normal with std 1/sqrt(fan_in); norm scales: 1 plus small noise; biases: small
    noise; AdaLN tables: normal / sqrt(dim); embeddings and relative biases: normal * 0.5.
    Leaves are drawn from ``rng`` in spec-tree order.

    Returns:
      a nested dict of float32 NumPy arrays structured like ``specs``.
    """
    params = {}
    for path, spec in flatten(specs):
        leaf = path.rsplit("/", 1)[-1]
        shape = spec.shape
        stacked = bool(spec.axes) and spec.axes[0] == "layers"
        inner = shape[1:] if stacked else shape
        if leaf == "kernel":
            fan_in = math.prod(inner[:-1])
            v = rng.standard_normal(shape, dtype=np.float32) / np.float32(math.sqrt(fan_in))
        elif leaf in ("scale", "gamma"):
            v = 1.0 + 0.05 * rng.standard_normal(shape, dtype=np.float32)
        elif leaf == "bias":
            v = 0.02 * rng.standard_normal(shape, dtype=np.float32)
        elif "scale_shift_table" in leaf:
            v = rng.standard_normal(shape, dtype=np.float32) / np.float32(math.sqrt(shape[-1]))
        else:
            v = 0.5 * rng.standard_normal(shape, dtype=np.float32)
        params[path] = v.astype(np.float32)
    return unflatten(params)


def random_state_dict(keymap, specs: SpecTree, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random float32 weights in the checkpoint's layout (:func:`random_params` through ``keymap`` backwards)."""
    return to_state_dict(random_params(specs, rng), keymap, specs)


def demo_frames(folder, stem: str, count: int = 2) -> tuple:
    """Conditioning frames for the image-to-video demos, drawn with Pillow (a sun low over hills at dusk, then
    risen at noon) and written as PNGs into ``folder`` (created): the first ``count`` of ``(first, last)`` paths.

    Written to a temporary name and renamed, as every output; existing files are kept.
    """
    import os
    import tempfile
    from pathlib import Path

    from PIL import Image, ImageDraw

    from vidax.core.files import publish

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    scenes = (("first", (60, 50, 120), (250, 150, 60), 150), ("last", (110, 170, 235), (255, 240, 170), 50))
    for name, sky, sun, y in scenes[:count]:
        path = folder / f"{stem}-{name}.png"
        paths.append(path)
        if path.is_file():
            continue
        img = Image.new("RGB", (256, 192), sky)
        draw = ImageDraw.Draw(img)
        draw.ellipse((100, y - 28, 156, y + 28), fill=sun)
        draw.polygon([(0, 192), (0, 140), (70, 110), (140, 150), (200, 100), (256, 130), (256, 192)], fill=(40, 90, 50))
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=folder)
        os.close(fd)
        try:
            img.save(tmp, format="PNG")
            publish(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return tuple(paths)


def demo_video(folder, stem: str, num_frames: int = 9):
    """A conditioning video for the video-to-video demos: the sun of :func:`demo_frames` rising over the hills,
    ``num_frames`` frames at 256x192 written as an H.264 mp4 into ``folder`` (created); returns its path.

    Written through :func:`vidax.video.write_video` (a temporary name, then renamed); an existing file is kept.
    """
    from pathlib import Path

    import numpy as np
    from PIL import Image

    from vidax.video import write_video

    first, last = (np.asarray(Image.open(p).convert("RGB"), np.float32) for p in demo_frames(folder, stem, 2))
    path = Path(folder) / f"{stem}-clip.mp4"
    if not path.is_file():
        w = np.linspace(0.0, 1.0, num_frames, dtype=np.float32)[:, None, None, None]
        frames = np.round((1.0 - w) * first[None] + w * last[None]).astype(np.uint8)
        write_video(frames, path, fps=8)
    return path
