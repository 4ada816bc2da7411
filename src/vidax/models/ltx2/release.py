"""Lightricks' release single file (``ltx-2.5-22b-dev.safetensors``): its metadata translated into the diffusers
configurations vidax's components take, and per component a key map over the one file.

The file's safetensors ``__metadata__`` (upstream ``ltx_core.loader.sft_loader.SafetensorsModelStateDictLoader
.metadata``: every value a string, JSON-parsed where it parses) holds ``config``: a JSON object with one sub-dict per
model, read by upstream's configurators (``ltx_core/model/*/model_configurator.py``):

* ``config["transformer"]`` (``LTXModelConfigurator``): upstream names (``positional_embedding_max_pos``,
  ``positional_embedding_theta``, ``frequencies_precision``, ``apply_gated_attention``, ``cross_attention_adaln``,
  ``av_ca_timestep_scale_multiplier``, ``caption_proj_before_connector`` ...) with upstream's defaults;
  :func:`transformer_config` restates the configurator onto diffusers' ``LTX2VideoTransformer3DModel`` keys. The
  text connectors' configuration comes from the same dict and the Gemma config
  (:meth:`vidax.models.ltx2.connectors.ConnectorsConfig.from_release`).
* ``config["vae"]`` (``VideoEncoderConfigurator`` / ``VideoDecoderConfigurator``): the block lists
  ``encoder_blocks`` / ``decoder_blocks`` (``[name, num_layers | {params}]``), ``latent_channels``,
  ``patch_size``, ``timestep_conditioning``, ``causal_decoder``, ``spatial_padding_mode``,
  ``encoder_spatial_padding_mode``, ``decoder_base_channels``; :func:`vae_config` translates the alternating
  ``res_x`` / ``compress_*`` lists into diffusers' ``AutoencoderKLLTX2Video`` per-block tuples.
* ``config["audio_vae"]`` (``AudioDecoderConfigurator``): ``model.params.ddconfig`` (``ch``, ``ch_mult``,
  ``z_channels`` ...), ``model.params.sampling_rate``, ``preprocessing.stft`` / ``preprocessing.mel``.
* ``config["vocoder"]`` (``VocoderConfigurator``): LTX-2.3+ nests ``vocoder`` (the BigVGAN-v2 first stage:
  ``upsample_initial_channel``, ``upsample_rates``, ``resblock_*``, ``use_tanh_at_final`` (default true),
  ``use_bias_at_final``) and ``bwe`` (the bandwidth extender: the same keys plus ``n_fft``, ``hop_length``,
  ``num_mels``, ``input_sampling_rate``, ``output_sampling_rate``). The first stage's final activation is applied
  upstream (tanh, or a clamp with ``use_tanh_at_final: false``; see :mod:`vidax.models.ltx2.vocoder`).

``model_version`` (a plain string, ``"2.5.1"``) is parsed as upstream ``parse_model_version`` does (numeric
dot-separated components up to the first that is not). Only LTX-2.5 files (model_version 2.4 and up, or a
``gemma_source_checkpoint``: a Gemma 4 text encoder) are accepted: the earlier ones need Gemma 3, which vidax does
not run. The channel counts the metadata does not state (the vocoders' input widths) are read from the tensor
shapes; everything the translation gets wrong fails the strict load, naming the tensors.
"""

from __future__ import annotations

import math

import dataclasses
import re
from pathlib import Path
from typing import Any

from vidax.checkpoint.errors import CheckpointError, excerpt

#: The release's prefixes of each component (diffusers' converter's ``--*_prefix`` defaults).
PREFIXES = {"transformer": "model.diffusion_model.", "vae": "vae.", "audio_vae": "audio_vae.", "vocoder": "vocoder."}
#: The oldest model_version whose text encoder is Gemma 4 (upstream ``_GEMMA_SOURCE_CHECKPOINT_REQUIRED_SINCE``).
GEMMA4_SINCE = (2, 4, 0)
#: Bounds on the metadata's list lengths and sizes (a hostile header could state anything).
_MAX_BLOCKS, _MAX_WIDTH = 64, 1 << 16


def parse_model_version(version: Any) -> tuple[int, ...]:
    """Upstream ``ltx_core.loader.helpers.parse_model_version``: the leading numeric dot-separated components
    (``"2.5.1" -> (2, 5, 1)``, ``"2.3.rc1" -> (2, 3)``; ``"-"`` read as ``"."`` as ltx-pipelines'
    ``detect_model_version`` does); ``()`` when unset or not a string."""
    if not isinstance(version, str) or not version:
        return ()
    out = []
    for part in version.replace("-", ".").split(".")[:8]:
        if not part.isdigit() or len(part) > 6:
            break
        out.append(int(part))
    return tuple(out)


def read_metadata(path: Path) -> dict | None:
    """The file's parsed metadata (values JSON-decoded where they decode), or None when it has no ``config`` with a
    ``transformer`` (not an LTX-2 release file). Reads the header only (bounded by the safetensors reader).

    Raises:
      CheckpointError: a corrupt header, or a ``config`` that is not a JSON object.
    """
    import json

    from vidax.checkpoint.safetensors_io import SafetensorsFile

    raw = SafetensorsFile(path).metadata
    if "config" not in raw:
        return None
    out: dict[str, Any] = {}
    for key, value in raw.items():
        try:
            out[key] = json.loads(value)
        except (ValueError, RecursionError):
            out[key] = value
    if not isinstance(out["config"], dict):
        raise CheckpointError(f"{path}: the metadata's config is not a JSON object; download the file again")
    if not isinstance(out["config"].get("transformer"), dict):
        return None
    return out


def release_files(folder: Path) -> list[tuple[Path, dict]]:
    """The folder's release files (top-level ``*.safetensors`` whose metadata has a ``config`` with a
    ``transformer``; the first 256 files looked at) and their metadata."""
    found = []
    for path in sorted(Path(folder).glob("*.safetensors"))[:256]:
        if path.is_file():
            meta = read_metadata(path)
            if meta is not None:
                found.append((path, meta))
    return found


def diffusion_vae_files(folder: Path) -> list[Path]:
    """Lightricks' diffusion VAE files in the folder: top-level ``*.safetensors`` whose metadata ``config`` has a
    ``vae`` of a class other than ``CausalVideoAutoencoder`` (upstream ``is_diffusion_video_vae``) and no
    ``transformer`` (the first 256 files looked at)."""
    import json

    from vidax.checkpoint.safetensors_io import SafetensorsFile

    found = []
    for path in sorted(Path(folder).glob("*.safetensors"))[:256]:
        if not path.is_file():
            continue
        raw = SafetensorsFile(path).metadata.get("config")
        try:
            config = json.loads(raw) if raw is not None else None
        except (ValueError, RecursionError):
            continue
        if not isinstance(config, dict) or "transformer" in config or not isinstance(config.get("vae"), dict):
            continue
        if config["vae"].get("_class_name", "CausalVideoAutoencoder") != "CausalVideoAutoencoder":
            found.append(path)
    return found


def find_release_file(folder: Path) -> tuple[Path, dict] | None:
    """The folder's one release file and its metadata, or None when it has none.

    Raises:
      CheckpointError: more than one release file in the folder (both named; keep one per folder).
    """
    found = release_files(folder)
    if len(found) > 1:
        names = ", ".join(p.name for p, _ in found)
        raise CheckpointError(f"{folder}: holds {len(found)} LTX-2 release files ({names}); "
                              "keep one per folder (with the Gemma text encoder folder beside it)")
    return found[0] if found else None


def _gemma_folder(folder: Path) -> Path | None:
    """The Gemma 4 text encoder folder beside the release file: ``text_encoder/``, else a subfolder whose
    ``config.json`` is a ``gemma4_unified`` model's."""
    from vidax.core.config_values import read_json

    candidates = [folder / "text_encoder"] + sorted(p for p in folder.iterdir() if p.is_dir())[:64]
    for sub in candidates:
        cfg = sub / "config.json"
        if cfg.is_file() and cfg.stat().st_size < (1 << 20):
            data = read_json(cfg)
            kind = data.get("model_type") if isinstance(data, dict) else None
            if isinstance(kind, str) and kind.startswith("gemma4_unified"):
                return sub
    return None


def resolve_release(folder: Path):
    """An :class:`~vidax.models.ltx2.layout.LTX2Checkpoint` of layout ``"release"``, or None without a release file.

    Raises:
      CheckpointError: an unsupported model_version (LTX-2.0 / 2.3 need Gemma 3), no Gemma 4 text encoder folder or
        no tokenizer beside the file (each with the fix).
    """
    from vidax.models.ltx2.layout import DEV_SCHEDULER, DISTILLED_SCHEDULER, RELEASE, LTX2Checkpoint

    found = find_release_file(folder)
    if found is None:
        return None
    path, meta = found
    version = parse_model_version(meta.get("model_version"))
    if version < GEMMA4_SINCE and not isinstance(meta.get("gemma_source_checkpoint"), dict):
        raise CheckpointError(f"{path}: model_version {excerpt(meta.get('model_version'))} is an LTX-2.0 / 2.3 file, "
                              "whose text encoder is Gemma 3, which vidax does not run; use an LTX-2.5 file")
    gemma = _gemma_folder(folder)
    if gemma is None:
        raise CheckpointError(f"{folder}: no Gemma 4 text encoder beside {path.name}; put the text encoder folder "
                              "(config.json of a gemma4_unified model, its weights and tokenizer.json) in "
                              f"{folder / 'text_encoder'}")
    tokenizer = next((p for p in (folder / "tokenizer", gemma) if (p / "tokenizer.json").is_file()), None)
    if tokenizer is None:
        raise CheckpointError(f"{gemma}: the Gemma tokenizer is missing (no tokenizer.json here or in "
                              f"{folder / 'tokenizer'}); copy the text encoder's tokenizer files into it")
    scheduler = dict(DISTILLED_SCHEDULER if "distilled" in path.name.lower() else DEV_SCHEDULER)
    folders = {"text_encoder": gemma, "tokenizer": tokenizer}
    decoders = diffusion_vae_files(folder)
    if len(decoders) > 1:
        raise CheckpointError(f"{folder}: holds {len(decoders)} diffusion VAE files "
                              f"({', '.join(p.name for p in decoders)}); keep one per folder")
    if decoders:
        folders["diffusion_decoder"] = decoders[0]
    return LTX2Checkpoint(folder, RELEASE, "LTX2Pipeline", folders, scheduler, weights=path, metadata=meta,
                          version=version)


# --------------------------------------------------------------------------- configuration translation


def _section(meta: dict, name: str, path: Any) -> dict:
    section = _sub(meta, "config", name)
    if not isinstance(section, dict):
        raise CheckpointError(f"{path}: the metadata's config[{name!r}] is not an object")
    return section


def _sub(d: Any, *keys: str) -> Any:
    """``d[k1][k2]...`` of the metadata, ``{}`` where a key is absent.

    Raises:
      ValueError: a level that is not a JSON object (named).
    """
    where = "metadata"
    for key in keys:
        if not isinstance(d, dict):
            raise ValueError(f"release metadata: {where} must be a JSON object, got {excerpt(d)}")
        d, where = d.get(key, {}), f"{where}[{key!r}]"
    return d


def _number(value: Any, what: str) -> float:
    """A finite positive number of the metadata (a numeric string accepted, as upstream's ``float()``).

    Raises:
      ValueError: anything else, named.
    """
    try:
        v = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        v = math.nan
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"release metadata: {what}={excerpt(value)} must be a finite positive number")
    return v


def _int(value: Any, what: str, top: int = _MAX_WIDTH) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= top:
        raise ValueError(f"release metadata: {what}={excerpt(value)} must be an integer in [1, {top}]")
    return value


def _ints(value: Any, what: str, top: int = _MAX_WIDTH) -> list[int]:
    if not isinstance(value, (list, tuple)) or not 0 < len(value) <= _MAX_BLOCKS:
        raise ValueError(f"release metadata: {what}={excerpt(value)} must be a list of 1 to {_MAX_BLOCKS} integers")
    return [_int(v, what, top) for v in value]


def _expect(section: dict, key: str, want: Any, what: str) -> None:
    """Upstream ``check_config_value``: a key present with another value is refused."""
    if key in section and section[key] != want:
        raise ValueError(f"release metadata: {what}.{key}={excerpt(section[key])} is not supported (upstream "
                         f"requires {want!r})")


def transformer_config(meta: dict, audio: dict | None = None) -> dict:
    """diffusers ``LTX2VideoTransformer3DModel`` config.json of ``config["transformer"]``, as upstream
    ``LTXModelConfigurator.from_metadata`` reads it (its defaults where a key is absent).

    Raises:
      ValueError: a setting upstream refuses or vidax does not run (named).
    """
    t = _sub(meta, "config", "transformer")
    for key, want in (("activation_fn", "gelu-approximate"), ("attention_bias", True), ("qk_norm", "rms_norm"),
                      ("norm_elementwise_affine", False), ("positional_embedding_type", "rope"),
                      ("use_middle_indices_grid", True), ("use_audio_video_cross_attention", True)):
        _expect(t, key, want, "transformer")
    max_pos = _ints(t.get("positional_embedding_max_pos", [20, 2048, 2048]), "positional_embedding_max_pos",
                    1 << 20)
    audio_max = _ints(t.get("audio_positional_embedding_max_pos", [20]), "audio_positional_embedding_max_pos",
                      1 << 20)
    if len(max_pos) != 3 or len(audio_max) != 1:
        raise ValueError(f"release metadata: positional_embedding_max_pos {max_pos} / audio {audio_max} must have "
                         "3 / 1 entries")
    gated = bool(t.get("apply_gated_attention", False))
    modulated = bool(t.get("cross_attention_adaln", False))
    audio = audio or {}
    out = {
        "_class_name": "LTX2VideoTransformer3DModel",
        "in_channels": t.get("in_channels", 128), "out_channels": t.get("out_channels", 128),
        "num_attention_heads": t.get("num_attention_heads", 32), "attention_head_dim": t.get("attention_head_dim", 128),
        "cross_attention_dim": t.get("cross_attention_dim", 4096), "num_layers": t.get("num_layers", 48),
        "norm_eps": t.get("norm_eps", 1e-6),
        "rope_theta": _number(t.get("positional_embedding_theta", 10000.0), "transformer.positional_embedding_theta"),
        "pos_embed_max_pos": max_pos[0], "base_height": max_pos[1], "base_width": max_pos[2],
        "timestep_scale_multiplier": t.get("timestep_scale_multiplier", 1000),
        "cross_attn_timestep_scale_multiplier": t.get("av_ca_timestep_scale_multiplier", 1),
        "audio_num_attention_heads": t.get("audio_num_attention_heads", 32),
        "audio_attention_head_dim": t.get("audio_attention_head_dim", 64),
        "audio_in_channels": t.get("audio_in_channels", 128), "audio_out_channels": t.get("audio_out_channels", 128),
        "audio_cross_attention_dim": t.get("audio_cross_attention_dim", 2048), "audio_pos_embed_max_pos": audio_max[0],
        "rope_type": t.get("rope_type", "split"),
        "rope_double_precision": t.get("frequencies_precision", False) == "float64",
        "gated_attn": gated, "audio_gated_attn": gated, "cross_attn_mod": modulated, "audio_cross_attn_mod": modulated,
        "use_prompt_adaln_single": bool(t.get("use_prompt_adaln_single", True)),
        "ff_bias": bool(t.get("ff_bias", True)), "audio_ff_bias": bool(t.get("audio_ff_bias", True)),
        "use_keyframes_abs_pos_embedding": bool(t.get("use_keyframes_abs_pos_embedding", False)),
        "use_prompt_embeddings": not t.get("caption_proj_before_connector", False),
        "caption_channels": t.get("caption_channels", 3840),
        # diffusers' converter sets it for the 2.3+ (cross-attention AdaLN) models: STG on every block.
        "perturbed_attn": modulated,
        "audio_sampling_rate": audio.get("sample_rate", 16000), "audio_hop_length": audio.get("mel_hop_length", 160),
    }
    return out


def audio_vae_config(meta: dict) -> dict:
    """diffusers ``AutoencoderKLLTX2Audio`` config.json of ``config["audio_vae"]`` (upstream
    ``AudioDecoderConfigurator`` / ``AudioEncoderConfigurator``)."""
    def sub(*keys: str) -> Any:
        return _sub(meta, "config", "audio_vae", *keys)

    params, dd = sub("model", "params"), sub("model", "params", "ddconfig")
    stft, mel = sub("preprocessing", "stft"), sub("preprocessing", "mel")
    mel_bins = dd.get("mel_bins") or mel.get("n_mel_channels") or sub("variables").get("mel_bins")
    attn = dd.get("attn_resolutions", [8, 16, 32])
    return {"_class_name": "AutoencoderKLLTX2Audio", "base_channels": dd.get("ch", 128),
            "output_channels": dd.get("out_ch", 2), "ch_mult": list(dd.get("ch_mult", (1, 2, 4))),
            "num_res_blocks": dd.get("num_res_blocks", 2), "attn_resolutions": list(attn) if attn else None,
            "in_channels": dd.get("in_channels", 2), "resolution": dd.get("resolution", 256),
            "latent_channels": dd.get("z_channels", 8), "norm_type": dd.get("norm_type", "pixel"),
            "causality_axis": dd.get("causality_axis", "height"), "dropout": dd.get("dropout", 0.0),
            "mid_block_add_attention": dd.get("mid_block_add_attention", True),
            "sample_rate": params.get("sampling_rate", 16000), "mel_hop_length": stft.get("hop_length", 160),
            "is_causal": stft.get("causal", True), "mel_bins": mel_bins, "double_z": dd.get("double_z", True)}


def _stage(c: dict, prefix: str, in_channels: int) -> dict:
    for key, want in (("resblock", "AMP1"), ("stereo", True), ("activation", "snakebeta")):
        _expect(c, key, want, "vocoder")
    return {f"{prefix}in_channels": in_channels, f"{prefix}hidden_channels": c.get("upsample_initial_channel", 1024),
            f"{prefix}out_channels": 2, f"{prefix}upsample_kernel_sizes": list(c.get("upsample_kernel_sizes",
                                                                                     [16, 15, 8, 4, 4])),
            f"{prefix}upsample_factors": list(c.get("upsample_rates", [6, 5, 2, 2, 2])),
            f"{prefix}resnet_kernel_sizes": list(c.get("resblock_kernel_sizes", [3, 7, 11])),
            f"{prefix}resnet_dilations": [list(d) for d in c.get("resblock_dilation_sizes",
                                                                 [[1, 3, 5], [1, 3, 5], [1, 3, 5]])],
            f"{prefix}act_fn": "snakebeta", f"{prefix}antialias": True,
            f"{prefix}final_bias": bool(c.get("use_bias_at_final", True))}


def vocoder_config(meta: dict, in_channels: int, bwe_in_channels: int) -> dict:
    """diffusers ``LTX2VocoderWithBWE`` config.json of ``config["vocoder"]`` (upstream ``VocoderConfigurator``; the
    input widths from the tensor shapes). ``final_act_fn``: ``"tanh"`` with upstream's ``use_tanh_at_final``
    (default true), else None (vidax clamps there as upstream does; diffusers would skip it).

    Raises:
      ValueError: a pre-2.3 vocoder (no ``bwe``), or a setting upstream refuses.
    """
    v = _sub(meta, "config", "vocoder")
    if "bwe" not in v:
        raise ValueError("release metadata: a vocoder without bandwidth extension (LTX-2.0) is not supported")
    first, bwe = _sub(v, "vocoder"), _sub(v, "bwe")
    missing = [k for k in ("n_fft", "hop_length", "num_mels", "input_sampling_rate", "output_sampling_rate")
               if k not in bwe]
    if missing:
        raise ValueError(f"release metadata: config['vocoder']['bwe'] lacks {missing}")
    out = {"_class_name": "LTX2VocoderWithBWE", **_stage(first, "", in_channels),
           **_stage(bwe, "bwe_", bwe_in_channels),
           "final_act_fn": "tanh" if first.get("use_tanh_at_final", True) else None, "bwe_final_act_fn": None,
           "filter_length": bwe["n_fft"], "hop_length": bwe["hop_length"], "window_length": bwe["n_fft"],
           "num_mel_channels": bwe["num_mels"], "input_sampling_rate": bwe["input_sampling_rate"],
           "output_sampling_rate": bwe["output_sampling_rate"]}
    return out


_DOWN = {"compress_space_res": "spatial", "compress_time_res": "temporal", "compress_all_res": "spatiotemporal"}
_UP = {"compress_space": "spatial", "compress_time": "temporal", "compress_all": "spatiotemporal"}


def _blocks(value: Any, what: str) -> list[tuple[str, dict]]:
    if not isinstance(value, list) or not 0 < len(value) <= _MAX_BLOCKS:
        raise ValueError(f"release metadata: vae.{what} must be a list of 1 to {_MAX_BLOCKS} blocks")
    out = []
    for entry in value:
        if not (isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[0], str)):
            raise ValueError(f"release metadata: vae.{what} entry {excerpt(entry)} is not [name, params]")
        params = {"num_layers": entry[1]} if isinstance(entry[1], int) else entry[1]
        if not isinstance(params, dict):
            raise ValueError(f"release metadata: vae.{what} entry {excerpt(entry)} has no params object")
        out.append((entry[0], params))
    return out


def _alternating(blocks: list[tuple[str, dict]], kinds: dict, what: str) -> tuple[list[int], list[tuple[str, dict]]]:
    """``[res_x, compress, res_x, ..., res_x]`` -> the res_x layer counts and the compress blocks."""
    layers, compress = [], []
    for i, (name, params) in enumerate(blocks):
        want_res = i % 2 == 0
        if want_res and name == "res_x":
            layers.append(_int(params.get("num_layers"), f"vae.{what}[{i}].num_layers", 1024))
        elif not want_res and name in kinds:
            compress.append((name, params))
        else:
            raise ValueError(f"release metadata: vae.{what}[{i}] is {name!r}; vidax reads alternating res_x / "
                             f"{' / '.join(kinds)} blocks (the released LTX-2 VAEs)")
    if len(blocks) % 2 == 0:
        raise ValueError(f"release metadata: vae.{what} must end with a res_x block")
    return layers, compress


def vae_config(meta: dict, conv_in_width: int) -> dict:
    """diffusers ``AutoencoderKLLTX2Video`` config.json of ``config["vae"]`` (upstream ``VideoEncoder`` /
    ``ConvVideoDecoder`` block lists; ``conv_in_width``: the encoder's first width, from the tensor shapes).

    The encoder list ``[res_x L0, compress_*_res, res_x L1, ..., res_x L_mid]`` gives diffusers' per-block
    ``layers_per_block`` and ``downsample_type``, and the widths ``conv_in_width * prod(multipliers)``; the decoder list
    (diffusers' block order too; upstream builds it reversed) gives ``decoder_layers_per_block``, ``upsample_type``,
    ``upsample_residual``, ``upsample_factor`` and the widths from ``decoder_base_channels * prod(multipliers)``.

    Raises:
      ValueError: a block structure diffusers' VAE cannot express, a diffusion-decoder VAE (``_class_name`` other
        than ``CausalVideoAutoencoder``), or a setting upstream refuses.
    """
    c = _sub(meta, "config", "vae")
    if c.get("_class_name", "CausalVideoAutoencoder") != "CausalVideoAutoencoder":
        raise ValueError(f"release metadata: vae._class_name {excerpt(c.get('_class_name'))} is not the convolutional "
                         "CausalVideoAutoencoder (a diffusion VAE file is the diffusion decoder: put it beside the "
                         "model file)")
    for key, want in (("norm_layer", "pixel_norm"), ("latent_log_var", "uniform"), ("dims", 3)):
        _expect(c, key, want, "vae")
    enc_layers, downs = _alternating(_blocks(c.get("encoder_blocks"), "encoder_blocks"), _DOWN, "encoder_blocks")
    dec_layers, ups = _alternating(_blocks(c.get("decoder_blocks"), "decoder_blocks"), _UP, "decoder_blocks")
    widths, w = [], conv_in_width
    for i, (_, params) in enumerate(downs):
        w *= _int(params.get("multiplier", 2), f"vae.encoder_blocks multiplier {i}", 64)
        widths.append(_int(w, "vae encoder width"))
    factors = [_int(p.get("multiplier", 1), f"vae.decoder_blocks multiplier {i}", 64) for i, (_, p) in enumerate(ups)]
    base = _int(c.get("decoder_base_channels", 128), "vae.decoder_base_channels")
    dec_widths, w = [], base
    for f in factors:  # diffusers' order: block i's width is what enters its upsampler (from the bottleneck side)
        w *= f
        dec_widths.append(_int(w, "vae decoder width"))
    latent = _int(c.get("latent_channels", 128), "vae.latent_channels")
    patch = _int(c.get("patch_size", 4), "vae.patch_size", 64)
    # upstream SpatioTemporalScaleFactors.from_blocks: each compress block halves its axes
    spatial = patch * 2 ** sum(_DOWN[n] in ("spatial", "spatiotemporal") for n, _ in downs)
    temporal = 2 ** sum(_DOWN[n] in ("temporal", "spatiotemporal") for n, _ in downs)
    return {"_class_name": "AutoencoderKLLTX2Video", "in_channels": c.get("in_channels", 3),
            "out_channels": c.get("out_channels", 3), "latent_channels": latent, "block_out_channels": widths,
            "down_block_types": ["LTX2VideoDownBlock3D"] * len(downs), "decoder_block_out_channels": dec_widths,
            "layers_per_block": enc_layers, "decoder_layers_per_block": dec_layers,
            "spatio_temporal_scaling": [True] * len(downs), "decoder_spatio_temporal_scaling": [True] * len(ups),
            "decoder_inject_noise": [False] * len(dec_layers), "downsample_type": [_DOWN[n] for n, _ in downs],
            "upsample_type": [_UP[n] for n, _ in ups], "upsample_residual": [bool(p.get("residual", False))
                                                                            for _, p in ups],
            "upsample_factor": factors, "timestep_conditioning": bool(c.get("timestep_conditioning", True)),
            "patch_size": patch, "patch_size_t": 1, "resnet_norm_eps": 1e-6,
            "spatial_compression_ratio": spatial, "temporal_compression_ratio": temporal,
            "encoder_causal": True, "decoder_causal": bool(c.get("causal_decoder", False)),
            "encoder_spatial_padding_mode": c.get("encoder_spatial_padding_mode", "zeros"),
            "decoder_spatial_padding_mode": c.get("spatial_padding_mode", "reflect")}


# --------------------------------------------------------------------------- sources


def _only(keymap, prefix: str):
    """``keymap`` ignoring every key outside ``prefix`` (the file's other components) and upstream's statistics
    buffers that diffusers' converter drops (``per_channel_statistics.channel`` / ``mean-of-stds``)."""
    from vidax.checkpoint.keymap import KeyMap

    stats = re.escape(prefix) + r"per_channel_statistics\.(channel|mean-of-stds)\Z"
    return KeyMap(keymap.rules, ignore=list(keymap.ignore) + [f"(?!{re.escape(prefix)})", stats])


def _shape(reader, key: str, where) -> tuple[int, ...]:
    if key not in reader:
        raise CheckpointError(f"{where}: no tensor {key} (the component is missing from the release file)")
    return tuple(reader.shape(key))


def release_source(ckpt, name: str):
    """The :class:`~vidax.models.ltx2.layout.ComponentSource` of ``name`` in the release file (metadata translated,
    key map over the one file ignoring the other components).

    Raises:
      ValueError: an unsupported configuration. CheckpointError: the component absent from the file.
    """
    from vidax.models.ltx2.layout import ComponentSource, component_spec

    reader = ckpt.release_reader()
    meta, where = ckpt.metadata, ckpt.weights
    for section in ("transformer", "vae", "audio_vae", "vocoder"):
        _section(meta, section, where)
    audio = audio_vae_config(meta)
    if name == "transformer":
        from vidax.models.ltx2.keymap import transformer_release_keymap

        config = transformer_config(meta, audio)
        cfg, specs, _ = component_spec(name, config)
        return ComponentSource(name, cfg, config, reader, transformer_release_keymap(cfg), specs, str(where))
    if name == "connectors":
        from vidax.core.config_values import read_json
        from vidax.encoders.gemma import GemmaConfig
        from vidax.models.ltx2.connectors import ConnectorsConfig, connectors_release_keymap, connectors_specs

        gemma = GemmaConfig.from_dict(read_json(ckpt.folders["text_encoder"] / "config.json"))
        cfg = ConnectorsConfig.from_release(meta["config"]["transformer"], gemma.hidden_size,
                                            gemma.num_hidden_layers)
        config = {"_class_name": "LTX2TextConnectors", **dataclasses.asdict(cfg)}
        return ComponentSource(name, cfg, config, reader, connectors_release_keymap(cfg), connectors_specs(cfg),
                               str(where))
    if name == "vae":
        from vidax.models.ltx2.vae import vae_release_keymap

        width = _shape(reader, "vae.encoder.conv_in.conv.weight", where)[0]
        config = vae_config(meta, width)
        cfg, specs, _ = component_spec(name, config)
        return ComponentSource(name, cfg, config, reader, _only(vae_release_keymap(cfg), "vae."), specs, str(where))
    if name == "audio_vae":
        from vidax.models.ltx2.audio_vae import audio_vae_release_keymap

        cfg, specs, _ = component_spec(name, audio)
        return ComponentSource(name, cfg, audio, reader, _only(audio_vae_release_keymap(cfg), "audio_vae."), specs,
                               str(where))
    if name == "vocoder":
        from vidax.models.ltx2.vocoder import vocoder_release_keymap

        first = _shape(reader, "vocoder.vocoder.conv_pre.weight", where)[1]
        second = _shape(reader, "vocoder.bwe_generator.conv_pre.weight", where)[1]
        config = vocoder_config(meta, first, second)
        cfg, specs, _ = component_spec(name, config)
        return ComponentSource(name, cfg, config, reader, _only(vocoder_release_keymap(cfg), "vocoder."), specs,
                               str(where))
    raise ValueError(f"the release file has no {name!r} component")
