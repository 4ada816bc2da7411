"""Qwen2's tokenizer and Qwen2.5-VL's chat template (rendered in Python) against transformers' ``Qwen2Tokenizer``
and ``apply_chat_template`` with the released chat template, on a tiny locally built tokenizer."""

import hashlib
import json

import numpy as np
import pytest
from tokenizers import pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer
from _qwen2_5_vl_reference import QWEN2_5_VL_CHAT_TEMPLATE, TEMPLATE_JSON_SHA256
from transformers import AutoTokenizer

from vidax.checkpoint.errors import CheckpointError
from vidax.encoders.qwen2_tokenizer import Qwen2Tokenizer, render_chat, write_qwen2_tokenizer

SYSTEM = "You are a helpful assistant. Describe the video by detailing the following aspects:         1. The content."
CORPUS = [SYSTEM, "A cat walks on the grass, realistic. A sign reads \"OPEN 24h\" in neon, 1080p",
          "system user assistant\n", "Ünïcödé café naïve ｆｕｌｌｗｉｄｔｈ 東京 2025"] * 3

CONVERSATIONS = [
    [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "A cat walks on the grass, realistic"}],
    [{"role": "system", "content": SYSTEM}, {"role": "user", "content": " "}],  # an empty prompt, as the pipeline sends
    [{"role": "user", "content": "no system message: the template adds its own"}],
    [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "a {{ jinja }} {% raw %} text, \"quoted\""},
     {"role": "assistant", "content": "an answer"}, {"role": "user", "content": "again\n\nwith  newlines\n"}],
    [{"role": "system", "content": ""}, {"role": "user", "content": "Ünïcödé 東京 123456 <|im_end|> <|vision_pad|>"}],
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_qwen2_tokenizer(tmp_path_factory.mktemp("qwen_tok"), CORPUS, num_merges=150,
                                 chat_template=QWEN2_5_VL_CHAT_TEMPLATE)


@pytest.fixture(scope="module")
def pair(folder):
    return Qwen2Tokenizer.from_folder(folder), AutoTokenizer.from_pretrained(folder)


def test_the_template_is_the_released_one():
    assert hashlib.sha256(json.dumps(QWEN2_5_VL_CHAT_TEMPLATE).encode()).hexdigest() == TEMPLATE_JSON_SHA256


def test_transformers_reads_the_tiny_tokenizer_as_qwen2(pair):
    ours, ref = pair
    assert type(ref).__name__ == "Qwen2Tokenizer" and ref.padding_side == "right"
    assert (ours.vocab_size, ours.pad_id) == (len(ref), ref.pad_token_id)
    for token in ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|vision_start|>", "<|image_pad|>"):
        assert ours.token_to_id(token) == ref.convert_tokens_to_ids(token)


@pytest.mark.parametrize("generation_prompt", [True, False])
def test_render_chat_matches_the_jinja_template(pair, generation_prompt):
    _, ref = pair
    for conversation in CONVERSATIONS:
        expected = ref.apply_chat_template(conversation, tokenize=False, add_generation_prompt=generation_prompt)
        assert render_chat(conversation, generation_prompt) == expected
    assert render_chat(CONVERSATIONS[0]).endswith("<|im_end|>\n<|im_start|>assistant\n")


def test_chat_ids_match_apply_chat_template(pair):
    """The pipeline's call: a batch, padding to max_length, truncation (the long conversations are cut)."""
    ours, ref = pair
    lengths = [len(ours.encode_ids(render_chat(c))) for c in CONVERSATIONS]
    max_length = sorted(lengths)[2]  # some rows padded, some truncated
    assert min(lengths) < max_length < max(lengths)
    expected = ref.apply_chat_template(CONVERSATIONS, add_generation_prompt=True, tokenize=True, return_dict=True,
                                       padding="max_length", max_length=max_length, truncation=True,
                                       return_tensors="np")
    with pytest.warns(UserWarning, match="conversations are longer than"):
        ids, mask = ours.apply_chat_template(CONVERSATIONS, max_length)
    assert ids.dtype == mask.dtype == np.int32 and ids.shape == (len(CONVERSATIONS), max_length)
    np.testing.assert_array_equal(ids, expected["input_ids"])
    np.testing.assert_array_equal(mask, expected["attention_mask"])
    assert (ids[mask == 0] == ours.pad_id).all() and mask[:, 0].all()
    # Special tokens written in a message are read as special tokens, as the reference reads them.
    assert ours.token_to_id("<|vision_pad|>") in ids[4]
    for text in ("ｆｕｌｌｗｉｄｔｈ café 2025", "x" * 50, "\n\n  \t a"):
        assert ours.encode_ids(text) == ref(text, add_special_tokens=False).input_ids


def test_pipeline_of_the_file_is_replaced_as_transformers_5_does(folder, tmp_path):
    """transformers 5's Qwen2Tokenizer rebuilds normalizer and pre-tokenizer from its class, not from the file."""
    tok = HFTokenizer.from_file(str(folder / "tokenizer.json"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.normalizer = None
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text((folder / "tokenizer_config.json").read_text())
    text = "Ünïcödé café, 12 cats!\n\nend"
    assert Qwen2Tokenizer.from_folder(tmp_path).encode_ids(text) == AutoTokenizer.from_pretrained(tmp_path)(
        text, add_special_tokens=False).input_ids


def test_bad_folders_and_inputs_are_named(folder, tmp_path):
    with pytest.raises(CheckpointError, match="tokenizer.json: file not found"):
        Qwen2Tokenizer.from_folder(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not a valid tokenizer file"):
        Qwen2Tokenizer.from_folder(tmp_path)
    with open(tmp_path / "tokenizer.json", "wb") as f:  # sparse: no disk used
        f.truncate(65 << 20)
    with pytest.raises(CheckpointError, match="too large"):
        Qwen2Tokenizer.from_folder(tmp_path)
    (tmp_path / "tokenizer.json").write_text((folder / "tokenizer.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"pad_token": "<pad>"}))
    with pytest.raises(CheckpointError, match="no pad token '<pad>'"):
        Qwen2Tokenizer.from_folder(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text("[1, 2]")
    with pytest.raises(CheckpointError, match="expected a JSON object"):
        Qwen2Tokenizer.from_folder(tmp_path)
    ours = Qwen2Tokenizer.from_folder(folder)
    with pytest.raises(ValueError, match="only string contents"):
        render_chat([{"role": "user", "content": [{"type": "image"}]}])
    with pytest.raises(ValueError, match="string 'role'"):
        render_chat([{"content": "x"}])
    with pytest.raises(ValueError, match="list of"):
        render_chat("a prompt, not a conversation")
    with pytest.raises(ValueError, match="max_length"):
        ours(["x"], 0)
