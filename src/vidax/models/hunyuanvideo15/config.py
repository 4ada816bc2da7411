"""HunyuanVideo-1.5 transformer configuration: a diffusers ``transformer/config.json`` or the original release's.

:class:`HunyuanVideo15TransformerConfig` mirrors ``HunyuanVideo15Transformer3DModel``'s constructor (diffusers
``models/transformers/transformer_hunyuan_video15.py``). Every released variant (Tencent-Hunyuan/HunyuanVideo-1.5,
``tencent/HunyuanVideo-1.5`` ``transformer/<variant>/``) is one 8.3B architecture: 54 dual-stream blocks (no
single-stream blocks), 16 heads of 128, a 2-block token refiner over 3584-wide Qwen2.5-VL states, a byT5 projection of
1472-wide glyph states, a SigLIP image projection of 1152-wide features, 65 input channels (32 latent channels, the 32
of the condition latents and a mask), 32 output channels, 1 x 1 x 1 patches, RoPE theta 256 over axes (16, 56, 56). The
variants differ in their weights and in:

===========================  ===========  =========  ============  =============================================
variant (diffusers' script)  target_size  task_type  use_meanflow  notes
===========================  ===========  =========  ============  =============================================
``480p_t2v``                 640          ``i2v``    false         ``task_type`` as diffusers' converter sets it
``720p_t2v``                 960          ``t2v``    false
``720p_i2v``                 960          ``i2v``    false
``480p_t2v_distilled``       640          ``t2v``    false         CFG-distilled: guidance scale 1, no embedder
``480p_i2v_distilled``       640          ``i2v``    false
``720p_i2v_distilled``       960          ``i2v``    false
``480p_i2v_step_distilled``  640          ``i2v``    true          MeanFlow: ``timestep_r`` (the next timestep)
===========================  ===========  =========  ============  =============================================

``target_size`` (the pixel bucket base) and ``task_type`` are pipeline metadata; the transformer does not read them.
The original release's ``config.json`` (``HunyuanVideo_1_5_DiffusionTransformer``, keys ``hidden_size``,
``heads_num``, ``mm_double_blocks_depth``, ...) is read by :meth:`HunyuanVideo15TransformerConfig.from_original_dict`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vidax.core.config_values import check_class_name, config_values

#: The diffusers class and the original repository's class of a transformer ``config.json``.
DIFFUSERS_CLASS = "HunyuanVideo15Transformer3DModel"
ORIGINAL_CLASS = "HunyuanVideo_1_5_DiffusionTransformer"

#: Width of the byT5 projection's hidden layers (diffusers ``HunyuanVideo15ByT5TextProjection(.., 2048, ..)``, the
#: original's ``ByT5Mapper(out_dim=2048, hidden_dim=2048)``): a constant of the architecture, not a config key.
BYT5_HIDDEN_DIM = 2048
#: The original ``ByT5Mapper``'s input width (hard-coded ``in_dim=1472``: byT5-small's ``d_model``).
ORIGINAL_BYT5_DIM = 1472
#: ``ideal_resolution`` of the original config -> diffusers' ``target_size`` (diffusers' converter's table).
TARGET_SIZES = {"480p": 640, "720p": 960}


@dataclass(frozen=True)
class HunyuanVideo15TransformerConfig:
    """Architecture of a HunyuanVideo-1.5 diffusion transformer (diffusers ``HunyuanVideo15Transformer3DModel``).

    Defaults are diffusers' (the released 8.3B model).

    Attributes (config.json keys):
      in_channels: channels of the transformer input (65: latents, condition latents and mask concatenated).
      out_channels: predicted channels (32; None: ``in_channels``, as diffusers' ``out_channels or in_channels``).
      num_attention_heads, attention_head_dim: width ``dim = heads * head_dim`` (2048).
      num_layers: dual-stream blocks (separate video and text weights, joint attention).
      num_refiner_layers: blocks of the Qwen-stream token refiner (``context_embedder``; MLP always 4x: diffusers does
        not pass ``mlp_ratio`` to it).
      mlp_ratio: MLP width of the dual-stream blocks, ``int(dim * mlp_ratio)``.
      patch_size, patch_size_t: spatial and temporal patch of the ``x_embedder`` convolution.
      qk_norm: ``"rms_norm"`` (the only value of the releases; RMSNorm over head_dim, eps 1e-6).
      text_embed_dim: width of the Qwen2.5-VL states (3584).
      text_embed_2_dim: width of the byT5 glyph states (1472).
      image_embed_dim: width of the SigLIP image features (1152).
      rope_theta, rope_axes_dim: 3D RoPE base and the head features rotated by the frame, row and column index (their
        sum is ``attention_head_dim``).
      target_size: the pixel bucket base of the pipeline (640 for 480p, 960 for 720p); not read by the transformer.
      task_type: ``"t2v"`` or ``"i2v"`` (pipeline metadata).
      use_meanflow: the step-distilled model's second timestep embedder (``timestep_r``).

    Raises (construction):
      ValueError: an unsupported value or combination, named.
    """

    in_channels: int = 65
    out_channels: int | None = 32
    num_attention_heads: int = 16
    attention_head_dim: int = 128
    num_layers: int = 54
    num_refiner_layers: int = 2
    mlp_ratio: float = 4.0
    patch_size: int = 1
    patch_size_t: int = 1
    qk_norm: str = "rms_norm"
    text_embed_dim: int = 3584
    text_embed_2_dim: int = 1472
    image_embed_dim: int = 1152
    rope_theta: float = 256.0
    rope_axes_dim: tuple[int, ...] = (16, 56, 56)
    target_size: int = 640
    task_type: str = "i2v"
    use_meanflow: bool = False

    def __post_init__(self):
        if self.out_channels is None:
            object.__setattr__(self, "out_channels", self.in_channels)
        object.__setattr__(self, "rope_axes_dim", tuple(self.rope_axes_dim))
        problems = []
        for name in ("num_refiner_layers", "text_embed_2_dim", "image_embed_dim", "target_size", "in_channels",
                     "out_channels", "num_attention_heads", "attention_head_dim", "num_layers", "patch_size",
                     "patch_size_t", "text_embed_dim"):
            if getattr(self, name) < 1:
                problems.append(f"{name}={getattr(self, name)} (must be at least 1)")
        if self.qk_norm != "rms_norm":
            problems.append(f"qk_norm={self.qk_norm!r} (only 'rms_norm')")
        if self.task_type not in ("t2v", "i2v"):
            problems.append(f"task_type={self.task_type!r} (one of 't2v', 'i2v')")
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
            raise ValueError("HunyuanVideo15TransformerConfig: unsupported " + "; ".join(problems))

    @property
    def dim(self) -> int:
        """Model width ``num_attention_heads * attention_head_dim``."""
        return self.num_attention_heads * self.attention_head_dim

    @property
    def mlp_dim(self) -> int:
        """MLP width of the dual-stream blocks: ``int(dim * mlp_ratio)``."""
        return int(self.dim * self.mlp_ratio)

    @property
    def refiner_mlp_dim(self) -> int:
        """MLP width of the token refiner's blocks: ``int(dim * 4.0)`` (``HunyuanVideo15TokenRefiner``'s default)."""
        return int(self.dim * 4.0)

    @property
    def latent_channels(self) -> int:
        """Channels of the noise latents: ``out_channels`` (the input adds as many condition channels and a mask)."""
        return self.out_channels

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> HunyuanVideo15TransformerConfig:
        """Build from a diffusers ``transformer/config.json`` dict (keys that are not fields are ignored).

        Raises:
          ValueError: ``_class_name`` is not ``HunyuanVideo15Transformer3DModel`` (the original release's class is
            named, with :meth:`from_original_dict` as the fix); a value of the wrong type or a size below 1 (named,
            :func:`vidax.core.config_values.config_values`); an unsupported setting (named).
        """
        name = config.get("_class_name")
        if name == ORIGINAL_CLASS:
            raise ValueError(f"transformer config.json is the original release's {ORIGINAL_CLASS!r}: read it with "
                             "HunyuanVideo15TransformerConfig.from_original_dict")
        check_class_name(config, DIFFUSERS_CLASS, "transformer")
        values = config_values(cls, config, f"{cls.__name__} (config.json)")
        return cls(**values)

    @classmethod
    def from_original_dict(cls, config: dict[str, Any]) -> HunyuanVideo15TransformerConfig:
        """Build from the original release's ``transformer/<variant>/config.json``
        (``HunyuanVideo_1_5_DiffusionTransformer`` of Tencent-Hunyuan/HunyuanVideo-1.5,
        ``hyvideo/models/transformers/hunyuanvideo_1_5_transformer.py``).

        Renames: ``hidden_size`` / ``heads_num`` -> heads and head width; ``mm_double_blocks_depth`` ->
        ``num_layers``; ``mlp_width_ratio``; ``patch_size [p_t, p, p]``; ``in_channels`` (the latent channels) ->
        ``2 in + 1`` with ``concat_condition`` (``in + in // 2 + 1`` with ``is_reshape_temporal_channels``);
        ``text_states_dim``; ``vision_states_dim`` -> ``image_embed_dim``; ``rope_dim_list``; ``ideal_resolution`` ->
        ``target_size`` (480p: 640, 720p: 960); ``ideal_task`` -> ``task_type``. The byT5 width is the original's
        hard-coded 1472. Settings of the original class that diffusers' architecture does not have are refused.

        Raises:
          ValueError: not that class; a value of the wrong type (named); single-stream blocks, a guidance embedder,
            a text projection other than the token refiner, no byT5 or image projection or condition-type embedding,
            or another setting diffusers' model cannot represent (each named).
        """
        name = config.get("_class_name")
        if name not in (None, ORIGINAL_CLASS):
            raise ValueError(f"transformer config.json is for {name!r}, not the original release's {ORIGINAL_CLASS!r}")
        values = config_values(_OriginalConfig, config, "HunyuanVideo-1.5 original transformer (config.json)")
        o = _OriginalConfig(**values)
        problems = []
        expect = {"mm_single_blocks_depth": 0, "guidance_embed": False, "text_projection": "single_refiner",
                  "use_attention_mask": True, "text_pool_type": None, "glyph_byT5_v2": True,
                  "vision_projection": "linear", "use_cond_type_embedding": True, "qk_norm": True,
                  "qk_norm_type": "rms", "qkv_bias": True, "mlp_act_type": "gelu_tanh"}
        for key, want in expect.items():
            if getattr(o, key) != want:
                problems.append(f"{key}={getattr(o, key)!r} (HunyuanVideo-1.5's architecture has {want!r})")
        if len(o.patch_size) != 3 or o.patch_size[1] != o.patch_size[2]:
            problems.append(f"patch_size={list(o.patch_size)} (expected [p_t, p, p])")
        if o.heads_num < 1 or o.hidden_size % o.heads_num:
            problems.append(f"hidden_size={o.hidden_size} is not a multiple of heads_num={o.heads_num}")
        if o.ideal_resolution is not None and o.ideal_resolution not in TARGET_SIZES:
            problems.append(f"ideal_resolution={o.ideal_resolution!r} (one of {list(TARGET_SIZES)})")
        if problems:
            raise ValueError("HunyuanVideo-1.5 original transformer (config.json): unsupported " + "; ".join(problems))
        if o.concat_condition:
            in_channels = (o.in_channels + o.in_channels // 2 + 1 if o.is_reshape_temporal_channels
                           else 2 * o.in_channels + 1)
        else:
            in_channels = o.in_channels
        return cls(
            in_channels=in_channels, out_channels=o.in_channels if o.out_channels is None else o.out_channels,
            num_attention_heads=o.heads_num, attention_head_dim=o.hidden_size // o.heads_num,
            num_layers=o.mm_double_blocks_depth, mlp_ratio=float(o.mlp_width_ratio), patch_size=o.patch_size[1],
            patch_size_t=o.patch_size[0], text_embed_dim=o.text_states_dim, text_embed_2_dim=ORIGINAL_BYT5_DIM,
            image_embed_dim=o.vision_states_dim, rope_theta=float(o.rope_theta), rope_axes_dim=tuple(o.rope_dim_list),
            target_size=TARGET_SIZES.get(o.ideal_resolution, 640), task_type=o.ideal_task or "i2v",
            use_meanflow=o.use_meanflow,
        )


@dataclass(frozen=True)
class _OriginalConfig:
    """The original ``HunyuanVideo_1_5_DiffusionTransformer.__init__``'s keys that shape the weights or the math, with
    its defaults (values are type-checked against these annotations)."""

    patch_size: tuple[int, ...] = (1, 2, 2)
    in_channels: int = 4
    concat_condition: bool = True
    out_channels: int | None = None
    hidden_size: int = 3072
    heads_num: int = 24
    mlp_width_ratio: float = 4.0
    mlp_act_type: str = "gelu_tanh"
    mm_double_blocks_depth: int = 20
    mm_single_blocks_depth: int = 40
    rope_dim_list: tuple[int, ...] = (16, 56, 56)
    qkv_bias: bool = True
    qk_norm: bool = True
    qk_norm_type: str = "rms"
    guidance_embed: bool = False
    use_meanflow: bool = False
    text_projection: str = "single_refiner"
    use_attention_mask: bool = True
    text_states_dim: int = 4096
    text_pool_type: str | None = None
    rope_theta: float = 256
    glyph_byT5_v2: bool = False
    vision_projection: str = "none"
    vision_states_dim: int = 1280
    is_reshape_temporal_channels: bool = False
    use_cond_type_embedding: bool = False
    ideal_resolution: str | None = None
    ideal_task: str | None = None
