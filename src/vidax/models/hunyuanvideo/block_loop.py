"""The HunyuanVideo step with its two block stacks run from the host: the host block loop and weight offloading.

``HunyuanVideoPipeline.from_pretrained(block_loop="host")`` (the CPU default, as for Wan and CogVideoX:
docs/design.md, "Block loop") loads both stacks (the dual-stream ``transformer_blocks`` and the single-stream
``single_transformer_blocks``) as one-block chunks in device memory; ``from_pretrained(offload_chunk=N)`` loads them
as chunks of ``N`` blocks in host memory, streamed to the devices every step (:mod:`vidax.core.offload`; one chunk
size for both stacks: the paper's "chunk 20/40" is ``offload_chunk=20``, the 20 dual-stream blocks in one chunk and
the 40 single-stream blocks in two). A stack whose block count ``N`` does not divide gets a zero-padded last chunk,
and a zero block of either kind is the identity (every residual branch ends in a zero AdaLN gate).

Either way the step computes exactly the pipeline's scanned step (:func:`vidax.models.hunyuanvideo.pipeline._step`)
in four compiled pieces: a prologue (the true-CFG batch, conditioning, token refiner, patch embedding:
:func:`~vidax.models.hunyuanvideo.transformer.forward_prologue`), one block program per stack kind
(:func:`~vidax.models.hunyuanvideo.transformer.run_blocks` over one chunk, called for every chunk of its stack, the
two streams donated) and an epilogue (the head and the true-CFG combination). Each block program compiles once per
(configuration, kind, mesh, token count): every chunk of a stack has one shape, and the streams enter and leave it
with one sharding (``P(data, sequence, None)`` on a mesh). The chunks of both stacks are streamed as one sequence
(:func:`vidax.core.offload.stream_stacks`).
"""

from __future__ import annotations

from functools import lru_cache, partial
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from vidax.core.attention import AttentionImpl
from vidax.core import mmdit
from vidax.core.offload import (ChunkPlan, OffloadedStack, block_plans, stack_metrics, stacks_loop_name,
                                stream_stacks)
from vidax.core.placement import replicated
from vidax.core.sharding import ShardingRules
from vidax.models.hunyuanvideo.config import HunyuanVideoTransformerConfig
from vidax.models.hunyuanvideo.sharding import HUNYUAN_VIDEO_RULES
from vidax.models.hunyuanvideo.transformer import (STACKS, BlockInputs, forward_epilogue, forward_prologue,
                                                   num_tokens, run_blocks, transformer_specs)

#: Block stack kinds in running order.
KINDS = ("double", "single")


def stack_layers(cfg: HunyuanVideoTransformerConfig) -> dict[str, int]:
    """``{parameter subtree: blocks}`` of the two stacks, in running order."""
    return {STACKS["double"]: cfg.num_layers, STACKS["single"]: cfg.num_single_layers}


def plans_for(cfg: HunyuanVideoTransformerConfig, offload_chunk: int | None,
              block_loop: str = "auto") -> dict[str, ChunkPlan] | None:
    """How the two stacks are placed (``from_pretrained``'s ``offload_chunk`` and ``block_loop``).

    Returns:
      ``{"transformer_blocks": ChunkPlan, "single_transformer_blocks": ChunkPlan}``: chunks of ``offload_chunk``
      blocks in host memory (offloading), or one block per chunk in device memory (the host block loop: ``"host"``,
      or ``"auto"`` on the CPU backend); None: both stacks stacked under ``scan``.

    Raises:
      ValueError: an unknown ``block_loop``; an ``offload_chunk`` that is not an integer between 1 and the smaller
        stack's block count (20 for the 13B model: its dual-stream stack), with the sizes that divide both stacks
        (:func:`vidax.core.offload.block_plans`).
    """
    return block_plans(stack_layers(cfg), offload_chunk, block_loop)


def io_shardings(mesh: Mesh | None, rules: ShardingRules = HUNYUAN_VIDEO_RULES,
                 token_replace: bool = False) -> tuple[Any, BlockInputs]:
    """``(stream sharding, BlockInputs of shardings)`` of the block programs' inputs
    (:func:`vidax.core.mmdit.io_shardings`)."""
    return mmdit.io_shardings(mesh, rules, token_replace)


@lru_cache(maxsize=64)
def chunk_function(cfg: HunyuanVideoTransformerConfig, kind: str, attention_impl: AttentionImpl | str,
                   mesh: Mesh | None, rules: ShardingRules = HUNYUAN_VIDEO_RULES, video_tokens: int = 0):
    """The one compiled block program of a stack kind: ``fn(chunk, x, c, inputs) -> (x, c)`` (``x``, ``c`` donated,
    same sharding; :func:`vidax.core.mmdit.stack_program`).

    The traced function is named ``_hunyuan_double_chunk`` / ``_hunyuan_single_chunk`` (what compile-event listeners
    see).
    """
    impl = AttentionImpl(attention_impl)

    def chunk(blocks, x, c, inputs):
        return run_blocks(blocks, x, c, inputs, kind=kind, cfg=cfg, video_tokens=video_tokens, attention_impl=impl,
                          mesh=mesh, rules=rules)

    return mmdit.stack_program(chunk, f"_hunyuan_{kind}_chunk", transformer_specs(cfg)[STACKS[kind]], mesh, rules,
                               cfg.image_condition_type == "token_replace")


def _prologue(params, x, timestep, context, mask, pooled, guidance, *, cfg, attention_impl, guided, mesh, rules):
    """The step before the blocks: the batch of :func:`~vidax.models.hunyuanvideo.pipeline._step`."""
    x = x.astype(context.dtype)  # the reference feeds latents in the transformer dtype
    if guided:
        x, timestep = jnp.concatenate([x, x]), jnp.concatenate([timestep, timestep])
        guidance = None if guidance is None else jnp.concatenate([guidance, guidance])
    return forward_prologue(params, x, timestep, context, mask, pooled, guidance, cfg=cfg,
                            attention_impl=attention_impl, mesh=mesh, rules=rules)


def _epilogue(params, x, temb, true_cfg_scale, *, cfg, latent_shape, guided, mesh):
    """The step after the blocks: the head, then ``neg + s (pos - neg)`` with true CFG (replicated on a mesh)."""
    out = forward_epilogue(params, x, temb, cfg=cfg, latent_shape=latent_shape)
    if guided:
        neg, pos = jnp.split(out.astype(jnp.float32), 2)
        out = neg + true_cfg_scale * (pos - neg)
    return replicated(out, mesh)


def compile_pieces(params: dict, chunks: dict[str, Any], x, timestep, context, mask, pooled, guidance, true_cfg_scale,
                   *, cfg: HunyuanVideoTransformerConfig, attention: AttentionImpl | str, guided: bool,
                   mesh: Mesh | None = None, rules: ShardingRules = HUNYUAN_VIDEO_RULES,
                   compiler_options: dict | None = None):
    """Compile the prologue, each stack kind's block program and the epilogue ahead of time (the pipeline's step and
    the planner, on abstract arguments).

    Args:
      params: the transformer parameters outside the two stacks (arrays or ``jax.ShapeDtypeStruct`` s with
        shardings).
      chunks: ``{"double": chunk, "single": chunk}``: one chunk of each stack in device memory, concrete or
        abstract (:meth:`vidax.core.offload.OffloadedStack.abstract_chunk`); its leading axis is the chunk size.
      x, timestep, context, mask, pooled, guidance, true_cfg_scale: the inputs of
        :func:`~vidax.models.hunyuanvideo.pipeline._step` (arrays or abstract, placed as the pipeline places them).
      cfg, attention, guided, mesh, rules: as for ``_step``.
      compiler_options: XLA options of every piece (the planner's: :func:`vidax.core.planner.compiler_options`).

    Returns:
      ``(prologue, {"double": program, "single": program}, epilogue)``, compiled: ``prologue(params, x, timestep,
      context, mask, pooled, guidance) -> (x, c, inputs)``; ``program(chunk, x, c, inputs) -> (x, c)`` (``x``, ``c``
      donated); ``epilogue(params, x, inputs.temb, true_cfg_scale) -> prediction``.
    """
    impl = AttentionImpl(attention)
    token_replace = cfg.image_condition_type == "token_replace"
    stream_s, inputs_s = io_shardings(mesh, rules, token_replace)
    pro = jax.jit(partial(_prologue, cfg=cfg, attention_impl=impl, guided=guided, mesh=mesh, rules=rules),
                  out_shardings=(stream_s, stream_s, inputs_s))
    args = (params, x, timestep, context, mask, pooled, guidance)
    pro_c = pro.lower(*args).compile(compiler_options)
    xs, cs, ins = jax.eval_shape(pro, *args)

    def abstract(a, s):
        return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s)

    x_ab, c_ab = abstract(xs, stream_s), abstract(cs, stream_s)
    in_ab = jax.tree.map(abstract, ins, inputs_s)
    full_shape = (x.shape[0] * (2 if guided else 1), *x.shape[1:])
    video_tokens = num_tokens(cfg, full_shape)
    programs = {kind: chunk_function(cfg, kind, impl, mesh, rules, video_tokens).lower(
        chunks[kind], x_ab, c_ab, in_ab).compile(compiler_options) for kind in KINDS}
    epi = jax.jit(partial(_epilogue, cfg=cfg, latent_shape=full_shape, guided=guided, mesh=mesh))
    epi_c = epi.lower(params, x_ab, in_ab.temb, true_cfg_scale).compile(compiler_options)
    return pro_c, programs, epi_c


def compile_step(params: dict, stacks: dict[str, OffloadedStack], x, timestep, context, mask, pooled, guidance,
                 true_cfg_scale, *, cfg: HunyuanVideoTransformerConfig, attention: AttentionImpl | str, guided: bool,
                 mesh: Mesh | None = None, rules: ShardingRules = HUNYUAN_VIDEO_RULES, overlap: bool = True,
                 timings: list | None = None):
    """Compile the pieces ahead of time (:func:`compile_pieces`) and return the step.

    Args:
      params: the transformer parameters outside the two stacks; stacks: ``{"transformer_blocks": ...,
        "single_transformer_blocks": ...}`` as chunks (:func:`vidax.core.offload.split_stacks`).
      x, timestep, context, mask, pooled, guidance, true_cfg_scale: the inputs of
        :func:`~vidax.models.hunyuanvideo.pipeline._step` (arrays or abstract, placed as the pipeline places them).
      cfg, attention, guided, mesh, rules: as for ``_step``.
      overlap: with chunks in host memory, copy the next chunk while the current one computes (across the two
        stacks: :func:`vidax.core.offload.stream_stacks`); False: copy, wait, compute, wait.
      timings: with ``overlap=False``, a list that receives ``(copy seconds, compute seconds)`` per chunk.

    Returns:
      ``step(params, x, timestep, context, mask, pooled, guidance, true_cfg_scale) -> prediction``, the contract of
      the compiled ``_step``: float32 ``(B, C_out, T, H, W)``, replicated on a mesh.
    """
    pro_c, programs, epi_c = compile_pieces(
        params, {kind: stacks[STACKS[kind]].abstract_chunk() for kind in KINDS}, x, timestep, context, mask, pooled,
        guidance, true_cfg_scale, cfg=cfg, attention=attention, guided=guided, mesh=mesh, rules=rules)
    runs = [(stacks[STACKS[kind]], programs[kind]) for kind in KINDS]

    def step(params, x, timestep, context, mask, pooled, guidance, true_cfg_scale):
        xs, cs, inputs = pro_c(params, x, timestep, context, mask, pooled, guidance)
        stages = [(stack, lambda chunk, carry, run=run: run(chunk, *carry, inputs)) for stack, run in runs]
        xs, _ = stream_stacks(stages, (xs, cs), overlap=overlap, timings=timings)
        return epi_c(params, xs, inputs.temb, true_cfg_scale)

    return step


def loop_name(stacks: dict[str, OffloadedStack] | None) -> str:
    """``"scan"`` (no chunks), ``"host"`` (one-block chunks in device memory) or ``"offload"`` (host memory)."""
    return stacks_loop_name(stacks)


def block_metrics(stacks: dict[str, OffloadedStack] | None, overlap: bool) -> dict:
    """The block-loop metrics over both stacks (:func:`vidax.core.offload.stack_metrics`)."""
    return stack_metrics(stacks, overlap)


def stacked_tree(params: dict, stacks: dict[str, OffloadedStack] | None) -> dict:
    """The transformer's whole parameter tree as :func:`transformer_specs` declares it, both stacks stacked
    ``(layers, ...)`` whatever the block loop (a device copy with chunks; tools and tests)."""
    return {**params, **{name: s.stacked() for name, s in (stacks or {}).items()}}


__all__ = ["KINDS", "block_metrics", "chunk_function", "compile_pieces", "compile_step", "io_shardings", "loop_name",
           "plans_for", "stack_layers", "stacked_tree"]
