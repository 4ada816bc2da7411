"""Flow-matching Euler sampler.

Reference: diffusers ``schedulers/scheduling_flow_match_euler_discrete.py``,
class ``FlowMatchEulerDiscreteScheduler`` with a static ``shift``
(``use_dynamic_shifting=False``), no karras/exponential/beta sigmas, no
``shift_terminal``, no ``invert_sigmas``, no stochastic sampling.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .base import Scheduler, SchedulerState, rounded

_f32 = np.float32


def _shift_f32(sigma: np.float32, flow_shift: float) -> np.float32:
    """``s * sigma / (1 + (s - 1) * sigma)`` rounded as torch float32 does it (scalar cast first)."""
    return (_f32(flow_shift) * sigma) / (_f32(1.0) + _f32(flow_shift - 1.0) * sigma)


@jax.jit
def _euler_update(model_output: jax.Array, sample: jax.Array, dt: jax.Array, zero: jax.Array) -> jax.Array:
    prev = sample.astype(jnp.float32) + rounded(dt * model_output.astype(jnp.float32), zero)
    return prev.astype(model_output.dtype)


class FlowMatchEulerScheduler(Scheduler):
    """First-order Euler sampler for flow-matching (rectified flow) models.

    Follows diffusers ``FlowMatchEulerDiscreteScheduler`` (file
    ``scheduling_flow_match_euler_discrete.py``) with ``shift=flow_shift``:

    * ``sigma_max``/``sigma_min`` are the float32 shifted ends of the training
      schedule (``shift(1.0)`` and ``shift(1 / num_train_timesteps)``).
    * ``set_timesteps`` spaces ``num_inference_steps`` points linearly between
      them in float64 and applies the shift *again* (a diffusers quirk: the
      last sigma is shifted twice), casts to float32 and appends a final 0.
    * ``timesteps = sigmas[:-1] * num_train_timesteps`` in float32 (not rounded).
    * ``step``: ``prev = sample + (sigmas[i+1] - sigmas[i]) * model_output``.

    Args:
      num_train_timesteps: training schedule length (default 1000).
      flow_shift: static time shift (diffusers ``shift``); Wan uses 3.0 at 480p
        and 5.0 at 720p.

    Raises:
      ValueError: for a non-positive ``flow_shift`` or ``num_train_timesteps``.
    """

    def __init__(self, num_train_timesteps: int = 1000, flow_shift: float = 1.0):
        super().__init__(num_train_timesteps=num_train_timesteps, flow_shift=flow_shift)
        n = _f32(self.num_train_timesteps)
        self.sigma_max = float(_shift_f32(n / n, self.flow_shift))
        self.sigma_min = float(_shift_f32(_f32(1.0) / n, self.flow_shift))

    def set_timesteps(self, num_inference_steps: int) -> SchedulerState:
        """Build the Euler schedule.

        Returns:
          A :class:`SchedulerState` with ``sigmas`` float32
          ``(num_inference_steps + 1,)`` ending in 0 and ``timesteps`` float32
          ``(num_inference_steps,)``, equal to diffusers'
          ``scheduler.sigmas`` / ``scheduler.timesteps``.

        Raises:
          ValueError: if ``num_inference_steps`` is not a positive integer.
        """
        n_steps = self._check_num_steps(num_inference_steps)
        n_train = self.num_train_timesteps
        t = np.linspace(self.sigma_max * n_train, self.sigma_min * n_train, n_steps)  # float64
        s = t / n_train
        s = self.flow_shift * s / (1.0 + (self.flow_shift - 1.0) * s)
        s32 = s.astype(np.float32)
        timesteps = s32 * _f32(n_train)
        sigmas = np.concatenate([s32, np.zeros(1, np.float32)])
        return SchedulerState(sigmas=sigmas, timesteps=timesteps)

    def step(
        self, state: SchedulerState, model_output: jax.Array, sample: jax.Array, step_index: int
    ) -> tuple[jax.Array, SchedulerState]:
        """One Euler step from ``sigmas[step_index]`` to ``sigmas[step_index + 1]``.

        Args:
          state: from :meth:`set_timesteps` (returned unchanged: Euler keeps no history).
          model_output: flow prediction ``(B, C, T, H, W)``, any float dtype.
          sample: current latents, same shape, any float dtype.
          step_index: 0-based step index in ``[0, num_inference_steps)``.

        Returns:
          ``(prev_sample, state)``. ``prev_sample = sample + dt * model_output``
          is computed in float32 and cast to ``model_output.dtype``, as diffusers
          does (diffusers multiplies ``dt * model_output`` in the model output's
          dtype; here it is float32, identical for float32 inputs).

        Raises:
          ValueError: on a bad ``step_index`` or mismatched shapes/dtypes.
        """
        i = self._check_index(state, step_index)
        self._check_shapes(model_output, sample)
        dt = state.sigmas[i + 1] - state.sigmas[i]  # float32 host scalar, as torch computes it
        prev = _euler_update(model_output, sample, _f32(dt), np.int32(0))
        return prev, state

    @property
    def config(self) -> dict[str, Any]:
        return {"num_train_timesteps": self.num_train_timesteps, "flow_shift": self.flow_shift}
