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

  A distilled (few-step) folder (``nvidia/Cosmos3-Super-Text2Image-4Step``, ``-Image2Video-4Step``; diffusers 0.42.1
  ``modular_pipelines/cosmos``, ``Cosmos3DistilledModularPipeline``) has the same components with a
  ``FlowMatchEulerDiscreteScheduler`` and a ``modular_model_index.json`` (``_blocks_class_name``
  ``Cosmos3DistilledBlocks``, ``is_distilled: true``, ``distilled_sigmas``: the fixed schedule, one sigma per step),
  with or without a ``model_index.json``. A ``modular_model_index.json`` without ``is_distilled`` (the base releases
  carry one for the modular pipeline) changes nothing.

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
MODULAR_INDEX = "modular_model_index.json"
#: ``modular_model_index.json``'s pipeline classes and the distilled blocks (diffusers 0.42.1 ``modular_pipelines``).
MODULAR_CLASSES = ("Cosmos3OmniModularPipeline", "Cosmos3DistilledModularPipeline")
DISTILLED_BLOCKS = "Cosmos3DistilledBlocks"
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
      distilled_sigmas: a distilled folder's fixed schedule (``modular_model_index.json``'s ``distilled_sigmas``),
        else None.
    """

    folder: Path
    layout: str
    transformer: Path
    vae: Path
    text_tokenizer: Path
    scheduler: Path
    default_use_system_prompt: bool = True
    use_native_flow_schedule: bool = False
    distilled_sigmas: tuple[float, ...] | None = None

    @property
    def is_distilled(self) -> bool:
        """A distilled checkpoint: Euler on :attr:`distilled_sigmas`, guidance baked into the weights."""
        return self.distilled_sigmas is not None

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


def _is_modular_cosmos3(index: dict) -> bool:
    return index.get("_class_name") in MODULAR_CLASSES or index.get("_blocks_class_name") == DISTILLED_BLOCKS


def _distilled(index: dict, path: Path) -> tuple[float, ...] | None:
    """``distilled_sigmas`` of a distilled ``modular_model_index.json`` (``is_distilled``: default true for the
    distilled blocks, as their config spec), else None."""
    from vidax.models.cosmos3.schedule import check_distilled_sigmas

    flag = index.get("is_distilled", index.get("_blocks_class_name") == DISTILLED_BLOCKS)
    if not isinstance(flag, bool):
        raise CheckpointError(f"{path}: is_distilled must be true or false, got {excerpt(flag)}")
    if not flag:
        return None
    if not index.get("distilled_sigmas"):
        raise CheckpointError(f"{path}: a distilled Cosmos3 folder needs distilled_sigmas (its fixed schedule), as "
                              "diffusers' Cosmos3DistilledSetTimestepsStep does; download the folder again")
    try:
        return check_distilled_sigmas(index["distilled_sigmas"])
    except ValueError as e:
        raise CheckpointError(f"{path}: {e}") from None


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
        if (folder / MODULAR_INDEX).is_file():
            return _is_modular_cosmos3(read_json(folder / MODULAR_INDEX))
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
        settings = _settings(index, folder / VIDAX_INDEX)
        if index.get("distilled_sigmas") is not None:
            settings["distilled_sigmas"] = _distilled({"is_distilled": True, **index}, folder / VIDAX_INDEX)
        return _components(folder, VIDAX, settings)
    modular = None
    if (folder / MODULAR_INDEX).is_file():
        modular = read_json(folder / MODULAR_INDEX)
        if not _is_modular_cosmos3(modular):
            modular = None
    if (folder / "model_index.json").is_file():
        index = read_json(folder / "model_index.json")
        name = index.get("_class_name")
        if name != PIPELINE_CLASS:
            raise CheckpointError(f"{folder / 'model_index.json'}: describes {name!r}, not {PIPELINE_CLASS}")
        settings = _settings(index, folder / "model_index.json")
        if modular is not None:
            settings["distilled_sigmas"] = _distilled(modular, folder / MODULAR_INDEX)
        return _components(folder, DIFFUSERS, settings)
    if modular is not None:
        settings = _settings(modular, folder / MODULAR_INDEX)
        settings["distilled_sigmas"] = _distilled(modular, folder / MODULAR_INDEX)
        return _components(folder, DIFFUSERS, settings)
    raise CheckpointError(f"{folder}: not a Cosmos3 folder: expected model_index.json (e.g. {EXAMPLE}), a distilled "
                          f"folder's {MODULAR_INDEX} or vidax_index.json")


def check_tokenizer(ckpt: Cosmos3Checkpoint) -> None:
    """The Qwen3-VL tokenizer present (``tokenizer.json``), checked before any weight is read.

    Raises:
      CheckpointError: the tokenizer missing, naming the folder and what it needs.
    """
    if not (ckpt.text_tokenizer / "tokenizer.json").is_file():
        raise CheckpointError(f"{ckpt.text_tokenizer}: the Qwen3-VL tokenizer is missing (no tokenizer.json); copy "
                              "Qwen/Qwen3-VL-8B-Instruct's tokenizer files into it")


__all__ = ["Cosmos3Checkpoint", "DISTILLED_BLOCKS", "MODULAR_INDEX", "check_tokenizer", "is_cosmos3_folder",
           "resolve_checkpoint"]
