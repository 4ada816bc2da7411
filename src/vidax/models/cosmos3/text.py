"""Cosmos3's prompt path: the prompt's metadata sentences, Qwen3-VL's chat frame, the ids the backbone reads, and
the 3D mRoPE position ids of the text and vision tokens.

Cosmos3 has no separate text encoder: the token ids go straight into the backbone's understanding stream. Follows
diffusers 0.42.1 ``pipelines/cosmos/pipeline_cosmos3_omni.py`` (``Cosmos3OmniPipeline.tokenize_prompt``,
``_prepare_text_segment``, ``_prepare_vision_segment``, ``get_3d_mrope_ids_text_tokens``,
``get_3d_mrope_ids_vae_tokens``) for text-to-video and text-to-image (``num_frames == 1``)::

    text = prompt + ". The video is {num_frames / fps:.1f} seconds long and is of {fps:.0f} FPS."
                  + ". This video is of {height}x{width} resolution."   # negative: "... is not ..." sentences
    ids = apply_chat_template([system, user(text)], add_generation_prompt=True) + [eos, <|vision_start|>]
    text positions: arange(L) on all three axes; vision positions start at L + temporal modality margin (15000)

A sentence is appended as the reference's ``_append`` does: trailing dots of the text stripped, then ``". "`` and the
sentence (just the sentence for an empty text). Image generation (one frame) takes the image system prompt and the
image resolution sentence and no duration sentence.

The chat frame is Qwen3-VL-8B-Instruct's template (the tokenizer the release ships; the test compares
:func:`render_chat` with transformers' ``apply_chat_template`` on the restated Jinja template): unlike Qwen2.5-VL's it
inserts no default system message, so a conversation without the system prompt (``use_system_prompt=False``) is the
user turn alone.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vidax.checkpoint.errors import CheckpointError
from vidax.core.config_values import read_json
from vidax.encoders.qwen2_tokenizer import IM_END, IM_START, Qwen2Tokenizer, _token_content

SYSTEM_PROMPT_IMAGE = "You are a helpful assistant who will generate images from a give prompt."
SYSTEM_PROMPT_VIDEO = "You are a helpful assistant who will generate videos from a give prompt."

DURATION_TEMPLATE = "The video is {duration:.1f} seconds long and is of {fps:.0f} FPS."
IMAGE_RESOLUTION_TEMPLATE = "This image is of {height}x{width} resolution."
VIDEO_RESOLUTION_TEMPLATE = "This video is of {height}x{width} resolution."
INVERSE_DURATION_TEMPLATE = "The video is not {duration:.1f} seconds long and is not of {fps:.0f} FPS."
INVERSE_IMAGE_RESOLUTION_TEMPLATE = "This image is not of {height}x{width} resolution."
INVERSE_VIDEO_RESOLUTION_TEMPLATE = "This video is not of {height}x{width} resolution."

#: The token that starts generation, appended after the eos token.
VISION_START = "<|vision_start|>"

#: The most tokens a prompt may take, chat frame included (the reference has no limit; the understanding cache and
#: the attention grow with it, so vidax bounds it before allocating).
MAX_PROMPT_TOKENS = 4096


def append_sentence(base: str, addition: str) -> str:
    """The reference's ``_append``: ``base`` without trailing dots, ``". "``, ``addition`` (``addition`` alone when
    ``base`` is empty after the strip)."""
    base = base.rstrip(".")
    return f"{base}. {addition}" if base else addition


def augment_prompt(text: str, *, num_frames: int, height: int, width: int, fps: float, negative: bool = False,
                   add_resolution_template: bool = True, add_duration_template: bool = True) -> str:
    """The prompt with the reference's metadata sentences (``tokenize_prompt``'s ``_apply_templates``): duration
    (videos only) then resolution; the inverse sentences for the negative prompt."""
    is_image = num_frames == 1
    if not is_image and add_duration_template:
        template = INVERSE_DURATION_TEMPLATE if negative else DURATION_TEMPLATE
        text = append_sentence(text, template.format(duration=num_frames / fps, fps=fps))
    if add_resolution_template:
        if is_image:
            template = INVERSE_IMAGE_RESOLUTION_TEMPLATE if negative else IMAGE_RESOLUTION_TEMPLATE
        else:
            template = INVERSE_VIDEO_RESOLUTION_TEMPLATE if negative else VIDEO_RESOLUTION_TEMPLATE
        text = append_sentence(text, template.format(height=height, width=width))
    return text


def render_chat(system: str | None, user: str) -> str:
    """Qwen3-VL-Instruct's chat template for an optional system turn and one user turn, with the generation
    prompt (no default system message)::

        [<|im_start|>system\\n{system}<|im_end|>\\n]<|im_start|>user\\n{user}<|im_end|>\\n<|im_start|>assistant\\n
    """
    head = "" if system is None else f"{IM_START}system\n{system}{IM_END}\n"
    return f"{head}{IM_START}user\n{user}{IM_END}\n{IM_START}assistant\n"


@dataclass
class Cosmos3Tokenizer:
    """The pipeline's ``text_tokenizer``: Qwen2 BPE with Qwen3-VL's chat frame, and the two ids appended to every
    prompt (``eos`` from ``tokenizer_config.json``, ``<|vision_start|>``).

    Attributes:
      tokenizer: the BPE (:class:`vidax.encoders.qwen2_tokenizer.Qwen2Tokenizer`).
      eos_id: the eos token's id (``<|im_end|>`` for Qwen3-VL-8B-Instruct's tokenizer).
      vision_start_id: ``<|vision_start|>``'s id.
    """

    tokenizer: Qwen2Tokenizer
    eos_id: int
    vision_start_id: int

    @classmethod
    def from_folder(cls, folder: str | os.PathLike) -> Cosmos3Tokenizer:
        """Read a ``text_tokenizer/`` folder (``tokenizer.json``, ``tokenizer_config.json``).

        Raises:
          CheckpointError: a missing or malformed file, no eos token or no ``<|vision_start|>`` (named).
        """
        folder = Path(folder)
        tok = Qwen2Tokenizer.from_folder(folder)
        config_path = folder / "tokenizer_config.json"
        config = read_json(config_path) if config_path.is_file() else {}
        eos = _token_content(config.get("eos_token")) or IM_END
        eos_id = tok.token_to_id(eos) if isinstance(eos, str) else None
        start_id = tok.token_to_id(VISION_START)
        if eos_id is None or start_id is None:
            missing = [t for t, i in ((eos, eos_id), (VISION_START, start_id)) if i is None]
            raise CheckpointError(f"{folder}: the tokenizer has no {missing} token(s): not a Qwen3-VL tokenizer "
                                  "(Cosmos3 appends eos and <|vision_start|> to every prompt)")
        return cls(tok, int(eos_id), int(start_id))

    def encode_chat(self, text: str, system: str | None) -> list[int]:
        """One conversation's ids (``apply_chat_template(..., tokenize=True, add_generation_prompt=True)``) plus
        ``[eos, <|vision_start|>]``.

        Raises:
          ValueError: a prompt of more than :data:`MAX_PROMPT_TOKENS` tokens.
        """
        if not isinstance(text, str):
            raise ValueError(f"a prompt must be a string, got {type(text).__name__}")
        if len(text) > 64 * MAX_PROMPT_TOKENS:  # bound the tokenizer's work before running it
            raise ValueError(f"a prompt of {len(text):,} characters is too long (at most {MAX_PROMPT_TOKENS} tokens)")
        ids = self.tokenizer.encode_ids(render_chat(system, text)) + [self.eos_id, self.vision_start_id]
        if len(ids) > MAX_PROMPT_TOKENS:
            raise ValueError(f"the prompt takes {len(ids)} tokens with its chat frame and metadata sentences; at "
                             f"most {MAX_PROMPT_TOKENS} are accepted: shorten it")
        return ids

    def tokenize_prompt(self, prompt: str, negative_prompt: str | None = None, *, num_frames: int, height: int,
                        width: int, fps: float = 24.0, use_system_prompt: bool = True,
                        add_resolution_template: bool = True,
                        add_duration_template: bool = True) -> tuple[list[int], list[int]]:
        """``Cosmos3OmniPipeline.tokenize_prompt`` for text-to-video and text-to-image: ``(cond_ids, uncond_ids)``.

        ``negative_prompt`` None is the empty string (then only the inverse sentences), as the reference.

        Raises:
          ValueError: non-string prompts, or too long ones (:meth:`encode_chat`).
        """
        negative_prompt = "" if negative_prompt is None else negative_prompt
        system = None
        if use_system_prompt:
            system = SYSTEM_PROMPT_IMAGE if num_frames == 1 else SYSTEM_PROMPT_VIDEO
        kw = dict(num_frames=num_frames, height=height, width=width, fps=fps,
                  add_resolution_template=add_resolution_template, add_duration_template=add_duration_template)
        for name, text in (("prompt", prompt), ("negative_prompt", negative_prompt)):
            if not isinstance(text, str):
                raise ValueError(f"{name} must be a string, got {type(text).__name__}")
        cond = self.encode_chat(augment_prompt(prompt, **kw), system)
        uncond = self.encode_chat(augment_prompt(negative_prompt, negative=True, **kw), system)
        return cond, uncond


# --------------------------------------------------------------------------- 3D mRoPE position ids


def text_position_ids(num_tokens: int, temporal_offset: int = 0) -> tuple[np.ndarray, int]:
    """``get_3d_mrope_ids_text_tokens``: float32 ``(3, num_tokens)``, ``arange(num_tokens) + temporal_offset`` on
    the three axes, and the next offset ``temporal_offset + num_tokens``. (The reference's integer and float
    variants hold the same values; float32 represents them exactly.)"""
    ids = np.arange(num_tokens, dtype=np.float32) + np.float32(temporal_offset)
    return np.broadcast_to(ids, (3, num_tokens)).copy(), temporal_offset + num_tokens


def vision_position_ids(grid_t: int, grid_h: int, grid_w: int, temporal_offset: int | float, *,
                        reset_spatial_indices: bool = True, fps: float | None = None, base_fps: float = 24.0,
                        temporal_compression_factor: int = 4) -> tuple[np.ndarray, int]:
    """``get_3d_mrope_ids_vae_tokens`` for the video latents: float32 ``(3, grid_t * grid_h * grid_w)`` (axes t, h,
    w; tokens in (t, h, w) order) and the next offset ``ceil(max) + 1``.

    With ``fps`` (the model's ``enable_fps_modulation``) and more than one latent frame the temporal index is
    ``t / (fps / tcf) * (base_fps / tcf) + temporal_offset``, computed in float32 as the reference (python scalars
    applied to a float32 tensor); otherwise ``t + temporal_offset``. ``reset_spatial_indices`` False adds the
    integer offset to the h and w indices too.
    """
    n = grid_t * grid_h * grid_w
    if fps is not None and grid_t > 1:
        tps = fps / temporal_compression_factor
        base_tps = base_fps / temporal_compression_factor
        frames = np.arange(grid_t, dtype=np.float32)
        scaled = ((frames + np.float32(0)) / np.float32(tps)) * np.float32(base_tps) + np.float32(temporal_offset)
        t_index = np.repeat(scaled.astype(np.float32), grid_h * grid_w)
    else:
        t_index = np.repeat(np.arange(grid_t, dtype=np.int64) + int(temporal_offset), grid_h * grid_w)
    h_index = np.broadcast_to(np.arange(grid_h).reshape(1, -1, 1), (grid_t, grid_h, grid_w)).reshape(-1)
    w_index = np.broadcast_to(np.arange(grid_w).reshape(1, 1, -1), (grid_t, grid_h, grid_w)).reshape(-1)
    if not reset_spatial_indices:
        h_index = h_index + int(temporal_offset)
        w_index = w_index + int(temporal_offset)
    ids = np.stack([t_index.astype(np.float32), h_index.astype(np.float32), w_index.astype(np.float32)])
    assert ids.shape == (3, n)
    return ids, math.ceil(float(ids.max())) + 1


@dataclass(frozen=True)
class PackedPrompts:
    """Prompts packed for the understanding stream (the rows of one guided batch, e.g. ``[cond, uncond]``).

    Attributes:
      input_ids: int32 ``(B, L)``, right-padded with the tokenizer's pad id.
      position_ids: float32 ``(B, 3, L)`` text positions (padding rows continue the arange; they are masked).
      lengths: int32 ``(B,)`` valid tokens per row.
      vision_offsets: per row, the vision tokens' temporal offset ``length + temporal modality margin``.
    """

    input_ids: np.ndarray
    position_ids: np.ndarray
    lengths: np.ndarray
    vision_offsets: tuple[int, ...]


def padded_length(longest: int, multiple: int = 64) -> int:
    """The padded prompt length for ``longest`` tokens: the next multiple of ``multiple`` (prompts of similar length
    share one compiled understanding pass and generation step)."""
    return max(multiple, -(-longest // multiple) * multiple)


def pack_prompts(rows: list[list[int]], *, pad_id: int, temporal_modality_margin: int,
                 multiple: int = 64) -> PackedPrompts:
    """Right-pad token-id rows to a common :func:`padded_length` and give each its text positions
    (``_prepare_text_segment``) and its vision offset."""
    length = padded_length(max(len(r) for r in rows), multiple)
    b = len(rows)
    ids = np.full((b, length), pad_id, np.int32)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = r
    pos, _ = text_position_ids(length)
    positions = np.broadcast_to(pos, (b, 3, length)).copy()
    lengths = np.array([len(r) for r in rows], np.int32)
    offsets = tuple(len(r) + int(temporal_modality_margin) for r in rows)
    return PackedPrompts(ids, positions, lengths, offsets)


__all__ = ["Cosmos3Tokenizer", "PackedPrompts", "augment_prompt", "append_sentence", "pack_prompts",
           "padded_length", "render_chat", "text_position_ids", "vision_position_ids", "MAX_PROMPT_TOKENS"]
