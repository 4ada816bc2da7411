"""LTX-Video checkpoint folders (diffusers layout, or vidax-converted): which files hold which component.

The published diffusers checkpoints (``Lightricks/LTX-Video`` 0.9.0 - 0.9.5 and the 0.9.7 / 0.9.8 diffusers
folders) have the T5-conditioned families' shape (:mod:`vidax.models.t5_folder`: ``model_index.json``,
``transformer/``, ``vae/``, ``text_encoder/``, ``tokenizer/``, ``scheduler/``); ``vidax convert`` writes the vidax
layout of the same module.

The pipeline class decides the sampling semantics (:mod:`vidax.models.ltx.pipeline`): ``LTXPipeline`` and
``LTXImageToVideoPipeline`` sample on the dynamically shifted schedule with grid RoPE coordinates,
``LTXConditionPipeline`` (0.9.5+) on its linear-quadratic schedule with causal pixel coordinates.
"""

from __future__ import annotations

import os

from vidax.models import t5_folder
from vidax.models.ltx.config import LTXVideoTransformerConfig
from vidax.models.ltx.keymap import transformer_keymap
from vidax.models.ltx.transformer import transformer_specs
from vidax.models.ltx.vae import LTXVideoVAEConfig, vae_keymap, vae_specs

#: ``model_index.json`` classes of LTX-Video folders.
PIPELINE_CLASSES = ("LTXPipeline", "LTXImageToVideoPipeline", "LTXConditionPipeline")


LTX = t5_folder.T5Family(
    family="ltx", display="LTX-Video", pipeline_classes=PIPELINE_CLASSES, example="Lightricks/LTX-Video",
    transformer_config=LTXVideoTransformerConfig.from_dict, vae_config=LTXVideoVAEConfig.from_dict,
    transformer_keymap=transformer_keymap, vae_keymap=vae_keymap, transformer_specs=transformer_specs, vae_specs=vae_specs,
)


def resolve_checkpoint(folder: str | os.PathLike) -> t5_folder.T5Checkpoint:
    """Check an LTX-Video folder (diffusers or vidax layout) and return where everything is.

    Raises:
      CheckpointError: see :func:`vidax.models.t5_folder.resolve`.
    """
    return t5_folder.resolve(folder, LTX)


def is_ltx_folder(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` holds an LTX-Video checkpoint (diffusers or vidax-converted); reads only index files."""
    return t5_folder.is_family_folder(folder, LTX)


def inspect_checkpoint(path: str | os.PathLike) -> list[str]:
    """``vidax inspect`` of an LTX-Video folder, reading headers only (:func:`vidax.models.t5_folder.inspect_lines`).

    Raises:
      CheckpointError: see :func:`resolve_checkpoint`.
    """
    ckpt = resolve_checkpoint(path)
    try:
        tcfg, vcfg = ckpt.transformer_config(), ckpt.vae_config()
    except ValueError as e:  # each component's lines say which (inspect exits 1)
        return t5_folder.inspect_lines(ckpt, f"unreadable configuration ({e})")
    summary = (f"{tcfg.num_layers} blocks, {tcfg.num_attention_heads} heads x {tcfg.attention_head_dim}, 3D RoPE; VAE "
               f"{vcfg.spatial_compression}x{vcfg.spatial_compression}x{vcfg.temporal_compression} compression, "
               f"{vcfg.latent_channels} latent channels"
               + (", timestep-conditioned decoder" if vcfg.timestep_conditioning else ""))
    return t5_folder.inspect_lines(ckpt, summary)


def convert_checkpoint(src: str | os.PathLike, dst: str | os.PathLike, *, dtype="bfloat16", text_encoder_dtype="float32",
                       vae_dtype="float32") -> dict:
    """``vidax convert`` of an LTX-Video folder into the vidax layout (:func:`vidax.models.t5_folder.convert`).

    Raises:
      CheckpointError: the source is incomplete or does not match its configuration. FileExistsError: ``dst`` exists.
    """
    return t5_folder.convert(resolve_checkpoint(src), dst, dtype=dtype, text_encoder_dtype=text_encoder_dtype,
                             vae_dtype=vae_dtype)
