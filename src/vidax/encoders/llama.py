"""A Llama decoder as a text encoder, as pure functions over a parameter dict.

Follows transformers ``models/llama/modeling_llama.py`` (``LlamaModel``: ``LlamaDecoderLayer``,
``LlamaAttention``, ``LlamaMLP``, ``LlamaRMSNorm``, ``LlamaRotaryEmbedding``) and ``modeling_rope_utils.py``
(the ``llama3`` and ``linear`` RoPE scalings), in the configuration of HunyuanVideo's text encoder, the
text tower of LLaVA-Llama-3-8B (xtuner/llava-llama-3-8b-v1_1: 32 layers of width 4096, 32 query heads and
8 key/value heads of 128, SiLU MLP 14336, RMSNorm eps 1e-5, RoPE theta 500000, vocabulary 128320).

Layer (pre-norm, no biases in Llama)::

    x = x + o_proj(attn(rope(q_proj(rms(x))), rope(k_proj(rms(x))), v_proj(rms(x))))   # causal, GQA
    x = x + down_proj(silu(gate_proj(rms(x))) * up_proj(rms(x)))

then a final RMSNorm. A text encoder takes an intermediate hidden state: transformers'
``hidden_states`` tuple is ``(embeddings, layer 1 output, ..., layer n-1 output, norm(layer n output))``,
so ``hidden_states[-(k + 1)]`` is the output of layer ``n - k`` *without* the final norm for ``k >= 1``
(HunyuanVideo: ``k = 2``) and the normed last layer for ``k = 0``. :func:`encode` runs only the layers
it needs. Layers are stacked (leading ``layers`` axis) and run in one compiled loop
(``jax.lax.fori_loop``, a scan over layer indices).

Attention is causal, plus the padding mask: keys at or past each row's length are ignored (right padding,
what the tokenizer must produce; paper Table 4 fault 11: a left-padded batch shifts every position).
Padded query rows are computed as transformers computes them (they attend to every valid key), so every
row matches the reference.

Knobs for the later decoder-LLM families (Qwen2.5-VL, Gemma), not used by Llama: biases on q/k/v apart
from the output projection (:attr:`LlamaConfig.qkv_bias`, :attr:`LlamaConfig.o_bias`), RMSNorm scales
stored as an offset from one (:attr:`LlamaConfig.norm_offset`), the MLP activation, and Qwen2-VL's multimodal
RoPE (:attr:`LlamaConfig.mrope_section`: ``(3, B, L)`` positions, one row per frequency section).

Precision: float32 residual stream, RMSNorm statistics and RoPE rotation; matmul inputs are cast to the
weight dtype (float32 or bfloat16) and accumulate in float32. :func:`encode` traces under
``jax.default_matmul_precision("highest")`` so that float32 matmuls are not run as TF32.
"""

from __future__ import annotations

import contextlib
import math
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
from vidax.core.layers import linear
from vidax.core.params import ParamSpec, SpecTree, linear_spec

ACTIVATIONS = {
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
    "gelu": partial(jax.nn.gelu, approximate=False),
    "gelu_pytorch_tanh": partial(jax.nn.gelu, approximate=True),
    "gelu_new": partial(jax.nn.gelu, approximate=True),
    "relu": jax.nn.relu,
}

#: RoPE types :func:`rope_inv_freq` computes (transformers ``ROPE_INIT_FUNCTIONS`` names).
ROPE_TYPES = ("default", "linear", "llama3")


@dataclass(frozen=True)
class LlamaConfig:
    """Architecture of a Llama decoder (transformers ``LlamaConfig`` keys; its defaults, so that a partial
    ``text_config`` such as LLaVA's resolves as transformers resolves it).

    Attributes:
      num_key_value_heads: key/value heads (grouped-query attention); None: ``num_attention_heads``.
      head_dim: None: ``hidden_size // num_attention_heads``.
      rope_theta, rope_type: RoPE base and scaling type (:data:`ROPE_TYPES`); ``rope_factor``,
        ``rope_low_freq_factor``, ``rope_high_freq_factor``, ``rope_original_max_position_embeddings`` are
        the scaling's parameters (``linear``: factor; ``llama3``: all four).
      qkv_bias: q/k/v projections have biases (Llama: ``attention_bias``; Qwen2: always).
      o_bias: the output projection has a bias (Llama: ``attention_bias``; Qwen2: never).
      norm_offset: RMSNorm multiplies by ``norm_offset + weight`` (Llama 0; Gemma 1).
      pad_token_id: informational.
      mrope_section: multimodal RoPE (Qwen2-VL, Qwen2.5-VL): the ``head_dim / 2`` frequencies split into
        sections of these sizes, section ``i`` rotated by position row ``i % 3`` of ``(3, B, L)`` position ids
        (temporal, height, width); None: one position row (Llama). Text alone (three equal rows) is plain RoPE.
    """

    vocab_size: int = 32000
    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    hidden_act: str = "silu"
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_type: str = "default"
    rope_factor: float = 1.0
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_original_max_position_embeddings: int | None = None
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    norm_offset: float = 0.0
    pad_token_id: int | None = None
    mrope_section: tuple[int, ...] | None = None

    def __post_init__(self):
        if self.num_key_value_heads is None:
            object.__setattr__(self, "num_key_value_heads", self.num_attention_heads)
        if self.head_dim is None:
            if self.hidden_size % self.num_attention_heads:
                raise ValueError(f"LlamaConfig: hidden_size {self.hidden_size} is not divisible by "
                                 f"{self.num_attention_heads} attention heads (and no head_dim is given)")
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"LlamaConfig: {self.num_attention_heads} attention heads are not a multiple of "
                             f"{self.num_key_value_heads} key/value heads")
        if self.head_dim % 2:
            raise ValueError(f"LlamaConfig: head_dim {self.head_dim} must be even for rotary embeddings")
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"LlamaConfig: hidden_act {self.hidden_act!r} is not supported; "
                             f"known: {sorted(ACTIVATIONS)}")
        if self.rope_type not in ROPE_TYPES:
            raise ValueError(f"LlamaConfig: RoPE type {self.rope_type!r} is not supported (supported: "
                             f"{', '.join(ROPE_TYPES)}); dynamic, yarn and longrope scalings are not implemented")
        if self.rope_type == "llama3" and self.rope_high_freq_factor == self.rope_low_freq_factor:
            raise ValueError("LlamaConfig: llama3 RoPE needs high_freq_factor != low_freq_factor")
        if self.mrope_section is not None:
            section = tuple(self.mrope_section)
            object.__setattr__(self, "mrope_section", section)  # hashable (the config is a static jit argument)
            if (not section or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in section)
                    or sum(section) != self.head_dim // 2):
                raise ValueError(f"LlamaConfig: mrope_section {list(section)} must be positive integers summing to "
                                 f"head_dim / 2 = {self.head_dim // 2}")

    @property
    def num_key_value_groups(self) -> int:
        """Query heads per key/value head."""
        return self.num_attention_heads // self.num_key_value_heads

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> LlamaConfig:
        """Build from a transformers ``config.json`` dict: a ``llama`` config (``LlamaModel``,
        ``LlamaForCausalLM``) or a ``llava`` config (its ``text_config``). Unknown keys are ignored.

        RoPE settings are read from transformers 5's ``rope_parameters`` or from the older ``rope_theta`` +
        ``rope_scaling`` (``{"rope_type"|"type": ..., "factor": ...}``).

        Raises:
          ValueError: another model type, a value of the wrong type, or an unsupported setting (RoPE type,
            partial rotary factor, activation), each named.
        """
        if config.get("model_type") == "llava" or "text_config" in config:
            config = config.get("text_config") or {}
        if config.get("model_type") not in (None, "llama"):
            raise ValueError(f"LlamaConfig: model_type {config.get('model_type')!r} is not a Llama decoder")
        rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
        if not isinstance(rope, dict):
            raise ValueError(f"text encoder config: rope_parameters / rope_scaling should be an object, got {rope!r}")
        if "full_attention" in rope:  # per-layer-type RoPE (transformers 5 nesting): Llama has one type
            rope = rope["full_attention"]
        if float(rope.get("partial_rotary_factor", config.get("partial_rotary_factor") or 1.0)) != 1.0:
            raise ValueError("LlamaConfig: a partial_rotary_factor other than 1 is not supported")
        kw = config_values(cls, config, "text encoder config")
        rope_values = {"rope_theta": rope.get("rope_theta", config.get("rope_theta", 10000.0)),
                       "rope_type": rope.get("rope_type", rope.get("type", "default"))}
        for ours, theirs in (("rope_factor", "factor"), ("rope_low_freq_factor", "low_freq_factor"),
                             ("rope_high_freq_factor", "high_freq_factor"),
                             ("rope_original_max_position_embeddings", "original_max_position_embeddings")):
            if rope.get(theirs) is not None:
                rope_values[ours] = rope[theirs]
        kw.update(config_values(cls, rope_values, "text encoder config (RoPE)"))
        if kw.get("rope_type") == "llama3" and kw.get("rope_original_max_position_embeddings") is None:
            kw["rope_original_max_position_embeddings"] = kw.get("max_position_embeddings", 2048)
        bias = config.get("attention_bias", False)
        if not isinstance(bias, bool):
            raise ValueError(f"text encoder config: attention_bias={bias!r} should be true or false")
        kw.setdefault("qkv_bias", bias)
        kw.setdefault("o_bias", bias)
        return cls(**kw)


# --------------------------------------------------------------------------- parameters


def llama_specs(cfg: LlamaConfig) -> SpecTree:
    """The spec tree of a Llama decoder (names as transformers' modules). Layer parameters lead with ``layers``.

    Float32 pins: the RMSNorm scales. Logical axes: ``vocab``, ``embed``, ``heads`` (query heads),
    ``kv_heads`` (key/value heads), ``mlp``.
    """
    d, n, f = cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size
    q, kv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim

    def norm(stacked=True):
        lead, axes = ((n,), ("layers",)) if stacked else ((), ())
        return {"scale": ParamSpec((*lead, d), fp32=True, axes=(*axes, "embed"))}

    return {
        "embed_tokens": {"embedding": ParamSpec((cfg.vocab_size, d), axes=("vocab", "embed"))},
        "layers": {
            "input_layernorm": norm(),
            "self_attn": {
                "q_proj": linear_spec(d, q, ("embed", "heads"), layers=n, bias=cfg.qkv_bias),
                "k_proj": linear_spec(d, kv, ("embed", "kv_heads"), layers=n, bias=cfg.qkv_bias),
                "v_proj": linear_spec(d, kv, ("embed", "kv_heads"), layers=n, bias=cfg.qkv_bias),
                "o_proj": linear_spec(q, d, ("heads", "embed"), layers=n, bias=cfg.o_bias),
            },
            "post_attention_layernorm": norm(),
            "mlp": {
                "gate_proj": linear_spec(d, f, ("embed", "mlp"), layers=n, bias=cfg.mlp_bias),
                "up_proj": linear_spec(d, f, ("embed", "mlp"), layers=n, bias=cfg.mlp_bias),
                "down_proj": linear_spec(f, d, ("mlp", "embed"), layers=n, bias=cfg.mlp_bias),
            },
        },
        "norm": norm(stacked=False),
    }


def llama_rules(cfg: LlamaConfig, key_prefix: str = "", path_prefix: str = "") -> list[Rule]:
    """The rules of a transformers ``LlamaModel`` state dict whose names start with ``key_prefix``
    (``""``: ``LlamaModel``; ``"model."``: ``LlamaForCausalLM``; ``"language_model.model."``: LLaVA), filling
    the parameter paths under ``path_prefix`` (e.g. ``"language_model/"``)."""
    layer, p = f"{key_prefix}layers.{{i}}", path_prefix
    return rules(
        Rule(f"{key_prefix}embed_tokens.weight", f"{p}embed_tokens/embedding"),
        norm_rules(f"{layer}.input_layernorm", f"{p}layers/input_layernorm", bias=False),
        *[linear_rules(f"{layer}.self_attn.{n}", f"{p}layers/self_attn/{n}", bias=cfg.qkv_bias)
          for n in ("q_proj", "k_proj", "v_proj")],
        linear_rules(f"{layer}.self_attn.o_proj", f"{p}layers/self_attn/o_proj", bias=cfg.o_bias),
        norm_rules(f"{layer}.post_attention_layernorm", f"{p}layers/post_attention_layernorm", bias=False),
        *[linear_rules(f"{layer}.mlp.{n}", f"{p}layers/mlp/{n}", bias=cfg.mlp_bias)
          for n in ("gate_proj", "up_proj", "down_proj")],
        norm_rules(f"{key_prefix}norm", f"{p}norm", bias=False),
    )


#: Key prefixes of the Llama decoder in the layouts transformers writes, most specific first:
#: LLaVA as transformers >= 4.52 keeps it, LLaVA as transformers 4.4x (and 5's ``save_pretrained``) writes it,
#: ``LlamaForCausalLM``, ``LlamaModel``.
LLAMA_KEY_PREFIXES = ("model.language_model.", "language_model.model.", "model.", "")

#: Tensors of those layouts that a text encoder never uses: the LM head (logits are never computed; 1 GB of
#: LLaVA-Llama-3-8B's bf16 weights left unread), older writers' RoPE buffers, and a LLaVA's image side
#: (read by :mod:`vidax.encoders.llava`, not here).
LLAMA_IGNORED = (r"(model\.|language_model\.)?lm_head\.weight\Z", r".*rotary_emb\.inv_freq\Z",
                 r"(model\.)?vision_tower\.", r"(model\.)?multi_modal_projector\.")


def llama_key_prefix(keys: Any) -> str:
    """The :data:`LLAMA_KEY_PREFIXES` entry whose ``embed_tokens.weight`` is among ``keys`` (``""`` if none is)."""
    keys = set(keys)
    return next((p for p in LLAMA_KEY_PREFIXES if f"{p}embed_tokens.weight" in keys), "")


def llama_keymap(cfg: LlamaConfig, keys: Any = None) -> KeyMap:
    """Key map of a transformers Llama folder: ``LlamaModel`` (HunyuanVideo's ``text_encoder/``; names
    ``layers.0.self_attn.q_proj.weight``, ``embed_tokens.weight``, ``norm.weight``), ``LlamaForCausalLM``
    (``model.`` prefix), or the language model of a ``LlavaForConditionalGeneration`` folder.

    The prefix is chosen from ``keys`` (the checkpoint's key list; without it: ``LlamaModel``). The tensors of
    :data:`LLAMA_IGNORED` (``lm_head.weight`` among them) are ignored.
    """
    prefix = llama_key_prefix(keys) if keys is not None else ""
    return KeyMap(llama_rules(cfg, prefix), ignore=list(LLAMA_IGNORED))


def load_llama(folder: str | Path, dtype: Any = np.float32, **load_kwargs) -> tuple[dict, LlamaConfig]:
    """Load a transformers Llama folder (``config.json`` + safetensors, single or sharded with an index), strictly.

    Args:
      folder: e.g. ``<pipeline>/text_encoder``.
      dtype: ``float32`` (default) or ``bfloat16`` weights (norm scales stay float32).
      load_kwargs: passed to :func:`vidax.checkpoint.loader.load_params` (``shardings``, ``place``).

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
        raise CheckpointError(f"{config_path}: file not found (a Llama text encoder folder needs its config.json)")
    cfg = LlamaConfig.from_dict(read_json(config_path))
    reader = CheckpointReader(folder)
    params = load_params(reader, llama_keymap(cfg, reader.keys()), llama_specs(cfg), dtype, source=str(folder),
                         **load_kwargs)
    return params, cfg


# --------------------------------------------------------------------------- rotary embedding


def rope_inv_freq(cfg: LlamaConfig) -> np.ndarray:
    """The float32 ``(head_dim / 2,)`` inverse frequencies, as transformers computes them in float32
    (``compute_default_rope_parameters``; ``_compute_linear_scaling_rope_parameters``;
    ``_compute_llama3_parameters``: long wavelengths divided by ``factor``, short ones kept, a smooth blend
    between)."""
    dim = cfg.head_dim
    exponent = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    inv_freq = (np.float32(1.0) / np.power(np.float32(cfg.rope_theta), exponent)).astype(np.float32)
    if cfg.rope_type == "linear":
        return (inv_freq / np.float32(cfg.rope_factor)).astype(np.float32)
    if cfg.rope_type == "llama3":
        factor, low, high = cfg.rope_factor, cfg.rope_low_freq_factor, cfg.rope_high_freq_factor
        old = cfg.rope_original_max_position_embeddings
        low_wavelen, high_wavelen = old / low, old / high
        wavelen = (2 * math.pi / inv_freq).astype(np.float32)
        scaled = np.where(wavelen > low_wavelen, inv_freq / np.float32(factor), inv_freq).astype(np.float32)
        smooth = ((old / wavelen - low) / (high - low)).astype(np.float32)
        smoothed = ((1 - smooth) * scaled / np.float32(factor) + smooth * scaled).astype(np.float32)
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        return np.where(medium, smoothed, scaled).astype(np.float32)
    return inv_freq


def rope_cos_sin(cfg: LlamaConfig, position_ids: jax.Array) -> tuple[jax.Array, jax.Array]:
    """float32 ``(cos, sin)`` of shape ``(B, L, head_dim)`` for integer ``position_ids`` ``(B, L)``
    (``LlamaRotaryEmbedding``: the half-size frequencies repeated, ``cat((freqs, freqs))``), or ``(3, B, L)``
    with :attr:`LlamaConfig.mrope_section` (transformers ``Qwen2_5_VLRotaryEmbedding``: frequency section ``i``
    taken from position row ``i % 3``, then repeated as above)."""
    freqs = position_ids.astype(jnp.float32)[..., None] * jnp.asarray(rope_inv_freq(cfg))
    if position_ids.ndim == 3:
        bounds = np.cumsum((0, *cfg.mrope_section))
        freqs = jnp.concatenate([freqs[i % 3, ..., a:b] for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))],
                                axis=-1)
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(emb), jnp.sin(emb)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """``x * cos + rotate_half(x) * sin`` over the last axis (halves, not interleaved pairs), in float32.

    Args:
      x: ``(B, L, H, D)``. cos, sin: ``(B, L, D)``.
    """
    x = x.astype(jnp.float32)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, :, None, :] + rotated * sin[:, :, None, :]


# --------------------------------------------------------------------------- forward


def rms_norm(x: jax.Array, p: dict, eps: float, offset: float = 0.0, out_dtype=jnp.float32) -> jax.Array:
    """``LlamaRMSNorm`` in float32: ``x / sqrt(mean(x^2) + eps) * (offset + scale)``."""
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(jnp.square(xf), axis=-1, keepdims=True) + eps)
    return (y * (offset + p["scale"].astype(jnp.float32))).astype(out_dtype)


def causal_bias(length: int) -> jax.Array:
    """``(1, 1, L, L)`` float32 score bias: 0 where key <= query, -inf above the diagonal (built in the graph,
    not embedded as an ``L x L`` constant)."""
    index = jnp.arange(length)
    return jnp.where(index[None, :] <= index[:, None], 0.0, -jnp.inf).astype(jnp.float32)[None, None]


def decoder_layer(p: dict, x: jax.Array, cos: jax.Array, sin: jax.Array, lengths: jax.Array, bias: jax.Array,
                  cfg: LlamaConfig, impl) -> jax.Array:
    """One ``LlamaDecoderLayer``.

    Args:
      p: one layer's parameters (no ``layers`` axis).
      x: float32 residual stream ``(B, L, hidden_size)``.
      cos, sin: ``(B, L, head_dim)`` from :func:`rope_cos_sin`.
      lengths: ``(B,)`` int32 valid keys per row (right padding).
      bias: the causal bias of :func:`causal_bias`.

    Returns:
      float32 ``(B, L, hidden_size)``.
    """
    attn, mlp = p["self_attn"], p["mlp"]
    dtype = attn["q_proj"]["kernel"].dtype
    b, s, _ = x.shape
    hd, eps, off = cfg.head_dim, cfg.rms_norm_eps, cfg.norm_offset
    with jax.named_scope("self_attn"):
        h = rms_norm(x, p["input_layernorm"], eps, off, out_dtype=dtype)
        q = linear(attn["q_proj"], h, jnp.float32).reshape(b, s, cfg.num_attention_heads, hd)
        k = linear(attn["k_proj"], h, jnp.float32).reshape(b, s, cfg.num_key_value_heads, hd)
        v = linear(attn["v_proj"], h).reshape(b, s, cfg.num_key_value_heads, hd)
        q, k = apply_rope(q, cos, sin).astype(dtype), apply_rope(k, cos, sin).astype(dtype)
        if cfg.num_key_value_groups > 1:  # query head j reads key/value head j // groups (transformers repeat_kv)
            k = jnp.repeat(k, cfg.num_key_value_groups, axis=2)
            v = jnp.repeat(v, cfg.num_key_value_groups, axis=2)
        o = attention(q, k, v, implementation=impl, kv_lengths=lengths, bias=bias)
        x = x + linear(attn["o_proj"], o.reshape(b, s, cfg.num_attention_heads * hd), jnp.float32)
    with jax.named_scope("mlp"):
        h = rms_norm(x, p["post_attention_layernorm"], eps, off, out_dtype=dtype)
        gate = ACTIVATIONS[cfg.hidden_act](linear(mlp["gate_proj"], h, jnp.float32))
        g = gate * linear(mlp["up_proj"], h, jnp.float32)
        x = x + linear(mlp["down_proj"], g, jnp.float32)
    return x


@partial(jax.jit, static_argnames=("cfg",))
def _embed(params, input_ids, *, cfg: LlamaConfig):
    return jnp.take(params["embed_tokens"]["embedding"], input_ids, axis=0).astype(jnp.float32)


@partial(jax.jit, static_argnames=("cfg", "num_layers", "final_norm", "attention_impl", "all_states"))
def _decode(params, x, lengths, position_ids, *, cfg: LlamaConfig, num_layers: int, final_norm: bool, attention_impl,
            all_states: bool = False):
    impl = AttentionImpl(attention_impl)
    cos, sin = rope_cos_sin(cfg, position_ids)
    bias = causal_bias(x.shape[1])

    def body(i, x):
        # Index the full stack per layer rather than scanning a slice of it: a slice of the first
        # n - skip layers would be a copy of nearly all the weights (15 GB for the 8B in bf16).
        p = jax.tree.map(lambda a: jax.lax.dynamic_index_in_dim(a, i, keepdims=False), params["layers"])
        return decoder_layer(p, x, cos, sin, lengths, bias, cfg, impl)

    def step(x, i):
        y = body(i, x)
        return y, y

    x = x.astype(jnp.float32)
    if all_states:  # every layer's output, stacked: transformers' hidden_states tuple
        with jax.named_scope("layers"):
            last, outs = jax.lax.scan(step, x, jnp.arange(num_layers))
        last = rms_norm(last, params["norm"], cfg.rms_norm_eps, cfg.norm_offset)
        return jnp.concatenate([x[None], outs[:-1], last[None]], axis=0)
    with jax.named_scope("layers"):
        x = jax.lax.fori_loop(0, num_layers, body, x)
    if final_norm:
        x = rms_norm(x, params["norm"], cfg.rms_norm_eps, cfg.norm_offset)
    return x


def _precision(precision: str | None):
    return contextlib.nullcontext() if precision is None else jax.default_matmul_precision(precision)


def right_padding_lengths(attention_mask: Any, shape: tuple[int, int]) -> np.ndarray:
    """``(B,)`` int32 valid lengths of a right-padded ``(B, L)`` mask (None: every position valid).

    Raises:
      ValueError: a mask of another shape, or one that is not ones then zeros in every row.
    """
    if attention_mask is None:
        return np.full((shape[0],), shape[1], np.int32)
    m = np.asarray(attention_mask) != 0
    if m.shape != tuple(shape):
        raise ValueError(f"attention_mask must have the shape of the input ids {tuple(shape)}; got {m.shape}")
    lengths = m.sum(axis=1)
    if not np.array_equal(m, np.arange(m.shape[1])[None, :] < lengths[:, None]):
        raise ValueError("attention_mask must be right padding (ones, then zeros), as the tokenizer produces with "
                         "padding_side='right'")
    return lengths.astype(np.int32)


def embed_tokens(params: dict, cfg: LlamaConfig, input_ids: Any) -> jax.Array:
    """The token embeddings ``embed_tokens(input_ids)`` as float32 ``(B, L, hidden_size)``.

    Raises:
      ValueError: an id outside ``[0, vocab_size)`` (the reference raises an index error).
    """
    ids = np.asarray(input_ids)
    if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"input_ids must be integer (batch, length); got {ids.dtype} {ids.shape}")
    if ids.size and (ids.min() < 0 or ids.max() >= cfg.vocab_size):
        raise ValueError(f"input_ids hold ids outside the vocabulary [0, {cfg.vocab_size}): min {ids.min()}, "
                         f"max {ids.max()} (is the tokenizer the text encoder's?)")
    return _embed(params, jnp.asarray(ids, jnp.int32), cfg=cfg)


def encode(
    params: dict,
    cfg: LlamaConfig,
    input_ids: Any = None,
    attention_mask: Any = None,
    *,
    inputs_embeds: jax.Array | None = None,
    position_ids: Any = None,
    num_hidden_layers_to_skip: int = 0,
    attention_impl: AttentionImpl | str = AttentionImpl.XLA,
    precision: str | None = "highest",
    all_hidden_states: bool = False,
) -> jax.Array:
    """``LlamaModel(..., output_hidden_states=True).hidden_states[-(num_hidden_layers_to_skip + 1)]``, or with
    ``all_hidden_states`` the whole ``hidden_states`` tuple stacked.

    Only the first ``num_hidden_layers - num_hidden_layers_to_skip`` layers run; the final norm is applied
    only when nothing is skipped (transformers puts the normed state last in ``hidden_states``).
    Compiles once per (batch, length) shape, config, layer count and weight dtype.

    Args:
      params: parameter tree of :func:`llama_specs` (float32 or bfloat16 weights).
      cfg: the architecture.
      input_ids: ``(B, L)`` token ids; exactly one of ``input_ids`` and ``inputs_embeds``.
      attention_mask: ``(B, L)`` 1 for tokens, 0 for right padding; None: all tokens.
      inputs_embeds: ``(B, L, hidden_size)`` embeddings instead of ids (LLaVA's merged image tokens).
      position_ids: ``(B, L)`` integer RoPE positions; None: ``0 .. L-1`` in every row (``LlamaModel``'s default).
        With :attr:`LlamaConfig.mrope_section` also ``(3, B, L)`` (multimodal RoPE; ``(B, L)`` means three equal rows).
      num_hidden_layers_to_skip: ``k`` in ``hidden_states[-(k + 1)]``, ``0 .. num_hidden_layers``.
      attention_impl: see :mod:`vidax.core.attention` (the causal mask is a score bias: ``cpu_flash`` and
        ``splash`` fall back to ``chunked``).
      precision: matmul precision traced under; None leaves the ambient setting.
      all_hidden_states: return every hidden state (``num_hidden_layers_to_skip`` must be 0): the embeddings, each
        layer's output, the last one normed.

    Returns:
      float32 ``(B, L, hidden_size)``; padded rows as transformers computes them (not zero). With
      ``all_hidden_states``: float32 ``(num_hidden_layers + 1, B, L, hidden_size)``.

    Raises:
      ValueError: both or neither of ``input_ids`` / ``inputs_embeds``, a mask that is not right padding,
        ids outside the vocabulary, position ids of the wrong shape, or ``num_hidden_layers_to_skip`` out of range.
    """
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("encode: give exactly one of input_ids and inputs_embeds")
    n = cfg.num_hidden_layers
    if not (isinstance(num_hidden_layers_to_skip, (int, np.integer)) and 0 <= num_hidden_layers_to_skip <= n):
        raise ValueError(f"num_hidden_layers_to_skip must be an integer in [0, {n}], got {num_hidden_layers_to_skip!r}")
    if all_hidden_states and num_hidden_layers_to_skip:
        raise ValueError("encode: all_hidden_states returns every hidden state; num_hidden_layers_to_skip must be 0")
    with _precision(precision):
        x = embed_tokens(params, cfg, input_ids) if inputs_embeds is None else jnp.asarray(inputs_embeds)
        if x.ndim != 3 or x.shape[-1] != cfg.hidden_size:
            raise ValueError(f"inputs_embeds must be (B, L, {cfg.hidden_size}); got {tuple(x.shape)}")
        b, s = x.shape[:2]
        lengths = right_padding_lengths(attention_mask, (b, s))
        if position_ids is None:
            position_ids = np.broadcast_to(np.arange(s, dtype=np.int32), (b, s))
        position_ids = jnp.asarray(position_ids, jnp.int32)
        if position_ids.shape != (b, s) and not (cfg.mrope_section and position_ids.shape == (3, b, s)):
            shapes = f"({b}, {s})" + (f" or (3, {b}, {s})" if cfg.mrope_section else "")
            raise ValueError(f"position_ids must be {shapes}; got {tuple(position_ids.shape)}")
        return _decode(params, x, jnp.asarray(lengths), position_ids, cfg=cfg,
                       num_layers=n - int(num_hidden_layers_to_skip), final_norm=num_hidden_layers_to_skip == 0,
                       attention_impl=AttentionImpl(attention_impl).value, all_states=bool(all_hidden_states))
