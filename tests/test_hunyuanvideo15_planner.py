"""The HunyuanVideo-1.5 memory planner (models/hunyuanvideo15/planner.py): the released weights by dtype, the VAE
decode's tiles, compiled per-split estimates against a measured peak, `vidax plan` for a preset and `vidax generate
--auto-split` on a demo folder.

Reference values: the parameter counts of the reference classes built on PyTorch's meta device (diffusers
``HunyuanVideo15Transformer3DModel`` and ``AutoencoderKLHunyuanVideo15``, transformers ``Qwen2_5_VLTextModel``,
``T5EncoderModel``, ``SiglipVisionModel``: shapes only, nothing allocated); the tiling against the VAE's own decode (its
decoder calls recorded); the estimate against the process's measured peak (``VmHWM``) in a fresh process.
"""

import json
import os
import subprocess
import sys

import jax.numpy as jnp
import pytest

from vidax.core.planner import Split, recommend
from vidax.models.hunyuanvideo15 import planner as hp
from vidax.models.hunyuanvideo15 import vae as hvae
from vidax.models.hunyuanvideo15.demo import write_demo_checkpoint
from vidax.models.hunyuanvideo15.presets import PRESETS
from vidax.models.hunyuanvideo15.transformer import transformer_specs

#: The estimate's stated tolerance against the measured peak (tests/test_planner.py's method).
TOLERANCE = 0.10


def _count(module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_release_weights_match_the_reference_classes():
    """The 8.3B transformer, Qwen2.5-VL-7B's language model, byT5 and SigLIP so400m as the planner counts them
    (float32 pins and all) against the reference modules' parameter counts."""
    torch = pytest.importorskip("torch")
    from diffusers import AutoencoderKLHunyuanVideo15, HunyuanVideo15Transformer3DModel
    from transformers import Qwen2_5_VLTextConfig, Qwen2_5_VLTextModel, SiglipVisionConfig, SiglipVisionModel
    from transformers import T5Config as HFT5Config
    from transformers import T5EncoderModel

    from vidax.core.planner import weight_bytes
    from vidax.encoders.llama import llama_specs

    model = hp.ARCHITECTURES["720p_t2v"]
    q = hp.QWEN2_5_VL_7B
    with torch.device("meta"):
        ref = {
            "transformer": _count(HunyuanVideo15Transformer3DModel()),
            "qwen": _count(Qwen2_5_VLTextModel(Qwen2_5_VLTextConfig(
                vocab_size=q.vocab_size, hidden_size=q.hidden_size, intermediate_size=q.intermediate_size,
                num_hidden_layers=q.num_hidden_layers, num_attention_heads=q.num_attention_heads,
                num_key_value_heads=q.num_key_value_heads))),
            "byt5": _count(T5EncoderModel(HFT5Config(vocab_size=1510, d_model=1472, d_kv=64, d_ff=3584, num_layers=12,
                                                     num_heads=6, feed_forward_proj="gated-gelu"))),
            "siglip": _count(SiglipVisionModel(SiglipVisionConfig(hidden_size=1152, intermediate_size=4304,
                                                                  num_hidden_layers=27, num_attention_heads=16,
                                                                  image_size=384, patch_size=14,
                                                                  vision_use_head=False))),
            "vae": _count(AutoencoderKLHunyuanVideo15()),
        }
    counts = hp.parameter_counts(model.transformer)
    assert counts["total"] == ref["transformer"] and 8.2e9 < counts["total"] < 8.4e9  # "8.3B"
    assert counts["blocks"] + counts["resident"] == counts["total"]
    assert counts["adaln"] == 54 * 2 * (2048 * 6 * 2048 + 6 * 2048)  # norm1, norm1_context: dim -> 6 dim, float32
    assert counts["adaln"] <= counts["fp32"] < counts["adaln"] + counts["resident"]
    bf16 = weight_bytes(transformer_specs(model.transformer), "bfloat16")
    assert bf16 == 2 * counts["total"] + 2 * counts["fp32"]  # the float32 leaves at 4 bytes
    assert 7.0e9 < ref["qwen"] < 7.1e9  # Qwen2.5-VL-7B without its vision tower and LM head
    enc = hp.encoder_bytes(hp.ARCHITECTURES["720p_i2v"])
    assert enc == {"text_encoder": 4 * ref["qwen"], "text_encoder_2": 4 * ref["byt5"],
                   "image_encoder": 4 * ref["siglip"]}
    norms = (2 * q.num_hidden_layers + 1) * q.hidden_size
    assert weight_bytes(llama_specs(q), "bfloat16") == 2 * (ref["qwen"] - norms) + 4 * norms
    assert hp.encoder_bytes(model)["image_encoder"] == 0
    # text-to-video loads the decoder, image-to-video the whole VAE
    whole = hp.vae_bytes(hp.ARCHITECTURES["720p_i2v"])
    assert whole == 4 * ref["vae"] and 0 < hp.vae_bytes(model) < whole


def test_variants_presets_tokens_and_splits():
    assert {p.variant for p in PRESETS.values()} <= set(hp.ARCHITECTURES)
    t2v, i2v = hp.preset_architecture(PRESETS["hunyuanvideo-1.5-720p-t2v"]), hp.ARCHITECTURES["480p_i2v"]
    assert (t2v.task, t2v.text_tokens, i2v.task, i2v.text_tokens) == ("t2v", 1000 + 256, "i2v", 1000 + 256 + 729)
    assert hp.ARCHITECTURES["480p_i2v_step_distilled"].transformer.use_meanflow
    assert hp.latent_shape(t2v, 720, 1280, 121) == (1, 32, 31, 45, 80)
    from vidax.core.planner import candidate_splits, default_chunks, joint_comm_bytes

    cfg = t2v.transformer
    assert default_chunks(cfg.num_layers) == [27, 9, 3, 1]
    assert candidate_splits(8, 2, cfg.num_attention_heads, cfg.mlp_dim) == [
        (1, 1, 8), (1, 2, 4), (1, 4, 2), (1, 8, 1), (2, 1, 4), (2, 2, 2), (2, 4, 1)]
    # 54 dual-stream blocks, each all-reducing the joint rows twice under tp: a ring sends 2 (tp-1)/tp of them
    one = 2 * 1 / 2 * 2 * (16 + 1256) * 2048 * 4
    assert hp.comm_bytes(t2v, 2, 16, "bfloat16", 1, 2, 1) == int(54 * 2 * one)
    assert joint_comm_bytes(dim=2048, heads=16, dual_layers=54, single_layers=0, batch=2, tokens=16, text_tokens=1256,
                            dtype="bfloat16", dp=2, tp=1, sp=1) == 0


@pytest.mark.parametrize("latents, tiling", [
    ((1, 4, 1, 20, 30), None),  # the default tiles (16 latents every 14): 2 x 3
    ((1, 4, 2, 20, 18), hvae.VAETiling(128, 128, 0.25)),  # 8 latents every 6: 4 x 3
    ((1, 4, 2, 16, 16), None),  # one tile: one call
    ((1, 4, 1, 20, 18), False),  # untiled
], ids=["default", "low-memory", "one-tile", "untiled"])
def test_decode_tiles_are_the_vae_decodes(monkeypatch, latents, tiling):
    """:func:`vae_decode_tiles` against the VAE's decode with its decoder calls recorded (zeros returned)."""
    cfg = hvae.HunyuanVideo15VAEConfig(latent_channels=4)
    calls = []

    def record(params, cfg, z):
        calls.append(tuple(z.shape[2:]))
        t, h, w = z.shape[2:]
        return jnp.zeros((z.shape[0], 3, hvae.decoded_frames(cfg, t), 16 * h, 16 * w), jnp.float32)

    monkeypatch.setattr(hvae, "decode_tile", record)
    from vidax.models.hunyuanvideo15.pipeline import DEFAULT_TILING

    hvae.decode({}, cfg, jnp.zeros(latents, jnp.float32), tiling=DEFAULT_TILING if tiling is None else
                (tiling or None))
    tiles = hp.vae_decode_tiles(cfg, latents, tiling)
    assert [c for row in tiles["tiles"] for c in row] == calls and tiles["calls"] == len(calls)
    assert max(calls, key=lambda c: c[1] * c[2]) == tiles["tile"] and tiles["spatial"] == (len(calls) > 1)


def test_estimate_is_within_its_tolerance_of_the_measured_peak():
    """The planner's compiled resident step (float32, CFG batch of 2, 1024 video + 1256 context tokens, width 256)
    against the process's measured peak (vidax.core.planner.measure_peak: VmHWM in a fresh process)."""
    code = (
        "import json; from vidax.models.hunyuanvideo15.config import HunyuanVideo15TransformerConfig as C;"
        "from vidax.models.hunyuanvideo15.planner import HunyuanVideo15Model as M, measure_resident_peak as m;"
        "cfg = C(num_attention_heads=4, attention_head_dim=64, num_layers=2, num_refiner_layers=1, text_embed_dim=64,"
        " text_embed_2_dim=32, image_embed_dim=32, rope_axes_dim=(16, 24, 24), in_channels=9, out_channels=4);"
        "print(json.dumps(m(M(cfg), (1, 4, 2, 16, 32), 'float32')))"
    )
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["measured"] > 100 * 2**20  # large enough for allocator noise not to matter
    assert abs(r["estimate"] / r["measured"] - 1) < TOLERANCE, r


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo folders (2 heads of 16, 2 blocks, tiny encoders and VAE): text- and image-to-video."""
    root = tmp_path_factory.mktemp("hv15_plan")
    return {task: write_demo_checkpoint(root / task, task=task) for task in ("t2v", "i2v")}


def test_folder_architecture_reads_the_configs(demo):
    t2v, i2v = hp.folder_architecture(demo["t2v"]), hp.folder_architecture(demo["i2v"])
    assert t2v.task == "t2v" and t2v.image_encoder is None and t2v.transformer.num_attention_heads == 2
    assert (t2v.text_encoder.hidden_size, t2v.text_encoder_2.d_model, t2v.vae.latent_channels) == (32, 24, 4)
    assert i2v.task == "i2v" and i2v.image_tokens == 16 and i2v.text_tokens == 1000 + 256 + 16
    assert hp.for_call(t2v, {"variant": "480p_t2v"}) is t2v  # a diffusers folder holds one transformer


@pytest.fixture(scope="module")
def i2v_plan(demo):
    """One split of 8 devices over all three axes, resident and offloaded in chunks of one block."""
    model = hp.folder_architecture(demo["i2v"])
    return model, hp.plan_hunyuanvideo15(model, height=16, width=32, num_frames=5, dtype="float32", devices=8,
                                         chunks=[1], splits=[(2, 2, 2)], model_name="tiny")


def test_plan_counts_every_phase_of_every_split(i2v_plan):
    model, plan = i2v_plan
    assert [e.split for e in plan.estimates] == [Split(2, 2, 2), Split(2, 2, 2, 1)]
    enc = sum(hp.encoder_bytes(model).values())
    vae = hp.vae_bytes(model)
    first = {"text encoder", "image encoder", "vae encode", "vae decode"}
    resident, offloaded = plan.estimates
    for e in plan.estimates:
        assert e.error is None and e.peak_bytes == max(e.phases.values()) > 0
        step = {"step"} if e.split.offload is None else {"prologue", "chunks", "epilogue"}
        assert set(e.phases) == step | first
        assert e.phases["text encoder"] > enc + vae and all(v > vae for v in e.phases.values())
        assert e.phases["image encoder"] < e.phases["text encoder"]  # SigLIP is loaded with the text encoders
        assert e.comm_bytes == hp.comm_bytes(model, 2, 2 * 1 * 2, "float32", 2, 2, 2) > 0
    assert offloaded.launches == 2 and offloaded.transfer_bytes > 0  # 2 blocks in chunks of 1
    # Offloading leaves only the parameters outside the stack beside the encoders (a quarter of a tp-2 block each).
    stack = resident.phases["text encoder"] - offloaded.phases["text encoder"]
    assert 0 < stack <= 4 * hp.parameter_counts(model.transformer)["blocks"]
    assert offloaded.transfer_bytes == 2 * stack // 2  # 2 blocks copied per step, each half of a block (tp 2)
    report = plan.report()
    assert "text encoders: Qwen2.5-VL" in report and "SigLIP" in report and "image encode" in report
    assert "(4 video + 1272 text tokens x 2)" in report
    assert "recommended: dp=2 tp=2 sp=2 resident" in report


def test_budget_moves_the_recommendation_to_offloading(i2v_plan):
    _, plan = i2v_plan
    budget = min(e.peak_bytes for e in plan.estimates if e.split.offload is None) - 1
    for e in plan.estimates:
        e.fits = e.peak_bytes <= budget
    try:
        best = recommend(plan.estimates)
        assert best.split.offload == 1 and best.peak_bytes <= budget
    finally:
        for e in plan.estimates:
            e.fits = None


def test_registry_hook_plans_guidance_as_the_cfg_batch(monkeypatch):
    from vidax.models.hunyuanvideo15.family import FAMILY

    seen = {}
    monkeypatch.setattr(hp, "plan_hunyuanvideo15", lambda model, **kw: seen.update(kw, model=model) or "plan")
    arch = hp.ARCHITECTURES["720p_t2v"]
    assert FAMILY.plan.plan(arch, height=720, width=1280, num_frames=121, guided=True, model="m") == "plan"
    assert seen == dict(model=arch, height=720, width=1280, num_frames=121, guided=True, model_name="m",
                        vae_tiling=None)
    assert FAMILY.plan.architecture(PRESETS["hunyuanvideo-1.5-480p-i2v"], None) is hp.ARCHITECTURES["480p_i2v"]
    # a CFG-distilled variant's guidance 1.0 plans one evaluation per step (the CLI's guided=guidance_scale > 1)
    from vidax.models.hunyuanvideo15.presets import VARIANTS

    assert VARIANTS["720p_t2v_distilled"].guidance_scale == 1.0


def test_cli_plans_the_720p_preset(tmp_path, capsys):
    """The real 8.3B step on one device at a tiny size (bfloat16, resident; offloading is the tiny plan's), with the
    real encoders and VAE: every figure at least the weights it holds."""
    from vidax.cli import main

    rc = main(["plan", "--preset", "hunyuanvideo-1.5-720p-t2v", "--height", "32", "--width", "32", "--num-frames", "5",
               "--devices", "1", "--chunks", "none", "--memory-gb", "141", "--json", str(tmp_path / "plan.json")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "HunyuanVideo-1.5 8.3B (720P) 32x32, 5 frames (8 video + 1256 text tokens x 2)" in out
    assert "text encoders: Qwen2.5-VL 26.34 GiB + byT5" in out and "the whole pipeline" in out
    assert "--devices 4 plans that" in out
    data = json.loads((tmp_path / "plan.json").read_text())
    (est,) = data["estimates"]
    assert est["split"] == {"dp": 1, "tp": 1, "sp": 1, "offload": None} and est["error"] is None
    weights = hp.weight_bytes(transformer_specs(hp.ARCHITECTURES["720p_t2v"].transformer), "bfloat16")
    vae = hp.vae_bytes(hp.ARCHITECTURES["720p_t2v"])
    assert weights + vae <= est["phases"]["step"] < 1.3 * weights + vae  # no float32 copy of the weights
    assert est["phases"]["text encoder"] > weights + vae + 4 * 7_070_619_136  # the float32 Qwen beside them
    assert est["fits"] and data["recommended"] is not None


def test_generate_auto_split_runs_the_recommended_split(demo, tmp_path, capsys, monkeypatch):
    """`vidax generate --auto-split` on the demo folder: the planner's recommendation for every device of the run (8
    simulated) is the mesh the pipeline ran. The candidates are cut to one split of the 8 devices over all three axes
    (the ranking among more is vidax.core.planner's, tested in tests/test_planner.py), to keep the test short."""
    from vidax.cli import main

    seen = []

    def one(devices, batch, *widths):
        seen.append((devices, batch))
        return [(2, 2, 2)]

    monkeypatch.setattr(hp, "candidate_splits", one)
    rc = main(["generate", "--checkpoint", str(demo["t2v"]), "--prompt", "a cat", "--height", "16", "--width", "16",
               "--num-frames", "1", "--steps", "1", "--no-progress", "--auto-split", "--memory-gb", "2",
               "--out", str(tmp_path / "v.mp4"), "--metrics-json", str(tmp_path / "m.json")])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert seen == [(8, 2)]  # every device, the CFG batch of the demo's guidance 6.0
    line = next(line for line in out.out.splitlines() if line.startswith("auto split: "))
    mesh = json.loads((tmp_path / "m.json").read_text())["mesh"]
    assert line.startswith("auto split: dp=2 tp=2 sp=2 resident (planned peak ")
    assert mesh == {"dp": 2, "tp": 2, "sp": 2}
