"""HunyuanVideo-1.5 pipelines on meshes and with the block stack offloaded (models/hunyuanvideo15/block_loop.py).

Eight simulated CPU devices (tests/conftest.py), float32, the tiny demo folder with 4 heads (tp 2 leaves 2 heads per
shard, so sp 2 runs Ulysses' all_to_all) and 3 dual-stream blocks (offload chunk 2 pads the last chunk with a zero
block), 2 sampler steps from explicit initial latents. The reference of every run is the same folder on one device
with the stack under ``lax.scan`` (at diffusers parity in tests/test_hunyuanvideo15_pipeline.py). Guidance 6 gives the
transformer a ``[negative, prompt]`` batch of 2, which dp 2 splits; guidance 1 (the CFG-distilled variants) one
evaluation of batch 1.
"""

import jax
import numpy as np
import pytest

from vidax.models.hunyuanvideo15.demo import write_demo_checkpoint
from vidax.models.hunyuanvideo15.pipeline import HunyuanVideo15ImageToVideoPipeline, HunyuanVideo15Pipeline

TINY = dict(num_attention_heads=4, num_layers=3)
PROMPT = 'a sign that says "OPEN"'
SIZE = dict(height=64, width=64, num_frames=9, num_inference_steps=2, progress=False)


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def _load(folder, cls=HunyuanVideo15Pipeline, dp=1, tp=1, sp=1, **opts):
    return cls.from_pretrained(folder, dtype="float32", dp=dp, tp=tp, sp=sp, devices=jax.devices()[: dp * tp * sp],
                               progress=False, compile_cache=False, **opts)


@pytest.fixture(scope="module")
def t2v(tmp_path_factory):
    return write_demo_checkpoint(tmp_path_factory.mktemp("hv15_mesh") / "t2v", transformer_overrides=TINY)


@pytest.fixture(scope="module")
def latents():
    return np.random.default_rng(3).standard_normal((1, 4, 3, 4, 4), dtype=np.float32)


@pytest.fixture(scope="module")
def reference(t2v, latents):
    """``{guidance_scale: latents}`` on one device, the stack scanned."""
    pipe = _load(t2v, block_loop="scan")
    assert pipe.block_loop == "scan"
    return {g: pipe(PROMPT, latents=latents, guidance_scale=g, **SIZE).latents for g in (6.0, 1.0)}


@pytest.mark.parametrize("dp, tp, sp, block_loop, guidance", [
    (1, 2, 1, "host", 6.0),
    (1, 1, 2, "scan", 1.0),
    (2, 2, 2, "host", 6.0),  # the negative and the prompt on the two data shards
], ids=["tp2", "sp2-scan-distilled", "dp2xtp2xsp2-cfg"])
def test_pipeline_on_a_mesh_equals_one_device(t2v, latents, reference, dp, tp, sp, block_loop, guidance):
    pipe = _load(t2v, dp=dp, tp=tp, sp=sp, block_loop=block_loop)
    out = pipe(PROMPT, latents=latents, guidance_scale=guidance, **SIZE)
    assert out.metrics["mesh"] == {"dp": dp, "tp": tp, "sp": sp} and out.metrics["block_loop"] == block_loop
    if sp > 1:
        assert out.metrics["sequence_parallel"] == "ulysses"
    assert _rel(out.latents, reference[guidance]) < 1e-5


def test_offloaded_pipeline_equals_resident(t2v, latents, reference):
    pipe = _load(t2v, offload_chunk=2, offload_overlap=True)
    assert "transformer_blocks" not in pipe.transformer_params
    out = pipe(PROMPT, latents=latents, guidance_scale=6.0, **SIZE)
    off = out.metrics["offload"]
    assert out.metrics["block_loop"] == "offload" and (off["chunk"], off["chunks"], off["padded_layers"]) == (2, 2, 4)
    assert _rel(out.latents, reference[6.0]) < 1e-5


def test_offloaded_image_to_video_on_a_mesh_equals_one_device(tmp_path):
    """Image-to-video (the SigLIP stream and the condition channels) offloaded on dp 2 x tp 2."""
    from PIL import Image

    folder = write_demo_checkpoint(tmp_path / "i2v", task="i2v", transformer_overrides=TINY)
    image = Image.fromarray((np.random.default_rng(5).random((64, 64, 3)) * 255).astype(np.uint8))
    z = np.random.default_rng(4).standard_normal((1, 4, 3, 4, 4), dtype=np.float32)
    call = dict(SIZE, image=image, latents=z)
    ref = _load(folder, HunyuanVideo15ImageToVideoPipeline, block_loop="scan")(PROMPT, **call).latents
    pipe = _load(folder, HunyuanVideo15ImageToVideoPipeline, dp=2, tp=2, offload_chunk=1, offload_overlap=False)
    out = pipe(PROMPT, **call)
    assert out.metrics["block_loop"] == "offload" and out.metrics["offload"]["chunks"] == 3
    assert _rel(out.latents, ref) < 1e-5
