"""Wan2.2: the TI2V-5B VAE and per-token AdaLN (also under sequence parallelism), TI2V pipelines, and
the A14B two-expert switch, all against diffusers (fp32, tiny sizes, 8 simulated CPU devices)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers import AutoencoderKLWan, WanTransformer3DModel

from vidax.checkpoint.loader import load_params, plan_load
from vidax.checkpoint.safetensors_io import CheckpointReader
from vidax.core.sharding import make_mesh
from vidax.models.wan.config import PRESETS, WanTransformerConfig
from vidax.models.wan.experts import boundary_timestep, switch_step
from vidax.models.wan.keymap import transformer_keymap_diffusers
from vidax.models.wan.sharding import WAN_RULES
from vidax.models.wan.transformer import forward, num_tokens, rope_tables, transformer_specs
from vidax.core.wan_vae import WanVAEConfig, decode, encode, vae_keymap, vae_specs

PROMPT = "a red panda climbing a tree"
NEGATIVE = "blurry, static"


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


# -- the Wan2.2 VAE ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vae22(tmp_path_factory):
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = AutoencoderKLWan(
        base_dim=8, decoder_base_dim=12, z_dim=48, dim_mult=[1, 2, 2, 2], num_res_blocks=1, is_residual=True,
        in_channels=12, out_channels=12, patch_size=2, scale_factor_spatial=16, temperal_downsample=[False, True, True],
        latents_mean=rng.standard_normal(48).tolist(), latents_std=(1 + rng.random(48)).tolist()).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("gamma"):
                p.uniform_(0.5, 1.5)
    path = tmp_path_factory.mktemp("vae22")
    model.save_pretrained(path)
    cfg = WanVAEConfig.from_dict(json.loads((path / "config.json").read_text()))
    return model, cfg, load_params(CheckpointReader(path), vae_keymap(cfg), vae_specs(cfg), np.float32)


@pytest.mark.parametrize("frames", [9])  # the first frame alone, then two 4-frame chunks
def test_wan22_vae_encode_matches_diffusers(vae22, frames):
    model, cfg, params = vae22
    x = np.random.default_rng(frames).uniform(-1, 1, (1, 3, frames, 32, 48)).astype(np.float32)
    with torch.no_grad():
        dist = model.encode(torch.from_numpy(x)).latent_dist
    mean, logvar = encode(params, cfg, jnp.asarray(x))
    assert mean.shape == tuple(dist.mean.shape) == (1, 48, 1 + (frames - 1) // 4, 2, 3)
    assert _rel(mean, dist.mean.numpy()) < 1e-5 and _rel(logvar, dist.logvar.numpy()) < 1e-5


@pytest.mark.parametrize("t", [3])  # the first chunk (DupUp3D's frame drop), then two more
def test_wan22_vae_decode_matches_diffusers(vae22, t):
    model, cfg, params = vae22
    z = np.random.default_rng(t).standard_normal((1, 48, t, 2, 3), dtype=np.float32)
    with torch.no_grad():
        ref = model.decode(torch.from_numpy(z)).sample.numpy()
    out = decode(params, cfg, jnp.asarray(z))
    assert out.shape == ref.shape == (1, 3, 1 + 4 * (t - 1), 32, 48)
    assert np.mean(np.abs(ref) < 1.0) > 0.9
    assert _rel(out, ref) < 1e-5


def test_wan22_vae_full_layout_is_covered_exactly():
    """The released Wan2.2 VAE configuration (shapes only, meta device) fills every slot exactly once."""
    wan22 = dict(base_dim=160, decoder_base_dim=256, z_dim=48, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
                 is_residual=True, in_channels=12, out_channels=12, patch_size=2, scale_factor_spatial=16,
                 temperal_downsample=[False, True, True], latents_mean=[0.0] * 48, latents_std=[1.0] * 48)
    with torch.device("meta"):
        model = AutoencoderKLWan(**wan22)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}

    class ShapeReader:
        def keys(self):
            return list(shapes)

        def shape(self, key):
            return shapes[key]

    cfg = WanVAEConfig.from_dict(dict(model.config))
    assert cfg.spatial_compression == 16 and cfg.video_channels == 3
    plan = plan_load(ShapeReader(), vae_keymap(cfg), vae_specs(cfg))
    assert sum(len(v) for v in plan.values()) == len(shapes)


# -- per-token AdaLN ------------------------------------------------------------------------------

TINY = dict(patch_size=(1, 2, 2), num_attention_heads=4, attention_head_dim=16, in_channels=8, out_channels=8,
            text_dim=24, freq_dim=32, ffn_dim=96, num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
            eps=1e-6, rope_max_seq_len=64)


def _first_frame_timesteps(shape, t_values):
    """diffusers expand_timesteps: tokens of the first latent frame at 0, the rest at t (one row per sample)."""
    b, _, f, h, w = shape
    mask = np.ones((f, h // 2, w // 2), np.float32)
    mask[0] = 0
    return np.stack([(mask * t).reshape(-1) for t in t_values]).astype(np.float32)


@pytest.fixture(scope="module")
def ti2v_transformer(tmp_path_factory):
    torch.manual_seed(0)
    model = WanTransformer3DModel(**TINY).eval()
    with torch.no_grad():
        for name, prm in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                prm.add_(0.1 * torch.randn_like(prm))
    path = tmp_path_factory.mktemp("ti2v_transformer")
    model.save_pretrained(path)
    cfg = WanTransformerConfig.from_dict(json.loads((path / "config.json").read_text()))
    params = load_params(CheckpointReader(path), transformer_keymap_diffusers(cfg), transformer_specs(cfg), np.float32,
                         place=False)
    return model, cfg, params


def _inputs(cfg, shape, seed=1):
    rng = np.random.default_rng(seed)
    latents = rng.standard_normal(shape, dtype=np.float32)
    timestep = _first_frame_timesteps(shape, [937.0, 312.5][: shape[0]])
    context = rng.standard_normal((shape[0], 7, cfg.text_dim), dtype=np.float32)
    return latents, timestep, context


@pytest.mark.parametrize("shape", [(1, 8, 2, 4, 4), (2, 8, 3, 4, 6)], ids=str)
def test_per_token_timesteps_match_diffusers(ti2v_transformer, shape):
    model, cfg, params = ti2v_transformer
    latents, timestep, context = _inputs(cfg, shape)
    assert timestep.shape == (shape[0], num_tokens(cfg, shape))
    with torch.no_grad():
        ref = model(torch.from_numpy(latents), torch.from_numpy(timestep), torch.from_numpy(context),
                    return_dict=False)[0].numpy()
    cos, sin = rope_tables(cfg, shape)
    out = forward(jax.tree.map(jnp.asarray, params), latents, timestep, context, cos, sin, cfg=cfg)
    assert _rel(out, ref) < 1e-5
    # Per-token timesteps differ from one timestep per sample (the test would not see them ignored).
    per_sample = forward(jax.tree.map(jnp.asarray, params), latents, timestep.max(axis=1), context, cos, sin, cfg=cfg)
    assert _rel(per_sample, ref) > 1e-3


@pytest.mark.parametrize("dp,tp,sp", [(1, 1, 8), (1, 2, 4), (2, 2, 2)], ids=str)
def test_per_token_adaln_under_sequence_parallelism(ti2v_transformer, dp, tp, sp):
    """Timestep tokens are split over `sequence` with the video tokens (and padded with them: 3x2x3 = 18
    tokens is no multiple of 4 or 8); 8 simulated devices equal one device within 1e-5."""
    _, cfg, params = ti2v_transformer
    shape = (2, 8, 3, 4, 6)
    latents, timestep, context = _inputs(cfg, shape, seed=2)
    cos, sin = rope_tables(cfg, shape)
    ref = forward(jax.tree.map(jnp.asarray, params), latents, timestep, context, cos, sin, cfg=cfg)
    mesh = make_mesh(dp, tp, sp, devices=jax.devices()[: dp * tp * sp])
    sharded = jax.tree.map(jax.device_put, params, WAN_RULES.param_shardings(transformer_specs(cfg), mesh))
    out = forward(sharded, latents, timestep, context, cos, sin, cfg=cfg, mesh=mesh)
    assert _rel(out, ref) < 1e-5


# -- TI2V-5B pipelines ----------------------------------------------------------------------------


def _without_ftfy():
    """diffusers' I2V ``basic_clean`` calls ftfy even when it is not installed (the T2V pipeline checks);
    without ftfy both sides clean prompts the same way (vidax's ``clean_prompt`` skips it too)."""
    import types

    from diffusers.pipelines.wan import pipeline_wan_i2v

    if not hasattr(pipeline_wan_i2v, "ftfy"):
        pipeline_wan_i2v.ftfy = types.SimpleNamespace(fix_text=lambda text: text)


def _image(h, w, seed):
    from PIL import Image

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 / w, yy * 255 / h, (xx + yy) * 127 / (h + w)], -1)
    return Image.fromarray(np.clip(base + rng.normal(0, 20, (h, w, 3)), 0, 255).astype(np.uint8))


@pytest.fixture(scope="module")
def ti2v(tmp_path_factory):
    from vidax.models.wan.demo import write_demo_checkpoint
    from vidax.models.wan.pipeline import WanPipeline

    ckpt = write_demo_checkpoint(tmp_path_factory.mktemp("ti2v") / "ti2v", seed=4, task="ti2v")
    return ckpt, WanPipeline.from_pretrained(ckpt, dtype="float32")


@pytest.mark.parametrize("task", ["i2v", "t2v"])
def test_ti2v_pipeline_matches_diffusers(ti2v, task):
    """TI2V-5B: the first latent frame replaced by the image's and its tokens at timestep 0 (I2V);
    text-to-video with the same checkpoint (diffusers WanPipeline with expand_timesteps)."""
    from diffusers import WanImageToVideoPipeline as RefI2V
    from diffusers import WanPipeline as RefT2V

    from vidax.models.wan.pipeline_i2v import WanImageToVideoPipeline

    ckpt, ours = ti2v
    assert isinstance(ours, WanImageToVideoPipeline) and ours.expand_timesteps and ours.size_multiple == 32
    h, w, f = 32, 64, 5
    latents = np.random.default_rng(0).standard_normal((1, 48, 2, h // 16, w // 16), dtype=np.float32)
    kw = dict(height=h, width=w, num_frames=f, num_inference_steps=4, guidance_scale=5.0)
    image = _image(70, 100, 1) if task == "i2v" else None
    ref_cls = RefI2V if task == "i2v" else RefT2V
    if task == "i2v":
        _without_ftfy()
    ref = ref_cls.from_pretrained(ckpt, dtype=torch.float32)
    ref.set_progress_bar_config(disable=True)
    assert ref.config.expand_timesteps
    extra = {"image": image} if task == "i2v" else {}
    with torch.no_grad():
        expected = ref(prompt=PROMPT, negative_prompt=NEGATIVE, latents=torch.from_numpy(latents), output_type="np",
                       **extra, **kw).frames
    out = ours(PROMPT, NEGATIVE, image=image, latents=latents, output_type="float", progress=False, **kw)
    assert out.frames.shape == expected.shape == (1, f, h, w, 3)
    assert np.abs(out.frames - expected).max() < 2 / 255
    assert expected.std() > 0.01


# -- Wan2.2 A14B: two experts --------------------------------------------------------------------


@pytest.mark.parametrize("shift,steps", [(12.0, 40), (5.0, 50), (3.0, 4)])
@pytest.mark.parametrize("boundary_ratio", [0.875, 0.9])
def test_expert_switch_step_matches_diffusers(shift, steps, boundary_ratio):
    from diffusers import UniPCMultistepScheduler

    from vidax.models.wan.demo import scheduler_config
    from vidax.schedulers import scheduler_from_config

    config = {**scheduler_config(), "flow_shift": shift}
    ref = UniPCMultistepScheduler.from_config(config)
    ref.set_timesteps(steps)
    boundary = boundary_ratio * ref.config.num_train_timesteps
    # diffusers WanPipeline: `if t >= boundary_timestep` -> transformer, else transformer_2.
    expected = next(i for i, t in enumerate(ref.timesteps) if not t >= boundary)
    ours = scheduler_from_config(config).set_timesteps(steps)
    np.testing.assert_array_equal(ours.timesteps, ref.timesteps.numpy())
    assert switch_step(ours.timesteps, boundary_timestep(boundary_ratio, 1000)) == expected
    assert 0 < expected < steps


@pytest.fixture(scope="module")
def a14b(tmp_path_factory):
    from vidax.models.wan.demo import write_demo_checkpoint

    return write_demo_checkpoint(tmp_path_factory.mktemp("a14b") / "t2v-a14b", seed=6, task="t2v-a14b")


@pytest.fixture(scope="module")
def a14b_both(a14b):
    from vidax.models.wan.pipeline import WanPipeline

    # WanPipeline hands a two-expert checkpoint to the general pipeline; on CPU both experts are resident.
    return WanPipeline.from_pretrained(a14b, dtype="float32")


def test_a14b_pipeline_matches_diffusers(a14b, a14b_both):
    """Two experts with their own guidance scales; with shift 3 and 4 steps the switch is at step 2."""
    from diffusers import WanPipeline as Reference

    ours = a14b_both
    ref = Reference.from_pretrained(a14b, dtype=torch.float32)
    ref.set_progress_bar_config(disable=True)
    assert ref.transformer_2 is not None and ref.config.boundary_ratio == 0.875
    h, w, f = 32, 48, 5
    latents = np.random.default_rng(0).standard_normal((1, 16, 2, h // 8, w // 8), dtype=np.float32)
    kw = dict(height=h, width=w, num_frames=f, num_inference_steps=4, guidance_scale=4.0, guidance_scale_2=3.0)
    with torch.no_grad():
        expected = ref(PROMPT, NEGATIVE, latents=torch.from_numpy(latents), output_type="np", **kw).frames
    out = ours(PROMPT, NEGATIVE, latents=latents, output_type="float", progress=False, **kw)
    # The experts have different random weights, so parity needs each step on the reference's expert.
    assert out.metrics["experts"] == [0, 0, 1, 1] and out.metrics["expert_switch_step"] == 2
    assert np.abs(out.frames - expected).max() < 2 / 255


def test_a14b_i2v_pipeline_matches_diffusers(tmp_path):
    """Wan2.2 I2V A14B: 36-channel experts without CLIP, boundary 0.9, first and last frame."""
    from diffusers import WanImageToVideoPipeline as Reference

    from vidax.models.wan.demo import write_demo_checkpoint
    from vidax.models.wan.pipeline_i2v import WanImageToVideoPipeline

    ckpt = write_demo_checkpoint(tmp_path / "i2v-a14b", seed=7, task="i2v-a14b")
    _without_ftfy()
    ours = WanImageToVideoPipeline.from_pretrained(ckpt, dtype="float32")
    ref = Reference.from_pretrained(ckpt, dtype=torch.float32)
    ref.set_progress_bar_config(disable=True)
    assert ref.config.boundary_ratio == 0.9 and ref.image_encoder is None
    h, w, f = 32, 48, 5
    first, last = _image(40, 60, 2), _image(40, 60, 3)
    latents = np.random.default_rng(1).standard_normal((1, 16, 2, h // 8, w // 8), dtype=np.float32)
    kw = dict(height=h, width=w, num_frames=f, num_inference_steps=4, guidance_scale=3.5, guidance_scale_2=2.0)
    with torch.no_grad():
        expected = ref(image=first, last_image=last, prompt=PROMPT, negative_prompt=NEGATIVE,
                       latents=torch.from_numpy(latents), output_type="np", **kw).frames
    out = ours(PROMPT, NEGATIVE, image=first, last_image=last, latents=latents, output_type="float", progress=False,
               **kw)
    assert out.metrics["expert_switch_step"] is not None
    assert np.abs(out.frames - expected).max() < 2 / 255


def test_only_the_active_expert_is_resident(a14b, a14b_both):
    """expert_residency='active': one expert on the device at a time, one swap at the boundary, same frames."""
    from vidax.models.wan.pipeline_i2v import WanImageToVideoPipeline

    kw = dict(height=32, width=48, num_frames=1, num_inference_steps=4, output_type="float", progress=False)
    both = a14b_both
    assert both.experts.residency == "both" and both.experts.resident() == [0, 1]
    active = WanImageToVideoPipeline.from_pretrained(a14b, dtype="float32", expert_residency="active", block_loop="scan")
    assert active.experts.resident() == [0]
    out = active(PROMPT, **kw)
    assert active.experts.resident() == [1] and out.metrics["expert_swaps"] == 1
    np.testing.assert_allclose(out.frames, both(PROMPT, **kw).frames, atol=1e-6)
    with pytest.raises(ValueError, match="pass block_loop='scan' with it"):  # the host loop keeps both experts
        WanImageToVideoPipeline.from_pretrained(a14b, dtype="float32", expert_residency="active", block_loop="host")


def test_presets_cover_every_wan_row_of_the_paper_table():
    import csv
    from pathlib import Path

    table = Path(__file__).resolve().parents[2] / "shared" / "reference" / "paper-table5.tsv"
    assert table.is_file(), f"{table} not found: the project's shared/ folder must sit beside the checkout"
    rows = [r for r in csv.DictReader(table.open(), delimiter="\t") if r["model"].startswith("Wan")]
    for r in rows:
        w, h = (int(v) for v in r["resolution_wxh"].rstrip("*").split("x"))
        tp, sp = (int(v) for v in r["tp/sp"].split("/"))
        version = r["model"].split()[0]
        task = r["task"].lower()
        match = [p for p in PRESETS.values() if p.model.startswith(version) and p.task == task
                 and (p.width, p.height, p.num_frames, p.num_inference_steps) == (w, h, int(r["frames"]), int(r["steps"]))
                 and (p.tp, p.sp) == (tp, sp) and p.dtype == {"fp32": "float32", "bf16": "bfloat16"}[r["dit_weight_dtype"]]]
        assert match, f"no preset for {r}"
        if r["resolution_wxh"].endswith("*"):
            assert match[0].max_area is not None

