"""Cosmos-Predict2.5 transformer configuration: a diffusers ``transformer/config.json``, or the original release's
hyper-parameters.

:class:`CosmosTransformerConfig` mirrors ``CosmosTransformer3DModel``'s constructor (diffusers 0.42
``models/transformers/transformer_cosmos.py``); its defaults are diffusers' (the Cosmos-1.0 7B architecture), so a
``config.json`` that leaves a key out means what it means to diffusers. The two Predict2.5 releases
(nvidia/Cosmos-Predict2.5-2B and -14B, ``base/{pre,post}-trained/*_ema_bf16.pt``) are one architecture at two sizes,
as diffusers' ``scripts/convert_cosmos_to_diffusers.py`` declares them (``TRANSFORMER_CONFIGS``
``"Cosmos-2.5-Predict-Base-2B"`` / ``"-14B"``) and the original repository builds them
(nvidia-cosmos/cosmos-predict2.5 ``configs/video2world/defaults/net.py`` ``COSMOS_V1_2B/14B_NET_MININET`` with the
``reason_embeddings`` experiments' overrides):

=====================  ======  =======  ================================================================
                       2B      14B
=====================  ======  =======  ================================================================
heads x head width     16x128  40x128   ``model_channels`` 2048 / 5120
blocks                 28      36
latent / input ch.     16 / 17 16 / 17  + the condition-mask channel (``MinimalV1LVGDiT``), + padding mask
patch (t, h, w)        1,2,2   1,2,2
RoPE NTK scale         1,3,3   1,3,3    ``rope_{t,h,w}_extrapolation_ratio``; fps modulation off
cross-attention        1024    1024     ``crossattn_proj``: Linear(100352 -> 1024) + GELU over the Qwen states
AdaLN-LoRA width       256     256
extra pos. embedding   none    none     ``extra_per_block_abs_pos_emb=False``
=====================  ======  =======  ================================================================

The original network also scales its timestep (``timestep_scale=0.001``: the sampler's timesteps in [0, 1000] become
the flow-matching sigma in [0, 1]); diffusers' pipeline passes sigma itself, and so does vidax's
:func:`vidax.models.cosmos_predict25.transformer.forward` (``timestep`` in [0, 1]).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from vidax.core.config_values import check_class_name, config_values

#: The diffusers class of a transformer ``config.json``.
DIFFUSERS_CLASS = "CosmosTransformer3DModel"

#: The RMS q/k norms' epsilon: diffusers' ``Attention(qk_norm="rms_norm")`` default, and the original's
#: (``te.pytorch.RMSNorm(head_dim, eps=1e-6)`` in ``minimal_v4_dit.Attention``). docs/design.md, "Cosmos-Predict2.5".
DIFFUSERS_QK_NORM_EPS = 1e-5
ORIGINAL_QK_NORM_EPS = 1e-6

#: The original ``MinimalV1LVGDiT``'s ``timestep_scale`` (the released experiments' value): it multiplies the
#: sampler's timesteps (sigma x 1000) before the time embedding. vidax takes the scaled value (sigma), as diffusers.
ORIGINAL_TIMESTEP_SCALE = 0.001

_PREDICT25 = dict(
    in_channels=16 + 1, out_channels=16, attention_head_dim=128, mlp_ratio=4.0, text_embed_dim=1024,
    adaln_lora_dim=256, max_size=(128, 240, 240), patch_size=(1, 2, 2), rope_scale=(1.0, 3.0, 3.0),
    concat_padding_mask=True, extra_pos_embed_type=None, use_crossattn_projection=True,
    crossattn_proj_in_channels=100352, encoder_hidden_states_channels=1024,
)

#: The released architectures (diffusers' ``TRANSFORMER_CONFIGS`` of ``scripts/convert_cosmos_to_diffusers.py``).
ORIGINAL_CONFIGS: dict[str, dict[str, Any]] = {
    "Cosmos-2.5-Predict-Base-2B": dict(_PREDICT25, num_attention_heads=16, num_layers=28),
    "Cosmos-2.5-Predict-Base-14B": dict(_PREDICT25, num_attention_heads=40, num_layers=36),
}
#: Short names of :data:`ORIGINAL_CONFIGS`.
ORIGINAL_ALIASES = {"2B": "Cosmos-2.5-Predict-Base-2B", "14B": "Cosmos-2.5-Predict-Base-14B"}

# Upper bounds of the sizes a configuration may declare (a hostile config.json must not size an allocation; the
# releases are far below: 40 heads of 128, 36 blocks, 100352-wide text states, max_size 240).
_MAX = {
    "num_layers": 1024, "num_attention_heads": 1024, "attention_head_dim": 1024, "adaln_lora_dim": 65536,
    "in_channels": 4096, "out_channels": 4096, "text_embed_dim": 1 << 20, "crossattn_proj_in_channels": 1 << 22,
    "encoder_hidden_states_channels": 1 << 20, "img_context_num_tokens": 1 << 20, "img_context_dim_out": 1 << 20,
}
_MAX_DIM = 1 << 16          # num_attention_heads * attention_head_dim
_MAX_MLP_DIM = 1 << 20      # int(dim * mlp_ratio)
_MAX_PATCH = 64
_MAX_SIZE = 1 << 16         # each entry of max_size (latent frames / height / width)


@dataclass(frozen=True)
class CosmosTransformerConfig:
    """Architecture of a Cosmos-Predict2.5 diffusion transformer (diffusers ``CosmosTransformer3DModel``).

    Attributes (config.json keys; defaults are diffusers'):
      in_channels: latent channels plus the condition-mask channel (17 in the releases: 16 + 1); the padding-mask
        channel comes on top when ``concat_padding_mask``.
      out_channels: predicted (latent) channels (16).
      num_attention_heads, attention_head_dim: width ``dim = heads * head_dim``.
      num_layers: transformer blocks (self-attention, cross-attention, feed-forward).
      mlp_ratio: feed-forward width ``int(dim * mlp_ratio)``.
      text_embed_dim: width of the context the cross-attentions read (1024: ``crossattn_proj``'s output).
      adaln_lora_dim: hidden width of every AdaLN-LoRA modulation (256).
      max_size: the largest latent ``(T, H, W)`` (128, 240, 240): the RoPE position range and the learnable
        position tables (``max_size // patch_size`` rows).
      patch_size: ``(p_t, p_h, p_w)``.
      rope_scale: per-axis NTK factors ``(t, h, w)`` of the 3D RoPE (``theta = 10000 * s ** (d / (d - 2))``).
      concat_padding_mask: a padding-mask channel is concatenated to the input.
      extra_pos_embed_type: ``"learnable"`` (a normalised sum of per-axis tables added at every block) or None.
      use_crossattn_projection, crossattn_proj_in_channels, encoder_hidden_states_channels: ``crossattn_proj``
        (Linear + GELU) from the ``crossattn_proj_in_channels``-wide text states (100352 = 28 Qwen2.5-VL layers x
        3584) to ``encoder_hidden_states_channels`` (= ``text_embed_dim``).
      controlnet_block_every_n: Cosmos-Transfer2.5's control injection interval (no weights; ignored here).
      img_context_dim_in, img_context_num_tokens, img_context_dim_out: Cosmos-Transfer2.5's image context (refused).
      qk_norm_eps: epsilon of the RMS q/k norms. Not a diffusers key: diffusers' value (1e-5) by default,
        :meth:`from_original` the original network's (1e-6).

    Raises (construction):
      ValueError: an unsupported value, a size out of bounds or an inconsistent combination, each named.
    """

    in_channels: int = 16
    out_channels: int = 16
    num_attention_heads: int = 32
    attention_head_dim: int = 128
    num_layers: int = 28
    mlp_ratio: float = 4.0
    text_embed_dim: int = 1024
    adaln_lora_dim: int = 256
    max_size: tuple[int, int, int] = (128, 240, 240)
    patch_size: tuple[int, int, int] = (1, 2, 2)
    rope_scale: tuple[float, float, float] = (2.0, 1.0, 1.0)
    concat_padding_mask: bool = True
    extra_pos_embed_type: str | None = "learnable"
    use_crossattn_projection: bool = False
    crossattn_proj_in_channels: int = 1024
    encoder_hidden_states_channels: int = 1024
    controlnet_block_every_n: int | None = None
    img_context_dim_in: int | None = None
    img_context_num_tokens: int = 256
    img_context_dim_out: int = 2048
    qk_norm_eps: float = DIFFUSERS_QK_NORM_EPS

    def __post_init__(self):
        for name in ("max_size", "patch_size"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "rope_scale", tuple(float(s) for s in self.rope_scale))
        problems = []
        for name, top in _MAX.items():
            value = getattr(self, name)
            if not 1 <= value <= top:
                problems.append(f"{name}={value} (must be between 1 and {top})")
        if problems:  # the checks below compute with these sizes
            raise ValueError("CosmosTransformerConfig: unsupported " + "; ".join(problems))
        hd = self.attention_head_dim
        if hd % 2 or hd // 6 * 2 < 4:
            problems.append(f"attention_head_dim={hd} (the 3D RoPE splits it into (t, h, w) = ({self.rope_dims}); it "
                            "must be even and at least 12, so that every axis has a rotary width above 2)")
        if self.dim > _MAX_DIM:
            problems.append(f"num_attention_heads * attention_head_dim = {self.dim} (at most {_MAX_DIM})")
        if not (math.isfinite(self.mlp_ratio) and self.mlp_ratio > 0) or not 1 <= self.mlp_dim <= _MAX_MLP_DIM:
            problems.append(f"mlp_ratio={self.mlp_ratio} (must give a feed-forward width between 1 and "
                            f"{_MAX_MLP_DIM})")
        if len(self.patch_size) != 3 or not all(1 <= p <= _MAX_PATCH for p in self.patch_size):
            problems.append(f"patch_size={list(self.patch_size)} (three sizes between 1 and {_MAX_PATCH})")
        elif len(self.max_size) != 3 or not all(p <= m <= _MAX_SIZE for m, p in zip(self.max_size, self.patch_size)):
            problems.append(f"max_size={list(self.max_size)} (three sizes between the patch size and {_MAX_SIZE})")
        if len(self.rope_scale) != 3 or not all(math.isfinite(s) and 0 < s <= 1e4 for s in self.rope_scale):
            problems.append(f"rope_scale={list(self.rope_scale)} (three positive finite factors)")
        if self.extra_pos_embed_type not in (None, "learnable"):
            problems.append(f"extra_pos_embed_type={self.extra_pos_embed_type!r} (None or 'learnable')")
        if self.in_channels - self.out_channels not in (0, 1):
            problems.append(f"in_channels={self.in_channels}, out_channels={self.out_channels} (the input is the "
                            "latents plus at most one condition-mask channel)")
        if self.use_crossattn_projection and self.encoder_hidden_states_channels != self.text_embed_dim:
            problems.append(f"encoder_hidden_states_channels={self.encoder_hidden_states_channels} differs from "
                            f"text_embed_dim={self.text_embed_dim} (crossattn_proj feeds the cross-attentions)")
        if self.img_context_dim_in:
            problems.append(f"img_context_dim_in={self.img_context_dim_in} (Cosmos-Transfer2.5's image context is not "
                            "supported; Predict2.5 has none)")
        if self.controlnet_block_every_n is not None and not 1 <= self.controlnet_block_every_n <= 1024:
            problems.append(f"controlnet_block_every_n={self.controlnet_block_every_n} (between 1 and 1024, or null)")
        if not (math.isfinite(self.qk_norm_eps) and 0 < self.qk_norm_eps < 1):
            problems.append(f"qk_norm_eps={self.qk_norm_eps} (a small positive number)")
        if problems:
            raise ValueError("CosmosTransformerConfig: unsupported " + "; ".join(problems))

    # ---------------------------------------------------------------- derived sizes

    @property
    def dim(self) -> int:
        """Model width ``num_attention_heads * attention_head_dim``."""
        return self.num_attention_heads * self.attention_head_dim

    @property
    def mlp_dim(self) -> int:
        """Feed-forward width ``int(dim * mlp_ratio)`` (diffusers ``FeedForward(mult=mlp_ratio)``)."""
        return int(self.dim * self.mlp_ratio)

    @property
    def latent_channels(self) -> int:
        """Channels of the noise latents (``out_channels``)."""
        return self.out_channels

    @property
    def condition_channels(self) -> int:
        """Condition-mask channels of the input: 1 (the releases) or 0."""
        return self.in_channels - self.out_channels

    @property
    def patch_embed_in_channels(self) -> int:
        """Channels the patch embedding reads: ``in_channels`` plus the padding mask when ``concat_padding_mask``."""
        return self.in_channels + int(self.concat_padding_mask)

    @property
    def context_in_channels(self) -> int:
        """Width of the text states the transformer takes: ``crossattn_proj_in_channels`` with the projection,
        else ``text_embed_dim``."""
        return self.crossattn_proj_in_channels if self.use_crossattn_projection else self.text_embed_dim

    @property
    def rope_dims(self) -> tuple[int, int, int]:
        """The head features rotated by the frame, row and column index: ``(t, h, w)`` with
        ``h = w = head_dim // 6 * 2`` and ``t`` the rest (``CosmosRotaryPosEmbed``; 44, 42, 42 at 128)."""
        h = self.attention_head_dim // 6 * 2
        return self.attention_head_dim - 2 * h, h, h

    @property
    def max_grid(self) -> tuple[int, int, int]:
        """The largest token grid ``max_size // patch_size`` (RoPE's and the learnable tables' rows)."""
        return tuple(m // p for m, p in zip(self.max_size, self.patch_size))

    # ---------------------------------------------------------------- constructors

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> CosmosTransformerConfig:
        """Build from a diffusers ``transformer/config.json`` dict (keys that are not fields are ignored, as
        diffusers ignores them; ``qk_norm_eps`` stays diffusers' 1e-5).

        Raises:
          ValueError: ``_class_name`` is not ``CosmosTransformer3DModel``; a value of the wrong type (named,
            :func:`vidax.core.config_values.config_values`); an unsupported or out-of-bounds setting (named).
        """
        check_class_name(config, DIFFUSERS_CLASS, "transformer")
        values = config_values(cls, {k: v for k, v in config.items() if k != "qk_norm_eps"},
                               f"{cls.__name__} (config.json)")
        return cls(**values)

    @classmethod
    def from_original(cls, name: str = "2B") -> CosmosTransformerConfig:
        """The configuration of an original release's network (the EMA ``.pt`` files have no config).

        Args:
          name: ``"2B"``, ``"14B"``, or diffusers' ``TRANSFORMER_CONFIGS`` name (``"Cosmos-2.5-Predict-Base-2B"``,
            ``"Cosmos-2.5-Predict-Base-14B"``).

        Returns:
          the architecture of :data:`ORIGINAL_CONFIGS` with the original's q/k-norm epsilon (1e-6).

        Raises:
          ValueError: an unknown name (the known ones listed).
        """
        full = ORIGINAL_ALIASES.get(name, name)
        if full not in ORIGINAL_CONFIGS:
            raise ValueError(f"unknown Cosmos-Predict2.5 release {name!r}; known: "
                             f"{sorted(ORIGINAL_ALIASES) + sorted(ORIGINAL_CONFIGS)}")
        return cls(**ORIGINAL_CONFIGS[full], qk_norm_eps=ORIGINAL_QK_NORM_EPS)

    def to_dict(self) -> dict[str, Any]:
        """The diffusers ``config.json`` keys of this configuration (``_class_name`` included; ``qk_norm_eps`` left
        out: diffusers has no such key)."""
        out = {"_class_name": DIFFUSERS_CLASS}
        for name in self.__dataclass_fields__:
            if name != "qk_norm_eps":
                value = getattr(self, name)
                out[name] = list(value) if isinstance(value, tuple) else value
        return out


__all__ = ["DIFFUSERS_CLASS", "DIFFUSERS_QK_NORM_EPS", "ORIGINAL_ALIASES", "ORIGINAL_CONFIGS", "ORIGINAL_QK_NORM_EPS",
           "ORIGINAL_TIMESTEP_SCALE", "CosmosTransformerConfig"]
