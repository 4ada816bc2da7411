"""`vidax` on Cosmos-Predict2.5: the video-to-world demo and `generate --video` on its folder (the clip's last frames
reach the pipeline, which then gives what the Python call on the whole clip gives), the presets, every bad input
refused with one ``vidax: error:`` line before the transformer loads, and the bounds of the input video's decoding
(:func:`vidax.core.images.load_video`, with small limits). The demos of every task, each a playable mp4, are in
tests/test_cli_families.py; the torch-free video-to-world demo in tests/test_cli.py."""

import json
import re
import wave

import av
import numpy as np
import pytest

from vidax.cli import main
from vidax.core import images
from vidax.models.cosmos_predict25.pipeline import CosmosPredict25Pipeline
from vidax.video import write_video

NAME = "cosmos-predict2.5"


def _decode(path):
    """``(frames, width, height)`` of a video file, decoded with PyAV."""
    with av.open(str(path)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(container.streams.video[0])]
    return np.stack(frames), frames[0].shape[1], frames[0].shape[0]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """`vidax demo cosmos-predict2.5/v2v`: ``(checkpoint folder, its input clip, the video written)``."""
    root = tmp_path_factory.mktemp("cp25_cli")
    assert main(["demo", f"{NAME}/v2v", "--checkpoint-dir", str(root / "c"), "--out-dir", str(root / "o"),
                 "--quiet"]) == 0
    return root / "c" / f"{NAME}-demo", root / "o" / f"{NAME}-v2v-clip.mp4", root / "o" / f"{NAME}-v2v.mp4"


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """Small input videos: 3 and 9 frames at 64 x 64, a file that is no video, one without a video stream."""
    root = tmp_path_factory.mktemp("cp25_clips")
    rng = np.random.default_rng(0)
    for n in (3, 9):
        write_video((rng.random((n, 64, 64, 3)) * 255).astype(np.uint8), root / f"v{n}.mp4", fps=8)
    (root / "text.mp4").write_text("not a video")
    with wave.open(str(root / "sound.wav"), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(8000)
        w.writeframes(np.zeros(800, np.int16).tobytes())
    from PIL import Image

    Image.fromarray(np.full((64, 64, 3), 90, np.uint8)).save(root / "img.png")
    return root


def test_video_to_world_demo_writes_a_playable_mp4(demo):
    _, clip, out = demo
    frames, w, h = _decode(out)
    assert frames.shape[0] == 9 and (w, h) == (64, 64)
    metrics = json.loads(out.with_suffix(".json").read_text())
    assert metrics["task"] == "v2v" and metrics["family"] == NAME and metrics["vae_encode_s"] > 0
    frames, w, h = _decode(clip)  # the demo's input clip: the sun rising over the hills
    assert frames.shape[0] == 9 and (w, h) == (256, 192)


def test_presets_lists_the_2b_and_14b_rows(capsys):
    assert main(["presets"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    for name, mesh in (("cosmos-predict2.5-2b-t2v", "tp4 sp1  "), ("cosmos-predict2.5-14b-t2v", "tp4 sp1 offload 1")):
        assert re.search(rf"^{name}\s+{NAME}\s+Cosmos-Predict2\.5 \d+B\s+t2v\s+1280x704\s+93\s+35\s+7\s+bfloat16\s+16"
                         rf"\s+{mesh}", rows[name]), rows[name]


def test_generate_continues_the_demo_clip(demo, tmp_path, monkeypatch):
    """`generate --video`: the pipeline is handed the clip's last 5 frames (all that 2 latent frames take) and gives
    what the Python call on the whole clip gives; `--conditional-frames 1` reaches it."""
    folder, clip, _ = demo
    seen = []
    call = CosmosPredict25Pipeline.__call__

    def record(self, *args, **kw):
        out = call(self, *args, **kw)
        seen.append((self, args, kw, out))
        return out

    monkeypatch.setattr(CosmosPredict25Pipeline, "__call__", record)
    out = tmp_path / "world.mp4"
    args = ["generate", "--checkpoint", str(folder), "--prompt", "the sun keeps rising", "--video", str(clip),
            "--height", "32", "--width", "48", "--num-frames", "9", "--steps", "2", "--dtype", "float32",
            "--no-progress", "--quiet"]
    assert main(args + ["--out", str(out), "--metrics-json", str(tmp_path / "m.json")]) == 0
    frames, w, h = _decode(out)
    assert frames.shape[0] == 9 and (w, h) == (48, 32)
    assert json.loads((tmp_path / "m.json").read_text())["task"] == "v2v"
    pipe, (prompt, negative), kw, result = seen[-1]
    whole = images.load_video(clip)
    assert len(whole) == 9 and len(kw["video"]) == 5 and kw.get("num_latent_conditional_frames") is None
    for a, b in zip(kw["video"], whole[-5:]):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    again = call(pipe, prompt, negative, video=whole, **{k: v for k, v in kw.items() if k != "video"})
    np.testing.assert_array_equal(again.latents, result.latents)
    assert main(args + ["--out", str(tmp_path / "one.mp4"), "--conditional-frames", "1"]) == 0
    assert seen[-1][2]["num_latent_conditional_frames"] == 1
    assert _decode(tmp_path / "one.mp4")[0].shape[0] == 9


@pytest.fixture
def no_loading(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the transformer was loaded before the checks")

    monkeypatch.setattr(CosmosPredict25Pipeline, "from_pretrained", classmethod(refuse))


@pytest.fixture(scope="module")
def wan_folder(tmp_path_factory):
    from vidax.models.wan.demo import write_demo_checkpoint

    return write_demo_checkpoint(tmp_path_factory.mktemp("cp25_wan") / "wan")


@pytest.mark.parametrize("flags, message", [
    (["--video", "v3.mp4"], r"the input video has 3 frame\(s\); video-to-world with 2 conditional latent frame\(s\) "
                            r"needs at least 5 \(pass a longer clip, or --conditional-frames 1\)"),
    (["--video", "v9.mp4", "--conditional-frames", "3"], "num_latent_conditional_frames must be 1 or 2"),
    (["--video", "v9.mp4", "--num-frames", "1"], "2 conditional latent frames for a 1-frame video"),
    (["--conditional-frames", "1"], "--conditional-frames .*: pass --video too, or leave it out"),
    (["--num-frames", "8"], "num_frames=8 must be of the form 4k\\+1 .*: use 5 or 9"),
    (["--video", "v9.mp4", "--num-frames", "10"], "num_frames=10 must be of the form 4k\\+1"),
    (["--num-frames", "513"], "num_frames=513 is over the 509"),
    (["--height", "40"], "height=40 must be a positive multiple of 16 .*: use 32 or 48"),
    (["--width", "72"], "width=72 must be a positive multiple of 16 .*: use 64 or 80"),
    (["--height", "1936", "--width", "1936"], "height=1936 is over the 1920 .*; width=1936 is over the 1920"),
    (["--video", "v9.mp4", "--image", "img.png"], "--video continues a video: pass it without --image"),
    (["--video", "text.mp4"], "--video .*text.mp4: not a readable video"),
    (["--video", "sound.wav"], "--video .*sound.wav: no video stream in the file"),
    (["--video", "missing.mp4"], "--video .*missing.mp4: file not found"),
    (["--video", "."], "--video .* is a folder; pass a video file"),
    (["--video", ""], "--video is empty; pass a file path, or leave the flag out"),
    (["--image", " "], "--image is empty; pass a file path"),
    (["--variant", "480p_t2v"], "--variant 480p_t2v is not a Cosmos-Predict2.5 variant; choose post-trained or "
                                "pre-trained"),
], ids=["video-too-short", "conditional-frames-3", "fewer-latent-frames-than-conditioning",
        "conditional-frames-without-video", "frames-8", "frames-10-v2v", "frames-over-509", "height-40", "width-72",
        "over-1920", "video-and-image", "unreadable-video", "no-video-stream", "missing-video", "video-folder",
        "empty-video", "empty-image", "another-family-variant"])
def test_bad_input_is_one_error_line_before_loading(demo, clips, tmp_path, capsys, no_loading, flags, message):
    folder, _, _ = demo
    flags = [str(clips / f) if f.endswith((".mp4", ".wav", ".png")) or f == "." else f for f in flags]
    out = tmp_path / "x.mp4"
    args = ["generate", "--checkpoint", str(folder), "--prompt", "a", "--height", "64", "--width", "64",
            "--num-frames", "9", "--out", str(out)]
    assert main(args + flags) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vidax: error: ") and re.search(message, lines[0]), lines
    assert not out.exists()


def test_video_to_a_family_without_video_to_world_is_refused(wan_folder, clips, tmp_path, capsys):
    for video in ("v9.mp4", "missing.mp4"):  # the task is refused before the file is read
        assert main(["generate", "--checkpoint", str(wan_folder), "--prompt", "a", "--video", str(clips / video),
                     "--out", str(tmp_path / "x.mp4")]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and re.search(r"^vidax: error: .* is a Wan checkpoint that runs t2v, not v2v "
                                             r"\(video-to-video\)$", lines[0]), lines
    assert not list(tmp_path.iterdir())


def test_video_decoding_is_bounded(demo, clips, tmp_path, monkeypatch, capsys):
    """The frame count and the pixels per frame are bounded while decoding (files) or before converting (frames);
    the limits are read at each call (set small here)."""
    folder, clip, _ = demo  # 9 frames of 256 x 192
    monkeypatch.setattr(images, "MAX_VIDEO_FRAMES", 8)
    with pytest.raises(images.ImageError, match="clip.mp4: more than 8 frames; cut the part to condition on first"):
        images.load_video(clip, "--video", keep_last=5)
    with pytest.raises(images.ImageError, match="more than 8 frames"):
        images.load_video(np.zeros((9, 16, 16, 3), np.uint8))
    with pytest.raises(images.ImageError, match="more than 8 frames"):
        images.load_video([np.zeros((16, 16, 3), np.uint8)] * 9)
    assert main(["generate", "--checkpoint", str(folder), "--prompt", "a", "--video", str(clip), "--height", "64",
                 "--width", "64", "--num-frames", "9", "--out", str(tmp_path / "x.mp4")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and re.search("^vidax: error: --video .*: more than 8 frames", lines[0]), lines
    monkeypatch.setattr(images, "MAX_VIDEO_FRAMES", 9)
    assert len(images.load_video(clip, keep_last=5)) == 5

    monkeypatch.setattr(images, "MAX_VIDEO_PIXELS", 256 * 192 - 1)
    with pytest.raises(images.ImageError, match="is 256x192 pixels per frame, over the 49,151 accepted"):
        images.load_video(clip)
    with pytest.raises(images.ImageError, match="is 256x192 pixels per frame"):
        images.load_video(np.zeros((2, 192, 256, 3), np.uint8))
    monkeypatch.setattr(images, "MAX_VIDEO_PIXELS", 256 * 192)
    frames = images.load_video(clip, keep_last=5)
    assert [f.size for f in frames] == [(256, 192)] * 5


def test_frames_and_arrays_are_checked(clips):
    """Frames of one size, RGB uint8, at least 16 pixels a side; the last ``keep_last`` kept, in order."""
    from PIL import Image

    clip = (np.random.default_rng(1).random((7, 32, 48, 3)) * 255).astype(np.uint8)
    kept = images.load_video(clip, keep_last=5)
    assert len(kept) == 5 and all(k.mode == "RGB" for k in kept)
    np.testing.assert_array_equal(np.stack([np.asarray(k) for k in kept]), clip[-5:])
    decoded = images.load_video(clips / "v9.mp4", keep_last=5)
    np.testing.assert_array_equal(np.stack([np.asarray(k) for k in decoded]), _decode(clips / "v9.mp4")[0][-5:])
    cases = [
        (clip.astype(np.float32), "arrays must be uint8 \\(T, H, W, 3\\)"),
        (clip[..., :2], "arrays must be uint8 \\(T, H, W, 3\\)"),
        ([], "is an empty list of frames"),
        ([Image.new("RGB", (32, 32)), Image.new("RGB", (48, 32))], "frames of different sizes"),
        ([np.zeros((8, 32, 3), np.uint8)], "is 32x8 pixels; at least 16"),
        (["frame.png"], "frames must be PIL images or uint8 \\(H, W, 3\\) arrays, got str"),
    ]
    for video, message in cases:
        with pytest.raises(images.ImageError, match=message):
            images.load_video(video)
    with pytest.raises(TypeError, match="expected a path, a list of frames"):
        images.load_video(7)
