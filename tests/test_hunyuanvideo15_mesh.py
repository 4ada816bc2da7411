"""Tensor and sequence parallelism and weight offloading of the HunyuanVideo-1.5 transformer on 8 simulated CPU devices
(tests/conftest.py).

Float32, a tiny MeanFlow image-to-video configuration with 4 heads of 16 and nonzero biases everywhere; a batch of two
samples whose Qwen texts keep 5 and 3 of 6 tokens and whose byT5 texts keep 3 and 0 of 5. The reference of every run is
the same transformer on one device with its blocks under ``lax.scan`` (itself at diffusers parity,
tests/test_hunyuanvideo15_transformer.py). Both streams are split over ``sequence``: 27 video tokens (3 x 3 x 3) and 15
context tokens (4 image, 5 byT5, 6 Qwen), neither divisible by sp, so both are padded and the gathered keys are put
back in order around the video padding.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from vidax.core.offload import OffloadedStack
from vidax.core.params import random_params
from vidax.core.placement import mesh_context
from vidax.core.sharding import ShardingRules, make_mesh
from vidax.models.hunyuanvideo15 import block_loop
from vidax.models.hunyuanvideo15.config import HunyuanVideo15TransformerConfig
from vidax.models.hunyuanvideo15.sharding import HUNYUAN_VIDEO15_RULES, check_parallel
from vidax.models.hunyuanvideo15.transformer import STACK, forward, transformer_specs

CFG = HunyuanVideo15TransformerConfig(in_channels=9, out_channels=4, num_attention_heads=4, attention_head_dim=16,
                                      num_layers=3, num_refiner_layers=1, text_embed_dim=16, text_embed_2_dim=12,
                                      image_embed_dim=10, rope_axes_dim=(4, 6, 6), use_meanflow=True)
SHAPE = (2, 9, 3, 3, 3)


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def _mesh(dp, tp, sp):
    return make_mesh(dp, tp, sp, devices=jax.devices()[: dp * tp * sp])


_PARAMS: dict = {}


def _params():
    if not _PARAMS:
        params = random_params(transformer_specs(CFG), seed=0, scale=0.1)
        rng = np.random.default_rng(1)

        # Biases large enough that a row-parallel bias added tp times would be far outside tolerance; norm scales ~1.
        def perturb(path, a):
            if path[-1].key == "bias":
                return a + 0.5 * rng.standard_normal(a.shape, dtype=np.float32)
            return a + 1.0 if path[-1].key == "scale" else a

        _PARAMS.update(jax.tree_util.tree_map_with_path(perturb, params))
    return _PARAMS


def _inputs():
    rng = np.random.default_rng(2)
    mask, mask_2 = np.zeros((2, 6), np.int32), np.zeros((2, 5), np.int32)
    mask[0, :5], mask[1, :3], mask_2[0, :3] = 1, 1, 1
    return (rng.standard_normal(SHAPE, dtype=np.float32), np.array([937.0, 312.5], np.float32),
            rng.standard_normal((2, 6, CFG.text_embed_dim), dtype=np.float32), mask,
            rng.standard_normal((2, 5, CFG.text_embed_2_dim), dtype=np.float32), mask_2,
            rng.standard_normal((2, 4, CFG.image_embed_dim), dtype=np.float32), np.array([812.0, 0.0], np.float32))


_REFERENCE: list = []


def _reference():
    if not _REFERENCE:
        _REFERENCE.append(np.asarray(forward(jax.tree.map(jnp.asarray, _params()), *_inputs(), cfg=CFG)))
    return _REFERENCE[0]


def _placed(mesh):
    return jax.tree.map(jax.device_put, _params(), HUNYUAN_VIDEO15_RULES.param_shardings(transformer_specs(CFG), mesh))


def test_rules_give_megatron_shardings():
    pspecs = HUNYUAN_VIDEO15_RULES.param_specs(transformer_specs(CFG), _mesh(2, 2, 2))
    blocks = pspecs[STACK]
    column, column_bias, row = P(None, None, "tensor"), P(None, "tensor"), P(None, "tensor", None)
    for name in ("to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj"):
        assert blocks["attn"][name]["kernel"] == column and blocks["attn"][name]["bias"] == column_bias
    attn = blocks["attn"]
    for p in (attn["to_out"], attn["to_add_out"], blocks["ff"]["down"], blocks["ff_context"]["down"]):
        assert p["kernel"] == row and p["bias"] == P(None, None)  # row-parallel: bias replicated, added once
    assert blocks["ff"]["up"]["kernel"] == column and blocks["attn"]["norm_added_k"]["scale"] == P(None, None)
    for p in (blocks["norm1"], blocks["norm1_context"]):  # AdaLN output features split
        assert p["linear"]["kernel"] == column
    for outside in (pspecs["context_embedder"]["token_refiner"]["refiner_blocks"]["attn"]["to_q"]["kernel"],
                    pspecs["context_embedder_2"]["linear_2"]["kernel"], pspecs["image_embedder"]["linear_1"]["kernel"],
                    pspecs["cond_type_embed"]["embedding"], pspecs["norm_out"]["scale_linear"]["kernel"]):
        assert all(axis is None for axis in outside)  # replicated, outside the block stack


# (dp, tp, sp): Ulysses' all_to_all (sp divides the 4 / tp local heads; the other mode, keys and values all-gathered,
# is the same core code as HunyuanVideo 13B's, tested there).
SPLITS = [(1, 2, 1), (1, 1, 2), (2, 2, 2)]


@pytest.mark.parametrize("split", SPLITS, ids=[f"dp{d}-tp{t}-sp{s}" for d, t, s in SPLITS])
def test_parallel_transformer_equals_single_device(split):
    mesh = _mesh(*split)
    with mesh_context(mesh):
        out = np.asarray(forward(_placed(mesh), *_inputs(), cfg=CFG, mesh=mesh))
    ref = _reference()
    assert out.shape == ref.shape == (2, 4, *SHAPE[2:])
    assert _rel(out, ref) < 1e-5


def test_the_cpu_kernel_runs_per_shard_without_a_mesh_context():
    """cpu_flash (an FFI call GSPMD cannot partition) inside the blocks' shard_map and in the token refiner, which runs
    in its own explicit shard_map (paper Table 4 fault 7): no ``jax.set_mesh`` is needed around the call."""
    from vidax.core.attention import resolve_implementation

    if resolve_implementation("auto", "cpu").value != "cpu_flash":  # `make test` installs (and builds) the package
        pytest.fail("the native CPU attention module is not built: reinstall vidax (make install-test)")
    mesh = _mesh(2, 2, 2)
    params, inputs = _placed(mesh), _inputs()
    compiled = forward.lower(params, *inputs, cfg=CFG, mesh=mesh, attention_impl="cpu_flash").compile()
    assert _rel(compiled(params, *inputs), _reference()) < 1e-5
    # The refiner's kernel call (6 Qwen tokens, 4 heads of 16) sees one sample per data shard. Without the explicit
    # shard_map, GSPMD all-gathers the batch and runs the whole call on every device (on CPU that still computes; a
    # Pallas or cuDNN call there is the paper's partitioning failure).
    refiner = [line for line in compiled.as_text().splitlines()
               if "vidax_attention_f32" in line and re.search(r"= f32\[\d+,6,4,16\]", line)]
    assert refiner and all("= f32[1,6,4,16]" in line and "all-gather" not in line for line in refiner), refiner


def _stacks(chunk, mesh=None, memory_kind="auto"):
    params = _params() if mesh is None else _placed(mesh)
    shardings = None if mesh is None else HUNYUAN_VIDEO15_RULES.param_shardings(transformer_specs(CFG), mesh)[STACK]
    rest = {k: v for k, v in params.items() if k != STACK}
    return jax.tree.map(jnp.asarray, rest) if mesh is None else rest, {
        STACK: OffloadedStack.from_stacked(params[STACK], chunk, shardings, memory_kind)}


CHUNKS = [(2, "auto", True, None), (1, "device", True, None), (2, "auto", False, (2, 2, 2))]


@pytest.mark.parametrize("chunk,memory,overlap,split", CHUNKS, ids=["chunk2-padded", "host-loop", "chunk2-dp2tp2sp2"])
def test_offloaded_and_host_loop_steps_equal_the_resident_forward(chunk, memory, overlap, split):
    """Chunks of 2 blocks in host memory (the last padded with a zero block, which is the identity), streamed with
    overlap on one device and serially (copy, wait, compute) on a dp 2 x tp 2 x sp 2 mesh, and the host block loop
    (one-block chunks in device memory)."""
    mesh = None if split is None else _mesh(*split)
    params, stacks = _stacks(chunk, mesh, memory)
    assert block_loop.loop_name(stacks) == ("host" if memory == "device" else "offload")
    assert stacks[STACK].plan.padded_layers == (4 if chunk == 2 else 3)  # 3 blocks
    args = tuple(_inputs())
    timings = [] if not overlap else None
    step = block_loop.compile_step(params, stacks, args, cfg=CFG, mesh=mesh, overlap=overlap, timings=timings)
    out = np.asarray(step(params, args))
    assert _rel(out, _reference()) < (1e-6 if mesh is None else 1e-5)
    if timings is not None:
        assert len(timings) == stacks[STACK].num_chunks
    np.testing.assert_array_equal(np.asarray(step(params, args)), out)  # a second step reuses the programs


def test_prepare_and_finish_run_inside_the_step():
    """The pipeline's work around the transformer: a CFG batch built in the prologue (``prepare``) and the guided
    combination in the epilogue (``finish``), resident and offloaded, equal to doing it outside."""
    latents, t, text, mask, text_2, mask_2, image, t_r = _inputs()
    noise, cond = latents[:1, :4], latents[:1, 4:]

    def prepare(noise, cond, t, text, mask, text_2, mask_2, image, t_r):
        x = jnp.concatenate([noise, cond], axis=1)
        return block_loop.TransformerInputs(jnp.concatenate([x, x]), jnp.concatenate([t, t]), text, mask, text_2,
                                            mask_2, jnp.concatenate([image, image]), jnp.concatenate([t_r, t_r]))

    def finish(out, scale):
        pos, neg = jnp.split(out, 2)
        return neg + scale * (pos - neg)

    args = (noise, cond, t[:1], text, mask, text_2, mask_2, image[:1], t_r[:1])
    ref_in = prepare(*args)
    want = np.asarray(finish(forward(jax.tree.map(jnp.asarray, _params()), *ref_in, cfg=CFG), 4.5))
    for params, stacks in (_stacks(2), (jax.tree.map(jnp.asarray, _params()), None)):
        step = block_loop.compile_step(params, stacks, args, (np.float32(4.5),), cfg=CFG, prepare=prepare,
                                       finish=finish)
        out = np.asarray(step(params, args, (np.float32(4.5),)))
        assert out.shape == (1, 4, *SHAPE[2:])
        assert _rel(out, want) < 1e-6


def test_offload_chunk_and_mesh_errors_are_clear():
    with pytest.raises(ValueError, match="offload chunk must be an integer between 1 and 3"):
        block_loop.plans_for(CFG, 4)
    assert block_loop.plans_for(CFG, None, "scan") is None
    assert block_loop.plans_for(CFG, 2)[STACK].chunk == 2
    release = HunyuanVideo15TransformerConfig()  # 16 heads
    with pytest.raises(ValueError, match=re.escape("tp=3 does not divide the 16 attention heads") +
                       ".*valid tp: 1, 2, 4, 8, 16$"):
        check_parallel(release, _mesh(1, 3, 1))
    check_parallel(release, _mesh(1, 8, 1))
    check_parallel(release, _mesh(1, 1, 7))  # any sp: both streams are padded
    with pytest.raises(ValueError, match="dp=2 does not divide the transformer batch of 3.*valid dp: 1, 3"):
        check_parallel(release, _mesh(2, 1, 1), batch=3)
    split = ShardingRules.of({**dict(HUNYUAN_VIDEO15_RULES.rules), "mlp": "sequence"})
    with pytest.raises(ValueError, match="over one tensor axis"):
        check_parallel(release, _mesh(1, 2, 2), split)
    # From forward, at trace time, before anything is compiled:
    with pytest.raises(ValueError, match="tp=8 does not divide the 4 attention heads"):
        forward(_placed(_mesh(1, 1, 1)), *_inputs(), cfg=CFG, mesh=_mesh(1, 8, 1))
