"""The Cosmos-Predict2.5 step, resident or with its block stack run from the host: the host block loop and weight
offloading.

One entry point for the pipeline, :func:`compile_step`, for the three block loops (docs/design.md, "Block loop" and
"Offloading"):

* no stacks (:func:`plans_for` returned None): the whole transformer in one program, the blocks under ``lax.scan``
  (:func:`vidax.models.cosmos_predict25.transformer.forward`);
* one-block chunks in device memory (``block_loop="host"``, the CPU default as for the other families): a prologue
  (time embedding, patch embedding, text projection, tables), one compiled block program called from the host once
  per block, and an epilogue (the head);
* chunks of ``offload_chunk`` blocks in host memory, streamed to the devices every step by
  :func:`vidax.core.offload.stream` (the next chunk copied while the current one computes). A block count the chunk
  does not divide gets a zero-padded last chunk: a zero Cosmos block adds nothing (every branch ends in a bias-free
  zero linear layer) except the learnable position embedding it adds first, which the epilogue takes off again
  (``forward_epilogue(padded_layers=...)``; the releases have no such embedding).

The block program compiles once per (configuration, mesh, token count): every chunk has one shape, and the stream
enters and leaves it with one sharding (``P(data, sequence, None)`` on a mesh). The pipeline's own work around the
transformer (the classifier-free-guidance batch, mixing the conditioning latents in, the guidance combination) goes
into the prologue and the epilogue through ``prepare`` and ``finish``, so a step is three launches plus one per chunk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
from jax.sharding import Mesh, NamedSharding

from vidax.core.attention import AttentionImpl
from vidax.core.offload import (ChunkPlan, OffloadedStack, block_plans, device_sharding, stack_metrics,
                                stacks_loop_name, stream)
from vidax.core.placement import replicated
from vidax.core.sharding import ShardingRules
from vidax.models.cosmos_predict25.config import CosmosTransformerConfig
from vidax.models.cosmos_predict25.sharding import COSMOS_PREDICT25_RULES, block_io_specs
from vidax.models.cosmos_predict25.transformer import (STACK, BlockInputs, block_input_specs, forward, forward_epilogue,
                                                       forward_prologue, run_blocks, transformer_specs)


class TransformerInputs(NamedTuple):
    """The inputs of :func:`vidax.models.cosmos_predict25.transformer.forward`, in its order (what ``prepare``
    returns): ``latents (B, 16, T, H, W)`` (mixed with the conditioning latents), ``timestep`` float32 ``(B,)`` or
    ``(B, 1, T, 1, 1)`` sigmas, ``encoder_hidden_states (B, L, 100352)``, ``condition_mask (B, 1, T, H, W)`` or None,
    ``padding_mask`` or None, ``encoder_lengths (B,)`` or None."""

    latents: Any
    timestep: Any
    encoder_hidden_states: Any
    condition_mask: Any = None
    padding_mask: Any = None
    encoder_lengths: Any = None


def plans_for(cfg: CosmosTransformerConfig, offload_chunk: int | None,
              block_loop: str = "auto") -> dict[str, ChunkPlan] | None:
    """How the block stack is placed (the pipeline's ``offload_chunk`` and ``block_loop``).

    Returns:
      ``{"transformer_blocks": ChunkPlan}``: chunks of ``offload_chunk`` blocks in host memory (offloading), or one
      block per chunk in device memory (the host block loop: ``"host"``, or ``"auto"`` on the CPU backend); None: the
      stack under ``scan``. Use with :func:`vidax.core.offload.block_placement` and
      :func:`vidax.core.offload.split_stacks` (:func:`vidax.models.cosmos_predict25.keymap.load_transformer` does).

    Raises:
      ValueError: an unknown ``block_loop``; an ``offload_chunk`` that is not an integer between 1 and the block
        count (28 for the 2B, 36 for the 14B), with the sizes that divide it.
    """
    return block_plans({STACK: cfg.num_layers}, offload_chunk, block_loop)


def io_shardings(inputs: BlockInputs, mesh: Mesh | None, rules: ShardingRules) -> tuple[Any, BlockInputs]:
    """``(stream sharding, BlockInputs of shardings)`` of a block program's inputs (the fields None in ``inputs``
    None): :func:`vidax.models.cosmos_predict25.sharding.block_io_specs` on a mesh, else the first local device
    (committed, so every block call hits one compilation)."""
    if mesh is None:
        one = device_sharding(None)
        return one, BlockInputs(*(None if a is None else one for a in inputs))
    specs = block_input_specs(inputs, rules)
    return (NamedSharding(mesh, block_io_specs(rules)["stream"]),
            BlockInputs(*(None if s is None else NamedSharding(mesh, s) for s in specs)))


def _identity_prepare(*args) -> TransformerInputs:
    return TransformerInputs(*args)


def _identity_finish(out, *_):
    return out


def compile_step(params: dict, stacks: dict[str, OffloadedStack] | None, args: tuple, finish_args: tuple = (), *,
                 cfg: CosmosTransformerConfig, attention: AttentionImpl | str = AttentionImpl.XLA,
                 prepare: Callable[..., TransformerInputs] | None = None, finish: Callable | None = None,
                 mesh: Mesh | None = None, rules: ShardingRules = COSMOS_PREDICT25_RULES, overlap: bool = True,
                 timings: list | None = None, compiler_options: dict | None = None):
    """Compile a transformer step ahead of time and return it.

    Args:
      params: the transformer parameters (:func:`~vidax.models.cosmos_predict25.transformer.transformer_specs`);
        with ``stacks``, without ``"transformer_blocks"`` (:func:`vidax.core.offload.split_stacks`).
      stacks: ``{"transformer_blocks": OffloadedStack}`` (host block loop or offloading), or None / empty (the stack
        under ``scan`` in one program).
      args: the step's inputs (arrays or ``jax.ShapeDtypeStruct`` s, placed as the caller will place them):
        ``prepare(*args)`` gives the transformer's :class:`TransformerInputs`. Default ``prepare``: ``args`` are the
        transformer inputs themselves, ``(latents (B, 16, T, H, W), timestep (B, 1, T, 1, 1) or (B,),
        encoder_hidden_states (B, L, D)[, condition_mask (B, 1, T, H, W)[, padding_mask[, encoder_lengths]]])``.
      finish_args: further inputs of ``finish`` (e.g. the guidance scale).
      cfg, attention, mesh, rules: as :func:`~vidax.models.cosmos_predict25.transformer.forward`.
      prepare: traced in the prologue: the caller's work before the transformer (the CFG batch, the conditioning
        latents mixed in).
      finish: traced in the epilogue: ``finish(prediction, *finish_args)`` (e.g. the guidance and the conditioning
        frames' velocity); default the prediction itself. The result is replicated on a mesh.
      overlap: with chunks in host memory, copy the next chunk while the current one computes; False: copy, wait,
        compute, wait.
      timings: with ``overlap=False``, a list that receives ``(copy seconds, compute seconds)`` per chunk.
      compiler_options: XLA options of every piece.

    Returns:
      ``step(params, args, finish_args=()) -> finish(prediction, *finish_args)``; the prediction is float32
      ``(B, 16, T, H, W)``, the velocity.

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
                                           rules=rules, padded_layers=stack.plan.padded_layers - stack.plan.num_layers,
                                           compiler_options=compiler_options)

    def step(params, args, finish_args=()):
        x, inputs = pro_c(params, args)
        x = stream(stack, lambda chunk, x: program(chunk, x, inputs), x, overlap=overlap, timings=timings)
        return epi_c(params, x, inputs, finish_args)

    return step


def compile_whole(params: dict, args: tuple, finish_args: tuple = (), *, cfg: CosmosTransformerConfig,
                  attention: AttentionImpl | str = AttentionImpl.XLA,
                  prepare: Callable[..., TransformerInputs] | None = None, finish: Callable | None = None,
                  mesh: Mesh | None = None, rules: ShardingRules = COSMOS_PREDICT25_RULES,
                  compiler_options: dict | None = None):
    """The resident step as one compiled program (the block stack under ``lax.scan``): ``program(params, args,
    finish_args)``. Arguments as :func:`compile_step`'s (``params`` with the stack; arrays or abstract); a planner
    reads its ``memory_analysis()``."""
    prepare = prepare or _identity_prepare
    finish = finish or _identity_finish
    impl = AttentionImpl(attention)

    def whole(params, args, finish_args):
        out = forward(params, *prepare(*args), cfg=cfg, attention_impl=impl, mesh=mesh, rules=rules)
        return replicated(finish(out, *finish_args), mesh)

    return jax.jit(whole).lower(params, args, finish_args).compile(compiler_options)


def compile_pieces(params: dict, chunk: dict, args: tuple, finish_args: tuple = (), *,
                   cfg: CosmosTransformerConfig, attention: AttentionImpl | str = AttentionImpl.XLA,
                   prepare: Callable[..., TransformerInputs] | None = None, finish: Callable | None = None,
                   mesh: Mesh | None = None, rules: ShardingRules = COSMOS_PREDICT25_RULES, padded_layers: int = 0,
                   compiler_options: dict | None = None):
    """The chunked step's three programs, compiled ahead of time (the pipeline's step, a planner on abstract
    arguments).

    Args:
      params: the parameters outside the block stack; chunk: one chunk of the stack in device memory, concrete or
        abstract (:meth:`vidax.core.offload.OffloadedStack.abstract_chunk`), its leading axis the chunk size.
      padded_layers: zero blocks of the last chunk (``ChunkPlan.padded_layers - num_layers``).
      Others: as :func:`compile_step`.

    Returns:
      ``(prologue, program, epilogue)``: ``prologue(params, args) -> (x, inputs)``; ``program(chunk, x, inputs) ->
      x`` (``x`` donated, one sharding in and out); ``epilogue(params, x, inputs, finish_args) -> finish(prediction,
      *finish_args)``.
    """
    prepare = prepare or _identity_prepare
    finish = finish or _identity_finish
    impl = AttentionImpl(attention)

    def prologue(params, args):
        return forward_prologue(params, *prepare(*args), cfg=cfg, mesh=mesh, rules=rules)

    xs, ins = jax.eval_shape(prologue, params, args)
    stream_s, inputs_s = io_shardings(ins, mesh, rules)
    pro_c = jax.jit(prologue, out_shardings=(stream_s, inputs_s)).lower(params, args).compile(compiler_options)
    latent_shape = tuple(jax.eval_shape(lambda a: prepare(*a).latents, args).shape)

    def abstract(a, s):
        return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s)

    x_ab, in_ab = abstract(xs, stream_s), jax.tree.map(abstract, ins, inputs_s)

    def blocks(chunk, x, inputs):
        return run_blocks(chunk, x, inputs, cfg=cfg, attention_impl=impl, mesh=mesh, rules=rules)

    blocks.__name__ = blocks.__qualname__ = "_cosmos_predict25_chunk"
    if mesh is None:
        jitted = jax.jit(blocks, donate_argnums=(1,), out_shardings=stream_s)
    else:
        chunk_s = rules.param_shardings(transformer_specs(cfg)[STACK], mesh)
        jitted = jax.jit(blocks, donate_argnums=(1,), out_shardings=stream_s,
                         in_shardings=(chunk_s, stream_s, inputs_s))
    program = jitted.lower(chunk, x_ab, in_ab).compile(compiler_options)

    def epilogue(params, x, inputs, finish_args):
        out = forward_epilogue(params, x, inputs, cfg=cfg, latent_shape=latent_shape, padded_layers=padded_layers)
        return replicated(finish(out, *finish_args), mesh)

    epi_c = jax.jit(epilogue).lower(params, x_ab, in_ab, finish_args).compile(compiler_options)
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


__all__ = ["TransformerInputs", "block_metrics", "compile_pieces", "compile_step", "compile_whole", "io_shardings",
           "loop_name", "plans_for", "stacked_tree"]
