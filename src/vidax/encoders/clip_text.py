"""The CLIP text encoder, as pure functions over a parameter dict.

Follows transformers ``models/clip/modeling_clip.py`` (``CLIPTextModel``: ``CLIPTextEmbeddings``,
``CLIPEncoderLayer``, ``CLIPAttention``, ``CLIPMLP``, the ``final_layer_norm`` and the pooled output) in the
configuration of HunyuanVideo's ``text_encoder_2`` (openai/clip-vit-large-patch14's text tower: 12 layers of
width 768, 12 heads, MLP 3072, quick-GELU, 77 positions, vocabulary 49408).

Layer (pre-norm, causal)::

    x = x + out_proj(attn(q_proj(ln1(x)), k_proj(ln1(x)), v_proj(ln1(x))))   # scale 1/sqrt(head_dim), causal
    x = x + fc2(act(fc1(ln2(x))))

Embeddings: ``token_embedding(ids) + position_embedding(0 .. L-1)``; after the layers, ``final_layer_norm``
gives ``last_hidden_state``. The pooled output is one row of it per sample, the end-of-text token's, chosen as
``CLIPTextTransformer`` chooses it: with the legacy ``eos_token_id == 2`` of the original OpenAI configs (and
HunyuanVideo's ``text_encoder_2``) the position of the *largest id* in the row (CLIP's end-of-text token has
the largest id, and ``argmax`` takes its first occurrence even when it also pads); with any other
``eos_token_id`` the first position holding that id (position 0 if none does).

The HunyuanVideo pipelines call the model without an attention mask, so the only mask is the causal one
(padding tokens are ordinary tokens after the end-of-text token, which cannot see them).

Precision: float32 residual stream and layer norms; matmul inputs in the weight dtype, accumulated in float32.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.keymap import KeyMap, Rule, linear as linear_rules, norm as norm_rules, rules
from vidax.core.attention import AttentionImpl, attention
from vidax.core.config_values import config_values, read_json
from vidax.core.layers import layer_norm, linear
from vidax.core.params import ParamSpec, SpecTree, linear_spec
from vidax.encoders.llama import causal_bias

ACTIVATIONS = {
    "quick_gelu": lambda x: x * jax.nn.sigmoid(1.702 * x),
    "gelu": partial(jax.nn.gelu, approximate=False),
    "gelu_new": partial(jax.nn.gelu, approximate=True),
    "gelu_pytorch_tanh": partial(jax.nn.gelu, approximate=True),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
}

#: The ``eos_token_id`` of configs written before transformers PR #24773, which selects the pooled row by
#: ``argmax(input_ids)`` (see the module docstring).
LEGACY_EOS_TOKEN_ID = 2


@dataclass(frozen=True)
class CLIPTextConfig:
    """Architecture of a CLIP text tower (transformers ``CLIPTextConfig`` keys and defaults).

    Attributes:
      max_position_embeddings: positions of the learned table; the longest input.
      eos_token_id: selects the pooled row (see the module docstring; 2 = legacy argmax rule).
      projection_dim: width of ``text_projection`` (``CLIPTextModelWithProjection``; not used here).
    """

    vocab_size: int = 49408
    hidden_size: int = 512
    intermediate_size: int = 2048
    num_hidden_layers: int = 12
    num_attention_heads: int = 8
    max_position_embeddings: int = 77
    hidden_act: str = "quick_gelu"
    layer_norm_eps: float = 1e-5
    eos_token_id: int = 49407
    projection_dim: int = 512

    def __post_init__(self):
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"CLIPTextConfig: hidden_act {self.hidden_act!r} is not supported; "
                             f"known: {sorted(ACTIVATIONS)}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"CLIPTextConfig: hidden_size {self.hidden_size} is not divisible by "
                             f"{self.num_attention_heads} heads")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> CLIPTextConfig:
        """Build from a transformers ``config.json``: a ``clip_text_model`` config, or a full ``clip`` config
        (its ``text_config``). Unknown keys are ignored; missing ones take transformers' defaults.

        Raises:
          ValueError: a vision config, a value of the wrong type, or an unsupported activation.
        """
        if config.get("model_type") == "clip" or "text_config" in config:
            config = config.get("text_config") or {}
        if config.get("model_type") not in (None, "clip_text_model"):
            raise ValueError(f"CLIPTextConfig: model_type {config.get('model_type')!r} is not a CLIP text model")
        return cls(**config_values(cls, config, "CLIP text encoder config"))


# --------------------------------------------------------------------------- parameters


def clip_text_specs(cfg: CLIPTextConfig) -> SpecTree:
    """The spec tree of a CLIP text tower. Layer parameters lead with a ``layers`` axis.

    Float32 pins: every LayerNorm and the position embedding.
    """
    d, n, f = cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size

    def ln(stacked=True):
        lead, axes = ((n,), ("layers",)) if stacked else ((), ())
        return {"scale": ParamSpec((*lead, d), fp32=True, axes=(*axes, "embed")),
                "bias": ParamSpec((*lead, d), fp32=True, axes=(*axes, "embed"))}

    return {
        "embeddings": {
            "token_embedding": {"embedding": ParamSpec((cfg.vocab_size, d), axes=("vocab", "embed"))},
            "position_embedding": {"embedding": ParamSpec((cfg.max_position_embeddings, d), fp32=True,
                                                          axes=(None, "embed"))},
        },
        "layers": {
            "layer_norm1": ln(),
            "self_attn": {name: linear_spec(d, d, axes, layers=n) for name, axes in (
                ("q_proj", ("embed", "heads")), ("k_proj", ("embed", "heads")), ("v_proj", ("embed", "heads")),
                ("out_proj", ("heads", "embed")))},
            "layer_norm2": ln(),
            "mlp": {"fc1": linear_spec(d, f, ("embed", "mlp"), layers=n),
                    "fc2": linear_spec(f, d, ("mlp", "embed"), layers=n)},
        },
        "final_layer_norm": ln(stacked=False),
    }


def clip_text_keymap(cfg: CLIPTextConfig, keys: Any = None) -> KeyMap:
    """Key map of a transformers ``CLIPTextModel`` folder (HunyuanVideo's ``text_encoder_2/``).

    transformers 4 writes the names under ``text_model.`` (``text_model.encoder.layers.0.self_attn.q_proj.weight``),
    transformers 5 without it; if ``keys`` (the checkpoint's key list) is given and no key has the prefix, the
    map is built without it. Ignored: ``*embeddings.position_ids`` (a buffer older writers saved),
    ``text_projection.weight`` (``CLIPTextModelWithProjection``; the pooled output is taken before it) and the
    image side of a whole ``CLIPModel`` folder (``vision_model.*``, ``visual_projection.weight``, ``logit_scale``:
    the original HunyuanVideo release's ``text_encoder_2/`` is openai/clip-vit-large-patch14 as downloaded).
    """
    keys = list(keys) if keys is not None else None
    prefixed = keys is None or any(k.startswith("text_model.") for k in keys)
    t = "text_model." if prefixed else ""
    layer = f"{t}encoder.layers.{{i}}"
    return KeyMap(
        rules(
            Rule(f"{t}embeddings.token_embedding.weight", "embeddings/token_embedding/embedding"),
            Rule(f"{t}embeddings.position_embedding.weight", "embeddings/position_embedding/embedding"),
            norm_rules(f"{layer}.layer_norm1", "layers/layer_norm1"),
            *[linear_rules(f"{layer}.self_attn.{n}", f"layers/self_attn/{n}")
              for n in ("q_proj", "k_proj", "v_proj", "out_proj")],
            norm_rules(f"{layer}.layer_norm2", "layers/layer_norm2"),
            linear_rules(f"{layer}.mlp.fc1", "layers/mlp/fc1"),
            linear_rules(f"{layer}.mlp.fc2", "layers/mlp/fc2"),
            norm_rules(f"{t}final_layer_norm", "final_layer_norm"),
        ),
        ignore=[r"(text_model\.)?embeddings\.position_ids\Z", r"text_projection\.weight\Z", r"vision_model\.",
                r"visual_projection\.weight\Z", r"logit_scale\Z"],
    )


def load_clip_text(folder: str | Path, dtype: Any = np.float32, **load_kwargs) -> tuple[dict, CLIPTextConfig]:
    """Load a transformers CLIP text folder (``config.json`` + safetensors), strictly.

    Args:
      folder: e.g. ``<pipeline>/text_encoder_2``.
      dtype: ``float32`` (default) or ``bfloat16`` weights.
      load_kwargs: passed to :func:`vidax.checkpoint.loader.load_params`.

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
        raise CheckpointError(f"{config_path}: file not found (a CLIP text encoder folder needs its config.json)")
    cfg = CLIPTextConfig.from_dict(read_json(config_path))
    reader = CheckpointReader(folder)
    params = load_params(reader, clip_text_keymap(cfg, reader.keys()), clip_text_specs(cfg), dtype,
                         source=str(folder), **load_kwargs)
    return params, cfg


# --------------------------------------------------------------------------- forward


def _layer(p: dict, x: jax.Array, bias: jax.Array, cfg: CLIPTextConfig, impl) -> jax.Array:
    b, s, d = x.shape
    attn = p["self_attn"]
    dtype = attn["q_proj"]["kernel"].dtype
    with jax.named_scope("self_attn"):
        h = layer_norm(x, p["layer_norm1"], cfg.layer_norm_eps).astype(dtype)
        q, k, v = (linear(attn[n], h).reshape(b, s, cfg.num_attention_heads, cfg.head_dim)
                   for n in ("q_proj", "k_proj", "v_proj"))
        o = attention(q, k, v, implementation=impl, bias=bias).reshape(b, s, d)
        x = x + linear(attn["out_proj"], o, jnp.float32)
    with jax.named_scope("mlp"):
        h = layer_norm(x, p["layer_norm2"], cfg.layer_norm_eps).astype(dtype)
        h = ACTIVATIONS[cfg.hidden_act](linear(p["mlp"]["fc1"], h, jnp.float32)).astype(dtype)
        x = x + linear(p["mlp"]["fc2"], h, jnp.float32)
    return x


def pooled_positions(input_ids: jax.Array, eos_token_id: int) -> jax.Array:
    """``(B,)`` int32 row of each sample's pooled output (``CLIPTextTransformer``'s rule; module docstring)."""
    if eos_token_id == LEGACY_EOS_TOKEN_ID:
        return jnp.argmax(input_ids, axis=-1).astype(jnp.int32)
    return jnp.argmax((input_ids == eos_token_id).astype(jnp.int32), axis=-1).astype(jnp.int32)


@partial(jax.jit, static_argnames=("cfg", "attention_impl"))
def _encode(params, input_ids, *, cfg: CLIPTextConfig, attention_impl):
    b, s = input_ids.shape
    e = params["embeddings"]
    x = jnp.take(e["token_embedding"]["embedding"], input_ids, axis=0).astype(jnp.float32)
    x = x + e["position_embedding"]["embedding"][:s].astype(jnp.float32)[None]
    bias = causal_bias(s)

    def body(x, p):
        return _layer(p, x, bias, cfg, AttentionImpl(attention_impl)), None

    with jax.named_scope("layers"):
        x, _ = jax.lax.scan(body, x, params["layers"])
    x = layer_norm(x, params["final_layer_norm"], cfg.layer_norm_eps)
    pooled = x[jnp.arange(b), pooled_positions(input_ids, cfg.eos_token_id)]
    return x, pooled


def encode(
    params: dict,
    cfg: CLIPTextConfig,
    input_ids: Any,
    *,
    attention_impl: AttentionImpl | str = AttentionImpl.XLA,
    precision: str | None = "highest",
) -> tuple[jax.Array, jax.Array]:
    """``CLIPTextModel(input_ids)``: ``(last_hidden_state, pooler_output)``, no attention mask (as HunyuanVideo).

    Args:
      params: parameter tree of :func:`clip_text_specs`.
      cfg: the architecture.
      input_ids: ``(B, L)`` token ids, ``L <= max_position_embeddings`` (the tokenizer pads to 77).
      attention_impl: see :mod:`vidax.core.attention` (the causal mask is a score bias).
      precision: matmul precision traced under; None leaves the ambient setting.

    Returns:
      float32 ``last_hidden_state`` ``(B, L, hidden_size)`` (after ``final_layer_norm``) and float32
      ``pooler_output`` ``(B, hidden_size)``.

    Raises:
      ValueError: input ids of the wrong shape, too long, or outside the vocabulary.
    """
    ids = np.asarray(input_ids)
    if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"input_ids must be integer (batch, length); got {ids.dtype} {ids.shape}")
    if ids.shape[1] > cfg.max_position_embeddings:
        raise ValueError(f"input length {ids.shape[1]} exceeds the CLIP text encoder's "
                         f"{cfg.max_position_embeddings} positions; tokenize with max_length="
                         f"{cfg.max_position_embeddings}")
    if ids.size and (ids.min() < 0 or ids.max() >= cfg.vocab_size):
        raise ValueError(f"input_ids hold ids outside the vocabulary [0, {cfg.vocab_size}): min {ids.min()}, "
                         f"max {ids.max()} (is the tokenizer the text encoder's?)")
    ctx = contextlib.nullcontext() if precision is None else jax.default_matmul_precision(precision)
    with ctx:
        return _encode(params, jnp.asarray(ids, jnp.int32), cfg=cfg, attention_impl=AttentionImpl(attention_impl).value)
