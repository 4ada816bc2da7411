"""Distilled (few-step) Cosmos3 folders against the pinned diffusers 0.42.1's distilled modular pipeline.

References: ``modular_pipelines/cosmos/before_denoise.py`` ``Cosmos3DistilledSetTimestepsStep`` (the pipeline config's
``distilled_sigmas`` given to ``FlowMatchEulerDiscreteScheduler.set_timesteps(sigmas=...)``, the step count fixed,
guidance forced to 1), ``denoise.py`` ``Cosmos3DistilledVisionLoopSchedulerStep`` (the scheduler's stochastic step with
the call's generator, conditioning frames re-anchored after each step) and ``schedulers/
scheduling_flow_match_euler_discrete.py`` (``stochastic_sampling``).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import diffusers.schedulers.scheduling_flow_match_euler_discrete as fm  # noqa: E402
from diffusers import FlowMatchEulerDiscreteScheduler  # noqa: E402

from vidax.models.cosmos3.schedule import distilled_model_timesteps, make_distilled_scheduler  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")

SHAPE = (1, 6, 3, 4, 4)
_rs = np.random.RandomState(0)
X0 = (0.5 * _rs.randn(*SHAPE)).astype(np.float32)


def toy_model(sample, i):
    jitter = np.random.RandomState(1000 + i).randn(*SHAPE)
    return (0.7 * sample - X0 + 0.2 * np.tanh(sample) + 0.1 * jitter).astype(np.float32)


def step_noises(n):
    return [np.random.RandomState(2000 + i).randn(*SHAPE).astype(np.float32) for i in range(n)]


class FixedNoise:
    """Stands in for diffusers' ``randn_tensor`` in the scheduler module: hands out the given noises in order."""

    def __init__(self, noises):
        self.noises, self.calls = list(noises), 0

    def __call__(self, shape, generator=None, device=None, dtype=None, layout=None):
        out = torch.from_numpy(self.noises[self.calls]).to(dtype=dtype)
        assert tuple(out.shape) == tuple(shape)
        self.calls += 1
        return out


# The diffusers PR's tiny distilled fixture's t_list (tests/modular_pipelines/cosmos/
# test_modular_pipeline_cosmos3_distilled.py, huggingface/diffusers#14177); a top below 1; a shifted config.
SIGMA_CASES = [
    ((1.0, 0.75, 0.5, 0.25), dict(stochastic_sampling=True)),
    ((0.999, 0.93, 0.71, 0.32), dict(stochastic_sampling=True)),
    ((1.0, 0.8, 0.45), dict(stochastic_sampling=True, shift=3.0)),
    ((1.0, 0.75, 0.5, 0.25), dict(stochastic_sampling=False)),
]


@pytest.mark.parametrize("sigmas,config", SIGMA_CASES)
def test_distilled_scheduler_matches_diffusers(sigmas, config, monkeypatch):
    """Every sigma, timestep and intermediate sample against FlowMatchEulerDiscreteScheduler set as
    Cosmos3DistilledSetTimestepsStep sets it and stepped as Cosmos3DistilledVisionLoopSchedulerStep steps it."""
    ref = FlowMatchEulerDiscreteScheduler(**config)
    ref.set_timesteps(sigmas=[float(s) for s in sigmas], device="cpu")
    saved = {"_class_name": "FlowMatchEulerDiscreteScheduler", **dict(ref.config)}
    sched = make_distilled_scheduler(saved)
    state = sched.set_timesteps(sigmas=sigmas)
    ref_sigmas, ref_t = ref.sigmas.numpy(), ref.timesteps.numpy()
    assert state.sigmas.shape == ref_sigmas.shape == (len(sigmas) + 1,)
    rel = np.abs(state.sigmas.astype(np.float64) - ref_sigmas) / np.maximum(np.abs(ref_sigmas), 1e-30)
    assert rel.max() < 1e-6
    np.testing.assert_array_equal(distilled_model_timesteps(state), ref_t)  # the transformer's t.item()
    # the model's timestep is the float t.item() of the reference's loop
    assert [float(np.float32(t)) for t in distilled_model_timesteps(state)] == [t.item() for t in ref.timesteps]

    stochastic = config["stochastic_sampling"]
    noises = step_noises(len(sigmas))
    fixed = FixedNoise(noises)
    monkeypatch.setattr(fm, "randn_tensor", fixed)
    x_ref = torch.from_numpy(np.random.RandomState(7).randn(*SHAPE).astype(np.float32))
    x = x_ref.numpy().copy()
    for i, t in enumerate(ref.timesteps):
        v = toy_model(x_ref.numpy(), i)
        x_ref = ref.step(torch.from_numpy(v), t, x_ref, generator=torch.Generator().manual_seed(0),
                         return_dict=False)[0]
        x, state = sched.step(state, np.asarray(toy_model(np.asarray(x), i)), x, i,
                              noise=noises[i] if stochastic else None)
        r = x_ref.numpy()
        err = np.abs(np.asarray(x, np.float64) - r).max() / np.abs(r).max()
        assert err < 1e-6, (i, err)
    assert fixed.calls == (len(sigmas) if stochastic else 0)  # one draw per step, the last one included


def test_distilled_step_noise_arguments():
    sched = make_distilled_scheduler({"_class_name": "FlowMatchEulerDiscreteScheduler", "stochastic_sampling": True})
    state = sched.set_timesteps(sigmas=(1.0, 0.5))
    x = np.zeros(SHAPE, np.float32)
    with pytest.raises(ValueError, match="exactly one of noise= or key="):
        sched.step(state, x, x, 0)
    with pytest.raises(ValueError, match="shape"):
        sched.step(state, x, x, 0, noise=np.zeros((1, 2), np.float32))
    import jax

    a, _ = sched.step(state, x + 1, x, 0, key=jax.random.key(3))
    b, _ = sched.step(state, x + 1, x, 0, noise=jax.random.normal(jax.random.key(3), SHAPE))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    det = make_distilled_scheduler({"_class_name": "FlowMatchEulerDiscreteScheduler"})
    with pytest.raises(ValueError, match="stochastic_sampling is off"):
        det.step(det.set_timesteps(sigmas=(1.0,)), x, x, 0, noise=x)
    with pytest.raises(ValueError, match="UniPCMultistepScheduler"):
        make_distilled_scheduler({"_class_name": "UniPCMultistepScheduler"})
