"""FlowMatchEulerScheduler in the LTX-Video configurations, at parity with diffusers.

The reference is diffusers' ``FlowMatchEulerDiscreteScheduler`` built from the
same config dict, driven the way ``pipelines/ltx/pipeline_ltx.py`` (dynamic
shift: ``sigmas=np.linspace(1, 1/n, n)``, ``mu=calculate_shift(...)``) and
``pipelines/ltx/pipeline_ltx_condition.py`` (custom timesteps, per-token steps
on packed latents, ``denoise_strength`` slicing) drive it. Schedules must be
bit-identical (same float32 values, same dtypes); steps too (they are on CPU;
the contract is 1e-6 relative).
"""

from __future__ import annotations

import dataclasses
import json
import warnings

import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from diffusers.pipelines.ltx.pipeline_ltx import calculate_shift as ref_calculate_shift  # noqa: E402
from diffusers.pipelines.ltx.pipeline_ltx_condition import linear_quadratic_schedule  # noqa: E402

from vidax.schedulers import FlowMatchEulerScheduler, calculate_shift, scheduler_from_config  # noqa: E402
from vidax.schedulers import flow_euler as flow_euler_module  # noqa: E402

diffusers.utils.logging.set_verbosity_error()  # diffusers logs a warning for timesteps without sigmas

# Lightricks/LTX-Video scheduler/scheduler_config.json
LTX_CONFIG = {
    "_class_name": "FlowMatchEulerDiscreteScheduler",
    "base_image_seq_len": 1024,
    "base_shift": 0.95,
    "invert_sigmas": False,
    "max_image_seq_len": 4096,
    "max_shift": 2.05,
    "num_train_timesteps": 1000,
    "shift": 1.0,
    "shift_terminal": 0.1,
    "use_beta_sigmas": False,
    "use_dynamic_shifting": True,
    "use_exponential_sigmas": False,
    "use_karras_sigmas": False,
}
# The distilled LTX-Video models' timesteps (pipeline_ltx_condition docs), with a static-shift config.
DISTILLED_TIMESTEPS = [1000, 993, 987, 981, 975, 909, 725, 0.03]
STATIC_CONFIG = {**LTX_CONFIG, "use_dynamic_shifting": False, "shift_terminal": None}
# Latent token counts: LTX 2B at 512x768x25 (4*16*24), 704x480x161 (21*15*22), 768x1280x121, tiny.
TOKENS = (64, 1536, 6930, 15360)
STEPS = (2, 8, 30, 50)


def pair(config: dict, **changes):
    """(ours, diffusers) built from the same scheduler config dict."""
    cfg = {**config, **changes}
    return scheduler_from_config(cfg), diffusers.FlowMatchEulerDiscreteScheduler.from_config(cfg)


def mu_for(tokens: int, config: dict = LTX_CONFIG) -> float:
    # as pipeline_ltx.py computes it from the scheduler config
    return calculate_shift(
        tokens, config["base_image_seq_len"], config["max_image_seq_len"], config["base_shift"], config["max_shift"]
    )


def assert_schedule_equal(state, ref, what: str) -> None:
    rs, rt = ref.sigmas.numpy(), ref.timesteps.numpy()
    assert state.sigmas.dtype == rs.dtype == np.float32 and state.timesteps.dtype == rt.dtype == np.float32, what
    assert state.sigmas.shape == rs.shape and state.timesteps.shape == rt.shape, what
    np.testing.assert_array_equal(state.sigmas, rs, err_msg=what)
    np.testing.assert_array_equal(state.timesteps, rt, err_msg=what)
    assert state.sigmas[-1] == 0.0


# --------------------------------------------------------------------------- calculate_shift


def test_calculate_shift_matches_diffusers():
    for tokens in (*TOKENS, 256, 4096, 100000):
        assert calculate_shift(tokens) == ref_calculate_shift(tokens)
        args = (tokens, 1024, 4096, 0.95, 2.05)
        assert calculate_shift(*args) == ref_calculate_shift(*args)
        assert isinstance(calculate_shift(*args), float)
    assert calculate_shift(1024, 1024, 4096, 0.95, 2.05) == pytest.approx(0.95)  # the anchors
    assert calculate_shift(4096, 1024, 4096, 0.95, 2.05) == pytest.approx(2.05)


def test_calculate_shift_rejects_bad_input():
    with pytest.raises(ValueError, match="max_seq_len"):
        calculate_shift(100, 256, 256)
    with pytest.raises(ValueError, match="image_seq_len"):
        calculate_shift(float("nan"))
    with pytest.raises(ValueError, match="base_shift"):
        calculate_shift(100, base_shift=None)


# --------------------------------------------------------------------------- schedules


@pytest.mark.parametrize("flow_shift", [1.0, 3.0])  # with dynamic shifting the static shift is unused (Flux: 3.0)
@pytest.mark.parametrize("shift_terminal", [0.1, None])
@pytest.mark.parametrize("time_shift_type", ["exponential", "linear"])
def test_dynamic_schedule_matches_diffusers(time_shift_type, shift_terminal, flow_shift):
    ours, ref = pair(LTX_CONFIG, time_shift_type=time_shift_type, shift_terminal=shift_terminal, shift=flow_shift)
    assert ours.use_dynamic_shifting and ours.time_shift_type == time_shift_type
    for n in STEPS:
        for tokens in TOKENS:
            mu = mu_for(tokens)
            # pipeline_ltx.py: custom linspace sigmas (float32 path)
            sig = np.linspace(1.0, 1 / n, n)
            ref.set_timesteps(sigmas=sig, mu=mu)
            assert_schedule_equal(ours.set_timesteps(sigmas=sig, mu=mu), ref, f"sigmas n={n} tokens={tokens}")
            # num_inference_steps alone (float64 path)
            ref.set_timesteps(n, mu=mu)
            assert_schedule_equal(ours.set_timesteps(n, mu=mu), ref, f"default n={n} tokens={tokens}")
            # both: num_inference_steps with sigmas of that length
            ref.set_timesteps(n, sigmas=sig, mu=mu)
            assert_schedule_equal(ours.set_timesteps(n, sigmas=sig, mu=mu), ref, f"n+sigmas n={n}")
    if shift_terminal:
        assert ours.set_timesteps(sigmas=np.linspace(1.0, 1 / 30, 30), mu=1.5).sigmas[-2] == pytest.approx(0.1)


@pytest.mark.parametrize(
    "sigmas",
    [
        [1.0, 0.9, 0.7, 0.45, 0.2, 0.05],
        [0.9937, 0.9875, 0.975, 0.9094, 0.725, 0.4219, 0.0],  # ends at 0: 1/t = inf in the shift
        np.linspace(0.8, 0.05, 13).astype(np.float32),
        (1.0,),
    ],
)
@pytest.mark.parametrize("shift_terminal", [0.1, None])
@pytest.mark.parametrize("time_shift_type", ["exponential", "linear"])
def test_custom_sigmas_match_diffusers(sigmas, time_shift_type, shift_terminal):
    ours, ref = pair(LTX_CONFIG, time_shift_type=time_shift_type, shift_terminal=shift_terminal)
    for tokens in TOKENS:
        mu = mu_for(tokens)
        if shift_terminal and len(sigmas) == 1:  # last sigma 1 after the shift: diffusers gives NaN, we refuse
            with np.errstate(invalid="ignore"):
                ref.set_timesteps(sigmas=sigmas, mu=mu)
            assert np.isnan(ref.sigmas.numpy()[0])
            with pytest.raises(ValueError, match="shift_terminal"):
                ours.set_timesteps(sigmas=sigmas, mu=mu)
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            ref.set_timesteps(sigmas=sigmas, mu=mu)
        assert_schedule_equal(ours.set_timesteps(sigmas=sigmas, mu=mu), ref, f"{sigmas} tokens={tokens}")


@pytest.mark.parametrize("shift_terminal", [0.1, None])
@pytest.mark.parametrize("flow_shift", [1.0, 3.0, 7.0])
def test_static_shift_schedule_matches_diffusers(flow_shift, shift_terminal):
    # Wan-style static shift (double-shifted ends) with and without shift_terminal, and custom sigmas.
    ours, ref = pair(STATIC_CONFIG, shift=flow_shift, shift_terminal=shift_terminal)
    assert not ours.use_dynamic_shifting
    for n in STEPS:
        ref.set_timesteps(n)
        assert_schedule_equal(ours.set_timesteps(n), ref, f"shift={flow_shift} n={n}")
        sig = np.linspace(1.0, 1 / n, n)
        ref.set_timesteps(sigmas=sig)
        assert_schedule_equal(ours.set_timesteps(sigmas=sig), ref, f"sigmas shift={flow_shift} n={n}")
    # mu is ignored without dynamic shifting, as diffusers ignores it (pipelines always pass it)
    ref.set_timesteps(20, mu=0.7)
    assert_schedule_equal(ours.set_timesteps(20, mu=0.7), ref, "mu ignored")


@pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")  # torch, in diffusers' np.array
def test_distilled_timesteps_match_diffusers():
    # pipeline_ltx_condition.py: retrieve_timesteps(scheduler, n, device, timesteps) with the distilled list.
    ours, ref = pair(STATIC_CONFIG)
    ref.set_timesteps(timesteps=DISTILLED_TIMESTEPS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # identity shift: sigmas agree with the timesteps, no warning
        state = ours.set_timesteps(timesteps=DISTILLED_TIMESTEPS)
    assert_schedule_equal(state, ref, "distilled")
    assert state.timesteps[-1] == np.float32(0.03) and state.num_inference_steps == 8
    ref.set_timesteps(8, timesteps=DISTILLED_TIMESTEPS)
    assert_schedule_equal(ours.set_timesteps(8, timesteps=DISTILLED_TIMESTEPS), ref, "distilled with n")
    # the condition pipeline's default: linear_quadratic_schedule sigmas * 1000 as a float32 tensor
    for n in (4, 30, 50):
        ts = linear_quadratic_schedule(n) * 1000
        ref.set_timesteps(n, timesteps=ts)
        assert_schedule_equal(ours.set_timesteps(n, timesteps=ts.numpy()), ref, f"linear_quadratic n={n}")


@pytest.mark.parametrize("time_shift_type", ["exponential", "linear"])
def test_timesteps_with_dynamic_shift_match_diffusers(time_shift_type):
    # Timesteps alone are kept as given while their sigmas are shifted and stretched: diffusers'
    # (inconsistent) values, with a warning. Timesteps with sigmas: both used as given + shifted.
    ours, ref = pair(LTX_CONFIG, time_shift_type=time_shift_type)
    mu = mu_for(6930)
    ref.set_timesteps(timesteps=DISTILLED_TIMESTEPS, mu=mu)
    with pytest.warns(UserWarning, match="timesteps were passed without sigmas"):
        state = ours.set_timesteps(timesteps=DISTILLED_TIMESTEPS, mu=mu)
    assert_schedule_equal(state, ref, "timesteps only")
    sig = [t / 1000 for t in DISTILLED_TIMESTEPS]
    ref.set_timesteps(sigmas=sig, timesteps=DISTILLED_TIMESTEPS, mu=mu)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        state = ours.set_timesteps(sigmas=sig, timesteps=DISTILLED_TIMESTEPS, mu=mu)
    assert_schedule_equal(state, ref, "sigmas and timesteps")
    np.testing.assert_array_equal(state.timesteps, np.array(DISTILLED_TIMESTEPS, np.float32))


def test_schedule_check_can_fail():
    # The float32 order of operations matters: the same LTX schedule evaluated in float64 and
    # rounded once differs from diffusers' (which the tests above match exactly).
    ours, ref = pair(LTX_CONFIG)
    differs = False
    for n in STEPS:
        for tokens in TOKENS:
            mu = mu_for(tokens)
            sig = np.linspace(1.0, 1 / n, n).astype(np.float32).astype(np.float64)
            s = np.exp(mu) / (np.exp(mu) + (1 / sig - 1))
            s = 1 - (1 - s) / ((1 - s[-1]) / 0.9)
            ref.set_timesteps(sigmas=np.linspace(1.0, 1 / n, n), mu=mu)
            differs |= not np.array_equal(s.astype(np.float32), ref.sigmas.numpy()[:-1])
            # a 1e-6 relative change of mu is visible too
            ref.set_timesteps(sigmas=np.linspace(1.0, 1 / n, n), mu=mu * (1 + 1e-6))
            if n >= 8:
                assert not np.array_equal(ours.set_timesteps(sigmas=np.linspace(1.0, 1 / n, n), mu=mu).sigmas,
                                          ref.sigmas.numpy())  # fmt: skip
    assert differs


# --------------------------------------------------------------------------- steps


def _toy_velocity(x: np.ndarray, i: int) -> np.ndarray:
    """A prediction that depends on the current sample (so differences propagate)."""
    jitter = np.random.RandomState(100 + i).randn(*x.shape)
    return (0.3 * np.tanh(x) + jitter).astype(np.float32)


@pytest.mark.parametrize("shape", [(2, 4, 3, 4, 6), (2, 50, 16)], ids=["BCTHW", "packed-BSC"])
@pytest.mark.parametrize("time_shift_type", ["exponential", "linear"])
def test_steps_match_diffusers(shape, time_shift_type):
    ours, ref = pair(LTX_CONFIG, time_shift_type=time_shift_type)
    for n, tokens in ((8, 1536), (30, 6930)):
        mu = mu_for(tokens)
        sig = np.linspace(1.0, 1 / n, n)
        ref.set_timesteps(sigmas=sig, mu=mu)
        state = ours.set_timesteps(sigmas=sig, mu=mu)
        x0 = np.random.RandomState(n).randn(*shape).astype(np.float32)
        x, x_ref = jnp.asarray(x0), torch.from_numpy(x0.copy())
        for i, t in enumerate(ref.timesteps):
            v_ref = torch.from_numpy(_toy_velocity(x_ref.numpy(), i))
            x_ref = ref.step(v_ref, t, x_ref, return_dict=False)[0]
            x, state = ours.step(state, jnp.asarray(_toy_velocity(np.asarray(x), i)), x, i)
            assert x.shape == shape and x.dtype == jnp.float32
            got, want = np.asarray(x), x_ref.numpy()
            err = float(np.max(np.abs(got - want)))
            assert err <= 1e-6 * float(np.max(np.abs(want))), f"n={n} step {i}: {err}"
            np.testing.assert_array_equal(got, want)  # bit-identical on CPU


def _condition_loop(ours, ref, timesteps_ref, state, x0, mask, start: int = 0, per_token_shape=None):
    """pipeline_ltx_condition.py's loop: per-token timesteps min(t, (1 - mask) * 1000), step on -v."""
    x, x_ref = jnp.asarray(x0), torch.from_numpy(x0.copy())
    mask_t = torch.from_numpy(mask)
    B = x0.shape[0]
    for i, t in enumerate(timesteps_ref):
        ts = t.expand(B).unsqueeze(-1).float()
        if per_token_shape is None:
            ts = torch.min(ts, (1 - mask_t) * 1000.0)
        v = _toy_velocity(x_ref.numpy(), i)
        x_ref = ref.step(-torch.from_numpy(v), t, x_ref, per_token_timesteps=ts, return_dict=False)[0]
        x, state = ours.step(state, -jnp.asarray(_toy_velocity(np.asarray(x), i)), x, start + i,
                             per_token_timesteps=ts.numpy())  # fmt: skip
        assert x.dtype == jnp.float32 and x.shape == x0.shape
        np.testing.assert_array_equal(np.asarray(x), x_ref.numpy(), err_msg=f"step {i}")
    return x


@pytest.mark.parametrize("timestep_shape", ["per-token", "per-sample"])
def test_per_token_steps_match_diffusers(timestep_shape):
    # Distilled timesteps, packed (B, S, C) latents; some tokens are conditioning (mask 1 -> t = 0).
    ours, ref = pair(STATIC_CONFIG)
    ref.set_timesteps(timesteps=DISTILLED_TIMESTEPS)
    state = ours.set_timesteps(timesteps=DISTILLED_TIMESTEPS)
    rs = np.random.RandomState(3)
    B, S, C = 2, 40, 8
    mask = np.zeros((B, S), np.float32)
    mask[:, :10] = 1.0  # first latent frame: an image condition
    mask[1, 30:35] = 0.6  # partial strength
    x0 = rs.randn(B, S, C).astype(np.float32)
    _condition_loop(ours, ref, ref.timesteps, state, x0, mask, per_token_shape=None if timestep_shape == "per-token" else (B, 1))


def test_per_token_step_dtypes_match_diffusers():
    # bfloat16 model output: the per-token dt is a float32 array, so diffusers multiplies in float32
    # and keeps the float32 result (the plain step casts back to the model output's dtype).
    ours, ref = pair(STATIC_CONFIG)
    ref.set_timesteps(timesteps=DISTILLED_TIMESTEPS)
    state = ours.set_timesteps(timesteps=DISTILLED_TIMESTEPS)
    rs = np.random.RandomState(6)
    x = rs.randn(2, 12, 4).astype(np.float32)
    v = torch.from_numpy(rs.randn(2, 12, 4).astype(np.float32)).to(torch.bfloat16)
    ts = torch.full((2, 12), 987.0)
    want = ref.step(v, ref.timesteps[2], torch.from_numpy(x), per_token_timesteps=ts, return_dict=False)[0]
    assert want.dtype == torch.float32
    v_jax = jnp.asarray(v.float().numpy()).astype(jnp.bfloat16)
    got, _ = ours.step(state, v_jax, jnp.asarray(x), 2, per_token_timesteps=ts.numpy())
    assert got.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(got), want.numpy())
    plain, _ = ours.step(state, v_jax, jnp.asarray(x), 2)
    assert plain.dtype == jnp.bfloat16


def test_per_token_steps_with_denoise_strength_and_dynamic_shift_match_diffusers():
    # denoise_strength < 1: the pipeline slices sigmas/timesteps (get_timesteps) and starts mid-schedule;
    # the per-token lookup still runs over the scheduler's full sigmas. Dynamic shift + shift_terminal.
    ours, ref = pair(LTX_CONFIG)
    n, strength, mu = 50, 0.6, mu_for(6930)
    sig = np.linspace(1.0, 1 / n, n)
    ref.set_timesteps(sigmas=sig, mu=mu)
    state = ours.set_timesteps(sigmas=sig, mu=mu)
    num_steps = min(int(n * strength), n)  # pipeline_ltx_condition.get_timesteps
    start = max(n - num_steps, 0)
    # exercised: a timestep whose t / 1000 rounds above its sigma, so only diffusers' 1e-6 margin
    # keeps the per-token step from "stepping" to that same sigma
    up = np.nonzero(state.timesteps / np.float32(1000) > state.sigmas[:-1])[0]
    assert len(up) and up.min() >= start
    rs = np.random.RandomState(4)
    mask = (rs.rand(1, 64) < 0.2).astype(np.float32)
    x0 = rs.randn(1, 64, 4).astype(np.float32)
    _condition_loop(ours, ref, ref.timesteps[start:], state, x0, mask, start=start)


def test_step_check_can_fail():
    # A step to the wrong sigma (off by one index) and a 1-ulp change of dt are both visible.
    ours, ref = pair(LTX_CONFIG)
    mu = mu_for(1536)
    ref.set_timesteps(8, mu=mu)
    state = ours.set_timesteps(8, mu=mu)
    x = np.random.RandomState(5).randn(2, 50, 16).astype(np.float32)
    v = _toy_velocity(x, 0)
    want = ref.step(torch.from_numpy(v), ref.timesteps[2], torch.from_numpy(x), return_dict=False)[0].numpy()
    got, _ = ours.step(state, jnp.asarray(v), jnp.asarray(x), 2)
    np.testing.assert_array_equal(np.asarray(got), want)
    wrong, _ = ours.step(state, jnp.asarray(v), jnp.asarray(x), 3)
    assert np.max(np.abs(np.asarray(wrong) - want)) > 1e-3
    sig = state.sigmas.copy()
    sig[3] = np.nextafter(sig[3], np.float32(0))  # the next sigma moved by one float32 ulp
    off, _ = ours.step(dataclasses.replace(state, sigmas=sig), jnp.asarray(v), jnp.asarray(x), 2)
    assert not np.array_equal(np.asarray(off), want)


def test_step_compiles_once_per_shape():
    ours = scheduler_from_config(LTX_CONFIG)
    shape = (1, 7, 3)  # a shape no other test uses
    state = ours.set_timesteps(12, mu=1.2)
    x = jnp.zeros(shape, jnp.float32)
    before = flow_euler_module._euler_update._cache_size()
    before_pt = flow_euler_module._euler_update_per_token._cache_size()
    for i in range(12):
        x, state = ours.step(state, jnp.ones(shape, jnp.float32), x, i)
        x, state = ours.step(state, jnp.ones(shape, jnp.float32), x, i, per_token_timesteps=np.full((1, 7), 500.0))
    assert flow_euler_module._euler_update._cache_size() - before == 1
    assert flow_euler_module._euler_update_per_token._cache_size() - before_pt == 1


# --------------------------------------------------------------------------- config and errors


def test_scheduler_from_ltx_config(tmp_path):
    ours = scheduler_from_config(LTX_CONFIG)
    assert isinstance(ours, FlowMatchEulerScheduler)
    assert ours.config == {
        "num_train_timesteps": 1000, "flow_shift": 1.0, "use_dynamic_shifting": True, "base_shift": 0.95,
        "max_shift": 2.05, "base_image_seq_len": 1024, "max_image_seq_len": 4096, "shift_terminal": 0.1,
        "time_shift_type": "exponential", "stochastic_sampling": False,
    }  # fmt: skip
    assert ours.sigma_max == 1.0 and ours.sigma_min == float(np.float32(1) / np.float32(1000))  # unshifted ends
    # diffusers' own saved config (every current key, defaults filled in) loads without unknown-key warnings
    diffusers.FlowMatchEulerDiscreteScheduler.from_config(LTX_CONFIG).save_config(tmp_path)
    with open(tmp_path / "scheduler_config.json") as f:
        saved = json.load(f)
    assert {"time_shift_type", "stochastic_sampling", "shift_terminal"} <= set(saved)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = scheduler_from_config(saved)
    assert again.config == ours.config
    # missing keys take diffusers' defaults
    assert scheduler_from_config({"_class_name": "FlowMatchEulerDiscreteScheduler"}).config == {
        "num_train_timesteps": 1000, "flow_shift": 1.0, "use_dynamic_shifting": False, "base_shift": 0.5,
        "max_shift": 1.15, "base_image_seq_len": 256, "max_image_seq_len": 4096, "shift_terminal": None,
        "time_shift_type": "exponential", "stochastic_sampling": False,
    }  # fmt: skip
    assert scheduler_from_config({**LTX_CONFIG, "shift_terminal": 0}).shift_terminal is None  # 0 means off


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_inference_steps=8), "mu must be passed"),
        (dict(num_inference_steps=8, mu=float("nan")), "mu must be a finite"),
        (dict(sigmas=[1.0, 0.5], timesteps=[1000.0], mu=1.0), "same length"),
        (dict(num_inference_steps=3, sigmas=[1.0, 0.5], mu=1.0), "num_inference_steps=3"),
        (dict(num_inference_steps=3, timesteps=[1000.0, 500.0], mu=1.0), "num_inference_steps=3"),
        (dict(mu=1.0), "needs num_inference_steps, sigmas or timesteps"),
        (dict(sigmas=[], mu=1.0), "non-empty"),
        (dict(sigmas=[[1.0, 0.5]], mu=1.0), "1-D"),
        (dict(sigmas=[1.0, 1.5], mu=1.0), r"in \[0, 1\]"),
        (dict(sigmas=[1.0, float("nan")], mu=1.0), "finite"),
        (dict(timesteps=[1001.0, 500.0], mu=1.0), r"in \[0, 1000\]"),
        (dict(sigmas=["a"], mu=1.0), "sigmas"),
        (dict(num_inference_steps=0, mu=1.0), "num_inference_steps"),
        (dict(num_inference_steps=2.5, mu=1.0), "num_inference_steps"),
        (dict(num_inference_steps=1, mu=1.0), "shift_terminal"),  # last sigma 1: diffusers gives NaN
    ],
)
def test_set_timesteps_rejects_bad_input(kwargs, match):
    ours = scheduler_from_config(LTX_CONFIG)
    with pytest.raises(ValueError, match=match):
        ours.set_timesteps(**kwargs)


def test_linear_time_shift_needs_positive_mu():
    ours = scheduler_from_config({**LTX_CONFIG, "time_shift_type": "linear"})
    with pytest.raises(ValueError, match="mu must be > 0"):
        ours.set_timesteps(8, mu=0.0)
    assert ours.set_timesteps(8, mu=0.5).sigmas.shape == (9,)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(time_shift_type="cosine"), "time_shift_type"),
        (dict(shift_terminal=1.0), "shift_terminal"),
        (dict(shift_terminal=-0.1), "shift_terminal"),
        (dict(shift_terminal=True), "shift_terminal"),
        (dict(use_dynamic_shifting="yes"), "use_dynamic_shifting"),
        (dict(base_shift=float("inf")), "base_shift"),
        (dict(max_image_seq_len=None), "max_image_seq_len"),
        (dict(flow_shift=0.0), "flow_shift"),
    ],
)
def test_constructor_rejects_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FlowMatchEulerScheduler(**kwargs)


def test_per_token_step_rejects_bad_shapes():
    ours = scheduler_from_config(STATIC_CONFIG)
    state = ours.set_timesteps(timesteps=DISTILLED_TIMESTEPS)
    x = jnp.zeros((2, 10, 4), jnp.float32)
    for bad in (np.zeros((2, 9)), np.zeros((3, 10)), np.zeros((2, 10, 4)), np.zeros((2,)), np.zeros((2, 10), bool)):
        with pytest.raises(ValueError, match="per_token_timesteps"):
            ours.step(state, x, x, 0, per_token_timesteps=bad)
    with pytest.raises(ValueError, match="step_index"):
        ours.step(state, x, x, 8, per_token_timesteps=np.zeros((2, 10)))
