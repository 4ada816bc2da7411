"""The Wan2.1 diffusion transformer, as pure functions over a parameter dict.

Follows diffusers ``models/transformers/transformer_wan.py``
(``WanTransformer3DModel``, ``WanTransformerBlock``, ``WanAttention``,
``WanTimeTextImageEmbedding``, ``WanRotaryPosEmbed``) and the Wan repository's
``wan/modules/model.py``.

Stages: patch embedding -> condition embedding (timestep, text) -> blocks
(stacked, run under ``lax.scan``: one block compiles once) -> AdaLN head ->
unpatchify. Each stage sits in a ``jax.named_scope``.

Parallelism (``forward(..., mesh=...)``): the block stack runs inside one ``shard_map``
over the ``(data, tensor, sequence)`` mesh: Megatron tensor parallelism over heads and FFN
width, DeepSpeed-Ulysses sequence parallelism over tokens, written once in :func:`block`
against :class:`vidax.core.parallel.ShardContext`; the stages around it are partitioned by
GSPMD. Shardings come from :data:`vidax.models.wan.sharding.WAN_RULES`.

Precision: the residual stream between and inside blocks is float32 whatever
the weight dtype (paper Table 4 fault 1: a bf16 residual over 40 blocks washes
out 720p output); matmul inputs are cast to the weight dtype; norms, the
condition embedder and the AdaLN tables are float32 leaves.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding

from vidax.core.attention import AttentionImpl, attention, resolve_implementation
from vidax.core.embeddings import patch_embed, timestep_embedding, unpatchify
from vidax.core.layers import gelu_tanh, layer_norm, linear
from vidax.core.parallel import ShardContext, pad_axis, padded_length, sequence_mode
from vidax.core.params import ParamSpec, SpecTree
from vidax.core.rope import apply_rope_interleaved, rope_3d_angles, rope_cos_sin
from vidax.core.sharding import ShardingRules, axis_size
from vidax.models.wan.config import WanTransformerConfig
from vidax.models.wan.sharding import WAN_RULES, check_parallel


def _linear_spec(n_in: int, n_out: int, axes: tuple, *, layers: int | None = None, fp32: bool = False) -> dict:
    lead = (layers,) if layers else ()
    lead_axes = ("layers",) if layers else ()
    return {
        "kernel": ParamSpec((*lead, n_in, n_out), fp32=fp32, axes=(*lead_axes, *axes)),
        "bias": ParamSpec((*lead, n_out), fp32=fp32, axes=(*lead_axes, axes[1])),
    }


def transformer_specs(cfg: WanTransformerConfig) -> SpecTree:
    """The spec tree of a Wan2.1 transformer: every parameter's shape, fp32 pin and logical axes.

    Blocks are stacked: each block parameter leads with a ``layers`` axis of size ``num_layers``.
    """
    d, L = cfg.dim, cfg.num_layers
    pt, ph, pw = cfg.patch_size

    def attn() -> dict:
        return {
            "to_q": _linear_spec(d, d, ("embed", "heads"), layers=L),
            "to_k": _linear_spec(d, d, ("embed", "heads"), layers=L),
            "to_v": _linear_spec(d, d, ("embed", "heads"), layers=L),
            "to_out": _linear_spec(d, d, ("heads", "embed"), layers=L),
            "norm_q": {"scale": ParamSpec((L, d), fp32=True, axes=("layers", "heads"))},
            "norm_k": {"scale": ParamSpec((L, d), fp32=True, axes=("layers", "heads"))},
        }

    blocks = {
        "attn1": attn(),
        "attn2": attn(),
        "ffn": {
            "up": _linear_spec(d, cfg.ffn_dim, ("embed", "mlp"), layers=L),
            "down": _linear_spec(cfg.ffn_dim, d, ("mlp", "embed"), layers=L),
        },
        "scale_shift_table": ParamSpec((L, 1, 6, d), fp32=True, axes=("layers", None, None, "embed")),
    }
    if cfg.cross_attn_norm:
        blocks["norm2"] = {
            "scale": ParamSpec((L, d), fp32=True, axes=("layers", "embed")),
            "bias": ParamSpec((L, d), fp32=True, axes=("layers", "embed")),
        }
    return {
        "patch_embedding": {
            "kernel": ParamSpec((pt, ph, pw, cfg.in_channels, d), axes=(None, None, None, None, "embed")),
            "bias": ParamSpec((d,), axes=("embed",)),
        },
        "condition_embedder": {
            "time_embedder": {
                "linear_1": _linear_spec(cfg.freq_dim, d, (None, "embed"), fp32=True),
                "linear_2": _linear_spec(d, d, ("embed", "embed2"), fp32=True),
            },
            "time_proj": _linear_spec(d, 6 * d, ("embed", None), fp32=True),
            "text_embedder": {
                "linear_1": _linear_spec(cfg.text_dim, d, (None, "embed"), fp32=True),
                "linear_2": _linear_spec(d, d, ("embed", "embed2"), fp32=True),
            },
        },
        "blocks": blocks,
        "proj_out": _linear_spec(d, cfg.out_channels * pt * ph * pw, ("embed", None)),
        "scale_shift_table": ParamSpec((1, 2, d), fp32=True, axes=(None, None, "embed")),
    }


def rope_tables(cfg: WanTransformerConfig, latent_shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """3D RoPE ``cos, sin`` for a latent of shape ``(B, C, T, H, W)``, built on the host in float64.

    Returns:
      two float32 arrays ``(T/p_t * H/p_h * W/p_w, attention_head_dim / 2)``.

    Raises:
      ValueError: a grid axis longer than ``rope_max_seq_len``.
    """
    grid = _grid(cfg, latent_shape)
    if max(grid) > cfg.rope_max_seq_len:
        raise ValueError(f"token grid {grid} exceeds rope_max_seq_len={cfg.rope_max_seq_len}")
    return rope_cos_sin(rope_3d_angles(cfg.attention_head_dim, grid))


def _grid(cfg: WanTransformerConfig, latent_shape: tuple[int, ...]) -> tuple[int, int, int]:
    _, _, t, h, w = latent_shape
    pt, ph, pw = cfg.patch_size
    if t % pt or h % ph or w % pw:
        raise ValueError(f"latent frames/height/width {(t, h, w)} must be divisible by patch_size {cfg.patch_size}")
    return t // pt, h // ph, w // pw


def _self_attention(p, x, cos, sin, cfg, impl, par, valid_tokens):
    b, s, _ = x.shape
    hd = cfg.attention_head_dim
    # Column-parallel q/k/v: this shard's heads. QK-RMSNorm spans all heads: par.rms_norm reduces
    # the sum of squares over the tensor shards.
    q = par.rms_norm(linear(p["to_q"], x), p["norm_q"], cfg.dim, cfg.eps)
    k = par.rms_norm(linear(p["to_k"], x), p["norm_k"], cfg.dim, cfg.eps)
    v = linear(p["to_v"], x).reshape(b, s, -1, hd)
    q = apply_rope_interleaved(q.reshape(b, s, -1, hd), cos, sin)
    k = apply_rope_interleaved(k.reshape(b, s, -1, hd), cos, sin)
    # Ulysses: (B, S/sp, H/tp, hd) -> (B, S, H/(tp*sp), hd) for attention, and back
    # (or keys/values all-gathered when sp does not divide H/tp).
    q, k, v = par.to_attention(q, k, v)
    s_full = k.shape[1]
    kv_lengths = None if valid_tokens in (None, s_full) else jnp.full((b,), valid_tokens, jnp.int32)
    o = par.from_attention(attention(q, k, v, implementation=impl, kv_lengths=kv_lengths))
    return par.row_linear(p["to_out"], o.reshape(b, s, -1))


def _cross_attention(p, x, context, cfg, impl, par):
    # Text keys are not sequence-split: every shard attends its tokens to all 512 text tokens,
    # for its own heads.
    b, s, _ = x.shape
    hd = cfg.attention_head_dim
    q = par.rms_norm(linear(p["to_q"], x), p["norm_q"], cfg.dim, cfg.eps).reshape(b, s, -1, hd)
    k = par.rms_norm(linear(p["to_k"], context), p["norm_k"], cfg.dim, cfg.eps).reshape(b, context.shape[1], -1, hd)
    v = linear(p["to_v"], context).reshape(b, context.shape[1], -1, hd)
    o = attention(q, k, v, implementation=impl)
    return par.row_linear(p["to_out"], o.reshape(b, s, -1))


def block(p: dict, x: jax.Array, context: jax.Array, temb6: jax.Array, cos, sin, cfg: WanTransformerConfig, impl,
          par: ShardContext = ShardContext(), valid_tokens: int | None = None) -> jax.Array:
    """One Wan transformer block (diffusers ``WanTransformerBlock``), per-sample AdaLN.

    Written once for one device and for one ``shard_map`` shard: ``par`` supplies the
    collectives (identity by default). Shapes below are per shard; on one device
    ``tp = sp = 1``.

    Args:
      p: one block's parameters (no ``layers`` axis); q/k/v, FFN-up and QK-norm scales hold
        this shard's ``1/tp`` of the features, ``to_out``/FFN-down kernels ``1/tp`` of their rows.
      x: float32 residual stream ``(B, S/sp, D)``.
      context: text tokens after the text embedder ``(B, L, D)``, compute dtype (not split).
      temb6: float32 ``(B, 6, D)`` time projection.
      cos, sin: RoPE tables ``(S/sp, head_dim/2)`` for this shard's tokens.
      cfg: the architecture.
      impl: attention implementation.
      par: the shard's mesh axes (:class:`vidax.core.parallel.ShardContext`).
      valid_tokens: tokens before padding (padding keys are masked); None: no padding.

    Returns:
      float32 ``(B, S/sp, D)``.
    """
    dtype = p["attn1"]["to_q"]["kernel"].dtype
    mod = p["scale_shift_table"].astype(jnp.float32) + temb6  # (B, 6, D)
    shift_msa, scale_msa, gate_msa, c_shift, c_scale, c_gate = (mod[:, i : i + 1] for i in range(6))

    with jax.named_scope("self_attention"):
        h = (layer_norm(x, None, cfg.eps) * (1 + scale_msa) + shift_msa).astype(dtype)
        x = x + _self_attention(p["attn1"], h, cos, sin, cfg, impl, par, valid_tokens).astype(jnp.float32) * gate_msa
    with jax.named_scope("cross_attention"):
        h = layer_norm(x, p.get("norm2"), cfg.eps).astype(dtype) if cfg.cross_attn_norm else x.astype(dtype)
        x = x + _cross_attention(p["attn2"], h, context, cfg, impl, par).astype(jnp.float32)
    with jax.named_scope("ffn"):
        h = (layer_norm(x, None, cfg.eps) * (1 + c_scale) + c_shift).astype(dtype)
        # Column-parallel up (own bias slice), row-parallel down (bias once, after the reduction).
        ff = par.row_linear(p["ffn"]["down"], gelu_tanh(linear(p["ffn"]["up"], h)))
        x = x + ff.astype(jnp.float32) * c_gate
    return x


def condition_embedding(p: dict, cfg: WanTransformerConfig, timestep: jax.Array, context: jax.Array):
    """Time and text embeddings (diffusers ``WanTimeTextImageEmbedding``).

    Args:
      timestep: ``(B,)`` timesteps in ``[0, 1000]``, converted to float32.
      context: ``(B, L, text_dim)`` text encoder output.

    Returns:
      ``temb`` float32 ``(B, D)``, ``temb6`` float32 ``(B, 6, D)``, projected context float32 ``(B, L, D)``.
    """
    t_freq = timestep_embedding(timestep, cfg.freq_dim, flip_sin_to_cos=True, downscale_freq_shift=0)
    te = p["time_embedder"]
    temb = linear(te["linear_2"], jax.nn.silu(linear(te["linear_1"], t_freq, jnp.float32)), jnp.float32)
    temb6 = linear(p["time_proj"], jax.nn.silu(temb), jnp.float32).reshape(temb.shape[0], 6, cfg.dim)
    tx = p["text_embedder"]
    ctx = linear(tx["linear_2"], gelu_tanh(linear(tx["linear_1"], context, jnp.float32)), jnp.float32)
    return temb, temb6, ctx


def embed_inputs(params: dict, latents: jax.Array, timestep: jax.Array, context: jax.Array, cfg: WanTransformerConfig):
    """The stages before the blocks: patch embedding and condition embedding.

    Args:
      params: the full parameter tree.
      latents: ``(B, in_channels, T, H, W)``; timestep ``(B,)``; context ``(B, L, text_dim)``.

    Returns:
      ``x`` float32 ``(B, S, D)`` tokens, ``temb`` float32 ``(B, D)``, ``temb6`` float32 ``(B, 6, D)``,
      ``ctx`` ``(B, L, D)`` in the compute dtype.
    """
    dtype = params["patch_embedding"]["kernel"].dtype
    with jax.named_scope("patch_embedding"):
        x = patch_embed(params["patch_embedding"], latents, cfg.patch_size).astype(jnp.float32)
    with jax.named_scope("condition_embedder"):
        temb, temb6, ctx = condition_embedding(params["condition_embedder"], cfg, timestep, context)
    return x, temb, temb6, ctx.astype(dtype)


def pad_tokens(x: jax.Array, cos: jax.Array, sin: jax.Array, sp: int):
    """Pad the token axis to a multiple of ``sp`` for sequence parallelism (zeros; masked as keys).

    Args:
      x: ``(B, S, D)``; cos, sin: ``(S, head_dim/2)``.

    Returns:
      ``x (B, S_pad, D), cos, sin (S_pad, head_dim/2), S`` with ``S_pad`` the next multiple of ``sp``.
    """
    s = x.shape[1]
    n = padded_length(s, sp)
    return pad_axis(x, 1, n), pad_axis(cos, 0, n), pad_axis(sin, 0, n), s


def run_blocks(
    blocks: dict,
    x: jax.Array,
    ctx: jax.Array,
    temb6: jax.Array,
    cos: jax.Array,
    sin: jax.Array,
    *,
    cfg: WanTransformerConfig,
    attention_impl: AttentionImpl | str = AttentionImpl.XLA,
    mesh: Mesh | None = None,
    rules: ShardingRules = WAN_RULES,
    valid_tokens: int | None = None,
) -> jax.Array:
    """Run a stack of blocks (all of them, or a chunk: the offloading hook) under ``lax.scan``.

    On a mesh, the scan runs inside one ``shard_map`` over every mesh axis: batch over
    ``data``, tokens over ``sequence`` (Ulysses), heads and FFN width over ``tensor``
    (Megatron), with the collectives written out in :class:`vidax.core.parallel.ShardContext`.
    A chunk of the stacked block parameters (``tree_map(lambda a: a[i:j], params["blocks"])``)
    has the same shardings, so an offloader streams chunks through this function unchanged.

    Args:
      blocks: stacked block parameters, each leaf leading with a ``layers`` axis (any length).
      x: float32 ``(B, S_pad, D)``, ``S_pad`` divisible by sp (see :func:`pad_tokens`).
      ctx: ``(B, L, D)`` projected text, compute dtype.
      temb6: float32 ``(B, 6, D)``.
      cos, sin: float32 ``(S_pad, head_dim/2)``.
      cfg: the architecture (static).
      attention_impl: see :mod:`vidax.core.attention`; kernels run per shard.
      mesh: the ``(data, tensor, sequence)`` mesh, or None for one device.
      rules: the model's sharding rules (static).
      valid_tokens: ``S`` before padding; padded keys are masked. None: no padding.

    Returns:
      float32 ``(B, S_pad, D)``; on a mesh sharded ``P(data, sequence, None)``.

    Raises:
      ValueError: the rules put ``heads`` and ``mlp`` on different mesh axes.
    """
    impl = AttentionImpl(attention_impl)

    def scan(blocks, x, ctx, temb6, cos, sin, par):
        def body(x, p):
            return block(p, x, ctx, temb6, cos, sin, cfg, impl, par, valid_tokens), None

        return jax.lax.scan(body, x, blocks)[0]

    if mesh is None:
        return scan(blocks, x, ctx, temb6, cos, sin, ShardContext())
    if rules.mesh_axes("heads") != rules.mesh_axes("mlp"):
        raise ValueError("Wan blocks reduce attention and FFN outputs over one tensor axis; "
                         f"rules map heads -> {rules.mesh_axes('heads')!r} but mlp -> {rules.mesh_axes('mlp')!r}")
    tp = axis_size(mesh, rules.mesh_axes("heads"))
    sp = axis_size(mesh, rules.mesh_axes("tokens"))
    ulysses = sequence_mode(cfg.num_attention_heads // tp, sp) == "ulysses"
    par = ShardContext(tensor=rules.mesh_axes("heads"), sequence=rules.mesh_axes("tokens"), ulysses=ulysses)
    tokens = rules.spec(("batch", "tokens", "embed"))
    per_sample = rules.spec(("batch", None, "embed"))
    table = rules.spec(("tokens", None))
    in_specs = (rules.param_specs(transformer_specs(cfg))["blocks"], tokens, per_sample, per_sample, table, table)
    # Pallas and cuDNN calls carry no varying-manual-axes types; the einsum paths keep the check.
    kernel = resolve_implementation(impl) in (AttentionImpl.CUDNN, AttentionImpl.SPLASH)
    fn = jax.shard_map(partial(scan, par=par), mesh=mesh, in_specs=in_specs, out_specs=tokens, check_vma=not kernel)
    return fn(blocks, x, ctx, temb6, cos, sin)


def output_head(params: dict, x: jax.Array, temb: jax.Array, grid: tuple[int, int, int], cfg: WanTransformerConfig) -> jax.Array:
    """The stages after the blocks: AdaLN head, projection, unpatchify.

    Args:
      x: float32 ``(B, S, D)`` (padding removed); temb: float32 ``(B, D)``; grid: ``(T', H', W')`` tokens.

    Returns:
      float32 ``(B, out_channels, T, H, W)``.
    """
    dtype = params["patch_embedding"]["kernel"].dtype
    with jax.named_scope("head"):
        shift, scale = (params["scale_shift_table"] + temb[:, None, :]).swapaxes(0, 1)[:, :, None, :]
        x = (layer_norm(x, None, cfg.eps) * (1 + scale) + shift).astype(dtype)
        x = linear(params["proj_out"], x, jnp.float32)
    return unpatchify(x, grid, cfg.patch_size, cfg.out_channels)


@partial(jax.jit, static_argnames=("cfg", "attention_impl", "mesh", "rules"))
def forward(
    params: dict,
    latents: jax.Array,
    timestep: jax.Array,
    context: jax.Array,
    cos: jax.Array,
    sin: jax.Array,
    *,
    cfg: WanTransformerConfig,
    attention_impl: AttentionImpl | str = AttentionImpl.XLA,
    mesh: Mesh | None = None,
    rules: ShardingRules = WAN_RULES,
) -> jax.Array:
    """Predict the flow (velocity) for a batch of video latents.

    Stages: :func:`embed_inputs` -> :func:`pad_tokens` (sp > 1) -> :func:`run_blocks` ->
    padding removed -> :func:`output_head`. Outside the blocks the computation is partitioned
    by GSPMD (batch over ``data``; the small embedders and head replicated).

    Args:
      params: parameter tree of :func:`transformer_specs` (on a mesh: placed with
        ``rules.param_shardings(transformer_specs(cfg), mesh)``).
      latents: ``(B, in_channels, T, H, W)`` latent video (any float dtype).
      timestep: ``(B,)`` timesteps in ``[0, 1000]`` (float32).
      context: ``(B, L, text_dim)`` text encoder states (L = 512 for Wan).
      cos, sin: RoPE tables from :func:`rope_tables` for this latent shape.
      cfg: the architecture (static).
      attention_impl: attention implementation (static), see :mod:`vidax.core.attention`.
      mesh: a :func:`vidax.core.sharding.make_mesh` mesh (static), or None for one device.
      rules: sharding rules (static), default :data:`vidax.models.wan.sharding.WAN_RULES`.

    Returns:
      float32 ``(B, out_channels, T, H, W)``.

    Raises:
      ValueError: a mesh the model cannot use (see :func:`vidax.models.wan.sharding.check_parallel`).
    """
    check_parallel(cfg, mesh, rules, latents.shape[0])
    grid = _grid(cfg, latents.shape)
    if mesh is not None:
        latents = jax.lax.with_sharding_constraint(
            latents, NamedSharding(mesh, rules.spec(("batch",) + (None,) * (latents.ndim - 1))))
    x, temb, temb6, ctx = embed_inputs(params, latents, timestep, context, cfg)
    sp = axis_size(mesh, rules.mesh_axes("tokens"))
    x, cos, sin, s = pad_tokens(x, cos, sin, sp)
    with jax.named_scope("blocks"):
        x = run_blocks(params["blocks"], x, ctx, temb6, cos, sin, cfg=cfg, attention_impl=attention_impl,
                       mesh=mesh, rules=rules, valid_tokens=s)
    return output_head(params, x[:, :s], temb, grid, cfg)


def num_tokens(cfg: WanTransformerConfig, latent_shape: tuple[int, ...]) -> int:
    """Sequence length the transformer sees for a latent of ``latent_shape``."""
    return math.prod(_grid(cfg, latent_shape))
