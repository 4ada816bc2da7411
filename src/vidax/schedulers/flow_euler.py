"""Flow-matching Euler sampler, with static or resolution-dependent (dynamic) time shift.

Reference: diffusers ``schedulers/scheduling_flow_match_euler_discrete.py``,
class ``FlowMatchEulerDiscreteScheduler``: static ``shift`` (Wan) or
``use_dynamic_shifting`` with ``mu`` (LTX-Video, Flux; ``time_shift_type``
"exponential" or "linear"), ``shift_terminal``, custom ``sigmas`` and/or
``timesteps`` and the per-token step of ``pipelines/ltx/pipeline_ltx_condition.py``.
``stochastic_sampling`` (the re-noising step of LTX-Video 0.9.6-distilled and the distilled Cosmos3 checkpoints)
takes its standard normal noise from the caller (``noise=`` or a ``jax.random`` ``key=``), so it is refused by
:func:`vidax.schedulers.scheduler_from_config` unless the pipeline says it supplies it (``allow_stochastic=True``).
Not implemented (refused): karras/exponential/beta sigmas, ``invert_sigmas`` (Mochi).

The schedule is built in numpy with the very operations (and therefore the
dtypes: float64 on the default path, float32 once custom sigmas or timesteps
are given) that diffusers uses, so it equals diffusers' value for value.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .base import Scheduler, SchedulerState, divide, rounded

_f32 = np.float32
TIME_SHIFT_TYPES = ("exponential", "linear")


def calculate_shift(
    image_seq_len: int,
    base_seq_len: int = 256,
    max_seq_len: int = 4096,
    base_shift: float = 0.5,
    max_shift: float = 1.15,
) -> float:
    """The dynamic-shift ``mu`` for a token count: linear from ``base_shift`` at ``base_seq_len`` to ``max_shift`` at ``max_seq_len``.

    ``mu = image_seq_len * m + b`` with ``m = (max_shift - base_shift) /
    (max_seq_len - base_seq_len)`` and ``b = base_shift - m * base_seq_len``,
    evaluated in Python floats in diffusers' order (not clipped: token counts
    beyond ``max_seq_len`` extrapolate). LTX-Video passes its scheduler
    config's ``base_image_seq_len``, ``max_image_seq_len``, ``base_shift`` and
    ``max_shift`` (attributes of :class:`FlowMatchEulerScheduler`) and
    ``image_seq_len = latent_frames * latent_height * latent_width``; the
    result goes to ``set_timesteps(mu=...)``.

    Reference: diffusers ``pipelines/flux/pipeline_flux.py`` ``calculate_shift``
    (copied into ``pipelines/ltx/pipeline_ltx.py``).

    Args:
      image_seq_len: number of latent tokens (after patchifying).
      base_seq_len, max_seq_len: the two anchor token counts.
      base_shift, max_shift: ``mu`` at those anchors.

    Returns:
      ``mu`` as a Python float.

    Raises:
      ValueError: if ``base_seq_len == max_seq_len`` or an argument is not a finite number.
    """
    for name, v in (
        ("image_seq_len", image_seq_len), ("base_seq_len", base_seq_len), ("max_seq_len", max_seq_len),
        ("base_shift", base_shift), ("max_shift", max_shift),
    ):  # fmt: skip
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v):
            raise ValueError(f"calculate_shift: {name} must be a finite number, got {v!r}")
    if max_seq_len == base_seq_len:
        raise ValueError(f"calculate_shift: max_seq_len must differ from base_seq_len (both {base_seq_len})")
    m = (max_shift - base_shift) / (max_seq_len - base_seq_len)
    b = base_shift - m * base_seq_len
    mu = image_seq_len * m + b
    return float(mu)


def _shift_f32(sigma: np.float32, flow_shift: float) -> np.float32:
    """``s * sigma / (1 + (s - 1) * sigma)`` rounded as torch float32 does it (scalar cast first)."""
    return (_f32(flow_shift) * sigma) / (_f32(1.0) + _f32(flow_shift - 1.0) * sigma)


@jax.jit
def _euler_update(model_output: jax.Array, sample: jax.Array, dt: jax.Array, zero: jax.Array) -> jax.Array:
    prev = sample.astype(jnp.float32) + rounded(dt * model_output.astype(jnp.float32), zero)
    return prev.astype(model_output.dtype)


@jax.jit
def _stochastic_update(
    model_output: jax.Array, sample: jax.Array, noise: jax.Array, sigma: jax.Array, sigma_next: jax.Array,
    zero: jax.Array,
) -> jax.Array:
    # diffusers (stochastic_sampling): x0 = sample - sigma * v; prev = (1 - sigma_next) * x0 + sigma_next * noise,
    # op by op in float32 (each product rounded before its add, as torch computes it), cast to v's dtype.
    x0 = sample.astype(jnp.float32) - rounded(sigma * model_output.astype(jnp.float32), zero)
    prev = rounded((jnp.float32(1.0) - sigma_next) * x0, zero) + rounded(sigma_next * noise.astype(jnp.float32), zero)
    return prev.astype(model_output.dtype)


@jax.jit
def _euler_update_per_token(
    model_output: jax.Array, sample: jax.Array, timesteps: jax.Array, sigmas: jax.Array, n_train: jax.Array,
    zero: jax.Array,
) -> jax.Array:
    # diffusers: per-token sigma = t / N (a true division); next sigma = the largest schedule
    # sigma below it by more than 1e-6 (0 if none); dt = current - next, applied to the model
    # output as given (the LTX pipeline passes -velocity), the result left in float32.
    sig = divide(timesteps.astype(jnp.float32), n_train)
    table = sigmas.reshape(sigmas.shape + (1,) * sig.ndim)
    lower = jnp.max(jnp.where(table < (sig - jnp.float32(1e-6))[None], table, jnp.float32(0.0)), axis=0)
    dt = (sig - lower)[..., None]
    return sample.astype(jnp.float32) + rounded(dt * model_output.astype(jnp.float32), zero)


def _as_schedule(name: str, values: Any, hi: float) -> np.ndarray:
    """Custom sigmas/timesteps as diffusers reads them (``np.array(v).astype(np.float32)``), checked."""
    try:
        arr = np.array(values).astype(np.float32)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} must be a 1-D sequence of numbers, got {values!r}") from e
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(arr > hi):
        raise ValueError(f"{name} must be finite and in [0, {hi:g}], got {arr.tolist()}")
    return arr


class FlowMatchEulerScheduler(Scheduler):
    """First-order Euler sampler for flow-matching (rectified flow) models.

    Follows diffusers ``FlowMatchEulerDiscreteScheduler`` (file
    ``scheduling_flow_match_euler_discrete.py``) with ``shift=flow_shift``:

    * ``sigma_max``/``sigma_min`` are the float32 ends of the training schedule,
      ``1.0`` and ``1 / num_train_timesteps``, shifted by ``flow_shift`` unless
      ``use_dynamic_shifting``.
    * ``set_timesteps(n)`` spaces ``n`` timesteps linearly between
      ``sigma_max * N`` and ``sigma_min * N`` in float64, divides by ``N`` and
      shifts *again* (a diffusers quirk: with a static shift the ends are
      shifted twice; with dynamic shifting once, by ``mu``), optionally
      stretches to ``shift_terminal``, casts to float32 and appends a final 0.
    * Custom ``sigmas`` (and/or ``timesteps``) are cast to float32 first and
      then shifted (and stretched) the same way, in float32.
    * ``timesteps = sigmas[:-1] * N`` in float32 (not rounded), unless custom
      ``timesteps`` were given: then those, as float32, unchanged.
    * ``step``: ``prev = sample + (sigmas[i+1] - sigmas[i]) * model_output``.

    The shift, for a sigma ``t``: static ``s * t / (1 + (s - 1) * t)``;
    dynamic exponential ``e^mu / (e^mu + (1 / t - 1))``; dynamic linear
    ``mu / (mu + (1 / t - 1))``. ``shift_terminal`` then maps
    ``t -> 1 - (1 - t) * (1 - shift_terminal) / (1 - t_last)`` so that the last
    sigma before the final 0 equals ``shift_terminal`` (LTX-Video ``rf.py``).

    Args:
      num_train_timesteps: training schedule length ``N`` (default 1000).
      flow_shift: static time shift (diffusers ``shift``); Wan uses 3.0 at 480p
        and 5.0 at 720p. Unused with ``use_dynamic_shifting``.
      use_dynamic_shifting: shift by ``mu`` given at :meth:`set_timesteps`
        (computed by :func:`calculate_shift` from the token count) instead of
        ``flow_shift``.
      base_shift, max_shift, base_image_seq_len, max_image_seq_len: the
        config's anchors for :func:`calculate_shift`; stored for the pipeline,
        not used by the scheduler itself (the shifts may be ``None``, as diffusers allows).
      shift_terminal: if set (not ``None``/0), the last sigma before the final
        0, in ``(0, 1)``.
      time_shift_type: ``"exponential"`` (default) or ``"linear"``.
      stochastic_sampling: diffusers' re-noising step (see :meth:`step`):
        ``x0 = sample - sigma * v``, ``prev = (1 - sigma_next) x0 + sigma_next noise``
        with fresh standard normal noise every step (the distilled Cosmos3
        and LTX-Video 0.9.6-distilled samplers).

    Raises:
      ValueError: for a non-positive ``flow_shift`` or ``num_train_timesteps``,
        a ``shift_terminal`` outside ``[0, 1)``, an unknown ``time_shift_type``,
        or a non-bool ``use_dynamic_shifting`` or ``stochastic_sampling``.
    """

    def __init__(
        self,
        num_train_timesteps: int = 1000,
        flow_shift: float = 1.0,
        *,
        use_dynamic_shifting: bool = False,
        base_shift: float | None = 0.5,
        max_shift: float | None = 1.15,
        base_image_seq_len: int = 256,
        max_image_seq_len: int = 4096,
        shift_terminal: float | None = None,
        time_shift_type: str = "exponential",
        stochastic_sampling: bool = False,
    ):
        super().__init__(num_train_timesteps=num_train_timesteps, flow_shift=flow_shift)
        if not isinstance(use_dynamic_shifting, (bool, np.bool_)):
            raise ValueError(f"use_dynamic_shifting must be a bool, got {use_dynamic_shifting!r}")
        if not isinstance(stochastic_sampling, (bool, np.bool_)):
            raise ValueError(f"stochastic_sampling must be a bool, got {stochastic_sampling!r}")
        self.stochastic_sampling = bool(stochastic_sampling)
        if time_shift_type not in TIME_SHIFT_TYPES:
            raise ValueError(f"time_shift_type must be one of {TIME_SHIFT_TYPES}, got {time_shift_type!r}")
        if shift_terminal is not None and (
            shift_terminal is True
            or not isinstance(shift_terminal, (int, float, np.integer, np.floating))
            or not 0 <= shift_terminal < 1
        ):
            raise ValueError(f"shift_terminal must be None or a number in [0, 1), got {shift_terminal!r}")
        for name, v, allow_none in (
            ("base_shift", base_shift, True), ("max_shift", max_shift, True),
            ("base_image_seq_len", base_image_seq_len, False), ("max_image_seq_len", max_image_seq_len, False),
        ):  # fmt: skip
            if v is None and allow_none:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v):
                raise ValueError(f"{name} must be a finite number{' or None' if allow_none else ''}, got {v!r}")
        self.use_dynamic_shifting = bool(use_dynamic_shifting)
        self.base_shift = None if base_shift is None else float(base_shift)
        self.max_shift = None if max_shift is None else float(max_shift)
        self.base_image_seq_len = base_image_seq_len
        self.max_image_seq_len = max_image_seq_len
        # diffusers tests `if shift_terminal:`; None, 0 and False all mean off.
        self.shift_terminal = float(shift_terminal) if shift_terminal else None
        self.time_shift_type = time_shift_type

        n = _f32(self.num_train_timesteps)
        one, lo = n / n, _f32(1.0) / n  # float32, as diffusers' torch tensors
        if not self.use_dynamic_shifting:
            one, lo = _shift_f32(one, self.flow_shift), _shift_f32(lo, self.flow_shift)
        self.sigma_max = float(one)
        self.sigma_min = float(lo)

    # -- schedule --------------------------------------------------------

    def _time_shift(self, mu: float, t: np.ndarray) -> np.ndarray:
        sigma = 1.0  # diffusers calls time_shift(mu, 1.0, sigmas): `** 1.0` kept as it computes it
        with np.errstate(divide="ignore"):  # t == 0 -> 1 / t = inf -> shifted sigma 0, as diffusers
            if self.time_shift_type == "exponential":
                return math.exp(mu) / (math.exp(mu) + (1 / t - 1) ** sigma)
            return mu / (mu + (1 / t - 1) ** sigma)

    def _stretch_to_terminal(self, t: np.ndarray) -> np.ndarray:
        one_minus_z = 1 - t
        if one_minus_z[-1] == 0:
            raise ValueError(
                "shift_terminal: the last shifted sigma is 1, so the schedule cannot be stretched to end at "
                f"{self.shift_terminal} (diffusers returns NaN here); use more steps or a last sigma below 1"
            )
        scale_factor = one_minus_z[-1] / (1 - self.shift_terminal)
        return 1 - (one_minus_z / scale_factor)

    def set_timesteps(
        self,
        num_inference_steps: int | None = None,
        *,
        sigmas: Sequence[float] | np.ndarray | None = None,
        timesteps: Sequence[float] | np.ndarray | None = None,
        mu: float | None = None,
    ) -> SchedulerState:
        """Build the Euler schedule, as diffusers' ``set_timesteps`` does.

        Args:
          num_inference_steps: number of steps; optional when ``sigmas`` or
            ``timesteps`` are given (then it must equal their length).
          sigmas: custom sigmas (noise levels in ``[0, 1]``, one per step, e.g.
            LTX-Video's ``np.linspace(1.0, 1 / n, n)``); cast to float32, then
            shifted (``flow_shift`` or ``mu``) and stretched to
            ``shift_terminal`` like the default schedule.
          timesteps: custom timesteps in ``[0, num_train_timesteps]`` (e.g. the
            distilled LTX-Video list ``[1000, 993, 987, 981, 975, 909, 725,
            0.03]``); returned as given (float32). Without ``sigmas`` the sigmas
            are ``timesteps / N`` shifted and stretched as above, so they match
            the timesteps only when the shift is the identity (a warning says
            so otherwise, as diffusers logs). With ``sigmas`` they are independent.
          mu: the dynamic shift (see :func:`calculate_shift`); required with
            ``use_dynamic_shifting``, ignored without it (as diffusers does, so a
            pipeline may always pass it).

        Returns:
          A :class:`SchedulerState` with ``sigmas`` float32 ``(n + 1,)`` ending
          in 0 and ``timesteps`` float32 ``(n,)``, equal to diffusers'
          ``scheduler.sigmas`` / ``scheduler.timesteps``.

        Raises:
          ValueError: if ``use_dynamic_shifting`` and ``mu`` is missing or not
            finite (or not positive, for the linear shift); if neither
            ``num_inference_steps`` nor ``sigmas``/``timesteps`` is given; if
            ``num_inference_steps`` is not a positive integer; if ``sigmas`` and
            ``timesteps`` differ in length, or either differs from
            ``num_inference_steps``; if custom values are empty, not 1-D, not
            finite or out of range; if ``shift_terminal`` is set and the last
            shifted sigma is 1 (diffusers would produce NaN).
        """
        n_train = self.num_train_timesteps
        if self.use_dynamic_shifting:
            if mu is None:
                raise ValueError(
                    "mu must be passed to set_timesteps when use_dynamic_shifting is True "
                    "(e.g. mu = calculate_shift(num_tokens, base_image_seq_len, max_image_seq_len, base_shift, max_shift))"
                )
            if isinstance(mu, bool) or not isinstance(mu, (int, float, np.integer, np.floating)) or not math.isfinite(mu):
                raise ValueError(f"mu must be a finite number, got {mu!r}")
            mu = float(mu)
            if self.time_shift_type == "linear" and mu <= 0:
                raise ValueError(f"mu must be > 0 for time_shift_type='linear', got {mu}")
        custom_s = None if sigmas is None else _as_schedule("sigmas", sigmas, 1.0)
        custom_t = None if timesteps is None else _as_schedule("timesteps", timesteps, float(n_train))
        if custom_s is not None and custom_t is not None and len(custom_s) != len(custom_t):
            raise ValueError(f"sigmas ({len(custom_s)}) and timesteps ({len(custom_t)}) must have the same length")
        if num_inference_steps is not None:
            n_steps = self._check_num_steps(num_inference_steps)
            for name, arr in (("sigmas", custom_s), ("timesteps", custom_t)):
                if arr is not None and len(arr) != n_steps:
                    raise ValueError(
                        f"{name} has {len(arr)} values but num_inference_steps={n_steps}; they must agree "
                        "(or leave num_inference_steps out)"
                    )
        elif custom_s is None and custom_t is None:
            raise ValueError("set_timesteps needs num_inference_steps, sigmas or timesteps")
        else:
            n_steps = len(custom_s if custom_s is not None else custom_t)

        # The operations below are diffusers' own, on the same numpy dtypes.
        if custom_s is None:
            if custom_t is None:
                t = np.linspace(self.sigma_max * n_train, self.sigma_min * n_train, n_steps)  # float64
            else:
                t = custom_t  # float32
            s = t / n_train
        else:
            s = custom_s
        if self.use_dynamic_shifting:
            s = self._time_shift(mu, s)
        else:
            s = self.flow_shift * s / (1 + (self.flow_shift - 1) * s)
        if self.shift_terminal:
            s = self._stretch_to_terminal(s)

        s32 = np.asarray(s).astype(np.float32)
        if custom_t is not None:
            ts = custom_t
            if custom_s is None and not np.allclose(s32 * _f32(n_train), ts, rtol=1e-5, atol=1e-3):
                warnings.warn(
                    "timesteps were passed without sigmas: the timesteps are used as given while the sigmas "
                    "derived from them were shifted"
                    + (" and stretched to shift_terminal" if self.shift_terminal else "")
                    + ", so the two disagree (diffusers does the same); pass sigmas too to control both",
                    stacklevel=2,
                )
        else:
            ts = s32 * _f32(n_train)
        sigmas_out = np.concatenate([s32, np.zeros(1, np.float32)])
        return SchedulerState(sigmas=sigmas_out, timesteps=ts)

    # -- step ------------------------------------------------------------

    def step(
        self,
        state: SchedulerState,
        model_output: jax.Array,
        sample: jax.Array,
        step_index: int,
        *,
        per_token_timesteps: jax.Array | np.ndarray | None = None,
        noise: jax.Array | np.ndarray | None = None,
        key: jax.Array | None = None,
    ) -> tuple[jax.Array, SchedulerState]:
        """One Euler step from ``sigmas[step_index]`` to ``sigmas[step_index + 1]``.

        Args:
          state: from :meth:`set_timesteps` (returned unchanged: Euler keeps no history).
          model_output: flow prediction, any shape (``(B, C, T, H, W)`` or packed
            ``(B, S, C)``), any float dtype.
          sample: current latents, same shape, any float dtype.
          step_index: 0-based step index in ``[0, num_inference_steps)``.
          per_token_timesteps: optional per-token timesteps (diffusers'
            ``per_token_timesteps``, LTX-Video condition pipeline), shape
            ``sample.shape[:-1]`` or broadcastable to it (e.g. ``(B, 1)`` for
            ``(B, S, C)`` latents), in ``[0, num_train_timesteps]``, cast to
            float32. Then each token steps from ``sigma = t / N`` to the largest
            schedule sigma below ``sigma - 1e-6`` (0 if none), with
            ``dt = sigma - next`` (positive, so the LTX pipeline passes minus
            the velocity), and ``step_index`` is only checked, not used.
            Not with ``stochastic_sampling`` (no release combines them).
          noise: with ``stochastic_sampling``, the step's standard normal noise
            shaped like ``sample`` (diffusers draws ``randn_tensor(sample.shape,
            generator)`` in float32 at every step, the last one included, where
            ``sigma_next = 0`` multiplies it away).
          key: instead of ``noise``, a ``jax.random`` key: the noise is
            ``jax.random.normal(key, sample.shape, float32)``. With
            ``stochastic_sampling`` pass exactly one of ``noise`` and ``key``
            (a fresh one per step, e.g. ``jax.random.fold_in(key, i)``); without
            it, neither.

        Returns:
          ``(prev_sample, state)``. ``prev_sample = sample + dt * model_output``
          is computed in float32 and cast to ``model_output.dtype``, as diffusers
          does (diffusers multiplies ``dt * model_output`` in the model output's
          dtype; here it is float32, identical for float32 inputs). With
          ``per_token_timesteps`` it stays float32, as in diffusers. With
          ``stochastic_sampling``: ``x0 = sample - sigma * model_output``,
          ``prev = (1 - sigma_next) * x0 + sigma_next * noise`` in float32, cast
          to ``model_output.dtype``.

        Raises:
          ValueError: on a bad ``step_index``, mismatched shapes/dtypes,
            ``per_token_timesteps`` that do not broadcast to ``sample.shape[:-1]``,
            noise missing (or both ``noise`` and ``key``) for a stochastic step,
            noise given to a deterministic one, or noise of the wrong shape.
        """
        i = self._check_index(state, step_index)
        self._check_shapes(model_output, sample)
        if not self.stochastic_sampling:
            if noise is not None or key is not None:
                raise ValueError("FlowMatchEulerScheduler.step: noise/key given but stochastic_sampling is off")
        else:
            if per_token_timesteps is not None:
                raise ValueError("FlowMatchEulerScheduler.step: per_token_timesteps with stochastic_sampling is "
                                 "not supported")
            if (noise is None) == (key is None):
                raise ValueError("FlowMatchEulerScheduler.step: stochastic_sampling needs exactly one of noise= or "
                                 "key= (fresh per step)")
            if key is not None:
                noise = jax.random.normal(key, tuple(sample.shape), jnp.float32)
            elif tuple(np.shape(noise)) != tuple(sample.shape):
                raise ValueError(f"noise of shape {tuple(np.shape(noise))} must have the sample's shape "
                                 f"{tuple(sample.shape)}")
            sigma, sigma_next = state.sigmas[i], state.sigmas[i + 1]  # float32 host scalars
            prev = _stochastic_update(model_output, sample, jnp.asarray(noise), _f32(sigma), _f32(sigma_next),
                                      np.int32(0))
            return prev, state
        if per_token_timesteps is not None:
            tpt = jnp.asarray(per_token_timesteps)
            lead = tuple(sample.shape[:-1])
            try:
                fits = tpt.ndim == len(lead) and np.broadcast_shapes(tuple(tpt.shape), lead) == lead
            except ValueError:
                fits = False
            if not fits or not (jnp.issubdtype(tpt.dtype, jnp.floating) or jnp.issubdtype(tpt.dtype, jnp.integer)):
                raise ValueError(
                    f"per_token_timesteps of shape {tuple(tpt.shape)} ({tpt.dtype}) must be real numbers with "
                    f"one entry per token: shape sample.shape[:-1] = {lead} or broadcastable to it"
                )
            prev = _euler_update_per_token(
                model_output, sample, tpt, jnp.asarray(state.sigmas, jnp.float32), _f32(self.num_train_timesteps),
                np.int32(0),
            )
            return prev, state
        dt = state.sigmas[i + 1] - state.sigmas[i]  # float32 host scalar, as torch computes it
        prev = _euler_update(model_output, sample, _f32(dt), np.int32(0))
        return prev, state

    @property
    def config(self) -> dict[str, Any]:
        return {
            "num_train_timesteps": self.num_train_timesteps,
            "flow_shift": self.flow_shift,
            "use_dynamic_shifting": self.use_dynamic_shifting,
            "base_shift": self.base_shift,
            "max_shift": self.max_shift,
            "base_image_seq_len": self.base_image_seq_len,
            "max_image_seq_len": self.max_image_seq_len,
            "shift_terminal": self.shift_terminal,
            "time_shift_type": self.time_shift_type,
            "stochastic_sampling": self.stochastic_sampling,
        }
