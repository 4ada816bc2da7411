"""Strict, streaming checkpoint translation: files -> host NumPy -> device arrays.

:func:`load_params` checks the whole checkpoint against the model's spec tree
before reading any tensor data, and raises one :class:`CheckpointError`
listing every missing, unexpected and shape-mismatched key. Then, parameter by
parameter, it reads the memory-mapped tensors, applies the layout change and
the dtype policy on the host (fp32 -> bf16 by round-to-nearest-even through
``ml_dtypes``), and places the finished array with a single ``jax.device_put``
(already sharded, when a sharding is given). Host memory beyond the mapped
files stays near the largest single parameter.

Two further placements (issue 4, part 2):

* **Shard by shard** (``by_shards``; automatic when a sharding spans devices of other processes,
  i.e. on several hosts): each parameter is created with ``jax.make_array_from_callback``; the
  callback receives the index of one device's shard in our layout, maps it back through the
  layout change (:func:`vidax.checkpoint.keymap.checkpoint_index`: a column slice of a transposed
  linear kernel is a row slice of the checkpoint tensor) and reads only that slice of the
  memory-mapped tensor, and only the layers a stacked slice covers. Each process therefore reads
  the bytes of the shards its own devices hold (each distinct shard once), plus the replicated
  parameters.
* **Layer chunks** (:class:`LayerChunks`, for weight offloading): a stacked parameter becomes a
  tuple of arrays of ``size`` layers each (the last one zero-padded), placed with the chunk
  sharding, typically in host memory (``memory_kind="pinned_host"``), without passing through
  device memory.
"""

from __future__ import annotations

import mmap
import os
from collections import defaultdict
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

from vidax.checkpoint.errors import CheckpointError, name_excerpt
from vidax.checkpoint.keymap import KeyMap, checkpoint_index, layout_shape, to_layout
from vidax.core import signals
from vidax.core.params import ParamSpec, SpecTree, flatten, unflatten

_MAX_LISTED = 40
_MAX_ITEM_CHARS = 300  # a key is the file's: a hostile one can be megabytes long


def _listing(title: str, items: list[str]) -> str:
    shown = "\n    ".join(name_excerpt(item, _MAX_ITEM_CHARS) for item in items[:_MAX_LISTED])
    more = f"\n    ... and {len(items) - _MAX_LISTED} more" if len(items) > _MAX_LISTED else ""
    return f"  {title} ({len(items)}):\n    {shown}{more}"


def plan_load(reader: Any, keymap: KeyMap, specs: SpecTree, *, source: str = "checkpoint"):
    """Match every checkpoint key to a parameter slot, without reading tensor data.

    Args:
      reader: an object with ``keys()``, ``shape(key)`` and ``get(key)``
        (:class:`~vidax.checkpoint.safetensors_io.CheckpointReader`, or a dict-backed one).
      keymap: the checkpoint layout's key map.
      specs: the model's spec tree.
      source: what to call the checkpoint in error messages (usually its folder).

    Returns:
      ``{param_path: [(checkpoint_key, layout, block_index_or_None), ...]}``.

    Raises:
      CheckpointError: listing every missing, unexpected, doubly-set and
        shape-mismatched key at once.
    """
    flat_specs: dict[str, ParamSpec] = dict(flatten(specs))
    plan: dict[str, list[tuple[str, str, int | None]]] = defaultdict(list)
    filled: dict[str, set] = defaultdict(set)
    unexpected, mismatched, doubled = [], [], []
    for key in reader.keys():
        hit = keymap.match(key)
        if hit is None:
            if not keymap.ignored(key):
                unexpected.append(key)
            continue
        rule, index = hit
        spec = flat_specs.get(rule.path)
        if spec is None:
            unexpected.append(f"{key} (maps to {rule.path}, which this model configuration does not have)")
            continue
        want = spec.shape if index is None else spec.shape[1:]
        if index is not None and index >= spec.shape[0]:
            unexpected.append(f"{key} (block {index}, but the model has {spec.shape[0]} blocks)")
            continue
        got = layout_shape(rule.layout, reader.shape(key))
        if got != tuple(want):
            mismatched.append(
                f"{key}: checkpoint shape {tuple(reader.shape(key))}, model expects "
                f"{_unlayout_hint(rule.layout, want)} (for {rule.path})"
            )
            filled[rule.path].add(index if index is not None else -1)  # reported as a mismatch, not also as missing
            continue
        slot = index if index is not None else -1
        if slot in filled[rule.path]:
            doubled.append(f"{key} (sets {rule.path}{'' if index is None else f'[{index}]'} again)")
            continue
        filled[rule.path].add(slot)
        plan[rule.path].append((key, rule.layout, index))
    missing, stacked = [], {}
    for path, spec in flat_specs.items():
        keys_for = _expected_keys(keymap, path)
        if _is_stacked(keymap, path):
            stacked[path] = spec.shape[0]
            for i in range(spec.shape[0]):
                if i not in filled[path]:
                    missing.append(keys_for.replace("{i}", str(i)) + f" (for {path}[{i}])")
        elif -1 not in filled[path]:
            missing.append(f"{keys_for} (for {path})")
    if missing or unexpected or mismatched or doubled:
        parts = [f"{source} does not match the model configuration:"]
        if missing:
            parts.append(_listing("missing keys", missing))
        if unexpected:
            parts.append(_listing("unexpected keys", unexpected))
        if mismatched:
            parts.append(_listing("shape mismatches", mismatched))
        if doubled:
            parts.append(_listing("keys that set a parameter twice", doubled))
        held, sizes = {frozenset(filled[path]) for path in stacked}, set(stacked.values())
        if missing and len(held) == len(sizes) == 1:
            (present,), (expected,) = held, sizes
            if 0 < len(present) < expected and present == frozenset(range(len(present))):
                parts.append(f"  The checkpoint holds {len(present)} blocks and the configuration describes "
                             f"{expected}: check the layer count (e.g. num_layers) in its config.json.")
        parts.append(
            "  Fix: check that the folder holds the model the config.json describes "
            "(same variant and size), and that no file is truncated."
        )
        raise CheckpointError("\n".join(parts))
    return dict(plan)


def _unlayout_hint(layout: str, want: tuple[int, ...]) -> str:
    # Report the expected shape in the checkpoint's own (PyTorch) layout, which is what a user can look up.
    if layout == "linear" and len(want) == 2:
        return str((want[1], want[0]))
    if layout == "conv3d" and len(want) == 5:
        return str((want[4], want[3], want[0], want[1], want[2]))
    if layout == "conv2d" and len(want) == 4:
        return str((want[3], want[2], want[0], want[1]))
    return str(tuple(want))


def _is_stacked(keymap: KeyMap, path: str) -> bool:
    return any(r.path == path and "{i}" in r.key for r in keymap.rules)


def _expected_keys(keymap: KeyMap, path: str) -> str:
    keys = [r.key for r in keymap.rules if r.path == path]
    return keys[0] if keys else f"<no key map rule for {path}>"


def cast_on_host(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Cast a host array to ``dtype`` (fp32 -> bf16 rounds to nearest even, via ml_dtypes)."""
    if array.dtype == dtype:
        return array
    return array.astype(dtype)


try:  # the native helper (native/convert.cpp), built by the package's build; NumPy otherwise
    from vidax.checkpoint import _convert as _native
except ImportError:  # e.g. running from a source tree without a build
    _native = None

# Rows of a source matrix converted per task. Transposing a whole matrix in one NumPy
# assignment walks memory with a large stride (~0.6 GB/s here); row tiles that are cast
# contiguously and then transposed at the bit level stay in cache (~2 GB/s per core).
_TILE_ROWS = 256
_TASK_BYTES = 16 << 20
# Task boundaries fall on multiples of this many rows: the native kernel writes whole 64-byte lines
# of the destination from 16 (float32) or 32 (bfloat16) source rows at a time, with streaming stores
# where a task starts on a multiple of 8 rows (native/convert_avx2.cpp).
_TASK_ROW_MULTIPLE = 32


def _bits(a: np.ndarray) -> np.ndarray:
    # Same-size unsigned view: copying raw bits avoids ml_dtypes' slow per-element path for bf16.
    return a.view(np.dtype(f"u{a.dtype.itemsize}")) if a.dtype.itemsize in (1, 2, 4, 8) else a


_BF16 = np.dtype(ml_dtypes.bfloat16)
# ``VIDAX_CONVERT_ISA=portable`` keeps the native helper on its portable kernel where the CPU has AVX2
# (bench.load measures both; the outputs are bit-identical).
_SIMD = os.environ.get("VIDAX_CONVERT_ISA", "").lower() != "portable"
_NATIVE_SOURCES = (np.dtype(np.float32), np.dtype(np.float16), _BF16)
_NATIVE_TARGETS = (np.dtype(np.float32), _BF16)


def _native_transpose(src: np.ndarray, out: np.ndarray, lo: int, hi: int, volume: int = 1) -> bool:
    """Transpose-cast rows ``lo:hi`` of ``src`` ``(R, C)`` into ``out`` ``(C, R)`` natively, if the helper is built
    and applies. ``volume > 1``: ``src`` is a conv kernel ``(O, I * volume)`` and ``out`` receives it as
    ``(volume, I, O)`` (native/convert.h)."""
    if (_native is None or src.dtype not in _NATIVE_SOURCES or out.dtype not in _NATIVE_TARGETS
            or not src.flags.c_contiguous or not out.flags.c_contiguous):
        return False
    s = src.view(np.uint16) if src.dtype == _BF16 else src
    o = out.view(np.uint16) if out.dtype == _BF16 else out
    _native.transpose_cast(s, o, lo, hi, out.dtype == _BF16, volume, _SIMD)
    return True


def _convert_rows(src: np.ndarray, layout: str, out: np.ndarray, lo: int, hi: int) -> None:
    """Write rows ``lo:hi`` of checkpoint tensor ``src`` into ``out`` (our layout, ``out.dtype``)."""
    if layout == "linear":  # src (O, I) -> out (I, O): columns lo:hi of out
        if _native_transpose(src, out, lo, hi):
            return
        for i in range(lo, hi, _TILE_ROWS):
            block = cast_on_host(np.ascontiguousarray(src[i : min(hi, i + _TILE_ROWS)]), out.dtype)
            _bits(out)[:, i : i + block.shape[0]] = _bits(block).T
    elif layout == "none":
        if src.ndim == 0:
            out[...] = src
        elif src.dtype == out.dtype:
            _bits(out)[lo:hi] = _bits(src[lo:hi])
        else:
            out[lo:hi] = cast_on_host(src[lo:hi], out.dtype)
    elif not _native_conv(src, out, lo, hi):  # convolution kernels: output channels lo:hi
        ours = to_layout(layout, src[lo:hi])
        out[..., lo:hi] = cast_on_host(np.ascontiguousarray(ours), out.dtype)


def _native_conv(src: np.ndarray, out: np.ndarray, lo: int, hi: int) -> bool:
    """Output channels ``lo:hi`` of a PyTorch conv kernel ``(O, I, *K)`` into ours ``(*K, I, O)``, natively.

    The kernel viewed as an ``(O, I * volume)`` matrix is transposed (and cast) by the native helper
    straight into ``out`` viewed as ``(volume * I, O)``: source column ``i * volume + k`` lands in
    destination row ``k * I + i``. NumPy's strided 5-D transpose runs at ~0.3 GB/s here: the 2.7 GB
    Wan2.2 VAE took 10 s to load.
    """
    if src.ndim < 3 or not src.flags.c_contiguous or not out.flags.c_contiguous:  # (a reshape would copy)
        return False
    o, i = src.shape[:2]
    volume = int(np.prod(src.shape[2:], dtype=np.int64))
    return _native_transpose(src.reshape(o, i * volume), out.reshape(volume * i, o), lo, hi, volume)


def _tasks(src: np.ndarray, layout: str, out: np.ndarray) -> list[tuple]:
    rows = src.shape[0] if src.ndim and layout in ("linear", "none", "conv2d", "conv3d") else 1
    row_bytes = max(1, src.nbytes // max(rows, 1))
    step = -(-max(1, _TASK_BYTES // row_bytes) // _TASK_ROW_MULTIPLE) * _TASK_ROW_MULTIPLE
    return [(src, layout, out, lo, min(rows, lo + step)) for lo in range(0, rows, step)]


def convert_into(pool: ThreadPoolExecutor | None, src: np.ndarray, layout: str, out: np.ndarray) -> None:
    """``out[...] = to_layout(layout, src)`` cast to ``out.dtype``, in row tasks spread over ``pool``.

    One pass over the source, no full-size temporary: the layout change and the dtype
    cast (fp32 -> bf16 round-to-nearest-even, fp16 -> bf16) happen tile by tile.
    """
    convert_all(pool, [(src, layout, out)])


def convert_all(pool: ThreadPoolExecutor | None, jobs: list[tuple[np.ndarray, str, np.ndarray]]) -> None:
    """:func:`convert_into` for several ``(src, layout, out)`` jobs, all their row tasks in one pool map.

    The layers of a stacked parameter are converted together: one layer's tensor is often a
    single task (a 1536 x 1536 fp32 kernel is 9 MiB), so converting layer by layer would leave
    all but one worker idle.
    """
    tasks = [t for src, layout, out in jobs for t in _tasks(src, layout, out)]
    if pool is None or len(tasks) == 1:
        for t in tasks:
            _convert_rows(*t)
    else:
        list(pool.map(lambda t: _convert_rows(*t), tasks))
    for src, _, _ in jobs:
        release_pages(src)


def _file_mapping(view: Any) -> mmap.mmap | None:
    """The file mapping under ``view`` if it is a non-empty read-only view of an ``np.memmap``, else None."""
    raw = getattr(view, "_mmap", None)  # slices and views of an np.memmap carry its mmap object
    if not isinstance(raw, mmap.mmap) or view.flags.writeable or view.nbytes == 0:
        return None
    return raw


def release_pages(view: np.ndarray) -> None:
    """Drop the pages of a memory-mapped checkpoint tensor from this process (``MADV_DONTNEED``).

    Once a tensor is converted its source pages are not needed again, but mapped file pages
    count in the process's resident memory until unmapped. Releasing them tensor by tensor keeps
    the loader's resident memory near the converted weights plus one tensor, instead of the
    converted weights plus every mapped byte. The file stays in the page cache, and the mapping
    stays valid: a later read of the same bytes faults them back in. Arrays that are not views of
    a read-only ``np.memmap`` (e.g. a ``DictReader``'s) are left alone.
    """
    raw = _file_mapping(view)
    if raw is None or not hasattr(mmap, "MADV_DONTNEED"):
        return
    origin = np.frombuffer(raw, np.uint8, count=1).ctypes.data  # where the mapping starts
    lo = view.ctypes.data - origin
    if not 0 <= lo < len(raw):
        return
    start = lo // mmap.PAGESIZE * mmap.PAGESIZE
    span = min(len(raw), -(-(lo + view.nbytes) // mmap.PAGESIZE) * mmap.PAGESIZE) - start
    if span > 0:
        raw.madvise(mmap.MADV_DONTNEED, start, span)


def _set_layer_impl(stacked: jax.Array, layer: jax.Array, index: jax.Array) -> jax.Array:
    return jax.lax.dynamic_update_index_in_dim(stacked, layer.astype(stacked.dtype), index, 0)


@lru_cache(maxsize=None)
def _layer_setter(sharding):
    """The donated in-place layer update, its output pinned to the stacked parameter's sharding.

    Without ``out_shardings`` the update's output sharding would be left to propagation,
    which may choose another layout than the one the parameter was allocated with.
    """
    if sharding is None:
        return jax.jit(_set_layer_impl, donate_argnums=0)
    return jax.jit(_set_layer_impl, donate_argnums=0, out_shardings=sharding)


def load_params(
    reader: Any,
    keymap: KeyMap,
    specs: SpecTree,
    dtype: Any = np.float32,
    *,
    shardings: Callable[[str, ParamSpec], Any] | None = None,
    source: str = "checkpoint",
    place: bool = True,
    workers: int | None = None,
    by_shards: bool | None = None,
    parts: Collection[str] | None = None,
) -> dict:
    """Translate a checkpoint into the model's parameter tree, streaming tensor by tensor.

    Every checkpoint tensor is read from its memory map once and converted (layout and
    dtype) on the host, tile by tile, into the buffer that is transferred. On accelerators
    a stacked parameter is allocated once on its devices and filled layer by layer in
    place (a donated ``dynamic_update_slice``), so host memory beyond the mapped files
    stays near the largest single checkpoint tensor and the device never holds a second
    copy; on the CPU backend (where device memory is host memory) it is assembled on the
    host and transferred with one ``device_put``. A tensor that needs no conversion (a checkpoint
    written by ``vidax convert``, loaded at its own dtype: :func:`adoptable`) is placed straight from
    its memory map: on the CPU backend the device array *is* the mapped file, and loading reads no
    weight bytes.

    Args:
      reader: tensor source (``keys()``, ``shape(key)``, ``get(key) -> np.ndarray``).
      keymap: the checkpoint layout's key map.
      specs: the model's spec tree (shapes in our layout; stacked blocks lead with ``layers``).
      dtype: compute dtype for leaves not pinned to fp32 (``float32`` or ``bfloat16``).
        Integer or bool tensors keep their own dtype.
      shardings: optional ``(path, spec) -> jax.sharding.Sharding`` for each parameter;
        arrays are created directly with it. It may instead return a :class:`LayerChunks` for a
        stacked parameter: that leaf then becomes a tuple of chunk arrays (weight offloading).
      source: name of the checkpoint for error messages.
      place: if False, return host NumPy arrays (for conversion tools and tests).
      workers: host threads converting tensors (NumPy releases the GIL); default: CPU count, at most 8.
      by_shards: create each sharded array with ``jax.make_array_from_callback``, reading per
        device shard only that shard's slice of the checkpoint (each distinct shard once per
        process). None (default): only for shardings that are not fully addressable (several
        processes), where it is required: a process cannot place data on another's devices, and
        reading whole tensors would read every byte on every host. Host memory per parameter is
        then one device's shard (of every layer, for a stacked one).
      parts: top-level subtrees of ``specs`` to load (e.g. ``("post_quant_conv", "decoder")``: a VAE's
        decoder side for text-to-video); None: all. The whole checkpoint is still checked against the
        whole of ``specs`` (every missing, unexpected or mismatched key raises as ever); only the
        tensors of the listed subtrees are read.

    Returns:
      A nested dict of ``jax.Array`` (or ``np.ndarray`` if ``place=False``), same structure as
      ``specs`` (only the ``parts`` subtrees when given); a :class:`LayerChunks` leaf is a tuple of arrays
      of shape ``(size, *shape[1:])``.

    Raises:
      CheckpointError: see :func:`plan_load`.
      ValueError: :class:`LayerChunks` for a parameter that is not stacked; a ``parts`` name that is not a
        top-level key of ``specs``.
    """
    if parts is not None:
        unknown = sorted(set(parts) - set(specs))
        if unknown:
            raise ValueError(f"parts {unknown} are not top-level parts of the model ({sorted(specs)})")
    plan = plan_load(reader, keymap, specs, source=source)
    dtype = np.dtype(dtype)
    workers = workers or min(8, os.cpu_count() or 1)
    out: dict[str, Any] = {}
    with ThreadPoolExecutor(workers) as pool:
        for path, spec in flatten(specs if parts is None else {k: specs[k] for k in parts}):
            signals.check()  # a Ctrl-C / SIGTERM during a long load stops it here (core.signals)
            entries = plan[path]
            target = _target_dtype(reader, entries, spec, dtype)
            sharding = shardings(path, spec) if (place and shardings is not None) else None
            if isinstance(sharding, LayerChunks):
                if entries[0][2] is None and (not spec.axes or spec.axes[0] != "layers"):
                    raise ValueError(f"{path}: LayerChunks placement needs a stacked parameter (a leading layers axis)")
                out[path] = _place_chunks(pool, reader, entries, spec.shape, target, sharding,
                                          _use_shards(by_shards, sharding.sharding))
                continue
            if place and _use_shards(by_shards, sharding):
                out[path] = _place_by_shards(pool, reader, entries, spec.shape, target, sharding)
                continue
            if place and entries[0][2] is not None and _streams_layers(sharding):
                out[path] = _place_stacked(pool, reader, entries, spec.shape, target, sharding)
                continue
            host = _host_param(pool, reader, entries, spec.shape, target, adopt=place)
            out[path] = host if not place else jax.device_put(host, sharding)
    return unflatten(out)


@dataclass(frozen=True)
class LayerChunks:
    """Placement of a stacked parameter as separate arrays of ``size`` layers each (offloading).

    Returned by the ``shardings`` callable of :func:`load_params` for a stacked parameter: the
    leaf becomes ``(chunk_0, ..., chunk_{n-1})`` with ``n = ceil(layers / size)``, each of shape
    ``(size, *shape[1:])``, layers ``[i * size, (i + 1) * size)``; layers past the end of the
    last chunk are zeros. Every chunk has ``sharding`` (e.g. a ``NamedSharding`` with
    ``memory_kind="pinned_host"``: host memory, never device memory first); None keeps the chunks
    as host NumPy arrays.

    Attributes:
      sharding: the chunk arrays' sharding (a ``jax.sharding.Sharding``) or None.
      size: layers per chunk (>= 1).
    """

    sharding: Any
    size: int

    def __post_init__(self):
        if int(self.size) < 1:
            raise ValueError(f"LayerChunks.size must be >= 1, got {self.size}")


def _use_shards(by_shards: bool | None, sharding) -> bool:
    if sharding is None or not isinstance(sharding, jax.sharding.Sharding):
        return False
    if by_shards is None:
        return not sharding.is_fully_addressable
    return bool(by_shards)


def _read(reader: Any, key: str, index: tuple) -> np.ndarray:
    """``reader.get(key)[index]``, through ``reader.get_slice`` where the reader has one (counting readers)."""
    getter = getattr(reader, "get_slice", None)
    if getter is not None:
        return getter(key, index)
    return reader.get(key)[index]


def _bounds(index: tuple, shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """A device index (slices, as ``make_array_from_callback`` passes them) as ``(start, stop)`` per axis."""
    index = tuple(index) + (slice(None),) * (len(shape) - len(tuple(index)))
    out = []
    for s, n in zip(index, shape):
        start, stop, step = s.indices(n)
        if step != 1:
            raise ValueError(f"strided shard index {s} is not supported")
        out.append((start, stop))
    return tuple(out)


def _region_job(reader, key: str, layout: str, bounds, out: np.ndarray) -> tuple:
    """The conversion job filling ``out`` with the region ``bounds`` (our layout) of checkpoint tensor ``key``.

    Only that region of the tensor is read.
    """
    src = _read(reader, key, checkpoint_index(layout, tuple(slice(a, b) for a, b in bounds)))
    # An np.memmap slice stays one (np.asarray would drop the mapping that release_pages needs).
    return (src if isinstance(src, np.ndarray) else np.asarray(src)), layout, out


def _read_region(pool, reader, entries, shape, target, bounds, layer_offset: int = 0) -> np.ndarray:
    """The region ``bounds`` of a parameter of ``shape`` (our layout, ``target`` dtype), read from its entries.

    For a stacked parameter the first bound selects layers (``+ layer_offset``: the chunk's first
    layer), from per-layer checkpoint tensors or from one stacked tensor (vidax's own layout); layers
    without an entry (the padding of a last chunk) are zeros.
    """
    out = aligned_empty(tuple(b - a for a, b in bounds), target)
    if entries[0][2] is None:
        key, layout, _ = entries[0]
        if layout != "none" or not layer_offset and bounds[0][1] <= reader.shape(key)[0]:
            convert_all(pool, [_region_job(reader, key, layout, bounds, out)])
            return out
        # A chunk of a stack stored as one tensor (vidax's own layout): its layers, zeros past the last.
        lo, hi = bounds[0][0] + layer_offset, min(bounds[0][1] + layer_offset, reader.shape(key)[0])
        n = max(0, hi - lo)
        if n:
            convert_all(pool, [_region_job(reader, key, layout, ((lo, hi), *bounds[1:]), out[:n])])
        out[n:] = 0
        return out
    by_layer = {index: (key, layout) for key, layout, index in entries}
    lo, hi = bounds[0]
    jobs = []
    for j, layer in enumerate(range(lo + layer_offset, hi + layer_offset)):
        if layer in by_layer:
            key, layout = by_layer[layer]
            jobs.append(_region_job(reader, key, layout, bounds[1:], out[j]))
        else:
            out[j] = 0
    convert_all(pool, jobs)
    return out


def _place_by_shards(pool, reader, entries, shape, target, sharding, layer_offset: int = 0) -> jax.Array:
    """``jax.make_array_from_callback``: every addressable device's shard read from its own slice.

    Devices of this process holding the same shard (replicated over some mesh axis) share one read.
    """
    shape = tuple(shape)
    cache: dict = {}

    def callback(index):
        bounds = _bounds(index, shape)
        if bounds not in cache:
            cache[bounds] = _read_region(pool, reader, entries, shape, target, bounds, layer_offset)
        return cache[bounds]

    return jax.make_array_from_callback(shape, sharding, callback, dtype=target)


def _place_chunks(pool, reader, entries, shape, target, chunks: LayerChunks, by_shards: bool) -> tuple:
    """A stacked parameter as ``ceil(L / size)`` chunk arrays (see :class:`LayerChunks`)."""
    layers, size = shape[0], int(chunks.size)
    cshape = (size, *shape[1:])
    out = []
    for off in range(0, layers, size):
        if by_shards:
            out.append(_place_by_shards(pool, reader, entries, cshape, target, chunks.sharding, off))
            continue
        host = _as_is(reader, entries, cshape, target, (off, off + size)) if chunks.sharding is not None else None
        if host is None:
            host = _read_region(pool, reader, entries, cshape, target, _bounds((), cshape), off)
        out.append(host if chunks.sharding is None else jax.device_put(host, chunks.sharding))
    return tuple(out)


def _target_dtype(reader: Any, entries, spec: ParamSpec, dtype: np.dtype) -> np.dtype:
    first = reader.dtype(entries[0][0]) if hasattr(reader, "dtype") else reader.get(entries[0][0]).dtype
    floating = np.issubdtype(first, np.floating) or first.kind == "V"
    return spec.dtype(dtype) if floating else first


def aligned_empty(shape: tuple[int, ...], dtype: Any, alignment: int = 64) -> np.ndarray:
    """An uninitialised host array whose data starts on an ``alignment``-byte boundary.

    The CPU backend's ``device_put`` adopts a 64-byte-aligned host buffer instead of copying
    it (NumPy's own large allocations start 16 bytes past a page), so on CPU a converted
    parameter becomes the device array with no second copy.

    Buffers of :data:`_MAPPED_BYTES` or more are anonymous memory mappings (page aligned)
    marked ``MADV_NOHUGEPAGE``, not ``np.empty``: NumPy marks its large allocations
    ``MADV_HUGEPAGE``, and under the kernel's usual transparent-huge-page defrag mode
    (``madvise``) the first touch of each huge page may compact memory synchronously. Loading
    the 5.7 GB Wan2.1 1.3B transformer on this project's 2-core VM: 2.8-3.2 s with NumPy's
    buffers, 2.1-2.3 s without huge pages (docs/benchmarks.md, "Checkpoint loading").
    """
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes >= _MAPPED_BYTES and mmap.PAGESIZE % alignment == 0:
        buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        if hasattr(mmap, "MADV_NOHUGEPAGE"):
            buf.madvise(mmap.MADV_NOHUGEPAGE)
        return np.frombuffer(buf, dtype=dtype).reshape(shape)
    raw = np.empty(nbytes + alignment, np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start : start + nbytes].view(dtype).reshape(shape)


_MAPPED_BYTES = 1 << 20


def adoptable(src: Any, dtype: np.dtype, alignment: int = 64) -> bool:
    """Whether checkpoint tensor ``src`` can become a parameter as it is, with no copy.

    True for a read-only view of a memory-mapped file (a safetensors reader's tensors) that is
    already in ``dtype``, C-contiguous and ``alignment``-byte aligned: a tensor of a checkpoint
    written by ``vidax convert`` (our layout and dtype policy; :mod:`vidax.checkpoint.writer` aligns
    its data section) loaded at the dtype it was written in. ``jax.device_put`` on the CPU backend
    then adopts the mapped pages as the device buffer (they are read from the page cache when first
    used, as PyTorch's memory-mapped safetensors tensors are); on accelerators it transfers from the
    mapping without a host copy first.
    """
    return (isinstance(src, np.ndarray) and _file_mapping(src) is not None and src.dtype == dtype
            and src.flags.c_contiguous and src.ctypes.data % alignment == 0)


def _as_is(reader, entries, shape, target, layers: tuple[int, int] | None = None) -> np.ndarray | None:
    """The mapped checkpoint tensor itself (layers ``lo:hi`` of it), if it needs no conversion (:func:`adoptable`)."""
    if len(entries) != 1 or entries[0][1] != "none" or entries[0][2] is not None:
        return None
    key = entries[0][0]
    src = reader.get(key)
    if layers is not None:
        if layers[1] > src.shape[0]:
            return None
        src = src[layers[0] : layers[1]]
    return src if tuple(src.shape) == tuple(shape) and adoptable(src, target) else None


def _host_param(pool, reader, entries, shape, target, adopt: bool = False) -> np.ndarray:
    if adopt and (view := _as_is(reader, entries, shape, target)) is not None:
        return view
    host = aligned_empty(shape, target)
    convert_all(pool, [(reader.get(key), layout, host if index is None else host[index]) for key, layout, index in entries])
    return host


def iter_host_params(reader: Any, keymap: KeyMap, specs: SpecTree, dtype: Any = np.float32, *,
                     source: str = "checkpoint", workers: int | None = None, order: list[str] | None = None):
    """Yield ``(param_path, host array)`` one finished parameter at a time, in spec-tree order (or ``order``).

    The streaming form of ``load_params(..., place=False)`` for writers that must not hold the
    whole tree in memory (``vidax convert``). Checks the whole checkpoint first, like
    :func:`load_params`.

    Raises:
      CheckpointError: see :func:`plan_load`.
      KeyError: a path in ``order`` that is not a parameter.
    """
    plan = plan_load(reader, keymap, specs, source=source)
    dtype = np.dtype(dtype)
    flat = dict(flatten(specs))
    with ThreadPoolExecutor(workers or min(8, os.cpu_count() or 1)) as pool:
        for path in (order if order is not None else list(flat)):
            spec, entries = flat[path], plan[path]
            yield path, _host_param(pool, reader, entries, spec.shape, _target_dtype(reader, entries, spec, dtype))


def _streams_layers(sharding) -> bool:
    """Whether stacked parameters are filled on the device layer by layer.

    On accelerators, yes: host memory stays at one layer. On the CPU backend the
    device memory *is* host memory and in-place updates copy the whole buffer, so
    the stack is assembled on the host and transferred once. Shardings other than
    ``NamedSharding`` / ``SingleDeviceSharding`` (whose per-layer sharding we cannot
    derive), and a sharded leading ``layers`` axis, also take the host path.
    """
    if sharding is not None and not isinstance(sharding, (NamedSharding, SingleDeviceSharding)):
        return False
    if isinstance(sharding, NamedSharding) and tuple(sharding.spec)[:1] not in ((), (None,)):
        return False
    devices = sharding.device_set if sharding is not None else {jax.devices()[0]}
    return all(d.platform != "cpu" for d in devices)


def _place_stacked(pool, reader, entries, shape, target, sharding) -> jax.Array:
    """Allocate a stacked parameter once, already sharded, and fill it layer by layer in place.

    Each layer is transferred with the stacked sharding minus its leading ``layers`` entry, so
    every device receives only its own shard of each layer.
    """
    buf = jnp.zeros(shape, target, device=sharding)
    setter = _layer_setter(sharding)
    layer_sharding = _layer_sharding(sharding)
    for key, layout, index in entries:
        # A fresh host buffer per layer: the previous transfer may still be reading the last one.
        layer = aligned_empty(shape[1:], target)
        convert_into(pool, reader.get(key), layout, layer)
        buf = setter(buf, jax.device_put(layer, layer_sharding), np.int32(index))
    return buf


def _layer_sharding(sharding):
    """The sharding of one layer of a stacked parameter: the stacked sharding without its leading axis.

    ``NamedSharding(mesh, P(None, None, "tensor"))`` -> ``NamedSharding(mesh, P(None, "tensor"))``;
    a single-device sharding is its own layer sharding; None stays None (default device).
    (:func:`_streams_layers` sends stacks whose ``layers`` axis is itself sharded to the host path.)
    """
    if sharding is None or isinstance(sharding, SingleDeviceSharding):
        return sharding
    return NamedSharding(sharding.mesh, PartitionSpec(*tuple(sharding.spec)[1:]), memory_kind=sharding.memory_kind)


class DictReader:
    """A reader over an in-memory ``{name: np.ndarray}`` state dict (tests, converters)."""

    def __init__(self, tensors: dict[str, np.ndarray]):
        self._t = tensors

    def keys(self):
        return list(self._t)

    def shape(self, key):
        return tuple(self._t[key].shape)

    def dtype(self, key):
        return self._t[key].dtype

    def get(self, key):
        return self._t[key]
