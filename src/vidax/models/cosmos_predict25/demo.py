"""A tiny Cosmos-Predict2.5 demo / fixture checkpoint, written without PyTorch.

``write_demo_checkpoint(folder)`` writes a complete diffusers-layout folder (``model_index.json``, ``transformer/``,
``vae/``, ``text_encoder/``, ``tokenizer/``, ``scheduler/``) with random weights, in the files, tensor names and
config keys that diffusers' ``Cosmos2_5_PredictBasePipeline.save_pretrained`` writes. The architecture is the
release's at a tiny size: the AdaLN-LoRA DiT with its condition-mask and padding-mask input channels and the
projection of every Qwen layer's concatenated hidden states; the Wan2.1 VAE (8x space, 4x time, 16 latent channels);
a Qwen2.5-VL ``Qwen2_5_VLForConditionalGeneration`` whose language model (its chat tokens, grouped-query attention,
multimodal RoPE sections) is what the pipeline reads (its vision tower config is tiny and its weights are not
written: the text path never reads them); the scheduler is the converted folders' UniPC on the Karras flow grid.

The weights are random: the video is structured noise. The folder exercises the real loading and generation path
end to end for text-, image- and video-to-world; a real checkpoint works by changing only the folder.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from vidax.checkpoint.demo import (DEMO_MARKER, DIFFUSERS_VERSION, TRANSFORMERS_VERSION, demo_marker_text,
                                   random_params, random_state_dict)
from vidax.checkpoint.writer import save_component, to_state_dict, write_json
from vidax.core import wan_vae

TEXT_WIDTH, TEXT_LAYERS = 32, 3  # the demo Qwen: 3 layers of 32 -> 96 features per token
LATENT_CHANNELS = 16  # the Wan2.1 VAE's


def transformer_config(**overrides) -> dict:
    """A tiny ``CosmosTransformer3DModel`` config.json in the Predict2.5 configuration (every key diffusers
    writes)."""
    cfg = {
        "_class_name": "CosmosTransformer3DModel", "_diffusers_version": DIFFUSERS_VERSION,
        "in_channels": LATENT_CHANNELS + 1, "out_channels": LATENT_CHANNELS, "num_attention_heads": 2,
        "attention_head_dim": 16, "num_layers": 2, "mlp_ratio": 2.0, "text_embed_dim": 32, "adaln_lora_dim": 8,
        "max_size": [128, 240, 240], "patch_size": [1, 2, 2], "rope_scale": [1.0, 3.0, 3.0],
        "concat_padding_mask": True, "extra_pos_embed_type": None, "use_crossattn_projection": True,
        "crossattn_proj_in_channels": TEXT_LAYERS * TEXT_WIDTH, "encoder_hidden_states_channels": 32,
        "controlnet_block_every_n": None, "img_context_dim_in": None, "img_context_num_tokens": 256,
        "img_context_dim_out": 2048,
    }
    cfg.update(overrides)
    return cfg


def vae_config(**overrides) -> dict:
    """A tiny ``AutoencoderKLWan`` config.json (the Wan2.1 structure at 16 base channels, its latent statistics)."""
    base = wan_vae.WanVAEConfig()
    cfg = {
        "_class_name": "AutoencoderKLWan", "_diffusers_version": DIFFUSERS_VERSION,
        "attn_scales": [], "base_dim": 16, "decoder_base_dim": None, "dim_mult": [1, 2, 4, 4], "dropout": 0.0,
        "in_channels": 3, "is_residual": False, "latents_mean": list(base.latents_mean),
        "latents_std": list(base.latents_std), "num_res_blocks": 1, "out_channels": 3, "patch_size": None,
        "scale_factor_spatial": 8, "scale_factor_temporal": 4, "temperal_downsample": [False, True, True],
        "z_dim": LATENT_CHANNELS,
    }
    cfg.update(overrides)
    return cfg


def scheduler_config() -> dict:
    """diffusers' ``UniPCMultistepScheduler`` as ``scripts/convert_cosmos_to_diffusers.py`` configures it."""
    return {"_class_name": "UniPCMultistepScheduler", "_diffusers_version": DIFFUSERS_VERSION,
            "num_train_timesteps": 1000, "beta_start": 0.0001, "beta_end": 0.02, "beta_schedule": "linear",
            "trained_betas": None, "solver_order": 2, "prediction_type": "flow_prediction", "thresholding": False,
            "dynamic_thresholding_ratio": 0.995, "sample_max_value": 1.0, "predict_x0": True, "solver_type": "bh2",
            "lower_order_final": True, "disable_corrector": [], "solver_p": None, "use_karras_sigmas": True,
            "use_exponential_sigmas": False, "use_beta_sigmas": False, "use_flow_sigmas": True, "flow_shift": 1.0,
            "timestep_spacing": "linspace", "steps_offset": 0, "final_sigmas_type": "zero",
            "rescale_betas_zero_snr": False, "use_dynamic_shifting": False, "time_shift_type": "exponential",
            "sigma_min": 0.01, "sigma_max": 200.0, "shift_terminal": None}


def _corpus() -> list[str]:
    from vidax.models.cosmos_predict25.text import SYSTEM_PROMPT

    words = ("a majestic red panda climbing a bamboo tree in the snow robot arm welds a metal frame sparks fly "
             "the camera follows a car on a wet road at night").split()
    return [" ".join(words[i:i + 6]) for i in range(0, len(words), 3)] + [SYSTEM_PROMPT] * 4


def write_text_encoder(folder: Path, rng: np.random.Generator, overrides: dict | None = None) -> None:
    """``tokenizer/`` (Qwen2 BPE with the Qwen2.5-VL special tokens and chat template) and ``text_encoder/``
    (``Qwen2_5_VLForConditionalGeneration``: the language model under transformers 5's ``model.language_model.``
    names and the LM head; the vision tower's config only)."""
    from vidax.encoders import llama
    from vidax.encoders.qwen2_5_vl import config_from_dict
    from vidax.encoders.qwen2_tokenizer import Qwen2Tokenizer, write_qwen2_tokenizer

    tok = Qwen2Tokenizer.from_folder(write_qwen2_tokenizer(folder / "tokenizer", _corpus(), num_merges=400))
    text = {"model_type": "qwen2_5_vl_text", "vocab_size": tok.vocab_size, "hidden_size": TEXT_WIDTH,
            "intermediate_size": 2 * TEXT_WIDTH, "num_hidden_layers": TEXT_LAYERS, "num_attention_heads": 4,
            "num_key_value_heads": 2, "hidden_act": "silu", "rms_norm_eps": 1e-6, "max_position_embeddings": 2048,
            "rope_scaling": {"type": "mrope", "mrope_section": [2, 1, 1]}, "rope_theta": 1000000.0,
            "use_sliding_window": False, "attention_dropout": 0.0, **(overrides or {})}
    config = {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
              "text_config": text,
              "vision_config": {"model_type": "qwen2_5_vl", "depth": 1, "hidden_size": 16, "intermediate_size": 32,
                                "num_heads": 2, "out_hidden_size": text["hidden_size"], "patch_size": 14,
                                "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 112,
                                "fullatt_block_indexes": [0], "in_chans": 3},
              "image_token_id": tok.token_to_id("<|image_pad|>"), "video_token_id": tok.token_to_id("<|video_pad|>"),
              "vision_start_token_id": tok.token_to_id("<|vision_start|>"),
              "vision_end_token_id": tok.token_to_id("<|vision_end|>"),
              "bos_token_id": tok.token_to_id("<|endoftext|>"), "eos_token_id": tok.token_to_id("<|im_end|>"),
              "tie_word_embeddings": False, "torch_dtype": "float32", "transformers_version": TRANSFORMERS_VERSION}
    cfg = config_from_dict(config)
    weights = random_state_dict(llama.llama_keymap(cfg), llama.llama_specs(cfg), rng)
    weights = {f"model.language_model.{k}": v for k, v in weights.items()}
    weights["lm_head.weight"] = (0.02 * rng.standard_normal((tok.vocab_size, text["hidden_size"]))).astype(np.float32)
    save_component(folder / "text_encoder", "model.safetensors", weights, config)


def write_transformer(folder: Path, config: dict, rng: np.random.Generator) -> None:
    """``transformer/``: random weights in the diffusers names."""
    from vidax.models.cosmos_predict25.config import CosmosTransformerConfig
    from vidax.models.cosmos_predict25.keymap import transformer_keymap
    from vidax.models.cosmos_predict25.transformer import transformer_specs

    cfg = CosmosTransformerConfig.from_dict(config)
    specs = transformer_specs(cfg)
    save_component(folder / "transformer", "diffusion_pytorch_model.safetensors",
                   to_state_dict(random_params(specs, rng), transformer_keymap(cfg), specs), config)


def write_vae(folder: Path, config: dict, rng: np.random.Generator) -> None:
    cfg = wan_vae.WanVAEConfig.from_dict(config)
    save_component(folder / "vae", "diffusion_pytorch_model.safetensors",
                   random_state_dict(wan_vae.vae_keymap(cfg), wan_vae.vae_specs(cfg), rng), config)


def write_demo_checkpoint(folder: str | Path, *, seed: int = 0, transformer_overrides: dict | None = None,
                          text_overrides: dict | None = None) -> Path:
    """Write a tiny random-weight Cosmos-Predict2.5 folder (see the module docstring).

    Args:
      folder: the folder to create (must not exist, or be empty).
      seed: the weights' random seed.
      transformer_overrides: config.json values replacing the tiny defaults (tests, benchmarks).
      text_overrides: the Qwen language model's config values replacing the tiny defaults (its width and layer
        count set the transformer's ``crossattn_proj_in_channels``).

    Returns:
      the folder.

    Raises:
      FileExistsError: a non-empty folder.
    """
    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()):
        raise FileExistsError(f"{folder} exists and is not empty; pass a new folder")
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    write_text_encoder(folder, rng, text_overrides)
    text = {"hidden_size": TEXT_WIDTH, "num_hidden_layers": TEXT_LAYERS, **(text_overrides or {})}
    tcfg = transformer_config(crossattn_proj_in_channels=text["hidden_size"] * text["num_hidden_layers"],
                              **(transformer_overrides or {}))
    write_transformer(folder, tcfg, rng)
    write_vae(folder, vae_config(), rng)
    (folder / "scheduler").mkdir()
    write_json(folder / "scheduler" / "scheduler_config.json", scheduler_config())
    write_json(folder / "model_index.json", {
        "_class_name": "Cosmos2_5_PredictBasePipeline", "_diffusers_version": DIFFUSERS_VERSION,
        "safety_checker": [None, None],
        "scheduler": ["diffusers", "UniPCMultistepScheduler"],
        "text_encoder": ["transformers", "Qwen2_5_VLForConditionalGeneration"],
        "tokenizer": ["transformers", "Qwen2Tokenizer"],
        "transformer": ["diffusers", "CosmosTransformer3DModel"],
        "vae": ["diffusers", "AutoencoderKLWan"]})
    (folder / DEMO_MARKER).write_text(demo_marker_text("Cosmos-Predict2.5"))
    return folder


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Write a tiny random-weight Cosmos-Predict2.5 checkpoint (no PyTorch).")
    p.add_argument("folder")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    print(write_demo_checkpoint(args.folder, seed=args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
