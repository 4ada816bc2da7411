"""Tiled decoding of the LTX-Video VAEs (diffusers ``AutoencoderKLLTXVideo`` and ``AutoencoderKLLTX2Video``, whose
``tiled_decode`` / ``_temporal_tiled_decode`` are the same algorithm): tile layout, raster-order blending, frame tiles.

Shared by ``models/ltx/vae.py`` (0.9.x) and ``models/ltx2/vae.py`` (LTX-2.x). The configuration argument is duck-typed:
anything with ``spatial_compression`` and ``temporal_compression``; the decoder is a callable from a host latent tile
``(B, C, t, h, w)`` to its decoded video.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.core.tiling import blend as blend_tiles

#: One decoder call: a host latent tile ``(B, C, t, h, w)`` -> its decoded video.
Decoder = Callable[[np.ndarray], jax.Array]

@dataclass(frozen=True)
class LTXVideoTiling:
    """The reference's tiling settings (``enable_tiling`` and ``use_framewise_decoding``), defaults as its ``__init__``.

    Attributes:
      spatial: ``use_tiling``: latents wider or taller than one tile are decoded in overlapping tiles.
      temporal: ``use_framewise_decoding``: more latent frames than one tile are decoded in overlapping
        frame tiles (``enable_tiling`` does not set it; off by default, as there).
      tile_sample_min_height, tile_sample_min_width, tile_sample_min_num_frames: tile sizes in pixels / frames.
      tile_sample_stride_height, tile_sample_stride_width, tile_sample_stride_num_frames: tile starts, in
        pixels / frames; a tile overlaps the next by ``min - stride``.
    """

    spatial: bool = True
    temporal: bool = False
    tile_sample_min_height: int = 512
    tile_sample_min_width: int = 512
    tile_sample_min_num_frames: int = 16
    tile_sample_stride_height: int = 448
    tile_sample_stride_width: int = 448
    tile_sample_stride_num_frames: int = 8

    def resolve(self, cfg: Any) -> dict[str, int]:
        """The integer quantities of the reference's ``tiled_decode`` / ``_temporal_tiled_decode``.

        Raises:
          ValueError: a stride below one latent pixel / frame, or above the tile size (gaps between tiles).
        """
        s, t = cfg.spatial_compression, cfg.temporal_compression
        q = {
            "latent_height": self.tile_sample_min_height // s, "latent_width": self.tile_sample_min_width // s,
            "latent_frames": self.tile_sample_min_num_frames // t,
            "latent_stride_height": self.tile_sample_stride_height // s,
            "latent_stride_width": self.tile_sample_stride_width // s,
            "latent_stride_frames": self.tile_sample_stride_num_frames // t,
            "blend_height": self.tile_sample_min_height - self.tile_sample_stride_height,
            "blend_width": self.tile_sample_min_width - self.tile_sample_stride_width,
            "blend_frames": self.tile_sample_min_num_frames - self.tile_sample_stride_num_frames,
            "stride_height": self.tile_sample_stride_height, "stride_width": self.tile_sample_stride_width,
            "stride_frames": self.tile_sample_stride_num_frames,
        }
        for axis, unit in (("height", s), ("width", s), ("frames", t)):
            if q[f"latent_stride_{axis}"] < 1 or q[f"blend_{axis}"] < 0:
                name = "num_frames" if axis == "frames" else axis
                stride, size = getattr(self, f"tile_sample_stride_{name}"), getattr(self, f"tile_sample_min_{name}")
                raise ValueError(f"LTXVideoTiling: tile_sample_stride_{name} must be at least {unit} (one latent "
                                 f"{'frame' if axis == 'frames' else 'pixel'}) and at most tile_sample_min_{name}; got "
                                 f"{stride} and {size}")
        return q


@functools.partial(jax.jit, static_argnames=("blend", "stride", "size"))
def compose_spatial(rows: list, blend: tuple[int, int], stride: tuple[int, int], size: tuple[int, int]) -> jax.Array:
    """The blending of ``tiled_decode``, one program per tile layout (composed eagerly, every slice, product and
    concatenation compiled on its own: 15 s of the 16 s of a 6-tile decode in the tests)."""
    rows = [list(row) for row in rows]
    out_rows = []
    for i, row in enumerate(rows):
        kept = []
        for j, tile in enumerate(row):
            if i > 0:
                tile = blend_tiles(rows[i - 1][j], tile, blend[0], axis=3)
            if j > 0:
                tile = blend_tiles(row[j - 1], tile, blend[1], axis=4)
            row[j] = tile  # written back: the blended tile is the neighbour of the next ones
            kept.append(tile[:, :, :, : stride[0], : stride[1]])
        out_rows.append(jnp.concatenate(kept, axis=4))
    return jnp.concatenate(out_rows, axis=3)[:, :, :, : size[0], : size[1]]


@functools.partial(jax.jit, static_argnames=("blend", "stride", "frames"))
def compose_temporal(row: list, blend: int, stride: int, frames: int) -> jax.Array:
    """The blending of ``_temporal_tiled_decode`` (every tile after the first already without its last frame)."""
    row, kept = list(row), []
    for i, tile in enumerate(row):
        if i > 0:
            tile = blend_tiles(row[i - 1], tile, blend, axis=2)
            row[i] = tile  # written back, as the reference's in-place blend
            kept.append(tile[:, :, :stride])
        else:
            kept.append(tile[:, :, : stride + 1])
    return jnp.concatenate(kept, axis=2)[:, :, :frames]


def tiled(decoder: Decoder, cfg: Any, z: np.ndarray, q: dict) -> jax.Array:
    """``AutoencoderKLLTXVideo.tiled_decode``: raster-order tiles, each blended with the tile above and to the
    left, written back before it serves as a neighbour (the reference blends in place; paper Table 4 fault 14).

    ``z`` is a host array: tiles are cut on the host (latents are small), not by one compiled slice per tile.
    """
    h, w = z.shape[3:]
    rows = [[decoder(z[:, :, :, i : i + q["latent_height"], j : j + q["latent_width"]])
             for j in range(0, w, q["latent_stride_width"])] for i in range(0, h, q["latent_stride_height"])]
    s = cfg.spatial_compression
    return compose_spatial(rows, (q["blend_height"], q["blend_width"]), (q["stride_height"], q["stride_width"]),
                            (h * s, w * s))


def decode_frames(decoder: Decoder, cfg: Any, z: np.ndarray, q: dict, spatial: bool) -> jax.Array:
    h, w = z.shape[3:]
    if spatial and (w > q["latent_width"] or h > q["latent_height"]):
        return tiled(decoder, cfg, z, q)
    return decoder(z)


def temporal_tiled(decoder: Decoder, cfg: Any, z: np.ndarray, q: dict, spatial: bool) -> jax.Array:
    """``AutoencoderKLLTXVideo._temporal_tiled_decode``: tiles of ``latent_frames + 1`` latent frames every
    ``latent_stride_frames``; every tile after the first loses its last frame, is blended with the (blended)
    tile before over ``blend_frames`` frames, written back, and keeps ``stride_frames`` frames (the first
    ``stride_frames + 1``)."""
    t = z.shape[2]
    row = []
    for i in range(0, t, q["latent_stride_frames"]):
        tile = decode_frames(decoder, cfg, z[:, :, i : i + q["latent_frames"] + 1], q, spatial)
        row.append(tile[:, :, :-1] if i > 0 else tile)
    return compose_temporal(row, q["blend_frames"], q["stride_frames"], (t - 1) * cfg.temporal_compression + 1)
