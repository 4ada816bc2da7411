"""Wan2.2 A14B's two transformer experts: which one denoises each step, and which ones are resident.

Wan2.2 A14B splits denoising between a *high-noise* expert (diffusers ``transformer``, original
``high_noise_model/``) and a *low-noise* expert (diffusers ``transformer_2``, original
``low_noise_model/``) at a boundary timestep ``boundary_ratio * num_train_timesteps`` (0.875 for
T2V, 0.9 for I2V; ``model_index.json``). The rule is diffusers' ``WanPipeline`` /
``WanImageToVideoPipeline``: step ``i`` runs the high-noise expert with ``guidance_scale`` if
``timesteps[i] >= boundary_timestep``, else the low-noise expert with ``guidance_scale_2``. The
timesteps fall monotonically, so the switch happens once (:func:`switch_step`).

Residency (:class:`ExpertSet`): both experts on the device (``"both"``), or only the active one
(``"active"``: the low-noise expert is loaded, already sharded, when the boundary is crossed,
after the high-noise expert's arrays are freed, so device memory holds one expert at a time and
the swap happens once per generation).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from vidax.core.residency import free

HIGH_NOISE, LOW_NOISE = 0, 1
RESIDENCY = ("auto", "both", "active")


def boundary_timestep(boundary_ratio: float | None, num_train_timesteps: int) -> float | None:
    """``boundary_ratio * num_train_timesteps`` (diffusers), or None without a second expert."""
    return None if boundary_ratio is None else float(boundary_ratio) * num_train_timesteps


def expert_for_timestep(t: float, boundary: float | None) -> int:
    """:data:`HIGH_NOISE` (0) if there is no boundary or ``t >= boundary``, else :data:`LOW_NOISE` (1)."""
    return HIGH_NOISE if boundary is None or t >= boundary else LOW_NOISE


def switch_step(timesteps: Sequence[float] | np.ndarray, boundary: float | None) -> int | None:
    """The first step index run by the low-noise expert, or None if every step is high-noise.

    Args:
      timesteps: the scheduler's timesteps (diffusers ``scheduler.timesteps``: int64 for UniPC,
        float32 for Euler), in sampling order.
      boundary: from :func:`boundary_timestep`.
    """
    for i, t in enumerate(np.asarray(timesteps).tolist()):
        if expert_for_timestep(t, boundary) == LOW_NOISE:
            return i
    return None


def both_fit(expert_bytes: int, devices: Sequence[Any] | None = None, fraction: float = 0.7) -> bool:
    """Whether two experts of ``expert_bytes`` (summed over all shards) fit next to each other.

    True when the devices report no memory limit (the CPU backend), else when
    ``2 * expert_bytes / n_devices <= fraction * bytes_limit`` on every device (the rest is left
    for activations, the text encoder and the VAE).
    """
    devices = list(devices or jax.devices()[:1])
    per_device = 2 * expert_bytes / len(devices)
    for d in devices:
        stats = d.memory_stats() or {}
        limit = stats.get("bytes_limit")
        if limit and per_device > fraction * limit:
            return False
    return True


class ExpertSet:
    """The experts of one pipeline and their residency on the device.

    Args:
      loaders: one callable per expert (high-noise first) returning its parameter tree on the
        device (placed and sharded as the step expects); called when the expert must become resident.
      residency: ``"both"`` (every expert loaded now) or ``"active"`` (one at a time).
      resident: already-loaded parameter trees by index (e.g. the high-noise expert loaded with the
        rest of the pipeline).

    Attributes:
      swaps: number of times an expert was loaded after construction (``"active"`` mode).
      swap_seconds: their total time.

    Raises:
      ValueError: an unknown residency.
    """

    def __init__(self, loaders: Sequence[Callable[[], dict]], residency: str = "both",
                 resident: dict[int, dict] | None = None):
        if residency not in ("both", "active"):
            raise ValueError(f"expert residency must be 'both' or 'active', got {residency!r}")
        self.loaders = list(loaders)
        self.residency = residency
        self._params: dict[int, dict] = dict(resident or {})
        self.swaps = 0
        self.swap_seconds = 0.0
        if residency == "both":
            for i in range(len(self.loaders)):
                if i not in self._params:
                    self._params[i] = self.loaders[i]()
        elif len(self._params) > 1:
            raise ValueError("residency 'active' keeps one expert on the device; got several resident")

    def __len__(self) -> int:
        return len(self.loaders)

    def resident(self) -> list[int]:
        """Indices of the experts now on the device."""
        return sorted(self._params)

    def get(self, index: int) -> dict:
        """The parameters of expert ``index``, loading it (and first freeing the other) if needed."""
        if index in self._params:
            return self._params[index]
        t0 = time.perf_counter()
        for other in list(self._params):  # free first: device memory holds one expert at a time
            free(self._params.pop(other))
        self._params[index] = params = self.loaders[index]()
        jax.block_until_ready(params)
        self.swaps += 1
        self.swap_seconds += time.perf_counter() - t0
        return params
