"""`vidax generate` and `vidax demo` across the families: every flag taken or refused by name for each family, every
demo a playable mp4 with the common summary line and metrics, progress for every stage, checks before loading."""

import json
import re
import shutil

import numpy as np
import pytest

import vidax.cli
from vidax.cli import main
from vidax.models import registry
from vidax.video import COMMON_METRICS, read_video

SUMMARY = re.compile(r"^wrote (?P<out>\S+): (?P<frames>\d+) frames (?P<w>\d+)x(?P<h>\d+) at [\d.]+ fps \((?P<fam>\S+) "
                     r"(?P<task>\w+)\) \| load [\d.]+s, text encoder [\d.]+s, VAE encode [\d.]+s, compile [\d.]+s, "
                     r"[\d.]+s/step x \d+, VAE decode [\d.]+s, total [\d.]+s \| peak host memory [\d.]+ GiB, "
                     r"peak device memory (n/a|[\d.]+ GiB) \| attention [\w+]+$", re.MULTILINE)


# -- every flag, every family ------------------------------------------------------------------------

#: A valid value for each `vidax generate` flag (None: a switch). A new flag must be added here.
SAMPLE = {
    "--negative-prompt": "blurry", "--image": "IMG", "--last-image": "IMG", "--preset": "PRESET",
    "--height": "64", "--width": "64", "--num-frames": "9", "--steps": "2", "--guidance-scale": "3", "--seed": "1",
    "--fps": "12", "--flow-shift": "3", "--sampler": "SAMPLER", "--schedule": "diffusers", "--guidance-scale-2": "3",
    "--max-area": "4096", "--guidance-rescale": "0.5", "--timesteps": "1000,500", "--decode-timestep": "0.05",
    "--decode-noise-scale": "0.02", "--dynamic-cfg": None, "--no-dynamic-cfg": None, "--vae-tiling": None,
    "--no-vae-tiling": None, "--dtype": "float32", "--attention": "xla", "--dp": "1", "--tp": "1", "--sp": "1",
    "--offload-chunk": "1", "--offload-serial": None, "--block-loop": "host", "--text-encoder-residency": "free",
    "--auto-split": None, "--memory-gb": "4", "--reserve-gb": "1", "--distributed": None,
    "--coordinator-address": "localhost:1234", "--num-processes": "1", "--process-id": "0", "--out": "OUT",
    "--metrics-json": "METRICS", "--mkdir": None, "--no-progress": None, "--quiet": None, "--compile-cache": "CACHE",
    "--no-compile-cache": None, "--true-cfg-scale": "2", "--variant": "VARIANT", "--video": "VIDEO",
    "--conditional-frames": "1", "--audio": None, "--no-audio": None, "--decoder": "conv",
}
#: A variant each family's demo folder takes (``--variant``; a family without one refuses the flag by name).
VARIANT = {"hunyuanvideo-1.5": "480p_t2v", "cosmos-predict2.5": "post-trained"}
#: Flags every test call passes anyway, or that are arguments rather than options.
BASE = {"--checkpoint", "--prompt", "-h", "--help"}


def _generate_flags() -> list[str]:
    parser = vidax.cli._parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["generate"]
    return sorted({o for a in sub._actions for o in a.option_strings if o.startswith("--")} - BASE)


@pytest.fixture(scope="module")
def family_folders(tmp_path_factory):
    """One demo checkpoint per family (Wan: a two-expert image-to-video folder, so its image flags apply)."""
    root = tmp_path_factory.mktemp("fams")
    chosen = {"wan": ("wan2.2-a14b", "i2v"), "cogvideox": ("cogvideox", "t2v"), "ltx-video": ("ltx-video", "t2v")}
    out = {}
    for fam in registry.families():
        name, task = chosen.get(fam.name, (fam.demos[0].name, fam.demos[0].tasks[0]))
        _, demo, task = registry.find_demo(f"{name}/{task}")
        out[fam.name] = (demo.write(root / demo.folder(task), task), task)
    out["wan-t2v"] = (registry.find_demo("wan")[1].write(root / "wan-t2v", "t2v"), "t2v")
    from PIL import Image

    Image.fromarray(np.full((64, 64, 3), 90, np.uint8)).save(root / "img.png")
    out["image"] = root / "img.png"
    from vidax.video import write_video

    out["video"] = write_video(np.full((9, 64, 64, 3), 90, np.uint8), root / "clip.mp4", fps=8)
    return out


class _Reached(Exception):
    """The CLI got past every check to loading the pipeline."""


def _expectation(fam: registry.Family, flag: str) -> bool:
    """Whether ``fam`` takes ``flag`` (from its record: its settings, offloading, a planner)."""
    table = vidax.cli._settings_table()
    for name, decls in table.items():
        flags = {decls[0][1].flag}
        if decls[0][1].type is None:
            flags.add("--no-" + decls[0][1].flag[2:])
        if flag in flags:
            return fam.setting(name) is not None
    if flag in ("--offload-chunk", "--offload-serial"):
        return fam.offload
    if flag in ("--auto-split", "--memory-gb", "--reserve-gb"):
        return fam.plan is not None
    if flag == "--video":
        return "v2v" in fam.tasks
    return True


def test_every_flag_is_taken_or_refused_by_name_for_every_family(family_folders, tmp_path, monkeypatch, capsys):
    """A table over (family, flag): a flag the family takes gets the run to loading; one it does not take is refused
    with the family's name, before anything is loaded."""
    flags = _generate_flags()
    missing = [f for f in flags if f not in SAMPLE]
    assert not missing, f"add a sample value for {missing}"

    class Stub:
        @classmethod
        def from_pretrained(cls, *a, **k):
            raise _Reached

    monkeypatch.setattr(registry.Family, "pipeline_class", lambda self, task: Stub)
    monkeypatch.setattr(vidax.cli, "init_distributed", lambda args: None)
    monkeypatch.setattr(vidax.cli, "auto_split", lambda args, *a: (1, 1, 1, None))
    monkeypatch.setattr(vidax.cli, "enable_compile_cache", lambda args: None)
    table = []
    for fam in registry.families():
        folder, task = family_folders[fam.name]
        preset = next((n for n, p in fam.presets().items() if p.task == task), None)
        setting = fam.setting("sampler")
        for flag in flags:
            value = SAMPLE[flag]
            if value == "PRESET" and preset is None:
                continue
            if flag == "--image" and "i2v" not in fam.folder_tasks(folder):
                continue
            value = {"IMG": str(family_folders["image"]), "PRESET": preset, "OUT": str(tmp_path / "o.mp4"),
                     "METRICS": str(tmp_path / "m.json"), "CACHE": str(tmp_path / "cache"),
                     "SAMPLER": setting.choices[0] if setting else "euler", "VIDEO": str(family_folders["video"]),
                     "VARIANT": VARIANT.get(fam.name, "480p_t2v")}.get(value, value)
            args = ["generate", "--checkpoint", str(folder), "--prompt", "a"]
            if task != "t2v" and flag not in ("--image", "--last-image", "--video"):
                args += ["--image", str(family_folders["image"])]
            if flag == "--conditional-frames" and _expectation(fam, "--video"):
                args += ["--video", str(family_folders["video"])]  # it sets how an input video conditions
            if flag == "--last-image" and task == "t2v" and "flf2v" not in fam.folder_tasks(folder):
                continue
            if flag == "--last-image":
                args += ["--image", str(family_folders["image"])]
            if flag == "--timesteps":
                args += ["--steps", "2"]
            if flag in ("--memory-gb", "--reserve-gb"):
                args += ["--auto-split"]
            if flag == "--offload-serial":
                args += ["--offload-chunk", "1"]
            args += [flag] + ([] if value is None else [value])
            if fam.name != "wan" or task != "t2v":
                args += ["--height", "64", "--width", "64"] if "--height" not in args and flag != "--max-area" else []
            args += ["--num-frames", "9"] if flag != "--num-frames" else []
            takes = _expectation(fam, flag)
            if takes:
                with pytest.raises(_Reached):
                    code = main(args)
                    pytest.fail(f"{fam.name} {flag}: exit {code}: {capsys.readouterr().err}")
            elif flag == "--video":  # a task, not a setting: refused as the task the folder does not run
                assert main(args) == 2, (fam.name, flag)
                err = capsys.readouterr().err
                assert re.search(rf"is {re.escape(registry._an(fam.display))} checkpoint that runs .*, not v2v", err), (
                    fam.name, flag, err)
            else:
                assert main(args) == 2, (fam.name, flag)
                err = capsys.readouterr().err
                assert re.search(rf"{re.escape(flag.replace('--no-', '--'))}.*: not used by {re.escape(fam.display)}",
                                 err), (fam.name, flag, err)
            table.append((fam.name, flag, takes))
    taken = {(f, fl) for f, fl, t in table if t}
    # A spot check of the table itself (the record drives it; these are what the families are).
    assert ("wan", "--flow-shift") in taken and ("ltx-video", "--flow-shift") not in taken
    assert ("ltx-video", "--timesteps") in taken and ("wan", "--timesteps") not in taken
    assert ("cogvideox", "--offload-chunk") in taken and ("cogvideox", "--auto-split") not in taken
    assert ("wan", "--guidance-rescale") not in taken and ("cogvideox", "--max-area") not in taken
    assert ("cosmos-predict2.5", "--video") in taken and ("cosmos-predict2.5", "--conditional-frames") in taken
    assert ("wan", "--video") not in taken and ("hunyuanvideo-1.5", "--conditional-frames") not in taken
    assert ("cosmos-predict2.5", "--variant") in taken and ("wan", "--variant") not in taken


def test_a_choice_of_another_family_is_refused_naming_the_family(family_folders, capsys):
    folder, _ = family_folders["cogvideox"]
    assert main(["generate", "--checkpoint", str(folder), "--prompt", "a", "--sampler", "unipc"]) == 2
    assert "--sampler unipc is not a CogVideoX sampler; choose ddim or dpm" in capsys.readouterr().err


# -- checks before loading ------------------------------------------------------------------------


@pytest.fixture
def no_loading(monkeypatch):
    def refuse(self, task):
        raise AssertionError("a pipeline was loaded before the checks")

    monkeypatch.setattr(registry.Family, "pipeline_class", refuse)


@pytest.mark.parametrize("fam_name, flags, message", [
    ("wan-t2v", ["--num-frames", "20001"], "token grid of \\(5001, .*beyond this model's rope_max_seq_len=1024"),
    ("wan", ["--num-frames", "20001", "--height", "64", "--width", "64"], "token grid of \\(5001, "),
    ("wan-t2v", ["--height", "40"], "height=40 must be a positive multiple of 16"),
    ("cogvideox", ["--num-frames", "13"], "num_frames=13 must be of the form 8k\\+1"),
    ("ltx-video", ["--height", "70"], "height=70 must be a positive multiple of 32"),
    ("ltx-video", ["--preset", "wan2.1-t2v-1.3b-480p"], "is not an LTX-Video preset \\(it is a Wan preset\\)"),
    ("cogvideox", ["--image", "IMG", "--last-image", "IMG"], "runs t2v, not flf2v"),
    ("wan", ["--last-image", "IMG"], "--last-image needs --image"),
    ("hunyuanvideo-1.5", ["--num-frames", "8"], "num_frames=8 must be of the form 4k\\+1"),
    ("hunyuanvideo-1.5", ["--height", "40", "--width", "64"], "height=40 must be a positive multiple of 16"),
    ("hunyuanvideo-1.5", ["--image", "IMG"], "runs t2v, not i2v"),
    ("hunyuanvideo-1.5", ["--preset", "hunyuanvideo-1.5-480p-i2v"], "is an image-to-video setting: pass --image"),
])
def test_weightless_checks_run_before_loading(family_folders, tmp_path, capsys, no_loading, fam_name, flags, message):
    folder, task = family_folders[fam_name]
    flags = [str(family_folders["image"]) if f == "IMG" else f for f in flags]
    if task == "i2v" and "--image" not in flags and "--last-image" not in flags:
        flags += ["--image", str(family_folders["image"])]
    assert main(["generate", "--checkpoint", str(folder), "--prompt", "a", "--out", str(tmp_path / "x.mp4"),
                 *flags]) == 2
    assert re.search(message, capsys.readouterr().err)
    assert not list(tmp_path.iterdir())


def test_out_folder_must_exist_unless_mkdir(family_folders, tmp_path, capsys, no_loading):
    folder, _ = family_folders["ltx-video"]
    assert main(["generate", "--checkpoint", str(folder), "--prompt", "a", "--out", str(tmp_path / "new" / "x.mp4"),
                 "--height", "64", "--width", "64", "--num-frames", "9"]) == 2
    assert f"the folder {tmp_path / 'new'} does not exist; create it or pass --mkdir" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


# -- demos ------------------------------------------------------------------------


def _demo_cases():
    return [(name, task) for name, (fam, demo) in registry.demos().items() if name == demo.name for task in demo.tasks]


@pytest.fixture(scope="module")
def demo_dirs(tmp_path_factory):
    return tmp_path_factory.mktemp("demo-ckpts"), tmp_path_factory.mktemp("demo-out")


@pytest.mark.parametrize("name, task", _demo_cases())
def test_every_demo_writes_a_playable_mp4_with_the_common_summary(name, task, demo_dirs, capsys):
    ckpts, outs = demo_dirs
    fam, demo, _ = registry.find_demo(name)
    assert main(["demo", f"{name}/{task}", "--checkpoint-dir", str(ckpts), "--out-dir", str(outs),
                 "--no-progress"]) == 0
    text = capsys.readouterr().out
    m = SUMMARY.search(text)
    assert m, text
    settings = demo.settings(task)
    frames, fps = read_video(outs / f"{name}-{task}.mp4")
    assert frames.shape == (settings["num_frames"], settings["height"], settings["width"], 3)
    assert (m["fam"], m["task"], int(m["frames"]), int(m["w"]), int(m["h"])) == (
        fam.name, task, settings["num_frames"], settings["width"], settings["height"])
    metrics = json.loads((outs / f"{name}-{task}.json").read_text())
    assert set(COMMON_METRICS) <= set(metrics)
    assert metrics["attention"] and metrics["step_s"] > 0 and fps == metrics["fps"]
    assert (metrics["vae_encode_s"] > 0) == (task != "t2v")


def test_demo_reuses_its_checkpoint_and_refuses_a_foreign_folder(tmp_path, capsys):
    args = ["demo", "ltx-video", "--checkpoint-dir", str(tmp_path / "c"), "--out-dir", str(tmp_path / "o"),
            "--quiet"]
    assert main(args) == 0
    assert capsys.readouterr().out == ""  # --quiet: nothing
    assert main(args[:-1] + ["--no-progress"]) == 0
    assert "demo checkpoint present" in capsys.readouterr().out
    (tmp_path / "c" / "cogvideox-5b-demo").mkdir(parents=True)
    assert main(["demo", "cogvideox", "--checkpoint-dir", str(tmp_path / "c")]) == 2
    assert "exists but holds no checkpoint" in capsys.readouterr().err


# -- progress ------------------------------------------------------------------------


def test_every_stage_shows_progress(family_folders, tmp_path, capsys):
    folder, _ = family_folders["ltx-video"]
    assert main(["generate", "--checkpoint", str(folder), "--prompt", "a", "--image", str(family_folders["image"]),
                 "--height", "64", "--width", "64", "--num-frames", "9", "--steps", "2", "--dtype", "float32",
                 "--out", str(tmp_path / "p.mp4")]) == 0
    err = capsys.readouterr().err
    for stage in ("loading", "text encoder", "VAE encode", "compiling", "denoising", "VAE decode"):
        assert f"{stage}:" in err, (stage, err)
    assert main(["generate", "--checkpoint", str(folder), "--prompt", "a", "--height", "64", "--width", "64",
                 "--num-frames", "9", "--steps", "2", "--dtype", "float32", "--quiet",
                 "--out", str(tmp_path / "q.mp4")]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "denoising" not in captured.err


def test_a_long_stage_keeps_ticking():
    """One long call (a compile) shows its clock moving: the ticker redraws the line while nothing is counted."""
    import io
    import time

    from vidax.core.progress import Progress

    buf = io.StringIO()
    with Progress(file=buf, tick_s=0.05).stage("compiling"):
        time.sleep(0.5)
    assert buf.getvalue().count("compiling:") >= 5
    buf = io.StringIO()
    with Progress(enabled=False, file=buf).stage("compiling") as stage:
        stage.update()
    assert buf.getvalue() == ""


# -- what ran, what was written ------------------------------------------------------------------------


def test_metrics_name_the_attention_that_actually_ran(family_folders):
    """cuDNN asked for on the CPU falls back to chunked; the metric says chunked, not cudnn."""
    import warnings

    folder, _ = family_folders["cogvideox"]
    pipe = registry.load_pipeline(folder, dtype="float32", attention="cudnn", progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = pipe("a", height=64, width=96, num_frames=9, num_inference_steps=1, progress=False)
    assert out.metrics["attention"] == "chunked"


def test_convert_names_the_dtypes_it_wrote(family_folders, tmp_path, capsys):
    folder, _ = family_folders["ltx-video"]
    assert main(["convert", str(folder), str(tmp_path / "conv")]) == 0
    out = capsys.readouterr().out
    assert "dtypes: transformer bfloat16, vae float32, text_encoder float32" in out
    assert "(LTX-Video)" in out


def test_inspect_reports_tokenizer_scheduler_and_config_problems(family_folders, tmp_path, capsys):
    """`vidax inspect` exits 1 when any part would not load, and prints parameter counts as 1.23e4."""
    folder, _ = family_folders["cogvideox"]
    assert main(["inspect", str(folder)]) == 0
    assert re.search(r"\d\.\d\de\d+ parameters \([\d,]+\)", capsys.readouterr().out)
    cases = {
        "tokenizer/tokenizer.json": '{"version": 1, 2: 3}',
        "scheduler/scheduler_config.json": json.dumps({"_class_name": "CogVideoXDDIMScheduler",
                                                       "prediction_type": "sample", "beta_schedule": "cosine"}),
        "transformer/config.json": None,  # a config value generate rejects
    }
    for part, text in cases.items():
        broken = tmp_path / part.replace("/", "_")
        shutil.copytree(folder, broken)
        if text is None:
            cfg = json.loads((broken / part).read_text())
            cfg["num_attention_heads"] = "two"
            text = json.dumps(cfg)
        (broken / part).write_text(text)
        assert main(["inspect", str(broken)]) == 1, part
        captured = capsys.readouterr()
        assert "does not match its configuration" in captured.out + captured.err, part


def test_plan_defaults_to_this_machine(monkeypatch, capsys):
    """`vidax plan` plans for the devices and memory of the machine it runs on unless told another's."""
    import jax

    from vidax.core.planner import host_memory_bytes

    fam = registry.family("wan")
    seen = {}

    class Result:
        estimates, recommended, settings, reserve_bytes, target, seconds = [], None, {}, 0, "cpu", 0.0

        def report(self):
            return "report"

    def fake_plan(cfg, **kw):
        seen.update(kw)
        return Result()

    monkeypatch.setattr(fam.plan, "plan", fake_plan)
    assert main(["plan", "--preset", "wan2.1-t2v-1.3b-480p"]) == 0
    out = capsys.readouterr().out
    assert seen["devices"] == jax.device_count()
    assert seen["memory_bytes"] == host_memory_bytes() // jax.local_device_count()
    assert "this host's memory" in out and "--devices 4 plans that" in out
    assert main(["plan", "--preset", "wan2.1-t2v-1.3b-480p", "--devices", "4", "--memory-gb", "30"]) == 0
    assert seen["devices"] == 4 and seen["memory_bytes"] == 30 << 30
    with pytest.raises(SystemExit):  # a family without a planner offers no preset to plan
        main(["plan", "--preset", "ltx-video-0.9.8-2b-distilled"])


# -- found by a new-user trial ---------------------------------------------------------------------------------


@pytest.mark.parametrize("flags, message", [
    (["--memory-gb", "4"], "--memory-gb and --reserve-gb set the budget of --auto-split"),
    (["--out", ""], "--out is empty; pass an mp4 path"),
])
def test_flags_without_effect_are_refused(family_folders, tmp_path, capsys, no_loading, flags, message):
    folder, _ = family_folders["wan-t2v"]
    args = ["generate", "--checkpoint", str(folder), "--prompt", "a", "--height", "32", "--width", "32",
            "--num-frames", "5"]
    if "--out" not in flags:
        args += ["--out", str(tmp_path / "x.mp4")]
    assert main(args + flags) == 2
    assert message in capsys.readouterr().err


def test_timesteps_with_a_missing_value_are_refused(family_folders, capsys):
    folder, _ = family_folders["ltx-video"]
    with pytest.raises(SystemExit):
        main(["generate", "--checkpoint", str(folder), "--prompt", "a", "--timesteps", "1000,,5"])
    assert "comma-separated numbers" in capsys.readouterr().err


def test_demo_refuses_a_folder_holding_another_checkpoint(family_folders, tmp_path, capsys):
    ltx, _ = family_folders["ltx-video"]
    shutil.copytree(ltx, tmp_path / "c" / "wan2.1-t2v-demo")
    assert main(["demo", "wan", "--checkpoint-dir", str(tmp_path / "c"), "--out-dir", str(tmp_path / "o")]) == 2
    assert "holds an LTX-Video checkpoint that is not the wan t2v demo" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert main(["demo", "wan", "--checkpoint-dir", str(tmp_path / "file"), "--out-dir", str(tmp_path / "o")]) == 2
    assert "--checkpoint-dir" in capsys.readouterr().err


def test_convert_refuses_and_inspect_flags_what_would_not_load(family_folders, tmp_path, capsys):
    folder, _ = family_folders["cogvideox"]
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    (broken / "tokenizer" / "tokenizer.json").write_text("{")
    assert main(["convert", str(broken), str(tmp_path / "conv")]) == 2
    assert "would not load, so it is not converted" in capsys.readouterr().err
    assert not (tmp_path / "conv").exists()
    shutil.rmtree(broken / "vae")
    assert main(["inspect", str(broken)]) == 1  # a part missing: it would not load
    assert "missing its vae folder" in capsys.readouterr().out


def test_a_call_follows_from_pretrained_progress(family_folders, capsys):
    folder, _ = family_folders["ltx-video"]
    pipe = registry.load_pipeline(folder, dtype="float32", progress=False)
    pipe("a", height=64, width=64, num_frames=9, num_inference_steps=1)
    assert "denoising" not in capsys.readouterr().err
    pipe("a", height=64, width=64, num_frames=9, num_inference_steps=1, progress=True)
    assert "denoising" in capsys.readouterr().err
