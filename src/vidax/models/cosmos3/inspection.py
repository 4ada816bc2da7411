"""``vidax inspect`` for Cosmos3 folders: the model, its layout, and per component what the files hold.

Headers and configuration files only: no tensor data is read.
"""

from __future__ import annotations

import os
from pathlib import Path

from vidax.checkpoint.inspect import MISMATCH, checked, component_lines
from vidax.models.cosmos3 import convert as cconvert
from vidax.models.cosmos3.layout import PIPELINE_CLASS, resolve_checkpoint

_WHAT = "Cosmos3 text- and image-to-video"


def transformer_summary(cfg) -> str:
    """One line: depth, heads, widths, MLP, activation and norms, patch, channels, vocabulary, RoPE."""
    variant = ("Edge-style: squared-ReLU MLP, Nemotron norms" if cfg.hidden_act == "relu2"
               else "Nano-style: SiLU-gated MLP")
    norms = (f"text q/k norms {'on' if cfg.qk_norm_for_text else 'off'}, generation-path key norm "
             f"{'on' if cfg.use_und_k_norm_for_gen else 'off'}")
    return (f"{cfg.num_hidden_layers} layers x 2 streams, {cfg.num_attention_heads} heads ({cfg.num_key_value_heads} "
            f"key/value) x {cfg.head_dim}, width {cfg.hidden_size}, MLP {cfg.intermediate_size} ({variant}; {norms}), "
            f"patch {cfg.latent_patch_size} over {cfg.latent_channel} latent channels, vocabulary {cfg.vocab_size}, "
            f"mRoPE theta {cfg.rope_theta:g}")


def _component(name, reader, keymap, specs, source, summary) -> list[str]:
    lines = component_lines(name, reader, keymap, specs, source)
    return lines[:1] + [f"  config: {summary}"] + lines[1:]


def inspect_checkpoint(path: str | os.PathLike) -> list[str]:
    """Describe a Cosmos3 checkpoint folder, reading headers only.

    Returns:
      report lines: the pipeline and layout and its settings; per component (transformer, VAE) its configuration,
      tensors, parameter count, dtypes, unknown keys and whether the maps fill the model exactly; the components'
      fit; the tokenizer; the sampler. A line holding :data:`vidax.checkpoint.inspect.MISMATCH` marks what would
      stop loading.

    Raises:
      CheckpointError: see :func:`vidax.models.cosmos3.layout.resolve_checkpoint`.
    """
    ckpt = resolve_checkpoint(path)
    grid = 'native flow grid' if ckpt.use_native_flow_schedule else 'the scheduler config grid'
    if ckpt.is_distilled:
        grid = f"distilled: {len(ckpt.distilled_sigmas)} fixed steps, guidance baked in"
    lines = [f"{Path(path)}: {_WHAT} ({PIPELINE_CLASS}), {ckpt.layout} layout; system prompt "
             f"{'on' if ckpt.default_use_system_prompt else 'off'} by default, {grid}"]
    found = {}

    def transformer_lines():
        cfg, reader, keymap, specs, layout = cconvert.transformer_source(ckpt)
        found["transformer"] = cfg
        return _component(f"transformer ({layout} names)", reader, keymap, specs, str(ckpt.transformer),
                          transformer_summary(cfg))

    def vae_lines():
        cfg, reader, keymap, specs = cconvert.vae_source(ckpt)
        found["vae"] = cfg
        return _component("vae", reader, keymap, specs, str(ckpt.vae),
                          f"Wan2.2 VAE, {cfg.z_dim} latent channels, {cfg.spatial_compression}x space, "
                          f"{cfg.temporal_compression}x time")

    def tokenizer_lines():
        from vidax.models.cosmos3.loading import load_tokenizer

        tok = load_tokenizer(ckpt)
        found["tokenizer"] = tok
        return [f"tokenizer: {ckpt.text_tokenizer} (Qwen3-VL tokenizer, {tok.tokenizer.vocab_size} tokens)"]

    def fit_lines():
        from vidax.models.cosmos3.loading import check_components

        if "transformer" not in found or "vae" not in found:
            return []
        check_components(ckpt, found["transformer"], found["vae"], found.get("tokenizer"))
        return [f"components: fit each other ({found['vae'].z_dim} latent channels)"]

    def sampler_lines():
        from vidax.models.cosmos3.loading import make_scheduler

        s = make_scheduler(ckpt)
        if ckpt.is_distilled:
            sigmas = ", ".join(f"{v:g}" for v in ckpt.distilled_sigmas)
            kind = "stochastic flow Euler" if s.stochastic_sampling else "flow Euler"
            return [f"scheduler: {ckpt.scheduler} ({kind} on the distilled sigmas {sigmas}, shift {s.flow_shift:g})"]
        if s.sigma_grid == "karras":
            grid = f"the Karras flow grid (sigma {s.sigma_max:g} to {s.sigma_min:g})"
        elif s.sigma_grid == "native":
            grid = f"the native flow grid (shift {s.flow_shift:g})"
        else:
            grid = f"diffusers' flow grid (shift {s.flow_shift:g})"
        return [f"scheduler: {ckpt.scheduler} (UniPC on {grid}; the transformer given the timestep)"]

    lines += checked("transformer", transformer_lines)
    lines += checked("vae", vae_lines)
    lines += checked("tokenizer", tokenizer_lines)
    try:
        lines += fit_lines()
    except Exception as e:  # CheckpointError: the components belong to different models
        lines.append(f"components: {MISMATCH}: {e}")
    lines += checked("scheduler", sampler_lines)
    return lines
