"""The byT5 glyph encoder of HunyuanVideo-1.5: the ByT5 tokenizer, the Glyph-SDXL-v2 weights, glyph prompt embeddings.

HunyuanVideo-1.5 renders quoted text with a second text encoder: google/byt5-small's encoder (a T5 v1.1 encoder over
UTF-8 bytes; :mod:`vidax.encoders.t5`, ``model_type "t5"``) with the Glyph-SDXL-v2 weights. The prompt's quoted
strings become one glyph text (:func:`extract_glyph_texts`: ``Text "A". Text "B". ``); a prompt without quotes gets
zero embeddings and a zero mask (:func:`encode_glyph_prompts`). References: diffusers 0.42.1
``HunyuanVideo15Pipeline._get_byt5_prompt_embeds`` / ``extract_glyph_texts``; the original repository
Tencent-Hunyuan/HunyuanVideo-1.5 ``hyvideo/models/text_encoders/byT5/__init__.py`` (``create_byt5``,
``add_special_token``) and ``hyvideo/pipelines/hunyuan_video_pipeline.py`` (``_process_single_byt5_prompt``);
transformers 5.24 ``ByT5Tokenizer``.

Two published layouts are read:

* diffusers (``scripts/convert_hunyuan_video1_5_to_diffusers.py``): ``text_encoder_2/`` a ``T5EncoderModel`` folder
  (the Glyph-SDXL-v2 weights on byt5-small, its embedding resized to the glyph tokens) and ``tokenizer_2/`` a saved
  ``ByT5Tokenizer`` (``tokenizer_config.json`` listing every added token with its id);
* the original release (``checkpoints-download.md``): ``ckpts/text_encoder/byt5-small`` (google/byt5-small's config
  and tokenizer files) and ``ckpts/text_encoder/Glyph-SDXL-v2`` (``checkpoints/byt5_model.pt``: the state dict of
  the ``T5Stack`` encoder, keys ``embed_tokens.weight``, ``block.N....``, ``final_layer_norm.weight``, or a training
  wrapper ``{"state_dict": {"module.text_tower.encoder.<key>": ...}}``; ``assets/color_idx.json`` and
  ``assets/multilingual_10-lang_idx.json``). ``create_byt5`` adds one special token per colour (``<color-N>``) and
  per font (``<xx-font-N>``) to the byT5 tokenizer, resizes the embedding to ``len(tokenizer)`` and loads the
  ``.pt`` strictly, so every encoder weight comes from the ``.pt`` and byt5-small gives only the configuration and
  the tokenizer. The reference prompt path never writes those tokens (its styles are None), but a prompt that
  quotes ``<color-3>`` is tokenized to that token's id, so the tokenizer has them.

The tokenizer (:class:`ByT5Tokenizer`) is transformers' ``ByT5Tokenizer`` without transformers: UTF-8 bytes offset
by the three special tokens (``<pad>`` 0, ``</s>`` 1, ``<unk>`` 2), ``<extra_id_N>`` at ``259 + N``, added tokens
matched in the text first (at the leftmost position where one starts, the longest), ``</s>`` appended, truncation to
``max_length - 1`` before the ``</s>`` (which is not appended when the truncated text already ends with ``</s>``, as
transformers does), right padding with ``<pad>``. transformers' ``Trie.split`` finds the same tokens whenever no added
token starts inside another's partial match, which holds for every ByT5 and glyph token (``<...>`` without an inner
``<``); for contrived token sets it can cut out a piece that is no token, then spelled as bytes. Tokenizer files whose
ids leave gaps are refused (transformers silently gives a taken id to a second token).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint.errors import CheckpointError, excerpt
from vidax.checkpoint.keymap import KeyMap
from vidax.core.attention import AttentionImpl
from vidax.core.config_values import read_json
from vidax.encoders import t5
from vidax.encoders.t5 import T5Config

#: google/byt5-small (its ``config.json``): the encoder of HunyuanVideo-1.5's glyph branch before the glyph tokens
#: (384 = 3 special tokens + 256 bytes + 125 sentinels; the released glyph encoder has more rows).
BYT5_SMALL = T5Config(
    vocab_size=384, d_model=1472, d_kv=64, d_ff=3584, num_layers=12, num_heads=6, relative_attention_num_buckets=32,
    relative_attention_max_distance=128, feed_forward_proj="gated-gelu", layer_norm_epsilon=1e-6, model_type="t5",
)

#: The glyph sequence length of the reference pipelines (``byt5_max_length`` / ``tokenizer_2_max_length``).
GLYPH_MAX_LENGTH = 256

#: Bounds on tokenizer files (untrusted): the released tokenizer has ~1,700 added tokens of ~12 characters.
MAX_ADDED_TOKENS = 100_000
MAX_ADDED_TOKEN_CHARS = 1 << 20  # all added tokens' characters together (the match table's size)
MAX_TOKEN_ID = 1 << 24
#: Longest text tokenized (characters); the glyph text of a prompt is shorter than the prompt.
MAX_TEXT_CHARS = 1 << 20

_OFFSET = 3  # pad, eos, unk precede the 256 byte ids
_BYTE_IDS = 256
_END = None  # the match table's end-of-token mark (no character is None)


# --------------------------------------------------------------------------- tokenizer


@dataclass(frozen=True)
class AddedToken:
    """One token matched in the text before the bytes (transformers ``AddedToken``).

    Attributes:
      content: the token's text.
      lstrip, rstrip: the token absorbs the whitespace on its left / right (``<pad>``, ``</s>``, ``<unk>`` do).
      single_word: the token matches only as a whole word.
    """

    content: str
    lstrip: bool = False
    rstrip: bool = False
    single_word: bool = False


class ByT5Tokenizer:
    """transformers ``ByT5Tokenizer`` (slow, Python) semantics without transformers.

    Build it with :meth:`default`, :meth:`from_folder` (a saved tokenizer folder: diffusers ``tokenizer_2/`` or
    google/byt5-small's files) and :meth:`add_tokens` (the glyph tokens of the original release).

    Args:
      added: ``{id: AddedToken}`` with ids 0, 1 and 2 (ByT5's first three ids are tokens, not bytes).
      pad_token, eos_token, unk_token: their contents.
      extra_special_tokens: the further special tokens, in order (transformers ``all_special_tokens``). Special
        tokens without an id in ``added`` get the next ids, the named ones first (as ``PythonBackend.__init__``).

    Raises:
      ValueError: ids 0, 1 or 2 missing from ``added``; see :meth:`add_tokens`.
    """

    def __init__(self, added: dict[int, AddedToken], *, pad_token: str = "<pad>", eos_token: str = "</s>",
                 unk_token: str = "<unk>", extra_special_tokens: Sequence[str] = ()):
        if not all(i in added for i in range(_OFFSET)):
            raise ValueError("ByT5Tokenizer: ids 0, 1 and 2 must be tokens (pad, eos, unk)")
        self._decoder = dict(added)
        self._encoder = {tok.content: i for i, tok in self._decoder.items()}
        self.pad_token, self.eos_token, self.unk_token = pad_token, eos_token, unk_token
        self.extra_special_tokens = tuple(extra_special_tokens)
        self._specials = {eos_token, unk_token, pad_token, *self.extra_special_tokens}
        self._add([eos_token, unk_token, pad_token, *self.extra_special_tokens])

    def _rebuild(self) -> None:
        chars = sum(len(t) for t in self._encoder)
        if len(self._encoder) > MAX_ADDED_TOKENS or chars > MAX_ADDED_TOKEN_CHARS:
            raise ValueError(f"ByT5Tokenizer: {len(self._encoder):,} added tokens of {chars:,} characters; at most "
                             f"{MAX_ADDED_TOKENS:,} tokens of {MAX_ADDED_TOKEN_CHARS:,} characters are read")
        self._trie: dict = {}
        for content in self._encoder:
            if not content:
                continue
            node = self._trie
            for ch in content:
                node = node.setdefault(ch, {})
            node[_END] = True
        # A byte's id: an added token spelled as that one character takes precedence, as in transformers.
        self._byte_ids = [self._encoder.get(chr(b), b + _OFFSET) for b in range(_BYTE_IDS)]
        self.pad_token_id = self._encoder[self.pad_token]
        self.eos_token_id = self._encoder[self.eos_token]
        self.unk_token_id = self._encoder[self.unk_token]

    # -- construction

    @classmethod
    def default(cls, extra_ids: int = 125) -> ByT5Tokenizer:
        """``ByT5Tokenizer()``: ``<pad>`` 0, ``</s>`` 1, ``<unk>`` 2 (whitespace-absorbing), ``<extra_id_N>`` at
        ``259 + N`` for N below ``extra_ids``."""
        return cls._build(extra_ids=extra_ids)

    @classmethod
    def _build(cls, *, extra_ids: int = 125, decoder: dict[int, AddedToken] | None = None,
               names: dict[str, Any] | None = None, extra: Sequence[str] | None = None) -> ByT5Tokenizer:
        names = names or {}

        def named(key: str, default: str) -> AddedToken:
            value = names.get(key, default)
            if isinstance(value, AddedToken):
                return value
            # ByT5Tokenizer.__init__: a named token given as a string strips whitespace on both sides.
            return AddedToken(value, lstrip=True, rstrip=True)

        pad, eos, unk = named("pad_token", "<pad>"), named("eos_token", "</s>"), named("unk_token", "<unk>")
        added = {0: pad, 1: eos, 2: unk}
        added.update(decoder or {})
        if extra is None:
            extra = [f"<extra_id_{i}>" for i in range(extra_ids)] if extra_ids > 0 else []
        return cls(added, pad_token=pad.content, eos_token=eos.content, unk_token=unk.content,
                   extra_special_tokens=extra)

    @classmethod
    def from_folder(cls, folder: str | os.PathLike) -> ByT5Tokenizer:
        """A saved ByT5 tokenizer, as ``ByT5Tokenizer.from_pretrained(folder)`` builds it.

        Reads ``tokenizer_config.json`` (its ``added_tokens_decoder``: every added token with its id, as
        ``save_pretrained`` writes it; its ``extra_ids`` and ``extra_special_tokens`` / ``additional_special_tokens``),
        and, only when that has no ``added_tokens_decoder`` (google/byt5-small's files),
        ``special_tokens_map.json`` and ``added_tokens.json``. Missing files leave the defaults (:meth:`default`).

        Raises:
          CheckpointError: no such folder; a file that is not a JSON object, or larger than a configuration file.
          ValueError: values of the wrong type, ids out of range or leaving gaps, too many added tokens (each named).
        """
        folder = Path(folder)
        if not folder.is_dir():
            raise CheckpointError(f"{folder}: tokenizer folder not found")

        def read(name: str) -> dict:
            path = folder / name
            return read_json(path) if path.is_file() else {}

        config = read("tokenizer_config.json")
        source = str(folder / "tokenizer_config.json")
        names = {k: _named(config[k], f"{source}: {k}") for k in _NAMED if config.get(k) is not None}
        extra = _token_list(config.get("extra_special_tokens") or config.get("additional_special_tokens"), source)
        extra_ids = config.get("extra_ids", 125)
        if not isinstance(extra_ids, int) or isinstance(extra_ids, bool) or not 0 <= extra_ids <= MAX_ADDED_TOKENS:
            raise ValueError(f"{source}: extra_ids={excerpt(extra_ids)} should be an integer in "
                             f"[0, {MAX_ADDED_TOKENS}]")
        decoder: dict[int, AddedToken] = {}
        if "added_tokens_decoder" in config:
            table = config["added_tokens_decoder"]
            if not isinstance(table, dict) or len(table) > MAX_ADDED_TOKENS:
                raise ValueError(f"{source}: added_tokens_decoder must be an object of at most {MAX_ADDED_TOKENS:,} "
                                 "tokens")
            for key, value in table.items():
                decoder[_token_id(key, f"{source}: added_tokens_decoder")] = _token(
                    value, f"{source}: added_tokens_decoder[{excerpt(key)}]")
        else:  # google/byt5-small's files: the legacy special_tokens_map.json and added_tokens.json
            special_source = str(folder / "special_tokens_map.json")
            special = read("special_tokens_map.json")
            names.update({k: _named(special[k], f"{special_source}: {k}") for k in _NAMED
                          if special.get(k) is not None})
            listed = _token_list(special.get("additional_special_tokens"), special_source)
            if extra is None and listed is not None:
                # ByT5Tokenizer.__init__ checks a list it is given against extra_ids.
                if extra_ids > 0 and listed and len({t for t in listed if "extra_id" in t}) != extra_ids:
                    raise ValueError(f"{special_source}: additional_special_tokens must hold the {extra_ids} "
                                     "<extra_id_N> tokens of extra_ids")
                extra = listed
            added_source = str(folder / "added_tokens.json")
            added = read("added_tokens.json")
            if len(added) > MAX_ADDED_TOKENS:
                raise ValueError(f"{added_source}: more than {MAX_ADDED_TOKENS:,} tokens")
            for content, index in added.items():
                decoder[_token_id(index, added_source)] = AddedToken(content)
        # A named token that has an id keeps that entry's properties (from_pretrained's added_tokens_map).
        by_content = {t.content: t for t in decoder.values()}
        names = {k: by_content.get(v.content if isinstance(v, AddedToken) else v, v) for k, v in names.items()}
        return cls._build(extra_ids=extra_ids, decoder=decoder, names=names, extra=extra or None)

    def _vocab(self) -> dict[str, int]:
        # PythonBackend.get_vocab for ByT5: ids 0..258 by their token, then every added token.
        vocab = {}
        for i in range(_OFFSET + _BYTE_IDS):
            vocab[self._decoder[i].content if i in self._decoder else chr(i - _OFFSET)] = i
        vocab.update(self._encoder)
        return vocab

    def _add(self, tokens: Sequence[str]) -> int:
        # PythonBackend._add_tokens(tokens, special_tokens=True) for string tokens.
        vocab = self._vocab()
        start, added = len(vocab), 0
        for content in tokens:
            if not content or content in self._encoder:
                continue
            if content not in vocab:
                index = start + added
                if index in self._decoder:  # transformers overwrites that token and keeps its stale id
                    raise ValueError(f"ByT5Tokenizer: {excerpt(content)} would take id {index}, which "
                                     f"{excerpt(self._decoder[index].content)} has; the tokenizer files leave a "
                                     "gap in the ids (re-save the tokenizer)")
                vocab[content] = index
                added += 1
            else:
                index = vocab[content]
            self._decoder[index] = AddedToken(content)
            self._encoder[content] = index
            if content not in self._specials:
                self.extra_special_tokens += (content,)
                self._specials.add(content)
        self._rebuild()
        return added

    def add_tokens(self, tokens: Sequence[str]) -> int:
        """``tokenizer.add_tokens(tokens, special_tokens=True)``: new tokens get the next ids, in order.

        Returns:
          The number of tokens that got a new id (already known ones are skipped).

        Raises:
          ValueError: a token that is not a string; too many added tokens.
        """
        tokens = list(tokens)
        for t in tokens:
            if not isinstance(t, str):
                raise ValueError(f"ByT5Tokenizer.add_tokens: tokens must be strings, got {type(t).__name__}")
        return self._add(tokens)

    def to_config(self) -> dict[str, Any]:
        """The ``tokenizer_config.json`` of this tokenizer as transformers 5's ``save_pretrained`` writes it (every
        added token with its id in ``added_tokens_decoder``, the special tokens in ``extra_special_tokens``,
        ``extra_ids`` 0): :meth:`from_folder` and transformers' ``ByT5Tokenizer.from_pretrained`` read it back to
        the same tokenizer (``vidax convert`` writes the original release's glyph tokenizer so)."""
        decoder = {str(i): {"content": t.content, "lstrip": t.lstrip, "normalized": False, "rstrip": t.rstrip,
                            "single_word": t.single_word, "special": True}
                   for i, t in sorted(self._decoder.items())}
        return {"added_tokens_decoder": decoder, "eos_token": self.eos_token, "extra_ids": 0,
                "extra_special_tokens": list(self.extra_special_tokens),
                "model_max_length": int(1e30),  # transformers' VERY_LARGE_INTEGER: no limit
                "pad_token": self.pad_token, "tokenizer_class": "ByT5Tokenizer", "unk_token": self.unk_token}

    def __len__(self) -> int:
        """``len(tokenizer)``: the embedding rows the model needs (384 for byt5-small's tokenizer)."""
        return len(self._vocab())

    def token_to_id(self, token: str) -> int | None:
        """The id of an added token (``<pad>``, ``<extra_id_0>``, ``<color-0>``), or None."""
        return self._encoder.get(token)

    # -- encoding

    def _split(self, text: str) -> list[str]:
        # Added tokens first: at the leftmost position where one starts, the longest (transformers' Trie.split).
        pieces: list[str] = []
        root, n = self._trie, len(text)
        start = i = 0
        while i < n:
            node = root.get(text[i])
            if node is None:
                i += 1
                continue
            end, j = (i + 1 if _END in node else -1), i + 1
            while j < n:
                node = node.get(text[j])
                if node is None:
                    break
                j += 1
                if _END in node:
                    end = j
            if end < 0:
                i += 1
                continue
            if start < i:
                pieces.append(text[start:i])
            pieces.append(text[i:end])
            start = i = end
        if start < n:
            pieces.append(text[start:])
        return pieces

    def tokenize(self, text: str) -> list[int]:
        """Ids of ``text`` without ``</s>`` (transformers ``tokenizer(text, add_special_tokens=False).input_ids``).

        Raises:
          ValueError: ``text`` is not a string, not valid Unicode (lone surrogates), or longer than
            :data:`MAX_TEXT_CHARS`.
        """
        if not isinstance(text, str):
            raise ValueError(f"ByT5Tokenizer: expected a string, got {type(text).__name__}")
        if len(text) > MAX_TEXT_CHARS:
            raise ValueError(f"ByT5Tokenizer: a text of {len(text):,} characters; at most {MAX_TEXT_CHARS:,} are read")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(f"ByT5Tokenizer: the text is not valid Unicode (character {e.start}: a lone "
                             "surrogate); pass UTF-8 text") from None
        pieces = self._split(text)
        # PythonBackend.tokenize: lstrip / rstrip / single_word of each added token, on its neighbours.
        for k, piece in enumerate(pieces):
            if piece not in self._encoder:
                continue
            tok = self._decoder[self._encoder[piece]]
            left = pieces[k - 1] if k > 0 else None
            right = pieces[k + 1] if k < len(pieces) - 1 else None
            if tok.rstrip and right:
                pieces[k + 1] = right.lstrip()
            if tok.lstrip and left:
                pieces[k - 1] = left.rstrip()
            if tok.single_word:
                if left and left[-1] != " ":
                    pieces[k - 1] += piece
                    pieces[k] = ""
                elif right and right[0] != " ":
                    pieces[k + 1] = piece + pieces[k + 1]
                    pieces[k] = ""
        ids: list[int] = []
        for piece in pieces:
            if not piece:
                continue
            if piece in self._encoder:
                ids.append(self._encoder[piece])
            else:
                ids.extend(self._byte_ids[b] for b in piece.encode("utf-8"))
        return ids

    def __call__(self, texts: str | Sequence[str], max_length: int = GLYPH_MAX_LENGTH) -> tuple[np.ndarray, np.ndarray]:
        """``tokenizer(texts, padding="max_length", max_length=max_length, truncation=True,
        add_special_tokens=True)``.

        Each text's ids are cut to ``max_length - 1``, then ``</s>`` is appended unless they already end with it
        (transformers ``_add_eos_if_not_present``), then ``<pad>`` fills the row (mask 0).

        Returns:
          int32 ``input_ids`` and ``attention_mask``, each ``(B, max_length)``.

        Raises:
          ValueError: ``max_length`` below 1; see :meth:`tokenize`.
        """
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(max_length, int) or isinstance(max_length, bool) or max_length < 1:
            raise ValueError(f"max_length must be a positive integer, got {max_length!r}")
        ids = np.full((len(texts), max_length), self.pad_token_id, np.int32)
        mask = np.zeros((len(texts), max_length), np.int32)
        for b, text in enumerate(texts):
            row = self.tokenize(text)[: max_length - 1]
            if not row or row[-1] != self.eos_token_id:
                row.append(self.eos_token_id)
            ids[b, : len(row)] = row
            mask[b, : len(row)] = 1
        return ids, mask


_NAMED = ("pad_token", "eos_token", "unk_token")


def _named(value: Any, where: str) -> str | AddedToken:
    """A named special token of a tokenizer file: a string (ByT5Tokenizer makes it whitespace-absorbing) or an
    ``AddedToken`` object (its own properties)."""
    return value if isinstance(value, str) else _token(value, where)


def _token_list(value: Any, where: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > MAX_ADDED_TOKENS:
        raise ValueError(f"{where}: the special token list must be a list of at most {MAX_ADDED_TOKENS:,} tokens")
    return [_token(t, where).content for t in value]


def _token(value: Any, where: str) -> AddedToken:
    """A token of a tokenizer file: a string, or a serialized ``AddedToken`` object."""
    if isinstance(value, str):
        return AddedToken(value)
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        flags = {}
        for key in ("lstrip", "rstrip", "single_word"):
            flag = value.get(key, False)
            if not isinstance(flag, bool):
                raise ValueError(f"{where}: {key}={excerpt(flag)} should be true or false")
            flags[key] = flag
        return AddedToken(value["content"], **flags)
    raise ValueError(f"{where}: {excerpt(value)} is not a token (a string or an object with a 'content' string)")


def _token_id(value: Any, where: str) -> int:
    if isinstance(value, str) and value.isdecimal() and len(value) <= 9:
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < MAX_TOKEN_ID:
        raise ValueError(f"{where}: token id {excerpt(value)} is not an integer in [0, {MAX_TOKEN_ID:,})")
    return value


# --------------------------------------------------------------------------- glyph texts

_QUOTED = re.compile(r"\"(.*?)\"|“(.*?)”")


def extract_glyph_texts(prompt: str) -> str | None:
    """The glyph text of a prompt: its quoted strings (``"..."`` or ``“...”``), once each, as
    ``Text "A". Text "B". ``; None when the prompt quotes nothing.

    diffusers ``extract_glyph_texts``; the original's ``_extract_glyph_texts`` then
    ``MultilingualPromptFormat.format_prompt`` with no colour or font give the same string.

    Raises:
      ValueError: a prompt that is not a string.
    """
    if not isinstance(prompt, str):
        raise ValueError(f"prompt must be a string, got {type(prompt).__name__}")
    found = [a or b for a, b in _QUOTED.findall(prompt)]
    if len(found) > 1:
        found = list(dict.fromkeys(found))
    return "".join(f'Text "{t}". ' for t in found) if found else None


# --------------------------------------------------------------------------- glyph tokens (original release)

#: Where the original release keeps the Glyph-SDXL-v2 files, relative to its folder.
GLYPH_CHECKPOINT = "checkpoints/byt5_model.pt"
GLYPH_COLORS = "assets/color_idx.json"
GLYPH_FONTS = "assets/multilingual_10-lang_idx.json"


def glyph_tokens(color_idx: dict, font_idx: dict) -> list[str]:
    """The tokens ``add_special_token(..., multilingual=True)`` adds, in its order: ``<color-N>`` for N below
    ``len(color_idx)``, then ``<{code[:2]}-font-{font_idx[code]}>`` per font code.

    Raises:
      ValueError: a font code that is not a string, or an index that is not an integer or a string.
    """
    tokens = [f"<color-{i}>" for i in range(len(color_idx))]
    for code, index in font_idx.items():
        if not isinstance(code, str) or isinstance(index, bool) or not isinstance(index, (int, str)):
            raise ValueError(f"font index: {excerpt(code)}: {excerpt(index)} should be a font code and an integer")
        tokens.append(f"<{code[:2]}-font-{index}>")
    return tokens


def glyph_tokenizer(byt5_folder: str | os.PathLike | None, glyph_folder: str | os.PathLike) -> ByT5Tokenizer:
    """The original release's glyph tokenizer: byt5-small's (its folder, or the defaults when None) with the
    Glyph-SDXL-v2 colour and font tokens added (:func:`glyph_tokens`).

    Raises:
      CheckpointError: an asset file missing or not a JSON object.
    """
    glyph_folder = Path(glyph_folder)
    tok = ByT5Tokenizer.from_folder(byt5_folder) if byt5_folder is not None else ByT5Tokenizer.default()
    assets = []
    for name in (GLYPH_COLORS, GLYPH_FONTS):
        path = glyph_folder / name
        if not path.is_file():
            raise CheckpointError(f"{path}: missing; the Glyph-SDXL-v2 folder needs {GLYPH_COLORS} and {GLYPH_FONTS} "
                                  "(checkpoints-download.md of HunyuanVideo-1.5)")
        assets.append(read_json(path))
    tok.add_tokens(glyph_tokens(*assets))
    return tok


# --------------------------------------------------------------------------- loading

_T5_PREFIX = "encoder."
#: The key prefix of Glyph-SDXL-v2 training checkpoints (``create_byt5`` keeps only these keys, stripped).
WRAPPED_PREFIX = "module.text_tower.encoder."


def glyph_keymap(cfg: T5Config, prefix: str = "") -> KeyMap:
    """Key map of a ``T5Stack`` (encoder) state dict, ``byt5_model.pt``: ``{prefix}embed_tokens.weight``,
    ``{prefix}block.N.layer...``, ``{prefix}final_layer_norm.weight``. With a ``prefix`` (the training wrapper's
    ``module.text_tower.encoder.``) keys without it are ignored, as ``create_byt5`` drops them."""
    base = t5.t5_keymap(cfg, keys=[t5._EMBED_TOKENS])  # the encoder's own embedding: the T5Stack layout
    rules = [dataclasses.replace(r, key=prefix + r.key[len(_T5_PREFIX):]) for r in base.rules]
    return KeyMap(rules, ignore=[rf"(?!{re.escape(prefix)})"] if prefix else [])


def _config(folder: Path | None) -> T5Config:
    if folder is None or not (folder / "config.json").is_file():
        return BYT5_SMALL
    cfg = T5Config.from_dict(read_json(folder / "config.json"))
    if cfg.model_type != "t5":
        raise ValueError(f"{folder / 'config.json'}: model_type {cfg.model_type!r}; byT5 is a 't5' encoder")
    return cfg


def load_glyph_encoder_original(glyph_folder: str | os.PathLike, byt5_folder: str | os.PathLike | None = None,
                                dtype: Any = np.float32, **load_kwargs) -> tuple[dict, T5Config, ByT5Tokenizer]:
    """The original release's glyph encoder: ``Glyph-SDXL-v2/checkpoints/byt5_model.pt`` on google/byt5-small.

    The ``.pt`` is read through vidax's restricted unpickler (:class:`vidax.checkpoint.reader.CheckpointReader`),
    never with ``torch.load``.

    Args:
      glyph_folder: ``ckpts/text_encoder/Glyph-SDXL-v2`` (``checkpoints/byt5_model.pt``, ``assets/*.json``).
      byt5_folder: ``ckpts/text_encoder/byt5-small`` (``config.json``, tokenizer files); None: google/byt5-small's
        values (:data:`BYT5_SMALL`, :meth:`ByT5Tokenizer.default`), what the original downloads when it is missing.
      dtype: ``float32`` (default) or ``bfloat16`` weights (see :mod:`vidax.encoders.t5`).

    Returns:
      ``(params, cfg, tokenizer)``; ``cfg.vocab_size`` is ``len(tokenizer)``, as ``resize_token_embeddings`` makes it.

    Raises:
      CheckpointError: a missing file; an embedding whose rows are not ``len(tokenizer)`` (the original's strict
        load fails the same way); missing, unexpected or mis-shaped tensors (all listed).
    """
    from vidax.checkpoint.loader import load_params

    cfg, tokenizer, reader, keymap = glyph_checkpoint_original(glyph_folder, byt5_folder)
    params = load_params(reader, keymap, t5.t5_specs(cfg), dtype, source=str(Path(glyph_folder) / GLYPH_CHECKPOINT),
                         **load_kwargs)
    return params, cfg, tokenizer


def glyph_checkpoint_original(glyph_folder: str | os.PathLike, byt5_folder: str | os.PathLike | None = None):
    """The original release's glyph encoder as :func:`load_glyph_encoder_original` reads it, without reading any
    tensor data: ``(cfg, tokenizer, reader, keymap)`` (``cfg.vocab_size`` the ``.pt``'s embedding rows; the reader
    of ``byt5_model.pt`` and :func:`glyph_keymap` for its key prefix; load with :func:`vidax.encoders.t5.t5_specs`).

    Raises:
      CheckpointError: see :func:`load_glyph_encoder_original` (the mismatched tensors excepted: the loader lists
        them).
    """
    from vidax.checkpoint.reader import CheckpointReader

    glyph_folder = Path(glyph_folder)
    byt5_folder = Path(byt5_folder) if byt5_folder is not None else None
    path = glyph_folder / GLYPH_CHECKPOINT
    if not path.is_file():
        raise CheckpointError(f"{path}: the Glyph-SDXL-v2 byT5 checkpoint is missing (checkpoints-download.md of "
                              "HunyuanVideo-1.5: modelscope AI-ModelScope/Glyph-SDXL-v2)")
    tokenizer = glyph_tokenizer(byt5_folder, glyph_folder)
    reader = CheckpointReader(path)
    keys = reader.keys()
    prefix = WRAPPED_PREFIX if any(k.startswith(WRAPPED_PREFIX) for k in keys) else ""
    embed = prefix + "embed_tokens.weight"
    if embed not in keys:
        raise CheckpointError(f"{path}: tensor {embed!r} is missing; expected the byT5 encoder (T5Stack) state dict")
    rows = reader.shape(embed)[0]
    if rows != len(tokenizer):
        raise CheckpointError(f"{path}: {embed} has {rows:,} rows but the tokenizer with the glyph tokens has "
                              f"{len(tokenizer):,}; the assets do not belong to this checkpoint")
    cfg = dataclasses.replace(_config(byt5_folder), vocab_size=rows)
    return cfg, tokenizer, reader, glyph_keymap(cfg, prefix)


def load_byt5_encoder(folder: str | os.PathLike, dtype: Any = np.float32,
                      **load_kwargs) -> tuple[dict, T5Config]:
    """The diffusers layout's ``text_encoder_2/`` (a ``T5EncoderModel`` folder), strictly.

    Raises:
      CheckpointError: see :func:`vidax.encoders.t5.load_t5_encoder`.
      ValueError: a ``model_type`` other than ``"t5"``.
    """
    params, cfg = t5.load_t5_encoder(folder, dtype, **load_kwargs)
    if cfg.model_type != "t5":
        raise ValueError(f"{Path(folder) / 'config.json'}: model_type {cfg.model_type!r}; byT5 is a 't5' encoder")
    return params, cfg


def load_glyph_encoder(path: str | os.PathLike, dtype: Any = np.float32,
                       **load_kwargs) -> tuple[dict, T5Config, ByT5Tokenizer]:
    """The glyph encoder and its tokenizer from either published layout.

    ``path`` is one of: a diffusers HunyuanVideo-1.5 folder (``text_encoder_2/``, ``tokenizer_2/``); the original
    release's ``ckpts`` folder (``text_encoder/Glyph-SDXL-v2``, ``text_encoder/byt5-small``), its ``text_encoder``
    folder, or the ``Glyph-SDXL-v2`` folder itself (byt5-small then beside it, as the original looks for it).

    Returns:
      ``(params, cfg, tokenizer)``.

    Raises:
      CheckpointError: none of these layouts; a tokenizer with more tokens than the embedding has rows; the errors
        of the loaders.
    """
    path = Path(path)
    if (path / "text_encoder_2" / "config.json").is_file():
        tokenizer = ByT5Tokenizer.from_folder(path / "tokenizer_2")
        params, cfg = load_byt5_encoder(path / "text_encoder_2", dtype, **load_kwargs)
        if len(tokenizer) > cfg.vocab_size:
            raise CheckpointError(f"{path / 'tokenizer_2'}: {len(tokenizer):,} tokens for the {cfg.vocab_size:,} "
                                  "embedding rows of text_encoder_2; the two folders do not belong together")
        return params, cfg, tokenizer
    for glyph in (path, path / "Glyph-SDXL-v2", path / "text_encoder" / "Glyph-SDXL-v2"):
        if (glyph / GLYPH_CHECKPOINT).is_file():
            byt5 = glyph.parent / "byt5-small"
            return load_glyph_encoder_original(glyph, byt5 if byt5.is_dir() else None, dtype, **load_kwargs)
    raise CheckpointError(f"{path}: no byT5 glyph encoder here; expected text_encoder_2/ and tokenizer_2/ (diffusers) "
                          f"or text_encoder/Glyph-SDXL-v2/{GLYPH_CHECKPOINT} (the original release)")


# --------------------------------------------------------------------------- embeddings


def encode_glyph_prompts(
    params: dict,
    cfg: T5Config,
    tokenizer: ByT5Tokenizer,
    glyph_texts: Sequence[str | None],
    max_length: int = GLYPH_MAX_LENGTH,
    *,
    attention_impl: AttentionImpl | str = AttentionImpl.XLA,
    precision: str | None = "highest",
) -> tuple[jax.Array, np.ndarray]:
    """Glyph embeddings (diffusers ``HunyuanVideo15Pipeline._get_byt5_prompt_embeds``; the original's
    ``_process_single_byt5_prompt``).

    A text is tokenized to ``max_length`` (:class:`ByT5Tokenizer`) and encoded with its mask; the embeddings are the
    encoder's ``last_hidden_state`` at every row, padded rows included (the reference passes them on and masks them
    in the transformer). A None text (a prompt without quotes: :func:`extract_glyph_texts`) gives zeros and a zero
    mask. The texts are encoded together, one compilation per number of texts.

    Args:
      params, cfg: the encoder (:func:`load_glyph_encoder`).
      glyph_texts: per prompt, its glyph text or None.
      max_length: tokens per text (256 in both references).

    Returns:
      float32 ``(B, max_length, d_model)`` embeddings and the int32 ``(B, max_length)`` mask.

    Raises:
      ValueError: a text that is neither a string nor None; a token id past the embedding (a tokenizer that does
        not belong to the encoder); see :meth:`ByT5Tokenizer.__call__`.
    """
    glyph_texts = list(glyph_texts)
    for text in glyph_texts:
        if text is not None and not isinstance(text, str):
            raise ValueError(f"glyph texts must be strings or None, got {type(text).__name__}")
    rows = [b for b, text in enumerate(glyph_texts) if text is not None]
    embeds = np.zeros((len(glyph_texts), max_length, cfg.d_model), np.float32)
    mask = np.zeros((len(glyph_texts), max_length), np.int32)
    if not rows:
        return jnp.asarray(embeds), mask
    ids, row_mask = tokenizer([glyph_texts[b] for b in rows], max_length)
    if ids.max() >= cfg.vocab_size:
        raise ValueError(f"token id {int(ids.max())} is past the encoder's {cfg.vocab_size} embedding rows: the "
                         "tokenizer does not belong to this encoder (the glyph tokens need the glyph checkpoint)")
    hidden = t5.encode(params, cfg, ids, row_mask, attention_impl=attention_impl, precision=precision)
    mask[rows] = row_mask
    if len(rows) == len(glyph_texts):
        return hidden, mask
    out = jnp.asarray(embeds).at[np.asarray(rows)].set(hidden)
    return out, mask
