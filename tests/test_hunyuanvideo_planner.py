"""The HunyuanVideo memory planner (models/hunyuanvideo/planner.py): the 13B's weights by dtype, the text encoders,
the VAE decode's tiles, compiled per-split estimates, `vidax plan` for the family's presets.

Reference values are hand-derived from the released architectures (diffusers ``HunyuanVideoTransformer3DModel``,
transformers ``LlamaModel`` / ``CLIPTextModel`` / ``CLIPVisionModel`` module shapes), independently of our spec trees;
the tiling is checked against the VAE's own decode (its decoder calls recorded).
"""

import json

import jax.numpy as jnp
import pytest

from vidax.core.planner import Split, recommend
from vidax.models.hunyuanvideo import planner as hp
from vidax.models.hunyuanvideo import vae as hvae
from vidax.models.hunyuanvideo.config import HunyuanVideoTransformerConfig
from vidax.models.hunyuanvideo.demo import write_demo_checkpoint
from vidax.models.hunyuanvideo.presets import PRESETS


def _lin(n_in, n_out):  # a linear layer with bias
    return n_in * n_out + n_out


def _13b_parameters():
    """``(total, AdaLN)`` of the released transformer from its module shapes (width 3072 = 24 x 128, MLP 12288)."""
    d, hd, m = 3072, 128, 12288

    def embedder(n_in):  # TimestepEmbedding / PixArtAlphaTextProjection: n_in -> d -> d
        return _lin(n_in, d) + _lin(d, d)

    adaln_double, adaln_single = 2 * _lin(d, 6 * d), _lin(d, 3 * d)
    double = 8 * _lin(d, d) + 4 * hd + 2 * (_lin(d, m) + _lin(m, d)) + adaln_double  # q k v, added q k v, two outs
    single = 3 * _lin(d, d) + 2 * hd + _lin(d, m) + _lin(d + m, d) + adaln_single
    refiner = 2 * d + 4 * _lin(d, d) + 2 * d + _lin(d, 4 * d) + _lin(4 * d, d) + _lin(d, 2 * d)
    rest = (2 * 2 * 16 * d + d  # x_embedder: 1 x 2 x 2 patches of 16 channels
            + embedder(256) + embedder(4096) + _lin(4096, d) + 2 * refiner  # context_embedder (token refiner)
            + 2 * embedder(256) + embedder(768)  # timestep, guidance, pooled CLIP
            + 2 * _lin(d, d) + _lin(d, 64))  # norm_out, proj_out (16 channels x 2 x 2)
    return 20 * double + 40 * single + rest, 20 * adaln_double + 40 * adaln_single


def test_13b_weights_by_dtype_keep_the_adaln_tables_in_float32():
    cfg = hp.ARCHITECTURES["HunyuanVideo"].transformer
    counts = hp.parameter_counts(cfg)
    total, adaln = _13b_parameters()
    assert (counts["total"], counts["adaln"]) == (total, adaln) == (12_821_012_544, 3_398_492_160)
    assert counts["double"] + counts["single"] + counts["resident"] == total
    assert adaln <= counts["fp32"] < adaln + counts["resident"] + 10**6  # AdaLN, embedders, norm scales
    from vidax.models.hunyuanvideo.transformer import transformer_specs

    bf16 = hp.weight_bytes(transformer_specs(cfg), "bfloat16")
    assert bf16 == 2 * (total - counts["fp32"]) + 4 * counts["fp32"]
    assert 32.6e9 < bf16 < 32.8e9 and hp.weight_bytes(transformer_specs(cfg), "float32") == 4 * total


def test_text_encoder_weights():
    """Llama-3-8B's text tower (no LM head; vocabulary 128320), CLIP-L's text tower; LLaVA adds CLIP-L/336's vision
    tower (303.5 million, with its post-layernorm) and the two-layer projector."""
    d, kv, f = 4096, 1024, 14336
    llama = 128320 * d + 32 * (2 * d + 2 * d * d + 2 * d * kv + 3 * d * f) + d
    norms = 65 * d
    clip = 49408 * 768 + 77 * 768 + 12 * (4 * _lin(768, 768) + 4 * 768 + _lin(768, 3072) + _lin(3072, 768)) + 2 * 768
    assert (llama, clip) == (7_505_186_816, 123_060_480)  # Llama-3-8B: 8_030_261_248 with 128256 and its LM head
    t2v = hp.ARCHITECTURES["HunyuanVideo"]
    assert hp.text_encoder_bytes(t2v) == {"text_encoder": 4 * llama, "text_encoder_2": 4 * clip}
    assert hp.text_encoder_bytes(t2v, "bfloat16")["text_encoder"] == 2 * (llama - norms) + 4 * norms
    v = 1024
    layer = 4 * _lin(v, v) + 4 * v + _lin(v, 4096) + _lin(4096, v)
    vision = v + 14 * 14 * 3 * v + 577 * v + 2 * v + 24 * layer + 2 * v  # class, patches, positions, norms
    assert vision == 303_507_456
    i2v = hp.text_encoder_bytes(hp.ARCHITECTURES["HunyuanVideo-I2V"])["text_encoder"]
    assert i2v == 4 * (llama + vision + _lin(v, d) + _lin(d, d))


def test_splits_chunks_and_token_counts_of_the_release():
    cfg = hp.ARCHITECTURES["HunyuanVideo"].transformer
    assert hp.default_chunks(cfg) == [20, 10, 5, 2, 1]  # 20: the paper's "20/40"
    assert hp.candidate_splits(cfg, 8, 1) == [(1, 1, 8), (1, 2, 4), (1, 4, 2), (1, 8, 1)]
    assert (2, 4, 1) in hp.candidate_splits(cfg, 8, 2) and (1, 3, 1) in hp.candidate_splits(cfg, 3, 1)
    assert hp.latent_shape(cfg, 720, 1280, 129) == (1, 16, 33, 90, 160)
    assert hp.ARCHITECTURES["HunyuanVideo"].text_tokens == 256
    i2v = hp.ARCHITECTURES["HunyuanVideo-I2V"]
    assert i2v.transformer.in_channels == 33 and i2v.text_tokens == 540  # 288 image + 252 text positions
    replace = hp.HunyuanVideoModel(HunyuanVideoTransformerConfig(image_condition_type="token_replace"),
                                   text_encoder=hp.LLAVA_LLAMA_3_8B)
    assert replace.text_tokens == 396
    assert hp.preset_architecture(PRESETS["hunyuanvideo-i2v-720p"]) is i2v
    # Tensor parallelism all-reduces the joint rows twice per dual-stream block, once per single-stream block.
    one = 2 * 1 / 2 * 1 * (16 + 16) * cfg.dim * 4  # ring all-reduce of float32 (B, video + text rows, dim)
    assert hp.comm_bytes(cfg, 1, 16, 16, "bfloat16", 1, 2, 1) == int(20 * 2 * one + 40 * one)


@pytest.mark.parametrize("latents, tiling", [
    ((1, 16, 9, 8, 8), None),  # 9 latent frames: frame tiles of 5 at 0, 3, 6
    ((1, 16, 7, 8, 8), None),  # the tile at 6 would decode one frame: skipped
    ((1, 16, 3, 40, 48), None),  # 3 latent frames: one call at the full size
    ((1, 16, 9, 40, 48), True),  # enable_tiling(): 32-latent tiles every 24, 2 x 2 per frame tile
], ids=["frame-tiles", "frame-tiles-skip", "one-call", "spatial"])
def test_decode_tiles_are_the_vae_decodes(monkeypatch, latents, tiling):
    """:func:`vae_decode_tiles` against the VAE's decode with its decoder call recorded (zeros returned)."""
    cfg = hvae.HunyuanVideoVAEConfig()
    calls = []

    def record(params, cfg, z):
        calls.append(z.shape[2:])
        t, h, w = z.shape[2:]
        return jnp.zeros((z.shape[0], 3, hvae.decoded_frames(cfg, t), 8 * h, 8 * w), jnp.float32)

    monkeypatch.setattr(hvae, "decode_tile", record)
    hvae.decode({}, cfg, jnp.zeros(latents, jnp.float32), tiling=hvae.VAETiling() if tiling else None)
    tiles = hp.vae_decode_tiles(cfg, latents, tiling)
    assert len(calls) == tiles["frame_tiles"] * tiles["spatial_tiles"]
    assert max(calls) == tiles["tile"] and calls[0] == tiles["tile"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The demo folder's model (4 heads, 3 + 5 blocks, tiny text encoders and VAE), read from its configs."""
    folder = write_demo_checkpoint(tmp_path_factory.mktemp("hv_plan") / "t2v",
                                   transformer_overrides=dict(num_attention_heads=4, num_layers=3, num_single_layers=5))
    return hp.folder_architecture(folder)


@pytest.fixture(scope="module")
def tiny_plan(tiny):
    return hp.plan_hunyuanvideo(tiny, height=64, width=64, num_frames=9, dtype="float32", devices=4, chunks=[2],
                                splits=[(1, 2, 2), (2, 2, 1)], true_cfg=True, model_name="tiny")


def test_folder_architecture_reads_the_configs(tiny, tmp_path):
    assert (tiny.transformer.num_attention_heads, tiny.transformer.num_single_layers) == (4, 5)
    assert tiny.text_encoder.hidden_size == tiny.text_encoder_2.hidden_size == 32 and tiny.text_tokens == 256
    assert tiny.vae.block_out_channels == (8, 8, 16, 16)
    i2v = hp.folder_architecture(write_demo_checkpoint(tmp_path / "i2v", task="i2v"))
    assert i2v.text_encoder.vision.image_size == 28 and i2v.text_tokens == -(-16 // 2) + 256 - 4


def test_plan_counts_every_phase_of_every_split(tiny, tiny_plan):
    assert {e.split for e in tiny_plan.estimates} == {Split(dp, 2, sp, off) for dp, sp in [(1, 2), (2, 1)]
                                                      for off in (None, 2)}
    text = sum(hp.text_encoder_bytes(tiny).values())
    vae = hp.vae_bytes(tiny.vae)
    by = {e.split: e for e in tiny_plan.estimates}
    for e in tiny_plan.estimates:
        assert e.error is None and e.peak_bytes == max(e.phases.values()) > 0
        step = {"step"} if e.split.offload is None else {"prologue", "chunks", "epilogue"}
        assert set(e.phases) == step | {"text encoder", "vae decode"}
        assert e.phases["text encoder"] > text + vae and all(v > vae for v in e.phases.values())
        if e.split.offload is not None:
            assert e.launches == 2 + 3 and e.transfer_bytes > 0  # 3 and 5 blocks in chunks of 2
            resident = by[Split(e.split.dp, 2, e.split.sp)]
            # Offloading leaves only the parameters outside the stacks beside the text encoders.
            stacks = resident.phases["text encoder"] - e.phases["text encoder"]
            assert 0 < stacks <= 4 * (hp.parameter_counts(tiny.transformer)["double"] +
                                      hp.parameter_counts(tiny.transformer)["single"])
    # dp splits true CFG's batch of 2: nothing sent between the halves.
    assert by[Split(2, 2, 1)].comm_bytes < by[Split(1, 2, 2)].comm_bytes
    report = tiny_plan.report()
    assert "text encoders: Llama" in report and "(float32) + CLIP" in report and "VAE: weights" in report
    assert "dp=1 tp=2 sp=2 offload 2" in report and "recommended: dp=2 tp=2 sp=1 resident" in report


def test_budget_moves_the_recommendation_to_offloading(tiny_plan):
    budget = min(e.peak_bytes for e in tiny_plan.estimates if e.split.offload is None) - 1
    for e in tiny_plan.estimates:
        e.fits = e.peak_bytes <= budget
    try:
        best = recommend(tiny_plan.estimates)
        assert best.split.offload == 2 and best.peak_bytes <= budget
    finally:
        for e in tiny_plan.estimates:
            e.fits = None


def test_bfloat16_steps_compile_on_cpu_without_hoisted_float32_weights():
    """The 13B itself: tests/test_hunyuanvideo_planner.py::test_cli_plans_the_13b_preset (step < 1.3 x weights)."""
    assert hp.step_compiler_options("cpu", "bfloat16") == {"xla_cpu_experimental_ynn_fusion_type": "",
                                                           "xla_disable_hlo_passes": "while-loop-invariant-code-motion"}
    assert "xla_disable_hlo_passes" not in hp.step_compiler_options("cpu", "float32")
    assert hp.step_compiler_options("gpu", "bfloat16") is None


def test_registry_hook_plans_embedded_guidance_as_one_evaluation(monkeypatch):
    from vidax.models.hunyuanvideo.family import FAMILY

    seen = {}
    monkeypatch.setattr(hp, "plan_hunyuanvideo", lambda model, **kw: seen.update(kw, model=model) or "plan")
    assert FAMILY.plan.plan("arch", height=720, width=1280, num_frames=129, guided=True, model="HunyuanVideo") == "plan"
    assert seen == dict(model="arch", height=720, width=1280, num_frames=129, model_name="HunyuanVideo",
                        true_cfg=False, vae_tiling=None)
    # true CFG and the VAE's tiling come from the run's settings (a preset's, or the generate call's)
    seen.clear()
    call = dict(negative_prompt="blurry", true_cfg_scale=3.0, vae_tiling=True)
    FAMILY.plan.plan("arch", height=720, width=1280, num_frames=129, guided=False, model="HunyuanVideo", call=call)
    assert (seen["true_cfg"], seen["vae_tiling"]) == (True, True)
    assert PRESETS["hunyuanvideo-t2v-720p"].settings()["vae_tiling"] is True
    assert FAMILY.plan.architecture(PRESETS["hunyuanvideo-t2v-720p"], None) is hp.ARCHITECTURES["HunyuanVideo"]


def test_cli_plans_the_13b_preset(tmp_path, capsys):
    """The real 13B step on 2 devices at a tiny size (bfloat16, chunk 20): every figure at least the weights it
    holds."""
    from vidax.cli import main

    rc = main(["plan", "--preset", "hunyuanvideo-t2v-720p", "--height", "64", "--width", "64", "--num-frames", "5",
               "--devices", "2", "--chunks", "20", "--memory-gb", "141", "--json", str(tmp_path / "plan.json")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "text encoders: Llama 27.96 GiB (float32)" in out and "the whole pipeline" in out
    assert "--devices 4 plans that" in out
    data = json.loads((tmp_path / "plan.json").read_text())
    est = {(e["split"]["tp"], e["split"]["offload"]): e for e in data["estimates"]}
    assert set(est) == {(1, None), (2, None), (1, 20), (2, 20)} and all(e["error"] is None for e in est.values())
    weights = 2 * (12_821_012_544 - 3_519_896_576) + 4 * 3_519_896_576  # bfloat16, float32 pins
    assert weights <= est[(1, None)]["phases"]["step"] < 1.3 * weights  # no float32 copy of the weights
    assert weights / 2 < est[(2, None)]["phases"]["step"] < est[(1, None)]["phases"]["step"]
    for e in est.values():
        assert e["phases"]["text encoder"] > 4 * 7_505_186_816  # the float32 Llama beside the transformer
        assert e["fits"] is (e["peak_bytes"] <= 141 << 30)
    assert est[(2, 20)]["peak_bytes"] < est[(2, None)]["peak_bytes"]
    assert data["recommended"] is not None
