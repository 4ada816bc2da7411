"""Parity of vidax.schedulers with diffusers (the reference implementation).

For num_inference_steps in {4, 30, 50} and flow_shift in {1, 3, 5, 12}, for
UniPC (Wan configuration, bh2 and bh1) and flow-matching Euler:
  * sigmas and timesteps equal diffusers' (dtype too) within 1e-6; the final sigma is exactly 0;
  * running both samplers on model outputs that depend on the current sample
    (so differences propagate), every intermediate sample equals diffusers'
    within 1e-6 (max abs diff, and max abs diff relative to max |sample|).
On CPU the samples are in fact bit-identical; the tests only require 1e-6.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from vidax.schedulers import (  # noqa: E402
    FlowMatchEulerScheduler,
    FlowUniPCMultistepScheduler,
    Scheduler,
    SchedulerState,
    scheduler_from_config,
)
from vidax.schedulers import unipc as unipc_module  # noqa: E402

STEPS = (4, 30, 50)
SHIFTS = (1.0, 3.0, 5.0, 12.0)
KINDS = ("unipc-bh2", "unipc-bh1", "euler")
SHAPE = (1, 4, 3, 4, 6)  # (B, C, T, H, W)
TOL = 1e-6

_rs = np.random.RandomState(0)
NOISE = _rs.randn(*SHAPE).astype(np.float32)  # initial latents (pure noise)
X0 = (0.5 * _rs.randn(*SHAPE)).astype(np.float32)  # the "clean" target of the toy model


def toy_model(sample: np.ndarray, i: int) -> np.ndarray:
    """A deterministic flow prediction that depends on the current sample (so errors propagate)."""
    jitter = np.random.RandomState(1000 + i).randn(*SHAPE)
    return (NOISE - X0 + 0.2 * np.tanh(sample) + 0.1 * jitter).astype(np.float32)


def make_pair(kind: str, flow_shift: float, **kw) -> tuple[Scheduler, object]:
    """(ours, diffusers reference) for a sampler kind."""
    if kind == "euler":
        return FlowMatchEulerScheduler(flow_shift=flow_shift), diffusers.FlowMatchEulerDiscreteScheduler(
            shift=flow_shift
        )
    solver_type = kind.split("-")[1]
    ref = diffusers.UniPCMultistepScheduler(
        prediction_type="flow_prediction",
        use_flow_sigmas=True,
        flow_shift=flow_shift,
        solver_order=2,
        solver_type=solver_type,
        predict_x0=True,
        lower_order_final=True,
        final_sigmas_type="zero",
        timestep_spacing="linspace",
        num_train_timesteps=1000,
        disable_corrector=[],
    )
    ours_kw = dict(flow_shift=flow_shift, solver_type=solver_type)
    ours_kw.update(kw)
    return FlowUniPCMultistepScheduler(**ours_kw), ref


def run_both(ours: Scheduler, ref, n: int, begin: int = 0):
    """Run both samplers from NOISE; return per-step (ours, ref, ref_input_sample, ref_model_output)."""
    ref.set_timesteps(n)
    if begin:
        ref.set_begin_index(begin)
    state = ours.set_timesteps(n)
    x_ref = torch.from_numpy(NOISE.copy())
    x = jnp.asarray(NOISE)
    out = []
    for i in range(begin, n):
        mo_ref = torch.from_numpy(toy_model(x_ref.numpy(), i))
        x_in = x_ref
        x_ref = ref.step(mo_ref, ref.timesteps[i], x_ref, return_dict=False)[0]
        x, state = ours.step(state, jnp.asarray(toy_model(np.asarray(x), i)), x, i)
        out.append((np.asarray(x), x_ref.numpy(), x_in, mo_ref))
    return out, state


def max_errors(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(max |a - b|, max |a - b| / max |b|)."""
    d = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
    return d, d / max(float(np.max(np.abs(b))), 1e-30)


# --------------------------------------------------------------------------- schedule


@pytest.mark.parametrize("kind", KINDS)
def test_sigmas_and_timesteps_match_diffusers(kind):
    for n in STEPS:
        for shift in SHIFTS:
            ours, ref = make_pair(kind, shift)
            ref.set_timesteps(n)
            state = ours.set_timesteps(n)
            ref_sigmas, ref_ts = ref.sigmas.numpy(), ref.timesteps.numpy()
            assert state.sigmas.dtype == np.float32 and state.sigmas.shape == (n + 1,)
            assert state.timesteps.dtype == ref_ts.dtype and state.timesteps.shape == (n,)
            assert state.num_inference_steps == n
            np.testing.assert_allclose(state.sigmas, ref_sigmas, rtol=0, atol=TOL, err_msg=f"{kind} {n} {shift}")
            np.testing.assert_allclose(state.timesteps, ref_ts, rtol=0, atol=TOL, err_msg=f"{kind} {n} {shift}")
            assert state.sigmas[-1] == 0.0
            assert np.all(np.diff(state.sigmas) < 0)


def test_unipc_timesteps_are_truncated_not_rounded():
    # diffusers: (sigmas * 1000) in float64 cast to int64 -> truncation; first sigma is 1 - 1e-6 -> 999.
    state = FlowUniPCMultistepScheduler(flow_shift=3.0).set_timesteps(50)
    assert state.timesteps[0] == 999
    s = np.linspace(1.0, 1e-3, 51)[:-1]
    s = 3.0 * s / (1.0 + 2.0 * s)
    assert np.any(np.round(s[1:] * 1000) != np.floor(s[1:] * 1000))  # the case is exercised
    np.testing.assert_array_equal(state.timesteps[1:], np.floor(s[1:] * 1000).astype(np.int64))


# --------------------------------------------------------------------------- sampling


@pytest.mark.parametrize("n", STEPS)
@pytest.mark.parametrize("kind", KINDS)
def test_sampling_matches_diffusers(kind, n):
    for shift in SHIFTS:
        ours, ref = make_pair(kind, shift)
        steps, state = run_both(ours, ref, n)
        assert len(steps) == n
        for i, (a, b, x_in, mo) in enumerate(steps):
            if kind == "unipc-bh1" and i == n - 1 and not np.isfinite(b).all():
                # diffusers quirk: bh1 has B(h) = -inf on the step to sigma=0 and computes
                # alpha_t * B_h * 0 = nan. The limit (and bh2's result) is the x0 prediction.
                b = (x_in - ref.sigmas[i] * mo).numpy()
            assert a.dtype == np.float32
            abs_err, rel_err = max_errors(a, b)
            assert abs_err <= TOL and rel_err <= TOL, f"{kind} n={n} shift={shift} step {i}: {abs_err=} {rel_err=}"
        assert state.sigmas[-1] == 0.0
        assert np.isfinite(steps[-1][0]).all()


def test_start_mid_schedule_matches_diffusers():
    # Image/video-to-video: start at step 7 (diffusers set_begin_index(7)); no history at the first call.
    ours, ref = make_pair("unipc-bh2", 5.0)
    steps, _ = run_both(ours, ref, 20, begin=7)
    for a, b, _, _ in steps:
        assert max_errors(a, b)[0] <= TOL


def test_unipc_options_match_diffusers():
    # Not the Wan defaults but supported: corrector disabled on some steps, sigma_min final sigma.
    for kw in (dict(disable_corrector=[0, 3]), dict(final_sigmas_type="sigma_min")):
        ours, _ = make_pair("unipc-bh2", 3.0, **kw)
        ref = diffusers.UniPCMultistepScheduler(
            prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0, **kw
        )
        steps, _ = run_both(ours, ref, 10)
        for a, b, _, _ in steps:
            assert max_errors(a, b)[0] <= TOL, kw


def test_parity_check_can_fail():
    # The comparison above is sensitive: plausible implementation slips are caught by a wide margin.
    ours, ref = make_pair("unipc-bh2", 5.0, disable_corrector=[0])  # corrector skipped once
    steps, _ = run_both(ours, ref, 30)
    assert max(max_errors(a, b)[0] for a, b, _, _ in steps) > 100 * TOL
    ours, ref = make_pair("unipc-bh1", 5.0)  # wrong B(h)
    ref = make_pair("unipc-bh2", 5.0)[1]
    steps, _ = run_both(ours, ref, 30)
    assert max(max_errors(a, b)[0] for a, b, _, _ in steps[:-1]) > 100 * TOL
    ours, ref = make_pair("euler", 5.0)
    ref = diffusers.FlowMatchEulerDiscreteScheduler(shift=5.0001)  # tiny schedule change
    steps, _ = run_both(ours, ref, 30)
    assert max(max_errors(a, b)[0] for a, b, _, _ in steps) > 10 * TOL


def test_unipc_compiles_a_few_variants_not_one_per_step():
    ours = FlowUniPCMultistepScheduler(flow_shift=3.0)
    shape = (1, 2, 2, 3, 5)  # a shape no other test uses
    state = ours.set_timesteps(30)
    x = jnp.zeros(shape, jnp.float32)
    before = unipc_module._unipc_update._cache_size()
    for i in range(30):
        x, state = ours.step(state, jnp.ones(shape, jnp.float32), x, i)
    # first step, first corrector, steady state, final first-order step
    assert unipc_module._unipc_update._cache_size() - before <= 4


# --------------------------------------------------------------------------- interface


def test_state_is_a_pytree_and_steps_are_checked():
    ours = FlowUniPCMultistepScheduler(flow_shift=3.0)
    state = ours.set_timesteps(4)
    x = jnp.asarray(NOISE)
    _, state = ours.step(state, x, x, 0)
    _, state = ours.step(state, x, x, 1)
    assert isinstance(state, SchedulerState)
    leaves = jax.tree_util.tree_leaves(state)
    assert len(leaves) == 2 + 2 + 1  # sigmas, timesteps, 2 history arrays, last_sample
    same = jax.tree_util.tree_map(lambda a: a, state)
    assert isinstance(same, SchedulerState) and same.prev_step_index == 1
    with pytest.raises(ValueError, match="consecutive"):
        ours.step(state, x, x, 3)
    with pytest.raises(ValueError, match="step_index"):
        ours.step(state, x, x, 4)
    with pytest.raises(ValueError, match="shape"):
        ours.step(ours.set_timesteps(4), x, x[..., :3], 0)
    with pytest.raises(ValueError, match="num_inference_steps"):
        ours.set_timesteps(0)
    with pytest.raises(ValueError, match="step_index"):
        FlowMatchEulerScheduler().step(FlowMatchEulerScheduler().set_timesteps(4), x, x, -1)


def test_dtypes_follow_diffusers():
    x32 = jnp.asarray(NOISE)
    x16 = x32.astype(jnp.bfloat16)
    unipc = FlowUniPCMultistepScheduler(flow_shift=3.0)
    prev, state = unipc.step(unipc.set_timesteps(4), x16, x16, 0)
    assert prev.dtype == jnp.bfloat16  # UniPC: sample's dtype
    assert state.model_outputs[-1].dtype == jnp.float32
    prev32, _ = unipc.step(unipc.set_timesteps(4), x16, x32, 0)
    assert prev32.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(prev.astype(jnp.float32)), np.asarray(prev32), atol=0.05)
    euler = FlowMatchEulerScheduler(flow_shift=3.0)
    prev, _ = euler.step(euler.set_timesteps(4), x16, x32, 0)
    assert prev.dtype == jnp.bfloat16  # Euler: model_output's dtype (diffusers casts back to it)


def test_scale_noise_matches_diffusers():
    ours, ref = make_pair("euler", 3.0)
    ref.set_timesteps(30)
    ref.set_begin_index(10)
    state = ours.set_timesteps(30)
    clean = torch.from_numpy(X0)
    want = ref.scale_noise(clean, ref.timesteps[10:11], torch.from_numpy(NOISE)).numpy()
    got = np.asarray(ours.scale_noise(state, jnp.asarray(X0), jnp.asarray(NOISE), 10))
    assert max_errors(got, want)[0] <= TOL
    assert FlowUniPCMultistepScheduler.init_noise_sigma == 1.0 == FlowMatchEulerScheduler.init_noise_sigma


# --------------------------------------------------------------------------- from config


def _saved_config(sched, tmp_path) -> dict:
    sched.save_config(tmp_path)
    with open(tmp_path / "scheduler_config.json") as f:
        return json.load(f)


def test_scheduler_from_config_builds_each(tmp_path):
    _, ref = make_pair("unipc-bh2", 3.0)
    cfg = _saved_config(ref, tmp_path / "unipc")
    assert cfg["_class_name"] == "UniPCMultistepScheduler"
    ours = scheduler_from_config(cfg)
    assert isinstance(ours, FlowUniPCMultistepScheduler)
    assert ours.flow_shift == 3.0 and ours.solver_order == 2 and ours.solver_type == "bh2"
    ours5 = scheduler_from_config(cfg, flow_shift=5.0)  # 720p override
    ref5 = diffusers.UniPCMultistepScheduler.from_config(ref.config, flow_shift=5.0)
    ref5.set_timesteps(30)
    np.testing.assert_array_equal(ours5.set_timesteps(30).sigmas, ref5.sigmas.numpy())

    euler_ref = diffusers.FlowMatchEulerDiscreteScheduler(shift=5.0)
    ecfg = _saved_config(euler_ref, tmp_path / "euler")
    euler = scheduler_from_config(ecfg)
    assert isinstance(euler, FlowMatchEulerScheduler) and euler.flow_shift == 5.0
    assert scheduler_from_config(ecfg, flow_shift=3.0).flow_shift == 3.0
    assert scheduler_from_config(ecfg, shift=12.0).flow_shift == 12.0
    # diffusers' in-memory .config lacks _class_name; it can be passed in
    from_mem = scheduler_from_config(dict(ref.config), _class_name="UniPCMultistepScheduler")
    assert from_mem.config == ours.config


@pytest.mark.parametrize(
    "cls_name, bad, option",
    [
        ("UniPCMultistepScheduler", {"prediction_type": "epsilon"}, "prediction_type"),
        ("UniPCMultistepScheduler", {"use_flow_sigmas": False}, "use_flow_sigmas"),
        ("UniPCMultistepScheduler", {"thresholding": True}, "thresholding"),
        ("UniPCMultistepScheduler", {"solver_type": "midpoint"}, "solver_type"),
        ("UniPCMultistepScheduler", {"predict_x0": False}, "predict_x0"),
        ("UniPCMultistepScheduler", {"use_karras_sigmas": True}, "use_karras_sigmas"),
        ("UniPCMultistepScheduler", {"use_dynamic_shifting": True}, "use_dynamic_shifting"),
        ("UniPCMultistepScheduler", {"final_sigmas_type": "one"}, "final_sigmas_type"),
        ("FlowMatchEulerDiscreteScheduler", {"use_karras_sigmas": True}, "use_karras_sigmas"),
        ("FlowMatchEulerDiscreteScheduler", {"use_exponential_sigmas": True}, "use_exponential_sigmas"),
        ("FlowMatchEulerDiscreteScheduler", {"use_beta_sigmas": True}, "use_beta_sigmas"),
        ("FlowMatchEulerDiscreteScheduler", {"time_shift_type": "cosine"}, "time_shift_type"),
        ("FlowMatchEulerDiscreteScheduler", {"shift_terminal": 1.0}, "shift_terminal"),
        ("FlowMatchEulerDiscreteScheduler", {"stochastic_sampling": True}, "stochastic_sampling"),
        ("FlowMatchEulerDiscreteScheduler", {"invert_sigmas": True}, "invert_sigmas"),
        ("DDIMScheduler", {}, "_class_name"),
    ],
)
def test_scheduler_from_config_rejects_unsupported(cls_name, bad, option):
    if cls_name == "FlowMatchEulerDiscreteScheduler":
        base = dict(diffusers.FlowMatchEulerDiscreteScheduler(shift=3.0).config)
    else:
        base = dict(make_pair("unipc-bh2", 3.0)[1].config)
    cfg = {**base, **bad, "_class_name": cls_name}
    with pytest.raises(ValueError, match=option):
        scheduler_from_config(cfg)


def test_scheduler_from_config_requires_class_name():
    with pytest.raises(ValueError, match="_class_name"):
        scheduler_from_config(dict(make_pair("unipc-bh2", 3.0)[1].config))
