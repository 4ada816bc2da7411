"""The device mesh, sharding rules, and tensor/sequence parallelism of the Wan transformer.

Eight simulated CPU devices (tests/conftest.py), float32, a tiny Wan configuration with 4
heads and nonzero biases everywhere. The reference value of every parallel run is the same
transformer on one device (itself at diffusers parity, tests/test_wan_transformer.py).
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from vidax.checkpoint import loader
from vidax.checkpoint.loader import DictReader, load_params
from vidax.core.parallel import ShardContext, sequence_mode
from vidax.core.params import flatten
from vidax.core.sharding import MESH_AXES, ShardingRules, make_mesh
from vidax.models.wan.config import WanTransformerConfig
from vidax.models.wan.demo import random_params, random_state_dict
from vidax.models.wan.keymap import transformer_keymap_diffusers
from vidax.models.wan.sharding import WAN_RULES, check_parallel
from vidax.models.wan.transformer import forward, rope_tables, transformer_specs

CFG = WanTransformerConfig(
    num_attention_heads=4, attention_head_dim=16, in_channels=4, out_channels=4, text_dim=24, freq_dim=32,
    ffn_dim=96, num_layers=2, rope_max_seq_len=64,
)
SHAPE = (2, 4, 2, 4, 4)  # 2 x 2 x 2 = 8 tokens
ODD_SHAPE = (2, 4, 3, 2, 6)  # 3 x 1 x 3 = 9 tokens: no sp > 1 divides it
TEXT_LEN = 6


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def _mesh(dp, tp, sp):
    return make_mesh(dp, tp, sp, devices=jax.devices()[: dp * tp * sp])


@pytest.fixture(scope="module")
def host_params():
    params = random_params(transformer_specs(CFG), np.random.default_rng(0))
    rng = np.random.default_rng(1)
    # Biases large enough that adding a row-parallel bias tp times (fault 5) is far outside tolerance.
    return jax.tree_util.tree_map_with_path(
        lambda path, a: a + 0.5 * rng.standard_normal(a.shape, dtype=np.float32)
        if path[-1].key == "bias" else a, params)


def _inputs(shape, seed=2):
    rng = np.random.default_rng(seed)
    latents = rng.standard_normal(shape, dtype=np.float32)
    timestep = np.array([937.0, 312.5], np.float32)[: shape[0]]
    context = rng.standard_normal((shape[0], TEXT_LEN, CFG.text_dim), dtype=np.float32)
    cos, sin = rope_tables(CFG, shape)
    return latents, timestep, context, cos, sin


_REFERENCE: dict = {}


def _reference(host_params, shape):
    if shape not in _REFERENCE:
        _REFERENCE[shape] = np.asarray(forward(jax.tree.map(jnp.asarray, host_params), *_inputs(shape), cfg=CFG))
    return _REFERENCE[shape]


def _sharded(host_params, mesh):
    return jax.tree.map(jax.device_put, host_params, WAN_RULES.param_shardings(transformer_specs(CFG), mesh))


def _run(host_params, shape, dp, tp, sp, fn=forward, **kw):
    mesh = _mesh(dp, tp, sp)
    return np.asarray(fn(_sharded(host_params, mesh), *_inputs(shape), cfg=CFG, mesh=mesh, **kw))


# -- mesh and rules ---------------------------------------------------------------


def test_mesh_has_three_named_axes_of_the_requested_sizes():
    mesh = make_mesh(2, 2, 2)
    assert mesh.axis_names == MESH_AXES == ("data", "tensor", "sequence")
    assert dict(mesh.shape) == {"data": 2, "tensor": 2, "sequence": 2}
    assert mesh.devices.size == 8


@pytest.mark.parametrize("sizes", [(1, 2, 2), (1, 3, 3), (4, 4, 1)])
def test_mesh_not_covering_the_devices_is_a_clear_error(sizes):
    with pytest.raises(ValueError, match=r"dp\*tp\*sp = .* but there are 8 devices.*Splits of 8") as err:
        make_mesh(*sizes)
    # more devices than there are: on a CPU the message says how to simulate them
    assert ("xla_force_host_platform_device_count=16" in str(err.value)) == (sizes == (4, 4, 1))


def test_mesh_sizes_must_be_positive():
    with pytest.raises(ValueError, match="positive integers"):
        make_mesh(0, 8, 1)


def test_wan_rules_give_megatron_shardings():
    specs = transformer_specs(CFG)
    mesh = _mesh(2, 2, 2)
    pspecs = WAN_RULES.param_specs(specs, mesh)
    blocks = pspecs["blocks"]
    # Column-parallel: output features over tensor, bias sliced with them.
    for name in ("to_q", "to_k", "to_v"):
        assert blocks["attn1"][name]["kernel"] == P(None, None, "tensor")
        assert blocks["attn1"][name]["bias"] == P(None, "tensor")
    assert blocks["ffn"]["up"]["kernel"] == P(None, None, "tensor")
    assert blocks["ffn"]["up"]["bias"] == P(None, "tensor")
    # Row-parallel: input rows over tensor, bias replicated (added once after the reduction).
    assert blocks["attn1"]["to_out"]["kernel"] == P(None, "tensor", None)
    assert blocks["attn1"]["to_out"]["bias"] == P(None, None)
    assert blocks["ffn"]["down"]["kernel"] == P(None, "tensor", None)
    assert blocks["ffn"]["down"]["bias"] == P(None, None)
    assert blocks["attn1"]["norm_q"]["scale"] == P(None, "tensor")  # QK-norm across heads: scale split with heads
    assert blocks["scale_shift_table"] == P(None, None, None, None)
    assert pspecs["patch_embedding"]["kernel"] == P(None, None, None, None, None)
    assert WAN_RULES.spec(("batch", "tokens", "embed")) == P("data", "sequence", None)


def test_rules_reject_collisions_unknown_axes_and_indivisible_dims():
    with pytest.raises(ValueError, match="more than once"):
        ShardingRules((("heads", "tensor"), ("heads", None)))
    rules = ShardingRules.of({"heads": "tensor", "mlp": "tensor", "embed": None})
    with pytest.raises(ValueError, match="collision in w: dimensions 0 .'heads'. and 1 .'mlp'. both map to mesh axis 'tensor'"):
        rules.spec(("heads", "mlp"), what="w")
    with pytest.raises(ValueError, match="logical axis 'embedd' has no sharding rule"):
        rules.spec(("embedd",))
    mesh = _mesh(1, 4, 1)
    with pytest.raises(ValueError, match=r"w: dimension 0 of shape \(6, 8\) \(6\) is not divisible .* size 4"):
        rules.spec(("heads", None), shape=(6, 8), mesh=mesh, what="w")
    with pytest.raises(ValueError, match=r"mesh axes \['model'\]"):
        ShardingRules.of({"heads": "model"}).check_mesh(mesh)


def test_overrides_by_path_pattern_come_first():
    from vidax.core.params import ParamSpec

    rules = ShardingRules.of({"embed": None, "heads": "tensor"}, overrides=[(r"blocks/.*/to_out/bias", P("tensor"))])
    assert rules.param_spec("blocks/attn1/to_out/bias", ParamSpec((8,), axes=("embed",))) == P("tensor")
    assert rules.param_spec("blocks/attn1/to_q/bias", ParamSpec((8,), axes=("heads",))) == P("tensor")
    assert rules.param_spec("proj_out/bias", ParamSpec((8,), axes=("embed",))) == P(None)


# -- parallel transformer == one device --------------------------------------------

# (tp, sp) of the issue, with dp 1, and dp 2 wherever dp * tp * sp <= 8.
SPLITS = [(dp, tp, sp) for tp, sp in [(2, 1), (4, 1), (1, 2), (1, 4), (2, 2), (2, 4)] for dp in (1, 2) if dp * tp * sp <= 8]


@pytest.mark.parametrize("dp,tp,sp", SPLITS, ids=lambda v: str(v))
def test_parallel_transformer_equals_single_device(host_params, dp, tp, sp):
    out = _run(host_params, SHAPE, dp, tp, sp)
    assert _rel(out, _reference(host_params, SHAPE)) < 1e-5


@pytest.mark.parametrize("dp,tp,sp", [(1, 1, 4), (1, 2, 2), (1, 2, 4)], ids=lambda v: str(v))
def test_token_count_not_divisible_by_sp_is_padded_and_masked(host_params, dp, tp, sp):
    # 9 tokens -> 12 (sp=4) or 10 (sp=2): padded keys masked, padded rows removed after the blocks.
    out = _run(host_params, ODD_SHAPE, dp, tp, sp)
    ref = _reference(host_params, ODD_SHAPE)
    assert out.shape == ref.shape
    assert _rel(out, ref) < 1e-5


def test_sequence_mode_is_ulysses_where_sp_divides_the_local_heads():
    assert sequence_mode(4, 2) == sequence_mode(4, 4) == sequence_mode(2, 2) == "ulysses"
    assert sequence_mode(2, 4) == "kv_all_gather"  # the (tp, sp) = (2, 4) case above, 4 heads
    assert sequence_mode(3, 2) == "kv_all_gather"  # Wan 1.3B's 12 heads at tp=4, sp=2


def test_row_parallel_bias_is_added_once(host_params, monkeypatch):
    """Fault 5: the parity above would fail if a row-parallel bias were added on every tensor shard."""
    ref = _reference(host_params, SHAPE)
    assert _rel(_run(host_params, SHAPE, 1, 4, 1), ref) < 1e-5

    def bias_per_shard(self, p, x, out_dtype=None):  # the fault: bias inside the reduction
        w = p["kernel"]
        y = jnp.matmul(x.astype(w.dtype), w, preferred_element_type=jnp.float32) + p["bias"]
        return self.psum_tensor(y).astype(out_dtype or w.dtype)

    monkeypatch.setattr(ShardContext, "row_linear", bias_per_shard)
    # A new function object: jit caches traces per function, and forward's cache holds the correct trace.
    fresh = jax.jit(lambda *a, **k: forward.__wrapped__(*a, **k), static_argnames=("cfg", "mesh"))
    assert _rel(_run(host_params, SHAPE, 1, 4, 1, fn=fresh), ref) > 1e-2


def test_head_count_not_divisible_by_tp_is_a_clear_error(host_params):
    with pytest.raises(ValueError, match=re.escape("tp=8 does not divide the 4 attention heads") + ".*valid tp: 1, 2, 4"):
        _run(host_params, SHAPE, 1, 8, 1)
    wan_1_3b = WanTransformerConfig(num_attention_heads=12, attention_head_dim=128, ffn_dim=8960, num_layers=30)
    with pytest.raises(ValueError, match="valid tp: 1, 2, 3, 4, 6, 12"):
        check_parallel(wan_1_3b, make_mesh(1, 8, 1))
    with pytest.raises(ValueError, match="dp=2 does not divide the transformer batch of 1"):
        check_parallel(CFG, _mesh(2, 1, 1), batch=1)


# -- loading already sharded ----------------------------------------------------------


@pytest.mark.parametrize("on_device_stacking", [False, True], ids=["host_stack", "layer_by_layer"])
def test_loader_places_every_parameter_sharded(host_params, monkeypatch, on_device_stacking):
    """``load_params(shardings=rules.sharding_fn(mesh))``: each leaf arrives with its NamedSharding.

    ``layer_by_layer`` forces the accelerator path (stacked leaves allocated sharded, then filled
    one layer at a time with the per-layer sharding) on the CPU devices.
    """
    specs = transformer_specs(CFG)
    keymap = transformer_keymap_diffusers(CFG)
    reader = DictReader(random_state_dict(keymap, specs, np.random.default_rng(5)))
    expected = load_params(reader, keymap, specs, np.float32, place=False)
    mesh = _mesh(2, 2, 2)
    if on_device_stacking:
        monkeypatch.setattr(loader, "_streams_layers", lambda sharding: True)
    params = load_params(reader, keymap, specs, np.float32, shardings=WAN_RULES.sharding_fn(mesh))
    want = WAN_RULES.param_shardings(specs, mesh)
    for (path, arr), (_, sharding), (_, host) in zip(flatten(params), flatten(want), flatten(expected)):
        assert isinstance(arr.sharding, NamedSharding), path
        assert arr.sharding.is_equivalent_to(sharding, arr.ndim), path
        np.testing.assert_array_equal(np.asarray(arr), host, err_msg=path)
    kernel = params["blocks"]["attn1"]["to_q"]["kernel"]
    assert kernel.addressable_shards[0].data.shape == (CFG.num_layers, CFG.dim, CFG.dim // 2)


def test_splash_kernel_inside_the_block_shard_map(host_params):
    """The Pallas kernel runs per shard inside the blocks' shard_map (Ulysses + TP), padding as segment ids."""
    out = _run(host_params, ODD_SHAPE, 1, 2, 2, attention_impl="splash")
    assert _rel(out, _reference(host_params, ODD_SHAPE)) < 1e-5


# -- the pipeline on a mesh -------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_ckpt(tmp_path_factory):
    from vidax.models.wan.demo import write_demo_checkpoint

    # The demo checkpoint with 4 heads (its default 2 cannot be split by tp=2 and sp=2 at once).
    return write_demo_checkpoint(tmp_path_factory.mktemp("wan") / "demo", seed=3,
                                 transformer_overrides={"num_attention_heads": 4})


def test_pipeline_frames_on_a_mesh_equal_single_device(demo_ckpt):
    """dp=2 (CFG halves on data) x tp=2 x sp=2: frames equal the one-device run."""
    from vidax.models.wan.pipeline import WanPipeline

    kw = dict(height=32, width=32, num_frames=1, num_inference_steps=2, output_type="float", progress=False)
    single = WanPipeline.from_pretrained(demo_ckpt, dtype="float32")("a red panda", "blurry", **kw)
    pipe = WanPipeline.from_pretrained(demo_ckpt, dtype="float32", dp=2, tp=2, sp=2, block_loop="scan")
    kernel = pipe.transformer_params["blocks"]["attn1"]["to_q"]["kernel"]
    assert kernel.sharding.spec == P(None, None, "tensor") and len(kernel.sharding.device_set) == 8
    out = pipe("a red panda", "blurry", **kw)
    assert out.metrics["mesh"] == {"dp": 2, "tp": 2, "sp": 2} and out.metrics["sequence_parallel"] == "ulysses"
    assert _rel(out.latents, single.latents) < 1e-5
    assert _rel(out.frames, single.frames) < 1e-5
    # The CPU default, the host block loop, on the same mesh: one-block chunks with the same shardings.
    host = WanPipeline.from_pretrained(demo_ckpt, dtype="float32", dp=2, tp=2, sp=2)
    chunk = host.offload.chunks[0]["attn1"]["to_q"]["kernel"]
    assert host.block_loop == "host" and chunk.shape[0] == 1 and chunk.sharding.spec == P(None, None, "tensor")
    assert _rel(host("a red panda", "blurry", **kw).latents, single.latents) < 1e-5
    assert np.abs(out.frames - single.frames).max() < 1e-4


def test_pipeline_rejects_a_bad_split_before_loading(demo_ckpt):
    from vidax.models.wan.pipeline import WanPipeline

    with pytest.raises(ValueError, match="tp=8 does not divide the 4 attention heads.*valid tp: 1, 2, 4"):
        WanPipeline.from_pretrained(demo_ckpt, dtype="float32", tp=8)
    with pytest.raises(ValueError, match=r"dp\*tp\*sp = 1\*2\*1 = 2, but there are 8 devices"):
        WanPipeline.from_pretrained(demo_ckpt, dtype="float32", tp=2)


def test_cli_mesh_flags_reach_the_pipeline(demo_ckpt, tmp_path, capsys):
    from vidax.cli import main

    rc = main(["generate", "--checkpoint", str(demo_ckpt), "--prompt", "x", "--out", str(tmp_path / "v.mp4"),
               "--dp", "1", "--tp", "8", "--sp", "1", "--attention", "splash"])
    assert rc == 2
    assert "tp=8 does not divide the 4 attention heads" in capsys.readouterr().err


@pytest.mark.parametrize("sizes", [(1, 0, 1), (-1, -1, 1), (1, True, 1), (1, 1, 2.0)])
def test_optional_mesh_checks_sizes_even_when_their_product_is_one(sizes):
    """``tp=0`` or ``dp=tp=-1`` is not one device: the pipelines' mesh refuses them (they used to run unsharded)."""
    from vidax.core.sharding import optional_mesh

    with pytest.raises(ValueError, match="mesh sizes must be positive integers"):
        optional_mesh(*sizes)
    assert optional_mesh() is None
