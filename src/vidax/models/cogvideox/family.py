"""The CogVideoX family's record for the registry (:mod:`vidax.models.registry`): CogVideoX 2B / 5B / 5B-I2V and
CogVideoX1.5 5B / 5B-I2V, from diffusers or vidax-converted folders.

Only configuration files are read here; the pipelines, inspection and conversion are imported when used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vidax.models.cogvideox.config import PRESETS
from vidax.models.registry import Demo, Family, Setting


def _checkpoint(folder: Path):
    from vidax.models.cogvideox.layout import resolve_checkpoint

    return resolve_checkpoint(folder)


def _tasks(folder: Path) -> tuple[str, ...]:
    """An image-to-video transformer takes twice the VAE's latent channels (noise and image latents)."""
    ckpt = _checkpoint(folder)
    tcfg, vcfg = ckpt.transformer_config(), ckpt.vae_config()
    return ("i2v",) if tcfg.in_channels == 2 * vcfg.latent_channels else ("t2v",)


def _check(folder: Path, task: str, call: dict) -> None:
    from vidax.models.cogvideox.pipeline import check_inputs

    ckpt = _checkpoint(folder)
    check_inputs(ckpt.transformer_config(), ckpt.vae_config(), call["height"], call["width"], call["num_frames"])


def _inspect(path: Path) -> list[str]:
    from vidax.models.cogvideox.inspection import inspect_checkpoint

    return inspect_checkpoint(path)


def _convert(src: Path, dst: Path, **dtypes) -> dict:
    from vidax.models.cogvideox.convert import convert_checkpoint

    return convert_checkpoint(src, dst, **dtypes)


#: The image-to-video demo's learned position table (CogVideoX-5B-I2V has one: it generates at exactly its
#: training size, 720x480 (width x height) for the release); the tiny demo's table is 12x8 latents, i.e. 96x64
#: pixels.
I2V_DEMO_TABLE = dict(sample_height=8, sample_width=12)


def _write_demo(folder: Path, task: str) -> Path:
    from vidax.models.cogvideox.demo import write_demo_checkpoint

    if task == "i2v":
        return write_demo_checkpoint(folder, variant="5b-i2v", transformer_overrides=I2V_DEMO_TABLE)
    return write_demo_checkpoint(folder, variant="5b")


def _demo_settings(task: str) -> dict[str, Any]:
    return dict(height=64, width=96, num_frames=9, num_inference_steps=4, guidance_scale=6.0, sampler="ddim",
                dtype="float32")


FAMILY = Family(
    name="cogvideox",
    display="CogVideoX",
    diffusers_classes=("CogVideoXPipeline", "CogVideoXImageToVideoPipeline", "CogVideoXVideoToVideoPipeline"),
    vidax_name="cogvideox",
    tasks={"t2v": "vidax.models.cogvideox.pipeline:CogVideoXPipeline",
           "i2v": "vidax.models.cogvideox.pipeline:CogVideoXImageToVideoPipeline"},
    # diffusers CogVideoXPipeline's defaults (480x720, 49 frames, guidance 6); the mp4 at the model's rate.
    defaults=dict(height=480, width=720, num_frames=49, num_inference_steps=50, guidance_scale=6.0,
                  negative_prompt=None, fps=None, dtype="bfloat16"),
    size_rule="height and width multiples of 16, 8k+1 frames (5B-I2V: exactly its training size)",
    example="THUDM/CogVideoX-5b",
    settings=(
        Setting("sampler", "--sampler", "default: the checkpoint's scheduler (DDIM)", str, ("ddim", "dpm")),
        Setting("use_dynamic_cfg", "--dynamic-cfg", "CogVideoX: the reference's timestep-dependent guidance scale "
                "(the 5B presets turn it on)", None),
        Setting("vae_tiling", "--vae-tiling", "decode in overlapping spatial tiles as the reference's "
                "enable_tiling() (the presets turn it on)", None),
    ),
    presets=lambda: PRESETS,
    demos=(Demo("cogvideox", ("t2v", "i2v"), _write_demo, _demo_settings,
                lambda task: "cogvideox-5b-i2v-demo" if task == "i2v" else "cogvideox-5b-demo",
                note="CogVideoX-5B-style (3D RoPE); its I2V model has a learned position table, so the image-to-video "
                     "demo generates at exactly that table's size: 96x64 (width x height)"),),
    folder_tasks=_tasks,
    inspect=_inspect,
    convert=_convert,
    check=_check,
)
