"""The LLaVA image path: CLIP vision features, the multi-modal projector, and their merge into the tokens.

Follows transformers ``models/llava/modeling_llava.py`` (``LlavaForConditionalGeneration`` /
``LlavaModel``: ``get_image_features``, ``LlavaMultiModalProjector``, ``get_placeholder_mask`` and the
``masked_scatter`` of the image features into the token embeddings) as HunyuanVideo's image-to-video pipeline
uses it: the text encoder is LLaVA-Llama-3-8B (a CLIP ViT-L/14 at 336 px, 24 layers of width 1024, whose
penultimate layer's 576 patch tokens go through ``linear_1 -> gelu -> linear_2`` into the Llama's width),
and only a hidden state of the language model is read (no logits).

Image features (``get_image_features``)::

    h = vision_tower(pixel_values).hidden_states[vision_feature_layer]   # before post_layernorm
    h = h[:, 1:]                     # "default" strategy: drop the class token ("full": keep it)
    features = linear_2(act(linear_1(h)))

Merge: the ``k``-th image-token position of the batch (row-major over ``input_ids == image_token_index``)
receives the ``k``-th feature row (image after image); their counts must agree. The merged embeddings then run
through the Llama decoder (:mod:`vidax.encoders.llama`). The vision tower and the preprocessing are
:mod:`vidax.encoders.clip`'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.keymap import KeyMap, Rule
from vidax.core.attention import AttentionImpl
from vidax.core.config_values import read_json
from vidax.core.layers import linear
from vidax.core.params import SpecTree, linear_spec
from vidax.encoders import llama
from vidax.encoders.clip import CLIPVisionConfig, clip_keymap, clip_specs, encode_images
from vidax.encoders.llama import LlamaConfig

PROJECTOR_ACTIVATIONS = {
    "gelu": partial(jax.nn.gelu, approximate=False),
    "gelu_pytorch_tanh": partial(jax.nn.gelu, approximate=True),
    "gelu_new": partial(jax.nn.gelu, approximate=True),
    "quick_gelu": lambda x: x * jax.nn.sigmoid(1.702 * x),
    "silu": jax.nn.silu,
    "relu": jax.nn.relu,
}

#: transformers ``CLIPVisionConfig``'s defaults: what a key missing from a ``vision_config`` means.
CLIP_VISION_DEFAULTS = {"hidden_size": 768, "intermediate_size": 3072, "projection_dim": 512, "num_hidden_layers": 12,
                        "num_attention_heads": 12, "num_channels": 3, "image_size": 224, "patch_size": 32,
                        "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5}

#: ``LlavaConfig``'s vision tower when its config has no ``vision_config`` (CLIP ViT-L/14 at 336 px).
LLAVA_VISION_DEFAULTS = {**CLIP_VISION_DEFAULTS, "intermediate_size": 4096, "hidden_size": 1024, "patch_size": 14,
                         "image_size": 336, "num_hidden_layers": 24, "num_attention_heads": 16, "projection_dim": 768}


@dataclass(frozen=True)
class LlavaConfig:
    """A LLaVA model (transformers ``LlavaConfig`` keys and defaults).

    Attributes:
      text: the language model.
      vision: the vision tower (never with a projection).
      image_token_index: the placeholder token id the image features replace.
      pad_token_id: the top-level ``pad_token_id`` (HunyuanVideo I2V derives its attention mask from it), or None.
      vision_feature_layer: index into the vision tower's hidden states (``-2``: the penultimate layer).
      vision_feature_select_strategy: ``"default"`` (drop the class token) or ``"full"``.
      projector_hidden_act, multimodal_projector_bias: the projector's activation and biases.
      image_seq_length: informational (the processor's token count per image).
    """

    text: LlamaConfig
    vision: CLIPVisionConfig
    image_token_index: int = 32000
    pad_token_id: int | None = None
    vision_feature_layer: int = -2
    vision_feature_select_strategy: str = "default"
    projector_hidden_act: str = "gelu"
    multimodal_projector_bias: bool = True
    image_seq_length: int = 576

    def __post_init__(self):
        if self.vision_feature_select_strategy not in ("default", "full"):
            raise ValueError(f"LlavaConfig: vision_feature_select_strategy {self.vision_feature_select_strategy!r} "
                             "is not 'default' or 'full'")
        if self.projector_hidden_act not in PROJECTOR_ACTIVATIONS:
            raise ValueError(f"LlavaConfig: projector_hidden_act {self.projector_hidden_act!r} is not supported; "
                             f"known: {sorted(PROJECTOR_ACTIVATIONS)}")
        n = self.vision.num_hidden_layers
        if not -n - 1 <= self.vision_feature_layer <= n:
            raise ValueError(f"LlavaConfig: vision_feature_layer {self.vision_feature_layer} is out of range for a "
                             f"vision tower of {n} layers")
        if not 0 <= self.image_token_index < self.text.vocab_size:
            raise ValueError(f"LlavaConfig: image_token_index {self.image_token_index} is outside the language "
                             f"model's vocabulary [0, {self.text.vocab_size})")

    @property
    def num_image_features(self) -> int:
        """Feature rows per image (576 for CLIP ViT-L/14 at 336 px with the ``"default"`` strategy)."""
        return self.vision.num_positions - (1 if self.vision_feature_select_strategy == "default" else 0)

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> LlavaConfig:
        """Build from a transformers ``llava`` ``config.json`` dict; missing keys take transformers' defaults.

        Raises:
          ValueError: another model type, a list of vision feature layers (not supported), or unsupported
            values (named).
        """
        if config.get("model_type") not in ("llava", None):
            raise ValueError(f"LlavaConfig: model_type {config.get('model_type')!r} is not 'llava'")
        vision = config.get("vision_config")
        if vision is None:
            vision = dict(LLAVA_VISION_DEFAULTS)
        elif not isinstance(vision, dict):
            raise ValueError(f"LLaVA config: vision_config should be an object, got {type(vision).__name__}")
        else:
            vision = {**CLIP_VISION_DEFAULTS, **{k: v for k, v in vision.items() if k != "architectures"}}
        text = config.get("text_config") or {}
        if not isinstance(text, dict):
            raise ValueError(f"LLaVA config: text_config should be an object, got {type(text).__name__}")
        layer = config.get("vision_feature_layer", -2)
        if not isinstance(layer, int) or isinstance(layer, bool):
            raise ValueError(f"LLaVA config: vision_feature_layer={layer!r} is not supported (one integer layer)")
        token = config.get("image_token_index", config.get("image_token_id", 32000))
        pad = config.get("pad_token_id")
        for name, value in (("image_token_index", token), ("pad_token_id", pad)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise ValueError(f"LLaVA config: {name}={value!r} should be an integer")
        strategy = config.get("vision_feature_select_strategy", "default")
        act = config.get("projector_hidden_act", "gelu")
        bias = config.get("multimodal_projector_bias", True)
        return cls(text=LlamaConfig.from_dict(text), vision=CLIPVisionConfig.from_dict(vision),
                   image_token_index=token, pad_token_id=pad, vision_feature_layer=layer,
                   vision_feature_select_strategy=strategy, projector_hidden_act=act,
                   multimodal_projector_bias=bool(bias), image_seq_length=int(config.get("image_seq_length", 576)))


# --------------------------------------------------------------------------- parameters


def llava_specs(cfg: LlavaConfig) -> SpecTree:
    """The spec tree: ``language_model`` (:func:`vidax.encoders.llama.llama_specs`), ``vision_tower``
    (:func:`vidax.encoders.clip.clip_specs`) and ``multi_modal_projector`` (``linear_1``, ``linear_2``)."""
    vd, td = cfg.vision.hidden_size, cfg.text.hidden_size
    bias = cfg.multimodal_projector_bias
    return {
        "language_model": llama.llama_specs(cfg.text),
        "vision_tower": clip_specs(cfg.vision),
        "multi_modal_projector": {"linear_1": linear_spec(vd, td, (None, "embed"), bias=bias),
                                  "linear_2": linear_spec(td, td, ("embed", None), bias=bias)},
    }


@dataclass(frozen=True)
class LlavaLayout:
    """Where the parts of a ``LlavaForConditionalGeneration`` state dict live.

    Two layouts exist: transformers 4.4x (and transformers 5's ``save_pretrained``, which writes the legacy
    names) use ``language_model.model.*``, ``language_model.lm_head.weight``, ``vision_tower.*`` and
    ``multi_modal_projector.*``; transformers 4.52 to 4.5x wrote ``model.language_model.*``,
    ``model.vision_tower.*``, ``model.multi_modal_projector.*`` and ``lm_head.weight``. The vision tower's
    names carry ``vision_model.`` (``CLIPVisionModel`` of transformers 4) or not (transformers 5).
    """

    language_model: str
    vision_tower: str
    projector: str
    lm_head: str

    @classmethod
    def of(cls, keys: Any) -> LlavaLayout:
        """The layout of a checkpoint's key list (the older one where no key starts ``model.language_model.``)."""
        if any(k.startswith("model.language_model.") for k in keys):
            return cls("model.language_model.", "model.vision_tower.", "model.multi_modal_projector.", "lm_head.weight")
        return cls("language_model.model.", "vision_tower.", "multi_modal_projector.", "language_model.lm_head.weight")


#: The LM head's key in any of the layouts, ignored: ``lm_head.weight`` (transformers >= 4.52, and transformers 5's
#: ``save_pretrained``, which writes the older names for everything else) or ``language_model.lm_head.weight``
#: (transformers 4.4x).
LLAVA_LM_HEAD = r"(language_model\.)?lm_head\.weight\Z"


def _prefixed(km: KeyMap, key_prefix: str, path_prefix: str) -> KeyMap:
    return KeyMap([Rule(key_prefix + r.key, path_prefix + r.path, r.layout) for r in km.rules],
                  [re.escape(key_prefix) + p for p in km.ignore])


def llava_keymap(cfg: LlavaConfig, keys: Any = None) -> KeyMap:
    """Key map of a ``LlavaForConditionalGeneration`` folder (HunyuanVideo I2V's ``text_encoder/``).

    The layout (:class:`LlavaLayout`) and the vision tower's ``vision_model.`` prefix are read from ``keys``
    (the checkpoint's key list; without it: the older layout with ``vision_model.``). The LM head
    (:data:`LLAVA_LM_HEAD`) is ignored: the encoder returns hidden states, never logits.
    """
    keys = list(keys) if keys is not None else None
    layout = LlavaLayout.of(keys or [])
    vision_keys = None if keys is None else [k[len(layout.vision_tower):] for k in keys
                                             if k.startswith(layout.vision_tower)]
    bias = cfg.multimodal_projector_bias
    projector = KeyMap([Rule(f"{layout.projector}{n}.weight", f"multi_modal_projector/{n}/kernel", "linear")
                        for n in ("linear_1", "linear_2")]
                       + ([Rule(f"{layout.projector}{n}.bias", f"multi_modal_projector/{n}/bias")
                           for n in ("linear_1", "linear_2")] if bias else []))
    return (KeyMap(llama.llama_rules(cfg.text, layout.language_model, "language_model/"),
                   ignore=[LLAVA_LM_HEAD, r".*rotary_emb\.inv_freq\Z"])
            + _prefixed(clip_keymap(cfg.vision, vision_keys), layout.vision_tower, "vision_tower/")
            + projector)


def load_llava(folder: str | Path, dtype: Any = np.float32, **load_kwargs) -> tuple[dict, LlavaConfig]:
    """Load a transformers ``LlavaForConditionalGeneration`` folder (``config.json`` + safetensors), strictly.

    Returns:
      ``(params, cfg)``.

    Raises:
      CheckpointError: a missing ``config.json``, or weights that do not match it (all listed).
      ValueError: an unsupported configuration.
    """
    from vidax.checkpoint.loader import load_params
    from vidax.checkpoint.reader import CheckpointReader

    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"{config_path}: file not found (a LLaVA text encoder folder needs its config.json)")
    cfg = LlavaConfig.from_dict(read_json(config_path))
    reader = CheckpointReader(folder)
    params = load_params(reader, llava_keymap(cfg, reader.keys()), llava_specs(cfg), dtype, source=str(folder),
                         **load_kwargs)
    return params, cfg


# --------------------------------------------------------------------------- forward


@partial(jax.jit, static_argnames=("cfg",))
def _project(params, hidden, *, cfg: LlavaConfig):
    if cfg.vision_feature_select_strategy == "default":
        hidden = hidden[:, 1:]
    p = params["multi_modal_projector"]
    h = PROJECTOR_ACTIVATIONS[cfg.projector_hidden_act](linear(p["linear_1"], hidden, jnp.float32))
    return linear(p["linear_2"], h, jnp.float32)


def image_features(params: dict, cfg: LlavaConfig, pixel_values: Any, *,
                   attention_impl: AttentionImpl | str = AttentionImpl.XLA) -> jax.Array:
    """``LlavaModel.get_image_features``: projected image features.

    Args:
      params: parameters of :func:`llava_specs`.
      pixel_values: ``(N_img, 3, image_size, image_size)`` from :func:`vidax.encoders.clip.preprocess_images`
        with the checkpoint's ``image_processor/`` settings.

    Returns:
      float32 ``(N_img, num_image_features, text hidden_size)``.
    """
    hidden = encode_images(params["vision_tower"], cfg.vision, pixel_values,
                           hidden_state_index=cfg.vision_feature_layer, attention_impl=attention_impl)
    with jax.default_matmul_precision("highest"):
        return _project(params, hidden, cfg=cfg)


@jax.jit
def _merge(inputs_embeds, mask, features):
    flat = mask.reshape(-1)
    index = jnp.clip(jnp.cumsum(flat.astype(jnp.int32)) - 1, 0, features.shape[0] - 1)
    gathered = jnp.take(features, index, axis=0).reshape(inputs_embeds.shape)
    return jnp.where(mask[..., None], gathered.astype(inputs_embeds.dtype), inputs_embeds)


def merge_image_features(inputs_embeds: jax.Array, input_ids: Any, features: jax.Array,
                         image_token_index: int) -> jax.Array:
    """The token embeddings with the image features in the image-token positions (``masked_scatter``).

    Args:
      inputs_embeds: ``(B, L, D)`` token embeddings.
      input_ids: ``(B, L)`` ids; the positions holding ``image_token_index`` are replaced.
      features: ``(N_img, N, D)`` (or ``(M, D)``) features, consumed in order.

    Returns:
      ``(B, L, D)`` in ``inputs_embeds``' dtype.

    Raises:
      ValueError: the number of image-token positions differs from the number of feature rows (transformers:
        "Image features and image tokens do not match").
    """
    mask = np.asarray(input_ids) == image_token_index
    features = jnp.asarray(features)
    features = features.reshape(-1, features.shape[-1])
    if int(mask.sum()) != features.shape[0]:
        raise ValueError(f"image features and image tokens do not match: {int(mask.sum())} image tokens "
                         f"(id {image_token_index}) in the input ids, {features.shape[0]} feature rows")
    if features.shape[0] == 0:
        return inputs_embeds
    return _merge(inputs_embeds, jnp.asarray(mask), features)


def encode(
    params: dict,
    cfg: LlavaConfig,
    input_ids: Any,
    attention_mask: Any,
    pixel_values: Any,
    *,
    position_ids: Any = None,
    num_hidden_layers_to_skip: int = 0,
    attention_impl: AttentionImpl | str = AttentionImpl.XLA,
    precision: str | None = "highest",
) -> jax.Array:
    """``LlavaForConditionalGeneration(input_ids, pixel_values, attention_mask, position_ids,
    output_hidden_states=True).hidden_states[-(num_hidden_layers_to_skip + 1)]``.

    Args:
      params: parameters of :func:`llava_specs`.
      input_ids: ``(B, L)``, each image expanded to ``num_image_features`` placeholder tokens.
      attention_mask: ``(B, L)`` right padding, or None.
      pixel_values: ``(N_img, 3, S, S)``, one image per group of placeholders, in order.
      position_ids, num_hidden_layers_to_skip, attention_impl, precision: as :func:`vidax.encoders.llama.encode`.

    Returns:
      float32 ``(B, L, text hidden_size)``.

    Raises:
      ValueError: see :func:`merge_image_features` and :func:`vidax.encoders.llama.encode`.
    """
    lm = params["language_model"]
    embeds = llama.embed_tokens(lm, cfg.text, input_ids)
    features = image_features(params, cfg, pixel_values, attention_impl=attention_impl)
    merged = merge_image_features(embeds, input_ids, features, cfg.image_token_index)
    return llama.encode(lm, cfg.text, attention_mask=attention_mask, inputs_embeds=merged, position_ids=position_ids,
                        num_hidden_layers_to_skip=num_hidden_layers_to_skip, attention_impl=attention_impl,
                        precision=precision)
