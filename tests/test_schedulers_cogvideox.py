"""Parity of the CogVideoX samplers (DDIM, DPM-Solver++) and dynamic CFG with diffusers.

The reference is diffusers ``CogVideoXDDIMScheduler`` / ``CogVideoXDPMScheduler``
driven as ``CogVideoXPipeline.__call__`` drives them (DPM: ``old_pred_original_sample``
from the previous step, ``timestep_back = timesteps[i - 1]`` or None at the first step).

* Configurations: the CogVideoX-2B and -5B ``scheduler_config.json`` (snr_shift_scale
  3.0 / 1.0; v-prediction, trailing spacing, zero terminal SNR, set_alpha_to_one).
* For num_inference_steps in {4, 30, 50} (and 7, where the last step goes to timestep 0):
  timesteps equal diffusers' exactly; running both on the same model outputs
  (which depend on the current sample, so differences propagate) every
  intermediate sample, and for DPM every x0 prediction, equals diffusers' within
  1e-6 (absolute and relative to the max magnitude). On CPU they are bit-identical.
* Noise for DPM: ours draws ``jax.random.normal(key_i, shape, float32)`` from the
  key we pass (``key=jax.random.fold_in(KEY, i)``); diffusers' module-level
  ``randn_tensor`` is monkeypatched to return that same array. diffusers draws
  twice on second-order steps and discards the first draw, so the patch returns
  the step's array on every call of the step (and the draws are counted).
* Latents in the CogVideoX layout (B, F, C, H, W) = (1, 13, 4, 6, 8).
"""

from __future__ import annotations

import inspect
import json
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
from diffusers.schedulers import scheduling_dpm_cogvideox as ref_dpm_module  # noqa: E402

from vidax.schedulers import (  # noqa: E402
    SUPPORTED_CLASSES,
    CogVideoXDDIMScheduler,
    CogVideoXDPMScheduler,
    Scheduler,
    SchedulerState,
    guidance_scale_at,
    scheduler_from_config,
)
from vidax.schedulers import cogvideox as cog_module  # noqa: E402

TOL = 1e-6
SHAPE = (1, 13, 4, 6, 8)  # (B, F, C, H, W): CogVideoXPipeline.prepare_latents' layout
STEPS = (4, 30, 50)
KEY = jax.random.key(1234)

# scheduler/scheduler_config.json of THUDM/CogVideoX-2b (snr_shift_scale 3.0); -5b and 1.5-5b use 1.0
CONFIG_2B = {
    "_class_name": "CogVideoXDDIMScheduler",
    "beta_end": 0.012,
    "beta_schedule": "scaled_linear",
    "beta_start": 0.00085,
    "clip_sample": False,
    "clip_sample_range": 1.0,
    "num_train_timesteps": 1000,
    "prediction_type": "v_prediction",
    "rescale_betas_zero_snr": True,
    "sample_max_value": 1.0,
    "set_alpha_to_one": True,
    "snr_shift_scale": 3.0,
    "steps_offset": 0,
    "timestep_spacing": "trailing",
    "trained_betas": None,
}
CONFIG_5B = {**CONFIG_2B, "snr_shift_scale": 1.0}
CONFIGS = {"2b": CONFIG_2B, "5b": CONFIG_5B}
KINDS = ("ddim", "dpm")

_rs = np.random.RandomState(0)
NOISE = _rs.randn(*SHAPE).astype(np.float32)  # initial latents
X0 = (0.5 * _rs.randn(*SHAPE)).astype(np.float32)


def toy_model(sample: np.ndarray, i: int) -> np.ndarray:
    """A deterministic v prediction that depends on the current sample (so errors propagate)."""
    jitter = np.random.RandomState(1000 + i).randn(*SHAPE)
    return (0.8 * np.tanh(sample.astype(np.float32)) - 0.3 * X0 + 0.2 * jitter).astype(np.float32)


def step_key(i: int) -> jax.Array:
    return jax.random.fold_in(KEY, i)


def step_noise(i: int) -> np.ndarray:
    """The noise ours draws from ``key=step_key(i)`` (the documented derivation)."""
    return np.asarray(jax.random.normal(step_key(i), SHAPE, jnp.float32))


def ours_kwargs(config: dict) -> dict:
    """Constructor arguments of ours: the config less the keys diffusers' CogVideoX step never uses."""
    unused = {"clip_sample", "clip_sample_range", "sample_max_value"}
    return {k: v for k, v in config.items() if not k.startswith("_") and k not in unused}


def make_pair(kind: str, config: dict) -> tuple[Scheduler, object]:
    kw = {k: v for k, v in config.items() if not k.startswith("_")}
    if kind == "ddim":
        return CogVideoXDDIMScheduler(**ours_kwargs(config)), diffusers.CogVideoXDDIMScheduler(**kw)
    return CogVideoXDPMScheduler(**ours_kwargs(config)), diffusers.CogVideoXDPMScheduler(**kw)


class _PatchedNoise:
    """Replaces diffusers' randn_tensor in the DPM module: returns ``self.noise`` on every call."""

    def __init__(self):
        self.noise: np.ndarray | None = None
        self.calls = 0

    def __call__(self, shape, generator=None, device=None, dtype=None, layout=None):
        assert tuple(shape) == self.noise.shape
        self.calls += 1
        return torch.from_numpy(self.noise.copy()).to(dtype)


@pytest.fixture
def ref_noise(monkeypatch):
    patched = _PatchedNoise()
    monkeypatch.setattr(ref_dpm_module, "randn_tensor", patched)
    return patched


def run_both(kind, ours, ref, n, ref_noise=None, begin=0, dtype=np.float32, model=toy_model, noise_of=step_noise):
    """Run both from NOISE as CogVideoXPipeline does; per step: (ours, ref, ours_x0, ref_x0, n_draws)."""
    ref.set_timesteps(n)
    state = ours.set_timesteps(n)
    timesteps = ref.timesteps[begin:]  # the video-to-video pipeline truncates the schedule
    x_ref = torch.from_numpy(NOISE.copy()).to(torch.bfloat16 if dtype == "bfloat16" else torch.float32)
    x = jnp.asarray(NOISE).astype(jnp.bfloat16 if dtype == "bfloat16" else jnp.float32)
    old_ref = None
    out = []
    for j, t in enumerate(timesteps):
        i = begin + j
        mo_ref = torch.from_numpy(model(x_ref.float().numpy(), i))
        mo = jnp.asarray(model(np.asarray(x.astype(jnp.float32)), i))
        if kind == "ddim":
            x_ref, x0_ref = ref.step(mo_ref, t, x_ref, return_dict=False)
            x, state = ours.step(state, mo, x, i)
            draws = 0
        else:
            ref_noise.noise = noise_of(i)
            before = ref_noise.calls
            x_ref, old_ref = ref.step(
                mo_ref, old_ref, t, timesteps[j - 1] if j > 0 else None, x_ref, return_dict=False
            )
            x0_ref = old_ref
            x, state = ours.step(state, mo, x, i, key=step_key(i))
            draws = ref_noise.calls - before
        x0 = state.model_outputs[-1]
        out.append((np.asarray(x.astype(jnp.float32)), x_ref.float().numpy(),
                    np.asarray(x0.astype(jnp.float32)), x0_ref.float().numpy(), draws, x.dtype, x_ref.dtype))
        if dtype == "bfloat16":  # the pipeline casts the latents back to the transformer dtype
            x_ref = x_ref.to(torch.bfloat16)
            x = x.astype(jnp.bfloat16)
    return out, state


def max_errors(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(max |a - b|, max |a - b| / max |b|)."""
    d = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
    return d, d / max(float(np.max(np.abs(b))), 1e-30)


def assert_close(a, b, what):
    abs_err, rel_err = max_errors(a, b)
    assert abs_err <= TOL and rel_err <= TOL, f"{what}: {abs_err=} {rel_err=}"


# --------------------------------------------------------------------------- schedule


@pytest.mark.parametrize("kind", KINDS)
def test_schedule_matches_diffusers(kind):
    for name, config in CONFIGS.items():
        ours, ref = make_pair(kind, config)
        assert ours.alphas_cumprod.dtype == np.float64 == ref.alphas_cumprod.numpy().dtype
        np.testing.assert_allclose(ours.alphas_cumprod, ref.alphas_cumprod.numpy(), rtol=1e-14, atol=1e-15)
        assert ours.alphas_cumprod[-1] == 0.0  # zero terminal SNR
        for n in STEPS + (7, 1000):
            ref.set_timesteps(n)
            state = ours.set_timesteps(n)
            assert state.timesteps.dtype == np.int64 and state.timesteps.shape == (n,)
            np.testing.assert_array_equal(state.timesteps, ref.timesteps.numpy(), err_msg=f"{name} {n}")
            assert state.sigmas.dtype == np.float32 and state.sigmas.shape == (n + 1,)
            assert state.sigmas[0] == 1.0 and np.all(np.diff(state.sigmas) <= 0)
            assert state.num_inference_steps == n
    with pytest.raises(ValueError, match="num_inference_steps"):
        ours.set_timesteps(1001)
    with pytest.raises(ValueError, match="num_inference_steps"):
        ours.set_timesteps(0)


def test_prev_timesteps_for_30_steps_follow_diffusers_not_the_schedule():
    ours = scheduler_from_config(CONFIG_2B)
    state = ours.set_timesteps(30)
    # diffusers: trailing spacing, round(arange(1000, 0, -1000/30)) - 1
    assert state.timesteps.tolist() == [
        999, 966, 932, 899, 866, 832, 799, 766, 732, 699, 666, 632, 599, 566, 532,
        499, 466, 432, 399, 366, 332, 299, 266, 232, 199, 166, 132, 99, 66, 32,
    ]  # fmt: skip
    # diffusers' step: prev_timestep = timestep - 1000 // 30 = timestep - 33 (-1: final_alpha_cumprod)
    prev = ours.prev_timesteps(state)
    assert prev.dtype == np.int64
    assert prev.tolist() == [
        966, 933, 899, 866, 833, 799, 766, 733, 699, 666, 633, 599, 566, 533, 499,
        466, 433, 399, 366, 333, 299, 266, 233, 199, 166, 133, 99, 66, 33, -1,
    ]  # fmt: skip
    assert np.sum(prev[:-1] != state.timesteps[1:]) == 10  # the quirk: one training step off, 10 times
    assert state.sigmas[-1] == 0.0  # set_alpha_to_one: the last step lands on alphas_cumprod 1
    # 7 steps: the last timestep is 142 and the last step goes to timestep 0, not to alpha 1
    state7 = ours.set_timesteps(7)
    assert state7.timesteps[-1] == 142 and ours.prev_timesteps(state7)[-1] == 0
    assert state7.sigmas[-1] == np.float32(np.sqrt(1 - ours.alphas_cumprod[0])) > 0


# --------------------------------------------------------------------------- sampling


@pytest.mark.parametrize("n", STEPS)
@pytest.mark.parametrize("kind", KINDS)
def test_sampling_matches_diffusers(kind, n, ref_noise):
    for name, config in CONFIGS.items():
        ours, ref = make_pair(kind, config)
        steps, state = run_both(kind, ours, ref, n, ref_noise)
        assert len(steps) == n and state.prev_step_index == n - 1
        for i, (a, b, x0, x0_ref, draws, dt, dt_ref) in enumerate(steps):
            assert dt == jnp.float32 and dt_ref == torch.float32
            assert_close(a, b, f"{kind} {name} n={n} step {i} sample")
            assert_close(x0, x0_ref, f"{kind} {name} n={n} step {i} x0")
            if kind == "dpm":  # diffusers draws again (second order) except on the first and last step
                assert draws == (1 if i in (0, n - 1) else 2), (i, draws)
        # the last step goes to alphas_cumprod 1: the result is the x0 prediction
        np.testing.assert_array_equal(steps[-1][0], steps[-1][2])
        assert np.isfinite(steps[-1][0]).all()


@pytest.mark.parametrize("kind", KINDS)
def test_sampling_last_step_to_timestep_zero_matches_diffusers(kind, ref_noise):
    # 7 steps: prev_timestep of the last step is 0 (not negative): DPM stays second order and adds noise
    ours, ref = make_pair(kind, CONFIG_5B)
    steps, _ = run_both(kind, ours, ref, 7, ref_noise)
    for i, (a, b, x0, x0_ref, draws, _, _) in enumerate(steps):
        assert_close(a, b, f"{kind} step {i}")
        assert_close(x0, x0_ref, f"{kind} step {i} x0")
    assert kind == "ddim" or steps[-1][4] == 2
    assert not np.array_equal(steps[-1][0], steps[-1][2])


@pytest.mark.parametrize("kind", KINDS)
def test_bfloat16_latents_as_in_the_pipeline_match_diffusers(kind, ref_noise):
    # CogVideoXPipeline: latents in the transformer dtype (bf16), noise_pred.float(), step, latents.to(bf16).
    ours, ref = make_pair(kind, CONFIG_2B)
    steps, _ = run_both(kind, ours, ref, 30, ref_noise, dtype="bfloat16")
    for i, (a, b, x0, x0_ref, _, dt, dt_ref) in enumerate(steps):
        assert dt == jnp.float32 and dt_ref == torch.float32  # bf16 sample, f32 model output -> f32
        assert_close(a, b, f"{kind} bf16 step {i}")
        assert_close(x0, x0_ref, f"{kind} bf16 step {i} x0")


def test_dpm_start_mid_schedule_matches_diffusers(ref_noise):
    # Video-to-video: the loop starts at step 12 with no history (old_pred None, timestep_back None).
    ours, ref = make_pair("dpm", CONFIG_5B)
    steps, _ = run_both("dpm", ours, ref, 30, ref_noise, begin=12)
    assert len(steps) == 18 and steps[0][4] == 1 and steps[1][4] == 2
    for i, (a, b, x0, x0_ref, *_) in enumerate(steps):
        assert_close(a, b, f"step {12 + i}")
        assert_close(x0, x0_ref, f"step {12 + i} x0")


@pytest.mark.parametrize(
    "options",
    [
        dict(prediction_type="epsilon", timestep_spacing="leading", rescale_betas_zero_snr=False, steps_offset=1),
        dict(prediction_type="sample", timestep_spacing="linspace"),
        dict(set_alpha_to_one=False, snr_shift_scale=2.0),
        dict(prediction_type="epsilon", timestep_spacing="trailing", rescale_betas_zero_snr=False),
    ],
)
@pytest.mark.parametrize("kind", KINDS)
def test_other_options_match_diffusers(kind, options, ref_noise):
    ours, ref = make_pair(kind, {**CONFIG_2B, **options})
    steps, _ = run_both(kind, ours, ref, 9, ref_noise)
    for i, (a, b, x0, x0_ref, *_) in enumerate(steps):
        assert_close(a, b, f"{kind} {options} step {i}")
        assert_close(x0, x0_ref, f"{kind} {options} step {i} x0")


def test_epsilon_at_zero_snr_is_refused():
    # diffusers divides by sqrt(alphas_cumprod[999]) = 0 and returns inf/nan
    x = jnp.asarray(NOISE)
    for cls in (CogVideoXDDIMScheduler, CogVideoXDPMScheduler):
        sched = cls(**{**ours_kwargs(CONFIG_2B), "prediction_type": "epsilon"})
        kw = {"key": step_key(0)} if cls is CogVideoXDPMScheduler else {}
        with pytest.raises(ValueError, match="epsilon"):
            sched.step(sched.set_timesteps(10), x, x, 0, **kw)
        sched.step(sched.set_timesteps(10), x, x, 1, **kw)  # later timesteps are fine


def test_scale_noise_matches_add_noise():
    for config in CONFIGS.values():
        ours, ref = make_pair("ddim", config)
        ref.set_timesteps(50)
        state = ours.set_timesteps(50)
        for k in (0, 1, 17, 49):
            want = ref.add_noise(torch.from_numpy(X0), torch.from_numpy(NOISE), ref.timesteps[k : k + 1]).numpy()
            got = ours.scale_noise(state, jnp.asarray(X0), jnp.asarray(NOISE), k)
            assert got.dtype == jnp.float32
            assert_close(np.asarray(got), want, f"add_noise step {k}")
    assert CogVideoXDDIMScheduler.init_noise_sigma == CogVideoXDPMScheduler.init_noise_sigma == 1.0


# --------------------------------------------------------------------------- the tests can fail


class _NextTimestepDDIM(CogVideoXDDIMScheduler):
    """A plausible slip: step to the next timestep of the schedule instead of t - T // n."""

    def _prev_timestep(self, state, i):
        return int(state.timesteps[i + 1]) if i + 1 < state.num_inference_steps else -1


def test_parity_check_can_fail(ref_noise):
    kw = ours_kwargs(CONFIG_2B)
    # DDIM: the prev-timestep quirk matters at 30 steps (and not at 50, where 1000 // 50 is exact)
    ref = diffusers.CogVideoXDDIMScheduler(**{k: v for k, v in CONFIG_2B.items() if k[0] != "_"})
    steps, _ = run_both("ddim", _NextTimestepDDIM(**kw), ref, 30)
    assert max(max_errors(a, b)[1] for a, b, *_ in steps) > 100 * TOL
    steps, _ = run_both("ddim", _NextTimestepDDIM(**kw), ref, 50)
    assert max(max_errors(a, b)[1] for a, b, *_ in steps) <= TOL
    # the SNR shift of the other model size
    steps, _ = run_both("ddim", CogVideoXDDIMScheduler(**ours_kwargs(CONFIG_5B)), ref, 30)
    assert max(max_errors(a, b)[1] for a, b, *_ in steps) > 100 * TOL
    # DPM: different noise on one step shows; a first-order-only solver shows
    ours, ref = make_pair("dpm", CONFIG_2B)
    steps, _ = run_both("dpm", ours, ref, 30, ref_noise, noise_of=lambda i: step_noise(i + (i == 10)))
    assert max(max_errors(a, b)[1] for a, b, *_ in steps) > 100 * TOL
    ours, ref = make_pair("dpm", CONFIG_2B)

    class FirstOrder(CogVideoXDPMScheduler):
        def step(self, state, model_output, sample, step_index, **kw):
            fresh = SchedulerState(sigmas=state.sigmas, timesteps=state.timesteps)
            return super().step(fresh, model_output, sample, step_index, **kw)

    steps, _ = run_both("dpm", FirstOrder(**kw), ref, 30, ref_noise)
    assert max(max_errors(a, b)[1] for a, b, *_ in steps) > 100 * TOL


# --------------------------------------------------------------------------- interface


def test_dpm_noise_argument():
    ours = CogVideoXDPMScheduler(**ours_kwargs(CONFIG_2B))
    x = jnp.asarray(NOISE)
    mo = jnp.asarray(toy_model(NOISE, 0))
    state = ours.set_timesteps(10)
    a, s1 = ours.step(state, mo, x, 0, key=step_key(0))
    b, _ = ours.step(state, mo, x, 0, noise=jnp.asarray(step_noise(0)))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    c, _ = ours.step(state, mo, x, 0, key=step_key(1))
    assert not np.array_equal(np.asarray(a), np.asarray(c))
    with pytest.raises(ValueError, match="noise= or key="):
        ours.step(state, mo, x, 0)
    with pytest.raises(ValueError, match="noise= or key="):
        ours.step(state, mo, x, 0, noise=x, key=step_key(0))
    with pytest.raises(ValueError, match="noise shape"):
        ours.step(state, mo, x, 0, noise=x[..., :3])
    with pytest.raises(ValueError, match="consecutive"):
        ours.step(s1, mo, x, 2, key=step_key(2))
    with pytest.raises(ValueError, match="step_index"):
        ours.step(state, mo, x, 10, key=step_key(2))
    with pytest.raises(ValueError, match="shape"):
        ours.step(state, mo, x[..., :3], 0, key=step_key(0))


def test_state_is_a_pytree_and_compiles_are_few():
    shape = (1, 3, 2, 3, 5)  # a shape no other test uses
    x = jnp.zeros(shape, jnp.float32)
    ddim = CogVideoXDDIMScheduler(**ours_kwargs(CONFIG_2B))
    dpm = CogVideoXDPMScheduler(**ours_kwargs(CONFIG_2B))
    before = (cog_module._ddim_update._cache_size(), cog_module._dpm_update._cache_size())
    for sched in (ddim, dpm):
        state = sched.set_timesteps(30)
        for i in range(30):
            kw = {"noise": x} if sched is dpm else {}
            y, state = sched.step(state, jnp.ones(shape, jnp.float32), x, i, **kw)
        assert isinstance(state, SchedulerState) and state.prev_step_index == 29
        leaves = jax.tree_util.tree_leaves(state)
        assert len(leaves) == 3  # timesteps, sigmas, the last x0
        same = jax.tree_util.tree_map(lambda a: a, state)
        assert isinstance(same, SchedulerState) and same.prev_step_index == 29
    # DDIM one variant; DPM first and second order
    assert cog_module._ddim_update._cache_size() - before[0] == 1
    assert cog_module._dpm_update._cache_size() - before[1] == 2


# --------------------------------------------------------------------------- from config


def test_scheduler_from_config_builds_each(tmp_path):
    for cls_name, cls, ref_cls in (
        ("CogVideoXDDIMScheduler", CogVideoXDDIMScheduler, diffusers.CogVideoXDDIMScheduler),
        ("CogVideoXDPMScheduler", CogVideoXDPMScheduler, diffusers.CogVideoXDPMScheduler),
    ):
        assert cls_name in SUPPORTED_CLASSES
        ref = ref_cls(**{k: v for k, v in CONFIG_5B.items() if k[0] != "_"})
        ref.save_config(tmp_path / cls_name)
        with open(tmp_path / cls_name / "scheduler_config.json") as f:
            cfg = json.load(f)
        assert cfg["_class_name"] == cls_name
        ours = scheduler_from_config(cfg)
        assert type(ours) is cls
        assert ours.config == {
            "num_train_timesteps": 1000, "beta_start": 0.00085, "beta_end": 0.012,
            "beta_schedule": "scaled_linear", "set_alpha_to_one": True, "steps_offset": 0,
            "prediction_type": "v_prediction", "timestep_spacing": "trailing",
            "rescale_betas_zero_snr": True, "snr_shift_scale": 1.0,
        }  # fmt: skip
        np.testing.assert_allclose(ours.alphas_cumprod, ref.alphas_cumprod.numpy(), rtol=1e-14, atol=1e-15)
        assert scheduler_from_config(cfg, snr_shift_scale=3.0).snr_shift_scale == 3.0
    # one checkpoint config, either sampler (the CogVideoX pipelines accept both)
    assert type(scheduler_from_config(CONFIG_2B, _class_name="CogVideoXDPMScheduler")) is CogVideoXDPMScheduler
    # missing keys take diffusers' defaults
    bare = scheduler_from_config({"_class_name": "CogVideoXDDIMScheduler"})
    ref = diffusers.CogVideoXDDIMScheduler()
    assert bare.prediction_type == ref.config.prediction_type == "epsilon"
    assert bare.timestep_spacing == ref.config.timestep_spacing == "leading"
    assert bare.snr_shift_scale == ref.config.snr_shift_scale == 3.0
    ref.set_timesteps(30)
    np.testing.assert_array_equal(bare.set_timesteps(30).timesteps, ref.timesteps.numpy())


@pytest.mark.parametrize(
    "bad, option",
    [
        ({"beta_schedule": "linear"}, "beta_schedule"),
        ({"beta_schedule": "squaredcos_cap_v2"}, "beta_schedule"),
        ({"trained_betas": [0.01] * 1000}, "trained_betas"),
        ({"prediction_type": "flow_prediction"}, "prediction_type"),
        ({"timestep_spacing": "karras"}, "timestep_spacing"),
        ({"snr_shift_scale": 0.0}, "snr_shift_scale"),
        ({"steps_offset": -1}, "steps_offset"),
        ({"num_train_timesteps": 0}, "num_train_timesteps"),
    ],
)
@pytest.mark.parametrize("cls_name", ["CogVideoXDDIMScheduler", "CogVideoXDPMScheduler"])
def test_scheduler_from_config_rejects_unsupported(cls_name, bad, option):
    with pytest.raises(ValueError, match=option):
        scheduler_from_config({**CONFIG_2B, **bad, "_class_name": cls_name})


def test_unknown_keys_warn_and_ignored_keys_do_not():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scheduler_from_config({**CONFIG_2B, "clip_sample": True, "_diffusers_version": "0.30.0"})
    with pytest.warns(UserWarning, match="solver_order"):
        scheduler_from_config({**CONFIG_2B, "solver_order": 2})


# --------------------------------------------------------------------------- dynamic CFG


def _reference_dynamic_cfg():
    """The dynamic-CFG expression of CogVideoXPipeline.__call__, as a function of (guidance_scale, t, n)."""
    src = inspect.getsource(diffusers.CogVideoXPipeline.__call__)
    pattern = r"if use_dynamic_cfg:\s*\n\s*self\._guidance_scale = (.*?)\n\s*if do_classifier_free_guidance"
    m = re.search(pattern, src, re.S)
    assert m, "dynamic CFG expression not found in CogVideoXPipeline.__call__"
    expr = m.group(1).strip()
    assert "t.item()" in expr and "num_inference_steps" in expr and "guidance_scale" in expr
    code = compile(expr, "<CogVideoXPipeline dynamic cfg>", "eval")

    def scale(guidance_scale, t, num_inference_steps):
        env = {"math": math, "guidance_scale": guidance_scale, "t": t, "num_inference_steps": num_inference_steps}
        return eval(code, env)  # noqa: S307 - the reference's own expression

    return scale


def test_guidance_scale_at_matches_the_pipeline():
    reference = _reference_dynamic_cfg()
    ours = scheduler_from_config(CONFIG_5B)
    ref_sched = diffusers.CogVideoXDDIMScheduler(**{k: v for k, v in CONFIG_5B.items() if k[0] != "_"})
    for n in (4, 30, 50):
        ref_sched.set_timesteps(n)
        state = ours.set_timesteps(n)
        for g in (6.0, 7, 1.5):
            for t_ref, t in zip(ref_sched.timesteps, state.timesteps):
                want = reference(g, t_ref, n)  # t is a 0-d torch tensor in the pipeline
                assert guidance_scale_at(g, t, n) == want
                assert guidance_scale_at(g, int(t), n) == want
                assert 1.0 <= want <= 1.0 + g
            assert guidance_scale_at(g, state.timesteps[0], n, use_dynamic_cfg=False) == g
    # it is the timestep value, not the step index (a diffusers quirk kept on purpose)
    n = 50
    by_index = [1 + 6.0 * (1 - math.cos(math.pi * ((n - i) / n) ** 5.0)) / 2 for i in range(n)]
    got = [guidance_scale_at(6.0, t, n) for t in ours.set_timesteps(n).timesteps]
    assert max(abs(a - b) for a, b in zip(got, by_index)) > 1.0
    with pytest.raises(ValueError, match="num_inference_steps"):
        guidance_scale_at(6.0, 999, 0)
