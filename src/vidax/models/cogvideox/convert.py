"""``vidax convert`` for CogVideoX: translate a checkpoint once, load it later as a plain copy.

The output folder (:mod:`vidax.models.cogvideox.layout`, layout ``"vidax"``)::

    vidax_index.json                  {"format": "vidax", "family": "cogvideox", "pipeline_class": ...}
    transformer/config.json           the source's (diffusers keys)
    transformer/params.safetensors    tensors named by parameter path, e.g. "blocks/attn1/to_q/kernel"
    vae/..., text_encoder/...         the same
    tokenizer/, scheduler/            copied from the source

Loading it needs no renaming and no transposes, and gives exactly the parameters loading the
source gives (the transformer cast to ``dtype`` on the way: the 2B model's fp16 weights become bf16
once, here).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from vidax.checkpoint.writer import assembled_folder, write_component, write_json
from vidax.encoders.t5 import t5_specs
from vidax.models.cogvideox import vae as cvae
from vidax.models.cogvideox.layout import VIDAX_INDEX, resolve_checkpoint
from vidax.models.cogvideox.transformer import transformer_specs


def convert_checkpoint(src: str | os.PathLike, dst: str | os.PathLike, *, dtype: Any = "bfloat16",
                       text_encoder_dtype: Any = "float32", vae_dtype: Any = "float32") -> dict:
    """Translate a CogVideoX diffusers folder (T2V or I2V, 1.0 or 1.5) into the vidax layout at ``dst``.

    Args:
      src: the diffusers-layout folder.
      dst: the output folder; must not exist. Assembled under a temporary name beside it and renamed
        when complete.
      dtype: transformer weight dtype; its fp32-pinned leaves (norms, embedders, AdaLN projections) stay fp32.
      text_encoder_dtype, vae_dtype: dtypes of those components (fp32 by default, as the pipelines).

    Returns:
      a summary: source layout, model class, seconds, bytes written per component.

    Raises:
      CheckpointError: the source is incomplete or does not match its configuration.
      FileExistsError: ``dst`` exists.
    """
    t0 = time.perf_counter()
    if Path(dst).exists():
        raise FileExistsError(f"{dst} exists; choose a new output folder")
    ckpt = resolve_checkpoint(src)
    with assembled_folder(dst) as tmp:
        tcfg, vcfg, ecfg = ckpt.transformer_config(), ckpt.vae_config(), ckpt.text_encoder_config()
        configs = {p: json.loads((ckpt.part(p) / "config.json").read_text())
                   for p in ("transformer", "vae", "text_encoder")}
        ereader = ckpt.reader("text_encoder")
        sizes = {
            "transformer": write_component(tmp / "transformer", ckpt.reader("transformer"), ckpt.transformer_keymap(tcfg),
                                           transformer_specs(tcfg), dtype, configs["transformer"],
                                           str(ckpt.part("transformer"))),
            "vae": write_component(tmp / "vae", ckpt.reader("vae"), ckpt.vae_keymap(vcfg), cvae.vae_specs(vcfg),
                                   vae_dtype, configs["vae"], str(ckpt.part("vae"))),
            "text_encoder": write_component(tmp / "text_encoder", ereader, ckpt.text_encoder_keymap(ecfg, ereader.keys()),
                                            t5_specs(ecfg), text_encoder_dtype, configs["text_encoder"],
                                            str(ckpt.part("text_encoder"))),
        }
        shutil.copytree(ckpt.part("tokenizer"), tmp / "tokenizer")
        shutil.copytree(ckpt.part("scheduler"), tmp / "scheduler")
        summary = {
            "format": "vidax", "version": 1, "family": "cogvideox", "pipeline_class": ckpt.pipeline_class,
            "model": f"CogVideoX ({ckpt.pipeline_class})", "source": str(Path(src).resolve()),
            "source_layout": ckpt.layout,
            "dtypes": {"transformer": str(np.dtype(dtype)), "vae": str(np.dtype(vae_dtype)),
                       "text_encoder": str(np.dtype(text_encoder_dtype))},
            "bytes": sizes,
        }
        write_json(tmp / VIDAX_INDEX, summary)
    summary["seconds"] = time.perf_counter() - t0
    return summary
