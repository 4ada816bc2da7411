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

from vidax.core.attention import AttentionImpl, attention, is_kernel
from vidax.core.embeddings import patch_embed, timestep_embedding, unpatchify
from vidax.core.layers import gelu, gelu_tanh, layer_norm, linear
from vidax.core.parallel import ShardContext, pad_axis, padded_length, sequence_mode
from vidax.core.params import ParamSpec, SpecTree, linear_spec
from vidax.core.rope import apply_rope_interleaved, rope_3d_angles, rope_cos_sin
from vidax.core.sharding import ShardingRules, axis_size
from vidax.models.wan.config import WanTransformerConfig
from vidax.models.wan.sharding import WAN_RULES, check_parallel

#: Text tokens of the cross-attention context when image tokens precede them (I2V). diffusers'
#: ``WanAttnProcessor`` takes everything before the last 512 tokens as image tokens.
TEXT_CONTEXT_LEN = 512


def transformer_specs(cfg: WanTransformerConfig) -> SpecTree:
    """The spec tree of a Wan transformer: every parameter's shape, fp32 pin and logical axes.

    Blocks are stacked: each block parameter leads with a ``layers`` axis of size ``num_layers``.
    Image-to-video configurations (``image_dim`` set: Wan2.1 I2V / FLF2V) add the image embedder
    (``condition_embedder/image_embedder``: float32 norms, the MLP in the compute dtype; FLF2V also
    its ``pos_embed``) and per block the image keys/values of cross-attention
    (``attn2/add_k_proj``, ``attn2/add_v_proj``, ``attn2/norm_added_k``).
    """
    d, L = cfg.dim, cfg.num_layers
    pt, ph, pw = cfg.patch_size

    def attn() -> dict:
        return {
            "to_q": linear_spec(d, d, ("embed", "heads"), layers=L),
            "to_k": linear_spec(d, d, ("embed", "heads"), layers=L),
            "to_v": linear_spec(d, d, ("embed", "heads"), layers=L),
            "to_out": linear_spec(d, d, ("heads", "embed"), layers=L),
            "norm_q": {"scale": ParamSpec((L, d), fp32=True, axes=("layers", "heads"))},
            "norm_k": {"scale": ParamSpec((L, d), fp32=True, axes=("layers", "heads"))},
        }

    blocks = {
        "attn1": attn(),
        "attn2": attn(),
        "ffn": {
            "up": linear_spec(d, cfg.ffn_dim, ("embed", "mlp"), layers=L),
            "down": linear_spec(cfg.ffn_dim, d, ("mlp", "embed"), layers=L),
        },
        "scale_shift_table": ParamSpec((L, 1, 6, d), fp32=True, axes=("layers", None, None, "embed")),
    }
    if cfg.cross_attn_norm:
        blocks["norm2"] = {
            "scale": ParamSpec((L, d), fp32=True, axes=("layers", "embed")),
            "bias": ParamSpec((L, d), fp32=True, axes=("layers", "embed")),
        }
    if cfg.added_kv_proj_dim is not None:
        blocks["attn2"]["add_k_proj"] = linear_spec(d, d, ("embed", "heads"), layers=L)
        blocks["attn2"]["add_v_proj"] = linear_spec(d, d, ("embed", "heads"), layers=L)
        blocks["attn2"]["norm_added_k"] = {"scale": ParamSpec((L, d), fp32=True, axes=("layers", "heads"))}
    specs = {
        "patch_embedding": {
            "kernel": ParamSpec((pt, ph, pw, cfg.in_channels, d), axes=(None, None, None, None, "embed")),
            "bias": ParamSpec((d,), axes=("embed",)),
        },
        "condition_embedder": {
            "time_embedder": {
                "linear_1": linear_spec(cfg.freq_dim, d, (None, "embed"), fp32=True),
                "linear_2": linear_spec(d, d, ("embed", "embed2"), fp32=True),
            },
            "time_proj": linear_spec(d, 6 * d, ("embed", None), fp32=True),
            # In the compute dtype, as diffusers (`_keep_in_fp32_modules` pins only the time embedder)
            # and the Wan repository (bf16 autocast) run it: 512 tokens x 2 per step, not a small matmul.
            "text_embedder": {
                "linear_1": linear_spec(cfg.text_dim, d, (None, "embed")),
                "linear_2": linear_spec(d, d, ("embed", "embed2")),
            },
        },
        "blocks": blocks,
        "proj_out": linear_spec(d, cfg.out_channels * pt * ph * pw, ("embed", None)),
        "scale_shift_table": ParamSpec((1, 2, d), fp32=True, axes=(None, None, "embed")),
    }
    if cfg.image_dim is not None:
        specs["condition_embedder"]["image_embedder"] = _image_embedder_specs(cfg)
    return specs


def _image_embedder_specs(cfg: WanTransformerConfig) -> dict:
    """diffusers ``WanImageEmbedding``: LayerNorm, GELU MLP (image_dim -> image_dim -> dim), LayerNorm."""
    e, d = cfg.image_dim, cfg.dim
    out = {
        "norm1": {"scale": ParamSpec((e,), fp32=True, axes=(None,)), "bias": ParamSpec((e,), fp32=True, axes=(None,))},
        # The MLP in the compute dtype like the text embedder (diffusers keeps only the norms in fp32).
        "ff": {"up": linear_spec(e, e, (None, None)), "down": linear_spec(e, d, (None, "embed"))},
        "norm2": {"scale": ParamSpec((d,), fp32=True, axes=("embed",)), "bias": ParamSpec((d,), fp32=True, axes=("embed",))},
    }
    if cfg.pos_embed_seq_len is not None:
        out["pos_embed"] = ParamSpec((1, cfg.pos_embed_seq_len, e), fp32=True, axes=(None, None, None))
    return out


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
    image = None
    if "add_k_proj" in p:
        # I2V: image tokens first, then the text (diffusers WanAttnProcessor splits at shape[1] - 512).
        n_image = context.shape[1] - TEXT_CONTEXT_LEN
        image, context = context[:, :n_image], context[:, n_image:]
    q = par.rms_norm(linear(p["to_q"], x), p["norm_q"], cfg.dim, cfg.eps).reshape(b, s, -1, hd)
    k = par.rms_norm(linear(p["to_k"], context), p["norm_k"], cfg.dim, cfg.eps).reshape(b, context.shape[1], -1, hd)
    v = linear(p["to_v"], context).reshape(b, context.shape[1], -1, hd)
    o = attention(q, k, v, implementation=impl)
    if image is not None:
        # Separate attention over the image keys/values (column-parallel like k/v; norm_added_k across heads),
        # added before the shared output projection.
        ki = par.rms_norm(linear(p["add_k_proj"], image), p["norm_added_k"], cfg.dim, cfg.eps)
        vi = linear(p["add_v_proj"], image).reshape(b, image.shape[1], -1, hd)
        o = o + attention(q, ki.reshape(b, image.shape[1], -1, hd), vi, implementation=impl)
    return par.row_linear(p["to_out"], o.reshape(b, s, -1))


def _modulation(table: jax.Array, temb: jax.Array, n: int) -> list[jax.Array]:
    """AdaLN pieces ``table + temb``, each broadcastable to ``(B, S, D)``, in float32.

    ``temb`` per sample ``(B, n, D)`` gives ``n`` arrays ``(B, 1, D)``; per token ``(B, S, n, D)``
    (Wan2.2 ``expand_timesteps``: diffusers ``temb.ndim == 4``) gives ``n`` arrays ``(B, S, D)``.
    ``table``: ``(1, n, D)``.
    """
    table = table.astype(jnp.float32)
    if temb.ndim == 3:
        mod = table + temb
        return [mod[:, i : i + 1] for i in range(n)]
    mod = table[None] + temb
    return [mod[:, :, i] for i in range(n)]


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
      context: text tokens after the text embedder ``(B, L, D)``, compute dtype (not split); for
        image-to-video configurations the image embedder's tokens come first, then 512 text tokens.
      temb6: float32 ``(B, 6, D)`` time projection, or ``(B, S/sp, 6, D)`` per token.
      cos, sin: RoPE tables ``(S/sp, head_dim/2)`` for this shard's tokens.
      cfg: the architecture.
      impl: attention implementation.
      par: the shard's mesh axes (:class:`vidax.core.parallel.ShardContext`).
      valid_tokens: tokens before padding (padding keys are masked); None: no padding.

    Returns:
      float32 ``(B, S/sp, D)``.
    """
    dtype = p["attn1"]["to_q"]["kernel"].dtype
    # temb6 (B, 6, D) per sample, or (B, S/sp, 6, D) per token (split over sequence with x).
    shift_msa, scale_msa, gate_msa, c_shift, c_scale, c_gate = _modulation(p["scale_shift_table"], temb6, 6)

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


def condition_embedding(p: dict, cfg: WanTransformerConfig, timestep: jax.Array, context: jax.Array,
                        image_context: jax.Array | None = None):
    """Time, text and image embeddings (diffusers ``WanTimeTextImageEmbedding``).

    Args:
      timestep: ``(B,)`` timesteps in ``[0, 1000]``, or ``(B, S)`` one per token (Wan2.2
        ``expand_timesteps``); converted to float32.
      context: ``(B, L, text_dim)`` text encoder output.
      image_context: ``(B, L_img, image_dim)`` CLIP hidden states (image-to-video configurations), or None.

    Returns:
      ``temb`` float32 ``(B, D)`` (per token ``(B, S, D)``), ``temb6`` float32 ``(B, 6, D)`` (per token
      ``(B, S, 6, D)``), projected context float32 ``(B, L, D)`` (with image tokens: ``(B, L_img + L, D)``,
      image first, as diffusers concatenates them).
    """
    t_freq = timestep_embedding(timestep.reshape(-1), cfg.freq_dim, flip_sin_to_cos=True, downscale_freq_shift=0)
    t_freq = t_freq.reshape(*timestep.shape, cfg.freq_dim)
    te = p["time_embedder"]
    temb = linear(te["linear_2"], jax.nn.silu(linear(te["linear_1"], t_freq, jnp.float32)), jnp.float32)
    temb6 = linear(p["time_proj"], jax.nn.silu(temb), jnp.float32).reshape(*temb.shape[:-1], 6, cfg.dim)
    tx = p["text_embedder"]
    ctx = linear(tx["linear_2"], gelu_tanh(linear(tx["linear_1"], context, jnp.float32)), jnp.float32)
    if image_context is not None:
        ctx = jnp.concatenate([image_embedding(p["image_embedder"], cfg, image_context), ctx], axis=1)
    return temb, temb6, ctx


def image_embedding(p: dict, cfg: WanTransformerConfig, image_context: jax.Array) -> jax.Array:
    """diffusers ``WanImageEmbedding``: ``LayerNorm -> Linear -> GELU(erf) -> Linear -> LayerNorm``.

    FLF2V (``pos_embed_seq_len`` set) adds a learned position embedding over the first and last
    frame's tokens first; diffusers views its ``(2B, 257, e)`` input as ``(B, 514, e)``, here the
    caller passes ``(B, 514, e)`` directly (first frame's tokens, then the last frame's).

    Args:
      image_context: ``(B, L_img, image_dim)``, any float dtype.

    Returns:
      float32 ``(B, L_img, D)``.

    Raises:
      ValueError: FLF2V with ``L_img`` other than ``pos_embed_seq_len``.
    """
    x = image_context.astype(jnp.float32)
    if "pos_embed" in p:
        if x.shape[1] != p["pos_embed"].shape[1]:
            raise ValueError(f"FLF2V image context has {x.shape[1]} tokens; the model's pos_embed expects "
                             f"{p['pos_embed'].shape[1]} (first and last frame)")
        x = x + p["pos_embed"].astype(jnp.float32)
    # FP32LayerNorm's default eps (1e-5), not the transformer's.
    x = layer_norm(x, p["norm1"], 1e-5)
    x = linear(p["ff"]["down"], gelu(linear(p["ff"]["up"], x, jnp.float32)), jnp.float32)
    return layer_norm(x, p["norm2"], 1e-5)


def embed_inputs(params: dict, latents: jax.Array, timestep: jax.Array, context: jax.Array, cfg: WanTransformerConfig,
                 image_context: jax.Array | None = None):
    """The stages before the blocks: patch embedding and condition embedding.

    Args:
      params: the full parameter tree.
      latents: ``(B, in_channels, T, H, W)``; timestep ``(B,)`` or per token ``(B, S)``; context
        ``(B, L, text_dim)``; image_context ``(B, L_img, image_dim)`` or None.

    Returns:
      ``x`` float32 ``(B, S, D)`` tokens, ``temb`` float32 ``(B, D)`` / ``(B, S, D)``, ``temb6`` float32
      ``(B, 6, D)`` / ``(B, S, 6, D)``, ``ctx`` ``(B, [L_img +] L, D)`` in the compute dtype.
    """
    dtype = params["patch_embedding"]["kernel"].dtype
    with jax.named_scope("patch_embedding"):
        x = patch_embed(params["patch_embedding"], latents, cfg.patch_size).astype(jnp.float32)
    with jax.named_scope("condition_embedder"):
        temb, temb6, ctx = condition_embedding(params["condition_embedder"], cfg, timestep, context, image_context)
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
      temb6: float32 ``(B, 6, D)``, or per token ``(B, S_pad, 6, D)`` (split over ``sequence`` like ``x``).
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
    io = block_io_specs(rules, per_token=temb6.ndim == 4)
    tokens = io["x"]
    in_specs = (rules.param_specs(transformer_specs(cfg))["blocks"], tokens, io["ctx"], io["temb6"], io["cos"], io["sin"])
    # Kernel calls (Pallas, cuDNN, FFI) carry no varying-manual-axes types; the einsum paths keep the check.
    kernel = is_kernel(impl)
    fn = jax.shard_map(partial(scan, par=par), mesh=mesh, in_specs=in_specs, out_specs=tokens, check_vma=not kernel)
    return fn(blocks, x, ctx, temb6, cos, sin)


def output_head(params: dict, x: jax.Array, temb: jax.Array, grid: tuple[int, int, int], cfg: WanTransformerConfig) -> jax.Array:
    """The stages after the blocks: AdaLN head, projection, unpatchify.

    Args:
      x: float32 ``(B, S, D)`` (padding removed); temb: float32 ``(B, D)``, or ``(B, S, D)`` per token;
        grid: ``(T', H', W')`` tokens.

    Returns:
      float32 ``(B, out_channels, T, H, W)``.
    """
    dtype = params["patch_embedding"]["kernel"].dtype
    with jax.named_scope("head"):
        # temb (B, D) per sample, (B, S, D) per token.
        shift, scale = _modulation(params["scale_shift_table"], temb[..., None, :] if temb.ndim == 3 else temb[:, None, :], 2)
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
    image_context: jax.Array | None = None,
) -> jax.Array:
    """Predict the flow (velocity) for a batch of video latents.

    Stages: :func:`embed_inputs` -> :func:`pad_tokens` (sp > 1) -> :func:`run_blocks` ->
    padding removed -> :func:`output_head`. Outside the blocks the computation is partitioned
    by GSPMD (batch over ``data``; the small embedders and head replicated).

    Args:
      params: parameter tree of :func:`transformer_specs` (on a mesh: placed with
        ``rules.param_shardings(transformer_specs(cfg), mesh)``).
      latents: ``(B, in_channels, T, H, W)`` latent video (any float dtype).
      timestep: ``(B,)`` timesteps in ``[0, 1000]`` (float32), or ``(B, S)`` one per token (Wan2.2
        ``expand_timesteps``; S = :func:`num_tokens`; per-token AdaLN in every block and the head).
      context: ``(B, L, text_dim)`` text encoder states (L = 512 for Wan; exactly 512 with images).
      cos, sin: RoPE tables from :func:`rope_tables` for this latent shape.
      cfg: the architecture (static).
      attention_impl: attention implementation (static), see :mod:`vidax.core.attention`.
      mesh: a :func:`vidax.core.sharding.make_mesh` mesh (static), or None for one device.
      rules: sharding rules (static), default :data:`vidax.models.wan.sharding.WAN_RULES`.
      image_context: ``(B, L_img, image_dim)`` CLIP penultimate hidden states for image-to-video
        configurations (``cfg.image_dim`` set; L_img = 257, or 514 for FLF2V: first then last frame),
        else None.

    Returns:
      float32 ``(B, out_channels, T, H, W)``.

    Raises:
      ValueError: a mesh the model cannot use (see :func:`vidax.models.wan.sharding.check_parallel`);
        image context missing for an I2V model or given to a T2V model; a per-token timestep of the
        wrong length.
    """
    check_parallel(cfg, mesh, rules, latents.shape[0])
    check_conditioning(cfg, latents.shape, timestep.shape, context.shape,
                       None if image_context is None else image_context.shape)
    x, temb, temb6, ctx, cos, sin = forward_prologue(params, latents, timestep, context, cos, sin, cfg=cfg,
                                                     mesh=mesh, rules=rules, image_context=image_context)
    s = num_tokens(cfg, latents.shape)
    with jax.named_scope("blocks"):
        x = run_blocks(params["blocks"], x, ctx, temb6, cos, sin, cfg=cfg, attention_impl=attention_impl,
                       mesh=mesh, rules=rules, valid_tokens=s)
    return forward_epilogue(params, x, temb, cfg=cfg, latent_shape=latents.shape)


def forward_prologue(params: dict, latents: jax.Array, timestep: jax.Array, context: jax.Array, cos: jax.Array,
                     sin: jax.Array, *, cfg: WanTransformerConfig, mesh: Mesh | None = None,
                     rules: ShardingRules = WAN_RULES, image_context: jax.Array | None = None):
    """Everything :func:`forward` does before the blocks: :func:`embed_inputs` and :func:`pad_tokens`.

    Uses only the parameters outside ``params["blocks"]`` (an offloaded forward passes the
    resident parameters alone).

    Returns:
      ``x`` float32 ``(B, S_pad, D)``, ``temb`` float32 ``(B, D)``, ``temb6`` float32 ``(B, 6, D)``,
      ``ctx`` ``(B, L, D)`` compute dtype, ``cos, sin`` float32 ``(S_pad, head_dim / 2)``, with
      ``S_pad`` the token count padded to a multiple of sp: the inputs of :func:`run_blocks`.
    """
    if mesh is not None:
        latents = jax.lax.with_sharding_constraint(
            latents, NamedSharding(mesh, rules.spec(("batch",) + (None,) * (latents.ndim - 1))))
    x, temb, temb6, ctx = embed_inputs(params, latents, timestep, context, cfg, image_context)
    sp = axis_size(mesh, rules.mesh_axes("tokens"))
    x, cos, sin, _ = pad_tokens(x, cos, sin, sp)
    if temb6.ndim == 4:  # per-token timesteps: padded with the tokens (padded rows are cut after the blocks)
        temb6 = pad_axis(temb6, 1, x.shape[1])
    return x, temb, temb6, ctx, cos, sin


def forward_epilogue(params: dict, x: jax.Array, temb: jax.Array, *, cfg: WanTransformerConfig,
                     latent_shape: tuple[int, ...]) -> jax.Array:
    """Everything :func:`forward` does after the blocks: padding removed, :func:`output_head`.

    Args:
      x: float32 ``(B, S_pad, D)`` from :func:`run_blocks`; temb: float32 ``(B, D)``.
      latent_shape: the input latents' shape ``(B, C, T, H, W)`` (static).

    Returns:
      float32 ``(B, out_channels, T, H, W)``.
    """
    s = num_tokens(cfg, latent_shape)
    return output_head(params, x[:, :s], temb, _grid(cfg, latent_shape), cfg)


def block_io_specs(rules: ShardingRules = WAN_RULES, per_token: bool = False) -> dict:
    """``PartitionSpec`` of each :func:`run_blocks` input and of ``temb`` on a mesh.

    ``per_token`` (Wan2.2 per-token timesteps): ``temb6`` ``(B, S_pad, 6, D)`` is split over
    ``sequence`` like the tokens, ``P(data, sequence, None, None)``, and ``temb`` ``(B, S, D)``
    is ``P(data, None, None)``.

    Returns:
      ``{"x": P(data, sequence, None), "ctx", "temb6": P(data, None, None), "temb": P(data, None),
      "cos", "sin": P(sequence, None)}`` under :data:`WAN_RULES` (what ``run_blocks``' ``shard_map``
      takes, so a chunked block loop keeps one sharding from chunk to chunk).
    """
    tokens = rules.spec(("batch", "tokens", "embed"))
    per_sample = rules.spec(("batch", None, "embed"))
    table = rules.spec(("tokens", None))
    if per_token:
        return {"x": tokens, "ctx": per_sample, "temb6": rules.spec(("batch", "tokens", None, "embed")),
                "temb": per_sample, "cos": table, "sin": table}
    return {"x": tokens, "ctx": per_sample, "temb6": per_sample, "temb": rules.spec(("batch", "embed")),
            "cos": table, "sin": table}


def check_conditioning(cfg: WanTransformerConfig, latent_shape: tuple[int, ...], timestep_shape: tuple[int, ...],
                       context_shape: tuple[int, ...], image_context_shape: tuple[int, ...] | None) -> None:
    """Check the conditioning inputs of :func:`forward` against the configuration (shapes only).

    Raises:
      ValueError: an I2V model (``cfg.image_dim``) without image context, or with a text context
        other than :data:`TEXT_CONTEXT_LEN` tokens, or an image width other than ``image_dim``; image
        context for a model without an image embedder; a timestep neither ``(B,)`` nor ``(B, S)``.
    """
    b = latent_shape[0]
    if cfg.has_image_input:
        if image_context_shape is None:
            raise ValueError("this Wan transformer is image-conditioned (image_dim set): pass image_context "
                             "(CLIP hidden states)")
        if image_context_shape[0] != b or image_context_shape[-1] != cfg.image_dim:
            raise ValueError(f"image_context has shape {tuple(image_context_shape)}, expected ({b}, L_img, {cfg.image_dim})")
        if context_shape[1] != TEXT_CONTEXT_LEN:
            raise ValueError(f"with image context the text context must have {TEXT_CONTEXT_LEN} tokens (the reference "
                             f"splits image from text tokens by that count), got {context_shape[1]}")
    elif image_context_shape is not None:
        raise ValueError("image_context given, but this Wan transformer has no image embedder (image_dim is null)")
    s = num_tokens(cfg, latent_shape)
    if tuple(timestep_shape) not in ((b,), (b, s)):
        raise ValueError(f"timestep has shape {tuple(timestep_shape)}; expected ({b},) or per token ({b}, {s})")


def num_tokens(cfg: WanTransformerConfig, latent_shape: tuple[int, ...]) -> int:
    """Sequence length the transformer sees for a latent of ``latent_shape``."""
    return math.prod(_grid(cfg, latent_shape))
