"""Cosmos3 checkpoint folders: which layout, where each component is, and the pipeline's own settings.

Two layouts:

* ``"diffusers"``: the release as published (``nvidia/Cosmos3-Nano``; written by diffusers'
  ``scripts/convert_cosmos3_to_diffusers.py --save-pipeline``)::

      model_index.json     _class_name Cosmos3OmniPipeline; default_use_system_prompt, use_native_flow_schedule
      transformer/         Cosmos3OmniTransformer (config.json + safetensors; the diffusers names, or the release's
                           ``model.``-prefixed language-model names, which the transformer's key map reads too)
      vae/                 AutoencoderKLWan (the Wan2.2 48-channel VAE of Wan2.2-TI2V-5B)
      text_tokenizer/      Qwen3-VL-8B-Instruct's tokenizer (tokenizer.json, tokenizer_config.json)
      scheduler/           UniPCMultistepScheduler (:mod:`vidax.models.cosmos3.schedule`)
      sound_tokenizer/     (optional; sound generation is not run by vidax and the folder is not read)

* ``"vidax"``: written by ``vidax convert`` (``vidax_index.json`` with ``family: cosmos3`` and the pipeline's
  settings, then the diffusers folder names; :mod:`vidax.models.cosmos3.convert`).

This module reads index and configuration files only (no weights, no JAX).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from vidax.checkpoint.errors import CheckpointError, excerpt
from vidax.checkpoint.writer import VIDAX_INDEX
from vidax.core.config_values import read_json

DIFFUSERS, VIDAX = "diffusers", "vidax"
PIPELINE_CLASS = "Cosmos3OmniPipeline"
FAMILY_NAME = "cosmos3"
EXAMPLE = "nvidia/Cosmos3-Nano"
#: The pipeline's registered settings (``Cosmos3OmniPipeline.__init__``) and their defaults.
PIPELINE_SETTINGS = {"default_use_system_prompt": True, "use_native_flow_schedule": False}


@dataclass(frozen=True)
class Cosmos3Checkpoint:
    """A resolved Cosmos3 folder (every path checked to exist).

    Attributes:
      folder: the checkpoint folder.
      layout: ``"diffusers"`` or ``"vidax"``.
      transformer, vae, text_tokenizer: the components' folders.
      scheduler: ``scheduler_config.json``.
      default_use_system_prompt: ``model_index.json``'s (the system prompt prepended unless a call says otherwise).
      use_native_flow_schedule: ``model_index.json``'s (the native flow grid instead of the config's).
    """

    folder: Path
    layout: str
    transformer: Path
    vae: Path
    text_tokenizer: Path
    scheduler: Path
    default_use_system_prompt: bool = True
    use_native_flow_schedule: bool = False

    @property
    def tasks(self) -> tuple[str, ...]:
        return ("t2v", "i2v")

    def scheduler_config(self) -> dict:
        return read_json(self.scheduler)


def _need(paths: list[Path], folder: Path, what: str) -> None:
    missing = [str(p.relative_to(folder)) for p in paths if not p.exists()]
    if missing:
        raise CheckpointError(f"{folder}: {what} is missing {', '.join(missing)}; download it again (or run "
                              "`vidax convert` again for a converted folder)")


def _settings(index: dict, path: Path) -> dict:
    out = {}
    for key, default in PIPELINE_SETTINGS.items():
        value = index.get(key, default)
        if not isinstance(value, bool):
            raise CheckpointError(f"{path}: {key} must be true or false, got {excerpt(value)}")
        out[key] = value
    return out


def _components(folder: Path, layout: str, settings: dict) -> Cosmos3Checkpoint:
    parts = ["transformer/config.json", "vae/config.json", "text_tokenizer", "scheduler/scheduler_config.json"]
    _need([folder / p for p in parts], folder, f"the {PIPELINE_CLASS} folder")
    return Cosmos3Checkpoint(folder, layout, folder / "transformer", folder / "vae", folder / "text_tokenizer",
                             folder / "scheduler" / "scheduler_config.json", **settings)


def is_cosmos3_folder(folder: Path) -> bool:
    """Whether ``folder`` declares itself a Cosmos3 folder (index files only)."""
    folder = Path(folder)
    try:
        if (folder / VIDAX_INDEX).is_file():
            return read_json(folder / VIDAX_INDEX).get("family") == FAMILY_NAME
        if (folder / "model_index.json").is_file():
            return read_json(folder / "model_index.json").get("_class_name") == PIPELINE_CLASS
    except CheckpointError:
        return False
    return False


def resolve_checkpoint(folder: str | os.PathLike) -> Cosmos3Checkpoint:
    """Check a Cosmos3 folder and return where everything is (reads index files only).

    Raises:
      CheckpointError: the folder is missing, is not a Cosmos3 folder (what it is said), lacks parts (all named,
        with the fix), or has pipeline settings that are not booleans.
    """
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: checkpoint folder not found")
    if (folder / VIDAX_INDEX).is_file():
        index = read_json(folder / VIDAX_INDEX)
        if index.get("format") != "vidax" or index.get("family") != FAMILY_NAME:
            raise CheckpointError(f"{folder / VIDAX_INDEX}: not a vidax-converted Cosmos3 checkpoint (format/family)")
        return _components(folder, VIDAX, _settings(index, folder / VIDAX_INDEX))
    if (folder / "model_index.json").is_file():
        index = read_json(folder / "model_index.json")
        name = index.get("_class_name")
        if name != PIPELINE_CLASS:
            raise CheckpointError(f"{folder / 'model_index.json'}: describes {name!r}, not {PIPELINE_CLASS}")
        return _components(folder, DIFFUSERS, _settings(index, folder / "model_index.json"))
    raise CheckpointError(f"{folder}: not a Cosmos3 folder: expected model_index.json (e.g. {EXAMPLE}) or "
                          "vidax_index.json")


def check_tokenizer(ckpt: Cosmos3Checkpoint) -> None:
    """The Qwen3-VL tokenizer present (``tokenizer.json``), checked before any weight is read.

    Raises:
      CheckpointError: the tokenizer missing, naming the folder and what it needs.
    """
    if not (ckpt.text_tokenizer / "tokenizer.json").is_file():
        raise CheckpointError(f"{ckpt.text_tokenizer}: the Qwen3-VL tokenizer is missing (no tokenizer.json); copy "
                              "Qwen/Qwen3-VL-8B-Instruct's tokenizer files into it")


__all__ = ["Cosmos3Checkpoint", "check_tokenizer", "is_cosmos3_folder", "resolve_checkpoint"]
