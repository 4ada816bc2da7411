"""HunyuanVideo's prompt encoding: the Llama (or LLaVA) hidden state, its template cropped, and CLIP's pooled output.

Follows diffusers ``pipelines/hunyuan_video/pipeline_hunyuan_video.py`` (``HunyuanVideoPipeline``:
``_get_llama_prompt_embeds``, ``_get_clip_prompt_embeds``, ``encode_prompt``) and
``pipeline_hunyuan_video_image2video.py`` (``HunyuanVideoImageToVideoPipeline``: the same with the image,
``_expand_input_ids_with_image_tokens``).

Text-to-video (:func:`encode_prompt_t2v`)::

    text    = template.format(prompt)                       # a Llama-3 chat frame around the prompt
    ids     = tokenizer(text, max_length = 256 + crop_start, right padding, truncation)
    hidden  = Llama(ids, mask).hidden_states[-3]           # num_hidden_layers_to_skip = 2, no final norm
    prompt_embeds, prompt_attention_mask = hidden[:, crop_start:], mask[:, crop_start:]   # drop the frame
    pooled_prompt_embeds = CLIP-L(tokenizer_2(prompt, 77)).pooler_output

``crop_start`` is the template's (95 for :data:`T2V_PROMPT_TEMPLATE` with the Llama-3 tokenizer: the frame's
tokens before the prompt) or, when the template gives none, the token count of the template itself minus 2
(its ``{}`` and closing ``<|eot_id|>``).

Image-to-video (:func:`encode_prompt_i2v`): the template holds ``<image>`` (token ``image_emb_start = 5``);
that token is expanded to ``image_emb_len = 576`` placeholders filled with the LLaVA image features; the
attention mask is ``ids != pad_token_id`` over the expanded ids and the RoPE positions count valid tokens
(padding at position 1), as the reference builds them. From the hidden state it keeps, per row: the image
positions ``[image_emb_start, image_emb_end)`` subsampled every ``image_embed_interleave`` (2 for the
``latent_concat`` transformer, 4 for ``token_replace``), then the prompt's tokens with the four tokens before
the assistant turn's text cut out (``<|eot_id|><|start_header_id|>assistant<|end_header_id|>``; the turn starts
after the row's last ``<|end_header_id|>``, or past the end when truncation cut it). ``crop_start`` defaults
to the template's 103, else the template's token count minus 5. The original repository locates the same
position by its ``double_return_token_id`` (271, ``"\\n\\n"``) instead; diffusers 0.42.1, the pinned
reference, by ``<|end_header_id|>``.

Deviations from the reference, where it cannot run or silently mis-crops (each stated where it applies):
a batch of several prompts with one image uses the image for every prompt (the reference raises a count
mismatch); a truncated prompt in a batch of several is cropped as a batch of one is (the reference raises or
crops at the user header); a LLaVA config without ``pad_token_id`` uses the tokenizer's pad id (the reference
raises). The reference's ``num_videos_per_prompt`` repetition is left to the caller, and, as in the
reference, ``prompt_2`` does not exist here: CLIP always encodes the prompt itself.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint.errors import CheckpointError
from vidax.core.attention import AttentionImpl
from vidax.core.config_values import read_json
from vidax.encoders import clip_text, llama, llava
from vidax.encoders.clip import CLIPImageProcessorConfig, preprocess_images
from vidax.encoders.clip_text import CLIPTextConfig
from vidax.encoders.llama import LlamaConfig
from vidax.encoders.llava import LlavaConfig
from vidax.encoders.tokenizer import Tokenizer, load_clip_tokenizer

#: diffusers ``pipeline_hunyuan_video.DEFAULT_PROMPT_TEMPLATE`` (the original repository's
#: ``dit-llm-encode-video``).
T2V_PROMPT_TEMPLATE: dict[str, Any] = {
    "template": (
        "<|start_header_id|>system<|end_header_id|>\n\nDescribe the video by detailing the following aspects: "
        "1. The main content and theme of the video."
        "2. The color, shape, size, texture, quantity, text, and spatial relationships of the objects."
        "3. Actions, events, behaviors temporal relationships, physical movement changes of the objects."
        "4. background environment, light, style and atmosphere."
        "5. camera angles, movements, and transitions used in the video:<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n{}<|eot_id|>"
    ),
    "crop_start": 95,
}

#: diffusers ``pipeline_hunyuan_video_image2video.DEFAULT_PROMPT_TEMPLATE`` (the original repository's
#: ``dit-llm-encode-video-i2v``, whose ``double_return_token_id`` 271 diffusers does not use).
I2V_PROMPT_TEMPLATE: dict[str, Any] = {
    "template": (
        "<|start_header_id|>system<|end_header_id|>\n\n<image>\nDescribe the video by detailing the following "
        "aspects according to the reference image: "
        "1. The main content and theme of the video."
        "2. The color, shape, size, texture, quantity, text, and spatial relationships of the objects."
        "3. Actions, events, behaviors temporal relationships, physical movement changes of the objects."
        "4. background environment, light, style and atmosphere."
        "5. camera angles, movements, and transitions used in the video:<|eot_id|>\n\n"
        "<|start_header_id|>user<|end_header_id|>\n\n{}<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    ),
    "crop_start": 103,
    "image_emb_start": 5,
    "image_emb_end": 581,
    "image_emb_len": 576,
}

#: The Llama-3 token whose last occurrence ends the frame before the assistant turn (I2V crop).
END_HEADER_TOKEN = "<|end_header_id|>"

#: Tokens of the I2V frame cut from the text embeddings just before the assistant turn's text.
_ASSISTANT_FRAME_TOKENS = 4


class PromptEmbeds(NamedTuple):
    """The conditioning the transformer takes.

    Attributes:
      prompt_embeds: float32 ``(B, L, D)``: T2V ``L = max_sequence_length`` (256), ``D`` the Llama width
        (4096); I2V ``L = ceil(image_emb_len / interleave) + max_sequence_length - 4`` (288 + 252 = 540).
      prompt_attention_mask: int32 ``(B, L)``, 1 for tokens, 0 for padding (right padding: ones then zeros).
      pooled_prompt_embeds: float32 ``(B, D2)``, CLIP's pooled output (768 for CLIP-L).
    """

    prompt_embeds: jax.Array
    prompt_attention_mask: np.ndarray
    pooled_prompt_embeds: jax.Array


@dataclass
class HunyuanVideoTextEncoders:
    """The text side of a HunyuanVideo pipeline (diffusers' component names).

    Attributes:
      text_encoder: parameters of :func:`vidax.encoders.llama.llama_specs` (T2V, ``LlamaModel``) or of
        :func:`vidax.encoders.llava.llava_specs` (I2V, ``LlavaForConditionalGeneration``).
      text_encoder_config: :class:`LlamaConfig` (T2V) or :class:`LlavaConfig` (I2V).
      tokenizer: the Llama-3 tokenizer (right padding).
      text_encoder_2, text_encoder_2_config: CLIP-L's text tower.
      tokenizer_2: CLIP's tokenizer.
      image_processor: the I2V ``image_processor/`` settings (``CLIPImageProcessor``); None for T2V.
    """

    text_encoder: dict
    text_encoder_config: LlamaConfig | LlavaConfig
    tokenizer: Tokenizer
    text_encoder_2: dict
    text_encoder_2_config: CLIPTextConfig
    tokenizer_2: Tokenizer
    image_processor: CLIPImageProcessorConfig | None = None

    @property
    def takes_image(self) -> bool:
        """Whether the text encoder is the LLaVA of the image-to-video pipeline."""
        return isinstance(self.text_encoder_config, LlavaConfig)


# --------------------------------------------------------------------------- inputs


def _prompts(prompts: str | Sequence[str]) -> list[str]:
    if isinstance(prompts, str):
        prompts = [prompts]
    prompts = list(prompts)
    if not prompts or not all(isinstance(p, str) for p in prompts):
        raise ValueError("prompts must be a string or a non-empty list of strings")
    return prompts


def _template(template: dict[str, Any]) -> str:
    if not isinstance(template, dict) or not isinstance(template.get("template"), str):
        raise ValueError("prompt_template must be a dict with a 'template' string (e.g. T2V_PROMPT_TEMPLATE)")
    if "{}" not in template["template"]:
        raise ValueError("prompt_template['template'] has no '{}' placeholder for the prompt")
    return template["template"]


def _positive(name: str, value: Any) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def template_crop_start(tokenizer: Tokenizer, prompt_template: dict[str, Any], *, image: bool = False) -> int:
    """The template's ``crop_start``, or the reference's count when it has none: the template's tokens (with
    the BOS token) minus 2 (T2V: ``{}`` and ``<|eot_id|>``) or minus 5 (I2V).

    Not followed: the reference tokenizes the template with ``padding="max_length"`` and no length, which pads
    to the tokenizer's ``model_max_length`` where that is a real limit; the count here is the template's own.

    Raises:
      ValueError: a ``crop_start`` that is not a non-negative integer.
    """
    crop = prompt_template.get("crop_start")
    if crop is None:
        crop = len(tokenizer.encode_ids(_template(prompt_template))) - (5 if image else 2)
    if not isinstance(crop, (int, np.integer)) or isinstance(crop, bool) or crop < 0:
        raise ValueError(f"prompt_template crop_start must be a non-negative integer, got {crop!r}")
    return int(crop)


# --------------------------------------------------------------------------- text to video


def llama_prompt_embeds(
    encoders: HunyuanVideoTextEncoders,
    prompts: str | Sequence[str],
    *,
    prompt_template: dict[str, Any] = T2V_PROMPT_TEMPLATE,
    max_sequence_length: int = 256,
    num_hidden_layers_to_skip: int = 2,
    attention_impl: AttentionImpl | str = AttentionImpl.XLA,
) -> tuple[jax.Array, np.ndarray]:
    """``HunyuanVideoPipeline._get_llama_prompt_embeds``: the template-framed prompts through the Llama,
    the frame cropped.

    Returns:
      float32 ``(B, max_sequence_length, D)`` embeddings and the int32 ``(B, max_sequence_length)`` mask.

    Raises:
      ValueError: the encoders are the I2V LLaVA, bad prompts, template or sizes.
    """
    if encoders.takes_image:
        raise ValueError("llama_prompt_embeds: these are the image-to-video encoders (LLaVA); use llava_prompt_embeds")
    prompts = _prompts(prompts)
    template = _template(prompt_template)
    crop = template_crop_start(encoders.tokenizer, prompt_template)
    length = _positive("max_sequence_length", max_sequence_length) + crop
    ids, mask = encoders.tokenizer([template.format(p) for p in prompts], length)
    hidden = llama.encode(encoders.text_encoder, encoders.text_encoder_config, ids, mask,
                          num_hidden_layers_to_skip=num_hidden_layers_to_skip, attention_impl=attention_impl)
    return hidden[:, crop:], np.ascontiguousarray(mask[:, crop:], np.int32)


def clip_pooled_embeds(
    encoders: HunyuanVideoTextEncoders,
    prompts: str | Sequence[str],
    *,
    max_sequence_length: int = 77,
    attention_impl: AttentionImpl | str = AttentionImpl.XLA,
) -> jax.Array:
    """``_get_clip_prompt_embeds`` (both pipelines): CLIP's ``pooler_output`` of the prompts padded to 77.

    Returns:
      float32 ``(B, hidden_size)`` of CLIP (768 for CLIP-L).
    """
    prompts = _prompts(prompts)
    ids, _ = encoders.tokenizer_2(prompts, _positive("max_sequence_length", max_sequence_length))
    return clip_text.encode(encoders.text_encoder_2, encoders.text_encoder_2_config, ids,
                            attention_impl=attention_impl)[1]


def encode_prompt_t2v(
    encoders: HunyuanVideoTextEncoders,
    prompts: str | Sequence[str],
    *,
    prompt_template: dict[str, Any] = T2V_PROMPT_TEMPLATE,
    max_sequence_length: int = 256,
    num_hidden_layers_to_skip: int = 2,
    attention_impl: AttentionImpl | str = AttentionImpl.XLA,
) -> PromptEmbeds:
    """``HunyuanVideoPipeline.encode_prompt(prompt)`` (``num_videos_per_prompt=1``).

    Args:
      encoders: the T2V text encoders (:func:`load_text_encoders`).
      prompts: one prompt or a batch; each is encoded as it would be alone (right padding, per-row masks).
      prompt_template: :data:`T2V_PROMPT_TEMPLATE` or another with ``template`` and optional ``crop_start``.
      max_sequence_length: text tokens kept after the crop (256).
      num_hidden_layers_to_skip: the Llama hidden state taken (2: ``hidden_states[-3]``).
      attention_impl: see :mod:`vidax.core.attention`.

    Returns:
      :class:`PromptEmbeds`: ``prompt_embeds`` float32 ``(B, 256, 4096)``, ``prompt_attention_mask`` int32
      ``(B, 256)``, ``pooled_prompt_embeds`` float32 ``(B, 768)`` (sizes of the released model).

    Raises:
      ValueError: the I2V encoders, bad prompts, template or sizes.
    """
    embeds, mask = llama_prompt_embeds(encoders, prompts, prompt_template=prompt_template,
                                       max_sequence_length=max_sequence_length,
                                       num_hidden_layers_to_skip=num_hidden_layers_to_skip,
                                       attention_impl=attention_impl)
    return PromptEmbeds(embeds, mask, clip_pooled_embeds(encoders, prompts, attention_impl=attention_impl))


# --------------------------------------------------------------------------- image to video


def expand_image_tokens(input_ids: np.ndarray, image_token_index: int, image_emb_len: int, image_emb_start: int,
                        image_emb_end: int, pad_token_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``_expand_input_ids_with_image_tokens``: each row's image token becomes ``image_emb_len`` placeholders.

    The other tokens shift right by ``image_emb_len - 1``, the rows are filled with ``pad_token_id`` to
    ``L + image_emb_len - 1``; the attention mask is ``ids != pad_token_id`` and the RoPE positions are
    ``cumsum(mask) - 1`` on valid tokens, 1 on the rest (the reference's ``position_ids``).

    Args:
      input_ids: ``(B, L)`` token ids with one image token per row, at ``image_emb_start``.

    Returns:
      int32 ``(input_ids, attention_mask, position_ids)``, each ``(B, L + image_emb_len - 1)``.

    Raises:
      ValueError: a row without exactly one image token, or with it elsewhere than ``image_emb_start``, or
        ``image_emb_end - image_emb_start != image_emb_len`` (the reference would misplace the image).
    """
    ids = np.asarray(input_ids)
    b, length = ids.shape
    if image_emb_end - image_emb_start != image_emb_len or image_emb_start < 0:
        raise ValueError(f"prompt_template: image_emb_end - image_emb_start ({image_emb_end} - {image_emb_start}) "
                         f"must equal image_emb_len ({image_emb_len})")
    is_image = ids == image_token_index
    counts = is_image.sum(axis=1)
    if (counts != 1).any():
        raise ValueError(f"each prompt must hold the image token (id {image_token_index}) exactly once, from the "
                         f"template; found {counts.tolist()} (does a prompt contain '<image>', or does the template "
                         "lack it?)")
    if not (image_emb_start < length and is_image[:, image_emb_start].all()):
        raise ValueError(f"the template's image token must be token {image_emb_start} (image_emb_start); it is at "
                         f"{np.argmax(is_image, axis=1).tolist()}: the template's image_emb_start does not fit this "
                         "tokenizer")
    expanded_length = length + image_emb_len - 1
    out = np.full((b, expanded_length), pad_token_id, np.int64)
    new_positions = np.cumsum(is_image * (image_emb_len - 1) + 1, axis=1) - 1
    rows, cols = np.nonzero(~is_image)
    out[rows, new_positions[rows, cols]] = ids[rows, cols]
    out[:, image_emb_start:image_emb_end] = image_token_index
    mask = (out != pad_token_id).astype(np.int32)
    positions = np.where(mask == 1, np.cumsum(mask, axis=1) - 1, 1).astype(np.int32)
    return out.astype(np.int32), mask, positions


def _assistant_starts(ids: np.ndarray, end_header_id: int) -> np.ndarray:
    """Per row: the position after its last ``<|end_header_id|>`` (the assistant turn's text), or ``L`` when
    the row has fewer than the frame's three (truncation cut the assistant header; the reference's fallback)."""
    starts = np.full((ids.shape[0],), ids.shape[1], np.int64)
    for i, row in enumerate(ids):
        where = np.flatnonzero(row == end_header_id)
        if len(where) >= 3:
            starts[i] = where[-1] + 1
    return starts


def _image_list(images: Any, batch: int) -> list:
    if isinstance(images, (list, tuple)):
        images = list(images)
    else:
        images = [images]
    if len(images) == 1:
        return images * batch
    if len(images) != batch:
        raise ValueError(f"give one image, or one per prompt: {len(images)} images for {batch} prompts")
    return images


def llava_prompt_embeds(
    encoders: HunyuanVideoTextEncoders,
    prompts: str | Sequence[str],
    images: Any,
    *,
    prompt_template: dict[str, Any] = I2V_PROMPT_TEMPLATE,
    max_sequence_length: int = 256,
    num_hidden_layers_to_skip: int = 2,
    image_embed_interleave: int = 2,
    attention_impl: AttentionImpl | str = AttentionImpl.XLA,
) -> tuple[jax.Array, np.ndarray]:
    """``HunyuanVideoImageToVideoPipeline._get_llama_prompt_embeds``: image and prompts through the LLaVA,
    the image positions subsampled and put first, the frame cropped (module docstring).

    Args:
      images: one image (PIL or uint8 ``(H, W, 3)``) for every prompt, or one per prompt.

    Returns:
      float32 ``(B, ceil(image_emb_len / k) + max_sequence_length - 4, D)`` (``k`` the interleave when
      ``0 < k < 6``, else 1) and the int32 mask of that length (ones on the image part).

    Raises:
      ValueError: the T2V encoders, bad prompts or images, a template that does not fit the tokenizer or the
        LLaVA (named), ``crop_start`` below 1.
    """
    if not encoders.takes_image:
        raise ValueError("llava_prompt_embeds: these are the text-to-video encoders (Llama); image-to-video needs "
                         "the LLaVA text encoder of a HunyuanVideo-I2V checkpoint")
    if not isinstance(image_embed_interleave, (int, np.integer)) or isinstance(image_embed_interleave, bool):
        raise ValueError(f"image_embed_interleave must be an integer, got {image_embed_interleave!r}")
    cfg: LlavaConfig = encoders.text_encoder_config
    tokenizer = encoders.tokenizer
    prompts = _prompts(prompts)
    template = _template(prompt_template)
    crop = template_crop_start(tokenizer, prompt_template, image=True)
    if crop < 1:
        raise ValueError("image-to-video needs a prompt_template crop_start of at least 1 (the reference returns "
                         "embeddings and a mask of different lengths without one)")
    emb_len = int(prompt_template.get("image_emb_len", 576))
    emb_start = int(prompt_template.get("image_emb_start", 5))
    emb_end = int(prompt_template.get("image_emb_end", 581))
    if emb_len != cfg.num_image_features:
        raise ValueError(f"prompt_template image_emb_len {emb_len} differs from the LLaVA's {cfg.num_image_features} "
                         "image features per image")
    end_header_id = tokenizer.token_to_id(END_HEADER_TOKEN)
    if end_header_id is None:
        raise ValueError(f"the Llama tokenizer has no {END_HEADER_TOKEN!r} token (not the Llama-3 tokenizer of "
                         "HunyuanVideo-I2V?)")
    if encoders.image_processor is None:
        raise ValueError("image-to-video encoders need the image_processor/ settings (HunyuanVideoTextEncoders."
                         "image_processor)")
    length = _positive("max_sequence_length", max_sequence_length) + crop
    ids, mask = tokenizer([template.format(p) for p in prompts], length)
    pad = cfg.pad_token_id if cfg.pad_token_id is not None else tokenizer.pad_id
    expanded, expanded_mask, positions = expand_image_tokens(ids, cfg.image_token_index, emb_len, emb_start, emb_end,
                                                             pad)
    starts = _assistant_starts(ids, end_header_id)
    if (starts - _ASSISTANT_FRAME_TOKENS < crop).any():
        raise ValueError(f"the assistant turn starts at tokens {starts.tolist()}, before crop_start {crop} + "
                         f"{_ASSISTANT_FRAME_TOKENS}: the template does not fit this tokenizer")
    pixels = preprocess_images(_image_list(images, len(prompts)), encoders.image_processor)
    hidden = llava.encode(encoders.text_encoder, cfg, expanded, expanded_mask, pixels, position_ids=positions,
                          num_hidden_layers_to_skip=num_hidden_layers_to_skip, attention_impl=attention_impl)

    shift = emb_len - 1  # expanded position of unexpanded token j (after the image) is j + shift
    text_index = np.stack([np.concatenate([np.arange(crop, a - _ASSISTANT_FRAME_TOKENS), np.arange(a, length)])
                           for a in starts])
    text = jnp.take_along_axis(hidden, jnp.asarray(text_index + shift)[..., None], axis=1)
    text_mask = np.take_along_axis(mask, text_index, axis=1)
    image = hidden[:, emb_start:emb_end]
    if 0 < image_embed_interleave < 6:
        image = image[:, ::image_embed_interleave]
    embeds = jnp.concatenate([image, text], axis=1)
    full_mask = np.concatenate([np.ones(image.shape[:2], np.int32), text_mask.astype(np.int32)], axis=1)
    return embeds, full_mask


def encode_prompt_i2v(
    encoders: HunyuanVideoTextEncoders,
    prompts: str | Sequence[str],
    images: Any,
    *,
    prompt_template: dict[str, Any] = I2V_PROMPT_TEMPLATE,
    max_sequence_length: int = 256,
    num_hidden_layers_to_skip: int = 2,
    image_embed_interleave: int = 2,
    attention_impl: AttentionImpl | str = AttentionImpl.XLA,
) -> PromptEmbeds:
    """``HunyuanVideoImageToVideoPipeline.encode_prompt(image, prompt)``.

    Args:
      encoders: the I2V text encoders (:func:`load_text_encoders` on a HunyuanVideo-I2V folder).
      prompts: one prompt or a batch.
      images: the conditioning image (PIL or uint8 ``(H, W, 3)``) for every prompt, or one per prompt.
      image_embed_interleave: keep every k-th image position (the pipeline passes 2 for the ``latent_concat``
        transformer, 4 for ``token_replace``); outside ``1..5`` all are kept.
      prompt_template, max_sequence_length, num_hidden_layers_to_skip, attention_impl: as
        :func:`encode_prompt_t2v` (template :data:`I2V_PROMPT_TEMPLATE`).

    Returns:
      :class:`PromptEmbeds`: ``prompt_embeds`` float32 ``(B, 540, 4096)`` and ``prompt_attention_mask`` int32
      ``(B, 540)`` for the released model with interleave 2 (288 image + 252 text positions),
      ``pooled_prompt_embeds`` float32 ``(B, 768)``.

    Raises:
      ValueError: see :func:`llava_prompt_embeds`.
    """
    embeds, mask = llava_prompt_embeds(encoders, prompts, images, prompt_template=prompt_template,
                                       max_sequence_length=max_sequence_length,
                                       num_hidden_layers_to_skip=num_hidden_layers_to_skip,
                                       image_embed_interleave=image_embed_interleave, attention_impl=attention_impl)
    return PromptEmbeds(embeds, mask, clip_pooled_embeds(encoders, prompts, attention_impl=attention_impl))


# --------------------------------------------------------------------------- loading


@dataclass(frozen=True)
class TextEncoderFolders:
    """The text-side folders of a HunyuanVideo checkpoint, checked (:func:`text_encoder_folders`).

    Attributes:
      text_encoder: ``LlamaModel`` / ``LlamaForCausalLM`` (T2V) or ``LlavaForConditionalGeneration`` (I2V) folder.
      kind: ``"llama"`` or ``"llava"``, from its ``config.json``.
      tokenizer, text_encoder_2, tokenizer_2: the other folders (the original release keeps each tokenizer in its
        model's folder).
      image_processor: the folder of the I2V ``preprocessor_config.json``, else None.
    """

    text_encoder: Path
    kind: str
    tokenizer: Path
    text_encoder_2: Path
    tokenizer_2: Path
    image_processor: Path | None


def text_encoder_folders(source: Any) -> TextEncoderFolders:
    """Check that a HunyuanVideo checkpoint has every text-side file the pipeline reads, before anything is loaded.

    Args:
      source: a diffusers pipeline folder (``text_encoder/``, ``tokenizer/``, ``text_encoder_2/``, ``tokenizer_2/``
        and, for I2V, ``image_processor/``, as both pipelines' ``model_index.json`` list them), or an object with
        those five paths as attributes (``vidax.models.hunyuanvideo.layout.HunyuanVideoCheckpoint``, any layout;
        ``image_processor`` None for T2V). Only the text encoder's ``config.json`` is read (Llama or LLaVA).

    Raises:
      CheckpointError: a missing folder or file, named with what it should hold (e.g. a Llama folder without its
        tokenizer), or a text encoder that is neither Llama nor LLaVA.
    """
    if isinstance(source, (str, os.PathLike)):
        root = Path(source)
        te, tok, te2, tok2, proc = (root / n for n in ("text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2",
                                                       "image_processor"))
    else:
        te, tok, te2, tok2 = (Path(getattr(source, n)) for n in ("text_encoder", "tokenizer", "text_encoder_2",
                                                                 "tokenizer_2"))
        proc = getattr(source, "image_processor", None)
        proc = None if proc is None else Path(proc)
    if not (te / "config.json").is_file():
        raise CheckpointError(f"{te}: the Llama text encoder folder (config.json + safetensors) is missing or has no "
                              "config.json")
    model_type = read_json(te / "config.json").get("model_type")
    if model_type not in ("llama", "llava"):
        raise CheckpointError(f"{te / 'config.json'}: model_type {model_type!r}; HunyuanVideo's text encoder is a "
                              "Llama (text-to-video) or a LLaVA (image-to-video)")
    if not (tok / "tokenizer.json").is_file():
        raise CheckpointError(f"{tok}: the Llama text encoder has no tokenizer (expected {tok / 'tokenizer.json'}); "
                              "copy the tokenizer of the text encoder's release (xtuner/llava-llama-3-8b-v1_1-"
                              "transformers) into it")
    if not (te2 / "config.json").is_file():
        raise CheckpointError(f"{te2}: the CLIP text encoder folder (config.json + safetensors) is missing or has no "
                              "config.json")
    if not ((tok2 / "tokenizer.json").is_file() or ((tok2 / "vocab.json").is_file()
                                                   and (tok2 / "merges.txt").is_file())):
        raise CheckpointError(f"{tok2}: the CLIP text encoder has no tokenizer (expected tokenizer.json, or vocab.json "
                              "and merges.txt)")
    if model_type == "llava":
        if proc is None or not (proc / "preprocessor_config.json").is_file():
            where = proc if proc is not None else te.parent / "image_processor"
            raise CheckpointError(f"{where}: the LLaVA text encoder's image processor settings are missing "
                                  "(expected preprocessor_config.json, a CLIPImageProcessor)")
    else:
        proc = None
    return TextEncoderFolders(te, model_type, tok, te2, tok2, proc)


def load_tokenizers(folders: TextEncoderFolders) -> tuple[Tokenizer, Tokenizer]:
    """The Llama-3 and CLIP tokenizers (``tokenizer/``, ``tokenizer_2/``).

    Raises:
      CheckpointError: a malformed tokenizer file, or one without the padding token the pipeline needs.
    """
    try:
        tokenizer = Tokenizer.from_folder(folders.tokenizer)
    except ValueError as e:
        raise CheckpointError(f"{folders.tokenizer}: {e}") from None
    return tokenizer, load_clip_tokenizer(folders.tokenizer_2)


def load_text_encoders(source: Any, dtype: Any = np.float32,
                       text_encoder_2_dtype: Any = np.float32) -> HunyuanVideoTextEncoders:
    """The text side of a HunyuanVideo checkpoint, T2V or I2V by its text encoder.

    Every folder and tokenizer is checked and read (:func:`text_encoder_folders`, :func:`load_tokenizers`)
    before any weight is loaded.

    Args:
      source: a diffusers pipeline folder, or an object with the paths ``text_encoder``, ``tokenizer``,
        ``text_encoder_2``, ``tokenizer_2``, ``image_processor`` (``HunyuanVideoCheckpoint``); see
        :func:`text_encoder_folders`.
      dtype: weights of the Llama / LLaVA (``float32`` or ``bfloat16``; norms stay float32).
      text_encoder_2_dtype: weights of CLIP.

    Raises:
      CheckpointError: a missing folder, file or tensor (named), or weights that do not match their config.
      ValueError: an unsupported configuration.
    """
    folders = text_encoder_folders(source)
    tokenizer, tokenizer_2 = load_tokenizers(folders)
    image_processor = None
    if folders.kind == "llava":
        image_processor = CLIPImageProcessorConfig.from_dict(read_json(folders.image_processor /
                                                                       "preprocessor_config.json"))
        params, cfg = llava.load_llava(folders.text_encoder, dtype)
    else:
        params, cfg = llama.load_llama(folders.text_encoder, dtype)
    params_2, cfg_2 = clip_text.load_clip_text(folders.text_encoder_2, text_encoder_2_dtype)
    return HunyuanVideoTextEncoders(params, cfg, tokenizer, params_2, cfg_2, tokenizer_2, image_processor)


# --------------------------------------------------------------------------- small checkpoints (demos, tests)


def fit_prompt_template(tokenizer: Tokenizer, prompt_template: dict[str, Any],
                        num_image_features: int | None = None) -> dict[str, Any]:
    """A prompt template with its token positions counted for ``tokenizer`` (for tiny checkpoints, whose
    tokenizer and vision tower are not the released ones).

    ``crop_start`` becomes the number of tokens before the prompt, BOS included (95 for :data:`T2V_PROMPT_TEMPLATE`
    and 103 for :data:`I2V_PROMPT_TEMPLATE` with the released tokenizer). With ``num_image_features`` (a LLaVA's
    rows per image) also ``image_emb_start`` (the ``<image>`` token's index: 5), ``image_emb_len`` and
    ``image_emb_end``. (The reference's own count when ``crop_start`` is None is this for the T2V template, but
    one token into the prompt for the I2V one: it removes 5 of the 6 tokens that follow the ``{}``.)

    Raises:
      ValueError: with ``num_image_features``, a template without an ``<image>`` token for this tokenizer.
    """
    template = _template(prompt_template)
    fitted = {**prompt_template, "crop_start": len(tokenizer.encode_ids(template.split("{}")[0]))}
    if num_image_features is not None:
        image_id = tokenizer.token_to_id("<image>")
        ids = tokenizer.encode_ids(template)
        if image_id is None or image_id not in ids:
            raise ValueError("fit_prompt_template: the template holds no '<image>' token for this tokenizer")
        start = ids.index(image_id)
        fitted.update(image_emb_start=start, image_emb_end=start + num_image_features,
                      image_emb_len=num_image_features)
    return fitted


def _demo_corpus() -> list[str]:
    from vidax.encoders.tokenizer import _DEMO_WORDS

    words = list(dict.fromkeys(_DEMO_WORDS))
    sentences = [" ".join(words[i:i + 12]) for i in range(0, len(words), 12)]
    frame = "system\n\n{}<|eot_id|>assistant<|end_header_id|>user"
    return [T2V_PROMPT_TEMPLATE["template"], I2V_PROMPT_TEMPLATE["template"], *sentences, *[frame] * 8]


def write_demo_text_encoders(folder: str | os.PathLike, rng: np.random.Generator, *, image: bool = False,
                             hidden_size: int = 32, num_hidden_layers: int = 4, clip_hidden_size: int = 32,
                             vision_image_size: int = 28, vision_patch_size: int = 7) -> None:
    """Write the text side of a tiny HunyuanVideo folder with random weights, without PyTorch.

    Writes ``tokenizer/`` (Llama-3-style, with ``<image>`` and ``<pad>``), ``tokenizer_2/`` (CLIP), ``text_encoder/``
    (``LlamaModel``, or with ``image`` a ``LlavaForConditionalGeneration`` whose vision tower sees
    ``vision_image_size`` pixels in patches of ``vision_patch_size``), ``text_encoder_2/`` (``CLIPTextModel``,
    legacy ``eos_token_id`` 2 as the release) and, with ``image``, ``image_processor/``. Names and configs are the
    transformers layouts the real folders have; the weights come from ``rng``. Encode with the templates
    :func:`fit_prompt_template` gives for its tokenizer (and LLaVA).
    """
    from vidax.checkpoint.demo import TRANSFORMERS_VERSION, random_state_dict
    from vidax.checkpoint.writer import save_component, write_json
    from vidax.encoders.clip import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD
    from vidax.encoders.tokenizer import write_clip_tokenizer, write_llama3_tokenizer

    folder = Path(folder)
    corpus = _demo_corpus()
    tokenizer = Tokenizer.from_folder(write_llama3_tokenizer(folder / "tokenizer", corpus, num_merges=160))
    tokenizer_2 = load_clip_tokenizer(write_clip_tokenizer(folder / "tokenizer_2", corpus[2:-8], num_merges=120))
    text = {"architectures": ["LlamaModel"], "model_type": "llama", "vocab_size": tokenizer.vocab_size,
            "hidden_size": hidden_size, "intermediate_size": 2 * hidden_size, "num_hidden_layers": num_hidden_layers,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": hidden_size // 4, "hidden_act": "silu",
            "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "rope_scaling": None, "max_position_embeddings": 8192,
            "attention_bias": False, "mlp_bias": False, "bos_token_id": tokenizer.token_to_id("<|begin_of_text|>"),
            "eos_token_id": tokenizer.eos_id, "pad_token_id": tokenizer.pad_id, "torch_dtype": "float32",
            "transformers_version": TRANSFORMERS_VERSION}
    if image:
        config = {"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava",
                  "image_token_index": tokenizer.token_to_id("<image>"), "pad_token_id": tokenizer.pad_id,
                  "projector_hidden_act": "gelu", "vision_feature_layer": -2,
                  "vision_feature_select_strategy": "default", "image_seq_length": (vision_image_size //
                                                                                    vision_patch_size) ** 2,
                  "text_config": {k: v for k, v in text.items() if k not in ("architectures", "transformers_version")},
                  "vision_config": {"model_type": "clip_vision_model", "hidden_size": 24, "intermediate_size": 48,
                                    "num_hidden_layers": 3, "num_attention_heads": 4,
                                    "image_size": vision_image_size, "patch_size": vision_patch_size,
                                    "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5, "projection_dim": 32},
                  "transformers_version": TRANSFORMERS_VERSION}
        cfg = LlavaConfig.from_dict(config)
        tensors = random_state_dict(llava.llava_keymap(cfg), llava.llava_specs(cfg), rng)
        size = {"shortest_edge": vision_image_size}
        crop = {"height": vision_image_size, "width": vision_image_size}
        (folder / "image_processor").mkdir(parents=True, exist_ok=True)
        write_json(folder / "image_processor" / "preprocessor_config.json", {
            "image_processor_type": "CLIPImageProcessor", "size": size, "crop_size": crop, "do_resize": True,
            "do_center_crop": True, "do_rescale": True, "do_normalize": True, "do_convert_rgb": True,
            "rescale_factor": 1 / 255, "resample": 3, "image_mean": list(OPENAI_CLIP_MEAN),
            "image_std": list(OPENAI_CLIP_STD)})
    else:
        config = text
        cfg = LlamaConfig.from_dict(config)
        tensors = random_state_dict(llama.llama_keymap(cfg), llama.llama_specs(cfg), rng)
    save_component(folder / "text_encoder", "model.safetensors", tensors, config)
    clip_config = {"architectures": ["CLIPTextModel"], "model_type": "clip_text_model",
                   "vocab_size": tokenizer_2.vocab_size, "hidden_size": clip_hidden_size,
                   "intermediate_size": 2 * clip_hidden_size, "num_hidden_layers": 2, "num_attention_heads": 4,
                   "max_position_embeddings": 77, "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5,
                   "projection_dim": clip_hidden_size, "bos_token_id": 0, "eos_token_id": 2, "pad_token_id": 1,
                   "torch_dtype": "float32", "transformers_version": TRANSFORMERS_VERSION}
    ccfg = CLIPTextConfig.from_dict(clip_config)
    save_component(folder / "text_encoder_2", "model.safetensors",
                   random_state_dict(clip_text.clip_text_keymap(ccfg), clip_text.clip_text_specs(ccfg), rng),
                   clip_config)
