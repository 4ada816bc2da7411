"""Cosmos3's sampler against diffusers' UniPCMultistepScheduler as Cosmos3OmniPipeline sets it: Nano's Karras
flow grid (scripts/convert_cosmos3_to_diffusers.py) and the native flow grid (``use_native_flow_schedule``), every
sigma and timestep, and the samples of every step on fixed model outputs."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
from diffusers import UniPCMultistepScheduler  # noqa: E402

from vidax.models.cosmos3.schedule import make_scheduler  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")

# scripts/convert_cosmos3_to_diffusers.py
NANO = dict(use_karras_sigmas=True, use_flow_sigmas=True, prediction_type="flow_prediction", sigma_max=200.0,
            sigma_min=0.147)


def native(flow_shift):
    return dict(use_flow_sigmas=True, prediction_type="flow_prediction", flow_shift=flow_shift)


def reference(config, steps, use_native):
    """The scheduler as Cosmos3OmniPipeline.__call__ sets its timesteps (step 6 of the pipeline)."""
    ref = UniPCMultistepScheduler(**config)
    if use_native:
        sigmas = np.linspace(1.0 - 1.0 / ref.config.num_train_timesteps, 0.0, steps + 1)[:-1]
        ref.set_timesteps(steps, device="cpu", sigmas=sigmas)
    else:
        ref.set_timesteps(steps, device="cpu")
    return ref


CASES = [(NANO, False), (native(1.0), True), (native(3.0), True), (native(5.0), True)]
SHAPE = (1, 6, 3, 4, 4)
_rs = np.random.RandomState(0)
NOISE = _rs.randn(*SHAPE).astype(np.float32)
X0 = (0.5 * _rs.randn(*SHAPE)).astype(np.float32)


def toy_model(sample, i):
    jitter = np.random.RandomState(1000 + i).randn(*SHAPE)
    return (NOISE - X0 + 0.2 * np.tanh(sample) + 0.1 * jitter).astype(np.float32)


@pytest.mark.parametrize("config,use_native", CASES)
@pytest.mark.parametrize("steps", [1, 4, 35, 50])
def test_schedule_matches_diffusers(config, use_native, steps):
    ref = reference(config, steps, use_native)
    saved = {"_class_name": "UniPCMultistepScheduler", **dict(ref.config)}
    state = make_scheduler(saved, use_native_flow_schedule=use_native).set_timesteps(steps)
    ref_sigmas = ref.sigmas.numpy()
    assert state.sigmas.shape == ref_sigmas.shape and state.timesteps.shape == tuple(ref.timesteps.shape)
    rel = np.abs(state.sigmas.astype(np.float64) - ref_sigmas) / np.maximum(np.abs(ref_sigmas), 1e-30)
    assert rel.max() < 1e-6
    np.testing.assert_array_equal(state.timesteps, ref.timesteps.numpy())
    # what the transformer receives: the int timestep (t.item()) as float32
    np.testing.assert_array_equal(state.model_timesteps, ref.timesteps.numpy().astype(np.float32))


@pytest.mark.parametrize("config,use_native", CASES)
@pytest.mark.parametrize("steps", [4, 35])
def test_samples_match_diffusers(config, use_native, steps):
    ref = reference(config, steps, use_native)
    sched = make_scheduler({"_class_name": "UniPCMultistepScheduler", **dict(ref.config)},
                           use_native_flow_schedule=use_native)
    state = sched.set_timesteps(steps)
    x_ref, x = torch.from_numpy(NOISE.copy()), jnp.asarray(NOISE)
    for i, t in enumerate(ref.timesteps):
        # the pipeline's call: batch axis added around the (C, T, H, W) latents
        v_ref = torch.from_numpy(toy_model(x_ref.numpy(), i))
        x_ref = ref.step(v_ref.unsqueeze(0), t, x_ref.unsqueeze(0), return_dict=False)[0].squeeze(0)
        x, state = sched.step(state, jnp.asarray(toy_model(np.asarray(x), i)), x, i)
        r = x_ref.numpy().astype(np.float64)
        err = np.linalg.norm(np.asarray(x, np.float64) - r) / np.linalg.norm(r)
        assert err < 1e-6, f"step {i}: {err}"


def test_bad_configs_are_refused():
    with pytest.raises(ValueError, match="UniPCMultistepScheduler"):
        make_scheduler({"_class_name": "FlowMatchEulerDiscreteScheduler"})
    with pytest.raises(ValueError, match="use_native_flow_schedule"):
        make_scheduler({"_class_name": "UniPCMultistepScheduler", **NANO}, use_native_flow_schedule=True)
