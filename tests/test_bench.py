"""The benchmark scripts: they import, gpu.sh parses, and the comparison harness runs end to end on a tiny config."""

import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("module", ["bench.compare", "bench.compile_study", "bench.gpu_step", "bench.cpu_attention", "bench.convert",
                                    "bench.load", "bench._report"])
def test_bench_scripts_import(module):
    importlib.import_module(module)


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_gpu_script_parses():
    r = subprocess.run(["bash", "-n", str(ROOT / "bench" / "gpu.sh")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_compare_configs_are_consistent():
    from bench.compare import CONFIGS, FAMILIES

    for cfg in CONFIGS.values():
        fam = FAMILIES[cfg.family]
        assert {"vidax", "diffusers"} <= set(fam.contenders)
        for f, h, w in (cfg.base, *cfg.sweep, *cfg.bf16_sweep):
            assert (f - 1) % 4 == 0 and h % 16 == 0 and w % 16 == 0
            assert fam.tokens(cfg, f, h, w) > 0
    a = CONFIGS["a"]
    # the transformer has the real Wan2.1 1.3B width
    assert a.transformer["num_attention_heads"] * a.transformer["attention_head_dim"] == 1536
    assert a.transformer["ffn_dim"] == 8960 and a.text["d_model"] == 4096
    # config d: LTX-Video 2B width, the 0.9.5+ VAE as released (diffusers' convert_ltx_to_diffusers.py, "0.9.5")
    d = CONFIGS["d"]
    assert d.family == "ltx" and d.transformer["num_attention_heads"] * d.transformer["attention_head_dim"] == 2048
    assert d.transformer["cross_attention_dim"] == 2048 and d.text["d_model"] == 4096  # caption_channels 4096
    assert d.vae["block_out_channels"] == [128, 256, 512, 1024, 2048]
    assert d.vae["decoder_block_out_channels"] == [256, 512, 1024] and d.vae["decoder_layers_per_block"] == [5, 5, 5, 5]
    assert d.vae["down_block_types"] == ["LTXVideo095DownBlock3D"] * 4 and d.vae["timestep_conditioning"]
    tokens = [FAMILIES["ltx"].tokens(d, *shape) for shape in d.sweep]
    assert all((f - 1) % 8 == 0 and h % 32 == 0 and w % 32 == 0 for f, h, w in (d.base, *d.sweep, *d.bf16_sweep))
    assert tokens == sorted(tokens) and 100 <= tokens[0] and tokens[-1] <= 1500


def test_gpu_step_flops_and_estimates():
    from bench import gpu_step

    assert gpu_step.tokens("1.3b-480p") == 21 * 30 * 52
    assert gpu_step.tokens("14b-720p") == 21 * 45 * 80
    assert abs(gpu_step.param_count("1.3b-480p") / 1.42e9 - 1) < 0.02  # Wan2.1 1.3B: 1.42B parameters
    assert abs(gpu_step.param_count("14b-720p") / 14.3e9 - 1) < 0.02
    est = gpu_step.estimate("14b-720p", 2, 1024)
    assert est["weights"] < est["total"] < 139 * 2**30


def test_compile_study_unrolled_matches_scan():
    """The unrolled forward written in the bench computes what the engine's scanned forward does."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from bench.compile_study import unrolled_forward
    from vidax.core.params import random_params
    from vidax.models.wan.config import WanTransformerConfig
    from vidax.models.wan.transformer import forward, rope_tables, transformer_specs

    cfg = WanTransformerConfig(num_attention_heads=2, attention_head_dim=16, ffn_dim=32, num_layers=3, text_dim=24,
                               freq_dim=16)
    params = jax.tree.map(jnp.asarray, random_params(transformer_specs(cfg), seed=1, scale=0.2))
    shape = (2, 16, 2, 4, 4)
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal(shape, dtype=np.float32))
    ctx = jnp.asarray(rng.standard_normal((2, 8, 24), dtype=np.float32))
    t = jnp.asarray([10.0, 500.0])
    cos, sin = (jnp.asarray(a) for a in rope_tables(cfg, shape))
    a = forward(params, x, t, ctx, cos, sin, cfg=cfg, attention_impl="chunked")
    b = jax.jit(unrolled_forward, static_argnames=("cfg", "attention_impl"))(
        params, x, t, ctx, cos, sin, cfg=cfg, attention_impl="chunked")
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-4)


def test_compare_smoke_end_to_end(tmp_path):
    pytest.importorskip("diffusers")
    out = tmp_path / "smoke.json"
    r = subprocess.run([sys.executable, "-m", "bench.compare", "--smoke", "--no-bf16", "--out", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    rec = json.loads(out.read_text())
    s = rec["summary"]
    for key in ("step", "load", "peak_rss", "text_encoder", "vae_decode", "e2e"):
        assert s[key]["vidax"]["median"] > 0 and s[key]["diffusers"]["median"] > 0, key
        assert key in s["ratio_vidax_over_diffusers"]
    assert s["compile_cold"]["median"] > 0 and s["compile_cached"]["median"] > 0
    assert set(s["targets"]) == {"step <= 0.8x diffusers", "peak RSS <= 0.8x diffusers", "load <= 0.5x diffusers"}
    assert rec["sweep"][0]["tokens"] > 0
    # the same weights and inputs: both engines make the same frames
    assert rec["frames_max_abs_diff"] is not None and rec["frames_max_abs_diff"] < 2e-2
    assert rec["live_stats"]["diffusers"]["torch_num_threads"] >= 1


def test_gpu_step_runs_on_a_tiny_model(tmp_path):
    """The GPU script's vidax path against the engine's current API, on a tiny model on the CPU; and its report."""
    from bench import gpu_step

    r = gpu_step.part_vidax("tiny", 1, "chunked")
    assert r["step_s"] and r["compile_s"] > 0 and r["weight_bytes"] > 0 and r["model_flops"] > 0
    res = tmp_path / "res"
    res.mkdir()
    (res / "vidax-1.3b-480p-chunked.json").write_text(json.dumps({**r, "model": "1.3b-480p"}))
    (res / "matmul.json").write_text(json.dumps({"tflops": 700.0, "device": "cuda:0"}))
    (res / "estimate.json").write_text(json.dumps(gpu_step.part_estimate()))
    docs = tmp_path / "benchmarks.md"
    gpu_step.report(res, docs)
    text = docs.read_text()
    assert "## GPU: one H200, real sizes" in text and "| 1.3b-480p | vidax | chunked |" in text
    assert "| 14b-720p | diffusers | | | not run |" in text


@pytest.mark.parametrize("family", ["wan2.2-ti2v", "cogvideox", "ltx", "hunyuanvideo"])
def test_compare_contenders_compute_the_same_step(family, tmp_path):
    """The two contenders of each added family, on a tiny checkpoint of that family: the guided step each times
    gives the same noise prediction (the comparison compares one computation), and both decode to the same video."""
    import numpy as np

    from bench import compare

    fam = compare.FAMILIES[family]
    # LTX latents have 128 channels in every release (the bench's latent shape); the demo's tiny default is 16.
    overrides = ({"in_channels": 128, "out_channels": 128}, {"latent_channels": 128}) if family == "ltx" else ({}, {})
    tiny = compare.BenchConfig("tiny", family, overrides[0], overrides[1], {}, base=(9, 64, 64), sweep=((9, 64, 64),))
    folder = tmp_path / "ckpt"
    if family == "cogvideox":
        from vidax.models.cogvideox.demo import write_demo_checkpoint

        write_demo_checkpoint(folder, seed=1, variant="2b")
    else:
        fam.write_checkpoint(folder, tiny)
    latents = compare._latents(fam.latent_shape(*tiny.base))
    engines = {n: cls(folder, "float32", None) for n, cls in fam.contenders.items()}
    preds, videos = {}, {}
    for n, e in engines.items():
        e.load()
        e.encode()
        e.prepare(latents)
        e.step()
        preds[n] = np.asarray(e.compiled(*e.args) if n == "vidax" else e.noise_pred.numpy())
        videos[n] = np.asarray(e.decode(latents))
        assert videos[n].size > 0
    ref = preds["diffusers"]
    assert preds["vidax"].shape == ref.shape and np.linalg.norm(preds["vidax"] - ref) / np.linalg.norm(ref) < 1e-4
    assert fam.tokens(tiny, *tiny.base) > 0
    if family == "ltx":  # vidax decodes to [0, 1] frames (B, F, H, W, 3), diffusers to raw (B, 3, F, H, W) output
        raw = np.clip(videos["diffusers"].transpose(0, 2, 3, 4, 1) / 2 + 0.5, 0, 1)
        assert videos["vidax"].shape == raw.shape and np.abs(videos["vidax"] - raw).max() < 1e-4
    if family == "hunyuanvideo":  # both decode to [0, 1] frames (B, F, H, W, 3)
        assert videos["vidax"].shape == videos["diffusers"].shape == (1, 9, 64, 64, 3)
        assert np.abs(videos["vidax"] - videos["diffusers"]).max() < 1e-4


def test_a_converted_folder_with_unaligned_tensors_is_written_again(tmp_path):
    """``bench.compare`` reuses a converted checkpoint only if the writer's alignment holds for every tensor, not
    just the data section: a config b folder written before the writer ordered its tensors (aligned data
    section, tensors at 48 mod 64) was reused and every tensor converted at load."""
    import json

    import numpy as np

    from bench.compare import _current_writer
    from vidax.checkpoint.writer import DATA_ALIGNMENT, write_safetensors_stream

    a, b = np.zeros(3, np.float32), np.zeros((4, 16), np.float32)  # 12 bytes, then 256
    good = tmp_path / "good"
    good.mkdir()
    write_safetensors_stream(good / "params.safetensors", [("b", b.shape, b.dtype), ("a", a.shape, a.dtype)],
                             [("b", b), ("a", a)])
    assert _current_writer(good)
    bad = tmp_path / "bad"
    bad.mkdir()
    header = json.dumps({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},
                         "b": {"dtype": "F32", "shape": [4, 16], "data_offsets": [12, 268]}}).encode()
    header += b" " * (-(8 + len(header)) % DATA_ALIGNMENT)  # the data section aligned, "b" not
    (bad / "params.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + a.tobytes() + b.tobytes())
    assert not _current_writer(bad)
