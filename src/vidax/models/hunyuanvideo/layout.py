"""HunyuanVideo checkpoint folders: which layout, which task, where each component is.

Three layouts:

* ``"diffusers"`` (``hunyuanvideo-community/HunyuanVideo``, ``.../HunyuanVideo-I2V``)::

      model_index.json     _class_name HunyuanVideoPipeline | HunyuanVideoImageToVideoPipeline
      transformer/         HunyuanVideoTransformer3DModel (config.json + safetensors)
      vae/                 AutoencoderKLHunyuanVideo
      text_encoder/        LlamaModel (T2V) | LlavaForConditionalGeneration (I2V)
      tokenizer/           the Llama-3 tokenizer (tokenizer.json)
      text_encoder_2/      CLIPTextModel (openai/clip-vit-large-patch14)
      tokenizer_2/         the CLIP tokenizer
      scheduler/           FlowMatchEulerDiscreteScheduler (scheduler_config.json; shift 7.0)
      image_processor/     I2V only: CLIPImageProcessor (preprocessor_config.json)

* ``"original"``: the release of Tencent-Hunyuan/HunyuanVideo (``huggingface-cli download tencent/HunyuanVideo``),
  the ``ckpts`` folder::

      hunyuan-video-t2v-720p/transformers/mp_rank_00_model_states.pt   {"module": state dict}
      hunyuan-video-t2v-720p/vae/config.json, pytorch_model.pt
      text_encoder/        the LLaVA-Llama-3-8B language model (preprocess_text_encoder_tokenizer_utils.py), with its
                           tokenizer files beside the weights
      text_encoder_2/      openai/clip-vit-large-patch14 (CLIPModel or CLIPTextModel), with its tokenizer files

  (the I2V release: ``hunyuan-video-i2v-720p/...`` and ``text_encoder_i2v/``, the whole LLaVA model);

* ``"vidax"``: written by ``vidax convert`` (``vidax_index.json``, each component's ``config.json`` and
  ``params.safetensors`` in our names).

This module reads index and configuration files only (no weights, no JAX).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.writer import VIDAX_INDEX
from vidax.core.config_values import read_json

DIFFUSERS, ORIGINAL, VIDAX = "diffusers", "original", "vidax"
T2V_CLASS, I2V_CLASS = "HunyuanVideoPipeline", "HunyuanVideoImageToVideoPipeline"
PIPELINE_CLASSES = (T2V_CLASS, I2V_CLASS)
EXAMPLE = "hunyuanvideo-community/HunyuanVideo"
#: The original release's model folders, by task.
ORIGINAL_MODELS = {"t2v": "hunyuan-video-t2v-720p", "i2v": "hunyuan-video-i2v-720p"}
ORIGINAL_TRANSFORMER = "transformers/mp_rank_00_model_states.pt"


@dataclass(frozen=True)
class HunyuanVideoCheckpoint:
    """A resolved HunyuanVideo folder (every path checked to exist).

    Attributes:
      folder: the checkpoint folder (the ``ckpts`` folder for the original release).
      layout: ``"diffusers"``, ``"original"`` or ``"vidax"``.
      task: ``"t2v"`` or ``"i2v"``.
      transformer: the transformer's folder (diffusers, vidax) or ``mp_rank_00_model_states.pt`` (original).
      vae: the VAE's folder (``config.json`` + weights).
      text_encoder: the Llama (T2V) or LLaVA (I2V) folder.
      tokenizer: the folder of the Llama tokenizer (``tokenizer/``; the original keeps it in ``text_encoder/``).
      text_encoder_2, tokenizer_2: the CLIP text model's folder and its tokenizer's.
      scheduler: ``scheduler_config.json``, or None (original: the release's settings are used).
      image_processor: the I2V image processor's folder (``preprocessor_config.json``), or None.
    """

    folder: Path
    layout: str
    task: str
    transformer: Path
    vae: Path
    text_encoder: Path
    tokenizer: Path
    text_encoder_2: Path
    tokenizer_2: Path
    scheduler: Path | None
    image_processor: Path | None

    @property
    def pipeline_class(self) -> str:
        return I2V_CLASS if self.task == "i2v" else T2V_CLASS

    def transformer_config(self):
        """The transformer's configuration (``config.json``; the original release's from its weights' shapes)."""
        from vidax.models.hunyuanvideo import config as hcfg

        if self.layout == ORIGINAL:
            from vidax.models.hunyuanvideo.keymap import original_transformer_config

            return original_transformer_config(self.transformer, task=self.task)
        return hcfg.HunyuanVideoTransformerConfig.from_dict(read_json(self.transformer / "config.json"))

    def vae_config(self):
        """The VAE's configuration (``vae/config.json``)."""
        from vidax.models.hunyuanvideo.vae import HunyuanVideoVAEConfig

        config = read_json(self.vae / "config.json")
        if config.get("_class_name") == "AutoencoderKLCausal3D":  # the original release's
            return HunyuanVideoVAEConfig.from_original_dict(config)
        return HunyuanVideoVAEConfig.from_dict(config)

    def scheduler_config(self) -> dict:
        """``scheduler_config.json`` as a dict; the original release: its flow-matching settings (shift 7.0)."""
        if self.scheduler is None:
            return {"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000, "shift": 7.0}
        return read_json(self.scheduler)


def _need(paths: list[Path], folder: Path, what: str) -> None:
    missing = [str(p.relative_to(folder)) if p.is_relative_to(folder) else str(p) for p in paths if not p.exists()]
    if missing:
        raise CheckpointError(f"{folder}: {what} is missing {', '.join(missing)}; download it again (or run "
                              "`vidax convert` again for a converted folder)")


def _diffusers(folder: Path, name: str) -> HunyuanVideoCheckpoint:
    task = "i2v" if name == I2V_CLASS else "t2v"
    parts = ["transformer/config.json", "vae/config.json", "text_encoder/config.json", "tokenizer",
             "text_encoder_2/config.json", "tokenizer_2", "scheduler/scheduler_config.json"]
    if task == "i2v":
        parts.append("image_processor")
    _need([folder / p for p in parts], folder, f"the diffusers {name} folder")
    return HunyuanVideoCheckpoint(folder, DIFFUSERS, task, folder / "transformer", folder / "vae",
                                  folder / "text_encoder", folder / "tokenizer", folder / "text_encoder_2",
                                  folder / "tokenizer_2", folder / "scheduler" / "scheduler_config.json",
                                  folder / "image_processor" if task == "i2v" else None)


def _vidax(folder: Path) -> HunyuanVideoCheckpoint:
    index = read_json(folder / VIDAX_INDEX)
    if index.get("format") != "vidax" or index.get("family") != "hunyuanvideo":
        raise CheckpointError(f"{folder / VIDAX_INDEX}: not a vidax-converted HunyuanVideo checkpoint (format/family)")
    name = index.get("pipeline_class", T2V_CLASS)
    if name not in PIPELINE_CLASSES:
        raise CheckpointError(f"{folder / VIDAX_INDEX}: pipeline_class {name!r} is not one of {PIPELINE_CLASSES}")
    ckpt = _diffusers(folder, name)
    return HunyuanVideoCheckpoint(**{**ckpt.__dict__, "layout": VIDAX})


def original_task(folder: Path) -> str | None:
    """``"t2v"`` / ``"i2v"`` if ``folder`` holds the original release's transformer file, else None."""
    for task, model in ORIGINAL_MODELS.items():
        if (folder / model / ORIGINAL_TRANSFORMER).is_file():
            return task
    return None


def _original(folder: Path, task: str) -> HunyuanVideoCheckpoint:
    model = folder / ORIGINAL_MODELS[task]
    text = folder / ("text_encoder_i2v" if task == "i2v" else "text_encoder")
    parts = [model / ORIGINAL_TRANSFORMER, model / "vae" / "config.json", model / "vae" / "pytorch_model.pt",
             text / "config.json", folder / "text_encoder_2" / "config.json"]
    _need(parts, folder, f"the original HunyuanVideo {task.upper()} release")
    return HunyuanVideoCheckpoint(folder, ORIGINAL, task, model / ORIGINAL_TRANSFORMER, model / "vae", text, text,
                                  folder / "text_encoder_2", folder / "text_encoder_2", None,
                                  text if task == "i2v" else None)


def resolve_checkpoint(folder: str | os.PathLike) -> HunyuanVideoCheckpoint:
    """Check a HunyuanVideo folder of any layout and return where everything is (reads index files only).

    Raises:
      CheckpointError: the folder is missing, is not a HunyuanVideo folder (what it is said), or lacks parts (all
        named, with the fix).
    """
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: checkpoint folder not found")
    if (folder / VIDAX_INDEX).is_file():
        return _vidax(folder)
    if (folder / "model_index.json").is_file():
        name = read_json(folder / "model_index.json").get("_class_name")
        if name not in PIPELINE_CLASSES:
            raise CheckpointError(f"{folder / 'model_index.json'}: describes {name!r}, not a HunyuanVideo pipeline "
                                  f"({', '.join(PIPELINE_CLASSES)})")
        return _diffusers(folder, name)
    task = original_task(folder)
    if task is None:
        raise CheckpointError(f"{folder}: not a HunyuanVideo folder: expected model_index.json (e.g. {EXAMPLE}), "
                              f"vidax_index.json, or the original release's {ORIGINAL_MODELS['t2v']}/"
                              f"{ORIGINAL_TRANSFORMER}")
    return _original(folder, task)


def check_tokenizers(ckpt: HunyuanVideoCheckpoint) -> None:
    """Both tokenizers present (``tokenizer.json``; the CLIP one may be ``vocab.json`` + ``merges.txt``), checked
    before any weight is read.

    Raises:
      CheckpointError: a tokenizer missing, naming the folder and what it needs.
    """
    llama = ckpt.tokenizer / "tokenizer.json"
    if not llama.is_file():
        raise CheckpointError(f"{ckpt.tokenizer}: the Llama text encoder's tokenizer is missing (no tokenizer.json); "
                              "copy the tokenizer of the text encoder's release (e.g. xtuner/llava-llama-3-8b-v1_1-"
                              "transformers) into it")
    clip = ckpt.tokenizer_2
    bpe = (clip / "vocab.json").is_file() and (clip / "merges.txt").is_file()
    if not ((clip / "tokenizer.json").is_file() or bpe):
        raise CheckpointError(f"{clip}: the CLIP text encoder's tokenizer is missing (tokenizer.json, or vocab.json "
                              "and merges.txt); copy openai/clip-vit-large-patch14's tokenizer files into it")
