"""The LTX-Video VAE (diffusers ``AutoencoderKLLTXVideo``, releases 0.9.0 to 0.9.8) as pure JAX functions.

Reference: ``diffusers/models/autoencoders/autoencoder_kl_ltx.py`` (``AutoencoderKLLTXVideo``,
``LTXVideoEncoder3d``, ``LTXVideoDecoder3d``, ``LTXVideoCausalConv3d``, ``LTXVideoResnetBlock3d``,
``LTXVideoDownsampler3d``, ``LTXVideoUpsampler3d``, ``LTXVideoDownBlock3D``, ``LTXVideo095DownBlock3D``,
``LTXVideoMidBlock3d``, ``LTXVideoUpBlock3d``); latent statistics as ``pipelines/ltx/pipeline_ltx.py``
(``_normalize_latents``, ``_denormalize_latents``) uses them.

Variants (diffusers ``scripts/convert_ltx_to_diffusers.py``)
    * 0.9.0: four ``LTXVideoDownBlock3D`` (strided-convolution downsampling, a ``conv_out`` resnet where
      the width grows), a plain decoder (``conv_in`` resnets where the width shrinks).
    * 0.9.1: the same encoder; a decoder with timestep conditioning (sinusoidal embedding -> MLP -> per
      resnet scale/shift), noise injected after each convolution of the resnets (``decoder_inject_noise``),
      and residual depth-to-space upsamplers that halve the width (``upsample_residual``,
      ``upsample_factor=2``).
    * 0.9.5 / 0.9.7 / 0.9.8 (one VAE configuration): four ``LTXVideo095DownBlock3D`` with
      space-to-depth downsamplers (``downsample_type`` spatial, temporal, spatiotemporal x2) that carry a
      grouped-mean residual; the 0.9.1 decoder without noise. 32x spatial and 8x temporal compression,
      128 latent channels, a causal encoder and a non-causal decoder in all of them.

Layout
    Public functions take and return channels-first ``(B, C, T, H, W)`` arrays, as the reference does.
    Inside the jitted programs everything is channels-last ``(B, T, H, W, C)``.

One call, no temporal cache
    Unlike the CogVideoX and Wan VAEs, the reference runs its encoder and decoder over all frames at
    once; the memory devices are spatial and temporal tiling (:class:`LTXVideoTiling`), each tile a
    whole-program call (:func:`decode_tile`). Time is padded by repeating the edge frames
    (``LTXVideoCausalConv3d``: the first frame ``kt - 1`` times when causal, one first and one last frame
    otherwise).

Repeated resnets under ``lax.scan``
    The resnets of each block share their shapes, so they are declared stacked (a leading ``layers``
    axis filled from ``resnets.{i}``) and run under one ``jax.lax.scan`` per block: one resnet is traced
    and compiled per block whatever the depth (the 0.9.1 decoder has 8 + 7 + 6 + 5).

Noise injection (0.9.1)
    The reference draws ``torch.randn((H, W))`` from PyTorch's global generator twice per resnet of the
    injecting blocks, one spatial map shared by the batch, the channels (each scaled by
    ``per_channel_scale``) and the frames. Here the noise is an argument: a pytree of
    ``(layers, 2, H, W)`` maps (:func:`decoder_noise_shapes`), one per decoder call, given explicitly or
    drawn from a ``jax.random`` key (:func:`draw_decoder_noise`).

Precision
    Convolutions take their inputs in the weights' dtype and accumulate in float32; the RMS / layer norms
    compute in float32. The norms' parameters, the timestep embedders, the scale/shift tables, the noise
    scales, the timestep multiplier and the latent statistics are float32 leaves (``ParamSpec.fp32``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint.keymap import KeyMap, Rule, conv, norm
from vidax.checkpoint.keymap import linear as linear_rules
from vidax.core.config_values import check_class_name, config_values
from vidax.core.embeddings import timestep_embedding
from vidax.core.layers import conv3d, conv_jit, layer_norm, linear, rms_norm
from vidax.core.params import VAE_ENCODER_HINT, ParamSpec, SpecTree, require_parts, unflatten
from vidax.core.ltx_tiling import LTXVideoTiling
from vidax.core.ltx_tiling import decode_frames as _decode_frames
from vidax.core.ltx_tiling import temporal_tiled as _temporal_tiled
from vidax.core.ltx_tiling import tiled as _tiled

#: Epsilon of every ``RMSNorm`` of the VAE (fixed in the reference; ``resnet_norm_eps`` is the shortcut
#: ``LayerNorm``'s).
RMS_EPS = 1e-8
#: Width of the sinusoidal timestep projection of ``PixArtAlphaCombinedTimestepSizeEmbeddings``.
TIME_PROJ_DIM = 256
#: Time, height and width strides of ``LTXVideo095DownBlock3D``'s downsample types.
DOWNSAMPLE_STRIDES = {"conv": (2, 2, 2), "spatial": (1, 2, 2), "temporal": (2, 1, 1), "spatiotemporal": (2, 2, 2)}
_BLOCK_TYPES = ("LTXVideoDownBlock3D", "LTXVideo095DownBlock3D")
_F32 = jnp.float32

# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LTXVideoVAEConfig:
    """Configuration of ``AutoencoderKLLTXVideo`` (the keys of a diffusers ``vae/config.json``).

    Hashable (scalars and tuples), so it is a static argument of the jitted programs. Defaults are the
    reference's defaults (the 0.9.0 VAE). Per-block tuples are read as the reference reads them: the
    encoder's by block index (``layers_per_block[-1]`` is the mid block's); the decoder's reversed, then
    indexed (``decoder_layers_per_block`` and ``decoder_inject_noise``: the mid block first).

    Attributes:
      in_channels, out_channels: video channels (3).
      latent_channels: latent channels (128).
      block_out_channels: encoder widths; with ``LTXVideo095DownBlock3D`` blocks one more entry than blocks.
      down_block_types: ``"LTXVideoDownBlock3D"`` (0.9.0 / 0.9.1) or ``"LTXVideo095DownBlock3D"`` (0.9.5+),
        per encoder block; the last entry decides how ``block_out_channels`` is read.
      decoder_block_out_channels: decoder widths (before ``upsample_factor`` division).
      layers_per_block, decoder_layers_per_block: resnets per block (and the mid block's).
      spatio_temporal_scaling, decoder_spatio_temporal_scaling: whether a block down/upsamples.
      decoder_inject_noise: per decoder stage (mid block first, after reversal), whether its resnets add
        scaled spatial noise (0.9.1).
      downsample_type: per ``LTXVideo095DownBlock3D``: ``"conv"``, ``"spatial"``, ``"temporal"``,
        ``"spatiotemporal"``.
      upsample_residual, upsample_factor: per up block: depth-to-space residual, width divisor (0.9.1+: 2).
      timestep_conditioning: the decoder takes a timestep (0.9.1+; the pipelines' ``decode_timestep``).
      patch_size, patch_size_t: pixel patchification into channels (4; time: 1, the only value supported).
      resnet_norm_eps: epsilon of the shortcut ``LayerNorm`` (``norm3``) of width-changing resnets.
      scaling_factor: the pipelines' latent scaling (1.0 in every release).
      encoder_causal, decoder_causal: time padding of the convolutions (True / False in every release).
      spatial_compression_ratio, temporal_compression_ratio: given by the 0.9.5+ configs (32, 8); when
        null the reference derives ``patch_size * 2 ** sum(spatio_temporal_scaling)``. Used by the tiling
        arithmetic, so they must match the architecture (checked).
    """

    in_channels: int = 3
    out_channels: int = 3
    latent_channels: int = 128
    block_out_channels: tuple[int, ...] = (128, 256, 512, 512)
    down_block_types: tuple[str, ...] = ("LTXVideoDownBlock3D",) * 4
    decoder_block_out_channels: tuple[int, ...] = (128, 256, 512, 512)
    layers_per_block: tuple[int, ...] = (4, 3, 3, 3, 4)
    decoder_layers_per_block: tuple[int, ...] = (4, 3, 3, 3, 4)
    spatio_temporal_scaling: tuple[bool, ...] = (True, True, True, False)
    decoder_spatio_temporal_scaling: tuple[bool, ...] = (True, True, True, False)
    decoder_inject_noise: tuple[bool, ...] = (False, False, False, False, False)
    downsample_type: tuple[str, ...] = ("conv", "conv", "conv", "conv")
    upsample_residual: tuple[bool, ...] = (False, False, False, False)
    upsample_factor: tuple[int, ...] = (1, 1, 1, 1)
    timestep_conditioning: bool = False
    patch_size: int = 4
    patch_size_t: int = 1
    resnet_norm_eps: float = 1e-6
    scaling_factor: float = 1.0
    encoder_causal: bool = True
    decoder_causal: bool = False
    spatial_compression_ratio: int | None = None
    temporal_compression_ratio: int | None = None

    def __post_init__(self):
        for f in dataclasses.fields(self):
            if isinstance(getattr(self, f.name), list):
                object.__setattr__(self, f.name, tuple(getattr(self, f.name)))
        problems = []
        if min(self.in_channels, self.out_channels, self.latent_channels, self.patch_size) < 1:
            problems.append("in_channels, out_channels, latent_channels and patch_size must be positive")
        if self.patch_size_t != 1:
            problems.append(f"patch_size_t={self.patch_size_t} (only 1, as in every release: the 8k + 1 frame "
                            "arithmetic of the pipelines assumes it)")
        if any(n < 0 for n in (*self.layers_per_block, *self.decoder_layers_per_block)):
            problems.append("negative resnet counts in layers_per_block / decoder_layers_per_block")
        if not (math.isfinite(self.scaling_factor) and self.scaling_factor > 0):
            problems.append(f"scaling_factor={self.scaling_factor} (the pipelines divide the latents by it: 1.0 in "
                            "every release)")
        if problems:
            raise ValueError("LTXVideoVAEConfig: unsupported " + "; ".join(problems))
        # The plans check the block structure and every width the reference would fail on.
        enc, dec = _encoder_plan(self), _decoder_plan(self)
        arch = {"spatial_compression_ratio": (enc.spatial, dec.spatial),
                "temporal_compression_ratio": (enc.temporal, dec.temporal)}
        for name, (e, d) in arch.items():
            if e != d:
                raise ValueError(f"LTXVideoVAEConfig: the encoder compresses by {e} and the decoder expands by {d} "
                                 f"({name.split('_')[0]}); fix block_out_channels / spatio_temporal_scaling / "
                                 "decoder_spatio_temporal_scaling so they match")
            given = getattr(self, name)
            patch = self.patch_size if name.startswith("spatial") else self.patch_size_t
            derived = patch * 2 ** sum(map(bool, self.spatio_temporal_scaling))
            ratio = derived if given is None else given
            if ratio != e:
                source = f"{name}={given}" if given is not None else (
                    f"{name} is null, so the reference derives {derived} from spatio_temporal_scaling")
                raise ValueError(f"LTXVideoVAEConfig: {source}, but the architecture compresses by {e}; set "
                                 f'"{name}": {e} in config.json (the reference tiles with this value)')

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> LTXVideoVAEConfig:
        """Build from a diffusers ``vae/config.json`` dict.

        Keys starting with ``_`` (``_class_name``, ``_diffusers_version``, ``_name_or_path``) are metadata.

        Raises:
          ValueError: ``_class_name`` is not ``AutoencoderKLLTXVideo``; a key that is not an
            ``AutoencoderKLLTXVideo`` argument; a value of the wrong type; an unsupported or inconsistent
            setting (the message names it).
        """
        check_class_name(config, "AutoencoderKLLTXVideo", "vae")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(k for k in config if not k.startswith("_") and k not in fields)
        if unknown:
            raise ValueError(f"LTXVideoVAEConfig: unknown config keys {unknown} (not AutoencoderKLLTXVideo "
                             "arguments); this VAE variant is not supported")
        return cls(**config_values(cls, config, "LTX-Video VAE config"))

    @property
    def spatial_compression(self) -> int:
        """Pixels per latent pixel along H and W (32 in every release)."""
        return _encoder_plan(self).spatial

    @property
    def temporal_compression(self) -> int:
        """Video frames per latent frame after the first (8 in every release)."""
        return _encoder_plan(self).temporal

    @property
    def injects_noise(self) -> bool:
        """Whether any decoder resnet adds noise (0.9.1): decoding then needs a key or noise."""
        return bool(decoder_noise_shapes(self, 1, 1))


# ---------------------------------------------------------------------------------------------
# Architecture plan: read once from the config, shared by the declaration and the forward functions
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _DownStage:
    cin: int  # the block's input (and resnet) width
    cout: int  # its output width
    layers: int
    down: str | None  # downsampler: None, "conv" (strided LTXVideoCausalConv3d), or an LTXVideoDownsampler3d type
    downsampler3d: bool  # LTXVideoDownsampler3d (space-to-depth + grouped-mean residual), not a strided conv
    conv_out: bool  # LTXVideoDownBlock3D's width-changing resnet after the downsampler


@dataclass(frozen=True)
class _EncoderPlan:
    stages: tuple[_DownStage, ...]
    mid_width: int
    mid_layers: int
    spatial: int  # compression factors of the architecture
    temporal: int


@dataclass(frozen=True)
class _UpStage:
    cin: int  # width entering the block
    cout: int  # width of its resnets and output
    layers: int
    inject_noise: bool
    conv_in: bool  # a width-changing resnet first
    upsample: bool
    residual: bool
    factor: int


@dataclass(frozen=True)
class _DecoderPlan:
    mid_width: int
    mid_layers: int
    mid_noise: bool
    stages: tuple[_UpStage, ...]
    spatial: int
    temporal: int


def _need(values: tuple, n: int, name: str, what: str) -> None:
    if len(values) < n:
        raise ValueError(f"LTXVideoVAEConfig: {name} has {len(values)} entries, {what} needs {n} "
                         "(the reference indexes past its end)")


@functools.lru_cache(maxsize=32)
def _encoder_plan(cfg: LTXVideoVAEConfig) -> _EncoderPlan:
    """``LTXVideoEncoder3d``'s blocks, with its own channel arithmetic, checked for consistency."""
    ch, types = cfg.block_out_channels, cfg.down_block_types
    if not ch or not types:
        raise ValueError("LTXVideoVAEConfig: block_out_channels and down_block_types must not be empty")
    bad = sorted({t for t in types if t not in _BLOCK_TYPES})
    if bad:
        raise ValueError(f"LTXVideoVAEConfig: unsupported down_block_types {bad} (known: {list(_BLOCK_TYPES)})")
    is_095 = types[-1] == "LTXVideo095DownBlock3D"
    n = len(ch) - (1 if is_095 else 0)
    _need(types, n, "down_block_types", f"block_out_channels={list(ch)}")
    _need(cfg.spatio_temporal_scaling, n, "spatio_temporal_scaling", f"an encoder of {n} blocks")
    _need(cfg.layers_per_block, n + 1, "layers_per_block", f"an encoder of {n} blocks and its mid block")
    stages, out, spatial, temporal = [], ch[0], cfg.patch_size, cfg.patch_size_t
    for i in range(n):
        cin = out
        out = ch[i + 1] if (is_095 or i + 1 < n) else ch[i]
        scale = bool(cfg.spatio_temporal_scaling[i])
        if types[i] == "LTXVideoDownBlock3D":
            down, d3, conv_out, width = ("conv" if scale else None), False, cin != out, out
        else:
            _need(cfg.downsample_type, i + 1, "downsample_type", "the LTXVideo095DownBlock3D blocks")
            down = cfg.downsample_type[i] if scale else None
            if down is not None and down not in DOWNSAMPLE_STRIDES:
                raise ValueError(f"LTXVideoVAEConfig: downsample_type[{i}]={down!r} "
                                 f"(known: {list(DOWNSAMPLE_STRIDES)})")
            d3, conv_out = down not in (None, "conv"), False
            width = out if d3 else cin
            if d3:
                prod = math.prod(DOWNSAMPLE_STRIDES[down])
                if out % prod or (cin * prod) % out:
                    raise ValueError(f"LTXVideoVAEConfig: down block {i} ({down}) maps {cin} -> {out} channels; the "
                                     f"space-to-depth downsampler needs {out} divisible by {prod} and {cin} x {prod} "
                                     f"divisible by {out}")
        if width != out:
            raise ValueError(f"LTXVideoVAEConfig: down block {i} outputs {width} channels where the next stage "
                             f"expects {out} (block_out_channels / downsample_type / spatio_temporal_scaling); the "
                             "reference cannot run this configuration either")
        if down is not None:
            st, sh, _ = DOWNSAMPLE_STRIDES[down]  # (every type strides H and W alike)
            spatial, temporal = spatial * sh, temporal * st
        stages.append(_DownStage(cin, out, int(cfg.layers_per_block[i]), down, d3, conv_out))
    return _EncoderPlan(tuple(stages), out, int(cfg.layers_per_block[-1]), spatial, temporal)


@functools.lru_cache(maxsize=32)
def _decoder_plan(cfg: LTXVideoVAEConfig) -> _DecoderPlan:
    """``LTXVideoDecoder3d``'s blocks (its reversed per-block tuples), checked for consistency.

    Raises:
      ValueError: widths that do not chain (the reference fails at run time), and the two settings the
        reference builds but cannot run: a width-changing up block (``conv_in`` resnet) with timestep
        conditioning (it hands that resnet the raw timestep) or with noise injection (its noise scales
        have the input width).
    """
    ch = cfg.decoder_block_out_channels[::-1]
    n = len(ch)
    if n == 0:
        raise ValueError("LTXVideoVAEConfig: decoder_block_out_channels must not be empty")
    rev = {name: getattr(cfg, name)[::-1] for name in ("decoder_spatio_temporal_scaling", "decoder_layers_per_block",
                                                     "decoder_inject_noise", "upsample_residual", "upsample_factor")}
    for name, need in (("decoder_spatio_temporal_scaling", n), ("decoder_layers_per_block", n + 1),
                       ("decoder_inject_noise", n + 1), ("upsample_residual", n), ("upsample_factor", n)):
        _need(rev[name], need, name, f"a decoder of {n} up blocks" + (" and its mid block" if need > n else ""))
    out = ch[0]
    cur, stages, up = out, [], 0
    for i in range(n):
        f = int(rev["upsample_factor"][i])
        if f not in (1, 2, 4, 8):
            raise ValueError(f"LTXVideoVAEConfig: upsample_factor {f} (1, 2, 4 or 8: it divides the 8 sub-pixels)")
        cin, out = out // f, ch[i] // f
        conv_in, upsample = cin != out, bool(rev["decoder_spatio_temporal_scaling"][i])
        noise = bool(rev["decoder_inject_noise"][i + 1])
        if conv_in and (cfg.timestep_conditioning or noise):
            what = "timestep_conditioning" if cfg.timestep_conditioning else "decoder_inject_noise"
            raise ValueError(f"LTXVideoVAEConfig: up block {i} changes width {cin} -> {out} (a conv_in resnet) with "
                             f"{what}, which the reference builds but cannot run; use upsample_factor to halve "
                             "the width in the upsampler as 0.9.1+ does")
        if conv_in:
            if cur != cin:
                break
            cur = out
        if upsample:
            if cur != out * f or cur % 8:
                break
            cur, up = out, up + 1
        if cur != out:
            break
        stages.append(_UpStage(cin, out, int(rev["decoder_layers_per_block"][i + 1]), noise, conv_in, upsample,
                               bool(rev["upsample_residual"][i]), f))
    if len(stages) != n:
        raise ValueError(f"LTXVideoVAEConfig: decoder up block {len(stages)} receives {cur} channels where its layers "
                         f"expect others (decoder_block_out_channels={list(cfg.decoder_block_out_channels)}, "
                         f"upsample_factor={list(cfg.upsample_factor)}, decoder_spatio_temporal_scaling="
                         f"{list(cfg.decoder_spatio_temporal_scaling)}); the reference cannot run it either")
    return _DecoderPlan(ch[0], int(rev["decoder_layers_per_block"][0]), bool(rev["decoder_inject_noise"][0]),
                        tuple(stages), cfg.patch_size * 2**up, cfg.patch_size_t * 2**up)


# ---------------------------------------------------------------------------------------------
# Parameter declaration and the key map (one walk gives both)
# ---------------------------------------------------------------------------------------------


class _Declaration:
    """Collects parameter specs (paths mirror the diffusers module names) and the diffusers key-map rules.

    A stacked module (``stack=n``) holds its ``n`` repeats along a leading axis; its checkpoint keys carry
    ``{i}`` where the module index is.
    """

    def __init__(self):
        self.specs: dict[str, ParamSpec] = {}
        self.rules: list[Rule] = []

    def _spec(self, path: str, shape: tuple[int, ...], stack: int | None, fp32: bool = False):
        self.specs[path] = ParamSpec(shape if stack is None else (stack, *shape), fp32=fp32)

    def conv(self, key: str, cin: int, cout: int, k: int, stack: int | None = None):
        # LTXVideoCausalConv3d wraps its Conv3d as `.conv`.
        path = f"{key}.conv".replace(".", "/").replace("/{i}", "")
        self._spec(f"{path}/kernel", (k, k, k, cin, cout), stack)
        self._spec(f"{path}/bias", (cout,), stack)
        self.rules += conv(f"{key}.conv", path, dims=3)

    def tensor(self, key: str, shape: tuple[int, ...], stack: int | None = None):
        """A bare ``nn.Parameter`` / buffer, float32 (scales, tables, statistics)."""
        self._spec(key.replace(".", "/").replace("/{i}", ""), shape, stack, fp32=True)
        self.rules.append(Rule(key, key.replace(".", "/").replace("/{i}", "")))

    def layer_norm(self, key: str, dim: int):
        path = key.replace(".", "/")
        self._spec(f"{path}/scale", (dim,), None, fp32=True)
        self._spec(f"{path}/bias", (dim,), None, fp32=True)
        self.rules += norm(key, path)

    def time_embedder(self, key: str, dim: int):
        """``PixArtAlphaCombinedTimestepSizeEmbeddings(dim, 0)``: ``Timesteps(256)`` -> ``TimestepEmbedding``."""
        for name, fan_in in (("linear_1", TIME_PROJ_DIM), ("linear_2", dim)):
            k, path = f"{key}.timestep_embedder.{name}", f"{key}.timestep_embedder.{name}".replace(".", "/")
            self._spec(f"{path}/kernel", (fan_in, dim), None, fp32=True)
            self._spec(f"{path}/bias", (dim,), None, fp32=True)
            self.rules += linear_rules(k, path)

    def resnet(self, key: str, cin: int, cout: int, stack: int | None = None, noise: bool = False,
               timestep: bool = False):
        """``LTXVideoResnetBlock3d`` (its RMSNorms have no parameters)."""
        self.conv(f"{key}.conv1", cin, cout, 3, stack)
        self.conv(f"{key}.conv2", cout, cout, 3, stack)
        if cin != cout:  # (never stacked: width-changing resnets are single)
            self.layer_norm(f"{key}.norm3", cin)
            self.conv(f"{key}.conv_shortcut", cin, cout, 1)
        if noise:
            self.tensor(f"{key}.per_channel_scale1", (cin, 1, 1), stack)
            self.tensor(f"{key}.per_channel_scale2", (cin, 1, 1), stack)
        if timestep:
            self.tensor(f"{key}.scale_shift_table", (4, cin), stack)

    def resnets(self, key: str, width: int, n: int, noise: bool = False, timestep: bool = False):
        if n:
            self.resnet(f"{key}.resnets.{{i}}", width, width, n, noise, timestep)


@functools.lru_cache(maxsize=16)
def _declare(cfg: LTXVideoVAEConfig) -> _Declaration:
    d, enc, dec = _Declaration(), _encoder_plan(cfg), _decoder_plan(cfg)
    tc = cfg.timestep_conditioning
    d.conv("encoder.conv_in", cfg.in_channels * cfg.patch_size**2 * cfg.patch_size_t, cfg.block_out_channels[0], 3)
    for i, s in enumerate(enc.stages):
        key = f"encoder.down_blocks.{i}"
        d.resnets(key, s.cin, s.layers)
        if s.down == "conv":
            d.conv(f"{key}.downsamplers.0", s.cin, s.cin, 3)
        elif s.down is not None:  # LTXVideoDownsampler3d: its causal conv is `.conv`
            d.conv(f"{key}.downsamplers.0.conv", s.cin, s.cout // math.prod(DOWNSAMPLE_STRIDES[s.down]), 3)
        if s.conv_out:
            d.resnet(f"{key}.conv_out", s.cin, s.cout)
    d.resnets("encoder.mid_block", enc.mid_width, enc.mid_layers)
    d.conv("encoder.conv_out", enc.mid_width, cfg.latent_channels + 1, 3)

    d.conv("decoder.conv_in", cfg.latent_channels, dec.mid_width, 3)
    if tc:
        d.time_embedder("decoder.mid_block.time_embedder", 4 * dec.mid_width)
    d.resnets("decoder.mid_block", dec.mid_width, dec.mid_layers, dec.mid_noise, tc)
    for i, s in enumerate(dec.stages):
        key = f"decoder.up_blocks.{i}"
        if s.conv_in:
            d.resnet(f"{key}.conv_in", s.cin, s.cout)
        if tc:
            d.time_embedder(f"{key}.time_embedder", 4 * s.cin)
        if s.upsample:  # LTXVideoUpsampler3d(cout * factor): 8 sub-pixels of cout channels
            d.conv(f"{key}.upsamplers.0.conv", s.cout * s.factor, 8 * s.cout, 3)
        d.resnets(key, s.cout, s.layers, s.inject_noise, tc)
    width = dec.stages[-1].cout
    if tc:
        d.tensor("decoder.timestep_scale_multiplier", ())
        d.time_embedder("decoder.time_embedder", 2 * width)
        d.tensor("decoder.scale_shift_table", (2, width))
    d.conv("decoder.conv_out", width, cfg.out_channels * cfg.patch_size**2 * cfg.patch_size_t, 3)
    d.tensor("latents_mean", (cfg.latent_channels,))
    d.tensor("latents_std", (cfg.latent_channels,))
    return d


def vae_specs_and_rules(cfg: LTXVideoVAEConfig) -> tuple[SpecTree, list[Rule]]:
    """The VAE's spec tree and its diffusers key-map rules, from one walk of the architecture.

    Paths mirror the diffusers module names with ``/`` for ``.``; the resnets of a block are one stacked
    subtree without the index (``decoder/up_blocks/0/resnets/conv1/conv/kernel`` of shape
    ``(layers, 3, 3, 3, C, C)``, filled from ``decoder.up_blocks.0.resnets.{i}.conv1.conv.weight``).
    Kernels are channels-last ``(kt, kh, kw, in, out)``; linear kernels ``(in, out)``. ``latents_mean`` /
    ``latents_std`` (the reference's persistent buffers) are top-level leaves.
    """
    d = _declare(cfg)
    return unflatten(dict(d.specs)), list(d.rules)


def vae_specs(cfg: LTXVideoVAEConfig) -> SpecTree:
    """The VAE's spec tree (see :func:`vae_specs_and_rules`)."""
    return vae_specs_and_rules(cfg)[0]


def vae_keymap(cfg: LTXVideoVAEConfig) -> KeyMap:
    """Key map of a diffusers-layout ``AutoencoderKLLTXVideo`` (``vae/diffusion_pytorch_model.safetensors``)."""
    return KeyMap(vae_specs_and_rules(cfg)[1])


#: Top-level parts of :func:`vae_specs` that encoding (and normalising its latents) reads.
ENCODER_PARTS = ("encoder", "latents_mean", "latents_std")
#: Top-level parts that denormalising and decoding read: all that a text-to-video pipeline loads.
DECODER_PARTS = ("decoder", "latents_mean", "latents_std")


def load_vae(path: str | os.PathLike, dtype: Any = np.float32,
             parts: Collection[str] | None = None) -> tuple[LTXVideoVAEConfig, dict]:
    """Load a diffusers ``vae`` folder (``config.json`` + safetensors) into ``(cfg, params)``.

    Args:
      path: the folder.
      dtype: compute dtype of the convolution kernels (float32 leaves stay float32).
      parts: top-level parts to read (:data:`DECODER_PARTS` for text-to-video); None: all. The whole
        checkpoint is checked either way.

    Raises:
      ValueError: an unsupported configuration. CheckpointError: tensors that do not match it.
    """
    from vidax.checkpoint.loader import load_params
    from vidax.checkpoint.safetensors_io import CheckpointReader

    path = Path(path)
    cfg = LTXVideoVAEConfig.from_dict(json.loads((path / "config.json").read_text()))
    specs, rules = vae_specs_and_rules(cfg)
    return cfg, load_params(CheckpointReader(path), KeyMap(rules), specs, dtype, source=str(path), parts=parts)


# ---------------------------------------------------------------------------------------------
# Building blocks (channels-last, pure)
# ---------------------------------------------------------------------------------------------


def _conv(p: dict, x: jax.Array, causal: bool, strides=(1, 1, 1)) -> jax.Array:
    """``LTXVideoCausalConv3d``: edge frames repeated in time, zero "same" padding in space.

    Causal: the first frame is repeated ``kt - 1`` times in front; otherwise ``(kt - 1) / 2`` first frames
    in front and as many last frames behind. Computed as the zero-padded convolution plus, on the few
    output frames whose window reaches into the padding, the padded taps applied to the edge frame
    (their kernels summed): the same sums as the reference's convolution of the padded copy, without the
    copy (a whole activation per convolution; the 0.9.5 decoder's last stage holds 128 channels at a
    quarter of the output size).
    """
    w = p["kernel"]
    kt, kh, kw = w.shape[:3]
    spatial = ((kh // 2, kh // 2), (kw // 2, kw // 2))
    lo, hi = (kt - 1, 0) if causal else ((kt - 1) // 2, (kt - 1) // 2)
    y = conv3d(p, x, strides=strides, padding=((lo, hi), *spatial))
    t_in, st = x.shape[1], strides[0]
    for t in range(y.shape[1]):
        fix = None
        for frame, taps in ((0, [i for i in range(kt) if st * t + i < lo]),
                            (t_in - 1, [i for i in range(kt) if st * t + i >= lo + t_in])):
            if taps:
                k = functools.reduce(jnp.add, [w[i].astype(_F32) for i in taps])
                c = jax.lax.conv_general_dilated(x[:, frame].astype(_F32), k, window_strides=strides[1:],
                                                 padding=spatial, dimension_numbers=("NHWC", "HWIO", "NHWC"))
                fix = c if fix is None else fix + c
        if fix is not None:
            y = y.at[:, t].set((y[:, t].astype(_F32) + fix).astype(y.dtype))
    return y


def _resnet(p: dict, x: jax.Array, causal: bool, eps: float, ss: jax.Array | None = None,
            noise: jax.Array | None = None) -> jax.Array:
    """``LTXVideoResnetBlock3d``.

    Args:
      ss: float32 ``(B, 4, C)``: ``time_embedder(t) + scale_shift_table`` (shift1, scale1, shift2, scale2).
      noise: ``(2, H, W)`` spatial maps added after ``conv1`` / ``conv2``, scaled per channel.
    """
    mod = None if ss is None else [ss[:, k, None, None, None, :] for k in range(4)]
    h = rms_norm(x, None, RMS_EPS)
    if mod is not None:
        h = h * (1 + mod[1]) + mod[0]
    h = _conv(p["conv1"]["conv"], jax.nn.silu(h), causal)
    if noise is not None:
        h = (h + (noise[0][:, :, None] * p["per_channel_scale1"][:, 0, 0])).astype(h.dtype)
    h = rms_norm(h, None, RMS_EPS)
    if mod is not None:
        h = h * (1 + mod[3]) + mod[2]
    h = _conv(p["conv2"]["conv"], jax.nn.silu(h), causal)
    if noise is not None:
        h = (h + (noise[1][:, :, None] * p["per_channel_scale2"][:, 0, 0])).astype(h.dtype)
    if "norm3" in p:
        x = layer_norm(x, p["norm3"], eps).astype(x.dtype)
    if "conv_shortcut" in p:
        x = _conv(p["conv_shortcut"]["conv"], x, causal)
    return h + x


def _resnet_stack(p: dict, x: jax.Array, causal: bool, eps: float, emb: jax.Array | None = None,
                  noise: jax.Array | None = None) -> jax.Array:
    """A block's resnets under one ``lax.scan`` over the stacked parameters (and ``(layers, 2, H, W)`` noise).

    ``emb``: the block's float32 timestep embedding ``(B, 4 C)``, shared by its resnets.
    """
    emb = None if emb is None else emb.reshape(emb.shape[0], 4, -1)

    def body(h, layer):
        lp, ln = layer
        ss = None if emb is None else emb + lp["scale_shift_table"].astype(_F32)[None]
        return _resnet(lp, h, causal, eps, ss, ln), None

    return jax.lax.scan(body, x, (p, noise))[0]


def _space_to_depth(x: jax.Array, stride: tuple[int, int, int]) -> jax.Array:
    """``(B, T, H, W, C) -> (B, T/st, H/sh, W/sw, C*st*sh*sw)``, channels ordered ``(c, st, sh, sw)``."""
    b, t, h, w, c = x.shape
    st, sh, sw = stride
    x = x.reshape(b, t // st, st, h // sh, sh, w // sw, sw, c).transpose(0, 1, 3, 5, 7, 2, 4, 6)
    return x.reshape(b, t // st, h // sh, w // sw, c * st * sh * sw)


def _depth_to_space(x: jax.Array) -> jax.Array:
    """Inverse of :func:`_space_to_depth` for stride ``(2, 2, 2)``: ``(B, T, H, W, 8C) -> (B, 2T, 2H, 2W, C)``."""
    b, t, h, w, c = x.shape
    x = x.reshape(b, t, h, w, c // 8, 2, 2, 2).transpose(0, 1, 5, 2, 6, 3, 7, 4)
    return x.reshape(b, 2 * t, 2 * h, 2 * w, c // 8)


def _downsample3d(p: dict, x: jax.Array, causal: bool, down: str, cout: int) -> jax.Array:
    """``LTXVideoDownsampler3d``: space-to-depth of a convolution plus the grouped mean of the space-to-depth input.

    Time: the first ``st - 1`` frames are prepended first, so ``T + st - 1`` must divide by ``st``.
    """
    stride = DOWNSAMPLE_STRIDES[down]
    x = jnp.concatenate([x[:, : stride[0] - 1], x], axis=1)
    r = _space_to_depth(x, stride)
    r = r.reshape(*r.shape[:4], cout, -1).astype(_F32).mean(axis=-1).astype(x.dtype)
    return _space_to_depth(_conv(p["conv"]["conv"], x, causal), stride) + r


def _upsample3d(p: dict, x: jax.Array, causal: bool, residual: bool, factor: int) -> jax.Array:
    """``LTXVideoUpsampler3d`` (stride 2 everywhere): depth-to-space of a convolution, the first frame dropped.

    With ``residual`` the input's own depth-to-space, its channels tiled ``8 / factor`` times, is added.
    """
    y = _depth_to_space(_conv(p["conv"]["conv"], x, causal))[:, 1:]
    if residual:
        r = _depth_to_space(x)
        y = y + jnp.tile(r, (1, 1, 1, 1, 8 // factor))[:, 1:]
    return y


def _time_embed(p: dict, t: jax.Array) -> jax.Array:
    """``PixArtAlphaCombinedTimestepSizeEmbeddings(dim, 0)``: ``(B,)`` -> float32 ``(B, dim)``."""
    e = timestep_embedding(t, TIME_PROJ_DIM, flip_sin_to_cos=True, downscale_freq_shift=0)
    te = p["timestep_embedder"]
    return linear(te["linear_2"], jax.nn.silu(linear(te["linear_1"], e, _F32)), _F32)


# ---------------------------------------------------------------------------------------------
# Encoder / decoder programs
# ---------------------------------------------------------------------------------------------


def _encoder(p: dict, cfg: LTXVideoVAEConfig, x: jax.Array) -> jax.Array:
    """``LTXVideoEncoder3d`` after patchification: ``(B, T, H/p, W/p, C p^2) -> (B, T', h, w, latent + 1)``."""
    plan, causal, eps = _encoder_plan(cfg), cfg.encoder_causal, cfg.resnet_norm_eps
    x = _conv(p["conv_in"]["conv"], x, causal)
    for i, s in enumerate(plan.stages):
        bp = p["down_blocks"][str(i)]
        with jax.named_scope(f"down_blocks.{i}"):
            if s.layers:
                x = _resnet_stack(bp["resnets"], x, causal, eps)
            if s.down == "conv":
                x = _conv(bp["downsamplers"]["0"]["conv"], x, causal, strides=(2, 2, 2))
            elif s.down is not None:
                x = _downsample3d(bp["downsamplers"]["0"], x, causal, s.down, s.cout)
            if s.conv_out:
                x = _resnet(bp["conv_out"], x, causal, eps)
    if plan.mid_layers:
        with jax.named_scope("mid_block"):
            x = _resnet_stack(p["mid_block"]["resnets"], x, causal, eps)
    x = jax.nn.silu(rms_norm(x, None, RMS_EPS))
    return _conv(p["conv_out"]["conv"], x, causal)


def _decoder(p: dict, cfg: LTXVideoVAEConfig, z: jax.Array, t: jax.Array | None, noise: dict) -> jax.Array:
    """``LTXVideoDecoder3d`` before unpatchification: ``(B, T, h, w, latent) -> (B, T', H/p, W/p, C p^2)``."""
    plan, causal, eps = _decoder_plan(cfg), cfg.decoder_causal, cfg.resnet_norm_eps
    tc = cfg.timestep_conditioning
    x = _conv(p["conv_in"]["conv"], z, causal)
    if tc:
        t = t.astype(_F32) * p["timestep_scale_multiplier"].astype(_F32)
    mid = p["mid_block"]
    if plan.mid_layers:
        with jax.named_scope("mid_block"):
            x = _resnet_stack(mid["resnets"], x, causal, eps, _time_embed(mid["time_embedder"], t) if tc else None,
                              noise.get("mid_block"))
    for i, s in enumerate(plan.stages):
        bp = p["up_blocks"][str(i)]
        with jax.named_scope(f"up_blocks.{i}"):
            if s.conv_in:
                x = _resnet(bp["conv_in"], x, causal, eps)
            if s.upsample:
                x = _upsample3d(bp["upsamplers"]["0"], x, causal, s.residual, s.factor)
            if s.layers:
                emb = _time_embed(bp["time_embedder"], t) if tc else None
                x = _resnet_stack(bp["resnets"], x, causal, eps, emb, noise.get("up_blocks", {}).get(str(i)))
    x = rms_norm(x, None, RMS_EPS)
    if tc:
        e = _time_embed(p["time_embedder"], t).reshape(x.shape[0], 2, -1) + p["scale_shift_table"].astype(_F32)[None]
        x = x * (1 + e[:, 1, None, None, None]) + e[:, 0, None, None, None]
    return _conv(p["conv_out"]["conv"], jax.nn.silu(x), causal)


def _encoder_dtype(params: dict):
    require_parts(params, ("encoder",), "VAE encoding", VAE_ENCODER_HINT)
    return params["encoder"]["conv_in"]["conv"]["kernel"].dtype


def _decoder_dtype(params: dict):
    require_parts(params, ("decoder",), "VAE decoding", "load the VAE's decoder parts (DECODER_PARTS)")
    return params["decoder"]["conv_in"]["conv"]["kernel"].dtype


@conv_jit(static_argnames=("cfg",))
def _encode_program(params: dict, cfg: LTXVideoVAEConfig, video: jax.Array) -> tuple[jax.Array, jax.Array]:
    b, c, t, h, w = video.shape
    p = cfg.patch_size
    x = video.reshape(b, c, t, h // p, p, w // p, p).transpose(0, 2, 3, 5, 1, 6, 4)  # channels (c, p_w, p_h)
    x = x.reshape(b, t, h // p, w // p, c * p * p).astype(_encoder_dtype(params))
    y = jnp.transpose(_encoder(params["encoder"], cfg, x).astype(_F32), (0, 4, 1, 2, 3))
    n = cfg.latent_channels
    # The reference repeats its one log-variance channel to `latent_channels`; DiagonalGaussianDistribution clamps it.
    return y[:, :n], jnp.broadcast_to(jnp.clip(y[:, n : n + 1], -30.0, 20.0), y[:, :n].shape)


@conv_jit(static_argnames=("cfg",))
def _decode_program(params: dict, cfg: LTXVideoVAEConfig, z: jax.Array, timestep: jax.Array | None,
                    noise: dict | None) -> jax.Array:
    b = z.shape[0]
    x = jnp.transpose(z, (0, 2, 3, 4, 1)).astype(_decoder_dtype(params))
    y = _decoder(params["decoder"], cfg, x, timestep, noise or {}).astype(_F32)
    p, c = cfg.patch_size, cfg.out_channels
    t2, h2, w2 = y.shape[1:4]
    y = y.reshape(b, t2, h2, w2, c, p, p).transpose(0, 4, 1, 2, 6, 3, 5)  # channels (c, p_w, p_h)
    return y.reshape(b, c, t2, h2 * p, w2 * p)


def decode_tile(params: dict, cfg: LTXVideoVAEConfig, z: jax.Array, timestep: jax.Array | None = None,
                noise: dict | None = None) -> jax.Array:
    """One ``LTXVideoDecoder3d`` call (the reference's ``self.decoder(z, temb)``); one compiled program per shape.

    The arguments reach the jitted program all positional, however they are given here: ``jax.jit`` keys its
    cache on the call's argument structure, and ``f(a, b)`` and ``f(a, b, None)`` compiled twice.

    Args:
      params: VAE parameters (at least :data:`DECODER_PARTS`).
      cfg: static configuration.
      z: latents ``(B, latent_channels, T, h, w)``, denormalised (:func:`denormalize_latents`).
      timestep: float32 ``(B,)`` decode timesteps when ``cfg.timestep_conditioning`` (else None).
      noise: the injected noise of this call (:func:`decoder_noise_shapes`), or None without injection.

    Returns:
      float32 ``(B, out_channels, 8 (T - 1) + 1, 32 h, 32 w)`` for the released compressions; not clamped.
    """
    return _decode_program(params, cfg, z, timestep, noise)


# ---------------------------------------------------------------------------------------------
# Noise injection
# ---------------------------------------------------------------------------------------------


def decoder_noise_shapes(cfg: LTXVideoVAEConfig, latent_height: int, latent_width: int) -> dict:
    """Shapes of one decoder call's injected noise, for latents of ``latent_height x latent_width``.

    Returns:
      ``{"mid_block": (layers, 2, h, w), "up_blocks": {"i": (layers, 2, H_i, W_i)}}`` for the injecting blocks
      with resnets (empty without injection): per resnet the maps added after ``conv1`` and ``conv2``, at
      that block's resolution. The reference draws them in this order (mid block, then up blocks; per resnet
      ``conv1``'s, then ``conv2``'s), each ``torch.randn((H, W))``.
    """
    plan, h, w = _decoder_plan(cfg), latent_height, latent_width
    out: dict = {}
    if plan.mid_noise and plan.mid_layers:
        out["mid_block"] = (plan.mid_layers, 2, h, w)
    for i, s in enumerate(plan.stages):
        if s.upsample:
            h, w = 2 * h, 2 * w
        if s.inject_noise and s.layers:
            out.setdefault("up_blocks", {})[str(i)] = (s.layers, 2, h, w)
    return out


@functools.partial(jax.jit, static_argnames=("cfg", "latent_height", "latent_width"))
def draw_decoder_noise(cfg: LTXVideoVAEConfig, key: jax.Array, latent_height: int, latent_width: int) -> dict:
    """Standard normal float32 noise of :func:`decoder_noise_shapes`, each map from its own split of ``key``; jitted."""
    shapes = decoder_noise_shapes(cfg, latent_height, latent_width)
    leaves, tree = jax.tree.flatten(shapes, is_leaf=lambda s: isinstance(s, tuple))
    keys = jax.random.split(key, max(len(leaves), 1))
    return jax.tree.unflatten(tree, [jax.random.normal(k, s, _F32) for k, s in zip(keys, leaves)])


class _DecoderCalls:
    """The reference's ``self.decoder(tile, temb)`` calls of one decode, in order; call ``k`` takes ``noise[k]``
    or draws from ``fold_in(key, k)``."""

    def __init__(self, params, cfg, timestep, key, noise):
        self.params, self.cfg, self.timestep, self.key, self.noise, self.count = params, cfg, timestep, key, noise, 0
        self.on_call = None  # called after each decoder call (progress)

    def __call__(self, z: jax.Array) -> jax.Array:
        k, self.count = self.count, self.count + 1
        noise = None
        if self.cfg.injects_noise:
            h, w = z.shape[3:]
            want = decoder_noise_shapes(self.cfg, h, w)
            if self.noise is None:
                noise = draw_decoder_noise(self.cfg, jax.random.fold_in(self.key, k), h, w)
            else:
                if k >= len(self.noise):
                    raise ValueError(f"decode: noise holds {len(self.noise)} decoder calls' noise, but this decode "
                                     "makes more (one per tile); pass one entry per call or a key")
                noise = self.noise[k]
                got = jax.tree.map(lambda a: tuple(np.shape(a)), noise)
                if got != want:
                    raise ValueError(f"decode: noise[{k}] has shapes {got}, the decoder call needs {want} "
                                     "(decoder_noise_shapes)")
        out = decode_tile(self.params, self.cfg, z, self.timestep, noise)
        if self.on_call is not None:
            jax.block_until_ready(out)
            self.on_call()
        return out

    def finish(self):
        if self.noise is not None and self.count != len(self.noise):
            raise ValueError(f"decode: noise holds {len(self.noise)} decoder calls' noise, this decode made "
                             f"{self.count}")


# ---------------------------------------------------------------------------------------------
# Tiling
# ---------------------------------------------------------------------------------------------

# LTXVideoTiling and the tile composition live in vidax.core.ltx_tiling (shared with LTX-2: same algorithm).


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def _check_latents(z: jax.Array, cfg: LTXVideoVAEConfig, what: str) -> None:
    if z.ndim != 5 or z.shape[1] != cfg.latent_channels or min(z.shape[2:]) < 1:
        raise ValueError(f"{what}: expected latents (B, {cfg.latent_channels}, T>=1, h>=1, w>=1), got shape "
                         f"{tuple(z.shape)}" + (" (channels-first: move the channel axis to position 1)"
                                                if z.ndim == 5 and z.shape[-1] == cfg.latent_channels else ""))


def latent_frames(cfg: LTXVideoVAEConfig, num_frames: int) -> int:
    """Latent frames of ``num_frames = 8k + 1`` video frames: ``k + 1`` (for 8x temporal compression)."""
    return (num_frames - 1) // cfg.temporal_compression + 1


def decoded_frames(cfg: LTXVideoVAEConfig, num_latent_frames: int) -> int:
    """Video frames decoded from ``T`` latent frames: ``8 (T - 1) + 1`` (each upsampler doubles and drops one)."""
    return (num_latent_frames - 1) * cfg.temporal_compression + 1


def encode(params: dict, cfg: LTXVideoVAEConfig, video: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Encode a video to its latent distribution (``AutoencoderKLLTXVideo.encode(x).latent_dist``, untiled).

    Args:
      params: VAE parameters (at least :data:`ENCODER_PARTS`); computation in their dtype, float32 accumulation.
      cfg: the configuration.
      video: ``(B, in_channels, T, H, W)`` in ``[-1, 1]``; ``T = 8k + 1`` (1 for an image) and ``H``, ``W``
        multiples of 32 (``cfg.temporal_compression``, ``cfg.spatial_compression``). The 0.9.0 encoder's
        strided convolutions would round other sizes down, the 0.9.5 one fails on them; neither decodes back
        to the same size, and the pipelines never make them.

    Returns:
      ``(mean, logvar)``, float32 ``(B, latent_channels, k + 1, H/32, W/32)``; ``logvar`` is one channel
      repeated (the reference's ``uniform`` log-variance), clamped to ``[-30, 20]``. Not normalised: see
      :func:`normalize_latents`.

    Raises:
      ValueError: wrong rank or channel count, or a size the VAE cannot take (the message names the
        nearest valid ones).
    """
    if video.ndim != 5 or video.shape[1] != cfg.in_channels:
        raise ValueError(f"encode: expected video (B, {cfg.in_channels}, T, H, W) channels-first, got shape "
                         f"{tuple(video.shape)}")
    t, h, w = video.shape[2:]
    tc, sc = cfg.temporal_compression, cfg.spatial_compression
    if t < 1 or (t - 1) % tc:
        lo = (max(t, 1) - 1) // tc * tc + 1
        raise ValueError(f"encode: {t} frames; the LTX-Video VAE takes {tc}k + 1 frames (1, {tc + 1}, "
                         f"{2 * tc + 1}, ...): use {lo} or {lo + tc}")
    for name, n in (("height", h), ("width", w)):
        if n < sc or n % sc:
            raise ValueError(f"encode: {name} {n} is not a positive multiple of {sc}; resize or crop to "
                             f"{max(n // sc, 1) * sc} or {(n // sc + 1) * sc}")
    return _encode_program(params, cfg, jnp.asarray(video))


def _prepare(params, cfg, z, timestep, key, noise) -> _DecoderCalls:
    """The argument checks of :func:`decode` (shared by the tiled entry points)."""
    b = z.shape[0]
    if cfg.timestep_conditioning:
        if timestep is None:
            raise ValueError("decode: this VAE is timestep-conditioned (0.9.1+): pass timestep=, the pipelines' "
                             "decode_timestep (e.g. 0.05)")
        t = np.asarray(timestep, np.float32)
        if t.ndim > 1 or (t.ndim == 1 and t.shape[0] != b):
            raise ValueError(f"decode: timestep must be a number or ({b},) for a batch of {b}, got shape {t.shape}")
        timestep = np.broadcast_to(t, (b,))
    elif timestep is not None:
        raise ValueError("decode: this VAE has no timestep conditioning (timestep_conditioning is false, as in "
                         "0.9.0); pass timestep=None")
    if cfg.injects_noise:
        if (key is None) == (noise is None):
            raise ValueError("decode: this VAE's decoder injects noise (decoder_inject_noise): pass exactly one of "
                             "key=jax.random.key(seed) or noise=")
        if isinstance(noise, dict):
            noise = [noise]
    elif noise is not None:
        raise ValueError("decode: noise given, but this VAE injects none (decoder_inject_noise is all false)")
    return _DecoderCalls(params, cfg, timestep, key, noise)


def decode(params: dict, cfg: LTXVideoVAEConfig, z: jax.Array, timestep: float | jax.Array | None = None,
           key: jax.Array | None = None, noise: dict | Sequence[dict] | None = None,
           tiling: LTXVideoTiling | None = None, on_tile: Callable[[], None] | None = None) -> jax.Array:
    """Decode latents to video (``AutoencoderKLLTXVideo.decode(z, temb).sample``), tiled as the reference when asked.

    The reference's ``_decode``: with ``tiling.temporal`` and more latent frames than a tile,
    :func:`temporal_tiled_decode`; else with ``tiling.spatial`` and latents larger than a tile,
    :func:`tiled_decode`; else one :func:`decode_tile` call.

    Args:
      params: VAE parameters (at least :data:`DECODER_PARTS`).
      cfg: the configuration.
      z: latents ``(B, latent_channels, T, h, w)``, denormalised (:func:`denormalize_latents`); any ``T``,
        ``h``, ``w`` >= 1. (The pipelines mix ``decode_noise_scale`` noise into them themselves.)
      timestep: required exactly when ``cfg.timestep_conditioning`` (0.9.1+): the pipelines'
        ``decode_timestep`` (e.g. 0.05), a float or ``(B,)``; it is scaled by the decoder's
        ``timestep_scale_multiplier`` (1000).
      key: when the decoder injects noise (``cfg.injects_noise``, 0.9.1): decoder call ``k`` (one per tile)
        draws its noise from ``fold_in(key, k)`` (:func:`draw_decoder_noise`). Unused otherwise.
      noise: instead of ``key``: the noise of each decoder call, in the reference's call order (raster
        order of tiles, temporal tiles outermost); a dict alone for one call.
      tiling: None (no tiling) or the settings.
      on_tile: called after each decoder call (one per tile; progress).

    Returns:
      float32 video ``(B, out_channels, 8 (T - 1) + 1, 32 h, 32 w)`` (:func:`decoded_frames`), not clamped.

    Raises:
      ValueError: wrong rank or channel count; a missing or unexpected timestep; injected noise without
        ``key`` or ``noise``, or ``noise`` that does not match the calls; bad tiling settings.
    """
    _check_latents(z, cfg, "decode")
    q = None if tiling is None else tiling.resolve(cfg)
    decoder = _prepare(params, cfg, z, timestep, key, noise)
    decoder.on_call = on_tile
    if tiling is None:
        out = decoder(jnp.asarray(z))
    elif tiling.temporal and z.shape[2] > q["latent_frames"]:
        out = _temporal_tiled(decoder, cfg, np.asarray(z), q, tiling.spatial)
    else:
        out = _decode_frames(decoder, cfg, np.asarray(z), q, tiling.spatial)
    decoder.finish()
    return out


def tiled_decode(params: dict, cfg: LTXVideoVAEConfig, z: jax.Array, timestep=None, key=None, noise=None,
                 tiling: LTXVideoTiling = LTXVideoTiling()) -> jax.Array:
    """Spatially tiled decode (``AutoencoderKLLTXVideo.tiled_decode``) whatever the latent size.

    Tiles of ``latent_height x latent_width`` latents start every ``tile_sample_stride / 32`` latents (the
    last ones may be smaller) and are decoded independently; in raster order each tile's first
    ``blend_height`` rows are blended with the last rows of the tile above, and its first ``blend_width``
    columns with the tile to the left (linear weights), the blended tile replacing the stored one before
    it serves as a neighbour; each keeps ``stride_height x stride_width`` pixels, cropped to ``32 h x 32 w``.
    Arguments and result as :func:`decode`.
    """
    _check_latents(z, cfg, "tiled_decode")
    q = tiling.resolve(cfg)
    return _with_calls(params, cfg, z, timestep, key, noise, lambda d, z: _tiled(d, cfg, z, q))


def temporal_tiled_decode(params: dict, cfg: LTXVideoVAEConfig, z: jax.Array, timestep=None, key=None, noise=None,
                          tiling: LTXVideoTiling = LTXVideoTiling(temporal=True)) -> jax.Array:
    """Frame-tiled decode (``AutoencoderKLLTXVideo._temporal_tiled_decode``) whatever the frame count; each
    frame tile spatially tiled too when ``tiling.spatial`` and it is larger than a tile. Arguments and result
    as :func:`decode`."""
    _check_latents(z, cfg, "temporal_tiled_decode")
    q = tiling.resolve(cfg)
    return _with_calls(params, cfg, z, timestep, key, noise, lambda d, z: _temporal_tiled(d, cfg, z, q, tiling.spatial))


def _with_calls(params, cfg, z, timestep, key, noise, run):
    decoder = _prepare(params, cfg, z, timestep, key, noise)
    out = run(decoder, np.asarray(z))
    decoder.finish()
    return out


def normalize_latents(params: dict, latents: jax.Array, scaling_factor: float = 1.0) -> jax.Array:
    """``(latents - latents_mean) * scaling_factor / latents_std`` per channel (``LTXPipeline._normalize_latents``).

    The image/condition pipelines call it with the default ``scaling_factor=1.0`` on encoded latents
    (``cfg.scaling_factor`` is 1.0 in every release anyway). Statistics cast to the latents' dtype, as there.

    Args:
      params: VAE parameters holding ``latents_mean`` / ``latents_std`` (either side's parts).
      latents: ``(B, latent_channels, T, h, w)``.
    """
    require_parts(params, ("latents_mean", "latents_std"), "normalize_latents", "load DECODER_PARTS or ENCODER_PARTS")
    mean, std = (params[k].astype(latents.dtype).reshape(1, -1, 1, 1, 1) for k in ("latents_mean", "latents_std"))
    return (latents - mean) * scaling_factor / std


def denormalize_latents(params: dict, latents: jax.Array, scaling_factor: float = 1.0) -> jax.Array:
    """``latents * latents_std / scaling_factor + latents_mean`` (``LTXPipeline._denormalize_latents``, called
    with ``cfg.scaling_factor`` before decoding)."""
    require_parts(params, ("latents_mean", "latents_std"), "denormalize_latents", "load DECODER_PARTS")
    mean, std = (params[k].astype(latents.dtype).reshape(1, -1, 1, 1, 1) for k in ("latents_mean", "latents_std"))
    return latents * std / scaling_factor + mean
