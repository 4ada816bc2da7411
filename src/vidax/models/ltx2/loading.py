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
    """Load one component of a diffusers LTX-2 folder.

    Args:
      folder: the pipeline folder (``model_index.json`` and the subfolders).
      name: one of :data:`COMPONENTS`.
      dtype: weight dtype (``float32`` or ``bfloat16``; the loaders keep their float32-pinned leaves: AdaLN tables,
        embedders, norm scales, latent statistics). The vocoder is always float32.
      kw: passed to the component's loader: ``parts`` for ``vae`` / ``audio_vae`` (default: the decoder's parts;
        None: all), ``load_params`` keywords (e.g. ``shardings``) for the text encoder, connectors and transformer.

    Returns:
      ``(params, cfg)``.

    Raises:
      CheckpointError: a missing folder or ``config.json``, or weights that do not match the configuration.
      ValueError: an unknown ``name``, an unsupported configuration.
    """
    if name not in COMPONENTS:
        raise ValueError(f"name must be one of {COMPONENTS}, got {name!r}")
    sub = _folder(folder, name)
    dtype = np.dtype(dtype)
    if name == "text_encoder":
        from vidax.encoders.gemma import load_gemma
        return load_gemma(sub, dtype, **kw)
    if name == "connectors":
        from vidax.models.ltx2.connectors import load_connectors
        return load_connectors(sub, dtype, **kw)
    if name == "transformer":
        from vidax.models.ltx2.keymap import load_transformer
        return load_transformer(sub, dtype, **kw)
    if name == "vae":
        from vidax.models.ltx2 import vae
        cfg, params = vae.load_vae(sub, dtype, kw.pop("parts", vae.DECODER_PARTS))
        return params, cfg
    if name == "audio_vae":
        from vidax.models.ltx2 import audio_vae
        cfg, params = audio_vae.load_audio_vae(sub, dtype, kw.pop("parts", audio_vae.DECODER_PARTS))
        return params, cfg
    if name == "vocoder":
        from vidax.models.ltx2.vocoder import load_vocoder
        cfg, params = load_vocoder(sub)
        return params, cfg
    from vidax.models.ltx2 import diffusion_decoder  # landed by its own branch
    return diffusion_decoder.load_diffusion_decoder(sub, dtype, **kw)


def load_tokenizer(folder: str | Path):
    """The Gemma tokenizer of ``folder/tokenizer`` (:class:`vidax.encoders.gemma_tokenizer.GemmaTokenizer`).

    Raises:
      FileNotFoundError: no ``tokenizer.json``. CheckpointError: an unreadable one.
    """
    from vidax.encoders.gemma_tokenizer import GemmaTokenizer

    return GemmaTokenizer.from_folder(_folder(folder, "tokenizer"))


def scheduler_config(folder: str | Path) -> dict:
    """``scheduler/scheduler_config.json`` as a dict ({} when the folder has none: the scheduler's defaults).

    Raises:
      CheckpointError: a file that is not a JSON object.
    """
    path = Path(folder) / "scheduler" / "scheduler_config.json"
    return read_json(path) if path.is_file() else {}


def text_encoder_model_type(folder: str | Path) -> str | None:
    """``text_encoder/config.json``'s ``model_type`` (``gemma4_unified`` for LTX-2.5), None when absent."""
    path = Path(folder) / "text_encoder" / "config.json"
    return read_json(path).get("model_type") if path.is_file() else None
