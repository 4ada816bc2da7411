"""The Cosmos3 memory planner (models/cosmos3/planner.py): the released weights by stream, compiled per-split estimates
of the und prefill and the gen step against a measured peak, every phase of the first device, the registry hook,
`vidax plan` for the Edge preset on 4 devices and `vidax generate --auto-split` on a demo folder.

Reference values: the parameter counts of diffusers' ``Cosmos3OmniTransformer`` built on PyTorch's meta device with
the releases' configurations (shapes only, nothing allocated; its ``lm_head`` and sound/action heads left out, as
video generation does not load them) and diffusers' ``AutoencoderKLWan`` with the Wan2.2 configuration; the estimate
against the process's measured peak (``VmHWM``) in a fresh process; the communication term and the cache derived by
hand.
"""

import json
import os
import subprocess
import sys

import pytest

from vidax.core.planner import Split, candidate_splits, default_chunks, recommend
from vidax.models.cosmos3 import planner as cp
from vidax.models.cosmos3.config import RELEASE_CONFIGS
from vidax.models.cosmos3.demo import write_demo_checkpoint
from vidax.models.cosmos3.presets import PRESETS

#: The estimate's stated tolerance against the measured peak (tests/test_planner.py's method).
TOLERANCE = 0.10
#: diffusers module names of the understanding stream in a layer (the rest of a layer is the generation stream's).
UND = ("input_layernorm.", "post_attention_layernorm.", "mlp.", "self_attn.to_q.", "self_attn.to_k.",
       "self_attn.to_v.", "self_attn.to_out.", "self_attn.norm_q.", "self_attn.norm_k.",
       "self_attn.k_norm_und_for_gen.")


def test_release_weights_match_the_reference_classes():
    """Nano and Edge as the planner counts them (both streams, per stream), against diffusers' modules; the Wan2.2
    VAE against ``AutoencoderKLWan``."""
    torch = pytest.importorskip("torch")
    import inspect

    from diffusers import AutoencoderKLWan, Cosmos3OmniTransformer

    from vidax.core import wan_vae

    accepted = set(inspect.signature(Cosmos3OmniTransformer.__init__).parameters)
    for name, key, lo, hi in (("nano", "Cosmos3-Nano", 14.5e9, 14.6e9), ("edge", "Cosmos3-Edge", 3.0e9, 3.1e9)):
        with torch.device("meta"):
            ref = Cosmos3OmniTransformer(**{k: v for k, v in RELEASE_CONFIGS[key].items() if k in accepted})
        video = {n: p.numel() for n, p in ref.named_parameters()
                 if not n.startswith(("lm_head.", "action_", "audio_"))}
        und = sum(v for n, v in video.items()
                  if n.startswith("embed_tokens.") or (n.startswith("layers.") and n.split(".", 2)[2].startswith(UND)))
        gen_layers = sum(v for n, v in video.items() if n.startswith("layers.")) - (und - video["embed_tokens.weight"])
        cfg = cp.ARCHITECTURES[name].transformer
        counts = cp.parameter_counts(cfg)
        assert counts["total"] == sum(video.values()) and lo < counts["total"] < hi, name
        assert (counts["und"], counts["gen"]) == (und, gen_layers), name
        assert counts["layers"] + counts["resident"] == counts["total"] == counts["und"] + counts["gen"] + (
            counts["resident"] - video["embed_tokens.weight"])
        # the time embedder is the one float32 pin: 256 -> hidden -> hidden with biases
        d = cfg.hidden_size
        assert counts["fp32"] == 256 * d + d + d * d + d
        assert cp.transformer_bytes(cfg, "bfloat16") == 2 * counts["total"] + 2 * counts["fp32"]
        assert cp.transformer_bytes(cfg, "float32") == 4 * counts["total"]
    v = cp.ARCHITECTURES["edge"].vae
    assert v == wan_vae.WAN22_VAE_ORIGINAL and (v.z_dim, v.spatial_compression, v.temporal_compression) == (48, 16, 4)
    with torch.device("meta"):
        ref_vae = AutoencoderKLWan(base_dim=160, decoder_base_dim=256, z_dim=48, dim_mult=[1, 2, 4, 4],
                                   num_res_blocks=2, temperal_downsample=[False, True, True], is_residual=True,
                                   in_channels=12, out_channels=12, patch_size=2)
    assert cp.vae_bytes(cp.ARCHITECTURES["edge"]) == 4 * sum(p.numel() for p in ref_vae.parameters())


def test_presets_sizes_splits_cache_and_communication():
    nano, edge = (cp.preset_architecture(PRESETS[n]) for n in ("cosmos3-nano-t2v", "cosmos3-edge-t2v"))
    assert (nano.transformer.num_hidden_layers, edge.transformer.num_hidden_layers) == (36, 28)
    with pytest.raises(ValueError, match="knows the presets"):
        cp.preset_architecture("cosmos-predict2.5-2b-t2v")
    assert cp.latent_shape(nano, 704, 1280, 93) == (1, 48, 24, 44, 80)
    assert cp.latent_shape(edge, 480, 832, 121) == (1, 48, 31, 30, 52)
    assert default_chunks(36) == [18, 9, 4, 2, 1] and default_chunks(28) == [14, 7, 2, 1]
    # tp divides the 8 key/value heads and the MLP width (Nano 12288, Edge 9216)
    assert candidate_splits(4, 2, 8, 12288) == [(1, 1, 4), (1, 2, 2), (1, 4, 1), (2, 1, 2), (2, 2, 1)]
    assert (2, 4, 1) in candidate_splits(8, 2, 8, 9216) and not any(tp == 16 for _, tp, _ in
                                                                    candidate_splits(16, 1, 8, 9216))
    # the und cache: keys and values, (layers, rows, L, kv heads, head_dim) in bf16: Nano, CFG, 512 tokens
    assert cp.cache_bytes(nano.transformer, 2, 512) == 2 * 36 * 2 * 512 * 8 * 128 * 2 == 150994944
    cfg = edge.transformer
    tokens = 31 * 15 * 26
    # tp 4: per layer two float32 all-reduces of the (2, N, 2048) gen stream; a ring sends 2 (tp - 1) / tp of each
    assert cp.comm_bytes(cfg, 2, tokens, "bfloat16", 1, 4, 1) == int(28 * 2 * 3 / 4 * 2 * 2 * tokens * 2048 * 4)
    # sp 2 (16 heads: Ulysses): 1/2 of the queries and output (16 x 128 wide) and of keys and values (8 x 128), bf16
    rows = -(-tokens // 2)
    q, kv = 2 * rows * 16 * 128 * 2, 2 * rows * 8 * 128 * 2
    assert cp.comm_bytes(cfg, 2, tokens, "bfloat16", 1, 1, 2) == int(28 * 1 / 2 * (2 * q + 2 * kv))
    assert cp.comm_bytes(cfg, 2, tokens, "bfloat16", 2, 1, 1) == 0


def test_estimate_is_within_its_tolerance_of_the_measured_peak():
    """The planner's compiled resident gen step (float32, CFG rows of 2, 4096 vision tokens in 4 latent frames, the
    und cache of 2 layers over 256 prompt tokens as an argument, width 256, 4 heads over 2 kv heads, the Edge
    variants) against the process's measured peak (vidax.core.planner.measure_peak: VmHWM in a fresh process): 192
    against 205 MiB when written (0.94)."""
    code = (
        "import json; from vidax.models.cosmos3.config import Cosmos3TransformerConfig as C;"
        "from vidax.models.cosmos3.planner import Cosmos3Model as M, measure_resident_peak as m;"
        "cfg = C(hidden_size=256, intermediate_size=1024, num_hidden_layers=2, num_attention_heads=4,"
        " num_key_value_heads=2, head_dim=64, vocab_size=512, rope_scaling={'mrope_section': [12, 10, 10]},"
        " hidden_act='relu2', qk_norm_for_text=False, use_und_k_norm_for_gen=True, rms_norm_eps=1e-5);"
        "print(json.dumps(m(M(cfg, prompt_tokens=256), (1, 48, 4, 32, 128), 'float32')))"
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
    """The Edge-style demo folder (4 heads of 16 over 2 kv heads, 2 layers, a tiny Wan2.2 VAE)."""
    return write_demo_checkpoint(tmp_path_factory.mktemp("cosmos3_plan") / "demo", edge=True)


@pytest.fixture(scope="module")
def tiny_plan(demo):
    """One split of 8 devices over all three axes, resident and offloaded in chunks of one layer."""
    model = cp.folder_architecture(demo)
    return model, cp.plan_cosmos3(model, height=32, width=48, num_frames=9, dtype="float32", devices=8,
                                  chunks=[1], splits=[(2, 2, 2)], model_name="tiny")


def test_folder_architecture_reads_the_configs(demo):
    model = cp.folder_architecture(demo)
    t = model.transformer
    assert (t.num_attention_heads, t.num_key_value_heads, t.num_hidden_layers, t.hidden_act) == (4, 2, 2, "relu2")
    assert model.vae.z_dim == 48 and model.vae.spatial_compression == 16 and model.folder == str(demo)
    assert model.prompt_tokens == cp.PROMPT_TOKENS == 512


def test_plan_counts_every_phase_of_every_split(tiny_plan):
    model, plan = tiny_plan
    assert [e.split for e in plan.estimates] == [Split(2, 2, 2), Split(2, 2, 2, 1)]
    vae = cp.vae_bytes(model)
    cfg = model.transformer
    cache = cp.cache_bytes(cfg, 2, 512, "float32")
    weights = cp.transformer_bytes(cfg, "float32")
    resident, offloaded = plan.estimates
    for e in plan.estimates:
        assert e.error is None and e.peak_bytes == max(e.phases.values()) > 0
        step = {"step"} if e.split.offload is None else {"prologue", "chunks", "epilogue"}
        assert set(e.phases) == step | {"prefill", "vae decode"}
        # every phase: the VAE's weights and the und cache's shard (dp 2 splits its rows, tp 2 its kv heads)
        assert all(v > vae + cache // 4 for v in e.phases.values())
        assert e.phases["vae decode"] > vae + cache // 4 + 3 * 9 * 32 * 48 * 4  # the decoded frames
        assert e.comm_bytes == cp.comm_bytes(cfg, 2, 3 * 1 * 2, "float32", 2, 2, 2) > 0
    # resident, the prefill and the step hold the whole transformer (the replicated embedding, the layers split
    # over tp 2 but the per-head norms), though each program reads one stream's weights
    for phase in ("prefill", "step"):
        assert resident.phases[phase] > vae + weights // 2 + cache // 4
    assert offloaded.launches == 2 and offloaded.transfer_bytes > 0  # 2 layers in chunks of 1
    stack = resident.phases["vae decode"] - offloaded.phases["vae decode"]
    assert 0 < stack <= 4 * cp.parameter_counts(cfg)["layers"]
    report = plan.report()
    assert "VAE: Wan2.2 weights" in report and "und cache: 0.5 MiB before the tensor split" in report
    assert "tiny 48x32, 9 frames (6 video + 512 text tokens x 2)" in report
    assert "recommended: dp=2 tp=2 sp=2 resident" in report and "the transformer's prefill and step" in plan.scope


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


def test_registry_hook_plans_guidance_as_the_cfg_rows(monkeypatch):
    from vidax.models.cosmos3.family import FAMILY

    seen = {}
    monkeypatch.setattr(cp, "plan_cosmos3", lambda model, **kw: seen.update(kw, model=model) or "plan")
    arch = cp.ARCHITECTURES["nano"]
    assert FAMILY.plan.plan(arch, height=704, width=1280, num_frames=93, guided=True, model="m",
                            call={"guidance_scale": 6.0}) == "plan"
    assert seen == dict(model=arch, height=704, width=1280, num_frames=93, guided=True, model_name="m")
    # the reference's test is guidance_scale != 1 (a scale under 1 still runs both rows)
    FAMILY.plan.plan(arch, height=704, width=1280, num_frames=93, guided=False, model="m",
                     call={"guidance_scale": 0.5})
    assert seen["guided"] is True
    FAMILY.plan.plan(arch, height=704, width=1280, num_frames=93, guided=False, model="m",
                     call={"guidance_scale": 1.0})
    assert seen["guided"] is False
    assert FAMILY.plan.architecture(PRESETS["cosmos3-edge-t2v"], None) is cp.ARCHITECTURES["edge"]


def test_cli_plans_the_edge_preset_on_4_devices(tmp_path, capsys):
    """`vidax plan --preset cosmos3-edge-t2v --devices 4`: the paper's row (the real Edge and Wan2.2 VAE, 832x480, 121
    frames, bf16, tp 4 resident): the first device holds a quarter of the layers beside the whole embedding table, the
    VAE and its share of the und cache; the VAE decode is its peak (8.50 GiB when written; the paper measured 17.0 GB
    per chip)."""
    from unittest import mock

    from vidax.cli import main

    with mock.patch.object(cp, "candidate_splits", lambda devices, batch, *widths: [(1, 4, 1)]):
        rc = main(["plan", "--preset", "cosmos3-edge-t2v", "--devices", "4", "--chunks", "none", "--memory-gb", "17",
                   "--json", str(tmp_path / "plan.json")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "Cosmos3 Edge (4B) 832x480, 121 frames (12090 video + 512 text tokens x 2)" in out
    assert "und cache: 112.0 MiB" in out and "the whole pipeline" in out  # 28 x 2 x 512 x 8 x 128 x 2 x 2 bytes
    assert "the paper's split for this row: dp=1 tp=4 sp=1 resident: peak" in out
    data = json.loads((tmp_path / "plan.json").read_text())
    (e,) = data["estimates"]
    assert e["split"] == {"dp": 1, "tp": 4, "sp": 1, "offload": None} and e["fits"]
    from vidax.core.planner import weight_bytes
    from vidax.models.cosmos3.transformer import STACK, transformer_specs

    cfg = cp.ARCHITECTURES["edge"].transformer
    specs = transformer_specs(cfg)
    stack = weight_bytes(specs[STACK], "bfloat16")
    rest = weight_bytes({k: v for k, v in specs.items() if k != STACK}, "bfloat16")
    floor = (stack // 4 + rest + cp.vae_bytes(cp.ARCHITECTURES["edge"]) + cp.cache_bytes(cfg, 2, 512) // 4)
    assert floor < e["phases"]["prefill"] < e["phases"]["step"] < floor + 2 * 2**30
    assert e["peak_bytes"] == e["phases"]["vae decode"] > floor + 2**30  # the decode's frames and cache
    assert data["recommended"] == {"dp": 1, "tp": 4, "sp": 1, "offload": None}


def test_nano_paper_row_fits_resident_at_tp4():
    """The Nano row (1280x704, 93 frames, bf16, tp 4, no offloading) as the paper ran it: the real Nano and Wan2.2 VAE
    resident at tp 4 fit the paper's measured 29.5 GB per chip (19.77 GiB when written: the VAE decode on the first
    device; the step 13.15 GiB, the prefill 10.57 GiB)."""
    plan = cp.plan_cosmos3(cp.preset_architecture("cosmos3-nano-t2v"), height=704, width=1280, num_frames=93,
                           dtype="bfloat16", devices=4, chunks=[], splits=[(1, 4, 1)], memory_bytes=int(29.5e9))
    (e,) = plan.estimates
    assert e.error is None and e.fits and plan.recommended is e
    assert e.peak_bytes == e.phases["vae decode"] > e.phases["step"] > e.phases["prefill"]
    assert plan.settings["tokens"] == 24 * 22 * 40 and plan.settings["batch"] == 2


def test_generate_auto_split_runs_the_recommended_split(demo, tmp_path, capsys, monkeypatch):
    """`vidax generate --auto-split` on the demo folder: the planner's recommendation for every device of the run (8
    simulated) is the mesh the pipeline loads on (the candidates cut to one split of the 8 devices, to keep it
    short)."""
    from vidax.cli import main

    seen = []

    def one(devices, batch, *widths):
        seen.append((devices, batch, widths))
        return [(2, 2, 2)]

    monkeypatch.setattr(cp, "candidate_splits", one)
    from vidax.models.cosmos3.pipeline import Cosmos3Pipeline

    loaded = []
    load = Cosmos3Pipeline.from_pretrained.__func__

    def from_pretrained(cls, folder, **kw):
        loaded.append({k: kw.get(k) for k in ("dp", "tp", "sp", "offload_chunk")})
        return load(cls, folder, **kw)

    monkeypatch.setattr(Cosmos3Pipeline, "from_pretrained", classmethod(from_pretrained))
    rc = main(["generate", "--checkpoint", str(demo), "--prompt", "a cat", "--height", "32", "--width", "32",
               "--num-frames", "1", "--steps", "1", "--no-progress", "--auto-split", "--memory-gb", "2",
               "--out", str(tmp_path / "v.mp4"), "--metrics-json", str(tmp_path / "m.json")])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert seen == [(8, 2, (2, 128))]  # every device, the CFG rows of guidance 6.0, tp over kv heads and MLP
    line = next(line for line in out.out.splitlines() if line.startswith("auto split: "))
    assert line.startswith("auto split: dp=2 tp=2 sp=2 resident (planned peak ")
    assert loaded == [{"dp": 2, "tp": 2, "sp": 2, "offload_chunk": None}]  # the pipeline loaded on that mesh
    assert (tmp_path / "v.mp4").stat().st_size > 0
