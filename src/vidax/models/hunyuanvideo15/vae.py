"""The HunyuanVideo-1.5 VAE (32 latent channels, 16x space, 4x time) as pure JAX functions.

References: the original release, ``Tencent-Hunyuan/HunyuanVideo-1.5``
``hyvideo/models/autoencoders/hunyuanvideo_15_vae.py`` (``AutoencoderKLConv3D``, ``Encoder``, ``Decoder``,
``ResnetBlock``, ``AttnBlock``, ``Downsample``, ``Upsample``, ``CausalConv3d``, ``RMS_norm``) and its pipeline
(``hyvideo/pipelines/hunyuan_video_pipeline.py``); diffusers 0.42.1 ``AutoencoderKLHunyuanVideo15``
(``models/autoencoders/autoencoder_kl_hunyuanvideo15.py``: the same modules as ``HunyuanVideo15*``) and
``HunyuanVideo15Pipeline`` / ``HunyuanVideo15ImageToVideoPipeline``. Where the two differ the original is followed
(``docs/design.md``, "HunyuanVideo-1.5").

Architecture (the release: widths 128/256/512/1024/1024, 2 resnets per encoder block, 3 per decoder block)
    Every 3x3x3 convolution is causal: the input is padded by repeating its edge values, the first frame twice in
    front in time and one pixel on each side in space, then convolved without padding. The norms are ``RMS_norm``
    over channels at each position (``x / max(|x|, 1e-12) * sqrt(C) * gamma``): nothing mixes positions but the
    convolutions and the mid blocks' attention. Resampling moves pixels between space and channels ("DCAE"
    rearrangements) and adds a parameter-free shortcut: a downsampler folds 2x2 pixels (and 2 frames, after the
    first frame, which is folded alone and duplicated) into channels after a convolution, plus the input folded the
    same way and averaged over channel groups; an upsampler unfolds channels into 2x2 pixels (and 2 frames, the first
    frame's half dropped), plus the input unfolded and its channels repeated. Encoder block ``i`` halves space for
    ``i < log2(16)`` and time for the last ``log2(4)`` of those, so ``T = 4k + 1`` frames give ``k + 1`` latent
    frames; the decoder doubles time in its first ``log2(4)`` blocks and space in its first ``log2(16)``. The mid
    blocks (resnet, attention, resnet) attend over all ``T * H * W`` positions with a frame-causal mask. The encoder
    ends in ``conv_out(SiLU(norm_out(h)))`` plus ``h`` averaged down to the ``2 * latent_channels`` moments; the
    decoder starts with ``conv_in(z)`` plus ``z``'s channels repeated up to its width. No ``quant_conv``.

Layout
    Public functions take and return channels-first ``(B, C, T, H, W)`` arrays, as the reference. Inside the jitted
    programs everything is channels-last ``(B, T, H, W, C)``.

One call per tile, no temporal cache
    The reference runs the encoder and decoder over all frames of a tile at once (the mid-block attention spans
    them), and neither the original nor diffusers tiles time (the original's ``temporal_tiled_*`` raise). Memory is
    bounded by spatial tiles (:class:`VAETiling`, the tile loop on the host, :func:`encode` / :func:`decode`), each
    tile one whole-program call (:func:`encode_tile` / :func:`decode_tile`, one compiled program per tile shape),
    blended as the reference blends, each blended tile written back before it is the next tile's neighbour.

Precision
    Convolutions and the attention projections take their inputs in the weights' dtype and accumulate in float32;
    the RMS norms (with their float32 ``gamma``, ``ParamSpec.fp32``) and the SiLU after them compute in float32 and
    round once; the resampling shortcuts average in float32; attention scores and softmax are float32. Tiles come
    out and are blended in float32.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.core.attention import AttentionImpl, attention
from vidax.core.config_values import config_values
from vidax.core.layers import conv3d, conv_jit, linear
from vidax.core.params import VAE_ENCODER_HINT, require_parts
from vidax.core.tiling import blend as blend_tiles

#: ``F.normalize``'s floor on the channel norm in ``RMS_norm``.
NORM_EPS = 1e-12
#: Query rows per attention chunk in the mid blocks (memory O(chunk x keys) per frame).
ATTENTION_QUERY_CHUNK = 1024
#: Top-level parts of the parameter tree that encoding reads (image-to-video loads them).
ENCODER_PARTS = ("encoder",)
#: Top-level parts that decoding reads (all that a text-to-video pipeline loads).
DECODER_PARTS = ("decoder",)
_F32 = jnp.float32

# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HunyuanVideo15VAEConfig:
    """Configuration of the VAE: the keys of a diffusers ``vae/config.json`` (``AutoencoderKLHunyuanVideo15``).

    Hashable (scalars and tuples): a static argument of the jitted programs. Defaults are the release's.

    Attributes:
      in_channels, out_channels: video channels (3).
      latent_channels: latent channels (32).
      block_out_channels: encoder block widths (the decoder's reversed): (128, 256, 512, 1024, 1024).
      layers_per_block: resnets per encoder block (2; the decoder has one more).
      spatial_compression_ratio: pixels per latent pixel (16; the original's ``ffactor_spatial``): a power of 2,
        the first ``log2`` of it blocks resample space.
      temporal_compression_ratio: frames per latent frame after the first (4; ``ffactor_temporal``): a power of 2
        up to the spatial ratio; ``T = 4k + 1`` frames -> ``k + 1``.
      downsample_match_channel, upsample_match_channel: a resampler's output has the next block's width (True, as
        released) or its own.
      scaling_factor: latents are ``mean * scaling_factor`` in diffusion space (1.03682); no shift.
    """

    in_channels: int = 3
    out_channels: int = 3
    latent_channels: int = 32
    block_out_channels: tuple[int, ...] = (128, 256, 512, 1024, 1024)
    layers_per_block: int = 2
    spatial_compression_ratio: int = 16
    temporal_compression_ratio: int = 4
    downsample_match_channel: bool = True
    upsample_match_channel: bool = True
    scaling_factor: float = 1.03682

    def __post_init__(self):
        for f in dataclasses.fields(self):
            if isinstance(getattr(self, f.name), list):
                object.__setattr__(self, f.name, tuple(getattr(self, f.name)))
        problems = _config_problems(self)
        if problems:
            raise ValueError("HunyuanVideo-1.5 VAE config: unsupported " + "; ".join(problems) + " (fix these values "
                             "in the VAE's config.json)")

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> HunyuanVideo15VAEConfig:
        """Build from a diffusers ``vae/config.json`` dict (``AutoencoderKLHunyuanVideo15``).

        Keys that are not ``AutoencoderKLHunyuanVideo15`` arguments are left out, as diffusers leaves them out.

        Raises:
          ValueError: ``_class_name`` is another class (the original release's ``AutoencoderKLConv3D`` goes through
            :meth:`from_original_dict`); a value of the wrong type; an unsupported setting (each named).
        """
        name = config.get("_class_name")
        if name == "AutoencoderKLConv3D":
            raise ValueError("vae config.json is the original release's AutoencoderKLConv3D: read it with "
                             "HunyuanVideo15VAEConfig.from_original_dict (load_vae does)")
        if name not in (None, "AutoencoderKLHunyuanVideo15"):
            raise ValueError(f"vae config.json is for {name!r}, not 'AutoencoderKLHunyuanVideo15'")
        return cls(**config_values(cls, config, "HunyuanVideo-1.5 VAE config"))

    @classmethod
    def from_original_dict(cls, config: dict[str, Any]) -> HunyuanVideo15VAEConfig:
        """Build from the original release's ``vae/config.json`` (``AutoencoderKLConv3D``).

        The same architecture under other names: ``ffactor_spatial`` / ``ffactor_temporal`` are the compression
        ratios. ``AutoencoderKLConv3D`` has no defaults for its architecture, so every one of those keys must be
        present. ``sample_size`` / ``sample_tsize`` are that class's initial tile sizes, which its pipeline replaces
        (``set_tile_sample_min_size``): tiling is :class:`VAETiling`'s, not the config's. ``shift_factor`` must be
        null or 0: the original pipeline adds it before decoding but never subtracts it after encoding, and the
        release has none.

        Raises:
          ValueError: another ``_class_name``; a missing key; a shift; an unsupported setting (each named).
        """
        name = config.get("_class_name")
        if name not in (None, "AutoencoderKLConv3D"):
            raise ValueError(f"original vae config.json is for {name!r}, not 'AutoencoderKLConv3D'")
        required = ("in_channels", "out_channels", "latent_channels", "block_out_channels", "layers_per_block",
                    "ffactor_spatial", "ffactor_temporal", "scaling_factor")
        missing = [k for k in required if config.get(k) is None]
        if missing:
            raise ValueError(f"original VAE config.json lacks {missing} (AutoencoderKLConv3D has no default for them; "
                             "re-download the release's vae/config.json)")
        if config.get("shift_factor") not in (None, 0, 0.0):
            raise ValueError(f"original VAE config: shift_factor={config['shift_factor']!r} is not supported (the "
                             "release has none: null)")
        values = {k: v for k, v in config.items() if not k.startswith("ffactor_")}
        values.pop("spatial_compression_ratio", None)  # not AutoencoderKLConv3D arguments: it would reject them
        values.pop("temporal_compression_ratio", None)
        values["spatial_compression_ratio"] = config["ffactor_spatial"]
        values["temporal_compression_ratio"] = config["ffactor_temporal"]
        return cls(**config_values(cls, values, "HunyuanVideo-1.5 original VAE config"))


def _power_of_two(v: int) -> bool:
    return isinstance(v, int) and v >= 1 and not v & (v - 1)


def _config_problems(cfg: HunyuanVideo15VAEConfig) -> list[str]:
    problems = []
    ch, n = cfg.block_out_channels, len(cfg.block_out_channels)
    if min(cfg.in_channels, cfg.out_channels, cfg.latent_channels) < 1:
        problems.append("in_channels, out_channels and latent_channels must be positive")
    if not 1 <= n <= 16 or min(ch, default=0) < 1:
        return problems + [f"block_out_channels={list(ch)} (1 to 16 positive widths)"]
    if not 1 <= cfg.layers_per_block <= 64:
        problems.append(f"layers_per_block={cfg.layers_per_block} (1 to 64)")
    s, t = cfg.spatial_compression_ratio, cfg.temporal_compression_ratio
    if not _power_of_two(s) or s.bit_length() - 1 > n:
        return problems + [f"spatial_compression_ratio={s} (a power of 2 up to 2**len(block_out_channels): the first "
                           "log2 of it blocks halve space)"]
    if not _power_of_two(t) or t > s:
        return problems + [f"temporal_compression_ratio={t} (a power of 2 up to spatial_compression_ratio: a block "
                           "that halves time halves space too)"]
    if not (math.isfinite(cfg.scaling_factor) and cfg.scaling_factor > 0):
        problems.append(f"scaling_factor={cfg.scaling_factor} (the pipelines divide the latents by it: 1.03682)")
    z = cfg.latent_channels
    if ch[-1] % (2 * z):
        problems.append(f"block_out_channels[-1]={ch[-1]} (a multiple of 2 * latent_channels = {2 * z}: the encoder's "
                        "output shortcut averages it down to the moments, the decoder's input shortcut repeats the "
                        "latents up to it)")
    for side, stages in (("encoder", encoder_stages), ("decoder", decoder_stages)):
        try:
            plan = stages(cfg)
        except IndexError:
            match = "downsample_match_channel" if side == "encoder" else "upsample_match_channel"
            problems.append(f"{match}=True with the last block resampling ({side} block {n - 1} has no next block "
                            "whose width to match)")
            continue
        for i, st in enumerate(plan):
            if st.resample:
                problems += _resample_problems(side, i, st)
    return problems


def _resample_problems(side: str, i: int, st: Stage) -> list[str]:
    """The channel counts a resampler's rearrangements need (the reference's reshapes fail otherwise)."""
    f = 8 if st.temporal else 4
    what = f"{side} block {i}'s {'down' if side == 'encoder' else 'up'}sampler ({st.cout} -> {st.resample_out} " \
           f"channels, {'time and space' if st.temporal else 'space'})"
    if side == "encoder":
        ok = st.resample_out % f == 0 and (f * st.cout) % st.resample_out == 0
        ok = ok and (not st.temporal or ((f * st.cout) // st.resample_out) % 2 == 0)
        need = f"{f} divides its output and its output divides {f} x its input" + (" an even number of times"
                                                                                   if st.temporal else "")
    else:
        # (in space only the input is repeated before it is unfolded, so only the repeat count must be whole)
        ok = (f * st.resample_out) % st.cout == 0
        ok = ok and (not st.temporal or (st.cout % f == 0 and ((f * st.resample_out) // st.cout) % 2 == 0))
        need = (f"{f} divides its input, which divides {f} x its output an even number of times" if st.temporal
                else f"its input divides {f} x its output")
    return [] if ok else [f"{what}: needs {need}"]


# ---------------------------------------------------------------------------------------------
# Architecture plan: read once from the config, shared by the declaration and the forward functions
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stage:
    cin: int  # width entering the block (its first resnet's input)
    cout: int  # width of its resnets
    layers: int  # resnets
    resample_out: int  # width after its resampler (0: none)
    temporal: bool  # the resampler halves / doubles time too

    @property
    def resample(self) -> bool:
        return self.resample_out > 0


@functools.lru_cache(maxsize=32)
def encoder_stages(cfg: HunyuanVideo15VAEConfig) -> tuple[Stage, ...]:
    """``Encoder.__init__``: block ``i`` downsamples space for ``i < log2(s)``, time too for ``i >= log2(s / t)``;
    its downsampler outputs the next block's width when ``downsample_match_channel``.

    Raises:
      IndexError: a matched downsampler in the last block (the reference raises the same).
    """
    ch = cfg.block_out_channels
    n_s = cfg.spatial_compression_ratio.bit_length() - 1
    n_st = (cfg.spatial_compression_ratio // cfg.temporal_compression_ratio).bit_length() - 1
    stages, cin = [], ch[0]
    for i, cout in enumerate(ch):
        out = (ch[i + 1] if cfg.downsample_match_channel else cout) if i < n_s else 0
        stages.append(Stage(cin, cout, cfg.layers_per_block, out, n_st <= i < n_s))
        cin = out or cout
    return tuple(stages)


@functools.lru_cache(maxsize=32)
def decoder_stages(cfg: HunyuanVideo15VAEConfig) -> tuple[Stage, ...]:
    """``Decoder.__init__`` (widths reversed): block ``i`` upsamples space for ``i < log2(s)``, time too for
    ``i < log2(t)``; ``layers_per_block + 1`` resnets per block.

    Raises:
      IndexError: a matched upsampler in the last block.
    """
    ch = cfg.block_out_channels[::-1]
    n_s = cfg.spatial_compression_ratio.bit_length() - 1
    n_t = cfg.temporal_compression_ratio.bit_length() - 1
    stages, cin = [], ch[0]
    for i, cout in enumerate(ch):
        out = (ch[i + 1] if cfg.upsample_match_channel else cout) if i < n_s else 0
        stages.append(Stage(cin, cout, cfg.layers_per_block + 1, out, i < n_t))
        cin = out or cout
    return tuple(stages)


# ---------------------------------------------------------------------------------------------
# Building blocks (channels-last, pure)
# ---------------------------------------------------------------------------------------------


def _causal_conv(p: dict, x: jax.Array) -> jax.Array:
    """``CausalConv3d``: ``F.pad(mode="replicate")`` by ``kt - 1`` copies of the first frame in front and ``k // 2``
    pixels on each side in space, then the convolution without padding."""
    kt, kh, kw = p["conv"]["kernel"].shape[:3]
    x = jnp.pad(x, ((0, 0), (kt - 1, 0), (kh // 2, kh // 2), (kw // 2, kw // 2), (0, 0)), mode="edge")
    return conv3d(p["conv"], x)


def _rms_norm(p: dict, x: jax.Array) -> jax.Array:
    """``RMS_norm(images=False)``: ``F.normalize(x, dim=channels) * sqrt(C) * gamma`` in float32."""
    xf = x.astype(_F32)
    norm = jnp.sqrt(jnp.sum(jnp.square(xf), axis=-1, keepdims=True))
    return xf / jnp.maximum(norm, NORM_EPS) * math.sqrt(x.shape[-1]) * p["scale"].reshape(-1).astype(_F32)


def _norm_silu(p: dict, x: jax.Array) -> jax.Array:
    """RMS norm then SiLU, both in float32, rounded once to ``x``'s dtype (the next convolution's input)."""
    return jax.nn.silu(_rms_norm(p, x)).astype(x.dtype)


def _resnet(p: dict, x: jax.Array) -> jax.Array:
    """``ResnetBlock``: norm, SiLU, conv, norm, SiLU, conv, plus the (1x1x1, ``nin_shortcut``) shortcut."""
    h = _causal_conv(p["conv1"], _norm_silu(p["norm1"], x))
    h = _causal_conv(p["conv2"], _norm_silu(p["norm2"], h))
    if "conv_shortcut" in p:
        x = conv3d(p["conv_shortcut"], x)
    return (x + h).astype(h.dtype)


def _pointwise(p: dict, x: jax.Array) -> jax.Array:
    """A 1x1x1 ``nn.Conv3d`` as the matmul it is."""
    kernel = p["kernel"]
    return linear({"kernel": kernel.reshape(kernel.shape[-2:]), "bias": p["bias"]}, x)


def _attention(p: dict, x: jax.Array) -> jax.Array:
    """``AttnBlock``: one head of width C over all ``T H W`` positions (RMS norm first, 1x1x1 q/k/v/proj_out, residual
    added) under ``prepare_causal_attention_mask``: a query of frame ``f`` attends the keys of frames ``<= f``, i.e.
    the first ``(f + 1) H W`` positions in ``(t, h, w)`` order.

    Frame by frame (``lax.map``): frame ``f``'s queries against all keys with the later frames cut by ``kv_lengths``
    (the same softmax as the reference's ``-inf`` mask), in query chunks of :data:`ATTENTION_QUERY_CHUNK`
    (memory O(chunk x T H W)).
    """
    b, t, h, w, c = x.shape
    hw = h * w
    y = _rms_norm(p["norm"], x).astype(x.dtype)
    q, k, v = (_pointwise(p[name], y) for name in ("to_q", "to_k", "to_v"))
    q = q.reshape(b, t, hw, c)
    k, v = k.reshape(b, t * hw, 1, c), v.reshape(b, t * hw, 1, c)

    def frame(args):
        qf, f = args
        lengths = jnp.full((b,), (f + 1) * hw, jnp.int32)
        return attention(qf[:, :, None], k, v, implementation=AttentionImpl.CHUNKED, kv_lengths=lengths,
                         query_chunk_size=ATTENTION_QUERY_CHUNK)

    o = jax.lax.map(frame, (jnp.moveaxis(q, 1, 0), jnp.arange(t)))  # (t, b, hw, 1, c)
    o = jnp.moveaxis(o[:, :, :, 0], 0, 1).reshape(b, t, h, w, c)
    return (_pointwise(p["proj_out"], o) + x).astype(x.dtype)


def _mid_block(p: dict, x: jax.Array) -> jax.Array:
    """``mid``: ``block_1``, ``attn_1``, ``block_2`` (diffusers: ``resnets.0``, ``attentions.0``, ``resnets.1``)."""
    x = _resnet(p["resnets"]["0"], x)
    x = _attention(p["attentions"]["0"], x)
    return _resnet(p["resnets"]["1"], x)


def _fold(x: jax.Array, rt: int) -> jax.Array:
    """``rearrange("b c (f r1) (h r2) (w r3) -> b (r1 r2 r3 c) f h w", r2=2, r3=2)`` channels-last: ``(B, T, H, W, C)``
    -> ``(B, T / rt, H / 2, W / 2, rt * 4 * C)``, channel index ``((i1 * 2 + i2) * 2 + i3) * C + c``."""
    b, t, h, w, c = x.shape
    x = x.reshape(b, t // rt, rt, h // 2, 2, w // 2, 2, c).transpose(0, 1, 3, 5, 2, 4, 6, 7)
    return x.reshape(b, t // rt, h // 2, w // 2, rt * 4 * c)


def _unfold(x: jax.Array, rt: int) -> jax.Array:
    """The inverse rearrangement ``"b (r1 r2 r3 c) f h w -> b c (f r1) (h r2) (w r3)"``, channels-last."""
    b, t, h, w, c = x.shape
    c //= rt * 4
    x = x.reshape(b, t, h, w, rt, 2, 2, c).transpose(0, 1, 4, 2, 5, 3, 6, 7)
    return x.reshape(b, t * rt, h * 2, w * 2, c)


def _group_mean(x: jax.Array, groups: int) -> jax.Array:
    """``x.view(B, groups, C // groups, ...).mean(dim=2)`` channels-last, in float32."""
    return jnp.mean(x.astype(_F32).reshape(*x.shape[:-1], groups, x.shape[-1] // groups), axis=-1)


def _downsample(p: dict, x: jax.Array, temporal: bool) -> jax.Array:
    """``Downsample``: the convolution's output folded into channels (2x2 pixels, and pairs of frames after the first
    frame, which is folded alone and duplicated on channels) plus ``x`` folded the same way and averaged over channel
    groups down to the output width."""
    h = _causal_conv(p["conv"], x)
    cout = h.shape[-1] * (8 if temporal else 4)
    if not temporal:
        return (_fold(h, 1) + _group_mean(_fold(x, 1), cout)).astype(h.dtype)
    first = _fold(h[:, :1], 1)
    hs, shortcut = [jnp.concatenate([first, first], axis=-1)], [_group_mean(_fold(x[:, :1], 1), cout)]
    if x.shape[1] > 1:
        hs.append(_fold(h[:, 1:], 2))
        shortcut.append(_group_mean(_fold(x[:, 1:], 2), cout))
    return (jnp.concatenate(hs, axis=1) + jnp.concatenate(shortcut, axis=1)).astype(h.dtype)


def _upsample(p: dict, x: jax.Array, temporal: bool) -> jax.Array:
    """``Upsample``: the convolution's output unfolded from channels into 2x2 pixels (and pairs of frames after the
    first frame, whose unfolded channels keep their first half) plus ``x`` unfolded the same way with its channels
    repeated (``repeat_interleave``) up to the output width."""
    h = _causal_conv(p["conv"], x)
    f = 8 if temporal else 4
    cout = h.shape[-1] // f
    repeats = f * cout // x.shape[-1]
    if not temporal:  # the reference repeats before unfolding here, after unfolding below
        return (_unfold(h, 1) + _unfold(jnp.repeat(x, repeats, axis=-1), 1)).astype(h.dtype)
    hs = [_unfold(h[:, :1], 1)[..., :cout]]
    shortcut = [jnp.repeat(_unfold(x[:, :1], 1), repeats // 2, axis=-1)]
    if x.shape[1] > 1:
        hs.append(_unfold(h[:, 1:], 2))
        shortcut.append(jnp.repeat(_unfold(x[:, 1:], 2), repeats, axis=-1))
    return (jnp.concatenate(hs, axis=1) + jnp.concatenate(shortcut, axis=1)).astype(h.dtype)


def _encoder(p: dict, cfg: HunyuanVideo15VAEConfig, x: jax.Array) -> jax.Array:
    """``Encoder``: ``(B, T, H, W, in)`` -> moments ``(B, (T - 1) / 4 + 1, H / 16, W / 16, 2 latent_channels)``."""
    x = _causal_conv(p["conv_in"], x)
    for i, st in enumerate(encoder_stages(cfg)):
        bp = p["down_blocks"][str(i)]
        with jax.named_scope(f"down_block_{i}"):
            for j in range(st.layers):
                x = _resnet(bp["resnets"][str(j)], x)
            if st.resample:
                x = _downsample(bp["downsamplers"]["0"], x, st.temporal)
    with jax.named_scope("mid_block"):
        x = _mid_block(p["mid_block"], x)
    shortcut = _group_mean(x, 2 * cfg.latent_channels)
    return _causal_conv(p["conv_out"], _norm_silu(p["norm_out"], x)).astype(_F32) + shortcut


def _decoder(p: dict, cfg: HunyuanVideo15VAEConfig, z: jax.Array) -> jax.Array:
    """``Decoder``: ``(B, t, h, w, latent_channels)`` -> ``(B, 4 (t - 1) + 1, 16 h, 16 w, out)``."""
    x = _causal_conv(p["conv_in"], z)
    x = (x + jnp.repeat(z, x.shape[-1] // z.shape[-1], axis=-1)).astype(x.dtype)
    with jax.named_scope("mid_block"):
        x = _mid_block(p["mid_block"], x)
    for i, st in enumerate(decoder_stages(cfg)):
        bp = p["up_blocks"][str(i)]
        with jax.named_scope(f"up_block_{i}"):
            for j in range(st.layers):
                x = _resnet(bp["resnets"][str(j)], x)
            if st.resample:
                x = _upsample(bp["upsamplers"]["0"], x, st.temporal)
    return _causal_conv(p["conv_out"], _norm_silu(p["norm_out"], x))


# ---------------------------------------------------------------------------------------------
# One reference call (a tile): the jitted programs
# ---------------------------------------------------------------------------------------------


def _encoder_dtype(params: dict):
    require_parts(params, ENCODER_PARTS, "VAE encoding", VAE_ENCODER_HINT)
    return params["encoder"]["conv_in"]["conv"]["kernel"].dtype


def _decoder_dtype(params: dict):
    require_parts(params, DECODER_PARTS, "VAE decoding", "load the VAE's decoder part (DECODER_PARTS)")
    return params["decoder"]["conv_in"]["conv"]["kernel"].dtype


@conv_jit(static_argnames=("cfg",))
def _encode_program(params: dict, cfg: HunyuanVideo15VAEConfig, video: jax.Array) -> jax.Array:
    x = jnp.transpose(video, (0, 2, 3, 4, 1)).astype(_encoder_dtype(params))
    return jnp.transpose(_encoder(params["encoder"], cfg, x).astype(_F32), (0, 4, 1, 2, 3))


@conv_jit(static_argnames=("cfg",))
def _decode_program(params: dict, cfg: HunyuanVideo15VAEConfig, z: jax.Array) -> jax.Array:
    x = jnp.transpose(z, (0, 2, 3, 4, 1)).astype(_decoder_dtype(params))
    return jnp.transpose(_decoder(params["decoder"], cfg, x).astype(_F32), (0, 4, 1, 2, 3))


def encode_tile(params: dict, cfg: HunyuanVideo15VAEConfig, video: jax.Array) -> jax.Array:
    """One untiled encoder call (the reference's ``encoder(x)``); one compiled program per shape.

    Args:
      params: VAE parameters (at least :data:`ENCODER_PARTS`).
      cfg: static configuration.
      video: ``(B, in_channels, T, H, W)`` in ``[-1, 1]``, sizes as :func:`check_video_size` allows (not checked
        here: the reference's reshapes would fail on others, and so do these).

    Returns:
      float32 moments ``(B, 2 latent_channels, (T - 1) / 4 + 1, H / 16, W / 16)``: the mean channels, then the
      log-variance channels (not clamped).
    """
    return _encode_program(params, cfg, video)


def decode_tile(params: dict, cfg: HunyuanVideo15VAEConfig, z: jax.Array) -> jax.Array:
    """One untiled decoder call (the reference's ``decoder(z)``); one compiled program per shape.

    Args:
      params: VAE parameters (at least :data:`DECODER_PARTS`).
      cfg: static configuration.
      z: latents ``(B, latent_channels, t, h, w)``, already divided by the scaling factor; cast to the weights' dtype.

    Returns:
      float32 video ``(B, out_channels, 4 (t - 1) + 1, 16 h, 16 w)``, not clamped.
    """
    return _decode_program(params, cfg, z)


# ---------------------------------------------------------------------------------------------
# Tiling
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VAETiling:
    """Spatial tiling as both references compute it from a tile size and an overlap factor.

    The original: ``AutoencoderKLConv3D.set_tile_sample_min_size(sample_size, tile_overlap_factor)`` then
    ``enable_tiling()`` (square tiles); diffusers: ``AutoencoderKLHunyuanVideo15.enable_tiling(tile_sample_min_height,
    tile_sample_min_width, tile_overlap_factor=...)`` with the latent tile ``tile_sample_min / 16`` (as constructed).
    Neither tiles time. :data:`ORIGINAL_TILING` is what the original pipeline decodes with (on a GPU of more than
    21 GB; :data:`ORIGINAL_TILING_LOW_MEMORY` below that); :data:`DIFFUSERS_TILING` is diffusers' ``enable_tiling()``.

    Attributes:
      tile_sample_min_height, tile_sample_min_width: tile size in pixels, a multiple of the spatial ratio.
      tile_overlap_factor: the fraction of a tile that overlaps the next, ``0 <= f < 1``.
    """

    tile_sample_min_height: int = 256
    tile_sample_min_width: int = 256
    tile_overlap_factor: float = 0.25

    def resolve(self, cfg: HunyuanVideo15VAEConfig) -> dict[str, int]:
        """The integer quantities of the reference's ``tiled_encode`` / ``tiled_decode`` (the same float
        expressions truncated by ``int``), per axis ``height`` and ``width``:

        ``sample_*`` / ``latent_*`` (tile sizes), decode: ``latent_stride_*`` (``int(latent * (1 - f))``),
        ``blend_*`` (``int(sample * f)`` pixels), ``keep_*`` (``sample - blend``); encode: ``stride_*``
        (``int(sample * (1 - f))`` pixels), ``latent_blend_*`` (``int(latent * f)``), ``latent_keep_*``.

        Raises:
          ValueError: a tile size that is not a multiple of the spatial ratio from it to 2**20; an overlap factor
            outside ``[0, 1)``; strides below one latent pixel; or a factor for which the reference's kept rows
            do not add up to the image (``keep != latent_stride * 16`` or ``stride != latent_keep * 16``: its
            output would not be the video's size, e.g. 0.2 with 256-pixel tiles, which the original refuses too).
        """
        s = cfg.spatial_compression_ratio
        f = self.tile_overlap_factor
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 <= f < 1:
            raise ValueError(f"VAETiling: tile_overlap_factor={f!r} should be a number from 0 up to (not including) 1")
        q: dict[str, int] = {}
        for axis in ("height", "width"):
            name = f"tile_sample_min_{axis}"
            size = getattr(self, name)
            if (not isinstance(size, (int, np.integer)) or isinstance(size, bool) or not s <= size <= 1 << 20
                    or size % s):
                raise ValueError(f"VAETiling: {name}={size!r} should be a multiple of {s} (the spatial compression) "
                                 f"from {s} to {1 << 20}")
            latent = size // s
            lstride, blend = int(latent * (1 - f)), int(size * f)
            stride, lblend = int(size * (1 - f)), int(latent * f)
            if lstride < 1 or stride < s:
                raise ValueError(f"VAETiling: tile_overlap_factor={f} leaves {name}={size} tiles no stride (under "
                                 "one latent pixel)")
            if size - blend != lstride * s or stride != (latent - lblend) * s:
                raise ValueError(f"VAETiling: tile_overlap_factor={f} with {name}={size}: the reference's tiles would "
                                 f"not add up to the image (decode keeps {size - blend} of every {lstride * s} pixels, "
                                 f"encode {latent - lblend} of every {stride / s:g} latents); take a factor for which "
                                 f"{latent} x factor is a whole number (0.125 or 0.25 with 256-pixel tiles)")
            q.update({f"sample_{axis}": size, f"latent_{axis}": latent, f"latent_stride_{axis}": lstride,
                      f"blend_{axis}": blend, f"keep_{axis}": size - blend, f"stride_{axis}": stride,
                      f"latent_blend_{axis}": lblend, f"latent_keep_{axis}": latent - lblend})
        return q


#: diffusers' ``enable_tiling()``: 256-pixel tiles overlapping by a quarter (stride 192 pixels, 64 blended).
DIFFUSERS_TILING = VAETiling()
#: The original pipeline's decode (``get_vae_inference_config`` on a GPU of more than 21 GB, then
#: ``memory_efficient_context``): 256-pixel tiles, overlap 0.125 (stride 224 pixels, 32 blended).
ORIGINAL_TILING = VAETiling(256, 256, 0.125)
#: The original pipeline's decode on a GPU of 21 GB or less: 128-pixel tiles, overlap 0.25.
ORIGINAL_TILING_LOW_MEMORY = VAETiling(128, 128, 0.25)


@functools.partial(jax.jit, static_argnames=("blend", "keep"))
def _compose(rows: list, blend: tuple[int, int], keep: tuple[int, int]) -> jax.Array:
    """``tiled_encode`` / ``tiled_decode``'s blending: raster order, each tile blended with the tile above
    (``blend_v``) and to the left (``blend_h``), written back before it serves as a neighbour (the reference blends
    in place; paper Table 4 fault 14), its first ``keep`` rows / columns kept. One program per tile layout."""
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
    return jnp.concatenate(out_rows, axis=3)


def _tiled(call: Callable, x: np.ndarray, size: tuple[int, int], stride: tuple[int, int], blend: tuple[int, int],
           keep: tuple[int, int]) -> jax.Array:
    """Tiles of ``size`` every ``stride`` over ``x``'s last two axes (cut on the host: inputs are small), each through
    ``call``, composed by :func:`_compose`."""
    h, w = x.shape[3:]
    rows = [[call(x[:, :, :, i : i + size[0], j : j + size[1]]) for j in range(0, w, stride[1])]
            for i in range(0, h, stride[0])]
    return _compose(rows, blend, keep)


def _calls(fn: Callable, params: dict, cfg: HunyuanVideo15VAEConfig, on_tile: Callable[[], None] | None):
    def call(x):
        out = fn(params, cfg, jnp.asarray(x))
        if on_tile is not None:
            jax.block_until_ready(out)
            on_tile()
        return out

    return call


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def latent_frames(cfg: HunyuanVideo15VAEConfig, num_frames: int) -> int:
    """Latent frames of ``num_frames`` video frames: ``(num_frames - 1) // 4 + 1`` (121 -> 31; the pipelines' rule)."""
    return (num_frames - 1) // cfg.temporal_compression_ratio + 1


def decoded_frames(cfg: HunyuanVideo15VAEConfig, latent_frames: int) -> int:
    """Video frames decoded from ``latent_frames``: ``4 (latent_frames - 1) + 1`` (31 -> 121)."""
    return (latent_frames - 1) * cfg.temporal_compression_ratio + 1


def check_video_size(cfg: HunyuanVideo15VAEConfig, num_frames: int, height: int, width: int) -> None:
    """Refuse a video size the VAE cannot take, before anything is allocated (:func:`encode` calls it; a pipeline
    calls it on the requested size, whose latents :func:`decode` then turns into exactly that size).

    The reference's rearrangements need ``height`` and ``width`` multiples of the spatial ratio (16) and
    ``num_frames = 4k + 1`` (1 for an image); they fail on anything else.

    Raises:
      ValueError: naming each bad size and the nearest sizes that work.
    """
    s, t = cfg.spatial_compression_ratio, cfg.temporal_compression_ratio
    problems = []
    for name, v in (("height", height), ("width", width)):
        if not isinstance(v, (int, np.integer)) or v < s or v % s:
            lo = max(s, int(v) // s * s) if isinstance(v, (int, np.integer)) else s
            problems.append(f"{name} {v!r} is not a positive multiple of {s} (the VAE's spatial compression): take "
                            f"{lo} or {lo + s}")
    if not isinstance(num_frames, (int, np.integer)) or num_frames < 1 or (num_frames - 1) % t:
        lo = max(1, (int(num_frames) - 1) // t * t + 1) if isinstance(num_frames, (int, np.integer)) else 1
        problems.append(f"num_frames {num_frames!r} is not {t}k + 1 (the VAE's temporal compression keeps the first "
                        f"frame alone): take {lo} or {lo + t}")
    if problems:
        raise ValueError("HunyuanVideo-1.5 VAE: " + "; ".join(problems))


def _check(x: jax.Array, channels: int, what: str, name: str) -> None:
    if x.ndim != 5 or x.shape[1] != channels or min(x.shape) < 1:
        hint = (" (channels-first: move the channel axis to position 1)"
                if x.ndim == 5 and x.shape[-1] == channels else "")
        raise ValueError(f"{what}: expected {name} (B, {channels}, T>=1, H>=1, W>=1), got shape {tuple(x.shape)}"
                         + hint)


def encode(params: dict, cfg: HunyuanVideo15VAEConfig, video: jax.Array, tiling: VAETiling | None = None,
           on_tile: Callable[[], None] | None = None) -> tuple[jax.Array, jax.Array]:
    """Encode a video (or an image, ``T = 1``) to its latent distribution (the reference's ``encode(x).latent_dist``).

    Untiled (``tiling=None``, what both image-to-video pipelines do: the original never tiles its encode) one
    :func:`encode_tile` call; with ``tiling`` and frames wider or taller than a tile, the reference's
    ``spatial_tiled_encode`` / ``tiled_encode``: tiles of ``tile_sample_min`` pixels every ``stride``, blended over
    ``latent_blend`` latents.

    Args:
      params: VAE parameters (at least :data:`ENCODER_PARTS`); computation in their dtype, float32 accumulation.
      cfg: the configuration.
      video: ``(B, in_channels, T, H, W)`` in ``[-1, 1]``, any float dtype; ``T = 4k + 1``, ``H`` and ``W``
        multiples of 16 (:func:`check_video_size`).
      tiling: None (untiled) or the spatial tiles.
      on_tile: called after each encoder call (progress).

    Returns:
      ``(mean, logvar)``, float32 ``(B, latent_channels, (T - 1) // 4 + 1, H / 16, W / 16)``; ``logvar`` clamped to
      ``[-30, 20]`` (``DiagonalGaussianDistribution``). ``mean`` is the distribution's ``mode()``; not scaled
      (:func:`encode_latents` scales it).

    Raises:
      ValueError: wrong rank or channel count; a size :func:`check_video_size` refuses; bad tiling settings.
    """
    _check(video, cfg.in_channels, "encode", "video")
    check_video_size(cfg, *video.shape[2:])
    call = _calls(encode_tile, params, cfg, on_tile)
    h, w = video.shape[3:]
    q = None if tiling is None else tiling.resolve(cfg)
    if q is not None and (w > q["sample_width"] or h > q["sample_height"]):
        moments = _tiled(call, np.asarray(video), (q["sample_height"], q["sample_width"]),
                         (q["stride_height"], q["stride_width"]), (q["latent_blend_height"], q["latent_blend_width"]),
                         (q["latent_keep_height"], q["latent_keep_width"]))
    else:
        moments = call(video)
    n = cfg.latent_channels
    return moments[:, :n], jnp.clip(moments[:, n:], -30.0, 20.0)


def encode_latents(params: dict, cfg: HunyuanVideo15VAEConfig, video: jax.Array, tiling: VAETiling | None = None,
                   on_tile: Callable[[], None] | None = None) -> jax.Array:
    """Diffusion-space latents of a video or image: the posterior's mode times ``scaling_factor``, as both
    image-to-video pipelines condition on it (original ``get_image_condition_latents``: ``.mode()`` then
    ``mul_(scaling_factor)``; diffusers ``_get_image_latents``: ``sample_mode="argmax"`` then ``* scaling_factor``).

    Args and Raises: as :func:`encode` (an image is ``(B, 3, 1, H, W)``).

    Returns:
      float32 ``(B, latent_channels, (T - 1) // 4 + 1, H / 16, W / 16)``.
    """
    return scale_latents(cfg, encode(params, cfg, video, tiling, on_tile)[0])


def decode(params: dict, cfg: HunyuanVideo15VAEConfig, z: jax.Array, tiling: VAETiling | None = None,
           on_tile: Callable[[], None] | None = None) -> jax.Array:
    """Decode latents to video (the reference's ``decode(z).sample``), tiled as the reference tiles.

    Untiled (``tiling=None``: diffusers as constructed) one :func:`decode_tile` call; with ``tiling`` and latents
    wider or taller than ``tile_sample_min / 16``, the reference's ``spatial_tiled_decode`` / ``tiled_decode``:
    latent tiles every ``latent_stride``, blended over ``blend`` pixels. The original pipeline always decodes tiled
    (:data:`ORIGINAL_TILING`). All frames of a tile go through one call (no state passes between tiles).

    Args:
      params: VAE parameters (at least :data:`DECODER_PARTS`).
      cfg: the configuration.
      z: latents ``(B, latent_channels, t, h, w)``, already divided by the scaling factor (:func:`unscale_latents`);
        any ``t, h, w >= 1``.
      tiling: None (untiled) or the spatial tiles.
      on_tile: called after each decoder call (progress).

    Returns:
      float32 video ``(B, out_channels, 4 (t - 1) + 1, 16 h, 16 w)`` (:func:`decoded_frames`), not clamped.

    Raises:
      ValueError: wrong rank or channel count; bad tiling settings.
    """
    _check(z, cfg.latent_channels, "decode", "latents")
    call = _calls(decode_tile, params, cfg, on_tile)
    h, w = z.shape[3:]
    if tiling is not None:
        q = tiling.resolve(cfg)
        if w > q["latent_width"] or h > q["latent_height"]:
            return _tiled(call, np.asarray(z), (q["latent_height"], q["latent_width"]),
                          (q["latent_stride_height"], q["latent_stride_width"]), (q["blend_height"], q["blend_width"]),
                          (q["keep_height"], q["keep_width"]))
    return call(z)


def scale_latents(cfg: HunyuanVideo15VAEConfig, mean: jax.Array) -> jax.Array:
    """Encoder output -> diffusion-space latents: ``mean * scaling_factor`` (this VAE has no shift)."""
    return mean * cfg.scaling_factor


def unscale_latents(cfg: HunyuanVideo15VAEConfig, z: jax.Array) -> jax.Array:
    """Diffusion-space latents -> decoder input: ``z / scaling_factor``, in ``z``'s dtype (the original divides the
    float32 latents; diffusers casts them to the VAE's dtype first)."""
    return z / cfg.scaling_factor
