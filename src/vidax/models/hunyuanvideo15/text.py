"""HunyuanVideo-1.5's prompt encoding: the MLLM (Qwen2.5-VL) hidden states, and the glyph texts for byT5.

Follows diffusers ``pipelines/hunyuan_video1_5/pipeline_hunyuan_video1_5.py`` (``HunyuanVideo15Pipeline``:
``format_text_input``, ``extract_glyph_texts``, ``_get_mllm_prompt_embeds``, ``encode_prompt``); the image-to-video
pipeline (``pipeline_hunyuan_video1_5_image2video.py``) encodes prompts identically (the image conditions the
transformer through SigLIP, not the text encoder). The original repository (Tencent-Hunyuan/HunyuanVideo-1.5,
``hyvideo/models/text_encoders/__init__.py``: ``TextEncoder``, template ``li-dit-encode-video-json``) is followed
where the two differ (docs/design.md, "HunyuanVideo-1.5"):

MLLM part (:func:`mllm_prompt_embeds`)::

    conversation = [{"role": "system", "content": SYSTEM_MESSAGE}, {"role": "user", "content": prompt or " "}]
    ids, mask = tokenizer.apply_chat_template(conversation, add_generation_prompt=True,
                                              padding="max_length", max_length=1000 + crop_start, truncation=True)
    hidden = Qwen2_5_VLTextModel(ids, mask).hidden_states[-(2 + 1)]      # output of layer 26 of 28, no final norm
    prompt_embeds, prompt_embeds_mask = hidden[:, crop_start:], mask[:, crop_start:]

``crop_start`` is the number of tokens up to and including ``<|im_start|>user\\n`` (the system turn and the user
header): diffusers hard-codes 108, the original counts it with the tokenizer (:func:`template_crop_start`); the
default here is the count, which serves tiny tokenizers too.

Glyph part: :func:`extract_glyph_texts` finds the quoted texts of a prompt; the byT5 encoder that embeds them
(``vidax.encoders.byt5``) is handed to :func:`encode_prompt` as a callable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

from vidax.checkpoint.errors import CheckpointError
from vidax.core.attention import AttentionImpl
from vidax.encoders import qwen2_5_vl
from vidax.encoders.byt5 import extract_glyph_texts  # noqa: F401 - re-exported: a prompt's glyph text
from vidax.encoders.llama import LlamaConfig
from vidax.encoders.qwen2_tokenizer import IM_START, Qwen2Tokenizer

#: The system message of the video template (diffusers ``HunyuanVideo15Pipeline.system_message``; the original's
#: ``PROMPT_TEMPLATE_ENCODE_VIDEO_JSON``). Both write it as a backslash-continued string literal, so it holds the
#: next source line's indentation: eight spaces before each numbered item (after the space before the backslash).
SYSTEM_MESSAGE = (
    "You are a helpful assistant. Describe the video by detailing the following aspects:         "
    "1. The main content and theme of the video.         "
    "2. The color, shape, size, texture, quantity, text, and spatial relationships of the objects.         "
    "3. Actions, events, behaviors temporal relationships, physical movement changes of the objects.         "
    "4. background environment, light, style and atmosphere.         "
    "5. camera angles, movements, and transitions used in the video."
)

#: diffusers' ``prompt_template_encode_start_idx``: the template tokens before the prompt with the released
#: tokenizer (what :func:`template_crop_start` counts there).
CROP_START = 108
#: diffusers' ``tokenizer_max_length`` (the original's ``max_length``): prompt tokens kept after the crop.
TOKENIZER_MAX_LENGTH = 1000
#: ``hidden_states[-(k + 1)]`` with k = 2 (the original's ``hidden_state_skip_layer``), no final norm.
NUM_HIDDEN_LAYERS_TO_SKIP = 2

#: The token text whose end is the start of the prompt in the tokenized template (the original's marker).
USER_MARKER = f"{IM_START}user\n"

#: The prompt the original counts its template with, and the length it tokenizes it to for that count.
_CROP_PROBE, _CROP_PROBE_LENGTH = "a photo of a cat", 256


class PromptEmbeds(NamedTuple):
    """The text conditioning the HunyuanVideo-1.5 transformer takes (diffusers ``encode_prompt``'s four outputs).

    Attributes:
      prompt_embeds: float32 ``(B, 1000, 3584)``, the MLLM hidden states (``(B, tokenizer_max_length,
        hidden_size)``).
      prompt_embeds_mask: int32 ``(B, 1000)``, 1 for prompt tokens (and the chat frame's closing tokens), 0 for
        padding; right padding.
      prompt_embeds_2: the byT5 glyph embeddings, ``(B, 256, 1472)`` (zeros for a prompt without quoted text).
      prompt_embeds_mask_2: ``(B, 256)`` glyph mask (zeros where there is no glyph text).
    """

    prompt_embeds: jax.Array
    prompt_embeds_mask: np.ndarray
    prompt_embeds_2: Any
    prompt_embeds_mask_2: Any


@dataclass
class MLLMTextEncoder:
    """The MLLM side of a HunyuanVideo-1.5 pipeline (diffusers' ``text_encoder`` and ``tokenizer``).

    Attributes:
      params: parameters of :func:`vidax.encoders.llama.llama_specs` (:func:`vidax.encoders.qwen2_5_vl.
        load_qwen2_5_vl`).
      config: the Qwen2.5-VL language model's architecture.
      tokenizer: Qwen2's tokenizer (right padding).
    """

    params: dict
    config: LlamaConfig
    tokenizer: Qwen2Tokenizer


# --------------------------------------------------------------------------- inputs


def _prompts(prompts: str | Sequence[str]) -> list[str]:
    if isinstance(prompts, str):
        prompts = [prompts]
    prompts = list(prompts)
    if not prompts or not all(isinstance(p, str) for p in prompts):
        raise ValueError("prompts must be a string or a non-empty list of strings")
    return prompts


def _positive(name: str, value: Any) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def format_text_input(prompts: Sequence[str], system_message: str = SYSTEM_MESSAGE) -> list[list[dict[str, str]]]:
    """diffusers ``format_text_input``: one system + user conversation per prompt, an empty prompt as ``" "`` (the
    original's ``prevent_empty_text``)."""
    return [[{"role": "system", "content": system_message}, {"role": "user", "content": p if p else " "}]
            for p in prompts]


def template_crop_start(tokenizer: Qwen2Tokenizer, system_message: str = SYSTEM_MESSAGE) -> int:
    """The template tokens before the prompt, counted as the original's ``TextEncoder.calculate_crop_start`` does:
    the position just past the first ``<|im_start|>user\\n`` in the template of ``"a photo of a cat"`` tokenized to
    256 tokens (108 for Qwen2.5-VL's tokenizer and :data:`SYSTEM_MESSAGE`: diffusers' :data:`CROP_START`).

    Raises:
      ValueError: the marker is not within those tokens (the original falls back to no crop at all).
    """
    ids = tokenizer.apply_chat_template(format_text_input([_CROP_PROBE], system_message), _CROP_PROBE_LENGTH,
                                        warn=False)[0][0]
    marker = tokenizer.encode_ids(USER_MARKER)
    for i in range(len(ids) - len(marker) + 1):
        if list(ids[i:i + len(marker)]) == marker:
            return i + len(marker)
    raise ValueError(f"the chat template's user header {USER_MARKER!r} is not within its first {_CROP_PROBE_LENGTH} "
                     "tokens (is the system message that long?); give crop_start explicitly")


# --------------------------------------------------------------------------- MLLM


def mllm_prompt_embeds(
    encoder: MLLMTextEncoder,
    prompts: str | Sequence[str],
    *,
    tokenizer_max_length: int = TOKENIZER_MAX_LENGTH,
    num_hidden_layers_to_skip: int = NUM_HIDDEN_LAYERS_TO_SKIP,
    system_message: str = SYSTEM_MESSAGE,
    crop_start: int | None = None,
    attention_impl: AttentionImpl | str = AttentionImpl.XLA,
) -> tuple[jax.Array, np.ndarray]:
    """``HunyuanVideo15Pipeline._get_mllm_prompt_embeds``: the chat-framed prompts through Qwen2.5-VL's language
    model, the frame before the prompt cropped.

    Args:
      encoder: the MLLM (:func:`load_mllm`).
      prompts: one prompt or a batch; each row is what it would be alone (right padding). ``""`` is encoded as
        ``" "``.
      tokenizer_max_length: tokens kept after the crop (1000); the template is tokenized to this plus
        ``crop_start``, right-truncated (a warning says when a prompt is cut).
      num_hidden_layers_to_skip: ``k`` in ``hidden_states[-(k + 1)]`` (2).
      system_message: the system turn (:data:`SYSTEM_MESSAGE`).
      crop_start: template tokens dropped from the front; None: :func:`template_crop_start` (the original's count;
        108 with the released tokenizer, diffusers' constant).
      attention_impl: see :mod:`vidax.core.attention`.

    Returns:
      ``(prompt_embeds, prompt_embeds_mask)``: float32 ``(B, tokenizer_max_length, hidden_size)`` and int32
      ``(B, tokenizer_max_length)`` (the attention mask after the crop).

    Raises:
      ValueError: bad prompts or sizes, a ``crop_start`` that is negative, or see :func:`template_crop_start`.
    """
    prompts = _prompts(prompts)
    length = _positive("tokenizer_max_length", tokenizer_max_length)
    if not isinstance(system_message, str):
        raise ValueError("system_message must be a string")
    if crop_start is None:
        crop_start = template_crop_start(encoder.tokenizer, system_message)
    if not isinstance(crop_start, (int, np.integer)) or isinstance(crop_start, bool) or crop_start < 0:
        raise ValueError(f"crop_start must be a non-negative integer, got {crop_start!r}")
    crop = int(crop_start)
    n = encoder.config.num_hidden_layers
    if (not isinstance(num_hidden_layers_to_skip, (int, np.integer)) or isinstance(num_hidden_layers_to_skip, bool)
            or not 0 <= num_hidden_layers_to_skip <= n):
        raise ValueError(f"num_hidden_layers_to_skip must be an integer in [0, {n}], got {num_hidden_layers_to_skip!r}")
    ids, mask = encoder.tokenizer.apply_chat_template(format_text_input(prompts, system_message), length + crop)
    hidden = qwen2_5_vl.encode(encoder.params, encoder.config, ids, mask,
                               hidden_state_index=-(int(num_hidden_layers_to_skip) + 1), attention_impl=attention_impl)
    return hidden[:, crop:], np.ascontiguousarray(mask[:, crop:], np.int32)


# --------------------------------------------------------------------------- glyphs

# (extract_glyph_texts lives beside the byT5 encoder, vidax.encoders.byt5, and is re-exported here.)


# --------------------------------------------------------------------------- both


def encode_prompt(
    encoder: MLLMTextEncoder,
    prompts: str | Sequence[str],
    encode_glyph_texts: Callable[[list[str | None]], tuple[Any, Any]],
    *,
    tokenizer_max_length: int = TOKENIZER_MAX_LENGTH,
    crop_start: int | None = None,
    attention_impl: AttentionImpl | str = AttentionImpl.XLA,
) -> PromptEmbeds:
    """``HunyuanVideo15Pipeline.encode_prompt(prompt)`` (``num_videos_per_prompt=1``; a missing negative prompt is
    ``""``, which the template encodes as ``" "``).

    Args:
      encoder: the MLLM (:func:`load_mllm`).
      prompts: one prompt or a batch.
      encode_glyph_texts: the byT5 side (``vidax.encoders.byt5``): one glyph text per prompt (None where the prompt
        quotes nothing) -> ``(prompt_embeds_2 (B, 256, d_model), prompt_embeds_mask_2 (B, 256))``, zero rows for
        None (diffusers ``_get_byt5_prompt_embeds``).
      tokenizer_max_length, crop_start, attention_impl: see :func:`mllm_prompt_embeds`.

    Raises:
      ValueError: see :func:`mllm_prompt_embeds`.
    """
    prompts = _prompts(prompts)
    embeds, mask = mllm_prompt_embeds(encoder, prompts, tokenizer_max_length=tokenizer_max_length,
                                      crop_start=crop_start, attention_impl=attention_impl)
    embeds_2, mask_2 = encode_glyph_texts([extract_glyph_texts(p) for p in prompts])
    return PromptEmbeds(embeds, mask, embeds_2, mask_2)


# --------------------------------------------------------------------------- loading


def load_mllm(text_encoder: str | Path, tokenizer: str | Path | None = None, dtype: Any = np.float32,
              **load_kwargs) -> MLLMTextEncoder:
    """The Qwen2.5-VL text encoder and its tokenizer; the tokenizer is read and checked before any weight.

    Args:
      text_encoder: diffusers' ``<pipeline>/text_encoder`` (``Qwen2_5_VLTextModel``) or the original release's
        ``ckpts/text_encoder/llm`` (the whole Qwen2.5-VL-7B-Instruct; its vision tower and LM head are not read).
      tokenizer: the tokenizer folder (diffusers' ``<pipeline>/tokenizer``); None: ``text_encoder`` itself (the
        original release keeps the tokenizer beside the model).
      dtype: weights (``float32`` or ``bfloat16``; norms stay float32).
      load_kwargs: passed to :func:`vidax.checkpoint.loader.load_params`.

    Raises:
      CheckpointError: a missing or malformed folder, tokenizer or tensor (named); a tokenizer whose vocabulary is
        larger than the model's embedding table.
      ValueError: an unsupported configuration.
    """
    tokenizer_folder = Path(text_encoder if tokenizer is None else tokenizer)
    tok = Qwen2Tokenizer.from_folder(tokenizer_folder)
    params, cfg = qwen2_5_vl.load_qwen2_5_vl(text_encoder, dtype, **load_kwargs)
    if tok.vocab_size > cfg.vocab_size:
        raise CheckpointError(f"{tokenizer_folder}: the tokenizer has {tok.vocab_size} tokens, more than the text "
                              f"encoder's {cfg.vocab_size} embeddings ({text_encoder}); are they from one release?")
    return MLLMTextEncoder(params, cfg, tok)
