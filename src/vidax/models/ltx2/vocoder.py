"""The LTX-2 vocoders (diffusers ``LTX2Vocoder``, ``LTX2VocoderWithBWE``) as pure JAX functions: mel -> waveform.

Reference: ``diffusers/pipelines/ltx2/vocoder.py`` (``LTX2Vocoder``, ``ResBlock``, ``SnakeBeta``,
``AntiAliasAct1d``, ``UpSample1d``, ``DownSample1d``, ``CausalSTFT``, ``MelSTFT``, ``LTX2VocoderWithBWE``);
upstream ``ltx_core/model/audio_vae/vocoder.py`` (``Vocoder``, ``AMPBlock1``, ``Activation1d``, ``VocoderWithBWE``)
and ``model_configurator.py`` (``VocoderConfigurator``).

Releases (diffusers ``scripts/convert_ltx2_to_diffusers.py``)
    * LTX-2.0: ``LTX2Vocoder``, HiFi-GAN style (leaky ReLU resblocks, tanh out), 16 kHz mel -> 24 kHz stereo.
    * LTX-2.3 and LTX-2.5 (one configuration): ``LTX2VocoderWithBWE``: a BigVGAN-v2 vocoder (anti-aliased
      SnakeBeta resblocks, no final activation in diffusers) to 16 kHz, a causal log-mel analysis of its output, a
      second BigVGAN-v2 generator that predicts a residual at 48 kHz, added to a Hann-sinc x3 resampling of the
      16 kHz waveform and clipped to [-1, 1].

Where diffusers departs from upstream
    Upstream builds the BWE's first-stage vocoder with ``apply_final_activation=True`` (``_vocoder_from_config``):
    its 16 kHz waveform is clamped to [-1, 1] (``use_tanh_at_final`` false) before the mel analysis and the skip
    resampling; diffusers' converter maps ``use_tanh_at_final=false`` to ``final_act_fn=None``, which skips it.
    Upstream is followed: a BWE whose first stage has ``final_act_fn=None`` clamps (``tanh`` stays ``tanh``). The
    BWE generator itself never takes a final activation upstream (``apply_final_activation=False``), whatever
    ``bwe_final_act_fn`` says; followed too.

Layout and precision
    Channels-first ``(B, C, L)`` throughout, so the kernels are used as the checkpoint stores them (``Conv1d``
    ``(out, in, k)``, ``ConvTranspose1d`` ``(in, out, k)``). Everything runs in float32 whatever the checkpoint's
    dtype, as upstream's ``VocoderWithBWE.forward`` does (fp32 autocast: bf16 accumulation through ~100 sequential
    convolutions degrades the output): every leaf is a float32 leaf. The anti-aliasing filters and the STFT / mel
    bases are the checkpoint's persistent buffers, loaded (upstream loads them too); the BWE's Hann resampling filter
    is not saved by either and is computed here as the reference computes it.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint.keymap import KeyMap, Rule
from vidax.core.config_values import config_values
from vidax.core.layers import conv_jit
from vidax.core.params import ParamSpec, SpecTree, unflatten

_F32 = jnp.float32
_DN = ("NCH", "OIH", "NCH")
_DN_T = ("NCH", "IOH", "NCH")
ACTIVATIONS = ("leaky_relu", "snake", "snakebeta")
FINAL_ACTIVATIONS = (None, "tanh", "clamp")
SNAKE_EPS = 1e-9
#: nn.LeakyReLU()'s default slope, which the reference's output activation takes (not the configured one).
OUT_LEAKY_SLOPE = 0.01


@dataclass(frozen=True)
class LTX2VocoderConfig:
    """Configuration of ``LTX2Vocoder`` (the keys of a diffusers ``vocoder/config.json``; defaults: LTX-2.0).

    Attributes:
      in_channels: mel channels x mel bins (2 x 64 = 128). hidden_channels: width after ``conv_in``, halved by each
        upsampler. out_channels: waveform channels (2).
      upsample_kernel_sizes, upsample_factors: per transposed-convolution upsampler.
      resnet_kernel_sizes, resnet_dilations: the parallel resblocks after each upsampler (their mean is taken).
      act_fn: ``"leaky_relu"``, ``"snake"`` or ``"snakebeta"``; antialias: wrap the resblocks' activations in
        x2 up / down kaiser-sinc filters (``antialias_ratio``, ``antialias_kernel_size``).
      final_act_fn: ``"tanh"``, ``"clamp"`` or None. final_bias: ``conv_out`` has a bias.
      output_sampling_rate: the waveform's sample rate (Hz).
    """

    in_channels: int = 128
    hidden_channels: int = 1024
    out_channels: int = 2
    upsample_kernel_sizes: tuple[int, ...] = (16, 15, 8, 4, 4)
    upsample_factors: tuple[int, ...] = (6, 5, 2, 2, 2)
    resnet_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resnet_dilations: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    act_fn: str = "leaky_relu"
    leaky_relu_negative_slope: float = 0.1
    antialias: bool = False
    antialias_ratio: int = 2
    antialias_kernel_size: int = 12
    final_act_fn: str | None = "tanh"
    final_bias: bool = True
    output_sampling_rate: int = 24000

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, list):
                object.__setattr__(self, f.name, tuple(tuple(e) if isinstance(e, list) else e for e in v))
        self.check("LTX2VocoderConfig")

    def check(self, what: str) -> None:
        problems = []
        n = len(self.upsample_factors)
        if not 1 <= n <= 16 or len(self.upsample_kernel_sizes) != n:
            problems.append(f"{n} upsample_factors and {len(self.upsample_kernel_sizes)} upsample_kernel_sizes "
                            "(1 to 16, as many of each)")
        elif any(s < 1 or k < s or k > 1024 for s, k in zip(self.upsample_factors, self.upsample_kernel_sizes)):
            problems.append("upsample kernel sizes must be at least their factors (and at most 1024)")
        if len(self.resnet_dilations) != len(self.resnet_kernel_sizes) or not self.resnet_kernel_sizes:
            problems.append("resnet_kernel_sizes and resnet_dilations must be non-empty and as long")
        elif any(not 1 <= k <= 1024 for k in self.resnet_kernel_sizes) or any(
                not d or not all(1 <= e <= 1024 for e in d) for d in self.resnet_dilations):
            problems.append("resnet kernel sizes and dilations must be in 1..1024")
        if self.act_fn not in ACTIVATIONS:
            problems.append(f"act_fn={self.act_fn!r} (known: {list(ACTIVATIONS)})")
        elif self.act_fn == "leaky_relu" and self.antialias:
            problems.append("antialias with leaky_relu (the reference wraps its second activations twice)")
        if self.final_act_fn not in FINAL_ACTIVATIONS:
            problems.append(f"final_act_fn={self.final_act_fn!r} (known: {list(FINAL_ACTIVATIONS)})")
        if min(self.in_channels, self.out_channels, self.output_sampling_rate) < 1 or not (
                2 ** n <= self.hidden_channels <= 1 << 16) or self.hidden_channels % 2 ** n:
            problems.append(f"hidden_channels={self.hidden_channels} must be halved {n} times exactly (at most "
                            "65536); in_channels, out_channels and output_sampling_rate positive")
        if (self.act_fn != "leaky_relu") and not (1 <= self.antialias_ratio <= 16
                                                  and self.antialias_ratio <= self.antialias_kernel_size <= 256):
            problems.append("antialias_ratio in 1..16 and antialias_kernel_size in ratio..256")
        if problems:
            raise ValueError(f"{what}: unsupported " + "; ".join(problems))

    @property
    def upsample_factor(self) -> int:
        """Waveform samples per mel frame."""
        return math.prod(self.upsample_factors)


@dataclass(frozen=True)
class LTX2VocoderWithBWEConfig:
    """Configuration of ``LTX2VocoderWithBWE`` (defaults: LTX-2.3 / 2.5, which diffusers' defaults are).

    Attributes:
      vocoder: the first stage (``vocoder.*`` keys), at ``input_sampling_rate``.
      bwe: the bandwidth-extension generator (``bwe_generator.*``), at ``output_sampling_rate``.
      filter_length, hop_length, window_length, num_mel_channels: the causal STFT / log-mel analysis of the first
        stage's output (``mel_stft.*`` buffers).
      input_sampling_rate, output_sampling_rate: 16 and 48 kHz; their ratio is the resampler's.
    """

    vocoder: LTX2VocoderConfig = LTX2VocoderConfig(
        hidden_channels=1536, upsample_kernel_sizes=(11, 4, 4, 4, 4, 4), upsample_factors=(5, 2, 2, 2, 2, 2),
        act_fn="snakebeta", antialias=True, final_act_fn=None, final_bias=False, output_sampling_rate=16000)
    bwe: LTX2VocoderConfig = LTX2VocoderConfig(
        hidden_channels=512, upsample_kernel_sizes=(12, 11, 4, 4, 4), upsample_factors=(6, 5, 2, 2, 2),
        act_fn="snakebeta", antialias=True, final_act_fn=None, final_bias=False, output_sampling_rate=48000)
    filter_length: int = 512
    hop_length: int = 80
    window_length: int = 512
    num_mel_channels: int = 64
    input_sampling_rate: int = 16000
    output_sampling_rate: int = 48000

    def __post_init__(self):
        problems = []
        if not 1 <= self.hop_length <= self.window_length <= self.filter_length <= 1 << 14:
            problems.append("1 <= hop_length <= window_length <= filter_length <= 16384")
        ratio = self.output_sampling_rate // max(self.input_sampling_rate, 1)
        if self.input_sampling_rate < 1 or ratio < 1 or ratio * self.input_sampling_rate != self.output_sampling_rate:
            problems.append(f"output_sampling_rate {self.output_sampling_rate} must be a multiple of "
                            f"input_sampling_rate {self.input_sampling_rate}")
        elif self.bwe.upsample_factor != ratio * self.hop_length:
            problems.append(f"the BWE generator upsamples by {self.bwe.upsample_factor} per mel frame, the resampled "
                            f"skip by {ratio} x hop_length {self.hop_length}: they must match")
        if self.bwe.in_channels != self.vocoder.out_channels * self.num_mel_channels:
            problems.append(f"bwe_in_channels {self.bwe.in_channels} != out_channels x num_mel_channels")
        if self.bwe.out_channels != self.vocoder.out_channels:
            problems.append("bwe_out_channels != out_channels (the residual is added to the resampled waveform)")
        if problems:
            raise ValueError("LTX2VocoderWithBWEConfig: unsupported " + "; ".join(problems))

    @property
    def stage1_final_act(self) -> str:
        """The first stage's output activation as upstream applies it (see the module docstring)."""
        return self.vocoder.final_act_fn or "clamp"

    @property
    def out_channels(self) -> int:
        return self.vocoder.out_channels

    @property
    def upsample_factor(self) -> int:
        """Output samples per mel frame."""
        return self.vocoder.upsample_factor * self.output_sampling_rate // self.input_sampling_rate


_VOCODER_FIELDS = [f.name for f in dataclasses.fields(LTX2VocoderConfig)]


def vocoder_config_from_dict(config: dict[str, Any]) -> LTX2VocoderConfig | LTX2VocoderWithBWEConfig:
    """Build from a diffusers ``vocoder/config.json`` dict: ``LTX2Vocoder`` or ``LTX2VocoderWithBWE`` by its
    ``_class_name`` (without one: BWE when ``bwe_*`` keys are present).

    Raises:
      ValueError: another class, an unknown key, a value of the wrong type, an unsupported setting.
    """
    name = config.get("_class_name")
    bwe = name == "LTX2VocoderWithBWE" or (name is None and any(k.startswith("bwe_") for k in config))
    if name not in (None, "LTX2Vocoder", "LTX2VocoderWithBWE"):
        raise ValueError(f"vocoder config.json is for {name!r}, not 'LTX2Vocoder' or 'LTX2VocoderWithBWE'")
    keys = {k for k in config if not k.startswith("_")}
    if not bwe:
        unknown = sorted(keys - set(_VOCODER_FIELDS))
        if unknown:
            raise ValueError(f"LTX2VocoderConfig: unknown config keys {unknown} (not LTX2Vocoder arguments)")
        return LTX2VocoderConfig(**config_values(LTX2VocoderConfig, config, "LTX-2 vocoder config"))
    top = ("filter_length", "hop_length", "window_length", "num_mel_channels", "input_sampling_rate",
           "output_sampling_rate")
    stage = [f for f in _VOCODER_FIELDS if f != "output_sampling_rate"]
    unknown = sorted(keys - set(top) - set(stage) - {f"bwe_{f}" for f in stage})
    if unknown:
        raise ValueError(f"LTX2VocoderWithBWEConfig: unknown config keys {unknown} (not LTX2VocoderWithBWE arguments)")
    defaults = LTX2VocoderWithBWEConfig()
    first = {f: config[f] for f in stage if f in config}
    second = {f: config[f"bwe_{f}"] for f in stage if f"bwe_{f}" in config}
    outer = {f: config[f] for f in top if f in config}
    outer = {**{f: getattr(defaults, f) for f in top}, **config_values(LTX2VocoderWithBWEConfig, outer,
                                                                       "LTX-2 BWE vocoder config")}
    first = config_values(LTX2VocoderConfig, first, "LTX-2 BWE vocoder config (vocoder)")
    second = config_values(LTX2VocoderConfig, second, "LTX-2 BWE vocoder config (bwe_*)")
    return LTX2VocoderWithBWEConfig(
        vocoder=dataclasses.replace(defaults.vocoder, **first, output_sampling_rate=outer["input_sampling_rate"]),
        bwe=dataclasses.replace(defaults.bwe, **second, output_sampling_rate=outer["output_sampling_rate"]),
        **outer)


# ---------------------------------------------------------------------------------------------
# Parameter declaration and key map
# ---------------------------------------------------------------------------------------------


def _declare_stage(cfg: LTX2VocoderConfig, prefix: str, specs: dict, rules: list) -> None:
    def tensor(key: str, shape: tuple[int, ...]):
        path = (prefix + key).replace(".", "/")
        specs[path] = ParamSpec(shape, fp32=True)
        rules.append(Rule(prefix + key, path))

    def conv(key: str, shape: tuple[int, ...], bias: bool = True):
        tensor(f"{key}.weight", shape)  # kept as stored: (out, in, k), or (in, out, k) transposed
        if bias:
            tensor(f"{key}.bias", (shape[1] if "upsamplers" in key else shape[0],))

    def act(key: str, ch: int, antialias: bool, beta: bool):
        inner = f"{key}.act" if antialias else key
        tensor(f"{inner}.alpha", (ch,))
        if beta:
            tensor(f"{inner}.beta", (ch,))
        if antialias:
            for side in ("upsample", "downsample"):
                tensor(f"{key}.{side}.filter", (1, 1, cfg.antialias_kernel_size))

    conv("conv_in", (cfg.hidden_channels, cfg.in_channels, 7))
    width, snake = cfg.hidden_channels, cfg.act_fn != "leaky_relu"
    for i, k in enumerate(cfg.upsample_kernel_sizes):
        conv(f"upsamplers.{i}", (width, width // 2, k))
        width //= 2
        for j, (ks, dil) in enumerate(zip(cfg.resnet_kernel_sizes, cfg.resnet_dilations)):
            r = f"resnets.{i * len(cfg.resnet_kernel_sizes) + j}"
            for n in range(len(dil)):
                conv(f"{r}.convs1.{n}", (width, width, ks))
                conv(f"{r}.convs2.{n}", (width, width, ks))
                if snake:
                    act(f"{r}.acts1.{n}", width, cfg.antialias, cfg.act_fn == "snakebeta")
                    act(f"{r}.acts2.{n}", width, cfg.antialias, cfg.act_fn == "snakebeta")
    if snake:
        act("act_out", width, True, True)  # always anti-aliased SnakeBeta (reference)
    conv("conv_out", (cfg.out_channels, width, 7), bias=cfg.final_bias)


def vocoder_specs_and_rules(cfg: LTX2VocoderConfig | LTX2VocoderWithBWEConfig) -> tuple[SpecTree, KeyMap]:
    """The spec tree (every leaf float32, paths the diffusers names with ``/``) and the diffusers key map.

    Kernels are kept in the checkpoint's layout (``Conv1d`` ``(out, in, k)``, ``ConvTranspose1d`` ``(in, out, k)``).
    With BWE: ``vocoder/...``, ``bwe_generator/...``, ``mel_stft/mel_basis`` ``(n_mels, n_freqs)`` and
    ``mel_stft/stft_fn/forward_basis`` ``(2 n_freqs, 1, filter_length)``; the unused ``inverse_basis`` is ignored.
    """
    specs: dict[str, ParamSpec] = {}
    rules: list[Rule] = []
    if isinstance(cfg, LTX2VocoderConfig):
        _declare_stage(cfg, "", specs, rules)
        return unflatten(specs), KeyMap(rules)
    _declare_stage(cfg.vocoder, "vocoder.", specs, rules)
    _declare_stage(cfg.bwe, "bwe_generator.", specs, rules)
    n_freqs = cfg.filter_length // 2 + 1
    for key, shape in (("mel_stft.mel_basis", (cfg.num_mel_channels, n_freqs)),
                       ("mel_stft.stft_fn.forward_basis", (2 * n_freqs, 1, cfg.filter_length))):
        specs[key.replace(".", "/")] = ParamSpec(shape, fp32=True)
        rules.append(Rule(key, key.replace(".", "/")))
    return unflatten(specs), KeyMap(rules, ignore=[r"mel_stft\.stft_fn\.inverse_basis\Z"])


#: diffusers module names -> upstream ltx-core's (``Vocoder``: ``conv_pre``, ``ups``, ``resblocks``, ``act_post``,
#: ``conv_post``; diffusers' ``LTX_2_0_VOCODER_RENAME_DICT`` maps them the other way).
RELEASE_MODULES = {"conv_in": "conv_pre", "conv_out": "conv_post", "upsamplers": "ups", "resnets": "resblocks",
                   "act_out": "act_post"}


def release_name(key: str, prefix: str = "vocoder.") -> str:
    """The release single-file name of a diffusers ``vocoder`` key: upstream module names (:data:`RELEASE_MODULES`;
    the anti-aliasing low-pass filter sits one module deeper upstream, ``downsample.lowpass.filter``), prefixed with
    ``vocoder.`` (upstream ``VOCODER_COMFY_KEYS_FILTER`` strips it once; a BWE file thus holds
    ``vocoder.vocoder.conv_pre.weight`` and ``vocoder.mel_stft.mel_basis``)."""
    parts = [RELEASE_MODULES.get(p, p) for p in key.split(".")]
    if parts[-2:] == ["downsample", "filter"]:
        parts[-1:] = ["lowpass", "filter"]
    return prefix + ".".join(parts)


def vocoder_release_keymap(cfg: LTX2VocoderConfig | LTX2VocoderWithBWEConfig, prefix: str = "vocoder.") -> KeyMap:
    """Key map of the vocoder in the release's single-file layout (:func:`release_name`), same parameter tree."""
    _, keymap = vocoder_specs_and_rules(cfg)
    ignore = [r"mel_stft\.stft_fn\.inverse_basis\Z"] if keymap.ignore else []
    return KeyMap([Rule(release_name(r.key, prefix), r.path, r.layout) for r in keymap.rules],
                  ignore=[re.escape(prefix) + i for i in ignore])


def load_vocoder(path: str | os.PathLike) -> tuple[LTX2VocoderConfig | LTX2VocoderWithBWEConfig, dict]:
    """Load a diffusers ``vocoder`` folder into ``(cfg, params)``, every leaf float32 (see the module docstring).

    Raises:
      ValueError: an unsupported configuration. CheckpointError: tensors that do not match it.
    """
    from vidax.checkpoint.loader import load_params
    from vidax.checkpoint.safetensors_io import CheckpointReader
    from vidax.core.config_values import read_json

    path = Path(path)
    cfg = vocoder_config_from_dict(read_json(path / "config.json"))
    specs, keymap = vocoder_specs_and_rules(cfg)
    return cfg, load_params(CheckpointReader(path), keymap, specs, np.float32, source=str(path))


# ---------------------------------------------------------------------------------------------
# Building blocks (channels-first (B, C, L), float32, pure)
# ---------------------------------------------------------------------------------------------


def _conv1d(p: dict, x: jax.Array, dilation: int = 1, padding: int | None = None, stride: int = 1) -> jax.Array:
    """``nn.Conv1d``; ``padding=None``: PyTorch's ``"same"`` (``d (k - 1)`` split, the extra sample behind)."""
    w = p["weight"].astype(_F32)
    total = dilation * (w.shape[-1] - 1)
    pad = (total // 2, total - total // 2) if padding is None else (padding, padding)
    y = jax.lax.conv_general_dilated(x, w, (stride,), [pad], rhs_dilation=(dilation,), dimension_numbers=_DN,
                                     precision=jax.lax.Precision.HIGHEST)
    return y + p["bias"].astype(_F32)[:, None] if "bias" in p else y


def _conv_transpose1d(w: jax.Array, x: jax.Array, stride: int, padding: int) -> jax.Array:
    """``F.conv_transpose1d`` with ``w`` ``(in, out, k)``: the dilated input convolved with the flipped kernel."""
    k = w.shape[-1]
    return jax.lax.conv_general_dilated(x, w[..., ::-1].astype(_F32), (1,), [(k - 1 - padding, k - 1 - padding)],
                                        lhs_dilation=(stride,), dimension_numbers=_DN_T,
                                        precision=jax.lax.Precision.HIGHEST)


def _depthwise(x: jax.Array, fn) -> jax.Array:
    """Apply a one-channel filter ``fn`` to every channel: ``(B, C, L)`` as ``(B * C, 1, L)``."""
    b, c, n = x.shape
    y = fn(x.reshape(b * c, 1, n))
    return y.reshape(b, c, y.shape[-1])


def _upsample(filt: jax.Array, x: jax.Array, ratio: int, pad: int, pad_left: int, pad_right: int) -> jax.Array:
    """``UpSample1d.forward``: replicate-pad, ``ratio * conv_transpose1d`` with the filter, crop."""
    x = jnp.pad(x, ((0, 0), (0, 0), (pad, pad)), mode="edge")
    y = ratio * _depthwise(x, lambda v: _conv_transpose1d(filt.reshape(1, 1, -1), v, ratio, 0))
    return y[..., pad_left: y.shape[-1] - pad_right]


def _snake(p: dict, x: jax.Array) -> jax.Array:
    """``SnakeBeta`` (log-scale parameters): ``x + sin(alpha x)^2 / (beta + eps)``; no ``beta``: ``alpha``."""
    alpha = jnp.exp(p["alpha"].astype(_F32))[:, None]
    amp = jnp.exp(p["beta"].astype(_F32))[:, None] if "beta" in p else alpha
    return x + (1.0 / (amp + SNAKE_EPS)) * jnp.square(jnp.sin(x * alpha))


def _antialiased(p: dict, x: jax.Array, ratio: int) -> jax.Array:
    """``AntiAliasAct1d``: kaiser-sinc x``ratio`` upsampling, snake, low-pass and x``ratio`` downsampling."""
    k = p["upsample"]["filter"].shape[-1]
    pad = k // ratio - 1
    x = _upsample(p["upsample"]["filter"], x, ratio, pad, pad * ratio + (k - ratio) // 2,
                  pad * ratio + (k - ratio + 1) // 2)
    x = _snake(p["act"], x)
    x = jnp.pad(x, ((0, 0), (0, 0), (k // 2 + k % 2 - 1, k // 2)), mode="edge")
    filt = p["downsample"]["filter"].reshape(1, 1, -1).astype(_F32)
    return _depthwise(x, lambda v: jax.lax.conv_general_dilated(v, filt, (ratio,), [(0, 0)], dimension_numbers=_DN,
                                                                precision=jax.lax.Precision.HIGHEST))


def _act(p: dict | None, x: jax.Array, cfg: LTX2VocoderConfig) -> jax.Array:
    if cfg.act_fn == "leaky_relu":
        return jax.nn.leaky_relu(x, cfg.leaky_relu_negative_slope)
    return _antialiased(p, x, cfg.antialias_ratio) if cfg.antialias else _snake(p, x)


def _resblock(p: dict, x: jax.Array, cfg: LTX2VocoderConfig, dilations: tuple[int, ...]) -> jax.Array:
    """``ResBlock`` (upstream ``ResBlock1`` / ``AMPBlock1``): per dilation, act -> dilated conv -> act -> conv."""
    for n, d in enumerate(dilations):
        acts = (p.get("acts1", {}).get(str(n)), p.get("acts2", {}).get(str(n)))
        h = _conv1d(p["convs1"][str(n)], _act(acts[0], x, cfg), dilation=d)
        x = x + _conv1d(p["convs2"][str(n)], _act(acts[1], h, cfg))
    return x


def _generator(p: dict, cfg: LTX2VocoderConfig, mel: jax.Array, final_act: str | None) -> jax.Array:
    """``LTX2Vocoder.forward``: ``(B, C, T, M)`` mel -> ``(B, out_channels, T * prod(upsample_factors))``."""
    b, c, t, m = mel.shape
    x = _conv1d(p["conv_in"], mel.astype(_F32).transpose(0, 1, 3, 2).reshape(b, c * m, t), padding=3)
    nk = len(cfg.resnet_kernel_sizes)
    for i, (s, k) in enumerate(zip(cfg.upsample_factors, cfg.upsample_kernel_sizes)):
        if cfg.act_fn == "leaky_relu":
            x = jax.nn.leaky_relu(x, cfg.leaky_relu_negative_slope)
        up = p["upsamplers"][str(i)]
        x = _conv_transpose1d(up["weight"], x, s, (k - s) // 2) + up["bias"].astype(_F32)[:, None]
        outs = [_resblock(p["resnets"][str(i * nk + j)], x, cfg, d) for j, d in enumerate(cfg.resnet_dilations)]
        x = sum(outs[1:], outs[0]) / nk
    x = jax.nn.leaky_relu(x, OUT_LEAKY_SLOPE) if cfg.act_fn == "leaky_relu" else _antialiased(
        p["act_out"], x, cfg.antialias_ratio)
    x = _conv1d(p["conv_out"], x, padding=3)
    if final_act == "tanh":
        return jnp.tanh(x)
    return jnp.clip(x, -1.0, 1.0) if final_act == "clamp" else x


def hann_resample_filter(ratio: int) -> np.ndarray:
    """The BWE's x``ratio`` Hann-windowed sinc filter (``UpSample1d(window_type="hann")``), float32 ``(K,)``."""
    rolloff, lowpass_width = 0.99, 6
    width = math.ceil(lowpass_width / rolloff)
    t = (np.arange(2 * width * ratio + 1, dtype=np.float32) / np.float32(ratio) - np.float32(width)) * np.float32(
        rolloff)
    window = np.cos(np.clip(t, -lowpass_width, lowpass_width) * np.float32(math.pi / lowpass_width / 2)) ** 2
    return (np.sinc(t.astype(np.float64)) * window * rolloff / ratio).astype(np.float32)


def _log_mel(p: dict, cfg: LTX2VocoderWithBWEConfig, wave: jax.Array) -> jax.Array:
    """``MelSTFT`` on ``(N, L)`` waveforms: causal (left-padded) STFT by convolution with the stored bases,
    magnitude, mel projection, ``log(max(mel, 1e-5))``; ``(N, n_mels, frames)``."""
    x = jnp.pad(wave[:, None, :], ((0, 0), (0, 0), (max(0, cfg.window_length - cfg.hop_length), 0)))
    basis = p["stft_fn"]["forward_basis"].astype(_F32)
    spec = jax.lax.conv_general_dilated(x, basis, (cfg.hop_length,), [(0, 0)], dimension_numbers=_DN,
                                        precision=jax.lax.Precision.HIGHEST)
    nf = spec.shape[1] // 2
    magnitude = jnp.sqrt(jnp.square(spec[:, :nf]) + jnp.square(spec[:, nf:]))
    mel = jnp.einsum("mf,nft->nmt", p["mel_basis"].astype(_F32), magnitude, precision=jax.lax.Precision.HIGHEST)
    return jnp.log(jnp.maximum(mel, 1e-5))


@conv_jit(static_argnames=("cfg",))
def _vocode_program(params: dict, cfg, mel: jax.Array) -> jax.Array:
    if isinstance(cfg, LTX2VocoderConfig):
        return _generator(params, cfg, mel, cfg.final_act_fn)
    x = _generator(params["vocoder"], cfg.vocoder, mel, cfg.stage1_final_act)
    b, c, n = x.shape
    x = jnp.pad(x, ((0, 0), (0, 0), (0, -n % cfg.hop_length)))  # whole mel frames
    mel2 = _log_mel(params["mel_stft"], cfg, x.reshape(b * c, -1))
    mel2 = mel2.reshape(b, c, *mel2.shape[1:]).transpose(0, 1, 3, 2)  # (B, C, frames, n_mels)
    residual = _generator(params["bwe_generator"], cfg.bwe, mel2, None)
    ratio = cfg.output_sampling_rate // cfg.input_sampling_rate
    filt = jnp.asarray(hann_resample_filter(ratio))
    width = (filt.shape[0] - 1) // (2 * ratio)
    skip = _upsample(filt, x, ratio, width, 2 * width * ratio, filt.shape[0] - ratio)
    return jnp.clip(residual + skip, -1.0, 1.0)[..., : n * ratio]


def vocode(params: dict, cfg: LTX2VocoderConfig | LTX2VocoderWithBWEConfig, mel: jax.Array) -> jax.Array:
    """Mel spectrogram -> waveform (``LTX2Vocoder.forward`` / ``LTX2VocoderWithBWE.forward``), float32.

    Args:
      params: from :func:`load_vocoder`.
      mel: ``(B, channels, T, mel_bins)`` log-mel (the audio VAE's decode), ``channels * mel_bins == in_channels``.

    Returns:
      float32 ``(B, out_channels, samples)`` in [-1, 1] with BWE (and with a tanh / clamp output), at
      ``cfg.output_sampling_rate``: ``samples = T * prod(upsample_factors)`` (x the BWE's rate ratio).

    Raises:
      ValueError: a mel of the wrong rank or size.
    """
    first = cfg if isinstance(cfg, LTX2VocoderConfig) else cfg.vocoder
    if getattr(mel, "ndim", None) != 4 or mel.shape[1] * mel.shape[3] != first.in_channels or min(mel.shape) < 1:
        raise ValueError(f"mel must be (B, channels, T, mel_bins) with channels x mel_bins = {first.in_channels}, "
                         f"got {getattr(mel, 'shape', type(mel))}")
    return _vocode_program(params, cfg, jnp.asarray(mel, _F32))
