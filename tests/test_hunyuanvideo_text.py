"""Parity of HunyuanVideo's text side with transformers and diffusers (fp32, tiny configs, local tokenizers).

CLIP text tower vs ``CLIPTextModel``; the LLaVA image path vs ``LlavaForConditionalGeneration``; the whole prompt
encoding vs ``HunyuanVideoPipeline.encode_prompt`` and ``HunyuanVideoImageToVideoPipeline.encode_prompt``, the
weights saved by the reference classes into a pipeline folder and read back through our loaders, the tokenizers
written locally (Llama-3-style and CLIP byte-level BPE) and read by transformers for the reference side.
"""

import dataclasses
import shutil
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from diffusers import HunyuanVideoImageToVideoPipeline, HunyuanVideoPipeline
from PIL import Image
from safetensors.torch import save_file
from transformers import AutoTokenizer, CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPTextConfig, CLIPTextModel
from transformers import CLIPTokenizer
from transformers import LlamaConfig as HFLlamaConfig
from transformers import LlamaForCausalLM, LlamaModel, LlavaForConditionalGeneration
from transformers import LlavaConfig as HFLlavaConfig

from vidax.checkpoint.errors import CheckpointError
from vidax.encoders import clip_text, llava
from vidax.encoders.tokenizer import Tokenizer, write_clip_tokenizer, write_llama3_tokenizer
from vidax.models.hunyuanvideo.text import (
    I2V_PROMPT_TEMPLATE,
    T2V_PROMPT_TEMPLATE,
    encode_prompt_i2v,
    encode_prompt_t2v,
    expand_image_tokens,
    fit_prompt_template,
    load_text_encoders,
    template_crop_start,
    text_encoder_folders,
    write_demo_text_encoders,
)

PROMPTS = ["A cat walks on the grass, realistic", "A red panda climbs a bamboo tree in the snow, slow camera pan"]
LONG_PROMPT = " ".join(["a very long prompt about a dog running on the beach at sunset"] * 6)

# The I2V template at the tiny vision tower's size: 28 px, patch 7 -> 16 patch features per image.
TINY_I2V_TEMPLATE = {**I2V_PROMPT_TEMPLATE, "crop_start": None, "image_emb_end": 5 + 16, "image_emb_len": 16}


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def _perturb(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    return model


def _image(seed=0, size=(40, 32)):
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (*size[::-1], 3), dtype=np.uint8))


@pytest.fixture(scope="module")
def tokenizer_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tokenizers")
    corpus = [T2V_PROMPT_TEMPLATE["template"], I2V_PROMPT_TEMPLATE["template"], *PROMPTS, LONG_PROMPT]
    # so that the frame's words are single tokens, as in Llama 3
    corpus += ["system\n\n{}<|eot_id|>assistant<|end_header_id|>user"] * 8
    write_llama3_tokenizer(root / "tokenizer", corpus, num_merges=120)
    write_clip_tokenizer(root / "tokenizer_2", [*PROMPTS, LONG_PROMPT], num_merges=60, tokenizer_json=False)
    return root


def _clip(vocab_size, eos_token_id, seed):
    torch.manual_seed(seed)
    cfg = CLIPTextConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, max_position_embeddings=77, eos_token_id=eos_token_id)
    return _perturb(CLIPTextModel(cfg).eval())


def _save_common(folder, tokenizer_dirs, clip_model):
    shutil.copytree(tokenizer_dirs / "tokenizer", folder / "tokenizer")
    shutil.copytree(tokenizer_dirs / "tokenizer_2", folder / "tokenizer_2")
    clip_model.save_pretrained(folder / "text_encoder_2")


@pytest.fixture(scope="module")
def t2v(tmp_path_factory, tokenizer_dirs):
    """A T2V folder (Llama + CLIP with the legacy eos_token_id 2, as HunyuanVideo's), and the reference pipeline."""
    folder = tmp_path_factory.mktemp("hunyuan_t2v")
    ref_tok = AutoTokenizer.from_pretrained(tokenizer_dirs / "tokenizer")
    ref_tok_2 = CLIPTokenizer.from_pretrained(tokenizer_dirs / "tokenizer_2")
    torch.manual_seed(0)
    llama_model = _perturb(LlamaModel(HFLlamaConfig(
        vocab_size=len(ref_tok), hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        max_position_embeddings=1024)).eval())
    clip_model = _clip(len(ref_tok_2), 2, seed=1)
    llama_model.save_pretrained(folder / "text_encoder")
    _save_common(folder, tokenizer_dirs, clip_model)
    pipe = HunyuanVideoPipeline(text_encoder=llama_model, tokenizer=ref_tok, transformer=None, vae=None,
                                scheduler=None, text_encoder_2=clip_model, tokenizer_2=ref_tok_2)
    return folder, pipe, load_text_encoders(folder)


@pytest.fixture(scope="module")
def i2v(tmp_path_factory, tokenizer_dirs):
    """An I2V folder (LLaVA, CLIP, image processor) and the reference pipeline."""
    folder = tmp_path_factory.mktemp("hunyuan_i2v")
    ref_tok = AutoTokenizer.from_pretrained(tokenizer_dirs / "tokenizer")
    ref_tok_2 = CLIPTokenizer.from_pretrained(tokenizer_dirs / "tokenizer_2")
    torch.manual_seed(2)
    text = dict(model_type="llama", vocab_size=len(ref_tok), hidden_size=32, intermediate_size=64,
                num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5,
                rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, max_position_embeddings=1024)
    vision = dict(model_type="clip_vision_model", hidden_size=24, intermediate_size=48, num_hidden_layers=3,
                  num_attention_heads=4, image_size=28, patch_size=7)
    model = _perturb(LlavaForConditionalGeneration(HFLlavaConfig(
        text_config=text, vision_config=vision, image_token_index=ref_tok.convert_tokens_to_ids("<image>"),
        pad_token_id=ref_tok.pad_token_id)).eval())
    model.save_pretrained(folder / "text_encoder")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        processor = CLIPImageProcessor(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28})
    processor.save_pretrained(folder / "image_processor")
    _save_common(folder, tokenizer_dirs, _clip(len(ref_tok_2), 2, seed=3))
    pipe = HunyuanVideoImageToVideoPipeline(
        text_encoder=model, tokenizer=ref_tok, transformer=None, vae=None, scheduler=None,
        text_encoder_2=CLIPTextModel.from_pretrained(folder / "text_encoder_2").eval(), tokenizer_2=ref_tok_2,
        image_processor=processor)
    return folder, pipe, load_text_encoders(folder)


# --------------------------------------------------------------------------- tokenizers


def test_tokenizers_match_transformers(t2v):
    _, pipe, enc = t2v
    texts = [T2V_PROMPT_TEMPLATE["template"].format(p) for p in PROMPTS]
    ids, mask = enc.tokenizer(texts, 300)
    ref = pipe.tokenizer(texts, max_length=300, padding="max_length", truncation=True)
    np.testing.assert_array_equal(ids, ref.input_ids)
    np.testing.assert_array_equal(mask, ref.attention_mask)
    with pytest.warns(UserWarning, match="exceeds"):
        ids_2, _ = enc.tokenizer_2([*PROMPTS, LONG_PROMPT], 77)  # read from vocab.json + merges.txt
    ref_2 = pipe.tokenizer_2([*PROMPTS, LONG_PROMPT], max_length=77, padding="max_length", truncation=True)
    np.testing.assert_array_equal(ids_2, ref_2.input_ids)
    # The I2V frame: <image> is token 5, as the template's image_emb_start says.
    frame = enc.tokenizer.encode_ids(I2V_PROMPT_TEMPLATE["template"])
    assert frame[5] == enc.tokenizer.token_to_id("<image>")


# --------------------------------------------------------------------------- CLIP text


@pytest.mark.parametrize("eos", ["legacy_2", "first_eos"])
def test_clip_text_matches_transformers(tmp_path, eos):
    """Pooled row: argmax of the ids (eos_token_id 2) or the first eos; random ids where the two rules differ."""
    model = _clip(200, 2 if eos == "legacy_2" else 7, seed=4)
    model.save_pretrained(tmp_path)
    params, cfg = clip_text.load_clip_text(tmp_path)
    ids = np.random.default_rng(0).integers(8, 150, (2, 77))
    ids[0, [20, 40]], ids[1, [9, 60]], ids[1, 30] = 7, 7, 199
    with torch.no_grad():
        ref = model(torch.from_numpy(ids))
    hidden, pooled = clip_text.encode(params, cfg, ids)
    assert _rel(hidden, ref.last_hidden_state.numpy()) < 1e-5
    assert _rel(pooled, ref.pooler_output.numpy()) < 1e-5
    expected_rows = [np.argmax(ids[0]), 30] if eos == "legacy_2" else [20, 9]
    np.testing.assert_array_equal(np.asarray(clip_text.pooled_positions(ids, cfg.eos_token_id)), expected_rows)


def test_clip_text_legacy_prefix(t2v, tmp_path):
    """transformers 4 wrote CLIPTextModel under ``text_model.``; the same weights load the same."""
    folder, pipe, enc = t2v
    state = {f"text_model.{k}": v.contiguous() for k, v in pipe.text_encoder_2.state_dict().items()}
    save_file(state, str(tmp_path / "model.safetensors"))
    shutil.copy(folder / "text_encoder_2" / "config.json", tmp_path)
    params, _ = clip_text.load_clip_text(tmp_path)
    for a, b in zip(np.asarray(params["layers"]["mlp"]["fc1"]["kernel"]), enc.text_encoder_2["layers"]["mlp"]["fc1"]
                    ["kernel"]):
        np.testing.assert_array_equal(a, np.asarray(b))


# --------------------------------------------------------------------------- LLaVA


def test_llava_matches_transformers(i2v):
    """Two rows, an image each, the image tokens mid-row, right padding: hidden states at skip 0 and 2."""
    _, pipe, enc = i2v
    model, cfg = pipe.text_encoder, enc.text_encoder_config
    assert cfg.num_image_features == 16
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 200, (2, 40))
    ids[:, 6:22] = cfg.image_token_index
    mask = np.ones((2, 40), np.int64)
    mask[1, 31:] = 0
    pixels = rng.standard_normal((2, 3, 28, 28)).astype(np.float32)
    with torch.no_grad():
        hs = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                   pixel_values=torch.from_numpy(pixels), output_hidden_states=True).hidden_states
    for skip in (0, 2):
        out = llava.encode(enc.text_encoder, cfg, ids, mask, pixels, num_hidden_layers_to_skip=skip)
        assert _rel(out, hs[-(skip + 1)].numpy()) < 1e-5
    # The merged image rows, before any layer: the projected features (hidden_states[0]).
    merged = llava.encode(enc.text_encoder, cfg, ids, mask, pixels, num_hidden_layers_to_skip=4)
    assert _rel(np.asarray(merged)[:, 6:22], hs[0].numpy()[:, 6:22]) < 1e-5
    with pytest.raises(ValueError, match="do not match"):
        llava.encode(enc.text_encoder, cfg, ids, mask, pixels[:1])
    # The "full" strategy keeps the class token (17 rows per image); the last layer instead of the penultimate.
    full = dataclasses.replace(cfg, vision_feature_select_strategy="full", vision_feature_layer=-1)
    ids[:, 22] = cfg.image_token_index
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                    pixel_values=torch.from_numpy(pixels), vision_feature_select_strategy="full",
                    vision_feature_layer=-1, output_hidden_states=True).hidden_states[-3].numpy()
    assert _rel(llava.encode(enc.text_encoder, full, ids, mask, pixels, num_hidden_layers_to_skip=2), ref) < 1e-5


def test_llava_layouts(i2v, tmp_path):
    """transformers >= 4.52's names (``model.language_model.``, ``lm_head``) and 4.4x's vision ``vision_model.``."""
    folder, pipe, enc = i2v
    state = {k: v.contiguous() for k, v in pipe.text_encoder.state_dict().items()}
    (tmp_path / "new").mkdir()
    save_file(state, str(tmp_path / "new" / "model.safetensors"))
    legacy = {k.replace("model.language_model.", "language_model.model.")
               .replace("model.vision_tower.", "vision_tower.vision_model.")
               .replace("model.multi_modal_projector.", "multi_modal_projector.")
               .replace("lm_head.", "language_model.lm_head."): v for k, v in state.items()}
    (tmp_path / "legacy").mkdir()
    save_file(legacy, str(tmp_path / "legacy" / "model.safetensors"))
    for sub in ("new", "legacy"):
        shutil.copy(folder / "text_encoder" / "config.json", tmp_path / sub)
        params, _ = llava.load_llava(tmp_path / sub)
        for part in ("vision_tower", "multi_modal_projector", "language_model"):
            for a, b in zip(jax_leaves(params[part]), jax_leaves(enc.text_encoder[part])):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def jax_leaves(tree):
    import jax

    return jax.tree.leaves(tree)


# --------------------------------------------------------------------------- text to video


@pytest.mark.parametrize("crop", ["given_95", "computed"])
def test_t2v_encode_prompt_matches_diffusers(t2v, crop):
    _, pipe, enc = t2v
    template = T2V_PROMPT_TEMPLATE if crop == "given_95" else {**T2V_PROMPT_TEMPLATE, "crop_start": None}
    with torch.no_grad():
        ref_embeds, ref_pooled, ref_mask = pipe.encode_prompt(PROMPTS, prompt_template=template, device="cpu")
    out = encode_prompt_t2v(enc, PROMPTS, prompt_template=template)
    assert out.prompt_embeds.shape == ref_embeds.shape == (2, 256, 32)
    assert out.prompt_embeds.dtype == np.float32 and out.prompt_attention_mask.dtype == np.int32
    np.testing.assert_array_equal(out.prompt_attention_mask, ref_mask.numpy())
    assert 0 < out.prompt_attention_mask[0].sum() < out.prompt_attention_mask[1].sum() < 256
    assert _rel(out.prompt_embeds, ref_embeds.numpy()) < 1e-5
    assert out.pooled_prompt_embeds.shape == ref_pooled.shape == (2, 32)
    assert _rel(out.pooled_prompt_embeds, ref_pooled.numpy()) < 1e-5


def test_t2v_batched_equals_alone(t2v):
    _, _, enc = t2v
    batched = encode_prompt_t2v(enc, PROMPTS)
    for i, prompt in enumerate(PROMPTS):
        alone = encode_prompt_t2v(enc, prompt)
        valid = alone.prompt_attention_mask[0] == 1
        np.testing.assert_array_equal(batched.prompt_attention_mask[i], alone.prompt_attention_mask[0])
        assert _rel(np.asarray(batched.prompt_embeds)[i, valid], np.asarray(alone.prompt_embeds)[0, valid]) < 1e-6
        assert _rel(batched.pooled_prompt_embeds[i], alone.pooled_prompt_embeds[0]) < 1e-6


def test_t2v_original_release_layout(tmp_path, tokenizer_dirs):
    """The original release's text side: ``text_encoder/`` a LlamaForCausalLM (``model.`` names, ``lm_head``) and
    ``text_encoder_2/`` a whole CLIPModel, each with its tokenizer files beside the weights."""
    ref_tok = AutoTokenizer.from_pretrained(tokenizer_dirs / "tokenizer")
    ref_tok_2 = CLIPTokenizer.from_pretrained(tokenizer_dirs / "tokenizer_2")
    torch.manual_seed(5)
    causal = _perturb(LlamaForCausalLM(HFLlamaConfig(
        vocab_size=len(ref_tok), hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, rms_norm_eps=1e-5, max_position_embeddings=1024)).eval())
    clip = _perturb(CLIPModel(CLIPConfig(
        text_config=dict(vocab_size=len(ref_tok_2), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, max_position_embeddings=77, eos_token_id=2),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                           image_size=28, patch_size=7), projection_dim=16)).eval())
    causal.save_pretrained(tmp_path / "text_encoder")
    clip.save_pretrained(tmp_path / "text_encoder_2")
    for name, sub in (("tokenizer", "text_encoder"), ("tokenizer_2", "text_encoder_2")):
        shutil.copytree(tokenizer_dirs / name, tmp_path / sub, dirs_exist_ok=True)
    ckpt = SimpleNamespace(text_encoder=tmp_path / "text_encoder", tokenizer=tmp_path / "text_encoder",
                           text_encoder_2=tmp_path / "text_encoder_2", tokenizer_2=tmp_path / "text_encoder_2",
                           image_processor=None)
    enc = load_text_encoders(ckpt)
    pipe = HunyuanVideoPipeline(text_encoder=causal.model, tokenizer=ref_tok, transformer=None, vae=None,
                                scheduler=None, text_encoder_2=clip.text_model, tokenizer_2=ref_tok_2)
    with torch.no_grad():
        ref_embeds, ref_pooled, ref_mask = pipe.encode_prompt(PROMPTS, device="cpu")
    out = encode_prompt_t2v(enc, PROMPTS)
    np.testing.assert_array_equal(out.prompt_attention_mask, ref_mask.numpy())
    assert _rel(out.prompt_embeds, ref_embeds.numpy()) < 1e-5
    assert _rel(out.pooled_prompt_embeds, ref_pooled.numpy()) < 1e-5


# --------------------------------------------------------------------------- image to video


@pytest.mark.parametrize("case", ["interleave_2", "interleave_4_given_crop", "truncated"])
def test_i2v_encode_prompt_matches_diffusers(i2v, case):
    _, pipe, enc = i2v
    template, interleave, prompt, length = TINY_I2V_TEMPLATE, 2, PROMPTS[1], 256
    if case == "interleave_4_given_crop":
        prefix = I2V_PROMPT_TEMPLATE["template"].split("{}")[0]
        template = {**TINY_I2V_TEMPLATE, "crop_start": len(enc.tokenizer.encode_ids(prefix))}
        interleave = 4
    elif case == "truncated":
        prompt, length = LONG_PROMPT, 24  # the assistant header is cut: the reference's fallback crop
    image = _image()
    with torch.no_grad():
        ref_embeds, ref_pooled, ref_mask = pipe.encode_prompt(
            image=image, prompt=[prompt], prompt_template=template, device="cpu", max_sequence_length=length,
            image_embed_interleave=interleave)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the truncation warning
        out = encode_prompt_i2v(enc, [prompt], image, prompt_template=template, max_sequence_length=length,
                                image_embed_interleave=interleave)
    assert out.prompt_embeds.shape == ref_embeds.shape == (1, 16 // interleave + length - 4, 32)
    np.testing.assert_array_equal(out.prompt_attention_mask, ref_mask.numpy())
    assert _rel(out.prompt_embeds, ref_embeds.numpy()) < 1e-5
    assert _rel(out.pooled_prompt_embeds, ref_pooled.numpy()) < 1e-5


def test_i2v_batched_equals_alone(i2v):
    """Two prompts of different lengths, one image for both (the reference takes a batch of one only)."""
    _, _, enc = i2v
    image = _image(1)
    batched = encode_prompt_i2v(enc, PROMPTS, image, prompt_template=TINY_I2V_TEMPLATE)
    assert batched.prompt_attention_mask[0].sum() < batched.prompt_attention_mask[1].sum()
    for i, prompt in enumerate(PROMPTS):
        alone = encode_prompt_i2v(enc, [prompt], [image], prompt_template=TINY_I2V_TEMPLATE)
        valid = alone.prompt_attention_mask[0] == 1
        np.testing.assert_array_equal(batched.prompt_attention_mask[i], alone.prompt_attention_mask[0])
        assert _rel(np.asarray(batched.prompt_embeds)[i, valid], np.asarray(alone.prompt_embeds)[0, valid]) < 1e-6


def test_expand_image_tokens_positions():
    ids = np.array([[1, 2, 9, 3, 0, 0]])
    out, mask, pos = expand_image_tokens(ids, image_token_index=9, image_emb_len=3, image_emb_start=2,
                                         image_emb_end=5, pad_token_id=0)
    np.testing.assert_array_equal(out, [[1, 2, 9, 9, 9, 3, 0, 0]])
    np.testing.assert_array_equal(mask, [[1, 1, 1, 1, 1, 1, 0, 0]])
    np.testing.assert_array_equal(pos, [[0, 1, 2, 3, 4, 5, 1, 1]])


# --------------------------------------------------------------------------- errors


def test_i2v_errors(i2v, t2v):
    _, _, enc = i2v
    with pytest.raises(ValueError, match="exactly once"):
        encode_prompt_i2v(enc, ["a cat <image> on grass"], _image(), prompt_template=TINY_I2V_TEMPLATE)
    with pytest.raises(ValueError, match="image_emb_len 576"):
        encode_prompt_i2v(enc, PROMPTS[:1], _image(), prompt_template={**I2V_PROMPT_TEMPLATE, "crop_start": None})
    with pytest.raises(ValueError, match="one per prompt"):
        encode_prompt_i2v(enc, PROMPTS, [_image(), _image(), _image()], prompt_template=TINY_I2V_TEMPLATE)
    with pytest.raises(ValueError, match="text-to-video encoders"):
        encode_prompt_i2v(t2v[2], PROMPTS, _image())
    with pytest.raises(ValueError, match="image-to-video encoders"):
        encode_prompt_t2v(enc, PROMPTS)


def _copy_folder(src, dst, drop):
    shutil.copytree(src, dst, ignore=lambda d, names: [n for n in names if n in drop])


@pytest.mark.parametrize("drop, match", [
    ("tokenizer", "Llama text encoder has no tokenizer"),
    ("tokenizer_2", "CLIP text encoder has no tokenizer"),
    ("text_encoder_2", "CLIP text encoder folder"),
    ("image_processor", "image processor settings"),
])
def test_missing_folders_are_named(i2v, tmp_path, drop, match):
    folder = i2v[0]
    _copy_folder(folder, tmp_path / "ckpt", {drop})
    with pytest.raises(CheckpointError, match=match):
        text_encoder_folders(tmp_path / "ckpt")


def test_bad_tokenizer_is_named_before_weights(t2v, tmp_path):
    folder = t2v[0]
    _copy_folder(folder, tmp_path / "ckpt", {"model.safetensors"})  # no weights at all
    (tmp_path / "ckpt" / "tokenizer" / "tokenizer.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="tokenizer.json"):
        load_text_encoders(tmp_path / "ckpt")
    assert isinstance(Tokenizer.from_folder(folder / "tokenizer"), Tokenizer)


# --------------------------------------------------------------------------- demo folders (no torch)


@pytest.mark.parametrize("image", [False, True], ids=["t2v", "i2v"])
def test_demo_text_encoders_roundtrip(tmp_path, image):
    """The torch-free writer's folders load through the loader and encode; the fitted templates crop at the prompt."""
    write_demo_text_encoders(tmp_path / "ckpt", np.random.default_rng(0), image=image)
    enc = load_text_encoders(tmp_path / "ckpt")
    assert enc.takes_image == image
    base = I2V_PROMPT_TEMPLATE if image else T2V_PROMPT_TEMPLATE
    n = enc.text_encoder_config.num_image_features if image else None
    template = fit_prompt_template(enc.tokenizer, base, n)
    prompt = "a dog runs on the beach"
    ids = enc.tokenizer.encode_ids(base["template"].format(prompt))
    own = enc.tokenizer.encode_ids(prompt)[1:]  # without BOS
    assert ids[template["crop_start"]:template["crop_start"] + len(own)] == own
    # The reference's own count (crop_start None): the same for T2V, one token further for I2V.
    assert template_crop_start(enc.tokenizer, {**base, "crop_start": None}, image=image) == (
        template["crop_start"] + (1 if image else 0))
    if image:
        assert (template["image_emb_start"], template["image_emb_len"]) == (5, 16)
        out = encode_prompt_i2v(enc, [prompt, "a cat"], _image(), prompt_template=template, max_sequence_length=32)
        assert out.prompt_embeds.shape == (2, 8 + 28, 32)
        assert out.prompt_attention_mask[:, :8].all() and out.prompt_attention_mask[:, 8:].sum(1).tolist() == [
            len(own) + 1, len(enc.tokenizer.encode_ids("a cat")) - 1 + 1]  # the prompt and the turn's "\n\n"
    else:
        out = encode_prompt_t2v(enc, [prompt, "a cat"], prompt_template=template, max_sequence_length=32)
        assert out.prompt_embeds.shape == (2, 32, 32)
        assert out.prompt_attention_mask.sum(1).tolist() == [len(own) + 1, len(enc.tokenizer.encode_ids("a cat"))]
    assert np.isfinite(np.asarray(out.prompt_embeds)).all() and out.pooled_prompt_embeds.shape == (2, 32)
