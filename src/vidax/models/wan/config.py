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

from vidax.core.config_values import check_class_name, config_values


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

    @property
    def has_image_input(self) -> bool:
        """CLIP image tokens enter cross-attention (Wan2.1 I2V / FLF2V: ``image_dim`` set)."""
        return self.image_dim is not None

    def check_image_conditioning(self) -> None:
        """Raise ValueError for image-conditioning settings diffusers' model could not run.

        ``WanTransformer3DModel`` feeds the image embedder's output (width ``dim``) to
        ``add_k_proj`` / ``add_v_proj``, so ``added_kv_proj_dim`` must be ``dim`` and comes with
        ``image_dim``; ``pos_embed_seq_len`` (FLF2V) is an image-embedder parameter.
        """
        if (self.image_dim is None) != (self.added_kv_proj_dim is None):
            raise ValueError(
                f"transformer config: image_dim={self.image_dim} and added_kv_proj_dim={self.added_kv_proj_dim} "
                "must be set together (image-to-video) or both be null (text-to-video)"
            )
        if self.added_kv_proj_dim is not None and self.added_kv_proj_dim != self.dim:
            raise ValueError(
                f"transformer config: added_kv_proj_dim={self.added_kv_proj_dim} must equal the model width "
                f"{self.dim} (it projects the image embedder's output)"
            )
        if self.pos_embed_seq_len is not None and self.image_dim is None:
            raise ValueError("transformer config: pos_embed_seq_len (FLF2V) needs image_dim")

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> WanTransformerConfig:
        """Build from a diffusers ``transformer/config.json`` dict.

        Image conditioning (Wan2.1 I2V / FLF2V): ``image_dim`` (CLIP width, 1280) and
        ``added_kv_proj_dim`` (the model width) come together; ``pos_embed_seq_len`` (FLF2V: 2 x 257)
        needs ``image_dim``. Wan2.2 I2V A14B and TI2V-5B have neither (no CLIP).

        Raises:
          ValueError: a configuration this version does not run (only one of ``image_dim`` /
            ``added_kv_proj_dim``, ``added_kv_proj_dim`` other than the model width,
            ``pos_embed_seq_len`` without ``image_dim``, an unknown ``qk_norm``), naming the key; ``_class_name``
            present and not ``WanTransformer3DModel`` (another family's transformer behind a Wan pipeline).
        """
        check_class_name(config, "WanTransformer3DModel", "transformer")
        kwargs = config_values(cls, config, "transformer config")
        if "patch_size" in kwargs:
            kwargs["patch_size"] = tuple(kwargs["patch_size"])
        cfg = cls(**kwargs)
        cfg.check_image_conditioning()
        if cfg.qk_norm not in ("rms_norm_across_heads",):
            raise ValueError(f"transformer config qk_norm={cfg.qk_norm!r} is not supported; expected 'rms_norm_across_heads'")
        if cfg.out_channels is None:
            cfg = dataclasses.replace(cfg, out_channels=cfg.in_channels)
        return cfg

    @classmethod
    def from_original_dict(cls, config: dict[str, Any], *, image_embedder: bool | None = None,
                           image_dim: int = 1280) -> WanTransformerConfig:
        """Build from the ``config.json`` of an original Wan2.1 release (``WanModel``, ``Wan-AI/Wan2.1-T2V-*``).

        Key mapping (``wan/modules/model.py``, ``WanModel.__init__``): ``dim`` ->
        ``num_attention_heads * attention_head_dim`` (with ``num_heads``), ``ffn_dim``,
        ``freq_dim``, ``in_dim`` -> ``in_channels``, ``out_dim`` -> ``out_channels``,
        ``num_layers``, ``eps``. ``WanModel`` lists ``patch_size``, ``cross_attn_norm``,
        ``qk_norm``, ``text_dim`` and ``window_size`` in ``ignore_for_config``, so the released
        files do not store them: when absent they take the values every Wan2.1 config uses
        (``(1, 2, 2)``, ``True``, ``True``, ``4096``, ``(-1, -1)``); when present they are honoured
        (tiny test checkpoints set ``text_dim``). RoPE tables cover 1024 positions per axis
        (``rope_params(1024, ...)`` in the reference), as diffusers' ``rope_max_seq_len``.

        Image models: ``model_type`` ``"i2v"`` / ``"flf2v"`` with an ``img_emb`` (``MLPProj(1280, dim)``,
        Wan2.1) get ``image_dim=1280``, ``added_kv_proj_dim=dim`` and, FLF2V, ``pos_embed_seq_len=514``
        (2 x 257 CLIP tokens); Wan2.2 I2V A14B has the same config keys but no ``img_emb``:
        ``image_embedder`` (whether the checkpoint holds ``img_emb.*`` tensors) tells them apart
        (None: assume Wan2.1's). ``"ti2v"`` (Wan2.2 TI2V-5B) has neither. ``image_dim`` is the CLIP width
        the embedder takes (1280 in every release; the loader reads it from ``img_emb.proj.0.weight``).

        Raises:
          ValueError: ``_class_name`` other than ``WanModel``; ``model_type`` other than
            ``"t2v"``, ``"i2v"``, ``"flf2v"``, ``"ti2v"`` (``vace``, ``s2v`` need control inputs vidax does not run);
            ``dim`` not divisible by ``num_heads`` or an odd head size; ``qk_norm`` false; a
            windowed attention (``window_size`` other than ``(-1, -1)``); ``text_len`` other than 512;
            no ``model_type`` but ``in_dim != out_dim`` (an image-to-video model's input channels);
            a missing required key. Each message names the key.
        """
        class_name = config.get("_class_name")
        if class_name not in (None, "WanModel"):
            raise ValueError(f"original Wan config.json: _class_name is {class_name!r}, expected 'WanModel'")
        model_type = config.get("model_type", "t2v")
        if model_type not in ("t2v", "i2v", "flf2v", "ti2v"):
            raise ValueError(
                f"original Wan config.json: model_type={model_type!r} is not supported; vidax runs the model types "
                "'t2v', 'i2v', 'flf2v' and 'ti2v'"
            )
        missing = [k for k in ("dim", "num_heads", "ffn_dim", "num_layers") if k not in config]
        if missing:
            raise ValueError(f"original Wan config.json: missing key(s) {missing}")
        dim, heads = int(config["dim"]), int(config["num_heads"])
        if heads <= 0 or dim % heads or (dim // heads) % 2:
            raise ValueError(
                f"original Wan config.json: dim={dim} must be divisible by num_heads={heads} into an even head size"
            )
        if not config.get("qk_norm", True):
            raise ValueError("original Wan config.json: qk_norm=false is not supported (every Wan2.1 model normalises q/k)")
        window = tuple(config.get("window_size", (-1, -1)))
        if window != (-1, -1):
            raise ValueError(f"original Wan config.json: window_size={list(window)} (local attention) is not supported")
        text_len = int(config.get("text_len", 512))
        if text_len != 512:
            raise ValueError(f"original Wan config.json: text_len={text_len} is not supported; Wan2.1 uses 512")
        in_dim = int(config.get("in_dim", 16))
        if "model_type" not in config and in_dim != int(config.get("out_dim", in_dim)):
            raise ValueError(
                f"original Wan config.json: no model_type, and in_dim={in_dim} differs from out_dim="
                f"{config.get('out_dim')}: this looks like an image-to-video model; vidax runs text-to-video (t2v)"
            )
        image = {}
        if model_type in ("i2v", "flf2v") and (image_embedder is None or image_embedder):
            tokens = 2 * ((224 // 14) ** 2 + 1)  # FLF2V: first and last frame's 257 CLIP tokens
            image = dict(image_dim=int(image_dim), added_kv_proj_dim=dim,
                         pos_embed_seq_len=tokens if model_type == "flf2v" else None)
        return cls(
            **image,
            patch_size=tuple(int(p) for p in config.get("patch_size", (1, 2, 2))),
            num_attention_heads=heads,
            attention_head_dim=dim // heads,
            in_channels=in_dim,
            out_channels=int(config.get("out_dim", in_dim)),
            text_dim=int(config.get("text_dim", 4096)),
            freq_dim=int(config.get("freq_dim", 256)),
            ffn_dim=int(config["ffn_dim"]),
            num_layers=int(config["num_layers"]),
            cross_attn_norm=bool(config.get("cross_attn_norm", True)),
            qk_norm="rms_norm_across_heads",
            eps=float(config.get("eps", 1e-6)),
            rope_max_seq_len=1024,
        )


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
      task: ``"t2v"``, ``"i2v"`` or ``"flf2v"``.
      max_area: image-conditioned rows: the output takes the input image's aspect ratio at about
        this many pixels (:func:`vidax.models.wan.pipeline_i2v.size_for_image`); ``width`` x ``height``
        is then the size of the table row's example image (a portrait image, marked ``*`` in the table).
      guidance_scale_2: the low-noise expert's guidance scale (Wan2.2 A14B); ``guidance_scale`` is
        the high-noise expert's.
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
    task: str = "t2v"
    max_area: int | None = None
    guidance_scale_2: float | None = None

    def settings(self) -> dict:
        """The pipeline call's settings of this row (``height``, ``width``, ..., ``flow_shift``; ``max_area`` and
        ``guidance_scale_2`` where the row has them)."""
        out = dict(height=self.height, width=self.width, num_frames=self.num_frames,
                   num_inference_steps=self.num_inference_steps, guidance_scale=self.guidance_scale,
                   flow_shift=self.flow_shift, negative_prompt=self.negative_prompt)
        if self.max_area is not None:
            out["max_area"] = self.max_area
        if self.guidance_scale_2 is not None:
            out["guidance_scale_2"] = self.guidance_scale_2
        return out


PRESETS: dict[str, WanPreset] = {
    p.name: p
    for p in [
        # paper-table5.tsv rows "Wan2.1 1.3B T2V" and "Wan2.1 14B T2V"; shift 3.0 at 480p, 5.0 at 720p.
        WanPreset("wan2.1-t2v-1.3b-480p", "Wan2.1-T2V-1.3B", 832, 480, dtype="bfloat16", tp=4),
        WanPreset("wan2.1-t2v-14b-480p", "Wan2.1-T2V-14B", 832, 480, dtype="bfloat16", tp=4),
        WanPreset("wan2.1-t2v-14b-720p", "Wan2.1-T2V-14B", 1280, 720, flow_shift=5.0, dtype="float32", tp=4, offload_chunk=20),
        # "Wan2.1 14B (480P) I2V" / "(720P) I2V": 40 steps, the size from the image at 480x832 / 720x1280 pixels
        # (Wan2.1 generate.py: shift 3.0 for 480p i2v, else 5.0; guide scale 5.0).
        WanPreset("wan2.1-i2v-14b-480p", "Wan2.1-I2V-14B-480P", 544, 720, num_inference_steps=40, flow_shift=3.0,
                  dtype="bfloat16", tp=4, task="i2v", max_area=480 * 832),
        WanPreset("wan2.1-i2v-14b-720p", "Wan2.1-I2V-14B-720P", 832, 1104, num_inference_steps=40, flow_shift=5.0,
                  dtype="float32", tp=4, offload_chunk=20, task="i2v", max_area=720 * 1280),
        # Not a table row: Wan2.1 FLF2V 14B at 720p with generate.py's defaults (50 steps, shift 5.0, guide 5.0).
        WanPreset("wan2.1-flf2v-14b-720p", "Wan2.1-FLF2V-14B-720P", 1280, 720, flow_shift=5.0, dtype="float32", tp=4,
                  offload_chunk=20, task="flf2v", max_area=720 * 1280),
        # "Wan2.2 5B T2V" / "I2V" (TI2V-5B; Wan2.2 wan/configs/wan_ti2v_5B.py: shift 5.0, guide 5.0, 121 frames,
        # 24 fps, 1280*704; the I2V row runs 40 steps).
        WanPreset("wan2.2-ti2v-5b-t2v-720p", "Wan2.2-TI2V-5B", 1280, 704, num_frames=121, flow_shift=5.0,
                  dtype="float32", fps=24, tp=4),
        WanPreset("wan2.2-ti2v-5b-i2v-720p", "Wan2.2-TI2V-5B", 704, 1280, num_frames=121, num_inference_steps=40,
                  flow_shift=5.0, dtype="float32", fps=24, tp=4, task="i2v", max_area=704 * 1280),
        # "Wan2.2 A14B T2V" / "I2V" (tp 2 x sp 2; Wan2.2 wan/configs/wan_t2v_A14B.py: shift 12.0, guide
        # (low 3.0, high 4.0), boundary 0.875; wan_i2v_A14B.py: shift 5.0, guide 3.5 / 3.5, boundary 0.9).
        WanPreset("wan2.2-t2v-a14b-480p", "Wan2.2-T2V-A14B", 832, 480, guidance_scale=4.0, guidance_scale_2=3.0,
                  flow_shift=12.0, dtype="float32", tp=2, sp=2, offload_chunk=10),
        WanPreset("wan2.2-t2v-a14b-720p", "Wan2.2-T2V-A14B", 1280, 720, num_frames=33, guidance_scale=4.0,
                  guidance_scale_2=3.0, flow_shift=12.0, dtype="float32", tp=2, sp=2, offload_chunk=1),
        WanPreset("wan2.2-i2v-a14b-480p", "Wan2.2-I2V-A14B", 544, 720, num_inference_steps=40, guidance_scale=3.5,
                  guidance_scale_2=3.5, flow_shift=5.0, dtype="float32", tp=2, sp=2, offload_chunk=10, task="i2v",
                  max_area=480 * 832),
        WanPreset("wan2.2-i2v-a14b-720p", "Wan2.2-I2V-A14B", 832, 1104, num_frames=33, num_inference_steps=40,
                  guidance_scale=3.5, guidance_scale_2=3.5, flow_shift=5.0, dtype="float32", tp=2, sp=2,
                  offload_chunk=1, task="i2v", max_area=720 * 1280),
    ]
}
