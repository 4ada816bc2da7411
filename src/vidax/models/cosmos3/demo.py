"""A tiny Cosmos3 demo / fixture checkpoint, written without PyTorch.

``write_demo_checkpoint(folder)`` writes a complete diffusers-layout folder (``model_index.json``, ``transformer/``,
``vae/``, ``text_tokenizer/``, ``scheduler/``) with random weights, in the files, tensor names and config keys that
diffusers' ``Cosmos3OmniPipeline.save_pretrained`` writes, so that diffusers loads it too. The architecture is the
release's at a tiny size: the Mixture-of-Transformers backbone with its understanding and generation weights per
layer (Nano's SiLU-gated MLP and q/k norms, or with ``edge=True`` Edge's squared-ReLU MLP, Nemotron norms, no text
q/k norms and the generation path's own understanding-key norm); the Wan2.2 VAE (16x space, 4x time, 48 latent
channels); a Qwen2 BPE tokenizer with Qwen3-VL's special tokens and a chat template for text messages that renders
what Qwen3-VL's does; the scheduler is Nano's Karras flow grid (``edge=True``: the native flow grid, shift 3).

``distilled=True``: a distilled (few-step) folder as diffusers' ``Cosmos3DistilledModularPipeline.save_pretrained``
writes one: ``modular_model_index.json`` (``_blocks_class_name`` ``Cosmos3DistilledBlocks``, ``is_distilled``,
``distilled_sigmas`` :data:`DEMO_DISTILLED_SIGMAS`, each component's loading spec) instead of ``model_index.json``,
and a ``FlowMatchEulerDiscreteScheduler`` with ``stochastic_sampling``.

The weights are random: the video is structured noise. The folder exercises the real loading and generation path
end to end; a real checkpoint works by changing only the folder.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from vidax.checkpoint.demo import DEMO_MARKER, DIFFUSERS_VERSION, demo_marker_text, random_state_dict
from vidax.checkpoint.writer import save_component, write_json
from vidax.core import wan_vae

#: The demo's distilled schedule: the tiny distilled fixture's ``t_list`` of diffusers' distilled tests
#: (``tests/modular_pipelines/cosmos/test_modular_pipeline_cosmos3_distilled.py``, huggingface/diffusers#14177).
DEMO_DISTILLED_SIGMAS = (1.0, 0.75, 0.5, 0.25)

LATENT_CHANNELS, PATCH = 48, 2  # the Wan2.2 VAE's latent channels; the transformer's 2x2 latent patch

#: Qwen3-VL's added tokens beyond Qwen2.5-VL's (not special).
QWEN3_EXTRA_TOKENS = (("<tool_response>", False), ("</tool_response>", False), ("<think>", False),
                      ("</think>", False))

#: A chat template for string-content text messages: what Qwen3-VL-8B-Instruct's template renders for them (a
#: system turn only when given, each turn ``<|im_start|>{role}\n{content}<|im_end|>\n``, the generation prompt).
#: vidax renders it in Python (:func:`vidax.models.cosmos3.text.render_chat`); diffusers needs it in the folder.
DEMO_CHAT_TEMPLATE = (
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def transformer_config(vocab_size: int, *, edge: bool = False, **overrides) -> dict:
    """A tiny ``Cosmos3OmniTransformer`` config.json (every key diffusers writes); ``edge``: Edge's variants."""
    cfg = {
        "_class_name": "Cosmos3OmniTransformer", "_diffusers_version": DIFFUSERS_VERSION,
        "action_dim": None, "action_gen": False, "attention_bias": False, "attention_dropout": 0.0, "base_fps": 24,
        "enable_fps_modulation": True, "head_dim": 16, "hidden_act": "silu", "hidden_size": 64,
        "intermediate_size": 128, "latent_channel": LATENT_CHANNELS, "latent_patch_size": PATCH,
        "num_attention_heads": 4, "num_embodiment_domains": 32, "num_hidden_layers": 2, "num_key_value_heads": 2,
        "patch_latent_dim": PATCH * PATCH * LATENT_CHANNELS, "qk_norm_for_text": True, "rms_norm_eps": 1e-06,
        "rope_axes_dim": [4, 2, 2], "rope_scaling": {"mrope_section": [4, 2, 2], "rope_type": "default"},
        "rope_theta": 5000000.0, "sound_dim": None, "sound_gen": False, "sound_latent_fps": 25.0,
        "timestep_scale": 0.001, "unified_3d_mrope_reset_spatial_ids": True,
        "unified_3d_mrope_temporal_modality_margin": 15000, "use_und_k_norm_for_gen": False,
        "vocab_size": vocab_size,
    }
    if edge:
        cfg.update(hidden_act="relu2", qk_norm_for_text=False, use_und_k_norm_for_gen=True)
    cfg.update(overrides)
    return cfg


def transformer_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """The diffusers ``Cosmos3OmniTransformer`` state dict's names and shapes for a config (video generation: no
    sound or action heads)."""
    d, hd, f, v = cfg["hidden_size"], cfg["head_dim"], cfg["intermediate_size"], cfg["vocab_size"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    bias = cfg["attention_bias"]
    gated = cfg["hidden_act"] != "relu2"
    shapes: dict[str, tuple[int, ...]] = {"embed_tokens.weight": (v, d)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"layers.{i}."
        attn = {"to_q": (q, d), "to_k": (kv, d), "to_v": (kv, d), "to_out": (d, q), "add_q_proj": (q, d),
                "add_k_proj": (kv, d), "add_v_proj": (kv, d), "to_add_out": (d, q)}
        for name, shape in attn.items():
            shapes[f"{p}self_attn.{name}.weight"] = shape
            if bias and name not in ("to_out", "to_add_out"):
                shapes[f"{p}self_attn.{name}.bias"] = (shape[0],)
        norms = ["norm_added_q", "norm_added_k"]
        if cfg["qk_norm_for_text"]:
            norms += ["norm_q", "norm_k"]
        if cfg["use_und_k_norm_for_gen"]:
            norms.append("k_norm_und_for_gen")
        for name in norms:
            shapes[f"{p}self_attn.{name}.weight"] = (hd,)
        for mlp in ("mlp", "mlp_moe_gen"):
            if gated:
                shapes[f"{p}{mlp}.gate_proj.weight"] = (f, d)
            shapes[f"{p}{mlp}.up_proj.weight"] = (f, d)
            shapes[f"{p}{mlp}.down_proj.weight"] = (d, f)
        for name in ("input_layernorm", "input_layernorm_moe_gen", "post_attention_layernorm",
                     "post_attention_layernorm_moe_gen"):
            shapes[f"{p}{name}.weight"] = (d,)
    pd = cfg["patch_latent_dim"]
    shapes.update({"norm.weight": (d,), "norm_moe_gen.weight": (d,), "lm_head.weight": (v, d),
                   "proj_in.weight": (d, pd), "proj_in.bias": (d,), "proj_out.weight": (pd, d),
                   "proj_out.bias": (pd,), "time_embedder.linear_1.weight": (d, 256),
                   "time_embedder.linear_1.bias": (d,), "time_embedder.linear_2.weight": (d, d),
                   "time_embedder.linear_2.bias": (d,)})
    return shapes


def random_transformer(cfg: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random float32 weights: norm scales around 1, linear weights scaled by 1/sqrt(fan_in), embeddings ~N(0, 1)."""
    out = {}
    for name, shape in transformer_shapes(cfg).items():
        if len(shape) == 1:
            w = (1.0 + 0.1 * rng.standard_normal(shape)) if "norm" in name else 0.02 * rng.standard_normal(shape)
        elif name in ("embed_tokens.weight",):
            w = rng.standard_normal(shape)
        else:
            w = rng.standard_normal(shape) / np.sqrt(shape[1])
        out[name] = np.asarray(w, np.float32)
    return out


def vae_config(**overrides) -> dict:
    """A tiny Wan2.2 ``AutoencoderKLWan`` config.json (``is_residual``, 48 latent channels, patch 2: 16x space)."""
    rng = np.random.default_rng(48)
    cfg = {
        "_class_name": "AutoencoderKLWan", "_diffusers_version": DIFFUSERS_VERSION,
        "attn_scales": [], "base_dim": 8, "decoder_base_dim": 12, "dim_mult": [1, 2, 2, 2], "dropout": 0.0,
        "in_channels": 12, "is_residual": True, "num_res_blocks": 1, "out_channels": 12, "patch_size": 2,
        "scale_factor_spatial": 16, "scale_factor_temporal": 4, "temperal_downsample": [False, True, True],
        "z_dim": LATENT_CHANNELS,
        "latents_mean": [round(float(v), 4) for v in 0.5 * rng.standard_normal(LATENT_CHANNELS)],
        "latents_std": [round(float(v), 4) for v in 1.0 + 0.5 * rng.random(LATENT_CHANNELS)],
    }
    cfg.update(overrides)
    return cfg


def scheduler_config(*, edge: bool = False) -> dict:
    """diffusers' ``UniPCMultistepScheduler``: Nano's Karras flow grid (``scripts/convert_cosmos3_to_diffusers.py``)
    or, ``edge``, the flow grid the pipeline replaces by its native one (shift 3)."""
    cfg = {"_class_name": "UniPCMultistepScheduler", "_diffusers_version": DIFFUSERS_VERSION,
           "num_train_timesteps": 1000, "beta_start": 0.0001, "beta_end": 0.02, "beta_schedule": "linear",
           "trained_betas": None, "solver_order": 2, "prediction_type": "flow_prediction", "thresholding": False,
           "dynamic_thresholding_ratio": 0.995, "sample_max_value": 1.0, "predict_x0": True, "solver_type": "bh2",
           "lower_order_final": True, "disable_corrector": [], "solver_p": None, "use_karras_sigmas": True,
           "use_exponential_sigmas": False, "use_beta_sigmas": False, "use_flow_sigmas": True, "flow_shift": 1.0,
           "timestep_spacing": "linspace", "steps_offset": 0, "final_sigmas_type": "zero",
           "rescale_betas_zero_snr": False, "use_dynamic_shifting": False, "time_shift_type": "exponential",
           "sigma_min": 0.147, "sigma_max": 200.0, "shift_terminal": None}
    if edge:
        cfg.update(use_karras_sigmas=False, sigma_min=None, sigma_max=None, flow_shift=3.0)
    return cfg


def distilled_scheduler_config() -> dict:
    """diffusers' ``FlowMatchEulerDiscreteScheduler`` config (every key 0.42.1 saves) with ``stochastic_sampling``:
    the distilled checkpoints' re-noising Euler step."""
    return {"_class_name": "FlowMatchEulerDiscreteScheduler", "_diffusers_version": DIFFUSERS_VERSION,
            "base_image_seq_len": 256, "base_shift": 0.5, "invert_sigmas": False, "max_image_seq_len": 4096,
            "max_shift": 1.15, "num_train_timesteps": 1000, "shift": 1.0, "shift_terminal": None,
            "stochastic_sampling": True, "time_shift_type": "exponential", "use_beta_sigmas": False,
            "use_dynamic_shifting": False, "use_exponential_sigmas": False, "use_karras_sigmas": False}


def modular_index(folder: Path, sigmas) -> dict:
    """A distilled ``modular_model_index.json`` as ``ModularPipeline.save_pretrained`` writes it (diffusers 0.42.1)."""
    def spec(library: str, cls: str, sub: str) -> list:
        return [library, cls, {"pretrained_model_name_or_path": str(Path(folder).resolve()), "revision": None,
                               "subfolder": sub, "type_hint": [library, cls], "variant": None}]

    return {"_blocks_class_name": "Cosmos3DistilledBlocks", "_class_name": "Cosmos3OmniModularPipeline",
            "_diffusers_version": DIFFUSERS_VERSION, "default_use_system_prompt": True,
            "distilled_sigmas": [float(v) for v in sigmas], "enable_safety_checker": False, "is_distilled": True,
            "scheduler": spec("diffusers", "FlowMatchEulerDiscreteScheduler", "scheduler"),
            "text_tokenizer": spec("transformers", "Qwen2Tokenizer", "text_tokenizer"),
            "transformer": spec("diffusers", "Cosmos3OmniTransformer", "transformer"),
            "vae": spec("diffusers", "AutoencoderKLWan", "vae")}


def _corpus() -> list[str]:
    from vidax.models.cosmos3.text import SYSTEM_PROMPT_IMAGE, SYSTEM_PROMPT_VIDEO

    words = ("a majestic red panda climbing a bamboo tree in the snow robot arm welds a metal frame sparks fly "
             "the camera follows a car on a wet road at night").split()
    meta = ["The video is 3.9 seconds long and is of 24 FPS.", "This video is not of 480x832 resolution.",
            "This image is of 704x1280 resolution."]
    return [" ".join(words[i:i + 6]) for i in range(0, len(words), 3)] + meta + [SYSTEM_PROMPT_VIDEO,
                                                                                 SYSTEM_PROMPT_IMAGE] * 3


def write_tokenizer(folder: Path) -> int:
    """``text_tokenizer/``: Qwen2 BPE with Qwen2.5-VL's and Qwen3's added tokens, eos ``<|im_end|>``, and
    :data:`DEMO_CHAT_TEMPLATE`. Returns its vocabulary size."""
    from vidax.encoders.qwen2_tokenizer import QWEN2_5_VL_ADDED_TOKENS, Qwen2Tokenizer, write_qwen2_tokenizer

    path = write_qwen2_tokenizer(folder / "text_tokenizer", _corpus(), num_merges=300,
                                 added_tokens=QWEN2_5_VL_ADDED_TOKENS + QWEN3_EXTRA_TOKENS,
                                 chat_template=DEMO_CHAT_TEMPLATE)
    return Qwen2Tokenizer.from_folder(path).vocab_size


def write_vae(folder: Path, config: dict, rng: np.random.Generator) -> None:
    cfg = wan_vae.WanVAEConfig.from_dict(config)
    save_component(folder / "vae", "diffusion_pytorch_model.safetensors",
                   random_state_dict(wan_vae.vae_keymap(cfg), wan_vae.vae_specs(cfg), rng), config)


def write_demo_checkpoint(folder: str | Path, *, seed: int = 0, edge: bool = False, distilled: bool = False,
                          distilled_sigmas=DEMO_DISTILLED_SIGMAS, transformer_overrides: dict | None = None) -> Path:
    """Write a tiny random-weight Cosmos3 folder (see the module docstring).

    Args:
      folder: the folder to create (must not exist, or be empty).
      seed: the weights' random seed.
      edge: Edge's architecture variants and the native flow grid instead of Nano's.
      distilled: a distilled folder (``modular_model_index.json``, stochastic flow Euler on ``distilled_sigmas``).
      transformer_overrides: config.json values replacing the tiny defaults (tests, benchmarks).

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
    vocab = write_tokenizer(folder)
    tcfg = transformer_config(vocab, edge=edge, **(transformer_overrides or {}))
    save_component(folder / "transformer", "diffusion_pytorch_model.safetensors", random_transformer(tcfg, rng),
                   tcfg)
    write_vae(folder, vae_config(), rng)
    (folder / "scheduler").mkdir()
    if distilled:
        write_json(folder / "scheduler" / "scheduler_config.json", distilled_scheduler_config())
        write_json(folder / "modular_model_index.json", modular_index(folder, distilled_sigmas))
        (folder / DEMO_MARKER).write_text(demo_marker_text("Cosmos3 (distilled)"))
        return folder
    write_json(folder / "scheduler" / "scheduler_config.json", scheduler_config(edge=edge))
    write_json(folder / "model_index.json", {
        "_class_name": "Cosmos3OmniPipeline", "_diffusers_version": DIFFUSERS_VERSION,
        "default_use_system_prompt": True, "enable_safety_checker": False, "use_native_flow_schedule": edge,
        "safety_checker": [None, None], "sound_tokenizer": [None, None],
        "scheduler": ["diffusers", "UniPCMultistepScheduler"],
        "text_tokenizer": ["transformers", "Qwen2Tokenizer"],
        "transformer": ["diffusers", "Cosmos3OmniTransformer"],
        "vae": ["diffusers", "AutoencoderKLWan"]})
    (folder / DEMO_MARKER).write_text(demo_marker_text("Cosmos3"))
    return folder


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Write a tiny random-weight Cosmos3 checkpoint (no PyTorch).")
    p.add_argument("folder")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--edge", action="store_true", help="Edge's architecture and native flow grid")
    p.add_argument("--distilled", action="store_true", help="a distilled folder (4 fixed steps)")
    args = p.parse_args(argv)
    print(write_demo_checkpoint(args.folder, seed=args.seed, edge=args.edge, distilled=args.distilled))
    return 0


if __name__ == "__main__":
    sys.exit(main())
