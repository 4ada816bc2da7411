"""The CogVideoX samplers: DDIM and DPM-Solver++(2M, SDE) on a variance-preserving schedule.

References (diffusers 0.42):

* :class:`CogVideoXDDIMScheduler`: ``schedulers/scheduling_ddim_cogvideox.py``,
  class ``CogVideoXDDIMScheduler``.
* :class:`CogVideoXDPMScheduler`: ``schedulers/scheduling_dpm_cogvideox.py``,
  class ``CogVideoXDPMScheduler``.
* How ``pipelines/cogvideo/pipeline_cogvideox.py`` (``CogVideoXPipeline``) drives
  them; see :mod:`vidax.schedulers.guidance` for its dynamic CFG.

Both share the schedule of the CogVideoX checkpoints' ``scheduler_config.json``:
``beta_schedule="scaled_linear"`` (beta_start 0.00085, beta_end 0.012), SNR
shift ``alphas_cumprod / (s + (1 - s) * alphas_cumprod)`` with
``snr_shift_scale`` s (3.0 for CogVideoX-2B, 1.0 for CogVideoX-5B and 1.5-5B),
``rescale_betas_zero_snr=True`` (the last training timestep has alphas_cumprod
exactly 0: pure noise), ``timestep_spacing="trailing"``,
``prediction_type="v_prediction"``, ``set_alpha_to_one=True``.

Schedule quirks reproduced exactly (all from diffusers):

* Trailing spacing: ``timesteps = round(arange(T, 0, -T/n)) - 1`` (int64), so
  the first timestep is ``T - 1`` (999, where SNR is 0) and, when ``n`` does
  not divide ``T``, the gaps alternate (30 steps: 999, 966, 932, 899, ...).
* The step does not move to the next timestep of the schedule but to
  ``prev_timestep = t - T // n`` (integer division). For 30 steps that is
  ``t - 33``: 999 -> 966, 966 -> 933 (the next timestep is 932), ...; the
  sample after step ``i`` is thus at the noise level of ``prev_timesteps[i]``
  while the model is evaluated next at ``timesteps[i + 1]`` (one training step
  apart when ``n`` does not divide ``T``). See :meth:`prev_timesteps`.
* The last step normally has ``prev_timestep < 0`` and uses
  ``final_alpha_cumprod`` (1.0 with ``set_alpha_to_one``): DDIM returns the x0
  prediction; DPM's log-SNR step ``h`` is ``+inf`` there and its coefficients
  reduce to ``prev = x0`` (no noise), computed with the same infinities as
  diffusers. But with trailing spacing and ``T / n`` having a fractional part
  >= 0.5 (e.g. n = 6, 7, 11, 15) the last timestep is ``T // n`` and the last step
  goes to timestep 0 (``alphas_cumprod[0]``, not 1): the result keeps a trace
  of noise, and DPM's last step is second order and draws noise.
* With zero terminal SNR the first DPM step has ``lambda = -inf`` (its
  coefficients reduce to ``prev = sqrt(a') x0 + sqrt(1 - a') noise``) and the
  second step's ratio ``r`` is ``inf``, so it is first order in effect.
* ``clip_sample``, ``eta``, thresholding: accepted by diffusers' constructor or
  ``step`` but never applied; not applied here either.
* Only ``beta_schedule="scaled_linear"`` is supported: diffusers builds it in
  float64, which we reproduce to the last bit; the other schedules are float32
  in diffusers, through PyTorch's float32 ``linspace`` and ``sqrt`` kernels,
  whose last-bit behaviour (CPU-dependent) numpy does not reproduce to 1e-6.

Numerics: the scaled-linear schedule is float64 in diffusers (``torch.linspace``
in float64, squared); every scalar coefficient is computed on the host in the
schedule's dtype op by op as diffusers' 0-dim tensors are, and rounded to
float32 when it meets the float32 sample, as PyTorch does. The array update is
a small jitted JAX function that rounds after every operation in the dtype
PyTorch's type promotion gives (float32 for float32 inputs; a bfloat16 sample
with a float32 model output gives float32, as in the CogVideoX pipeline).

Latents use the CogVideoX layout ``(B, F, C, H, W)``; any shape works since
every operation is elementwise.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .base import Scheduler, SchedulerState, divide, rounded

BETA_SCHEDULES = ("scaled_linear",)
PREDICTION_TYPES = ("v_prediction", "epsilon", "sample")
TIMESTEP_SPACINGS = ("trailing", "leading", "linspace")

_f32 = np.float32
_F32 = jnp.float32


# --------------------------------------------------------------------------- schedule (host)


def _alphas_cumprod(
    num_train_timesteps: int,
    beta_start: float,
    beta_end: float,
    snr_shift_scale: float,
    rescale_betas_zero_snr: bool,
) -> np.ndarray:
    """The training schedule's cumulative alphas, float64, as diffusers' ``__init__`` builds them.

    Scaled-linear betas (``linspace(sqrt(beta_start), sqrt(beta_end))**2`` in
    float64), cumulative product, SNR shift, optional zero-terminal-SNR rescale.
    """
    betas = np.linspace(beta_start**0.5, beta_end**0.5, num_train_timesteps, dtype=np.float64) ** 2
    acp = np.cumprod(1.0 - betas)
    s = snr_shift_scale
    acp = acp / (s + (1 - s) * acp)  # SNR shift (SD3-style)
    if rescale_betas_zero_snr:  # Lin et al. 2023, Algorithm 1; the last entry becomes exactly 0
        sq = np.sqrt(acp)
        s0, sT = sq[0], sq[-1]
        sq = sq - sT
        sq = sq * (s0 / (s0 - sT))
        acp = sq * sq
    return acp


def _timesteps(n: int, n_train: int, spacing: str, steps_offset: int) -> np.ndarray:
    """diffusers ``set_timesteps`` (identical numpy code), int64 ``(n,)``."""
    if spacing == "linspace":
        return np.linspace(0, n_train - 1, n).round()[::-1].copy().astype(np.int64)
    if spacing == "leading":
        step_ratio = n_train // n
        ts = (np.arange(0, n) * step_ratio).round()[::-1].copy().astype(np.int64)
        return ts + steps_offset
    step_ratio = n_train / n  # trailing
    ts = np.round(np.arange(n_train, 0, -step_ratio)).astype(np.int64)
    return ts - 1


# --------------------------------------------------------------------------- array update (device)


def _mul(c: jax.Array, x: jax.Array, zero: jax.Array) -> jax.Array:
    """``c * x`` for a float32 scalar ``c``, as PyTorch computes ``0-dim tensor * x`` on CPU.

    The scalar is the *left* operand in every diffusers expression here, so
    PyTorch first casts it to ``x.dtype`` (bfloat16/float16 included), then
    multiplies in float32 and rounds to ``x.dtype``. The product is rounded
    before any following add (no fused multiply-add).
    """
    c = c.astype(x.dtype).astype(_F32)
    return rounded(c * x.astype(_F32), zero).astype(x.dtype)


def _sub(a: jax.Array, b: jax.Array) -> jax.Array:
    return (a.astype(_F32) - b.astype(_F32)).astype(jnp.promote_types(a.dtype, b.dtype))


def _add(a: jax.Array, b: jax.Array) -> jax.Array:
    return (a.astype(_F32) + b.astype(_F32)).astype(jnp.promote_types(a.dtype, b.dtype))


def _x0(model_output: jax.Array, sample: jax.Array, c: jax.Array, zero: jax.Array, prediction_type: str):
    """Predicted original sample; ``c = [sqrt(alpha_prod_t), sqrt(1 - alpha_prod_t)]``."""
    if prediction_type == "v_prediction":
        return _sub(_mul(c[0], sample, zero), _mul(c[1], model_output, zero))
    if prediction_type == "epsilon":
        num = _sub(sample, _mul(c[1], model_output, zero))
        return divide(num.astype(_F32), c[0]).astype(num.dtype)
    return model_output  # "sample"


@partial(jax.jit, static_argnames=("prediction_type",))
def _ddim_update(model_output, sample, coefs, zero, *, prediction_type: str):
    """``coefs = [sqrt(a_t), sqrt(1 - a_t), a, b]``; ``prev = a * sample + b * x0``."""
    x0 = _x0(model_output, sample, coefs, zero, prediction_type)
    prev = _add(_mul(coefs[2], sample, zero), _mul(coefs[3], x0, zero))
    return prev, x0


@partial(jax.jit, static_argnames=("prediction_type", "second_order"))
def _dpm_update(model_output, sample, old_x0, noise, coefs, zero, *, prediction_type: str, second_order: bool):
    """``coefs = [sqrt(a_t), sqrt(1 - a_t), mult1, mult2, mult_noise, mult3, mult4]``.

    First order: ``prev = mult1 * sample - mult2 * x0 + mult_noise * noise``; second order
    replaces ``x0`` by ``mult3 * x0 - mult4 * old_x0``.
    """
    x0 = _x0(model_output, sample, coefs, zero, prediction_type)
    d = _sub(_mul(coefs[5], x0, zero), _mul(coefs[6], old_x0, zero)) if second_order else x0
    prev = _add(_sub(_mul(coefs[2], sample, zero), _mul(coefs[3], d, zero)), _mul(coefs[4], noise, zero))
    return prev, x0


@jax.jit
def _add_noise(sample, noise, c, zero):
    return _add(rounded(c[0] * sample.astype(_F32), zero), rounded(c[1] * noise.astype(_F32), zero)).astype(
        sample.dtype
    )


# --------------------------------------------------------------------------- schedulers


class _CogVideoXBase(Scheduler):
    """Schedule and checks shared by the two CogVideoX samplers (see the module docstring)."""

    def __init__(
        self,
        num_train_timesteps: int = 1000,
        beta_start: float = 0.00085,
        beta_end: float = 0.012,
        beta_schedule: str = "scaled_linear",
        trained_betas: Any = None,
        set_alpha_to_one: bool = True,
        steps_offset: int = 0,
        prediction_type: str = "epsilon",
        timestep_spacing: str = "leading",
        rescale_betas_zero_snr: bool = False,
        snr_shift_scale: float = 3.0,
    ):
        super().__init__(num_train_timesteps=num_train_timesteps)
        if beta_schedule not in BETA_SCHEDULES:
            raise ValueError(f"beta_schedule={beta_schedule!r} is not supported; supported: {BETA_SCHEDULES}")
        if trained_betas is not None:
            raise ValueError("trained_betas is not supported (must be None); supported: scaled_linear betas")
        if prediction_type not in PREDICTION_TYPES:
            raise ValueError(f"prediction_type={prediction_type!r} is not supported; supported: {PREDICTION_TYPES}")
        if timestep_spacing not in TIMESTEP_SPACINGS:
            raise ValueError(
                f"timestep_spacing={timestep_spacing!r} is not supported; supported: {TIMESTEP_SPACINGS}"
            )
        if isinstance(steps_offset, bool) or int(steps_offset) != steps_offset or steps_offset < 0:
            raise ValueError(f"steps_offset must be a non-negative integer, got {steps_offset!r}")
        if isinstance(snr_shift_scale, bool) or not np.isfinite(snr_shift_scale) or snr_shift_scale <= 0:
            raise ValueError(f"snr_shift_scale must be a finite positive number, got {snr_shift_scale!r}")
        self.beta_start = float(beta_start)
        self.beta_end = float(beta_end)
        self.beta_schedule = beta_schedule
        self.set_alpha_to_one = bool(set_alpha_to_one)
        self.steps_offset = int(steps_offset)
        self.prediction_type = prediction_type
        self.timestep_spacing = timestep_spacing
        self.rescale_betas_zero_snr = bool(rescale_betas_zero_snr)
        self.snr_shift_scale = float(snr_shift_scale)
        acp = _alphas_cumprod(
            self.num_train_timesteps,
            self.beta_start,
            self.beta_end,
            self.snr_shift_scale,
            self.rescale_betas_zero_snr,
        )
        acp.setflags(write=False)
        self.alphas_cumprod: np.ndarray = acp
        """Host float64 ``(num_train_timesteps,)`` cumulative alphas, diffusers' ``alphas_cumprod``."""
        self.final_alpha_cumprod = _f32(1.0) if self.set_alpha_to_one else acp[0]
        """alphas_cumprod used for ``prev_timestep < 0`` (float32 1.0 with ``set_alpha_to_one``)."""

    @property
    def config(self) -> dict[str, Any]:
        return {
            "num_train_timesteps": self.num_train_timesteps,
            "beta_start": self.beta_start,
            "beta_end": self.beta_end,
            "beta_schedule": self.beta_schedule,
            "set_alpha_to_one": self.set_alpha_to_one,
            "steps_offset": self.steps_offset,
            "prediction_type": self.prediction_type,
            "timestep_spacing": self.timestep_spacing,
            "rescale_betas_zero_snr": self.rescale_betas_zero_snr,
            "snr_shift_scale": self.snr_shift_scale,
        }

    # -- schedule --------------------------------------------------------

    def _alpha(self, t: int):
        """alphas_cumprod at training timestep ``t`` (``final_alpha_cumprod`` for ``t < 0``), host scalar."""
        return self.alphas_cumprod[t] if t >= 0 else self.final_alpha_cumprod

    def set_timesteps(self, num_inference_steps: int) -> SchedulerState:
        """Build the schedule for ``num_inference_steps`` steps.

        Returns:
          A fresh :class:`SchedulerState`: ``timesteps`` int64
          ``(num_inference_steps,)`` equal to diffusers' ``scheduler.timesteps``;
          ``sigmas`` float32 ``(num_inference_steps + 1,)``, the noise standard
          deviation ``sqrt(1 - alphas_cumprod)`` at each timestep, and last the
          one after the final step (``prev_timesteps[-1] < 0``: 0 with
          ``set_alpha_to_one``). Informational; the step uses ``alphas_cumprod``
          at ``timesteps`` and :meth:`prev_timesteps`.

        Raises:
          ValueError: if ``num_inference_steps`` is not an integer in
            ``[1, num_train_timesteps]``.
        """
        n = self._check_num_steps(num_inference_steps)
        if n > self.num_train_timesteps:
            raise ValueError(
                f"num_inference_steps={n} cannot be larger than num_train_timesteps={self.num_train_timesteps}"
            )
        ts = _timesteps(n, self.num_train_timesteps, self.timestep_spacing, self.steps_offset)
        if ts.min() < 0 or ts.max() >= self.num_train_timesteps:
            raise ValueError(
                f"timesteps {ts.tolist()} fall outside [0, {self.num_train_timesteps}) "
                f"(steps_offset={self.steps_offset})"
            )
        last = self._alpha(int(ts[-1]) - self.num_train_timesteps // n)  # prev_timesteps[-1]
        alphas = np.concatenate([self.alphas_cumprod[ts].astype(np.float64), [float(last)]])
        sigmas = np.sqrt(np.clip(1.0 - alphas, 0.0, None)).astype(np.float32)
        return SchedulerState(sigmas=sigmas, timesteps=ts)

    def prev_timesteps(self, state: SchedulerState) -> np.ndarray:
        """Target timestep of each step: ``timesteps - num_train_timesteps // num_inference_steps``.

        As diffusers' ``step`` computes ``prev_timestep``; a negative value means
        ``final_alpha_cumprod``. Not ``timesteps[1:]`` in general (for 30 steps,
        ``999 -> 966`` then ``966 -> 933`` while the next timestep is 932).

        Returns:
          int64 ``(num_inference_steps,)``.
        """
        return state.timesteps - self.num_train_timesteps // state.num_inference_steps

    def _prev_timestep(self, state: SchedulerState, i: int) -> int:
        return int(self.prev_timesteps(state)[i])

    def _x0_coefs(self, t: int) -> list:
        """[sqrt(a_t), sqrt(1 - a_t)] in the schedule's float64, as diffusers."""
        a_t = self.alphas_cumprod[t]
        if self.prediction_type == "epsilon" and a_t == 0:
            raise ValueError(
                f"prediction_type='epsilon' is undefined at timestep {t}, where alphas_cumprod is 0 "
                "(rescale_betas_zero_snr=True): x0 = (x - sqrt(1 - a) eps) / sqrt(a) divides by zero "
                "(diffusers returns inf/nan); use v_prediction or another timestep_spacing"
            )
        return [np.sqrt(a_t), np.sqrt(1 - a_t)]

    def scale_noise(self, state: SchedulerState, sample: jax.Array, noise: jax.Array, step_index: int) -> jax.Array:
        """Forward process ``sqrt(a) * sample + sqrt(1 - a) * noise`` at ``timesteps[step_index]``.

        Follows diffusers ``CogVideoX*Scheduler.add_noise`` (used by the
        video-to-video pipeline to noise the input latents): ``a`` is
        ``alphas_cumprod`` cast to float32 first and the square roots are
        float32.

        Args:
          state: a state from :meth:`set_timesteps`.
          sample: clean latents ``(B, F, C, H, W)``, float32 (other float
            dtypes are computed in float32 and cast back).
          noise: Gaussian noise of the same shape.
          step_index: the step the sampling loop will start at, in
            ``[0, num_inference_steps)``.

        Returns:
          The noised latents, in ``sample``'s dtype.

        Raises:
          ValueError: on a bad ``step_index`` or mismatched shapes.
        """
        i = self._check_index(state, step_index)
        if tuple(sample.shape) != tuple(noise.shape):
            raise ValueError(f"sample shape {tuple(sample.shape)} != noise shape {tuple(noise.shape)}")
        a = _f32(self.alphas_cumprod[int(state.timesteps[i])])
        c = np.array([np.sqrt(a), np.sqrt(_f32(1) - a)], dtype=np.float32)
        return _add_noise(sample, noise, c, np.int32(0))


class CogVideoXDDIMScheduler(_CogVideoXBase):
    """DDIM (deterministic) sampler of CogVideoX, at parity with diffusers ``CogVideoXDDIMScheduler``.

    Reference: ``diffusers/schedulers/scheduling_ddim_cogvideox.py``. Step ``i``
    at ``t = timesteps[i]``, ``t' = prev_timesteps[i]``, ``a = alphas_cumprod``::

        x0   = sqrt(a_t) x - sqrt(1 - a_t) v           (v_prediction)
        prev = sqrt((1 - a_t') / (1 - a_t)) x + (sqrt(a_t') - sqrt(a_t) sqrt((1 - a_t') / (1 - a_t))) x0

    (``eta`` is 0: diffusers accepts ``eta`` but never uses it.) The last step
    returns ``x0`` exactly.

    Args (diffusers' names and defaults; the CogVideoX checkpoints set
    ``prediction_type="v_prediction"``, ``timestep_spacing="trailing"``,
    ``rescale_betas_zero_snr=True`` and ``snr_shift_scale`` 3.0 (2B) / 1.0 (5B)):
      num_train_timesteps: training schedule length (1000).
      beta_start, beta_end: ends of the beta schedule (0.00085, 0.012).
      beta_schedule: ``"scaled_linear"`` only (diffusers' default, all CogVideoX checkpoints).
      trained_betas: must be None.
      set_alpha_to_one: the alphas_cumprod past the end is 1 (True) or ``alphas_cumprod[0]``.
      steps_offset: added to the timesteps with ``"leading"`` spacing.
      prediction_type: ``"v_prediction"``, ``"epsilon"`` (diffusers' default) or ``"sample"``.
      timestep_spacing: ``"trailing"``, ``"leading"`` (diffusers' default) or ``"linspace"``.
      rescale_betas_zero_snr: rescale to zero terminal SNR.
      snr_shift_scale: the SNR shift ``s`` (diffusers' default 3.0).

    Raises:
      ValueError: for an unsupported option value (naming the option), or a
        non-positive ``snr_shift_scale``.
    """

    def step(
        self, state: SchedulerState, model_output: jax.Array, sample: jax.Array, step_index: int
    ) -> tuple[jax.Array, SchedulerState]:
        """One DDIM step from ``timesteps[step_index]`` to ``prev_timesteps(state)[step_index]``.

        Args:
          state: from :meth:`set_timesteps` or a previous ``step`` (DDIM uses no
            history; steps may come in any order).
          model_output: the denoiser's prediction for ``sample`` at
            ``state.timesteps[step_index]`` (v for CogVideoX), ``(B, F, C, H, W)``,
            any float dtype (the CogVideoX pipeline passes float32).
          sample: the current latents, same shape, any float dtype.
          step_index: 0-based index in ``[0, num_inference_steps)``.

        Returns:
          ``(prev_sample, new_state)``. ``prev_sample`` has the dtype PyTorch's
          promotion gives diffusers (float32 if either input is float32; the
          pipeline then casts it to the transformer dtype). ``new_state`` holds
          this step's x0 prediction in ``model_outputs[-1]`` (same dtype) and
          ``prev_step_index = step_index``.

        Raises:
          ValueError: on a bad ``step_index``, mismatched shapes, or an epsilon
            prediction at a timestep with ``alphas_cumprod == 0``.
        """
        i = self._check_index(state, step_index)
        self._check_shapes(model_output, sample)
        t = int(state.timesteps[i])
        a_t = self.alphas_cumprod[t]
        a_p = self._alpha(self._prev_timestep(state, i))
        a = np.sqrt((1 - a_p) / (1 - a_t))
        b = np.sqrt(a_p) - np.sqrt(a_t) * a
        coefs = np.array(self._x0_coefs(t) + [a, b], dtype=np.float64).astype(np.float32)
        prev, x0 = _ddim_update(model_output, sample, coefs, np.int32(0), prediction_type=self.prediction_type)
        new_state = SchedulerState(
            sigmas=state.sigmas, timesteps=state.timesteps, model_outputs=(x0,), prev_step_index=i
        )
        return prev, new_state


class CogVideoXDPMScheduler(_CogVideoXBase):
    """Stochastic DPM-Solver++(2M) sampler of CogVideoX, at parity with diffusers ``CogVideoXDPMScheduler``.

    Reference: ``diffusers/schedulers/scheduling_dpm_cogvideox.py`` (after the
    original CogVideoX ``VPSDEDPMPP2MSampler``). Step ``i`` at ``t =
    timesteps[i]``, ``t' = prev_timesteps[i]``, ``lambda(a) = log sqrt(a / (1 - a))``,
    ``h = lambda(a_t') - lambda(a_t)``::

        x0   = sqrt(a_t) x - sqrt(1 - a_t) v                           (v_prediction)
        D    = x0                                      first order (first step, last step)
        D    = (1 + 1/(2r)) x0 - 1/(2r) x0_prev        second order, r = h_prev / h,
                                                       h_prev = lambda(a_t) - lambda(a_timesteps[i-1])
        prev = sqrt((1 - a_t') / (1 - a_t)) e^-h x - expm1(-2h) sqrt(a_t') D
               + sqrt(1 - a_t') sqrt(1 - e^-2h) noise

    It is stochastic: every step takes fresh standard normal ``noise`` (the
    last step multiplies it by 0). The previous step's x0 prediction (diffusers'
    ``old_pred_original_sample``) and the previous timestep (diffusers'
    ``timestep_back``) come from the state, so the caller passes neither.

    Args: as :class:`CogVideoXDDIMScheduler` (same names, defaults and checkpoint values).

    Raises:
      ValueError: for an unsupported option value (naming the option).
    """

    def _coefficients(self, t: int, t_prev: int, t_back: int | None) -> np.ndarray:
        """float32 [sqrt(a_t), sqrt(1-a_t), mult1, mult2, mult_noise, mult3, mult4], op by op as diffusers."""
        with np.errstate(all="ignore"):  # zero SNR: log(0) = -inf at t = T-1; t' < 0: h = +inf
            a_t = self.alphas_cumprod[t]
            a_p = self._alpha(t_prev)
            lamb = np.log(np.sqrt(a_t / (1 - a_t)))
            lamb_next = np.log(np.sqrt(a_p / (1 - a_p)))
            h = lamb_next - lamb
            mult1 = np.sqrt((1 - a_p) / (1 - a_t)) * np.exp(-h)
            mult2 = np.expm1(-2 * h) * np.sqrt(a_p)
            mult_noise = np.sqrt(1 - a_p) * np.sqrt(1 - np.exp(-2 * h))
            mult3 = mult4 = 0.0
            if t_back is not None:
                a_b = self.alphas_cumprod[t_back]
                lamb_previous = np.log(np.sqrt(a_b / (1 - a_b)))
                r = (lamb - lamb_previous) / h
                mult3 = 1 + 1 / (2 * r)
                mult4 = 1 / (2 * r)
            vals = self._x0_coefs(t) + [mult1, mult2, mult_noise, mult3, mult4]
            return np.array([np.float64(v) for v in vals]).astype(np.float32)

    def step(
        self,
        state: SchedulerState,
        model_output: jax.Array,
        sample: jax.Array,
        step_index: int,
        *,
        noise: jax.Array | None = None,
        key: jax.Array | None = None,
    ) -> tuple[jax.Array, SchedulerState]:
        """One DPM-Solver++ step from ``timesteps[step_index]`` to ``prev_timesteps(state)[step_index]``.

        Second order when the state holds the previous step's x0 (i.e. from the
        second consecutive step on) and the target timestep is >= 0; first order
        otherwise, exactly as diffusers with the pipeline passing
        ``old_pred_original_sample`` and ``timestep_back = timesteps[i - 1]``
        (``None`` at the first step of the loop).

        Args:
          state: from :meth:`set_timesteps` or the previous ``step``. After the
            first call on a state, steps must be consecutive (the first may
            start at any index, as the video-to-video pipeline does).
          model_output: the denoiser's prediction for ``sample`` at
            ``state.timesteps[step_index]`` (v for CogVideoX), ``(B, F, C, H, W)``,
            any float dtype (the CogVideoX pipeline passes float32).
          sample: the current latents, same shape, any float dtype.
          step_index: 0-based index in ``[0, num_inference_steps)``.
          noise: standard normal noise shaped like ``sample`` (cast to
            ``sample``'s dtype, as diffusers draws it in that dtype).
          key: instead of ``noise``, a ``jax.random`` key: the noise is
            ``jax.random.normal(key, sample.shape, float32)`` cast to
            ``sample``'s dtype. Pass exactly one of ``noise`` and ``key``;
            use a fresh key per step (e.g. ``jax.random.fold_in(key, i)``).

        Returns:
          ``(prev_sample, new_state)``. ``prev_sample`` has PyTorch's promoted
          dtype as in diffusers (float32 if either input is float32).
          ``new_state.model_outputs == (x0,)``, this step's x0 prediction
          (diffusers' returned ``pred_original_sample``).

        Raises:
          ValueError: on a bad or non-consecutive ``step_index``, mismatched
            shapes, both or neither of ``noise``/``key``, or an epsilon
            prediction at a timestep with ``alphas_cumprod == 0``.
        """
        i = self._check_index(state, step_index)
        self._check_shapes(model_output, sample)
        if (noise is None) == (key is None):
            raise ValueError("CogVideoXDPMScheduler.step needs exactly one of noise= or key= (fresh per step)")
        if key is not None:
            noise = jax.random.normal(key, sample.shape, jnp.float32)
        elif tuple(noise.shape) != tuple(sample.shape):
            raise ValueError(f"noise shape {tuple(noise.shape)} != sample shape {tuple(sample.shape)}")
        noise = jnp.asarray(noise).astype(sample.dtype)
        if state.prev_step_index >= 0 and i != state.prev_step_index + 1:
            raise ValueError(
                f"DPM steps must be consecutive: previous step_index was {state.prev_step_index}, got {i}; "
                "call set_timesteps for a fresh state to restart"
            )
        t = int(state.timesteps[i])
        t_prev = self._prev_timestep(state, i)
        has_history = bool(state.model_outputs) and state.prev_step_index == i - 1
        t_back = int(state.timesteps[i - 1]) if has_history else None
        second_order = has_history and t_prev >= 0
        coefs = self._coefficients(t, t_prev, t_back)
        prev, x0 = _dpm_update(
            model_output,
            sample,
            state.model_outputs[-1] if second_order else None,
            noise,
            coefs,
            np.int32(0),
            prediction_type=self.prediction_type,
            second_order=second_order,
        )
        new_state = SchedulerState(
            sigmas=state.sigmas, timesteps=state.timesteps, model_outputs=(x0,), prev_step_index=i
        )
        return prev, new_state
