"""The Wan family's record for the registry (:mod:`vidax.models.registry`): Wan2.1 T2V / I2V / FLF2V, Wan2.2 TI2V-5B
and A14B, from diffusers folders, the original releases and vidax-converted folders.

Only configuration files are read here; the pipelines, inspection, conversion and planner are imported when used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vidax.core import arg_types
from vidax.models.registry import Demo, Family, Plan, Setting
from vidax.models.wan.config import PRESETS, WAN_NEGATIVE_PROMPT

TEMPORAL = 4  # the Wan VAEs compress time 4x


def _checkpoint(folder: Path):
    from vidax.models.wan.layout import resolve_checkpoint

    return resolve_checkpoint(folder)


def folder_info(folder: Path) -> dict[str, Any]:
    """What a Wan folder runs, from its configuration files: ``tasks``, ``experts`` (1 or 2), ``t2v_pipeline``
    (whether :class:`~vidax.models.wan.pipeline.WanPipeline` runs it itself), ``multiple`` (size multiple),
    ``spatial`` (VAE factor), ``patch`` and ``rope_max_seq_len``.

    Raises:
      CheckpointError: see :func:`vidax.models.wan.layout.resolve_checkpoint`.
    """
    ckpt = _checkpoint(folder)
    tcfg = ckpt.transformer_config()
    vcfg = ckpt.vae_config()
    spatial = vcfg.spatial_compression
    concat = tcfg.in_channels == 2 * vcfg.z_dim + 4
    if concat:
        flf2v = not tcfg.has_image_input or tcfg.pos_embed_seq_len is not None
        tasks = ("i2v", "flf2v") if flf2v else ("i2v",)
    elif ckpt.expand_timesteps:
        tasks = ("t2v", "i2v")
    else:
        tasks = ("t2v",)
    experts = 2 if ckpt.transformer_2_config_path is not None else 1
    return dict(tasks=tasks, experts=experts, spatial=spatial, patch=tcfg.patch_size,
                multiple=spatial * tcfg.patch_size[1], rope_max_seq_len=tcfg.rope_max_seq_len,
                t2v_pipeline=tasks == ("t2v",) and experts == 1 and vcfg.patch_size is None)


def _tasks(folder: Path) -> tuple[str, ...]:
    return folder_info(folder)["tasks"]


def _check(folder: Path, task: str, call: dict) -> None:
    """Sizes (text-to-video on Wan2.1 refuses what the image pipeline rounds, as the references) and the token grid
    against ``rope_max_seq_len`` (a 20001-frame request fails here, not after allocating its noise)."""
    from vidax.models.wan.pipeline import check_inputs

    info = folder_info(folder)
    h, w, f = call.get("height"), call.get("width"), call["num_frames"]
    if info["t2v_pipeline"] and task == "t2v":
        check_inputs(h, w, f)
    pt, ph, pw = info["patch"]
    grid = [((f - 1) // TEMPORAL + 1) // pt if isinstance(f, int) and f >= 1 else 0]
    for v, p in ((h, ph), (w, pw)):
        grid.append(v // info["spatial"] // p if isinstance(v, int) else 0)
    if max(grid) > info["rope_max_seq_len"]:
        raise ValueError(f"height={h}, width={w}, num_frames={f} make a token grid of {tuple(grid)} (frames, rows, "
                         f"columns), beyond this model's rope_max_seq_len={info['rope_max_seq_len']}: generate less")
    if call.get("guidance_scale_2") is not None and info["experts"] == 1:
        raise ValueError(f"--guidance-scale-2 is the low-noise expert's guidance of a two-expert (Wan2.2 A14B) "
                         f"checkpoint; {folder} has one transformer: leave it out")


def _resolve(folder: Path, task: str, preset: Any, given: dict, call: dict) -> dict:
    """Wan's merge: with an image and no explicit size, the size follows the image at the preset's area (``max_area``)
    rather than the preset's example size; a preset's low-noise guidance applies only to two-expert folders."""
    info = folder_info(folder)
    if task == "t2v":
        if "max_area" in given:
            raise ValueError("--max-area sets the size of an image-to-video run from the image's aspect ratio; "
                             "pass --image, or --height/--width for text-to-video")
        call.pop("max_area", None)
    elif "height" not in given and "width" not in given:
        call["height"] = call["width"] = None
    if "guidance_scale_2" not in given and info["experts"] == 1:
        call.pop("guidance_scale_2", None)
    if info["t2v_pipeline"]:
        for key in ("max_area", "guidance_scale_2"):
            call.pop(key, None)
    return call


def _inspect(path: Path) -> list[str]:
    from vidax.models.wan.inspection import inspect_checkpoint

    return inspect_checkpoint(path)


def _inspect_component(path: Path) -> tuple[float, list[str]]:
    from vidax.models.wan.inspection import inspect_component

    return inspect_component(path)


def _convert(src: Path, dst: Path, **dtypes) -> dict:
    from vidax.models.wan.convert import convert_checkpoint

    return convert_checkpoint(src, dst, **dtypes)


def _claims(folder: Path) -> bool:
    """An original Wan release folder (``config.json`` of a ``WanModel``, or its ``.pth`` files)."""
    from vidax.checkpoint.errors import CheckpointError
    from vidax.models.wan.layout import ORIGINAL, detect_layout

    try:
        return detect_layout(folder) == ORIGINAL
    except CheckpointError:
        return False


def _architecture(preset: Any, folder: Path | None):
    from vidax.models.wan.planner import preset_architecture

    return _checkpoint(folder).transformer_config() if folder is not None else preset_architecture(preset)


def _plan(cfg, *, call: dict | None = None, **kw):
    from vidax.models.wan.planner import plan_wan

    return plan_wan(cfg, **kw)


def _write_demo(task: str, folder: Path, demo_task: str) -> Path:
    from vidax.models.wan.demo import write_demo_checkpoint

    return write_demo_checkpoint(folder, task=demo_task)


def _demo_settings(task: str) -> dict[str, Any]:
    return dict(height=64, width=64, num_frames=9, num_inference_steps=4, guidance_scale=5.0, dtype="float32")


DEMOS = (
    Demo("wan", ("t2v", "i2v", "flf2v"), lambda folder, task: _write_demo(task, folder, task), _demo_settings,
         lambda task: f"wan2.1-{task}-demo", note="Wan2.1 1.3B-style architecture (T2V, I2V with CLIP, FLF2V)"),
    Demo("wan2.2-ti2v", ("t2v", "i2v"), lambda folder, task: _write_demo(task, folder, "ti2v"), _demo_settings,
         lambda task: "wan2.2-ti2v-demo", note="Wan2.2 TI2V-5B-style: the Wan2.2 VAE (16x space), per-token timesteps"),
    Demo("wan2.2-a14b", ("t2v", "i2v", "flf2v"),
         lambda folder, task: _write_demo(task, folder, "t2v-a14b" if task == "t2v" else "i2v-a14b"), _demo_settings,
         lambda task: "wan2.2-t2v-a14b-demo" if task == "t2v" else "wan2.2-i2v-a14b-demo",
         note="Wan2.2 A14B-style: high- and low-noise experts switched at the boundary"),
)


FAMILY = Family(
    name="wan",
    display="Wan",
    diffusers_classes=("WanPipeline", "WanImageToVideoPipeline"),
    vidax_name="wan",
    tasks={"t2v": "vidax.models.wan.pipeline:WanPipeline",
           "i2v": "vidax.models.wan.pipeline_i2v:WanImageToVideoPipeline",
           "flf2v": "vidax.models.wan.pipeline_i2v:WanImageToVideoPipeline"},
    # diffusers WanPipeline's defaults, with the Wan repository's negative prompt (generate.py) on the command line.
    defaults=dict(height=480, width=832, num_frames=81, num_inference_steps=50, guidance_scale=5.0,
                  negative_prompt=WAN_NEGATIVE_PROMPT, fps=16, dtype="bfloat16"),
    size_rule="height and width multiples of 16 (32 for Wan2.2 TI2V-5B), 4k+1 frames",
    example="Wan-AI/Wan2.1-T2V-1.3B-Diffusers",
    settings=(
        Setting("flow_shift", "--flow-shift", "sigma shift of the flow schedule (default: the checkpoint "
                "scheduler's; 3.0 at 480p, 5.0 at 720p)", arg_types.positive_float, metavar="SHIFT"),
        Setting("sampler", "--sampler", "default: the checkpoint's scheduler (UniPC)", str, ("unipc", "euler")),
        Setting("schedule", "--schedule", "the sigma grid: the original release's own (FlowUniPCMultistepScheduler "
                "of the Wan repository) or diffusers'; default: the folder layout's reference", str,
                ("diffusers", "original")),
        Setting("guidance_scale_2", "--guidance-scale-2", "Wan2.2 A14B: guidance of the low-noise expert (default: "
                "--guidance-scale)", arg_types.finite_float, metavar="SCALE"),
        Setting("max_area", "--max-area", "with --image and no --height/--width: output pixels, the image's aspect "
                "ratio kept (default: the preset's, else 480*832)", arg_types.positive_int, metavar="PIXELS"),
    ),
    presets=lambda: PRESETS,
    demos=DEMOS,
    folder_tasks=_tasks,
    inspect=_inspect,
    inspect_component=_inspect_component,
    convert=_convert,
    claims_folder=_claims,
    check=_check,
    resolve=_resolve,
    plan=Plan(architecture=_architecture, plan=_plan),
)
