"""CogVideoX checkpoint folders (diffusers layout): which files hold which component.

The published CogVideoX checkpoints (``THUDM/CogVideoX-2b``, ``-5b``, ``-5b-I2V``,
``CogVideoX1.5-5B``, ``-I2V``) are diffusers folders::

    model_index.json            _class_name CogVideoXPipeline / CogVideoXImageToVideoPipeline
    transformer/                config.json + diffusion_pytorch_model*.safetensors
    vae/                        config.json + diffusion_pytorch_model*.safetensors
    text_encoder/               transformers T5EncoderModel (google t5-v1_1-xxl)
    tokenizer/                  T5 tokenizer (vidax reads tokenizer.json)
    scheduler/                  scheduler_config.json (CogVideoXDDIMScheduler)

:func:`resolve_checkpoint` checks that every part is there (naming each missing one) and
returns a :class:`CogVideoXCheckpoint` with the config readers and key maps to load them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.keymap import KeyMap
from vidax.encoders.t5 import T5Config, t5_keymap
from vidax.models.cogvideox.config import CogVideoXTransformerConfig, CogVideoXVAEConfig
from vidax.models.cogvideox.keymap import transformer_keymap, vae_keymap

PARTS = ("transformer", "vae", "text_encoder", "tokenizer", "scheduler")
#: ``model_index.json`` classes of CogVideoX folders (the transformer config tells T2V from I2V).
PIPELINE_CLASSES = ("CogVideoXPipeline", "CogVideoXImageToVideoPipeline", "CogVideoXVideoToVideoPipeline")


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return data


@dataclass(frozen=True)
class CogVideoXCheckpoint:
    """A resolved CogVideoX diffusers folder (every path exists).

    Attributes:
      folder: the checkpoint folder.
      pipeline_class: ``model_index.json``'s ``_class_name``.
    """

    folder: Path
    pipeline_class: str

    def part(self, name: str) -> Path:
        return self.folder / name

    def transformer_config(self) -> CogVideoXTransformerConfig:
        return CogVideoXTransformerConfig.from_dict(_read_json(self.folder / "transformer" / "config.json"))

    def vae_config(self) -> CogVideoXVAEConfig:
        return CogVideoXVAEConfig.from_dict(_read_json(self.folder / "vae" / "config.json"))

    def text_encoder_config(self) -> T5Config:
        return T5Config.from_dict(_read_json(self.folder / "text_encoder" / "config.json"))

    def scheduler_config(self) -> dict:
        return _read_json(self.folder / "scheduler" / "scheduler_config.json")

    def reader(self, part: str):
        """A :class:`~vidax.checkpoint.safetensors_io.CheckpointReader` over one component's weights."""
        from vidax.checkpoint.safetensors_io import CheckpointReader

        return CheckpointReader(self.folder / part)

    @staticmethod
    def transformer_keymap(cfg: CogVideoXTransformerConfig) -> KeyMap:
        return transformer_keymap(cfg)

    @staticmethod
    def vae_keymap(cfg: CogVideoXVAEConfig) -> KeyMap:
        return vae_keymap(cfg)

    @staticmethod
    def text_encoder_keymap(cfg: T5Config, keys=None) -> KeyMap:
        return t5_keymap(cfg, keys)


def resolve_checkpoint(folder: str | os.PathLike) -> CogVideoXCheckpoint:
    """Check a CogVideoX diffusers folder and return where everything is.

    Raises:
      CheckpointError: the folder is missing; it has no ``model_index.json`` or one for another
        pipeline; parts, ``config.json`` files or ``scheduler_config.json`` are missing (all named).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: checkpoint folder not found")
    index = folder / "model_index.json"
    if not index.is_file():
        if (folder / "config.json").is_file():
            raise CheckpointError(f"{folder}: this is a single component folder; pass the pipeline folder that holds it "
                                  "(with model_index.json)")
        raise CheckpointError(f"{folder}: no model_index.json; pass a diffusers-layout CogVideoX checkpoint folder "
                              "(e.g. THUDM/CogVideoX-5b)")
    name = _read_json(index).get("_class_name")
    if name not in PIPELINE_CLASSES:
        raise CheckpointError(f"{folder}: model_index.json describes {name!r}, not a CogVideoX pipeline "
                              f"({', '.join(PIPELINE_CLASSES)})")
    missing = [p for p in PARTS if not (folder / p).is_dir()]
    if missing:
        raise CheckpointError(f"{folder}: checkpoint is missing its {', '.join(missing)} folder(s); re-download them")
    absent = [str(folder / p / "config.json") for p in ("transformer", "vae", "text_encoder")
              if not (folder / p / "config.json").is_file()]
    if not (folder / "scheduler" / "scheduler_config.json").is_file():
        absent.append(str(folder / "scheduler" / "scheduler_config.json"))
    if absent:
        raise CheckpointError(f"{folder}: missing {', '.join(absent)}")
    return CogVideoXCheckpoint(folder=folder, pipeline_class=name)
