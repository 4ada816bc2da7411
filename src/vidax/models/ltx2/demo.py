"""A tiny LTX-2.5 demo / fixture checkpoint, written without PyTorch.

``write_demo_checkpoint(folder)`` writes a complete diffusers-layout folder as ``LTX2Pipeline.save_pretrained``
does (``model_index.json``, ``text_encoder/``, ``tokenizer/``, ``connectors/``, ``transformer/``, ``vae/``,
``audio_vae/``, ``vocoder/``, ``scheduler/``; and ``diffusion_decoder/``, as diffusers' converter writes LTX-2.5's
diffusion VAE decoder) with random weights under the reference's tensor names and the
config.json keys diffusers 0.42.1 / transformers 5.24 write. The architecture is LTX-2.5's at a tiny size: a Gemma 4
unified text tower (sliding and full layers, keys reused as values on the full ones), per-modality text projections
and gated connectors, the audio-video transformer with gated attention, prompt AdaLN, split RoPE, no video FFN bias
and the keyframe embedding; the video VAE with LTX-2.3 / 2.5's block structure (32x space, 8x time); the audio VAE
(16 kHz, hop 160) and the BWE vocoder (16 kHz first stage, x3 bandwidth extension: a 48 kHz stereo track); the dev
scheduler. The tokenizer is a word-level ``tokenizers`` model with Gemma's special tokens (``<pad>`` 0, ``<eos>`` 1,
``<bos>`` 2), built locally.

The weights are random: the video and the sound are structured noise. The folder exercises the real loading and
generation path end to end; a real checkpoint works by changing only the folder.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

from vidax.checkpoint.demo import DEMO_MARKER, DIFFUSERS_VERSION, TRANSFORMERS_VERSION, demo_marker_text
from vidax.checkpoint.writer import save_component, to_state_dict, write_json

#: ``vidax demo ltx-2.5``'s generation settings (the family's check accepts them: multiples of 32, 8k+1 frames;
#: spatio-temporal guidance on the tiny transformer's last block, the release's default being block 28).
DEMO_SETTINGS = dict(height=64, width=64, num_frames=9, num_inference_steps=4, guidance_scale=3.0, dtype="float32",
                     spatio_temporal_guidance_blocks=(1,))

SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>")  # Gemma's ids: pad 0, eos 1, bos 2
WORDS = ("a majestic red panda climbing bamboo tree in the snow 4k cat dog runs on beach at sunset , . robot "
         "walks through city night rain").split()
VOCAB_SIZE = 64

_PERIOD = ["sliding_attention", "sliding_attention", "full_attention"]
TEXT_CONFIG = {
    "attention_bias": False, "attention_dropout": 0.0, "attention_k_eq_v": True, "bos_token_id": 2, "eos_token_id": 1,
    "final_logit_softcapping": None, "head_dim": 8, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 32,
    "initializer_range": 0.02, "intermediate_size": 64, "layer_types": _PERIOD * 2, "max_position_embeddings": 262144,
    "model_type": "gemma4_unified_text", "num_attention_heads": 4, "num_hidden_layers": 6, "num_key_value_heads": 2,
    "num_kv_shared_layers": 0, "pad_token_id": 0,
    "per_layer_config": {"2": {"head_dim": 16, "num_key_value_heads": 1},
                         "5": {"head_dim": 16, "num_key_value_heads": 1}},
    "rms_norm_eps": 1e-06,
    "rope_parameters": {"full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0,
                                           "rope_type": "proportional"},
                        "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}},
    "sliding_window": 4, "tie_word_embeddings": True, "use_bidirectional_attention": "vision", "use_cache": True,
    "use_double_wide_mlp": False, "vocab_size": VOCAB_SIZE,
}
TEXT_ENCODER_CONFIG = {
    "architectures": ["Gemma4UnifiedForConditionalGeneration"], "audio_config": None, "audio_token_id": 258881,
    "boa_token_id": 256000, "boi_token_id": 255999, "dtype": "float32", "eoa_token_index": 258883,
    "eoi_token_id": 258882, "image_token_id": 258880, "initializer_range": 0.02, "model_type": "gemma4_unified",
    "text_config": TEXT_CONFIG, "tie_word_embeddings": True, "transformers_version": TRANSFORMERS_VERSION,
    "video_token_id": 258884, "vision_config": None,
}
CONNECTORS_CONFIG = {
    "_class_name": "LTX2TextConnectors", "_diffusers_version": DIFFUSERS_VERSION,
    "audio_connector_attention_head_dim": 8, "audio_connector_num_attention_heads": 2,
    "audio_connector_num_layers": 1, "audio_connector_num_learnable_registers": 4, "audio_gated_attn": True,
    "audio_hidden_dim": 16, "caption_channels": 32, "causal_temporal_positioning": False,
    "connector_rope_base_seq_len": 32, "per_modality_projections": True, "proj_bias": True,
    "rope_double_precision": True, "rope_theta": 10000.0, "rope_type": "split", "text_proj_in_factor": 7,
    "video_connector_attention_head_dim": 8, "video_connector_num_attention_heads": 2,
    "video_connector_num_layers": 1, "video_connector_num_learnable_registers": 4, "video_gated_attn": True,
    "video_hidden_dim": 16,
}
TRANSFORMER_CONFIG = {
    "_class_name": "LTX2VideoTransformer3DModel", "_diffusers_version": DIFFUSERS_VERSION,
    "activation_fn": "gelu-approximate", "attention_bias": True, "attention_head_dim": 8, "attention_out_bias": True,
    "audio_attention_head_dim": 8, "audio_cross_attention_dim": 16, "audio_cross_attn_mod": True,
    "audio_ff_bias": True, "audio_gated_attn": True, "audio_hop_length": 160, "audio_in_channels": 16,
    "audio_num_attention_heads": 2, "audio_out_channels": 16, "audio_patch_size": 1, "audio_patch_size_t": 1,
    "audio_pos_embed_max_pos": 20, "audio_sampling_rate": 16000, "audio_scale_factor": 4, "base_height": 2048,
    "base_width": 2048, "caption_channels": 32, "causal_offset": 1, "cross_attention_dim": 16,
    "cross_attn_mod": True, "cross_attn_timestep_scale_multiplier": 1000, "ff_bias": False, "gated_attn": True,
    "in_channels": 8, "norm_elementwise_affine": False, "norm_eps": 1e-06, "num_attention_heads": 2,
    "num_layers": 2, "out_channels": 8, "patch_size": 1, "patch_size_t": 1, "perturbed_attn": True,
    "pos_embed_max_pos": 20, "qk_norm": "rms_norm_across_heads", "rope_double_precision": True, "rope_theta": 10000.0,
    "rope_type": "split", "timestep_scale_multiplier": 1000, "use_keyframes_abs_pos_embedding": True,
    "use_prompt_adaln_single": True, "use_prompt_embeddings": False, "vae_scale_factors": [8, 32, 32],
}
VAE_CONFIG = {
    "_class_name": "AutoencoderKLLTX2Video", "_diffusers_version": DIFFUSERS_VERSION,
    "block_out_channels": [8, 16, 16, 16], "decoder_block_out_channels": [8, 16, 16, 16], "decoder_causal": False,
    "decoder_inject_noise": [False] * 5, "decoder_layers_per_block": [1, 1, 1, 1, 1],
    "decoder_spatial_padding_mode": "zeros", "decoder_spatio_temporal_scaling": [True] * 4,
    "down_block_types": ["LTX2VideoDownBlock3D"] * 4,
    "downsample_type": ["spatial", "temporal", "spatiotemporal", "spatiotemporal"], "encoder_causal": True,
    "encoder_spatial_padding_mode": "zeros", "in_channels": 3, "latent_channels": 8,
    "layers_per_block": [1, 1, 1, 1, 1], "out_channels": 3, "patch_size": 4, "patch_size_t": 1,
    "resnet_norm_eps": 1e-06, "scaling_factor": 1.0, "spatial_compression_ratio": 32,
    "spatio_temporal_scaling": [True] * 4, "temporal_compression_ratio": 8, "timestep_conditioning": False,
    "upsample_factor": [2, 2, 1, 2], "upsample_residual": [False] * 4,
    "upsample_type": ["spatiotemporal", "spatiotemporal", "temporal", "spatial"],
}
AUDIO_VAE_CONFIG = {
    "_class_name": "AutoencoderKLLTX2Audio", "_diffusers_version": DIFFUSERS_VERSION, "attn_resolutions": None,
    "base_channels": 16, "causality_axis": "height", "ch_mult": [1, 2, 4], "double_z": True, "dropout": 0.0,
    "in_channels": 2, "is_causal": True, "latent_channels": 4, "mel_bins": 16, "mel_hop_length": 160,
    "mid_block_add_attention": False, "norm_type": "pixel", "num_res_blocks": 1, "output_channels": 2,
    "resolution": 256, "sample_rate": 16000,
}
VOCODER_CONFIG = {
    "_class_name": "LTX2VocoderWithBWE", "_diffusers_version": DIFFUSERS_VERSION, "act_fn": "snakebeta",
    "antialias": True, "antialias_kernel_size": 12, "antialias_ratio": 2, "bwe_act_fn": "snakebeta",
    "bwe_antialias": True, "bwe_antialias_kernel_size": 12, "bwe_antialias_ratio": 2, "bwe_final_act_fn": None,
    "bwe_final_bias": False, "bwe_hidden_channels": 16, "bwe_in_channels": 16, "bwe_leaky_relu_negative_slope": 0.1,
    "bwe_out_channels": 2, "bwe_resnet_dilations": [[1, 3]], "bwe_resnet_kernel_sizes": [3],
    "bwe_upsample_factors": [6, 5, 4, 2], "bwe_upsample_kernel_sizes": [12, 11, 8, 4], "filter_length": 128,
    "final_act_fn": None, "final_bias": False, "hidden_channels": 32, "hop_length": 80, "in_channels": 32,
    "input_sampling_rate": 16000, "leaky_relu_negative_slope": 0.1, "num_mel_channels": 8, "out_channels": 2,
    "output_sampling_rate": 48000, "resnet_dilations": [[1, 3]], "resnet_kernel_sizes": [3],
    "upsample_factors": [5, 4, 4, 2], "upsample_kernel_sizes": [11, 8, 8, 4], "window_length": 128,
}

#: The diffusion VAE decoder at a tiny size with the release's structure (diffusers ``LTX2VideoDiffusionDecoderModel``
#: config keys; its converter's ``diffusion_decoder/`` folder): four upsamplers of strides (1,2,2) (2,1,1) (2,2,2)
#: (2,2,2) and patch 4 (the VAE's 32x space, 8x time, so it decodes the VAE's latents), one x0 step. The demo's 2x2x2
#: latents are under its size floor of 3 (kernels of 3): they are padded and cropped as upstream decodes them.
DIFFUSION_DECODER_CONFIG = {
    "_class_name": "LTX2VideoDiffusionDecoderModel", "_diffusers_version": DIFFUSERS_VERSION, "decoder_head_dim": 8,
    "decoder_model_output_type": "x0", "decoder_num_inference_steps": 1, "decoder_stage5_kernel": [3, 5, 5],
    "decoder_stage_channels": [64, 32, 16, 16, 8], "decoder_stage_depths": [1, 1, 1, 1, 2],
    "decoder_stage_kernels": [[3, 3, 3]] * 4, "decoder_t_emb_dim": 32, "decoder_timestep_scale_multiplier": 1000.0,
    "decoder_upsample_channel_reductions": [2, 2, 1, 2],
    "decoder_upsample_strides": [[1, 2, 2], [2, 1, 1], [2, 2, 2], [2, 2, 2]], "latent_channels": 8,
    "out_channels": 3, "patch_size": 4, "scaling_factor": 1.0, "spatial_compression_ratio": 32,
    "temporal_compression_ratio": 8,
}


def scheduler_config(distilled: bool = False) -> dict:
    """The ``FlowMatchEulerDiscreteScheduler`` config diffusers' converter writes (dev, or ``distilled``)."""
    from vidax.models.ltx2.layout import DEV_SCHEDULER, DISTILLED_SCHEDULER

    return dict(DISTILLED_SCHEDULER if distilled else DEV_SCHEDULER)


MODEL_INDEX = {
    "_class_name": "LTX2Pipeline", "_diffusers_version": DIFFUSERS_VERSION,
    "audio_vae": ["diffusers", "AutoencoderKLLTX2Audio"], "connectors": ["ltx2", "LTX2TextConnectors"],
    "duration_head": [None, None], "processor": [None, None], "prompt_enhancer": [None, None],
    "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
    "text_encoder": ["transformers", "Gemma4UnifiedForConditionalGeneration"],
    "tokenizer": ["transformers", "TokenizersBackend"], "transformer": ["diffusers", "LTX2VideoTransformer3DModel"],
    "vae": ["diffusers", "AutoencoderKLLTX2Video"], "vocoder": ["ltx2", "LTX2VocoderWithBWE"],
}


def write_tokenizer(folder: Path) -> None:
    """``tokenizer/``: a word-level ``tokenizers`` model (lower-cased, punctuation split) over :data:`WORDS` with
    Gemma's special tokens, padded to :data:`VOCAB_SIZE` entries, and the ``tokenizer_config.json`` transformers 5.24
    writes for it."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    names = list(SPECIALS) + list(dict.fromkeys(WORDS))
    names += [f"<unused{i}>" for i in range(VOCAB_SIZE - len(names))]
    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(names)}, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(list(SPECIALS))
    folder.mkdir(parents=True)
    tok.save(str(folder / "tokenizer.json"))
    write_json(folder / "tokenizer_config.json", {
        "backend": "tokenizers", "bos_token": "<bos>", "eos_token": "<eos>", "model_max_length": 1024,
        "pad_token": "<pad>", "tokenizer_class": "TokenizersBackend", "unk_token": "<unk>"})


def _gemma_state_dict(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The text tower's weights under transformers' names (``model.language_model.layers.{i}.*``)."""
    from vidax.checkpoint.demo import random_params
    from vidax.encoders.gemma import STACKS, GemmaConfig, gemma_keymap, gemma_specs

    cfg = GemmaConfig.from_dict(TEXT_ENCODER_CONFIG)
    specs = gemma_specs(cfg)
    params = random_params(specs, rng)
    params["embed_tokens"]["embedding"] *= 0.1
    state = to_state_dict(params, gemma_keymap(cfg), specs)
    index: dict[tuple[str, int], int] = {}
    counts = dict.fromkeys(STACKS.values(), 0)
    for i, kind in enumerate(cfg.layer_types):
        index[(STACKS[kind], counts[STACKS[kind]])] = i
        counts[STACKS[kind]] += 1
    out = {}
    prefix = "model.language_model."
    for key, value in state.items():
        rest = key[len(prefix):]
        stack, _, tail = rest.partition(".")
        if stack in counts:
            k, _, tail = tail.partition(".")
            key = f"{prefix}layers.{index[(stack, int(k))]}.{tail}"
        out[key] = value
    return out


def _component(name: str, config: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    from vidax.checkpoint.demo import random_params
    from vidax.models.ltx2.layout import component_spec

    _, specs, keymap = component_spec(name, config)
    params = random_params(specs, rng)
    return to_state_dict(params, keymap, specs)


def _vocoder_state_dict(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Vocoder weights that keep the waveform finite and O(1): kernels ~ 1/sqrt(fan_in), SnakeBeta's log-scale
    ``alpha`` / ``beta`` 0, low-pass filters a normalised Hann window, the STFT basis the Hann-windowed DFT, a
    non-negative mel basis."""
    state = _component("vocoder", VOCODER_CONFIG, rng)
    for key, value in state.items():
        if key.endswith(("alpha", "beta")):
            value = np.zeros_like(value)
        elif key.endswith("filter"):
            w = np.hanning(value.shape[-1] + 2)[1:-1]
            value = (w / w.sum()).reshape(value.shape)
        elif key.endswith("mel_basis"):
            value = np.abs(value) / value.shape[1]
        elif key.endswith("forward_basis"):
            n = VOCODER_CONFIG["filter_length"]
            freqs = np.arange(n // 2 + 1)[:, None] * np.arange(n)[None, :] * 2 * np.pi / n
            window = np.hanning(n)
            value = np.concatenate([np.cos(freqs), -np.sin(freqs)])[:, None, :] * window
        elif key.endswith("weight") and value.ndim == 3:
            value = rng.standard_normal(value.shape) / math.sqrt(value.shape[1] * value.shape[2])
        state[key] = np.asarray(value, np.float32)
    return state


def _statistics(state: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Latent statistics a real VAE would have: small means, standard deviations near 1."""
    for key in [k for k in state if k.endswith(("latents_mean", "latents_std"))]:
        shape = state[key].shape
        noise = rng.standard_normal(shape)
        value = 0.1 * noise if key.endswith("mean") else 1.0 + 0.1 * np.abs(noise)
        state[key] = value.astype(np.float32)
    return state


def _diffusion_decoder_state_dict(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return _statistics(_component("diffusion_decoder", DIFFUSION_DECODER_CONFIG, rng), rng)


def write_release_diffusion_vae(path: str | Path, *, seed: int = 0) -> Path:
    """Write the demo's diffusion decoder as Lightricks' release diffusion VAE file: upstream ``DiffusionVideoDecoder``
    names (fused ``qkv``, ``proj``, ``q_norm`` / ``k_norm``, ``t_embedder.mlp``, ``per_channel_statistics``; no static
    gates) and the architecture in the ``config`` metadata (``vae`` in upstream's keys), the inverse of
    :class:`vidax.models.ltx2.diffusion_decoder.ReleaseDiffusionDecoderReader` and
    :meth:`~vidax.models.ltx2.diffusion_decoder.LTX2DiffusionDecoderConfig.from_release`. A fixture of the release
    layout, as the demo folder is one of diffusers'.

    Returns:
      the file. Raises: FileExistsError: ``path`` exists.
    """
    import json

    from safetensors.numpy import save_file

    from vidax.models.ltx2.diffusion_decoder import RELEASE_RENAMES

    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} exists; pass a new file name")
    state = _diffusion_decoder_state_dict(np.random.default_rng(seed))
    out = {"per_channel_statistics.mean-of-means": state.pop("latents_mean"),
           "per_channel_statistics.std-of-means": state.pop("latents_std")}
    for key, value in state.items():
        name = key
        for old, new in RELEASE_RENAMES:
            name = name.replace(new, old)
        if ".attn.to_k." in name or ".attn.to_v." in name:
            continue
        if ".attn.to_q." in name:
            value = np.concatenate([value, state[key.replace("to_q", "to_k")], state[key.replace("to_q", "to_v")]])
            name = name.replace(".to_q.", ".qkv.")
        out[name] = value
    c = DIFFUSION_DECODER_CONFIG
    vae = {"_class_name": "CausalDiffusionVAE", "model_output_type": c["decoder_model_output_type"], "decoder": {
        "in_channels": c["latent_channels"], "out_channels": c["out_channels"], "patch_size": c["patch_size"],
        "head_dim": c["decoder_head_dim"], "stage_channels": c["decoder_stage_channels"],
        "stage_depths": c["decoder_stage_depths"], "stage_kernels": c["decoder_stage_kernels"],
        "upsamples": [[s, r] for s, r in zip(c["decoder_upsample_strides"], c["decoder_upsample_channel_reductions"])],
        "stage5_kernel": c["decoder_stage5_kernel"], "t_emb_dim": c["decoder_t_emb_dim"],
        "timestep_scale_multiplier": c["decoder_timestep_scale_multiplier"],
        "default_num_inference_steps": c["decoder_num_inference_steps"]}}
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: np.ascontiguousarray(v, np.float32) for k, v in out.items()}, str(path),
              metadata={"config": json.dumps({"vae": vae}), "model_version": "2.5.0"})
    return path


def write_demo_checkpoint(folder: str | Path, *, seed: int = 0, distilled: bool = False,
                          transformer_overrides: dict | None = None, diffusion_decoder: bool = True) -> Path:
    """Write a tiny random-weight LTX-2.5 folder (see the module docstring).

    Args:
      folder: the folder to create (must not exist, or be empty).
      seed: the weights' random seed.
      distilled: the distilled scheduler (no dynamic shifting) instead of the dev one.
      transformer_overrides: config.json values replacing the tiny transformer's (tests, benchmarks).
      diffusion_decoder: also write the diffusion VAE decoder (``diffusion_decoder/``: ``--decoder diffusion``).

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
    write_tokenizer(folder / "tokenizer")
    save_component(folder / "text_encoder", "model.safetensors", _gemma_state_dict(rng), None)
    write_json(folder / "text_encoder" / "config.json", TEXT_ENCODER_CONFIG)
    write_json(folder / "text_encoder" / "generation_config.json",
               {"bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0, "transformers_version": TRANSFORMERS_VERSION})
    tcfg = {**TRANSFORMER_CONFIG, **(transformer_overrides or {})}
    for name, config in (("connectors", CONNECTORS_CONFIG), ("transformer", tcfg)):
        save_component(folder / name, "diffusion_pytorch_model.safetensors", _component(name, config, rng), config)
    for name, config in (("vae", VAE_CONFIG), ("audio_vae", AUDIO_VAE_CONFIG)):
        save_component(folder / name, "diffusion_pytorch_model.safetensors",
                       _statistics(_component(name, config, rng), rng), config)
    save_component(folder / "vocoder", "diffusion_pytorch_model.safetensors", _vocoder_state_dict(rng),
                   VOCODER_CONFIG)
    if diffusion_decoder:
        save_component(folder / "diffusion_decoder", "diffusion_pytorch_model.safetensors",
                       _diffusion_decoder_state_dict(rng), DIFFUSION_DECODER_CONFIG)
    (folder / "scheduler").mkdir()
    write_json(folder / "scheduler" / "scheduler_config.json", scheduler_config(distilled))
    write_json(folder / "model_index.json", MODEL_INDEX)
    (folder / DEMO_MARKER).write_text(demo_marker_text("LTX-2.5"))
    return folder


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Write a tiny random-weight LTX-2.5 checkpoint (no PyTorch).")
    p.add_argument("folder")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--distilled", action="store_true", help="the distilled scheduler")
    args = p.parse_args(argv)
    print(write_demo_checkpoint(args.folder, seed=args.seed, distilled=args.distilled))
    return 0


if __name__ == "__main__":
    sys.exit(main())
