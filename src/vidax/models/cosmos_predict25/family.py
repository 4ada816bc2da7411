"""The Cosmos-Predict2.5 family's record for the registry (:mod:`vidax.models.registry`): text-, image- and
video-to-world (2B and 14B), from diffusers folders, the original release and vidax-converted folders.

Only index and configuration files are read here; the pipeline, inspection and conversion are imported when used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vidax.core import arg_types
from vidax.models.cosmos_predict25.presets import DEFAULT_NEGATIVE_PROMPT, PRESETS, VARIANTS
from vidax.models.registry import Demo, Family, Plan, Setting

TEMPORAL, MULTIPLE = 4, 16  # the Wan2.1 VAE compresses time 4x and space 8x; the transformer's patch is 2x2
#: The most latent frames / rows / columns the transformer's RoPE covers (``max_size`` (128, 240, 240) latent
#: units; the reference fails beyond).
MAX_LATENT = (128, 240, 240)
#: The conditioning frames an input video gives: its last ``4 (n - 1) + 1`` pixel frames for ``n`` latent frames.
MAX_CONDITIONAL_FRAMES = 2
PIPELINE = "vidax.models.cosmos_predict25.pipeline:CosmosPredict25Pipeline"


def _checkpoint(folder: Path, call: dict | None = None):
    from vidax.models.cosmos_predict25.layout import resolve_checkpoint

    return resolve_checkpoint(folder, variant=(call or {}).get("variant"))


def _tasks(folder: Path) -> tuple[str, ...]:
    return _checkpoint(folder).tasks


def conditioning_frames(num_latent_conditional_frames: int) -> int:
    """Pixel frames of an input video that condition ``num_latent_conditional_frames`` latent frames
    (``4 (n - 1) + 1``, as the reference extracts them)."""
    return TEMPORAL * (num_latent_conditional_frames - 1) + 1


def check_sizes(height: Any, width: Any, num_frames: Any) -> None:
    """Sizes the model runs: ``num_frames = 4k + 1`` up to 509 (128 latent frames), height and width positive
    multiples of 16 up to 1920 (the RoPE's 240 latent rows and columns).

    Raises:
      ValueError: every problem, with the nearest valid values.
    """
    from vidax.core.inputs import check_video_sizes

    check_video_sizes(height, width, num_frames, temporal=TEMPORAL, multiple=MULTIPLE, release_frames=93,
                      why=" (the VAE's 8x compression and the transformer's 2x2 patches)")
    limits = (("num_frames", num_frames, TEMPORAL * (MAX_LATENT[0] - 1) + 1), ("height", height, 8 * MAX_LATENT[1]),
              ("width", width, 8 * MAX_LATENT[2]))
    over = [f"{name}={v} is over the {top} the transformer's position table covers" for name, v, top in limits
            if v is not None and v > top]
    if over:
        raise ValueError("; ".join(over))


def check_conditioning(task: str, video: Any, num_latent_conditional_frames: Any, num_frames: Any = None) -> None:
    """The conditioning a video-to-world call needs: ``num_latent_conditional_frames`` 1 or 2, an input video of at
    least ``4 (n - 1) + 1`` frames, and (``num_frames`` given) at least ``n`` latent frames to generate.

    Raises:
      ValueError: another count, a video too short (its length and the need named), a video shorter than its
        conditioning.
    """
    n = num_latent_conditional_frames
    if n is not None and (isinstance(n, bool) or n not in range(1, MAX_CONDITIONAL_FRAMES + 1)):
        raise ValueError(f"num_latent_conditional_frames must be 1 or 2 (latent frames taken from the input video), "
                         f"got {n!r}")
    from vidax.core.inputs import is_integer

    latent = (int(num_frames) - 1) // TEMPORAL + 1 if is_integer(num_frames) and num_frames >= 1 else None
    if task == "v2v" and latent is not None and (n or MAX_CONDITIONAL_FRAMES) > latent:
        raise ValueError(f"{n or MAX_CONDITIONAL_FRAMES} conditional latent frames for a {num_frames}-frame video "
                         f"({latent} latent frame(s)): generate more frames, or pass --conditional-frames 1")
    if task == "v2v" and video is not None:
        need = conditioning_frames(n or MAX_CONDITIONAL_FRAMES)
        if len(video) < need:
            raise ValueError(f"the input video has {len(video)} frame(s); video-to-world with "
                             f"{n or MAX_CONDITIONAL_FRAMES} conditional latent frame(s) needs at least {need} "
                             "(pass a longer clip, or --conditional-frames 1)")


def _check(folder: Path, task: str, call: dict) -> None:
    from vidax.models.cosmos_predict25.layout import check_tokenizer

    check_sizes(call.get("height"), call.get("width"), call["num_frames"])
    n = call.get("num_latent_conditional_frames")
    if n is not None and task != "v2v":  # (the pipeline ignores it, as the reference, without a video)
        raise ValueError("--conditional-frames sets how many latent frames of an input video condition the start: "
                         "pass --video too, or leave it out")
    check_conditioning(task, call.get("video"), n, call["num_frames"])
    check_tokenizer(_checkpoint(folder, call))


def _resolve(folder: Path, task: str, preset: Any, given: dict, call: dict) -> dict:
    """An original release's step count: its sampler takes ``num_steps + 1`` steps on the Karras grid, so the
    release's 35 steps are diffusers' 36 (diffusers' default); without flags or a preset, 35 for the release (and
    for its converted folder, which keeps the variant)."""
    ckpt = _checkpoint(folder, call)
    if preset is None and "num_inference_steps" not in given and ckpt.variant is not None:
        call["num_inference_steps"] = 35
    return call


def _inspect(path: Path, variant: str | None = None) -> list[str]:
    from vidax.models.cosmos_predict25.inspection import inspect_checkpoint

    return inspect_checkpoint(path, variant=variant)


def _convert(src: Path, dst: Path, *, variant: str | None = None, **dtypes) -> dict:
    from vidax.models.cosmos_predict25.convert import convert_checkpoint

    return convert_checkpoint(src, dst, variant=variant, **dtypes)


def _claims(folder: Path) -> bool:
    """An original-release folder (``base/post-trained/*.pt`` or ``base/pre-trained/*.pt``)."""
    from vidax.models.cosmos_predict25.layout import original_transformers

    return bool(original_transformers(folder))


def _architecture(preset: Any, folder: Path | None):
    from vidax.models.cosmos_predict25.planner import folder_architecture, preset_architecture

    return folder_architecture(folder) if folder is not None else preset_architecture(preset)


def _plan(architecture, *, guided: bool = True, model: str | None = None, call: dict | None = None, **kw):
    """The registry's planner call (:func:`vidax.models.cosmos_predict25.planner.plan_cosmos_predict25`); ``guided``
    is ``guidance_scale > 1`` (a batch of two per step); a video-to-world run's settings (``call``) add the VAE
    encode of its conditioning frames."""
    from vidax.models.cosmos_predict25.planner import plan_cosmos_predict25

    call = call or {}
    frames = (conditioning_frames(call.get("num_latent_conditional_frames") or MAX_CONDITIONAL_FRAMES)
              if call.get("video") is not None else 0)
    return plan_cosmos_predict25(architecture, guided=guided, model_name=model, conditioning_frames=frames, **kw)


def _write_demo(folder: Path, task: str) -> Path:
    from vidax.models.cosmos_predict25.demo import write_demo_checkpoint

    return write_demo_checkpoint(folder)


def _demo_settings(task: str) -> dict[str, Any]:
    return dict(height=64, width=64, num_frames=9, num_inference_steps=4, guidance_scale=7.0, dtype="float32")


FAMILY = Family(
    name="cosmos-predict2.5",
    display="Cosmos-Predict2.5",
    diffusers_classes=("Cosmos2_5_PredictBasePipeline",),
    vidax_name="cosmos-predict2.5",
    tasks={"t2v": PIPELINE, "i2v": PIPELINE, "v2v": PIPELINE},
    # diffusers Cosmos2_5_PredictBasePipeline's defaults (36 steps: the release's 35 on its n+1-point grid) at the
    # release's 16 fps.
    defaults=dict(height=704, width=1280, num_frames=93, num_inference_steps=36, guidance_scale=7.0,
                  negative_prompt=DEFAULT_NEGATIVE_PROMPT, fps=16, dtype="bfloat16"),
    size_rule="height and width multiples of 16 (up to 1920), 4k+1 frames (up to 509)",
    example="nvidia/Cosmos-Predict2.5-2B (revision diffusers/base/post-trained)",
    settings=(
        Setting("num_latent_conditional_frames", "--conditional-frames", "video-to-world: latent frames taken from "
                "the end of --video (1: its last frame, 2: its last 5 frames; default 2)", arg_types.positive_int,
                metavar="N"),
        Setting("variant", "--variant", "Cosmos-Predict2.5 original release: the base/<variant> transformer to run "
                "(default: post-trained)", str, choices=tuple(VARIANTS), metavar="VARIANT", at_load=True),
    ),
    presets=lambda: PRESETS,
    demos=(Demo("cosmos-predict2.5", ("t2v", "i2v", "v2v"), _write_demo, _demo_settings,
                lambda task: "cosmos-predict2.5-demo",
                note="Cosmos-Predict2.5-style (AdaLN-LoRA DiT over all Qwen2.5-VL layers' states; image- and "
                     "video-to-world: the input's latent frames replace the first ones)"),),
    folder_tasks=_tasks,
    inspect=_inspect,
    convert=_convert,
    claims_folder=_claims,
    check=_check,
    resolve=_resolve,
    plan=Plan(architecture=_architecture, plan=_plan),
    video_keep_last=conditioning_frames(MAX_CONDITIONAL_FRAMES),
)
