"""Cosmos-Predict2.5 checkpoint folders: which layout, which transformer, where each component is.

Three layouts:

* ``"diffusers"`` (a folder written by diffusers' ``scripts/convert_cosmos_to_diffusers.py --save_pipeline``, as the
  ``diffusers/base/post-trained`` revision of nvidia/Cosmos-Predict2.5-2B holds)::

      model_index.json     _class_name Cosmos2_5_PredictBasePipeline
      transformer/         CosmosTransformer3DModel (config.json + safetensors)
      vae/                 AutoencoderKLWan (the Wan2.1 VAE)
      text_encoder/        Qwen2_5_VLForConditionalGeneration (Cosmos-Reason1-7B)    tokenizer/  Qwen2.5-VL's
      scheduler/           UniPCMultistepScheduler (use_karras_sigmas, use_flow_sigmas, sigma_max 200, sigma_min 0.01)

  One pipeline runs text-, image- and video-to-world.

* ``"original"``: the release as published (``hf download nvidia/Cosmos-Predict2.5-2B``), plus the text encoder its
  code fetches (``hf download nvidia/Cosmos-Reason1-7B --local-dir <folder>/Cosmos-Reason1-7B``)::

      base/post-trained/<uuid>_ema_bf16.pt    the EMA transformer (``net.``-prefixed keys), one per variant
      base/pre-trained/<uuid>_ema_bf16.pt
      tokenizer.pth                           the Wan2.1 VAE (Wan2.1_VAE.pth; the 14B repository: copy the 2B's)
      Cosmos-Reason1-7B/                      the Qwen2.5-VL text encoder and its tokenizer (or text_encoder/)

  The run names the transformer it takes (``variant``: ``post-trained`` by default); its sampler is that
  checkpoint's experiment's (:data:`~vidax.models.cosmos_predict25.presets.VARIANTS`). The ``.pt`` files carry no
  configuration: the release is recognised by the weights' width and block count
  (:func:`vidax.models.cosmos_predict25.keymap.original_config`). A ``config.json`` beside a ``.pt``
  (:data:`ORIGINAL_CONFIG`; no release has one) gives the architecture instead, in diffusers'
  ``CosmosTransformer3DModel`` keys, with the original network's q/k-norm epsilon (1e-6) unless it sets
  ``qk_norm_eps``: a network of another size in the release's layout (vidax's tests write tiny ones).

* ``"vidax"``: written by ``vidax convert`` (``vidax_index.json``, then the diffusers folder names;
  :mod:`vidax.models.cosmos_predict25.convert`). A converted release keeps its ``variant`` in ``vidax_index.json``
  (the conditioning frames' timestep, the default step count) and its sampler in ``scheduler/``.

This module reads index and configuration files only (no weights, no JAX).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.writer import VIDAX_INDEX
from vidax.core.config_values import read_json
from vidax.models.cosmos_predict25.presets import CHECKPOINTS, VARIANTS

DIFFUSERS, ORIGINAL, VIDAX = "diffusers", "original", "vidax"
PIPELINE_CLASS = "Cosmos2_5_PredictBasePipeline"
EXAMPLE = "nvidia/Cosmos-Predict2.5-2B (revision diffusers/base/post-trained)"
ORIGINAL_VAE = "tokenizer.pth"
ORIGINAL_TEXT = ("Cosmos-Reason1-7B", "text_encoder")
#: An original-layout transformer's optional configuration, beside its ``.pt`` (not in the release; see above).
ORIGINAL_CONFIG = "config.json"
DEFAULT_VARIANT = "post-trained"
#: The scheduler of the diffusers folders (scripts/convert_cosmos_to_diffusers.py), for folders without one.
DIFFUSERS_SCHEDULER = {"_class_name": "UniPCMultistepScheduler", "use_karras_sigmas": True, "use_flow_sigmas": True,
                       "prediction_type": "flow_prediction", "sigma_max": 200.0, "sigma_min": 0.01}


@dataclass(frozen=True)
class CosmosPredict25Checkpoint:
    """A resolved Cosmos-Predict2.5 folder (every path checked to exist).

    Attributes:
      folder: the checkpoint folder.
      layout: ``"diffusers"``, ``"original"`` or ``"vidax"``.
      variant: the original release's ``post-trained`` / ``pre-trained`` (also kept by converted folders), or None
        for a diffusers folder.
      transformer: the transformer's folder (``config.json`` + safetensors), or the original ``.pt`` file.
      vae: the VAE's folder, or the original ``tokenizer.pth``.
      text_encoder, tokenizer: the Qwen2.5-VL model's folder and its tokenizer's (the same folder in the release).
      scheduler: ``scheduler_config.json``, or None (an original release: the variant's sampler).
      size: ``"2B"`` / ``"14B"`` where the file name tells (original release), else None.
    """

    folder: Path
    layout: str
    variant: str | None
    transformer: Path
    vae: Path
    text_encoder: Path
    tokenizer: Path
    scheduler: Path | None
    size: str | None = None

    @property
    def tasks(self) -> tuple[str, ...]:
        return ("t2v", "i2v", "v2v")

    def scheduler_config(self) -> dict:
        """``scheduler_config.json`` as a dict; None for an original release (its variant's sampler applies)."""
        return read_json(self.scheduler) if self.scheduler is not None else None


def _need(paths: list[Path], folder: Path, what: str, fix: str = "download it again (or run `vidax convert` again "
          "for a converted folder)") -> None:
    missing = [str(p.relative_to(folder)) if p.is_relative_to(folder) else str(p) for p in paths if not p.exists()]
    if missing:
        raise CheckpointError(f"{folder}: {what} is missing {', '.join(missing)}; {fix}")


def _diffusers(folder: Path, layout: str = DIFFUSERS, variant: str | None = None) -> CosmosPredict25Checkpoint:
    parts = ["transformer/config.json", "vae/config.json", "text_encoder/config.json", "tokenizer",
             "scheduler/scheduler_config.json"]
    _need([folder / p for p in parts], folder, f"the diffusers {PIPELINE_CLASS} folder")
    return CosmosPredict25Checkpoint(folder, layout, variant, folder / "transformer", folder / "vae",
                                     folder / "text_encoder", folder / "tokenizer",
                                     folder / "scheduler" / "scheduler_config.json")


def _vidax(folder: Path) -> CosmosPredict25Checkpoint:
    index = read_json(folder / VIDAX_INDEX)
    if index.get("format") != "vidax" or index.get("family") != "cosmos-predict2.5":
        raise CheckpointError(f"{folder / VIDAX_INDEX}: not a vidax-converted Cosmos-Predict2.5 checkpoint "
                              "(format/family)")
    variant = index.get("variant")
    if variant is not None and variant not in VARIANTS:
        raise CheckpointError(f"{folder / VIDAX_INDEX}: variant {variant!r} is not one of {', '.join(VARIANTS)}")
    return _diffusers(folder, VIDAX, variant)


def original_transformers(folder: Path) -> dict[str, Path]:
    """The release's transformer files by variant (``base/<variant>/*.pt``; the first in name order where a variant
    folder holds several); {} if ``folder`` is not an original-release folder."""
    if (folder / "model_index.json").exists() or (folder / VIDAX_INDEX).exists():
        return {}
    found = {}
    for name in VARIANTS:
        files = sorted((folder / "base" / name).glob("*.pt")) if (folder / "base" / name).is_dir() else []
        if files:
            found[name] = files[0]
    return found


def _original(folder: Path, variant: str | None) -> CosmosPredict25Checkpoint:
    present = original_transformers(folder)
    if variant is None:
        variant = DEFAULT_VARIANT if DEFAULT_VARIANT in present else next(iter(present))
    elif variant not in VARIANTS:
        raise CheckpointError(f"variant {variant!r} is not a Cosmos-Predict2.5 transformer; expected one of "
                              f"{', '.join(VARIANTS)}")
    if variant not in present:
        raise CheckpointError(f"{folder / 'base' / variant}: the {variant} transformer is not in this folder (found: "
                              f"{', '.join(present) or 'none'}); download it (`hf download nvidia/Cosmos-Predict2.5-2B "
                              f"--include 'base/{variant}/*'`) or choose one found")
    text = next((folder / t for t in ORIGINAL_TEXT if (folder / t).is_dir()), folder / ORIGINAL_TEXT[0])
    _need([folder / ORIGINAL_VAE, text / "config.json"], folder, f"the Cosmos-Predict2.5 release ({variant})",
          "the VAE is the release's tokenizer.pth (nvidia/Cosmos-Predict2.5-2B); the text encoder is "
          "nvidia/Cosmos-Reason1-7B: `hf download nvidia/Cosmos-Reason1-7B --local-dir "
          f"{folder / ORIGINAL_TEXT[0]}`")
    pt = present[variant]
    size = CHECKPOINTS.get(pt.name.split("_")[0], (None, None))[0]
    return CosmosPredict25Checkpoint(folder, ORIGINAL, variant, pt, folder / ORIGINAL_VAE, text, text, None, size)


def resolve_checkpoint(folder: str | os.PathLike, variant: str | None = None) -> CosmosPredict25Checkpoint:
    """Check a Cosmos-Predict2.5 folder of any layout and return where everything is (reads index files only).

    Args:
      folder: the checkpoint folder.
      variant: the original release's transformer (``post-trained`` / ``pre-trained``; None: post-trained if
        present); a diffusers or converted folder holds one transformer and ignores it.

    Raises:
      CheckpointError: the folder is missing, is not a Cosmos-Predict2.5 folder (what it is said), lacks parts (all
        named, with the fix), or lacks the variant asked for (those present named).
    """
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: checkpoint folder not found")
    if (folder / VIDAX_INDEX).is_file():
        return _vidax(folder)
    if (folder / "model_index.json").is_file():
        name = read_json(folder / "model_index.json").get("_class_name")
        if name != PIPELINE_CLASS:
            raise CheckpointError(f"{folder / 'model_index.json'}: describes {name!r}, not {PIPELINE_CLASS}")
        return _diffusers(folder)
    if not original_transformers(folder):
        raise CheckpointError(f"{folder}: not a Cosmos-Predict2.5 folder: expected model_index.json (e.g. {EXAMPLE}), "
                              "vidax_index.json, or the release's base/post-trained/*.pt beside tokenizer.pth")
    return _original(folder, variant)


def check_tokenizer(ckpt: CosmosPredict25Checkpoint) -> None:
    """The Qwen2.5-VL tokenizer present (``tokenizer.json``), checked before any weight is read.

    Raises:
      CheckpointError: the tokenizer missing, naming the folder and what it needs.
    """
    if not (ckpt.tokenizer / "tokenizer.json").is_file():
        raise CheckpointError(f"{ckpt.tokenizer}: the Qwen2.5-VL tokenizer is missing (no tokenizer.json); copy "
                              "Qwen/Qwen2.5-VL-7B-Instruct's tokenizer files into it")
