"""Loading a HunyuanVideo pipeline's components from a resolved folder (:mod:`vidax.models.hunyuanvideo.layout`).

The transformer is placed once (already sharded on a mesh), the VAE and the text encoders on one device. The text
encoders (the 8B Llama / LLaVA and CLIP-L) are wrapped in :class:`TextEncoders`, which frees them after each encoding
unless kept (on accelerators the Llama's 16 GB in bf16 would otherwise sit beside the 13B transformer).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from vidax.core.attention import AttentionImpl
from vidax.core.config_values import read_json
from vidax.core.progress import as_progress
from vidax.core.residency import OnDemand
from vidax.encoders.clip_text import CLIPTextConfig
from vidax.encoders.llama import LlamaConfig
from vidax.models.hunyuanvideo import text as htext
from vidax.models.hunyuanvideo import vae as hvae
from vidax.models.hunyuanvideo.layout import VIDAX, HunyuanVideoCheckpoint


class TextEncoders:
    """The prompt encoding of one pipeline: Llama (or LLaVA) + CLIP, with the prompt template fitted to the tokenizer.

    The template's ``crop_start`` (and for LLaVA the image token's place and count) is counted with the folder's
    tokenizer (:func:`vidax.models.hunyuanvideo.text.fit_prompt_template`): the released tokenizer gives the
    reference's own numbers (95; 103, 5, 576), and a smaller tokenizer (the demo's) gets the right crop instead of
    one cut inside the template.

    Args:
      loader: ``() -> HunyuanVideoTextEncoders`` (loads the weights).
      encoders: the loaded encoders (from :func:`load_components`).
      keep: keep them loaded between encodings.
      image_embed_interleave: I2V: every k-th image token kept (2 for ``latent_concat``, 4 for ``token_replace``).
    """

    def __init__(self, loader, encoders: htext.HunyuanVideoTextEncoders, *, keep: bool, image_embed_interleave: int = 2,
                 attention: AttentionImpl | str = AttentionImpl.XLA):
        self.tokenizer = encoders.tokenizer
        self.config = encoders.text_encoder_config
        self.takes_image = encoders.takes_image
        self.image_embed_interleave = image_embed_interleave
        self.attention = attention
        base = htext.I2V_PROMPT_TEMPLATE if self.takes_image else htext.T2V_PROMPT_TEMPLATE
        features = self.config.num_image_features if self.takes_image else None
        self.prompt_template = htext.fit_prompt_template(self.tokenizer, base, features)
        self._encoders = OnDemand(loader, encoders, keep=keep)

    @property
    def loads(self) -> int:
        """Reloads after the first load (the weights freed after an encoding and needed again)."""
        return self._encoders.loads

    def encode(self, prompts: list[str], images: list | None = None) -> tuple[jax.Array, np.ndarray, jax.Array]:
        """``(prompt_embeds (B, L, D) float32, prompt_attention_mask (B, L) int32, pooled (B, D2) float32)``.

        Raises:
          ValueError: an image given to the text-to-video encoders or missing for the image-to-video ones; bad
            prompts (see :mod:`vidax.models.hunyuanvideo.text`).
        """
        encoders = self._encoders.get()
        try:
            if self.takes_image:
                if images is None:
                    raise ValueError("the image-to-video text encoder (LLaVA) needs the image")
                out = htext.encode_prompt_i2v(encoders, prompts, images, prompt_template=self.prompt_template,
                                              image_embed_interleave=self.image_embed_interleave,
                                              attention_impl=self.attention)
            else:
                if images is not None:
                    raise ValueError("the text-to-video text encoder (Llama) takes no image")
                out = htext.encode_prompt_t2v(encoders, prompts, prompt_template=self.prompt_template,
                                              attention_impl=self.attention)
            jax.block_until_ready((out.prompt_embeds, out.pooled_prompt_embeds))
        finally:
            self._encoders.release()
        return out.prompt_embeds, np.asarray(out.prompt_attention_mask, np.int32), out.pooled_prompt_embeds


def load_transformer(ckpt: HunyuanVideoCheckpoint, cfg, dtype: Any, shardings=None) -> dict:
    """The transformer's parameters in the folder's layout (:func:`vidax.checkpoint.loader.load_params`; the fused
    tensors split through :func:`vidax.models.hunyuanvideo.keymap.transformer_checkpoint`'s views).

    Raises:
      CheckpointError: weights that do not match ``cfg`` (every mismatch listed).
    """
    from vidax.checkpoint.keymap import identity_keymap
    from vidax.checkpoint.loader import load_params
    from vidax.checkpoint.reader import CheckpointReader
    from vidax.checkpoint.writer import VIDAX_WEIGHTS
    from vidax.models.hunyuanvideo.keymap import transformer_checkpoint
    from vidax.models.hunyuanvideo.transformer import transformer_specs

    specs = transformer_specs(cfg)
    if ckpt.layout == VIDAX:
        reader, km = CheckpointReader(ckpt.transformer / VIDAX_WEIGHTS), identity_keymap(specs)
    else:
        reader, km = transformer_checkpoint(CheckpointReader(ckpt.transformer), cfg, ckpt.layout)
    return load_params(reader, km, specs, np.dtype(dtype), source=str(ckpt.transformer), shardings=shardings)


def load_vae(ckpt: HunyuanVideoCheckpoint, cfg, dtype: Any, parts=None) -> dict:
    """The VAE's parameters (diffusers or original layout by its ``config.json``; identity for a converted folder).

    Raises:
      CheckpointError: weights that do not match ``cfg``.
    """
    from vidax.checkpoint.keymap import identity_keymap
    from vidax.checkpoint.loader import load_params
    from vidax.checkpoint.reader import CheckpointReader
    from vidax.checkpoint.writer import VIDAX_WEIGHTS

    if ckpt.layout == VIDAX:
        specs = hvae.vae_specs(cfg)
        return load_params(CheckpointReader(ckpt.vae / VIDAX_WEIGHTS), identity_keymap(specs), specs,
                           np.dtype(dtype), source=str(ckpt.vae), parts=parts)
    return hvae.load_vae(ckpt.vae, dtype, parts=parts)[1]


def load_components(ckpt: HunyuanVideoCheckpoint, tcfg, vcfg, *, dtype: Any, vae_dtype: Any, text_encoder_dtype: Any,
                    mesh, rules, keep_text: bool, progress,
                    plans: dict | None = None) -> tuple[dict, dict, dict, TextEncoders]:
    """Everything a pipeline loads, as one ``loading`` stage: the transformer placed once (sharded by ``rules`` on
    ``mesh``), the VAE, and the text encoders with their tokenizers (checked before any weight is read).

    ``plans`` (:func:`vidax.models.hunyuanvideo.block_loop.plans_for`): the two block stacks are read straight into
    chunks (host memory for offloading, device memory for the host block loop) and split off the parameters.

    Returns:
      ``(transformer params, stacks, vae params, text encoders)``: ``stacks`` is ``{}`` without ``plans`` (the stacks
      stay in the params), else ``{"transformer_blocks": OffloadedStack, "single_transformer_blocks": ...}`` and the
      params hold the rest.

    Raises:
      CheckpointError: a missing part or tokenizer, components that do not fit each other (the text encoder's width
        against the transformer's ``text_embed_dim``, CLIP's against ``pooled_projection_dim``, the VAE's latent
        channels against the transformer's), or weights that do not match their configuration.
    """
    from vidax.checkpoint.errors import CheckpointError
    from vidax.core.offload import block_placement, split_stacks
    from vidax.models.hunyuanvideo.transformer import transformer_specs

    folders = htext.text_encoder_folders(ckpt)
    width = LlamaConfig.from_dict(read_json(folders.text_encoder / "config.json")).hidden_size
    clip_width = CLIPTextConfig.from_dict(read_json(folders.text_encoder_2 / "config.json")).hidden_size
    problems = []
    if width != tcfg.text_embed_dim:
        problems.append(f"the text encoder is {width} wide but the transformer's text_embed_dim is "
                        f"{tcfg.text_embed_dim}")
    if clip_width != tcfg.pooled_projection_dim:
        problems.append(f"CLIP's pooled output is {clip_width} wide but the transformer's pooled_projection_dim is "
                        f"{tcfg.pooled_projection_dim}")
    if vcfg.latent_channels != tcfg.out_channels:
        problems.append(f"the VAE has {vcfg.latent_channels} latent channels but the transformer predicts "
                        f"{tcfg.out_channels}")
    if (folders.kind == "llava") != (ckpt.task == "i2v"):
        problems.append(f"the text encoder is a {folders.kind} but the folder is {ckpt.task}")
    if problems:
        raise CheckpointError(f"{ckpt.folder}: " + "; ".join(problems) + ": the components belong to different models")

    def text_loader():
        return htext.load_text_encoders(ckpt, text_encoder_dtype)

    with as_progress(progress).stage("loading", total=3, unit="part") as stage:
        tparams = load_transformer(ckpt, tcfg, dtype, shardings=block_placement(plans, mesh, rules))
        tparams, stacks = split_stacks(tparams, transformer_specs(tcfg), plans, mesh, rules)
        stage.update()
        vparams = load_vae(ckpt, vcfg, vae_dtype)
        stage.update()
        encoders = text_loader()
        jax.block_until_ready((tparams, vparams))
        stage.update()
    interleave = 4 if tcfg.image_condition_type == "token_replace" else 2
    text = TextEncoders(text_loader, encoders, keep=keep_text, image_embed_interleave=interleave)
    return tparams, stacks, vparams, text
