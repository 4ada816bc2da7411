"""`vidax generate` routes CogVideoX folders to the CogVideoX pipeline."""

import pytest

from vidax.cli import main
from vidax.models.cogvideox.demo import write_demo_checkpoint
from vidax.video import read_video


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_demo_checkpoint(tmp_path_factory.mktemp("cog") / "demo", variant="5b")


def test_generate_cogvideox_folder_writes_mp4(ckpt, tmp_path):
    out = tmp_path / "cog.mp4"
    assert main(["generate", "--checkpoint", str(ckpt), "--prompt", "a fox", "--height", "32", "--width", "48",
                 "--num-frames", "9", "--steps", "2", "--sampler", "dpm", "--dtype", "float32", "--no-progress",
                 "--out", str(out)]) == 0
    frames, fps = read_video(out)
    assert frames.shape == (9, 32, 48, 3) and fps == 8


def test_generate_cogvideox_rejects_wan_sampler_and_bad_frames(ckpt, tmp_path, capsys):
    assert main(["generate", "--checkpoint", str(ckpt), "--prompt", "a", "--sampler", "unipc",
                 "--out", str(tmp_path / "x.mp4")]) == 2
    assert "not a CogVideoX sampler" in capsys.readouterr().err
    assert main(["generate", "--checkpoint", str(ckpt), "--prompt", "a", "--height", "32", "--width", "48",
                 "--num-frames", "13", "--dtype", "float32", "--out", str(tmp_path / "y.mp4")]) == 2
    assert "num_frames" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.mp4"))
