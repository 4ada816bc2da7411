"""The CLIP vision encoder (ViT) and its image preprocessing, as pure functions.

Follows transformers ``models/clip/modeling_clip.py`` (``CLIPVisionModel``,
``CLIPVisionModelWithProjection``: ``CLIPVisionEmbeddings``, ``CLIPEncoderLayer``,
``CLIPAttention``, ``CLIPMLP``) in the configuration of the Wan2.1 image-to-video
checkpoints (``image_encoder/``: OpenCLIP ViT-H/14 converted to transformers, 32 layers of
width 1280, 16 heads, MLP 5120, exact-erf GELU, 224x224 input, 257 tokens). diffusers'
``WanImageToVideoPipeline.encode_image`` uses the *penultimate* layer's hidden states,
``hidden_states[-2]`` (the output of layer ``num_hidden_layers - 2``, before
``post_layernorm``); :func:`encode_images` returns exactly that by default.

Layer (pre-norm)::

    x = x + out_proj(attn(q_proj(ln1(x)), k_proj(ln1(x)), v_proj(ln1(x))))   # scale 1/sqrt(head_dim)
    x = x + fc2(act(fc1(ln2(x))))

Embeddings: ``[class_embedding; patch_embedding(pixels)] + position_embedding``, then
``pre_layrnorm`` (transformers' spelling). Layers are stacked (leading ``layers`` axis) and run
under ``jax.lax.scan``; only the layers up to the requested output are run.

Preprocessing (:func:`preprocess_images`) is transformers' ``CLIPImageProcessor`` with the
Wan I2V ``image_processor/preprocessor_config.json`` (resize the shortest edge to 224 with PIL
bicubic, center-crop 224x224, rescale by 1/255, normalise with the OpenAI CLIP mean/std),
implemented with Pillow and NumPy as transformers' PIL backend (``CLIPImageProcessorPil``)
does it; transformers is not needed at run time.

Precision: matmuls take inputs in the weight dtype and accumulate in float32; layer norms and
the residual stream are float32 (the reference runs this encoder in float32 in the Wan examples).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint.keymap import KeyMap, Rule, conv, linear as linear_rules, norm as norm_rules, rules
from vidax.checkpoint.reader import CheckpointReader, TensorViews
from vidax.core.attention import AttentionImpl, attention
from vidax.core.config_values import config_values
from vidax.core.layers import layer_norm, linear
from vidax.core.params import ParamSpec, SpecTree

_ACTIVATIONS = {
    "gelu": partial(jax.nn.gelu, approximate=False),
    "quick_gelu": lambda x: x * jax.nn.sigmoid(1.702 * x),
    "gelu_new": partial(jax.nn.gelu, approximate=True),
    "gelu_pytorch_tanh": partial(jax.nn.gelu, approximate=True),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
}


@dataclass(frozen=True)
class CLIPVisionConfig:
    """Architecture of a CLIP vision tower (transformers ``CLIPVisionConfig`` keys).

    Defaults are the Wan2.1 I2V image encoder (OpenCLIP ViT-H/14 at 224 px).

    Attributes:
      hidden_size, intermediate_size, num_hidden_layers, num_attention_heads: the ViT sizes.
      image_size, patch_size, num_channels: input geometry; ``(image_size / patch_size)^2 + 1`` tokens.
      layer_norm_eps: of every LayerNorm.
      hidden_act: MLP activation (``"gelu"`` exact, ``"quick_gelu"`` for OpenAI CLIP, ...).
      projection_dim: width of ``visual_projection`` (``CLIPVisionModelWithProjection`` only).
      with_projection: the checkpoint holds ``visual_projection.weight``
        (``architectures`` names ``CLIPVisionModelWithProjection``); it is loaded but not used by
        :func:`encode_images`, which returns hidden states.
    """

    hidden_size: int = 1280
    intermediate_size: int = 5120
    num_hidden_layers: int = 32
    num_attention_heads: int = 16
    image_size: int = 224
    patch_size: int = 14
    num_channels: int = 3
    layer_norm_eps: float = 1e-5
    hidden_act: str = "gelu"
    projection_dim: int = 1024
    with_projection: bool = False

    def __post_init__(self):
        if self.hidden_act not in _ACTIVATIONS:
            raise ValueError(f"CLIPVisionConfig: hidden_act {self.hidden_act!r} is not supported; "
                             f"known: {sorted(_ACTIVATIONS)}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"CLIPVisionConfig: hidden_size {self.hidden_size} is not divisible by "
                             f"{self.num_attention_heads} heads")
        if self.image_size % self.patch_size:
            raise ValueError(f"CLIPVisionConfig: image_size {self.image_size} is not a multiple of patch_size "
                             f"{self.patch_size}")

    @property
    def num_positions(self) -> int:
        """Tokens per image: patches plus the class token (257 for ViT-H/14 at 224)."""
        return (self.image_size // self.patch_size) ** 2 + 1

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> CLIPVisionConfig:
        """Build from a transformers ``config.json``: a ``clip_vision_model`` config, or a full
        ``clip`` config (its ``vision_config`` is used). Unknown keys are ignored.

        Raises:
          ValueError: a text-only config, or unsupported values.
        """
        if config.get("model_type") == "clip" or "vision_config" in config:
            arch = config.get("architectures") or []
            config = dict(config.get("vision_config") or {}, architectures=arch)
        if config.get("model_type") not in (None, "clip_vision_model"):
            raise ValueError(f"CLIPVisionConfig: model_type {config.get('model_type')!r} is not a CLIP vision model")
        kwargs = config_values(cls, {k: v for k, v in config.items() if k != "with_projection"},
                               "image encoder config")
        arch = config.get("architectures") or []
        return cls(**kwargs, with_projection=any("WithProjection" in a for a in arch))


# --------------------------------------------------------------------------- parameters


def clip_specs(cfg: CLIPVisionConfig) -> SpecTree:
    """The spec tree of a CLIP vision tower. Layer parameters lead with a ``layers`` axis.

    Float32 pins: every LayerNorm, the class and position embeddings.
    """
    d, n, f, p = cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size, cfg.patch_size

    def lin(n_in, n_out, axes):
        return {"kernel": ParamSpec((n, n_in, n_out), axes=("layers", *axes)),
                "bias": ParamSpec((n, n_out), axes=("layers", axes[1]))}

    def ln(width, stacked=True):
        lead, lead_axes = ((n,), ("layers",)) if stacked else ((), ())
        return {"scale": ParamSpec((*lead, width), fp32=True, axes=(*lead_axes, "embed")),
                "bias": ParamSpec((*lead, width), fp32=True, axes=(*lead_axes, "embed"))}

    specs: SpecTree = {
        "embeddings": {
            "class_embedding": ParamSpec((d,), fp32=True, axes=("embed",)),
            "patch_embedding": {"kernel": ParamSpec((p, p, cfg.num_channels, d), axes=(None, None, None, "embed"))},
            "position_embedding": ParamSpec((cfg.num_positions, d), fp32=True, axes=(None, "embed")),
        },
        "pre_layrnorm": ln(d, stacked=False),
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
    if cfg.with_projection:
        specs["visual_projection"] = {"kernel": ParamSpec((d, cfg.projection_dim), axes=("embed", None))}
    return specs


def clip_keymap(cfg: CLIPVisionConfig, keys: Any = None) -> KeyMap:
    """Key map for a transformers ``CLIPVisionModel`` / ``CLIPVisionModelWithProjection`` folder
    (the Wan I2V diffusers checkpoints' ``image_encoder/``).

    Tensor names carry the ``vision_model.`` prefix (``CLIPVisionModelWithProjection``, and
    ``CLIPVisionModel`` as transformers 4 saved it); transformers 5 saves ``CLIPVisionModel``
    without it. If ``keys`` (the checkpoint's key list) is given and no key has the prefix, the
    map is built without it. ``*embeddings.position_ids`` (a buffer older writers saved) is ignored.

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
            Rule(f"{v}embeddings.class_embedding", "embeddings/class_embedding"),
            conv(f"{v}embeddings.patch_embedding", "embeddings/patch_embedding", dims=2, bias=False),
            Rule(f"{v}embeddings.position_embedding.weight", "embeddings/position_embedding"),
            norm_rules(f"{v}pre_layrnorm", "pre_layrnorm"),
            norm_rules(f"{layer}.layer_norm1", "layers/layer_norm1"),
            linear_rules(f"{layer}.self_attn.q_proj", "layers/q_proj"),
            linear_rules(f"{layer}.self_attn.k_proj", "layers/k_proj"),
            linear_rules(f"{layer}.self_attn.v_proj", "layers/v_proj"),
            linear_rules(f"{layer}.self_attn.out_proj", "layers/out_proj"),
            norm_rules(f"{layer}.layer_norm2", "layers/layer_norm2"),
            linear_rules(f"{layer}.mlp.fc1", "layers/fc1"),
            linear_rules(f"{layer}.mlp.fc2", "layers/fc2"),
            norm_rules(f"{v}post_layernorm", "post_layernorm"),
            linear_rules("visual_projection", "visual_projection", bias=False) if cfg.with_projection else [],
        ),
        ignore=[r"(vision_model\.)?embeddings\.position_ids\Z"],
    )


def load_clip_vision(folder: str | os.PathLike, dtype: Any = np.float32, **load_kwargs) -> tuple[dict, CLIPVisionConfig]:
    """Load a transformers CLIP vision folder (``config.json`` + safetensors), strictly.

    Returns:
      ``(params, cfg)``.

    Raises:
      CheckpointError: missing / unexpected / mismatched tensors (all listed), a missing folder or config.json.
      ValueError: an unsupported configuration.
    """
    from vidax.checkpoint.errors import CheckpointError

    if not Path(folder).is_dir():
        raise CheckpointError(f"{folder}: CLIP image encoder folder not found")
    return load_image_encoder(folder, dtype, **load_kwargs)


# --------------------------------------------------------------------------- the original Wan CLIP file

#: Head width of the ViT-H/14 image tower in the Wan2.1 I2V / FLF2V releases: ``wan/modules/clip.py``
#: (``clip_xlm_roberta_vit_h_14``) hard-codes ``vision_dim=1280, vision_heads=16``; the file stores no
#: head count, so it is ``width / 80``.
WAN_CLIP_HEAD_DIM = 80

#: The original file's fused q/k/v (``attn.to_qkv``: ``Linear(d, 3d)``, output features q, k, v, as
#: ``SelfAttention.forward`` unbinds them) and its broadcast-shaped embeddings, read as our parameters.
WAN_CLIP_VIEWS = TensorViews(
    split={r"visual\.transformer\.\d+\.attn\.to_qkv\.(weight|bias)": ("q", "k", "v")},
    squeeze=(r"visual\.cls_embedding", r"visual\.pos_embedding"),
)


def clip_keymap_wan_original(cfg: CLIPVisionConfig) -> KeyMap:
    """Key map of ``models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth`` (read through :data:`WAN_CLIP_VIEWS`).

    The file is the whole ``XLMRobertaCLIP`` state dict of the Wan repository (``wan/modules/clip.py``);
    its ``visual`` ``VisionTransformer`` (pre-norm, class token, exact-erf GELU) is the same network as
    transformers' ``CLIPVisionModelWithProjection``: ``cls_embedding`` -> ``class_embedding``,
    ``pos_embedding`` -> ``position_embedding``, ``pre_norm`` / ``post_norm`` -> ``pre_layrnorm`` /
    ``post_layernorm``, per block ``norm1`` / ``norm2`` -> ``layer_norm1`` / ``layer_norm2``,
    ``attn.to_qkv`` (split) -> ``q_proj`` / ``k_proj`` / ``v_proj``, ``attn.proj`` -> ``out_proj``,
    ``mlp.0`` / ``mlp.2`` -> ``fc1`` / ``fc2``, and ``head`` (a ``(width, 1024)`` matrix applied as
    ``x @ head``) -> ``visual_projection`` (our ``(in, out)`` kernel, as stored). The text tower
    (``textual.*``) and ``log_scale`` are ignored: Wan conditions on the image tower only.
    """
    layer = "visual.transformer.{i}"
    qkv = [Rule(f"{layer}.attn.to_qkv.weight[{n}]", f"layers/{n}_proj/kernel", "linear") for n in "qkv"]
    qkv += [Rule(f"{layer}.attn.to_qkv.bias[{n}]", f"layers/{n}_proj/bias") for n in "qkv"]
    return KeyMap(
        rules(
            Rule("visual.cls_embedding", "embeddings/class_embedding"),
            conv("visual.patch_embedding", "embeddings/patch_embedding", dims=2, bias=False),
            Rule("visual.pos_embedding", "embeddings/position_embedding"),
            norm_rules("visual.pre_norm", "pre_layrnorm"),
            norm_rules(f"{layer}.norm1", "layers/layer_norm1"),
            qkv,
            linear_rules(f"{layer}.attn.proj", "layers/out_proj"),
            norm_rules(f"{layer}.norm2", "layers/layer_norm2"),
            linear_rules(f"{layer}.mlp.0", "layers/fc1"),
            linear_rules(f"{layer}.mlp.2", "layers/fc2"),
            norm_rules("visual.post_norm", "post_layernorm"),
            Rule("visual.head", "visual_projection/kernel") if cfg.with_projection else [],
        ),
        ignore=[r"textual\.", r"log_scale\Z"],
    )


def clip_config_from_wan_original_shapes(shapes: dict[str, tuple[int, ...]]) -> CLIPVisionConfig:
    """The image tower's :class:`CLIPVisionConfig` from the original file's tensor shapes.

    Width and patch from ``visual.patch_embedding.weight`` ``(D, 3, p, p)``, image size from
    ``visual.pos_embedding`` ``(1, (S / p)^2 + 1, D)``, MLP width from ``mlp.0``, depth from the
    block count, projection width from ``visual.head``; heads ``D / 80`` (:data:`WAN_CLIP_HEAD_DIM`);
    LayerNorm eps 1e-5 and exact GELU as ``clip_xlm_roberta_vit_h_14``.

    Raises:
      CheckpointError: a tensor the tower needs is missing (named), or the width is not a multiple of 80.
    """
    from vidax.checkpoint.errors import CheckpointError

    def need(key):
        if key not in shapes:
            raise CheckpointError(f"not a Wan CLIP file (XLMRobertaCLIP state dict): tensor {key!r} is missing")
        return tuple(shapes[key])

    width, channels, patch, _ = need("visual.patch_embedding.weight")
    tokens = need("visual.pos_embedding")[-2]
    layers = 1 + max((int(k.split(".")[2]) for k in shapes if k.startswith("visual.transformer.")), default=-1)
    if width % WAN_CLIP_HEAD_DIM or layers < 1:
        raise CheckpointError(f"Wan CLIP file: image tower of width {width} and {layers} blocks; expected a width that "
                              f"is a multiple of {WAN_CLIP_HEAD_DIM} (ViT-H/14: 1280) and at least one block")
    return CLIPVisionConfig(
        hidden_size=width, intermediate_size=need("visual.transformer.0.mlp.0.weight")[0], num_hidden_layers=layers,
        num_attention_heads=width // WAN_CLIP_HEAD_DIM, image_size=round(math.sqrt(tokens - 1)) * patch,
        patch_size=patch, num_channels=channels, layer_norm_eps=1e-5, hidden_act="gelu",
        projection_dim=need("visual.head")[1], with_projection=True,
    )


def load_clip_vision_wan_original(path: str | os.PathLike, dtype: Any = np.float32,
                                  **load_kwargs) -> tuple[dict, CLIPVisionConfig]:
    """Load the image tower of the original Wan CLIP file (a PyTorch ``.pth``, read without PyTorch), strictly.

    Returns:
      ``(params, cfg)``, the same tree :func:`load_clip_vision` gives for the diffusers ``image_encoder/``.

    Raises:
      CheckpointError: the file is missing or corrupt, or a tensor is missing, unexpected or of the
        wrong shape (all listed).
    """
    from vidax.checkpoint.errors import CheckpointError

    if not Path(path).is_file():
        raise CheckpointError(f"{path}: CLIP file not found")
    return load_image_encoder(path, dtype, **load_kwargs)


def image_encoder_source(path: str | os.PathLike) -> tuple[Any, KeyMap, CLIPVisionConfig]:
    """``(reader, keymap, cfg)`` of a Wan image encoder in either published layout, ready for ``load_params``.

    A folder is a transformers CLIP vision folder (the diffusers ``image_encoder/``: ``config.json`` +
    safetensors); a file is the original release's CLIP ``.pth``, read through :data:`WAN_CLIP_VIEWS`.

    Raises:
      CheckpointError: a missing ``config.json``, or a file that is not a Wan CLIP state dict.
    """
    from vidax.checkpoint.errors import CheckpointError

    path = Path(path)
    if path.is_file():
        raw = CheckpointReader(path)
        cfg = clip_config_from_wan_original_shapes({k: raw.shape(k) for k in raw.keys()})
        return WAN_CLIP_VIEWS.reader(raw), clip_keymap_wan_original(cfg), cfg
    if not (path / "config.json").is_file():
        raise CheckpointError(f"{path}: config.json of the CLIP image encoder is missing")
    cfg = CLIPVisionConfig.from_dict(json.loads((path / "config.json").read_text()))
    reader = CheckpointReader(path)
    return reader, clip_keymap(cfg, reader.keys()), cfg


def load_image_encoder(path: str | os.PathLike, dtype: Any = np.float32, **load_kwargs) -> tuple[dict, CLIPVisionConfig]:
    """A Wan image encoder from either layout (:func:`image_encoder_source`), loaded strictly.

    Returns:
      ``(params, cfg)``.

    Raises:
      CheckpointError: see :func:`image_encoder_source` and :func:`vidax.checkpoint.loader.load_params`.
    """
    from vidax.checkpoint.loader import load_params

    reader, keymap, cfg = image_encoder_source(path)
    return load_params(reader, keymap, clip_specs(cfg), dtype, source=str(path), **load_kwargs), cfg


def clip_config_dict(cfg: CLIPVisionConfig) -> dict:
    """``cfg`` as a transformers-style ``config.json`` dict (:meth:`CLIPVisionConfig.from_dict` reads it back)."""
    d = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name != "with_projection"}
    arch = "CLIPVisionModelWithProjection" if cfg.with_projection else "CLIPVisionModel"
    return {**d, "model_type": "clip_vision_model", "architectures": [arch]}


# --------------------------------------------------------------------------- forward


def _layer(p: dict, x: jax.Array, cfg: CLIPVisionConfig, impl) -> jax.Array:
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


def embed_pixels(params: dict, pixel_values: jax.Array, cfg: CLIPVisionConfig) -> jax.Array:
    """``CLIPVisionEmbeddings`` then ``pre_layrnorm``: float32 ``(B, num_positions, hidden_size)``.

    Args:
      pixel_values: ``(B, num_channels, image_size, image_size)`` preprocessed pixels.
    """
    e = params["embeddings"]
    kernel = e["patch_embedding"]["kernel"]  # (p, p, C, D)
    b, c, hgt, wid = pixel_values.shape
    p = cfg.patch_size
    # A stride-p convolution with a p x p kernel is a matmul over non-overlapping patches.
    x = pixel_values.reshape(b, c, hgt // p, p, wid // p, p).transpose(0, 2, 4, 3, 5, 1)
    x = x.reshape(b, (hgt // p) * (wid // p), p * p * c)
    patches = jnp.matmul(x.astype(kernel.dtype), kernel.reshape(-1, kernel.shape[-1]), preferred_element_type=jnp.float32)
    cls = jnp.broadcast_to(e["class_embedding"].astype(jnp.float32), (b, 1, cfg.hidden_size))
    x = jnp.concatenate([cls, patches], axis=1) + e["position_embedding"].astype(jnp.float32)[None]
    return layer_norm(x, params["pre_layrnorm"], cfg.layer_norm_eps)


@partial(jax.jit, static_argnames=("cfg", "num_layers", "attention_impl"))
def _encode(params, pixel_values, *, cfg: CLIPVisionConfig, num_layers: int, attention_impl):
    x = embed_pixels(params, pixel_values, cfg)
    layers = jax.tree.map(lambda a: a[:num_layers], params["layers"])

    def body(x, p):
        return _layer(p, x, cfg, attention_impl), None

    return jax.lax.scan(body, x, layers)[0]


def encode_images(
    params: dict,
    cfg: CLIPVisionConfig,
    pixel_values: jax.Array | np.ndarray,
    *,
    hidden_state_index: int = -2,
    attention_impl: AttentionImpl | str = AttentionImpl.XLA,
) -> jax.Array:
    """Hidden states of the CLIP vision tower (transformers ``output_hidden_states=True``).

    ``hidden_state_index`` indexes transformers' ``hidden_states`` tuple (length
    ``num_hidden_layers + 1``: the embeddings after ``pre_layrnorm``, then every layer's output,
    all before ``post_layernorm``). The default ``-2`` is what diffusers'
    ``WanImageToVideoPipeline.encode_image`` uses; only the layers up to it are run.

    Args:
      params: parameters of :func:`clip_specs`.
      cfg: the architecture.
      pixel_values: ``(B, 3, image_size, image_size)`` float, from :func:`preprocess_images`.
      hidden_state_index: which hidden state (Python indexing, ``-num_hidden_layers - 1 ..
        num_hidden_layers``).
      attention_impl: see :mod:`vidax.core.attention`.

    Returns:
      float32 ``(B, num_positions, hidden_size)`` (``(B, 257, 1280)`` for the Wan encoder).

    Raises:
      ValueError: wrong input shape, or an index out of range.
    """
    n = cfg.num_hidden_layers
    idx = hidden_state_index + n + 1 if hidden_state_index < 0 else hidden_state_index
    if not 0 <= idx <= n:
        raise ValueError(f"hidden_state_index {hidden_state_index} is out of range for {n} layers")
    shape = (cfg.num_channels, cfg.image_size, cfg.image_size)
    if pixel_values.ndim != 4 or tuple(pixel_values.shape[1:]) != shape:
        raise ValueError(f"pixel_values must be (B, {', '.join(map(str, shape))}), got {tuple(pixel_values.shape)}")
    with jax.default_matmul_precision("highest"):
        return _encode(params, jnp.asarray(pixel_values, jnp.float32), cfg=cfg, num_layers=idx,
                       attention_impl=AttentionImpl(attention_impl))


# --------------------------------------------------------------------------- preprocessing

OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass(frozen=True)
class CLIPImageProcessorConfig:
    """transformers ``CLIPImageProcessor`` settings (``preprocessor_config.json`` keys).

    Defaults are the Wan I2V checkpoints' ``image_processor/``: shortest edge 224, bicubic
    (``resample=3``), center crop 224x224, rescale 1/255, OpenAI CLIP mean/std, convert to RGB.

    Attributes:
      shortest_edge: resize so the shorter side has this many pixels (aspect kept), or None.
      size: ``(height, width)`` to resize to exactly, used when ``shortest_edge`` is None.
      crop_size: ``(height, width)`` of the center crop.
      resample: PIL resampling filter number (3 = bicubic).
    """

    shortest_edge: int | None = 224
    size: tuple[int, int] | None = None
    crop_size: tuple[int, int] = (224, 224)
    do_resize: bool = True
    do_center_crop: bool = True
    do_rescale: bool = True
    do_normalize: bool = True
    do_convert_rgb: bool = True
    rescale_factor: float = 1 / 255
    image_mean: tuple[float, ...] = OPENAI_CLIP_MEAN
    image_std: tuple[float, ...] = OPENAI_CLIP_STD
    resample: int = 3

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> CLIPImageProcessorConfig:
        """Build from a ``preprocessor_config.json`` dict (missing keys take the CLIP defaults).

        Raises:
          ValueError: a ``size`` that is neither ``{"shortest_edge"}`` nor ``{"height", "width"}``.
        """
        kw: dict[str, Any] = {}
        size = config.get("size")
        if isinstance(size, int):
            size = {"shortest_edge": size}
        if isinstance(size, dict):
            if "shortest_edge" in size:
                kw["shortest_edge"] = int(size["shortest_edge"])
            elif "height" in size and "width" in size:
                kw["shortest_edge"] = None
                kw["size"] = (int(size["height"]), int(size["width"]))
            else:
                raise ValueError(f"image processor size {size} is not supported (shortest_edge or height/width)")
        crop = config.get("crop_size")
        if isinstance(crop, int):
            crop = {"height": crop, "width": crop}
        if isinstance(crop, dict):
            kw["crop_size"] = (int(crop["height"]), int(crop["width"]))
        for key in ("do_resize", "do_center_crop", "do_rescale", "do_normalize", "do_convert_rgb"):
            if key in config:
                kw[key] = bool(config[key])
        if "rescale_factor" in config:
            kw["rescale_factor"] = float(config["rescale_factor"])
        for key in ("image_mean", "image_std"):
            if config.get(key) is not None:
                kw[key] = tuple(float(v) for v in config[key])
        if "resample" in config:
            kw["resample"] = int(config["resample"])
        return cls(**kw)

    @classmethod
    def from_folder(cls, folder: str | os.PathLike) -> CLIPImageProcessorConfig:
        """From ``folder/preprocessor_config.json`` (defaults if the folder has none)."""
        path = Path(folder) / "preprocessor_config.json"
        return cls.from_dict(json.loads(path.read_text())) if path.is_file() else cls()


def to_rgb(image: Any):
    """An RGB ``PIL.Image`` from a PIL image (transparency composited onto white, as transformers'
    ``convert_to_rgb``) or a uint8 ``(H, W, 3)`` / ``(H, W)`` array.

    Raises:
      TypeError: another input type. ValueError: an array of another shape or dtype.
    """
    from PIL import Image

    if isinstance(image, Image.Image):
        if image.mode == "RGB":
            return image
        if "A" in image.getbands() or image.info.get("transparency") is not None:
            rgba = image.convert("RGBA")
            background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
            return Image.alpha_composite(background, rgba).convert("RGB")
        return image.convert("RGB")
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8 or not (image.ndim == 2 or (image.ndim == 3 and image.shape[-1] in (3, 4))):
            raise ValueError(f"image arrays must be uint8 (H, W, 3), (H, W, 4) or (H, W); got {image.dtype} {image.shape}")
        return to_rgb(Image.fromarray(image))
    raise TypeError(f"expected a PIL image or a uint8 array, got {type(image).__name__}")


def _resize_output_size(height: int, width: int, shortest_edge: int) -> tuple[int, int]:
    # transformers get_resize_output_image_size(default_to_square=False): the long side is truncated.
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = shortest_edge, int(shortest_edge * long / short)
    return (new_long, new_short) if width <= height else (new_short, new_long)


def preprocess_image(image: Any, cfg: CLIPImageProcessorConfig = CLIPImageProcessorConfig()) -> np.ndarray:
    """One image -> CLIP pixels, as transformers' ``CLIPImageProcessor`` (PIL backend) computes them.

    Steps: convert to RGB; resize with PIL (``cfg.resample``; shortest edge, the long side
    truncated to an int, or an exact size); center crop (``top = (H - h) // 2``, zero padding
    if the image is smaller); ``x.astype(float64) * rescale_factor`` cast to float32;
    ``(x - mean) / std`` in float32.

    Args:
      image: a PIL image or a uint8 ``(H, W, 3)`` array.

    Returns:
      float32 ``(3, crop_h, crop_w)``.
    """
    from PIL import Image

    img = to_rgb(image) if cfg.do_convert_rgb else image
    if cfg.do_resize:
        if not isinstance(img, Image.Image):
            img = Image.fromarray(np.asarray(img))
        if cfg.shortest_edge is not None:
            h, w = _resize_output_size(img.height, img.width, cfg.shortest_edge)
        else:
            h, w = cfg.size
        img = img.resize((w, h), resample=Image.Resampling(cfg.resample))
    x = np.asarray(img)
    if x.ndim == 2:
        x = x[:, :, None]
    x = np.moveaxis(x, -1, 0)  # (C, H, W)
    if cfg.do_center_crop:
        x = _center_crop(x, cfg.crop_size)
    if cfg.do_rescale:
        x = (x.astype(np.float64) * cfg.rescale_factor).astype(np.float32)
    if cfg.do_normalize:
        if not np.issubdtype(x.dtype, np.floating):
            x = x.astype(np.float32)
        mean = np.asarray(cfg.image_mean, x.dtype)[:, None, None]
        std = np.asarray(cfg.image_std, x.dtype)[:, None, None]
        x = (x - mean) / std
    return np.ascontiguousarray(x, dtype=np.float32)


def _center_crop(x: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    _, h, w = x.shape
    ch, cw = size
    top, left = (h - ch) // 2, (w - cw) // 2
    if top >= 0 and left >= 0:
        return x[:, top : top + ch, left : left + cw]
    # Smaller than the crop: zero-pad around the centre first (transformers' center_crop).
    nh, nw = max(ch, h), max(cw, w)
    out = np.zeros((x.shape[0], nh, nw), x.dtype)
    tp, lp = math.ceil((nh - h) / 2), math.ceil((nw - w) / 2)
    out[:, tp : tp + h, lp : lp + w] = x
    top, left = (nh - ch) // 2, (nw - cw) // 2
    return out[:, top : top + ch, left : left + cw]


def preprocess_images(images: Sequence[Any], cfg: CLIPImageProcessorConfig = CLIPImageProcessorConfig()) -> np.ndarray:
    """A batch of images -> float32 ``(B, 3, crop_h, crop_w)`` (see :func:`preprocess_image`)."""
    return np.stack([preprocess_image(im, cfg) for im in images])
