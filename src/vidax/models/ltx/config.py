"""LTX-Video configuration: the transformer architecture and the generation presets.

:class:`LTXVideoTransformerConfig` mirrors the keys of a diffusers ``transformer/config.json`` for
``LTXVideoTransformer3DModel``. The VAE's configuration lives beside the VAE
(:class:`vidax.models.ltx.vae.LTXVideoVAEConfig`). Presets carry the LTX-Video rows of the paper's
benchmark table (``paper-table5.tsv``: 1216x704, 121 frames; 30 steps for dev, 8 for distilled).

Released transformers (diffusers configs):

=========================  =====  ========  ======  ==============  ============
model                      heads  head_dim  layers  cross_attn_dim  in_channels
=========================  =====  ========  ======  ==============  ============
LTX-Video 0.9.0 - 0.9.8 2B  32     64        28      2048            128
LTX-Video 0.9.7 / 0.9.8 13B 32     128       48      4096            128
=========================  =====  ========  ======  ==============  ============
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vidax.core.config_values import check_class_name, config_values


@dataclass(frozen=True)
class LTXVideoTransformerConfig:
    """Architecture of an LTX-Video diffusion transformer (diffusers ``LTXVideoTransformer3DModel``).

    Defaults are diffusers' defaults (the 2B sizes: 32 heads of 64, 28 layers).

    Attributes (the config.json keys that change the computation):
      in_channels, out_channels: latent channels per token (128; ``patch_size = patch_size_t = 1`` in
        every release, so a token is one latent pixel).
      patch_size, patch_size_t: spatial and temporal patch (they scale the RoPE coordinates).
      num_attention_heads, attention_head_dim: width ``dim = heads * head_dim``.
      cross_attention_dim: width of the projected text tokens the cross-attention reads (``dim``).
      num_layers: transformer blocks.
      qk_norm: ``"rms_norm_across_heads"`` (RMSNorm over all heads' q / k features, eps 1e-5).
      norm_elementwise_affine: the blocks' RMSNorms carry a scale (False in every release).
      norm_eps: epsilon of the blocks' RMSNorms.
      caption_channels: text-encoder width (4096, T5-XXL).
      attention_bias, attention_out_bias: biases of q/k/v and of the output projection.
    """

    in_channels: int = 128
    out_channels: int | None = 128
    patch_size: int = 1
    patch_size_t: int = 1
    num_attention_heads: int = 32
    attention_head_dim: int = 64
    cross_attention_dim: int = 2048
    num_layers: int = 28
    activation_fn: str = "gelu-approximate"
    qk_norm: str = "rms_norm_across_heads"
    norm_elementwise_affine: bool = False
    norm_eps: float = 1e-6
    caption_channels: int = 4096
    attention_bias: bool = True
    attention_out_bias: bool = True

    def __post_init__(self):
        if self.out_channels is None:
            object.__setattr__(self, "out_channels", self.in_channels)
        problems = []
        if self.activation_fn != "gelu-approximate":
            problems.append(f"activation_fn={self.activation_fn!r} (only 'gelu-approximate')")
        if self.qk_norm != "rms_norm_across_heads":
            # diffusers' LTXAttention raises NotImplementedError for anything else.
            problems.append(f"qk_norm={self.qk_norm!r} (only 'rms_norm_across_heads')")
        if self.cross_attention_dim != self.dim:
            # The caption projection maps text to `dim` features, which the cross-attention's keys read.
            problems.append(f"cross_attention_dim={self.cross_attention_dim} != heads * head_dim = {self.dim}")
        if self.dim % 2:
            problems.append(f"width {self.dim} (RoPE needs an even width)")
        if (self.patch_size, self.patch_size_t) != (1, 1):
            # Every release has one token per latent pixel; the pipelines pack latents so.
            problems.append(f"patch_size={self.patch_size}, patch_size_t={self.patch_size_t} (only 1 and 1, as in "
                            "every release)")
        if problems:
            raise ValueError("LTXVideoTransformerConfig: unsupported " + "; ".join(problems))

    @property
    def dim(self) -> int:
        """Model width ``num_attention_heads * attention_head_dim``."""
        return self.num_attention_heads * self.attention_head_dim

    @property
    def ff_inner_dim(self) -> int:
        """FFN hidden width (diffusers ``FeedForward`` default ``mult=4``)."""
        return 4 * self.dim

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> LTXVideoTransformerConfig:
        """Build from a diffusers ``transformer/config.json`` dict (keys starting with ``_`` ignored).

        Raises:
          ValueError: ``_class_name`` is not ``LTXVideoTransformer3DModel``, a value of the wrong type, or
            an unsupported setting (named).
        """
        check_class_name(config, "LTXVideoTransformer3DModel", "transformer")
        return cls(**config_values(cls, config, f"{cls.__name__} (config.json)"))


#: The distilled 0.9.8 models' timesteps (the diffusers LTX-Video documentation's ``LTXConditionPipeline`` call).
DISTILLED_TIMESTEPS = (1000.0, 993.0, 987.0, 981.0, 975.0, 909.0, 725.0, 0.03)
#: The negative prompt of the diffusers LTX-Video examples.
LTX_NEGATIVE_PROMPT = "worst quality, inconsistent motion, blurry, jittery, distorted"


@dataclass(frozen=True)
class LTXPreset:
    """Generation defaults for one LTX-Video row of the paper's benchmark table (1216x704, 121 frames).

    Attributes:
      width, height, num_frames, num_inference_steps: the row's sizes.
      guidance_scale, guidance_rescale: CFG and its rescale (dev: 5.0 and 0.7; distilled: no CFG).
      timesteps: the distilled models' explicit timesteps, or None (the pipeline's default schedule).
      decode_timestep, decode_noise_scale: the timestep-conditioned VAE's decode settings (0.05, 0.025).
      frame_rate: frames per second (the RoPE time scale and the video's rate; the pipelines' default 25).
      dtype: transformer weight dtype; tp, sp: the row's mesh split.
    """

    name: str
    model: str
    width: int
    height: int
    num_frames: int
    num_inference_steps: int
    guidance_scale: float
    guidance_rescale: float = 0.0
    timesteps: tuple[float, ...] | None = None
    decode_timestep: float = 0.05
    decode_noise_scale: float = 0.025
    frame_rate: int = 25
    negative_prompt: str = LTX_NEGATIVE_PROMPT
    dtype: str = "bfloat16"
    tp: int = 4
    sp: int = 1
    task: str = "t2v"

    @property
    def fps(self) -> int:
        """The video's frame rate (``frame_rate``: the model is told it too)."""
        return self.frame_rate

    def settings(self) -> dict:
        """The pipeline call's settings of this row."""
        return dict(height=self.height, width=self.width, num_frames=self.num_frames,
                    num_inference_steps=self.num_inference_steps, guidance_scale=self.guidance_scale,
                    guidance_rescale=self.guidance_rescale, timesteps=self.timesteps,
                    decode_timestep=self.decode_timestep, decode_noise_scale=self.decode_noise_scale,
                    frame_rate=self.frame_rate, negative_prompt=self.negative_prompt)


PRESETS: dict[str, LTXPreset] = {
    p.name: p
    for p in [
        LTXPreset("ltx-video-0.9.8-13b-dev", "LTX-Video-0.9.8-13B-dev", 1216, 704, 121, 30, 5.0, guidance_rescale=0.7),
        LTXPreset("ltx-video-0.9.8-13b-distilled", "LTX-Video-0.9.8-13B-distilled", 1216, 704, 121, 8, 1.0,
                  timesteps=DISTILLED_TIMESTEPS),
        LTXPreset("ltx-video-0.9.8-2b-distilled", "LTX-Video-0.9.8-2B-distilled", 1216, 704, 121, 8, 1.0,
                  timesteps=DISTILLED_TIMESTEPS),
    ]
}
