"""The model families: how each recognises its folders, which tasks and pipelines it runs, what it takes.

A family is found by data it declares, never by a branch in the caller (the way diffusers resolves a folder through
``model_index.json``'s ``_class_name`` and its AutoPipeline tables). Each family folder has a ``family.py`` whose
``FAMILY`` is a :class:`Family` record: its names, the ``model_index.json`` classes and ``vidax_index.json`` name of
its folders (and a detector for original-release folders), its tasks and the pipeline class of each, its reference
generation defaults and the settings it takes beyond the common ones, its presets, demos, and its inspect / convert /
plan hooks. ``vidax generate``, ``inspect``, ``convert``, ``plan``, ``demo`` and :func:`load_pipeline` ask this module
"which family claims this folder / preset / demo?" and get one record back.

Adding a family is one folder with a ``family.py`` and one line in :data:`FAMILY_MODULES` (or :func:`register` at
run time, e.g. from a plugin or a test). Family modules import ``core/``, ``encoders/``, ``checkpoint/``,
``schedulers/`` and the shared modules of ``models/`` (this one, ``t5_folder``), never another family.

This module and the ``family.py`` files import no JAX: ``vidax --help`` and argument checks stay fast; the hooks
import their implementations when called.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from vidax.checkpoint.errors import CheckpointError
from vidax.core.config_values import read_json

#: The tasks a family may run.
TASKS: dict[str, str] = {
    "t2v": "text-to-video",
    "i2v": "image-to-video",
    "flf2v": "first-last-frame-to-video",
    "v2v": "video-to-video",
}

#: The built-in families, in the order they are tried for original-release folders and listed.
FAMILY_MODULES: tuple[str, ...] = (
    "vidax.models.wan.family",
    "vidax.models.cogvideox.family",
    "vidax.models.ltx.family",
    "vidax.models.hunyuanvideo.family",
    "vidax.models.hunyuanvideo15.family",
    "vidax.models.cosmos_predict25.family",
    "vidax.models.cosmos3.family",
    "vidax.models.ltx2.family",
)

#: The generation settings every family's pipeline call takes (``pipe(prompt, negative_prompt, **these)``).
COMMON_SETTINGS: tuple[str, ...] = ("height", "width", "num_frames", "num_inference_steps", "guidance_scale",
                                    "negative_prompt")


@dataclass(frozen=True)
class Setting:
    """A generation setting a family takes beyond :data:`COMMON_SETTINGS` (one CLI flag, one call keyword).

    Attributes:
      name: the pipeline call's keyword (``"flow_shift"``).
      flag: the CLI flag (``"--flow-shift"``).
      help: what it does, for ``--help``.
      type: parses the flag's text (raises ``argparse.ArgumentTypeError`` / ``ValueError`` on bad text); None for a
        boolean switch (``--flag`` / ``--no-flag``).
      choices: the values this family accepts (others are refused naming the family), or None.
      metavar: the value's name in ``--help``.
      at_load: the setting chooses what is loaded (HunyuanVideo-1.5's transformer ``variant`` of an official-release
        folder): it goes to the pipeline's ``from_pretrained``, not to its call, and ``vidax convert`` takes it too
        (the family's ``inspect`` and ``convert`` then receive it as a keyword).
    """

    name: str
    flag: str
    help: str
    type: Callable[[str], Any] | None = str
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    at_load: bool = False


@dataclass(frozen=True)
class Demo:
    """A tiny random-weight checkpoint of a family (or of one model within it) that ``vidax demo`` writes and runs.

    Attributes:
      name: what ``vidax demo NAME[/TASK]`` calls it (the family's name, or a model such as ``"wan2.2-ti2v"``).
      tasks: the tasks it runs; the first is the default.
      write: ``(folder, task) -> folder``: writes the checkpoint of that task into ``folder`` (must not exist).
      settings: ``task -> generation settings`` of the demo run (sizes the model accepts, few steps).
      folder: ``task -> folder name`` under ``checkpoints/`` (tasks may share one checkpoint).
      note: said before the run (e.g. a learned position table fixing the size).
    """

    name: str
    tasks: tuple[str, ...]
    write: Callable[[Path, str], Path]
    settings: Callable[[str], dict[str, Any]]
    folder: Callable[[str], str]
    note: str = ""


class Preset(Protocol):
    """What every family's preset record has (each family's own dataclass; see its ``config.py``)."""

    name: str
    model: str
    task: str
    dtype: str
    tp: int
    sp: int

    @property
    def fps(self) -> float: ...

    def settings(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Family:
    """One model family, as data (see the module docstring).

    Attributes:
      name: the command-line name (``"wan"``, ``"ltx-video"``).
      display: the name in messages (``"LTX-Video"``).
      diffusers_classes: ``model_index.json`` ``_class_name`` values of its diffusers folders.
      vidax_name: the ``family`` of its ``vidax_index.json`` (folders written by ``vidax convert``).
      tasks: task -> pipeline class, as ``"module:Class"`` (imported on use).
      defaults: the reference generation settings without a preset (call keywords, e.g. ``height``), plus ``fps``.
      settings: the settings it takes beyond :data:`COMMON_SETTINGS`.
      size_rule: the sizes it accepts, for ``--help`` (``"multiples of 16; 4k+1 frames"``).
      example: a published folder, for messages.
      presets: () -> {name: preset} (presets of the paper's benchmark rows; see :class:`Preset`).
      demos: its demo checkpoints; the first is the family's default demo.
      folder_tasks: folder -> the tasks that folder runs (reads configuration files only).
      inspect: path -> report lines (``vidax inspect``; reads headers only). ``vidax convert`` passes the
        :attr:`Setting.at_load` settings it is given as keywords (``variant="480p_t2v"``), to check what it converts.
      convert: ``(src, dst, *, dtype, text_encoder_dtype, vae_dtype, **at_load settings given) -> summary``
        (``vidax convert``).
      claims_folder: folder -> whether an original-release folder (no ``model_index.json``) is this family's; None:
        it publishes none.
      inspect_component: a single component file or folder -> ``(share of its keys the family's best key map
        fills, report lines)``, for ``vidax inspect`` of a lone component; None: not offered.
      check: ``(folder, task, call) -> None``: the weightless checks of a call (sizes, frame counts, position
        limits, conditioning against the folder), raising ``ValueError`` before anything is loaded; None: none.
      resolve: ``(folder, task, preset, given, call) -> call``: the family's rules for merging a preset and the
        flags given into the call's settings (e.g. an image's area instead of a preset's size); None: plain merge.
      plan: the memory planner hooks, or None (``vidax plan`` and ``--auto-split`` then refuse the family).
      fps_setting: the call keyword that ``--fps`` also sets (LTX-Video's ``frame_rate``: the model is told the
        rate), or None (``--fps`` only sets the mp4's rate).
      offload: whether it streams blocks from host memory (``--offload-chunk``).
      video_keep_last: how many of an input video's last frames its video-to-video task can condition on (the
        CLI decodes a ``--video`` and holds only those); None: the family takes no input video.
    """

    name: str
    display: str
    diffusers_classes: tuple[str, ...]
    vidax_name: str
    tasks: dict[str, str]
    defaults: dict[str, Any]
    size_rule: str
    example: str
    presets: Callable[[], dict[str, Preset]]
    folder_tasks: Callable[[Path], tuple[str, ...]]
    inspect: Callable[[Path], list[str]]
    convert: Callable[..., dict]
    settings: tuple[Setting, ...] = ()
    demos: tuple[Demo, ...] = ()
    claims_folder: Callable[[Path], bool] | None = None
    inspect_component: Callable[[Path], tuple[float, list[str]]] | None = None
    check: Callable[[Path, str, dict], None] | None = None
    resolve: Callable[[Path, str, Any, dict, dict], dict] | None = None
    plan: Any = None
    fps_setting: str | None = None
    offload: bool = True
    video_keep_last: int | None = None

    def setting(self, name: str) -> Setting | None:
        """The family's :class:`Setting` called ``name``, or None."""
        return next((s for s in self.settings if s.name == name), None)

    def load_settings(self, call: dict[str, Any]) -> dict[str, Any]:
        """Remove from ``call`` and return the settings that go to ``from_pretrained`` (:attr:`Setting.at_load`)."""
        return {s.name: call.pop(s.name) for s in self.settings if s.at_load and s.name in call}

    def pipeline_class(self, task: str) -> type:
        """The pipeline class that runs ``task``.

        Raises:
          ValueError: a task this family does not run (its tasks named).
        """
        if task not in self.tasks:
            raise ValueError(f"{self.display} runs {', '.join(self.tasks)}, not {task!r}")
        module, _, cls = self.tasks[task].partition(":")
        return getattr(importlib.import_module(module), cls)


_REGISTERED: dict[str, Family] = {}
_LOADED = False


def _load_builtins() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for module in FAMILY_MODULES:
        fam = importlib.import_module(module).FAMILY
        _REGISTERED.setdefault(fam.name, fam)


def register(family: Family) -> Family:
    """Add ``family`` (a plugin's, or a test's); it is then found by every command and :func:`load_pipeline`.

    Raises:
      ValueError: a family of that name exists, or its model_index classes, vidax name, presets or demo names
        collide with a registered family's.
    """
    _load_builtins()
    if family.name in _REGISTERED:
        raise ValueError(f"a family named {family.name!r} is registered already")
    for other in _REGISTERED.values():
        clash = (set(other.diffusers_classes) & set(family.diffusers_classes)
                 or ({other.vidax_name} & {family.vidax_name})
                 or (set(other.presets()) & set(family.presets()))
                 or ({d.name for d in other.demos} & {d.name for d in family.demos}))
        if clash:
            raise ValueError(f"family {family.name!r}: {sorted(clash)} already belong to {other.name!r}")
    _REGISTERED[family.name] = family
    return family


def unregister(name: str) -> None:
    """Remove a family added by :func:`register` (tests)."""
    _REGISTERED.pop(name, None)


def families() -> tuple[Family, ...]:
    """Every family, built-ins first."""
    _load_builtins()
    return tuple(_REGISTERED.values())


def family(name: str) -> Family:
    """The family called ``name``.

    Raises:
      ValueError: no such family (the known ones named).
    """
    _load_builtins()
    if name not in _REGISTERED:
        raise ValueError(f"unknown model family {name!r}; known: {', '.join(_REGISTERED)}")
    return _REGISTERED[name]


def family_of(folder: str | os.PathLike) -> Family:
    """The family that claims the checkpoint ``folder`` (reads index files only).

    In order: ``vidax_index.json`` (a converted folder: its ``family``), ``model_index.json`` (its ``_class_name``),
    then each family's original-release detector.

    Raises:
      CheckpointError: the folder does not exist, is a single component folder, or no family claims it (the
        message lists what each family's folders hold).
    """
    folder = Path(folder).expanduser()
    fams = families()
    if not folder.is_dir():
        what = "is a file; pass the checkpoint folder" if folder.exists() else "checkpoint folder not found"
        raise CheckpointError(f"{folder}: {what}")
    if (folder / "vidax_index.json").is_file():
        name = read_json(folder / "vidax_index.json").get("family")
        for fam in fams:
            if fam.vidax_name == name:
                return fam
        raise CheckpointError(f"{folder / 'vidax_index.json'}: family {name!r} is not one vidax runs "
                              f"({', '.join(f.vidax_name for f in fams)}); convert the checkpoint again")
    if (folder / "model_index.json").is_file():
        name = read_json(folder / "model_index.json").get("_class_name")
        for fam in fams:
            if name in fam.diffusers_classes:
                return fam
        known = "; ".join(f"{f.display} ({', '.join(f.diffusers_classes)})" for f in fams)
        what = (f"describes {name!r}, which vidax does not run" if name
                else "has no _class_name, so its pipeline is unknown")
        raise CheckpointError(f"{folder / 'model_index.json'}: {what}; vidax runs diffusers folders of: {known}")
    for fam in fams:
        if fam.claims_folder is not None and fam.claims_folder(folder):
            return fam
    if (folder / "config.json").is_file():
        raise CheckpointError(f"{folder}: this is a single component folder (config.json) that no family's original "
                              "release matches; pass the pipeline folder that holds it (with model_index.json)")
    examples = ", ".join(f.example for f in fams)
    raise CheckpointError(f"{folder}: not a checkpoint folder vidax recognises: expected a diffusers pipeline folder "
                          f"(model_index.json; e.g. {examples}), a folder written by `vidax convert` "
                          "(vidax_index.json), "
                          "or an original release folder (e.g. Wan-AI/Wan2.1-T2V-1.3B)")


def inspect(path: str | os.PathLike) -> list[str]:
    """``vidax inspect``: the report of the family that claims ``path``, or for a lone component file or folder the
    report of the family whose key maps fit it best. Reads headers and configuration files only.

    Raises:
      CheckpointError: the path does not exist, or is a folder no family claims and holds no weights.
    """
    path = Path(path).expanduser()
    if not path.exists():
        raise CheckpointError(f"{path}: not found")
    refusal = None
    if path.is_dir():
        try:
            fam = family_of(path)
        except CheckpointError as e:
            if not any(any(path.glob(f"*.{ext}")) for ext in ("safetensors", "bin", "pth", "pt")):
                raise
            fam, refusal = None, e
        if fam is not None:
            try:
                return fam.inspect(path)
            except CheckpointError as e:  # a family's folder with a part missing: it would not load
                from vidax.checkpoint.inspect import MISMATCH

                return [f"{path}: {fam.display} checkpoint", f"  {MISMATCH}: {e}"]
    best: tuple[float, list[str]] | None = None
    for fam in families():
        if fam.inspect_component is not None:
            share, lines = fam.inspect_component(path)
            if best is None or share > best[0]:
                best = (share, lines)
    if best is None:
        raise refusal or CheckpointError(f"{path}: no family inspects single components")
    return best[1]


def presets() -> dict[str, tuple[Family, Preset]]:
    """Every preset of every family: ``name -> (family, preset)``."""
    return {name: (fam, p) for fam in families() for name, p in fam.presets().items()}


def preset(name: str) -> tuple[Family, Preset]:
    """The family and record of preset ``name``.

    Raises:
      ValueError: no such preset.
    """
    table = presets()
    if name not in table:
        raise ValueError(f"unknown preset {name!r}; `vidax presets` lists them")
    return table[name]


def demos() -> dict[str, tuple[Family, Demo]]:
    """Every demo: ``name -> (family, demo)``; a family's name stands for its first demo."""
    table: dict[str, tuple[Family, Demo]] = {}
    for fam in families():
        if fam.demos:
            table.setdefault(fam.name, (fam, fam.demos[0]))
        for d in fam.demos:
            table.setdefault(d.name, (fam, d))
    return table


def find_demo(spec: str) -> tuple[Family, Demo, str]:
    """``NAME[/TASK]`` -> the family, the demo and the task (the demo's first without ``/TASK``).

    Raises:
      ValueError: an unknown name or a task the demo does not run (the choices named).
    """
    name, _, task = spec.partition("/")
    table = demos()
    if name not in table:
        raise ValueError(f"unknown demo {name!r}; choose one of: {', '.join(table)} (optionally NAME/TASK)")
    fam, demo = table[name]
    task = task or demo.tasks[0]
    if task not in demo.tasks:
        raise ValueError(f"demo {name!r} runs {', '.join(demo.tasks)}, not {task!r}")
    return fam, demo, task


def task_for_inputs(image: Any = None, last_image: Any = None, video: Any = None) -> str:
    """The task a call's conditioning inputs ask for: ``v2v`` with an input video, ``flf2v`` with a last frame,
    ``i2v`` with an image, else ``t2v``."""
    if video is not None:
        return "v2v"
    if last_image is not None:
        return "flf2v"
    return "i2v" if image is not None else "t2v"


def _an(word: str) -> str:
    return f"an {word}" if word[:1].upper() in "AEIOUFHLMNRSX" else f"a {word}"


def check_task(fam: Family, folder: Path, task: str) -> tuple[str, ...]:
    """Check that ``folder`` (a ``fam`` checkpoint) runs ``task``; returns the tasks it runs.

    Raises:
      ValueError: it does not (what it runs and what to pass instead named).
    """
    runs = fam.folder_tasks(folder)
    if task in runs:
        return runs
    if runs and all(t != "t2v" for t in runs) and task == "t2v":
        raise ValueError(f"{folder} is {_an(fam.display)} image-to-video checkpoint ({', '.join(runs)}): pass the "
                         "first frame (--image; image= in Python)")
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; tasks: {', '.join(TASKS)} ({folder} runs {', '.join(runs)})")
    raise ValueError(f"{folder} is {_an(fam.display)} checkpoint that runs {', '.join(runs)}, not {task} "
                     f"({TASKS[task]})")


def load_pipeline(folder: str | os.PathLike, task: str | None = None, **runtime: Any):
    """Load the pipeline for ``folder``, its family and task found as diffusers' ``DiffusionPipeline.from_pretrained``
    finds a pipeline class from ``model_index.json``.

    Example::

        import vidax
        pipe = vidax.load_pipeline("Wan2.1-I2V-14B-480P-Diffusers", dtype="bfloat16", tp=4)
        out = pipe("a cat surfing", image="cat.png")          # VideoOutput(frames, fps, metrics)

    Args:
      folder: a checkpoint folder of any family and layout (diffusers, vidax-converted, original release).
      task: ``"t2v"``, ``"i2v"``, ``"flf2v"``, ...; default the folder's first (what its ``model_index.json`` names).
      **runtime: the pipeline class's ``from_pretrained`` options (``dtype``, ``attention``, ``dp``, ``tp``, ``sp``,
        ``offload_chunk``, ``offload_overlap``, ``block_loop``, ``text_encoder_residency``, ``progress``,
        ``compile_cache``, ...).

    Returns:
      the family's pipeline instance (its call: ``pipe(prompt, negative_prompt=None, *, image=None,
      last_image=None, height, width, num_frames, num_inference_steps, guidance_scale, seed, progress, ...)``).

    Raises:
      CheckpointError: no family claims the folder, or it does not load. ValueError: a task the folder does not
      run; bad runtime options.
    """
    folder = Path(folder).expanduser()
    fam = family_of(folder)
    if task is None:
        task = fam.folder_tasks(folder)[0]
    check_task(fam, folder, task)
    return fam.pipeline_class(task).from_pretrained(folder, **runtime)


@dataclass
class Plan:
    """A family's memory-planner hooks (``vidax plan`` and ``generate --auto-split``).

    Attributes:
      architecture: ``(preset, folder or None) -> transformer configuration`` planned for.
      plan: ``(cfg, *, height, width, num_frames, dtype, devices, memory_bytes, reserve_bytes, guided, chunks,
        overlap, model, attention, offload_if_needed, log, call) -> result`` with ``report()``, ``recommended``,
        ``estimates``; ``call`` is the run's settings (the preset's, or the generate call's), for what else changes
        memory in a family (HunyuanVideo: ``vae_tiling``, true CFG).
    """

    architecture: Callable[[Any, Path | None], Any]
    plan: Callable[..., Any]
