"""`vidax` on Cosmos3: the text-to-video demo through the registry (a playable mp4), the paper's rows in `vidax
presets`, and bad input refused with one ``vidax: error:`` line before the backbone loads."""

import json
import re

import av
import numpy as np
import pytest

from vidax.cli import main
from vidax.models.cosmos3.demo import write_demo_checkpoint
from vidax.models.cosmos3.pipeline import Cosmos3Pipeline

NAME = "cosmos3"


def _decode(path):
    with av.open(str(path)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(container.streams.video[0])]
    return np.stack(frames), frames[0].shape[1], frames[0].shape[0]


def test_text_to_video_demo_writes_a_playable_mp4(tmp_path):
    assert main(["demo", f"{NAME}/t2v", "--checkpoint-dir", str(tmp_path / "c"), "--out-dir", str(tmp_path / "o"),
                 "--quiet"]) == 0
    out = tmp_path / "o" / f"{NAME}-t2v.mp4"
    frames, w, h = _decode(out)
    assert frames.shape[0] == 9 and (w, h) == (48, 32) and frames.std() > 0
    metrics = json.loads(out.with_suffix(".json").read_text())
    assert metrics["task"] == "t2v" and metrics["family"] == NAME and metrics["num_inference_steps"] == 4
    assert (tmp_path / "c" / f"{NAME}-demo" / "model_index.json").is_file()


def test_presets_lists_the_nano_and_edge_rows(capsys):
    assert main(["presets"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.strip()}
    for name, model, size, frames in (("cosmos3-nano-t2v", r"Cosmos3 Nano \(16B\)", "1280x704", 93),
                                      ("cosmos3-edge-t2v", r"Cosmos3 Edge \(4B\)", "832x480", 121)):
        assert re.search(rf"^{name}\s+{NAME}\s+{model}\s+t2v\s+{size}\s+{frames}\s+35\s+6\s+bfloat16\s+24\s+tp4 sp1",
                         rows[name]), rows[name]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_demo_checkpoint(tmp_path_factory.mktemp("c3cli") / "c3")


@pytest.fixture
def no_loading(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the backbone was loaded before the checks")

    monkeypatch.setattr(Cosmos3Pipeline, "from_pretrained", classmethod(refuse))


@pytest.mark.parametrize("flags, message", [
    (["--num-frames", "8"], r"num_frames=8 must be of the form 4k\+1 .*: use 5 or 9"),
    (["--num-frames", "257"], "num_frames=257 is over the 253"),
    (["--height", "40"], "height=40 must be a positive multiple of 16 .*: use 32 or 48"),
    (["--width", "72"], "width=72 must be a positive multiple of 16 .*: use 64 or 80"),
    (["--height", "1936", "--width", "1936"], "height=1936 is over the 1920 .*; width=1936 is over the 1920"),
    (["--fps", "500"], "--fps 500 is outside"),
    (["--num-frames", "1", "--image", "IMG"], "image-to-video needs more than one frame"),
    (["--video", "VID"], "runs t2v, i2v, not v2v"),
], ids=["frames-8", "frames-over-253", "height-40", "width-72", "over-1920", "fps-500", "one-frame-image",
        "video"])
def test_bad_input_is_one_error_line_before_loading(folder, tmp_path, capsys, no_loading, flags, message):
    from PIL import Image

    from vidax.video import write_video

    img, vid = tmp_path / "i.png", tmp_path / "v.mp4"
    Image.fromarray(np.full((64, 64, 3), 90, np.uint8)).save(img)
    write_video(np.zeros((9, 64, 64, 3), np.uint8), vid, fps=8)
    flags = [str(img) if f == "IMG" else str(vid) if f == "VID" else f for f in flags]
    out = tmp_path / "x.mp4"
    args = ["generate", "--checkpoint", str(folder), "--prompt", "a", "--height", "64", "--width", "64",
            "--num-frames", "9", "--out", str(out)]
    assert main(args + flags) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vidax: error: ") and re.search(message, lines[0]), lines
    assert not out.exists()


@pytest.mark.parametrize("flags, message", [
    (["--offload-chunk", "3"], "offload chunk must be an integer between 1 and 2"),
    (["--tp", "3", "--dp", "1", "--sp", "1"], "tp"),
], ids=["offload-chunk-over-the-layers", "tp-3"])
def test_bad_placement_is_one_error_line_before_any_weight(folder, tmp_path, capsys, monkeypatch, flags, message):
    """Placement flags are checked by from_pretrained before it reads a weight (the key map's loader is never
    reached)."""
    from vidax.models.cosmos3 import loading

    def refuse(*a, **k):
        raise AssertionError("weights were read before the placement checks")

    monkeypatch.setattr(loading, "load_transformer", refuse)
    out = tmp_path / "x.mp4"
    assert main(["generate", "--checkpoint", str(folder), "--prompt", "a", "--height", "32", "--width", "32",
                 "--num-frames", "5", "--out", str(out)] + flags) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vidax: error: ") and re.search(message, lines[0]), lines
    assert not out.exists()


def test_a_folder_without_tokenizer_is_refused_before_loading(folder, tmp_path, capsys, no_loading):
    import shutil

    broken = tmp_path / "c3"
    shutil.copytree(folder, broken)
    (broken / "text_tokenizer" / "tokenizer.json").unlink()
    assert main(["generate", "--checkpoint", str(broken), "--prompt", "a", "--height", "32", "--width", "32",
                 "--num-frames", "5", "--out", str(tmp_path / "x.mp4")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and re.search(r"^vidax: error: .*text_tokenizer: the Qwen3-VL tokenizer is missing",
                                         lines[0]), lines


def test_inspect_convert_and_the_converted_folder_generates_the_same(folder, tmp_path, capsys):
    assert main(["inspect", str(folder)]) == 0
    report = capsys.readouterr().out
    assert "transformer (diffusers names)" in report and "does not match" not in report
    assert "Karras flow grid (sigma 200 to 0.147)" in report
    converted = tmp_path / "conv"
    assert main(["convert", str(folder), str(converted), "--dtype", "float32"]) == 0
    assert json.loads((converted / "vidax_index.json").read_text())["family"] == NAME
    assert main(["inspect", str(converted)]) == 0
    assert "vidax layout" in capsys.readouterr().out
    kw = dict(height=32, width=32, num_frames=5, num_inference_steps=2, seed=3, progress=False)
    a = Cosmos3Pipeline.from_pretrained(folder, dtype="float32", progress=False, compile_cache=False)("a cat", **kw)
    b = Cosmos3Pipeline.from_pretrained(converted, dtype="float32", progress=False, compile_cache=False)("a cat", **kw)
    np.testing.assert_array_equal(a.latents, b.latents)


def test_a_folder_with_the_release_names_generates_the_same(folder, tmp_path, capsys):
    """The diffusers folder with its transformer written in the release's names (the language model under
    ``model.``, ``vae2llm`` / ``llm2vae`` / ``time_embedder.mlp``, the release's attention names): inspected as such,
    and the pipeline gives the same latents."""
    import shutil

    from safetensors.numpy import load_file, save_file
    from test_cosmos3_transformer import _release_key

    release = tmp_path / "release"
    shutil.copytree(folder, release)
    path = release / "transformer" / "diffusion_pytorch_model.safetensors"
    save_file({_release_key(k): v for k, v in load_file(str(path)).items()}, str(path))
    assert main(["inspect", str(release)]) == 0
    assert "transformer (release names)" in capsys.readouterr().out
    kw = dict(height=32, width=32, num_frames=5, num_inference_steps=2, seed=4, progress=False)
    a = Cosmos3Pipeline.from_pretrained(folder, dtype="float32", progress=False, compile_cache=False)("a cat", **kw)
    b = Cosmos3Pipeline.from_pretrained(release, dtype="float32", progress=False, compile_cache=False)("a cat", **kw)
    np.testing.assert_array_equal(a.latents, b.latents)
