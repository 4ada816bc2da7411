"""Qwen2's tokenizer and Qwen2.5-VL's chat template for text messages, over the ``tokenizers`` library.

:class:`Qwen2Tokenizer` reads a folder's ``tokenizer.json`` and reproduces transformers 5's ``Qwen2Tokenizer``
(``models/qwen2/tokenization_qwen2.py``): byte-level BPE behind NFC and Qwen2's regex split, no special tokens added
around the text, right padding with ``<|endoftext|>``. :func:`render_chat` is Qwen2.5-VL-7B-Instruct's chat template
(its ``chat_template.json`` / ``tokenizer_config.json`` Jinja template) for messages whose contents are strings,
written in Python (no Jinja at run time): for each message ``<|im_start|>{role}\\n{content}<|im_end|>\\n``, a default
system message first when the first message is not one, and ``<|im_start|>assistant\\n`` for the generation prompt.
:meth:`Qwen2Tokenizer.apply_chat_template` is then transformers' ``tokenizer.apply_chat_template(conversations,
add_generation_prompt=True, tokenize=True, padding="max_length", max_length=L, truncation=True)``: the rendered text
tokenized without added special tokens, cut to ``L`` tokens on the right, right-padded. Special tokens written in a
message are read as special tokens, as there (transformers' ``sanitize_control_tokens`` is off by default).

:func:`write_qwen2_tokenizer` writes a tiny tokenizer of this kind with Qwen2.5-VL's special tokens (tests, demos).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers
from tokenizers import Tokenizer as _HFTokenizer

from vidax.checkpoint.errors import CheckpointError
from vidax.core.config_values import read_json
from vidax.encoders.tokenizer import (
    MAX_VOCAB_FILE_BYTES,
    _token_content,
    _warn_truncated,
    _without_specials,
    _write_json,
    byte_alphabet,
    learn_bpe_merges,
)

#: The pre-tokenizer split of transformers' ``Qwen2Tokenizer`` (``PRETOKENIZE_REGEX``), applied before the
#: byte-level mapping. Unlike Llama 3's, digits split one by one.
QWEN2_SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                       r"|\s*[\r\n]+|\s+(?!\S)|\s+")

#: Qwen2.5-VL's added tokens in id order (151643 ... 151664 in the release): ``(content, special)``.
QWEN2_5_VL_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True), ("<|quad_start|>", True),
    ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
    ("<|repo_name|>", False), ("<|file_sep|>", False),
)

IM_START, IM_END = "<|im_start|>", "<|im_end|>"

#: The system message the chat template inserts when a conversation does not start with one.
DEFAULT_SYSTEM_MESSAGE = "You are a helpful assistant."

#: Qwen2.5-VL-7B-Instruct's ``tokenizer_config.json`` values: ``model_max_length``, eos and pad tokens.
QWEN2_5_VL_MODEL_MAX_LENGTH = 131072
QWEN2_5_VL_EOS, QWEN2_5_VL_PAD = IM_END, "<|endoftext|>"

#: The most messages one conversation may hold (HunyuanVideo-1.5 sends two; a bound on untrusted input).
MAX_MESSAGES = 1024


def render_chat(messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True) -> str:
    """Qwen2.5-VL's chat template rendered for text messages.

    Equal to transformers' ``apply_chat_template(messages, tokenize=False, add_generation_prompt=...)`` with the
    chat template of Qwen/Qwen2.5-VL-7B-Instruct (the test compares them)::

        [<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n]     # only if messages[0] is not "system"
        <|im_start|>{role}\\n{content}<|im_end|>\\n                          # per message
        [<|im_start|>assistant\\n]                                          # add_generation_prompt

    Args:
      messages: ``[{"role": str, "content": str}, ...]`` (image and video parts are not supported).

    Raises:
      ValueError: a message that is not a mapping with string ``role`` and ``content``, or too many messages.
    """
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        raise ValueError("a conversation must be a list of {'role': ..., 'content': ...} messages")
    if len(messages) > MAX_MESSAGES:
        raise ValueError(f"a conversation of {len(messages)} messages is more than the {MAX_MESSAGES} accepted")
    parts = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise ValueError(f"message {i} must be a mapping with a string 'role'")
        if not isinstance(message.get("content"), str):
            raise ValueError(f"message {i} ({message['role']}): only string contents are supported (text messages), "
                             f"got {type(message.get('content')).__name__}")
        if i == 0 and message["role"] != "system":
            parts.append(f"{IM_START}system\n{DEFAULT_SYSTEM_MESSAGE}{IM_END}\n")
        parts.append(f"{IM_START}{message['role']}\n{message['content']}{IM_END}\n")
    if add_generation_prompt:
        parts.append(f"{IM_START}assistant\n")
    return "".join(parts)


def _qwen2_normalizer():
    return normalizers.NFC()


def _qwen2_pre_tokenizer():
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])


class Qwen2Tokenizer:
    """Qwen2 byte-level BPE: fixed-length, right-padded batches, and Qwen2.5-VL chat conversations.

    Args:
      tokenizer: a ``tokenizers.Tokenizer`` with a BPE model; its normalizer and pre-tokenizer are replaced by
        Qwen2's (NFC; the regex split of :data:`QWEN2_SPLIT_PATTERN`, then byte-level), as transformers 5's
        ``Qwen2Tokenizer`` rebuilds them whatever the file holds (the released file holds these), and its
        post-processor removed (Qwen2 adds no special tokens around a text).
      pad_token: the padding token (``<|endoftext|>``); must be in the vocabulary.
      model_max_length: informational (``tokenizer_config.json``), not enforced.

    Raises:
      ValueError: no pad token in the vocabulary, or a model other than BPE.
    """

    def __init__(self, tokenizer: _HFTokenizer, *, pad_token: str = QWEN2_5_VL_PAD,
                 model_max_length: int | None = None):
        if not isinstance(tokenizer.model, models.BPE):
            raise ValueError(f"a Qwen2 tokenizer is byte-level BPE; this one's model is "
                             f"{type(tokenizer.model).__name__}")
        tokenizer.normalizer = _qwen2_normalizer()
        tokenizer.pre_tokenizer = _qwen2_pre_tokenizer()
        tokenizer.post_processor = None
        self._tok = tokenizer
        self.pad_token = pad_token
        self.pad_id = tokenizer.token_to_id(pad_token)
        if self.pad_id is None:
            raise ValueError(f"tokenizer vocabulary has no pad token {pad_token!r}")
        self.model_max_length = model_max_length

    @classmethod
    def from_folder(cls, folder: str | os.PathLike) -> Qwen2Tokenizer:
        """Load ``tokenizer.json`` (+ ``tokenizer_config.json`` for the pad token), e.g. diffusers'
        ``<pipeline>/tokenizer`` or a Qwen2.5-VL model folder.

        Raises:
          CheckpointError: no ``tokenizer.json``, one larger than 64 MiB or malformed, a malformed
            ``tokenizer_config.json``, or a tokenizer without the pad token or the chat tokens (all named).
        """
        folder = Path(folder)
        path = folder / "tokenizer.json"
        if not path.is_file():
            raise CheckpointError(f"{path}: file not found (a Qwen2 tokenizer folder needs tokenizer.json)")
        size = path.stat().st_size
        if size > MAX_VOCAB_FILE_BYTES:
            raise CheckpointError(f"{path}: {size:,} bytes is too large for a tokenizer file (at most "
                                  f"{MAX_VOCAB_FILE_BYTES:,}; Qwen2.5-VL's is 7 MB)")
        config_path = folder / "tokenizer_config.json"
        config = read_json(config_path) if config_path.is_file() else {}
        pad = _token_content(config.get("pad_token")) or QWEN2_5_VL_PAD
        max_len = config.get("model_max_length")
        try:
            tok = _HFTokenizer.from_file(str(path))
        except Exception as e:  # the tokenizers library raises a bare Exception on a malformed file
            raise CheckpointError(f"{path}: not a valid tokenizer file ({e}); re-download the tokenizer") from None
        try:
            tokenizer = cls(tok, pad_token=pad if isinstance(pad, str) else QWEN2_5_VL_PAD,
                            model_max_length=int(max_len) if isinstance(max_len, int) and max_len < 1 << 62 else None)
        except ValueError as e:
            raise CheckpointError(f"{path}: {e}") from None
        missing = [t for t in (IM_START, IM_END) if tokenizer.token_to_id(t) is None]
        if missing:
            raise CheckpointError(f"{path}: the tokenizer has no {missing} token(s): not a Qwen2.5-VL chat tokenizer")
        return tokenizer

    @property
    def vocab_size(self) -> int:
        """Vocabulary size including added tokens (transformers' ``len(tokenizer)``)."""
        return self._tok.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> int | None:
        """The id of ``token`` (a vocabulary entry or an added token), or None."""
        return self._tok.token_to_id(token)

    def encode_ids(self, text: str) -> list[int]:
        """The ids of one text, neither truncated nor padded (transformers ``tokenizer(text).input_ids``)."""
        self._tok.no_truncation()
        self._tok.no_padding()
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def __call__(self, texts: str | Sequence[str], max_length: int) -> tuple[np.ndarray, np.ndarray]:
        """Tokenize a batch to exactly ``max_length`` tokens each (``padding="max_length"``, ``truncation=True``,
        ``add_special_tokens=False``): cut on the right (with a warning), padded on the right.

        Returns:
          ``(input_ids, attention_mask)``, both int32 ``(B, max_length)``.

        Raises:
          ValueError: ``max_length`` below 1, or texts that are not strings.
        """
        if isinstance(texts, str):
            texts = [texts]
        ids, mask, cut = self._encode(texts, max_length)
        _warn_truncated(cut, int(max_length))
        return ids, mask

    def _encode(self, texts: Sequence[str], max_length: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
        texts = list(texts)
        if not texts or not all(isinstance(t, str) for t in texts):
            raise ValueError("texts must be a string or a non-empty list of strings")
        if not isinstance(max_length, (int, np.integer)) or isinstance(max_length, bool) or max_length < 1:
            raise ValueError(f"max_length must be a positive integer, got {max_length!r}")
        tok = self._tok
        tok.enable_truncation(int(max_length), stride=0, strategy="longest_first", direction="right")
        tok.enable_padding(direction="right", pad_id=self.pad_id, pad_type_id=0, pad_token=self.pad_token,
                           length=int(max_length))
        encodings = tok.encode_batch(texts, add_special_tokens=False)
        ids = np.array([e.ids for e in encodings], np.int32).reshape(len(texts), max_length)
        mask = np.array([e.attention_mask for e in encodings], np.int32).reshape(len(texts), max_length)
        return ids, mask, [i for i, e in enumerate(encodings) if e.overflowing]

    def apply_chat_template(self, conversations: Sequence[Sequence[Mapping[str, Any]]], max_length: int, *,
                            add_generation_prompt: bool = True, warn: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """transformers' ``apply_chat_template(conversations, add_generation_prompt=..., tokenize=True,
        padding="max_length", max_length=max_length, truncation=True)`` with Qwen2.5-VL's chat template.

        Args:
          conversations: a batch of conversations, each a list of ``{"role", "content"}`` text messages.
          warn: warn when a conversation is cut (the reference cuts silently, the generation prompt with it).

        Returns:
          ``(input_ids, attention_mask)``, both int32 ``(B, max_length)``.

        Raises:
          ValueError: see :func:`render_chat` and :meth:`__call__`.
        """
        if not isinstance(conversations, Sequence) or not conversations:
            raise ValueError("conversations must be a non-empty list of conversations")
        ids, mask, cut = self._encode([render_chat(c, add_generation_prompt) for c in conversations], max_length)
        if cut and warn:
            which = "a conversation is" if len(cut) == 1 else f"{len(cut)} conversations are"
            warnings.warn(f"{which} longer than {max_length} tokens with the chat frame: only the first {max_length} "
                          "are used (the rest of the prompt and the frame's end are cut off, as the reference "
                          "pipelines cut them)", UserWarning, stacklevel=2)
        return ids, mask


# --------------------------------------------------------------------------- tiny tokenizers (tests, demos)


def build_qwen2_tokenizer(vocab: dict[str, int], merges: Sequence[tuple[str, str]],
                          added_tokens: Sequence[tuple[str, bool]] = QWEN2_5_VL_ADDED_TOKENS) -> _HFTokenizer:
    """A Qwen2 ``tokenizers.Tokenizer``: the pipeline of Qwen2.5-VL's ``tokenizer.json`` (NFC, the regex split,
    byte-level BPE, no post-processor) over a given vocabulary, ``added_tokens`` appended after it in order."""
    tok = _HFTokenizer(models.BPE(vocab=dict(vocab), merges=list(merges), fuse_unk=False, byte_fallback=False))
    tok.normalizer = _qwen2_normalizer()
    tok.pre_tokenizer = _qwen2_pre_tokenizer()
    tok.decoder = decoders.ByteLevel()
    tok.add_tokens([AddedToken(t, special=s, normalized=False) for t, s in added_tokens])
    return tok


def write_qwen2_tokenizer(folder: str | os.PathLike, corpus: Sequence[str], *, num_merges: int = 200,
                          added_tokens: Sequence[tuple[str, bool]] = QWEN2_5_VL_ADDED_TOKENS,
                          chat_template: str | None = None) -> Path:
    """Write a tiny Qwen2 tokenizer (byte-level BPE learned from ``corpus``) in the transformers layout.

    Writes ``tokenizer.json`` (:func:`build_qwen2_tokenizer`; vocabulary: the 256 byte symbols, one token per merge,
    then ``added_tokens``) and ``tokenizer_config.json`` with Qwen2.5-VL-7B-Instruct's settings (``Qwen2Tokenizer``,
    eos ``<|im_end|>``, pad ``<|endoftext|>``, no bos, right padding) and, if given, its ``chat_template`` (a Jinja
    string, for transformers' ``apply_chat_template``; vidax renders the template in Python). Readable by
    :meth:`Qwen2Tokenizer.from_folder` and ``transformers.AutoTokenizer``. Needs only ``tokenizers``.

    Returns:
      ``folder`` as a Path.
    """
    contents = [t for t, _ in added_tokens]
    missing = [t for t in (QWEN2_5_VL_PAD, IM_START, IM_END) if t not in contents]
    if missing:
        raise ValueError(f"write_qwen2_tokenizer: added_tokens lacks {missing}")
    pre, norm = _qwen2_pre_tokenizer(), _qwen2_normalizer()
    words = [list(piece) for text in _without_specials(corpus, contents)
             for piece, _ in pre.pre_tokenize_str(norm.normalize_str(text))]
    merges = learn_bpe_merges(words, num_merges)
    vocab = {c: i for i, c in enumerate(byte_alphabet())}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    tok = build_qwen2_tokenizer(vocab, merges, added_tokens)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    decoder = {str(tok.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                         "single_word": False, "special": s} for t, s in added_tokens}
    config = {"tokenizer_class": "Qwen2Tokenizer", "add_prefix_space": False, "bos_token": None,
              "eos_token": QWEN2_5_VL_EOS, "pad_token": QWEN2_5_VL_PAD, "unk_token": None, "errors": "replace",
              "padding_side": "right", "split_special_tokens": False, "clean_up_tokenization_spaces": False,
              "model_max_length": QWEN2_5_VL_MODEL_MAX_LENGTH, "added_tokens_decoder": decoder}
    if chat_template is not None:
        config["chat_template"] = chat_template
    _write_json(folder / "tokenizer_config.json", config)
    return folder
