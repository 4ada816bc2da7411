"""The Gemma 4 unified text tower (LTX-2.5's text encoder), as pure functions over a parameter dict.

LTX-2.5 ships a ``gemma4_unified`` text encoder (gemma-4-12B; upstream Lightricks/LTX-2 ``ltx-core``
``text_encoders/gemma/encoders/encoder_configurator.py``: ``gemma4_unified`` is the encode model of LTX 2.5;
diffusers' ``LTX2Pipeline`` types it ``Gemma4UnifiedForConditionalGeneration``). Follows transformers 5.24
``models/gemma4_unified/modeling_gemma4_unified.py`` (``Gemma4UnifiedTextModel``, ``Gemma4UnifiedTextDecoderLayer``,
``Gemma4UnifiedTextAttention``, ``Gemma4UnifiedTextMLP``, ``Gemma4UnifiedRMSNorm``,
``Gemma4UnifiedTextRotaryEmbedding``) and ``modeling_rope_utils._compute_proportional_rope_parameters``.

Layer (sandwich norms; every RMSNorm multiplies by its weight, not ``1 + weight`` as Gemma 1-3 do)::

    a = o_proj(attn(rope(q_norm(q_proj(rms(x)))), rope(k_norm(k)), v_norm(v)))   # scale 1, causal, GQA
    x = x + post_attention_layernorm(a)
    x = x + post_feedforward_layernorm(down_proj(gelu_tanh(gate_proj(h)) * up_proj(h))),  h = pre_ff_norm(x)
    x = x * layer_scalar

``k = k_proj(rms(x))``; ``v = v_proj(rms(x))``, or ``k`` before its norm on ``full_attention`` layers with
``attention_k_eq_v``; ``v_norm`` has no weight. The embeddings are scaled by ``sqrt(hidden_size)`` rounded to the
weight dtype. Layers are of two types (:attr:`GemmaConfig.layer_types`): ``sliding_attention`` (keys within
``sliding_window`` positions back, their own head width, key/value heads and RoPE) and ``full_attention``
(``global_head_dim``, ``num_global_key_value_heads``, e.g. proportional RoPE: only the first
``partial_rotary_factor`` of the frequencies rotate).

Parameters are stacked per layer type (``sliding`` and ``full``, each with a leading ``layers`` axis over the
layers of that type, in order). The layer sequence runs as one ``jax.lax.scan`` over its repeating period (the
5 sliding + 1 full of Gemma 4 compile as one 6-layer step); a sequence with no shorter period runs as one step.

Padding is on the left, as LTX's tokenizer pads (diffusers ``LTX2Pipeline._get_gemma_prompt_embeds``,
``padding_side = "left"``; upstream ``LTXGemmaTokenizer``); positions are ``0 .. L-1`` whatever the padding, as
transformers computes them when no position ids are given. Rows of padding attend to no key; they are computed
(finite, uniform over the masked scores) but are not the reference's values and are never read (the feature
extractor zeroes them).

Not implemented (refused by :meth:`GemmaConfig.from_dict`): shared key/value layers (``num_kv_shared_layers``),
the double-wide MLP, bidirectional text attention (``use_bidirectional_attention="all"``), RoPE types other
than ``default`` and ``proportional``. Precision: float32 residual stream, norm statistics and RoPE; matmul
inputs in the weight dtype with float32 accumulation.
"""

from __future__ import annotations

import contextlib
import math
import re
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
from vidax.core.config_values import read_json
from vidax.core.layers import linear
from vidax.core.params import ParamSpec, SpecTree, linear_spec
from vidax.encoders.llama import ACTIVATIONS, apply_rope, rms_norm

LAYER_TYPES = ("sliding_attention", "full_attention")
#: Parameter-tree names of the two layer stacks.
STACKS = {"sliding_attention": "sliding", "full_attention": "full"}
ROPE_TYPES = ("default", "proportional")
#: A score bias that masks a key: finite, so that a row with no valid key (left padding) stays finite.
MASKED = -1e30


@dataclass(frozen=True)
class RopeParams:
    """One layer type's RoPE (transformers ``rope_parameters[layer_type]``)."""

    rope_type: str = "default"
    rope_theta: float = 10000.0
    partial_rotary_factor: float = 1.0
    factor: float = 1.0


@dataclass(frozen=True)
class GemmaConfig:
    """Architecture of a Gemma 4 unified text tower (transformers ``Gemma4UnifiedTextConfig`` keys).

    Attributes:
      head_dim, num_key_value_heads: of the ``sliding_attention`` layers.
      global_head_dim, num_global_key_value_heads: of the ``full_attention`` layers (transformers'
        ``per_layer_config`` overrides; None heads: ``num_key_value_heads``).
      layer_types: one of :data:`LAYER_TYPES` per layer.
      rope: ``(sliding, full)`` :class:`RopeParams`.
      attention_k_eq_v: full layers take their values from the key projection (no ``v_proj``).
    """

    vocab_size: int = 262144
    hidden_size: int = 2304
    intermediate_size: int = 9216
    num_hidden_layers: int = 30
    num_attention_heads: int = 8
    num_key_value_heads: int = 4
    head_dim: int = 256
    global_head_dim: int = 512
    num_global_key_value_heads: int | None = None
    hidden_activation: str = "gelu_pytorch_tanh"
    rms_norm_eps: float = 1e-6
    sliding_window: int = 1024
    layer_types: tuple[str, ...] = ()
    rope: tuple[RopeParams, RopeParams] = (RopeParams(), RopeParams("proportional", 1e6, 0.25))
    attention_bias: bool = False
    attention_k_eq_v: bool = False
    pad_token_id: int | None = 0

    def __post_init__(self):
        types = tuple(self.layer_types)
        object.__setattr__(self, "layer_types", types)
        if len(types) != self.num_hidden_layers or any(t not in LAYER_TYPES for t in types):
            raise ValueError(f"GemmaConfig: layer_types must name {self.num_hidden_layers} layers, each one of "
                             f"{LAYER_TYPES}; got {list(types)[:8]}...")
        if self.hidden_activation not in ACTIVATIONS:
            raise ValueError(f"GemmaConfig: hidden_activation {self.hidden_activation!r} is not supported")
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                     "head_dim", "global_head_dim", "sliding_window"):
            v = getattr(self, name)
            if not (isinstance(v, int) and 0 < v <= 1 << 20):
                raise ValueError(f"GemmaConfig: {name}={v!r} must be a positive integer (at most 2^20)")
        for t in LAYER_TYPES:
            if self.num_attention_heads % self.kv_heads(t):
                raise ValueError(f"GemmaConfig: {self.num_attention_heads} heads are not a multiple of "
                                 f"{self.kv_heads(t)} key/value heads ({t})")
            if self.head(t) % 2:
                raise ValueError(f"GemmaConfig: head width {self.head(t)} ({t}) must be even for RoPE")
        for r in self.rope:
            if r.rope_type not in ROPE_TYPES:
                raise ValueError(f"GemmaConfig: RoPE type {r.rope_type!r} is not supported ({ROPE_TYPES})")

    def head(self, layer_type: str) -> int:
        return self.global_head_dim if layer_type == "full_attention" else self.head_dim

    def kv_heads(self, layer_type: str) -> int:
        if layer_type == "full_attention" and self.num_global_key_value_heads is not None:
            return self.num_global_key_value_heads
        return self.num_key_value_heads

    def k_eq_v(self, layer_type: str) -> bool:
        return self.attention_k_eq_v and layer_type == "full_attention"

    def count(self, layer_type: str) -> int:
        return sum(t == layer_type for t in self.layer_types)

    @property
    def period(self) -> int:
        """The shortest ``p`` with ``layer_types`` its first ``p`` entries repeated (``num_hidden_layers`` if none)."""
        n, types = self.num_hidden_layers, self.layer_types
        return next(p for p in range(1, n + 1) if n % p == 0 and types == types[:p] * (n // p))

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> GemmaConfig:
        """Build from a ``config.json`` dict: ``gemma4_unified`` (its ``text_config``) or ``gemma4_unified_text``.

        Raises:
          ValueError: another model type, or a setting not implemented (named).
        """
        if "text_config" in config:
            config = config.get("text_config") or {}
        if config.get("model_type") not in (None, "gemma4_unified_text"):
            raise ValueError(f"GemmaConfig: model_type {config.get('model_type')!r} is not Gemma 4 unified text")
        for key, ok in (("num_kv_shared_layers", 0), ("use_double_wide_mlp", False), ("enable_moe_block", False),
                        ("num_experts", 0), ("hidden_size_per_layer_input", 0)):
            if config.get(key, ok) not in (ok, None):
                raise ValueError(f"GemmaConfig: {key}={config[key]!r} is not supported")
        if config.get("use_bidirectional_attention") == "all":
            raise ValueError("GemmaConfig: use_bidirectional_attention='all' (bidirectional text) is not supported")
        n = int(config.get("num_hidden_layers", 30))
        types = config.get("layer_types") or [
            "sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(n)]
        types = list(types)
        if types:
            types[-1] = "full_attention"  # transformers forces the last layer to full attention
        kw = {k: config[k] for k in ("vocab_size", "hidden_size", "intermediate_size", "num_attention_heads",
                                     "num_key_value_heads", "head_dim", "hidden_activation", "rms_norm_eps",
                                     "sliding_window", "attention_bias", "attention_k_eq_v", "pad_token_id")
              if config.get(k) is not None}
        # transformers writes the full layers' overrides as per_layer_config {index: {head_dim, num_key_value_heads}};
        # the constructor takes global_head_dim / num_global_key_value_heads.
        full = [i for i, t in enumerate(types) if t == "full_attention"]
        per_layer = config.get("per_layer_config") or {}
        over = dict(per_layer.get(str(full[0]), per_layer.get(full[0], {}))) if full else {}
        for i in full:
            if dict(per_layer.get(str(i), per_layer.get(i, {}))) != over:
                raise ValueError("GemmaConfig: full_attention layers with different per_layer_config are not supported")
        if set(over) - {"head_dim", "num_key_value_heads"} or any(
                str(k) not in {str(i) for i in full} for k in per_layer):
            raise ValueError(f"GemmaConfig: per_layer_config {per_layer!r} is not supported")
        kw["global_head_dim"] = over.get("head_dim", config.get("global_head_dim", 512))
        # Older configs (transformers < 5.2x, e.g. gemma-4-12B's) give the constructor keys; transformers applies
        # num_global_key_value_heads only with attention_k_eq_v.
        k_eq_v_heads = config.get("num_global_key_value_heads") if config.get("attention_k_eq_v") else None
        kw["num_global_key_value_heads"] = over.get("num_key_value_heads", None if over else k_eq_v_heads)
        rope_cfg = config.get("rope_parameters") or {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6}}
        rope = []
        for t in LAYER_TYPES:
            r = rope_cfg.get(t) or {}
            rope.append(RopeParams(str(r.get("rope_type", "default")), float(r.get("rope_theta", 10000.0)),
                                   float(r.get("partial_rotary_factor", 1.0)), float(r.get("factor", 1.0))))
        return cls(num_hidden_layers=n, layer_types=tuple(types), rope=tuple(rope), **kw)


# --------------------------------------------------------------------------- parameters


def _layer_specs(cfg: GemmaConfig, t: str) -> dict:
    n, d, f, hd = cfg.count(t), cfg.hidden_size, cfg.intermediate_size, cfg.head(t)
    q, kv, bias = cfg.num_attention_heads * hd, cfg.kv_heads(t) * hd, cfg.attention_bias

    def norm(width=d):
        return {"scale": ParamSpec((n, width), fp32=True, axes=("layers", None))}

    attn = {
        "q_proj": linear_spec(d, q, ("embed", "heads"), layers=n, bias=bias),
        "k_proj": linear_spec(d, kv, ("embed", "kv_heads"), layers=n, bias=bias),
        "o_proj": linear_spec(q, d, ("heads", "embed"), layers=n, bias=bias),
        "q_norm": norm(hd), "k_norm": norm(hd),
    }
    if not cfg.k_eq_v(t):
        attn["v_proj"] = linear_spec(d, kv, ("embed", "kv_heads"), layers=n, bias=bias)
    return {
        "input_layernorm": norm(), "post_attention_layernorm": norm(),
        "pre_feedforward_layernorm": norm(), "post_feedforward_layernorm": norm(),
        "self_attn": attn,
        "mlp": {
            "gate_proj": linear_spec(d, f, ("embed", "mlp"), layers=n, bias=False),
            "up_proj": linear_spec(d, f, ("embed", "mlp"), layers=n, bias=False),
            "down_proj": linear_spec(f, d, ("mlp", "embed"), layers=n, bias=False),
        },
        "layer_scalar": ParamSpec((n, 1), fp32=True, axes=("layers", None)),
    }


def gemma_specs(cfg: GemmaConfig) -> SpecTree:
    """The spec tree: ``embed_tokens``, ``sliding`` and ``full`` layer stacks, ``norm``. Float32 pins: the norm
    scales and ``layer_scalar``."""
    specs = {"embed_tokens": {"embedding": ParamSpec((cfg.vocab_size, cfg.hidden_size), axes=("vocab", "embed"))},
             "norm": {"scale": ParamSpec((cfg.hidden_size,), fp32=True, axes=("embed",))}}
    for t in LAYER_TYPES:
        if cfg.count(t):
            specs[STACKS[t]] = _layer_specs(cfg, t)
    return specs


#: Key prefixes of the language model, most specific first: transformers' ``...ForConditionalGeneration`` (diffusers'
#: ``text_encoder/``), its ``...Model``, the flat layout of LTX-2.5's released text-encoder file (upstream
#: ``gemma_assets._flatten_gemma4_unified_keys_for_comfy``: ``model.layers.*``), the bare text model.
GEMMA_KEY_PREFIXES = ("model.language_model.", "language_model.", "model.", "")
#: Tensors a text encoder never reads: the LM head and the image / audio embedders of the unified model (under
#: transformers' names and the flat layout's ``vision_model`` / ``multi_modal_projector`` / ``audio_projector``).
GEMMA_IGNORED = (r"lm_head\.weight\Z", r"(model\.)?(vision_embedder|embed_vision|embed_audio|vision_tower|"
                 r"multi_modal_projector|audio_tower)\.", r"(vision_model|multi_modal_projector|audio_projector)\.")


def gemma_keymap(cfg: GemmaConfig, prefix: str = "model.language_model.") -> KeyMap:
    """Key map of the renamed view :class:`LayerTypeReader` gives of a transformers folder: layer ``i`` of type
    ``t`` appears as ``{prefix}{stack}.{k}.…`` (``k``: its index among the layers of its type)."""
    groups = [Rule(f"{prefix}embed_tokens.weight", "embed_tokens/embedding"), norm_rules(f"{prefix}norm", "norm",
                                                                                           bias=False)]
    for t in LAYER_TYPES:
        if not cfg.count(t):
            continue
        s = STACKS[t]
        layer = f"{prefix}{s}.{{i}}"
        names = ("q_proj", "k_proj", "o_proj") + (() if cfg.k_eq_v(t) else ("v_proj",))
        groups += [linear_rules(f"{layer}.self_attn.{n}", f"{s}/self_attn/{n}", bias=cfg.attention_bias)
                   for n in names]
        groups += [norm_rules(f"{layer}.self_attn.{n}", f"{s}/self_attn/{n}", bias=False) for n in ("q_norm", "k_norm")]
        groups += [norm_rules(f"{layer}.{n}", f"{s}/{n}", bias=False) for n in
                   ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                    "post_feedforward_layernorm")]
        groups += [linear_rules(f"{layer}.mlp.{n}", f"{s}/mlp/{n}", bias=False) for n in
                   ("gate_proj", "up_proj", "down_proj")]
        groups.append(Rule(f"{layer}.layer_scalar", f"{s}/layer_scalar"))
    return KeyMap(rules(*groups), ignore=list(GEMMA_IGNORED))


class LayerTypeReader:
    """A checkpoint reader that shows ``{prefix}layers.{i}.X`` as ``{prefix}{stack}.{k}.X`` (``stack``: the
    layer's :data:`STACKS` name, ``k``: its index within that stack), so that one templated key map fills the two
    stacks. Other keys pass unchanged; a layer index past ``num_hidden_layers`` passes unchanged (and is then
    reported as unexpected by the loader)."""

    def __init__(self, reader, cfg: GemmaConfig, prefix: str):
        self.inner, self.path = reader, getattr(reader, "path", None)
        rank, seen = [], {t: 0 for t in LAYER_TYPES}
        for t in cfg.layer_types:
            rank.append(seen[t])
            seen[t] += 1
        pat = re.compile(re.escape(prefix) + r"layers\.(\d+)\.(.*)\Z", re.S)
        self._map: dict[str, str] = {}
        for key in reader.keys():
            m = pat.match(key)
            name = key
            if m and int(m.group(1)) < cfg.num_hidden_layers:
                i = int(m.group(1))
                name = f"{prefix}{STACKS[cfg.layer_types[i]]}.{rank[i]}.{m.group(2)}"
            self._map[name] = key

    def keys(self) -> list[str]:
        return list(self._map)

    def __contains__(self, key: str) -> bool:
        return key in self._map

    def shape(self, key: str) -> tuple[int, ...]:
        return self.inner.shape(self._map[key])

    def dtype(self, key: str):
        return self.inner.dtype(self._map[key])

    def get(self, key: str) -> np.ndarray:
        return self.inner.get(self._map[key])


def load_gemma(folder: str | Path, dtype: Any = np.float32, **load_kwargs) -> tuple[dict, GemmaConfig]:
    """Load a transformers Gemma 4 unified folder (diffusers' ``text_encoder/``: ``config.json`` + safetensors),
    strictly; the image / audio embedders and the LM head are ignored by name.

    Args:
      folder: the folder. dtype: ``float32`` or ``bfloat16`` weights (norm scales stay float32).
      load_kwargs: passed to :func:`vidax.checkpoint.loader.load_params`.

    Returns:
      ``(params, cfg)``.

    Raises:
      CheckpointError: a missing folder or ``config.json``, or weights that do not match it (all listed).
      ValueError: an unsupported configuration.
    """
    from vidax.checkpoint.loader import load_params
    from vidax.checkpoint.reader import CheckpointReader

    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"{config_path}: file not found (a Gemma text encoder folder needs its config.json)")
    cfg = GemmaConfig.from_dict(read_json(config_path))
    reader = CheckpointReader(folder)
    keys = set(reader.keys())
    prefix = next((p for p in GEMMA_KEY_PREFIXES if f"{p}embed_tokens.weight" in keys), "model.language_model.")
    params = load_params(LayerTypeReader(reader, cfg, prefix), gemma_keymap(cfg, prefix), gemma_specs(cfg), dtype,
                         source=str(folder), **load_kwargs)
    return params, cfg


# --------------------------------------------------------------------------- forward


def rope_inv_freq(cfg: GemmaConfig, layer_type: str) -> np.ndarray:
    """float32 ``(head / 2,)`` inverse frequencies of one layer type (transformers
    ``compute_default_rope_parameters`` / ``_compute_proportional_rope_parameters``: the first
    ``int(partial_rotary_factor * head // 2)`` frequencies, zeros after, divided by ``factor``)."""
    r, dim = cfg.rope[LAYER_TYPES.index(layer_type)], cfg.head(layer_type)
    if r.rope_type == "default":
        exponent = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
        return (np.float32(1.0) / np.power(np.float32(r.rope_theta), exponent)).astype(np.float32)
    angles = int(r.partial_rotary_factor * dim // 2)
    exponent = np.arange(0, 2 * angles, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    inv = (np.float32(1.0) / np.power(np.float32(r.rope_theta), exponent)).astype(np.float32)
    inv = np.concatenate([inv, np.zeros(dim // 2 - angles, np.float32)])
    return (inv / np.float32(r.factor)).astype(np.float32)


def _cos_sin(cfg: GemmaConfig, layer_type: str, length: int) -> tuple[jax.Array, jax.Array]:
    freqs = jnp.arange(length, dtype=jnp.float32)[:, None] * jnp.asarray(rope_inv_freq(cfg, layer_type))
    emb = jnp.concatenate([freqs, freqs], axis=-1)[None]
    return jnp.cos(emb), jnp.sin(emb)


def score_bias(lengths: jax.Array, length: int, window: int | None) -> jax.Array:
    """``(B, 1, L, L)`` float32 bias: 0 where key ``k`` is visible from query ``q`` (``k <= q``, ``k`` not left
    padding, and with a ``window`` ``k > q - window``), :data:`MASKED` elsewhere."""
    q, k = jnp.arange(length)[:, None], jnp.arange(length)[None, :]
    ok = (k <= q)[None] & (k[None] >= (length - lengths)[:, None, None])
    if window is not None:
        ok = ok & (k > q - window)[None]
    return jnp.where(ok, 0.0, MASKED).astype(jnp.float32)[:, None]


def decoder_layer(p: dict, x: jax.Array, cos: jax.Array, sin: jax.Array, bias: jax.Array, cfg: GemmaConfig,
                  layer_type: str, impl) -> jax.Array:
    """One ``Gemma4UnifiedTextDecoderLayer`` of ``layer_type`` on the float32 ``(B, L, hidden)`` stream."""
    attn, mlp = p["self_attn"], p["mlp"]
    dtype = attn["q_proj"]["kernel"].dtype
    b, s, _ = x.shape
    hd, kvh, eps = cfg.head(layer_type), cfg.kv_heads(layer_type), cfg.rms_norm_eps
    with jax.named_scope("self_attn"):
        h = rms_norm(x, p["input_layernorm"], eps, out_dtype=dtype)
        q = linear(attn["q_proj"], h, jnp.float32).reshape(b, s, cfg.num_attention_heads, hd)
        k = linear(attn["k_proj"], h, jnp.float32).reshape(b, s, kvh, hd)
        v = k if cfg.k_eq_v(layer_type) else linear(attn["v_proj"], h, jnp.float32).reshape(b, s, kvh, hd)
        q = apply_rope(rms_norm(q, attn["q_norm"], eps), cos, sin).astype(dtype)
        k = apply_rope(rms_norm(k, attn["k_norm"], eps), cos, sin).astype(dtype)
        v = rms_norm(v, {"scale": jnp.ones((hd,), jnp.float32)}, eps, out_dtype=dtype)
        if kvh != cfg.num_attention_heads:
            k = jnp.repeat(k, cfg.num_attention_heads // kvh, axis=2)
            v = jnp.repeat(v, cfg.num_attention_heads // kvh, axis=2)
        o = attention(q, k, v, implementation=impl, bias=bias, scale=1.0)
        o = linear(attn["o_proj"], o.reshape(b, s, cfg.num_attention_heads * hd), jnp.float32)
        x = x + rms_norm(o, p["post_attention_layernorm"], eps)
    with jax.named_scope("mlp"):
        h = rms_norm(x, p["pre_feedforward_layernorm"], eps, out_dtype=dtype)
        g = ACTIVATIONS[cfg.hidden_activation](linear(mlp["gate_proj"], h, jnp.float32))
        y = linear(mlp["down_proj"], g * linear(mlp["up_proj"], h, jnp.float32), jnp.float32)
        x = x + rms_norm(y, p["post_feedforward_layernorm"], eps)
    return x * p["layer_scalar"].astype(jnp.float32)


@partial(jax.jit, static_argnames=("cfg", "attention_impl"))
def _encode(params, ids, lengths, *, cfg: GemmaConfig, attention_impl):
    impl = AttentionImpl(attention_impl)
    table = params["embed_tokens"]["embedding"]
    scale = jnp.asarray(math.sqrt(cfg.hidden_size), table.dtype)  # rounded to the weight dtype, as the reference
    x = (jnp.take(table, ids, axis=0) * scale).astype(jnp.float32)
    s = x.shape[1]
    ropes = {t: _cos_sin(cfg, t, s) for t in LAYER_TYPES if cfg.count(t)}
    biases = {t: score_bias(lengths, s, cfg.sliding_window if t == "sliding_attention" else None)
              for t in LAYER_TYPES if cfg.count(t)}
    pattern = cfg.layer_types[:cfg.period]
    per_period = {t: pattern.count(t) for t in LAYER_TYPES}

    def step(x, period):
        outs, seen = [], {t: 0 for t in LAYER_TYPES}
        for t in pattern:
            i = period * per_period[t] + seen[t]
            seen[t] += 1
            p = jax.tree.map(lambda a: jax.lax.dynamic_index_in_dim(a, i, keepdims=False), params[STACKS[t]])
            x = decoder_layer(p, x, *ropes[t], biases[t], cfg, t, impl)
            outs.append(x)
        return x, jnp.stack(outs)

    with jax.named_scope("layers"):
        last, outs = jax.lax.scan(step, x, jnp.arange(cfg.num_hidden_layers // cfg.period))
    outs = outs.reshape(cfg.num_hidden_layers, *x.shape)
    last = rms_norm(last, params["norm"], cfg.rms_norm_eps)
    return jnp.concatenate([x[None], outs[:-1], last[None]], axis=0)


def left_padding_lengths(attention_mask: Any, shape: tuple[int, int]) -> np.ndarray:
    """``(B,)`` int32 valid lengths of a left-padded ``(B, L)`` mask (None: every position valid).

    Raises:
      ValueError: a mask of another shape, or a row that is not zeros then ones.
    """
    if attention_mask is None:
        return np.full((shape[0],), shape[1], np.int32)
    m = np.asarray(attention_mask) != 0
    if m.shape != tuple(shape):
        raise ValueError(f"attention_mask must have the shape of the input ids {tuple(shape)}; got {m.shape}")
    lengths = m.sum(axis=1)
    if not np.array_equal(m, np.arange(m.shape[1])[None, :] >= (m.shape[1] - lengths)[:, None]):
        raise ValueError("attention_mask must be left padding (zeros, then ones), as LTX-2's Gemma tokenizer pads")
    return lengths.astype(np.int32)


def encode(params: dict, cfg: GemmaConfig, input_ids: Any, attention_mask: Any = None, *,
           attention_impl: AttentionImpl | str = AttentionImpl.XLA, precision: str | None = "highest") -> jax.Array:
    """Every hidden state of the text tower: transformers' ``hidden_states`` tuple (``output_hidden_states=True``)
    stacked: the scaled embeddings, each layer's output, the last one normed.

    Args:
      params: tree of :func:`gemma_specs` (float32 or bfloat16 weights).
      input_ids: ``(B, L)`` integer token ids.
      attention_mask: ``(B, L)`` 0 for left padding then 1; None: no padding.
      attention_impl: see :mod:`vidax.core.attention` (a score bias: kernels fall back to ``chunked``).
      precision: matmul precision traced under (None: the ambient one).

    Returns:
      float32 ``(num_hidden_layers + 1, B, L, hidden_size)``; rows of padding are not the reference's (see the
      module docstring).

    Raises:
      ValueError: ids that are not ``(B, L)`` integers inside the vocabulary, a mask that is not left padding.
    """
    ids = np.asarray(input_ids)
    if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"input_ids must be integer (batch, length); got {ids.dtype} {ids.shape}")
    if ids.size and (ids.min() < 0 or ids.max() >= cfg.vocab_size):
        raise ValueError(f"input_ids hold ids outside the vocabulary [0, {cfg.vocab_size}): min {ids.min()}, "
                         f"max {ids.max()} (is the tokenizer the text encoder's?)")
    lengths = left_padding_lengths(attention_mask, ids.shape)
    ctx = contextlib.nullcontext() if precision is None else jax.default_matmul_precision(precision)
    with ctx:
        return _encode(params, jnp.asarray(ids, jnp.int32), jnp.asarray(lengths), cfg=cfg,
                       attention_impl=AttentionImpl(attention_impl).value)
