"""A tiny HunyuanVideo demo / fixture checkpoint, written without PyTorch.

``write_demo_checkpoint(folder, task=...)`` writes a complete diffusers-layout folder (``model_index.json``,
``transformer/``, ``vae/``, ``text_encoder/``, ``tokenizer/``, ``text_encoder_2/``, ``tokenizer_2/``,
``scheduler/``, and for image-to-video ``image_processor/``) with random weights, in the files, tensor names and
config keys that diffusers' ``HunyuanVideoPipeline`` / ``HunyuanVideoImageToVideoPipeline.save_pretrained`` write,
so diffusers loads it too. The architecture is the 13B release's at a tiny size: dual-stream then single-stream
blocks, a token refiner, 3D RoPE over (frame, row, column), guidance embedding; the VAE has the release's four
stages (8x space, 4x time); the text side is a Llama-3-style decoder and a CLIP text tower (I2V: a LLaVA with a
small vision tower). Image-to-video variants: ``"latent_concat"`` (the first HunyuanVideo-I2V release: 33 input
channels) and ``"token_replace"`` (the later one: 16, the first latent frame replaced).

The weights are random: the video is structured noise. The folder exercises the real loading and generation path
end to end; a real checkpoint works by changing only the folder.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from vidax.checkpoint.demo import DEMO_MARKER, DIFFUSERS_VERSION, demo_marker_text, random_params
from vidax.checkpoint.writer import save_component, to_state_dict, write_json

TEXT_WIDTH = 32  # the demo Llama's and CLIP's widths (the transformer's text_embed_dim / pooled_projection_dim)
I2V_VARIANTS = ("latent_concat", "token_replace")


def transformer_config(task: str = "t2v", variant: str = "latent_concat", **overrides) -> dict:
    """A tiny ``HunyuanVideoTransformer3DModel`` config.json (every key diffusers writes)."""
    concat = task == "i2v" and variant == "latent_concat"
    cfg = {
        "_class_name": "HunyuanVideoTransformer3DModel", "_diffusers_version": DIFFUSERS_VERSION,
        "in_channels": 33 if concat else 16, "out_channels": 16, "num_attention_heads": 2,
        "attention_head_dim": 16, "num_layers": 2, "num_single_layers": 2, "num_refiner_layers": 1,
        "mlp_ratio": 4.0, "patch_size": 2, "patch_size_t": 1, "qk_norm": "rms_norm",
        "guidance_embeds": task == "t2v" or variant == "token_replace", "text_embed_dim": TEXT_WIDTH,
        "pooled_projection_dim": TEXT_WIDTH, "rope_theta": 256.0, "rope_axes_dim": [4, 6, 6],
        "image_condition_type": variant if task == "i2v" else None,
    }
    cfg.update(overrides)
    return cfg


def vae_config(**overrides) -> dict:
    """A tiny ``AutoencoderKLHunyuanVideo`` config.json (the release's four stages at 8-16 channels)."""
    cfg = {
        "_class_name": "AutoencoderKLHunyuanVideo", "_diffusers_version": DIFFUSERS_VERSION,
        "in_channels": 3, "out_channels": 3, "latent_channels": 16,
        "down_block_types": ["HunyuanVideoDownBlock3D"] * 4, "up_block_types": ["HunyuanVideoUpBlock3D"] * 4,
        "block_out_channels": [8, 8, 16, 16], "layers_per_block": 1, "act_fn": "silu", "norm_num_groups": 4,
        "scaling_factor": 0.476986, "spatial_compression_ratio": 8, "temporal_compression_ratio": 4,
        "mid_block_add_attention": True,
    }
    cfg.update(overrides)
    return cfg


SCHEDULER_CONFIG = {"_class_name": "FlowMatchEulerDiscreteScheduler", "_diffusers_version": DIFFUSERS_VERSION,
                    "num_train_timesteps": 1000, "shift": 7.0, "use_dynamic_shifting": False,
                    "base_shift": 0.5, "max_shift": 1.15, "base_image_seq_len": 256, "max_image_seq_len": 4096,
                    "invert_sigmas": False, "shift_terminal": None, "use_karras_sigmas": False,
                    "use_exponential_sigmas": False, "use_beta_sigmas": False, "time_shift_type": "exponential",
                    "stochastic_sampling": False}


def write_transformer(folder: Path, config: dict, rng: np.random.Generator) -> None:
    """``transformer/``: random weights in the diffusers names (the split projections merged back by the views)."""
    from vidax.models.hunyuanvideo.config import HunyuanVideoTransformerConfig
    from vidax.models.hunyuanvideo.keymap import transformer_keymap, transformer_views
    from vidax.models.hunyuanvideo.transformer import transformer_specs

    cfg = HunyuanVideoTransformerConfig.from_dict(config)
    specs = transformer_specs(cfg)
    ours = to_state_dict(random_params(specs, rng), transformer_keymap(cfg), specs)
    save_component(folder / "transformer", "diffusion_pytorch_model.safetensors",
                   transformer_views(cfg).merge(ours, {}), config)


def write_vae(folder: Path, config: dict, rng: np.random.Generator) -> None:
    from vidax.checkpoint.demo import random_state_dict
    from vidax.models.hunyuanvideo.vae import HunyuanVideoVAEConfig, vae_keymap, vae_specs

    cfg = HunyuanVideoVAEConfig.from_dict(config)
    save_component(folder / "vae", "diffusion_pytorch_model.safetensors",
                   random_state_dict(vae_keymap(cfg), vae_specs(cfg), rng), config)


def write_demo_checkpoint(folder: str | Path, *, task: str = "t2v", variant: str = "latent_concat", seed: int = 0,
                          transformer_overrides: dict | None = None) -> Path:
    """Write a tiny random-weight HunyuanVideo folder (see the module docstring).

    Args:
      folder: the folder to create (must not exist, or be empty).
      task: ``"t2v"`` (``HunyuanVideoPipeline``) or ``"i2v"`` (``HunyuanVideoImageToVideoPipeline``).
      variant: image-to-video: ``"latent_concat"`` or ``"token_replace"``.
      seed: the weights' random seed.
      transformer_overrides: config.json values replacing the tiny defaults (tests).

    Returns:
      the folder.

    Raises:
      ValueError: an unknown task or variant. FileExistsError: a non-empty folder.
    """
    from vidax.models.hunyuanvideo.text import write_demo_text_encoders

    if task not in ("t2v", "i2v"):
        raise ValueError(f"task must be 't2v' or 'i2v', got {task!r}")
    if variant not in I2V_VARIANTS:
        raise ValueError(f"variant must be one of {I2V_VARIANTS}, got {variant!r}")
    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()):
        raise FileExistsError(f"{folder} exists and is not empty; pass a new folder")
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    i2v = task == "i2v"
    write_demo_text_encoders(folder, rng, image=i2v, hidden_size=TEXT_WIDTH, clip_hidden_size=TEXT_WIDTH)
    write_transformer(folder, transformer_config(task, variant, **(transformer_overrides or {})), rng)
    write_vae(folder, vae_config(), rng)
    (folder / "scheduler").mkdir()
    write_json(folder / "scheduler" / "scheduler_config.json", SCHEDULER_CONFIG)
    index = {"_class_name": "HunyuanVideoImageToVideoPipeline" if i2v else "HunyuanVideoPipeline",
             "_diffusers_version": DIFFUSERS_VERSION,
             "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
             "text_encoder": ["transformers", "LlavaForConditionalGeneration" if i2v else "LlamaModel"],
             "text_encoder_2": ["transformers", "CLIPTextModel"],
             "tokenizer": ["transformers", "PreTrainedTokenizerFast"],
             "tokenizer_2": ["transformers", "CLIPTokenizer"],
             "transformer": ["diffusers", "HunyuanVideoTransformer3DModel"],
             "vae": ["diffusers", "AutoencoderKLHunyuanVideo"]}
    if i2v:
        index["image_processor"] = ["transformers", "CLIPImageProcessor"]
    write_json(folder / "model_index.json", index)
    (folder / DEMO_MARKER).write_text(demo_marker_text(f"HunyuanVideo {task.upper()}"))
    return folder


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Write a tiny random-weight HunyuanVideo checkpoint (no PyTorch).")
    p.add_argument("folder")
    p.add_argument("--task", choices=("t2v", "i2v"), default="t2v")
    p.add_argument("--variant", choices=I2V_VARIANTS, default="latent_concat")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    print(write_demo_checkpoint(args.folder, task=args.task, variant=args.variant, seed=args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
