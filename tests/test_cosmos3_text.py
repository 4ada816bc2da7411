"""Cosmos3's prompt path against diffusers' Cosmos3OmniPipeline.tokenize_prompt and its 3D mRoPE position ids,
with a tiny locally built Qwen3-VL-style tokenizer carrying the released Qwen3-VL chat template."""

import numpy as np
import pytest
import torch
from _cosmos3_reference import write_tokenizer
from transformers import AutoTokenizer

from vidax.models.cosmos3.text import (MAX_PROMPT_TOKENS, SYSTEM_PROMPT_IMAGE, SYSTEM_PROMPT_VIDEO, Cosmos3Tokenizer,
                                       pack_prompts, render_chat, text_position_ids, vision_position_ids)

PROMPTS = ["A red panda climbs a bamboo tree in the snow.", "robot arm welds a frame...", "", " ",
           "Ünïcödé 東京 café, <|vision_start|> quoted \"text\"", "ends with dots.."]
CORPUS = [SYSTEM_PROMPT_VIDEO, SYSTEM_PROMPT_IMAGE, *PROMPTS, "The video is 3.9 seconds long and is of 24 FPS.",
          "This video is not of 704x1280 resolution."] * 2


class _VAEStub:
    """What the reference pipeline's constructor reads from its VAE (the prompt path needs no VAE)."""

    dtype = torch.float32

    class config:
        latents_mean = [0.0] * 48
        latents_std = [1.0] * 48
        scale_factor_spatial = 16
        scale_factor_temporal = 4


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from diffusers import Cosmos3OmniPipeline, Cosmos3OmniTransformer

    folder = write_tokenizer(tmp_path_factory.mktemp("c3tok"), CORPUS, num_merges=200)
    ref_tok = AutoTokenizer.from_pretrained(folder)
    transformer = Cosmos3OmniTransformer(head_dim=16, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                                         num_hidden_layers=1, num_key_value_heads=1, patch_latent_dim=192,
                                         rope_scaling={"mrope_section": [4, 2, 2]}, vocab_size=len(ref_tok))
    pipe = Cosmos3OmniPipeline(transformer=transformer, text_tokenizer=ref_tok, vae=_VAEStub(), scheduler=None,
                               enable_safety_checker=False)
    return Cosmos3Tokenizer.from_folder(folder), ref_tok, pipe, transformer


def test_render_chat_is_the_qwen3_vl_template(setup):
    _, ref_tok, _, _ = setup
    for system in (SYSTEM_PROMPT_VIDEO, SYSTEM_PROMPT_IMAGE, None, ""):
        for user in PROMPTS:
            messages = ([] if system is None else [{"role": "system", "content": system}]) + [
                {"role": "user", "content": user}]
            expected = ref_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                   add_vision_id=False)
            assert render_chat(system, user) == expected


@pytest.mark.parametrize("sizes", [(93, 704, 1280, 24.0), (121, 480, 832, 24.0), (1, 480, 832, 24.0),
                                   (61, 256, 320, 16.0), (45, 64, 96, 30.0)])
def test_tokenize_prompt_matches_diffusers(setup, sizes):
    ours, _, pipe, _ = setup
    num_frames, height, width, fps = sizes
    for i, prompt in enumerate(PROMPTS):
        negative = [None, "", "blurry, low quality.", PROMPTS[0]][i % 4]
        for use_system in (True, False):
            for add_res, add_dur in ((True, True), (False, True), (True, False)):
                kw = dict(num_frames=num_frames, height=height, width=width, fps=fps, use_system_prompt=use_system,
                          add_resolution_template=add_res, add_duration_template=add_dur)
                expected = pipe.tokenize_prompt(prompt, negative, **kw)
                assert ours.tokenize_prompt(prompt, negative, **kw) == tuple(expected)
    assert ours.eos_id == pipe.llm_special_tokens["eos_token_id"]
    assert ours.vision_start_id == pipe.llm_special_tokens["start_of_generation"]


def test_text_position_ids_match_diffusers(setup):
    from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import get_3d_mrope_ids_text_tokens

    for n, offset in ((1, 0), (37, 0), (5, 15040)):
        for floats in (False, True):
            ref, ref_next = get_3d_mrope_ids_text_tokens(n, offset, use_float_positions=floats)
            ids, nxt = text_position_ids(n, offset)
            assert ids.dtype == np.float32 and nxt == ref_next
            np.testing.assert_array_equal(ids, ref.numpy().astype(np.float32))


@pytest.mark.parametrize("fps", [None, 24.0, 16.0, 30.0, 10.0])
@pytest.mark.parametrize("reset", [True, False])
def test_vision_position_ids_match_diffusers(fps, reset):
    from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import get_3d_mrope_ids_vae_tokens

    for grid, offset in (((24, 22, 40), 15093), ((31, 15, 26), 15071), ((1, 3, 5), 15012), ((3, 2, 2), 7)):
        ref, ref_next = get_3d_mrope_ids_vae_tokens(*grid, temporal_offset=offset, reset_spatial_indices=reset,
                                                    fps=fps, base_fps=24.0, temporal_compression_factor=4)
        ids, nxt = vision_position_ids(*grid, offset, reset_spatial_indices=reset, fps=fps, base_fps=24.0,
                                       temporal_compression_factor=4)
        assert nxt == ref_next and ids.shape == tuple(ref.shape)
        np.testing.assert_array_equal(ids, ref.numpy().astype(np.float32))


def test_packed_sequence_positions_match_the_pipelines_segments(setup):
    """The reference packs [text, vision] per prompt; ours: text rows padded, vision offsets per row."""
    ours, _, pipe, transformer = setup
    cond, uncond = ours.tokenize_prompt(PROMPTS[0], "bad", num_frames=9, height=64, width=96, fps=24.0)
    cfg = transformer.config
    packed = pack_prompts([cond, uncond], pad_id=ours.tokenizer.pad_id,
                          temporal_modality_margin=cfg.unified_3d_mrope_temporal_modality_margin)
    latents = torch.zeros(1, 48, 3, 4, 6)
    for row, ids in enumerate((cond, uncond)):
        text = pipe._prepare_text_segment(ids, device="cpu")
        vision = pipe._prepare_vision_segment(latents, False, text["vision_start_temporal_offset"], 24.0,
                                              text["und_len"], device="cpu")
        n = len(ids)
        assert packed.lengths[row] == n and packed.vision_offsets[row] == text["vision_start_temporal_offset"]
        np.testing.assert_array_equal(packed.input_ids[row, :n], text["input_ids"].numpy())
        np.testing.assert_array_equal(packed.position_ids[row, :, :n], text["text_mrope_ids"].numpy())
        fps = 24.0 if cfg.enable_fps_modulation else None
        ids_v, _ = vision_position_ids(3, 2, 3, packed.vision_offsets[row], fps=fps, base_fps=float(cfg.base_fps),
                                       reset_spatial_indices=cfg.unified_3d_mrope_reset_spatial_ids)
        np.testing.assert_array_equal(ids_v, vision["vision_mrope_ids"].numpy().astype(np.float32))
    assert packed.input_ids.shape[1] % 64 == 0 and (packed.input_ids[1, len(uncond):] == ours.tokenizer.pad_id).all()


def test_bad_prompts_are_refused(setup):
    ours = setup[0]
    with pytest.raises(ValueError, match="must be a string"):
        ours.tokenize_prompt(3, None, num_frames=9, height=64, width=64)
    with pytest.raises(ValueError, match="too long|tokens"):
        ours.tokenize_prompt("word " * MAX_PROMPT_TOKENS, None, num_frames=9, height=64, width=64)
