"""Key maps: checkpoint tensor names -> parameter paths, as data.

A :class:`KeyMap` is a list of :class:`Rule` s. Each rule names one checkpoint
key (``{i}`` stands for a block index), the parameter path it fills
(``/``-separated, matching the model's spec tree), and the layout change it
needs. The layout changes, documented once here:

``"linear"``
    PyTorch ``nn.Linear.weight`` is ``(out, in)``; our kernels are ``(in, out)``
    so that ``x @ kernel`` needs no transpose: ``w.T``.
``"conv3d"``
    PyTorch ``nn.Conv3d.weight`` is ``(out, in, kt, kh, kw)``; ours is
    channels-last ``(kt, kh, kw, in, out)`` (``lax.conv`` with ``NDHWC``/``DHWIO``).
``"conv2d"``
    ``(out, in, kh, kw)`` -> ``(kh, kw, in, out)``.
``"none"``
    Taken as stored.

A rule whose key holds ``{i}`` fills slice ``i`` of a stacked parameter (leading
``layers`` axis). Loading with :func:`vidax.checkpoint.loader.load_params` is
strict: every parameter slot is filled exactly once, and every checkpoint key
is used or explicitly ignored.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

# layout -> (checkpoint -> ours, shape checkpoint -> ours (None if the rank is wrong), ours -> checkpoint)
_LAYOUTS: dict[str, tuple[Callable, Callable, Callable]] = {
    "none": (lambda w: w, lambda s: s, lambda w: w),
    "linear": (lambda w: w.T, lambda s: s[::-1] if len(s) == 2 else None, lambda w: w.T),
    "conv3d": (
        lambda w: w.transpose(2, 3, 4, 1, 0),
        lambda s: (s[2], s[3], s[4], s[1], s[0]) if len(s) == 5 else None,
        lambda w: w.transpose(4, 3, 0, 1, 2),
    ),
    "conv2d": (
        lambda w: w.transpose(2, 3, 1, 0),
        lambda s: (s[2], s[3], s[1], s[0]) if len(s) == 4 else None,
        lambda w: w.transpose(3, 2, 0, 1),
    ),
}


# layout -> axis permutation p with ``ours = checkpoint.transpose(p)`` (None: unchanged). Our axis k
# is checkpoint axis p[k]; this is what maps an index of our array back into the checkpoint tensor.
_PERMS: dict[str, tuple[int, ...] | None] = {
    "none": None,
    "linear": (1, 0),
    "conv3d": (2, 3, 4, 1, 0),
    "conv2d": (2, 3, 1, 0),
}


def checkpoint_index(layout: str, index: tuple[slice, ...]) -> tuple[slice, ...]:
    """Map an index of our array (after ``layout``) to the index of the checkpoint tensor holding it.

    Our axis ``k`` is checkpoint axis ``p[k]`` (``ours = checkpoint.transpose(p)``), so
    ``to_layout(layout, ckpt)[index] == to_layout(layout, ckpt[checkpoint_index(layout, index)])``.
    Example: a column slice of a transposed linear kernel, ``(slice(None), slice(0, 8))`` on our
    ``(in, out)``, is the row slice ``(slice(0, 8), slice(None))`` of the checkpoint's ``(out, in)``.

    Args:
      layout: a layout name (see the module docstring).
      index: one slice (or int) per axis of our array; a shorter tuple is padded with ``slice(None)``
        only for ``"none"`` (the permuted layouts need the full rank).

    Raises:
      ValueError: a permuted layout and an index of the wrong rank.
    """
    perm = _PERMS[layout]
    index = tuple(index)
    if perm is None:
        return index
    if len(index) != len(perm):
        raise ValueError(f"layout {layout!r} needs an index of rank {len(perm)}, got {index!r}")
    out: list = [slice(None)] * len(perm)
    for k, p in enumerate(perm):
        out[p] = index[k]
    return tuple(out)


def to_layout(layout: str, array: np.ndarray) -> np.ndarray:
    """Apply a layout change to a checkpoint array (a view where possible, no copy)."""
    return _LAYOUTS[layout][0](array)


def from_layout(layout: str, array: np.ndarray) -> np.ndarray:
    """Inverse of :func:`to_layout`: our layout back to the checkpoint's."""
    return _LAYOUTS[layout][2](array)


def layout_shape(layout: str, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The shape a checkpoint tensor of ``shape`` has after ``layout``; ``None`` if the rank is wrong."""
    return _LAYOUTS[layout][1](tuple(shape))


@dataclass(frozen=True)
class Rule:
    """One checkpoint key (``{i}``: block index) -> one parameter path, with its layout change."""

    key: str
    path: str
    layout: str = "none"

    def __post_init__(self):
        if self.layout not in _LAYOUTS:
            raise ValueError(f"unknown layout {self.layout!r}; known: {sorted(_LAYOUTS)}")


@dataclass
class KeyMap:
    """A checkpoint layout's key map.

    Attributes:
      rules: the rules, one per checkpoint key (template).
      ignore: regular expressions of checkpoint keys that are known and deliberately
        unused (e.g. buffers the reference saves but recomputes).
    """

    rules: list[Rule]
    ignore: list[str] = field(default_factory=list)

    def __post_init__(self):
        self._exact: dict[str, Rule] = {}
        self._templated: list[tuple[re.Pattern, Rule]] = []
        for r in self.rules:
            if "{i}" in r.key:
                pat = re.escape(r.key).replace(re.escape("{i}"), r"(\d+)")
                self._templated.append((re.compile(pat + r"\Z"), r))
            else:
                if r.key in self._exact:
                    raise ValueError(f"key map has two rules for {r.key!r}")
                self._exact[r.key] = r
        self._ignore = [re.compile(p) for p in self.ignore]

    def match(self, key: str) -> tuple[Rule, int | None] | None:
        """The rule for checkpoint ``key`` and its block index (``None`` if unstacked), or ``None``."""
        rule = self._exact.get(key)
        if rule is not None:
            return rule, None
        for pat, rule in self._templated:
            m = pat.match(key)
            if m:
                return rule, int(m.group(1))
        return None

    def ignored(self, key: str) -> bool:
        return any(p.match(key) for p in self._ignore)

    def __add__(self, other: KeyMap) -> KeyMap:
        return KeyMap(self.rules + other.rules, self.ignore + other.ignore)


def linear(key: str, path: str, bias: bool = True) -> list[Rule]:
    """Rules for a PyTorch ``nn.Linear`` at ``key`` -> ``{path}/kernel`` (+ ``{path}/bias``)."""
    rules = [Rule(f"{key}.weight", f"{path}/kernel", "linear")]
    if bias:
        rules.append(Rule(f"{key}.bias", f"{path}/bias"))
    return rules


def conv(key: str, path: str, dims: int = 3, bias: bool = True) -> list[Rule]:
    """Rules for a PyTorch ``nn.Conv{2,3}d`` at ``key`` -> ``{path}/kernel`` (+ ``{path}/bias``)."""
    rules = [Rule(f"{key}.weight", f"{path}/kernel", f"conv{dims}d")]
    if bias:
        rules.append(Rule(f"{key}.bias", f"{path}/bias"))
    return rules


def norm(key: str, path: str, bias: bool = True, weight_name: str = "weight") -> list[Rule]:
    """Rules for a normalisation layer: ``{key}.weight`` -> ``{path}/scale`` (+ bias)."""
    rules = [Rule(f"{key}.{weight_name}", f"{path}/scale")]
    if bias:
        rules.append(Rule(f"{key}.bias", f"{path}/bias"))
    return rules


def rules(*groups: Iterable[Rule] | Rule) -> list[Rule]:
    """Flatten rule groups into one list."""
    out: list[Rule] = []
    for g in groups:
        if isinstance(g, Rule):
            out.append(g)
        else:
            out.extend(g)
    return out


def identity_keymap(specs: dict) -> KeyMap:
    """The key map of a checkpoint saved in our own layout (``vidax convert``).

    Tensor names are our parameter paths (``blocks/attn1/to_q/kernel``), stacked parameters
    are stored whole, already in our layout: every rule is ``Rule(path, path, "none")``.
    """
    from vidax.core.params import flatten

    return KeyMap([Rule(path, path) for path, _ in flatten(specs)])
