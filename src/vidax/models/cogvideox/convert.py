"""``vidax convert`` for CogVideoX: translate a checkpoint once, load it later as a plain copy.

The output is the vidax layout of :mod:`vidax.models.t5_folder` (``vidax_index.json`` with ``family: cogvideox``,
``params.safetensors`` per component named by parameter path). Loading it needs no renaming and no transposes,
and gives exactly the parameters loading the source gives (the transformer cast to ``dtype`` on the way: the 2B
model's fp16 weights become bf16 once, here).
"""

from __future__ import annotations

import os
from typing import Any

from vidax.models import t5_folder
from vidax.models.cogvideox.layout import resolve_checkpoint


def convert_checkpoint(src: str | os.PathLike, dst: str | os.PathLike, *, dtype: Any = "bfloat16",
                       text_encoder_dtype: Any = "float32", vae_dtype: Any = "float32") -> dict:
    """Translate a CogVideoX diffusers folder (T2V or I2V, 1.0 or 1.5) into the vidax layout at ``dst``.

    Args and returns: see :func:`vidax.models.t5_folder.convert`.

    Raises:
      CheckpointError: the source is incomplete or does not match its configuration. FileExistsError: ``dst`` exists.
    """
    return t5_folder.convert(resolve_checkpoint(src), dst, dtype=dtype, text_encoder_dtype=text_encoder_dtype,
                             vae_dtype=vae_dtype)
