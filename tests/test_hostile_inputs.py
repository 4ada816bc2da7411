"""Broken and hostile inputs outside the weight readers, and outputs that are never lost: each case a one-line
error naming the file or flag, nothing half-written, an existing output untouched."""

import errno
import json
import shutil
import threading

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import vidax.cli
from vidax.cli import main
from vidax.core.files import staged
from vidax.models.wan.demo import write_demo_checkpoint
from vidax.video import read_video


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_demo_checkpoint(tmp_path_factory.mktemp("hostile") / "demo")


def _generate(folder, out, *extra):
    return main(["generate", "--checkpoint", str(folder), "--prompt", "a cat", "--height", "32", "--width", "32",
                 "--num-frames", "5", "--steps", "2", "--dtype", "float32", "--no-progress", "--out", str(out), *extra])


@pytest.fixture
def no_loading(monkeypatch):
    from vidax.models import registry

    monkeypatch.setattr(registry.Family, "pipeline_class",
                        lambda self, task: pytest.fail("a pipeline was loaded before the checks"))


# -- outputs --------------------------------------------------------------------------------------------------


def _outputs(folder):
    return sorted(p.name for p in folder.iterdir())


def test_staged_outputs_are_published_together_or_not_at_all(tmp_path, monkeypatch):
    video, metrics = tmp_path / "v.mp4", tmp_path / "m.json"
    video.write_bytes(b"old video")
    metrics.write_text("old metrics")
    # A failure while writing (a full disk): nothing replaced, no temporary left.
    with pytest.raises(OSError):
        with staged(video, metrics) as (tv, tm):
            tv.write_bytes(b"new video")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert (video.read_bytes(), metrics.read_text()) == (b"old video", "old metrics")
    assert _outputs(tmp_path) == ["m.json", "v.mp4"]
    # The second rename failing: the first destination gets its earlier file back.
    import vidax.core.files as files

    calls = []
    real = files.publish

    def flaky(tmp, path):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(errno.EIO, "I/O error")
        return real(tmp, path)

    monkeypatch.setattr(files, "publish", flaky)
    with pytest.raises(OSError, match="I/O error"):
        with staged(video, metrics) as (tv, tm):
            tv.write_bytes(b"new video")
            tm.write_text("new metrics")
    assert (video.read_bytes(), metrics.read_text()) == (b"old video", "old metrics")
    assert _outputs(tmp_path) == ["m.json", "v.mp4"]
    monkeypatch.setattr(files, "publish", real)
    with staged(video, metrics) as (tv, tm):
        tv.write_bytes(b"new video")
        tm.write_text("new metrics")
    assert (video.read_bytes(), metrics.read_text()) == (b"new video", "new metrics")
    assert _outputs(tmp_path) == ["m.json", "v.mp4"]


def test_two_runs_writing_the_same_metrics_file(tmp_path):
    """Unique temporary names: two writers of one path both finish, and the file holds one of them whole."""
    path = tmp_path / "m.json"
    barrier = threading.Barrier(2)
    errors = []

    def write(i):
        try:
            with staged(path) as (tmp,):
                tmp.write_text(json.dumps({"run": i, "pad": "x" * 100_000}))
                barrier.wait(timeout=10)  # both temporaries exist at once
        except Exception as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert json.loads(path.read_text())["run"] in (0, 1)
    assert _outputs(tmp_path) == ["m.json"]


def test_a_failed_write_keeps_the_earlier_video_and_metrics(ckpt, tmp_path, monkeypatch, capsys):
    out, metrics = tmp_path / "v.mp4", tmp_path / "m.json"
    out.write_bytes(b"old video")
    metrics.write_text("old metrics")

    def full_disk(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(vidax.video, "encode_video", full_disk)
    assert _generate(ckpt, out, "--metrics-json", str(metrics)) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert (out.read_bytes(), metrics.read_text()) == (b"old video", "old metrics")
    assert _outputs(tmp_path) == ["m.json", "v.mp4"]


def test_a_failed_run_removes_the_folders_it_created(ckpt, tmp_path, capsys):
    broken = tmp_path / "nan"
    shutil.copytree(ckpt, broken)
    path = broken / "vae" / "diffusion_pytorch_model.safetensors"
    sd = load_file(str(path))
    sd["decoder.conv_out.bias"] = np.full_like(sd["decoder.conv_out.bias"], np.inf)
    save_file(sd, str(path))
    out = tmp_path / "new" / "deeper" / "v.mp4"
    assert _generate(broken, out, "--mkdir") == 2
    assert not (tmp_path / "new").exists()
    # An infinite VAE bias: the clamp would make a white video; the run fails instead (checked before clamping).
    assert "NaN or infinite" in capsys.readouterr().err


# -- arguments and configuration files ----------------------------------------------------------------------------


def test_a_prompt_that_is_not_utf8_is_refused_before_loading(ckpt, tmp_path, capsys, no_loading):
    # The shell's bytes b"a\xff" arrive as "a\udcff" (surrogateescape).
    assert main(["generate", "--checkpoint", str(ckpt), "--prompt", "a\udcff", "--out", str(tmp_path / "v.mp4")]) == 2
    assert "--prompt holds bytes that are not UTF-8 (at character 1)" in capsys.readouterr().err
    from vidax.core.inputs import prompt_batch

    with pytest.raises(ValueError, match="negative_prompt holds bytes that are not UTF-8"):
        prompt_batch("a", "b\udcff")


@pytest.mark.parametrize("part, edit, message", [
    ("transformer/config.json", {"num_layers": 0}, "num_layers=0 should be a positive integer"),
    ("transformer/config.json", {"num_attention_heads": -2}, "num_attention_heads=-2 should be a positive integer"),
    ("model_index.json", {"expand_timesteps": "yes"}, "expand_timesteps='yes' must be true or false"),
    ("scheduler/scheduler_config.json", {"flow_shift": "banana"}, "flow_shift='banana' must be a positive number"),
    ("transformer/config.json", b"\xff\xfe{}", "transformer/config.json: not UTF-8 text"),
    ("model_index.json", b"\xff", "model_index.json: not UTF-8 text"),
    ("model_index.json", b"[" * 100_000, "model_index.json: JSON nested too deeply"),
])
def test_configuration_files_name_the_file_and_the_value(ckpt, tmp_path, capsys, part, edit, message):
    broken = tmp_path / "broken"
    shutil.copytree(ckpt, broken)
    path = broken / part
    if isinstance(edit, bytes):
        path.write_bytes(edit)
    else:
        path.write_text(json.dumps({**json.loads(path.read_text()), **edit}))
    assert _generate(broken, tmp_path / "v.mp4") == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert _outputs(tmp_path) == ["broken"]


def test_convert_on_a_full_disk_names_the_destination(ckpt, tmp_path, monkeypatch, capsys):
    import vidax.checkpoint.writer as writer

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer, "save_file", full, raising=False)
    monkeypatch.setattr(writer, "write_safetensors_stream", full)
    dst = tmp_path / "out"
    assert main(["convert", str(ckpt), str(dst)]) == 2
    err = capsys.readouterr().err
    assert f"{dst}: writing the converted checkpoint failed (No space left on device" in err
    assert not dst.exists() and _outputs(tmp_path) == []


def test_error_lines_are_bounded(tmp_path, capsys, monkeypatch):
    from vidax.models import registry

    def huge(path):
        raise ValueError("x" * 1_000_000)

    monkeypatch.setattr(registry, "inspect", huge)
    assert main(["inspect", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err) < vidax.cli.MAX_ERROR_CHARS + 100 and err.rstrip().endswith("(message cut)")


def test_the_earlier_video_survives_a_run_that_fails(ckpt, tmp_path, capsys):
    out = tmp_path / "v.mp4"
    assert _generate(ckpt, out) == 0
    frames = read_video(out)[0]
    assert _generate(ckpt, out, "--num-frames", "6") == 2  # refused: the earlier video stays
    assert (read_video(out)[0] == frames).all()


@pytest.mark.parametrize("flags, message", [(["--max-area", "-5"], "--max-area: must be a positive integer, got -5"),
                                            (["--max-area", "0"], "--max-area: must be a positive integer, got 0")])
def test_negative_sizes_are_refused_by_the_parser(ckpt, tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as e:
        _generate(ckpt, tmp_path / "v.mp4", *flags)
    assert e.value.code == 2 and message in capsys.readouterr().err
