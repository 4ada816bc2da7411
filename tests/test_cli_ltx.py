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
    (["--timesteps", "1000,500,20", "--steps", "4"], "--steps 4 and 3 timesteps disagree"),
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
    conditions = LTXPipeline._conditions

    def record(self, image, conds):
        seen["conditions"] = conds
        return conditions(self, image, conds)

    monkeypatch.setattr(LTXPipeline, "_conditions", record)
    for name, value in (("first.png", 40), ("last.png", 200)):
        Image.fromarray(np.full((50, 70, 3), value, np.uint8)).save(tmp_path / name)
    assert main(["generate", "--checkpoint", str(ckpt), "--prompt", "a fox", "--steps", "2", *SIZE, "--image",
                 str(tmp_path / "first.png"), "--last-image", str(tmp_path / "last.png"), "--out",
                 str(tmp_path / "flf.mp4")]) == 0
    first, last = seen["conditions"]
    assert (first.frame_index, last.frame_index) == (0, 16) and first.strength == last.strength == 1.0
    assert read_video(tmp_path / "flf.mp4")[0].shape == (17, 64, 96, 3)


@pytest.mark.parametrize("flags, message", [
    (["--preset", "wan2.1-t2v-1.3b-480p"], "is not an LTX-Video preset"),
    (["--flow-shift", "3"], "--flow-shift: not used by LTX-Video"),
    (["--auto-split", "--memory-gb", "4"], "--auto-split --memory-gb: not used by LTX-Video"),
    (["--image", "IMG", "--last-image", "IMG", "--num-frames", "1"], "--last-image needs a video of more than one frame"),
    (["--preset", "ltx-video-0.9.8-2b-distilled", "--steps", "4"], "pass them with --timesteps"),
])
def test_flags_that_would_be_ignored_or_conflict_are_refused(ckpt, tmp_path, capsys, flags, message):
    from PIL import Image

    Image.fromarray(np.zeros((40, 40, 3), np.uint8)).save(tmp_path / "i.png")
    flags = [str(tmp_path / "i.png") if f == "IMG" else f for f in flags]
    assert main(["generate", "--checkpoint", str(ckpt), "--prompt", "a", "--out", str(tmp_path / "x.mp4"), *flags]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("flags", [["--steps", "0"], ["--tp", "0"], ["--sp", "-1"], ["--fps", "5000"]])
def test_argparse_refuses_non_positive_sizes(ckpt, tmp_path, flags):
    with pytest.raises(SystemExit) as e:
        main(["generate", "--checkpoint", str(ckpt), "--prompt", "a", "--out", str(tmp_path / "x.mp4"), *flags])
    assert e.value.code == 2


def test_last_image_on_an_ltx_pipeline_folder_is_refused_before_loading(tmp_path, capsys, monkeypatch):
    from PIL import Image

    folder = write_demo_checkpoint(tmp_path / "ltx091", variant="0.9.1")
    Image.fromarray(np.zeros((40, 40, 3), np.uint8)).save(tmp_path / "i.png")
    monkeypatch.setattr(LTXPipeline, "from_pretrained", lambda *a, **k: pytest.fail("loaded before the check"))
    assert main(["generate", "--checkpoint", str(folder), "--prompt", "a", "--image", str(tmp_path / "i.png"),
                 "--last-image", str(tmp_path / "i.png"), *SIZE, "--out", str(tmp_path / "x.mp4")]) == 2
    assert "--last-image needs an LTXConditionPipeline checkpoint" in capsys.readouterr().err


def test_unsupported_and_corrupt_folders_say_so(ckpt, tmp_path, capsys):
    import shutil

    upsampler = tmp_path / "upsampler"
    shutil.copytree(ckpt, upsampler)
    index = json.loads((upsampler / "model_index.json").read_text())
    (upsampler / "model_index.json").write_text(json.dumps({**index, "_class_name": "LTXLatentUpsamplePipeline"}))
    assert main(["generate", "--checkpoint", str(upsampler), "--prompt", "a", *SIZE, "--out",
                 str(tmp_path / "x.mp4")]) == 2
    assert "describes 'LTXLatentUpsamplePipeline', which vidax does not run" in capsys.readouterr().err
    broken = tmp_path / "broken"
    shutil.copytree(ckpt, broken)
    (broken / "tokenizer" / "tokenizer.json").write_text('{"version": 1, 2: 3}')
    assert main(["generate", "--checkpoint", str(broken), "--prompt", "a", *SIZE, "--out", str(tmp_path / "y.mp4")]) == 2
    assert "tokenizer.json: not a valid tokenizer file" in capsys.readouterr().err


def test_sigterm_leaves_no_partial_output(ckpt, tmp_path, monkeypatch, capsys):
    import os
    import signal

    def terminate(self, *a, **k):
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(LTXPipeline, "__call__", terminate)
    before = signal.getsignal(signal.SIGTERM)
    assert main(["generate", "--checkpoint", str(ckpt), "--prompt", "a", *SIZE, "--out", str(tmp_path / "x.mp4")]) == 143
    assert "terminated; no output was written" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
    assert signal.getsignal(signal.SIGTERM) is before  # the previous handler is back


def test_image_paths_that_are_folders_or_16_bit(tmp_path):
    from PIL import Image

    from vidax.core.images import ImageError, load_image

    with pytest.raises(ImageError, match="is a folder; pass an image file"):
        load_image(tmp_path)
    Image.fromarray(np.full((20, 20), 40000, np.uint16)).save(tmp_path / "deep.png")
    with pytest.warns(UserWarning, match="16-bit or float"):
        load_image(tmp_path / "deep.png")
