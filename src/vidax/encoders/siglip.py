"""The SigLIP vision encoder (ViT) of HunyuanVideo-1.5's image-to-video, and its image preprocessing, as pure functions.

Follows transformers ``models/siglip/modeling_siglip.py`` (``SiglipVisionModel``: ``SiglipVisionEmbeddings``,
``SiglipEncoderLayer``, ``SiglipAttention``, ``SiglipMLP``, ``post_layernorm``) in the configuration of
google/siglip-so400m-patch14-384, the ``image_encoder`` of black-forest-labs/FLUX.1-Redux-dev that HunyuanVideo-1.5
uses (27 layers of width 1152, 16 heads, MLP 4304, tanh GELU, 384x384 input, 729 tokens). Both references take the
``last_hidden_state`` (after ``post_layernorm``): diffusers 0.42.1
``HunyuanVideo15ImageToVideoPipeline._get_image_embeds`` and the original repository's
``VisionEncoder.encode_images`` (``hyvideo/models/vision_encoder``); the attention pooling head (``vision_use_head``)
feeds neither, so its weights are not loaded.

Layer (pre-norm)::

    x = x + out_proj(attn(q_proj(ln1(x)), k_proj(ln1(x)), v_proj(ln1(x))))   # scale 1/sqrt(head_dim)
    x = x + fc2(gelu_tanh(fc1(ln2(x))))

Embeddings: ``patch_embedding(pixels)`` (a stride-``patch_size`` convolution with a bias) ``+ position_embedding``;
no class token, no pre-norm. Layers are stacked (leading ``layers`` axis) and run under ``jax.lax.scan``.

Layouts: the diffusers HunyuanVideo-1.5 image-to-video folder and the original release's
``ckpts/vision_encoder/siglip`` (a download of FLUX.1-Redux-dev) both hold ``image_encoder/`` (a transformers
``SiglipVisionModel`` folder) and ``feature_extractor/`` (a ``SiglipImageProcessor`` ``preprocessor_config.json``):
:func:`load_vision_encoder` takes either. Tensor names carry ``vision_model.`` (transformers 4 ``SiglipVisionModel``,
and a whole ``SiglipModel``, whose text tower is ignored) or not (transformers 5 ``SiglipVisionModel``).

Preprocessing (:func:`siglip_processor_config`, then :func:`vidax.encoders.clip.preprocess_images`) is
``SiglipImageProcessor`` as both references call it (``do_resize=True``, ``do_convert_rgb=True``): convert to RGB,
resize to ``size`` (384x384) with PIL ``resample`` (bicubic), no crop, rescale by 1/255, normalise with mean and std
0.5; the PIL backend's arithmetic (transformers 4's ``SiglipImageProcessor``, transformers 5's
``SiglipImageProcessorPil``).

Precision: matmuls take inputs in the weight dtype and accumulate in float32; layer norms and the residual stream are
float32. The references run this encoder in half precision (the original: float16; diffusers' converter saves
bfloat16); float32 weights are the default here.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.keymap import KeyMap, Rule, conv, linear as linear_rules, norm as norm_rules, rules
from vidax.core.attention import AttentionImpl, attention
from vidax.core.config_values import config_values, read_json
from vidax.core.layers import layer_norm, linear
from vidax.core.params import ParamSpec, SpecTree
from vidax.encoders.clip import CLIPImageProcessorConfig, preprocess_images as _preprocess_images

_ACTIVATIONS = {
    "gelu_pytorch_tanh": partial(jax.nn.gelu, approximate=True),
    "gelu_new": partial(jax.nn.gelu, approximate=True),
    "gelu": partial(jax.nn.gelu, approximate=False),
    "quick_gelu": lambda x: x * jax.nn.sigmoid(1.702 * x),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
}


@dataclass(frozen=True)
class SiglipVisionConfig:
    """Architecture of a SigLIP vision tower (transformers ``SiglipVisionConfig`` keys).

    Defaults are google/siglip-so400m-patch14-384 (FLUX.1-Redux-dev's ``image_encoder``, HunyuanVideo-1.5's).

    Attributes:
      hidden_size, intermediate_size, num_hidden_layers, num_attention_heads: the ViT sizes.
      image_size, patch_size, num_channels: input geometry; ``(image_size // patch_size)^2`` tokens (a
        "valid" convolution: 384 at patch 14 gives 27 x 27, the last 6 pixels unused).
      layer_norm_eps: of every LayerNorm.
      hidden_act: MLP activation (``"gelu_pytorch_tanh"``).
      vision_use_head: the checkpoint holds the attention pooling head (``head.*``; not loaded).
    """

    hidden_size: int = 1152
    intermediate_size: int = 4304
    num_hidden_layers: int = 27
    num_attention_heads: int = 16
    image_size: int = 384
    patch_size: int = 14
    num_channels: int = 3
    layer_norm_eps: float = 1e-6
    hidden_act: str = "gelu_pytorch_tanh"
    vision_use_head: bool = True

    def __post_init__(self):
        if self.hidden_act not in _ACTIVATIONS:
            raise ValueError(f"SiglipVisionConfig: hidden_act {self.hidden_act!r} is not supported; "
                             f"known: {sorted(_ACTIVATIONS)}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"SiglipVisionConfig: hidden_size {self.hidden_size} is not divisible by "
                             f"{self.num_attention_heads} heads")
        if self.patch_size > self.image_size:
            raise ValueError(f"SiglipVisionConfig: patch_size {self.patch_size} is larger than image_size "
                             f"{self.image_size}")

    @property
    def num_positions(self) -> int:
        """Tokens per image (729 at 384 px with patch 14)."""
        return (self.image_size // self.patch_size) ** 2

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, config: dict[str, Any], source: str = "image encoder config") -> SiglipVisionConfig:
        """Build from a transformers ``config.json``: a ``siglip_vision_model`` config, or a whole ``siglip`` config
        (its ``vision_config``). Unknown keys are ignored.

        Raises:
          ValueError: another model type, a ``siglip`` config without ``vision_config``, unsupported values.
        """
        if config.get("model_type") == "siglip" or "vision_config" in config:
            vision = config.get("vision_config")
            if not isinstance(vision, dict):
                raise ValueError(f"{source}: a SigLIP config without a vision_config object")
            config = vision
        if config.get("model_type") not in (None, "siglip_vision_model"):
            raise ValueError(f"{source}: model_type {config.get('model_type')!r} is not a SigLIP vision model")
        return cls(**config_values(cls, config, source))


# --------------------------------------------------------------------------- parameters


def siglip_specs(cfg: SiglipVisionConfig) -> SpecTree:
    """The spec tree of a SigLIP vision tower (without the pooling head). Layer parameters lead with ``layers``.

    Float32 pins: every LayerNorm and the position embedding.
    """
    d, n, f, p = cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size, cfg.patch_size

    def lin(n_in, n_out, axes):
        return {"kernel": ParamSpec((n, n_in, n_out), axes=("layers", *axes)),
                "bias": ParamSpec((n, n_out), axes=("layers", axes[1]))}

    def ln(width, stacked=True):
        lead, lead_axes = ((n,), ("layers",)) if stacked else ((), ())
        return {"scale": ParamSpec((*lead, width), fp32=True, axes=(*lead_axes, "embed")),
                "bias": ParamSpec((*lead, width), fp32=True, axes=(*lead_axes, "embed"))}

    return {
        "embeddings": {
            "patch_embedding": {"kernel": ParamSpec((p, p, cfg.num_channels, d), axes=(None, None, None, "embed")),
                                "bias": ParamSpec((d,), fp32=True, axes=("embed",))},
            "position_embedding": ParamSpec((cfg.num_positions, d), fp32=True, axes=(None, "embed")),
        },
        "layers": {
            "layer_norm1": ln(d),
            "q_proj": lin(d, d, ("embed", "heads")),
            "k_proj": lin(d, d, ("embed", "heads")),
            "v_proj": lin(d, d, ("embed", "heads")),
            "out_proj": lin(d, d, ("heads", "embed")),
            "layer_norm2": ln(d),
            "fc1": lin(d, f, ("embed", "mlp")),
            "fc2": lin(f, d, ("mlp", "embed")),
        },
        "post_layernorm": ln(d, stacked=False),
    }


def siglip_keymap(cfg: SiglipVisionConfig, keys: Any = None) -> KeyMap:
    """Key map of a transformers ``SiglipVisionModel`` (or ``SiglipModel``) checkpoint.

    Names carry the ``vision_model.`` prefix (transformers 4 ``SiglipVisionModel``, as in FLUX.1-Redux-dev and the
    diffusers HunyuanVideo-1.5 folders; any ``SiglipModel``) or not (transformers 5 ``SiglipVisionModel``): if
    ``keys`` is given and none has it, the map is built without. Ignored, deliberately: the pooling head
    (``head.*``, unused by HunyuanVideo-1.5), a ``SiglipModel``'s text tower and ``logit_scale`` / ``logit_bias``,
    and ``position_ids`` buffers older writers saved.

    Args:
      cfg: the architecture.
      keys: optional iterable of the checkpoint's keys (e.g. a ``CheckpointReader``).
    """
    keys = list(keys) if keys is not None else None
    prefixed = keys is None or any(k.startswith("vision_model.") for k in keys)
    v = "vision_model." if prefixed else ""
    layer = f"{v}encoder.layers.{{i}}"
    return KeyMap(
        rules(
            conv(f"{v}embeddings.patch_embedding", "embeddings/patch_embedding", dims=2),
            Rule(f"{v}embeddings.position_embedding.weight", "embeddings/position_embedding"),
            norm_rules(f"{layer}.layer_norm1", "layers/layer_norm1"),
            linear_rules(f"{layer}.self_attn.q_proj", "layers/q_proj"),
            linear_rules(f"{layer}.self_attn.k_proj", "layers/k_proj"),
            linear_rules(f"{layer}.self_attn.v_proj", "layers/v_proj"),
            linear_rules(f"{layer}.self_attn.out_proj", "layers/out_proj"),
            norm_rules(f"{layer}.layer_norm2", "layers/layer_norm2"),
            linear_rules(f"{layer}.mlp.fc1", "layers/fc1"),
            linear_rules(f"{layer}.mlp.fc2", "layers/fc2"),
            norm_rules(f"{v}post_layernorm", "post_layernorm"),
        ),
        ignore=[r"(vision_model\.)?head\.", r"text_model\.", r"logit_(scale|bias)\Z",
                r"(vision_model\.)?embeddings\.position_ids\Z"],
    )


def _encoder_folder(path: Path) -> Path:
    if (path / "config.json").is_file():
        return path
    if (path / "image_encoder" / "config.json").is_file():
        return path / "image_encoder"
    raise CheckpointError(f"{path}: no SigLIP image encoder here; expected config.json and weights, or an "
                          "image_encoder/ folder (diffusers HunyuanVideo-1.5 image-to-video, or the original release's "
                          "ckpts/vision_encoder/siglip: FLUX.1-Redux-dev)")


def load_siglip_vision(path: str | os.PathLike, dtype: Any = np.float32,
                       **load_kwargs) -> tuple[dict, SiglipVisionConfig]:
    """Load a SigLIP vision tower, strictly: ``path`` is a transformers folder (``config.json`` + safetensors or
    ``.bin``) or a folder holding one as ``image_encoder/`` (both published layouts).

    Args:
      dtype: ``float32`` (default) or ``bfloat16`` weights (norms and embeddings stay float32).
      load_kwargs: passed to :func:`vidax.checkpoint.loader.load_params` (``shardings``, ``place``).

    Returns:
      ``(params, cfg)``.

    Raises:
      CheckpointError: no such folder or config.json; missing / unexpected / mismatched tensors (all listed).
      ValueError: an unsupported configuration.
    """
    from vidax.checkpoint.loader import load_params
    from vidax.checkpoint.reader import CheckpointReader

    folder = _encoder_folder(Path(path))
    cfg = SiglipVisionConfig.from_dict(read_json(folder / "config.json"), str(folder / "config.json"))
    reader = CheckpointReader(folder)
    params = load_params(reader, siglip_keymap(cfg, reader.keys()), siglip_specs(cfg), dtype, source=str(folder),
                         **load_kwargs)
    return params, cfg


def siglip_config_dict(cfg: SiglipVisionConfig) -> dict:
    """``cfg`` as a transformers ``config.json`` dict (:meth:`SiglipVisionConfig.from_dict` reads it back)."""
    return {**dataclasses.asdict(cfg), "model_type": "siglip_vision_model", "architectures": ["SiglipVisionModel"]}


# --------------------------------------------------------------------------- forward


def _layer(p: dict, x: jax.Array, cfg: SiglipVisionConfig, impl) -> jax.Array:
    b, s, d = x.shape
    dtype = p["q_proj"]["kernel"].dtype
    h = layer_norm(x, p["layer_norm1"], cfg.layer_norm_eps).astype(dtype)
    q = linear(p["q_proj"], h).reshape(b, s, -1, cfg.head_dim)
    k = linear(p["k_proj"], h).reshape(b, s, -1, cfg.head_dim)
    v = linear(p["v_proj"], h).reshape(b, s, -1, cfg.head_dim)
    o = attention(q, k, v, implementation=impl).reshape(b, s, d)
    x = x + linear(p["out_proj"], o, jnp.float32)
    h = layer_norm(x, p["layer_norm2"], cfg.layer_norm_eps).astype(dtype)
    h = _ACTIVATIONS[cfg.hidden_act](linear(p["fc1"], h, jnp.float32)).astype(dtype)
    return x + linear(p["fc2"], h, jnp.float32)


def embed_pixels(params: dict, pixel_values: jax.Array, cfg: SiglipVisionConfig) -> jax.Array:
    """``SiglipVisionEmbeddings``: float32 ``(B, num_positions, hidden_size)``.

    Args:
      pixel_values: ``(B, num_channels, image_size, image_size)`` preprocessed pixels.
    """
    e = params["embeddings"]
    kernel = e["patch_embedding"]["kernel"]  # (p, p, C, D)
    b, c, hgt, wid = pixel_values.shape
    p = cfg.patch_size
    hp, wp = hgt // p, wid // p
    # A stride-p "valid" convolution with a p x p kernel is a matmul over non-overlapping patches (row-major, as
    # flatten(2)); it drops the pixels past the last whole patch (384 px at patch 14: 27 patches, 6 pixels unused).
    x = pixel_values[:, :, : hp * p, : wp * p].reshape(b, c, hp, p, wp, p).transpose(0, 2, 4, 3, 5, 1)
    x = x.reshape(b, hp * wp, p * p * c)
    patches = jnp.matmul(x.astype(kernel.dtype), kernel.reshape(-1, kernel.shape[-1]),
                         preferred_element_type=jnp.float32)
    patches = patches + e["patch_embedding"]["bias"].astype(jnp.float32)
    return patches + e["position_embedding"].astype(jnp.float32)[None]


@partial(jax.jit, static_argnames=("cfg", "attention_impl"))
def _encode(params, pixel_values, *, cfg: SiglipVisionConfig, attention_impl):
    x = embed_pixels(params, pixel_values, cfg)

    def body(x, p):
        return _layer(p, x, cfg, attention_impl), None

    x = jax.lax.scan(body, x, params["layers"])[0]
    return layer_norm(x, params["post_layernorm"], cfg.layer_norm_eps)


def encode_images(
    params: dict,
    cfg: SiglipVisionConfig,
    pixel_values: jax.Array | np.ndarray,
    *,
    attention_impl: AttentionImpl | str = AttentionImpl.XLA,
) -> jax.Array:
    """``SiglipVisionModel(pixel_values).last_hidden_state``: every layer, then ``post_layernorm``.

    Args:
      params: parameters of :func:`siglip_specs`.
      cfg: the architecture.
      pixel_values: ``(B, 3, image_size, image_size)`` float, from :func:`preprocess_images`.
      attention_impl: see :mod:`vidax.core.attention`.

    Returns:
      float32 ``(B, num_positions, hidden_size)`` (``(B, 729, 1152)`` for HunyuanVideo-1.5's encoder).

    Raises:
      ValueError: a wrong input shape (the position table is fixed: no interpolation).
    """
    shape = (cfg.num_channels, cfg.image_size, cfg.image_size)
    if pixel_values.ndim != 4 or tuple(pixel_values.shape[1:]) != shape:
        raise ValueError(f"pixel_values must be (B, {', '.join(map(str, shape))}), got {tuple(pixel_values.shape)}")
    with jax.default_matmul_precision("highest"):
        return _encode(params, jnp.asarray(pixel_values, jnp.float32), cfg=cfg,
                       attention_impl=AttentionImpl(attention_impl))


# --------------------------------------------------------------------------- preprocessing

#: ``SiglipImageProcessor``'s class defaults (transformers ``image_processing_siglip.py``): 224x224 bicubic,
#: rescale 1/255, mean and std 0.5 (``IMAGENET_STANDARD_*``), RGB, no crop. FLUX.1-Redux-dev's
#: ``feature_extractor/preprocessor_config.json`` sets ``size`` 384x384.
SIGLIP_PROCESSOR_DEFAULTS: dict[str, Any] = {
    "size": {"height": 224, "width": 224}, "resample": 3, "do_resize": True, "do_rescale": True,
    "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
    "do_convert_rgb": True,
}

#: HunyuanVideo-1.5's processor (FLUX.1-Redux-dev's ``feature_extractor``): 384x384.
HUNYUANVIDEO15_PROCESSOR: dict[str, Any] = {**SIGLIP_PROCESSOR_DEFAULTS, "size": {"height": 384, "width": 384}}


def siglip_processor_config(config: dict[str, Any] | None = None) -> CLIPImageProcessorConfig:
    """The preprocessing of a ``SiglipImageProcessor`` ``preprocessor_config.json`` dict (None: HunyuanVideo-1.5's,
    :data:`HUNYUANVIDEO15_PROCESSOR`), as both references call it (``do_resize=True``, ``do_convert_rgb=True``).

    Missing keys take ``SiglipImageProcessor``'s class defaults (:data:`SIGLIP_PROCESSOR_DEFAULTS`); a ``null``
    value too (transformers 4 writes ``"do_convert_rgb": null``). SigLIP never center-crops.

    Raises:
      ValueError: a ``size`` that is not ``{"height", "width"}`` or ``{"shortest_edge"}``; badly typed values.
    """
    if config is None:
        config = HUNYUANVIDEO15_PROCESSOR
    merged = {**SIGLIP_PROCESSOR_DEFAULTS, **{k: v for k, v in config.items() if v is not None}}
    merged.update(do_resize=True, do_convert_rgb=True, do_center_crop=False)
    try:
        cfg = CLIPImageProcessorConfig.from_dict(merged)
    except (TypeError, KeyError) as e:
        raise ValueError(f"SigLIP image processor config: unreadable values ({e})") from None
    if cfg.shortest_edge is None and (cfg.size is None or min(cfg.size) < 1):
        raise ValueError(f"SigLIP image processor config: size {config.get('size')!r} must be positive")
    if len(cfg.image_mean) != 3 or len(cfg.image_std) != 3 or 0.0 in cfg.image_std:
        raise ValueError("SigLIP image processor config: image_mean and image_std must be 3 numbers, std non-zero")
    return cfg


def load_siglip_processor(path: str | os.PathLike) -> CLIPImageProcessorConfig:
    """The preprocessing of a folder: ``preprocessor_config.json`` in ``path``, in ``path/feature_extractor`` (both
    published layouts), or beside an ``image_encoder`` folder; HunyuanVideo-1.5's (:data:`HUNYUANVIDEO15_PROCESSOR`)
    when none is there.

    Raises:
      CheckpointError: a file that is not a JSON object. ValueError: see :func:`siglip_processor_config`.
    """
    path = Path(path)
    for candidate in (path, path / "feature_extractor", path.parent / "feature_extractor"):
        file = candidate / "preprocessor_config.json"
        if file.is_file():
            return siglip_processor_config(read_json(file))
    return siglip_processor_config()


def load_vision_encoder(path: str | os.PathLike, dtype: Any = np.float32,
                        **load_kwargs) -> tuple[dict, SiglipVisionConfig, CLIPImageProcessorConfig]:
    """The image encoder and its preprocessing from either published layout: a diffusers HunyuanVideo-1.5
    image-to-video folder, or the original release's ``ckpts/vision_encoder/siglip`` (both hold ``image_encoder/``
    and ``feature_extractor/``), or an ``image_encoder`` folder itself.

    Returns:
      ``(params, cfg, processor)``.

    Raises:
      CheckpointError, ValueError: see :func:`load_siglip_vision` and :func:`load_siglip_processor`.
    """
    params, cfg = load_siglip_vision(path, dtype, **load_kwargs)
    return params, cfg, load_siglip_processor(path)


def preprocess_images(images: Sequence[Any], cfg: CLIPImageProcessorConfig | None = None) -> np.ndarray:
    """PIL images or uint8 ``(H, W, 3)`` arrays -> float32 ``(B, 3, height, width)`` (``SiglipImageProcessor``;
    ``cfg`` from :func:`siglip_processor_config`, default HunyuanVideo-1.5's 384x384).

    Raises:
      TypeError, ValueError: see :func:`vidax.encoders.clip.to_rgb`.
    """
    return _preprocess_images(images, siglip_processor_config() if cfg is None else cfg)
