"""Parity of the Wan2.1 VAE with diffusers ``AutoencoderKLWan`` (fp32, CPU, tiny sizes)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers import AutoencoderKLWan
from safetensors.numpy import load_file, save_file

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.loader import load_params, plan_load
from vidax.checkpoint.safetensors_io import CheckpointReader
from vidax.core.wan_vae import (
    WanVAEConfig,
    decode,
    decode_chunk,
    decode_head,
    decode_tail,
    denormalize_latents,
    encode,
    load_vae,
    normalize_latents,
    vae_keymap,
    vae_specs,
)

jax.config.update("jax_default_matmul_precision", "highest")

H_LAT, W_LAT = 4, 6  # non-square latent size; video 32 x 48


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def _build(tmp_path_factory, name, **kw):
    torch.manual_seed(0)
    model = AutoencoderKLWan(**kw).eval()
    with torch.no_grad():
        # gammas start at 1: randomise them so a wrong channel mapping shows.
        for n, p in model.named_parameters():
            if n.endswith("gamma"):
                p.uniform_(0.5, 1.5)
    path = tmp_path_factory.mktemp(name)
    model.save_pretrained(path)
    cfg = WanVAEConfig.from_dict(json.loads((path / "config.json").read_text()))
    params = load_params(CheckpointReader(path), vae_keymap(cfg), vae_specs(cfg), np.float32, source=str(path))
    return model, cfg, params, path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    # The Wan2.1 structure (attn_scales [], temperal_downsample [False, True, True], 8x spatial) at tiny width.
    return _build(tmp_path_factory, "wan_vae_tiny", base_dim=8, z_dim=16, dim_mult=[1, 2, 2, 2], num_res_blocks=1)


@pytest.mark.parametrize("t", [1, 2, 3])
def test_decode_parity(tiny, t):
    model, cfg, params, _ = tiny
    z = np.random.default_rng(t).standard_normal((1, 16, t, H_LAT, W_LAT), dtype=np.float32)
    with torch.no_grad():
        ref = model.decode(torch.from_numpy(z)).sample.numpy()
    out = np.asarray(decode(params, cfg, jnp.asarray(z)))
    assert out.shape == ref.shape == (1, 3, 1 + 4 * (t - 1), 8 * H_LAT, 8 * W_LAT)
    assert out.dtype == np.float32
    assert np.abs(out).max() <= 1.0
    assert np.mean(np.abs(ref) < 1.0) > 0.9  # the clamp does not hide the comparison
    assert _rel(out, ref) < 1e-5


@pytest.mark.parametrize("frames", [1, 5, 9])
def test_encode_parity(tiny, frames):
    model, cfg, params, _ = tiny
    x = np.random.default_rng(frames).uniform(-1, 1, (1, 3, frames, 8 * H_LAT, 8 * W_LAT)).astype(np.float32)
    with torch.no_grad():
        dist = model.encode(torch.from_numpy(x)).latent_dist
    mean, logvar = encode(params, cfg, jnp.asarray(x))
    assert mean.shape == tuple(dist.mean.shape) == (1, 16, 1 + (frames - 1) // 4, H_LAT, W_LAT)
    assert _rel(mean, dist.mean.numpy()) < 1e-5
    assert _rel(logvar, dist.logvar.numpy()) < 1e-5


def test_chunked_decode_matches_reference(tiny):
    """Driving decode_chunk by hand with the explicit cache reproduces the reference's whole-video decode,
    and every chunk after the first has the same cache shapes (one compiled program reused)."""
    model, cfg, params, _ = tiny
    z = np.random.default_rng(7).standard_normal((1, 16, 3, H_LAT, W_LAT), dtype=np.float32)
    with torch.no_grad():
        ref = model.decode(torch.from_numpy(z)).sample.numpy()
    cache, outs, cache_shapes = None, [], []
    for i in range(z.shape[2]):
        previous = cache
        y, cache = decode_chunk(params, cfg, jnp.asarray(z[:, :, i : i + 1]), cache)
        outs.append(np.asarray(y))
        cache_shapes.append(jax.tree_util.tree_map(lambda a: (a.shape, a.dtype), cache))
        if previous is not None:  # donated: the old cache's buffers went to the new one
            assert all(a.is_deleted() for a in jax.tree.leaves(previous))
    assert [o.shape[2] for o in outs] == [1, 4, 4]
    assert cache_shapes[0] == cache_shapes[1] == cache_shapes[2]
    assert _rel(np.concatenate(outs, axis=2), ref) < 1e-5
    # No recompilation for more latent frames (each program has its first-frame and later-frame versions).
    before = decode_head._cache_size(), decode_tail._cache_size()
    decode(params, cfg, jnp.asarray(np.zeros((1, 16, 4, H_LAT, W_LAT), np.float32)))
    assert (decode_head._cache_size(), decode_tail._cache_size()) == before


def test_decoder_tail_passes_equal_one_pass(tiny, monkeypatch):
    """decode_chunk runs the decoder's tail two frames at a time; the frames and the cache equal those of one
    pass over all four (and the reference's, above), and that tail program's temporaries are smaller."""
    import vidax.core.wan_vae as wan_vae

    _, cfg, params, _ = tiny
    z = jnp.asarray(np.random.default_rng(8).standard_normal((1, 16, 3, H_LAT, W_LAT), dtype=np.float32))

    def run(tail_frames):
        monkeypatch.setattr(wan_vae, "DECODER_TAIL_FRAMES", tail_frames)
        cache, outs = None, []
        for i in range(3):
            y, cache = decode_chunk(params, cfg, z[:, :, i : i + 1], cache)
            outs.append(np.asarray(y))
        return np.concatenate(outs, axis=2), [np.asarray(a) for a in jax.tree.leaves(cache)]

    (v2, c2), (v4, c4) = run(2), run(4)
    assert _rel(v2, v4) < 1e-6
    assert len(c2) == len(c4)
    assert all(_rel(a, b) < 1e-6 if np.any(b) else not np.any(a) for a, b in zip(c2, c4))  # (zero entries: equal)
    _, cache = decode_chunk(params, cfg, z[:, :, :1], None)
    head_cache, tail_cache = wan_vae._split_cache(cfg, cache)
    x, _ = decode_head(params, cfg, z[:, :, 1:2], head_cache)
    temps = {t: decode_tail.lower(params, cfg, x[:, :t], tail_cache).compile().memory_analysis().temp_size_in_bytes
             for t in (2, 4)}
    assert temps[2] < 0.6 * temps[4], temps


def test_donated_caches_at_full_resolution_are_updated_without_copies(tiny):
    """The chunk programs write the new cache entries of every stage with at least ``kt - 1`` frames straight into
    the donated old ones' buffers: the compiled programs copy none of those cache parameters (as a static slice
    XLA copied every cache entry first; at 832x480 float32 the decoder chunk's temporaries went 4.86 -> 3.14 GiB,
    core.layers.last_frames), a chunk of exactly ``kt - 1`` frames included. Entries of the one-frame latent
    stages still shift an old frame within the buffer, which XLA copies."""
    import re

    from vidax.core.wan_vae import encode_chunk

    _, cfg, params, _ = tiny

    def copied(chunk_fn, first, later, full_prefixes):
        _, cache = chunk_fn(params, cfg, first, None)
        hlo = chunk_fn.lower(params, cfg, later, cache).compile().as_text()
        assert "cache__conv_in__" in hlo or "cache__conv_out__" in hlo  # (the cache parameters keep their names)
        entries = {"cache__" + "____".join(p.key for p in path) + "__": a.shape
                   for path, a in jax.tree_util.tree_leaves_with_path(cache)}
        full = {e for e in entries if e.startswith(full_prefixes)}
        full_shapes = {"f32[" + ",".join(map(str, entries[e])) + "]" for e in full}
        # A new entry computed aside (a dynamic-slice fusion) and copied into the donated buffer; a copy that
        # changes the layout (the encoder's input, channels-first) is the transpose itself, not counted.
        copied_shapes = set(re.findall(r"= (f32\[[\d,]+\])\{[\d,]*\} copy\(%[\w.-]*dynamic-slice", hlo))
        return set(re.findall(r"copy\(%(cache__\w+?)\.\d+\)", hlo)), set(entries), full, copied_shapes & full_shapes

    z = jnp.zeros((1, 16, 1, H_LAT, W_LAT), jnp.float32)
    x, _ = decode_head(params, cfg, z)  # (decode_chunk's tail passes: one frame first, then two with a cache)
    full_res = ("cache__up_blocks____3", "cache__conv_out")
    copies, entries, full, new_copies = copied(decode_tail, x[:, :1], jnp.concatenate([x, x], axis=1), full_res)
    assert full and not copies & full, sorted(copies & full)
    assert not new_copies, new_copies  # nor are the new entries computed aside and copied in (last_frames' probe)
    # The head's last stage has exactly as many frames as the cache (2): also in place (causal_conv3d's select).
    copies, entries, full, new_copies = copied(decode_head, z, z, ("cache__up_blocks____1",))
    assert full and not copies & full, sorted(copies & full)
    assert not new_copies, new_copies
    assert copies and copies <= entries  # the latent-stage copies are found, under the cache's own names
    x = jnp.zeros((1, 3, 4, 8 * H_LAT, 8 * W_LAT), jnp.float32)
    copies, entries, full, new_copies = copied(encode_chunk, x[:, :, :1], x, ("cache__conv_in", "cache__down_blocks____0"))
    assert full and not copies & full, sorted(copies & full)
    assert not new_copies, new_copies


def test_first_chunks_fold_no_frame_sized_constants(tiny, tmp_path):
    """The first chunk (no cache yet) pads in time by index, never with a zero cache: a zero history gathered
    from is a constant, and XLA's constant folding evaluated every such gather at compile time (the Wan2.1
    decoder's first chunk at 128x128: 14 zero frames of 6-12 MiB, 0.25 GiB of compiler memory, 1.3 s).
    Reads the module XLA dumps after its constant-folding passes."""
    import re

    from vidax.core.wan_vae import encode_chunk

    _, cfg, params, _ = tiny
    frame = 8 * H_LAT * 8 * W_LAT * cfg.base_dim  # one full-resolution activation frame, elements
    z = jnp.zeros((1, 16, 1, H_LAT, W_LAT), jnp.float32)
    programs = {"decode_head": (decode_head, z), "decode_tail": (decode_tail, decode_head(params, cfg, z)[0]),
                "encode": (encode_chunk, jnp.zeros((1, 3, 1, 8 * H_LAT, 8 * W_LAT), jnp.float32))}
    for name, (fn, x) in programs.items():
        dump = tmp_path / name
        fn.lower(params, cfg, x, None).compile(compiler_options={
            "xla_dump_to": str(dump), "xla_dump_hlo_pass_re": "constant-folding|constant_folding"})
        folded = sorted(dump.glob("*after_constant*folding*.txt"))
        assert folded, sorted(p.name for p in dump.iterdir())[:5]
        sizes = [int(np.prod([int(d) for d in dims.split(",") if d]))
                 for f in folded for dims in re.findall(r"= f32\[([\d,]*)\]\{[\d,]*\} constant\(", f.read_text())]
        assert max(sizes, default=0) < frame, (name, sorted(sizes)[-5:])


def test_other_config_batch2(tmp_path_factory):
    """decoder_base_dim != base_dim, temporal downsampling in other stages, batch 2."""
    model, cfg, params, _ = _build(
        tmp_path_factory, "wan_vae_other", base_dim=4, decoder_base_dim=6, z_dim=16, dim_mult=[1, 2, 2, 2],
        num_res_blocks=1, temperal_downsample=[True, False, True],
    )
    assert cfg.decoder_dim == 6
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (2, 3, 5, 16, 24)).astype(np.float32)
    z = rng.standard_normal((2, 16, 2, 2, 3), dtype=np.float32)
    with torch.no_grad():
        ref_mean = model.encode(torch.from_numpy(x)).latent_dist.mean.numpy()
        ref_video = model.decode(torch.from_numpy(z)).sample.numpy()
    mean, _ = encode(params, cfg, jnp.asarray(x))
    assert _rel(mean, ref_mean) < 1e-5
    assert _rel(decode(params, cfg, jnp.asarray(z)), ref_video) < 1e-5


def test_strict_loading_missing_key(tiny, tmp_path):
    _, cfg, _, path = tiny
    tensors = load_file(str(path / "diffusion_pytorch_model.safetensors"))
    dropped = "decoder.up_blocks.1.upsamplers.0.time_conv.weight"
    assert dropped in tensors
    del tensors[dropped]
    save_file(tensors, str(tmp_path / "diffusion_pytorch_model.safetensors"))
    with pytest.raises(CheckpointError, match=dropped.replace(".", r"\.")):
        load_params(CheckpointReader(tmp_path), vae_keymap(cfg), vae_specs(cfg), source=str(tmp_path))


def test_full_wan21_layout_is_covered_exactly():
    """The real Wan2.1 VAE (built on the meta device: shapes only) fills every slot exactly once."""
    with torch.device("meta"):
        model = AutoencoderKLWan()
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}

    class ShapeReader:
        def keys(self):
            return list(shapes)

        def shape(self, key):
            return shapes[key]

    cfg = WanVAEConfig.from_dict(dict(model.config))
    plan = plan_load(ShapeReader(), vae_keymap(cfg), vae_specs(cfg))
    assert sum(len(v) for v in plan.values()) == len(shapes)


def test_load_vae_and_latent_normalisation(tiny):
    _, _, params, path = tiny
    cfg, loaded = load_vae(path)
    assert jax.tree_util.tree_structure(loaded) == jax.tree_util.tree_structure(params)
    z = np.random.default_rng(0).standard_normal((1, 16, 2, 3, 3), dtype=np.float32)
    # WanPipeline: latents / (1 / std) + mean; WanImageToVideoPipeline: (x - mean) * (1 / std)
    mean_t = torch.tensor(cfg.latents_mean).view(1, 16, 1, 1, 1)
    inv_std_t = 1.0 / torch.tensor(cfg.latents_std).view(1, 16, 1, 1, 1)
    ref_dec = (torch.from_numpy(z) / inv_std_t + mean_t).numpy()
    ref_enc = ((torch.from_numpy(z) - mean_t) * inv_std_t).numpy()
    # XLA turns a division by a broadcast operand into a multiplication by its reciprocal: 1-ulp differences.
    np.testing.assert_allclose(np.asarray(denormalize_latents(cfg, jnp.asarray(z))), ref_dec, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(normalize_latents(cfg, jnp.asarray(z))), ref_enc, rtol=1e-6, atol=1e-6)


def test_config_validation():
    wan21 = {
        "_class_name": "AutoencoderKLWan", "_diffusers_version": "0.33.0.dev0", "attn_scales": [], "base_dim": 96,
        "dim_mult": [1, 2, 4, 4], "dropout": 0.0, "num_res_blocks": 2, "temperal_downsample": [False, True, True],
        "z_dim": 16,
    }
    cfg = WanVAEConfig.from_dict(wan21)
    assert cfg == WanVAEConfig() and hash(cfg) == hash(WanVAEConfig())
    assert (cfg.spatial_compression, cfg.temporal_compression) == (8, 4)
    for bad, msg in [
        ({"patch_size": 0}, "patch_size"),
        ({"patch_size": 2}, "patch_size"),
        ({"attn_scales": [0.5]}, "attn_scales"),
        ({"z_dim": 48}, "latents_mean"),
        ({"temperal_downsample": [True, True]}, "temperal_downsample"),
        ({"some_new_option": 1}, "some_new_option"),
        ({"_class_name": "AutoencoderKL"}, "AutoencoderKL"),
    ]:
        with pytest.raises(ValueError, match=msg):
            WanVAEConfig.from_dict({**wan21, **bad})


def test_input_validation(tiny):
    _, cfg, params, _ = tiny
    with pytest.raises(ValueError, match="1 \\+ 4k"):
        encode(params, cfg, jnp.zeros((1, 3, 3, 16, 16)))
    with pytest.raises(ValueError, match="latents"):
        decode(params, cfg, jnp.zeros((1, 4, 1, 2, 2)))
