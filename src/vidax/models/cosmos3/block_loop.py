"""The Cosmos3 und prefill and denoising step, resident or with the layer stack run from the host: the host block
loop and weight offloading (docs/design.md, "Block loop" and "Offloading"; the pattern of
:mod:`vidax.models.cosmos_predict25.block_loop`).

Three placements of the stacked layers (both streams' weights live in one stack, ``layers``):

* no stacks (:func:`plans_for` returned None): the und prefill and the gen step each one program, the layers under
  ``lax.scan`` (:func:`vidax.models.cosmos3.transformer.und_prefill`,
  :func:`~vidax.models.cosmos3.transformer.gen_forward`);
* one-layer chunks in device memory (``block_loop="host"``): one compiled layer program per stream, called from the
  host once per layer;
* chunks of ``offload_chunk`` layers in host memory, streamed to the devices by :func:`vidax.core.offload.stream`
  (the next chunk copied while the current one computes). A layer count the chunk does not divide gets a zero-padded
  last chunk: a zero Cosmos3 layer is the identity of both streams (every branch ends in a zero linear layer whose
  bias, if any, is zero), and its und cache rows are zeros the step never reads past the real layers.

The und prefill streams the chunks once per prompt batch and returns the whole :class:`UndCache` (``padded_layers``
layers with chunks); the gen step streams them at every denoising step, each chunk program slicing its layers of the
cache (a ``dynamic_slice`` at a start carried as a device scalar, so one program serves every chunk).

Each program compiles once per (configuration, mesh, shapes): every chunk has one shape, and the streams enter and
leave them with one sharding (the gen stream ``P(data, sequence, None)``). The pipeline's own work around the
transformer (the CFG batch, the guidance combination, the conditioning frames) goes into the gen step's prologue and
epilogue through ``prepare`` and ``finish``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from vidax.core.attention import AttentionImpl
from vidax.core.offload import ChunkPlan, OffloadedStack, block_plans, stack_metrics, stacks_loop_name, stream
from vidax.core.placement import replicated
from vidax.core.sharding import ShardingRules
from vidax.models.cosmos3.config import Cosmos3TransformerConfig
from vidax.models.cosmos3.sharding import COSMOS3_RULES, check_parallel
from vidax.models.cosmos3.transformer import (STACK, UndCache, gen_epilogue, gen_forward, gen_prologue_sharded,
                                              run_gen_layers, run_und_layers, und_embed, und_prefill)


class GenArgs(NamedTuple):
    """The gen step's inputs besides the cache, in :func:`vidax.models.cosmos3.transformer.gen_forward`'s order (what
    ``prepare`` returns): ``lengths (B,)``, ``latents (B, C, T, H, W)``, ``timestep (B,)``, ``position_ids (B, 3,
    N)``, ``noisy (B, T)``."""

    lengths: Any
    latents: Any
    timestep: Any
    position_ids: Any
    noisy: Any


def plans_for(cfg: Cosmos3TransformerConfig, offload_chunk: int | None,
              block_loop: str = "auto") -> dict[str, ChunkPlan] | None:
    """How the layer stack is placed: ``{"layers": ChunkPlan}`` (chunks in host memory, or one-layer chunks in device
    memory for the host block loop), or None (stacked, under ``scan``); :func:`vidax.core.offload.block_plans`.

    Raises:
      ValueError: an unknown ``block_loop``; an ``offload_chunk`` that is not an integer between 1 and the layer
        count (36 for Nano, 28 for Edge).
    """
    return block_plans({STACK: cfg.num_hidden_layers}, offload_chunk, block_loop)


def _identity_prepare(*args) -> GenArgs:
    return GenArgs(*args)


def _identity_finish(out, *_):
    return out


def make_prefill(params: dict, stacks: dict[str, OffloadedStack] | None, *, cfg: Cosmos3TransformerConfig,
                 attention: AttentionImpl | str = AttentionImpl.XLA, mesh=None,
                 rules: ShardingRules = COSMOS3_RULES, overlap: bool = True) -> Callable[..., UndCache]:
    """The und prefill for a placement.

    Args:
      params: the transformer parameters (without ``layers`` when ``stacks`` holds them).
      stacks: ``{"layers": OffloadedStack}`` or None / empty (the stack under ``scan``).
      cfg, attention, mesh, rules: as :func:`vidax.models.cosmos3.transformer.und_prefill`.
      overlap: with chunks in host memory, copy the next chunk while the current one computes.

    Returns:
      ``prefill(params, input_ids (B, L), position_ids (B, 3, L), lengths (B,)) -> UndCache``: with stacks the
      cache holds ``padded_layers`` layers (the padding layers' rows zeros).
    """
    impl = AttentionImpl(attention)
    if not stacks:
        return lambda params, ids, pos, lengths: und_prefill(params, cfg, ids, pos, lengths, attention_impl=impl,
                                                             mesh=mesh, rules=rules)
    stack = stacks[STACK]
    embed = jax.jit(lambda params, ids, pos: und_embed(params, cfg, ids, pos))
    layers = jax.jit(lambda chunk, x, cos, sin, lengths: run_und_layers(
        chunk, x, cos, sin, lengths, cfg=cfg, attention_impl=impl, mesh=mesh, rules=rules), donate_argnums=(1,))
    join = jax.jit(lambda caches: jax.tree.map(lambda *c: jnp.concatenate(c), *caches))

    def prefill(params, ids, pos, lengths):
        check_parallel(cfg, mesh, rules, ids.shape[0])
        x, (cos, sin) = embed(params, ids, pos)
        lengths = jnp.asarray(lengths, jnp.int32)
        caches = []

        def run(chunk, x):
            x, cache = layers(chunk, x, cos, sin, lengths)
            caches.append(cache)
            return x

        stream(stack, run, x, overlap=overlap)
        return join(caches)

    return prefill


def make_gen_step(params: dict, stacks: dict[str, OffloadedStack] | None, *, cfg: Cosmos3TransformerConfig,
                  attention: AttentionImpl | str = AttentionImpl.XLA, prepare: Callable[..., GenArgs] | None = None,
                  finish: Callable | None = None, mesh=None, rules: ShardingRules = COSMOS3_RULES,
                  overlap: bool = True, timings: list | None = None):
    """The gen step (one transformer evaluation of a denoising step) for a placement.

    Args:
      params, stacks, cfg, attention, mesh, rules, overlap: as :func:`make_prefill`.
      prepare: traced in the prologue: ``prepare(*args) -> GenArgs`` (the caller's work before the transformer, e.g.
        the CFG batch); default: ``args`` are the :class:`GenArgs` themselves.
      finish: traced in the epilogue: ``finish(velocity, *finish_args)`` (e.g. the guidance combination); default the
        velocity. The result is replicated on a mesh.
      timings: with ``overlap=False``, a list receiving ``(copy seconds, compute seconds)`` per chunk.

    Returns:
      ``step(params, cache, args, finish_args=()) -> finish(velocity, *finish_args)``; ``cache`` from the matching
      :func:`make_prefill` (with stacks, a cache of ``num_hidden_layers`` layers is padded to ``padded_layers``);
      the velocity float32 ``(B, C, T, H, W)``, zeros on the conditioning frames.
    """
    prepare = prepare or _identity_prepare
    finish = finish or _identity_finish
    impl = AttentionImpl(attention)
    if not stacks:
        def whole(params, cache, args, finish_args):
            a = prepare(*args)
            out = gen_forward(params, cfg, cache, a.lengths, a.latents, a.timestep, a.position_ids, a.noisy,
                              attention_impl=impl, mesh=mesh, rules=rules)
            return replicated(finish(out, *finish_args), mesh)

        program = jax.jit(whole)
        return lambda params, cache, args, finish_args=(): program(params, cache, args, finish_args)

    stack = stacks[STACK]
    chunk_size = stack.plan.chunk

    def prologue(params, args):
        a = prepare(*args)
        x, inputs, n = gen_prologue_sharded(params, cfg, a.lengths, a.latents, a.timestep, a.position_ids, a.noisy,
                                            mesh, rules)
        return x, inputs, a.noisy

    pro = jax.jit(prologue)

    def layers(chunk, x, start, cache, inputs, num_valid):
        part = UndCache(*(jax.lax.dynamic_slice_in_dim(c, start, chunk_size, axis=0) for c in cache))
        x = run_gen_layers(chunk, part, x, inputs, cfg=cfg, attention_impl=impl, num_valid=num_valid, mesh=mesh,
                           rules=rules)
        return x, start + chunk_size

    program = jax.jit(layers, donate_argnums=(1,), static_argnames=("num_valid",))

    def epilogue(params, x, noisy, args, finish_args):
        a = prepare(*args)
        out = gen_epilogue(params, cfg, x, a.latents.shape, noisy)
        return replicated(finish(out, *finish_args), mesh)

    epi = jax.jit(epilogue)

    def step(params, cache, args, finish_args=()):
        n = jax.eval_shape(lambda args: prepare(*args), args).position_ids.shape[2]
        pad = stack.plan.padded_layers - cache.k.shape[0]
        if pad:
            cache = UndCache(*(jnp.pad(c, ((0, pad),) + ((0, 0),) * (c.ndim - 1)) for c in cache))
        x, inputs, noisy = pro(params, args)

        def run(chunk, carry):
            return program(chunk, carry[0], carry[1], cache, inputs, num_valid=n)

        x, _ = stream(stack, run, (x, jnp.zeros((), jnp.int32)), overlap=overlap, timings=timings)
        return epi(params, x, noisy, args, finish_args)

    return step


def loop_name(stacks: dict[str, OffloadedStack] | None) -> str:
    """``"scan"`` (no chunks), ``"host"`` (one-layer chunks in device memory) or ``"offload"`` (host memory)."""
    return stacks_loop_name(stacks)


def block_metrics(stacks: dict[str, OffloadedStack] | None, overlap: bool) -> dict:
    """The block-loop metrics of a pipeline call (:func:`vidax.core.offload.stack_metrics`)."""
    return stack_metrics(stacks, overlap)


def stacked_tree(params: dict, stacks: dict[str, OffloadedStack] | None) -> dict:
    """The whole parameter tree, the stack stacked ``(layers, ...)`` whatever the block loop (tools and tests)."""
    return {**params, **{name: s.stacked() for name, s in (stacks or {}).items()}}


__all__ = ["GenArgs", "block_metrics", "loop_name", "make_gen_step", "make_prefill", "plans_for", "stacked_tree"]
