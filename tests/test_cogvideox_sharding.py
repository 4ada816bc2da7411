"""Tensor and sequence parallelism of the CogVideoX transformer, and its pipeline on a mesh.

Eight simulated CPU devices (tests/conftest.py), float32, tiny configurations with 4 heads and
nonzero biases everywhere. The reference of every parallel run is the same transformer on one
device (itself at diffusers parity, tests/test_cogvideox_transformer.py).

Sequence parallelism splits the *joint* sequence (7 text tokens, then the video tokens), so the
text/video boundary falls inside a shard (token 7 of 16 at sp = 2 and 4): the expert AdaLN and
the video-only RoPE are exercised across it.
"""

import re

import jax
import jax.monitoring
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from vidax.core.parallel import ShardContext
from vidax.core.params import random_params
from vidax.core.sharding import make_mesh
from vidax.models.cogvideox.config import CogVideoXTransformerConfig
from vidax.models.cogvideox.sharding import COGVIDEOX_RULES, check_parallel
from vidax.models.cogvideox.transformer import forward, num_tokens, position_tables, transformer_specs

TEXT = 7
BASE = dict(num_attention_heads=4, attention_head_dim=16, in_channels=4, out_channels=4, time_embed_dim=24,
            text_embed_dim=20, num_layers=2, sample_width=8, sample_height=6, sample_frames=9, patch_size=2,
            max_text_seq_length=TEXT)
CONFIGS = {
    "5b": CogVideoXTransformerConfig(**BASE, use_rotary_positional_embeddings=True),
    "1.5": CogVideoXTransformerConfig(**{**BASE, "sample_width": 10, "sample_height": 8, "sample_frames": 17},
                                      use_rotary_positional_embeddings=True, patch_size_t=2, patch_bias=False),
    "2b": CogVideoXTransformerConfig(**BASE),  # fixed sin-cos positions, no RoPE
}
# (B, F, C, H, W) latents; joint tokens = 7 text + video.
SHAPES = {
    "5b": (2, 3, 4, 2, 6),  # 9 video tokens: 16 joint, divisible by sp = 2 and 4
    "5b_odd": (2, 2, 4, 2, 6),  # 6 video tokens: 13 joint, padded to 14 (sp = 2) or 16 (sp = 4)
    "1.5": (2, 4, 4, 4, 6),  # 2 x 2 x 3 = 12 video tokens (2 latent frames per token): 19 joint, padded
    "2b_odd": (2, 2, 4, 2, 6),
}


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def _mesh(dp, tp, sp):
    return make_mesh(dp, tp, sp, devices=jax.devices()[: dp * tp * sp])


_PARAMS: dict = {}


def _params(name):
    if name not in _PARAMS:
        params = random_params(transformer_specs(CONFIGS[name]), seed=0, scale=0.1)
        rng = np.random.default_rng(1)

        # Biases large enough that adding a row-parallel bias tp times (fault 5) is far outside tolerance;
        # norm scales around 1.
        def perturb(path, a):
            if path[-1].key == "bias":
                return a + 0.5 * rng.standard_normal(a.shape, dtype=np.float32)
            return a + 1.0 if path[-1].key == "scale" else a

        _PARAMS[name] = jax.tree_util.tree_map_with_path(perturb, params)
    return _PARAMS[name]


def _inputs(name, shape):
    rng = np.random.default_rng(2)
    latents = rng.standard_normal(shape, dtype=np.float32)
    timestep = np.array([937.0, 312.5], np.float32)[: shape[0]]
    context = rng.standard_normal((shape[0], TEXT, CONFIGS[name].text_embed_dim), dtype=np.float32)
    return latents, timestep, context, position_tables(CONFIGS[name], shape)


_REFERENCE: dict = {}


def _reference(name, shape_key):
    key = (name, shape_key)
    if key not in _REFERENCE:
        params = jax.tree.map(jnp.asarray, _params(name))
        _REFERENCE[key] = np.asarray(forward(params, *_inputs(name, SHAPES[shape_key]), cfg=CONFIGS[name]))
    return _REFERENCE[key]


def _run(name, shape_key, dp, tp, sp, fn=forward):
    cfg, mesh = CONFIGS[name], _mesh(dp, tp, sp)
    params = jax.tree.map(jax.device_put, _params(name), COGVIDEOX_RULES.param_shardings(transformer_specs(cfg), mesh))
    return np.asarray(fn(params, *_inputs(name, SHAPES[shape_key]), cfg=cfg, mesh=mesh))


# -- rules -----------------------------------------------------------------------------


def test_cogvideox_rules_give_megatron_shardings():
    pspecs = COGVIDEOX_RULES.param_specs(transformer_specs(CONFIGS["5b"]), _mesh(2, 2, 2))
    blocks = pspecs["blocks"]
    for name in ("to_q", "to_k", "to_v"):  # column-parallel: output features and their bias
        assert blocks["attn1"][name]["kernel"] == P(None, None, "tensor")
        assert blocks["attn1"][name]["bias"] == P(None, "tensor")
    assert blocks["ff"]["up"]["kernel"] == P(None, None, "tensor") and blocks["ff"]["up"]["bias"] == P(None, "tensor")
    for p in (blocks["attn1"]["to_out"], blocks["ff"]["down"]):  # row-parallel: rows split, bias replicated
        assert p["kernel"] == P(None, "tensor", None) and p["bias"] == P(None, None)
    assert blocks["attn1"]["norm_q"]["scale"] == P(None, None)  # per-head LayerNorm over head_dim: replicated
    for norm in ("norm1", "norm2"):  # AdaLN projections: 6 dim output features split, gathered in the block
        assert blocks[norm]["linear"]["kernel"] == P(None, None, "tensor")
        assert blocks[norm]["norm"]["scale"] == P(None, None)
    assert pspecs["norm_out"]["linear"]["kernel"] == P(None, None)
    assert pspecs["patch_embed"]["text_proj"]["kernel"] == P(None, None)
    assert COGVIDEOX_RULES.spec(("batch", "tokens", "embed")) == P("data", "sequence", None)


# -- parallel transformer == one device ----------------------------------------------------

CASES = (
    [("5b", "5b", s) for s in [(1, 2, 1), (1, 1, 2), (1, 1, 4), (1, 2, 2), (2, 2, 2)]]
    + [("5b", "5b_odd", s) for s in [(1, 1, 2), (1, 1, 4), (1, 2, 2)]]
    + [("1.5", "1.5", s) for s in [(1, 2, 1), (1, 1, 2), (1, 1, 4), (1, 2, 2)]]
    # No RoPE; tp=2, sp=4: 2 heads per tensor shard, so keys/values are all-gathered instead of Ulysses.
    + [("2b", "2b_odd", (1, 2, 4))]
)


@pytest.mark.parametrize("name,shape_key,split", CASES, ids=[f"{c[1]}-{c[2]}" for c in CASES])
def test_parallel_transformer_equals_single_device(name, shape_key, split):
    out = _run(name, shape_key, *split)
    ref = _reference(name, shape_key)
    assert out.shape == ref.shape
    assert _rel(out, ref) < 1e-5


def test_token_counts_of_the_cases():
    # The joint counts the cases above rely on (text tokens + video tokens).
    counts = {k: TEXT + num_tokens(CONFIGS[k.split("_")[0]], s) for k, s in SHAPES.items()}
    assert counts == {"5b": 16, "5b_odd": 13, "1.5": 19, "2b_odd": 13}


def test_row_parallel_bias_is_added_once(monkeypatch):
    """Fault 5: the parity above fails if a row-parallel bias is added on every tensor shard."""
    ref = _reference("5b", "5b")

    def bias_per_shard(self, p, x, out_dtype=None):  # the fault: bias inside the reduction
        w = p["kernel"]
        y = jnp.matmul(x.astype(w.dtype), w, preferred_element_type=jnp.float32) + p["bias"]
        return self.psum_tensor(y).astype(out_dtype or w.dtype)

    monkeypatch.setattr(ShardContext, "row_linear", bias_per_shard)
    # A new function object: jit caches traces per function, and forward's cache holds the correct trace.
    fresh = jax.jit(lambda *a, **k: forward.__wrapped__(*a, **k), static_argnames=("cfg", "mesh"))
    assert _rel(_run("5b", "5b", 1, 2, 1, fn=fresh), ref) > 1e-2


def test_head_count_not_divisible_by_tp_is_a_clear_error():
    six = CogVideoXTransformerConfig(**{**BASE, "num_attention_heads": 6}, use_rotary_positional_embeddings=True)
    message = re.escape("tp=4 does not divide the 6 attention heads") + ".*valid tp: 1, 2, 3, 6(\\n|$)"
    with pytest.raises(ValueError, match=message):
        check_parallel(six, _mesh(1, 4, 1))
    shape = SHAPES["5b"]
    inputs = _inputs("5b", shape)[:3] + (position_tables(six, shape),)
    with pytest.raises(ValueError, match=message):  # at trace time, before anything is compiled
        forward(random_params(transformer_specs(six)), *inputs, cfg=six, mesh=_mesh(1, 4, 1))
    cogvideox_2b = CogVideoXTransformerConfig()  # 30 heads
    with pytest.raises(ValueError, match=re.escape("tp=4 does not divide the 30 attention heads") +
                       ".*valid tp: 1, 2, 3, 5, 6, 10, 15, 30$"):
        check_parallel(cogvideox_2b, _mesh(1, 4, 1))
    check_parallel(cogvideox_2b, _mesh(1, 2, 4))  # any sp
    with pytest.raises(ValueError, match="dp=2 does not divide the transformer batch of 1"):
        check_parallel(CONFIGS["5b"], _mesh(2, 1, 1), batch=1)


# -- the pipeline on a mesh -------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_ckpt(tmp_path_factory):
    from vidax.models.cogvideox.demo import write_demo_checkpoint

    # 4 heads (the demo's 2 cannot be split by tp=2 and sp=2 with Ulysses); 3 layers, so that offloading in
    # chunks of 2 pads the last chunk.
    return write_demo_checkpoint(tmp_path_factory.mktemp("cogvideox") / "demo", seed=3, variant="5b",
                                 transformer_overrides={"num_attention_heads": 4, "num_layers": 3})


def test_pipeline_frames_on_a_mesh_equal_single_device(demo_ckpt):
    """dp=2 (CFG halves on data) x tp=2 x sp=2 (226 text + 4 video tokens): frames equal the one-device run."""
    from vidax.models.cogvideox.pipeline import CogVideoXPipeline

    kw = dict(height=32, width=32, num_frames=1, num_inference_steps=2, output_type="float", progress=False)
    single = CogVideoXPipeline.from_pretrained(demo_ckpt, dtype="float32")("a red panda", "blurry", **kw)
    pipe = CogVideoXPipeline.from_pretrained(demo_ckpt, dtype="float32", dp=2, tp=2, sp=2, block_loop="scan")
    blocks = pipe.transformer_params["blocks"]
    kernel = blocks["attn1"]["to_q"]["kernel"]  # loaded already sharded
    assert kernel.sharding.spec == P(None, None, "tensor") and len(kernel.sharding.device_set) == 8
    assert blocks["norm1"]["linear"]["kernel"].sharding.spec == P(None, None, "tensor")
    out = pipe("a red panda", "blurry", **kw)
    assert out.metrics["mesh"] == {"dp": 2, "tp": 2, "sp": 2} and out.metrics["sequence_parallel"] == "ulysses"
    assert _rel(out.latents, single.latents) < 1e-5
    assert _rel(out.frames, single.frames) < 1e-5
    assert np.abs(out.frames - single.frames).max() < 1e-4
    # The CPU default, the host block loop, on the same mesh: one-block chunks with the same shardings.
    host = CogVideoXPipeline.from_pretrained(demo_ckpt, dtype="float32", dp=2, tp=2, sp=2)
    chunk = host.block_chunks.chunks[0]["attn1"]["to_q"]["kernel"]
    assert host.block_loop == "host" and chunk.shape[0] == 1 and chunk.sharding.spec == P(None, None, "tensor")
    assert _rel(host("a red panda", "blurry", **kw).latents, single.latents) < 1e-5


@pytest.mark.parametrize("split, chunk, overlap", [((2, 2, 2), 2, True), ((1, 2, 4), 1, False)], ids=str)
def test_offloaded_pipeline_on_a_mesh_equals_single_device(demo_ckpt, split, chunk, overlap):
    """offload_chunk on a mesh: each device holds its shard of every chunk in pinned host memory and receives
    only that shard; the block program compiles once for all chunks and steps; the latents are the resident
    one-device run's (dp=2 x tp=2 x sp=2 Ulysses with the last chunk zero-padded; tp=2 x sp=4, serial copies,
    keys and values all-gathered)."""
    from vidax.models.cogvideox.pipeline import CogVideoXPipeline

    kw = dict(height=32, width=32, num_frames=1, num_inference_steps=2, output_type="float", progress=False)
    single = CogVideoXPipeline.from_pretrained(demo_ckpt, dtype="float32", block_loop="scan")("a red panda", "blurry",
                                                                                              **kw)
    dp, tp, sp = split
    pipe = CogVideoXPipeline.from_pretrained(demo_ckpt, dtype="float32", dp=dp, tp=tp, sp=sp, offload_chunk=chunk,
                                             offload_overlap=overlap)
    kernel = pipe.block_chunks.chunks[0]["attn1"]["to_q"]["kernel"]
    assert pipe.block_loop == "offload" and kernel.shape[0] == chunk
    assert kernel.sharding.memory_kind == "pinned_host" and kernel.sharding.spec == P(None, None, "tensor")
    assert len(kernel.sharding.device_set) == 8
    compiled = []

    def listener(event, duration, **k):
        if event == "/jax/core/compile/backend_compile_duration" and "_cog_block_chunk" in k.get("fun_name", ""):
            compiled.append(k["fun_name"])

    jax.clear_caches()
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        out = pipe("a red panda", "blurry", **kw)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert len(compiled) == 1  # chunks x steps, one compilation
    n = -(-3 // chunk)
    assert out.metrics["offload"]["chunks"] == n and out.metrics["offload"]["padded_layers"] == n * chunk
    assert out.metrics["offload"]["overlap"] is overlap and out.metrics["mesh"] == {"dp": dp, "tp": tp, "sp": sp}
    assert out.metrics["sequence_parallel"] == ("ulysses" if sp == 2 else "kv_all_gather")
    assert _rel(out.latents, single.latents) < 1e-5
    assert np.abs(out.frames - single.frames).max() < 1e-4


def test_pipeline_rejects_a_bad_split_before_loading(demo_ckpt):
    from vidax.models.cogvideox.pipeline import CogVideoXPipeline

    with pytest.raises(ValueError, match="tp=8 does not divide the 4 attention heads.*valid tp: 1, 2, 4"):
        CogVideoXPipeline.from_pretrained(demo_ckpt, dtype="float32", tp=8)
    with pytest.raises(ValueError, match=r"dp\*tp\*sp = 1\*2\*1 = 2, but there are 8 devices"):
        CogVideoXPipeline.from_pretrained(demo_ckpt, dtype="float32", tp=2)
