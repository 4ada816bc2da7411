"""Cosmos-Predict2.5's text conditioning against diffusers (``Cosmos2_5_PredictBasePipeline._get_prompt_embeds`` and
``encode_prompt``) and the original repository's ``TextEncoder.compute_text_embeddings_online`` (restated below), with a
tiny Qwen2_5_VLForConditionalGeneration saved by the reference class in diffusers' ``text_encoder/`` layout and a tiny
Qwen2 tokenizer built here, carrying Qwen2.5-VL's released chat template for the reference side."""

import inspect
import warnings

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from _qwen2_5_vl_reference import QWEN2_5_VL_CHAT_TEMPLATE
from transformers import AutoTokenizer, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

from vidax.encoders.qwen2_tokenizer import write_qwen2_tokenizer
from vidax.models.cosmos_predict25.text import (
    DEFAULT_NEGATIVE_PROMPT,
    MAX_SEQUENCE_LENGTH,
    SYSTEM_PROMPT,
    check_crossattn_proj_in_channels,
    encode_prompt,
    load_text_encoder,
    prompt_embeds,
    tokenize,
)

LAYERS, WIDTH = 3, 32
TEXT = dict(hidden_size=WIDTH, intermediate_size=64, num_hidden_layers=LAYERS, num_attention_heads=4,
            num_key_value_heads=2, rms_norm_eps=1e-6, max_position_embeddings=1024,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [1, 1, 2]})
VISION = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=WIDTH,
              fullatt_block_indexes=[0])

PROMPTS = ["A robot arm pours water into a glass, static camera", "", "Caf\u00e9 {at} night <|im_end|> rain"]
# More than 512 tokens with the tiny vocabulary: cut at max_sequence_length, the frame's end with it.
LONG_PROMPT = " ".join(["a very long prompt about a truck driving through a desert at dawn"] * 50)

# The original's default negative prompt (cosmos_predict2/config.py DEFAULT_NEGATIVE_PROMPT and
# _src/predict2/inference/utils.py _DEFAULT_NEGATIVE_PROMPT), restated.
ORIGINAL_NEGATIVE_PROMPT = (
    "The video captures a series of frames showing ugly scenes, static with no motion, motion blur, over-saturation, "
    "shaky footage, low resolution, grainy texture, pixelated images, poorly lit areas, underexposed and overexposed "
    "scenes, poor color balance, washed out colors, choppy sequences, jerky movements, low frame rate, artifacting, "
    "color banding, unnatural transitions, outdated special effects, fake elements, unconvincing visuals, poorly "
    "edited content, jump cuts, visual noise, and flickering. Overall, the video is of poor quality.")


class _VAEStub:
    """What the pipeline's constructor reads from its VAE (the text side needs no VAE)."""

    temperal_downsample = [False, True, True]

    class config:
        z_dim = 16
        latents_mean = [0.0] * 16
        latents_std = [1.0] * 16


class _SafetyCheckerStub:
    """In place of cosmos_guardrail's checker, which the pipeline's constructor otherwise builds (not installed)."""


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def _reference_conversation(prompt):
    """The conversation both references build (content as a list of text parts)."""
    return [{"role": "system", "content": [{"type": "text", "text": SYSTEM_PROMPT}]},
            {"role": "user", "content": [{"type": "text", "text": prompt}]}]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """diffusers' layout: ``text_encoder/`` (Qwen2_5_VLForConditionalGeneration.save_pretrained) and ``tokenizer/``;
    the reference pipeline over the same model and tokenizer; vidax's float32 text encoder."""
    import _torchvision_restated
    _torchvision_restated.install()
    from diffusers import Cosmos2_5_PredictBasePipeline

    root = tmp_path_factory.mktemp("cosmos_text")
    corpus = [SYSTEM_PROMPT, *PROMPTS, LONG_PROMPT, DEFAULT_NEGATIVE_PROMPT, "system\nuser\nassistant\n"] * 2
    write_qwen2_tokenizer(root / "tokenizer", corpus, num_merges=240, chat_template=QWEN2_5_VL_CHAT_TEMPLATE)
    ref_tok = AutoTokenizer.from_pretrained(root / "tokenizer")
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(
            text_config={**TEXT, "vocab_size": len(ref_tok)}, vision_config=VISION)).eval()
    with torch.no_grad():  # random norm scales and biases (1 and 0 at init would hide a missed one)
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(root / "text_encoder")
    pipe = Cosmos2_5_PredictBasePipeline(text_encoder=model, tokenizer=ref_tok, transformer=None, vae=_VAEStub(),
                                         scheduler=None, safety_checker=_SafetyCheckerStub())
    encoder = load_text_encoder(root / "text_encoder", root / "tokenizer",
                                crossattn_proj_in_channels=LAYERS * WIDTH)
    return root, model, ref_tok, pipe, encoder


def test_constants_are_the_references(setup):
    from diffusers import Cosmos2_5_PredictBasePipeline
    from diffusers.pipelines.cosmos import pipeline_cosmos2_5_predict as reference

    assert DEFAULT_NEGATIVE_PROMPT == reference.DEFAULT_NEGATIVE_PROMPT == ORIGINAL_NEGATIVE_PROMPT
    for method in (Cosmos2_5_PredictBasePipeline._get_prompt_embeds, Cosmos2_5_PredictBasePipeline.encode_prompt,
                   Cosmos2_5_PredictBasePipeline.__call__):
        assert inspect.signature(method).parameters["max_sequence_length"].default == MAX_SEQUENCE_LENGTH
    assert f'"text": "{SYSTEM_PROMPT}"' in inspect.getsource(Cosmos2_5_PredictBasePipeline._get_prompt_embeds)
    assert setup[4].embed_dim == LAYERS * WIDTH and setup[4].weight_dtype == np.float32


def test_ids_are_the_reference_template(setup):
    """The references' ``apply_chat_template`` (text parts, no generation prompt, cut and padded), with the released
    template: an empty prompt, braces, Unicode, a special token typed in a prompt, a prompt cut by truncation."""
    _, _, ref_tok, _, encoder = setup
    prompts = [*PROMPTS, LONG_PROMPT]
    with pytest.warns(UserWarning, match="2 conversations are longer than 56"):
        ids = tokenize(encoder.tokenizer, prompts, 56)
    assert ids.shape == (4, 56) and ids.dtype == np.int32
    for row, prompt in enumerate(prompts):
        ref = ref_tok.apply_chat_template(_reference_conversation(prompt), tokenize=True, add_generation_prompt=False,
                                          add_vision_id=False, max_length=56, truncation=True, padding="max_length")
        assert ids[row].tolist() == ref["input_ids"], row
    assert ids[1, -1] == ref_tok.pad_token_id and ids[3, -1] != ref_tok.pad_token_id  # padded; cut


def test_prompt_embeds_match_diffusers(setup):
    """``_get_prompt_embeds`` at a short length (two conversations cut, two padded), float32."""
    _, _, _, pipe, encoder = setup
    prompts = [*PROMPTS, LONG_PROMPT]
    with torch.no_grad():
        ref = pipe._get_prompt_embeds(prompts, max_sequence_length=60, device="cpu").numpy()
    with pytest.warns(UserWarning, match="longer than 60"):
        out = np.asarray(prompt_embeds(encoder, prompts, 60))
    assert out.shape == ref.shape == (4, 60, LAYERS * WIDTH) and out.dtype == np.float32
    assert _rel(out, ref) < 1e-5
    for k in range(LAYERS):  # layer k's normalised output in its slice, the last after the final norm
        part = slice(k * WIDTH, (k + 1) * WIDTH)
        assert _rel(out[..., part], ref[..., part]) < 1e-5, k
        np.testing.assert_allclose(out[..., part].mean(-1), 0, atol=1e-5)
        np.testing.assert_allclose(out[..., part].std(-1, ddof=1), 1, atol=1e-5)  # unbiased, as torch's


def test_encode_prompt_matches_diffusers(setup):
    """``encode_prompt`` at its 512 tokens, the default negative prompt; a prompt over 512 tokens is cut."""
    _, _, ref_tok, pipe, encoder = setup
    prompts = [PROMPTS[0], LONG_PROMPT]
    assert len(ref_tok(LONG_PROMPT)["input_ids"]) > MAX_SEQUENCE_LENGTH
    with torch.no_grad():
        ref, ref_neg = pipe.encode_prompt(prompts, device="cpu")
    with pytest.warns(UserWarning, match=f"longer than {MAX_SEQUENCE_LENGTH}"):
        out, neg = encode_prompt(encoder, prompts)
    assert out.shape == neg.shape == tuple(ref.shape) == (2, MAX_SEQUENCE_LENGTH, LAYERS * WIDTH)
    assert _rel(out, ref.numpy()) < 1e-5 and _rel(neg, ref_neg.numpy()) < 1e-5
    with torch.no_grad():
        ref_neg2 = pipe.encode_prompt(prompts[:1], negative_prompt="blurry", device="cpu")[1]
    out2, neg2 = encode_prompt(encoder, prompts[:1], "blurry")
    assert _rel(out2, ref[:1].numpy()) < 1e-5 and _rel(neg2, ref_neg2.numpy()) < 1e-5
    out3, none = encode_prompt(encoder, prompts[:1], do_classifier_free_guidance=False)
    assert none is None and _rel(out3, ref[:1].numpy()) < 1e-5


def test_no_attention_mask(setup):
    """The reference runs the text encoder without a mask: padding attends causally and its rows are part of the
    embedding. With the tokenizer's mask the padded rows would differ (so the parity above sees the choice)."""
    _, model, ref_tok, pipe, encoder = setup
    with torch.no_grad():
        ref = pipe._get_prompt_embeds(PROMPTS[1:2], max_sequence_length=60, device="cpu").numpy()
        batch = ref_tok.apply_chat_template(_reference_conversation(PROMPTS[1]), tokenize=True, max_length=60,
                                            add_generation_prompt=False, padding="max_length", return_tensors="pt")
        masked = model(batch["input_ids"], attention_mask=batch["attention_mask"],
                       output_hidden_states=True).hidden_states
    valid = int(batch["attention_mask"].sum())
    assert valid < 60
    masked = torch.cat([(h - h.mean(-1, keepdim=True)) / (h.std(-1, keepdim=True) + 1e-8) for h in masked[1:]],
                       -1).numpy()
    out = np.asarray(prompt_embeds(encoder, PROMPTS[1:2], 60))
    assert _rel(out, ref) < 1e-5
    assert _rel(out[:, :valid], masked[:, :valid]) < 1e-5  # causal: the prompt never sees the padding
    assert _rel(masked[:, valid:], ref[:, valid:]) > 1e-2


def test_batch_equivalence(setup):
    """A prompt gives the same rows alone as in a batch of prompts of other lengths."""
    _, _, _, pipe, encoder = setup
    with torch.no_grad():
        ref = pipe._get_prompt_embeds(PROMPTS, max_sequence_length=60, device="cpu").numpy()
    with pytest.warns(UserWarning, match="a conversation is longer than 60"):
        batch = np.asarray(prompt_embeds(encoder, PROMPTS, 60))
    for row, prompt in enumerate(PROMPTS):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            alone = np.asarray(prompt_embeds(encoder, [prompt], 60))[0]
        assert _rel(alone, ref[row]) < 1e-5 and _rel(alone, batch[row]) < 1e-6, row


# --------------------------------------------------------------------------- the original


def original_text_embeddings(model, tokenizer, prompts):
    """The original's ``TextEncoder.compute_text_embeddings_online`` (``FULL_CONCAT``), restated: per prompt, the
    processor's template text tokenized (``Processor.apply_chat_template``), padded with ``pad_id`` or cut to
    ``NUM_EMBEDDING_PADDING_TOKENS`` by hand, then ``QwenVLBaseModel._forward`` without a mask (position ids
    ``0 .. L-1`` from ``get_rope_index``) through its ``Qwen2_5_VLModel`` (``reason1/networks/qwen2_5_vl.py``):
    the state before each layer collected, the normed last one appended; the SDPA path's explicit causal mask."""
    num_embedding_padding_tokens = 512
    lm = model.model.language_model
    rows = []
    for prompt in prompts:
        text = tokenizer.apply_chat_template(_reference_conversation(prompt), tokenize=False,
                                             add_generation_prompt=False, add_vision_id=False)
        input_ids = tokenizer(text=[text], padding=False, return_tensors="pt")["input_ids"][0]
        if num_embedding_padding_tokens > len(input_ids):
            input_ids = input_ids.tolist() + [tokenizer.pad_token_id] * (num_embedding_padding_tokens - len(input_ids))
        else:
            input_ids = input_ids.tolist()[:num_embedding_padding_tokens]
        input_ids = torch.LongTensor(input_ids)[None]
        hidden = lm.embed_tokens(input_ids)
        seqlen = hidden.shape[1]
        position_ids = torch.arange(seqlen).view(1, 1, -1).expand(3, 1, -1)
        position_embeddings = lm.rotary_emb(hidden, position_ids)
        causal_mask = torch.full((seqlen, seqlen), float("-inf")).triu_(1).to(hidden.dtype)
        states = ()
        for layer in lm.layers:
            states += (hidden,)
            out = layer(hidden, attention_mask=causal_mask[None, None], position_embeddings=position_embeddings)
            hidden = out[0] if isinstance(out, tuple) else out
        states += (lm.norm(hidden),)
        normalized = [(h - h.mean(dim=-1, keepdim=True)) / (h.std(dim=-1, keepdim=True) + 1e-8) for h in states[1:]]
        rows.append(torch.cat(normalized, dim=-1))
    return torch.cat(rows, dim=0)


def test_original_computation(setup):
    """The original computes what diffusers does (the same template, pad token, length, mask, states, normalisation),
    one prompt at a time; it runs Cosmos-Reason1 in bfloat16 with flash attention (docs/design.md)."""
    _, model, ref_tok, pipe, encoder = setup
    prompts = [PROMPTS[1], LONG_PROMPT]
    with torch.no_grad():
        ref = original_text_embeddings(model, ref_tok, prompts).numpy()
        diffusers_ref = pipe._get_prompt_embeds(prompts, device="cpu").numpy()
    with pytest.warns(UserWarning, match="a conversation is longer"):
        out = np.asarray(prompt_embeds(encoder, prompts))
    assert ref.shape == out.shape == (2, 512, LAYERS * WIDTH)
    assert _rel(out, ref) < 1e-5 and _rel(diffusers_ref, ref) < 1e-5


# --------------------------------------------------------------------------- precision, checks


@pytest.mark.filterwarnings("ignore:.*longer than")
def test_bfloat16_text_encoder(setup):
    root, _, _, pipe, _ = setup
    encoder = load_text_encoder(root / "text_encoder", root / "tokenizer", dtype="bfloat16")
    prompts = [*PROMPTS, LONG_PROMPT]
    with torch.no_grad():
        ref = pipe._get_prompt_embeds(prompts, max_sequence_length=60, device="cpu").numpy()
    out = prompt_embeds(encoder, prompts, 60)
    assert out.dtype == jnp.bfloat16 and _rel(np.asarray(out, np.float32), ref) < 1e-2  # the weights' dtype
    out32 = prompt_embeds(encoder, prompts, 60, dtype=np.float32)
    assert out32.dtype == np.float32 and _rel(out32, ref) < 1e-2
    assert _rel(out32, np.asarray(out, np.float32)) < 1e-2


def test_crossattn_proj_in_channels_is_checked(setup):
    root, _, _, _, encoder = setup
    with pytest.raises(ValueError, match=r"3 layers x 32 = 96 features .* crossattn_proj_in_channels is 100352"):
        load_text_encoder(root / "text_encoder", root / "tokenizer", crossattn_proj_in_channels=100352)
    check_crossattn_proj_in_channels(encoder.config, 96)
    for bad in (95, True, 96.0, None):
        with pytest.raises(ValueError, match="crossattn_proj_in_channels"):
            check_crossattn_proj_in_channels(encoder.config, bad)


def test_bad_inputs(setup):
    _, _, _, _, encoder = setup
    for length in (0, 1025, 3.0, True):
        with pytest.raises(ValueError, match="max_sequence_length"):
            prompt_embeds(encoder, PROMPTS, length)
    for prompts in ([], [1], None):
        with pytest.raises(ValueError, match="prompts"):
            prompt_embeds(encoder, prompts, 8)
    with pytest.raises(ValueError, match="2 negative prompts for 1 prompts"):
        encode_prompt(encoder, "a", ["b", "c"])
    with pytest.raises(ValueError, match="floating-point"):
        prompt_embeds(encoder, "a", 8, dtype=np.int32)
