"""CogVideoX configuration: the transformer and VAE architectures, and the generation presets.

:class:`CogVideoXTransformerConfig` mirrors the keys of a diffusers ``transformer/config.json``
for ``CogVideoXTransformer3DModel``; :class:`CogVideoXVAEConfig` those of ``vae/config.json``
for ``AutoencoderKLCogVideoX``. Presets carry the CogVideoX rows of the paper's benchmark table
(``paper-table5.tsv``) and the sampler settings of the CogVideo repository's
``inference/cli_demo.py`` (DDIM for 2B, DPM for 5B and 1.5; guidance 6; dynamic CFG with DPM).

Released variants (diffusers configs):

==========================  =====  ======  =====  ======================================  ===========
model                       heads  layers  in_ch  position                                patch_size_t
==========================  =====  ======  =====  ======================================  ===========
CogVideoX-2b                30     30      16     3D sin-cos (fixed)                      --
CogVideoX-5b                48     42      16     3D RoPE (``linspace`` grid, crop)       --
CogVideoX-5b-I2V            48     42      32     RoPE + learned table (fixed 480x720)    --
CogVideoX1.5-5B             48     42      16     3D RoPE (``slice`` grid, ``max_size``)   2
CogVideoX1.5-5B-I2V         48     42      32     RoPE + ``ofs`` embedding                 2
==========================  =====  ======  =====  ======================================  ===========
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vidax.core.config_values import check_class_name, config_values


def _known(cls, config: dict[str, Any]) -> dict[str, Any]:
    return config_values(cls, config, f"{cls.__name__} (config.json)")


@dataclass(frozen=True)
class CogVideoXTransformerConfig:
    """Architecture of a CogVideoX diffusion transformer (diffusers ``CogVideoXTransformer3DModel``).

    Defaults are diffusers' defaults (the CogVideoX-2b sizes: 30 heads of 64, 30 layers).

    Attributes (the config.json keys that change the computation):
      num_attention_heads, attention_head_dim: width ``dim = heads * head_dim``.
      in_channels, out_channels: latent channels (32 in for image-to-video: noise + image latents).
      flip_sin_to_cos, freq_shift: the sinusoidal timestep embedding (width ``dim``).
      time_embed_dim: width of the timestep embedding the AdaLN layers read (512).
      ofs_embed_dim: width of the CogVideoX1.5 I2V ``ofs`` embedding, or None.
      text_embed_dim: text-encoder width (4096, T5-XXL).
      num_layers: transformer blocks.
      attention_bias: biases on q/k/v projections.
      sample_width, sample_height: latent size the positional tables were built for (90 x 60
        for CogVideoX, 170 x 96 for 1.5); the 1.5 RoPE grid cannot exceed it.
      sample_frames: video frames the tables were built for (49; 81 for 1.5).
      patch_size, patch_size_t: spatial patch; temporal patch (None for CogVideoX 1.0, 2 for 1.5).
      temporal_compression_ratio: VAE time compression (4), to count latent frames.
      max_text_seq_length: text tokens (226).
      norm_eps: LayerNorm epsilon of the blocks and the head (1e-5; the QK norms use 1e-6).
      spatial_interpolation_scale, temporal_interpolation_scale: sin-cos grid scales.
      use_rotary_positional_embeddings: 3D RoPE on video tokens (5B, 1.5); else sin-cos (2B).
      use_learned_positional_embeddings: a learned ``pos_embedding`` table (5B I2V).
      patch_bias: bias of the CogVideoX 1.0 patch convolution (the 1.5 patch linear always has one).
    """

    num_attention_heads: int = 30
    attention_head_dim: int = 64
    in_channels: int = 16
    out_channels: int | None = 16
    flip_sin_to_cos: bool = True
    freq_shift: int = 0
    time_embed_dim: int = 512
    ofs_embed_dim: int | None = None
    text_embed_dim: int = 4096
    num_layers: int = 30
    dropout: float = 0.0
    attention_bias: bool = True
    sample_width: int = 90
    sample_height: int = 60
    sample_frames: int = 49
    patch_size: int = 2
    patch_size_t: int | None = None
    temporal_compression_ratio: int = 4
    max_text_seq_length: int = 226
    activation_fn: str = "gelu-approximate"
    timestep_activation_fn: str = "silu"
    norm_elementwise_affine: bool = True
    norm_eps: float = 1e-5
    spatial_interpolation_scale: float = 1.875
    temporal_interpolation_scale: float = 1.0
    use_rotary_positional_embeddings: bool = False
    use_learned_positional_embeddings: bool = False
    patch_bias: bool = True

    def __post_init__(self):
        if self.out_channels is None:
            object.__setattr__(self, "out_channels", self.in_channels)
        problems = []
        if self.activation_fn != "gelu-approximate":
            problems.append(f"activation_fn={self.activation_fn!r} (only 'gelu-approximate')")
        if self.timestep_activation_fn != "silu":
            problems.append(f"timestep_activation_fn={self.timestep_activation_fn!r} (only 'silu')")
        if not self.norm_elementwise_affine:
            problems.append("norm_elementwise_affine=false (every released checkpoint has affine norms)")
        if self.use_learned_positional_embeddings and not self.use_rotary_positional_embeddings:
            # diffusers raises the same: no checkpoint has learned positions without RoPE.
            problems.append("use_learned_positional_embeddings without use_rotary_positional_embeddings")
        if self.use_rotary_positional_embeddings and self.attention_head_dim % 8:
            problems.append(f"attention_head_dim={self.attention_head_dim} with RoPE (must be a multiple of 8)")
        if not self.use_rotary_positional_embeddings and self.dim % 16:
            problems.append(f"width {self.dim} with sin-cos positions (must be a multiple of 16)")
        if self.patch_size_t is not None and self.patch_size_t < 1:
            problems.append(f"patch_size_t={self.patch_size_t}")
        if problems:
            raise ValueError("CogVideoXTransformerConfig: unsupported " + "; ".join(problems))

    @property
    def dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @property
    def ff_inner_dim(self) -> int:
        """FFN hidden width (diffusers ``FeedForward`` default ``mult=4``)."""
        return 4 * self.dim

    @property
    def temporal_patch(self) -> int:
        """Latent frames per token (1 for CogVideoX 1.0, ``patch_size_t`` for 1.5)."""
        return self.patch_size_t or 1

    @property
    def patch_features(self) -> int:
        """Input features of one patch: ``in_channels * p_t * p * p``."""
        return self.in_channels * self.temporal_patch * self.patch_size**2

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> CogVideoXTransformerConfig:
        """Build from a diffusers ``transformer/config.json`` dict (keys starting with ``_`` ignored).

        Raises:
          ValueError: ``_class_name`` is not ``CogVideoXTransformer3DModel``, or an unsupported
            setting (named).
        """
        check_class_name(config, "CogVideoXTransformer3DModel", "transformer")
        return cls(**_known(cls, config))


@dataclass(frozen=True)
class CogVideoXVAEConfig:
    """Configuration of ``AutoencoderKLCogVideoX`` (the keys of a diffusers ``vae/config.json``).

    Defaults are diffusers' defaults (the CogVideoX VAE: 128/256/256/512 channels, 3 resnets per
    encoder block, 4x time and 8x space compression, 16 latent channels).

    Attributes:
      block_out_channels: channel count per resolution stage.
      latent_channels: latent channels (16).
      layers_per_block: encoder resnets per stage (the decoder uses one more).
      norm_num_groups, norm_eps: GroupNorm settings of the resnets.
      temporal_compression_ratio: 4 (the first ``log2`` stages also halve time).
      sample_height, sample_width: pixel size the default tiles are half of.
      scaling_factor: latents are ``z * scaling_factor`` in diffusion space (1.15258426 for 2B,
        0.7 for 5B and 1.5).
      invert_scale_latents: CogVideoX1.5 I2V: image latents are divided by, not multiplied by,
        the scaling factor (read by the image-to-video pipeline).
      use_quant_conv, use_post_quant_conv: must be False (as in every released checkpoint).
    """

    in_channels: int = 3
    out_channels: int = 3
    down_block_types: tuple[str, ...] = ("CogVideoXDownBlock3D",) * 4
    up_block_types: tuple[str, ...] = ("CogVideoXUpBlock3D",) * 4
    block_out_channels: tuple[int, ...] = (128, 256, 256, 512)
    latent_channels: int = 16
    layers_per_block: int = 3
    act_fn: str = "silu"
    norm_eps: float = 1e-6
    norm_num_groups: int = 32
    temporal_compression_ratio: float = 4
    sample_height: int = 480
    sample_width: int = 720
    scaling_factor: float = 1.15258426
    shift_factor: float | None = None
    latents_mean: tuple[float, ...] | None = None
    latents_std: tuple[float, ...] | None = None
    force_upcast: bool = True
    use_quant_conv: bool = False
    use_post_quant_conv: bool = False
    invert_scale_latents: bool = False

    def __post_init__(self):
        for name in ("down_block_types", "up_block_types", "block_out_channels"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in ("latents_mean", "latents_std"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, tuple(float(v) for v in getattr(self, name)))
        problems = []
        n = len(self.block_out_channels)
        if set(self.down_block_types) != {"CogVideoXDownBlock3D"} or len(self.down_block_types) != n:
            problems.append(f"down_block_types={list(self.down_block_types)} (one 'CogVideoXDownBlock3D' per stage)")
        if set(self.up_block_types) != {"CogVideoXUpBlock3D"} or len(self.up_block_types) != n:
            problems.append(f"up_block_types={list(self.up_block_types)} (one 'CogVideoXUpBlock3D' per stage)")
        if self.act_fn not in ("silu", "swish"):
            problems.append(f"act_fn={self.act_fn!r} (only 'silu')")
        if any(c % self.norm_num_groups for c in self.block_out_channels):
            problems.append(f"block_out_channels {list(self.block_out_channels)} not divisible by norm_num_groups")
        levels = self.temporal_levels
        if 2**levels != self.temporal_compression_ratio or levels > n - 1:
            problems.append(f"temporal_compression_ratio={self.temporal_compression_ratio} (a power of 2 <= 2^(stages-1))")
        if self.use_quant_conv or self.use_post_quant_conv:
            # No released checkpoint has them, and diffusers sizes them by out_channels (3), not the latent width.
            problems.append("use_quant_conv / use_post_quant_conv (no released CogVideoX VAE has them)")
        if self.shift_factor not in (None, 0, 0.0):
            problems.append(f"shift_factor={self.shift_factor} (the CogVideoX pipelines do not read it)")
        if problems:
            raise ValueError("CogVideoXVAEConfig: unsupported " + "; ".join(problems))

    @property
    def temporal_levels(self) -> int:
        """How many stages halve time (``log2(temporal_compression_ratio)``)."""
        return int(round(float(self.temporal_compression_ratio))).bit_length() - 1

    @property
    def spatial_compression(self) -> int:
        """Pixels per latent pixel along H and W (8)."""
        return 2 ** (len(self.block_out_channels) - 1)

    @property
    def temporal_compression(self) -> int:
        return int(self.temporal_compression_ratio)

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> CogVideoXVAEConfig:
        """Build from a diffusers ``vae/config.json`` dict.

        Raises:
          ValueError: ``_class_name`` is not ``AutoencoderKLCogVideoX``, or an unsupported setting.
        """
        check_class_name(config, "AutoencoderKLCogVideoX", "vae")
        return cls(**_known(cls, config))


@dataclass(frozen=True)
class CogVideoXPreset:
    """Generation defaults for one CogVideoX row of the paper's benchmark table.

    Attributes:
      width, height, num_frames, num_inference_steps: the row's sizes.
      guidance_scale, sampler, use_dynamic_cfg: the CogVideo ``cli_demo.py`` settings
        (``"ddim"`` for 2B, ``"dpm"`` with dynamic CFG for the 5B models).
      dtype: transformer weight dtype. The 2B checkpoint ships fp16 weights; they are cast to
        bf16 on the host while loading (fp16's range is too small for the activations).
      fps: 8 for CogVideoX (49 frames = 6 s), 16 for CogVideoX1.5.
      tp, sp: the row's mesh split (for the mesh issue).
      vae_tiling: decode in spatial tiles (the reference's ``enable_tiling``; cli_demo turns it on).
    """

    name: str
    model: str
    width: int
    height: int
    num_frames: int
    num_inference_steps: int = 50
    guidance_scale: float = 6.0
    sampler: str = "dpm"
    use_dynamic_cfg: bool = True
    dtype: str = "bfloat16"
    fps: int = 8
    tp: int = 1
    sp: int = 1
    task: str = "t2v"
    vae_tiling: bool = True

    def settings(self) -> dict:
        """The pipeline call's settings of this row."""
        return dict(height=self.height, width=self.width, num_frames=self.num_frames,
                    num_inference_steps=self.num_inference_steps, guidance_scale=self.guidance_scale,
                    sampler=self.sampler, use_dynamic_cfg=self.use_dynamic_cfg, vae_tiling=self.vae_tiling)


PRESETS: dict[str, CogVideoXPreset] = {
    p.name: p
    for p in [
        CogVideoXPreset("cogvideox-2b", "CogVideoX-2b", 720, 480, 49, sampler="ddim", use_dynamic_cfg=False, tp=2),
        CogVideoXPreset("cogvideox-5b", "CogVideoX-5b", 720, 480, 49, tp=4),
        CogVideoXPreset("cogvideox-5b-i2v", "CogVideoX-5b-I2V", 720, 480, 49, tp=4, task="i2v"),
        CogVideoXPreset("cogvideox1.5-5b", "CogVideoX1.5-5B", 1360, 768, 81, fps=16, sp=4),
        CogVideoXPreset("cogvideox1.5-5b-i2v", "CogVideoX1.5-5B-I2V", 1360, 768, 81, fps=16, sp=4, task="i2v"),
    ]
}
