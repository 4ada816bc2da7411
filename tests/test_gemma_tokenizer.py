"""LTX-2's Gemma tokenization against upstream ltx-core's LTXGemmaTokenizer (restated below) over a transformers
tokenizer built locally, with and without a post-processor that adds <bos> (Gemma 3 / Gemma 4)."""

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from vidax.encoders.gemma_tokenizer import GemmaTokenizer

WORDS = "a red fox jumps over the lazy dog in snow at night while bells ring".split()
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]  # Gemma's ids: pad 0, eos 1, bos 2
PROMPTS = ["  a red fox jumps over the lazy dog  ", "snow", "", "the dog " * 20]


def _write(folder, adds_bos: bool):
    vocab = {t: i for i, t in enumerate(SPECIALS + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if adds_bos:  # Gemma 3's tokenizer puts <bos> first; Gemma 4's does not
        tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                 unk_token="<unk>")
    hf.save_pretrained(folder)
    return PreTrainedTokenizerFast.from_pretrained(folder)


def _upstream(tokenizer, text, max_length):
    # ltx-core text_encoders/gemma/tokenizer.py, LTXGemmaTokenizer (padding_side left) .tokenize_with_weights
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    text = text.strip()
    bos_id = tokenizer.bos_token_id
    encoded = tokenizer(text, padding=False, truncation=True, max_length=max_length, return_tensors="pt")
    input_ids = encoded.input_ids[0].tolist()
    if not input_ids or input_ids[0] != bos_id:
        input_ids = [bos_id, *input_ids][:max_length]
    padded = tokenizer.pad({"input_ids": [input_ids]}, padding="max_length", max_length=max_length,
                           return_tensors="pt", return_attention_mask=True)
    return padded.input_ids[0].numpy(), padded.attention_mask[0].numpy()


def _diffusers(tokenizer, prompts, max_length):
    # diffusers LTX2Pipeline._get_gemma_prompt_embeds
    tokenizer.padding_side = "left"
    out = tokenizer([p.strip() for p in prompts], padding="max_length", max_length=max_length, truncation=True,
                    add_special_tokens=True, return_tensors="np")
    return out.input_ids, out.attention_mask


@pytest.mark.parametrize("adds_bos", [True, False], ids=["gemma3_bos", "gemma4_no_bos"])
def test_matches_upstream(tmp_path, adds_bos):
    hf = _write(tmp_path, adds_bos)
    ours = GemmaTokenizer.from_folder(tmp_path)
    for max_length in (16, 1):
        ids, mask = ours(PROMPTS, max_length)
        assert ids.shape == mask.shape == (len(PROMPTS), max_length) and ids.dtype == np.int32
        for row, prompt in enumerate(PROMPTS):
            ref_ids, ref_mask = _upstream(hf, prompt, max_length)
            np.testing.assert_array_equal(ids[row], ref_ids)
            np.testing.assert_array_equal(mask[row], ref_mask)
    ids, mask = ours(PROMPTS, 16)
    first = ids[np.arange(len(PROMPTS)), 16 - mask.sum(axis=1)]
    assert (first == 2).all() and (mask[:, -1] == 1).all()  # every row starts with <bos>, padding on the left
    d_ids, d_mask = _diffusers(hf, PROMPTS, 16)
    if adds_bos:  # diffusers tokenizes as upstream when the tokenizer adds <bos> itself
        np.testing.assert_array_equal(ids, d_ids)
        np.testing.assert_array_equal(mask, d_mask)
    else:  # without it diffusers' rows have no <bos> (upstream prepends one): the documented departure
        assert not (d_ids[d_mask == 1] == 2).any() and (ids[:, -1] != 2).any()


def test_unreadable_files_are_named(tmp_path):
    from vidax.checkpoint.errors import CheckpointError

    _write(tmp_path, False)
    (tmp_path / "tokenizer_config.json").write_bytes(b"\xff\xfe{}")
    with pytest.raises(CheckpointError, match="tokenizer_config.json: not UTF-8"):
        GemmaTokenizer.from_folder(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text("{}")
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="tokenizer.json: not a valid tokenizer file"):
        GemmaTokenizer.from_folder(tmp_path)
