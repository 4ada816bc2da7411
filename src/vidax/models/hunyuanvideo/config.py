"""HunyuanVideo transformer configuration (the keys of a diffusers ``transformer/config.json``).

:class:`HunyuanVideoTransformerConfig` mirrors ``HunyuanVideoTransformer3DModel``'s constructor
(diffusers ``models/transformers/transformer_hunyuan_video.py``). The released 13B models share one
architecture (24 heads of 128, 20 dual-stream and 40 single-stream blocks, a 2-block token refiner
over 4096-wide Llama states, 768-wide pooled CLIP projection, RoPE theta 256 over axes (16, 56, 56))
and differ in their input and conditioning:

============================  ===========  ===============  ==================================================
model (diffusers' converter)  in_channels  guidance_embeds  image_condition_type
============================  ===========  ===============  ==================================================
``HYVideo-T/2-cfgdistill``    16           true             null (text-to-video)
``HYVideo-T/2-I2V-33ch``      33           false            ``"latent_concat"`` (noise, image latents, mask)
``HYVideo-T/2-I2V-16ch``      16           true             ``"token_replace"`` (first frame's tokens at t = 0)
============================  ===========  ===============  ==================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vidax.core.config_values import check_class_name, config_values

#: Values diffusers accepts for ``image_condition_type``.
IMAGE_CONDITION_TYPES = (None, "latent_concat", "token_replace")


@dataclass(frozen=True)
class HunyuanVideoTransformerConfig:
    """Architecture of a HunyuanVideo diffusion transformer (diffusers ``HunyuanVideoTransformer3DModel``).

    Defaults are diffusers' (the 13B text-to-video model).

    Attributes (config.json keys):
      in_channels, out_channels: latent channels in (33 for the ``latent_concat`` I2V model) and out
        (None: ``in_channels``, as diffusers' ``out_channels or in_channels``).
      num_attention_heads, attention_head_dim: width ``dim = heads * head_dim`` (3072).
      num_layers: dual-stream blocks (separate video and text weights, joint attention).
      num_single_layers: single-stream blocks (shared weights, parallel attention + MLP).
      num_refiner_layers: blocks of the text token refiner (``context_embedder``).
      mlp_ratio: MLP width of the dual- and single-stream blocks, ``int(dim * mlp_ratio)`` (the refiner's is
        always 4x: diffusers does not pass the ratio on to it).
      patch_size, patch_size_t: spatial and temporal patch of the ``x_embedder`` convolution.
      qk_norm: ``"rms_norm"`` (the only value of the releases; RMSNorm over head_dim, eps 1e-6).
      guidance_embeds: the guidance embedder (guidance-distilled models take ``guidance = scale * 1000``).
      text_embed_dim: width of the text encoder's states (4096, Llama).
      pooled_projection_dim: width of the pooled text projection (768, CLIP).
      rope_theta, rope_axes_dim: 3D RoPE base and the head features rotated by the frame, row and column
        index (their sum is ``attention_head_dim``).
      image_condition_type: None, ``"latent_concat"`` or ``"token_replace"``.

    Raises (construction):
      ValueError: an unsupported value or combination, named.
    """

    in_channels: int = 16
    out_channels: int | None = 16
    num_attention_heads: int = 24
    attention_head_dim: int = 128
    num_layers: int = 20
    num_single_layers: int = 40
    num_refiner_layers: int = 2
    mlp_ratio: float = 4.0
    patch_size: int = 2
    patch_size_t: int = 1
    qk_norm: str = "rms_norm"
    guidance_embeds: bool = True
    text_embed_dim: int = 4096
    pooled_projection_dim: int = 768
    rope_theta: float = 256.0
    rope_axes_dim: tuple[int, ...] = (16, 56, 56)
    image_condition_type: str | None = None

    def __post_init__(self):
        if self.out_channels is None:
            object.__setattr__(self, "out_channels", self.in_channels)
        object.__setattr__(self, "rope_axes_dim", tuple(self.rope_axes_dim))
        problems = []
        for name in ("num_single_layers", "num_refiner_layers", "pooled_projection_dim"):
            if getattr(self, name) < 1:
                problems.append(f"{name}={getattr(self, name)} (must be at least 1)")
        if self.qk_norm != "rms_norm":
            problems.append(f"qk_norm={self.qk_norm!r} (only 'rms_norm')")
        if self.image_condition_type not in IMAGE_CONDITION_TYPES:
            problems.append(f"image_condition_type={self.image_condition_type!r} "
                            f"(one of {list(IMAGE_CONDITION_TYPES)})")
        if len(self.rope_axes_dim) != 3 or any(d < 2 or d % 2 for d in self.rope_axes_dim):
            problems.append(f"rope_axes_dim={list(self.rope_axes_dim)} (three positive even widths)")
        elif sum(self.rope_axes_dim) != self.attention_head_dim:
            problems.append(f"rope_axes_dim={list(self.rope_axes_dim)} sums to {sum(self.rope_axes_dim)}, not "
                            f"attention_head_dim={self.attention_head_dim}")
        if not self.mlp_ratio > 0 or int(self.dim * self.mlp_ratio) < 1:
            problems.append(f"mlp_ratio={self.mlp_ratio} (must give a positive MLP width)")
        if not self.rope_theta > 0:
            problems.append(f"rope_theta={self.rope_theta} (must be positive)")
        if problems:
            raise ValueError("HunyuanVideoTransformerConfig: unsupported " + "; ".join(problems))

    @property
    def dim(self) -> int:
        """Model width ``num_attention_heads * attention_head_dim``."""
        return self.num_attention_heads * self.attention_head_dim

    @property
    def mlp_dim(self) -> int:
        """MLP width of the dual- and single-stream blocks: ``int(dim * mlp_ratio)``."""
        return int(self.dim * self.mlp_ratio)

    @property
    def refiner_mlp_dim(self) -> int:
        """MLP width of the token refiner's blocks: ``int(dim * 4.0)`` (diffusers' ``HunyuanVideoTokenRefiner``
        default; the transformer does not pass ``mlp_ratio`` to it)."""
        return int(self.dim * 4.0)

    @property
    def patch_features(self) -> int:
        """Input features of one patch: ``in_channels * patch_size_t * patch_size**2``."""
        return self.in_channels * self.patch_size_t * self.patch_size**2

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> HunyuanVideoTransformerConfig:
        """Build from a diffusers ``transformer/config.json`` dict (keys that are not fields are ignored).

        Raises:
          ValueError: ``_class_name`` is not ``HunyuanVideoTransformer3DModel``; a value of the wrong type or a size
            below 1 (named, :func:`vidax.core.config_values.config_values`); an unsupported setting (named).
        """
        check_class_name(config, "HunyuanVideoTransformer3DModel", "transformer")
        values = config_values(cls, config, f"{cls.__name__} (config.json)")
        extra = [f"{k}={values[k]!r} should be a positive integer" for k in ("num_single_layers", "num_refiner_layers",
                                                                             "pooled_projection_dim")
                 if k in values and values[k] < 1]
        if extra:
            raise ValueError(f"{cls.__name__} (config.json): " + "; ".join(extra) + " (fix these values in its "
                             "config.json)")
        return cls(**values)
