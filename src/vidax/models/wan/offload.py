"""The Wan transformer with its blocks offloaded to host memory (:mod:`vidax.core.offload`).

:func:`forward_offloaded` computes exactly :func:`vidax.models.wan.transformer.forward` in three
compiled pieces around a host loop: :func:`~vidax.models.wan.transformer.forward_prologue`
(embedders, token padding) and :func:`~vidax.models.wan.transformer.forward_epilogue` (AdaLN
head) with the resident parameters, and between them one compiled chunk function
(:func:`chunk_function`: :func:`~vidax.models.wan.transformer.run_blocks` over a chunk of the
stacked block parameters) applied to every chunk as it arrives from host memory
(:func:`vidax.core.offload.stream`). The chunk function donates the activations it replaces,
takes and returns them with one fixed sharding (``P(data, sequence, None)`` on a mesh), and is
compiled once per (configuration, mesh, token count): every chunk has the same shapes.

Padding a chunk with zero layers is exact for Wan: a block whose parameters are all zero adds
``0`` to the residual stream (self-attention, cross-attention and FFN each end in a linear
layer with zero kernel and bias; every norm of a zero input stays finite).
"""

from __future__ import annotations

from functools import lru_cache

import jax
from jax.sharding import Mesh, NamedSharding

from vidax.core.attention import AttentionImpl
from vidax.core.offload import OffloadedStack, device_sharding
from vidax.core.sharding import ShardingRules
from vidax.models.wan.config import WanTransformerConfig
from vidax.models.wan.sharding import WAN_RULES, check_parallel
from vidax.models.wan.transformer import (block_io_specs, forward_epilogue, forward_prologue, num_tokens, run_blocks,
                                          transformer_specs)


def io_shardings(mesh: Mesh | None, rules: ShardingRules = WAN_RULES, per_token: bool = False) -> dict:
    """The sharding of each block-loop input (``x, ctx, temb6, cos, sin``) and of ``temb``.

    On a mesh: ``NamedSharding`` s of :func:`~vidax.models.wan.transformer.block_io_specs`
    (``per_token``: Wan2.2 per-token timesteps, ``temb6`` split over ``sequence`` with the tokens).
    Without: the first local device for all (committed, so the first chunk call and the
    following ones, which take the previous call's output, hit one compilation).
    """
    if mesh is None:
        return {k: device_sharding(None) for k in ("x", "temb", "temb6", "ctx", "cos", "sin")}
    return {k: NamedSharding(mesh, v) for k, v in block_io_specs(rules, per_token=per_token).items()}


@lru_cache(maxsize=64)
def prologue_function(cfg: WanTransformerConfig, mesh: Mesh | None, rules: ShardingRules = WAN_RULES):
    """The jitted :func:`~vidax.models.wan.transformer.forward_prologue`, outputs pinned to the block-loop shardings.

    Call as ``fn(resident_params, latents, timestep, context, cos, sin)``.
    """

    def _offload_prologue(params, latents, timestep, context, cos, sin):
        return forward_prologue(params, latents, timestep, context, cos, sin, cfg=cfg, mesh=mesh, rules=rules)

    io = io_shardings(mesh, rules)
    return jax.jit(_offload_prologue, out_shardings=(io["x"], io["temb"], io["temb6"], io["ctx"], io["cos"], io["sin"]))


@lru_cache(maxsize=64)
def chunk_function(cfg: WanTransformerConfig, attention_impl: AttentionImpl | str, mesh: Mesh | None,
                   rules: ShardingRules = WAN_RULES, valid_tokens: int | None = None, per_token: bool = False):
    """The one compiled block loop of an offloaded forward: ``fn(chunk, x, ctx, temb6, cos, sin) -> x``.

    ``chunk`` is a chunk of stacked block parameters in device memory (any leading length, the
    resident shardings); ``x`` float32 ``(B, S_pad, D)`` is donated and returned with the same
    sharding, so consecutive calls hit one compilation. ``per_token``: ``temb6`` is per token
    ``(B, S_pad, 6, D)`` (Wan2.2 TI2V image-to-video). Cached per arguments (all hashable).
    The traced function is named ``_offload_chunk`` (what compile-event listeners see).
    """
    impl = AttentionImpl(attention_impl)

    def _offload_chunk(blocks, x, ctx, temb6, cos, sin):
        return run_blocks(blocks, x, ctx, temb6, cos, sin, cfg=cfg, attention_impl=impl, mesh=mesh, rules=rules,
                          valid_tokens=valid_tokens)

    io = io_shardings(mesh, rules, per_token)
    if mesh is None:
        return jax.jit(_offload_chunk, donate_argnums=1, out_shardings=io["x"])
    blocks = rules.param_shardings(transformer_specs(cfg), mesh)["blocks"]
    return jax.jit(_offload_chunk, donate_argnums=1, out_shardings=io["x"],
                   in_shardings=(blocks, io["x"], io["ctx"], io["temb6"], io["cos"], io["sin"]))


@lru_cache(maxsize=64)
def epilogue_function(cfg: WanTransformerConfig, latent_shape: tuple[int, ...]):
    """The jitted :func:`~vidax.models.wan.transformer.forward_epilogue`: ``fn(resident_params, x, temb)``."""

    def _offload_epilogue(params, x, temb):
        return forward_epilogue(params, x, temb, cfg=cfg, latent_shape=latent_shape)

    return jax.jit(_offload_epilogue)


def offload_blocks(params: dict, chunk: int, cfg: WanTransformerConfig, mesh: Mesh | None = None,
                   rules: ShardingRules = WAN_RULES, memory_kind: str | None = "auto") -> tuple[dict, OffloadedStack]:
    """Split a resident parameter tree into resident parameters and host-memory block chunks.

    For tests and benchmarks that start from resident parameters; a pipeline loads the chunks
    straight into host memory instead (``WanPipeline.from_pretrained(offload_chunk=...)``).

    Args:
      params: the full tree of :func:`~vidax.models.wan.transformer.transformer_specs` (any placement).
      chunk: blocks per chunk, ``1 <= chunk <= cfg.num_layers`` (padded when it does not divide).
      mesh, rules: the chunks' device shardings (the resident ones); None: the first local device.
      memory_kind: host memory kind, "auto" (``pinned_host`` where available), or None (NumPy).

    Returns:
      ``(resident, stack)``: ``params`` without ``"blocks"``, and the :class:`~vidax.core.offload.OffloadedStack`.

    Raises:
      ValueError: a chunk size outside ``[1, num_layers]``.
    """
    resident = {k: v for k, v in params.items() if k != "blocks"}
    if mesh is None:
        dev = jax.tree.map(lambda _: device_sharding(None), params["blocks"])
    else:
        dev = rules.param_shardings(transformer_specs(cfg), mesh)["blocks"]
    return resident, OffloadedStack.from_stacked(params["blocks"], chunk, dev, memory_kind)


def forward_offloaded(
    resident: dict,
    stack: OffloadedStack,
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
    overlap: bool = True,
    timings: list | None = None,
) -> jax.Array:
    """:func:`vidax.models.wan.transformer.forward` with the blocks streamed from host memory.

    Args:
      resident: the parameters outside ``"blocks"`` (device memory, resident shardings).
      stack: the blocks as host-memory chunks (:func:`offload_blocks`, or a pipeline's loader).
      latents, timestep, context, cos, sin, cfg, attention_impl, mesh, rules: as for ``forward``.
      overlap: overlap the copy of chunk ``i + 1`` with chunk ``i``'s compute
        (:func:`vidax.core.offload.stream`); False: the paper's serial mode.
      timings: with ``overlap=False``, a list receiving ``(copy seconds, compute seconds)`` per chunk.

    Returns:
      float32 ``(B, out_channels, T, H, W)``, equal to ``forward`` with the blocks resident.

    Raises:
      ValueError: a mesh the model cannot use (:func:`~vidax.models.wan.sharding.check_parallel`).
    """
    check_parallel(cfg, mesh, rules, latents.shape[0])
    x, temb, temb6, ctx, cos, sin = prologue_function(cfg, mesh, rules)(resident, latents, timestep, context, cos, sin)
    run = chunk_function(cfg, attention_impl, mesh, rules, num_tokens(cfg, latents.shape))
    x = run_stack(stack, run, x, ctx, temb6, cos, sin, overlap=overlap, timings=timings)
    return epilogue_function(cfg, tuple(latents.shape))(resident, x, temb)


def run_stack(stack: OffloadedStack, run, x, ctx, temb6, cos, sin, *, overlap: bool = True, timings=None):
    """Stream ``stack`` through the (compiled) chunk function ``run``; returns the blocks' output ``x``."""
    from vidax.core.offload import stream

    return stream(stack, lambda chunk, h: run(chunk, h, ctx, temb6, cos, sin), x, overlap=overlap, timings=timings)
