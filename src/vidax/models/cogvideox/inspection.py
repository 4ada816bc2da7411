"""``vidax inspect`` for CogVideoX folders: the model, its layout, and per component what the files hold."""

from __future__ import annotations

import os

from vidax.models import t5_folder
from vidax.models.cogvideox.layout import resolve_checkpoint


def inspect_checkpoint(path: str | os.PathLike) -> list[str]:
    """Describe a CogVideoX checkpoint folder (diffusers or vidax layout), reading headers only.

    Returns:
      report lines (:func:`vidax.models.t5_folder.inspect_lines`).

    Raises:
      CheckpointError: see :func:`vidax.models.cogvideox.layout.resolve_checkpoint`.
    """
    ckpt = resolve_checkpoint(path)
    try:
        tcfg = ckpt.transformer_config()
    except ValueError as e:  # the transformer's lines say so (inspect exits 1)
        return t5_folder.inspect_lines(ckpt, f"unreadable configuration ({e})")
    positions = "3D RoPE" if tcfg.use_rotary_positional_embeddings else "3D sin-cos positions"
    summary = (f"{tcfg.num_layers} blocks, {tcfg.num_attention_heads} heads x {tcfg.attention_head_dim}, {positions}"
               + (f", temporal patch {tcfg.patch_size_t}" if tcfg.patch_size_t else ""))
    return t5_folder.inspect_lines(ckpt, summary)
