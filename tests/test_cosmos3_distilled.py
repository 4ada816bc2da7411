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
        noise = self.noises[self.calls]
        assert int(np.prod(shape)) == noise.size  # (the modular loop steps latents.unsqueeze(0))
        out = torch.from_numpy(noise).reshape(tuple(shape)).to(dtype=dtype or torch.float32)
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


# -- the pipeline against Cosmos3DistilledModularPipeline -------------------------------------------------------------

PROMPT = "a red panda climbs a bamboo tree in the snow"
TOL = 2.0 / 255.0


@pytest.fixture(scope="module")
def distilled(tmp_path_factory):
    """A tiny distilled folder written by vidax's torch-free demo writer (``modular_model_index.json`` as
    ``ModularPipeline.save_pretrained`` writes it, no ``model_index.json``, the released Qwen3-VL chat template in the
    tokenizer); diffusers' ``ModularPipeline.from_pretrained`` builds the distilled blocks from it and loads the same
    components."""
    import json

    from _cosmos3_reference import QWEN3_VL_CHAT_TEMPLATE
    from diffusers.modular_pipelines import ModularPipeline

    from vidax.models.cosmos3.demo import write_demo_checkpoint
    from vidax.models.cosmos3.pipeline import Cosmos3Pipeline

    folder = write_demo_checkpoint(tmp_path_factory.mktemp("c3dist") / "dist", seed=1, distilled=True)
    cfg_path = folder / "text_tokenizer" / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = QWEN3_VL_CHAT_TEMPLATE
    cfg_path.write_text(json.dumps(cfg))
    ref = ModularPipeline.from_pretrained(str(folder))
    ref.load_components(dtype=torch.float32)
    ours = Cosmos3Pipeline.from_pretrained(folder, dtype="float32", progress=False, compile_cache=False)
    return folder, ref, ours


def _reference(ref, latents, noises, monkeypatch, **kw):
    fixed = FixedNoise(noises)
    monkeypatch.setattr(fm, "randn_tensor", fixed)
    with torch.no_grad():
        state = ref(prompt=PROMPT, latents=torch.from_numpy(latents), output_type="np", **kw)
    assert fixed.calls == len(noises)
    return np.asarray(state.get("videos"), np.float32), state.get("latents").numpy()


def test_distilled_folder_is_read_as_diffusers_reads_it(distilled):
    from diffusers.modular_pipelines.cosmos.modular_blocks_cosmos3_distilled import Cosmos3DistilledBlocks

    folder, ref, ours = distilled
    assert isinstance(ref.blocks, Cosmos3DistilledBlocks) and not (folder / "model_index.json").exists()
    assert ours.ckpt.is_distilled and ours.ckpt.distilled_sigmas == tuple(ref.config.distilled_sigmas)
    assert ours.scheduler.stochastic_sampling is ref.scheduler.config.stochastic_sampling is True


def test_distilled_text_to_video_matches_diffusers(distilled, monkeypatch):
    """Explicit latents and the reference's per-step noises (its ``randn_tensor`` replaced by fixed draws, handed to
    vidax as ``step_noises``): the fixed 4-step schedule, one prompt row, the stochastic step. (Odd latent sizes go
    through the same packing as the base pipeline, tested there; measured here too: 5x48x32, frames 1.4e-6.)"""
    _, ref, ours = distilled
    num_frames, height, width = 9, 32, 48
    shape = ours.latent_shape(height, width, num_frames)
    latents = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    noises = [np.random.default_rng(100 + i).standard_normal(shape).astype(np.float32) for i in range(4)]
    kw = dict(num_frames=num_frames, height=height, width=width, fps=24.0)
    expected, ref_latents = _reference(ref, latents, noises, monkeypatch, **kw)
    out = ours(PROMPT, latents=latents, step_noises=noises, output_type="float", progress=False, **kw)
    assert out.frames.shape == (1, *expected.shape)
    err = np.abs(out.frames[0] - expected).max()
    assert err <= TOL, err  # measured 1.4e-6 to 1.6e-6
    rel = np.linalg.norm(out.latents - ref_latents) / np.linalg.norm(ref_latents)
    assert rel < 1e-5, rel  # measured 3e-7
    assert out.metrics["num_inference_steps"] == 4 and len(out.metrics["prompt_tokens"]) == 1


def test_distilled_image_to_video_matches_diffusers(distilled, monkeypatch):
    """The conditioning latent frame is put back after every (re-noising) step, as the reference re-anchors it. The
    image has the video's size: vidax's first-frame resize (torch's antialiased bilinear restated in numpy) differs
    from the reference's by one level on rounding ties (0.3 % of the pixels of a 40x56 image; measured: the
    conditioning latent 7e-4 relative, the frames 3.3e-3, inside 2/255), which the re-anchoring would carry into every
    step; at the video's size both resizes are the identity, so this compares the sampler alone."""
    from PIL import Image

    _, ref, ours = distilled
    rng = np.random.default_rng(11)
    num_frames, height, width = 9, 32, 48
    image = Image.fromarray((rng.random((height, width, 3)) * 255).astype(np.uint8))
    shape = ours.latent_shape(height, width, num_frames)
    latents = rng.standard_normal(shape).astype(np.float32)
    noises = [rng.standard_normal(shape).astype(np.float32) for _ in range(4)]
    expected, ref_latents = _reference(ref, latents, noises, monkeypatch, image=image, num_frames=num_frames,
                                       height=height, width=width)
    out = ours(PROMPT, image=image, latents=latents, step_noises=noises, num_frames=num_frames, height=height,
               width=width, output_type="float", progress=False)
    err = np.abs(out.frames[0] - expected).max()
    assert err <= TOL, err
    rel = np.linalg.norm(out.latents - ref_latents) / np.linalg.norm(ref_latents)
    assert rel < 1e-5, rel  # measured: frames 2.5e-6, latents 2.9e-7
    z0 = np.asarray(ours.encode_condition(__import__("vidax.models.cosmos3.conditioning", fromlist=["x"])
                                          .conditioning_pixels(image, height, width)))
    np.testing.assert_array_equal(out.latents[:, :, :1], z0)


def test_distilled_seeded_run_and_refusals(distilled):
    """Without explicit noise vidax draws its own (seeded: the same seed, the same video); a step count other than
    the schedule's, guidance other than 1 and a negative prompt are refused as the reference refuses them."""
    _, ref, ours = distilled
    kw = dict(num_frames=5, height=32, width=32, progress=False, seed=4)
    a, b = ours(PROMPT, **kw), ours(PROMPT, **kw)
    np.testing.assert_array_equal(a.latents, b.latents)
    assert not np.array_equal(a.latents, ours(PROMPT, **{**kw, "seed": 5}).latents)
    for bad, message in [(dict(num_inference_steps=5), "num_inference_steps must be 4 or left unset"),
                         (dict(guidance_scale=6.0), "guidance_scale must be 1 or left unset"),
                         (dict(negative_prompt="blurry"), "no negative prompt"),
                         (dict(step_noises=[np.zeros((1, 48, 2, 2, 2), np.float32)] * 3), "must be 4 arrays")]:
        with pytest.raises(ValueError, match=message):
            ours(PROMPT, **{**kw, **bad})
    for bad, message in [(dict(num_inference_steps=5), "num_inference_steps` must be 4"),
                         (dict(guidance_scale=6.0), "guidance_scale` must be 1.0")]:
        with pytest.raises(ValueError, match=message):
            ref(prompt=PROMPT, num_frames=5, height=32, width=32, output_type="np", output="videos", **bad)


@pytest.mark.parametrize("flags, message", [
    (["--steps", "5"], "num_inference_steps must be 4 or left unset"),
    (["--guidance-scale", "6"], "guidance_scale must be 1 or left unset"),
    (["--negative-prompt", "blurry"], "no negative prompt"),
], ids=["steps-5", "guidance-6", "negative-prompt"])
def test_distilled_refusals_are_one_error_line_before_loading(distilled, tmp_path, capsys, monkeypatch, flags,
                                                              message):
    import re

    from vidax.cli import main
    from vidax.models.cosmos3.pipeline import Cosmos3Pipeline

    def refuse(*a, **k):
        raise AssertionError("the backbone was loaded before the checks")

    monkeypatch.setattr(Cosmos3Pipeline, "from_pretrained", classmethod(refuse))
    folder = distilled[0]
    out = tmp_path / "x.mp4"
    args = ["generate", "--checkpoint", str(folder), "--prompt", "a", "--height", "32", "--width", "32",
            "--num-frames", "5", "--out", str(out)]
    assert main(args + flags) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vidax: error: ") and re.search(message, lines[0]), lines
    assert not out.exists()


def test_distilled_demo_inspect_and_convert(tmp_path, capsys):
    """The demo through the registry (a folder with only modular_model_index.json: the family claims it), its
    report, and the converted folder generating the same latents (the schedule kept in vidax_index.json)."""
    import json

    from vidax.cli import main
    from vidax.models.cosmos3.pipeline import Cosmos3Pipeline

    assert main(["demo", "cosmos3-distilled/t2v", "--checkpoint-dir", str(tmp_path / "c"), "--out-dir",
                 str(tmp_path / "o"), "--quiet"]) == 0
    metrics = json.loads((tmp_path / "o" / "cosmos3-distilled-t2v.json").read_text())
    assert metrics["num_inference_steps"] == 4 and metrics["prompt_tokens"] and len(metrics["prompt_tokens"]) == 1
    folder = tmp_path / "c" / "cosmos3-distilled-demo"
    assert main(["inspect", str(folder)]) == 0
    report = capsys.readouterr().out
    assert "distilled: 4 fixed steps" in report and "stochastic flow Euler on the distilled sigmas 1, 0.75, 0.5, 0.25" \
        in report
    converted = tmp_path / "conv"
    assert main(["convert", str(folder), str(converted), "--dtype", "float32"]) == 0
    assert json.loads((converted / "vidax_index.json").read_text())["distilled_sigmas"] == [1.0, 0.75, 0.5, 0.25]
    kw = dict(height=32, width=32, num_frames=5, seed=3, progress=False)
    a = Cosmos3Pipeline.from_pretrained(folder, dtype="float32", progress=False, compile_cache=False)("a cat", **kw)
    b = Cosmos3Pipeline.from_pretrained(converted, dtype="float32", progress=False, compile_cache=False)("a cat", **kw)
    np.testing.assert_array_equal(a.latents, b.latents)


def test_distilled_on_a_mesh_matches_one_device(distilled):
    """tp 2 x sp 2 on simulated devices: vidax's seeded step noise is drawn the same whatever the placement, so the
    mesh run gives the single device's video (one prompt row: no data split)."""
    import jax

    from vidax.models.cosmos3.pipeline import Cosmos3Pipeline

    if len(jax.devices()) < 4:
        pytest.skip("needs 4 devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)")
    folder, _, ours = distilled
    kw = dict(height=32, width=48, num_frames=9, seed=3, progress=False, output_type="float")
    one = ours("a cat", **kw)
    mesh = Cosmos3Pipeline.from_pretrained(folder, dtype="float32", progress=False, compile_cache=False, tp=2, sp=2,
                                           devices=jax.devices()[:4])
    out = mesh("a cat", **kw)
    assert np.abs(out.latents - one.latents).max() < 1e-4
    assert np.abs(out.frames - one.frames).max() < 1e-5
