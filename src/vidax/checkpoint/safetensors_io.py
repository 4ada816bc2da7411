"""Memory-mapped safetensors reading, single files and sharded directories.

The format (https://github.com/huggingface/safetensors): an 8-byte little-endian
header length, a JSON header mapping tensor names to ``{dtype, shape,
data_offsets}``, then the raw little-endian bytes. We read it ourselves rather
than through ``safetensors.numpy`` because that path cannot return bfloat16
arrays (NumPy has no bf16); here bf16 comes back as ``ml_dtypes.bfloat16``
views of the mapped file, with no copy.

:class:`CheckpointReader` (one reader over a file or folder of safetensors or
PyTorch files) now lives in :mod:`vidax.checkpoint.reader` and is re-exported
here.

Errors: :class:`CheckpointError` names the file and what is wrong with it
(missing, truncated, corrupt header, a shard listed in an index but absent).
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import ml_dtypes
import numpy as np

from vidax.checkpoint.errors import CheckpointError

_DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype(np.float64),
    "F32": np.dtype(np.float32),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "I64": np.dtype(np.int64),
    "I32": np.dtype(np.int32),
    "I16": np.dtype(np.int16),
    "I8": np.dtype(np.int8),
    "U8": np.dtype(np.uint8),
    "BOOL": np.dtype(np.bool_),
}

# A header larger than this is not a safetensors header (the reference caps it at 100 MB).
_MAX_HEADER_BYTES = 100 * 1024 * 1024


class SafetensorsFile:
    """One ``.safetensors`` file, memory-mapped.

    ``get(name)`` returns a read-only NumPy view into the mapping (no copy);
    bf16 tensors come back as ``ml_dtypes.bfloat16``.

    Raises:
      CheckpointError: the file is missing, shorter than its header says, or
        its header is not valid JSON / names an unknown dtype.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            raise CheckpointError(f"{self.path}: file not found")
        size = self.path.stat().st_size
        with open(self.path, "rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                raise CheckpointError(f"{self.path}: truncated safetensors file ({size} bytes, no header)")
            (n,) = struct.unpack("<Q", raw)
            if n > _MAX_HEADER_BYTES or 8 + n > size:
                raise CheckpointError(
                    f"{self.path}: corrupt safetensors header (header length {n} exceeds file size {size}); "
                    "re-download or re-save the file"
                )
            try:
                header = json.loads(f.read(n))
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise CheckpointError(f"{self.path}: corrupt safetensors header ({e}); re-download or re-save the file") from e
        if not isinstance(header, dict):
            raise CheckpointError(f"{self.path}: corrupt safetensors header (not a JSON object)")
        self.metadata = header.pop("__metadata__", None) or {}
        self._data_start = 8 + n
        self._entries: dict[str, tuple[np.dtype, tuple[int, ...], int, int]] = {}
        data_len = size - self._data_start
        for name, info in header.items():
            try:
                dtype = _DTYPES[info["dtype"]]
                shape = tuple(int(s) for s in info["shape"])
                begin, end = (int(o) for o in info["data_offsets"])
            except (KeyError, TypeError, ValueError) as e:
                raise CheckpointError(f"{self.path}: corrupt safetensors header entry for {name!r} ({e!r})") from e
            if end - begin != dtype.itemsize * int(np.prod(shape, dtype=np.int64)) or end > data_len or begin < 0:
                raise CheckpointError(
                    f"{self.path}: tensor {name!r} has inconsistent offsets {begin}..{end} "
                    f"(file holds {data_len} data bytes); the file is truncated or corrupt"
                )
            self._entries[name] = (dtype, shape, begin, end)
        self._mmap: np.memmap | None = None

    def _buffer(self) -> np.ndarray:
        if self._mmap is None:
            self._mmap = np.memmap(self.path, dtype=np.uint8, mode="r")
        return self._mmap

    def keys(self) -> list[str]:
        return list(self._entries)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._entries[name][1]

    def dtype(self, name: str) -> np.dtype:
        return self._entries[name][0]

    def get(self, name: str) -> np.ndarray:
        dtype, shape, begin, end = self._entries[name]
        start = self._data_start + begin
        return self._buffer()[start : self._data_start + end].view(dtype).reshape(shape)


def __getattr__(name: str):
    # ``CheckpointReader`` (safetensors and PyTorch files) lives in ``vidax.checkpoint.reader``; this
    # lazy re-export keeps ``from vidax.checkpoint.safetensors_io import CheckpointReader`` working
    # without an import cycle.
    if name == "CheckpointReader":
        from vidax.checkpoint.reader import CheckpointReader

        return CheckpointReader
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
