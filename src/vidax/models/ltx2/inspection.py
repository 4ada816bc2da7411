"""``vidax inspect`` for LTX-2.5 checkpoints: the model, its layout, and per component what the files hold.

Configuration files and safetensors headers only: no tensor data is read.
"""

from __future__ import annotations

import os
from pathlib import Path

from vidax.checkpoint.inspect import checked, component_lines


def summary(name: str, cfg) -> str:
    """One line describing a component's configuration."""
    if name == "transformer":
        return (f"{cfg.num_layers} audio-video blocks; video {cfg.num_attention_heads} heads x "
                f"{cfg.attention_head_dim}, audio {cfg.audio_num_attention_heads} x {cfg.audio_attention_head_dim}; "
                f"gated attention {'on' if cfg.gated_attn else 'off'}, prompt AdaLN "
                f"{'on' if cfg.prompt_modulation else 'off'}, {cfg.rope_type} RoPE, video FFN bias "
                f"{'on' if cfg.ff_bias else 'off'}, keyframe embedding "
                f"{'on' if cfg.use_keyframes_abs_pos_embedding else 'off'}")
    if name == "text_encoder":
        return (f"Gemma 4 text tower, {cfg.num_hidden_layers} layers, width {cfg.hidden_size}, vocabulary "
                f"{cfg.vocab_size}")
    if name == "connectors":
        return (f"{'per-modality projections' if cfg.per_modality_projections else 'one projection'} of "
                f"{cfg.text_proj_in_factor} hidden states; video connector {cfg.layers('video')} layers x "
                f"{cfg.width('video')}, audio {cfg.layers('audio')} x {cfg.width('audio')}")
    if name == "vae":
        return (f"video VAE, {cfg.latent_channels} latent channels, {cfg.spatial_compression}x space, "
                f"{cfg.temporal_compression}x time")
    if name == "audio_vae":
        return f"audio VAE, {cfg.latent_channels} latent channels x {cfg.mel_bins} mel bins, {cfg.sample_rate} Hz"
    if name == "vocoder":
        kind = "with bandwidth extension" if hasattr(cfg, "bwe") else "single stage"
        return f"vocoder ({kind}), {cfg.output_sampling_rate} Hz output"
    if name == "diffusion_decoder":
        return (f"diffusion VAE decoder, stage widths {list(cfg.decoder_stage_channels)}, "
                f"{cfg.decoder_num_inference_steps} {cfg.decoder_model_output_type} step(s), "
                f"{cfg.spatial_compression_ratio}x space, {cfg.temporal_compression_ratio}x time")
    return ""


def inspect_checkpoint(path: str | os.PathLike) -> list[str]:
    """Describe an LTX-2 checkpoint folder, reading headers only.

    Returns:
      report lines: the pipeline, layout, model version and sampler kind; per component its configuration,
      tensors, parameter count, dtypes, unknown keys and whether the maps fill the model exactly; the tokenizer; the
      scheduler. A line holding :data:`vidax.checkpoint.inspect.MISMATCH` marks what would stop loading.

    Raises:
      CheckpointError: see :func:`vidax.models.ltx2.layout.resolve_checkpoint`.
    """
    from vidax.models.ltx2.layout import COMPONENTS, resolve_checkpoint

    ckpt = resolve_checkpoint(path)
    version = f", model_version {'.'.join(map(str, ckpt.version))}" if ckpt.version else ""
    kind = "distilled (fixed few-step schedule)" if ckpt.is_distilled else "dev (dynamic-shift schedule)"
    lines = [f"{Path(path)}: LTX-2.5 text- and image-to-video with audio ({ckpt.pipeline_class}), {ckpt.layout} "
             f"layout{version}; {kind}; audio {'yes' if ckpt.has_audio else 'no'}, diffusion decoder "
             f"{'yes' if ckpt.has_diffusion_decoder else 'no'}"]
    if ckpt.weights is not None:
        lines.append(f"release file: {ckpt.weights}")
    for name in COMPONENTS:
        if name == "diffusion_decoder" and not ckpt.has_diffusion_decoder:
            continue
        if ckpt.layout != "release" and name not in ckpt.folders:
            lines.append(f"{name}: absent")
            continue

        def make(name=name):
            s = ckpt.source(name)
            out = component_lines(name, s.reader, s.keymap, s.specs, s.source)
            return out[:1] + [f"  config: {summary(name, s.cfg)}"] + out[1:]

        lines += checked(name, make)
    lines += checked("tokenizer", lambda: [f"tokenizer: {ckpt.folders['tokenizer']} (Gemma tokenizer, "
                                           f"{ckpt.tokenizer()._tok.get_vocab_size()} tokens)"])
    s = ckpt.scheduler_config
    lines.append(f"scheduler: FlowMatchEulerDiscreteScheduler (dynamic shifting "
                 f"{'on' if s.get('use_dynamic_shifting') else 'off'}, terminal {s.get('shift_terminal')})")
    return lines
