"""Strict, streaming checkpoint translation: files -> host NumPy -> device arrays.

:func:`load_params` checks the whole checkpoint against the model's spec tree
before reading any tensor data, and raises one :class:`CheckpointError`
listing every missing, unexpected and shape-mismatched key. Then, parameter by
parameter, it reads the memory-mapped tensors, applies the layout change and
the dtype policy on the host (fp32 -> bf16 by round-to-nearest-even through
``ml_dtypes``), and places the finished array with a single ``jax.device_put``
(already sharded, when a sharding is given). Host memory beyond the mapped
files stays near the largest single parameter.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.keymap import KeyMap, layout_shape, to_layout
from vidax.core.params import ParamSpec, SpecTree, flatten, unflatten

_MAX_LISTED = 40


def _listing(title: str, items: list[str]) -> str:
    shown = "\n    ".join(items[:_MAX_LISTED])
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
    missing = []
    for path, spec in flat_specs.items():
        keys_for = _expected_keys(keymap, path)
        if spec.axes and spec.axes[0] == "layers" or _is_stacked(keymap, path):
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


def load_params(
    reader: Any,
    keymap: KeyMap,
    specs: SpecTree,
    dtype: Any = np.float32,
    *,
    shardings: Callable[[str, ParamSpec], Any] | None = None,
    source: str = "checkpoint",
    place: bool = True,
) -> dict:
    """Translate a checkpoint into the model's parameter tree.

    Args:
      reader: tensor source (``keys()``, ``shape(key)``, ``get(key) -> np.ndarray``).
      keymap: the checkpoint layout's key map.
      specs: the model's spec tree (shapes in our layout; stacked blocks lead with ``layers``).
      dtype: compute dtype for leaves not pinned to fp32 (``float32`` or ``bfloat16``).
        Integer or bool tensors keep their own dtype.
      shardings: optional ``(path, spec) -> jax.sharding.Sharding``; each array is
        placed with exactly one ``jax.device_put`` onto it.
      source: name of the checkpoint for error messages.
      place: if False, return host NumPy arrays (for conversion tools and tests).

    Returns:
      A nested dict of ``jax.Array`` (or ``np.ndarray`` if ``place=False``), same structure as ``specs``.

    Raises:
      CheckpointError: see :func:`plan_load`.
    """
    plan = plan_load(reader, keymap, specs, source=source)
    dtype = np.dtype(dtype)
    out: dict[str, Any] = {}
    for path, spec in flatten(specs):
        entries = plan[path]
        first = reader.get(entries[0][0])
        target = spec.dtype(dtype) if np.issubdtype(first.dtype, np.floating) or first.dtype.kind == "V" else first.dtype
        if entries[0][2] is None:
            host = cast_on_host(np.ascontiguousarray(to_layout(entries[0][1], first)), target)
        else:
            host = np.empty(spec.shape, dtype=target)
            for key, layout, index in entries:
                # Writing into the preallocated slice casts in place: one pass, no full-size temporary.
                host[index] = to_layout(layout, reader.get(key))
        if place:
            sharding = shardings(path, spec) if shardings is not None else None
            out[path] = jax.device_put(host, sharding) if sharding is not None else jax.device_put(host)
        else:
            out[path] = host
    return unflatten(out)


class DictReader:
    """A reader over an in-memory ``{name: np.ndarray}`` state dict (tests, converters)."""

    def __init__(self, tensors: dict[str, np.ndarray]):
        self._t = tensors

    def keys(self):
        return list(self._t)

    def shape(self, key):
        return tuple(self._t[key].shape)

    def get(self, key):
        return self._t[key]
