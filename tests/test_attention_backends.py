"""Every attention implementation behind ``vidax.core.attention.attention`` equals the ``xla`` reference.

Random inputs with right padding on the keys (one sample with no valid key at all), sequence
lengths that are not multiples of any kernel block. The Pallas TPU splash kernel runs here in
Pallas interpret mode; cuDNN cannot run on CPU, so its tests check the dispatch and the
announced fallback (bench/gpu_attention.py checks the kernel itself on a GPU). vidax's own fused
CPU kernel (``cpu_flash``) is also checked against PyTorch's ``scaled_dot_product_attention``,
once per compiled instruction set this CPU runs.
"""

import os
import subprocess
import sys
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
@pytest.mark.parametrize("impl", ["chunked", "splash", "cpu_flash", "auto"])
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
    assert resolve_implementation("auto", "cpu") is AttentionImpl.CPU_FLASH
    assert resolve_implementation("auto") is AttentionImpl.CPU_FLASH  # this CPU test machine
    assert resolve_implementation("xla", "tpu") is AttentionImpl.XLA
    with pytest.raises(ValueError):
        resolve_implementation("flash")


def test_auto_on_cpu_without_the_native_module_is_chunked_and_cpu_flash_says_how_to_build_it(monkeypatch):
    monkeypatch.setattr(attention_mod, "_cpu_module", lambda: None)
    assert resolve_implementation("auto", "cpu") is AttentionImpl.CHUNKED
    q, k, v = _qkv(jnp.float32)
    with pytest.warns(AttentionFallbackWarning, match=r"vidax.core._attention is not built \(reinstall vidax"):
        out = attention(q, k, v, implementation="cpu_flash", kv_lengths=LENGTHS)
    assert _rel(out, attention(q, k, v, kv_lengths=LENGTHS)) < 1e-5


def test_cpu_flash_with_a_score_bias_falls_back():
    q, k, v = _qkv(jnp.float32)
    bias = jnp.asarray(np.random.default_rng(4).standard_normal((1, H, SQ, SK), dtype=np.float32))
    with pytest.warns(AttentionFallbackWarning, match="cpu_flash has no input for an additive score bias"):
        out = attention(q, k, v, implementation="cpu_flash", bias=bias, kv_lengths=LENGTHS)
    assert _rel(out, attention(q, k, v, bias=bias, kv_lengths=LENGTHS)) < 1e-5
    with warnings.catch_warnings():
        warnings.simplefilter("error", AttentionFallbackWarning)  # auto picks chunked for a biased call, silently
        out = attention(q, k, v, implementation="auto", bias=bias[:, :, :1], kv_lengths=LENGTHS)
    assert _rel(out, attention(q, k, v, bias=bias[:, :, :1], kv_lengths=LENGTHS)) < 1e-5


_SDPA_CHECK = r"""
import sys
import numpy as np, torch, jax, jax.numpy as jnp
jax.config.update("jax_default_matmul_precision", "highest")
from vidax.core.attention import attention, cpu_flash_isa
assert cpu_flash_isa() == sys.argv[1], (cpu_flash_isa(), sys.argv[1])
rng = np.random.default_rng(7)
worst = 0.0
# query and key counts across several 48-query / 256-key blocks and neither a multiple of 16; head
# dims 128 (Wan), 64 (CogVideoX) and 72 (padded to 80 inside the kernel); keys padded per sample.
for b, sq, sk, h, d, lengths in [(2, 301, 517, 2, 128, [517, 230]), (1, 97, 226, 3, 64, None),
                                 (2, 50, 33, 1, 72, [1, 33])]:
    q, k, v = (rng.standard_normal((b, s, h, d), dtype=np.float32) for s in (sq, sk, sk))
    n = None if lengths is None else jnp.asarray(lengths, jnp.int32)
    out = np.asarray(jax.jit(lambda q, k, v, n: attention(q, k, v, implementation="cpu_flash", kv_lengths=n))(q, k, v, n))
    mask = None if lengths is None else (torch.arange(sk)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]
    ref = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(x).transpose(1, 2) for x in (q, k, v)), attn_mask=mask).transpose(1, 2).numpy()
    worst = max(worst, np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref))
print(worst)
"""


def _isas():
    isa = attention_mod.cpu_flash_isa()
    return {"avx512": ["generic", "avx2", "avx512"], "avx2": ["generic", "avx2"]}.get(isa, [isa])


@pytest.mark.parametrize("isa", _isas())
def test_cpu_flash_equals_torch_sdpa(isa):
    """The reference is PyTorch's fused CPU attention; each compiled kernel this CPU can run, in its own
    process (the kernel is chosen once per process, VIDAX_CPU_ATTENTION_ISA asks for a narrower one)."""
    env = {**os.environ, "VIDAX_CPU_ATTENTION_ISA": isa}
    res = subprocess.run([sys.executable, "-c", _SDPA_CHECK, isa], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert float(res.stdout.split()[-1]) < 1e-5


@pytest.mark.parametrize("impl", ["splash", "cpu_flash"])
def test_kernel_under_a_mesh_runs_per_shard(impl):
    """Fault 7: under an automatically partitioned mesh the kernel call is wrapped in shard_map
    (batch over data, heads over tensor); the result equals the unsharded reference."""
    q, k, v = _qkv(jnp.float32)
    q, k, v, n = (x[:2] for x in (q, k, v, LENGTHS))
    mesh = make_mesh(2, 2, 2)
    ref = attention(q, k, v, kv_lengths=n)
    spec = NamedSharding(mesh, P("data", None, "tensor", None))
    with jax.set_mesh(mesh):
        args = [jax.device_put(x, spec) for x in (q, k, v)]
        fn = jax.jit(lambda q, k, v, n: attention(q, k, v, implementation=impl, kv_lengths=n))
        assert "shard_map" in str(fn.trace(*args, n).jaxpr)
        out = fn(*args, n)
    assert out.sharding.is_equivalent_to(spec, 4)
    assert _rel(out, ref) < 1e-5
