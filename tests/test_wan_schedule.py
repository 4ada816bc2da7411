"""The Wan repository's UniPC sigma grid (``sigma_grid="wan"``) and the Wan pipelines' ``schedule=``.

References:
  * the Wan repository (Wan-Video/Wan2.1 and Wan2.2, identical file) ``wan/utils/fm_solvers_unipc.py``,
    ``FlowUniPCMultistepScheduler.__init__`` / ``set_timesteps``, as ``wan/text2video.py`` and
    ``wan/image2video.py`` construct it (``shift=1`` at construction, the sampling shift passed to
    ``set_timesteps``): restated below in :func:`wan_reference_grid` (NumPy + torch, as the original);
  * diffusers 0.42.1 ``UniPCMultistepScheduler`` (``use_flow_sigmas=True``): the other grid, and the step.
    The Wan class's step (``convert_model_output``, ``multistep_uni_p_bh_update``,
    ``multistep_uni_c_bh_update``, ``step``) is diffusers' own code for this configuration (solver_order 2,
    bh2, predict_x0, lower_order_final, final sigma 0), so diffusers' step on the Wan grid is the Wan
    repository's sampler.
"""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from vidax.models.wan.convert import convert_checkpoint  # noqa: E402
from vidax.models.wan.layout import ORIGINAL_T2V_FLOW_SHIFT, resolve_checkpoint  # noqa: E402
from vidax.models.wan.original_fixture import (  # noqa: E402
    tiny_wan_weights,
    write_diffusers_twin,
    write_original_checkpoint,
)
from vidax.models.wan.pipeline import WAN_UNIPC, WanPipeline  # noqa: E402
from vidax.models.wan.pipeline_i2v import WanImageToVideoPipeline  # noqa: E402
from vidax.schedulers import FlowUniPCMultistepScheduler, scheduler_from_config  # noqa: E402

STEPS = (1, 2, 10, 40, 50)
SHIFTS = (1.0, 3.0, 5.0, 12.0)


def wan_reference_grid(steps: int, shift: float, num_train_timesteps: int = 1000):
    """The Wan repository's sigmas (torch float32, ``steps + 1``) and timesteps (torch int64, ``steps``).

    Restates ``FlowUniPCMultistepScheduler(num_train_timesteps=N, shift=1, use_dynamic_shifting=False)``
    followed by ``set_timesteps(steps, shift=shift)`` (``final_sigmas_type="zero"``), step by step.
    """
    # __init__: the training schedule, stored in float32, shifted by the constructor's shift=1.
    alphas = np.linspace(1, 1 / num_train_timesteps, num_train_timesteps)[::-1].copy()
    sigmas = 1.0 - alphas
    sigmas = torch.from_numpy(sigmas).to(dtype=torch.float32)
    init_shift = 1
    sigmas = init_shift * sigmas / (1 + (init_shift - 1) * sigmas)
    sigma_min = sigmas[-1].item()
    sigma_max = sigmas[0].item()
    # set_timesteps
    sigmas = np.linspace(sigma_max, sigma_min, steps + 1).copy()[:-1]
    sigmas = shift * sigmas / (1 + (shift - 1) * sigmas)
    sigma_last = 0
    timesteps = sigmas * num_train_timesteps
    sigmas = np.concatenate([sigmas, [sigma_last]]).astype(np.float32)
    return torch.from_numpy(sigmas), torch.from_numpy(timesteps).to(dtype=torch.int64)


def diffusers_grid(steps: int, shift: float):
    ref = diffusers.UniPCMultistepScheduler(**{**WAN_UNIPC, "flow_shift": shift})
    ref.set_timesteps(steps)
    return ref.sigmas, ref.timesteps


# --------------------------------------------------------------------------- the grid


@pytest.mark.parametrize("shift", SHIFTS)
@pytest.mark.parametrize("steps", STEPS)
def test_wan_grid_equals_wan_repository(steps, shift):
    ref_sigmas, ref_ts = wan_reference_grid(steps, shift)
    for sched in (FlowUniPCMultistepScheduler(flow_shift=shift, sigma_grid="wan"),
                  scheduler_from_config({"_class_name": "UniPCMultistepScheduler", **WAN_UNIPC, "flow_shift": shift,
                                         "sigma_grid": "wan"})):
        state = sched.set_timesteps(steps)
        assert state.sigmas.dtype == np.float32 and state.timesteps.dtype == np.int64
        np.testing.assert_array_equal(state.sigmas, ref_sigmas.numpy())  # bit for bit
        np.testing.assert_array_equal(state.timesteps, ref_ts.numpy())


def test_wan_grid_with_other_training_length():
    ref_sigmas, ref_ts = wan_reference_grid(20, 3.0, num_train_timesteps=500)
    state = FlowUniPCMultistepScheduler(num_train_timesteps=500, flow_shift=3.0, sigma_grid="wan").set_timesteps(20)
    np.testing.assert_array_equal(state.sigmas, ref_sigmas.numpy())
    np.testing.assert_array_equal(state.timesteps, ref_ts.numpy())


@pytest.mark.parametrize("shift", SHIFTS)
def test_default_grid_is_still_diffusers(shift):
    for sched in (FlowUniPCMultistepScheduler(flow_shift=shift),
                  scheduler_from_config({"_class_name": "UniPCMultistepScheduler", **WAN_UNIPC, "flow_shift": shift}),
                  FlowUniPCMultistepScheduler(flow_shift=shift, sigma_grid="diffusers")):
        state = sched.set_timesteps(50)
        ref_sigmas, ref_ts = diffusers_grid(50, shift)
        np.testing.assert_array_equal(state.sigmas, ref_sigmas.numpy())
        np.testing.assert_array_equal(state.timesteps, ref_ts.numpy())


def test_the_two_grids_differ_at_shift_5_50_steps():
    wan_sigmas, wan_ts = wan_reference_grid(50, 5.0)
    diff_sigmas, diff_ts = diffusers_grid(50, 5.0)
    # Measured from the two references: 27 of the 50 timesteps differ (by up to 4), every sigma but the final 0.
    differs = wan_ts.numpy() != diff_ts.numpy()
    assert int(differs.sum()) == 27
    assert int(np.abs(wan_ts.numpy() - diff_ts.numpy()).max()) == 4
    assert int((wan_sigmas.numpy() != diff_sigmas.numpy()).sum()) == 50
    # Ours differ in exactly the same places.
    ours_wan = FlowUniPCMultistepScheduler(flow_shift=5.0, sigma_grid="wan").set_timesteps(50)
    ours_diff = FlowUniPCMultistepScheduler(flow_shift=5.0).set_timesteps(50)
    np.testing.assert_array_equal(ours_wan.timesteps != ours_diff.timesteps, differs)
    # Before the shift the Wan grid is diffusers' lowered by 1/N (0.999 rounded to float32 at the top).
    top = float(np.float32(0.999))
    np.testing.assert_allclose(np.linspace(top, 0.0, 51)[:-1], np.linspace(1.0, 1e-3, 51)[:-1] - 1e-3, atol=2e-9)


def test_wan_grid_options_checked():
    with pytest.raises(ValueError, match="sigma_grid"):
        FlowUniPCMultistepScheduler(sigma_grid="original")
    with pytest.raises(ValueError, match="final_sigmas_type"):
        FlowUniPCMultistepScheduler(sigma_grid="wan", final_sigmas_type="sigma_min")
    with pytest.raises(ValueError, match="sigma_grid"):
        scheduler_from_config({"_class_name": "UniPCMultistepScheduler", **WAN_UNIPC, "sigma_grid": "karras"})
    assert FlowUniPCMultistepScheduler(sigma_grid="wan").config["sigma_grid"] == "wan"


# --------------------------------------------------------------------------- the step on the Wan grid

SHAPE = (1, 4, 3, 4, 6)
_rs = np.random.RandomState(0)
NOISE = _rs.randn(*SHAPE).astype(np.float32)
X0 = (0.5 * _rs.randn(*SHAPE)).astype(np.float32)


def toy_model(sample: np.ndarray, i: int) -> np.ndarray:
    """A flow prediction that depends on the current sample, so step errors propagate."""
    jitter = np.random.RandomState(1000 + i).randn(*SHAPE)
    return (NOISE - X0 + 0.2 * np.tanh(sample) + 0.1 * jitter).astype(np.float32)


@pytest.mark.parametrize("steps,shift", [(10, 5.0), (30, 12.0), (3, 1.0)])
def test_sampling_on_wan_grid_matches_reference(steps, shift):
    # The reference sampler: diffusers' step (the Wan class's step, see the module docstring) on the Wan
    # grid, given as the unshifted sigmas the Wan class starts from.
    ref = diffusers.UniPCMultistepScheduler(**{**WAN_UNIPC, "flow_shift": shift})
    top = torch.tensor(1 - 1 / 1000, dtype=torch.float32).item()
    ref.set_timesteps(sigmas=np.linspace(top, 0.0, steps + 1)[:-1])  # an array: diffusers shifts it with numpy
    wan_sigmas, wan_ts = wan_reference_grid(steps, shift)
    assert torch.equal(ref.sigmas, wan_sigmas) and torch.equal(ref.timesteps, wan_ts)  # it is the Wan schedule

    ours = FlowUniPCMultistepScheduler(flow_shift=shift, sigma_grid="wan")
    state = ours.set_timesteps(steps)
    x_ref, x = torch.from_numpy(NOISE.copy()), jnp.asarray(NOISE)
    for i in range(steps):
        x_ref = ref.step(torch.from_numpy(toy_model(x_ref.numpy(), i)), ref.timesteps[i], x_ref,
                         return_dict=False)[0]
        x, state = ours.step(state, jnp.asarray(toy_model(np.asarray(x), i)), x, i)
        # float32 arithmetic rounded op by op as torch does (tests/test_schedulers.py); 1e-6 as there.
        err = float(np.max(np.abs(np.asarray(x, np.float64) - x_ref.numpy().astype(np.float64))))
        assert err <= 1e-6, f"step {i}: {err}"
    # The same run on diffusers' grid ends elsewhere: the grid matters to the result.
    other = FlowUniPCMultistepScheduler(flow_shift=shift)
    st, y = other.set_timesteps(steps), jnp.asarray(NOISE)
    for i in range(steps):
        y, st = other.step(st, jnp.asarray(toy_model(np.asarray(y), i)), y, i)
    assert float(np.max(np.abs(np.asarray(y) - np.asarray(x)))) > 1e-4


# --------------------------------------------------------------------------- pipelines


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("wan-schedule")
    w = tiny_wan_weights()
    orig = write_original_checkpoint(root / "Wan2.1-T2V-tiny", weights=w)
    diff = write_diffusers_twin(root / "diffusers", w)
    convert_checkpoint(orig, root / "converted-original", dtype="float32")
    convert_checkpoint(diff, root / "converted-diffusers", dtype="float32")
    return {"original": orig, "diffusers": diff, "converted-original": root / "converted-original",
            "converted-diffusers": root / "converted-diffusers"}


@pytest.fixture(scope="module")
def pipes(folders):
    return {k: WanPipeline.from_pretrained(v, dtype="float32") for k, v in folders.items()}


def _grid(pipe, steps=50, **kw):
    state = pipe.make_scheduler(**kw).set_timesteps(steps)
    return state.sigmas, state.timesteps


def _assert_grid(got, ref):
    np.testing.assert_array_equal(got[0], ref[0].numpy())
    np.testing.assert_array_equal(got[1], ref[1].numpy())


def test_checkpoints_name_their_reference_schedule(folders):
    expected = {"original": "original", "diffusers": "diffusers", "converted-original": "original",
                "converted-diffusers": "diffusers"}
    for name, folder in folders.items():
        ckpt = resolve_checkpoint(folder)
        assert ckpt.schedule_default == expected[name], name
    assert resolve_checkpoint(folders["converted-original"]).source_layout == "original"
    assert json.loads((folders["converted-original"] / "vidax_index.json").read_text())["source_layout"] == "original"


def test_original_layout_defaults_to_wan_grid(pipes):
    pipe = pipes["original"]
    assert pipe.schedule_default == "original"
    for steps in (10, 50):
        _assert_grid(_grid(pipe, steps), wan_reference_grid(steps, ORIGINAL_T2V_FLOW_SHIFT))
    _assert_grid(_grid(pipe, flow_shift=3.0), wan_reference_grid(50, 3.0))
    _assert_grid(_grid(pipe, sampler="unipc"), wan_reference_grid(50, ORIGINAL_T2V_FLOW_SHIFT))


def test_converted_from_original_defaults_to_wan_grid(pipes):
    pipe = pipes["converted-original"]
    assert pipe.layout == "vidax" and pipe.schedule_default == "original"
    _assert_grid(_grid(pipe), wan_reference_grid(50, ORIGINAL_T2V_FLOW_SHIFT))


@pytest.mark.parametrize("name", ["diffusers", "converted-diffusers"])
def test_diffusers_folders_default_to_diffusers_grid(pipes, folders, name):
    pipe = pipes[name]
    assert pipe.schedule_default == "diffusers"
    config = json.loads((folders[name] / "scheduler" / "scheduler_config.json").read_text())
    ref = diffusers.UniPCMultistepScheduler.from_config(config)
    ref.set_timesteps(50)
    _assert_grid(_grid(pipe), (ref.sigmas, ref.timesteps))


def test_explicit_schedule_overrides(pipes):
    shift = ORIGINAL_T2V_FLOW_SHIFT
    _assert_grid(_grid(pipes["original"], schedule="diffusers"), diffusers_grid(50, shift))
    _assert_grid(_grid(pipes["converted-original"], schedule="diffusers"), diffusers_grid(50, shift))
    _assert_grid(_grid(pipes["diffusers"], schedule="original"), wan_reference_grid(50, 3.0))  # the folder's 3.0
    _assert_grid(_grid(pipes["original"], schedule="original"), wan_reference_grid(50, shift))


def test_euler_keeps_diffusers_grid(pipes):
    ref = diffusers.FlowMatchEulerDiscreteScheduler(shift=ORIGINAL_T2V_FLOW_SHIFT)
    ref.set_timesteps(20)
    for schedule in (None, "original", "diffusers"):
        got = _grid(pipes["original"], 20, sampler="euler", schedule=schedule)
        np.testing.assert_array_equal(got[0], ref.sigmas.numpy())
        np.testing.assert_array_equal(got[1], ref.timesteps.numpy())


@pytest.mark.parametrize("bad", ["wan", "Original", ""])
def test_bad_schedule_names_the_valid_values(pipes, bad):
    with pytest.raises(ValueError, match="'diffusers', 'original'"):
        pipes["original"].make_scheduler(schedule=bad)


class _Stop(Exception):
    pass


def _spy(pipe, monkeypatch) -> list:
    calls = []
    real = pipe.make_scheduler

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        real(*args, **kwargs)  # validates as the real call does
        raise _Stop

    monkeypatch.setattr(pipe, "make_scheduler", spy)
    return calls


CALL = dict(height=16, width=16, num_frames=1, num_inference_steps=2, progress=False)


@pytest.mark.parametrize("schedule", [None, "diffusers", "original"])
def test_call_passes_schedule(pipes, monkeypatch, schedule):
    pipe = pipes["original"]
    calls = _spy(pipe, monkeypatch)
    with pytest.raises(_Stop):
        pipe("a cat", schedule=schedule, flow_shift=3.0, **CALL)
    assert calls == [((None, 3.0, schedule), {})]
    monkeypatch.undo()
    with pytest.raises(ValueError, match="'diffusers', 'original'"):
        pipe("a cat", schedule="wan", **CALL)


def test_i2v_call_passes_schedule(folders, monkeypatch):
    pipe = WanImageToVideoPipeline.from_pretrained(folders["original"], dtype="float32")
    assert pipe.schedule_default == "original"
    _assert_grid(_grid(pipe), wan_reference_grid(50, ORIGINAL_T2V_FLOW_SHIFT))
    calls = _spy(pipe, monkeypatch)
    with pytest.raises(_Stop):
        pipe("a cat", schedule="diffusers", **CALL)
    assert calls == [((None, None, "diffusers"), {})]
    monkeypatch.undo()
    with pytest.raises(ValueError, match="'diffusers', 'original'"):
        pipe("a cat", schedule="bogus", **CALL)
