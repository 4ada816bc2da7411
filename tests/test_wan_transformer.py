"""Parity of the Wan2.1 transformer with diffusers ``WanTransformer3DModel`` (fp32 and bf16)."""

import json

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers import WanTransformer3DModel

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.loader import load_params
from vidax.checkpoint.safetensors_io import CheckpointReader
from vidax.models.wan.config import WanTransformerConfig
from vidax.models.wan.keymap import transformer_keymap_diffusers
from vidax.models.wan.transformer import forward, rope_tables, transformer_specs


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def _tiny(head_dim):
    return dict(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=head_dim, in_channels=4, out_channels=4,
        text_dim=24, freq_dim=32, ffn_dim=96, num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
        eps=1e-6, rope_max_seq_len=64,
    )


@pytest.fixture(scope="module", params=[64, 128], ids=["head_dim64", "head_dim128"])
def saved(request, tmp_path_factory):
    torch.manual_seed(0)
    model = WanTransformer3DModel(**_tiny(request.param)).eval()
    # Random values for leaves the constructor leaves at 1/0, so they are tested too.
    with torch.no_grad():
        for name, prm in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                prm.add_(0.1 * torch.randn_like(prm))
    path = tmp_path_factory.mktemp("wan_transformer")
    model.save_pretrained(path)
    cfg = WanTransformerConfig.from_dict(json.loads((path / "config.json").read_text()))
    return model, cfg, path


def _run_both(model, cfg, path, shape, dtype, seed=1):
    rng = np.random.default_rng(seed)
    latents = rng.standard_normal(shape, dtype=np.float32)
    timestep = np.array([937.0, 312.5][: shape[0]], np.float32)
    context = rng.standard_normal((shape[0], 7, cfg.text_dim), dtype=np.float32)
    with torch.no_grad():
        ref = model(torch.from_numpy(latents), torch.from_numpy(timestep), torch.from_numpy(context), return_dict=False)[0].numpy()
    params = load_params(CheckpointReader(path), transformer_keymap_diffusers(cfg), transformer_specs(cfg), dtype)
    cos, sin = rope_tables(cfg, latents.shape)
    out = forward(params, jnp.asarray(latents), jnp.asarray(timestep), jnp.asarray(context), cos, sin, cfg=cfg)
    return np.asarray(out), ref


@pytest.mark.parametrize("shape", [(1, 4, 1, 4, 4), (2, 4, 3, 4, 6), (1, 4, 5, 6, 2)], ids=str)
def test_transformer_matches_diffusers_fp32(saved, shape):
    model, cfg, path = saved
    out, ref = _run_both(model, cfg, path, shape, jnp.float32)
    assert out.shape == ref.shape
    assert _rel(out, ref) < 1e-5


def test_transformer_bf16_close_to_fp32_reference(saved):
    model, cfg, path = saved
    out, ref = _run_both(model, cfg, path, (2, 4, 3, 4, 6), jnp.bfloat16)
    assert _rel(out, ref) < 1e-2


def test_adaln_tables_and_norms_stay_fp32_in_bf16(saved):
    _, cfg, path = saved
    params = load_params(CheckpointReader(path), transformer_keymap_diffusers(cfg), transformer_specs(cfg), jnp.bfloat16)
    assert params["scale_shift_table"].dtype == jnp.float32
    assert params["blocks"]["scale_shift_table"].dtype == jnp.float32
    assert params["blocks"]["attn1"]["norm_q"]["scale"].dtype == jnp.float32
    assert params["condition_embedder"]["time_embedder"]["linear_1"]["kernel"].dtype == jnp.float32
    assert params["blocks"]["attn1"]["to_q"]["kernel"].dtype == jnp.bfloat16


def test_bf16_dtype_policy_against_diffusers(saved):
    """Per tensor, against diffusers' ``from_pretrained(torch_dtype=bfloat16)`` of the same folder: every
    tensor diffusers keeps in fp32 is fp32 here too (never less precise than the reference), and the large
    matmuls diffusers runs in bf16 (blocks, text embedder) run in bf16 here as well. Our extra fp32 pins
    (QK / cross-attention norms, time_proj, output table) are listed."""
    from vidax.core.params import flatten

    _, cfg, path = saved
    ref = WanTransformer3DModel.from_pretrained(path, torch_dtype=torch.bfloat16)
    ours = dict(flatten(load_params(CheckpointReader(path), transformer_keymap_diffusers(cfg), transformer_specs(cfg),
                                    jnp.bfloat16)))
    keymap = transformer_keymap_diffusers(cfg)
    extra_fp32 = ("norm_q", "norm_k", "norm2", "time_proj", "scale_shift_table")
    for key, tensor in ref.state_dict().items():
        rule, _ = keymap.match(key)
        mine = ours[rule.path].dtype
        if tensor.dtype == torch.float32:
            assert mine == jnp.float32, f"{key}: diffusers keeps fp32, vidax has {mine}"
        elif not any(part in rule.path for part in extra_fp32):
            assert mine == jnp.bfloat16, f"{key}: diffusers runs bf16, vidax has {mine} ({rule.path})"
    assert ours["condition_embedder/text_embedder/linear_1/kernel"].dtype == jnp.bfloat16


def test_strict_loading_names_missing_extra_and_mismatched(saved, tmp_path):
    from safetensors.numpy import load_file, save_file

    _, cfg, path = saved
    sd = load_file(str(path / "diffusion_pytorch_model.safetensors"))
    del sd["blocks.1.attn2.to_k.bias"]
    sd["blocks.0.attn1.to_bogus.weight"] = np.zeros((2, 2), np.float32)
    sd["proj_out.weight"] = np.zeros((3, cfg.dim), np.float32)
    save_file(sd, str(tmp_path / "diffusion_pytorch_model.safetensors"))
    with pytest.raises(CheckpointError) as e:
        load_params(CheckpointReader(tmp_path), transformer_keymap_diffusers(cfg), transformer_specs(cfg), source=str(tmp_path))
    msg = str(e.value)
    assert "missing keys (1)" in msg and "blocks.1.attn2.to_k.bias" in msg
    assert "unexpected keys (1)" in msg and "blocks.0.attn1.to_bogus.weight" in msg
    assert "shape mismatches (1)" in msg and "proj_out.weight" in msg
