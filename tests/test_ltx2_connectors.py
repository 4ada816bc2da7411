"""Parity of LTX-2's text features and connectors with diffusers' LTX2TextConnectors (fp32, tiny configs, several
valid lengths including 1 and full, left padding), and of the feature normalisation with upstream ltx-core's
feature extractors (restated below)."""

import dataclasses
import math

import jax
import numpy as np
import pytest
import torch
from diffusers.pipelines.ltx2.connectors import LTX2TextConnectors

from vidax.models.ltx2.connectors import (ConnectorsConfig, encode_text, load_connectors, masked_mean_range_features,
                                          per_token_rms_features)

LAYERS, D, L, REGS = 3, 16, 8, 4  # Gemma hidden states per token, Gemma width, text length, registers
COMMON = dict(caption_channels=D, text_proj_in_factor=LAYERS, video_connector_num_layers=2,
              audio_connector_num_layers=2, video_connector_num_learnable_registers=REGS,
              audio_connector_num_learnable_registers=REGS, connector_rope_base_seq_len=L)
VARIANTS = {
    # LTX-2.3 / 2.5: per-token RMS features, one projection per modality, split RoPE, gated attention.
    "v2_split_gated": dict(per_modality_projections=True, video_hidden_dim=24, audio_hidden_dim=16, proj_bias=True,
                           video_connector_num_attention_heads=3, video_connector_attention_head_dim=8,
                           audio_connector_num_attention_heads=2, audio_connector_attention_head_dim=8,
                           rope_type="split", video_gated_attn=True, audio_gated_attn=True),
    # LTX-2.0: masked mean / range features, one shared projection, interleaved RoPE.
    "v1_interleaved": dict(per_modality_projections=False, video_connector_num_attention_heads=2,
                           video_connector_attention_head_dim=8, audio_connector_num_attention_heads=4,
                           audio_connector_attention_head_dim=4, rope_type="interleaved"),
}
LENGTHS = np.array([L, 5, 1])  # full, partial, one token


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    # Gemma-like hidden states: each layer its own offset and scale (the normalisation must remove them).
    hs = (rng.standard_normal((LAYERS, len(LENGTHS), L, D)) * rng.uniform(0.5, 4, (LAYERS, 1, 1, 1))
          + rng.uniform(-2, 2, (LAYERS, 1, 1, 1))).astype(np.float32)
    mask = (np.arange(L)[None] >= (L - LENGTHS)[:, None]).astype(np.int64)  # left padding
    return hs, mask


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def saved(request, tmp_path_factory):
    torch.manual_seed(0)
    model = LTX2TextConnectors(**COMMON, **VARIANTS[request.param]).eval()
    with torch.no_grad():  # norm scales start at one, gate biases at zero: perturb them so that a slip shows
        for name, p in model.named_parameters():
            if "norm" in name or "gate" in name:
                p.add_(0.3 * torch.randn_like(p))
    path = tmp_path_factory.mktemp("connectors")
    model.save_pretrained(path)
    return model, path


def _diffusers(model, hs, mask):
    # LTX2Pipeline: torch.stack(hidden_states, dim=-1).flatten(2, 3), then connectors(..., padding_side="left").
    embeds = torch.from_numpy(hs).permute(1, 2, 3, 0).flatten(2, 3)
    with torch.no_grad():
        video, audio, out_mask = model(embeds, torch.from_numpy(mask), padding_side="left")
    return video.numpy(), audio.numpy(), out_mask.numpy()


def test_connectors_match_diffusers(saved):
    model, path = saved
    params, cfg = load_connectors(path)
    hs, mask = _inputs()
    ref_v, ref_a, ref_mask = _diffusers(model, hs, mask)
    video, audio, out_mask = encode_text(params, cfg, hs, mask)
    assert video.shape == ref_v.shape == (3, L, cfg.width("video"))
    assert audio.shape == ref_a.shape == (3, L, cfg.width("audio"))
    np.testing.assert_array_equal(out_mask, ref_mask)
    for b in range(len(LENGTHS)):  # each valid length on its own
        assert _rel(video[b], ref_v[b]) < 1e-5, b
        assert _rel(audio[b], ref_a[b]) < 1e-5, b


def test_valid_tokens_moved_to_front(saved):
    """A right-padded batch with the same tokens gives the same contexts (the valid tokens are reordered first)."""
    _, path = saved
    params, cfg = load_connectors(path)
    hs, mask = _inputs(1)
    right = np.zeros_like(hs)
    for b, n in enumerate(LENGTHS):
        right[:, b, :n] = hs[:, b, L - n:]
    v_left, a_left, _ = encode_text(params, cfg, hs, mask)
    v_right, a_right, _ = encode_text(params, cfg, right, mask[:, ::-1])
    assert _rel(v_right, v_left) < 1e-6 and _rel(a_right, a_left) < 1e-6


# ----------------------------------------------------------------------------- upstream restated
# ltx-core text_encoders/gemma/feature_extractor.py (Lightricks/LTX-2): the normalisations read the attention mask
# (padding-side agnostic); FeatureExtractorV2 rescales by sqrt(projection out_features / Gemma hidden_size).


def _upstream_v1(encoded, attention_mask):  # _norm_and_concat_padded_batch
    b, _, d, l = encoded.shape
    eps = 1e-6
    sequence_lengths = attention_mask.sum(dim=-1)
    mask = attention_mask.bool()[:, :, None, None]
    masked = encoded.masked_fill(~mask, 0.0)
    denom = (sequence_lengths * d).view(b, 1, 1, 1)
    mean = masked.sum(dim=(1, 2), keepdim=True) / (denom + eps)
    x_min = encoded.masked_fill(~mask, float("inf")).amin(dim=(1, 2), keepdim=True)
    x_max = encoded.masked_fill(~mask, float("-inf")).amax(dim=(1, 2), keepdim=True)
    normed = 8 * (encoded - mean) / (x_max - x_min + eps)
    normed = normed.reshape(b, -1, d * l)
    return normed.masked_fill(~mask[:, :, :, 0].expand(-1, -1, d * l), 0.0)


def _upstream_v2(encoded, attention_mask, out_features, embedding_dim):  # norm_and_concat_per_token_rms, _rescale
    B, T, D_, L_ = encoded.shape
    variance = torch.mean(encoded**2, dim=2, keepdim=True)
    normed = (encoded * torch.rsqrt(variance + 1e-6)).reshape(B, T, D_ * L_)
    normed = torch.where(attention_mask.bool().unsqueeze(-1), normed, torch.zeros_like(normed))
    return normed * math.sqrt(out_features / embedding_dim)


def test_features_match_upstream():
    hs, mask = _inputs(2)
    encoded, tmask = torch.from_numpy(hs).permute(1, 2, 3, 0), torch.from_numpy(mask)  # [B, T, D, L]

    def flat(x):  # ours (layers, B, L, D) -> [B, T, D * layers], flattened as the reference
        return np.asarray(x).transpose(1, 2, 3, 0).reshape(len(LENGTHS), L, -1)

    ref1 = _upstream_v1(encoded, tmask).numpy()
    assert _rel(flat(masked_mean_range_features(hs, mask != 0)), ref1) < 1e-6
    ref2 = _upstream_v2(encoded, tmask, 24, D).numpy()
    assert _rel(flat(per_token_rms_features(hs, mask != 0)) * math.sqrt(24 / D), ref2) < 1e-6


def test_bad_inputs(saved):
    _, path = saved
    params, cfg = load_connectors(path)
    hs, mask = _inputs()
    with pytest.raises(ValueError, match="hidden_states"):
        encode_text(params, cfg, hs[:, :, :, :-1], mask)
    with pytest.raises(ValueError, match="multiple"):
        encode_text(params, cfg, hs[:, :, :6], mask[:, :6])
    with pytest.raises(ValueError, match="registers"):
        ConnectorsConfig(video_connector_num_learnable_registers=None)


# ----------------------------------------------------------------------------- the whole text path


def test_text_path_matches_pipeline(tmp_path):
    """Prompt -> tokenizer -> Gemma 4 hidden states -> features -> connectors, against LTX2Pipeline.encode_prompt
    and its connectors call (a tokenizer that adds <bos> itself, on which diffusers and upstream agree)."""
    from diffusers import LTX2Pipeline
    from transformers import Gemma4UnifiedConfig, Gemma4UnifiedForConditionalGeneration, PreTrainedTokenizerFast

    from test_gemma import TEXT, _perturb
    from test_gemma_tokenizer import _write
    from vidax.encoders.gemma import encode, load_gemma
    from vidax.encoders.gemma_tokenizer import GemmaTokenizer

    torch.manual_seed(1)
    gemma = Gemma4UnifiedForConditionalGeneration(Gemma4UnifiedConfig(text_config=dict(TEXT, attention_k_eq_v=True)))
    gemma.eval()
    _perturb(gemma)
    connectors = LTX2TextConnectors(**dict(COMMON, **VARIANTS["v2_split_gated"], caption_channels=32,
                                           text_proj_in_factor=7)).eval()
    for name, model in (("text_encoder", gemma), ("connectors", connectors)):
        model.save_pretrained(tmp_path / name)
    _write(tmp_path / "tokenizer", adds_bos=True)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(tmp_path / "tokenizer")
    pipe = LTX2Pipeline(scheduler=None, vae=None, audio_vae=None, text_encoder=gemma, tokenizer=tokenizer,
                        connectors=connectors, transformer=None, vocoder=None)
    prompts = ["a red fox jumps over the lazy dog in snow at night while bells ring and ring", "snow", ""]
    with torch.no_grad():
        embeds, mask, _, _ = pipe.encode_prompt(prompts, do_classifier_free_guidance=False, max_sequence_length=L * 2,
                                                device="cpu")
        ref_v, ref_a, _ = connectors(embeds, mask, padding_side="left")
    ids, our_mask = GemmaTokenizer.from_folder(tmp_path / "tokenizer")(prompts, L * 2)
    np.testing.assert_array_equal(our_mask, mask.numpy())
    assert sorted(our_mask.sum(axis=1)) == [1, 2, L * 2]  # valid lengths 1, 2 and full
    gparams, gcfg = load_gemma(tmp_path / "text_encoder")
    cparams, ccfg = load_connectors(tmp_path / "connectors")
    video, audio, _ = encode_text(cparams, ccfg, encode(gparams, gcfg, ids, our_mask), our_mask)
    for b in range(len(prompts)):
        assert _rel(video[b], ref_v[b].numpy()) < 1e-5, b
        assert _rel(audio[b], ref_a[b].numpy()) < 1e-5, b


# ----------------------------------------------------------------------------- the release layout


def _to_release(key):
    # diffusers scripts/convert_ltx2_to_diffusers.py LTX_2_0_TEXT_ENCODER_RENAME_DICT, inverted, plus the release's
    # prefixes (ltx-core EMBEDDINGS_PROCESSOR_KEY_OPS).
    for theirs, ours in (("video_embeddings_connector", "video_connector"),
                         ("audio_embeddings_connector", "audio_connector"),
                         ("transformer_1d_blocks", "transformer_blocks"), ("q_norm", "norm_q"), ("k_norm", "norm_k")):
        key = key.replace(ours, theirs)
    if key.startswith(("video_embeddings_connector", "audio_embeddings_connector")):
        return "model.diffusion_model." + key
    for ours, theirs in (("video_text_proj_in", "video_aggregate_embed"),
                         ("audio_text_proj_in", "audio_aggregate_embed"), ("text_proj_in", "aggregate_embed")):
        if key.startswith(ours + "."):
            return "text_embedding_projection." + theirs + key[len(ours):]
    raise AssertionError(key)


@pytest.mark.parametrize("variant", ["v2_split_gated"])
def test_release_layout(tmp_path, variant):
    """The connectors inside a release checkpoint (upstream names, among the transformer's tensors) load to the same
    parameters, with the configuration read from the release metadata as upstream reads it."""
    from safetensors.torch import save_file

    from vidax.checkpoint.loader import load_params
    from vidax.checkpoint.reader import CheckpointReader
    from vidax.models.ltx2.connectors import connectors_release_keymap, connectors_specs

    torch.manual_seed(3)
    model = LTX2TextConnectors(**COMMON, **VARIANTS[variant])
    model.save_pretrained(tmp_path / "diffusers")
    state = {_to_release(k): v.contiguous() for k, v in model.state_dict().items()}
    state["model.diffusion_model.patchify_proj.weight"] = torch.zeros(2, 2)  # a transformer tensor, not ours
    save_file(state, str(tmp_path / "release.safetensors"))
    # The metadata's transformer config, as a V2 (LTX-2.3 / 2.5) release writes it.
    transformer = dict(num_attention_heads=3, attention_head_dim=8, audio_num_attention_heads=2,
                       audio_attention_head_dim=8, connector_num_attention_heads=3, connector_attention_head_dim=8,
                       connector_num_layers=2, audio_connector_num_attention_heads=2,
                       audio_connector_attention_head_dim=8, audio_connector_num_layers=2,
                       connector_positional_embedding_max_pos=[L], rope_type="split", frequencies_precision="float64",
                       connector_apply_gated_attention=True, caption_proj_before_connector=True,
                       caption_projection_first_linear=False, caption_proj_input_norm=False,
                       caption_projection_second_linear=False)
    cfg = ConnectorsConfig.from_release(transformer, D, LAYERS - 1)
    ref, ref_cfg = load_connectors(tmp_path / "diffusers")
    assert cfg == dataclasses.replace(ref_cfg, video_connector_num_learnable_registers=128,
                                      audio_connector_num_learnable_registers=128)
    # upstream always builds 128 registers; the tiny checkpoint has REGS
    cfg = dataclasses.replace(cfg, video_connector_num_learnable_registers=REGS,
                              audio_connector_num_learnable_registers=REGS)
    ours = load_params(CheckpointReader(tmp_path / "release.safetensors"), connectors_release_keymap(cfg),
                       connectors_specs(cfg))
    flat_ours, flat_ref = jax.tree_util.tree_leaves_with_path(ours), jax.tree_util.tree_leaves_with_path(ref)
    assert [p for p, _ in flat_ours] == [p for p, _ in flat_ref]
    for (_, a), (_, b) in zip(flat_ours, flat_ref):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_bfloat16_weights(saved):
    model, path = saved
    params, cfg = load_connectors(path, dtype="bfloat16")
    assert params["video_connector"]["blocks"]["attn1"]["to_q"]["kernel"].dtype == "bfloat16"
    assert params["video_connector"]["blocks"]["attn1"]["norm_q"]["scale"].dtype == np.float32
    hs, mask = _inputs()
    ref_v, ref_a, _ = _diffusers(model, hs, mask)  # the float32 reference
    video, audio, _ = encode_text(params, cfg, hs, mask)
    assert _rel(video, ref_v) < 1e-2 and _rel(audio, ref_a) < 1e-2, (_rel(video, ref_v), _rel(audio, ref_a))
