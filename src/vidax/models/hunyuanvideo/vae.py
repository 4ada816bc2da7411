"""The HunyuanVideo VAE (diffusers ``AutoencoderKLHunyuanVideo``) as pure JAX functions.

Reference: ``diffusers/models/autoencoders/autoencoder_kl_hunyuan_video.py`` (diffusers 0.42.1:
``AutoencoderKLHunyuanVideo``, ``HunyuanVideoEncoder3D``, ``HunyuanVideoDecoder3D``,
``HunyuanVideoCausalConv3d``, ``HunyuanVideoResnetBlockCausal3D``, ``HunyuanVideoMidBlock3D``,
``HunyuanVideoDownsampleCausal3D``, ``HunyuanVideoUpsampleCausal3D``, ``prepare_causal_attention_mask``),
the mid-block attention as ``attention_processor.Attention`` with ``AttnProcessor2_0`` runs it, and the
original release (``Tencent-Hunyuan/HunyuanVideo`` ``hyvideo/vae``: ``AutoencoderKLCausal3D``, the same
modules under the same names).

Architecture (the 13B release: 128/256/512/512 channels, 2 resnets per encoder block, 16 latent channels)
    Every convolution is causal: the input is padded by repeating its edge values ("replicate"), the
    first frame ``kt - 1`` times in front in time and ``k // 2`` pixels on each side in space, then
    convolved without padding. Encoder block ``i`` ends in a strided causal convolution that halves
    space for ``i < log2(spatial_compression_ratio)`` and time for the two blocks before the last
    (``temporal_compression_ratio`` 4); a time stride of 2 over the first frame's two repeats keeps
    the first frame on its own, so ``T = 4k + 1`` frames give ``k + 1`` latent frames. The decoder
    mirrors it: nearest upsampling (the first frame only in space, the others in time and space) and a
    causal convolution. The mid blocks (resnet, attention, resnet) attend over all ``T * H * W``
    positions with a frame-causal mask: a position sees every position of its own and earlier frames.
    GroupNorm (eps 1e-6) and SiLU throughout; ``quant_conv`` / ``post_quant_conv`` are 1x1x1.

Layout
    Public functions take and return channels-first ``(B, C, T, H, W)`` arrays, as the reference.
    Inside the jitted programs everything is channels-last ``(B, T, H, W, C)``.

One call per tile, no temporal cache
    The reference runs its encoder and decoder over all frames of a tile at once: every GroupNorm
    normalises over all frames of its input and the mid-block attention spans them, so a frame-chunked
    decode with a convolution cache (as the CogVideoX and Wan VAEs do) would give other numbers. The
    memory devices are the reference's own: temporal ("framewise", on by default in the reference) and
    spatial tiling (:class:`VAETiling`), each tile one whole-program call (:func:`decode_tile`,
    :func:`encode_tile`), blended as the reference blends. With the defaults a decode call holds 5
    latent frames (17 video frames) of one 256 x 256 tile (``spatial=True``) or of the whole frame.

Precision
    Convolutions and the attention projections take their inputs in the weights' dtype and accumulate
    in float32; GroupNorms compute in float32 with float32 parameters (``ParamSpec.fp32``); attention
    scores and softmax are float32. Tiles are blended in float32.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint.keymap import KeyMap, Rule, conv, norm
from vidax.checkpoint.keymap import linear as linear_rules
from vidax.core.attention import AttentionImpl, attention
from vidax.core.config_values import config_values
from vidax.core.layers import conv3d, conv_jit, linear
from vidax.core.params import VAE_ENCODER_HINT, ParamSpec, SpecTree, require_parts, unflatten
from vidax.core.tiling import blend as blend_tiles

#: Epsilon of every GroupNorm of the VAE (``resnet_eps`` and the output norms: fixed 1e-6 in the reference).
NORM_EPS = 1e-6
#: Query rows per attention chunk in the mid blocks (memory O(chunk x keys) per frame).
ATTENTION_QUERY_CHUNK = 1024
_DOWN_BLOCK = "HunyuanVideoDownBlock3D"
_UP_BLOCK = "HunyuanVideoUpBlock3D"
#: The original release's block names (``hyvideo/vae``), read as the diffusers ones (same modules).
_ORIGINAL_BLOCKS = {"DownEncoderBlockCausal3D": _DOWN_BLOCK, "UpDecoderBlockCausal3D": _UP_BLOCK}
#: Top-level parts of :func:`vae_specs` that encoding reads (image-to-video loads them on demand).
ENCODER_PARTS = ("encoder", "quant_conv")
#: Top-level parts that decoding reads (all that a text-to-video pipeline loads).
DECODER_PARTS = ("decoder", "post_quant_conv")
_F32 = jnp.float32

# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HunyuanVideoVAEConfig:
    """Configuration of ``AutoencoderKLHunyuanVideo`` (the keys of a diffusers ``vae/config.json``).

    Hashable (scalars and tuples): a static argument of the jitted programs. Defaults are the reference's,
    which are the 13B release's.

    Attributes:
      in_channels, out_channels: video channels (3).
      latent_channels: latent channels (16).
      down_block_types, up_block_types: one ``"HunyuanVideoDownBlock3D"`` / ``"HunyuanVideoUpBlock3D"`` per
        entry of ``block_out_channels`` (the only block types).
      block_out_channels: encoder block widths (the decoder's reversed): (128, 256, 512, 512).
      layers_per_block: resnets per encoder block (the decoder has one more).
      act_fn: ``"silu"`` (``"swish"`` is the same function).
      norm_num_groups: GroupNorm groups (32); divides every width.
      scaling_factor: latents are ``z * scaling_factor`` in diffusion space (0.476986); no shift.
      spatial_compression_ratio: pixels per latent pixel (8): a power of 2, ``log2`` of it blocks halve space.
      temporal_compression_ratio: 4 (the reference's decoder takes no other); frames ``4k + 1`` -> ``k + 1``.
      mid_block_add_attention: the mid blocks' frame-causal attention (True).
    """

    in_channels: int = 3
    out_channels: int = 3
    latent_channels: int = 16
    down_block_types: tuple[str, ...] = (_DOWN_BLOCK,) * 4
    up_block_types: tuple[str, ...] = (_UP_BLOCK,) * 4
    block_out_channels: tuple[int, ...] = (128, 256, 512, 512)
    layers_per_block: int = 2
    act_fn: str = "silu"
    norm_num_groups: int = 32
    scaling_factor: float = 0.476986
    spatial_compression_ratio: int = 8
    temporal_compression_ratio: int = 4
    mid_block_add_attention: bool = True

    def __post_init__(self):
        for f in dataclasses.fields(self):
            if isinstance(getattr(self, f.name), list):
                object.__setattr__(self, f.name, tuple(getattr(self, f.name)))
        problems = []
        ch, n = self.block_out_channels, len(self.block_out_channels)
        if min(self.in_channels, self.out_channels, self.latent_channels) < 1:
            problems.append("in_channels, out_channels and latent_channels must be positive")
        if not 3 <= n <= 16 or min(ch) < 1:
            problems.append(f"block_out_channels={list(ch)} (3 to 16 positive widths: the two temporal halvings sit "
                            "in the two blocks before the last)")
        if not 1 <= self.layers_per_block <= 64:
            problems.append(f"layers_per_block={self.layers_per_block} (1 to 64)")
        for name, want in (("down_block_types", _DOWN_BLOCK), ("up_block_types", _UP_BLOCK)):
            got = getattr(self, name)
            if len(got) != n or any(b != want for b in got):
                problems.append(f"{name}={list(got)} (one {want!r} per entry of block_out_channels)")
        if self.act_fn not in ("silu", "swish"):
            problems.append(f"act_fn={self.act_fn!r} (only 'silu', as released)")
        if self.norm_num_groups < 1 or (n and min(ch) >= 1 and any(c % self.norm_num_groups for c in ch)):
            problems.append(f"norm_num_groups={self.norm_num_groups} (a positive divisor of every width in "
                            f"block_out_channels {list(ch)})")
        if self.temporal_compression_ratio != 4:
            problems.append(f"temporal_compression_ratio={self.temporal_compression_ratio} (only 4: the reference's "
                            "decoder raises on any other)")
        s = self.spatial_compression_ratio
        if s < 1 or s & (s - 1) or s.bit_length() - 1 > n:
            problems.append(f"spatial_compression_ratio={s} (a power of 2 up to 2**len(block_out_channels): the first "
                            "log2 of it blocks halve space)")
        if not (math.isfinite(self.scaling_factor) and self.scaling_factor > 0):
            problems.append(f"scaling_factor={self.scaling_factor} (the pipelines divide the latents by it: 0.476986)")
        if problems:
            raise ValueError("HunyuanVideoVAEConfig: unsupported " + "; ".join(problems) + " (fix these values in "
                             "the VAE's config.json)")

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> HunyuanVideoVAEConfig:
        """Build from a diffusers ``vae/config.json`` dict.

        Keys that are not ``AutoencoderKLHunyuanVideo`` arguments are left out, as diffusers leaves them out.

        Raises:
          ValueError: ``_class_name`` is not ``AutoencoderKLHunyuanVideo`` (the original release's
            ``AutoencoderKLCausal3D`` goes through :meth:`from_original_dict`); a value of the wrong type;
            an unsupported setting (each named).
        """
        name = config.get("_class_name")
        if name == "AutoencoderKLCausal3D":
            raise ValueError("vae config.json is the original release's AutoencoderKLCausal3D: read it with "
                             "HunyuanVideoVAEConfig.from_original_dict (load_vae does)")
        if name not in (None, "AutoencoderKLHunyuanVideo"):
            raise ValueError(f"vae config.json is for {name!r}, not 'AutoencoderKLHunyuanVideo'")
        return cls(**config_values(cls, config, "HunyuanVideo VAE config"))

    @classmethod
    def from_original_dict(cls, config: dict[str, Any]) -> HunyuanVideoVAEConfig:
        """Build from the original release's ``vae/config.json`` (``AutoencoderKLCausal3D``, ``hyvideo/vae``).

        Same architecture under other names: ``time_compression_ratio`` is ``temporal_compression_ratio``,
        ``DownEncoderBlockCausal3D`` / ``UpDecoderBlockCausal3D`` are the diffusers blocks. Keys absent from
        the file take ``AutoencoderKLCausal3D``'s own defaults (one 64-wide block, 4 latent channels,
        scaling 0.18215: the release's file gives every one of them). ``sample_size`` / ``sample_tsize`` /
        ``force_upcast`` set that class's own tiling and casting; vidax tiles as diffusers does (:class:`VAETiling`).

        Raises:
          ValueError: another ``_class_name``; a block type or value that is not the original's (named).
        """
        name = config.get("_class_name")
        if name not in (None, "AutoencoderKLCausal3D"):
            raise ValueError(f"original vae config.json is for {name!r}, not 'AutoencoderKLCausal3D'")
        merged = {"down_block_types": ["DownEncoderBlockCausal3D"], "up_block_types": ["UpDecoderBlockCausal3D"],
                  "block_out_channels": [64], "layers_per_block": 1, "latent_channels": 4, "scaling_factor": 0.18215,
                  "time_compression_ratio": 4, **config}
        merged.pop("temporal_compression_ratio", None)  # not an AutoencoderKLCausal3D argument: it ignores it
        ratio = merged.pop("time_compression_ratio")
        if not isinstance(ratio, int) or isinstance(ratio, bool):
            raise ValueError(f"original VAE config: time_compression_ratio={ratio!r} should be an integer (fix it "
                             "in its config.json)")
        for key in ("down_block_types", "up_block_types"):
            blocks = merged[key]
            if not isinstance(blocks, list) or any(b not in _ORIGINAL_BLOCKS for b in blocks):
                raise ValueError(f"original VAE config: {key}={blocks!r} (only {sorted(_ORIGINAL_BLOCKS)} blocks exist "
                                 "in the release)")
            merged[key] = [_ORIGINAL_BLOCKS[b] for b in blocks]
        merged["temporal_compression_ratio"] = ratio
        return cls(**config_values(cls, merged, "HunyuanVideo original VAE config"))


# ---------------------------------------------------------------------------------------------
# Architecture plan: read once from the config, shared by the declaration and the forward functions
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Stage:
    cin: int  # width entering the block
    cout: int  # width of its resnets and output
    layers: int  # resnets
    stride_t: int  # 2: the block's resampler halves (encoder) / doubles (decoder) time
    stride_s: int  # 2: ... space

    @property
    def resample(self) -> bool:
        return self.stride_t > 1 or self.stride_s > 1


@functools.lru_cache(maxsize=32)
def _stages(cfg: HunyuanVideoVAEConfig, decoder: bool) -> tuple[_Stage, ...]:
    """The blocks as the reference builds them: block ``i`` resamples space for ``i < log2(spatial ratio)``
    and time for ``n - 1 - log2(temporal ratio) <= i < n - 1`` (encoder and decoder alike, the decoder's
    widths reversed)."""
    ch = cfg.block_out_channels[::-1] if decoder else cfg.block_out_channels
    n = len(ch)
    n_s = cfg.spatial_compression_ratio.bit_length() - 1
    n_t = cfg.temporal_compression_ratio.bit_length() - 1
    stages, prev = [], ch[0]
    for i, out in enumerate(ch):
        time = i >= n - 1 - n_t and i != n - 1
        stages.append(_Stage(prev, out, cfg.layers_per_block + int(decoder), 2 if time else 1, 2 if i < n_s else 1))
        prev = out
    return tuple(stages)


# ---------------------------------------------------------------------------------------------
# Parameter declaration and the key map (one walk gives both)
# ---------------------------------------------------------------------------------------------


class _Declaration:
    """Collects parameter specs (paths mirror diffusers module names, ``/`` for ``.``) and key-map rules."""

    def __init__(self):
        self.specs: dict[str, ParamSpec] = {}
        self.rules: list[Rule] = []

    def conv3d(self, key: str, cin: int, cout: int, k: int):
        """An ``nn.Conv3d`` at ``key`` (cubic kernel ``k``)."""
        path = key.replace(".", "/")
        self.specs[f"{path}/kernel"] = ParamSpec((k, k, k, cin, cout))
        self.specs[f"{path}/bias"] = ParamSpec((cout,))
        self.rules += conv(key, path, dims=3)

    def causal(self, key: str, cin: int, cout: int, k: int = 3):
        # HunyuanVideoCausalConv3d wraps its Conv3d as `.conv`.
        self.conv3d(f"{key}.conv", cin, cout, k)

    def group_norm(self, key: str, dim: int):
        path = key.replace(".", "/")
        self.specs[f"{path}/scale"] = ParamSpec((dim,), fp32=True)
        self.specs[f"{path}/bias"] = ParamSpec((dim,), fp32=True)
        self.rules += norm(key, path)

    def linear(self, key: str, din: int, dout: int):
        path = key.replace(".", "/")
        self.specs[f"{path}/kernel"] = ParamSpec((din, dout))
        self.specs[f"{path}/bias"] = ParamSpec((dout,))
        self.rules += linear_rules(key, path)

    def resnet(self, key: str, cin: int, cout: int):
        self.group_norm(f"{key}.norm1", cin)
        self.causal(f"{key}.conv1", cin, cout)
        self.group_norm(f"{key}.norm2", cout)
        self.causal(f"{key}.conv2", cout, cout)
        if cin != cout:
            self.causal(f"{key}.conv_shortcut", cin, cout, 1)

    def mid_block(self, key: str, dim: int, attention: bool):
        self.resnet(f"{key}.resnets.0", dim, dim)
        if attention:  # Attention(_from_deprecated_attn_block=True): one head of width dim
            a = f"{key}.attentions.0"
            self.group_norm(f"{a}.group_norm", dim)
            for name in ("to_q", "to_k", "to_v", "to_out.0"):
                self.linear(f"{a}.{name}", dim, dim)
        self.resnet(f"{key}.resnets.1", dim, dim)


@functools.lru_cache(maxsize=16)
def _declare(cfg: HunyuanVideoVAEConfig) -> _Declaration:
    d, ch, z = _Declaration(), cfg.block_out_channels, cfg.latent_channels
    d.causal("encoder.conv_in", cfg.in_channels, ch[0])
    for i, s in enumerate(_stages(cfg, decoder=False)):
        for j in range(s.layers):
            d.resnet(f"encoder.down_blocks.{i}.resnets.{j}", s.cin if j == 0 else s.cout, s.cout)
        if s.resample:
            d.causal(f"encoder.down_blocks.{i}.downsamplers.0.conv", s.cout, s.cout)
    d.mid_block("encoder.mid_block", ch[-1], cfg.mid_block_add_attention)
    d.group_norm("encoder.conv_norm_out", ch[-1])
    d.causal("encoder.conv_out", ch[-1], 2 * z)
    d.conv3d("quant_conv", 2 * z, 2 * z, 1)
    d.conv3d("post_quant_conv", z, z, 1)
    d.causal("decoder.conv_in", z, ch[-1])
    d.mid_block("decoder.mid_block", ch[-1], cfg.mid_block_add_attention)
    for i, s in enumerate(_stages(cfg, decoder=True)):
        for j in range(s.layers):
            d.resnet(f"decoder.up_blocks.{i}.resnets.{j}", s.cin if j == 0 else s.cout, s.cout)
        if s.resample:
            d.causal(f"decoder.up_blocks.{i}.upsamplers.0.conv", s.cout, s.cout)
    d.group_norm("decoder.conv_norm_out", ch[0])
    d.causal("decoder.conv_out", ch[0], cfg.out_channels)
    return d


def vae_specs_and_rules(cfg: HunyuanVideoVAEConfig) -> tuple[SpecTree, list[Rule]]:
    """The VAE's spec tree and its diffusers key-map rules, from one walk of the architecture.

    Paths mirror the diffusers module names with ``/`` for ``.`` (e.g.
    ``decoder/up_blocks/0/resnets/1/conv1/conv/kernel``, ``encoder/mid_block/attentions/0/to_q/kernel``).
    Kernels are channels-last (``(kt, kh, kw, in, out)``; linear ``(in, out)``); the GroupNorm parameters
    are float32 pins. Top-level parts: ``encoder``, ``quant_conv``, ``post_quant_conv``, ``decoder``.
    """
    d = _declare(cfg)
    return unflatten(dict(d.specs)), list(d.rules)


def vae_specs(cfg: HunyuanVideoVAEConfig) -> SpecTree:
    """The VAE's spec tree (see :func:`vae_specs_and_rules`)."""
    return vae_specs_and_rules(cfg)[0]


def vae_keymap(cfg: HunyuanVideoVAEConfig) -> KeyMap:
    """Key map of a diffusers ``AutoencoderKLHunyuanVideo`` state dict (``save_pretrained`` layout).

    Strict: with :func:`~vidax.checkpoint.loader.load_params` every checkpoint key fills exactly one
    slot of :func:`vae_specs` (the model has no buffers; nothing is ignored).
    """
    return KeyMap(list(_declare(cfg).rules))


#: Prefix of the original VAE's keys in checkpoints that hold more than the VAE (``hyvideo/vae/__init__.py``).
ORIGINAL_PREFIX = "vae."


def vae_keymap_original(cfg: HunyuanVideoVAEConfig, prefixed: bool = False) -> KeyMap:
    """Key map of the original release's VAE file (``hunyuan-video-t2v-720p/vae/pytorch_model.pt``).

    The original ``AutoencoderKLCausal3D`` has the diffusers module names (diffusers'
    ``scripts/convert_hunyuan_video_to_diffusers.py`` renames nothing: ``VAE_KEYS_RENAME_DICT`` is empty),
    so the keys are :func:`vae_keymap`'s. The original loader (``hyvideo/vae/__init__.py: load_vae``)
    unwraps a ``state_dict`` entry (the reader's :func:`~vidax.checkpoint.torch_pickle.flatten_state_dict`
    does) and, when any key starts with ``vae.``, keeps only those keys with the prefix removed:
    ``prefixed=True`` is that case (the other keys, a training checkpoint's loss or discriminator, are
    ignored as the original loader drops them).
    """
    rules = list(_declare(cfg).rules)
    if not prefixed:
        return KeyMap(rules)
    return KeyMap([Rule(ORIGINAL_PREFIX + r.key, r.path, r.layout) for r in rules],
                  ignore=[rf"(?!{ORIGINAL_PREFIX.replace('.', '[.]')})"])


def load_vae(path: str | os.PathLike, dtype: Any = np.float32,
             parts: Collection[str] | None = None) -> tuple[HunyuanVideoVAEConfig, dict]:
    """Load a VAE folder into ``(cfg, params)``: diffusers layout or the original release's.

    The folder's ``config.json`` says which: ``AutoencoderKLHunyuanVideo`` (diffusers: safetensors, e.g.
    ``hunyuanvideo-community/HunyuanVideo/vae``) or ``AutoencoderKLCausal3D`` (the original release's
    ``hunyuan-video-t2v-720p/vae``: ``pytorch_model.pt``, read by vidax's restricted PyTorch reader, never
    unpickled by PyTorch). Both give the same parameter tree.

    Args:
      path: the folder.
      dtype: compute dtype of the kernels (``float32`` or ``bfloat16``); the GroupNorm parameters stay float32.
      parts: top-level parts to read (:data:`DECODER_PARTS` for text-to-video); None: all. The whole
        checkpoint is checked either way.

    Raises:
      ValueError: an unsupported configuration. CheckpointError: an unreadable ``config.json``, or tensors
        that do not match the configuration (one message listing all).
    """
    from vidax.checkpoint.loader import load_params

    cfg, reader, keymap = vae_checkpoint(path)
    return cfg, load_params(reader, keymap, vae_specs(cfg), dtype, source=str(path), parts=parts)


def vae_checkpoint(path: str | os.PathLike) -> tuple[HunyuanVideoVAEConfig, Any, KeyMap]:
    """A VAE folder's configuration, tensors and key map, reading its ``config.json`` and weight headers only
    (:func:`load_vae` loads them; ``vidax inspect`` and ``vidax convert`` read them).

    ``config.json``'s ``_class_name`` says the layout: ``AutoencoderKLCausal3D`` (the original release:
    ``pytorch_model.pt``, keys optionally under ``vae.``) or ``AutoencoderKLHunyuanVideo`` (diffusers).

    Returns:
      ``(cfg, reader, keymap)``: a :class:`~vidax.checkpoint.reader.CheckpointReader` and the layout's key map.

    Raises:
      ValueError: an unsupported configuration. CheckpointError: an unreadable ``config.json`` or weights file.
    """
    from vidax.checkpoint.reader import CheckpointReader
    from vidax.core.config_values import read_json

    path = Path(path)
    config = read_json(path / "config.json")
    if config.get("_class_name") == "AutoencoderKLCausal3D":
        cfg = HunyuanVideoVAEConfig.from_original_dict(config)
        weights = path / "pytorch_model.pt"
        reader = CheckpointReader(weights if weights.is_file() else path)
        return cfg, reader, vae_keymap_original(cfg, prefixed=any(k.startswith(ORIGINAL_PREFIX) for k in reader.keys()))
    cfg = HunyuanVideoVAEConfig.from_dict(config)
    return cfg, CheckpointReader(path), vae_keymap(cfg)


# ---------------------------------------------------------------------------------------------
# Building blocks (channels-last, pure)
# ---------------------------------------------------------------------------------------------


def _causal_conv(p: dict, x: jax.Array, strides: tuple[int, int, int] = (1, 1, 1)) -> jax.Array:
    """``HunyuanVideoCausalConv3d``: ``F.pad(mode="replicate")`` by ``kt - 1`` copies of the first frame in front
    and ``k // 2`` pixels on each side in space, then the convolution without padding (one padded copy)."""
    kt, kh, kw = p["conv"]["kernel"].shape[:3]
    if kt > 1 or kh > 1 or kw > 1:
        x = jnp.pad(x, ((0, 0), (kt - 1, 0), (kh // 2, kh // 2), (kw // 2, kw // 2), (0, 0)), mode="edge")
    return conv3d(p["conv"], x, strides=strides)


def _group_norm(p: dict, x: jax.Array, groups: int) -> jax.Array:
    """``nn.GroupNorm(groups, C, eps=1e-6)`` over ``(T, H, W, C / groups)`` of each group; float32 result."""
    b, t, h, w, c = x.shape
    xf = x.astype(_F32).reshape(b, t, h, w, groups, c // groups)
    mean = jnp.mean(xf, axis=(1, 2, 3, 5), keepdims=True)
    var = jnp.mean(jnp.square(xf - mean), axis=(1, 2, 3, 5), keepdims=True)
    y = ((xf - mean) * jax.lax.rsqrt(var + NORM_EPS)).reshape(b, t, h, w, c)
    return y * p["scale"].astype(_F32) + p["bias"].astype(_F32)


def _norm_silu(p: dict, x: jax.Array, groups: int) -> jax.Array:
    """GroupNorm then SiLU, both in float32, rounded once to ``x``'s dtype (the next convolution's input)."""
    return jax.nn.silu(_group_norm(p, x, groups)).astype(x.dtype)


def _resnet(p: dict, x: jax.Array, groups: int) -> jax.Array:
    """``HunyuanVideoResnetBlockCausal3D``: norm, SiLU, conv, norm, SiLU, conv, plus the (1x1x1) shortcut."""
    h = _causal_conv(p["conv1"], _norm_silu(p["norm1"], x, groups))
    h = _causal_conv(p["conv2"], _norm_silu(p["norm2"], h, groups))
    if "conv_shortcut" in p:
        x = _causal_conv(p["conv_shortcut"], x)
    return h + x


def _attention(p: dict, x: jax.Array, groups: int) -> jax.Array:
    """The mid block's ``Attention`` (one head of width C, GroupNorm first, residual added) under the mask of
    ``prepare_causal_attention_mask``: query position ``q`` of frame ``f`` attends the keys of frames ``<= f``,
    i.e. the first ``(f + 1) H W`` of the ``T H W`` positions in ``(t, h, w)`` order.

    Frame by frame (``lax.map``): frame ``f``'s queries against all keys with the later frames cut by
    ``kv_lengths``, the same softmax as the reference's ``-inf`` mask, in query chunks of
    :data:`ATTENTION_QUERY_CHUNK` (memory O(chunk x T H W)).
    """
    b, t, h, w, c = x.shape
    hw = h * w
    y = _group_norm(p["group_norm"], x, groups).astype(x.dtype).reshape(b, t, hw, c)
    q, k, v = (linear(p[name], y) for name in ("to_q", "to_k", "to_v"))
    k, v = k.reshape(b, t * hw, 1, c), v.reshape(b, t * hw, 1, c)

    def frame(args):
        qf, f = args
        lengths = jnp.full((b,), (f + 1) * hw, jnp.int32)
        return attention(qf[:, :, None], k, v, implementation=AttentionImpl.CHUNKED, kv_lengths=lengths,
                         query_chunk_size=ATTENTION_QUERY_CHUNK)

    o = jax.lax.map(frame, (jnp.moveaxis(q, 1, 0), jnp.arange(t)))  # (t, b, hw, 1, c)
    o = jnp.moveaxis(o[:, :, :, 0], 0, 1).reshape(b, t, h, w, c)
    return linear(p["to_out"]["0"], o).astype(x.dtype) + x


def _mid_block(p: dict, x: jax.Array, cfg: HunyuanVideoVAEConfig) -> jax.Array:
    """``HunyuanVideoMidBlock3D`` (one layer): resnet, attention, resnet."""
    g = cfg.norm_num_groups
    x = _resnet(p["resnets"]["0"], x, g)
    if cfg.mid_block_add_attention:
        x = _attention(p["attentions"]["0"], x, g)
    return _resnet(p["resnets"]["1"], x, g)


def _repeat(x: jax.Array, factors: tuple[int, int, int]) -> jax.Array:
    """Nearest upsampling of ``(B, T, H, W, C)`` by whole factors (``F.interpolate(mode="nearest")``): a broadcast."""
    b, t, h, w, c = x.shape
    ft, fh, fw = factors
    x = jnp.broadcast_to(x[:, :, None, :, None, :, None, :], (b, t, ft, h, fh, w, fw, c))
    return x.reshape(b, t * ft, h * fh, w * fw, c)


def _upsample(p: dict, x: jax.Array, stride_t: int, stride_s: int) -> jax.Array:
    """``HunyuanVideoUpsampleCausal3D``: the first frame upsampled in space only, the others in time and space,
    then a causal convolution."""
    first = _repeat(x[:, :1], (1, stride_s, stride_s))
    if x.shape[1] > 1:
        first = jnp.concatenate([first, _repeat(x[:, 1:], (stride_t, stride_s, stride_s))], axis=1)
    return _causal_conv(p["conv"], first)


def _encoder(p: dict, cfg: HunyuanVideoVAEConfig, x: jax.Array) -> jax.Array:
    """``HunyuanVideoEncoder3D``: ``(B, T, H, W, in)`` -> ``(B, t, h, w, 2 latent_channels)``."""
    g = cfg.norm_num_groups
    x = _causal_conv(p["conv_in"], x)
    for i, s in enumerate(_stages(cfg, decoder=False)):
        bp = p["down_blocks"][str(i)]
        with jax.named_scope(f"down_block_{i}"):
            for j in range(s.layers):
                x = _resnet(bp["resnets"][str(j)], x, g)
            if s.resample:
                x = _causal_conv(bp["downsamplers"]["0"]["conv"], x, strides=(s.stride_t, s.stride_s, s.stride_s))
    with jax.named_scope("mid_block"):
        x = _mid_block(p["mid_block"], x, cfg)
    return _causal_conv(p["conv_out"], _norm_silu(p["conv_norm_out"], x, g))


def _decoder(p: dict, cfg: HunyuanVideoVAEConfig, z: jax.Array) -> jax.Array:
    """``HunyuanVideoDecoder3D``: ``(B, t, h, w, latent_channels)`` -> ``(B, 4 (t - 1) + 1, 8 h, 8 w, out)``."""
    g = cfg.norm_num_groups
    x = _causal_conv(p["conv_in"], z)
    with jax.named_scope("mid_block"):
        x = _mid_block(p["mid_block"], x, cfg)
    for i, s in enumerate(_stages(cfg, decoder=True)):
        bp = p["up_blocks"][str(i)]
        with jax.named_scope(f"up_block_{i}"):
            for j in range(s.layers):
                x = _resnet(bp["resnets"][str(j)], x, g)
            if s.resample:
                x = _upsample(bp["upsamplers"]["0"], x, s.stride_t, s.stride_s)
    return _causal_conv(p["conv_out"], _norm_silu(p["conv_norm_out"], x, g))


# ---------------------------------------------------------------------------------------------
# One reference call (a tile): the jitted programs
# ---------------------------------------------------------------------------------------------


def _encoder_dtype(params: dict):
    require_parts(params, ENCODER_PARTS, "VAE encoding", VAE_ENCODER_HINT)
    return params["encoder"]["conv_in"]["conv"]["kernel"].dtype


def _decoder_dtype(params: dict):
    require_parts(params, DECODER_PARTS, "VAE decoding", "load the VAE's decoder parts (DECODER_PARTS)")
    return params["decoder"]["conv_in"]["conv"]["kernel"].dtype


@conv_jit(static_argnames=("cfg",))
def _encode_program(params: dict, cfg: HunyuanVideoVAEConfig, video: jax.Array) -> jax.Array:
    x = jnp.transpose(video, (0, 2, 3, 4, 1)).astype(_encoder_dtype(params))
    h = conv3d(params["quant_conv"], _encoder(params["encoder"], cfg, x))
    return jnp.transpose(h.astype(_F32), (0, 4, 1, 2, 3))


@conv_jit(static_argnames=("cfg",))
def _decode_program(params: dict, cfg: HunyuanVideoVAEConfig, z: jax.Array) -> jax.Array:
    x = jnp.transpose(z, (0, 2, 3, 4, 1)).astype(_decoder_dtype(params))
    y = _decoder(params["decoder"], cfg, conv3d(params["post_quant_conv"], x))
    return jnp.transpose(y.astype(_F32), (0, 4, 1, 2, 3))


def encode_tile(params: dict, cfg: HunyuanVideoVAEConfig, video: jax.Array) -> jax.Array:
    """One untiled encoder call (the reference's ``quant_conv(encoder(x))``); one compiled program per shape.

    Args:
      params: VAE parameters (at least :data:`ENCODER_PARTS`).
      cfg: static configuration.
      video: ``(B, in_channels, T, H, W)`` in ``[-1, 1]``, any ``T, H, W >= 1``.

    Returns:
      float32 moments ``(B, 2 latent_channels, (T - 1) // 4 + 1, ceil(H / 8), ceil(W / 8))``: the mean
      channels, then the log-variance channels (not clamped).
    """
    return _encode_program(params, cfg, video)


def decode_tile(params: dict, cfg: HunyuanVideoVAEConfig, z: jax.Array) -> jax.Array:
    """One untiled decoder call (the reference's ``decoder(post_quant_conv(z))``); one compiled program per shape.

    Args:
      params: VAE parameters (at least :data:`DECODER_PARTS`).
      cfg: static configuration.
      z: latents ``(B, latent_channels, t, h, w)``, already divided by the scaling factor; cast to the
        weights' dtype.

    Returns:
      float32 video ``(B, out_channels, 4 (t - 1) + 1, 8 h, 8 w)``, not clamped (for the released ratios).
    """
    return _decode_program(params, cfg, z)


# ---------------------------------------------------------------------------------------------
# Tiling
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VAETiling:
    """The reference's tiling settings; field names and defaults as ``AutoencoderKLHunyuanVideo.__init__``.

    ``VAETiling()`` is the reference after ``enable_tiling()``; ``VAETiling(tile_sample_min_height=...)`` after
    ``enable_tiling(tile_sample_min_height=...)``; :data:`DEFAULT_TILING` (``spatial=False``) the reference as
    constructed, which already tiles in time (``use_framewise_encoding`` / ``use_framewise_decoding`` are on).

    Attributes:
      spatial: ``use_tiling`` (what ``enable_tiling`` turns on): frames wider or taller than one tile are
        encoded / decoded in overlapping spatial tiles.
      temporal: ``use_framewise_encoding`` and ``use_framewise_decoding``: more than
        ``tile_sample_min_num_frames`` video frames (encode) or ``tile_sample_min_num_frames // 4`` latent
        frames (decode) are processed in overlapping frame tiles.
      tile_sample_min_height, tile_sample_min_width, tile_sample_min_num_frames: tile sizes in pixels /
        frames (256, 256, 16); a frame tile holds one frame more.
      tile_sample_stride_height, tile_sample_stride_width, tile_sample_stride_num_frames: tile starts in
        pixels / frames (192, 192, 12); a tile overlaps the next by ``min - stride``.
    """

    spatial: bool = True
    temporal: bool = True
    tile_sample_min_height: int = 256
    tile_sample_min_width: int = 256
    tile_sample_min_num_frames: int = 16
    tile_sample_stride_height: int = 192
    tile_sample_stride_width: int = 192
    tile_sample_stride_num_frames: int = 12

    def resolve(self, cfg: HunyuanVideoVAEConfig) -> dict[str, int]:
        """The integer quantities of the reference's tiled encode and decode (the same integer expressions).

        Keys: ``latent_{height,width,frames}`` (tile sizes in latents), ``latent_stride_{height,width,frames}``,
        ``blend_{height,width,frames}`` (decode: pixels / frames, ``min - stride``),
        ``latent_blend_{height,width,frames}`` (encode: latents), and the sample sizes and strides.

        Raises:
          ValueError: a size or stride that is not an integer from 1 to 2**20, or a stride below one latent
            pixel / frame or above the tile size (gaps between tiles).
        """
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name not in ("spatial", "temporal") and (not isinstance(v, (int, np.integer)) or isinstance(v, bool)
                                                          or not 1 <= v <= 1 << 20):
                raise ValueError(f"VAETiling: {f.name}={v!r} should be an integer from 1 to {1 << 20}")
        s, t = cfg.spatial_compression_ratio, cfg.temporal_compression_ratio
        q: dict[str, int] = {}
        for axis, name, unit in (("height", "height", s), ("width", "width", s), ("frames", "num_frames", t)):
            size, stride = getattr(self, f"tile_sample_min_{name}"), getattr(self, f"tile_sample_stride_{name}")
            if stride // unit < 1 or stride > size:
                raise ValueError(f"VAETiling: tile_sample_stride_{name} must be at least {unit} (one latent "
                                 f"{'frame' if axis == 'frames' else 'pixel'}) and at most tile_sample_min_{name}; "
                                 f"got {stride} and {size}")
            q.update({f"sample_{axis}": size, f"stride_{axis}": stride, f"latent_{axis}": size // unit,
                      f"latent_stride_{axis}": stride // unit, f"blend_{axis}": size - stride,
                      f"latent_blend_{axis}": size // unit - stride // unit})
        return q


#: The reference as constructed (no ``enable_tiling``): frame tiles at 16 / 12 frames, no spatial tiles.
DEFAULT_TILING = VAETiling(spatial=False)


@functools.partial(jax.jit, static_argnames=("blend", "keep", "size"))
def _compose_spatial(rows: list, blend: tuple[int, int], keep: tuple[int, int], size: tuple[int, int]) -> jax.Array:
    """``tiled_encode`` / ``tiled_decode``'s blending: raster order, each tile blended with the tile above
    (``blend_v``) and to the left (``blend_h``), written back before it serves as a neighbour (the reference
    blends in place; paper Table 4 fault 14), the first ``keep`` rows / columns kept, cropped to ``size``.
    One program per tile layout."""
    rows = [list(row) for row in rows]
    out_rows = []
    for i, row in enumerate(rows):
        kept = []
        for j, tile in enumerate(row):
            if i > 0:
                tile = blend_tiles(rows[i - 1][j], tile, blend[0], axis=3)
            if j > 0:
                tile = blend_tiles(row[j - 1], tile, blend[1], axis=4)
            row[j] = tile
            kept.append(tile[:, :, :, : keep[0], : keep[1]])
        out_rows.append(jnp.concatenate(kept, axis=4))
    return jnp.concatenate(out_rows, axis=3)[:, :, :, : size[0], : size[1]]


@functools.partial(jax.jit, static_argnames=("blend", "keep", "frames"))
def _compose_temporal(row: list, blend: int, keep: int, frames: int) -> jax.Array:
    """``_temporal_tiled_encode`` / ``_temporal_tiled_decode``'s blending: every tile after the first loses its
    first frame (the causal first frame of its window), is blended with the (blended) tile before over ``blend``
    frames (``blend_t``), written back, and keeps ``keep`` frames (the first tile ``keep + 1``); cropped to
    ``frames``."""
    row = [row[0]] + [tile[:, :, 1:] for tile in row[1:]]
    kept = [row[0][:, :, : keep + 1]]
    for i in range(1, len(row)):
        row[i] = blend_tiles(row[i - 1], row[i], blend, axis=2)
        kept.append(row[i][:, :, :keep])
    return jnp.concatenate(kept, axis=2)[:, :, :frames]


def _calls(fn: Callable, params: dict, cfg: HunyuanVideoVAEConfig, on_tile: Callable[[], None] | None):
    def call(x):
        out = fn(params, cfg, jnp.asarray(x))
        if on_tile is not None:
            jax.block_until_ready(out)
            on_tile()
        return out

    return call


def _spatial_tiles(call: Callable, x: np.ndarray, size: tuple[int, int], stride: tuple[int, int],
                   blend: tuple[int, int], keep: tuple[int, int], out_size: tuple[int, int]) -> jax.Array:
    """Tiles of ``size`` every ``stride`` over ``x``'s last two axes (cut on the host: inputs are small), each
    through ``call``, composed by :func:`_compose_spatial`."""
    h, w = x.shape[3:]
    rows = [[call(x[:, :, :, i : i + size[0], j : j + size[1]]) for j in range(0, w, stride[1])]
            for i in range(0, h, stride[0])]
    return _compose_spatial(rows, blend, keep, out_size)


def _temporal_tiles(call: Callable, x: np.ndarray, size: int, stride: int, blend: int, keep: int, frames: int,
                    out_frames: Callable[[int], int]) -> jax.Array:
    """Frame tiles of ``size + 1`` every ``stride`` over ``x``'s axis 2, each through ``call``, composed by
    :func:`_compose_temporal`. A tile after the first whose output is one frame (the last tile, reaching
    fewer than ``stride`` frames past the previous start's window) is not computed: the reference drops that
    frame and blends nothing from it."""
    t = x.shape[2]
    row = []
    for i in range(0, t, stride):
        tile = x[:, :, i : i + size + 1]
        if i > 0 and out_frames(tile.shape[2]) == 1:
            break  # the reference's output keeps nothing of it, and no tile follows it
        row.append(call(tile))
    return _compose_temporal(row, blend, keep, frames)


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def latent_frames(cfg: HunyuanVideoVAEConfig, num_frames: int) -> int:
    """Latent frames of ``num_frames`` video frames: ``(num_frames - 1) // 4 + 1`` (129 -> 33; the pipelines'
    rule and what the encoder's two causal time halvings give for any ``num_frames >= 1``)."""
    return (num_frames - 1) // cfg.temporal_compression_ratio + 1


def decoded_frames(cfg: HunyuanVideoVAEConfig, latent_frames: int) -> int:
    """Video frames decoded from ``latent_frames``: ``4 (latent_frames - 1) + 1`` (33 -> 129)."""
    return (latent_frames - 1) * cfg.temporal_compression_ratio + 1


def _check(x: jax.Array, channels: int, what: str, name: str) -> None:
    if x.ndim != 5 or x.shape[1] != channels or min(x.shape[2:]) < 1:
        hint = (" (channels-first: move the channel axis to position 1)"
                if x.ndim == 5 and x.shape[-1] == channels else "")
        raise ValueError(f"{what}: expected {name} (B, {channels}, T>=1, H>=1, W>=1), got shape {tuple(x.shape)}"
                         + hint)


def encode(params: dict, cfg: HunyuanVideoVAEConfig, video: jax.Array, tiling: VAETiling | None = None,
           on_tile: Callable[[], None] | None = None) -> tuple[jax.Array, jax.Array]:
    """Encode a video to its latent distribution (``AutoencoderKLHunyuanVideo.encode(x).latent_dist``).

    The reference's ``_encode``: with ``tiling.temporal`` and more than ``tile_sample_min_num_frames`` frames,
    frame tiles of ``tile_sample_min_num_frames + 1`` frames every ``tile_sample_stride_num_frames`` (each
    spatially tiled too when ``tiling.spatial`` and the frames are larger than a tile), blended over
    ``latent_blend_frames`` latent frames; else with ``tiling.spatial`` and frames larger than a tile, spatial
    tiles blended over ``latent_blend_{height,width}`` latents; else one :func:`encode_tile` call.

    Args:
      params: VAE parameters (at least :data:`ENCODER_PARTS`); computation in their dtype, float32 accumulation.
      cfg: the configuration.
      video: ``(B, in_channels, T, H, W)`` in ``[-1, 1]``; ``T = 4k + 1`` (1 for an image) and ``H``, ``W``
        multiples of 8 are what the pipelines make (other sizes run as the reference runs them).
      tiling: None: :data:`DEFAULT_TILING` (the reference without ``enable_tiling``: frame tiles only).
      on_tile: called after each encoder call (progress).

    Returns:
      ``(mean, logvar)``, float32 ``(B, latent_channels, (T - 1) // 4 + 1, H / 8, W / 8)``; ``logvar`` clamped
      to ``[-30, 20]`` (``DiagonalGaussianDistribution``). ``mean`` is the distribution's ``mode()`` (what the
      image-to-video pipeline takes, ``"argmax"``); not scaled (:func:`scale_latents`).

    Raises:
      ValueError: wrong rank or channel count; bad tiling settings.
    """
    _check(video, cfg.in_channels, "encode", "video")
    tiling = DEFAULT_TILING if tiling is None else tiling
    q = tiling.resolve(cfg)
    call = _calls(encode_tile, params, cfg, on_tile)
    t, h, w = video.shape[2:]
    s = cfg.spatial_compression_ratio
    spatial = tiling.spatial and (w > q["sample_width"] or h > q["sample_height"])

    def frames(x):
        if not spatial:
            return call(x)
        return _spatial_tiles(call, x, (q["sample_height"], q["sample_width"]),
                              (q["stride_height"], q["stride_width"]),
                              (q["latent_blend_height"], q["latent_blend_width"]),
                              (q["latent_stride_height"], q["latent_stride_width"]), (h // s, w // s))

    if tiling.temporal and t > q["sample_frames"]:
        moments = _temporal_tiles(frames, np.asarray(video), q["sample_frames"], q["stride_frames"],
                                  q["latent_blend_frames"], q["latent_stride_frames"], latent_frames(cfg, t),
                                  lambda n: latent_frames(cfg, n))
    else:
        moments = frames(np.asarray(video) if spatial else video)
    n = cfg.latent_channels
    return moments[:, :n], jnp.clip(moments[:, n:], -30.0, 20.0)


def decode(params: dict, cfg: HunyuanVideoVAEConfig, z: jax.Array, tiling: VAETiling | None = None,
           on_tile: Callable[[], None] | None = None) -> jax.Array:
    """Decode latents to video (``AutoencoderKLHunyuanVideo.decode(z).sample``), tiled as the reference tiles.

    The reference's ``_decode``: with ``tiling.temporal`` and more than ``latent_frames``
    (``tile_sample_min_num_frames // 4``, 4) latent frames, frame tiles of ``latent_frames + 1`` latent frames
    every ``latent_stride_frames`` (3), each spatially tiled too when ``tiling.spatial`` and the latents are
    larger than a tile, blended over ``blend_frames`` (4) video frames; else with ``tiling.spatial`` and
    latents larger than ``tile_sample_min / 8``, spatial tiles every ``tile_sample_stride / 8`` latents
    blended over ``blend_{height,width}`` (64) pixels; else one :func:`decode_tile` call. Each frame tile is a
    memory chunk of its own (no state passes between tiles).

    Args:
      params: VAE parameters (at least :data:`DECODER_PARTS`).
      cfg: the configuration.
      z: latents ``(B, latent_channels, t, h, w)``, already divided by the scaling factor
        (:func:`unscale_latents`); any ``t, h, w >= 1``.
      tiling: None: :data:`DEFAULT_TILING` (the reference without ``enable_tiling``: frame tiles only);
        ``VAETiling()``: after ``enable_tiling()`` (what the diffusers pipeline examples call).
      on_tile: called after each decoder call (progress).

    Returns:
      float32 video ``(B, out_channels, 4 (t - 1) + 1, 8 h, 8 w)`` (:func:`decoded_frames`), not clamped.

    Raises:
      ValueError: wrong rank or channel count; bad tiling settings.
    """
    _check(z, cfg.latent_channels, "decode", "latents")
    tiling = DEFAULT_TILING if tiling is None else tiling
    q = tiling.resolve(cfg)
    call = _calls(decode_tile, params, cfg, on_tile)
    t, h, w = z.shape[2:]
    s = cfg.spatial_compression_ratio
    spatial = tiling.spatial and (w > q["latent_width"] or h > q["latent_height"])

    def frames(x):
        if not spatial:
            return call(x)
        return _spatial_tiles(call, x, (q["latent_height"], q["latent_width"]),
                              (q["latent_stride_height"], q["latent_stride_width"]),
                              (q["blend_height"], q["blend_width"]), (q["stride_height"], q["stride_width"]),
                              (h * s, w * s))

    if tiling.temporal and t > q["latent_frames"]:
        return _temporal_tiles(frames, np.asarray(z), q["latent_frames"], q["latent_stride_frames"],
                               q["blend_frames"], q["stride_frames"], decoded_frames(cfg, t),
                               lambda n: decoded_frames(cfg, n))
    return frames(np.asarray(z) if spatial else z)


def scale_latents(cfg: HunyuanVideoVAEConfig, mean: jax.Array) -> jax.Array:
    """Encoder output -> diffusion-space latents: ``mean * scaling_factor`` (``HunyuanVideoImageToVideoPipeline``
    ``prepare_latents``; this VAE has no shift)."""
    return mean * cfg.scaling_factor


def unscale_latents(cfg: HunyuanVideoVAEConfig, z: jax.Array) -> jax.Array:
    """Diffusion-space latents -> decoder input: ``z / scaling_factor`` (``HunyuanVideoPipeline.__call__``
    divides, in the latents' dtype)."""
    return z / cfg.scaling_factor
