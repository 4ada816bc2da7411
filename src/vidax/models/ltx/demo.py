"""A tiny LTX-Video demo / fixture checkpoint, written without PyTorch.

``write_demo_checkpoint(folder, variant=...)`` writes a complete diffusers-layout LTX-Video text-to-video
folder (``model_index.json``, ``transformer/``, ``vae/``, ``text_encoder/``, ``tokenizer/``, ``scheduler/``)
with random weights and a tiny tokenizer, in the files, tensor names and config keys that diffusers'
``save_pretrained`` writes, so diffusers loads it too. Variants follow the released architectures at a
tiny size:

``"0.9.1"``
    ``LTXPipeline``; the 0.9.0 - 0.9.1 VAE (``LTXVideoDownBlock3D``, 4x4 patches, 3 space-time stages)
    with decoder timestep conditioning; the dynamically shifted scheduler (``shift_terminal`` 0.1);
``"0.9.8"``
    ``LTXConditionPipeline``; the 0.9.5+ VAE (``LTXVideo095DownBlock3D`` with spatial / temporal /
    spatiotemporal downsampling, residual 2x upsampling, timestep conditioning); a scheduler without
    dynamic shifting (the condition pipeline passes its own timesteps).

Both compress 32x in space and 8x in time, as every release. The weights are random: the video is
structured noise. The folder exercises the real loading and generation path end to end.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from vidax.checkpoint.demo import DIFFUSERS_VERSION
from vidax.models import t5_folder
from vidax.models.ltx.layout import LTX

DEMO_MARKER = t5_folder.DEMO_MARKER
VARIANTS = ("0.9.1", "0.9.8")
LATENT_CHANNELS = 16


def transformer_config(caption_channels: int, **overrides) -> dict:
    """A tiny ``LTXVideoTransformer3DModel`` config.json (every key diffusers writes)."""
    cfg = {
        "_class_name": "LTXVideoTransformer3DModel", "_diffusers_version": DIFFUSERS_VERSION,
        "activation_fn": "gelu-approximate", "attention_bias": True, "attention_head_dim": 8,
        "attention_out_bias": True, "caption_channels": caption_channels, "cross_attention_dim": 16,
        "in_channels": LATENT_CHANNELS, "norm_elementwise_affine": False, "norm_eps": 1e-06, "num_attention_heads": 2,
        "num_layers": 2, "out_channels": LATENT_CHANNELS, "patch_size": 1, "patch_size_t": 1,
        "qk_norm": "rms_norm_across_heads",
    }
    cfg.update(overrides)
    return cfg


def vae_config(variant: str, **overrides) -> dict:
    """A tiny ``AutoencoderKLLTXVideo`` config.json with the release's structure at 8-32 channels."""
    base = {
        "_class_name": "AutoencoderKLLTXVideo", "_diffusers_version": DIFFUSERS_VERSION, "in_channels": 3,
        "out_channels": 3, "latent_channels": LATENT_CHANNELS, "patch_size": 4, "patch_size_t": 1,
        "resnet_norm_eps": 1e-06, "scaling_factor": 1.0, "encoder_causal": True, "decoder_causal": False,
        "spatial_compression_ratio": None, "temporal_compression_ratio": None, "timestep_conditioning": True,
    }
    if variant == "0.9.1":
        base.update({
            "block_out_channels": [8, 16, 16, 16], "decoder_block_out_channels": [8, 16, 32],
            "down_block_types": ["LTXVideoDownBlock3D"] * 4, "layers_per_block": [1, 1, 1, 1, 1],
            "decoder_layers_per_block": [1, 1, 1, 1], "spatio_temporal_scaling": [True, True, True, False],
            "decoder_spatio_temporal_scaling": [True, True, True], "decoder_inject_noise": [True, True, True, False],
            "downsample_type": ["conv"] * 4, "upsample_residual": [True, True, True], "upsample_factor": [2, 2, 2],
        })
    else:
        base.update({
            "block_out_channels": [8, 16, 16, 32, 32], "decoder_block_out_channels": [8, 16, 32],
            "down_block_types": ["LTXVideo095DownBlock3D"] * 4, "layers_per_block": [1, 1, 1, 1, 1],
            "decoder_layers_per_block": [1, 1, 1, 1], "spatio_temporal_scaling": [True, True, True, True],
            "decoder_spatio_temporal_scaling": [True, True, True], "decoder_inject_noise": [False] * 4,
            "downsample_type": ["spatial", "temporal", "spatiotemporal", "spatiotemporal"],
            "upsample_residual": [True, True, True], "upsample_factor": [2, 2, 2],
            "spatial_compression_ratio": 32, "temporal_compression_ratio": 8,
        })
    base.update(overrides)
    return base


def scheduler_config(variant: str) -> dict:
    """The LTX-Video checkpoints' ``FlowMatchEulerDiscreteScheduler`` configuration."""
    return {
        "_class_name": "FlowMatchEulerDiscreteScheduler", "_diffusers_version": DIFFUSERS_VERSION,
        "base_image_seq_len": 1024, "base_shift": 0.95, "invert_sigmas": False, "max_image_seq_len": 4096,
        "max_shift": 2.05, "num_train_timesteps": 1000, "shift": 1.0,
        "shift_terminal": 0.1 if variant == "0.9.1" else None, "use_beta_sigmas": False,
        "use_dynamic_shifting": variant == "0.9.1", "use_exponential_sigmas": False, "use_karras_sigmas": False,
    }


def model_index(variant: str) -> dict:
    """``model_index.json``: ``LTXPipeline`` (0.9.1) or ``LTXConditionPipeline`` (0.9.8)."""
    return {
        "_class_name": "LTXPipeline" if variant == "0.9.1" else "LTXConditionPipeline",
        "_diffusers_version": DIFFUSERS_VERSION,
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "text_encoder": ["transformers", "T5EncoderModel"],
        "tokenizer": ["transformers", "T5Tokenizer"],
        "transformer": ["diffusers", "LTXVideoTransformer3DModel"],
        "vae": ["diffusers", "AutoencoderKLLTXVideo"],
    }


def write_demo_checkpoint(folder: str | Path, seed: int = 0, *, variant: str = "0.9.8",
                          transformer_overrides: dict | None = None, vae_overrides: dict | None = None,
                          text_overrides: dict | None = None) -> Path:
    """Write a tiny LTX-Video T2V checkpoint into ``folder`` (diffusers layout), without PyTorch.

    Assembled under a temporary name beside ``folder`` and renamed into place when complete.

    Args:
      folder: target folder; must not exist yet.
      seed: seed of the random weights.
      variant: one of :data:`VARIANTS` (see the module docstring).
      *_overrides: config.json overrides per component.

    Returns:
      ``folder``.

    Raises:
      FileExistsError: ``folder`` exists. ValueError: an unknown variant.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown LTX-Video demo variant {variant!r}; choose one of {VARIANTS}")

    def vae_tensors(vae: dict, rng: np.random.Generator) -> None:
        # Latent statistics spread around 0 and 1 (denormalisation exercised); the reference's time multiplier
        # (random weights would drown the decode timestep).
        channels = vae["latents_mean"].shape[0]  # LATENT_CHANNELS unless latent_channels is overridden
        vae["latents_mean"] = (0.1 * rng.standard_normal(channels)).astype(np.float32)
        vae["latents_std"] = (1.0 + 0.2 * rng.random(channels)).astype(np.float32)
        if "decoder.timestep_scale_multiplier" in vae:
            vae["decoder.timestep_scale_multiplier"] = np.array(1000.0, np.float32)

    return t5_folder.write_demo(
        folder, LTX, seed=seed, name=f"LTX-Video ({variant})",
        text_encoder_config=lambda vocab: t5_folder.demo_text_encoder_config(vocab, **(text_overrides or {})),
        transformer_config=lambda width: transformer_config(width, **(transformer_overrides or {})),
        vae_config=vae_config(variant, **(vae_overrides or {})), scheduler_config=scheduler_config(variant),
        model_index=model_index(variant), vae_tensors=vae_tensors)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Write a tiny random-weight LTX-Video checkpoint (diffusers layout).")
    p.add_argument("folder")
    p.add_argument("--variant", choices=VARIANTS, default="0.9.8")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--if-absent", action="store_true", help="do nothing if the folder already holds a checkpoint")
    args = p.parse_args(argv)
    folder = Path(args.folder)
    if args.if_absent and (folder / "model_index.json").is_file():
        print(f"{folder}: demo checkpoint present")
        return 0
    try:
        write_demo_checkpoint(folder, seed=args.seed, variant=args.variant)
    except FileExistsError as e:
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return 2
    print(f"{folder}: wrote LTX-Video demo checkpoint ({args.variant})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
