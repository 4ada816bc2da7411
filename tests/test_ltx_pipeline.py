"""End-to-end parity of LTX-Video text-to-video with diffusers' ``LTXPipeline`` / ``LTXConditionPipeline``.

The demo checkpoints are written by our own code (no PyTorch); diffusers loading them is itself the proof that
they have the real layout. Both pipelines get the same prompt, negative prompt, initial noise and decode noise
(diffusers' ``randn_tensor`` draws are replaced by ours, in the order the reference draws them).
"""

import jax
import numpy as np
import pytest
import torch

from vidax.checkpoint.errors import CheckpointError
from vidax.models.ltx import vae as lvae
from vidax.models.ltx.config import DISTILLED_TIMESTEPS
from vidax.models.ltx.demo import write_demo_checkpoint
from vidax.models.ltx.pipeline import LTXPipeline, check_inputs, linear_quadratic_schedule, pack_latents, unpack_latents

PROMPT = "A red panda climbing a bamboo tree in the snow"
NEGATIVE = "worst quality, blurry"
H, W, F = 64, 96, 17  # latents 3 x 2 x 3


@pytest.fixture(scope="module")
def pipes(tmp_path_factory):
    """``pipes(variant) -> (folder, ours, diffusers')``, built once per variant."""
    from diffusers import LTXConditionPipeline, LTXPipeline as Reference

    cache = {}

    def get(variant):
        if variant not in cache:
            folder = write_demo_checkpoint(tmp_path_factory.mktemp("ltx") / variant, seed=5, variant=variant)
            cls = Reference if variant == "0.9.1" else LTXConditionPipeline
            reference = cls.from_pretrained(folder, torch_dtype=torch.float32)
            reference.set_progress_bar_config(disable=True)
            cache[variant] = folder, LTXPipeline.from_pretrained(folder, dtype="float32"), reference
        return cache[variant]

    return get


def _draws(monkeypatch, module, arrays):
    """Make ``module.randn_tensor`` return ``arrays`` in order (the reference's noise draws)."""
    queue = list(arrays)

    def randn_tensor(shape, generator=None, device=None, dtype=None, layout=None):
        a = queue.pop(0)
        assert tuple(a.shape) == tuple(shape), (a.shape, shape)
        return torch.from_numpy(a).to(dtype or torch.float32)

    monkeypatch.setattr(module, "randn_tensor", randn_tensor)
    return queue


@pytest.mark.parametrize("kw", [
    dict(num_inference_steps=4, guidance_scale=3.0),
    dict(num_inference_steps=3, guidance_scale=4.0, guidance_rescale=0.7, decode_timestep=0.05, decode_noise_scale=0.025),
    dict(timesteps=list(DISTILLED_TIMESTEPS), guidance_scale=1.0, decode_timestep=0.05, decode_noise_scale=0.025),
], ids=["cfg", "cfg-rescale-decode-noise", "distilled-timesteps"])
def test_condition_pipeline_frames_match_diffusers(pipes, kw, monkeypatch):
    """0.9.8 semantics (``LTXConditionPipeline`` without conditions): linear-quadratic schedule or explicit
    timesteps, causal pixel RoPE coordinates, per-token Euler steps, timestep-conditioned decode."""
    import diffusers.pipelines.ltx.pipeline_ltx_condition as module

    _, ours, reference = pipes("0.9.8")
    shape = (1, 16, 3, H // 32, W // 32)
    rng = np.random.default_rng(0)
    noise, decode_noise = rng.standard_normal(shape, dtype=np.float32), rng.standard_normal(shape, dtype=np.float32)
    left = _draws(monkeypatch, module, [noise, decode_noise])
    steps = kw.get("num_inference_steps", len(kw.get("timesteps") or []))
    with torch.no_grad():
        ref = reference(prompt=PROMPT, negative_prompt=NEGATIVE, height=H, width=W, num_frames=F,
                        output_type="np", **{k: v for k, v in kw.items() if k != "num_inference_steps"},
                        num_inference_steps=steps).frames
    assert not left  # both draws consumed
    out = ours(PROMPT, NEGATIVE, height=H, width=W, num_frames=F, latents=noise, decode_noise=decode_noise,
               output_type="float", progress=False, **kw)
    assert out.frames.shape == ref.shape == (1, F, H, W, 3)
    assert np.abs(out.frames - ref).max() < 2 / 255
    assert ref.std() > 0.05  # the frames vary: the comparison is not vacuous
    assert sorted(ours.vae_params) == ["decoder", "latents_mean", "latents_std"]  # the decoder side only


def test_condition_pipeline_latents_match_diffusers(pipes, monkeypatch):
    """The sampler's final latents, before decoding, to float32 precision."""
    import diffusers.pipelines.ltx.pipeline_ltx_condition as module

    _, ours, reference = pipes("0.9.8")
    shape = (2, 16, 3, H // 32, W // 32)
    noise = np.random.default_rng(1).standard_normal(shape, dtype=np.float32)
    _draws(monkeypatch, module, [noise])
    prompts = [PROMPT, "a boat on a lake"]
    with torch.no_grad():
        ref = reference(prompt=prompts, negative_prompt=NEGATIVE, height=H, width=W, num_frames=F,
                        num_inference_steps=3, guidance_scale=3.0, output_type="latent").frames.numpy()
    out = ours(prompts, NEGATIVE, height=H, width=W, num_frames=F, latents=noise, num_inference_steps=3,
               guidance_scale=3.0, output_type="float", progress=False)
    rel = np.linalg.norm(out.latents - ref) / np.linalg.norm(ref)
    assert out.latents.shape == ref.shape == shape and rel < 1e-5


def test_ltx_pipeline_latents_match_diffusers(pipes):
    """0.9.1 semantics (``LTXPipeline``): dynamically shifted linspace sigmas with shift_terminal, grid RoPE
    coordinates scaled by (8 / frame_rate, 32, 32), plain Euler steps."""
    _, ours, reference = pipes("0.9.1")
    shape = (1, 16, 3, H // 32, W // 32)
    noise = np.random.default_rng(2).standard_normal(shape, dtype=np.float32)
    with torch.no_grad():
        ref = reference(prompt=PROMPT, negative_prompt=NEGATIVE, height=H, width=W, num_frames=F, frame_rate=24,
                        num_inference_steps=4, guidance_scale=3.0, guidance_rescale=0.5,
                        latents=torch.from_numpy(np.array(pack_latents(noise))), output_type="latent").frames.numpy()
    ref = np.asarray(unpack_latents(ref, (3, 2, 3)))  # LTXPipeline returns packed latents
    out = ours(PROMPT, NEGATIVE, height=H, width=W, num_frames=F, frame_rate=24, latents=noise, num_inference_steps=4,
               guidance_scale=3.0, guidance_rescale=0.5, output_type="float", progress=False)
    rel = np.linalg.norm(out.latents - ref) / np.linalg.norm(ref)
    assert rel < 1e-5
    assert out.fps == 24.0


@pytest.mark.parametrize("block_loop, offload", [("scan", None), ("host", None), ("auto", 1)])
def test_block_loops_and_offloading_give_the_same_latents(pipes, block_loop, offload):
    folder, reference_pipe, _ = pipes("0.9.8")
    noise = np.random.default_rng(3).standard_normal((1, 16, 3, 2, 3), dtype=np.float32)
    kw = dict(height=H, width=W, num_frames=F, latents=noise, num_inference_steps=2, guidance_scale=3.0,
              output_type="float", progress=False)
    base = reference_pipe(PROMPT, NEGATIVE, **kw)
    pipe = LTXPipeline.from_pretrained(folder, dtype="float32", block_loop=block_loop, offload_chunk=offload)
    assert pipe.block_loop == {"scan": "scan", "host": "host"}.get(block_loop, "offload")
    out = pipe(PROMPT, NEGATIVE, **kw)
    np.testing.assert_allclose(out.latents, base.latents, rtol=0, atol=1e-5)


def test_mesh_pipeline_matches_single_device(pipes):
    folder, single, _ = pipes("0.9.8")
    noise = np.random.default_rng(4).standard_normal((1, 16, 3, 2, 3), dtype=np.float32)
    kw = dict(height=H, width=W, num_frames=F, latents=noise, num_inference_steps=2, guidance_scale=3.0,
              output_type="float", progress=False)
    base = single(PROMPT, NEGATIVE, **kw)
    pipe = LTXPipeline.from_pretrained(folder, dtype="float32", dp=2, tp=2, sp=2)
    out = pipe(PROMPT, NEGATIVE, **kw)
    assert out.metrics["mesh"] == {"dp": 2, "tp": 2, "sp": 2} and out.metrics["sequence_parallel"] == "kv_all_gather"
    np.testing.assert_allclose(out.latents, base.latents, rtol=0, atol=1e-5)


def test_linear_quadratic_schedule_matches_diffusers():
    from diffusers.pipelines.ltx.pipeline_ltx_condition import linear_quadratic_schedule as reference

    for n in (1, 2, 3, 8, 30, 50):
        np.testing.assert_array_equal(linear_quadratic_schedule(n), reference(n).numpy())


def test_pack_unpack_round_trip():
    x = np.arange(2 * 3 * 4 * 5 * 6, dtype=np.float32).reshape(2, 3, 4, 5, 6)
    tokens = pack_latents(x)
    assert tokens.shape == (2, 4 * 5 * 6, 3) and float(tokens[1, 7, 2]) == float(x[1, 2, 0, 1, 1])
    np.testing.assert_array_equal(unpack_latents(tokens, (4, 5, 6)), x)


def test_bad_sizes_and_settings_are_refused_before_compute(pipes):
    _, ours, _ = pipes("0.9.8")
    cfg = ours.vae_cfg
    with pytest.raises(ValueError, match=r"num_frames=20 must be of the form 8k\+1.*use 17 or 25"):
        check_inputs(cfg, 64, 96, 20, 25)
    with pytest.raises(ValueError, match="height=70 must be a positive multiple of 32: use 64 or 96"):
        check_inputs(cfg, 70, 96, 17, 25)
    with pytest.raises(ValueError, match="frame_rate"):
        check_inputs(cfg, 64, 96, 17, 0)
    with pytest.raises(ValueError, match="guidance_rescale=1.5 must be in"):
        ours(PROMPT, height=H, width=W, num_frames=F, guidance_rescale=1.5, progress=False)
    with pytest.raises(ValueError, match="latents have shape"):
        ours(PROMPT, height=H, width=W, num_frames=F, latents=np.zeros((1, 16, 2, 2, 3), np.float32), progress=False)
    with pytest.raises(ValueError, match="timesteps"):
        ours(PROMPT, height=H, width=W, num_frames=F, timesteps=[1000.0, 2000.0], progress=False)


def test_checkpoint_errors_name_the_problem(tmp_path, pipes):
    folder, _, _ = pipes("0.9.8")
    with pytest.raises(CheckpointError, match="no model_index.json"):
        LTXPipeline.from_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="single component folder"):
        LTXPipeline.from_pretrained(folder / "transformer")
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    shutil.rmtree(broken / "vae")
    with pytest.raises(CheckpointError, match="missing its vae folder"):
        LTXPipeline.from_pretrained(broken)


def test_vae_decoder_side_only_and_statistics_used(pipes):
    """Denormalisation reads the checkpoint's latents_mean / latents_std (the demo's are not 0 / 1)."""
    _, ours, _ = pipes("0.9.8")
    mean = np.asarray(ours.vae_params["latents_mean"])
    assert np.abs(mean).max() > 0.01
    z = np.zeros((1, 16, 1, 1, 1), np.float32)
    np.testing.assert_allclose(np.asarray(lvae.denormalize_latents(ours.vae_params, z)).reshape(-1), mean)


# ------------------------------------------------------------------------------------------ conditioning

def _image(seed, h=H, w=W):
    from PIL import Image

    rng = np.random.default_rng(seed)
    return Image.fromarray((rng.random((h + 10, w - 6, 3)) * 255).astype(np.uint8))  # resized to H x W by both


class _Recorder:
    """Our ``noise`` override: a fresh array per draw, remembered by (purpose, index) for the reference."""

    def __init__(self, seed):
        self.rng, self.arrays = np.random.default_rng(seed), {}

    def __call__(self, purpose, index, shape):
        if (purpose, index) == ("decode", 1):
            return None  # the 0.9.1 decoder's injection key: not compared (the tests compare latents there)
        self.arrays[purpose, index] = self.rng.standard_normal(shape, dtype=np.float32)
        return self.arrays[purpose, index]


def _replay(monkeypatch, queue):
    """Every ``randn_tensor`` of diffusers' LTX pipelines and its VAE posterior returns the next array of ``queue``."""
    import diffusers.models.autoencoders.vae as vae_module
    import diffusers.pipelines.ltx.pipeline_ltx_condition as condition_module
    import diffusers.pipelines.ltx.pipeline_ltx_image2video as i2v_module

    queue = list(queue)

    def randn_tensor(shape, generator=None, device=None, dtype=None, layout=None):
        a = queue.pop(0)
        assert tuple(a.shape) == tuple(shape), (a.shape, tuple(shape))
        return torch.from_numpy(a.copy()).to(dtype or torch.float32)

    for module in (vae_module, condition_module, i2v_module):
        monkeypatch.setattr(module, "randn_tensor", randn_tensor)
    return queue


def test_image_to_video_matches_ltx_image_to_video_pipeline(pipes, monkeypatch):
    """``LTXPipeline`` folders condition as ``LTXImageToVideoPipeline``: the posterior-sampled image latent is frame 0,
    its tokens at timestep 0 and never stepped."""
    from diffusers import LTXImageToVideoPipeline

    folder, ours, _ = pipes("0.9.1")
    reference = LTXImageToVideoPipeline.from_pretrained(folder, torch_dtype=torch.float32)
    reference.set_progress_bar_config(disable=True)
    image, rec = _image(1), _Recorder(0)
    kw = dict(height=H, width=W, num_frames=F, num_inference_steps=3, guidance_scale=3.0)
    out = ours(PROMPT, NEGATIVE, image=image, noise=rec, output_type="float", progress=False, **kw)
    left = _replay(monkeypatch, [rec.arrays["posterior", 0], rec.arrays["latents", 0]])
    with torch.no_grad():
        ref = reference(image=image, prompt=PROMPT, negative_prompt=NEGATIVE, output_type="latent", **kw).frames.numpy()
    assert not left
    ref = np.asarray(unpack_latents(ref, (3, 2, 3)))
    assert np.linalg.norm(out.latents - ref) / np.linalg.norm(ref) < 1e-5
    assert ours.vae_encoder.resident  # loaded at the first image


@pytest.mark.parametrize("conditions", ["image", "image-strength-video-later"])
def test_conditions_match_ltx_condition_pipeline(pipes, monkeypatch, conditions):
    """``LTXConditionPipeline``: an image at frame 0 (strength 1, per-step conditioning noise), or an image at frame 0
    with strength 0.6 plus a 9-frame video at frame 8 (two latent frames of extra tokens with shifted coordinates,
    blended with fresh noise)."""
    from diffusers.pipelines.ltx.pipeline_ltx_condition import LTXVideoCondition as Reference

    from vidax.models.ltx.conditioning import LTXVideoCondition

    _, ours, reference = pipes("0.9.8")
    image, video = _image(2), [_image(10 + i) for i in range(9)]
    if conditions == "image":
        items = [dict(image=image)]
    else:
        items = [dict(image=image, strength=0.6), dict(video=video, frame_index=8)]
    rec = _Recorder(3)
    kw = dict(height=H, width=W, num_frames=F, num_inference_steps=3, guidance_scale=3.0, decode_timestep=0.05,
              decode_noise_scale=0.025)
    out = ours(PROMPT, NEGATIVE, conditions=[LTXVideoCondition(**c) for c in items], noise=rec, output_type="float",
               progress=False, **kw)
    order = [("latents", 0)]
    for k, c in enumerate(items):
        order += [("posterior", k)] + ([("condition", k)] if c.get("frame_index", 0) else [])
    order += [("image_cond", i) for i in range(3)] + [("decode", 0)]
    assert set(order) == set(rec.arrays)
    left = _replay(monkeypatch, [rec.arrays[p] for p in order])
    with torch.no_grad():
        ref = reference(conditions=[Reference(**c) for c in items], prompt=PROMPT, negative_prompt=NEGATIVE,
                        output_type="np", **kw).frames
    assert not left
    assert out.frames.shape == ref.shape == (1, F, H, W, 3)
    assert np.abs(out.frames - ref).max() < 2 / 255 and ref.std() > 0.05


def test_condition_errors_name_the_fix(pipes):
    from vidax.models.ltx.conditioning import LTXVideoCondition

    _, ltx, _ = pipes("0.9.1")
    _, cond, _ = pipes("0.9.8")
    kw = dict(height=H, width=W, num_frames=F, num_inference_steps=1, progress=False)
    with pytest.raises(ValueError, match="need an LTXConditionPipeline checkpoint"):
        ltx(PROMPT, conditions=[LTXVideoCondition(image=_image(0), frame_index=8)], **kw)
    with pytest.raises(ValueError, match="frame_index=17 must be an integer in"):
        cond(PROMPT, conditions=[LTXVideoCondition(image=_image(0), frame_index=17)], **kw)
    with pytest.raises(ValueError, match="strength=1.5 must be in"):
        cond(PROMPT, conditions=[LTXVideoCondition(image=_image(0), strength=1.5)], **kw)
    with pytest.raises(ValueError, match="exactly one of image and video"):
        cond(PROMPT, conditions=[LTXVideoCondition()], **kw)
    with pytest.raises(ValueError, match="either image"):
        cond(PROMPT, image=_image(0), conditions=[LTXVideoCondition(image=_image(0))], **kw)


def test_condition_videos_are_cut_to_fit():
    """``trim_conditioning_sequence``: at most the frames left from the index, then 8k + 1."""
    from vidax.models.ltx.conditioning import LTXVideoCondition, condition_pixels

    video = [_image(i) for i in range(14)]
    assert condition_pixels(LTXVideoCondition(video=video), H, W, 17, 8).shape == (1, 3, 9, H, W)
    assert condition_pixels(LTXVideoCondition(video=video, frame_index=10), H, W, 17, 8).shape == (1, 3, 1, H, W)
    assert condition_pixels(LTXVideoCondition(image=_image(0)), H, W, 17, 8).shape == (1, 3, 1, H, W)


@pytest.mark.parametrize("block_loop", ["scan", "host"])
def test_conditioned_generation_on_a_mesh_equals_single_device(pipes, block_loop):
    """Per-token timesteps (image conditioning) with the tokens split over ``sequence`` (sp=2, 18 + 6 extra tokens
    padded to 24) and heads over ``tensor``, both block loops."""
    from vidax.models.ltx.conditioning import LTXVideoCondition

    folder, single, _ = pipes("0.9.8")
    conds = [LTXVideoCondition(image=_image(4)), LTXVideoCondition(image=_image(5), frame_index=8, strength=0.7)]
    kw = dict(conditions=conds, height=H, width=W, num_frames=F, num_inference_steps=2, guidance_scale=3.0, seed=3,
              output_type="float", progress=False)
    base = single(PROMPT, NEGATIVE, **kw)
    pipe = LTXPipeline.from_pretrained(folder, dtype="float32", dp=1, tp=2, sp=2, block_loop=block_loop,
                                       devices=jax.devices()[:4])
    out = pipe(PROMPT, NEGATIVE, **kw)
    np.testing.assert_allclose(out.latents, base.latents, rtol=0, atol=1e-5)


def test_presets_cover_every_ltx_video_row_of_the_paper_table():
    """Each LTX-Video 0.9.8 row of the paper's benchmark table has a preset with its size, frames, steps, dtype and
    tensor-parallel split (the LTX-2.5 rows are another model family)."""
    import csv
    from pathlib import Path

    from vidax.models.ltx.config import PRESETS

    table = Path(__file__).resolve().parents[2] / "shared" / "reference" / "paper-table5.tsv"
    assert table.is_file(), f"{table} not found: the project's shared/ folder must sit beside the checkout"
    rows = [r for r in csv.DictReader(table.open(), delimiter="\t") if r["model"].startswith("LTX-Video")]
    assert len(rows) == 3
    for r in rows:
        w, h = (int(v) for v in r["resolution_wxh"].split("x"))
        size, kind = r["model"].split()[2], r["model"].split("(")[1].rstrip(")")
        match = [p for p in PRESETS.values() if f"{size}-{kind}" in p.model
                 and (p.width, p.height, p.num_frames, p.num_inference_steps) == (w, h, int(r["frames"]), int(r["steps"]))
                 and p.tp == int(r["tp/sp"].split("/")[0]) and p.dtype == "bfloat16"]
        assert len(match) == 1, f"no preset for {r}"
        if kind == "distilled":
            assert match[0].timesteps is not None and len(match[0].timesteps) == int(r["steps"])


def test_bad_call_arguments_are_refused(pipes):
    """Found by a new-user hunt: each ran silently (or failed deep inside) before."""
    from vidax.models.ltx.conditioning import LTXVideoCondition

    _, ours, _ = pipes("0.9.8")
    kw = dict(height=H, width=W, num_frames=F, progress=False)
    cases = [
        (dict(num_inference_steps=0), "num_inference_steps=0 must be a positive integer"),
        (dict(num_inference_steps=2.5), "num_inference_steps=2.5 must be a positive integer"),
        (dict(timesteps=[0.0, 500.0, 1000.0]), "must strictly decrease"),
        (dict(timesteps=[1000.0, 500.0, 500.0]), "must strictly decrease"),
        (dict(decode_timestep=-1.0), r"decode_timestep=-1.0 must be a number in \[0, 1\]"),
        (dict(decode_timestep=float("nan")), "decode_timestep=nan"),
        (dict(decode_noise_scale=1e6), "decode_noise_scale=1000000.0"),
        (dict(image_cond_noise_scale=-1.0), "image_cond_noise_scale=-1.0 must be a number in zero or positive"),
        (dict(max_sequence_length=0), "max_sequence_length=0 must be a positive integer"),
        (dict(frame_rate=True), "frame_rate=True"),
        (dict(frame_rate=1e12), r"frame_rate=1000000000000.0 must be a number of frames per second in \(0, 1000\]"),
        (dict(conditions=[LTXVideoCondition(image=_image(0), strength=True)]), "strength=True must be in"),
        (dict(conditions=[LTXVideoCondition(image=_image(0), frame_index=True)]), "frame_index=True must be an integer"),
    ]
    for extra, message in cases:
        with pytest.raises(ValueError, match=message):
            ours(PROMPT, **kw, **extra)


def test_a_single_condition_need_not_be_in_a_list(pipes):
    from vidax.models.ltx.conditioning import LTXVideoCondition

    _, ours, _ = pipes("0.9.8")
    kw = dict(height=H, width=W, num_frames=F, num_inference_steps=1, guidance_scale=1.0, output_type="float",
              progress=False)
    one = ours(PROMPT, conditions=LTXVideoCondition(image=_image(0)), **kw)
    np.testing.assert_array_equal(one.frames, ours(PROMPT, conditions=[LTXVideoCondition(image=_image(0))], **kw).frames)


def test_scheduler_configuration_errors_name_the_file(pipes, tmp_path):
    import json
    import shutil

    folder, _, _ = pipes("0.9.8")
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    path = copy / "scheduler" / "scheduler_config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps({**config, "use_dynamic_shifting": True}))
    pipe = LTXPipeline.from_pretrained(copy, dtype="float32")
    with pytest.raises(ValueError, match=r"scheduler_config.json: use_dynamic_shifting is true.*set it to false"):
        pipe(PROMPT, height=H, width=W, num_frames=F, num_inference_steps=2, progress=False)
    pipe.scheduler_config = {**config, "_class_name": "UniPCMultistepScheduler"}
    with pytest.raises(ValueError, match="scheduler_config.json: LTX-Video samples with FlowMatchEulerDiscreteScheduler"):
        pipe(PROMPT, height=H, width=W, num_frames=F, num_inference_steps=2, progress=False)


def test_configs_the_pipelines_cannot_run_are_refused():
    from vidax.models.ltx.config import LTXVideoTransformerConfig
    from vidax.models.ltx.vae import LTXVideoVAEConfig

    with pytest.raises(ValueError, match="patch_size=2, patch_size_t=1 .only 1 and 1"):
        LTXVideoTransformerConfig.from_dict({"patch_size": 2})
    with pytest.raises(ValueError, match="scaling_factor=0"):
        LTXVideoVAEConfig.from_dict({"scaling_factor": 0.0})
