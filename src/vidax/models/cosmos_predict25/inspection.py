"""``vidax inspect`` for Cosmos-Predict2.5 folders: the model, its layout, and per component what the files hold.

Every layout of :mod:`vidax.models.cosmos_predict25.layout` (diffusers, the release, vidax-converted). A release
folder is reported with every transformer it holds (``base/post-trained``, ``base/pre-trained``) or the one asked
for, each with its sampler. Headers and configuration files only: no tensor data is read (the release's ``.pt`` and
``tokenizer.pth`` through their pickles' headers).
"""

from __future__ import annotations

import os
from pathlib import Path

from vidax.checkpoint.inspect import MISMATCH, checked, component_lines
from vidax.models.cosmos_predict25 import convert as cconvert
from vidax.models.cosmos_predict25.layout import (ORIGINAL, ORIGINAL_CONFIG, PIPELINE_CLASS, original_transformers,
                                                  resolve_checkpoint)

_WHAT = "Cosmos-Predict2.5 text-, image- and video-to-world"


def _component(name: str, reader, keymap, specs, source: str, summary: str) -> list[str]:
    """A component's report (:func:`vidax.checkpoint.inspect.component_lines`) with its configuration's summary
    under its first line."""
    lines = component_lines(name, reader, keymap, specs, source)
    return lines[:1] + [f"  config: {summary}"] + lines[1:]


def transformer_summary(cfg) -> str:
    """One line: depth, heads, widths, patch, channels, the text projection and the q/k-norm epsilon of a
    transformer configuration."""
    p = "x".join(str(v) for v in cfg.patch_size)
    text = (f"text {cfg.crossattn_proj_in_channels} -> {cfg.encoder_hidden_states_channels} (crossattn_proj)"
            if cfg.use_crossattn_projection else f"text {cfg.text_embed_dim}")
    return (f"{cfg.num_layers} blocks, {cfg.num_attention_heads} heads x {cfg.attention_head_dim} (width {cfg.dim}), "
            f"MLP {cfg.mlp_dim}, AdaLN-LoRA {cfg.adaln_lora_dim}, patch {p}, {cfg.in_channels}"
            f"{' + padding mask' if cfg.concat_padding_mask else ''} -> {cfg.out_channels} channels, {text}, RoPE "
            f"scale {list(cfg.rope_scale)}, position embedding {cfg.extra_pos_embed_type or 'none'}, q/k norm eps "
            f"{cfg.qk_norm_eps:g}")


def _config_source(ckpt, cfg) -> str:
    """Where an original transformer's configuration comes from."""
    if ckpt.layout != ORIGINAL:
        return ""
    if (ckpt.transformer.parent / ORIGINAL_CONFIG).is_file():
        return f" (from {ORIGINAL_CONFIG} beside the .pt, not a release's)"
    return (f" (the {cconvert.model_size(ckpt, cfg)} release's, by the weights' width {cfg.dim} and {cfg.num_layers} "
            "blocks)")


def _vae_summary(ckpt, cfg) -> str:
    where = " (read back from its tensor shapes)" if ckpt.layout == ORIGINAL else ""
    return (f"Wan2.1 VAE, base {cfg.base_dim} x {list(cfg.dim_mult)}, {cfg.num_res_blocks} residual blocks per "
            f"stage, {cfg.z_dim} latent channels, {cfg.spatial_compression}x space, {cfg.temporal_compression}x time"
            + where)


def _text_summary(src) -> str:
    c = src.cfg
    return (f"Qwen2.5-VL language model (Cosmos-Reason1), {c.num_hidden_layers} layers x width {c.hidden_size} = "
            f"{c.num_hidden_layers * c.hidden_size} features per token, vocabulary {c.vocab_size} (a vision tower and "
            "LM head are not read)")


def inspect_checkpoint(path: str | os.PathLike, variant: str | None = None) -> list[str]:
    """Describe a Cosmos-Predict2.5 checkpoint folder (any layout), reading headers only.

    Args:
      path: the folder.
      variant: a release's transformer to report alone (``vidax convert --variant`` checks the one it converts);
        None: every transformer the folder holds. Refused for other layouts (one transformer).

    Returns:
      report lines: the pipeline and layout, and per component (the transformer of each variant, the VAE, the
      Qwen2.5-VL text encoder) its configuration, tensors, parameter count, dtypes, the keys our maps do not know and
      whether the maps fill the model exactly (missing, unexpected and mis-shaped keys named); the components' fit to
      each other (the text encoder's layers x width against the transformer's ``crossattn_proj_in_channels``, the
      VAE's latent channels against the transformer's); the tokenizer and each variant's sampler. A line holding
      :data:`vidax.checkpoint.inspect.MISMATCH` marks what would stop loading (``vidax inspect`` exits 1).

    Raises:
      CheckpointError: see :func:`vidax.models.cosmos_predict25.layout.resolve_checkpoint` (a missing part, an
        unknown variant, or the variant asked for missing: those present named).
    """
    ckpt = cconvert.resolve(path, variant)
    if ckpt.layout == ORIGINAL:
        variants = (variant,) if variant is not None else tuple(original_transformers(ckpt.folder))
        lines = [f"{Path(path)}: {_WHAT}, the release (original layout), transformer variants: "
                 f"{', '.join(variants)}"]
        resolved = {v: resolve_checkpoint(ckpt.folder, variant=v) for v in variants}
    else:
        variants = (ckpt.variant,)
        lines = [f"{Path(path)}: {_WHAT} ({PIPELINE_CLASS}), {ckpt.layout} layout"
                 + (f", variant {ckpt.variant}" if ckpt.variant else "")]
        resolved = {ckpt.variant: ckpt}
    found = {}

    def vae_lines():
        cfg, reader, keymap, specs = cconvert.vae_source(ckpt)
        found["vae"] = cfg
        return _component("vae", reader, keymap, specs, str(ckpt.vae), _vae_summary(ckpt, cfg))

    def text_lines():
        src = cconvert.text_source(ckpt)
        return _component("text_encoder", src.reader, src.keymap, src.specs, str(src.folder), _text_summary(src))

    for own in resolved.values():
        lines += _transformer_lines(own, found)
    lines += checked("vae", vae_lines)
    lines += checked("text_encoder", text_lines)
    if "vae" in found:
        for v, own in resolved.items():
            lines += _fit_lines(own, found, v)
    lines += checked("tokenizer", lambda: _tokenizer_lines(ckpt))
    for v, own in resolved.items():
        lines += checked("scheduler" + (f" ({v})" if ckpt.layout == ORIGINAL else ""), lambda own=own: _sampler(own))
    return lines


def _transformer_lines(ckpt, found: dict) -> list[str]:
    """One transformer's report (a release's variant as ``transformer (<variant>)``), its configuration kept in
    ``found`` for the fit lines."""
    name = "transformer" if ckpt.layout != ORIGINAL else f"transformer ({ckpt.variant})"

    def lines():
        cfg, reader, keymap, specs = cconvert.transformer_source(ckpt)
        found[("transformer", ckpt.variant)] = cfg
        out = _component(name, reader, keymap, specs, str(ckpt.transformer),
                         transformer_summary(cfg) + _config_source(ckpt, cfg))
        ignored = [k for k in reader.keys() if keymap.ignored(k)]
        if ignored:  # the release's training counters and recomputed buffers (the converter's dropped keys)
            out.append(f"  keys deliberately not read (training counters, recomputed buffers): {len(ignored)}")
        return out

    return checked(name, lines)


def _fit_lines(ckpt, found: dict, variant: str | None) -> list[str]:
    """Whether the folder's components fit the transformer (none when its configuration was unreadable: its own
    lines say why)."""
    tcfg = found.get(("transformer", ckpt.variant))
    if tcfg is None:
        return []
    label = "components" if ckpt.layout != ORIGINAL else f"components ({variant})"
    try:
        problems = cconvert.component_problems(ckpt, tcfg, found["vae"])
    except (ValueError, OSError) as e:  # the text encoder's unreadable configuration (its own lines say so too)
        problems = [str(e)]
    if problems:
        return [f"{label}: {MISMATCH}: {p}" for p in problems]
    return [f"{label}: fit each other (the text encoder's layers x width = the transformer's "
            f"{'crossattn_proj_in_channels' if tcfg.use_crossattn_projection else 'text_embed_dim'} "
            f"{tcfg.context_in_channels}; {tcfg.out_channels} latent channels)"]


def _tokenizer_lines(ckpt) -> list[str]:
    from vidax.encoders.qwen2_tokenizer import Qwen2Tokenizer
    from vidax.models.cosmos_predict25.layout import check_tokenizer

    check_tokenizer(ckpt)
    return [f"tokenizer: {ckpt.tokenizer} (Qwen2 tokenizer, {Qwen2Tokenizer.from_folder(ckpt.tokenizer).vocab_size} "
            "tokens)"]


def _sampler(ckpt) -> list[str]:
    """The sampler as the pipeline builds it (:func:`vidax.models.cosmos_predict25.loading.make_scheduler`)."""
    from vidax.models.cosmos_predict25.loading import make_scheduler

    try:
        sched = make_scheduler(ckpt)
    except ValueError as e:
        raise ValueError(f"{ckpt.scheduler or f'the {ckpt.variant} sampler'}: {e}") from None
    if ckpt.layout == ORIGINAL:
        label, where = f"scheduler ({ckpt.variant})", f"none in the folder: the {ckpt.variant} checkpoints' sampler"
    else:
        label, where = "scheduler", str(ckpt.scheduler)
    if sched.sigma_grid in ("cosmos", "karras"):
        grid = (f"the repository's Karras grid (sigma {sched.sigma_max:g} to {sched.sigma_min:g}, num_inference_steps "
                "+ 1 steps)" if sched.sigma_grid == "cosmos"
                else f"diffusers' Karras flow grid (sigma {sched.sigma_max:g} to {sched.sigma_min:g})")
    else:
        grid = (f"the shifted linear grid (shift {sched.flow_shift:g}, the Wan repository's)"
                if sched.sigma_grid == "wan" else f"diffusers' flow grid (shift {sched.flow_shift:g})")
    fed = {"sigmas": "sigma", "scaled_timesteps": "the truncated timestep x 0.001",
           "timesteps": "the timestep"}[sched.model_timesteps_type]
    return [f"{label}: {where} (UniPC on {grid}; the transformer given {fed})"]
