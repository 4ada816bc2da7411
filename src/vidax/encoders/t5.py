"""The T5 / UMT5 text encoder, as pure functions over a parameter dict.

Follows transformers ``models/umt5/modeling_umt5.py`` (``UMT5EncoderModel``, the
text encoder of the Wan2.1 pipelines, google/umt5-xxl) and
``models/t5/modeling_t5.py`` (``T5EncoderModel``, T5 v1.1 as used by CogVideoX).
The two differ in one place only: UMT5 has a relative position bias table in
*every* self-attention layer, T5 only in block 0, whose bias every layer reuses.

Block (pre-norm, no biases anywhere)::

    h = x + o(attn(rms(x) q, rms(x) k, rms(x) v, bias=rel_bias, scale=1))
    x = h + wo(act(wi_0 rms(h)) * wi_1 rms(h))     # "gated-*"; "relu" etc: wo(act(wi rms(h)))

then a final RMSNorm. T5 attention has no ``1/sqrt(d)`` score scaling and adds
the bucketed relative position bias (bidirectional, log-spaced buckets beyond
``num_buckets // 4``) to the scores. Blocks are stacked and run under
``jax.lax.scan``.

Precision (paper Table 4 fault 2): the residual stream of T5 reaches ~1e5, so
the default is float32 weights and compute. With ``bfloat16`` weights the
residual stream, every norm, the relative-bias tables and the feed-forward
``wo`` (transformers' ``_keep_in_fp32_modules = ["wo"]``) stay float32; matmul
inputs are cast to bf16. :func:`encode` traces under
``jax.default_matmul_precision("highest")`` so that float32 matmuls are not
silently run as TF32 on GPUs.

Padding: the attention mask must be right padding (what the tokenizer
produces); it becomes per-sample key lengths for :func:`vidax.core.attention.attention`.
Padded query rows are computed as transformers computes them (they attend to
the valid keys), so *all* rows of :func:`encode` match the reference;
:func:`encode_prompts` then zeroes them as the Wan pipeline does.
"""

from __future__ import annotations

import contextlib
import json
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
from vidax.core.config_values import config_values
from vidax.core.layers import linear, rms_norm
from vidax.core.params import ParamSpec, SpecTree

# transformers ``ACT2FN`` names used by T5 configs -> JAX functions.
_ACTIVATIONS = {
    "relu": jax.nn.relu,
    "gelu_new": partial(jax.nn.gelu, approximate=True),
    "gelu_pytorch_tanh": partial(jax.nn.gelu, approximate=True),
    "gelu": partial(jax.nn.gelu, approximate=False),
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
}


@dataclass(frozen=True)
class T5Config:
    """Architecture of a T5-family encoder (transformers ``config.json`` keys).

    Defaults are google/umt5-xxl, the Wan2.1 text encoder (4096 wide, 24 layers,
    64 heads of 64, ``d_ff`` 10240, vocabulary 256384).

    Attributes:
      model_type: ``"umt5"`` (relative bias in every layer) or ``"t5"`` (bias of layer 0 shared).
      feed_forward_proj: ``"gated-gelu"`` (UMT5, T5 v1.1; tanh GELU), ``"gated-<act>"`` or
        ``"<act>"`` (original T5: ``"relu"``).
    """

    vocab_size: int = 256384
    d_model: int = 4096
    d_kv: int = 64
    d_ff: int = 10240
    num_layers: int = 24
    num_heads: int = 64
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    feed_forward_proj: str = "gated-gelu"
    layer_norm_epsilon: float = 1e-6
    model_type: str = "umt5"

    def __post_init__(self):
        if self.model_type not in ("umt5", "t5"):
            raise ValueError(f"T5Config: model_type {self.model_type!r} is not supported; expected 'umt5' or 't5'")
        parts = self.feed_forward_proj.split("-")
        if len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated") or self.activation_name not in _ACTIVATIONS:
            raise ValueError(
                f"T5Config: feed_forward_proj {self.feed_forward_proj!r} is not supported; expected 'gated-gelu', "
                f"'gated-<act>' or '<act>' with act in {sorted(_ACTIVATIONS)}"
            )

    @property
    def is_gated(self) -> bool:
        return self.feed_forward_proj.startswith("gated-")

    @property
    def activation_name(self) -> str:
        # transformers: "gated-gelu" means the tanh approximation ("gelu_new"), for backward compatibility.
        if self.feed_forward_proj == "gated-gelu":
            return "gelu_new"
        return self.feed_forward_proj.split("-")[-1]

    @property
    def per_layer_bias(self) -> bool:
        """UMT5: every layer has its own relative attention bias table; T5: layer 0's is shared."""
        return self.model_type == "umt5"

    @property
    def inner_dim(self) -> int:
        return self.num_heads * self.d_kv

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> T5Config:
        """Build from a transformers ``text_encoder/config.json`` dict (unknown keys are ignored).

        Raises:
          ValueError: a decoder config, or an unsupported ``model_type`` / ``feed_forward_proj``.
        """
        if config.get("is_decoder", False):
            raise ValueError("T5Config: this config.json describes a decoder (is_decoder=true); expected an encoder")
        return cls(**config_values(cls, config, "text encoder config"))


# --------------------------------------------------------------------------- parameters


def t5_specs(cfg: T5Config) -> SpecTree:
    """The spec tree of a T5/UMT5 encoder. Block parameters lead with a ``layers`` axis.

    Float32 pins: the RMSNorm scales, the relative attention bias tables and the
    feed-forward ``wo`` (as transformers keeps ``wo`` in fp32 for half-precision loads).
    """
    d, n, inner, ff = cfg.d_model, cfg.num_layers, cfg.inner_dim, cfg.d_ff

    def lin(n_in, n_out, axes, fp32=False):
        return {"kernel": ParamSpec((n, n_in, n_out), fp32=fp32, axes=("layers", *axes))}

    attn = {
        "q": lin(d, inner, ("embed", "heads")),
        "k": lin(d, inner, ("embed", "heads")),
        "v": lin(d, inner, ("embed", "heads")),
        "o": lin(inner, d, ("heads", "embed")),
    }
    bias_shape = (cfg.relative_attention_num_buckets, cfg.num_heads)
    if cfg.per_layer_bias:
        attn["relative_attention_bias"] = {
            "embedding": ParamSpec((n, *bias_shape), fp32=True, axes=("layers", None, "heads"))
        }
    if cfg.is_gated:
        ffn = {"wi_0": lin(d, ff, ("embed", "mlp")), "wi_1": lin(d, ff, ("embed", "mlp"))}
    else:
        ffn = {"wi": lin(d, ff, ("embed", "mlp"))}
    ffn["wo"] = lin(ff, d, ("mlp", "embed"), fp32=True)
    specs: SpecTree = {
        "shared": {"embedding": ParamSpec((cfg.vocab_size, d), axes=("vocab", "embed"))},
        "blocks": {
            "attn_norm": {"scale": ParamSpec((n, d), fp32=True, axes=("layers", "embed"))},
            "attn": attn,
            "ffn_norm": {"scale": ParamSpec((n, d), fp32=True, axes=("layers", "embed"))},
            "ffn": ffn,
        },
        "final_norm": {"scale": ParamSpec((d,), fp32=True, axes=("embed",))},
    }
    if not cfg.per_layer_bias:
        specs["relative_attention_bias"] = {"embedding": ParamSpec(bias_shape, fp32=True, axes=(None, "heads"))}
    return specs


_EMBED_TOKENS = "encoder.embed_tokens.weight"


def t5_keymap(cfg: T5Config, keys: Any = None) -> KeyMap:
    """Key map for a transformers ``UMT5EncoderModel`` / ``T5EncoderModel`` safetensors folder.

    Tied embeddings: the encoder's ``encoder.embed_tokens`` is tied to ``shared``.
    ``save_pretrained`` (transformers 5) writes only ``shared.weight``; older
    writers also store the duplicate ``encoder.embed_tokens.weight``, which is
    then ignored: transformers re-ties it to ``shared.weight`` on load, so
    ``shared.weight`` is what the reference runs with. If ``keys`` (the
    checkpoint's key list) is given and holds only ``encoder.embed_tokens.weight``,
    that key fills the embedding instead.

    Args:
      cfg: the architecture.
      keys: optional iterable of the checkpoint's keys (e.g. a ``CheckpointReader``).
    """
    b = "encoder.block.{i}.layer"
    key_set = set(keys) if keys is not None else set()
    embed_only = _EMBED_TOKENS in key_set and "shared.weight" not in key_set
    if cfg.per_layer_bias:
        bias = Rule(f"{b}.0.SelfAttention.relative_attention_bias.weight", "blocks/attn/relative_attention_bias/embedding")
    else:
        bias = Rule("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", "relative_attention_bias/embedding")
    if cfg.is_gated:
        ffn_in = rules(
            linear_rules(f"{b}.1.DenseReluDense.wi_0", "blocks/ffn/wi_0", bias=False),
            linear_rules(f"{b}.1.DenseReluDense.wi_1", "blocks/ffn/wi_1", bias=False),
        )
    else:
        ffn_in = linear_rules(f"{b}.1.DenseReluDense.wi", "blocks/ffn/wi", bias=False)
    return KeyMap(
        rules(
            Rule(_EMBED_TOKENS if embed_only else "shared.weight", "shared/embedding"),
            linear_rules(f"{b}.0.SelfAttention.q", "blocks/attn/q", bias=False),
            linear_rules(f"{b}.0.SelfAttention.k", "blocks/attn/k", bias=False),
            linear_rules(f"{b}.0.SelfAttention.v", "blocks/attn/v", bias=False),
            linear_rules(f"{b}.0.SelfAttention.o", "blocks/attn/o", bias=False),
            bias,
            norm_rules(f"{b}.0.layer_norm", "blocks/attn_norm", bias=False),
            ffn_in,
            linear_rules(f"{b}.1.DenseReluDense.wo", "blocks/ffn/wo", bias=False),
            norm_rules(f"{b}.1.layer_norm", "blocks/ffn_norm", bias=False),
            norm_rules("encoder.final_layer_norm", "final_norm", bias=False),
        ),
        ignore=[] if embed_only else [r"encoder\.embed_tokens\.weight\Z"],
    )


#: google/umt5-xxl as the Wan repository hard-codes it (``wan/modules/t5.py``, ``umt5_xxl``:
#: ``vocab_size=256384, dim=4096, dim_attn=4096, dim_ffn=10240, num_heads=64, encoder_layers=24,
#: num_buckets=32, shared_pos=False``; ``T5RelativeEmbedding`` ``max_dist=128``; ``T5LayerNorm``
#: ``eps=1e-6``; tanh-GELU gated feed-forward). ``models_t5_umt5-xxl-enc-bf16.pth`` ships no config.
UMT5_XXL = T5Config(
    vocab_size=256384, d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64,
    relative_attention_num_buckets=32, relative_attention_max_distance=128, feed_forward_proj="gated-gelu",
    layer_norm_epsilon=1e-6, model_type="umt5",
)


def t5_keymap_wan_original(cfg: T5Config) -> KeyMap:
    """Key map for the Wan repository's own T5 encoder naming (``models_t5_umt5-xxl-enc-bf16.pth``).

    The Wan release stores the state dict of ``wan/modules/t5.py`` ``T5Encoder``; each name
    and the transformers ``UMT5EncoderModel`` name it corresponds to (same tensor, same shape):

    ===========================================  =========================================================
    Wan ``T5Encoder``                            transformers ``UMT5EncoderModel``
    ===========================================  =========================================================
    ``token_embedding.weight``                   ``shared.weight`` (= ``encoder.embed_tokens.weight``)
    ``blocks.N.norm1.weight``                    ``encoder.block.N.layer.0.layer_norm.weight``
    ``blocks.N.attn.{q,k,v,o}.weight``           ``encoder.block.N.layer.0.SelfAttention.{q,k,v,o}.weight``
    ``blocks.N.pos_embedding.embedding.weight``  ``encoder.block.N.layer.0.SelfAttention.relative_attention_bias.weight``
    ``blocks.N.norm2.weight``                    ``encoder.block.N.layer.1.layer_norm.weight``
    ``blocks.N.ffn.gate.0.weight``               ``encoder.block.N.layer.1.DenseReluDense.wi_0.weight`` (GELU branch)
    ``blocks.N.ffn.fc1.weight``                  ``encoder.block.N.layer.1.DenseReluDense.wi_1.weight`` (linear branch)
    ``blocks.N.ffn.fc2.weight``                  ``encoder.block.N.layer.1.DenseReluDense.wo.weight``
    ``norm.weight``                              ``encoder.final_layer_norm.weight``
    ===========================================  =========================================================

    With ``shared_pos=True`` (T5, not UMT5; ``cfg.model_type == "t5"``) the one bias table is
    the top-level ``pos_embedding.embedding.weight``.

    Args:
      cfg: the architecture (:data:`UMT5_XXL` for the Wan2.1 release, or
        :func:`t5_config_from_wan_original_shapes`).

    Raises:
      ValueError: a non-gated feed-forward (the Wan ``T5FeedForward`` is always gated).
    """
    if not cfg.is_gated:
        raise ValueError(f"t5_keymap_wan_original: the Wan T5 feed-forward is gated; got feed_forward_proj={cfg.feed_forward_proj!r}")
    b = "blocks.{i}"
    if cfg.per_layer_bias:
        bias = Rule(f"{b}.pos_embedding.embedding.weight", "blocks/attn/relative_attention_bias/embedding")
    else:
        bias = Rule("pos_embedding.embedding.weight", "relative_attention_bias/embedding")
    return KeyMap(
        rules(
            Rule("token_embedding.weight", "shared/embedding"),
            linear_rules(f"{b}.attn.q", "blocks/attn/q", bias=False),
            linear_rules(f"{b}.attn.k", "blocks/attn/k", bias=False),
            linear_rules(f"{b}.attn.v", "blocks/attn/v", bias=False),
            linear_rules(f"{b}.attn.o", "blocks/attn/o", bias=False),
            bias,
            norm_rules(f"{b}.norm1", "blocks/attn_norm", bias=False),
            linear_rules(f"{b}.ffn.gate.0", "blocks/ffn/wi_0", bias=False),
            linear_rules(f"{b}.ffn.fc1", "blocks/ffn/wi_1", bias=False),
            linear_rules(f"{b}.ffn.fc2", "blocks/ffn/wo", bias=False),
            norm_rules(f"{b}.norm2", "blocks/ffn_norm", bias=False),
            norm_rules("norm", "final_norm", bias=False),
        )
    )


def t5_config_from_wan_original_shapes(shapes: dict[str, tuple[int, ...]]) -> T5Config:
    """The T5 architecture of a Wan-naming T5 state dict, read from its tensor shapes.

    Every size of the Wan ``T5Encoder`` is visible in its tensors: ``token_embedding``
    ``(vocab, dim)``, ``blocks.0.attn.q`` ``(dim_attn, dim)``, ``blocks.0.ffn.fc1``
    ``(dim_ffn, dim)``, the relative bias table ``(num_buckets, num_heads)`` and the number
    of blocks; the rest is fixed in ``wan/modules/t5.py`` (max distance 128, eps 1e-6,
    tanh-GELU gating). For the released ``models_t5_umt5-xxl-enc-bf16.pth`` this is
    exactly :data:`UMT5_XXL`.

    Args:
      shapes: ``{key: shape}`` of the state dict.

    Raises:
      CheckpointError: a tensor the Wan T5 encoder always has is missing (the message names it).
    """

    def need(key: str) -> tuple[int, ...]:
        if key not in shapes:
            raise CheckpointError(
                f"not a Wan T5 encoder state dict: tensor {key!r} is missing (expected the wan/modules/t5.py "
                "T5Encoder names: token_embedding.weight, blocks.N.attn.q.weight, blocks.N.ffn.fc1.weight, norm.weight)"
            )
        return tuple(shapes[key])

    vocab, dim = need("token_embedding.weight")
    need("norm.weight")
    dim_attn = need("blocks.0.attn.q.weight")[0]
    dim_ffn = need("blocks.0.ffn.fc1.weight")[0]
    per_layer = "blocks.0.pos_embedding.embedding.weight" in shapes
    buckets, heads = need("blocks.0.pos_embedding.embedding.weight" if per_layer else "pos_embedding.embedding.weight")
    layers = 1 + max(int(k.split(".")[1]) for k in shapes if k.startswith("blocks."))
    if dim_attn % heads:
        raise CheckpointError(f"Wan T5 encoder: attention width {dim_attn} is not divisible by {heads} heads")
    return T5Config(
        vocab_size=vocab, d_model=dim, d_kv=dim_attn // heads, d_ff=dim_ffn, num_layers=layers, num_heads=heads,
        relative_attention_num_buckets=buckets, relative_attention_max_distance=128, feed_forward_proj="gated-gelu",
        layer_norm_epsilon=1e-6, model_type="umt5" if per_layer else "t5",
    )


def load_t5_encoder(folder: str | Path, dtype: Any = np.float32, **load_kwargs) -> tuple[dict, T5Config]:
    """Load a transformers text-encoder folder (``config.json`` + safetensors).

    Args:
      folder: e.g. ``<pipeline>/text_encoder``.
      dtype: ``float32`` (default, recommended) or ``bfloat16`` weights.
      load_kwargs: passed to :func:`vidax.checkpoint.loader.load_params` (``shardings``, ``place``).

    Returns:
      ``(params, cfg)``.

    Raises:
      CheckpointError: ``config.json`` missing or unreadable, or the weights do not match it.
    """
    from vidax.checkpoint.loader import load_params
    from vidax.checkpoint.safetensors_io import CheckpointReader

    folder = Path(folder)
    config_path = folder / "config.json"
    try:
        cfg = T5Config.from_dict(json.loads(config_path.read_text()))
    except FileNotFoundError as e:
        raise CheckpointError(f"{config_path}: file not found (a text encoder folder needs its config.json)") from e
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{config_path}: not valid JSON ({e})") from e
    reader = CheckpointReader(folder)
    params = load_params(reader, t5_keymap(cfg, reader.keys()), t5_specs(cfg), dtype, source=str(folder), **load_kwargs)
    return params, cfg


# --------------------------------------------------------------------------- relative position bias


def relative_position_bucket(relative_position: np.ndarray, num_buckets: int, max_distance: int) -> np.ndarray:
    """Bidirectional T5 relative position buckets (``memory - query``), exactly as transformers computes them.

    Half the buckets (per direction) are exact offsets below ``num_buckets // 4``;
    the rest are log-spaced up to ``max_distance``. The log is taken in float32
    as in the reference, so the bucket boundaries (e.g. offset 16, 32, 64 for
    32 buckets / distance 128) land on the same side.

    Returns:
      int32 buckets in ``[0, num_buckets)``, same shape as ``relative_position``.
    """
    rel = np.asarray(relative_position, np.int64)
    half = num_buckets // 2
    out = (rel > 0).astype(np.int64) * half
    dist = np.abs(rel)
    max_exact = half // 2
    log_ratio = np.log(np.maximum(dist, 1).astype(np.float32) / np.float32(max_exact)) / np.float32(
        math.log(max_distance / max_exact)
    )
    large = max_exact + (log_ratio * np.float32(half - max_exact)).astype(np.int64)
    large = np.minimum(large, half - 1)
    return (out + np.where(dist < max_exact, dist, large)).astype(np.int32)


def _position_bias(table: jax.Array, q_len: int, k_len: int, cfg: T5Config) -> jax.Array:
    """``(1, H, q_len, k_len)`` float32 bias from a ``(num_buckets, H)`` table."""
    offsets = np.arange(-(q_len - 1), k_len)  # memory - query, host constant of 2L-1 entries
    buckets = jnp.asarray(relative_position_bucket(offsets, cfg.relative_attention_num_buckets, cfg.relative_attention_max_distance))
    index = jnp.arange(k_len)[None, :] - jnp.arange(q_len)[:, None] + (q_len - 1)
    values = jnp.take(table.astype(jnp.float32), buckets[index], axis=0)  # (q, k, H)
    return jnp.transpose(values, (2, 0, 1))[None]


# --------------------------------------------------------------------------- forward


def block(p: dict, x: jax.Array, lengths: jax.Array, bias: jax.Array, cfg: T5Config, impl) -> jax.Array:
    """One encoder block (transformers ``UMT5Block`` / ``T5Block``, encoder side).

    Args:
      p: one block's parameters (no ``layers`` axis).
      x: float32 residual stream ``(B, L, d_model)``.
      lengths: ``(B,)`` int32 valid tokens per sample (right padding).
      bias: float32 ``(1, H, L, L)`` relative position bias.

    Returns:
      float32 ``(B, L, d_model)``.
    """
    dtype = p["attn"]["q"]["kernel"].dtype
    b, s, _ = x.shape
    eps = cfg.layer_norm_epsilon
    with jax.named_scope("self_attention"):
        h = rms_norm(x, p["attn_norm"], eps, out_dtype=dtype)
        q = linear(p["attn"]["q"], h).reshape(b, s, cfg.num_heads, cfg.d_kv)
        k = linear(p["attn"]["k"], h).reshape(b, s, cfg.num_heads, cfg.d_kv)
        v = linear(p["attn"]["v"], h).reshape(b, s, cfg.num_heads, cfg.d_kv)
        o = attention(q, k, v, implementation=impl, kv_lengths=lengths, bias=bias, scale=1.0)
        x = x + linear(p["attn"]["o"], o.reshape(b, s, cfg.inner_dim), jnp.float32)
    with jax.named_scope("ffn"):
        act = _ACTIVATIONS[cfg.activation_name]
        h = rms_norm(x, p["ffn_norm"], eps, out_dtype=dtype)
        if cfg.is_gated:
            g = act(linear(p["ffn"]["wi_0"], h, jnp.float32)) * linear(p["ffn"]["wi_1"], h, jnp.float32)
        else:
            g = act(linear(p["ffn"]["wi"], h, jnp.float32))
        x = x + linear(p["ffn"]["wo"], g, jnp.float32)
    return x


@partial(jax.jit, static_argnames=("cfg", "attention_impl", "pad_to"))
def _encode(params, input_ids, attention_mask, *, cfg: T5Config, attention_impl, pad_to):
    b, s = input_ids.shape
    impl = AttentionImpl(attention_impl)
    valid = attention_mask != 0
    lengths = jnp.sum(valid, axis=-1).astype(jnp.int32)
    with jax.named_scope("embed"):
        x = jnp.take(params["shared"]["embedding"], input_ids, axis=0).astype(jnp.float32)
    shared_bias = None if cfg.per_layer_bias else _position_bias(params["relative_attention_bias"]["embedding"], s, s, cfg)

    def body(x, p):
        bias = _position_bias(p["attn"]["relative_attention_bias"]["embedding"], s, s, cfg) if cfg.per_layer_bias else shared_bias
        return block(p, x, lengths, bias, cfg, impl), None

    with jax.named_scope("blocks"):
        x, _ = jax.lax.scan(body, x, params["blocks"])
    x = rms_norm(x, params["final_norm"], cfg.layer_norm_epsilon, out_dtype=jnp.float32)
    if pad_to is not None:
        # diffusers WanPipeline._get_t5_prompt_embeds: u[:len] then zeros up to max_sequence_length.
        keep = jnp.arange(s)[None, :] < lengths[:, None]
        x = jnp.where(keep[:, :, None], x, 0.0)
        x = jnp.pad(x, ((0, 0), (0, pad_to - s), (0, 0)))
    return x


def _check_right_padding(attention_mask) -> None:
    try:
        m = np.asarray(attention_mask) != 0
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return  # traced inside a caller's jit: cannot check here
    if m.ndim != 2:
        raise ValueError(f"attention_mask must be (batch, length); got shape {m.shape}")
    lengths = m.sum(axis=1)
    if not np.array_equal(m, np.arange(m.shape[1])[None, :] < lengths[:, None]):
        raise ValueError("attention_mask must be right padding (ones, then zeros), as the tokenizer produces")


def _precision(precision: str | None):
    return contextlib.nullcontext() if precision is None else jax.default_matmul_precision(precision)


def encode(
    params: dict,
    cfg: T5Config,
    input_ids: jax.Array,
    attention_mask: jax.Array,
    *,
    attention_impl: AttentionImpl | str = AttentionImpl.XLA,
    precision: str | None = "highest",
) -> jax.Array:
    """The encoder's ``last_hidden_state`` (transformers ``UMT5EncoderModel(...).last_hidden_state``).

    Compiles once per (batch, length) shape, config and weight dtype.

    Args:
      params: parameter tree of :func:`t5_specs` (float32 or bfloat16 weights).
      cfg: the architecture.
      input_ids: ``(B, L)`` int32 token ids.
      attention_mask: ``(B, L)`` 1 for tokens, 0 for right padding.
      attention_impl: see :mod:`vidax.core.attention`.
      precision: matmul precision the call is traced under (``"highest"``: true fp32, no TF32);
        ``None`` leaves the ambient setting.

    Returns:
      float32 ``(B, L, d_model)``; padded rows are as transformers computes them (not zero).

    Raises:
      ValueError: a mask that is not right padding.
    """
    _check_right_padding(attention_mask)
    with _precision(precision):
        return _encode(
            params, jnp.asarray(input_ids, jnp.int32), jnp.asarray(attention_mask, jnp.int32),
            cfg=cfg, attention_impl=AttentionImpl(attention_impl).value, pad_to=None,
        )


def encode_prompts(
    params: dict,
    cfg: T5Config,
    input_ids: jax.Array,
    attention_mask: jax.Array,
    max_sequence_length: int = 512,
    *,
    attention_impl: AttentionImpl | str = AttentionImpl.XLA,
    precision: str | None = "highest",
) -> jax.Array:
    """Prompt embeddings the Wan way (diffusers ``WanPipeline._get_t5_prompt_embeds``).

    Each prompt's states are cut at its true length (``attention_mask.sum()``)
    and zero-filled to ``max_sequence_length``: rows at or past the length are
    exactly ``0.0``.

    Args:
      input_ids, attention_mask: ``(B, L)`` from the tokenizer, ``L <= max_sequence_length``
        (the pipeline tokenizes with ``max_length=max_sequence_length``).
      max_sequence_length: output length (Wan: 512).

    Returns:
      float32 ``(B, max_sequence_length, d_model)``; cast to the transformer's dtype in the pipeline.
    """
    length = np.shape(input_ids)[1]
    if length > max_sequence_length:
        raise ValueError(f"input length {length} exceeds max_sequence_length {max_sequence_length}; tokenize with max_length={max_sequence_length}")
    _check_right_padding(attention_mask)
    with _precision(precision):
        return _encode(
            params, jnp.asarray(input_ids, jnp.int32), jnp.asarray(attention_mask, jnp.int32),
            cfg=cfg, attention_impl=AttentionImpl(attention_impl).value, pad_to=max_sequence_length,
        )
