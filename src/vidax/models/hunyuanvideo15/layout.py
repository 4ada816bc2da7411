"""HunyuanVideo-1.5 checkpoint folders: which layout, which task and transformer variant, where each component is.

Three layouts:

* ``"diffusers"`` (``hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_t2v`` and its siblings)::

      model_index.json     _class_name HunyuanVideo15Pipeline | HunyuanVideo15ImageToVideoPipeline
      transformer/         HunyuanVideo15Transformer3DModel (config.json + safetensors)
      vae/                 AutoencoderKLHunyuanVideo15
      text_encoder/        Qwen2_5_VLTextModel           tokenizer/    Qwen2Tokenizer
      text_encoder_2/      T5EncoderModel (Glyph byT5)    tokenizer_2/  ByT5Tokenizer (+ colour and font tokens)
      scheduler/           FlowMatchEulerDiscreteScheduler (its shift is the variant's)
      guider/              ClassifierFreeGuidance (its guidance_scale is the variant's)
      image_encoder/       I2V only: SiglipVisionModel    feature_extractor/  SiglipImageProcessor

* ``"original"``: the official release (``hf download tencent/HunyuanVideo-1.5 --local-dir ckpts`` plus the encoders
  its ``checkpoints-download.md`` fetches), the ``ckpts`` folder::

      transformer/<variant>/    config.json + diffusion_pytorch_model*.safetensors, one folder per variant
                                (480p_t2v, 720p_i2v, 480p_t2v_distilled, 480p_i2v_step_distilled, ...)
      vae/                      config.json + diffusion_pytorch_model.safetensors
      scheduler/                scheduler_config.json (optional: the variant's shift is known)
      text_encoder/llm/         Qwen/Qwen2.5-VL-7B-Instruct (the whole model; its tokenizer beside it)
      text_encoder/byt5-small/  google/byt5-small (config and tokenizer)
      text_encoder/Glyph-SDXL-v2/checkpoints/byt5_model.pt   the glyph weights applied over byt5-small
      text_encoder/Glyph-SDXL-v2/assets/                     color_idx.json, multilingual_10-lang_idx.json
      vision_encoder/siglip/    black-forest-labs/FLUX.1-Redux-dev (image_encoder/, feature_extractor/): I2V only

  One folder holds every variant; the run names the one it takes (``variant``, e.g. from a preset), and the task
  follows from it.

* ``"vidax"``: written by ``vidax convert`` (``vidax_index.json``, then the diffusers folder names).

This module reads index and configuration files only (no weights, no JAX).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.writer import VIDAX_INDEX
from vidax.core.config_values import read_json
from vidax.models.hunyuanvideo15.presets import VARIANTS

DIFFUSERS, ORIGINAL, VIDAX = "diffusers", "original", "vidax"
T2V_CLASS, I2V_CLASS = "HunyuanVideo15Pipeline", "HunyuanVideo15ImageToVideoPipeline"
PIPELINE_CLASSES = (T2V_CLASS, I2V_CLASS)
EXAMPLE = "hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_t2v"
#: The official release's files that mark its folder.
ORIGINAL_TRANSFORMERS = "transformer"
ORIGINAL_VAE = "vae/config.json"
GLYPH_WEIGHTS = "text_encoder/Glyph-SDXL-v2/checkpoints/byt5_model.pt"
GLYPH_ASSETS = "text_encoder/Glyph-SDXL-v2/assets"
#: The default variant per task, when an official-release folder is run without one.
DEFAULT_VARIANT = {"t2v": "720p_t2v", "i2v": "720p_i2v"}


@dataclass(frozen=True)
class HunyuanVideo15Checkpoint:
    """A resolved HunyuanVideo-1.5 folder (every path checked to exist).

    Attributes:
      folder: the checkpoint folder (the ``ckpts`` folder for the official release).
      layout: ``"diffusers"``, ``"original"`` or ``"vidax"``.
      task: ``"t2v"`` or ``"i2v"``.
      variant: the release's transformer variant (``"480p_t2v"``; :data:`~vidax.models.hunyuanvideo15.presets.
        VARIANTS`), or None for a diffusers folder (which holds one transformer and does not say which).
      transformer: the transformer's folder (``config.json`` + safetensors).
      vae: the VAE's folder.
      text_encoder, tokenizer: the Qwen2.5-VL language model's folder and its tokenizer's (the same folder in the
        official release).
      text_encoder_2, tokenizer_2: the byT5 encoder's folder and its tokenizer's (official release: byt5-small).
      glyph_weights: official release only: Glyph-SDXL-v2's ``byt5_model.pt`` (applied over byt5-small); else None.
      glyph_assets: official release only: the colour and font token lists of Glyph-SDXL-v2; else None.
      scheduler: ``scheduler_config.json``, or None (the variant's shift is used).
      guider: ``guider/guider_config.json``, or None (the variant's guidance scale is used).
      image_encoder, feature_extractor: I2V: the SigLIP vision model's folder and its image processor's; else None.
    """

    folder: Path
    layout: str
    task: str
    variant: str | None
    transformer: Path
    vae: Path
    text_encoder: Path
    tokenizer: Path
    text_encoder_2: Path
    tokenizer_2: Path
    glyph_weights: Path | None
    glyph_assets: Path | None
    scheduler: Path | None
    guider: Path | None
    image_encoder: Path | None
    feature_extractor: Path | None

    @property
    def pipeline_class(self) -> str:
        return I2V_CLASS if self.task == "i2v" else T2V_CLASS

    def scheduler_config(self) -> dict:
        """``scheduler_config.json`` as a dict; without one, the variant's flow-matching settings."""
        if self.scheduler is None:
            shift = VARIANTS[self.variant or DEFAULT_VARIANT[self.task]].flow_shift
            return {"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000, "shift": shift}
        return read_json(self.scheduler)

    def guider_config(self) -> dict:
        """``guider/guider_config.json`` as a dict; without one, the variant's guidance scale."""
        if self.guider is None:
            scale = VARIANTS[self.variant or DEFAULT_VARIANT[self.task]].guidance_scale
            return {"_class_name": "ClassifierFreeGuidance", "guidance_scale": scale}
        return read_json(self.guider)


def _need(paths: list[Path], folder: Path, what: str, fix: str = "download it again (or run `vidax convert` again "
          "for a converted folder)") -> None:
    missing = [str(p.relative_to(folder)) if p.is_relative_to(folder) else str(p) for p in paths if not p.exists()]
    if missing:
        raise CheckpointError(f"{folder}: {what} is missing {', '.join(missing)}; {fix}")


def _diffusers(folder: Path, name: str, layout: str = DIFFUSERS) -> HunyuanVideo15Checkpoint:
    task = "i2v" if name == I2V_CLASS else "t2v"
    parts = ["transformer/config.json", "vae/config.json", "text_encoder/config.json", "tokenizer",
             "text_encoder_2/config.json", "tokenizer_2", "scheduler/scheduler_config.json"]
    if task == "i2v":
        parts += ["image_encoder/config.json", "feature_extractor"]
    _need([folder / p for p in parts], folder, f"the diffusers {name} folder")
    guider = folder / "guider" / "guider_config.json"
    return HunyuanVideo15Checkpoint(
        folder, layout, task, None, folder / "transformer", folder / "vae", folder / "text_encoder",
        folder / "tokenizer", folder / "text_encoder_2", folder / "tokenizer_2", None, None,
        folder / "scheduler" / "scheduler_config.json", guider if guider.is_file() else None,
        folder / "image_encoder" if task == "i2v" else None, folder / "feature_extractor" if task == "i2v" else None)


def _vidax(folder: Path) -> HunyuanVideo15Checkpoint:
    index = read_json(folder / VIDAX_INDEX)
    if index.get("format") != "vidax" or index.get("family") != "hunyuanvideo-1.5":
        raise CheckpointError(f"{folder / VIDAX_INDEX}: not a vidax-converted HunyuanVideo-1.5 checkpoint "
                              "(format/family)")
    name = index.get("pipeline_class", T2V_CLASS)
    if name not in PIPELINE_CLASSES:
        raise CheckpointError(f"{folder / VIDAX_INDEX}: pipeline_class {name!r} is not one of {PIPELINE_CLASSES}")
    variant = index.get("variant")
    if variant is not None and variant not in VARIANTS:
        raise CheckpointError(f"{folder / VIDAX_INDEX}: variant {variant!r} is not one of {', '.join(VARIANTS)}")
    ckpt = _diffusers(folder, name, VIDAX)
    return HunyuanVideo15Checkpoint(**{**ckpt.__dict__, "variant": variant})


def original_variants(folder: Path) -> tuple[str, ...]:
    """The transformer variants an official-release folder holds (``transformer/<variant>/config.json``), in
    :data:`VARIANTS` order; () if ``folder`` is not an official-release folder (no ``vae/config.json`` beside a
    ``transformer/`` folder of variants)."""
    root = folder / ORIGINAL_TRANSFORMERS
    if not (root.is_dir() and (folder / ORIGINAL_VAE).is_file()) or (folder / "model_index.json").exists():
        return ()
    return tuple(v for v in VARIANTS if (root / v / "config.json").is_file())


def _image_encoder(folder: Path) -> tuple[Path, Path]:
    siglip = folder / "vision_encoder" / "siglip"
    # FLUX.1-Redux-dev keeps the model and its processor in subfolders (the release loads them with subfolder=).
    encoder = siglip / "image_encoder" if (siglip / "image_encoder").is_dir() else siglip
    processor = siglip / "feature_extractor" if (siglip / "feature_extractor").is_dir() else siglip
    return encoder, processor


def _original(folder: Path, variant: str | None, task: str | None) -> HunyuanVideo15Checkpoint:
    present = original_variants(folder)
    if variant is None:
        variant = DEFAULT_VARIANT[task or "t2v"]
        if variant not in present:
            candidates = [v for v in present if task is None or VARIANTS[v].task == task]
            if not candidates:
                which = f"{task.upper()} " if task else ""
                raise CheckpointError(
                    f"{folder / ORIGINAL_TRANSFORMERS}: no {which}transformer variant here (found: "
                    f"{', '.join(present) or 'none'}); download one, e.g. `hf download tencent/HunyuanVideo-1.5 "
                    f"--include 'transformer/{DEFAULT_VARIANT[task or 't2v']}/*'`")
            variant = candidates[0]
    elif variant not in VARIANTS:
        raise CheckpointError(f"variant {variant!r} is not a HunyuanVideo-1.5 transformer variant; expected one of "
                              f"{', '.join(VARIANTS)}")
    if variant not in present:
        raise CheckpointError(f"{folder / ORIGINAL_TRANSFORMERS / variant}: the {variant} transformer is not in this "
                              f"folder (found: {', '.join(present) or 'none'}); download it with `hf download "
                              f"tencent/HunyuanVideo-1.5 --include 'transformer/{variant}/*'` or choose one found")
    vtask = VARIANTS[variant].task
    if task is not None and task != vtask:
        raise CheckpointError(f"variant {variant} runs {vtask}, not {task}")
    text = folder / "text_encoder"
    parts = [folder / ORIGINAL_VAE, text / "llm" / "config.json", text / "byt5-small" / "config.json",
             folder / GLYPH_WEIGHTS, folder / GLYPH_ASSETS / "color_idx.json",
             folder / GLYPH_ASSETS / "multilingual_10-lang_idx.json"]
    encoder = processor = None
    if vtask == "i2v":
        encoder, processor = _image_encoder(folder)
        parts += [encoder / "config.json", processor]
    _need(parts, folder, f"the official HunyuanVideo-1.5 release ({variant})",
          "fetch the encoders as the release's checkpoints-download.md says (text_encoder/llm: "
          "Qwen/Qwen2.5-VL-7B-Instruct; text_encoder/byt5-small: google/byt5-small; text_encoder/Glyph-SDXL-v2: "
          "AI-ModelScope/Glyph-SDXL-v2; vision_encoder/siglip: black-forest-labs/FLUX.1-Redux-dev)")
    scheduler = folder / "scheduler" / "scheduler_config.json"
    return HunyuanVideo15Checkpoint(
        folder, ORIGINAL, vtask, variant, folder / ORIGINAL_TRANSFORMERS / variant, folder / "vae", text / "llm",
        text / "llm", text / "byt5-small", text / "byt5-small", folder / GLYPH_WEIGHTS, folder / GLYPH_ASSETS,
        scheduler if scheduler.is_file() else None, None, encoder, processor)


def resolve_checkpoint(folder: str | os.PathLike, variant: str | None = None,
                       task: str | None = None) -> HunyuanVideo15Checkpoint:
    """Check a HunyuanVideo-1.5 folder of any layout and return where everything is (reads index files only).

    Args:
      folder: the checkpoint folder.
      variant: the official release's transformer variant to run (None: the task's 720p variant, or the first
        present); a diffusers or converted folder holds one transformer and ignores it.
      task: ``"t2v"`` / ``"i2v"`` to pick among an official release's variants (None: from ``variant``).

    Raises:
      CheckpointError: the folder is missing, is not a HunyuanVideo-1.5 folder (what it is said), lacks parts (all
        named, with the fix), or lacks the variant asked for (those present named).
    """
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: checkpoint folder not found")
    if (folder / VIDAX_INDEX).is_file():
        return _vidax(folder)
    if (folder / "model_index.json").is_file():
        name = read_json(folder / "model_index.json").get("_class_name")
        if name not in PIPELINE_CLASSES:
            raise CheckpointError(f"{folder / 'model_index.json'}: describes {name!r}, not a HunyuanVideo-1.5 pipeline "
                                  f"({', '.join(PIPELINE_CLASSES)})")
        return _diffusers(folder, name)
    if not original_variants(folder):
        raise CheckpointError(f"{folder}: not a HunyuanVideo-1.5 folder: expected model_index.json (e.g. {EXAMPLE}), "
                              "vidax_index.json, or the official release's transformer/<variant>/config.json beside "
                              f"{ORIGINAL_VAE}")
    return _original(folder, variant, task)


def check_tokenizers(ckpt: HunyuanVideo15Checkpoint) -> None:
    """The Qwen2.5-VL tokenizer present (``tokenizer.json``), checked before any weight is read (the byT5 tokenizer
    is bytes and needs no vocabulary file).

    Raises:
      CheckpointError: the tokenizer missing, naming the folder and what it needs.
    """
    if not (ckpt.tokenizer / "tokenizer.json").is_file():
        raise CheckpointError(f"{ckpt.tokenizer}: the Qwen2.5-VL text encoder's tokenizer is missing (no "
                              "tokenizer.json); copy Qwen/Qwen2.5-VL-7B-Instruct's tokenizer files into it")
