"""Writing checkpoints in a reference layout (the inverse of loading).

Used to build the embedded demo checkpoint and test fixtures without PyTorch:
our parameter tree goes back through the key map to the checkpoint's own tensor
names and layouts, and is written with the ``safetensors`` library.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

from vidax.checkpoint.keymap import KeyMap, from_layout
from vidax.core.files import publish
from vidax.core.params import SpecTree, flatten


def _contiguous(a: np.ndarray) -> np.ndarray:
    """A C-contiguous copy or view of ``a`` with its shape kept (``np.ascontiguousarray`` turns a 0-d array, such as
    the LTX-Video VAE's ``timestep_scale_multiplier``, into shape ``(1,)``)."""
    return np.require(a, requirements="C")


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
                out[rule.key.replace("{i}", str(i))] = _contiguous(from_layout(rule.layout, value[i]))
        else:
            out[rule.key] = _contiguous(from_layout(rule.layout, value))
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
        publish(tmp, folder / filename)
    finally:
        Path(tmp).unlink(missing_ok=True)
    if config is not None:
        write_json(folder / "config.json", config)
    return folder


#: Alignment in bytes of the data section of the safetensors files vidax writes (the CPU backend adopts
#: host buffers aligned to 64 bytes without copying them).
DATA_ALIGNMENT = 64

_ST_DTYPES = {
    np.dtype(np.float64): "F64", np.dtype(np.float32): "F32", np.dtype(np.float16): "F16",
    np.dtype(ml_dtypes.bfloat16): "BF16", np.dtype(np.int64): "I64", np.dtype(np.int32): "I32",
    np.dtype(np.int16): "I16", np.dtype(np.int8): "I8", np.dtype(np.uint8): "U8", np.dtype(np.bool_): "BOOL",
}


def write_safetensors_stream(
    path: str | os.PathLike,
    entries: list[tuple[str, tuple[int, ...], np.dtype]],
    arrays: Iterable[tuple[str, np.ndarray]],
    metadata: dict[str, str] | None = None,
) -> Path:
    """Write a safetensors file tensor by tensor, holding one tensor in memory at a time.

    The header needs every tensor's shape and dtype up front (``entries``); the data then
    comes from ``arrays`` in the same order. bfloat16 (``ml_dtypes``) is written as ``BF16``,
    which the ``safetensors`` library's NumPy writer cannot do. The header is padded with spaces
    (as the format allows) so that the data section starts on a :data:`DATA_ALIGNMENT`-byte
    boundary of the file: every tensor whose offset is a multiple of it is then aligned in a
    memory map too, which the loader needs to place it without a copy
    (:func:`vidax.checkpoint.loader.adoptable`). The file is written under a temporary name and
    renamed when complete.

    Raises:
      ValueError: an array arrives out of order, or with another shape/dtype than announced.
    """
    path = Path(path)
    header: dict = {"__metadata__": dict(metadata or {})}
    offset = 0
    for name, shape, dtype in entries:
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        header[name] = {"dtype": _ST_DTYPES[dtype], "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-(8 + len(raw)) % DATA_ALIGNMENT)  # the data section starts aligned (the reference pads to 8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(len(raw).to_bytes(8, "little"))
            f.write(raw)
            expected = iter(entries)
            for name, array in arrays:
                want = next(expected, None)
                if want is None or want[0] != name or tuple(array.shape) != tuple(want[1]) or array.dtype != np.dtype(want[2]):
                    raise ValueError(f"write_safetensors_stream: got {name} {array.dtype} {array.shape}, expected {want}")
                f.write(np.ascontiguousarray(array).view(np.uint8).reshape(-1).data)
            if next(expected, None) is not None:
                raise ValueError("write_safetensors_stream: fewer arrays than announced")
        publish(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path


def write_json(path: str | os.PathLike, data: dict) -> None:
    """Write JSON atomically (temp file, then rename), formatted as diffusers writes its configs."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.part")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


#: Weights file of each component of a checkpoint translated by ``vidax convert`` (our names and layout).
VIDAX_WEIGHTS = "params.safetensors"
#: The index file of a checkpoint translated by ``vidax convert`` (format, family, parts, dtypes).
VIDAX_INDEX = "vidax_index.json"


def write_component(folder: str | os.PathLike, reader, keymap: KeyMap, specs: SpecTree, dtype, config: dict,
                    source: str) -> int:
    """Translate one checkpoint component into ``folder`` in the vidax layout; returns the bytes written.

    ``folder/params.safetensors`` holds every parameter under its path (``blocks/attn1/to_q/kernel``),
    stacked blocks whole, already in our layout and cast by the dtype policy (``dtype`` for the
    unpinned floating leaves); ``folder/config.json`` is ``config``. The whole checkpoint is matched
    first (every error before anything is written), then streamed parameter by parameter. Parameters
    whose size is a multiple of :data:`DATA_ALIGNMENT` bytes come first (in spec-tree order, then the
    rest), so that all of them start aligned and load without a copy.

    Raises:
      CheckpointError: see :func:`vidax.checkpoint.loader.plan_load`.
    """
    from vidax.checkpoint.loader import iter_host_params, plan_load

    folder = Path(folder)
    dtype = np.dtype(dtype)
    plan = plan_load(reader, keymap, specs, source=source)
    entries = []
    for path, spec in flatten(specs):
        first = reader.dtype(plan[path][0][0])
        floating = np.issubdtype(first, np.floating) or first.kind == "V"
        entries.append((path, spec.shape, spec.dtype(dtype) if floating else first))
    # Sizes that are multiples of the alignment first: each keeps the next one aligned.
    entries.sort(key=lambda e: (int(np.prod(e[1], dtype=np.int64)) * np.dtype(e[2]).itemsize) % DATA_ALIGNMENT != 0)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = iter_host_params(reader, keymap, specs, dtype, source=source, order=[e[0] for e in entries])
    write_safetensors_stream(folder / VIDAX_WEIGHTS, entries, arrays, metadata={"format": "vidax", "dtype": str(dtype)})
    write_json(folder / "config.json", config)
    return (folder / VIDAX_WEIGHTS).stat().st_size


@contextlib.contextmanager
def assembled_folder(dst: str | os.PathLike) -> Iterator[Path]:
    """Build a new folder under a temporary name beside ``dst``; rename it into place only when complete.

    Yields the temporary folder. On any error the partial folder is removed, so an interrupted
    conversion never leaves a folder that looks loadable.

    Raises:
      FileExistsError: ``dst`` exists.
    """
    dst = Path(dst)
    if dst.exists():
        raise FileExistsError(f"{dst} exists; choose a new output folder")
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", dir=dst.parent))
    try:
        yield tmp
        publish(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
