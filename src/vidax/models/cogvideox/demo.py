"""A tiny CogVideoX demo / fixture checkpoint, written without PyTorch.

``write_demo_checkpoint(folder, variant=...)`` writes a complete diffusers-layout CogVideoX
text-to-video folder (``model_index.json``, ``transformer/``, ``vae/``, ``text_encoder/``,
``tokenizer/``, ``scheduler/``) with random weights and a tiny tokenizer, in the files, tensor
names and config keys that diffusers' ``CogVideoXPipeline.save_pretrained`` writes, so diffusers
loads it too. Variants follow the released architectures at a tiny size:

``"2b"``
    fixed 3D sin-cos positions, DDIM with ``snr_shift_scale`` 3.0, VAE scaling 1.15258426;
``"5b"``
    3D RoPE, ``snr_shift_scale`` 1.0, VAE scaling 0.7;
``"1.5"``
    RoPE with the ``slice`` grid, ``patch_size_t=2`` (linear patch embedding), no patch bias,
    training grid 768 x 1360;
``"5b-i2v"``, ``"1.5-i2v"``
    the image-to-video models (``CogVideoXImageToVideoPipeline``): 32 input channels; 5B-I2V adds
    a learned position table (fixing the resolution), 1.5-I2V the ``ofs`` embedding.

The weights are random: the video is structured noise. The folder exercises the real loading
and generation path end to end; a real checkpoint works by changing only the folder.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vidax.checkpoint.demo import DIFFUSERS_VERSION
from vidax.models import t5_folder
from vidax.models.cogvideox.layout import COGVIDEOX

DEMO_MARKER = t5_folder.DEMO_MARKER
VARIANTS = ("2b", "5b", "1.5", "5b-i2v", "1.5-i2v")


def transformer_config(variant: str, text_embed_dim: int, **overrides) -> dict:
    """A tiny ``CogVideoXTransformer3DModel`` config.json in the given variant (all keys diffusers writes)."""
    v15, i2v = variant.startswith("1.5"), variant.endswith("-i2v")
    cfg = {
        "_class_name": "CogVideoXTransformer3DModel", "_diffusers_version": DIFFUSERS_VERSION,
        "activation_fn": "gelu-approximate", "attention_bias": True, "attention_head_dim": 16, "dropout": 0.0,
        "flip_sin_to_cos": True, "freq_shift": 0, "in_channels": 32 if i2v else 16, "max_text_seq_length": 226,
        "norm_elementwise_affine": True, "norm_eps": 1e-05, "num_attention_heads": 2, "num_layers": 2,
        "ofs_embed_dim": 32 if v15 and i2v else None, "out_channels": 16, "patch_bias": not v15, "patch_size": 2,
        "patch_size_t": 2 if v15 else None, "sample_frames": 81 if v15 else 49,
        "sample_height": 96 if v15 else 60, "sample_width": 170 if v15 else 90,
        "spatial_interpolation_scale": 1.875, "temporal_compression_ratio": 4, "temporal_interpolation_scale": 1.0,
        "text_embed_dim": text_embed_dim, "time_embed_dim": 32, "timestep_activation_fn": "silu",
        "use_learned_positional_embeddings": variant == "5b-i2v", "use_rotary_positional_embeddings": variant != "2b",
    }
    cfg.update(overrides)
    return cfg


def vae_config(variant: str, **overrides) -> dict:
    """A tiny ``AutoencoderKLCogVideoX`` config.json (the real 4-stage structure at 8-16 channels)."""
    cfg = {
        "_class_name": "AutoencoderKLCogVideoX", "_diffusers_version": DIFFUSERS_VERSION, "act_fn": "silu",
        "block_out_channels": [8, 16, 16, 16], "down_block_types": ["CogVideoXDownBlock3D"] * 4,
        "force_upcast": True, "in_channels": 3, "invert_scale_latents": variant.startswith("1.5"), "latent_channels": 16,
        "latents_mean": None, "latents_std": None, "layers_per_block": 1, "norm_eps": 1e-06, "norm_num_groups": 4,
        "out_channels": 3, "sample_height": 768 if variant.startswith("1.5") else 480,
        "sample_width": 1360 if variant.startswith("1.5") else 720,
        "scaling_factor": 1.15258426 if variant == "2b" else 0.7, "shift_factor": None, "temporal_compression_ratio": 4,
        "up_block_types": ["CogVideoXUpBlock3D"] * 4, "use_post_quant_conv": False, "use_quant_conv": False,
    }
    cfg.update(overrides)
    return cfg


def text_encoder_config(vocab_size: int, **overrides) -> dict:
    """A tiny transformers ``T5EncoderModel`` config.json (:func:`vidax.models.t5_folder.demo_text_encoder_config`)."""
    return t5_folder.demo_text_encoder_config(vocab_size, **overrides)


def scheduler_config(variant: str) -> dict:
    """The CogVideoX checkpoints' ``CogVideoXDDIMScheduler`` configuration (snr shift 3.0 for 2B, else 1.0)."""
    return {
        "_class_name": "CogVideoXDDIMScheduler", "_diffusers_version": DIFFUSERS_VERSION,
        "beta_end": 0.012, "beta_schedule": "scaled_linear", "beta_start": 0.00085, "clip_sample": False,
        "clip_sample_range": 1.0, "num_train_timesteps": 1000, "prediction_type": "v_prediction",
        "rescale_betas_zero_snr": True, "sample_max_value": 1.0, "set_alpha_to_one": True,
        "snr_shift_scale": 3.0 if variant == "2b" else 1.0, "steps_offset": 0, "timestep_spacing": "trailing",
        "trained_betas": None,
    }


MODEL_INDEX = {
    "_class_name": "CogVideoXPipeline", "_diffusers_version": DIFFUSERS_VERSION,
    "scheduler": ["diffusers", "CogVideoXDDIMScheduler"],
    "text_encoder": ["transformers", "T5EncoderModel"],
    "tokenizer": ["transformers", "T5Tokenizer"],
    "transformer": ["diffusers", "CogVideoXTransformer3DModel"],
    "vae": ["diffusers", "AutoencoderKLCogVideoX"],
}


def model_index(variant: str) -> dict:
    """``model_index.json``: ``CogVideoXPipeline``, or ``CogVideoXImageToVideoPipeline`` for the I2V variants."""
    name = "CogVideoXImageToVideoPipeline" if variant.endswith("-i2v") else "CogVideoXPipeline"
    return {**MODEL_INDEX, "_class_name": name}


def write_demo_checkpoint(folder: str | Path, seed: int = 0, *, variant: str = "5b",
                          transformer_overrides: dict | None = None, vae_overrides: dict | None = None,
                          text_overrides: dict | None = None) -> Path:
    """Write a tiny CogVideoX T2V checkpoint into ``folder`` (diffusers layout), without PyTorch.

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
        raise ValueError(f"unknown CogVideoX demo variant {variant!r}; choose one of {VARIANTS}")
    return t5_folder.write_demo(
        folder, COGVIDEOX, seed=seed, name=f"CogVideoX ({variant})",
        text_encoder_config=lambda vocab: text_encoder_config(vocab, **(text_overrides or {})),
        transformer_config=lambda width: transformer_config(variant, width, **(transformer_overrides or {})),
        vae_config=vae_config(variant, **(vae_overrides or {})), scheduler_config=scheduler_config(variant),
        model_index=model_index(variant))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Write a tiny random-weight CogVideoX checkpoint (diffusers layout).")
    p.add_argument("folder")
    p.add_argument("--variant", choices=VARIANTS, default="5b")
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
    print(f"{folder}: wrote CogVideoX demo checkpoint ({args.variant})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
