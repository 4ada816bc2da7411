"""bench.compare config i (LTX-2.5, the transformer alone): its two contenders compute the same guided step on a tiny
checkpoint written by diffusers' save_pretrained, and the GPU step script's LTX-2.5 parts run on a tiny model."""

import json

import numpy as np
import pytest

TINY = dict(in_channels=128, out_channels=128, num_attention_heads=2, attention_head_dim=8, cross_attention_dim=16,
            audio_in_channels=8, audio_out_channels=8, audio_num_attention_heads=2, audio_attention_head_dim=8,
            audio_cross_attention_dim=16, num_layers=2, caption_channels=12, gated_attn=True, audio_gated_attn=True,
            cross_attn_mod=True, audio_cross_attn_mod=True, rope_type="split", use_prompt_embeddings=False,
            use_prompt_adaln_single=True, perturbed_attn=True)


def test_compare_ltx2_contenders_compute_the_same_step(tmp_path):
    pytest.importorskip("diffusers")
    from bench import compare

    cfg = compare.CONFIGS["i"]
    fam = compare.FAMILIES[cfg.family]
    assert cfg.parts == ("sweep",) and cfg.transformer["num_layers"] == 2
    assert [fam.tokens(cfg, *s) for s in cfg.sweep] == [2 * 4 * 4, 3 * 8 * 8]
    tiny = compare.BenchConfig("tiny", "ltx2", TINY, {}, {}, base=(9, 64, 64), sweep=((9, 64, 64),))
    folder = tmp_path / "ckpt"
    fam.write_checkpoint(folder, tiny)
    latents = compare._latents(fam.latent_shape(*tiny.base))
    preds = {}
    for name, cls in fam.contenders.items():
        e = cls(folder, "float32", None)
        e.load()
        e.encode()
        e.prepare(latents)
        e.step()
        preds[name] = [np.asarray(p) for p in (e.compiled(*e.args) if name == "vidax" else e.noise_pred)]
    for ours, ref in zip(preds["vidax"], preds["diffusers"]):
        assert ours.shape == ref.shape
        assert np.linalg.norm(ours - ref) / np.linalg.norm(ref) < 1e-5


def test_gpu_step_ltx2_parts_run_on_a_tiny_model(tmp_path):
    pytest.importorskip("diffusers")
    from bench import gpu_step

    res = tmp_path / "res"
    res.mkdir()
    assert gpu_step.main(["vidax", "--model", "ltx2-tiny", "--steps", "1", "--attention", "auto",
                          "--out-dir", str(res)]) == 0
    assert gpu_step.main(["diffusers", "--model", "ltx2-tiny", "--steps", "1", "--out-dir", str(res)]) == 0
    v = json.loads((res / "vidax-ltx2-tiny-auto.json").read_text())
    d = json.loads((res / "diffusers-ltx2-tiny.json").read_text())
    for r in (v, d):  # 9x64x64 -> latents (2, 2, 2)
        assert len(r["step_s"]) == 1 and r["tokens"] == 8 and r["model_flops"] > 0 and r["weight_bytes"] > 0
    assert gpu_step.ltx2_tokens("ltx2-22b-704p") == 16 * 22 * 38
