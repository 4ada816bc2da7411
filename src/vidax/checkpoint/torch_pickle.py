"""PyTorch zip checkpoints (``.pth`` / ``.pt`` / ``.bin``) read without PyTorch, memory-mapped and safely.

The format is the one ``torch.save`` writes by default since PyTorch 1.6
(``torch/serialization.py``, ``_save``): an uncompressed zip archive whose
records all sit under one top folder ``<name>/``:

* ``<name>/data.pkl``: a pickle (protocol 2 by default) of the saved object.
  Each tensor is pickled as a call of ``torch._utils._rebuild_tensor_v2(storage,
  storage_offset, size, stride, requires_grad, backward_hooks)`` (or
  ``_rebuild_tensor_v3(..., dtype)`` for dtypes without a legacy storage class,
  e.g. float8 and uint16), whose ``storage`` is a *persistent id*
  ``("storage", torch.FloatStorage, key, location, numel)``.
* ``<name>/data/<key>``: the raw bytes of storage ``key`` (native byte order;
  aligned to 64 bytes by padding the local extra field since PyTorch 2.x).
* ``<name>/byteorder`` (``little`` / ``big``), ``<name>/version`` and friends.

Reading:

* The pickle is run by a restricted :class:`pickle.Unpickler` whose
  ``find_class`` returns *our own* inert stand-ins for an allow-list of globals
  (the idea of ``torch/_weights_only_unpickler.py``): the tensor rebuild
  functions, the legacy ``torch.*Storage`` classes, ``torch.<dtype>`` objects,
  ``collections.OrderedDict``, ``torch.Size``, ``_codecs.encode`` (bytes) and a
  few builtins. Any other global raises :class:`CheckpointError` naming the
  global and the file the moment the pickle names it, so no callable outside
  the allow-list is ever reached, let alone called.
* Storages are never read: each record's data offset is found from its zip
  local file header (30 bytes + name length + extra length) and tensors are
  NumPy views (``np.memmap`` of the whole file; ``as_strided`` for
  non-contiguous tensors), read-only, bf16 as ``ml_dtypes.bfloat16``.

Container rule (:func:`flatten_state_dict`): nested dicts / ``OrderedDict`` /
lists / tuples are flattened to dotted keys (``{"a": {"b": t}}`` -> ``a.b``,
lists by index); non-tensor leaves (epochs, strings, floats, dtypes) are
skipped. Then, while the top level is a dict whose only tensor-bearing entry is
one of :data:`WRAPPER_KEYS` (``state_dict``, ``model``, ``module``,
``model_state_dict``, ``ema``, ...), that entry is unwrapped, so
``{"model": {"state_dict": sd}, "epoch": 3}`` yields the keys of ``sd``. If two
entries carry tensors (``{"model": ..., "optimizer": ...}``) nothing is
unwrapped and keys keep their prefixes.
"""

from __future__ import annotations

import _compat_pickle
import collections
import io
import os
import pickle
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from vidax.checkpoint.errors import CheckpointError

#: Top-level dict keys unwrapped when they hold the only tensors of the file.
WRAPPER_KEYS = frozenset(
    {"state_dict", "model", "module", "model_state_dict", "ema", "model_ema", "net"}
)

_RESAVE = (
    "re-save it in the zip format, torch.save(torch.load(path, weights_only=True), new_path) "
    "(the default since PyTorch 1.6, _use_new_zipfile_serialization=True), or convert it to safetensors"
)

# Legacy torch storage class names -> NumPy dtype. The same names under ``torch.cuda`` are what
# PyTorch < 1.12 wrote for tensors saved from a GPU; the stored bytes are the same.
_STORAGE_DTYPES: dict[str, np.dtype] = {
    "DoubleStorage": np.dtype(np.float64),
    "FloatStorage": np.dtype(np.float32),
    "HalfStorage": np.dtype(np.float16),
    "BFloat16Storage": np.dtype(ml_dtypes.bfloat16),
    "LongStorage": np.dtype(np.int64),
    "IntStorage": np.dtype(np.int32),
    "ShortStorage": np.dtype(np.int16),
    "CharStorage": np.dtype(np.int8),
    "ByteStorage": np.dtype(np.uint8),
    "BoolStorage": np.dtype(np.bool_),
    "ComplexFloatStorage": np.dtype(np.complex64),
    "ComplexDoubleStorage": np.dtype(np.complex128),
}

# ``torch.<name>`` dtype objects (tensor dtypes of ``_rebuild_tensor_v3``, or plain values).
_TORCH_DTYPES: dict[str, np.dtype] = {
    "float64": np.dtype(np.float64), "double": np.dtype(np.float64),
    "float32": np.dtype(np.float32), "float": np.dtype(np.float32),
    "float16": np.dtype(np.float16), "half": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "float8_e4m3fnuz": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "float8_e5m2fnuz": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "int64": np.dtype(np.int64), "long": np.dtype(np.int64),
    "int32": np.dtype(np.int32), "int": np.dtype(np.int32),
    "int16": np.dtype(np.int16), "short": np.dtype(np.int16),
    "int8": np.dtype(np.int8),
    "uint8": np.dtype(np.uint8),
    "uint16": np.dtype(np.uint16), "uint32": np.dtype(np.uint32), "uint64": np.dtype(np.uint64),
    "bool": np.dtype(np.bool_),
    "complex64": np.dtype(np.complex64), "cfloat": np.dtype(np.complex64),
    "complex128": np.dtype(np.complex128), "cdouble": np.dtype(np.complex128),
}

# The legacy (pre-1.6) format starts with the pickled magic number 0x1950a86a20f9469cfc6c.
_LEGACY_MAGIC = b"\x80\x02\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")
_ZIP_MAGIC = b"PK\x03\x04"
_LOCAL_HEADER = struct.Struct("<4s5H3I2H")  # 30 bytes: signature ... name length, extra length


# --------------------------------------------------------------------------- inert stand-ins


class _Frozen:
    """Immutable marker objects: a pickle's BUILD opcode cannot set attributes on them."""

    __slots__ = ()

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __delattr__(self, name):
        raise AttributeError(f"{type(self).__name__} is read-only")


class _StorageType(_Frozen):
    """Stands in for ``torch.FloatStorage`` etc. (and ``torch.storage.UntypedStorage``: bytes)."""

    __slots__ = ("name", "dtype")

    def __init__(self, name: str, dtype: np.dtype):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "dtype", dtype)

    def __repr__(self):
        return f"torch.{self.name}"


class _TorchDType(_Frozen):
    """Stands in for a ``torch.float32``-style dtype object."""

    __slots__ = ("name", "dtype")

    def __init__(self, name: str, dtype: np.dtype):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "dtype", dtype)

    def __repr__(self):
        return f"torch.{self.name}"


class _TensorClass(_Frozen):
    """Stands in for ``torch.Tensor`` / ``torch.nn.parameter.Parameter`` as a type argument."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        object.__setattr__(self, "name", name)

    def __repr__(self):
        return self.name


class _Storage(_Frozen):
    """A storage record ``data/<key>``: byte range in the file and element count."""

    __slots__ = ("key", "dtype", "numel", "start", "nbytes")

    def __init__(self, key: str, dtype: np.dtype, numel: int, start: int, nbytes: int):
        for k, v in (("key", key), ("dtype", dtype), ("numel", numel), ("start", start), ("nbytes", nbytes)):
            object.__setattr__(self, k, v)


class _TensorRef(_Frozen):
    """A tensor as the pickle describes it: a view into one storage. Nothing is read."""

    __slots__ = ("storage", "offset", "shape", "stride", "dtype")

    def __init__(self, storage: _Storage, offset: int, shape: tuple, stride: tuple, dtype: np.dtype):
        for k, v in (("storage", storage), ("offset", offset), ("shape", shape), ("stride", stride), ("dtype", dtype)):
            object.__setattr__(self, k, v)


def _int(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise CheckpointError(f"{what} is {v!r}, not an integer")
    return v


def _ints(v: Any, what: str) -> tuple[int, ...]:
    if not isinstance(v, (tuple, list)):
        raise CheckpointError(f"{what} is {v!r}, not a tuple of integers")
    return tuple(_int(x, what) for x in v)


def _tensor(storage: Any, storage_offset: Any, size: Any, stride: Any, dtype: np.dtype | None = None) -> _TensorRef:
    if not isinstance(storage, _Storage):
        raise CheckpointError(f"tensor storage is {type(storage).__name__}, not a storage record")
    offset = _int(storage_offset, "storage offset")
    shape = _ints(size, "tensor size")
    strides = _ints(stride, "tensor stride")
    dtype = storage.dtype if dtype is None else dtype
    if len(shape) != len(strides):
        raise CheckpointError(f"tensor size {shape} and stride {strides} differ in length")
    if offset < 0 or any(n < 0 for n in shape) or any(s < 0 for s in strides):
        raise CheckpointError(f"negative offset, size or stride ({offset}, {shape}, {strides})")
    if 0 not in shape:
        extent = (offset + 1 + sum((n - 1) * s for n, s in zip(shape, strides))) * dtype.itemsize
        if extent > storage.nbytes:
            raise CheckpointError(
                f"tensor (offset {offset}, size {shape}, stride {strides}, {dtype}) reaches byte {extent} "
                f"of storage data/{storage.key}, which holds {storage.nbytes} bytes; the file is truncated or corrupt"
            )
    return _TensorRef(storage, offset, shape, strides, dtype)


def _rebuild_tensor(storage, storage_offset, size, stride):
    return _tensor(storage, storage_offset, size, stride)


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None, metadata=None):
    return _tensor(storage, storage_offset, size, stride)


def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype, metadata=None):
    if not isinstance(dtype, _TorchDType):
        raise CheckpointError(f"tensor dtype is {dtype!r}, not a torch dtype")
    return _tensor(storage, storage_offset, size, stride, dtype.dtype)


def _rebuild_parameter(data, requires_grad=False, backward_hooks=None):
    if not isinstance(data, _TensorRef):
        raise CheckpointError(f"Parameter data is {type(data).__name__}, not a tensor")
    return data  # a Parameter is loaded as its plain array


def _rebuild_parameter_with_state(data, requires_grad, backward_hooks, state):
    return _rebuild_parameter(data)


_REBUILDS = (_rebuild_tensor, _rebuild_tensor_v2, _rebuild_tensor_v3, _rebuild_parameter, _rebuild_parameter_with_state)


def _rebuild_from_type_v2(func, new_type, args, state):
    # Tensors with Python attributes (or Parameter subclasses): the attributes are dropped.
    if not any(func is f for f in _REBUILDS) or not isinstance(new_type, _TensorClass) or not isinstance(args, tuple):
        raise CheckpointError(f"_rebuild_from_type_v2 called with {func!r}, {new_type!r}: not a plain tensor")
    return func(*args)


def _codecs_encode(obj, encoding="utf-8"):
    # Protocol-2 pickles spell bytes as _codecs.encode(str, "latin1").
    if not isinstance(obj, str) or encoding not in ("latin1", "latin-1", "utf-8", "utf8", "ascii"):
        raise CheckpointError(f"_codecs.encode({type(obj).__name__}, {encoding!r}) is not a bytes literal")
    return obj.encode(encoding)


def _torch_size(dims=()):
    return _ints(dims, "torch.Size")


def _torch_device(*args):
    if not all(isinstance(a, (str, int)) for a in args):
        raise CheckpointError(f"torch.device{args!r} is not a device name")
    return ":".join(str(a) for a in args)


def _bytearray(data=b""):
    if not isinstance(data, (bytes, bytearray, list)):  # never an int (that allocates)
        raise CheckpointError(f"bytearray({type(data).__name__}) is not a bytes literal")
    return bytearray(data)


def _set(items=()):
    return set(items)


def _frozenset(items=()):
    return frozenset(items)


def _complex(real=0.0, imag=0.0):
    if not all(isinstance(v, (int, float)) for v in (real, imag)):
        raise CheckpointError("complex() of non-numbers")
    return complex(real, imag)


def _allowed_globals() -> dict[tuple[str, str], Any]:
    allowed: dict[tuple[str, str], Any] = {
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
        ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
        ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
        ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
        ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter_with_state,
        ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type_v2,
        ("torch", "Tensor"): _TensorClass("torch.Tensor"),
        ("torch.nn.parameter", "Parameter"): _TensorClass("torch.nn.parameter.Parameter"),
        ("torch", "Size"): _torch_size,
        ("torch", "device"): _torch_device,
        ("torch.storage", "UntypedStorage"): _StorageType("storage.UntypedStorage", np.dtype(np.uint8)),
        ("_codecs", "encode"): _codecs_encode,
        ("builtins", "set"): _set,
        ("builtins", "frozenset"): _frozenset,
        ("builtins", "bytearray"): _bytearray,
        ("builtins", "complex"): _complex,
    }
    for name, dtype in _STORAGE_DTYPES.items():
        allowed[("torch", name)] = _StorageType(name, dtype)
        allowed[("torch.cuda", name)] = _StorageType(name, dtype)
    for name, dtype in _TORCH_DTYPES.items():
        allowed[("torch", name)] = _TorchDType(name, dtype)
    return allowed


_ALLOWED = _allowed_globals()


class _RestrictedUnpickler(pickle.Unpickler):
    """Resolves only allow-listed globals (to inert stand-ins); storages become lazy records."""

    def __init__(self, file, path: Path, storage: Callable[[Any], _Storage] | None):
        super().__init__(file, encoding="utf-8")
        self._path = path
        self._storage = storage

    def find_class(self, module: str, name: str) -> Any:
        # Protocol <= 2 pickles spell Python 2 module names (``__builtin__``); map them as pickle does.
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        elif module in _compat_pickle.IMPORT_MAPPING:
            module = _compat_pickle.IMPORT_MAPPING[module]
        hit = _ALLOWED.get((module, name))
        if hit is None:
            raise CheckpointError(
                f"{self._path}: refusing to load global {module}.{name} from the pickle: only tensors, "
                "dicts, lists and plain values are allowed (a pickle can run arbitrary code). "
                "If you trust the file, re-save only the weights (a state dict of tensors) or convert it to safetensors"
            )
        return hit

    def persistent_load(self, pid: Any) -> Any:
        if self._storage is None:
            raise CheckpointError(f"{self._path}: a plain pickle refers to external storage {pid!r}; {_RESAVE}")
        return self._storage(pid)


# --------------------------------------------------------------------------- container flattening


def _has_tensor(obj: Any, depth: int = 0) -> bool:
    if isinstance(obj, _TensorRef):
        return True
    if depth > 64:
        return False
    if isinstance(obj, dict):
        return any(_has_tensor(v, depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(_has_tensor(v, depth + 1) for v in obj)
    return False


def flatten_state_dict(obj: Any, *, source: str = "checkpoint") -> dict[str, Any]:
    """Flatten an unpickled object to ``{dotted_key: tensor}``, unwrapping one wrapper chain.

    Args:
      obj: the unpickled object, tensors being this module's lazy tensor records.
      source: name for error messages.

    Returns:
      Dotted keys in file order -> tensor leaves. While the top level is a dict
      whose single tensor-bearing entry has a key in :data:`WRAPPER_KEYS` and is
      itself a dict, that entry is unwrapped first (so a tensor named ``model``
      stays ``model``). A bare tensor gets the key ``""``.

    Raises:
      CheckpointError: two paths flatten to the same dotted key.
    """
    while isinstance(obj, dict):
        bearing = [k for k, v in obj.items() if _has_tensor(v)]
        if len(bearing) == 1 and bearing[0] in WRAPPER_KEYS and isinstance(obj[bearing[0]], dict):
            obj = obj[bearing[0]]
        else:
            break
    out: dict[str, Any] = {}

    def walk(node: Any, prefix: str, depth: int) -> None:
        if isinstance(node, _TensorRef):
            if prefix in out:
                raise CheckpointError(f"{source}: two tensors flatten to the same key {prefix!r}")
            out[prefix] = node
            return
        if depth > 64:
            raise CheckpointError(f"{source}: containers nested more than 64 deep")
        if isinstance(node, dict):
            items = node.items()
        elif isinstance(node, (list, tuple)):
            items = enumerate(node)
        else:
            return  # non-tensor leaf: epoch, name, hyperparameter
        for k, v in items:
            walk(v, f"{prefix}.{k}" if prefix else str(k), depth + 1)

    walk(obj, "", 0)
    return out


# --------------------------------------------------------------------------- the file


def _looks_like_safetensors(head: bytes) -> bool:
    return len(head) >= 9 and head[8:9] == b"{"


def _describe_non_zip(path: Path, head: bytes) -> str:
    if head.startswith(_LEGACY_MAGIC):
        return f"{path}: legacy (pre-1.6, non-zip) torch.save format, which cannot be memory-mapped; {_RESAVE}"
    if _looks_like_safetensors(head):
        return f"{path}: looks like a safetensors file, not a PyTorch zip checkpoint; rename it to *.safetensors"
    if head[:1] == b"\x80":
        return f"{path}: a plain pickle, not a torch.save zip archive (no storages to map); {_RESAVE}"
    return f"{path}: not a PyTorch zip checkpoint (no zip signature); the file is truncated or corrupt, or {_RESAVE}"


class TorchCheckpointFile:
    """One PyTorch zip checkpoint (``torch.save`` since 1.6: ``.pth``, ``.pt``, ``.bin``), memory-mapped.

    Same interface as :class:`~vidax.checkpoint.safetensors_io.SafetensorsFile`:
    ``keys()``, ``shape(key)``, ``dtype(key)``, ``get(key)``. ``get`` returns a
    read-only NumPy view of the mapped file in the tensor's own shape and dtype
    (float32/16/64, ``ml_dtypes.bfloat16``, float8 via ``ml_dtypes``, int8..64,
    uint8..64, bool, complex64/128): no copy, O(1) apart from page faults;
    non-contiguous tensors (transposes, strided slices) come back as
    ``as_strided`` views of their storage. Casting is the loader's job.

    Keys: see :func:`flatten_state_dict` (nested containers -> dotted keys,
    wrapper dicts such as ``{"model": {"state_dict": ...}, "epoch": 3}``
    unwrapped, non-tensor leaves skipped).

    Raises:
      CheckpointError (naming the file and the fix): the file is missing, not a
        zip (legacy pre-1.6 format, a plain pickle, a truncated file), has no
        ``data.pkl`` or lacks a storage record, stores a storage compressed,
        was written big-endian, or its pickle names a global outside the
        allow-list (e.g. ``posix.system``): that refusal happens when the pickle
        names the global, before anything is called.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            raise CheckpointError(f"{self.path}: file not found")
        with open(self.path, "rb") as f:
            head = f.read(64)
        if not head.startswith(_ZIP_MAGIC):
            self._refuse_non_zip(head)
        try:
            with zipfile.ZipFile(self.path) as zf:
                infos = {i.filename: i for i in zf.infolist()}
                names = list(infos)
                prefix = self._prefix(names)
                pkl_name = f"{prefix}data.pkl"
                if pkl_name not in infos:
                    hint = ""
                    if f"{prefix}constants.pkl" in infos or any(n.startswith(f"{prefix}code/") for n in names):
                        hint = " (a TorchScript archive from torch.jit.save: save model.state_dict() with torch.save)"
                    raise CheckpointError(
                        f"{self.path}: zip archive without a {pkl_name} record, so not a torch.save checkpoint{hint}; "
                        f"the file is truncated or corrupt, or {_RESAVE}"
                    )
                data_pkl = zf.read(pkl_name)
                byteorder = "little"  # torch's assumption for files written before the record existed
                if f"{prefix}byteorder" in infos:
                    byteorder = zf.read(f"{prefix}byteorder").decode("ascii", "replace").strip()
        except zipfile.BadZipFile as e:
            raise CheckpointError(
                f"{self.path}: truncated or corrupt zip archive ({e}); re-download the file or {_RESAVE}"
            ) from e
        except (OSError, EOFError) as e:
            raise CheckpointError(f"{self.path}: cannot read the zip archive ({e}); the file is truncated or corrupt") from e
        if byteorder != "little":
            raise CheckpointError(
                f"{self.path}: tensors were saved in {byteorder!r}-endian byte order; only little-endian is supported: "
                "re-save the file on a little-endian machine or convert it to safetensors"
            )
        self._size = self.path.stat().st_size
        self._mmap = np.memmap(self.path, dtype=np.uint8, mode="r")
        self._infos = infos
        self._prefix_ = prefix
        self._storages: dict[str, _Storage] = {}
        unpickler = _RestrictedUnpickler(io.BytesIO(data_pkl), self.path, self._storage)
        try:
            obj = unpickler.load()
        except CheckpointError as e:
            msg = str(e)
            raise CheckpointError(msg if msg.startswith(str(self.path)) else f"{self.path}: {pkl_name}: {msg}") from None
        except Exception as e:  # noqa: BLE001 - any failure of a hostile or corrupt pickle is a corrupt file
            raise CheckpointError(f"{self.path}: corrupt {pkl_name} ({type(e).__name__}: {e}); {_RESAVE}") from None
        finally:
            del unpickler
        self._entries: dict[str, _TensorRef] = flatten_state_dict(obj, source=str(self.path))
        self._contiguous = {k: _is_contiguous(t.shape, t.stride) for k, t in self._entries.items()}

    @staticmethod
    def _prefix(names: list[str]) -> str:
        # torch names the archive after the first record's top folder (``archive/`` or the file stem).
        if not names:
            return ""
        first = names[0]
        return first[: first.index("/") + 1] if "/" in first else ""

    def _refuse_non_zip(self, head: bytes) -> None:
        message = _describe_non_zip(self.path, head)
        if not head.startswith(_LEGACY_MAGIC) and not _looks_like_safetensors(head):
            # Maybe a pickle of any protocol: run the restricted unpickler (it can call nothing
            # outside the allow-list) to name a hostile global if there is one. Whatever it finds,
            # the file is refused.
            try:
                with open(self.path, "rb") as f:
                    _RestrictedUnpickler(f, self.path, None).load()
            except CheckpointError as e:
                if "refusing to load global" in str(e):
                    raise
            except Exception:  # noqa: BLE001 - the file is refused below anyway
                pass
        raise CheckpointError(message)

    def _storage(self, pid: Any) -> _Storage:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise CheckpointError(f"unknown persistent id {pid!r}")
        _, storage_type, key, _location, numel = pid
        if not isinstance(storage_type, _StorageType):
            raise CheckpointError(f"storage type {storage_type!r} is not a torch storage class")
        if not isinstance(key, str):
            raise CheckpointError(f"storage key {key!r} is not a string")
        numel = _int(numel, "storage size")
        have = self._storages.get(key)
        if have is not None:
            if have.dtype != storage_type.dtype:
                raise CheckpointError(f"storage data/{key} is used as both {have.dtype} and {storage_type.dtype}")
            return have
        name = f"{self._prefix_}data/{key}"
        info = self._infos.get(name)
        if info is None:
            raise CheckpointError(
                f"{self.path}: storage record {name} is missing from the archive; the file is truncated or corrupt "
                "(re-download it or re-save it)"
            )
        nbytes = numel * storage_type.dtype.itemsize
        if info.compress_type != zipfile.ZIP_STORED:
            raise CheckpointError(f"{self.path}: storage record {name} is compressed and cannot be memory-mapped; {_RESAVE}")
        if info.file_size < nbytes:
            raise CheckpointError(
                f"{self.path}: storage record {name} holds {info.file_size} bytes but the pickle says "
                f"{numel} x {storage_type.dtype} ({nbytes} bytes); the file is truncated or corrupt"
            )
        start = self._data_offset(info)
        storage = _Storage(key, storage_type.dtype, numel, start, nbytes)
        self._storages[key] = storage
        return storage

    def _data_offset(self, info: zipfile.ZipInfo) -> int:
        # Data follow the *local* header, whose extra field (torch's alignment padding) may differ
        # from the central directory's.
        at = info.header_offset
        if at + _LOCAL_HEADER.size > self._size:
            raise CheckpointError(f"{self.path}: local header of {info.filename} lies past the end of the file (truncated)")
        fields = _LOCAL_HEADER.unpack(bytes(self._mmap[at : at + _LOCAL_HEADER.size]))
        if fields[0] != _ZIP_MAGIC:
            raise CheckpointError(f"{self.path}: bad local header for {info.filename}; the file is corrupt")
        name_len, extra_len = fields[-2], fields[-1]
        name = bytes(self._mmap[at + 30 : at + 30 + name_len])
        if name.decode("utf-8", "replace") != info.orig_filename:
            raise CheckpointError(f"{self.path}: local header of {info.filename} names {name!r}; the file is corrupt")
        start = at + _LOCAL_HEADER.size + name_len + extra_len
        if start + info.file_size > self._size:
            raise CheckpointError(
                f"{self.path}: record {info.filename} ends at byte {start + info.file_size} past the end of the "
                f"file ({self._size} bytes); the file is truncated"
            )
        return start

    def keys(self) -> list[str]:
        return list(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def shape(self, key: str) -> tuple[int, ...]:
        return self._entries[key].shape

    def dtype(self, key: str) -> np.dtype:
        return self._entries[key].dtype

    def get(self, key: str) -> np.ndarray:
        """Tensor ``key`` as a read-only view of the mapped file (no copy; ``as_strided`` if non-contiguous)."""
        t = self._entries[key]
        n = 1
        for d in t.shape:
            n *= d
        if n == 0:
            out = np.empty(t.shape, dtype=t.dtype)
            out.flags.writeable = False
            return out
        item = t.dtype.itemsize
        begin = t.storage.start + t.offset * item
        if self._contiguous[key]:
            return self._mmap[begin : begin + n * item].view(t.dtype).reshape(t.shape)
        extent = 1 + sum((d - 1) * s for d, s in zip(t.shape, t.stride))
        base = self._mmap[begin : begin + extent * item].view(t.dtype)
        return np.lib.stride_tricks.as_strided(
            base, shape=t.shape, strides=tuple(s * item for s in t.stride), writeable=False
        )


def _is_contiguous(shape: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    expect = 1
    for d, s in zip(reversed(shape), reversed(stride)):
        if d != 1 and s != expect:
            return False
        expect *= d
    return True


def is_torch_zip(path: str | os.PathLike) -> bool:
    """Whether ``path`` starts with a zip signature (a ``torch.save`` archive, or another zip)."""
    with open(path, "rb") as f:
        return f.read(4) == _ZIP_MAGIC


__all__ = ["TorchCheckpointFile", "WRAPPER_KEYS", "flatten_state_dict", "is_torch_zip"]
