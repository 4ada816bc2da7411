"""`vidax` on LTX-2.5: the demos through the registry (a playable mp4 carrying the generated audio track, and
`--no-audio` without one), the paper's four rows in `vidax presets` and the preset table, `--no-audio` parsing, and
bad input refused with one ``vidax: error:`` line before anything loads."""

import csv
import json
import re
from pathlib import Path

import av
import numpy as np
import pytest

from vidax.cli import _parser, main
from vidax.models.ltx2.demo import DEMO_SETTINGS, write_demo_checkpoint
from vidax.models.ltx2.pipeline import LTX2Pipeline

NAME = "ltx-2.5"


def _streams(path):
    with av.open(str(path)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(container.streams.video[0])]
        return np.stack(frames), len(container.streams.audio)


def test_text_to_video_demo_muxes_the_audio_track(tmp_path):
    """The mp4 decodes back to the demo's frames and a 48 kHz stereo track as long as the video (the vocoder's
    samples for round(9 / 24 * 25) = 9 audio latent frames: (4 * 9 - 3) * 160 * 3)."""
    from vidax.video import read_audio

    assert main(["demo", f"{NAME}/t2v", "--checkpoint-dir", str(tmp_path / "c"), "--out-dir", str(tmp_path / "o"),
                 "--quiet"]) == 0
    out = tmp_path / "o" / f"{NAME}-t2v.mp4"
    frames, audio_streams = _streams(out)
    assert frames.shape == (9, 64, 64, 3) and frames.std() > 0 and audio_streams == 1
    samples = (4 * 9 - 3) * 160 * 3
    audio, rate, duration = read_audio(out)
    assert rate == 48000 and audio.shape[0] == 2 and abs(duration - samples / rate) < 1e-3
    assert samples <= audio.shape[1] < samples + 2048 and np.abs(audio).max() > 1e-3  # AAC pads its last frame
    metrics = json.loads(out.with_suffix(".json").read_text())
    assert (metrics["family"], metrics["task"], metrics["audio_sample_rate"], metrics["audio_samples"]) == (
        NAME, "t2v", 48000, samples)


def test_image_to_video_demo_without_audio(tmp_path):
    assert main(["demo", f"{NAME}/i2v", "--checkpoint-dir", str(tmp_path / "c"), "--out-dir", str(tmp_path / "o"),
                 "--no-audio", "--quiet"]) == 0
    frames, audio_streams = _streams(tmp_path / "o" / f"{NAME}-i2v.mp4")
    assert frames.shape == (9, 64, 64, 3) and audio_streams == 0


def test_diffusion_decoder_demo(tmp_path):
    """`vidax demo ltx-2.5-diffusion-decoder` decodes with the demo folder's diffusion_decoder/ (the --decoder
    diffusion path: the VAE's statistics, the decoder's padded small-latent decode, its x0 step)."""
    assert main(["demo", "ltx-2.5-diffusion-decoder", "--checkpoint-dir", str(tmp_path / "c"), "--out-dir",
                 str(tmp_path / "o"), "--no-audio", "--quiet"]) == 0
    out = tmp_path / "o" / "ltx-2.5-diffusion-decoder-t2v.mp4"
    frames, audio_streams = _streams(out)
    assert frames.shape == (9, 64, 64, 3) and frames.std() > 10 and audio_streams == 0
    assert json.loads(out.with_suffix(".json").read_text())["decoder"] == "diffusion"
    assert (tmp_path / "c" / "ltx-2.5-diffusion-decoder-demo" / "diffusion_decoder" / "config.json").is_file()


def test_no_audio_parsing(capsys):
    p = _parser()
    args = p.parse_args(["generate", "--checkpoint", "x", "--prompt", "a", "--no-audio"])
    assert args.return_audio is False
    assert p.parse_args(["generate", "--checkpoint", "x", "--prompt", "a", "--audio"]).return_audio is True
    assert p.parse_args(["generate", "--checkpoint", "x", "--prompt", "a"]).return_audio is None
    assert p.parse_args(["demo", f"{NAME}/t2v", "--no-audio"]).no_audio is True
    # a demo that makes no sound refuses the flag before writing anything
    assert main(["demo", "cosmos3", "--no-audio", "--checkpoint-dir", "/nonexistent/c"]) == 2
    assert "--no-audio: the cosmos3 demo generates no audio" in capsys.readouterr().err


def test_presets_list_the_four_rows(capsys):
    assert main(["presets"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.strip()}
    for kind, steps, guidance in (("dev", 30, 3), ("distilled", 8, 1)):
        for suffix, extra in (("", r"\s*$"), ("-diffusion-decoder", r"\s+decoder=diffusion\s*$")):
            name = f"ltx-2.5-22b-{kind}{suffix}"
            assert re.search(rf"^{name}\s+{NAME}\s+LTX-2.5 22B \({kind}\).*\s+t2v\s+1216x704\s+121\s+{steps}\s+"
                             rf"{guidance}\s+bfloat16\s+24\s+tp4 sp1 offload 8{extra}", rows[name]), rows[name]


def test_presets_cover_every_ltx25_row_of_the_paper_table():
    from vidax.models.ltx2.presets import PRESETS

    table = Path(__file__).resolve().parents[2] / "shared" / "reference" / "paper-table5.tsv"
    assert table.is_file(), f"{table} not found: the project's shared/ folder must sit beside the checkout"
    rows = [r for r in csv.DictReader(table.open(), delimiter="\t") if r["model"].startswith("LTX-2.5")]
    assert len(rows) == 4
    for r in rows:
        w, h = (int(v) for v in r["resolution_wxh"].split("x"))
        match = [p for p in PRESETS.values() if p.model == r["model"]]
        assert len(match) == 1, f"no preset for {r}"
        p = match[0]
        assert (p.width, p.height, p.num_frames, p.num_inference_steps) == (w, h, int(r["frames"]), int(r["steps"]))
        assert p.tp == int(r["tp/sp"].split("/")[0]) and f"chunk{p.offload_chunk}" == r["offload"]
        assert r["dit_weight_dtype"].startswith("bf16") and p.dtype == "bfloat16" and p.task == r["task"].lower()
        assert p.decoder == ("diffusion" if "diffusion VAE decoder" in r["model"] else "conv")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_demo_checkpoint(tmp_path_factory.mktemp("ltx2cli") / "ltx2", diffusion_decoder=False)


@pytest.fixture
def no_loading(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the pipeline was loaded before the checks")

    monkeypatch.setattr(LTX2Pipeline, "from_pretrained", classmethod(refuse))


@pytest.mark.parametrize("flags, message", [
    (["--num-frames", "8"], r"num_frames=8 must be of the form 8k\+1 .*: use 1 or 9"),
    (["--num-frames", "489"], "num_frames=489 is over the 481"),
    (["--height", "40"], "height=40 must be a positive multiple of 32 .*: use 32 or 64"),
    (["--width", "100"], "width=100 must be a positive multiple of 32 .*: use 96 or 128"),
    (["--height", "2080", "--width", "2080"], "height=2080 is over the 2048 .*; width=2080 is over the 2048"),
    (["--fps", "500"], "--fps 500 is outside"),
    (["--decoder", "diffusion"], r"--decoder diffusion \(the flag, or a -diffusion-decoder preset\): .* has no "
                                 "diffusion_decoder/ .*--decoder conv, or a preset without -diffusion-decoder"),
    (["--preset", "ltx-2.5-22b-dev-diffusion-decoder"], "has no diffusion_decoder/ .*--decoder conv"),
    (["--preset", "ltx-2.5-22b-distilled"], "is for the distilled model"),
    (["--num-frames", "1", "--image", "IMG"], "image-to-video needs more than one frame"),
], ids=["frames-8", "frames-over-481", "height-40", "width-100", "over-2048", "fps-500", "no-diffusion-decoder",
        "diffusion-decoder-preset",
        "distilled-preset-on-dev", "one-frame-image"])
def test_bad_input_is_one_error_line_before_loading(folder, tmp_path, capsys, no_loading, flags, message):
    from PIL import Image

    img = tmp_path / "i.png"
    Image.fromarray(np.full((64, 64, 3), 90, np.uint8)).save(img)
    flags = [str(img) if f == "IMG" else f for f in flags]
    out = tmp_path / "x.mp4"
    args = ["generate", "--checkpoint", str(folder), "--prompt", "a", "--height", "64", "--width", "64",
            "--num-frames", "9", "--out", str(out)]
    assert main(args + flags) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vidax: error: ") and re.search(message, lines[0]), lines
    assert not out.exists()


def test_the_call_gets_the_family_settings(folder, tmp_path, monkeypatch):
    """--no-audio reaches the pipeline call as return_audio=False; the dev folder gets the reference defaults."""
    seen = {}

    class Stop(Exception):
        pass

    class Fake:
        def __call__(self, prompt, negative, **call):
            seen.update(call)
            raise Stop

    monkeypatch.setattr(LTX2Pipeline, "from_pretrained", classmethod(lambda cls, *a, **k: Fake()))
    with pytest.raises(Stop):
        main(["generate", "--checkpoint", str(folder), "--prompt", "a", "--height", "64", "--width", "64",
              "--num-frames", "9", "--no-audio", "--out", str(tmp_path / "x.mp4")])
    assert seen["return_audio"] is False and seen["frame_rate"] == 24.0 and "distilled" not in seen
    assert (seen["num_inference_steps"], seen["guidance_scale"], seen["height"]) == (30, 3.0, 64)
    assert "decoder" not in seen and DEMO_SETTINGS["num_frames"] == 9


def test_a_folder_without_tokenizer_is_refused_before_loading(folder, tmp_path, capsys, no_loading):
    import shutil

    broken = tmp_path / "ltx2"
    shutil.copytree(folder, broken)
    (broken / "tokenizer" / "tokenizer.json").unlink()
    assert main(["generate", "--checkpoint", str(broken), "--prompt", "a", "--height", "64", "--width", "64",
                 "--num-frames", "9", "--out", str(tmp_path / "x.mp4")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and re.search(r"^vidax: error: .*tokenizer: the Gemma tokenizer is missing", lines[0]), lines


def test_write_outputs_muxes_audio_atomically(tmp_path):
    """The track goes into the mp4 at its rate; a track AAC cannot take leaves neither the video nor the metrics."""
    from vidax.cli import write_outputs
    from vidax.video import read_audio

    frames = np.full((9, 32, 32, 3), 120, np.uint8)
    wave = (0.5 * np.sin(np.linspace(0, 200, 2 * 8000))).reshape(2, 8000).astype(np.float32)
    out, metrics = tmp_path / "a.mp4", tmp_path / "a.json"
    assert write_outputs(frames, {"x": 1}, out, str(metrics), 24.0, audio=wave, sample_rate=16000)
    audio, rate, duration = read_audio(out)
    assert rate == 16000 and audio.shape[0] == 2 and abs(duration - 0.5) < 1e-3 and metrics.is_file()
    bad, bad_metrics = tmp_path / "b.mp4", tmp_path / "b.json"
    with pytest.raises(ValueError, match="sample_rate=12345"):
        write_outputs(frames, {"x": 1}, bad, str(bad_metrics), 24.0, audio=wave, sample_rate=12345)
    assert not bad.exists() and not bad_metrics.exists()
