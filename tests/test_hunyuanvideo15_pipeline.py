"""HunyuanVideo-1.5 pipelines (vidax.models.hunyuanvideo15.pipeline) against diffusers' HunyuanVideo15Pipeline and
HunyuanVideo15ImageToVideoPipeline on the same tiny folder (written without torch by the demo writer and loaded by
both), with explicit latents, 4 steps, fp32: frames within 2/255; the guider against diffusers'
ClassifierFreeGuidance; the MeanFlow timesteps against the original pipeline's rule; bad input refused before any
weight is read."""

import numpy as np
import pytest
import torch

from _qwen2_5_vl_reference import QWEN2_5_VL_CHAT_TEMPLATE
from vidax.checkpoint.errors import CheckpointError
from vidax.encoders.qwen2_tokenizer import Qwen2Tokenizer
from vidax.models.hunyuanvideo15 import pipeline as hp
from vidax.models.hunyuanvideo15.demo import write_demo_checkpoint
from vidax.models.hunyuanvideo15.text import template_crop_start

STEPS, FRAMES, SIZE = 4, 9, 64
PROMPT = 'a neon sign that says "OPEN" flickers in the rain'


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hv15")
    return {task: write_demo_checkpoint(root / task, task=task) for task in ("t2v", "i2v")}


def _reference(folder, cls_name):
    import diffusers

    pipe = getattr(diffusers, cls_name).from_pretrained(folder, torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    # The demo tokenizer carries no Jinja chat template (vidax renders Qwen's template itself): the released one.
    pipe.tokenizer.chat_template = QWEN2_5_VL_CHAT_TEMPLATE
    # diffusers hard-codes the released tokenizer's template length (108); the tiny tokenizer's is counted the way
    # the original repository counts it (the value vidax uses by default).
    pipe.prompt_template_encode_start_idx = template_crop_start(Qwen2Tokenizer.from_folder(folder / "tokenizer"))
    return pipe


def _latents(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_text_to_video_matches_diffusers(folders):
    ours = hp.HunyuanVideo15Pipeline.from_pretrained(folders["t2v"], dtype="float32", progress=False)
    shape = ours.latent_shape(1, SIZE, SIZE, FRAMES)
    z = _latents(shape)
    out = ours(PROMPT, height=SIZE, width=SIZE, num_frames=FRAMES, num_inference_steps=STEPS, latents=z,
               output_type="float", progress=False)
    ref = _reference(folders["t2v"], "HunyuanVideo15Pipeline")
    with torch.no_grad():
        frames = ref(PROMPT, height=SIZE, width=SIZE, num_frames=FRAMES, num_inference_steps=STEPS,
                     latents=torch.from_numpy(z), output_type="np").frames
    assert out.frames.shape == frames.shape == (1, FRAMES, SIZE, SIZE, 3)
    assert np.abs(out.frames - frames).max() < 2 / 255
    assert out.metrics["num_inference_steps"] == STEPS and out.fps == 24


def test_image_to_video_matches_diffusers(folders):
    from PIL import Image

    # An image of the bucket's aspect ratio (the references' crops differ only when cropping: docs/design.md).
    image = Image.fromarray((np.random.default_rng(1).random((96, 128, 3)) * 255).astype(np.uint8))
    ours = hp.HunyuanVideo15ImageToVideoPipeline.from_pretrained(folders["i2v"], dtype="float32", progress=False)
    height, width = 48, 64  # the bucket of a 3:4 image at the demo transformer's target_size 64
    z = _latents(ours.latent_shape(1, height, width, FRAMES), 2)
    out = ours(PROMPT, image=image, num_frames=FRAMES, num_inference_steps=STEPS, latents=z, output_type="float",
               progress=False)
    ref = _reference(folders["i2v"], "HunyuanVideo15ImageToVideoPipeline")
    with torch.no_grad():
        frames = ref(prompt=PROMPT, image=image, num_frames=FRAMES, num_inference_steps=STEPS,
                     latents=torch.from_numpy(z), output_type="np").frames
    assert out.frames.shape == frames.shape == (1, FRAMES, height, width, 3)
    assert np.abs(out.frames - frames).max() < 2 / 255
    assert out.metrics["vae_encode_s"] > 0


@pytest.mark.parametrize("config", [
    dict(guidance_scale=6.0),
    dict(guidance_scale=3.0, guidance_rescale=0.7),
    dict(guidance_scale=2.0, use_original_formulation=True),
    dict(guidance_scale=5.0, start=0.25, stop=0.75),
    dict(guidance_scale=1.0),
    dict(guidance_scale=5.0, enabled=False),
])
def test_guider_is_diffusers_classifier_free_guidance(config):
    from diffusers import ClassifierFreeGuidance

    ref = ClassifierFreeGuidance(**config)
    ours = hp.Guider({"_class_name": "ClassifierFreeGuidance", **config})
    rng = np.random.default_rng(0)
    cond, uncond = rng.standard_normal((2, 2, 4, 3, 4, 4)).astype(np.float32)
    assert ours.uses_negative == (ref._enabled and ref.num_conditions > 1)
    for step in range(8):
        ref.set_state(step=step, num_inference_steps=8, timestep=torch.tensor(0.0))
        guided = ours.guided(step, 8)
        assert guided == ref._is_cfg_enabled(), step
        want = ref.forward(torch.from_numpy(cond), torch.from_numpy(uncond) if guided else None).pred.numpy()
        got = np.asarray(ours.combine(np.concatenate([uncond, cond]))) if guided else cond
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_guider_overrides_and_bad_configs():
    assert hp.Guider({"guidance_scale": 6.0}, guidance_scale=1.0).uses_negative is False
    for bad, match in (({"_class_name": "AdaptiveProjectedGuidance"}, "not supported"),
                       ({"guidance_scale": "6"}, "guidance_scale='6' should be a finite number"),
                       ({"start": 0.8, "stop": 0.5}, "start <= stop"),
                       ({"enabled": 1}, "enabled=1 should be true or false")):
        with pytest.raises(CheckpointError, match=match):
            hp.Guider(bad)


def test_meanflow_takes_the_next_timestep(folders, tmp_path, monkeypatch):
    """The step-distilled (MeanFlow) transformer gets ``timestep_r``: the next step's timestep, 0 at the last, as the
    original pipeline passes it (hunyuan_video_pipeline.py: ``timesteps[i + 1]``, ``0.0`` at the end)."""
    folder = write_demo_checkpoint(tmp_path / "meanflow", transformer_overrides={"use_meanflow": True},
                                   guidance_scale=1.0)
    pipe = hp.HunyuanVideo15Pipeline.from_pretrained(folder, dtype="float32", progress=False)
    seen, compile_step = [], pipe.compile_step

    def spy(args, guider):
        step = compile_step(args, guider)
        return lambda params, args: (seen.append(float(args[-1][0])), step(params, args))[1]

    monkeypatch.setattr(pipe, "compile_step", spy)
    pipe("a cat", height=32, width=32, num_frames=5, num_inference_steps=3, progress=False)
    state = pipe.make_scheduler().set_timesteps(3, sigmas=np.linspace(1.0, 0.0, 4)[:-1])
    np.testing.assert_allclose(seen, [*np.asarray(state.timesteps[1:3], np.float64), 0.0], rtol=1e-6)


def test_bad_input_is_refused_before_loading(folders, tmp_path):
    t2v = hp.HunyuanVideo15Pipeline
    with pytest.raises(CheckpointError, match="runs I2V; HunyuanVideo15Pipeline runs T2V: use "
                                              "HunyuanVideo15ImageToVideoPipeline"):
        t2v.from_pretrained(folders["i2v"], dtype="float32", progress=False)
    pipe = t2v.from_pretrained(folders["t2v"], dtype="float32", progress=False)
    with pytest.raises(ValueError, match="takes no image"):
        pipe("a cat", image=np.zeros((8, 8, 3), np.uint8))
    with pytest.raises(ValueError, match="num_frames=8 must be of the form 4k\\+1"):
        pipe("a cat", height=64, width=64, num_frames=8)
    with pytest.raises(ValueError, match="height=40 must be a positive multiple of 16"):
        pipe("a cat", height=40, width=64, num_frames=5)
    with pytest.raises(ValueError, match="both height and width"):
        pipe("a cat", height=64, num_frames=5)
    i2v = hp.HunyuanVideo15ImageToVideoPipeline.from_pretrained(folders["i2v"], dtype="float32", progress=False)
    with pytest.raises(ValueError, match="needs image="):
        i2v("a cat", num_frames=5)
    with pytest.raises(ValueError, match="no last-frame conditioning"):
        i2v("a cat", image=np.zeros((8, 8, 3), np.uint8), last_image=np.zeros((8, 8, 3), np.uint8))


def test_crop_to_size_is_the_originals():
    """Cover then centre-crop, sizes rounded as the original's torchvision pipeline (Resize then CenterCrop)."""
    from PIL import Image

    image = Image.fromarray((np.random.default_rng(3).random((50, 70, 3)) * 255).astype(np.uint8))
    out = hp.crop_to_size(image, 48, 64)
    assert out.size == (64, 48)
    # scale max(64/70, 48/50) = 0.96: 67x48, cropped 1 column on the left (round(1.5) = 2 in Python, as torchvision)
    resized = image.resize((67, 48), resample=Image.Resampling.LANCZOS)
    left = int(round((67 - 64) / 2.0))
    assert np.array_equal(np.asarray(out), np.asarray(resized)[:, left:left + 64])
