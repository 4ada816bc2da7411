"""Configuration of LTX-2's audio-video transformer (diffusers 0.42.1 ``LTX2VideoTransformer3DModel``).

The fields are the reference's ``config.json`` keys with its defaults. LTX-2.5's options: ``gated_attn`` /
``audio_gated_attn`` (per-head attention gates), ``cross_attn_mod`` / ``audio_cross_attn_mod`` (AdaLN on the text
cross-attention: 9 modulation rows per block, a per-block prompt table), ``rope_type="split"``, ``ff_bias=False``
(no bias in the video feed-forward), ``use_prompt_embeddings=False`` (the connectors project the text),
``use_prompt_adaln_single=False`` (timestep-independent prompt modulation), ``use_keyframes_abs_pos_embedding``.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, fields
from typing import Any

from vidax.core.config_values import check_class_name

ROPE_TYPES = ("interleaved", "split")
_MAX_DIM = 1 << 16
#: The most blocks a configuration may declare (the 22B release has 48); bounds the per-block work before loading.
MAX_LAYERS = 1024


@dataclass(frozen=True)
class LTX2TransformerConfig:
    """``LTX2VideoTransformer3DModel``'s configuration (its ``config.json`` keys and defaults).

    Raises:
      ValueError: a setting outside what is implemented or sane (named).
    """

    in_channels: int = 128
    out_channels: int | None = 128
    patch_size: int = 1
    patch_size_t: int = 1
    num_attention_heads: int = 32
    attention_head_dim: int = 128
    cross_attention_dim: int = 4096
    vae_scale_factors: tuple[int, int, int] = (8, 32, 32)
    pos_embed_max_pos: int = 20
    base_height: int = 2048
    base_width: int = 2048
    gated_attn: bool = False
    cross_attn_mod: bool = False
    audio_in_channels: int = 128
    audio_out_channels: int | None = 128
    audio_patch_size: int = 1
    audio_patch_size_t: int = 1
    audio_num_attention_heads: int = 32
    audio_attention_head_dim: int = 64
    audio_cross_attention_dim: int = 2048
    audio_scale_factor: int = 4
    audio_pos_embed_max_pos: int = 20
    audio_sampling_rate: int = 16000
    audio_hop_length: int = 160
    audio_gated_attn: bool = False
    audio_cross_attn_mod: bool = False
    num_layers: int = 48
    activation_fn: str = "gelu-approximate"
    qk_norm: str = "rms_norm_across_heads"
    norm_elementwise_affine: bool = False
    norm_eps: float = 1e-6
    caption_channels: int = 3840
    attention_bias: bool = True
    attention_out_bias: bool = True
    rope_theta: float = 10000.0
    rope_double_precision: bool = True
    causal_offset: int = 1
    timestep_scale_multiplier: int = 1000
    cross_attn_timestep_scale_multiplier: int = 1000
    rope_type: str = "interleaved"
    use_prompt_embeddings: bool = True
    perturbed_attn: bool = False
    ff_bias: bool = True
    audio_ff_bias: bool = True
    use_prompt_adaln_single: bool = True
    use_keyframes_abs_pos_embedding: bool = False

    def __post_init__(self):
        object.__setattr__(self, "vae_scale_factors", tuple(int(v) for v in self.vae_scale_factors))
        if self.rope_type not in ROPE_TYPES:
            raise ValueError(f"ltx2 transformer config: rope_type {self.rope_type!r} is not one of {ROPE_TYPES}")
        if self.activation_fn != "gelu-approximate":
            raise ValueError(f"ltx2 transformer config: activation_fn {self.activation_fn!r} is not supported")
        if self.qk_norm != "rms_norm_across_heads":
            raise ValueError(f"ltx2 transformer config: qk_norm {self.qk_norm!r} is not supported")
        if self.norm_elementwise_affine:
            raise ValueError("ltx2 transformer config: norm_elementwise_affine=True is not supported "
                             "(no release has it)")
        if (self.patch_size, self.patch_size_t, self.audio_patch_size, self.audio_patch_size_t) != (1, 1, 1, 1):
            raise ValueError("ltx2 transformer config: patch sizes other than 1 are not supported")
        for name in ("in_channels", "num_attention_heads", "attention_head_dim", "cross_attention_dim",
                     "audio_in_channels", "audio_num_attention_heads", "audio_attention_head_dim",
                     "audio_cross_attention_dim", "num_layers", "caption_channels", "pos_embed_max_pos",
                     "audio_pos_embed_max_pos", "base_height", "base_width", "audio_scale_factor",
                     "audio_sampling_rate", "audio_hop_length"):
            v = getattr(self, name)
            top = MAX_LAYERS if name == "num_layers" else _MAX_DIM * 16
            if not (isinstance(v, int) and not isinstance(v, bool) and 0 < v <= top):
                raise ValueError(f"ltx2 transformer config: {name}={v!r} must be an integer in 1..{top}")
        for name in ("rope_theta", "norm_eps"):
            v = getattr(self, name, None)
            if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool)
                                      and math.isfinite(v) and v > 0):
                raise ValueError(f"ltx2 transformer config: {name}={v!r} must be a finite positive number")
        if self.inner_dim > _MAX_DIM or self.audio_inner_dim > _MAX_DIM:
            raise ValueError("ltx2 transformer config: attention width over 65536")
        if self.rope_type == "split":
            # split RoPE views every table as (heads, half head width): the widths must divide.
            for dim, heads in ((self.inner_dim, self.num_attention_heads),
                               (self.audio_inner_dim, self.audio_num_attention_heads),
                               (self.audio_cross_attention_dim, self.num_attention_heads),
                               (self.audio_cross_attention_dim, self.audio_num_attention_heads)):
                if (dim // 2) % heads:
                    raise ValueError(f"ltx2 transformer config: split RoPE of width {dim} over {heads} heads")
            if self.audio_cross_attention_dim != self.audio_inner_dim:
                raise ValueError("ltx2 transformer config: split RoPE needs audio_cross_attention_dim == audio width")

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @property
    def audio_inner_dim(self) -> int:
        return self.audio_num_attention_heads * self.audio_attention_head_dim

    @property
    def out_ch(self) -> int:
        return self.out_channels or self.in_channels

    @property
    def audio_out_ch(self) -> int:
        return self.audio_out_channels or self.audio_in_channels

    @property
    def prompt_modulation(self) -> bool:
        """Either stream modulates its text cross-attention (``cross_attn_adaln`` of the blocks)."""
        return self.cross_attn_mod or self.audio_cross_attn_mod

    @property
    def prompt_adaln(self) -> bool:
        """The model has the timestep-dependent ``prompt_adaln`` / ``audio_prompt_adaln`` embedders (LTX-2.3)."""
        return self.prompt_modulation and self.use_prompt_adaln_single

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> LTX2TransformerConfig:
        """Build from the ``transformer/config.json`` dict; other keys (``_diffusers_version``, ...) are ignored.

        Raises:
          ValueError: ``_class_name`` present and not ``LTX2VideoTransformer3DModel`` (another family's transformer
            behind this family's pipeline); an unsupported setting.
        """
        check_class_name(config, "LTX2VideoTransformer3DModel", "transformer")
        names = {f.name for f in fields(cls)}
        return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in config.items() if k in names})
