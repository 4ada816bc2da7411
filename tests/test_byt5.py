"""The byT5 glyph encoder of HunyuanVideo-1.5: tokenizer, encoder and glyph embeddings against transformers / diffusers,
in the diffusers layout and the original release's (Glyph-SDXL-v2 ``byt5_model.pt`` on google/byt5-small)."""

import json
import re

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers.pipelines.hunyuan_video1_5.pipeline_hunyuan_video1_5 import HunyuanVideo15Pipeline
from diffusers.pipelines.hunyuan_video1_5.pipeline_hunyuan_video1_5 import extract_glyph_texts as ref_extract
from transformers import ByT5Tokenizer as HFByT5Tokenizer
from transformers import T5Config as HFT5Config
from transformers import T5EncoderModel, T5ForConditionalGeneration

from vidax.checkpoint.errors import CheckpointError
from vidax.encoders.byt5 import (
    BYT5_SMALL,
    ByT5Tokenizer,
    encode_glyph_prompts,
    extract_glyph_texts,
    glyph_tokens,
    load_glyph_encoder,
)
from vidax.encoders.t5 import T5Config

pytestmark = pytest.mark.filterwarnings("ignore:This sequence already has")

# Glyph-SDXL-v2 assets, shortened: assets/color_idx.json (colour name -> index) and
# assets/multilingual_10-lang_idx.json (language-prefixed font code -> index).
COLORS = {"white": 0, "black": 1, "darkslategray": 2, "dimgray": 3, "red": 4}
FONTS = {"en-Montserrat-Regular": 0, "cn-HanyiSentyPagoda": 1, "jp-NotoSansJP-Bold": 2, "en-Lobster": 3,
         "kr-NanumGothic": 4}

PROMPTS = [
    'A neon sign that says "OPEN 24 HOURS" above a door, rain at night.',
    "A calm lake at dawn, no text anywhere.",
    'Street market, banners read “你好世界 😀” and "SALE" and "SALE" again.',
    'A poster reading "<color-1> Grand opening </s> Café" in bold letters.',
    'A very long banner: "' + "Long live byT5, the byte-level encoder! " * 9 + '"',
    'An empty quote "" on a blank page.',
]

TEXTS = ["", "a", "Hello, World!", 'Text "OPEN 24 HOURS". ', 'Text "你好世界". Text "こんにちは". ', "emoji 😀🎉 mix",
         "quotes \"double\" 'single' “curly”", "  padded   spaces  ", "tab\tnew\nline", "é" * 300,
         "x" * 254 + "</s>" + "y" * 10, "x" * 255 + "</s>", "ab </s> cd", "<pad><unk></s>", "<extra_id_0> sentinel",
         "<extra_id_124><extra_id_1", "a\u00a0b\u3000c"]


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def _tiny_t5(vocab_size=384, **kw):
    """byt5-small's shape in miniature: gated tanh-GELU, T5 (shared bias table), heads x d_kv != d_model."""
    return HFT5Config(vocab_size=vocab_size, d_model=48, d_kv=8, num_heads=3, d_ff=56, num_layers=2,
                      num_decoder_layers=1, relative_attention_num_buckets=32, relative_attention_max_distance=128,
                      feed_forward_proj="gated-gelu", layer_norm_epsilon=1e-6, tokenizer_class="ByT5Tokenizer", **kw)


def _perturb(model, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # norm scales start at 1: move them so they are tested too
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
    return model


def _hf_glyph_tokenizer(tok):
    """diffusers' convert script's add_special_token (copied from the original): colours, then fonts."""
    font_token = [f"<{code[:2]}-font-{FONTS[code]}>" for code in FONTS]
    color_token = [f"<color-{i}>" for i in range(len(COLORS))]
    tok.add_tokens(color_token + font_token, special_tokens=True)
    return tok


def _write_byt5_small_files(folder):
    """google/byt5-small's tokenizer files (no added_tokens_decoder: the legacy format)."""
    extra = [f"<extra_id_{i}>" for i in range(125)]
    names = {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}
    (folder / "tokenizer_config.json").write_text(json.dumps({**names, "extra_ids": 125,
                                                              "additional_special_tokens": extra}))
    (folder / "special_tokens_map.json").write_text(json.dumps({**names, "additional_special_tokens": extra}))


# -- tokenizer --------------------------------------------------------------------------------------------------


def _assert_same_tokens(ours, ref, texts, max_length):
    ids, mask = ours(texts, max_length)
    got = ref(texts, padding="max_length", max_length=max_length, truncation=True, add_special_tokens=True)
    assert ids.dtype == mask.dtype == np.int32 and ids.shape == mask.shape == (len(texts), max_length)
    np.testing.assert_array_equal(ids, np.asarray(got.input_ids))
    np.testing.assert_array_equal(mask, np.asarray(got.attention_mask))


@pytest.mark.parametrize("max_length", [256, 16])
def test_tokenizer_matches_transformers(max_length):
    ours, ref = ByT5Tokenizer.default(), HFByT5Tokenizer()
    assert len(ours) == len(ref) == 384
    _assert_same_tokens(ours, ref, TEXTS, max_length)
    # The truncation keeps max_length - 1 bytes and appends </s>, unless they already end with </s>.
    ids, mask = ours(["x" * 254 + "</s>" + "y" * 10, "x" * 300], 256)
    assert mask.sum(1).tolist() == [255, 256] and ids[0, 254] == 1 and ids[1, 255] == 1


def test_tokenizer_with_glyph_tokens_and_saved_folders(tmp_path):
    """The glyph tokens (ids after the sentinels), and the folders transformers writes and reads."""
    ref = _hf_glyph_tokenizer(HFByT5Tokenizer())
    ours = ByT5Tokenizer.default()
    assert ours.add_tokens(glyph_tokens(COLORS, FONTS)) == 10 and ours.add_tokens(["<color-0>"]) == 0
    assert len(ours) == len(ref) == 394 and ours.token_to_id("<color-0>") == 384
    texts = TEXTS + ['Text "<color-4><en-font-3> hi". ', "<kr-font-4></s><color-1", " <color-2> "]
    _assert_same_tokens(ours, ref, texts, 64)
    ref.save_pretrained(tmp_path / "saved")  # diffusers' tokenizer_2: tokenizer_config.json with added_tokens_decoder
    loaded = ByT5Tokenizer.from_folder(tmp_path / "saved")
    assert len(loaded) == 394
    _assert_same_tokens(loaded, HFByT5Tokenizer.from_pretrained(tmp_path / "saved"), texts, 64)
    # google/byt5-small's files (special_tokens_map.json, no added_tokens_decoder).
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    _write_byt5_small_files(legacy)
    _assert_same_tokens(ByT5Tokenizer.from_folder(legacy), HFByT5Tokenizer.from_pretrained(legacy), texts, 64)
    # The legacy added_tokens.json (every added token with its id) instead of an added_tokens_decoder.
    (legacy / "added_tokens.json").write_text((tmp_path / "saved" / "added_tokens.json").read_text())
    ref_legacy = HFByT5Tokenizer.from_pretrained(legacy)
    assert len(ByT5Tokenizer.from_folder(legacy)) == len(ref_legacy) == 394
    _assert_same_tokens(ByT5Tokenizer.from_folder(legacy), ref_legacy, texts, 64)
    # Ids that leave a gap (the sentinels would take 261..385, over <color-0> at 384): refused (transformers
    # silently gives 384 and 385 to sentinels and keeps stale ids for the two tokens).
    (legacy / "added_tokens.json").write_text(json.dumps({"<color-0>": 384, "<zh-font-7>": 385}))
    with pytest.raises(ValueError, match="gap in the ids"):
        ByT5Tokenizer.from_folder(legacy)


def test_tokenizer_random_texts_of_token_fragments():
    """Random texts built from pieces of the added tokens, whitespace and multi-byte characters."""
    ref = _hf_glyph_tokenizer(HFByT5Tokenizer())
    ours = ByT5Tokenizer.default()
    ours.add_tokens(glyph_tokens(COLORS, FONTS))
    frags = ["<", ">", "</s>", "<pad>", "<unk>", " ", "  ", "\n", "a", "é", "你好", "😀", "<color-1", "<color-4>",
             "<color-1>", "<en-font-3>", "<kr-font-4", "<extra_id_1", "<extra_id_12>", "2>", "font-0>", '"', "\u00a0"]
    rng = np.random.default_rng(7)
    texts = ["".join(rng.choice(frags, rng.integers(0, 12))) for _ in range(300)]
    _assert_same_tokens(ours, ref, texts, 24)


def test_tokenizer_refuses_bad_input(tmp_path):
    tok = ByT5Tokenizer.default()
    with pytest.raises(ValueError, match="not valid Unicode"):
        tok(["bad \ud800 surrogate"])
    with pytest.raises(ValueError, match="max_length"):
        tok(["a"], 0)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": {"-3": {"content": "<x>"}}}))
    with pytest.raises(ValueError, match="token id"):
        ByT5Tokenizer.from_folder(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": {"5": {"content": 7}}}))
    with pytest.raises(ValueError, match="not a token"):
        ByT5Tokenizer.from_folder(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text("[1, 2]")
    with pytest.raises(CheckpointError, match="expected a JSON object"):
        ByT5Tokenizer.from_folder(tmp_path)


def test_glyph_texts_match_diffusers():
    for prompt in PROMPTS + ['"a" "b" "a"', "“curly” and \"straight\"", 'one "unclosed quote']:
        assert extract_glyph_texts(prompt) == ref_extract(prompt)
    assert extract_glyph_texts(PROMPTS[1]) is None
    assert extract_glyph_texts(PROMPTS[2]) == 'Text "你好世界 😀". Text "SALE". '


# -- encoder: the diffusers layout ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def diffusers_folder(tmp_path_factory):
    """text_encoder_2/ and tokenizer_2/ as diffusers' convert script writes them (T5EncoderModel resized to the
    glyph tokenizer)."""
    root = tmp_path_factory.mktemp("hv15")
    tok = _hf_glyph_tokenizer(HFByT5Tokenizer())
    torch.manual_seed(0)
    model = T5EncoderModel(_tiny_t5())
    model.resize_token_embeddings(len(tok), mean_resizing=False)
    model = _perturb(model, 0).eval()
    model.save_pretrained(root / "text_encoder_2")
    tok.save_pretrained(root / "tokenizer_2")
    return root, model, tok


def _reference_embeds(model, tok, prompts):
    with torch.no_grad():
        embeds, mask = HunyuanVideo15Pipeline._get_byt5_prompt_embeds(tok, model, prompts, torch.device("cpu"), 256)
    return embeds.numpy(), mask.numpy()


def _assert_embeds(out, mask, ref, ref_mask, tol):
    assert out.dtype == np.float32 and mask.dtype == np.int32 and out.shape == ref.shape
    np.testing.assert_array_equal(mask, ref_mask)
    for b in range(len(out)):
        if ref_mask[b].any():
            assert _rel(out[b], ref[b]) < tol, (b, _rel(out[b], ref[b]))  # every row, padded ones included
        else:
            np.testing.assert_array_equal(out[b], 0.0)
            assert not np.any(ref[b])


def test_encode_glyph_prompts_matches_diffusers(diffusers_folder):
    root, model, tok = diffusers_folder
    params, cfg, tokenizer = load_glyph_encoder(root)
    assert cfg.model_type == "t5" and cfg.vocab_size == len(tokenizer) == 394
    ref, ref_mask = _reference_embeds(model, tok, PROMPTS)
    assert ref_mask.sum(1).tolist()[1] == 0 and ref_mask[4].all()  # one prompt without quotes, one truncated
    out, mask = encode_glyph_prompts(params, cfg, tokenizer, [extract_glyph_texts(p) for p in PROMPTS])
    _assert_embeds(np.asarray(out), mask, ref, ref_mask, 1e-5)
    # No quoted text at all: zeros, without running the encoder.
    out, mask = encode_glyph_prompts(params, cfg, tokenizer, [None, None])
    ref, ref_mask = _reference_embeds(model, tok, [PROMPTS[1], "plain"])
    _assert_embeds(np.asarray(out), mask, ref, ref_mask, 0)
    assert out.shape == (2, 256, 48)


def test_encoder_bf16(diffusers_folder):
    root, model, tok = diffusers_folder
    params, cfg, tokenizer = load_glyph_encoder(root, dtype=jnp.bfloat16)
    assert params["blocks"]["attn"]["q"]["kernel"].dtype == jnp.bfloat16
    ref, ref_mask = _reference_embeds(model, tok, PROMPTS[:1])
    out, mask = encode_glyph_prompts(params, cfg, tokenizer, [extract_glyph_texts(PROMPTS[0])])
    _assert_embeds(np.asarray(out), mask, ref, ref_mask, 1e-2)


def test_token_ids_past_the_embedding_are_refused(diffusers_folder):
    root, _, _ = diffusers_folder
    params, cfg, tokenizer = load_glyph_encoder(root)
    small = T5Config(**{**cfg.__dict__, "vocab_size": 384})
    with pytest.raises(ValueError, match="past the encoder's 384 embedding rows"):
        encode_glyph_prompts(params, small, tokenizer, ['Text "<color-1>". '])


def test_byt5_small_config():
    """google/byt5-small's config.json values pass as they are (T5 v1.1, gated tanh GELU, 6 heads of 64)."""
    byt5_small = {"architectures": ["T5ForConditionalGeneration"], "d_ff": 3584, "d_kv": 64, "d_model": 1472,
                  "decoder_start_token_id": 0, "dropout_rate": 0.1, "eos_token_id": 1,
                  "feed_forward_proj": "gated-gelu",
                  "gradient_checkpointing": False, "initializer_factor": 1.0, "is_encoder_decoder": True,
                  "layer_norm_epsilon": 1e-06, "model_type": "t5", "num_decoder_layers": 4, "num_heads": 6,
                  "num_layers": 12, "pad_token_id": 0, "relative_attention_num_buckets": 32,
                  "tie_word_embeddings": False, "tokenizer_class": "ByT5Tokenizer",
                  "transformers_version": "4.7.0.dev0",
                  "use_cache": True, "vocab_size": 384}
    cfg = T5Config.from_dict(byt5_small)
    assert cfg == BYT5_SMALL and cfg.activation_name == "gelu_new" and not cfg.per_layer_bias
    assert cfg.inner_dim == 384 != cfg.d_model


# -- encoder: the original release -------------------------------------------------------------------------------


def _original_release(root, wrapped=False):
    """ckpts/text_encoder/{byt5-small, Glyph-SDXL-v2} with byt5_model.pt written as the original loads it: the
    state dict of T5ForConditionalGeneration(...).get_encoder() after add_special_token's resize."""
    byt5 = root / "text_encoder" / "byt5-small"
    glyph = root / "text_encoder" / "Glyph-SDXL-v2"
    torch.manual_seed(1)
    T5ForConditionalGeneration(_tiny_t5()).save_pretrained(byt5)  # byt5-small's own weights: overwritten by the .pt
    _write_byt5_small_files(byt5)
    (glyph / "assets").mkdir(parents=True)
    (glyph / "checkpoints").mkdir()
    (glyph / "assets" / "color_idx.json").write_text(json.dumps(COLORS))
    (glyph / "assets" / "multilingual_10-lang_idx.json").write_text(json.dumps(FONTS))
    encoder = T5ForConditionalGeneration(_tiny_t5()).get_encoder()
    encoder.resize_token_embeddings(384 + len(COLORS) + len(FONTS), mean_resizing=False)
    state = _perturb(encoder, 2).state_dict()
    if wrapped:  # a Glyph-SDXL-v2 training checkpoint: other towers beside the text encoder, under "state_dict"
        state = {"state_dict": {**{f"module.text_tower.encoder.{k}": v for k, v in state.items()},
                                "module.text_tower.proj.weight": torch.randn(4, 4)}, "epoch": 3}
    torch.save(state, glyph / "checkpoints" / "byt5_model.pt")
    return byt5, glyph


def _original_reference(byt5, glyph, prompts):
    """The original: create_byt5 (load_byt5_and_byt5_tokenizer, add_special_token, the .pt loaded strictly) and
    _process_single_byt5_prompt (Tencent-Hunyuan/HunyuanVideo-1.5 hyvideo/.../byT5/__init__.py, pipeline)."""
    tokenizer = HFByT5Tokenizer.from_pretrained(byt5)
    model = T5ForConditionalGeneration.from_pretrained(byt5).get_encoder()
    fonts = json.loads((glyph / "assets/multilingual_10-lang_idx.json").read_text())
    colors = json.loads((glyph / "assets/color_idx.json").read_text())
    font_token = [f"<{code[:2]}-font-{fonts[code]}>" for code in fonts]
    tokenizer.add_tokens([f"<color-{i}>" for i in range(len(colors))] + font_token, special_tokens=True)
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    sd = torch.load(glyph / "checkpoints/byt5_model.pt", map_location="cpu")
    if "state_dict" in sd:
        sd = {k[len("module.text_tower.encoder."):]: v for k, v in sd["state_dict"].items()
              if k.startswith("module.text_tower.encoder.")}
    model.load_state_dict(sd)
    model.eval()
    embeds, masks = [], []
    for prompt in prompts:
        found = [m[0] or m[1] for m in re.findall(r'\"(.*?)\"|“(.*?)”', prompt)]
        found = list(dict.fromkeys(found)) if len(found) > 1 else found
        emb, mask = torch.zeros((1, 256, 48)), torch.zeros((1, 256), dtype=torch.int64)
        if found:
            text = "".join(f'Text "{t}". ' for t in found)  # format_prompt with no colour and no font
            tok = tokenizer(text, padding="max_length", max_length=256, truncation=True, add_special_tokens=True,
                            return_tensors="pt")
            with torch.no_grad():
                emb = model(tok.input_ids, attention_mask=tok.attention_mask.float())[0]
            mask = tok.attention_mask
        embeds.append(emb)
        masks.append(mask)
    return torch.cat(embeds).numpy(), torch.cat(masks).numpy()


@pytest.mark.parametrize("wrapped", [False, True], ids=["encoder_state_dict", "training_wrapper"])
def test_original_release_matches_the_original(tmp_path, wrapped):
    byt5, glyph = _original_release(tmp_path / "ckpts", wrapped)
    ref, ref_mask = _original_reference(byt5, glyph, PROMPTS)
    for path in (tmp_path / "ckpts", glyph):
        params, cfg, tokenizer = load_glyph_encoder(path)
        assert cfg.vocab_size == len(tokenizer) == 394 and cfg.d_model == 48
        out, mask = encode_glyph_prompts(params, cfg, tokenizer, [extract_glyph_texts(p) for p in PROMPTS])
        _assert_embeds(np.asarray(out), mask, ref, ref_mask, 1e-5)


def test_original_release_checks(tmp_path):
    _, glyph = _original_release(tmp_path / "ckpts")
    colors = dict(COLORS)
    colors.pop("red")  # one token fewer than the checkpoint's embedding rows
    (glyph / "assets" / "color_idx.json").write_text(json.dumps(colors))
    with pytest.raises(CheckpointError, match="393"):
        load_glyph_encoder(tmp_path / "ckpts")
    (glyph / "assets" / "color_idx.json").unlink()
    with pytest.raises(CheckpointError, match="color_idx.json: missing"):
        load_glyph_encoder(tmp_path / "ckpts")
    with pytest.raises(CheckpointError, match="no byT5 glyph encoder"):
        load_glyph_encoder(tmp_path / "elsewhere")


def test_diffusers_folders_must_belong_together(diffusers_folder, tmp_path):
    root, _, _ = diffusers_folder
    (tmp_path / "text_encoder_2").symlink_to(root / "text_encoder_2")
    with pytest.raises(CheckpointError, match="tokenizer folder not found"):
        load_glyph_encoder(tmp_path)
    tok = _hf_glyph_tokenizer(HFByT5Tokenizer())
    tok.add_tokens(["<one-too-many>"], special_tokens=True)
    tok.save_pretrained(tmp_path / "tokenizer_2")
    with pytest.raises(CheckpointError, match="395 tokens for the 394 embedding rows"):
        load_glyph_encoder(tmp_path)
