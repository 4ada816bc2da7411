"""The LTX-2.5 diffusion video decoder (diffusers ``LTX2VideoDiffusionDecoderModel``) as pure JAX functions.

Reference: ``diffusers/models/autoencoders/ltx2_diffusion_decoder.py`` (``LTX2VideoDiffusionDecoderModel``,
``LTX2VideoDiffusionDecoder3d``, ``LTX2VideoVaeNABlock``, ``LTX2VideoVaeDiffusionNABlock``,
``LTX2VideoVaeNeighborhoodAttention``, ``LTX2VideoVaeRotaryPosEmbed3D``, ``LTX2VideoVaeSwiGLU``,
``LTX2VideoVaeAdaLNZero``, ``LTX2VideoVaePixelShuffleUpsampler``) and the decode pipeline
``pipelines/ltx2/pipeline_ltx2_diffusion_decode.py`` (``LTX2VideoDiffusionDecodePipeline``: denormalize, decode,
postprocess). Upstream: Lightricks/LTX-2 ``ltx_core/model/video_vae/diffusion_video_decoder.py``
(``DiffusionVideoDecoder``) and ``diffusion_tiling.py``.

The model
    Stages 1-4 upsample the latent deterministically into a context volume: a channels-last linear ``conv_in``,
    then per stage a stack of neighbourhood-attention blocks (RMSNorm, 3D-neighbourhood attention with RMS-normed
    q/k and absolute 3D RoPE, RMSNorm, SwiGLU) and a linear pixel-shuffle upsampler (a temporal stride of 2 drops
    the duplicate leading frame: the causal 1 + 8k frame mapping). Stage 5 denoises patchified pixels: each
    diffusion block adds ``context_proj(context)`` to its stream and modulates its two norms with the shared
    AdaLN-Zero scale/shift of the timestep (plus its own ``scale_shift_table``); residuals are ungated.

Neighbourhood attention
    Each query attends to a ``kernel`` window centred on it and shifted inward at the grid border, so it always
    holds exactly ``kernel`` positions (NATTEN ``na3d``; diffusers' flex mask states the same). Written here as
    blocked dense attention with static shapes: queries in blocks of :data:`QUERY_BLOCK`, each against the
    halo of keys that contains every window of its queries (``block + kernel - 1`` per axis), masked to the
    windows; blocks run under ``lax.map``.

The sampling loop
    ``t`` runs over ``linspace(1, 1/N, N)``; each step is one stage-5 evaluation and a reverse Euler update
    (an ``x0`` prediction is converted to a velocity ``(x_t - x0) / t``); the last step of an ``x0`` model returns
    its prediction. The released decoder takes ``N = 1`` with ``x0``: one evaluation on pure noise. A host loop
    runs the one jitted stage-5 program (compiled once for all steps) and the elementwise update.

Where diffusers departs from upstream (upstream ltx-core is followed)
    * Small inputs: diffusers raises when a stage grid is smaller than its kernel (e.g. a 1- or 2-frame latent:
      the 1 or 9 decoded frames are fewer than the stage-5 kernel's 11). Upstream ``_decode_pixels`` first
      edge-pads the latent to ``all_stages_min_tile_size`` (time: the last frame repeated; height and width:
      symmetric edge replication, the odd pixel after), crops the trailing ghost frames off the context only
      down to ``max(content frames, stage-5 kernel)`` frames, decodes that canvas and crops the pixels back to
      the content. Where diffusers runs with a latent at least that floor, both give the same result.
    * The last step of a multi-step ``x0`` decode returns the ``x0`` prediction (upstream ``_decode_one_tile``);
      diffusers applies the Euler update to ``t = 0``, equal up to rounding.

Noise
    ``noise=`` takes the stage-5 canvas noise explicitly (the reference's ``randn_tensor(pixel_shape, generator)``
    draw: pass ``torch.randn(shape, generator=g)`` for bit-identical inputs); without it the noise is
    ``jax.random.normal(PRNGKey(seed))``, a different stream than torch's generator (same distribution).

Precision
    Linear layers take their inputs in the weights' dtype and accumulate in float32; norms, RoPE, softmax and the
    SwiGLU product compute in float32; the residual streams, the context and the denoised canvas stay float32.
    The norm weights, the timestep embedder, the shared AdaLN projection, the ``scale_shift_table`` s and the
    latent statistics are float32 leaves.

Not supported
    The reference's tiled decode (``enable_tiling``): off by default there; every decode here is untiled.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint.errors import excerpt
from vidax.checkpoint.keymap import KeyMap, Rule
from vidax.checkpoint.keymap import linear as linear_rules
from vidax.core.config_values import config_values, read_json
from vidax.core.embeddings import timestep_embedding
from vidax.core.layers import linear, rms_norm
from vidax.core.params import ParamSpec, SpecTree, unflatten

#: Epsilon of every ``nn.RMSNorm`` of the decoder (fixed in the reference).
RMS_EPS = 1e-6
#: Width of the sinusoidal timestep projection of ``PixArtAlphaCombinedTimestepSizeEmbeddings``.
TIME_PROJ_DIM = 256
#: Chunks of the shared AdaLN-Zero modulation (scale/shift/gate x 2 + context gate; only scale/shift are used).
ADALN_CHUNKS = 7
#: RoPE base of the neighbourhood attention.
ROPE_BASE = 10000.0
#: Query block (frames, height, width) of the blocked neighbourhood attention: small, so that the key halo
#: (``block + kernel - 1`` per axis) stays a few times the window (release stage 5: 4536 keys for a 1331 window).
QUERY_BLOCK = (4, 8, 8)
#: Attention scores (float32 elements) computed at once: blocks run in ``lax.map`` batches of this size.
SCORE_BUDGET = 1 << 27
#: Tokens per SwiGLU chunk (the reference's ``_SWIGLU_TILE_SIZE``; pointwise, so chunking changes only memory).
SWIGLU_CHUNK = 16384
#: Bounds on the configuration and the latents (far above any release).
MAX_WIDTH = 1 << 16
MAX_DEPTH = 256
MAX_KERNEL = 64
MAX_STEPS = 1000
MAX_LATENT_FRAMES = 1024
MAX_LATENT_PIXELS = 1 << 16  # per frame
MAX_CANVAS_TOKENS = 1 << 28  # stage-5 grid positions per batch item
_F32 = jnp.float32


@dataclass(frozen=True)
class LTX2DiffusionDecoderConfig:
    """Configuration of ``LTX2VideoDiffusionDecoderModel`` (the keys of a diffusers ``diffusion_decoder/config.json``).

    Hashable (scalars and tuples): a static argument of the jitted programs. Defaults are the reference's.

    Attributes:
      out_channels: video channels (3). latent_channels: latent channels (128). patch_size: stage-5 pixel patch (4).
      scaling_factor: the latent scaling of the pipeline's denormalisation.
      decoder_head_dim: attention head width (64; a multiple of 8 for the RoPE split).
      decoder_stage_channels: widths of stages 1-5 (each a multiple of ``decoder_head_dim``).
      decoder_stage_depths: blocks per stage (stage 5: diffusion blocks).
      decoder_stage_kernels: neighbourhood (T, H, W) of stages 1-4. decoder_stage5_kernel: that of stage 5.
      decoder_upsample_strides: (T, H, W) strides of the four upsamplers.
      decoder_upsample_channel_reductions: width divisor of each upsampler (``stage_channels[i+1] ==
        stage_channels[i] // reduction[i]``).
      decoder_t_emb_dim: timestep embedding width. decoder_timestep_scale_multiplier: ``t`` in ``[0, 1]`` times this
        is embedded.
      decoder_model_output_type: ``"x0"`` or ``"v"``. decoder_num_inference_steps: default steps (1).
      spatial_compression_ratio, temporal_compression_ratio: pixels per latent pixel / frame (must equal the
        strides' products times the patch: 32 and 8 in the release).
    """

    out_channels: int = 3
    latent_channels: int = 128
    patch_size: int = 4
    scaling_factor: float = 1.0
    decoder_head_dim: int = 64
    decoder_stage_channels: tuple[int, ...] = (2048, 1024, 512, 512, 256)
    decoder_stage_depths: tuple[int, ...] = (4, 6, 4, 2, 8)
    decoder_stage_kernels: tuple[tuple[int, int, int], ...] = ((3, 7, 7), (3, 7, 7), (3, 5, 5), (3, 5, 5))
    decoder_upsample_strides: tuple[tuple[int, int, int], ...] = ((1, 2, 2), (2, 1, 1), (2, 2, 2), (2, 2, 2))
    decoder_upsample_channel_reductions: tuple[int, ...] = (2, 2, 1, 2)
    decoder_stage5_kernel: tuple[int, int, int] = (11, 11, 11)
    decoder_t_emb_dim: int = 384
    decoder_timestep_scale_multiplier: float = 1000.0
    decoder_model_output_type: str = "x0"
    decoder_num_inference_steps: int = 1
    spatial_compression_ratio: int = 32
    temporal_compression_ratio: int = 8

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, list):
                object.__setattr__(self, f.name, tuple(tuple(x) if isinstance(x, list) else x for x in v))
        p = []

        def integer(v) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        for name in ("out_channels", "latent_channels", "patch_size", "decoder_head_dim", "decoder_t_emb_dim",
                     "decoder_num_inference_steps", "spatial_compression_ratio", "temporal_compression_ratio"):
            if not integer(getattr(self, name)):
                p.append(f"{name}={excerpt(getattr(self, name))} is not an integer")
        for name in ("decoder_stage_channels", "decoder_stage_depths", "decoder_upsample_channel_reductions"):
            v = getattr(self, name)
            if not (isinstance(v, tuple) and all(integer(x) for x in v)):
                p.append(f"{name}={excerpt(v)} is not a list of integers")
        for name in ("scaling_factor", "decoder_timestep_scale_multiplier"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and not isinstance(v, bool)):
                p.append(f"{name}={excerpt(v)} is not a number")
        for name in ("decoder_stage_kernels", "decoder_upsample_strides", "decoder_stage5_kernel"):
            if not isinstance(getattr(self, name), tuple):
                p.append(f"{name}={excerpt(getattr(self, name))} is not a list")
        if not isinstance(self.decoder_model_output_type, str):
            p.append(f"decoder_model_output_type={excerpt(self.decoder_model_output_type)} is not a string")
        if p:
            raise ValueError("LTX2DiffusionDecoderConfig: " + "; ".join(p))
        n = len(self.decoder_upsample_strides)
        ch, dh = self.decoder_stage_channels, self.decoder_head_dim
        if n < 1:
            p.append("decoder_upsample_strides must name at least one upsampler")
        for name, want in (("decoder_stage_channels", n + 1), ("decoder_stage_depths", n + 1),
                           ("decoder_stage_kernels", n), ("decoder_upsample_channel_reductions", n)):
            if len(getattr(self, name)) != want:
                p.append(f"{name} has {len(getattr(self, name))} entries, {n} upsamplers need {want}")
        for name in ("decoder_stage_kernels", "decoder_upsample_strides"):
            bad = next((x for x in getattr(self, name) if not (isinstance(x, tuple) and len(x) == 3 and all(
                integer(v) and v >= 1 for v in x))), None)
            if bad is not None:
                p.append(f"{name} entry {excerpt(bad)} is not three positive integers")
        k5 = self.decoder_stage5_kernel
        if not (len(k5) == 3 and all(integer(v) and v >= 1 for v in k5)):
            p.append(f"decoder_stage5_kernel {excerpt(k5)} is not three positive integers")
        if p:
            raise ValueError("LTX2DiffusionDecoderConfig: " + "; ".join(p))
        if not (8 <= dh <= 1024 and dh % 8 == 0):
            p.append(f"decoder_head_dim={dh} (a multiple of 8 up to 1024: the RoPE splits it over T, H, W)")
        for i, c in enumerate(ch):
            if not (1 <= c <= MAX_WIDTH and (dh < 1 or c % dh == 0)):
                p.append(f"decoder_stage_channels[{i}]={c} (a positive multiple of decoder_head_dim={dh}, "
                         f"at most {MAX_WIDTH})")
        for i, r in enumerate(self.decoder_upsample_channel_reductions):
            if r < 1:
                p.append(f"decoder_upsample_channel_reductions[{i}]={r} (at least 1)")
            elif ch[i] // r != ch[i + 1]:
                p.append(f"decoder_stage_channels[{i + 1}]={ch[i + 1]} must be decoder_stage_channels[{i}] // "
                         f"decoder_upsample_channel_reductions[{i}] = {ch[i] // max(r, 1)}")
            elif (math.prod(self.decoder_upsample_strides[i]) * ch[i]) % r:
                p.append(f"upsampler {i}: {math.prod(self.decoder_upsample_strides[i])} x {ch[i]} channels do not "
                         f"divide by reduction {r}")
        if any(not 0 <= d <= MAX_DEPTH for d in self.decoder_stage_depths):
            p.append(f"decoder_stage_depths {self.decoder_stage_depths} (0..{MAX_DEPTH} each)")
        if any(v > MAX_KERNEL for k in (*self.decoder_stage_kernels, k5) for v in k):
            p.append(f"kernels above {MAX_KERNEL}")
        if any(v > 8 for s in self.decoder_upsample_strides for v in s):
            p.append("upsample strides above 8")
        if not (1 <= self.out_channels <= 16 and 1 <= self.latent_channels <= MAX_WIDTH
                and 1 <= self.patch_size <= 16 and 1 <= self.decoder_t_emb_dim <= MAX_WIDTH):
            p.append("out_channels (1..16), latent_channels, patch_size (1..16) and decoder_t_emb_dim must be positive")
        if self.decoder_model_output_type not in ("x0", "v"):
            p.append(f"decoder_model_output_type={self.decoder_model_output_type!r} (known: 'x0', 'v')")
        if not 1 <= self.decoder_num_inference_steps <= MAX_STEPS:
            p.append(f"decoder_num_inference_steps={self.decoder_num_inference_steps} (1..{MAX_STEPS})")
        for name in ("scaling_factor", "decoder_timestep_scale_multiplier"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                p.append(f"{name}={v} (must be positive)")
        if not p:
            st = self.decoder_upsample_strides
            tc = math.prod(s[0] for s in st)
            sh, sw = math.prod(s[1] for s in st) * self.patch_size, math.prod(s[2] for s in st) * self.patch_size
            if sh != sw or sh != self.spatial_compression_ratio:
                p.append(f"spatial_compression_ratio={self.spatial_compression_ratio}, but the strides and the patch "
                         f"expand height by {sh} and width by {sw}")
            if tc != self.temporal_compression_ratio or any(s[0] not in (1, 2) for s in st):
                p.append(f"temporal_compression_ratio={self.temporal_compression_ratio}, but the temporal strides "
                         f"{[s[0] for s in st]} (each 1 or 2) expand time by {tc}")
        if p:
            raise ValueError("LTX2DiffusionDecoderConfig: unsupported " + "; ".join(p))

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> LTX2DiffusionDecoderConfig:
        """Build from a diffusers ``diffusion_decoder/config.json`` dict (``_``-prefixed keys are metadata).

        Raises:
          ValueError: ``_class_name`` is not ``LTX2VideoDiffusionDecoderModel``; an unknown key; a value of the
            wrong type; an unsupported or inconsistent setting (the message names it).
        """
        name = config.get("_class_name")
        if name not in (None, "LTX2VideoDiffusionDecoderModel"):
            raise ValueError(f"diffusion decoder config.json is for {name!r}, not 'LTX2VideoDiffusionDecoderModel'")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(k for k in config if not k.startswith("_") and k not in fields)
        if unknown:
            raise ValueError(f"LTX2DiffusionDecoderConfig: unknown config keys {unknown} (not "
                             "LTX2VideoDiffusionDecoderModel args)")
        return cls(**config_values(cls, config, "LTX-2 diffusion decoder config"))

    @classmethod
    def from_release(cls, vae: dict[str, Any]) -> LTX2DiffusionDecoderConfig:
        """Build from a release checkpoint's ``config["vae"]`` metadata (``_class_name`` ``CausalDiffusionVAE``), read
        as upstream ``_build_diffusion_video_decoder`` reads it: the architecture under ``vae["decoder"]`` (or flat),
        ``model_output_type`` beside it; absent keys take upstream ``DiffusionVideoDecoder`` 's defaults (which are
        not diffusers': widths (1024, 512, 256, 256, 128), stage-5 kernel (3, 7, 7), 2 steps, multiplier 1, ``v``).

        Raises:
          ValueError: a ``stage5_channels`` other than the last stage width or a ``rope_dim_split`` other than the
            default (diffusers' model has neither), or an invalid configuration.
        """
        d = vae.get("decoder", vae)
        if not isinstance(d, dict):
            raise ValueError("release vae config: 'decoder' must be an object")
        try:
            return cls._from_release(vae, d)
        except (TypeError, IndexError, OverflowError) as e:  # a list where a number belongs, or the reverse
            raise ValueError(f"release vae config: a value of the wrong type or size ({e})") from None

    @classmethod
    def _from_release(cls, vae: dict[str, Any], d: dict[str, Any]) -> LTX2DiffusionDecoderConfig:
        def triples(value, key):  # lists of (T, H, W) integers
            if not (isinstance(value, (list, tuple)) and all(
                    isinstance(x, (list, tuple)) and len(x) == 3 and all(
                        isinstance(v, int) and not isinstance(v, bool) for v in x) for x in value)):
                raise ValueError(f"release vae config: {key}={excerpt(value)} is not a list of [T, H, W] integers")
            return tuple(tuple(x) for x in value)

        def seq(value):  # a list as a tuple; anything else as it is, for the configuration's type check
            return tuple(value) if isinstance(value, (list, tuple)) else value

        channels = seq(d.get("stage_channels", (1024, 512, 256, 256, 128)))
        ups = d.get("upsamples", ((((1, 2, 2), 2), ((2, 1, 1), 2), ((2, 2, 2), 1), ((2, 2, 2), 2))))
        if not (isinstance(ups, (list, tuple)) and all(isinstance(u, (list, tuple)) and len(u) == 2 for u in ups)):
            raise ValueError(f"release vae config: upsamples={excerpt(ups)} is not a list of [stride [T, H, W], "
                             "reduction]")
        strides = triples([st for st, _ in ups], "upsamples' strides")
        reductions = tuple(r for _, r in ups)
        kernels = triples(d.get("stage_kernels", ((3, 7, 7), (3, 7, 7), (3, 5, 5), (3, 5, 5), (3, 3, 3))),
                          "stage_kernels")[: len(strides)]
        if "stage5_channels" in d and (not isinstance(channels, tuple) or not channels
                                       or d["stage5_channels"] != channels[-1]):
            raise ValueError(f"release vae config: stage5_channels={excerpt(d['stage5_channels'])} is not the last "
                             f"of stage_channels {excerpt(channels)} (a separate stage-5 width is not supported)")
        head_dim = d.get("head_dim", d.get("na_head_dim", 64))
        if d.get("rope_dim_split") is not None and (
                not isinstance(head_dim, int) or head_dim < 8 or tuple(d["rope_dim_split"]) != rope_split(head_dim)):
            raise ValueError(f"release vae config: rope_dim_split={excerpt(d['rope_dim_split'])} (only the default)")
        patch = d.get("patch_size", 4)
        ratio = math.prod(s[1] for s in strides) * patch if isinstance(patch, int) else patch
        return cls(out_channels=d.get("out_channels", 3),
                   latent_channels=d.get("in_channels", vae.get("latent_channels", 128)), patch_size=patch,
                   decoder_head_dim=head_dim, decoder_stage_channels=channels,
                   decoder_stage_depths=seq(d.get("stage_depths", (4, 6, 4, 2, 8))), decoder_stage_kernels=kernels,
                   decoder_upsample_strides=strides, decoder_upsample_channel_reductions=reductions,
                   decoder_stage5_kernel=seq(d.get("stage5_kernel", (3, 7, 7))),
                   decoder_t_emb_dim=d.get("t_emb_dim", 384),
                   decoder_timestep_scale_multiplier=d.get("timestep_scale_multiplier", 1.0),
                   decoder_model_output_type=vae.get("model_output_type", "v"),
                   decoder_num_inference_steps=d.get("default_num_inference_steps", 2),
                   spatial_compression_ratio=ratio, temporal_compression_ratio=math.prod(s[0] for s in strides))

    @property
    def num_stages(self) -> int:
        """Deterministic stages (upsamplers): 4 in the release."""
        return len(self.decoder_upsample_strides)

    @property
    def trailing_pad_latent_frames(self) -> int:
        """Ghost frames: the last latent frame repeated ``(stage-1 kernel_t // 2) * 2`` times (NATTEN's border)."""
        return (self.decoder_stage_kernels[0][0] // 2) * 2

    @property
    def min_latent_size(self) -> tuple[int, int, int]:
        """Latent (T, H, W) floor so that every stage's grid holds its kernel (upstream ``all_stages_min_tile_size``;
        the ghost frames are not counted)."""
        mins, cum = [1, 1, 1], (1, 1, 1)
        for k, s in zip((*self.decoder_stage_kernels, self.decoder_stage5_kernel),
                        (*self.decoder_upsample_strides, None)):
            mins = [max(m, -(-kk // c)) for m, kk, c in zip(mins, k, cum)]
            if s is not None:
                cum = tuple(c * v for c, v in zip(cum, s))
        return tuple(mins)


# ---------------------------------------------------------------------------------------------
# Parameters: specs and the diffusers key map from one walk
# ---------------------------------------------------------------------------------------------


def _swiglu_hidden(dim: int) -> int:
    """The reference's ``_swiglu_hidden_dim(dim, 4.0)``: ``4 dim`` rounded up to a multiple of 16."""
    return (int(dim * 4.0) + 15) // 16 * 16


@functools.lru_cache(maxsize=16)
def _declare(cfg: LTX2DiffusionDecoderConfig) -> tuple[dict[str, ParamSpec], tuple[Rule, ...]]:
    specs: dict[str, ParamSpec] = {}
    rules: list[Rule] = []

    def lin(key: str, n_in: int, n_out: int, stack: int | None = None, bias: bool = True, fp32: bool = False):
        path = key.replace(".", "/").replace("/{i}", "")
        lead = () if stack is None else (stack,)
        specs[f"{path}/kernel"] = ParamSpec((*lead, n_in, n_out), fp32=fp32)
        if bias:
            specs[f"{path}/bias"] = ParamSpec((*lead, n_out), fp32=fp32)
        rules.extend(linear_rules(key, path, bias=bias))

    def tensor(key: str, shape: tuple[int, ...], stack: int | None = None):
        path = key.replace(".", "/").replace("/{i}", "")
        specs[path] = ParamSpec(shape if stack is None else (stack, *shape), fp32=True)
        rules.append(Rule(key, path))

    def rms(key: str, dim: int, stack: int | None = None):
        path = key.replace(".", "/").replace("/{i}", "")
        specs[f"{path}/scale"] = ParamSpec((dim,) if stack is None else (stack, dim), fp32=True)
        rules.append(Rule(f"{key}.weight", f"{path}/scale"))

    def block(key: str, dim: int, n: int):
        rms(f"{key}.norm1", dim, n)
        rms(f"{key}.norm2", dim, n)
        for name in ("to_q", "to_k", "to_v", "to_out.0"):
            lin(f"{key}.attn.{name}", dim, dim, n)
        rms(f"{key}.attn.norm_q", cfg.decoder_head_dim, n)
        rms(f"{key}.attn.norm_k", cfg.decoder_head_dim, n)
        hidden = _swiglu_hidden(dim)
        lin(f"{key}.mlp.w_up", dim, hidden, n, bias=False)
        lin(f"{key}.mlp.w_gate", dim, hidden, n, bias=False)
        lin(f"{key}.mlp.w_down", hidden, dim, n, bias=False)

    ch = cfg.decoder_stage_channels
    lin("decoder.conv_in", cfg.latent_channels, ch[0])
    for s in range(cfg.num_stages):
        if cfg.decoder_stage_depths[s]:
            block(f"decoder.det_stages.{s}.{{i}}", ch[s], cfg.decoder_stage_depths[s])
        lin(f"decoder.upsamples.{s}.proj", ch[s],
            math.prod(cfg.decoder_upsample_strides[s]) * ch[s] // cfg.decoder_upsample_channel_reductions[s])
    for name, fan_in in (("linear_1", TIME_PROJ_DIM), ("linear_2", cfg.decoder_t_emb_dim)):
        lin(f"decoder.t_embedder.timestep_embedder.{name}", fan_in, cfg.decoder_t_emb_dim, fp32=True)
    c5, pix = ch[-1], cfg.out_channels * cfg.patch_size**2
    lin("decoder.conv_in_x_t", pix, c5)
    lin("decoder.shared_adaln.proj", cfg.decoder_t_emb_dim, ADALN_CHUNKS * c5, fp32=True)
    n5 = cfg.decoder_stage_depths[-1]
    if n5:
        key = "decoder.diff_blocks.{i}"
        tensor(f"{key}.scale_shift_table", (ADALN_CHUNKS, c5), n5)
        lin(f"{key}.context_proj", c5, c5, n5)
        block(key, c5, n5)
    rms("decoder.norm_out", c5)
    lin("decoder.conv_out", c5, pix)
    tensor("latents_mean", (cfg.latent_channels,))
    tensor("latents_std", (cfg.latent_channels,))
    return specs, tuple(rules)


def diffusion_decoder_specs(cfg: LTX2DiffusionDecoderConfig) -> SpecTree:
    """The parameter spec tree (paths mirror the diffusers module names; each stage's blocks and the diffusion blocks
    stacked along a leading ``layers`` axis)."""
    return unflatten(dict(_declare(cfg)[0]))


def diffusion_decoder_keymap(cfg: LTX2DiffusionDecoderConfig) -> KeyMap:
    """The key map of a diffusers ``diffusion_decoder`` folder (``LTX2VideoDiffusionDecoderModel.save_pretrained``)."""
    return KeyMap(list(_declare(cfg)[1]))


def load_diffusion_decoder(folder: str | os.PathLike,
                           dtype: Any = np.float32) -> tuple[dict, LTX2DiffusionDecoderConfig]:
    """Load a diffusers ``diffusion_decoder`` folder (``config.json`` + safetensors) into ``(params, cfg)``.

    Strict: every parameter filled once from its tensor, every checkpoint tensor used.

    Args:
      folder: the folder.
      dtype: compute dtype of the linear layers (float32 leaves stay float32).

    Raises:
      ValueError: an unsupported configuration. CheckpointError: an unreadable ``config.json``; tensors that do not
        match the configuration.
    """
    from vidax.checkpoint.loader import load_params
    from vidax.checkpoint.safetensors_io import CheckpointReader

    folder = Path(folder)
    cfg = _folder_config(folder)
    params = load_params(CheckpointReader(folder), diffusion_decoder_keymap(cfg), diffusion_decoder_specs(cfg),
                         dtype, source=str(folder))
    return params, cfg


#: Release (upstream ltx-core) names -> diffusers names, applied to the ``decoder.`` keys (diffusers
#: ``scripts/convert_ltx2_to_diffusers.py``, ``LTX_2_5_DIFFUSION_DECODER_RENAME_DICT``).
RELEASE_RENAMES = (
    ("t_embedder.mlp.0.", "t_embedder.timestep_embedder.linear_1."),
    ("t_embedder.mlp.2.", "t_embedder.timestep_embedder.linear_2."),
    (".attn.proj.", ".attn.to_out.0."),
    (".attn.q_norm.", ".attn.norm_q."),
    (".attn.k_norm.", ".attn.norm_k."),
)
#: Static AdaLN gates of gated (distilled) release checkpoints, folded into the linear they gate (``W <- g W``,
#: ``b <- g b``, in float32; ``LTX_2_5_DIFFUSION_DECODER_GATE_FOLD_TARGETS``).
RELEASE_GATES = {
    ".attn.to_out.0.weight": ".gate_msa", ".attn.to_out.0.bias": ".gate_msa", ".mlp.w_down.weight": ".gate_mlp",
    ".context_proj.weight": ".gate_ctx", ".context_proj.bias": ".gate_ctx",
}
#: Release keys that are known and unused: the encoder, the other latent statistics, the unused ``type_emb`` and the
#: bundled preview heads (``coarse_*``).
RELEASE_UNUSED = ("encoder.", "per_channel_statistics.channel", "per_channel_statistics.mean-of-stds",
                  "decoder.type_emb")


class ReleaseDiffusionDecoderReader:
    """A reader presenting a release diffusion-VAE checkpoint (upstream ``DiffusionVideoDecoder`` state dict, e.g.
    ``ltx-2.5-video-vae-bf16.safetensors``) under the diffusers names of :func:`diffusion_decoder_keymap`.

    Follows diffusers' ``convert_ltx2_diffusion_video_vae``: the ``decoder.`` keys renamed (:data:`RELEASE_RENAMES`),
    each fused ``attn.qkv`` split into ``to_q`` / ``to_k`` / ``to_v`` (thirds of its rows), static gates folded
    (:data:`RELEASE_GATES`), ``per_channel_statistics.{mean,std}-of-means`` as ``latents_mean`` / ``latents_std``.

    Args:
      reader: the checkpoint (``keys()``, ``shape``, ``dtype``, ``get``), e.g. a ``CheckpointReader``.
      prefix: the VAE's key prefix in the file (``""`` for the standalone VAE file, ``"vae."`` in a combined one);
        keys outside it are another component's and are not read.

    Raises:
      CheckpointError: a key under ``prefix`` that is neither mapped nor known unused; a fused ``qkv`` whose rows do
        not divide by 3; a gate without the linear it gates.
    """

    def __init__(self, reader: Any, prefix: str = ""):
        from vidax.checkpoint.errors import CheckpointError

        self._reader, self._map = reader, {}
        keys = [k for k in reader.keys() if k.startswith(prefix)]
        gates = {k for k in keys if k.startswith(prefix + "decoder.") and k.endswith((".gate_msa", ".gate_mlp",
                                                                                     ".gate_ctx"))}
        used, unknown = set(), []
        for key in keys:
            k = key[len(prefix):]
            if k.startswith(RELEASE_UNUSED) or key in gates or k.startswith("decoder.coarse_") or ".coarse_" in k:
                continue
            if k in ("per_channel_statistics.mean-of-means", "per_channel_statistics.std-of-means"):
                self._map["latents_mean" if "mean-of-means" in k else "latents_std"] = (key, None, None)
                continue
            if not k.startswith("decoder."):
                unknown.append(key)
                continue
            new = k
            for old, repl in RELEASE_RENAMES:
                new = new.replace(old, repl)
            if new.endswith((".qkv.weight", ".qkv.bias")):
                leaf = new.rsplit(".", 1)[1]
                rows = reader.shape(key)[0]
                if rows % 3:
                    raise CheckpointError(f"{key}: a fused qkv of {rows} rows does not split in three")
                for j, name in enumerate(("to_q", "to_k", "to_v")):
                    self._map[f"{new[: -len('qkv.' + leaf)]}{name}.{leaf}"] = (key, (j * rows // 3,
                                                                                    (j + 1) * rows // 3), None)
                continue
            gate = None
            for leaf, suffix in RELEASE_GATES.items():
                if new.endswith(leaf) and prefix + new[: -len(leaf)] + suffix in gates:
                    gate = prefix + new[: -len(leaf)] + suffix
                    used.add(gate)
            self._map[new] = (key, None, gate)
        if unknown or gates - used:
            what = [f"unexpected keys {sorted(unknown)[:8]}"] if unknown else []
            what += [f"gates without their linear {sorted(gates - used)[:8]}"] if gates - used else []
            source = getattr(reader, "source", None) or getattr(reader, "path", None) or "release diffusion VAE"
            raise CheckpointError(f"{source}: {', '.join(what)} (is this an LTX-2.5 diffusion VAE file?)")

    def keys(self):
        return list(self._map)

    def shape(self, key):
        src, rows, _ = self._map[key]
        shape = tuple(self._reader.shape(src))
        return shape if rows is None else (rows[1] - rows[0], *shape[1:])

    def dtype(self, key):
        return self._reader.dtype(self._map[key][0])

    def get(self, key):
        src, rows, gate = self._map[key]
        value = np.asarray(self._reader.get(src))
        if rows is not None:
            value = value[rows[0] : rows[1]]
        if gate is not None:
            g = np.asarray(self._reader.get(gate)).astype(np.float32)
            value = ((g[:, None] if value.ndim == 2 else g) * value.astype(np.float32)).astype(value.dtype)
        return value


def load_release_diffusion_decoder(path: str | os.PathLike | Any, dtype: Any = np.float32, prefix: str = "",
                                   cfg: LTX2DiffusionDecoderConfig | None = None
                                   ) -> tuple[dict, LTX2DiffusionDecoderConfig]:
    """Load the diffusion decoder from a release VAE file (:class:`ReleaseDiffusionDecoderReader`), strictly.

    Args:
      path: a safetensors file or folder, or a reader. dtype: as :func:`load_diffusion_decoder`.
      prefix: the VAE's key prefix (``""``: the standalone file; ``"vae."``: a combined checkpoint).
      cfg: the architecture; default: from the file's ``config`` metadata
        (:meth:`LTX2DiffusionDecoderConfig.from_release`), else the LTX-2.5 release's as diffusers' converter
        states it (the class defaults).

    Raises:
      CheckpointError: keys or shapes that do not match ``cfg``.
    """
    from vidax.checkpoint.loader import load_params
    from vidax.checkpoint.safetensors_io import CheckpointReader

    reader = CheckpointReader(path) if isinstance(path, (str, os.PathLike)) else path
    if cfg is None:  # the file's metadata (a reader of a file: CheckpointReader keeps no metadata)
        cfg = read_config(path) if isinstance(path, (str, os.PathLike)) else \
            release_config(getattr(reader, "metadata", None) or {}, str(path))
    params = load_params(ReleaseDiffusionDecoderReader(reader, prefix), diffusion_decoder_keymap(cfg),
                         diffusion_decoder_specs(cfg), dtype, source=str(path))
    return params, cfg


def release_config(metadata: dict[str, str], source: str = "release diffusion VAE") -> LTX2DiffusionDecoderConfig:
    """The architecture a release VAE file's safetensors ``metadata`` states (its ``config`` JSON's ``vae``, read by
    :meth:`LTX2DiffusionDecoderConfig.from_release`); without a ``config``, the LTX-2.5 release's as diffusers'
    converter states it (the class defaults).

    Raises:
      CheckpointError: a ``config`` that is not a JSON object, or whose ``vae`` is not one (``source`` named).
      ValueError: an unsupported configuration.
    """
    from vidax.checkpoint.errors import CheckpointError

    raw = metadata.get("config")
    if raw is None:
        return LTX2DiffusionDecoderConfig()
    try:
        config = json.loads(raw)
    except (TypeError, ValueError, RecursionError):
        config = None
    vae = config.get("vae") if isinstance(config, dict) else None
    if not isinstance(vae, dict) or not isinstance(vae.get("decoder", {}), dict):
        raise CheckpointError(f"{source}: the metadata's config is not a JSON object with a 'vae' object (and its "
                              "'decoder' an object); download the file again")
    try:
        return LTX2DiffusionDecoderConfig.from_release(vae)
    except ValueError as e:
        raise ValueError(f"{source}: the metadata's config: {e}") from None


def _folder_config(folder: Path) -> LTX2DiffusionDecoderConfig:
    """A diffusers ``diffusion_decoder`` folder's configuration (errors name its ``config.json``)."""
    from vidax.checkpoint.errors import CheckpointError

    path = folder / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{path}: missing (or not a file); a diffusers diffusion decoder folder holds its "
                              "config.json beside its weights (copy it from the release)")
    config = read_json(path)
    try:
        return LTX2DiffusionDecoderConfig.from_dict(config)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def read_config(where: str | os.PathLike) -> LTX2DiffusionDecoderConfig:
    """A diffusion decoder's architecture without reading a tensor: a diffusers folder's ``config.json``, or a release
    VAE file's metadata (the file, or a folder holding it alone without ``config.json``).

    Raises:
      CheckpointError: no such file, an unreadable configuration or header. ValueError: an unsupported configuration.
    """
    from vidax.checkpoint.errors import CheckpointError
    from vidax.checkpoint.safetensors_io import SafetensorsFile
    from vidax.models.ltx2.layout import diffusion_decoder_file

    where = Path(where)
    release_file = diffusion_decoder_file(where)
    if release_file is not None:
        return release_config(SafetensorsFile(release_file).metadata, str(release_file))
    if not where.is_dir():
        raise CheckpointError(f"{where}: not found; a diffusion decoder is a folder with config.json or one release "
                              "safetensors file")
    return _folder_config(where)


# ---------------------------------------------------------------------------------------------
# Building blocks (channels-last, pure)
# ---------------------------------------------------------------------------------------------


def rope_split(head_dim: int) -> tuple[int, int, int]:
    """``LTX2VideoVaeRotaryPosEmbed3D``'s (T, H, W) split of ``head_dim``: a quarter to T, the rest halved, even."""
    dim_t = (head_dim // 4) // 2 * 2
    dim_hw = (head_dim - dim_t) // 2
    if dim_hw % 2:
        dim_t -= 2
        dim_hw = (head_dim - dim_t) // 2
    return dim_t, dim_hw, dim_hw


def _rope(x: jax.Array) -> jax.Array:
    """Absolute 3D RoPE on ``(B, T, H, W, heads, D)`` over interleaved pairs, positions ``0..n-1`` per axis, computed
    in float32 and cast back (``LTX2VideoVaeRotaryPosEmbed3D``)."""
    out = []
    lo = 0
    for axis, dim in enumerate(rope_split(x.shape[-1])):
        chunk = x[..., lo : lo + dim].astype(_F32)
        lo += dim
        # The reference builds the inverse frequencies in float64 and casts once.
        inv = jnp.asarray((1.0 / ROPE_BASE ** (np.arange(0, dim, 2, dtype=np.float64) / dim)).astype(np.float32))
        n = x.shape[1 + axis]
        angles = jnp.arange(n, dtype=_F32)[:, None] * inv[None, :]
        shape = [1, 1, 1, 1, 1, dim // 2]
        shape[1 + axis] = n
        cos, sin = jnp.cos(angles).reshape(shape), jnp.sin(angles).reshape(shape)
        pairs = chunk.reshape(*chunk.shape[:-1], dim // 2, 2)
        even, odd = pairs[..., 0], pairs[..., 1]
        out.append(jnp.stack([even * cos - odd * sin, even * sin + odd * cos], axis=-1).reshape(chunk.shape))
    return jnp.concatenate(out, axis=-1).astype(x.dtype)


def _window_start(q, n: int, k: int):
    """First position of the window of query position ``q`` on an axis of ``n`` with kernel ``k`` (shifted inward)."""
    return jnp.clip(q - k // 2, 0, n - k)


def neighborhood_attention(q: jax.Array, k: jax.Array, v: jax.Array, kernel: tuple[int, int, int],
                           block: tuple[int, int, int] = QUERY_BLOCK) -> jax.Array:
    """3D neighbourhood attention (NATTEN ``na3d`` semantics, scale 1: the query comes pre-scaled).

    Query ``(t, h, w)`` attends to the ``kernel`` window starting at ``clip(pos - kernel // 2, 0, n - kernel)`` per
    axis. Blocked: each ``block`` of queries against its key halo of ``block + kernel - 1`` positions per axis,
    :data:`SCORE_BUDGET` scores at a time.

    Args:
      q, k, v: ``(B, T, H, W, heads, D)``, each grid axis at least its kernel.
      kernel: ``(kt, kh, kw)``.

    Returns:
      ``(B, T, H, W, heads, D)`` in ``v``'s dtype (softmax in float32).
    """
    b, *grid, nh, d = q.shape
    bs = [min(n, bb) for n, bb in zip(grid, block)]
    nbs = [-(-n // bb) for n, bb in zip(grid, bs)]
    halo = [min(bb + kk - 1, n) for bb, kk, n in zip(bs, kernel, grid)]
    # Static key-halo starts of each query block (a block's windows start at or after its first query's).
    starts = [np.minimum(np.clip(np.arange(nb) * bb - kk // 2, 0, n - kk), n - hl)
              for nb, bb, kk, n, hl in zip(nbs, bs, kernel, grid, halo)]
    qp = jnp.pad(q, [(0, 0)] + [(0, nb * bb - n) for nb, bb, n in zip(nbs, bs, grid)] + [(0, 0), (0, 0)])
    ids = np.stack(np.meshgrid(*[np.arange(nb) for nb in nbs], indexing="ij"), -1).reshape(-1, 3)
    kv0 = np.stack([starts[a][ids[:, a]] for a in range(3)], -1)

    def one(xs):
        idx, s = xs
        qb = jax.lax.dynamic_slice(qp, (0, idx[0] * bs[0], idx[1] * bs[1], idx[2] * bs[2], 0, 0), (b, *bs, nh, d))
        kb = jax.lax.dynamic_slice(k, (0, s[0], s[1], s[2], 0, 0), (b, *halo, nh, d))
        vb = jax.lax.dynamic_slice(v, (0, s[0], s[1], s[2], 0, 0), (b, *halo, nh, d))
        masks = []
        for a in range(3):
            st = _window_start(idx[a] * bs[a] + jnp.arange(bs[a]), grid[a], kernel[a])
            kpos = s[a] + jnp.arange(halo[a])
            masks.append((kpos[None, :] >= st[:, None]) & (kpos[None, :] < st[:, None] + kernel[a]))
        mask = (masks[0][:, None, None, :, None, None] & masks[1][None, :, None, None, :, None]
                & masks[2][None, None, :, None, None, :]).reshape(math.prod(bs), math.prod(halo))
        scores = jnp.einsum("bqhd,bkhd->bhqk", qb.reshape(b, -1, nh, d), kb.reshape(b, -1, nh, d),
                            preferred_element_type=_F32)
        scores = jnp.where(mask[None, None], scores, -1e30)
        probs = jax.nn.softmax(scores, axis=-1)
        out = jnp.einsum("bhqk,bkhd->bqhd", probs.astype(v.dtype), vb.reshape(b, -1, nh, d),
                         preferred_element_type=_F32)
        return out.astype(v.dtype).reshape(b, *bs, nh, d)

    batch = max(1, min(len(ids), SCORE_BUDGET // (b * nh * math.prod(bs) * math.prod(halo))))
    blocks = jax.lax.map(one, (jnp.asarray(ids, jnp.int32), jnp.asarray(kv0, jnp.int32)), batch_size=batch)
    y = blocks.reshape(*nbs, b, *bs, nh, d).transpose(3, 0, 4, 1, 5, 2, 6, 7, 8)
    y = y.reshape(b, nbs[0] * bs[0], nbs[1] * bs[1], nbs[2] * bs[2], nh, d)
    return y[:, : grid[0], : grid[1], : grid[2]]


def _attention(p: dict, x: jax.Array, kernel: tuple[int, int, int], head_dim: int) -> jax.Array:
    """``LTX2VideoVaeNeighborhoodAttention`` on channels-last ``(B, T, H, W, C)``: q/k/v, RMS-normed q and k, the
    query scaled by ``head_dim ** -0.5``, RoPE, neighbourhood attention, ``to_out``."""
    b, t, h, w, c = x.shape
    dt = p["to_q"]["kernel"].dtype
    shape = (b, t, h, w, c // head_dim, head_dim)
    q = rms_norm(linear(p["to_q"], x).reshape(shape), p["norm_q"], RMS_EPS, out_dtype=_F32) * head_dim**-0.5
    k = rms_norm(linear(p["to_k"], x).reshape(shape), p["norm_k"], RMS_EPS, out_dtype=_F32)
    v = linear(p["to_v"], x).reshape(shape)
    y = neighborhood_attention(_rope(q.astype(dt)), _rope(k.astype(dt)), v, kernel)
    return linear(p["to_out"]["0"], y.reshape(b, t, h, w, c), _F32)


def _swiglu(p: dict, x: jax.Array) -> jax.Array:
    """``w_down(silu(w_gate(x)) * w_up(x))`` in chunks of :data:`SWIGLU_CHUNK` tokens; float32 out."""
    shape = x.shape
    flat = x.reshape(-1, shape[-1])
    n = flat.shape[0]

    def mlp(z):
        g = linear(p["w_gate"], z, _F32)
        u = linear(p["w_up"], z, _F32)
        return linear(p["w_down"], jax.nn.silu(g) * u, _F32)

    if n <= SWIGLU_CHUNK:
        return mlp(flat).reshape(shape[:-1] + (-1,))
    nc = -(-n // SWIGLU_CHUNK)
    flat = jnp.pad(flat, ((0, nc * SWIGLU_CHUNK - n), (0, 0))).reshape(nc, SWIGLU_CHUNK, -1)
    return jax.lax.map(mlp, flat).reshape(nc * SWIGLU_CHUNK, -1)[:n].reshape(shape[:-1] + (-1,))


def _det_blocks(p: dict, x: jax.Array, kernel: tuple[int, int, int], head_dim: int) -> jax.Array:
    """A stage's ``LTX2VideoVaeNABlock`` s under one ``lax.scan``; float32 residual stream."""

    def body(h, bp):
        h = h + _attention(bp["attn"], rms_norm(h, bp["norm1"], RMS_EPS), kernel, head_dim)
        h = h + _swiglu(bp["mlp"], rms_norm(h, bp["norm2"], RMS_EPS))
        return h, None

    return jax.lax.scan(body, x, p)[0]


def _upsample(p: dict, x: jax.Array, stride: tuple[int, int, int], drop_leading_frame: bool = True) -> jax.Array:
    """``LTX2VideoVaePixelShuffleUpsampler``: linear, then channels-last pixel shuffle ``(c, st, sh, sw)``; a temporal
    stride of 2 drops the duplicate leading frame."""
    b, t, h, w, _ = x.shape
    st, sh, sw = stride
    y = linear(p["proj"], x, _F32)
    c = y.shape[-1] // (st * sh * sw)
    y = y.reshape(b, t, h, w, c, st, sh, sw).transpose(0, 1, 5, 2, 6, 3, 7, 4).reshape(b, t * st, h * sh, w * sw, c)
    return y[:, 1:] if st == 2 and drop_leading_frame else y


def _patchify(x: jax.Array, p: int) -> jax.Array:
    """``(B, C, F, H, W)`` -> channels-last ``(B, F, H/p, W/p, C p p)``, channels packed ``(c, p_w, p_h)``."""
    b, c, f, h, w = x.shape
    x = x.reshape(b, c, f, h // p, p, w // p, p).transpose(0, 2, 3, 5, 1, 6, 4)
    return x.reshape(b, f, h // p, w // p, c * p * p)


def _unpatchify(x: jax.Array, p: int) -> jax.Array:
    """Inverse of :func:`_patchify`: channels-last ``(B, F, h, w, C p p)`` -> ``(B, C, F, h p, w p)``."""
    b, f, h, w, cpp = x.shape
    c = cpp // (p * p)
    x = x.reshape(b, f, h, w, c, p, p).transpose(0, 4, 1, 2, 6, 3, 5)
    return x.reshape(b, c, f, h * p, w * p)


# ---------------------------------------------------------------------------------------------
# Geometry (host side, static)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    """Static geometry of an untiled decode of a ``(T, h, w)`` latent (upstream ``_decode_pixels``)."""

    pads: tuple[tuple[int, int], tuple[int, int], tuple[int, int]]  # latent (before, after) pads: T, H, W
    context: tuple[int, int, int]  # stage-5 grid (frames, height, width) after the ghost crop
    canvas: tuple[int, int, int]  # stage-5 pixels (frames, height, width)
    content: tuple[int, int, int]  # decoded video (frames, height, width)
    crop: tuple[int, int]  # first kept pixel row and column of the canvas


def _plan(cfg: LTX2DiffusionDecoderConfig, t: int, h: int, w: int) -> _Plan:
    mt, mh, mw = cfg.min_latent_size
    pads = []
    for n, m, symmetric in ((t, mt, False), (h, mh, True), (w, mw, True)):
        need = max(m - n, 0)
        pads.append((need // 2, need - need // 2) if symmetric else (0, need))
    tt, hh, ww = t + sum(pads[0]) + cfg.trailing_pad_latent_frames, h + sum(pads[1]), w + sum(pads[2])
    for st, sh, sw in cfg.decoder_upsample_strides:
        tt, hh, ww = tt * st - (1 if st == 2 else 0), hh * sh, ww * sw
    ghost = cfg.trailing_pad_latent_frames * cfg.temporal_compression_ratio
    keep = min(tt, max(max(tt - ghost, 1), cfg.decoder_stage5_kernel[0]))
    p, sc = cfg.patch_size, cfg.spatial_compression_ratio
    return _Plan(tuple(pads), (keep, hh, ww), (keep, hh * p, ww * p),
                 ((t - 1) * cfg.temporal_compression_ratio + 1, h * sc, w * sc), (pads[1][0] * sc, pads[2][0] * sc))


def canvas_shape(cfg: LTX2DiffusionDecoderConfig, latents_shape: tuple[int, ...]) -> tuple[int, int, int, int, int]:
    """The shape of the stage-5 noise :func:`decode` draws (its ``noise=``): ``(B, out_channels, F5, H5, W5)``.

    Equal to the output ``(B, 3, 8 (T - 1) + 1, 32 h, 32 w)`` (release compressions) for latents at least
    :attr:`LTX2DiffusionDecoderConfig.min_latent_size` with enough frames for the stage-5 kernel; larger otherwise
    (the padded canvas upstream decodes before cropping).
    """
    b, _, t, h, w = latents_shape
    return (b, cfg.out_channels, *_plan(cfg, t, h, w).canvas)


# ---------------------------------------------------------------------------------------------
# Programs
# ---------------------------------------------------------------------------------------------


def _context(params: dict, cfg: LTX2DiffusionDecoderConfig, z: jax.Array) -> jax.Array:
    """Stages 1-4 on denormalised latents ``(B, C, T, h, w)``: float32 context ``(B, T5, H5, W5, C5)`` (floor
    padding, ghost frames, ghost crop as upstream ``_decode_pixels``)."""
    p = params["decoder"]
    plan = _plan(cfg, *z.shape[2:])  # (z is at least the floor: see _floor_pad)
    z = jnp.pad(z, ((0, 0), (0, 0), (0, cfg.trailing_pad_latent_frames), (0, 0), (0, 0)), mode="edge")
    x = linear(p["conv_in"], jnp.transpose(z, (0, 2, 3, 4, 1)), _F32)
    for s in range(cfg.num_stages):
        with jax.named_scope(f"det_stages.{s}"):
            if cfg.decoder_stage_depths[s]:
                x = _det_blocks(p["det_stages"][str(s)], x, cfg.decoder_stage_kernels[s], cfg.decoder_head_dim)
            x = _upsample(p["upsamples"][str(s)], x, cfg.decoder_upsample_strides[s])
    return x[:, : plan.context[0]]


def _prediction(params: dict, cfg: LTX2DiffusionDecoderConfig, context: jax.Array, x_t: jax.Array,
                timestep: jax.Array) -> jax.Array:
    """One stage-5 evaluation (``forward_diffusion_step``): float32 ``(B, C, F, H, W)``."""
    p = params["decoder"]
    e = timestep_embedding(cfg.decoder_timestep_scale_multiplier * timestep.astype(_F32), TIME_PROJ_DIM,
                           flip_sin_to_cos=True, downscale_freq_shift=0)
    te = p["t_embedder"]["timestep_embedder"]
    t_emb = linear(te["linear_2"], jax.nn.silu(linear(te["linear_1"], e, _F32)), _F32)
    mod = linear(p["shared_adaln"]["proj"], jax.nn.silu(t_emb), _F32).reshape(t_emb.shape[0], ADALN_CHUNKS, -1)
    x = linear(p["conv_in_x_t"], _patchify(x_t, cfg.patch_size), _F32)
    kernel, hd = cfg.decoder_stage5_kernel, cfg.decoder_head_dim

    def body(h, bp):
        m = (mod + bp["scale_shift_table"].astype(_F32)[None])[:, :, None, None, None, :]
        h = h + linear(bp["context_proj"], context, _F32)
        h = h + _attention(bp["attn"], rms_norm(h, bp["norm1"], RMS_EPS) * (1 + m[:, 0]) + m[:, 1], kernel, hd)
        h = h + _swiglu(bp["mlp"], rms_norm(h, bp["norm2"], RMS_EPS) * (1 + m[:, 3]) + m[:, 4])
        return h, None

    if cfg.decoder_stage_depths[-1]:
        x = jax.lax.scan(body, x, p["diff_blocks"])[0]
    x = linear(p["conv_out"], rms_norm(x, p["norm_out"], RMS_EPS), _F32)
    return _unpatchify(x, cfg.patch_size)


def _floor_pad(cfg: LTX2DiffusionDecoderConfig, z: jax.Array) -> jax.Array:
    """Latents padded to the size floor (upstream ``ensure_min_latent_shape``: the last frame repeated, height and
    width edge-replicated symmetrically, the odd one after); outside the program, so small clips share its
    compilation."""
    (t0, t1), (h0, h1), (w0, w1) = _plan(cfg, *z.shape[2:]).pads
    if t0 + t1 + h0 + h1 + w0 + w1 == 0:
        return z
    return jnp.pad(z, ((0, 0), (0, 0), (t0, t1), (h0, h1), (w0, w1)), mode="edge")


@functools.partial(jax.jit, static_argnames=("cfg",))
def _context_program(params, cfg, z):
    return _context(params, cfg, z)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _forward_program(params, cfg, context, x_t, timestep):
    return _prediction(params, cfg, context, x_t, timestep)


def _architecture(cfg: LTX2DiffusionDecoderConfig) -> LTX2DiffusionDecoderConfig:
    """``cfg`` without the settings the device programs do not read (one compilation serves them all)."""
    return dataclasses.replace(cfg, scaling_factor=1.0, decoder_model_output_type="x0", decoder_num_inference_steps=1)


def _euler(cfg: LTX2DiffusionDecoderConfig, x_t: jax.Array, pred: jax.Array, t_now: float, t_next: float,
           last: bool) -> jax.Array:
    """The update after the prediction at ``t_now`` (``LTX2VideoDiffusionDecoder3d.denoise``): reverse Euler to
    ``t_next`` in float32, an ``x0`` prediction converted to the velocity ``(x_t - x0) / t_now``; the last step of
    an ``x0`` model returns the prediction (upstream ``_decode_one_tile``). Elementwise, on the host's dispatch."""
    if cfg.decoder_model_output_type == "x0":
        if last:
            return pred
        pred = (x_t - pred) / t_now
    return x_t - (t_now - t_next) * pred


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def _check_latents(cfg: LTX2DiffusionDecoderConfig, latents, name: str = "latents") -> tuple[int, ...]:
    shape = tuple(getattr(latents, "shape", ()))
    if len(shape) != 5 or shape[1] != cfg.latent_channels or min(shape) < 1:
        raise ValueError(f"{name}: expected (B, {cfg.latent_channels}, T, h, w) channels-first with every size >= 1, "
                         f"got shape {shape}")
    b, _, t, h, w = shape
    if b > 64 or t > MAX_LATENT_FRAMES or h * w > MAX_LATENT_PIXELS:
        raise ValueError(f"{name}: shape {shape} is beyond any video (batch <= 64, T <= {MAX_LATENT_FRAMES}, "
                         f"h * w <= {MAX_LATENT_PIXELS}); decode fewer or smaller latents")
    f5, h5, w5 = _plan(cfg, t, h, w).context
    if f5 * h5 * w5 > MAX_CANVAS_TOKENS:
        raise ValueError(f"{name}: shape {shape} makes a stage-5 grid of {f5}x{h5}x{w5} positions (more than "
                         f"{MAX_CANVAS_TOKENS}); decode fewer frames or a smaller video")
    return shape


def decoder_context(params: dict, cfg: LTX2DiffusionDecoderConfig, latents: jax.Array) -> jax.Array:
    """Stages 1-4 (``forward_stage_4(forward_stages_1_to_3(z))``): the stage-5 context of denormalised latents.

    Args:
      latents: denormalised ``(B, latent_channels, T, h, w)``.

    Returns:
      float32 channels-last ``(B, F5, H5, W5, C5)`` (``F5 = 8 (T - 1) + 1``, ``H5 = 8 h`` in the release, for
      latents at least the size floor).

    Raises:
      ValueError: a wrong rank, channel count or an oversized latent.
    """
    _check_latents(cfg, latents)
    return _context_program(params, _architecture(cfg), _floor_pad(cfg, jnp.asarray(latents, _F32)))


def forward(params: dict, cfg: LTX2DiffusionDecoderConfig, context: jax.Array, x_t: jax.Array,
            timestep: float | jax.Array) -> jax.Array:
    """One denoiser evaluation (``LTX2VideoDiffusionDecoder3d.forward_diffusion_step``).

    Args:
      context: float32 ``(B, F5, H5, W5, C5)`` from :func:`decoder_context`.
      x_t: the noisy canvas ``(B, out_channels, F5, H5 p, W5 p)``.
      timestep: ``t`` in ``[0, 1]``, a number or ``(B,)`` (embedded times ``decoder_timestep_scale_multiplier``).

    Returns:
      float32 ``(B, out_channels, F5, H5 p, W5 p)``: the model's ``x0`` (or ``v``) prediction.

    Raises:
      ValueError: shapes that do not fit together.
    """
    p = cfg.patch_size
    b, f5, h5, w5, c5 = context.shape
    want = (b, cfg.out_channels, f5, h5 * p, w5 * p)
    if c5 != cfg.decoder_stage_channels[-1] or tuple(x_t.shape) != want:
        raise ValueError(f"forward: x_t {tuple(x_t.shape)} must be {want} for context {tuple(context.shape)}")
    if min(f5, h5, w5) < 1 or any(n < k for n, k in zip((f5, h5, w5), cfg.decoder_stage5_kernel)):
        raise ValueError(f"forward: the context grid {(f5, h5, w5)} is smaller than the stage-5 kernel "
                         f"{cfg.decoder_stage5_kernel}")
    t = np.broadcast_to(np.asarray(timestep, np.float32), (b,))
    return _forward_program(params, _architecture(cfg), jnp.asarray(context, _F32), jnp.asarray(x_t, _F32),
                            jnp.asarray(t))


def denormalize_latents(params: dict, cfg: LTX2DiffusionDecoderConfig, latents: jax.Array) -> jax.Array:
    """``latents * latents_std / scaling_factor + latents_mean`` per channel with the decoder's own statistics
    (``LTX2VideoDiffusionDecodePipeline._denormalize_latents`` without a ``vae``)."""
    mean, std = (params[k].astype(_F32).reshape(1, -1, 1, 1, 1) for k in ("latents_mean", "latents_std"))
    return jnp.asarray(latents, _F32) * std / cfg.scaling_factor + mean


def decode(params: dict, cfg: LTX2DiffusionDecoderConfig, latents: jax.Array, *, seed: int = 0,
           noise: jax.Array | None = None, denormalize: bool = True, num_inference_steps: int | None = None,
           progress=None) -> jax.Array:
    """Decode latents to video by denoising (``LTX2VideoDiffusionDecodePipeline`` before ``postprocess_video``).

    Denormalises (``denormalize=True``: the decoder's statistics and ``scaling_factor``, as the pipeline without a
    ``vae``), builds the context (stages 1-4), draws the stage-5 canvas noise and runs the sampling loop
    (``LTX2VideoDiffusionDecoder3d.denoise``: one jitted step per iteration of a host loop), then crops to the
    content (upstream; see the module notes on small latents).

    Args:
      params, cfg: from :func:`load_diffusion_decoder`.
      latents: ``(B, latent_channels, T, h, w)``; normalised (``denormalize=True``) or denormalised (``False``:
        an LTX-2 pipeline's ``output_type="latent"`` output).
      seed: seeds ``jax.random.normal`` for the canvas noise when ``noise`` is None (not torch's stream).
      noise: the canvas noise, :func:`canvas_shape` ``(B, out_channels, F5, H5, W5)`` (the reference's
        ``randn_tensor`` draw).
      num_inference_steps: steps (default ``decoder_num_inference_steps``; 1 in the release).
      progress: optional callable ``progress(step, total)`` after each step.

    Returns:
      float32 video ``(B, out_channels, 8 (T - 1) + 1, 32 h, 32 w)`` (release compressions), about ``[-1, 1]``,
      not clamped (the reference's ``decode(...).sample``).

    Raises:
      ValueError: latents of the wrong rank, channels or an oversized shape; noise of the wrong shape; a step count
        outside ``1..1000``.
    """
    shape = _check_latents(cfg, latents)
    n = cfg.decoder_num_inference_steps if num_inference_steps is None else int(num_inference_steps)
    if not 1 <= n <= MAX_STEPS:
        raise ValueError(f"num_inference_steps={num_inference_steps}: use 1..{MAX_STEPS} (the release uses 1)")
    want = canvas_shape(cfg, shape)
    if noise is not None and tuple(noise.shape) != want:
        raise ValueError(f"noise: shape {tuple(noise.shape)}, the canvas of latents {shape} is {want} "
                         "(see canvas_shape)")
    z = denormalize_latents(params, cfg, latents) if denormalize else jnp.asarray(latents, _F32)
    arch = _architecture(cfg)
    context = _context_program(params, arch, _floor_pad(cfg, z))
    x_t = jax.random.normal(jax.random.PRNGKey(seed), want, _F32) if noise is None else jnp.asarray(noise, _F32)
    timesteps = np.linspace(1.0, 1.0 / n, n, dtype=np.float32)  # torch.linspace(1, 1/N, N) in float32
    for i in range(n):
        t_next = timesteps[i + 1] if i + 1 < n else np.float32(0.0)
        t = jnp.full((shape[0],), timesteps[i], _F32)
        x_t = _euler(cfg, x_t, _forward_program(params, arch, context, x_t, t), timesteps[i], t_next, i == n - 1)
        if progress is not None:
            progress(i + 1, n)
    plan = _plan(cfg, *shape[2:])
    (f, h, w), (r0, c0) = plan.content, plan.crop
    return x_t[:, :, :f, r0 : r0 + h, c0 : c0 + w]


def postprocess(video: jax.Array) -> np.ndarray:
    """``VideoProcessor.postprocess_video(video, output_type="np")``: ``(B, C, F, H, W)`` in ``[-1, 1]`` -> float32
    ``(B, F, H, W, C)`` in ``[0, 1]`` (``x / 2 + 0.5`` clamped)."""
    v = np.asarray(video, np.float32)
    return np.clip(v / 2 + 0.5, 0.0, 1.0).transpose(0, 2, 3, 4, 1)
