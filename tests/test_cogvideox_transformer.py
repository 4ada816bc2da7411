"""Parity of the CogVideoX transformer with diffusers ``CogVideoXTransformer3DModel`` (fp32 and bf16).

Tiny configurations of each released variant: 2B (fixed 3D sin-cos positions), 5B (3D RoPE,
``linspace`` grid over a crop), 5B-I2V (RoPE + learned table), 1.5 (``patch_size_t=2``, RoPE
``slice`` grid, no patch-conv bias) and 1.5-I2V (``ofs`` embedding). Weights go through
``save_pretrained`` and our strict loader.
"""

import json

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers import CogVideoXTransformer3DModel
from diffusers.models.embeddings import get_3d_rotary_pos_embed, get_3d_sincos_pos_embed
from diffusers.pipelines.cogvideo.pipeline_cogvideox import get_resize_crop_region_for_grid

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.loader import load_params
from vidax.checkpoint.safetensors_io import CheckpointReader
from vidax.models.cogvideox.config import CogVideoXTransformerConfig
from vidax.models.cogvideox.keymap import transformer_keymap
from vidax.models.cogvideox.transformer import (
    forward,
    position_tables,
    resize_crop_region,
    rope_angles,
    sincos_pos_embed,
    transformer_specs,
)

TEXT = 7  # max_text_seq_length of the tiny models


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def _base(**kw):
    cfg = dict(
        num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=4, time_embed_dim=24,
        text_embed_dim=20, num_layers=2, sample_width=8, sample_height=6, sample_frames=9, patch_size=2,
        max_text_seq_length=TEXT,
    )
    cfg.update(kw)
    return cfg


VARIANTS = {
    "2b": (_base(), (2, 3, 4, 4, 6)),
    "5b": (_base(use_rotary_positional_embeddings=True), (2, 3, 4, 4, 6)),
    "5b_i2v": (_base(use_rotary_positional_embeddings=True, use_learned_positional_embeddings=True, in_channels=8),
               (1, 3, 8, 6, 8)),
    "1.5": (_base(use_rotary_positional_embeddings=True, patch_size_t=2, patch_bias=False, sample_width=10,
                  sample_height=8, sample_frames=17), (2, 4, 4, 4, 6)),
    "1.5_i2v": (_base(use_rotary_positional_embeddings=True, patch_size_t=2, patch_bias=False, sample_width=10,
                      sample_height=8, sample_frames=17, ofs_embed_dim=24, in_channels=8), (1, 2, 8, 8, 10)),
}


@pytest.fixture(scope="module", params=list(VARIANTS), ids=list(VARIANTS))
def saved(request, tmp_path_factory):
    kwargs, shape = VARIANTS[request.param]
    torch.manual_seed(0)
    model = CogVideoXTransformer3DModel(**kwargs).eval()
    with torch.no_grad():
        # Norm weights start at 1 and biases at 0: randomise them so a wrong mapping shows.
        for name, prm in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                prm.add_(0.1 * torch.randn_like(prm))
        if kwargs.get("use_learned_positional_embeddings"):
            model.patch_embed.pos_embedding.add_(0.1 * torch.randn_like(model.patch_embed.pos_embedding))
    path = tmp_path_factory.mktemp(f"cogvideox_{request.param}")
    model.save_pretrained(path)
    cfg = CogVideoXTransformerConfig.from_dict(json.loads((path / "config.json").read_text()))
    return request.param, model, cfg, path, shape


def _reference_rope(model, cfg, shape):
    """The pipeline's ``_prepare_rotary_positional_embeddings`` for latents of ``shape``."""
    c = model.config
    _, f, _, h, w = shape
    p, pt = c.patch_size, c.patch_size_t
    gh, gw = h // p, w // p
    if pt is None:
        crops = get_resize_crop_region_for_grid((gh, gw), c.sample_width // p, c.sample_height // p)
        return get_3d_rotary_pos_embed(c.attention_head_dim, crops, (gh, gw), f)
    return get_3d_rotary_pos_embed(c.attention_head_dim, None, (gh, gw), (f + pt - 1) // pt, grid_type="slice",
                                   max_size=(c.sample_height // p, c.sample_width // p))


def _run_both(model, cfg, path, shape, dtype, seed=1, ofs=2.0):
    rng = np.random.default_rng(seed)
    latents = rng.standard_normal(shape, dtype=np.float32)
    timestep = np.array([937, 312][: shape[0]], np.int64)
    context = rng.standard_normal((shape[0], TEXT, cfg.text_embed_dim), dtype=np.float32)
    rope = _reference_rope(model, cfg, shape) if cfg.use_rotary_positional_embeddings else None
    kw = {"ofs": torch.full((1,), ofs)} if cfg.ofs_embed_dim else {}
    with torch.no_grad():
        ref = model(torch.from_numpy(latents), torch.from_numpy(context), torch.from_numpy(timestep),
                    image_rotary_emb=rope, return_dict=False, **kw)[0].numpy()
    params = load_params(CheckpointReader(path), transformer_keymap(cfg), transformer_specs(cfg), dtype)
    out = forward(params, jnp.asarray(latents), jnp.asarray(timestep), jnp.asarray(context),
                  position_tables(cfg, shape), jnp.full((1,), ofs) if cfg.ofs_embed_dim else None, cfg=cfg)
    return np.asarray(out), ref


def test_transformer_matches_diffusers_fp32(saved):
    name, model, cfg, path, shape = saved
    out, ref = _run_both(model, cfg, path, shape, jnp.float32)
    assert out.shape == ref.shape == shape[:2] + (cfg.out_channels,) + shape[3:]
    assert _rel(out, ref) < 1e-5
    if name == "5b_i2v":
        # At another frame count the reference replaces the learned table by sin-cos; so do we.
        other = (1, 2, *shape[2:])
        assert position_tables(cfg, other).pos_embed is not None
        out, ref = _run_both(model, cfg, path, other, jnp.float32)
        assert _rel(out, ref) < 1e-5


def test_transformer_bf16_close_to_fp32_reference(saved):
    _, model, cfg, path, shape = saved
    out, ref = _run_both(model, cfg, path, shape, jnp.bfloat16)
    assert _rel(out, ref) < 1e-2


def test_adaln_embedders_and_norms_stay_fp32_in_bf16(saved):
    _, _, cfg, path, _ = saved
    p = load_params(CheckpointReader(path), transformer_keymap(cfg), transformer_specs(cfg), jnp.bfloat16)
    assert p["blocks"]["norm1"]["linear"]["kernel"].dtype == jnp.float32
    assert p["blocks"]["norm2"]["norm"]["scale"].dtype == jnp.float32
    assert p["blocks"]["attn1"]["norm_q"]["bias"].dtype == jnp.float32
    assert p["norm_out"]["linear"]["kernel"].dtype == jnp.float32
    assert p["time_embedding"]["linear_1"]["kernel"].dtype == jnp.float32
    assert p["patch_embed"]["proj"]["kernel"].dtype == jnp.float32
    assert p["blocks"]["attn1"]["to_q"]["kernel"].dtype == jnp.bfloat16
    assert p["blocks"]["ff"]["up"]["kernel"].dtype == jnp.bfloat16


@pytest.mark.parametrize("grid, base", [((2, 3), (3, 4)), ((3, 2), (3, 4)), ((30, 45), (30, 45)), ((48, 85), (30, 45)),
                                        ((5, 7), (6, 9))])
def test_crop_region_matches_reference(grid, base):
    assert resize_crop_region(grid, base[1], base[0]) == get_resize_crop_region_for_grid(grid, base[1], base[0])


@pytest.mark.parametrize("v15", [False, True])
@pytest.mark.parametrize("shape", [(1, 13, 16, 60, 90), (1, 7, 16, 48, 80), (1, 2, 16, 16, 22)], ids=str)
def test_rope_tables_match_reference_at_real_sizes(v15, shape):
    """Our float32 host emulation of the reference's RoPE tables, at CogVideoX head and grid sizes."""
    cfg = CogVideoXTransformerConfig(num_attention_heads=2, attention_head_dim=64, use_rotary_positional_embeddings=True,
                                     patch_size_t=2 if v15 else None, sample_height=96 if v15 else 60,
                                     sample_width=170 if v15 else 90)
    if v15 and shape[1] % 2:
        shape = (shape[0], shape[1] + 1, *shape[2:])
    cos_ref, sin_ref = _reference_rope(_Cfg(cfg), cfg, shape)
    pos = position_tables(cfg, shape)
    np.testing.assert_allclose(np.repeat(pos.cos, 2, axis=1), cos_ref.numpy(), atol=2e-6)
    np.testing.assert_allclose(np.repeat(pos.sin, 2, axis=1), sin_ref.numpy(), atol=2e-6)


class _Cfg:
    def __init__(self, cfg):
        self.config = cfg


def test_sincos_table_matches_reference():
    cfg = CogVideoXTransformerConfig(num_attention_heads=30, attention_head_dim=64)
    ref = get_3d_sincos_pos_embed(cfg.dim, (45, 30), 13, 1.875, 1.0).flatten(0, 1).numpy()
    ours = sincos_pos_embed(cfg, (13, 30, 45))
    # The 5B table has 34M entries: one max, not assert_allclose's several float64 temporaries of 270 MB each.
    # No rtol term: at least as strict as assert_allclose(atol=1e-6), and NaN fails.
    assert ours.shape == ref.shape == (13 * 30 * 45, 1920)
    assert np.abs(ours - ref).max() <= 1e-6


def test_v15_grid_beyond_training_size_is_refused():
    cfg = CogVideoXTransformerConfig(attention_head_dim=64, use_rotary_positional_embeddings=True, patch_size_t=2,
                                     sample_height=96, sample_width=170)
    with pytest.raises(ValueError, match="exceeds the training grid 48x85"):
        rope_angles(cfg, (2, 50, 10))


def test_strict_loading_names_missing_extra_and_mismatched(tmp_path):
    from safetensors.numpy import load_file, save_file

    torch.manual_seed(0)
    CogVideoXTransformer3DModel(**_base(use_rotary_positional_embeddings=True)).save_pretrained(tmp_path / "ok")
    cfg = CogVideoXTransformerConfig.from_dict(json.loads((tmp_path / "ok" / "config.json").read_text()))
    path = tmp_path / "ok"
    sd = load_file(str(path / "diffusion_pytorch_model.safetensors"))
    del sd["transformer_blocks.1.attn1.norm_k.bias"]
    sd["transformer_blocks.0.attn1.to_bogus.weight"] = np.zeros((2, 2), np.float32)
    sd["proj_out.weight"] = np.zeros((3, cfg.dim), np.float32)
    (tmp_path / "bad").mkdir()
    save_file(sd, str(tmp_path / "bad" / "diffusion_pytorch_model.safetensors"))
    with pytest.raises(CheckpointError) as e:
        load_params(CheckpointReader(tmp_path / "bad"), transformer_keymap(cfg), transformer_specs(cfg), source="bad")
    msg = str(e.value)
    assert "missing keys (1)" in msg and "transformer_blocks.1.attn1.norm_k.bias" in msg
    assert "unexpected keys (1)" in msg and "transformer_blocks.0.attn1.to_bogus.weight" in msg
    assert "shape mismatches (1)" in msg and "proj_out.weight" in msg


@pytest.mark.parametrize("kwargs", [
    dict(num_attention_heads=48, num_layers=42, use_rotary_positional_embeddings=True),  # 5B
    dict(),  # 2B
    dict(num_attention_heads=48, num_layers=42, use_rotary_positional_embeddings=True, patch_size_t=2, patch_bias=False,
         sample_height=96, sample_width=170, sample_frames=81, ofs_embed_dim=512, in_channels=32),  # 1.5 I2V
], ids=["5b", "2b", "1.5-i2v"])
def test_full_size_layouts_are_covered_exactly(kwargs):
    """The real architectures (built on the meta device: shapes only) fill every slot exactly once."""
    from vidax.checkpoint.loader import plan_load

    with torch.device("meta"):
        model = CogVideoXTransformer3DModel(**kwargs)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}

    class ShapeReader:
        def keys(self):
            return list(shapes)

        def shape(self, key):
            return shapes[key]

    cfg = CogVideoXTransformerConfig.from_dict(dict(model.config))
    plan = plan_load(ShapeReader(), transformer_keymap(cfg), transformer_specs(cfg))
    assert sum(len(v) for v in plan.values()) == len(shapes)


def test_config_validation():
    with pytest.raises(ValueError, match="use_learned_positional_embeddings"):
        CogVideoXTransformerConfig(use_learned_positional_embeddings=True)
    with pytest.raises(ValueError, match="activation_fn"):
        CogVideoXTransformerConfig.from_dict({"activation_fn": "gelu"})
    with pytest.raises(ValueError, match="WanTransformer3DModel"):
        CogVideoXTransformerConfig.from_dict({"_class_name": "WanTransformer3DModel"})
