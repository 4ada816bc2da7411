"""Parity of LTX-2's audio-video transformer with diffusers' LTX2VideoTransformer3DModel (tiny configs: the
LTX-2.5 option set, and LTX-2.3 / 2.0 settings), weights written by the reference's save_pretrained and loaded
through our key map; and of the RoPE tables with upstream ltx-core's precompute_freqs_cis (restated below)."""

import math

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers import LTX2VideoTransformer3DModel

from vidax.models.ltx2.config import LTX2TransformerConfig
from vidax.models.ltx2.keymap import load_transformer
from vidax.models.ltx2.transformer import audio_coords, forward, rope_table, video_coords

B, F, H, W, T, L = 2, 2, 3, 2, 5, 4  # batch, latent grid, audio frames, text length
COMMON = dict(in_channels=8, out_channels=8, num_attention_heads=2, attention_head_dim=8, cross_attention_dim=16,
              audio_in_channels=6, audio_out_channels=6, audio_num_attention_heads=2, audio_attention_head_dim=8,
              audio_cross_attention_dim=16, num_layers=2, caption_channels=12, base_height=64, base_width=64)
VARIANTS = {
    # LTX-2.5 as released: gated attention, text cross-attention AdaLN with the sigma-dependent prompt embedders,
    # split RoPE, no video FFN bias, text projected by the connectors, keyframe embedding present.
    "ltx25": dict(gated_attn=True, audio_gated_attn=True, cross_attn_mod=True, audio_cross_attn_mod=True,
                  rope_type="split", ff_bias=False, use_prompt_embeddings=False, use_prompt_adaln_single=True,
                  use_keyframes_abs_pos_embedding=True, perturbed_attn=True),
    # diffusers' KV-cacheable option: static per-block prompt tables (no prompt_adaln), no audio FFN bias.
    "static_prompt": dict(gated_attn=True, audio_gated_attn=False, cross_attn_mod=True, audio_cross_attn_mod=False,
                          rope_type="split", audio_ff_bias=False, use_prompt_embeddings=False,
                          use_prompt_adaln_single=False),
    # LTX-2.0: interleaved RoPE, caption projections, plain 6-row AdaLN.
    "ltx20": dict(rope_type="interleaved"),
}
CROSS_TIMESTEP = {"ltx25": True, "static_prompt": False, "ltx20": False}


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def case(request, tmp_path_factory):
    name = request.param
    torch.manual_seed(0)
    model = LTX2VideoTransformer3DModel(**COMMON, **VARIANTS[name]).eval()
    with torch.no_grad():  # norm scales start at one, keyframe embedding at zero: perturb them so a slip shows
        for pname, p in model.named_parameters():
            if "norm" in pname or "gate" in pname or "keyframes" in pname:
                p.add_(0.3 * torch.randn_like(p))
    path = tmp_path_factory.mktemp(f"ltx2_transformer_{name}")
    model.save_pretrained(path)
    rng = np.random.default_rng(1)
    cfg = model.config
    ctx_w = cfg.caption_channels if cfg.use_prompt_embeddings else None
    inputs = dict(
        hidden_states=rng.standard_normal((B, F * H * W, cfg.in_channels)).astype(np.float32),
        audio_hidden_states=rng.standard_normal((B, T, cfg.audio_in_channels)).astype(np.float32),
        encoder_hidden_states=rng.standard_normal((B, L, ctx_w or cfg.cross_attention_dim)).astype(np.float32),
        audio_encoder_hidden_states=rng.standard_normal(
            (B, L, ctx_w or cfg.audio_cross_attention_dim)).astype(np.float32),
        timestep=np.array([700.0, 250.0], np.float32), audio_timestep=np.array([600.0, 300.0], np.float32),
        sigma=np.array([0.7, 0.25], np.float32), audio_sigma=np.array([0.6, 0.3], np.float32))
    kw = dict(num_frames=F, height=H, width=W, fps=24.0, audio_num_frames=T, use_cross_timestep=CROSS_TIMESTEP[name])
    with torch.no_grad():
        ref = model(**{k: torch.from_numpy(v) for k, v in inputs.items()}, **kw, return_dict=False)
    return name, path, inputs, kw, tuple(r.numpy() for r in ref), model


def test_transformer_fp32_matches_diffusers(case):
    name, path, inputs, kw, (ref_v, ref_a), _ = case
    params, cfg = load_transformer(path)
    out_v, out_a = forward(params, cfg, **inputs, **kw)
    assert out_v.shape == ref_v.shape and out_a.shape == ref_a.shape
    ev, ea = _rel(out_v, ref_v), _rel(out_a, ref_a)
    print(f"{name} fp32 video {ev:.2e} audio {ea:.2e}")
    assert ev < 1e-5 and ea < 1e-5, (ev, ea)


def test_transformer_bf16_with_fp32_tables(case):
    name, path, inputs, kw, (ref_v, ref_a), _ = case
    params, cfg = load_transformer(path, jnp.bfloat16)
    blocks = params["blocks"]
    assert blocks["attn1"]["to_q"]["kernel"].dtype == jnp.bfloat16
    for leaf in (blocks["scale_shift_table"], blocks["video_a2v_cross_attn_scale_shift_table"],
                 params["scale_shift_table"], params["time_embed"]["linear"]["kernel"],
                 blocks["attn1"]["norm_q"]["scale"]):
        assert leaf.dtype == jnp.float32
    out_v, out_a = forward(params, cfg, **inputs, **kw)
    ev, ea = _rel(out_v, ref_v), _rel(out_a, ref_a)
    print(f"{name} bf16 video {ev:.2e} audio {ea:.2e}")
    assert ev < 1e-2 and ea < 1e-2, (ev, ea)


# Upstream ltx-core model/transformer/rope.py, restated (generate_freq_grid_np, generate_freqs with middle indices,
# split_freqs_cis / interleaved_freqs_cis of precompute_freqs_cis).
def _upstream_rope(indices_grid, dim, theta, max_pos, heads, rope_type):
    n_elem = 2 * indices_grid.shape[1]
    pow_indices = np.power(theta, np.linspace(np.log(1) / np.log(theta), np.log(theta) / np.log(theta),
                                              dim // n_elem, dtype=np.float64))
    indices = torch.as_tensor(pow_indices * math.pi / 2, dtype=torch.float32)
    grid = (indices_grid[..., 0] + indices_grid[..., 1]) / 2.0
    frac = torch.stack([grid[:, i] / max_pos[i] for i in range(grid.shape[1])], dim=-1)
    freqs = (indices * (frac.unsqueeze(-1) * 2 - 1)).transpose(-1, -2).flatten(2)
    if rope_type == "split":
        pad = dim // 2 - freqs.shape[-1]
        cos, sin = freqs.cos(), freqs.sin()
        cos = torch.cat([torch.ones_like(cos[:, :, :pad]), cos], -1)
        sin = torch.cat([torch.zeros_like(sin[:, :, :pad]), sin], -1)
        b, t = cos.shape[:2]
        return cos.reshape(b, t, heads, -1).swapaxes(1, 2), sin.reshape(b, t, heads, -1).swapaxes(1, 2)
    cos, sin = freqs.cos().repeat_interleave(2, -1), freqs.sin().repeat_interleave(2, -1)
    pad = dim % n_elem
    cos = torch.cat([torch.ones_like(cos[:, :, :pad]), cos], -1)
    sin = torch.cat([torch.zeros_like(sin[:, :, :pad]), sin], -1)
    return cos, sin


@pytest.mark.parametrize("rope_type", ["split", "interleaved"])
def test_rope_matches_upstream(rope_type):
    cfg = LTX2TransformerConfig(num_attention_heads=4, attention_head_dim=10, audio_num_attention_heads=2,
                                audio_attention_head_dim=8, audio_cross_attention_dim=16, rope_type=rope_type)
    vc, ac = video_coords(cfg, 3, 4, 5, fps=25.0), audio_coords(cfg, 7)
    for coords, max_pos, dim, heads in ((vc, (20, 2048, 2048), cfg.inner_dim, 4), (ac, (20,), 16, 2),
                                        (vc[:1], (20,), 16, 4)):
        cos, sin = rope_table(cfg, coords, max_pos, dim, heads)
        ucos, usin = _upstream_rope(torch.from_numpy(coords)[None], dim, 10000.0, list(max_pos), heads, rope_type)
        if rope_type == "split":
            ucos, usin = ucos[0].swapaxes(0, 1), usin[0].swapaxes(0, 1)
        else:
            ucos, usin = ucos[0], usin[0]
        np.testing.assert_allclose(cos, ucos.numpy(), atol=2e-6)
        np.testing.assert_allclose(sin, usin.numpy(), atol=2e-6)


# diffusers scripts/convert_ltx2_to_diffusers.py LTX_2_0_TRANSFORMER_KEYS_RENAME_DICT (+ adaln_single, prompt_adaln
# handled separately there), inverted, with the release prefix.
_RELEASE_RENAMES = (("av_cross_attn_video_scale_shift", "av_ca_video_scale_shift_adaln_single"),
                    ("av_cross_attn_video_a2v_gate", "av_ca_a2v_gate_adaln_single"),
                    ("av_cross_attn_audio_scale_shift", "av_ca_audio_scale_shift_adaln_single"),
                    ("av_cross_attn_audio_v2a_gate", "av_ca_v2a_gate_adaln_single"),
                    ("video_a2v_cross_attn_scale_shift_table", "scale_shift_table_a2v_ca_video"),
                    ("audio_a2v_cross_attn_scale_shift_table", "scale_shift_table_a2v_ca_audio"),
                    ("prompt_adaln.", "prompt_adaln_single."), ("norm_q", "q_norm"), ("norm_k", "k_norm"))


def _to_release(key):
    for ours, theirs in _RELEASE_RENAMES:
        key = key.replace(ours, theirs)
    for ours, theirs in (("audio_time_embed.", "audio_adaln_single."), ("time_embed.", "adaln_single."),
                         ("audio_proj_in.", "audio_patchify_proj."), ("proj_in.", "patchify_proj.")):
        if key.startswith(ours):
            key = theirs + key[len(ours):]
    return "model.diffusion_model." + key


@pytest.mark.parametrize("case", ["ltx25"], indirect=True)
def test_release_layout(case, tmp_path):
    """The transformer inside a release checkpoint (upstream names, beside connector / VAE tensors) loads to the
    same parameters as the diffusers folder."""
    import jax
    from safetensors.torch import load_file, save_file

    from vidax.checkpoint.loader import load_params
    from vidax.checkpoint.reader import CheckpointReader
    from vidax.models.ltx2.keymap import transformer_release_keymap
    from vidax.models.ltx2.transformer import transformer_specs

    name, path, *_ = case
    state = {_to_release(k): v for k, v in load_file(str(path / "diffusion_pytorch_model.safetensors")).items()}
    state["model.diffusion_model.video_embeddings_connector.learnable_registers"] = torch.zeros(2, 2)
    state["text_embedding_projection.video_aggregate_embed.weight"] = torch.zeros(2, 2)
    state["vae.decoder.conv_in.weight"] = torch.zeros(2)
    save_file(state, str(tmp_path / "release.safetensors"))
    ref, cfg = load_transformer(path)
    ours = load_params(CheckpointReader(tmp_path / "release.safetensors"), transformer_release_keymap(cfg),
                       transformer_specs(cfg))
    flat_ours, flat_ref = jax.tree_util.tree_leaves_with_path(ours), jax.tree_util.tree_leaves_with_path(ref)
    assert [p for p, _ in flat_ours] == [p for p, _ in flat_ref]
    for (_, a), (_, b) in zip(flat_ours, flat_ref):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("case", ["ltx25"], indirect=True)
def test_per_token_timesteps_and_keyframes(case):
    """Per-token video / audio timesteps (image conditioning: the first latent frame clean), the keyframe marker on
    the first latent frame's tokens, padded text masks and explicit per-sample RoPE coordinates, against the
    reference."""
    name, path, inputs, kw, _, model = case
    rng = np.random.default_rng(2)
    inputs = dict(inputs, timestep=(rng.uniform(0, 1000, (B, F * H * W))).astype(np.float32),
                  audio_timestep=(rng.uniform(0, 1000, (B, T))).astype(np.float32))
    inputs["timestep"][:, : H * W] = 0.0
    inputs["encoder_attention_mask"] = np.array([[0, 1, 1, 1], [1, 1, 1, 1]], np.float32)  # left padding
    inputs["audio_encoder_attention_mask"] = np.array([[0, 0, 1, 1], [1, 1, 1, 1]], np.float32)
    keyframes = np.zeros((B, F * H * W, 1), np.float32)
    keyframes[:, : H * W] = 1.0
    # explicit per-sample positions: the second sample's video and audio start half a second later
    cfg0 = LTX2TransformerConfig.from_dict(dict(model.config))
    vc = np.stack([video_coords(cfg0, F, H, W, 24.0)] * B)
    ac = np.stack([audio_coords(cfg0, T)] * B)
    vc[1, 0] += 0.5
    ac[1] += 0.5
    inputs["video_coords"], inputs["audio_coords"] = vc, ac
    kw = {k: v for k, v in kw.items() if k not in ("num_frames", "height", "width", "audio_num_frames")}
    with torch.no_grad():
        ref_v, ref_a = (r.numpy() for r in model(**{k: torch.from_numpy(v) for k, v in inputs.items()}, **kw,
                                                 video_keyframes_mask=torch.from_numpy(keyframes), return_dict=False))
    params, cfg = load_transformer(path)
    out_v, out_a = forward(params, cfg, **inputs, **kw, video_keyframes_mask=keyframes)
    ev, ea = _rel(out_v, ref_v), _rel(out_a, ref_a)
    print(f"{name} per-token fp32 video {ev:.2e} audio {ea:.2e}")
    assert ev < 1e-5 and ea < 1e-5, (ev, ea)


@pytest.mark.parametrize("case", ["ltx25"], indirect=True)
def test_stg_and_isolated_modalities(case):
    """STG on block 1 with a mixed perturbation mask (one sample perturbed, one not) together with
    isolate_modalities and a video self-attention mask (one compilation for the three options)."""
    name, path, inputs, kw, (plain_v, plain_a), model = case
    extra = dict(spatio_temporal_guidance_blocks=[1], isolate_modalities=True)
    pm = np.array([0.0, 1.0], np.float32)
    # IC-LoRA style video self-attention strengths in [0, 1]
    sm = np.random.default_rng(3).choice([0.0, 0.5, 1.0], (B, F * H * W, F * H * W)).astype(np.float32)
    np.fill_diagonal(sm[0], 1.0)
    np.fill_diagonal(sm[1], 1.0)
    with torch.no_grad():
        ref_v, ref_a = (r.numpy() for r in model(**{k: torch.from_numpy(v) for k, v in inputs.items()}, **kw,
                                                 **extra, perturbation_mask=torch.from_numpy(pm),
                                                 video_self_attention_mask=torch.from_numpy(sm), return_dict=False))
    assert _rel(ref_v, plain_v) > 1e-3 and _rel(ref_a, plain_a) > 1e-3  # the options change the reference
    params, cfg = load_transformer(path)
    out_v, out_a = forward(params, cfg, **inputs, **kw, **extra, perturbation_mask=pm, video_self_attention_mask=sm)
    ev, ea = _rel(out_v, ref_v), _rel(out_a, ref_a)
    print(f"{name} stg + isolated + self mask fp32 video {ev:.2e} audio {ea:.2e}")
    assert ev < 1e-5 and ea < 1e-5, (ev, ea)


def test_bad_shapes_raise():
    cfg = LTX2TransformerConfig(**COMMON)
    x, a = np.zeros((1, 12, 8), np.float32), np.zeros((1, 5, 6), np.float32)
    ctx = actx = np.zeros((1, 4, 12), np.float32)  # caption_channels: LTX-2.0 caption projections
    with pytest.raises(ValueError, match="over"):
        forward({}, cfg, x, a, ctx, actx, 1.0, num_frames=1 << 12, height=1 << 12, width=1 << 12, audio_num_frames=5)
    with pytest.raises(ValueError, match="hidden_states"):
        forward({}, cfg, x, a, ctx, actx, 1.0, num_frames=2, height=2, width=2, audio_num_frames=5)
    with pytest.raises(ValueError, match="timestep"):
        forward({}, cfg, x, a, ctx, actx, np.ones((1, 7)), num_frames=2, height=3, width=2, audio_num_frames=5)
