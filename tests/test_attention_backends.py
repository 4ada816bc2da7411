"""Every attention implementation behind ``vidax.core.attention.attention`` equals the ``xla`` reference.

Random inputs with right padding on the keys (one sample with no valid key at all), sequence
lengths that are not multiples of any kernel block. The Pallas TPU splash kernel runs here in
Pallas interpret mode; cuDNN cannot run on CPU, so its tests check the dispatch and the
announced fallback (bench/gpu_attention.py checks the kernel itself on a GPU).
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from vidax.core import attention as attention_mod
from vidax.core.attention import AttentionFallbackWarning, AttentionImpl, attention, resolve_implementation
from vidax.core.sharding import make_mesh

B, SQ, SK, H, D = 3, 200, 150, 4, 32
TOL = {jnp.float32: 1e-5, jnp.bfloat16: 1e-2}


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def _qkv(dtype, sq=SQ, sk=SK, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, sq, H, D), dtype=np.float32)
    k = rng.standard_normal((B, sk, H, D), dtype=np.float32)
    v = rng.standard_normal((B, sk, H, D), dtype=np.float32)
    return (jnp.asarray(x, dtype) for x in (q, k, v))


LENGTHS = jnp.array([SK, 77, 0], jnp.int32)


@pytest.fixture(autouse=True)
def _fresh_warning_registry(monkeypatch):
    monkeypatch.setattr(attention_mod, "_WARNED", set())


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("impl", ["chunked", "splash", "auto"])
@pytest.mark.parametrize("padded", [True, False], ids=["kv_lengths", "no_padding"])
def test_implementation_equals_xla(impl, dtype, padded):
    q, k, v = _qkv(dtype)
    lengths = LENGTHS if padded else None
    ref = attention(q, k, v, implementation="xla", kv_lengths=lengths)
    run = jax.jit(lambda q, k, v, n: attention(q, k, v, implementation=impl, kv_lengths=n, query_chunk_size=64))
    out = run(q, k, v, lengths)
    assert out.dtype == dtype and out.shape == (B, SQ, H, D)
    assert _rel(out, ref) < TOL[dtype]
    if padded:  # a sample with no valid key gives zeros, as the reference
        assert not np.any(np.asarray(out[2], np.float32))


def test_splash_equals_xla_on_self_attention_with_scale():
    q, k, v = _qkv(jnp.float32, sq=130, sk=130, seed=3)
    n = jnp.array([130, 129, 1], jnp.int32)
    ref = attention(q, k, v, kv_lengths=n, scale=0.3)
    out = jax.jit(lambda q, k, v: attention(q, k, v, implementation="splash", kv_lengths=n, scale=0.3))(q, k, v)
    assert _rel(out, ref) < 1e-5


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["fp32", "bf16"])
def test_cudnn_off_gpu_falls_back_once_with_a_clear_warning(dtype):
    q, k, v = _qkv(dtype)
    ref = attention(q, k, v, implementation="xla", kv_lengths=LENGTHS)
    with pytest.warns(AttentionFallbackWarning, match=r"'cudnn' cannot run q \(3, 200, 4, 32\) / k \(3, 150, 4, 32\) "
                      + jnp.dtype(dtype).name + r": cuDNN attention needs an NVIDIA GPU \(backend is 'cpu'\)"):
        out = attention(q, k, v, implementation="cudnn", kv_lengths=LENGTHS)
    assert _rel(out, ref) < TOL[dtype]
    with warnings.catch_warnings():
        warnings.simplefilter("error", AttentionFallbackWarning)  # same shape and dtype: no second warning
        attention(q, k, v, implementation="cudnn", kv_lengths=LENGTHS)


def test_splash_with_a_score_bias_falls_back():
    q, k, v = _qkv(jnp.float32)
    bias = jnp.asarray(np.random.default_rng(4).standard_normal((1, H, SQ, SK), dtype=np.float32))
    ref = attention(q, k, v, bias=bias, kv_lengths=LENGTHS)
    with pytest.warns(AttentionFallbackWarning, match="no input for an additive score bias"):
        out = attention(q, k, v, implementation="splash", bias=bias, kv_lengths=LENGTHS)
    assert _rel(out, ref) < 1e-5


def test_auto_picks_the_kernel_of_each_backend():
    assert resolve_implementation("auto", "gpu") is AttentionImpl.CUDNN
    assert resolve_implementation("auto", "tpu") is AttentionImpl.SPLASH
    assert resolve_implementation("auto", "cpu") is AttentionImpl.CHUNKED
    assert resolve_implementation("auto") is AttentionImpl.CHUNKED  # this CPU test machine
    assert resolve_implementation("xla", "tpu") is AttentionImpl.XLA
    with pytest.raises(ValueError):
        resolve_implementation("flash")


def test_kernel_under_a_mesh_runs_per_shard():
    """Fault 7: under an automatically partitioned mesh the kernel call is wrapped in shard_map
    (batch over data, heads over tensor); the result equals the unsharded reference."""
    q, k, v = _qkv(jnp.float32)
    q, k, v, n = (x[:2] for x in (q, k, v, LENGTHS))
    mesh = make_mesh(2, 2, 2)
    ref = attention(q, k, v, kv_lengths=n)
    spec = NamedSharding(mesh, P("data", None, "tensor", None))
    with jax.set_mesh(mesh):
        args = [jax.device_put(x, spec) for x in (q, k, v)]
        fn = jax.jit(lambda q, k, v, n: attention(q, k, v, implementation="splash", kv_lengths=n))
        assert "shard_map" in str(fn.trace(*args, n).jaxpr)
        out = fn(*args, n)
    assert out.sharding.is_equivalent_to(spec, 4)
    assert _rel(out, ref) < 1e-5
