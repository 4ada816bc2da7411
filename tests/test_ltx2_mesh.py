"""Tensor and sequence parallelism and block offloading of LTX-2's audio-video transformer on 8 simulated CPU devices
(tests/conftest.py sets ``--xla_force_host_platform_device_count=8``).

Float32, an LTX-2.5-like tiny configuration (gated attention, cross-attention AdaLN with the sigma prompt embedders,
split RoPE, keyframe embedding, STG) with 4 video and 4 audio heads and 3 blocks (chunks of 2 pad the last chunk
with a zero block), weights written in diffusers' layout and loaded through our key map (already sharded / chunked
where the case says so). 18 video tokens (2 x 3 x 3) and 5 audio frames: sp 2 pads the audio stream, sp 4 both
streams; tp 2 x sp 4 leaves 2 heads per tensor shard for 4 sequence shards, so every split-token attention
all-gathers keys and values instead of Ulysses' all_to_all. Case "stg": text masks with padding, STG on block 1 with
a per-sample perturbation mask, keyframes; case "iso": ``isolate_modalities`` with per-token timesteps; case "stg1":
its first sample alone on dp 2 (the batch padded by repeating the sample). The reference
of every run is the same transformer on one device (itself at diffusers parity: tests/test_ltx2_transformer.py).
"""

import dataclasses

import jax
import numpy as np
import pytest

from vidax.checkpoint.writer import save_component, to_state_dict
from vidax.core.params import random_params
from vidax.core.sharding import make_mesh
from vidax.models.ltx2 import block_loop
from vidax.models.ltx2.config import LTX2TransformerConfig
from vidax.models.ltx2.keymap import load_transformer, transformer_keymap
from vidax.models.ltx2.sharding import check_parallel, param_shardings
from vidax.models.ltx2.transformer import _forward, forward, transformer_specs

CFG = LTX2TransformerConfig(
    in_channels=8, out_channels=8, num_attention_heads=4, attention_head_dim=8, cross_attention_dim=32,
    audio_in_channels=6, audio_out_channels=6, audio_num_attention_heads=4, audio_attention_head_dim=4,
    audio_cross_attention_dim=16, num_layers=3, caption_channels=12, base_height=64, base_width=64, gated_attn=True,
    audio_gated_attn=True, cross_attn_mod=True, audio_cross_attn_mod=True, rope_type="split", ff_bias=False,
    use_prompt_embeddings=False, use_prompt_adaln_single=True, use_keyframes_abs_pos_embedding=True,
    perturbed_attn=True)
B, F, H, W, T, L = 2, 2, 3, 3, 5, 4
S = F * H * W


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def _mesh(dp, tp, sp):
    return make_mesh(dp, tp, sp, devices=jax.devices()[: dp * tp * sp])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    params = random_params(transformer_specs(CFG), seed=0, scale=0.3)
    rng = np.random.default_rng(1)

    def perturb(path, a):  # norm scales start near one, biases non-zero: a slip (bias added tp times) shows
        key = path[-1].key
        if key == "bias":
            return a + 0.3 * rng.standard_normal(a.shape, dtype=np.float32)
        return a + 1.0 if key == "scale" else a

    params = jax.tree_util.tree_map_with_path(perturb, params)
    path = tmp_path_factory.mktemp("ltx2-mesh")
    save_component(path, "diffusion_pytorch_model.safetensors",
                   to_state_dict(params, transformer_keymap(CFG), transformer_specs(CFG)), dataclasses.asdict(CFG))
    return path


def _inputs(case):
    if case == "stg1":  # the first sample alone: a batch dp 2 does not divide (padded by repeating it)
        kw = _inputs("stg")
        return {k: (v[:1] if isinstance(v, np.ndarray) and v.shape[:1] == (B,) else v) for k, v in kw.items()}
    rng = np.random.default_rng(2)
    f32 = np.float32
    kw = dict(hidden_states=rng.standard_normal((B, S, 8)).astype(f32),
              audio_hidden_states=rng.standard_normal((B, T, 6)).astype(f32),
              encoder_hidden_states=rng.standard_normal((B, L, 32)).astype(f32),
              audio_encoder_hidden_states=rng.standard_normal((B, L, 16)).astype(f32),
              num_frames=F, height=H, width=W, audio_num_frames=T, fps=24.0, use_cross_timestep=True)
    if case == "stg":
        kw.update(timestep=np.array([700.0, 250.0], f32), audio_timestep=np.array([600.0, 300.0], f32),
                  sigma=np.array([0.7, 0.25], f32), audio_sigma=np.array([0.6, 0.3], f32),
                  encoder_attention_mask=np.array([[1, 1, 1, 0], [1, 1, 0, 0]], f32),
                  audio_encoder_attention_mask=np.array([[1, 1, 1, 1], [1, 0, 0, 0]], f32),
                  spatio_temporal_guidance_blocks=[1], perturbation_mask=np.array([0.0, 1.0], f32),
                  video_keyframes_mask=(np.arange(S)[None, :, None] < 9).repeat(B, 0).astype(f32))
    else:
        kw.update(timestep=rng.uniform(0, 1000, (B, S)).astype(f32), audio_timestep=rng.uniform(0, 1000, (B, T))
                  .astype(f32), sigma=np.array([0.5, 0.9], f32), isolate_modalities=True, use_cross_timestep=False)
    return kw


@pytest.fixture(scope="module")
def reference(folder):
    params, cfg = load_transformer(folder)
    return {case: forward(params, cfg, **_inputs(case)) for case in ("stg", "iso", "stg1")}


def _check(out, ref, what):
    ev, ea = _rel(out[0], ref[0]), _rel(out[1], ref[1])
    print(f"{what}: video {ev:.2e} audio {ea:.2e}")
    assert out[0].shape == ref[0].shape and out[1].shape == ref[1].shape
    assert ev < 1e-5 and ea < 1e-5, (what, ev, ea)


# (dp, tp, sp, offload_chunk, cases); the sharded / chunked load path on two of them
CASES = {"tp2": (1, 2, 1, None, ("stg",)), "sp2": (1, 1, 2, None, ("stg",)),
         "dp2tp2sp2": (2, 2, 2, None, ("stg", "iso", "stg1")), "tp2sp4_gather": (1, 2, 4, None, ("iso",)),
         "offload1": (1, 1, 1, 1, ("stg",)), "offload2_padded_dp2tp2sp2": (2, 2, 2, 2, ("iso", "stg"))}


@pytest.mark.parametrize("name", sorted(CASES))
def test_mesh_and_offload_match_one_device(folder, reference, name):
    dp, tp, sp, chunk, cases = CASES[name]
    mesh = None if dp * tp * sp == 1 else _mesh(dp, tp, sp)
    if name in ("dp2tp2sp2", "offload2_padded_dp2tp2sp2"):  # loaded already placed (sharded, chunked)
        params, cfg = load_transformer(folder, shardings=param_shardings(CFG, mesh, chunk))
    else:
        params, cfg = load_transformer(folder)
    fwd = block_loop.make_forward(params, cfg, mesh=mesh, offload_chunk=chunk)
    assert fwd is not _forward
    if chunk:
        assert fwd.loop_name == "offload" and fwd.stack.plan.padded_layers == (3 if chunk == 1 else 4)
        assert "blocks" not in fwd.params
    if mesh is not None:
        leaf = (fwd.params["blocks"] if fwd.stack is None else fwd.stack.device_shardings)["attn1"]["to_q"]["kernel"]
        spec = leaf.sharding.spec if hasattr(leaf, "sharding") else leaf.spec
        assert tuple(spec)[:3] == (None, None, "tensor")
    for case in cases:
        out = forward(fwd.params, cfg, **_inputs(case), program=fwd)
        _check(out, reference[case], f"{name} {case}")


def test_plain_program_and_bad_meshes():
    assert block_loop.make_forward({}, CFG) is _forward
    with pytest.raises(ValueError, match="tp=8 does not divide the 4 video attention heads"):
        check_parallel(CFG, _mesh(1, 8, 1))
    with pytest.raises(ValueError, match="dp=2 does not divide the transformer batch of 3"):
        check_parallel(CFG, _mesh(2, 1, 1), batch=3)
    with pytest.raises(ValueError, match="offload_chunk must be an integer between 1 and the 3 blocks"):
        block_loop.plans_for(CFG, 0)
    with pytest.raises(ValueError, match="offload_chunk must be an integer between 1 and the 3 blocks"):
        block_loop.plans_for(CFG, 4)
