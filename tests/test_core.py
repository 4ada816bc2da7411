"""Core pieces against their references: attention backends, timestep embedding, 3D RoPE, patch embedding."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from vidax.core import host_memory
from vidax.core.attention import attention
from vidax.core.embeddings import patch_embed, patchify, timestep_embedding, unpatchify
from vidax.core.params import random_params
from vidax.core.rope import rope_3d_angles, rope_cos_sin


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.linalg.norm(a - b) / np.linalg.norm(b)


@pytest.mark.parametrize("impl", ["xla", "chunked"])
def test_attention_matches_torch_sdpa_with_key_lengths(impl):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, s, 3, 16), dtype=np.float32) for s in (300, 77, 77))
    lengths = np.array([77, 20])
    mask = torch.arange(77)[None, :] < torch.from_numpy(lengths)[:, None]  # (B, Sk)
    ref = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(t).transpose(1, 2) for t in (q, k, v)), attn_mask=mask[:, None, None, :]
    ).transpose(1, 2).numpy()
    out = attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), implementation=impl,
                    kv_lengths=jnp.asarray(lengths), query_chunk_size=64)
    assert _rel(out, ref) < 1e-5


def test_chunked_attention_with_bias_equals_xla():
    rng = np.random.default_rng(1)
    q, k, v = (jnp.asarray(rng.standard_normal((1, 130, 2, 8), dtype=np.float32)) for _ in range(3))
    bias = jnp.asarray(rng.standard_normal((1, 2, 130, 130), dtype=np.float32))
    a = attention(q, k, v, bias=bias, scale=1.0)
    b = attention(q, k, v, bias=bias, scale=1.0, implementation="chunked", query_chunk_size=32)
    assert _rel(b, a) < 1e-6


@pytest.mark.parametrize("sq, size, want", [(1280, 1024, (2, 640)), (2048, 1024, (2, 1024)), (2049, 1024, (3, 688)),
                                            (1025, 1024, (2, 520)), (1000, 1024, (1, 1000)), (7, 4, (2, 4))])
def test_query_chunks_are_even_and_bounded(sq, size, want):
    """Chunks split the queries evenly, never above the requested size (multiples of 8 where that allows)."""
    from vidax.core.attention import query_chunks

    n, chunk = query_chunks(sq, size)
    assert (n, chunk) == want
    assert n * chunk >= sq and (n - 1) * chunk < sq and chunk <= size and (chunk % 8 == 0 or size % 8)


def test_chunked_attention_even_chunks_match_torch_sdpa():
    """300 queries in chunks of at most 128 -> three chunks of 104 (12 padded rows, cut after)."""
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((1, s, 2, 16), dtype=np.float32) for s in (300, 90, 90))
    ref = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(t).transpose(1, 2) for t in (q, k, v))).transpose(1, 2).numpy()
    out = attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), implementation="chunked", query_chunk_size=128)
    assert out.shape == (1, 300, 2, 16) and _rel(out, ref) < 1e-5


def test_timestep_embedding_matches_diffusers():
    from diffusers.models.embeddings import get_timestep_embedding

    t = np.array([0.0, 1.0, 312.5, 999.0], np.float32)
    ref = get_timestep_embedding(torch.from_numpy(t), 256, flip_sin_to_cos=True, downscale_freq_shift=0).numpy()
    out = timestep_embedding(jnp.asarray(t), 256)
    assert out.dtype == jnp.float32
    # float32 sin/cos of arguments near 1000 differ by a few ulps of the argument between libraries.
    assert _rel(out, ref) < 1e-5
    np.testing.assert_allclose(np.asarray(out), ref, atol=1e-4)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_rope_tables_match_diffusers(head_dim):
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed

    rope = WanRotaryPosEmbed(head_dim, (1, 2, 2), 1024)
    latent = torch.zeros(1, 16, 21, 60, 104)  # the 480p 81-frame grid: 21 x 30 x 52 tokens
    ref_cos, ref_sin = rope(latent)  # (1, S, 1, head_dim), pairs repeated
    angles = rope_3d_angles(head_dim, (21, 30, 52))
    assert angles.dtype == np.float64
    cos, sin = rope_cos_sin(angles)
    np.testing.assert_allclose(cos, ref_cos[0, :, 0, 0::2].numpy(), atol=1e-6)
    np.testing.assert_allclose(sin, ref_sin[0, :, 0, 1::2].numpy(), atol=1e-6)


def test_patch_embed_equals_conv3d_and_unpatchify_inverts():
    torch.manual_seed(0)
    conv = torch.nn.Conv3d(4, 8, kernel_size=(1, 2, 2), stride=(1, 2, 2))
    x = torch.randn(2, 4, 3, 6, 8)
    ref = conv(x).flatten(2).transpose(1, 2).detach().numpy()
    p = {"kernel": jnp.asarray(conv.weight.detach().numpy().transpose(2, 3, 4, 1, 0)), "bias": jnp.asarray(conv.bias.detach().numpy())}
    out = patch_embed(p, jnp.asarray(x.numpy()), (1, 2, 2))
    assert _rel(out, ref) < 1e-6
    tokens = patchify(jnp.asarray(x.numpy()), (1, 2, 2))
    np.testing.assert_array_equal(np.asarray(unpatchify(tokens, (3, 3, 4), (1, 2, 2), 4)), x.numpy())


@pytest.mark.parametrize("kernel, strides, padding, t", [
    ((3, 3, 3), (1, 1, 1), ((0, 0), (1, 1), (1, 1)), 7),   # causal conv after the cache is prepended
    ((3, 1, 1), (2, 1, 1), ((0, 0), (0, 0), (0, 0)), 7),   # Wan encoder time_conv, stride 2 in time
    ((3, 3, 3), (1, 2, 2), ((1, 1), (0, 1), (0, 1)), 7),   # temporal padding and spatial stride
    ((3, 3, 3), (1, 1, 1), ((2, 0), (1, 1), (1, 1)), 1),   # a first chunk's causal zero padding, one frame
    ((3, 3, 3), (1, 1, 1), ((2, 0), (1, 1), (1, 1)), 4),   # ... four frames
    ((3, 1, 1), (2, 1, 1), ((2, 1), (0, 0), (0, 0)), 6),   # padding on both sides, stride 2 in time
    ((1, 3, 3), (1, 1, 1), ((0, 0), (1, 1), (1, 1)), 7),   # per-frame 2D kernel
])
def test_conv3d_matches_torch(kernel, strides, padding, t):
    """``core.layers.conv3d`` (on CPU: one 2D convolution per temporal tap, time padding selected by index)
    equals torch's Conv3d of the padded input."""
    from vidax.core.layers import conv3d

    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, t, 9, 10, 5), dtype=np.float32)  # (B, T, H, W, C), channels last
    w = rng.standard_normal((*kernel, 5, 6), dtype=np.float32)   # (kt, kh, kw, I, O)
    b = rng.standard_normal(6, dtype=np.float32)
    tx = torch.nn.functional.pad(torch.from_numpy(x).permute(0, 4, 1, 2, 3),
                                 (padding[2][0], padding[2][1], padding[1][0], padding[1][1], padding[0][0], padding[0][1]))
    ref = torch.nn.functional.conv3d(tx, torch.from_numpy(w).permute(4, 3, 0, 1, 2), torch.from_numpy(b), stride=strides)
    p = {"kernel": jnp.asarray(w if kernel[0] > 1 else w[0]), "bias": jnp.asarray(b)}
    out = conv3d(p, jnp.asarray(x), strides=strides, padding=padding)
    assert out.shape == tuple(ref.permute(0, 2, 3, 4, 1).shape)
    assert _rel(out, ref.permute(0, 2, 3, 4, 1).numpy()) < 1e-5


def test_conv_jit_compiles_the_vae_programs_with_the_cpu_conv_options():
    """The VAEs' chunk functions (Wan's decoder: its head and tail) are ``conv_jit`` programs (``ConvProgram``):
    on the CPU backend their compilation carries ``CPU_CONV_COMPILER_OPTIONS`` (YNNPACK fusions off), and a
    conv_jit program computes what ``jax.jit`` computes (torch's Conv3d, as the test above), keeping static and
    donated arguments."""
    import jax

    from vidax.core.layers import CPU_CONV_COMPILER_OPTIONS, ConvProgram, conv3d, conv_jit
    from vidax.models.cogvideox import vae as cog_vae
    from vidax.core import wan_vae

    chunk_functions = (wan_vae.encode_chunk, wan_vae.decode_head, wan_vae.decode_tail,
                       cog_vae.encode_chunk, cog_vae.decode_chunk)
    for fn in chunk_functions:
        assert isinstance(fn, ConvProgram), fn
    wan_cfg = wan_vae.WanVAEConfig(base_dim=8, dim_mult=(1, 2), num_res_blocks=1, temperal_downsample=(True,))
    wan_params = jax.tree.map(jnp.asarray, random_params(wan_vae.vae_specs(wan_cfg)))
    rng = np.random.default_rng(4)
    x = jnp.asarray(rng.standard_normal((1, 5, 9, 10, 6), dtype=np.float32))
    p = {"kernel": jnp.asarray(rng.standard_normal((3, 3, 3, 6, 7), dtype=np.float32)), "bias": jnp.zeros(7)}

    @conv_jit(static_argnames=("scale",), donate_argnames=("y",))
    def f(p, x, y, scale):
        return conv3d(p, x) * scale + y

    y = jnp.ones((1, 3, 7, 8, 7))
    want = jax.jit(lambda p, x: conv3d(p, x) * 2.0 + 1.0)(p, x)
    lowered = f.lower(p, x, y, scale=2.0)
    # jax keeps a compilation's options on its lowering (a private field; if a JAX upgrade moves it, find it again)
    assert dict(lowered._lowering._compiler_options_kvs) == CPU_CONV_COMPILER_OPTIONS
    got = f(p, x, y, scale=2.0)
    assert y.is_deleted()  # donated
    assert _rel(got, np.asarray(want)) < 1e-6
    # Inside another transformation (JAX refuses compiler options on a nested jit) it joins the outer program.
    y = jnp.ones((1, 3, 7, 8, 7))
    assert jax.eval_shape(lambda p, x, y: f(p, x, y, scale=2.0), p, x, y).shape == want.shape
    assert _rel(jax.jit(lambda p, x, y: f(p, x, y, scale=2.0))(p, x, y), np.asarray(want)) < 1e-6
    mean, _ = jax.eval_shape(lambda x: wan_vae.encode(wan_params, wan_cfg, x), jnp.zeros((1, 3, 5, 16, 16)))
    s = wan_cfg.spatial_compression
    assert mean.shape == (1, wan_cfg.z_dim, 1 + 4 // wan_cfg.temporal_compression, 16 // s, 16 // s)


def test_last_frames_is_the_static_slice_whatever_the_values():
    """core.layers.last_frames: ``x[:, -n:]`` exactly, a NaN in its probe (the start's +1) included."""
    import jax

    from vidax.core.layers import last_frames

    x = np.random.default_rng(0).standard_normal((2, 5, 3, 4)).astype(np.float32)
    for n in (1, 2, 5):
        np.testing.assert_array_equal(np.asarray(jax.jit(last_frames, static_argnums=1)(jnp.asarray(x), n)), x[:, -n:])
    x[0, -1, 0, 0] = np.nan
    np.testing.assert_array_equal(np.asarray(last_frames(jnp.asarray(x), 2)), x[:, -2:])


@pytest.mark.parametrize("t, n", [(4, 2), (1, 2), (2, 2), (3, 1)])
def test_causal_conv3d_is_the_conv_of_the_concatenation(t, n):
    """core.layers.causal_conv3d: torch's Conv3d over ``cat([history, x])`` in time and that concatenation's last ``n``
    frames, for chunks longer and shorter than the history, a NaN in the output's probe element included."""
    import jax

    from vidax.core.layers import causal_conv3d, conv3d

    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, t, 6, 7, 4), dtype=np.float32)
    h = rng.standard_normal((1, n, 6, 7, 4), dtype=np.float32)
    w = rng.standard_normal((n + 1, 3, 3, 4, 5), dtype=np.float32)
    b = rng.standard_normal(5, dtype=np.float32)
    xp = np.concatenate([h, x], axis=1)
    tx = torch.nn.functional.pad(torch.from_numpy(xp).permute(0, 4, 1, 2, 3), (1, 1, 1, 1, 0, 0))
    ref = torch.nn.functional.conv3d(tx, torch.from_numpy(w).permute(4, 3, 0, 1, 2), torch.from_numpy(b)).permute(0, 2, 3, 4, 1)
    p = {"kernel": jnp.asarray(w), "bias": jnp.asarray(b)}
    y, nxt = jax.jit(causal_conv3d, static_argnums=3)(p, jnp.asarray(x), jnp.asarray(h), ((1, 1), (1, 1)))
    assert _rel(y, ref.numpy()) < 1e-5
    np.testing.assert_array_equal(np.asarray(nxt), xp[:, -n:])
    p["bias"] = p["bias"].at[0].set(np.nan)  # y[0, -1, 0, 0, 0] is NaN: the slice start's +1, clamped
    _, nxt = causal_conv3d(p, jnp.asarray(x), jnp.asarray(h), ((1, 1), (1, 1)))
    np.testing.assert_array_equal(np.asarray(nxt), xp[:, -n:])
    with pytest.raises(ValueError, match="history and time padding"):
        conv3d(p, jnp.asarray(x), padding=((1, 1), (1, 1), (1, 1)), history=jnp.asarray(h))


@pytest.mark.skipif(host_memory._malloc_trim() is None, reason="not glibc: trimming is a no-op there")
def test_host_heap_is_trimmed_after_each_large_compilation(monkeypatch):
    """core.host_memory: after an XLA compilation of at least ``min_seconds`` glibc's ``malloc_trim`` runs (the
    compiler's freed heap back to the OS); a shorter one is not followed by a trim."""
    import ctypes

    import jax

    real = host_memory._malloc_trim()
    calls = []
    fake = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_size_t)(lambda pad: calls.append(pad) or 1)
    monkeypatch.setattr(host_memory, "_malloc_trim", lambda: fake)
    try:
        a, b = jnp.ones(11).block_until_ready(), jnp.ones(13).block_until_ready()
        assert host_memory.trim_after_compiles(min_seconds=1e9)
        jax.jit(lambda a: a * 3.0 + 1.0)(a).block_until_ready()
        assert calls == []
        assert host_memory.trim_after_compiles(min_seconds=0.0)  # already installed: only the threshold changes
        jax.jit(lambda a: a * 5.0 - 2.0)(b).block_until_ready()
        assert calls == [0]  # one compilation, one malloc_trim(0)
    finally:
        host_memory.trim_after_compiles()  # the pipelines' default threshold again
    assert real(0) in (0, 1)


def test_on_demand_frees_and_reloads():
    """OnDemand: freed after use unless kept (its device buffers deleted), reloaded by the loader on the next get."""
    import jax

    from vidax.core.residency import OnDemand, keep_resident

    calls = []

    def loader():
        calls.append(1)
        return {"w": jnp.arange(4.0)}

    first = loader()
    tree = OnDemand(loader, first, keep=False)
    assert tree.get() is first and tree.loads == 0
    tree.release()
    assert not tree.resident and first["w"].is_deleted()
    np.testing.assert_array_equal(np.asarray(tree.get()["w"]), np.arange(4.0))
    assert tree.loads == 1 and len(calls) == 2
    kept = OnDemand(loader, loader(), keep=True)
    kept.release()
    assert kept.resident
    assert keep_resident("resident") and not keep_resident("free")
    assert keep_resident("auto") == (jax.default_backend() == "cpu")
    with pytest.raises(ValueError, match="residency must be one of"):
        keep_resident("sometimes")


def test_free_deletes_weights_held_in_dataclass_fields():
    """An encoder record (a dataclass: not a pytree node for JAX) has its weights deleted too, with the pytree
    leaves beside it (HunyuanVideo-1.5's MLLMTextEncoder inside its text encoders' tuple)."""
    import dataclasses

    from vidax.core.residency import free

    @dataclasses.dataclass
    class Encoder:
        params: dict
        name: str

    enc = Encoder({"w": jnp.ones(3), "layers": [jnp.zeros(2)]}, "qwen")
    other = {"b": jnp.ones(2)}
    free((enc, other))
    assert enc.params["w"].is_deleted() and enc.params["layers"][0].is_deleted() and other["b"].is_deleted()
