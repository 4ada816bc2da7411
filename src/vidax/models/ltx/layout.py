"""LTX-Video checkpoint folders (diffusers layout): which files hold which component.

The published diffusers checkpoints (``Lightricks/LTX-Video`` 0.9.0 - 0.9.5 and the 0.9.7 / 0.9.8
diffusers folders) are::

    model_index.json            _class_name LTXPipeline, LTXImageToVideoPipeline or LTXConditionPipeline
    transformer/                config.json + diffusion_pytorch_model*.safetensors
    vae/                        config.json + diffusion_pytorch_model*.safetensors
    text_encoder/               transformers T5EncoderModel (google t5-v1_1-xxl)
    tokenizer/                  T5 tokenizer (tokenizer.json or spiece.model)
    scheduler/                  scheduler_config.json (FlowMatchEulerDiscreteScheduler)

The pipeline class decides the sampling semantics (:mod:`vidax.models.ltx.pipeline`): ``LTXPipeline``
and ``LTXImageToVideoPipeline`` sample on the dynamically shifted schedule with grid RoPE coordinates,
``LTXConditionPipeline`` (0.9.5+) on its linear-quadratic schedule with causal pixel coordinates.
:func:`resolve_checkpoint` checks that every part is there (naming each missing one).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from vidax.checkpoint.errors import CheckpointError
from vidax.encoders.t5 import T5Config, t5_keymap
from vidax.models.ltx.config import LTXVideoTransformerConfig

PARTS = ("transformer", "vae", "text_encoder", "tokenizer", "scheduler")
#: ``model_index.json`` classes of LTX-Video folders.
PIPELINE_CLASSES = ("LTXPipeline", "LTXImageToVideoPipeline", "LTXConditionPipeline")


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return data


@dataclass(frozen=True)
class LTXCheckpoint:
    """A resolved LTX-Video folder (every path exists).

    Attributes:
      folder: the checkpoint folder.
      pipeline_class: ``model_index.json``'s ``_class_name``.
    """

    folder: Path
    pipeline_class: str

    def part(self, name: str) -> Path:
        return self.folder / name

    def transformer_config(self) -> LTXVideoTransformerConfig:
        return LTXVideoTransformerConfig.from_dict(_read_json(self.folder / "transformer" / "config.json"))

    def vae_config(self):
        from vidax.models.ltx.vae import LTXVideoVAEConfig

        return LTXVideoVAEConfig.from_dict(_read_json(self.folder / "vae" / "config.json"))

    def text_encoder_config(self) -> T5Config:
        return T5Config.from_dict(_read_json(self.folder / "text_encoder" / "config.json"))

    def scheduler_config(self) -> dict:
        return _read_json(self.folder / "scheduler" / "scheduler_config.json")

    def reader(self, part: str):
        """A :class:`~vidax.checkpoint.safetensors_io.CheckpointReader` over one component's weights."""
        from vidax.checkpoint.safetensors_io import CheckpointReader

        return CheckpointReader(self.folder / part)

    def transformer_keymap(self, cfg: LTXVideoTransformerConfig):
        from vidax.models.ltx.keymap import transformer_keymap

        return transformer_keymap(cfg)

    def vae_keymap(self, cfg):
        from vidax.models.ltx.vae import vae_keymap

        return vae_keymap(cfg)

    def text_encoder_keymap(self, cfg: T5Config, keys=None):
        return t5_keymap(cfg, keys)


def resolve_checkpoint(folder: str | os.PathLike) -> LTXCheckpoint:
    """Check an LTX-Video diffusers folder and return where everything is.

    Raises:
      CheckpointError: the folder is missing; it has no ``model_index.json`` or one for another pipeline;
        parts, ``config.json`` files or ``scheduler_config.json`` are missing (all named).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: checkpoint folder not found")
    index = folder / "model_index.json"
    if not index.is_file():
        if (folder / "config.json").is_file():
            raise CheckpointError(f"{folder}: this is a single component folder; pass the pipeline folder that holds it "
                                  "(with model_index.json)")
        raise CheckpointError(f"{folder}: no model_index.json; pass a diffusers-layout LTX-Video checkpoint folder "
                              "(e.g. Lightricks/LTX-Video)")
    name = _read_json(index).get("_class_name")
    if name not in PIPELINE_CLASSES:
        raise CheckpointError(f"{folder}: model_index.json describes {name!r}, not an LTX-Video pipeline "
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
    return LTXCheckpoint(folder=folder, pipeline_class=name)


def is_ltx_folder(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` holds an LTX-Video checkpoint (``model_index.json`` naming an LTX pipeline); reads only
    that file."""
    index = Path(folder) / "model_index.json"
    try:
        return index.is_file() and _read_json(index).get("_class_name") in PIPELINE_CLASSES
    except CheckpointError:
        return False
