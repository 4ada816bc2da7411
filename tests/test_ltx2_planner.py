"""The LTX-2.5 memory planner (models/ltx2/planner.py): the 22B release's sizes against diffusers' classes built on
PyTorch's meta device (shapes only), and the plan at 1216x704, 121 frames on tp 4, resident and with offload chunk 8,
against figures derived by hand below (not the planner's own output)."""

import dataclasses
import math

import pytest

from vidax.models.ltx2 import planner as lp
from vidax.models.ltx2.transformer import transformer_specs

GiB = 1 << 30
D, DA, L = 4096, 2048, 48  # video / audio widths, blocks of the 22B transformer


def _transformer_by_hand(tp: int) -> tuple[int, int, int]:
    """``(bf16 bytes on one device at tp, of it the bytes of one block, total parameters)`` of the LTX-2.5 22B
    transformer (gated attention, 9-row cross-attention AdaLN, prompt AdaLN, keyframe embedding, text 4096 / 2048)."""
    sharded = replicated = fp32 = 0  # parameter counts: split over tp / replicated bf16 / replicated float32
    block_sharded = block_rep = 0
    # (query width, key/value width, heads, inner width) of the six attentions
    for q, kv, h, inner in ((D, D, 32, D), (DA, DA, 32, DA), (D, 4096, 32, D), (DA, 2048, 32, DA),
                            (D, DA, 32, DA), (DA, D, 32, DA)):
        block_sharded += q * inner + inner + 2 * (kv * inner + inner) + inner * q + q * h + h  # q k v out, gate
        block_rep += q  # to_out bias
    for w in (D, DA):  # FFNs 4x, with biases
        block_sharded += w * 4 * w + 4 * w + 4 * w * w
        block_rep += w
    sharded += L * block_sharded
    replicated += L * block_rep
    fp32_block_split = L * 2 * (2 * D + 4 * DA)  # q / k norm scales of 2 video-wide and 4 audio-wide attentions
    fp32_block_rep = L * (16 * D + 16 * DA)

    def adaln(w, rows):
        return 256 * w + w + w * w + w + w * rows * w + rows * w

    for w in (D, DA):
        replicated += 128 * w + w + w * 128 + 128  # proj_in, proj_out
        fp32 += adaln(w, 9) + adaln(w, 4) + adaln(w, 1) + adaln(w, 2) + 2 * w  # time, av ss, gate, prompt, table
    replicated += D  # keyframe embedding
    total = sharded + replicated + fp32 + fp32_block_split + fp32_block_rep
    per_device = (2 * sharded + 4 * fp32_block_split) // tp + 2 * replicated + 4 * (fp32 + fp32_block_rep)
    block = (2 * block_sharded + 4 * 2 * (2 * D + 4 * DA)) // tp + 2 * block_rep + 4 * 16 * (D + DA)
    return per_device, block, total


def test_release_sizes_match_diffusers():
    torch = pytest.importorskip("torch")
    from diffusers import LTX2VideoTransformer3DModel

    cfg = lp.LTX25_TRANSFORMER
    with torch.device("meta"):
        ref = LTX2VideoTransformer3DModel(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)})
    counts = lp.parameter_counts(lp.LTX2Model())
    n_ref = sum(p.numel() for p in ref.parameters())
    assert counts["transformer"] == n_ref == _transformer_by_hand(1)[2]
    assert 18.9e9 < n_ref < 19.1e9
    # the release file (transformer, connectors, the whole video VAE, audio VAE, vocoder) is the "22B"
    assert 20.5e9 < counts["transformer"] + counts["connectors"] < 20.8e9
    assert 11.8e9 < counts["text_encoder"] < 12.0e9  # Gemma 4 12B's text tower


def test_22b_plan_tp4_resident_and_offload_chunk8():
    model = lp.preset_architecture("ltx-2.5-22b-dev")
    with pytest.raises(ValueError, match="ltx-2.5-22b"):
        lp.preset_architecture("cosmos3-nano-t2v")
    grid, audio = lp.token_counts(model, 704, 1216, 121)
    assert grid == (16, 22, 38) and audio == 126  # (121-1)/8+1, 704/32, 1216/32; 121/24 s * 16000/160/4 = 126.04
    plan = lp.plan_ltx2(model, height=704, width=1216, num_frames=121, devices=4, splits=[(1, 4, 1)], chunks=[8],
                        memory_bytes=80 * GiB)
    resident, offload = plan.estimates
    weights, block, _ = _transformer_by_hand(4)
    assert 9.0 * GiB < weights < 10.5 * GiB  # 19B bf16 over 4 devices, the float32 tables replicated
    specs = transformer_specs(model.transformer)
    assert lp.per_device_bytes(specs, "bfloat16", {"tensor": 4}) == weights
    assert lp.per_device_bytes(specs, "bfloat16", {"tensor": 4}, prefix="blocks/") == L * block
    # activations of the CFG batch (2 rows) at tp 4: S = 13376 video, T = 126 audio tokens
    s, t = 13376, 126
    streams = 2 * 2 * (s * D + t * DA) * 4
    ropes = (s * (D + DA) + t * 2 * DA) * 4 // 4
    ffn = 2 * s * (4 * D // 4) * 6
    attn = 2 * s * 8 * 128 * 2 * 4 + 2 * 8 * 1024 * s * 4
    act = streams + ropes + max(ffn, attn)
    assert attn > ffn and 1.8 * GiB < act < 2.1 * GiB  # the scores of one query chunk dominate
    first = plan.settings["first_device_notes"]
    assert first[0][0] == "text encoder"
    always = resident.phases["step"] - weights - act
    assert 5 * GiB < always < 6 * GiB  # connectors (1.66B bf16), VAE decoder, audio VAE + vocoder float32
    assert resident.phases["step"] == weights + act + always
    # offload: the non-block weights plus two chunks of 8 blocks; 48 blocks copied per call in 6 launches
    rest = weights - L * block
    assert offload.phases["step"] == rest + 2 * 8 * block + act + always
    assert (offload.launches, offload.transfer_bytes) == (6, 48 * block)
    assert offload.peak_bytes < resident.peak_bytes
    # text encoder phase: Gemma 4 12B bf16 and its 49 float32 hidden states of 2 prompts x 1024 tokens x 3840
    states = 2 * 1024 * 3840 * 49 * 4
    gemma = resident.phases["text encoder"] - weights - always - states
    assert 2 * 11.8e9 < gemma < 2 * 12.0e9
    # the untiled video decode: float32 frames + 3 maps of 256 channels at (121, 176, 304) in the VAE's dtype (the
    # pipeline's float32)
    decode = 121 * 704 * 1216 * 3 * 4 + 3 * 121 * 176 * 304 * 256 * 4
    assert resident.phases["vae decode"] == weights + always + decode
    assert resident.peak_bytes == max(resident.phases.values()) == resident.phases["text encoder"]
    assert plan.recommended is resident and resident.fits
    report = plan.report()
    assert "estimated analytically" in report and "memory_analysis" not in report
    # by default the chunks tried include the paper rows' 8 beside the halvings of the 48 blocks
    default = lp.plan_ltx2(model, height=704, width=1216, num_frames=121, devices=4, splits=[(1, 4, 1)],
                           memory_bytes=80 * GiB)
    assert sorted({e.split.offload for e in default.estimates} - {None}) == [1, 3, 6, 8, 12, 24]


def test_sequence_padding_in_the_activation_model():
    cfg = lp.LTX25_TRANSFORMER
    a = lp.step_activation_bytes(cfg, 2, 13376, 126, "bfloat16", 1, 1, 4)  # audio 126 pads to 128 over sp 4
    assert a["streams"] == 2 * 2 * (13376 // 4 * D + 32 * DA) * 4
    assert math.isclose(lp.comm_bytes(cfg, 2, 13376, 126, "bfloat16", 2, 1, 1), 0)


# -- the diffusion VAE decoder's phase ----------------------------------------------------------------------------


def _diffusion_decode_by_hand(latent_grid, weight_bytes: int) -> int:
    """The module docstring's closed form written out for the release decoder (stage-5 width 256, patch 4, 3 output
    channels, strides (1,2,2) (2,1,1) (2,2,2) (2,2,2), 2 ghost latent frames cropped after): bytes of one device's
    diffusion decode without its weights."""
    t, h, w = latent_grid
    f5, h5, w5 = 8 * (t - 1) + 1, 8 * h, 8 * w  # (t + 2) -> x2 -1 -> x2 -1 -> x2 -1, cropped to 8 (t - 1) + 1
    n = f5 * h5 * w5
    context = n * 256 * 4
    canvas = 2 * n * 3 * 16 * 4
    block = n * 256 * (5 * 4 + 4 * weight_bytes)
    return context + canvas + block + 3 * (1 << 27) * 4


def test_diffusion_decoder_phase_at_the_paper_size():
    """The diffusion-decoder presets' decode: the release decoder's weights (counted against diffusers' class on
    the meta device) and its stage-5 step at 1216x704, 121 frames, in place of the VAE decode."""
    torch = pytest.importorskip("torch")
    from diffusers import LTX2VideoDiffusionDecoderModel

    from vidax.models.ltx2.diffusion_decoder import diffusion_decoder_specs

    model = lp.preset_architecture("ltx-2.5-22b-dev-diffusion-decoder")
    with torch.device("meta"):
        ref = LTX2VideoDiffusionDecoderModel()
    n_ref = sum(p.numel() for p in ref.parameters()) + sum(b.numel() for b in ref.buffers())
    assert lp.per_device_bytes(diffusion_decoder_specs(model.diffusion_decoder), "float32") == 4 * n_ref
    dd = lp.diffusion_decode_bytes(model.diffusion_decoder, (16, 22, 38), "float32")
    assert dd["weights"] == 4 * n_ref
    assert dd["total"] - dd["weights"] == _diffusion_decode_by_hand((16, 22, 38), 4)
    assert 60 * GiB < dd["total"] < 70 * GiB  # 9 float32-sized maps of 121 x 176 x 304 x 256

    conv = lp.plan_ltx2(model, devices=4, splits=[(1, 4, 1)], chunks=[8], memory_bytes=80 * GiB)
    plan = lp.plan_ltx2(model, devices=4, splits=[(1, 4, 1)], chunks=[8], memory_bytes=80 * GiB, decoder="diffusion")
    for c, e in zip(conv.estimates, plan.estimates):
        assert "vae decode" not in e.phases and e.peak_bytes == e.phases["diffusion decode"]
        # the transformer's weights and the rest of the pipeline as in the VAE decode's phase, the decoder instead
        vae_decode = 121 * 704 * 1216 * 3 * 4 + 3 * 121 * 176 * 304 * 256 * 4
        assert e.phases["diffusion decode"] - dd["total"] == c.phases["vae decode"] - vae_decode
        assert {k: v for k, v in e.phases.items() if k != "diffusion decode"} == \
            {k: v for k, v in c.phases.items() if k != "vae decode"}
    resident, offload = plan.estimates
    assert not resident.fits and offload.fits  # float32 decoders on 80 GiB: only with the paper rows' offload
    bf16 = lp.plan_ltx2(model, devices=4, splits=[(1, 4, 1)], chunks=[], memory_bytes=80 * GiB, decoder="diffusion",
                        vae_dtype="bfloat16")
    assert bf16.estimates[0].fits
    assert "diffusion decode" in plan.report()
    tight = lp.plan_ltx2(model, devices=4, splits=[(1, 4, 1)], chunks=[8], memory_bytes=40 * GiB, decoder="diffusion")
    assert tight.recommended is None and "--decoder conv" in tight.report()
    # the registry's hook takes the decoder from the preset's settings
    from vidax.models import registry

    fam, preset = registry.preset("ltx-2.5-22b-distilled-diffusion-decoder")
    hooked = fam.plan.plan(fam.plan.architecture(preset, None), height=704, width=1216, num_frames=121,
                           dtype="bfloat16", devices=4, splits=[(1, 4, 1)], chunks=[], call=preset.settings())
    assert "diffusion decode" in hooked.estimates[0].phases and hooked.settings["batch"] == 1
    with pytest.raises(ValueError, match="no diffusion decoder"):
        lp.plan_ltx2(dataclasses.replace(model, diffusion_decoder=None), devices=1, decoder="diffusion")
    with pytest.raises(ValueError, match="decoder must be"):
        lp.plan_ltx2(model, devices=1, decoder="tiled")
    with pytest.raises(ValueError, match="beyond what the pipeline generates"):
        lp.plan_ltx2(model, height=4096, width=704, devices=1)  # (vidax generate's bounds: 2048, 481 frames)


@pytest.mark.parametrize("latent_grid,dtype", [((3, 7, 7), "bfloat16"), ((6, 16, 16), "float32")])
def test_diffusion_decode_closed_form_bounds_xla(latent_grid, dtype):
    """The closed form against XLA's buffer assignment of the release decoder's two programs (abstract weights, no
    execution): stage 5's arguments (without weights), temporaries and output at least what XLA assigns and at most
    1.3 times it; stages 1-4 (the context program) below it."""
    import jax
    import jax.numpy as jnp

    from vidax.core.params import abstract_params
    from vidax.models.ltx2 import diffusion_decoder as ddm

    cfg = ddm._architecture(ddm.LTX2DiffusionDecoderConfig())
    params = abstract_params(ddm.diffusion_decoder_specs(cfg), jnp.dtype(dtype))
    est = lp.diffusion_decode_bytes(cfg, latent_grid, dtype)
    closed = est["total"] - est["weights"]
    assert closed == _diffusion_decode_by_hand(latent_grid, jnp.dtype(dtype).itemsize)  # (at the size floor or above)
    z = jax.ShapeDtypeStruct((1, 128, *latent_grid), jnp.float32)
    ctx = ddm._context_program.lower(params, cfg, z).compile().memory_analysis()
    _, q, f5, hp, wp = ddm.canvas_shape(cfg, z.shape)
    context = jax.ShapeDtypeStruct((1, f5, hp // 4, wp // 4, 256), jnp.float32)
    x_t = jax.ShapeDtypeStruct((1, q, f5, hp, wp), jnp.float32)
    step = ddm._forward_program.lower(params, cfg, context, x_t, jax.ShapeDtypeStruct((1,), jnp.float32))
    fwd = step.compile().memory_analysis()
    xla_step = fwd.temp_size_in_bytes + fwd.output_size_in_bytes + 4 * (math.prod(context.shape) + math.prod(x_t.shape))
    print(f"closed form {closed / GiB:.3f} GiB, XLA {xla_step / GiB:.3f} GiB")
    assert xla_step <= closed <= 1.3 * xla_step, (xla_step / GiB, closed / GiB)
    assert ctx.temp_size_in_bytes + ctx.output_size_in_bytes < xla_step
