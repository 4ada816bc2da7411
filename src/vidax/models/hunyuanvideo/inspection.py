"""``vidax inspect`` for HunyuanVideo folders: the model, its layout, and per component what the files hold.

Every layout of :mod:`vidax.models.hunyuanvideo.layout` (diffusers, the original release, vidax-converted), text-to-
video and image-to-video. Headers and configuration files only: no tensor data is read (the original release's
``.pt`` files through their pickles).
"""

from __future__ import annotations

import os
from pathlib import Path

from vidax.checkpoint.inspect import (MISMATCH, checked, component_lines, format_summary, scheduler_lines, summarize,
                                     tokenizer_lines)
from vidax.models.hunyuanvideo.convert import component_problems, text_encoder_source, transformer_source, vae_source
from vidax.models.hunyuanvideo.layout import ORIGINAL, resolve_checkpoint

_TASKS = {"t2v": "text-to-video", "i2v": "image-to-video"}


def _component(name: str, reader, keymap, specs, source: str, summary: str) -> list[str]:
    """A component's report (:func:`vidax.checkpoint.inspect.component_lines`) with its configuration's summary
    under its first line. A reader through views (fused tensors split: the transformer's) is checked through them,
    but its tensors are counted as the file holds them."""
    lines = component_lines(name, reader, keymap, specs, source)
    inner = getattr(reader, "inner", None)
    if inner is not None:
        viewed = ["  " + line for line in format_summary(summarize(reader))]
        if lines[1:1 + len(viewed)] == viewed:
            lines[1:1 + len(viewed)] = ["  " + line for line in format_summary(summarize(inner))]
    return lines[:1] + [f"  config: {summary}"] + lines[1:]


def transformer_summary(cfg) -> str:
    """One line: depths, heads, patch, channels, guidance and image conditioning of a transformer configuration."""
    condition = f", image condition {cfg.image_condition_type}" if cfg.image_condition_type else ""
    return (f"{cfg.num_layers} dual-stream + {cfg.num_single_layers} single-stream blocks, {cfg.num_attention_heads} "
            f"heads x {cfg.attention_head_dim} (width {cfg.dim}), {cfg.num_refiner_layers} token-refiner blocks, "
            f"patch {cfg.patch_size_t}x{cfg.patch_size}x{cfg.patch_size}, {cfg.in_channels} -> {cfg.out_channels} "
            f"channels, RoPE axes {list(cfg.rope_axes_dim)}, "
            + ("guidance embedding" if cfg.guidance_embeds else "no guidance embedding") + condition)


def _vae_summary(cfg) -> str:
    return (f"blocks {list(cfg.block_out_channels)} x {cfg.layers_per_block}, {cfg.latent_channels} latent channels, "
            f"{cfg.spatial_compression_ratio}x space, {cfg.temporal_compression_ratio}x time, scaling "
            f"{cfg.scaling_factor}")


def _text_summary(src) -> str:
    if src.kind == "clip":
        c = src.cfg
        return f"CLIP text tower, {c.num_hidden_layers} layers, width {c.hidden_size} (pooled output used)"
    c = src.cfg.text if src.kind == "llava" else src.cfg
    what = "LLaVA (Llama + CLIP vision tower)" if src.kind == "llava" else "Llama"
    return f"{what}, {c.num_hidden_layers} layers, width {c.hidden_size}, vocabulary {c.vocab_size}"


def inspect_checkpoint(path: str | os.PathLike) -> list[str]:
    """Describe a HunyuanVideo checkpoint folder (any layout, either task), reading headers only.

    Returns:
      report lines: the pipeline and layout, the transformer's configuration, and per component (transformer,
      VAE, text encoder, CLIP) its configuration, tensors, parameter count, dtypes, the keys our maps do not know
      and whether the maps fill the model exactly (missing, unexpected and mis-shaped keys named); the components'
      fit to each other; the tokenizers, the scheduler and (I2V) the image processor. A line holding
      :data:`vidax.checkpoint.inspect.MISMATCH` marks what would stop loading (``vidax inspect`` exits 1).

    Raises:
      CheckpointError: see :func:`vidax.models.hunyuanvideo.layout.resolve_checkpoint` (a missing part).
    """
    from vidax.models.hunyuanvideo.text import text_encoder_folders

    ckpt = resolve_checkpoint(path)
    lines = [f"{Path(path)}: HunyuanVideo {_TASKS[ckpt.task]} ({ckpt.pipeline_class}), {ckpt.layout} layout"]
    found = {}

    def transformer():
        cfg, reader, keymap, specs = transformer_source(ckpt)
        found["transformer"] = cfg
        return _component("transformer", reader, keymap, specs, str(ckpt.transformer), transformer_summary(cfg))

    def vae():
        cfg, reader, keymap, specs = vae_source(ckpt)
        found["vae"] = cfg
        return _component("vae", reader, keymap, specs, str(ckpt.vae), _vae_summary(cfg))

    def text_encoder(name: str):
        folders = text_encoder_folders(ckpt)
        src = text_encoder_source(getattr(folders, name), folders.kind if name == "text_encoder" else "clip")
        found[name] = src
        return _component(name, src.reader, src.keymap, src.specs, str(src.folder), _text_summary(src))

    lines += checked("transformer", transformer)
    lines += checked("vae", vae)
    lines += checked("text_encoder", lambda: text_encoder("text_encoder"))
    lines += checked("text_encoder_2", lambda: text_encoder("text_encoder_2"))
    if len(found) == 4:
        problems = component_problems(ckpt.task, found["transformer"], found["vae"], found["text_encoder"],
                                      found["text_encoder_2"])
        lines += [f"components: {MISMATCH}: {p}" for p in problems] or ["components: fit each other"]
    lines += _tokenizer_lines(ckpt, found.get("text_encoder"))
    if ckpt.image_processor is not None:
        lines += checked("image_processor", lambda: _image_processor_lines(ckpt.image_processor))
    default = "none in the original layout: the release's flow-matching Euler sampler, shift 7.0"
    lines += checked("scheduler", lambda: scheduler_lines(ckpt.scheduler_config() if ckpt.layout != ORIGINAL else None,
                                                          ckpt.scheduler, default))
    return lines


def _tokenizer_lines(ckpt, text) -> list[str]:
    """Both tokenizers loaded as the pipelines load them; I2V: the prompt template fitted (its ``<image>`` token)."""
    from vidax.encoders.tokenizer import Tokenizer, load_clip_tokenizer
    from vidax.models.hunyuanvideo.text import I2V_PROMPT_TEMPLATE, fit_prompt_template

    lines = tokenizer_lines(ckpt.tokenizer)

    def template():  # the I2V template needs the tokenizer's <image> token
        fit_prompt_template(Tokenizer.from_folder(ckpt.tokenizer), I2V_PROMPT_TEMPLATE, text.cfg.num_image_features)
        return []

    if text is not None and text.kind == "llava" and not any(MISMATCH in line for line in lines):
        lines += checked("tokenizer", template)

    def clip():
        return [f"tokenizer_2: {ckpt.tokenizer_2} ({load_clip_tokenizer(ckpt.tokenizer_2).vocab_size} tokens)"]

    return lines + checked("tokenizer_2", clip)


def _image_processor_lines(folder: Path) -> list[str]:
    from vidax.core.config_values import read_json
    from vidax.encoders.clip import CLIPImageProcessorConfig

    path = folder / "preprocessor_config.json"
    cfg = CLIPImageProcessorConfig.from_dict(read_json(path))
    return [f"image_processor: {path} ({type(cfg).__name__})"]
