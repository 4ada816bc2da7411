"""The Cosmos3 omnimodal Mixture-of-Transformers backbone, as pure functions over a parameter dict.

Follows diffusers 0.42.1 ``models/transformers/transformer_cosmos3.py`` (``Cosmos3OmniTransformer``,
``Cosmos3VLTextMoTDecoderLayer``, ``Cosmos3PackedMoTAttention`` with ``Cosmos3AttnProcessor``,
``Cosmos3VLTextRotaryEmbedding``, ``Cosmos3NemotronRMSNorm``, ``Cosmos3VLTextMLP``) for video generation (the sound
and action heads are not run).

Architecture: one decoder stack whose every layer holds two sets of weights, the understanding ("und") stream's for
the text tokens and the generation ("gen") stream's (``*_moe_gen``, ``add_*``) for the video latent tokens::

    und:  x = x + to_out(causal_attn(q_und, k_und, v_und));            x = x + mlp(post_ln(x))
    gen:  y = y + to_add_out(attn(q_gen, [k_und_for_gen; k_gen], [v_und; v_gen]));  y = y + mlp_moe_gen(post_ln(y))

(pre-norms ``input_layernorm`` / ``input_layernorm_moe_gen``; per-head q/k RMS norms; the interleaved 3D mRoPE on
every query and key; grouped-query heads). The und stream never reads the gen tokens, so every layer's ``k_und_for_gen``
(the und keys after ``k_norm_und_for_gen`` where configured, roped) and ``v_und`` are functions of the prompt alone:
:func:`und_prefill` computes them once per prompt (:class:`UndCache`) and :func:`gen_forward` reuses them at every
denoising step; :func:`forward` is the two in sequence (the reference's per-step recompute).

The gen stream's keys are ordered ``[k_gen (N); k_und (L)]`` (the reference concatenates ``[k_und; k_gen]``: the order
of keys does not change a softmax), so the prompt's right padding becomes one valid key length ``N + lengths`` per
row, which every attention backend takes (:mod:`vidax.core.attention`).

Inputs: the noisy latents ``(B, C, T, H, W)`` are zero-padded to a multiple of ``latent_patch_size`` in ``H, W`` and
patchified ``"cthpwq->thwpqc"`` into ``(B, T h w, p p C)`` tokens, projected by ``proj_in``; the timestep embedding
(``Timesteps(256, flip_sin_to_cos=True, shift 0)`` then ``time_embedder``, float32, of ``timestep * timestep_scale``)
is added to the tokens of the noisy latent frames only. Output: ``norm_moe_gen``, ``proj_out``, unpatchify, cropped,
zeros on the conditioning frames (the reference writes its noisy frames into zeros).

Edge (``hidden_act="relu2"``): ``Cosmos3NemotronRMSNorm`` (float32 ``weight * x_hat`` cast back) for every norm, the
MLP ``down(relu(up x)^2)`` without a gate, no text q/k norms (``qk_norm_for_text=False``) and a separate
``k_norm_und_for_gen`` on the und keys the gen stream reads (``use_und_k_norm_for_gen``). Nano: diffusers
``RMSNorm`` (float32 ``x_hat``, cast to the weight's dtype, times the weight), SiLU-gated MLP, text q/k norms.

Precision: the residual streams stay float32 (paper Table 4 fault 1; the reference keeps them in the model dtype);
matmul inputs are cast to the weight dtype with float32 accumulation; norms, RoPE tables (positions times float32
inverse frequencies, as the reference computes them with autocast off) and the rotation compute in float32; the
time embedder is a float32 leaf (``_keep_in_fp32_modules``). The und cache is kept in the compute dtype.

Layout: latents ``(B, C, T, H, W)`` as the reference's pipeline keeps them; tokens ``(B, S, hidden)``; position ids
``(B, 3, S)`` float32 (temporal, height, width; the pipeline's ``get_3d_mrope_ids_*`` values, fps-modulated ones are
fractional).

Stages: the layers are stacked (leading ``layers`` axis) and run under ``lax.scan`` (one compiled layer program per
stream); :func:`gen_prologue`, :func:`run_gen_layers`, :func:`gen_epilogue` are the hooks of the host block loop and
offloading (:mod:`vidax.models.cosmos3.block_loop`).
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jax.sharding import Mesh, NamedSharding

from vidax.core.attention import AttentionImpl, attention, is_kernel
from vidax.core.embeddings import timestep_embedding
from vidax.core.layers import linear
from vidax.core.parallel import ShardContext, padded_length, sequence_mode
from vidax.core.params import ParamSpec, SpecTree, linear_spec
from vidax.core.sharding import ShardingRules, axis_size
from vidax.models.cosmos3.config import Cosmos3TransformerConfig
from vidax.models.cosmos3.sharding import COSMOS3_RULES, check_parallel, io_specs

#: The stacked layers' parameter subtree.
STACK = "layers"
#: Width of the sinusoidal timestep projection (``Timesteps(num_channels=256)``).
TIME_PROJ_DIM = 256

# --------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------


def _norm_spec(dim: int, layers: int | None) -> dict:
    lead, lead_axes = ((layers,), ("layers",)) if layers else ((), ())
    return {"scale": ParamSpec((*lead, dim), axes=(*lead_axes, None))}


def _mlp_specs(cfg: Cosmos3TransformerConfig, layers: int) -> dict:
    d, f = cfg.hidden_size, cfg.intermediate_size
    out = {"up_proj": linear_spec(d, f, ("embed", "mlp"), layers=layers, bias=False),
           "down_proj": linear_spec(f, d, ("mlp", "embed"), layers=layers, bias=False)}
    if not cfg.nemotron:
        out["gate_proj"] = linear_spec(d, f, ("embed", "mlp"), layers=layers, bias=False)
    return out


def transformer_specs(cfg: Cosmos3TransformerConfig) -> SpecTree:
    """The spec tree of a Cosmos3 transformer (video generation): every parameter's shape, fp32 pin and logical axes.

    Paths are diffusers' module names with norm weights read as ``scale`` and linear weights as ``kernel`` ``(in,
    out)``; the layers are stacked under ``layers``, the attention's weights under ``layers/self_attn``. Biases exist
    on q/k/v/out with ``attention_bias``, on ``proj_in`` / ``proj_out`` and the time embedder always. The time
    embedder is pinned to float32. ``lm_head`` and the sound/action heads are not declared (unused for video).
    """
    d, hd, L = cfg.hidden_size, cfg.head_dim, cfg.num_hidden_layers
    qw, kw = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
    bias = cfg.attention_bias

    def col(n_out: int, axis: str) -> dict:
        return linear_spec(d, n_out, ("embed", axis), layers=L, bias=bias)

    attn = {
        "to_q": col(qw, "heads"), "to_k": col(kw, "kv_heads"), "to_v": col(kw, "kv_heads"),
        "to_out": linear_spec(qw, d, ("heads", "embed"), layers=L, bias=bias),
        "add_q_proj": col(qw, "heads"), "add_k_proj": col(kw, "kv_heads"), "add_v_proj": col(kw, "kv_heads"),
        "to_add_out": linear_spec(qw, d, ("heads", "embed"), layers=L, bias=bias),
        "norm_added_q": _norm_spec(hd, L), "norm_added_k": _norm_spec(hd, L),
    }
    if cfg.qk_norm_for_text:
        attn["norm_q"] = _norm_spec(hd, L)
        attn["norm_k"] = _norm_spec(hd, L)
    if cfg.has_k_norm_und_for_gen:
        attn["k_norm_und_for_gen"] = _norm_spec(hd, L)
    layer = {
        "input_layernorm": _norm_spec(d, L), "input_layernorm_moe_gen": _norm_spec(d, L),
        "post_attention_layernorm": _norm_spec(d, L), "post_attention_layernorm_moe_gen": _norm_spec(d, L),
        "self_attn": attn, "mlp": _mlp_specs(cfg, L), "mlp_moe_gen": _mlp_specs(cfg, L),
    }
    return {
        "embed_tokens": {"embedding": ParamSpec((cfg.vocab_size, d), axes=("vocab", "embed"))},
        STACK: layer,
        "norm": _norm_spec(d, None),
        "norm_moe_gen": _norm_spec(d, None),
        "proj_in": linear_spec(cfg.patch_latent_dim, d, (None, "embed")),
        "proj_out": linear_spec(d, cfg.patch_latent_dim, ("embed", None)),
        "time_embedder": {"linear_1": linear_spec(TIME_PROJ_DIM, d, (None, "embed"), fp32=True),
                          "linear_2": linear_spec(d, d, ("embed", None), fp32=True)},
    }


def und_specs(cfg: Cosmos3TransformerConfig) -> SpecTree:
    """The parameters :func:`und_prefill` reads (``embed_tokens`` and the layers' und weights)."""
    full = transformer_specs(cfg)
    layer = {k: v for k, v in full[STACK].items() if k in UND_LAYER_KEYS}
    layer["self_attn"] = {k: v for k, v in full[STACK]["self_attn"].items() if k in UND_ATTN_KEYS}
    return {"embed_tokens": full["embed_tokens"], STACK: layer}


#: The und stream's weights in a layer and in its attention (the rest is the gen stream's).
UND_LAYER_KEYS = ("input_layernorm", "post_attention_layernorm", "mlp", "self_attn")
UND_ATTN_KEYS = ("to_q", "to_k", "to_v", "to_out", "norm_q", "norm_k", "k_norm_und_for_gen")
GEN_LAYER_KEYS = ("input_layernorm_moe_gen", "post_attention_layernorm_moe_gen", "mlp_moe_gen", "self_attn")
GEN_ATTN_KEYS = ("add_q_proj", "add_k_proj", "add_v_proj", "to_add_out", "norm_added_q", "norm_added_k")


def stream_layers(layers: dict, stream: str) -> dict:
    """One stream's part of (stacked or single) layer parameters: ``stream`` is ``"und"`` or ``"gen"``."""
    layer_keys, attn_keys = (UND_LAYER_KEYS, UND_ATTN_KEYS) if stream == "und" else (GEN_LAYER_KEYS, GEN_ATTN_KEYS)
    out = {k: v for k, v in layers.items() if k in layer_keys and k != "self_attn"}
    out["self_attn"] = {k: v for k, v in layers["self_attn"].items() if k in attn_keys}
    return out


# --------------------------------------------------------------------------------------------
# Shapes
# --------------------------------------------------------------------------------------------


def token_grid(cfg: Cosmos3TransformerConfig, latent_shape: tuple[int, ...]) -> tuple[int, int, int]:
    """``(T, ceil(H / p), ceil(W / p))``: the token grid of latents ``(B, C, T, H, W)`` (``H, W`` zero-padded to the
    patch size, as ``Cosmos3OmniTransformer._patchify_and_pack_latents``).

    Raises:
      ValueError: not 5-D, a channel count other than ``latent_channel``, or an empty axis.
    """
    if len(latent_shape) != 5:
        raise ValueError(f"latents must be (B, C, T, H, W), got shape {tuple(latent_shape)}")
    b, c, t, h, w = latent_shape
    if c != cfg.latent_channel:
        raise ValueError(f"latents have {c} channels, the transformer takes latent_channel={cfg.latent_channel}")
    if min(b, t, h, w) < 1:
        raise ValueError(f"latents shape {tuple(latent_shape)} has an empty axis")
    p = cfg.latent_patch_size
    return t, -(-h // p), -(-w // p)


def num_tokens(cfg: Cosmos3TransformerConfig, latent_shape: tuple[int, ...]) -> int:
    """The vision tokens ``N = T * ceil(H / p) * ceil(W / p)`` of latents of ``latent_shape``."""
    t, h, w = token_grid(cfg, latent_shape)
    return t * h * w


def patchify(x: jax.Array, p: int) -> jax.Array:
    """``(B, C, T, H, W) -> (B, T h w, p p C)``: ``H, W`` zero-padded to multiples of ``p``, tokens in ``(t, h, w)``
    raster order, features in ``(p_h, p_w, c)`` order (the reference's ``einsum("cthpwq->thwpqc")``)."""
    b, c, t, h, w = x.shape
    hp, wp = -(-h // p), -(-w // p)
    if (hp * p, wp * p) != (h, w):
        x = jnp.pad(x, ((0, 0), (0, 0), (0, 0), (0, hp * p - h), (0, wp * p - w)))
    x = x.reshape(b, c, t, hp, p, wp, p).transpose(0, 2, 3, 5, 4, 6, 1)
    return x.reshape(b, t * hp * wp, p * p * c)


def unpatchify(x: jax.Array, latent_shape: tuple[int, ...], p: int) -> jax.Array:
    """Inverse of :func:`patchify`: ``(B, T h w, p p C) -> (B, C, T, H, W)``, the padding cropped
    (``_unpatchify_and_unpack_latents``'s ``einsum("thwpqc->cthpwq")``)."""
    b, c, t, h, w = latent_shape
    hp, wp = -(-h // p), -(-w // p)
    x = x.reshape(b, t, hp, wp, p, p, c).transpose(0, 6, 1, 2, 4, 3, 5)
    return x.reshape(b, c, t, hp * p, wp * p)[:, :, :, :h, :w]


# --------------------------------------------------------------------------------------------
# Rotary embedding (interleaved 3D mRoPE)
# --------------------------------------------------------------------------------------------


def rope_inv_freq(cfg: Cosmos3TransformerConfig) -> np.ndarray:
    """float32 ``(head_dim / 2,)``: ``1 / rope_theta ** (arange(0, head_dim, 2) / head_dim)`` in float32, as
    ``Cosmos3VLTextRotaryEmbedding`` builds it."""
    exponent = np.arange(0, cfg.head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(cfg.head_dim)
    return (np.float32(1.0) / np.power(np.float32(cfg.rope_theta), exponent)).astype(np.float32)


def rope_axes(cfg: Cosmos3TransformerConfig) -> np.ndarray:
    """int ``(head_dim / 2,)``: which position row (0 temporal, 1 height, 2 width) drives each rotary frequency.

    ``apply_interleaved_mrope``: frequency ``j`` takes the height position where ``j = 1 (mod 3)`` and ``j < 3 *
    section[1]``, the width position where ``j = 2 (mod 3)`` and ``j < 3 * section[2]``, the temporal one elsewhere
    ([THW THW ... TT]; Python slices, so a bound past the end is cut as the reference's is).
    """
    half = cfg.head_dim // 2
    axes = np.zeros(half, np.int32)
    section = cfg.mrope_section
    for dim, offset in ((1, 1), (2, 2)):
        axes[offset:min(section[dim] * 3, half):3] = dim
    return axes


def rope_tables(cfg: Cosmos3TransformerConfig, position_ids: jax.Array) -> tuple[jax.Array, jax.Array]:
    """float32 ``(cos, sin)``, each ``(B, S, head_dim)``, of position ids ``(B, 3, S)`` (any real dtype; float32
    products ``position * inv_freq`` as the reference's autocast-free matmul, then ``cat((freqs, freqs))``)."""
    pos = jnp.asarray(position_ids, jnp.float32)
    rows = jnp.take(pos, jnp.asarray(rope_axes(cfg)), axis=1)  # (B, head_dim / 2, S)
    freqs = jnp.swapaxes(rows, 1, 2) * jnp.asarray(rope_inv_freq(cfg))
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(emb), jnp.sin(emb)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """``x * cos + rotate_half(x) * sin`` in float32; ``x (B, S, H, D)``, ``cos, sin (B, S, D)``."""
    x = x.astype(jnp.float32)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, :, None, :] + rotated * sin[:, :, None, :]


# --------------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------------


def rms_norm(p: dict, x: jax.Array, cfg: Cosmos3TransformerConfig) -> jax.Array:
    """The backbone's RMSNorm over the last axis, float32 out.

    Nemotron (Edge, ``Cosmos3NemotronRMSNorm``): ``weight.float() * x_hat``. Qwen (Nano, diffusers ``RMSNorm``):
    ``x_hat`` cast to the weight's dtype times the weight (in that dtype). ``x_hat = x / sqrt(mean(x^2) + eps)`` in
    float32 in both.
    """
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(jnp.square(xf), axis=-1, keepdims=True) + cfg.rms_norm_eps)
    w = p["scale"]
    if cfg.nemotron or w.dtype == jnp.float32:
        return y * w.astype(jnp.float32)
    return (y.astype(w.dtype) * w).astype(jnp.float32)


def mlp(p: dict, x: jax.Array, cfg: Cosmos3TransformerConfig, par: ShardContext) -> jax.Array:
    """``Cosmos3VLTextMLP``: ``down(silu(gate x) * up x)`` (Nano) or ``down(relu(up x)^2)`` (Edge); column-parallel
    gate/up, row-parallel down; float32 out."""
    up = linear(p["up_proj"], x, jnp.float32)
    if cfg.nemotron:
        h = jnp.square(jax.nn.relu(up))
    else:
        h = jax.nn.silu(linear(p["gate_proj"], x, jnp.float32)) * up
    return par.row_linear(p["down_proj"], h, jnp.float32)


def _heads(p: dict, x: jax.Array, hd: int) -> jax.Array:
    b, s, _ = x.shape
    return linear(p, x, jnp.float32).reshape(b, s, -1, hd)


def _repeat_kv(x: jax.Array, groups: int) -> jax.Array:
    """Key/value heads to query heads: query head ``j`` reads key/value head ``j // groups`` (``enable_gqa``)."""
    return x if groups == 1 else jnp.repeat(x, groups, axis=2)


def causal_bias(length: int) -> jax.Array:
    """``(1, 1, L, L)`` float32 score bias: 0 where key <= query, -inf above the diagonal."""
    index = jnp.arange(length)
    return jnp.where(index[None, :] <= index[:, None], 0.0, -jnp.inf).astype(jnp.float32)[None, None]


def und_layer(p: dict, x: jax.Array, cos: jax.Array, sin: jax.Array, lengths: jax.Array, bias: jax.Array,
              cfg: Cosmos3TransformerConfig, impl: AttentionImpl,
              par: ShardContext = ShardContext()) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    """One layer of the und stream (``Cosmos3VLTextMoTDecoderLayer`` on the text tokens).

    Args:
      p: the layer's und parameters (:func:`stream_layers`); on a mesh, this tensor shard's heads.
      x: float32 stream ``(B, L, hidden)``; cos, sin: ``(B, L, head_dim)``; lengths: int32 ``(B,)`` valid tokens;
      bias: :func:`causal_bias`.

    Returns:
      ``(x, (k_und_for_gen, v_und))``: the next stream and the gen path's und keys (``k_norm_und_for_gen`` where
      configured, else the text-normed keys; roped) and values, ``(B, L, kv_heads, head_dim)`` in the weights' dtype.
    """
    a = p["self_attn"]
    hd, dtype = cfg.head_dim, a["to_q"]["kernel"].dtype
    h = rms_norm(p["input_layernorm"], x, cfg)
    q, k, v = _heads(a["to_q"], h, hd), _heads(a["to_k"], h, hd), _heads(a["to_v"], h, hd)
    if cfg.qk_norm_for_text:
        q, k = rms_norm(a["norm_q"], q, cfg), rms_norm(a["norm_k"], k, cfg)
    k_gen = rms_norm(a["k_norm_und_for_gen"], k, cfg) if cfg.has_k_norm_und_for_gen else k
    q, k = apply_rope(q, cos, sin).astype(dtype), apply_rope(k, cos, sin).astype(dtype)
    k_gen = apply_rope(k_gen, cos, sin).astype(dtype)
    v = v.astype(dtype)
    groups = cfg.num_key_value_groups
    o = attention(q, _repeat_kv(k, groups), _repeat_kv(v, groups), implementation=impl, kv_lengths=lengths,
                  bias=bias)
    b, s = x.shape[:2]
    x = x + par.row_linear(a["to_out"], o.reshape(b, s, -1), jnp.float32)
    x = x + mlp(p["mlp"], rms_norm(p["post_attention_layernorm"], x, cfg), cfg, par)
    return x, (k_gen, v)


def gen_layer(p: dict, x: jax.Array, k_und: jax.Array, v_und: jax.Array, cos: jax.Array, sin: jax.Array,
              kv_lengths: jax.Array, cfg: Cosmos3TransformerConfig, impl: AttentionImpl,
              par: ShardContext = ShardContext(), num_valid: int | None = None) -> jax.Array:
    """One layer of the gen stream: full attention of the gen queries over ``[k_gen; k_und]`` / ``[v_gen; v_und]``.

    Args:
      p: the layer's gen parameters (:func:`stream_layers`); on a mesh, this tensor shard's heads.
      x: float32 stream ``(B, N_local, hidden)``; k_und, v_und: this layer's :class:`UndCache` rows ``(B, L,
        kv_heads, head_dim)``; cos, sin: ``(B, N_local, head_dim)``; kv_lengths: int32 ``(B,)`` ``N + lengths``.
      num_valid: the real gen tokens ``N`` when the stream is padded (sequence parallelism): the padded gen keys are
        moved after the und keys, past every valid length.

    Returns:
      float32 ``(B, N_local, hidden)``.
    """
    a = p["self_attn"]
    hd, dtype = cfg.head_dim, a["add_q_proj"]["kernel"].dtype
    h = rms_norm(p["input_layernorm_moe_gen"], x, cfg)
    q = rms_norm(a["norm_added_q"], _heads(a["add_q_proj"], h, hd), cfg)
    k = rms_norm(a["norm_added_k"], _heads(a["add_k_proj"], h, hd), cfg)
    v = _heads(a["add_v_proj"], h, hd).astype(dtype)
    q, k = apply_rope(q, cos, sin).astype(dtype), apply_rope(k, cos, sin).astype(dtype)
    groups = cfg.num_key_value_groups
    fold = groups > 1 and _can_fold(k.shape[2], par)
    if not fold:
        k, v = _repeat_kv(k, groups), _repeat_kv(v, groups)
        k_und, v_und = _repeat_kv(k_und, groups), _repeat_kv(v_und, groups)
    q, k, v = par.to_attention(q, k, v)
    k_und, v_und = _local_heads(k_und.astype(dtype), par), _local_heads(v_und.astype(dtype), par)
    n = k.shape[1] if num_valid is None else num_valid
    keys = jnp.concatenate([k[:, :n], k_und, k[:, n:]], axis=1)
    values = jnp.concatenate([v[:, :n], v_und, v[:, n:]], axis=1)
    if fold:
        o = unfold_groups(attention(fold_groups(q, groups), keys, values, implementation=impl,
                                    kv_lengths=kv_lengths), groups)
    else:
        o = attention(q, keys, values, implementation=impl, kv_lengths=kv_lengths)
    o = par.from_attention(o)
    b, s = x.shape[:2]
    x = x + par.row_linear(a["to_add_out"], o.reshape(b, s, -1), jnp.float32)
    return x + mlp(p["mlp_moe_gen"], rms_norm(p["post_attention_layernorm_moe_gen"], x, cfg), cfg, par)


def fold_groups(q: jax.Array, groups: int) -> jax.Array:
    """Grouped-query attention without repeating keys and values: the ``groups`` query heads that read one key/value
    head become ``groups`` times as many queries of that head, ``(B, S, KV groups, D) -> (B, S groups, KV, D)``
    (query head ``j groups + g`` at position ``s`` is query ``s groups + g`` of head ``j``). Attention rows are
    independent, so this is exact; :func:`unfold_groups` is its inverse on the output."""
    b, s, h, d = q.shape
    return q.reshape(b, s, h // groups, groups, d).swapaxes(2, 3).reshape(b, s * groups, h // groups, d)


def unfold_groups(o: jax.Array, groups: int) -> jax.Array:
    """Inverse of :func:`fold_groups`: ``(B, S groups, KV, D) -> (B, S, KV groups, D)``."""
    b, sg, kv, d = o.shape
    return o.reshape(b, sg // groups, groups, kv, d).swapaxes(2, 3).reshape(b, sg // groups, kv * groups, d)


def _can_fold(kv_heads: int, par: ShardContext) -> bool:
    """Whether the gen attention can keep its key/value heads unrepeated (:func:`fold_groups`): on one sequence
    shard, with keys and values all-gathered, or where Ulysses can split the key/value heads over sp too (a
    sequence shard then holds whole groups: its query heads are exactly those of its key/value heads)."""
    if par.sequence is None or not par.ulysses:
        return True
    return kv_heads % jax.lax.axis_size(par.sequence) == 0


def _local_heads(x: jax.Array, par: ShardContext) -> jax.Array:
    """The und cache's heads this shard attends with: all of its tensor shard's heads, or (Ulysses) this sequence
    shard's slice of them (the heads ``seq_to_heads`` gave it: query heads, or key/value heads when folded)."""
    if par.sequence is None or not par.ulysses:
        return x
    sp = jax.lax.axis_size(par.sequence)
    width = x.shape[2] // sp
    return jax.lax.dynamic_slice_in_dim(x, jax.lax.axis_index(par.sequence) * width, width, axis=2)


# --------------------------------------------------------------------------------------------
# Time embedding
# --------------------------------------------------------------------------------------------


def time_embedding(params: dict, timestep: jax.Array, cfg: Cosmos3TransformerConfig) -> jax.Array:
    """float32 ``(B, hidden)``: ``time_embedder(Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0)(
    timestep * timestep_scale))`` (``linear_2(silu(linear_1(.)))``, float32 leaves), ``timestep`` float32 ``(B,)`` in
    the scheduler's 0..1000 units."""
    p = params["time_embedder"]
    t = jnp.asarray(timestep, jnp.float32) * np.float32(cfg.timestep_scale)
    proj = timestep_embedding(t, TIME_PROJ_DIM, flip_sin_to_cos=True, downscale_freq_shift=0.0)
    return linear(p["linear_2"], jax.nn.silu(linear(p["linear_1"], proj, jnp.float32)), jnp.float32)


# --------------------------------------------------------------------------------------------
# The und stream: prefill
# --------------------------------------------------------------------------------------------


class UndCache(NamedTuple):
    """The gen path's und keys and values of every layer, for one batch of prompts.

    Attributes:
      k: ``(num_layers, B, L, num_key_value_heads, head_dim)``: ``k_und_for_gen`` (normed, roped).
      v: ``(num_layers, B, L, num_key_value_heads, head_dim)``: ``v_und``.

    Rows at or past a prompt's length are padding (finite garbage), masked by ``lengths`` in :func:`gen_forward`.
    """

    k: jax.Array
    v: jax.Array


def _check_und_inputs(cfg, input_ids, position_ids, lengths) -> None:
    problems = []
    if len(input_ids.shape) != 2 or min(input_ids.shape) < 1:
        problems.append(f"input_ids shape {tuple(input_ids.shape)} (expected (B, L))")
    else:
        b, s = input_ids.shape
        if tuple(position_ids.shape) != (b, 3, s):
            problems.append(f"position_ids shape {tuple(position_ids.shape)} (expected {(b, 3, s)})")
        if tuple(lengths.shape) != (b,):
            problems.append(f"lengths shape {tuple(lengths.shape)} (expected ({b},))")
    if problems:
        raise ValueError("Cosmos3 und_prefill inputs: " + "; ".join(problems))


def und_embed(params: dict, cfg: Cosmos3TransformerConfig, input_ids: jax.Array, position_ids: jax.Array):
    """The und stream's input: float32 token embeddings ``(B, L, hidden)`` and the RoPE tables."""
    ids = jnp.clip(jnp.asarray(input_ids, jnp.int32), 0, cfg.vocab_size - 1)
    x = jnp.take(params["embed_tokens"]["embedding"], ids, axis=0).astype(jnp.float32)
    return x, rope_tables(cfg, position_ids)


def run_und_layers(layers: dict, x: jax.Array, cos: jax.Array, sin: jax.Array, lengths: jax.Array, *,
                   cfg: Cosmos3TransformerConfig, attention_impl: AttentionImpl | str = AttentionImpl.XLA,
                   mesh: Mesh | None = None, rules: ShardingRules = COSMOS3_RULES) -> tuple[jax.Array, UndCache]:
    """The und stream's layers (all, or a chunk: stacked parameters, any leading length) under ``lax.scan``.

    On a mesh the scan runs inside one ``shard_map``: prompts over ``data``, heads and MLP width over ``tensor``
    (replicated over ``sequence``: the prompt is short and computed once).

    Args:
      layers: stacked layer parameters (the und weights are read; the gen weights may be present).
      x: float32 ``(B, L, hidden)``; cos, sin: ``(B, L, head_dim)``; lengths: int32 ``(B,)``.

    Returns:
      ``(x, UndCache)`` of these layers; on a mesh the cache is sharded ``(layers, data, None, tensor, None)``.
    """
    impl = AttentionImpl(attention_impl)
    layers = stream_layers(layers, "und")

    def scan(layers, x, cos, sin, lengths, par):
        bias = causal_bias(x.shape[1])

        def body(x, p):
            return und_layer(p, x, cos, sin, lengths, bias, cfg, impl, par)

        x, (k, v) = jax.lax.scan(body, x, layers)
        return x, UndCache(k, v)

    if mesh is None:
        return scan(layers, x, cos, sin, lengths, ShardContext())
    check_parallel(cfg, mesh, rules)
    io = io_specs(rules)
    par = ShardContext(tensor=rules.mesh_axes("heads"))
    specs = rules.param_specs(stream_layers(transformer_specs(cfg)[STACK], "und"))
    fn = jax.shard_map(partial(scan, par=par), mesh=mesh,
                       in_specs=(specs, io["und"], io["und_table"], io["und_table"], io["lengths"]),
                       out_specs=(io["und"], UndCache(io["cache"], io["cache"])), check_vma=not is_kernel(impl))
    return fn(layers, x, cos, sin, lengths)


@partial(jax.jit, static_argnames=("cfg", "attention_impl", "mesh", "rules"))
def und_prefill(params: dict, cfg: Cosmos3TransformerConfig, input_ids: jax.Array, position_ids: jax.Array,
                lengths: jax.Array, *, attention_impl: AttentionImpl | str = AttentionImpl.XLA,
                mesh: Mesh | None = None, rules: ShardingRules = COSMOS3_RULES) -> UndCache:
    """Run the und stream over the prompts once and keep what the gen stream reads of it.

    Args:
      params: parameters of :func:`transformer_specs` (only ``embed_tokens`` and the und weights are read).
      cfg: static configuration.
      input_ids: int32 ``(B, L)`` token ids, right-padded (ids outside ``[0, vocab_size)`` are clipped inside the
        program, where they cannot raise; the tokenizer gives none, and the pipeline checks them).
      position_ids: float32 ``(B, 3, L)`` mRoPE positions (the pipeline's ``get_3d_mrope_ids_text_tokens``:
        ``arange(L)`` on all three rows).
      lengths: int32 ``(B,)`` valid tokens per prompt (1..L).
      attention_impl: :class:`vidax.core.attention.AttentionImpl` (the causal mask is a score bias).
      mesh, rules: static; ``mesh`` None runs on one device (:mod:`vidax.models.cosmos3.sharding`).

    Returns:
      :class:`UndCache` in the weights' compute dtype (on a mesh: key/value heads over ``tensor``, prompts over
      ``data``).

    Raises:
      ValueError: inputs of inconsistent shapes; a mesh the model cannot use.
    """
    _check_und_inputs(cfg, input_ids, position_ids, lengths)
    check_parallel(cfg, mesh, rules, input_ids.shape[0])
    x, (cos, sin) = und_embed(params, cfg, input_ids, position_ids)
    lengths = jnp.asarray(lengths, jnp.int32)
    with jax.named_scope("und_layers"):
        _, cache = run_und_layers(params[STACK], x, cos, sin, lengths, cfg=cfg, attention_impl=attention_impl,
                                  mesh=mesh, rules=rules)
    return cache


# --------------------------------------------------------------------------------------------
# The gen stream
# --------------------------------------------------------------------------------------------


class GenInputs(NamedTuple):
    """What every gen layer reads besides the stream and its cache rows (:func:`gen_prologue` builds it).

    Attributes:
      cos, sin: float32 ``(B, N_pad, head_dim)`` RoPE tables of the vision tokens.
      kv_lengths: int32 ``(B,)``: ``N + lengths`` valid keys of ``[k_gen; k_und]``.
    """

    cos: jax.Array
    sin: jax.Array
    kv_lengths: jax.Array


def check_gen_inputs(cfg: Cosmos3TransformerConfig, cache_shape, lengths_shape, latent_shape, timestep_shape,
                     position_shape, noisy_shape) -> None:
    """Check :func:`gen_forward`'s input shapes (before anything is traced).

    Raises:
      ValueError: every mismatch at once, named with the expected shape.
    """
    t, h, w = token_grid(cfg, latent_shape)
    b, n = latent_shape[0], t * h * w
    problems = []
    kv = (cfg.num_key_value_heads, cfg.head_dim)
    if len(cache_shape) != 5 or cache_shape[0] != cfg.num_hidden_layers or cache_shape[1] != b or tuple(
            cache_shape[3:]) != kv:
        problems.append(f"cache shape {tuple(cache_shape)} (expected ({cfg.num_hidden_layers}, {b}, L, {kv[0]}, "
                        f"{kv[1]}) from und_prefill)")
    if tuple(lengths_shape) != (b,):
        problems.append(f"lengths shape {tuple(lengths_shape)} (expected ({b},))")
    if tuple(timestep_shape) != (b,):
        problems.append(f"timestep shape {tuple(timestep_shape)} (expected ({b},))")
    if tuple(position_shape) != (b, 3, n):
        problems.append(f"position_ids shape {tuple(position_shape)} (expected {(b, 3, n)}: T * ceil(H/p) * "
                        "ceil(W/p) vision tokens)")
    if tuple(noisy_shape) != (b, t):
        problems.append(f"noisy shape {tuple(noisy_shape)} (expected {(b, t)})")
    if problems:
        raise ValueError("Cosmos3 gen_forward inputs: " + "; ".join(problems))


def gen_prologue(params: dict, cfg: Cosmos3TransformerConfig, lengths: jax.Array, latents: jax.Array,
                 timestep: jax.Array, position_ids: jax.Array, noisy: jax.Array,
                 n_pad: int | None = None) -> tuple[jax.Array, GenInputs]:
    """:func:`gen_forward` up to the layers: the float32 stream ``(B, N_pad, hidden)`` (``proj_in`` of the patches,
    plus the time embedding on the noisy frames' tokens; zero-padded to ``n_pad``) and the :class:`GenInputs`."""
    p = cfg.latent_patch_size
    t, hp, wp = token_grid(cfg, latents.shape)
    n = t * hp * wp
    n_pad = n if n_pad is None else n_pad
    with jax.named_scope("proj_in"):
        x = linear(params["proj_in"], patchify(latents, p), jnp.float32)
    with jax.named_scope("time_embedder"):
        temb = time_embedding(params, timestep, cfg)
    token_noisy = jnp.repeat(jnp.asarray(noisy, jnp.float32) > 0.5, hp * wp, axis=1)  # (B, N)
    x = x + jnp.where(token_noisy[..., None], temb[:, None, :], 0.0)
    cos, sin = rope_tables(cfg, position_ids)
    if n_pad != n:
        pad = ((0, 0), (0, n_pad - n), (0, 0))
        x, cos, sin = jnp.pad(x, pad), jnp.pad(cos, pad), jnp.pad(sin, pad)
    kv_lengths = n + jnp.asarray(lengths, jnp.int32)
    return x, GenInputs(cos, sin, kv_lengths)


def run_gen_layers(layers: dict, cache: UndCache, x: jax.Array, inputs: GenInputs, *,
                   cfg: Cosmos3TransformerConfig, attention_impl: AttentionImpl | str = AttentionImpl.XLA,
                   num_valid: int | None = None, mesh: Mesh | None = None,
                   rules: ShardingRules = COSMOS3_RULES) -> jax.Array:
    """The gen stream's layers (all, or a chunk, with the matching cache layers) under ``lax.scan``.

    On a mesh the scan runs inside one ``shard_map`` over every mesh axis: batch over ``data``, the vision tokens
    over ``sequence`` (Ulysses, or key/value all-gather where sp does not divide the heads per tensor shard), heads,
    key/value heads (and the und cache's) and MLP width over ``tensor``.

    Args:
      layers: stacked layer parameters (the gen weights are read); cache: the matching :class:`UndCache` layers.
      x: float32 ``(B, N_pad, hidden)`` (from :func:`gen_prologue`); inputs: :class:`GenInputs`.
      num_valid: the real vision tokens ``N`` when ``N_pad > N``.

    Returns:
      float32 ``(B, N_pad, hidden)``; on a mesh sharded ``(data, sequence, None)``.
    """
    impl = AttentionImpl(attention_impl)
    layers = stream_layers(layers, "gen")

    def scan(layers, cache, x, inputs, par):
        def body(x, pkv):
            p, k_und, v_und = pkv
            return gen_layer(p, x, k_und, v_und, inputs.cos, inputs.sin, inputs.kv_lengths, cfg, impl, par,
                             num_valid), None

        return jax.lax.scan(body, x, (layers, cache.k, cache.v))[0]

    if mesh is None:
        return scan(layers, cache, x, inputs, ShardContext())
    check_parallel(cfg, mesh, rules)
    tp = axis_size(mesh, rules.mesh_axes("heads"))
    sp = axis_size(mesh, rules.mesh_axes("tokens"))
    ulysses = sequence_mode(cfg.num_attention_heads // tp, sp) == "ulysses"
    par = ShardContext(tensor=rules.mesh_axes("heads"), sequence=rules.mesh_axes("tokens"), ulysses=ulysses)
    io = io_specs(rules)
    specs = rules.param_specs(stream_layers(transformer_specs(cfg)[STACK], "gen"))
    in_specs = (specs, UndCache(io["cache"], io["cache"]), io["stream"],
                GenInputs(io["table"], io["table"], io["lengths"]))
    fn = jax.shard_map(partial(scan, par=par), mesh=mesh, in_specs=in_specs, out_specs=io["stream"],
                       check_vma=not is_kernel(impl))
    return fn(layers, cache, x, inputs)


def gen_epilogue(params: dict, cfg: Cosmos3TransformerConfig, x: jax.Array, latent_shape: tuple[int, ...],
                 noisy: jax.Array) -> jax.Array:
    """:func:`gen_forward` after the layers: ``norm_moe_gen``, ``proj_out``, unpatchify, zeros on the conditioning
    frames; float32 ``(B, C, T, H, W)``."""
    n = num_tokens(cfg, latent_shape)
    x = rms_norm(params["norm_moe_gen"], x[:, :n], cfg)
    out = unpatchify(linear(params["proj_out"], x, jnp.float32), latent_shape, cfg.latent_patch_size)
    keep = (jnp.asarray(noisy, jnp.float32) > 0.5)[:, None, :, None, None]
    return jnp.where(keep, out, 0.0)


@partial(jax.jit, static_argnames=("cfg", "attention_impl", "mesh", "rules"))
def gen_forward(params: dict, cfg: Cosmos3TransformerConfig, cache: UndCache, lengths: jax.Array,
                latents: jax.Array, timestep: jax.Array, position_ids: jax.Array, noisy: jax.Array, *,
                attention_impl: AttentionImpl | str = AttentionImpl.XLA, mesh: Mesh | None = None,
                rules: ShardingRules = COSMOS3_RULES) -> jax.Array:
    """Predict the flow velocity of the vision latents, reading the prompts' und cache
    (``Cosmos3OmniTransformer.forward``'s vision output for the pipeline's packing: one text segment then one
    vision segment per sample).

    Args:
      params: parameters of :func:`transformer_specs` (the und weights are not read).
      cfg: static configuration.
      cache: :class:`UndCache` of :func:`und_prefill` for these prompts.
      lengths: int32 ``(B,)`` the prompts' valid tokens (as given to :func:`und_prefill`).
      latents: ``(B, latent_channel, T, H, W)`` noisy latents (the conditioning frames clean), compute dtype.
      timestep: float32 ``(B,)`` the scheduler's timestep (0..1000 units; ``timestep_scale`` applied here).
      position_ids: float32 ``(B, 3, N)`` mRoPE positions of the ``N = T * ceil(H/p) * ceil(W/p)`` vision tokens
        (the pipeline's ``get_3d_mrope_ids_vae_tokens``).
      noisy: float32 ``(B, T)``: 1 on noisy latent frames, 0 on conditioning frames.
      attention_impl: :class:`vidax.core.attention.AttentionImpl`.
      mesh, rules: static; ``mesh`` None runs on one device (:mod:`vidax.models.cosmos3.sharding`).

    Returns:
      float32 ``(B, latent_channel, T, H, W)``, zeros on the conditioning frames.

    Raises:
      ValueError: inputs of inconsistent shapes (:func:`check_gen_inputs`); a mesh the model cannot use.
    """
    check_gen_inputs(cfg, cache.k.shape, jnp.shape(lengths), latents.shape, jnp.shape(timestep),
                     jnp.shape(position_ids), jnp.shape(noisy))
    check_parallel(cfg, mesh, rules, latents.shape[0])
    x, inputs, n = gen_prologue_sharded(params, cfg, lengths, latents, timestep, position_ids, noisy, mesh, rules)
    with jax.named_scope("gen_layers"):
        x = run_gen_layers(params[STACK], cache, x, inputs, cfg=cfg, attention_impl=attention_impl, num_valid=n,
                           mesh=mesh, rules=rules)
    return gen_epilogue(params, cfg, x, latents.shape, noisy)


def gen_prologue_sharded(params: dict, cfg: Cosmos3TransformerConfig, lengths, latents, timestep, position_ids,
                         noisy, mesh: Mesh | None = None,
                         rules: ShardingRules = COSMOS3_RULES) -> tuple[jax.Array, GenInputs, int]:
    """:func:`gen_prologue` with the stream padded to a multiple of sp and constrained to the layers' shardings:
    ``(x, inputs, N)``."""
    n = num_tokens(cfg, latents.shape)
    n_pad = padded_length(n, axis_size(mesh, rules.mesh_axes("tokens")))
    x, inputs = gen_prologue(params, cfg, lengths, latents, timestep, position_ids, noisy, n_pad)
    if mesh is not None:
        io = io_specs(rules)

        def put(a, spec):
            return jax.lax.with_sharding_constraint(a, NamedSharding(mesh, spec))

        x = put(x, io["stream"])
        inputs = GenInputs(put(inputs.cos, io["table"]), put(inputs.sin, io["table"]),
                           put(inputs.kv_lengths, io["lengths"]))
    return x, inputs, n


def forward(params: dict, cfg: Cosmos3TransformerConfig, input_ids: jax.Array, text_position_ids: jax.Array,
            lengths: jax.Array, latents: jax.Array, timestep: jax.Array, position_ids: jax.Array, noisy: jax.Array,
            *, attention_impl: AttentionImpl | str = AttentionImpl.XLA, mesh: Mesh | None = None,
            rules: ShardingRules = COSMOS3_RULES) -> jax.Array:
    """The reference's per-step pass: :func:`und_prefill` then :func:`gen_forward` (arguments as theirs; the text
    positions ``(B, 3, L)``, the vision positions ``(B, 3, N)``). Float32 ``(B, C, T, H, W)``."""
    cache = und_prefill(params, cfg, input_ids, text_position_ids, lengths, attention_impl=attention_impl,
                        mesh=mesh, rules=rules)
    return gen_forward(params, cfg, cache, lengths, latents, timestep, position_ids, noisy,
                       attention_impl=attention_impl, mesh=mesh, rules=rules)


__all__ = ["GEN_ATTN_KEYS", "GEN_LAYER_KEYS", "GenInputs", "STACK", "TIME_PROJ_DIM", "UND_ATTN_KEYS", "UND_LAYER_KEYS",
           "UndCache", "apply_rope", "causal_bias", "check_gen_inputs", "fold_groups", "forward", "gen_epilogue",
           "gen_forward", "gen_layer", "gen_prologue", "gen_prologue_sharded", "mlp", "num_tokens", "patchify",
           "rms_norm", "rope_axes", "rope_inv_freq", "rope_tables", "run_gen_layers", "run_und_layers", "stream_layers",
           "time_embedding", "token_grid", "transformer_specs", "und_embed", "und_layer", "und_prefill", "und_specs",
           "unfold_groups", "unpatchify"]
