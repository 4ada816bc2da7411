"""The embedded default: a tiny Wan2.1-architecture demo checkpoint, written without PyTorch.

``write_demo_checkpoint(folder)`` writes a complete diffusers-layout Wan2.1 T2V
folder (``model_index.json``, ``transformer/``, ``vae/``, ``text_encoder/``,
``tokenizer/``, ``scheduler/``) with random weights and a tiny tokenizer, in
exactly the files and tensor names that diffusers' ``WanPipeline.save_pretrained``
writes, so diffusers loads it too. The weights are random: the video it makes is
structured noise. It exists so that ``make demo`` and the tests run the real
loading and generation path end to end on any machine; a real checkpoint works
by changing only the folder.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from vidax.checkpoint.demo import (DEMO_MARKER, DIFFUSERS_VERSION, TRANSFORMERS_VERSION, demo_marker_text,  # noqa: F401
                                   random_params, random_state_dict)
from vidax.checkpoint.writer import assembled_folder, save_component, write_json
from vidax.encoders.t5 import T5Config, t5_keymap, t5_specs
from vidax.encoders.tokenizer import Tokenizer, write_demo_tokenizer
from vidax.core import wan_vae
from vidax.models.wan.config import WanTransformerConfig
from vidax.models.wan.keymap import transformer_keymap_diffusers
from vidax.models.wan.transformer import transformer_specs

# Wan2.1's VAE latent statistics (diffusers AutoencoderKLWan defaults).
LATENTS_MEAN = [-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
                0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921]
LATENTS_STD = [2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
               3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.916]


def transformer_config(text_dim: int, **overrides) -> dict:
    cfg = {
        "_class_name": "WanTransformer3DModel", "_diffusers_version": DIFFUSERS_VERSION,
        "added_kv_proj_dim": None, "attention_head_dim": 32, "cross_attn_norm": True, "eps": 1e-06,
        "ffn_dim": 128, "freq_dim": 64, "image_dim": None, "in_channels": 16, "num_attention_heads": 2,
        "num_layers": 2, "out_channels": 16, "patch_size": [1, 2, 2], "pos_embed_seq_len": None,
        "qk_norm": "rms_norm_across_heads", "rope_max_seq_len": 1024, "text_dim": text_dim,
    }
    cfg.update(overrides)
    return cfg


def vae_config(**overrides) -> dict:
    cfg = {
        "_class_name": "AutoencoderKLWan", "_diffusers_version": DIFFUSERS_VERSION,
        "attn_scales": [], "base_dim": 16, "decoder_base_dim": None, "dim_mult": [1, 2, 4, 4], "dropout": 0.0,
        "in_channels": 3, "is_residual": False, "latents_mean": LATENTS_MEAN, "latents_std": LATENTS_STD,
        "num_res_blocks": 1, "out_channels": 3, "patch_size": None, "scale_factor_spatial": 8,
        "scale_factor_temporal": 4, "temperal_downsample": [False, True, True], "z_dim": 16,
    }
    cfg.update(overrides)
    return cfg


def text_encoder_config(vocab_size: int, **overrides) -> dict:
    cfg = {
        "architectures": ["UMT5EncoderModel"], "classifier_dropout": 0.0, "d_ff": 128, "d_kv": 16, "d_model": 64,
        "decoder_start_token_id": 0, "dense_act_fn": "gelu_new", "dropout_rate": 0.1, "dtype": "float32",
        "eos_token_id": 1, "feed_forward_proj": "gated-gelu", "initializer_factor": 1.0, "is_decoder": False,
        "is_encoder_decoder": True, "is_gated_act": True, "layer_norm_epsilon": 1e-06, "model_type": "umt5",
        "num_decoder_layers": 2, "num_heads": 4, "num_layers": 2, "pad_token_id": 0,
        "relative_attention_max_distance": 128, "relative_attention_num_buckets": 32, "scale_decoder_outputs": True,
        "tie_word_embeddings": True, "transformers_version": TRANSFORMERS_VERSION, "use_cache": True,
        "vocab_size": vocab_size,
    }
    cfg.update(overrides)
    return cfg


def scheduler_config(flow_shift: float = 3.0) -> dict:
    """The Wan2.1 diffusers checkpoints' UniPC configuration."""
    return {
        "_class_name": "UniPCMultistepScheduler", "_diffusers_version": DIFFUSERS_VERSION,
        "beta_end": 0.02, "beta_schedule": "linear", "beta_start": 0.0001, "disable_corrector": [],
        "dynamic_thresholding_ratio": 0.995, "final_sigmas_type": "zero", "flow_shift": flow_shift,
        "lower_order_final": True, "num_train_timesteps": 1000, "predict_x0": True,
        "prediction_type": "flow_prediction", "rescale_betas_zero_snr": False, "sample_max_value": 1.0,
        "shift_terminal": None, "sigma_max": None, "sigma_min": None, "solver_order": 2, "solver_p": None,
        "solver_type": "bh2", "steps_offset": 0, "thresholding": False, "time_shift_type": "exponential",
        "timestep_spacing": "linspace", "trained_betas": None, "use_beta_sigmas": False,
        "use_dynamic_shifting": False, "use_exponential_sigmas": False, "use_flow_sigmas": True,
        "use_karras_sigmas": False,
    }


MODEL_INDEX = {
    "_class_name": "WanPipeline", "_diffusers_version": DIFFUSERS_VERSION,
    "boundary_ratio": None, "expand_timesteps": False,
    "scheduler": ["diffusers", "UniPCMultistepScheduler"],
    "text_encoder": ["transformers", "UMT5EncoderModel"],
    "tokenizer": ["transformers", "T5TokenizerFast"],
    "transformer": ["diffusers", "WanTransformer3DModel"],
    "transformer_2": [None, None],
    "vae": ["diffusers", "AutoencoderKLWan"],
}


def image_encoder_config(**overrides) -> dict:
    """A tiny CLIP vision ``config.json`` in the layout of the Wan I2V ``image_encoder/``
    (``CLIPVisionModelWithProjection``, exact GELU): 28 px, patch 14, so 5 tokens per image."""
    cfg = {
        "architectures": ["CLIPVisionModelWithProjection"], "attention_dropout": 0.0, "dropout": 0.0,
        "hidden_act": "gelu", "hidden_size": 32, "image_size": 28, "initializer_factor": 1.0,
        "initializer_range": 0.02, "intermediate_size": 64, "layer_norm_eps": 1e-05, "model_type": "clip_vision_model",
        "num_attention_heads": 4, "num_channels": 3, "num_hidden_layers": 2, "patch_size": 14, "projection_dim": 16,
        "dtype": "float32", "transformers_version": TRANSFORMERS_VERSION,
    }
    cfg.update(overrides)
    return cfg


def image_processor_config(size: int) -> dict:
    """The Wan I2V ``image_processor/preprocessor_config.json`` (OpenAI CLIP settings) at ``size`` pixels."""
    return {
        "crop_size": {"height": size, "width": size}, "do_center_crop": True, "do_convert_rgb": True,
        "do_normalize": True, "do_rescale": True, "do_resize": True,
        "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_processor_type": "CLIPImageProcessor",
        "image_std": [0.26862954, 0.26130258, 0.27577711], "resample": 3,
        "rescale_factor": 0.00392156862745098, "size": {"shortest_edge": size},
    }


#: Tiny checkpoints of every Wan task (``write_demo_checkpoint(task=...)``): the model_index class,
#: whether there is a CLIP image encoder, a second (low-noise) expert, model_index settings, and
#: the transformer / VAE config changes (FLF2V's ``pos_embed_seq_len`` is 2 x the CLIP tokens).
TASKS = {
    "t2v": dict(cls="WanPipeline", clip=False, experts=1, index={}, transformer={}, vae={}),
    "i2v": dict(cls="WanImageToVideoPipeline", clip=True, experts=1, index={}, transformer={"in_channels": 36}, vae={}),
    "flf2v": dict(cls="WanImageToVideoPipeline", clip=True, experts=1, index={}, transformer={"in_channels": 36},
                  vae={}, flf2v=True),
    "t2v-a14b": dict(cls="WanPipeline", clip=False, experts=2, index={"boundary_ratio": 0.875}, transformer={}, vae={}),
    "i2v-a14b": dict(cls="WanImageToVideoPipeline", clip=False, experts=2, index={"boundary_ratio": 0.9},
                     transformer={"in_channels": 36}, vae={}),
    "ti2v": dict(cls="WanPipeline", clip=False, experts=1, index={"expand_timesteps": True},
                 transformer={"in_channels": 48, "out_channels": 48}, vae="wan2.2"),
}


def wan22_vae_config(**overrides) -> dict:
    """A tiny Wan2.2 VAE ``config.json`` (``is_residual``, 48 latent channels, patch 2: 16x spatial)."""
    rng = np.random.default_rng(48)
    cfg = vae_config(
        base_dim=8, decoder_base_dim=12, z_dim=48, dim_mult=[1, 2, 2, 2], num_res_blocks=1, is_residual=True,
        in_channels=12, out_channels=12, patch_size=2, scale_factor_spatial=16,
        latents_mean=[round(float(v), 4) for v in 0.5 * rng.standard_normal(48)],
        latents_std=[round(float(v), 4) for v in 1.0 + 0.5 * rng.random(48)],
    )
    cfg.update(overrides)
    return cfg


def write_demo_checkpoint(folder: str | Path, seed: int = 0, *, transformer_overrides: dict | None = None,
                          vae_overrides: dict | None = None, text_overrides: dict | None = None,
                          task: str = "t2v", image_encoder_overrides: dict | None = None,
                          scheduler_overrides: dict | None = None) -> Path:
    """Write the tiny demo Wan2.1 T2V checkpoint into ``folder`` (diffusers layout).

    ``task`` writes the tiny checkpoint of another Wan task instead (:data:`TASKS`), in the files
    and tensor names diffusers' pipelines save: ``"i2v"`` / ``"flf2v"`` (Wan2.1 I2V / FLF2V:
    36-channel transformer with an image embedder, ``image_encoder/`` a transformers
    ``CLIPVisionModelWithProjection``, ``image_processor/``), ``"t2v-a14b"`` / ``"i2v-a14b"``
    (Wan2.2 A14B: ``transformer/`` high-noise and ``transformer_2/`` low-noise experts,
    ``boundary_ratio`` 0.875 / 0.9 in ``model_index.json``), ``"ti2v"`` (Wan2.2 TI2V-5B: Wan2.2 VAE,
    48 latent channels, ``expand_timesteps``).

    The folder is assembled under a temporary name beside ``folder`` and renamed into place
    when complete, so an interrupted run never leaves a partial checkpoint.

    Args:
      folder: target folder; must not exist yet.
      seed: seed of the random weights.
      *_overrides: config.json overrides per component (tests use them for other tiny shapes).
      task: one of :data:`TASKS`.

    Returns:
      ``folder``.

    Raises:
      FileExistsError: ``folder`` exists. ValueError: an unknown task.
    """
    if task not in TASKS:
        raise ValueError(f"unknown demo task {task!r}; known: {sorted(TASKS)}")
    spec = TASKS[task]
    folder = Path(folder)
    if folder.exists():
        raise FileExistsError(f"{folder} exists; remove it to write a fresh demo checkpoint")
    with assembled_folder(folder) as tmp:
        rng = np.random.default_rng(seed)
        vocab_size = Tokenizer.from_folder(write_demo_tokenizer(tmp / "tokenizer")).vocab_size
        ecfg_json = text_encoder_config(vocab_size, **(text_overrides or {}))
        icfg_json = image_encoder_config(**(image_encoder_overrides or {})) if spec["clip"] else None
        task_transformer = dict(spec["transformer"])
        if icfg_json is not None:
            tokens = (icfg_json["image_size"] // icfg_json["patch_size"]) ** 2 + 1
            heads = (transformer_overrides or {}).get("num_attention_heads", 2)
            head_dim = (transformer_overrides or {}).get("attention_head_dim", 32)
            task_transformer.update(image_dim=icfg_json["hidden_size"], added_kv_proj_dim=heads * head_dim)
            if spec.get("flf2v"):
                task_transformer["pos_embed_seq_len"] = 2 * tokens
        tcfg_json = transformer_config(ecfg_json["d_model"], **{**task_transformer, **(transformer_overrides or {})})
        vae_base = wan22_vae_config() if spec["vae"] == "wan2.2" else vae_config()
        vcfg_json = {**vae_base, **(vae_overrides or {})}

        ecfg = T5Config.from_dict(ecfg_json)
        save_component(tmp / "text_encoder", "model.safetensors",
                       random_state_dict(t5_keymap(ecfg), t5_specs(ecfg), rng), ecfg_json)
        tcfg = WanTransformerConfig.from_dict(tcfg_json)
        save_component(tmp / "transformer", "diffusion_pytorch_model.safetensors",
                       random_state_dict(transformer_keymap_diffusers(tcfg), transformer_specs(tcfg), rng), tcfg_json)
        if spec["experts"] == 2:  # the low-noise expert: same architecture, its own weights
            save_component(tmp / "transformer_2", "diffusion_pytorch_model.safetensors",
                           random_state_dict(transformer_keymap_diffusers(tcfg), transformer_specs(tcfg), rng), tcfg_json)
        if icfg_json is not None:
            from vidax.encoders.clip import CLIPVisionConfig, clip_keymap, clip_specs

            icfg = CLIPVisionConfig.from_dict(icfg_json)
            save_component(tmp / "image_encoder", "model.safetensors",
                           random_state_dict(clip_keymap(icfg), clip_specs(icfg), rng), icfg_json)
            (tmp / "image_processor").mkdir()
            write_json(tmp / "image_processor" / "preprocessor_config.json", image_processor_config(icfg.image_size))
        vcfg = wan_vae.WanVAEConfig.from_dict(vcfg_json)
        save_component(tmp / "vae", "diffusion_pytorch_model.safetensors",
                       random_state_dict(wan_vae.vae_keymap(vcfg), wan_vae.vae_specs(vcfg), rng), vcfg_json)
        (tmp / "scheduler").mkdir()
        write_json(tmp / "scheduler" / "scheduler_config.json", {**scheduler_config(), **(scheduler_overrides or {})})
        write_json(tmp / "model_index.json", _model_index(spec))
        (tmp / DEMO_MARKER).write_text(demo_marker_text("Wan2.1"))
    return folder


def _model_index(spec: dict) -> dict:
    index = dict(MODEL_INDEX, _class_name=spec["cls"], **spec["index"])
    if spec["experts"] == 2:
        index["transformer_2"] = ["diffusers", "WanTransformer3DModel"]
    if spec["cls"] == "WanImageToVideoPipeline":
        clip = spec["clip"]
        index["image_encoder"] = ["transformers", "CLIPVisionModel"] if clip else [None, None]
        index["image_processor"] = ["transformers", "CLIPImageProcessor"] if clip else [None, None]
    return index


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Write the tiny random-weight Wan2.1 demo checkpoint (diffusers layout).")
    p.add_argument("folder")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--if-absent", action="store_true", help="do nothing if the folder already holds a checkpoint")
    args = p.parse_args(argv)
    folder = Path(args.folder)
    if args.if_absent and (folder / "model_index.json").is_file():
        print(f"{folder}: demo checkpoint present")
        return 0
    try:
        write_demo_checkpoint(folder, seed=args.seed)
    except FileExistsError as e:
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return 2
    print(f"{folder}: wrote demo checkpoint ({json.loads((folder / 'model_index.json').read_text())['_class_name']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
