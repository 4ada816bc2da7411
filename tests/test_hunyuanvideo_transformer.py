"""Parity of the HunyuanVideo transformer with diffusers ``HunyuanVideoTransformer3DModel`` (fp32 and bf16), its key
maps (diffusers layout and the original release), its configuration and its input checks.

Tiny configurations after diffusers' own test (4 channels, 2 heads of 10, RoPE axes (2, 4, 4), 16-wide text states,
8-wide pooled projection), one of each variant: text-to-video with the guidance embedder, without it, patches of
2 x 2 x 2, ``latent_concat`` image-to-video (9 input channels) and ``token_replace`` image-to-video. Weights are
written by ``save_pretrained`` and read through our views and key map by the strict loader; every batch has two
samples with different text lengths (right padding), so the text mask is exercised everywhere.
"""

import json
import math
import re

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers import HunyuanVideoTransformer3DModel
from diffusers.models.embeddings import get_timestep_embedding
from diffusers.models.transformers.transformer_hunyuan_video import HunyuanVideoRotaryPosEmbed

from _hunyuanvideo_original import original_transformer_state_dict as _original_state_dict
from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.loader import load_params
from vidax.checkpoint.reader import CheckpointReader, Split, TensorViews
from vidax.checkpoint.writer import to_state_dict
from vidax.core.params import flatten
from vidax.models.hunyuanvideo.config import HunyuanVideoTransformerConfig
from vidax.models.hunyuanvideo.keymap import (
    original_transformer_config,
    transformer_checkpoint,
    transformer_keymap,
    transformer_views,
)
from vidax.models.hunyuanvideo.transformer import (
    TIME_PROJ_DIM,
    check_inputs,
    STACKS,
    forward,
    forward_epilogue,
    forward_prologue,
    guidance_input,
    num_tokens,
    refine_text,
    rope_tables,
    run_blocks,
    time_proj,
    time_proj_frequencies,
    transformer_specs,
)

TEXT = 7  # text tokens; the two samples keep 5 and 7 of them
TINY = dict(in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=10, num_layers=2,
            num_single_layers=2, num_refiner_layers=1, patch_size=1, patch_size_t=1, text_embed_dim=16,
            pooled_projection_dim=8, rope_axes_dim=(2, 4, 4))

# name -> (config overrides, latent shape (B, C, T, H, W))
VARIANTS = {
    "t2v": ({}, (2, 4, 3, 4, 4)),
    "no_guidance": ({"guidance_embeds": False}, (2, 4, 2, 3, 5)),
    "patch2": ({"patch_size": 2, "patch_size_t": 2}, (2, 4, 4, 4, 6)),
    "latent_concat": ({"image_condition_type": "latent_concat", "in_channels": 9, "guidance_embeds": False},
                      (2, 9, 3, 4, 4)),
    "token_replace": ({"image_condition_type": "token_replace"}, (2, 4, 3, 4, 4)),
}


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def _save(kwargs, path):
    torch.manual_seed(0)
    model = HunyuanVideoTransformer3DModel(**{**TINY, **kwargs}).eval()
    with torch.no_grad():
        # Norm weights start at 1 and biases at 0: randomise them so a wrong mapping shows.
        for name, prm in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                prm.add_(0.1 * torch.randn_like(prm))
    model.save_pretrained(path)
    cfg = HunyuanVideoTransformerConfig.from_dict(json.loads((path / "config.json").read_text()))
    return model, cfg


def _inputs(cfg, shape, seed=1):
    rng = np.random.default_rng(seed)
    b = shape[0]
    mask = np.zeros((b, TEXT), np.int64)
    for i, n in enumerate((5, TEXT)[:b]):
        mask[i, :n] = 1
    return dict(
        latents=rng.standard_normal(shape, dtype=np.float32),
        timestep=np.array([937.0, 312.0][:b], np.float32),
        encoder_hidden_states=rng.standard_normal((b, TEXT, cfg.text_embed_dim), dtype=np.float32),
        encoder_attention_mask=mask,
        pooled_projections=rng.standard_normal((b, cfg.pooled_projection_dim), dtype=np.float32),
        # What the pipeline passes: guidance_scale * 1000.
        guidance=np.array([6000.0, 3500.0][:b], np.float32) if cfg.guidance_embeds else None,
    )


def _reference(model, inputs):
    with torch.no_grad():
        args = {k: None if v is None else torch.from_numpy(v) for k, v in inputs.items()}
        return model(hidden_states=args.pop("latents"), **args, return_dict=False)[0].numpy()


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    """``variants(name)``: the saved reference model of a variant, built once per module (one reference run)."""
    cache = {}

    def get(name):
        if name not in cache:
            kwargs, shape = VARIANTS[name]
            path = tmp_path_factory.mktemp(f"hunyuanvideo_{name}")
            model, cfg = _save(kwargs, path)
            inputs = _inputs(cfg, shape)
            cache[name] = (name, model, cfg, path, inputs, _reference(model, inputs))
        return cache[name]

    return get


RELEASED = ["t2v", "latent_concat", "token_replace"]  # the three released architectures


def _load(cfg, path, dtype=jnp.float32, layout="diffusers", reader=None):
    reader = CheckpointReader(path) if reader is None else reader
    return load_params(*transformer_checkpoint(reader, cfg, layout), transformer_specs(cfg), dtype, source=str(path))


def _run(params, cfg, inputs, **kw):
    return np.asarray(forward(params, **inputs, cfg=cfg, **kw))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_transformer_matches_diffusers_fp32(variants, variant):
    name, _, cfg, path, inputs, ref = variants(variant)
    out = _run(_load(cfg, path), cfg, inputs)
    assert out.shape == ref.shape == (2, cfg.out_channels, *inputs["latents"].shape[2:])
    assert out.dtype == np.float32
    assert _rel(out, ref) < 1e-5


@pytest.mark.parametrize("variant", RELEASED)
def test_transformer_bf16_close_to_fp32_reference(variants, variant):
    name, _, cfg, path, inputs, ref = variants(variant)
    assert _rel(_run(_load(cfg, path, jnp.bfloat16), cfg, inputs), ref) < 1e-2


@pytest.mark.parametrize("variant", ["t2v"])
def test_padded_text_changes_nothing_valid(variants, variant):
    """Whatever the padded text tokens hold, the output is the same (they are never keys), as in the reference."""
    name, model, cfg, path, inputs, ref = variants(variant)
    noisy = dict(inputs, encoder_hidden_states=inputs["encoder_hidden_states"].copy())
    noisy["encoder_hidden_states"][0, 5:] = 100.0  # sample 0 keeps 5 tokens
    np.testing.assert_allclose(_reference(model, noisy), ref, rtol=0, atol=1e-5)
    out, out_noisy = _run(_load(cfg, path), cfg, inputs), _run(_load(cfg, path), cfg, noisy)
    np.testing.assert_allclose(out_noisy, out, rtol=0, atol=1e-6)


@pytest.mark.parametrize("variant", ["t2v", "latent_concat"])
def test_token_refiner_matches_every_row_of_the_reference(variants, variant):
    """The refined text, padded rows included (the reference's mask lets a padded query attend key 0 only)."""
    name, model, cfg, path, inputs, _ = variants(variant)
    with torch.no_grad():
        ref = model.context_embedder(torch.from_numpy(inputs["encoder_hidden_states"]),
                                     torch.from_numpy(inputs["timestep"]),
                                     torch.from_numpy(inputs["encoder_attention_mask"])).numpy()
    out = refine_text(_load(cfg, path), jnp.asarray(inputs["encoder_hidden_states"]),
                      jnp.asarray(inputs["encoder_attention_mask"]), jnp.asarray(inputs["timestep"]), cfg)
    assert _rel(out, ref) < 1e-5
    assert _rel(np.asarray(out)[0, 5:], ref[0, 5:]) < 1e-5  # the padded rows themselves


@pytest.mark.parametrize("variant", ["token_replace"])
def test_prologue_blocks_epilogue_compose_and_zero_blocks_are_identities(variants, variant):
    """The offloading hook: forward = prologue, the two stacks, epilogue; a stack chunk padded with all-zero blocks
    (their AdaLN gates are zero) gives the same streams."""
    import jax

    name, _, cfg, path, inputs, ref = variants(variant)
    params = _load(cfg, path)
    x, c, block_inputs = forward_prologue(params, **inputs, cfg=cfg)
    s = num_tokens(cfg, inputs["latents"].shape)
    for kind, stack in STACKS.items():
        padded = jax.tree.map(lambda a: jnp.concatenate([a, jnp.zeros_like(a[:1])]), params[stack])
        x1, c1 = run_blocks(params[stack], x, c, block_inputs, kind=kind, cfg=cfg, video_tokens=s)
        x2, c2 = run_blocks(padded, x, c, block_inputs, kind=kind, cfg=cfg, video_tokens=s)
        np.testing.assert_array_equal(np.asarray(x2), np.asarray(x1))
        np.testing.assert_array_equal(np.asarray(c2), np.asarray(c1))
        x, c = x1, c1
    out = forward_epilogue(params, x, block_inputs.temb, cfg=cfg, latent_shape=inputs["latents"].shape)
    assert _rel(out, ref) < 1e-5


@pytest.mark.parametrize("variant", ["t2v"])
def test_fp32_leaves_stay_fp32_in_bf16(variants, variant):
    name, _, cfg, path, _, _ = variants(variant)
    p = _load(cfg, path, jnp.bfloat16)
    fp32 = [p["transformer_blocks"]["norm1"]["linear"]["kernel"],
            p["transformer_blocks"]["norm1_context"]["linear"]["bias"],
            p["single_transformer_blocks"]["norm"]["linear"]["kernel"], p["norm_out"]["scale_linear"]["kernel"],
            p["time_text_embed"]["guidance_embedder"]["linear_1"]["kernel"],
            p["time_text_embed"]["text_embedder"]["linear_2"]["kernel"],
            p["context_embedder"]["time_text_embed"]["timestep_embedder"]["linear_1"]["kernel"],
            p["context_embedder"]["token_refiner"]["refiner_blocks"]["norm_out"]["linear"]["kernel"],
            p["context_embedder"]["token_refiner"]["refiner_blocks"]["norm1"]["scale"],
            p["transformer_blocks"]["attn"]["norm_added_q"]["scale"], p["x_embedder"]["proj"]["kernel"]]
    assert all(a.dtype == jnp.float32 for a in fp32)
    bf16 = [p["transformer_blocks"]["attn"]["to_q"]["kernel"], p["transformer_blocks"]["ff_context"]["up"]["kernel"],
            p["single_transformer_blocks"]["proj_out"]["mlp"]["kernel"],
            p["single_transformer_blocks"]["proj_mlp"]["kernel"],
            p["context_embedder"]["proj_in"]["kernel"], p["proj_out"]["kernel"]]
    assert all(a.dtype == jnp.bfloat16 for a in bf16)


@pytest.mark.parametrize("variant", ["t2v", "token_replace"])
def test_views_and_keymap_write_back_the_diffusers_state_dict(variants, variant):
    """Our tree written back through the key map and merged through the views is the reference's state dict."""
    name, model, cfg, path, _, _ = variants(variant)
    views = to_state_dict(_host(_load(cfg, path)), transformer_keymap(cfg), transformer_specs(cfg))
    back = transformer_views(cfg).merge(views, {})
    ref = {k: v.numpy() for k, v in model.state_dict().items()}
    assert sorted(back) == sorted(ref)
    for k, v in ref.items():
        np.testing.assert_array_equal(back[k], v, err_msg=k)


def _host(tree):
    return {k: _host(v) if isinstance(v, dict) else np.asarray(v) for k, v in tree.items()}


# -- pieces at real sizes -----------------------------------------------------------------------


def test_rope_tables_match_reference_at_real_sizes():
    """128-wide heads, axes (16, 56, 56), theta 256, the token grid of 1280x720, 129 frames."""
    grid = (33, 45, 80)
    cfg = HunyuanVideoTransformerConfig(num_layers=1, num_single_layers=1)
    ref_cos, ref_sin = HunyuanVideoRotaryPosEmbed(2, 1, list(cfg.rope_axes_dim), cfg.rope_theta)(
        torch.zeros(1, 1, grid[0], 2 * grid[1], 2 * grid[2]))
    cos, sin = (np.asarray(a) for a in rope_tables(cfg, grid))
    assert cos.shape == (math.prod(grid), 64)
    # The reference repeats each angle for its feature pair; angles up to 79 rad in float32 (ulp 8e-6).
    np.testing.assert_allclose(np.repeat(cos, 2, axis=1), ref_cos.numpy(), rtol=0, atol=2e-5)
    np.testing.assert_allclose(np.repeat(sin, 2, axis=1), ref_sin.numpy(), rtol=0, atol=2e-5)


def test_time_projection_follows_the_reference_float32_order():
    """Frequencies: the correctly rounded exp of the reference's float32 exponents, which PyTorch's float32 exp
    matches but for one ulp in a few entries (its SIMD exp); at guidance 6000 those ulps are the whole difference."""
    half = TIME_PROJ_DIM // 2
    exponent = (-math.log(10000) * torch.arange(0, half, dtype=torch.float32) / half)
    ours = time_proj_frequencies()
    np.testing.assert_array_equal(ours, np.exp(exponent.numpy().astype(np.float64)).astype(np.float32))
    theirs = torch.exp(exponent).numpy()
    ulps = np.abs(ours.view(np.int32) - theirs.view(np.int32))
    assert ulps.max() <= 1 and (ulps == 0).mean() > 0.9
    t = np.array([0.0, 1.0, 312.0, 937.0, 1000.0, 3500.0, 6000.0], np.float32)
    ref = get_timestep_embedding(torch.from_numpy(t), TIME_PROJ_DIM, flip_sin_to_cos=True,
                                 downscale_freq_shift=0).numpy()
    out = np.asarray(time_proj(jnp.asarray(t)))
    # |t * (f + ulp) - t * f| <= t * ulp(f) <= t * 2^-23 (f <= 1), plus float32 rounding of the product and cos/sin.
    bound = t[:, None].astype(np.float64) * 2.0**-23 + np.spacing(np.float32(6000.0)) + 1e-6
    assert (np.abs(out - ref) <= bound).all()
    exact = ulps == 0
    np.testing.assert_allclose(out[:, :half][:, exact], ref[:, :half][:, exact], rtol=0, atol=1e-6)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32], ids=["bf16", "fp32"])
def test_guidance_input_is_built_as_the_reference_pipeline_builds_it(dtype):
    torch_dtype = {jnp.bfloat16: torch.bfloat16, jnp.float32: torch.float32}[dtype]
    for scale in (1.0, 3.5, 6.0, 6.3, 7.77, 10.0):
        ref = (torch.tensor([scale] * 2, dtype=torch_dtype) * 1000.0).float().numpy()  # pipeline_hunyuan_video.py
        np.testing.assert_array_equal(guidance_input(scale, 2, dtype), ref)
    assert guidance_input(6.0, 1, dtype)[0] == (6016.0 if dtype == jnp.bfloat16 else 6000.0)


# -- the original release's layout --------------------------------------------------------------


@pytest.fixture(scope="module", params=["t2v", "latent_concat"])
def original(variants, request, tmp_path_factory):
    saved = variants(request.param)
    name, model, cfg, path, inputs, ref = saved
    folder = tmp_path_factory.mktemp(f"original_{name}") / "hunyuan-video-t2v-720p" / "transformers"
    folder.mkdir(parents=True)
    pt = folder / "mp_rank_00_model_states.pt"
    torch.save({"module": _original_state_dict(model.state_dict(), cfg)}, pt)
    return saved, pt


def test_original_layout_gives_exactly_the_diffusers_output(original):
    (name, _, cfg, path, inputs, ref), pt = original
    diffusers_params = _load(cfg, path)
    original_params = _load(cfg, pt, layout="original", reader=CheckpointReader(pt))
    flat_d, flat_o = dict(flatten(diffusers_params)), dict(flatten(original_params))
    assert flat_d.keys() == flat_o.keys()
    for k in flat_d:
        np.testing.assert_array_equal(np.asarray(flat_o[k]), np.asarray(flat_d[k]), err_msg=k)
    np.testing.assert_array_equal(_run(original_params, cfg, inputs), _run(diffusers_params, cfg, inputs))


def test_original_config_is_read_from_the_shapes(original, tmp_path):
    (name, _, cfg, _, _, _), pt = original
    axes = TINY["rope_axes_dim"]
    assert original_transformer_config(pt, rope_axes_dim=axes) == cfg
    if name == "t2v":
        # The same file in the I2V release's folder (here a link, as in the Hugging Face cache): 16 channels in and
        # out, so the 16-channel image-to-video model (token_replace); 2 * 4 + 1 channels is latent_concat.
        link = tmp_path / "hunyuan-video-i2v-720p" / "transformers" / "mp_rank_00_model_states.pt"
        link.parent.mkdir(parents=True)
        link.symlink_to(pt)
        assert original_transformer_config(link, rope_axes_dim=axes).image_condition_type == "token_replace"
        assert original_transformer_config(pt, "i2v", rope_axes_dim=axes).image_condition_type == "token_replace"
    else:
        assert cfg.image_condition_type == "latent_concat" and not cfg.guidance_embeds
    with pytest.raises(CheckpointError, match="RoPE axes \\[16, 56, 56\\].*cover 128 features"):
        original_transformer_config(pt)  # the release's axes need 128-wide heads


def test_original_layout_strict_errors_name_the_fused_tensor(original, tmp_path):
    (name, model, cfg, _, _, _), _ = original
    sd = _original_state_dict(model.state_dict(), cfg)
    sd["single_blocks.1.linear1.weight"] = sd["single_blocks.1.linear1.weight"][:-1]  # one MLP row short
    del sd["double_blocks.0.txt_attn_qkv.bias"]
    pt = tmp_path / "bad.pt"
    torch.save({"module": sd}, pt)
    with pytest.raises(CheckpointError, match=re.escape("single_blocks.1.linear1.weight: shape (139, 20) cannot be "
                                                        "split into 4 parts of sizes [20, 20, 20, 80]")):
        _load(cfg, pt, layout="original", reader=CheckpointReader(pt))
    sd["single_blocks.1.linear1.weight"] = torch.cat([sd["single_blocks.1.linear1.weight"], torch.zeros(1, 20)])
    torch.save({"module": sd}, pt)
    with pytest.raises(CheckpointError) as e:
        _load(cfg, pt, layout="original", reader=CheckpointReader(pt))
    assert "missing keys (3)" in str(e.value) and "double_blocks.0.txt_attn_qkv.bias[k]" in str(e.value)


# -- views, configuration, inputs -----------------------------------------------------------------


def test_split_views_read_and_merge_unequal_parts():
    from vidax.checkpoint.loader import DictReader

    w = np.arange(6 * 7, dtype=np.float32).reshape(6, 7)
    views = TensorViews(split={"a": Split(("x", "y"), (2, 5), axis=1), "b": ("p", "q", "r")})
    r = views.reader(DictReader({"a": w, "b": w}))
    assert r.keys() == ["a[x]", "a[y]", "b[p]", "b[q]", "b[r]"]
    assert r.shape("a[y]") == (6, 5) and r.shape("b[q]") == (2, 7)
    np.testing.assert_array_equal(r.get("a[y]"), w[:, 2:])
    np.testing.assert_array_equal(r.get("b[r]"), w[4:])
    merged = views.merge({k: r.get(k) for k in r.keys()}, {})
    np.testing.assert_array_equal(merged["a"], w)
    np.testing.assert_array_equal(merged["b"], w)
    with pytest.raises(CheckpointError, match=re.escape("a: shape (6, 7) cannot be split into 2 parts of sizes [2, 4] "
                                                        "['x', 'y'] along axis 1")):
        TensorViews(split={"a": Split(("x", "y"), (2, 4), axis=1)}).reader(DictReader({"a": w}))
    with pytest.raises(CheckpointError, match="cannot be split into 4 equal parts"):
        TensorViews(split={"a": ("p", "q", "r", "s")}).reader(DictReader({"a": w}))


def test_config_defaults_are_the_13b_model():
    cfg = HunyuanVideoTransformerConfig()
    assert (cfg.dim, cfg.mlp_dim, cfg.num_layers, cfg.num_single_layers) == (3072, 12288, 20, 40)
    n = sum(math.prod(s.shape) for _, s in flatten(transformer_specs(cfg)))
    assert 12.7e9 < n < 12.9e9  # "HunyuanVideo 13B"


@pytest.mark.parametrize("bad, message", [
    ({"num_attention_heads": "two"}, "num_attention_heads='two' should be an integer"),
    ({"guidance_embeds": 1}, "guidance_embeds=1 should be true or false"),
    ({"rope_axes_dim": [16, "56", 56]}, "rope_axes_dim=\\[16, '56', 56\\] should be a list of integers"),
    ({"mlp_ratio": "4"}, "mlp_ratio='4' should be a number"),
    ({"image_condition_type": 3}, "image_condition_type=3 should be a string or null"),
    ({"num_single_layers": 0}, "num_single_layers=0 should be a positive integer"),
    ({"patch_size_t": 0}, "patch_size_t=0 should be a positive integer"),
    ({"qk_norm": "layer_norm"}, "qk_norm='layer_norm' \\(only 'rms_norm'\\)"),
    ({"image_condition_type": "concat"}, "image_condition_type='concat'"),
    ({"rope_axes_dim": [16, 56, 48]}, "sums to 120, not attention_head_dim=128"),
    ({"rope_axes_dim": [16, 55, 57]}, "three positive even widths"),
    ({"_class_name": "WanTransformer3DModel"}, "is for 'WanTransformer3DModel'"),
])
def test_config_errors_name_the_field(bad, message):
    with pytest.raises(ValueError, match=message):
        HunyuanVideoTransformerConfig.from_dict({"_class_name": "HunyuanVideoTransformer3DModel", **bad})


def test_input_errors_are_named():
    cfg = HunyuanVideoTransformerConfig.from_dict(TINY)
    good = dict(latent_shape=(2, 4, 3, 4, 4), timestep_shape=(2,), text_shape=(2, 7, 16), mask_shape=(2, 7),
                pooled_shape=(2, 8), guidance_shape=(2,))
    check_inputs(cfg, **good)
    cases = [
        (dict(latent_shape=(2, 5, 3, 4, 4)), "latents have 5 channels, the transformer takes in_channels=4"),
        (dict(latent_shape=(2, 4, 3, 4)), "latents must be \\(B, C, T, H, W\\)"),
        (dict(text_shape=(2, 7, 12)), "encoder_hidden_states shape \\(2, 7, 12\\) \\(expected \\(2, L, 16\\)\\)"),
        (dict(mask_shape=(2, 6)), "encoder_attention_mask shape \\(2, 6\\) \\(expected \\(2, 7\\)\\)"),
        (dict(pooled_shape=(2, 9)), "pooled_projections shape"),
        (dict(guidance_shape=None), "guidance is None, but this transformer is guidance-distilled"),
        (dict(timestep_shape=(3,)), "timestep shape \\(3,\\)"),
    ]
    for change, message in cases:
        with pytest.raises(ValueError, match=message):
            check_inputs(cfg, **{**good, **change})
    no_guidance = HunyuanVideoTransformerConfig.from_dict({**TINY, "guidance_embeds": False})
    with pytest.raises(ValueError, match="has no guidance embedder"):
        check_inputs(no_guidance, **good)
    patch2 = HunyuanVideoTransformerConfig.from_dict({**TINY, "patch_size": 2})
    with pytest.raises(ValueError, match=re.escape("must be divisible by (patch_size_t, patch_size, patch_size) = "
                                                   "(1, 2, 2)")):
        check_inputs(patch2, **{**good, "latent_shape": (2, 4, 3, 5, 4)})
