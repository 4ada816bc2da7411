"""The HunyuanVideo-1.5 family's record for the registry (:mod:`vidax.models.registry`): text-to-video and
image-to-video at 480p and 720p (the release's transformer variants, CFG- and step-distilled ones included), from
diffusers folders, the official release and vidax-converted folders.

Only index and configuration files are read here; the pipelines, inspection and conversion are imported when used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vidax.core import arg_types
from vidax.models.hunyuanvideo15.presets import PRESETS, VARIANTS
from vidax.models.registry import Demo, Family, Plan, Setting

TEMPORAL, MULTIPLE = 4, 16  # the VAE compresses time 4x and space 16x (patch size 1)


def _checkpoint(folder: Path, call: dict | None = None, task: str | None = None):
    from vidax.models.hunyuanvideo15.layout import resolve_checkpoint

    return resolve_checkpoint(folder, variant=(call or {}).get("variant"), task=task)


def _tasks(folder: Path) -> tuple[str, ...]:
    from vidax.models.hunyuanvideo15.layout import original_variants

    variants = original_variants(folder)
    if variants:  # an official release: the tasks of the variants present, text-to-video first
        return tuple(t for t in ("t2v", "i2v") if any(VARIANTS[v].task == t for v in variants))
    return (_checkpoint(folder).task,)


def check_sizes(height: Any, width: Any, num_frames: Any) -> None:
    """Sizes the model runs: ``num_frames = 4k + 1``, height and width positive multiples of 16 (height/width None:
    taken from the image or the transformer's resolution later).

    Raises:
      ValueError: every problem, with the nearest valid values (:func:`vidax.core.inputs.check_video_sizes`).
    """
    from vidax.core.inputs import check_video_sizes

    check_video_sizes(height, width, num_frames, temporal=TEMPORAL, multiple=MULTIPLE, release_frames=121,
                      why=" (the VAE's 16x compression)")


def _check(folder: Path, task: str, call: dict) -> None:
    from vidax.models.hunyuanvideo15.layout import check_tokenizers

    check_sizes(call.get("height"), call.get("width"), call["num_frames"])
    check_tokenizers(_checkpoint(folder, call, task))


def _resolve(folder: Path, task: str, preset: Any, given: dict, call: dict) -> dict:
    """The folder's own settings where neither the flags nor a preset set them: an official release's variant (its
    guidance scale, shift and steps, :data:`~vidax.models.hunyuanvideo15.presets.VARIANTS`), a diffusers folder's
    guider and scheduler configs; without a size, the pipeline's choice (16:9 at the transformer's resolution for
    text-to-video, the image's bucket for image-to-video, as the release and diffusers choose them)."""
    ckpt = _checkpoint(folder, call, task)
    variant = VARIANTS.get(ckpt.variant or "")
    if preset is None:
        if "guidance_scale" not in given:
            call["guidance_scale"] = float(ckpt.guider_config().get("guidance_scale", 6.0))
        if "flow_shift" not in given:
            call["flow_shift"] = None  # the scheduler config's (or the variant's) shift, read by the pipeline
        if "num_inference_steps" not in given and variant is not None:
            call["num_inference_steps"] = variant.num_inference_steps
    if "height" not in given and "width" not in given and (task == "i2v" or preset is None):
        # The pipeline chooses: the image's bucket (image-to-video), or 16:9 at the transformer's resolution.
        call["height"] = call["width"] = None
    return call


def _inspect(path: Path, variant: str | None = None) -> list[str]:
    from vidax.models.hunyuanvideo15.inspection import inspect_checkpoint

    return inspect_checkpoint(path, variant=variant)


def _convert(src: Path, dst: Path, *, variant: str | None = None, **dtypes) -> dict:
    from vidax.models.hunyuanvideo15.convert import convert_checkpoint

    return convert_checkpoint(src, dst, variant=variant, **dtypes)


def _claims(folder: Path) -> bool:
    """An official-release ``ckpts`` folder (``transformer/<variant>/config.json`` beside ``vae/config.json``)."""
    from vidax.models.hunyuanvideo15.layout import original_variants

    return bool(original_variants(folder))


def _architecture(preset: Any, folder: Path | None):
    from vidax.models.hunyuanvideo15.planner import folder_architecture, preset_architecture

    return folder_architecture(folder) if folder is not None else preset_architecture(preset)


def _plan(architecture, *, guided: bool = True, model: str | None = None, call: dict | None = None, **kw):
    """The registry's planner call (:func:`vidax.models.hunyuanvideo15.planner.plan_hunyuanvideo15`). ``guided`` is
    the CLI's ``guidance_scale > 1``: classifier-free guidance, a batch of two (the CFG-distilled variants' 1.0: one
    evaluation); an official release's ``variant`` and the VAE's tiling come from the run's settings (``call``)."""
    from vidax.models.hunyuanvideo15.planner import for_call, plan_hunyuanvideo15

    call = call or {}
    return plan_hunyuanvideo15(for_call(architecture, call), guided=guided, model_name=model,
                               vae_tiling=call.get("vae_tiling"), **kw)


def _write_demo(folder: Path, task: str) -> Path:
    from vidax.models.hunyuanvideo15.demo import write_demo_checkpoint

    return write_demo_checkpoint(folder, task=task)


def _demo_settings(task: str) -> dict[str, Any]:
    return dict(height=64, width=64, num_frames=9, num_inference_steps=4, guidance_scale=6.0, dtype="float32")


FAMILY = Family(
    name="hunyuanvideo-1.5",
    display="HunyuanVideo-1.5",
    diffusers_classes=("HunyuanVideo15Pipeline", "HunyuanVideo15ImageToVideoPipeline"),
    vidax_name="hunyuanvideo-1.5",
    tasks={"t2v": "vidax.models.hunyuanvideo15.pipeline:HunyuanVideo15Pipeline",
           "i2v": "vidax.models.hunyuanvideo15.pipeline:HunyuanVideo15ImageToVideoPipeline"},
    # diffusers HunyuanVideo15Pipeline's defaults (121 frames, 50 steps) at the release's 24 fps; the size, guidance
    # and shift come from the folder (see _resolve).
    defaults=dict(height=720, width=1280, num_frames=121, num_inference_steps=50, guidance_scale=6.0,
                  negative_prompt=None, fps=24, dtype="bfloat16"),
    size_rule="height and width multiples of 16, 4k+1 frames",
    example="hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_t2v",
    settings=(
        Setting("flow_shift", "--flow-shift", "sigma shift of the flow schedule (default: the checkpoint scheduler's; "
                "the release: 5 at 480p, 9 for 720p T2V, 7 for 720p I2V)", arg_types.positive_float, metavar="SHIFT"),
        Setting("variant", "--variant", "HunyuanVideo-1.5 official release: the transformer/<variant> folder to run "
                "(default: the task's 720p one)", str, choices=tuple(VARIANTS), metavar="VARIANT", at_load=True),
    ),
    presets=lambda: PRESETS,
    demos=(Demo("hunyuanvideo-1.5", ("t2v", "i2v"), _write_demo, _demo_settings,
                lambda task: f"hunyuanvideo-1.5-{task}-demo",
                note="HunyuanVideo-1.5-style (dual-stream blocks; Qwen2.5-VL + byT5 glyph text encoders; I2V: SigLIP "
                     "image tokens and the image's latent as the first frame's condition)"),),
    folder_tasks=_tasks,
    inspect=_inspect,
    convert=_convert,
    claims_folder=_claims,
    check=_check,
    resolve=_resolve,
    plan=Plan(architecture=_architecture, plan=_plan),
)
