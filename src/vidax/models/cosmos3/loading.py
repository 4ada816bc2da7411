"""Loading a Cosmos3 pipeline's components from a resolved folder (:mod:`vidax.models.cosmos3.layout`).

The transformer through its key map (:func:`vidax.models.cosmos3.keymap.load_transformer`: diffusers names or the
release's), placed once (already sharded on a mesh); the Wan2.2 VAE (:mod:`vidax.core.wan_vae`, as
``vidax.models.wan`` loads it for Wan2.2 TI2V-5B) on one device; the tokenizer; the sampler
(:mod:`vidax.models.cosmos3.schedule`). Component fit is checked from the configs before any weight is read.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vidax.checkpoint.errors import CheckpointError
from vidax.core import wan_vae
from vidax.core.config_values import read_json
from vidax.models.cosmos3.layout import VIDAX, Cosmos3Checkpoint


def transformer_config(ckpt: Cosmos3Checkpoint):
    """The transformer's configuration (``transformer/config.json``, diffusers keys).

    Raises:
      CheckpointError: an unreadable file. ValueError: an unsupported or out-of-range configuration (named).
    """
    from vidax.models.cosmos3.config import Cosmos3TransformerConfig

    path = ckpt.transformer / "config.json"
    try:
        return Cosmos3TransformerConfig.from_dict(read_json(path))
    except ValueError as e:
        raise type(e)(f"{path}: {e}") from None


def vae_config(ckpt: Cosmos3Checkpoint) -> wan_vae.WanVAEConfig:
    """The Wan2.2 VAE's configuration (``vae/config.json``)."""
    return wan_vae.WanVAEConfig.from_dict(read_json(ckpt.vae / "config.json"))


def load_vae(ckpt: Cosmos3Checkpoint, cfg: wan_vae.WanVAEConfig, dtype: Any) -> dict:
    """The VAE's parameters (diffusers names, or a converted folder's identity names).

    Raises:
      CheckpointError: weights that do not match ``cfg`` (every mismatch listed).
    """
    from vidax.checkpoint.keymap import identity_keymap
    from vidax.checkpoint.loader import load_params
    from vidax.checkpoint.reader import CheckpointReader
    from vidax.checkpoint.writer import VIDAX_WEIGHTS

    specs = wan_vae.vae_specs(cfg)
    if ckpt.layout == VIDAX:
        reader, km = CheckpointReader(ckpt.vae / VIDAX_WEIGHTS), identity_keymap(specs)
    else:
        reader, km = CheckpointReader(ckpt.vae), wan_vae.vae_keymap(cfg)
    return load_params(reader, km, specs, np.dtype(dtype), source=str(ckpt.vae))


def load_tokenizer(ckpt: Cosmos3Checkpoint):
    """The ``text_tokenizer/`` (:class:`vidax.models.cosmos3.text.Cosmos3Tokenizer`)."""
    from vidax.models.cosmos3.text import Cosmos3Tokenizer

    return Cosmos3Tokenizer.from_folder(ckpt.text_tokenizer)


def make_scheduler(ckpt: Cosmos3Checkpoint):
    """The folder's sampler with the pipeline's ``use_native_flow_schedule`` (:mod:`vidax.models.cosmos3.schedule`).

    Raises:
      ValueError: a scheduler configuration the sampler does not support (named, with the file).
    """
    from vidax.models.cosmos3.schedule import make_scheduler as make

    try:
        return make(ckpt.scheduler_config(), use_native_flow_schedule=ckpt.use_native_flow_schedule)
    except ValueError as e:
        raise ValueError(f"{ckpt.scheduler}: {e}") from None


def check_components(ckpt: Cosmos3Checkpoint, tcfg, vcfg, tokenizer=None) -> None:
    """The components fit each other (read from their configs, before any weight).

    Raises:
      CheckpointError: every mismatch named: the VAE's latent channels against the transformer's
        ``latent_channel``, its ``patch_latent_dim`` against ``latent_patch_size^2 * latent_channel``, a VAE that
        does not compress space 16x, a tokenizer larger than the transformer's vocabulary.
    """
    problems = []
    if vcfg.z_dim != tcfg.latent_channel:
        problems.append(f"the VAE has {vcfg.z_dim} latent channels but the transformer takes {tcfg.latent_channel}")
    p = tcfg.latent_patch_size
    if tcfg.patch_latent_dim != p * p * tcfg.latent_channel:
        problems.append(f"the transformer's patch_latent_dim {tcfg.patch_latent_dim} is not latent_patch_size^2 x "
                        f"latent_channel = {p * p * tcfg.latent_channel}")
    if vcfg.spatial_compression != 16:
        problems.append(f"the VAE compresses space {vcfg.spatial_compression}x, not the Wan2.2 VAE's 16x")
    if tokenizer is not None and tokenizer.tokenizer.vocab_size > tcfg.vocab_size:
        problems.append(f"the tokenizer has {tokenizer.tokenizer.vocab_size} tokens but the transformer embeds "
                        f"{tcfg.vocab_size}")
    if problems:
        raise CheckpointError(f"{ckpt.folder}: " + "; ".join(problems) + ": the components belong to different models")


def load_transformer(ckpt: Cosmos3Checkpoint, cfg, dtype: Any, mesh=None, *, offload_chunk: int | None = None,
                     block_loop: str = "auto"):
    """The transformer's parameters and its layer stacks (:func:`vidax.models.cosmos3.keymap.load_transformer`: the
    diffusers or the release's names, detected from the keys; a converted folder's identity names), sharded on
    ``mesh`` by :data:`vidax.models.cosmos3.sharding.COSMOS3_RULES`; with ``offload_chunk`` or the host block loop
    the layers read straight into chunks (:func:`vidax.models.cosmos3.block_loop.plans_for`).

    Returns:
      ``(params, stacks)``: ``params`` without the layers when ``stacks`` (``{"layers": OffloadedStack}``) holds
      them, else ``stacks`` is ``{}``.

    Raises:
      CheckpointError: weights that do not match ``cfg`` (every mismatch listed).
      ValueError: a mesh the model cannot use, a bad ``offload_chunk`` or ``block_loop``.
    """
    from vidax.models.cosmos3.keymap import load_transformer as load

    if ckpt.layout != VIDAX:
        loaded = load(ckpt.transformer, cfg, dtype, mesh=mesh, offload_chunk=offload_chunk, block_loop=block_loop)
        return loaded.params, loaded.stacks
    from vidax.checkpoint.keymap import identity_keymap
    from vidax.checkpoint.loader import load_params
    from vidax.checkpoint.reader import CheckpointReader
    from vidax.checkpoint.writer import VIDAX_WEIGHTS
    from vidax.core.offload import block_placement, split_stacks
    from vidax.models.cosmos3.block_loop import plans_for
    from vidax.models.cosmos3.sharding import COSMOS3_RULES, check_parallel
    from vidax.models.cosmos3.transformer import transformer_specs

    check_parallel(cfg, mesh, COSMOS3_RULES)
    plans = plans_for(cfg, offload_chunk, block_loop)
    specs = transformer_specs(cfg)
    params = load_params(CheckpointReader(ckpt.transformer / VIDAX_WEIGHTS), identity_keymap(specs), specs,
                         np.dtype(dtype), source=str(ckpt.transformer),
                         shardings=block_placement(plans, mesh, COSMOS3_RULES))
    return split_stacks(params, specs, plans, mesh, COSMOS3_RULES)
