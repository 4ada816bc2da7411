"""LTX-2.5 checkpoint layouts (vidax.models.ltx2.layout / release): a diffusers folder saved by the reference classes
(LTX2Pipeline.save_pretrained) resolves and every component loads exactly as the component loaders load it; the
release single file, written from that save under upstream's names (the inverse of diffusers'
scripts/convert_ltx2_to_diffusers.py rename tables, restated below and checked to map every name back) with
upstream-style metadata, resolves beside its Gemma folder and loads the identical parameters and configurations."""

import json
import re
import shutil

import jax
import numpy as np
import pytest
import torch
from safetensors.numpy import load_file, save_file

from vidax.checkpoint.errors import CheckpointError
from vidax.models.ltx2.layout import resolve_checkpoint

GEMMA_TEXT = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=6, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=8, global_head_dim=16, num_global_key_value_heads=1,
                  sliding_window=4, attention_k_eq_v=True,
                  layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2,
                  rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                   "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                      "rope_theta": 1e6}})
# Release-expressible tiny VAE: LTX-2.3/2.5's block kinds; encoder widths latent * 2, 4, 8, 8; decoder base 8.
VAE = dict(block_out_channels=(16, 32, 64, 64), layers_per_block=(1, 1, 1, 1, 1), latent_channels=8,
           decoder_block_out_channels=(16, 32, 32, 64), decoder_layers_per_block=(1, 1, 2, 1, 1),
           spatio_temporal_scaling=(True,) * 4, decoder_spatio_temporal_scaling=(True,) * 4,
           decoder_inject_noise=(False,) * 5,
           downsample_type=("spatial", "temporal", "spatiotemporal", "spatiotemporal"),
           upsample_type=("spatiotemporal", "spatiotemporal", "temporal", "spatial"), upsample_residual=(False,) * 4,
           upsample_factor=(2, 2, 1, 2), timestep_conditioning=False, patch_size=4, encoder_causal=True,
           decoder_causal=False, encoder_spatial_padding_mode="zeros", decoder_spatial_padding_mode="zeros",
           spatial_compression_ratio=32, temporal_compression_ratio=8)
COMPONENTS = ("text_encoder", "connectors", "transformer", "vae", "audio_vae", "vocoder")


@pytest.fixture(scope="module")
def diffusers_folder(tmp_path_factory):
    from diffusers import (AutoencoderKLLTX2Audio, AutoencoderKLLTX2Video, FlowMatchEulerDiscreteScheduler,
                           LTX2Pipeline, LTX2VideoTransformer3DModel)
    from diffusers.pipelines.ltx2 import LTX2TextConnectors, LTX2VocoderWithBWE
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import Gemma4UnifiedConfig, Gemma4UnifiedForConditionalGeneration, PreTrainedTokenizerFast

    torch.manual_seed(0)
    words = "<pad> <eos> <bos> <unk> a red fox jumps over the lazy dog".split()
    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                        unk_token="<unk>")
    text_encoder = Gemma4UnifiedForConditionalGeneration(Gemma4UnifiedConfig(text_config=GEMMA_TEXT)).eval()
    connectors = LTX2TextConnectors(
        caption_channels=32, text_proj_in_factor=7, video_connector_num_attention_heads=2,
        video_connector_attention_head_dim=8, video_connector_num_layers=1,
        video_connector_num_learnable_registers=128, audio_connector_num_attention_heads=2,
        audio_connector_attention_head_dim=8, audio_connector_num_layers=1,
        audio_connector_num_learnable_registers=128, connector_rope_base_seq_len=32, rope_type="split",
        per_modality_projections=True, video_hidden_dim=16, audio_hidden_dim=16, proj_bias=True,
        video_gated_attn=True, audio_gated_attn=True)
    transformer = LTX2VideoTransformer3DModel(
        in_channels=8, out_channels=8, num_attention_heads=2, attention_head_dim=8, cross_attention_dim=16,
        audio_in_channels=16, audio_out_channels=16, audio_num_attention_heads=2, audio_attention_head_dim=8,
        audio_cross_attention_dim=16, num_layers=2, caption_channels=32, gated_attn=True, audio_gated_attn=True,
        cross_attn_mod=True, audio_cross_attn_mod=True, rope_type="split", ff_bias=False,
        use_prompt_embeddings=False, use_prompt_adaln_single=True, use_keyframes_abs_pos_embedding=True,
        perturbed_attn=True)
    vae = AutoencoderKLLTX2Video(**VAE)
    audio_vae = AutoencoderKLLTX2Audio(base_channels=16, ch_mult=(1, 2, 4), num_res_blocks=1, latent_channels=4,
                                       mel_bins=16, attn_resolutions=None, mid_block_add_attention=False)
    vocoder = LTX2VocoderWithBWE(
        in_channels=32, hidden_channels=32, upsample_kernel_sizes=[11, 8, 8, 4], upsample_factors=[5, 4, 4, 2],
        resnet_kernel_sizes=[3], resnet_dilations=[[1, 3]], final_act_fn=None, final_bias=False,
        bwe_in_channels=16, bwe_hidden_channels=16, bwe_upsample_kernel_sizes=[12, 11, 8, 4],
        bwe_upsample_factors=[6, 5, 4, 2], bwe_resnet_kernel_sizes=[3], bwe_resnet_dilations=[[1, 3]],
        bwe_final_bias=False, filter_length=128, hop_length=80, window_length=128, num_mel_channels=8)
    with torch.no_grad():  # non-trivial statistics and tables (the reference initialises some to constants)
        for model in (vae, audio_vae, transformer):
            for p in model.parameters():
                p.add_(0.1 * torch.randn_like(p))
        for name, buf in list(vae.named_buffers()) + list(audio_vae.named_buffers()):
            if "latents" in name:
                buf.copy_(torch.rand_like(buf) + 0.5)
    scheduler = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True, base_shift=0.95, max_shift=2.05,
                                                base_image_seq_len=1024, max_image_seq_len=4096, shift_terminal=0.1)
    folder = tmp_path_factory.mktemp("ltx2") / "diffusers"
    LTX2Pipeline(scheduler=scheduler, vae=vae, audio_vae=audio_vae, text_encoder=text_encoder, tokenizer=tokenizer,
                 connectors=connectors, transformer=transformer, vocoder=vocoder).save_pretrained(folder)
    return folder


def _same(a, b) -> None:
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb
    for x, y in zip(la, lb):
        assert np.asarray(x).dtype == np.asarray(y).dtype and np.array_equal(np.asarray(x), np.asarray(y))


@pytest.fixture(scope="module")
def diffusers_params(diffusers_folder):
    ckpt = resolve_checkpoint(diffusers_folder)
    return {n: ckpt.load(n, parts=None) if n in ("vae", "audio_vae") else ckpt.load(n) for n in COMPONENTS}


def test_diffusers_folder_loads_as_the_component_loaders(diffusers_folder, diffusers_params):
    from vidax.encoders.gemma import load_gemma
    from vidax.models.ltx2.audio_vae import load_audio_vae
    from vidax.models.ltx2.connectors import load_connectors
    from vidax.models.ltx2.keymap import load_transformer
    from vidax.models.ltx2.vae import load_vae
    from vidax.models.ltx2.vocoder import load_vocoder

    f = diffusers_folder
    ckpt = resolve_checkpoint(f)
    assert (ckpt.layout, ckpt.tasks, ckpt.has_audio, ckpt.has_diffusion_decoder, ckpt.is_distilled) == (
        "diffusers", ("t2v", "i2v"), True, False, False)
    assert ckpt.scheduler_config["shift_terminal"] == 0.1
    direct = {"text_encoder": load_gemma(f / "text_encoder"), "connectors": load_connectors(f / "connectors"),
              "transformer": load_transformer(f / "transformer"),
              "vae": load_vae(f / "vae", parts=None)[::-1], "audio_vae": load_audio_vae(f / "audio_vae")[::-1],
              "vocoder": load_vocoder(f / "vocoder")[::-1]}
    for name in COMPONENTS:
        params, cfg = diffusers_params[name]
        assert cfg == direct[name][1], name
        _same(params, direct[name][0])
    ids, mask = ckpt.tokenizer()(["a red fox"], 6)
    assert ids.tolist() == [[0, 0, 2, 4, 5, 6]] and mask.tolist() == [[0, 0, 1, 1, 1, 1]]
    # generation loads the VAEs' decoder halves by default
    assert set(ckpt.load("vae")[0]) == {"decoder", "latents_mean", "latents_std"}


# ------------------------------------------------------------------------------------------- release single file
# diffusers' scripts/convert_ltx2_to_diffusers.py (huggingface/diffusers main), restated: the 2.5 rename tables
# (str.replace in dict order) and special cases, upstream name -> diffusers name.
LTX_2_3_TRANSFORMER_KEYS_RENAME_DICT = {
    "patchify_proj": "proj_in", "audio_patchify_proj": "audio_proj_in",
    "av_ca_video_scale_shift_adaln_single": "av_cross_attn_video_scale_shift",
    "av_ca_a2v_gate_adaln_single": "av_cross_attn_video_a2v_gate",
    "av_ca_audio_scale_shift_adaln_single": "av_cross_attn_audio_scale_shift",
    "av_ca_v2a_gate_adaln_single": "av_cross_attn_audio_v2a_gate",
    "scale_shift_table_a2v_ca_video": "video_a2v_cross_attn_scale_shift_table",
    "scale_shift_table_a2v_ca_audio": "audio_a2v_cross_attn_scale_shift_table",
    "q_norm": "norm_q", "k_norm": "norm_k",
    "audio_prompt_adaln_single": "audio_prompt_adaln", "prompt_adaln_single": "prompt_adaln",
}
LTX_2_3_CONNECTORS_KEYS_RENAME_DICT = {
    "connectors.": "", "video_embeddings_connector": "video_connector", "audio_embeddings_connector": "audio_connector",
    "transformer_1d_blocks": "transformer_blocks",
    "text_embedding_projection.audio_aggregate_embed": "audio_text_proj_in",
    "text_embedding_projection.video_aggregate_embed": "video_text_proj_in", "q_norm": "norm_q", "k_norm": "norm_k",
}
LTX_2_3_VIDEO_VAE_RENAME_DICT = {
    "down_blocks.0": "down_blocks.0", "down_blocks.1": "down_blocks.0.downsamplers.0", "down_blocks.2": "down_blocks.1",
    "down_blocks.3": "down_blocks.1.downsamplers.0", "down_blocks.4": "down_blocks.2",
    "down_blocks.5": "down_blocks.2.downsamplers.0", "down_blocks.6": "down_blocks.3",
    "down_blocks.7": "down_blocks.3.downsamplers.0", "down_blocks.8": "mid_block",
    "up_blocks.0": "mid_block", "up_blocks.1": "up_blocks.0.upsamplers.0", "up_blocks.2": "up_blocks.0",
    "up_blocks.3": "up_blocks.1.upsamplers.0", "up_blocks.4": "up_blocks.1", "up_blocks.5": "up_blocks.2.upsamplers.0",
    "up_blocks.6": "up_blocks.2", "last_time_embedder": "time_embedder", "last_scale_shift_table": "scale_shift_table",
    "res_blocks": "resnets", "per_channel_statistics.mean-of-means": "latents_mean",
    "per_channel_statistics.std-of-means": "latents_std",
    "up_blocks.7": "up_blocks.3.upsamplers.0", "up_blocks.8": "up_blocks.3",
}
LTX_2_0_AUDIO_VAE_RENAME_DICT = {"per_channel_statistics.mean-of-means": "latents_mean",
                                 "per_channel_statistics.std-of-means": "latents_std"}
LTX_2_3_VOCODER_RENAME_DICT = {"resblocks": "resnets", "conv_pre": "conv_in", "conv_post": "conv_out",
                               "act_post": "act_out", "downsample.lowpass": "downsample"}
CONNECTOR_PREFIXES = ("video_embeddings_connector", "audio_embeddings_connector", "transformer_1d_blocks",
                      "text_embedding_projection", "connectors.", "video_connector", "audio_connector", "text_proj_in")


def _replace(key, table):
    for old, new in table.items():
        key = key.replace(old, new)
    return key


def diffusers_name(key):
    """(component, diffusers key) of a release key, as the converter's main() splits and renames the file."""
    if key.startswith(("model.diffusion_model.", "text_embedding_projection.")):
        key = key.removeprefix("model.diffusion_model.")
        if key.startswith(CONNECTOR_PREFIXES):
            return "connectors", _replace(key, LTX_2_3_CONNECTORS_KEYS_RENAME_DICT)
        key = _replace(key, LTX_2_3_TRANSFORMER_KEYS_RENAME_DICT)
        for old, new in (("adaln_single.", "time_embed."), ("audio_adaln_single.", "audio_time_embed.")):
            if key.startswith(old):
                key = new + key[len(old):]
        return "transformer", key
    if key.startswith("vae."):
        return "vae", _replace(key.removeprefix("vae."), LTX_2_3_VIDEO_VAE_RENAME_DICT)
    if key.startswith("audio_vae."):
        return "audio_vae", _replace(key.removeprefix("audio_vae."), LTX_2_0_AUDIO_VAE_RENAME_DICT)
    if key.startswith("vocoder."):
        key = _replace(key.removeprefix("vocoder."), LTX_2_3_VOCODER_RENAME_DICT)
        return "vocoder", key.replace(".ups.", ".upsamplers.")
    raise AssertionError(key)


def _release_names(component, keys, folder):
    """Each diffusers key's release name: the rule of our release key map at the same parameter path (the name the
    converter must map back, checked by the caller)."""
    from vidax.models.ltx2.layout import component_spec
    from vidax.models.ltx2 import audio_vae as av, vae as lv, vocoder as voc
    from vidax.models.ltx2.connectors import connectors_release_keymap
    from vidax.models.ltx2.keymap import transformer_release_keymap

    config = json.loads((folder / component / "config.json").read_text())
    cfg, _, ours = component_spec(component, config)
    theirs = {"transformer": transformer_release_keymap, "connectors": connectors_release_keymap,
              "vae": lv.vae_release_keymap, "audio_vae": av.audio_vae_release_keymap,
              "vocoder": voc.vocoder_release_keymap}[component](cfg)
    by_path = {r.path: r.key for r in theirs.rules}
    out = {}
    for key in keys:
        found = ours.match(key)
        if found is None:  # a buffer the loader ignores (vocoder inverse STFT basis)
            assert ours.ignored(key), key
            out[key] = "vocoder." + key if component == "vocoder" else None
            continue
        rule, i = found
        out[key] = by_path[rule.path].replace("{i}", str(i)) if i is not None else by_path[rule.path]
    return out


def upstream_metadata(model_version="2.5.1"):
    """Upstream-style metadata of the tiny models (the keys ltx-core's configurators read)."""
    res = lambda n: ["res_x", {"num_layers": n}]  # noqa: E731
    config = {
        "transformer": {
            "dropout": 0.0, "attention_bias": True, "activation_fn": "gelu-approximate", "qk_norm": "rms_norm",
            "norm_elementwise_affine": False, "positional_embedding_type": "rope", "use_middle_indices_grid": True,
            "num_attention_heads": 2, "attention_head_dim": 8, "in_channels": 8, "out_channels": 8, "num_layers": 2,
            "cross_attention_dim": 16, "norm_eps": 1e-6, "positional_embedding_theta": 10000.0,
            "positional_embedding_max_pos": [20, 2048, 2048], "timestep_scale_multiplier": 1000,
            "audio_num_attention_heads": 2, "audio_attention_head_dim": 8, "audio_in_channels": 16,
            "audio_out_channels": 16, "audio_cross_attention_dim": 16, "audio_positional_embedding_max_pos": [20],
            "av_ca_timestep_scale_multiplier": 1000, "rope_type": "split", "frequencies_precision": "float64",
            "apply_gated_attention": True, "cross_attention_adaln": True, "use_prompt_adaln_single": True,
            "ff_bias": False, "audio_ff_bias": True, "use_keyframes_abs_pos_embedding": True, "caption_channels": 32,
            "caption_proj_before_connector": True, "caption_projection_first_linear": False,
            "caption_proj_input_norm": False, "caption_projection_second_linear": False,
            "connector_num_attention_heads": 2, "connector_attention_head_dim": 8, "connector_num_layers": 1,
            "audio_connector_num_attention_heads": 2, "audio_connector_attention_head_dim": 8,
            "audio_connector_num_layers": 1, "connector_apply_gated_attention": True,
            "connector_positional_embedding_max_pos": [32]},
        "vae": {
            "_class_name": "CausalVideoAutoencoder", "dims": 3, "latent_channels": 8, "patch_size": 4,
            "norm_layer": "pixel_norm", "latent_log_var": "uniform", "timestep_conditioning": False,
            "causal_decoder": False, "spatial_padding_mode": "zeros", "encoder_spatial_padding_mode": "zeros",
            "decoder_base_channels": 8,
            "encoder_blocks": [res(1), ["compress_space_res", {"multiplier": 2}], res(1),
                               ["compress_time_res", {"multiplier": 2}], res(1),
                               ["compress_all_res", {"multiplier": 2}], res(1),
                               ["compress_all_res", {"multiplier": 1}], res(1)],
            "decoder_blocks": [res(1), ["compress_all", {"multiplier": 2, "residual": False}], res(1),
                               ["compress_all", {"multiplier": 2, "residual": False}], res(2),
                               ["compress_time", {"multiplier": 1}], res(1), ["compress_space", {"multiplier": 2}],
                               res(1)]},
        "audio_vae": {
            "model": {"params": {"sampling_rate": 16000, "ddconfig": {
                "ch": 16, "out_ch": 2, "ch_mult": [1, 2, 4], "num_res_blocks": 1, "attn_resolutions": [],
                "in_channels": 2, "resolution": 256, "z_channels": 4, "norm_type": "pixel",
                "causality_axis": "height", "dropout": 0.0, "mid_block_add_attention": False, "mel_bins": 16,
                "double_z": True}}},
            "preprocessing": {"stft": {"hop_length": 160, "causal": True, "filter_length": 1024},
                              "mel": {"n_mel_channels": 16}}},
        "vocoder": {
            "vocoder": {"resblock": "AMP1", "stereo": True, "activation": "snakebeta", "upsample_initial_channel": 32,
                        "upsample_rates": [5, 4, 4, 2], "upsample_kernel_sizes": [11, 8, 8, 4],
                        "resblock_kernel_sizes": [3], "resblock_dilation_sizes": [[1, 3]],
                        "use_tanh_at_final": False, "use_bias_at_final": False},
            "bwe": {"resblock": "AMP1", "stereo": True, "activation": "snakebeta", "upsample_initial_channel": 16,
                    "upsample_rates": [6, 5, 4, 2], "upsample_kernel_sizes": [12, 11, 8, 4],
                    "resblock_kernel_sizes": [3], "resblock_dilation_sizes": [[1, 3]], "use_bias_at_final": False,
                    "n_fft": 128, "hop_length": 80, "num_mels": 8, "input_sampling_rate": 16000,
                    "output_sampling_rate": 48000}},
    }
    # sft_loader convention: every value a string, JSON-encoded where structured
    return {"config": json.dumps(config), "model_version": model_version,
            "gemma_source_checkpoint": json.dumps({"gemma_version": "gemma4_unified"})}


@pytest.fixture(scope="module")
def release_folder(diffusers_folder, tmp_path_factory):
    tensors = {}
    for component in ("connectors", "transformer", "vae", "audio_vae", "vocoder"):
        state = load_file(diffusers_folder / component / "diffusion_pytorch_model.safetensors")
        names = _release_names(component, state, diffusers_folder)
        for key, value in state.items():
            name = names[key]
            if name is None:
                continue
            assert diffusers_name(name) == (component, key), (name, key)  # the converter maps it back
            tensors[name] = value
    # upstream's extra statistics buffers, which the converter drops and vidax does not read
    tensors["vae.per_channel_statistics.channel"] = np.arange(8, dtype=np.float32)
    tensors["vae.per_channel_statistics.mean-of-stds"] = np.ones(8, np.float32)
    folder = tmp_path_factory.mktemp("ltx2") / "release"
    folder.mkdir()
    save_file(tensors, folder / "ltx-2.5-22b-dev.safetensors", metadata=upstream_metadata())
    shutil.copytree(diffusers_folder / "text_encoder", folder / "gemma-4-tiny")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(diffusers_folder / "tokenizer" / name, folder / "gemma-4-tiny" / name)
    return folder


def test_release_file_loads_identical_parameters(release_folder, diffusers_params):
    from vidax.models import registry

    ckpt = resolve_checkpoint(release_folder)
    assert (ckpt.layout, ckpt.version, ckpt.has_audio, ckpt.is_distilled) == ("release", (2, 5, 1), True, False)
    assert ckpt.folders["text_encoder"].name == "gemma-4-tiny"
    assert registry.family_of(release_folder).name == "ltx-2.5"
    for name in COMPONENTS:
        params, cfg = ckpt.load(name, parts=None) if name in ("vae", "audio_vae") else ckpt.load(name)
        ref_params, ref_cfg = diffusers_params[name]
        assert cfg == ref_cfg, name
        _same(params, ref_params)
    assert ckpt.tokenizer()(["a red fox"], 4)[0].tolist() == [[2, 4, 5, 6]]


def test_release_errors_name_the_fix(release_folder, tmp_path):
    # no Gemma folder beside the file
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "ltx-2.5-22b-dev.safetensors").symlink_to(release_folder / "ltx-2.5-22b-dev.safetensors")
    with pytest.raises(CheckpointError, match="no Gemma 4 text encoder.*text_encoder"):
        resolve_checkpoint(bare)
    # an LTX-2.3 file (Gemma 3)
    old = tmp_path / "old"
    old.mkdir()
    meta = upstream_metadata("2.3.0")
    del meta["gemma_source_checkpoint"]
    save_file({"model.diffusion_model.x": np.zeros(1, np.float32)}, old / "ltx-2.3-22b-dev.safetensors", metadata=meta)
    with pytest.raises(CheckpointError, match="Gemma 3"):
        resolve_checkpoint(old)
    # a metadata setting upstream refuses, named when the component is read
    bad = tmp_path / "bad"
    shutil.copytree(release_folder, bad, symlinks=True)
    config = json.loads(upstream_metadata()["config"])
    config["vae"]["encoder_blocks"][1] = ["attn", {}]
    save_file({"vae.encoder.conv_in.conv.weight": np.zeros((8, 48, 3, 3, 3), np.float32)},
              bad / "ltx-2.5-22b-dev.safetensors", metadata={**upstream_metadata(), "config": json.dumps(config)})
    with pytest.raises(ValueError, match=re.escape("vae.encoder_blocks[1] is 'attn'")):
        resolve_checkpoint(bad).load("vae")


@pytest.mark.parametrize("source", ["diffusers", "release"])
def test_convert_gives_bit_identical_parameters(source, diffusers_folder, release_folder, diffusers_params, tmp_path):
    """vidax convert of either layout loads the parameters the source loads (float32; bf16 transformer)."""
    from vidax.checkpoint.inspect import MISMATCH
    from vidax.models.ltx2.convert import convert_checkpoint
    from vidax.models.ltx2.inspection import inspect_checkpoint

    src = diffusers_folder if source == "diffusers" else release_folder
    report = inspect_checkpoint(src)
    assert not any(MISMATCH in line for line in report) and sum("filled exactly once" in r for r in report) == 6
    dst = tmp_path / "converted"
    summary = convert_checkpoint(src, dst, dtype="float32", vae_dtype="float32")
    assert summary["source_layout"] == source and set(summary["bytes"]) == set(COMPONENTS)
    ckpt = resolve_checkpoint(dst)
    assert ckpt.layout == "vidax" and ckpt.has_audio and ckpt.scheduler_config == resolve_checkpoint(
        src).scheduler_config
    for name in COMPONENTS:
        params, cfg = ckpt.load(name, parts=None) if name in ("vae", "audio_vae") else ckpt.load(name)
        assert cfg == diffusers_params[name][1], name
        _same(params, diffusers_params[name][0])
    assert ckpt.tokenizer()(["a red fox"], 4)[0].tolist() == [[2, 4, 5, 6]]
    # The converted (already stacked) blocks read straight into offload chunks, every per-block table included.
    from vidax.models.ltx2.sharding import param_shardings

    tcfg = diffusers_params["transformer"][1]
    chunked, _ = ckpt.load("transformer", shardings=param_shardings(tcfg, None, offload_chunk=1))
    for key in ("scale_shift_table", "audio_scale_shift_table"):
        rows = np.concatenate([np.asarray(c) for c in chunked["blocks"][key]])
        np.testing.assert_array_equal(rows, np.asarray(diffusers_params["transformer"][0]["blocks"][key]))
    if source == "diffusers":
        bf16 = tmp_path / "bf16"
        convert_checkpoint(src, bf16, dtype="bfloat16")
        _same(resolve_checkpoint(bf16).load("transformer", dtype="bfloat16")[0],
              resolve_checkpoint(src).load("transformer", dtype="bfloat16")[0])
        with pytest.raises(FileExistsError):
            convert_checkpoint(src, bf16)


def test_diffusion_decoder_locations(release_folder, diffusers_folder, tmp_path, monkeypatch):
    """A release diffusion VAE file beside the model file, and a diffusers diffusion_decoder/ folder, are found,
    loaded by the diffusion decoder module's matching loader, and carried through vidax convert."""
    from vidax.checkpoint.inspect import MISMATCH
    from vidax.models.ltx2 import diffusion_decoder
    from vidax.models.ltx2.convert import convert_checkpoint
    from vidax.models.ltx2.demo import DIFFUSION_DECODER_CONFIG, write_demo_checkpoint, write_release_diffusion_vae
    from vidax.models.ltx2.inspection import inspect_checkpoint

    # Which loader each location reaches (the loaders themselves: tests/test_ltx2_diffusion_decoder.py).
    calls = []
    monkeypatch.setattr(diffusion_decoder, "load_diffusion_decoder",
                        lambda where, dtype, **kw: calls.append(("diffusers", where.name)) or ({}, "cfg"))
    monkeypatch.setattr(diffusion_decoder, "load_release_diffusion_decoder",
                        lambda path, dtype, **kw: calls.append(("release", path.name)) or ({}, "c"))

    rel = tmp_path / "release"
    shutil.copytree(release_folder, rel)
    assert not resolve_checkpoint(rel).has_diffusion_decoder
    with pytest.raises(CheckpointError, match="no diffusion decoder"):
        resolve_checkpoint(rel).load("diffusion_decoder")
    broken = tmp_path / "broken"
    shutil.copytree(release_folder, broken)
    write_release_diffusion_vae(rel / "ltx-2.5-diffusion-vae.safetensors")
    ckpt = resolve_checkpoint(rel)
    assert ckpt.has_diffusion_decoder and ckpt.layout == "release"
    ckpt.load("diffusion_decoder")
    converted = tmp_path / "converted"
    convert_checkpoint(rel, converted, dtype="float32")
    assert resolve_checkpoint(converted).has_diffusion_decoder
    resolve_checkpoint(converted).load("diffusion_decoder")

    dif = tmp_path / "diffusers"
    shutil.copytree(diffusers_folder, dif)
    shutil.copytree(write_demo_checkpoint(tmp_path / "demo") / "diffusion_decoder", dif / "diffusion_decoder")
    assert resolve_checkpoint(dif).has_diffusion_decoder
    resolve_checkpoint(dif).load("diffusion_decoder")
    assert calls == [("release", "ltx-2.5-diffusion-vae.safetensors"), ("release", "ltx-2.5-diffusion-vae.safetensors"),
                     ("diffusers", "diffusion_decoder")]
    # the planner reads the decoder's architecture without its tensors (config.json, or the release file's metadata)
    from vidax.models.ltx2.planner import folder_architecture

    want = diffusion_decoder.LTX2DiffusionDecoderConfig.from_dict(DIFFUSION_DECODER_CONFIG)
    assert folder_architecture(dif).diffusion_decoder == want
    assert folder_architecture(rel).diffusion_decoder == want
    assert folder_architecture(diffusers_folder).diffusion_decoder is None
    # inspect checks the decoder's tensors against its configuration, as it checks every component
    for folder in (rel, dif):
        report = "\n".join(inspect_checkpoint(folder))
        assert "diffusion_decoder: " in report and "diffusion VAE decoder, stage widths [64, 32, 16, 16, 8]" in report
        assert MISMATCH not in report
    # a release diffusion VAE file whose metadata states two widths for the default four upsamplers
    vae = {"_class_name": "CausalDiffusionVAE", "decoder": {"stage_channels": [16, 8]}}
    save_file({"decoder.x": np.zeros(2, np.float32)}, broken / "ltx-2.5-diffusion-vae.safetensors",
              metadata={"config": json.dumps({"vae": vae})})
    with pytest.raises(ValueError, match="ltx-2.5-diffusion-vae.safetensors: the metadata's config: .*"
                                         "decoder_stage_channels has 2 entries"):
        resolve_checkpoint(broken).diffusion_decoder_config()
    assert any(line.startswith(f"diffusion_decoder: {MISMATCH}") for line in inspect_checkpoint(broken))
    with pytest.raises(ValueError, match="decoder_stage_channels has 2 entries"):
        convert_checkpoint(broken, tmp_path / "not-written", dtype="float32")  # checked before anything is written
    assert not (tmp_path / "not-written").exists()


def test_untrusted_configuration_values_are_refused_before_loading():
    """Sizes, numbers and metadata nesting that no release has are refused by the configuration objects, before any
    per-layer structure is built (a connectors config.json with 10**7 layers once grew past 6 GB)."""
    from vidax.models.ltx2 import release
    from vidax.models.ltx2.config import LTX2TransformerConfig
    from vidax.models.ltx2.connectors import ConnectorsConfig

    for key, value in (("video_connector_num_layers", 10**7), ("audio_connector_num_layers", 10**6),
                       ("video_connector_num_learnable_registers", 1 << 30), ("audio_connector_attention_head_dim", 0),
                       ("video_connector_num_layers", True), ("rope_theta", float("nan"))):
        with pytest.raises(ValueError, match=key):
            ConnectorsConfig.from_dict({key: value})
    for key, value in (("num_layers", 1 << 20), ("num_layers", True), ("rope_theta", float("nan")),
                       ("norm_eps", -1.0)):
        with pytest.raises(ValueError, match=key):
            LTX2TransformerConfig.from_dict({key: value})
    with pytest.raises(ValueError, match=r"metadata\['config'\]\['audio_vae'\]\['model'\] must be a JSON object"):
        release.audio_vae_config({"config": {"audio_vae": {"model": [1]}}})
    for theta in ("abc", "NaN", -1):
        with pytest.raises(ValueError, match="positional_embedding_theta"):
            release.transformer_config({"config": {"transformer": {"positional_embedding_theta": theta}}})


def test_a_corrupt_release_file_is_named(tmp_path):
    """A release file whose config metadata does not parse is reported as that (file named), not as an unknown
    folder."""
    from vidax.models.registry import family_of

    save_file({"x": np.zeros(2, np.float32)}, tmp_path / "ltx-2.5-22b-dev.safetensors",
              metadata={"config": '{"transformer": {"num_layers": 48'})
    assert family_of(tmp_path).name == "ltx-2.5"
    with pytest.raises(CheckpointError, match=r"ltx-2.5-22b-dev.safetensors: the metadata's config is not a JSON"):
        resolve_checkpoint(tmp_path)
