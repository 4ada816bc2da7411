"""Loading the components of an LTX-2 / LTX-2.5 diffusers folder (the subfolders ``LTX2Pipeline.save_pretrained``
writes: ``text_encoder``, ``tokenizer``, ``connectors``, ``transformer``, ``vae``, ``audio_vae``, ``vocoder``,
``scheduler``).

One entry point per kind, every one returning ``(params, cfg)`` (the component loaders' own orders differ: the VAEs
and the vocoder return ``(cfg, params)``), strict as those loaders are (every missing, unexpected or misshapen tensor
listed). The layout-aware resolver (diffusers / release single file / converted) will sit in front of this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from vidax.checkpoint.errors import CheckpointError
from vidax.core.config_values import read_json

#: The component names :func:`load_component` takes (``diffusion_decoder`` is loaded by its own module).
COMPONENTS = ("text_encoder", "connectors", "transformer", "vae", "audio_vae", "vocoder", "diffusion_decoder")


def _folder(folder: str | Path, name: str) -> Path:
    root = Path(folder)
    if not root.is_dir():
        raise CheckpointError(f"{root}: not a folder (an LTX-2 diffusers folder holds one subfolder per component)")
    sub = root / name
    if not (sub / "config.json").is_file() and name != "tokenizer":
        raise CheckpointError(f"{sub}: no config.json (the LTX-2 folder lacks its {name!r} component)")
    return sub


def load_component(folder: str | Path, name: str, dtype: Any = np.float32, **kw) -> tuple[Any, Any]:
    """Load one component of an LTX-2 checkpoint of any layout (diffusers folder, release single file beside its
    Gemma folder, vidax-converted folder): :meth:`vidax.models.ltx2.layout.LTX2Checkpoint.load`.

    Args:
      folder: the checkpoint folder.
      name: one of :data:`COMPONENTS`.
      dtype: weight dtype (``float32`` or ``bfloat16``; the loaders keep their float32-pinned leaves). The vocoder is
        always float32.
      kw: ``parts`` for ``vae`` / ``audio_vae`` (default: the decoder's parts; None: all), ``load_params`` keywords.

    Returns:
      ``(params, cfg)``.

    Raises:
      CheckpointError: a missing component, or weights that do not match the configuration.
      ValueError: an unknown ``name``, an unsupported configuration.
    """
    from vidax.models.ltx2.layout import resolve_checkpoint

    if name not in COMPONENTS:
        raise ValueError(f"name must be one of {COMPONENTS}, got {name!r}")
    return resolve_checkpoint(folder).load(name, np.dtype(dtype), **kw)


def load_tokenizer(folder: str | Path):
    """The checkpoint's Gemma tokenizer (:class:`vidax.encoders.gemma_tokenizer.GemmaTokenizer`).

    Raises:
      CheckpointError: no ``tokenizer.json``, or an unreadable one.
    """
    from vidax.models.ltx2.layout import resolve_checkpoint

    return resolve_checkpoint(folder).tokenizer()


def scheduler_config(folder: str | Path) -> dict:
    """The checkpoint's ``FlowMatchEulerDiscreteScheduler`` config (a release file's: diffusers' converter's).

    Raises:
      CheckpointError: a file that is not a JSON object.
    """
    from vidax.models.ltx2.layout import resolve_checkpoint

    return dict(resolve_checkpoint(folder).scheduler_config)


def text_encoder_model_type(folder: str | Path) -> str | None:
    """The text encoder's ``config.json`` ``model_type`` (``gemma4_unified`` for LTX-2.5), None when absent."""
    from vidax.models.ltx2.layout import resolve_checkpoint

    path = resolve_checkpoint(folder).folders.get("text_encoder", Path(folder) / "text_encoder") / "config.json"
    return read_json(path).get("model_type") if path.is_file() else None
