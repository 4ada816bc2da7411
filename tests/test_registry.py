"""The family registry: every command finds families through it, so a new family needs no change in cli.py."""

import ast
import json
import re
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import vidax
from vidax.checkpoint.errors import CheckpointError
from vidax.cli import main
from vidax.models import registry
from vidax.video import COMMON_METRICS, read_video

SRC = Path(__file__).resolve().parents[1] / "src" / "vidax"

FAKE_MODULE = '''
"""A minimal fake family, registered by the test (not a model: frames drawn from the settings)."""
import json
from pathlib import Path

import numpy as np

from vidax.core import arg_types
from vidax.models.registry import Demo, Family, Setting
from vidax.video import VideoOutput, finish_metrics


class FakePreset:
    name, model, task, dtype, tp, sp, fps = "fake-small", "Fake-1B", "t2v", "float32", 1, 1, 12

    def settings(self):
        return dict(height=32, width=48, num_frames=3, num_inference_steps=2, guidance_scale=1.0, brightness=0.25)


class FakePipeline:
    def __init__(self, folder, runtime):
        self.folder, self.runtime = folder, runtime

    @classmethod
    def from_pretrained(cls, folder, **runtime):
        json.loads((Path(folder) / "model_index.json").read_text())
        return cls(folder, runtime)

    def __call__(self, prompt, negative_prompt=None, *, image=None, last_image=None, height=16, width=16,
                 num_frames=1, num_inference_steps=1, guidance_scale=1.0, seed=0, progress=True, brightness=0.5):
        level = np.uint8(round(255 * brightness))
        frames = np.full((1, num_frames, height, width, 3), level, np.uint8)
        metrics = {"load_s": 0.0, "text_encoder_s": 0.0, "compile_s": 0.0, "step_s": 0.0, "sampling_s": 0.0,
                   "vae_decode_s": 0.0, "attention": "none"}
        finish_metrics(metrics, height=height, width=width, num_frames=num_frames,
                       num_inference_steps=num_inference_steps, fps=12)
        return VideoOutput(frames=frames, fps=12, metrics=metrics)


def write(folder, task):
    folder = Path(folder)
    folder.mkdir()
    (folder / "model_index.json").write_text(json.dumps({"_class_name": "FakeVideoPipeline"}))
    return folder


def fraction(text):
    return arg_types.fraction(text)


FAMILY = Family(
    name="fake", display="Fake", diffusers_classes=("FakeVideoPipeline",), vidax_name="fake",
    tasks={"t2v": __name__ + ":FakePipeline"},
    defaults=dict(height=16, width=16, num_frames=1, num_inference_steps=1, guidance_scale=1.0, negative_prompt=None,
                  fps=12, dtype="float32"),
    size_rule="any size", example="nobody/Fake-1B",
    settings=(Setting("brightness", "--brightness", "grey level of the frames, 0 to 1", fraction, metavar="B"),),
    presets=lambda: {"fake-small": FakePreset()},
    demos=(Demo("fake", ("t2v",), write, lambda task: dict(height=16, width=32, num_frames=2, num_inference_steps=1),
                lambda task: "fake-demo"),),
    folder_tasks=lambda folder: ("t2v",),
    inspect=lambda path: [f"{path}: a Fake checkpoint", "nothing to check"],
    convert=lambda src, dst, **kw: {"bytes": {}, "dtypes": {}, "source_layout": "diffusers", "seconds": 0.0},
    offload=False,
)
'''


@pytest.fixture
def fake_family(tmp_path, monkeypatch):
    """A family defined in a temporary module and registered at run time."""
    (tmp_path / "fake_family_module.py").write_text(textwrap.dedent(FAKE_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    import fake_family_module

    registry.register(fake_family_module.FAMILY)
    yield fake_family_module.FAMILY
    registry.unregister("fake")
    sys.modules.pop("fake_family_module", None)


def test_a_registered_family_is_reached_by_generate_inspect_and_demo(fake_family, tmp_path, capsys):
    folder = fake_family.demos[0].write(tmp_path / "ckpt", "t2v")
    out = tmp_path / "fake.mp4"
    # Its preset, its own setting (a flag the CLI grows from the record) and the common flags.
    assert main(["generate", "--checkpoint", str(folder), "--prompt", "grey", "--preset", "fake-small",
                 "--brightness", "0.75", "--no-progress", "--out", str(out)]) == 0
    frames, fps = read_video(out)
    assert frames.shape == (3, 32, 48, 3) and fps == 12
    assert abs(float(frames.mean()) - 0.75 * 255) < 3  # the flag reached the pipeline
    assert re.search(r"wrote .*fake.mp4: 3 frames 48x32 at 12 fps \(fake t2v\)", capsys.readouterr().out)

    assert main(["inspect", str(folder)]) == 0
    assert "a Fake checkpoint" in capsys.readouterr().out

    assert main(["demo", "fake", "--checkpoint-dir", str(tmp_path / "c"), "--out-dir", str(tmp_path / "o"),
                 "--no-progress"]) == 0
    assert read_video(tmp_path / "o" / "fake-t2v.mp4")[0].shape == (2, 16, 32, 3)

    # Its flags are refused for the other families, and theirs for it, by name.
    wan_like = tmp_path / "w"
    wan_like.mkdir()
    (wan_like / "model_index.json").write_text(json.dumps({"_class_name": "WanPipeline"}))
    assert main(["generate", "--checkpoint", str(wan_like), "--prompt", "a", "--brightness", "0.5"]) == 2
    assert "--brightness: not used by Wan" in capsys.readouterr().err
    assert main(["generate", "--checkpoint", str(folder), "--prompt", "a", "--flow-shift", "3"]) == 2
    assert "--flow-shift: not used by Fake" in capsys.readouterr().err
    assert main(["generate", "--checkpoint", str(folder), "--prompt", "a", "--offload-chunk", "2"]) == 2
    assert "--offload-chunk: not used by Fake" in capsys.readouterr().err


def test_register_refuses_collisions(fake_family):
    import dataclasses

    with pytest.raises(ValueError, match="registered already"):
        registry.register(fake_family)
    clash = dataclasses.replace(fake_family, name="fake2", diffusers_classes=("WanPipeline",), presets=lambda: {},
                                demos=())
    with pytest.raises(ValueError, match="WanPipeline.*already belong to 'wan'"):
        registry.register(clash)


def test_folders_are_claimed_by_their_index(tmp_path):
    def folder(name, index, data):
        f = tmp_path / name
        f.mkdir()
        (f / index).write_text(json.dumps(data))
        return f

    ltx = folder("a", "model_index.json", {"_class_name": "LTXConditionPipeline"})
    assert registry.family_of(ltx).name == "ltx-video"
    assert registry.family_of(folder("b", "model_index.json", {"_class_name": "CogVideoXImageToVideoPipeline"})).name \
        == "cogvideox"
    assert registry.family_of(folder("c", "vidax_index.json", {"family": "wan"})).name == "wan"
    assert registry.family_of(folder("e", "model_index.json", {"_class_name": "HunyuanVideoPipeline"})).name \
        == "hunyuanvideo"
    with pytest.raises(CheckpointError, match="describes 'MochiPipeline', which vidax does not run"):
        registry.family_of(folder("d", "model_index.json", {"_class_name": "MochiPipeline"}))
    with pytest.raises(CheckpointError, match="not a checkpoint folder vidax recognises"):
        registry.family_of(tmp_path / "a" / "..")
    with pytest.raises(CheckpointError, match="checkpoint folder not found"):
        registry.family_of(tmp_path / "missing")


def test_cli_holds_no_family_names():
    """Every family-specific word lives in the family folders: cli.py names none of them."""
    source = (SRC / "cli.py").read_text()
    words = set()
    for fam in registry.families():
        words |= {fam.name, fam.display, fam.vidax_name, *fam.diffusers_classes, *fam.presets(),
                  *(d.name for d in fam.demos)}
    words |= {"Wan", "CogVideoX", "LTX", "Hunyuan", "Cosmos", "UniPC", "T5", "CLIP"}
    found = sorted(w for w in words if re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", source, re.IGNORECASE))
    assert not found, f"cli.py names {found}"


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
    return names


def test_families_import_no_other_family():
    """A family imports core/, encoders/, checkpoint/, schedulers/ and the shared models modules, never another
    family (nor the CLI)."""
    shared = ("vidax.core", "vidax.encoders", "vidax.checkpoint", "vidax.schedulers", "vidax.video",
              "vidax.models.registry", "vidax.models.t5_folder")
    folders = [p for p in (SRC / "models").iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    assert {p.name for p in folders} >= {"wan", "cogvideox", "ltx"}
    bad = []
    for folder in folders:
        own = f"vidax.models.{folder.name}"
        for path in folder.rglob("*.py"):
            for name in _imports(path):
                if not name.startswith("vidax") or name in ("vidax", "vidax.models"):
                    continue
                if not (name.startswith(own + ".") or name == own or name.startswith(shared)):
                    bad.append(f"{path.relative_to(SRC)} imports {name}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("name", sorted(registry.demos()))
def test_every_demo_checkpoint_loads_through_load_pipeline(name, tmp_path):
    """Each demo's folder is claimed by its family, runs the demo's tasks, and loads as that task's pipeline class."""
    fam, demo, _ = registry.find_demo(name)
    for task in demo.tasks:
        folder = tmp_path / demo.folder(task)
        if not folder.exists():
            demo.write(folder, task)
        assert registry.family_of(folder) is fam
        assert task in fam.folder_tasks(folder)
        pipe = vidax.load_pipeline(folder, task, dtype="float32", progress=False)
        assert isinstance(pipe, fam.pipeline_class(task))
    other = next(t for t in registry.TASKS if t not in fam.folder_tasks(folder))  # flf2v runs nowhere but Wan/LTX
    with pytest.raises(ValueError):
        registry.check_task(fam, folder, other)


def test_load_pipeline_picks_the_folder_task_and_refuses_others(tmp_path):
    from vidax.models.cogvideox.demo import write_demo_checkpoint
    from vidax.models.cogvideox.pipeline import CogVideoXImageToVideoPipeline

    folder = write_demo_checkpoint(tmp_path / "i2v", variant="5b-i2v")
    assert isinstance(vidax.load_pipeline(folder, dtype="float32", progress=False), CogVideoXImageToVideoPipeline)
    with pytest.raises(ValueError, match="image-to-video checkpoint .*pass the first frame \\(--image; image= in Python"):
        vidax.load_pipeline(folder, task="t2v")


def test_find_demo_and_preset_errors():
    assert registry.find_demo("wan")[2] == "t2v"
    assert registry.find_demo("wan2.2-ti2v/i2v")[2] == "i2v"
    with pytest.raises(ValueError, match="unknown demo 'nope'"):
        registry.find_demo("nope")
    with pytest.raises(ValueError, match="runs t2v, i2v, not 'flf2v'"):
        registry.find_demo("cogvideox/flf2v")
    with pytest.raises(ValueError, match="unknown preset"):
        registry.preset("nope")


def test_presets_table_lists_every_preset(capsys):
    assert main(["presets"]) == 0
    text = capsys.readouterr().out
    for name, (fam, p) in registry.presets().items():
        row = next(line for line in text.splitlines() if line.startswith(name + " "))
        s = p.settings()
        size = f"image at {s['max_area']:,} px" if s.get("max_area") else f"{s['width']}x{s['height']}"
        assert fam.name in row and size in row and p.dtype in row and f" {s['num_inference_steps']} " in row


def test_common_metrics_are_complete():
    from vidax.video import finish_metrics

    with pytest.raises(KeyError, match="compile_s"):
        finish_metrics({"load_s": 0, "text_encoder_s": 0, "step_s": 0, "sampling_s": 0, "vae_decode_s": 0,
                        "attention": "x"}, height=1, width=1, num_frames=1, num_inference_steps=1, fps=1)
    m = finish_metrics({k: 0 for k in ("load_s", "text_encoder_s", "compile_s", "step_s", "sampling_s",
                                       "vae_decode_s", "attention")},
                       height=1, width=1, num_frames=1, num_inference_steps=1, fps=1)
    assert set(COMMON_METRICS) <= set(m) and m["vae_encode_s"] == 0.0 and m["peak_host_rss_bytes"] > 0
    assert np.isscalar(m["peak_host_rss_bytes"])
