"""T5/UMT5 tokenization over the ``tokenizers`` library (no transformers at run time).

:class:`Tokenizer` reads a checkpoint's ``tokenizer/tokenizer.json`` and
reproduces transformers'
``tokenizer(prompts, padding="max_length", max_length=L, truncation=True,
add_special_tokens=True, return_attention_mask=True)``: the text is truncated
to ``L - 1`` pieces, ``</s>`` is appended by the post-processor, and the rest is
right-padded with the pad id (mask 0).

:func:`clean_prompt` is the Wan pipelines' ``prompt_clean`` (diffusers
``pipelines/wan/pipeline_wan.py``). :func:`write_demo_tokenizer` writes a tiny
T5-style tokenizer that ``transformers.AutoTokenizer`` loads and tokenizes
identically (used by the embedded demo checkpoint and the tests).
"""

from __future__ import annotations

import html
import json
import os
import re
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from vidax.checkpoint.errors import CheckpointError
from tokenizers import Tokenizer as _HFTokenizer
from tokenizers import AddedToken, decoders, models, pre_tokenizers, processors

try:  # optional, as in diffusers: used only if installed
    import ftfy  # type: ignore
except ImportError:  # pragma: no cover - depends on the environment
    ftfy = None

# diffusers uses the `regex` module, whose `\s` is Unicode White_Space. Python's `re` `\s`
# additionally matches U+001C..U+001F, so spell the class out.
_WHITESPACE = re.compile("[\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+")


def clean_prompt(text: str) -> str:
    """Wan ``prompt_clean``: ftfy (if installed), HTML-unescape twice, collapse whitespace, strip."""
    if ftfy is not None:
        text = ftfy.fix_text(text)
    text = html.unescape(html.unescape(text)).strip()
    return _WHITESPACE.sub(" ", text).strip()


def _token_content(value) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from e
    return data if isinstance(data, dict) else {}


class Tokenizer:
    """A T5-style tokenizer: fixed-length batches of ids and attention masks.

    Args:
      tokenizer: a ``tokenizers.Tokenizer``; if it has no post-processor, one that appends
        ``eos_token`` is installed (what transformers' ``T5Tokenizer`` does).
      pad_token, eos_token: special token strings; both must be in the vocabulary.
      model_max_length: informational (``tokenizer_config.json``), not enforced.
    """

    def __init__(self, tokenizer: _HFTokenizer, *, pad_token: str = "<pad>", eos_token: str = "</s>", model_max_length: int | None = None):
        self._tok = tokenizer
        self.pad_token, self.eos_token = pad_token, eos_token
        self.pad_id = tokenizer.token_to_id(pad_token)
        self.eos_id = tokenizer.token_to_id(eos_token)
        if self.pad_id is None or self.eos_id is None:
            missing = [t for t, i in ((pad_token, self.pad_id), (eos_token, self.eos_id)) if i is None]
            raise ValueError(f"tokenizer vocabulary has no {missing} token(s)")
        if tokenizer.post_processor is None:
            tokenizer.post_processor = processors.TemplateProcessing(
                single=["$A", eos_token], pair=["$A", eos_token, "$B", eos_token], special_tokens=[(eos_token, self.eos_id)]
            )
        self.model_max_length = model_max_length

    @classmethod
    def from_folder(cls, folder: str | os.PathLike) -> Tokenizer:
        """Load ``tokenizer.json`` (+ ``tokenizer_config.json`` / ``special_tokens_map.json`` for pad/eos).

        ``folder`` is the tokenizer folder (``<pipeline>/tokenizer``) or the pipeline root holding it.

        Raises:
          FileNotFoundError: no ``tokenizer.json``, naming the path looked at.
          CheckpointError: a ``tokenizer.json`` the tokenizers library cannot read.
        """
        folder = Path(folder)
        if not any((folder / n).is_file() for n in ("tokenizer.json", "spiece.model")) and (folder / "tokenizer").is_dir():
            folder = folder / "tokenizer"
        path = folder / "tokenizer.json"
        config = _read_json(folder / "tokenizer_config.json")
        special = _read_json(folder / "special_tokens_map.json")

        def pick(name: str, default: str) -> str:
            return _token_content(config.get(name)) or _token_content(special.get(name)) or default

        max_len = config.get("model_max_length")
        kwargs = dict(pad_token=pick("pad_token", "<pad>"), eos_token=pick("eos_token", "</s>"),
                      model_max_length=int(max_len) if isinstance(max_len, (int, float)) and max_len < 1e12 else None)
        if path.is_file():
            try:
                tok = _HFTokenizer.from_file(str(path))
            except Exception as e:  # the tokenizers library raises a bare Exception on a malformed file
                raise CheckpointError(f"{path}: not a valid tokenizer file ({e}); re-download the tokenizer folder") from e
            return cls(tok, **kwargs)
        if (folder / "spiece.model").is_file():
            return SentencePieceTokenizer(folder / "spiece.model", **kwargs)
        raise FileNotFoundError(
            f"{path}: tokenizer file not found; the tokenizer folder needs tokenizer.json or spiece.model"
        )

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def __call__(self, prompts: str | Sequence[str], max_length: int) -> tuple[np.ndarray, np.ndarray]:
        """Tokenize a batch to exactly ``max_length`` tokens each.

        Returns:
          ``(input_ids, attention_mask)``, both int32 ``(B, max_length)``.
        """
        if isinstance(prompts, str):
            prompts = [prompts]
        if max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {max_length}")
        tok = self._tok
        tok.enable_truncation(max_length, stride=0, strategy="longest_first", direction="right")
        tok.enable_padding(direction="right", pad_id=self.pad_id, pad_type_id=0, pad_token=self.pad_token, length=max_length)
        encodings = tok.encode_batch(list(prompts), add_special_tokens=True)
        _warn_truncated([i for i, e in enumerate(encodings) if e.overflowing], max_length)
        ids = np.array([e.ids for e in encodings], dtype=np.int32).reshape(len(encodings), max_length)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int32).reshape(len(encodings), max_length)
        return ids, mask


def _warn_truncated(rows: list[int], max_length: int) -> None:
    """Say that prompts were cut to the encoder's length (the reference pipelines truncate as well)."""
    if rows:
        which = "a prompt exceeds" if len(rows) == 1 else f"{len(rows)} prompts exceed"
        warnings.warn(f"{which} the text encoder's {max_length} tokens: only the first {max_length} are used "
                      "(the rest is cut off, as the reference pipelines do)", UserWarning, stacklevel=3)


# --------------------------------------------------------------------------- demo tokenizer

# Common English words (and video-prompt vocabulary) for the demo tokenizer, most frequent first.
_DEMO_WORDS = """
the a of and in to is on with at by from an it as for this that are his her their its into over under
man woman person people child dog cat bird horse fish car boat train city street road river lake sea ocean
beach forest mountain mountains tree trees flower flowers field sky cloud clouds sun sunset sunrise moon star
stars night day morning evening light rain snow water fire wind house room window door table chair book
walking running sitting standing flying swimming dancing playing jumping looking smiling holding riding
driving eating talking walks runs sits stands flies swims dances plays looks holds rides
red blue green yellow white black orange purple pink brown gray golden silver bright dark
big small little large tiny old young new beautiful happy slow fast gentle soft warm cold
camera shot view close up wide slowly quickly video scene background foreground style cinematic realistic
high quality detailed motion moving through across around behind front side top down left right
one two three first some many all every while then after before near far above below between
hand hands face eyes hair head body arms legs smile dress shirt hat glasses coat shoes
grass sand stone rock wave waves garden park bridge building buildings tower castle village market
kitchen music guitar piano song paint painting robot ship plane space planet earth world
""".split()

_DEMO_CHARS = list("abcdefghijklmnopqrstuvwxyz") + list("0123456789") + list(".,!?'\"-:;()&") + list(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
)

_SPECIALS = ("<pad>", "</s>", "<unk>")  # ids 0, 1, 2 as in T5


class SentencePieceTokenizer(Tokenizer):
    """A T5 tokenizer from a SentencePiece ``spiece.model`` (folders without ``tokenizer.json``).

    Matches transformers' slow ``T5Tokenizer`` (which CogVideoX's pipelines use): SentencePiece
    pieces, truncated to ``max_length - 1``, then ``</s>``, then right padding. The vocabulary's
    ``<extra_id_N>`` sentinels are not split out of the text (prompts do not contain them).

    Raises:
      ValueError: the model has no pad or eos piece.
    """

    def __init__(self, model_file: str | os.PathLike, *, pad_token: str = "<pad>", eos_token: str = "</s>",
                 model_max_length: int | None = None):
        import sentencepiece

        self._sp = sentencepiece.SentencePieceProcessor(model_file=str(model_file))
        self.pad_token, self.eos_token = pad_token, eos_token
        self.pad_id, self.eos_id = self._sp.piece_to_id(pad_token), self._sp.piece_to_id(eos_token)
        unk = self._sp.unk_id()
        if (self.pad_id == unk and pad_token != self._sp.id_to_piece(unk)) or self.eos_id == unk:
            raise ValueError(f"{model_file}: the SentencePiece model has no {pad_token!r} / {eos_token!r} piece")
        self.model_max_length = model_max_length

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    def __call__(self, prompts: str | Sequence[str], max_length: int) -> tuple[np.ndarray, np.ndarray]:
        if isinstance(prompts, str):
            prompts = [prompts]
        if max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {max_length}")
        ids = np.full((len(prompts), max_length), self.pad_id, np.int32)
        mask = np.zeros((len(prompts), max_length), np.int32)
        encoded = self._sp.encode(list(prompts))
        _warn_truncated([i for i, pieces in enumerate(encoded) if len(pieces) > max_length - 1], max_length)
        for row, pieces in enumerate(encoded):
            seq = list(pieces[: max_length - 1]) + [self.eos_id]
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        return ids, mask


def _demo_pieces(vocab_size: int) -> list[tuple[str, float]]:
    base = [(t, 0.0) for t in _SPECIALS] + [("\u2581", -8.0)]
    chars = [(c, -10.0) for c in _DEMO_CHARS]
    words = [(f"\u2581{w}", -3.0 - 0.01 * i) for i, w in enumerate(dict.fromkeys(_DEMO_WORDS))]
    room = vocab_size - len(base)
    if room < 40:
        raise ValueError(f"write_demo_tokenizer: vocab_size {vocab_size} is too small (need at least {len(base) + 40})")
    # Words first (they make sensible pieces), then single characters as fallback.
    n_chars = min(len(chars), room // 3)
    n_words = min(len(words), room - n_chars)
    pieces = base + words[:n_words] + chars[: room - n_words]
    if len(pieces) != vocab_size:
        raise ValueError(f"write_demo_tokenizer: vocab_size {vocab_size} exceeds the built-in word list ({len(base) + len(words) + len(chars)})")
    return pieces


def build_demo_tokenizer(vocab_size: int = 256) -> _HFTokenizer:
    """The demo T5-style ``tokenizers.Tokenizer`` (Unigram, ``<pad>``=0, ``</s>``=1, ``<unk>``=2).

    Its pipeline is exactly what transformers' ``T5Tokenizer`` builds around a
    Unigram vocabulary (no normalizer, ``WhitespaceSplit`` + ``Metaspace`` with
    ``prepend_scheme="always"``, ``</s>`` appended), so transformers 4 (which
    uses the file as is) and 5 (which rebuilds it from the vocabulary) tokenize alike.
    """
    tok = _HFTokenizer(models.Unigram(_demo_pieces(vocab_size), unk_id=2, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)]
    )
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    tok.post_processor = processors.TemplateProcessing(
        single=["$A", "</s>"], pair=["$A", "</s>", "$B", "</s>"], special_tokens=[("</s>", 1)]
    )
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in _SPECIALS])
    return tok


def write_demo_tokenizer(folder: str | os.PathLike, vocab_size: int = 256) -> Path:
    """Write a tiny T5-style tokenizer in the transformers/diffusers layout.

    Writes ``tokenizer.json``, ``tokenizer_config.json`` (``tokenizer_class``
    ``"T5Tokenizer"``, ``model_max_length`` 512, ``extra_ids`` 0) and
    ``special_tokens_map.json`` into ``folder`` (created if needed): loadable by
    :meth:`Tokenizer.from_folder` and by ``transformers.AutoTokenizer.from_pretrained``.
    Needs only ``tokenizers`` and ``json``.

    Returns:
      ``folder`` as a Path.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    build_demo_tokenizer(vocab_size).save(str(folder / "tokenizer.json"))
    added = {
        str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}
        for i, t in enumerate(_SPECIALS)
    }
    config = {
        "tokenizer_class": "T5Tokenizer",
        "model_max_length": 512,
        "pad_token": "<pad>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "extra_ids": 0,
        "additional_special_tokens": [],
        "added_tokens_decoder": added,
        "clean_up_tokenization_spaces": False,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    special = {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}
    (folder / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n", encoding="utf-8")
    return folder
