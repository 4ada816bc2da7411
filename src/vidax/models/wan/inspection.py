"""``vidax inspect`` for Wan checkpoints: detected model, layout, tensors, and keys our maps do not know."""

from __future__ import annotations

import json
import os
from pathlib import Path

from vidax.checkpoint.inspect import (MISMATCH, best_keymap, checked, component_lines, format_summary, scheduler_lines,
                                     summarize, tokenizer_lines, unknown_keys)
from vidax.checkpoint.reader import CheckpointReader
from vidax.encoders.clip import (
    WAN_CLIP_VIEWS,
    CLIPVisionConfig,
    clip_config_from_wan_original_shapes,
    clip_keymap,
    clip_keymap_wan_original,
    clip_specs,
)
from vidax.encoders.t5 import T5Config, t5_config_from_wan_original_shapes, t5_keymap, t5_keymap_wan_original, t5_specs
from vidax.core import wan_vae
from vidax.models.wan.config import WanTransformerConfig
from vidax.models.wan.keymap import transformer_keymap_diffusers, transformer_keymap_original
from vidax.models.wan.layout import resolve_checkpoint
from vidax.models.wan.transformer import transformer_specs

def _candidates(path: Path, reader) -> dict:
    """Every Wan component key map, configured from the component's own config.json or tensor
    shapes where that is possible (so sized keys such as block counts match), else defaults."""
    folder = path if path.is_dir() else path.parent
    config = {}
    if (folder / "config.json").is_file():
        try:
            config = json.loads((folder / "config.json").read_text())
        except json.JSONDecodeError:
            config = {}
    shapes = {k: tuple(reader.shape(k)) for k in reader.keys()}

    def attempt(make, default):
        try:
            return make()
        except (ValueError, KeyError, TypeError):
            return default

    tcfg = attempt(lambda: WanTransformerConfig.from_dict(config), WanTransformerConfig()) \
        if config.get("_class_name") == "WanTransformer3DModel" else WanTransformerConfig()
    tcfg_orig = attempt(lambda: WanTransformerConfig.from_original_dict(config), WanTransformerConfig()) \
        if config.get("_class_name") == "WanModel" else WanTransformerConfig()
    vcfg = attempt(lambda: wan_vae.WanVAEConfig.from_dict(config), wan_vae.WanVAEConfig()) \
        if config.get("_class_name") == "AutoencoderKLWan" else wan_vae.WanVAEConfig()
    vcfg_orig = attempt(lambda: wan_vae.vae_config_from_original_shapes(shapes), wan_vae.WanVAEConfig())
    ecfg = attempt(lambda: T5Config.from_dict(config), T5Config()) if "d_model" in config else T5Config()
    ecfg_orig = attempt(lambda: t5_config_from_wan_original_shapes(shapes), T5Config())
    ccfg = attempt(lambda: CLIPVisionConfig.from_dict(config), CLIPVisionConfig()) if "hidden_size" in config \
        else CLIPVisionConfig()
    raw = getattr(reader, "inner", reader)  # the CLIP file is inspected through its views; its shapes are the raw ones
    ccfg_orig = attempt(lambda: clip_config_from_wan_original_shapes({k: tuple(raw.shape(k)) for k in raw.keys()}),
                        CLIPVisionConfig(with_projection=True))
    return {
        "Wan2.1 transformer (diffusers layout)": transformer_keymap_diffusers(tcfg),
        "Wan2.1 transformer (original layout)": transformer_keymap_original(tcfg_orig),
        "Wan VAE (diffusers layout)": wan_vae.vae_keymap(vcfg),
        "Wan VAE (original layout)": wan_vae.vae_keymap_original(vcfg_orig),
        "UMT5 encoder (transformers layout)": t5_keymap(ecfg),
        "UMT5 encoder (Wan original layout)": t5_keymap_wan_original(ecfg_orig),
        "CLIP image encoder (transformers layout)": clip_keymap(ccfg, reader.keys()),
        "CLIP image encoder (Wan original layout)": clip_keymap_wan_original(ccfg_orig),
    }


def _image_encoder_lines(ckpt) -> list[str]:
    reader, keymap, ccfg = ckpt.image_encoder_source()
    return component_lines("image_encoder", reader, keymap, clip_specs(ccfg), str(ckpt.image_encoder))


def inspect_checkpoint(path: str | os.PathLike) -> list[str]:
    """Describe a Wan checkpoint folder (any layout); a lone component is :func:`inspect_component`'s
    (:func:`vidax.models.registry.inspect` chooses).

    Returns:
      report lines: detected model and layout, per component the tensor count, parameter
      count, bytes, dtypes, name patterns with shapes, the keys our key maps do not know, and whether it loads.

    Raises:
      CheckpointError: see :func:`vidax.models.wan.layout.resolve_checkpoint`.
    """
    path = Path(path)
    return _folder_lines(path, resolve_checkpoint(path))


def _folder_lines(path: Path, ckpt) -> list[str]:
    """A resolved folder's report: each component checked on its own (a failing one is a mismatch line)."""
    maps = ckpt.maps
    try:
        tcfg = ckpt.transformer_config()
    except (ValueError, OSError) as e:
        return [f"{path}: Wan, {ckpt.layout} layout", f"transformer: {MISMATCH}: {e}"]
    lines = [f"{path}: {ckpt.describe(tcfg)}, {ckpt.layout} layout",
             f"  transformer: {tcfg.num_layers} blocks, dim {tcfg.dim} ({tcfg.num_attention_heads} heads x "
             f"{tcfg.attention_head_dim}), ffn {tcfg.ffn_dim}"]
    lines += checked("transformer", lambda: component_lines(
        "transformer", ckpt.transformer_reader(), maps.transformer_keymap(tcfg), transformer_specs(tcfg),
        str(ckpt.transformer_weights)))
    if ckpt.transformer_2_weights is not None:
        lines += checked("transformer_2", lambda: component_lines(
            "transformer_2", ckpt.transformer_2_reader(), maps.transformer_keymap(ckpt.transformer_2_config()),
            transformer_specs(ckpt.transformer_2_config()), str(ckpt.transformer_2_weights)))

    def vae():
        vreader = ckpt.vae_reader()
        vcfg = ckpt.vae_config(vreader)
        return component_lines("vae", vreader, maps.vae_keymap(vcfg), wan_vae.vae_specs(vcfg), str(ckpt.vae_weights))

    def text_encoder():
        ereader = ckpt.text_encoder_reader()
        ecfg = ckpt.text_encoder_config(ereader)
        out = component_lines("text_encoder", ereader, maps.text_encoder_keymap(ecfg), t5_specs(ecfg),
                              str(ckpt.text_encoder_weights))
        if ecfg.d_model != tcfg.text_dim:
            out.append(f"  {MISMATCH}: it is {ecfg.d_model} wide but the transformer expects text_dim={tcfg.text_dim}")
        return out

    lines += checked("vae", vae)
    lines += checked("text_encoder", text_encoder)
    if ckpt.image_encoder is not None:
        lines += checked("image_encoder", lambda: _image_encoder_lines(ckpt))
    lines += tokenizer_lines(ckpt.tokenizer)
    lines += scheduler_lines(ckpt.scheduler_config(), ckpt.scheduler_config_path,
                             "none in the original layout: the Wan repository's UniPC settings")
    return lines


def inspect_component(path: str | os.PathLike) -> tuple[float, list[str]]:
    """Describe a single component file or folder by the Wan key map that fits it best.

    Returns:
      ``(share of its keys that map fills, report lines)``.

    Raises:
      CheckpointError: the file cannot be read.
    """
    path = Path(path)
    reader = CheckpointReader(path)
    if any(k.startswith("visual.transformer.") for k in reader.keys()):  # the original Wan CLIP file
        reader = WAN_CLIP_VIEWS.reader(reader)
    candidates = _candidates(path, reader)
    name, share = best_keymap(reader, candidates)
    if name is None or share < 0.5:
        lines = [f"{path}: no known model component (best match {name or 'none'}: {share:.0%} of keys)"]
        return share, lines + format_summary(summarize(reader))
    lines = [f"{path}: {name} ({share:.0%} of keys mapped)"]
    lines += format_summary(summarize(reader))
    unknown = unknown_keys(reader, candidates[name])
    lines.append(f"keys our map does not know: {len(unknown)}")
    lines += [f"  {k}" for k in unknown[:40]]
    return share, lines
