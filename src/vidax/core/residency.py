"""Parameters that need not stay resident: freed after use, reloaded from their checkpoint when needed again.

Paper Table 4, fault 2: the T5 / UMT5 text encoders run in float32 (their residual stream reaches
~1e5; bf16 drifts 16-37 %), and at XXL size that is 19-23 GB of weights, next to a DiT on a
30 GB chip. They run once per generation, before the sampling loop, so the pipelines free them after
encoding (:class:`OnDemand` with ``keep=False``) and load them again, from the memory-mapped
checkpoint, only when another prompt needs encoding.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax

#: Residency choices of an :class:`OnDemand` tree, as the pipelines' ``text_encoder_residency`` takes them.
RESIDENCY = ("auto", "resident", "free")


def keep_resident(residency: str) -> bool:
    """Whether a tree stays on the device between uses for a residency choice.

    ``"resident"``: yes; ``"free"``: no; ``"auto"``: yes on the CPU backend (host and device memory are the
    same RAM, and a reload costs a conversion), no on accelerators, where the device memory is the scarce one.

    Raises:
      ValueError: an unknown choice.
    """
    if residency not in RESIDENCY:
        raise ValueError(f"residency must be one of {RESIDENCY}, got {residency!r}")
    if residency == "auto":
        return jax.default_backend() == "cpu"
    return residency == "resident"


def free(tree) -> None:
    """Delete the device buffers of every ``jax.Array`` leaf of ``tree`` now (not at garbage collection), looking
    into dataclass instances too (an encoder record such as HunyuanVideo-1.5's ``MLLMTextEncoder`` holds its weights
    in a field; JAX does not treat it as a pytree node)."""
    for leaf in jax.tree.leaves(tree):
        if isinstance(leaf, jax.Array):
            leaf.delete()
        elif dataclasses.is_dataclass(leaf) and not isinstance(leaf, type):
            free([getattr(leaf, f.name) for f in dataclasses.fields(leaf)])


class OnDemand:
    """A parameter tree that is loaded when needed and, unless kept, freed after each use.

    Args:
      loader: returns the tree placed on its devices (e.g. a ``load_params`` call on the checkpoint).
      params: the tree if already loaded (from ``from_pretrained``, which checks the checkpoint up front).
      keep: keep it loaded after :meth:`release` (no reloads).

    Attributes:
      loads: reloads done after construction.
    """

    def __init__(self, loader: Callable[[], dict], params: dict | None = None, keep: bool = True):
        self.loader = loader
        self.keep = keep
        self._params = params
        self.loads = 0

    @property
    def resident(self) -> bool:
        return self._params is not None

    def get(self) -> dict:
        """The tree, loading it first if it was freed."""
        if self._params is None:
            self._params = self.loader()
            jax.block_until_ready(self._params)
            self.loads += 1
        return self._params

    def release(self) -> None:
        """Free the tree's device buffers now, unless it is kept (call after the last use of a run)."""
        if self.keep or self._params is None:
            return
        free(self._params)
        self._params = None
