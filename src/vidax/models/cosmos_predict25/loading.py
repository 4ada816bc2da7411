"""Loading a Cosmos-Predict2.5 pipeline's components from a resolved folder (:mod:`vidax.models.cosmos_predict25.
layout`).

The transformer is placed once (already sharded on a mesh; with offloading its blocks read straight into host
chunks), the Wan2.1 VAE and the text encoder on one device. The Qwen2.5-VL text encoder (Cosmos-Reason1-7B: 15 GB in
bf16) is wrapped in :class:`TextEncoder` and freed after each encoding unless kept.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from vidax.checkpoint.errors import CheckpointError
from vidax.core import wan_vae
from vidax.core.attention import AttentionImpl
from vidax.core.config_values import read_json
from vidax.core.progress import as_progress
from vidax.core.residency import OnDemand
from vidax.models.cosmos_predict25 import text as ctext
from vidax.models.cosmos_predict25.layout import ORIGINAL, ORIGINAL_CONFIG, VIDAX, CosmosPredict25Checkpoint
from vidax.models.cosmos_predict25.presets import VARIANTS


class TextEncoder:
    """The prompt encoding of one pipeline (:func:`vidax.models.cosmos_predict25.text.prompt_embeds`), its weights
    freed after each encoding unless kept.

    Args:
      loader: ``() -> the loaded encoder`` (:func:`vidax.models.cosmos_predict25.text.load_text_encoder`).
      loaded: the encoder already loaded.
      keep: keep it loaded between encodings.
      attention: the encoder's attention implementation.
    """

    def __init__(self, loader, loaded, *, keep: bool, attention: AttentionImpl | str = AttentionImpl.XLA):
        self.attention = attention
        # Held as (weights, encoder): freeing the tree deletes the weights' device buffers (the encoder object is
        # no pytree, so held alone its weights would only be dropped, not deleted).
        self._encoder = OnDemand(lambda: _held(loader()), None if loaded is None else _held(loaded), keep=keep)

    @property
    def loads(self) -> int:
        """Reloads after the first load (the weights freed after an encoding and needed again)."""
        return self._encoder.loads

    def encode(self, prompts: list[str]) -> jax.Array:
        """float32 ``(B, 512, layers x width)``: every layer's normalised hidden state, concatenated."""
        _, encoder = self._encoder.get()
        try:
            out = ctext.prompt_embeds(encoder, prompts, attention_impl=self.attention)
            jax.block_until_ready(out)
        finally:
            self._encoder.release()
        return out


def _held(encoder: ctext.CosmosTextEncoder) -> tuple[dict, ctext.CosmosTextEncoder]:
    return encoder.params, encoder


def vae_config(ckpt: CosmosPredict25Checkpoint) -> wan_vae.WanVAEConfig:
    """The Wan2.1 VAE's configuration: ``vae/config.json``, or the original ``tokenizer.pth``'s tensor shapes."""
    if ckpt.layout == ORIGINAL:
        from vidax.checkpoint.reader import CheckpointReader

        reader = CheckpointReader(ckpt.vae)
        return wan_vae.vae_config_from_original_shapes({k: tuple(reader.shape(k)) for k in reader.keys()})
    return wan_vae.WanVAEConfig.from_dict(read_json(ckpt.vae / "config.json"))


def load_vae(ckpt: CosmosPredict25Checkpoint, cfg: wan_vae.WanVAEConfig, dtype: Any) -> dict:
    """The VAE's parameters (diffusers names, the original ``tokenizer.pth``'s through the restricted unpickler, or a
    converted folder's identity names).

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
    elif ckpt.layout == ORIGINAL:
        reader, km = CheckpointReader(ckpt.vae), wan_vae.vae_keymap_original(cfg)
    else:
        reader, km = CheckpointReader(ckpt.vae), wan_vae.vae_keymap(cfg)
    return load_params(reader, km, specs, np.dtype(dtype), source=str(ckpt.vae))


def transformer_config(ckpt: CosmosPredict25Checkpoint):
    """The transformer's configuration: ``config.json`` (diffusers keys; a converted folder's also keeps
    ``qk_norm_eps``); for an original ``.pt`` the release its width and block count match
    (:func:`vidax.models.cosmos_predict25.keymap.original_config`), or the ``config.json`` beside it
    (:data:`~vidax.models.cosmos_predict25.layout.ORIGINAL_CONFIG`) with the original's q/k-norm epsilon.

    Raises:
      CheckpointError: an unreadable file, weights of no release (without a ``config.json`` beside them), a
        ``qk_norm_eps`` that is not a number. ValueError: an unsupported configuration (named).
    """
    from vidax.models.cosmos_predict25.config import DIFFUSERS_QK_NORM_EPS, ORIGINAL_QK_NORM_EPS

    if ckpt.layout == ORIGINAL:
        beside = ckpt.transformer.parent / ORIGINAL_CONFIG
        if beside.is_file():
            return config_from_file(beside, ORIGINAL_QK_NORM_EPS)
        from vidax.checkpoint.reader import CheckpointReader
        from vidax.models.cosmos_predict25.keymap import original_config

        return original_config(CheckpointReader(ckpt.transformer), str(ckpt.transformer))
    path = ckpt.transformer / "config.json"
    if ckpt.layout == VIDAX:
        return config_from_file(path, DIFFUSERS_QK_NORM_EPS)
    from vidax.models.cosmos_predict25.config import CosmosTransformerConfig

    return CosmosTransformerConfig.from_dict(read_json(path))  # diffusers has no qk_norm_eps (its value: 1e-5)


def config_from_file(path, qk_norm_eps: float):
    """A ``CosmosTransformerConfig`` from a ``config.json`` in diffusers' keys plus vidax's ``qk_norm_eps``
    (``qk_norm_eps``: its value where the file has none).

    Raises:
      CheckpointError: an unreadable file, a ``qk_norm_eps`` that is not a number. ValueError: an unsupported
        configuration (named).
    """
    import dataclasses

    from vidax.checkpoint.errors import excerpt
    from vidax.models.cosmos_predict25.config import CosmosTransformerConfig

    config = read_json(path)
    eps = config.get("qk_norm_eps", qk_norm_eps)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise CheckpointError(f"{path}: qk_norm_eps must be a number, got {excerpt(eps)}")
    try:
        return dataclasses.replace(CosmosTransformerConfig.from_dict(config), qk_norm_eps=float(eps))
    except ValueError as e:
        raise type(e)(f"{path}: {e}") from None


def load_transformer(ckpt: CosmosPredict25Checkpoint, cfg, dtype: Any, shardings=None) -> dict:
    """The transformer's parameters in the folder's layout (:func:`vidax.models.cosmos_predict25.keymap.
    transformer_checkpoint`; identity names for a converted folder).

    Raises:
      CheckpointError: weights that do not match ``cfg`` (every mismatch listed).
    """
    from vidax.checkpoint.keymap import identity_keymap
    from vidax.checkpoint.loader import load_params
    from vidax.checkpoint.reader import CheckpointReader
    from vidax.checkpoint.writer import VIDAX_WEIGHTS
    from vidax.models.cosmos_predict25.keymap import transformer_checkpoint
    from vidax.models.cosmos_predict25.transformer import transformer_specs

    specs = transformer_specs(cfg)
    if ckpt.layout == VIDAX:
        reader, km = CheckpointReader(ckpt.transformer / VIDAX_WEIGHTS), identity_keymap(specs)
    else:
        reader, km = transformer_checkpoint(CheckpointReader(ckpt.transformer), cfg, ckpt.layout)
    return load_params(reader, km, specs, np.dtype(dtype), source=str(ckpt.transformer), shardings=shardings)


def text_width(ckpt: CosmosPredict25Checkpoint) -> int:
    """The concatenated text-embedding width (layers x hidden size) from the text encoder's config (no weights)."""
    from vidax.encoders import qwen2_5_vl

    path = ckpt.text_encoder / "config.json"
    return ctext.embed_dim(qwen2_5_vl.config_from_dict(read_json(path), str(path)))


def check_components(ckpt: CosmosPredict25Checkpoint, tcfg, vcfg) -> None:
    """The components fit each other (read from their configs, before any weight).

    Raises:
      CheckpointError: every mismatch named (the text encoder's layers x width against the transformer's
        ``crossattn_proj_in_channels`` (or ``text_embed_dim`` without the projection), the VAE's latent channels
        against the transformer's).
    """
    problems = []
    width = text_width(ckpt)
    want = tcfg.context_in_channels
    if width != want:
        problems.append(f"the text encoder gives {width} features per token (layers x width) but the transformer "
                        f"takes {want}")
    if vcfg.z_dim != tcfg.out_channels or vcfg.z_dim + 1 != tcfg.in_channels:
        problems.append(f"the VAE has {vcfg.z_dim} latent channels but the transformer takes {tcfg.in_channels} and "
                        f"predicts {tcfg.out_channels} (expected latent + 1 and latent)")
    if problems:
        raise CheckpointError(f"{ckpt.folder}: " + "; ".join(problems) + ": the components belong to different models")


def make_scheduler(ckpt: CosmosPredict25Checkpoint):
    """The folder's sampler (:class:`vidax.schedulers.unipc.FlowUniPCMultistepScheduler`; its states'
    ``model_timesteps`` are the transformer's timestep input at each step).

    A diffusers or converted folder: its ``scheduler_config.json`` (diffusers' Karras flow grid; the transformer
    given each step's sigma, as diffusers' pipeline gives it on any grid, unless the file sets vidax's
    ``model_timesteps_type``, as a converted release's does: its variant's sampler, below). An original release:
    its variant's experiment (:meth:`vidax.models.cosmos_predict25.presets.Variant.scheduler_config`;
    docs/design.md, "Schedule"): the post-trained checkpoints' ``n + 1``-point Karras grid (``sigma_grid="cosmos"``),
    the pre-trained ones' shift-5 linear grid (the Wan grid), the transformer given the truncated timestep times
    0.001 either way.

    Raises:
      ValueError: a scheduler configuration the sampler does not support.
    """
    from vidax.schedulers import scheduler_from_config

    if ckpt.layout == ORIGINAL:
        return scheduler_from_config(VARIANTS[ckpt.variant].scheduler_config())
    config = dict(ckpt.scheduler_config())
    if config.get("_class_name") == "UniPCMultistepScheduler":  # diffusers' pipeline feeds sigma on any grid
        config.setdefault("model_timesteps_type", "sigmas")
    return scheduler_from_config(config)


def load_components(ckpt: CosmosPredict25Checkpoint, tcfg, vcfg, *, dtype: Any, vae_dtype: Any,
                    text_encoder_dtype: Any, mesh, rules, keep_encoder: bool, progress, plans: dict | None = None,
                    attention: AttentionImpl | str = AttentionImpl.XLA):
    """Everything a pipeline loads, as one ``loading`` stage: the transformer placed once (sharded by ``rules`` on
    ``mesh``; with ``plans`` its blocks read straight into chunks, :mod:`vidax.core.offload`), the VAE and the text
    encoder (the tokenizer and the component widths checked before any weight is read).

    Returns:
      ``(transformer params, stacks, vae params, TextEncoder)``.

    Raises:
      CheckpointError: a missing part or tokenizer, components that do not fit each other
        (:func:`check_components`), or weights that do not match their configuration.
    """
    from vidax.core.offload import block_placement, split_stacks
    from vidax.models.cosmos_predict25.transformer import transformer_specs

    check_components(ckpt, tcfg, vcfg)

    def text_loader():
        return ctext.load_text_encoder(ckpt.text_encoder, ckpt.tokenizer, text_encoder_dtype)

    with as_progress(progress).stage("loading", total=3, unit="part") as stage:
        tparams = load_transformer(ckpt, tcfg, dtype, shardings=block_placement(plans, mesh, rules))
        tparams, stacks = split_stacks(tparams, transformer_specs(tcfg), plans, mesh, rules)
        stage.update()
        vparams = load_vae(ckpt, vcfg, vae_dtype)
        stage.update()
        encoder = text_loader()
        stage.update()
        jax.block_until_ready((tparams, vparams))
    return tparams, stacks, vparams, TextEncoder(text_loader, encoder, keep=keep_encoder, attention=attention)
