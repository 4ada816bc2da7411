"""``vidax inspect`` for HunyuanVideo-1.5 folders: the model, its layout, and per component what the files hold.

Every layout of :mod:`vidax.models.hunyuanvideo15.layout` (diffusers, the official release, vidax-converted),
text-to-video and image-to-video. An official-release folder is reported with every transformer variant it holds
(or the one asked for), the image encoder when one of them is image-to-video. Headers and configuration files only:
no tensor data is read (the release's glyph ``byt5_model.pt`` through its pickle).
"""

from __future__ import annotations

import os
from pathlib import Path

from vidax.checkpoint.inspect import MISMATCH, checked, component_lines, format_summary, scheduler_lines, summarize
from vidax.models.hunyuanvideo15 import convert as hconvert
from vidax.models.hunyuanvideo15.layout import DEFAULT_VARIANT, ORIGINAL, original_variants, resolve_checkpoint

_TASKS = {"t2v": "text-to-video", "i2v": "image-to-video"}


def _component(name: str, reader, keymap, specs, source: str, summary: str) -> list[str]:
    """A component's report (:func:`vidax.checkpoint.inspect.component_lines`) with its configuration's summary
    under its first line. A reader through views (the transformer's fused tensors split) is checked through them,
    but its tensors are counted as the file holds them."""
    lines = component_lines(name, reader, keymap, specs, source)
    inner = getattr(reader, "inner", None)
    if inner is not None:
        viewed = ["  " + line for line in format_summary(summarize(reader))]
        if lines[1:1 + len(viewed)] == viewed:
            lines[1:1 + len(viewed)] = ["  " + line for line in format_summary(summarize(inner))]
    return lines[:1] + [f"  config: {summary}"] + lines[1:]


def transformer_summary(cfg) -> str:
    """One line: depth, heads, refiner, patch, channels, conditioning widths and MeanFlow of a transformer
    configuration."""
    return (f"{cfg.num_layers} dual-stream blocks, {cfg.num_attention_heads} heads x {cfg.attention_head_dim} "
            f"(width {cfg.dim}), {cfg.num_refiner_layers} token-refiner blocks, patch "
            f"{cfg.patch_size_t}x{cfg.patch_size}x{cfg.patch_size}, {cfg.in_channels} -> {cfg.out_channels} channels, "
            f"RoPE axes {list(cfg.rope_axes_dim)}, text {cfg.text_embed_dim} / glyph {cfg.text_embed_2_dim} / image "
            f"{cfg.image_embed_dim} wide, task {cfg.task_type}, target size {cfg.target_size}"
            + (", MeanFlow (timestep_r)" if cfg.use_meanflow else ""))


def _vae_summary(cfg) -> str:
    return (f"blocks {list(cfg.block_out_channels)} x {cfg.layers_per_block}, {cfg.latent_channels} latent channels, "
            f"{cfg.spatial_compression_ratio}x space, {cfg.temporal_compression_ratio}x time, scaling "
            f"{cfg.scaling_factor}")


def _encoder_summary(src) -> str:
    c = src.cfg
    if src.name == "text_encoder":
        return (f"Qwen2.5-VL language model, {c.num_hidden_layers} layers, width {c.hidden_size}, vocabulary "
                f"{c.vocab_size} (a vision tower and LM head are not read)")
    if src.name == "text_encoder_2":
        return f"byT5 glyph encoder (T5), {c.num_layers} layers, width {c.d_model}, {c.vocab_size} embedding rows"
    return (f"SigLIP vision tower, {c.num_hidden_layers} layers, width {c.hidden_size}, {c.image_size} px in patches "
            f"of {c.patch_size} ({c.num_positions} tokens)")


def _encoder(src) -> list[str]:
    return _component(src.name, src.reader, src.keymap, src.specs, str(src.source), _encoder_summary(src))


def inspect_checkpoint(path: str | os.PathLike, variant: str | None = None) -> list[str]:
    """Describe a HunyuanVideo-1.5 checkpoint folder (any layout, either task), reading headers only.

    Args:
      path: the folder.
      variant: an official release's transformer variant to report alone (``vidax convert --variant`` checks the
        one it converts); None: every variant the folder holds. Refused for other layouts (one transformer).

    Returns:
      report lines: the pipeline and layout, and per component (the transformer of each variant, the VAE, the
      Qwen2.5-VL and byT5 text encoders, for image-to-video the SigLIP image encoder) its configuration, tensors,
      parameter count, dtypes, the keys our maps do not know and whether the maps fill the model exactly (missing,
      unexpected and mis-shaped keys named); the components' fit to each other; both tokenizers, the scheduler, the
      guider and (I2V) the image processor. A line holding :data:`vidax.checkpoint.inspect.MISMATCH` marks what would
      stop loading (``vidax inspect`` exits 1).

    Raises:
      CheckpointError: see :func:`vidax.models.hunyuanvideo15.layout.resolve_checkpoint` (a missing part, or the
        variant asked for missing: those present named).
    """
    ckpt = hconvert.resolve(path, variant)
    if ckpt.layout == ORIGINAL:
        variants = (variant,) if variant is not None else original_variants(ckpt.folder)
        tasks = sorted({t for t in (_variant_task(v) for v in variants)}, key=("t2v", "i2v").index)
        what = " and ".join(_TASKS[t] for t in tasks)
        lines = [f"{Path(path)}: HunyuanVideo-1.5 {what}, official release (original layout), transformer "
                 f"variants: {', '.join(variants)}"]
    else:
        variants = (ckpt.variant,)
        lines = [f"{Path(path)}: HunyuanVideo-1.5 {_TASKS[ckpt.task]} ({ckpt.pipeline_class}), {ckpt.layout} layout"
                 + (f", variant {ckpt.variant}" if ckpt.variant else "")]
    vae = {}

    def vae_lines():
        cfg, reader, keymap, specs = hconvert.vae_source(ckpt)
        vae["cfg"] = cfg
        return _component("vae", reader, keymap, specs, str(ckpt.vae), _vae_summary(cfg))

    vae_report = checked("vae", vae_lines)
    image, fits = None, []
    for v in variants:
        report, fit = _transformer_lines(ckpt, v, vae.get("cfg"))
        lines += report
        fits += fit
        if image is None and v is not None and ckpt.layout == ORIGINAL and _variant_task(v) == "i2v":
            image = v
    lines += vae_report
    lines += checked("text_encoder", lambda: _encoder(hconvert.qwen_source(ckpt)))
    glyph = {}

    def glyph_lines():
        src, glyph["tokenizer"] = hconvert.glyph_source(ckpt)
        return _encoder(src)

    lines += checked("text_encoder_2", glyph_lines)
    i2v = ckpt if ckpt.layout != ORIGINAL or image is None else _resolved(ckpt.folder, image)
    if i2v is not None and i2v.image_encoder is not None:
        lines += checked("image_encoder", lambda: _encoder(hconvert.siglip_source(i2v)))
    lines += fits
    lines += checked("tokenizer", lambda: _qwen_tokenizer_lines(ckpt))
    if "tokenizer" in glyph:
        source = ckpt.glyph_assets if ckpt.layout == ORIGINAL else ckpt.tokenizer_2
        what = ("byt5-small's with the Glyph-SDXL-v2 colour and font tokens" if ckpt.layout == ORIGINAL
                else "ByT5Tokenizer")
        lines.append(f"tokenizer_2: {source} ({what}, {len(glyph['tokenizer'])} tokens)")
    for v in variants:
        lines += _sampler_lines(ckpt if ckpt.layout != ORIGINAL else _resolved(ckpt.folder, v), v)
    if i2v is not None and i2v.feature_extractor is not None:
        lines += checked("feature_extractor", lambda: _processor_lines(i2v))
    return lines


def _variant_task(variant: str) -> str:
    from vidax.models.hunyuanvideo15.presets import VARIANTS

    return VARIANTS[variant].task


def _resolved(folder: Path, variant: str):
    """The folder resolved for one variant; None when that fails (its transformer's lines say why)."""
    from vidax.checkpoint.errors import CheckpointError

    try:
        return resolve_checkpoint(folder, variant=variant)
    except CheckpointError:
        return None


def _transformer_lines(ckpt, variant: str | None, vcfg) -> tuple[list[str], list[str]]:
    """One transformer's report (an official release: that variant's, its other parts checked for it), and the
    lines of the fit of the folder's components to it."""
    name = "transformer" if ckpt.layout != ORIGINAL else f"transformer ({variant})"
    found = {}

    def lines():
        own = ckpt if ckpt.layout != ORIGINAL else resolve_checkpoint(ckpt.folder, variant=variant)
        cfg, reader, keymap, specs = hconvert.transformer_source(own)
        found["ckpt"], found["cfg"] = own, cfg
        return _component(name, reader, keymap, specs, str(own.transformer), transformer_summary(cfg))

    out, fit = checked(name, lines), []
    if "cfg" in found and vcfg is not None:
        try:
            problems = hconvert.component_problems(found["ckpt"], found["cfg"], vcfg)
        except (ValueError, OSError) as e:  # an encoder's unreadable configuration (its own lines say so too)
            problems = [str(e)]
        label = "components" if ckpt.layout != ORIGINAL else f"components ({variant})"
        fit = [f"{label}: {MISMATCH}: {p}" for p in problems] or [f"{label}: fit each other"]
    return out, fit


def _qwen_tokenizer_lines(ckpt) -> list[str]:
    from vidax.encoders.qwen2_tokenizer import Qwen2Tokenizer

    return [f"tokenizer: {ckpt.tokenizer} (Qwen2 tokenizer, {Qwen2Tokenizer.from_folder(ckpt.tokenizer).vocab_size} "
            "tokens)"]


def _sampler_lines(ckpt, variant: str | None) -> list[str]:
    """The scheduler and the guider as the pipelines build them (the variant's where the folder has none)."""
    if ckpt is None:
        return []
    suffix = f" ({variant})" if ckpt.layout == ORIGINAL else ""
    shift = ckpt.scheduler_config().get("shift")
    own = ckpt.variant or DEFAULT_VARIANT[ckpt.task]
    default = f"none in the folder: the {own} variant's, shift {shift}"
    lines = scheduler_lines(ckpt.scheduler_config(), ckpt.scheduler or default)
    lines = [line.replace("scheduler:", f"scheduler{suffix}:", 1) for line in lines]

    def guider():
        from vidax.models.hunyuanvideo15.pipeline import Guider

        g = Guider(ckpt.guider_config())
        where = ckpt.guider or f"none in the folder: the {own} variant's"
        return [f"guider{suffix}: {where} (classifier-free guidance, scale {g.guidance_scale})"]

    return lines + checked(f"guider{suffix}", guider)


def _processor_lines(ckpt) -> list[str]:
    path, config = hconvert.processor_config(ckpt)
    size = config.get("size")
    return [f"feature_extractor: {path or 'none in the folder: HunyuanVideo-1.5 SigLIP preprocessing'} "
            f"(SiglipImageProcessor, size {size})"]
