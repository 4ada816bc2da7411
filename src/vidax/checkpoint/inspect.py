"""Checkpoint inspection: what a file or folder holds, without loading any tensor data.

Used by ``vidax inspect``. Everything here reads headers only (safetensors headers, the
pickle of a torch zip), so inspecting a 30 GB checkpoint takes milliseconds.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vidax.checkpoint.keymap import KeyMap

_INDEX = re.compile(r"(?<=[./])\d+(?=[./]|$)")


@dataclass
class TensorSummary:
    """Counts of one checkpoint's tensors.

    Attributes:
      tensors: number of tensors.
      parameters: total elements.
      bytes: total bytes as stored.
      dtypes: ``{dtype name: tensor count}``.
      groups: ``{name pattern with block indices as N: (count, {shapes}, {dtypes})}``.
    """

    tensors: int = 0
    parameters: int = 0
    bytes: int = 0
    dtypes: Counter = field(default_factory=Counter)
    groups: dict = field(default_factory=dict)


def summarize(reader: Any) -> TensorSummary:
    """Summarise a reader's tensors (``keys()``, ``shape(k)``, ``dtype(k)``), reading no data."""
    s = TensorSummary()
    groups: dict[str, list] = defaultdict(lambda: [0, set(), set()])
    for k in reader.keys():
        shape, dtype = tuple(reader.shape(k)), np.dtype(reader.dtype(k))
        n = int(np.prod(shape, dtype=np.int64))
        s.tensors += 1
        s.parameters += n
        s.bytes += n * dtype.itemsize
        s.dtypes[dtype.name] += 1
        g = groups[_INDEX.sub("N", k)]
        g[0] += 1
        g[1].add(shape)
        g[2].add(dtype.name)
    s.groups = {k: (v[0], v[1], v[2]) for k, v in groups.items()}
    return s


def unknown_keys(reader: Any, keymap: KeyMap) -> list[str]:
    """Checkpoint keys the key map neither maps nor deliberately ignores."""
    return [k for k in reader.keys() if keymap.match(k) is None and not keymap.ignored(k)]


def best_keymap(reader: Any, candidates: dict[str, KeyMap]) -> tuple[str | None, float]:
    """The candidate key map that maps the largest share of the reader's keys, and that share."""
    keys = list(reader.keys())
    best, share = None, 0.0
    for name, km in candidates.items():
        hit = sum(1 for k in keys if km.match(k) is not None or km.ignored(k)) / max(1, len(keys))
        if hit > share:
            best, share = name, hit
    return best, share


def scientific(n: int, digits: int = 3) -> str:
    """``n`` to ``digits`` significant digits as ``1.42e9`` (no ``+``, no leading zeros in the exponent)."""
    if n == 0:
        return "0"
    mantissa, exponent = f"{n:.{digits - 1}e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def format_summary(s: TensorSummary, *, max_groups: int = 40) -> list[str]:
    """Human-readable lines for a :class:`TensorSummary`."""
    lines = [
        f"tensors: {s.tensors}, {scientific(s.parameters)} parameters ({s.parameters:,}), "
        f"bytes: {s.bytes / 2**30:.3f} GiB",
        "dtypes: " + ", ".join(f"{d} x{n}" for d, n in s.dtypes.most_common()),
    ]
    items = sorted(s.groups.items())
    for name, (count, shapes, dtypes) in items[:max_groups]:
        shape_txt = ", ".join(str(sh) for sh in sorted(shapes))
        lines.append(f"  {name}  {shape_txt}  {'/'.join(sorted(dtypes))}" + (f"  x{count}" if count > 1 else ""))
    if len(items) > max_groups:
        lines.append(f"  ... {len(items) - max_groups} more name patterns")
    return lines


def component_lines(name: str, reader: Any, keymap: KeyMap, specs, source: str) -> list[str]:
    """Report lines for one component of a resolved checkpoint: its tensors, unknown keys, and whether the
    key map fills the model's spec tree exactly (the loader's own check, run on headers only)."""
    from vidax.checkpoint.errors import CheckpointError
    from vidax.checkpoint.loader import plan_load

    lines = [f"{name}: {source}"]
    lines += ["  " + line for line in format_summary(summarize(reader))]
    unknown = unknown_keys(reader, keymap)
    lines.append(f"  keys our map does not know: {len(unknown)}")
    lines += [f"    {k}" for k in unknown[:20]] + ([f"    ... {len(unknown) - 20} more"] if len(unknown) > 20 else [])
    try:
        plan_load(reader, keymap, specs, source=source)
        lines.append("  matches its configuration: every parameter filled exactly once")
    except CheckpointError as e:
        lines.append(f"  {MISMATCH}:")
        lines += ["  " + line for line in str(e).splitlines()]
    return lines


#: The report line of a component that the loader would refuse (``vidax inspect`` then exits non-zero).
MISMATCH = "does not match its configuration"


def checked(name: str, make) -> list[str]:
    """Report lines of one component (``make()``), or, when reading it fails (a bad config value, a tokenizer or
    scheduler configuration the pipeline refuses, an unreadable file), one :data:`MISMATCH` line with the reason:
    ``vidax inspect`` then exits 1, as loading would fail."""
    try:
        return make()
    except (ValueError, OSError, KeyError, TypeError, RecursionError) as e:
        return [f"{name}: {MISMATCH}: {e}"]


def tokenizer_lines(folder) -> list[str]:
    """The tokenizer's report line (it is loaded: a corrupt ``tokenizer.json`` is reported)."""
    from vidax.encoders.tokenizer import Tokenizer

    return checked("tokenizer", lambda: [f"tokenizer: {folder} ({Tokenizer.from_folder(folder).vocab_size} tokens)"])


def scheduler_lines(config: dict | None, source, default: str = "") -> list[str]:
    """The scheduler's report line (its configuration is built as the pipelines build it)."""
    from vidax.schedulers import scheduler_from_config

    if config is None:
        return [f"scheduler: {default}"]

    def make():
        try:
            sched = scheduler_from_config(config)
        except ValueError as e:
            raise ValueError(f"{source}: {e}") from None
        return [f"scheduler: {source} ({type(sched).__name__})"]

    return checked("scheduler", make)
