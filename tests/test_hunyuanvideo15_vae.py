"""Parity of the HunyuanVideo-1.5 VAE with diffusers ``AutoencoderKLHunyuanVideo15`` (CPU, float32, tiny configs).

``TINY`` has every block type of the release at the smallest size: 4 blocks with 8x space and 4x time (the release
has 5 blocks with 16x), so the encoder has a space-only downsampler (block 0), two time-and-space ones (1, 2) and a
block without (3), and the decoder two time-and-space upsamplers, a space-only one and a block without; widths
(8, 16, 16, 32) with matched channels make the resamplers' shortcuts average and repeat over groups of 2, 4 and 8.
``UNMATCHED`` is diffusers' pipeline-test shape of VAE (2 blocks, 4x space, 2x time, unmatched channels) with a width
change, so the resnets' 1x1x1 shortcut convolutions and a resampling last block run too. Random weights, the RMS-norm
gammas randomised as well, written by ``save_pretrained`` and read back through ``load_vae``; the original release's
layout (``AutoencoderKLConv3D`` names, restated below from Tencent-Hunyuan/HunyuanVideo-1.5 and diffusers'
``scripts/convert_hunyuan_video1_5_to_diffusers.py``) is written from the same weights and must load to the same tree.

Where diffusers departs from the original the reference is the original, restated here: its attention mask is
``(B, 1, S, S)`` (``AttnBlock.attention``: ``attention_mask.unsqueeze(1)``), so batches of more than one video decode;
diffusers' ``(B, S, S)`` mask fails on them.

Shapes are chosen so that the tiled tests reuse the untiled tests' compiled programs (the file compiles ten).
"""

import contextlib
import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers import AutoencoderKLHunyuanVideo15
from diffusers.models.autoencoders.autoencoder_kl_hunyuanvideo15 import HunyuanVideo15AttnBlock
from safetensors.torch import save_file

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.loader import plan_load
from vidax.models.hunyuanvideo15 import vae as hv
from vidax.models.hunyuanvideo15 import vae_keymap as hk

TINY = dict(latent_channels=4, block_out_channels=(8, 16, 16, 32), layers_per_block=1, spatial_compression_ratio=8,
            temporal_compression_ratio=4)
UNMATCHED = dict(latent_channels=4, block_out_channels=(8, 16), layers_per_block=1, spatial_compression_ratio=4,
                 temporal_compression_ratio=2, downsample_match_channel=False, upsample_match_channel=False)
# 32-pixel tiles (4 latents) overlapping by a quarter: decoding every 3 latents blends 8 pixels, encoding every 24
# pixels blends 1 latent.
SMALL_TILES = dict(tile_sample_min_height=32, tile_sample_min_width=32, tile_overlap_factor=0.25)

# The release's original vae/config.json (tencent/HunyuanVideo-1.5, AutoencoderKLConv3D), as published.
RELEASE_ORIGINAL_CONFIG = {
    "_class_name": "AutoencoderKLConv3D", "_diffusers_version": "0.35.0",
    "block_out_channels": [128, 256, 512, 1024, 1024], "downsample_match_channel": True, "ffactor_spatial": 16,
    "ffactor_temporal": 4, "in_channels": 3,
    "latent_channels": 32, "layers_per_block": 2, "out_channels": 3, "sample_size": 256, "sample_tsize": 64,
    "scaling_factor": 1.03682, "shift_factor": None, "upsample_match_channel": True}


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def _make(tmp_path_factory, name, **config):
    torch.manual_seed(0)
    model = AutoencoderKLHunyuanVideo15(**config).eval()
    with torch.no_grad():  # gammas start at 1: randomise them so that a wrong mapping shows
        for n, p in model.named_parameters():
            if n.endswith("gamma"):
                p.copy_(torch.rand_like(p) + 0.5)
    path = tmp_path_factory.mktemp(name)
    model.save_pretrained(path)
    cfg, params = hk.load_vae(path)
    return model, cfg, params, path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return _make(tmp_path_factory, "hv15_vae_tiny", **TINY)


@pytest.fixture(scope="module")
def unmatched(tmp_path_factory):
    return _make(tmp_path_factory, "hv15_vae_unmatched", **UNMATCHED)


@contextlib.contextmanager
def _original_mask():
    """The original ``AttnBlock``'s mask, ``prepare_causal_attention_mask(...).unsqueeze(1)``, in diffusers' block."""
    made = HunyuanVideo15AttnBlock.prepare_causal_attention_mask
    HunyuanVideo15AttnBlock.prepare_causal_attention_mask = staticmethod(lambda *a, **k: made(*a, **k).unsqueeze(1))
    try:
        yield
    finally:
        HunyuanVideo15AttnBlock.prepare_causal_attention_mask = staticmethod(made)


@contextlib.contextmanager
def _reference_tiling(model, tile_sample_min_height, tile_sample_min_width, tile_overlap_factor):
    """``enable_tiling`` with latent tiles of ``tile_sample_min / ratio`` (as the original's
    ``set_tile_sample_min_size`` sets them), restoring the model's tiling attributes afterwards."""
    names = ("use_tiling", "tile_sample_min_height", "tile_sample_min_width", "tile_latent_min_height",
             "tile_latent_min_width", "tile_overlap_factor")
    saved = {a: getattr(model, a) for a in names}
    s = model.spatial_compression_ratio
    model.enable_tiling(tile_sample_min_height, tile_sample_min_width, tile_sample_min_height // s,
                        tile_sample_min_width // s, tile_overlap_factor)
    try:
        yield
    finally:
        for a, v in saved.items():
            setattr(model, a, v)


def _latents(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def _video(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def _reference_encode(model, x):
    with torch.no_grad():
        dist = model.encode(torch.from_numpy(x)).latent_dist
    return dist.mean.numpy(), dist.logvar.numpy()


def _reference_decode(model, z):
    with torch.no_grad(), _original_mask():
        return model.decode(torch.from_numpy(z)).sample.numpy()


# -- untiled parity ------------------------------------------------------------------------------


def test_encode_parity(tiny):
    """An image (T = 1, what image-to-video encodes), non-square; the tiled test below encodes a video."""
    model, cfg, params, _ = tiny
    x = _video((1, 3, 1, 24, 32), 1)
    mean_ref, logvar_ref = _reference_encode(model, x)
    mean, logvar = hv.encode(params, cfg, jnp.asarray(x))
    assert mean.shape == logvar.shape == mean_ref.shape == (1, 4, 1, 3, 4)
    assert mean.dtype == logvar.dtype == jnp.float32
    assert _rel(mean, mean_ref) < 1e-5
    assert _rel(logvar, logvar_ref) < 1e-5
    # What both image-to-video pipelines condition on: the mode times scaling_factor.
    np.testing.assert_array_equal(np.asarray(hv.encode_latents(params, cfg, jnp.asarray(x))),
                                  np.asarray(mean) * np.float32(cfg.scaling_factor))


def test_decode_parity(tiny):
    """A batch of two (the original's per-sample mask; diffusers' own mask cannot take a batch), non-square."""
    model, cfg, params, _ = tiny
    z = _latents((2, 4, 2, 4, 3), 2)
    ref = _reference_decode(model, z)
    out = hv.decode(params, cfg, jnp.asarray(z))
    assert out.shape == ref.shape == (2, 3, hv.decoded_frames(cfg, 2), 32, 24)
    assert out.dtype == jnp.float32
    assert _rel(out, ref) < 1e-5
    with torch.no_grad(), pytest.raises(RuntimeError, match="broadcast"):
        model.decode(torch.from_numpy(z))  # the departure documented in docs/design.md


def test_unmatched_config_parity(unmatched):
    """Width-changing resnets (conv_shortcut), unmatched resamplers, a resampling last block, 2x time; a single
    latent frame decodes through the upsampler's first-frame path alone."""
    model, cfg, params, _ = unmatched
    assert "conv_shortcut" in params["encoder"]["down_blocks"]["1"]["resnets"]["0"]
    assert "conv_shortcut" in params["decoder"]["up_blocks"]["1"]["resnets"]["0"]
    z = _latents((1, 4, 1, 4, 3), 1)
    ref = _reference_decode(model, z)
    out = hv.decode(params, cfg, jnp.asarray(z))
    assert out.shape == ref.shape == (1, 3, 1, 16, 12)
    assert _rel(out, ref) < 1e-5


def test_bf16_decode(unmatched):
    """bfloat16 weights (norm scales pinned to float32) against the float32 reference: no further off than the
    reference's own bfloat16 decode (on a tiny random VAE neither reaches 1e-2; rounding the weights alone moves it)."""
    import copy

    model, cfg, _, path = unmatched
    _, params16 = hk.load_vae(path, jnp.bfloat16)
    assert params16["decoder"]["conv_in"]["conv"]["kernel"].dtype == jnp.bfloat16
    assert params16["decoder"]["norm_out"]["scale"].dtype == jnp.float32
    assert params16["decoder"]["mid_block"]["attentions"]["0"]["norm"]["scale"].dtype == jnp.float32
    z = _latents((1, 4, 1, 4, 3), 1)
    ref = _reference_decode(model, z)
    with torch.no_grad():
        ref16 = copy.deepcopy(model).to(torch.bfloat16).decode(torch.from_numpy(z).bfloat16()).sample.float().numpy()
    out = hv.decode(params16, cfg, jnp.asarray(z))
    assert out.dtype == jnp.float32
    assert _rel(out, ref) < min(5e-2, _rel(ref16, ref))


# -- tiling -----------------------------------------------------------------------------------------


def test_tiled_decode_matches_reference(tiny):
    """2 x 2 latent tiles of 4 every 3 (shapes 4x4, 4x3, 3x4, 3x3; the batch of the untiled test, whose 4x3 program
    serves again): blend_v and blend_h, each blended tile written back before it is a neighbour."""
    model, cfg, params, _ = tiny
    z = _latents((2, 4, 2, 6, 6), 6)
    with _reference_tiling(model, **SMALL_TILES):
        ref = _reference_decode(model, z)
    calls = []
    out = hv.decode(params, cfg, jnp.asarray(z), tiling=hv.VAETiling(**SMALL_TILES), on_tile=lambda: calls.append(1))
    assert out.shape == ref.shape == (2, 3, 5, 48, 48)
    assert len(calls) == 4
    assert _rel(out, ref) < 1e-5
    # Latents that fit one tile take one untiled call, as in the reference.
    calls.clear()
    small = _latents((2, 4, 2, 4, 3), 2)
    np.testing.assert_array_equal(np.asarray(hv.decode(params, cfg, jnp.asarray(small), hv.VAETiling(**SMALL_TILES),
                                                       on_tile=lambda: calls.append(1))),
                                  np.asarray(hv.decode(params, cfg, jnp.asarray(small))))
    assert len(calls) == 1


def test_tiled_encode_matches_reference(tiny):
    """A video (5 frames: both time-and-space downsamplers) 48 pixels wide in tiles of 32 every 24 (24x32, the
    untiled image test's size, and 24x24), blended over one latent column. diffusers' enable_tiling tiles its
    image-to-video encode so; the original never tiles an encode."""
    model, cfg, params, _ = tiny
    x = _video((1, 3, 5, 24, 48), 5)
    with _reference_tiling(model, **SMALL_TILES):
        mean_ref, logvar_ref = _reference_encode(model, x)
    made = []
    mean, logvar = hv.encode(params, cfg, jnp.asarray(x), tiling=hv.VAETiling(**SMALL_TILES),
                             on_tile=lambda: made.append(1))
    assert mean.shape == mean_ref.shape == (1, 4, 2, 3, 6)
    assert len(made) == 2
    assert _rel(mean, mean_ref) < 1e-5
    assert _rel(logvar, logvar_ref) < 1e-5


def test_tiling_presets_are_the_references():
    """The integers of both references' tile loops, restated (original spatial_tiled_decode / spatial_tiled_encode
    after set_tile_sample_min_size(256, 0.125); diffusers tiled_decode / tiled_encode after enable_tiling())."""
    cfg = hv.HunyuanVideo15VAEConfig()
    for tiling, size, factor in ((hv.ORIGINAL_TILING, 256, 0.125), (hv.ORIGINAL_TILING_LOW_MEMORY, 128, 0.25),
                                 (hv.DIFFUSERS_TILING, 256, 0.25)):
        latent = size // 16
        q = tiling.resolve(cfg)
        for axis in ("height", "width"):
            assert q[f"latent_{axis}"] == latent
            assert q[f"latent_stride_{axis}"] == int(latent * (1 - factor))  # decode: overlap_size
            assert q[f"blend_{axis}"] == int(size * factor)  # decode: blend_extent
            assert q[f"keep_{axis}"] == size - int(size * factor)  # decode: row_limit
            assert q[f"stride_{axis}"] == int(size * (1 - factor))  # encode: overlap_size
            assert q[f"latent_blend_{axis}"] == int(latent * factor)  # encode: blend_extent
            assert q[f"latent_keep_{axis}"] == latent - int(latent * factor)  # encode: row_limit
    q = hv.ORIGINAL_TILING.resolve(cfg)
    assert (q["latent_stride_height"], q["blend_height"], q["keep_height"]) == (14, 32, 224)
    with torch.device("meta"):
        model = AutoencoderKLHunyuanVideo15()  # enable_tiling() keeps the sizes it was constructed with
    assert (hv.DIFFUSERS_TILING.tile_sample_min_height, hv.DIFFUSERS_TILING.tile_sample_min_width,
            hv.DIFFUSERS_TILING.tile_overlap_factor) == (model.tile_sample_min_height, model.tile_sample_min_width,
                                                         model.tile_overlap_factor)
    assert model.tile_latent_min_height == hv.DIFFUSERS_TILING.resolve(cfg)["latent_height"]


def test_tiling_settings_are_checked():
    cfg = hv.HunyuanVideo15VAEConfig()
    with pytest.raises(ValueError, match="tiles would not add up"):
        hv.VAETiling(256, 256, 0.2).resolve(cfg)  # the original's set_tile_sample_min_size default, which it refuses
    with pytest.raises(ValueError, match="tile_sample_min_width=200 should be a multiple of 16"):
        hv.VAETiling(256, 200).resolve(cfg)
    with pytest.raises(ValueError, match="tile_overlap_factor=1.0"):
        hv.VAETiling(tile_overlap_factor=1.0).resolve(cfg)
    with pytest.raises(ValueError, match="tile_overlap_factor=0.95 leaves"):
        hv.VAETiling(16 * 4, 16 * 4, 0.95).resolve(cfg)


# -- sizes, frames, scaling ---------------------------------------------------------------------------


def test_sizes_the_vae_cannot_take_are_refused(tiny):
    _, cfg, params, _ = tiny
    release = hv.HunyuanVideo15VAEConfig()
    hv.check_video_size(release, 121, 480, 848)
    hv.check_video_size(release, 1, 720, 1280)
    for size, msg in [((120, 480, 848), r"num_frames 120 is not 4k \+ 1 .* take 117 or 121"),
                      ((121, 470, 848), r"height 470 is not a positive multiple of 16 .* take 464 or 480"),
                      ((121, 480, 850), r"width 850 is not a positive multiple of 16"),
                      ((0, 480, 848), "num_frames 0"), ((1, 0, 848), "height 0")]:
        with pytest.raises(ValueError, match=msg):
            hv.check_video_size(release, *size)
    # encode refuses before computing anything (the tiny VAE's spatial ratio is 8)
    with pytest.raises(ValueError, match="height 36 is not a positive multiple of 8"):
        hv.encode(params, cfg, jnp.zeros((1, 3, 1, 36, 32)))
    with pytest.raises(ValueError, match="num_frames 3 is not 4k"):
        hv.encode(params, cfg, jnp.zeros((1, 3, 3, 24, 32)))
    with pytest.raises(ValueError, match=r"decode: expected latents \(B, 4, T>=1"):
        hv.decode(params, cfg, jnp.zeros((1, 3, 1, 2, 2)))
    with pytest.raises(ValueError, match="channels-first"):
        hv.encode(params, cfg, jnp.zeros((1, 1, 16, 16, 3)))


def test_frame_arithmetic_and_scaling_match_the_pipelines(tiny):
    cfg = hv.HunyuanVideo15VAEConfig()
    for num_frames in (1, 5, 121, 241):
        t = (num_frames - 1) // 4 + 1  # HunyuanVideo15Pipeline.prepare_latents
        assert hv.latent_frames(cfg, num_frames) == t
        assert hv.decoded_frames(cfg, t) == num_frames
    assert (cfg.spatial_compression_ratio, cfg.latent_channels, cfg.scaling_factor) == (16, 32, 1.03682)
    z = _latents((1, 32, 2, 3, 3), 0)
    np.testing.assert_allclose(np.asarray(hv.unscale_latents(cfg, jnp.asarray(z))),
                               (torch.from_numpy(z) / 1.03682).numpy(), rtol=2e-7, atol=0)
    np.testing.assert_array_equal(np.asarray(hv.scale_latents(cfg, jnp.asarray(z))),
                                  (torch.from_numpy(z) * 1.03682).numpy())


def test_decoder_parts_load_alone(tiny):
    _, cfg, params, path = tiny
    _, dec = hk.load_vae(path, parts=hv.DECODER_PARTS)
    assert sorted(dec) == ["decoder"]
    for a, b in zip(jax.tree.leaves(dec), jax.tree.leaves({"decoder": params["decoder"]})):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ValueError, match="VAE encoding needs the parameters"):
        hv.encode(dec, cfg, jnp.zeros((1, 3, 1, 24, 32)))


# -- checkpoints ---------------------------------------------------------------------------------------

# The original module names (hyvideo/models/autoencoders/hunyuanvideo_15_vae.py: Encoder.down[i].block[j] /
# .downsample, Decoder.up[i].block[j] / .upsample, mid.block_1 / attn_1 / block_2, AttnBlock.q / k / v,
# ResnetBlock.nin_shortcut), as diffusers' conversion script renames them (the inverse here).
_TO_ORIGINAL = [
    (r"^(encoder)\.down_blocks\.(\d+)\.resnets\.(\d+)\.", r"\1.down.\2.block.\3."),
    (r"^(encoder)\.down_blocks\.(\d+)\.downsamplers\.0\.", r"\1.down.\2.downsample."),
    (r"^(decoder)\.up_blocks\.(\d+)\.resnets\.(\d+)\.", r"\1.up.\2.block.\3."),
    (r"^(decoder)\.up_blocks\.(\d+)\.upsamplers\.0\.", r"\1.up.\2.upsample."),
    (r"\.mid_block\.resnets\.0\.", ".mid.block_1."),
    (r"\.mid_block\.resnets\.1\.", ".mid.block_2."),
    (r"\.mid_block\.attentions\.0\.to_([qkv])\.", r".mid.attn_1.\1."),
    (r"\.mid_block\.attentions\.0\.", ".mid.attn_1."),
    (r"\.conv_shortcut\.", ".nin_shortcut."),
]


def _original_name(key):
    for pattern, repl in _TO_ORIGINAL:
        key = re.sub(pattern, repl, key)
    return key


def _converted_name(key, layers_per_block=2):
    """diffusers' convert_hunyuan_video_15_vae_checkpoint_to_diffusers, restated key by key (its explicit pops)."""
    m = re.match(r"^encoder\.down\.(\d+)\.block\.(\d+)\.(norm1\.gamma|conv[12]\.conv\.(weight|bias)|norm2\.gamma)$",
                 key)
    if m and int(m.group(2)) < layers_per_block:
        return f"encoder.down_blocks.{m.group(1)}.resnets.{m.group(2)}.{m.group(3)}"
    m = re.match(r"^encoder\.down\.(\d+)\.downsample\.conv\.conv\.(weight|bias)$", key)
    if m:
        return f"encoder.down_blocks.{m.group(1)}.downsamplers.0.conv.conv.{m.group(2)}"
    m = re.match(r"^decoder\.up\.(\d+)\.block\.(\d+)\.(norm1\.gamma|conv[12]\.conv\.(weight|bias)|norm2\.gamma)$", key)
    if m and int(m.group(2)) < layers_per_block + 1:
        return f"decoder.up_blocks.{m.group(1)}.resnets.{m.group(2)}.{m.group(3)}"
    m = re.match(r"^decoder\.up\.(\d+)\.upsample\.conv\.conv\.(weight|bias)$", key)
    if m:
        return f"decoder.up_blocks.{m.group(1)}.upsamplers.0.conv.conv.{m.group(2)}"
    m = re.match(r"^(encoder|decoder)\.mid\.(block_[12])\.(norm1\.gamma|conv[12]\.conv\.(weight|bias)|norm2\.gamma)$",
                 key)
    if m:
        return f"{m.group(1)}.mid_block.resnets.{int(m.group(2)[-1]) - 1}.{m.group(3)}"
    m = re.match(r"^(encoder|decoder)\.mid\.attn_1\.(norm\.gamma|([qkv]|proj_out)\.(weight|bias))$", key)
    if m:
        name = m.group(2) if m.group(3) in (None, "proj_out") else f"to_{m.group(3)}.{m.group(4)}"
        return f"{m.group(1)}.mid_block.attentions.0.{name}"
    if key in ("encoder.conv_in.conv.weight", "encoder.conv_in.conv.bias", "encoder.norm_out.gamma",
               "encoder.conv_out.conv.weight", "encoder.conv_out.conv.bias", "decoder.conv_in.conv.weight",
               "decoder.conv_in.conv.bias", "decoder.norm_out.gamma", "decoder.conv_out.conv.weight",
               "decoder.conv_out.conv.bias"):
        return key
    return None  # the script pops nothing else


def _original_config(cfg):
    return {**RELEASE_ORIGINAL_CONFIG, "in_channels": cfg.in_channels, "out_channels": cfg.out_channels,
            "latent_channels": cfg.latent_channels, "block_out_channels": list(cfg.block_out_channels),
            "layers_per_block": cfg.layers_per_block, "ffactor_spatial": cfg.spatial_compression_ratio,
            "ffactor_temporal": cfg.temporal_compression_ratio,
            "downsample_match_channel": cfg.downsample_match_channel,
            "upsample_match_channel": cfg.upsample_match_channel, "scaling_factor": cfg.scaling_factor}


class _ShapeReader:
    def __init__(self, shapes):
        self.shapes = shapes

    def keys(self):
        return list(self.shapes)

    def shape(self, key):
        return self.shapes[key]


def test_release_layouts_are_covered_exactly():
    """The release's VAE (meta device: shapes only) in both layouts fills every parameter slot exactly once; the
    original names are exactly those diffusers' conversion script turns into the diffusers names."""
    with torch.device("meta"):
        model = AutoencoderKLHunyuanVideo15()
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    cfg = hv.HunyuanVideo15VAEConfig.from_dict(dict(model.config))
    assert cfg == hv.HunyuanVideo15VAEConfig() == hv.HunyuanVideo15VAEConfig.from_original_dict(RELEASE_ORIGINAL_CONFIG)
    plan = plan_load(_ShapeReader(shapes), hk.vae_keymap(cfg), hk.vae_specs(cfg))
    assert sum(len(v) for v in plan.values()) == len(shapes)
    original = {_original_name(k): s for k, s in shapes.items()}
    assert {_converted_name(k): s for k, s in original.items()} == shapes
    plan = plan_load(_ShapeReader(original), hk.vae_keymap_original(cfg), hk.vae_specs(cfg))
    assert sum(len(v) for v in plan.values()) == len(shapes)


@pytest.mark.parametrize("fixture", ["tiny", "unmatched"])
def test_original_layout_loads_the_same_tree(request, tmp_path, fixture):
    model, cfg, params, _ = request.getfixturevalue(fixture)
    state = {_original_name(k): v.contiguous() for k, v in model.state_dict().items()}
    assert ("encoder.down.1.block.0.nin_shortcut.weight" in state) == (fixture == "unmatched")
    save_file(state, str(tmp_path / "diffusion_pytorch_model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(_original_config(cfg)))
    cfg2, params2 = hk.load_vae(tmp_path)
    assert cfg2 == cfg
    assert jax.tree.structure(params2) == jax.tree.structure(params)
    for a, b in zip(jax.tree.leaves(params2), jax.tree.leaves(params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    if fixture == "tiny":  # the same output (a compiled program of the parity tests)
        z = jnp.asarray(_latents((2, 4, 2, 4, 3), 2))
        np.testing.assert_array_equal(np.asarray(hv.decode(params2, cfg2, z)), np.asarray(hv.decode(params, cfg, z)))


def test_strict_loading_names_the_key(tiny, tmp_path):
    model, cfg, _, _ = tiny
    state = {_original_name(k): v.contiguous() for k, v in model.state_dict().items()}
    del state["decoder.mid.attn_1.k.weight"]
    state["decoder.mid.attn_1.extra"] = torch.zeros(1)
    save_file(state, str(tmp_path / "diffusion_pytorch_model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(_original_config(cfg)))
    with pytest.raises(CheckpointError, match=r"decoder\.mid\.attn_1\.k\.weight(.|\n)*decoder\.mid\.attn_1\.extra"):
        hk.load_vae(tmp_path)
    wrong = {k: v.contiguous() for k, v in model.state_dict().items()}
    wrong["encoder.norm_out.gamma"] = torch.ones(5, 1, 1, 1)
    save_file(wrong, str(tmp_path / "diffusion_pytorch_model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(dict(model.config, _class_name="AutoencoderKLHunyuanVideo15")))
    with pytest.raises(CheckpointError, match=r"encoder\.norm_out\.gamma"):
        hk.load_vae(tmp_path)


# -- configurations -------------------------------------------------------------------------------------


def test_config_validation():
    base = {"_class_name": "AutoencoderKLHunyuanVideo15", **TINY, "block_out_channels": [8, 16, 16, 32]}
    assert hv.HunyuanVideo15VAEConfig.from_dict(base) == hv.HunyuanVideo15VAEConfig(**TINY)
    assert hv.HunyuanVideo15VAEConfig.from_dict({**base, "unknown_key": 1}) == hv.HunyuanVideo15VAEConfig(**TINY)
    for bad, msg in [
        ({"_class_name": "AutoencoderKLHunyuanVideo"}, "AutoencoderKLHunyuanVideo'"),
        ({"_class_name": "AutoencoderKLConv3D"}, "from_original_dict"),
        ({"temporal_compression_ratio": 3}, "temporal_compression_ratio=3"),
        ({"temporal_compression_ratio": 16}, "temporal_compression_ratio=16"),
        ({"spatial_compression_ratio": 6}, "spatial_compression_ratio=6"),
        ({"spatial_compression_ratio": 16}, "downsample_match_channel=True with the last block resampling"),
        ({"latent_channels": 3}, r"block_out_channels\[-1\]=32 \(a multiple of 2 \* latent_channels = 6"),
        ({"block_out_channels": [8, 12, 16, 32]}, "encoder block 0's downsampler"),
        ({"latent_channels": "4"}, "latent_channels='4' should be an integer"),
        ({"layers_per_block": 0}, "layers_per_block=0"),
        ({"scaling_factor": -1.0}, "scaling_factor"),
        ({"downsample_match_channel": "yes"}, "downsample_match_channel"),
    ]:
        with pytest.raises(ValueError, match=msg):
            hv.HunyuanVideo15VAEConfig.from_dict({**base, **bad})


def test_original_config_validation():
    for bad, msg in [
        ({"_class_name": "AutoencoderKLHunyuanVideo15"}, "AutoencoderKLHunyuanVideo15"),
        ({"ffactor_spatial": None}, r"lacks \['ffactor_spatial'\]"),
        ({"scaling_factor": None}, r"lacks \['scaling_factor'\]"),
        ({"shift_factor": 0.1}, "shift_factor=0.1 is not supported"),
        ({"ffactor_temporal": 3}, "temporal_compression_ratio=3"),
    ]:
        with pytest.raises(ValueError, match=msg):
            hv.HunyuanVideo15VAEConfig.from_original_dict({**RELEASE_ORIGINAL_CONFIG, **bad})
