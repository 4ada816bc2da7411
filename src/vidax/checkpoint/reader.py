"""One reader over all tensors of a model component: safetensors or PyTorch zip files, single or sharded.

:class:`CheckpointReader` hides which files hold which tensor; the loader
(:func:`vidax.checkpoint.loader.load_params`) only sees ``keys()``,
``shape(key)``, ``dtype(key)`` and ``get(key)``. Every file is memory-mapped
(:class:`~vidax.checkpoint.safetensors_io.SafetensorsFile`,
:class:`~vidax.checkpoint.torch_pickle.TorchCheckpointFile`), so opening a
checkpoint reads only headers and ``get`` returns views, never copies.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

import numpy as np

from vidax.checkpoint.errors import CheckpointError, excerpt, name_excerpt
from vidax.checkpoint.safetensors_io import SafetensorsFile, parse_json
from vidax.checkpoint.torch_pickle import TorchCheckpointFile, is_torch_zip

TensorFile = Union[SafetensorsFile, TorchCheckpointFile]

#: File suffixes read as PyTorch zip checkpoints.
TORCH_SUFFIXES = (".bin", ".pth", ".pt")

# In a folder of several PyTorch files without an index, these are the weights (diffusers,
# transformers); the rest (training_args.bin, optimizer.pt, ...) are training state.
_TORCH_WEIGHT_NAMES = ("diffusion_pytorch_model.bin", "pytorch_model.bin", "model.bin", "model.pth", "model.pt")

#: Largest index file read. An index lists ~100 bytes per tensor: the 14B Wan transformer's is
#: ~110 KB, and 64 MiB holds ~650,000 tensors (the largest sharded models on the Hub have ~100,000).
MAX_INDEX_BYTES = 64 * 2**20


def open_tensor_file(path: str | os.PathLike) -> TensorFile:
    """Open one weights file by its suffix (``.safetensors``; ``.bin``/``.pth``/``.pt``).

    Any other suffix is read as a PyTorch zip if it starts with a zip signature,
    else as safetensors.

    Raises:
      CheckpointError: see the two file classes.
    """
    path = Path(path)
    if path.suffix == ".safetensors":
        return SafetensorsFile(path)
    if path.suffix in TORCH_SUFFIXES or (path.is_file() and is_torch_zip(path)):
        return TorchCheckpointFile(path)
    return SafetensorsFile(path)


class CheckpointReader:
    """All tensors of one model component, from one file or one folder.

    Accepts:

    * a single file: ``*.safetensors``, or a PyTorch zip checkpoint
      (``*.pth`` / ``*.pt`` / ``*.bin``, ``torch.save`` format since 1.6);
    * a folder, first match wins:

      1. a ``*.safetensors.index.json`` naming the shard of every tensor (the
         layout ``save_pretrained`` writes in diffusers and transformers);
      2. every ``*.safetensors`` file in it;
      3. a PyTorch index (``pytorch_model.bin.index.json`` or any
         ``*.bin.index.json`` / ``*.pth.index.json`` / ``*.pt.index.json``);
      4. PyTorch files: ``diffusion_pytorch_model.bin`` / ``pytorch_model.bin``
         / ``model.{bin,pth,pt}`` if present, else the only ``*.bin`` / ``*.pth``
         / ``*.pt`` file.

    Keys of PyTorch files are their state-dict keys after
    :func:`~vidax.checkpoint.torch_pickle.flatten_state_dict` (wrappers such as
    ``{"model": {"state_dict": ...}}`` unwrapped). Tensors come back in their
    stored dtype and shape as read-only memory-mapped NumPy views.

    Raises:
      CheckpointError: no weights in the folder, a shard named in the index is
        missing or lacks a tensor the index places in it, a tensor appears in
        two files, several PyTorch files and no index to choose between them,
        or any file is corrupt / unsafe (see the file classes).
    """

    def __init__(self, path: str | os.PathLike):
        path = Path(path)
        self.path = path
        self._where: dict[str, TensorFile] = {}
        if path.is_file():
            files = [open_tensor_file(path)]
        elif path.is_dir():
            files = self._from_folder(path)
        else:
            raise CheckpointError(f"{path}: checkpoint folder or file not found")
        self._index(files)

    @classmethod
    def from_files(cls, paths: Sequence[str | os.PathLike]) -> "CheckpointReader":
        """The tensors of an explicit list of weight files (each read as :func:`open_tensor_file` reads it) as one
        reader; ``path`` is the first file's folder.

        Raises:
          CheckpointError: an empty list, a tensor in two files, or a corrupt / unsafe file.
        """
        if not paths:
            raise CheckpointError("an empty list of weight files")
        self = cls.__new__(cls)
        self.path = Path(paths[0]).parent
        self._where = {}
        self._index([open_tensor_file(p) for p in paths])
        return self

    def _index(self, files: list[TensorFile]) -> None:
        for f in files:
            for k in f.keys():
                if k in self._where and self._where[k] is not f:
                    raise CheckpointError(f"tensor {excerpt(k)} appears in both {self._where[k].path} and {f.path}")
                self._where[k] = f
        self.files = files

    def _from_folder(self, path: Path) -> list[TensorFile]:
        indexes = sorted(path.glob("*.safetensors.index.json"))
        if indexes:
            return self._from_index(indexes[0], SafetensorsFile)
        found = sorted(path.glob("*.safetensors"))
        if found:
            return [SafetensorsFile(p) for p in found]
        torch_indexes = sorted(p for s in TORCH_SUFFIXES for p in path.glob(f"*{s}.index.json"))
        if torch_indexes:
            preferred = [p for p in torch_indexes if p.name.startswith(_TORCH_WEIGHT_NAMES)]
            return self._from_index((preferred or torch_indexes)[0], TorchCheckpointFile)
        torch_files = sorted(p for s in TORCH_SUFFIXES for p in path.glob(f"*{s}") if p.is_file())
        if not torch_files:
            raise CheckpointError(
                f"{path}: no *.safetensors weights in this folder (nor PyTorch *.bin / *.pth / *.pt weights)"
            )
        for name in _TORCH_WEIGHT_NAMES:
            if (path / name).is_file():
                return [TorchCheckpointFile(path / name)]
        if len(torch_files) == 1:
            return [TorchCheckpointFile(torch_files[0])]
        more = f" (and {len(torch_files) - 8} more)" if len(torch_files) > 8 else ""
        raise CheckpointError(
            f"{path}: several PyTorch files {[p.name for p in torch_files[:8]]}{more} and no *.bin.index.json saying "
            "which hold the weights; pass the weights file itself, or convert the weights to safetensors"
        )

    def _from_index(self, index_path: Path, open_file: Callable[[Path], TensorFile]) -> list[TensorFile]:
        weight_map = read_weight_map(index_path)
        folder = index_path.parent
        by_name: dict[str, TensorFile] = {}
        by_file: dict[tuple[int, int], TensorFile] = {}  # (device, inode): one reader per file, however spelled
        for name in sorted(set(weight_map.values())):
            shard_path = folder / shard_name(index_path, name)
            try:
                st = shard_path.stat() if shard_path.is_file() else None
            except OSError as e:  # a name too long for the file system, a loop of links
                raise CheckpointError(f"{index_path}: cannot open shard {name_excerpt(name)} ({e.strerror})") from None
            if st is None:
                raise CheckpointError(f"{shard_path}: shard named in {index_path.name} is missing; re-download it")
            inode = (st.st_dev, st.st_ino)
            if inode not in by_file:
                by_file[inode] = open_file(shard_path)
            by_name[name] = by_file[inode]
        held = {id(f): set(f.keys()) for f in by_file.values()}
        for key, name in weight_map.items():
            if key not in held[id(by_name[name])]:
                raise CheckpointError(
                    f"{by_name[name].path}: index {index_path.name} says it holds {excerpt(key)}, but it does not"
                )
        return list(by_file.values())

    def keys(self) -> list[str]:
        return list(self._where)

    def __contains__(self, key: str) -> bool:
        return key in self._where

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def shape(self, key: str) -> tuple[int, ...]:
        return self._where[key].shape(key)

    def dtype(self, key: str) -> np.dtype:
        return self._where[key].dtype(key)

    def get(self, key: str) -> np.ndarray:
        """The tensor ``key`` as a read-only memory-mapped NumPy array (no copy)."""
        return self._where[key].get(key)


def read_weight_map(index_path: Path) -> dict[str, str]:
    """The ``weight_map`` of a sharded checkpoint's index (``*.safetensors.index.json``, ``*.bin.index.json``).

    Returns:
      ``{tensor name: shard file name}`` as written (see :func:`shard_name` for the names' check).

    Raises:
      CheckpointError: naming the index: larger than :data:`MAX_INDEX_BYTES`, not UTF-8 JSON, not an
        object, or a ``weight_map`` that is not an object of strings.
    """
    try:
        with open(index_path, "rb") as f:
            raw = f.read(MAX_INDEX_BYTES + 1)
    except OSError as e:
        raise CheckpointError(f"{index_path}: cannot read the index file ({e.strerror})") from None
    if len(raw) > MAX_INDEX_BYTES:
        raise CheckpointError(
            f"{index_path}: index file larger than {MAX_INDEX_BYTES} bytes; it is not a checkpoint index"
        )
    index = parse_json(raw, f"{index_path}: corrupt index file", "re-download it")
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        what = "no JSON object" if not isinstance(index, dict) else f"a weight_map of {excerpt(weight_map)}"
        raise CheckpointError(
            f"{index_path}: corrupt index file ({what}; expected {{\"weight_map\": {{tensor name: shard file}}}}); "
            "re-download it"
        )
    for key, name in weight_map.items():
        if type(name) is not str:
            raise CheckpointError(
                f"{index_path}: corrupt index file (weight_map maps {excerpt(key)} to {excerpt(name)}, "
                "not a file name); re-download it"
            )
    return weight_map


def shard_name(index_path: Path, name: str) -> str:
    """``name`` (a shard in ``index_path``'s ``weight_map``) as a path relative to the index's folder.

    The name is checked as written, not resolved: it must be relative and have no ``..`` component
    (nor a NUL byte), so it names an entry of the folder. A symbolic link inside the folder is
    followed wherever it points: the Hugging Face cache keeps every shard as a link from
    ``snapshots/<revision>/`` into ``blobs/``, outside the folder, so checking link targets would
    refuse every cached checkpoint. A link is also in plain sight (``ls -l``), where a name inside
    a JSON index is not; a downloaded archive that unpacks links to elsewhere is the unpacking
    tool's to refuse. ``..`` is refused outright rather than normalised away, because ``sub/../x``
    with ``sub`` a link is resolved by the system from the link's target, not from the folder, so
    no lexical rule allows it safely; no real index needs it.

    Returns:
      The normalised relative name (``./a`` and ``a`` are one shard).

    Raises:
      CheckpointError: naming the index and the shard, for an empty or absolute name, a ``..``
        component, or a NUL byte.
    """
    parts = name.split("/")
    if not name or name.startswith("/") or ".." in parts or "\0" in name:
        raise CheckpointError(
            f"{index_path}: shard {excerpt(name)} is not a file inside the checkpoint folder (empty, absolute, or "
            "reaching out through '..'); refusing to read it. Shards are named relative to the index's folder"
        )
    return os.path.normpath(name)


class CountingReader:
    """A reader wrapper that counts the checkpoint bytes the loader asks for.

    Wraps any reader (``keys()``, ``shape()``, ``dtype()``, ``get()``). ``get(key)`` counts the
    whole tensor; ``get_slice(key, index)`` (which :func:`vidax.checkpoint.loader.load_params`
    uses when it reads shard by shard, e.g. on several hosts) counts only the bytes of the slice.
    The counts are logical bytes in the stored dtype: what a memory map is asked for, which the
    operating system rounds up to whole pages (for a column slice of a row-major tensor the
    touched pages can span the whole tensor when its rows are shorter than a page).

    Attributes:
      bytes_read: total bytes handed out since construction (int).
      per_key: ``{key: bytes}`` for every key read.
      reader: the wrapped reader.

    Thread safety: the loader reads from a thread pool; the counters are updated under a lock.
    """

    def __init__(self, reader):
        import threading

        self.reader = reader
        self.bytes_read = 0
        self.per_key: dict[str, int] = {}
        self._lock = threading.Lock()

    def _count(self, key: str, n: int) -> None:
        with self._lock:
            self.bytes_read += int(n)
            self.per_key[key] = self.per_key.get(key, 0) + int(n)

    def keys(self):
        return self.reader.keys()

    def __contains__(self, key: str) -> bool:
        return key in self.reader.keys()

    def shape(self, key: str) -> tuple[int, ...]:
        return tuple(self.reader.shape(key))

    def dtype(self, key: str) -> np.dtype:
        return self.reader.dtype(key) if hasattr(self.reader, "dtype") else self.reader.get(key).dtype

    def get(self, key: str) -> np.ndarray:
        """The whole tensor ``key`` (counted whole)."""
        a = self.reader.get(key)
        self._count(key, a.nbytes)
        return a

    def get_slice(self, key: str, index: tuple) -> np.ndarray:
        """``get(key)[index]`` counting only the slice's bytes (a view of the memory map: nothing
        outside the slice is touched until the caller reads it)."""
        inner = getattr(self.reader, "get_slice", None)
        a = inner(key, index) if inner is not None else self.reader.get(key)[index]
        self._count(key, a.nbytes)
        return a


@dataclass(frozen=True)
class Split:
    """How one fused checkpoint tensor divides into named parts along one axis (:class:`TensorViews`).

    Attributes:
      names: the parts, in the order they are stored.
      sizes: each part's length along ``axis``; None: equal parts.
      axis: the axis of the checkpoint tensor (as stored, before any layout change) that is divided: 0 for a
        ``Linear``'s output features (fused q/k/v), 1 for its input features (an output projection over
        concatenated inputs).
    """

    names: tuple[str, ...]
    sizes: tuple[int, ...] | None = None
    axis: int = 0

    def __post_init__(self):
        object.__setattr__(self, "names", tuple(self.names))
        if self.sizes is not None:
            object.__setattr__(self, "sizes", tuple(int(n) for n in self.sizes))
            if len(self.sizes) != len(self.names) or any(n < 1 for n in self.sizes):
                raise ValueError(f"Split {self.names}: sizes {self.sizes} must be one positive size per part")

    def bounds(self, key: str, shape: tuple[int, ...]) -> list[tuple[int, int]]:
        """``(start, stop)`` of each part along :attr:`axis` in a tensor of ``shape``.

        Raises:
          CheckpointError: the tensor has no such axis, or it does not divide into these parts (named).
        """
        length = shape[self.axis] if len(shape) > self.axis else None
        sizes = self.sizes
        if sizes is None and length is not None and length % len(self.names) == 0:
            sizes = (length // len(self.names),) * len(self.names)
        if length is None or sizes is None or sum(sizes) != length:
            want = "equal parts" if self.sizes is None else f"parts of sizes {list(self.sizes)}"
            raise CheckpointError(f"{name_excerpt(key)}: shape {tuple(shape)} cannot be split into {len(self.names)} "
                                  f"{want} {list(self.names)} along axis {self.axis}")
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        return [(a, a + n) for a, n in zip(starts, sizes)]


@dataclass(frozen=True)
class TensorViews:
    """Checkpoint tensors read as other tensors: fused ones split, leading size-1 axes dropped.

    Some layouts store what the model declares as several parameters in one tensor (the original
    Wan CLIP's fused ``attn.to_qkv``; HunyuanVideo's fused q/k/v/MLP ``linear1`` and its output
    projection over attention and MLP features), or with broadcast axes (the CLIP's ``cls_embedding``
    of shape ``(1, 1, D)``). A key map rule maps one tensor to one parameter, so such a layout declares
    its views here and reads through :meth:`reader`; the views are NumPy views of the memory map, no copy.

    * ``split``: ``{regex: part_names | Split}``. A matching key ``K`` is replaced by ``K[part]`` for each
      part. With a tuple of names, ``K`` of shape ``(n * m, ...)`` gives part ``i`` the ``m`` consecutive
      rows ``[i * m, (i + 1) * m)`` (PyTorch's ``Linear(d, 3d)`` output features, ordered q, k, v, for
      ``("q", "k", "v")``); a :class:`Split` gives parts of other sizes or along another axis.
      Error messages then name ``...to_qkv.weight[k]``, which points at the real tensor.
    * ``squeeze``: regexes of keys whose leading size-1 axes are dropped (``(1, 1, D)`` -> ``(D,)``).

    :meth:`merge` is the inverse, for writers: parts concatenated back, and the leading axes restored
    from ``shapes``.
    """

    split: dict[str, tuple[str, ...] | Split] = field(default_factory=dict)
    squeeze: tuple[str, ...] = ()

    def reader(self, reader) -> _ViewReader:
        """``reader`` with these views applied (same ``keys/shape/dtype/get`` interface)."""
        return _ViewReader(reader, self)

    def _split_parts(self, key: str) -> Split | None:
        for pattern, parts in self.split.items():
            if re.fullmatch(pattern, key):
                return parts if isinstance(parts, Split) else Split(tuple(parts))
        return None

    def _squeezed(self, key: str) -> bool:
        return any(re.fullmatch(p, key) for p in self.squeeze)

    def merge(self, tensors: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
        """The inverse of :meth:`reader`: ``{K[part]: a}`` -> ``{K: concat(parts)}``, squeezed tensors reshaped.

        Args:
          tensors: state dict with view keys (e.g. from :func:`vidax.checkpoint.writer.to_state_dict`).
          shapes: ``{key: stored shape}`` of the squeezed keys (their leading axes are not recoverable).
        """
        out: dict[str, np.ndarray] = {}
        pending: dict[str, dict[str, np.ndarray]] = {}
        for key, value in tensors.items():
            m = re.fullmatch(r"(.*)\[([^\]]+)\]", key)
            if m and self._split_parts(m.group(1)) is not None:
                pending.setdefault(m.group(1), {})[m.group(2)] = value
            elif self._squeezed(key):
                out[key] = np.ascontiguousarray(value.reshape(shapes[key]))
            else:
                out[key] = value
        for key, parts in pending.items():
            split = self._split_parts(key)
            out[key] = np.ascontiguousarray(np.concatenate([parts[n] for n in split.names], axis=split.axis))
        return out


class _ViewReader:
    """A reader through :class:`TensorViews` (see there)."""

    def __init__(self, reader, views: TensorViews):
        self.inner = reader
        self.path = getattr(reader, "path", None)
        # view key -> (key, axis, start, stop) of a part; (key, -1, 0, 0): squeezed; (key, None, 0, 0): as stored
        self._map: dict[str, tuple[str, int | None, int, int]] = {}
        for key in reader.keys():
            split = views._split_parts(key)
            if split is not None:
                for name, (lo, hi) in zip(split.names, split.bounds(key, tuple(reader.shape(key)))):
                    self._map[f"{key}[{name}]"] = (key, split.axis, lo, hi)
            elif views._squeezed(key):
                self._map[key] = (key, -1, 0, 0)
            else:
                self._map[key] = (key, None, 0, 0)

    def keys(self) -> list[str]:
        return list(self._map)

    def __contains__(self, key: str) -> bool:
        return key in self._map

    def shape(self, key: str) -> tuple[int, ...]:
        src, axis, lo, hi = self._map[key]
        shape = tuple(self.inner.shape(src))
        if axis is None:
            return shape
        if axis == -1:
            lead = next((j for j, s in enumerate(shape) if s != 1), len(shape) - 1)
            return shape[lead:]
        return (*shape[:axis], hi - lo, *shape[axis + 1 :])

    def dtype(self, key: str) -> np.dtype:
        return self.inner.dtype(self._map[key][0])

    def get(self, key: str) -> np.ndarray:
        src, axis, lo, hi = self._map[key]
        a = self.inner.get(src)
        if axis is None:
            return a
        if axis == -1:
            return a.reshape(self.shape(key))
        return a[(slice(None),) * axis + (slice(lo, hi),)]
