"""Loading a HunyuanVideo-1.5 pipeline's components from a resolved folder (:mod:`vidax.models.hunyuanvideo15.layout`).

The transformer is placed once (already sharded on a mesh), the VAE and the encoders on one device. The text
encoders (Qwen2.5-VL's 7B language model and the byT5 glyph encoder) are wrapped in :class:`TextEncoders` and the
image-to-video SigLIP tower in :class:`ImageEncoder`; each is freed after its encoding unless kept (on accelerators
the Qwen model's 15 GB in bf16 would otherwise sit beside the 8.3B transformer).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from vidax.checkpoint.errors import CheckpointError
from vidax.core.attention import AttentionImpl
from vidax.core.config_values import read_json
from vidax.core.progress import as_progress
from vidax.core.residency import OnDemand
from vidax.encoders import byt5, siglip
from vidax.encoders.t5 import T5Config
from vidax.models.hunyuanvideo15 import text as htext
from vidax.models.hunyuanvideo15 import vae as hvae
from vidax.models.hunyuanvideo15.layout import ORIGINAL, VIDAX, HunyuanVideo15Checkpoint


class TextEncoders:
    """The prompt encoding of one pipeline: Qwen2.5-VL (the MLLM hidden states) and byT5 (the quoted glyph texts).

    Args:
      loader: ``() -> (MLLMTextEncoder, (byt5 params, T5Config, ByT5Tokenizer))`` (loads the weights).
      encoders: the loaded encoders.
      keep: keep them loaded between encodings.
      attention: attention implementation of both encoders.
    """

    def __init__(self, loader, encoders, *, keep: bool, attention: AttentionImpl | str = AttentionImpl.XLA):
        self.attention = attention
        self._encoders = OnDemand(loader, encoders, keep=keep)

    @property
    def loads(self) -> int:
        """Reloads after the first load (the weights freed after an encoding and needed again)."""
        return self._encoders.loads

    def encode(self, prompts: list[str]) -> htext.PromptEmbeds:
        """The four text inputs of the transformer for ``prompts`` (:func:`vidax.models.hunyuanvideo15.text.
        encode_prompt`): ``prompt_embeds (B, 1000, 3584)`` float32 and its int32 mask, ``prompt_embeds_2
        (B, 256, 1472)`` float32 and its int32 mask.

        Raises:
          ValueError: bad prompts (see :mod:`vidax.models.hunyuanvideo15.text`).
        """
        mllm, (gparams, gcfg, gtok) = self._encoders.get()
        try:
            def glyphs(texts):
                return byt5.encode_glyph_prompts(gparams, gcfg, gtok, texts, attention_impl=self.attention)

            out = htext.encode_prompt(mllm, prompts, glyphs, attention_impl=self.attention)
            jax.block_until_ready((out.prompt_embeds, out.prompt_embeds_2))
        finally:
            self._encoders.release()
        return htext.PromptEmbeds(out.prompt_embeds, np.asarray(out.prompt_embeds_mask, np.int32),
                                  out.prompt_embeds_2, np.asarray(out.prompt_embeds_mask_2, np.int32))


class ImageEncoder:
    """Image-to-video's SigLIP tower: images in, ``last_hidden_state`` out (diffusers
    ``HunyuanVideo15ImageToVideoPipeline._get_image_embeds``), freed after each use unless kept."""

    def __init__(self, loader, loaded, *, keep: bool, attention: AttentionImpl | str = AttentionImpl.XLA):
        self.attention = attention
        self._encoder = OnDemand(loader, loaded, keep=keep)

    def encode(self, images: list) -> jax.Array:
        """PIL RGB images (already resized and cropped to the video's size) -> float32 ``(B, 729, 1152)``."""
        params, cfg, processor = self._encoder.get()
        try:
            pixels = siglip.preprocess_images(images, processor)
            out = siglip.encode_images(params, cfg, pixels, attention_impl=self.attention)
            jax.block_until_ready(out)
        finally:
            self._encoder.release()
        return out


def load_vae(ckpt: HunyuanVideo15Checkpoint, cfg, dtype: Any, parts=None) -> dict:
    """The VAE's parameters (diffusers or original layout by its ``config.json``; identity for a converted folder).

    Raises:
      CheckpointError: weights that do not match ``cfg``.
    """
    from vidax.checkpoint.keymap import identity_keymap
    from vidax.checkpoint.loader import load_params
    from vidax.checkpoint.reader import CheckpointReader
    from vidax.checkpoint.writer import VIDAX_WEIGHTS
    from vidax.models.hunyuanvideo15.vae_keymap import load_vae as load_vae_folder
    from vidax.models.hunyuanvideo15.vae_keymap import vae_specs

    if ckpt.layout == VIDAX:
        specs = vae_specs(cfg)
        return load_params(CheckpointReader(ckpt.vae / VIDAX_WEIGHTS), identity_keymap(specs), specs,
                           np.dtype(dtype), source=str(ckpt.vae), parts=parts)
    return load_vae_folder(ckpt.vae, dtype, parts=parts)[1]


def vae_config(ckpt: HunyuanVideo15Checkpoint):
    """The VAE's configuration (``vae/config.json``, either layout)."""
    from vidax.models.hunyuanvideo15.vae_keymap import ORIGINAL_CLASS

    config = read_json(ckpt.vae / "config.json")
    if config.get("_class_name") == ORIGINAL_CLASS:
        return hvae.HunyuanVideo15VAEConfig.from_original_dict(config)
    return hvae.HunyuanVideo15VAEConfig.from_dict(config)


def load_text_encoders(ckpt: HunyuanVideo15Checkpoint, dtype: Any):
    """``(MLLMTextEncoder, (byt5 params, T5Config, ByT5Tokenizer))`` from the folder's layout (the tokenizers read
    and checked before the weights)."""
    mllm = htext.load_mllm(ckpt.text_encoder, None if ckpt.layout == ORIGINAL else ckpt.tokenizer, dtype)
    glyph = byt5.load_glyph_encoder(ckpt.text_encoder.parent if ckpt.layout == ORIGINAL else ckpt.folder, dtype)
    return mllm, glyph


def load_image_encoder(ckpt: HunyuanVideo15Checkpoint, dtype: Any):
    """``(params, SiglipVisionConfig, processor config)`` of an image-to-video folder."""
    params, cfg = siglip.load_siglip_vision(ckpt.image_encoder, dtype)
    return params, cfg, siglip.load_siglip_processor(ckpt.feature_extractor)


def text_widths(ckpt: HunyuanVideo15Checkpoint) -> tuple[int, int]:
    """The widths of the Qwen2.5-VL hidden states and of the byT5 embeddings, from their configs (no weights)."""
    from vidax.encoders import qwen2_5_vl

    qwen = qwen2_5_vl.config_from_dict(read_json(ckpt.text_encoder / "config.json"),
                                       source=str(ckpt.text_encoder / "config.json"))
    t5 = T5Config.from_dict(read_json(ckpt.text_encoder_2 / "config.json"))
    return qwen.hidden_size, t5.d_model


def check_components(ckpt: HunyuanVideo15Checkpoint, tcfg, vcfg) -> None:
    """The components fit each other (read from their configs, before any weight).

    Raises:
      CheckpointError: every mismatch named (the text encoders' widths against the transformer's
        ``text_embed_dim`` / ``text_embed_2_dim``, the image encoder's against ``image_embed_dim``, the VAE's latent
        channels against the transformer's).
    """
    width, glyph_width = text_widths(ckpt)
    problems = []
    if width != tcfg.text_embed_dim:
        problems.append(f"the Qwen2.5-VL text encoder is {width} wide but the transformer's text_embed_dim is "
                        f"{tcfg.text_embed_dim}")
    if glyph_width != tcfg.text_embed_2_dim:
        problems.append(f"the byT5 encoder is {glyph_width} wide but the transformer's text_embed_2_dim is "
                        f"{tcfg.text_embed_2_dim}")
    if vcfg.latent_channels != tcfg.out_channels or 2 * vcfg.latent_channels + 1 != tcfg.in_channels:
        problems.append(f"the VAE has {vcfg.latent_channels} latent channels but the transformer takes "
                        f"{tcfg.in_channels} and predicts {tcfg.out_channels} (expected 2 x latent + 1 and latent)")
    if ckpt.image_encoder is not None:
        cfg = siglip.SiglipVisionConfig.from_dict(read_json(ckpt.image_encoder / "config.json"))
        if cfg.hidden_size != tcfg.image_embed_dim:
            problems.append(f"the SigLIP image encoder is {cfg.hidden_size} wide but the transformer's "
                            f"image_embed_dim is {tcfg.image_embed_dim}")
    if problems:
        raise CheckpointError(f"{ckpt.folder}: " + "; ".join(problems) + ": the components belong to different models")


def transformer_config(ckpt: HunyuanVideo15Checkpoint):
    """The transformer's configuration (``config.json``; the original release's keys in its variant folders)."""
    from vidax.models.hunyuanvideo15.config import HunyuanVideo15TransformerConfig

    if ckpt.layout == ORIGINAL:
        from vidax.models.hunyuanvideo15.keymap import original_transformer_config

        return original_transformer_config(ckpt.transformer)
    return HunyuanVideo15TransformerConfig.from_dict(read_json(ckpt.transformer / "config.json"))


def load_transformer(ckpt: HunyuanVideo15Checkpoint, cfg, dtype: Any, shardings=None) -> dict:
    """The transformer's parameters in the folder's layout (:func:`vidax.checkpoint.loader.load_params` through
    :func:`vidax.models.hunyuanvideo15.keymap.transformer_checkpoint`; identity for a converted folder).

    Raises:
      CheckpointError: weights that do not match ``cfg`` (every mismatch listed).
    """
    from vidax.checkpoint.keymap import identity_keymap
    from vidax.checkpoint.loader import load_params
    from vidax.checkpoint.reader import CheckpointReader
    from vidax.checkpoint.writer import VIDAX_WEIGHTS
    from vidax.models.hunyuanvideo15.keymap import transformer_checkpoint
    from vidax.models.hunyuanvideo15.transformer import transformer_specs

    specs = transformer_specs(cfg)
    if ckpt.layout == VIDAX:
        reader, km = CheckpointReader(ckpt.transformer / VIDAX_WEIGHTS), identity_keymap(specs)
    else:
        reader, km = transformer_checkpoint(CheckpointReader(ckpt.transformer), cfg, ckpt.layout)
    return load_params(reader, km, specs, np.dtype(dtype), source=str(ckpt.transformer), shardings=shardings)


def load_components(ckpt: HunyuanVideo15Checkpoint, tcfg, vcfg, *, dtype: Any, vae_dtype: Any,
                    text_encoder_dtype: Any, image_encoder_dtype: Any, mesh, rules, keep_encoders: bool, progress,
                    plans: dict | None = None, attention: AttentionImpl | str = AttentionImpl.XLA):
    """Everything a pipeline loads, as one ``loading`` stage: the transformer placed once (sharded by ``rules`` on
    ``mesh``; with ``plans`` its block stack read straight into chunks, :mod:`vidax.core.offload`), the VAE (its
    decoder only for text-to-video), the text encoders and, for image-to-video, the SigLIP image encoder (tokenizers
    and component widths checked before any weight is read).

    Returns:
      ``(transformer params, stacks, vae params, TextEncoders, ImageEncoder or None)``.

    Raises:
      CheckpointError: a missing part or tokenizer, components that do not fit each other
        (:func:`check_components`), or weights that do not match their configuration.
    """
    from vidax.core.offload import block_placement, split_stacks
    from vidax.models.hunyuanvideo15.transformer import transformer_specs

    check_components(ckpt, tcfg, vcfg)
    i2v = ckpt.task == "i2v"

    def text_loader():
        return load_text_encoders(ckpt, text_encoder_dtype)

    def image_loader():
        return load_image_encoder(ckpt, image_encoder_dtype)

    with as_progress(progress).stage("loading", total=4 if i2v else 3, unit="part") as stage:
        tparams = load_transformer(ckpt, tcfg, dtype, shardings=block_placement(plans, mesh, rules))
        tparams, stacks = split_stacks(tparams, transformer_specs(tcfg), plans, mesh, rules)
        stage.update()
        vparams = load_vae(ckpt, vcfg, vae_dtype, parts=None if i2v else hvae.DECODER_PARTS)
        stage.update()
        encoders = text_loader()
        stage.update()
        image = None
        if i2v:
            image = ImageEncoder(image_loader, image_loader(), keep=keep_encoders, attention=attention)
            stage.update()
        jax.block_until_ready((tparams, vparams))
    text = TextEncoders(text_loader, encoders, keep=keep_encoders, attention=attention)
    return tparams, stacks, vparams, text, image
