"""Cosmos-Predict2.5 (vidax.models.cosmos_predict25.pipeline) against diffusers' Cosmos2_5_PredictBasePipeline on the
same tiny folder (written without torch by the demo writer and loaded by both), with explicit latents, 4 steps,
fp32: text-, image- and video-to-world frames within 2/255; the conditioning frames' preprocessing against diffusers'
VideoProcessor; batch equivalence; bad input refused before any weight is read."""

import numpy as np
import pytest
import torch

import _torchvision_restated
from _qwen2_5_vl_reference import QWEN2_5_VL_CHAT_TEMPLATE
from vidax.models.cosmos_predict25 import pipeline as cp
from vidax.models.cosmos_predict25.demo import write_demo_checkpoint

STEPS, FRAMES, HEIGHT, WIDTH = 4, 9, 32, 48
PROMPT = "a robot arm welds a metal frame, sparks fly"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_demo_checkpoint(tmp_path_factory.mktemp("cosmos") / "demo")


@pytest.fixture(scope="module")
def ours(folder):
    return cp.CosmosPredict25Pipeline.from_pretrained(folder, dtype="float32", progress=False)


@pytest.fixture(scope="module")
def reference(folder):
    import diffusers

    _torchvision_restated.install()

    from diffusers.configuration_utils import ConfigMixin
    from diffusers.models.modeling_utils import ModelMixin

    class PassThroughChecker(ModelMixin, ConfigMixin):
        """diffusers' own tests' stand-in for the guardrail (tests/pipelines/cosmos/cosmos_guardrail.py;
        cosmos_guardrail is not installed): passes every prompt and frame through."""

        def __init__(self):
            super().__init__()
            self.register_buffer("_device_tracker", torch.zeros(1, dtype=torch.float32), persistent=False)

        def check_text_safety(self, prompt):
            return True

        def check_video_safety(self, frames):
            return frames

        @property
        def device(self):
            return self._device_tracker.device

        @property
        def dtype(self):
            return self._device_tracker.dtype

    pipe = diffusers.Cosmos2_5_PredictBasePipeline.from_pretrained(folder, torch_dtype=torch.float32,
                                                                   safety_checker=PassThroughChecker())
    pipe.set_progress_bar_config(disable=True)
    # The demo tokenizer carries no Jinja chat template (vidax renders Qwen's template itself): the released one.
    pipe.tokenizer.chat_template = QWEN2_5_VL_CHAT_TEMPLATE
    return pipe


def _latents(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _run_both(ours, reference, seed=0, **kw):
    shape = ours.latent_shape(1, HEIGHT, WIDTH, FRAMES)
    z = _latents(shape, seed)
    out = ours(PROMPT, height=HEIGHT, width=WIDTH, num_frames=FRAMES, num_inference_steps=STEPS, latents=z,
               output_type="float", progress=False, **kw)
    ref_kw = dict(kw)
    if "num_latent_conditional_frames" not in ref_kw and "video" in ref_kw:
        ref_kw["num_latent_conditional_frames"] = 2
    with torch.no_grad():
        frames = reference(prompt=PROMPT, height=HEIGHT, width=WIDTH, num_frames=FRAMES, num_inference_steps=STEPS,
                           latents=torch.from_numpy(z), output_type="np", **ref_kw).frames
    assert out.frames.shape == frames.shape == (1, FRAMES, HEIGHT, WIDTH, 3)
    return out, np.asarray(frames)


def test_text_to_world_matches_diffusers(ours, reference):
    out, frames = _run_both(ours, reference)
    assert np.abs(out.frames - frames).max() < 2 / 255
    assert out.metrics["num_inference_steps"] == STEPS and out.fps == 16


def test_image_to_world_matches_diffusers(ours, reference):
    from PIL import Image

    image = Image.fromarray((np.random.default_rng(1).random((40, 60, 3)) * 255).astype(np.uint8))
    out, frames = _run_both(ours, reference, seed=2, image=image)
    assert np.abs(out.frames - frames).max() < 2 / 255
    assert out.metrics["vae_encode_s"] > 0


@pytest.mark.parametrize("n", [1, 2])
def test_video_to_world_matches_diffusers(ours, reference, n):
    from PIL import Image

    rng = np.random.default_rng(3)
    clip = [Image.fromarray((rng.random((36, 50, 3)) * 255).astype(np.uint8)) for _ in range(7)]
    out, frames = _run_both(ours, reference, seed=4, video=clip, num_latent_conditional_frames=n)
    assert np.abs(out.frames - frames).max() < 2 / 255


def test_conditioning_pixels_match_diffusers_video_processor():
    from diffusers.video_processor import VideoProcessor
    from PIL import Image

    from vidax.models.cosmos_predict25.conditioning import image_pixels, video_pixels

    _torchvision_restated.install()
    rng = np.random.default_rng(5)
    processor = VideoProcessor(vae_scale_factor=8, resample="bilinear")
    image = Image.fromarray((rng.random((37, 53, 3)) * 255).astype(np.uint8))
    x = _torchvision_restated.to_tensor(image)[None, None]  # (1, T=1, C, H, W) as the pipeline builds it
    want = processor.preprocess_video(x, HEIGHT, WIDTH)[0].numpy()  # (C, T, H, W)
    np.testing.assert_array_equal(image_pixels(image, HEIGHT, WIDTH), want)
    clip = [Image.fromarray((rng.random((37, 53, 3)) * 255).astype(np.uint8)) for _ in range(8)]
    want = processor.preprocess_video(clip, HEIGHT, WIDTH)[0].numpy()[:, -5:]
    np.testing.assert_allclose(video_pixels(clip, HEIGHT, WIDTH, 2), want, atol=1e-6)


def test_batched_prompts_equal_each_alone(ours):
    prompts = ["a cat", "a robot arm welds a metal frame while sparks fly across the workshop floor"]
    shape = ours.latent_shape(2, HEIGHT, WIDTH, 5)
    z = _latents(shape, 6)
    both = ours(prompts, height=HEIGHT, width=WIDTH, num_frames=5, num_inference_steps=2, latents=z,
                output_type="float", progress=False).frames
    for i, p in enumerate(prompts):
        alone = ours(p, height=HEIGHT, width=WIDTH, num_frames=5, num_inference_steps=2, latents=z[i:i + 1],
                     output_type="float", progress=False).frames
        np.testing.assert_allclose(both[i:i + 1], alone, atol=1e-5)


def test_bad_input_is_refused(ours):
    with pytest.raises(ValueError, match="num_frames=8 must be of the form 4k\\+1"):
        ours(PROMPT, num_frames=8, height=HEIGHT, width=WIDTH)
    with pytest.raises(ValueError, match="height=30 must be a positive multiple of 16"):
        ours(PROMPT, num_frames=5, height=30, width=WIDTH)
    with pytest.raises(ValueError, match="no last-frame conditioning"):
        ours(PROMPT, last_image=np.zeros((32, 32, 3), np.uint8))
    with pytest.raises(ValueError, match="not both"):
        ours(PROMPT, num_frames=5, height=HEIGHT, width=WIDTH, image=np.zeros((32, 32, 3), np.uint8),
             video=np.zeros((5, 32, 32, 3), np.uint8))
    with pytest.raises(ValueError, match="needs at least 5"):
        ours(PROMPT, num_frames=5, height=HEIGHT, width=WIDTH, video=np.zeros((3, 32, 32, 3), np.uint8))
    with pytest.raises(ValueError, match="num_latent_conditional_frames must be 1 or 2"):
        ours(PROMPT, num_frames=5, height=HEIGHT, width=WIDTH, video=np.zeros((9, 32, 32, 3), np.uint8),
             num_latent_conditional_frames=3)
    with pytest.raises(ValueError, match="over the 1920"):
        ours(PROMPT, num_frames=5, height=1936, width=WIDTH)
