"""LTX-2's transformer program on a device mesh and / or with its blocks streamed from host memory (docs/design.md,
"Block loop" and "Offloading"; the pattern of :mod:`vidax.models.cosmos3.block_loop`).

:func:`make_forward` returns a callable with the signature of :func:`vidax.models.ltx2.transformer._forward`
(positional arrays, keyword statics), the seam the pipeline calls the transformer through:

* neither a mesh nor chunks: :func:`~vidax.models.ltx2.transformer._forward` itself (the blocks under one
  ``lax.scan``);
* a mesh (:mod:`vidax.models.ltx2.sharding`): one program; the prologue and the output heads partitioned by GSPMD
  from the parameter and activation shardings, the blocks under ``lax.scan`` inside one ``shard_map`` over every mesh
  axis (batch over ``data``, video and audio tokens over ``sequence``, heads and FFN width over ``tensor``:
  :class:`vidax.models.ltx2.transformer.BlockParallel`). A stream whose token count sp does not divide is
  zero-padded to a multiple of sp; the padded keys are masked (``kv_lengths``) in every attention reading them (video
  self and video->audio for the video stream, audio self and audio->video for the audio stream) and the padded rows
  dropped at the end, so the valid tokens see exactly the unpadded computation. A batch dp does not divide (the STG
  or modality pass of one row on dp 2) is padded by repeating its last row, the extra rows' outputs dropped;
* chunks of ``offload_chunk`` blocks in host memory, streamed to the devices by :func:`vidax.core.offload.stream` (the
  next chunk copied while the current one computes; with or without a mesh), or one-block chunks in device memory
  (``block_loop="host"``): a prologue program, one chunk program called once per chunk (its STG flags sliced at a
  start index carried as a device scalar, so one program serves every chunk), an epilogue program. A block count the
  chunk does not divide gets a zero-padded last chunk: a zero LTX-2 block is the identity of both streams (every
  residual branch ends in a zero ``to_out`` / ``proj_out`` times its gate; the per-block text modulation is not
  carried), and its STG flag is off.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from vidax.core.attention import AttentionImpl, is_kernel
from vidax.core.offload import ChunkPlan, OffloadedStack, block_plan, split_blocks, stack_metrics, stream
from vidax.core.parallel import ShardContext, padded_length, sequence_mode
from vidax.core.sharding import ShardingRules, axis_size
from vidax.models.ltx2 import transformer as T
from vidax.models.ltx2.config import LTX2TransformerConfig
from vidax.models.ltx2.sharding import LTX2_RULES, check_parallel

#: The stacked blocks' subtree.
STACK = "blocks"
#: cond entries that run with the video tokens (per-token timesteps give them one row per token).
_VIDEO_COND = ("temb", "emb", "video_ca_scale_shift", "video_ca_gate")


def plans_for(cfg: LTX2TransformerConfig, offload_chunk: int | None, block_loop: str = "scan") -> ChunkPlan | None:
    """How the block stack is placed: a host-memory :class:`~vidax.core.offload.ChunkPlan` of ``offload_chunk``
    blocks, one-block chunks in device memory (``block_loop="host"``, or ``"auto"`` on CPU), or None (stacked, one
    ``scan``); :func:`vidax.core.offload.block_plan`.

    Raises:
      ValueError: an unknown ``block_loop``; an ``offload_chunk`` that is not an integer between 1 and
        ``num_layers`` (48 in LTX-2.x).
    """
    ok = isinstance(offload_chunk, (int, np.integer)) and not isinstance(offload_chunk, bool)
    if offload_chunk is not None and not (ok and 1 <= offload_chunk <= cfg.num_layers):
        raise ValueError(f"offload_chunk must be an integer between 1 and the {cfg.num_layers} blocks, got "
                         f"{offload_chunk!r}")
    return block_plan(cfg.num_layers, offload_chunk, block_loop)


class _Layout:
    """Padded token counts, the block's :class:`BlockParallel` and the ``shard_map`` specs of one call's shapes."""

    def __init__(self, cfg: LTX2TransformerConfig, mesh, rules: ShardingRules, s: int, t: int, b: int):
        self.s, self.t, self.b = s, t, b
        if mesh is None:
            self.sp, self.sp_pad, self.tp_pad, self.b_pad, self.par = 1, s, t, b, None
            return
        self.b_pad = padded_length(b, axis_size(mesh, rules.mesh_axes("batch")))
        tp = axis_size(mesh, rules.mesh_axes("heads"))
        sp = axis_size(mesh, rules.mesh_axes("tokens"))
        self.sp, self.sp_pad, self.tp_pad = sp, padded_length(s, sp), padded_length(t, sp)
        tensor = rules.mesh_axes("heads")  # also at tp 1: the weights vary over it (a psum over one device)
        seq = rules.mesh_axes("tokens") if sp > 1 else None
        self.video_ulysses = sequence_mode(cfg.num_attention_heads // tp, sp) == "ulysses"
        audio_ulysses = sequence_mode(cfg.audio_num_attention_heads // tp, sp) == "ulysses"
        self.par = T.BlockParallel(video=ShardContext(tensor, seq, self.video_ulysses),
                                   audio=ShardContext(tensor, seq, audio_ulysses),
                                   video_tokens=s if self.sp_pad != s else None,
                                   audio_tokens=t if self.tp_pad != t else None)
        self.rules, self.mesh = rules, mesh

    def pad(self, x, axis: int, stream: str):
        """Zero-pad ``x``'s token ``axis`` of ``stream`` (``"video"`` / ``"audio"``) to a multiple of sp."""
        n = self.sp_pad if stream == "video" else self.tp_pad
        if x is None or x.shape[axis] == n:
            return x
        widths = [(0, 0)] * x.ndim
        widths[axis] = (0, n - x.shape[axis])
        return jnp.pad(x, widths)

    def pad_batch(self, x):
        """Repeat the last sample of ``x`` (leading batch axis) up to a multiple of dp (a batch dp does not divide:
        the STG or modality pass of one row on dp 2); the extra rows' outputs are dropped."""
        if x is None or self.b_pad == self.b:
            return x
        return jnp.pad(x, [(0, self.b_pad - self.b)] + [(0, 0)] * (x.ndim - 1), mode="edge")

    def specs(self, cfg: LTX2TransformerConfig, state: dict) -> dict:
        """``PartitionSpec`` s of the blocks' inputs (the non-None entries of ``state``)."""
        r = self.rules
        batch, tok, ten = r.mesh_axes("batch"), r.mesh_axes("tokens"), r.mesh_axes("heads")
        stream = PartitionSpec(batch, tok, None)

        def rope(table):  # (S, W) / (S, g, r), optionally batched: tokens over sequence, heads over tensor
            lead = (batch,) if table.ndim == (3 if cfg.rope_type == "interleaved" else 4) else ()
            rest = (tok, ten) + ((None,) if cfg.rope_type == "split" else ())
            return PartitionSpec(*lead, *rest)

        out = {"x": stream, "a": stream, "ctx": PartitionSpec(batch, None, None),
               "actx": PartitionSpec(batch, None, None),
               "cond": {k: PartitionSpec(batch, tok if v.shape[1] > 1 else None, None)
                        for k, v in state["cond"].items()},
               "ropes": {k: tuple(rope(t) for t in v) for k, v in state["ropes"].items()},
               "text_bias": PartitionSpec(batch, None), "audio_text_bias": PartitionSpec(batch, None),
               "flags": PartitionSpec(), "pm": PartitionSpec(batch),
               "self_bias": PartitionSpec(batch, None if self.video_ulysses else tok, None)}
        return {k: out[k] for k in state}


def _prepare(params, x, a, ctx, actx, timestep, audio_timestep, sigma, audio_sigma, ropes, keyframes, text_bias,
             audio_text_bias, stg, self_bias, *, cfg, use_cross_timestep, layout: _Layout) -> dict:
    """The prologue with both streams (and everything per token) zero-padded to the layout: the blocks' inputs as a
    dict (None entries dropped)."""
    lay = layout
    batched_rope = 3 if cfg.rope_type == "interleaved" else 4
    x, a, ctx, actx, timestep, audio_timestep, sigma, audio_sigma, keyframes, text_bias, audio_text_bias, self_bias = (
        lay.pad_batch(v) for v in (x, a, ctx, actx, timestep, audio_timestep, sigma, audio_sigma, keyframes, text_bias,
                                   audio_text_bias, self_bias))
    ropes = {k: tuple(lay.pad_batch(t) if t.ndim == batched_rope else t for t in v) for k, v in ropes.items()}
    if stg is not None:
        stg = (stg[0], lay.pad_batch(stg[1]))
    if timestep.shape[1] != 1:
        timestep = lay.pad(timestep, 1, "video")
    if audio_timestep.shape[1] != 1:
        audio_timestep = lay.pad(audio_timestep, 1, "audio")
    x, a = lay.pad(x, 1, "video"), lay.pad(a, 1, "audio")
    keyframes = lay.pad(keyframes, 1, "video")
    x, a, ctx, actx, cond = T.prologue(params, x, a, ctx, actx, timestep, audio_timestep, sigma, audio_sigma,
                                       keyframes, cfg=cfg, use_cross_timestep=use_cross_timestep)
    batched = 3 if cfg.rope_type == "interleaved" else 4
    ropes = {k: tuple(lay.pad(t, 1 if t.ndim == batched else 0, "audio" if "audio" in k else "video") for t in v)
             for k, v in ropes.items()}
    if self_bias is not None:
        self_bias = lay.pad(lay.pad(self_bias, 1, "video"), 2, "video")
    flags, pm = (None, None) if stg is None else stg
    state = {"x": x, "a": a, "ctx": ctx, "actx": actx, "cond": cond, "ropes": ropes, "text_bias": text_bias,
             "audio_text_bias": audio_text_bias, "flags": flags, "pm": pm, "self_bias": self_bias}
    state = {k: v for k, v in state.items() if v is not None}
    if lay.par is not None:
        specs = lay.specs(cfg, state)
        state = jax.tree.map(lambda v, s: jax.lax.with_sharding_constraint(v, NamedSharding(lay.mesh, s)), state,
                             specs)
    return state


def _blocks(blocks, state: dict, flags, *, cfg, impl, isolate_modalities, layout: _Layout) -> tuple:
    """The blocks (stacked or one chunk, with their ``flags``) on ``state``; inside ``shard_map`` on a mesh."""
    stg_on = "pm" in state

    def body(blocks, state, flags, par):
        g = state.get
        return T.run_blocks(blocks, state["x"], state["a"], state["ctx"], state["actx"], state["cond"],
                            state["ropes"], g("text_bias"), g("audio_text_bias"), flags if stg_on else None,
                            g("pm"), g("self_bias"), cfg=cfg, impl=impl, isolate_modalities=isolate_modalities,
                            par=par)

    if layout.par is None:
        return body(blocks, state, flags, None)
    specs = layout.specs(cfg, state)
    bspecs = layout.rules.param_specs(T.transformer_specs(cfg)[STACK])
    fn = jax.shard_map(partial(body, par=layout.par), mesh=layout.mesh,
                       in_specs=(bspecs, specs, PartitionSpec()), out_specs=(specs["x"], specs["a"]),
                       check_vma=not is_kernel(impl))
    return fn(blocks, state, flags)


def _finish(params, x, a, cond, layout: _Layout) -> tuple:
    out, aout = T.epilogue(params, x, a, cond)
    out, aout = out[:layout.b, :layout.s], aout[:layout.b, :layout.t]
    if layout.par is not None:
        rep = NamedSharding(layout.mesh, PartitionSpec())
        out, aout = jax.lax.with_sharding_constraint(out, rep), jax.lax.with_sharding_constraint(aout, rep)
    return out, aout


_STATICS = ("cfg", "attention_impl", "use_cross_timestep", "isolate_modalities")


@partial(jax.jit, static_argnames=_STATICS + ("mesh", "rules"))
def _mesh_forward(params, x, a, ctx, actx, timestep, audio_timestep, sigma, audio_sigma, ropes, keyframes, text_bias,
                  audio_text_bias, stg, self_bias, *, cfg, attention_impl, use_cross_timestep, isolate_modalities,
                  mesh, rules):
    layout = _Layout(cfg, mesh, rules, x.shape[1], a.shape[1], x.shape[0])
    state = _prepare(params, x, a, ctx, actx, timestep, audio_timestep, sigma, audio_sigma, ropes, keyframes,
                     text_bias, audio_text_bias, stg, self_bias, cfg=cfg, use_cross_timestep=use_cross_timestep,
                     layout=layout)
    flags = state.pop("flags", None)
    if flags is None:
        flags = jnp.zeros((cfg.num_layers,), bool)
    xo, ao = _blocks(params[STACK], state, flags, cfg=cfg, impl=AttentionImpl(attention_impl),
                     isolate_modalities=isolate_modalities, layout=layout)
    return _finish(params, xo, ao, state["cond"], layout)


class LTX2Forward:
    """The transformer program for one placement; call it as :func:`vidax.models.ltx2.transformer._forward`.

    Attributes:
      params: the parameter tree to pass as the first argument (placed: sharded on the mesh; without ``"blocks"``
        when :attr:`stack` holds them). With chunks, only the non-block leaves of the tree passed are read.
      stack: the :class:`~vidax.core.offload.OffloadedStack` of the blocks, or None (stacked, one ``scan``).
      mesh, rules, overlap: as :func:`make_forward`.
    """

    def __init__(self, params: dict, cfg: LTX2TransformerConfig, stack: OffloadedStack | None, mesh, rules,
                 overlap: bool):
        self.params, self.cfg, self.stack, self.mesh, self.rules, self.overlap = \
            params, cfg, stack, mesh, rules, overlap
        self._programs: dict = {}
        self.timings: list | None = None

    @property
    def loop_name(self) -> str:
        """``"scan"``, ``"host"`` (one-block chunks in device memory) or ``"offload"`` (host memory)."""
        return stack_metrics({STACK: self.stack} if self.stack else None, self.overlap)["block_loop"]

    def metrics(self) -> dict:
        """The block-loop metrics of :func:`vidax.core.offload.stack_metrics`."""
        return stack_metrics({STACK: self.stack} if self.stack else None, self.overlap)

    def __call__(self, params, x, a, ctx, actx, timestep, audio_timestep, sigma, audio_sigma, ropes, keyframes,
                 text_bias, audio_text_bias, stg, self_bias, *, cfg: LTX2TransformerConfig, attention_impl: str,
                 use_cross_timestep: bool, isolate_modalities: bool):
        if self.stack is None:
            return _mesh_forward(params, x, a, ctx, actx, timestep, audio_timestep, sigma, audio_sigma, ropes,
                                 keyframes, text_bias, audio_text_bias, stg, self_bias, cfg=cfg,
                                 attention_impl=attention_impl, use_cross_timestep=use_cross_timestep,
                                 isolate_modalities=isolate_modalities, mesh=self.mesh, rules=self.rules)
        params = {k: v for k, v in params.items() if k != STACK}
        pro, chunk, epi = self._compiled(cfg, attention_impl, use_cross_timestep, isolate_modalities,
                                         x.shape[1], a.shape[1], x.shape[0])
        state, flags, start = pro(params, x, a, ctx, actx, timestep, audio_timestep, sigma, audio_sigma, ropes,
                                  keyframes, text_bias, audio_text_bias, stg, self_bias)

        def run(blocks, carry):
            return chunk(blocks, *carry, state, flags)

        xo, ao, _ = stream(self.stack, run, (state["x"], state["a"], start), overlap=self.overlap,
                           timings=self.timings)
        return epi(params, xo, ao, state["cond"])

    def _compiled(self, cfg, attention_impl, use_cross_timestep, isolate_modalities, s, t, b):
        key = (cfg, attention_impl, use_cross_timestep, isolate_modalities, s, t, b)
        if key in self._programs:
            return self._programs[key]
        layout = _Layout(cfg, self.mesh, self.rules, s, t, b)
        plan = self.stack.plan
        size = plan.chunk
        impl = AttentionImpl(attention_impl)

        def prologue(params, x, a, ctx, actx, timestep, audio_timestep, sigma, audio_sigma, ropes, keyframes,
                     text_bias, audio_text_bias, stg, self_bias):
            state = _prepare(params, x, a, ctx, actx, timestep, audio_timestep, sigma, audio_sigma, ropes, keyframes,
                             text_bias, audio_text_bias, stg, self_bias, cfg=cfg,
                             use_cross_timestep=use_cross_timestep, layout=layout)
            flags = state.pop("flags", None)
            flags = jnp.zeros((plan.padded_layers,), bool) if flags is None else \
                jnp.pad(flags, (0, plan.padded_layers - flags.shape[0]))
            # the first chunk's start comes out of a program, committed as the next chunks' ``start + size`` is
            return state, flags, jnp.zeros((), jnp.int32)

        def chunk(blocks, x, a, start, state, flags):
            state = {**state, "x": x, "a": a}
            part = jax.lax.dynamic_slice_in_dim(flags, start, size)
            xo, ao = _blocks(blocks, state, part, cfg=cfg, impl=impl, isolate_modalities=isolate_modalities,
                             layout=layout)
            return xo, ao, start + size

        def epilogue(params, x, a, cond):
            return _finish(params, x, a, cond, layout)

        progs = (jax.jit(prologue), jax.jit(chunk, donate_argnums=(1, 2)), jax.jit(epilogue))
        self._programs[key] = progs
        return progs


def make_forward(params: dict, cfg: LTX2TransformerConfig, *, mesh=None, offload_chunk: int | None = None,
                 overlap: bool = True, attention_impl: AttentionImpl | str = AttentionImpl.XLA,
                 block_loop: str = "scan", stack: OffloadedStack | None = None,
                 rules: ShardingRules = LTX2_RULES) -> Any:
    """The transformer program for a placement, called as :func:`vidax.models.ltx2.transformer._forward`
    (``fn(params, x, a, ctx, actx, timestep, audio_timestep, sigma, audio_sigma, ropes, keyframes, text_bias,
    audio_text_bias, stg, self_bias, *, cfg, attention_impl, use_cross_timestep, isolate_modalities)``; the float32
    ``(video, audio)`` outputs replicated on a mesh).

    Args:
      params: the transformer tree (:func:`vidax.models.ltx2.transformer.transformer_specs`), in any of three states:
        blocks stacked (resident arrays or NumPy: placed here, sharded on ``mesh`` and / or split into chunks, a
        copy); loaded already placed with :func:`vidax.models.ltx2.sharding.param_shardings` (blocks as tuples of
        chunks: split here without a copy); or without ``"blocks"`` together with ``stack``.
      cfg: the transformer configuration.
      mesh: a ``(data, tensor, sequence)`` mesh (:func:`vidax.core.sharding.optional_mesh`) or None.
      offload_chunk: blocks per chunk kept in host memory (None: resident).
      overlap: copy the next chunk while the current one computes.
      attention_impl: accepted for the seam's symmetry; the implementation is the call's ``attention_impl``.
      block_loop: ``"scan"`` (default), ``"host"`` or ``"auto"`` (:func:`plans_for`), without ``offload_chunk``.
      stack: the blocks already as an :class:`~vidax.core.offload.OffloadedStack`.
      rules: :data:`vidax.models.ltx2.sharding.LTX2_RULES`.

    Returns:
      :func:`vidax.models.ltx2.transformer._forward` itself without a mesh and chunks (``params`` used as given),
      else an :class:`LTX2Forward` whose :attr:`LTX2Forward.params` is the tree to call it with.

    Raises:
      ValueError: a mesh the model cannot use (:func:`vidax.models.ltx2.sharding.check_parallel`: tp must divide the
        head counts and FFN widths); a bad ``offload_chunk`` or ``block_loop``. Any batch and token counts run (padded
        to multiples of dp and sp inside the program).
    """
    del attention_impl
    check_parallel(cfg, mesh, rules)
    plan = None if stack is not None else plans_for(cfg, offload_chunk, block_loop)
    if mesh is None and plan is None and stack is None:
        return T._forward
    specs = T.transformer_specs(cfg)
    if stack is None and plan is not None:
        leaves = jax.tree.leaves(params[STACK], is_leaf=lambda v: isinstance(v, tuple))
        if leaves and isinstance(leaves[0], tuple):  # loaded with param_shardings: chunks already
            params, stack = split_blocks(dict(params), specs, plan, mesh, rules)
        else:
            device = None if mesh is None else rules.param_shardings(specs, mesh)[STACK]
            memory = "device" if plan.memory == "device" else "auto"
            stack = OffloadedStack.from_stacked(params[STACK], plan.chunk, device, memory_kind=memory)
            params = {k: v for k, v in params.items() if k != STACK}
    if mesh is not None:
        shardings = rules.param_shardings(specs, mesh)
        params = {k: jax.device_put(v, shardings[k]) if not _placed(v, shardings[k]) else v
                  for k, v in params.items()}
    return LTX2Forward(params, cfg, stack, mesh, rules, overlap)


def _placed(tree, shardings) -> bool:
    leaves, targets = jax.tree.leaves(tree), jax.tree.leaves(shardings)
    return all(isinstance(v, jax.Array) and v.sharding == s for v, s in zip(leaves, targets))


__all__ = ["LTX2Forward", "STACK", "make_forward", "plans_for"]
