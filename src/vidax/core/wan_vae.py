"""The Wan video VAE (diffusers ``AutoencoderKLWan``, Wan2.1 configuration) as pure JAX functions.

Shared: the Wan2.1/2.2 families and Cosmos-Predict2.5 (which uses the Wan2.1 VAE) both decode with it, so it
lives in ``core/`` (a family imports no other family).

Reference: ``diffusers.models.autoencoders.autoencoder_kl_wan`` (``AutoencoderKLWan``,
``WanEncoder3d``, ``WanDecoder3d``, ``WanResidualBlock``, ``WanResample``,
``WanAttentionBlock``, ``WanMidBlock``, ``WanCausalConv3d``, ``WanRMS_norm``).

Layout
    Public functions take and return channels-first ``(B, C, T, H, W)`` arrays, as the
    reference does. Inside the jitted chunk functions everything is channels-last
    ``(B, T, H, W, C)`` (convolutions run as ``NDHWC``/``DHWIO``).

Temporal cache
    The reference runs its causal 3D convolutions chunk by chunk (encoder: the first
    frame alone, then 4 frames at a time; decoder: one latent frame at a time) and
    keeps, per convolution, the last input frames of the previous chunk in a Python
    list indexed by a mutable counter. Here that state is an explicit pytree: a nested
    dict mirroring the parameter tree, one fixed-shape array per temporal convolution:

    * a ``kt = 3`` causal convolution: its last 2 input frames ``(B, 2, H, W, C)``
      (zeros before the first chunk, which is what the reference's zero padding means);
    * a ``downsample3d`` time convolution: the last input frame ``(B, 1, H, W, C)``;
    * an ``upsample3d`` time convolution: its last 2 input frames. On the first chunk the
      reference skips this convolution entirely (the ``"Rep"`` marker) and does *not*
      remember the first frame: the second chunk sees zeros as history. The cache after
      the first chunk is therefore zeros.

    ``cache=None`` means "first chunk" (the reference's ``feat_cache`` full of ``None``);
    every later chunk has the same cache shapes, so :func:`encode_chunk`, and the decoder's
    :func:`decode_head` and :func:`decode_tail` (which :func:`decode_chunk` composes), compile twice per
    input shape (first chunk, all others).

Precision
    Convolutions and matmuls take their inputs in the weights' dtype and accumulate in
    float32; the RMS norms compute in float32. The ``jax_default_matmul_precision``
    setting applies (tests use ``"highest"`` for fp32 parity).

Wan2.2 (``is_residual=True``, ``patch_size=2``, 48 latent channels; the TI2V-5B VAE)
    The block structure is described once by :func:`_encoder_plan` / :func:`_decoder_plan`, and
    consumed by both the parameter declaration (:func:`_declare`) and the forward functions.
    Wan2.2 has one block per resolution stage: ``WanResidualDownBlock`` (residual blocks, then the
    down-sampler, plus an ``AvgDown3D`` shortcut: channel-grouped mean over 2x2(x2) pixel(-frame)
    neighbourhoods, zero-padding time in front within the chunk) and ``WanResidualUpBlock``
    (residual blocks, an up-sampler that keeps the channel count, plus a ``DupUp3D`` shortcut that
    repeats channels into 2x2(x2) neighbourhoods and, on the first chunk, drops the frame that
    temporal up-sampling adds). Video is patchified (2x2 pixels into channels, the reference's
    ``(c, p_w, p_h)`` channel order) inside :func:`encode_chunk` and unpatchified inside
    :func:`decode_chunk`, so the encoder sees ``in_channels = 12`` and the decoder emits
    ``out_channels = 12``; 16x spatial compression in all.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint.keymap import KeyMap, Rule, conv, norm
from vidax.core import host_memory
from vidax.core.attention import attention
from vidax.core.config_values import config_values
from vidax.core.layers import causal_conv3d, conv3d, conv_jit, last_frames, linear
from vidax.core.params import VAE_ENCODER_HINT, ParamSpec, SpecTree, require_parts, unflatten

# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------

_WAN21_LATENTS_MEAN = (
    -0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
    0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921,
)  # fmt: skip
_WAN21_LATENTS_STD = (
    2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
    3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160,
)  # fmt: skip

# Wan2.2 (48 latent channels): Wan2_2_VAE.mean / std in the Wan2.2 repository's wan/modules/vae2_2.py
# (diffusers' Wan2.2 vae/config.json latents_mean / latents_std hold the same values).
_WAN22_LATENTS_MEAN = (
    -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557, -0.1382, 0.0542, 0.2813, 0.0891,
    0.1570, -0.0098, 0.0375, -0.1825, -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502,
    -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.1230, -0.0313, -0.1649, 0.0117, 0.0723,
    -0.2839, -0.2083, -0.0520, 0.3748, 0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667,
)  # fmt: skip
_WAN22_LATENTS_STD = (
    0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013, 0.8158, 1.0344, 0.5894, 1.0901,
    0.6885, 0.6165, 0.8454, 0.4978, 0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
    0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093, 0.5709, 0.6065, 0.6415, 0.4944,
    0.5726, 1.2042, 0.5458, 1.6887, 0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744,
)  # fmt: skip

# Config keys that are read but do not change the computation done here.
_IGNORED_CONFIG_KEYS = {"scale_factor_temporal", "scale_factor_spatial"}


@dataclass(frozen=True)
class WanVAEConfig:
    """Configuration of ``AutoencoderKLWan`` (the keys of a diffusers ``vae/config.json``).

    Hashable (all fields are scalars or tuples), so it is passed to the jitted chunk
    functions as a static argument. Defaults are the reference's defaults (Wan2.1).

    Attributes:
      base_dim: encoder base channel count (96 for Wan2.1).
      decoder_base_dim: decoder base channel count; ``None`` = ``base_dim``.
      z_dim: latent channels (16).
      dim_mult: channel multipliers per resolution stage.
      num_res_blocks: residual blocks per encoder stage (the decoder uses one more).
      attn_scales: must be empty (as in every released Wan VAE). The reference would insert
        attention blocks into the encoder for these scales, but its own encoder then fails
        (``WanAttentionBlock.forward`` takes no cache arguments), so they are rejected here.
      temperal_downsample: per downsampling stage, whether time is halved too (the
        reference's spelling). The decoder uses it reversed.
      dropout: training only; ignored.
      latents_mean, latents_std: per-channel latent statistics (``z_dim`` entries each).
      is_residual: Wan2.2 residual down/up blocks (see the module docstring).
      patch_size: Wan2.2 pixel patchify (2), or None.
      in_channels, out_channels: channels of the encoder input / decoder output: the video's 3,
        times ``patch_size ** 2`` when patchified (12 for Wan2.2).
    """

    base_dim: int = 96
    decoder_base_dim: int | None = None
    z_dim: int = 16
    dim_mult: tuple[int, ...] = (1, 2, 4, 4)
    num_res_blocks: int = 2
    attn_scales: tuple[float, ...] = ()
    temperal_downsample: tuple[bool, ...] = (False, True, True)
    dropout: float = 0.0
    latents_mean: tuple[float, ...] = _WAN21_LATENTS_MEAN
    latents_std: tuple[float, ...] = _WAN21_LATENTS_STD
    is_residual: bool = False
    in_channels: int = 3
    out_channels: int = 3
    patch_size: int | None = None

    def __post_init__(self):
        # Normalise list-valued fields to tuples so the config stays hashable.
        for name in ("dim_mult", "attn_scales", "temperal_downsample", "latents_mean", "latents_std"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "temperal_downsample", tuple(bool(t) for t in self.temperal_downsample))
        object.__setattr__(self, "latents_mean", tuple(float(v) for v in self.latents_mean))
        object.__setattr__(self, "latents_std", tuple(float(v) for v in self.latents_std))
        object.__setattr__(self, "attn_scales", tuple(float(v) for v in self.attn_scales))
        object.__setattr__(self, "is_residual", bool(self.is_residual))
        if self.patch_size is not None:
            if int(self.patch_size) != self.patch_size or self.patch_size < 1:
                raise ValueError(f"WanVAEConfig: patch_size must be a positive integer or null, got {self.patch_size!r}")
            object.__setattr__(self, "patch_size", int(self.patch_size))
            p2 = self.patch_size ** 2
            if self.in_channels % p2 or self.out_channels % p2:
                raise ValueError(
                    f"WanVAEConfig: with patch_size={self.patch_size}, in_channels ({self.in_channels}) and out_channels "
                    f"({self.out_channels}) must be multiples of {p2} (video channels x patch_size^2)"
                )
        if self.attn_scales:
            raise ValueError(
                f"WanVAEConfig: attn_scales={list(self.attn_scales)} is not supported (only [] is; the diffusers "
                "reference cannot run an encoder with attention blocks either)"
            )
        if not self.dim_mult or any(int(m) <= 0 for m in self.dim_mult):
            raise ValueError(f"WanVAEConfig: dim_mult must be a non-empty list of positive ints, got {list(self.dim_mult)}")
        if len(self.temperal_downsample) != len(self.dim_mult) - 1:
            raise ValueError(
                f"WanVAEConfig: temperal_downsample has {len(self.temperal_downsample)} entries, expected "
                f"len(dim_mult) - 1 = {len(self.dim_mult) - 1} (one per downsampling stage)"
            )
        if self.base_dim <= 0 or self.z_dim <= 0 or self.num_res_blocks <= 0:
            raise ValueError(
                f"WanVAEConfig: base_dim, z_dim and num_res_blocks must be positive, got "
                f"{self.base_dim}, {self.z_dim}, {self.num_res_blocks}"
            )
        if len(self.latents_mean) != self.z_dim or len(self.latents_std) != self.z_dim:
            raise ValueError(
                f"WanVAEConfig: latents_mean and latents_std need z_dim={self.z_dim} entries each, got "
                f"{len(self.latents_mean)} and {len(self.latents_std)}"
            )
        if any(s == 0 for s in self.latents_std):
            raise ValueError("WanVAEConfig: latents_std has a zero entry")
        dec = self.decoder_dim
        if not self.is_residual and (self.dim_mult[-1] * dec % 2 or any(dec * m % 2 for m in self.dim_mult)):
            raise ValueError(f"WanVAEConfig: decoder channel counts must be even, got base {dec}, dim_mult {self.dim_mult}")

    @classmethod
    def from_dict(cls, config: dict) -> WanVAEConfig:
        """Build from a diffusers ``vae/config.json`` dict.

        Keys starting with ``_`` (``_class_name``, ``_diffusers_version``) and
        ``scale_factor_temporal`` / ``scale_factor_spatial`` (derived values) are ignored.

        Raises:
          ValueError: ``_class_name`` is not ``AutoencoderKLWan``, an unknown key is present,
            or a value is unsupported (``is_residual=True``, a ``patch_size``) or inconsistent.
        """
        class_name = config.get("_class_name")
        if class_name is not None and class_name != "AutoencoderKLWan":
            raise ValueError(f"WanVAEConfig: config is for {class_name!r}, not 'AutoencoderKLWan'")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(k for k in config if not k.startswith("_") and k not in fields and k not in _IGNORED_CONFIG_KEYS)
        if unknown:
            raise ValueError(f"WanVAEConfig: unknown config keys {unknown}; this VAE variant is not supported")
        return cls(**config_values(cls, config, "VAE config"))

    @property
    def decoder_dim(self) -> int:
        """Decoder base channel count (``decoder_base_dim`` or ``base_dim``)."""
        return self.base_dim if self.decoder_base_dim is None else self.decoder_base_dim

    @property
    def temporal_compression(self) -> int:
        """Video frames per latent frame after the first (4 for Wan2.1)."""
        return 2 ** sum(self.temperal_downsample)

    @property
    def spatial_compression(self) -> int:
        """Pixels per latent pixel along H and W: 8 for Wan2.1, 16 for Wan2.2 (8 x the 2x2 patchify)."""
        return 2 ** (len(self.dim_mult) - 1) * (self.patch_size or 1)

    @property
    def video_channels(self) -> int:
        """Channels of the video itself (3): ``in_channels / patch_size^2``."""
        return self.in_channels // (self.patch_size or 1) ** 2


#: The Wan2.1 VAE as the original release hard-codes it (``wan/modules/vae.py``: ``_video_vae``
#: with ``dim=96, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2, attn_scales=[],
#: temperal_downsample=[False, True, True]``; ``WanVAE.mean`` / ``std`` as latent statistics).
#: ``Wan2.1_VAE.pth`` comes with no config file; these are also diffusers' defaults.
WAN21_VAE_ORIGINAL = WanVAEConfig(
    base_dim=96, z_dim=16, dim_mult=(1, 2, 4, 4), num_res_blocks=2, attn_scales=(),
    temperal_downsample=(False, True, True), latents_mean=_WAN21_LATENTS_MEAN, latents_std=_WAN21_LATENTS_STD,
)


#: The Wan2.2 VAE as the TI2V-5B release hard-codes it (``wan/modules/vae2_2.py``: ``Wan2_2_VAE`` with
#: ``z_dim=48, c_dim=160``, ``WanVAE_``'s ``dec_dim=256``, ``dim_mult=[1, 2, 4, 4], num_res_blocks=2,
#: temperal_downsample=[False, True, True]``, pixels patchified 2x2 into 12 channels); ``Wan2.2_VAE.pth``
#: comes with no config file.
WAN22_VAE_ORIGINAL = WanVAEConfig(
    base_dim=160, decoder_base_dim=256, z_dim=48, dim_mult=(1, 2, 4, 4), num_res_blocks=2, attn_scales=(),
    temperal_downsample=(False, True, True), latents_mean=_WAN22_LATENTS_MEAN, latents_std=_WAN22_LATENTS_STD,
    is_residual=True, in_channels=12, out_channels=12, patch_size=2,
)


# ---------------------------------------------------------------------------------------------
# Architecture plan: shared by the parameter declaration and the forward functions
# ---------------------------------------------------------------------------------------------


def _encoder_plan(cfg: WanVAEConfig) -> tuple[list[tuple[str, int, int]], int]:
    """``encoder.down_blocks`` as ``[(kind, in_dim, out_dim)]`` and the mid-block width.

    kinds: ``"res"`` (WanResidualBlock), ``"down2d"`` / ``"down3d"`` (WanResample). (The
    reference would add ``WanAttentionBlock`` s for ``attn_scales``; rejected by the config.)
    Wan2.2 (``is_residual``): one ``("resdown", in_dim, out_dim, mode)`` per stage
    (``WanResidualDownBlock``; ``mode`` ``"down3d"`` / ``"down2d"`` / None for the last stage).
    """
    dims = [cfg.base_dim * m for m in (1, *cfg.dim_mult)]
    plan: list[tuple] = []
    last = len(cfg.dim_mult) - 1
    if cfg.is_residual:
        for i in range(len(cfg.dim_mult)):
            mode = None if i == last else ("down3d" if cfg.temperal_downsample[i] else "down2d")
            plan.append(("resdown", dims[i], dims[i + 1], mode))
        return plan, dims[-1]
    for i in range(len(cfg.dim_mult)):
        cin, cout = dims[i], dims[i + 1]
        for _ in range(cfg.num_res_blocks):
            plan.append(("res", cin, cout))
            cin = cout
        if i != last:
            plan.append(("down3d" if cfg.temperal_downsample[i] else "down2d", cout, cout))
    return plan, dims[-1]


def _decoder_plan(cfg: WanVAEConfig) -> tuple[list[tuple[int, int, int, str | None]], int]:
    """``decoder.up_blocks`` as ``[(in_dim, out_dim, n_resnets, upsample_mode)]`` and the mid width.

    upsample_mode: ``"up3d"``, ``"up2d"`` or ``None``. In Wan2.1 an upsampler halves the
    channels, so every stage after the first starts from half the previous width; in Wan2.2
    (``is_residual``) it keeps them, and each stage with an upsampler has a ``DupUp3D`` shortcut.
    """
    dims = [cfg.decoder_dim * m for m in (cfg.dim_mult[-1], *cfg.dim_mult[::-1])]
    temporal_up = cfg.temperal_downsample[::-1]
    last = len(cfg.dim_mult) - 1
    plan = []
    for i in range(len(cfg.dim_mult)):
        cin = dims[i] if i == 0 or cfg.is_residual else dims[i] // 2
        mode = None if i == last else ("up3d" if temporal_up[i] else "up2d")
        plan.append((cin, dims[i + 1], cfg.num_res_blocks + 1, mode))
    return plan, dims[0]


# ---------------------------------------------------------------------------------------------
# Parameter declaration and the key maps (one walk produces the specs and both layouts' rules)
# ---------------------------------------------------------------------------------------------


class _Declaration:
    """Collects parameter specs (paths mirror the diffusers module names) and key-map rules.

    Every declaring method takes the diffusers module name ``key`` (which also names the
    parameter path) and the same module's name ``orig`` in the original Wan release
    (``wan/modules/vae.py``, ``WanVAE_``); ``rules`` and ``original_rules`` fill the same paths.
    """

    def __init__(self):
        self.specs: dict[str, ParamSpec] = {}
        self.rules: list[Rule] = []
        self.original_rules: list[Rule] = []

    def conv3d(self, key: str, orig: str, cin: int, cout: int, kernel: tuple[int, int, int]):
        path = key.replace(".", "/")
        self.specs[f"{path}/kernel"] = ParamSpec((*kernel, cin, cout))
        self.specs[f"{path}/bias"] = ParamSpec((cout,))
        self.rules += conv(key, path, dims=3)
        self.original_rules += conv(orig, path, dims=3)

    def conv2d(self, key: str, orig: str, cin: int, cout: int, k: int):
        path = key.replace(".", "/")
        self.specs[f"{path}/kernel"] = ParamSpec((k, k, cin, cout))
        self.specs[f"{path}/bias"] = ParamSpec((cout,))
        self.rules += conv(key, path, dims=2)
        self.original_rules += conv(orig, path, dims=2)

    def rms_gamma(self, key: str, orig: str, dim: int, images: bool):
        # WanRMS_norm.gamma is stored with trailing broadcast dims: (C, 1, 1) for images, (C, 1, 1, 1) for video
        # (the same in the original RMS_norm; its bias is the constant 0., not a tensor).
        path = key.replace(".", "/")
        self.specs[f"{path}/scale"] = ParamSpec((dim, 1, 1) if images else (dim, 1, 1, 1), fp32=True)
        self.rules += norm(key, path, bias=False, weight_name="gamma")
        self.original_rules += norm(orig, path, bias=False, weight_name="gamma")

    def res_block(self, key: str, orig: str, cin: int, cout: int):
        # Original ResidualBlock.residual = Sequential(RMS_norm, SiLU, conv, RMS_norm, SiLU, Dropout, conv).
        self.rms_gamma(f"{key}.norm1", f"{orig}.residual.0", cin, images=False)
        self.conv3d(f"{key}.conv1", f"{orig}.residual.2", cin, cout, (3, 3, 3))
        self.rms_gamma(f"{key}.norm2", f"{orig}.residual.3", cout, images=False)
        self.conv3d(f"{key}.conv2", f"{orig}.residual.6", cout, cout, (3, 3, 3))
        if cin != cout:
            self.conv3d(f"{key}.conv_shortcut", f"{orig}.shortcut", cin, cout, (1, 1, 1))

    def attn_block(self, key: str, orig: str, dim: int):
        self.rms_gamma(f"{key}.norm", f"{orig}.norm", dim, images=True)
        self.conv2d(f"{key}.to_qkv", f"{orig}.to_qkv", dim, 3 * dim, 1)
        self.conv2d(f"{key}.proj", f"{orig}.proj", dim, dim, 1)

    def resample(self, key: str, orig: str, dim: int, mode: str, up_out: int | None = None):
        if mode in ("up2d", "up3d"):
            # Wan2.1 upsamplers halve the channels; Wan2.2's keep them (upsample_out_dim=out_dim).
            self.conv2d(f"{key}.resample.1", f"{orig}.resample.1", dim, dim // 2 if up_out is None else up_out, 3)
            if mode == "up3d":
                self.conv3d(f"{key}.time_conv", f"{orig}.time_conv", dim, 2 * dim, (3, 1, 1))
        elif mode in ("down2d", "down3d"):
            self.conv2d(f"{key}.resample.1", f"{orig}.resample.1", dim, dim, 3)
            if mode == "down3d":
                self.conv3d(f"{key}.time_conv", f"{orig}.time_conv", dim, dim, (3, 1, 1))
        else:
            raise ValueError(f"unknown resample mode {mode!r}")

    def mid_block(self, key: str, orig: str, dim: int):
        # Original: middle = Sequential(ResidualBlock, AttentionBlock, ResidualBlock).
        self.res_block(f"{key}.resnets.0", f"{orig}.0", dim, dim)
        self.attn_block(f"{key}.attentions.0", f"{orig}.1", dim)
        self.res_block(f"{key}.resnets.1", f"{orig}.2", dim, dim)


@functools.lru_cache(maxsize=16)
def _declare(cfg: WanVAEConfig) -> _Declaration:
    d = _Declaration()
    enc_plan, enc_mid = _encoder_plan(cfg)
    d.conv3d("encoder.conv_in", "encoder.conv1", cfg.in_channels, cfg.base_dim, (3, 3, 3))
    for j, (kind, cin, cout, *rest) in enumerate(enc_plan):
        # The original encoder.downsamples is the same flat Sequential as diffusers' down_blocks.
        key, orig = f"encoder.down_blocks.{j}", f"encoder.downsamples.{j}"
        if kind == "resdown":
            # Wan2.2 (wan/modules/vae2_2.py): Down_ResidualBlock J holds one Sequential `downsamples`: the
            # residual blocks, then the resample.
            for r in range(cfg.num_res_blocks):
                d.res_block(f"{key}.resnets.{r}", f"{orig}.downsamples.{r}", cin if r == 0 else cout, cout)
            if rest[0] is not None:
                d.resample(f"{key}.downsampler", f"{orig}.downsamples.{cfg.num_res_blocks}", cout, rest[0])
        elif kind == "res":
            d.res_block(key, orig, cin, cout)
        else:
            d.resample(key, orig, cout, kind)
    d.mid_block("encoder.mid_block", "encoder.middle", enc_mid)
    d.rms_gamma("encoder.norm_out", "encoder.head.0", enc_mid, images=False)
    d.conv3d("encoder.conv_out", "encoder.head.2", enc_mid, 2 * cfg.z_dim, (3, 3, 3))
    d.conv3d("quant_conv", "conv1", 2 * cfg.z_dim, 2 * cfg.z_dim, (1, 1, 1))
    d.conv3d("post_quant_conv", "conv2", cfg.z_dim, cfg.z_dim, (1, 1, 1))
    dec_plan, dec_mid = _decoder_plan(cfg)
    d.conv3d("decoder.conv_in", "decoder.conv1", cfg.z_dim, dec_mid, (3, 3, 3))
    d.mid_block("decoder.mid_block", "decoder.middle", dec_mid)
    flat = 0  # the original decoder.upsamples is one flat Sequential: per stage its resnets, then its upsampler
    for i, (cin, cout, n_res, mode) in enumerate(dec_plan):
        if cfg.is_residual:  # Wan2.2 WanResidualUpBlock: resnets, then .upsampler (channels kept)
            # Original: Up_ResidualBlock I holds one Sequential `upsamples`: residual blocks, then the resample.
            key, orig = f"decoder.up_blocks.{i}", f"decoder.upsamples.{i}.upsamples"
            for r in range(n_res):
                d.res_block(f"{key}.resnets.{r}", f"{orig}.{r}", cin if r == 0 else cout, cout)
            if mode is not None:
                d.resample(f"{key}.upsampler", f"{orig}.{n_res}", cout, mode, up_out=cout)
            continue
        for r in range(n_res):
            d.res_block(f"decoder.up_blocks.{i}.resnets.{r}", f"decoder.upsamples.{flat}", cin if r == 0 else cout, cout)
            flat += 1
        if mode is not None:
            d.resample(f"decoder.up_blocks.{i}.upsamplers.0", f"decoder.upsamples.{flat}", cout, mode)
            flat += 1
    out_dim = dec_plan[-1][1]
    d.rms_gamma("decoder.norm_out", "decoder.head.0", out_dim, images=False)
    d.conv3d("decoder.conv_out", "decoder.head.2", out_dim, cfg.out_channels, (3, 3, 3))
    return d


def vae_specs(cfg: WanVAEConfig) -> SpecTree:
    """The VAE's spec tree (encoder, decoder, ``quant_conv``, ``post_quant_conv``).

    Paths mirror the diffusers module names with ``/`` for ``.`` (e.g.
    ``decoder/up_blocks/0/resnets/1/conv1/kernel``). Convolution kernels are
    channels-last (``(kt, kh, kw, in, out)`` / ``(kh, kw, in, out)``); RMS-norm gammas
    keep the reference's broadcast shape ``(C, 1, 1, 1)`` (``(C, 1, 1)`` in attention)
    and are pinned to float32.
    """
    return unflatten(dict(_declare(cfg).specs))


def vae_keymap(cfg: WanVAEConfig) -> KeyMap:
    """Key map from a diffusers ``AutoencoderKLWan`` state dict (``save_pretrained`` layout).

    Strict: with :func:`~vidax.checkpoint.loader.load_params` every checkpoint key fills
    exactly one slot of :func:`vae_specs` (the model has no buffers, nothing is ignored).
    """
    return KeyMap(rules=list(_declare(cfg).rules))


def vae_keymap_original(cfg: WanVAEConfig) -> KeyMap:
    """Key map from an original Wan VAE file (``Wan2.1_VAE.pth`` / ``Wan2.2_VAE.pth``, a ``WanVAE_`` state dict).

    Same parameter paths and shapes as :func:`vae_keymap` (both come from one walk of the
    architecture), so it fills :func:`vae_specs` exactly. Renames (the reference is
    ``wan/modules/vae.py``; they agree with diffusers' ``convert_wan_vae_to_diffusers`` for
    the released configuration):

    * ``encoder.conv1`` / ``decoder.conv1`` -> ``*.conv_in``; top-level ``conv1`` ->
      ``quant_conv``, ``conv2`` -> ``post_quant_conv``;
    * ``encoder.downsamples.J`` -> ``encoder.down_blocks.J`` (same flat index);
    * ``decoder.upsamples.K`` (one flat list: per stage ``num_res_blocks + 1`` residual blocks,
      then the upsampler) -> ``decoder.up_blocks.I.resnets.R`` / ``.upsamplers.0``; for the
      released config K = 0-2, 3, 4-6, 7, 8-10, 11, 12-14;
    * ``*.middle.0/1/2`` -> ``*.mid_block.resnets.0`` / ``attentions.0`` / ``resnets.1``;
    * ``*.head.0`` (RMS norm) / ``*.head.2`` (conv) -> ``*.norm_out`` / ``*.conv_out``;
    * in a residual block ``residual.0`` / ``residual.2`` / ``residual.3`` / ``residual.6`` /
      ``shortcut`` -> ``norm1`` / ``conv1`` / ``norm2`` / ``conv2`` / ``conv_shortcut``.

    Wan2.2 (``is_residual``; ``wan/modules/vae2_2.py``, as diffusers' ``convert_vae_22``): the same
    top-level, middle and head names; ``encoder.downsamples.J.downsamples.R`` -> ``encoder.down_blocks.J.
    resnets.R`` for the residual blocks and ``.downsamples.{num_res_blocks}`` -> ``.downsampler``;
    ``decoder.upsamples.I.upsamples.R`` -> ``decoder.up_blocks.I.resnets.R`` and
    ``.upsamples.{num_res_blocks + 1}`` -> ``.upsampler``. The ``AvgDown3D`` / ``DupUp3D`` shortcuts
    have no parameters.

    No tensor is reshaped: RMS-norm ``gamma`` is ``(C, 1, 1, 1)`` (``(C, 1, 1)`` in attention
    blocks) in both layouts.
    """
    return KeyMap(rules=list(_declare(cfg).original_rules))


def vae_config_from_original_shapes(shapes: dict[str, tuple[int, ...]]) -> WanVAEConfig:
    """The :class:`WanVAEConfig` an original-layout VAE state dict was built with, from its tensor shapes.

    The original releases store no VAE config: ``_video_vae`` in the Wan repositories hard-codes
    it (:data:`WAN21_VAE_ORIGINAL` for ``Wan2.1_VAE.pth``, :data:`WAN22_VAE_ORIGINAL` for
    ``Wan2.2_VAE.pth``), so the settings are read back from the tensors: ``base_dim`` and
    ``z_dim`` from ``encoder.conv1`` / ``conv2``; the stages, ``num_res_blocks``, ``dim_mult`` and
    ``temperal_downsample`` from the entries of ``encoder.downsamples`` (residual blocks have
    ``residual.*``, resamples ``resample.1`` and, when temporal, ``time_conv``). A Wan2.2 file is
    recognised by its nested ``encoder.downsamples.J.downsamples.R`` blocks; its decoder width
    comes from ``decoder.conv1`` and its pixel patch from ``encoder.conv1``'s input channels
    (12 = 3 x 2 x 2). Latent statistics are the hard-coded ones of the release (``WanVAE.mean`` /
    ``std``; ``Wan2_2_VAE.mean`` / ``std``). For the released files this gives exactly those two
    configurations; loading then checks every tensor strictly against them.

    Args:
      shapes: ``{key: shape}`` of the state dict (PyTorch layout).

    Raises:
      CheckpointError: the keys are not an original Wan VAE (naming what was looked for), or
        ``z_dim`` is not the release's (16 for Wan2.1, 48 for Wan2.2: the only sizes the
        hard-coded latent statistics fit).
    """
    from vidax.checkpoint.errors import CheckpointError

    def need(key: str) -> tuple[int, ...]:
        if key not in shapes:
            raise CheckpointError(
                f"not an original-layout Wan VAE state dict: tensor {key!r} is missing "
                "(expected keys such as encoder.conv1.weight, encoder.downsamples.0.residual.0.gamma, conv2.weight)"
            )
        return tuple(shapes[key])

    wan22 = "encoder.downsamples.0.downsamples.0.residual.0.gamma" in shapes
    release = WAN22_VAE_ORIGINAL if wan22 else WAN21_VAE_ORIGINAL
    name = "Wan2.2" if wan22 else "Wan2.1"
    base_dim, in_channels = need("encoder.conv1.weight")[:2]
    z_dim = need("conv2.weight")[0]
    if z_dim != release.z_dim:
        raise CheckpointError(
            f"original {name} VAE: conv2.weight says z_dim={z_dim}, but the release's latent statistics "
            f"(hard-coded in the Wan repository) are for z_dim={release.z_dim}"
        )
    out_channels = need("decoder.head.2.weight")[0]
    if wan22:
        stages = 1 + max(int(k.split(".")[2]) for k in shapes if k.startswith("encoder.downsamples."))
        n_res = sum(1 for k in shapes if k.startswith("encoder.downsamples.0.downsamples.") and k.endswith(".residual.0.gamma"))
        dim_mult = [need(f"encoder.downsamples.{i}.downsamples.{n_res - 1}.residual.6.weight")[0] // base_dim
                    for i in range(stages)]
        temporal = [f"encoder.downsamples.{i}.downsamples.{n_res}.time_conv.weight" in shapes for i in range(stages - 1)]
        patch = round(math.sqrt(in_channels // 3))
        return dataclasses.replace(
            release, base_dim=base_dim, decoder_base_dim=need("decoder.conv1.weight")[0] // dim_mult[-1],
            dim_mult=tuple(dim_mult), num_res_blocks=n_res, temperal_downsample=tuple(temporal),
            in_channels=in_channels, out_channels=out_channels, patch_size=patch if patch > 1 else None,
        )
    entries: dict[int, str] = {}
    for key in shapes:
        if key.startswith("encoder.downsamples."):
            j = int(key.split(".")[2])
            kind = "res" if ".residual." in key or ".shortcut." in key else "resample"
            entries[j] = "res" if entries.get(j) == "res" or kind == "res" else "resample"
    if not entries or sorted(entries) != list(range(len(entries))):
        raise CheckpointError(f"not an original-layout Wan2.1 VAE state dict: encoder.downsamples indices {sorted(entries)}")
    n_resample = sum(1 for k in entries.values() if k == "resample")
    stages = n_resample + 1
    n_res = (len(entries) - n_resample) // stages
    if n_res < 1 or n_res * stages + n_resample != len(entries):
        raise CheckpointError(
            f"original Wan2.1 VAE: encoder.downsamples has {len(entries)} entries with {n_resample} resamples, "
            "which is not stages x residual blocks + resamples"
        )
    dim_mult, temporal = [], []
    j = 0
    for stage in range(stages):
        out = need(f"encoder.downsamples.{j + n_res - 1}.residual.6.weight")[0]
        if out % base_dim:
            raise CheckpointError(f"original Wan2.1 VAE: stage {stage} width {out} is not a multiple of base {base_dim}")
        dim_mult.append(out // base_dim)
        j += n_res
        if stage != stages - 1:
            temporal.append(f"encoder.downsamples.{j}.time_conv.weight" in shapes)
            j += 1
    return dataclasses.replace(
        release, base_dim=base_dim, z_dim=z_dim, dim_mult=tuple(dim_mult), num_res_blocks=n_res,
        temperal_downsample=tuple(temporal), in_channels=in_channels, out_channels=out_channels,
    )


def load_vae(path: str | os.PathLike, dtype: Any = np.float32) -> tuple[WanVAEConfig, dict]:
    """Load a diffusers ``vae`` folder (``config.json`` + safetensors) into ``(cfg, params)``.

    Raises:
      ValueError: unsupported config (see :meth:`WanVAEConfig.from_dict`).
      CheckpointError: missing / unexpected / mismatched tensors (one message listing all).
    """
    from vidax.checkpoint.loader import load_params
    from vidax.checkpoint.safetensors_io import CheckpointReader

    path = Path(path)
    cfg = WanVAEConfig.from_dict(json.loads((path / "config.json").read_text()))
    params = load_params(CheckpointReader(path), vae_keymap(cfg), vae_specs(cfg), dtype, source=str(path))
    return cfg, params


# ---------------------------------------------------------------------------------------------
# Building blocks (channels-last, pure)
# ---------------------------------------------------------------------------------------------


def _causal_conv(p: dict, x: jax.Array, cache: jax.Array | None) -> tuple[jax.Array, jax.Array | None]:
    """``WanCausalConv3d`` (stride 1, "same" spatial padding, causal in time) with its cache.

    The previous chunk's last ``kt - 1`` input frames (zeros before the first chunk) are
    prepended; the new cache is the last ``kt - 1`` frames of that concatenation, which is
    exactly what the reference keeps (including its one-frame-chunk special case).
    """
    kt, kh, kw = p["kernel"].shape[:3]
    spatial = ((kh // 2, kh // 2), (kw // 2, kw // 2))
    if kt == 1:
        return conv3d(p, x, padding=((0, 0), *spatial)), None
    hist = kt - 1
    if cache is None:  # the first chunk: causal zero padding (no zero cache: XLA would constant-fold it)
        y = conv3d(p, x, padding=((hist, 0), *spatial))
        t = x.shape[1]
        if t >= hist:
            return y, x[:, t - hist:]
        return y, jnp.concatenate([jnp.zeros((x.shape[0], hist - t, *x.shape[2:]), x.dtype), x], axis=1)
    return causal_conv3d(p, x, cache, spatial)


def _rms_norm(p: dict, x: jax.Array) -> jax.Array:
    """``WanRMS_norm``: ``x / max(||x||_2, 1e-12) * sqrt(C) * gamma`` over channels, in float32."""
    xf = x.astype(jnp.float32)
    n = jnp.sqrt(jnp.sum(jnp.square(xf), axis=-1, keepdims=True))
    gamma = p["scale"].reshape(-1).astype(jnp.float32)
    y = xf / jnp.maximum(n, 1e-12) * math.sqrt(x.shape[-1]) * gamma
    return y.astype(x.dtype)


def _get(cache: dict | None, *keys: str):
    for k in keys:
        if cache is None:
            return None
        cache = cache.get(k)
    return cache


def _res_block(p: dict, x: jax.Array, cache: dict | None) -> tuple[jax.Array, dict]:
    """``WanResidualBlock``: norm-SiLU-conv twice plus a (1x1x1 conv) shortcut."""
    h = conv3d(p["conv_shortcut"], x) if "conv_shortcut" in p else x
    y = jax.nn.silu(_rms_norm(p["norm1"], x))
    y, c1 = _causal_conv(p["conv1"], y, _get(cache, "conv1"))
    y = jax.nn.silu(_rms_norm(p["norm2"], y))
    y, c2 = _causal_conv(p["conv2"], y, _get(cache, "conv2"))
    return y + h, {"conv1": c1, "conv2": c2}


def _attn_block(p: dict, x: jax.Array) -> jax.Array:
    """``WanAttentionBlock``: single-head self-attention over the ``H*W`` positions of each frame."""
    b, t, h, w, c = x.shape
    y = _rms_norm(p["norm"], x)
    qkv = p["to_qkv"]
    qkv = linear({"kernel": qkv["kernel"].reshape(c, 3 * c), "bias": qkv["bias"]}, y)
    qkv = qkv.reshape(b * t, h * w, 1, 3 * c)
    q, k, v = jnp.split(qkv, 3, axis=-1)
    o = attention(q, k, v).reshape(b, t, h, w, c)
    proj = p["proj"]
    o = linear({"kernel": proj["kernel"].reshape(c, c), "bias": proj["bias"]}, o)
    return o + x


def _mid_block(p: dict, x: jax.Array, cache: dict | None) -> tuple[jax.Array, dict]:
    """``WanMidBlock`` (one attention layer): res, attn, res."""
    x, c0 = _res_block(p["resnets"]["0"], x, _get(cache, "resnets", "0"))
    x = _attn_block(p["attentions"]["0"], x)
    x, c1 = _res_block(p["resnets"]["1"], x, _get(cache, "resnets", "1"))
    return x, {"resnets": {"0": c0, "1": c1}}


def _upsample2d(p: dict, x: jax.Array) -> jax.Array:
    # nearest-exact x2 == repeat each pixel twice, then a 3x3 conv (padding 1).
    x = jnp.repeat(jnp.repeat(x, 2, axis=2), 2, axis=3)
    return conv3d(p, x, padding=((0, 0), (1, 1), (1, 1)))


def _downsample2d(p: dict, x: jax.Array) -> jax.Array:
    # ZeroPad2d((0, 1, 0, 1)) (right and bottom only), then a 3x3 conv with stride 2.
    return conv3d(p, x, strides=(1, 2, 2), padding=((0, 0), (0, 1), (0, 1)))


def _resample(p: dict, x: jax.Array, mode: str, cache: dict | None, first: bool) -> tuple[jax.Array, dict | None]:
    """``WanResample`` in ``mode``; returns ``(y, new_cache)`` (``None``: no temporal state)."""
    if mode == "up2d":
        return _upsample2d(p["resample"]["1"], x), None
    if mode == "up3d":
        if first:
            # Reference: feat_cache[idx] = "Rep"; no time conv, no frame remembered (zeros history next time).
            b, _, h, w, c = x.shape
            new = jnp.zeros((b, 2, h, w, c), x.dtype)
        else:
            y, new = _causal_conv(p["time_conv"], x, _get(cache, "time_conv"))
            b, t, h, w, c2 = y.shape
            # Channels [0:C] are the even output frames, [C:2C] the odd ones.
            x = y.reshape(b, t, h, w, 2, c2 // 2).transpose(0, 1, 4, 2, 3, 5).reshape(b, 2 * t, h, w, c2 // 2)
        return _upsample2d(p["resample"]["1"], x), {"time_conv": new}
    if mode == "down2d":
        return _downsample2d(p["resample"]["1"], x), None
    if mode == "down3d":
        x = _downsample2d(p["resample"]["1"], x)
        if first:
            return x, {"time_conv": x[:, -1:]}
        # Reference: time_conv(cat(last cached frame, x)): kernel 3, stride 2, no padding.
        xp = jnp.concatenate([_get(cache, "time_conv").astype(x.dtype), x], axis=1)
        return conv3d(p["time_conv"], xp, strides=(2, 1, 1)), {"time_conv": last_frames(xp, 1)}
    raise ValueError(f"unknown resample mode {mode!r}")


def _avg_down(x: jax.Array, cout: int, factor_t: int, factor_s: int) -> jax.Array:
    """``AvgDown3D`` (Wan2.2 encoder shortcut), channels-last ``(B, T, H, W, C)``.

    Time is zero-padded in front to a multiple of ``factor_t`` (within the chunk, as the reference);
    each ``factor_t x factor_s x factor_s`` neighbourhood goes into channels (index
    ``c * f + (t * fs + h) * fs + w``), and consecutive groups of ``C * f / cout`` are averaged.
    """
    b, t, h, w, c = x.shape
    pad = (factor_t - t % factor_t) % factor_t
    if pad:
        x = jnp.concatenate([jnp.zeros((b, pad, h, w, c), x.dtype), x], axis=1)
        t += pad
    ft, fs = factor_t, factor_s
    x = x.reshape(b, t // ft, ft, h // fs, fs, w // fs, fs, c).transpose(0, 1, 3, 5, 7, 2, 4, 6)
    x = x.reshape(b, t // ft, h // fs, w // fs, cout, c * ft * fs * fs // cout)
    return jnp.mean(x.astype(jnp.float32), axis=-1).astype(x.dtype)


def _dup_up(x: jax.Array, cout: int, factor_t: int, factor_s: int, first: bool) -> jax.Array:
    """``DupUp3D`` (Wan2.2 decoder shortcut), channels-last; the inverse arrangement of :func:`_avg_down`.

    Channels are repeated (``repeat_interleave``) to ``cout * f`` and unfolded into
    ``factor_t x factor_s x factor_s`` neighbourhoods; on the first chunk the first ``factor_t - 1``
    frames are dropped (the reference's ``first_chunk``).
    """
    b, t, h, w, c = x.shape
    ft, fs = factor_t, factor_s
    x = jnp.repeat(x, cout * ft * fs * fs // c, axis=-1)
    x = x.reshape(b, t, h, w, cout, ft, fs, fs).transpose(0, 1, 5, 2, 6, 3, 7, 4)
    x = x.reshape(b, t * ft, h * fs, w * fs, cout)
    return x[:, ft - 1 :] if first else x


def _residual_down_block(p: dict, x: jax.Array, cache: dict | None, first: bool, cout: int,
                         mode: str | None) -> tuple[jax.Array, dict]:
    """``WanResidualDownBlock``: residual blocks, the down-sampler, plus the ``AvgDown3D`` shortcut."""
    shortcut = x
    new: dict = {"resnets": {}}
    for r in range(len(p["resnets"])):
        x, new["resnets"][str(r)] = _res_block(p["resnets"][str(r)], x, _get(cache, "resnets", str(r)))
    if mode is not None:
        x, c = _resample(p["downsampler"], x, mode, _get(cache, "downsampler"), first)
        if c is not None:
            new["downsampler"] = c
        shortcut = _avg_down(shortcut, cout, 2 if mode == "down3d" else 1, 2)
    else:
        shortcut = _avg_down(shortcut, cout, 1, 1)
    return x + shortcut, new


def _residual_up_block(p: dict, x: jax.Array, cache: dict | None, first: bool, cout: int,
                       mode: str | None) -> tuple[jax.Array, dict]:
    """``WanResidualUpBlock``: residual blocks, the up-sampler, plus the ``DupUp3D`` shortcut (if upsampling)."""
    shortcut = x
    new: dict = {"resnets": {}}
    for r in range(len(p["resnets"])):
        x, new["resnets"][str(r)] = _res_block(p["resnets"][str(r)], x, _get(cache, "resnets", str(r)))
    if mode is not None:
        x, c = _resample(p["upsampler"], x, mode, _get(cache, "upsampler"), first)
        if c is not None:
            new["upsampler"] = c
        x = x + _dup_up(shortcut, cout, 2 if mode == "up3d" else 1, 2, first)
    return x, new


def patchify(x: jax.Array, p: int | None) -> jax.Array:
    """diffusers ``autoencoder_kl_wan.patchify``: ``(B, C, T, H, W)`` -> ``(B, C p^2, T, H/p, W/p)``,
    channel index ``c p^2 + p_w p + p_h`` (the reference's permute puts the width offset first)."""
    if not p or p == 1:
        return x
    b, c, t, h, w = x.shape
    x = x.reshape(b, c, t, h // p, p, w // p, p).transpose(0, 1, 6, 4, 2, 3, 5)
    return x.reshape(b, c * p * p, t, h // p, w // p)


def unpatchify(x: jax.Array, p: int | None) -> jax.Array:
    """Inverse of :func:`patchify`: ``(B, C p^2, T, h, w)`` -> ``(B, C, T, h p, w p)``."""
    if not p or p == 1:
        return x
    b, cp, t, h, w = x.shape
    x = x.reshape(b, cp // (p * p), p, p, t, h, w).transpose(0, 1, 4, 5, 3, 6, 2)
    return x.reshape(b, cp // (p * p), t, h * p, w * p)


# ---------------------------------------------------------------------------------------------
# Encoder / decoder chunks
# ---------------------------------------------------------------------------------------------


def _encoder(p: dict, cfg: WanVAEConfig, x: jax.Array, cache: dict | None) -> tuple[jax.Array, dict]:
    first = cache is None
    new: dict = {}
    x, new["conv_in"] = _causal_conv(p["conv_in"], x, _get(cache, "conv_in"))
    plan, _ = _encoder_plan(cfg)
    blocks: dict = {}
    for j, (kind, _, cout, *rest) in enumerate(plan):
        key = str(j)
        bp, bc = p["down_blocks"][key], _get(cache, "down_blocks", key)
        if kind == "resdown":
            x, blocks[key] = _residual_down_block(bp, x, bc, first, cout, rest[0])
        elif kind == "res":
            x, blocks[key] = _res_block(bp, x, bc)
        else:
            x, c = _resample(bp, x, kind, bc, first)
            if c is not None:
                blocks[key] = c
    new["down_blocks"] = blocks
    x, new["mid_block"] = _mid_block(p["mid_block"], x, _get(cache, "mid_block"))
    x = jax.nn.silu(_rms_norm(p["norm_out"], x))
    x, new["conv_out"] = _causal_conv(p["conv_out"], x, _get(cache, "conv_out"))
    return x, new


#: Frames per pass through the decoder's tail, the stages after its last temporal upsampling
#: (:func:`decode_chunk`); the causal convolutions' history length, so each pass's cache is its own input.
DECODER_TAIL_FRAMES = 2


def _up_stage(p: dict, cfg: WanVAEConfig, i: int, x: jax.Array, cache: dict | None,
              first: bool) -> tuple[jax.Array, dict]:
    """``decoder.up_blocks[i]`` (``WanUpBlock``, or ``WanResidualUpBlock`` for Wan2.2) with its cache."""
    _, cout, n_res, mode = _decoder_plan(cfg)[0][i]
    bp = p["up_blocks"][str(i)]
    if cfg.is_residual:
        return _residual_up_block(bp, x, cache, first, cout, mode)
    resnets = {}
    for r in range(n_res):
        x, resnets[str(r)] = _res_block(bp["resnets"][str(r)], x, _get(cache, "resnets", str(r)))
    entry: dict = {"resnets": resnets}
    if mode is not None:
        x, c = _resample(bp["upsamplers"]["0"], x, mode, _get(cache, "upsamplers", "0"), first)
        if c is not None:
            entry["upsamplers"] = {"0": c}
    return x, entry


def _tail_start(cfg: WanVAEConfig) -> int:
    """Index of the first up block after the decoder's last temporal upsampling (its tail starts there)."""
    return max((i + 1 for i, (*_, mode) in enumerate(_decoder_plan(cfg)[0]) if mode == "up3d"), default=0)


def _split_cache(cfg: WanVAEConfig, cache: dict | None) -> tuple[dict | None, dict | None]:
    """The decoder cache as ``(head part, tail part)``; :func:`_join_cache` inverts it."""
    if cache is None:
        return None, None
    k = _tail_start(cfg)
    blocks = cache["up_blocks"]
    head = {"conv_in": cache["conv_in"], "mid_block": cache["mid_block"],
            "up_blocks": {i: c for i, c in blocks.items() if int(i) < k}}
    return head, {"up_blocks": {i: c for i, c in blocks.items() if int(i) >= k}, "conv_out": cache["conv_out"]}


def _join_cache(head: dict, tail: dict) -> dict:
    return {"conv_in": head["conv_in"], "mid_block": head["mid_block"],
            "up_blocks": {**head["up_blocks"], **tail["up_blocks"]}, "conv_out": tail["conv_out"]}


@conv_jit(static_argnames=("cfg",), donate_argnames=("cache",))
def decode_head(params: dict, cfg: WanVAEConfig, z: jax.Array, cache: dict | None = None) -> tuple[jax.Array, dict]:
    """``post_quant_conv`` and ``WanDecoder3d`` up to its last temporal upsampling, on one latent frame; jitted.

    Args:
      params: VAE parameters.
      cfg: static configuration.
      z: one de-normalised latent frame ``(B, z_dim, 1, h, w)``.
      cache: the head part of the decoder cache (``None`` on the first frame); donated.

    Returns:
      ``(x, cache)``: channels-last activations ``(B, t, h', w', C)`` in the compute dtype for
      :func:`decode_tail` (``t = 1`` on the first frame, 4 after), and the new head cache.
    """
    x = jnp.transpose(z, (0, 2, 3, 4, 1)).astype(_compute_dtype(params))
    x = conv3d(params["post_quant_conv"], x)
    p, first, new = params["decoder"], cache is None, {}
    x, new["conv_in"] = _causal_conv(p["conv_in"], x, _get(cache, "conv_in"))
    x, new["mid_block"] = _mid_block(p["mid_block"], x, _get(cache, "mid_block"))
    new["up_blocks"] = {}
    for i in range(_tail_start(cfg)):
        x, new["up_blocks"][str(i)] = _up_stage(p, cfg, i, x, _get(cache, "up_blocks", str(i)), first)
    return x, new


@conv_jit(static_argnames=("cfg",), donate_argnames=("cache",))
def decode_tail(params: dict, cfg: WanVAEConfig, x: jax.Array, cache: dict | None = None) -> tuple[jax.Array, dict]:
    """The rest of ``WanDecoder3d`` (the up blocks after the last temporal upsampling, ``norm_out``,
    ``conv_out``) on some frames of :func:`decode_head`'s output; jitted.

    Every operation here is per frame or causal in time, so consecutive frame groups with the cache carried
    from one call to the next give exactly the frames of one call on all of them.

    Args:
      params: VAE parameters.
      cfg: static configuration.
      x: ``(B, t, h', w', C)``, consecutive frames of :func:`decode_head`'s output.
      cache: the tail part of the decoder cache, from the previous call (``None`` before the first frame);
        donated.

    Returns:
      ``(video, cache)``: ``video (B, video_channels, t, s h, s w)`` float32 clamped to ``[-1, 1]``.
    """
    p, first, new = params["decoder"], cache is None, {"up_blocks": {}}
    for i in range(_tail_start(cfg), len(_decoder_plan(cfg)[0])):
        x, new["up_blocks"][str(i)] = _up_stage(p, cfg, i, x, _get(cache, "up_blocks", str(i)), first)
    x = jax.nn.silu(_rms_norm(p["norm_out"], x))
    y, new["conv_out"] = _causal_conv(p["conv_out"], x, _get(cache, "conv_out"))
    y = y.astype(jnp.float32)
    # Clamped as the reference; a non-finite value stays non-finite (NaN), so the pipelines' finiteness check sees
    # an infinite bias's output instead of a clamped white video.
    y = jnp.where(jnp.isfinite(y), jnp.clip(y, -1.0, 1.0), jnp.nan)
    return unpatchify(jnp.transpose(y, (0, 4, 1, 2, 3)), cfg.patch_size), new


#: Top-level parts of :func:`vae_specs` that encoding reads (a text-to-video pipeline loads them only on demand).
ENCODER_PARTS = ("encoder", "quant_conv")
#: Top-level parts of :func:`vae_specs` that decoding reads (all that a text-to-video pipeline loads).
DECODER_PARTS = ("post_quant_conv", "decoder")


def _encoder_dtype(params: dict):
    require_parts(params, ENCODER_PARTS, "VAE encoding", VAE_ENCODER_HINT)
    return params["encoder"]["conv_in"]["kernel"].dtype


def _compute_dtype(params: dict):
    require_parts(params, DECODER_PARTS, "VAE decoding", "load the VAE's decoder parts")
    return params["decoder"]["conv_in"]["kernel"].dtype


@conv_jit(static_argnames=("cfg",), donate_argnames=("cache",))
def encode_chunk(params: dict, cfg: WanVAEConfig, x: jax.Array, cache: dict | None = None) -> tuple[jax.Array, dict]:
    """One encoder step (``WanEncoder3d`` with its feature cache, then ``quant_conv``); jitted.

    Args:
      params: VAE parameters (:func:`vae_specs` structure).
      cfg: static configuration.
      x: video chunk ``(B, video_channels, t, H, W)`` (3 channels; patchified here for Wan2.2): the
        first frame alone (``t = 1``) for the first chunk, then ``t = 4`` frames per chunk, as the
        reference's ``_encode``.
      cache: ``None`` for the first chunk, else the cache returned by the previous call.
        Donated: its buffers are reused for the new cache (at 480p the Wan2.1 decoder's cache is 1.8 GiB),
        so it is deleted by the call; pass each cache once.

    Returns:
      ``(moments, cache)``: ``moments (B, 2*z_dim, t', H/s, W/s)`` (``s`` = ``spatial_compression``:
      8, or 16 for Wan2.2) in the compute dtype (mean channels first, then log-variance, unclamped),
      and the new cache pytree.
    """
    x = patchify(x, cfg.patch_size)
    x = jnp.transpose(x, (0, 2, 3, 4, 1)).astype(_encoder_dtype(params))
    h, cache = _encoder(params["encoder"], cfg, x, cache)
    h = conv3d(params["quant_conv"], h)
    return jnp.transpose(h, (0, 4, 1, 2, 3)), cache


def decode_chunk(params: dict, cfg: WanVAEConfig, z: jax.Array, cache: dict | None = None) -> tuple[jax.Array, dict]:
    """One decoder step (``post_quant_conv``, then ``WanDecoder3d`` with its feature cache).

    Runs :func:`decode_head` on the latent frame, then :func:`decode_tail` on its output
    :data:`DECODER_TAIL_FRAMES` frames at a time (host loop; each program compiles once for the first frame
    and once for all later ones). The tail holds the chunk's largest activations (the two highest
    resolutions); in passes of 2 of the 4 frames their temporaries halve, and every pass writes its cache into
    the donated one's buffers (docs/design.md, "Decoder passes"). The frames equal one pass over all four.

    Args:
      params: VAE parameters.
      cfg: static configuration.
      z: one de-normalised latent frame ``(B, z_dim, 1, h, w)``.
      cache: ``None`` for the first latent frame (the reference's ``first_chunk``), else
        the cache returned by the previous call.
        Donated: its buffers are reused for the new cache (at 480p the Wan2.1 decoder's cache is 1.8 GiB),
        so it is deleted by the call; pass each cache once.

    Returns:
      ``(video, cache)``: ``video (B, video_channels, t, s h, s w)`` float32 clamped to
      ``[-1, 1]`` (``s`` = ``spatial_compression``; unpatchified for Wan2.2), ``t = 1`` for the
      first chunk and ``temporal_compression`` (4) after.
    """
    # On CPU each program waits for the one before: device memory is host memory, and the runtime would run
    # the next chunk's head beside this chunk's tail (they are independent) or a compilation beside a run.
    wait = jax.block_until_ready if jax.default_backend() == "cpu" else (lambda a: a)
    head_cache, tail_cache = _split_cache(cfg, cache)
    x, head_cache = wait(decode_head(params, cfg, z, head_cache))
    t = x.shape[1]
    step = DECODER_TAIL_FRAMES if t % DECODER_TAIL_FRAMES == 0 else t
    videos = []
    for s in range(0, t, step):
        y, tail_cache = wait(decode_tail(params, cfg, x[:, s : s + step], tail_cache))
        videos.append(y)
    video = videos[0] if len(videos) == 1 else jnp.concatenate(videos, axis=2)
    return video, _join_cache(head_cache, tail_cache)


# ---------------------------------------------------------------------------------------------
# Public entry points
# ---------------------------------------------------------------------------------------------


def encode(params: dict, cfg: WanVAEConfig, video: jax.Array,
           on_chunk: Callable[[], None] | None = None) -> tuple[jax.Array, jax.Array]:
    """Encode a video to its latent distribution (``AutoencoderKLWan.encode(x).latent_dist``).

    Chunks as the reference: the first frame alone, then 4 frames at a time, through
    :func:`encode_chunk` (two compiled programs per input shape).

    Args:
      params: VAE parameters (any float dtype; computation in that dtype, fp32 accumulation).
      cfg: the configuration.
      video: ``(B, in_channels, 1 + 4k, H, W)``, values in ``[-1, 1]``.
      on_chunk: called after each chunk is computed (progress; the chunks then run one at a time).

    Returns:
      ``(mean, logvar)``, each float32 ``(B, z_dim, 1 + k, H', W')`` with ``H' = H / 8`` (``/ 16``: Wan2.2) for
      ``H`` divisible by 8 (the reference's pad-right-then-stride-2 downsampling otherwise
      floors). ``logvar`` is clamped to ``[-30, 20]`` as ``DiagonalGaussianDistribution`` does.
      The latents are not normalised; see :func:`normalize_latents`.

    Raises:
      ValueError: wrong rank, channel count, or a frame count that is not ``1 + 4k``.
    """
    if video.ndim != 5 or video.shape[1] != cfg.video_channels:
        raise ValueError(f"encode: expected video (B, {cfg.video_channels}, T, H, W), got shape {tuple(video.shape)}")
    if cfg.patch_size and (video.shape[3] % cfg.patch_size or video.shape[4] % cfg.patch_size):
        raise ValueError(f"encode: height and width must be multiples of patch_size {cfg.patch_size}, "
                         f"got {tuple(video.shape[3:])}")
    t = video.shape[2]
    step = 4  # the reference's _encode chunk length (hard-coded there too)
    if (t - 1) % step:
        raise ValueError(f"encode: the frame count must be 1 + {step}k, got {t}")
    video = jnp.asarray(video)
    cache = None
    outs = []
    for start, stop in [(0, 1)] + [(s, s + step) for s in range(1, t, step)]:
        h, cache = encode_chunk(params, cfg, video[:, :, start:stop], cache)
        outs.append(h)
        if on_chunk is not None:
            jax.block_until_ready(h)
            on_chunk()
    h = jnp.concatenate(outs, axis=2).astype(jnp.float32)
    mean, logvar = h[:, : cfg.z_dim], h[:, cfg.z_dim :]
    return mean, jnp.clip(logvar, -30.0, 20.0)


def decode(params: dict, cfg: WanVAEConfig, latents: jax.Array,
           on_chunk: Callable[[], None] | None = None) -> jax.Array:
    """Decode latents to video (``AutoencoderKLWan.decode(z).sample``).

    One latent frame per :func:`decode_chunk` call (host loop; four compiled programs per
    latent shape), outputs concatenated in time. On CPU the heap's free pages go back to the OS at the end
    (:func:`vidax.core.host_memory.trim`).

    Args:
      params: VAE parameters.
      cfg: the configuration.
      latents: de-normalised latents ``(B, z_dim, T, h, w)`` (see :func:`denormalize_latents`).
      on_chunk: called after each latent frame is decoded (progress; the chunks then run one at a time).

    Returns:
      float32 video ``(B, video_channels, 1 + 4(T - 1), 8h, 8w)`` (``16h, 16w`` for Wan2.2) clamped to ``[-1, 1]``.

    Raises:
      ValueError: wrong rank or channel count, or ``T == 0``.
    """
    if latents.ndim != 5 or latents.shape[1] != cfg.z_dim or latents.shape[2] == 0:
        raise ValueError(f"decode: expected latents (B, {cfg.z_dim}, T>=1, h, w), got shape {tuple(latents.shape)}")
    latents = jnp.asarray(latents)
    cache = None
    outs = []
    for i in range(latents.shape[2]):
        y, cache = decode_chunk(params, cfg, latents[:, :, i : i + 1], cache)
        outs.append(y)
        if on_chunk is not None:
            jax.block_until_ready(y)
            on_chunk()
    video = jnp.concatenate(outs, axis=2)
    if jax.default_backend() == "cpu":  # the programs' freed temporaries back to the OS (core.host_memory)
        host_memory.trim()
    return video


def _stats(cfg: WanVAEConfig, dtype) -> tuple[jax.Array, jax.Array]:
    shape = (1, cfg.z_dim, 1, 1, 1)
    mean = jnp.asarray(np.asarray(cfg.latents_mean, np.float32).reshape(shape), dtype)
    inv_std = jnp.asarray((1.0 / np.asarray(cfg.latents_std, np.float32)).reshape(shape), dtype)
    return mean, inv_std


def normalize_latents(cfg: WanVAEConfig, mu: jax.Array) -> jax.Array:
    """Encoder mean -> diffusion-space latents: ``(mu - mean) * (1 / std)`` per channel.

    As ``WanImageToVideoPipeline.prepare_latents`` (the reciprocal is taken in float32 and
    then cast to ``mu.dtype``, like the reference). ``mu``: ``(B, z_dim, T, h, w)``.
    """
    mean, inv_std = _stats(cfg, mu.dtype)
    return (mu - mean) * inv_std


def denormalize_latents(cfg: WanVAEConfig, z: jax.Array) -> jax.Array:
    """Diffusion-space latents -> decoder input: ``z / (1 / std) + mean`` per channel.

    The formula of ``WanPipeline.__call__`` before ``vae.decode`` (division by the float32
    reciprocal, not multiplication by ``std``). XLA rewrites a division by a broadcast
    operand into a multiplication by its reciprocal, so results can differ from PyTorch's
    by 1 ulp. ``z``: ``(B, z_dim, T, h, w)``.
    """
    mean, inv_std = _stats(cfg, z.dtype)
    return z / inv_std + mean
