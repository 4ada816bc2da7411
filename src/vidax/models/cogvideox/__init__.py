"""CogVideoX (CogVideoX-2b, -5b, -5b-I2V, CogVideoX1.5-5B, -I2V): transformer, VAE, pipelines.

Modules: ``config`` (architectures, presets), ``transformer``, ``vae``, ``keymap`` (diffusers
layout), ``layout`` (checkpoint folders), ``sharding`` (mesh rules: TP + Ulysses SP over the joint
text + video sequence), ``pipeline`` (``CogVideoXPipeline``,
``CogVideoXImageToVideoPipeline``), ``block_loop`` (the step over block chunks: host loop, offloading),
``image`` (the I2V first frame, resized as the reference resizes it), ``demo`` (tiny checkpoints written
without PyTorch).
"""
