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
import math
import shutil
import tempfile
from pathlib import Path

import numpy as np

from vidax.checkpoint.writer import save_component, to_state_dict, write_json
from vidax.encoders.t5 import T5Config, t5_keymap, t5_specs
from vidax.encoders.tokenizer import Tokenizer, write_demo_tokenizer
from vidax.models.wan import vae as wan_vae
from vidax.models.wan.config import WanTransformerConfig
from vidax.models.wan.keymap import transformer_keymap_diffusers
from vidax.models.wan.transformer import transformer_specs

DIFFUSERS_VERSION = "0.42.1"
TRANSFORMERS_VERSION = "5.24.0"
DEMO_MARKER = "VIDAX_DEMO_CHECKPOINT.txt"

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


def random_params(specs, rng: np.random.Generator) -> dict:
    """Random float32 host parameters for a spec tree, initialised so activations stay O(1).

    Kernels: normal with std 1/sqrt(fan_in); norm scales: 1 plus small noise; biases: small
    noise; AdaLN tables: normal / sqrt(dim); embeddings and relative biases: normal * 0.5.
    Leaves are drawn from ``rng`` in spec-tree order.

    Returns:
      a nested dict of float32 NumPy arrays structured like ``specs``.
    """
    from vidax.core.params import flatten, unflatten

    params = {}
    for path, spec in flatten(specs):
        leaf = path.rsplit("/", 1)[-1]
        shape = spec.shape
        stacked = bool(spec.axes) and spec.axes[0] == "layers"
        inner = shape[1:] if stacked else shape
        if leaf == "kernel":
            fan_in = math.prod(inner[:-1])
            v = rng.standard_normal(shape, dtype=np.float32) / np.float32(math.sqrt(fan_in))
        elif leaf in ("scale", "gamma"):
            v = 1.0 + 0.05 * rng.standard_normal(shape, dtype=np.float32)
        elif leaf == "bias":
            v = 0.02 * rng.standard_normal(shape, dtype=np.float32)
        elif "scale_shift_table" in leaf:
            v = rng.standard_normal(shape, dtype=np.float32) / np.float32(math.sqrt(shape[-1]))
        else:
            v = 0.5 * rng.standard_normal(shape, dtype=np.float32)
        params[path] = v.astype(np.float32)
    return unflatten(params)


def random_state_dict(keymap, specs, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random float32 weights in the checkpoint's layout (:func:`random_params` through ``keymap`` backwards)."""
    return to_state_dict(random_params(specs, rng), keymap, specs)


def write_demo_checkpoint(folder: str | Path, seed: int = 0, *, transformer_overrides: dict | None = None,
                          vae_overrides: dict | None = None, text_overrides: dict | None = None) -> Path:
    """Write the tiny demo Wan2.1 T2V checkpoint into ``folder`` (diffusers layout).

    The folder is assembled under a temporary name beside ``folder`` and renamed into place
    when complete, so an interrupted run never leaves a partial checkpoint.

    Args:
      folder: target folder; must not exist yet.
      seed: seed of the random weights.
      *_overrides: config.json overrides per component (tests use them for other tiny shapes).

    Returns:
      ``folder``.

    Raises:
      FileExistsError: ``folder`` exists.
    """
    folder = Path(folder)
    if folder.exists():
        raise FileExistsError(f"{folder} exists; remove it to write a fresh demo checkpoint")
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        rng = np.random.default_rng(seed)
        vocab_size = Tokenizer.from_folder(write_demo_tokenizer(tmp / "tokenizer")).vocab_size
        ecfg_json = text_encoder_config(vocab_size, **(text_overrides or {}))
        tcfg_json = transformer_config(ecfg_json["d_model"], **(transformer_overrides or {}))
        vcfg_json = vae_config(**(vae_overrides or {}))

        ecfg = T5Config.from_dict(ecfg_json)
        save_component(tmp / "text_encoder", "model.safetensors",
                       random_state_dict(t5_keymap(ecfg), t5_specs(ecfg), rng), ecfg_json)
        tcfg = WanTransformerConfig.from_dict(tcfg_json)
        save_component(tmp / "transformer", "diffusion_pytorch_model.safetensors",
                       random_state_dict(transformer_keymap_diffusers(tcfg), transformer_specs(tcfg), rng), tcfg_json)
        vcfg = wan_vae.WanVAEConfig.from_dict(vcfg_json)
        save_component(tmp / "vae", "diffusion_pytorch_model.safetensors",
                       random_state_dict(wan_vae.vae_keymap(vcfg), wan_vae.vae_specs(vcfg), rng), vcfg_json)
        (tmp / "scheduler").mkdir()
        write_json(tmp / "scheduler" / "scheduler_config.json", scheduler_config())
        write_json(tmp / "model_index.json", MODEL_INDEX)
        (tmp / DEMO_MARKER).write_text(
            "vidax demo checkpoint: Wan2.1 architecture at a tiny size with RANDOM weights.\n"
            "It makes noise, not video; it exists to exercise the real loading and generation path.\n"
        )
        tmp.rename(folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


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
    write_demo_checkpoint(folder, seed=args.seed)
    print(f"{folder}: wrote demo checkpoint ({json.loads((folder / 'model_index.json').read_text())['_class_name']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
