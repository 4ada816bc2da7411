"""The HunyuanVideo-1.5 step, resident or with its block stack run from the host: the host block loop and weight
offloading.

One entry point for the pipeline, :func:`compile_step`, for the three block loops (docs/design.md, "Block loop" and
"Offloading"):

* ``stacks`` empty (``plans_for`` returned None): the whole transformer in one program, the 54 blocks under
  ``lax.scan`` (:func:`vidax.models.hunyuanvideo15.transformer.forward`);
* one-block chunks in device memory (``block_loop="host"``, the CPU default as for the other families): a prologue
  (conditioning, token refiner, projections, context reordering, patch embedding), one compiled block program called
  from the host once per block, and an epilogue (the head);
* chunks of ``offload_chunk`` blocks in host memory (``offload_chunk=N``), streamed to the devices every step by
  :func:`vidax.core.offload.stream` (the next chunk copied while the current one computes). A block count ``N`` does
  not divide gets a zero-padded last chunk: a zero dual-stream block is the identity (both gated residual branches
  end in a zero AdaLN gate).

The block program compiles once per (configuration, mesh, token count): every chunk has one shape, and the streams
enter and leave it with one sharding (``P(data, sequence, None)`` on a mesh). The pipeline's own work around the
transformer (the classifier-free-guidance batch, the condition latents concatenated on channels, the guidance
combination) goes into the prologue and the epilogue through ``prepare`` and ``finish``, so a step is still three
launches plus one per chunk.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any, NamedTuple

import jax
from jax.sharding import Mesh

from vidax.core import mmdit
from vidax.core.attention import AttentionImpl
from vidax.core.offload import ChunkPlan, OffloadedStack, block_plans, stack_metrics, stacks_loop_name, stream
from vidax.core.placement import replicated
from vidax.core.sharding import ShardingRules
from vidax.models.hunyuanvideo15.config import HunyuanVideo15TransformerConfig
from vidax.models.hunyuanvideo15.sharding import HUNYUAN_VIDEO15_RULES
from vidax.models.hunyuanvideo15.transformer import (STACK, forward, forward_epilogue, forward_prologue, num_tokens,
                                                     run_blocks, transformer_specs)


class TransformerInputs(NamedTuple):
    """The inputs of :func:`vidax.models.hunyuanvideo15.transformer.forward`, in its order (what ``prepare``
    returns)."""

    latents: Any
    timestep: Any
    encoder_hidden_states: Any
    encoder_attention_mask: Any
    encoder_hidden_states_2: Any
    encoder_attention_mask_2: Any
    image_embeds: Any = None
    timestep_r: Any = None


def plans_for(cfg: HunyuanVideo15TransformerConfig, offload_chunk: int | None,
              block_loop: str = "auto") -> dict[str, ChunkPlan] | None:
    """How the block stack is placed (the pipeline's ``offload_chunk`` and ``block_loop``).

    Returns:
      ``{"transformer_blocks": ChunkPlan}``: chunks of ``offload_chunk`` blocks in host memory (offloading), or one
      block per chunk in device memory (the host block loop: ``"host"``, or ``"auto"`` on the CPU backend); None: the
      stack under ``scan``. Use with :func:`vidax.core.offload.block_placement` (loading) and
      :func:`vidax.core.offload.split_stacks`.

    Raises:
      ValueError: an unknown ``block_loop``; an ``offload_chunk`` that is not an integer between 1 and 54 (the
        release's blocks), with the sizes that divide the stack (:func:`vidax.core.offload.block_plans`).
    """
    return block_plans({STACK: cfg.num_layers}, offload_chunk, block_loop)


@lru_cache(maxsize=32)
def chunk_function(cfg: HunyuanVideo15TransformerConfig, attention_impl: AttentionImpl | str, mesh: Mesh | None,
                   rules: ShardingRules = HUNYUAN_VIDEO15_RULES, video_tokens: int = 0):
    """The one compiled block program: ``fn(chunk, x, c, inputs) -> (x, c)`` (``x``, ``c`` donated, same sharding;
    :func:`vidax.core.mmdit.stack_program`), traced as ``_hunyuan15_chunk``."""
    impl = AttentionImpl(attention_impl)

    def chunk(blocks, x, c, inputs):
        return run_blocks(blocks, x, c, inputs, cfg=cfg, video_tokens=video_tokens, attention_impl=impl, mesh=mesh,
                          rules=rules)

    return mmdit.stack_program(chunk, "_hunyuan15_chunk", transformer_specs(cfg)[STACK], mesh, rules)


def _identity_prepare(*args) -> TransformerInputs:
    return TransformerInputs(*args)


def _identity_finish(out, *_):
    return out


def compile_step(params: dict, stacks: dict[str, OffloadedStack] | None, args: tuple, finish_args: tuple = (), *,
                 cfg: HunyuanVideo15TransformerConfig, attention: AttentionImpl | str = AttentionImpl.XLA,
                 prepare: Callable[..., TransformerInputs] | None = None, finish: Callable | None = None,
                 mesh: Mesh | None = None, rules: ShardingRules = HUNYUAN_VIDEO15_RULES, overlap: bool = True,
                 timings: list | None = None, compiler_options: dict | None = None):
    """Compile a transformer step ahead of time and return it.

    Args:
      params: the transformer parameters (:func:`~vidax.models.hunyuanvideo15.transformer.transformer_specs`);
        with ``stacks``, without ``"transformer_blocks"`` (:func:`vidax.core.offload.split_stacks`).
      stacks: ``{"transformer_blocks": OffloadedStack}`` (host block loop or offloading), or None / empty (the stack
        under ``scan`` in one program).
      args: the step's inputs (arrays or ``jax.ShapeDtypeStruct`` s, placed as the caller will place them):
        ``prepare(*args)`` gives the transformer's :class:`TransformerInputs`. Default ``prepare``: ``args`` are the
        transformer inputs themselves, ``(latents (B, C, T, H, W), timestep (B,), encoder_hidden_states (B, L, D),
        encoder_attention_mask (B, L), encoder_hidden_states_2 (B, L2, D2), encoder_attention_mask_2 (B, L2)
        [, image_embeds (B, N, Di) or None [, timestep_r (B,) or None]])``.
      finish_args: further inputs of ``finish`` (e.g. the guidance scale).
      cfg, attention, mesh, rules: as :func:`~vidax.models.hunyuanvideo15.transformer.forward`.
      prepare: traced in the prologue: the caller's work before the transformer (the CFG batch, the condition latents
        concatenated on channels).
      finish: traced in the epilogue: ``finish(prediction, *finish_args)`` (e.g. ``uncond + s (cond - uncond)``);
        default the prediction itself. The result is replicated on a mesh.
      overlap: with chunks in host memory, copy the next chunk while the current one computes; False: copy, wait,
        compute, wait.
      timings: with ``overlap=False``, a list that receives ``(copy seconds, compute seconds)`` per chunk.
      compiler_options: XLA options of every piece.

    Returns:
      ``step(params, args, finish_args=()) -> finish(prediction, *finish_args)``; the prediction is float32
      ``(B, out_channels, T, H, W)``.

    Raises:
      ValueError: inputs of the wrong shape or a mesh the model cannot use (at compile time, before anything runs).
    """
    if not stacks:
        program = compile_whole(params, args, finish_args, cfg=cfg, attention=attention, prepare=prepare,
                                finish=finish, mesh=mesh, rules=rules, compiler_options=compiler_options)
        return lambda params, args, finish_args=(): program(params, args, finish_args)

    stack = stacks[STACK]
    pro_c, program, epi_c = compile_pieces(params, stack.abstract_chunk(), args, finish_args, cfg=cfg,
                                           attention=attention, prepare=prepare, finish=finish, mesh=mesh,
                                           rules=rules, compiler_options=compiler_options)

    def step(params, args, finish_args=()):
        xs, cs, inputs = pro_c(params, args)
        xs, _ = stream(stack, lambda chunk, carry: program(chunk, *carry, inputs), (xs, cs), overlap=overlap,
                       timings=timings)
        return epi_c(params, xs, inputs.temb, finish_args)

    return step


def compile_whole(params: dict, args: tuple, finish_args: tuple = (), *, cfg: HunyuanVideo15TransformerConfig,
                  attention: AttentionImpl | str = AttentionImpl.XLA,
                  prepare: Callable[..., TransformerInputs] | None = None, finish: Callable | None = None,
                  mesh: Mesh | None = None, rules: ShardingRules = HUNYUAN_VIDEO15_RULES,
                  compiler_options: dict | None = None):
    """The resident step as one compiled program (the block stack under ``lax.scan``): ``program(params, args,
    finish_args)``. Arguments as :func:`compile_step`'s (``params`` with the stack; arrays or abstract); the
    planner reads its ``memory_analysis()``."""
    prepare = prepare or _identity_prepare
    finish = finish or _identity_finish
    impl = AttentionImpl(attention)

    def whole(params, args, finish_args):
        inputs = prepare(*args)
        out = forward(params, *inputs, cfg=cfg, attention_impl=impl, mesh=mesh, rules=rules)
        return replicated(finish(out, *finish_args), mesh)

    return jax.jit(whole).lower(params, args, finish_args).compile(compiler_options)


def compile_pieces(params: dict, chunk: dict, args: tuple, finish_args: tuple = (), *,
                   cfg: HunyuanVideo15TransformerConfig, attention: AttentionImpl | str = AttentionImpl.XLA,
                   prepare: Callable[..., TransformerInputs] | None = None, finish: Callable | None = None,
                   mesh: Mesh | None = None, rules: ShardingRules = HUNYUAN_VIDEO15_RULES,
                   compiler_options: dict | None = None):
    """The chunked step's three programs, compiled ahead of time (the pipeline's step and the planner, on abstract
    arguments).

    Args:
      params: the parameters outside the block stack; chunk: one chunk of the stack in device memory, concrete or
        abstract (:meth:`vidax.core.offload.OffloadedStack.abstract_chunk`), its leading axis the chunk size.
      Others: as :func:`compile_step`.

    Returns:
      ``(prologue, program, epilogue)``: ``prologue(params, args) -> (x, c, inputs)``; ``program(chunk, x, c,
      inputs) -> (x, c)`` (``x``, ``c`` donated; :func:`chunk_function`); ``epilogue(params, x, inputs.temb,
      finish_args) -> finish(prediction, *finish_args)``.
    """
    prepare = prepare or _identity_prepare
    finish = finish or _identity_finish
    impl = AttentionImpl(attention)
    stream_s, inputs_s = mmdit.io_shardings(mesh, rules)

    def prologue(params, args):
        return forward_prologue(params, *prepare(*args), cfg=cfg, attention_impl=impl, mesh=mesh, rules=rules)

    pro = jax.jit(prologue, out_shardings=(stream_s, stream_s, inputs_s))
    pro_c = pro.lower(params, args).compile(compiler_options)
    xs, cs, ins = jax.eval_shape(pro, params, args)
    latent_shape = tuple(jax.eval_shape(lambda a: prepare(*a).latents, args).shape)

    def abstract(a, s):
        return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s)

    x_ab, c_ab = abstract(xs, stream_s), abstract(cs, stream_s)
    in_ab = jax.tree.map(abstract, ins, inputs_s)
    program = chunk_function(cfg, impl, mesh, rules, num_tokens(cfg, latent_shape)).lower(
        chunk, x_ab, c_ab, in_ab).compile(compiler_options)

    def epilogue(params, x, temb, finish_args):
        out = forward_epilogue(params, x, temb, cfg=cfg, latent_shape=latent_shape)
        return replicated(finish(out, *finish_args), mesh)

    epi_c = jax.jit(epilogue).lower(params, x_ab, in_ab.temb, finish_args).compile(compiler_options)
    return pro_c, program, epi_c


def loop_name(stacks: dict[str, OffloadedStack] | None) -> str:
    """``"scan"`` (no chunks), ``"host"`` (one-block chunks in device memory) or ``"offload"`` (host memory)."""
    return stacks_loop_name(stacks)


def block_metrics(stacks: dict[str, OffloadedStack] | None, overlap: bool) -> dict:
    """The block-loop metrics of a pipeline call (:func:`vidax.core.offload.stack_metrics`)."""
    return stack_metrics(stacks, overlap)


def stacked_tree(params: dict, stacks: dict[str, OffloadedStack] | None) -> dict:
    """The transformer's whole parameter tree as ``transformer_specs`` declares it, the stack stacked
    ``(layers, ...)`` whatever the block loop (a device copy with chunks; tools and tests)."""
    return {**params, **{name: s.stacked() for name, s in (stacks or {}).items()}}


__all__ = ["TransformerInputs", "block_metrics", "chunk_function", "compile_pieces", "compile_step", "compile_whole",
           "loop_name", "plans_for", "stacked_tree"]
