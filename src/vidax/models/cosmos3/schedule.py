"""Cosmos3's sampler as diffusers' ``Cosmos3OmniPipeline`` configures it.

The folder's ``scheduler/scheduler_config.json`` is a diffusers ``UniPCMultistepScheduler``. Two settings are
published:

* Nano (``scripts/convert_cosmos3_to_diffusers.py``): the Karras grid on flow sigmas, ``use_karras_sigmas=True,
  use_flow_sigmas=True, prediction_type="flow_prediction", sigma_max=200, sigma_min=0.147`` (the converter's
  approximation of the original sampler's shift-5 grid for 35 steps); ``set_timesteps(num_inference_steps)``.
* the native flow grid: the pipeline's ``model_index.json`` sets ``use_native_flow_schedule`` (Edge's folders), and
  the pipeline passes ``sigmas = linspace(1 - 1/num_train_timesteps, 0, steps + 1)[:-1]`` to ``set_timesteps``,
  which shifts them by the config's ``flow_shift`` (:class:`vidax.schedulers.unipc.FlowUniPCMultistepScheduler`'s
  ``sigma_grid="native"``).

Either way the transformer's timestep is the step's int64 timestep (``t.item()``: ``sigma * 1000`` truncated), which
the backbone scales by its ``timestep_scale`` (0.001): ``model_timesteps_type="timesteps"``.

Distilled (few-step) folders (:func:`make_distilled_scheduler`; diffusers 0.42.1
``modular_pipelines/cosmos/before_denoise.py`` ``Cosmos3DistilledSetTimestepsStep`` and ``denoise.py``
``Cosmos3DistilledVisionLoopSchedulerStep``): a ``FlowMatchEulerDiscreteScheduler`` whose ``set_timesteps`` is given
the pipeline config's ``distilled_sigmas`` (cast to float32, shifted by the config's ``shift``, a final 0 appended;
timesteps ``sigma * 1000`` in float32, not rounded: the transformer is given that float); the step is Euler, or with
the config's ``stochastic_sampling`` the re-noising step ``x0 = x - sigma v``, ``x' = (1 - sigma') x0 + sigma' noise``
(:class:`vidax.schedulers.flow_euler.FlowMatchEulerScheduler`).
"""

from __future__ import annotations

from typing import Any

import math

import numpy as np

from vidax.schedulers import scheduler_from_config
from vidax.schedulers.flow_euler import FlowMatchEulerScheduler
from vidax.schedulers.unipc import FlowUniPCMultistepScheduler

#: The most distilled steps a folder may declare (the released ones take 4).
MAX_DISTILLED_STEPS = 64


def make_scheduler(config: dict[str, Any], *, use_native_flow_schedule: bool = False) -> FlowUniPCMultistepScheduler:
    """The pipeline's sampler from a ``scheduler_config.json`` dict and the pipeline's ``use_native_flow_schedule``.

    Raises:
      ValueError: a scheduler other than UniPC, an option vidax does not implement (named, see
        :func:`vidax.schedulers.scheduler_from_config`), or ``use_native_flow_schedule`` with a Karras config (diffusers
        would feed the native grid through its Karras conversion, which no release configures).
    """
    if config.get("_class_name") != "UniPCMultistepScheduler":
        raise ValueError(f"Cosmos3 samples with UniPCMultistepScheduler; this folder's scheduler is "
                         f"{config.get('_class_name')!r}")
    overrides: dict[str, Any] = {"model_timesteps_type": "timesteps"}
    if use_native_flow_schedule:
        if config.get("use_karras_sigmas") is True:
            raise ValueError("model_index.json sets use_native_flow_schedule with a Karras scheduler config "
                             "(use_karras_sigmas=true): not a released combination; set one or the other")
        overrides["sigma_grid"] = "native"
    sched = scheduler_from_config(config, **overrides)
    assert isinstance(sched, FlowUniPCMultistepScheduler)
    return sched


def check_distilled_sigmas(values: Any) -> tuple[float, ...]:
    """A distilled folder's ``distilled_sigmas``: a non-empty list of at most :data:`MAX_DISTILLED_STEPS` numbers in
    ``(0, 1]`` (the reference's ``[float(s) for s in sigmas]``; it checks nothing, vidax bounds them).

    Raises:
      ValueError: anything else, named.
    """
    if not isinstance(values, (list, tuple)) or not values or len(values) > MAX_DISTILLED_STEPS:
        raise ValueError(f"distilled_sigmas must be a list of 1 to {MAX_DISTILLED_STEPS} numbers, got "
                         f"{str(values)[:80]}")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 < v <= 1:
            raise ValueError(f"distilled_sigmas must be numbers in (0, 1], got {v!r}")
        out.append(float(v))
    return tuple(out)


def make_distilled_scheduler(config: dict[str, Any]) -> FlowMatchEulerScheduler:
    """A distilled folder's sampler from its ``scheduler_config.json`` dict (diffusers'
    ``FlowMatchEulerDiscreteScheduler``; ``stochastic_sampling`` accepted: the pipeline passes each step's noise).
    The schedule is ``set_timesteps(sigmas=distilled_sigmas)``.

    Raises:
      ValueError: a scheduler other than ``FlowMatchEulerDiscreteScheduler``, dynamic shifting (the reference gives
        no ``mu``: diffusers would refuse), or an option vidax does not implement (named).
    """
    if config.get("_class_name") != "FlowMatchEulerDiscreteScheduler":
        raise ValueError(f"a distilled Cosmos3 folder samples with FlowMatchEulerDiscreteScheduler; this folder's "
                         f"scheduler is {config.get('_class_name')!r}")
    if config.get("use_dynamic_shifting") is True:
        raise ValueError("use_dynamic_shifting=true needs a mu the distilled pipeline does not give (diffusers "
                         "refuses it too); set it to false")
    sched = scheduler_from_config(config, allow_stochastic=True)
    assert isinstance(sched, FlowMatchEulerScheduler)
    return sched


def distilled_model_timesteps(state) -> np.ndarray:
    """The transformer's timestep per step: the schedule's float32 timesteps as given (``t.item()``)."""
    return np.asarray(state.timesteps, np.float32)


__all__ = ["MAX_DISTILLED_STEPS", "check_distilled_sigmas", "distilled_model_timesteps", "make_distilled_scheduler",
           "make_scheduler"]
