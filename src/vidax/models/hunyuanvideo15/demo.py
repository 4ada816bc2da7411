"""A tiny HunyuanVideo-1.5 demo / fixture checkpoint, written without PyTorch.

``write_demo_checkpoint(folder, task=...)`` writes a complete diffusers-layout folder (``model_index.json``,
``transformer/``, ``vae/``, ``text_encoder/``, ``tokenizer/``, ``text_encoder_2/``, ``tokenizer_2/``, ``scheduler/``,
``guider/``, and for image-to-video ``image_encoder/`` and ``feature_extractor/``) with random weights, in the files,
tensor names and config keys that diffusers' ``HunyuanVideo15Pipeline`` / ``HunyuanVideo15ImageToVideoPipeline``
``save_pretrained`` write, so diffusers loads it too. The architecture is the 8.3B release's at a tiny size:
dual-stream blocks with a token refiner, byT5 and image projections, 3D RoPE; the VAE has the release's five stages
(16x space, 4x time); the text side is a Qwen2.5-VL language model (its chat tokens, grouped-query attention,
multimodal RoPE sections) and a byT5 encoder; image-to-video adds a SigLIP tower.

The weights are random: the video is structured noise. The folder exercises the real loading and generation path
end to end; a real checkpoint works by changing only the folder.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from vidax.checkpoint.demo import (DEMO_MARKER, DIFFUSERS_VERSION, TRANSFORMERS_VERSION, demo_marker_text,
                                   random_params, random_state_dict)
from vidax.checkpoint.writer import save_component, to_state_dict, write_json

TEXT_WIDTH, GLYPH_WIDTH, IMAGE_WIDTH = 32, 24, 16  # the demo Qwen's, byT5's and SigLIP's widths
LATENT_CHANNELS = 4
IMAGE_SIZE, PATCH_SIZE = 28, 7  # the demo SigLIP: 16 image tokens


def transformer_config(task: str = "t2v", **overrides) -> dict:
    """A tiny ``HunyuanVideo15Transformer3DModel`` config.json (every key diffusers writes)."""
    cfg = {
        "_class_name": "HunyuanVideo15Transformer3DModel", "_diffusers_version": DIFFUSERS_VERSION,
        "in_channels": 2 * LATENT_CHANNELS + 1, "out_channels": LATENT_CHANNELS, "num_attention_heads": 2,
        "attention_head_dim": 16, "num_layers": 2, "num_refiner_layers": 1, "mlp_ratio": 4.0, "patch_size": 1,
        "patch_size_t": 1, "qk_norm": "rms_norm", "text_embed_dim": TEXT_WIDTH, "text_embed_2_dim": GLYPH_WIDTH,
        "image_embed_dim": IMAGE_WIDTH, "rope_theta": 256.0, "rope_axes_dim": [4, 6, 6], "target_size": 64,
        "task_type": task, "use_meanflow": False,
    }
    cfg.update(overrides)
    return cfg


def vae_config(**overrides) -> dict:
    """A tiny ``AutoencoderKLHunyuanVideo15`` config.json (the release's five stages at 8-16 channels)."""
    cfg = {
        "_class_name": "AutoencoderKLHunyuanVideo15", "_diffusers_version": DIFFUSERS_VERSION,
        "in_channels": 3, "out_channels": 3, "latent_channels": LATENT_CHANNELS,
        "block_out_channels": [8, 8, 16, 16, 16], "layers_per_block": 1, "spatial_compression_ratio": 16,
        "temporal_compression_ratio": 4, "downsample_match_channel": True, "upsample_match_channel": True,
        "scaling_factor": 1.03682,
    }
    cfg.update(overrides)
    return cfg


def scheduler_config(shift: float = 5.0) -> dict:
    """diffusers' ``FlowMatchEulerDiscreteScheduler(shift=...)`` config (what the converter writes)."""
    return {"_class_name": "FlowMatchEulerDiscreteScheduler", "_diffusers_version": DIFFUSERS_VERSION,
            "num_train_timesteps": 1000, "shift": shift, "use_dynamic_shifting": False, "base_shift": 0.5,
            "max_shift": 1.15, "base_image_seq_len": 256, "max_image_seq_len": 4096, "invert_sigmas": False,
            "shift_terminal": None, "use_karras_sigmas": False, "use_exponential_sigmas": False,
            "use_beta_sigmas": False, "time_shift_type": "exponential", "stochastic_sampling": False}


def guider_config(guidance_scale: float = 6.0) -> dict:
    """diffusers' ``ClassifierFreeGuidance(guidance_scale=...)`` config."""
    return {"_class_name": "ClassifierFreeGuidance", "_diffusers_version": DIFFUSERS_VERSION,
            "guidance_scale": guidance_scale, "guidance_rescale": 0.0, "use_original_formulation": False,
            "start": 0.0, "stop": 1.0, "enabled": True}


def _corpus() -> list[str]:
    words = ("a majestic red panda climbing a bamboo tree in the snow cat walks on the grass realistic style "
             "camera slowly pans over city at night neon sign says open the video shows a dog").split()
    from vidax.models.hunyuanvideo15.text import SYSTEM_MESSAGE

    # The system message in the corpus: the template then takes a few dozen tokens, as the real one takes 108.
    return [" ".join(words[i:i + 6]) for i in range(0, len(words), 3)] + [SYSTEM_MESSAGE] * 4


def write_text_encoders(folder: Path, rng: np.random.Generator, qwen_overrides: dict | None = None,
                        t5_overrides: dict | None = None) -> None:
    """``tokenizer/`` (Qwen2 BPE with the Qwen2.5-VL special tokens), ``text_encoder/`` (``Qwen2_5_VLTextModel``),
    ``tokenizer_2/`` (``ByT5Tokenizer``), ``text_encoder_2/`` (``T5EncoderModel``, byT5-shaped); the overrides replace
    config.json values of the two encoders (e.g. the release's widths, 3584 and 1472, for benchmarks)."""
    from vidax.encoders import llama
    from vidax.encoders.qwen2_5_vl import config_from_dict
    from vidax.encoders.qwen2_tokenizer import Qwen2Tokenizer, write_qwen2_tokenizer
    from vidax.encoders.t5 import T5Config, t5_keymap, t5_specs

    tok = Qwen2Tokenizer.from_folder(write_qwen2_tokenizer(folder / "tokenizer", _corpus(), num_merges=400))
    qwen = {"architectures": ["Qwen2_5_VLTextModel"], "model_type": "qwen2_5_vl_text", "vocab_size": tok.vocab_size,
            "hidden_size": TEXT_WIDTH, "intermediate_size": 2 * TEXT_WIDTH, "num_hidden_layers": 4,
            "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_act": "silu", "rms_norm_eps": 1e-6,
            "max_position_embeddings": 2048, "rope_scaling": {"type": "mrope", "mrope_section": [2, 1, 1]},
            "rope_theta": 1000000.0, "use_sliding_window": False, "attention_dropout": 0.0, "torch_dtype": "float32",
            "bos_token_id": tok.token_to_id("<|endoftext|>"), "eos_token_id": tok.token_to_id("<|im_end|>"),
            "transformers_version": TRANSFORMERS_VERSION, **(qwen_overrides or {})}
    cfg = config_from_dict(qwen)
    save_component(folder / "text_encoder", "model.safetensors",
                   random_state_dict(llama.llama_keymap(cfg), llama.llama_specs(cfg), rng), qwen)
    t5 = {"architectures": ["T5EncoderModel"], "model_type": "t5", "vocab_size": 384, "d_model": GLYPH_WIDTH,
          "d_kv": 8, "d_ff": 2 * GLYPH_WIDTH, "num_layers": 2, "num_heads": 3, "relative_attention_num_buckets": 32,
          "relative_attention_max_distance": 128, "feed_forward_proj": "gated-gelu", "layer_norm_epsilon": 1e-6,
          "is_encoder_decoder": True, "torch_dtype": "float32", "transformers_version": TRANSFORMERS_VERSION,
          **(t5_overrides or {})}
    t5cfg = T5Config.from_dict(t5)
    save_component(folder / "text_encoder_2", "model.safetensors",
                   random_state_dict(t5_keymap(t5cfg), t5_specs(t5cfg), rng), t5)
    (folder / "tokenizer_2").mkdir(parents=True, exist_ok=True)
    write_json(folder / "tokenizer_2" / "tokenizer_config.json",
               {"tokenizer_class": "ByT5Tokenizer", "extra_ids": 0, "eos_token": "</s>", "pad_token": "<pad>",
                "unk_token": "<unk>", "model_max_length": 1000000000000000019884624838656})


def write_image_encoder(folder: Path, rng: np.random.Generator) -> None:
    """``image_encoder/`` (``SiglipVisionModel``) and ``feature_extractor/`` (``SiglipImageProcessor``)."""
    from vidax.encoders.siglip import SiglipVisionConfig, siglip_config_dict, siglip_keymap, siglip_specs

    cfg = SiglipVisionConfig(hidden_size=IMAGE_WIDTH, intermediate_size=2 * IMAGE_WIDTH, num_hidden_layers=2,
                             num_attention_heads=2, image_size=IMAGE_SIZE, patch_size=PATCH_SIZE,
                             vision_use_head=False)
    config = {**siglip_config_dict(cfg), "torch_dtype": "float32", "transformers_version": TRANSFORMERS_VERSION}
    save_component(folder / "image_encoder", "model.safetensors",
                   random_state_dict(siglip_keymap(cfg), siglip_specs(cfg), rng), config)
    (folder / "feature_extractor").mkdir(parents=True, exist_ok=True)
    write_json(folder / "feature_extractor" / "preprocessor_config.json", {
        "image_processor_type": "SiglipImageProcessor", "do_resize": True,
        "size": {"height": IMAGE_SIZE, "width": IMAGE_SIZE}, "resample": 3, "do_rescale": True,
        "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
        "do_convert_rgb": None})


def write_transformer(folder: Path, config: dict, rng: np.random.Generator) -> None:
    """``transformer/``: random weights in the diffusers names (fused projections split by the views)."""
    from vidax.models.hunyuanvideo15.config import HunyuanVideo15TransformerConfig
    from vidax.models.hunyuanvideo15.keymap import transformer_keymap, transformer_views
    from vidax.models.hunyuanvideo15.transformer import transformer_specs

    cfg = HunyuanVideo15TransformerConfig.from_dict(config)
    specs = transformer_specs(cfg)
    ours = to_state_dict(random_params(specs, rng), transformer_keymap(cfg), specs)
    save_component(folder / "transformer", "diffusion_pytorch_model.safetensors",
                   transformer_views(cfg).merge(ours, {}), config)


def write_vae(folder: Path, config: dict, rng: np.random.Generator) -> None:
    from vidax.models.hunyuanvideo15.vae import HunyuanVideo15VAEConfig
    from vidax.models.hunyuanvideo15.vae_keymap import vae_keymap, vae_specs

    cfg = HunyuanVideo15VAEConfig.from_dict(config)
    save_component(folder / "vae", "diffusion_pytorch_model.safetensors",
                   random_state_dict(vae_keymap(cfg), vae_specs(cfg), rng), config)


def write_demo_checkpoint(folder: str | Path, *, task: str = "t2v", seed: int = 0, guidance_scale: float = 6.0,
                          flow_shift: float = 5.0, transformer_overrides: dict | None = None) -> Path:
    """Write a tiny random-weight HunyuanVideo-1.5 folder (see the module docstring).

    Args:
      folder: the folder to create (must not exist, or be empty).
      task: ``"t2v"`` (``HunyuanVideo15Pipeline``) or ``"i2v"`` (``HunyuanVideo15ImageToVideoPipeline``).
      seed: the weights' random seed.
      guidance_scale, flow_shift: the guider's and the scheduler's settings (the 480p variants': 6.0, 5.0).
      transformer_overrides: config.json values replacing the tiny defaults (tests).

    Returns:
      the folder.

    Raises:
      ValueError: an unknown task. FileExistsError: a non-empty folder.
    """
    if task not in ("t2v", "i2v"):
        raise ValueError(f"task must be 't2v' or 'i2v', got {task!r}")
    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()):
        raise FileExistsError(f"{folder} exists and is not empty; pass a new folder")
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    i2v = task == "i2v"
    write_text_encoders(folder, rng)
    if i2v:
        write_image_encoder(folder, rng)
    write_transformer(folder, transformer_config(task, **(transformer_overrides or {})), rng)
    write_vae(folder, vae_config(), rng)
    for part, name, config in (("scheduler", "scheduler_config.json", scheduler_config(flow_shift)),
                               ("guider", "guider_config.json", guider_config(guidance_scale))):
        (folder / part).mkdir()
        write_json(folder / part / name, config)
    index = {"_class_name": "HunyuanVideo15ImageToVideoPipeline" if i2v else "HunyuanVideo15Pipeline",
             "_diffusers_version": DIFFUSERS_VERSION,
             "guider": ["diffusers", "ClassifierFreeGuidance"],
             "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
             "text_encoder": ["transformers", "Qwen2_5_VLTextModel"],
             "text_encoder_2": ["transformers", "T5EncoderModel"],
             "tokenizer": ["transformers", "Qwen2Tokenizer"],
             "tokenizer_2": ["transformers", "ByT5Tokenizer"],
             "transformer": ["diffusers", "HunyuanVideo15Transformer3DModel"],
             "vae": ["diffusers", "AutoencoderKLHunyuanVideo15"]}
    if i2v:
        index["image_encoder"] = ["transformers", "SiglipVisionModel"]
        index["feature_extractor"] = ["transformers", "SiglipImageProcessor"]
    write_json(folder / "model_index.json", index)
    (folder / DEMO_MARKER).write_text(demo_marker_text(f"HunyuanVideo-1.5 {task.upper()}"))
    return folder


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Write a tiny random-weight HunyuanVideo-1.5 checkpoint (no PyTorch).")
    p.add_argument("folder")
    p.add_argument("--task", choices=("t2v", "i2v"), default="t2v")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    print(write_demo_checkpoint(args.folder, task=args.task, seed=args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
