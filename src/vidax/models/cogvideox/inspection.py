"""``vidax inspect`` for CogVideoX folders: the model, its layout, and per component what the files hold."""

from __future__ import annotations

import os
from pathlib import Path

from vidax.checkpoint.inspect import component_lines
from vidax.encoders.t5 import t5_specs
from vidax.models.cogvideox import vae as cvae
from vidax.models.cogvideox.layout import resolve_checkpoint
from vidax.models.cogvideox.transformer import transformer_specs


def inspect_checkpoint(path: str | os.PathLike) -> list[str]:
    """Describe a CogVideoX checkpoint folder (diffusers or vidax layout), reading headers only.

    Returns:
      report lines: the pipeline class and layout, the transformer's size, and per component its tensors,
      the keys our maps do not know and whether the maps fill the model exactly.

    Raises:
      CheckpointError: see :func:`vidax.models.cogvideox.layout.resolve_checkpoint`.
    """
    ckpt = resolve_checkpoint(Path(path))
    tcfg, vcfg, ecfg = ckpt.transformer_config(), ckpt.vae_config(), ckpt.text_encoder_config()
    positions = "3D RoPE" if tcfg.use_rotary_positional_embeddings else "3D sin-cos positions"
    lines = [f"{path}: CogVideoX {ckpt.pipeline_class}, {ckpt.layout} layout",
             f"  transformer: {tcfg.num_layers} blocks, {tcfg.num_attention_heads} heads x {tcfg.attention_head_dim}, "
             f"{positions}" + (f", temporal patch {tcfg.patch_size_t}" if tcfg.patch_size_t else "")]
    lines += component_lines("transformer", ckpt.reader("transformer"), ckpt.transformer_keymap(tcfg),
                             transformer_specs(tcfg), str(ckpt.part("transformer")))
    lines += component_lines("vae", ckpt.reader("vae"), ckpt.vae_keymap(vcfg), cvae.vae_specs(vcfg), str(ckpt.part("vae")))
    ereader = ckpt.reader("text_encoder")
    lines += component_lines("text_encoder", ereader, ckpt.text_encoder_keymap(ecfg, ereader.keys()), t5_specs(ecfg),
                             str(ckpt.part("text_encoder")))
    lines.append(f"tokenizer: {ckpt.part('tokenizer')}")
    return lines
