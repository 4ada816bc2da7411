"""The memory planner (vidax.core.planner, vidax.models.wan.planner, `vidax plan`, `generate --auto-split`).

Compilation on abstract shapes over the simulated CPU devices (tests/conftest.py); the accuracy
check runs one small step in a fresh process and compares XLA's estimate with the measured peak.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from vidax.core.planner import Estimate, Split, compiler_options, cost_key, recommend
from vidax.models.wan.config import WanTransformerConfig
from vidax.models.wan.planner import (candidate_splits, comm_bytes, default_chunks, estimate_split, plan_wan,
                                      preset_architecture)

CFG = WanTransformerConfig(
    num_attention_heads=4, attention_head_dim=16, in_channels=4, out_channels=4, text_dim=24, freq_dim=32,
    ffn_dim=96, num_layers=3, rope_max_seq_len=64,
)


def test_candidate_splits_cover_the_devices_and_respect_heads_and_batch():
    wan_14b = WanTransformerConfig()  # 40 heads, ffn 13824
    assert candidate_splits(wan_14b, 4, batch=2) == [(1, 1, 4), (1, 2, 2), (1, 4, 1), (2, 1, 2), (2, 2, 1)]
    wan_1_3b = WanTransformerConfig(num_attention_heads=12, ffn_dim=8960, num_layers=30)
    assert (1, 8, 1) not in candidate_splits(wan_1_3b, 8, batch=2)  # 8 does not divide 12 heads
    assert all(dp in (1, 2) for dp, _, _ in candidate_splits(wan_1_3b, 8, batch=2))  # dp divides the CFG batch


def test_default_chunks_halve_from_the_largest_divisor():
    assert default_chunks(40) == [20, 10, 5, 2, 1]
    assert default_chunks(30) == [15, 6, 3, 1]
    assert default_chunks(1) == [] and default_chunks(2) == [1]


def test_comm_model():
    cfg = WanTransformerConfig()  # dim 5120, 40 layers, 40 heads
    b, s = 2, 1000
    assert comm_bytes(cfg, b, s, np.float32, 2, 1, 1) == 0  # data parallelism moves nothing
    # tp: 3 float32 all-reduces of (B, S, D) per layer, ring traffic 2 (tp - 1) / tp.
    assert comm_bytes(cfg, b, s, np.float32, 1, 4, 1) == int(3 * 2 * 3 / 4 * b * s * 5120 * 4 * 40)
    # Ulysses: q, k, v, o of (B, S/sp, D) each (sp - 1) / sp; bf16 halves it.
    assert comm_bytes(cfg, b, s, "bfloat16", 1, 1, 4) == int(4 * 3 / 4 * b * 250 * 5120 * 2 * 40)


def test_ranking_prefers_resident_then_fewer_launches_then_less_communication():
    def est(dp, tp, sp, off, comm, launches=0, fits=True):
        return Estimate(Split(dp, tp, sp, off), peak_bytes=1, comm_bytes=comm, launches=launches, fits=fits)

    resident_tp = est(1, 4, 1, None, comm=100)
    resident_dp = est(2, 2, 1, None, comm=50, fits=False)
    off_20 = est(2, 2, 1, 20, comm=50, launches=2)
    off_10 = est(1, 4, 1, 10, comm=100, launches=4)
    candidates = [off_10, off_20, resident_dp, resident_tp]
    assert sorted(candidates, key=cost_key) == [resident_dp, resident_tp, off_20, off_10]
    assert recommend(candidates) is resident_tp  # the fastest does not fit
    resident_tp.fits = False
    assert recommend(candidates) is off_20
    for e in candidates:
        e.fits = False
    assert recommend(candidates) is None


@pytest.fixture(scope="module")
def tiny_plan():
    return plan_wan(CFG, height=32, width=32, num_frames=5, dtype="float32", devices=4, chunks=[1, 2],
                    splits=[(1, 2, 2), (2, 2, 1)])


def test_plan_reports_every_split_and_phase(tiny_plan):
    labels = {e.split for e in tiny_plan.estimates}
    assert labels == {Split(dp, 2, sp, off) for dp, sp in [(1, 2), (2, 1)] for off in (None, 1, 2)}
    for e in tiny_plan.estimates:
        assert e.error is None and e.peak_bytes == max(e.phases.values()) > 0
        if e.split.offload is None:
            assert set(e.phases) == {"step"} and e.launches == 0 and e.transfer_bytes == 0
        else:
            assert set(e.phases) == {"prologue", "chunks", "epilogue"}
            assert e.launches == -(-CFG.num_layers // e.split.offload)
            assert e.transfer_bytes > 0
    by = {e.split: e for e in tiny_plan.estimates}
    for dp, sp in [(1, 2), (2, 1)]:  # a larger chunk holds more layers on the device
        assert by[Split(dp, 2, sp, 1)].phases["chunks"] < by[Split(dp, 2, sp, 2)].phases["chunks"]
    # dp splits the CFG batch: half the activations per device and no communication.
    assert by[Split(2, 2, 1)].peak_bytes < by[Split(1, 2, 2)].peak_bytes
    assert by[Split(2, 2, 1)].comm_bytes < by[Split(1, 2, 2)].comm_bytes
    report = tiny_plan.report()
    assert "dp=1 tp=2 sp=2 offload 2" in report and "recommended: dp=2 tp=2 sp=1 resident" in report


def test_budget_moves_the_recommendation_to_offloading(tiny_plan):
    budget = min(e.peak_bytes for e in tiny_plan.estimates if e.split.offload is None) - 1
    for e in tiny_plan.estimates:
        e.fits = e.peak_bytes <= budget
    try:
        best = recommend(tiny_plan.estimates)
        assert best.split.offload is not None and best.peak_bytes <= budget  # no resident split fits
    finally:
        for e in tiny_plan.estimates:
            e.fits = None


def test_preset_architectures():
    from vidax.models.wan.config import PRESETS

    assert preset_architecture(PRESETS["wan2.1-t2v-14b-720p"]).num_layers == 40
    assert preset_architecture(PRESETS["wan2.1-t2v-1.3b-480p"]).num_attention_heads == 12
    with pytest.raises(ValueError, match="covers the Wan2.1 text-to-video step"):
        preset_architecture(PRESETS["wan2.1-i2v-14b-480p"])


def test_estimate_is_within_20_percent_of_the_measured_peak():
    """XLA's estimate for one step against the process's measured peak (VmHWM), in a fresh process.

    Method: vidax.models.wan.planner.measure_resident_peak (glibc large allocations as their own
    mappings, a warm-up run, the kernel's peak-RSS mark reset, a second run). Config: width 512,
    4 layers, 1024 tokens x 2 (CFG), float32: about 240 MiB of parameters, inputs and activations.
    """
    code = (
        "import json; from vidax.models.wan.config import WanTransformerConfig as C;"
        "from vidax.models.wan.planner import measure_resident_peak as m;"
        "print(json.dumps(m(C(num_attention_heads=8, attention_head_dim=64, ffn_dim=2048, num_layers=4, text_dim=512),"
        " (1, 16, 4, 32, 32), 'float32')))"
    )
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["measured"] > 100 * 2**20  # large enough for allocator noise not to matter
    assert abs(r["estimate"] / r["measured"] - 1) < 0.2, r


def test_cpu_compiles_keep_every_buffer_in_the_analysis():
    assert compiler_options("cpu") == {"xla_cpu_experimental_ynn_fusion_type": ""}
    assert compiler_options("tpu") is None


def test_cli_plan_prints_per_split_memory(tmp_path, capsys):
    from vidax.cli import main

    rc = main(["plan", "--preset", "wan2.1-t2v-1.3b-480p", "--height", "64", "--width", "64", "--num-frames", "5",
               "--devices", "4", "--chunks", "none", "--memory-gb", "16", "--json", str(tmp_path / "plan.json")])
    out = capsys.readouterr().out
    assert rc == 0, out
    for split in candidate_splits(preset_architecture(__import__("vidax.models.wan.config", fromlist=["PRESETS"])
                                                      .PRESETS["wan2.1-t2v-1.3b-480p"]), 4, 2):
        assert "dp={} tp={} sp={} resident".format(*split) in out
    assert "recommended: dp=" in out and "budget 16.00 GiB per device" in out
    data = json.loads((tmp_path / "plan.json").read_text())
    assert data["recommended"] is not None and len(data["estimates"]) == 5
    assert all(e["fits"] and e["peak_bytes"] > 0 for e in data["estimates"])
    # --json naming a folder is refused before planning, naming the flag
    assert main(["plan", "--preset", "wan2.1-t2v-1.3b-480p", "--json", str(tmp_path)]) == 2
    assert f"--json {tmp_path} is a folder; pass a file path inside it" in capsys.readouterr().err


@pytest.mark.parametrize("flags, message", [
    (["--chunks", "0"], "argument --chunks: must be comma-separated block counts from 1 to 1024"),
    (["--chunks", "abc"], "argument --chunks: must be comma-separated block counts"),
    (["--chunks", ","], "argument --chunks: must be comma-separated block counts"),
    (["--devices", "65536"], "argument --devices: must be at most 4096"),
    (["--height", "0"], "argument --height: must be a positive integer"),
    (["--num-frames", "-9"], "argument --num-frames: must be a positive integer"),
])
def test_cli_plan_refuses_bad_flags_in_one_line(flags, message, capsys):
    """Before any planning (a zero size was the preset's, a zero chunk a ZeroDivisionError, 65536 simulated devices
    exhausted the host's threads)."""
    from vidax.cli import main

    with pytest.raises(SystemExit) as exit_:  # (argparse's exit)
        main(["plan", "--preset", "wan2.1-t2v-1.3b-480p"] + flags)
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vidax: error: ") and message in lines[0], lines


@pytest.fixture(scope="module")
def demo_ckpt(tmp_path_factory):
    from vidax.models.wan.demo import write_demo_checkpoint

    return write_demo_checkpoint(tmp_path_factory.mktemp("wan") / "demo", seed=3,
                                 transformer_overrides={"num_attention_heads": 4})


def test_generate_auto_split_runs_the_recommended_split(demo_ckpt, tmp_path, capsys):
    from vidax.cli import main

    common = ["generate", "--checkpoint", str(demo_ckpt), "--prompt", "x", "--height", "32", "--width", "32",
              "--num-frames", "1", "--steps", "1", "--no-progress", "--auto-split"]
    rc = main(common + ["--out", str(tmp_path / "v.mp4"), "--metrics-json", str(tmp_path / "m.json"),
                        "--memory-gb", "1"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    line = next(l for l in out.out.splitlines() if l.startswith("auto split: "))
    metrics = json.loads((tmp_path / "m.json").read_text())
    mesh = metrics["mesh"]
    assert line.startswith(f"auto split: dp={mesh['dp']} tp={mesh['tp']} sp={mesh['sp']} resident")
    assert mesh["dp"] * mesh["tp"] * mesh["sp"] == 8  # every device of the run
    rc = main(common + ["--out", str(tmp_path / "w.mp4"), "--tp", "2"])
    assert rc == 2 and "pass either, not both" in capsys.readouterr().err


def test_generate_auto_split_fails_clearly_when_nothing_fits(demo_ckpt, tmp_path, capsys, monkeypatch):
    from vidax.cli import main
    from vidax.models.wan import planner

    def nothing_fits(cfg, **kw):
        e = Estimate(Split(1, 1, 8), peak_bytes=5 << 30, phases={"step": 5 << 30}, fits=False)
        return planner.WanPlan([e], None, kw["memory_bytes"], 0, "test", 0.0, dict(
            height=kw["height"], width=kw["width"], num_frames=kw["num_frames"], dtype="bfloat16", tokens=4, batch=2,
            attention="chunked"))

    monkeypatch.setattr(planner, "plan_wan", nothing_fits)
    rc = main(["generate", "--checkpoint", str(demo_ckpt), "--prompt", "x", "--height", "32", "--width", "32",
               "--num-frames", "1", "--auto-split", "--memory-gb", "1", "--out", str(tmp_path / "w.mp4")])
    err = capsys.readouterr().err
    assert rc == 2 and "no split fits the memory budget" in err and "the smallest peak is dp=1 tp=1 sp=8" in err


def test_estimate_split_rejects_nothing_it_can_compile():
    import jax

    est = estimate_split(CFG, 1, 1, 1, jax.devices()[:1], shape=(1, 4, 2, 4, 4), dtype="float32", chunks=[3])
    assert [e.split for e in est] == [Split(1, 1, 1), Split(1, 1, 1, 3)]
    assert est[1].launches == 1 and est[1].transfer_bytes > 0
