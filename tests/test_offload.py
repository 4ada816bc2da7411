"""Per-layer weight offloading (vidax.core.offload, vidax.models.wan.offload, the pipeline's offload_chunk).

Eight simulated CPU devices (tests/conftest.py), float32, a tiny 3-layer Wan configuration with
nonzero biases, so chunk 2 pads its last chunk with a zero layer. The reference of every run is
the resident transformer on one device.
"""

import jax
import jax.monitoring
import jax.numpy as jnp
import numpy as np
import pytest

from vidax.checkpoint.loader import DictReader, LayerChunks, load_params
from vidax.core.offload import (ChunkPlan, OffloadedStack, block_placement, block_plans, host_memory_kind, stream,
                                stream_stacks)
from vidax.core.params import flatten
from vidax.core.sharding import make_mesh
from vidax.models.wan.config import WanTransformerConfig
from vidax.models.wan.demo import random_params, random_state_dict
from vidax.models.wan.keymap import transformer_keymap_diffusers
from vidax.models.wan.offload import forward_offloaded, offload_blocks
from vidax.models.wan.sharding import WAN_RULES
from vidax.models.wan.transformer import forward, rope_tables, transformer_specs

CFG = WanTransformerConfig(
    num_attention_heads=4, attention_head_dim=16, in_channels=4, out_channels=4, text_dim=24, freq_dim=32,
    ffn_dim=96, num_layers=3, rope_max_seq_len=64,
)
SHAPE = (2, 4, 2, 4, 4)  # 8 tokens
TEXT_LEN = 6


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


@pytest.fixture(scope="module")
def host_params():
    params = random_params(transformer_specs(CFG), np.random.default_rng(0))
    rng = np.random.default_rng(1)
    return jax.tree_util.tree_map_with_path(
        lambda path, a: a + 0.5 * rng.standard_normal(a.shape, dtype=np.float32) if path[-1].key == "bias" else a,
        params)


@pytest.fixture(scope="module")
def inputs():
    rng = np.random.default_rng(2)
    latents = rng.standard_normal(SHAPE, dtype=np.float32)
    timestep = np.array([937.0, 312.5], np.float32)
    context = rng.standard_normal((2, TEXT_LEN, CFG.text_dim), dtype=np.float32)
    return (latents, timestep, context, *rope_tables(CFG, SHAPE))


@pytest.fixture(scope="module")
def reference(host_params, inputs):
    return np.asarray(forward(jax.tree.map(jnp.asarray, host_params), *inputs, cfg=CFG))


def _mesh(dp, tp, sp):
    return make_mesh(dp, tp, sp, devices=jax.devices()[: dp * tp * sp])


# -- the transformer, offloaded == resident ------------------------------------------------


@pytest.mark.parametrize("chunk", [1, 2])
@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "serial"])
def test_offloaded_transformer_equals_resident_single_device(host_params, inputs, reference, chunk, overlap):
    resident, stack = offload_blocks(jax.tree.map(jnp.asarray, host_params), chunk, CFG)
    assert stack.num_chunks == -(-CFG.num_layers // chunk)
    leaf = stack.chunks[0]["ffn"]["up"]["kernel"]
    assert leaf.shape[0] == chunk and leaf.sharding.memory_kind == host_memory_kind() == "pinned_host"
    out = forward_offloaded(resident, stack, *inputs, cfg=CFG, overlap=overlap)
    assert _rel(out, reference) < 1e-5


# Every (tp, sp) split of the mesh acceptance, dp 1 and dp 2 wherever dp*tp*sp <= 8, offloaded in
# chunks of 1 and 2 blocks (overlapped), plus the serial mode on the largest split.
_SPLITS = [(dp, tp, sp) for tp, sp in [(2, 1), (4, 1), (1, 2), (1, 4), (2, 2), (2, 4)] for dp in (1, 2)
           if dp * tp * sp <= 8]


@pytest.mark.parametrize("dp,tp,sp,chunk,overlap",
                         [(*split, chunk, True) for split in _SPLITS for chunk in (1, 2)] + [(2, 2, 2, 2, False)],
                         ids=lambda v: str(v))
def test_offloaded_transformer_on_a_mesh_equals_resident(host_params, inputs, reference, dp, tp, sp, chunk, overlap):
    mesh = _mesh(dp, tp, sp)
    params = jax.tree.map(jax.device_put, host_params, WAN_RULES.param_shardings(transformer_specs(CFG), mesh))
    resident, stack = offload_blocks(params, chunk, CFG, mesh)
    kernel = stack.chunks[0]["attn1"]["to_q"]["kernel"]
    # Chunks carry the resident sharding rules, in host memory: each device holds its own shard.
    assert kernel.sharding.spec == params["blocks"]["attn1"]["to_q"]["kernel"].sharding.spec
    assert kernel.sharding.memory_kind == "pinned_host"
    assert kernel.addressable_shards[0].data.shape == (chunk, CFG.dim, CFG.dim // tp)
    with jax.set_mesh(mesh):
        out = forward_offloaded(resident, stack, *inputs, cfg=CFG, mesh=mesh, overlap=overlap)
    assert _rel(out, reference) < 1e-5


def test_one_compilation_of_the_chunk_function(host_params, inputs, reference):
    """Three chunks of one layer, two forwards: the chunk function compiles exactly once."""
    resident, stack = offload_blocks(jax.tree.map(jnp.asarray, host_params), 1, CFG)
    compiled = []

    def listener(event, duration, **kw):
        if event == "/jax/core/compile/backend_compile_duration" and "_offload_chunk" in kw.get("fun_name", ""):
            compiled.append(kw["fun_name"])

    jax.clear_caches()
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        for overlap in (True, False):
            out = forward_offloaded(resident, stack, *inputs, cfg=CFG, overlap=overlap)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert len(compiled) == 1
    assert _rel(out, reference) < 1e-5


# -- the streaming loop -----------------------------------------------------------------------


class _FakeStack:
    in_device_memory = False

    def __init__(self, n, events):
        self.num_chunks, self.events = n, events

    def fetch(self, i):
        self.events.append(f"fetch{i}")
        return i


def test_stream_runs_chunks_in_device_memory_without_fetching():
    """The host block loop: chunks already in device memory are run in order, never fetched."""
    events = []

    class Resident(_FakeStack):
        in_device_memory = True

        def __init__(self, n, events):
            super().__init__(n, events)
            self.chunks = list(range(n))

    out = stream(Resident(3, events), lambda chunk, carry: events.append(f"run{chunk}") or carry + [chunk], [])
    assert out == [0, 1, 2] and events == ["run0", "run1", "run2"]


def test_chunk_plan_memory_is_host_or_device():
    assert ChunkPlan(4, 2).memory == "host" and ChunkPlan(4, 1, "device").memory == "device"
    with pytest.raises(ValueError, match="memory must be 'host' or 'device'"):
        ChunkPlan(4, 1, "disk")


@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "serial"])
def test_stream_issues_the_next_copy_before_computing(overlap):
    events = []

    def run(chunk, carry):
        events.append(f"run{chunk}")
        return carry + [chunk]

    out = stream(_FakeStack(3, events), run, [], overlap=overlap)
    assert out == [0, 1, 2]
    if overlap:  # chunk i+1 is in flight while chunk i runs; never more than two chunks fetched ahead
        assert events == ["fetch0", "fetch1", "run0", "fetch2", "run1", "run2"]
    else:
        assert events == ["fetch0", "run0", "fetch1", "run1", "fetch2", "run2"]


@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "serial"])
def test_stream_stacks_streams_two_stacks_as_one_sequence(overlap):
    """The first chunk of the second stack is copied while the last chunk of the first computes (never more than
    two chunks fetched ahead), each stack's chunks run by its own function."""
    events = []

    class Named(_FakeStack):
        def __init__(self, name, n):
            super().__init__(n, events)
            self.name = name

        def fetch(self, i):
            events.append(f"fetch {self.name}{i}")
            return f"{self.name}{i}"

    def run(kind):
        return lambda chunk, carry: events.append(f"{kind} {chunk}") or carry + [chunk]

    out = stream_stacks([(Named("d", 2), run("double")), (Named("s", 2), run("single"))], [], overlap=overlap)
    assert out == ["d0", "d1", "s0", "s1"]
    if overlap:
        assert events == ["fetch d0", "fetch d1", "double d0", "fetch s0", "double d1", "fetch s1", "single s0",
                          "single s1"]
    else:
        assert events == ["fetch d0", "double d0", "fetch d1", "double d1", "fetch s0", "single s0", "fetch s1",
                          "single s1"]


def test_block_plans_chunk_every_stack_with_one_size():
    """HunyuanVideo's 20 dual-stream and 40 single-stream blocks: chunk 20 is the paper's "20/40"."""
    plans = block_plans({"transformer_blocks": 20, "single_transformer_blocks": 40}, 20)
    assert [(p.num_chunks, p.padded_layers, p.memory) for p in plans.values()] == [(1, 20, "host"), (2, 40, "host")]
    assert list(plans) == ["transformer_blocks", "single_transformer_blocks"]
    assert block_plans({"a": 3, "b": 5}, None, "scan") is None
    host = block_plans({"a": 3, "b": 5}, None, "host")
    assert {k: (p.chunk, p.memory, p.num_chunks) for k, p in host.items()} == {"a": (1, "device", 3),
                                                                                "b": (1, "device", 5)}
    for bad in (0, 21, 2.5, True):
        with pytest.raises(ValueError, match=r"between 1 and 20, the layers of the smallest block stack \(it applies "
                                             r"to each stack: transformer_blocks 20, single_transformer_blocks 40\).*"
                                             r"divide every stack \(no padding\): \[1, 2, 4, 5, 10, 20\]"):
            block_plans({"transformer_blocks": 20, "single_transformer_blocks": 40}, bad)


def test_block_placement_chunks_each_stack_by_its_plan():
    """A mapping of plans chunks every stack named in it (and nothing else); a bare plan is the stack "blocks"."""
    plans = {"double": ChunkPlan(3, 2), "single": ChunkPlan(5, 2, "device")}
    place = block_placement(plans)
    spec = None
    double, single = place("double/attn/kernel", spec), place("single/mlp/kernel", spec)
    assert isinstance(double, LayerChunks) and isinstance(single, LayerChunks)
    assert (double.size, single.size) == (2, 2) and single.sharding.memory_kind == "device"
    assert double.sharding.memory_kind == host_memory_kind()
    assert place("doubles/kernel", spec) is None and place("blocks/kernel", spec) is None
    bare = block_placement(ChunkPlan(3, 1))
    assert isinstance(bare("blocks/kernel", spec), LayerChunks) and bare("double/kernel", spec) is None


def test_chunk_plan_pads_and_rejects_bad_sizes():
    plan = ChunkPlan(40, 15)
    assert (plan.num_chunks, plan.padded_layers, plan.bounds(2)) == (3, 45, (30, 40))
    for bad in (0, 41, 2.5):
        with pytest.raises(ValueError, match=r"between 1 and the 40 layers.*divide 40 \(no padding\): \[1, 2, 4, 5, 8, 10, 20, 40\]"):
            ChunkPlan(40, bad)


# -- loading straight into host memory -------------------------------------------------------


def test_loader_places_block_chunks_in_host_memory_without_a_device_copy(monkeypatch):
    specs = transformer_specs(CFG)
    keymap = transformer_keymap_diffusers(CFG)
    reader = DictReader(random_state_dict(keymap, specs, np.random.default_rng(5)))
    expected = load_params(reader, keymap, specs, np.float32, place=False)
    mesh = _mesh(1, 2, 2)
    resident = WAN_RULES.sharding_fn(mesh)

    def placement(path, spec):
        s = resident(path, spec)
        return LayerChunks(s.with_memory_kind("pinned_host"), 2) if path.startswith("blocks/") else s

    targets = []
    real_put = jax.device_put

    def recording_put(x, device=None, *a, **k):
        targets.append((tuple(np.shape(x)), getattr(device, "memory_kind", None)))
        return real_put(x, device, *a, **k)

    monkeypatch.setattr(jax, "device_put", recording_put)
    for by_shards in (False, True):
        params = load_params(reader, keymap, specs, np.float32, shardings=placement, by_shards=by_shards)
        for (path, got), (_, want) in zip(flatten(params), flatten(expected)):
            if not path.startswith("blocks/"):
                np.testing.assert_array_equal(np.asarray(got), want, err_msg=path)
                continue
            assert isinstance(got, tuple) and len(got) == 2, path
            assert all(c.sharding.memory_kind == "pinned_host" for c in got), path
            stacked = np.concatenate([np.asarray(c) for c in got])
            np.testing.assert_array_equal(stacked[: CFG.num_layers], want, err_msg=path)
            assert not stacked[CFG.num_layers :].any(), path  # the padding layer is zeros
    # Nothing was placed in device memory on the way: every transfer of a block chunk targeted host memory.
    chunk_shapes = {(2, *spec.shape[1:]) for path, spec in flatten(specs) if path.startswith("blocks/")}
    assert not chunk_shapes & {spec.shape for path, spec in flatten(specs) if not path.startswith("blocks/")}
    block_puts = [kind for shape, kind in targets if shape in chunk_shapes]
    assert block_puts and set(block_puts) == {"pinned_host"}


def test_from_chunk_leaves_rejects_ragged_chunks():
    a = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="chunked leaves disagree"):
        OffloadedStack.from_chunk_leaves({"x": (a, a), "y": (a,)}, {"x": None, "y": None}, 4)


# -- the pipeline -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_ckpt(tmp_path_factory):
    from vidax.models.wan.demo import write_demo_checkpoint

    return write_demo_checkpoint(tmp_path_factory.mktemp("wan") / "demo", seed=3,
                                 transformer_overrides={"num_attention_heads": 4, "num_layers": 3})


def _chunk_compilations(run):
    """``(run(), names of the offload chunk functions compiled meanwhile)``, from a cold cache."""
    compiled = []

    def listener(event, duration, **k):
        if event == "/jax/core/compile/backend_compile_duration" and "_offload_chunk" in k.get("fun_name", ""):
            compiled.append(k["fun_name"])

    jax.clear_caches()
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        return run(), compiled
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)


def test_pipeline_with_offloading_on_a_mesh_equals_resident_and_compiles_one_chunk_function(demo_ckpt):
    from vidax.models.wan.pipeline import WanPipeline

    kw = dict(height=32, width=32, num_frames=1, num_inference_steps=3, output_type="float", progress=False)
    single = WanPipeline.from_pretrained(demo_ckpt, dtype="float32")("a red panda", "blurry", **kw)
    pipe = WanPipeline.from_pretrained(demo_ckpt, dtype="float32", dp=2, tp=2, sp=2, offload_chunk=2)
    assert "blocks" not in pipe.transformer_params
    assert pipe.offload.chunks[0]["ffn"]["down"]["kernel"].sharding.memory_kind == "pinned_host"
    out, compiled = _chunk_compilations(lambda: pipe("a red panda", "blurry", **kw))
    assert len(compiled) == 1  # 2 chunks x 3 steps, one compilation
    assert out.metrics["offload"] == {"chunk": 2, "chunks": 2, "padded_layers": 4, "overlap": True,
                                      "chunk_bytes_per_device": out.metrics["offload"]["chunk_bytes_per_device"],
                                      "host_memory_kind": "pinned_host"}
    assert _rel(out.latents, single.latents) < 1e-5
    assert np.abs(out.frames - single.frames).max() < 1e-4


def test_cli_offload_chunk_reaches_the_pipeline(demo_ckpt, tmp_path, capsys):
    from vidax.cli import main

    rc = main(["generate", "--checkpoint", str(demo_ckpt), "--prompt", "x", "--out", str(tmp_path / "v.mp4"),
               "--offload-chunk", "7"])
    assert rc == 2
    assert "offload chunk must be an integer between 1 and the 3 layers" in capsys.readouterr().err


def test_benchmark_script_imports():
    import importlib

    bench = importlib.import_module("bench.offload")
    assert callable(bench.main) and bench.LATENT[0] == 1


@pytest.mark.parametrize("task, mesh", [("ti2v", (1, 1, 1)), ("ti2v", (2, 2, 2)), ("i2v", (1, 2, 4)),
                                        ("t2v-a14b", (2, 2, 2))], ids=str)
def test_image_and_wan22_pipelines_offloaded_equal_resident(task, mesh, tmp_path):
    """WanImageToVideoPipeline with offloading (chunks of 2 of 3 blocks, every expert's blocks in pinned host
    memory): TI2V-5B image-to-video (per-token AdaLN, temb6 split over sequence), Wan2.1 I2V (CLIP tokens), A14B
    (both experts offloaded, switched at the boundary), on one device and on meshes: the resident frames; the
    chunk function compiles once for all chunks, steps and experts."""
    from PIL import Image

    from vidax.models.wan.demo import write_demo_checkpoint
    from vidax.models.wan.pipeline import WanPipeline
    from vidax.models.wan.pipeline_i2v import OffloadedExpert

    ckpt = write_demo_checkpoint(tmp_path / task, seed=5, task=task,
                                 transformer_overrides={"num_attention_heads": 4, "num_layers": 3})
    image = Image.fromarray((np.random.default_rng(0).random((70, 100, 3)) * 255).astype(np.uint8))
    kw = dict(height=32, width=64 if task == "ti2v" else 32, num_frames=5, num_inference_steps=3, flow_shift=3.0,
              output_type="float", progress=False, image=None if task == "t2v-a14b" else image)
    resident = WanPipeline.from_pretrained(ckpt, dtype="float32")("a red panda", "blurry", **kw)
    dp, tp, sp = mesh
    pipe = WanPipeline.from_pretrained(ckpt, dtype="float32", dp=dp, tp=tp, sp=sp, offload_chunk=2)
    experts = [pipe.experts.get(i) for i in pipe.experts.resident()]
    assert len(experts) == (2 if task == "t2v-a14b" else 1) and all(isinstance(e, OffloadedExpert) for e in experts)
    assert all(e.stack.chunks[0]["ffn"]["up"]["kernel"].sharding.memory_kind == "pinned_host" for e in experts)
    out, compiled = _chunk_compilations(lambda: pipe("a red panda", "blurry", **kw))
    assert len(compiled) == 1
    assert out.metrics["offload"]["chunks"] == 2 and out.metrics["expert_switch_step"] == resident.metrics[
        "expert_switch_step"]
    assert _rel(out.latents, resident.latents) < 1e-5
    assert np.abs(out.frames - resident.frames).max() < 1e-4
