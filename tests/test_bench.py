"""The benchmark scripts: they import, gpu.sh parses, and the comparison harness runs end to end on a tiny config."""

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("module", ["bench.compare", "bench.compile_study", "bench.gpu_step", "bench.cpu_attention",
                                    "bench.convert", "bench.load", "bench._report"])
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
    # config e: HunyuanVideo 13B width (3072 = 24 x 128), a few blocks of each kind, components that fit each other
    e = CONFIGS["e"]
    t = e.transformer
    assert e.family == "hunyuanvideo" and FAMILIES["hunyuanvideo"].cfg_halves == 1
    assert t["num_attention_heads"] == 24 and t["attention_head_dim"] == 128 and t["mlp_ratio"] == 4.0
    assert sum(t["rope_axes_dim"]) == t["attention_head_dim"] and list(t["rope_axes_dim"]) == [16, 56, 56]
    assert 2 <= t["num_layers"] < 20 and 2 <= t["num_single_layers"] < 40 and t["num_refiner_layers"] == 2
    assert t["text_embed_dim"] == e.text["hidden_size"] == 4096 and t["pooled_projection_dim"] == 768
    assert e.text["clip_hidden_size"] == 768 and e.text["num_hidden_layers"] > 2  # hidden_states[-3] runs a layer
    assert e.vae["block_out_channels"] == [128, 256, 512, 512] and e.vae["layers_per_block"] == 2
    # 5x128x128 -> latents (1, 16, 2, 16, 16) -> 2 x 8 x 8 patches of 2x2
    assert FAMILIES["hunyuanvideo"].tokens(e, *e.base) == 128
    # the GPU part runs the same model (width and blocks) at the paper row's size
    from bench import gpu_step

    gpu = gpu_step.hv_config("hv-720p")
    assert all(gpu[k] == (tuple(v) if isinstance(v, list) else v) for k, v in t.items())
    # config f: HunyuanVideo-1.5 8.3B width (2048 = 16 x 128), the real text widths, components that fit each other
    f = CONFIGS["f"]
    t, q, g = f.transformer, f.text["qwen"], f.text["t5"]
    assert f.family == "hunyuanvideo-1.5" and FAMILIES["hunyuanvideo-1.5"].cfg_halves == 2
    assert t["num_attention_heads"] == 16 and t["attention_head_dim"] == 128 and t["mlp_ratio"] == 4.0
    assert sum(t["rope_axes_dim"]) == t["attention_head_dim"] and list(t["rope_axes_dim"]) == [16, 56, 56]
    assert 2 <= t["num_layers"] < 54 and t["num_refiner_layers"] == 2 and t["image_embed_dim"] == 1152
    assert t["text_embed_dim"] == q["hidden_size"] == 3584 and q["hidden_size"] // q["num_attention_heads"] == 128
    assert sum(q["rope_scaling"]["mrope_section"]) == 64 and q["num_hidden_layers"] > 2  # hidden_states[-3] runs
    assert t["text_embed_2_dim"] == g["d_model"] == 1472
    assert t["in_channels"] == 2 * f.vae["latent_channels"] + 1 and t["out_channels"] == f.vae["latent_channels"] == 32
    assert f.vae["block_out_channels"][-1] % (2 * f.vae["latent_channels"]) == 0
    # 5x128x128 -> latents (1, 32, 2, 8, 8), patch 1
    assert FAMILIES["hunyuanvideo-1.5"].tokens(f, *f.base) == 128
    gpu = gpu_step.hv15_config("hv15-720p")
    assert all(gpu[k] == (tuple(v) if isinstance(v, list) else v) for k, v in t.items())
    # config g: Cosmos-Predict2.5 2B width (2048 = 16 x 128) as the release's config, a real-width Qwen whose layers'
    # concatenated states the transformer's crossattn_proj reads, the Wan2.1 VAE at its release width (config a's)
    from vidax.models.cosmos_predict25.config import ORIGINAL_CONFIGS

    g = CONFIGS["g"]
    t, q = g.transformer, g.text
    release = ORIGINAL_CONFIGS["Cosmos-2.5-Predict-Base-2B"]
    assert g.family == "cosmos-predict2.5" and FAMILIES["cosmos-predict2.5"].cfg_halves == 2
    assert all(release[k] == (tuple(v) if isinstance(v, list) else v) for k, v in t.items() if k != "num_layers")
    assert 2 <= t["num_layers"] < release["num_layers"] and g.vae == a.vae
    assert q["hidden_size"] == 3584 and q["hidden_size"] // q["num_attention_heads"] == 128
    assert sum(q["rope_scaling"]["mrope_section"]) == 64 and 2 <= q["num_hidden_layers"] < 28
    # 5x128x128 -> latents (1, 16, 2, 16, 16) -> 2 x 8 x 8 patches of 2x2
    assert FAMILIES["cosmos-predict2.5"].tokens(g, *g.base) == 128
    gpu = gpu_step.cosmos_config("cosmos-720p")
    assert all(gpu[k] == (tuple(v) if isinstance(v, list) else v) for k, v in t.items())
    assert gpu["crossattn_proj_in_channels"] == release["crossattn_proj_in_channels"] == 100352
    # config h: Cosmos3 Edge width (2048 = 16 x 128 over 8 kv heads, MLP 9216, the Nemotron variants) as the
    # release's config, a few of its 28 layers, the Wan2.2 VAE at its release width (config b's)
    from vidax.models.cosmos3.config import RELEASE_CONFIGS, Cosmos3TransformerConfig

    h = CONFIGS["h"]
    t, edge = h.transformer, RELEASE_CONFIGS["Cosmos3-Edge"]
    assert h.family == "cosmos3" and FAMILIES["cosmos3"].cfg_halves == 2 and h.vae == CONFIGS["b"].vae
    for k, v in t.items():
        if k == "num_hidden_layers":
            assert 2 <= v < edge[k] == 28
        elif k == "rope_axes_dim":
            assert v == list(edge["rope_scaling"]["mrope_section"])
        elif k == "rope_scaling":
            assert list(v["mrope_section"]) == list(edge[k]["mrope_section"])
        else:
            assert v == edge[k], k
    from vidax.models.cosmos3.demo import transformer_config

    built = Cosmos3TransformerConfig.from_dict(transformer_config(1000, edge=True, **t))  # as the writer builds it
    assert (built.nemotron, built.has_k_norm_und_for_gen, built.hidden_size, built.intermediate_size) == (
        True, True, 2048, 9216)
    # 5x128x128 -> latents (1, 48, 2, 8, 8) -> 2 x 4 x 4 patches of 2x2
    assert FAMILIES["cosmos3"].tokens(h, *h.base) == 32
    gpu = gpu_step.cosmos3_config("cosmos3-edge-480p")
    assert all(gpu[k] == v for k, v in t.items()) and gpu["vocab_size"] == edge["vocab_size"]
    assert all(gpu[k] == edge[k] for k in edge if k in gpu and k not in ("action_gen", "sound_gen", "rope_axes_dim",
                                                                         "rope_scaling", "num_hidden_layers"))


def test_gpu_step_flops_and_estimates():
    from bench import gpu_step

    assert gpu_step.tokens("1.3b-480p") == 21 * 30 * 52
    assert gpu_step.tokens("14b-720p") == 21 * 45 * 80
    assert abs(gpu_step.param_count("1.3b-480p") / 1.42e9 - 1) < 0.02  # Wan2.1 1.3B: 1.42B parameters
    assert abs(gpu_step.param_count("14b-720p") / 14.3e9 - 1) < 0.02
    est = gpu_step.estimate("14b-720p", 2, 1024)
    assert est["weights"] < est["total"] < 139 * 2**30
    # HunyuanVideo at 1280x720, 129 frames: latents (33, 90, 160), patches of 2x2
    assert gpu_step.hv_tokens("hv-720p") == 33 * 45 * 80
    assert gpu_step.hv_estimate("hv-720p")["total"] < 139 * 2**30
    # HunyuanVideo-1.5 at 1280x720, 121 frames: latents (31, 45, 80), patch 1
    assert gpu_step.hv15_tokens("hv15-720p") == 31 * 45 * 80
    assert gpu_step.hv15_estimate("hv15-720p")["total"] < 139 * 2**30
    # Cosmos-Predict2.5 at 1280x704, 93 frames: latents (24, 88, 160), patches of 2x2
    assert gpu_step.cosmos_tokens("cosmos-720p") == 24 * 44 * 80
    assert gpu_step.cosmos_estimate("cosmos-720p")["total"] < 139 * 2**30
    # Cosmos3 Edge at 832x480, 121 frames: latents (31, 30, 52), patches of 2x2
    assert gpu_step.cosmos3_tokens("cosmos3-edge-480p") == 31 * 15 * 26
    assert gpu_step.cosmos3_estimate("cosmos3-edge-480p")["total"] < 139 * 2**30
    # diffusers recomputes the understanding stream over both prompts at every step; vidax once per call
    assert gpu_step.cosmos3_step_flops("cosmos3-edge-480p", recompute=True) > gpu_step.cosmos3_step_flops(
        "cosmos3-edge-480p")


def test_gpu_step_hunyuanvideo_parameter_counts_match_diffusers():
    """The GPU part's sizes (counted on vidax's spec tree) against diffusers' model of the same configuration, built
    on the meta device (no memory): the few-block benchmark model and the release's full 13B."""
    torch = pytest.importorskip("torch")
    from diffusers import HunyuanVideoTransformer3DModel

    from bench import gpu_step

    for name in ("hv-720p", "hv-13b"):
        cfg = {**gpu_step.hv_config(name), "rope_axes_dim": list(gpu_step.hv_config(name)["rope_axes_dim"])}
        with torch.device("meta"):
            ref = sum(p.numel() for p in HunyuanVideoTransformer3DModel(**cfg).parameters())
        assert gpu_step.hv_param_count(name) == ref, name
    assert abs(gpu_step.hv_param_count("hv-13b") / 12.8e9 - 1) < 0.01  # "HunyuanVideo 13B": 12.8 B parameters
    from diffusers import HunyuanVideo15Transformer3DModel

    for name in ("hv15-720p", "hv15-8.3b"):
        cfg = {**gpu_step.hv15_config(name), "rope_axes_dim": list(gpu_step.hv15_config(name)["rope_axes_dim"])}
        with torch.device("meta"):
            ref = sum(p.numel() for p in HunyuanVideo15Transformer3DModel(**cfg).parameters())
        assert gpu_step.hv15_param_count(name) == ref, name
    with torch.device("meta"):  # the full depth is the release: diffusers' defaults
        assert gpu_step.hv15_param_count("hv15-8.3b") == sum(
            p.numel() for p in HunyuanVideo15Transformer3DModel().parameters())
    from diffusers import CosmosTransformer3DModel

    for name in ("cosmos-720p", "cosmos-2b"):  # the full depth is the 2B release (2.06 B parameters)
        cfg = {k: list(v) if isinstance(v, tuple) else v for k, v in gpu_step.cosmos_config(name).items()}
        with torch.device("meta"):
            ref = sum(p.numel() for p in CosmosTransformer3DModel(**cfg).parameters())
        assert gpu_step.cosmos_param_count(name) == ref, name
    assert abs(gpu_step.cosmos_param_count("cosmos-2b") / 2.06e9 - 1) < 0.01
    from diffusers import Cosmos3OmniTransformer

    for name in ("cosmos3-edge-480p", "cosmos3-edge"):  # the full depth is the Edge release (video generation)
        with torch.device("meta"):
            ref = sum(p.numel() for n, p in Cosmos3OmniTransformer(**gpu_step.cosmos3_config(name)).named_parameters()
                      if not n.startswith("lm_head."))
        assert gpu_step.cosmos3_param_count(name) == ref, name
    assert abs(gpu_step.cosmos3_param_count("cosmos3-edge") / 3.09e9 - 1) < 0.01


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
    assert "| hv-720p | vidax | | | not run |" in text


def test_gpu_step_hunyuanvideo_parts_run_on_a_tiny_model(tmp_path):
    """The GPU script's HunyuanVideo parts (vidax and diffusers) against the engines' current APIs, on a tiny model on
    the CPU; the report renders both rows and their ratio, with the estimate computed here when none came back."""
    pytest.importorskip("diffusers")
    from bench import gpu_step

    res = tmp_path / "res"
    res.mkdir()
    for part in ("vidax", "diffusers"):
        args = [part, "--model", "hv-tiny", "--steps", "1", "--out-dir", str(res)]
        assert gpu_step.main(args + (["--attention", "auto"] if part == "vidax" else [])) == 0
    v = json.loads((res / "vidax-hv-tiny-auto.json").read_text())
    d = json.loads((res / "diffusers-hv-tiny.json").read_text())
    for r in (v, d):
        assert len(r["step_s"]) == 1 and r["tokens"] == 3 * 4 * 4 and r["model_flops"] > 0 and r["weight_bytes"] > 0
    assert v["attention"] and v["compile_s"] > 0
    # rendered as the benchmark model's rows
    for r, name in ((v, "vidax-hv-720p-auto.json"), (d, "diffusers-hv-720p.json")):
        (res / name).write_text(json.dumps({**r, "model": "hv-720p"}))
    (res / "matmul.json").write_text(json.dumps({"tflops": 700.0, "device": "cuda:0",
                                                 "env": {"gpu": "NVIDIA H200", "date": "2026-12-04"}}))
    docs = tmp_path / "benchmarks.md"
    gpu_step.report(res, docs)
    text = docs.read_text()
    assert "NVIDIA H200" in text and f"| hv-720p | vidax | {v['attention']} (auto) |" in text
    assert "| hv-720p | diffusers | sdpa |" in text and "| hv-720p | vidax/diffusers (best vidax) |" in text
    assert "hv-720p: 1.61 B parameters, 118800 video tokens" in text and "| hv-720p/bfloat16/fused |" in text


def test_gpu_step_hunyuanvideo15_parts_run_on_a_tiny_model(tmp_path):
    """The GPU script's HunyuanVideo-1.5 parts (vidax and diffusers) against the engines' current APIs, on a tiny model
    on the CPU; the report renders their rows."""
    pytest.importorskip("diffusers")
    from bench import gpu_step

    res = tmp_path / "res"
    res.mkdir()
    for part in ("vidax", "diffusers"):
        args = [part, "--model", "hv15-tiny", "--steps", "1", "--out-dir", str(res)]
        assert gpu_step.main(args + (["--attention", "auto"] if part == "vidax" else [])) == 0
    v = json.loads((res / "vidax-hv15-tiny-auto.json").read_text())
    d = json.loads((res / "diffusers-hv15-tiny.json").read_text())
    for r in (v, d):
        assert len(r["step_s"]) == 1 and r["tokens"] == 3 * 4 * 4 and r["model_flops"] > 0 and r["weight_bytes"] > 0
    assert v["text_tokens"] == 1256 and d["text_tokens"] == 1256 + 729 and d["model_flops"] > v["model_flops"]
    for r, name in ((v, "vidax-hv15-720p-auto.json"), (d, "diffusers-hv15-720p.json")):
        (res / name).write_text(json.dumps({**r, "model": "hv15-720p"}))
    (res / "matmul.json").write_text(json.dumps({"tflops": 700.0, "device": "cuda:0"}))
    docs = tmp_path / "benchmarks.md"
    gpu_step.report(res, docs)
    text = docs.read_text()
    assert f"| hv15-720p | vidax | {v['attention']} (auto) |" in text and "| hv15-720p | diffusers | sdpa |" in text
    assert "hv15-720p: 0.47 B parameters, 111600 video tokens" in text


def test_gpu_step_cosmos_parts_run_on_a_tiny_model(tmp_path):
    """The GPU script's Cosmos-Predict2.5 parts (vidax and diffusers) against the engines' current APIs, on a tiny
    model on the CPU; the report renders their rows."""
    pytest.importorskip("diffusers")
    from bench import gpu_step

    res = tmp_path / "res"
    res.mkdir()
    for part in ("vidax", "diffusers"):
        args = [part, "--model", "cosmos-tiny", "--steps", "1", "--out-dir", str(res)]
        assert gpu_step.main(args + (["--attention", "auto"] if part == "vidax" else [])) == 0
    v = json.loads((res / "vidax-cosmos-tiny-auto.json").read_text())
    d = json.loads((res / "diffusers-cosmos-tiny.json").read_text())
    for r in (v, d):  # 9x64x64 -> latents (3, 8, 8) -> 3 x 4 x 4 patches of 2x2
        assert len(r["step_s"]) == 1 and r["tokens"] == 3 * 4 * 4 and r["model_flops"] > 0 and r["weight_bytes"] > 0
        assert r["text_tokens"] == 512
    assert v["weight_bytes"] > d["weight_bytes"]  # vidax keeps the AdaLN-LoRA, embedders and norms in float32
    for r, name in ((v, "vidax-cosmos-720p-auto.json"), (d, "diffusers-cosmos-720p.json")):
        (res / name).write_text(json.dumps({**r, "model": "cosmos-720p"}))
    (res / "matmul.json").write_text(json.dumps({"tflops": 700.0, "device": "cuda:0"}))
    docs = tmp_path / "benchmarks.md"
    gpu_step.report(res, docs)
    text = docs.read_text()
    assert f"| cosmos-720p | vidax | {v['attention']} (auto) |" in text and "| cosmos-720p | diffusers | sdpa |" in text
    assert "cosmos-720p: 0.26 B parameters, 84480 video tokens" in text


def test_gpu_step_cosmos3_parts_run_on_a_tiny_model(tmp_path):
    """The GPU script's Cosmos3 parts (vidax: the und prefill and the guided gen step; diffusers: two joint-sequence
    calls per step) against the engines' current APIs, on a tiny model on the CPU; the report renders their rows."""
    pytest.importorskip("diffusers")
    from bench import gpu_step

    res = tmp_path / "res"
    res.mkdir()
    for part in ("vidax", "diffusers"):
        args = [part, "--model", "cosmos3-tiny", "--steps", "1", "--out-dir", str(res)]
        assert gpu_step.main(args + (["--attention", "auto"] if part == "vidax" else [])) == 0
    v = json.loads((res / "vidax-cosmos3-tiny-auto.json").read_text())
    d = json.loads((res / "diffusers-cosmos3-tiny.json").read_text())
    for r in (v, d):  # 9x64x64 -> latents (3, 4, 4) -> 3 x 2 x 2 patches of 2x2
        assert len(r["step_s"]) == 1 and r["tokens"] == 3 * 2 * 2 and r["model_flops"] > 0 and r["weight_bytes"] > 0
        assert r["text_tokens"] == [300, 260]
    assert v["padded_text_tokens"] == 320 and len(v["prefill_s"]) == 1 and d["recompute_flops"] > d["model_flops"]
    for r, name in ((v, "vidax-cosmos3-edge-480p-auto.json"), (d, "diffusers-cosmos3-edge-480p.json")):
        (res / name).write_text(json.dumps({**r, "model": "cosmos3-edge-480p"}))
    (res / "matmul.json").write_text(json.dumps({"tflops": 700.0, "device": "cuda:0"}))
    docs = tmp_path / "benchmarks.md"
    gpu_step.report(res, docs)
    text = docs.read_text()
    assert f"| cosmos3-edge-480p | vidax | {v['attention']} (auto) |" in text
    assert "| cosmos3-edge-480p | diffusers | sdpa |" in text and "Cosmos3: CFG rows 2 of 300 and 260" in text
    assert "cosmos3-edge-480p: 0.48 B parameters, 12090 video tokens" in text


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_gpu_script_dry_run_lists_parts_the_step_script_accepts(tmp_path):
    """``GPU_BENCH_DRY_RUN=1 bash bench/gpu.sh`` runs nothing and prints each part's command: all of them parse with
    gpu_step.py's command line, the default run writes at most the 8 files the device returns, and
    ``GPU_BENCH_PARTS`` picks the groups."""
    from bench import gpu_step

    def parts(groups=None):
        env = dict(os.environ, GPU_BENCH_DRY_RUN="1", OUT=str(tmp_path))
        if groups is not None:
            env["GPU_BENCH_PARTS"] = groups
        r = subprocess.run(["bash", str(ROOT / "bench" / "gpu.sh")], capture_output=True, text=True, env=env,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        cmds = [line.split("bench/gpu_step.py ", 1)[1].split() for line in r.stdout.splitlines()
                if line.startswith("dry-run: ")]
        return [gpu_step.parser().parse_args(c) for c in cmds]

    every = parts()
    assert len(every) == 8 and not list(tmp_path.iterdir())  # one JSON file per part; nothing ran
    assert [(a.part, a.model) for a in every if a.model.startswith("hv")] == [("diffusers", "hv-720p"),
                                                                            ("vidax", "hv-720p")]
    hv = parts("hv")
    assert [a.part for a in hv] == ["matmul", "diffusers", "vidax"] and hv[2].model == "hv-720p"
    assert not any(a.model.startswith("hv") for a in parts("wan13 wan14"))
    hv15 = parts("hv15")  # not in the default run (8 files): asked for by name
    assert [(a.part, a.model) for a in hv15] == [("matmul", "1.3b-480p"), ("diffusers", "hv15-720p"),
                                                 ("vidax", "hv15-720p")] and hv15[2].attention == "auto"
    assert not any(a.model.startswith("hv15") for a in every)
    cosmos = parts("cosmos")  # likewise asked for by name
    assert [(a.part, a.model) for a in cosmos] == [("matmul", "1.3b-480p"), ("diffusers", "cosmos-720p"),
                                                   ("vidax", "cosmos-720p")] and cosmos[2].attention == "auto"
    assert not any(a.model.startswith("cosmos") for a in every)
    cosmos3 = parts("cosmos3")  # likewise asked for by name
    assert [(a.part, a.model) for a in cosmos3] == [("matmul", "1.3b-480p"), ("diffusers", "cosmos3-edge-480p"),
                                                    ("vidax", "cosmos3-edge-480p")] and cosmos3[2].attention == "auto"
    assert [a.model for a in parts("cosmos cosmos3") if a.part == "vidax"] == ["cosmos-720p", "cosmos3-edge-480p"]
    assert [a.model for a in parts("hv15 cosmos wan14") if a.part == "vidax"] == ["hv15-720p", "cosmos-720p",
                                                                                 "14b-720p"]


@pytest.mark.parametrize("family", ["wan2.2-ti2v", "cogvideox", "ltx", "hunyuanvideo", "hunyuanvideo-1.5",
                                    "cosmos-predict2.5", "cosmos3"])
def test_compare_contenders_compute_the_same_step(family, tmp_path):
    """The two contenders of each added family, on a tiny checkpoint of that family: the guided step each times
    gives the same noise prediction (the comparison compares one computation), and both decode to the same video."""
    import numpy as np

    from bench import compare

    fam = compare.FAMILIES[family]
    # LTX latents have 128 channels in every release (the bench's latent shape); the demo's tiny default is 16.
    overrides = ({"in_channels": 128, "out_channels": 128}, {"latent_channels": 128}) if family == "ltx" else ({}, {})
    if family == "hunyuanvideo-1.5":  # the release's 32 latent channels (the demo's tiny default is 4)
        overrides = ({"in_channels": 65, "out_channels": 32},
                     {"latent_channels": 32, "block_out_channels": [8, 8, 16, 16, 64]})
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
    if family in ("hunyuanvideo", "hunyuanvideo-1.5", "cosmos-predict2.5", "cosmos3"):  # [0, 1] frames (B, F, H, W, 3)
        assert videos["vidax"].shape == videos["diffusers"].shape == (1, 9, 64, 64, 3)
        assert np.abs(videos["vidax"] - videos["diffusers"]).max() < 1e-4


def test_compare_report_of_a_guidance_distilled_family(monkeypatch):
    """Config e's section, re-rendered from its recorded run: the step is labelled as one evaluation (no CFG halves,
    no negative prompt) and the notes name the family's own block loop and VAE loading."""
    from bench import compare

    rec = json.loads((ROOT / "docs" / "benchmarks" / "compare-e.json").read_text())
    rec["summary"] = compare.summarize(rec)
    written = {}
    monkeypatch.setattr(compare, "replace_section", lambda heading, body: written.update({heading: body}))
    compare.write_markdown(rec, None)
    text = written["## vidax vs diffusers, CPU (config e)"]
    assert "| transformer step (one evaluation, embedded guidance), 128 video tokens, s |" in text
    assert "| text encoder, prompt (warm), s |" in text and "negative" not in text and "CFG half" not in text
    assert "one transformer evaluation per step" in text and 'block_loop="host"' not in text
    assert compare.FAMILIES["hunyuanvideo"].step_note in text and compare.FAMILIES["hunyuanvideo"].vae_note in text
    # the other families keep their labels
    assert compare.FAMILIES["wan2.1"].cfg_halves == 2 and "block_loop" in compare.FAMILIES["wan2.1"].step_note


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
