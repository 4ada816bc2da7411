"""The guided LTX-Video transformer step, as one compiled program or as a host loop over block chunks.

:func:`cfg_step` is the step the sampling loop calls once per denoising step: both CFG halves in one batch
``[negative, prompt]`` (as the reference concatenates them), ``uncond + g * (text - uncond)`` in float32,
then the guidance rescale when asked (``LTXPipeline`` / ``LTXConditionPipeline``, ``guidance_rescale``).

With the blocks in chunks (``from_pretrained(offload_chunk=...)``: host memory, streamed to the device;
or ``block_loop="host"``, the CPU default: one block per chunk in device memory, docs/design.md "Block
loop"), :func:`compile_step` computes exactly :func:`cfg_step` in three compiled pieces: the prologue (the
CFG batch, embedders, padding), one block program called per chunk (``x`` donated) and the epilogue (head,
guidance). The block program compiles once per (configuration, mesh, token count).
"""

from __future__ import annotations

from functools import lru_cache, partial

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding

from vidax.core.attention import AttentionImpl
from vidax.core.offload import OffloadedStack, device_sharding, stream
from vidax.core.placement import replicated
from vidax.core.sharding import ShardingRules
from vidax.models.ltx.config import LTXVideoTransformerConfig
from vidax.models.ltx.sharding import LTX_RULES
from vidax.models.ltx.transformer import (block_io_specs, forward, forward_epilogue, forward_prologue, run_blocks,
                                          transformer_specs)
from vidax.schedulers.guidance import rescale_noise_cfg

_NAMES = ("x", "context", "context_lengths", "temb6", "cos", "sin")


def _batch(latents, timestep, guided):
    return (jnp.concatenate([latents, latents]), jnp.concatenate([timestep, timestep])) if guided else (latents, timestep)


def _guide(out, guidance_scale, guidance_rescale, *, guided, rescale, mesh):
    """``uncond + g (text - uncond)`` of a ``[negative, prompt]`` batch, then the optional rescale (replicated)."""
    if guided:
        uncond, text = jnp.split(out, 2)
        out = uncond + guidance_scale * (text - uncond)
        if rescale:
            out = rescale_noise_cfg(out, text, guidance_rescale)
    return replicated(out, mesh)


def cfg_step(params, latents, timestep, context, context_lengths, cos, sin, guidance_scale, guidance_rescale, *,
             cfg: LTXVideoTransformerConfig, attention_impl, guided: bool, rescale: bool, mesh: Mesh | None = None,
             rules: ShardingRules = LTX_RULES):
    """One guided transformer evaluation.

    Args:
      params: the transformer's parameter tree (:func:`~vidax.models.ltx.transformer.transformer_specs`).
      latents: float32 packed latents ``(B, S, C)``.
      timestep: float32 ``(B,)``.
      context: ``(2B, L, caption_channels)`` (negatives, then prompts) if ``guided`` else ``(B, L, ...)``.
      context_lengths: int32 valid text tokens per context row.
      cos, sin: RoPE tables ``(S, heads, head_dim/2)``.
      guidance_scale, guidance_rescale: float32 scalars (traced).
      guided: run both CFG halves; rescale: apply :func:`~vidax.schedulers.guidance.rescale_noise_cfg` (static).
      mesh, rules: the transformer's mesh (None: one device) and sharding rules.

    Returns:
      float32 ``(B, S, C)`` (replicated on a mesh).
    """
    x, t = _batch(latents, timestep, guided)
    out = forward(params, x, t, context, context_lengths, cos, sin, cfg=cfg, attention_impl=attention_impl, mesh=mesh,
                  rules=rules)
    return _guide(out, guidance_scale, guidance_rescale, guided=guided, rescale=rescale, mesh=mesh)


def io_shardings(mesh: Mesh | None, rules: ShardingRules = LTX_RULES, per_token: bool = False) -> dict:
    """The sharding of each block input: :func:`~vidax.models.ltx.transformer.block_io_specs` on a mesh (per-token
    modulation split over ``sequence`` with the tokens), else the first local device (committed, so every block call
    hits one compilation)."""
    if mesh is None:
        return {k: device_sharding(None) for k in _NAMES}
    return {k: NamedSharding(mesh, v) for k, v in block_io_specs(rules, per_token).items()}


def _prologue(params, latents, timestep, context, context_lengths, cos, sin, *, cfg, guided, mesh, rules):
    x, t = _batch(latents, timestep, guided)
    x, emb, temb6, ctx, cos, sin = forward_prologue(params, x, t, context, context_lengths, cos, sin, cfg=cfg,
                                                    mesh=mesh, rules=rules)
    return x, ctx, context_lengths, temb6, cos, sin, emb


def _epilogue(params, x, emb, guidance_scale, guidance_rescale, *, tokens, guided, rescale, mesh):
    out = forward_epilogue(params, x, emb, tokens=tokens)
    return _guide(out, guidance_scale, guidance_rescale, guided=guided, rescale=rescale, mesh=mesh)


@lru_cache(maxsize=64)
def chunk_function(cfg: LTXVideoTransformerConfig, attention_impl: AttentionImpl | str, mesh: Mesh | None,
                   rules: ShardingRules = LTX_RULES, valid_tokens: int | None = None, per_token: bool = False):
    """The one compiled block program: ``fn(chunk, x, context, context_lengths, temb6, cos, sin) -> x`` (``x`` donated).

    The traced function is named ``_ltx_block_chunk`` (what compile-event listeners see).
    """
    impl = AttentionImpl(attention_impl)

    def _ltx_block_chunk(blocks, x, context, context_lengths, temb6, cos, sin):
        return run_blocks(blocks, x, context, context_lengths, temb6, cos, sin, cfg=cfg, attention_impl=impl,
                          mesh=mesh, rules=rules, valid_tokens=valid_tokens)

    io = io_shardings(mesh, rules, per_token)
    if mesh is None:
        return jax.jit(_ltx_block_chunk, donate_argnums=1, out_shardings=io["x"])
    blocks = rules.param_shardings(transformer_specs(cfg), mesh)["blocks"]
    return jax.jit(_ltx_block_chunk, donate_argnums=1, out_shardings=io["x"],
                   in_shardings=(blocks, *(io[n] for n in _NAMES)))


def compile_step(params: dict, stack: OffloadedStack, latents, timestep, context, context_lengths, cos, sin,
                 guidance_scale, guidance_rescale, *, cfg: LTXVideoTransformerConfig, attention: AttentionImpl | str,
                 guided: bool, rescale: bool, mesh: Mesh | None = None, rules: ShardingRules = LTX_RULES,
                 overlap: bool = True):
    """Compile the three pieces ahead of time and return the step.

    Args:
      params: the transformer parameters outside ``"blocks"``; stack: the blocks as chunks.
      latents ... guidance_rescale: the inputs of :func:`cfg_step`, placed as the pipeline places them.
      cfg, attention, guided, rescale, mesh, rules: as for :func:`cfg_step`.
      overlap: with chunks in host memory, copy the next chunk while the current one computes.

    Returns:
      ``step(params, latents, timestep, context, context_lengths, cos, sin, guidance_scale, guidance_rescale) ->
      prediction``, the contract of the compiled :func:`cfg_step`.
    """
    per_token = timestep.ndim == 2  # (B, S) timesteps: conditioning tokens at their own noise level
    io = io_shardings(mesh, rules, per_token)
    # context_lengths stays as given (replicated or per data shard); the others as the blocks' shard_map takes them.
    pro = jax.jit(partial(_prologue, cfg=cfg, guided=guided, mesh=mesh, rules=rules),
                  out_shardings=tuple(io[n] for n in _NAMES) + (None,))
    inputs = (params, latents, timestep, context, context_lengths, cos, sin)
    pro_c = pro.lower(*inputs).compile()
    outs = jax.eval_shape(pro, *inputs)
    ab = {n: jax.ShapeDtypeStruct(o.shape, o.dtype, sharding=io[n]) for n, o in zip(_NAMES, outs)}
    # The head's timestep embedding: as the compiled prologue places it (its sharding is XLA's choice).
    emb = jax.ShapeDtypeStruct(outs[-1].shape, outs[-1].dtype, sharding=pro_c.output_shardings[-1])
    tokens = latents.shape[1]
    run = chunk_function(cfg, attention, mesh, rules, tokens, per_token)
    chunk_c = run.lower(stack.abstract_chunk(), *(ab[n] for n in _NAMES)).compile()
    epi = jax.jit(partial(_epilogue, tokens=tokens, guided=guided, rescale=rescale, mesh=mesh))
    epi_c = epi.lower(params, ab["x"], emb, guidance_scale, guidance_rescale).compile()

    def step(params, latents, timestep, context, context_lengths, cos, sin, guidance_scale, guidance_rescale):
        x, ctx, lengths, temb6, c, s, emb = pro_c(params, latents, timestep, context, context_lengths, cos, sin)
        x = stream(stack, lambda chunk, x: chunk_c(chunk, x, ctx, lengths, temb6, c, s), x, overlap=overlap)
        return epi_c(params, x, emb, guidance_scale, guidance_rescale)

    return step


__all__ = ["cfg_step", "chunk_function", "compile_step", "io_shardings"]
