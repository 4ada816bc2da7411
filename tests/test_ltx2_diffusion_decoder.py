"""Parity of the LTX-2.5 diffusion video decoder (diffusers ``LTX2VideoDiffusionDecoderModel`` and
``LTX2VideoDiffusionDecodePipeline``; upstream ltx-core ``DiffusionVideoDecoder`` for small latents), fp32 and bf16,
CPU, a tiny configuration with the release's strides (weights randomised, norm scales, tables and latent statistics
included, written by the reference class with ``save_pretrained`` and read back through our strict loader).
"""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler, LTX2VideoDiffusionDecoderModel
from diffusers.pipelines.ltx2.pipeline_ltx2_diffusion_decode import LTX2VideoDiffusionDecodePipeline

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.loader import DictReader, plan_load
from vidax.checkpoint.safetensors_io import CheckpointReader
from vidax.models.ltx2 import diffusion_decoder as dd

# The reference's flex attention runs uncompiled on CPU (it says so once per call).
pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")

# The release's structure at tiny widths: its first three upsamplers, a temporal last one (keeping the stage-5 grid
# small: the reference's flex attention materialises all scores), patch 2 (spatial compression 8), kernels that
# differ per axis; a (3, 2, 3) latent makes a 17 x 8 x 12 stage-5 grid, several query blocks in T and W.
TINY = dict(latent_channels=8, patch_size=2, decoder_head_dim=16,
            decoder_stage_channels=(64, 32, 32, 32, 16), decoder_stage_depths=(1, 2, 1, 1, 2),
            decoder_stage_kernels=((3, 1, 3), (3, 3, 3), (3, 3, 5), (3, 3, 3)),
            decoder_upsample_strides=((1, 2, 2), (2, 1, 1), (2, 2, 2), (2, 1, 1)),
            decoder_upsample_channel_reductions=(2, 1, 1, 2), decoder_stage5_kernel=(3, 5, 5),
            decoder_t_emb_dim=32, spatial_compression_ratio=8, scaling_factor=0.8)
#: TINY in a release file's metadata terms (upstream ``DiffusionVideoDecoder`` keys under ``config["vae"]``).
RELEASE_TINY_VAE = {"_class_name": "CausalDiffusionVAE", "model_output_type": "x0",
                    "decoder": {"stage_channels": [64, 32, 32, 32, 16], "stage_depths": [1, 2, 1, 1, 2],
                                "stage_kernels": [[3, 1, 3], [3, 3, 3], [3, 3, 5], [3, 3, 3]], "head_dim": 16,
                                "upsamples": [[[1, 2, 2], 2], [[2, 1, 1], 1], [[2, 2, 2], 1], [[2, 1, 1], 2]],
                                "stage5_kernel": [3, 5, 5], "patch_size": 2, "in_channels": 8, "t_emb_dim": 32,
                                "default_num_inference_steps": 1, "timestep_scale_multiplier": 1000.0}}
LATENTS = (1, 8, 3, 2, 3)  # the size floor of TINY (min_latent_size), where diffusers and upstream coincide
CANVAS = (1, 3, 17, 16, 24)


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    torch.manual_seed(0)
    model = LTX2VideoDiffusionDecoderModel(**TINY).eval()
    with torch.no_grad():
        for key, p in model.state_dict().items():
            if "norm" in key or key == "latents_std":
                p.copy_(torch.rand_like(p) + 0.5)
            elif "scale_shift_table" in key or key == "latents_mean":
                p.copy_(0.3 * torch.randn_like(p))
            elif key.endswith("weight") and p.ndim == 2:
                p.copy_(torch.randn_like(p) / p.shape[1] ** 0.5)
    path = tmp_path_factory.mktemp("ltx2_diffusion_decoder")
    model.save_pretrained(path)
    params, cfg = dd.load_diffusion_decoder(path)
    return model, params, cfg, path


@pytest.fixture(scope="module")
def context(ckpt):
    model, params, cfg, _ = ckpt
    z = np.random.default_rng(1).standard_normal(LATENTS).astype(np.float32)
    with torch.no_grad():
        dec = model.decoder
        ref = dec.forward_stage_4(dec.forward_stages_1_to_3(torch.from_numpy(z))).numpy()
    return z, ref


def test_keymap_and_config(ckpt):
    model, params, cfg, path = ckpt
    plan = plan_load(CheckpointReader(path), dd.diffusion_decoder_keymap(cfg), dd.diffusion_decoder_specs(cfg),
                     source=str(path))
    assert sum(map(len, plan.values())) == sum(1 for _ in CheckpointReader(path).keys()) == len(model.state_dict())
    assert params["decoder"]["det_stages"]["1"]["attn"]["to_q"]["kernel"].shape == (2, 32, 32)  # stacked blocks
    assert params["decoder"]["diff_blocks"]["scale_shift_table"].dtype == jnp.float32
    assert cfg.trailing_pad_latent_frames == model.decoder.trailing_pad_latent_frames
    assert dd.rope_split(16) == model.decoder.det_stages[0][0].attn.rope.rope_dim_split
    assert dd.rope_split(64) == (16, 24, 24)
    raw = json.loads((path / "config.json").read_text())
    for bad, match in ((dict(decoder_stage_channels=[64, 48, 32, 32, 16]), "decoder_stage_channels"),
                       (dict(decoder_model_output_type="eps"), "model_output_type"),
                       (dict(spatial_compression_ratio=32), "spatial_compression_ratio"),
                       (dict(decoder_head_dim=12), "decoder_head_dim"),
                       (dict(decoder_stage_kernels=[[3, 3, 3]] * 3), "decoder_stage_kernels"),
                       (dict(decoder_num_inference_steps=0), "decoder_num_inference_steps"),
                       (dict(bogus=1), "unknown"), (dict(_class_name="AutoencoderKLLTX2Video"), "not")):
        with pytest.raises(ValueError, match=match):
            dd.LTX2DiffusionDecoderConfig.from_dict({**raw, **bad})


def test_release_layout(ckpt, tmp_path):
    """The release VAE file's names (upstream ``DiffusionVideoDecoder``: fused ``qkv``, ``proj``, ``q_norm``,
    ``t_embedder.mlp``, static gates, ``per_channel_statistics``), written here by inverting diffusers'
    ``convert_ltx2_diffusion_video_vae``, load to the parameters of the diffusers folder."""
    model, params, cfg, _ = ckpt
    rng = np.random.default_rng(11)
    release = {"vae.encoder.conv_in.conv.weight": np.zeros((4, 3)), "vae.per_channel_statistics.channel": np.zeros(8),
               "vae.per_channel_statistics.mean-of-stds": np.zeros(8), "vae.decoder.type_emb": np.zeros(16),
               "vae.decoder.coarse_head.weight": np.zeros((3, 16)), "model.diffusion_model.x": np.zeros(1)}
    sd = {k: v.numpy() for k, v in model.state_dict().items()}
    gates = {}
    for k, v in sd.items():
        if k.startswith("latents_"):
            release[f"vae.per_channel_statistics.{k[8:]}-of-means"] = v
            continue
        r = k
        for old, new in dd.RELEASE_RENAMES:
            r = r.replace(new, old)
        if ".attn.to_q." in r:
            v = np.concatenate([sd[k], sd[k.replace("to_q", "to_k")], sd[k.replace("to_q", "to_v")]])
            r = r.replace("to_q", "qkv")
        elif ".attn.to_k." in r or ".attn.to_v." in r:
            continue
        for leaf, gate in ((".attn.proj.", "gate_msa"), (".context_proj.", "gate_ctx"), (".mlp.w_down.", "gate_mlp")):
            if r.startswith("decoder.diff_blocks.") and leaf in r:
                g = gates.setdefault(r.split(leaf)[0] + "." + gate,
                                     rng.uniform(0.5, 2.0, v.shape[0]).astype(np.float32))
                v = v / (g[:, None] if v.ndim == 2 else g)
        release["vae." + r] = v
    release.update({"vae." + k: g for k, g in gates.items()})
    assert len(gates) == 3 * cfg.decoder_stage_depths[-1]
    loaded, _ = dd.load_release_diffusion_decoder(DictReader(release), prefix="vae.", cfg=cfg)
    flat = dict(jax.tree_util.tree_flatten_with_path(params)[0])
    for path, leaf in jax.tree_util.tree_flatten_with_path(loaded)[0]:
        np.testing.assert_allclose(np.asarray(leaf), np.asarray(flat[path]), rtol=1e-6, atol=1e-7, err_msg=str(path))
    assert len(flat) == len(jax.tree_util.tree_leaves(loaded))
    # The release metadata (``config["vae"]``) in upstream's terms: the architecture diffusers' converter states.
    release_vae = {"_class_name": "CausalDiffusionVAE", "model_output_type": "x0", "decoder": {
        "stage_channels": [2048, 1024, 512, 512, 256], "stage_depths": [4, 6, 4, 2, 8],
        "stage_kernels": [[3, 7, 7], [3, 7, 7], [3, 5, 5], [3, 5, 5], [3, 3, 3]],
        "upsamples": [[[1, 2, 2], 2], [[2, 1, 1], 2], [[2, 2, 2], 1], [[2, 2, 2], 2]], "stage5_kernel": [11, 11, 11],
        "default_num_inference_steps": 1, "timestep_scale_multiplier": 1000.0}}
    assert dd.LTX2DiffusionDecoderConfig.from_release(release_vae) == dd.LTX2DiffusionDecoderConfig()
    upstream_defaults = dd.LTX2DiffusionDecoderConfig.from_release({"decoder": {}})
    assert upstream_defaults.decoder_stage_channels[0] == 1024 and upstream_defaults.decoder_model_output_type == "v"
    with pytest.raises(CheckpointError, match="unexpected"):
        dd.load_release_diffusion_decoder(DictReader({**release, "vae.decoder.bogus": np.zeros(1)}), prefix="vae.",
                                          cfg=cfg)
    # The standalone release file: its metadata's architecture (not the class defaults) loads the same parameters.
    from safetensors.numpy import save_file

    path = tmp_path / "ltx-2.5-diffusion-vae.safetensors"
    save_file({k[4:]: np.ascontiguousarray(v, np.float32) for k, v in release.items() if k.startswith("vae.")},
              str(path), metadata={"config": json.dumps({"vae": RELEASE_TINY_VAE})})
    from_file, file_cfg = dd.load_release_diffusion_decoder(path)
    assert file_cfg == dataclasses.replace(cfg, scaling_factor=1.0)
    for p_, leaf in jax.tree_util.tree_flatten_with_path(from_file)[0]:
        np.testing.assert_allclose(np.asarray(leaf), np.asarray(flat[p_]), rtol=1e-6, atol=1e-7, err_msg=str(p_))


def test_neighborhood_attention_matches_dense_window():
    """Blocked attention against a plain masked einsum over the whole grid (windows shifted inward, NATTEN)."""
    rng = np.random.default_rng(2)
    for grid, kernel, block in (((9, 7, 10), (5, 5, 3), (2, 3, 4)), ((4, 6, 6), (3, 3, 5), (8, 16, 16))):
        q, k, v = (rng.standard_normal((2, *grid, 2, 8)).astype(np.float32) for _ in range(3))
        pos = np.stack(np.meshgrid(*[np.arange(n) for n in grid], indexing="ij"), -1).reshape(-1, 3)
        start = np.clip(pos - np.array(kernel) // 2, 0, np.array(grid) - np.array(kernel))
        inside = np.all((pos[None] >= start[:, None]) & (pos[None] < start[:, None] + np.array(kernel)), -1)
        assert (inside.sum(-1) == np.prod(kernel)).all()
        s = np.einsum("bqhd,bkhd->bhqk", q.reshape(2, -1, 2, 8), k.reshape(2, -1, 2, 8))
        s = np.where(inside, s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        ref = np.einsum("bhqk,bkhd->bqhd", p / p.sum(-1, keepdims=True), v.reshape(2, -1, 2, 8)).reshape(q.shape)
        out = dd.neighborhood_attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), kernel, block)
        assert _rel(out, ref) < 1e-6, (grid, kernel, block)


def test_context_matches_reference(ckpt, context):
    _, params, cfg, _ = ckpt
    z, ref = context
    out = dd.decoder_context(params, cfg, z)
    assert out.shape == ref.shape == (1, 17, 8, 12, 16)
    assert _rel(out, ref) < 1e-5


@pytest.fixture(scope="module")
def step(ckpt, context):
    """The reference's ``forward_diffusion_step`` on a batch of two (different timesteps)."""
    model = ckpt[0]
    ctx = np.concatenate([context[1], context[1][:, ::-1]])
    x_t = np.random.default_rng(3).standard_normal((2, *CANVAS[1:])).astype(np.float32)
    t = np.array([0.7, 0.25], np.float32)
    with torch.no_grad():
        ref = model.decoder.forward_diffusion_step(torch.from_numpy(ctx), torch.from_numpy(x_t),
                                                   torch.from_numpy(t)).numpy()
    return ctx, x_t, t, ref


def test_forward_matches_reference(ckpt, step):
    _, params, cfg, _ = ckpt
    ctx, x_t, t, ref = step
    out = dd.forward(params, cfg, ctx, x_t, t)
    assert out.shape == ref.shape == (2, *CANVAS[1:])
    assert _rel(out, ref) < 1e-5


def test_forward_bf16(ckpt, step):
    path = ckpt[3]
    params, cfg = dd.load_diffusion_decoder(path, jnp.bfloat16)
    assert params["decoder"]["diff_blocks"]["attn"]["to_q"]["kernel"].dtype == jnp.bfloat16
    assert params["decoder"]["shared_adaln"]["proj"]["kernel"].dtype == jnp.float32
    assert params["decoder"]["diff_blocks"]["norm1"]["scale"].dtype == jnp.float32
    ctx, x_t, t, ref = step
    assert _rel(dd.forward(params, cfg, ctx, x_t, t), ref) < 1e-2


@pytest.mark.parametrize("steps,output_type", [(None, "x0"), (2, "x0"), (2, "v")])
def test_decode_matches_reference(ckpt, context, steps, output_type):
    """The release path (one x0 step) through ``LTX2VideoDiffusionDecoderModel.decode``; the multi-step loop through
    the reference decoder's ``denoise`` on its own context of the same latents (the rest of its ``decode``)."""
    model, params, cfg, _ = ckpt
    z, ctx = context
    shape = dd.canvas_shape(cfg, z.shape)
    assert shape == CANVAS
    noise = torch.randn(shape, generator=torch.Generator().manual_seed(5))
    model.decoder.model_output_type = output_type
    try:
        with torch.no_grad():
            if steps is None:  # decode draws randn_tensor(pixel_shape, generator) first: the numbers of `noise`
                ref = model.decode(torch.from_numpy(z), generator=torch.Generator().manual_seed(5)).sample.numpy()
            else:
                ref = model.decoder.denoise(torch.from_numpy(ctx), noise, steps).numpy()
    finally:
        model.decoder.model_output_type = "x0"
    c = dataclasses.replace(cfg, decoder_model_output_type=output_type)
    out = dd.decode(params, c, z, noise=noise.numpy(), denormalize=False, num_inference_steps=steps)
    assert out.dtype == jnp.float32 and out.shape == ref.shape == CANVAS
    assert _rel(out, ref) < 1e-5
    if steps is None:  # seeded noise: a different draw, the same decoder
        other = dd.decode(params, cfg, z, seed=1, denormalize=False)
        assert other.shape == ref.shape and _rel(other, ref) > 1e-2


def test_pipeline_matches_reference(ckpt):
    model, params, cfg, _ = ckpt
    z = np.random.default_rng(6).standard_normal(LATENTS).astype(np.float32)
    pipe = LTX2VideoDiffusionDecodePipeline(diffusion_decoder=model, scheduler=FlowMatchEulerDiscreteScheduler())
    pipe.set_progress_bar_config(disable=True)
    ref = pipe(torch.from_numpy(z), generator=torch.Generator().manual_seed(7), output_type="np").frames
    noise = torch.randn(dd.canvas_shape(cfg, z.shape), generator=torch.Generator().manual_seed(7)).numpy()
    out = dd.postprocess(dd.decode(params, cfg, z, noise=noise))
    assert out.shape == ref.shape == (1, 17, 16, 24, 3)
    assert np.abs(out - ref).max() < 1e-4  # (the bound is 2/255)


def test_small_latents_follow_upstream(ckpt):
    """Latents under the size floor: diffusers raises, upstream ``_decode_pixels`` pads and crops. Upstream restated
    with the reference's modules (ltx-core ``diffusion_tiling``: ``ensure_min_latent_shape`` pads T by repeating the
    last frame and H, W symmetrically by edge replication, ``before = need // 2``; ``forward_stages_1_to_3`` adds the
    ghost frames; ``crop_trailing_context_natten_pad`` keeps ``max(content, stage-5 kernel_t)`` context frames;
    the canvas is the context's; ``crop_pixels_to_content`` keeps the content frames and ``before * scale`` on)."""
    model, params, cfg, _ = ckpt
    dec = model.decoder
    z = np.random.default_rng(8).standard_normal((1, 8, 1, 2, 1)).astype(np.float32)  # floor (3, 2, 3)
    with pytest.raises(ValueError):  # diffusers: a 1-pixel-wide grid under the stage-1 kernel
        with torch.no_grad():
            model.decode(torch.from_numpy(z), generator=torch.Generator().manual_seed(0))

    x = torch.from_numpy(z)
    x = torch.cat([x, x[:, :, -1:].expand(-1, -1, 2, -1, -1)], 2)  # T 1 -> 3
    x = torch.cat([x[..., :1], x, x[..., -1:]], 4)  # W 1 -> 3: one before, one after
    with torch.no_grad():
        ctx = dec.forward_stage_4(dec.forward_stages_1_to_3(x), crop_trailing_ghost=False)
        content_t = max(ctx.shape[1] - cfg.trailing_pad_latent_frames * 8, 1)
        keep = min(ctx.shape[1], max(content_t, cfg.decoder_stage5_kernel[0]))
        ctx = ctx[:, :keep]
        shape = (1, 3, keep, ctx.shape[2] * 2, ctx.shape[3] * 2)
        noise = torch.randn(shape, generator=torch.Generator().manual_seed(9))
        ref = dec.denoise(ctx, noise, 1)[:, :, :1, :, 8:16].numpy()  # 1 frame, 16 x 8 pixels from column 1 x 8
    assert dd.canvas_shape(cfg, z.shape) == shape == CANVAS
    out = dd.decode(params, cfg, z, noise=noise.numpy(), denormalize=False)
    assert out.shape == ref.shape == (1, 3, 1, 16, 8)
    assert _rel(out, ref) < 1e-5


def test_bad_inputs(ckpt):
    _, params, cfg, _ = ckpt
    z = np.zeros(LATENTS, np.float32)
    for bad in (np.zeros((1, 4, 3, 2, 3), np.float32), np.zeros((8, 3, 2, 3), np.float32),
                np.zeros((1, 8, 0, 2, 3), np.float32)):
        with pytest.raises(ValueError, match="latents"):
            dd.decode(params, cfg, bad)
    with pytest.raises(ValueError, match="beyond"):
        dd.decode(params, cfg, jnp.zeros((1, 8, 2000, 1, 1)))
    with pytest.raises(ValueError, match="noise"):
        dd.decode(params, cfg, z, noise=np.zeros((1, 3, 17, 16, 23), np.float32))
    with pytest.raises(ValueError, match="num_inference_steps"):
        dd.decode(params, cfg, z, num_inference_steps=0)


def test_read_config_without_tensors(ckpt, tmp_path):
    """The architecture of a diffusers folder and of a release VAE file (its metadata), as the loaders read it;
    broken configurations are named errors."""
    from safetensors.numpy import save_file

    _, _, cfg, path = ckpt
    assert dd.read_config(path) == cfg
    release_vae = RELEASE_TINY_VAE
    folder = tmp_path / "release"
    folder.mkdir()
    save_file({"decoder.x": np.zeros(1, np.float32)}, str(folder / "vae.safetensors"),
              metadata={"config": json.dumps({"vae": release_vae})})
    want = dataclasses.replace(cfg, scaling_factor=1.0)
    assert dd.read_config(folder / "vae.safetensors") == dd.read_config(folder) == want
    save_file({"x": np.zeros(1, np.float32)}, str(tmp_path / "plain.safetensors"))
    assert dd.read_config(tmp_path / "plain.safetensors") == dd.LTX2DiffusionDecoderConfig()  # the release's
    for meta in ("[1]", "{\"vae\": 3}", "{not json", json.dumps({"vae": {"decoder": [1]}})):
        save_file({"x": np.zeros(1, np.float32)}, str(tmp_path / "bad.safetensors"), metadata={"config": meta})
        with pytest.raises(CheckpointError, match="bad.safetensors: the metadata's config"):
            dd.read_config(tmp_path / "bad.safetensors")
    for decoder in ({"stage_channels": 5}, {"stage_channels": []}, {"stage5_kernel": 3}, {"patch_size": 1e308}):
        with pytest.raises(ValueError, match="release vae config|LTX2DiffusionDecoderConfig"):
            dd.release_config({"config": json.dumps({"vae": {"decoder": decoder}})})
    with pytest.raises(CheckpointError, match="config.json: missing"):
        dd.read_config(tmp_path)  # a folder of two safetensors files and no config.json
    # a diffusers folder without its config.json is not read as a release file (its weights' metadata has no config)
    nocfg = tmp_path / "nocfg"
    nocfg.mkdir()
    save_file({"x": np.zeros(1, np.float32)}, str(nocfg / "diffusion_pytorch_model.safetensors"),
              metadata={"format": "pt"})
    for call in (dd.read_config, dd.load_diffusion_decoder):
        with pytest.raises(CheckpointError, match="nocfg/config.json: missing"):
            call(nocfg)
    # values the configuration refuses are named with the file they came from, never a Python error
    raw = json.loads((path / "config.json").read_text())
    for bad, match in (({"decoder_head_dim": 0}, "decoder_head_dim=0"),
                       ({"decoder_upsample_channel_reductions": [0, 0, 0, 0]}, r"reductions\[0\]=0 \(at least 1\)")):
        folder = tmp_path / f"bad{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({**raw, **bad}))
        with pytest.raises(ValueError, match=f"{folder.name}/config.json: .*{match}"):
            dd.read_config(folder)
    for decoder, match in (({"head_dim": "abc"}, "decoder_head_dim='abc' is not an integer"),
                           ({"head_dim": 0}, "decoder_head_dim=0"), ({"head_dim": 8.7}, "is not an integer"),
                           ({"stage_channels": "abcde"}, "is not a list of integers"),
                           ({"timestep_scale_multiplier": "fast"}, "is not a number"),
                           ({"stage5_channels": 8, "stage_channels": []}, "stage5_channels=8 is not the last"),
                           ({"upsamples": [[1, 2]]}, "is not a list of \\[T, H, W\\] integers")):
        meta = {"config": json.dumps({"vae": {"decoder": {**RELEASE_TINY_VAE["decoder"], **decoder}}})}
        with pytest.raises(ValueError, match=f"f.safetensors: the metadata's config: .*{match}"):
            dd.release_config(meta, "f.safetensors")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_bytes(b"\xff{")
    with pytest.raises(CheckpointError, match="config.json: not UTF-8"):
        dd.read_config(broken)
    with pytest.raises(CheckpointError, match="config.json: not UTF-8"):
        dd.load_diffusion_decoder(broken)


def test_demo_folder_decoder_is_diffusers_layout(tmp_path):
    """The demo folder's diffusion_decoder/ (written without torch) loads in diffusers and decodes as ours does."""
    from vidax.models.ltx2.demo import write_demo_checkpoint

    folder = write_demo_checkpoint(tmp_path / "demo") / "diffusion_decoder"
    model = LTX2VideoDiffusionDecoderModel.from_pretrained(folder).eval()
    params, cfg = dd.load_diffusion_decoder(folder)
    z = np.random.default_rng(3).standard_normal((1, 8, 3, 3, 3)).astype(np.float32)  # the size floor: 3x3x3
    with torch.no_grad():
        ref = model.decode(torch.from_numpy(z), generator=torch.Generator().manual_seed(2)).sample.numpy()
    noise = torch.randn(dd.canvas_shape(cfg, z.shape), generator=torch.Generator().manual_seed(2)).numpy()
    out = dd.decode(params, cfg, z, noise=noise, denormalize=False)
    assert out.shape == ref.shape == (1, 3, 17, 96, 96) and np.std(ref) > 0.1
    assert _rel(out, ref) < 1e-5


def test_release_fixture_writer_inverts_the_release_reader(tmp_path):
    """``write_release_diffusion_vae`` (upstream names, metadata architecture) loads to the parameters of the same
    weights in diffusers' layout."""
    from vidax.checkpoint.writer import save_component
    from vidax.models.ltx2 import demo

    path = demo.write_release_diffusion_vae(tmp_path / "vae.safetensors", seed=4)
    ref_state = demo._diffusion_decoder_state_dict(np.random.default_rng(4))
    save_component(tmp_path / "dif", "diffusion_pytorch_model.safetensors", ref_state, demo.DIFFUSION_DECODER_CONFIG)
    release, rcfg = dd.load_release_diffusion_decoder(path)
    ref, cfg = dd.load_diffusion_decoder(tmp_path / "dif")
    assert rcfg == cfg
    flat = dict(jax.tree_util.tree_flatten_with_path(ref)[0])
    leaves = jax.tree_util.tree_flatten_with_path(release)[0]
    assert len(leaves) == len(flat)
    for path_, leaf in leaves:
        np.testing.assert_array_equal(np.asarray(leaf), np.asarray(flat[path_]), err_msg=str(path_))
    with pytest.raises(FileExistsError):
        demo.write_release_diffusion_vae(path)
