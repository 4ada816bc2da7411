"""The HunyuanVideo family's record for the registry (:mod:`vidax.models.registry`): HunyuanVideo 13B text-to-video
and image-to-video (both I2V variants), from diffusers folders, the original release and vidax-converted folders.

Only index and configuration files are read here; the pipelines, inspection and conversion are imported when used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vidax.core import arg_types
from vidax.models.hunyuanvideo.presets import PRESETS
from vidax.models.registry import Demo, Family, Plan, Setting

TEMPORAL, MULTIPLE = 4, 16  # the VAE compresses time 4x; sizes: VAE 8x times patch 2


def _checkpoint(folder: Path):
    from vidax.models.hunyuanvideo.layout import resolve_checkpoint

    return resolve_checkpoint(folder)


def _tasks(folder: Path) -> tuple[str, ...]:
    return (_checkpoint(folder).task,)


def check_sizes(height: Any, width: Any, num_frames: Any) -> None:
    """Sizes the model runs: ``num_frames = 4k + 1``, height and width positive multiples of 16 (height/width None:
    taken from the image later).

    Raises:
      ValueError: every problem, with the nearest valid values (:func:`vidax.core.inputs.check_video_sizes`).
    """
    from vidax.core.inputs import check_video_sizes

    check_video_sizes(height, width, num_frames, temporal=TEMPORAL, multiple=MULTIPLE, release_frames=129)


def _check(folder: Path, task: str, call: dict) -> None:
    from vidax.models.hunyuanvideo.layout import check_tokenizers

    check_sizes(call.get("height"), call.get("width"), call["num_frames"])
    check_tokenizers(_checkpoint(folder))


def _resolve(folder: Path, task: str, preset: Any, given: dict, call: dict) -> dict:
    """With an image and no explicit size, the size is the original release's bucket for the image's aspect ratio
    (:func:`vidax.models.hunyuanvideo.presets.size_for_image`), not the preset's example size."""
    if task == "i2v" and "height" not in given and "width" not in given:
        call["height"] = call["width"] = None
    return call


def _inspect(path: Path) -> list[str]:
    from vidax.models.hunyuanvideo.inspection import inspect_checkpoint

    return inspect_checkpoint(path)


def _convert(src: Path, dst: Path, **dtypes) -> dict:
    from vidax.models.hunyuanvideo.convert import convert_checkpoint

    return convert_checkpoint(src, dst, **dtypes)


def _claims(folder: Path) -> bool:
    """An original release ``ckpts`` folder (``hunyuan-video-{t2v,i2v}-720p/transformers/...pt``)."""
    from vidax.models.hunyuanvideo.layout import original_task

    return original_task(folder) is not None


def _architecture(preset: Any, folder: Path | None):
    from vidax.models.hunyuanvideo.planner import folder_architecture, preset_architecture

    return folder_architecture(folder) if folder is not None else preset_architecture(preset)


def _plan(architecture, *, guided: bool = False, model: str | None = None, call: dict | None = None, **kw):
    """The registry's planner call (:func:`vidax.models.hunyuanvideo.planner.plan_hunyuanvideo`). ``guided`` (the
    CLI's ``guidance_scale > 1``) is dropped: HunyuanVideo's guidance scale is the embedded guidance of one evaluation
    per step, not classifier-free guidance; true CFG and the VAE's tiling come from the run's settings (``call``)."""
    from vidax.models.hunyuanvideo.planner import plan_hunyuanvideo

    call = call or {}
    true_cfg = call.get("negative_prompt") is not None and (call.get("true_cfg_scale") or 1.0) > 1.0
    return plan_hunyuanvideo(architecture, model_name=model, true_cfg=true_cfg, vae_tiling=call.get("vae_tiling"),
                             **kw)


def _write_demo(folder: Path, task: str) -> Path:
    from vidax.models.hunyuanvideo.demo import write_demo_checkpoint

    return write_demo_checkpoint(folder, task=task, variant="token_replace")


def _demo_settings(task: str) -> dict[str, Any]:
    return dict(height=64, width=64, num_frames=9, num_inference_steps=4, guidance_scale=6.0, dtype="float32")


FAMILY = Family(
    name="hunyuanvideo",
    display="HunyuanVideo",
    diffusers_classes=("HunyuanVideoPipeline", "HunyuanVideoImageToVideoPipeline"),
    vidax_name="hunyuanvideo",
    tasks={"t2v": "vidax.models.hunyuanvideo.pipeline:HunyuanVideoPipeline",
           "i2v": "vidax.models.hunyuanvideo.pipeline:HunyuanVideoImageToVideoPipeline"},
    # diffusers HunyuanVideoPipeline's defaults (720x1280, 129 frames, embedded guidance 6.0) at the release's 24 fps.
    defaults=dict(height=720, width=1280, num_frames=129, num_inference_steps=50, guidance_scale=6.0,
                  negative_prompt=None, fps=24, dtype="bfloat16"),
    size_rule="height and width multiples of 16, 4k+1 frames",
    example="hunyuanvideo-community/HunyuanVideo",
    settings=(
        Setting("flow_shift", "--flow-shift", "sigma shift of the flow schedule (default: the checkpoint scheduler's, "
                "7.0)", arg_types.positive_float, metavar="SHIFT"),
        Setting("true_cfg_scale", "--true-cfg-scale", "HunyuanVideo: true classifier-free guidance with "
                "--negative-prompt when above 1 (--guidance-scale is the embedded guidance)", arg_types.finite_float,
                metavar="SCALE"),
        Setting("vae_tiling", "--vae-tiling", "decode in overlapping tiles as the reference's enable_tiling()", None),
    ),
    presets=lambda: PRESETS,
    demos=(Demo("hunyuanvideo", ("t2v", "i2v"), _write_demo, _demo_settings,
                lambda task: f"hunyuanvideo-{task}-demo",
                note="HunyuanVideo 13B-style (dual-stream then single-stream blocks, Llama + CLIP text encoders; "
                     "I2V: LLaVA image tokens, the first latent frame replaced by the image's, as HunyuanVideo-I2V's "
                     "token_replace release)"),),
    folder_tasks=_tasks,
    inspect=_inspect,
    convert=_convert,
    claims_folder=_claims,
    check=_check,
    resolve=_resolve,
    plan=Plan(architecture=_architecture, plan=_plan),
)
