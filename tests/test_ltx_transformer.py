"""Parity of the LTX-Video transformer with diffusers ``LTXVideoTransformer3DModel`` (fp32, bf16, meshes).

The weights are written by diffusers' ``save_pretrained`` and loaded through vidax's loader and key map.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers import LTXVideoTransformer3DModel
from diffusers.models.transformers.transformer_ltx import LTXVideoRotaryPosEmbed

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.loader import load_params
from vidax.checkpoint.safetensors_io import CheckpointReader
from vidax.core.sharding import make_mesh
from vidax.models.ltx import transformer as lt
from vidax.models.ltx.config import LTXVideoTransformerConfig
from vidax.models.ltx.keymap import transformer_keymap
from vidax.models.ltx.sharding import LTX_RULES, check_parallel

# The LTXPipeline's RoPE scale at 25 fps: (8 / 25, 32, 32).
SCALE = (8 / 25, 32, 32)


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


# dim 16: dim % 6 = 4, so the first 2 feature pairs are not rotated (the reference's padding); dim 48 with
# affine block norms: 8 frequencies per axis.
TINY = {
    "dim16": dict(in_channels=8, out_channels=8, num_attention_heads=2, attention_head_dim=8, cross_attention_dim=16,
                  num_layers=2, caption_channels=12),
    "dim48_affine": dict(in_channels=6, out_channels=10, num_attention_heads=4, attention_head_dim=12,
                         cross_attention_dim=48, num_layers=3, caption_channels=20, norm_elementwise_affine=True),
}


@pytest.fixture(scope="module", params=sorted(TINY))
def saved(request, tmp_path_factory):
    torch.manual_seed(0)
    model = LTXVideoTransformer3DModel(**TINY[request.param]).eval()
    with torch.no_grad():  # norm scales start at 1, biases at 0: randomise them so a wrong mapping shows
        for name, prm in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                prm.add_(0.2 * torch.randn_like(prm))
    path = tmp_path_factory.mktemp("ltx_transformer")
    model.save_pretrained(path)
    cfg = LTXVideoTransformerConfig.from_dict(json.loads((path / "config.json").read_text()))
    return model, cfg, path


def _load(cfg, path, dtype=jnp.float32, **kw):
    return load_params(CheckpointReader(path), transformer_keymap(cfg), lt.transformer_specs(cfg), dtype, **kw)


def _inputs(cfg, grid, batch=2, text=7, lengths=(7, 4), per_token=False, seed=1):
    rng = np.random.default_rng(seed)
    s = int(np.prod(grid))
    hidden = rng.standard_normal((batch, s, cfg.in_channels), dtype=np.float32)
    if per_token:
        timestep = rng.uniform(0, 1000, (batch, s)).astype(np.float32)
        timestep[:, : s // 3] = 0.0  # conditioning tokens at t = 0
    else:
        timestep = np.array([937.0, 312.5, 20.0][:batch], np.float32)
    context = rng.standard_normal((batch, text, cfg.caption_channels), dtype=np.float32)
    mask = (np.arange(text)[None, :] < np.asarray(lengths[:batch])[:, None]).astype(np.float32)
    return hidden, timestep, context, mask


def _reference(model, grid, hidden, timestep, context, mask, coords=None):
    f, h, w = grid
    with torch.no_grad():
        kw = dict(video_coords=torch.from_numpy(coords)) if coords is not None else dict(
            num_frames=f, height=h, width=w, rope_interpolation_scale=SCALE)
        return model(torch.from_numpy(hidden), torch.from_numpy(context), torch.from_numpy(timestep),
                     torch.from_numpy(mask), return_dict=False, **kw)[0].numpy()


def _ours(params, cfg, grid, hidden, timestep, context, mask, coords=None, **kw):
    c = lt.grid_coords(cfg, grid, SCALE) if coords is None else coords
    cos, sin = lt.rope_tables(cfg, c)
    lengths = jnp.asarray(mask.sum(1).astype(np.int32))
    return np.asarray(lt.forward(params, jnp.asarray(hidden), jnp.asarray(timestep), jnp.asarray(context), lengths,
                                 cos, sin, cfg=cfg, **kw))


@pytest.mark.parametrize("grid", [(1, 2, 3), (3, 4, 2), (2, 5, 5)], ids=str)
def test_forward_matches_diffusers_fp32(saved, grid):
    model, cfg, path = saved
    inputs = _inputs(cfg, grid)
    ref = _reference(model, grid, *inputs)
    out = _ours(_load(cfg, path), cfg, grid, *inputs)
    assert out.shape == ref.shape == (2, int(np.prod(grid)), cfg.out_channels)
    assert _rel(out, ref) < 1e-5


def test_per_token_timesteps_and_condition_coordinates(saved):
    """``LTXConditionPipeline``'s inputs: per-token timesteps and pixel coordinates (``video_coords``)."""
    model, cfg, path = saved
    grid = (3, 2, 4)
    inputs = _inputs(cfg, grid, per_token=True)
    f, h, w = np.meshgrid(*(np.arange(n) for n in grid), indexing="ij")
    pixel = np.stack([np.maximum(f * 8 + 1 - 8, 0), h * 32, w * 32], axis=-1).reshape(-1, 3).astype(np.float32)
    ref_coords = np.repeat(pixel.T[None].copy(), 2, axis=0)  # (B, 3, S), frames already divided by the frame rate
    ref_coords[:, 0] = ref_coords[:, 0] * (1.0 / 24)
    ref = _reference(model, grid, *inputs, coords=ref_coords)
    out = _ours(_load(cfg, path), cfg, grid, *inputs, coords=lt.video_coords(pixel, 24))
    assert _rel(out, ref) < 1e-5


def test_padded_text_is_masked(saved):
    """The reference adds -10000 to padded text keys; changing padded text rows must not change the output."""
    model, cfg, path = saved
    grid = (2, 2, 2)
    hidden, timestep, context, mask = _inputs(cfg, grid, lengths=(3, 5))
    params = _load(cfg, path)
    out = _ours(params, cfg, grid, hidden, timestep, context, mask)
    noisy = context.copy()
    noisy[0, 3:] = 100.0
    noisy[1, 5:] = -7.0
    assert np.array_equal(out, _ours(params, cfg, grid, hidden, timestep, noisy, mask))
    assert _rel(out, _reference(model, grid, hidden, timestep, noisy, mask)) < 1e-5


def test_bf16_close_to_fp32_reference(saved):
    model, cfg, path = saved
    grid = (3, 4, 2)
    inputs = _inputs(cfg, grid)
    ref = _reference(model, grid, *inputs)
    params = _load(cfg, path, jnp.bfloat16)
    assert params["blocks"]["attn1"]["to_q"]["kernel"].dtype == jnp.bfloat16
    for leaf in (params["scale_shift_table"], params["blocks"]["scale_shift_table"],
                 params["time_embed"]["linear"]["kernel"], params["blocks"]["attn2"]["norm_k"]["scale"]):
        assert leaf.dtype == jnp.float32  # AdaLN tables, timestep embedder, norm scales (paper Table 4 fault 4)
    assert _rel(_ours(params, cfg, grid, *inputs), ref) < 1e-2


@pytest.mark.parametrize("dim", [2048, 4096, 1536])
def test_rope_tables_match_diffusers_at_real_widths(dim):
    """Real widths: 2B (2048), 13B (4096), and 1536 (dim % 6 = 0). The reference computes the angles in float32,
    where its vectorised linspace rounds differently from one CPU to another; the tables agree to the float32
    resolution of angles up to ``theta * pi / 2`` (~1.6e4 rad, ulp ~1e-3)."""
    heads = 32
    cfg = LTXVideoTransformerConfig(num_attention_heads=heads, attention_head_dim=dim // heads, cross_attention_dim=dim)
    grid = (3, 4, 5)
    cos, sin = lt.rope_tables(cfg, lt.grid_coords(cfg, grid, SCALE))
    ref_cos, ref_sin = LTXVideoRotaryPosEmbed(dim=dim)(torch.zeros(1, 60, dim), *grid, SCALE)
    ref_cos, ref_sin = ref_cos[0, :, ::2].numpy(), ref_sin[0, :, ::2].numpy()  # repeat_interleave(2) -> one per pair
    assert cos.shape == (60, heads, dim // heads // 2)
    assert np.abs(cos.reshape(60, -1) - ref_cos).max() < 4e-3
    assert np.abs(sin.reshape(60, -1) - ref_sin).max() < 4e-3
    # Pairs of low frequency (angles under ~30 rad) agree to float32 rounding; a wrong pair order or axis
    # interleave would be off by O(1) there too.
    n, pad = dim // 6, (dim % 6) // 2
    freq = np.concatenate([np.zeros(pad), np.repeat(10000.0 ** (np.arange(n) / (n - 1)) * np.pi / 2, 3)])
    low = freq < 30
    assert low.sum() >= 60 and np.abs(cos.reshape(60, -1) - ref_cos)[:, low].max() < 2e-5


def test_rope_tables_exact_at_small_width():
    cfg = LTXVideoTransformerConfig(**{k: v for k, v in TINY["dim48_affine"].items()})
    grid = (2, 3, 4)
    cos, sin = lt.rope_tables(cfg, lt.grid_coords(cfg, grid, SCALE))
    ref_cos, ref_sin = LTXVideoRotaryPosEmbed(dim=48)(torch.zeros(1, 24, 48), *grid, SCALE)
    np.testing.assert_allclose(cos.reshape(24, -1), ref_cos[0, :, ::2].numpy(), atol=2e-6)
    np.testing.assert_allclose(sin.reshape(24, -1), ref_sin[0, :, ::2].numpy(), atol=2e-6)


@pytest.mark.parametrize("dp,tp,sp", [(2, 2, 2), (1, 2, 4), (1, 1, 3), (2, 1, 1)])
def test_mesh_matches_diffusers(saved, dp, tp, sp):
    """Megatron TP over heads (across-heads QK norm reduced over shards), Ulysses SP (sp=4 with 1 or 2 local
    heads: keys/values all-gathered), 50 tokens padded to 51 (sp=3) or 52 (sp=4) with padded keys masked, dp over
    the batch."""
    model, cfg, path = saved
    grid = (2, 5, 5)  # 50 tokens: padded for sp = 3 and 4
    inputs = _inputs(cfg, grid)
    ref = _reference(model, grid, *inputs)
    mesh = make_mesh(dp, tp, sp, devices=jax.devices()[: dp * tp * sp])
    params = _load(cfg, path, shardings=LTX_RULES.sharding_fn(mesh))
    out = _ours(params, cfg, grid, *inputs, mesh=mesh)
    assert _rel(out, ref) < 1e-5


def test_per_token_timesteps_on_a_mesh(saved):
    model, cfg, path = saved
    grid = (3, 2, 3)
    inputs = _inputs(cfg, grid, per_token=True)
    ref = _reference(model, grid, *inputs)
    mesh = make_mesh(1, 2, 2, devices=jax.devices()[:4])
    out = _ours(_load(cfg, path, shardings=LTX_RULES.sharding_fn(mesh)), cfg, grid, *inputs, mesh=mesh)
    assert _rel(out, ref) < 1e-5


def test_bad_inputs_name_the_fix(saved):
    _, cfg, path = saved
    params = _load(cfg, path)
    grid = (1, 2, 3)
    hidden, timestep, context, mask = _inputs(cfg, grid)
    with pytest.raises(ValueError, match="packed latents"):
        _ours(params, cfg, grid, hidden[..., :-1], timestep, context, mask)
    with pytest.raises(ValueError, match="timestep has shape"):
        _ours(params, cfg, grid, hidden, timestep[:, None].repeat(3, 1), context, mask)
    with pytest.raises(ValueError, match="encoder_hidden_states"):
        _ours(params, cfg, grid, hidden, timestep, context[..., :-1], mask)
    cos, sin = lt.rope_tables(cfg, lt.grid_coords(cfg, (1, 2, 2), SCALE))
    with pytest.raises(ValueError, match="rope_tables"):
        lt.forward(params, jnp.asarray(hidden), jnp.asarray(timestep), jnp.asarray(context), None, cos, sin, cfg=cfg)
    with pytest.raises(ValueError, match="valid tp: 1, 2"):
        check_parallel(LTXVideoTransformerConfig(**TINY["dim16"]), make_mesh(1, 8, 1))


def test_config_rejects_unsupported_settings():
    with pytest.raises(ValueError, match="qk_norm"):
        LTXVideoTransformerConfig.from_dict({"qk_norm": "rms_norm"})
    with pytest.raises(ValueError, match="cross_attention_dim=2048 != heads"):
        LTXVideoTransformerConfig.from_dict({"attention_head_dim": 128})
    with pytest.raises(ValueError, match="LTXVideoTransformer3DModel"):
        LTXVideoTransformerConfig.from_dict({"_class_name": "WanTransformer3DModel"})
    with pytest.raises(ValueError, match="num_layers='28' should be an integer"):
        LTXVideoTransformerConfig.from_dict({"num_layers": "28"})


def test_strict_loading_names_missing_and_unexpected(saved, tmp_path):
    from safetensors.numpy import load_file, save_file

    _, cfg, path = saved
    sd = load_file(str(path / "diffusion_pytorch_model.safetensors"))
    del sd["transformer_blocks.1.attn2.norm_k.weight"]
    sd["transformer_blocks.0.attn1.to_bogus.weight"] = np.zeros((2, 2), np.float32)
    save_file(sd, str(tmp_path / "diffusion_pytorch_model.safetensors"))
    with pytest.raises(CheckpointError) as e:
        load_params(CheckpointReader(tmp_path), transformer_keymap(cfg), lt.transformer_specs(cfg), source=str(tmp_path))
    msg = str(e.value)
    assert "transformer_blocks.1.attn2.norm_k.weight" in msg and "transformer_blocks.0.attn1.to_bogus.weight" in msg
