"""Parity of the Cosmos3 transformer with diffusers ``Cosmos3OmniTransformer`` (fp32 and bf16), the und-cache reuse
(issue 24: "reusing the understanding stream's keys/values equals recomputing them"), right-padded CFG batches, and
the key maps (diffusers layout and the release layout).

Two tiny configurations, one per backbone: Nano-like (``hidden_act="silu"``, RMSNorm, text q/k norms, rope_theta 5e6)
and Edge-like (``relu2``, Nemotron norms, no text q/k norms, ``k_norm_und_for_gen``, rope_theta 1e8, attention biases).
Both: width 64, 4 heads of 16 over 2 key/value heads, 2 layers, 4 latent channels, patch 2, ``mrope_section`` [4, 2, 2]
(the 8 rotary frequencies T H W T H W T T). Weights are written by the reference class (``save_pretrained``) with every
norm weight and bias randomised, and read by the strict loader.

The reference inputs are built as ``Cosmos3OmniPipeline`` builds them (``_prepare_text_segment``,
``_prepare_vision_segment`` and the ``transformer(...)`` call of its denoising loop), restated here: one sample per
call, the text tokens first (``text_indexes = arange(L)``, ``und_len = L``), then the ``T * ceil(H/2) * ceil(W/2)``
vision tokens; position ids ``get_3d_mrope_ids_text_tokens(L, 0)`` then ``get_3d_mrope_ids_vae_tokens`` from
``L + unified_3d_mrope_temporal_modality_margin`` (with ``fps`` when ``enable_fps_modulation``: fractional temporal
positions at 16 fps); the conditioning frames are left out of ``vision_noisy_frame_indexes`` and of the read-out
indexes, and every noisy token gets the step's timestep.
"""

import json

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers import Cosmos3OmniTransformer
from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import (get_3d_mrope_ids_text_tokens,
                                                              get_3d_mrope_ids_vae_tokens)
from safetensors.torch import save_file

from vidax.checkpoint.errors import CheckpointError
from vidax.core.params import flatten
from vidax.models.cosmos3.config import Cosmos3TransformerConfig
from vidax.models.cosmos3.keymap import load_transformer
from vidax.models.cosmos3.transformer import forward, gen_forward, patchify, und_prefill, unpatchify

BASE = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, latent_channel=4, latent_patch_size=2, patch_latent_dim=16, vocab_size=40,
            rope_scaling={"mrope_section": [4, 2, 2]}, timestep_scale=0.001, base_fps=24,
            unified_3d_mrope_temporal_modality_margin=15000, unified_3d_mrope_reset_spatial_ids=True)
CONFIGS = {
    "nano": dict(BASE, hidden_act="silu", qk_norm_for_text=True, use_und_k_norm_for_gen=False, rms_norm_eps=1e-6,
                 rope_theta=5e6, enable_fps_modulation=True),
    "edge": dict(BASE, hidden_act="relu2", qk_norm_for_text=False, use_und_k_norm_for_gen=True, rms_norm_eps=1e-5,
                 rope_theta=1e8, attention_bias=True, enable_fps_modulation=True),
    "nano-int": dict(BASE, hidden_act="silu", qk_norm_for_text=True, rms_norm_eps=1e-6, rope_theta=5e6,
                     enable_fps_modulation=False),
}
LATENTS = (1, 4, 3, 5, 6)  # (B, C, T, H, W): H odd, padded to the patch
FPS = 16.0  # not base_fps: fractional temporal positions
TEMPORAL_COMPRESSION = 4  # the Wan2.2 VAE's (the pipeline's vae_scale_factor_temporal)
TIMESTEPS = (999.0, 637.5, 120.25)


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


_SAVED: dict = {}


def _saved(name, tmp_path_factory):
    """``(model, folder, loaded)`` of a configuration, once per module."""
    if name not in _SAVED:
        torch.manual_seed(0)
        model = Cosmos3OmniTransformer(**CONFIGS[name]).eval()
        with torch.no_grad():
            for n, prm in model.named_parameters():
                if "norm" in n:
                    prm.copy_(1.0 + 0.2 * torch.randn_like(prm))
                elif n.endswith("bias"):
                    prm.add_(0.1 * torch.randn_like(prm))
        folder = tmp_path_factory.mktemp(name)
        model.save_pretrained(folder)
        _SAVED[name] = (model, folder, load_transformer(folder))
    return _SAVED[name]


def _prompt(length, seed):
    return np.random.default_rng(seed).integers(0, 40, length)


def _latents(seed=1):
    return np.random.default_rng(seed).standard_normal(LATENTS, dtype=np.float32)


def _positions(cfg, length, grid):
    """The pipeline's position ids of one sample: ``(3, L)`` text and ``(3, N)`` vision, as float32."""
    text, next_offset = get_3d_mrope_ids_text_tokens(length, 0, use_float_positions=cfg["enable_fps_modulation"])
    vision, _ = get_3d_mrope_ids_vae_tokens(
        *grid, temporal_offset=next_offset + cfg["unified_3d_mrope_temporal_modality_margin"],
        reset_spatial_indices=cfg["unified_3d_mrope_reset_spatial_ids"],
        fps=FPS if cfg["enable_fps_modulation"] else None, base_fps=float(cfg["base_fps"]),
        temporal_compression_factor=TEMPORAL_COMPRESSION)
    return text, vision


def _grid(shape, p=2):
    return shape[2], -(-shape[3] // p), -(-shape[4] // p)


def _reference(model, name, ids, latents, timestep, noisy_frames):
    """``Cosmos3OmniTransformer.forward`` for one sample, called as the pipeline calls it. ``(1, C, T, H, W)``."""
    cfg = CONFIGS[name]
    grid = _grid(latents.shape)
    length, n = len(ids), int(np.prod(grid))
    text, vision = _positions(cfg, length, grid)
    stride = grid[1] * grid[2]
    read = [length + f * stride + i for f in noisy_frames for i in range(stride)]
    with torch.no_grad():
        out = model(input_ids=torch.tensor(ids, dtype=torch.long), text_indexes=torch.arange(length),
                    position_ids=torch.cat([text, vision], dim=1), und_len=length, sequence_length=length + n,
                    vision_tokens=[torch.from_numpy(latents)], vision_token_shapes=[grid],
                    vision_sequence_indexes=torch.arange(length, length + n),
                    vision_mse_loss_indexes=torch.tensor(read, dtype=torch.long),
                    vision_timesteps=torch.full((len(noisy_frames) * stride,), timestep),
                    vision_noisy_frame_indexes=[torch.tensor(noisy_frames, dtype=torch.long)], return_dict=False)[0]
    return out[0].numpy()


def _batch(name, prompts, latents, noisy_frames):
    """Our inputs for a batch of prompts (right-padded), each with ``latents``: ``(input_ids, text positions,
    lengths, latents, vision positions, noisy)``."""
    cfg = CONFIGS[name]
    grid = _grid(latents.shape)
    width = max(len(p) for p in prompts)
    ids = np.zeros((len(prompts), width), np.int32)
    text_pos = np.zeros((len(prompts), 3, width), np.float32)
    vision_pos = []
    for i, p in enumerate(prompts):
        ids[i, :len(p)] = p
        text, vision = _positions(cfg, len(p), grid)
        text_pos[i, :, :len(p)] = text.numpy()
        vision_pos.append(vision.numpy().astype(np.float32))
    noisy = np.zeros((len(prompts), latents.shape[2]), np.float32)
    noisy[:, noisy_frames] = 1.0
    lengths = np.array([len(p) for p in prompts], np.int32)
    return ids, text_pos, lengths, np.concatenate([latents] * len(prompts)), np.stack(vision_pos), noisy


def _ours(loaded, name, prompts, latents, timestep, noisy_frames, dtype=jnp.float32):
    ids, text_pos, lengths, lat, vision_pos, noisy = _batch(name, prompts, latents, noisy_frames)
    return np.asarray(forward(loaded.params, loaded.cfg, ids, text_pos, lengths, jnp.asarray(lat, dtype),
                              np.full((len(prompts),), timestep, np.float32), vision_pos, noisy))


# --------------------------------------------------------------------------------------------
# Parity
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["nano", "edge", "nano-int"])
@pytest.mark.parametrize("conditioned", [False, True])
def test_forward_matches_diffusers(name, conditioned, tmp_path_factory):
    model, _, loaded = _saved(name, tmp_path_factory)
    assert loaded.layout == "diffusers" and loaded.stacks == {}
    # save_pretrained writes the resolved rope_axes_dim as well
    assert loaded.cfg == Cosmos3TransformerConfig(**CONFIGS[name], rope_axes_dim=(4, 2, 2))
    ids, latents = _prompt(7, 3), _latents()
    frames = [1, 2] if conditioned else [0, 1, 2]
    ref = _reference(model, name, ids, latents, TIMESTEPS[1], frames)
    out = _ours(loaded, name, [ids], latents, TIMESTEPS[1], frames)
    assert out.shape == LATENTS
    err = _rel(out, ref)
    print(f"{name} conditioned={conditioned}: fp32 rel err {err:.2e}")
    assert err < 1e-5
    if conditioned:
        assert not out[:, :, 0].any()  # zeros on the conditioning frame, as the reference


def test_bf16_is_close(tmp_path_factory):
    for name in ("nano", "edge"):
        model, folder, _ = _saved(name, tmp_path_factory)
        loaded = load_transformer(folder, dtype=jnp.bfloat16)
        layers = loaded.params["layers"]
        assert layers["self_attn"]["add_q_proj"]["kernel"].dtype == jnp.bfloat16
        assert layers["input_layernorm"]["scale"].dtype == jnp.bfloat16
        assert loaded.params["time_embedder"]["linear_2"]["kernel"].dtype == jnp.float32  # pinned
        ids, latents = _prompt(7, 3), _latents()
        ref = _reference(model, name, ids, latents, TIMESTEPS[0], [1, 2])
        err = _rel(_ours(loaded, name, [ids], latents, TIMESTEPS[0], [1, 2], jnp.bfloat16), ref)
        print(f"{name}: bf16 rel err {err:.2e}")
        assert 1e-5 < err < 1e-2


def test_und_cache_reuse_equals_recompute(tmp_path_factory):
    """One :func:`und_prefill`, then :func:`gen_forward` at several timesteps with new latents, equals the reference's
    full pass (text recomputed) at each step."""
    for name in ("nano", "edge"):
        model, _, loaded = _saved(name, tmp_path_factory)
        ids = _prompt(6, 4)
        text_ids, text_pos, lengths, _, vision_pos, noisy = _batch(name, [ids], _latents(), [1, 2])
        cache = und_prefill(loaded.params, loaded.cfg, text_ids, text_pos, lengths)
        assert cache.k.shape == (2, 1, 6, 2, 16) and cache.v.shape == cache.k.shape
        for step, t in enumerate(TIMESTEPS):
            latents = _latents(10 + step)
            out = gen_forward(loaded.params, loaded.cfg, cache, lengths, latents, np.full((1,), t, np.float32),
                              vision_pos, noisy)
            err = _rel(out, _reference(model, name, ids, latents, t, [1, 2]))
            print(f"{name} step {step}: reuse vs reference rel err {err:.2e}")
            assert err < 1e-5
            recompute = forward(loaded.params, loaded.cfg, text_ids, text_pos, lengths, latents,
                                np.full((1,), t, np.float32), vision_pos, noisy)
            np.testing.assert_array_equal(np.asarray(out), np.asarray(recompute))


def test_cfg_batch_of_padded_prompts_equals_each_alone(tmp_path_factory):
    """A batch of two prompts of different lengths (right-padded to 9) equals each prompt run alone by the reference
    (its own length, its own vision positions)."""
    for name in ("nano", "edge"):
        model, _, loaded = _saved(name, tmp_path_factory)
        prompts = [_prompt(9, 5), _prompt(4, 6)]
        latents = _latents(7)
        out = _ours(loaded, name, prompts, latents, TIMESTEPS[2], [1, 2])
        for i, p in enumerate(prompts):
            err = _rel(out[i:i + 1], _reference(model, name, p, latents, TIMESTEPS[2], [1, 2]))
            print(f"{name} prompt {i} (length {len(p)}): batched rel err {err:.2e}")
            assert err < 1e-5


def test_patchify_follows_the_reference_order():
    """``cthpwq->thwpqc`` with ``H, W`` zero-padded to the patch (restated from ``_patchify_and_pack_latents``), and
    :func:`unpatchify` its inverse (cropped)."""
    x = np.random.default_rng(0).standard_normal((2, 3, 2, 5, 4), dtype=np.float32)
    ref = []
    for lat in x:
        padded = np.zeros((3, 2, 6, 4), np.float32)
        padded[:, :, :5] = lat
        ref.append(np.einsum("cthpwq->thwpqc", padded.reshape(3, 2, 3, 2, 2, 2)).reshape(-1, 12))
    ours = np.asarray(patchify(jnp.asarray(x), 2))
    np.testing.assert_array_equal(ours, np.stack(ref))
    np.testing.assert_array_equal(np.asarray(unpatchify(jnp.asarray(ours), x.shape, 2)), x)


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


def test_config_reads_diffusers_json_and_refuses_bad_values(tmp_path_factory):
    _, folder, loaded = _saved("edge", tmp_path_factory)
    data = json.loads((folder / "config.json").read_text())
    assert Cosmos3TransformerConfig.from_dict(data) == loaded.cfg
    assert Cosmos3TransformerConfig.from_dict(loaded.cfg.to_dict()) == loaded.cfg
    with pytest.raises(ValueError, match="hidden_act='gelu'"):
        Cosmos3TransformerConfig.from_dict(dict(data, hidden_act="gelu"))
    with pytest.raises(ValueError, match="patch_latent_dim=12"):
        Cosmos3TransformerConfig.from_dict(dict(data, patch_latent_dim=12))
    with pytest.raises(ValueError, match="num_hidden_layers"):
        Cosmos3TransformerConfig.from_dict(dict(data, num_hidden_layers=10 ** 9))
    with pytest.raises(ValueError, match="not 'CosmosTransformer3DModel'|for 'CosmosTransformer3DModel'"):
        Cosmos3TransformerConfig.from_dict(dict(data, _class_name="CosmosTransformer3DModel"))
    for release in ("nano", "edge"):
        cfg = Cosmos3TransformerConfig.from_release(release)
        assert cfg.patch_latent_dim == 192 and cfg.mrope_section == (24, 20, 20)


# --------------------------------------------------------------------------------------------
# Key maps
# --------------------------------------------------------------------------------------------

# The converter's renames (diffusers scripts/convert_cosmos3_to_diffusers.py: `_ATTN_KEY_REMAP`, the `model.` prefix
# stripped from the language model's keys, vae2llm / llm2vae / time_embedder.mlp.{0,2}), restated and inverted.
_ATTN_TO_RELEASE = [(".add_q_proj.", ".q_proj_moe_gen."), (".add_k_proj.", ".k_proj_moe_gen."),
                    (".add_v_proj.", ".v_proj_moe_gen."), (".to_add_out.", ".o_proj_moe_gen."),
                    (".norm_added_q.", ".q_norm_moe_gen."), (".norm_added_k.", ".k_norm_moe_gen."),
                    (".to_q.", ".q_proj."), (".to_k.", ".k_proj."), (".to_v.", ".v_proj."), (".to_out.", ".o_proj."),
                    (".norm_q.", ".q_norm."), (".norm_k.", ".k_norm.")]
_TOP_TO_RELEASE = {"proj_in.": "vae2llm.", "proj_out.": "llm2vae.", "time_embedder.linear_1.": "time_embedder.mlp.0.",
                   "time_embedder.linear_2.": "time_embedder.mlp.2."}


def _release_key(key, lm="model.", top=""):
    for ours, theirs in _TOP_TO_RELEASE.items():
        if key.startswith(ours):
            return top + theirs + key[len(ours):]
    if key.startswith("lm_head."):
        return lm[: -len("model.")] + key
    for ours, theirs in _ATTN_TO_RELEASE:
        if ours in key:
            key = key.replace(ours, theirs)
            break
    return lm + key


@pytest.mark.parametrize("prefixes", [("model.", ""), ("net.language_model.model.", "net.")])
def test_release_layout_loads_the_same_parameters(prefixes, tmp_path_factory):
    for name in ("nano", "edge"):
        model, _, loaded = _saved(name, tmp_path_factory)
        state = {_release_key(k, *prefixes): v.contiguous() for k, v in model.state_dict().items()}
        assert "lm_head.weight" in model.state_dict()
        path = tmp_path_factory.mktemp(f"release-{name}") / "model.safetensors"
        save_file(state, str(path))
        release = load_transformer(path, cfg=loaded.cfg)
        assert release.layout == "release"
        ours = dict(flatten(release.params))
        theirs = dict(flatten(loaded.params))
        assert ours.keys() == theirs.keys()
        for k in ours:
            np.testing.assert_array_equal(np.asarray(ours[k]), np.asarray(theirs[k]), err_msg=k)


def test_strict_loading_names_missing_and_unexpected_keys(tmp_path_factory):
    model, folder, loaded = _saved("edge", tmp_path_factory)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    del state["layers.1.self_attn.k_norm_und_for_gen.weight"]
    state["layers.0.self_attn.norm_q.weight"] = torch.ones(16)  # Edge has no text q norm
    state["audio_proj_in.weight"] = torch.ones(64, 4)  # an unused head: ignored by name
    path = tmp_path_factory.mktemp("strict") / "model.safetensors"
    save_file(state, str(path))
    with pytest.raises(CheckpointError) as e:
        load_transformer(path, cfg=loaded.cfg)
    message = str(e.value)
    assert "layers.1.self_attn.k_norm_und_for_gen" in message or "k_norm_und_for_gen" in message
    assert "layers.0.self_attn.norm_q.weight" in message
    assert "audio_proj_in" not in message


@pytest.mark.parametrize("impl", ["chunked", "cpu_flash"])
def test_attention_kernels_take_the_gen_keys_as_lengths(impl, tmp_path_factory):
    """The gen attention's prompt padding is a key length (``N + lengths``): a kernel without a mask input gives the
    reference's result for a right-padded batch (the und prefill's causal bias falls back to ``chunked`` where a
    kernel has no bias input)."""
    from vidax.core.attention import cpu_flash_isa

    if impl == "cpu_flash" and cpu_flash_isa() is None:
        pytest.skip("the native cpu_flash module is not built")
    model, _, loaded = _saved("nano", tmp_path_factory)
    prompts = [_prompt(9, 5), _prompt(4, 6)]
    latents = _latents(7)
    ids, text_pos, lengths, lat, vision_pos, noisy = _batch("nano", prompts, latents, [1, 2])
    cache = und_prefill(loaded.params, loaded.cfg, ids, text_pos, lengths)
    out = np.asarray(gen_forward(loaded.params, loaded.cfg, cache, lengths, lat, np.full((2,), 500.0, np.float32),
                                 vision_pos, noisy, attention_impl=impl))
    for i, p in enumerate(prompts):
        assert _rel(out[i:i + 1], _reference(model, "nano", p, latents, 500.0, [1, 2])) < 1e-5


def test_bad_input_shapes_are_named_before_tracing(tmp_path_factory):
    _, _, loaded = _saved("nano", tmp_path_factory)
    ids, text_pos, lengths, lat, vision_pos, noisy = _batch("nano", [_prompt(5, 1)], _latents(), [1, 2])
    with pytest.raises(ValueError, match=r"position_ids shape \(1, 3, 4\) \(expected \(1, 3, 5\)\)"):
        und_prefill(loaded.params, loaded.cfg, ids, text_pos[:, :, :4], lengths)
    cache = und_prefill(loaded.params, loaded.cfg, ids, text_pos, lengths)
    t = np.full((1,), 10.0, np.float32)
    with pytest.raises(ValueError, match=r"position_ids shape \(1, 3, 26\) \(expected \(1, 3, 27\)"):
        gen_forward(loaded.params, loaded.cfg, cache, lengths, lat, t, vision_pos[:, :, :26], noisy)
    with pytest.raises(ValueError, match=r"noisy shape \(1, 2\)"):
        gen_forward(loaded.params, loaded.cfg, cache, lengths, lat, t, vision_pos, noisy[:, :2])
    with pytest.raises(ValueError, match="latents have 3 channels"):
        gen_forward(loaded.params, loaded.cfg, cache, lengths, lat[:, :3], t, vision_pos, noisy)
