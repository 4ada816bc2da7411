"""The HunyuanVideo-1.5 diffusion transformer, as pure functions over a parameter dict.

Follows diffusers ``models/transformers/transformer_hunyuan_video15.py`` (``HunyuanVideo15Transformer3DModel``,
``HunyuanVideo15PatchEmbed``, ``HunyuanVideo15TimeEmbedding``, ``HunyuanVideo15TokenRefiner``,
``HunyuanVideo15ByT5TextProjection``, ``HunyuanVideo15ImageProjection``, ``HunyuanVideo15RotaryPosEmbed``,
``HunyuanVideo15TransformerBlock``, ``HunyuanVideo15AttnProcessor2_0``) and the original repository
(Tencent-Hunyuan/HunyuanVideo-1.5 ``hyvideo/models/transformers/hunyuanvideo_1_5_transformer.py``:
``HunyuanVideo_1_5_DiffusionTransformer``); where they differ, docs/design.md ("HunyuanVideo-1.5") says which is
followed.

Architecture (an MMDiT after Flux, HunyuanVideo 13B's dual-stream half): the latents ``(B, C, T, H, W)`` (noise,
condition latents and mask concatenated on channels) are cut into ``(p_t, p, p)`` patches (video tokens). Three
context streams: the Qwen2.5-VL states refined by the token refiner (conditioned on the timestep and on the states
mean-pooled over their mask), the byT5 glyph states through a LayerNorm + 3-linear GELU projection, and the SigLIP
image features through a LayerNorm + 2-linear GELU projection + LayerNorm; a learned condition-type vector
(``cond_type_embed``: 0 Qwen, 1 byT5, 2 image) is added to each. The context is then reordered per sample: valid
image tokens, valid byT5 tokens, valid Qwen tokens, then the invalid ones in the same stream order (invalid byT5 and
Qwen tokens zeroed). The conditioning vector is the timestep embedding (plus, for the step-distilled MeanFlow model,
an embedding of ``timestep_r``). Then ``num_layers`` dual-stream blocks (:func:`vidax.core.mmdit.double_block`: video
and context each with their own weights and AdaLN, joint attention over ``[video; context]``, RMS q/k norms, 3D RoPE on
the video tokens) and the final AdaLN head.

Text-to-video: image embeddings that are all zero (the pipelines pass zeros) make that sample's image tokens zero and
masked out, as the reference; ``image_embeds=None`` leaves the image stream out altogether, which gives the same
video output (masked keys contribute nothing, and context rows never reach the video rows) with 729 fewer context
tokens per block.

Padding: every mask is a per-token boolean (any pattern: the reordering puts each sample's valid tokens first with a
stable argsort and a gather, static shapes), and the blocks see one key length per sample, ``S + valid context
tokens`` (:func:`vidax.core.attention.attention`'s ``kv_lengths``), never a dense ``(B, H, Sq, Sk)`` mask (paper Table 4
fault 6: the reference's dense mask runs 720p out of memory). The Qwen tokens are put valid-first before the token
refiner too, so its one-length-per-sample attention is exact for any mask (the refiner has no positions: attention is
equivariant under a permutation of its tokens).

Layout: latents ``(B, C, T, H, W)``, as the reference and its pipelines keep them.

Stages (each in a ``jax.named_scope``): :func:`time_embedding`, :func:`embed_context` (refiner, projections,
reordering), :func:`embed_video` -> :func:`run_blocks` (the stack under ``lax.scan``: one block compiles once) ->
:func:`forward_epilogue` (head, unpatchify). :func:`forward_prologue` / :func:`run_blocks` / :func:`forward_epilogue`
are the offloading hook (:mod:`vidax.models.hunyuanvideo15.block_loop`).

Parallelism (``forward(..., mesh=...)``): the block stack runs inside one ``shard_map`` over the ``(data, tensor,
sequence)`` mesh (:func:`vidax.core.mmdit.run_stack`; rules in :mod:`vidax.models.hunyuanvideo15.sharding`). Outside
it GSPMD partitions the per-sample work by batch; the token refiner runs inside an explicit ``shard_map`` (batch over
``data``, replicated otherwise), so an attention kernel there (cuDNN, Pallas, the CPU FFI kernel) is never handed to
GSPMD (paper Table 4 fault 7).

Precision: the residual streams stay float32 (paper Table 4 fault 1); matmul inputs are cast to the weight dtype with
float32 accumulation; LayerNorms and RMSNorms compute in float32; the AdaLN projections, the timestep embedders, the
patch embedding, the byT5 and image projections, ``cond_type_embed`` and all norm parameters are float32 leaves.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding

from vidax.core import mmdit
from vidax.core.attention import AttentionImpl
from vidax.core.embeddings import patch_embed
from vidax.core.layers import gelu, layer_norm, linear
from vidax.core.mmdit import TIME_PROJ_DIM, BlockInputs, timestep_mlp
from vidax.core.parallel import pad_axis, padded_length
from vidax.core.params import ParamSpec, SpecTree, linear_spec
from vidax.core.sharding import ShardingRules, axis_size
from vidax.models.hunyuanvideo15.config import BYT5_HIDDEN_DIM, HunyuanVideo15TransformerConfig
from vidax.models.hunyuanvideo15.sharding import HUNYUAN_VIDEO15_RULES, check_parallel

#: The block stack's parameter subtree.
STACK = "transformer_blocks"
#: ``cond_type_embed`` rows of the three context streams (diffusers' and the original's numbering).
COND_QWEN, COND_BYT5, COND_IMAGE = 0, 1, 2
#: Epsilon of the byT5 and image projections' LayerNorms (``nn.LayerNorm``'s default).
PROJECTION_NORM_EPS = 1e-5

# --------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------


def _fp32_linear(n_in: int, n_out: int, out_axis: str | None = None) -> dict:
    return linear_spec(n_in, n_out, (None, out_axis), fp32=True)


def _norm(dim: int, axis: str | None = None) -> dict:
    return {"scale": ParamSpec((dim,), fp32=True, axes=(axis,)), "bias": ParamSpec((dim,), fp32=True, axes=(axis,))}


def transformer_specs(cfg: HunyuanVideo15TransformerConfig) -> SpecTree:
    """The spec tree of a HunyuanVideo-1.5 transformer: every parameter's shape, fp32 pin and logical axes.

    Paths are diffusers' module names (:mod:`vidax.models.hunyuanvideo15.keymap` lists the exceptions: the feed-forward
    pairs ``ff/up``, ``ff/down``, ``norm_out`` read as ``scale_linear`` and ``shift_linear``, ``cond_type_embed``'s
    table as ``embedding``). Stacked blocks lead with a ``layers`` axis: ``transformer_blocks`` (``num_layers``),
    ``context_embedder/token_refiner/refiner_blocks`` (``num_refiner_layers``). Kernels are ``(in, out)``; the patch
    kernel is ``(p_t, p, p, in_channels, dim)``.
    """
    d, p, pt = cfg.dim, cfg.patch_size, cfg.patch_size_t
    img, t2 = cfg.image_embed_dim, cfg.text_embed_2_dim
    time_embed = {"timestep_embedder": mmdit.embedder_spec(TIME_PROJ_DIM, d)}
    if cfg.use_meanflow:
        time_embed["timestep_embedder_r"] = mmdit.embedder_spec(TIME_PROJ_DIM, d)
    return {
        "x_embedder": {"proj": {
            "kernel": ParamSpec((pt, p, p, cfg.in_channels, d), fp32=True, axes=(None, None, None, None, "embed")),
            "bias": ParamSpec((d,), fp32=True, axes=("embed",)),
        }},
        "image_embedder": {"norm_in": _norm(img), "linear_1": _fp32_linear(img, img),
                           "linear_2": _fp32_linear(img, d, "embed"), "norm_out": _norm(d, "embed")},
        "context_embedder": mmdit.token_refiner_specs(cfg.text_embed_dim, d, cfg.refiner_mlp_dim,
                                                      cfg.num_refiner_layers),
        "context_embedder_2": {"norm": _norm(t2), "linear_1": _fp32_linear(t2, BYT5_HIDDEN_DIM),
                               "linear_2": _fp32_linear(BYT5_HIDDEN_DIM, BYT5_HIDDEN_DIM),
                               "linear_3": _fp32_linear(BYT5_HIDDEN_DIM, d, "embed")},
        "time_embed": time_embed,
        "cond_type_embed": {"embedding": ParamSpec((3, d), fp32=True, axes=(None, "embed"))},
        STACK: mmdit.double_block_specs(d, cfg.attention_head_dim, cfg.mlp_dim, cfg.num_layers),
        **mmdit.output_head_specs(d, pt * p * p * cfg.out_channels),
    }


# --------------------------------------------------------------------------------------------
# Shapes
# --------------------------------------------------------------------------------------------


def token_grid(cfg: HunyuanVideo15TransformerConfig, latent_shape: tuple[int, ...]) -> tuple[int, int, int]:
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


def num_tokens(cfg: HunyuanVideo15TransformerConfig, latent_shape: tuple[int, ...]) -> int:
    """Video tokens of latents of ``latent_shape`` (the context tokens come on top)."""
    return math.prod(token_grid(cfg, latent_shape))


def rope_tables(cfg: HunyuanVideo15TransformerConfig, grid: tuple[int, int, int]) -> tuple[jax.Array, jax.Array]:
    """3D RoPE ``cos, sin`` of the video tokens (``HunyuanVideo15RotaryPosEmbed``), float32 ``(T'H'W', head_dim / 2)``
    (:func:`vidax.core.mmdit.rope_tables`)."""
    return mmdit.rope_tables(grid, cfg.rope_axes_dim, cfg.rope_theta)


# --------------------------------------------------------------------------------------------
# Embeddings outside the blocks
# --------------------------------------------------------------------------------------------


def time_embedding(params: dict, timestep: jax.Array, timestep_r: jax.Array | None) -> jax.Array:
    """``time_embed`` (``HunyuanVideo15TimeEmbedding``): float32 ``(B, dim)``, the timestep's embedding plus, when
    ``timestep_r`` is given (MeanFlow), ``timestep_embedder_r``'s embedding of it.

    Args:
      timestep, timestep_r: float32 ``(B,)`` in ``[0, 1000]``.
    """
    p = params["time_embed"]
    temb = timestep_mlp(p["timestep_embedder"], timestep)
    if timestep_r is not None:
        temb = temb + timestep_mlp(p["timestep_embedder_r"], timestep_r)
    return temb


def byt5_projection(params: dict, states: jax.Array) -> jax.Array:
    """``context_embedder_2`` (``HunyuanVideo15ByT5TextProjection``, the original's ``ByT5Mapper``): LayerNorm, then
    linear, GELU (erf), linear, GELU, linear; float32 ``(B, L2, dim)``."""
    p = params["context_embedder_2"]
    h = layer_norm(states, p["norm"], PROJECTION_NORM_EPS)
    h = gelu(linear(p["linear_1"], h, jnp.float32))
    h = gelu(linear(p["linear_2"], h, jnp.float32))
    return linear(p["linear_3"], h, jnp.float32)


def image_projection(params: dict, image_embeds: jax.Array) -> jax.Array:
    """``image_embedder`` (``HunyuanVideo15ImageProjection``, the original's ``VisionProjection``): LayerNorm, linear,
    GELU (erf), linear, LayerNorm; float32 ``(B, N, dim)``."""
    p = params["image_embedder"]
    h = layer_norm(image_embeds, p["norm_in"], PROJECTION_NORM_EPS)
    h = linear(p["linear_2"], gelu(linear(p["linear_1"], h, jnp.float32)), jnp.float32)
    return layer_norm(h, p["norm_out"], PROJECTION_NORM_EPS)


def _valid_first(x: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Each sample's rows of ``x (B, N, ...)`` with the valid ones (``mask (B, N)`` True) first, both groups in their
    original order (a stable argsort of ``~mask`` and one gather: static shapes). Returns ``(x, mask)`` reordered."""
    order = jnp.argsort((~mask).astype(jnp.int32), axis=1, stable=True)
    index = order.reshape(*order.shape, *([1] * (x.ndim - 2)))
    return jnp.take_along_axis(x, index, axis=1), jnp.take_along_axis(mask, order, axis=1)


def embed_context(params: dict, encoder_hidden_states: jax.Array, encoder_attention_mask: jax.Array,
                  encoder_hidden_states_2: jax.Array, encoder_attention_mask_2: jax.Array,
                  image_embeds: jax.Array | None, timestep: jax.Array, cfg: HunyuanVideo15TransformerConfig,
                  attention_impl: AttentionImpl | str = AttentionImpl.XLA, mesh: Mesh | None = None,
                  rules: ShardingRules = HUNYUAN_VIDEO15_RULES) -> tuple[jax.Array, jax.Array]:
    """The joint context stream: refined Qwen tokens, projected byT5 and image tokens, each plus its
    ``cond_type_embed`` row, reordered per sample to ``[valid image, valid byT5, valid Qwen, invalid image,
    invalid byT5 (zeros), invalid Qwen (zeros)]`` (diffusers ``HunyuanVideo15Transformer3DModel.forward``; the
    original's two ``reorder_txt_token`` calls give the same order).

    Text-to-video rule, per sample: image embeddings that are all zero give image tokens of zero (plus their
    ``cond_type_embed`` row), all masked out.

    Args:
      encoder_hidden_states: ``(B, L, text_embed_dim)`` Qwen2.5-VL states; encoder_attention_mask: ``(B, L)``,
        nonzero on valid tokens (any pattern; at least one valid token per sample: the refiner's mean pooling divides
        by the count, as the reference's).
      encoder_hidden_states_2: ``(B, L2, text_embed_2_dim)`` byT5 states; encoder_attention_mask_2: ``(B, L2)`` (any
        pattern, all zero allowed).
      image_embeds: ``(B, N, image_embed_dim)`` SigLIP features, or None (no image stream).
      timestep: float32 ``(B,)`` (the refiner's conditioning).
      mesh, rules: on a mesh the refiner runs inside an explicit ``shard_map`` (module docstring).

    Returns:
      ``(c, valid)``: float32 ``(B, N + L2 + L, dim)`` and int32 ``(B,)`` valid context tokens per sample (its
      first rows).
    """
    mask = encoder_attention_mask != 0
    states, mask = _valid_first(encoder_hidden_states, mask)

    def refine(p, states, mask, timestep):
        return mmdit.refine_text(p, states, mask, timestep, cfg.attention_head_dim, attention_impl)

    if mesh is not None:
        refine = mmdit.replicated_shard_map(refine, mesh, rules, (False, True, True, True))
    cond = params["cond_type_embed"]["embedding"].astype(jnp.float32)
    with jax.named_scope("token_refiner"):
        text = refine(params["context_embedder"], states, mask, timestep) + cond[COND_QWEN]
    text = jnp.where(mask[..., None], text, 0.0)
    mask_2 = encoder_attention_mask_2 != 0
    with jax.named_scope("byt5"):
        byt5 = jnp.where(mask_2[..., None], byt5_projection(params, encoder_hidden_states_2) + cond[COND_BYT5], 0.0)
    parts, masks = [byt5, text], [mask_2, mask]
    if image_embeds is not None:
        with jax.named_scope("image"):
            t2v = jnp.all(image_embeds == 0, axis=(1, 2))  # (B,)
            image = jnp.where(t2v[:, None, None], 0.0, image_projection(params, image_embeds)) + cond[COND_IMAGE]
        parts.insert(0, image)
        masks.insert(0, jnp.broadcast_to(~t2v[:, None], image.shape[:2]))
    c, joint = _valid_first(jnp.concatenate(parts, axis=1), jnp.concatenate(masks, axis=1))
    return c, jnp.sum(joint, axis=1, dtype=jnp.int32)


def embed_video(params: dict, latents: jax.Array, cfg: HunyuanVideo15TransformerConfig) -> jax.Array:
    """``x_embedder`` (``Conv3d``, kernel = stride = ``(p_t, p, p)``): float32 ``(B, T'H'W', dim)``, raster order."""
    return patch_embed(params["x_embedder"]["proj"], latents, (cfg.patch_size_t, cfg.patch_size, cfg.patch_size))


# --------------------------------------------------------------------------------------------
# Forward
# --------------------------------------------------------------------------------------------


def run_blocks(blocks: dict, x: jax.Array, c: jax.Array, inputs: BlockInputs, *,
               cfg: HunyuanVideo15TransformerConfig, video_tokens: int,
               attention_impl: AttentionImpl | str = AttentionImpl.XLA, mesh: Mesh | None = None,
               rules: ShardingRules = HUNYUAN_VIDEO15_RULES) -> tuple[jax.Array, jax.Array]:
    """Run dual-stream blocks (all, or a chunk: the offloading hook) under ``lax.scan``
    (:func:`vidax.core.mmdit.run_stack` over :func:`vidax.core.mmdit.double_block`).

    Args:
      blocks: stacked parameters of ``params["transformer_blocks"]`` (leading ``layers`` axis, any length).
      x: float32 video stream ``(B, S_pad, dim)``; c: float32 context stream ``(B, L_pad, dim)`` (from
        :func:`forward_prologue`, padded to multiples of sp).
      inputs: :class:`vidax.core.mmdit.BlockInputs`.
      video_tokens: ``S``, video tokens before padding (static).
      cfg, attention_impl, mesh, rules: static; ``mesh`` None runs on one device.

    Returns:
      float32 ``(x, c)``, same shapes; on a mesh sharded ``P(data, sequence, None)``.

    Raises:
      ValueError: a mesh the model cannot use (:func:`vidax.models.hunyuanvideo15.sharding.check_parallel`).
    """
    if mesh is not None:
        check_parallel(cfg, mesh, rules)
    return mmdit.run_stack(mmdit.double_block, blocks, x, c, inputs, block_specs=transformer_specs(cfg)[STACK],
                           cfg=cfg, video_tokens=video_tokens, attention_impl=attention_impl, mesh=mesh, rules=rules)


def _shape(a) -> tuple[int, ...] | None:
    return None if a is None else tuple(jnp.shape(a))


def check_inputs(cfg: HunyuanVideo15TransformerConfig, latent_shape, timestep_shape, text_shape, mask_shape,
                 text_2_shape, mask_2_shape, image_shape, timestep_r_shape) -> None:
    """Check the shapes of :func:`forward`'s inputs (before anything is traced).

    Raises:
      ValueError: every mismatch at once, naming the input, its shape and the expected one.
    """
    token_grid(cfg, latent_shape)
    b, ch = latent_shape[:2]
    problems = []
    if ch != cfg.in_channels:
        problems.append(f"latents have {ch} channels, the transformer takes in_channels={cfg.in_channels} (noise, "
                        "condition latents and mask concatenated)")
    for name, shape in (("timestep", timestep_shape), ("timestep_r", timestep_r_shape)):
        if shape is not None and (math.prod(shape) not in (1, b) or len(shape) > 1):
            problems.append(f"{name} shape {shape} (expected ({b},) or a scalar)")
    if timestep_r_shape is not None and not cfg.use_meanflow:
        problems.append("timestep_r was given, but this transformer has no MeanFlow embedder (use_meanflow=false): "
                        "pass timestep_r=None")
    for name, shape, width, mshape in (("encoder_hidden_states", text_shape, cfg.text_embed_dim, mask_shape),
                                       ("encoder_hidden_states_2", text_2_shape, cfg.text_embed_2_dim, mask_2_shape)):
        if len(shape) != 3 or shape[0] != b or shape[2] != width:
            problems.append(f"{name} shape {shape} (expected ({b}, L, {width}))")
        elif mshape != shape[:2]:
            mask_name = name.replace("hidden_states", "attention_mask")
            problems.append(f"{mask_name} shape {mshape} (expected {shape[:2]})")
    if image_shape is not None and (len(image_shape) != 3 or image_shape[0] != b
                                    or image_shape[2] != cfg.image_embed_dim):
        problems.append(f"image_embeds shape {image_shape} (expected ({b}, N, {cfg.image_embed_dim}), or None)")
    if problems:
        raise ValueError("HunyuanVideo-1.5 transformer inputs: " + "; ".join(problems))


@partial(jax.jit, static_argnames=("cfg", "attention_impl", "mesh", "rules"))
def forward(
    params: dict,
    latents: jax.Array,
    timestep: jax.Array,
    encoder_hidden_states: jax.Array,
    encoder_attention_mask: jax.Array,
    encoder_hidden_states_2: jax.Array,
    encoder_attention_mask_2: jax.Array,
    image_embeds: jax.Array | None = None,
    timestep_r: jax.Array | None = None,
    *,
    cfg: HunyuanVideo15TransformerConfig,
    attention_impl: AttentionImpl | str = AttentionImpl.XLA,
    mesh: Mesh | None = None,
    rules: ShardingRules = HUNYUAN_VIDEO15_RULES,
) -> jax.Array:
    """Predict the flow-matching velocity for a batch of latents (diffusers
    ``HunyuanVideo15Transformer3DModel.forward``).

    Stages: :func:`forward_prologue` (conditioning, context, patch embedding, padding) -> :func:`run_blocks` ->
    :func:`forward_epilogue` (head, unpatchify).

    Args:
      params: parameter tree of :func:`transformer_specs` (on a mesh: placed with
        ``rules.param_shardings(transformer_specs(cfg), mesh)``, or loaded with
        ``load_params(..., shardings=rules.sharding_fn(mesh))``).
      latents: ``(B, in_channels, T, H, W)`` (any float dtype): noise latents, condition latents and mask
        concatenated on channels by the caller (zeros for text-to-video). ``T`` divisible by ``patch_size_t``,
        ``H, W`` by ``patch_size``.
      timestep: ``(B,)`` (or a scalar) timesteps in ``[0, 1000]``, converted to float32.
      encoder_hidden_states: ``(B, L, text_embed_dim)`` Qwen2.5-VL states (any float dtype).
      encoder_attention_mask: ``(B, L)`` (bool / int / float), nonzero on valid tokens, any pattern; a sample needs at
        least one valid token.
      encoder_hidden_states_2: ``(B, L2, text_embed_2_dim)`` byT5 glyph states.
      encoder_attention_mask_2: ``(B, L2)``, nonzero on valid tokens (all zero: no glyph text).
      image_embeds: ``(B, N, image_embed_dim)`` SigLIP features (all zero for text-to-video: masked out), or None
        (no image stream; the same video output as zeros).
      timestep_r: MeanFlow models (``cfg.use_meanflow``): ``(B,)`` (or a scalar) second timestep (the pipelines pass
        the next step's timestep, 0 at the last), or None (the reference then adds no ``r`` embedding).
      cfg: the architecture (static).
      attention_impl: see :mod:`vidax.core.attention` (static).
      mesh: a :func:`vidax.core.sharding.make_mesh` mesh (static), or None for one device.
      rules: sharding rules (static), default :data:`HUNYUAN_VIDEO15_RULES`.

    Returns:
      float32 ``(B, out_channels, T, H, W)``.

    Raises:
      ValueError: an input of the wrong shape, an unexpected ``timestep_r`` (:func:`check_inputs`); a mesh the
        model cannot use (:func:`vidax.models.hunyuanvideo15.sharding.check_parallel`).
    """
    x, c, inputs = forward_prologue(params, latents, timestep, encoder_hidden_states, encoder_attention_mask,
                                    encoder_hidden_states_2, encoder_attention_mask_2, image_embeds, timestep_r,
                                    cfg=cfg, attention_impl=attention_impl, mesh=mesh, rules=rules)
    with jax.named_scope(STACK):
        x, c = run_blocks(params[STACK], x, c, inputs, cfg=cfg, video_tokens=num_tokens(cfg, latents.shape),
                          attention_impl=attention_impl, mesh=mesh, rules=rules)
    return forward_epilogue(params, x, inputs.temb, cfg=cfg, latent_shape=tuple(latents.shape))


def forward_prologue(params: dict, latents: jax.Array, timestep: jax.Array, encoder_hidden_states: jax.Array,
                     encoder_attention_mask: jax.Array, encoder_hidden_states_2: jax.Array,
                     encoder_attention_mask_2: jax.Array, image_embeds: jax.Array | None = None,
                     timestep_r: jax.Array | None = None, *, cfg: HunyuanVideo15TransformerConfig,
                     attention_impl: AttentionImpl | str = AttentionImpl.XLA, mesh: Mesh | None = None,
                     rules: ShardingRules = HUNYUAN_VIDEO15_RULES):
    """:func:`forward` up to the block stack.

    Args and raises: as :func:`forward` (``params`` need not hold the block stack).

    Returns:
      ``(x, c, inputs)``: float32 video stream ``(B, S_pad, dim)`` and context stream ``(B, L_pad, dim)``
      (zero-padded to multiples of sp), and the :class:`vidax.core.mmdit.BlockInputs` (``kv_lengths``: ``S`` + the
      valid context tokens).
    """
    check_inputs(cfg, tuple(latents.shape), _shape(timestep), _shape(encoder_hidden_states),
                 _shape(encoder_attention_mask), _shape(encoder_hidden_states_2), _shape(encoder_attention_mask_2),
                 _shape(image_embeds), _shape(timestep_r))
    b = latents.shape[0]
    check_parallel(cfg, mesh, rules, b)
    grid = token_grid(cfg, latents.shape)
    if mesh is not None:
        latents = jax.lax.with_sharding_constraint(
            latents, NamedSharding(mesh, rules.spec(("batch",) + (None,) * (latents.ndim - 1))))

    def per_sample(t):
        return None if t is None else jnp.broadcast_to(jnp.asarray(t, jnp.float32).reshape(-1), (b,))

    timestep, timestep_r = per_sample(timestep), per_sample(timestep_r)
    with jax.named_scope("time_embed"):
        temb = time_embedding(params, timestep, timestep_r)
    with jax.named_scope("context"):
        c, valid = embed_context(params, encoder_hidden_states, encoder_attention_mask, encoder_hidden_states_2,
                                 encoder_attention_mask_2, image_embeds, timestep, cfg, attention_impl, mesh, rules)
    with jax.named_scope("x_embedder"):
        x = embed_video(params, latents, cfg)
    s, n_context = x.shape[1], c.shape[1]
    sp = axis_size(mesh, rules.mesh_axes("tokens"))
    s_pad = padded_length(s, sp)
    x, c = pad_axis(x, 1, s_pad), pad_axis(c, 1, padded_length(n_context, sp))
    cos, sin = (pad_axis(t, 0, s_pad) for t in rope_tables(cfg, grid))
    return x, c, BlockInputs(temb, None, None, cos, sin, s + valid)


def forward_epilogue(params: dict, x: jax.Array, temb: jax.Array, *, cfg: HunyuanVideo15TransformerConfig,
                     latent_shape: tuple[int, ...]) -> jax.Array:
    """:func:`forward` after the block stack: the video tokens (padding cut), ``norm_out``, ``proj_out``, unpatchify
    (:func:`vidax.core.mmdit.output_head`).

    Args:
      x: float32 video stream ``(B, S_pad, dim)`` from :func:`run_blocks`; temb: float32 ``(B, dim)``
        (``BlockInputs.temb``); latent_shape: the transformer input's shape ``(B, C, T, H, W)``.

    Returns:
      float32 ``(B, out_channels, T, H, W)``.
    """
    grid = token_grid(cfg, latent_shape)
    return mmdit.output_head(params, x[:, :math.prod(grid)], temb, grid,
                             (cfg.patch_size_t, cfg.patch_size, cfg.patch_size), cfg.out_channels)


__all__ = ["COND_BYT5", "COND_IMAGE", "COND_QWEN", "STACK", "byt5_projection", "check_inputs", "embed_context",
           "embed_video", "forward", "forward_epilogue", "forward_prologue", "image_projection", "num_tokens",
           "rope_tables", "run_blocks", "time_embedding", "token_grid", "transformer_specs"]
