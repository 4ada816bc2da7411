"""LTX-2 / LTX-2.5 (Lightricks): joint video and audio generation.

Modules: ``vae`` (the video VAE: frames <-> latents), ``audio_vae`` (the audio VAE: latents <-> mel spectrograms),
``vocoder`` (mel spectrogram -> waveform, with the 2.3+ bandwidth extension).
"""
