"""The LTX-2 audio VAE (diffusers ``AutoencoderKLLTX2Audio``) as pure JAX functions: latents <-> mel spectrograms.

Reference: ``diffusers/models/autoencoders/autoencoder_kl_ltx2_audio.py`` (``AutoencoderKLLTX2Audio``,
``LTX2AudioEncoder``, ``LTX2AudioDecoder``, ``LTX2AudioCausalConv2d``, ``LTX2AudioResnetBlock``,
``LTX2AudioAttnBlock``, ``LTX2AudioPixelNorm``, ``LTX2AudioDownsample``, ``LTX2AudioUpsample``); upstream
``ltx_core/model/audio_vae/audio_vae.py`` (``AudioEncoder``, ``AudioDecoder``). The latent statistics are applied
as ``pipelines/ltx2/pipeline_ltx2.py`` does (``_pack_audio_latents``, ``_denormalize_audio_latents``,
``_unpack_audio_latents``): on the packed ``(B, L, C * M)`` tokens, one statistic per token feature.

Layout
    A spectrogram is ``(B, channels, time, mel_bins)`` (stereo: 2 channels), latents ``(B, C, frames, M)``
    (LTX-2.x: 8 channels, 16 latent mel bins, one latent frame per 4 spectrogram frames). Public functions take and
    return these channels-first arrays; inside the jitted programs everything is channels-last ``(B, T, M, C)``
    (time is the convolutions' "height", mel bins their "width").

Causality
    Every convolution pads its input itself (``LTX2AudioCausalConv2d``): along ``causality_axis`` all of the
    ``k - 1`` padding goes in front, along the other axis it is split evenly (``"none"``: split on both). The
    upsamplers (nearest x2, causal conv) drop the first row along the causal axis, so ``F`` latent frames decode to
    ``4F - 3`` spectrogram frames with ``causality_axis="height"`` (every release).

Where diffusers departs from upstream
    With ``causality_axis="none"`` diffusers still crops the decoded time to ``4F - 3`` (it tests
    ``causality_axis is not None``); upstream's ``AudioDecoder._denormalize_latents`` keeps ``4F`` (it tests
    ``!= CausalityAxis.NONE``). Upstream is followed. No release uses ``"none"``.

Unrolled, not scanned
    The LTX-2.x decoder has 11 resnets at three widths, the first of each up stage changing the width (a
    ``nin_shortcut``): at most two identical resnets follow one another, so the blocks are traced one by one.

Precision
    Convolutions take their inputs in the kernels' dtype and accumulate in float32; the activations between them
    (and the residual sums) stay float32, the norms compute in float32, and the norms' parameters and the latent
    statistics are float32 leaves. The activations are small (at most 512 channels x 64 mel bins per frame), so
    float32 costs little; a bf16 residual stream put the tiny decoder at 1.4e-2 of the float32 reference.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint.keymap import KeyMap, Rule
from vidax.checkpoint.keymap import conv as conv_rules
from vidax.core.config_values import config_values
from vidax.core.layers import conv_jit
from vidax.core.params import ParamSpec, SpecTree, require_parts, unflatten

#: Latent frames -> spectrogram frames (and mel bins), fixed in the reference (``LATENT_DOWNSAMPLE_FACTOR``).
LATENT_DOWNSAMPLE_FACTOR = 4
#: Epsilon of the pixel (RMS over channels) and group norms, fixed in the reference.
NORM_EPS = 1e-6
CAUSALITY_AXES = ("none", "width", "height", "width-compatibility")
_F32 = jnp.float32
_DN = ("NHWC", "HWIO", "NHWC")


@dataclass(frozen=True)
class LTX2AudioVAEConfig:
    """Configuration of ``AutoencoderKLLTX2Audio`` (the keys of a diffusers ``audio_vae/config.json``).

    Defaults are the reference's (and LTX-2.0 / 2.3 / 2.5's, except ``norm_type`` and ``causality_axis``, which
    the releases set to these defaults too). Hashable: a static argument of the jitted programs.

    Attributes:
      base_channels: width of the first encoder stage; also the length of ``latents_mean`` / ``latents_std``
        (128, which is ``latent_channels * mel_bins / 4``: one statistic per packed token feature).
      output_channels: decoded spectrogram channels (2, stereo). in_channels: encoded ones (2).
      ch_mult: width multipliers per resolution level ((1, 2, 4)).
      num_res_blocks: resnets per encoder level (the decoder has one more per level).
      attn_resolutions: resolutions (``resolution / 2**level``) at which the stages attend; None: none.
      resolution: nominal input size, only used to place attention (256).
      latent_channels: 8. norm_type: ``"pixel"`` (RMS over channels) or ``"group"`` (32 groups).
      causality_axis: ``"height"`` (time; every release), ``"width"``, ``"width-compatibility"`` or ``"none"``.
      dropout: unused at inference. mid_block_add_attention: an attention block between the mid resnets.
      sample_rate, mel_hop_length, is_causal: the spectrogram's (16 kHz, hop 160: 100 frames/s); metadata here.
      mel_bins: decoded mel bins (64). double_z: the encoder predicts mean and log-variance.
    """

    base_channels: int = 128
    output_channels: int = 2
    ch_mult: tuple[int, ...] = (1, 2, 4)
    num_res_blocks: int = 2
    attn_resolutions: tuple[int, ...] | None = None
    in_channels: int = 2
    resolution: int = 256
    latent_channels: int = 8
    norm_type: str = "pixel"
    causality_axis: str = "height"
    dropout: float = 0.0
    mid_block_add_attention: bool = False
    sample_rate: int = 16000
    mel_hop_length: int = 160
    is_causal: bool = True
    mel_bins: int | None = 64
    double_z: bool = True

    def __post_init__(self):
        for f in dataclasses.fields(self):
            if isinstance(getattr(self, f.name), list):
                object.__setattr__(self, f.name, tuple(getattr(self, f.name)))
        problems = []
        if self.causality_axis not in CAUSALITY_AXES:
            problems.append(f"causality_axis={self.causality_axis!r} (known: {list(CAUSALITY_AXES)})")
        if self.norm_type not in ("pixel", "group"):
            problems.append(f"norm_type={self.norm_type!r} (known: 'pixel', 'group')")
        elif self.norm_type == "group" and self.causality_axis != "none":
            problems.append("norm_type='group' with a causal axis (the reference refuses it)")
        if not 1 <= len(self.ch_mult) <= 8 or min(self.ch_mult) < 1:
            problems.append(f"ch_mult={self.ch_mult} (1 to 8 positive multipliers)")
        sizes = (self.base_channels, self.output_channels, self.in_channels, self.latent_channels, self.resolution)
        if min(sizes) < 1 or self.num_res_blocks < 0 or self.base_channels * max(self.ch_mult, default=1) > 1 << 16:
            problems.append("base_channels, output_channels, in_channels, latent_channels and resolution must be "
                            "positive, num_res_blocks >= 0, widths at most 65536")
        if self.mel_bins is not None and not 1 <= self.mel_bins <= 1 << 14:
            problems.append(f"mel_bins={self.mel_bins}")
        if self.norm_type == "group" and any((self.base_channels * m) % 32 for m in self.ch_mult):
            problems.append("group norm needs every width divisible by its 32 groups")
        if problems:
            raise ValueError("LTX2AudioVAEConfig: unsupported " + "; ".join(problems))

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> LTX2AudioVAEConfig:
        """Build from a diffusers ``audio_vae/config.json`` dict (``_``-prefixed keys are metadata).

        Raises:
          ValueError: another ``_class_name``, an unknown key, a value of the wrong type or an unsupported setting.
        """
        name = config.get("_class_name")
        if name not in (None, "AutoencoderKLLTX2Audio"):
            raise ValueError(f"audio_vae config.json is for {name!r}, not 'AutoencoderKLLTX2Audio'")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(k for k in config if not k.startswith("_") and k not in fields)
        if unknown:
            raise ValueError(f"LTX2AudioVAEConfig: unknown config keys {unknown} (not AutoencoderKLLTX2Audio args)")
        values = config_values(cls, config, "LTX-2 audio VAE config")
        if values.get("attn_resolutions") is not None:
            values["attn_resolutions"] = tuple(values["attn_resolutions"])
        return cls(**values)

    @property
    def has_attention(self) -> bool:
        return bool(self.attn_resolutions)

    @property
    def latents_per_second(self) -> float:
        """Latent frames per second of audio (16000 / 160 / 4 = 25)."""
        return self.sample_rate / self.mel_hop_length / LATENT_DOWNSAMPLE_FACTOR

    def latent_frames(self, num_frames: int, frame_rate: float) -> int:
        """Audio latent frames for a video of ``num_frames`` at ``frame_rate`` (``round(duration * 25)``, as
        ``LTX2Pipeline.__call__`` and upstream ``AudioLatentShape.from_duration``)."""
        return round(num_frames / frame_rate * self.latents_per_second)

    def decoded_frames(self, latent_frames: int) -> int:
        """Spectrogram frames decoded from ``latent_frames`` (upstream ``AudioDecoder._denormalize_latents``)."""
        t = latent_frames * LATENT_DOWNSAMPLE_FACTOR
        return max(t - (LATENT_DOWNSAMPLE_FACTOR - 1), 1) if self.causality_axis != "none" else t


# ---------------------------------------------------------------------------------------------
# Parameter declaration and key map (one walk gives both)
# ---------------------------------------------------------------------------------------------


class _Declaration:
    def __init__(self, cfg: LTX2AudioVAEConfig):
        self.cfg = cfg
        self.specs: dict[str, ParamSpec] = {}
        self.rules: list[Rule] = []

    def conv(self, key: str, cin: int, cout: int, k: int):
        """A plain ``nn.Conv2d`` at ``key`` (kernel ``(k, k, in, out)``)."""
        path = key.replace(".", "/")
        self.specs[f"{path}/kernel"] = ParamSpec((k, k, cin, cout))
        self.specs[f"{path}/bias"] = ParamSpec((cout,))
        self.rules += conv_rules(key, path, dims=2)

    def causal_conv(self, key: str, cin: int, cout: int, k: int):
        self.conv(f"{key}.conv", cin, cout, k)  # LTX2AudioCausalConv2d wraps its Conv2d as `.conv`

    def norm(self, key: str, width: int):
        if self.cfg.norm_type == "group":  # pixel norms have no parameters
            path = key.replace(".", "/")
            for ours, theirs in (("scale", "weight"), ("bias", "bias")):
                self.specs[f"{path}/{ours}"] = ParamSpec((width,), fp32=True)
                self.rules.append(Rule(f"{key}.{theirs}", f"{path}/{ours}"))

    def resnet(self, key: str, cin: int, cout: int):
        self.norm(f"{key}.norm1", cin)
        self.causal_conv(f"{key}.conv1", cin, cout, 3)
        self.norm(f"{key}.norm2", cout)
        self.causal_conv(f"{key}.conv2", cout, cout, 3)
        if cin != cout:
            self.causal_conv(f"{key}.nin_shortcut", cin, cout, 1)

    def attention(self, key: str, width: int):
        self.norm(f"{key}.norm", width)
        for n in ("q", "k", "v", "proj_out"):
            self.conv(f"{key}.{n}", width, width, 1)

    def tensor(self, key: str, shape: tuple[int, ...]):
        self.specs[key] = ParamSpec(shape, fp32=True)
        self.rules.append(Rule(key, key))


def _attends(cfg: LTX2AudioVAEConfig, res: int) -> bool:
    return bool(cfg.attn_resolutions) and res in cfg.attn_resolutions


def _declare(cfg: LTX2AudioVAEConfig) -> _Declaration:
    d, base, n = _Declaration(cfg), cfg.base_channels, len(cfg.ch_mult)
    # Encoder (LTX2AudioEncoder).
    d.causal_conv("encoder.conv_in", cfg.in_channels, base, 3)
    width, res = base, cfg.resolution
    for level in range(n):
        out = base * cfg.ch_mult[level]
        for j in range(cfg.num_res_blocks):
            d.resnet(f"encoder.down.{level}.block.{j}", width, out)
            width = out
            if _attends(cfg, res):
                d.attention(f"encoder.down.{level}.attn.{j}", width)
        if level != n - 1:
            d.conv(f"encoder.down.{level}.downsample.conv", width, width, 3)  # a plain strided Conv2d
            res //= 2
    _mid(d, "encoder", width)
    d.norm("encoder.norm_out", width)
    d.causal_conv("encoder.conv_out", width, 2 * cfg.latent_channels if cfg.double_z else cfg.latent_channels, 3)
    # Decoder (LTX2AudioDecoder).
    width, res = base * cfg.ch_mult[-1], cfg.resolution // 2 ** (n - 1)
    d.causal_conv("decoder.conv_in", cfg.latent_channels, width, 3)
    _mid(d, "decoder", width)
    for level in reversed(range(n)):
        out = base * cfg.ch_mult[level]
        for j in range(cfg.num_res_blocks + 1):
            d.resnet(f"decoder.up.{level}.block.{j}", width, out)
            width = out
            if _attends(cfg, res):
                d.attention(f"decoder.up.{level}.attn.{j}", width)
        if level != 0:
            d.causal_conv(f"decoder.up.{level}.upsample.conv", width, width, 3)
            res *= 2
    d.norm("decoder.norm_out", width)
    d.causal_conv("decoder.conv_out", width, cfg.output_channels, 3)
    d.tensor("latents_mean", (base,))
    d.tensor("latents_std", (base,))
    return d


def _mid(d: _Declaration, side: str, width: int) -> None:
    d.resnet(f"{side}.mid.block_1", width, width)
    if d.cfg.mid_block_add_attention:
        d.attention(f"{side}.mid.attn_1", width)
    d.resnet(f"{side}.mid.block_2", width, width)


def audio_vae_specs_and_rules(cfg: LTX2AudioVAEConfig) -> tuple[SpecTree, list[Rule]]:
    """The audio VAE's spec tree and its diffusers key-map rules.

    Paths are the diffusers module names with ``/`` for ``.`` (``decoder/up/1/block/0/conv1/conv/kernel``);
    conv kernels are ``(kh, kw, in, out)`` (time, mel); ``latents_mean`` / ``latents_std`` are top-level float32
    leaves of ``base_channels`` entries.
    """
    d = _declare(cfg)
    return unflatten(dict(d.specs)), list(d.rules)


def audio_vae_specs(cfg: LTX2AudioVAEConfig) -> SpecTree:
    return audio_vae_specs_and_rules(cfg)[0]


def audio_vae_keymap(cfg: LTX2AudioVAEConfig) -> KeyMap:
    """Key map of a diffusers-layout ``AutoencoderKLLTX2Audio`` (``audio_vae/diffusion_pytorch_model.safetensors``)."""
    return KeyMap(audio_vae_specs_and_rules(cfg)[1])


#: The release's names of the latent statistics (upstream ``PerChannelStatistics`` buffers).
RELEASE_STATISTICS = {"latents_mean": "per_channel_statistics.mean-of-means",
                      "latents_std": "per_channel_statistics.std-of-means"}


def release_name(key: str, prefix: str = "audio_vae.") -> str:
    """The release single-file name of a diffusers ``audio_vae`` key (upstream ltx-core module names, which equal
    diffusers' except the statistics; the file prefixes them with ``audio_vae.``: upstream
    ``AUDIO_VAE_DECODER_COMFY_KEYS_FILTER``)."""
    return prefix + RELEASE_STATISTICS.get(key, key)


def audio_vae_release_keymap(cfg: LTX2AudioVAEConfig, prefix: str = "audio_vae.") -> KeyMap:
    """Key map of the audio VAE in the release's single-file layout (:func:`release_name`), same parameter tree."""
    return KeyMap([Rule(release_name(r.key, prefix), r.path, r.layout) for r in audio_vae_specs_and_rules(cfg)[1]])


#: Top-level parts that encoding reads, and those that denormalising and decoding read.
ENCODER_PARTS = ("encoder", "latents_mean", "latents_std")
DECODER_PARTS = ("decoder", "latents_mean", "latents_std")


def load_audio_vae(path: str | os.PathLike, dtype: Any = np.float32,
                   parts: Collection[str] | None = None) -> tuple[LTX2AudioVAEConfig, dict]:
    """Load a diffusers ``audio_vae`` folder (``config.json`` + safetensors) into ``(cfg, params)``.

    Args:
      path: the folder. dtype: compute dtype of the kernels (float32 leaves stay float32).
      parts: top-level parts to read (:data:`DECODER_PARTS` for generation); None: all. The whole checkpoint is
        checked either way.

    Raises:
      ValueError: an unsupported configuration. CheckpointError: tensors that do not match it.
    """
    from vidax.checkpoint.loader import load_params
    from vidax.checkpoint.safetensors_io import CheckpointReader
    from vidax.core.config_values import read_json

    path = Path(path)
    cfg = LTX2AudioVAEConfig.from_dict(read_json(path / "config.json"))
    specs, rules = audio_vae_specs_and_rules(cfg)
    return cfg, load_params(CheckpointReader(path), KeyMap(rules), specs, dtype, source=str(path), parts=parts)


# ---------------------------------------------------------------------------------------------
# Building blocks (channels-last (B, T, M, C), pure)
# ---------------------------------------------------------------------------------------------


def _conv(p: dict, x: jax.Array, padding, stride: int = 1) -> jax.Array:
    w = p["kernel"]
    y = jax.lax.conv_general_dilated(x.astype(w.dtype), w, (stride, stride), padding, dimension_numbers=_DN,
                                     preferred_element_type=_F32)
    return y + p["bias"].astype(_F32)  # activations stay float32 (small: at most 512 x 64 per frame)


def _causal_conv(p: dict, x: jax.Array, axis: str) -> jax.Array:
    """``LTX2AudioCausalConv2d`` (stride 1): zero padding, all of it in front along the causal axis."""
    kh, kw = p["conv"]["kernel"].shape[:2]
    ph, pw = kh - 1, kw - 1
    even_h, even_w = (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2)
    pad = {"none": (even_h, even_w), "width": (even_h, (pw, 0)), "width-compatibility": (even_h, (pw, 0)),
           "height": ((ph, 0), even_w)}[axis]
    return _conv(p["conv"], x, pad)


def _norm(p: dict | None, x: jax.Array, kind: str) -> jax.Array:
    """``LTX2AudioPixelNorm`` (RMS over channels) or ``GroupNorm(32)``, in float32."""
    xf = x.astype(_F32)
    if kind == "pixel":
        return xf * jax.lax.rsqrt(jnp.mean(jnp.square(xf), axis=-1, keepdims=True) + NORM_EPS)
    g = xf.reshape(*xf.shape[:-1], 32, xf.shape[-1] // 32)
    mean = jnp.mean(g, axis=(1, 2, 4), keepdims=True)
    var = jnp.mean(jnp.square(g - mean), axis=(1, 2, 4), keepdims=True)
    y = ((g - mean) * jax.lax.rsqrt(var + NORM_EPS)).reshape(xf.shape)
    return y * p["scale"].astype(_F32) + p["bias"].astype(_F32)


def _resnet(p: dict, x: jax.Array, cfg: LTX2AudioVAEConfig) -> jax.Array:
    axis, kind = cfg.causality_axis, cfg.norm_type
    h = _causal_conv(p["conv1"], jax.nn.silu(_norm(p.get("norm1"), x, kind)), axis)
    h = _causal_conv(p["conv2"], jax.nn.silu(_norm(p.get("norm2"), h, kind)), axis)
    if "nin_shortcut" in p:
        x = _causal_conv(p["nin_shortcut"], x, axis)
    return x.astype(_F32) + h


def _attention(p: dict, x: jax.Array, cfg: LTX2AudioVAEConfig) -> jax.Array:
    """``LTX2AudioAttnBlock``: single-head attention over all (time, mel) positions, scale ``C ** -0.5``."""
    b, t, m, c = x.shape
    h = _norm(p.get("norm"), x, cfg.norm_type)
    q, k, v = (_conv(p[n], h, "VALID").reshape(b, t * m, c).astype(_F32) for n in ("q", "k", "v"))
    w = jax.nn.softmax(jnp.einsum("bic,bjc->bij", q, k) * (c ** -0.5), axis=-1)
    o = jnp.einsum("bij,bjc->bic", w, v).reshape(b, t, m, c)
    return x.astype(_F32) + _conv(p["proj_out"], o, "VALID")


def _mid_block(p: dict, x: jax.Array, cfg: LTX2AudioVAEConfig) -> jax.Array:
    x = _resnet(p["block_1"], x, cfg)
    if "attn_1" in p:
        x = _attention(p["attn_1"], x, cfg)
    return _resnet(p["block_2"], x, cfg)


def _stage(p: dict, x: jax.Array, cfg: LTX2AudioVAEConfig, blocks: int) -> jax.Array:
    for j in range(blocks):
        x = _resnet(p["block"][str(j)], x, cfg)
        if "attn" in p:
            x = _attention(p["attn"][str(j)], x, cfg)
    return x


_DOWN_PAD = {"none": ((0, 1), (0, 1)), "width": ((0, 1), (2, 0)), "height": ((2, 0), (0, 1)),
             "width-compatibility": ((0, 1), (1, 0))}  # ((time lo, hi), (mel lo, hi)), LTX2AudioDownsample


def _encoder(p: dict, cfg: LTX2AudioVAEConfig, x: jax.Array) -> jax.Array:
    n = len(cfg.ch_mult)
    x = _causal_conv(p["conv_in"], x, cfg.causality_axis)
    for level in range(n):
        x = _stage(p["down"][str(level)], x, cfg, cfg.num_res_blocks)
        if level != n - 1:
            x = _conv(p["down"][str(level)]["downsample"]["conv"], x, _DOWN_PAD[cfg.causality_axis], stride=2)
    x = _mid_block(p["mid"], x, cfg)
    x = jax.nn.silu(_norm(p.get("norm_out"), x, cfg.norm_type))
    return _causal_conv(p["conv_out"], x, cfg.causality_axis)


def _decoder(p: dict, cfg: LTX2AudioVAEConfig, z: jax.Array) -> jax.Array:
    axis = cfg.causality_axis
    x = _causal_conv(p["conv_in"], z, axis)
    x = _mid_block(p["mid"], x, cfg)
    for level in reversed(range(len(cfg.ch_mult))):
        x = _stage(p["up"][str(level)], x, cfg, cfg.num_res_blocks + 1)
        if level != 0:  # LTX2AudioUpsample: nearest x2, causal conv, first row of the causal axis dropped
            x = jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)
            x = _causal_conv(p["up"][str(level)]["upsample"]["conv"], x, axis)
            x = x[:, 1:] if axis == "height" else x[:, :, 1:] if axis == "width" else x
    x = jax.nn.silu(_norm(p.get("norm_out"), x, cfg.norm_type))
    return _causal_conv(p["conv_out"], x, axis)


@conv_jit(static_argnames=("cfg",))
def _decode_program(params: dict, cfg: LTX2AudioVAEConfig, z: jax.Array) -> jax.Array:
    b, _, f, m = z.shape
    y = _decoder(params["decoder"], cfg, z.transpose(0, 2, 3, 1)).astype(_F32)  # (B, T, M, C)
    # Crop, then zero-pad, to the target shape (AudioDecoder._adjust_output_shape).
    t_out, m_out = cfg.decoded_frames(f), (cfg.mel_bins if cfg.mel_bins is not None else m)
    y = y[:, :t_out, :m_out, :cfg.output_channels]
    y = jnp.pad(y, ((0, 0), (0, t_out - y.shape[1]), (0, m_out - y.shape[2]), (0, 0)))
    return y.transpose(0, 3, 1, 2)


@conv_jit(static_argnames=("cfg",))
def _encode_program(params: dict, cfg: LTX2AudioVAEConfig, mel: jax.Array) -> jax.Array:
    h = _encoder(params["encoder"], cfg, mel.transpose(0, 2, 3, 1)).astype(_F32)
    return h[..., :cfg.latent_channels].transpose(0, 3, 1, 2)  # the posterior's mode: its mean half


def _check(x: Any, channels: int, what: str) -> None:
    if getattr(x, "ndim", None) != 4 or x.shape[1] != channels or min(x.shape) < 1:
        raise ValueError(f"{what} must be (B, {channels}, time, mel_bins) with no empty axis, "
                         f"got {getattr(x, 'shape', type(x))}")


def decode(params: dict, cfg: LTX2AudioVAEConfig, latents: jax.Array) -> jax.Array:
    """Decode (already denormalised) latents to a mel spectrogram (``AutoencoderKLLTX2Audio.decode``).

    Args:
      params: the VAE's parameters (at least :data:`DECODER_PARTS`).
      latents: ``(B, latent_channels, F, M)`` (LTX-2.x: ``M = mel_bins / 4 = 16``), any float dtype.

    Returns:
      float32 ``(B, output_channels, T, mel_bins)`` log-mel spectrogram, ``T = 4F - 3`` (causal axis set).

    Raises:
      ValueError: latents of the wrong rank or channel count; a tree without the decoder.
    """
    require_parts(params, ("decoder",), "audio VAE decoding", "load the audio VAE's DECODER_PARTS")
    _check(latents, cfg.latent_channels, "audio latents")
    return _decode_program(params, cfg, jnp.asarray(latents))


def encode(params: dict, cfg: LTX2AudioVAEConfig, mel: jax.Array) -> jax.Array:
    """Encode a mel spectrogram to the posterior's mode (``AutoencoderKLLTX2Audio.encode(x).latent_dist.mode()``).

    Args:
      mel: ``(B, in_channels, T, mel_bins)``.

    Returns:
      float32 ``(B, latent_channels, F, M)``, not normalised (:func:`normalize_latents` gives the model's space).
    """
    require_parts(params, ("encoder",), "audio VAE encoding", "load the audio VAE's ENCODER_PARTS")
    _check(mel, cfg.in_channels, "mel spectrogram")
    return _encode_program(params, cfg, jnp.asarray(mel))


# ---------------------------------------------------------------------------------------------
# Latent packing and statistics (LTX2Pipeline)
# ---------------------------------------------------------------------------------------------


def pack_latents(latents: jax.Array) -> jax.Array:
    """``(B, C, L, M)`` -> ``(B, L, C * M)`` tokens (``LTX2Pipeline._pack_audio_latents``, no patching)."""
    b, c, n, m = latents.shape
    return jnp.asarray(latents).transpose(0, 2, 1, 3).reshape(b, n, c * m)


def unpack_latents(tokens: jax.Array, mel_bins: int) -> jax.Array:
    """Inverse of :func:`pack_latents`: ``(B, L, C * M)`` -> ``(B, C, L, M)`` with ``M = mel_bins``."""
    b, n, d = tokens.shape
    if d % mel_bins:
        raise ValueError(f"audio tokens of {d} features do not split into {mel_bins} latent mel bins")
    return jnp.asarray(tokens).reshape(b, n, d // mel_bins, mel_bins).transpose(0, 2, 1, 3)


def _stats(params: dict, features: int, use: str) -> tuple[jax.Array, jax.Array]:
    require_parts(params, ("latents_mean", "latents_std"), use, "load the audio VAE's DECODER_PARTS")
    mean, std = params["latents_mean"], params["latents_std"]
    if mean.shape != (features,):
        raise ValueError(f"{use}: the audio VAE has {mean.shape[0]} latent statistics, the packed latents "
                         f"{features} features (latent_channels x latent mel bins must equal base_channels)")
    return mean.astype(_F32), std.astype(_F32)


def denormalize_latents(params: dict, latents: jax.Array) -> jax.Array:
    """``(B, C, L, M)`` model-space latents -> VAE space: ``x * std + mean`` per packed feature, float32.

    As ``LTX2Pipeline`` (``_denormalize_audio_latents`` on the packed tokens, then ``_unpack_audio_latents``);
    upstream ``AudioDecoder._denormalize_latents`` does the same through its patchifier.
    """
    b, c, n, m = latents.shape
    mean, std = _stats(params, c * m, "denormalize audio latents")
    return unpack_latents(pack_latents(latents).astype(_F32) * std + mean, m)


def normalize_latents(params: dict, latents: jax.Array) -> jax.Array:
    """Inverse of :func:`denormalize_latents` (``LTX2Pipeline._normalize_audio_latents``), float32."""
    b, c, n, m = latents.shape
    mean, std = _stats(params, c * m, "normalize audio latents")
    return unpack_latents((pack_latents(latents).astype(_F32) - mean) / std, m)

