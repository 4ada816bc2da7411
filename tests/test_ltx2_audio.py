"""Parity of LTX-2's audio path: the audio VAE (diffusers ``AutoencoderKLLTX2Audio``), the vocoder (``LTX2Vocoder``,
``LTX2VocoderWithBWE``) and the audio track of the mp4 (fp32, CPU, tiny configurations).

Random weights (norm scales, latent statistics and snake parameters randomised too), written by the reference classes
with ``save_pretrained`` and read back through our strict loaders.
"""

import numpy as np
import pytest
import torch
from diffusers import AutoencoderKLLTX2Audio
from diffusers.pipelines.ltx2.pipeline_ltx2 import LTX2Pipeline

from vidax.checkpoint.loader import plan_load
from vidax.checkpoint.safetensors_io import CheckpointReader
from vidax.models.ltx2 import audio_vae as av

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
    cfg, params = av.load_audio_vae(path)
    return request.param, model, cfg, params, path


def test_audio_vae_keymap_covers_checkpoint(vae):
    _, _, cfg, _, path = vae
    plan = plan_load(CheckpointReader(path), av.audio_vae_keymap(cfg), av.audio_vae_specs(cfg), source=str(path))
    assert len(plan) == sum(1 for _ in CheckpointReader(path).keys())


def test_audio_vae_decoder_matches_reference(vae):
    name, model, cfg, params, _ = vae
    rng = np.random.default_rng(1)
    m = 16 // 2 ** (len(cfg.ch_mult) - 1)
    z = rng.standard_normal((2, cfg.latent_channels, 5, m)).astype(np.float32)
    with torch.no_grad():
        ref = model.decode(torch.from_numpy(z)).sample.numpy()
    out = np.asarray(av.decode(params, cfg, z))
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


def test_audio_vae_encoder_matches_reference(vae):
    _, model, cfg, params, _ = vae
    mel = np.random.default_rng(2).standard_normal((1, cfg.in_channels, 17, cfg.mel_bins)).astype(np.float32)
    with torch.no_grad():
        ref = model.encode(torch.from_numpy(mel)).latent_dist.mode().numpy()
    out = np.asarray(av.encode(params, cfg, mel))
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
    out = np.asarray(av.denormalize_latents(params, z))
    assert _rel(out, ref) < 1e-6
    back = LTX2Pipeline._normalize_audio_latents(packed, mean, std).numpy()
    assert _rel(av.pack_latents(av.normalize_latents(params, z)), back) < 1e-6
    np.testing.assert_allclose(av.normalize_latents(params, av.denormalize_latents(params, z)), z, atol=1e-5)
