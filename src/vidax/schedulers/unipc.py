"""Flow-matching UniPC multistep sampler (UniP predictor + UniC corrector).

Reference: diffusers ``schedulers/scheduling_unipc_multistep.py``, class
``UniPCMultistepScheduler``, in the configuration of the Wan2.1/2.2 diffusers
checkpoints: ``prediction_type="flow_prediction"``, ``use_flow_sigmas=True``,
``predict_x0=True``, ``solver_type="bh2"`` (``"bh1"`` also supported),
``solver_order=2``, ``lower_order_final=True``, ``final_sigmas_type="zero"``,
``disable_corrector=[]``, no thresholding, no ``solver_p``. Paper: Zhao et al.,
"UniPC: A Unified Predictor-Corrector Framework for Fast Sampling of Diffusion
Models" (arXiv:2302.04867).

The sigma grid is diffusers' by default; ``sigma_grid="wan"`` builds the Wan
repository's instead (``wan/utils/fm_solvers_unipc.py``, class
``FlowUniPCMultistepScheduler``, as ``wan/text2video.py`` / ``image2video.py``
construct it, Wan2.1 and Wan2.2 alike). Only the grid differs: that class's
step (predictor, corrector, order warm-up, ``lower_order_final``, the final
sigma 0) is diffusers' step, operation for operation, for this configuration.

Two Karras grids serve Cosmos-Predict2.5 (docs/design.md, "Cosmos-Predict2.5",
"Schedule"). ``sigma_grid="karras"`` is diffusers' ``use_karras_sigmas=True``
with ``use_flow_sigmas=True`` (the converted Cosmos-Predict2.5 folders:
``sigma_min=0.01``, ``sigma_max=200``): ``n`` Karras sigmas (rho 7) mapped by
``s -> s / (1 + s)``, no shift. ``sigma_grid="cosmos"`` is the
Cosmos-Predict2.5 repository's (``cosmos_predict2/_src/predict2/models/
fm_solvers_unipc.py``, ``FlowUniPCMultistepScheduler.set_timesteps(...,
use_kerras_sigma=True)``): the same map of ``n + 1`` Karras points (its ramp is
``arange(n + 1) / n``), so ``set_timesteps(n)`` gives ``n + 1`` steps, and
diffusers' grid of ``n + 1`` steps equals it bit for bit (diffusers' default of
36 steps is the repository's 35). That class's step is diffusers' step as well
(a copy of diffusers 0.31's code; only tensor constructors differ). The value
the denoiser's timestep embedding receives also differs: diffusers' Cosmos
pipeline passes ``sigmas[i]``; the repository passes the truncated int64
timestep, which its network multiplies by ``timestep_scale=0.001`` in float32
(:func:`scale_timesteps`). :attr:`SchedulerState.model_timesteps` holds it.

``sigma_grid="native"`` is the grid diffusers' Cosmos3 pipeline passes to
``set_timesteps(sigmas=...)`` when its config sets ``use_native_flow_schedule``
(``pipeline_cosmos3_omni.py``): ``linspace(1 - 1/num_train_timesteps, 0, n + 1)[:-1]``
in float64, then diffusers' flow branch as for its own grid (the ``flow_shift``
shift, the 1e-6 lowering of a first sigma within 1e-6 of 1, truncated int64
timesteps, a final 0). It differs from ``"wan"`` only in its top, the float64
``1 - 1/N`` instead of that value rounded to float32.

Numerics follow diffusers exactly: the schedule is built in float64 and stored
as float32; every scalar coefficient is rounded to float32 after each
operation as diffusers' 0-dim float32 torch tensors are (log and expm1 are
evaluated in float64 and rounded, i.e. correctly rounded float32); the array
update is done in float32 by a jitted JAX function.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .base import Scheduler, SchedulerState, divide, rounded

_f32 = np.float32
SOLVER_TYPES = ("bh1", "bh2")
FINAL_SIGMAS_TYPES = ("zero", "sigma_min")
SIGMA_GRIDS = ("diffusers", "wan", "karras", "cosmos", "native")
KARRAS_GRIDS = ("karras", "cosmos")
MODEL_TIMESTEPS_TYPES = ("timesteps", "sigmas", "scaled_timesteps")
# fm_solvers_unipc.py hard-codes these for use_kerras_sigma=True ("the exact sigma used in edm sampler").
COSMOS_SIGMA_MIN = 0.01
COSMOS_SIGMA_MAX = 200.0
COSMOS_RHO = 7.0


def scale_timesteps(timesteps: Any, timestep_scale: float = 0.001) -> np.ndarray:
    """The Cosmos-Predict2.5 network's internal timestep rescaling, ``timesteps * timestep_scale``, in float32.

    Reference: the Cosmos-Predict2.5 repository, ``networks/minimal_v1_lvg_dit.py``,
    ``MinimalV1LVGDiT.forward`` (``timesteps_B_T * self.timestep_scale``, with
    ``timestep_scale=0.001`` in every released experiment): the timesteps are a
    float32 (or int64) tensor there, so the product is ``float32(t) *
    float32(timestep_scale)`` rounded to float32 -- which differs from
    ``float32(t / 1000)`` by an ulp for 584 of the 1001 integers 0..1000.
    The sinusoidal embedding then sees values in [0, 1], not [0, 1000].

    Args:
      timesteps: int64 timesteps (the sampler's ``state.timesteps``) or float
        values on the same 0..``num_train_timesteps`` scale (e.g. the
        repository's ``conditional_frame_timestep``, 0.1), any shape.
      timestep_scale: the network's scale (0.001).

    Returns:
      A float32 ``np.ndarray`` of the same shape.
    """
    return (np.asarray(timesteps).astype(np.float32) * np.float32(timestep_scale)).astype(np.float32)


def _check_sigma_bound(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise ValueError(f"{name}={value!r} must be a number")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}={value!r} must be a finite positive number")
    return float(value)


def _log32(x: np.float32) -> np.float32:
    x = float(x)
    return _f32(-np.inf) if x == 0.0 else _f32(math.log(x))


def _expm1_32(x: np.float32) -> np.float32:
    return _f32(math.expm1(float(x)))


def _lambda32(sigma: np.float32) -> np.float32:
    """Half log-SNR of the flow schedule: ``log(1 - sigma) - log(sigma)`` in float32."""
    return _log32(_f32(1.0) - sigma) - _log32(sigma)


def _pow32(x: np.float32, p: int) -> np.float32:
    # torch.pow(float32, int) special-cases 0..3 as products; beyond, std::pow.
    if p == 0:
        return _f32(1.0)
    if p == 1:
        return x
    if p == 2:
        return x * x
    if p == 3:
        return x * x * x
    return _f32(float(x) ** p)


def _fma32(a: np.float32, b: np.float32, c: np.float32) -> np.float32:
    """``a * b + c`` with a single float32 rounding (the product is exact in float64)."""
    return _f32(np.float64(a) * np.float64(b) + np.float64(c))


def _solve32(R: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Solve ``R x = b`` in float32 as diffusers' ``torch.linalg.solve`` does on CPU.

    For 2x2 systems (the order-2 corrector, i.e. the Wan configuration) this
    is LAPACK ``sgesv`` step by step as PyTorch's CPU build (MKL) runs it:
    partial pivoting, fused multiply-add updates and substitution by
    reciprocal multiplication; it reproduces torch's float32 solution bit for
    bit. Larger systems use ``np.linalg.solve`` in float32 (may differ by an ulp).
    """
    R = np.asarray(R, np.float32)
    b = np.asarray(b, np.float32)
    if R.shape != (2, 2):
        return np.linalg.solve(R, b).astype(np.float32)
    if abs(R[1, 0]) > abs(R[0, 0]):
        R, b = R[::-1], b[::-1]
    p = R[0, 0]
    l21 = R[1, 0] * (_f32(1.0) / p)
    u22 = _fma32(-l21, R[0, 1], R[1, 1])
    y2 = _fma32(-l21, b[0], b[1])
    x2 = y2 * (_f32(1.0) / u22)
    x1 = _fma32(-R[0, 1], x2, b[0]) * (_f32(1.0) / p)
    return np.array([x1, x2], dtype=np.float32)


@partial(jax.jit, static_argnames=("use_corrector", "n_corr", "n_pred"))
def _unipc_update(
    model_output: jax.Array,
    sample: jax.Array,
    last_sample: jax.Array | None,
    history: tuple[jax.Array, ...],
    sigma: jax.Array,
    corr: jax.Array,
    pred: jax.Array,
    zero: jax.Array,
    *,
    use_corrector: bool,
    n_corr: int,
    n_pred: int,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The array part of one UniPC step, in float32, rounding like diffusers op by op.

    ``history`` holds the previous x0 predictions (float32, newest last).
    ``corr`` = [ratio, c_m0, c_b, rk_1..rk_n, rho_1..rho_n, rho_t] (n = n_corr),
    ``pred`` = [ratio, c_m0, c_b, rk_1..rk_n, rho_1..rho_n] (n = n_pred);
    ``zero`` is a traced int32 0 (see :func:`vidax.schedulers.base.rounded`).
    Returns (prev_sample in the corrected sample's dtype, x0 float32, corrected
    sample in ``last_sample``'s dtype, or ``sample`` when no corrector).
    """
    f32 = jnp.float32

    def mul(c, a):  # c * a, rounded before any following add/sub (no FMA)
        return rounded(c * a, zero)

    def weighted_diffs(coefs: jax.Array, n: int, olds: list[jax.Array], m0: jax.Array) -> jax.Array:
        # sum_k rho_k * ((m_k - m0) / rk_k), summed in k order; coefs = [rk_1..rk_n, rho_1..rho_n]
        res = None
        for k in range(n):
            term = mul(coefs[n + k], divide(olds[k] - m0, coefs[k]))
            res = term if res is None else res + term
        return res

    x0 = sample.astype(f32) - mul(sigma, model_output.astype(f32))  # convert_model_output (flow)

    x = sample
    if use_corrector:  # UniC: multistep_uni_c_bh_update
        m0 = history[-1]
        x_t_ = mul(corr[0], last_sample.astype(f32)) - mul(corr[1], m0)
        acc = mul(corr[3 + 2 * n_corr], x0 - m0)
        if n_corr:
            olds = [history[-(k + 2)] for k in range(n_corr)]
            acc = weighted_diffs(corr[3 : 3 + 2 * n_corr], n_corr, olds, m0) + acc
        x = (x_t_ - mul(corr[2], acc)).astype(last_sample.dtype)

    # UniP: multistep_uni_p_bh_update
    m0 = x0
    x_t = mul(pred[0], x.astype(f32)) - mul(pred[1], m0)
    if n_pred:
        olds = [history[-(k + 1)] for k in range(n_pred)]
        x_t = x_t - mul(pred[2], weighted_diffs(pred[3 : 3 + 2 * n_pred], n_pred, olds, m0))
    return x_t.astype(x.dtype), x0, x


class FlowUniPCMultistepScheduler(Scheduler):
    """UniPC multistep sampler for flow-matching models (Wan; Cosmos-Predict2.5).

    Follows diffusers ``UniPCMultistepScheduler`` (file
    ``scheduling_unipc_multistep.py``) with ``prediction_type="flow_prediction"``,
    ``use_flow_sigmas=True`` and ``predict_x0=True``:

    * sigmas (``sigma_grid="diffusers"``): ``linspace(1, 1/num_train_timesteps,
      n+1)[:-1]`` in float64, shifted by ``flow_shift``; a first sigma within
      1e-6 of 1 is lowered by 1e-6 (keeps ``log(1 - sigma)`` finite); cast to
      float32; a final 0 (or, for ``final_sigmas_type="sigma_min"``, the last
      sigma) is appended.
    * sigmas (``sigma_grid="wan"``, the Wan repository's
      ``FlowUniPCMultistepScheduler.set_timesteps`` as its pipelines call it):
      ``linspace(sigma_max, 0, n+1)[:-1]`` in float64, where ``sigma_max`` is
      the largest sigma of its (unshifted) training schedule,
      ``1 - 1/num_train_timesteps`` stored in float32 (0.999 -> 0.99900001287);
      shifted by ``flow_shift``; no 1e-6 adjustment; cast to float32; a final 0
      appended. Before the shift this is the diffusers grid lowered by
      ``1/num_train_timesteps`` (up to that float32 rounding).
    * sigmas (``sigma_grid="karras"``, diffusers with ``use_karras_sigmas=True``):
      ``k = (sigma_max**(1/rho) + linspace(0, 1, n) * (sigma_min**(1/rho) -
      sigma_max**(1/rho)))**rho`` in float64, mapped by ``k / (k + 1)``; no
      shift, no 1e-6 adjustment; cast to float32; a final 0 (or the last
      sigma, ``final_sigmas_type="sigma_min"``) appended.
    * sigmas (``sigma_grid="native"``, diffusers' Cosmos3 pipeline with
      ``use_native_flow_schedule``): ``linspace(1 - 1/num_train_timesteps, 0,
      n+1)[:-1]`` in float64, then as the diffusers grid (shift, 1e-6
      adjustment, float32, a final 0 or the last sigma).
    * sigmas (``sigma_grid="cosmos"``, the Cosmos-Predict2.5 repository with
      ``use_kerras_sigma=True``): the same with the ramp ``arange(n + 1) / n``,
      i.e. ``n + 1`` sigmas and steps; a final 0 appended.
    * timesteps: ``sigmas[:-1] * num_train_timesteps`` in float64, *truncated*
      to int64 (not rounded).
    * step ``i``: the UniC corrector first refines ``sample`` using the previous
      step's result (from step 1 on, unless ``i - 1`` is in
      ``disable_corrector``), then the UniP predictor moves to ``sigmas[i+1]``.
      The order warms up (1, 2, ... up to ``solver_order``) and, with
      ``lower_order_final``, drops to ``num_inference_steps - i`` at the end,
      so the final step is first order and returns the x0 prediction exactly
      when the final sigma is 0.

    Args:
      num_train_timesteps: training schedule length (default 1000).
      flow_shift: static time shift (3.0 for Wan 480p, 5.0 for 720p).
      solver_order: UniP order (>= 1; Wan uses 2).
      solver_type: ``"bh2"`` (default) or ``"bh1"``: the B(h) function. (On the
        step to sigma 0, diffusers' bh1 computes ``B(h) * 0`` with ``B(h) = -inf``
        and returns NaN; here that step returns the x0 prediction, its limit
        and what bh2 returns.)
      lower_order_final: use lower orders on the last steps (required with
        ``final_sigmas_type="zero"`` and ``solver_order > 1``).
      disable_corrector: step indices ``j`` such that the correction applied at
        step ``j + 1`` is skipped (diffusers semantics).
      final_sigmas_type: ``"zero"`` (default) or ``"sigma_min"``.
      sigma_grid: ``"diffusers"`` (default; diffusers ``UniPCMultistepScheduler``
        with ``use_flow_sigmas=True``), ``"wan"`` (the Wan repository's
        ``wan/utils/fm_solvers_unipc.py``, which the original-release
        checkpoints were published with; also the Cosmos-Predict2.5
        repository's grid without ``use_kerras_sigma``), ``"karras"``
        (diffusers with ``use_karras_sigmas=True`` and ``use_flow_sigmas=True``)
        or ``"cosmos"`` (the Cosmos-Predict2.5 repository's
        ``use_kerras_sigma=True`` grid: ``num_inference_steps + 1`` steps). The
        step is the same for all.
      sigma_min, sigma_max: the Karras range before the flow map (``"karras"``:
        required, a Cosmos-Predict2.5 folder sets 0.01 and 200.0; ``"cosmos"``:
        default 0.01 and 200, the repository's constants). Only for the two
        Karras grids.
      rho: the Karras exponent (7, as diffusers and the repository hard-code).
      model_timesteps_type: what :attr:`SchedulerState.model_timesteps` holds:
        ``"timesteps"`` (``float32(timesteps)``), ``"sigmas"`` (``sigmas[:-1]``,
        diffusers' Cosmos-Predict2.5 pipeline), ``"scaled_timesteps"``
        (:func:`scale_timesteps` of the int64 timesteps with scale
        ``1 / num_train_timesteps``: the Cosmos-Predict2.5 repository, whose
        network rescales internally) or ``None``: ``"sigmas"`` for
        ``"karras"``, ``"scaled_timesteps"`` for ``"cosmos"``, and no
        ``model_timesteps`` (``None``) for the other grids.

    Raises:
      ValueError: for unsupported option values, naming the option.
    """

    def __init__(
        self,
        num_train_timesteps: int = 1000,
        flow_shift: float = 1.0,
        solver_order: int = 2,
        solver_type: str = "bh2",
        lower_order_final: bool = True,
        disable_corrector: Sequence[int] = (),
        final_sigmas_type: str = "zero",
        sigma_grid: str = "diffusers",
        sigma_min: float | None = None,
        sigma_max: float | None = None,
        rho: float = COSMOS_RHO,
        model_timesteps_type: str | None = None,
    ):
        super().__init__(num_train_timesteps=num_train_timesteps, flow_shift=flow_shift)
        if isinstance(solver_order, bool) or int(solver_order) != solver_order or solver_order < 1:
            raise ValueError(f"solver_order must be an integer >= 1, got {solver_order!r}")
        if solver_type not in SOLVER_TYPES:
            raise ValueError(f"solver_type={solver_type!r} is not supported; supported: {SOLVER_TYPES}")
        if final_sigmas_type not in FINAL_SIGMAS_TYPES:
            raise ValueError(
                f"final_sigmas_type={final_sigmas_type!r} is not supported; supported: {FINAL_SIGMAS_TYPES}"
            )
        if sigma_grid not in SIGMA_GRIDS:
            raise ValueError(f"sigma_grid={sigma_grid!r} is not supported; supported: {SIGMA_GRIDS}")
        if sigma_grid == "wan" and final_sigmas_type != "zero":
            # The Wan repository's "sigma_min" branch reads an attribute its class never sets (it raises).
            raise ValueError(f"sigma_grid='wan' supports only final_sigmas_type='zero', got {final_sigmas_type!r}")
        if sigma_grid in KARRAS_GRIDS:
            if self.flow_shift != 1.0:
                # Neither diffusers' Karras branch nor the Cosmos repository's shifts these sigmas.
                raise ValueError(
                    f"flow_shift={flow_shift!r} has no effect with sigma_grid={sigma_grid!r} (Karras sigmas are "
                    "not shifted); leave flow_shift at 1.0"
                )
            if sigma_grid == "cosmos":
                if final_sigmas_type != "zero":
                    # The repository's "sigma_min" branch reads self.alphas_cumprod, which its class never sets.
                    raise ValueError(
                        f"sigma_grid='cosmos' supports only final_sigmas_type='zero', got {final_sigmas_type!r}"
                    )
                sigma_min = COSMOS_SIGMA_MIN if sigma_min is None else sigma_min
                sigma_max = COSMOS_SIGMA_MAX if sigma_max is None else sigma_max
            if sigma_min is None or sigma_max is None:
                raise ValueError(
                    "sigma_grid='karras' needs sigma_min and sigma_max (diffusers' fallback to the beta schedule's "
                    "range is not implemented); a Cosmos-Predict2.5 folder sets sigma_min=0.01, sigma_max=200.0"
                )
            sigma_min = _check_sigma_bound("sigma_min", sigma_min)
            sigma_max = _check_sigma_bound("sigma_max", sigma_max)
            rho = _check_sigma_bound("rho", rho)
            if sigma_min >= sigma_max:
                raise ValueError(f"sigma_min={sigma_min!r} must be below sigma_max={sigma_max!r}")
            if np.float32(sigma_max / (1.0 + sigma_max)) >= 1.0:
                raise ValueError(
                    f"sigma_max={sigma_max!r} is too large: its flow sigma sigma_max / (1 + sigma_max) rounds to 1 "
                    "in float32, where the UniPC step is undefined"
                )
        elif sigma_min is not None or sigma_max is not None or rho != COSMOS_RHO:
            raise ValueError(
                f"sigma_min, sigma_max and rho apply only to sigma_grid 'karras' or 'cosmos', not {sigma_grid!r}"
            )
        if model_timesteps_type is None:
            model_timesteps_type = {"karras": "sigmas", "cosmos": "scaled_timesteps"}.get(sigma_grid)
        elif model_timesteps_type not in MODEL_TIMESTEPS_TYPES:
            raise ValueError(
                f"model_timesteps_type={model_timesteps_type!r} is not supported; supported: {MODEL_TIMESTEPS_TYPES}"
            )
        if not lower_order_final and solver_order > 1 and final_sigmas_type == "zero":
            raise ValueError(
                "lower_order_final=False with solver_order > 1 and final_sigmas_type='zero' is not supported: "
                "a multistep update to sigma=0 is undefined (diffusers returns inf/nan); use lower_order_final=True"
            )
        self.solver_order = int(solver_order)
        self.solver_type = solver_type
        self.lower_order_final = bool(lower_order_final)
        self.disable_corrector = tuple(int(j) for j in (disable_corrector or ()))
        self.final_sigmas_type = final_sigmas_type
        self.sigma_grid = sigma_grid
        self.sigma_min = sigma_min
        self.sigma_max = sigma_max
        self.rho = float(rho)
        self.model_timesteps_type = model_timesteps_type

    @property
    def config(self) -> dict[str, Any]:
        return {
            "num_train_timesteps": self.num_train_timesteps,
            "flow_shift": self.flow_shift,
            "solver_order": self.solver_order,
            "solver_type": self.solver_type,
            "lower_order_final": self.lower_order_final,
            "disable_corrector": self.disable_corrector,
            "final_sigmas_type": self.final_sigmas_type,
            "sigma_grid": self.sigma_grid,
            "sigma_min": self.sigma_min,
            "sigma_max": self.sigma_max,
            "rho": self.rho,
            "model_timesteps_type": self.model_timesteps_type,
        }

    # -- schedule --------------------------------------------------------

    def set_timesteps(self, num_inference_steps: int) -> SchedulerState:
        """Build the flow-sigma schedule.

        Returns:
          A fresh :class:`SchedulerState`: ``sigmas`` float32
          ``(num_inference_steps + 1,)``, ``timesteps`` int64
          ``(num_inference_steps,)``, equal to diffusers' ``scheduler.sigmas``
          and ``scheduler.timesteps`` (with ``sigma_grid="wan"``, to the Wan
          repository scheduler's; with ``"cosmos"``, to the Cosmos-Predict2.5
          repository scheduler's, whose schedule has ``num_inference_steps + 1``
          steps: ``state.num_inference_steps`` counts them); ``model_timesteps``
          float32 ``(state.num_inference_steps,)`` per ``model_timesteps_type``,
          or ``None``.

        Raises:
          ValueError: if ``num_inference_steps`` is not a positive integer.
        """
        n = self._check_num_steps(num_inference_steps)
        n_train = self.num_train_timesteps
        if self.sigma_grid in KARRAS_GRIDS:
            # diffusers' _convert_to_karras: n points, ramp linspace(0, 1, n); the Cosmos repository:
            # n + 1 points, ramp arange(n + 1) / n. Both in float64, then the flow map s / (1 + s).
            ramp = np.linspace(0, 1, n) if self.sigma_grid == "karras" else np.arange(n + 1) / n
            min_inv_rho = self.sigma_min ** (1 / self.rho)
            max_inv_rho = self.sigma_max ** (1 / self.rho)
            s = (max_inv_rho + ramp * (min_inv_rho - max_inv_rho)) ** self.rho
            s = s / (1 + s)
        elif self.sigma_grid == "native":
            # diffusers' Cosmos3 pipeline (use_native_flow_schedule): the grid it passes as `sigmas`
            s = np.linspace(1.0 - 1.0 / n_train, 0.0, n + 1)[:-1]
        elif self.sigma_grid == "wan":
            # Wan starts from the top of its float32 training sigmas (1 - 1/N), not from 1, and ends at 0.
            top = float(np.float32(1.0 - 1.0 / n_train))
            s = np.linspace(top, 0.0, n + 1)[:-1]
        else:
            s = np.linspace(1.0, 1.0 / n_train, n + 1)[:-1]
        if self.sigma_grid not in KARRAS_GRIDS:
            s = self.flow_shift * s / (1.0 + (self.flow_shift - 1.0) * s)
        if self.sigma_grid in ("diffusers", "native") and abs(s[0] - 1.0) < 1e-6:
            s[0] -= 1e-6
        timesteps = (s * n_train).astype(np.int64)  # truncation, as torch .to(int64)
        last = 0.0 if self.final_sigmas_type == "zero" else s[-1]
        sigmas = np.concatenate([s, [last]]).astype(np.float32)
        model_timesteps = None
        if self.model_timesteps_type == "timesteps":
            model_timesteps = timesteps.astype(np.float32)
        elif self.model_timesteps_type == "sigmas":
            model_timesteps = sigmas[:-1].copy()
        elif self.model_timesteps_type == "scaled_timesteps":
            model_timesteps = scale_timesteps(timesteps, 1.0 / n_train)
        return SchedulerState(sigmas=sigmas, timesteps=timesteps, model_timesteps=model_timesteps)

    # -- coefficients (host, float32 as diffusers) -----------------------

    def _coefficients(
        self, sigmas: np.ndarray, t: int, s0: int, hist: Sequence[int], order: int, corrector: bool
    ) -> np.ndarray:
        """Scalars of a UniP (``corrector=False``) or UniC update from ``sigmas[s0]`` to ``sigmas[t]``.

        ``hist[k-1]`` is the sigma index of the k-th older x0 prediction (k = 1..order-1).
        Returns float32 [ratio, c_m0, c_b, rks..., rhos...] (see ``_unipc_update``).
        """
        with np.errstate(all="ignore"):
            sigma_t, sigma_s0 = sigmas[t], sigmas[s0]
            alpha_t = _f32(1.0) - sigma_t
            lam_s0 = _lambda32(sigma_s0)
            h = _lambda32(sigma_t) - lam_s0
            rks = [(_lambda32(sigmas[j]) - lam_s0) / h for j in hist] + [_f32(1.0)]
            hh = -h  # predict_x0
            h_phi_1 = _expm1_32(hh)
            h_phi_k = h_phi_1 / hh - _f32(1.0)
            b_h = hh if self.solver_type == "bh1" else _expm1_32(hh)
            rows, b, fact = [], [], 1
            for i in range(1, order + 1):
                rows.append([_pow32(rk, i - 1) for rk in rks])
                b.append(h_phi_k * _f32(fact) / b_h)
                fact *= i + 1
                h_phi_k = h_phi_k / hh - _f32(1.0 / fact)
            R = np.array(rows, dtype=np.float32)
            bv = np.array(b, dtype=np.float32)
            if corrector:
                rhos = [_f32(0.5)] if order == 1 else list(_solve32(R, bv))
            elif order == 1:
                rhos = []
            elif order == 2:
                rhos = [_f32(0.5)]
            else:
                rhos = list(_solve32(R[:-1, :-1], bv[:-1]))
            coefs = [sigma_t / sigma_s0, alpha_t * h_phi_1, alpha_t * b_h] + rks[:-1] + rhos
        return np.asarray(coefs, dtype=np.float32)

    def _order(self, n: int, i: int, lower_order_nums: int) -> int:
        order = self.solver_order
        if self.lower_order_final:
            order = min(order, n - i)
        return min(order, lower_order_nums + 1)

    # -- step --------------------------------------------------------------

    def step(
        self, state: SchedulerState, model_output: jax.Array, sample: jax.Array, step_index: int
    ) -> tuple[jax.Array, SchedulerState]:
        """One UniPC step: correct ``sample`` (UniC), then predict the next sample (UniP).

        Steps must be consecutive after the first call on a state (the first
        may start at any index, like diffusers with ``set_begin_index``).

        Args:
          state: from :meth:`set_timesteps` or the previous ``step``.
          model_output: flow prediction for ``sample`` at ``state.timesteps[step_index]``,
            ``(B, C, T, H, W)``, any float dtype.
          sample: current latents, same shape, any float dtype.
          step_index: 0-based step index in ``[0, num_inference_steps)``.

        Returns:
          ``(prev_sample, new_state)``; ``prev_sample`` is in ``sample``'s dtype
          (as diffusers). Arithmetic is float32; the stored history (x0
          predictions) is float32, the stored corrected sample is in ``sample``'s
          dtype (as diffusers).

        Raises:
          ValueError: on a bad or non-consecutive ``step_index`` or mismatched shapes.
        """
        i = self._check_index(state, step_index)
        self._check_shapes(model_output, sample)
        if state.prev_step_index >= 0 and i != state.prev_step_index + 1:
            raise ValueError(
                f"UniPC steps must be consecutive: previous step_index was {state.prev_step_index}, got {i}; "
                "call set_timesteps for a fresh state to restart"
            )
        n = state.num_inference_steps
        sig = state.sigmas
        hist = state.model_outputs
        use_corrector = (
            i > 0 and (i - 1) not in self.disable_corrector and state.last_sample is not None
        )
        zero = np.zeros(0, np.float32)
        corr = zero
        n_corr = 0
        if use_corrector:
            c_order = state.last_order
            n_corr = c_order - 1
            corr = self._coefficients(sig, i, i - 1, [i - 1 - k for k in range(1, c_order)], c_order, True)
        order = self._order(n, i, state.lower_order_nums)
        n_pred = order - 1
        pred = self._coefficients(sig, i + 1, i, [i - k for k in range(1, order)], order, False)

        needed = max(n_corr + 1 if use_corrector else 0, n_pred)
        history = tuple(hist[len(hist) - needed :]) if needed else ()
        if len(history) != needed:  # cannot happen with consistent state
            raise ValueError("inconsistent UniPC state: missing model output history")
        prev, x0, corrected = _unipc_update(
            model_output,
            sample,
            state.last_sample if use_corrector else None,
            history,
            _f32(sig[i]),
            corr,
            pred,
            np.int32(0),
            use_corrector=use_corrector,
            n_corr=n_corr,
            n_pred=n_pred,
        )
        new_hist = (tuple(hist) + (x0,))[-self.solver_order :]
        new_state = SchedulerState(
            sigmas=state.sigmas,
            timesteps=state.timesteps,
            model_outputs=new_hist,
            last_sample=corrected,
            prev_step_index=i,
            lower_order_nums=min(state.lower_order_nums + 1, self.solver_order),
            last_order=order,
            model_timesteps=state.model_timesteps,
        )
        return prev, new_state
