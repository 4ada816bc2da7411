"""LTX-2 sampling schedules and steps (host numpy schedules, jittable steps).

The dev schedule is the one ``LTX2Pipeline.__call__`` builds (diffusers 0.42.1 ``pipelines/ltx2/pipeline_ltx2.py``):
``np.linspace(1, 1/n, n)`` sigmas, ``mu = calculate_shift(video tokens, base_image_seq_len, max_image_seq_len,
base_shift, max_shift)``, then ``FlowMatchEulerDiscreteScheduler.set_timesteps(sigmas=, mu=)`` with the folder's
scheduler configuration (``schedulers/scheduling_flow_match_euler_discrete.py``): dynamic shifting (exponential or
linear) or the static ``shift``, the optional ``shift_terminal`` stretch, ``invert_sigmas``; in float32 in that
operation order. Its step is the plain Euler step ``x + (sigma_next - sigma) v``.

The distilled schedule is upstream's (Lightricks/LTX-2 ``ltx_pipelines/utils/constants.py``
``DISTILLED_SIGMA_VALUES``): eight fixed sigmas and the terminal 0. From LTX-2.5 on upstream's distilled pipeline
samples it with ``EulerAncestralDiffusionStep(eta=1, s_noise=1)`` (``ltx_core/components/diffusion_steps.py``,
driven by ``ltx_pipelines/utils/samplers.py`` ``euler_ancestral_denoising_loop``); diffusers' treatment (the same
sigmas through the plain Euler scheduler) is a departure this module does not follow.
"""

from __future__ import annotations

import math
from typing import Any

import jax.numpy as jnp
import numpy as np

#: Upstream's distilled sigmas: eight steps, then the terminal 0.
DISTILLED_SIGMA_VALUES = (1.0, 0.99375, 0.9875, 0.98125, 0.975, 0.909375, 0.725, 0.421875, 0.0)

#: ``FlowMatchEulerDiscreteScheduler.__init__``'s defaults (a scheduler config's missing keys take them).
SCHEDULER_DEFAULTS = dict(num_train_timesteps=1000, shift=1.0, use_dynamic_shifting=False, base_shift=0.5,
                          max_shift=1.15, base_image_seq_len=256, max_image_seq_len=4096, invert_sigmas=False,
                          shift_terminal=None, use_karras_sigmas=False, use_exponential_sigmas=False,
                          use_beta_sigmas=False, time_shift_type="exponential", stochastic_sampling=False)

MAX_STEPS = 1000


def scheduler_settings(config: dict[str, Any] | None) -> dict[str, Any]:
    """The scheduler configuration with its defaults filled in, checked.

    Raises:
      ValueError: a sigma conversion this module does not implement (Karras, exponential, beta), stochastic
        sampling, an unknown ``time_shift_type``, or a non-positive ``num_train_timesteps``.
    """
    s = dict(SCHEDULER_DEFAULTS)
    s.update({k: v for k, v in (config or {}).items() if k in SCHEDULER_DEFAULTS and v is not None})
    for key in ("use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas", "stochastic_sampling"):
        if s[key]:
            raise ValueError(f"scheduler config: {key}=true is not supported by the LTX-2 pipeline (LTX-2 folders "
                             "use the plain flow-matching Euler schedule)")
    if s["time_shift_type"] not in ("exponential", "linear"):
        raise ValueError(f"scheduler config: time_shift_type must be 'exponential' or 'linear', got "
                         f"{s['time_shift_type']!r}")
    if not (isinstance(s["num_train_timesteps"], (int, float)) and s["num_train_timesteps"] > 0):
        raise ValueError(f"scheduler config: num_train_timesteps={s['num_train_timesteps']!r} must be positive")
    return s


def calculate_shift(image_seq_len: int, base_seq_len: int = 256, max_seq_len: int = 4096, base_shift: float = 0.5,
                    max_shift: float = 1.15) -> float:
    """``mu`` linear in the token count (diffusers ``calculate_shift``, Python floats)."""
    m = (max_shift - base_shift) / (max_seq_len - base_seq_len)
    b = base_shift - m * base_seq_len
    return image_seq_len * m + b


def set_timesteps(config: dict[str, Any] | None, sigmas: Any, mu: float | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``FlowMatchEulerDiscreteScheduler.set_timesteps(sigmas=sigmas, mu=mu)``.

    Args:
      config: the folder's ``scheduler_config.json`` (missing keys: the scheduler's defaults).
      sigmas: ``(n,)`` the unshifted sigmas.
      mu: the dynamic shift (required with ``use_dynamic_shifting``).

    Returns:
      ``(sigmas (n + 1,), timesteps (n,))`` float32: the shifted sigmas with the terminal 0 (1 with
      ``invert_sigmas``) appended, and ``sigmas * num_train_timesteps`` (the transformer's timestep).

    Raises:
      ValueError: see :func:`scheduler_settings`; dynamic shifting without ``mu``.
    """
    s = scheduler_settings(config)
    f32 = np.float32
    sig = np.asarray(sigmas, np.float64).astype(f32)
    if s["use_dynamic_shifting"]:
        if mu is None:
            raise ValueError("mu must be given when the scheduler uses dynamic shifting")
        e = math.exp(mu) if s["time_shift_type"] == "exponential" else mu
        sig = e / (e + (f32(1) / sig - f32(1)) ** f32(1.0))
    else:
        shift = s["shift"]
        sig = shift * sig / (1 + (shift - 1) * sig)
    sig = sig.astype(f32)
    if s["shift_terminal"]:
        one_minus_z = f32(1) - sig
        scale = one_minus_z[-1] / (1 - s["shift_terminal"])
        sig = (f32(1) - one_minus_z / scale).astype(f32)
    n_train = f32(s["num_train_timesteps"])
    timesteps = (sig * n_train).astype(f32)
    if s["invert_sigmas"]:
        sig = (f32(1) - sig).astype(f32)
        timesteps = (sig * n_train).astype(f32)
        return np.concatenate([sig, np.ones(1, f32)]), timesteps
    return np.concatenate([sig, np.zeros(1, f32)]), timesteps


def dev_schedule(config: dict[str, Any] | None, num_inference_steps: int, video_tokens: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The dev schedule of ``LTX2Pipeline.__call__`` for ``video_tokens`` packed video latent tokens.

    Returns:
      ``(sigmas (n + 1,), timesteps (n,))`` float32 (see :func:`set_timesteps`).

    Raises:
      ValueError: ``num_inference_steps`` outside ``1..MAX_STEPS``; see :func:`set_timesteps`.
    """
    n = num_inference_steps
    if not (isinstance(n, (int, np.integer)) and not isinstance(n, bool) and 1 <= n <= MAX_STEPS):
        raise ValueError(f"num_inference_steps must be an integer in 1..{MAX_STEPS}, got {n!r}")
    s = scheduler_settings(config)
    sigmas = np.linspace(1.0, 1 / n, n)
    mu = calculate_shift(video_tokens, s["base_image_seq_len"], s["max_image_seq_len"], s["base_shift"],
                         s["max_shift"])
    return set_timesteps(config, sigmas, mu)


def distilled_schedule() -> tuple[np.ndarray, np.ndarray]:
    """Upstream's distilled sigmas, float32 ``(9,)``, and the transformer's timesteps ``1000 sigma`` ``(8,)``."""
    sig = np.asarray(DISTILLED_SIGMA_VALUES, np.float32)
    return sig, (sig[:-1] * np.float32(1000)).astype(np.float32)


def euler_step(sample: jnp.ndarray, velocity: jnp.ndarray, sigma, sigma_next) -> jnp.ndarray:
    """``FlowMatchEulerDiscreteScheduler.step`` (deterministic): ``sample + (sigma_next - sigma) * velocity`` in
    float32."""
    dt = jnp.float32(sigma_next) - jnp.float32(sigma)
    return sample.astype(jnp.float32) + dt * velocity.astype(jnp.float32)


def ancestral_step(sample: jnp.ndarray, denoised: jnp.ndarray, sigma, sigma_next, noise: jnp.ndarray | None,
                   eta: float = 1.0, s_noise: float = 1.0) -> jnp.ndarray:
    """Upstream ``EulerAncestralDiffusionStep.step`` (rectified flow, ``alpha = 1 - sigma``), float32.

    A deterministic step to ``sigma_down = sigma_next (1 + (sigma_next / sigma - 1) eta)``, then renoising to
    ``sigma_next``: ``x = (alpha_next / alpha_down) x + s_noise sqrt(max(sigma_next^2 - sigma_down^2
    alpha_next^2 / alpha_down^2, 0)) noise``. ``sigma_next == 0`` gives ``denoised`` (the caller handles the
    terminal step: upstream's loop short-circuits it). ``sigma``, ``sigma_next``: scalars (traced or not).
    """
    sigma, sigma_next = jnp.float32(sigma), jnp.float32(sigma_next)
    x, d = sample.astype(jnp.float32), denoised.astype(jnp.float32)
    sigma_down = sigma_next * (1.0 + (sigma_next / sigma - 1.0) * eta)
    ratio = sigma_down / sigma
    x_next = ratio * x + (1.0 - ratio) * d
    if eta > 0:
        alpha_next, alpha_down = 1.0 - sigma_next, 1.0 - sigma_down
        renoise = jnp.sqrt(jnp.maximum(sigma_next ** 2 - sigma_down ** 2 * alpha_next ** 2 / alpha_down ** 2, 0.0))
        x_next = (alpha_next / alpha_down) * x_next + noise.astype(jnp.float32) * s_noise * renoise
    return x_next
