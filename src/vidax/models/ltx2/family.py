"""The LTX-2.5 family's record for the registry (:mod:`vidax.models.registry`): joint video and audio generation,
text- and image-to-video, from diffusers folders (``LTX2Pipeline``), Lightricks' release single file beside its
Gemma text encoder, and vidax-converted folders.

Only index, configuration and safetensors header files are read here; the pipeline, planner, inspection and
conversion are imported when used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vidax.checkpoint.errors import CheckpointError
from vidax.models.ltx2.presets import DEFAULT_FRAME_RATE, DEFAULT_GUIDANCE_SCALE, DEFAULT_STEPS, PRESETS
from vidax.models.registry import Demo, Family, Plan, Setting

TEMPORAL, MULTIPLE = 8, 32  # the LTX-2 video VAE compresses time 8x and space 32x
#: The most frames and pixels a call may ask for (the reference has no bound; vidax bounds the sequence before
#: allocating): 61 latent frames (20 s at 24 fps; upstream's max_seconds default), 2048 pixels a side (the
#: positional grid's ``base_height`` / ``base_width``).
MAX_FRAMES, MAX_SIDE = TEMPORAL * 60 + 1, 2048
PIPELINE = "vidax.models.ltx2.pipeline:LTX2Pipeline"
DECODERS = ("conv", "diffusion")


def check_sizes(height: Any, width: Any, num_frames: Any) -> None:
    """Sizes the model runs: ``num_frames = 8k + 1`` up to 481, height and width positive multiples of 32 up to 2048.

    Raises:
      ValueError: every problem, with the nearest valid values.
    """
    from vidax.core.inputs import check_video_sizes

    limits = (("num_frames", num_frames, MAX_FRAMES), ("height", height, MAX_SIDE), ("width", width, MAX_SIDE))
    over = [f"{name}={v} is over the {top} accepted (the generation sequence grows with it)"
            for name, v, top in limits if isinstance(v, int) and not isinstance(v, bool) and v > top]
    if over:  # first: the nearest valid values of a far too large size would be over the limits too
        raise ValueError("; ".join(over))
    check_video_sizes(height, width, num_frames, temporal=TEMPORAL, multiple=MULTIPLE, release_frames=121,
                      why=" (the LTX-2 video VAE's 32x space / 8x time compression)")


def _checkpoint(folder: Path):
    from vidax.models.ltx2.layout import resolve_checkpoint

    return resolve_checkpoint(folder)


def _tasks(folder: Path) -> tuple[str, ...]:
    return _checkpoint(folder).tasks


def _check(folder: Path, task: str, call: dict) -> None:
    """Sizes, frame rate and the decoder asked for, before anything is loaded."""
    check_sizes(call.get("height"), call.get("width"), call["num_frames"])
    rate = call.get("frame_rate")
    if rate is not None and not (0 < rate <= 240):
        raise ValueError(f"--fps {rate} is outside (0, 240]: the model is told the rate (the positions of the video "
                         "and audio tokens)")
    if task == "i2v" and call["num_frames"] == 1:
        raise ValueError("image-to-video needs more than one frame (--num-frames 9 or more)")
    ckpt = _checkpoint(folder)
    if not (ckpt.folders["tokenizer"] / "tokenizer.json").is_file():
        raise CheckpointError(f"{ckpt.folders['tokenizer']}: the Gemma tokenizer is missing (no tokenizer.json); copy "
                              "the text encoder's tokenizer files into it")
    if call.get("decoder", "conv") == "diffusion" and not ckpt.has_diffusion_decoder:
        raise ValueError(f"--decoder diffusion (the flag, or a -diffusion-decoder preset): {folder} has no "
                         "diffusion_decoder/ folder (diffusers' converter writes it with --diffusion_vae); decode with "
                         "the VAE's own decoder: --decoder conv, or a preset without -diffusion-decoder")
    if call.get("return_audio", True) and not ckpt.has_audio:
        raise ValueError(f"{folder} has no audio VAE / vocoder: pass --no-audio for a video without sound")


def _resolve(folder: Path, task: str, preset, given: dict, call: dict) -> dict:
    """The checkpoint's sampler: a distilled folder samples upstream's distilled way (``distilled=True``: 8 fixed
    steps, guidance 1 unless the flags set them, then checked by the pipeline); the VAE's own decoder is the default
    (``decoder`` passed only for the diffusion decoder).

    Raises:
      ValueError: a preset of the other kind of model than the folder (dev vs distilled).
    """
    from vidax.models.ltx2.presets import DISTILLED_GUIDANCE_SCALE, DISTILLED_STEPS

    distilled = _checkpoint(folder).is_distilled
    if preset is not None and preset.distilled != distilled:
        raise ValueError(f"--preset {preset.name} is for the {'distilled' if preset.distilled else 'dev'} model and "
                         f"{folder} is the {'distilled' if distilled else 'dev'} one; choose a "
                         f"{'distilled' if distilled else 'dev'} preset")
    if distilled:
        call["distilled"] = True
        for key, value in (("num_inference_steps", DISTILLED_STEPS), ("guidance_scale", DISTILLED_GUIDANCE_SCALE)):
            if key not in given:
                call[key] = value
    if call.get("decoder") == "conv":
        del call["decoder"]
    return call


def _claims(folder: Path) -> bool:
    """A release folder (the single file with its config metadata)."""
    from vidax.models.ltx2.layout import is_ltx2_folder

    return is_ltx2_folder(folder)


def _inspect(path: Path) -> list[str]:
    from vidax.models.ltx2.inspection import inspect_checkpoint

    return inspect_checkpoint(path)


def _convert(src: Path, dst: Path, **dtypes) -> dict:
    from vidax.models.ltx2.convert import convert_checkpoint

    return convert_checkpoint(src, dst, **dtypes)


def _write_demo(folder: Path, task: str) -> Path:
    from vidax.models.ltx2.demo import write_demo_checkpoint

    return write_demo_checkpoint(folder)


def _demo_settings(task: str) -> dict[str, Any]:
    from vidax.models.ltx2.demo import DEMO_SETTINGS

    return dict(DEMO_SETTINGS)


def _diffusion_decoder_demo_settings(task: str) -> dict[str, Any]:
    return {**_demo_settings(task), "decoder": "diffusion"}


def _architecture(preset: Any, folder: Path | None):
    from vidax.models.ltx2.planner import folder_architecture, preset_architecture

    return folder_architecture(folder) if folder is not None else preset_architecture(preset)


def _plan(architecture, *, guided: bool = True, model: str | None = None, call: dict | None = None, **kw):
    """The registry's planner call (:func:`vidax.models.ltx2.planner.plan_ltx2`); ``guided`` is ``guidance_scale
    != 1`` (the distilled model's 1: one row per prompt), the frame rate and the decoder the call's."""
    from vidax.models.ltx2.planner import plan_ltx2

    if call:
        if call.get("guidance_scale") is not None:
            guided = call["guidance_scale"] != 1.0
        if call.get("frame_rate") is not None:
            kw["frame_rate"] = call["frame_rate"]
        if call.get("decoder") is not None:
            kw["decoder"] = call["decoder"]
    return plan_ltx2(architecture, guided=guided, model_name=model, **kw)


FAMILY = Family(
    name="ltx-2.5",
    display="LTX-2.5",
    diffusers_classes=("LTX2Pipeline", "LTX2ImageToVideoPipeline"),
    vidax_name="ltx2",
    tasks={"t2v": PIPELINE, "i2v": PIPELINE},
    # diffusers LTX2Pipeline's defaults, at the paper's size (1216x704, 121 frames at 24 fps).
    defaults=dict(height=704, width=1216, num_frames=121, num_inference_steps=DEFAULT_STEPS,
                  guidance_scale=DEFAULT_GUIDANCE_SCALE, negative_prompt=None, fps=DEFAULT_FRAME_RATE,
                  frame_rate=DEFAULT_FRAME_RATE, dtype="bfloat16"),
    size_rule="height and width multiples of 32 (up to 2048), 8k+1 frames (up to 481)",
    example="Lightricks/LTX-2.5",
    settings=(
        Setting("return_audio", "--audio", "generate the audio track and mux it into the mp4 (--no-audio: video only, "
                "the audio VAE and vocoder are skipped)", None),
        Setting("decoder", "--decoder", "the video decoder: the VAE's convolutional one or LTX-2.5's diffusion VAE "
                "decoder (a diffusion_decoder/ folder)", str, DECODERS),
    ),
    presets=lambda: PRESETS,
    demos=(Demo("ltx-2.5", ("t2v", "i2v"), _write_demo, _demo_settings, lambda task: "ltx-2.5-demo",
                note="LTX-2.5-style (audio-video transformer with gated attention and prompt AdaLN, Gemma 4 text "
                     "tower, BWE vocoder: the mp4 carries a 48 kHz stereo track unless --no-audio)"),
           Demo("ltx-2.5-diffusion-decoder", ("t2v",), _write_demo, _diffusion_decoder_demo_settings,
                lambda task: "ltx-2.5-diffusion-decoder-demo",
                note="LTX-2.5-style, the frames decoded by the diffusion VAE decoder (--decoder diffusion: one x0 "
                     "step of a denoiser conditioned on the latents) instead of the convolutional one")),
    folder_tasks=_tasks,
    plan=Plan(architecture=_architecture, plan=_plan),
    inspect=_inspect,
    convert=_convert,
    check=_check,
    resolve=_resolve,
    claims_folder=_claims,
    fps_setting="frame_rate",
)
