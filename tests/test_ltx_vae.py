"""Parity of the LTX-Video VAE with diffusers ``AutoencoderKLLTXVideo`` (fp32, CPU, tiny configurations).

One tiny configuration per released variant (``scripts/convert_ltx_to_diffusers.py``): 0.9.0 (strided-conv
encoder, plain decoder), 0.9.1 (timestep conditioning, injected noise, residual upsamplers) and 0.9.5+
(space-to-depth downsamplers, explicit compression ratios). Random weights, the parameter-free defaults
(norms, scale/shift tables, noise scales, timestep multiplier, latent statistics) randomised too, written with
``save_pretrained`` and read back through the strict loader. The reference's injected noise comes from
PyTorch's global generator: the tests record its draws and hand them to our decoder as explicit noise.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers import AutoencoderKLLTXVideo

from vidax.checkpoint.loader import load_params, plan_load
from vidax.checkpoint.safetensors_io import CheckpointReader
from vidax.models.ltx import vae as lv

# Patch size 2 and 8x temporal compression: 16x spatial (32 in the releases), 8k + 1 frames as released.
_ENCODER_090 = {"block_out_channels": (8, 8, 16, 16), "layers_per_block": (1, 1, 1, 1, 2)}
TINY = {
    "0.9.0": {**_ENCODER_090, "latent_channels": 4, "patch_size": 2, "decoder_block_out_channels": (8, 8, 16, 16),
              "decoder_layers_per_block": (1, 1, 1, 2, 2)},
    "0.9.1": {**_ENCODER_090, "latent_channels": 4, "patch_size": 2, "decoder_block_out_channels": (8, 16, 32),
              "decoder_layers_per_block": (1, 2, 1, 2), "decoder_spatio_temporal_scaling": (True, True, True),
              "decoder_inject_noise": (True, True, False, True), "upsample_residual": (True, True, True),
              "upsample_factor": (2, 2, 2), "timestep_conditioning": True},
    "0.9.5": {"latent_channels": 4, "patch_size": 2, "block_out_channels": (8, 16, 32, 32, 64),
              "down_block_types": ("LTXVideo095DownBlock3D",) * 4, "layers_per_block": (1, 1, 1, 2, 1),
              "spatio_temporal_scaling": (True,) * 4,
              "downsample_type": ("spatial", "temporal", "spatiotemporal", "spatiotemporal"),
              "decoder_block_out_channels": (8, 16, 32), "decoder_layers_per_block": (1, 1, 2, 1),
              "decoder_spatio_temporal_scaling": (True,) * 3, "decoder_inject_noise": (False,) * 4,
              "upsample_residual": (True,) * 3, "upsample_factor": (2,) * 3, "timestep_conditioning": True,
              "spatial_compression_ratio": 16, "temporal_compression_ratio": 8},
}
TIMESTEPS = np.array([0.05, 0.3], np.float32)


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def _load(path):
    cfg = lv.LTXVideoVAEConfig.from_dict(json.loads((path / "config.json").read_text()))
    return cfg, load_params(CheckpointReader(path), lv.vae_keymap(cfg), lv.vae_specs(cfg), np.float32, source=str(path))


@pytest.fixture(scope="module")
def make(tmp_path_factory):
    """``make(name) -> (model, cfg, params, path)``: the tiny variant built once per module."""
    made = {}

    def get(name):
        if name not in made:
            torch.manual_seed(0)
            model = AutoencoderKLLTXVideo(**TINY[name]).eval()
            with torch.no_grad():
                for key, p in model.state_dict().items():  # parameters and buffers (latent statistics)
                    if key.endswith("timestep_scale_multiplier"):
                        p.fill_(937.0)
                    elif "norm" in key or "scale" in key or key.startswith("latents_"):
                        positive = key.endswith("weight") or key == "latents_std"
                        p.copy_(torch.rand_like(p) + 0.5 if positive else 0.3 * torch.randn_like(p))
            path = tmp_path_factory.mktemp(f"ltx_vae_{name}")
            model.save_pretrained(path)
            made[name] = (model, *_load(path), path)
        return made[name]

    return get


@pytest.fixture(scope="module", params=list(TINY))
def variant(request, make):
    return make(request.param)


@pytest.fixture(scope="module")
def v091(make):
    return make("0.9.1")


@pytest.fixture(scope="module")
def v095(make):
    return make("0.9.5")


class _Recorder:
    """Wraps ``torch.randn`` to keep the reference's injected noise, in draw order."""

    def __init__(self, monkeypatch):
        self.draws, real = [], torch.randn

        def randn(*args, **kwargs):
            out = real(*args, **kwargs)
            self.draws.append(out.numpy().copy())
            return out

        monkeypatch.setattr(torch, "randn", randn)

    def noise_per_call(self, cfg, latent_sizes):
        """The draws as our per-call noise trees, for decoder calls on latents of the given ``(h, w)`` sizes."""
        it, calls = iter(self.draws), []
        for h, w in latent_sizes:
            shapes = lv.decoder_noise_shapes(cfg, h, w)
            ordered = [("mid_block",)] * ("mid_block" in shapes)
            ordered += [("up_blocks", k) for k in shapes.get("up_blocks", {})]
            tree: dict = {}
            for path in ordered:
                n, _, hh, ww = shapes[path[0]] if len(path) == 1 else shapes[path[0]][path[1]]
                maps = np.stack([np.stack([next(it), next(it)]) for _ in range(n)])
                assert maps.shape == (n, 2, hh, ww)
                (tree if len(path) == 1 else tree.setdefault("up_blocks", {}))[path[-1]] = maps
            calls.append(tree)
        assert next(it, None) is None  # every draw used
        return calls


def _np_blend(a, b, extent, axis):
    """The reference's ``blend_v`` / ``blend_h`` / ``blend_t`` in NumPy, on a copy of ``b``."""
    a, b = np.moveaxis(np.asarray(a), axis, 0), np.moveaxis(np.array(b), axis, 0)
    extent = min(a.shape[0], b.shape[0], extent)
    for y in range(extent):
        b[y] = a[y - extent] * np.float32(1 - y / extent) + b[y] * np.float32(y / extent)
    return np.moveaxis(b, 0, axis)


def _reference_decode(model, z, t):
    with torch.no_grad():
        return model.decode(torch.from_numpy(z), None if t is None else torch.from_numpy(t)).sample.numpy()


# -- encode / decode parity -------------------------------------------------------------------------


@pytest.mark.parametrize("name, frames", [("0.9.0", 9), ("0.9.0", 1), ("0.9.5", 17), ("0.9.5", 1)])
def test_encode_parity(name, frames, make):
    model, cfg, params, _ = make(name)
    x = np.random.default_rng(frames).uniform(-1, 1, (1, 3, frames, 32, 48)).astype(np.float32)
    with torch.no_grad():
        dist = model.encode(torch.from_numpy(x)).latent_dist
    mean, logvar = lv.encode(params, cfg, jnp.asarray(x))
    assert mean.shape == logvar.shape == tuple(dist.mean.shape) == (1, 4, lv.latent_frames(cfg, frames), 2, 3)
    assert _rel(mean, dist.mean.numpy()) < 1e-5
    assert _rel(logvar, dist.logvar.numpy()) < 1e-5


@pytest.mark.parametrize("t", [2, 3])
def test_decode_parity(variant, t, monkeypatch):
    """B = 2 with a different decode timestep per sample where the VAE is conditioned (0.9.1, 0.9.5); the 0.9.1
    decoder's injected noise is the reference's own draws."""
    model, cfg, params, _ = variant
    z = np.random.default_rng(t).standard_normal((2, 4, t, 2, 3), dtype=np.float32)
    ts = TIMESTEPS if cfg.timestep_conditioning else None
    rec = _Recorder(monkeypatch)
    ref = _reference_decode(model, z, ts)
    noise = rec.noise_per_call(cfg, [(2, 3)])[0] if cfg.injects_noise else None
    out = np.asarray(lv.decode(params, cfg, jnp.asarray(z), ts, noise=noise))
    assert out.shape == ref.shape == (2, 3, lv.decoded_frames(cfg, t), 32, 48)
    assert _rel(out, ref) < 1e-5
    if cfg.timestep_conditioning:  # the timestep reaches the output
        other = lv.decode(params, cfg, jnp.asarray(z), TIMESTEPS[::-1].copy(), noise=noise)
        assert _rel(other, ref) > 1e-3
    if cfg.injects_noise:  # and so does the noise
        quiet = jax.tree.map(np.zeros_like, noise)
        assert _rel(lv.decode(params, cfg, jnp.asarray(z), ts, noise=quiet), ref) > 1e-3


def test_keyed_noise_is_the_explicit_noise_of_each_call(v091):
    """``key`` draws call ``k``'s noise from ``fold_in(key, k)``: the same numbers as passing that noise; the same key
    gives the same video, another key another; the maps are standard normal."""
    _, cfg, params, _ = v091
    z = jnp.asarray(np.random.default_rng(4).standard_normal((2, 4, 2, 2, 3), dtype=np.float32))  # (compiled above)
    key = jax.random.key(7)
    keyed = np.asarray(lv.decode(params, cfg, z, 0.05, key=key))
    explicit = lv.draw_decoder_noise(cfg, jax.random.fold_in(key, 0), 2, 3)
    np.testing.assert_array_equal(keyed, np.asarray(lv.decode(params, cfg, z, 0.05, noise=explicit)))
    np.testing.assert_array_equal(keyed, np.asarray(lv.decode(params, cfg, z, 0.05, key=jax.random.key(7))))
    assert _rel(lv.decode(params, cfg, z, 0.05, key=jax.random.key(8)), keyed) > 1e-3
    maps = np.concatenate([np.ravel(a) for a in jax.tree.leaves(lv.draw_decoder_noise(cfg, key, 64, 64))])
    assert maps.size > 100_000 and abs(maps.mean()) < 0.01 and abs(maps.std() - 1) < 0.01


# -- tiling ---------------------------------------------------------------------------------------


TILE_SETTINGS = ("tile_sample_min_height", "tile_sample_min_width", "tile_sample_min_num_frames",
                 "tile_sample_stride_height", "tile_sample_stride_width", "tile_sample_stride_num_frames")


def test_tiling_defaults_match_reference(v095):
    model, cfg, _, _ = v095
    want = {k: getattr(model, k) for k in TILE_SETTINGS}
    tiling = lv.LTXVideoTiling()
    assert {k: getattr(tiling, k) for k in want} == want
    assert (tiling.spatial, tiling.temporal) == (True, False)  # enable_tiling() / use_framewise_decoding
    with pytest.raises(ValueError, match="tile_sample_stride_width must be at least 16"):
        lv.LTXVideoTiling(tile_sample_stride_width=8).resolve(cfg)
    with pytest.raises(ValueError, match="at most tile_sample_min_num_frames"):
        lv.LTXVideoTiling(tile_sample_min_num_frames=8, tile_sample_stride_num_frames=16).resolve(cfg)


# 48-pixel tiles every 32 pixels: latent tiles of 3 every 2, blended over 16 pixels. On a 4 x 5 latent: 2 x 3 tiles.
SPATIAL = lv.LTXVideoTiling(tile_sample_min_height=48, tile_sample_min_width=48, tile_sample_stride_height=32,
                            tile_sample_stride_width=32)


def _enable(model, tiling):
    model.enable_tiling(**{k: getattr(tiling, k) for k in TILE_SETTINGS})
    model.use_tiling, model.use_framewise_decoding = tiling.spatial, tiling.temporal


def _disable(model):
    model.use_tiling = model.use_framewise_decoding = False


def test_spatially_tiled_decode_matches_reference(v095):
    model, cfg, params, _ = v095
    z = np.random.default_rng(11).standard_normal((1, 4, 2, 4, 5), dtype=np.float32)
    _enable(model, SPATIAL)
    try:
        ref = _reference_decode(model, z, TIMESTEPS[:1])
    finally:
        _disable(model)
    out = np.asarray(lv.decode(params, cfg, jnp.asarray(z), TIMESTEPS[:1], tiling=SPATIAL))
    assert out.shape == ref.shape == (1, 3, 9, 64, 80)
    assert _rel(out, ref) < 1e-5
    # Tiles see less context than the whole latent: tiling changes the output with these weights.
    assert _rel(_reference_decode(model, z, TIMESTEPS[:1]), ref) > 1e-2
    np.testing.assert_array_equal(out, np.asarray(lv.tiled_decode(params, cfg, jnp.asarray(z), TIMESTEPS[:1],
                                                                   tiling=SPATIAL)))

    # Fault 14: blending each tile with its neighbours as decoded (not as blended and written back) differs
    # from the reference where the vertical and horizontal blends meet.
    zz, q = jnp.asarray(z), SPATIAL.resolve(cfg)
    t = jnp.asarray(TIMESTEPS[:1])
    grid = [[np.asarray(lv.decode_tile(params, cfg, zz[:, :, :, i : i + 3, j : j + 3], t)) for j in (0, 2, 4)]
            for i in (0, 2)]
    rows = []
    for i, row in enumerate(grid):
        kept = []
        for j, tile in enumerate(row):
            if i > 0:
                tile = _np_blend(grid[i - 1][j], tile, q["blend_height"], axis=3)
            if j > 0:
                tile = _np_blend(row[j - 1], tile, q["blend_width"], axis=4)
            kept.append(tile[:, :, :, :32, :32])
        rows.append(np.concatenate(kept, axis=4))
    faulty = np.concatenate(rows, axis=3)[..., :80]
    corner = np.zeros(faulty.shape[3:], bool)
    corner[32:48, 32:48] = corner[32:48, 64:80] = True  # below the seam and right of a vertical one
    np.testing.assert_allclose(faulty[..., ~corner], ref[..., ~corner], rtol=1e-4, atol=1e-5)
    assert _rel(faulty[..., corner], ref[..., corner]) > 1e-3


# 24-frame tiles every 8 frames: latent tiles of 4 frames every 1, blended over 16 frames. On 4 latent frames the
# third tile (8 frames) blends with the second one's last 8, which the second's own blend rewrote.
TEMPORAL = lv.LTXVideoTiling(temporal=True, tile_sample_min_num_frames=24, tile_sample_stride_num_frames=8)


def test_temporally_tiled_decode_matches_reference(v095):
    model, cfg, params, _ = v095
    z = np.random.default_rng(12).standard_normal((1, 4, 4, 2, 2), dtype=np.float32)
    _enable(model, TEMPORAL)
    try:
        ref = _reference_decode(model, z, TIMESTEPS[1:])
    finally:
        _disable(model)
    out = np.asarray(lv.decode(params, cfg, jnp.asarray(z), TIMESTEPS[1:], tiling=TEMPORAL))
    assert out.shape == ref.shape == (1, 3, 25, 32, 32)
    assert _rel(out, ref) < 1e-5
    assert _rel(_reference_decode(model, z, TIMESTEPS[1:]), ref) > 1e-2

    # Without the write-back, the third tile blends with the second as decoded: frames 17-24 differ.
    zz, t, q = jnp.asarray(z), jnp.asarray(TIMESTEPS[1:]), TEMPORAL.resolve(cfg)
    row = [np.asarray(lv.decode_tile(params, cfg, zz[:, :, i : i + 4], t)) for i in range(4)]
    row = [row[0]] + [r[:, :, :-1] for r in row[1:]]
    kept = [row[0][:, :, :9]] + [_np_blend(row[i - 1], row[i], q["blend_frames"], axis=2)[:, :, :8] for i in (1, 2, 3)]
    faulty = np.concatenate(kept, axis=2)
    np.testing.assert_allclose(faulty[:, :, :17], ref[:, :, :17], rtol=1e-4, atol=1e-5)
    assert _rel(faulty[:, :, 17:], ref[:, :, 17:]) > 1e-3


def test_temporal_and_spatial_tiles_draw_noise_in_reference_order(v091, monkeypatch):
    """Frame tiles, each split into overlapping width tiles: every decoder call draws its own noise, in the
    reference's order. (Frame tiles abut here, 2 latent frames every 1 with the last decoded frame dropped: the
    frame blending is the test above's.)"""
    model, cfg, params, _ = v091
    tiling = lv.LTXVideoTiling(temporal=True, tile_sample_min_height=64, tile_sample_min_width=32,
                               tile_sample_stride_height=64, tile_sample_stride_width=16,
                               tile_sample_min_num_frames=8, tile_sample_stride_num_frames=8)
    z = np.random.default_rng(13).standard_normal((1, 4, 3, 2, 3), dtype=np.float32)
    rec = _Recorder(monkeypatch)
    _enable(model, tiling)
    try:
        ref = _reference_decode(model, z, TIMESTEPS[:1])
    finally:
        _disable(model)
    # Frame tiles start at latent frames 0, 1, 2 (2, 2, 1 frames); each is cut into width tiles at 0, 1, 2 (2, 2, 1).
    sizes = [(2, w) for _ in range(3) for w in (2, 2, 1)]
    noise = rec.noise_per_call(cfg, sizes)
    out = np.asarray(lv.decode(params, cfg, jnp.asarray(z), TIMESTEPS[:1], noise=noise, tiling=tiling))
    assert out.shape == ref.shape == (1, 3, 17, 32, 48)
    assert _rel(out, ref) < 1e-5
    swapped = [noise[1], noise[0], *noise[2:]]  # two calls of the same shape
    assert _rel(lv.decode(params, cfg, jnp.asarray(z), TIMESTEPS[:1], noise=swapped, tiling=tiling), ref) > 1e-3
    with pytest.raises(ValueError, match="noise holds 8 decoder calls' noise, but this decode makes more"):
        lv.decode(params, cfg, jnp.asarray(z), TIMESTEPS[:1], noise=noise[:8], tiling=tiling)


# -- latent statistics, loading ----------------------------------------------------------------------


def test_latent_normalisation_matches_pipeline(v095):
    from diffusers.pipelines.ltx.pipeline_ltx import LTXPipeline

    model, _, params, _ = v095
    z = np.random.default_rng(2).standard_normal((1, 4, 2, 3, 3), dtype=np.float32)
    mean, std = model.latents_mean, model.latents_std
    ref_n = LTXPipeline._normalize_latents(torch.from_numpy(z), mean, std, 0.7).numpy()
    ref_d = LTXPipeline._denormalize_latents(torch.from_numpy(z), mean, std, 0.7).numpy()
    for ours, ref in ((lv.normalize_latents, ref_n), (lv.denormalize_latents, ref_d)):
        np.testing.assert_allclose(np.asarray(ours(params, jnp.asarray(z), 0.7)), ref, rtol=1e-6, atol=1e-6)
    assert np.abs(ref_n - z).max() > 0.1  # the statistics were randomised: a missed mapping would show


def test_decoder_side_loads_alone(v095):
    _, cfg, params, path = v095
    cfg2, dec = lv.load_vae(path, jnp.bfloat16, parts=lv.DECODER_PARTS)
    assert cfg2 == cfg and sorted(dec) == sorted(lv.DECODER_PARTS)
    assert dec["decoder"]["conv_in"]["conv"]["kernel"].dtype == jnp.bfloat16
    pinned = [dec["latents_std"], dec["decoder"]["scale_shift_table"], dec["decoder"]["timestep_scale_multiplier"],
              dec["decoder"]["mid_block"]["resnets"]["scale_shift_table"],
              dec["decoder"]["time_embedder"]["timestep_embedder"]["linear_1"]["kernel"]]
    assert all(a.dtype == jnp.float32 for a in pinned)
    with pytest.raises(ValueError, match="VAE encoding needs the parameters"):
        lv.encode(dec, cfg, jnp.zeros((1, 3, 1, 16, 16)))
    assert jax.tree.structure(lv.load_vae(path)[1]) == jax.tree.structure(params)


# The released configurations, from diffusers' scripts/convert_ltx_to_diffusers.py (0.9.7 and 0.9.8 share 0.9.5's).
_RELEASED_091_DECODER = {"decoder_block_out_channels": (256, 512, 1024), "decoder_layers_per_block": (5, 6, 7, 8),
                         "decoder_spatio_temporal_scaling": (True, True, True), "upsample_residual": (True, True, True),
                         "upsample_factor": (2, 2, 2), "timestep_conditioning": True}
RELEASED = {
    "0.9.0": {"decoder_inject_noise": (False,) * 5},
    "0.9.1": {**_RELEASED_091_DECODER, "decoder_inject_noise": (True, True, True, False)},
    "0.9.5": {**_RELEASED_091_DECODER, "decoder_layers_per_block": (5, 5, 5, 5), "decoder_inject_noise": (False,) * 4,
              "block_out_channels": (128, 256, 512, 1024, 2048), "down_block_types": ("LTXVideo095DownBlock3D",) * 4,
              "layers_per_block": (4, 6, 6, 2, 2), "spatio_temporal_scaling": (True,) * 4,
              "downsample_type": ("spatial", "temporal", "spatiotemporal", "spatiotemporal"),
              "spatial_compression_ratio": 32, "temporal_compression_ratio": 8},
}


@pytest.mark.parametrize("version", list(RELEASED))
def test_released_layouts_are_covered_exactly(version):
    """The full-size released VAEs (meta device: shapes only) fill every parameter slot exactly once."""
    with torch.device("meta"):
        model = AutoencoderKLLTXVideo(**RELEASED[version])
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}

    class ShapeReader:
        def keys(self):
            return list(shapes)

        def shape(self, key):
            return shapes[key]

    cfg = lv.LTXVideoVAEConfig.from_dict(json.loads(json.dumps(dict(model.config))))
    assert (cfg.spatial_compression, cfg.temporal_compression, cfg.latent_channels) == (32, 8, 128)
    assert cfg.injects_noise == (version == "0.9.1")
    plan = plan_load(ShapeReader(), lv.vae_keymap(cfg), lv.vae_specs(cfg))
    assert sum(len(v) for v in plan.values()) == len(shapes)


# -- errors -------------------------------------------------------------------------------------------


def test_config_errors():
    base = {"_class_name": "AutoencoderKLLTXVideo", "_diffusers_version": "0.32.0"}
    assert lv.LTXVideoVAEConfig.from_dict(base) == lv.LTXVideoVAEConfig()
    for bad, msg in [
        ({"_class_name": "AutoencoderKLCogVideoX"}, "not 'AutoencoderKLLTXVideo'"),
        ({"use_quant_conv": True}, r"unknown config keys \['use_quant_conv'\]"),
        ({"patch_size_t": 2}, "patch_size_t=2 .only 1"),
        ({"latent_channels": "128"}, "latent_channels='128' should be an integer"),
        ({"down_block_types": ["LTXVideoDownBlock3D"] * 3 + ["CogVideoXDownBlock3D"]}, "unsupported down_block_types"),
        ({"downsample_type": ["spatial", "pixelshuffle", "conv", "conv"],
          "block_out_channels": [128, 256, 512, 512, 512], "down_block_types": ["LTXVideo095DownBlock3D"] * 4},
         "downsample_type.1.='pixelshuffle'"),
        ({"timestep_conditioning": True},
         "up block 2 changes width 512 -> 256 .a conv_in resnet. with timestep_conditioning"),
        ({"decoder_layers_per_block": [4, 3, 3, 3]},
         "decoder_layers_per_block has 4 entries, a decoder of 4 up blocks and its mid block needs 5"),
        (RELEASED["0.9.5"] | {"spatial_compression_ratio": None},
         r'reference derives 64 .* compresses by 32; set "spatial_compression_ratio": 32'),
        ({"decoder_spatio_temporal_scaling": [True, True, False, False]},
         "the encoder compresses by 32 and the decoder expands by 16"),
    ]:
        with pytest.raises(ValueError, match=msg):
            lv.LTXVideoVAEConfig.from_dict({**base, **bad})


def test_input_errors(v091):
    _, cfg, params, _ = v091
    z, key = jnp.zeros((1, 4, 2, 2, 2)), jax.random.key(0)
    for call, msg in [
        (lambda: lv.encode(params, cfg, jnp.zeros((1, 4, 9, 32, 32))), r"expected video \(B, 3, T, H, W\)"),
        (lambda: lv.encode(params, cfg, jnp.zeros((1, 3, 8, 32, 32))), "8 frames; .* 8k . 1 frames .*: use 1 or 9"),
        (lambda: lv.encode(params, cfg, jnp.zeros((1, 3, 9, 40, 32))), "height 40 is not a .* of 16; .*32 or 48"),
        (lambda: lv.decode(params, cfg, jnp.zeros((1, 3, 2, 2, 2)), 0.05, key=key), r"expected latents \(B, 4,"),
        (lambda: lv.decode(params, cfg, jnp.zeros((1, 2, 2, 2, 4)), 0.05), "move the channel axis"),
        (lambda: lv.decode(params, cfg, z, key=key), "pass timestep="),
        (lambda: lv.decode(params, cfg, z, [0.1, 0.2], key=key), r"timestep must be a number or \(1,\)"),
        (lambda: lv.decode(params, cfg, z, 0.05), "pass exactly one of key=jax.random.key"),
        (lambda: lv.decode(params, cfg, z, 0.05, noise=lv.draw_decoder_noise(cfg, key, 2, 3)),
         r"noise\[0\] has shapes"),
    ]:
        with pytest.raises(ValueError, match=msg):
            call()


def test_unconditioned_vae_refuses_timestep_and_noise(make):
    _, cfg, params, _ = make("0.9.0")
    z = jnp.zeros((1, 4, 1, 2, 2))
    with pytest.raises(ValueError, match="no timestep conditioning .*pass timestep=None"):
        lv.decode(params, cfg, z, 0.05)
    with pytest.raises(ValueError, match="injects none"):
        lv.decode(params, cfg, z, noise={})


# -- last: clears JAX's caches ------------------------------------------------------------------------


def test_accelerator_convolution_path(make, monkeypatch):
    """``core.layers.conv3d`` runs one 3D convolution off CPU (cuDNN, TPU) and a tap loop on CPU; the edge-frame
    padding (zero padding plus edge corrections) must hold on both. The accelerator branch, traced on CPU:"""
    model, cfg, params, _ = make("0.9.0")  # causal strided encoder convolutions, non-causal decoder
    x = np.random.default_rng(5).uniform(-1, 1, (1, 3, 9, 32, 32)).astype(np.float32)
    z = np.random.default_rng(6).standard_normal((1, 4, 2, 2, 2), dtype=np.float32)
    with torch.no_grad():
        mean_ref = model.encode(torch.from_numpy(x)).latent_dist.mean.numpy()
    video_ref = _reference_decode(model, z, None)
    # Traces are cached per function across jit objects: clear them so the programs are traced afresh under the
    # patch (and so the patched traces serve no later test).
    jax.clear_caches()
    try:
        with monkeypatch.context() as m:
            m.setattr(jax, "default_backend", lambda: "gpu")
            text = lv._decode_program.lower(params, cfg, jnp.asarray(z), None, None).as_text()
            assert text.count("stablehlo.while") == 5  # the 5 scans over resnets, no convolution tap loops
            mean = lv.encode(params, cfg, jnp.asarray(x))[0]
            video = lv.decode(params, cfg, jnp.asarray(z))
    finally:
        jax.clear_caches()
    assert _rel(mean, mean_ref) < 1e-5
    assert _rel(video, video_ref) < 1e-5
