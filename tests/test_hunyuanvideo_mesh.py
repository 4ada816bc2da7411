"""HunyuanVideo pipelines on meshes and with offloaded block stacks (models/hunyuanvideo/block_loop.py).

Eight simulated CPU devices (tests/conftest.py), float32, the tiny demo folder with 4 heads (tp 2 leaves 2 heads per
shard, so sp 2 runs Ulysses' all_to_all), 3 dual-stream and 5 single-stream blocks (offload chunk 2 pads the last
chunk of both stacks with a zero block), 2 sampler steps from explicit initial latents. The reference of every run is
the same folder on one device with both stacks under ``lax.scan`` (the lead's step, at diffusers parity in
tests/test_hunyuanvideo_transformer.py and the pipeline tests); true CFG (negative prompt, ``true_cfg_scale`` 3) gives
the transformer a batch of 2, which dp 2 splits.
"""

import jax
import jax.monitoring
import numpy as np
import pytest
from PIL import Image

from vidax.models.hunyuanvideo import pipeline as hv_pipeline
from vidax.models.hunyuanvideo.demo import write_demo_checkpoint
from vidax.models.hunyuanvideo.pipeline import HunyuanVideoImageToVideoPipeline, HunyuanVideoPipeline

TINY = dict(num_attention_heads=4, num_layers=3, num_single_layers=5)
PROMPT, NEGATIVE = "a cat walks on the grass", "blurry, low quality"
SIZE = dict(height=64, width=64, num_frames=9, num_inference_steps=2, progress=False)


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def _load(folder, cls=HunyuanVideoPipeline, dp=1, tp=1, sp=1, **opts):
    return cls.from_pretrained(folder, dtype="float32", dp=dp, tp=tp, sp=sp, devices=jax.devices()[: dp * tp * sp],
                               progress=False, compile_cache=False, **opts)


def _call(latents, guided):
    extra = dict(negative_prompt=NEGATIVE, true_cfg_scale=3.0) if guided else {}
    return dict(SIZE, latents=latents, **extra)


@pytest.fixture(scope="module")
def t2v(tmp_path_factory):
    return write_demo_checkpoint(tmp_path_factory.mktemp("hv_mesh") / "t2v", transformer_overrides=TINY)


@pytest.fixture(scope="module")
def latents():
    return np.random.default_rng(3).standard_normal((1, 16, 3, 8, 8), dtype=np.float32)


@pytest.fixture(scope="module")
def reference(t2v, latents):
    """``{guided: latents}`` on one device, both stacks scanned."""
    pipe = _load(t2v, block_loop="scan")
    assert pipe.block_loop == "scan" and "single_transformer_blocks" in pipe.transformer_params
    return {guided: pipe(PROMPT, **_call(latents, guided)).latents for guided in (False, True)}


# -- meshes ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dp, tp, sp, block_loop, guided", [
    (1, 2, 1, "host", False),
    (1, 1, 2, "scan", False),
    (2, 1, 1, "host", True),  # true CFG: the negative and the prompt on the two data shards
    (2, 2, 2, "host", True),
], ids=["tp2", "sp2-scan", "dp2-true-cfg", "dp2xtp2xsp2-true-cfg"])
def test_pipeline_on_a_mesh_equals_one_device(t2v, latents, reference, dp, tp, sp, block_loop, guided):
    pipe = _load(t2v, dp=dp, tp=tp, sp=sp, block_loop=block_loop)
    out = pipe(PROMPT, **_call(latents, guided))
    assert out.metrics["mesh"] == {"dp": dp, "tp": tp, "sp": sp} and out.metrics["block_loop"] == block_loop
    if sp > 1:
        assert out.metrics["sequence_parallel"] == "ulysses"
    assert _rel(out.latents, reference[guided]) < 1e-5


# -- offloading --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk, overlap, stacks", [
    (1, True, {"transformer_blocks": (3, 3), "single_transformer_blocks": (5, 5)}),
    (2, False, {"transformer_blocks": (2, 4), "single_transformer_blocks": (3, 6)}),  # both last chunks zero-padded
], ids=["chunk1-overlap", "chunk2-padded-serial"])
def test_offloaded_pipeline_equals_resident(t2v, latents, reference, chunk, overlap, stacks):
    pipe = _load(t2v, offload_chunk=chunk, offload_overlap=overlap)
    assert not {"transformer_blocks", "single_transformer_blocks"} & set(pipe.transformer_params)
    out = pipe(PROMPT, **_call(latents, False))
    off = out.metrics["offload"]
    assert out.metrics["block_loop"] == "offload" and (off["chunk"], off["overlap"]) == (chunk, overlap)
    assert {k: (v["chunks"], v["padded_layers"]) for k, v in off["stacks"].items()} == stacks
    assert (off["chunks"], off["padded_layers"]) == tuple(map(sum, zip(*stacks.values())))
    assert _rel(out.latents, reference[False]) < 1e-5


def test_offloaded_pipeline_on_a_mesh_equals_one_device_and_compiles_one_program_per_stack(t2v, latents, reference):
    """dp 2 x tp 2, chunk 2 (padded), overlap: each device holds its shard of every chunk in host memory; over 2
    steps x (2 + 3) chunks each stack's block program compiles once."""
    pipe = _load(t2v, dp=2, tp=2, offload_chunk=2)
    kernel = pipe.block_chunks["single_transformer_blocks"].chunks[0]["proj_mlp"]["kernel"]
    assert kernel.shape == (2, 64, 256) and kernel.sharding.memory_kind == "pinned_host"
    assert kernel.sharding.shard_shape(kernel.shape) == (2, 64, 128)  # the MLP width over tensor
    compiled = []

    def listener(event, duration, **kw):
        if event == "/jax/core/compile/backend_compile_duration" and "_hunyuan_" in kw.get("fun_name", ""):
            compiled.append(kw["fun_name"])

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        out = pipe(PROMPT, **_call(latents, True))
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert sorted(compiled) == ["jit(_hunyuan_double_chunk)", "jit(_hunyuan_single_chunk)"]
    assert out.metrics["offload"]["chunks"] == 5
    assert _rel(out.latents, reference[True]) < 1e-5
    tree = pipe.transformer_tree()  # the chunks put back together: the checkpoint's stacked blocks
    assert tree["transformer_blocks"]["ff"]["up"]["kernel"].shape == (3, 64, 256)


# -- image-to-video ----------------------------------------------------------------------------------------------------


def test_image_to_video_on_a_mesh_equals_one_device(tmp_path):
    """``token_replace`` (the first latent frame's tokens at t = 0: a per-token AdaLN input split over sequence) on
    tp 2 x sp 2 with the host block loop, against one device with the stacks scanned."""
    folder = write_demo_checkpoint(tmp_path / "i2v", task="i2v", variant="token_replace", transformer_overrides=TINY)
    image = Image.fromarray(np.random.default_rng(4).integers(0, 256, (64, 64, 3), dtype=np.uint8))
    latents = np.random.default_rng(5).standard_normal((1, 16, 3, 8, 8), dtype=np.float32)
    kw = dict(SIZE, image=image, latents=latents, guidance_scale=6.0)
    ref = _load(folder, HunyuanVideoImageToVideoPipeline, block_loop="scan")(PROMPT, **kw)
    out = _load(folder, HunyuanVideoImageToVideoPipeline, tp=2, sp=2, block_loop="host")(PROMPT, **kw)
    assert out.metrics["block_loop"] == "host"
    assert _rel(out.latents, ref.latents) < 1e-5


# -- refusals before any weight is read --------------------------------------------------------------------------------


@pytest.mark.parametrize("opts, match", [
    (dict(offload_chunk=0), r"offload chunk must be an integer between 1 and 3, the layers of the smallest block stack "
                            r"\(it applies to each stack: transformer_blocks 3, single_transformer_blocks 5\), got 0; "
                            r"sizes that divide every stack \(no padding\): \[1\]"),
    (dict(offload_chunk=4), "between 1 and 3.*got 4"),
    (dict(offload_chunk=2.5), "between 1 and 3.*got 2.5"),
    (dict(tp=8), r"tp=8 does not divide the 4 attention heads.*valid tp: 1, 2, 4"),
    (dict(tp=3), "tp=3 does not divide the 4 attention heads"),
    (dict(block_loop="unrolled"), "block_loop must be 'auto', 'scan' or 'host'"),
], ids=["chunk0", "chunk-above-layers", "chunk-fraction", "tp8", "tp3", "block-loop"])
def test_bad_runtime_options_are_refused_before_loading(t2v, monkeypatch, opts, match):
    def no_loading(*args, **kwargs):
        raise AssertionError("weights were read")

    monkeypatch.setattr(hv_pipeline, "load_components", no_loading)
    with pytest.raises(ValueError, match=match):
        _load(t2v, **opts)
