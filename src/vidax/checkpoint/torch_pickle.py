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

Hostile files (the threat model is in docs/design.md): every number in the file is checked
before it sizes anything.

* Zip records other than storages are read with a cap on the size their header declares and on
  the bytes actually inflated (a lying header, a deflate bomb): :data:`MAX_PICKLE_BYTES` for
  ``data.pkl``, :data:`MAX_SMALL_RECORD` for ``byteorder``; the central directory is refused past
  :data:`MAX_CENTRAL_DIRECTORY` bytes before :mod:`zipfile` parses it. Storages are never read:
  each is checked against the element count the pickle declares, then mapped.
* ``data.pkl`` is checked opcode by opcode (:func:`vidax.checkpoint.pickle_scan.scan_pickle`: memo
  indices, declared lengths, integer widths, the cost of hashing keys) before the C unpickler runs it,
  and the allow-listed callables charge what they build (elements copied, tensors described) to a
  budget of ``len(data.pkl)``: a shared list re-used a million times by memo reference would
  otherwise cost a million copies.
* Tensor sizes, strides and offsets are integers in ``[0, 2**48)`` with at most 32 dimensions
  (the byte extent of every non-empty tensor lies inside its storage; an empty one still has to
  be a shape NumPy can represent).
* :func:`flatten_state_dict` walks each container once (a pickle's memo can share one container
  under many parents: 60 nested pairs name 2**60 paths) and charges the names it builds to a
  budget of ``4 * len(data.pkl) + 1 MiB`` characters.
* Error messages quote values from the file through :func:`vidax.checkpoint.errors.excerpt`.

Container rule (:func:`flatten_state_dict`): nested dicts / ``OrderedDict`` /
lists / tuples are flattened to dotted keys (``{"a": {"b": t}}`` -> ``a.b``,
lists by index); non-tensor leaves (epochs, strings, floats, dtypes) are
skipped. Then, while the top level is a dict whose only tensor-bearing entry is
one of :data:`WRAPPER_KEYS` (``state_dict``, ``model``, ``module``,
``model_state_dict``, ``ema``, ...), that entry is unwrapped, so
``{"model": {"state_dict": sd}, "epoch": 3}`` yields the keys of ``sd``. If two
entries carry tensors (``{"model": ..., "optimizer": ...}``) nothing is
unwrapped and keys keep their prefixes. A container that holds tensors may be
reached only once: the same dict under two names (``{"model": sd, "ema": sd}`` saved from one
object) is refused, since giving its tensors both names is what lets a kilobyte of shared
references name 2**60 tensors, and giving them one name would drop the other silently. Shared
tensors (tied weights) and shared containers without tensors are fine.
"""

from __future__ import annotations

import _compat_pickle
import collections
import io
import math
import os
import pickle
import struct
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from vidax.checkpoint.errors import CheckpointError, clip, excerpt, name_excerpt
from vidax.checkpoint.pickle_scan import MAX_KEY_COST, scan_pickle

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

#: Largest ``data.pkl`` read (declared and inflated). A ``torch.save`` state dict pickles to about
#: 150 bytes per tensor (measured: 148 with 60-character names), so 8 MiB is ~55,000 tensors: the
#: largest ``.pth`` files this project reads (Wan's CLIP image encoder, ~800 tensors, ~120 KB;
#: its T5, ~40 KB) fit 70 times over, and a 10,000-tensor file (1.7 MB) four times. Worst-case
#: memory of unpickling is a few dozen times this (a 2-byte opcode pair can append a 64-byte dict).
MAX_PICKLE_BYTES = 8 * 2**20
#: Largest ``byteorder`` record read (its text is ``little`` or ``big``).
MAX_SMALL_RECORD = 64
#: Largest zip central directory parsed: about 80 bytes per record, one record per storage, so
#: 8 MiB is ~100,000 storages (more than a ``data.pkl`` under its cap can name), and what
#: :mod:`zipfile` builds from it (~500 bytes per record) stays under ~100 MB.
MAX_CENTRAL_DIRECTORY = 8 * 2**20
# Tensor sizes, strides, offsets and element counts are below this (256 Ti elements: past any
# file or address space, and far from int64 overflow once multiplied by an itemsize).
_MAX_INDEX = 2**48
_MAX_NDIM = 32  # NumPy 1.x's limit; real tensors have at most 6


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


class _Budget:
    """What the allow-listed callables of one unpickling may still build (elements), and what hashing
    the set items and dict keys they are given may still cost (see
    :data:`~vidax.checkpoint.pickle_scan.MAX_KEY_COST`: the scan bounds the keys the C unpickler hashes,
    this the ones our callables hash)."""

    __slots__ = ("left", "key_cost_left")

    def __init__(self, units: int):
        self.left = units
        self.key_cost_left = MAX_KEY_COST


# The budget of the unpickling running on this thread; the callables below are module functions
# (``_rebuild_from_type_v2`` recognises the rebuild functions by identity), so it is found here.
_ACTIVE = threading.local()


def _charge(units: int) -> None:
    budget = getattr(_ACTIVE, "budget", None)
    if budget is not None:
        budget.left -= units
        if budget.left < 0:
            raise CheckpointError(
                "the pickle builds more than its size allows (a container shared by reference and copied "
                "again and again?)"
            )


def _hash_cost(x: Any, cap: int) -> int:
    """What hashing (and comparing) ``x`` visits, counted up to a little past ``cap``: 0 for a plain
    scalar, a tuple's size as a tree (CPython caches no tuple hash), a frozenset's length, else 1."""
    if type(x) in _SCALARS:
        return 0
    if type(x) is frozenset:
        return 1 + len(x)
    if type(x) is not tuple:
        return 1
    cost, todo = 1, list(x)
    while todo and cost <= cap:
        y = todo.pop()
        cost += 1
        if type(y) is tuple:
            todo.extend(y)
    return cost


def _charge_key_cost(items: Any) -> None:
    """Charge the hashing of ``items`` (set items or dict keys about to be hashed) to the budget."""
    budget = getattr(_ACTIVE, "budget", None)
    if budget is not None:
        for x in items:
            if type(x) not in _SCALARS:
                budget.key_cost_left -= _hash_cost(x, budget.key_cost_left)
                if budget.key_cost_left < 0:
                    raise CheckpointError(
                        f"set items or dict keys other than plain scalars cost more than {MAX_KEY_COST} to hash "
                        "(nested or shared tuples, or too many of them)"
                    )


_SCALARS = frozenset({str, bytes, int, float, bool, type(None)})


def _show(v: Any) -> str:
    # Our stand-ins have short reprs; anything else from the file is quoted by excerpt.
    return repr(v) if isinstance(v, _Frozen) else excerpt(v)


def _int(v: Any, what: str) -> int:
    if type(v) is not int:
        raise CheckpointError(f"{what} is {_show(v)}, not an integer")
    return v


def _ints(v: Any, what: str) -> tuple[int, ...]:
    if type(v) is not tuple and type(v) is not list:
        raise CheckpointError(f"{what} is {_show(v)}, not a tuple of integers")
    _charge(len(v) + 1)
    for x in v:
        if type(x) is not int:
            raise CheckpointError(f"{what} {_show(v)} holds {_show(x)}, not an integer")
    return tuple(v)


def _tensor(storage: Any, storage_offset: Any, size: Any, stride: Any, dtype: np.dtype | None = None) -> _TensorRef:
    if type(storage) is not _Storage:
        raise CheckpointError(f"tensor storage is {type(storage).__name__}, not a storage record")
    offset = _int(storage_offset, "storage offset")
    shape = _ints(size, "tensor size")
    strides = _ints(stride, "tensor stride")
    dtype = storage.dtype if dtype is None else dtype
    if len(shape) != len(strides) or len(shape) > _MAX_NDIM:
        raise CheckpointError(f"tensor size {_show(shape)} and stride {_show(strides)} differ in length or "
                              f"have more than {_MAX_NDIM} dimensions")
    if not 0 <= offset < _MAX_INDEX or (shape and not (0 <= min(shape) and max(shape) < _MAX_INDEX
                                                       and 0 <= min(strides) and max(strides) < _MAX_INDEX)):
        raise CheckpointError(f"tensor offset, size or stride out of range [0, 2**48) "
                              f"({_show(offset)}, {_show(shape)}, {_show(strides)})")
    if 0 not in shape:
        extent = (offset + 1 + sum((n - 1) * s for n, s in zip(shape, strides))) * dtype.itemsize
        if extent > storage.nbytes:
            raise CheckpointError(
                f"tensor (offset {offset}, size {_show(shape)}, stride {_show(strides)}, {dtype}) reaches byte "
                f"{extent} of storage data/{name_excerpt(storage.key)}, which holds {storage.nbytes} bytes; the "
                "file is truncated or corrupt"
            )
    elif math.prod(n for n in shape if n) * dtype.itemsize >= _MAX_INDEX:
        raise CheckpointError(f"empty tensor of size {_show(shape)} is larger than NumPy can represent")
    return _TensorRef(storage, offset, shape, strides, dtype)


def _rebuild_tensor(storage, storage_offset, size, stride):
    return _tensor(storage, storage_offset, size, stride)


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None, metadata=None):
    return _tensor(storage, storage_offset, size, stride)


def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype, metadata=None):
    if not isinstance(dtype, _TorchDType):
        raise CheckpointError(f"tensor dtype is {_show(dtype)}, not a torch dtype")
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
    if not any(func is f for f in _REBUILDS) or not isinstance(new_type, _TensorClass) or type(args) is not tuple:
        raise CheckpointError(f"_rebuild_from_type_v2 called with {_show(func)}, {_show(new_type)}: not a plain tensor")
    return func(*args)


def _codecs_encode(obj, encoding="utf-8"):
    # Protocol-2 pickles spell bytes as _codecs.encode(str, "latin1").
    if type(obj) is not str or encoding not in ("latin1", "latin-1", "utf-8", "utf8", "ascii"):
        raise CheckpointError(f"_codecs.encode({type(obj).__name__}, {_show(encoding)}) is not a bytes literal")
    _charge(len(obj) + 1)
    return obj.encode(encoding)


def _torch_size(dims=()):
    # A list, not a tuple: a torch.Size is a plain value here, and as a list it cannot become a dict
    # key whose hash walks every dimension again on each use.
    return list(_ints(dims, "torch.Size"))


def _torch_device(*args):
    if not all(type(a) is str or type(a) is int for a in args):
        raise CheckpointError("torch.device() of something other than a name or an index")
    name = ":".join(str(a) for a in args)
    _charge(len(name) + 1)
    return name


def _bytearray(data=b""):
    if type(data) not in (bytes, bytearray, list):  # never an int (that allocates)
        raise CheckpointError(f"bytearray({type(data).__name__}) is not a bytes literal")
    _charge(len(data) + 1)
    return bytearray(data)


def _sized(items: Any, what: str) -> Any:
    if type(items) not in (list, tuple, set, frozenset):
        raise CheckpointError(f"{what}() of a {type(items).__name__}")
    _charge(len(items) + 1)
    _charge_key_cost(items)
    return items


def _set(items=()):
    return set(_sized(items, "set"))


def _frozenset(items=()):
    out = frozenset(_sized(items, "frozenset"))
    _charge_key_cost([out])  # the scan counts a call's result as costing 1 if it is hashed later; this costs more
    return out


def _ordered_dict(*args):
    # torch pickles OrderedDict() with no arguments and fills it with SETITEMS (keys checked by the
    # pickle scan); pairs given here are checked the same way before the dict hashes them.
    if not args:
        _charge(1)
        return collections.OrderedDict()
    if len(args) > 1:
        raise CheckpointError(f"OrderedDict() of {len(args)} arguments")
    items = args[0]
    if type(items) is dict or type(items) is collections.OrderedDict:
        _charge(len(items) + 1)
        _charge_key_cost(items)  # copying rehashes every key
        return collections.OrderedDict(items)
    if type(items) not in (list, tuple):
        raise CheckpointError(f"OrderedDict() of a {type(items).__name__}")
    _charge(len(items) + 1)
    if not all(type(p) is tuple and len(p) == 2 for p in items):
        raise CheckpointError("OrderedDict() of something other than (key, value) pairs")
    _charge_key_cost([p[0] for p in items])
    return collections.OrderedDict(items)


def _complex(real=0.0, imag=0.0):
    if not all(type(v) in (int, float) for v in (real, imag)):
        raise CheckpointError("complex() of non-numbers")
    return complex(real, imag)


def _allowed_globals() -> dict[tuple[str, str], Any]:
    allowed: dict[tuple[str, str], Any] = {
        ("collections", "OrderedDict"): _ordered_dict,
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
            where = f"{name_excerpt(str(module), 100)}.{name_excerpt(str(name), 100)}"
            raise CheckpointError(
                f"{self._path}: refusing to load global {where} from the pickle: only tensors, "
                "dicts, lists and plain values are allowed (a pickle can run arbitrary code). "
                "If you trust the file, re-save only the weights (a state dict of tensors) or convert it to safetensors"
            )
        return hit

    def persistent_load(self, pid: Any) -> Any:
        if self._storage is None:
            raise CheckpointError(f"{self._path}: a plain pickle refers to external storage {_show(pid)}; {_RESAVE}")
        _charge(1)
        return self._storage(pid)


def _unpickle(data: bytes, path: Path, storage: Callable[[Any], _Storage] | None, where: str) -> Any:
    """Check ``data`` (:func:`~vidax.checkpoint.pickle_scan.scan_pickle`), then unpickle it restricted and budgeted.

    Raises:
      CheckpointError: from the scan, the allow-list, the budget, or (as ``corrupt <where>``) any
        other failure of the pickle; ``MemoryError`` passes through (a bound that failed to bound).
    """
    scan_pickle(data, where)
    unpickler = _RestrictedUnpickler(io.BytesIO(data), path, storage)
    _ACTIVE.budget = _Budget(len(data))
    try:
        return unpickler.load()
    except CheckpointError as e:
        msg = clip(str(e))
        raise CheckpointError(msg if msg.startswith(str(path)) else f"{where}: {msg}") from None
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure of a hostile or corrupt pickle is a corrupt file
        raise CheckpointError(clip(f"{where}: corrupt pickle ({type(e).__name__}: {e}); {_RESAVE}")) from None
    finally:
        _ACTIVE.budget = None
        del unpickler


# --------------------------------------------------------------------------- container flattening


_CONTAINERS = (dict, collections.OrderedDict, list, tuple)
_KEY_TYPES = frozenset({str, int, bool, float, bytes, type(None)})


def _children(node: Any):
    return node.values() if isinstance(node, dict) else node


def _tensor_bearing(root: Any) -> set[int]:
    """``id``s of the containers (dicts, lists, tuples) from which a tensor is reachable.

    One iterative depth-first pass, each container expanded once, so shared references (the
    memo) cost nothing extra and no nesting depth overflows the C stack. A container met again
    while it is being expanded (a cycle) counts as tensorless there: every tensor still has a
    path of bearing containers from the root (the depth-first tree's), which is what the walk
    in :func:`flatten_state_dict` follows.
    """
    bearing: set[int] = set()
    seen: set[int] = set()
    if not isinstance(root, _CONTAINERS):
        return bearing
    seen.add(id(root))
    todo: list[tuple[Any, bool]] = [(root, False)]
    while todo:
        node, expanded = todo.pop()
        if expanded:
            if any(type(c) is _TensorRef or id(c) in bearing for c in _children(node)):
                bearing.add(id(node))
            continue
        todo.append((node, True))
        for c in _children(node):
            if isinstance(c, _CONTAINERS) and id(c) not in seen:
                seen.add(id(c))
                todo.append((c, False))
    return bearing


def flatten_state_dict(obj: Any, *, source: str = "checkpoint", max_name_chars: int | None = None) -> dict[str, Any]:
    """Flatten an unpickled object to ``{dotted_key: tensor}``, unwrapping one wrapper chain.

    Args:
      obj: the unpickled object, tensors being this module's lazy tensor records.
      source: name for error messages.
      max_name_chars: budget for the characters of the names built (every key, and every
        container's prefix on the way), or None for no limit. :class:`TorchCheckpointFile` passes
        ``4 * len(data.pkl) + 1 MiB``: a real state dict's names are shorter than its pickle (each
        name is stored in it whole, beside ~90 bytes of tensor description).

    Returns:
      Dotted keys in file order -> tensor leaves. While the top level is a dict
      whose single tensor-bearing entry has a key in :data:`WRAPPER_KEYS` and is
      itself a dict, that entry is unwrapped first (so a tensor named ``model``
      stays ``model``). A bare tensor gets the key ``""``. Each container is walked
      once, and only containers that hold tensors are walked at all.

    Raises:
      CheckpointError: two paths flatten to the same dotted key; a container holding tensors is
        reached a second time (shared by reference, or a cycle: see the module docstring); tensors
        nested more than 64 containers deep; a dict key above a tensor that is not a str, int,
        float, bool, bytes or None; the names exceed ``max_name_chars``.
    """
    bearing = _tensor_bearing(obj)
    while isinstance(obj, dict):
        holders = [k for k, v in obj.items() if type(v) is _TensorRef or id(v) in bearing]
        if len(holders) == 1 and holders[0] in WRAPPER_KEYS and isinstance(obj[holders[0]], dict):
            obj = obj[holders[0]]
        else:
            break
    out: dict[str, Any] = {}
    walked: dict[int, str] = {}
    left = [max_name_chars if max_name_chars is not None else -1]

    def name(prefix: str, k: Any) -> str:
        if type(k) not in _KEY_TYPES:
            raise CheckpointError(f"{source}: a {type(k).__name__} dict key above a tensor (under {excerpt(prefix)})")
        key = f"{prefix}.{k}" if prefix else str(k)
        if left[0] >= 0:
            left[0] -= len(key)
            if left[0] < 0:
                raise CheckpointError(
                    f"{source}: tensor names total more than {max_name_chars} characters, more than the pickle "
                    "describes (containers shared by reference?)"
                )
        return key

    def walk(node: Any, prefix: str, depth: int) -> None:
        if depth > 64:
            raise CheckpointError(f"{source}: containers nested more than 64 deep")
        if id(node) in walked:
            raise CheckpointError(
                f"{source}: the same container holds tensors under {excerpt(walked[id(node)])} and {excerpt(prefix)} "
                "(a shared reference or a cycle); re-save the file with one copy of each state dict"
            )
        walked[id(node)] = prefix
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for k, v in items:
            if type(v) is _TensorRef:
                key = name(prefix, k)
                if key in out:
                    raise CheckpointError(f"{source}: two tensors flatten to the same key {excerpt(key)}")
                out[key] = v
            elif id(v) in bearing:
                walk(v, name(prefix, k), depth + 1)

    if type(obj) is _TensorRef:
        out[""] = obj
    elif id(obj) in bearing:
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
        self._size = self.path.stat().st_size
        with open(self.path, "rb") as f:
            head = f.read(64)
            if not head.startswith(_ZIP_MAGIC):
                self._refuse_non_zip(head)
            self._check_central_directory(f)
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
                        f"{self.path}: zip archive without a {name_excerpt(pkl_name)} record, so not a torch.save "
                        f"checkpoint{hint}; the file is truncated or corrupt, or {_RESAVE}"
                    )
                data_pkl = self._read_record(zf, infos[pkl_name], MAX_PICKLE_BYTES)
                byteorder = b"little"  # torch's assumption for files written before the record existed
                if f"{prefix}byteorder" in infos:
                    byteorder = self._read_record(zf, infos[f"{prefix}byteorder"], MAX_SMALL_RECORD).strip()
        except (CheckpointError, MemoryError):
            raise
        except zipfile.BadZipFile as e:
            raise CheckpointError(clip(
                f"{self.path}: truncated or corrupt zip archive ({e}); re-download the file or {_RESAVE}"
            )) from None
        except Exception as e:  # noqa: BLE001 - zipfile raises OSError, EOFError, zlib.error, NotImplementedError, ...
            raise CheckpointError(clip(
                f"{self.path}: cannot read the zip archive ({type(e).__name__}: {e}); the file is truncated or corrupt"
            )) from None
        if byteorder != b"little":
            order = ("'big'-endian byte order" if byteorder == b"big"
                     else f"a byteorder record of {len(byteorder)} bytes")
            raise CheckpointError(
                f"{self.path}: tensors were saved in {order}; only little-endian is supported: "
                "re-save the file on a little-endian machine or convert it to safetensors"
            )
        self._mmap = np.memmap(self.path, dtype=np.uint8, mode="r")
        self._bytes = memoryview(self._mmap)  # zip headers are read through this (no NumPy slicing per record)
        self._infos = infos
        self._prefix_ = prefix
        self._storages: dict[str, _Storage] = {}
        where = f"{self.path}: {name_excerpt(pkl_name)}"
        obj = _unpickle(data_pkl, self.path, self._storage, where)
        self._entries: dict[str, _TensorRef] = flatten_state_dict(
            obj, source=str(self.path), max_name_chars=4 * len(data_pkl) + 2**20
        )
        self._contiguous = {k: _is_contiguous(t.shape, t.stride) for k, t in self._entries.items()}

    def _check_central_directory(self, f) -> None:
        # zipfile builds a ZipInfo (~500 bytes) per central-directory record before we see any; its
        # own end-record parser tells the directory's size first, so both read the same record (a
        # parser of ours could be made to disagree with it). It is private: should a Python drop it,
        # the check is skipped and tests/test_hostile_checkpoints.py says so.
        find_end = getattr(zipfile, "_EndRecData", None)
        try:
            end = find_end(f) if find_end is not None else None
        except (OSError, zipfile.BadZipFile):
            end = None
        if end is None:
            return  # zipfile will refuse the file itself (no end of central directory record)
        size = end[zipfile._ECD_SIZE]
        if size > MAX_CENTRAL_DIRECTORY:
            raise CheckpointError(
                f"{self.path}: the zip central directory is {size} bytes, more than the {MAX_CENTRAL_DIRECTORY} "
                "read (a torch.save checkpoint has one ~80-byte record per tensor storage); the file is corrupt or "
                "not a checkpoint"
            )

    def _read_record(self, zf: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> bytes:
        """A small record's bytes: refused if its header declares more than ``limit`` bytes, and
        inflated at most ``limit + 1`` bytes whatever the header says (a deflate bomb, a lying header)."""
        name = name_excerpt(info.filename)
        if info.file_size > limit:
            raise CheckpointError(
                f"{self.path}: record {name} declares {info.file_size} bytes, more than the {limit} read; "
                "the file is corrupt or not a checkpoint"
            )
        with zf.open(info) as r:
            data = r.read(limit + 1)
        if len(data) > limit:
            raise CheckpointError(
                f"{self.path}: record {name} inflates past {limit} bytes although its header declares "
                f"{info.file_size}; the file is corrupt or not a checkpoint"
            )
        return data

    @staticmethod
    def _prefix(names: list[str]) -> str:
        # torch names the archive after the first record's top folder (``archive/`` or the file stem).
        if not names:
            return ""
        first = names[0]
        return first[: first.index("/") + 1] if "/" in first else ""

    def _refuse_non_zip(self, head: bytes) -> None:
        message = _describe_non_zip(self.path, head)
        if not head.startswith(_LEGACY_MAGIC) and not _looks_like_safetensors(head) and self._size <= MAX_PICKLE_BYTES:
            # Maybe a pickle of any protocol: run the restricted unpickler (it can call nothing
            # outside the allow-list) to name a hostile global if there is one. Whatever it finds,
            # the file is refused. A file past the pickle cap is refused without reading it.
            try:
                with open(self.path, "rb") as f:
                    data = f.read(MAX_PICKLE_BYTES)
                _unpickle(data, self.path, None, str(self.path))
            except CheckpointError as e:
                if "refusing to load global" in str(e):
                    raise
            except Exception:  # noqa: BLE001 - the file is refused below anyway (MemoryError included)
                pass
        raise CheckpointError(message)

    def _storage(self, pid: Any) -> _Storage:
        if not (type(pid) is tuple and len(pid) == 5 and pid[0] == "storage"):
            raise CheckpointError(f"unknown persistent id {_show(pid)}")
        _, storage_type, key, _location, numel = pid
        if not isinstance(storage_type, _StorageType):
            raise CheckpointError(f"storage type {_show(storage_type)} is not a torch storage class")
        if type(key) is not str:
            raise CheckpointError(f"storage key {_show(key)} is not a string")
        numel = _int(numel, "storage size")
        have = self._storages.get(key)
        if have is not None:
            if have.dtype != storage_type.dtype:
                raise CheckpointError(
                    f"storage data/{name_excerpt(key)} is used as both {have.dtype} and {storage_type.dtype}"
                )
            return have
        name = f"{self._prefix_}data/{key}"
        info = self._infos.get(name)
        shown = name_excerpt(name) if info is None or not 0 <= numel < _MAX_INDEX else ""
        if info is None:
            raise CheckpointError(
                f"{self.path}: storage record {shown} is missing from the archive; the file is truncated or corrupt "
                "(re-download it or re-save it)"
            )
        if not 0 <= numel < _MAX_INDEX:
            raise CheckpointError(f"{self.path}: storage {shown} has {numel} elements; the file is corrupt")
        nbytes = numel * storage_type.dtype.itemsize
        if info.compress_type != zipfile.ZIP_STORED or info.file_size < nbytes:
            shown = name_excerpt(name)
        if info.compress_type != zipfile.ZIP_STORED:
            raise CheckpointError(
                f"{self.path}: storage record {shown} is compressed and cannot be memory-mapped; {_RESAVE}"
            )
        if info.file_size < nbytes:
            raise CheckpointError(
                f"{self.path}: storage record {shown} holds {info.file_size} bytes but the pickle says "
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
        if at < 0 or at + _LOCAL_HEADER.size > self._size:
            raise CheckpointError(f"{self.path}: local header of {name_excerpt(info.filename)} lies past the end of "
                                  "the file (truncated)")
        fields = _LOCAL_HEADER.unpack_from(self._bytes, at)
        if fields[0] != _ZIP_MAGIC:
            raise CheckpointError(
                f"{self.path}: bad local header for {name_excerpt(info.filename)}; the file is corrupt"
            )
        name_len, extra_len = fields[-2], fields[-1]
        name = self._bytes[at + 30 : at + 30 + name_len].tobytes()
        if name.decode("utf-8", "replace") != info.orig_filename:
            raise CheckpointError(f"{self.path}: local header of {name_excerpt(info.filename)} names {excerpt(name)}; "
                                  "the file is corrupt")
        start = at + _LOCAL_HEADER.size + name_len + extra_len
        if start + info.file_size > self._size:
            raise CheckpointError(
                f"{self.path}: record {name_excerpt(info.filename)} ends at byte {start + info.file_size} past the "
                f"end of the file ({self._size} bytes); the file is truncated"
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
