"""The Cosmos-Predict2.5 memory planner (models/cosmos_predict25/planner.py): the released weights by dtype, compiled
per-split estimates against a measured peak, every phase of the first device, the registry hook, `vidax plan` for the
14B preset on 4 devices and `vidax generate --auto-split` on a demo folder.

Reference values: the parameter counts of the reference classes built on PyTorch's meta device (diffusers
``CosmosTransformer3DModel`` with the releases' configurations, ``AutoencoderKLWan``, transformers
``Qwen2_5_VLTextModel`` with Cosmos-Reason1-7B's: shapes only, nothing allocated); the estimate against the process's
measured peak (``VmHWM``) in a fresh process; the communication term derived by hand.
"""

import json
import os
import subprocess
import sys

import pytest

from vidax.core.planner import Split, candidate_splits, default_chunks, recommend
from vidax.models.cosmos_predict25 import planner as cp
from vidax.models.cosmos_predict25.config import ORIGINAL_CONFIGS
from vidax.models.cosmos_predict25.demo import write_demo_checkpoint
from vidax.models.cosmos_predict25.presets import PRESETS
from vidax.models.cosmos_predict25.transformer import num_tokens

#: The estimate's stated tolerance against the measured peak (tests/test_planner.py's method).
TOLERANCE = 0.10


def _count(module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_release_weights_match_the_reference_classes():
    """The 2B and 14B transformers (float32 pins and all), Cosmos-Reason1-7B's language model and the Wan2.1 VAE as the
    planner counts them, against the reference modules' parameter counts."""
    torch = pytest.importorskip("torch")
    from diffusers import AutoencoderKLWan, CosmosTransformer3DModel
    from transformers import Qwen2_5_VLTextConfig, Qwen2_5_VLTextModel

    q = cp.COSMOS_REASON1_7B
    with torch.device("meta"):
        ref = {size: _count(CosmosTransformer3DModel(**{k: list(v) if isinstance(v, tuple) else v for k, v in
                                                        ORIGINAL_CONFIGS[f"Cosmos-2.5-Predict-Base-{size}"].items()}))
               for size in ("2B", "14B")}
        qwen = _count(Qwen2_5_VLTextModel(Qwen2_5_VLTextConfig(
            vocab_size=q.vocab_size, hidden_size=q.hidden_size, intermediate_size=q.intermediate_size,
            num_hidden_layers=q.num_hidden_layers, num_attention_heads=q.num_attention_heads,
            num_key_value_heads=q.num_key_value_heads)))
        vae = _count(AutoencoderKLWan())  # its defaults are the Wan2.1 release's
    for size, lo, hi in (("2B", 2.0e9, 2.1e9), ("14B", 14.3e9, 14.4e9)):
        cfg = cp.ARCHITECTURES[size].transformer
        counts = cp.parameter_counts(cfg)
        assert counts["total"] == ref[size] and lo < counts["total"] < hi
        assert counts["blocks"] + counts["resident"] == counts["total"]
        # three AdaLN-LoRA projections per block, dim -> 256 -> 3 dim, float32
        assert counts["adaln"] == cfg.num_layers * 3 * (cfg.dim * 256 + 256 * 3 * cfg.dim)
        assert counts["adaln"] <= counts["fp32"] < counts["adaln"] + counts["resident"]
        assert cp.transformer_bytes(cfg, "bfloat16") == 2 * counts["total"] + 2 * counts["fp32"]
        assert cp.transformer_bytes(cfg, "float32") == 4 * counts["total"]
    assert 7.0e9 < qwen < 7.1e9 and cp.ARCHITECTURES["14B"].text_width == 28 * 3584 == 100352
    assert cp.text_encoder_bytes(cp.ARCHITECTURES["2B"]) == 4 * qwen
    norms = (2 * q.num_hidden_layers + 1) * q.hidden_size
    assert cp.text_encoder_bytes(cp.ARCHITECTURES["2B"], "bfloat16") == 2 * (qwen - norms) + 4 * norms
    assert cp.vae_bytes(cp.ARCHITECTURES["2B"]) == 4 * vae


def test_presets_sizes_splits_and_communication():
    two, fourteen = (cp.preset_architecture(PRESETS[n]) for n in ("cosmos-predict2.5-2b-t2v",
                                                                  "cosmos-predict2.5-14b-t2v"))
    assert (two.transformer.num_layers, fourteen.transformer.num_layers) == (28, 36)
    with pytest.raises(ValueError, match="knows the presets"):
        cp.preset_architecture("wan2.1-t2v-14b-720p")
    shape = cp.latent_shape(fourteen, 704, 1280, 93)
    assert shape == (1, 16, 24, 88, 160) and num_tokens(fourteen.transformer, shape) == 24 * 44 * 80
    assert default_chunks(28) == [14, 7, 2, 1] and default_chunks(36) == [18, 9, 4, 2, 1]
    assert candidate_splits(4, 2, 40, fourteen.transformer.mlp_dim) == [(1, 1, 4), (1, 2, 2), (1, 4, 1), (2, 1, 2),
                                                                       (2, 2, 1)]
    cfg = fourteen.transformer
    # tp 4: per block three float32 all-reduces of the (2, 84480, 5120) stream and three of the (2, 24, 3 x 5120)
    # AdaLN-LoRA vectors; a ring sends 2 (tp - 1) / tp of each buffer
    tokens = 24 * 44 * 80
    one = 2 * 3 / 4 * 3 * (2 * tokens * 5120 * 4 + 2 * 24 * 3 * 5120 * 4)
    assert cp.comm_bytes(cfg, 2, tokens, 24, "bfloat16", 1, 4, 1) == int(36 * one)
    # sp 4 (10 heads per shard: Ulysses): q, k, v and the output, 3/4 of each (2, 21120, 5120) bf16 slice
    assert cp.comm_bytes(cfg, 2, tokens, 24, "bfloat16", 1, 1, 4) == int(36 * 4 * 3 / 4 * 2 * tokens // 4 * 5120 * 2)
    assert cp.comm_bytes(cfg, 2, tokens, 24, "bfloat16", 2, 1, 1) == 0


def test_estimate_is_within_its_tolerance_of_the_measured_peak():
    """The planner's compiled resident step (float32, CFG batch of 2, 2048 video tokens in 4 latent frames, 512
    context tokens, width 256, per-frame timesteps) against the process's measured peak
    (vidax.core.planner.measure_peak: VmHWM in a fresh process): 186 against 196 MB when written (0.95)."""
    code = (
        "import json; from vidax.models.cosmos_predict25.config import CosmosTransformerConfig as C;"
        "from vidax.models.cosmos_predict25.planner import CosmosPredict25Model as M, measure_resident_peak as m;"
        "cfg = C(in_channels=17, num_attention_heads=4, attention_head_dim=64, num_layers=2, mlp_ratio=4.0,"
        " text_embed_dim=256, adaln_lora_dim=64, rope_scale=(1.0, 3.0, 3.0), extra_pos_embed_type=None,"
        " use_crossattn_projection=True, crossattn_proj_in_channels=96, encoder_hidden_states_channels=256);"
        "print(json.dumps(m(M(cfg), (1, 16, 4, 32, 64), 'float32')))"
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
    """The demo folder (2 heads of 16, 2 blocks, a 3-layer Qwen 32 wide, a 16-channel Wan VAE)."""
    return write_demo_checkpoint(tmp_path_factory.mktemp("cosmos_plan") / "demo")


@pytest.fixture(scope="module")
def tiny_plan(demo):
    """One split of 8 devices over all three axes, resident and offloaded in chunks of one block."""
    model = cp.folder_architecture(demo)
    return model, cp.plan_cosmos_predict25(model, height=32, width=48, num_frames=5, dtype="float32", devices=8,
                                           chunks=[1], splits=[(2, 2, 2)], model_name="tiny")


def test_folder_architecture_reads_the_configs(demo):
    model = cp.folder_architecture(demo)
    assert (model.transformer.num_attention_heads, model.transformer.num_layers) == (2, 2)
    assert (model.text_encoder.hidden_size, model.text_encoder.num_hidden_layers, model.text_width) == (32, 3, 96)
    assert model.vae.base_dim == 16 and model.folder == str(demo) and model.text_tokens == 512


def test_plan_counts_every_phase_of_every_split(tiny_plan):
    model, plan = tiny_plan
    assert [e.split for e in plan.estimates] == [Split(2, 2, 2), Split(2, 2, 2, 1)]
    text = cp.text_encoder_bytes(model)
    vae = cp.vae_bytes(model)
    embeds = 2 * 512 * 96 * 4  # the float32 prompt embeddings of both halves
    resident, offloaded = plan.estimates
    for e in plan.estimates:
        assert e.error is None and e.peak_bytes == max(e.phases.values()) > 0
        step = {"step"} if e.split.offload is None else {"prologue", "chunks", "epilogue"}
        assert set(e.phases) == step | {"text encoder", "vae decode"}
        # the text encoder's weights, its all-layers output twice (prompt, then negative), the VAE's weights
        assert e.phases["text encoder"] > text + vae + 2 * 512 * 96 * 4
        assert e.phases["vae decode"] > vae + embeds + 2 * 3 * 5 * 32 * 48 * 4  # the frames and the video
        assert all(v > vae for v in e.phases.values())
        assert e.comm_bytes == cp.comm_bytes(model.transformer, 2, 2 * 2 * 3, 2, "float32", 2, 2, 2) > 0
    assert offloaded.launches == 2 and offloaded.transfer_bytes > 0  # 2 blocks in chunks of 1
    # Offloading leaves only the parameters outside the stack beside the text encoder.
    stack = resident.phases["text encoder"] - offloaded.phases["text encoder"]
    assert 0 < stack <= 4 * cp.parameter_counts(model.transformer)["blocks"]
    report = plan.report()
    assert "text encoder: Qwen2.5-VL" in report and "decode" in report and "prompt embeddings" in report
    assert "tiny 48x32, 5 frames (12 video + 512 text tokens x 2)" in report
    assert "recommended: dp=2 tp=2 sp=2 resident" in report


def test_budget_moves_the_recommendation_to_offloading(tiny_plan):
    _, plan = tiny_plan
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
    from vidax.models.cosmos_predict25.family import FAMILY

    seen = {}
    monkeypatch.setattr(cp, "plan_cosmos_predict25", lambda model, **kw: seen.update(kw, model=model) or "plan")
    arch = cp.ARCHITECTURES["14B"]
    assert FAMILY.plan.plan(arch, height=704, width=1280, num_frames=93, guided=True, model="m",
                            call={"guidance_scale": 7.0}) == "plan"
    assert seen == dict(model=arch, height=704, width=1280, num_frames=93, guided=True, model_name="m",
                        conditioning_frames=0)
    FAMILY.plan.plan(arch, height=704, width=1280, num_frames=93, guided=True, model="m",
                     call={"video": ["frames"], "num_latent_conditional_frames": 1})
    assert seen["conditioning_frames"] == 1  # video-to-world: the VAE encodes its conditioning frames
    FAMILY.plan.plan(arch, height=704, width=1280, num_frames=93, guided=True, model="m", call={"video": ["f"]})
    assert seen["conditioning_frames"] == 5
    assert FAMILY.plan.architecture(PRESETS["cosmos-predict2.5-2b-t2v"], None) is cp.ARCHITECTURES["2B"]


def test_cli_plans_the_14b_preset_on_4_devices(tmp_path, capsys):
    """`vidax plan --preset cosmos-predict2.5-14b-t2v --devices 4` with the real 14B, text encoder and VAE at a tiny
    size (tp 4 resident and in chunks of one block, the paper's row): resident, the 14B's quarter in bfloat16 beside
    the float32 Cosmos-Reason1-7B does not fit the paper's 30.75 GiB; in chunks of one block it does."""
    from unittest import mock

    from vidax.cli import main

    with mock.patch.object(cp, "candidate_splits", lambda devices, batch, *widths: [(1, 4, 1)]):
        rc = main(["plan", "--preset", "cosmos-predict2.5-14b-t2v", "--devices", "4", "--height", "32", "--width",
                   "32", "--num-frames", "5", "--chunks", "1", "--memory-gb", "30.75", "--json",
                   str(tmp_path / "plan.json")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "Cosmos-Predict2.5 14B 32x32, 5 frames (8 video + 512 text tokens x 2)" in out
    assert "text encoder: Qwen2.5-VL 26.34 GiB (float32)" in out and "the whole pipeline" in out
    assert "the paper's split for this row: dp=1 tp=4 sp=1 offload 1: peak" in out
    data = json.loads((tmp_path / "plan.json").read_text())
    resident, offloaded = data["estimates"]
    assert resident["split"] == {"dp": 1, "tp": 4, "sp": 1, "offload": None} and offloaded["split"]["offload"] == 1
    from vidax.core.planner import weight_bytes
    from vidax.models.cosmos_predict25.transformer import STACK, transformer_specs

    cfg = cp.ARCHITECTURES["14B"].transformer
    # Resident, the first device holds the blocks beside the text encoder: a quarter of each block (heads, MLP width
    # and the AdaLN-LoRA up-projections split over tp 4), the AdaLN-LoRA down-projections (3 x 5120 x 256, float32)
    # and the q/k norms (4 x 128, float32) whole.
    stack = weight_bytes(transformer_specs(cfg)[STACK], "bfloat16")
    whole = 36 * (3 * 5120 * 256 * 4 + 4 * 128 * 4)
    assert resident["phases"]["text encoder"] - offloaded["phases"]["text encoder"] == (stack - whole) // 4 + whole
    assert resident["phases"]["text encoder"] > cp.text_encoder_bytes(cp.ARCHITECTURES["14B"]) + stack // 4
    assert not resident["fits"] and offloaded["fits"]
    assert data["recommended"] == {"dp": 1, "tp": 4, "sp": 1, "offload": 1}


def test_generate_auto_split_runs_the_recommended_split(demo, tmp_path, capsys, monkeypatch):
    """`vidax generate --auto-split` on the demo folder: the planner's recommendation for every device of the run (8
    simulated) is the mesh the pipeline ran (the candidates cut to one split of the 8 devices, to keep it short)."""
    from vidax.cli import main

    seen = []

    def one(devices, batch, *widths):
        seen.append((devices, batch))
        return [(2, 2, 2)]

    monkeypatch.setattr(cp, "candidate_splits", one)
    rc = main(["generate", "--checkpoint", str(demo), "--prompt", "a cat", "--height", "16", "--width", "16",
               "--num-frames", "1", "--steps", "1", "--no-progress", "--auto-split", "--memory-gb", "2",
               "--out", str(tmp_path / "v.mp4"), "--metrics-json", str(tmp_path / "m.json")])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert seen == [(8, 2)]  # every device, the CFG batch of guidance 7.0
    line = next(line for line in out.out.splitlines() if line.startswith("auto split: "))
    assert line.startswith("auto split: dp=2 tp=2 sp=2 resident (planned peak ")
    assert json.loads((tmp_path / "m.json").read_text())["mesh"] == {"dp": 2, "tp": 2, "sp": 2}
