"""Device memory of the Wan VAEs' programs as :mod:`vidax.core.wan_vae` runs them, for the family planners that decode
with them (Cosmos-Predict2.5: the Wan2.1 VAE; Cosmos3: the Wan2.2 VAE).

The programs are compiled on abstract arguments (nothing allocated, no weight read); each phase adds what lives beside
its program (docs/design.md, "Planner").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.core import wan_vae
from vidax.core.params import abstract_params
from vidax.core.planner import compiled_bytes, weight_bytes


def vae_part_specs(vae: wan_vae.WanVAEConfig, parts: Sequence[str] | None = None):
    """The spec tree of the VAE's top-level ``parts`` (:data:`vidax.core.wan_vae.ENCODER_PARTS`,
    :data:`~vidax.core.wan_vae.DECODER_PARTS`); None: the whole VAE."""
    specs = wan_vae.vae_specs(vae)
    return specs if parts is None else {k: v for k, v in specs.items() if k in parts}


def vae_weight_bytes(vae: wan_vae.WanVAEConfig, dtype: Any = "float32", parts: Sequence[str] | None = None) -> int:
    """Weight bytes of the VAE's ``parts`` (default the whole VAE) in ``dtype``."""
    return weight_bytes(vae_part_specs(vae, parts), dtype)


def vae_decode_bytes(vae: wan_vae.WanVAEConfig, latent_shape: tuple[int, ...], dtype: Any = "float32") -> dict:
    """Device bytes of the VAE decode of ``latent_shape`` latents ``(B, z_dim, T, h, w)`` as
    :func:`vidax.core.wan_vae.decode` runs it: one latent frame at a time through :func:`~vidax.core.wan_vae.
    decode_head`, then :func:`~vidax.core.wan_vae.decode_tail` on two of its four frames at a time.

    The programs are compiled on abstract arguments for a later latent frame (the cache full; the first frame's
    programs hold less); each phase adds what lives beside its program: the other half of the cache, the head's
    output while the tail runs, and the frames decoded so far (float32, ``1 + 4 (T - 2)`` of them when the last latent
    frame decodes). The decode ends with the concatenation: every frame's output and the video (float32
    ``(B, 3, 1 + 4 (T - 1), s h, s w)``, ``s`` the spatial compression: 8 for Wan2.1, 16 for Wan2.2), with
    the cache still referenced.

    Returns:
      ``{"head", "tail": program bytes (the decoder's weights among their arguments), "cache": bytes, "video": the
      decoded video's bytes, "peak": the decode's peak (the decoder's weights included), "decoder_weights": bytes,
      "frames": pixel frames}``.
    """
    b, c, t, h, w = latent_shape
    dtype = jnp.dtype(dtype)
    params = abstract_params(vae_part_specs(vae, wan_vae.DECODER_PARTS), dtype)
    z = jax.ShapeDtypeStruct((b, c, 1, h, w), dtype)
    _, head_first = jax.eval_shape(lambda p, z: wan_vae.decode_head(p, vae, z), params, z)
    x, head_cache = jax.eval_shape(lambda p, z, k: wan_vae.decode_head(p, vae, z, k), params, z, head_first)
    x1 = jax.ShapeDtypeStruct((x.shape[0], 1, *x.shape[2:]), x.dtype)
    _, tail_cache = jax.eval_shape(lambda p, x: wan_vae.decode_tail(p, vae, x), params, x1)
    step = wan_vae.DECODER_TAIL_FRAMES if x.shape[1] % wan_vae.DECODER_TAIL_FRAMES == 0 else x.shape[1]
    xs = jax.ShapeDtypeStruct((x.shape[0], step, *x.shape[2:]), x.dtype)
    head = compiled_bytes(wan_vae.decode_head.lower(params, vae, z, head_cache).compile())
    tail = compiled_bytes(wan_vae.decode_tail.lower(params, vae, xs, tail_cache).compile())

    def nbytes(tree) -> int:
        return sum(math.prod(a.shape) * np.dtype(a.dtype).itemsize for a in jax.tree.leaves(tree))

    s, r = vae.spatial_compression, vae.temporal_compression
    frames = 1 + r * (t - 1)
    frame = b * vae.video_channels * (s * h) * (s * w) * 4  # one float32 pixel frame
    video = frames * frame
    before = max(frames - r, 0) * frame  # the frames decoded before the last latent frame's four
    decoder = weight_bytes(vae_part_specs(vae, wan_vae.DECODER_PARTS), dtype)
    cache = nbytes(head_cache) + nbytes(tail_cache)
    phases = {
        "head": head + nbytes(tail_cache) + before,
        "tail": tail + nbytes(head_cache) + nbytes(x) + before + (x.shape[1] - step) * frame,
        "concatenate": 2 * video + cache + decoder,
    }
    return {"head": head, "tail": tail, "cache": cache, "video": video, "peak": max(phases.values()),
            "phases": phases, "decoder_weights": decoder, "frames": frames}


def vae_encode_bytes(vae: wan_vae.WanVAEConfig, frames: int, height: int, width: int, dtype: Any = "float32",
                     batch: int = 1) -> dict:
    """Device bytes of image- and video-to-world's VAE encode of ``frames`` (1 or ``4k + 1``) conditioning frames at
    the video's size (:func:`vidax.core.wan_vae.encode`: the first frame alone, then 4 at a time, each chunk's
    moments kept).

    Returns:
      ``{"program": the largest chunk's bytes (the encoder's weights among its arguments) with the input video and
      the moments so far, "encoder_weights": bytes}``.
    """
    dtype = jnp.dtype(dtype)
    params = abstract_params(vae_part_specs(vae, wan_vae.ENCODER_PARTS), dtype)
    c = vae.video_channels
    first = jax.ShapeDtypeStruct((batch, c, 1, height, width), dtype)
    video = batch * c * frames * height * width * np.dtype(dtype).itemsize
    out = compiled_bytes(wan_vae.encode_chunk.lower(params, vae, first).compile())
    if frames > 1:
        _, cache = jax.eval_shape(lambda p, x: wan_vae.encode_chunk(p, vae, x), params, first)
        later = jax.ShapeDtypeStruct((batch, c, 4, height, width), dtype)
        out = max(out, compiled_bytes(wan_vae.encode_chunk.lower(params, vae, later, cache).compile()))
    s, r = vae.spatial_compression, vae.temporal_compression
    moments = batch * 2 * vae.z_dim * ((frames - 1) // r + 1) * (height // s) * (width // s) * dtype.itemsize
    return {"program": out + video + moments,
            "encoder_weights": weight_bytes(vae_part_specs(vae, wan_vae.ENCODER_PARTS), dtype)}


__all__ = ["vae_decode_bytes", "vae_encode_bytes", "vae_part_specs", "vae_weight_bytes"]
