"""The device mesh and per-model sharding rules.

One mesh for every model, with three named axes (paper section 2, "Spatiotemporal tensor and
sequence sharding"):

``data``
    independent samples; classifier-free guidance's two halves run here when ``dp = 2``.
``tensor``
    Megatron 1D tensor parallelism: attention heads and the FFN hidden width are split.
``sequence``
    DeepSpeed-Ulysses sequence parallelism: tokens are split across the blocks.

A model never names mesh axes. It declares *logical* axes once per weight (``ParamSpec.axes``:
``"layers"``, ``"embed"``, ``"heads"``, ``"mlp"``, ...) and for its activations (``"batch"``,
``"tokens"``), and ships one :class:`ShardingRules` object that maps each logical name to a mesh
axis. From the rules and the spec tree come the ``NamedSharding`` of every parameter (so the loader
places each one once, already sharded) and the ``PartitionSpec`` of every ``shard_map`` operand.
Regex overrides by parameter path exist only for what logical axes cannot express.

Follows the pattern of jax-llm-examples' ``ShardingRules`` and MaxText's ``logical_axis_rules``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from vidax.core.params import ParamSpec, SpecTree, flatten, map_specs

DATA, TENSOR, SEQUENCE = "data", "tensor", "sequence"
MESH_AXES = (DATA, TENSOR, SEQUENCE)

MeshAxes = str | tuple[str, ...] | None


def check_mesh_sizes(dp: Any, tp: Any, sp: Any) -> None:
    """Raise ValueError unless ``dp``, ``tp`` and ``sp`` are positive integers (bools are not)."""
    sizes = {"dp": dp, "tp": tp, "sp": sp}
    bad = {k: v for k, v in sizes.items() if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1}
    if bad:
        raise ValueError(f"mesh sizes must be positive integers, got {bad}")


def optional_mesh(dp: int = 1, tp: int = 1, sp: int = 1, *, devices: Sequence[Any] | None = None) -> Mesh | None:
    """The pipelines' mesh: None for one device (all sizes 1, no devices given), else :func:`make_mesh`.

    Raises:
      ValueError: as :func:`make_mesh`; sizes are checked in either case (``tp=0`` is not one device).
    """
    check_mesh_sizes(dp, tp, sp)
    if dp * tp * sp == 1 and devices is None:
        return None
    return make_mesh(dp, tp, sp, devices=devices)


def make_mesh(dp: int = 1, tp: int = 1, sp: int = 1, *, devices: Sequence[Any] | None = None) -> Mesh:
    """The ``(data, tensor, sequence)`` mesh of ``dp x tp x sp`` devices.

    Axis types are ``Auto``: code outside ``shard_map`` is partitioned by GSPMD from the
    parameter and activation shardings (``jax.make_mesh`` defaults to ``Explicit`` axes, under
    which every ``jnp`` op must resolve its own output sharding; our model code is plain
    ``jnp`` and the hand-partitioned parts live inside ``shard_map``).

    Args:
      dp, tp, sp: sizes of the ``data``, ``tensor`` and ``sequence`` axes (positive ints).
      devices: the devices to use, in mesh order; default ``jax.devices()``. Their count must
        equal ``dp * tp * sp`` (pass a slice of ``jax.devices()`` to use fewer).

    Returns:
      a ``jax.sharding.Mesh`` with axis names :data:`MESH_AXES`.

    Raises:
      ValueError: a size below 1, or ``dp * tp * sp`` different from the device count (the
        message lists the splits of that count).
    """
    check_mesh_sizes(dp, tp, sp)
    devices = list(jax.devices() if devices is None else devices)
    n = dp * tp * sp
    if n != len(devices):
        raise ValueError(
            f"dp*tp*sp = {dp}*{tp}*{sp} = {n}, but there are {len(devices)} devices; the mesh must use all of "
            f"them (or pass devices=jax.devices()[:{n}]). Splits of {len(devices)}: "
            + ", ".join(f"dp={a} tp={b} sp={c}" for a, b, c in _splits(len(devices)))
            + (f". On a CPU, XLA_FLAGS=--xla_force_host_platform_device_count={n} simulates {n} devices"
               if n > len(devices) and devices and devices[0].platform == "cpu" else "")
        )
    return jax.make_mesh((dp, tp, sp), MESH_AXES, axis_types=(AxisType.Auto,) * 3, devices=devices)


def _splits(n: int) -> list[tuple[int, int, int]]:
    return [(a, b, n // (a * b)) for a in divisors(n) for b in divisors(n // a)][:12]


def divisors(n: int) -> list[int]:
    """Positive divisors of ``n`` in increasing order (the valid sizes of an axis that splits ``n``)."""
    return [d for d in range(1, n + 1) if n % d == 0]


def check_divisible(what: str, n: int, size: int, flag: str) -> None:
    """Raise a ValueError naming the valid sizes if ``size`` does not divide ``n``.

    Example: ``check_divisible("Wan transformer attention heads", 12, 8, "tp")`` ->
    ``ValueError: tp=8 does not divide the 12 Wan transformer attention heads; valid tp: 1, 2, 3, 4, 6, 12``.
    """
    if n % size:
        raise ValueError(f"{flag}={size} does not divide the {n} {what}; valid {flag}: "
                         + ", ".join(map(str, divisors(n))))


def axis_size(mesh: Mesh | None, axes: MeshAxes) -> int:
    """Number of devices along ``axes`` (one mesh axis, a tuple of them, or None -> 1)."""
    if mesh is None or axes is None:
        return 1
    names = (axes,) if isinstance(axes, str) else tuple(axes)
    return math.prod(mesh.shape[a] for a in names)


@dataclass(frozen=True)
class ShardingRules:
    """Logical axis names -> mesh axes, for one model family.

    Attributes:
      rules: ``((logical_name, mesh_axes), ...)``; ``mesh_axes`` is a mesh axis name, a tuple of
        them (split over their product), or None (replicated). Every logical name a model uses,
        on weights or activations, must appear (mapping to None is an explicit "replicate"), so a
        new axis name cannot be silently replicated by a typo.
      overrides: ``((path_regex, PartitionSpec), ...)`` for parameters whose sharding logical
        axes cannot express; the first regex that ``re.fullmatch``-es a parameter path wins.

    Raises (at construction):
      ValueError: a logical name listed twice, or a mesh axis used twice within one rule.

    The hashable, frozen object is passed to jitted functions as a static argument.
    """

    rules: tuple[tuple[str, MeshAxes], ...]
    overrides: tuple[tuple[str, PartitionSpec], ...] = ()

    def __post_init__(self):
        names = [name for name, _ in self.rules]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"sharding rules list logical axes more than once: {twice}")
        for name, axes in self.rules:
            flat = _flat(axes)
            if len(set(flat)) != len(flat):
                raise ValueError(f"sharding rule {name!r} -> {axes!r} uses a mesh axis twice")
        for pattern, _ in self.overrides:
            re.compile(pattern)

    @classmethod
    def of(cls, mapping: Mapping[str, MeshAxes], overrides: Iterable[tuple[str, PartitionSpec]] = ()) -> ShardingRules:
        """Build from a dict ``{logical_name: mesh_axes}``."""
        return cls(tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in mapping.items()), tuple(overrides))

    def mesh_axes(self, logical: str | None) -> MeshAxes:
        """The mesh axes of one logical name (None -> None).

        Raises:
          ValueError: ``logical`` is not in the rules (the message lists the known names).
        """
        if logical is None:
            return None
        for name, axes in self.rules:
            if name == logical:
                return axes
        raise ValueError(f"logical axis {logical!r} has no sharding rule; known: {[n for n, _ in self.rules]}")

    def mesh_axis_names(self) -> set[str]:
        """Every mesh axis some rule or override uses."""
        out = {a for _, axes in self.rules for a in _flat(axes)}
        for _, spec in self.overrides:
            out |= {a for entry in spec for a in _flat(entry)}
        return out

    def spec(self, axes: Sequence[str | None] | None, *, shape: Sequence[int] | None = None,
             mesh: Mesh | None = None, what: str = "array") -> PartitionSpec:
        """The ``PartitionSpec`` of an array with logical ``axes`` (weights or activations).

        Args:
          axes: one logical name (or None) per dimension; None for a fully replicated array.
          shape, mesh: if both given, every sharded dimension is checked to divide evenly.
          what: name used in error messages (a parameter path).

        Returns:
          ``PartitionSpec``; trailing replicated dimensions are kept as None entries.

        Raises:
          ValueError: an unknown logical name; two dimensions mapped to the same mesh axis
            (a collision); a dimension the mesh axes do not divide (names the parameter,
            the dimension and the valid sizes).
        """
        if axes is None:
            return PartitionSpec()
        entries = [self.mesh_axes(a) for a in axes]
        used: dict[str, int] = {}
        for dim, entry in enumerate(entries):
            for name in _flat(entry):
                if name in used:
                    raise ValueError(
                        f"sharding collision in {what}: dimensions {used[name]} ({axes[used[name]]!r}) and {dim} "
                        f"({axes[dim]!r}) both map to mesh axis {name!r}; change the model's logical axes or add "
                        "an override for this path"
                    )
                used[name] = dim
        pspec = PartitionSpec(*entries)
        if shape is not None and mesh is not None:
            _check_shape(pspec, shape, mesh, what)
        return pspec

    def param_spec(self, path: str, spec: ParamSpec, mesh: Mesh | None = None) -> PartitionSpec:
        """The ``PartitionSpec`` of one parameter: the first matching override, else its logical axes."""
        for pattern, pspec in self.overrides:
            if re.fullmatch(pattern, path):
                if mesh is not None:
                    _check_shape(pspec, spec.shape, mesh, path)
                return pspec
        return self.spec(spec.axes, shape=spec.shape, mesh=mesh, what=path)

    def param_specs(self, specs: SpecTree, mesh: Mesh | None = None) -> dict:
        """The ``PartitionSpec`` tree of a spec tree (the ``in_specs`` of a ``shard_map`` over parameters)."""
        return map_specs(lambda path, s: self.param_spec(path, s, mesh), specs)

    def sharding_fn(self, mesh: Mesh) -> Callable[[str, ParamSpec], NamedSharding]:
        """``(path, spec) -> NamedSharding`` for :func:`vidax.checkpoint.loader.load_params` (``shardings=``).

        Raises:
          ValueError: a rule names a mesh axis the mesh lacks.
        """
        self.check_mesh(mesh)
        return lambda path, spec: NamedSharding(mesh, self.param_spec(path, spec, mesh))

    def param_shardings(self, specs: SpecTree, mesh: Mesh) -> dict:
        """The ``NamedSharding`` tree of a spec tree on ``mesh`` (``jax.device_put`` target, ``in_shardings``)."""
        fn = self.sharding_fn(mesh)
        return map_specs(fn, specs)

    def check_mesh(self, mesh: Mesh) -> None:
        """Raise ValueError if a rule names a mesh axis that ``mesh`` does not have."""
        missing = sorted(self.mesh_axis_names() - set(mesh.axis_names))
        if missing:
            raise ValueError(f"sharding rules use mesh axes {missing}, which the mesh {dict(mesh.shape)} lacks")

    def validate(self, specs: SpecTree, mesh: Mesh) -> None:
        """Check every parameter of ``specs`` against ``mesh`` at once (unknown names, collisions, divisibility).

        Raises:
          ValueError: listing every problem.
        """
        self.check_mesh(mesh)
        problems = []
        for path, spec in flatten(specs):
            try:
                self.param_spec(path, spec, mesh)
            except ValueError as e:
                problems.append(str(e))
        if problems:
            raise ValueError("parameters do not fit the mesh:\n  " + "\n  ".join(problems))


def _flat(axes: MeshAxes) -> tuple[str, ...]:
    if axes is None:
        return ()
    return (axes,) if isinstance(axes, str) else tuple(axes)


def _check_shape(pspec: PartitionSpec, shape: Sequence[int], mesh: Mesh, what: str) -> None:
    for dim, entry in enumerate(pspec):
        size = axis_size(mesh, entry)
        if dim < len(shape) and shape[dim] % size:
            raise ValueError(
                f"{what}: dimension {dim} of shape {tuple(shape)} ({shape[dim]}) is not divisible by mesh axes "
                f"{entry!r} of size {size}; sizes that divide it: {divisors(shape[dim])}"
            )
