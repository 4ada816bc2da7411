"""``vidax convert`` for LTX-2.5: a diffusers folder, a release single file (with its Gemma folder) or a converted
folder, into the vidax layout::

    vidax_index.json     format vidax, family ltx2, pipeline_class, model_version, dtypes, sizes, source
    text_encoder/        params.safetensors (every parameter under its tree path, layers stacked) + config.json
    connectors/ transformer/ vae/ audio_vae/ vocoder/    the same (config.json: the diffusers configuration;
                         a release file's is its metadata translated)
    tokenizer/           the tokenizer files, copied
    scheduler/           scheduler_config.json
    diffusion_decoder/   (when present) copied as it is: a diffusers folder, or the release diffusion VAE file
                         (read by ``vidax.models.ltx2.diffusion_decoder``)

Everything is checked before anything is written; the output is assembled under a temporary name and renamed into
place when complete. The parameters are bit-identical to what the source loads at the same dtypes.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.writer import VIDAX_INDEX, assembled_folder, write_component, write_json

FAMILY = "ltx2"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                   "chat_template.jinja", "chat_template.json")


def _dtypes(dtype, text_encoder_dtype, vae_dtype) -> dict[str, Any]:
    import numpy as np

    from vidax.core.inputs import check_dtype

    dtype = check_dtype(dtype)
    text = check_dtype(text_encoder_dtype if text_encoder_dtype is not None else "float32", "text_encoder_dtype")
    vae = check_dtype(vae_dtype, "vae_dtype")
    return {"text_encoder": text, "connectors": dtype, "transformer": dtype, "vae": vae, "audio_vae": vae,
            "vocoder": np.dtype(np.float32)}


def convert_checkpoint(src: str | os.PathLike, dst: str | os.PathLike, *, dtype: Any = "bfloat16",
                       vae_dtype: Any = "float32", text_encoder_dtype: Any = None) -> dict:
    """Translate an LTX-2 folder into the vidax layout at ``dst`` (see the module docstring).

    Args:
      src: the source folder (:func:`vidax.models.ltx2.layout.resolve_checkpoint`).
      dst: the output folder; must not exist.
      dtype: the transformer's and connectors' weights (``"bfloat16"`` or ``"float32"``; AdaLN tables, embedders
        and norm scales stay float32).
      vae_dtype: the video and audio VAEs' weights.
      text_encoder_dtype: the Gemma text tower's weights (default float32). The vocoder is always float32.

    Returns:
      a summary: ``format``, ``version``, ``family``, ``pipeline_class``, ``source``, ``source_layout``,
      ``model_version``, ``dtypes`` and ``bytes`` per component, ``seconds``.

    Raises:
      FileExistsError: ``dst`` exists.
      ValueError: an unsupported dtype or configuration.
      CheckpointError: the source is incomplete, its tokenizer missing, or weights that do not match their
        configuration (all named).
      OSError: writing ``dst`` failed (the partial output is removed).
    """
    from vidax.models.ltx2.layout import COMPONENTS, resolve_checkpoint

    t0 = time.perf_counter()
    dtypes = _dtypes(dtype, text_encoder_dtype, vae_dtype)
    if Path(dst).exists():
        raise FileExistsError(f"{dst} exists; choose a new output folder")
    ckpt = resolve_checkpoint(src)
    ckpt.tokenizer()  # present and readable
    names = [n for n in COMPONENTS if n != "diffusion_decoder"
             and (n in ckpt.folders or ckpt.layout == "release" and (n not in ("audio_vae", "vocoder")
                                                                      or ckpt.has_audio))]
    sources = {n: ckpt.source(n) for n in names}  # every configuration checked before anything is written
    from vidax.checkpoint.loader import plan_load

    checks = list(sources.values()) + ([ckpt.source("diffusion_decoder")] if ckpt.has_diffusion_decoder else [])
    for s in checks:  # (the diffusion decoder too, though it is copied as it is)
        plan_load(s.reader, s.keymap, s.specs, source=s.source)
    with assembled_folder(dst) as tmp:
        sizes = {}
        for name, s in sources.items():
            sizes[name] = write_component(tmp / name, s.reader, s.keymap, s.specs, dtypes[name], s.config, s.source)
        (tmp / "tokenizer").mkdir()
        for f in TOKENIZER_FILES:
            if (ckpt.folders["tokenizer"] / f).is_file():
                shutil.copy2(ckpt.folders["tokenizer"] / f, tmp / "tokenizer" / f)
        (tmp / "scheduler").mkdir()
        write_json(tmp / "scheduler" / "scheduler_config.json", ckpt.scheduler_config)
        if ckpt.has_diffusion_decoder:
            where = ckpt.folders["diffusion_decoder"]
            if where.is_file():  # a release diffusion VAE file: kept as it is, with its metadata
                (tmp / "diffusion_decoder").mkdir()
                shutil.copy2(where, tmp / "diffusion_decoder" / where.name)
            else:
                shutil.copytree(where, tmp / "diffusion_decoder")
        summary = {
            "format": "vidax", "version": 1, "family": FAMILY, "pipeline_class": ckpt.pipeline_class,
            "source": str(Path(src).resolve()), "source_layout": ckpt.layout,
            "model_version": ".".join(map(str, ckpt.version)) or None,
            "dtypes": {n: dtypes[n].name for n in sources}, "bytes": sizes,
            "diffusion_decoder": "copied unchanged" if ckpt.has_diffusion_decoder else None,
        }
        write_json(tmp / VIDAX_INDEX, summary)
    if not (Path(dst) / VIDAX_INDEX).is_file():
        raise CheckpointError(f"{dst}: the conversion did not complete")
    summary["seconds"] = time.perf_counter() - t0
    return summary
