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

    def token_to_id(self, token: str) -> int | None:
        """The id of ``token`` (a vocabulary entry or an added/special token), or None if it has none."""
        return self._tok.token_to_id(token)

    def encode_ids(self, text: str) -> list[int]:
        """The ids of one text with the special tokens the post-processor adds, neither truncated nor padded
        (transformers ``tokenizer(text).input_ids``)."""
        self._tok.no_truncation()
        self._tok.no_padding()
        return list(self._tok.encode(text, add_special_tokens=True).ids)

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

    def token_to_id(self, token: str) -> int | None:
        i = self._sp.piece_to_id(token)
        return None if i == self._sp.unk_id() and token != self._sp.id_to_piece(i) else i

    def encode_ids(self, text: str) -> list[int]:
        return list(self._sp.encode(text)) + [self.eos_id]

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


# --------------------------------------------------------------------------- byte-level BPE (Llama 3, CLIP)

#: The pre-tokenizer split of Llama 3's ``tokenizer.json`` (tiktoken's cl100k pattern), applied before the byte-level
#: mapping; the LLaVA-Llama-3-8B text encoder of HunyuanVideo uses this tokenizer.
LLAMA3_SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                        r"|\s*[\r\n]+|\s+(?!\S)|\s+")

#: The pre-tokenizer split of transformers' ``CLIPTokenizer`` (``models/clip/tokenization_clip.py``).
CLIP_SPLIT_PATTERN = r"<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"

#: Special tokens of the demo Llama-3-style tokenizer, in id order after the BPE vocabulary: Llama 3's
#: chat-template tokens, LLaVA's image placeholder and a padding token (LLaVA-Llama-3 adds both).
LLAMA3_SPECIALS = ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                   "<image>", "<pad>")

CLIP_BOS, CLIP_EOS = "<|startoftext|>", "<|endoftext|>"

#: Meta-Llama-3's ``tokenizer_config.json`` ``model_max_length``: transformers' "no limit" (``int(1e30)``).
LLAMA3_MODEL_MAX_LENGTH = int(1e30)


def byte_alphabet() -> list[str]:
    """The 256 characters of the GPT-2 byte-to-unicode map (``ByteLevel.alphabet()``), sorted: one per byte."""
    return sorted(pre_tokenizers.ByteLevel.alphabet())


def learn_bpe_merges(words: Sequence[Sequence[str]], num_merges: int) -> list[tuple[str, str]]:
    """Learn BPE merges from pre-tokenized words, deterministically (no hash order, no threads).

    Each step merges the most frequent adjacent pair over all words (ties: the lexicographically smallest
    pair), as Sennrich et al.'s algorithm; it stops early when no pair is left.

    Args:
      words: words as sequences of initial symbols (e.g. byte-level characters).
      num_merges: the most merges to learn.

    Returns:
      the merges, in rank order.
    """
    counts: dict[tuple[str, ...], int] = {}
    for w in words:
        if len(w):
            counts[tuple(w)] = counts.get(tuple(w), 0) + 1
    merges: list[tuple[str, str]] = []
    for _ in range(num_merges):
        pairs: dict[tuple[str, str], int] = {}
        for w, c in counts.items():
            for pair in zip(w, w[1:]):
                pairs[pair] = pairs.get(pair, 0) + c
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        joined = best[0] + best[1]
        new_counts: dict[tuple[str, ...], int] = {}
        for w, c in counts.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(joined)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new_counts[tuple(out)] = new_counts.get(tuple(out), 0) + c
        counts = new_counts
    return merges


def _without_specials(texts: Sequence[str], specials: Sequence[str]) -> list[str]:
    if not specials:
        return list(texts)
    pattern = re.compile("|".join(re.escape(s) for s in sorted(specials, key=len, reverse=True)))
    return [piece for t in texts for piece in pattern.split(t) if piece]


def _llama3_pre_tokenizer():
    from tokenizers import Regex

    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])


def build_llama3_tokenizer(vocab: dict[str, int], merges: Sequence[tuple[str, str]],
                           special_tokens: Sequence[str] = LLAMA3_SPECIALS,
                           bos_token: str = "<|begin_of_text|>") -> _HFTokenizer:
    """A Llama-3-style ``tokenizers.Tokenizer``: byte-level BPE behind Llama 3's regex split, the special tokens
    appended after the vocabulary (ids ``len(vocab)...``), and a post-processor that prepends ``bos_token``.

    This is the pipeline of Meta-Llama-3's ``tokenizer.json`` (which transformers loads as is, as
    ``PreTrainedTokenizerFast``); only the vocabulary is small.

    Raises:
      ValueError: ``bos_token`` is not among ``special_tokens``.
    """
    if bos_token not in special_tokens:
        raise ValueError(f"build_llama3_tokenizer: bos_token {bos_token!r} is not among the special tokens")
    tok = _HFTokenizer(models.BPE(vocab=dict(vocab), merges=list(merges), fuse_unk=False, byte_fallback=False))
    tok.normalizer = None
    tok.pre_tokenizer = _llama3_pre_tokenizer()
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special_tokens])
    bos_id = tok.token_to_id(bos_token)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos_token} $A", pair=f"{bos_token} $A {bos_token}:1 $B:1", special_tokens=[(bos_token, bos_id)])
    return tok


def _clip_normalizer():
    from tokenizers import Regex, normalizers

    return normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()])


def _clip_pre_tokenizer():
    from tokenizers import Regex

    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(CLIP_SPLIT_PATTERN), behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False),
    ])


def build_clip_tokenizer(vocab: dict[str, int], merges: Sequence[tuple[str, str]], *, bos_token: str = CLIP_BOS,
                         eos_token: str = CLIP_EOS, unk_token: str = CLIP_EOS) -> _HFTokenizer:
    """A CLIP ``tokenizers.Tokenizer`` from a vocabulary and merges (``vocab.json`` + ``merges.txt``).

    The pipeline transformers' ``CLIPTokenizer`` builds (``models/clip/tokenization_clip.py``): NFC, whitespace
    runs to one space, lower case; CLIP's regex split then the byte-level map; BPE with ``"</w>"`` marking the end
    of a word; ``<|startoftext|> $A <|endoftext|>`` around the ids.

    Raises:
      ValueError: the vocabulary lacks the bos or eos token.
    """
    missing = [t for t in (bos_token, eos_token) if t not in vocab]
    if missing:
        raise ValueError(f"build_clip_tokenizer: the vocabulary has no {missing} token(s)")
    tok = _HFTokenizer(models.BPE(vocab=dict(vocab), merges=list(merges), continuing_subword_prefix="",
                                  end_of_word_suffix="</w>", fuse_unk=False, unk_token=unk_token))
    tok.normalizer = _clip_normalizer()
    tok.pre_tokenizer = _clip_pre_tokenizer()
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in (bos_token, eos_token)])
    tok.post_processor = processors.RobertaProcessing((eos_token, vocab[eos_token]), (bos_token, vocab[bos_token]),
                                                      trim_offsets=False, add_prefix_space=False)
    return tok


#: Largest ``vocab.json`` / ``merges.txt`` read (CLIP's are 1.6 MB and 0.5 MB).
MAX_VOCAB_FILE_BYTES = 64 << 20


def read_bpe_files(folder: str | os.PathLike) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """``vocab.json`` and ``merges.txt`` of a slow-tokenizer folder (what ``CLIPTokenizer.save_pretrained`` of
    transformers 4 writes, without ``tokenizer.json``).

    Raises:
      CheckpointError: a missing, oversized or malformed file (named).
    """
    folder = Path(folder)
    out = []
    for name in ("vocab.json", "merges.txt"):
        path = folder / name
        if not path.is_file():
            raise CheckpointError(f"{path}: file not found (a tokenizer folder needs tokenizer.json, or vocab.json "
                                  "and merges.txt)")
        if path.stat().st_size > MAX_VOCAB_FILE_BYTES:
            raise CheckpointError(f"{path}: {path.stat().st_size:,} bytes is too large for a tokenizer file")
        out.append(path.read_text(encoding="utf-8"))
    try:
        vocab = json.loads(out[0])
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{folder / 'vocab.json'}: not valid JSON ({e})") from None
    if not isinstance(vocab, dict) or not all(isinstance(k, str) and isinstance(v, int) for k, v in vocab.items()):
        raise CheckpointError(f"{folder / 'vocab.json'}: expected an object of token -> integer id")
    merges = []
    for n, line in enumerate(out[1].splitlines(), 1):
        if not line.strip() or (n == 1 and line.startswith("#version")):
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise CheckpointError(f"{folder / 'merges.txt'}: line {n} is not two tokens separated by a space")
        merges.append((parts[0], parts[1]))
    return vocab, merges


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _added_tokens_decoder(tok: _HFTokenizer, tokens: Sequence[str]) -> dict:
    return {str(tok.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                      "single_word": False, "special": True} for t in tokens}


def write_llama3_tokenizer(folder: str | os.PathLike, corpus: Sequence[str], *, num_merges: int = 200,
                           special_tokens: Sequence[str] = LLAMA3_SPECIALS, pad_token: str = "<pad>",
                           eos_token: str = "<|eot_id|>", model_max_length: int = LLAMA3_MODEL_MAX_LENGTH) -> Path:
    """Write a tiny Llama-3-style tokenizer (byte-level BPE learned from ``corpus``) in the transformers layout.

    Writes ``tokenizer.json`` (:func:`build_llama3_tokenizer`; vocabulary: the 256 byte symbols, then one token per
    merge, then ``special_tokens``) and ``tokenizer_config.json`` (``tokenizer_class`` ``"PreTrainedTokenizerFast"``
    as Meta-Llama-3's, so transformers uses the file as is; ``padding_side`` ``"right"`` as HunyuanVideo loads it).
    Readable by :meth:`Tokenizer.from_folder` and ``transformers.AutoTokenizer``. Needs only ``tokenizers``.

    Args:
      corpus: texts to learn merges from (special tokens in them are cut out first).
      model_max_length: ``tokenizer_config.json``'s; the default is Meta-Llama-3's "no limit" value (with a real
        limit, transformers pads a ``padding="max_length"`` call without a length to it, as HunyuanVideo's
        reference does when it counts its template's tokens).
      num_merges: merges to learn (the vocabulary has ``256 + num_merges`` BPE entries at most).
      special_tokens: added after the vocabulary, in order; must include ``<|begin_of_text|>``, ``pad_token`` and
        ``eos_token``.

    Returns:
      ``folder`` as a Path.
    """
    missing = [t for t in ("<|begin_of_text|>", pad_token, eos_token) if t not in special_tokens]
    if missing:
        raise ValueError(f"write_llama3_tokenizer: special_tokens lacks {missing}")
    pre = _llama3_pre_tokenizer()
    words = [list(piece) for text in _without_specials(corpus, special_tokens)
             for piece, _ in pre.pre_tokenize_str(text)]
    merges = learn_bpe_merges(words, num_merges)
    vocab = {c: i for i, c in enumerate(byte_alphabet())}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    tok = build_llama3_tokenizer(vocab, merges, special_tokens)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    _write_json(folder / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>", "eos_token": eos_token,
        "pad_token": pad_token, "padding_side": "right", "model_max_length": model_max_length,
        "clean_up_tokenization_spaces": False, "added_tokens_decoder": _added_tokens_decoder(tok, special_tokens),
    })
    return folder


def write_clip_tokenizer(folder: str | os.PathLike, corpus: Sequence[str], *, num_merges: int = 200,
                         tokenizer_json: bool = True) -> Path:
    """Write a tiny CLIP tokenizer (BPE learned from ``corpus``) in the transformers layout.

    Writes ``vocab.json`` (the 256 byte symbols, the same with ``"</w>"``, one token per merge, then
    ``<|startoftext|>``, ``<|endoftext|>`` last, as in CLIP where the eos id is the largest), ``merges.txt``,
    ``tokenizer_config.json`` (``CLIPTokenizer``, ``model_max_length`` 77), ``special_tokens_map.json`` and, with
    ``tokenizer_json``, ``tokenizer.json`` (:func:`build_clip_tokenizer`). Without it the folder is what a slow
    ``CLIPTokenizer.save_pretrained`` writes (diffusers' HunyuanVideo ``tokenizer_2/``).

    Returns:
      ``folder`` as a Path.
    """
    normalizer, pre = _clip_normalizer(), _clip_pre_tokenizer()
    words = []
    for text in _without_specials(corpus, (CLIP_BOS, CLIP_EOS)):
        for piece, _ in pre.pre_tokenize_str(normalizer.normalize_str(text)):
            symbols = list(piece)
            symbols[-1] += "</w>"
            words.append(symbols)
    merges = learn_bpe_merges(words, num_merges)
    alphabet = byte_alphabet()
    vocab = {c: i for i, c in enumerate(alphabet + [c + "</w>" for c in alphabet])}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    vocab[CLIP_BOS], vocab[CLIP_EOS] = len(vocab), len(vocab) + 1
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    _write_json(folder / "vocab.json", vocab)
    (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges), encoding="utf-8")
    tok = build_clip_tokenizer(vocab, merges)
    if tokenizer_json:
        tok.save(str(folder / "tokenizer.json"))
    special = {"bos_token": CLIP_BOS, "eos_token": CLIP_EOS, "pad_token": CLIP_EOS, "unk_token": CLIP_EOS}
    _write_json(folder / "tokenizer_config.json", {
        "tokenizer_class": "CLIPTokenizer", **special, "model_max_length": 77, "do_lower_case": True,
        "clean_up_tokenization_spaces": False, "added_tokens_decoder": _added_tokens_decoder(tok, (CLIP_BOS, CLIP_EOS)),
    })
    _write_json(folder / "special_tokens_map.json", special)
    return folder


def load_clip_tokenizer(folder: str | os.PathLike) -> Tokenizer:
    """A CLIP tokenizer folder as a :class:`Tokenizer` (pad and eos ``<|endoftext|>`` unless the folder says else).

    Reads ``tokenizer.json`` where present, else ``vocab.json`` + ``merges.txt`` through
    :func:`build_clip_tokenizer` (the folder a slow ``CLIPTokenizer`` saved: diffusers' HunyuanVideo
    ``tokenizer_2/``). Either way it tokenizes as transformers 5's ``CLIPTokenizer``.

    Raises:
      CheckpointError: neither form is there, or a file is malformed (named).
    """
    folder = Path(folder)
    if (folder / "tokenizer.json").is_file():
        config = _read_json(folder / "tokenizer_config.json")
        special = _read_json(folder / "special_tokens_map.json")
        if not any(config.get(k) or special.get(k) for k in ("pad_token", "eos_token")):
            # transformers' CLIPTokenizer defaults (pad and eos <|endoftext|>)
            path = folder / "tokenizer.json"
            try:
                tok = _HFTokenizer.from_file(str(path))
            except Exception as e:  # the tokenizers library raises a bare Exception on a malformed file
                raise CheckpointError(f"{path}: not a valid tokenizer file ({e}); re-download the tokenizer "
                                      "folder") from e
            return Tokenizer(tok, pad_token=CLIP_EOS, eos_token=CLIP_EOS)
        return Tokenizer.from_folder(folder)
    vocab, merges = read_bpe_files(folder)
    config = _read_json(folder / "tokenizer_config.json")
    special = _read_json(folder / "special_tokens_map.json")

    def pick(name: str) -> str:
        return _token_content(config.get(name)) or _token_content(special.get(name)) or {
            "bos_token": CLIP_BOS}.get(name, CLIP_EOS)

    try:
        tok = build_clip_tokenizer(vocab, merges, bos_token=pick("bos_token"), eos_token=pick("eos_token"),
                                   unk_token=pick("unk_token"))
    except ValueError as e:
        raise CheckpointError(f"{folder}: {e}") from None
    return Tokenizer(tok, pad_token=pick("pad_token"), eos_token=pick("eos_token"))
