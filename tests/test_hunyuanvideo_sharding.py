"""Tensor and sequence parallelism of the HunyuanVideo transformer on 8 simulated CPU devices.

Float32, tiny configurations with 4 heads of 10 and nonzero biases everywhere; a batch of two samples with
different text lengths (5 and 3 of 7 tokens). The reference of every parallel run is the same transformer on
one device (itself at diffusers parity, tests/test_hunyuanvideo_transformer.py).

Both streams are split over ``sequence``: 27 video tokens (3 x 3 x 3) and 7 text tokens, neither divisible by sp,
so both are padded, and the gathered keys must be reordered around the video padding at every sp > 1.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from vidax.core.params import random_params
from vidax.core.placement import mesh_context
from vidax.core.sharding import ShardingRules, make_mesh
from vidax.models.hunyuanvideo.config import HunyuanVideoTransformerConfig
from vidax.models.hunyuanvideo.sharding import HUNYUAN_VIDEO_RULES, check_parallel
from vidax.models.hunyuanvideo.transformer import forward, transformer_specs

TEXT = 7
BASE = dict(in_channels=4, out_channels=4, num_attention_heads=4, attention_head_dim=10, num_layers=2,
            num_single_layers=2, num_refiner_layers=1, patch_size=1, patch_size_t=1, text_embed_dim=16,
            pooled_projection_dim=8, rope_axes_dim=(2, 4, 4))
CONFIGS = {
    "t2v": HunyuanVideoTransformerConfig(**BASE),
    "token_replace": HunyuanVideoTransformerConfig(**BASE, image_condition_type="token_replace"),
}
SHAPE = (2, 4, 3, 3, 3)


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

        # Biases large enough that a row-parallel bias added tp times would be far outside tolerance; norm scales ~1.
        def perturb(path, a):
            if path[-1].key == "bias":
                return a + 0.5 * rng.standard_normal(a.shape, dtype=np.float32)
            return a + 1.0 if path[-1].key == "scale" else a

        _PARAMS[name] = jax.tree_util.tree_map_with_path(perturb, params)
    return _PARAMS[name]


def _inputs(cfg):
    rng = np.random.default_rng(2)
    mask = np.zeros((2, TEXT), np.int32)
    mask[0, :5], mask[1, :3] = 1, 1
    return dict(latents=rng.standard_normal(SHAPE, dtype=np.float32), timestep=np.array([937.0, 312.5], np.float32),
                encoder_hidden_states=rng.standard_normal((2, TEXT, cfg.text_embed_dim), dtype=np.float32),
                encoder_attention_mask=mask,
                pooled_projections=rng.standard_normal((2, cfg.pooled_projection_dim), dtype=np.float32),
                guidance=np.array([6000.0, 3500.0], np.float32))


_REFERENCE: dict = {}


def _reference(name):
    if name not in _REFERENCE:
        cfg = CONFIGS[name]
        _REFERENCE[name] = np.asarray(forward(jax.tree.map(jnp.asarray, _params(name)), **_inputs(cfg), cfg=cfg))
    return _REFERENCE[name]


def _run(name, dp, tp, sp, **kw):
    cfg, mesh = CONFIGS[name], _mesh(dp, tp, sp)
    params = jax.tree.map(jax.device_put, _params(name),
                          HUNYUAN_VIDEO_RULES.param_shardings(transformer_specs(cfg), mesh))
    with mesh_context(mesh):
        return np.asarray(forward(params, **_inputs(cfg), cfg=cfg, mesh=mesh, **kw))


def test_rules_give_megatron_shardings():
    cfg = CONFIGS["t2v"]
    pspecs = HUNYUAN_VIDEO_RULES.param_specs(transformer_specs(cfg), _mesh(2, 2, 2))
    double, single = pspecs["transformer_blocks"], pspecs["single_transformer_blocks"]
    column, column_bias, row = P(None, None, "tensor"), P(None, "tensor"), P(None, "tensor", None)
    for name in ("to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj"):
        assert double["attn"][name]["kernel"] == column and double["attn"][name]["bias"] == column_bias
    for p in (double["attn"]["to_out"], double["attn"]["to_add_out"], double["ff"]["down"],
              double["ff_context"]["down"]):
        assert p["kernel"] == row and p["bias"] == P(None, None)  # row-parallel: bias replicated, added once
    assert double["ff"]["up"]["kernel"] == column and double["attn"]["norm_added_k"]["scale"] == P(None, None)
    # The single-stream block's fused input and output projections, declared split: heads' q/k/v and an MLP slice
    # per shard, the two halves of the output projection row-parallel with one replicated bias.
    for name in ("to_q", "to_k", "to_v"):
        assert single["attn"][name]["kernel"] == column
    assert single["proj_mlp"]["kernel"] == column and single["proj_mlp"]["bias"] == column_bias
    assert single["proj_out"]["attn"]["kernel"] == row and single["proj_out"]["mlp"]["kernel"] == row
    assert single["proj_out"]["bias"] == P(None, None)
    for p in (double["norm1"], double["norm1_context"], single["norm"]):  # AdaLN output features split
        assert p["linear"]["kernel"] == column
    refiner = pspecs["context_embedder"]["token_refiner"]["refiner_blocks"]
    assert refiner["attn"]["to_q"]["kernel"] == P(None, None, None)  # replicated, outside the block stacks
    assert pspecs["norm_out"]["scale_linear"]["kernel"] == P(None, None)
    assert HUNYUAN_VIDEO_RULES.spec(("batch", "tokens", "embed")) == P("data", "sequence", None)


# (config, (dp, tp, sp)): Ulysses where sp divides the 4 / tp local heads, else keys and values all-gathered.
CASES = [("t2v", (1, 2, 1)), ("t2v", (1, 1, 2)), ("t2v", (2, 2, 2)), ("t2v", (1, 2, 4)),
         ("token_replace", (1, 1, 4))]


@pytest.mark.parametrize("name,split", CASES, ids=[f"{n}-{s}" for n, s in CASES])
def test_parallel_transformer_equals_single_device(name, split):
    out = _run(name, *split)
    ref = _reference(name)
    assert out.shape == ref.shape == (2, 4, *SHAPE[2:])
    assert _rel(out, ref) < 1e-5


def test_parallel_transformer_with_the_cpu_kernel():
    """cpu_flash inside the blocks' shard_map (per-shard kernel calls, no vma check) and in the refiner (a kernel
    outside shard_map, wrapped per shard under the mesh)."""
    from vidax.core.attention import resolve_implementation

    if resolve_implementation("auto", "cpu").value != "cpu_flash":  # `make test` installs (and builds) the package
        pytest.fail("the native CPU attention module is not built: reinstall vidax (make install-test)")
    assert _rel(_run("t2v", 1, 2, 2, attention_impl="cpu_flash"), _reference("t2v")) < 1e-5


@pytest.mark.parametrize("by_shards", [False, True], ids=["whole", "by_shards"])
def test_loading_through_the_views_places_each_shard(tmp_path, by_shards):
    """A diffusers-layout file (written back through the key map and the views) loads already sharded; by shards,
    each device's slice is read from the fused tensor's view (the single-stream proj_out split by input features)."""
    from safetensors.numpy import save_file

    from vidax.checkpoint.loader import load_params
    from vidax.checkpoint.reader import CheckpointReader
    from vidax.checkpoint.writer import to_state_dict
    from vidax.core.params import flatten
    from vidax.models.hunyuanvideo.keymap import transformer_checkpoint, transformer_keymap, transformer_views

    cfg, mesh = CONFIGS["t2v"], _mesh(2, 2, 2)
    specs = transformer_specs(cfg)
    sd = transformer_views(cfg).merge(to_state_dict(_params("t2v"), transformer_keymap(cfg), specs), {})
    assert sd["single_transformer_blocks.0.proj_out.weight"].shape == (40, 40 + 160)
    save_file(sd, str(tmp_path / "diffusion_pytorch_model.safetensors"))
    loaded = load_params(*transformer_checkpoint(CheckpointReader(tmp_path), cfg), specs,
                         shardings=HUNYUAN_VIDEO_RULES.sharding_fn(mesh), by_shards=by_shards)
    mlp = loaded["single_transformer_blocks"]["proj_out"]["mlp"]["kernel"]
    assert mlp.sharding.spec == P(None, "tensor", None) and len(mlp.sharding.device_set) == 8
    want = dict(flatten(_params("t2v")))
    for path, a in flatten(loaded):
        np.testing.assert_array_equal(np.asarray(a), want[path], err_msg=path)


def test_check_parallel_errors_are_clear():
    six = HunyuanVideoTransformerConfig(**{**BASE, "num_attention_heads": 6, "rope_axes_dim": (2, 4, 4)})
    message = re.escape("tp=4 does not divide the 6 attention heads") + ".*valid tp: 1, 2, 3, 6(\\n|$)"
    with pytest.raises(ValueError, match=message):
        check_parallel(six, _mesh(1, 4, 1))
    with pytest.raises(ValueError, match=message):  # from forward, at trace time, before anything is compiled
        forward(random_params(transformer_specs(six)), **_inputs(six), cfg=six, mesh=_mesh(1, 4, 1))
    release = HunyuanVideoTransformerConfig()  # the 13B model: 24 heads
    with pytest.raises(ValueError, match=re.escape("tp=5 does not divide the 24 attention heads") +
                       ".*valid tp: 1, 2, 3, 4, 6, 8, 12, 24$"):
        check_parallel(release, _mesh(1, 5, 1))
    check_parallel(release, _mesh(1, 8, 1))
    check_parallel(release, _mesh(1, 1, 7))  # any sp: both streams are padded
    with pytest.raises(ValueError, match="dp=2 does not divide the transformer batch of 3.*valid dp: 1, 3"):
        check_parallel(release, _mesh(2, 1, 1), batch=3)
    split = ShardingRules.of({**dict(HUNYUAN_VIDEO_RULES.rules), "mlp": "sequence"})
    with pytest.raises(ValueError, match="over one tensor axis"):
        check_parallel(release, _mesh(1, 2, 2), split)
