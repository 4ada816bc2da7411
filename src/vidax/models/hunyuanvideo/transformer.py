"""The HunyuanVideo diffusion transformer, as pure functions over a parameter dict.

Follows diffusers ``models/transformers/transformer_hunyuan_video.py`` (``HunyuanVideoTransformer3DModel``,
``HunyuanVideoConditionEmbedding``, ``HunyuanVideoTokenRefiner``, ``HunyuanVideoRotaryPosEmbed``,
``HunyuanVideoTransformerBlock``, ``HunyuanVideoSingleTransformerBlock`` and their ``TokenReplace``
variants, ``HunyuanVideoAttnProcessor2_0``), with ``models/normalization.py`` (``AdaLayerNormZero``,
``AdaLayerNormZeroSingle``, ``AdaLayerNormContinuous``) and ``models/embeddings.py``
(``get_timestep_embedding``, ``TimestepEmbedding``, ``PixArtAlphaTextProjection``,
``get_1d_rotary_pos_embed``, ``apply_rotary_emb``).

Architecture (an MMDiT after Flux): the latents ``(B, C, T, H, W)`` are cut into ``(p_t, p, p)`` patches
(video tokens); the Llama text states are refined by a small transformer of their own (the token
refiner, conditioned on the timestep and on the text mean-pooled over its mask); the timestep, the
pooled CLIP projection and (guidance-distilled models) the guidance scale make one conditioning
vector. Then ``num_layers`` dual-stream blocks (video and text each with their own weights and AdaLN,
joint attention over ``[video; text]``) and ``num_single_layers`` single-stream blocks (shared weights,
attention and MLP in parallel from one normalised input, one output projection over both), RMS q/k
norms per head, 3D RoPE (theta 256; frame, row and column axes of 16, 56 and 56 features) on the video
tokens only, and a final AdaLN head. ``token_replace`` image-to-video models modulate the first latent
frame's tokens with the timestep-0 conditioning (``token_replace_emb``: no guidance term).

Text padding: the reference masks padded text *keys* everywhere (a key mask built from the mask's sum:
right padding). Here it is per-sample key lengths (:func:`vidax.core.attention.attention`'s
``kv_lengths``), never a dense mask (paper Table 4 fault 6). Padded query rows are computed as the
reference computes them (they attend the valid keys; in the refiner only key 0, which the reference's
mask always lets through) and never reach a valid token: they are never keys, and the output keeps the
video tokens only. So every row, padded or not, matches the reference.

Layout: latents ``(B, C, T, H, W)``, as the reference and its pipeline keep them.

Stages (each in a ``jax.named_scope``): :func:`condition_embedding` -> :func:`refine_text` ->
:func:`embed_video` -> :func:`run_blocks` (dual-stream stack, then single-stream stack, each stacked
under ``lax.scan``: one block compiles once per kind) -> :func:`output_head`. :func:`forward_prologue` /
:func:`run_blocks` / :func:`forward_epilogue` are the offloading hook, as in the other families.

Parallelism (``forward(..., mesh=...)``): each block stack runs inside one ``shard_map`` over the
``(data, tensor, sequence)`` mesh. Megatron tensor parallelism over heads, MLP width and the AdaLN
projections' outputs (:mod:`vidax.models.hunyuanvideo.sharding`); DeepSpeed-Ulysses over the joint
sequence: the video stream and the text stream are *both* split over ``sequence`` (each zero-padded to a
multiple of sp), so the dual-stream blocks apply the video weights to video rows and the text weights to
text rows with no wasted work, and the shards are balanced. For attention each shard concatenates its
video and text rows; one ``all_to_all`` per q/k/v trades the token split for a head split (or, where sp
does not divide the local heads, keys and values are all-gathered); the gathered keys arrive shard by
shard, ``[video_0; text_0; video_1; text_1; ...]``, and are reordered (static slices) to
``[video[:S]; text]`` so that one key length per sample (``S + text length``) excludes both the video
padding and the text padding; queries need no order.

Precision: the video and text residual streams stay float32 between and inside the blocks (paper
Table 4 fault 1); matmul inputs are cast to the weight dtype with float32 accumulation; LayerNorms and
RMSNorms compute in float32; the AdaLN projections, the timestep / guidance / pooled-text embedders (of
the model and of the refiner), the patch embedding and all norm parameters are float32 leaves (the
reference runs them in the model dtype, bfloat16 in the released pipelines: nothing here is less
precise).
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding

from vidax.core import mmdit
from vidax.core.attention import AttentionImpl
from vidax.core.embeddings import patch_embed
from vidax.core.layers import gelu_tanh, layer_norm, linear
from vidax.core.mmdit import (NORM_EPS, TIME_PROJ_DIM, VIDEO, BlockInputs, double_block, joint_attention, mlp2,
                              modulations, timestep_mlp)
# Moved to vidax.core.mmdit (shared with HunyuanVideo-1.5); still importable from here.
from vidax.core.mmdit import time_proj, time_proj_frequencies  # noqa: F401
from vidax.core.parallel import ShardContext, pad_axis, padded_length
from vidax.core.params import ParamSpec, SpecTree, linear_spec
from vidax.core.sharding import ShardingRules, axis_size
from vidax.models.hunyuanvideo.config import HunyuanVideoTransformerConfig
from vidax.models.hunyuanvideo.sharding import HUNYUAN_VIDEO_RULES, check_parallel

#: The two block stacks: ``kind`` of :func:`run_blocks` -> parameter subtree.
STACKS = {"double": "transformer_blocks", "single": "single_transformer_blocks"}

# --------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------


def transformer_specs(cfg: HunyuanVideoTransformerConfig) -> SpecTree:
    """The spec tree of a HunyuanVideo transformer: every parameter's shape, fp32 pin and logical axes.

    Stacked blocks lead with a ``layers`` axis: ``transformer_blocks`` (``num_layers``),
    ``single_transformer_blocks`` (``num_single_layers``), ``context_embedder/token_refiner/refiner_blocks``
    (``num_refiner_layers``). Paths are diffusers' module names except the split fused tensors and the
    feed-forward pairs (see :mod:`vidax.models.hunyuanvideo.keymap`). Kernels are ``(in, out)``; the patch
    kernel is ``(p_t, p, p, in_channels, dim)``.
    """
    d, hd = cfg.dim, cfg.attention_head_dim
    L, S, R = cfg.num_layers, cfg.num_single_layers, cfg.num_refiner_layers
    p, pt = cfg.patch_size, cfg.patch_size_t

    def col(layers: int, n_out: int = d, axis: str = "heads") -> dict:  # column-parallel
        return linear_spec(d, n_out, ("embed", axis), layers=layers)

    def row(layers: int, n_in: int = d, axis: str = "heads", bias: bool = True) -> dict:  # row-parallel
        return linear_spec(n_in, d, (axis, "embed"), layers=layers, bias=bias)

    time_text = {"timestep_embedder": mmdit.embedder_spec(TIME_PROJ_DIM, d),
                 "text_embedder": mmdit.embedder_spec(cfg.pooled_projection_dim, d)}
    if cfg.guidance_embeds:
        time_text["guidance_embedder"] = mmdit.embedder_spec(TIME_PROJ_DIM, d)
    attn_single = {n: col(S) for n in ("to_q", "to_k", "to_v")} | {"norm_q": mmdit.rms_spec(hd, S),
                                                                     "norm_k": mmdit.rms_spec(hd, S)}
    return {
        "x_embedder": {"proj": {
            "kernel": ParamSpec((pt, p, p, cfg.in_channels, d), fp32=True, axes=(None, None, None, None, "embed")),
            "bias": ParamSpec((d,), fp32=True, axes=("embed",)),
        }},
        "context_embedder": mmdit.token_refiner_specs(cfg.text_embed_dim, d, cfg.refiner_mlp_dim, R),
        "time_text_embed": time_text,
        "transformer_blocks": mmdit.double_block_specs(d, hd, cfg.mlp_dim, L),
        "single_transformer_blocks": {
            "norm": mmdit.adaln_spec(d, S, 3),
            "attn": attn_single,
            "proj_mlp": col(S, cfg.mlp_dim, "mlp"),
            # diffusers' proj_out over [attention (dim); MLP (mlp_dim)], read as two row-parallel kernels + one bias.
            "proj_out": {"attn": {"kernel": row(S)["kernel"]},
                         "mlp": {"kernel": row(S, cfg.mlp_dim, "mlp")["kernel"]},
                         "bias": ParamSpec((S, d), axes=("layers", "embed"))},
        },
        **mmdit.output_head_specs(d, pt * p * p * cfg.out_channels),
    }


# --------------------------------------------------------------------------------------------
# Shapes, positions
# --------------------------------------------------------------------------------------------


def token_grid(cfg: HunyuanVideoTransformerConfig, latent_shape: tuple[int, ...]) -> tuple[int, int, int]:
    """``(T', H', W')`` token grid of latents ``(B, C, T, H, W)``.

    Raises:
      ValueError: not 5-D, or frames / height / width not divisible by ``(patch_size_t, patch_size, patch_size)``.
    """
    if len(latent_shape) != 5:
        raise ValueError(f"latents must be (B, C, T, H, W), got shape {tuple(latent_shape)}")
    _, _, t, h, w = latent_shape
    pt, p = cfg.patch_size_t, cfg.patch_size
    if t % pt or h % p or w % p:
        raise ValueError(f"latent frames/height/width {(t, h, w)} must be divisible by (patch_size_t, patch_size, "
                         f"patch_size) = {(pt, p, p)}")
    return t // pt, h // p, w // p


def num_tokens(cfg: HunyuanVideoTransformerConfig, latent_shape: tuple[int, ...]) -> int:
    """Video tokens of latents of ``latent_shape`` (the text tokens come on top)."""
    return math.prod(token_grid(cfg, latent_shape))


def rope_tables(cfg: HunyuanVideoTransformerConfig, grid: tuple[int, int, int]) -> tuple[jax.Array, jax.Array]:
    """3D RoPE ``cos, sin`` of the video tokens (diffusers ``HunyuanVideoRotaryPosEmbed``), float32
    ``(T' * H' * W', head_dim / 2)``: :func:`vidax.core.mmdit.rope_tables` of ``cfg.rope_axes_dim``, ``rope_theta``."""
    return mmdit.rope_tables(grid, cfg.rope_axes_dim, cfg.rope_theta)


# --------------------------------------------------------------------------------------------
# Embeddings outside the blocks
# --------------------------------------------------------------------------------------------


def guidance_input(guidance_scale: float, batch: int, dtype) -> np.ndarray:
    """The ``guidance`` input of a guidance-distilled model as the reference pipelines build it for weights of
    ``dtype``: ``tensor([guidance_scale] * batch, dtype=dtype) * 1000.0`` (diffusers ``HunyuanVideoPipeline``; the
    original repository's ``sample_video`` the same way), i.e. the scale rounded to ``dtype``, multiplied in float32
    and rounded to ``dtype`` again. In bfloat16, 6.0 gives 6016, not 6000 (an 8-bit significand steps by 32 there).

    Returns:
      float32 ``(batch,)`` (exact values of ``dtype``).
    """
    dtype = np.dtype(dtype)
    scale = np.full((batch,), guidance_scale, np.float64).astype(dtype).astype(np.float32)
    return (scale * np.float32(1000.0)).astype(dtype).astype(np.float32)


def condition_embedding(params: dict, timestep: jax.Array, pooled_projections: jax.Array, guidance: jax.Array | None,
                        cfg: HunyuanVideoTransformerConfig) -> tuple[jax.Array, jax.Array | None]:
    """``time_text_embed`` (``HunyuanVideoConditionEmbedding``).

    Args:
      timestep: float32 ``(B,)``; pooled_projections: ``(B, pooled_projection_dim)``;
      guidance: float32 ``(B,)`` (``guidance_scale * 1000``) for guidance-distilled models, else None.

    Returns:
      ``temb``: float32 ``(B, dim)`` = timestep + pooled text (+ guidance) embeddings; ``token_replace_emb``:
      float32 ``(B, dim)`` = timestep-0 + pooled text embeddings (no guidance term, as the reference) for
      ``token_replace`` models, else None.
    """
    p = params["time_text_embed"]
    pooled = mlp2(p["text_embedder"], pooled_projections.astype(jnp.float32))
    temb = timestep_mlp(p["timestep_embedder"], timestep) + pooled
    if cfg.guidance_embeds:
        temb = temb + timestep_mlp(p["guidance_embedder"], guidance)
    token_replace = None
    if cfg.image_condition_type == "token_replace":
        token_replace = timestep_mlp(p["timestep_embedder"], jnp.zeros_like(timestep)) + pooled
    return temb, token_replace


def refine_text(params: dict, encoder_hidden_states: jax.Array, encoder_attention_mask: jax.Array,
                timestep: jax.Array, cfg: HunyuanVideoTransformerConfig,
                attention_impl: AttentionImpl | str = AttentionImpl.XLA) -> jax.Array:
    """``context_embedder`` (``HunyuanVideoTokenRefiner``): :func:`vidax.core.mmdit.refine_text`.

    Args:
      encoder_hidden_states: ``(B, L, text_embed_dim)``; encoder_attention_mask: ``(B, L)``, nonzero on valid
        tokens (right padding); timestep: float32 ``(B,)``.

    Returns:
      float32 ``(B, L, dim)``.
    """
    return mmdit.refine_text(params["context_embedder"], encoder_hidden_states, encoder_attention_mask, timestep,
                             cfg.attention_head_dim, attention_impl)


def embed_video(params: dict, latents: jax.Array, cfg: HunyuanVideoTransformerConfig) -> jax.Array:
    """``x_embedder`` (``Conv3d``, kernel = stride = ``(p_t, p, p)``): float32 ``(B, T'H'W', dim)``, raster order."""
    return patch_embed(params["x_embedder"]["proj"], latents, (cfg.patch_size_t, cfg.patch_size, cfg.patch_size))


# --------------------------------------------------------------------------------------------
# Blocks (written once for one device and for one shard_map shard)
# --------------------------------------------------------------------------------------------


def single_block(p: dict, x: jax.Array, c: jax.Array, inputs: BlockInputs, cfg: HunyuanVideoTransformerConfig,
                 impl: AttentionImpl, par: ShardContext = ShardContext(), video_tokens: int | None = None):
    """One single-stream block (``HunyuanVideoSingleTransformerBlock`` / its ``TokenReplace`` variant).

    The reference concatenates ``[video; text]`` and splits them again at the end of the block; every operation
    but attention is per token with shared weights, so the two streams are kept apart here (the layout
    :func:`double_block` uses) and meet in attention. Attention and MLP read the same normalised input; the output
    projection over ``[attention; MLP]`` is the sum of its two row-parallel halves, reduced once, bias once.

    Args and returns: as :func:`double_block`.
    """
    video_tokens = x.shape[1] if video_tokens is None else video_tokens
    dtype = p["attn"]["to_q"]["kernel"].dtype
    temb_act = jax.nn.silu(inputs.temb)
    replace_act = None if inputs.token_replace_emb is None else jax.nn.silu(inputs.token_replace_emb)
    (shift, scale, gate), (c_shift, c_scale, c_gate) = modulations(p["norm"], temb_act, replace_act, inputs, 3, par)
    nx = (layer_norm(x, None, NORM_EPS) * (1.0 + scale) + shift).astype(dtype)
    nc = (layer_norm(c, None, NORM_EPS) * (1.0 + c_scale) + c_shift).astype(dtype)
    with jax.named_scope("attention"):
        ax, ac = joint_attention(p["attn"], (VIDEO, VIDEO), nx, nc, inputs, cfg, impl, par, video_tokens)
    po = p["proj_out"]

    def out(a: jax.Array, n: jax.Array) -> jax.Array:
        m = gelu_tanh(linear(p["proj_mlp"], n))
        y = (jnp.matmul(a.astype(po["attn"]["kernel"].dtype), po["attn"]["kernel"], preferred_element_type=jnp.float32)
             + jnp.matmul(m.astype(po["mlp"]["kernel"].dtype), po["mlp"]["kernel"], preferred_element_type=jnp.float32))
        return par.psum_tensor(y) + po["bias"].astype(jnp.float32)

    with jax.named_scope("mlp_out"):
        x = x + gate * out(ax, nx)
        c = c + c_gate * out(ac, nc)
    return x, c


_BLOCKS = {"double": double_block, "single": single_block}


# --------------------------------------------------------------------------------------------
# Forward
# --------------------------------------------------------------------------------------------


def run_blocks(blocks: dict, x: jax.Array, c: jax.Array, inputs: BlockInputs, *, kind: str,
               cfg: HunyuanVideoTransformerConfig, video_tokens: int,
               attention_impl: AttentionImpl | str = AttentionImpl.XLA, mesh: Mesh | None = None,
               rules: ShardingRules = HUNYUAN_VIDEO_RULES) -> tuple[jax.Array, jax.Array]:
    """Run a stack of blocks of one kind (all, or a chunk: the offloading hook) under ``lax.scan``.

    On a mesh the scan runs inside one ``shard_map`` over every mesh axis: batch over ``data``, both streams'
    rows over ``sequence`` (Ulysses), heads, MLP width and AdaLN features over ``tensor`` (Megatron), the
    collectives written in :class:`vidax.core.parallel.ShardContext`.

    Args:
      blocks: stacked parameters of ``params[STACKS[kind]]`` (leading ``layers`` axis, any length).
      x: float32 video stream ``(B, S_pad, dim)``; c: float32 text stream ``(B, L_pad, dim)`` (from
        :func:`forward_prologue`, padded to multiples of sp).
      inputs: :class:`BlockInputs`.
      kind: ``"double"`` or ``"single"`` (static).
      video_tokens: ``S``, video tokens before padding (static).
      cfg, attention_impl, mesh, rules: static; ``mesh`` None runs on one device.

    Returns:
      float32 ``(x, c)``, same shapes; on a mesh sharded ``P(data, sequence, None)``.
    """
    if mesh is not None:
        check_parallel(cfg, mesh, rules)
    return mmdit.run_stack(_BLOCKS[kind], blocks, x, c, inputs, block_specs=transformer_specs(cfg)[STACKS[kind]],
                           cfg=cfg, video_tokens=video_tokens, attention_impl=attention_impl, mesh=mesh, rules=rules)


def block_io_specs(rules: ShardingRules = HUNYUAN_VIDEO_RULES) -> dict:
    """``PartitionSpec`` of each :func:`run_blocks` input on a mesh.

    Returns:
      ``{"stream": P(data, sequence, None)`` (x and c), ``"temb": P(data, None)``, ``"first_frame": P(sequence)``,
      ``"rope": P(sequence, None)`` (cos and sin), ``"kv_lengths": P(data)}`` under :data:`HUNYUAN_VIDEO_RULES`.
    """
    return mmdit.block_io_specs(rules)


def output_head(params: dict, x: jax.Array, temb: jax.Array, grid: tuple[int, int, int],
                cfg: HunyuanVideoTransformerConfig) -> jax.Array:
    """``norm_out`` (``AdaLayerNormContinuous``: LayerNorm, ``* (1 + scale) + shift``), ``proj_out``, unpatchify.

    Args:
      x: float32 video tokens ``(B, S, dim)``; temb: float32 ``(B, dim)``; grid: ``(T', H', W')``.

    Returns:
      float32 ``(B, out_channels, T, H, W)``.
    """
    return mmdit.output_head(params, x, temb, grid, (cfg.patch_size_t, cfg.patch_size, cfg.patch_size),
                             cfg.out_channels)


def check_inputs(cfg: HunyuanVideoTransformerConfig, latent_shape, timestep_shape, text_shape, mask_shape,
                 pooled_shape, guidance_shape) -> None:
    """Check the shapes of :func:`forward`'s inputs (before anything is traced).

    Raises:
      ValueError: every mismatch at once, naming the input, its shape and the expected one.
    """
    token_grid(cfg, latent_shape)
    b, ch = latent_shape[:2]
    problems = []
    if ch != cfg.in_channels:
        problems.append(f"latents have {ch} channels, the transformer takes in_channels={cfg.in_channels}"
                        + (" (noise, image latents and mask concatenated)" if cfg.image_condition_type ==
                           "latent_concat" else ""))
    if math.prod(timestep_shape) not in (1, b) or len(timestep_shape) > 1:
        problems.append(f"timestep shape {tuple(timestep_shape)} (expected ({b},) or a scalar)")
    if len(text_shape) != 3 or text_shape[0] != b or text_shape[2] != cfg.text_embed_dim:
        problems.append(f"encoder_hidden_states shape {tuple(text_shape)} (expected ({b}, L, {cfg.text_embed_dim}))")
    elif tuple(mask_shape) != tuple(text_shape[:2]):
        problems.append(f"encoder_attention_mask shape {tuple(mask_shape)} (expected {tuple(text_shape[:2])})")
    if tuple(pooled_shape) != (b, cfg.pooled_projection_dim):
        problems.append(f"pooled_projections shape {tuple(pooled_shape)} (expected ({b}, {cfg.pooled_projection_dim}))")
    if cfg.guidance_embeds and guidance_shape is None:
        problems.append("guidance is None, but this transformer is guidance-distilled (guidance_embeds=true): pass "
                        "guidance = guidance_scale * 1000 per sample")
    elif not cfg.guidance_embeds and guidance_shape is not None:
        problems.append("guidance was given, but this transformer has no guidance embedder (guidance_embeds=false): "
                        "pass guidance=None")
    elif guidance_shape is not None and (math.prod(guidance_shape) not in (1, b) or len(guidance_shape) > 1):
        problems.append(f"guidance shape {tuple(guidance_shape)} (expected ({b},) or a scalar)")
    if problems:
        raise ValueError("HunyuanVideo transformer inputs: " + "; ".join(problems))


@partial(jax.jit, static_argnames=("cfg", "attention_impl", "mesh", "rules"))
def forward(
    params: dict,
    latents: jax.Array,
    timestep: jax.Array,
    encoder_hidden_states: jax.Array,
    encoder_attention_mask: jax.Array,
    pooled_projections: jax.Array,
    guidance: jax.Array | None = None,
    *,
    cfg: HunyuanVideoTransformerConfig,
    attention_impl: AttentionImpl | str = AttentionImpl.XLA,
    mesh: Mesh | None = None,
    rules: ShardingRules = HUNYUAN_VIDEO_RULES,
) -> jax.Array:
    """Predict the flow-matching velocity for a batch of latents (diffusers ``HunyuanVideoTransformer3DModel.forward``).

    Stages: :func:`forward_prologue` (conditioning, token refiner, patch embedding, padding) ->
    :func:`run_blocks` (dual-stream stack, then single-stream stack) -> :func:`forward_epilogue` (head,
    unpatchify). Outside the block stacks GSPMD partitions the computation (batch over ``data``; embedders,
    refiner and head replicated); call it under ``jax.set_mesh(mesh)`` (``vidax.core.placement.mesh_context``) so
    that attention kernels outside ``shard_map`` (the refiner's) run per shard.

    Args:
      params: parameter tree of :func:`transformer_specs` (on a mesh: placed with
        ``rules.param_shardings(transformer_specs(cfg), mesh)``, or loaded with
        ``load_params(..., shardings=rules.sharding_fn(mesh))``).
      latents: ``(B, in_channels, T, H, W)`` (any float dtype); ``latent_concat`` models: noise, image latents
        and mask concatenated on channels by the caller. ``T`` divisible by ``patch_size_t``, ``H, W`` by
        ``patch_size``.
      timestep: ``(B,)`` (or a scalar) timesteps in ``[0, 1000]``, converted to float32.
      encoder_hidden_states: ``(B, L, text_embed_dim)`` Llama states (any float dtype).
      encoder_attention_mask: ``(B, L)`` (bool / int / float), nonzero on valid tokens; padding on the right (the
        reference's joint mask counts the valid tokens). A sample needs at least one valid token (the reference's
        mean pooling divides by the count).
      pooled_projections: ``(B, pooled_projection_dim)`` pooled CLIP text projection.
      guidance: ``(B,)`` (or a scalar) ``guidance_scale * 1000`` for guidance-distilled models
        (``cfg.guidance_embeds``), else None; used as given (float32). The reference pipelines build it in the
        transformer dtype (bf16: 6.0 -> 6016): :func:`guidance_input` does the same.
      cfg: the architecture (static).
      attention_impl: see :mod:`vidax.core.attention` (static).
      mesh: a :func:`vidax.core.sharding.make_mesh` mesh (static), or None for one device.
      rules: sharding rules (static), default :data:`HUNYUAN_VIDEO_RULES`.

    Returns:
      float32 ``(B, out_channels, T, H, W)``.

    Raises:
      ValueError: an input of the wrong shape, a missing (or unexpected) ``guidance``
        (:func:`check_inputs`); a mesh the model cannot use (:func:`vidax.models.hunyuanvideo.sharding.check_parallel`).
    """
    x, c, inputs = forward_prologue(params, latents, timestep, encoder_hidden_states, encoder_attention_mask,
                                    pooled_projections, guidance, cfg=cfg, attention_impl=attention_impl, mesh=mesh,
                                    rules=rules)
    s = num_tokens(cfg, latents.shape)
    for kind in ("double", "single"):
        with jax.named_scope(STACKS[kind]):
            x, c = run_blocks(params[STACKS[kind]], x, c, inputs, kind=kind, cfg=cfg, video_tokens=s,
                              attention_impl=attention_impl, mesh=mesh, rules=rules)
    return forward_epilogue(params, x, inputs.temb, cfg=cfg, latent_shape=tuple(latents.shape))


def forward_prologue(params: dict, latents: jax.Array, timestep: jax.Array, encoder_hidden_states: jax.Array,
                     encoder_attention_mask: jax.Array, pooled_projections: jax.Array,
                     guidance: jax.Array | None = None, *, cfg: HunyuanVideoTransformerConfig,
                     attention_impl: AttentionImpl | str = AttentionImpl.XLA, mesh: Mesh | None = None,
                     rules: ShardingRules = HUNYUAN_VIDEO_RULES):
    """:func:`forward` up to the block stacks.

    Args and raises: as :func:`forward` (``params`` need not hold the block stacks).

    Returns:
      ``(x, c, inputs)``: float32 video stream ``(B, S_pad, dim)`` and refined text stream ``(B, L_pad, dim)``
      (zero-padded to multiples of sp), and the :class:`BlockInputs`.
    """
    guidance_shape = None if guidance is None else jnp.shape(guidance)
    check_inputs(cfg, latents.shape, jnp.shape(timestep), encoder_hidden_states.shape, encoder_attention_mask.shape,
                 pooled_projections.shape, guidance_shape)
    b = latents.shape[0]
    check_parallel(cfg, mesh, rules, b)
    grid = token_grid(cfg, latents.shape)
    if mesh is not None:
        latents = jax.lax.with_sharding_constraint(
            latents, NamedSharding(mesh, rules.spec(("batch",) + (None,) * (latents.ndim - 1))))
    timestep = jnp.broadcast_to(jnp.asarray(timestep, jnp.float32).reshape(-1), (b,))
    if guidance is not None:
        guidance = jnp.broadcast_to(jnp.asarray(guidance, jnp.float32).reshape(-1), (b,))
    with jax.named_scope("time_text_embed"):
        temb, token_replace = condition_embedding(params, timestep, pooled_projections, guidance, cfg)
    with jax.named_scope("context_embedder"):
        c = refine_text(params, encoder_hidden_states, encoder_attention_mask, timestep, cfg, attention_impl)
    with jax.named_scope("x_embedder"):
        x = embed_video(params, latents, cfg)
    s, n_text = x.shape[1], c.shape[1]
    sp = axis_size(mesh, rules.mesh_axes("tokens"))
    s_pad = padded_length(s, sp)
    x, c = pad_axis(x, 1, s_pad), pad_axis(c, 1, padded_length(n_text, sp))
    cos, sin = (pad_axis(t, 0, s_pad) for t in rope_tables(cfg, grid))
    first = jnp.arange(s_pad) < grid[1] * grid[2] if token_replace is not None else None
    kv_lengths = s + jnp.sum(encoder_attention_mask != 0, axis=1, dtype=jnp.int32)
    return x, c, BlockInputs(temb, token_replace, first, cos, sin, kv_lengths)


def forward_epilogue(params: dict, x: jax.Array, temb: jax.Array, *, cfg: HunyuanVideoTransformerConfig,
                     latent_shape: tuple[int, ...]) -> jax.Array:
    """:func:`forward` after the block stacks: the video tokens (padding cut), then :func:`output_head`.

    Args:
      x: float32 video stream ``(B, S_pad, dim)`` from :func:`run_blocks`; temb: float32 ``(B, dim)``
        (``BlockInputs.temb``); latent_shape: the transformer input's shape ``(B, C, T, H, W)``.

    Returns:
      float32 ``(B, out_channels, T, H, W)``.
    """
    grid = token_grid(cfg, latent_shape)
    return output_head(params, x[:, :math.prod(grid)], temb, grid, cfg)
