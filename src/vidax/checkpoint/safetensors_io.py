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

The header is untrusted (docs/design.md, "Threat model"): at most :data:`MAX_HEADER_BYTES`,
strict UTF-8 JSON (nesting past Python's recursion limit is an error, not a crash), every entry
an object with a known dtype, a shape of at most 32 integers in ``[0, 2**48)`` and two integer
offsets with ``0 <= begin <= end <=`` the data size and ``end - begin`` equal to the shape's
byte size (computed in Python integers: no int64 overflow).
"""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from vidax.checkpoint.errors import CheckpointError, clip, excerpt, name_excerpt

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

#: A header larger than this is not a safetensors header (the reference's own cap, 100 MB; real
#: headers are ~150 bytes per tensor). Python's ``json`` can take ~25x the text in memory for a
#: hostile one (10 MB of empty lists: 238 MiB), so this also bounds that: linear in the file.
MAX_HEADER_BYTES = 100 * 1000 * 1000
_MAX_HEADER_BYTES = MAX_HEADER_BYTES  # the old private name
# Dimensions are below this (256 Ti elements, past any file), and at most _MAX_NDIM of them.
_MAX_INDEX = 2**48
_MAX_NDIM = 32


def parse_json(raw: bytes, where: str, fix: str = "") -> Any:
    """Strict UTF-8 JSON from an untrusted file, every failure a :class:`CheckpointError` naming ``where``.

    Args:
      raw: the file's bytes (the caller bounds their size).
      where: what the message starts with (the file, and which part of it).
      fix: advice appended to the message (after ``; ``), if any.

    Raises:
      CheckpointError: invalid UTF-8 (the offset and byte given, not the text), invalid JSON (the
        parser's position), nesting deeper than Python's recursion limit, or an integer of more
        than 4300 digits (Python's ``int`` limit).
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        problem = f"not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})"
    else:
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            problem = f"invalid JSON ({e.msg} at line {e.lineno} column {e.colno})"
        except RecursionError:
            problem = "invalid JSON (nested too deeply to parse)"
        except ValueError as e:  # int() beyond sys.get_int_max_str_digits()
            problem = clip(f"invalid JSON ({e})", 200)
    raise CheckpointError(f"{where}: {problem}{'; ' + fix if fix else ''}")


class SafetensorsFile:
    """One ``.safetensors`` file, memory-mapped.

    ``get(name)`` returns a read-only NumPy view into the mapping (no copy);
    bf16 tensors come back as ``ml_dtypes.bfloat16``.

    Raises:
      CheckpointError: the file is missing, shorter than its header says, its
        header is longer than :data:`MAX_HEADER_BYTES`, not UTF-8 JSON, or not an
        object of entries; an entry names an unknown dtype, a shape that is not a
        list of integers in ``[0, 2**48)`` (at most 32), or offsets that are not
        two integers bracketing exactly the shape's bytes inside the data; or
        ``__metadata__`` does not map strings to strings.
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
            if n > MAX_HEADER_BYTES or 8 + n > size:
                raise CheckpointError(
                    f"{self.path}: corrupt safetensors header (header length {n} exceeds file size {size}"
                    f"{'' if n <= MAX_HEADER_BYTES else f' or the {MAX_HEADER_BYTES}-byte limit'}); "
                    "re-download or re-save the file"
                )
            raw = f.read(n)
        header = parse_json(raw, f"{self.path}: corrupt safetensors header", "re-download or re-save the file")
        if not isinstance(header, dict):
            raise CheckpointError(f"{self.path}: corrupt safetensors header (not a JSON object)")
        metadata = header.pop("__metadata__", None)
        if metadata is None:
            metadata = {}
        elif not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
            raise CheckpointError(
                f"{self.path}: corrupt safetensors header (__metadata__ must map strings to strings, as the format "
                "requires)"
            )
        self.metadata = metadata
        self._data_start = 8 + n
        self._entries: dict[str, tuple[np.dtype, tuple[int, ...], int, int]] = {}
        data_len = size - self._data_start
        for name, info in header.items():
            # The common case costs a few comparisons per dimension; _entry_problem explains a failure.
            shape = info.get("shape") if type(info) is dict else None
            offsets = info.get("data_offsets") if type(info) is dict else None
            code = info.get("dtype") if type(info) is dict else None
            dtype = _DTYPES.get(code) if type(code) is str else None
            if (dtype is None or type(shape) is not list or len(shape) > _MAX_NDIM
                    or not all(type(d) is int and 0 <= d < _MAX_INDEX for d in shape)
                    or type(offsets) is not list or len(offsets) != 2
                    or type(offsets[0]) is not int or type(offsets[1]) is not int):
                raise CheckpointError(
                    f"{self.path}: corrupt safetensors header entry for {name_excerpt(name)} ({_entry_problem(info)}); "
                    "re-download or re-save the file"
                )
            begin, end = offsets
            count = math.prod(shape)
            if not 0 <= begin <= end <= data_len or end - begin != dtype.itemsize * count:
                raise CheckpointError(
                    f"{self.path}: tensor {name_excerpt(name)} has inconsistent offsets "
                    f"{excerpt(begin)}..{excerpt(end)} for {count} x {code} (file holds {data_len} data bytes); "
                    "the file is truncated or corrupt"
                )
            if count == 0 and math.prod(d for d in shape if d) * dtype.itemsize >= _MAX_INDEX:
                raise CheckpointError(
                    f"{self.path}: empty tensor {name_excerpt(name)} of shape {excerpt(shape)} is larger than "
                    "NumPy can represent; the file is corrupt"
                )
            self._entries[name] = (dtype, tuple(shape), begin, end)
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


def _entry_problem(info: Any) -> str:
    """What is wrong with one header entry (for the error message; the file's values are excerpted)."""
    if type(info) is not dict:
        return f"{excerpt(info)}, not an object with dtype, shape and data_offsets"
    code, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if type(code) is not str or code not in _DTYPES:
        return f"dtype {excerpt(code)} is not one of {', '.join(_DTYPES)}"
    if type(shape) is not list or len(shape) > _MAX_NDIM or not all(
        type(d) is int and 0 <= d < _MAX_INDEX for d in shape
    ):
        return f"shape {excerpt(shape)} is not a list of at most {_MAX_NDIM} integers in [0, 2**48)"
    return f"data_offsets {excerpt(offsets)} is not a list of two integers"


def __getattr__(name: str):
    # ``CheckpointReader`` (safetensors and PyTorch files) lives in ``vidax.checkpoint.reader``; this
    # lazy re-export keeps ``from vidax.checkpoint.safetensors_io import CheckpointReader`` working
    # without an import cycle.
    if name == "CheckpointReader":
        from vidax.checkpoint.reader import CheckpointReader

        return CheckpointReader
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
