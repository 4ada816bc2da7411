"""The LTX-2 video VAE (diffusers ``AutoencoderKLLTX2Video``) as pure JAX functions: frames <-> latents.

Reference: ``diffusers/models/autoencoders/autoencoder_kl_ltx2.py`` (``AutoencoderKLLTX2Video``,
``LTX2VideoEncoder3d``, ``LTX2VideoDecoder3d``, ``LTX2VideoCausalConv3d``, ``LTX2VideoDownsampler3d``,
``LTX2VideoResnetBlock3d``, ``LTX2VideoUpsampler3d``,
``LTX2VideoMidBlock3d``, ``LTX2VideoUpBlock3d``, ``PerChannelRMSNorm``); the latent statistics and the decode noise
as ``pipelines/ltx2/pipeline_ltx2.py`` (``_denormalize_latents`` and the ``decode_timestep`` /
``decode_noise_scale`` mixing before ``vae.decode``) uses them. Upstream: ``ltx_core/model/video_vae``.

What differs from the LTX-Video 0.9.x VAE (``models/ltx/vae.py``)
    * spatial padding of every decoder convolution is ``decoder_spatial_padding_mode`` (``"reflect"`` in the
      releases; 0.9.x: zeros); time is still padded by repeating the edge frames;
    * the resnets' shortcut is a plain ``nn.Conv3d`` (key ``conv_shortcut.weight``, no ``.conv``);
    * the norms are ``PerChannelRMSNorm`` (no parameters, eps 1e-8);
    * the upsamplers take a per-block ``upsample_type`` (``spatial``, ``temporal``, ``spatiotemporal``).
    The math of the shared pieces is otherwise the same, but the padding, the shortcut keys and the upsampler
    strides touch every building block, so the family keeps its own copy (a family imports no other family).

Layout
    Public functions take and return channels-first ``(B, C, T, H, W)`` arrays; inside the jitted program
    everything is channels-last ``(B, T, H, W, C)``.

Repeated resnets under ``lax.scan``
    The resnets of each block share their shapes, so they are declared stacked (a leading ``layers`` axis filled
    from ``resnets.{i}``) and run under one ``jax.lax.scan`` per block.

Where diffusers departs from upstream (upstream ltx-core is followed)
    The shortcut norm of a width-changing resnet (``norm3``, before ``conv_shortcut``): upstream ``ResnetBlock3D``
    builds ``nn.GroupNorm(num_groups=1, C)`` (statistics over channels, frames and pixels of each sample), diffusers
    ``nn.LayerNorm(C)`` (statistics over the channels of each position); the parameters are the same two vectors.
    Only width-changing resnets have it: an up block's ``conv_in`` (upstream ``res_x_y``); no LTX-2 release has one.

Not supported (no release uses them; :class:`LTX2VideoVAEConfig` raises)
    ``decoder_inject_noise`` (the reference draws ``torch.randn`` inside the resnets), ``patch_size_t != 1``.

Precision
    Convolutions take their inputs in the weights' dtype and accumulate in float32; the norms compute in float32; the
    residual stream (resnet sums, up/downsampler residuals) stays float32: with it in bf16 the tiny release-structure
    decoder measured 1.2e-2 against the float32 reference, over the 1e-2 bound.
    The shortcut ``LayerNorm``'s parameters, the timestep embedders, the scale/shift tables, the timestep
    multiplier and the latent statistics are float32 leaves (``ParamSpec.fp32``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint.keymap import KeyMap, Rule, conv, norm
from vidax.checkpoint.keymap import linear as linear_rules
from vidax.core.config_values import config_values, read_json
from vidax.core.embeddings import timestep_embedding
from vidax.core.layers import conv3d, conv_jit, linear, rms_norm
from vidax.core.ltx_tiling import LTXVideoTiling, decode_frames, temporal_tiled
from vidax.core.params import ParamSpec, SpecTree, require_parts, unflatten

#: Epsilon of ``PerChannelRMSNorm`` (fixed in the reference).
RMS_EPS = 1e-8
#: Width of the sinusoidal timestep projection of ``PixArtAlphaCombinedTimestepSizeEmbeddings``.
TIME_PROJ_DIM = 256
#: Time, height and width strides of the up/down sampling types.
SAMPLE_STRIDES = {"spatial": (1, 2, 2), "temporal": (2, 1, 1), "spatiotemporal": (2, 2, 2)}
#: ``nn.Conv3d`` ``padding_mode`` -> ``jnp.pad`` mode.
PADDING_MODES = {"zeros": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}
_F32 = jnp.float32


@dataclass(frozen=True)
class LTX2VideoVAEConfig:
    """Configuration of ``AutoencoderKLLTX2Video`` (the keys of a diffusers ``vae/config.json``).

    Hashable (scalars and tuples): a static argument of the jitted programs. Defaults are the reference's. The
    decoder's per-block tuples are read as the reference reads them: reversed, then indexed (the mid block's entry of
    ``decoder_layers_per_block`` / ``decoder_inject_noise`` first after reversal). A bool given for a per-block
    field is expanded as the reference expands it.


    Attributes (decoder):
      latent_channels: latent channels (128). out_channels: video channels (3).
      decoder_block_out_channels: decoder widths before ``upsample_factor`` division ((256, 512, 1024)).
      decoder_layers_per_block: resnets of the mid block and each up block ((5, 5, 5, 5)).
      decoder_spatio_temporal_scaling: whether an up block upsamples. upsample_type: its strides.
      upsample_residual, upsample_factor: depth-to-space residual, width divisor per up block.
      timestep_conditioning: the decoder takes the pipelines' ``decode_timestep`` (False in LTX-2.0).
      decoder_causal: time padding of the decoder's convolutions (False in the releases).
      decoder_spatial_padding_mode: ``nn.Conv3d`` padding mode in H and W (``"reflect"`` in the releases).
      patch_size: pixel patchification into channels (4). resnet_norm_eps: the shortcut ``LayerNorm``'s eps.
    """

    in_channels: int = 3
    out_channels: int = 3
    latent_channels: int = 128
    block_out_channels: tuple[int, ...] = (256, 512, 1024, 2048)
    down_block_types: tuple[str, ...] = ("LTX2VideoDownBlock3D",) * 4
    decoder_block_out_channels: tuple[int, ...] = (256, 512, 1024)
    layers_per_block: tuple[int, ...] = (4, 6, 6, 2, 2)
    decoder_layers_per_block: tuple[int, ...] = (5, 5, 5, 5)
    spatio_temporal_scaling: tuple[bool, ...] | bool = (True, True, True, True)
    decoder_spatio_temporal_scaling: tuple[bool, ...] | bool = (True, True, True)
    decoder_inject_noise: tuple[bool, ...] | bool = (False, False, False, False)
    downsample_type: tuple[str, ...] = ("spatial", "temporal", "spatiotemporal", "spatiotemporal")
    upsample_type: tuple[str, ...] = ("spatiotemporal", "spatiotemporal", "spatiotemporal")
    upsample_residual: tuple[bool, ...] | bool = (True, True, True)
    upsample_factor: tuple[int, ...] = (2, 2, 2)
    timestep_conditioning: bool = False
    patch_size: int = 4
    patch_size_t: int = 1
    resnet_norm_eps: float = 1e-6
    scaling_factor: float = 1.0
    encoder_causal: bool = True
    decoder_causal: bool = True
    encoder_spatial_padding_mode: str = "zeros"
    decoder_spatial_padding_mode: str = "reflect"
    spatial_compression_ratio: int | None = None
    temporal_compression_ratio: int | None = None

    def __post_init__(self):
        for f in dataclasses.fields(self):
            if isinstance(getattr(self, f.name), list):
                object.__setattr__(self, f.name, tuple(getattr(self, f.name)))
        # The reference's bool expansion (AutoencoderKLLTX2Video.__init__).
        ne, nd = len(self.layers_per_block), len(self.decoder_layers_per_block)
        for name, n in (("spatio_temporal_scaling", ne - 1), ("decoder_spatio_temporal_scaling", nd - 1),
                        ("decoder_inject_noise", nd), ("upsample_residual", nd - 1)):
            if isinstance(getattr(self, name), bool):
                object.__setattr__(self, name, (getattr(self, name),) * n)
        problems = []
        if min(self.in_channels, self.out_channels, self.latent_channels, self.patch_size) < 1:
            problems.append("in_channels, out_channels, latent_channels and patch_size must be positive")
        if self.patch_size_t != 1:
            problems.append(f"patch_size_t={self.patch_size_t} (only 1, as in every release)")
        if any(self.decoder_inject_noise):
            problems.append("decoder_inject_noise (no LTX-2 release injects noise in the decoder)")
        for name in ("encoder_spatial_padding_mode", "decoder_spatial_padding_mode"):
            if getattr(self, name) not in PADDING_MODES:
                problems.append(f"{name}={getattr(self, name)!r} (known: {list(PADDING_MODES)})")
        if any(n < 0 for n in self.decoder_layers_per_block):
            problems.append("negative resnet counts in decoder_layers_per_block")
        if not (math.isfinite(self.scaling_factor) and self.scaling_factor > 0):
            problems.append(f"scaling_factor={self.scaling_factor} (must be positive)")
        if problems:
            raise ValueError("LTX2VideoVAEConfig: unsupported " + "; ".join(problems))
        enc, dec = _encoder_plan(self), _decoder_plan(self)
        for name, e, dv in (("spatial", enc.spatial, dec.spatial), ("temporal", enc.temporal, dec.temporal)):
            if e != dv:
                raise ValueError(f"LTX2VideoVAEConfig: the encoder compresses by {e} and the decoder expands by {dv} "
                                 f"({name}); fix the block structure so they match")
            given = getattr(self, f"{name}_compression_ratio")
            if given is not None and given != e:
                raise ValueError(f"LTX2VideoVAEConfig: {name}_compression_ratio={given}, but the architecture "
                                 f"compresses by {e}")

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> LTX2VideoVAEConfig:
        """Build from a diffusers ``vae/config.json`` dict (``_``-prefixed keys are metadata).

        Raises:
          ValueError: ``_class_name`` is not ``AutoencoderKLLTX2Video``; an unknown key; a value of the wrong type;
            an unsupported or inconsistent setting (the message names it).
        """
        name = config.get("_class_name")
        if name not in (None, "AutoencoderKLLTX2Video"):
            raise ValueError(f"vae config.json is for {name!r}, not 'AutoencoderKLLTX2Video'")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(k for k in config if not k.startswith("_") and k not in fields)
        if unknown:
            raise ValueError(f"LTX2VideoVAEConfig: unknown config keys {unknown} (not AutoencoderKLLTX2Video args)")
        return cls(**config_values(cls, config, "LTX-2 video VAE config"))

    @property
    def spatial_compression(self) -> int:
        """Pixels per latent pixel along H and W of the decoder (32 in the releases)."""
        return _decoder_plan(self).spatial

    @property
    def temporal_compression(self) -> int:
        """Video frames per latent frame after the first (8 in the releases)."""
        return _decoder_plan(self).temporal


@dataclass(frozen=True)
class _DownStage:
    cin: int  # the block's input (and resnet) width
    cout: int  # its output width
    layers: int
    down: str | None  # None, "conv" (strided LTX2VideoCausalConv3d) or an LTX2VideoDownsampler3d type


@dataclass(frozen=True)
class _EncoderPlan:
    stages: tuple[_DownStage, ...]
    mid_width: int
    mid_layers: int
    spatial: int
    temporal: int


@functools.lru_cache(maxsize=32)
def _encoder_plan(cfg: LTX2VideoVAEConfig) -> _EncoderPlan:
    """``LTX2VideoEncoder3d``'s blocks, checked so that the widths chain (the reference fails at run time)."""
    ch, n = cfg.block_out_channels, len(cfg.block_out_channels)
    if n == 0:
        raise ValueError("LTX2VideoVAEConfig: block_out_channels must not be empty")
    for name, need in (("down_block_types", n), ("spatio_temporal_scaling", n), ("downsample_type", n),
                       ("layers_per_block", n + 1)):
        if len(getattr(cfg, name)) < need:
            raise ValueError(f"LTX2VideoVAEConfig: {name} has {len(getattr(cfg, name))} entries, an encoder of {n} "
                             f"blocks needs {need} (the reference indexes past its end)")
    bad = sorted({t for t in cfg.down_block_types[:n] if t != "LTX2VideoDownBlock3D"})
    if bad:
        raise ValueError(f"LTX2VideoVAEConfig: unsupported down_block_types {bad} (only LTX2VideoDownBlock3D)")
    stages, out, sp, tm = [], cfg.latent_channels, cfg.patch_size, cfg.patch_size_t
    for i in range(n):
        cin, out = out, ch[i]
        down = cfg.downsample_type[i] if cfg.spatio_temporal_scaling[i] else None
        if down is not None and down != "conv" and down not in SAMPLE_STRIDES:
            raise ValueError(f"LTX2VideoVAEConfig: downsample_type[{i}]={down!r} (known: conv, {list(SAMPLE_STRIDES)})")
        stride = (2, 2, 2) if down == "conv" else SAMPLE_STRIDES.get(down)
        width = out if down not in (None, "conv") else cin
        if down not in (None, "conv"):
            prod = math.prod(stride)
            if out % prod or (cin * prod) % out:
                raise ValueError(f"LTX2VideoVAEConfig: down block {i} ({down}) maps {cin} -> {out} channels; the "
                                 f"space-to-depth downsampler needs {out} divisible by {prod} and {cin} x {prod} "
                                 f"divisible by {out}")
        if width != out:
            raise ValueError(f"LTX2VideoVAEConfig: down block {i} outputs {width} channels where the next stage "
                             f"expects {out}; the reference cannot run this configuration either")
        if stride is not None:
            sp, tm = sp * stride[1], tm * stride[0]
        stages.append(_DownStage(cin, out, int(cfg.layers_per_block[i]), down))
    return _EncoderPlan(tuple(stages), out, int(cfg.layers_per_block[n]), sp, tm)


@dataclass(frozen=True)
class _UpStage:
    cin: int  # the reference's nominal input width (output_channel // factor)
    cout: int  # width of its resnets and output
    layers: int
    conv_in: bool
    stride: tuple[int, int, int] | None  # upsampler strides, None without upsampler
    residual: bool
    factor: int


@dataclass(frozen=True)
class _DecoderPlan:
    mid_width: int
    mid_layers: int
    stages: tuple[_UpStage, ...]
    spatial: int
    temporal: int


@functools.lru_cache(maxsize=32)
def _decoder_plan(cfg: LTX2VideoVAEConfig) -> _DecoderPlan:
    """``LTX2VideoDecoder3d``'s blocks (its reversed per-block tuples), checked so that the widths chain."""
    ch = cfg.decoder_block_out_channels[::-1]
    n = len(ch)
    if n == 0:
        raise ValueError("LTX2VideoVAEConfig: decoder_block_out_channels must not be empty")
    for name, need in (("decoder_spatio_temporal_scaling", n), ("decoder_layers_per_block", n + 1),
                       ("decoder_inject_noise", n + 1), ("upsample_residual", n), ("upsample_factor", n),
                       ("upsample_type", n)):
        if len(getattr(cfg, name)) < need:
            raise ValueError(f"LTX2VideoVAEConfig: {name} has {len(getattr(cfg, name))} entries, a decoder of {n} up "
                             f"blocks needs {need} (the reference indexes past its end)")
    rev = {name: getattr(cfg, name)[::-1] for name in ("decoder_spatio_temporal_scaling", "decoder_layers_per_block",
                                                     "upsample_residual", "upsample_factor")}
    # upsample_type is NOT reversed by the reference (LTX2VideoDecoder3d indexes it as given).
    out, cur, stages, sp, tm = ch[0], ch[0], [], cfg.patch_size, cfg.patch_size_t
    for i in range(n):
        f = int(rev["upsample_factor"][i])
        if f < 1:
            raise ValueError(f"LTX2VideoVAEConfig: upsample_factor {f} must be positive")
        cin, out = out // f, ch[i] // f
        conv_in = cin != out
        if conv_in and cfg.timestep_conditioning:
            raise ValueError(f"LTX2VideoVAEConfig: up block {i} changes width {cin} -> {out} (a conv_in resnet) with "
                             "timestep_conditioning, which the reference builds but cannot run")
        if conv_in:
            if cur != cin:
                break
            cur = out
        stride = None
        if rev["decoder_spatio_temporal_scaling"][i]:
            kind = cfg.upsample_type[i]
            if kind not in SAMPLE_STRIDES:
                raise ValueError(f"LTX2VideoVAEConfig: upsample_type[{i}]={kind!r} (known: {list(SAMPLE_STRIDES)})")
            stride = SAMPLE_STRIDES[kind]
            prod = math.prod(stride)
            if cur != out * f or bool(rev["upsample_residual"][i]) and (cur % prod or prod % f):
                break
            cur = out
            sp, tm = sp * stride[1], tm * stride[0]
        if cur != out:
            break
        stages.append(_UpStage(cin, out, int(rev["decoder_layers_per_block"][i + 1]), conv_in, stride,
                               bool(rev["upsample_residual"][i]), f))
    if len(stages) != n:
        raise ValueError(f"LTX2VideoVAEConfig: decoder up block {len(stages)} receives {cur} channels where its "
                         f"layers expect others (decoder_block_out_channels={list(cfg.decoder_block_out_channels)}, "
                         f"upsample_factor={list(cfg.upsample_factor)}); the reference cannot run it either")
    return _DecoderPlan(ch[0], int(rev["decoder_layers_per_block"][0]), tuple(stages), sp, tm)


# ---------------------------------------------------------------------------------------------
# Parameter declaration and the key map (one walk gives both)
# ---------------------------------------------------------------------------------------------


class _Declaration:
    """Parameter specs (paths mirror the diffusers module names) and the diffusers key-map rules.

    A stacked module (``stack=n``) holds its ``n`` repeats along a leading axis; its keys carry ``{i}``.
    """

    def __init__(self):
        self.specs: dict[str, ParamSpec] = {}
        self.rules: list[Rule] = []

    @staticmethod
    def _path(key: str) -> str:
        return key.replace(".", "/").replace("/{i}", "")

    def _spec(self, path: str, shape: tuple[int, ...], stack: int | None, fp32: bool = False):
        self.specs[path] = ParamSpec(shape if stack is None else (stack, *shape), fp32=fp32)

    def conv(self, key: str, cin: int, cout: int, k: int, stack: int | None = None):
        """An ``nn.Conv3d`` at ``key`` (an ``LTX2VideoCausalConv3d``'s is ``{module}.conv``)."""
        path = self._path(key)
        self._spec(f"{path}/kernel", (k, k, k, cin, cout), stack)
        self._spec(f"{path}/bias", (cout,), stack)
        self.rules += conv(key, path, dims=3)

    def tensor(self, key: str, shape: tuple[int, ...], stack: int | None = None):
        """A bare ``nn.Parameter`` / buffer, float32 (scales, tables, statistics)."""
        self._spec(self._path(key), shape, stack, fp32=True)
        self.rules.append(Rule(key, self._path(key)))

    def layer_norm(self, key: str, dim: int):
        path = self._path(key)
        self._spec(f"{path}/scale", (dim,), None, fp32=True)
        self._spec(f"{path}/bias", (dim,), None, fp32=True)
        self.rules += norm(key, path)

    def time_embedder(self, key: str, dim: int):
        """``PixArtAlphaCombinedTimestepSizeEmbeddings(dim, 0)``: ``Timesteps(256)`` -> ``TimestepEmbedding``."""
        for name, fan_in in (("linear_1", TIME_PROJ_DIM), ("linear_2", dim)):
            k = f"{key}.timestep_embedder.{name}"
            self._spec(f"{self._path(k)}/kernel", (fan_in, dim), None, fp32=True)
            self._spec(f"{self._path(k)}/bias", (dim,), None, fp32=True)
            self.rules += linear_rules(k, self._path(k))

    def resnet(self, key: str, cin: int, cout: int, stack: int | None = None, timestep: bool = False):
        """``LTX2VideoResnetBlock3d`` (its ``PerChannelRMSNorm``s have no parameters)."""
        self.conv(f"{key}.conv1.conv", cin, cout, 3, stack)
        self.conv(f"{key}.conv2.conv", cout, cout, 3, stack)
        if cin != cout:  # (never stacked: width-changing resnets are single)
            self.layer_norm(f"{key}.norm3", cin)
            self.conv(f"{key}.conv_shortcut", cin, cout, 1)
        if timestep:
            self.tensor(f"{key}.scale_shift_table", (4, cin), stack)


@functools.lru_cache(maxsize=16)
def _declare(cfg: LTX2VideoVAEConfig) -> _Declaration:
    d, enc, dec, tc = _Declaration(), _encoder_plan(cfg), _decoder_plan(cfg), cfg.timestep_conditioning
    d.conv("encoder.conv_in.conv", cfg.in_channels * cfg.patch_size**2 * cfg.patch_size_t, cfg.latent_channels, 3)
    for i, s in enumerate(enc.stages):
        key = f"encoder.down_blocks.{i}"
        if s.layers:
            d.resnet(f"{key}.resnets.{{i}}", s.cin, s.cin, s.layers)
        if s.down == "conv":
            d.conv(f"{key}.downsamplers.0.conv", s.cin, s.cin, 3)
        elif s.down is not None:  # LTX2VideoDownsampler3d: its causal conv is `.conv`
            d.conv(f"{key}.downsamplers.0.conv.conv", s.cin, s.cout // math.prod(SAMPLE_STRIDES[s.down]), 3)
    if enc.mid_layers:
        d.resnet("encoder.mid_block.resnets.{i}", enc.mid_width, enc.mid_width, enc.mid_layers)
    d.conv("encoder.conv_out.conv", enc.mid_width, cfg.latent_channels + 1, 3)
    d.conv("decoder.conv_in.conv", cfg.latent_channels, dec.mid_width, 3)
    if tc:
        d.time_embedder("decoder.mid_block.time_embedder", 4 * dec.mid_width)
    if dec.mid_layers:
        d.resnet("decoder.mid_block.resnets.{i}", dec.mid_width, dec.mid_width, dec.mid_layers, tc)
    for i, s in enumerate(dec.stages):
        key = f"decoder.up_blocks.{i}"
        if s.conv_in:
            d.resnet(f"{key}.conv_in", s.cin, s.cout)
        if tc:
            d.time_embedder(f"{key}.time_embedder", 4 * s.cin)
        if s.stride is not None:  # LTX2VideoUpsampler3d(cout * factor): prod(stride) sub-pixels of cout channels
            d.conv(f"{key}.upsamplers.0.conv.conv", s.cout * s.factor, math.prod(s.stride) * s.cout, 3)
        if s.layers:
            d.resnet(f"{key}.resnets.{{i}}", s.cout, s.cout, s.layers, tc)
    width = dec.stages[-1].cout
    if tc:
        d.tensor("decoder.timestep_scale_multiplier", ())
        d.time_embedder("decoder.time_embedder", 2 * width)
        d.tensor("decoder.scale_shift_table", (2, width))
    d.conv("decoder.conv_out.conv", width, cfg.out_channels * cfg.patch_size**2 * cfg.patch_size_t, 3)
    d.tensor("latents_mean", (cfg.latent_channels,))
    d.tensor("latents_std", (cfg.latent_channels,))
    return d


def vae_specs_and_rules(cfg: LTX2VideoVAEConfig) -> tuple[SpecTree, list[Rule]]:
    """The VAE's spec tree and its diffusers key-map rules, from one walk of the architecture.

    Paths mirror the diffusers module names with ``/`` for ``.``; the resnets of a block are one stacked subtree
    without the index (``decoder/up_blocks/0/resnets/conv1/conv/kernel`` of shape ``(layers, 3, 3, 3, C, C)``).
    Kernels are channels-last ``(kt, kh, kw, in, out)``; linear kernels ``(in, out)``.
    """
    d = _declare(cfg)
    return unflatten(dict(d.specs)), list(d.rules)


def vae_keymap(cfg: LTX2VideoVAEConfig) -> KeyMap:
    """Key map of a diffusers-layout ``AutoencoderKLLTX2Video`` (``vae/*.safetensors``)."""
    return KeyMap(vae_specs_and_rules(cfg)[1])


def release_name(cfg: LTX2VideoVAEConfig, key: str, prefix: str = "vae.") -> str:
    """The release single-file name of a diffusers ``vae`` key (upstream ltx-core module names).

    Upstream keeps the blocks in one flat list per side: the encoder's ``down_blocks.{2i}`` are diffusers' block ``i``
    resnets (``res_blocks``), ``down_blocks.{2i+1}`` its downsampler, ``down_blocks.{2n}`` the mid block; the
    decoder's ``up_blocks.0`` is the mid block, ``up_blocks.{2i+1}`` up block ``i``'s upsampler and
    ``up_blocks.{2i+2}`` its resnets (and time embedder); ``last_time_embedder`` / ``last_scale_shift_table`` are
    the decoder's final ones, ``per_channel_statistics.{mean,std}-of-means`` the latent statistics. The inverse of
    diffusers' ``convert_ltx2_vae_to_diffusers`` (``loaders/single_file_utils.py``).

    Raises:
      ValueError: a block structure the flat layout cannot name (an encoder block without downsampler, a decoder
        block without upsampler or with a width-changing ``conv_in``).
    """
    enc, dec = _encoder_plan(cfg), _decoder_plan(cfg)
    if any(st.down is None for st in enc.stages) or any(st.stride is None or st.conv_in for st in dec.stages):
        raise ValueError("release_name: this block structure has no release single-file layout (every encoder block "
                         "must downsample and every decoder block upsample without a conv_in)")
    subs = [
        (r"^encoder\.down_blocks\.(\d+)\.downsamplers\.0\.", lambda m: f"encoder.down_blocks.{2 * int(m[1]) + 1}."),
        (r"^encoder\.down_blocks\.(\d+)\.resnets\.", lambda m: f"encoder.down_blocks.{2 * int(m[1])}.res_blocks."),
        (r"^encoder\.mid_block\.resnets\.", lambda m: f"encoder.down_blocks.{2 * len(enc.stages)}.res_blocks."),
        (r"^decoder\.mid_block\.resnets\.", lambda m: "decoder.up_blocks.0.res_blocks."),
        (r"^decoder\.mid_block\.", lambda m: "decoder.up_blocks.0."),
        (r"^decoder\.up_blocks\.(\d+)\.upsamplers\.0\.", lambda m: f"decoder.up_blocks.{2 * int(m[1]) + 1}."),
        (r"^decoder\.up_blocks\.(\d+)\.resnets\.", lambda m: f"decoder.up_blocks.{2 * int(m[1]) + 2}.res_blocks."),
        (r"^decoder\.up_blocks\.(\d+)\.", lambda m: f"decoder.up_blocks.{2 * int(m[1]) + 2}."),
        (r"^decoder\.time_embedder\.", lambda m: "decoder.last_time_embedder."),
        (r"^decoder\.scale_shift_table$", lambda m: "decoder.last_scale_shift_table"),
        (r"^latents_mean$", lambda m: "per_channel_statistics.mean-of-means"),
        (r"^latents_std$", lambda m: "per_channel_statistics.std-of-means"),
    ]
    for pattern, repl in subs:
        new = re.sub(pattern, repl, key)
        if new != key:
            return prefix + new
    return prefix + key


def vae_release_keymap(cfg: LTX2VideoVAEConfig, prefix: str = "vae.") -> KeyMap:
    """Key map of the video VAE in the release's single-file layout (:func:`release_name`), same parameter tree.

    The release's other ``per_channel_statistics`` buffers (``channel``, ``mean-of-stds``) are not read."""
    return KeyMap([Rule(release_name(cfg, r.key, prefix), r.path, r.layout) for r in vae_specs_and_rules(cfg)[1]])


#: Top-level parts that encoding reads.
ENCODER_PARTS = ("encoder", "latents_mean", "latents_std")
#: Top-level parts that denormalising and decoding read.
DECODER_PARTS = ("decoder", "latents_mean", "latents_std")


def load_vae(path: str | os.PathLike, dtype: Any = np.float32,
             parts: Collection[str] | None = DECODER_PARTS) -> tuple[LTX2VideoVAEConfig, dict]:
    """Load a diffusers ``vae`` folder (``config.json`` + safetensors) into ``(cfg, params)``.

    Args:
      path: the folder.
      dtype: compute dtype of the convolution kernels (float32 leaves stay float32).
      parts: top-level parts to read (default :data:`DECODER_PARTS`; :data:`ENCODER_PARTS`; None: all). The whole
        checkpoint is checked either way.

    Raises:
      ValueError: an unsupported configuration. CheckpointError: an unreadable ``config.json``; tensors that do not
        match the configuration.
    """
    from vidax.checkpoint.loader import load_params
    from vidax.checkpoint.safetensors_io import CheckpointReader

    path = Path(path)
    cfg = LTX2VideoVAEConfig.from_dict(read_json(path / "config.json"))
    specs, rules = vae_specs_and_rules(cfg)
    return cfg, load_params(CheckpointReader(path), KeyMap(rules), specs, dtype, source=str(path), parts=parts)


# ---------------------------------------------------------------------------------------------
# Building blocks (channels-last, pure)
# ---------------------------------------------------------------------------------------------


def _conv(p: dict, x: jax.Array, causal: bool, mode: str, strides=(1, 1, 1)) -> jax.Array:
    """``LTX2VideoCausalConv3d``: edge frames repeated in time, ``mode`` padding in space."""
    kt, kh, kw = p["kernel"].shape[:3]
    lo, hi = (kt - 1, 0) if causal else ((kt - 1) // 2, (kt - 1) // 2)
    if lo or hi:
        x = jnp.pad(x, ((0, 0), (lo, hi), (0, 0), (0, 0), (0, 0)), mode="edge")
    if kh > 1 or kw > 1:
        x = jnp.pad(x, ((0, 0), (0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2), (0, 0)), mode=PADDING_MODES[mode])
    return conv3d(p, x, strides=strides)


def _group_norm1(x: jax.Array, p: dict, eps: float) -> jax.Array:
    """Upstream's shortcut norm ``nn.GroupNorm(1, C)``: statistics over ``(T, H, W, C)`` per sample (float32),
    per-channel affine. Diffusers uses ``nn.LayerNorm(C)`` (per position) instead: see the module notes."""
    xf = x.astype(_F32)
    mean = jnp.mean(xf, axis=(1, 2, 3, 4), keepdims=True)
    var = jnp.mean(jnp.square(xf - mean), axis=(1, 2, 3, 4), keepdims=True)
    return (xf - mean) * jax.lax.rsqrt(var + eps) * p["scale"].astype(_F32) + p["bias"].astype(_F32)


def _resnet(p: dict, x: jax.Array, causal: bool, mode: str, eps: float, ss: jax.Array | None = None) -> jax.Array:
    """``LTX2VideoResnetBlock3d``; ``ss``: float32 ``(B, 4, C)`` (shift1, scale1, shift2, scale2)."""
    mod = None if ss is None else [ss[:, k, None, None, None, :] for k in range(4)]
    h = rms_norm(x, None, RMS_EPS)
    if mod is not None:
        h = h * (1 + mod[1]) + mod[0]
    h = _conv(p["conv1"]["conv"], jax.nn.silu(h), causal, mode)
    h = rms_norm(h, None, RMS_EPS)
    if mod is not None:
        h = h * (1 + mod[3]) + mod[2]
    h = _conv(p["conv2"]["conv"], jax.nn.silu(h), causal, mode)
    if "norm3" in p:
        x = _group_norm1(x, p["norm3"], eps).astype(x.dtype)
    if "conv_shortcut" in p:
        x = conv3d(p["conv_shortcut"], x)
    return h.astype(_F32) + x.astype(_F32)


def _resnet_stack(p: dict, x: jax.Array, causal: bool, mode: str, eps: float,
                  emb: jax.Array | None = None) -> jax.Array:
    """A block's resnets under one ``lax.scan``; ``emb``: the block's float32 ``(B, 4 C)`` timestep embedding."""
    emb = None if emb is None else emb.reshape(emb.shape[0], 4, -1)

    def body(h, lp):
        ss = None if emb is None else emb + lp["scale_shift_table"].astype(_F32)[None]
        return _resnet(lp, h, causal, mode, eps, ss), None

    return jax.lax.scan(body, x.astype(_F32), p)[0]


def _space_to_depth(x: jax.Array, stride: tuple[int, int, int]) -> jax.Array:
    """``(B, T, H, W, C) -> (B, T/st, H/sh, W/sw, C*st*sh*sw)``, channels ordered ``(c, st, sh, sw)``."""
    b, t, h, w, c = x.shape
    st, sh, sw = stride
    x = x.reshape(b, t // st, st, h // sh, sh, w // sw, sw, c).transpose(0, 1, 3, 5, 7, 2, 4, 6)
    return x.reshape(b, t // st, h // sh, w // sw, c * st * sh * sw)


def _downsample(p: dict, x: jax.Array, causal: bool, mode: str, down: str, cout: int) -> jax.Array:
    """``LTX2VideoDownsampler3d``: space-to-depth of a convolution plus the grouped mean of the space-to-depth input
    (the first ``st - 1`` frames prepended first)."""
    stride = SAMPLE_STRIDES[down]
    x = jnp.concatenate([x[:, : stride[0] - 1], x], axis=1)
    r = _space_to_depth(x, stride)
    r = r.reshape(*r.shape[:4], cout, -1).astype(_F32).mean(axis=-1)
    return _space_to_depth(_conv(p["conv"]["conv"], x, causal, mode), stride).astype(_F32) + r


def _depth_to_space(x: jax.Array, stride: tuple[int, int, int]) -> jax.Array:
    """``(B, T, H, W, C s) -> (B, T st, H sh, W sw, C)``, channels ordered ``(c, st, sh, sw)`` as the reference."""
    b, t, h, w, c = x.shape
    st, sh, sw = stride
    x = x.reshape(b, t, h, w, c // (st * sh * sw), st, sh, sw).transpose(0, 1, 5, 2, 6, 3, 7, 4)
    return x.reshape(b, t * st, h * sh, w * sw, c // (st * sh * sw))


def _upsample(p: dict, x: jax.Array, causal: bool, mode: str, s: _UpStage) -> jax.Array:
    """``LTX2VideoUpsampler3d``: depth-to-space of a convolution, the first ``st - 1`` frames dropped; with
    ``residual`` the input's own depth-to-space, its channels tiled ``prod(stride) / factor`` times, is added."""
    st = s.stride[0]
    y = _depth_to_space(_conv(p["conv"]["conv"], x, causal, mode), s.stride)[:, st - 1:]
    if s.residual:
        r = _depth_to_space(x, s.stride)
        y = y.astype(_F32) + jnp.tile(r, (1, 1, 1, 1, math.prod(s.stride) // s.factor))[:, st - 1:].astype(_F32)
    return y


def _time_embed(p: dict, t: jax.Array) -> jax.Array:
    """``PixArtAlphaCombinedTimestepSizeEmbeddings(dim, 0)``: ``(B,)`` -> float32 ``(B, dim)``."""
    e = timestep_embedding(t, TIME_PROJ_DIM, flip_sin_to_cos=True, downscale_freq_shift=0)
    te = p["timestep_embedder"]
    return linear(te["linear_2"], jax.nn.silu(linear(te["linear_1"], e, _F32)), _F32)


def _decoder(p: dict, cfg: LTX2VideoVAEConfig, z: jax.Array, t: jax.Array | None, causal: bool) -> jax.Array:
    """``LTX2VideoDecoder3d`` before unpatchification: ``(B, T, h, w, latent) -> (B, T', H/p, W/p, C p^2)``."""
    plan, eps, mode, tc = _decoder_plan(cfg), cfg.resnet_norm_eps, cfg.decoder_spatial_padding_mode, \
        cfg.timestep_conditioning
    x = _conv(p["conv_in"]["conv"], z, causal, mode)
    if tc:
        t = t.astype(_F32) * p["timestep_scale_multiplier"].astype(_F32)
    if plan.mid_layers:
        mid = p["mid_block"]
        with jax.named_scope("mid_block"):
            emb = _time_embed(mid["time_embedder"], t) if tc else None
            x = _resnet_stack(mid["resnets"], x, causal, mode, eps, emb)
    for i, s in enumerate(plan.stages):
        bp = p["up_blocks"][str(i)]
        with jax.named_scope(f"up_blocks.{i}"):
            if s.conv_in:
                x = _resnet(bp["conv_in"], x, causal, mode, eps)
            if s.stride is not None:
                x = _upsample(bp["upsamplers"]["0"], x, causal, mode, s)
            if s.layers:
                emb = _time_embed(bp["time_embedder"], t) if tc else None
                x = _resnet_stack(bp["resnets"], x, causal, mode, eps, emb)
    x = rms_norm(x, None, RMS_EPS)
    if tc:
        e = _time_embed(p["time_embedder"], t).reshape(x.shape[0], 2, -1) + p["scale_shift_table"].astype(_F32)[None]
        x = x * (1 + e[:, 1, None, None, None]) + e[:, 0, None, None, None]
    return _conv(p["conv_out"]["conv"], jax.nn.silu(x), causal, mode)


def _encoder(p: dict, cfg: LTX2VideoVAEConfig, x: jax.Array, causal: bool) -> jax.Array:
    """``LTX2VideoEncoder3d`` after patchification: ``(B, T, H/p, W/p, C p^2) -> (B, T', h, w, latent + 1)``."""
    plan, eps, mode = _encoder_plan(cfg), cfg.resnet_norm_eps, cfg.encoder_spatial_padding_mode
    x = _conv(p["conv_in"]["conv"], x, causal, mode)
    for i, s in enumerate(plan.stages):
        bp = p["down_blocks"][str(i)]
        with jax.named_scope(f"down_blocks.{i}"):
            if s.layers:
                x = _resnet_stack(bp["resnets"], x, causal, mode, eps)
            if s.down == "conv":
                x = _conv(bp["downsamplers"]["0"]["conv"], x, causal, mode, strides=(2, 2, 2))
            elif s.down is not None:
                x = _downsample(bp["downsamplers"]["0"], x, causal, mode, s.down, s.cout)
    if plan.mid_layers:
        with jax.named_scope("mid_block"):
            x = _resnet_stack(p["mid_block"]["resnets"], x, causal, mode, eps)
    x = jax.nn.silu(rms_norm(x, None, RMS_EPS))
    return _conv(p["conv_out"]["conv"], x, causal, mode)


def _encoder_dtype(params: dict):
    require_parts(params, ("encoder",), "VAE encoding", "load the VAE's encoder parts (ENCODER_PARTS)")
    return params["encoder"]["conv_in"]["conv"]["kernel"].dtype


@conv_jit(static_argnames=("cfg", "causal"))
def _encode_program(params: dict, cfg: LTX2VideoVAEConfig, video: jax.Array, causal: bool):
    b, c, t, h, w = video.shape
    p = cfg.patch_size
    x = video.reshape(b, c, t, h // p, p, w // p, p).transpose(0, 2, 3, 5, 1, 6, 4)  # channels (c, p_w, p_h)
    x = x.reshape(b, t, h // p, w // p, c * p * p).astype(_encoder_dtype(params))
    y = jnp.transpose(_encoder(params["encoder"], cfg, x, causal).astype(_F32), (0, 4, 1, 2, 3))
    n = cfg.latent_channels
    # The reference repeats its one log-variance channel to `latent_channels`; DiagonalGaussianDistribution clamps it.
    return y[:, :n], jnp.broadcast_to(jnp.clip(y[:, n : n + 1], -30.0, 20.0), y[:, :n].shape)


def _decoder_dtype(params: dict):
    require_parts(params, ("decoder",), "VAE decoding", "load the VAE's decoder parts (DECODER_PARTS)")
    return params["decoder"]["conv_in"]["conv"]["kernel"].dtype


@conv_jit(static_argnames=("cfg", "causal"))
def _decode_program(params: dict, cfg: LTX2VideoVAEConfig, z: jax.Array, timestep: jax.Array | None,
                    causal: bool) -> jax.Array:
    b = z.shape[0]
    x = jnp.transpose(z, (0, 2, 3, 4, 1)).astype(_decoder_dtype(params))
    y = _decoder(params["decoder"], cfg, x, timestep, causal).astype(_F32)
    p, c = cfg.patch_size, cfg.out_channels
    t2, h2, w2 = y.shape[1:4]
    y = y.reshape(b, t2, h2, w2, c, p, p).transpose(0, 4, 1, 2, 6, 3, 5)  # channels (c, p_w, p_h)
    return y.reshape(b, c, t2, h2 * p, w2 * p)


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def encode(params: dict, cfg: LTX2VideoVAEConfig, video: jax.Array,
           causal: bool | None = None) -> tuple[jax.Array, jax.Array]:
    """Encode a video to its latent distribution (``AutoencoderKLLTX2Video.encode(x, causal).latent_dist``, untiled).

    Args:
      params: VAE parameters (at least :data:`ENCODER_PARTS`).
      video: ``(B, in_channels, T, H, W)`` in ``[-1, 1]``; ``T = 8k + 1`` and ``H``, ``W`` multiples of 32 (the
        configuration's compressions).
      causal: the reference's ``causal``; ``causal or encoder_causal`` is used, as there.

    Returns:
      ``(mean, logvar)``, float32 ``(B, latent_channels, k + 1, H/32, W/32)``; ``logvar`` is one channel repeated,
      clamped to ``[-30, 20]``. Not normalised.

    Raises:
      ValueError: wrong rank or channel count, or a size the VAE cannot take.
    """
    if video.ndim != 5 or video.shape[1] != cfg.in_channels:
        raise ValueError(f"encode: expected video (B, {cfg.in_channels}, T, H, W) channels-first, got shape "
                         f"{tuple(video.shape)}")
    t, h, w = video.shape[2:]
    tc, sc = cfg.temporal_compression, cfg.spatial_compression
    if t < 1 or (t - 1) % tc:
        lo = (max(t, 1) - 1) // tc * tc + 1
        raise ValueError(f"encode: {t} frames; the LTX-2 VAE takes {tc}k + 1 frames: use {lo} or {lo + tc}")
    for name, n in (("height", h), ("width", w)):
        if n < sc or n % sc or n > 1 << 15:
            raise ValueError(f"encode: {name} {n} is not a positive multiple of {sc} (at most 32768)")
    return _encode_program(params, cfg, jnp.asarray(video), bool(causal) or cfg.encoder_causal)


def decoded_frames(cfg: LTX2VideoVAEConfig, num_latent_frames: int) -> int:
    """Video frames decoded from ``T`` latent frames: ``8 (T - 1) + 1`` for the releases."""
    return (num_latent_frames - 1) * cfg.temporal_compression + 1


def decode(params: dict, cfg: LTX2VideoVAEConfig, z: jax.Array, timestep: float | jax.Array | None = None,
           causal: bool | None = None, tiling: LTXVideoTiling | None = None) -> jax.Array:
    """Decode latents to video (``AutoencoderKLLTX2Video.decode(z, temb, causal).sample``), tiled as the reference.

    The reference's ``_decode``: with ``tiling.temporal`` (``use_framewise_decoding``) and more latent frames than a
    tile, ``_temporal_tiled_decode``; else with ``tiling.spatial`` (``use_tiling``) and latents larger than a tile,
    ``tiled_decode``; else one decoder call. The algorithm is the 0.9.x VAE's (``vidax.core.ltx_tiling``).

    Args:
      params: VAE parameters (at least :data:`DECODER_PARTS`); computation in their dtype, float32 accumulation.
      cfg: the configuration.
      z: latents ``(B, latent_channels, T, h, w)``, denormalised (:func:`prepare_decode_latents`); any sizes >= 1.
      timestep: required exactly when ``cfg.timestep_conditioning``: the pipelines' ``decode_timestep``, a number or
        ``(B,)``; scaled by the decoder's ``timestep_scale_multiplier``.
      causal: the reference's ``causal`` argument; it computes ``causal or decoder_causal``, so None / False give
        ``cfg.decoder_causal``.
      tiling: None (no tiling) or the settings (:class:`vidax.core.ltx_tiling.LTXVideoTiling`, the reference's
        ``enable_tiling`` arguments and defaults).

    Returns:
      float32 video ``(B, out_channels, 8 (T - 1) + 1, 32 h, 32 w)`` for the released compressions; not clamped.

    Raises:
      ValueError: wrong rank or channel count; a missing or unexpected timestep; latents larger than
        ``2**20`` latent pixels per frame; bad tiling settings.
    """
    if z.ndim != 5 or z.shape[1] != cfg.latent_channels or min(z.shape[2:]) < 1:
        raise ValueError(f"decode: expected latents (B, {cfg.latent_channels}, T>=1, h>=1, w>=1), got shape "
                         f"{tuple(z.shape)}")
    if z.shape[3] * z.shape[4] > 2**20:
        raise ValueError(f"decode: latents of {z.shape[3]}x{z.shape[4]} pixels per frame are beyond any video size")
    b = z.shape[0]
    if cfg.timestep_conditioning:
        if timestep is None:
            raise ValueError("decode: this VAE is timestep-conditioned: pass timestep=, the pipelines' decode_timestep")
        t = np.asarray(timestep, np.float32)
        if t.ndim > 1 or (t.ndim == 1 and t.shape[0] != b):
            raise ValueError(f"decode: timestep must be a number or ({b},) for a batch of {b}, got shape {t.shape}")
        timestep = jnp.asarray(np.broadcast_to(t, (b,)))
    elif timestep is not None:
        raise ValueError("decode: this VAE has no timestep conditioning (timestep_conditioning is false); pass "
                         "timestep=None (the pipeline passes None then)")
    causal = bool(causal) or cfg.decoder_causal
    q = None if tiling is None else tiling.resolve(cfg)

    def call(tile):
        return _decode_program(params, cfg, jnp.asarray(tile), timestep, causal)

    if tiling is None:
        return call(z)
    if tiling.temporal and z.shape[2] > q["latent_frames"]:
        return temporal_tiled(call, cfg, np.asarray(z), q, tiling.spatial)
    return decode_frames(call, cfg, np.asarray(z), q, tiling.spatial)


def denormalize_latents(params: dict, latents: jax.Array, scaling_factor: float = 1.0) -> jax.Array:
    """``latents * latents_std / scaling_factor + latents_mean`` per channel (``LTX2Pipeline._denormalize_latents``).

    Statistics cast to the latents' dtype, as there. ``latents``: ``(B, latent_channels, T, h, w)``.
    """
    require_parts(params, ("latents_mean", "latents_std"), "denormalize_latents", "load DECODER_PARTS")
    mean, std = (params[k].astype(latents.dtype).reshape(1, -1, 1, 1, 1) for k in ("latents_mean", "latents_std"))
    return latents * std / scaling_factor + mean


def prepare_decode_latents(params: dict, cfg: LTX2VideoVAEConfig, latents: jax.Array,
                           decode_timestep: float | list[float] = 0.0,
                           decode_noise_scale: float | list[float] | None = None,
                           noise: jax.Array | None = None) -> tuple[jax.Array, jax.Array | None]:
    """The pipeline's last step before ``vae.decode`` (``LTX2Pipeline.__call__``): decode noise, then denormalise.

    With ``cfg.timestep_conditioning``: ``latents = (1 - s) * latents + s * noise`` per batch item, ``s`` the
    ``decode_noise_scale`` (default: ``decode_timestep``), and the timestep to decode with is ``decode_timestep``;
    without it the latents are only denormalised and the timestep is None (the pipeline ignores both settings).

    Args:
      latents: normalised ``(B, latent_channels, T, h, w)`` as the transformer leaves them (unpacked).
      noise: standard normal noise of ``latents``' shape (the pipeline's ``randn_tensor``); required with timestep
        conditioning.

    Returns:
      ``(denormalised latents, timestep (B,) float32 or None)``: :func:`decode`'s ``z`` and ``timestep``.

    Raises:
      ValueError: missing noise, or noise / per-item lists of the wrong size.
    """
    b = latents.shape[0]
    timestep = None
    if cfg.timestep_conditioning:
        if noise is None or tuple(noise.shape) != tuple(latents.shape):
            raise ValueError(f"prepare_decode_latents: this VAE is timestep-conditioned: pass noise= of shape "
                             f"{tuple(latents.shape)}")
        dt = decode_timestep if isinstance(decode_timestep, (list, tuple)) else [decode_timestep] * b
        ns = dt if decode_noise_scale is None else (
            decode_noise_scale if isinstance(decode_noise_scale, (list, tuple)) else [decode_noise_scale] * b)
        if len(dt) != b or len(ns) != b:
            raise ValueError(f"prepare_decode_latents: decode_timestep / decode_noise_scale lists must have {b} items")
        s = jnp.asarray(ns, latents.dtype)[:, None, None, None, None]
        latents = (1 - s) * latents + s * noise.astype(latents.dtype)
        timestep = jnp.asarray(dt, _F32)
    return denormalize_latents(params, latents, cfg.scaling_factor), timestep
