"""Parity of LTX-2's audio path: the audio VAE (diffusers ``AutoencoderKLLTX2Audio``), the vocoder (``LTX2Vocoder``,
``LTX2VocoderWithBWE``) and the audio track of the mp4 (fp32, CPU, tiny configurations).

Random weights (norm scales, latent statistics and snake parameters randomised too), written by the reference classes
with ``save_pretrained`` and read back through our strict loaders.
"""

import av
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers import AutoencoderKLLTX2Audio
from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder, LTX2VocoderWithBWE
from diffusers.pipelines.ltx2.pipeline_ltx2 import LTX2Pipeline

from vidax.checkpoint.loader import plan_load
from vidax.checkpoint.safetensors_io import CheckpointReader
from vidax.models.ltx2 import audio_vae as avae
from vidax.models.ltx2.audio import decode_audio
from vidax.models.ltx2 import vocoder as vc
from vidax.video import read_audio, read_video, write_video

# "2.5": the released layout at a tiny width (pixel norms, causal in time, no attention), with
# latent_channels * latent mel bins == base_channels as in the release (8 x 16 == 128).
# "attn": the other branches (group norms, no causality, mid and stage attention, two levels).
VAE_TINY = {
    "2.5": dict(base_channels=16, ch_mult=(1, 2, 4), num_res_blocks=1, latent_channels=4, mel_bins=16),
    "attn": dict(base_channels=32, ch_mult=(1, 2), num_res_blocks=1, latent_channels=4, mel_bins=16, resolution=8,
                 attn_resolutions=(4,), norm_type="group", causality_axis="none", mid_block_add_attention=True),
}


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


@pytest.fixture(scope="module", params=list(VAE_TINY))
def vae(request, tmp_path_factory):
    torch.manual_seed(0)
    model = AutoencoderKLLTX2Audio(**VAE_TINY[request.param]).eval()
    with torch.no_grad():
        for key, p in model.state_dict().items():
            if "norm" in key or key.startswith("latents_"):
                positive = key.endswith("weight") or key == "latents_std"
                p.copy_(torch.rand_like(p) + 0.5 if positive else 0.3 * torch.randn_like(p))
    path = tmp_path_factory.mktemp(f"ltx2_audio_vae_{request.param}")
    model.save_pretrained(path)
    cfg, params = avae.load_audio_vae(path)
    return request.param, model, cfg, params, path


def test_audio_vae_keymap_covers_checkpoint(vae):
    _, _, cfg, _, path = vae
    plan = plan_load(CheckpointReader(path), avae.audio_vae_keymap(cfg), avae.audio_vae_specs(cfg), source=str(path))
    assert len(plan) == sum(1 for _ in CheckpointReader(path).keys())


def test_audio_vae_decoder_matches_reference(vae):
    name, model, cfg, params, _ = vae
    rng = np.random.default_rng(1)
    m = 16 // 2 ** (len(cfg.ch_mult) - 1)
    z = rng.standard_normal((2, cfg.latent_channels, 5, m)).astype(np.float32)
    with torch.no_grad():
        ref = model.decode(torch.from_numpy(z)).sample.numpy()
    out = np.asarray(avae.decode(params, cfg, z))
    if name == "2.5":
        assert out.shape == ref.shape == (2, 2, 4 * 5 - 3, 16)
        assert _rel(out, ref) < 1e-5
    else:
        # causality_axis="none": upstream AudioDecoder._denormalize_latents keeps 4F frames (it tests
        # `causality_axis != CausalityAxis.NONE`), diffusers crops to 4F - 3 (it tests `is not None`). Both crop the
        # decoder's output, then zero-pad it, to their target: one upsampler gives 2F frames, so 2F decoded + zeros.
        assert out.shape == (2, 2, 4 * 5, 16) and ref.shape == (2, 2, 4 * 5 - 3, 16)
        assert _rel(out[:, :, : ref.shape[2]], ref) < 1e-5
        assert not out[:, :, ref.shape[2]:].any()


def test_audio_vae_decoder_bf16(vae):
    """bf16 kernels (the norms and statistics stay float32 leaves) against the float32 reference."""
    name, model, cfg, params, path = vae
    if name != "2.5":
        pytest.skip("one variant suffices")
    _, bf16 = avae.load_audio_vae(path, dtype=jnp.bfloat16)
    assert bf16["decoder"]["conv_in"]["conv"]["kernel"].dtype == jnp.bfloat16
    assert bf16["latents_std"].dtype == jnp.float32
    z = np.random.default_rng(1).standard_normal((2, cfg.latent_channels, 5, 4)).astype(np.float32)
    with torch.no_grad():
        ref = model.decode(torch.from_numpy(z)).sample.numpy()
    assert _rel(avae.decode(bf16, cfg, z), ref) < 1e-2

def test_audio_vae_encoder_matches_reference(vae):
    _, model, cfg, params, _ = vae
    mel = np.random.default_rng(2).standard_normal((1, cfg.in_channels, 17, cfg.mel_bins)).astype(np.float32)
    with torch.no_grad():
        ref = model.encode(torch.from_numpy(mel)).latent_dist.mode().numpy()
    out = np.asarray(avae.encode(params, cfg, mel))
    assert out.shape == ref.shape
    assert _rel(out, ref) < 1e-5


def test_audio_latent_statistics_match_pipeline(vae):
    name, model, cfg, params, _ = vae
    if name != "2.5":
        pytest.skip("the statistics need latent_channels x latent mel bins == base_channels")
    z = np.random.default_rng(3).standard_normal((2, cfg.latent_channels, 6, 4)).astype(np.float32)
    mean, std = model.latents_mean, model.latents_std
    packed = LTX2Pipeline._pack_audio_latents(torch.from_numpy(z))
    ref = LTX2Pipeline._unpack_audio_latents(LTX2Pipeline._denormalize_audio_latents(packed, mean, std), 6, 4).numpy()
    out = np.asarray(avae.denormalize_latents(params, z))
    assert _rel(out, ref) < 1e-6
    back = LTX2Pipeline._normalize_audio_latents(packed, mean, std).numpy()
    assert _rel(avae.pack_latents(avae.normalize_latents(params, z)), back) < 1e-6
    np.testing.assert_allclose(avae.normalize_latents(params, avae.denormalize_latents(params, z)), z, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Vocoders
# ---------------------------------------------------------------------------------------------

_STAGE = dict(hidden_channels=32, upsample_kernel_sizes=[7, 3], upsample_factors=[3, 1], resnet_kernel_sizes=[3, 5],
              resnet_dilations=[[1, 3], [1, 2]])
VOCODER_TINY = {
    # LTX-2.0's kind: leaky ReLU resblocks, tanh output.
    "2.0": (LTX2Vocoder, dict(in_channels=16, **_STAGE)),
    # SnakeBeta-free snake, not anti-aliased, clamped output.
    "snake": (LTX2Vocoder, dict(in_channels=16, **_STAGE, act_fn="snake", final_act_fn="clamp", final_bias=False)),
    # LTX-2.3 / 2.5's kind: BigVGAN-v2 stages (anti-aliased SnakeBeta), causal log-mel, x3 BWE (hop 2: 6 = 3 x 2
    # samples per BWE mel frame); 3 samples per mel frame in the first stage, so odd lengths take the hop padding.
    "2.5": (LTX2VocoderWithBWE, dict(
        in_channels=16, **{**_STAGE, "resnet_kernel_sizes": [3], "resnet_dilations": [[1, 2]]}, bwe_in_channels=16,
        bwe_hidden_channels=16, bwe_upsample_kernel_sizes=[7, 4], bwe_upsample_factors=[3, 2],
        bwe_resnet_kernel_sizes=[3], bwe_resnet_dilations=[[1, 3]], filter_length=8,
        hop_length=2, window_length=8, num_mel_channels=8, input_sampling_rate=100, output_sampling_rate=300)),
}


@pytest.fixture(scope="module", params=list(VOCODER_TINY))
def vocoder(request, tmp_path_factory):
    cls, kwargs = VOCODER_TINY[request.param]
    torch.manual_seed(0)
    model = cls(**kwargs).eval()
    with torch.no_grad():
        for key, p in model.state_dict().items():
            if key.endswith(("alpha", "beta")):
                p.copy_(0.3 * torch.randn_like(p))
            elif key.endswith("mel_basis"):
                p.copy_(torch.rand_like(p))
            elif key.endswith("_basis"):
                p.copy_(0.5 * torch.randn_like(p))
            elif key.endswith("conv_out.weight"):
                p.mul_(4.0)  # outputs beyond [-1, 1], so the output activations and clipping matter
    path = tmp_path_factory.mktemp(f"ltx2_vocoder_{request.param}")
    model.save_pretrained(path)
    cfg, params = vc.load_vocoder(path)
    return request.param, model, cfg, params


@pytest.mark.filterwarnings("ignore:Accessing config attribute `hop_length`")
def test_vocoder_matches_reference(vocoder):
    name, model, cfg, params = vocoder
    mel = np.random.default_rng(4).standard_normal((2, 2, 7, 8)).astype(np.float32)
    with torch.no_grad():
        if name == "2.5":
            plain = model(torch.from_numpy(mel)).numpy()
            # Upstream VocoderWithBWE builds its first stage with apply_final_activation=True (use_tanh_at_final
            # false: a clamp to [-1, 1]); diffusers' final_act_fn=None skips it. Restated on the reference instance:
            model.vocoder.final_act_fn = "clamp"
            ref = model(torch.from_numpy(mel)).numpy()
            model.vocoder.final_act_fn = None
            assert _rel(plain, ref) > 1e-3  # the clamp binds on this input
        else:
            ref = model(torch.from_numpy(mel)).numpy()
    out = np.asarray(vc.vocode(params, cfg, mel))
    samples = 7 * 3 * (3 if name == "2.5" else 1)
    assert out.shape == ref.shape == (2, 2, samples)
    assert _rel(out, ref) < 1e-5


@pytest.mark.filterwarnings("ignore:Accessing config attribute `hop_length`")
def test_latents_to_waveform_matches_pipeline_stages(vocoder, tmp_path):
    """LTX2Pipeline's last stage on the 2.5 kind: denormalise the packed tokens, unpack, audio_vae.decode, vocoder."""
    name, voc, voc_cfg, voc_params = vocoder
    if name != "2.5":
        pytest.skip("the chain is checked with the LTX-2.3 / 2.5 vocoder")
    torch.manual_seed(1)
    # 8 mel bins (the tiny vocoder's), 2 latent mel bins x 8 latent channels == base_channels 16.
    vae = AutoencoderKLLTX2Audio(base_channels=16, ch_mult=(1, 2, 4), num_res_blocks=1, latent_channels=8,
                                 mel_bins=8).eval()
    with torch.no_grad():
        vae.latents_mean.copy_(0.3 * torch.randn_like(vae.latents_mean))
        vae.latents_std.copy_(torch.rand_like(vae.latents_std) + 0.5)
    vae.save_pretrained(tmp_path)
    vae_cfg, vae_params = avae.load_audio_vae(tmp_path)
    z = np.random.default_rng(6).standard_normal((1, 8, 4, 2)).astype(np.float32)
    with torch.no_grad():
        tokens = LTX2Pipeline._pack_audio_latents(torch.from_numpy(z))
        latents = LTX2Pipeline._unpack_audio_latents(
            LTX2Pipeline._denormalize_audio_latents(tokens, vae.latents_mean, vae.latents_std), 4, num_mel_bins=2)
        voc.vocoder.final_act_fn = "clamp"  # upstream's first-stage clamp, restated (test_vocoder_matches_reference)
        ref = voc(vae.decode(latents).sample).numpy()
        voc.vocoder.final_act_fn = None
    out, rate = decode_audio(vae_params, vae_cfg, voc_params, voc_cfg, z)
    assert rate == 300 and out.shape == ref.shape == (1, 2, (4 * 4 - 3) * 3 * 3)
    assert _rel(out, ref) < 1e-5


def test_audio_latent_frames():
    cfg = avae.LTX2AudioVAEConfig()
    assert cfg.latents_per_second == 25.0
    assert cfg.latent_frames(121, 24.0) == 126  # round(121 / 24 * 25) = round(126.04)
    assert cfg.decoded_frames(126) == 501 and avae.LTX2AudioVAEConfig(causality_axis="none").decoded_frames(126) == 504


# The LTX-2.5 configurations of diffusers' scripts/convert_ltx2_to_diffusers.py ("same as LTX-2.3" for the vocoder).
RELEASE_AUDIO_VAE = dict(base_channels=128, output_channels=2, ch_mult=(1, 2, 4), num_res_blocks=2,
                         attn_resolutions=None, in_channels=2, resolution=256, latent_channels=8, norm_type="pixel",
                         causality_axis="height", dropout=0.0, mid_block_add_attention=False, sample_rate=16000,
                         mel_hop_length=160, is_causal=True, mel_bins=64, double_z=True)
RELEASE_VOCODER = dict(
    in_channels=128, hidden_channels=1536, out_channels=2, upsample_kernel_sizes=[11, 4, 4, 4, 4, 4],
    upsample_factors=[5, 2, 2, 2, 2, 2], resnet_kernel_sizes=[3, 7, 11], resnet_dilations=[[1, 3, 5]] * 3,
    act_fn="snakebeta", leaky_relu_negative_slope=0.1, antialias=True, antialias_ratio=2, antialias_kernel_size=12,
    final_act_fn=None, final_bias=False, bwe_in_channels=128, bwe_hidden_channels=512, bwe_out_channels=2,
    bwe_upsample_kernel_sizes=[12, 11, 4, 4, 4], bwe_upsample_factors=[6, 5, 2, 2, 2],
    bwe_resnet_kernel_sizes=[3, 7, 11], bwe_resnet_dilations=[[1, 3, 5]] * 3, bwe_act_fn="snakebeta",
    bwe_leaky_relu_negative_slope=0.1, bwe_antialias=True, bwe_antialias_ratio=2, bwe_antialias_kernel_size=12,
    bwe_final_act_fn=None, bwe_final_bias=False, filter_length=512, hop_length=80,
    window_length=512, num_mel_channels=64, input_sampling_rate=16000, output_sampling_rate=48000)


class _ShapeReader:
    def __init__(self, shapes):
        self.shapes = shapes

    def keys(self):
        return list(self.shapes)

    def shape(self, key):
        return self.shapes[key]


def test_release_layouts_are_covered_exactly():
    """The LTX-2.5 audio VAE and vocoder (meta device: shapes only) fill every parameter slot exactly once."""
    with torch.device("meta"):
        vae, voc = AutoencoderKLLTX2Audio(**RELEASE_AUDIO_VAE), LTX2VocoderWithBWE(**RELEASE_VOCODER)
    vae_cfg = avae.LTX2AudioVAEConfig.from_dict({"_class_name": "AutoencoderKLLTX2Audio", **RELEASE_AUDIO_VAE})
    assert vae_cfg == avae.LTX2AudioVAEConfig()
    voc_cfg = vc.vocoder_config_from_dict({"_class_name": "LTX2VocoderWithBWE", **RELEASE_VOCODER})
    assert voc_cfg == vc.LTX2VocoderWithBWEConfig() and voc_cfg.upsample_factor == 160 * 3
    for model, specs, keymap in ((vae, avae.audio_vae_specs(vae_cfg), avae.audio_vae_keymap(vae_cfg)),
                                 (voc, *vc.vocoder_specs_and_rules(voc_cfg))):
        shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        plan = plan_load(_ShapeReader(shapes), keymap, specs)
        ignored = [k for k in shapes if keymap.ignored(k)]
        assert ignored in ([], ["mel_stft.stft_fn.inverse_basis"])
        assert sum(len(v) for v in plan.values()) == len(shapes) - len(ignored)


@pytest.mark.parametrize("config,match", [
    ({"_class_name": "AutoencoderKLLTX2Video"}, "not 'AutoencoderKLLTX2Audio'"),
    ({"causality_axis": "time"}, "causality_axis"),
    ({"norm_type": "group"}, "group"),
    ({"base_channels": 128, "mystery": 1}, "unknown config keys"),
])
def test_bad_audio_vae_config_refused(config, match):
    with pytest.raises(ValueError, match=match):
        avae.LTX2AudioVAEConfig.from_dict(config)


@pytest.mark.parametrize("change,match", [
    ({"bwe_upsample_factors": [6, 5, 2, 2, 1]}, "must match"),
    ({"output_sampling_rate": 44100}, "multiple"),
    ({"upsample_kernel_sizes": [11, 4]}, "as many of each"),
    ({"act_fn": "gelu"}, "act_fn"),
    ({"hidden_channels": 100}, "halved"),
])
def test_bad_vocoder_config_refused(change, match):
    with pytest.raises(ValueError, match=match):
        vc.vocoder_config_from_dict({"_class_name": "LTX2VocoderWithBWE", **RELEASE_VOCODER, **change})


def _converted_vocoder_name(key):
    """diffusers' conversion of a release vocoder key (its single-file converter's replacements, which extend
    LTX_2_0_VOCODER_RENAME_DICT of scripts/convert_ltx2_to_diffusers.py), restated."""
    name = "." + key.removeprefix("vocoder.")
    for old, new in (("conv_pre", "conv_in"), ("conv_post", "conv_out"), ("resblocks", "resnets"),
                     ("act_post", "act_out"), (".downsample.lowpass.filter", ".downsample.filter"),
                     (".ups.", ".upsamplers.")):
        name = name.replace(old, new)
    return name[1:]


def _converted_audio_vae_name(key):
    name = key.removeprefix("audio_vae.")
    name = name.replace("per_channel_statistics.mean-of-means", "latents_mean")
    return name.replace("per_channel_statistics.std-of-means", "latents_std")


def _release_round_trip(tmp_path, model, module, convert, keymap, specs, params):
    """Tensors renamed to the release's single-file names (``module.release_name``, which diffusers' conversion maps
    back exactly) load through the release key map into the tree the diffusers layout gives."""
    from safetensors.torch import save_file

    from vidax.checkpoint.loader import load_params

    state = {module.release_name(k): v.contiguous() for k, v in model.state_dict().items()}
    assert {convert(k): tuple(v.shape) for k, v in state.items()} == {
        k: tuple(v.shape) for k, v in model.state_dict().items()}
    save_file(state, str(tmp_path / "model.safetensors"))
    loaded = load_params(CheckpointReader(tmp_path), keymap, specs, np.float32, source=str(tmp_path))
    assert jax.tree.structure(loaded) == jax.tree.structure(params)
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(loaded), jax.tree.leaves(params)):
        np.testing.assert_array_equal(a, b, err_msg=str(path))
    return state


def test_release_single_file_names_audio_vae(vae, tmp_path):
    _, model, cfg, params, _ = vae
    _release_round_trip(tmp_path, model, avae, _converted_audio_vae_name, avae.audio_vae_release_keymap(cfg),
                        avae.audio_vae_specs(cfg), params)


def test_release_single_file_names_vocoder(vocoder, tmp_path):
    name, model, cfg, params = vocoder
    state = _release_round_trip(tmp_path, model, vc, _converted_vocoder_name, vc.vocoder_release_keymap(cfg),
                                vc.vocoder_specs_and_rules(cfg)[0], params)
    if name == "2.5":
        assert {"vocoder.vocoder.ups.0.weight", "vocoder.vocoder.resblocks.0.acts1.0.downsample.lowpass.filter",
                "vocoder.bwe_generator.act_post.act.beta", "vocoder.mel_stft.mel_basis"} <= set(state)


# ---------------------------------------------------------------------------------------------
# The audio track of the mp4
# ---------------------------------------------------------------------------------------------


def _tone(channels, rate, seconds):
    t = np.arange(int(rate * seconds)) / rate
    return np.stack([0.5 * np.sin(2 * np.pi * 440 * (c + 1) * t) for c in range(channels)]).astype(np.float32)


@pytest.mark.parametrize("channels,rate", [(2, 48000), (1, 24000)])
def test_mp4_carries_the_audio_track(tmp_path, channels, rate):
    frames = (np.random.default_rng(5).random((25, 32, 48, 3)) * 255).astype(np.uint8)
    audio = _tone(channels, rate, 25 / 24 + 0.01)  # a few samples past the video's end, not whole AAC frames
    path = write_video(frames, tmp_path / "avae.mp4", fps=24, audio=audio, sample_rate=rate)
    decoded, got_rate, duration = read_audio(path)
    assert got_rate == rate and decoded.shape[0] == channels
    # The container states the track's length to within one AAC frame (1024 samples); decoding gives whole frames.
    assert abs(duration - audio.shape[1] / rate) <= 1024 / rate
    assert audio.shape[1] <= decoded.shape[1] <= audio.shape[1] + 2 * 1024
    rms = lambda x: float(np.sqrt(np.mean(np.square(x))))  # noqa: E731
    assert abs(rms(decoded[:, 2048:audio.shape[1] - 2048]) - rms(audio)) < 0.05 * rms(audio)  # a lossy codec
    # The video stream is the one written without audio (same frames and rate), and that file has no audio stream.
    video, fps = read_video(path)
    plain = write_video(frames, tmp_path / "v.mp4", fps=24)
    plain_video, plain_fps = read_video(plain)
    np.testing.assert_array_equal(video, plain_video)
    assert fps == plain_fps == 24 and video.shape == frames.shape
    with av.open(str(plain)) as container:
        assert not container.streams.audio


@pytest.mark.parametrize("audio,rate,match", [
    (np.zeros((3, 100), np.float32), 48000, "1 or 2 channels"),
    (np.zeros(100, np.float32), 48000, "1 or 2 channels"),
    (np.full((2, 100), np.nan, np.float32), 48000, "NaN"),
    (np.zeros((2, 100), np.int16), 48000, "float"),
    (np.zeros((2, 100), np.float32), 12345, "AAC encoder takes"),
    (np.zeros((2, 100), np.float32), None, "sample_rate"),
])
def test_bad_audio_refused_before_any_file(tmp_path, audio, rate, match):
    with pytest.raises(ValueError, match=match):
        write_video(np.zeros((2, 16, 16, 3), np.uint8), tmp_path / "sub" / "x.mp4", fps=8, audio=audio,
                    sample_rate=rate)
    assert not (tmp_path / "sub").exists()
