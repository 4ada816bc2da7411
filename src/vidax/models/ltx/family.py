"""The LTX-Video family's record for the registry (:mod:`vidax.models.registry`): LTX-Video 0.9.x (2B and 13B, dev and
distilled), from diffusers or vidax-converted folders, sampled as the pipeline class the folder names.

Only configuration files are read here; the pipeline, inspection and conversion are imported when used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vidax.core import arg_types
from vidax.models.ltx.config import PRESETS
from vidax.models.registry import Demo, Family, Setting

CONDITION_PIPELINE = "LTXConditionPipeline"


def _checkpoint(folder: Path):
    from vidax.models.ltx.layout import resolve_checkpoint

    return resolve_checkpoint(folder)


def _tasks(folder: Path) -> tuple[str, ...]:
    """Every LTX-Video folder conditions on a first frame; ``LTXConditionPipeline`` folders on any frame (the last
    one too)."""
    return ("t2v", "i2v", "flf2v") if _checkpoint(folder).pipeline_class == CONDITION_PIPELINE else ("t2v", "i2v")


def _check(folder: Path, task: str, call: dict) -> None:
    from vidax.models.ltx.pipeline import check_inputs
    from vidax.models.ltx.vae import LTXVideoVAEConfig

    # Every released LTX-Video VAE compresses 32x space, 8x time.
    check_inputs(LTXVideoVAEConfig(), call["height"], call["width"], call["num_frames"], call["frame_rate"])
    if task == "flf2v":
        if call["num_frames"] < 2:
            raise ValueError("--last-image needs a video of more than one frame (e.g. --num-frames 121)")
        ckpt = _checkpoint(folder)  # index files only
        if ckpt.pipeline_class != CONDITION_PIPELINE:
            raise ValueError(f"--last-image needs an LTXConditionPipeline checkpoint (LTX-Video 0.9.5+); {folder} is "
                             f"an {ckpt.pipeline_class} folder, which takes --image only")


def _resolve(folder: Path, task: str, preset: Any, given: dict, call: dict) -> dict:
    """Explicit timesteps set the step count; a preset's distilled timesteps are not re-counted by ``--steps``."""
    timesteps = call.get("timesteps")
    if timesteps is not None:
        if "num_inference_steps" not in given:
            call["num_inference_steps"] = len(timesteps)
        elif call["num_inference_steps"] != len(timesteps):
            if "timesteps" not in given:
                raise ValueError(f"--preset {preset.name} samples its {len(timesteps)} distilled timesteps; to sample "
                                 "other ones pass them with --timesteps (e.g. --timesteps 1000,975,909,725), not "
                                 "--steps")
            raise ValueError(f"--steps {call['num_inference_steps']} and {len(timesteps)} timesteps disagree; pass one "
                             "of them")
    return call


def _inspect(path: Path) -> list[str]:
    from vidax.models.ltx.layout import inspect_checkpoint

    return inspect_checkpoint(path)


def _convert(src: Path, dst: Path, **dtypes) -> dict:
    from vidax.models.ltx.layout import convert_checkpoint

    return convert_checkpoint(src, dst, **dtypes)


def _writer(variant: str):
    def write(folder: Path, task: str) -> Path:
        from vidax.models.ltx.demo import write_demo_checkpoint

        return write_demo_checkpoint(folder, variant=variant)

    return write


def _demo_settings(task: str) -> dict[str, Any]:
    return dict(height=64, width=96, num_frames=9, num_inference_steps=4, guidance_scale=3.0, dtype="float32",
                decode_timestep=0.05)


FAMILY = Family(
    name="ltx-video",
    display="LTX-Video",
    diffusers_classes=("LTXPipeline", "LTXImageToVideoPipeline", "LTXConditionPipeline"),
    vidax_name="ltx",
    tasks={task: "vidax.models.ltx.pipeline:LTXPipeline" for task in ("t2v", "i2v", "flf2v")},
    # diffusers LTXPipeline's defaults (512x704, 161 frames at 25 fps, guidance 3).
    defaults=dict(height=512, width=704, num_frames=161, num_inference_steps=50, guidance_scale=3.0,
                  negative_prompt=None, fps=25, frame_rate=25, dtype="bfloat16"),
    size_rule="height and width multiples of 32, 8k+1 frames",
    example="Lightricks/LTX-Video",
    settings=(
        Setting("sampler", "--sampler", "LTX-Video samples with flow-matching Euler", str, ("euler",)),
        Setting("guidance_rescale", "--guidance-rescale", "rescale of the guided prediction, 0 to 1 (0.7 for the dev "
                "presets; 0: off)", arg_types.finite_float, metavar="PHI"),
        Setting("timesteps", "--timesteps", "explicit timesteps, comma-separated (the distilled presets' list)",
                arg_types.timesteps, metavar="T1,T2,..."),
        Setting("decode_timestep", "--decode-timestep", "the timestep-conditioned VAE's decode timestep (presets: "
                "0.05)", arg_types.non_negative_float, metavar="T"),
        Setting("decode_noise_scale", "--decode-noise-scale", "noise mixed into the latents before decoding "
                "(default: --decode-timestep)", arg_types.non_negative_float, metavar="S"),
        Setting("vae_tiling", "--vae-tiling", "decode in overlapping spatial tiles as the reference's "
                "enable_tiling()", None),
    ),
    presets=lambda: PRESETS,
    demos=(
        Demo("ltx-video", ("t2v", "i2v", "flf2v"), _writer("0.9.8"), _demo_settings,
             lambda task: "ltx-video-0.9.8-demo", note="LTX-Video 0.9.8-style (LTXConditionPipeline semantics)"),
        Demo("ltx-video-0.9.1", ("t2v", "i2v"), _writer("0.9.1"), _demo_settings,
             lambda task: "ltx-video-0.9.1-demo", note="LTX-Video 0.9.1-style (LTXPipeline semantics, noise-injecting "
                                                     "decoder)"),
    ),
    folder_tasks=_tasks,
    inspect=_inspect,
    convert=_convert,
    check=_check,
    resolve=_resolve,
    fps_setting="frame_rate",
)
