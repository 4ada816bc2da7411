"""Parity of the LTX-2 video VAE decoder (diffusers ``AutoencoderKLLTX2Video``) and the pipeline's decode preparation
(fp32 and bf16, CPU, tiny configurations).

Random weights (latent statistics randomised too) written by the reference class with ``save_pretrained`` and read
back through our strict loader.
"""

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers import AutoencoderKLLTX2Video
from diffusers.pipelines.ltx2.pipeline_ltx2 import LTX2Pipeline

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.loader import plan_load
from vidax.checkpoint.safetensors_io import CheckpointReader
from vidax.models.ltx2 import vae as lvae

_ENC = dict(block_out_channels=(8, 16, 32, 64), layers_per_block=(1, 1, 1, 1, 1), latent_channels=8)
# "release": the LTX-2.x block structure (diffusers convert_ltx2_to_diffusers.py, version 2.0) at tiny widths: three
# residual spatiotemporal up blocks halving the width, reflect padding, a non-causal decoder, no timestep conditioning.
# "tc": the other branches: timestep conditioning, spatial / temporal / spatiotemporal upsamplers, zero padding, causal,
# an encoder block without downsampler, a block without resnets.
TINY = {
    "release": dict(**_ENC, decoder_block_out_channels=(16, 32, 64), decoder_layers_per_block=(2, 1, 2, 1),
                    decoder_spatio_temporal_scaling=(True, True, True), upsample_residual=(True, True, True),
                    upsample_factor=(2, 2, 2), timestep_conditioning=False, decoder_causal=False,
                    decoder_spatial_padding_mode="reflect", spatial_compression_ratio=32, temporal_compression_ratio=8),
    "tc": dict(block_out_channels=(8, 16, 32, 32), layers_per_block=(1, 0, 1, 1, 2), latent_channels=8,
               spatio_temporal_scaling=(True, True, True, False),
               decoder_block_out_channels=(16, 32, 64), decoder_layers_per_block=(1, 2, 1, 1),
               upsample_type=("spatial", "temporal", "spatiotemporal"), upsample_residual=(True, False, True),
               upsample_factor=(1, 2, 2), timestep_conditioning=True, decoder_causal=True,
               decoder_spatial_padding_mode="zeros"),
}


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


@pytest.fixture(scope="module", params=list(TINY))
def vae(request, tmp_path_factory):
    torch.manual_seed(0)
    model = AutoencoderKLLTX2Video(**TINY[request.param]).eval()
    with torch.no_grad():
        model.latents_mean.copy_(0.3 * torch.randn_like(model.latents_mean))
        model.latents_std.copy_(torch.rand_like(model.latents_std) + 0.5)
        for key, p in model.state_dict().items():
            if key.endswith("norm3.weight"):
                p.copy_(torch.rand_like(p) + 0.5)
            elif key.endswith("norm3.bias"):
                p.copy_(0.3 * torch.randn_like(p))
    path = tmp_path_factory.mktemp(f"ltx2_vae_{request.param}")
    model.save_pretrained(path)
    cfg, params = lvae.load_vae(path)
    return request.param, model, cfg, params, path


def _latents(cfg, seed=1, b=2):
    return np.random.default_rng(seed).standard_normal((b, cfg.latent_channels, 2, 2, 3)).astype(np.float32)


def _reference(model, z, t):
    with torch.no_grad():
        return model.decode(torch.from_numpy(z), None if t is None else torch.tensor(t)).sample.numpy()


def test_decoder_matches_reference(vae):
    name, model, cfg, params, _ = vae
    z = _latents(cfg)
    t = [0.05, 0.3] if cfg.timestep_conditioning else None
    ref = _reference(model, z, t)
    out = np.asarray(lvae.decode(params, cfg, z, t))
    if name == "release":
        assert cfg.spatial_compression == 32 and cfg.temporal_compression == 8
        assert out.shape == ref.shape == (2, 3, 9, 64, 96)
    else:
        assert out.shape == ref.shape
    assert _rel(out, ref) < 1e-5


def test_decoder_bf16(vae):
    """bf16 kernels (LayerNorm, tables, embedders and statistics stay float32 leaves) against the float32 reference."""
    name, model, cfg, _, path = vae
    _, bf16 = lvae.load_vae(path, dtype=jnp.bfloat16)
    assert bf16["decoder"]["conv_in"]["conv"]["kernel"].dtype == jnp.bfloat16
    assert bf16["latents_std"].dtype == jnp.float32
    z = _latents(cfg, seed=2)
    t = [0.05, 0.3] if cfg.timestep_conditioning else None
    assert _rel(lvae.decode(bf16, cfg, z, t), _reference(model, z, t)) < 1e-2


def test_decode_preparation_matches_pipeline(vae):
    """``LTX2Pipeline.__call__``'s lines before ``vae.decode`` (restated: they sit inside ``__call__``)."""
    _, model, cfg, params, _ = vae
    rng = np.random.default_rng(3)
    lat, noise = _latents(cfg, seed=4), rng.standard_normal((2, cfg.latent_channels, 2, 2, 3)).astype(np.float32)
    dt, ns = [0.05, 0.1], 0.025
    ref = torch.from_numpy(lat)
    if cfg.timestep_conditioning:
        s = torch.tensor([ns] * 2)[:, None, None, None, None]
        ref = (1 - s) * ref + s * torch.from_numpy(noise)
    ref = LTX2Pipeline._denormalize_latents(ref, model.latents_mean, model.latents_std, model.config.scaling_factor)
    z, t = lvae.prepare_decode_latents(params, cfg, lat, dt, ns, noise)
    assert _rel(z, ref.numpy()) < 1e-6
    if cfg.timestep_conditioning:
        np.testing.assert_allclose(np.asarray(t), dt)
        # default decode_noise_scale = decode_timestep
        z2, _ = lvae.prepare_decode_latents(params, cfg, lat, dt, None, noise)
        s = np.asarray(dt, np.float32)[:, None, None, None, None]
        expect = LTX2Pipeline._denormalize_latents(torch.from_numpy((1 - s) * lat + s * noise), model.latents_mean,
                                                   model.latents_std).numpy()
        assert _rel(z2, expect) < 1e-6
        with pytest.raises(ValueError, match="noise"):
            lvae.prepare_decode_latents(params, cfg, lat, dt)
    else:
        assert t is None


def test_config_and_argument_errors(vae):
    name, model, cfg, params, _ = vae
    assert lvae.LTX2VideoVAEConfig.from_dict(dict(model.config)) == cfg
    with pytest.raises(ValueError, match="AutoencoderKLLTXVideo"):
        lvae.LTX2VideoVAEConfig.from_dict({"_class_name": "AutoencoderKLLTXVideo"})
    with pytest.raises(ValueError, match="inject_noise"):
        lvae.LTX2VideoVAEConfig(**TINY[name] | {"decoder_inject_noise": True})
    with pytest.raises(ValueError, match="latents"):
        lvae.decode(params, cfg, np.zeros((1, 3, 2, 2, 2), np.float32))
    with pytest.raises(ValueError, match="timestep"):
        lvae.decode(params, cfg, _latents(cfg), None if cfg.timestep_conditioning else 0.05)



def test_unreadable_config_is_named(tmp_path):
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(CheckpointError, match="config.json: expected a JSON object"):
        lvae.load_vae(tmp_path)


def test_keymap_covers_checkpoint(vae):
    _, _, cfg, _, path = vae
    plan = plan_load(CheckpointReader(path), lvae.vae_keymap(cfg), lvae.vae_specs_and_rules(cfg)[0], source=str(path))
    assert sum(len(v) for v in plan.values()) == sum(1 for _ in CheckpointReader(path).keys())


def test_encoder_matches_reference(vae):
    _, model, cfg, _, path = vae
    _, params = lvae.load_vae(path, parts=lvae.ENCODER_PARTS)
    s = cfg.spatial_compression
    video = np.random.default_rng(5).uniform(-1, 1, (1, 3, 2 * cfg.temporal_compression + 1, 2 * s, s))
    video = video.astype(np.float32)
    with torch.no_grad():
        dist = model.encode(torch.from_numpy(video)).latent_dist
    mean, logvar = lvae.encode(params, cfg, video)
    assert mean.shape == dist.mean.shape == (1, cfg.latent_channels, 3, 2, 1)
    assert _rel(mean, dist.mean.numpy()) < 1e-5
    assert _rel(logvar, dist.logvar.numpy()) < 1e-5
    with pytest.raises(ValueError, match="frames"):
        lvae.encode(params, cfg, video[:, :, :-1])


class _UpstreamNorm3(torch.nn.Module):
    """Upstream ltx-core ``ResnetBlock3D.norm3`` restated: ``nn.GroupNorm(num_groups=1, C, eps, affine=True)`` over
    ``(B, C, T, H, W)`` (diffusers: ``nn.LayerNorm(C)`` per position). Called as diffusers calls its norm3: on the
    channels-last tensor."""

    def __init__(self, ln):
        super().__init__()
        self.weight, self.bias, self.eps = ln.weight, ln.bias, ln.eps

    def forward(self, x):
        return torch.nn.functional.group_norm(x.movedim(-1, 1), 1, self.weight, self.bias, self.eps).movedim(1, -1)


def test_width_changing_resnet_follows_upstream(tmp_path):
    """An up block with a ``conv_in`` resnet (upstream ``res_x_y``; no release has one): its shortcut norm is
    upstream's GroupNorm(1), not diffusers' LayerNorm."""
    torch.manual_seed(0)
    model = AutoencoderKLLTX2Video(**_ENC, decoder_block_out_channels=(16, 32, 64), upsample_factor=(1, 1, 1),
                                   decoder_layers_per_block=(1, 1, 1, 1), upsample_residual=False,
                                   decoder_causal=False).eval()
    with torch.no_grad():
        for key, p in model.state_dict().items():
            if "norm3" in key:
                p.copy_(torch.rand_like(p) + 0.5 if key.endswith("weight") else 0.3 * torch.randn_like(p))
    model.save_pretrained(tmp_path)
    cfg, params = lvae.load_vae(tmp_path)
    assert "conv_in" in params["decoder"]["up_blocks"]["1"]
    z = _latents(cfg, seed=6, b=1)
    diffusers_out = _reference(model, z, None)
    for module in model.decoder.modules():
        if getattr(module, "norm3", None) is not None:
            module.norm3 = _UpstreamNorm3(module.norm3)
    ref = _reference(model, z, None)
    out = np.asarray(lvae.decode(params, cfg, z))
    assert _rel(out, ref) < 1e-5
    assert _rel(diffusers_out, ref) > 1e-3  # the two norms differ here


# The LTX-2 video VAE configuration of diffusers' scripts/convert_ltx2_to_diffusers.py (version "2.0").
RELEASE_VAE = dict(
    in_channels=3, out_channels=3, latent_channels=128, block_out_channels=(256, 512, 1024, 2048),
    down_block_types=("LTX2VideoDownBlock3D",) * 4, decoder_block_out_channels=(256, 512, 1024),
    layers_per_block=(4, 6, 6, 2, 2), decoder_layers_per_block=(5, 5, 5, 5),
    spatio_temporal_scaling=(True, True, True, True), decoder_spatio_temporal_scaling=(True, True, True),
    decoder_inject_noise=(False, False, False, False),
    downsample_type=("spatial", "temporal", "spatiotemporal", "spatiotemporal"), upsample_residual=(True, True, True),
    upsample_factor=(2, 2, 2), timestep_conditioning=False, patch_size=4, patch_size_t=1, resnet_norm_eps=1e-6,
    encoder_causal=True, decoder_causal=False, encoder_spatial_padding_mode="zeros",
    decoder_spatial_padding_mode="reflect", spatial_compression_ratio=32, temporal_compression_ratio=8)


class _ShapeReader:
    def __init__(self, shapes):
        self.shapes = shapes

    def keys(self):
        return list(self.shapes)

    def shape(self, key):
        return self.shapes[key]


@pytest.mark.parametrize("timestep_conditioning", [False, True])
def test_release_layout_is_covered_exactly(timestep_conditioning):
    """The released VAE (meta device: shapes only) fills every parameter slot exactly once, in both layouts."""
    config = RELEASE_VAE | {"timestep_conditioning": timestep_conditioning}
    with torch.device("meta"):
        model = AutoencoderKLLTX2Video(**config)
    cfg = lvae.LTX2VideoVAEConfig.from_dict({"_class_name": "AutoencoderKLLTX2Video", **config})
    assert cfg.spatial_compression == 32 and cfg.temporal_compression == 8
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    specs = lvae.vae_specs_and_rules(cfg)[0]
    plan = plan_load(_ShapeReader(shapes), lvae.vae_keymap(cfg), specs)
    assert sum(len(v) for v in plan.values()) == len(shapes)
    release = {lvae.release_name(cfg, k): s for k, s in shapes.items()}
    assert len(release) == len(shapes)
    if timestep_conditioning:
        assert {"vae.decoder.last_time_embedder.timestep_embedder.linear_1.weight",
                "vae.decoder.last_scale_shift_table",
                "vae.decoder.up_blocks.2.time_embedder.timestep_embedder.linear_2.bias",
                "vae.decoder.up_blocks.6.res_blocks.4.scale_shift_table"} <= set(release)
    assert {"vae.encoder.down_blocks.8.res_blocks.1.conv2.conv.weight", "vae.encoder.down_blocks.7.conv.conv.bias",
            "vae.decoder.up_blocks.5.conv.conv.weight", "vae.per_channel_statistics.mean-of-means"} <= set(release)
    plan = plan_load(_ShapeReader(release), lvae.vae_release_keymap(cfg), specs)
    assert sum(len(v) for v in plan.values()) == len(shapes)


def test_release_single_file_names(vae, tmp_path):
    """Tensors renamed to the release's single-file names (plus the statistics the release also holds) are mapped
    back exactly by diffusers' ``convert_ltx2_vae_to_diffusers`` and load through the release key map into the tree
    the diffusers layout gives."""
    import jax
    from diffusers.loaders.single_file_utils import convert_ltx2_vae_to_diffusers
    from safetensors.torch import save_file

    from vidax.checkpoint.loader import load_params

    name, model, cfg, _, path = vae
    sd = model.state_dict()
    if name != "release":
        with pytest.raises(ValueError, match="no release single-file layout"):
            lvae.release_name(cfg, "encoder.conv_in.conv.weight")
        return
    state = {lvae.release_name(cfg, k): v.contiguous() for k, v in sd.items()}
    extra = {"vae.per_channel_statistics.channel": torch.zeros(cfg.latent_channels),
             "vae.per_channel_statistics.mean-of-stds": torch.ones(cfg.latent_channels)}
    back = convert_ltx2_vae_to_diffusers(dict(state) | extra)
    assert set(back) == set(sd)
    assert all(torch.equal(back[k], sd[k]) for k in sd)
    save_file(state, str(tmp_path / "model.safetensors"))
    specs = lvae.vae_specs_and_rules(cfg)[0]
    loaded = load_params(CheckpointReader(tmp_path), lvae.vae_release_keymap(cfg), specs, np.float32,
                         source=str(tmp_path))
    _, params = lvae.load_vae(path, parts=None)
    assert jax.tree.structure(loaded) == jax.tree.structure(params)
    for (p, a), b in zip(jax.tree_util.tree_leaves_with_path(loaded), jax.tree.leaves(params)):
        np.testing.assert_array_equal(a, b, err_msg=str(p))


def test_tiled_decode_matches_reference(vae):
    """Spatial and frame tiling (``enable_tiling`` + ``use_framewise_decoding``), small tiles: 2 frame tiles x 2
    column tiles, blended as the reference blends them."""
    from vidax.core.ltx_tiling import LTXVideoTiling

    name, model, cfg, params, _ = vae
    if name != "release":
        pytest.skip("one variant suffices (the tiling is configuration-independent)")
    sizes = dict(tile_sample_min_height=96, tile_sample_min_width=96, tile_sample_min_num_frames=24,
                 tile_sample_stride_height=64, tile_sample_stride_width=64, tile_sample_stride_num_frames=16)
    z = np.random.default_rng(7).standard_normal((1, cfg.latent_channels, 4, 2, 4)).astype(np.float32)
    model.enable_tiling(**sizes)
    model.use_framewise_decoding = True
    try:
        ref = _reference(model, z, None)
    finally:
        model.use_tiling = model.use_framewise_decoding = False
    out = np.asarray(lvae.decode(params, cfg, z, tiling=LTXVideoTiling(spatial=True, temporal=True, **sizes)))
    assert out.shape == ref.shape == (1, 3, 25, 64, 128)
    assert _rel(out, ref) < 1e-5
    assert _rel(lvae.decode(params, cfg, z), ref) > 1e-3  # the tiles do change the result
