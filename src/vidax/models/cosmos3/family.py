"""The Cosmos3 family's record for the registry (:mod:`vidax.models.registry`): Nano and Edge text- and image-to-video
from diffusers folders (``Cosmos3OmniPipeline``) and vidax-converted folders.

Only index and configuration files are read here; the pipeline, inspection and conversion are imported when used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vidax.models.cosmos3.presets import DEFAULT_FPS, DEFAULT_GUIDANCE_SCALE, DEFAULT_STEPS, PRESETS
from vidax.models.registry import Demo, Family, Plan

TEMPORAL, MULTIPLE = 4, 16  # the Wan2.2 VAE compresses time 4x and space 16x
#: The most frames and pixels a call may ask for (the reference has no bound; vidax bounds the sequence before
#: allocating): 64 latent frames, 120 latent rows and columns.
MAX_FRAMES, MAX_SIDE = TEMPORAL * 63 + 1, 1920
PIPELINE = "vidax.models.cosmos3.pipeline:Cosmos3Pipeline"


def check_sizes(height: Any, width: Any, num_frames: Any) -> None:
    """Sizes the model runs: ``num_frames = 4k + 1`` up to 253 (1: an image), height and width positive multiples of
    16 up to 1920.

    Raises:
      ValueError: every problem, with the nearest valid values.
    """
    from vidax.core.inputs import check_video_sizes

    check_video_sizes(height, width, num_frames, temporal=TEMPORAL, multiple=MULTIPLE, release_frames=93,
                      why=" (the Wan2.2 VAE's 16x compression)")
    limits = (("num_frames", num_frames, MAX_FRAMES), ("height", height, MAX_SIDE), ("width", width, MAX_SIDE))
    over = [f"{name}={v} is over the {top} accepted (the generation sequence grows with it)"
            for name, v, top in limits if v is not None and v > top]
    if over:
        raise ValueError("; ".join(over))


def _checkpoint(folder: Path):
    from vidax.models.cosmos3.layout import resolve_checkpoint

    return resolve_checkpoint(folder)


def _tasks(folder: Path) -> tuple[str, ...]:
    return _checkpoint(folder).tasks


def _check(folder: Path, task: str, call: dict) -> None:
    from vidax.models.cosmos3.layout import check_tokenizer

    check_sizes(call.get("height"), call.get("width"), call["num_frames"])
    fps = call.get("fps")
    if fps is not None and not (0 < fps <= 240):
        raise ValueError(f"--fps {fps} is outside (0, 240]: the model is told the rate (duration sentence, "
                         "temporal positions)")
    if task == "i2v" and call["num_frames"] == 1:
        raise ValueError("image-to-video needs more than one frame (--num-frames 5 or more); one frame is "
                         "text-to-image, which takes no --image")
    ckpt = _checkpoint(folder)
    check_tokenizer(ckpt)
    if ckpt.is_distilled:
        from vidax.models.cosmos3.pipeline import check_distilled_call

        check_distilled_call(ckpt, call.get("num_inference_steps"), call.get("guidance_scale"),
                             call.get("negative_prompt"))


def _resolve(folder: Path, task: str, preset, given: dict, call: dict) -> dict:
    """A distilled folder's step count and guidance (its schedule's, 1) unless the flags set them (then checked)."""
    ckpt = _checkpoint(folder)
    if ckpt.is_distilled:
        for key, value in (("num_inference_steps", len(ckpt.distilled_sigmas)), ("guidance_scale", 1.0)):
            if key not in given:
                call[key] = value
    return call


def _claims(folder: Path) -> bool:
    """A distilled folder with only a ``modular_model_index.json`` (no ``model_index.json``)."""
    from vidax.models.cosmos3.layout import is_cosmos3_folder

    return is_cosmos3_folder(folder)


def _inspect(path: Path) -> list[str]:
    from vidax.models.cosmos3.inspection import inspect_checkpoint

    return inspect_checkpoint(path)


def _convert(src: Path, dst: Path, **dtypes) -> dict:
    from vidax.models.cosmos3.convert import convert_checkpoint

    return convert_checkpoint(src, dst, **dtypes)


def _write_distilled_demo(folder: Path, task: str) -> Path:
    from vidax.models.cosmos3.demo import write_demo_checkpoint

    return write_demo_checkpoint(folder, distilled=True)


def _distilled_demo_settings(task: str) -> dict[str, Any]:
    from vidax.models.cosmos3.demo import DEMO_DISTILLED_SIGMAS

    return dict(height=32, width=48, num_frames=9, num_inference_steps=len(DEMO_DISTILLED_SIGMAS), guidance_scale=1.0,
                dtype="float32")


def _write_demo(folder: Path, task: str) -> Path:
    from vidax.models.cosmos3.demo import write_demo_checkpoint

    return write_demo_checkpoint(folder)


def _write_edge_demo(folder: Path, task: str) -> Path:
    from vidax.models.cosmos3.demo import write_demo_checkpoint

    return write_demo_checkpoint(folder, edge=True)


def _architecture(preset: Any, folder: Path | None):
    from vidax.models.cosmos3.planner import folder_architecture, preset_architecture

    return folder_architecture(folder) if folder is not None else preset_architecture(preset)


def _plan(architecture, *, guided: bool = True, model: str | None = None, call: dict | None = None, **kw):
    """The registry's planner call (:func:`vidax.models.cosmos3.planner.plan_cosmos3`); ``guided`` is ``guidance_scale
    != 1`` (the reference's test: prompt and negative prompt rows in the prefill and every step)."""
    from vidax.models.cosmos3.planner import plan_cosmos3

    if call and call.get("guidance_scale") is not None:
        guided = call["guidance_scale"] != 1.0
    return plan_cosmos3(architecture, guided=guided, model_name=model, **kw)


def _demo_settings(task: str) -> dict[str, Any]:
    return dict(height=32, width=48, num_frames=9, num_inference_steps=4, guidance_scale=DEFAULT_GUIDANCE_SCALE,
                dtype="float32")


FAMILY = Family(
    name="cosmos3",
    display="Cosmos3",
    diffusers_classes=("Cosmos3OmniPipeline",),
    vidax_name="cosmos3",
    tasks={"t2v": PIPELINE, "i2v": PIPELINE},
    # diffusers Cosmos3OmniPipeline's defaults
    defaults=dict(height=720, width=1280, num_frames=189, num_inference_steps=DEFAULT_STEPS,
                  guidance_scale=DEFAULT_GUIDANCE_SCALE, negative_prompt=None, fps=DEFAULT_FPS, dtype="bfloat16"),
    size_rule="height and width multiples of 16 (up to 1920), 4k+1 frames (up to 253; 1: an image)",
    example="nvidia/Cosmos3-Nano",
    presets=lambda: PRESETS,
    demos=(Demo("cosmos3", ("t2v", "i2v"), _write_demo, _demo_settings, lambda task: "cosmos3-demo",
                note="Cosmos3 Nano-style (understanding + generation streams per layer; the prompt's keys and "
                     "values computed once)"),
           Demo("cosmos3-edge", ("t2v", "i2v"), _write_edge_demo, _demo_settings, lambda task: "cosmos3-edge-demo",
                note="Cosmos3 Edge-style (squared-ReLU MLP, Nemotron norms, native flow grid)"),
           Demo("cosmos3-distilled", ("t2v",), _write_distilled_demo, _distilled_demo_settings,
                lambda task: "cosmos3-distilled-demo",
                note="distilled Cosmos3 (4 fixed steps, stochastic flow Euler, guidance baked in)")),
    folder_tasks=_tasks,
    plan=Plan(architecture=_architecture, plan=_plan),
    inspect=_inspect,
    convert=_convert,
    check=_check,
    resolve=_resolve,
    claims_folder=_claims,
    fps_setting="fps",
)
