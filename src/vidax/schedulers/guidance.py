"""Classifier-free guidance schedules of the reference pipelines.

:func:`guidance_scale_at` is the dynamic CFG of diffusers ``CogVideoXPipeline``
(``pipelines/cogvideo/pipeline_cogvideox.py``, ``use_dynamic_cfg=True``; the
image-to-video, video-to-video and Fun-control CogVideoX pipelines use the same
expression). :func:`rescale_noise_cfg` is the guidance rescale of Lin et al. (2023), section 3.4, as the
diffusers pipelines apply it (``pipelines/stable_diffusion/pipeline_stable_diffusion.py``
``rescale_noise_cfg``; the LTX-Video pipelines call it with ``guidance_rescale``).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp


def guidance_scale_at(
    guidance_scale: float, timestep: Any, num_inference_steps: int, use_dynamic_cfg: bool = True
) -> float:
    """The guidance scale the CogVideoX pipeline applies at one denoising step.

    With ``use_dynamic_cfg`` it is, exactly as diffusers computes it in Python floats::

        1 + guidance_scale * (1 - cos(pi * ((num_inference_steps - t) / num_inference_steps) ** 5.0)) / 2

    where ``t`` is the step's *timestep value* (``t.item()``, e.g. 999 for the
    first trailing step), not the step index. That is a diffusers quirk: the
    base ``(n - t) / n`` is a large negative number for most steps, so the
    scale jumps around in ``[1, 1 + guidance_scale]`` rather than rising
    smoothly; we reproduce it because parity with the reference is the
    contract. Without ``use_dynamic_cfg`` the scale is ``guidance_scale``.

    Whether guidance runs at all (two transformer passes and
    ``uncond + scale * (cond - uncond)``) is decided by the pipeline from the
    *base* ``guidance_scale > 1``, before any dynamic scale is computed.

    Args:
      guidance_scale: the user's guidance scale (CogVideoX default 6.0).
      timestep: the step's timestep: a Python or NumPy int, or a 0-d/size-1
        array (its ``.item()`` is used), i.e. ``state.timesteps[i]``.
      num_inference_steps: the number of steps of the schedule (``len(timesteps)``).
      use_dynamic_cfg: the pipeline's ``use_dynamic_cfg`` flag.

    Returns:
      The scale as a Python float.

    Raises:
      ValueError: if ``num_inference_steps`` is not a positive integer.
    """
    n = num_inference_steps
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ValueError(f"num_inference_steps must be a positive integer, got {num_inference_steps!r}")
    if not use_dynamic_cfg:
        return float(guidance_scale)
    n = int(n)
    t = timestep.item() if hasattr(timestep, "item") else timestep
    return 1 + guidance_scale * ((1 - math.cos(math.pi * ((n - t) / n) ** 5.0)) / 2)


def rescale_noise_cfg(noise_cfg: jax.Array, noise_pred_text: jax.Array, guidance_rescale: jax.Array | float) -> jax.Array:
    """Guidance rescale: the guided prediction brought back to the conditional prediction's spread.

    ``rescaled = noise_cfg * std(noise_pred_text) / std(noise_cfg)`` per sample (standard deviation over every
    axis but the batch, with Bessel's correction, as ``torch.std``), then ``guidance_rescale * rescaled +
    (1 - guidance_rescale) * noise_cfg``. Counters the over-saturation of large guidance scales (paper Table 4
    fault 4a: 0.7 for LTX dev models).

    Args:
      noise_cfg: the guided prediction ``(B, ...)``, float32.
      noise_pred_text: the conditional prediction, same shape.
      guidance_rescale: the mixing factor in ``[0, 1]`` (a float or a traced scalar).

    Returns:
      float32, ``noise_cfg``'s shape.
    """
    axes = tuple(range(1, noise_cfg.ndim))
    std_text = jnp.std(noise_pred_text, axis=axes, keepdims=True, ddof=1)
    std_cfg = jnp.std(noise_cfg, axis=axes, keepdims=True, ddof=1)
    rescaled = noise_cfg * (std_text / std_cfg)
    return guidance_rescale * rescaled + (1 - guidance_rescale) * noise_cfg
