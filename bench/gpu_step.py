"""Real-size Wan2.1, HunyuanVideo, HunyuanVideo-1.5, Cosmos-Predict2.5 and Cosmos3 steps on one GPU: vidax (JAX) against
diffusers (PyTorch), called by ``bench/gpu.sh``.

Parts (each its own process, so device memory and peaks are its own):

- ``matmul``: the card's measured bf16 matmul rate (``jnp.matmul`` of 8192^3 bf16, mean of 10 after warm-up),
  the denominator of the model FLOP utilisation (MFU); its JSON also records the machine (GPU, versions).
- ``vidax --model 1.3b-480p|14b-720p``: random bf16 parameters built on the device from the spec tree
  (``abstract_params`` shapes filled by ``jax.random.normal`` in per-leaf jitted calls, no files),
  the pipeline's guided step (``vidax.models.wan.pipeline._cfg_step``: CFG batch 2, one program)
  compiled ahead of time, then timed steps; peak device memory from ``memory_stats()``.
- ``diffusers --model ...``: ``WanTransformer3DModel`` built on the GPU in bf16 from the same
  configuration (random init), two ``transformer(...)`` calls + guidance per step as
  ``diffusers.WanPipeline`` does, ``torch.no_grad()``; peak from ``torch.cuda.max_memory_allocated``.
- ``vidax --model hv-720p`` / ``diffusers --model hv-720p``: HunyuanVideo at the 13B width (24 heads x 128, MLP
  12288, the 2-block token refiner, text 4096 / pooled 768 wide) with 2 of its 20 dual-stream and 4 of its 40
  single-stream blocks (``bench.compare`` config e's transformer) at the paper row's token count (1280x720, 129
  frames: 118800 video tokens + 256 text tokens, :data:`HV_TEXT_VALID` of them valid). One transformer evaluation
  per step with the embedded guidance (6.0), as ``HunyuanVideoPipeline`` steps without true CFG: vidax the
  pipeline's ``_step`` (``vidax.models.hunyuanvideo.pipeline._step``, ``guided=False``) compiled ahead of time,
  attention ``auto`` (cuDNN on a GPU); diffusers ``HunyuanVideoTransformer3DModel`` in bf16 with the text mask
  (``scaled_dot_product_attention`` with a boolean mask: its memory-efficient kernel).
- ``vidax --model hv15-720p`` / ``diffusers --model hv15-720p``: HunyuanVideo-1.5 at the 8.3B width (16 heads x
  128, MLP 8192, the 2-block token refiner, Qwen 3584 / byT5 1472 / SigLIP 1152 wide) with 2 of its 54 blocks
  (``bench.compare`` config f's transformer) at the paper row's size (1280x720, 121 frames: 111600 video tokens),
  one guided step (classifier-free guidance 6.0, a batch of 2): vidax the pipeline's step
  (:func:`vidax.models.hunyuanvideo15.pipeline.step_hooks` around the transformer, the stack under ``lax.scan``),
  attention ``auto``; diffusers ``HunyuanVideo15Transformer3DModel`` in bf16, two evaluations per step as its pipeline's
  guider runs them, with the text-to-video pipeline's 729 zero image tokens (vidax's step leaves that stream out).
- ``vidax --model cosmos-720p`` / ``diffusers --model cosmos-720p``: Cosmos-Predict2.5 at the 2B width (16 heads x
  128, MLP 8192, AdaLN-LoRA 256, the release's 100352 -> 1024 ``crossattn_proj`` over 512 text tokens) with 2 of its
  28 blocks (``bench.compare`` config g's transformer) at the paper row's size (1280x704, 93 frames: 84480 video
  tokens), one guided step (guidance 7.0 as Cosmos writes it, a batch of 2, per-frame timesteps): vidax the
  pipeline's step (:func:`vidax.models.cosmos_predict25.pipeline.step_hooks` around the transformer, the stack under
  ``lax.scan``), attention ``auto``; diffusers ``CosmosTransformer3DModel`` in bf16, two evaluations per step as
  ``Cosmos2_5_PredictBasePipeline`` runs them (with its pixel padding mask; torchvision's resize restated from
  ``tests/_torchvision_restated.py`` where torchvision is absent).
- ``vidax --model cosmos3-edge-480p`` / ``diffusers --model cosmos3-edge-480p``: Cosmos3 at the Edge width (2048 = 16
  heads x 128, 8 key/value heads, MLP 9216 squared ReLU, Nemotron norms, the release's 131072-token vocabulary) with 2
  of its 28 layers, both streams (``bench.compare`` config h's transformer), at the paper row's size (832x480, 121
  frames: 12090 video tokens), one guided step (guidance 6.0, the prompt and negative prompt rows of
  :data:`COSMOS3_PROMPT_TOKENS` tokens): vidax the pipeline's programs (the und prefill once, timed apart, then the
  gen step with the und cache resident: :func:`vidax.models.cosmos3.planner.compile_resident`, the layers under
  ``lax.scan``), attention ``auto``; diffusers ``Cosmos3OmniTransformer`` in bf16, two calls per step over the joint
  sequence (prompt and video tokens) as ``Cosmos3OmniPipeline.__call__`` makes them (the und stream recomputed in
  each).
- ``vidax --model ltx2-22b-704p`` / ``diffusers --model ltx2-22b-704p``: the LTX-2.5 22B transformer's width (video
  32 heads x 128, audio 32 x 64, text 4096 / 2048 from the connectors, the 2.5 options) with 2 of its 48 blocks
  (``bench.compare`` config i's transformer) at the paper row's size (1216x704, 121 frames: 13376 video tokens, 126
  audio frames), the CFG batch of ``LTX2Pipeline``'s cond/uncond call over :data:`LTX2_TEXT_LEN` text tokens plus
  the guidance: vidax the transformer program (the blocks under ``lax.scan``), attention ``auto``; diffusers
  ``LTX2VideoTransformer3DModel`` in bf16.
- ``estimate``: the memory estimate of each model/dtype/attention (no device needed; ``report`` computes it when
  the results have none).
- ``report RESULTS_DIR``: (here, after the run) writes the "GPU" section of docs/benchmarks.md.

Attention: vidax has ``xla`` (full score matrix) and ``chunked`` (query chunks of 1024); there is no
cuDNN/flash path in the engine yet. At 832x480x81 the full score matrix alone is 2 x 12 x 32760^2 fp32
= 96 GiB, at 1280x720x81 2 x 40 x 75600^2 = 1.7 TiB, so both run ``chunked``; diffusers uses PyTorch's
``scaled_dot_product_attention`` (flash / memory-efficient kernels).

Each part writes one JSON file into ``--out-dir``. Time: ``--steps`` timed steps after one warm-up.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

MODELS = {
    # name: (WanTransformerConfig fields, (frames, height, width))
    "1.3b-480p": (dict(num_attention_heads=12, attention_head_dim=128, ffn_dim=8960, num_layers=30), (81, 480, 832)),
    "14b-720p": (dict(num_attention_heads=40, attention_head_dim=128, ffn_dim=13824, num_layers=40), (81, 720, 1280)),
    # a CPU-sized check of the script itself (tests), not a benchmark
    "tiny": (dict(num_attention_heads=2, attention_head_dim=32, ffn_dim=64, num_layers=2), (9, 64, 64)),
}
BENCH_MODELS = ("1.3b-480p", "14b-720p")
COMMON = dict(patch_size=(1, 2, 2), in_channels=16, out_channels=16, text_dim=4096, freq_dim=256, cross_attn_norm=True,
              qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=1024)
TEXT_LEN = 512
GUIDANCE = 5.0
GiB = 2**30

# HunyuanVideo 13B width (diffusers HunyuanVideoTransformer3DModel's defaults = the release's config), a few blocks.
HV_COMMON = dict(in_channels=16, out_channels=16, num_attention_heads=24, attention_head_dim=128, num_refiner_layers=2,
                 mlp_ratio=4.0, patch_size=2, patch_size_t=1, qk_norm="rms_norm", guidance_embeds=True,
                 text_embed_dim=4096, pooled_projection_dim=768, rope_theta=256.0, rope_axes_dim=(16, 56, 56))
HV_MODELS = {
    # name: (HunyuanVideoTransformerConfig fields over HV_COMMON, (frames, height, width))
    "hv-720p": (dict(num_layers=2, num_single_layers=4), (129, 720, 1280)),  # bench.compare config e's blocks
    # the release's full depth: sizes and FLOPs only (estimate, tests), not run
    "hv-13b": (dict(num_layers=20, num_single_layers=40), (129, 720, 1280)),
    # a CPU-sized check of the script itself (tests), not a benchmark
    "hv-tiny": (dict(num_attention_heads=2, attention_head_dim=16, num_layers=1, num_single_layers=1,
                     num_refiner_layers=1, text_embed_dim=32, pooled_projection_dim=32, rope_axes_dim=(4, 6, 6)),
                (9, 64, 64)),
}
HV_BENCH_MODELS = ("hv-720p",)
HV_TEXT_LEN = 256  # the pipeline's max_sequence_length: the text rows of every joint attention
HV_TEXT_VALID = 64  # of them valid (the mask's ones): a prompt of a few sentences
HV_GUIDANCE = 6.0

# HunyuanVideo-1.5 8.3B width (diffusers HunyuanVideo15Transformer3DModel's defaults = the release's config), a few
# blocks: bench.compare config f's transformer.
HV15_COMMON = dict(in_channels=65, out_channels=32, num_attention_heads=16, attention_head_dim=128,
                   num_refiner_layers=2, mlp_ratio=4.0, patch_size=1, patch_size_t=1, qk_norm="rms_norm", text_embed_dim=3584,
                   text_embed_2_dim=1472, image_embed_dim=1152, rope_theta=256.0, rope_axes_dim=(16, 56, 56),
                   target_size=640, task_type="t2v")
HV15_MODELS = {
    # name: (HunyuanVideo15TransformerConfig fields over HV15_COMMON, (frames, height, width))
    "hv15-720p": (dict(num_layers=2), (121, 720, 1280)),  # bench.compare config f's blocks, the paper row's size
    # the release's full depth: sizes and FLOPs only (estimate, tests), not run
    "hv15-8.3b": (dict(num_layers=54), (121, 720, 1280)),
    # a CPU-sized check of the script itself (tests), not a benchmark
    "hv15-tiny": (dict(num_attention_heads=2, attention_head_dim=16, num_layers=1, num_refiner_layers=1,
                       text_embed_dim=32, text_embed_2_dim=24, image_embed_dim=16, rope_axes_dim=(4, 6, 6)),
                  (9, 64, 64)),
}
HV15_BENCH_MODELS = ("hv15-720p",)
HV15_TEXT_LEN, HV15_GLYPH_LEN, HV15_IMAGE_TOKENS = 1000, 256, 729  # the pipelines' Qwen, byT5 and SigLIP tokens
HV15_TEXT_VALID = 64  # Qwen tokens valid (the mask's ones); no glyph text (the byT5 mask all zero)
HV15_GUIDANCE = 6.0


# Cosmos-Predict2.5 2B width (diffusers scripts/convert_cosmos_to_diffusers.py TRANSFORMER_CONFIGS
# "Cosmos-2.5-Predict-Base-2B"), a few blocks: bench.compare config g's transformer with the release's 100352-wide
# crossattn_proj (28 Qwen layers x 3584).
COSMOS_COMMON = dict(in_channels=17, out_channels=16, num_attention_heads=16, attention_head_dim=128, mlp_ratio=4.0,
                     text_embed_dim=1024, adaln_lora_dim=256, max_size=(128, 240, 240), patch_size=(1, 2, 2),
                     rope_scale=(1.0, 3.0, 3.0), concat_padding_mask=True, extra_pos_embed_type=None,
                     use_crossattn_projection=True, crossattn_proj_in_channels=100352,
                     encoder_hidden_states_channels=1024)
COSMOS_MODELS = {
    # name: (CosmosTransformerConfig fields over COSMOS_COMMON, (frames, height, width))
    "cosmos-720p": (dict(num_layers=2), (93, 704, 1280)),  # bench.compare config g's blocks, the paper row's size
    # the release's full depth: sizes and FLOPs only (estimate, tests), not run
    "cosmos-2b": (dict(num_layers=28), (93, 704, 1280)),
    # a CPU-sized check of the script itself (tests), not a benchmark
    "cosmos-tiny": (dict(num_attention_heads=2, attention_head_dim=16, num_layers=1, text_embed_dim=32,
                         adaln_lora_dim=8, crossattn_proj_in_channels=96, encoder_hidden_states_channels=32),
                    (9, 64, 64)),
}
COSMOS_BENCH_MODELS = ("cosmos-720p",)
COSMOS_TEXT_LEN = 512  # the pipeline's prompt length: every cross-attention's keys (no mask)
COSMOS_GUIDANCE = 7.0


def cosmos_config(name: str) -> dict:
    """The model's ``CosmosTransformer3DModel`` constructor arguments."""
    fields, _ = COSMOS_MODELS[name]
    return {**COSMOS_COMMON, **fields}


def cosmos_tokens(name: str) -> int:
    """Video tokens of the model's size (patches of 2x2; the text is cross-attended)."""
    f, h, w = COSMOS_MODELS[name][1]
    _, _, t, hh, ww = latent_shape(f, h, w)
    return t * (hh // 2) * (ww // 2)


def cosmos_step_flops(name: str) -> float:
    """Model FLOPs of one guided step (both CFG halves, each batch 1): matmuls and attention, 2 FLOP per MAC; the
    per-frame AdaLN-LoRA projections ignored."""
    c = cosmos_config(name)
    d = c["num_attention_heads"] * c["attention_head_dim"]
    m, s, L = int(d * c["mlp_ratio"]), cosmos_tokens(name), COSMOS_TEXT_LEN
    per_block = (2 * s * d * d * 4 + 2 * 2 * s * s * d  # self-attention projections, scores and values
                 + 2 * s * d * d * 2 + 2 * L * c["text_embed_dim"] * d * 2 + 2 * 2 * s * L * d  # cross-attention
                 + 2 * s * d * m * 2)  # feed-forward
    embed = (2 * L * c["crossattn_proj_in_channels"] * c["encoder_hidden_states_channels"]
             + 2 * s * (c["in_channels"] + 1) * 4 * d + 2 * s * d * 4 * c["out_channels"])
    return 2.0 * (c["num_layers"] * per_block + embed)


def cosmos_param_count(name: str) -> int:
    """Parameters of the model, counted on vidax's spec tree (one declaration per weight)."""
    import math

    import jax

    from vidax.core.params import abstract_params
    from vidax.models.cosmos_predict25.config import CosmosTransformerConfig
    from vidax.models.cosmos_predict25.transformer import transformer_specs

    tree = abstract_params(transformer_specs(CosmosTransformerConfig(**cosmos_config(name))), "float32")
    return sum(math.prod(a.shape) for a in jax.tree.leaves(tree))


def cosmos_estimate(name: str, dtype_bytes: int = 2) -> dict:
    """A rough peak-memory estimate of the guided step (batch 2) with a fused (flash-style) attention: weights + live
    activations."""
    c = cosmos_config(name)
    d = c["num_attention_heads"] * c["attention_head_dim"]
    n = 2 * cosmos_tokens(name)
    m = int(d * c["mlp_ratio"])
    weights = cosmos_param_count(name) * dtype_bytes
    text = 2 * COSMOS_TEXT_LEN * c["crossattn_proj_in_channels"] * 4  # the float32 prompt embeddings
    residual = n * d * 4 * 3  # fp32 stream, its normed copy, the block output
    qkv = n * d * dtype_bytes * 4
    mlp = n * m * (4 + dtype_bytes)
    peak_act = text + residual + max(qkv, mlp)
    return {"weights": weights, "activations": peak_act, "scores": 0, "total": weights + peak_act}


# Cosmos3 Edge (vidax.models.cosmos3.config.RELEASE_CONFIGS["Cosmos3-Edge"], video generation only: no sound or
# action heads), a few layers: bench.compare config h's transformer with the release's vocabulary.
COSMOS3_COMMON = dict(hidden_size=2048, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                      intermediate_size=9216, rms_norm_eps=1e-5, rope_theta=100000000.0, rope_axes_dim=[24, 20, 20],
                      rope_scaling={"mrope_section": [24, 20, 20], "rope_type": "default"}, hidden_act="relu2",
                      qk_norm_for_text=False, use_und_k_norm_for_gen=True, vocab_size=131072, latent_channel=48,
                      latent_patch_size=2, patch_latent_dim=192, attention_bias=False, base_fps=24,
                      enable_fps_modulation=True, timestep_scale=0.001, action_gen=False, sound_gen=False)
COSMOS3_MODELS = {
    # name: (Cosmos3OmniTransformer fields over COSMOS3_COMMON, (frames, height, width))
    "cosmos3-edge-480p": (dict(num_hidden_layers=2), (121, 480, 832)),  # config h's layers, the paper row's size
    # the release's full depth: sizes and FLOPs only (estimate, tests), not run
    "cosmos3-edge": (dict(num_hidden_layers=28), (121, 480, 832)),
    # a CPU-sized check of the script itself (tests), not a benchmark
    "cosmos3-tiny": (dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=16, num_hidden_layers=1, rope_axes_dim=[4, 2, 2], vocab_size=512,
                          rope_scaling={"mrope_section": [4, 2, 2], "rope_type": "default"}), (9, 64, 64)),
}
COSMOS3_BENCH_MODELS = ("cosmos3-edge-480p",)
COSMOS3_PROMPT_TOKENS = (300, 260)  # the prompt's and the negative prompt's tokens (chat frame and sentences included)
COSMOS3_GUIDANCE = 6.0
COSMOS3_FPS = 24.0


def cosmos3_config(name: str) -> dict:
    """The model's ``Cosmos3OmniTransformer`` constructor arguments."""
    fields, _ = COSMOS3_MODELS[name]
    return {**COSMOS3_COMMON, **fields}


def cosmos3_latent_shape(frames, height, width):
    return (1, 48, (frames - 1) // 4 + 1, height // 16, width // 16)  # the Wan2.2 VAE: 48 channels, 16x spatial


def cosmos3_tokens(name: str) -> int:
    """Video tokens of the model's size (latent patches of 2x2)."""
    _, _, t, hh, ww = cosmos3_latent_shape(*COSMOS3_MODELS[name][1])
    return t * (-(-hh // 2)) * (-(-ww // 2))


def cosmos3_step_flops(name: str, recompute: bool = False) -> float:
    """Model FLOPs of one guided step (the prompt's and the negative prompt's rows, each over the same video tokens):
    the generation stream's matmuls and attention over ``[video; prompt]`` keys, 2 FLOP per MAC. ``recompute``: plus
    the understanding stream over each prompt (causal, counted as half the score matrix), which diffusers runs at
    every step and vidax once per call."""
    c = cosmos3_config(name)
    d, m, hd = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    n = cosmos3_tokens(name)

    def layer(s, keys):  # projections, scores and values, the squared-ReLU MLP (up, down)
        return 2 * s * d * (q + 2 * kv) + 2 * s * q * d + 2 * 2 * s * keys * q + 2 * s * d * m * 2

    total = 0.0
    for L in COSMOS3_PROMPT_TOKENS:
        total += c["num_hidden_layers"] * layer(n, n + L) + 2 * n * c["patch_latent_dim"] * d * 2
        if recompute:
            total += c["num_hidden_layers"] * layer(L, L / 2)
    return float(total)


def cosmos3_param_count(name: str) -> int:
    """Parameters of the model for video generation (no ``lm_head``), counted on vidax's spec tree."""
    from vidax.models.cosmos3.config import Cosmos3TransformerConfig
    from vidax.models.cosmos3.planner import parameter_counts

    return parameter_counts(Cosmos3TransformerConfig.from_dict(cosmos3_config(name)))["total"]


def cosmos3_estimate(name: str, dtype_bytes: int = 2) -> dict:
    """A rough peak-memory estimate of the guided gen step (2 rows) with a fused (flash-style) attention: weights, the
    und cache, live activations."""
    c = cosmos3_config(name)
    d = c["hidden_size"]
    rows, L = 2, max(COSMOS3_PROMPT_TOKENS)
    n = rows * cosmos3_tokens(name)
    weights = cosmos3_param_count(name) * dtype_bytes
    cache = 2 * c["num_hidden_layers"] * rows * L * c["num_key_value_heads"] * c["head_dim"] * dtype_bytes
    residual = n * d * 4 * 3  # fp32 stream, its normed copy, the layer output
    qkv = n * (c["num_attention_heads"] + 2 * c["num_key_value_heads"]) * c["head_dim"] * dtype_bytes * 2
    mlp = n * c["intermediate_size"] * (4 + dtype_bytes)
    peak_act = cache + residual + max(qkv, mlp)
    return {"weights": weights, "activations": peak_act, "scores": 0, "total": weights + peak_act}


# LTX-2.5 22B (vidax.models.ltx2.planner.LTX25_TRANSFORMER; bench.compare config i's transformer), a few blocks: video
# 32 heads x 128, audio 32 x 64, text 4096 / 2048 wide from the connectors, the 2.5 options.
LTX2_COMMON = dict(gated_attn=True, audio_gated_attn=True, cross_attn_mod=True, audio_cross_attn_mod=True,
                   rope_type="split", rope_double_precision=False, use_prompt_embeddings=False,
                   use_prompt_adaln_single=True, use_keyframes_abs_pos_embedding=True, perturbed_attn=True,
                   cross_attn_timestep_scale_multiplier=1)
LTX2_MODELS = {
    # name: (LTX2VideoTransformer3DModel fields over LTX2_COMMON, (frames, height, width))
    "ltx2-22b-704p": (dict(num_layers=2), (121, 704, 1216)),  # config i's blocks, the paper row's size
    # the release's full depth: sizes and FLOPs only (estimate, tests), not run
    "ltx2-22b": (dict(num_layers=48), (121, 704, 1216)),
    # a CPU-sized check of the script itself (tests), not a benchmark
    "ltx2-tiny": (dict(num_attention_heads=2, attention_head_dim=8, cross_attention_dim=16, audio_in_channels=8,
                       audio_out_channels=8, audio_num_attention_heads=2, audio_attention_head_dim=8,
                       audio_cross_attention_dim=16, num_layers=1), (9, 64, 64)),
}
LTX2_BENCH_MODELS = ("ltx2-22b-704p",)
LTX2_TEXT_LEN = 1024  # the connectors' output rows (the release pads the prompt to 1024 tokens)
LTX2_GUIDANCE = 3.0
LTX2_FPS = 24.0


def ltx2_config(name: str) -> dict:
    """The model's ``LTX2VideoTransformer3DModel`` constructor arguments."""
    fields, _ = LTX2_MODELS[name]
    return {**LTX2_COMMON, **fields}


def ltx2_latent_shape(frames, height, width):
    return (1, 128, (frames - 1) // 8 + 1, height // 32, width // 32)  # the LTX-2 VAE: 8x time, 32x space


def ltx2_tokens(name: str) -> int:
    _, _, f, h, w = ltx2_latent_shape(*LTX2_MODELS[name][1])
    return f * h * w


def ltx2_audio_frames(name: str) -> int:
    """``LTX2Pipeline``'s audio latent frames: ``round(frames / fps * 16000 / 160 / 4)`` (126 at 121 frames)."""
    return round(LTX2_MODELS[name][1][0] / LTX2_FPS * 16000 / 160 / 4)


def ltx2_param_count(name: str) -> int:
    import math

    from vidax.core.params import flatten
    from vidax.models.ltx2.config import LTX2TransformerConfig
    from vidax.models.ltx2.transformer import transformer_specs

    specs = transformer_specs(LTX2TransformerConfig.from_dict(ltx2_config(name)))
    return sum(math.prod(s.shape) for _, s in flatten(specs))


def ltx2_step_flops(name: str) -> float:
    """Model FLOPs of one guided evaluation (the CFG batch of 2 rows): per block and stream the q/k/v/out projections,
    the scores and values of the self, text and cross-modal attentions, the 4x FFN; 2 FLOP per MAC."""
    from vidax.models.ltx2.config import LTX2TransformerConfig

    c = LTX2TransformerConfig.from_dict(ltx2_config(name))
    d, da, s, t, L = c.inner_dim, c.audio_inner_dim, ltx2_tokens(name), ltx2_audio_frames(name), LTX2_TEXT_LEN
    cross, across = c.cross_attention_dim, c.audio_cross_attention_dim
    video = (2 * s * d * 4 * d + 4 * s * s * d  # self: projections, scores + values
             + 2 * s * d * 2 * d + 2 * L * cross * 2 * d + 4 * s * L * d  # text: q / out, k / v, attention
             + 2 * s * d * 2 * da + 2 * t * da * 2 * da + 4 * s * t * da  # audio->video: q / out, k / v, attention
             + 2 * s * d * 8 * d)  # FFN
    audio = (2 * t * da * 4 * da + 4 * t * t * da + 2 * t * da * 2 * da + 2 * L * across * 2 * da + 4 * t * L * da
             + 2 * t * da * 2 * da + 2 * s * d * 2 * da + 4 * t * s * da + 2 * t * da * 8 * da)
    return float(2 * c.num_layers * (video + audio))


def ltx2_estimate(name: str, dtype_bytes: int = 2) -> dict:
    """A rough peak-memory estimate of the guided step (2 rows) with a fused attention: weights, the float32 streams,
    the larger of the FFN hidden and q/k/v."""
    from vidax.models.ltx2.config import LTX2TransformerConfig

    c = LTX2TransformerConfig.from_dict(ltx2_config(name))
    s, t = 2 * ltx2_tokens(name), 2 * ltx2_audio_frames(name)
    weights = ltx2_param_count(name) * dtype_bytes
    residual = (s * c.inner_dim + t * c.audio_inner_dim) * 4 * 3
    qkv = s * c.inner_dim * dtype_bytes * 4
    ffn = s * 4 * c.inner_dim * (4 + dtype_bytes)
    act = residual + max(qkv, ffn) + 2 * LTX2_TEXT_LEN * (c.cross_attention_dim + c.audio_cross_attention_dim) * 4
    return {"weights": weights, "activations": act, "scores": 0, "total": weights + act}


def hv15_config(name: str) -> dict:
    """The model's ``HunyuanVideo15Transformer3DModel`` constructor arguments."""
    fields, _ = HV15_MODELS[name]
    return {**HV15_COMMON, **fields}


def hv15_latent_shape(frames, height, width):
    return (1, 32, (frames - 1) // 4 + 1, height // 16, width // 16)


def hv15_tokens(name: str) -> int:
    """Video tokens of the model's size (patch 1; the context joins them in attention)."""
    _, _, t, h, w = hv15_latent_shape(*HV15_MODELS[name][1])
    return t * h * w


def hv15_step_flops(name: str, context: int = HV15_TEXT_LEN + HV15_GLYPH_LEN) -> float:
    """Model FLOPs of one guided step (both CFG halves, each batch 1): matmuls and attention over the joint sequence of
    the video and ``context`` tokens (padding included, as both engines compute it; vidax's text-to-video step has the
    1256 text tokens, diffusers' adds 729 masked image tokens), 2 FLOP per MAC; AdaLN projections ignored."""
    c = hv15_config(name)
    d = c["num_attention_heads"] * c["attention_head_dim"]
    m, s, L = int(d * c["mlp_ratio"]), hv15_tokens(name), HV15_TEXT_LEN
    n = s + context
    block = 2 * n * (4 * d * d + 2 * d * m) + 2 * 2 * n * n * d  # per-stream q, k, v, out and MLP; joint attention
    refiner = 2 * L * (4 * d * d + 2 * d * 4 * d) + 2 * 2 * L * L * d
    embed = 2 * L * c["text_embed_dim"] * d + 2 * s * c["in_channels"] * d + 2 * s * d * c["out_channels"]
    return 2.0 * (c["num_layers"] * block + c["num_refiner_layers"] * refiner + embed)


def hv15_param_count(name: str) -> int:
    """Parameters of the model, counted on vidax's spec tree (one declaration per weight)."""
    import math

    import jax

    from vidax.core.params import abstract_params
    from vidax.models.hunyuanvideo15.config import HunyuanVideo15TransformerConfig
    from vidax.models.hunyuanvideo15.transformer import transformer_specs

    tree = abstract_params(transformer_specs(HunyuanVideo15TransformerConfig(**hv15_config(name))), "float32")
    return sum(math.prod(a.shape) for a in jax.tree.leaves(tree))


def hv15_estimate(name: str, dtype_bytes: int = 2) -> dict:
    """A rough peak-memory estimate of the guided step (batch 2) with a fused (flash-style) attention: weights + live
    activations."""
    c = hv15_config(name)
    d = c["num_attention_heads"] * c["attention_head_dim"]
    n = 2 * (hv15_tokens(name) + HV15_TEXT_LEN + HV15_GLYPH_LEN)
    m = int(d * c["mlp_ratio"])
    weights = hv15_param_count(name) * dtype_bytes
    residual = n * d * 4 * 3  # fp32 stream, its normed copy, the block output
    qkv = n * d * dtype_bytes * 4
    mlp = n * m * (4 + dtype_bytes)
    peak_act = residual + max(qkv, mlp)
    return {"weights": weights, "activations": peak_act, "scores": 0, "total": weights + peak_act}


def hv_config(name: str) -> dict:
    """The model's ``HunyuanVideoTransformer3DModel`` constructor arguments."""
    fields, _ = HV_MODELS[name]
    return {**HV_COMMON, **fields}


def hv_tokens(name: str) -> int:
    """Video tokens of the model's size (the text's :data:`HV_TEXT_LEN` rows join them in attention)."""
    f, h, w = HV_MODELS[name][1]
    _, _, t, hh, ww = latent_shape(f, h, w)
    return t * (hh // 2) * (ww // 2)


def hv_step_flops(name: str) -> float:
    """Model FLOPs of one step (one evaluation, batch 1): matmuls and attention over the whole joint sequence
    (padding included, as both engines compute it), 2 FLOP per MAC; per-sample modulation projections ignored."""
    c = hv_config(name)
    d = c["num_attention_heads"] * c["attention_head_dim"]
    m, s, L = int(d * c["mlp_ratio"]), hv_tokens(name), HV_TEXT_LEN
    n = s + L
    attn = 2 * 2 * n * n * d  # scores and values over the joint sequence
    dual = 2 * n * (4 * d * d + 2 * d * m) + attn  # per-stream q, k, v, out and MLP (video rows + text rows)
    single = 2 * n * (d * (3 * d + m) + (d + m) * d) + attn  # fused q, k, v + MLP up; fused out + MLP down
    refiner = 2 * L * (4 * d * d + 2 * d * 4 * d) + 2 * 2 * L * L * d
    embed = 2 * L * c["text_embed_dim"] * d + 2 * s * c["in_channels"] * 4 * d + 2 * s * d * c["out_channels"] * 4
    return c["num_layers"] * dual + c["num_single_layers"] * single + c["num_refiner_layers"] * refiner + embed


def hv_param_count(name: str) -> int:
    """Parameters of the model, counted on vidax's spec tree (one declaration per weight)."""
    import math

    import jax

    from vidax.core.params import abstract_params
    from vidax.models.hunyuanvideo.config import HunyuanVideoTransformerConfig
    from vidax.models.hunyuanvideo.transformer import transformer_specs

    tree = abstract_params(transformer_specs(HunyuanVideoTransformerConfig(**hv_config(name))), "float32")
    return sum(math.prod(a.shape) for a in jax.tree.leaves(tree))


def hv_estimate(name: str, dtype_bytes: int = 2) -> dict:
    """A rough peak-memory estimate of the step with a fused (flash-style) attention: weights + live activations."""
    c = hv_config(name)
    d = c["num_attention_heads"] * c["attention_head_dim"]
    n = hv_tokens(name) + HV_TEXT_LEN
    m = int(d * c["mlp_ratio"])
    weights = hv_param_count(name) * dtype_bytes
    residual = n * d * 4 * 3  # fp32 stream, its normed copy, the block output
    qkv = n * d * dtype_bytes * 4
    mlp = n * m * (4 + dtype_bytes)
    peak_act = residual + max(qkv, mlp + qkv)  # the single-stream block holds attention and MLP inputs together
    return {"weights": weights, "activations": peak_act, "scores": 0, "total": weights + peak_act}


def latent_shape(frames, height, width):
    return (1, 16, (frames - 1) // 4 + 1, height // 8, width // 8)


def tokens(name: str) -> int:
    f, h, w = MODELS[name][1]
    _, _, t, hh, ww = latent_shape(f, h, w)
    return t * (hh // 2) * (ww // 2)


def step_flops(name: str) -> float:
    """Model FLOPs of one guided step (both CFG halves): matmuls and attention, 2 FLOP per MAC."""
    cfg, _ = MODELS[name]
    d = cfg["num_attention_heads"] * cfg["attention_head_dim"]
    f, L, s = cfg["ffn_dim"], cfg["num_layers"], tokens(name)
    per_layer = (
        2 * s * d * d * 4  # self-attention q, k, v, out
        + 2 * 2 * s * s * d  # self-attention scores and values
        + 2 * s * d * d * 2  # cross-attention q, out
        + 2 * TEXT_LEN * d * d * 2  # cross-attention k, v over the text tokens
        + 2 * 2 * s * TEXT_LEN * d  # cross-attention scores and values
        + 2 * s * d * f * 2  # FFN
    )
    embed = 2 * TEXT_LEN * (4096 * d + d * d) + 2 * s * 16 * 4 * d * 2  # text embedder, patch in/out
    return 2.0 * (L * per_layer + embed)  # CFG: batch of 2


def param_count(name: str) -> int:
    cfg, _ = MODELS[name]
    d, f, L = cfg["num_attention_heads"] * cfg["attention_head_dim"], cfg["ffn_dim"], cfg["num_layers"]
    block = 8 * (d * d + d) + 2 * (d * f) + f + d + 6 * d + 4 * d + 2 * d
    return L * block + 4096 * d + d * d + 256 * d + d * d + 6 * d * d + 16 * 4 * d + d * 64 + 2 * d


def estimate(name: str, dtype_bytes: int = 2, chunk: int | None = 1024) -> dict:
    """A rough peak-memory estimate of the guided step (bytes): weights + the largest live activations."""
    cfg, _ = MODELS[name]
    d, f, h = cfg["num_attention_heads"] * cfg["attention_head_dim"], cfg["ffn_dim"], cfg["num_attention_heads"]
    s, b = tokens(name), 2
    weights = param_count(name) * dtype_bytes
    residual = b * s * d * 4 * 3  # fp32 stream, its normed copy, the block output
    qkv = b * s * d * dtype_bytes * 4  # q, k, v, attention output
    ffn = b * s * f * (4 + dtype_bytes)  # fp32 accumulation + activation in the weight dtype
    rows = chunk if chunk else s
    scores = b * h * rows * s * (4 + 4 + dtype_bytes)  # scores, softmax (fp32), probabilities cast to the dtype
    peak_act = residual + max(qkv + scores, ffn)
    return {"weights": weights, "activations": peak_act, "scores": scores, "total": weights + peak_act}


# ------------------------------------------------------------------------------------ parts


def _dev_peak():
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    return int(stats.get("peak_bytes_in_use", 0)), int(stats.get("bytes_limit", 0))


def part_matmul(n: int = 8192, reps: int = 10) -> dict:
    import jax
    import jax.numpy as jnp

    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (n, n), jnp.bfloat16)
    b = jax.random.normal(kb, (n, n), jnp.bfloat16)
    mm = jax.jit(lambda x, y: jnp.matmul(x, y, preferred_element_type=jnp.float32).astype(jnp.bfloat16))
    for _ in range(3):
        mm(a, b).block_until_ready()
    t0 = time.perf_counter()
    for _ in range(reps):
        out = mm(a, b)
    out.block_until_ready()
    s = (time.perf_counter() - t0) / reps
    return {"part": "matmul", "n": n, "seconds": s, "tflops": 2 * n**3 / s / 1e12, "device": str(jax.devices()[0]),
            "jax": jax.__version__}


def _device_params(abstract) -> tuple[dict, int]:
    """Random parameters of an abstract tree, made on the device leaf by leaf; ``(params, bytes)``."""
    import jax
    import jax.numpy as jnp

    leaves, treedef = jax.tree.flatten(abstract)
    keys = jax.random.split(jax.random.key(0), len(leaves))
    gen = jax.jit(lambda key, shape, dt: (jax.random.normal(key, shape, jnp.float32) * 0.02).astype(dt),
                  static_argnums=(1, 2))  # one small program per distinct leaf shape: no full-size temporaries
    made = [gen(k, a.shape, a.dtype) for k, a in zip(keys, leaves)]
    params = jax.tree.unflatten(treedef, made)
    jax.block_until_ready(params)
    return params, sum(x.nbytes for x in made)


def _attention_request(attention: str) -> str:
    """``attention`` if the engine has it, else ``chunked`` (an engine without that kernel runs what it has)."""
    from vidax.core.attention import AttentionImpl

    try:
        AttentionImpl(attention)
        return attention
    except ValueError:
        return "chunked"


def _timed_steps(run, steps: int) -> tuple[float, list[float]]:
    """``(first call s, [s per later call])``: ``run()`` must block until its result is ready."""
    t0 = time.perf_counter()
    run()
    first = time.perf_counter() - t0
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return first, times


def _xla_figures(compiled) -> tuple[int | None, float | None]:
    """XLA's temporaries (bytes) and FLOP count of a compiled program, where it reports them."""
    mem = compiled.memory_analysis()
    temp = int(getattr(mem, "temp_size_in_bytes", 0)) if mem is not None else None
    try:
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, (list, tuple)) else cost
        flops = float(cost.get("flops", 0.0)) or None
    except Exception:
        flops = None
    return temp, flops


def part_vidax(name: str, steps: int, attention: str) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from vidax.core.params import abstract_params
    from vidax.models.wan.config import WanTransformerConfig
    from vidax.models.wan.pipeline import _cfg_step
    from vidax.models.wan.transformer import rope_tables, transformer_specs

    requested, attention = attention, _attention_request(attention)  # an engine without that kernel: say so
    fields, (f, h, w) = MODELS[name]
    cfg = WanTransformerConfig(**COMMON, **fields)
    shape = latent_shape(f, h, w)
    dtype = jnp.bfloat16
    t0 = time.perf_counter()
    params, weight_bytes = _device_params(abstract_params(transformer_specs(cfg), dtype))
    init_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal(shape, dtype=np.float32))
    context = jnp.asarray(rng.standard_normal((2, TEXT_LEN, cfg.text_dim), dtype=np.float32)).astype(dtype)
    cos, sin = (jnp.asarray(a) for a in rope_tables(cfg, shape))
    args = (params, x, jnp.full((1,), 999.0, jnp.float32), context, cos, sin, jnp.float32(GUIDANCE))
    step = jax.jit(_cfg_step, static_argnames=("cfg", "attention_impl", "guided"))
    import warnings

    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as w:  # e.g. a kernel falling back to chunked
        warnings.simplefilter("always")
        compiled = step.lower(*args, cfg=cfg, attention_impl=attention, guided=True).compile()
    caught = [str(x.message)[:200] for x in w]
    compile_s = time.perf_counter() - t0
    temp, xla_flops = _xla_figures(compiled)
    first_s, times = _timed_steps(lambda: compiled(*args).block_until_ready(), steps)
    peak, limit = _dev_peak()
    return {"part": "vidax", "model": name, "attention": attention, "attention_requested": requested,
            "warnings": sorted(set(caught)), "dtype": "bfloat16", "tokens": tokens(name),
            "init_s": init_s, "compile_s": compile_s, "first_step_s": first_s, "step_s": times,
            "peak_device_bytes": peak, "device_bytes_limit": limit, "weight_bytes": weight_bytes,
            "xla_temp_bytes": temp, "xla_flops": xla_flops, "model_flops": step_flops(name), "jax": jax.__version__}


def part_diffusers(name: str, steps: int) -> dict:
    import torch
    from diffusers import WanTransformer3DModel

    fields, (f, h, w) = MODELS[name]
    cfg = {**COMMON, **fields, "patch_size": list(COMMON["patch_size"])}
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    torch.set_default_dtype(torch.bfloat16)  # built directly in bf16 on the device (all modules bf16)
    try:
        with dev:
            model = WanTransformer3DModel(**cfg).eval()
    finally:
        torch.set_default_dtype(torch.float32)
    sync()
    init_s = time.perf_counter() - t0
    gen = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(latent_shape(f, h, w), generator=gen, device=dev).to(torch.bfloat16)
    pe = torch.randn((1, TEXT_LEN, 4096), generator=gen, device=dev).to(torch.bfloat16)
    ne = torch.randn((1, TEXT_LEN, 4096), generator=gen, device=dev).to(torch.bfloat16)
    t = torch.full((1,), 999.0, device=dev)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()

    def step():
        with torch.no_grad():
            with model.cache_context("cond", step_index=0, sigma=1.0, num_inference_steps=1):
                c = model(hidden_states=x, timestep=t, encoder_hidden_states=pe, return_dict=False)[0]
            with model.cache_context("uncond", step_index=0, sigma=1.0, num_inference_steps=1):
                u = model(hidden_states=x, timestep=t, encoder_hidden_states=ne, return_dict=False)[0]
            return u + GUIDANCE * (c - u)

    t0 = time.perf_counter()
    step()
    sync()
    first_s = time.perf_counter() - t0
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    import diffusers

    return {"part": "diffusers", "model": name, "dtype": "bfloat16", "tokens": tokens(name), "init_s": init_s,
            "first_step_s": first_s, "step_s": times, "peak_device_bytes": int(torch.cuda.max_memory_allocated()) if dev.type == "cuda" else 0,
            "device": str(dev),
            "weight_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
            "model_flops": step_flops(name), "torch": torch.__version__, "diffusers": diffusers.__version__,
            "sdpa": "torch.nn.functional.scaled_dot_product_attention (default backend choice)"}


def part_vidax_hv(name: str, steps: int, attention: str) -> dict:
    """vidax's HunyuanVideo step (the pipeline's ``_step``, one evaluation with embedded guidance) on random bf16
    parameters made on the device, compiled ahead of time; ``steps`` timed calls after one warm-up."""
    import warnings

    import jax
    import jax.numpy as jnp
    import numpy as np

    from vidax.core.attention import ran_label, recording
    from vidax.core.params import abstract_params
    from vidax.models.hunyuanvideo.config import HunyuanVideoTransformerConfig
    from vidax.models.hunyuanvideo.pipeline import _step
    from vidax.models.hunyuanvideo.transformer import guidance_input, transformer_specs

    requested, attention = attention, _attention_request(attention)
    cfg = HunyuanVideoTransformerConfig(**hv_config(name))
    f, h, w = HV_MODELS[name][1]
    shape = latent_shape(f, h, w)
    dtype = jnp.bfloat16
    t0 = time.perf_counter()
    params, weight_bytes = _device_params(abstract_params(transformer_specs(cfg), dtype))
    init_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal(shape, dtype=np.float32))
    context = jnp.asarray(rng.standard_normal((1, HV_TEXT_LEN, cfg.text_embed_dim), dtype=np.float32)).astype(dtype)
    mask = jnp.asarray((np.arange(HV_TEXT_LEN) < HV_TEXT_VALID)[None].astype(np.int32))
    pooled = jnp.asarray(rng.standard_normal((1, cfg.pooled_projection_dim), dtype=np.float32)).astype(dtype)
    guidance = jnp.asarray(guidance_input(HV_GUIDANCE, 1, dtype))
    args = (params, x, jnp.full((1,), 1000.0, jnp.float32), context, mask, pooled, guidance, jnp.float32(1.0))
    step = jax.jit(_step, static_argnames=("cfg", "attention_impl", "guided", "mesh", "rules"))
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught, recording() as ran:  # a kernel falling back, say
        warnings.simplefilter("always")
        compiled = step.lower(*args, cfg=cfg, attention_impl=attention, guided=False).compile()
    compile_s = time.perf_counter() - t0
    temp, xla_flops = _xla_figures(compiled)
    first_s, times = _timed_steps(lambda: compiled(*args).block_until_ready(), steps)
    peak, limit = _dev_peak()
    return {"part": "vidax", "model": name, "attention": ran_label(ran, attention), "attention_requested": requested,
            "warnings": sorted({str(m.message)[:200] for m in caught}), "dtype": "bfloat16",
            "tokens": hv_tokens(name), "text_tokens": HV_TEXT_LEN, "text_valid": HV_TEXT_VALID, "init_s": init_s,
            "compile_s": compile_s, "first_step_s": first_s, "step_s": times, "peak_device_bytes": peak,
            "device_bytes_limit": limit, "weight_bytes": weight_bytes, "xla_temp_bytes": temp,
            "xla_flops": xla_flops, "model_flops": hv_step_flops(name), "jax": jax.__version__}


def part_diffusers_hv(name: str, steps: int) -> dict:
    """diffusers' ``HunyuanVideoTransformer3DModel`` built in bf16 on the device (random init), one evaluation per
    step as ``HunyuanVideoPipeline.__call__`` (embedded guidance, text mask), ``torch.no_grad()``."""
    import torch
    from diffusers import HunyuanVideoTransformer3DModel

    cfg = {**hv_config(name), "rope_axes_dim": list(hv_config(name)["rope_axes_dim"])}
    f, h, w = HV_MODELS[name][1]
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    torch.set_default_dtype(torch.bfloat16)  # built directly in bf16 on the device (all modules bf16)
    try:
        with dev:
            model = HunyuanVideoTransformer3DModel(**cfg).eval()
    finally:
        torch.set_default_dtype(torch.float32)
    sync()
    init_s = time.perf_counter() - t0
    gen = torch.Generator(device=dev).manual_seed(0)
    bf16 = torch.bfloat16
    x = torch.randn(latent_shape(f, h, w), generator=gen, device=dev).to(bf16)
    pe = torch.randn((1, HV_TEXT_LEN, cfg["text_embed_dim"]), generator=gen, device=dev).to(bf16)
    mask = (torch.arange(HV_TEXT_LEN, device=dev) < HV_TEXT_VALID)[None].to(bf16)  # the pipeline casts it so
    pooled = torch.randn((1, cfg["pooled_projection_dim"]), generator=gen, device=dev).to(bf16)
    guidance = torch.tensor([HV_GUIDANCE], dtype=bf16, device=dev) * 1000.0
    t = torch.full((1,), 1000.0, device=dev)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()

    def step():
        with torch.no_grad(), model.cache_context("cond"):
            model(hidden_states=x, timestep=t, encoder_hidden_states=pe, encoder_attention_mask=mask,
                  pooled_projections=pooled, guidance=guidance, return_dict=False)
        sync()

    first_s, times = _timed_steps(step, steps)
    import diffusers

    return {"part": "diffusers", "model": name, "dtype": "bfloat16", "tokens": hv_tokens(name),
            "text_tokens": HV_TEXT_LEN, "text_valid": HV_TEXT_VALID, "init_s": init_s, "first_step_s": first_s,
            "step_s": times,
            "peak_device_bytes": int(torch.cuda.max_memory_allocated()) if dev.type == "cuda" else 0,
            "device": str(dev), "weight_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
            "model_flops": hv_step_flops(name), "torch": torch.__version__, "diffusers": diffusers.__version__,
            "sdpa": "torch.nn.functional.scaled_dot_product_attention with a boolean mask (default backend choice)"}


def part_vidax_hv15(name: str, steps: int, attention: str) -> dict:
    """vidax's HunyuanVideo-1.5 guided step (the pipeline's: :func:`vidax.models.hunyuanvideo15.pipeline.step_hooks`
    around the transformer, the ``[negative, prompt]`` batch of 2 in one program, the stack under ``lax.scan`` as on
    an accelerator) on random bf16 parameters made on the device, compiled ahead of time; ``steps`` timed calls after
    one warm-up."""
    import warnings

    import jax
    import jax.numpy as jnp
    import numpy as np

    from vidax.core.attention import ran_label, recording
    from vidax.core.params import abstract_params
    from vidax.models.hunyuanvideo15.block_loop import compile_whole
    from vidax.models.hunyuanvideo15.config import HunyuanVideo15TransformerConfig
    from vidax.models.hunyuanvideo15.pipeline import Guider, step_hooks
    from vidax.models.hunyuanvideo15.transformer import transformer_specs

    requested, attention = attention, _attention_request(attention)
    cfg = HunyuanVideo15TransformerConfig(**hv15_config(name))
    shape = hv15_latent_shape(*HV15_MODELS[name][1])
    dtype = jnp.bfloat16
    t0 = time.perf_counter()
    params, weight_bytes = _device_params(abstract_params(transformer_specs(cfg), dtype))
    init_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    f32 = np.float32
    mask = np.zeros((2, HV15_TEXT_LEN), np.int32)
    mask[:, :HV15_TEXT_VALID] = 1
    args = (jnp.asarray(rng.standard_normal(shape, dtype=f32)), jnp.full((1,), 1000.0, jnp.float32),
            jnp.asarray(rng.standard_normal((2, HV15_TEXT_LEN, cfg.text_embed_dim), dtype=f32)), jnp.asarray(mask),
            jnp.zeros((2, HV15_GLYPH_LEN, cfg.text_embed_2_dim), jnp.float32),
            jnp.zeros((2, HV15_GLYPH_LEN), jnp.int32), jnp.zeros((1, shape[1] + 1, *shape[2:]), jnp.float32), None,
            None)
    prepare, finish = step_hooks(dtype, Guider({}, HV15_GUIDANCE))
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught, recording() as ran:  # a kernel falling back, say
        warnings.simplefilter("always")
        compiled = compile_whole(params, args, cfg=cfg, attention=attention, prepare=prepare, finish=finish)
    compile_s = time.perf_counter() - t0
    temp, xla_flops = _xla_figures(compiled)
    first_s, times = _timed_steps(lambda: compiled(params, args, ()).block_until_ready(), steps)
    peak, limit = _dev_peak()
    return {"part": "vidax", "model": name, "attention": ran_label(ran, attention), "attention_requested": requested,
            "warnings": sorted({str(m.message)[:200] for m in caught}), "dtype": "bfloat16",
            "tokens": hv15_tokens(name), "text_tokens": HV15_TEXT_LEN + HV15_GLYPH_LEN, "text_valid": HV15_TEXT_VALID,
            "init_s": init_s, "compile_s": compile_s, "first_step_s": first_s, "step_s": times,
            "peak_device_bytes": peak, "device_bytes_limit": limit, "weight_bytes": weight_bytes,
            "xla_temp_bytes": temp, "xla_flops": xla_flops, "model_flops": hv15_step_flops(name),
            "jax": jax.__version__}


def part_diffusers_hv15(name: str, steps: int) -> dict:
    """diffusers' ``HunyuanVideo15Transformer3DModel`` built in bf16 on the device (random init), one guided step as
    ``HunyuanVideo15Pipeline.__call__`` runs it: the guider's two evaluations (prompt, negative) with the text masks
    and the text-to-video image stream of 729 zero SigLIP tokens, then ``uncond + s (cond - uncond)``,
    ``torch.no_grad()``."""
    import torch
    from diffusers import HunyuanVideo15Transformer3DModel

    cfg = {**hv15_config(name), "rope_axes_dim": list(hv15_config(name)["rope_axes_dim"])}
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    torch.set_default_dtype(torch.bfloat16)  # built directly in bf16 on the device (all modules bf16)
    try:
        with dev:
            model = HunyuanVideo15Transformer3DModel(**cfg).eval()
    finally:
        torch.set_default_dtype(torch.float32)
    sync()
    init_s = time.perf_counter() - t0
    gen = torch.Generator(device=dev).manual_seed(0)
    bf16 = torch.bfloat16
    shape = hv15_latent_shape(*HV15_MODELS[name][1])
    latents = torch.randn(shape, generator=gen, device=dev).to(bf16)
    x = torch.cat([latents, torch.zeros((1, shape[1] + 1, *shape[2:]), dtype=bf16, device=dev)], dim=1)
    texts = []
    for _ in range(2):  # prompt, negative
        pe = torch.randn((1, HV15_TEXT_LEN, cfg["text_embed_dim"]), generator=gen, device=dev).to(bf16)
        mask = (torch.arange(HV15_TEXT_LEN, device=dev) < HV15_TEXT_VALID)[None].to(bf16)  # the pipeline casts it
        pe2 = torch.zeros((1, HV15_GLYPH_LEN, cfg["text_embed_2_dim"]), dtype=bf16, device=dev)
        texts.append((pe, mask, pe2, torch.zeros((1, HV15_GLYPH_LEN), dtype=bf16, device=dev)))
    image = torch.zeros((1, HV15_IMAGE_TOKENS, cfg["image_embed_dim"]), dtype=bf16, device=dev)
    t = torch.full((1,), 1000.0, device=dev).to(bf16)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()

    def step():
        preds = []
        with torch.no_grad():
            for context, (pe, mask, pe2, mask2) in zip(("pred_cond", "pred_uncond"), texts):
                with model.cache_context(context):
                    preds.append(model(hidden_states=x, image_embeds=image, timestep=t, encoder_hidden_states=pe,
                                       encoder_attention_mask=mask, encoder_hidden_states_2=pe2,
                                       encoder_attention_mask_2=mask2, return_dict=False)[0])
            cond, uncond = preds
            out = uncond + HV15_GUIDANCE * (cond - uncond)
        sync()
        return out

    first_s, times = _timed_steps(step, steps)
    import diffusers

    return {"part": "diffusers", "model": name, "dtype": "bfloat16", "tokens": hv15_tokens(name),
            "text_tokens": HV15_TEXT_LEN + HV15_GLYPH_LEN + HV15_IMAGE_TOKENS, "text_valid": HV15_TEXT_VALID,
            "init_s": init_s, "first_step_s": first_s, "step_s": times,
            "peak_device_bytes": int(torch.cuda.max_memory_allocated()) if dev.type == "cuda" else 0,
            "device": str(dev), "weight_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
            "model_flops": hv15_step_flops(name, HV15_TEXT_LEN + HV15_GLYPH_LEN + HV15_IMAGE_TOKENS),
            "torch": torch.__version__, "diffusers": diffusers.__version__,
            "sdpa": "torch.nn.functional.scaled_dot_product_attention with a boolean mask (default backend choice)"}


def _cosmos_step_args(cfg, shape):
    """The pipeline step's arguments (:meth:`vidax.models.cosmos_predict25.pipeline.CosmosPredict25Pipeline.
    compile_step`) for text-to-world: random latents and float32 prompt embeddings (both halves), no conditioning."""
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)
    b, _, t = shape[:3]
    x = jnp.asarray(rng.standard_normal(shape, dtype=np.float32))
    zeros = jnp.zeros(shape, jnp.float32)
    indicator = jnp.zeros((b, 1, t, 1, 1), jnp.float32)
    emb = jnp.asarray(rng.standard_normal((2 * b, COSMOS_TEXT_LEN, cfg.context_in_channels), dtype=np.float32))
    return (x, jnp.full((b,), 200.0 / 201.0, jnp.float32), emb, zeros, indicator), (zeros, indicator)


def part_vidax_cosmos(name: str, steps: int, attention: str) -> dict:
    """vidax's Cosmos-Predict2.5 guided step (the pipeline's: :func:`vidax.models.cosmos_predict25.pipeline.step_hooks`
    around the transformer, the ``[negative, prompt]`` batch of 2 in one program, per-frame timesteps, the stack under
    ``lax.scan`` as on an accelerator) on random bf16 parameters made on the device, compiled ahead of time; ``steps``
    timed calls after one warm-up."""
    import warnings

    import jax
    import jax.numpy as jnp

    from vidax.core.attention import ran_label, recording
    from vidax.core.params import abstract_params
    from vidax.models.cosmos_predict25.block_loop import compile_whole
    from vidax.models.cosmos_predict25.config import CosmosTransformerConfig
    from vidax.models.cosmos_predict25.pipeline import CONDITIONAL_FRAME_TIMESTEP, step_hooks
    from vidax.models.cosmos_predict25.transformer import transformer_specs

    requested, attention = attention, _attention_request(attention)
    cfg = CosmosTransformerConfig(**cosmos_config(name))
    shape = latent_shape(*COSMOS_MODELS[name][1])
    dtype = jnp.bfloat16
    t0 = time.perf_counter()
    params, weight_bytes = _device_params(abstract_params(transformer_specs(cfg), dtype))
    init_s = time.perf_counter() - t0
    args, finish_args = _cosmos_step_args(cfg, shape)
    prepare, finish = step_hooks(dtype, COSMOS_GUIDANCE, CONDITIONAL_FRAME_TIMESTEP)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught, recording() as ran:  # a kernel falling back, say
        warnings.simplefilter("always")
        compiled = compile_whole(params, args, finish_args, cfg=cfg, attention=attention, prepare=prepare,
                                 finish=finish)
    compile_s = time.perf_counter() - t0
    temp, xla_flops = _xla_figures(compiled)
    first_s, times = _timed_steps(lambda: compiled(params, args, finish_args).block_until_ready(), steps)
    peak, limit = _dev_peak()
    return {"part": "vidax", "model": name, "attention": ran_label(ran, attention), "attention_requested": requested,
            "warnings": sorted({str(m.message)[:200] for m in caught}), "dtype": "bfloat16",
            "tokens": cosmos_tokens(name), "text_tokens": COSMOS_TEXT_LEN,
            "init_s": init_s, "compile_s": compile_s, "first_step_s": first_s, "step_s": times,
            "peak_device_bytes": peak, "device_bytes_limit": limit, "weight_bytes": weight_bytes,
            "xla_temp_bytes": temp, "xla_flops": xla_flops, "model_flops": cosmos_step_flops(name),
            "jax": jax.__version__}


def part_diffusers_cosmos(name: str, steps: int) -> dict:
    """diffusers' ``CosmosTransformer3DModel`` built in bf16 on the device (random init), one guided step as
    ``Cosmos2_5_PredictBasePipeline.__call__`` runs it: the prompt's and the negative prompt's evaluations with the
    pixel-size padding mask and per-frame timesteps, then ``cond + s (cond - uncond)``, ``torch.no_grad()``."""
    import torch
    from diffusers import CosmosTransformer3DModel

    try:  # the transformer resizes its padding mask with torchvision; restated where it is absent
        import torchvision  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        import _torchvision_restated

        _torchvision_restated.install()
    cfg = {k: list(v) if isinstance(v, tuple) else v for k, v in cosmos_config(name).items()}
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    torch.set_default_dtype(torch.bfloat16)  # built directly in bf16 on the device (all modules bf16)
    try:
        with dev:
            model = CosmosTransformer3DModel(**cfg).eval()
    finally:
        torch.set_default_dtype(torch.float32)
    sync()
    init_s = time.perf_counter() - t0
    gen = torch.Generator(device=dev).manual_seed(0)
    bf16 = torch.bfloat16
    f, h, w = COSMOS_MODELS[name][1]
    shape = latent_shape(f, h, w)
    b, _, t = shape[:3]
    x = torch.randn(shape, generator=gen, device=dev).to(bf16)
    cond_mask = torch.zeros((b, 1, t, *shape[3:]), dtype=bf16, device=dev)
    timestep = torch.full((b, 1, t, 1, 1), 200.0 / 201.0, device=dev)
    padding_mask = torch.zeros((1, 1, h, w), dtype=bf16, device=dev)
    texts = [torch.randn((b, COSMOS_TEXT_LEN, cfg["crossattn_proj_in_channels"]), generator=gen, device=dev).to(bf16)
             for _ in range(2)]  # prompt, negative (the pipeline passes them in the text encoder's dtype)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()

    def step():
        with torch.no_grad():
            cond, uncond = (model(hidden_states=x, condition_mask=cond_mask, timestep=timestep,
                                  encoder_hidden_states=e, padding_mask=padding_mask, return_dict=False)[0]
                            * (1 - cond_mask) for e in texts)
            out = cond + COSMOS_GUIDANCE * (cond - uncond)
        sync()
        return out

    first_s, times = _timed_steps(step, steps)
    import diffusers

    return {"part": "diffusers", "model": name, "dtype": "bfloat16", "tokens": cosmos_tokens(name),
            "text_tokens": COSMOS_TEXT_LEN, "init_s": init_s, "first_step_s": first_s, "step_s": times,
            "peak_device_bytes": int(torch.cuda.max_memory_allocated()) if dev.type == "cuda" else 0,
            "device": str(dev), "weight_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
            "model_flops": cosmos_step_flops(name), "torch": torch.__version__, "diffusers": diffusers.__version__,
            "sdpa": "torch.nn.functional.scaled_dot_product_attention (default backend choice)"}


def _cosmos3_prompts(cfg, seed: int = 0):
    """Random prompt rows of :data:`COSMOS3_PROMPT_TOKENS` tokens: ``(rows (lists of ids), packed)``
    (:func:`vidax.models.cosmos3.text.pack_prompts`: right-padded to a multiple of 64, as the pipeline packs them)."""
    import numpy as np

    from vidax.models.cosmos3.text import pack_prompts

    rng = np.random.default_rng(seed)
    rows = [[int(v) for v in rng.integers(0, cfg.vocab_size, n)] for n in COSMOS3_PROMPT_TOKENS]
    return rows, pack_prompts(rows, pad_id=0, temporal_modality_margin=cfg.unified_3d_mrope_temporal_modality_margin)


def part_vidax_cosmos3(name: str, steps: int, attention: str) -> dict:
    """vidax's Cosmos3 programs as the pipeline runs them, on random bf16 parameters made on the device: the und
    prefill of the two prompt rows (once per call; compiled ahead of time, timed over ``steps`` calls) and the guided
    gen step with the und cache resident (the latents cast and repeated for the rows, the guidance on the float32
    velocity: :func:`vidax.models.cosmos3.planner.step_hooks`; the layers under ``lax.scan``), compiled ahead of time,
    ``steps`` timed calls after one warm-up."""
    import warnings

    import jax
    import jax.numpy as jnp
    import numpy as np

    from vidax.core.attention import ran_label, recording
    from vidax.core.params import abstract_params
    from vidax.models.cosmos3.config import Cosmos3TransformerConfig
    from vidax.models.cosmos3.planner import Cosmos3Model, compile_resident, step_hooks
    from vidax.models.cosmos3.text import vision_position_ids
    from vidax.models.cosmos3.transformer import transformer_specs

    requested, attention = attention, _attention_request(attention)
    if attention == "auto":
        from vidax.core.attention import resolve_implementation

        attention = resolve_implementation(attention).value
    cfg = Cosmos3TransformerConfig.from_dict(cosmos3_config(name))
    shape = cosmos3_latent_shape(*COSMOS3_MODELS[name][1])
    dtype = jnp.bfloat16
    t0 = time.perf_counter()
    params, weight_bytes = _device_params(abstract_params(transformer_specs(cfg), dtype))
    init_s = time.perf_counter() - t0
    _, packed = _cosmos3_prompts(cfg)
    _, _, t, h, w = shape
    grid = (t, -(-h // 2), -(-w // 2))
    vpos = np.stack([vision_position_ids(*grid, off, fps=COSMOS3_FPS, base_fps=float(cfg.base_fps))[0]
                     for off in packed.vision_offsets]).astype(np.float32)
    lengths = jnp.asarray(packed.lengths)
    x = jax.random.normal(jax.random.key(1), shape, jnp.float32)
    inputs = {"prefill": (jnp.asarray(packed.input_ids), jnp.asarray(packed.position_ids), lengths),
              "args": (lengths, x, jnp.full((2,), 999.0, jnp.float32), jnp.asarray(vpos),
                       jnp.ones((2, t), jnp.float32)),
              "finish_args": (jnp.float32(COSMOS3_GUIDANCE),)}
    prepare, finish = step_hooks(dtype, True)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught, recording() as ran:  # a kernel falling back, say
        warnings.simplefilter("always")
        kv = (cfg.num_hidden_layers, 2, packed.input_ids.shape[1], cfg.num_key_value_heads, cfg.head_dim)
        from vidax.models.cosmos3.transformer import UndCache

        inputs["cache"] = UndCache(*(jax.ShapeDtypeStruct(kv, dtype) for _ in range(2)))
        prefill, step = compile_resident(Cosmos3Model(cfg), None, params, inputs, prepare=prepare, finish=finish,
                                         attention=attention, options=None, single_device=True)
    compile_s = time.perf_counter() - t0
    temp, xla_flops = _xla_figures(step)
    cache = jax.block_until_ready(prefill(params, *inputs["prefill"]))
    prefill_first, prefill_s = _timed_steps(lambda: jax.block_until_ready(prefill(params, *inputs["prefill"])), steps)
    first_s, times = _timed_steps(
        lambda: step(params, cache, inputs["args"], inputs["finish_args"]).block_until_ready(), steps)
    peak, limit = _dev_peak()
    return {"part": "vidax", "model": name, "attention": ran_label(ran, attention), "attention_requested": requested,
            "warnings": sorted({str(m.message)[:200] for m in caught}), "dtype": "bfloat16",
            "tokens": cosmos3_tokens(name), "text_tokens": list(COSMOS3_PROMPT_TOKENS),
            "padded_text_tokens": int(packed.input_ids.shape[1]),
            "init_s": init_s, "compile_s": compile_s, "first_step_s": first_s, "step_s": times,
            "prefill_s": prefill_s, "peak_device_bytes": peak, "device_bytes_limit": limit,
            "weight_bytes": weight_bytes, "xla_temp_bytes": temp, "xla_flops": xla_flops,
            "model_flops": cosmos3_step_flops(name), "jax": jax.__version__}


def part_diffusers_cosmos3(name: str, steps: int) -> dict:
    """diffusers' ``Cosmos3OmniTransformer`` built in bf16 on the device (random init), one guided step as
    ``Cosmos3OmniPipeline.__call__`` runs it: for the prompt and the negative prompt one transformer call over the
    joint sequence (the und stream over the prompt recomputed, then the generation tokens), packed by the pipeline's
    own ``_prepare_text_segment`` / ``_prepare_vision_segment``, then ``uncond + s (cond - uncond)``,
    ``torch.no_grad()``."""
    from types import SimpleNamespace

    import torch
    from diffusers import Cosmos3OmniPipeline, Cosmos3OmniTransformer

    from vidax.models.cosmos3.config import Cosmos3TransformerConfig

    cfg = cosmos3_config(name)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    torch.set_default_dtype(torch.bfloat16)  # built directly in bf16 on the device
    try:
        with dev:
            model = Cosmos3OmniTransformer(**cfg).eval()
    finally:
        torch.set_default_dtype(torch.float32)
    sync()
    init_s = time.perf_counter() - t0
    shim = SimpleNamespace(transformer=model, vae_scale_factor_temporal=4)  # what the packing helpers read
    rows, _ = _cosmos3_prompts(Cosmos3TransformerConfig.from_dict(cfg))
    gen = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(cosmos3_latent_shape(*COSMOS3_MODELS[name][1]), generator=gen, device=dev).to(torch.bfloat16)
    packs = []
    for ids in rows:
        text = Cosmos3OmniPipeline._prepare_text_segment(shim, ids, device=dev)
        vision = Cosmos3OmniPipeline._prepare_vision_segment(shim, x, False, text["vision_start_temporal_offset"],
                                                             COSMOS3_FPS, text["und_len"], device=dev)
        packs.append({**text, **vision,
                      "position_ids": torch.cat([text["text_mrope_ids"], vision["vision_mrope_ids"]], dim=1),
                      "sequence_length": text["und_len"] + vision["num_vision_tokens"]})
    vt = torch.full((packs[0]["num_noisy_vision_tokens"],), 999, device=dev)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()

    def step():
        preds = []
        with torch.no_grad():
            for s in packs:
                out = model(input_ids=s["input_ids"], text_indexes=s["text_indexes"], position_ids=s["position_ids"],
                            und_len=s["und_len"], sequence_length=s["sequence_length"], vision_tokens=[x],
                            vision_token_shapes=s["vision_token_shapes"],
                            vision_sequence_indexes=s["vision_sequence_indexes"],
                            vision_mse_loss_indexes=s["vision_mse_loss_indexes"], vision_timesteps=vt,
                            vision_noisy_frame_indexes=s["vision_noisy_frame_indexes"], return_dict=False)
                preds.append(out[0][0].float())
            cond, uncond = preds
            out = uncond + COSMOS3_GUIDANCE * (cond - uncond)
        sync()
        return out

    first_s, times = _timed_steps(step, steps)
    import diffusers

    return {"part": "diffusers", "model": name, "dtype": "bfloat16", "tokens": cosmos3_tokens(name),
            "text_tokens": list(COSMOS3_PROMPT_TOKENS), "init_s": init_s, "first_step_s": first_s, "step_s": times,
            "peak_device_bytes": int(torch.cuda.max_memory_allocated()) if dev.type == "cuda" else 0,
            "device": str(dev), "weight_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
            "model_flops": cosmos3_step_flops(name), "recompute_flops": cosmos3_step_flops(name, recompute=True),
            "torch": torch.__version__, "diffusers": diffusers.__version__,
            "sdpa": "the transformer's attention dispatch (default backend choice)"}


def _ltx2_host_inputs(name: str, cfg) -> dict:
    """The CFG batch's inputs (numpy): video tokens ``(2, S, 128)`` (the same latents twice), audio ``(2, T, C)``,
    text contexts ``(2, L, cross)`` / ``(2, L, audio cross)`` with the negative prompt's last quarter masked."""
    import numpy as np

    rng = np.random.default_rng(0)
    _, c, f, h, w = ltx2_latent_shape(*LTX2_MODELS[name][1])
    t, L = ltx2_audio_frames(name), LTX2_TEXT_LEN
    x = rng.standard_normal((1, f * h * w, c), dtype=np.float32)
    a = rng.standard_normal((1, t, cfg.audio_in_channels), dtype=np.float32)
    mask = np.ones((2, L), np.float32)
    mask[0, 3 * L // 4:] = 0.0
    return {"x": np.concatenate([x, x]), "a": np.concatenate([a, a]), "mask": mask, "grid": (f, h, w), "t": t,
            "ctx": rng.standard_normal((2, L, cfg.cross_attention_dim), dtype=np.float32),
            "actx": rng.standard_normal((2, L, cfg.audio_cross_attention_dim), dtype=np.float32)}


def part_vidax_ltx2(name: str, steps: int, attention: str) -> dict:
    """vidax's LTX-2.5 transformer program (:func:`vidax.models.ltx2.transformer._forward`, the blocks under
    ``lax.scan``; what :func:`vidax.models.ltx2.block_loop.make_forward` returns on one device) on random bf16
    parameters made on the device, the CFG batch of ``LTX2Pipeline``'s cond/uncond call plus the guidance on both
    streams, compiled ahead of time, ``steps`` timed calls after one warm-up."""
    import warnings

    import jax
    import jax.numpy as jnp

    from vidax.core.attention import ran_label, recording
    from vidax.core.params import abstract_params
    from vidax.models.ltx2 import transformer as T
    from vidax.models.ltx2.config import LTX2TransformerConfig

    requested, attention = attention, _attention_request(attention)
    if attention == "auto":
        from vidax.core.attention import resolve_implementation

        attention = resolve_implementation(attention).value
    cfg = LTX2TransformerConfig.from_dict(ltx2_config(name))
    t0 = time.perf_counter()
    params, weight_bytes = _device_params(abstract_params(T.transformer_specs(cfg), jnp.bfloat16))
    init_s = time.perf_counter() - t0
    inp = _ltx2_host_inputs(name, cfg)
    captured = {}

    def capture(*args, **kw):  # forward()'s host-side inputs (RoPE tables, masks), then the program ourselves
        captured["args"], captured["kw"] = args, kw
        return None, None

    f, h, w = inp["grid"]
    T.forward(params, cfg, inp["x"], inp["a"], inp["ctx"], inp["actx"], 500.0, sigma=500.0,
              encoder_attention_mask=inp["mask"], audio_encoder_attention_mask=inp["mask"], num_frames=f, height=h,
              width=w, fps=LTX2_FPS, audio_num_frames=inp["t"], use_cross_timestep=True, attention_impl=attention,
              program=capture)
    kw = captured["kw"]
    args = tuple(a.astype(jnp.bfloat16) if i in (1, 2, 3, 4) else a for i, a in enumerate(captured["args"]))

    def guided(*args):
        v, a = T._forward(*args, **kw)
        return tuple(u + LTX2_GUIDANCE * (c - u) for u, c in ((v[:1], v[1:]), (a[:1], a[1:])))

    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught, recording() as ran:
        warnings.simplefilter("always")
        step = jax.jit(guided).lower(*args).compile()
    compile_s = time.perf_counter() - t0
    temp, xla_flops = _xla_figures(step)
    first_s, times = _timed_steps(lambda: jax.block_until_ready(step(*args)), steps)
    peak, limit = _dev_peak()
    return {"part": "vidax", "model": name, "attention": ran_label(ran, attention), "attention_requested": requested,
            "warnings": sorted({str(m.message)[:200] for m in caught}), "dtype": "bfloat16",
            "tokens": ltx2_tokens(name), "audio_tokens": inp["t"], "text_tokens": LTX2_TEXT_LEN, "init_s": init_s,
            "compile_s": compile_s, "first_step_s": first_s, "step_s": times, "peak_device_bytes": peak,
            "device_bytes_limit": limit, "weight_bytes": weight_bytes, "xla_temp_bytes": temp,
            "xla_flops": xla_flops, "model_flops": ltx2_step_flops(name), "jax": jax.__version__}


def part_diffusers_ltx2(name: str, steps: int) -> dict:
    """diffusers' ``LTX2VideoTransformer3DModel`` built in bf16 on the device (random init), the CFG batch as
    ``LTX2Pipeline.__call__`` calls it (explicit RoPE coordinates, the connector mask on both text streams,
    ``use_cross_timestep``), then the guidance on both streams, ``torch.no_grad()``."""
    import torch
    from diffusers import LTX2VideoTransformer3DModel

    from vidax.models.ltx2.config import LTX2TransformerConfig

    cfg = ltx2_config(name)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with dev:
            model = LTX2VideoTransformer3DModel(**cfg).eval()
    finally:
        torch.set_default_dtype(torch.float32)
    sync()
    init_s = time.perf_counter() - t0
    inp = _ltx2_host_inputs(name, LTX2TransformerConfig.from_dict(cfg))
    f, h, w = inp["grid"]

    def tensor(key, dt=torch.bfloat16):
        return torch.from_numpy(inp[key]).to(dev, dt)

    kw = dict(hidden_states=tensor("x"), audio_hidden_states=tensor("a"), encoder_hidden_states=tensor("ctx"),
              audio_encoder_hidden_states=tensor("actx"), timestep=torch.full((2,), 500.0, device=dev),
              sigma=torch.full((2,), 500.0, device=dev), encoder_attention_mask=tensor("mask", torch.float32),
              audio_encoder_attention_mask=tensor("mask", torch.float32), num_frames=f, height=h, width=w,
              fps=LTX2_FPS, audio_num_frames=inp["t"],
              video_coords=model.rope.prepare_video_coords(2, f, h, w, dev, fps=LTX2_FPS),
              audio_coords=model.audio_rope.prepare_audio_coords(2, inp["t"], dev), isolate_modalities=False,
              spatio_temporal_guidance_blocks=None, perturbation_mask=None, use_cross_timestep=True,
              return_dict=False)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()

    def step():
        with torch.no_grad():
            v, a = model(**kw)
            out = tuple(u.float() + LTX2_GUIDANCE * (c.float() - u.float()) for u, c in (v.chunk(2), a.chunk(2)))
        sync()
        return out

    first_s, times = _timed_steps(step, steps)
    import diffusers

    return {"part": "diffusers", "model": name, "dtype": "bfloat16", "tokens": ltx2_tokens(name),
            "audio_tokens": inp["t"], "text_tokens": LTX2_TEXT_LEN, "init_s": init_s, "first_step_s": first_s,
            "step_s": times, "peak_device_bytes": int(torch.cuda.max_memory_allocated()) if dev.type == "cuda" else 0,
            "device": str(dev), "weight_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
            "model_flops": ltx2_step_flops(name), "torch": torch.__version__, "diffusers": diffusers.__version__,
            "sdpa": "the transformer's attention dispatch (default backend choice)"}


def part_estimate() -> dict:
    out = {}
    for name in BENCH_MODELS:
        for dt, nbytes in (("bfloat16", 2), ("float32", 4)):
            for attn, chunk in (("xla", None), ("chunked", 1024)):
                out[f"{name}/{dt}/{attn}"] = estimate(name, nbytes, chunk)
    for name in HV_BENCH_MODELS:
        for dt, nbytes in (("bfloat16", 2), ("float32", 4)):
            out[f"{name}/{dt}/fused"] = hv_estimate(name, nbytes)
    for name in HV15_BENCH_MODELS:
        for dt, nbytes in (("bfloat16", 2), ("float32", 4)):
            out[f"{name}/{dt}/fused"] = hv15_estimate(name, nbytes)
    for name in COSMOS_BENCH_MODELS:
        for dt, nbytes in (("bfloat16", 2), ("float32", 4)):
            out[f"{name}/{dt}/fused"] = cosmos_estimate(name, nbytes)
    for name in COSMOS3_BENCH_MODELS:
        for dt, nbytes in (("bfloat16", 2), ("float32", 4)):
            out[f"{name}/{dt}/fused"] = cosmos3_estimate(name, nbytes)
    for name in LTX2_BENCH_MODELS:
        for dt, nbytes in (("bfloat16", 2), ("float32", 4)):
            out[f"{name}/{dt}/fused"] = ltx2_estimate(name, nbytes)
    return {"part": "estimate", "estimates": out,
            "params": {**{n: param_count(n) for n in BENCH_MODELS}, **{n: hv_param_count(n) for n in HV_BENCH_MODELS},
                       **{n: hv15_param_count(n) for n in HV15_BENCH_MODELS},
                       **{n: cosmos_param_count(n) for n in COSMOS_BENCH_MODELS},
                       **{n: cosmos3_param_count(n) for n in COSMOS3_BENCH_MODELS},
                       **{n: ltx2_param_count(n) for n in LTX2_BENCH_MODELS}},
            "model_flops": {**{n: step_flops(n) for n in BENCH_MODELS},
                            **{n: hv_step_flops(n) for n in HV_BENCH_MODELS},
                            **{n: hv15_step_flops(n) for n in HV15_BENCH_MODELS},
                            **{n: cosmos_step_flops(n) for n in COSMOS_BENCH_MODELS},
                            **{n: cosmos3_step_flops(n) for n in COSMOS3_BENCH_MODELS},
                            **{n: ltx2_step_flops(n) for n in LTX2_BENCH_MODELS}},
            "tokens": {**{n: tokens(n) for n in BENCH_MODELS}, **{n: hv_tokens(n) for n in HV_BENCH_MODELS},
                       **{n: hv15_tokens(n) for n in HV15_BENCH_MODELS},
                       **{n: cosmos_tokens(n) for n in COSMOS_BENCH_MODELS},
                       **{n: cosmos3_tokens(n) for n in COSMOS3_BENCH_MODELS},
                       **{n: ltx2_tokens(n) for n in LTX2_BENCH_MODELS}}}


def machine_env() -> dict:
    """The device machine: date, GPU (``nvidia-smi``) and package versions (kept in the matmul part's JSON)."""
    import subprocess
    from importlib.metadata import PackageNotFoundError, version

    v = {}
    for pkg in ("jax", "jaxlib", "torch", "diffusers", "flax"):
        try:
            v[pkg] = version(pkg)
        except PackageNotFoundError:
            v[pkg] = "absent"
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as e:
        gpu = f"nvidia-smi failed: {e}"
    return {"date": time.strftime("%Y-%m-%d"), "gpu": gpu, "versions": ", ".join(f"{k} {x}" for k, x in v.items())}


# ------------------------------------------------------------------------------------ report


def report(results_dir: Path, docs: Path | None = None) -> None:
    """Write the GPU section of docs/benchmarks.md from the JSON files a gpu.sh run brought back."""
    from statistics import median

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench._report import DOCS, replace_section

    res = {}
    for p in sorted(Path(results_dir).glob("*.json")):
        r = json.loads(p.read_text())
        res[p.stem] = r
    mm = res.get("matmul", {})
    rate = mm.get("tflops")
    env = res.get("env") or mm.get("env", {})
    ran = any(k.startswith(("vidax-", "diffusers-")) for k in res) or bool(mm)
    lines = ["## GPU: one H200, real sizes", ""]
    if ran:
        lines += [
            f"Generated by `bash bench/gpu.sh` on the lent device ({env.get('gpu', mm.get('device', '?'))}; "
            f"{env.get('versions', '')}) and `python bench/gpu_step.py report <results>` here, {env.get('date', '?')}.",
            f"Random bf16 weights built on the device (speed does not depend on values); Wan: CFG batch 2; "
            f"HunyuanVideo: one evaluation per step (embedded guidance), {HV_TEXT_LEN} text tokens of which "
            f"{HV_TEXT_VALID} valid; HunyuanVideo-1.5: CFG batch 2, {HV15_TEXT_LEN} Qwen tokens of which "
            f"{HV15_TEXT_VALID} valid and {HV15_GLYPH_LEN} byT5 tokens (diffusers adds {HV15_IMAGE_TOKENS} masked "
            f"image tokens); Cosmos-Predict2.5: CFG batch 2, {COSMOS_TEXT_LEN} text tokens (no mask); "
            f"Cosmos3: CFG rows 2 of {' and '.join(map(str, COSMOS3_PROMPT_TOKENS))} prompt tokens (vidax: the "
            f"understanding stream once per call, its time apart; diffusers: in each of its two calls per step); "
            f"measured bf16 matmul rate {rate:.0f} TFLOP/s (8192^3)."
            if rate else "No matmul rate measured.",
        ]
    else:
        lines += ["Not run yet (no GPU was lent to the task that wrote the scripts). `bash bench/gpu.sh` on a lent H200 "
                  "writes one JSON per part; `python bench/gpu_step.py report <that folder>` regenerates this section. "
                  "Until then: the memory estimate of `python bench/gpu_step.py estimate`."]
    lines += ["", "| model | engine | attention | compile s | step s (median) | MFU vs measured matmul | peak device GiB |",
              "|---|---|---|---|---|---|---|"]
    for name in (BENCH_MODELS + HV_BENCH_MODELS + HV15_BENCH_MODELS + COSMOS_BENCH_MODELS + COSMOS3_BENCH_MODELS
                 + LTX2_BENCH_MODELS if ran else ()):
        keys = sorted(k for k in res if k.startswith(f"vidax-{name}")) or [f"vidax-{name}"]
        for key in keys + [f"diffusers-{name}"]:
            eng = key.split("-")[0]
            r = res.get(key)
            if not r:
                lines.append(f"| {name} | {eng} | | | not run | | |")
                continue
            if "error" in r:
                lines.append(f"| {name} | {eng} | {r.get('attention', '')} | | failed: {r['error']} | | |")
                continue
            s = median(r["step_s"]) if r["step_s"] else r["first_step_s"]
            mfu = f"{r['model_flops'] / s / (rate * 1e12):.1%}" if rate else ""
            comp = f"{r['compile_s']:.1f}" if "compile_s" in r else "none (eager)"
            att = r.get("attention", "sdpa")
            asked = r.get("attention_requested", att)
            if asked == "auto":
                att += " (auto)"
            elif asked not in att.split("+"):
                att += f" ({asked} not in this engine)"
            elif att != asked:
                att += f" ({asked} fell back for some calls)"
            lines.append(f"| {name} | {eng} | {att} | {comp} | {s:.2f} | {mfu} | "
                         f"{r['peak_device_bytes'] / GiB:.1f} |")
        v = [res[k] for k in keys if k in res and "step_s" in res[k] and res[k]["step_s"]]
        d = res.get(f"diffusers-{name}", {})
        if v and d.get("step_s"):
            best = min(median(r["step_s"]) for r in v)
            lines.append(f"| {name} | vidax/diffusers (best vidax) | | | **{best / median(d['step_s']):.2f}x** | | |")
    if "estimate" not in res:  # no device needed: computed here when the run brought none back
        res["estimate"] = part_estimate()
    est = res["estimate"].get("estimates", {})
    if not ran:
        lines = lines[:-3]
    if est:
        p = res["estimate"]
        lines += ["", "Sizes: " + "; ".join(
            f"{n}: {p['params'][n] / 1e9:.2f} B parameters, "
            f"{p['tokens'][n]} {'' if n in MODELS else 'video '}"
            f"tokens, {p['model_flops'][n] / 1e15:.2f} PFLOP per {'step' if n in HV_MODELS else 'guided step'}"
            for n in p["params"]) + "."]
        lines += ["", "Memory estimate before the run (weights + largest live activations, GiB; H200 has ~139):", "",
                  "| model/dtype/attention | weights | activations | of which scores | total |", "|---|---|---|---|---|"]
        for k, e in est.items():
            lines.append(f"| {k} | {e['weights'] / GiB:.1f} | {e['activations'] / GiB:.1f} | {e['scores'] / GiB:.1f} | "
                         f"{e['total'] / GiB:.1f} |")
    study = Path(__file__).resolve().parents[1] / "docs" / "benchmarks" / "compile_study.json"
    if study.is_file():
        rows = [r for r in json.loads(study.read_text()).get("results", []) if r.get("variant") == "scan" and "memory" in r]
        if rows:
            lines += ["", "XLA's own memory analysis of the scanned steps compiled for the CPU (`python -m bench.compile_study`; "
                      "a GPU compile fuses differently, but the order is the same): " + "; ".join(
                          f"{r['model']} {r['dtype']} chunked: arguments {r['memory'].get('argument_size_in_bytes', 0) / GiB:.1f} "
                          f"+ temporaries {r['memory'].get('temp_size_in_bytes', 0) / GiB:.1f} GiB" for r in rows)
                      + ". The estimate above assumes unfused score, softmax and probability buffers and so overcounts."]
    replace_section(lines[0], "\n".join(lines) + "\n", docs or DOCS)


def parser() -> argparse.ArgumentParser:
    """The command line of the parts (``bench/gpu.sh`` calls ``gpu_step.py PART --model ... --out-dir ...``)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("part", choices=["matmul", "vidax", "diffusers", "estimate", "report"])
    p.add_argument("results", nargs="?", help="report: the folder of JSON files")
    p.add_argument("--model", choices=sorted(MODELS) + sorted(HV_MODELS) + sorted(HV15_MODELS) + sorted(COSMOS_MODELS)
                   + sorted(COSMOS3_MODELS) + sorted(LTX2_MODELS),
                   default="1.3b-480p")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--attention", default="chunked",
                   help="vidax attention_impl: xla, chunked, or a kernel the engine has (e.g. cudnn)")
    p.add_argument("--out-dir", default=os.environ.get("OUT", "."))
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.part == "report":
        report(Path(args.results))
        return 0
    name = {"matmul": "matmul", "estimate": "estimate"}.get(args.part, f"{args.part}-{args.model}")
    if args.part == "vidax":
        name += f"-{args.attention}"
    hv, hv15, cosmos = args.model in HV_MODELS, args.model in HV15_MODELS, args.model in COSMOS_MODELS
    cosmos3, ltx2 = args.model in COSMOS3_MODELS, args.model in LTX2_MODELS
    try:
        if args.part == "matmul":
            r = part_matmul()
        elif args.part == "estimate":
            r = part_estimate()
        elif args.part == "vidax":
            run = (part_vidax_ltx2 if ltx2 else part_vidax_cosmos3 if cosmos3 else part_vidax_cosmos if cosmos
                   else part_vidax_hv15 if hv15 else part_vidax_hv if hv else part_vidax)
            r = run(args.model, args.steps, args.attention)
        else:
            run = (part_diffusers_ltx2 if ltx2 else part_diffusers_cosmos3 if cosmos3 else part_diffusers_cosmos
                   if cosmos else part_diffusers_hv15 if hv15 else part_diffusers_hv if hv else part_diffusers)
            r = run(args.model, args.steps)
    except Exception as e:  # keep the other parts' results: record the failure
        import traceback

        traceback.print_exc()
        r = {"part": args.part, "model": args.model, "error": f"{type(e).__name__}: {str(e)[:300]}"}
    if args.part == "matmul":  # the machine, in the same file (the device returns at most 8 files)
        r["env"] = machine_env()
    out = Path(args.out_dir) / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(r, indent=2) + "\n")
    print(json.dumps({k: v for k, v in r.items() if k != "estimates"}))
    return 0 if "error" not in r else 1


if __name__ == "__main__":
    sys.exit(main())
