"""Wan configuration: the transformer's architecture, and the generation presets.

:class:`WanTransformerConfig` mirrors the keys of a diffusers
``transformer/config.json`` for ``WanTransformer3DModel``. Presets carry the
reference settings of the paper's benchmark rows (``paper-table5.tsv``) and of
the Wan repositories (``wan/configs/shared_config.py``, ``generate.py``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class WanTransformerConfig:
    """Architecture of a Wan2.1 diffusion transformer (diffusers ``WanTransformer3DModel``).

    Sizes of the released models: 1.3B has ``num_attention_heads=12``,
    ``attention_head_dim=128`` (dim 1536), ``ffn_dim=8960``, ``num_layers=30``;
    14B has 40 heads (dim 5120), ``ffn_dim=13824``, 40 layers.
    """

    patch_size: tuple[int, int, int] = (1, 2, 2)
    num_attention_heads: int = 40
    attention_head_dim: int = 128
    in_channels: int = 16
    out_channels: int = 16
    text_dim: int = 4096
    freq_dim: int = 256
    ffn_dim: int = 13824
    num_layers: int = 40
    cross_attn_norm: bool = True
    qk_norm: str | None = "rms_norm_across_heads"
    eps: float = 1e-6
    image_dim: int | None = None
    added_kv_proj_dim: int | None = None
    rope_max_seq_len: int = 1024
    pos_embed_seq_len: int | None = None

    @property
    def dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> WanTransformerConfig:
        """Build from a diffusers ``transformer/config.json`` dict.

        Raises:
          ValueError: a configuration this version does not run (image conditioning,
            an unknown ``qk_norm``), naming the key.
        """
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in config.items() if k in names}
        if "patch_size" in kwargs:
            kwargs["patch_size"] = tuple(kwargs["patch_size"])
        cfg = cls(**kwargs)
        if cfg.image_dim is not None or cfg.added_kv_proj_dim is not None:
            raise ValueError(
                "this checkpoint is a Wan image-to-video transformer (image_dim / added_kv_proj_dim set); "
                "vidax runs Wan2.1 text-to-video checkpoints so far"
            )
        if cfg.qk_norm not in ("rms_norm_across_heads",):
            raise ValueError(f"transformer config qk_norm={cfg.qk_norm!r} is not supported; expected 'rms_norm_across_heads'")
        if cfg.out_channels is None:
            cfg = dataclasses.replace(cfg, out_channels=cfg.in_channels)
        return cfg


# The negative prompt of the Wan repositories (wan/configs/shared_config.py, sample_neg_prompt).
WAN_NEGATIVE_PROMPT = (
    "色调艳丽，过曝，静态，细节模糊不清，字幕，风格，作品，画作，画面，静止，整体发灰，最差质量，低质量，"
    "JPEG压缩残留，丑陋的，残缺的，多余的手指，画得不好的手部，画得不好的脸部，畸形的，毁容的，形态畸形的肢体，"
    "手指融合，静止不动的画面，杂乱的背景，三条腿，背景人很多，倒着走"
)


@dataclass(frozen=True)
class WanPreset:
    """Generation defaults for one row of the paper's benchmark table.

    Attributes:
      width, height: output size in pixels.
      num_frames: output frames (4k+1).
      num_inference_steps, guidance_scale, flow_shift: sampler settings.
      dtype: DiT weight dtype of the row ("bfloat16" or "float32").
      fps: frames per second of the written video.
      tp, sp, offload_chunk: the row's mesh split and offload (used by the mesh issue).
    """

    name: str
    model: str
    width: int
    height: int
    num_frames: int = 81
    num_inference_steps: int = 50
    guidance_scale: float = 5.0
    flow_shift: float = 3.0
    dtype: str = "bfloat16"
    fps: int = 16
    tp: int = 1
    sp: int = 1
    offload_chunk: int | None = None
    negative_prompt: str = field(default=WAN_NEGATIVE_PROMPT, repr=False)


PRESETS: dict[str, WanPreset] = {
    p.name: p
    for p in [
        # paper-table5.tsv rows "Wan2.1 1.3B T2V" and "Wan2.1 14B T2V"; shift 3.0 at 480p, 5.0 at 720p.
        WanPreset("wan2.1-t2v-1.3b-480p", "Wan2.1-T2V-1.3B", 832, 480, dtype="bfloat16", tp=4),
        WanPreset("wan2.1-t2v-14b-480p", "Wan2.1-T2V-14B", 832, 480, dtype="bfloat16", tp=4),
        WanPreset("wan2.1-t2v-14b-720p", "Wan2.1-T2V-14B", 1280, 720, flow_shift=5.0, dtype="float32", tp=4, offload_chunk=20),
    ]
}
