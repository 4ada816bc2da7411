"""LTX-2 audio decoding: model-space audio latents -> waveform, the last stage of ``LTX2Pipeline.__call__``.

Reference: ``diffusers/pipelines/ltx2/pipeline_ltx2.py`` (after the denoising loop: ``_denormalize_audio_latents``
on the packed tokens, ``_unpack_audio_latents``, ``audio_vae.decode``, ``vocoder``); upstream
``ltx_core/model/audio_vae/audio_vae.py`` (``decode_audio``: the decoder denormalises, then the vocoder).
"""

from __future__ import annotations

import jax

from vidax.models.ltx2 import audio_vae
from vidax.models.ltx2.vocoder import LTX2VocoderConfig, LTX2VocoderWithBWEConfig, vocode


def decode_audio(vae_params: dict, vae_cfg: audio_vae.LTX2AudioVAEConfig, vocoder_params: dict,
                 vocoder_cfg: LTX2VocoderConfig | LTX2VocoderWithBWEConfig, latents: jax.Array
                 ) -> tuple[jax.Array, int]:
    """Denormalise, decode to a mel spectrogram and vocode.

    Args:
      vae_params: the audio VAE's (at least ``audio_vae.DECODER_PARTS``). vocoder_params: the vocoder's.
      latents: ``(B, latent_channels, L, M)`` audio latents in the transformer's (normalised) space, unpacked
        (``audio_vae.unpack_latents`` of the ``(B, L, C * M)`` tokens).

    Returns:
      ``(waveform, sample_rate)``: float32 ``(B, channels, samples)`` and its rate in Hz (LTX-2.5: stereo, 48 kHz,
      ``(4L - 3) * 160 * 3`` samples); ``waveform[0]`` is what :func:`vidax.video.write_video` takes as ``audio``.

    Raises:
      ValueError: latents that do not fit the VAE, a spectrogram that does not fit the vocoder.
    """
    mel = audio_vae.decode(vae_params, vae_cfg, audio_vae.denormalize_latents(vae_params, latents))
    rate = vocoder_cfg.output_sampling_rate
    return vocode(vocoder_params, vocoder_cfg, mel), rate
