"""Cosmos-Predict2.5 pipelines on meshes, with the host block loop and with the block stack offloaded
(models/cosmos_predict25/block_loop.py), and the text encoder's residency.

Eight simulated CPU devices (tests/conftest.py), float32, the tiny demo folder with 4 heads (tp 2 leaves 2 heads per
shard, so sp 2 runs Ulysses' all_to_all) and 3 blocks (offload chunk 2 pads the last chunk with a zero block), 2
sampler steps from explicit initial latents at 32 x 48 x 9 frames (3 x 2 x 3 = 18 video tokens). The reference of
every run is the same folder on one device with the stack under ``lax.scan`` (at diffusers parity in
tests/test_cosmos_predict25_pipeline.py). Guidance 7 gives the transformer a ``[negative, prompt]`` batch of 2, which
dp 2 splits; guidance 1 one evaluation of batch 1. Image- and video-to-world add the conditioning latent frames, the
condition mask and the per-frame timesteps (the frame index of each token split over ``sequence``).
"""

import jax
import numpy as np
import pytest

from vidax.models.cosmos_predict25.demo import write_demo_checkpoint
from vidax.models.cosmos_predict25.pipeline import CosmosPredict25Pipeline

TINY = dict(num_attention_heads=4, num_layers=3)
PROMPT = "a robot arm welds a metal frame, sparks fly"
SIZE = dict(height=32, width=48, num_frames=9, num_inference_steps=2, progress=False)


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def _load(folder, dp=1, tp=1, sp=1, **opts):
    return CosmosPredict25Pipeline.from_pretrained(folder, dtype="float32", dp=dp, tp=tp, sp=sp,
                                                   devices=jax.devices()[: dp * tp * sp], progress=False,
                                                   compile_cache=False, **opts)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_demo_checkpoint(tmp_path_factory.mktemp("cp25_mesh") / "demo", transformer_overrides=TINY)


@pytest.fixture(scope="module")
def latents():
    return np.random.default_rng(3).standard_normal((1, 16, 3, 4, 6), dtype=np.float32)


@pytest.fixture(scope="module")
def conditions():
    """``{task: call keywords}``: an image (one conditioning latent frame) and a 7-frame clip (its last 5 frames:
    two latent frames)."""
    from PIL import Image

    rng = np.random.default_rng(5)
    image = Image.fromarray((rng.random((40, 60, 3)) * 255).astype(np.uint8))
    clip = (rng.random((7, 36, 50, 3)) * 255).astype(np.uint8)
    return {"t2v": {}, "i2v": {"image": image}, "v2v": {"video": clip}}


@pytest.fixture(scope="module")
def reference(folder, latents, conditions):
    """``{(task, guidance_scale): latents}`` on one device, the stack scanned."""
    pipe = _load(folder, block_loop="scan")
    assert pipe.block_loop == "scan"
    runs = [("t2v", 7.0), ("t2v", 1.0), ("i2v", 7.0), ("v2v", 7.0)]
    return {(task, g): pipe(PROMPT, latents=latents, guidance_scale=g, **conditions[task], **SIZE).latents
            for task, g in runs}


@pytest.mark.parametrize("dp, tp, sp, block_loop, guidance", [
    (1, 1, 1, "host", 7.0),
    (1, 2, 1, "host", 7.0),
    (1, 1, 2, "scan", 1.0),
    (2, 2, 2, "host", 7.0),  # the negative and the prompt on the two data shards
], ids=["host", "tp2", "sp2-scan-unguided", "dp2xtp2xsp2-cfg"])
def test_pipeline_on_a_mesh_equals_one_device(folder, latents, reference, dp, tp, sp, block_loop, guidance):
    pipe = _load(folder, dp=dp, tp=tp, sp=sp, block_loop=block_loop)
    out = pipe(PROMPT, latents=latents, guidance_scale=guidance, **SIZE)
    assert out.metrics["mesh"] == {"dp": dp, "tp": tp, "sp": sp} and out.metrics["block_loop"] == block_loop
    if sp > 1:
        assert out.metrics["sequence_parallel"] == "ulysses"
    assert _rel(out.latents, reference[("t2v", guidance)]) < 1e-5


@pytest.mark.parametrize("chunk, chunks, padded", [(1, 3, 3), (2, 2, 4)], ids=["chunk1", "chunk2-padded"])
def test_offloaded_pipeline_equals_resident(folder, latents, reference, chunk, chunks, padded):
    pipe = _load(folder, offload_chunk=chunk, offload_overlap=chunk == 2)
    assert pipe.block_loop == "offload" and "transformer_blocks" not in pipe.transformer_params
    out = pipe(PROMPT, latents=latents, guidance_scale=7.0, **SIZE)
    off = out.metrics["offload"]
    assert (off["chunk"], off["chunks"], off["padded_layers"]) == (chunk, chunks, padded)
    assert _rel(out.latents, reference[("t2v", 7.0)]) < 1e-5


@pytest.mark.parametrize("task", ["i2v", "v2v"])
def test_conditioned_worlds_on_a_mesh_equal_one_device(folder, latents, conditions, reference, task):
    """Image- and video-to-world on dp 2 x tp 2 x sp 2 with guidance: the conditioning frames' latents, mask and
    timesteps split with the batch and the tokens."""
    pipe = _load(folder, dp=2, tp=2, sp=2, block_loop="host")
    out = pipe(PROMPT, latents=latents, guidance_scale=7.0, **conditions[task], **SIZE)
    assert out.metrics["vae_encode_s"] > 0
    # The conditioning frames change the result (the comparison would not see them otherwise).
    assert _rel(reference[(task, 7.0)], reference[("t2v", 7.0)]) > 1e-2
    assert _rel(out.latents, reference[(task, 7.0)]) < 1e-5


def test_text_encoder_is_freed_after_encoding_and_reloaded(folder, latents, reference):
    """``text_encoder_residency="free"``: Qwen's weights are deleted after the prompt and the negative prompt are
    encoded (one load per call, not one per prompt batch), loaded again by the next call, with the same result;
    ``"resident"`` keeps them."""
    pipe = _load(folder, text_encoder_residency="free")
    encoder = pipe.text._encoder
    weights = [a for a in jax.tree_util.tree_leaves(encoder.get()) if isinstance(a, jax.Array)]
    assert len(weights) > 5
    for i in range(2):
        out = pipe(PROMPT, latents=latents, guidance_scale=7.0, **SIZE)
        assert not encoder.resident and pipe.text.loads == i
        assert _rel(out.latents, reference[("t2v", 7.0)]) < 1e-5
    assert all(a.is_deleted() for a in weights)  # deleted, not only dropped
    kept = _load(folder, text_encoder_residency="resident")
    kept(PROMPT, latents=latents, guidance_scale=7.0, **SIZE)
    assert kept.text._encoder.resident and kept.text.loads == 0
