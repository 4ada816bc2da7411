"""Tensor and sequence parallelism, the host block loop and weight offloading of the Cosmos3 transformer on 8
simulated CPU devices (tests/conftest.py sets ``--xla_force_host_platform_device_count=8``).

Float32, an Edge-like tiny configuration (``relu2``, Nemotron norms, ``k_norm_und_for_gen``, attention biases: a
row-parallel bias added tp times would show) with 4 heads of 16 over 2 key/value heads and 3 layers (chunks of 2 pad
the last chunk with a zero layer); a CFG-like batch of two prompts of 5 and 3 tokens (right-padded), the first latent
frame conditioning. 27 vision tokens (3 x 3 x 3): sp does not divide them, so they are padded and the padded keys
moved past every valid length. tp 2 x sp 4 leaves one head per tensor shard for 4 sequence shards: keys and values are
all-gathered instead of Ulysses' all_to_all. The reference of every run is the same transformer on one device with its
layers under ``lax.scan`` (itself at diffusers parity: tests/test_cosmos3_transformer.py).
"""

import jax
import numpy as np
import pytest

from vidax.checkpoint.writer import save_component, to_state_dict
from vidax.core.params import random_params
from vidax.core.sharding import make_mesh
from vidax.models.cosmos3 import block_loop
from vidax.models.cosmos3.config import Cosmos3TransformerConfig
from vidax.models.cosmos3.keymap import load_transformer, transformer_keymap
from vidax.models.cosmos3.sharding import check_parallel
from vidax.models.cosmos3.transformer import STACK, forward, transformer_specs, und_prefill

CFG = Cosmos3TransformerConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                               num_key_value_heads=2, head_dim=16, latent_channel=4, latent_patch_size=2,
                               patch_latent_dim=16, vocab_size=40, rope_scaling={"mrope_section": [4, 2, 2]},
                               hidden_act="relu2", qk_norm_for_text=False, use_und_k_norm_for_gen=True,
                               rms_norm_eps=1e-5, rope_theta=1e8, attention_bias=True)
SHAPE = (2, 4, 3, 5, 6)
LENGTHS = np.array([5, 3], np.int32)
N = 3 * 3 * 3


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def _mesh(dp, tp, sp):
    return make_mesh(dp, tp, sp, devices=jax.devices()[: dp * tp * sp])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    params = random_params(transformer_specs(CFG), seed=0, scale=0.2)
    rng = np.random.default_rng(1)

    def perturb(path, a):
        key = path[-1].key
        if key == "bias":
            return a + 0.5 * rng.standard_normal(a.shape, dtype=np.float32)
        return a + 1.0 if key == "scale" else a

    params = jax.tree_util.tree_map_with_path(perturb, params)
    path = tmp_path_factory.mktemp("cosmos3-mesh")
    save_component(path, "diffusion_pytorch_model.safetensors",
                   to_state_dict(params, transformer_keymap(CFG), transformer_specs(CFG)), CFG.to_dict())
    return path


def _inputs():
    """``(input_ids, text positions, lengths)`` and the gen step's ``GenArgs``: the pipeline's positions (text
    ``arange``, vision from ``L_b + 15000``, temporal index x 1.5 for 16 fps at base 24)."""
    rng = np.random.default_rng(2)
    ids = rng.integers(0, 40, (2, 5)).astype(np.int32)
    text = np.broadcast_to(np.arange(5, dtype=np.float32), (2, 3, 5)).copy()
    t, h, w = 3, 3, 3
    grid = np.stack(np.meshgrid(np.arange(t) * 1.5, np.arange(h), np.arange(w), indexing="ij")).reshape(3, -1)
    vision = np.stack([grid + np.array([[n + 15000.0], [0], [0]]) for n in LENGTHS]).astype(np.float32)
    noisy = np.array([[0, 1, 1], [0, 1, 1]], np.float32)
    args = block_loop.GenArgs(LENGTHS, rng.standard_normal(SHAPE, dtype=np.float32),
                              np.array([800.0, 800.0], np.float32), vision, noisy)
    return (ids, text, LENGTHS), args


@pytest.fixture(scope="module")
def reference(folder):
    loaded = load_transformer(folder)
    (ids, text, lengths), a = _inputs()
    out = forward(loaded.params, CFG, ids, text, lengths, a.latents, a.timestep, a.position_ids, a.noisy)
    cache = und_prefill(loaded.params, CFG, ids, text, lengths)
    return np.asarray(out), np.asarray(cache.k), np.asarray(cache.v)


# name -> (dp, tp, sp) or None, offload_chunk, block_loop, overlap
CASES = {
    "tp2": ((1, 2, 1), None, "scan", True),
    "sp2": ((1, 1, 2), None, "scan", True),
    "dp2-tp2-sp2": ((2, 2, 2), None, "scan", True),
    "tp2-sp4-gather": ((1, 2, 4), None, "scan", True),
    "offload-chunk1": (None, 1, "auto", True),
    "offload-chunk2-serial": (None, 2, "auto", False),
    "host-loop": (None, None, "host", True),
    "dp2-tp2-sp2-offload-chunk2": ((2, 2, 2), 2, "auto", True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_mesh_and_block_loops_equal_one_device(name, folder, reference):
    sizes, chunk, loop, overlap = CASES[name]
    mesh = None if sizes is None else _mesh(*sizes)
    loaded = load_transformer(folder, mesh=mesh, offload_chunk=chunk, block_loop=loop)
    expected_loop = {"scan": "scan", "host": "host"}.get(loop, "offload") if chunk or loop == "host" else "scan"
    assert block_loop.loop_name(loaded.stacks) == expected_loop
    timings: list = []
    prefill = block_loop.make_prefill(loaded.params, loaded.stacks, cfg=CFG, mesh=mesh, overlap=overlap)
    step = block_loop.make_gen_step(loaded.params, loaded.stacks, cfg=CFG, mesh=mesh, overlap=overlap,
                                    timings=timings)
    (ids, text, lengths), args = _inputs()
    cache = prefill(loaded.params, ids, text, lengths)
    out = step(loaded.params, cache, tuple(args))
    ref, ref_k, ref_v = reference
    k = np.asarray(cache.k)[: CFG.num_hidden_layers]
    v = np.asarray(cache.v)[: CFG.num_hidden_layers]
    errs = (_rel(out, ref), _rel(k, ref_k), _rel(v, ref_v))
    print(f"{name}: velocity rel err {errs[0]:.2e}, cache k {errs[1]:.2e}, v {errs[2]:.2e}")
    assert max(errs) < 1e-5
    if sizes is not None and sizes[1] > 1:
        assert cache.k.sharding.spec[3] == "tensor"  # the und cache split over key/value heads
    if not overlap:
        assert len(timings) == 2  # two chunks (the second zero-padded), copy and compute timed apart


def test_check_parallel_names_the_valid_sizes():
    with pytest.raises(ValueError, match="tp"):
        check_parallel(CFG, _mesh(1, 4, 1))  # 2 key/value heads
    with pytest.raises(ValueError, match="valid dp: 1, 3"):
        check_parallel(CFG, _mesh(2, 1, 1), batch=3)
    assert STACK == "layers"
