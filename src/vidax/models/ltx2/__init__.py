"""LTX-2 / LTX-2.5 (Lightricks): joint video and audio generation; the registry's ``ltx-2.5`` family.

Modules: ``config``, ``transformer``, ``keymap`` (the audio-video transformer, ``LTX2VideoTransformer3DModel``),
``sharding``, ``block_loop`` (its mesh and offloaded programs), ``connectors`` (the text features and the video /
audio text connectors), ``vae`` (the video VAE: frames <-> latents), ``diffusion_decoder`` (LTX-2.5's diffusion video
decoder: latents -> frames by its own few-step denoiser), ``audio_vae`` (the audio VAE: latents <-> mel spectrograms),
``vocoder`` (mel spectrogram -> waveform, with the 2.3+ bandwidth extension), ``audio`` (latents -> waveform),
``schedule`` (the dev and distilled sigma schedules and steps), ``pipeline`` (``LTX2Pipeline``: prompt (and first
frame) in, frames and audio out), ``layout``, ``release``, ``loading`` (diffusers folders, the release single file,
vidax-converted folders), ``convert``, ``inspection``, ``planner``, ``presets``, ``demo``, ``family``. The Gemma 4 text
tower is :mod:`vidax.encoders.gemma`.
"""
