"""Writing checkpoints in a reference layout (the inverse of loading).

Used to build the embedded demo checkpoint and test fixtures without PyTorch:
our parameter tree goes back through the key map to the checkpoint's own tensor
names and layouts, and is written with the ``safetensors`` library.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from vidax.checkpoint.keymap import KeyMap, from_layout
from vidax.core.params import SpecTree, flatten


def to_state_dict(params: dict, keymap: KeyMap, specs: SpecTree) -> dict[str, np.ndarray]:
    """Our parameter tree -> ``{checkpoint_key: array}`` in the checkpoint's layout.

    Args:
      params: host arrays, structured like ``specs``.
      keymap: the layout to write; every rule whose path the model has is written
        (stacked rules once per block).

    Returns:
      contiguous NumPy arrays keyed by checkpoint name, in key-map order.
    """
    flat = dict(flatten(params))
    flat_specs = dict(flatten(specs))
    out: dict[str, np.ndarray] = {}
    for rule in keymap.rules:
        if rule.path not in flat_specs:
            continue
        value = np.asarray(flat[rule.path])
        if "{i}" in rule.key:
            for i in range(flat_specs[rule.path].shape[0]):
                out[rule.key.replace("{i}", str(i))] = np.ascontiguousarray(from_layout(rule.layout, value[i]))
        else:
            out[rule.key] = np.ascontiguousarray(from_layout(rule.layout, value))
    return out


def save_component(folder: str | os.PathLike, filename: str, tensors: dict[str, np.ndarray], config: dict | None) -> Path:
    """Write one checkpoint component folder: ``config.json`` and a safetensors file.

    Files are written to temporary names and renamed, so a failed write leaves nothing half-written.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".part")
    os.close(fd)
    try:
        save_file(tensors, tmp, metadata={"format": "pt"})
        os.replace(tmp, folder / filename)
    finally:
        Path(tmp).unlink(missing_ok=True)
    if config is not None:
        write_json(folder / "config.json", config)
    return folder


def write_json(path: str | os.PathLike, data: dict) -> None:
    """Write JSON atomically (temp file, then rename), formatted as diffusers writes its configs."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.part")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
