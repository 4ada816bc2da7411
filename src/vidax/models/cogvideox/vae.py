"""The CogVideoX video VAE (diffusers ``AutoencoderKLCogVideoX``) as pure JAX functions.

Reference: ``diffusers/models/autoencoders/autoencoder_kl_cogvideox.py``
(``AutoencoderKLCogVideoX``, ``CogVideoXEncoder3D``, ``CogVideoXDecoder3D``,
``CogVideoXResnetBlock3D``, ``CogVideoXSpatialNorm3D``, ``CogVideoXCausalConv3d``) and
``models/downsampling.py`` / ``models/upsampling.py`` (``CogVideoXDownsample3D``,
``CogVideoXUpsample3D``).

Layout
    Public functions take and return channels-first ``(B, C, T, H, W)`` arrays, as the
    reference VAE does. Inside the jitted chunk functions everything is channels-last
    ``(B, T, H, W, C)``.

Temporal chunks and the convolution cache
    The reference never runs the whole video at once: the encoder takes 8 frames per call
    (the first call ``8 + T % 8``), the decoder 2 latent frames per call (the first
    ``2 + T % 2``), and every ``kt = 3`` causal convolution hands its last 2 input frames to
    the next call (``conv_cache``). The chunking is not only a memory device: every
    GroupNorm normalises over the frames *of its chunk*, and the time resampling treats an
    odd first frame apart, so the chunks must be exactly the reference's. Here the cache is
    an explicit pytree (a nested dict mirroring the parameter paths, one ``(B, 2, H, W, C)``
    array per causal convolution) that :func:`encode_chunk` / :func:`decode_chunk` take and
    return; ``cache=None`` is the first chunk, whose causal padding repeats its first frame
    (the reference's ``pad_mode="first"``). All later chunks share one compiled program.

Spatial norm (decoder)
    Every decoder norm is ``CogVideoXSpatialNorm3D``: ``GroupNorm(f) * conv_y(zq) + conv_b(zq)``
    with ``zq`` the chunk's latent frames resized (nearest) to ``f``'s size; with an odd frame
    count the first frame is resized on its own.

Tiling
    :func:`tiled_decode` follows the reference's ``tiled_decode`` exactly: overlapping latent
    tiles decoded independently (each with its own temporal chunk loop), then blended with the
    tile above and the tile to the left over ``blend_extent`` rows/columns, each blended tile
    written back before it serves as a neighbour (paper Table 4 fault 14), and cropped.

Precision
    Convolutions take their inputs in the weights' dtype and accumulate in float32; the
    GroupNorms compute in float32 (float32 parameters).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint.keymap import Rule, conv, norm
from vidax.core.layers import causal_conv3d, conv3d, conv_jit
from vidax.core.params import VAE_ENCODER_HINT, ParamSpec, SpecTree, require_parts, unflatten
from vidax.core.tiling import blend as blend_tiles
from vidax.models.cogvideox.config import CogVideoXVAEConfig

#: Frames per encoder call and latent frames per decoder call (the reference's
#: ``num_sample_frames_batch_size`` and ``num_latent_frames_batch_size``).
ENCODE_FRAMES = 8
DECODE_LATENT_FRAMES = 2
#: Epsilon of the spatial norms' and the encoder output's GroupNorms (fixed in the reference).
FIXED_NORM_EPS = 1e-6

# ---------------------------------------------------------------------------------------------
# Parameter declaration and the key map (one walk gives both)
# ---------------------------------------------------------------------------------------------


class _Declaration:
    """Collects parameter specs (paths mirror diffusers module names) and key-map rules."""

    def __init__(self):
        self.specs: dict[str, ParamSpec] = {}
        self.rules: list[Rule] = []

    def _conv(self, key: str, shape: tuple[int, ...], dims: int):
        path = key.replace(".", "/")
        self.specs[f"{path}/kernel"] = ParamSpec(shape)
        self.specs[f"{path}/bias"] = ParamSpec((shape[-1],))
        self.rules += conv(key, path, dims=dims)

    def conv3d(self, key: str, cin: int, cout: int, k: int):
        self._conv(key, (k, k, k, cin, cout), 3)

    def causal(self, key: str, cin: int, cout: int, k: int = 3):
        # CogVideoXCausalConv3d wraps its Conv3d as `.conv`.
        self.conv3d(f"{key}.conv", cin, cout, k)

    def conv2d(self, key: str, cin: int, cout: int, k: int = 3):
        self._conv(key, (k, k, cin, cout), 2)

    def group_norm(self, key: str, dim: int):
        path = key.replace(".", "/")
        self.specs[f"{path}/scale"] = ParamSpec((dim,), fp32=True)
        self.specs[f"{path}/bias"] = ParamSpec((dim,), fp32=True)
        self.rules += norm(key, path)

    def spatial_norm(self, key: str, dim: int, zq: int):
        self.group_norm(f"{key}.norm_layer", dim)
        self.causal(f"{key}.conv_y", zq, dim, 1)
        self.causal(f"{key}.conv_b", zq, dim, 1)

    def resnet(self, key: str, cin: int, cout: int, zq: int | None):
        for name, dim in (("norm1", cin), ("norm2", cout)):
            if zq is None:
                self.group_norm(f"{key}.{name}", dim)
            else:
                self.spatial_norm(f"{key}.{name}", dim, zq)
        self.causal(f"{key}.conv1", cin, cout)
        self.causal(f"{key}.conv2", cout, cout)
        if cin != cout:  # CogVideoXSafeConv3d, kernel 1 (no `.conv` wrapper)
            self.conv3d(f"{key}.conv_shortcut", cin, cout, 1)


def _encoder_plan(cfg: CogVideoXVAEConfig) -> list[tuple[int, int, bool, bool]]:
    """Per down block: ``(in, out, has_downsampler, compress_time)``."""
    ch, plan, prev = cfg.block_out_channels, [], cfg.block_out_channels[0]
    for i, out in enumerate(ch):
        plan.append((prev, out, i != len(ch) - 1, i < cfg.temporal_levels))
        prev = out
    return plan


def _decoder_plan(cfg: CogVideoXVAEConfig) -> list[tuple[int, int, bool, bool]]:
    """Per up block: ``(in, out, has_upsampler, compress_time)``."""
    rev, plan = cfg.block_out_channels[::-1], []
    prev = rev[0]
    for i, out in enumerate(rev):
        plan.append((prev, out, i != len(rev) - 1, i < cfg.temporal_levels))
        prev = out
    return plan


@functools.lru_cache(maxsize=16)
def _declare(cfg: CogVideoXVAEConfig) -> _Declaration:
    d, z = _Declaration(), cfg.latent_channels
    ch = cfg.block_out_channels
    d.causal("encoder.conv_in", cfg.in_channels, ch[0])
    for i, (cin, cout, down, _) in enumerate(_encoder_plan(cfg)):
        for j in range(cfg.layers_per_block):
            d.resnet(f"encoder.down_blocks.{i}.resnets.{j}", cin if j == 0 else cout, cout, None)
        if down:
            d.conv2d(f"encoder.down_blocks.{i}.downsamplers.0.conv", cout, cout)
    for j in range(2):
        d.resnet(f"encoder.mid_block.resnets.{j}", ch[-1], ch[-1], None)
    d.group_norm("encoder.norm_out", ch[-1])
    d.causal("encoder.conv_out", ch[-1], 2 * z)
    d.causal("decoder.conv_in", z, ch[-1])
    for j in range(2):
        d.resnet(f"decoder.mid_block.resnets.{j}", ch[-1], ch[-1], z)
    for i, (cin, cout, up, _) in enumerate(_decoder_plan(cfg)):
        for j in range(cfg.layers_per_block + 1):
            d.resnet(f"decoder.up_blocks.{i}.resnets.{j}", cin if j == 0 else cout, cout, z)
        if up:
            d.conv2d(f"decoder.up_blocks.{i}.upsamplers.0.conv", cout, cout)
    d.spatial_norm("decoder.norm_out", ch[0], z)
    d.causal("decoder.conv_out", ch[0], cfg.out_channels)
    return d


def vae_specs_and_rules(cfg: CogVideoXVAEConfig) -> tuple[SpecTree, list[Rule]]:
    """The VAE's spec tree and its diffusers key-map rules, from one walk of the architecture.

    Paths mirror the diffusers module names with ``/`` for ``.`` (e.g.
    ``decoder/up_blocks/0/resnets/1/norm1/conv_y/conv/kernel``). Kernels are channels-last
    (``(kt, kh, kw, in, out)``, ``(kh, kw, in, out)``); GroupNorm parameters are float32 pins.
    """
    d = _declare(cfg)
    return unflatten(dict(d.specs)), list(d.rules)


def vae_specs(cfg: CogVideoXVAEConfig) -> SpecTree:
    """The VAE's spec tree (see :func:`vae_specs_and_rules`)."""
    return vae_specs_and_rules(cfg)[0]


def load_vae(path: str | os.PathLike, dtype: Any = np.float32) -> tuple[CogVideoXVAEConfig, dict]:
    """Load a diffusers ``vae`` folder (``config.json`` + safetensors) into ``(cfg, params)``.

    Raises:
      ValueError: an unsupported configuration. CheckpointError: tensors that do not match it.
    """
    from vidax.checkpoint.keymap import KeyMap
    from vidax.checkpoint.loader import load_params
    from vidax.checkpoint.safetensors_io import CheckpointReader

    path = Path(path)
    cfg = CogVideoXVAEConfig.from_dict(json.loads((path / "config.json").read_text()))
    specs, rules = vae_specs_and_rules(cfg)
    return cfg, load_params(CheckpointReader(path), KeyMap(rules), specs, dtype, source=str(path))


# ---------------------------------------------------------------------------------------------
# Building blocks (channels-last, pure)
# ---------------------------------------------------------------------------------------------


def _causal_conv(p: dict, x: jax.Array, cache: jax.Array | None) -> tuple[jax.Array, jax.Array | None]:
    """``CogVideoXCausalConv3d`` (``pad_mode="constant"``: stride 1, zero "same" padding in space).

    Time: the previous chunk's last ``kt - 1`` input frames are prepended; on the first chunk
    (``cache is None``) the first frame is repeated ``kt - 1`` times. The new cache is the last
    ``kt - 1`` frames of that concatenation.
    """
    kt, kh, kw = p["conv"]["kernel"].shape[:3]
    spatial = ((kh // 2, kh // 2), (kw // 2, kw // 2))
    if kt == 1:
        return conv3d(p["conv"], x, padding=((0, 0), *spatial)), None
    hist = kt - 1
    if cache is None:
        cache = jnp.repeat(x[:, :1], hist, axis=1)
    return causal_conv3d(p["conv"], x, cache, spatial)


def _group_norm(p: dict, x: jax.Array, groups: int, eps: float) -> jax.Array:
    """``nn.GroupNorm`` over ``(T, H, W, C / groups)`` of each group (the chunk's frames), in float32."""
    b, t, h, w, c = x.shape
    xf = x.astype(jnp.float32).reshape(b, t, h, w, groups, c // groups)
    mean = jnp.mean(xf, axis=(1, 2, 3, 5), keepdims=True)
    var = jnp.mean(jnp.square(xf - mean), axis=(1, 2, 3, 5), keepdims=True)
    y = ((xf - mean) * jax.lax.rsqrt(var + eps)).reshape(b, t, h, w, c)
    return (y * p["scale"].astype(jnp.float32) + p["bias"].astype(jnp.float32)).astype(x.dtype)


def _nearest_index(n_in: int, n_out: int) -> np.ndarray:
    """Source indices of PyTorch's ``interpolate(mode="nearest", size=n_out)`` along one axis."""
    if n_in == n_out:
        return np.arange(n_out)
    if n_out == 2 * n_in:
        return np.arange(n_out) >> 1
    scale = np.float32(n_in) / np.float32(n_out)
    return np.minimum(np.floor(np.arange(n_out, dtype=np.float32) * scale).astype(np.int64), n_in - 1)


def _resize_nearest(z: jax.Array, size: tuple[int, int, int]) -> jax.Array:
    """``F.interpolate(z, size=size)`` (nearest) for channels-last ``z (B, T, H, W, C)``."""
    for axis, n in zip((1, 2, 3), size):
        if z.shape[axis] != n:
            z = jnp.take(z, _nearest_index(z.shape[axis], n), axis=axis)
    return z


def _resize_nearest_broadcast(z: jax.Array, size: tuple[int, int, int]) -> jax.Array:
    """:func:`_resize_nearest` as a broadcast where every axis grows by a whole factor whose nearest indices are
    ``i // factor`` (a broadcast fuses into its consumer; a gather is materialised), else the gather."""
    b, t, h, w, c = z.shape
    factors = [n // m if n % m == 0 else 0 for m, n in zip((t, h, w), size)]
    if not all(f and np.array_equal(_nearest_index(m, n), np.arange(n) // f)
               for f, m, n in zip(factors, (t, h, w), size)):
        return _resize_nearest(z, size)
    ft, fh, fw = factors
    z = jnp.broadcast_to(z[:, :, None, :, None, :, None, :], (b, t, ft, h, fh, w, fw, c))
    return z.reshape(b, t * ft, h * fh, w * fw, c)


def _spatial_norm(p: dict, f: jax.Array, zq: jax.Array, groups: int) -> jax.Array:
    """``CogVideoXSpatialNorm3D``: ``GroupNorm(f) * conv_y(zq') + conv_b(zq')``, zq' = zq resized to f.

    ``conv_y`` and ``conv_b`` have 1x1x1 kernels (:class:`_Declaration`), which commute with nearest
    resizing (a gather of whole pixels): they run on ``zq`` at its own (latent) size and their outputs are
    resized, the same numbers as the reference's order. The resize is a gather in time (first frame on its
    own for an odd frame count, as the reference) on those small outputs, then a spatial broadcast that
    fuses into the norm's arithmetic: no full-size ``zq'`` or ``conv_y`` / ``conv_b`` outputs exist. Before,
    XLA computed those of every norm of the program early and held them (CogVideoX decoder at 9x128x128:
    16 of 72 MiB each at its peak).
    """
    t, h, w = f.shape[1:4]
    tz = zq.shape[1]
    if t > 1 and t % 2 == 1:  # the first frame is resized on its own
        index = np.concatenate([_nearest_index(1, 1), 1 + _nearest_index(tz - 1, t - 1)])
    else:
        index = _nearest_index(tz, t)

    def resize(z):
        if not np.array_equal(index, np.arange(tz)):
            z = jnp.take(z, index, axis=1)
        return _resize_nearest_broadcast(z, (t, h, w))

    y, b = (resize(_causal_conv(p[k], zq, None)[0]) for k in ("conv_y", "conv_b"))
    return _group_norm(p["norm_layer"], f, groups, FIXED_NORM_EPS) * y + b


def _get(cache: dict | None, *keys: str):
    for k in keys:
        if cache is None:
            return None
        cache = cache.get(k)
    return cache


def _resnet(p: dict, x: jax.Array, zq: jax.Array | None, cache: dict | None, cfg: CogVideoXVAEConfig):
    """``CogVideoXResnetBlock3D`` (no time embedding); spatial norms when ``zq`` is given."""
    g = cfg.norm_num_groups

    def norm(name, h):
        return _group_norm(p[name], h, g, cfg.norm_eps) if zq is None else _spatial_norm(p[name], h, zq, g)

    h = jax.nn.silu(norm("norm1", x))
    h, c1 = _causal_conv(p["conv1"], h, _get(cache, "conv1"))
    h = jax.nn.silu(norm("norm2", h))
    h, c2 = _causal_conv(p["conv2"], h, _get(cache, "conv2"))
    if "conv_shortcut" in p:
        x = conv3d(p["conv_shortcut"], x)
    return h + x, {"conv1": c1, "conv2": c2}


def _downsample(p: dict, x: jax.Array, compress_time: bool) -> jax.Array:
    """``CogVideoXDownsample3D``: optional time average-pooling (odd first frame kept), then a stride-2 conv."""
    if compress_time:
        t = x.shape[1]
        first, rest = (x[:, :1], x[:, 1:]) if t % 2 == 1 else (x[:, :0], x)
        if rest.shape[1] > 0:
            b, n, h, w, c = rest.shape
            pairs = rest[:, : n // 2 * 2].astype(jnp.float32).reshape(b, n // 2, 2, h, w, c)
            rest = ((pairs[:, :, 0] + pairs[:, :, 1]) / 2).astype(x.dtype)
        x = jnp.concatenate([first, rest], axis=1)
    # F.pad (0, 1, 0, 1): one zero column right, one zero row at the bottom; then 3x3 stride 2.
    return conv3d(p["conv"], x, strides=(1, 2, 2), padding=((0, 0), (0, 1), (0, 1)))


def _upsample(p: dict, x: jax.Array, compress_time: bool) -> jax.Array:
    """``CogVideoXUpsample3D``: nearest x2 in space (and in time, odd first frame kept), then a 3x3 conv."""
    x = jnp.repeat(jnp.repeat(x, 2, axis=2), 2, axis=3)
    t = x.shape[1]
    if compress_time and t > 1:
        if t % 2 == 1:
            x = jnp.concatenate([x[:, :1], jnp.repeat(x[:, 1:], 2, axis=1)], axis=1)
        else:
            x = jnp.repeat(x, 2, axis=1)
    return conv3d(p["conv"], x, padding=((0, 0), (1, 1), (1, 1)))


# ---------------------------------------------------------------------------------------------
# Encoder / decoder chunks
# ---------------------------------------------------------------------------------------------


def _encoder(p: dict, cfg: CogVideoXVAEConfig, x: jax.Array, cache: dict | None) -> tuple[jax.Array, dict]:
    new: dict = {}
    x, new["conv_in"] = _causal_conv(p["conv_in"], x, _get(cache, "conv_in"))
    blocks = {}
    for i, (_, _, down, compress_time) in enumerate(_encoder_plan(cfg)):
        bp, bc, resnets = p["down_blocks"][str(i)], _get(cache, "down_blocks", str(i)), {}
        for j in range(cfg.layers_per_block):
            x, resnets[str(j)] = _resnet(bp["resnets"][str(j)], x, None, _get(bc, "resnets", str(j)), cfg)
        if down:
            x = _downsample(bp["downsamplers"]["0"], x, compress_time)
        blocks[str(i)] = {"resnets": resnets}
    new["down_blocks"] = blocks
    mid = {}
    for j in range(2):
        x, mid[str(j)] = _resnet(p["mid_block"]["resnets"][str(j)], x, None, _get(cache, "mid_block", "resnets", str(j)), cfg)
    new["mid_block"] = {"resnets": mid}
    x = jax.nn.silu(_group_norm(p["norm_out"], x, cfg.norm_num_groups, FIXED_NORM_EPS))
    x, new["conv_out"] = _causal_conv(p["conv_out"], x, _get(cache, "conv_out"))
    return x, new


def _decoder(p: dict, cfg: CogVideoXVAEConfig, z: jax.Array, cache: dict | None) -> tuple[jax.Array, dict]:
    new: dict = {}
    x, new["conv_in"] = _causal_conv(p["conv_in"], z, _get(cache, "conv_in"))
    mid = {}
    for j in range(2):
        x, mid[str(j)] = _resnet(p["mid_block"]["resnets"][str(j)], x, z, _get(cache, "mid_block", "resnets", str(j)), cfg)
    new["mid_block"] = {"resnets": mid}
    blocks = {}
    for i, (_, _, up, compress_time) in enumerate(_decoder_plan(cfg)):
        bp, bc, resnets = p["up_blocks"][str(i)], _get(cache, "up_blocks", str(i)), {}
        for j in range(cfg.layers_per_block + 1):
            x, resnets[str(j)] = _resnet(bp["resnets"][str(j)], x, z, _get(bc, "resnets", str(j)), cfg)
        if up:
            x = _upsample(bp["upsamplers"]["0"], x, compress_time)
        blocks[str(i)] = {"resnets": resnets}
    new["up_blocks"] = blocks
    x = jax.nn.silu(_spatial_norm(p["norm_out"], x, z, cfg.norm_num_groups))
    x, new["conv_out"] = _causal_conv(p["conv_out"], x, _get(cache, "conv_out"))
    return x, new


#: Top-level parts of :func:`vae_specs` that encoding reads (a text-to-video pipeline loads them only on demand).
ENCODER_PARTS = ("encoder",)
#: Top-level parts of :func:`vae_specs` that decoding reads (all that a text-to-video pipeline loads).
DECODER_PARTS = ("decoder",)


def _encoder_dtype(params: dict):
    require_parts(params, ENCODER_PARTS, "VAE encoding", VAE_ENCODER_HINT)
    return params["encoder"]["conv_in"]["conv"]["kernel"].dtype


def _compute_dtype(params: dict):
    require_parts(params, DECODER_PARTS, "VAE decoding", "load the VAE's decoder parts")
    return params["decoder"]["conv_in"]["conv"]["kernel"].dtype


@conv_jit(static_argnames=("cfg",), donate_argnames=("cache",))
def encode_chunk(params: dict, cfg: CogVideoXVAEConfig, x: jax.Array, cache: dict | None = None) -> tuple[jax.Array, dict]:
    """One ``CogVideoXEncoder3D`` call with its convolution cache; jitted.

    Args:
      params: VAE parameters (:func:`vae_specs` structure).
      cfg: static configuration.
      x: video frames ``(B, in_channels, t, H, W)`` of one chunk (see :func:`encode_chunks`).
      cache: ``None`` for the first chunk, else the cache the previous call returned.
        Donated: its buffers are reused for the new cache, so it is deleted by the call; pass each
        cache once.

    Returns:
      ``(moments, cache)``: ``moments (B, 2 * latent_channels, t', H/8, W/8)`` in the compute
      dtype (mean channels, then log-variance, unclamped), and the new cache.
    """
    x = jnp.transpose(x, (0, 2, 3, 4, 1)).astype(_encoder_dtype(params))
    h, cache = _encoder(params["encoder"], cfg, x, cache)
    return jnp.transpose(h, (0, 4, 1, 2, 3)), cache


@conv_jit(static_argnames=("cfg",), donate_argnames=("cache",))
def decode_chunk(params: dict, cfg: CogVideoXVAEConfig, z: jax.Array, cache: dict | None = None) -> tuple[jax.Array, dict]:
    """One ``CogVideoXDecoder3D`` call with its convolution cache; jitted.

    Args:
      params: VAE parameters.
      cfg: static configuration.
      z: latent frames ``(B, latent_channels, t, h, w)`` of one chunk (see :func:`decode_chunks`),
        already divided by the scaling factor.
      cache: ``None`` for the first chunk, else the cache the previous call returned. All calls
        after the first share one compiled program per tile shape.
        Donated: its buffers are reused for the new cache, so it is deleted by the call; pass each
        cache once.

    Returns:
      ``(video, cache)``: float32 ``video (B, out_channels, t_out, 8h, 8w)`` (not clamped, as the
      reference); with 4x time compression ``t_out = 1 + 4 (t - 1)`` for an odd ``t`` and ``4 t``
      for an even one.
    """
    x = jnp.transpose(z, (0, 2, 3, 4, 1)).astype(_compute_dtype(params))
    y, cache = _decoder(params["decoder"], cfg, x, cache)
    return jnp.transpose(y.astype(jnp.float32), (0, 4, 1, 2, 3)), cache


# ---------------------------------------------------------------------------------------------
# Chunk loops (host)
# ---------------------------------------------------------------------------------------------


def frame_chunks(num_frames: int, batch: int) -> list[tuple[int, int]]:
    """The reference's frame batches ``[(start, stop), ...]`` (``_encode`` / ``_decode``).

    ``max(T // batch, 1)`` calls; the first takes ``batch + T % batch`` frames (all of them when
    ``T < batch``), the others ``batch`` each.
    """
    n, rem = max(num_frames // batch, 1), num_frames % batch
    return [(batch * k + (0 if k == 0 else rem), min(num_frames, batch * (k + 1) + rem)) for k in range(n)]


def _check(x: jax.Array, channels: int, what: str) -> None:
    if x.ndim != 5 or x.shape[1] != channels or x.shape[2] == 0:
        raise ValueError(f"{what}: expected (B, {channels}, T>=1, H, W), got shape {tuple(x.shape)}")


def encode(params: dict, cfg: CogVideoXVAEConfig, video: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Encode a video to its latent distribution (``AutoencoderKLCogVideoX.encode(x).latent_dist``).

    Frames go through :func:`encode_chunk` in the reference's batches (:func:`frame_chunks` with 8).

    Args:
      params: VAE parameters (any float dtype; computation in that dtype, float32 accumulation).
      cfg: the configuration.
      video: ``(B, in_channels, T, H, W)`` in ``[-1, 1]``; ``T`` is 1, or ``8k`` / ``8k + 1`` for
        the reference's own chunking to give ``1 + (T - 1) / 4`` latent frames.

    Returns:
      ``(mean, logvar)``, each float32 ``(B, latent_channels, T', H/8, W/8)``; ``logvar`` clamped
      to ``[-30, 20]`` (``DiagonalGaussianDistribution``). Not scaled; see :func:`scale_latents`.

    Raises:
      ValueError: wrong rank or channel count.
    """
    _check(video, cfg.in_channels, "encode")
    video = jnp.asarray(video)
    cache, outs = None, []
    for start, stop in frame_chunks(video.shape[2], ENCODE_FRAMES):
        h, cache = encode_chunk(params, cfg, video[:, :, start:stop], cache)
        outs.append(h)
    h = jnp.concatenate(outs, axis=2).astype(jnp.float32)
    z = cfg.latent_channels
    return h[:, :z], jnp.clip(h[:, z:], -30.0, 20.0)


def _decode_untiled(params: dict, cfg: CogVideoXVAEConfig, z: jax.Array, on_chunk=None) -> jax.Array:
    cache, outs = None, []
    for start, stop in frame_chunks(z.shape[2], DECODE_LATENT_FRAMES):
        y, cache = decode_chunk(params, cfg, z[:, :, start:stop], cache)
        outs.append(y)
        if on_chunk is not None:
            jax.block_until_ready(y)
            on_chunk()
    return jnp.concatenate(outs, axis=2)


@dataclass(frozen=True)
class VAETiling:
    """Spatial tiling of the decoder (the reference's ``enable_tiling`` settings).

    Attributes:
      tile_sample_min_height, tile_sample_min_width: tile size in pixels; ``None``: half the
        VAE config's ``sample_height`` / ``sample_width`` (240 x 360), as the reference.
      tile_overlap_factor_height, tile_overlap_factor_width: overlap fractions (1/6, 1/5).
    """

    tile_sample_min_height: int | None = None
    tile_sample_min_width: int | None = None
    tile_overlap_factor_height: float = 1 / 6
    tile_overlap_factor_width: float = 1 / 5

    def resolve(self, cfg: CogVideoXVAEConfig) -> dict[str, int]:
        """The integer quantities of the reference's ``tiled_decode`` (same Python expressions)."""
        sh = self.tile_sample_min_height or cfg.sample_height // 2
        sw = self.tile_sample_min_width or cfg.sample_width // 2
        lh, lw = int(sh / cfg.spatial_compression), int(sw / cfg.spatial_compression)
        fh, fw = self.tile_overlap_factor_height, self.tile_overlap_factor_width
        bh, bw = int(sh * fh), int(sw * fw)
        return {
            "latent_height": lh, "latent_width": lw,
            "stride_height": int(lh * (1 - fh)), "stride_width": int(lw * (1 - fw)),
            "blend_height": bh, "blend_width": bw,
            "keep_height": sh - bh, "keep_width": sw - bw,
        }


def tiled_decode(params: dict, cfg: CogVideoXVAEConfig, z: jax.Array, tiling: VAETiling = VAETiling(),
                 on_chunk: Callable[[], None] | None = None) -> jax.Array:
    """Decode in overlapping spatial tiles (``AutoencoderKLCogVideoX.tiled_decode``), exactly as the reference.

    Tiles of ``latent_height x latent_width`` latents start every ``stride`` latents (the last
    ones may be smaller); each is decoded on its own with the temporal chunk loop. Then, in
    raster order, each tile's first ``blend_height`` rows are blended with the last rows of the
    tile above, and its first ``blend_width`` columns with the tile to the left, with linear
    weights; the blended tile replaces the stored one *before* it serves as the neighbour of the
    tiles below and to its right (the reference blends in place; paper Table 4 fault 14). Each
    tile keeps its first ``keep_height x keep_width`` pixels.

    Args:
      z: latents ``(B, latent_channels, T, h, w)``, already divided by the scaling factor.
      tiling: tile sizes and overlaps.
      on_chunk: called after each decoded chunk of each tile (progress).

    Returns:
      float32 ``(B, out_channels, T_out, H, W)``.
    """
    _check(z, cfg.latent_channels, "tiled_decode")
    q = tiling.resolve(cfg)
    z = jnp.asarray(z)
    h, w = z.shape[3:]
    rows = [
        [_decode_untiled(params, cfg, z[:, :, :, i : i + q["latent_height"], j : j + q["latent_width"]], on_chunk)
         for j in range(0, w, q["stride_width"])]
        for i in range(0, h, q["stride_height"])
    ]
    out_rows = []
    for i, row in enumerate(rows):
        kept = []
        for j, tile in enumerate(row):
            if i > 0:
                tile = blend_tiles(rows[i - 1][j], tile, q["blend_height"], axis=3)
            if j > 0:
                tile = blend_tiles(row[j - 1], tile, q["blend_width"], axis=4)
            row[j] = tile  # written back: the blended tile is the neighbour of the next ones
            kept.append(tile[:, :, :, : q["keep_height"], : q["keep_width"]])
        out_rows.append(jnp.concatenate(kept, axis=4))
    return jnp.concatenate(out_rows, axis=3)


def decode(params: dict, cfg: CogVideoXVAEConfig, z: jax.Array, tiling: VAETiling | None = None,
           on_chunk: Callable[[], None] | None = None) -> jax.Array:
    """Decode latents to video (``AutoencoderKLCogVideoX.decode(z).sample``).

    Latent frames go through :func:`decode_chunk` in the reference's batches (:func:`frame_chunks`
    with 2: first ``2 + T % 2``, then 2 at a time). With ``tiling``, a latent larger than one tile
    is decoded by :func:`tiled_decode` (the reference's condition: ``h`` or ``w`` above the
    latent tile size).

    Args:
      params: VAE parameters.
      cfg: the configuration.
      z: latents ``(B, latent_channels, T, h, w)``, already divided by the scaling factor
        (:func:`unscale_latents`).
      tiling: ``None`` (no tiling) or the tile settings.
      on_chunk: called after each decoded chunk (of each tile; progress).

    Returns:
      float32 video ``(B, out_channels, T_out, 8h, 8w)``, not clamped (:func:`decoded_frames`:
      ``4 T - 3`` for odd ``T``, ``4 T`` for even ``T``; 13 latent frames give 49).

    Raises:
      ValueError: wrong rank or channel count.
    """
    _check(z, cfg.latent_channels, "decode")
    if tiling is not None:
        q = tiling.resolve(cfg)
        if z.shape[4] > q["latent_width"] or z.shape[3] > q["latent_height"]:
            return tiled_decode(params, cfg, z, tiling, on_chunk)
    return _decode_untiled(params, cfg, jnp.asarray(z), on_chunk)


def scale_latents(cfg: CogVideoXVAEConfig, mean: jax.Array) -> jax.Array:
    """Encoder output -> diffusion-space latents: ``z * scaling_factor`` (``CogVideoXImageToVideoPipeline``)."""
    return mean * cfg.scaling_factor


def unscale_latents(cfg: CogVideoXVAEConfig, z: jax.Array) -> jax.Array:
    """Diffusion-space latents -> decoder input: ``1 / scaling_factor * z`` (``CogVideoXPipeline.decode_latents``).

    The reciprocal is a Python float multiplied into the (float32) latents, as the reference.
    """
    return (1 / cfg.scaling_factor) * z


def decoded_frames(cfg: CogVideoXVAEConfig, latent_frames: int) -> int:
    """Video frames :func:`decode` makes from ``latent_frames`` latent frames (49 from 13)."""

    def up(t: int) -> int:  # CogVideoXUpsample3D with compress_time
        return t if t == 1 else (1 + 2 * (t - 1) if t % 2 else 2 * t)

    total = 0
    for a, b in frame_chunks(latent_frames, DECODE_LATENT_FRAMES):
        t = b - a
        for _ in range(cfg.temporal_levels):
            t = up(t)
        total += t
    return total
