"""HunyuanVideo-1.5's prompt encoding against diffusers (``HunyuanVideo15Pipeline._get_mllm_prompt_embeds`` and
``encode_prompt`` of both pipelines, ``extract_glyph_texts``) and the original repository's restated pieces (its
``crop_start`` count, its glyph extraction and formatting), with a tiny Qwen2_5_VLTextModel saved by the reference
class and a tiny Qwen2 tokenizer built here, carrying Qwen2.5-VL's released chat template for the reference side."""

import inspect
import re
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from _qwen2_5_vl_reference import QWEN2_5_VL_CHAT_TEMPLATE
from diffusers import HunyuanVideo15ImageToVideoPipeline, HunyuanVideo15Pipeline
from diffusers.pipelines.hunyuan_video1_5 import pipeline_hunyuan_video1_5 as diffusers_t2v
from transformers import AutoTokenizer, Qwen2_5_VLTextConfig, Qwen2_5_VLTextModel

from vidax.checkpoint.errors import CheckpointError
from vidax.encoders.qwen2_tokenizer import write_qwen2_tokenizer
from vidax.models.hunyuanvideo15.text import (
    CROP_START,
    SYSTEM_MESSAGE,
    TOKENIZER_MAX_LENGTH,
    encode_prompt,
    extract_glyph_texts,
    load_mllm,
    mllm_prompt_embeds,
    template_crop_start,
)

PROMPTS = ["A cat walks on the grass, realistic", "A neon sign reads \u201cOPEN\u201d over a rainy street, slow pan",
           ""]
LONG_PROMPT = " ".join(["a very long prompt about a dog running on the beach at sunset"] * 8)


class _VAEStub:
    """What the pipelines' constructors read from their VAE (the text side needs no VAE)."""

    config = SimpleNamespace(latent_channels=32)
    temporal_compression_ratio, spatial_compression_ratio = 4, 16


def _pipeline(cls, model, tokenizer):
    extra = {"image_encoder": None, "feature_extractor": None} if cls is HunyuanVideo15ImageToVideoPipeline else {}
    return cls(text_encoder=model, tokenizer=tokenizer, transformer=None, vae=_VAEStub(), scheduler=None,
               text_encoder_2=None, tokenizer_2=None, guider=None, **extra)


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A diffusers-layout text side: ``text_encoder/`` (Qwen2_5_VLTextModel.save_pretrained) and ``tokenizer/``."""
    root = tmp_path_factory.mktemp("hv15_text")
    corpus = [SYSTEM_MESSAGE, *PROMPTS, LONG_PROMPT, "a photo of a cat", "system\nuser\nassistant\n"] * 2
    write_qwen2_tokenizer(root / "tokenizer", corpus, num_merges=240, chat_template=QWEN2_5_VL_CHAT_TEMPLATE)
    ref_tok = AutoTokenizer.from_pretrained(root / "tokenizer")
    torch.manual_seed(0)
    model = Qwen2_5_VLTextModel(Qwen2_5_VLTextConfig(
        vocab_size=len(ref_tok), hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, rms_norm_eps=1e-6, max_position_embeddings=2048,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [1, 1, 2]})).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(root / "text_encoder")
    return root, model, ref_tok, load_mllm(root / "text_encoder", root / "tokenizer")


def calculate_crop_start(tokenizer, system_message):
    """The original's ``TextEncoder.text2tokens`` first pass + ``calculate_crop_start`` (HunyuanVideo-1.5,
    ``hyvideo/models/text_encoders/__init__.py``), restated for the video template."""
    template = [{"role": "system", "content": system_message}, {"role": "user", "content": "{}"}]
    text = [dict(item, content=item["content"].format("a photo of a cat")) for item in template]
    tokenized = tokenizer.apply_chat_template([text], add_generation_prompt=True, tokenize=True, return_dict=True,
                                              truncation=True, max_length=256, padding="max_length",
                                              return_tensors="pt")
    input_ids = tokenized["input_ids"][0].tolist()
    marker_tokens = tokenizer("<|im_start|>user\n", add_special_tokens=False)["input_ids"]
    for i in range(len(input_ids) - len(marker_tokens) + 1):
        if input_ids[i:i + len(marker_tokens)] == marker_tokens:
            return i + len(marker_tokens)
    return 0


def test_constants_are_diffusers(setup):
    signature = inspect.signature(HunyuanVideo15Pipeline._get_mllm_prompt_embeds).parameters
    assert signature["system_message"].default == SYSTEM_MESSAGE
    assert (signature["crop_start"].default, signature["tokenizer_max_length"].default) == (CROP_START,
                                                                                            TOKENIZER_MAX_LENGTH)
    assert signature["num_hidden_layers_to_skip"].default == 2
    _, model, ref_tok, _ = setup
    for cls in (HunyuanVideo15Pipeline, HunyuanVideo15ImageToVideoPipeline):
        pipe = _pipeline(cls, model, ref_tok)
        assert (pipe.system_message, pipe.prompt_template_encode_start_idx, pipe.tokenizer_max_length) == (
            SYSTEM_MESSAGE, CROP_START, TOKENIZER_MAX_LENGTH)


def test_crop_start_is_the_originals_count(setup):
    _, _, ref_tok, mllm = setup
    crop = template_crop_start(mllm.tokenizer)
    assert crop == calculate_crop_start(ref_tok, SYSTEM_MESSAGE)
    # It is the system turn and the user header: the template up to the prompt, whatever the prompt.
    ids = mllm.tokenizer.encode_ids(f"<|im_start|>system\n{SYSTEM_MESSAGE}<|im_end|>\n<|im_start|>user\n")
    assert crop == len(ids) and crop != CROP_START  # a tiny vocabulary counts differently from the released one


def test_mllm_embeds_match_diffusers(setup):
    """A batch of three prompts (one empty, one cut by truncation), short max length, the crop counted."""
    _, model, ref_tok, mllm = setup
    prompts = [*PROMPTS, LONG_PROMPT]
    crop = template_crop_start(mllm.tokenizer)
    with torch.no_grad():
        ref_embeds, ref_mask = HunyuanVideo15Pipeline._get_mllm_prompt_embeds(
            text_encoder=model, tokenizer=ref_tok, prompt=prompts, device="cpu", tokenizer_max_length=24,
            crop_start=crop)
    with pytest.warns(UserWarning, match="conversations are longer than"):
        embeds, mask = mllm_prompt_embeds(mllm, prompts, tokenizer_max_length=24)
    assert embeds.shape == tuple(ref_embeds.shape) == (4, 24, 32) and mask.dtype == np.int32
    np.testing.assert_array_equal(mask, ref_mask.numpy())
    assert 0 < mask[2].sum() < mask[0].sum() < 24 and mask[3].all()  # right padding; the long prompt cut
    assert _rel(embeds, ref_embeds.numpy()) < 1e-5
    for row in range(3):  # each prompt as it would be alone, padding included
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            alone, _ = mllm_prompt_embeds(mllm, prompts[row], tokenizer_max_length=24)
        assert _rel(alone[0], ref_embeds[row].numpy()) < 1e-5


@pytest.mark.parametrize("pipeline", [HunyuanVideo15Pipeline, HunyuanVideo15ImageToVideoPipeline])
def test_encode_prompt_matches_both_pipelines(setup, pipeline):
    """The pipelines' own encode_prompt at their sizes (1000 tokens after the crop, crop 108); the image-to-video
    pipeline encodes prompts as the text-to-video one does. The glyph side goes through the seam."""
    _, model, ref_tok, mllm = setup
    pipe = _pipeline(pipeline, model, ref_tok)
    glyph_embeds, glyph_mask = np.zeros((3, 256, 8), np.float32), np.zeros((3, 256), np.int64)
    with torch.no_grad():
        ref = pipe.encode_prompt(PROMPTS, device="cpu", dtype=torch.float32, batch_size=3,
                                 prompt_embeds_2=torch.from_numpy(glyph_embeds),
                                 prompt_embeds_mask_2=torch.from_numpy(glyph_mask))
    seen = []

    def encode_glyph_texts(texts):
        seen.append(texts)
        return glyph_embeds, glyph_mask

    out = encode_prompt(mllm, PROMPTS, encode_glyph_texts, crop_start=CROP_START)
    assert seen == [[None, 'Text "OPEN". ', None]]
    assert out.prompt_embeds.shape == (3, 1000, 32)
    assert _rel(out.prompt_embeds, ref[0].numpy()) < 1e-5
    np.testing.assert_array_equal(out.prompt_embeds_mask, ref[1].numpy())
    assert out.prompt_embeds_2 is glyph_embeds and out.prompt_embeds_mask_2 is glyph_mask


@pytest.mark.filterwarnings("ignore:a conversation is longer")
def test_bfloat16_text_encoder(setup):
    root, model, ref_tok, _ = setup
    mllm = load_mllm(root / "text_encoder", root / "tokenizer", dtype="bfloat16")
    crop = template_crop_start(mllm.tokenizer)
    with torch.no_grad():
        ref, _ = HunyuanVideo15Pipeline._get_mllm_prompt_embeds(
            text_encoder=model, tokenizer=ref_tok, prompt=PROMPTS, device="cpu", tokenizer_max_length=24,
            crop_start=crop)
    embeds, _ = mllm_prompt_embeds(mllm, PROMPTS, tokenizer_max_length=24)
    assert _rel(embeds, ref.numpy()) < 1e-2


# --------------------------------------------------------------------------- glyphs

GLYPH_PROMPTS = [
    'A shop sign reads "OPEN" in red neon',  # straight quotes
    "A poster with \u201cSALE\u201d and \u201c50% OFF\u201d",  # curly quotes
    'A banner "Hello" next to "World" and again "Hello"',  # a duplicate, dropped
    "\u201cSame\u201d and \"Same\"",  # the same text in both kinds of quotes: one
    "No quoted text at all",  # none
    'Empty quotes "" count',  # the reference keeps the empty text
    'A line break "inside\nquotes" is not one text, "but this is"',
    'Unclosed "quote only',
    "Mixed \u201cstart\" end\u201d",
]


def original_glyph_prompt(prompt):
    """The original's ``_extract_glyph_texts`` and ``MultilingualPromptFormat.format_prompt`` (no color, no font),
    restated; the pipeline skips byT5 (zeros) when the list is empty."""
    pattern = r'\"(.*?)\"|\u201c(.*?)\u201d'
    result = [match[0] or match[1] for match in re.findall(pattern, prompt)]
    result = list(dict.fromkeys(result)) if len(result) > 1 else result
    if not result:
        return None
    prompt = ""
    for text in result:
        prompt += f'Text "{text}"' + ". "
    return prompt


@pytest.mark.parametrize("prompt", GLYPH_PROMPTS)
def test_extract_glyph_texts(prompt):
    assert extract_glyph_texts(prompt) == diffusers_t2v.extract_glyph_texts(prompt) == original_glyph_prompt(prompt)


def test_extract_glyph_texts_values():
    assert extract_glyph_texts(GLYPH_PROMPTS[1]) == 'Text "SALE". Text "50% OFF". '
    assert extract_glyph_texts(GLYPH_PROMPTS[2]) == 'Text "Hello". Text "World". '
    assert extract_glyph_texts(GLYPH_PROMPTS[4]) is None
    with pytest.raises(ValueError, match="string"):
        extract_glyph_texts(None)


# --------------------------------------------------------------------------- errors and loading


def test_bad_inputs_and_folders(setup, tmp_path):
    root, _, _, mllm = setup
    with pytest.raises(ValueError, match="prompts"):
        mllm_prompt_embeds(mllm, [])
    with pytest.raises(ValueError, match="tokenizer_max_length"):
        mllm_prompt_embeds(mllm, "x", tokenizer_max_length=0)
    with pytest.raises(ValueError, match="crop_start"):
        mllm_prompt_embeds(mllm, "x", crop_start=-1)
    with pytest.raises(ValueError, match="num_hidden_layers_to_skip"):
        mllm_prompt_embeds(mllm, "x", num_hidden_layers_to_skip=5)
    with pytest.raises(ValueError, match="user header"):
        template_crop_start(mllm.tokenizer, "long " * 400)
    with pytest.raises(CheckpointError, match="tokenizer.json"):  # the original layout keeps it beside the model
        load_mllm(root / "text_encoder")
    small = tmp_path / "small"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Qwen2_5_VLTextModel(Qwen2_5_VLTextConfig(
            vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
            num_key_value_heads=2, rope_parameters={"rope_type": "default", "mrope_section": [1, 1, 2]})
        ).save_pretrained(small)
    with pytest.raises(CheckpointError, match="more than the text encoder's 100 embeddings"):
        load_mllm(small, root / "tokenizer")
