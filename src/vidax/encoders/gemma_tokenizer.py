"""LTX-2's Gemma tokenization over the ``tokenizers`` library (no transformers at run time).

Follows upstream Lightricks/LTX-2 ``ltx-core`` ``text_encoders/gemma/tokenizer.py`` (``LTXGemmaTokenizer
.tokenize_with_weights``): the prompt is stripped, tokenized with the tokenizer's special tokens and truncated to
``max_length`` (1024, ``gemma_assets.TOKENIZER_MAX_LENGTH``), a ``<bos>`` is put first when the tokenizer did not
(Gemma 3's post-processor adds it, Gemma 4's does not), and the row is padded on the LEFT to ``max_length`` with
the pad token (the eos token when there is none), mask 0.

diffusers 0.42.1 ``LTX2Pipeline._get_gemma_prompt_embeds`` tokenizes the same way except for the ``<bos>``: it
relies on ``add_special_tokens=True``, so with a Gemma 4 tokenizer its rows start without one. Upstream is
followed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from vidax.checkpoint.errors import CheckpointError
from vidax.core.config_values import read_json
from tokenizers import Tokenizer as _HFTokenizer

#: upstream ``gemma_assets.TOKENIZER_MAX_LENGTH``; diffusers' ``max_sequence_length`` default.
MAX_LENGTH = 1024


def _content(value) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


#: The largest ``tokenizer.json`` read (Gemma 4's is about 32 MB).
MAX_TOKENIZER_BYTES = 256 << 20

class GemmaTokenizer:
    """Left-padded fixed-length batches, as LTX-2 tokenizes for its Gemma text encoder.

    Args:
      tokenizer: a ``tokenizers.Tokenizer`` (the folder's ``tokenizer.json``).
      bos_token, pad_token, eos_token: special token strings; ``bos_token`` must be in the vocabulary, and
        ``pad_token`` or (without one) ``eos_token``.

    Raises:
      ValueError: a special token missing from the vocabulary.
    """

    def __init__(self, tokenizer: _HFTokenizer, *, bos_token: str = "<bos>", pad_token: str | None = "<pad>",
                 eos_token: str = "<eos>"):
        self._tok = tokenizer
        self.bos_id = tokenizer.token_to_id(bos_token)
        pad = pad_token if pad_token is not None and tokenizer.token_to_id(pad_token) is not None else eos_token
        self.pad_id = tokenizer.token_to_id(pad)
        if self.bos_id is None or self.pad_id is None:
            raise ValueError(f"Gemma tokenizer: vocabulary has no {bos_token!r} or {pad!r} token (the encode path "
                             "needs a leading <bos> and a pad token)")

    @classmethod
    def from_folder(cls, folder: str | os.PathLike) -> GemmaTokenizer:
        """Load ``tokenizer.json`` and the special tokens of ``tokenizer_config.json`` (diffusers' ``tokenizer/``).

        Raises:
          FileNotFoundError: no ``tokenizer.json``. CheckpointError: one the tokenizers library cannot read, or over
            :data:`MAX_TOKENIZER_BYTES`; a ``tokenizer_config.json`` that is not a JSON object (file named).
        """
        folder = Path(folder)
        path = folder / "tokenizer.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: tokenizer file not found (the Gemma tokenizer folder needs it)")
        config_path = folder / "tokenizer_config.json"
        config = read_json(config_path) if config_path.is_file() else {}
        size = path.stat().st_size
        if size > MAX_TOKENIZER_BYTES:  # Gemma's is about 32 MB
            raise CheckpointError(f"{path}: {size:,} bytes is not a tokenizer file (at most {MAX_TOKENIZER_BYTES:,}); "
                                  "re-download the checkpoint")
        try:
            tok = _HFTokenizer.from_file(str(path))
        except Exception as e:  # the tokenizers library raises a bare Exception on a malformed file
            raise CheckpointError(f"{path}: not a valid tokenizer file ({e})") from e
        return cls(tok, bos_token=_content(config.get("bos_token")) or "<bos>",
                   pad_token=_content(config.get("pad_token")), eos_token=_content(config.get("eos_token")) or "<eos>")

    def __call__(self, prompts: str | Sequence[str], max_length: int = MAX_LENGTH) -> tuple[np.ndarray, np.ndarray]:
        """Tokenize a batch to exactly ``max_length`` tokens each, left-padded.

        Returns:
          ``(input_ids, attention_mask)``, both int32 ``(B, max_length)``.

        Raises:
          ValueError: ``max_length`` outside ``[1, 2^20]``.
        """
        if isinstance(prompts, str):
            prompts = [prompts]
        if not (isinstance(max_length, int) and 1 <= max_length <= 1 << 20):
            raise ValueError(f"max_length must be an integer in [1, 2^20], got {max_length!r}")
        tok = self._tok
        tok.no_padding()
        tok.enable_truncation(max_length, stride=0, strategy="longest_first", direction="right")
        ids = np.full((len(prompts), max_length), self.pad_id, np.int32)
        mask = np.zeros((len(prompts), max_length), np.int32)
        for row, enc in enumerate(tok.encode_batch([p.strip() for p in prompts], add_special_tokens=True)):
            seq = list(enc.ids)
            if not seq or seq[0] != self.bos_id:
                seq = [self.bos_id, *seq][:max_length]
            if seq:
                ids[row, max_length - len(seq):] = seq
                mask[row, max_length - len(seq):] = 1
        return ids, mask
