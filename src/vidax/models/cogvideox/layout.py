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

``vidax convert`` writes a second layout, ``"vidax"`` (:mod:`vidax.models.cogvideox.convert`):
``vidax_index.json`` (``family: cogvideox``), each component's ``config.json`` (diffusers keys) and
``params.safetensors`` (our parameter names and layout, cast by the dtype policy), loaded with the
identity key maps: a plain copy.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.keymap import KeyMap, identity_keymap
from vidax.checkpoint.writer import VIDAX_INDEX, VIDAX_WEIGHTS
from vidax.encoders.t5 import T5Config, t5_keymap, t5_specs
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


DIFFUSERS, VIDAX = "diffusers", "vidax"


@dataclass(frozen=True)
class CogVideoXCheckpoint:
    """A resolved CogVideoX folder (every path exists).

    Attributes:
      folder: the checkpoint folder.
      pipeline_class: ``model_index.json``'s ``_class_name`` (the vidax layout keeps it in its index).
      layout: ``"diffusers"`` or ``"vidax"`` (converted).
    """

    folder: Path
    pipeline_class: str
    layout: str = DIFFUSERS

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

        return CheckpointReader(self.folder / part / VIDAX_WEIGHTS if self.layout == VIDAX else self.folder / part)

    def transformer_keymap(self, cfg: CogVideoXTransformerConfig) -> KeyMap:
        from vidax.models.cogvideox.transformer import transformer_specs

        return identity_keymap(transformer_specs(cfg)) if self.layout == VIDAX else transformer_keymap(cfg)

    def vae_keymap(self, cfg: CogVideoXVAEConfig) -> KeyMap:
        from vidax.models.cogvideox.vae import vae_specs

        return identity_keymap(vae_specs(cfg)) if self.layout == VIDAX else vae_keymap(cfg)

    def text_encoder_keymap(self, cfg: T5Config, keys=None) -> KeyMap:
        return identity_keymap(t5_specs(cfg)) if self.layout == VIDAX else t5_keymap(cfg, keys)


def resolve_checkpoint(folder: str | os.PathLike) -> CogVideoXCheckpoint:
    """Check a CogVideoX diffusers folder and return where everything is.

    Raises:
      CheckpointError: the folder is missing; it has no ``model_index.json`` or one for another
        pipeline; parts, ``config.json`` files or ``scheduler_config.json`` are missing (all named).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: checkpoint folder not found")
    if (folder / VIDAX_INDEX).is_file():
        return _resolve_vidax(folder)
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


def _resolve_vidax(folder: Path) -> CogVideoXCheckpoint:
    index = _read_json(folder / VIDAX_INDEX)
    if index.get("format") != "vidax" or index.get("family") != "cogvideox":
        raise CheckpointError(f"{folder / VIDAX_INDEX}: not a vidax-converted CogVideoX checkpoint (format/family)")
    missing = [f"{part}/{name}" for part in ("transformer", "vae", "text_encoder") for name in ("config.json", VIDAX_WEIGHTS)
               if not (folder / part / name).is_file()]
    missing += [p for p in ("tokenizer", "scheduler/scheduler_config.json") if not (folder / p).exists()]
    if missing:
        raise CheckpointError(f"{folder}: converted CogVideoX folder is missing {', '.join(missing)}; "
                              "run `vidax convert` again")
    return CogVideoXCheckpoint(folder=folder, pipeline_class=index.get("pipeline_class", "CogVideoXPipeline"),
                               layout=VIDAX)


def is_cogvideox_folder(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` holds a CogVideoX checkpoint (``model_index.json`` naming a CogVideoX pipeline, or a
    vidax-converted one); reads only those index files."""
    folder = Path(folder)
    try:
        if (folder / VIDAX_INDEX).is_file():
            return _read_json(folder / VIDAX_INDEX).get("family") == "cogvideox"
        if (folder / "model_index.json").is_file():
            return str(_read_json(folder / "model_index.json").get("_class_name", "")).startswith("CogVideoX")
    except CheckpointError:
        return False
    return False
