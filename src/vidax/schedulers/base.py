"""The interface shared by every sampler in :mod:`vidax.schedulers`.

A scheduler object holds only configuration (it is immutable after
construction). Everything that changes during sampling lives in a
:class:`SchedulerState`, a frozen dataclass registered as a JAX pytree, which
``set_timesteps`` creates and ``step`` returns updated. The sampling loop runs
on the host and passes the integer ``step_index`` explicitly; no scheduler ever
finds its position by looking up a timestep value.

Scalar coefficients depend only on the schedule and the step index, so they are
computed on the host in numpy; the array update of a step is a small jitted JAX
function that takes those coefficients as traced scalars, so it compiles once
per (shape, dtype, solver structure) and not once per step.

Convention for flow matching (the flow samplers): ``x_sigma = (1 - sigma) * x0
+ sigma * noise``; the model predicts the velocity ``noise - x0``; sigmas run
from about 1 down to 0 and the initial latents are pure noise
(``init_noise_sigma == 1``). The CogVideoX samplers
(:mod:`vidax.schedulers.cogvideox`) use a variance-preserving schedule instead
(``x_t = sqrt(a_t) x0 + sqrt(1 - a_t) noise``, integer timesteps) behind the
same interface; a stochastic sampler's ``step`` additionally takes the fresh
noise of the step as a keyword argument (``noise=`` or a ``jax.random``
``key=``), so the sampler itself never holds random state.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


@dataclasses.dataclass(frozen=True, eq=False)
class SchedulerState:
    """The schedule and the sampler's memory between steps (a JAX pytree).

    Attributes:
      sigmas: host ``np.ndarray`` float32 of shape ``(num_inference_steps + 1,)``;
        ``sigmas[i]`` is the noise level of the sample passed to step ``i`` and
        ``sigmas[-1]`` the level after the last step (0 with the default final
        sigma type).
      timesteps: host ``np.ndarray`` of shape ``(num_inference_steps,)``: the
        value to pass to the denoiser at step ``i`` (unless ``model_timesteps`` is
        set), with the dtype and values of diffusers' ``scheduler.timesteps``
        (int64 for UniPC, float32 for Euler).
      model_outputs: multistep history, oldest first: float32 ``jax.Array`` x0
        predictions of the previous steps, each shaped like the sample
        ``(B, C, T, H, W)``. Empty for single-step samplers.
      last_sample: the (corrected) sample the previous step started from, a
        ``jax.Array`` shaped like the sample, or ``None``.
      prev_step_index: the ``step_index`` of the last call to ``step``, or -1
        for a fresh state (static).
      lower_order_nums: number of steps taken so far, capped at the solver
        order; drives the multistep warm-up (static).
      last_order: solver order used by the previous step's predictor, 0 when no
        step was taken (static).
      model_timesteps: ``None``, or a host ``np.ndarray`` float32 of shape
        ``(num_inference_steps,)``: the value the denoiser's timestep embedding
        receives at step ``i``, where that is not ``timesteps[i]`` itself (set by
        :class:`~vidax.schedulers.FlowUniPCMultistepScheduler` when it has a
        ``model_timesteps_type``, as the Cosmos-Predict2.5 grids do by default;
        ``None`` otherwise).
    """

    sigmas: np.ndarray
    timesteps: np.ndarray
    model_outputs: tuple[jax.Array, ...] = ()
    last_sample: jax.Array | None = None
    prev_step_index: int = -1
    lower_order_nums: int = 0
    last_order: int = 0
    model_timesteps: np.ndarray | None = None

    @property
    def num_inference_steps(self) -> int:
        """Number of denoising steps (``len(timesteps)``)."""
        return int(len(self.timesteps))


jax.tree_util.register_dataclass(
    SchedulerState,
    data_fields=["sigmas", "timesteps", "model_outputs", "last_sample", "model_timesteps"],
    meta_fields=["prev_step_index", "lower_order_nums", "last_order"],
)


def rounded(x: jax.Array, zero: jax.Array) -> jax.Array:
    """Return ``x`` unchanged, but as a value the compiler cannot fuse into a following add.

    XLA contracts ``a + b * c`` into a fused multiply-add (one rounding), and
    PyTorch (diffusers) rounds the product first. Passing the product through
    an integer XOR with a *traced* int32 zero blocks the contraction at no
    measurable cost, so the float32 results match PyTorch's op-by-op rounding.

    Args:
      x: a float32 array.
      zero: a traced int32 scalar equal to 0 (pass ``np.int32(0)`` to the jitted function).
    """
    return lax.bitcast_convert_type(lax.bitcast_convert_type(x, jnp.int32) ^ zero, jnp.float32)


def divide(x: jax.Array, s: jax.Array) -> jax.Array:
    """``x / s`` for a scalar ``s`` with a true IEEE division.

    XLA rewrites division by a broadcast scalar into multiplication by its
    reciprocal (differs by 1 ulp in ~40% of elements); materializing the
    broadcast behind an optimization barrier keeps the true division PyTorch uses.
    """
    return x / lax.optimization_barrier(jnp.broadcast_to(s, x.shape))


@jax.jit
def _scale_noise(sample: jax.Array, noise: jax.Array, sigma: jax.Array, zero: jax.Array) -> jax.Array:
    x = sample.astype(jnp.float32)
    n = noise.astype(jnp.float32)
    return (rounded(sigma * n, zero) + rounded((1.0 - sigma) * x, zero)).astype(sample.dtype)


class Scheduler(abc.ABC):
    """Base class of the samplers (flow-matching and CogVideoX).

    Subclasses implement :meth:`set_timesteps` and :meth:`step`. Instances are
    configuration only and never mutate; use one instance for any number of
    concurrent sampling runs, each with its own :class:`SchedulerState`.

    Attributes:
      num_train_timesteps: length of the training schedule (1000 for Wan).
      flow_shift: the static time shift ``sigma -> s * sigma / (1 + (s - 1) * sigma)``
        (flow samplers; 1.0 and unused for the CogVideoX samplers).
      init_noise_sigma: standard deviation of the initial latents (1.0: pure noise).
      order: model evaluations per step (1 for every sampler here).
    """

    init_noise_sigma: float = 1.0
    order: int = 1

    def __init__(self, num_train_timesteps: int = 1000, flow_shift: float = 1.0):
        if int(num_train_timesteps) != num_train_timesteps or num_train_timesteps < 1:
            raise ValueError(f"num_train_timesteps must be a positive integer, got {num_train_timesteps!r}")
        if not np.isfinite(flow_shift) or flow_shift <= 0:
            raise ValueError(f"flow_shift must be a finite positive number, got {flow_shift!r}")
        self.num_train_timesteps = int(num_train_timesteps)
        self.flow_shift = float(flow_shift)

    # -- interface -------------------------------------------------------

    @abc.abstractmethod
    def set_timesteps(self, num_inference_steps: int) -> SchedulerState:
        """Build the schedule for ``num_inference_steps`` steps.

        Returns:
          A fresh :class:`SchedulerState` (no history).

        Raises:
          ValueError: if ``num_inference_steps`` is not a positive integer.
        """

    @abc.abstractmethod
    def step(
        self, state: SchedulerState, model_output: jax.Array, sample: jax.Array, step_index: int
    ) -> tuple[jax.Array, SchedulerState]:
        """Advance ``sample`` from ``state.sigmas[step_index]`` to ``state.sigmas[step_index + 1]``.

        Args:
          state: the state returned by ``set_timesteps`` or the previous ``step``.
          model_output: the denoiser's flow (velocity) prediction for ``sample``
            at ``state.timesteps[step_index]``, shape ``(B, C, T, H, W)``, any
            float dtype (for the CogVideoX samplers: the v prediction, layout
            ``(B, F, C, H, W)``).
          sample: the current latents, same shape, any float dtype.
          step_index: 0-based index of this step, counted by the caller.

        Stochastic samplers (:class:`~vidax.schedulers.CogVideoXDPMScheduler`)
        add keyword-only ``noise=`` / ``key=`` arguments for the step's noise.

        Returns:
          ``(prev_sample, new_state)``; ``prev_sample`` has ``sample``'s shape.

        Raises:
          ValueError: on a bad ``step_index`` or mismatched shapes.
        """

    # -- shared helpers --------------------------------------------------

    def scale_noise(self, state: SchedulerState, sample: jax.Array, noise: jax.Array, step_index: int) -> jax.Array:
        """Forward flow process: ``sigma * noise + (1 - sigma) * sample`` at ``sigmas[step_index]``.

        Used to start from a partially noised input (image/video to video).
        Follows ``FlowMatchEulerDiscreteScheduler.scale_noise`` and, for flow
        sigmas, ``UniPCMultistepScheduler.add_noise`` in diffusers (computed in
        float32 here).

        Args:
          state: a state from :meth:`set_timesteps`.
          sample: clean latents ``(B, C, T, H, W)``, any float dtype.
          noise: Gaussian noise of the same shape.
          step_index: the step the sampling loop will start at.

        Returns:
          The noised latents, in ``sample``'s dtype.

        Raises:
          ValueError: on a bad ``step_index`` or mismatched shapes.
        """
        self._check_index(state, step_index, allow_end=True)
        if tuple(sample.shape) != tuple(noise.shape):
            raise ValueError(f"sample shape {tuple(sample.shape)} != noise shape {tuple(noise.shape)}")
        return _scale_noise(sample, noise, np.float32(state.sigmas[step_index]), np.int32(0))

    def _check_num_steps(self, num_inference_steps: Any) -> int:
        if isinstance(num_inference_steps, bool) or int(num_inference_steps) != num_inference_steps:
            raise ValueError(f"num_inference_steps must be an integer, got {num_inference_steps!r}")
        if num_inference_steps < 1:
            raise ValueError(f"num_inference_steps must be >= 1, got {num_inference_steps}")
        return int(num_inference_steps)

    @staticmethod
    def _check_index(state: SchedulerState, step_index: Any, allow_end: bool = False) -> int:
        n = state.num_inference_steps
        hi = n if allow_end else n - 1
        if isinstance(step_index, bool) or int(step_index) != step_index or not 0 <= step_index <= hi:
            raise ValueError(f"step_index must be an integer in [0, {hi}], got {step_index!r}")
        return int(step_index)

    @staticmethod
    def _check_shapes(model_output: jax.Array, sample: jax.Array) -> None:
        if tuple(model_output.shape) != tuple(sample.shape):
            raise ValueError(
                f"model_output shape {tuple(model_output.shape)} != sample shape {tuple(sample.shape)}"
            )
        for name, a in (("model_output", model_output), ("sample", sample)):
            if not jnp.issubdtype(a.dtype, jnp.floating):
                raise ValueError(f"{name} must have a floating dtype, got {a.dtype}")

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.config.items())
        return f"{type(self).__name__}({fields})"

    @property
    def config(self) -> dict[str, Any]:
        """The constructor arguments of this scheduler, as a dict."""
        return {"num_train_timesteps": self.num_train_timesteps, "flow_shift": self.flow_shift}
