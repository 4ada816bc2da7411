"""Parity of the UMT5 / T5 text encoder with transformers, and of the tokenizer wrapper with AutoTokenizer.

Encoder comparisons cover ALL rows, padded ones included: transformers computes
padded query rows too (they attend to the valid keys) and so do we.
"""

import json
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.loader import DictReader, load_params
from vidax.checkpoint.safetensors_io import CheckpointReader
from vidax.encoders.t5 import (
    T5Config,
    encode,
    encode_prompts,
    load_t5_encoder,
    relative_position_bucket,
    t5_keymap,
    t5_specs,
)
from vidax.encoders.tokenizer import Tokenizer, clean_prompt, write_demo_tokenizer

jax.config.update("jax_default_matmul_precision", "highest")

VOCAB = 256
PROMPTS = [
    "A dog walking on the beach at sunset, cinematic camera shot, high quality",
    "a cat",
]


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    return write_demo_tokenizer(tmp_path_factory.mktemp("demo") / "tokenizer", vocab_size=VOCAB)


def _hf_model(model_type):
    from transformers import T5Config as HFT5Config
    from transformers import T5EncoderModel, UMT5Config, UMT5EncoderModel

    config_cls, model_cls = (UMT5Config, UMT5EncoderModel) if model_type == "umt5" else (HFT5Config, T5EncoderModel)
    torch.manual_seed(0)
    model = model_cls(
        config_cls(
            vocab_size=VOCAB, d_model=64, d_kv=16, num_heads=4, d_ff=128, num_layers=2,
            relative_attention_num_buckets=32, relative_attention_max_distance=128,
            feed_forward_proj="gated-gelu", layer_norm_epsilon=1e-6,
        )
    ).eval()
    with torch.no_grad():  # norm scales start at 1: perturb them so they are tested too
        for name, prm in model.named_parameters():
            if "norm" in name:
                prm.add_(0.1 * torch.randn_like(prm))
    return model


@pytest.fixture(scope="module", params=["umt5", "t5"])
def saved(request, tmp_path_factory):
    model = _hf_model(request.param)
    path = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(path)
    cfg = T5Config.from_dict(json.loads((path / "config.json").read_text()))
    assert cfg.model_type == request.param and cfg.per_layer_bias == (request.param == "umt5")
    return model, cfg, path


def _reference(model, ids, mask):
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(ids).long(), attention_mask=torch.from_numpy(mask).long())
    return out.last_hidden_state.numpy()


def test_encoder_parity_fp32(saved, tok_dir):
    model, cfg, path = saved
    # Two prompts of different lengths, right padded to 48: offsets up to 47 reach the log-spaced buckets.
    ids, mask = Tokenizer.from_folder(tok_dir)(PROMPTS, 48)
    assert 0 < mask[1].sum() < mask[0].sum() < 48
    ref = _reference(model, ids, mask)
    reader = CheckpointReader(path)
    params = load_params(reader, t5_keymap(cfg, reader.keys()), t5_specs(cfg), np.float32, source=str(path))
    out = np.asarray(encode(params, cfg, ids, mask))
    assert out.dtype == np.float32 and out.shape == ref.shape
    assert _rel(out, ref) < 1e-5  # all rows, padded included
    for b in range(2):
        n = mask[b].sum()
        assert _rel(out[b, :n], ref[b, :n]) < 1e-5

    # encode_prompts: Wan convention, cut at the true length and zero-filled to max_sequence_length.
    emb = np.asarray(encode_prompts(params, cfg, ids, mask, max_sequence_length=64))
    assert emb.shape == (2, 64, cfg.d_model) and emb.dtype == np.float32
    for b in range(2):
        n = mask[b].sum()
        assert np.all(emb[b, n:] == 0.0)
        assert _rel(emb[b, :n], ref[b, :n]) < 1e-5
    np.testing.assert_array_equal(emb[:, :48][mask.astype(bool)], out[mask.astype(bool)])

    # The convenience loader gives the same parameters.
    params2, cfg2 = load_t5_encoder(path)
    assert cfg2 == cfg
    np.testing.assert_array_equal(np.asarray(params2["shared"]["embedding"]), np.asarray(params["shared"]["embedding"]))


def test_bf16_drift_documented(saved, tok_dir):
    """bf16 weights drift from the fp32 reference: why float32 is the encoder's default (paper fault 2)."""
    model, cfg, path = saved
    ids, mask = Tokenizer.from_folder(tok_dir)(PROMPTS[:1], 64)  # one prompt, padded to the full length
    ref = _reference(model, ids, mask)
    params = load_params(CheckpointReader(path), t5_keymap(cfg), t5_specs(cfg), jnp.bfloat16)
    assert params["blocks"]["attn"]["q"]["kernel"].dtype == jnp.bfloat16
    assert params["blocks"]["ffn"]["wo"]["kernel"].dtype == jnp.float32  # kept fp32, as transformers does
    assert params["blocks"]["attn_norm"]["scale"].dtype == jnp.float32
    out = np.asarray(encode(params, cfg, ids, mask))
    assert out.dtype == np.float32
    err = _rel(out, ref)
    # Observed ~4e-3 (t5) / ~5e-3 (umt5) on this tiny model; deeper/wider real encoders drift more.
    assert 1e-5 < err < 5e-2, err


def test_relative_position_buckets_match_transformers():
    from transformers import UMT5Config
    from transformers.models.umt5.modeling_umt5 import UMT5Attention

    for buckets, distance in [(32, 128), (32, 64), (64, 256)]:
        attn = UMT5Attention(
            UMT5Config(d_model=8, d_kv=8, num_heads=1, relative_attention_num_buckets=buckets, relative_attention_max_distance=distance),
            has_relative_attention_bias=True,
        )
        rel = np.arange(-700, 701)
        ref = attn._relative_position_bucket(torch.from_numpy(rel)).numpy()
        np.testing.assert_array_equal(relative_position_bucket(rel, buckets, distance), ref)


def test_strict_loading(saved):
    _, cfg, path = saved
    reader = CheckpointReader(path)
    tensors = {k: np.asarray(reader.get(k)) for k in reader.keys()}
    specs = t5_specs(cfg)

    dropped = "encoder.block.1.layer.1.DenseReluDense.wi_1.weight"
    with pytest.raises(CheckpointError, match=dropped.replace(".", r"\.")):
        load_params(DictReader({k: v for k, v in tensors.items() if k != dropped}), t5_keymap(cfg), specs, place=False)

    with pytest.raises(CheckpointError, match="encoder.block.0.layer.0.SelfAttention.bogus.weight"):
        extra = dict(tensors, **{"encoder.block.0.layer.0.SelfAttention.bogus.weight": tensors["shared.weight"]})
        load_params(DictReader(extra), t5_keymap(cfg), specs, place=False)

    # Tied embeddings: a stored duplicate encoder.embed_tokens.weight is ignored (transformers re-ties it to shared) ...
    tied = dict(tensors, **{"encoder.embed_tokens.weight": tensors["shared.weight"]})
    p = load_params(DictReader(tied), t5_keymap(cfg, tied), specs, place=False)
    np.testing.assert_array_equal(p["shared"]["embedding"], tensors["shared.weight"])
    # ... and a checkpoint holding only encoder.embed_tokens.weight loads from it when the key list is given.
    only = {("encoder.embed_tokens.weight" if k == "shared.weight" else k): v for k, v in tensors.items()}
    p = load_params(DictReader(only), t5_keymap(cfg, only), specs, place=False)
    np.testing.assert_array_equal(p["shared"]["embedding"], tensors["shared.weight"])
    with pytest.raises(CheckpointError, match=r"shared\.weight"):
        load_params(DictReader(only), t5_keymap(cfg), specs, place=False)


def test_right_padding_required(saved):
    _, cfg, path = saved
    params = load_params(CheckpointReader(path), t5_keymap(cfg), t5_specs(cfg))
    ids = np.full((1, 8), 5, np.int32)
    with pytest.raises(ValueError, match="right padding"):
        encode(params, cfg, ids, np.array([[0, 1, 1, 1, 1, 1, 1, 1]], np.int32))
    with pytest.raises(ValueError, match="max_sequence_length"):
        encode_prompts(params, cfg, ids, np.ones((1, 8), np.int32), max_sequence_length=4)


# --------------------------------------------------------------------------- tokenizer

TOKENIZER_PROMPTS = [
    "a cat",
    "A dog walking on the beach at sunset, cinematic camera shot. " * 8,  # longer than max_length: truncated
    "Un café à Paris — 猫が好き 😀 naïve",
    "  a   big\tdog \n\n on the\u3000grass  ",
    "Tom &amp; Jerry &lt;3 &amp;amp; &#39;quoted&#39;",
    "",
    "hello </s> world <pad> x <unk>",
    "e\u0301 \ufb01 ＡＢＣ",
]


@pytest.mark.parametrize("max_length", [1, 12, 64])
def test_tokenizer_matches_autotokenizer(tok_dir, max_length):
    from transformers import AutoTokenizer

    ref_tok = AutoTokenizer.from_pretrained(str(tok_dir))
    ours = Tokenizer.from_folder(tok_dir)
    assert ours.vocab_size == len(ref_tok) == VOCAB and ours.pad_id == 0 and ours.eos_id == 1
    for prompts in (TOKENIZER_PROMPTS, [clean_prompt(p) for p in TOKENIZER_PROMPTS]):
        ref = ref_tok(
            prompts, padding="max_length", max_length=max_length, truncation=True,
            add_special_tokens=True, return_attention_mask=True,
        )
        with pytest.warns(UserWarning, match=f"the text encoder's {max_length} tokens: only the first"):
            ids, mask = ours(prompts, max_length)  # (the long prompt is cut off: said, as a warning)
        assert ids.dtype == np.int32 and mask.dtype == np.int32 and ids.shape == (len(prompts), max_length)
        np.testing.assert_array_equal(ids, np.array(ref["input_ids"]))
        np.testing.assert_array_equal(mask, np.array(ref["attention_mask"]))
    # eos closes every sequence; the long prompt is truncated to max_length with eos last.
    assert ids[1, -1] == 1 and mask[1].all()


def test_tokenizer_folder_layout_and_errors(tmp_path, tok_dir):
    # The pipeline root (holding tokenizer/) works too.
    root = tok_dir.parent
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a prompt that fits is not warned about
        ids, mask = Tokenizer.from_folder(root)(["a cat"], 4)
    np.testing.assert_array_equal(ids, Tokenizer.from_folder(tok_dir)(["a cat"], 4)[0])
    np.testing.assert_array_equal(mask, [[1, 1, 1, 0]])  # "▁a", "▁cat", "</s>", pad
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        Tokenizer.from_folder(tmp_path)


def test_clean_prompt_matches_diffusers():
    from diffusers.pipelines.wan.pipeline_wan import prompt_clean

    texts = TOKENIZER_PROMPTS + ["x\x1cy\x1fz", "a\u2028b\u00a0c\u200bd", "  &amp;lt;b&amp;gt; bold  "]
    for t in texts:
        assert clean_prompt(t) == prompt_clean(t), t


def test_spiece_only_tokenizer_matches_transformers_slow_t5(tmp_path):
    """A tokenizer folder with only spiece.model (CogVideoX's T5) tokenizes like transformers' T5Tokenizer."""
    import sentencepiece as spm
    from transformers import T5Tokenizer

    from vidax.encoders.tokenizer import SentencePieceTokenizer, Tokenizer

    corpus = tmp_path / "corpus.txt"
    words = "a majestic red panda climbing bamboo tree in the snow video of cat dog running fast slow blue sky".split()
    rng = np.random.default_rng(0)
    corpus.write_text("\n".join(" ".join(rng.choice(words, 8)) for _ in range(300)))
    folder = tmp_path / "tokenizer"
    folder.mkdir()
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(folder / "spiece"), vocab_size=40, model_type="unigram",
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, pad_piece="<pad>", eos_piece="</s>", unk_piece="<unk>",
    )
    ours = Tokenizer.from_folder(folder)
    assert isinstance(ours, SentencePieceTokenizer)
    ref = T5Tokenizer.from_pretrained(str(folder))  # as the reference pipelines load it
    prompts = ["A majestic red panda climbing a bamboo tree in the snow", "cat", "",
               "dog " * 40, "blue  sky,\tfast!"]
    with pytest.warns(UserWarning, match="2 prompts exceed the text encoder's 16 tokens"):
        ids, mask = ours(prompts, max_length=16)  # the panda sentence (40-piece vocabulary) and "dog " * 40
    want = ref(prompts, padding="max_length", max_length=16, truncation=True, return_attention_mask=True)
    np.testing.assert_array_equal(ids, np.array(want["input_ids"]))
    np.testing.assert_array_equal(mask, np.array(want["attention_mask"]))
