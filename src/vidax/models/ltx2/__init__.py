"""LTX-2 / LTX-2.5 (Lightricks): joint video and audio generation (components; no pipeline or registry entry yet).

Modules: ``config``, ``transformer``, ``keymap`` (the audio-video transformer, ``LTX2VideoTransformer3DModel``),
``connectors`` (the text features and the video / audio text connectors), ``vae`` (the video VAE: frames <->
latents), ``audio_vae`` (the audio VAE: latents <-> mel spectrograms), ``vocoder`` (mel spectrogram -> waveform, with
the 2.3+ bandwidth extension), ``audio`` (latents -> waveform). The Gemma 4 text tower is
:mod:`vidax.encoders.gemma`.
"""
