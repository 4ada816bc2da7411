"""The CogVideoX guided step with its blocks run from the host, one compiled block program per chunk.

``CogVideoXPipeline.from_pretrained(block_loop="host")`` (the CPU default, as for Wan: docs/design.md,
"Block loop") loads the blocks as one-block chunks in device memory
(:class:`vidax.core.offload.OffloadedStack` with ``ChunkPlan(memory="device")``);
``from_pretrained(offload_chunk=N)`` loads them as chunks of ``N`` blocks in host memory, streamed to
the devices every step (:func:`vidax.core.offload.stream`; the last chunk zero-padded, and a zero
CogVideoX block adds exactly 0: its AdaLN gates are 0). Either way the step computes
exactly the pipeline's scanned step (:func:`vidax.models.cogvideox.pipeline._cfg_step`) in three
compiled pieces: :func:`prologue_function` (the CFG batch, embedders and the joint stream),
:func:`chunk_function` (:func:`~vidax.models.cogvideox.transformer.run_blocks` over one chunk, called
for every chunk, ``h`` donated) and :func:`epilogue_function` (the head and the CFG combination).
The block program compiles once per (configuration, mesh, token count): every chunk has one shape
and the stream enters and leaves it with one sharding (``P(data, sequence, None)`` on a mesh).
"""

from __future__ import annotations

from functools import lru_cache, partial

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding

from vidax.core.attention import AttentionImpl
from vidax.core.offload import OffloadedStack, device_sharding, stream
from vidax.core.sharding import ShardingRules
from vidax.models.cogvideox.config import CogVideoXTransformerConfig
from vidax.models.cogvideox.sharding import COGVIDEOX_RULES
from vidax.models.cogvideox.transformer import (block_io_specs, forward_epilogue, forward_prologue, joint_tokens,
                                                run_blocks, transformer_specs)

_NAMES = ("h", "temb", "text", "cos", "sin")


def io_shardings(mesh: Mesh | None, rules: ShardingRules = COGVIDEOX_RULES) -> dict:
    """The sharding of each block input (``h, temb, text, cos, sin``): :func:`block_io_specs` on a mesh,
    else the first local device (committed, so every block call hits one compilation)."""
    if mesh is None:
        return {k: device_sharding(None) for k in _NAMES}
    return {k: NamedSharding(mesh, v) for k, v in block_io_specs(rules).items()}


def _cfg_prologue(params, latents, timestep, context, positions, cond, ofs, *, cfg, guided, mesh, rules):
    """The guided step before the blocks: the batch of :func:`~vidax.models.cogvideox.pipeline._cfg_step`."""
    x = latents if cond is None else jnp.concatenate([latents, cond.astype(latents.dtype)], axis=2)
    if guided:
        x, timestep = jnp.concatenate([x, x]), jnp.concatenate([timestep, timestep])
    return forward_prologue(params, x, timestep, context, positions, ofs, cfg=cfg, mesh=mesh, rules=rules)


def _cfg_epilogue(params, h, temb, guidance_scale, *, cfg, latent_shape, text_tokens, guided, mesh):
    """The guided step after the blocks: the head, then ``uncond + g * (cond - uncond)`` (replicated on a mesh)."""
    out = forward_epilogue(params, h, temb, cfg=cfg, latent_shape=latent_shape, text_tokens=text_tokens)
    if guided:
        uncond, text = jnp.split(out, 2)
        out = uncond + guidance_scale * (text - uncond)
    if mesh is None:
        return out
    return jax.lax.with_sharding_constraint(out, NamedSharding(mesh, jax.sharding.PartitionSpec()))


@lru_cache(maxsize=64)
def chunk_function(cfg: CogVideoXTransformerConfig, attention_impl: AttentionImpl | str, mesh: Mesh | None,
                   rules: ShardingRules = COGVIDEOX_RULES, valid_tokens: int | None = None):
    """The one compiled block program: ``fn(chunk, h, temb, text, cos, sin) -> h`` (``h`` donated, same sharding).

    The traced function is named ``_cog_block_chunk`` (what compile-event listeners see).
    """
    impl = AttentionImpl(attention_impl)

    def _cog_block_chunk(blocks, h, temb, text, cos, sin):
        return run_blocks(blocks, h, temb, text, cos, sin, cfg=cfg, attention_impl=impl, mesh=mesh, rules=rules,
                          valid_tokens=valid_tokens)

    io = io_shardings(mesh, rules)
    if mesh is None:
        return jax.jit(_cog_block_chunk, donate_argnums=1, out_shardings=io["h"])
    blocks = rules.param_shardings(transformer_specs(cfg), mesh)["blocks"]
    return jax.jit(_cog_block_chunk, donate_argnums=1, out_shardings=io["h"],
                   in_shardings=(blocks, *(io[n] for n in _NAMES)))


def compile_step(params: dict, stack: OffloadedStack, latents, timestep, context, positions, guidance_scale, cond, ofs,
                 *, cfg: CogVideoXTransformerConfig, attention: AttentionImpl | str, guided: bool, mesh: Mesh | None = None,
                 rules: ShardingRules = COGVIDEOX_RULES, overlap: bool = True):
    """Compile the three pieces ahead of time and return the step.

    Args:
      params: the transformer parameters outside ``"blocks"``; stack: the blocks as chunks.
      latents, timestep, context, positions, guidance_scale, cond, ofs: the inputs of
        :func:`~vidax.models.cogvideox.pipeline._cfg_step` (arrays or abstract, placed as the pipeline
        places them).
      cfg, attention, guided, mesh, rules: as for ``_cfg_step``.
      overlap: with chunks in host memory, copy the next chunk while the current one computes
        (:func:`vidax.core.offload.stream`); False: copy, wait, compute, wait.

    Returns:
      ``step(params, latents, timestep, context, positions, guidance_scale, cond, ofs) -> prediction``,
      the contract of the compiled ``_cfg_step``.
    """
    static = dict(cfg=cfg, guided=guided, mesh=mesh, rules=rules)
    io = io_shardings(mesh, rules)
    pro = jax.jit(partial(_cfg_prologue, **static), out_shardings=tuple(io[n] for n in _NAMES))
    inputs = (params, latents, timestep, context, positions, cond, ofs)
    pro_c = pro.lower(*inputs).compile()
    outs = jax.eval_shape(pro, *inputs)
    ab = {n: None if o is None else jax.ShapeDtypeStruct(o.shape, o.dtype, sharding=io[n]) for n, o in zip(_NAMES, outs)}
    batch = latents.shape[0] * (2 if guided else 1)
    full_shape = (batch, *latents.shape[1:])
    text_tokens = context.shape[1]
    run = chunk_function(cfg, attention, mesh, rules, joint_tokens(cfg, full_shape, text_tokens))
    chunk_c = run.lower(stack.abstract_chunk(), *(ab[n] for n in _NAMES)).compile()
    epi = jax.jit(partial(_cfg_epilogue, cfg=cfg, latent_shape=full_shape, text_tokens=text_tokens, guided=guided,
                          mesh=mesh))
    epi_c = epi.lower(params, ab["h"], ab["temb"], guidance_scale).compile()

    def step(params, latents, timestep, context, positions, guidance_scale, cond, ofs):
        h, temb, text, cos, sin = pro_c(params, latents, timestep, context, positions, cond, ofs)
        h = stream(stack, lambda chunk, h: chunk_c(chunk, h, temb, text, cos, sin), h, overlap=overlap)
        return epi_c(params, h, temb, guidance_scale)

    return step


__all__ = ["chunk_function", "compile_step", "io_shardings"]
