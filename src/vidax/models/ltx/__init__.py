"""LTX-Video (Lightricks LTX-Video 0.9.x: 2B and 13B, dev and distilled): transformer, VAE, pipelines.

Modules: ``config`` (transformer architecture, presets), ``transformer``, ``vae`` (the video VAE and
its configuration), ``keymap`` (diffusers layout), ``sharding`` (mesh rules).
"""
