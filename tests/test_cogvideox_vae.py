"""Parity of the CogVideoX VAE with diffusers ``AutoencoderKLCogVideoX`` (fp32, CPU, tiny sizes).

Covers the temporal chunking with its convolution cache (decoder: 2 latent frames per call,
first call ``2 + T % 2``; encoder: 8 frames per call, first ``8 + T % 8``), the spatial norms,
and the tiled decode with in-place blending (paper Table 4 fault 14).
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers import AutoencoderKLCogVideoX

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.keymap import KeyMap
from vidax.checkpoint.loader import load_params, plan_load
from vidax.checkpoint.safetensors_io import CheckpointReader
from vidax.core.tiling import blend as blend_tiles
from vidax.models.cogvideox import vae as cv
from vidax.models.cogvideox.config import CogVideoXVAEConfig
from vidax.models.cogvideox.keymap import vae_keymap

H_LAT, W_LAT = 4, 6  # non-square latent; video 32 x 48
TINY = dict(block_out_channels=(8, 16, 16, 16), latent_channels=4, layers_per_block=1, norm_num_groups=4)


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def _load(path):
    cfg = CogVideoXVAEConfig.from_dict(json.loads((path / "config.json").read_text()))
    return cfg, load_params(CheckpointReader(path), vae_keymap(cfg), cv.vae_specs(cfg), np.float32, source=str(path))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    torch.manual_seed(0)
    model = AutoencoderKLCogVideoX(**TINY).eval()
    with torch.no_grad():
        # GroupNorm weights start at 1 and biases at 0: randomise them so a wrong mapping shows.
        for n, p in model.named_parameters():
            if "norm" in n:
                p.copy_(torch.rand_like(p) + 0.5 if n.endswith("weight") else 0.2 * torch.randn_like(p))
    path = tmp_path_factory.mktemp("cogvideox_vae")
    model.save_pretrained(path)
    return (model, *_load(path), path)


@pytest.mark.parametrize("t", [1, 3, 4, 5])
def test_decode_parity(tiny, t):
    model, cfg, params, _ = tiny
    z = np.random.default_rng(t).standard_normal((1, 4, t, H_LAT, W_LAT), dtype=np.float32)
    with torch.no_grad():
        ref = model.decode(torch.from_numpy(z)).sample.numpy()
    out = np.asarray(cv.decode(params, cfg, jnp.asarray(z)))
    assert out.shape == ref.shape == (1, 3, cv.decoded_frames(cfg, t), 8 * H_LAT, 8 * W_LAT)
    assert _rel(out, ref) < 1e-5


@pytest.mark.parametrize("src, dst", [((3, 4, 5), (9, 32, 40)), ((2, 4, 4), (8, 12, 16)), ((3, 5, 4), (7, 8, 6))])
def test_nearest_resize_as_broadcast_equals_torch_interpolate(src, dst):
    """The spatial norm's resize: a broadcast where every axis grows by a whole factor, torch's own nearest
    indices otherwise (non-integer factors take the gather)."""
    z = np.random.default_rng(0).standard_normal((1, 2, *src), dtype=np.float32)
    want = torch.nn.functional.interpolate(torch.from_numpy(z), size=dst).numpy()
    got = cv._resize_nearest_broadcast(jnp.asarray(z.transpose(0, 2, 3, 4, 1)), dst)
    np.testing.assert_array_equal(np.asarray(got).transpose(0, 4, 1, 2, 3), want)


def test_spatial_norm_inputs_are_not_held_at_full_size(tiny):
    """The decoder chunk's temporaries stay within a dozen full-resolution activations. Once XLA computed every
    spatial norm's full-size resized inputs early (they depend only on ``zq`` and weights) and held them: 21
    activations' worth here (2.2 GiB at 9x128x128 at CogVideoX's width). conv_y / conv_b now run at the latent
    size with the resize fused into each norm as a broadcast, and the causal convolutions gather their taps
    (core.layers.conv3d): about 7."""
    _, cfg, params, _ = tiny
    z = jnp.zeros((1, 4, 3, H_LAT, W_LAT), jnp.float32)
    temps = cv.decode_chunk.lower(params, cfg, z, None).compile().memory_analysis().temp_size_in_bytes
    activation = 4 * cv.decoded_frames(cfg, 3) * 8 * H_LAT * 8 * W_LAT * cfg.block_out_channels[0]
    assert temps < 12 * activation, (temps, activation)


@pytest.mark.parametrize("frames", [1, 5, 17])
def test_encode_parity(tiny, frames):
    model, cfg, params, _ = tiny
    x = np.random.default_rng(frames).uniform(-1, 1, (1, 3, frames, 8 * H_LAT, 8 * W_LAT)).astype(np.float32)
    with torch.no_grad():
        dist = model.encode(torch.from_numpy(x)).latent_dist
    mean, logvar = cv.encode(params, cfg, jnp.asarray(x))
    assert mean.shape == tuple(dist.mean.shape)
    assert _rel(mean, dist.mean.numpy()) < 1e-5
    assert _rel(logvar, dist.logvar.numpy()) < 1e-5


def test_chunks_reuse_one_program_and_cache_is_explicit(tiny):
    """Driving decode_chunk by hand reproduces decode; every cache after the first has the same shapes."""
    _, cfg, params, _ = tiny
    z = jnp.asarray(np.random.default_rng(9).standard_normal((1, 4, 7, H_LAT, W_LAT), dtype=np.float32))
    chunks = cv.frame_chunks(7, cv.DECODE_LATENT_FRAMES)
    assert chunks == [(0, 3), (3, 5), (5, 7)]
    cache, outs, shapes = None, [], []
    for a, b in chunks:
        previous = cache
        y, cache = cv.decode_chunk(params, cfg, z[:, :, a:b], cache)
        outs.append(y)
        shapes.append(jax.tree_util.tree_map(lambda x: (x.shape, x.dtype), cache))
        if previous is not None:  # donated: the old cache's buffers went to the new one
            assert all(x.is_deleted() for x in jax.tree.leaves(previous))
    assert shapes[0] == shapes[1] == shapes[2]
    np.testing.assert_array_equal(np.concatenate(outs, axis=2), np.asarray(cv.decode(params, cfg, z)))
    if hasattr(cv.decode_chunk, "_cache_size"):
        before = cv.decode_chunk._cache_size()
        cv.decode(params, cfg, jnp.zeros((1, 4, 9, H_LAT, W_LAT)))
        assert cv.decode_chunk._cache_size() == before  # 9 latent frames: first 3, then 2s; already compiled


def test_frame_chunks_match_reference_batches():
    assert cv.frame_chunks(13, 2) == [(0, 3)] + [(k, k + 2) for k in range(3, 13, 2)]
    assert cv.frame_chunks(1, 2) == [(0, 1)]
    assert cv.frame_chunks(49, 8) == [(0, 9)] + [(k, k + 8) for k in range(9, 49, 8)]
    assert cv.frame_chunks(5, 8) == [(0, 5)]
    assert cv.decoded_frames(CogVideoXVAEConfig(), 13) == 49
    assert cv.decoded_frames(CogVideoXVAEConfig(), 21) == 81


# -- tiling -----------------------------------------------------------------------------------

# 48 x 40 pixel tiles: latent tiles 6 x 5, strides 5 x 4 latents, blends 8 x 8 pixels, kept 40 x 32 pixels,
# i.e. exactly 8x the strides, so the tiled output covers the video once. On a 12 x 12 latent: 3 x 3 tiles.
TILING = cv.VAETiling(tile_sample_min_height=48, tile_sample_min_width=40)
TILED_LATENT = (1, 4, 3, 12, 12)


def test_tiling_quantities_match_reference(tiny):
    model, cfg, _, _ = tiny
    model.enable_tiling(tile_sample_min_height=48, tile_sample_min_width=40)
    try:
        q = TILING.resolve(cfg)
        assert (q["latent_height"], q["latent_width"]) == (model.tile_latent_min_height, model.tile_latent_min_width)
        assert q == {"latent_height": 6, "latent_width": 5, "stride_height": 5, "stride_width": 4,
                     "blend_height": 8, "blend_width": 8, "keep_height": 40, "keep_width": 32}
    finally:
        model.disable_tiling()


def test_tiled_decode_matches_diffusers_tiled_decode(tiny):
    model, cfg, params, _ = tiny
    z = np.random.default_rng(11).standard_normal(TILED_LATENT, dtype=np.float32)
    model.enable_tiling(tile_sample_min_height=48, tile_sample_min_width=40)
    try:
        with torch.no_grad():
            ref = model.decode(torch.from_numpy(z)).sample.numpy()
    finally:
        model.disable_tiling()
    out = np.asarray(cv.decode(params, cfg, jnp.asarray(z), tiling=TILING))
    assert out.shape == ref.shape == (1, 3, 9, 96, 96)
    assert _rel(out, ref) < 1e-5
    # Per-tile GroupNorm statistics make tiled and untiled decoding differ with these weights.
    assert _rel(out, np.asarray(cv.decode(params, cfg, jnp.asarray(z)))) > 1e-2


def test_blending_against_untouched_neighbours_would_be_caught(tiny):
    """Fault 14: blending each tile with the *unblended* neighbours differs from the reference at the
    corners where the vertical and horizontal blends meet; the tiled parity test above would fail."""
    model, cfg, params, _ = tiny
    z = jnp.asarray(np.random.default_rng(11).standard_normal(TILED_LATENT, dtype=np.float32))
    q = TILING.resolve(cfg)
    grid = [[cv._decode_untiled(params, cfg, z[:, :, :, i : i + 6, j : j + 5]) for j in range(0, 12, 4)]
            for i in range(0, 12, 5)]
    faulty_rows = []
    for i, row in enumerate(grid):
        kept = []
        for j, tile in enumerate(row):
            if i > 0:
                tile = blend_tiles(grid[i - 1][j], tile, q["blend_height"], axis=3)  # untouched neighbours
            if j > 0:
                tile = blend_tiles(row[j - 1], tile, q["blend_width"], axis=4)
            kept.append(tile[:, :, :, :40, :32])
        faulty_rows.append(jnp.concatenate(kept, axis=4))
    faulty = np.asarray(jnp.concatenate(faulty_rows, axis=3))
    good = np.asarray(cv.tiled_decode(params, cfg, z, TILING))
    diff = np.abs(faulty - good).max(axis=(0, 1, 2))
    assert diff.max() > 1e-3
    # Only the corner bands (below a horizontal seam, right of a vertical one) differ.
    corner = np.zeros_like(diff, dtype=bool)
    for y0 in (40, 80):
        for x0 in (32, 64):
            corner[y0 : y0 + 8, x0 : x0 + 8] = True
    assert diff[~corner].max() < 1e-6


def _local_decoder(tmp_path):
    """A decoder that is pointwise in space: 3x3 kernels keep only their centre tap and every GroupNorm
    weight is 0 (the signal runs through the residual paths and the spatial norms' zq convolutions).
    Tiles then see exactly what the whole latent sees, so tiled decoding must reproduce untiled decoding:
    any misplaced blend, offset or crop shows as a seam."""
    torch.manual_seed(1)
    model = AutoencoderKLCogVideoX(**TINY).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("weight") and p.ndim >= 4 and p.shape[-1] == 3:
                centre = p[..., 1:2, 1:2].clone()
                p.zero_()
                p[..., 1:2, 1:2] = centre
            elif "norm" in n and n.endswith("weight") and p.ndim == 1:
                p.zero_()
    model.save_pretrained(tmp_path)
    return _load(tmp_path)


def test_tiled_decode_has_no_seams(tmp_path):
    cfg, params = _local_decoder(tmp_path)
    z = jnp.asarray(np.random.default_rng(5).standard_normal(TILED_LATENT, dtype=np.float32))
    full = np.asarray(cv.decode(params, cfg, z))
    tiled = np.asarray(cv.decode(params, cfg, z, tiling=TILING))
    assert tiled.shape == full.shape
    assert full.std() > 0.05  # the comparison is not vacuous
    seams = np.zeros(full.shape[3:], dtype=bool)
    for y0 in (40, 80):  # blend bands: the first 8 rows / columns of every tile after the first
        seams[y0 : y0 + 8, :] = True
    for x0 in (32, 64):
        seams[:, x0 : x0 + 8] = True
    err = np.abs(tiled - full)
    assert err[..., seams].max() < 1e-3
    assert err.max() < 1e-3


# -- checkpoints and configs ---------------------------------------------------------------------


def test_full_size_layout_is_covered_exactly():
    """The real CogVideoX VAE (meta device: shapes only) fills every slot exactly once."""
    with torch.device("meta"):
        model = AutoencoderKLCogVideoX()
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}

    class ShapeReader:
        def keys(self):
            return list(shapes)

        def shape(self, key):
            return shapes[key]

    cfg = CogVideoXVAEConfig.from_dict(dict(model.config))
    plan = plan_load(ShapeReader(), vae_keymap(cfg), cv.vae_specs(cfg))
    assert sum(len(v) for v in plan.values()) == len(shapes)


def test_strict_loading_missing_key(tiny, tmp_path):
    from safetensors.numpy import load_file, save_file

    _, cfg, _, path = tiny
    tensors = load_file(str(path / "diffusion_pytorch_model.safetensors"))
    dropped = "decoder.up_blocks.1.resnets.0.norm2.conv_b.conv.weight"
    del tensors[dropped]
    save_file(tensors, str(tmp_path / "diffusion_pytorch_model.safetensors"))
    with pytest.raises(CheckpointError, match=dropped.replace(".", r"\.")):
        load_params(CheckpointReader(tmp_path), vae_keymap(cfg), cv.vae_specs(cfg), source=str(tmp_path))


def test_load_vae_and_scaling(tiny):
    _, cfg, params, path = tiny
    cfg2, loaded = cv.load_vae(path)
    assert cfg2 == cfg
    assert jax.tree_util.tree_structure(loaded) == jax.tree_util.tree_structure(params)
    assert isinstance(vae_keymap(cfg), KeyMap)
    z = jnp.asarray(np.random.default_rng(0).standard_normal((1, 4, 2, 3, 3), dtype=np.float32))
    ref = (1 / 1.15258426 * torch.from_numpy(np.array(z))).numpy()
    np.testing.assert_array_equal(np.asarray(cv.unscale_latents(cfg, z)), ref)


def test_config_validation():
    cfg = CogVideoXVAEConfig.from_dict({"_class_name": "AutoencoderKLCogVideoX", "scaling_factor": 0.7})
    assert (cfg.spatial_compression, cfg.temporal_compression, cfg.temporal_levels) == (8, 4, 2)
    for bad, msg in [
        ({"use_quant_conv": True}, "use_quant_conv"),
        ({"block_out_channels": [8, 16, 16, 20]}, "norm_num_groups"),
        ({"temporal_compression_ratio": 3}, "temporal_compression_ratio"),
        ({"_class_name": "AutoencoderKLWan"}, "AutoencoderKLWan"),
    ]:
        with pytest.raises(ValueError, match=msg):
            CogVideoXVAEConfig.from_dict(bad)


def test_input_validation(tiny):
    _, cfg, params, _ = tiny
    with pytest.raises(ValueError, match="decode"):
        cv.decode(params, cfg, jnp.zeros((1, 3, 1, 2, 2)))
    with pytest.raises(ValueError, match="encode"):
        cv.encode(params, cfg, jnp.zeros((1, 4, 1, 16, 16)))
