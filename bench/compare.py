"""vidax against diffusers, side by side: same machine, same checkpoint folder, same inputs, one run.

Both pipelines load the same diffusers-layout checkpoint folder (random weights, written once by
``vidax.models.wan.demo.write_demo_checkpoint`` in exactly the layout diffusers' ``save_pretrained``
writes, cached under ``bench/.cache/compare-<config>``) and run the same prompt, negative prompt
and initial latents. Every contender runs in its own process; measurements of the two contenders
alternate, so drift in the (shared) machine's load hits both alike. Reported: median and spread
(min-max) over ``--repeats`` runs of

- the transformer step with classifier-free guidance (both halves), compilation excluded: vidax's
  pipeline step (``WanPipeline._step`` lowered and compiled ahead of time on a batch of 2, as the
  pipeline does); diffusers: two ``transformer(...)`` calls and the guidance combination, as
  ``diffusers.WanPipeline.__call__`` does, under ``torch.no_grad()``; at several token counts (a
  guidance-distilled family, HunyuanVideo, steps with one evaluation and its embedded guidance instead:
  :attr:`Family.cfg_halves`);
- vidax's step compile time: cold (a fresh process, empty JAX cache) and from the JAX persistent
  compilation cache (``jax_compilation_cache_dir``, ``jax_persistent_cache_min_compile_time_secs=0``);
- text-encoder time (prompt and negative prompt) and VAE decode time, warm and first call;
- a short end-to-end generation (load + ``pipe(...)``), each run in a fresh process, with its
  peak resident memory (``VmHWM`` of ``/proc/self/status``) and its load time and host bytes read
  (``/proc/self/io`` ``rchar`` / ``read_bytes``, files in the page cache);
- bf16 (both) step time at some token counts, as a second table.

Usage::

    python -m bench.compare [--config a|b|c|d|e|f|g|h] [--repeats N] # writes docs/benchmarks/compare-<config>.json,
                                                            # docs/benchmarks/step_time[-<config>].png and its section

Configurations: ``a`` Wan2.1 1.3B width, ``b`` Wan2.2 TI2V-5B width (text-to-video), ``c`` CogVideoX-2B
width, ``d`` LTX-Video 2B width with the 0.9.5+ VAE, ``e`` HunyuanVideo 13B width, ``f`` HunyuanVideo-1.5 8.3B width,
``g`` Cosmos-Predict2.5 2B width (text-to-world), ``h`` Cosmos3 Edge width (text-to-video; see :data:`CONFIGS`).
    python -m bench.compare --smoke --out /tmp/x.json     # tiny config, seconds, no docs written

New model families: add a :class:`Family` (checkpoint writer + one contender class per engine) to
``FAMILIES`` and a :class:`BenchConfig` row naming it to ``CONFIGS``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench._report import DOCS, machine, replace_section, versions

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "bench" / ".cache"
PROMPT = "A majestic red panda climbing a bamboo tree in the snow, 4k"
NEGATIVE = "blurry, static, low quality"
GUIDANCE = 5.0
RESULT = "@@RESULT "  # prefix of the worker's protocol lines (library chatter goes to stderr)


# ------------------------------------------------------------------------------------ configurations


@dataclass(frozen=True)
class BenchConfig:
    """One benchmark configuration (a row of :data:`CONFIGS`).

    Attributes:
      family: key of :data:`FAMILIES`.
      transformer, vae, text: ``config.json`` overrides of each component of the checkpoint.
      base: ``(frames, height, width)`` of the end-to-end generation, text, VAE and memory runs.
      sweep: ``(frames, height, width)`` at which the fp32 step is timed (the plot's x axis).
      bf16_sweep: the same for the bf16 step (empty: no bf16 table).
      steps: sampler steps of the end-to-end generation.
      repeats: default ``--repeats``.
      note: what the configuration stands for, printed in the report.
      findings: what was found about this configuration's figures (e.g. a profile of where vidax is slower),
        appended to the report's notes; written by hand after a run, kept when the section is regenerated.
      parts: the measurements run: ``fresh`` (end-to-end processes), ``text``, ``sweep`` (the step, fp32 and bf16),
        ``vae``; a family without a vidax pipeline yet (LTX-2.5, config i) runs the step sweep alone.
    """

    name: str
    family: str
    transformer: dict
    vae: dict
    text: dict
    base: tuple[int, int, int]
    sweep: tuple[tuple[int, int, int], ...]
    bf16_sweep: tuple[tuple[int, int, int], ...] = ()
    steps: int = 2
    repeats: int = 3
    note: str = ""
    findings: str = ""
    docs: bool = True  # write docs/ (the smoke configuration does not)
    parts: tuple[str, ...] = ("fresh", "text", "sweep", "vae")  # what run() measures (a transformer-only family: sweep)


# Wan2.1 1.3B transformer width (12 heads x 128 = 1536, ffn 8960, text_dim 4096, freq_dim 256), 2 of its
# 30 layers; Wan2.1 VAE at its real width (base_dim 96, 2 residual blocks per stage); UMT5 at the real
# model width 4096 (so the transformer's text embedder is real) but 2 thin layers.
_WAN13B_WIDTH = dict(num_attention_heads=12, attention_head_dim=128, ffn_dim=8960, freq_dim=256, num_layers=2)
_WAN_VAE = dict(base_dim=96, num_res_blocks=2)
_UMT5_THIN = dict(d_model=4096, num_heads=8, d_kv=64, d_ff=1024, num_layers=2)
# Wan2.2 TI2V-5B (diffusers Wan2.2-TI2V-5B-Diffusers transformer/config.json: 24 heads x 128, ffn 14336, 48 latent
# channels), 2 of 30 layers; its VAE at the released width (vidax.core.wan_vae.WAN22_VAE_ORIGINAL).
_TI2V5B_WIDTH = dict(num_attention_heads=24, attention_head_dim=128, ffn_dim=14336, freq_dim=256, num_layers=2)
_WAN22_VAE = dict(base_dim=160, decoder_base_dim=256, dim_mult=[1, 2, 4, 4], num_res_blocks=2)
# CogVideoX-2b (THUDM/CogVideoX-2b transformer/config.json: 30 heads x 64, time_embed_dim 512), 2 of 30 layers;
# its VAE at the released width; T5 v1.1 XXL's model width (4096, so the text projection is real), 2 thin layers.
_COG2B_WIDTH = dict(num_attention_heads=30, attention_head_dim=64, time_embed_dim=512, num_layers=2)
_COG_VAE = dict(block_out_channels=[128, 256, 256, 512], layers_per_block=3, norm_num_groups=32)
_T5_THIN = dict(d_model=4096, num_heads=8, d_kv=64, d_ff=1024, num_layers=2)
# LTX-Video 2B (diffusers scripts/convert_ltx_to_diffusers.py, get_transformer_config for every version but 0.9.7's
# 13B: 32 heads x 64 = 2048, cross_attention_dim 2048, caption_channels 4096 = the T5 width), 2 of 28 layers; the
# 0.9.5+ VAE at its released width (get_vae_config "0.9.5", the same for 0.9.7 / 0.9.8).
_LTX2B_WIDTH = dict(num_attention_heads=32, attention_head_dim=64, cross_attention_dim=2048, in_channels=128,
                    out_channels=128, num_layers=2)
_LTX095_VAE = dict(
    latent_channels=128, block_out_channels=[128, 256, 512, 1024, 2048],
    down_block_types=["LTXVideo095DownBlock3D"] * 4, decoder_block_out_channels=[256, 512, 1024],
    layers_per_block=[4, 6, 6, 2, 2], decoder_layers_per_block=[5, 5, 5, 5],
    spatio_temporal_scaling=[True] * 4, decoder_spatio_temporal_scaling=[True] * 3, decoder_inject_noise=[False] * 4,
    downsample_type=["spatial", "temporal", "spatiotemporal", "spatiotemporal"], upsample_residual=[True] * 3,
    upsample_factor=[2, 2, 2], timestep_conditioning=True, patch_size=4, patch_size_t=1, resnet_norm_eps=1e-6,
    scaling_factor=1.0, encoder_causal=True, decoder_causal=False, spatial_compression_ratio=32,
    temporal_compression_ratio=8,
)

# HunyuanVideo 13B (hunyuanvideo-community/HunyuanVideo transformer/config.json: 24 heads x 128 = 3072, MLP ratio 4,
# a 2-block token refiner, text_embed_dim 4096 = the Llama-3-8B width, pooled_projection_dim 768 = CLIP-L, patch 2,
# RoPE axes (16, 56, 56), guidance embedding), 2 of its 20 dual-stream and 4 of its 40 single-stream blocks; its VAE
# at the released width (diffusers' AutoencoderKLHunyuanVideo defaults); the demo's Llama-3-style text tower at the
# real width 4096 (3 layers: the pipeline takes hidden_states[-3], so one of them feeds the transformer) and a CLIP
# text tower at CLIP-L's 768 (2 layers).
_HV13B_WIDTH = dict(num_attention_heads=24, attention_head_dim=128, num_layers=2, num_single_layers=4,
                    num_refiner_layers=2, mlp_ratio=4.0, patch_size=2, patch_size_t=1, text_embed_dim=4096,
                    pooled_projection_dim=768, rope_axes_dim=[16, 56, 56], guidance_embeds=True)
_HV_VAE = dict(block_out_channels=[128, 256, 512, 512], layers_per_block=2, norm_num_groups=32)
_HV_TEXT = dict(hidden_size=4096, num_hidden_layers=3, clip_hidden_size=768)

# HunyuanVideo-1.5 8.3B (diffusers HunyuanVideo15Transformer3DModel's defaults = the release's config: 16 heads x 128 =
# 2048, MLP ratio 4, a 2-block token refiner over the 3584-wide Qwen2.5-VL states, byT5 1472 and SigLIP 1152 wide
# projections, 65 input / 32 output channels, patch 1, RoPE axes (16, 56, 56)), 2 of its 54 dual-stream blocks; its VAE
# with the release's structure (5 stages, 16x spatial and 4x temporal compression, 32 latent channels) at half width;
# a Qwen2.5-VL language model at the real width 3584 (28 heads x 128, 4 key/value heads; 3 thin layers: the pipeline
# takes hidden_states[-3]) and a byT5 encoder at its real width 1472 (2 thin layers).
_HV15_WIDTH = dict(num_attention_heads=16, attention_head_dim=128, num_layers=2, num_refiner_layers=2, mlp_ratio=4.0,
                   in_channels=65, out_channels=32, patch_size=1, patch_size_t=1, text_embed_dim=3584,
                   text_embed_2_dim=1472, image_embed_dim=1152, rope_axes_dim=[16, 56, 56], target_size=640,
                   task_type="t2v")
_HV15_VAE = dict(latent_channels=32, block_out_channels=[64, 128, 256, 512, 512], layers_per_block=2)
_HV15_TEXT = dict(qwen=dict(hidden_size=3584, intermediate_size=2048, num_hidden_layers=3, num_attention_heads=28,
                            num_key_value_heads=4, rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24]}),
                  t5=dict(d_model=1472, d_kv=64, num_heads=6, d_ff=1024, num_layers=2))

# Cosmos-Predict2.5 2B (diffusers scripts/convert_cosmos_to_diffusers.py TRANSFORMER_CONFIGS
# "Cosmos-2.5-Predict-Base-2B": 16 heads x 128 = 2048, MLP ratio 4, AdaLN-LoRA 256, cross-attention over the 1024-wide
# crossattn_proj of the concatenated Qwen states, patch (1, 2, 2), RoPE scale (1, 3, 3), 17 input channels with the
# padding mask on top), 2 of its 28 blocks; the Wan2.1 VAE at its release width (config a's); a Qwen2.5-VL language
# model at the real width 3584 (28 heads x 128, 4 key/value heads) with 3 thin layers: every layer's state feeds the
# transformer, so its crossattn_proj reads 3 x 3584 = 10752 features (the release: 28 x 3584 = 100352).
_COSMOS2B_WIDTH = dict(num_attention_heads=16, attention_head_dim=128, num_layers=2, mlp_ratio=4.0, text_embed_dim=1024,
                       adaln_lora_dim=256, encoder_hidden_states_channels=1024, patch_size=[1, 2, 2],
                       rope_scale=[1.0, 3.0, 3.0], extra_pos_embed_type=None)
_COSMOS_TEXT = dict(hidden_size=3584, intermediate_size=2048, num_hidden_layers=3, num_attention_heads=28,
                    num_key_value_heads=4, rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24]})

# Cosmos3 Edge (nvidia/Cosmos3-Edge transformer/config.json, as vidax.models.cosmos3.config.RELEASE_CONFIGS holds it:
# 2048 wide = 16 heads x 128 with 8 key/value heads, MLP 9216 (squared ReLU), Nemotron norms eps 1e-5, no text q/k
# norms but the generation path's own key norm, rope_theta 1e8, mRoPE sections (24, 20, 20)), 2 of its 28 layers (each
# with both streams' weights); the vocabulary cut to the demo tokenizer's (the embedding rows do not enter the step);
# the Wan2.2 VAE at its released width (config b's).
_COSMOS3_EDGE_WIDTH = dict(hidden_size=2048, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                           intermediate_size=9216, num_hidden_layers=2, rms_norm_eps=1e-5, rope_theta=100000000.0,
                           rope_axes_dim=[24, 20, 20], rope_scaling={"mrope_section": [24, 20, 20],
                                                                     "rope_type": "default"})

# LTX-2.5 22B (vidax.models.ltx2.planner.LTX25_TRANSFORMER: 48 blocks of video 32 heads x 128 = 4096 and audio 32 x
# 64 = 2048, text 4096 / 2048 wide from the connectors, gated attention, cross-attention AdaLN with the sigma prompt
# embedders, split RoPE, keyframe embedding, STG), 2 of its 48 blocks.
_LTX25_WIDTH = dict(gated_attn=True, audio_gated_attn=True, cross_attn_mod=True, audio_cross_attn_mod=True,
                    rope_type="split", rope_double_precision=False, use_prompt_embeddings=False,
                    use_prompt_adaln_single=True, use_keyframes_abs_pos_embedding=True, perturbed_attn=True,
                    cross_attn_timestep_scale_multiplier=1, num_layers=2)

CONFIGS: dict[str, BenchConfig] = {
    c.name: c
    for c in [
        BenchConfig(
            "a", "wan2.1", _WAN13B_WIDTH, _WAN_VAE, _UMT5_THIN,
            base=(5, 128, 128),
            sweep=((5, 128, 128), (9, 128, 128), (17, 192, 192), (17, 256, 256)),
            bf16_sweep=((9, 128, 128), (9, 192, 192)),
            note="Wan2.1 1.3B width (dim 1536 = 12 x 128, ffn 8960, text_dim 4096), 2 of 30 layers; "
                 "Wan2.1 VAE at full width (base_dim 96); UMT5 4096 wide, 2 thin layers (8 heads x 64, d_ff 1024)",
        ),
        BenchConfig(
            "b", "wan2.2-ti2v", _TI2V5B_WIDTH, _WAN22_VAE, _UMT5_THIN,
            base=(5, 256, 256),
            sweep=((5, 256, 256), (9, 256, 256), (17, 384, 384), (17, 512, 512)),
            bf16_sweep=((9, 256, 256), (9, 384, 384)),
            note="Wan2.2 TI2V-5B width (dim 3072 = 24 x 128, ffn 14336, 48 latent channels, text_dim 4096), 2 of 30 "
                 "layers, text-to-video (diffusers: per-token timesteps, expand_timesteps); Wan2.2 VAE at full width "
                 "(base_dim 160, decoder 256, 16x spatial); UMT5 4096 wide, 2 thin layers",
        ),
        BenchConfig(
            "c", "cogvideox", _COG2B_WIDTH, _COG_VAE, _T5_THIN,
            base=(9, 128, 128),
            sweep=((9, 128, 128), (17, 128, 128), (17, 192, 192), (17, 256, 256)),
            bf16_sweep=((17, 128, 128), (17, 192, 192)),
            note="CogVideoX-2B width (30 heads x 64 = 1920, time_embed 512, text_embed 4096, 3D sin-cos positions), "
                 "2 of 30 layers, DDIM; CogVideoX VAE at full width (128-256-256-512, 3 layers per block); T5 v1.1 "
                 "4096 wide, 2 thin layers; 226 text tokens join every step's sequence",
        ),
        BenchConfig(
            "d", "ltx", _LTX2B_WIDTH, _LTX095_VAE, _T5_THIN,
            base=(17, 192, 192),
            sweep=((17, 192, 192), (17, 256, 256), (33, 384, 384), (33, 512, 512)),
            bf16_sweep=((17, 256, 256), (33, 384, 384)),
            note="LTX-Video 2B width (32 heads x 64 = 2048, cross_attention_dim 2048, caption_channels 4096, 128 "
                 "latent channels, patch 1), 2 of 28 layers, sampled as `LTXConditionPipeline` (the 0.9.5+ / 0.9.8 "
                 "semantics: 256 masked T5 tokens, linear-quadratic timesteps, pixel-coordinate RoPE, per-token "
                 "Euler); "
                 "the 0.9.5+ VAE at full width (`LTXVideo095DownBlock3D`, encoder 128-256-512-1024-2048, decoder "
                 "256-512-1024 with 5 resnets per stage, 32x spatial and 8x temporal compression), its decode "
                 "timestep-conditioned at 0.05 with noise scale 0.05; T5 v1.1 4096 wide, 2 thin layers",
            findings="Driving the reference: `LTXConditionPipeline` draws its initial noise itself and ignores "
                     "`latents=` in text-to-video, so the bench hands its `randn_tensor` this run's latents and then "
                     "the decode noise (its two draws, in its order); vidax gets the same arrays as `latents=` and "
                     "`decode_noise=`. Guidance rescale is off in both (the pipelines' default; the 0.9.8 dev presets "
                     "use 0.7). This section was measured on another machine than the sections above (2 cores of an "
                     "AMD EPYC Zen 5: AVX-512 and AVX512-BF16), so its ratios do not compare with theirs. Where vidax "
                     "is slower (profiled on 2026-12-02 on this machine, one process per engine, quiet): the bf16 step "
                     "(1.07-1.16x): PyTorch's oneDNN multiplies bf16 natively here (2560x2048x8192: 424 GFLOP/s "
                     "against XLA's 299), while its fp32 GEMM runs at 141 GFLOP/s against XLA's 239, most of the fp32 "
                     "step's 0.46x. The warm VAE decode (1.15x): the decoder's last stage (128 channels at 17x48x48, "
                     "about 40% of the decode's multiply-adds) convolves at about 0.7x the rate of oneDNN's direct 3D "
                     "convolution (one 128->128 3x3x3 convolution there: 0.15-0.16 s against 0.11 s; vidax runs it "
                     "as one 2D convolution per temporal tap, docs/design.md), and the 1024-channel mid block runs "
                     "under a `lax.scan` whose per-layer weight slices XLA:CPU copies (0.35 GiB of temporaries; its 5 "
                     "resnets 0.59 s against 0.42 s). The cold end to end (3.06x) and generation (1.95x): compiling "
                     "the VAE decode program (first call 10.8 s against 5.2 s warm), the text encoder and the step "
                     "(about 7 s together), and the load; from the persistent cache the decode's first call still "
                     "takes 6.9 s. Peak RSS (1.13x): the weights vidax converts (fp32 VAE decoder, transformer, T5: "
                     "2.84 GiB) are resident after loading, and the decode program adds 0.72 GiB of temporaries (XLA "
                     "memory analysis at 17x192x192); diffusers peaks 0.72 GiB above the same weights' file pages. "
                     "Load (44.9x): 3.05 GB converted into fresh buffers, about three quarters of its CPU time in the "
                     "kernel (first touch of fresh pages on this VM), 2.6-7.3 s for the same load alone in six tries "
                     "(5.2-10.6 s in this run), against diffusers' file mapping; the vidax-converted layout loads in "
                     "0.04 s (0.20x).",
        ),
        BenchConfig(
            "e", "hunyuanvideo", _HV13B_WIDTH, _HV_VAE, _HV_TEXT,
            base=(5, 128, 128),
            sweep=((5, 128, 128), (9, 128, 128), (9, 192, 192)),
            bf16_sweep=((9, 128, 128), (9, 192, 192)),
            note="HunyuanVideo 13B width (3072 = 24 heads x 128, MLP 12288, a 2-block token refiner, text_embed_dim "
                 "4096, pooled_projection_dim 768, patch 2, RoPE axes (16, 56, 56), guidance embedding), 2 of 20 "
                 "dual-stream and 4 of 40 single-stream blocks, text-to-video with embedded guidance 6.0 (one "
                 "transformer evaluation per step, no CFG); 256 masked Llama tokens join every block's joint "
                 "attention; the HunyuanVideo VAE at full width (128-256-512-512, 2 resnets per stage, 4x temporal "
                 "and 8x spatial compression); a Llama-3-style text tower 4096 wide with 3 layers (hidden_states[-3] "
                 "feeds the transformer) and a CLIP text tower 768 wide, 2 layers",
            findings="Where vidax is slower (profiled on 2026-12-03 on this machine, one process, quiet, 192 video "
                     "tokens = 448 joint tokens): the fp32 step (about 1.7x): XLA:CPU multiplies fp32 at 166-197 "
                     "GFLOP/s on these shapes (448x3072x12288, 448x12288x3072, 2560x3072x12288) against PyTorch's "
                     "212-259, and vidax's blocks run at about that rate (a dual-stream block 0.62 s, a single-stream "
                     "block 0.66 s, about 101 GFLOP each); the token refiner (2 blocks over the 256 text tokens) "
                     "takes 0.97 s under its `lax.scan`, 0.73 s as a loop over per-block weights. The bf16 step (about "
                     "4.4x): XLA's bf16 GEMM runs at 582 GFLOP/s against oneDNN's 1104 (AMX), and the scans copy each "
                     "layer's weight slice before its matmuls (the step program's XLA temporaries: 4.5 GiB in bf16, "
                     "1.3 GiB in fp32): the pipeline's step took 3.48 s quiet; the same blocks run by a host loop "
                     "over one-block weights (prologue, one compiled program per block kind, epilogue; the same "
                     "values bit for bit) 2.32 s, and the refiner as a loop 0.27 s instead of 0.77 s, so about 1.8 s "
                     "against diffusers' 0.95 s. Wan and CogVideoX avoid this with the host block loop on the CPU "
                     "(docs/design.md \"Block loop\"); the HunyuanVideo pipeline has only the scan. The text "
                     "encoder (0.67x) runs 1 of the demo Llama's 3 layers (the pipeline takes hidden_states[-3] and "
                     "vidax stops there) where transformers runs all 3 (the release: 30 of 32), which flatters vidax. "
                     "Peak RSS (1.08x): vidax holds the converted fp32 weights (9.23 GiB after loading), the whole "
                     "VAE included; diffusers' weights are file pages of its mappings. The machine was busy with other "
                     "sessions' tests for much of this run: the VAE decode rounds and the fp32 432-token row were "
                     "contended (marked *; diffusers' step there took 14-18 s in 0 of 10 quiet rounds, the per-round "
                     "ratio 1.22x), so that row flatters vidax and pulls the fp32 geometric mean (1.50x) below the "
                     "quiet rows' 1.65-1.70x; a second run the same hour was more contended still (others used about "
                     "half the CPU) and was not kept.",
        ),
        BenchConfig(
            "f", "hunyuanvideo-1.5", _HV15_WIDTH, _HV15_VAE, _HV15_TEXT,
            base=(5, 128, 128),
            sweep=((5, 128, 128), (9, 128, 128), (9, 192, 192)),
            bf16_sweep=((9, 128, 128),),
            repeats=2,
            note="HunyuanVideo-1.5 8.3B width (2048 = 16 heads x 128, MLP 8192, a 2-block token refiner over "
                 "3584-wide Qwen2.5-VL states, byT5 1472 and SigLIP 1152 wide projections, 65 input / 32 output "
                 "channels, patch 1, RoPE axes (16, 56, 56)), 2 of its 54 dual-stream blocks, text-to-video with "
                 "classifier-free guidance 6.0 (both halves per step); 1000 masked Qwen tokens and 256 masked byT5 "
                 "tokens join every block's joint attention; the HunyuanVideo-1.5 VAE's structure (5 stages, 16x "
                 "spatial, 4x temporal, 32 latent channels) at half width (64-128-256-512-512); a Qwen2.5-VL language "
                 "model 3584 wide (28 heads x 128, 4 key/value heads) with 3 thin layers (hidden_states[-3] feeds the "
                 "transformer) and a byT5 encoder 1472 wide with 2 thin layers",
            findings="Contention decided most figures of this run (2026-12-03; other sessions' tests used about half "
                     "of the 2 cores for most of it): 17 of 96 measurements were quiet, and of the steps only the "
                     "432-token fp32 row was quiet throughout (5 of 5 rounds): vidax 4.21 s against 5.54 s, 0.76x. "
                     "The 128-token headline (1.56x) sets vidax's median over 10 contended rounds against "
                     "diffusers' 2 quiet ones; the ratio of the two measured back to back in each round is 0.64x "
                     "there, 0.61x at 192 tokens, and the CPU seconds per step 0.70x over the three rows. A second "
                     "run the same hour was more contended still (0 to 2 quiet rounds of 10 per row; per-round fp32 "
                     "ratios 0.58x, 0.60x, 0.60x, bf16 0.48x) and was not kept. Part of the step ratio is the context: "
                     "diffusers' text-to-video step attends over 1985 context rows per block (1000 Qwen, 256 byT5 and "
                     "729 zero image tokens), vidax's over 1256 (the same output; docs/design.md \"HunyuanVideo-1.5\"). "
                     "The text encoder (0.45x) runs 1 of the demo Qwen's 3 layers (the pipeline takes "
                     "hidden_states[-3] and vidax stops there) where transformers runs all 3 (the release: 26 of 28), "
                     "which flatters vidax. Load (2.48x): vidax converts the float32 weights into its own buffers "
                     "(3.48 GiB resident after loading), diffusers maps the files; peak RSS over the whole generation "
                     "is the same (0.97x). The VAE decode's first call (4.5 s against 2.1 s warm) compiles the "
                     "decoder's program.",
        ),
        BenchConfig(
            "g", "cosmos-predict2.5", _COSMOS2B_WIDTH, _WAN_VAE, _COSMOS_TEXT,
            base=(5, 128, 128),
            sweep=((5, 128, 128), (9, 128, 128), (9, 192, 192)),
            bf16_sweep=((9, 128, 128),),
            repeats=2,
            note="Cosmos-Predict2.5 2B width (2048 = 16 heads x 128, MLP 8192, AdaLN-LoRA 256, patch (1, 2, 2), RoPE "
                 "scale (1, 3, 3), 17 input channels plus the padding mask), 2 of its 28 blocks, text-to-world with "
                 "classifier-free guidance 7.0 as Cosmos writes it (`cond + 7 (cond - uncond)`, both halves per step, "
                 "per-frame timesteps); every block cross-attends to 512 Qwen tokens through `crossattn_proj` "
                 "(10752 -> 1024: the concatenated states of the text encoder's 3 layers); the Wan2.1 VAE at its "
                 "release width (base_dim 96, 2 residual blocks per stage); a Qwen2.5-VL language model 3584 wide (28 "
                 "heads x 128, 4 key/value heads) with 3 thin layers (MLP 2048), every layer's state normalised and "
                 "concatenated",
            findings="Contention decided the small steps of this run (2026-12-03; other sessions' tests used about "
                     "half of the 2 cores for most of it): 29 of 92 measurements were quiet, none of the 128- and "
                     "192-token fp32 rounds (0 of 10 each). There diffusers' step took 2.8-3.1 s and as many CPU "
                     "seconds, against 0.99 s at 432 tokens when quiet: PyTorch's OpenMP threads spin when the cores "
                     "are shared, so those rows (0.26x, 0.34x) and the fp32 geometric mean (0.43x) flatter vidax. The "
                     "quiet rows: fp32 at 432 tokens, vidax 0.90 s against 0.99 s (per-round 0.90x, 5 of 8 rounds "
                     "quiet; CPU seconds 0.90x); bf16 at 192 tokens, 0.21 s against 0.15 s (1.39x, 5 of 5 quiet): "
                     "oneDNN multiplies bf16 natively on this CPU (AMX) and XLA:CPU converts to float32. The text "
                     "encoder (0.81x) runs all 3 Qwen layers in both engines (Cosmos concatenates every layer's "
                     "state), unlike configs e and f. The warm VAE decode is even (1.01x); its first call compiles "
                     "the decoder's head and tail programs (6.5 s). Load (8.2x): vidax converts the float32 weights "
                     "into its own buffers (2.02 GiB resident after loading), diffusers maps the files; no vidax "
                     "converter exists for this family yet (no converted-layout row). Peak RSS over the generation "
                     "is about the same (0.96x). The end-to-end rows mix contended and quiet runs (diffusers' two "
                     "took 5.2 and 18.3 s); from the JAX cache vidax's end to end is 0.87x.",
        ),
        BenchConfig(
            "h", "cosmos3", _COSMOS3_EDGE_WIDTH, _WAN22_VAE, {},
            base=(5, 128, 128),
            sweep=((5, 128, 128), (9, 192, 192), (17, 256, 256)),
            bf16_sweep=((9, 192, 192),),
            repeats=2,
            note="Cosmos3 Edge width (2048 = 16 heads x 128, 8 key/value heads, MLP 9216 squared ReLU, Nemotron norms, "
                 "the generation path's own understanding-key norm), 2 of its 28 layers with both streams, "
                 "text-to-video with classifier-free guidance 6.0 (`uncond + 6 (cond - uncond)`, both halves per "
                 "step) and the native flow grid; the generation tokens attend to the prompt's understanding keys "
                 "and values: vidax computes them once per prompt (its `text_encoder_s` is that prefill), diffusers "
                 "recomputes the whole joint sequence at every step and CFG pass; the Wan2.2 VAE at its released "
                 "width",
            findings="Where the step ratio comes from (2026-12-04, the demo tokenizer: prompt rows of 87 and 97 "
                     "tokens, padded to 128 for vidax's prefill): diffusers' step runs the understanding stream over "
                     "each prompt inside each of its two transformer calls; vidax's reads the keys and values its "
                     "prefill computed once (the text-encoder row: 0.376 s for both rows, quiet). vidax's step plus "
                     "that prefill, the work of recomputing every step, is 0.52 s at 32 video tokens and 1.39 s at "
                     "320 (0.60x and 0.61x diffusers' step); the reuse takes it to 0.17x and 0.45x. The saving is a "
                     "fixed cost per step, so its share falls as the video grows (`python -m bench.cosmos3_kv` times "
                     "the same two schedules at 300-token prompts). The text-encoder row's ratio means nothing: "
                     "diffusers' prompt stage is tokenization only (0.001 s), its prompt compute is in its step. The "
                     "bf16 row (0.10x): this CPU has no native bf16 matmul and PyTorch's bf16 step took 6.06 s against "
                     "its 1.39 s in fp32, where XLA:CPU converts to float32 (0.60 s against 0.39 s). Load (27.9x): "
                     "vidax converts the float32 weights into its own buffers (3.63 GiB resident after loading), "
                     "diffusers maps the files; from the vidax-converted layout the load takes 0.13 s (1.32x). The VAE "
                     "decode at the Wan2.2 release width is 0.90x warm; its first call compiles the decoder's programs "
                     "(20.8 s against 13.4 s warm), which is most of vidax's cold end to end (1.04x; 0.90x from the "
                     "JAX cache). Contention: another session used about half of the 2 cores for parts of this run "
                     "(53 of 102 measurements quiet); the fresh end-to-end processes were contended (marked *), the "
                     "step rows had 3 to 6 quiet rounds each (medians over those), the VAE and text-encoder rounds "
                     "were quiet.",
        ),
        BenchConfig(
            "i", "ltx2", _LTX25_WIDTH, {}, {},
            base=(9, 128, 128),
            sweep=((9, 128, 128), (17, 256, 256)),
            bf16_sweep=((9, 128, 128),),
            repeats=2, parts=("sweep",),
            note="LTX-2.5 22B width (video 4096 = 32 heads x 128, audio 2048 = 32 x 64, text 4096 / 2048 from the "
                 "connectors, gated attention, cross-attention AdaLN with the prompt embedders, split RoPE), 2 of its "
                 "48 blocks: the transformer alone (the sampling step, where the time goes), one guided "
                 "evaluation of the CFG batch (2 rows: `LTX2Pipeline`'s cond/uncond call; its STG and modality "
                 "passes are separate calls) over 256 text tokens per stream (the negative prompt's last 96 masked) "
                 "and the audio latents of the clip's duration",
        ),
        BenchConfig(
            "smoke", "wan2.1", {}, {}, {}, base=(5, 32, 32), sweep=((5, 32, 32),), bf16_sweep=((5, 32, 32),),
            repeats=1, note="tiny demo shapes (harness test only)", docs=False,
        ),
    ]
}


# ------------------------------------------------------------------------------------ process probes


def _proc_status() -> dict:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmHWM", "VmRSS", "RssAnon", "RssFile", "Threads"):
                parts = v.split()
                out[k] = int(parts[0]) * (1024 if len(parts) > 1 else 1)
    return out


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)  # all threads of this process
    return r.ru_utime + r.ru_stime


def _machine_busy_s() -> float:
    """CPU seconds all processes of the machine have spent busy (``/proc/stat``), for contention accounting."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return 0.0
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait


QUIET = 0.15  # a measurement is "quiet" when other processes used under this share of the machine's CPU


def _proc_io() -> dict:
    try:
        with open("/proc/self/io") as f:
            return {k: int(v) for k, v in (line.split(":") for line in f)}
    except OSError:
        return {}


# ------------------------------------------------------------------------------------ Wan family


def _wan_latent_shape(frames: int, height: int, width: int) -> tuple[int, ...]:
    return (1, 16, (frames - 1) // 4 + 1, height // 8, width // 8)


def _wan22_latent_shape(frames: int, height: int, width: int) -> tuple[int, ...]:
    return (1, 48, (frames - 1) // 4 + 1, height // 16, width // 16)  # the Wan2.2 VAE: 48 channels, 16x spatial


def _patch_tokens(latent_shape):
    def tokens(cfg: BenchConfig, frames: int, height: int, width: int) -> int:
        pt, ph, pw = cfg.transformer.get("patch_size", (1, 2, 2))
        _, _, t, h, w = latent_shape(frames, height, width)
        return (t // pt) * (h // ph) * (w // pw)
    return tokens


_wan_tokens = _patch_tokens(_wan_latent_shape)


def _converter(module: str):
    """``(src, dst) -> bool``: the checkpoint translated once by ``vidax convert`` (``module.convert_checkpoint``,
    vidax layout, loads as a plain copy), all in fp32 as written; False if that converter is unavailable."""
    def convert(src: Path, dst: Path) -> bool:
        try:
            convert_checkpoint = importlib.import_module(module).convert_checkpoint
        except (ImportError, AttributeError):
            return False
        convert_checkpoint(src, dst, dtype="float32", text_encoder_dtype="float32", vae_dtype="float32")
        return True
    return convert


_wan_convert = _converter("vidax.models.wan.convert")
_cog_convert = _converter("vidax.models.cogvideox.convert")


def _wan_write(folder: Path, cfg: BenchConfig, task: str = "t2v") -> None:
    from vidax.models.wan.demo import write_demo_checkpoint

    write_demo_checkpoint(folder, seed=0, transformer_overrides=dict(cfg.transformer),
                          vae_overrides=dict(cfg.vae), text_overrides=dict(cfg.text), task=task)


def _wan22_write(folder: Path, cfg: BenchConfig) -> None:
    _wan_write(folder, cfg, task="ti2v")


class WanVidax:
    """vidax's ``WanPipeline`` (JAX), measured through its own stages."""

    def __init__(self, folder: Path, dtype: str, jax_cache: str | None):
        self.cache_events = _jax_setup(jax_cache)
        from vidax.core import wan_vae  # noqa: F401  (imports are not load time)
        from vidax.models.wan.pipeline import WanPipeline  # noqa: F401

        self.folder, self.dtype = folder, dtype

    def load(self) -> None:
        import jax

        from vidax.models.wan.pipeline import WanPipeline

        self.pipe = WanPipeline.from_pretrained(self.folder, dtype=self.dtype)
        jax.block_until_ready((self.pipe.transformer_params, self.pipe.offload and self.pipe.offload.chunks))

    @property
    def params(self) -> tuple:
        """``(parameters outside the chunked blocks or all of them, the chunked blocks or None)``, as the
        pipeline holds them (its default block loop: per-block weights on CPU)."""
        from vidax.models.wan.pipeline_i2v import OffloadedExpert

        pipe = self.pipe
        # WanImageToVideoPipeline (Wan2.2 TI2V) keeps the transformer in its expert set.
        p = pipe.transformer_params if pipe.transformer_params is not None else pipe.experts.get(0)
        return (p.resident, p.stack) if isinstance(p, OffloadedExpert) else (p, pipe.offload)

    def encode(self) -> None:
        import jax

        text = self.pipe.encode_prompt([PROMPT, NEGATIVE])
        self.context = text.astype(self.params[0]["patch_embedding"]["kernel"].dtype)
        jax.block_until_ready(self.context)

    def prepare(self, latents) -> float:
        """Compile the guided step for this latent shape (as ``WanPipeline.__call__`` does); return seconds."""
        import jax.numpy as jnp

        from vidax.models.wan.transformer import rope_tables

        pipe = self.pipe
        cos, sin = (jnp.asarray(a) for a in rope_tables(pipe.transformer_cfg, latents.shape))
        b = latents.shape[0]
        params, stack = self.params
        # The T2V step (per-sample AdaLN); for TI2V text-to-video it is the same computation as per-token timesteps.
        self.args = (params, jnp.asarray(latents), jnp.full((b,), 999.0, jnp.float32), self.context,
                     cos, sin, jnp.float32(GUIDANCE))
        t0 = time.perf_counter()
        self.compiled = pipe.compile_step(*self.args, guided=True, stack=stack)
        return time.perf_counter() - t0

    def step(self) -> None:
        import jax

        jax.block_until_ready(self.compiled(*self.args))

    def decode(self, latents):
        import jax.numpy as jnp
        import numpy as np

        from vidax.core import wan_vae

        z = wan_vae.denormalize_latents(self.pipe.vae_cfg, jnp.asarray(latents))
        return np.asarray(wan_vae.decode(self.pipe.vae_params, self.pipe.vae_cfg, z))

    def generate(self, frames: int, height: int, width: int, steps: int, latents):
        out = self.pipe(PROMPT, NEGATIVE, height=height, width=width, num_frames=frames, num_inference_steps=steps,
                        guidance_scale=GUIDANCE, latents=latents, output_type="float", progress=False)
        m = out.metrics
        res = {k: float(m[k]) for k in ("text_encoder_s", "compile_s", "step_s", "vae_decode_s") if k in m}
        return out.frames, {**res, "jax_cache_hits": self.cache_events["hits"],
                            "jax_cache_requests": self.cache_events["requests"]}

    def threads(self) -> dict:
        return _jax_threads()


def _jax_setup(jax_cache: str | None) -> dict:
    """Start the JAX backend (not load time), with the persistent compilation cache if ``jax_cache``;
    returns the ``{"hits", "requests"}`` counters the cache's monitoring events update."""
    import jax
    import jax.numpy as jnp

    events = {"hits": 0, "requests": 0}
    if jax_cache:
        jax.config.update("jax_compilation_cache_dir", jax_cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        jax.config.update("jax_explain_cache_misses", True)  # misses named in the worker's log

        def count(event, **kw):
            if event == "/jax/compilation_cache/cache_hits":
                events["hits"] += 1
            elif event == "/jax/compilation_cache/compile_requests_use_cache":
                events["requests"] += 1

        jax.monitoring.register_event_listener(count)
    jnp.zeros(1).block_until_ready()
    return events


def _jax_threads() -> dict:
    return {"engine_threads": f"XLA:CPU (cpu_count {os.cpu_count()})"}


class WanDiffusers:
    """diffusers' ``WanPipeline`` (PyTorch, CPU), with ``torch.set_num_threads`` left at its default."""

    PIPELINE, TRANSFORMER = "WanPipeline", "WanTransformer3DModel"  # diffusers classes

    def __init__(self, folder: Path, dtype: str, jax_cache: str | None):
        import importlib

        import diffusers
        import torch
        import transformers  # noqa: F401

        # Imports are not load time: diffusers and transformers import their classes lazily, on first
        # attribute access, so resolve every class the folder's model_index.json names (and ours) now.
        getattr(diffusers, self.PIPELINE), getattr(diffusers, self.TRANSFORMER)
        index = json.loads((folder / "model_index.json").read_text())
        for value in index.values():
            if isinstance(value, list) and len(value) == 2 and value[0] in ("diffusers", "transformers"):
                getattr(importlib.import_module(value[0]), value[1])
        torch.zeros(1)
        self.torch = torch
        self.folder = folder
        self.tdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]

    def load(self) -> None:
        import diffusers

        torch = self.torch
        pipeline = getattr(diffusers, self.PIPELINE)
        if self.tdtype == torch.float32:
            pipe = pipeline.from_pretrained(self.folder, dtype=torch.float32)
        else:  # as vidax's dtype: only the transformer in bf16 (its fp32-kept modules stay fp32)
            tr = getattr(diffusers, self.TRANSFORMER).from_pretrained(self.folder / "transformer", dtype=self.tdtype)
            pipe = pipeline.from_pretrained(self.folder, transformer=tr, dtype=torch.float32)
        pipe.set_progress_bar_config(disable=True)
        self.pipe = pipe

    def encode(self) -> None:
        with self.torch.no_grad():
            pe, ne = self.pipe.encode_prompt(PROMPT, NEGATIVE, do_classifier_free_guidance=True, max_sequence_length=512)
        self.pe, self.ne = pe.to(self.tdtype), ne.to(self.tdtype)

    def prepare(self, latents) -> float:
        torch = self.torch
        self.x = torch.from_numpy(latents).to(self.tdtype)  # the pipeline's latent_model_input
        self.t = torch.full((latents.shape[0],), 999.0)
        if self.pipe.config.get("expand_timesteps", False):
            # diffusers.WanPipeline with expand_timesteps (Wan2.2 TI2V): one timestep per token, (B, T * H/2 * W/2).
            b, _, t, h, w = latents.shape
            self.t = torch.full((b, t * (h // 2) * (w // 2)), 999.0)
        return 0.0

    def step(self) -> None:
        tr = self.pipe.transformer
        with self.torch.no_grad():  # diffusers.WanPipeline.__call__, one denoising step
            with tr.cache_context("cond", step_index=0, sigma=1.0, num_inference_steps=1):
                cond = tr(hidden_states=self.x, timestep=self.t, encoder_hidden_states=self.pe, attention_kwargs=None,
                          return_dict=False)[0]
            with tr.cache_context("uncond", step_index=0, sigma=1.0, num_inference_steps=1):
                uncond = tr(hidden_states=self.x, timestep=self.t, encoder_hidden_states=self.ne, attention_kwargs=None,
                            return_dict=False)[0]
            self.noise_pred = uncond + GUIDANCE * (cond - uncond)

    def decode(self, latents):
        torch = self.torch
        vae = self.pipe.vae
        z = torch.from_numpy(latents).to(vae.dtype)
        mean = torch.tensor(vae.config.latents_mean).view(1, vae.config.z_dim, 1, 1, 1)
        inv_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, vae.config.z_dim, 1, 1, 1)
        with torch.no_grad():
            return vae.decode(z / inv_std + mean, return_dict=False)[0].float().numpy()

    def generate(self, frames: int, height: int, width: int, steps: int, latents):
        torch, pipe = self.torch, self.pipe
        times: dict[str, float] = {"text_encoder_s": 0.0, "vae_decode_s": 0.0}
        marks: list[tuple[float, str]] = []

        def timed(name, fn):
            def wrapper(*a, **k):
                t0 = time.perf_counter()
                r = fn(*a, **k)
                times[name] += time.perf_counter() - t0
                if name == "text_encoder_s":
                    marks.append((time.perf_counter(), "text"))
                return r
            return wrapper

        enc, dec = pipe.encode_prompt, pipe.vae.decode
        pipe.encode_prompt = timed("text_encoder_s", enc)
        pipe.vae.decode = timed("vae_decode_s", dec)

        def on_step(_pipe, i, t, kw):
            marks.append((time.perf_counter(), "step"))
            return kw

        try:
            with torch.no_grad():
                frames_out = self._call(frames, height, width, steps, latents, on_step)
        finally:
            del pipe.encode_prompt, pipe.vae.decode
        # the steps after the last text-encoder call (a pipeline may encode the prompt and the negative separately)
        steps_at = [t for t, kind in marks if kind == "step"]
        first = [t for t, kind in marks if kind == "text"][-1:] + steps_at
        step_times = [b - a for a, b in zip(first, first[1:])]
        times["step_s"] = statistics.median(step_times) if step_times else 0.0
        return frames_out, times

    def _call(self, frames: int, height: int, width: int, steps: int, latents, on_step):
        """The pipeline's ``__call__`` on these inputs; returns its frames (float32 numpy, ``output_type="np"``)."""
        return self.pipe(PROMPT, NEGATIVE, height=height, width=width, num_frames=frames, num_inference_steps=steps,
                         guidance_scale=GUIDANCE, latents=self.torch.from_numpy(latents), output_type="np",
                         callback_on_step_end=on_step).frames

    def threads(self) -> dict:
        torch = self.torch
        return {"engine_threads": f"torch intra-op {torch.get_num_threads()}, inter-op {torch.get_num_interop_threads()}",
                "torch_num_threads": torch.get_num_threads(), "torch_interop_threads": torch.get_num_interop_threads()}


# ------------------------------------------------------------------------------------ CogVideoX family


def _cog_latent_shape(frames: int, height: int, width: int) -> tuple[int, ...]:
    return (1, (frames - 1) // 4 + 1, 16, height // 8, width // 8)  # (B, F, C, H, W), as the CogVideoX pipelines


def _cog_tokens(cfg: BenchConfig, frames: int, height: int, width: int) -> int:
    """Video tokens per CFG half (the 226 text tokens join them in every block's attention)."""
    p = cfg.transformer.get("patch_size", 2)
    _, f, _, h, w = _cog_latent_shape(frames, height, width)
    return f * (h // p) * (w // p)


def _cog_write(folder: Path, cfg: BenchConfig) -> None:
    from vidax.models.cogvideox.demo import write_demo_checkpoint

    write_demo_checkpoint(folder, seed=0, variant="2b", transformer_overrides=dict(cfg.transformer),
                          vae_overrides=dict(cfg.vae), text_overrides=dict(cfg.text))


class CogVidax(WanVidax):
    """vidax's ``CogVideoXPipeline`` (JAX), measured through its own stages."""

    def __init__(self, folder: Path, dtype: str, jax_cache: str | None):
        self.cache_events = _jax_setup(jax_cache)
        from vidax.models.cogvideox import pipeline  # noqa: F401  (imports are not load time)

        self.folder, self.dtype = folder, dtype

    def load(self) -> None:
        import jax

        from vidax.models.cogvideox.pipeline import CogVideoXPipeline

        self.pipe = CogVideoXPipeline.from_pretrained(self.folder, dtype=self.dtype)
        jax.block_until_ready((self.pipe.transformer_params, self.pipe.block_chunks and self.pipe.block_chunks.chunks))

    def encode(self) -> None:
        import jax

        pipe = self.pipe
        text = pipe.encode_prompt([NEGATIVE, PROMPT])  # [uncond, cond], as the reference batches them
        self.context = text.astype(pipe.compute_dtype)
        jax.block_until_ready(self.context)

    def prepare(self, latents) -> float:
        import jax
        import jax.numpy as jnp

        from vidax.models.cogvideox.transformer import position_tables

        pipe = self.pipe
        positions = jax.tree.map(jnp.asarray, position_tables(pipe.transformer_cfg, latents.shape))
        self.args = (pipe.transformer_params, jnp.asarray(latents), jnp.full((latents.shape[0],), 999.0, jnp.float32),
                     self.context, positions, jnp.float32(GUIDANCE), None, None)
        t0 = time.perf_counter()
        self.compiled = pipe.compile_step(*self.args, guided=True)
        return time.perf_counter() - t0

    def decode(self, latents):
        return self.pipe.decode_latents(latents)


class CogDiffusers(WanDiffusers):
    """diffusers' ``CogVideoXPipeline`` (PyTorch, CPU)."""

    PIPELINE, TRANSFORMER = "CogVideoXPipeline", "CogVideoXTransformer3DModel"

    def encode(self) -> None:
        with self.torch.no_grad():
            pe, ne = self.pipe.encode_prompt(PROMPT, NEGATIVE, do_classifier_free_guidance=True,
                                             max_sequence_length=226)
        self.context = self.torch.cat([ne, pe]).to(self.tdtype)  # diffusers.CogVideoXPipeline.__call__

    def prepare(self, latents) -> float:
        torch, pipe = self.torch, self.pipe
        self.x = torch.from_numpy(latents).to(self.tdtype)
        self.t = torch.full((2 * latents.shape[0],), 999)
        _, f, _, h, w = latents.shape
        vs = pipe.vae_scale_factor_spatial
        self.rotary = (pipe._prepare_rotary_positional_embeddings(h * vs, w * vs, f, torch.device("cpu"))
                       if pipe.transformer.config.use_rotary_positional_embeddings else None)
        return 0.0

    def step(self) -> None:
        torch = self.torch
        with torch.no_grad():  # diffusers.CogVideoXPipeline.__call__, one denoising step
            x = torch.cat([self.x] * 2)
            pred = self.pipe.transformer(hidden_states=x, encoder_hidden_states=self.context, timestep=self.t,
                                         image_rotary_emb=self.rotary, return_dict=False)[0].float()
            uncond, text = pred.chunk(2)
            self.noise_pred = uncond + GUIDANCE * (text - uncond)

    def decode(self, latents):
        with self.torch.no_grad():
            return self.pipe.decode_latents(self.torch.from_numpy(latents)).float().numpy()


# ------------------------------------------------------------------------------------ LTX-Video family

LTX_FRAME_RATE = 25.0  # both pipelines' default frame rate (the RoPE time axis is divided by it)
LTX_DECODE_TIMESTEP = 0.05  # the 0.9.8 releases' decode timestep (the decode noise scale defaults to it in both)
LTX_FIRST_TIMESTEP = 1000.0  # LTXConditionPipeline's first timestep (1000 x its first linear-quadratic sigma, 1.0)


def _ltx_latent_shape(frames: int, height: int, width: int) -> tuple[int, ...]:
    return (1, 128, (frames - 1) // 8 + 1, height // 32, width // 32)  # every release: 128 channels, 32x, 8x


def _ltx_tokens(cfg: BenchConfig, frames: int, height: int, width: int) -> int:
    """Video tokens per CFG half (patch size 1 in every release)."""
    _, _, f, h, w = _ltx_latent_shape(frames, height, width)
    return f * h * w


def _ltx_decode_noise(shape) -> Any:
    """The noise both contenders mix into the latents before a timestep-conditioned decode (the same draw)."""
    return _latents(shape, 8)


def _ltx_write(folder: Path, cfg: BenchConfig) -> None:
    from vidax.models.ltx.demo import write_demo_checkpoint

    write_demo_checkpoint(folder, seed=0, variant="0.9.8", transformer_overrides=dict(cfg.transformer),
                          vae_overrides=dict(cfg.vae), text_overrides=dict(cfg.text))


_ltx_convert = _converter("vidax.models.ltx.layout")


class LTXVidax(WanVidax):
    """vidax's ``LTXPipeline`` (JAX), measured through its own stages; the folder's ``model_index.json`` names
    ``LTXConditionPipeline``, so it samples with that pipeline's semantics."""

    def __init__(self, folder: Path, dtype: str, jax_cache: str | None):
        self.cache_events = _jax_setup(jax_cache)
        from vidax.models.ltx import pipeline  # noqa: F401  (imports are not load time)

        self.folder, self.dtype = folder, dtype

    def load(self) -> None:
        import jax

        from vidax.models.ltx.pipeline import LTXPipeline

        self.pipe = LTXPipeline.from_pretrained(self.folder, dtype=self.dtype)
        jax.block_until_ready((self.pipe.transformer_params, self.pipe.block_chunks and self.pipe.block_chunks.chunks))

    def encode(self) -> None:
        import jax

        from vidax.models.ltx.pipeline import MAX_SEQUENCE_LENGTH

        pipe = self.pipe
        # [negative, prompt], as the reference batches them; 256 tokens for LTXConditionPipeline folders
        text, self.lengths = pipe.encode_prompt([NEGATIVE, PROMPT], MAX_SEQUENCE_LENGTH[pipe.pipeline_class])
        self.context = text.astype(pipe.compute_dtype)
        jax.block_until_ready((self.context, self.lengths))

    def prepare(self, latents) -> float:
        """Compile the guided step for this latent shape (as ``LTXPipeline.__call__`` does); return seconds."""
        import jax.numpy as jnp

        from vidax.models.ltx.pipeline import pack_latents

        pipe = self.pipe
        cos, sin = (jnp.asarray(a) for a in pipe.rope(tuple(latents.shape[2:]), LTX_FRAME_RATE))
        x = pack_latents(jnp.asarray(latents))  # the sampler state: float32 tokens (B, F'H'W', 128)
        t = jnp.full((latents.shape[0],), LTX_FIRST_TIMESTEP, jnp.float32)
        self.args = (pipe.transformer_params, x, t, self.context, self.lengths, cos, sin, jnp.float32(GUIDANCE),
                     jnp.float32(0.0))
        t0 = time.perf_counter()
        self.compiled = pipe.compile_step(*self.args[1:], guided=True, rescale=False)
        return time.perf_counter() - t0

    def decode(self, latents):
        import jax

        from vidax.models.ltx.conditioning import Draws

        noise = _ltx_decode_noise(latents.shape)
        draws = Draws(jax.random.key(0),
                      lambda purpose, index, shape: noise if (purpose, index) == ("decode", 0) else None)
        return self.pipe.decode_latents(latents, LTX_DECODE_TIMESTEP, None, draws)

    def generate(self, frames: int, height: int, width: int, steps: int, latents):
        out = self.pipe(PROMPT, NEGATIVE, height=height, width=width, num_frames=frames, frame_rate=LTX_FRAME_RATE,
                        num_inference_steps=steps, guidance_scale=GUIDANCE, latents=latents,
                        decode_timestep=LTX_DECODE_TIMESTEP, decode_noise=_ltx_decode_noise(latents.shape),
                        output_type="float", progress=False)
        m = out.metrics
        res = {k: float(m[k]) for k in ("text_encoder_s", "compile_s", "step_s", "vae_decode_s") if k in m}
        return out.frames, {**res, "jax_cache_hits": self.cache_events["hits"],
                            "jax_cache_requests": self.cache_events["requests"]}


class LTXDiffusers(WanDiffusers):
    """diffusers' ``LTXConditionPipeline`` (PyTorch, CPU), text-to-video (no conditions)."""

    PIPELINE, TRANSFORMER = "LTXConditionPipeline", "LTXVideoTransformer3DModel"

    def __init__(self, folder: Path, dtype: str, jax_cache: str | None):
        super().__init__(folder, dtype, jax_cache)
        import diffusers.pipelines.ltx.pipeline_ltx_condition as module

        self.module = module  # its randn_tensor is replaced during a generation (see _call)

    def encode(self) -> None:
        with self.torch.no_grad():
            pe, pm, ne, nm = self.pipe.encode_prompt(PROMPT, NEGATIVE, do_classifier_free_guidance=True,
                                                     max_sequence_length=256)
        # diffusers.LTXConditionPipeline.__call__: [negative, prompt]
        self.context, self.mask = self.torch.cat([ne, pe]).to(self.tdtype), self.torch.cat([nm, pm])

    def prepare(self, latents) -> float:
        torch, pipe = self.torch, self.pipe
        b, _, f, h, w = latents.shape
        p, pt = pipe.transformer_spatial_patch_size, pipe.transformer_temporal_patch_size
        self.x = pipe._pack_latents(torch.from_numpy(latents), p, pt)  # the sampler state, float32
        # diffusers.LTXConditionPipeline.prepare_latents / __call__ without conditions: pixel coordinates of each
        # token, time divided by the frame rate, repeated for the two CFG halves; timestep (2B, 1).
        ids = pipe._prepare_video_ids(b, f, h, w, p, pt)
        coords = pipe._scale_video_ids(ids, pipe.vae_spatial_compression_ratio, pipe.vae_temporal_compression_ratio,
                                       0).float()
        coords[:, 0] = coords[:, 0] * (1.0 / LTX_FRAME_RATE)
        self.coords = torch.cat([coords, coords])
        self.t = torch.full((2 * b, 1), LTX_FIRST_TIMESTEP)
        return 0.0

    def step(self) -> None:
        torch, tr = self.torch, self.pipe.transformer
        with torch.no_grad():  # diffusers.LTXConditionPipeline.__call__, one denoising step
            x = torch.cat([self.x] * 2).to(self.tdtype)
            with tr.cache_context("cond_uncond"):
                pred = tr(hidden_states=x, encoder_hidden_states=self.context, timestep=self.t,
                          encoder_attention_mask=self.mask, video_coords=self.coords, attention_kwargs=None,
                          return_dict=False)[0]
            uncond, text = pred.chunk(2)
            self.noise_pred = uncond + GUIDANCE * (text - uncond)

    def decode(self, latents):
        torch, pipe = self.torch, self.pipe
        vae = pipe.vae
        with torch.no_grad():  # diffusers.LTXConditionPipeline.__call__ after the loop
            z = pipe._denormalize_latents(torch.from_numpy(latents), vae.latents_mean, vae.latents_std,
                                          vae.config.scaling_factor)
            timestep = None
            if vae.config.timestep_conditioning:
                s = LTX_DECODE_TIMESTEP
                z = (1 - s) * z + s * torch.from_numpy(_ltx_decode_noise(latents.shape))
                timestep = torch.tensor([LTX_DECODE_TIMESTEP])
            return vae.decode(z, timestep, return_dict=False)[0].float().numpy()

    def _call(self, frames: int, height: int, width: int, steps: int, latents, on_step):
        """``LTXConditionPipeline`` draws its initial noise itself and ignores ``latents=`` for text-to-video (it
        uses them only with ``denoise_strength < 1``), so its ``randn_tensor`` hands it this run's latents and then
        the decode noise, the two draws it makes, in its order; vidax gets the same arrays as arguments."""
        torch = self.torch
        queue = [latents, _ltx_decode_noise(latents.shape)]

        def randn_tensor(shape, generator=None, device=None, dtype=None, layout=None):
            a = queue.pop(0)
            if tuple(a.shape) != tuple(shape):
                raise RuntimeError(f"LTXConditionPipeline drew noise of shape {tuple(shape)}, expected {a.shape}")
            return torch.from_numpy(a).to(dtype or torch.float32)

        original = self.module.randn_tensor
        self.module.randn_tensor = randn_tensor
        try:
            frames_out = self.pipe(prompt=PROMPT, negative_prompt=NEGATIVE, height=height, width=width,
                                   num_frames=frames, frame_rate=LTX_FRAME_RATE, num_inference_steps=steps,
                                   guidance_scale=GUIDANCE, decode_timestep=LTX_DECODE_TIMESTEP, output_type="np",
                                   callback_on_step_end=on_step).frames
        finally:
            self.module.randn_tensor = original
        if queue:
            raise RuntimeError(f"LTXConditionPipeline made {2 - len(queue)} of its 2 noise draws")
        return frames_out


# ------------------------------------------------------------------------------------ HunyuanVideo family

HV_GUIDANCE = 6.0  # the release's embedded guidance (guidance_scale of HunyuanVideoPipeline.__call__)
HV_FIRST_TIMESTEP = 1000.0  # the first timestep: 1000 x the first shifted sigma, 1.0


def _hv_latent_shape(frames: int, height: int, width: int) -> tuple[int, ...]:
    return (1, 16, (frames - 1) // 4 + 1, height // 8, width // 8)  # (B, C, T, H, W): 4x temporal, 8x spatial


def _hv_tokens(cfg: BenchConfig, frames: int, height: int, width: int) -> int:
    """Video tokens of the step (the 256 text tokens join them in every block's joint attention)."""
    p, pt = cfg.transformer.get("patch_size", 2), cfg.transformer.get("patch_size_t", 1)
    _, _, t, h, w = _hv_latent_shape(frames, height, width)
    return (t // pt) * (h // p) * (w // p)


def _hv_write(folder: Path, cfg: BenchConfig) -> None:
    """The demo writer's text-to-video folder with the configuration's transformer, then its text towers and VAE
    written again at the configuration's widths (the demo writer takes overrides of the transformer only)."""
    import numpy as np

    from vidax.models.hunyuanvideo import demo
    from vidax.models.hunyuanvideo.text import write_demo_text_encoders

    demo.write_demo_checkpoint(folder, task="t2v", seed=0, transformer_overrides=dict(cfg.transformer))
    rng = np.random.default_rng(1)
    text = dict(cfg.text)
    if text:
        for part in ("text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2"):
            shutil.rmtree(folder / part)
        write_demo_text_encoders(folder, rng, **text)
    if cfg.vae:
        shutil.rmtree(folder / "vae")
        demo.write_vae(folder, demo.vae_config(**cfg.vae), rng)


_hv_convert = _converter("vidax.models.hunyuanvideo.convert")


class HunyuanVidax(WanVidax):
    """vidax's ``HunyuanVideoPipeline`` (JAX), measured through its own stages: the step is the pipeline's
    ``compile_step`` (one transformer evaluation with the embedded guidance, as ``HunyuanVideoPipeline.__call__``
    without true CFG; the host block loop on the CPU, the scan elsewhere)."""

    def __init__(self, folder: Path, dtype: str, jax_cache: str | None):
        self.cache_events = _jax_setup(jax_cache)
        from vidax.models.hunyuanvideo import pipeline  # noqa: F401  (imports are not load time)

        self.folder, self.dtype = folder, dtype

    def load(self) -> None:
        import jax

        from vidax.models.hunyuanvideo.pipeline import HunyuanVideoPipeline

        self.pipe = HunyuanVideoPipeline.from_pretrained(self.folder, dtype=self.dtype, progress=False)
        jax.block_until_ready((self.pipe.transformer_params, self.pipe.vae_params))

    def encode(self) -> None:
        import jax
        import jax.numpy as jnp

        pipe = self.pipe
        embeds, mask, pooled = pipe.encode_prompt([PROMPT])
        self.context = (embeds.astype(pipe.compute_dtype), jnp.asarray(mask, jnp.int32),
                        pooled.astype(pipe.compute_dtype))
        jax.block_until_ready(self.context)

    def prepare(self, latents) -> float:
        """Compile the step for this latent shape (as ``HunyuanVideoPipeline.__call__`` does); return seconds."""
        import jax.numpy as jnp

        from vidax.core.placement import mesh_context
        from vidax.models.hunyuanvideo.transformer import guidance_input

        pipe = self.pipe
        b = latents.shape[0]
        context, mask, pooled = self.context
        guidance = (jnp.asarray(guidance_input(HV_GUIDANCE, b, pipe.compute_dtype))
                    if pipe.transformer_cfg.guidance_embeds else None)
        self.args = (pipe.transformer_params, jnp.asarray(latents), jnp.full((b,), HV_FIRST_TIMESTEP, jnp.float32),
                     context, mask, pooled, guidance, jnp.float32(1.0))
        t0 = time.perf_counter()
        with mesh_context(pipe.mesh):  # the pipeline's own step: the host block loop on the CPU, the scan elsewhere
            self.compiled = pipe.compile_step(*self.args, guided=False)
        return time.perf_counter() - t0

    def decode(self, latents):
        return self.pipe.decode_latents(latents)

    def generate(self, frames: int, height: int, width: int, steps: int, latents):
        out = self.pipe(PROMPT, height=height, width=width, num_frames=frames, num_inference_steps=steps,
                        guidance_scale=HV_GUIDANCE, latents=latents, output_type="float", progress=False)
        m = out.metrics
        res = {k: float(m[k]) for k in ("text_encoder_s", "compile_s", "step_s", "vae_decode_s") if k in m}
        return out.frames, {**res, "jax_cache_hits": self.cache_events["hits"],
                            "jax_cache_requests": self.cache_events["requests"]}


class HunyuanDiffusers(WanDiffusers):
    """diffusers' ``HunyuanVideoPipeline`` (PyTorch, CPU), text-to-video with embedded guidance.

    The prompt template is the reference's with its ``crop_start`` counted for the folder's tokenizer (the demo's is
    not the released one), as vidax's pipeline fits it (:func:`vidax.models.hunyuanvideo.text.fit_prompt_template`);
    both engines then crop the same template tokens.
    """

    PIPELINE, TRANSFORMER = "HunyuanVideoPipeline", "HunyuanVideoTransformer3DModel"

    def __init__(self, folder: Path, dtype: str, jax_cache: str | None):
        super().__init__(folder, dtype, jax_cache)
        from vidax.models.hunyuanvideo import text as htext

        tokenizer, _ = htext.load_tokenizers(htext.text_encoder_folders(folder))
        self.template = htext.fit_prompt_template(tokenizer, htext.T2V_PROMPT_TEMPLATE)

    def encode(self) -> None:
        with self.torch.no_grad():
            pe, pooled, mask = self.pipe.encode_prompt(PROMPT, prompt_template=self.template, max_sequence_length=256)
        # diffusers.HunyuanVideoPipeline.__call__: all three in the transformer dtype
        self.pe, self.pooled, self.mask = pe.to(self.tdtype), pooled.to(self.tdtype), mask.to(self.tdtype)

    def prepare(self, latents) -> float:
        torch = self.torch
        b = latents.shape[0]
        self.x = torch.from_numpy(latents).to(self.tdtype)  # latent_model_input
        self.t = torch.full((b,), HV_FIRST_TIMESTEP)  # float32, as the latents
        self.guidance = torch.tensor([HV_GUIDANCE] * b, dtype=self.tdtype) * 1000.0
        return 0.0

    def step(self) -> None:
        tr = self.pipe.transformer
        with self.torch.no_grad():  # diffusers.HunyuanVideoPipeline.__call__, one denoising step (no true CFG)
            with tr.cache_context("cond"):
                self.noise_pred = tr(hidden_states=self.x, timestep=self.t, encoder_hidden_states=self.pe,
                                     encoder_attention_mask=self.mask, pooled_projections=self.pooled,
                                     guidance=self.guidance, attention_kwargs=None, return_dict=False)[0]

    def decode(self, latents):
        torch, vae = self.torch, self.pipe.vae
        with torch.no_grad():  # diffusers.HunyuanVideoPipeline.__call__ after the loop; frames (B, F, H, W, 3) in [0, 1]
            z = torch.from_numpy(latents).to(vae.dtype) / vae.config.scaling_factor
            video = vae.decode(z, return_dict=False)[0]
            return (video / 2 + 0.5).clamp(0, 1).permute(0, 2, 3, 4, 1).float().numpy()

    def _call(self, frames: int, height: int, width: int, steps: int, latents, on_step):
        return self.pipe(PROMPT, height=height, width=width, num_frames=frames, num_inference_steps=steps,
                         guidance_scale=HV_GUIDANCE, latents=self.torch.from_numpy(latents),
                         prompt_template=self.template, output_type="np", callback_on_step_end=on_step).frames


# ------------------------------------------------------------------------------------ HunyuanVideo-1.5 family

HV15_GUIDANCE = 6.0  # the release's classifier-free guidance (the guider's guidance_scale)
HV15_FIRST_TIMESTEP = 1000.0  # the first timestep: 1000 x the first sigma, 1.0 (a shift leaves it at 1)
# diffusers renders the Qwen prompt with the tokenizer's Jinja chat template, which the demo tokenizer does not carry
# (vidax renders Qwen's template itself); for the system, user and generation turns of these prompts (string
# contents) this one renders what Qwen2.5-VL's released template renders.
HV15_CHAT_TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
                      "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _hv15_latent_shape(frames: int, height: int, width: int) -> tuple[int, ...]:
    return (1, 32, (frames - 1) // 4 + 1, height // 16, width // 16)  # (B, C, T, H, W): 4x temporal, 16x spatial


def _hv15_tokens(cfg: BenchConfig, frames: int, height: int, width: int) -> int:
    """Video tokens of the step (patch 1; the 1256 text tokens join them in every block's joint attention)."""
    _, _, t, h, w = _hv15_latent_shape(frames, height, width)
    return t * h * w


def _hv15_write(folder: Path, cfg: BenchConfig) -> None:
    """The demo writer's text-to-video folder with the configuration's transformer, then its text encoders and VAE
    written again at the configuration's widths."""
    import numpy as np

    from vidax.models.hunyuanvideo15 import demo

    demo.write_demo_checkpoint(folder, task="t2v", seed=0, guidance_scale=HV15_GUIDANCE,
                               transformer_overrides=dict(cfg.transformer))
    rng = np.random.default_rng(1)
    text = dict(cfg.text)
    if text:
        for part in ("text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2"):
            shutil.rmtree(folder / part)
        demo.write_text_encoders(folder, rng, qwen_overrides=text.get("qwen"), t5_overrides=text.get("t5"))
    if cfg.vae:
        shutil.rmtree(folder / "vae")
        demo.write_vae(folder, demo.vae_config(**cfg.vae), rng)


_hv15_convert = _converter("vidax.models.hunyuanvideo15.convert")


class Hunyuan15Vidax(WanVidax):
    """vidax's ``HunyuanVideo15Pipeline`` (JAX), measured through its own stages: the step is the pipeline's
    ``compile_step`` with its guider (the ``[negative, prompt]`` batch of 2 in one evaluation, the CPU default block
    loop), as ``HunyuanVideo15Pipeline.__call__`` compiles it."""

    def __init__(self, folder: Path, dtype: str, jax_cache: str | None):
        self.cache_events = _jax_setup(jax_cache)
        from vidax.models.hunyuanvideo15 import pipeline  # noqa: F401  (imports are not load time)

        self.folder, self.dtype = folder, dtype

    def load(self) -> None:
        import jax

        from vidax.models.hunyuanvideo15.pipeline import HunyuanVideo15Pipeline

        self.pipe = HunyuanVideo15Pipeline.from_pretrained(self.folder, dtype=self.dtype, progress=False)
        jax.block_until_ready((self.pipe.transformer_params, self.pipe.vae_params))

    def encode(self) -> None:
        import jax
        import jax.numpy as jnp

        pipe = self.pipe
        pos, neg = pipe.text.encode([PROMPT]), pipe.text.encode([NEGATIVE])
        self.text = tuple(jnp.concatenate([jnp.asarray(a), jnp.asarray(p)]) for a, p in zip(neg, pos))
        jax.block_until_ready(self.text)

    def prepare(self, latents) -> float:
        """Compile the guided step for this latent shape (as ``HunyuanVideo15Pipeline.__call__`` does); seconds."""
        import jax.numpy as jnp

        from vidax.core.placement import mesh_context

        pipe = self.pipe
        b = latents.shape[0]
        cond = jnp.zeros((b, latents.shape[1] + 1, *latents.shape[2:]), jnp.float32)  # text-to-video: zeros
        self.args = (jnp.asarray(latents), jnp.full((b,), HV15_FIRST_TIMESTEP, jnp.float32), *self.text, cond,
                     None, None)
        t0 = time.perf_counter()
        with mesh_context(pipe.mesh):
            step = pipe.compile_step(self.args, pipe.make_guider(HV15_GUIDANCE))
        self.compiled = lambda *args: step(pipe.transformer_params, args)
        return time.perf_counter() - t0

    def decode(self, latents):
        return self.pipe.decode_latents(latents)

    def generate(self, frames: int, height: int, width: int, steps: int, latents):
        out = self.pipe(PROMPT, NEGATIVE, height=height, width=width, num_frames=frames, num_inference_steps=steps,
                        guidance_scale=HV15_GUIDANCE, latents=latents, output_type="float", progress=False)
        m = out.metrics
        res = {k: float(m[k]) for k in ("text_encoder_s", "compile_s", "step_s", "vae_decode_s") if k in m}
        return out.frames, {**res, "jax_cache_hits": self.cache_events["hits"],
                            "jax_cache_requests": self.cache_events["requests"]}


class Hunyuan15Diffusers(WanDiffusers):
    """diffusers' ``HunyuanVideo15Pipeline`` (PyTorch, CPU), text-to-video with classifier-free guidance.

    The demo tokenizer carries no chat template and a shorter system prompt than the released one: the pipeline gets
    :data:`HV15_CHAT_TEMPLATE` and its ``prompt_template_encode_start_idx`` (108 for the released tokenizer) counted
    for this tokenizer as the original counts it (vidax's :func:`vidax.models.hunyuanvideo15.text.
    template_crop_start`), so both engines crop the same template tokens.
    """

    PIPELINE, TRANSFORMER = "HunyuanVideo15Pipeline", "HunyuanVideo15Transformer3DModel"

    def load(self) -> None:
        from vidax.encoders.qwen2_tokenizer import Qwen2Tokenizer
        from vidax.models.hunyuanvideo15.text import template_crop_start

        super().load()
        self.pipe.tokenizer.chat_template = HV15_CHAT_TEMPLATE
        self.pipe.prompt_template_encode_start_idx = template_crop_start(
            Qwen2Tokenizer.from_folder(self.folder / "tokenizer"))

    def encode(self) -> None:
        pipe = self.pipe
        with self.torch.no_grad():  # diffusers.HunyuanVideo15Pipeline.__call__: both in the transformer dtype
            self.pe = pipe.encode_prompt(PROMPT, dtype=pipe.transformer.dtype, batch_size=1)
            self.ne = pipe.encode_prompt(NEGATIVE, dtype=pipe.transformer.dtype, batch_size=1)

    def prepare(self, latents) -> float:
        torch, pipe = self.torch, self.pipe
        x = torch.from_numpy(latents).to(self.tdtype)
        cond, mask = pipe.prepare_cond_latents_and_mask(x, self.tdtype, x.device)
        self.x = torch.cat([x, cond, mask], dim=1)  # latent_model_input
        self.t = torch.full((latents.shape[0],), HV15_FIRST_TIMESTEP).to(self.x.dtype)
        # the text-to-video pipeline's image stream: zeros of SigLIP's 729 tokens (masked by the transformer)
        self.image = torch.zeros(latents.shape[0], pipe.vision_num_semantic_tokens, pipe.vision_states_dim,
                                 dtype=self.tdtype)
        return 0.0

    def step(self) -> None:
        tr = self.pipe.transformer
        preds = {}
        with self.torch.no_grad():  # diffusers.HunyuanVideo15Pipeline.__call__, one step: the guider's two batches
            for name, (pe, pm, pe2, pm2) in (("pred_cond", self.pe), ("pred_uncond", self.ne)):
                with tr.cache_context(name):
                    preds[name] = tr(hidden_states=self.x, image_embeds=self.image, timestep=self.t,
                                     encoder_hidden_states=pe, encoder_attention_mask=pm, encoder_hidden_states_2=pe2,
                                     encoder_attention_mask_2=pm2, attention_kwargs=None, return_dict=False)[0]
            cond, uncond = preds["pred_cond"], preds["pred_uncond"]
            self.noise_pred = uncond + HV15_GUIDANCE * (cond - uncond)  # ClassifierFreeGuidance

    def decode(self, latents):
        torch, vae = self.torch, self.pipe.vae
        with torch.no_grad():  # diffusers.HunyuanVideo15Pipeline.__call__ after the loop; frames (B, F, H, W, 3)
            z = torch.from_numpy(latents).to(vae.dtype) / vae.config.scaling_factor
            video = vae.decode(z, return_dict=False)[0]
            return (video / 2 + 0.5).clamp(0, 1).permute(0, 2, 3, 4, 1).float().numpy()

    def _call(self, frames: int, height: int, width: int, steps: int, latents, on_step):
        """The pipeline's ``__call__`` (it takes no step callback: each scheduler step reports instead)."""
        scheduler = self.pipe.scheduler
        step = scheduler.step

        def reporting(*args, **kwargs):
            out = step(*args, **kwargs)
            on_step(self.pipe, None, None, {})
            return out

        scheduler.step = reporting
        try:
            return self.pipe(PROMPT, NEGATIVE, height=height, width=width, num_frames=frames,
                             num_inference_steps=steps, latents=self.torch.from_numpy(latents),
                             output_type="np").frames
        finally:
            del scheduler.step


# ------------------------------------------------------------------------------------ Cosmos-Predict2.5 family

COSMOS_GUIDANCE = 7.0  # the release's guidance scale (Cosmos' rule: cond + s (cond - uncond))
COSMOS_FIRST_SIGMA = 200.0 / 201.0  # the first flow sigma of the diffusers folders' Karras grid (sigma_max 200)


def _cosmos_latent_shape(frames: int, height: int, width: int) -> tuple[int, ...]:
    return (1, 16, (frames - 1) // 4 + 1, height // 8, width // 8)  # (B, C, T, H, W): the Wan2.1 VAE's


def _cosmos_write(folder: Path, cfg: BenchConfig) -> None:
    """The demo writer's folder with the configuration's transformer and text encoder (their widths set the
    transformer's ``crossattn_proj_in_channels``), then its VAE written again at the configuration's width."""
    import numpy as np

    from vidax.models.cosmos_predict25 import demo

    demo.write_demo_checkpoint(folder, seed=0, transformer_overrides=dict(cfg.transformer),
                               text_overrides=dict(cfg.text) or None)
    if cfg.vae:
        shutil.rmtree(folder / "vae")
        demo.write_vae(folder, demo.vae_config(**cfg.vae), np.random.default_rng(1))


def _tests_module(name: str):
    """A helper of the test suite (tests/ is not a package): the torchvision restatement and the released Qwen2.5-VL
    chat template the diffusers side needs (bench code, not the product)."""
    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    return importlib.import_module(name)


def _pass_through_checker():
    """diffusers' own tests' stand-in for the Cosmos guardrail (``cosmos_guardrail`` is not installed): every prompt
    and frame passes."""
    import torch
    from diffusers.configuration_utils import ConfigMixin
    from diffusers.models.modeling_utils import ModelMixin

    class PassThroughChecker(ModelMixin, ConfigMixin):
        def __init__(self):
            super().__init__()
            self.register_buffer("_device_tracker", torch.zeros(1, dtype=torch.float32), persistent=False)

        def check_text_safety(self, prompt):
            return True

        def check_video_safety(self, frames):
            return frames

        @property
        def device(self):
            return self._device_tracker.device

        @property
        def dtype(self):
            return self._device_tracker.dtype

    return PassThroughChecker()


class CosmosVidax(WanVidax):
    """vidax's ``CosmosPredict25Pipeline`` (JAX), measured through its own stages: the step is the pipeline's
    ``compile_step`` with its hooks (the ``[negative, prompt]`` batch of 2 in one evaluation, per-frame timesteps, the
    conditioning frames' velocity and Cosmos' guidance; the CPU default block loop), as ``__call__`` compiles it."""

    def __init__(self, folder: Path, dtype: str, jax_cache: str | None):
        self.cache_events = _jax_setup(jax_cache)
        from vidax.models.cosmos_predict25 import pipeline  # noqa: F401  (imports are not load time)

        self.folder, self.dtype = folder, dtype

    def load(self) -> None:
        import jax

        from vidax.models.cosmos_predict25.pipeline import CosmosPredict25Pipeline

        self.pipe = CosmosPredict25Pipeline.from_pretrained(self.folder, dtype=self.dtype, progress=False)
        jax.block_until_ready((self.pipe.transformer_params, self.pipe.vae_params))

    def encode(self) -> None:
        import jax
        import jax.numpy as jnp

        pipe = self.pipe  # as __call__: the prompts, then the negative prompts, one encoding each
        pos, neg = jnp.asarray(pipe.text.encode([PROMPT])), jnp.asarray(pipe.text.encode([NEGATIVE]))
        self.embeds = jnp.concatenate([neg, pos])
        jax.block_until_ready(self.embeds)

    def prepare(self, latents) -> float:
        """Compile the guided step for this latent shape (as ``CosmosPredict25Pipeline.__call__`` does); seconds."""
        import jax.numpy as jnp

        from vidax.core.placement import mesh_context

        pipe = self.pipe
        b, _, t = latents.shape[:3]
        x = jnp.asarray(latents)
        zeros = jnp.zeros_like(x)  # text-to-world: no conditioning latents, no ground-truth velocity
        indicator = jnp.zeros((b, 1, t, 1, 1), jnp.float32)
        self.args = (x, jnp.full((b,), COSMOS_FIRST_SIGMA, jnp.float32), self.embeds, zeros, indicator)
        finish = (zeros, indicator)
        t0 = time.perf_counter()
        with mesh_context(pipe.mesh):
            step = pipe.compile_step(self.args, finish, COSMOS_GUIDANCE, pipe.conditional_frame_timestep())
        self.compiled = lambda *args: step(pipe.transformer_params, args, finish)
        return time.perf_counter() - t0

    def decode(self, latents):
        return self.pipe.decode_latents(latents)

    def generate(self, frames: int, height: int, width: int, steps: int, latents):
        out = self.pipe(PROMPT, NEGATIVE, height=height, width=width, num_frames=frames, num_inference_steps=steps,
                        guidance_scale=COSMOS_GUIDANCE, latents=latents, output_type="float", progress=False)
        m = out.metrics
        res = {k: float(m[k]) for k in ("text_encoder_s", "compile_s", "step_s", "vae_decode_s") if k in m}
        return out.frames, {**res, "jax_cache_hits": self.cache_events["hits"],
                            "jax_cache_requests": self.cache_events["requests"]}


class CosmosDiffusers(WanDiffusers):
    """diffusers' ``Cosmos2_5_PredictBasePipeline`` (PyTorch, CPU), text-to-world with classifier-free guidance.

    What the reference needs beyond the folder, as the parity tests give it (tests/test_cosmos_predict25_pipeline.py):
    a pass-through guardrail (``cosmos_guardrail`` is not installed), the released Qwen2.5-VL chat template on the
    demo tokenizer (which carries none: vidax renders the template itself), and torchvision's two functions restated
    (``tests/_torchvision_restated.py``: the transformer resizes its padding mask with torchvision, which does not
    install beside the pinned CPU torch).
    """

    PIPELINE, TRANSFORMER = "Cosmos2_5_PredictBasePipeline", "CosmosTransformer3DModel"

    def load(self) -> None:
        import diffusers

        _tests_module("_torchvision_restated").install()
        torch = self.torch
        checker = _pass_through_checker()
        pipeline = getattr(diffusers, self.PIPELINE)
        if self.tdtype == torch.float32:
            pipe = pipeline.from_pretrained(self.folder, dtype=torch.float32, safety_checker=checker)
        else:  # as vidax's dtype: only the transformer in bf16
            tr = getattr(diffusers, self.TRANSFORMER).from_pretrained(self.folder / "transformer", dtype=self.tdtype)
            pipe = pipeline.from_pretrained(self.folder, transformer=tr, dtype=torch.float32, safety_checker=checker)
        pipe.tokenizer.chat_template = _tests_module("_qwen2_5_vl_reference").QWEN2_5_VL_CHAT_TEMPLATE
        pipe.set_progress_bar_config(disable=True)
        self.pipe = pipe

    def prepare(self, latents) -> float:
        torch = self.torch
        b, _, t, h, w = latents.shape
        self.x = torch.from_numpy(latents).to(self.tdtype)  # in_latents (no conditioning frames)
        self.cond_mask = torch.zeros((b, 1, t, h, w), dtype=self.tdtype)
        self.t = torch.full((b, 1, t, 1, 1), COSMOS_FIRST_SIGMA)  # in_timestep: sigma on every (noisy) frame
        self.padding_mask = torch.zeros((1, 1, 8 * h, 8 * w), dtype=self.tdtype)
        return 0.0

    def step(self) -> None:
        tr = self.pipe.transformer
        with self.torch.no_grad():  # Cosmos2_5_PredictBasePipeline.__call__, one denoising step (gt_velocity 0)
            preds = [tr(hidden_states=self.x, condition_mask=self.cond_mask, timestep=self.t,
                        encoder_hidden_states=e, padding_mask=self.padding_mask, return_dict=False)[0]
                     * (1 - self.cond_mask) for e in (self.pe, self.ne)]
            cond, uncond = preds
            self.noise_pred = cond + COSMOS_GUIDANCE * (cond - uncond)

    def decode(self, latents):
        torch, pipe = self.torch, self.pipe
        with torch.no_grad():  # __call__ after the loop (latents_std holds 1 / std); frames (B, F, H, W, 3)
            z = torch.from_numpy(latents) / pipe.latents_std + pipe.latents_mean
            video = pipe.vae.decode(z.to(pipe.vae.dtype), return_dict=False)[0]
            return (video / 2 + 0.5).clamp(0, 1).permute(0, 2, 3, 4, 1).float().numpy()

    def _call(self, frames: int, height: int, width: int, steps: int, latents, on_step):
        return self.pipe(prompt=PROMPT, negative_prompt=NEGATIVE, height=height, width=width, num_frames=frames,
                         num_inference_steps=steps, guidance_scale=COSMOS_GUIDANCE,
                         latents=self.torch.from_numpy(latents), output_type="np",
                         callback_on_step_end=on_step).frames


# ------------------------------------------------------------------------------------ Cosmos3 family

COSMOS3_GUIDANCE = 6.0  # diffusers Cosmos3OmniPipeline's default (uncond + s (cond - uncond))
COSMOS3_TIMESTEP = 999  # the first timestep of the native flow grid (sigma 0.999, truncated)
# the prompt's metadata sentences (the stage runs before the sizes are known; their digits change a few tokens at most)
COSMOS3_TOKENIZE = dict(num_frames=5, height=128, width=128, fps=24.0)


def _cosmos3_write(folder: Path, cfg: BenchConfig) -> None:
    """The demo writer's Edge-style folder (the native flow grid) with the configuration's transformer, then its VAE
    written again at the configuration's width."""
    import numpy as np

    from vidax.models.cosmos3 import demo

    demo.write_demo_checkpoint(folder, seed=0, edge=True, transformer_overrides=dict(cfg.transformer))
    if cfg.vae:
        shutil.rmtree(folder / "vae")
        demo.write_vae(folder, demo.vae_config(**cfg.vae), np.random.default_rng(1))


class Cosmos3Vidax(WanVidax):
    """vidax's ``Cosmos3Pipeline`` (JAX), measured through its own stages: the prompt's understanding stream once
    (``encode``), then the pipeline's guided generation step (``[cond, uncond]`` in one evaluation, the guidance in
    its epilogue; the CPU default block loop). The step compiles on its first call: ``prepare`` times that call (one
    step's run included)."""

    def __init__(self, folder: Path, dtype: str, jax_cache: str | None):
        self.cache_events = _jax_setup(jax_cache)
        from vidax.models.cosmos3 import pipeline  # noqa: F401  (imports are not load time)

        self.folder, self.dtype = folder, dtype

    def load(self) -> None:
        import jax

        from vidax.models.cosmos3.pipeline import Cosmos3Pipeline

        self.pipe = Cosmos3Pipeline.from_pretrained(self.folder, dtype=self.dtype, progress=False)
        jax.block_until_ready((self.pipe.transformer_params, self.pipe.vae_params))

    def encode(self) -> None:
        import jax
        import jax.numpy as jnp

        from vidax.models.cosmos3.text import pack_prompts

        pipe = self.pipe
        rows = pipe.tokenize(PROMPT, NEGATIVE, **COSMOS3_TOKENIZE)
        self.packed = pack_prompts(list(rows), pad_id=pipe.tokenizer.tokenizer.pad_id,
                                   temporal_modality_margin=pipe.transformer_cfg.unified_3d_mrope_temporal_modality_margin)
        self.lengths = jnp.asarray(self.packed.lengths)
        if "prefill" not in pipe._compiled:  # as __call__: one prefill function per pipeline (compiled once)
            pipe._compiled["prefill"] = pipe._prefill_fn()
        prefill = pipe._compiled["prefill"]
        self.cache = prefill(pipe.transformer_params, jnp.asarray(self.packed.input_ids),
                             jnp.asarray(self.packed.position_ids), self.lengths)
        jax.block_until_ready(self.cache)

    def prepare(self, latents) -> float:
        import jax
        import jax.numpy as jnp

        pipe = self.pipe
        _, _, t, h, w = latents.shape
        p = pipe.transformer_cfg.latent_patch_size
        positions = jnp.asarray(pipe.vision_positions(self.packed.vision_offsets, (t, -(-h // p), -(-w // p)),
                                                      COSMOS3_TOKENIZE["fps"]))
        args = (self.lengths, jnp.asarray(latents), jnp.full((2,), float(COSMOS3_TIMESTEP), jnp.float32), positions,
                jnp.ones((2, t), jnp.float32))
        step = pipe._step_fn(True)
        finish = (jnp.float32(COSMOS3_GUIDANCE),)
        self.args = ()  # (the harness's call convention: compiled(*args) is the guided velocity)
        self.compiled = lambda: step(pipe.transformer_params, self.cache, args, finish)
        t0 = time.perf_counter()
        jax.block_until_ready(self.compiled())
        return time.perf_counter() - t0

    def step(self) -> None:
        import jax

        jax.block_until_ready(self.compiled())

    def decode(self, latents):
        return self.pipe.decode_latents(latents)

    def generate(self, frames: int, height: int, width: int, steps: int, latents):
        out = self.pipe(PROMPT, NEGATIVE, height=height, width=width, num_frames=frames, num_inference_steps=steps,
                        guidance_scale=COSMOS3_GUIDANCE, latents=latents, output_type="float", progress=False)
        m = out.metrics
        res = {k: float(m[k]) for k in ("text_encoder_s", "compile_s", "step_s", "vae_decode_s") if k in m}
        return out.frames, {**res, "jax_cache_hits": self.cache_events["hits"],
                            "jax_cache_requests": self.cache_events["requests"]}


class Cosmos3Diffusers(WanDiffusers):
    """diffusers' ``Cosmos3OmniPipeline`` (PyTorch, CPU), text-to-video with classifier-free guidance: its step is the
    pipeline's two transformer calls over the joint sequence (prompt and video tokens) and the guidance combination,
    as ``__call__`` makes them. The demo folder carries no guardrail (``enable_safety_checker`` false) and a chat
    template that renders what Qwen3-VL's renders for text messages."""

    PIPELINE, TRANSFORMER = "Cosmos3OmniPipeline", "Cosmos3OmniTransformer"

    def encode(self) -> None:
        pipe = self.pipe
        cond, uncond = pipe.tokenize_prompt(PROMPT, NEGATIVE, **COSMOS3_TOKENIZE)
        self.text = [pipe._prepare_text_segment(ids, device="cpu") for ids in (cond, uncond)]

    def prepare(self, latents) -> float:
        torch, pipe = self.torch, self.pipe
        self.x = torch.from_numpy(latents).to(self.tdtype)
        self.packs = []
        for text in self.text:
            vision = pipe._prepare_vision_segment(self.x, False, text["vision_start_temporal_offset"],
                                                  COSMOS3_TOKENIZE["fps"], text["und_len"], device="cpu")
            self.packs.append({**text, **vision,
                               "position_ids": torch.cat([text["text_mrope_ids"], vision["vision_mrope_ids"]], dim=1),
                               "sequence_length": text["und_len"] + vision["num_vision_tokens"]})
        self.vt = torch.full((self.packs[0]["num_noisy_vision_tokens"],), COSMOS3_TIMESTEP)
        return 0.0

    def step(self) -> None:
        tr = self.pipe.transformer
        preds = []
        with self.torch.no_grad():  # Cosmos3OmniPipeline.__call__, one denoising step (no conditioning frame)
            for name, s in zip(("cond", "uncond"), self.packs):
                with tr.cache_context(name, step_index=0, sigma=1.0, num_inference_steps=1):
                    out = tr(input_ids=s["input_ids"], text_indexes=s["text_indexes"],
                             position_ids=s["position_ids"], und_len=s["und_len"],
                             sequence_length=s["sequence_length"], vision_tokens=[self.x],
                             vision_token_shapes=s["vision_token_shapes"],
                             vision_sequence_indexes=s["vision_sequence_indexes"],
                             vision_mse_loss_indexes=s["vision_mse_loss_indexes"], vision_timesteps=self.vt,
                             vision_noisy_frame_indexes=s["vision_noisy_frame_indexes"], return_dict=False)
                preds.append(out[0][0].float())
            cond, uncond = preds
            self.noise_pred = uncond + COSMOS3_GUIDANCE * (cond - uncond)

    def decode(self, latents):
        torch, pipe = self.torch, self.pipe
        with torch.no_grad():  # __call__ after the loop: z / (1 / std) + mean, the VAE, frames (B, F, H, W, 3)
            z = torch.from_numpy(latents).to(pipe.vae.dtype)
            z = z / pipe._vae_latents_inv_std.view(1, -1, 1, 1, 1) + pipe._vae_latents_mean.view(1, -1, 1, 1, 1)
            video = pipe.vae.decode(z).sample
            return (video / 2 + 0.5).clamp(0, 1).permute(0, 2, 3, 4, 1).float().numpy()

    def generate(self, frames: int, height: int, width: int, steps: int, latents):
        """As :meth:`WanDiffusers.generate`, the prompt stage being ``tokenize_prompt`` (Cosmos3 has no text
        encoder: the prompt runs through the transformer at every step)."""
        pipe = self.pipe
        pipe.encode_prompt = pipe.tokenize_prompt  # the base class times pipe.encode_prompt (wrapping it)

        def tokenize(*a, **k):
            return pipe.encode_prompt(*a, **k)

        pipe.tokenize_prompt = tokenize
        try:
            return super().generate(frames, height, width, steps, latents)
        finally:
            del pipe.tokenize_prompt

    def _call(self, frames: int, height: int, width: int, steps: int, latents, on_step):
        video = self.pipe(PROMPT, NEGATIVE, height=height, width=width, num_frames=frames, num_inference_steps=steps,
                          guidance_scale=COSMOS3_GUIDANCE, latents=self.torch.from_numpy(latents), output_type="np",
                          enable_safety_check=False, callback_on_step_end=on_step).video
        return video[None]


# ------------------------------------------------------------------------------------ LTX-2.5 (transformer only)

LTX2_TEXT_LEN = 256  # text tokens per stream (the connectors' output; the release pads to 1024)
LTX2_TIMESTEP = 500.0
LTX2_GUIDANCE = 3.0  # LTX2Pipeline's default guidance_scale
LTX2_FPS = 24.0


def _ltx2_latent_shape(frames: int, height: int, width: int) -> tuple[int, ...]:
    return (1, 128, (frames - 1) // 8 + 1, height // 32, width // 32)


def _ltx2_tokens(cfg: BenchConfig, frames: int, height: int, width: int) -> int:
    _, _, f, h, w = _ltx2_latent_shape(frames, height, width)
    return f * h * w


def _ltx2_audio_frames(frames: int) -> int:
    """``LTX2Pipeline``'s audio latent frames of a clip: ``round(frames / fps * 16000 / 160 / 4)``."""
    return max(1, round(frames / LTX2_FPS * 16000 / 160 / 4))


def _ltx2_write(folder: Path, cfg: BenchConfig) -> None:
    """The transformer alone, written by diffusers' ``LTX2VideoTransformer3DModel.save_pretrained`` (random init)."""
    import torch
    from diffusers import LTX2VideoTransformer3DModel

    torch.manual_seed(0)
    model = LTX2VideoTransformer3DModel(**cfg.transformer).eval()
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder / "transformer")
    (folder / "model_index.json").write_text(json.dumps({"_class_name": "LTX2Pipeline",
                                                         "transformer": ["diffusers", "LTX2VideoTransformer3DModel"]}))


def _ltx2_inputs(latents, tr_cfg: dict) -> dict:
    """The CFG batch of one step, numpy: the packed video latents ``(2, F H W, 128)`` (diffusers' ``_pack_latents``),
    audio latents ``(2, T, 128)``, text contexts ``(2, L, 4096)`` / ``(2, L, 2048)`` and their mask (the negative
    prompt's last 96 tokens padding), as ``LTX2Pipeline.__call__`` batches ``[negative, prompt]``."""
    import numpy as np

    rng = np.random.default_rng(3)
    b, c, f, h, w = latents.shape
    x = latents.transpose(0, 2, 3, 4, 1).reshape(b, f * h * w, c)
    t = _ltx2_audio_frames((f - 1) * 8 + 1)
    a = rng.standard_normal((1, t, tr_cfg.get("audio_in_channels", 128)), dtype=np.float32)
    L = LTX2_TEXT_LEN
    ctx = rng.standard_normal((2, L, tr_cfg.get("cross_attention_dim", 4096)), dtype=np.float32)
    actx = rng.standard_normal((2, L, tr_cfg.get("audio_cross_attention_dim", 2048)), dtype=np.float32)
    mask = np.ones((2, L), np.float32)
    mask[0, L - 96:] = 0.0
    return {"x": np.concatenate([x, x]), "a": np.concatenate([a, a]), "ctx": ctx, "actx": actx, "mask": mask,
            "grid": (f, h, w), "audio_frames": t}


class LTX2Vidax(WanVidax):
    """vidax's LTX-2.5 transformer (JAX) on the CFG batch: the program :func:`vidax.models.ltx2.block_loop.make_forward`
    gives for the CPU default block loop (``block_loop="auto"``: one compiled block program called once per block),
    the guidance ``uncond + s (cond - uncond)`` on both streams; the host-side inputs (RoPE tables, masks) made once
    in ``prepare``, as a pipeline makes them once per call."""

    def __init__(self, folder: Path, dtype: str, jax_cache: str | None):
        self.cache_events = _jax_setup(jax_cache)
        from vidax.models.ltx2 import block_loop, transformer  # noqa: F401  (imports are not load time)

        self.folder, self.dtype = folder, dtype

    def load(self) -> None:
        import jax
        import jax.numpy as jnp

        from vidax.core.config_values import read_json
        from vidax.models.ltx2.block_loop import make_forward
        from vidax.models.ltx2.config import LTX2TransformerConfig
        from vidax.models.ltx2.keymap import load_transformer
        from vidax.models.ltx2.sharding import param_shardings

        folder = self.folder / "transformer"
        cfg = LTX2TransformerConfig.from_dict(read_json(folder / "config.json"))
        # read straight into the placement of the CPU default block loop (one-block chunks), no second copy
        params, self.cfg = load_transformer(folder, jnp.dtype(self.dtype),
                                            shardings=param_shardings(cfg, None, None, "auto"))
        self.fwd = make_forward(params, self.cfg, block_loop="auto")
        self.tparams = getattr(self.fwd, "params", params)
        jax.block_until_ready(self.tparams)

    def encode(self) -> None:
        pass  # the contexts are made with the latents (no text encoder in this configuration)

    def prepare(self, latents) -> float:
        import jax
        import jax.numpy as jnp

        from vidax.models.ltx2.transformer import forward

        c = self.cfg
        inp = _ltx2_inputs(latents, dict(audio_in_channels=c.audio_in_channels, cross_attention_dim=c.cross_attention_dim,
                                         audio_cross_attention_dim=c.audio_cross_attention_dim))
        captured = {}

        def capture(*args, **kw):  # forward()'s host-side work once; the step calls the program itself
            captured["args"], captured["kw"] = args, kw
            return None, None

        f, h, w = inp["grid"]
        forward(self.tparams, self.cfg, inp["x"], inp["a"], inp["ctx"], inp["actx"], LTX2_TIMESTEP,
                sigma=LTX2_TIMESTEP, encoder_attention_mask=inp["mask"], audio_encoder_attention_mask=inp["mask"],
                num_frames=f, height=h, width=w, fps=LTX2_FPS, audio_num_frames=inp["audio_frames"],
                use_cross_timestep=True, program=capture)
        fwd, kw = self.fwd, captured["kw"]
        guide = jax.jit(lambda v, a: tuple(u + LTX2_GUIDANCE * (c - u) for u, c in (v, a)))

        def run(*args):
            with jax.default_matmul_precision("highest"):  # forward()'s default precision
                v, a = fwd(*args, **kw)
                return guide((v[:1], v[1:]), (a[:1], a[1:]))

        self.compiled = run
        dt = jnp.dtype(self.dtype)
        self.args = (self.tparams, *(x.astype(dt) if i < 4 else x for i, x in enumerate(captured["args"][1:])))
        t0 = time.perf_counter()
        jax.block_until_ready(self.compiled(*self.args))
        return time.perf_counter() - t0

    def step(self) -> None:
        import jax

        jax.block_until_ready(self.compiled(*self.args))

    def decode(self, latents):
        raise NotImplementedError("config i times the transformer alone")


class LTX2Diffusers(WanDiffusers):
    """diffusers' ``LTX2VideoTransformer3DModel`` (PyTorch, CPU) on the CFG batch, as ``LTX2Pipeline.__call__`` calls
    it (``timestep`` and ``sigma`` the step's timestep, the connector mask on both text streams, explicit RoPE
    coordinates repeated for the batch, ``use_cross_timestep``), then ``uncond + s (cond - uncond)`` on both
    streams, ``torch.no_grad()``."""

    PIPELINE, TRANSFORMER = "LTX2Pipeline", "LTX2VideoTransformer3DModel"

    def __init__(self, folder: Path, dtype: str, jax_cache: str | None):
        import diffusers
        import torch

        getattr(diffusers, self.TRANSFORMER)
        torch.zeros(1)
        self.torch, self.folder = torch, folder
        self.tdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]

    def load(self) -> None:
        import diffusers

        cls = getattr(diffusers, self.TRANSFORMER)
        self.model = cls.from_pretrained(self.folder / "transformer", dtype=self.tdtype).eval()

    def encode(self) -> None:
        pass

    def prepare(self, latents) -> float:
        torch, m = self.torch, self.model
        inp = _ltx2_inputs(latents, dict(m.config))
        f, h, w = inp["grid"]
        t = inp["audio_frames"]
        self.kw = dict(hidden_states=torch.from_numpy(inp["x"]).to(self.tdtype),
                       audio_hidden_states=torch.from_numpy(inp["a"]).to(self.tdtype),
                       encoder_hidden_states=torch.from_numpy(inp["ctx"]).to(self.tdtype),
                       audio_encoder_hidden_states=torch.from_numpy(inp["actx"]).to(self.tdtype),
                       timestep=torch.full((2,), LTX2_TIMESTEP), sigma=torch.full((2,), LTX2_TIMESTEP),
                       encoder_attention_mask=torch.from_numpy(inp["mask"]),
                       audio_encoder_attention_mask=torch.from_numpy(inp["mask"]), num_frames=f, height=h, width=w,
                       fps=LTX2_FPS, audio_num_frames=t,
                       video_coords=m.rope.prepare_video_coords(2, f, h, w, "cpu", fps=LTX2_FPS),
                       audio_coords=m.audio_rope.prepare_audio_coords(2, t, "cpu"), isolate_modalities=False,
                       spatio_temporal_guidance_blocks=None, perturbation_mask=None, use_cross_timestep=True,
                       return_dict=False)
        return 0.0

    def step(self) -> None:
        with self.torch.no_grad(), self.model.cache_context("cond_uncond"):
            v, a = self.model(**self.kw)
            self.noise_pred = tuple(u.float() + LTX2_GUIDANCE * (c.float() - u.float())
                                    for u, c in (v.chunk(2), a.chunk(2)))

    def decode(self, latents):
        raise NotImplementedError("config i times the transformer alone")


@dataclass(frozen=True)
class Family:
    """A model family: how to write its benchmark checkpoint and the contender class of each engine."""

    write_checkpoint: Any  # (folder, BenchConfig) -> None
    convert: Any  # (src folder, dst folder) -> bool: vidax's own translated layout, if the family has one
    latent_shape: Any  # (frames, height, width) -> tuple
    tokens: Any  # (BenchConfig, frames, height, width) -> int
    contenders: dict = field(default_factory=dict)  # name -> class(folder, dtype, jax_cache)
    cfg_halves: int = 2  # transformer evaluations per step: 2 (CFG, both halves) or 1 (embedded guidance)
    step_note: str = ("vidax's step runs its CPU default block loop: one compiled block program called once per block "
                      "over per-block weights (`block_loop=\"host\"`, docs/design.md \"Block loop\").")
    vae_note: str = ("its text-to-video pipelines read only the VAE's decoder side (the encoder side loads at the "
                     "first image: docs/design.md \"Host memory\").")


FAMILIES: dict[str, Family] = {
    "wan2.1": Family(_wan_write, _wan_convert, _wan_latent_shape, _wan_tokens, {"vidax": WanVidax, "diffusers": WanDiffusers}),
    "wan2.2-ti2v": Family(_wan22_write, _wan_convert, _wan22_latent_shape, _patch_tokens(_wan22_latent_shape),
                          {"vidax": WanVidax, "diffusers": WanDiffusers}),
    "cogvideox": Family(_cog_write, _cog_convert, _cog_latent_shape, _cog_tokens,
                        {"vidax": CogVidax, "diffusers": CogDiffusers}),
    "ltx": Family(_ltx_write, _ltx_convert, _ltx_latent_shape, _ltx_tokens,
                  {"vidax": LTXVidax, "diffusers": LTXDiffusers}),
    "hunyuanvideo": Family(_hv_write, _hv_convert, _hv_latent_shape, _hv_tokens,
                           {"vidax": HunyuanVidax, "diffusers": HunyuanDiffusers}, cfg_halves=1,
                           step_note="vidax's step runs each block stack (dual-stream, then single-stream) as one "
                                     "`lax.scan` over stacked block weights (the HunyuanVideo pipeline's only block "
                                     "loop).",
                           vae_note="its HunyuanVideo pipeline reads the whole VAE, the encoder side too, also for "
                                    "text-to-video."),
    "hunyuanvideo-1.5": Family(_hv15_write, _hv15_convert, _hv15_latent_shape, _hv15_tokens,
                               {"vidax": Hunyuan15Vidax, "diffusers": Hunyuan15Diffusers},
                               step_note="vidax's step runs its CPU default block loop: one compiled block program "
                                         "called once per block over per-block weights (`block_loop=\"host\"`, "
                                         "docs/design.md \"Block loop\"). Its text-to-video step leaves the image "
                                         "stream out (no image embeddings: the same output), where diffusers' pipeline "
                                         "feeds 729 zero SigLIP tokens that every block's joint attention then masks: "
                                         "diffusers attends over 729 more context rows per block, part of the ratio.",
                               vae_note="its text-to-video pipeline reads only the VAE's decoder side."),
    "cosmos-predict2.5": Family(_cosmos_write, _converter("vidax.models.cosmos_predict25.convert"),
                                _cosmos_latent_shape, _patch_tokens(_cosmos_latent_shape),
                                {"vidax": CosmosVidax, "diffusers": CosmosDiffusers},
                                vae_note="its Cosmos-Predict2.5 pipeline reads the whole VAE, the encoder side too "
                                         "(the same pipeline runs image- and video-to-world)."),
    "cosmos3": Family(_cosmos3_write, _converter("vidax.models.cosmos3.convert"), _wan22_latent_shape,
                      _patch_tokens(_wan22_latent_shape), {"vidax": Cosmos3Vidax, "diffusers": Cosmos3Diffusers},
                      vae_note="its Cosmos3 pipeline reads the whole VAE, the encoder side too (the same pipeline "
                               "runs image-to-video)."),
    "ltx2": Family(_ltx2_write, lambda src, dst: False, _ltx2_latent_shape, _ltx2_tokens,
                   {"vidax": LTX2Vidax, "diffusers": LTX2Diffusers},
                   step_note="vidax's step is the LTX-2.5 transformer program of `vidax.models.ltx2.block_loop."
                             "make_forward` with the CPU default block loop (one compiled block program called once "
                             "per block).", vae_note="(config i loads the transformer alone)."),
}


# ------------------------------------------------------------------------------------ worker process


def _latents(shape, seed: int = 0):
    import numpy as np

    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def worker(contender: str, config: str, dtype: str, folder: str, jax_cache: str | None) -> int:
    """Serve measurement commands, one JSON object per stdin line; answer on the original stdout."""
    result_fd = os.dup(1)
    os.dup2(2, 1)  # anything the libraries print goes to stderr, not into the protocol
    results = os.fdopen(result_fd, "w", buffering=1)
    cfg = CONFIGS[config]
    fam = FAMILIES[cfg.family]
    t0 = time.perf_counter()
    engine = fam.contenders[contender](Path(folder), dtype, jax_cache)
    import_s = time.perf_counter() - t0

    def reply(obj):
        results.write(RESULT + json.dumps(obj) + "\n")

    reply({"ready": True, "import_s": import_s})
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        c0 = _cpu_s()

        def reply(obj, c0=c0):  # every answer carries the CPU seconds this process spent on the command
            results.write(RESULT + json.dumps({**obj, "cpu_s": _cpu_s() - c0}) + "\n")

        try:
            if op == "quit":
                reply({"bye": True})
                return 0
            if op == "load":
                io0 = _proc_io()
                t0 = time.perf_counter()
                engine.load()
                s = time.perf_counter() - t0
                io1 = _proc_io()
                st = _proc_status()
                reply({"seconds": s, "rchar": io1.get("rchar", 0) - io0.get("rchar", 0),
                       "read_bytes": io1.get("read_bytes", 0) - io0.get("read_bytes", 0),
                       "peak_rss": st.get("VmHWM", 0), "rss": st.get("VmRSS", 0)})
            elif op in ("encode", "step"):
                t0 = time.perf_counter()
                getattr(engine, op)()
                reply({"seconds": time.perf_counter() - t0})
            elif op == "prepare":
                reply({"compile_s": engine.prepare(_latents(fam.latent_shape(*cmd["shape"]), cmd.get("seed", 0)))})
            elif op == "decode":
                z = _latents(fam.latent_shape(*cmd["shape"]), 7)
                t0 = time.perf_counter()
                engine.decode(z)
                reply({"seconds": time.perf_counter() - t0})
            elif op == "generate":
                f, h, w = cmd["shape"]
                t0 = time.perf_counter()
                frames, breakdown = engine.generate(f, h, w, cmd["steps"], _latents(fam.latent_shape(f, h, w)))
                s = time.perf_counter() - t0
                if cmd.get("save"):
                    import numpy as np

                    np.save(cmd["save"], np.asarray(frames, np.float32))
                reply({"seconds": s, **breakdown})
            elif op == "stats":
                st = _proc_status()
                reply({"peak_rss": st.get("VmHWM", 0), "rss": st.get("VmRSS", 0), "rss_anon": st.get("RssAnon", 0),
                       "rss_file": st.get("RssFile", 0), "os_threads": st.get("Threads", 0), **engine.threads()})
            else:
                reply({"error": f"unknown op {op!r}"})
        except Exception as e:  # report, keep serving: the parent decides
            import traceback

            traceback.print_exc()
            reply({"error": f"{type(e).__name__}: {e}"})
    return 0


class Worker:
    """A contender's process, driven command by command (only one contender computes at a time)."""

    def __init__(self, contender: str, config: str, dtype: str, folder: Path, log: Path, jax_cache: str | None = None):
        self.name = contender
        cmd = [sys.executable, "-m", "bench.compare", "--worker", contender, "--config", config, "--dtype", dtype,
               "--folder", str(folder)]
        if jax_cache:
            cmd += ["--jax-cache", jax_cache]
        # VIDAX_COMPILE_CACHE=off: the pipelines' from_pretrained turns on the user's persistent compilation cache by
        # default (vidax.core.compile_cache), which would serve the "cold" runs; off, it leaves JAX's setting to
        # --jax-cache (the cached runs' own folder) or off.
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error", DIFFUSERS_VERBOSITY="error",
                   TQDM_DISABLE="1", JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"), PYTHONUNBUFFERED="1",
                   VIDAX_COMPILE_CACHE="off")
        self.log = log
        self._err = open(log, "a")
        self.t_start = time.perf_counter()
        self.p = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
                                  text=True, env=env)
        self.ready = self._read()

    def _read(self) -> dict:
        for line in self.p.stdout:
            if line.startswith(RESULT):
                return json.loads(line[len(RESULT):])
        tail = self.log.read_text().strip().splitlines()[-3:] if self.log.exists() else []
        raise RuntimeError(f"{self.name} worker exited (code {self.p.wait()}): {' | '.join(tail)}")

    loadavg: list[float] = []  # the machine's 1-minute load average at each command (shared machine: noise)

    def call(self, op: str, **kw) -> dict:
        """Run one command; the answer gains ``foreign``: the share of the machine's CPU that other processes
        used meanwhile (machine-wide busy time from /proc/stat minus the worker's own CPU time)."""
        Worker.loadavg.append(os.getloadavg()[0])
        b0, t0 = _machine_busy_s(), time.perf_counter()
        self.p.stdin.write(json.dumps({"op": op, **kw}) + "\n")
        self.p.stdin.flush()
        r = self._read()
        wall, busy = time.perf_counter() - t0, _machine_busy_s() - b0
        if "error" in r:
            raise RuntimeError(f"{self.name} {op}: {r['error']} (log: {self.log})")
        r["foreign"] = max(0.0, busy - r.get("cpu_s", 0.0)) / max(wall * (os.cpu_count() or 1), 1e-9)
        return r

    def close(self) -> float:
        try:
            self.call("quit")
        except (RuntimeError, BrokenPipeError):
            pass
        self.p.wait()
        self._err.close()
        return time.perf_counter() - self.t_start


# ------------------------------------------------------------------------------------ orchestration


def checkpoint(cfg: BenchConfig) -> Path:
    """The configuration's checkpoint folder, written once (random weights, diffusers layout)."""
    folder = CACHE / f"compare-{cfg.name}"
    if not (folder / "model_index.json").is_file():
        print(f"writing the config {cfg.name!r} checkpoint to {folder} ...", flush=True)
        t0 = time.perf_counter()
        FAMILIES[cfg.family].write_checkpoint(folder, cfg)
        print(f"  {time.perf_counter() - t0:.1f}s", flush=True)
    return folder


def converted(cfg: BenchConfig, folder: Path) -> Path | None:
    """The checkpoint in vidax's translated layout (``vidax convert``), written once; None if unavailable."""
    dst = CACHE / f"compare-{cfg.name}-vidax-layout"
    if dst.exists() and not _current_writer(dst):
        print(f"{dst} was written by an earlier vidax convert (unaligned data); writing it again", flush=True)
        shutil.rmtree(dst)
    if not dst.exists():
        try:
            if not FAMILIES[cfg.family].convert(folder, dst):
                return None
        except Exception as e:  # an engine without a converter, or one mid-change: skip that row
            print(f"vidax convert failed ({type(e).__name__}: {e}); no converted-layout row", file=sys.stderr)
            shutil.rmtree(dst, ignore_errors=True)
            return None
    return dst


def _current_writer(folder: Path) -> bool:
    """Whether every weights file under ``folder`` is aligned as today's writer aligns it: the data section
    starts on a ``DATA_ALIGNMENT`` boundary and so does every tensor whose size is a multiple of it (a file
    written before the writer ordered its tensors can have an aligned data section by chance)."""
    from vidax.checkpoint.writer import DATA_ALIGNMENT

    for p in folder.rglob("*.safetensors"):
        with open(p, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
        if (8 + n) % DATA_ALIGNMENT:
            return False
        for key, entry in header.items():
            if key == "__metadata__":
                continue
            a, b = entry["data_offsets"]
            if (b - a) % DATA_ALIGNMENT == 0 and a % DATA_ALIGNMENT:
                return False
    return True


def _warm(folder: Path) -> None:
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            with open(p, "rb") as f:
                while f.read(64 << 20):
                    pass


def _qstat(values: list[float], foreign: list[float]) -> dict:
    """:func:`_stat` over the quiet measurements (other processes under ``QUIET`` of the CPU), if at least 2;
    else over all of them, marked ``contended``."""
    if not values:
        return {}
    quiet = [v for v, f in zip(values, foreign) if f < QUIET]
    if len(quiet) >= 2:
        return {**_stat(quiet), "quiet": len(quiet), "of": len(values)}
    return {**_stat(values), "quiet": len(quiet), "of": len(values), "contended": True}


def _stat(values: list[float]) -> dict:
    values = [float(v) for v in values]
    if not values:
        return {}
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values),
            "values": values}


def run(cfg: BenchConfig, repeats: int, log_dir: Path, bf16: bool = True) -> dict:
    folder = checkpoint(cfg)
    log_dir.mkdir(parents=True, exist_ok=True)
    for old in log_dir.glob("*.log"):
        old.unlink()
    jax_cache = CACHE / f"jax-cache-{cfg.name}"
    rec: dict[str, Any] = {"config": cfg.name, "repeats": repeats, "checkpoint": str(folder.relative_to(ROOT)),
                           "checkpoint_bytes": sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())}
    t_all = time.perf_counter()
    w = lambda name, dtype="float32", cache=None, tag="": Worker(  # noqa: E731
        name, cfg.name, dtype, folder, log_dir / f"{name}{tag}.log", cache)

    # 1. Fresh processes: load, short end-to-end generation, peak RSS; vidax cold, diffusers, vidax from the cache.
    fresh: dict[str, list[dict]] = {"vidax": [], "diffusers": [], "vidax-cached": []}
    for r in range(repeats if "fresh" in cfg.parts else 0):
        # vidax cold first (it fills the cache the cached run reads); diffusers before or after the cached run
        for kind in ("vidax", "diffusers", "vidax-cached") if r % 2 == 0 else ("vidax", "vidax-cached", "diffusers"):
            if kind == "vidax":
                shutil.rmtree(jax_cache, ignore_errors=True)  # cold: empty cache (this run fills it)
            _warm(folder)
            wk = w(kind.split("-")[0], cache=str(jax_cache) if kind.startswith("vidax") else None, tag=f"-{kind}")
            res = {"import_s": wk.ready["import_s"]}
            res["load"] = wk.call("load")
            save = str(log_dir / f"frames-{kind}.npy") if r == 0 else None
            res["generate"] = wk.call("generate", shape=cfg.base, steps=cfg.steps, save=save)
            res["stats"] = wk.call("stats")
            res["process_s"] = wk.close()
            fresh[kind].append(res)
            g = res["generate"]
            print(f"[fresh {r + 1}/{repeats}] {kind:13s} load {res['load']['seconds']:.2f}s  generate {g['seconds']:.2f}s"
                  f" (compile {g.get('compile_s', 0):.2f}s)  peak RSS {res['stats']['peak_rss'] / 2**30:.2f} GiB"
                  f"  (others used {g['foreign']:.0%} of the CPU)", flush=True)
    # 1b. vidax loading the same weights from its own translated layout (load and memory only).
    conv = converted(cfg, folder) if "fresh" in cfg.parts else None
    if conv is not None:
        fresh["vidax-converted"] = []
        for r in range(repeats):
            _warm(conv)
            wk = Worker("vidax", cfg.name, "float32", conv, log_dir / "vidax-converted.log")
            res = {"import_s": wk.ready["import_s"], "load": wk.call("load"), "stats": wk.call("stats")}
            res["process_s"] = wk.close()
            fresh["vidax-converted"].append(res)
            print(f"[fresh {r + 1}/{repeats}] vidax-converted load {res['load']['seconds']:.2f}s  "
                  f"peak RSS {res['stats']['peak_rss'] / 2**30:.2f} GiB", flush=True)
    rec["fresh"] = fresh
    try:
        import numpy as np

        a, b = np.load(log_dir / "frames-vidax.npy"), np.load(log_dir / "frames-diffusers.npy")
        rec["frames_max_abs_diff"] = float(np.abs(a - b).max()) if a.shape == b.shape else None
    except (OSError, ValueError):
        rec["frames_max_abs_diff"] = None

    # 2. Long-lived processes, alternated: text encoder, step sweep, VAE decode.
    live = {n: w(n, tag="-live") for n in ("vidax", "diffusers")}
    try:
        for wk in live.values():
            wk.call("load")
        text = {n: [] for n in live}
        text_f = {n: [] for n in live}
        first_text = {}
        for r in range(max(repeats, 5) + 1 if "text" in cfg.parts else 0):
            for n, wk in _order(live, r):
                res = wk.call("encode")
                if r:
                    text[n].append(res["seconds"])
                    text_f[n].append(res["foreign"])
                else:
                    first_text[n] = res["seconds"]
        if "text" in cfg.parts:
            rec["text_encoder"] = {n: {"warm": _qstat(text[n], text_f[n]), "first_s": first_text[n],
                                       "foreign": text_f[n]} for n in live}
        else:
            for wk in live.values():
                wk.call("encode")  # the step's inputs (untimed)
        rec["sweep"] = _sweep(live, cfg, cfg.sweep, repeats, "float32")
        vae = {n: [] for n in live}
        vae_f = {n: [] for n in live}
        first_vae = {}
        for r in range(repeats + 1 if "vae" in cfg.parts else 0):
            for n, wk in _order(live, r):
                res = wk.call("decode", shape=cfg.base)
                if r:
                    vae[n].append(res["seconds"])
                    vae_f[n].append(res["foreign"])
                else:
                    first_vae[n] = res["seconds"]
                print(f"[vae {r}] {n}: {res['seconds']:.2f}s (others used {res['foreign']:.0%} of the CPU)", flush=True)
        if "vae" in cfg.parts:
            rec["vae_decode"] = {n: {"warm": _qstat(vae[n], vae_f[n]), "first_s": first_vae[n], "foreign": vae_f[n]}
                                 for n in live}
        rec["live_stats"] = {n: wk.call("stats") for n, wk in live.items()}
    finally:
        for wk in live.values():
            wk.close()

    # 3. bf16 step (both engines' transformer in bf16; text encoder and VAE stay fp32 as vidax's defaults).
    if bf16 and cfg.bf16_sweep:
        live = {n: w(n, "bfloat16", tag="-bf16") for n in ("vidax", "diffusers")}
        try:
            for wk in live.values():
                wk.call("load")
                wk.call("encode")
            rec["sweep_bf16"] = _sweep(live, cfg, cfg.bf16_sweep, repeats, "bfloat16")
        finally:
            for wk in live.values():
                wk.close()
    rec["total_s"] = time.perf_counter() - t_all
    la = Worker.loadavg
    rec["loadavg_1min"] = {"min": min(la), "median": statistics.median(la), "max": max(la), "cores": os.cpu_count()}
    return rec


def _order(live: dict, r: int):
    """The contenders in A-B order on even rounds, B-A on odd ones (no fixed who-runs-first bias)."""
    items = list(live.items())
    return items if r % 2 == 0 else items[::-1]


def _sweep(live: dict, cfg: BenchConfig, shapes, repeats: int, dtype: str) -> list[dict]:
    fam = FAMILIES[cfg.family]
    out = []
    for shape in shapes:
        row = {"shape": list(shape), "latent": list(fam.latent_shape(*shape)), "tokens": fam.tokens(cfg, *shape),
               "dtype": dtype}
        for n, wk in live.items():
            row.setdefault("compile_s", {})[n] = wk.call("prepare", shape=shape)["compile_s"]
            # warm-up: two steps (PyTorch's oneDNN needs two calls at a new shape to reach its steady speed)
            row.setdefault("first_step_s", {})[n] = wk.call("step")["seconds"]
            row.setdefault("second_step_s", {})[n] = wk.call("step")["seconds"]
        times = {n: [] for n in live}
        cpu = {n: [] for n in live}
        foreign = {n: [] for n in live}
        want = max(repeats, 5)  # rounds: the step is what noise hits hardest
        r = 0
        # up to `want` extra rounds while fewer than `want` rounds were quiet for both contenders
        while r < want or (r < 2 * want and sum(max(fs) < QUIET for fs in zip(*foreign.values())) < want):
            for n, wk in _order(live, r):
                res = wk.call("step")
                times[n].append(res["seconds"])
                cpu[n].append(res.get("cpu_s", 0.0))
                foreign[n].append(res["foreign"])
            r += 1
        row["step"] = {n: _qstat(times[n], foreign[n]) for n in live}
        row["step_cpu_s"] = {n: _qstat(cpu[n], foreign[n]) for n in live}
        row["foreign"] = foreign
        if "vidax" in times and "diffusers" in times:  # ratios of the two measurements of one round (same load)
            pair_f = [max(a, b) for a, b in zip(foreign["vidax"], foreign["diffusers"])]
            row["paired_ratio"] = _qstat([a / b for a, b in zip(times["vidax"], times["diffusers"])], pair_f)
        print(f"[step {dtype}] {row['tokens']} tokens: " + ", ".join(
            f"{n} {row['step'][n]['median']:.3f}s ({row['step'][n]['quiet']}/{row['step'][n]['of']} quiet)"
            for n in live), flush=True)
        out.append(row)
    return out


# ------------------------------------------------------------------------------------ report


def summarize(rec: dict) -> dict:
    """The headline figures: medians, spreads and ratios vidax/diffusers."""
    f = rec["fresh"]

    def fs(kind, *path):
        """The statistic of one figure over a kind's fresh runs, over the quiet ones where the figure was
        measured during a command (load or generate)."""
        vals, foreign = [], []
        for run in f.get(kind, []):
            v = run
            for p in path:
                v = v.get(p) if isinstance(v, dict) else None
            if v is not None:
                vals.append(v)
                foreign.append(run[path[0]].get("foreign", 0.0) if isinstance(run.get(path[0]), dict) else 0.0)
        return _qstat(vals, foreign) if path[0] in ("load", "generate") else _stat(vals)

    s: dict[str, Any] = {}
    base = rec["sweep"][0] if rec.get("sweep") else None
    for row in rec.get("sweep", []):
        if list(row["shape"]) == list(CONFIGS[rec["config"]].base):
            base = row
    if base:
        s["step"] = {n: base["step"][n] for n in base["step"]}
        s["step_tokens"] = base["tokens"]
    s["compile_cold"] = fs("vidax", "generate", "compile_s")
    s["compile_cached"] = fs("vidax-cached", "generate", "compile_s")
    s["load"] = {n: fs(n, "load", "seconds") for n in ("vidax", "diffusers", "vidax-converted")}
    s["peak_rss_converted_load"] = fs("vidax-converted", "stats", "peak_rss")
    s["load_rchar"] = {n: fs(n, "load", "rchar") for n in ("vidax", "diffusers")}
    s["load_read_bytes"] = {n: fs(n, "load", "read_bytes") for n in ("vidax", "diffusers")}
    s["peak_rss"] = {n: fs(n, "stats", "peak_rss") for n in ("vidax", "diffusers", "vidax-cached")}
    s["peak_rss_load"] = {n: fs(n, "load", "peak_rss") for n in ("vidax", "diffusers")}
    s["generate"] = {n: fs(n, "generate", "seconds") for n in ("vidax", "diffusers", "vidax-cached")}
    s["e2e"] = {n: _qstat([r["load"]["seconds"] + r["generate"]["seconds"] for r in f.get(n, [])],
                          [max(r["load"].get("foreign", 0), r["generate"].get("foreign", 0)) for r in f.get(n, [])])
                for n in ("vidax", "diffusers", "vidax-cached")}
    s["import"] = {n: fs(n, "import_s") for n in ("vidax", "diffusers")}
    s["text_encoder"] = {n: v["warm"] for n, v in rec.get("text_encoder", {}).items()}
    s["vae_decode"] = {n: v["warm"] for n, v in rec.get("vae_decode", {}).items()}
    ratios = {}
    for key in ("step", "load", "peak_rss", "text_encoder", "vae_decode", "generate", "e2e"):
        v, d = s.get(key, {}).get("vidax"), s.get(key, {}).get("diffusers")
        if v and d and d.get("median"):
            ratios[key] = v["median"] / d["median"]
    sweep = [r for r in rec.get("sweep", []) if r["step"].get("vidax") and r["step"].get("diffusers")]
    if sweep:
        logs = [math.log(r["paired_ratio"]["median"] if "paired_ratio" in r else
                         r["step"]["vidax"]["median"] / r["step"]["diffusers"]["median"]) for r in sweep]
        ratios["step_sweep_geomean"] = math.exp(sum(logs) / len(logs))
        cpu = [r["step_cpu_s"] for r in sweep
               if all(r.get("step_cpu_s", {}).get(n, {}).get("median", 0) > 0 for n in ("vidax", "diffusers"))]
        if cpu:
            ratios["step_cpu_geomean"] = math.exp(sum(math.log(c["vidax"]["median"] / c["diffusers"]["median"])
                                                      for c in cpu) / len(cpu))
    s["ratio_vidax_over_diffusers"] = ratios
    step_contended = any(r.get("paired_ratio", {}).get("contended") for r in rec.get("sweep", []))
    load_contended = any(s["load"].get(n, {}).get("contended") for n in ("vidax", "diffusers"))
    # True: met, False: missed, None: not judged. Contention flatters vidax (PyTorch's OpenMP threads suffer
    # more), so a target met only under contention is not judged; a miss under contention stands.
    def judge(met: bool, contended: bool):
        return None if (met and contended) else met

    s["targets"] = {
        "step <= 0.8x diffusers": judge(ratios.get("step_sweep_geomean", ratios.get("step", 9)) <= 0.8, step_contended),
        "peak RSS <= 0.8x diffusers": ratios.get("peak_rss", 9) <= 0.8,  # memory does not depend on load
        "load <= 0.5x diffusers": judge(ratios.get("load", 9) <= 0.5, load_contended),
    }
    return s


def _fmt(st: dict | None, scale: float = 1.0, digits: int = 2) -> str:
    if not st:
        return "n/a"
    mark = "*" if st.get("contended") else ""
    if st.get("n", 1) == 1:
        return f"{st['median'] / scale:.{digits}f}{mark}"
    return f"{st['median'] / scale:.{digits}f} ({st['min'] / scale:.{digits}f}-{st['max'] / scale:.{digits}f}){mark}"


def _quiet_share(rec: dict) -> str:
    """"q of n": how many measurements ran while other processes used under ``QUIET`` of the CPU."""
    fr = [r[k]["foreign"] for runs in rec.get("fresh", {}).values() for r in runs for k in ("load", "generate")
          if isinstance(r.get(k), dict) and "foreign" in r[k]]
    for part in ("text_encoder", "vae_decode"):
        fr += [f for v in rec.get(part, {}).values() for f in v.get("foreign", [])]
    for row in rec.get("sweep", []) + rec.get("sweep_bf16", []):
        fr += [f for v in row.get("foreign", {}).values() for f in v]
    return f"{sum(f < QUIET for f in fr)} of {len(fr)}"


def _step_rows(rec: dict) -> list[str]:
    """The step table: one row per (dtype, size) of the sweeps."""
    lines = ["| dtype | latent | tokens | vidax s | diffusers s | vidax/diffusers (medians) | per-round ratio, median "
             "(min-max) | CPU s per step, vidax / diffusers | vidax compile s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rec.get("sweep", []) + rec.get("sweep_bf16", []):
        v, d = r["step"].get("vidax"), r["step"].get("diffusers")
        ratio = f"**{v['median'] / d['median']:.2f}x**" if v and d else ""
        c = r.get("step_cpu_s", {})
        cpu = (f"{c['vidax']['median']:.2f} / {c['diffusers']['median']:.2f}"
               if c.get("vidax") and c.get("diffusers") else "")
        lines.append(f"| {r['dtype']} | {'x'.join(map(str, r['latent']))} | {r['tokens']} | {_fmt(v, digits=3)} | "
                     f"{_fmt(d, digits=3)} | {ratio} | {_fmt(r.get('paired_ratio'))} | {cpu} | "
                     f"{r['compile_s'].get('vidax', 0):.2f} |")
    return lines


def _write_step_only(rec: dict, cfg: BenchConfig, png: Path | None) -> None:
    """The section of a configuration that times the transformer step alone (``parts == ("sweep",)``)."""
    ls = rec.get("live_stats", {})
    la = rec["loadavg_1min"]
    lines = [f"## vidax vs diffusers, CPU (config {cfg.name})", "",
             f"Generated by `python -m bench.compare --config {cfg.name} --repeats {rec['repeats']}` on {rec['date']} "
             f"({rec['machine']}; Python {rec['python']}; " + ", ".join(f"{k} {v}" for k, v in rec["versions"].items())
             + f"); whole run {rec['total_s'] / 60:.1f} min.", "",
             f"Model: {cfg.note}; random fp32 weights written once by diffusers' `save_pretrained` "
             f"({rec['checkpoint_bytes'] / 1e9:.2f} GB). Both engines load that folder and run the same inputs, each "
             f"in its own process, measurements alternated; {max(rec['repeats'], 5)} or more rounds per size. Threads: "
             f"vidax {ls.get('vidax', {}).get('engine_threads', '?')}, diffusers "
             f"{ls.get('diffusers', {}).get('engine_threads', '?')}. 1-minute load average {la['min']:.1f}-"
             f"{la['max']:.1f} on {la['cores']} cores; {_quiet_share(rec)} measurements were quiet.", ""]
    lines += _step_rows(rec)
    gm = rec["summary"]["ratio_vidax_over_diffusers"].get("step_sweep_geomean")
    if gm:
        lines += ["", f"Geometric mean of the fp32 per-round step ratios: **{gm:.2f}x**."]
    if png is not None:
        lines += ["", f"![step time against token count]({png.relative_to(DOCS.parent).as_posix()})"]
    lines += ["", "Notes: " + FAMILIES[cfg.family].step_note + " " + (cfg.findings or "")]
    replace_section(lines[0], "\n".join(lines) + "\n")


def write_markdown(rec: dict, png: Path | None) -> None:
    cfg = CONFIGS[rec["config"]]
    if "fresh" not in cfg.parts:
        return _write_step_only(rec, cfg, png)
    s = rec["summary"]
    GiB, MiB = 2**30, 2**20
    ls = rec.get("live_stats", {})
    f, h, w = cfg.base
    fam = FAMILIES[cfg.family]
    cfa = fam.cfg_halves == 2  # classifier-free guidance: two halves per step, a negative prompt encoded
    lines = [
        f"## vidax vs diffusers, CPU (config {cfg.name})",
        "",
        f"Generated by `python -m bench.compare --config {cfg.name} --repeats {rec['repeats']}` on {rec['date']} "
        f"({rec['machine']}; Python {rec['python']}; " + ", ".join(f"{k} {v}" for k, v in rec["versions"].items())
        + f"); whole run {rec['total_s'] / 60:.1f} min.",
        "",
        f"Model: {cfg.note}; random fp32 weights written once in the diffusers layout "
        f"({rec['checkpoint_bytes'] / 1e9:.2f} GB, `{rec['checkpoint']}`). Both engines load that folder and run the "
        f"same {'prompt, negative prompt' if cfa else 'prompt'} and initial latents; each contender in its own "
        f"process, measurements "
        f"alternated between the two; figures are median (min-max) over {rec['repeats']} fresh processes per contender "
        f"(load, end to end, memory), {max(rec['repeats'], 5)} or more rounds (step, text encoder) and {rec['repeats']} "
        f"rounds (VAE). "
        f"Threads: vidax {ls.get('vidax', {}).get('engine_threads', '?')}, {ls.get('vidax', {}).get('os_threads', '?')} "
        f"OS threads; diffusers {ls.get('diffusers', {}).get('engine_threads', '?')}, "
        f"{ls.get('diffusers', {}).get('os_threads', '?')} OS threads (defaults, not set). "
        f"The machine is shared with other jobs: 1-minute load average "
        f"{rec['loadavg_1min']['min']:.1f}-{rec['loadavg_1min']['max']:.1f} (median {rec['loadavg_1min']['median']:.1f}, "
        f"this run's own processes included) on {rec['loadavg_1min']['cores']} cores; {_quiet_share(rec)} "
        f"measurements were quiet (see Contention below).",
        "",
        "| fp32 | vidax | diffusers | vidax/diffusers |",
        "|---|---|---|---|",
    ]

    def row(label, key, scale=1.0, digits=2):
        v, d = s.get(key, {}).get("vidax"), s.get(key, {}).get("diffusers")
        ratio = s["ratio_vidax_over_diffusers"].get(key)
        lines.append(f"| {label} | {_fmt(v, scale, digits)} | {_fmt(d, scale, digits)} | "
                     f"{'' if ratio is None else f'**{ratio:.2f}x**'} |")

    row(f"transformer step with CFG, {s.get('step_tokens', '?')} tokens x 2, s" if cfa else
        f"transformer step (one evaluation, embedded guidance), {s.get('step_tokens', '?')} video tokens, s",
        "step", digits=3)
    lines.append(f"| step compile, cold (fresh process, empty cache), s | {_fmt(s['compile_cold'])} | none (eager) | |")
    hits = [(r["generate"].get("jax_cache_hits", 0), r["generate"].get("jax_cache_requests", 0))
            for r in rec["fresh"].get("vidax-cached", [])]
    lines.append(f"| step compile, JAX persistent cache, s | {_fmt(s['compile_cached'])} | none (eager) | |")
    if hits:
        lines.append("| cache hits / programs compiled, per cached run | " + ", ".join(f"{h}/{n}" for h, n in hits) + " | | |")
    row("text encoder, prompt + negative (warm), s" if cfa else "text encoder, prompt (warm), s", "text_encoder",
        digits=3)
    te = rec.get("text_encoder", {})
    if te:
        lines.append(f"| text encoder, first call (vidax: compiles), s | {te['vidax']['first_s']:.2f} | "
                     f"{te['diffusers']['first_s']:.2f} | |")
    row(f"VAE decode {f}x{h}x{w} (warm), s", "vae_decode")
    vd = rec.get("vae_decode", {})
    if vd:
        lines.append(f"| VAE decode, first call (vidax: compiles), s | {vd['vidax']['first_s']:.2f} | "
                     f"{vd['diffusers']['first_s']:.2f} | |")
    row(f"end to end, load + {cfg.steps}-step generation {f}x{h}x{w}, fresh process (vidax cold), s", "e2e")
    lines.append(f"| end to end, vidax from the JAX persistent cache, s | {_fmt(s['e2e'].get('vidax-cached'))} | | "
                 + (f"**{s['e2e']['vidax-cached']['median'] / s['e2e']['diffusers']['median']:.2f}x**"
                    if s['e2e'].get('vidax-cached') and s['e2e'].get('diffusers') else "") + " |")
    row("generation only (no load), vidax cold, s", "generate")
    row("peak RSS (VmHWM) of the end-to-end process, GiB", "peak_rss", GiB)
    lines.append(f"| peak RSS after loading, GiB | {_fmt(s['peak_rss_load'].get('vidax'), GiB)} | "
                 f"{_fmt(s['peak_rss_load'].get('diffusers'), GiB)} | |")
    row("checkpoint load, files (page cache) to ready model, s", "load")
    if s["load"].get("vidax-converted"):
        lc, ld = s["load"]["vidax-converted"], s["load"].get("diffusers")
        lines.append(f"| checkpoint load, same weights in vidax's own layout (`vidax convert`), s | {_fmt(lc)} | | "
                     + (f"**{lc['median'] / ld['median']:.2f}x**" if ld else "") + " |")
        lines.append(f"| peak RSS of that load, GiB | {_fmt(s['peak_rss_converted_load'], GiB)} | | |")
    lines.append(f"| load: bytes read by read() (rchar), MiB | {_fmt(s['load_rchar'].get('vidax'), MiB, 1)} | "
                 f"{_fmt(s['load_rchar'].get('diffusers'), MiB, 1)} | |")
    lines.append(f"| load: bytes from storage (read_bytes), MiB | {_fmt(s['load_read_bytes'].get('vidax'), MiB, 1)} | "
                 f"{_fmt(s['load_read_bytes'].get('diffusers'), MiB, 1)} | |")
    lines.append(f"| imports + backend start (not in load), s | {_fmt(s['import'].get('vidax'))} | "
                 f"{_fmt(s['import'].get('diffusers'))} | |")
    parts = []
    for kind in ("vidax", "vidax-cached", "diffusers"):
        runs = rec["fresh"].get(kind, [])
        if not runs:
            continue
        med = {k: statistics.median(r["generate"][k] for r in runs) for k in
               ("text_encoder_s", "compile_s", "step_s", "vae_decode_s") if all(k in r["generate"] for r in runs)}
        parts.append(f"{kind}: " + ", ".join(f"{k[:-2].replace('_', ' ')} {v:.2f} s" for k, v in med.items()))
    if parts:
        lines += ["", "Inside the end-to-end generations (medians; vidax's first calls include compilation or a cache "
                  "read): " + "; ".join(parts) + "."]
    if rec.get("frames_max_abs_diff") is not None:
        lines += ["", f"Same computation: the two engines' {cfg.steps}-step frames differ by at most "
                  f"{rec['frames_max_abs_diff']:.2e} (values in [0, 1])."]
    lines += ["", "Step time against token count (per CFG half; the step runs both halves):" if cfa else
              "Step time against video token count (one transformer evaluation per step):", "",
              "| dtype | latent | tokens | vidax s | diffusers s | vidax/diffusers (medians) | per-round ratio, median (min-max) "
              "| CPU s per step, vidax / diffusers | vidax compile s |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in rec.get("sweep", []) + rec.get("sweep_bf16", []):
        v, d = r["step"].get("vidax"), r["step"].get("diffusers")
        ratio = f"**{v['median'] / d['median']:.2f}x**" if v and d else ""
        c = r.get("step_cpu_s", {})
        cpu = (f"{c['vidax']['median']:.2f} / {c['diffusers']['median']:.2f}"
               if c.get("vidax") and c.get("diffusers") else "")
        lines.append(f"| {r['dtype']} | {'x'.join(map(str, r['latent']))} | {r['tokens']} | {_fmt(v, digits=3)} | "
                     f"{_fmt(d, digits=3)} | {ratio} | {_fmt(r.get('paired_ratio'))} | {cpu} | "
                     f"{r['compile_s'].get('vidax', 0):.2f} |")
    gm = s["ratio_vidax_over_diffusers"].get("step_sweep_geomean")
    if gm:
        lines += ["", f"Geometric mean over the token counts of the fp32 per-round step ratios (each the median of "
                  f"the rounds' vidax/diffusers, the two measured back to back): **{gm:.2f}x**"
                  + (f"; of the CPU seconds per step (all threads of the process): "
                     f"**{s['ratio_vidax_over_diffusers']['step_cpu_geomean']:.2f}x**"
                     if "step_cpu_geomean" in s["ratio_vidax_over_diffusers"] else "") + "."]
    if png is not None:
        lines += ["", f"![step time against token count]({png.relative_to(DOCS.parent).as_posix()})"]
    t = s["targets"]
    verdict = {True: "met", False: "missed",
               None: "not judged (met only in measurements under contention, which flatters vidax)"}
    if cfg.name == "a":  # the issue's targets are set on configuration (a)
        lines += ["", "Targets (issue 5): " + "; ".join(f"{k}: {verdict[ok]}" for k, ok in t.items()) + "."]
    lines += ["", "Notes: the bf16 rows put only the transformer in bf16 (fp32-pinned norms, timestep embedders and "
              f"AdaLN tables stay fp32 in both); {_bf16_hardware()}. diffusers has no compile "
              "step; vidax's cold end-to-end time includes compiling the step, the text encoder and the VAE chunk "
              "programs. RSS on the CPU backend includes the weights (device memory is host memory). Loading: diffusers maps "
              "the safetensors files and its tensors point into the mapping, so its load moves no weight bytes (the pages "
              "are faulted in at first use, inside the generation; a text-to-video run never touches the VAE encoder's); "
              "vidax converts every tensor it reads (layout and dtype) into its own buffers at load, and "
              + fam.vae_note + " The step target is judged on the geometric mean over the token counts. "
              + fam.step_note + " " + (cfg.findings and cfg.findings + " "),
              "", f"Contention: every measurement records the share of the machine's CPU that other processes used "
              f"meanwhile (machine-wide busy time from `/proc/stat` minus the measured process's own CPU time). Medians "
              f"and ranges are over the quiet measurements (others under {QUIET:.0%}) when there are at least 2, and the "
              f"step rounds are repeated (up to twice as many) to collect them; a figure marked * had fewer and uses all "
              f"its measurements. PyTorch's OpenMP threads degrade far more than XLA's thread pool when the 2 cores "
              f"are shared (diffusers' step took 4-9x longer, in CPU seconds too, in contended rounds of earlier runs), "
              f"so contended figures flatter vidax."]
    replace_section(lines[0], "\n".join(lines) + "\n")


def _bf16_hardware() -> str:
    """Whether this CPU multiplies bf16 natively (oneDNN's AMX / AVX512-BF16 paths, which PyTorch uses)."""
    try:
        flags = next((line.split(":", 1)[1].split() for line in open("/proc/cpuinfo") if line.startswith("flags")), [])
    except OSError:
        flags = []
    native = [f for f in ("amx_bf16", "avx512_bf16") if f in flags]
    if native:
        return f"this CPU multiplies bf16 natively ({', '.join(native)})"
    return "this CPU has no native bf16 matmul (no AVX512_BF16/AMX)"


def _png(cfg: BenchConfig) -> Path:
    return ROOT / "docs" / "benchmarks" / ("step_time.png" if cfg.name == "a" else f"step_time-{cfg.name}.png")


FAMILY_TITLES = {"wan2.1": "Wan2.1", "wan2.2-ti2v": "Wan2.2 TI2V-5B", "cogvideox": "CogVideoX", "ltx": "LTX-Video",
                 "hunyuanvideo": "HunyuanVideo", "hunyuanvideo-1.5": "HunyuanVideo-1.5",
                 "cosmos-predict2.5": "Cosmos-Predict2.5", "cosmos3": "Cosmos3", "ltx2": "LTX-2.5"}


def plot(rec: dict, png: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot (pip install matplotlib)", file=sys.stderr)
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    styles = {("vidax", "float32"): ("C0", "o-"), ("diffusers", "float32"): ("C1", "s-"),
              ("vidax", "bfloat16"): ("C0", "o--"), ("diffusers", "bfloat16"): ("C1", "s--")}
    for rows in (rec.get("sweep", []), rec.get("sweep_bf16", [])):
        if not rows:
            continue
        dtype = rows[0]["dtype"]
        for n in ("vidax", "diffusers"):
            xs = [r["tokens"] for r in rows]
            ys = [r["step"][n]["median"] for r in rows]
            lo = [r["step"][n]["median"] - r["step"][n]["min"] for r in rows]
            hi = [r["step"][n]["max"] - r["step"][n]["median"] for r in rows]
            color, fmt = styles[(n, dtype)]
            ax.errorbar(xs, ys, yerr=[lo, hi], fmt=fmt, color=color, capsize=3, label=f"{n} {dtype}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    ticks = sorted({r["tokens"] for r in rec.get("sweep", []) + rec.get("sweep_bf16", [])})
    ax.set_xticks(ticks)
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    cfg = CONFIGS[rec["config"]]
    cfa = FAMILIES[cfg.family].cfg_halves == 2
    ax.set_xlabel("tokens per CFG half" if cfa else "video tokens")
    ax.set_ylabel("seconds per step (CFG, both halves)" if cfa else "seconds per step (one evaluation)")
    ax.set_title(f"{FAMILY_TITLES.get(cfg.family, cfg.family)} step, config {cfg.name} ({rec['date']}, "
                 f"{os.cpu_count()} CPU cores)", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png)
    plt.close(fig)
    return png


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="a", choices=sorted(CONFIGS))
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--smoke", action="store_true", help="the tiny configuration, 1 repeat, no docs (harness test)")
    p.add_argument("--no-bf16", action="store_true")
    p.add_argument("--out", default=None, help="JSON path (default docs/benchmarks/compare-<config>.json)")
    p.add_argument("--report-only", action="store_true",
                   help="re-render the docs section and plot from the existing JSON, measuring nothing")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    p.add_argument("--folder", default=None, help=argparse.SUPPRESS)
    p.add_argument("--jax-cache", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(args.worker, args.config, args.dtype, args.folder, args.jax_cache)
    cfg = CONFIGS["smoke" if args.smoke else args.config]
    if args.report_only:
        out = Path(args.out) if args.out else ROOT / "docs" / "benchmarks" / f"compare-{cfg.name}.json"
        rec = json.loads(out.read_text())
        rec["summary"] = summarize(rec)
        out.write_text(json.dumps(rec, indent=2) + "\n")
        if cfg.docs:
            write_markdown(rec, plot(rec, _png(cfg)))
        return 0
    repeats = args.repeats or cfg.repeats
    rec = run(cfg, repeats, CACHE / "logs" / f"compare-{cfg.name}", bf16=not args.no_bf16)
    rec.update(date=time.strftime("%Y-%m-%d"), machine=machine(), python=platform.python_version(),
               versions=versions(), bench_config=asdict(cfg))
    rec["summary"] = summarize(rec)
    out = Path(args.out) if args.out else ROOT / "docs" / "benchmarks" / f"compare-{cfg.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.part")
    tmp.write_text(json.dumps(rec, indent=2) + "\n")
    tmp.replace(out)
    if cfg.docs and not args.out:
        write_markdown(rec, plot(rec, _png(cfg)))
    print(json.dumps({"summary": rec["summary"], "json": str(out)}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
