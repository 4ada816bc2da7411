"""The command line and ``make demo``: a playable mp4 of the requested size, clear errors, no torch needed."""

import json
import re
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vidax.cli import main
from vidax.models.wan.demo import write_demo_checkpoint
from vidax.video import read_video

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_demo_checkpoint(tmp_path_factory.mktemp("cli") / "demo")


def _generate(ckpt, out, *extra):
    return main(["generate", "--checkpoint", str(ckpt), "--prompt", "a cat", "--height", "32", "--width", "48",
                 "--num-frames", "5", "--steps", "2", "--dtype", "float32", "--no-progress", "--out", str(out), *extra])


def test_generate_writes_playable_mp4_and_metrics(ckpt, tmp_path):
    out = tmp_path / "v" / "cat.mp4"
    assert _generate(ckpt, out, "--metrics-json", str(tmp_path / "m.json"), "--sampler", "euler", "--mkdir") == 0
    frames, fps = read_video(out)
    assert frames.shape == (5, 32, 48, 3)
    assert fps == 16
    m = json.loads((tmp_path / "m.json").read_text())
    assert m["num_frames"] == 5 and m["step_s"] > 0 and m["compile_s"] > 0
    assert not [p for p in out.parent.iterdir() if p.name != "cat.mp4"]  # no temporary left behind


@pytest.mark.parametrize(
    "args, message",
    [
        (["--num-frames", "8"], "num_frames=8 must be of the form 4k\\+1.*use 5 or 9"),
        (["--height", "40"], "height=40 must be a positive multiple of 16: use 32 or 48"),
        (["--preset", "wan2.1-i2v-14b-480p"], "--preset wan2.1-i2v-14b-480p is an image-to-video setting: pass --image"),
    ],
)
def test_bad_input_errors_and_writes_nothing(ckpt, tmp_path, capsys, args, message):
    out = tmp_path / "bad.mp4"
    assert _generate(ckpt, out, *args) == 2
    assert re.search(message, capsys.readouterr().err)
    assert not out.exists() and not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "args, message",
    [
        (["--guidance-scale", "inf"], "--guidance-scale: must be a finite number, got inf"),
        (["--guidance-scale", "nan"], "--guidance-scale: must be a finite number, got nan"),
        (["--seed", str(2**32)], "seed=4294967296 is outside \\[0, 2\\*\\*32 - 1\\].*repeat the noise of seed 0"),
        (["--seed", "-1"], "seed=-1 is negative"),
        (["--seed", "1.5"], "invalid seed value: '1.5'"),
        (["--fps", "0"], "--fps: must be a positive integer, got 0"),
        (["--compile-cache", ""], "--compile-cache: is empty: pass a directory, or --no-compile-cache"),
        (["--compile-cache", "c", "--no-compile-cache"], "not allowed with argument --compile-cache"),
        (["--auto-split", "--memory-gb", "-1"], "--memory-gb: must be positive, got -1"),
    ],
)
def test_bad_flag_values_are_refused_by_the_parser(ckpt, tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as e:
        _generate(ckpt, tmp_path / "v.mp4", *args)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert re.search(message, err)
    assert err.startswith("vidax: error: ") and err.count("\n") == 1  # one line, no argparse usage block
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "argv, message",
    [
        (["generate", "--checkpoint", "x"], "the following arguments are required: --prompt "
         "\\(`vidax generate --help` lists the options\\)$"),
        (["generate", "--checkpoint", "x", "--prompt", "p", "--stps", "3"],
         "unrecognized arguments: --stps 3; did you mean --steps\\? \\(`vidax generate --help`"),
        (["demo", "--no-audo"], "unrecognized arguments: --no-audo; did you mean --no-audio\\? \\(`vidax demo --help`"),
        (["presets", "extra"], "unrecognized arguments: extra \\(`vidax presets --help`"),
        (["frobnicate"], "invalid choice: 'frobnicate'.* \\(`vidax --help` lists the options\\)$"),
        ([], "the following arguments are required: command"),
    ],
)
def test_command_line_errors_are_one_line_naming_the_help(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("vidax: error: ") and err.count("\n") == 1, err
    assert re.search(message, err.strip()), err


@pytest.fixture
def no_loading(monkeypatch):
    """Fail the test if a pipeline starts loading: output checks must come first."""
    from vidax.models.wan.pipeline import WanPipeline

    def refuse(*a, **k):
        raise AssertionError("the checkpoint was loaded before the output paths were checked")

    monkeypatch.setattr(WanPipeline, "from_pretrained", classmethod(refuse))


def test_unwritable_outputs_fail_before_loading(ckpt, tmp_path, capsys, no_loading):
    (tmp_path / "folder.mp4").mkdir()
    (tmp_path / "file").write_text("")
    cases = [
        ([], tmp_path / "folder.mp4", "--out .*folder.mp4 is a folder"),
        ([], tmp_path / "file" / "v.mp4", "--out .*file/v.mp4: cannot write there \\(a file stands where a folder"),
        (["--metrics-json", str(tmp_path / "same.mp4")], tmp_path / "same.mp4",
         "--metrics-json .*same.mp4 is the --out video itself; pick another file, e.g. .*same.json"),
        (["--metrics-json", str(tmp_path / "file" / "m.json")], tmp_path / "v.mp4",
         "--metrics-json .*m.json: cannot write there"),
    ]
    for extra, out, message in cases:
        assert _generate(ckpt, out, *extra) == 2
        err = capsys.readouterr().err
        assert re.search(message, err), err
        assert "part" not in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "folder.mp4"]


def test_ctrl_c_is_one_line_and_exit_130(ckpt, tmp_path, capsys, monkeypatch):
    import vidax.cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(vidax.cli, "generate", interrupted)
    assert _generate(ckpt, tmp_path / "v.mp4") == 130
    assert capsys.readouterr().err.strip() == "vidax: interrupted; no output was written"


def test_nan_weights_fail_instead_of_writing_black_frames(ckpt, tmp_path, capsys):
    """NaN in the transformer's output projection: every latent is NaN; the run reports it and writes nothing."""
    import shutil

    from safetensors.numpy import load_file, save_file

    broken = tmp_path / "nan"
    shutil.copytree(ckpt, broken)
    path = broken / "transformer" / "diffusion_pytorch_model.safetensors"
    sd = load_file(str(path))
    sd["proj_out.weight"] = np.full_like(sd["proj_out.weight"], np.nan)
    save_file(sd, str(path))
    out = tmp_path / "v.mp4"
    assert _generate(broken, out) == 2
    assert "the generated video holds NaN or infinite values" in capsys.readouterr().err
    assert not out.exists()


def test_missing_checkpoint_part_is_named(ckpt, tmp_path, capsys):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(ckpt, broken)
    shutil.rmtree(broken / "text_encoder")
    out = tmp_path / "x.mp4"
    assert _generate(broken, out) == 2
    assert "text_encoder" in capsys.readouterr().err
    assert not out.exists()


def test_runs_without_torch(tmp_path):
    """The package imports, writes demo checkpoints (Wan, HunyuanVideo I2V, HunyuanVideo-1.5 I2V) and generates, and
    runs the Cosmos-Predict2.5 video-to-world demo (its input clip written and decoded), in a process where
    `import torch` fails."""
    script = f"""
import sys
for name in ("torch", "diffusers", "transformers"):
    sys.modules[name] = None  # any import of these now raises ImportError
try:
    import torch
    raise SystemExit("torch still importable")
except ImportError:
    pass
from vidax.models.wan.demo import write_demo_checkpoint
from vidax.cli import main
write_demo_checkpoint({str(tmp_path / 'ckpt')!r})
code = main(["generate", "--checkpoint", {str(tmp_path / 'ckpt')!r}, "--prompt", "a dog", "--height", "32",
             "--width", "32", "--num-frames", "5", "--steps", "2", "--dtype", "bfloat16", "--no-progress",
             "--out", {str(tmp_path / 'dog.mp4')!r}])
assert code == 0
# HunyuanVideo image-to-video: its Llama / LLaVA / CLIP tokenizers and weights written and read without torch too
from PIL import Image
from vidax.models.hunyuanvideo.demo import write_demo_checkpoint as write_hunyuanvideo
write_hunyuanvideo({str(tmp_path / 'hv')!r}, task="i2v", variant="token_replace")
Image.new("RGB", (40, 30), (200, 90, 10)).save({str(tmp_path / 'img.png')!r})
code = main(["generate", "--checkpoint", {str(tmp_path / 'hv')!r}, "--prompt", "a dog", "--image",
             {str(tmp_path / 'img.png')!r}, "--height", "32", "--width", "32", "--num-frames", "5", "--steps", "1",
             "--dtype", "float32", "--no-progress", "--out", {str(tmp_path / 'hv.mp4')!r}])
assert code == 0
# HunyuanVideo-1.5 image-to-video: Qwen2.5-VL, byT5 and SigLIP written and read without torch
from vidax.models.hunyuanvideo15.demo import write_demo_checkpoint as write_hunyuanvideo15
write_hunyuanvideo15({str(tmp_path / 'hv15')!r}, task="i2v")
code = main(["generate", "--checkpoint", {str(tmp_path / 'hv15')!r}, "--prompt", 'a sign that says "OPEN"',
             "--image", {str(tmp_path / 'img.png')!r}, "--num-frames", "5", "--steps", "1", "--dtype", "float32",
             "--no-progress", "--out", {str(tmp_path / 'hv15.mp4')!r}])
assert code == 0
# Cosmos-Predict2.5 video-to-world: Qwen2.5-VL and the Wan VAE, the demo clip written and read back with PyAV
code = main(["demo", "cosmos-predict2.5/v2v", "--checkpoint-dir", {str(tmp_path / 'demos')!r}, "--out-dir",
             {str(tmp_path / 'out')!r}, "--quiet"])
assert not any(m == "torch" or m.startswith("torch.") for m, v in sys.modules.items() if v is not None)
sys.exit(code)
"""
    env = dict(os.environ, PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    frames, _ = read_video(tmp_path / "dog.mp4")
    assert frames.shape == (5, 32, 32, 3)
    assert read_video(tmp_path / "hv.mp4")[0].shape == (5, 32, 32, 3)
    assert read_video(tmp_path / "out" / "cosmos-predict2.5-v2v.mp4")[0].shape == (9, 64, 64, 3)


def test_make_demo_writes_requested_video(tmp_path):
    """`make demo` (with this environment as its venv) writes a playable mp4 of the requested size."""
    venv = Path(sys.prefix)
    if not (venv / "bin" / "vidax").exists():
        pytest.fail(f"{venv}/bin/vidax missing: run the suite through `make test`, which installs the package")
    (venv / ".installed").touch()
    r = subprocess.run(["make", "-C", str(REPO), "demo", f"VENV={venv}", f"DEMO_CKPT={tmp_path / 'ckpt'}",
                        f"OUT_DIR={tmp_path / 'out'}"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    frames, fps = read_video(tmp_path / "out" / "demo.mp4")
    assert frames.shape == (17, 128, 128, 3) and fps == 16
    assert json.loads((tmp_path / "out" / "demo-metrics.json").read_text())["num_frames"] == 17


def test_compile_cache_directory_resolution(monkeypatch, tmp_path):
    """``--compile-cache`` > ``VIDAX_COMPILE_CACHE`` (off values disable) > ``$XDG_CACHE_HOME/vidax/jax`` >
    ``~/.cache/vidax/jax``; ``--no-compile-cache`` and an unusable directory leave the cache off."""
    from vidax.cli import _parser, enable_compile_cache
    from vidax.core import compile_cache

    monkeypatch.delenv("VIDAX_COMPILE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compile_cache.default_dir() == tmp_path / "xdg" / "vidax" / "jax"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert compile_cache.default_dir() == tmp_path / "home" / ".cache" / "vidax" / "jax"
    monkeypatch.setenv("VIDAX_COMPILE_CACHE", str(tmp_path / "mine"))
    assert compile_cache.default_dir() == tmp_path / "mine"
    for off in ("off", "0", "", "None"):
        monkeypatch.setenv("VIDAX_COMPILE_CACHE", off)
        assert compile_cache.default_dir() is None and compile_cache.enable() is None
    args = _parser().parse_args(["generate", "--checkpoint", "x", "--prompt", "p", "--no-compile-cache"])
    assert enable_compile_cache(args) is None
    blocked = tmp_path / "file"
    blocked.write_text("")
    with pytest.warns(RuntimeWarning, match="unusable.*compiling without it"):
        assert compile_cache.enable(blocked / "cache") is None


def test_second_generate_loads_its_programs_from_the_compile_cache(ckpt, tmp_path):
    """Two `vidax generate` processes with one --compile-cache: the first writes the compiled programs,
    the second reads them back (JAX's cache-hit events) and writes the same video."""
    script = """
import sys, jax
hits = []
jax.monitoring.register_event_listener(lambda event, **kw: hits.append(1) if event == "/jax/compilation_cache/cache_hits" else None)
from vidax.cli import main
code = main(sys.argv[1:])
print("HITS", len(hits))
sys.exit(code)
"""
    # Fully optimised compiles, as users get them: the step and the text encoder then take longer than the cache's
    # minimum compile time (tests/conftest.py turns most optimisation off, which makes them too quick to be written).
    env = {k: v for k, v in os.environ.items() if k not in ("VIDAX_COMPILE_CACHE", "JAX_DISABLE_MOST_OPTIMIZATIONS")}
    cache = tmp_path / "cc"
    runs = []
    for name in ("first", "second"):
        out = tmp_path / f"{name}.mp4"
        args = ["generate", "--checkpoint", str(ckpt), "--prompt", "a cat", "--height", "32", "--width", "48",
                "--num-frames", "5", "--steps", "2", "--dtype", "float32", "--no-progress", "--out", str(out),
                "--compile-cache", str(cache)]
        r = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        runs.append((int(r.stdout.split("HITS")[-1]), read_video(out)[0]))
        if name == "first":
            written = sorted(p.name for p in cache.iterdir())
            assert written, "the first run wrote no compiled program"
    (first_hits, first_frames), (second_hits, second_frames) = runs
    assert first_hits == 0 and second_hits >= 3  # at least the step, the text encoder and a VAE chunk program
    assert (first_frames == second_frames).all()
