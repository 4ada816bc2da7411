"""End-to-end parity of HunyuanVideo text-to-video and image-to-video with diffusers' ``HunyuanVideoPipeline`` and
``HunyuanVideoImageToVideoPipeline``, on demo checkpoints written by our own code (no PyTorch): diffusers loading
them is itself the proof that they have the real layout. Both pipelines get the same prompt, image and initial
latents; frames must agree within 2/255 after 4 steps.
"""

import numpy as np
import pytest
import torch
from PIL import Image

from vidax.checkpoint.errors import CheckpointError
from vidax.models.hunyuanvideo.demo import write_demo_checkpoint
from vidax.models.hunyuanvideo.pipeline import HunyuanVideoImageToVideoPipeline, HunyuanVideoPipeline

PROMPT = "A red panda climbing a bamboo tree in the snow"
OTHER = "a cat"
NEGATIVE = "blurry, static"
H, W, F = 48, 64, 9
STEPS = 4
TOL = 2 / 255


@pytest.fixture(scope="module")
def pipes(tmp_path_factory):
    """``pipes(kind) -> (folder, ours, diffusers')``, kind ``"t2v"``, ``"latent_concat"`` or ``"token_replace"``."""
    from diffusers import HunyuanVideoImageToVideoPipeline as ReferenceI2V
    from diffusers import HunyuanVideoPipeline as Reference

    cache = {}

    def get(kind):
        if kind not in cache:
            i2v = kind != "t2v"
            folder = write_demo_checkpoint(tmp_path_factory.mktemp("hunyuanvideo") / kind, task="i2v" if i2v else "t2v",
                                           variant=kind if i2v else "latent_concat", seed=5)
            reference = (ReferenceI2V if i2v else Reference).from_pretrained(folder, dtype=torch.float32)
            reference.set_progress_bar_config(disable=True)
            ours = (HunyuanVideoImageToVideoPipeline if i2v else HunyuanVideoPipeline).from_pretrained(
                folder, dtype="float32", progress=False)
            cache[kind] = folder, ours, reference
        return cache[kind]

    return get


def _image(seed=0, size=(70, 52)):
    rng = np.random.default_rng(seed)
    base = np.linspace(0, 255, size[0] * size[1] * 3).reshape(size[1], size[0], 3)
    return Image.fromarray(np.clip(base + rng.normal(0, 30, base.shape), 0, 255).astype(np.uint8))


def _latents(ours, batch, seed=1):
    shape = ours.latent_shape(batch, H, W, F)
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _reference(reference, ours, latents, **kw):
    out = reference(height=H, width=W, num_frames=F, num_inference_steps=STEPS, latents=torch.from_numpy(latents),
                    prompt_template=ours.text.prompt_template, output_type="np", **kw)
    return np.stack(out.frames) if isinstance(out.frames, list) else np.asarray(out.frames)


def _check(frames, ref):
    assert frames.shape == ref.shape, (frames.shape, ref.shape)
    err = np.abs(frames.astype(np.float32) - ref.astype(np.float32)).max()
    assert err <= TOL, f"max frame difference {err * 255:.3f}/255"
    return err


def test_text_to_video_matches_diffusers(pipes):
    _, ours, reference = pipes("t2v")
    latents = _latents(ours, 1)
    out = ours(PROMPT, height=H, width=W, num_frames=F, num_inference_steps=STEPS, latents=latents,
               output_type="float")
    ref = _reference(reference, ours, latents, prompt=PROMPT, guidance_scale=6.0)
    _check(out.frames, ref)
    assert out.metrics["num_frames"] == F and out.fps == 24


def test_true_cfg_matches_diffusers(pipes):
    _, ours, reference = pipes("t2v")
    latents = _latents(ours, 1, seed=2)
    out = ours(PROMPT, NEGATIVE, height=H, width=W, num_frames=F, num_inference_steps=STEPS, latents=latents,
               true_cfg_scale=4.0, guidance_scale=3.0, flow_shift=5.0, output_type="float")
    from diffusers import FlowMatchEulerDiscreteScheduler

    original = reference.scheduler
    reference.scheduler = FlowMatchEulerDiscreteScheduler.from_config(original.config, shift=5.0)
    try:
        ref = _reference(reference, ours, latents, prompt=PROMPT, negative_prompt=NEGATIVE, true_cfg_scale=4.0,
                         guidance_scale=3.0)
    finally:
        reference.scheduler = original
    _check(out.frames, ref)
    # the negative prompt alone changes nothing without true_cfg_scale > 1 (diffusers' do_true_cfg)
    plain = ours(PROMPT, NEGATIVE, height=H, width=W, num_frames=F, num_inference_steps=STEPS, latents=latents,
                 guidance_scale=3.0, flow_shift=5.0, output_type="float")
    assert not np.array_equal(plain.frames, out.frames)


def test_prompts_batched_together_match_each_alone(pipes):
    _, ours, _ = pipes("t2v")
    latents = _latents(ours, 2, seed=3)
    kw = dict(height=H, width=W, num_frames=F, num_inference_steps=2, output_type="float")
    both = ours([PROMPT, OTHER], latents=latents, **kw)
    for i, p in enumerate([PROMPT, OTHER]):
        alone = ours(p, latents=latents[i:i + 1], **kw)
        np.testing.assert_allclose(both.latents[i], alone.latents[0], rtol=0, atol=2e-5)
        assert np.abs(both.frames[i] - alone.frames[0]).max() < 1e-4


@pytest.mark.parametrize("kind", ["latent_concat", "token_replace"])
def test_image_to_video_matches_diffusers(pipes, kind):
    _, ours, reference = pipes(kind)
    image = _image()
    latents = _latents(ours, 1, seed=4)
    g = 6.0 if kind == "token_replace" else 1.0  # latent_concat has no guidance embedder
    out = ours(PROMPT, image=image, height=H, width=W, num_frames=F, num_inference_steps=STEPS, latents=latents,
               guidance_scale=g, output_type="float")
    ref = _reference(reference, ours, latents, image=image, prompt=PROMPT, guidance_scale=g)
    _check(out.frames, ref)
    assert out.frames.shape[1] == (F - 4 if kind == "latent_concat" else F)


def test_image_to_video_true_cfg_matches_the_original(pipes, monkeypatch):
    """True CFG's negative prompt is encoded with a black image and the model's image_embed_interleave (4 for
    token_replace), as the original repository's text encoder does (one interleave, set at construction:
    HunyuanVideo-I2V hyvideo/text_encoder/__init__.py). diffusers 0.42.1 calls encode_prompt for the negative
    without the interleave, so it takes the default 2 there; the reference is restated with the original's rule."""
    _, ours, reference = pipes("token_replace")
    image = _image(1)
    latents = _latents(ours, 1, seed=6)
    out = ours(PROMPT, NEGATIVE, image=image, height=H, width=W, num_frames=F, num_inference_steps=STEPS,
               latents=latents, true_cfg_scale=3.0, guidance_scale=2.0, output_type="float")
    encode = reference.encode_prompt

    def original_rule(*args, **kwargs):
        kwargs["image_embed_interleave"] = 4
        return encode(*args, **kwargs)

    monkeypatch.setattr(reference, "encode_prompt", original_rule)
    ref = _reference(reference, ours, latents, image=image, prompt=PROMPT, negative_prompt=NEGATIVE,
                     true_cfg_scale=3.0, guidance_scale=2.0)
    _check(out.frames, ref)


def test_image_to_video_size_follows_the_image_without_one(pipes, monkeypatch):
    from vidax.models.hunyuanvideo.presets import size_for_image

    _, ours, _ = pipes("token_replace")
    seen = {}

    def generate(prompt, negative_prompt, condition, **kw):  # the size the run would have (a 360p run is slow here)
        seen.update(height=kw["height"], width=kw["width"], pixels=condition.pixels.shape)

    monkeypatch.setattr(ours, "_generate", generate)
    ours(PROMPT, image=_image(size=(30, 60)), num_frames=5, num_inference_steps=1, i2v_resolution="360p")
    h, w = size_for_image(30, 60, 480)
    assert (seen["height"], seen["width"], seen["pixels"]) == (h, w, (1, 3, h, w))


def test_bad_calls_are_refused_before_compute(pipes):
    _, t2v, _ = pipes("t2v")
    with pytest.raises(ValueError, match="takes no image"):
        t2v(PROMPT, image=_image())
    with pytest.raises(ValueError, match="4k\\+1"):
        t2v(PROMPT, height=H, width=W, num_frames=8)
    with pytest.raises(ValueError, match="multiple of 16"):
        t2v(PROMPT, height=40, width=W, num_frames=F)
    _, i2v, _ = pipes("latent_concat")
    with pytest.raises(ValueError, match="needs image="):
        i2v(PROMPT, height=H, width=W, num_frames=F)
    with pytest.raises(ValueError, match="both height and width"):
        i2v(PROMPT, image=_image(), height=H)


def test_a_folder_of_the_other_task_is_named(pipes):
    folder, _, _ = pipes("latent_concat")
    with pytest.raises(CheckpointError, match="HunyuanVideoImageToVideoPipeline"):
        HunyuanVideoPipeline.from_pretrained(folder, dtype="float32", progress=False)
