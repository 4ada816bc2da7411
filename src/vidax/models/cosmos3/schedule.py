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
"""

from __future__ import annotations

from typing import Any

from vidax.schedulers import scheduler_from_config
from vidax.schedulers.unipc import FlowUniPCMultistepScheduler


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


__all__ = ["make_scheduler"]
