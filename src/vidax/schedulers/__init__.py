"""Samplers at numerical parity with diffusers.

* :class:`FlowMatchEulerScheduler` follows diffusers ``FlowMatchEulerDiscreteScheduler``
  (static shift for Wan; dynamic shift by ``mu``, ``shift_terminal``, custom
  sigmas/timesteps and per-token steps for LTX-Video), with
  :func:`calculate_shift` for ``mu``.
* :class:`FlowUniPCMultistepScheduler` follows diffusers ``UniPCMultistepScheduler``
  with ``prediction_type="flow_prediction"``, ``use_flow_sigmas=True`` (Wan),
  also with ``use_karras_sigmas=True`` (Cosmos-Predict2.5);
  ``sigma_grid="wan"`` gives the Wan repository's sigma grid instead,
  ``sigma_grid="cosmos"`` the Cosmos-Predict2.5 repository's Karras grid,
  ``sigma_grid="native"`` the grid of diffusers' Cosmos3 ``use_native_flow_schedule``;
  :func:`scale_timesteps` is that repository's network-side timestep scale.
* :class:`CogVideoXDDIMScheduler` and :class:`CogVideoXDPMScheduler` follow
  diffusers' classes of the same names (CogVideoX: v-prediction on a
  zero-terminal-SNR, SNR-shifted variance-preserving schedule).
* :func:`guidance_scale_at`: the CogVideoX pipeline's dynamic CFG scale.

All share the :class:`Scheduler` interface; the sampling state is a
:class:`SchedulerState` pytree. Typical loop::

    sched = scheduler_from_config(json.load(open(".../scheduler/scheduler_config.json")))
    state = sched.set_timesteps(num_inference_steps)
    latents = noise  # pure noise, init_noise_sigma == 1
    for i, t in enumerate(state.timesteps):
        v = denoise(latents, t)                        # the model's prediction, latents' shape
        latents, state = sched.step(state, v, latents, i)

:class:`CogVideoXDPMScheduler` is stochastic: its ``step`` also takes fresh
noise per step, ``noise=`` (an array) or ``key=`` (a ``jax.random`` key).
"""

from __future__ import annotations

import warnings
from typing import Any

from .base import Scheduler, SchedulerState
from .cogvideox import CogVideoXDDIMScheduler, CogVideoXDPMScheduler
from .flow_euler import FlowMatchEulerScheduler, calculate_shift
from .guidance import guidance_scale_at
from .unipc import FlowUniPCMultistepScheduler, scale_timesteps

__all__ = [
    "Scheduler",
    "SchedulerState",
    "FlowMatchEulerScheduler",
    "calculate_shift",
    "FlowUniPCMultistepScheduler",
    "scale_timesteps",
    "CogVideoXDDIMScheduler",
    "CogVideoXDPMScheduler",
    "guidance_scale_at",
    "scheduler_from_config",
    "SUPPORTED_CLASSES",
]

SUPPORTED_CLASSES = (
    "UniPCMultistepScheduler",
    "FlowMatchEulerDiscreteScheduler",
    "CogVideoXDDIMScheduler",
    "CogVideoXDPMScheduler",
)

# Per diffusers class: keys we map onto our constructor (with diffusers' defaults),
# keys whose value must equal what we implement (with diffusers' defaults and the
# supported value(s)), and keys that have no effect on the path we implement.
_UNIPC_ARGS = {
    "num_train_timesteps": ("num_train_timesteps", 1000),
    "flow_shift": ("flow_shift", 1.0),
    "solver_order": ("solver_order", 2),
    "solver_type": ("solver_type", "bh2"),
    "lower_order_final": ("lower_order_final", True),
    "disable_corrector": ("disable_corrector", ()),
    "final_sigmas_type": ("final_sigmas_type", "zero"),
    "sigma_grid": ("sigma_grid", "diffusers"),  # vidax's own keys (no diffusers config has them)
    "model_timesteps_type": ("model_timesteps_type", None),
}
_UNIPC_REQUIRED = {  # key: (diffusers default, supported values)
    "prediction_type": ("epsilon", ("flow_prediction",)),
    "use_flow_sigmas": (False, (True,)),
    "predict_x0": (True, (True,)),
    "thresholding": (False, (False,)),
    "solver_p": (None, (None,)),
    "use_karras_sigmas": (False, (False, True)),  # True: sigma_grid "karras" (or "cosmos"), see below
    "use_exponential_sigmas": (False, (False,)),
    "use_beta_sigmas": (False, (False,)),
    "use_dynamic_shifting": (False, (False,)),
    "shift_terminal": (None, (None, 0, 0.0, False)),
    "timestep_spacing": ("linspace", ("linspace", "leading", "trailing")),  # no effect with flow sigmas
}
_UNIPC_IGNORED = {  # only used by the beta (non-flow) schedules, thresholding or dynamic shifting
    "beta_start", "beta_end", "beta_schedule", "trained_betas", "dynamic_thresholding_ratio",
    "sample_max_value", "steps_offset", "rescale_betas_zero_snr", "time_shift_type",
    "sigma_min", "sigma_max",  # except with the Karras grids: read by _unipc_grid
}  # fmt: skip

_EULER_ARGS = {  # diffusers FlowMatchEulerDiscreteScheduler.__init__ (diffusers 0.42) and its defaults
    "num_train_timesteps": ("num_train_timesteps", 1000),
    "shift": ("flow_shift", 1.0),
    "use_dynamic_shifting": ("use_dynamic_shifting", False),
    "base_shift": ("base_shift", 0.5),
    "max_shift": ("max_shift", 1.15),
    "base_image_seq_len": ("base_image_seq_len", 256),
    "max_image_seq_len": ("max_image_seq_len", 4096),
    "shift_terminal": ("shift_terminal", None),
    "time_shift_type": ("time_shift_type", "exponential"),
    "stochastic_sampling": ("stochastic_sampling", False),  # supported only with allow_stochastic=True
}
_EULER_REQUIRED = {
    "invert_sigmas": (False, (False,)),
    "use_karras_sigmas": (False, (False,)),
    "use_exponential_sigmas": (False, (False,)),
    "use_beta_sigmas": (False, (False,)),
    "stochastic_sampling": (False, (False,)),  # (False, True) with allow_stochastic=True
}
_EULER_IGNORED: set[str] = set()

# CogVideoXDDIMScheduler and CogVideoXDPMScheduler share their constructor (and defaults).
_COGVIDEOX_ARGS = {
    "num_train_timesteps": ("num_train_timesteps", 1000),
    "beta_start": ("beta_start", 0.00085),
    "beta_end": ("beta_end", 0.012),
    "set_alpha_to_one": ("set_alpha_to_one", True),
    "steps_offset": ("steps_offset", 0),
    "prediction_type": ("prediction_type", "epsilon"),
    "timestep_spacing": ("timestep_spacing", "leading"),
    "rescale_betas_zero_snr": ("rescale_betas_zero_snr", False),
    "snr_shift_scale": ("snr_shift_scale", 3.0),
}
_COGVIDEOX_REQUIRED = {
    "beta_schedule": ("scaled_linear", ("scaled_linear",)),
    "trained_betas": (None, (None,)),
    "prediction_type": ("epsilon", ("v_prediction", "epsilon", "sample")),
    "timestep_spacing": ("leading", ("trailing", "leading", "linspace")),
}
_COGVIDEOX_IGNORED = {  # diffusers stores them but its CogVideoX step never clips or thresholds
    "clip_sample", "clip_sample_range", "sample_max_value",
}  # fmt: skip

_TABLES = {
    "UniPCMultistepScheduler": (FlowUniPCMultistepScheduler, _UNIPC_ARGS, _UNIPC_REQUIRED, _UNIPC_IGNORED),
    "FlowMatchEulerDiscreteScheduler": (FlowMatchEulerScheduler, _EULER_ARGS, _EULER_REQUIRED, _EULER_IGNORED),
    "CogVideoXDDIMScheduler": (CogVideoXDDIMScheduler, _COGVIDEOX_ARGS, _COGVIDEOX_REQUIRED, _COGVIDEOX_IGNORED),
    "CogVideoXDPMScheduler": (CogVideoXDPMScheduler, _COGVIDEOX_ARGS, _COGVIDEOX_REQUIRED, _COGVIDEOX_IGNORED),
}


def _same(value: Any, supported: Any) -> bool:
    # bools and None compare by identity (so 1 is not True); others by value, never matching a bool
    if supported is None or isinstance(supported, bool):
        return value is supported
    return not isinstance(value, bool) and value == supported


def _unipc_grid(cfg: dict[str, Any], kwargs: dict[str, Any]) -> None:
    """UniPC: pick the sigma grid from ``use_karras_sigmas`` and pass the Karras range (``kwargs`` in place)."""
    if cfg.get("use_karras_sigmas", False) is True:
        grid = cfg.get("sigma_grid", "karras")
        if grid not in ("karras", "cosmos"):
            raise ValueError(
                f"UniPCMultistepScheduler: use_karras_sigmas=True with sigma_grid={grid!r} is contradictory; "
                "with Karras sigmas, sigma_grid must be 'karras' (diffusers, the default) or 'cosmos' "
                "(the Cosmos-Predict2.5 repository's grid)"
            )
        kwargs["sigma_grid"] = grid
        if grid == "karras" and (cfg.get("sigma_min") is None or cfg.get("sigma_max") is None):
            raise ValueError(
                "UniPCMultistepScheduler: use_karras_sigmas=True needs sigma_min and sigma_max in the config "
                "(diffusers' fallback to the beta schedule's range is not implemented); a Cosmos-Predict2.5 folder "
                "sets sigma_min=0.01, sigma_max=200.0"
            )
        if kwargs["flow_shift"] != 1.0:
            raise ValueError(
                f"UniPCMultistepScheduler: flow_shift={kwargs['flow_shift']!r} has no effect with "
                "use_karras_sigmas=True (Karras sigmas are not shifted); leave flow_shift at 1.0"
            )
    elif kwargs["sigma_grid"] == "karras":
        raise ValueError(
            "UniPCMultistepScheduler: sigma_grid='karras' is diffusers' use_karras_sigmas=True, which this config "
            "does not set (with sigma_min and sigma_max)"
        )
    if kwargs["sigma_grid"] in ("karras", "cosmos"):
        kwargs["sigma_min"] = cfg.get("sigma_min")
        kwargs["sigma_max"] = cfg.get("sigma_max")


def scheduler_from_config(config: dict[str, Any], *, allow_stochastic: bool = False, **overrides: Any) -> Scheduler:
    """Build a vidax scheduler from a diffusers ``scheduler_config.json`` dict.

    Args:
      config: the parsed JSON (or ``dict(diffusers_scheduler.config)``); its
        ``_class_name`` selects the sampler: ``"UniPCMultistepScheduler"`` ->
        :class:`FlowUniPCMultistepScheduler`, ``"FlowMatchEulerDiscreteScheduler"``
        -> :class:`FlowMatchEulerScheduler`, ``"CogVideoXDDIMScheduler"`` ->
        :class:`CogVideoXDDIMScheduler`, ``"CogVideoXDPMScheduler"`` ->
        :class:`CogVideoXDPMScheduler`. Missing keys take diffusers' defaults
        (the CogVideoX checkpoints set every key that matters).
      **overrides: config keys to replace, in diffusers' names (e.g.
        ``flow_shift=5.0`` for UniPC, ``shift=5.0`` for Euler,
        ``snr_shift_scale=1.0`` for CogVideoX); ``flow_shift`` is also
        accepted for Euler. UniPC also takes vidax's own keys ``sigma_grid``
        (``"diffusers"``, the default, or ``"wan"``: the Wan repository's
        grid; with ``use_karras_sigmas=True``, ``"karras"``, the default, or
        ``"cosmos"``: the Cosmos-Predict2.5 repository's grid, one step more)
        and ``model_timesteps_type`` (see :class:`FlowUniPCMultistepScheduler`).
        With ``use_karras_sigmas=True`` (a Cosmos-Predict2.5 folder) UniPC reads
        ``sigma_min`` and ``sigma_max``. For CogVideoX, ``_class_name`` may be overridden to
        switch between DDIM and DPM on the same config.
      allow_stochastic: accept Euler ``stochastic_sampling=True`` (a pipeline
        that passes each step's noise to :meth:`FlowMatchEulerScheduler.step`,
        e.g. the distilled Cosmos3 one); refused otherwise.

    Returns:
      The scheduler.

    Raises:
      ValueError: for a missing or unsupported ``_class_name``, or an option
        whose value we do not implement (e.g. UniPC ``prediction_type`` other
        than ``"flow_prediction"``, ``use_flow_sigmas=False``,
        ``thresholding=True``, ``solver_type`` other than bh1/bh2, UniPC
        ``use_dynamic_shifting=True``, an unknown ``sigma_grid``,
        ``use_karras_sigmas=True`` with ``sigma_grid`` "diffusers"/"wan",
        without ``sigma_min``/``sigma_max`` or with ``flow_shift`` other than 1,
        exponential/beta sigmas; Euler ``invert_sigmas``,
        ``stochastic_sampling``, karras/exponential/beta sigmas, an unknown
        ``time_shift_type`` or ``shift_terminal`` outside ``[0, 1)``;
        CogVideoX ``beta_schedule`` other than ``"scaled_linear"``,
        ``trained_betas``, an unknown ``prediction_type`` or
        ``timestep_spacing``); the message names the option and the supported
        values.
    """
    if not isinstance(config, dict):
        config = dict(config)
    cfg = {**config, **overrides}
    name = cfg.get("_class_name")
    if name is None:
        raise ValueError(
            "scheduler config has no '_class_name' (diffusers' scheduler.config omits it; the saved "
            f"scheduler_config.json has it): pass _class_name=... with one of {SUPPORTED_CLASSES}"
        )
    if name not in _TABLES:
        raise ValueError(f"scheduler _class_name={name!r} is not supported; supported: {SUPPORTED_CLASSES}")
    cls, args, required, ignored = _TABLES[name]
    if name == "FlowMatchEulerDiscreteScheduler" and "flow_shift" in cfg:
        if "flow_shift" in overrides or "shift" not in cfg:
            cfg["shift"] = cfg["flow_shift"]
        del cfg["flow_shift"]

    for key, (default, supported) in required.items():
        if allow_stochastic and name == "FlowMatchEulerDiscreteScheduler" and key == "stochastic_sampling":
            supported = (False, True)
        value = cfg.get(key, default)
        if not any(_same(value, s) for s in supported):
            raise ValueError(
                f"{name}: option {key}={value!r} is not supported by vidax; supported: "
                f"{', '.join(repr(s) for s in supported)}"
            )
    kwargs = {}
    for key, (arg, default) in args.items():
        value = cfg.get(key, default)
        if key == "disable_corrector" and value is None:
            value = ()
        kwargs[arg] = value
    if name == "UniPCMultistepScheduler":
        _unipc_grid(cfg, kwargs)
    unknown = sorted(k for k in cfg if not k.startswith("_") and k not in args and k not in required and k not in ignored)
    if unknown:
        warnings.warn(f"{name}: ignoring unknown scheduler config keys {unknown}", stacklevel=2)
    for key, (arg, default) in args.items():
        # A number where the reference has one (a string there fails far inside the sampler, naming nothing).
        if isinstance(default, (int, float)) and not isinstance(default, bool) and key in cfg:
            value = cfg[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{name}: option {key}={value!r} must be a number (diffusers' default: {default!r})")
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{name}: {e}") from None
