"""One declaration per weight: shape, dtype pinning and logical sharding axes.

A model declares its parameters once, as a nested dict of :class:`ParamSpec`
(the *spec tree*). From it come the loading target that a key map must fill
exactly, the dtype each tensor is cast to on the host, the abstract
``jax.ShapeDtypeStruct`` tree used to compile without weights, and (later) the
shardings. Parameters themselves are plain nested dicts of arrays with the same
structure; model code is pure functions over them.

Blocks that repeat are declared once with a leading ``layers`` axis (the
stacked layout that ``jax.lax.scan`` runs over); a key map fills one slice per
checkpoint block.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np


@dataclass(frozen=True)
class ParamSpec:
    """The declaration of one parameter.

    Attributes:
      shape: full shape, including a leading stacked-layer axis for repeated blocks.
      fp32: keep this leaf in float32 whatever the requested compute dtype
        (norm weights, condition embedders, AdaLN ``scale_shift_table``; paper
        Table 4 fault 4).
      axes: logical axis names, one per dimension (``"layers"``, ``"embed"``,
        ``"heads"``, ``"mlp"``, ``None``), used by sharding rules.
    """

    shape: tuple[int, ...]
    fp32: bool = False
    axes: tuple[str | None, ...] | None = None

    def dtype(self, compute_dtype: Any) -> np.dtype:
        """The dtype this leaf is stored in on device for ``compute_dtype``."""
        return np.dtype(np.float32) if self.fp32 else np.dtype(compute_dtype)


SpecTree = dict[str, Any]


def linear_spec(n_in: int, n_out: int, axes: tuple[str | None, str | None], *, layers: int | None = None,
                fp32: bool = False, bias: bool = True) -> dict:
    """The specs of one linear layer: ``{"kernel": (in, out), "bias": (out,)}`` (layout of :mod:`vidax.core.layers`).

    Args:
      axes: logical axes of the kernel ``(in, out)``; the bias takes the second.
      layers: a leading stacked-layer axis of this size (repeated blocks), or None.
      fp32: pin both leaves to float32. bias: declare the bias.
    """
    lead, lead_axes = ((layers,), ("layers",)) if layers else ((), ())
    spec = {"kernel": ParamSpec((*lead, n_in, n_out), fp32=fp32, axes=(*lead_axes, *axes))}
    if bias:
        spec["bias"] = ParamSpec((*lead, n_out), fp32=fp32, axes=(*lead_axes, axes[1]))
    return spec


def flatten(tree: dict, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Yield ``("a/b/c", leaf)`` for every leaf of a nested dict, in insertion order."""
    for k, v in tree.items():
        path = f"{prefix}/{k}" if prefix else k
        if isinstance(v, dict):
            yield from flatten(v, path)
        else:
            yield path, v


def unflatten(items: dict[str, Any]) -> dict:
    """Inverse of :func:`flatten`: ``{"a/b": x}`` -> ``{"a": {"b": x}}``."""
    tree: dict = {}
    for path, v in items.items():
        node = tree
        *parents, last = path.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = v
    return tree


#: How to get a VAE's encoder side where a pipeline loaded only its decoder side (the :func:`require_parts` hint of
#: the VAEs' encode functions).
VAE_ENCODER_HINT = ("text-to-video pipelines load the VAE's decoder side only: merge in `pipe.vae_encoder.get()` "
                    "(loaded on first use), or load the whole VAE (load_vae)")


def require_parts(params: dict, parts: tuple[str, ...], use: str, hint: str) -> None:
    """Check that a parameter tree holds the top-level ``parts`` that ``use`` reads.

    For trees loaded in part (``load_params(..., parts=...)``: a text-to-video pipeline holds only its
    VAE's decoder side).

    Raises:
      ValueError: naming the missing parts, what needs them and ``hint`` (how to load them).
    """
    missing = [k for k in parts if k not in params]
    if missing:
        raise ValueError(f"{use} needs the parameters {missing}, which this tree does not hold (it has "
                         f"{sorted(params)}); {hint}")


def map_specs(fn: Callable[[str, ParamSpec], Any], specs: SpecTree) -> dict:
    """Apply ``fn(path, spec)`` to every leaf of a spec tree, keeping the structure."""
    return unflatten({p: fn(p, s) for p, s in flatten(specs)})


def abstract_params(specs: SpecTree, compute_dtype: Any) -> dict:
    """The ``jax.ShapeDtypeStruct`` tree of a spec tree (nothing allocated)."""
    return map_specs(lambda _, s: jax.ShapeDtypeStruct(s.shape, s.dtype(compute_dtype)), specs)


def random_params(specs: SpecTree, seed: int = 0, scale: float = 0.02) -> dict:
    """Host float32 random parameters for a spec tree (tests and benchmarks only)."""
    rng = np.random.default_rng(seed)
    return map_specs(lambda _, s: (rng.standard_normal(s.shape, dtype=np.float32) * scale), specs)
