"""CogVideoX checkpoint folders (diffusers layout, or vidax-converted): which files hold which component.

The published CogVideoX checkpoints (``THUDM/CogVideoX-2b``, ``-5b``, ``-5b-I2V``, ``CogVideoX1.5-5B``, ``-I2V``) are
diffusers folders of the T5-conditioned families' shape (:mod:`vidax.models.t5_folder`: ``model_index.json``,
``transformer/``, ``vae/``, ``text_encoder/``, ``tokenizer/``, ``scheduler/``); ``vidax convert`` writes the vidax
layout of the same module. :func:`resolve_checkpoint` checks that every part is there (naming each missing one).
"""

from __future__ import annotations

import os

from vidax.models import t5_folder
from vidax.models.cogvideox.config import CogVideoXTransformerConfig, CogVideoXVAEConfig
from vidax.models.cogvideox.keymap import transformer_keymap, vae_keymap
from vidax.models.cogvideox.transformer import transformer_specs
from vidax.models.cogvideox.vae import vae_specs

#: ``model_index.json`` classes of CogVideoX folders (the transformer config tells T2V from I2V).
PIPELINE_CLASSES = ("CogVideoXPipeline", "CogVideoXImageToVideoPipeline", "CogVideoXVideoToVideoPipeline")


COGVIDEOX = t5_folder.T5Family(
    family="cogvideox", display="CogVideoX", pipeline_classes=PIPELINE_CLASSES, example="THUDM/CogVideoX-5b",
    transformer_config=CogVideoXTransformerConfig.from_dict, vae_config=CogVideoXVAEConfig.from_dict,
    transformer_keymap=transformer_keymap, vae_keymap=vae_keymap, transformer_specs=transformer_specs, vae_specs=vae_specs,
)

#: A resolved CogVideoX folder (:class:`vidax.models.t5_folder.T5Checkpoint`).
CogVideoXCheckpoint = t5_folder.T5Checkpoint


def resolve_checkpoint(folder: str | os.PathLike) -> t5_folder.T5Checkpoint:
    """Check a CogVideoX folder (diffusers or vidax layout) and return where everything is.

    Raises:
      CheckpointError: see :func:`vidax.models.t5_folder.resolve`.
    """
    return t5_folder.resolve(folder, COGVIDEOX)


def is_cogvideox_folder(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` holds a CogVideoX checkpoint (diffusers or vidax-converted); reads only index files."""
    return t5_folder.is_family_folder(folder, COGVIDEOX)
