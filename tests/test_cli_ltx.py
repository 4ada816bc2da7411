"""`vidax generate`, `inspect` and `convert` on LTX-Video folders."""

import json

import numpy as np
import pytest

from vidax.cli import main
from vidax.models.ltx.config import LTX_NEGATIVE_PROMPT
from vidax.models.ltx.demo import write_demo_checkpoint
from vidax.models.ltx.pipeline import LTXPipeline
from vidax.video import read_video

SIZE = ["--height", "64", "--width", "96", "--num-frames", "17", "--dtype", "float32", "--no-progress"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_demo_checkpoint(tmp_path_factory.mktemp("ltx") / "demo", variant="0.9.8")


def test_generate_with_a_distilled_preset_writes_mp4_and_metrics(ckpt, tmp_path):
    out, metrics = tmp_path / "ltx.mp4", tmp_path / "ltx.json"
    assert main(["generate", "--checkpoint", str(ckpt), "--preset", "ltx-video-0.9.8-2b-distilled", "--prompt", "a fox",
                 *SIZE, "--out", str(out), "--metrics-json", str(metrics)]) == 0
    frames, fps = read_video(out)
    assert frames.shape == (17, 64, 96, 3) and fps == 25
    m = json.loads(metrics.read_text())
    assert m["steps"] == 8 and m["num_frames"] == 17  # the preset's eight distilled timesteps


def test_generate_passes_the_preset_settings_and_flags(ckpt, tmp_path, monkeypatch):
    """The dev preset's settings reach the pipeline (guidance 5.0, rescale 0.7, decode 0.05 / 0.025, its negative
    prompt); explicit flags override them."""
    seen = {}
    call = LTXPipeline.__call__

    def record(self, prompt, negative_prompt=None, **kw):
        seen.update(kw, prompt=prompt, negative_prompt=negative_prompt)
        return call(self, prompt, negative_prompt, **kw)

    monkeypatch.setattr(LTXPipeline, "__call__", record)
    assert main(["generate", "--checkpoint", str(ckpt), "--preset", "ltx-video-0.9.8-13b-dev", "--prompt", "a fox",
                 "--steps", "2", "--seed", "7", "--decode-noise-scale", "0.1", *SIZE, "--out", str(tmp_path / "a.mp4")]) == 0
    assert seen["negative_prompt"] == LTX_NEGATIVE_PROMPT and seen["seed"] == 7
    assert {k: seen[k] for k in ("guidance_scale", "guidance_rescale", "decode_timestep", "decode_noise_scale",
                                 "num_inference_steps", "timesteps", "frame_rate")} == dict(
        guidance_scale=5.0, guidance_rescale=0.7, decode_timestep=0.05, decode_noise_scale=0.1, num_inference_steps=2,
        timesteps=None, frame_rate=25)
    assert main(["generate", "--checkpoint", str(ckpt), "--prompt", "a fox", "--timesteps", "1000,500,20",
                 "--guidance-scale", "1", "--fps", "24", *SIZE, "--out", str(tmp_path / "b.mp4")]) == 0
    assert seen["timesteps"] == (1000.0, 500.0, 20.0) and seen["num_inference_steps"] == 3 and seen["frame_rate"] == 24
    assert read_video(tmp_path / "b.mp4")[1] == 24


def test_convert_inspect_and_generate_from_the_converted_folder(ckpt, tmp_path, capsys):
    dst = tmp_path / "converted"
    assert main(["convert", str(ckpt), str(dst), "--dtype", "float32"]) == 0
    index = json.loads((dst / "vidax_index.json").read_text())
    assert index["family"] == "ltx" and index["pipeline_class"] == "LTXConditionPipeline"
    capsys.readouterr()
    for folder, layout in ((ckpt, "diffusers"), (dst, "vidax")):
        assert main(["inspect", str(folder)]) == 0
        text = capsys.readouterr().out
        assert f"LTX-Video LTXConditionPipeline, {layout} layout" in text
        assert text.count("every parameter filled exactly once") == 3
    a, b = LTXPipeline.from_pretrained(ckpt, dtype="float32"), LTXPipeline.from_pretrained(dst, dtype="float32")
    kw = dict(height=64, width=96, num_frames=17, num_inference_steps=2, output_type="float", progress=False)
    np.testing.assert_array_equal(a("a fox", **kw).frames, b("a fox", **kw).frames)


@pytest.mark.parametrize("flags, message", [
    (["--image", "missing.png"], "--image missing.png: file not found"),
    (["--last-image", "x.png"], "--last-image needs --image"),
    (["--sampler", "unipc"], "not an LTX-Video sampler"),
    (["--num-frames", "20"], "num_frames=20 must be of the form 8k+1"),
    (["--height", "70"], "height=70 must be a positive multiple of 32"),
    (["--preset", "ltx-video-0.9.8-2b-distilled", "--steps", "3"], "--steps 3 and 8 timesteps disagree"),
])
def test_bad_arguments_fail_before_loading(ckpt, tmp_path, capsys, flags, message):
    assert main(["generate", "--checkpoint", str(ckpt), "--prompt", "a", "--out", str(tmp_path / "x.mp4"), *flags]) == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.glob("*.mp4"))


def test_timesteps_flag_is_checked_by_argparse(ckpt, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["generate", "--checkpoint", str(ckpt), "--prompt", "a", "--timesteps", "1000,nan", "--out",
              str(tmp_path / "x.mp4")])
    assert e.value.code == 2 and "comma-separated numbers in [0, 1000]" in capsys.readouterr().err


def test_first_and_last_frame(ckpt, tmp_path, monkeypatch):
    """--image and --last-image become conditions at frames 0 and num_frames - 1 (LTXConditionPipeline folders)."""
    from PIL import Image

    seen = {}
    call = LTXPipeline.__call__

    def record(self, prompt, negative_prompt=None, **kw):
        seen.update(kw)
        return call(self, prompt, negative_prompt, **kw)

    monkeypatch.setattr(LTXPipeline, "__call__", record)
    for name, value in (("first.png", 40), ("last.png", 200)):
        Image.fromarray(np.full((50, 70, 3), value, np.uint8)).save(tmp_path / name)
    assert main(["generate", "--checkpoint", str(ckpt), "--prompt", "a fox", "--steps", "2", *SIZE, "--image",
                 str(tmp_path / "first.png"), "--last-image", str(tmp_path / "last.png"), "--out",
                 str(tmp_path / "flf.mp4")]) == 0
    first, last = seen["conditions"]
    assert (first.frame_index, last.frame_index) == (0, 16) and first.strength == last.strength == 1.0
    assert read_video(tmp_path / "flf.mp4")[0].shape == (17, 64, 96, 3)
