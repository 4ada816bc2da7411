"""Parity of the LTX-2.5 pipeline with diffusers' LTX2Pipeline (text-to-video) and LTX2ImageToVideoPipeline
(first frame) on a tiny model written by the reference classes (save_pretrained) and loaded through our loader,
fp32 on CPU: 4 dev steps with CFG + STG + modality isolation + guidance rescale for video and audio, frames within
2/255 and audio within 1e-4. The distilled path against upstream Lightricks/LTX-2's sampler (stage 1 of
``ltx_pipelines/distilled.py``: ``euler_ancestral_denoising_loop`` with ``EulerAncestralDiffusionStep(eta=1)``,
restated below with its per-step noise given explicitly). The dev schedule against diffusers'
FlowMatchEulerDiscreteScheduler; size errors."""

import numpy as np
import pytest
import torch
from diffusers import (AutoencoderKLLTX2Audio, AutoencoderKLLTX2Video, FlowMatchEulerDiscreteScheduler,
                       LTX2ImageToVideoPipeline, LTX2Pipeline, LTX2VideoTransformer3DModel)
from diffusers.pipelines.ltx2.connectors import LTX2TextConnectors
from diffusers.pipelines.ltx2.pipeline_ltx2 import calculate_shift
from diffusers.pipelines.ltx2.vocoder import LTX2VocoderWithBWE
from PIL import Image
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import Gemma4UnifiedConfig, Gemma4UnifiedForConditionalGeneration, PreTrainedTokenizerFast

from vidax.models.ltx2 import schedule as sched
from vidax.models.ltx2.loading import load_component
from vidax.models.ltx2.pipeline import LTX2Pipeline as OurPipeline

WORDS = "a red fox jumps over the lazy dog in snow at night while bells ring blurry dark".split()
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]
PROMPT, NEGATIVE = "a red fox jumps over the lazy dog", "blurry dark"
L = 8  # max_sequence_length (a multiple of the connectors' 4 registers)
H = W = 64
FRAMES, FPS = 9, 24.0  # 2 latent frames of 2 x 2 tokens; round(9 / 24 * 25) = 9 audio latent frames
SCHEDULER = dict(use_dynamic_shifting=True, base_shift=0.95, max_shift=2.05, base_image_seq_len=1024,
                 max_image_seq_len=4096, shift_terminal=0.1, time_shift_type="exponential")
GEMMA = dict(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, head_dim=8, global_head_dim=16, num_global_key_value_heads=1, sliding_window=4,
             layer_types=["sliding_attention", "sliding_attention", "full_attention"], attention_k_eq_v=True,
             rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                              "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                 "rope_theta": 1e6}})
CONNECTORS = dict(caption_channels=32, text_proj_in_factor=4, video_connector_num_layers=1,
                  audio_connector_num_layers=1, video_connector_num_learnable_registers=4,
                  audio_connector_num_learnable_registers=4, connector_rope_base_seq_len=L,
                  per_modality_projections=True, video_hidden_dim=16, audio_hidden_dim=16, proj_bias=True,
                  video_connector_num_attention_heads=2, video_connector_attention_head_dim=8,
                  audio_connector_num_attention_heads=2, audio_connector_attention_head_dim=8, rope_type="split",
                  video_gated_attn=True, audio_gated_attn=True)
TRANSFORMER = dict(in_channels=8, out_channels=8, num_attention_heads=2, attention_head_dim=8, cross_attention_dim=16,
                   audio_in_channels=16, audio_out_channels=16, audio_num_attention_heads=2,
                   audio_attention_head_dim=8, audio_cross_attention_dim=16, num_layers=2, caption_channels=32,
                   base_height=64, base_width=64, gated_attn=True, audio_gated_attn=True, cross_attn_mod=True,
                   audio_cross_attn_mod=True, rope_type="split", ff_bias=False, use_prompt_embeddings=False,
                   use_prompt_adaln_single=True, perturbed_attn=True)
VAE = dict(block_out_channels=(8, 16, 32, 64), layers_per_block=(1, 1, 1, 1, 1), latent_channels=8,
           decoder_block_out_channels=(16, 32, 64), decoder_layers_per_block=(2, 1, 2, 1),
           decoder_spatio_temporal_scaling=(True, True, True), upsample_residual=(True, True, True),
           upsample_factor=(2, 2, 2), timestep_conditioning=False, decoder_causal=False,
           decoder_spatial_padding_mode="reflect", spatial_compression_ratio=32, temporal_compression_ratio=8)
AUDIO_VAE = dict(base_channels=16, ch_mult=(1, 2, 4), num_res_blocks=1, latent_channels=8, mel_bins=8)
VOCODER = dict(in_channels=16, hidden_channels=32, upsample_kernel_sizes=[7, 3], upsample_factors=[3, 1],
               resnet_kernel_sizes=[3], resnet_dilations=[[1, 2]], bwe_in_channels=16, bwe_hidden_channels=16,
               bwe_upsample_kernel_sizes=[7, 4], bwe_upsample_factors=[3, 2], bwe_resnet_kernel_sizes=[3],
               bwe_resnet_dilations=[[1, 3]], filter_length=8, hop_length=2, window_length=8, num_mel_channels=8,
               input_sampling_rate=100, output_sampling_rate=300)
GUIDANCE = dict(guidance_scale=3.0, stg_scale=1.0, modality_scale=3.0, guidance_rescale=0.7,
                audio_guidance_scale=7.0, audio_stg_scale=1.0, audio_modality_scale=3.0, audio_guidance_rescale=0.7,
                spatio_temporal_guidance_blocks=[1])
# image-to-video: CFG and rescale only (the STG and modality passes are checked with text-to-video; two
# transformer programs fewer to compile)
I2V_GUIDANCE = dict(GUIDANCE, stg_scale=0.0, audio_stg_scale=0.0, modality_scale=1.0, audio_modality_scale=1.0)


def _tokenizer(folder):
    vocab = {t: i for i, t in enumerate(SPECIALS + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                 unk_token="<unk>")
    hf.save_pretrained(folder)
    return PreTrainedTokenizerFast.from_pretrained(folder)


def _perturb(module, keys, scale=0.3):
    with torch.no_grad():  # norm scales start at one, gates / statistics at zero: perturb them so a slip shows
        for name, p in module.state_dict().items():
            if any(k in name for k in keys):
                if name.endswith("latents_std"):
                    p.copy_(torch.rand_like(p) + 0.5)
                else:
                    p.add_(scale * torch.randn_like(p))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("ltx2_pipeline")
    tokenizer = _tokenizer(root / "_tok")
    text_encoder = Gemma4UnifiedForConditionalGeneration(Gemma4UnifiedConfig(text_config=GEMMA)).eval()
    _perturb(text_encoder, ("norm",), 0.2)
    connectors = LTX2TextConnectors(**CONNECTORS).eval()
    _perturb(connectors, ("norm", "gate"))
    transformer = LTX2VideoTransformer3DModel(**TRANSFORMER).eval()
    _perturb(transformer, ("norm", "gate"))
    vae = AutoencoderKLLTX2Video(**VAE).eval()
    _perturb(vae, ("latents_mean", "latents_std"))
    audio_vae = AutoencoderKLLTX2Audio(**AUDIO_VAE).eval()
    _perturb(audio_vae, ("latents_mean", "latents_std"))
    vocoder = LTX2VocoderWithBWE(**VOCODER).eval()
    with torch.no_grad():  # quieter outputs: few samples at the clamp, so the waveform comparison sees the values
        for name, p in vocoder.state_dict().items():
            if name.endswith("conv_out.weight"):
                p.mul_(0.1)
    scheduler = FlowMatchEulerDiscreteScheduler(**SCHEDULER)
    parts = dict(scheduler=scheduler, vae=vae, audio_vae=audio_vae, text_encoder=text_encoder, tokenizer=tokenizer,
                 connectors=connectors, transformer=transformer, vocoder=vocoder)
    ref = LTX2Pipeline(**parts)
    ref.set_progress_bar_config(disable=True)
    ref.save_pretrained(root / "model")
    ours = OurPipeline.from_pretrained(root / "model", dtype="float32", vae_dtype="float32", progress=False,
                                       compile_cache=False)
    rng = np.random.default_rng(0)
    latents = rng.standard_normal((1, 8, 2, 2, 2)).astype(np.float32)
    audio_latents = rng.standard_normal((1, 8, 9, 2)).astype(np.float32)
    return dict(ref=ref, parts=parts, ours=ours, latents=latents, audio_latents=audio_latents, root=root)


def _check(out, video, audio):
    frames = out.frames.astype(np.float64) / 255.0
    assert frames.shape == video.shape == (1, FRAMES, H, W, 3)
    err_v = np.abs(frames - video).max()
    assert out.audio.shape == tuple(audio.shape) and out.audio.dtype == np.float32
    err_a = np.abs(out.audio - audio.numpy()).max()
    clamped = np.mean(np.abs(audio.numpy()) > 0.999)
    print(f"frames max |err| {err_v * 255:.3f}/255, audio max |err| {err_a:.2e} (clamped {clamped:.0%}, "
          f"|audio| max {np.abs(audio.numpy()).max():.3f})")
    assert clamped < 0.2
    assert err_v <= 2 / 255 + 1e-6, err_v * 255
    assert err_a < 1e-4, err_a
    assert out.fps == FPS and out.sample_rate == VOCODER["output_sampling_rate"]


def test_dev_t2v_matches_diffusers(tiny):
    with torch.no_grad():
        video, audio = tiny["ref"](
            prompt=PROMPT, negative_prompt=NEGATIVE, height=H, width=W, num_frames=FRAMES, frame_rate=FPS,
            num_inference_steps=4, **GUIDANCE, latents=torch.from_numpy(tiny["latents"]),
            audio_latents=torch.from_numpy(tiny["audio_latents"]), generator=torch.Generator().manual_seed(0),
            max_sequence_length=L, output_type="np", return_dict=False)
    out = tiny["ours"](PROMPT, NEGATIVE, height=H, width=W, num_frames=FRAMES, frame_rate=FPS, num_inference_steps=4,
                       **GUIDANCE, latents=tiny["latents"], audio_latents=tiny["audio_latents"],
                       max_sequence_length=L, progress=False)
    _check(out, video, audio)
    flt = tiny["ours"](PROMPT, NEGATIVE, height=H, width=W, num_frames=FRAMES, frame_rate=FPS, num_inference_steps=4,
                       **GUIDANCE, latents=tiny["latents"], audio_latents=tiny["audio_latents"],
                       max_sequence_length=L, output_type="float", return_audio=False, progress=False)
    assert flt.audio is None and flt.sample_rate is None and flt.frames.dtype == np.float32
    err = np.abs(flt.frames - video).max()
    print(f"float frames max |err| {err:.2e}")
    assert err < 1e-4, err
    from vidax.video import COMMON_METRICS
    assert all(k in out.metrics for k in COMMON_METRICS) and out.metrics["num_inference_steps"] == 4


def test_default_stg_blocks_outside_a_small_model_match_diffusers(tiny):
    """The reference's default STG blocks ([28]) on the 2-block model: diffusers perturbs nothing (its STG term is
    0); vidax skips that pass, same frames and audio."""
    kw = dict(height=H, width=W, num_frames=FRAMES, frame_rate=FPS, num_inference_steps=2, guidance_scale=3.0,
              stg_scale=1.0, modality_scale=1.0, audio_guidance_scale=7.0, audio_stg_scale=1.0,
              audio_modality_scale=1.0, max_sequence_length=L)
    with torch.no_grad():
        video, audio = tiny["ref"](prompt=PROMPT, negative_prompt=NEGATIVE, **kw,
                                   latents=torch.from_numpy(tiny["latents"]),
                                   audio_latents=torch.from_numpy(tiny["audio_latents"]),
                                   generator=torch.Generator().manual_seed(0), output_type="np", return_dict=False)
    out = tiny["ours"](PROMPT, NEGATIVE, **kw, latents=tiny["latents"], audio_latents=tiny["audio_latents"],
                       progress=False)
    _check(out, video, audio)
    with pytest.raises(ValueError, match="not blocks of this model"):  # given blocks must exist
        tiny["ours"](PROMPT, NEGATIVE, **kw, spatio_temporal_guidance_blocks=[28], progress=False)


def test_dev_i2v_matches_diffusers(tiny):
    # 80 x 96: resized (bilinear) to 64 x 64 after the H.264 re-compression at the LTX-2.5 default CRF 18
    yy, xx = np.meshgrid(np.linspace(0, 1, 80), np.linspace(0, 1, 96), indexing="ij")
    rgb = np.stack([yy * (1 - xx), xx, 0.5 + 0.5 * np.sin(6 * yy + 4 * xx) * yy], -1)
    image = Image.fromarray((rgb * 255).astype(np.uint8))
    ref = LTX2ImageToVideoPipeline(**tiny["parts"])
    ref.set_progress_bar_config(disable=True)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        video, audio = ref(image=image, prompt=PROMPT, negative_prompt=NEGATIVE, height=H, width=W,
                           num_frames=FRAMES, frame_rate=FPS, num_inference_steps=4, **I2V_GUIDANCE,
                           audio_latents=torch.from_numpy(tiny["audio_latents"]), generator=gen,
                           max_sequence_length=L, output_type="np", return_dict=False)
    # The reference's only draw before the loop that reaches the result: the video noise (randn_tensor, first).
    noise = torch.randn((1, 8, 2, 2, 2), generator=torch.Generator().manual_seed(3)).numpy()
    out = tiny["ours"](PROMPT, NEGATIVE, image=image, height=H, width=W, num_frames=FRAMES, frame_rate=FPS,
                       num_inference_steps=4, **I2V_GUIDANCE, noise=noise, audio_latents=tiny["audio_latents"],
                       max_sequence_length=L, progress=False)
    assert out.metrics["vae_encode_s"] > 0
    _check(out, video, audio)


# ----------------------------------------------------------------------------- upstream distilled, restated
# Lightricks/LTX-2 ltx_core/components/diffusion_steps.py EulerAncestralDiffusionStep.step (eta=1, s_noise=1) and
# ltx_pipelines/utils/samplers.py _ancestral_euler_denoising_loop (model_dtype float32: upstream keeps bfloat16
# states between steps, the one thing not followed): x0 = X0Model (sample - velocity * sigma), then the terminal
# step returns x0, the others step and take fresh noise per modality (video first).


def _upstream_ancestral(sample, denoised, sigma, sigma_next, noise, eta=1.0, s_noise=1.0):
    if sigma_next == 0:
        return denoised
    downstep_ratio = 1.0 + (sigma_next / sigma - 1.0) * eta
    sigma_down = sigma_next * downstep_ratio
    sigma_down_ratio = sigma_down / sigma
    x_next = sigma_down_ratio * sample + (1.0 - sigma_down_ratio) * denoised
    alpha_next, alpha_down = 1.0 - sigma_next, 1.0 - sigma_down
    renoise_coeff = (sigma_next**2 - sigma_down**2 * alpha_next**2 / alpha_down**2).clamp(min=0) ** 0.5
    return (alpha_next / alpha_down) * x_next + noise * s_noise * renoise_coeff


@pytest.mark.parametrize("conditioned", [False, True], ids=["t2v", "first_frame"])
def test_distilled_matches_upstream_sampler(tiny, conditioned):
    """With ``conditioned`` the first latent frame of the explicit latents is the condition (``image`` given with
    ``latents``: not encoded, as the image-to-video reference): upstream's denoise mask is 0 on its tokens (per-token
    timesteps ``sigma * mask``, ``post_process_latent`` after the prediction and after each step)."""
    ref, parts = tiny["ref"], tiny["parts"]
    sigmas = torch.tensor(sched.DISTILLED_SIGMA_VALUES, dtype=torch.float32)
    rng = np.random.default_rng(5)
    noises = [(rng.standard_normal((1, 8, 8)).astype(np.float32), rng.standard_normal((1, 9, 16)).astype(np.float32))
              for _ in range(len(sigmas) - 1)]
    tr, vae, avae = parts["transformer"], parts["vae"], parts["audio_vae"]
    with torch.no_grad():
        embeds, mask, _, _ = ref.encode_prompt(PROMPT, do_classifier_free_guidance=False, max_sequence_length=L)
        ctx, actx, cmask = parts["connectors"](embeds, mask, padding_side="left")
        x = ref._pack_latents(ref._normalize_latents(torch.from_numpy(tiny["latents"]), vae.latents_mean,
                                                     vae.latents_std, vae.config.scaling_factor))
        a = ref._normalize_audio_latents(ref._pack_audio_latents(torch.from_numpy(tiny["audio_latents"])),
                                         avae.latents_mean, avae.latents_std)
        denoise_mask = torch.ones((1, 8, 1))
        if conditioned:
            denoise_mask[:, :4] = 0.0  # the first latent frame's 2 x 2 tokens
        clean = x.clone()

        def post_process_latent(denoised):  # ltx_pipelines/utils/helpers.py
            return denoised * denoise_mask + clean * (1 - denoise_mask)

        for i in range(len(sigmas) - 1):
            t = (sigmas[i] * 1000).expand(1)
            v, av = tr(hidden_states=x, audio_hidden_states=a, encoder_hidden_states=ctx,
                       audio_encoder_hidden_states=actx, timestep=t[:, None] * denoise_mask[..., 0],
                       audio_timestep=t, sigma=t, encoder_attention_mask=cmask, audio_encoder_attention_mask=cmask,
                       num_frames=2, height=2, width=2, fps=FPS, audio_num_frames=9, use_cross_timestep=True,
                       return_dict=False)
            # X0Model: to_denoised(sample, velocity, per-token sigmas)
            dx, da = post_process_latent(x - v * (sigmas[i] * denoise_mask)), a - av * sigmas[i]
            x = _upstream_ancestral(x, dx, sigmas[i], sigmas[i + 1], torch.from_numpy(noises[i][0]))
            x = post_process_latent(x)
            a = _upstream_ancestral(a, da, sigmas[i], sigmas[i + 1], torch.from_numpy(noises[i][1]))
        z = ref._denormalize_latents(ref._unpack_latents(x, 2, 2, 2), vae.latents_mean, vae.latents_std,
                                     vae.config.scaling_factor)
        video = (vae.decode(z, None, return_dict=False)[0] / 2 + 0.5).clamp(0, 1).permute(0, 2, 3, 4, 1).numpy()
        mel = avae.decode(ref._unpack_audio_latents(ref._denormalize_audio_latents(a, avae.latents_mean,
                                                                                   avae.latents_std), 9, 2),
                          return_dict=False)[0]
        audio = parts["vocoder"](mel)
    image = np.full((H, W, 3), 128, np.uint8) if conditioned else None
    out = tiny["ours"](PROMPT, image=image, height=H, width=W, num_frames=FRAMES, frame_rate=FPS, distilled=True,
                       latents=tiny["latents"], audio_latents=tiny["audio_latents"], step_noises=noises,
                       max_sequence_length=L, progress=False)
    assert out.metrics["num_inference_steps"] == 8
    _check(out, video, audio)


DIFFUSION_DECODER = dict(  # the release's upsampler strides and patch (x32, x8) at tiny widths; small kernels
    latent_channels=8, patch_size=4, decoder_head_dim=16, decoder_stage_channels=(64, 32, 32, 32, 16),
    decoder_stage_depths=(1, 1, 1, 1, 1), decoder_stage_kernels=((1, 1, 1), (1, 1, 1), (3, 3, 3), (3, 3, 3)),
    decoder_upsample_strides=((1, 2, 2), (2, 1, 1), (2, 2, 2), (2, 2, 2)),
    decoder_upsample_channel_reductions=(2, 1, 1, 2), decoder_stage5_kernel=(3, 3, 3), decoder_t_emb_dim=32,
    spatial_compression_ratio=32)


def test_diffusion_decoder_matches_diffusers_decode_pipeline(tiny):
    """decoder="diffusion": the final latents as LTX2Pipeline(output_type="latent") leaves them (denormalised with
    the VAE's statistics) through LTX2VideoDiffusionDecodePipeline(denormalize=False), its canvas noise replayed."""
    pytest.importorskip("vidax.models.ltx2.diffusion_decoder")  # lands with the ldec branch
    from diffusers import LTX2VideoDiffusionDecoderModel
    from diffusers.pipelines.ltx2.pipeline_ltx2_diffusion_decode import LTX2VideoDiffusionDecodePipeline

    torch.manual_seed(1)
    dec = LTX2VideoDiffusionDecoderModel(**DIFFUSION_DECODER).eval()
    folder = tiny["root"] / "model"
    dec.save_pretrained(folder / "diffusion_decoder")
    noise = torch.randn((1, 3, FRAMES, H, W), generator=torch.Generator().manual_seed(7))
    try:
        out = tiny["ours"](PROMPT, height=H, width=W, num_frames=FRAMES, frame_rate=FPS, distilled=True,
                           latents=tiny["latents"], audio_latents=tiny["audio_latents"], max_sequence_length=L,
                           decoder="diffusion", decoder_noise=noise.numpy(), output_type="float",
                           return_audio=False, progress=False)
    finally:
        import shutil
        shutil.rmtree(folder / "diffusion_decoder")
    z = tiny["ref"]._denormalize_latents(torch.from_numpy(out.latents), tiny["parts"]["vae"].latents_mean,
                                         tiny["parts"]["vae"].latents_std, tiny["parts"]["vae"].config.scaling_factor)
    ref = LTX2VideoDiffusionDecodePipeline(diffusion_decoder=dec, scheduler=None)
    ref.set_progress_bar_config(disable=True)
    with torch.no_grad():
        video = ref(z, generator=torch.Generator().manual_seed(7), output_type="np", denormalize=False,
                    return_dict=False)[0]
    err = np.abs(out.frames - video).max()
    print(f"diffusion decoder frames max |err| {err:.2e}")
    assert out.frames.shape == video.shape and err < 1e-4, err


# ----------------------------------------------------------------------------- schedule, errors, loading


@pytest.mark.parametrize("config", [SCHEDULER, dict(shift=3.0), dict(SCHEDULER, time_shift_type="linear",
                                                                     shift_terminal=None, invert_sigmas=True)])
def test_dev_schedule_matches_scheduler(config):
    s = FlowMatchEulerDiscreteScheduler(**config)
    n, tokens = 7, 1500
    mu = calculate_shift(tokens, s.config.base_image_seq_len, s.config.max_image_seq_len, s.config.base_shift,
                         s.config.max_shift)
    s.set_timesteps(sigmas=np.linspace(1.0, 1 / n, n), mu=mu)
    sigmas, timesteps = sched.dev_schedule(dict(s.config), n, tokens)
    np.testing.assert_array_equal(sigmas, s.sigmas.numpy())
    np.testing.assert_array_equal(timesteps, s.timesteps.numpy())


def test_bad_sizes_raise_before_running(tiny):
    pipe = tiny["ours"]
    for kw, match in ((dict(num_frames=10), r"num_frames=10 .*use 9 or 17"),
                      (dict(height=100), r"height=100 .*use 96 or 128"),
                      (dict(width=16), r"width=16 .*use 32"), (dict(num_frames=0), "num_frames=0"),
                      (dict(latents=np.zeros((1, 8, 3, 2, 2), np.float32)), "latents must have shape"),
                      (dict(spatio_temporal_guidance_blocks=[28]), r"\[28\] are not blocks of this model"),
                      (dict(distilled=True, guidance_scale=3.0), "without guidance"),
                      (dict(decoder="vae"), "decoder must be"), (dict(decoder="diffusion"), "has no diffusion decoder"),
                      (dict(last_image=np.zeros((64, 64, 3), np.uint8)), "first frame only")):
        with pytest.raises(ValueError, match=match):
            pipe(PROMPT, **{**dict(height=H, width=W, num_frames=FRAMES, spatio_temporal_guidance_blocks=[1]), **kw})


def test_load_component_names_and_order(tiny):
    params, cfg = load_component(tiny["root"] / "model", "vocoder")
    assert isinstance(params, dict) and cfg.output_sampling_rate == VOCODER["output_sampling_rate"]
    with pytest.raises(ValueError, match="name must be one of"):
        load_component(tiny["root"] / "model", "unet")
    from vidax.checkpoint.errors import CheckpointError
    with pytest.raises(CheckpointError, match="not an LTX-2 folder"):
        load_component(tiny["root"], "vae")
    for kw, match in ((dict(tp=3), "tp"), (dict(offload_chunk=0), "offload_chunk"),
                      (dict(block_loop="unrolled"), "block_loop")):  # before any weight is read
        with pytest.raises(ValueError, match=match):
            OurPipeline.from_pretrained(tiny["root"] / "model", **kw)
