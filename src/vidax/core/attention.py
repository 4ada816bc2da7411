"""The one attention entry point.

Every model calls :func:`attention`; the implementation is chosen by an enum,
not by the model. Padding is given as per-sample key lengths (right padding),
never as a dense ``(B, H, Sq, Sk)`` mask (paper Table 4 fault 6), so kernels
that skip invalid key blocks take it as lengths or segment ids.

Implementations:

``xla``
    Plain einsum attention: scores ``(B, H, Sq, Sk)`` in float32, softmax in
    float32. The reference the others are tested against.
``chunked``
    The same math over query chunks inside ``lax.map``, so only
    ``(B, H, chunk, Sk)`` scores exist at a time: memory O(chunk * Sk) instead of
    O(Sq * Sk), for long video sequences on backends without a flash kernel.
``cudnn``
    cuDNN flash attention through ``jax.nn.dot_product_attention(implementation="cudnn")``
    on NVIDIA GPUs, bfloat16/float16 only; key lengths become
    ``key_value_seq_lengths`` (and ``query_seq_lengths`` = all queries).
``splash``
    The Pallas TPU splash-attention kernel
    (``jax.experimental.pallas.ops.tpu.splash_attention``); key lengths become segment
    ids (valid keys 0, padding 1), so fully padded key blocks are skipped. On the CPU
    backend it runs in Pallas interpret mode (a correctness check, slow).
``cpu_flash``
    vidax's fused flash-attention kernel for the CPU backend (``core/native``, an XLA FFI
    custom call): per (batch, head), query blocks through ``q k^T``, an online softmax and
    ``p v`` in cache, float32 accumulation, over XLA's own thread pool. Inputs of other
    float dtypes are computed in float32. No score bias (falls back).
``auto``
    ``cudnn`` on GPU, ``splash`` on TPU, ``cpu_flash`` on CPU (``chunked`` where the native
    module is not built), ``chunked`` elsewhere.

A kernel that cannot take a call (wrong backend or dtype, a score bias splash has no
input for, a shape cuDNN rejects) falls back to ``chunked`` with one
:class:`AttentionFallbackWarning` per distinct shape, dtype and reason.

Pallas and cuDNN custom calls are opaque to GSPMD (paper Table 4 fault 7). Inside
``shard_map`` (the transformers' blocks) every call is already per shard. Called
under a mesh with automatically partitioned axes (``jax.set_mesh``), a kernel is
wrapped in its own ``shard_map``: batch over ``data`` and heads over ``tensor`` when
they divide, replicated otherwise.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import math
import warnings
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec

from vidax.core.sharding import DATA, TENSOR


class AttentionImpl(str, enum.Enum):
    AUTO = "auto"
    XLA = "xla"
    CHUNKED = "chunked"
    CUDNN = "cudnn"
    SPLASH = "splash"
    CPU_FLASH = "cpu_flash"


class AttentionFallbackWarning(RuntimeWarning):
    """A requested attention kernel could not take a call; ``chunked`` ran instead."""


class _Refused(Exception):
    """A kernel declines a call; the message says why."""


def resolve_implementation(implementation: AttentionImpl | str, backend: str | None = None) -> AttentionImpl:
    """The concrete implementation ``auto`` stands for on ``backend`` (default ``jax.default_backend()``).

    Returns:
      ``CUDNN`` on ``"gpu"``/``"cuda"``, ``SPLASH`` on ``"tpu"``, ``CHUNKED`` otherwise; any
      other implementation unchanged.

    Raises:
      ValueError: an unknown implementation name.
    """
    impl = AttentionImpl(implementation)
    if impl is not AttentionImpl.AUTO:
        return impl
    backend = backend or jax.default_backend()
    if backend in ("gpu", "cuda"):
        return AttentionImpl.CUDNN
    if backend == "tpu":
        return AttentionImpl.SPLASH
    if backend == "cpu" and _cpu_module() is not None:
        return AttentionImpl.CPU_FLASH
    return AttentionImpl.CHUNKED


KERNELS = (AttentionImpl.CUDNN, AttentionImpl.SPLASH, AttentionImpl.CPU_FLASH)


def is_kernel(implementation: AttentionImpl | str) -> bool:
    """Whether ``implementation`` (after resolving ``auto``) is an opaque kernel call.

    Kernel calls carry no varying-manual-axes types, so a ``shard_map`` around them runs with
    ``check_vma=False``; the einsum paths keep the check.
    """
    return resolve_implementation(implementation) in KERNELS


def _scores_softmax_values(q, k, v, scale, kv_lengths, bias):
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32) * scale
    if bias is not None:
        s = s + bias.astype(jnp.float32)
    if kv_lengths is not None:
        valid = jnp.arange(k.shape[1])[None, :] < kv_lengths[:, None]  # (B, Sk)
        s = jnp.where(valid[:, None, None, :], s, -jnp.inf)
    p = jax.nn.softmax(s, axis=-1)
    if kv_lengths is not None:
        # A row with no valid key (length 0) gives zeros, not NaN.
        p = jnp.where(jnp.isnan(p), 0.0, p)
    return jnp.einsum("bhqk,bkhd->bqhd", p.astype(v.dtype), v, preferred_element_type=jnp.float32)


def attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    implementation: AttentionImpl | str = AttentionImpl.XLA,
    kv_lengths: jax.Array | None = None,
    bias: jax.Array | None = None,
    scale: float | None = None,
    query_chunk_size: int = 1024,
) -> jax.Array:
    """Multi-head attention ``softmax(q k^T * scale + bias) v``.

    Args:
      q: ``(B, Sq, H, D)``.
      k, v: ``(B, Sk, H, D)``.
      implementation: an :class:`AttentionImpl` (or its string value); see the module docstring.
      kv_lengths: optional ``(B,)`` int32 count of valid keys per sample (keys at or past
        it are ignored; right padding). A sample with no valid key gives zeros.
      bias: optional additive score bias broadcastable to ``(B, H, Sq, Sk)`` (T5's relative
        position bias); only small models use it. ``splash`` has no input for it and falls back.
      scale: score scale; default ``1 / sqrt(D)``.
      query_chunk_size: query rows per chunk for ``chunked`` (and for fallbacks).

    Returns:
      ``(B, Sq, H, D)`` in ``q.dtype``; accumulation in float32.

    Raises:
      ValueError: unknown implementation.

    Warns:
      AttentionFallbackWarning: once per shape/dtype/reason when ``cudnn`` or ``splash``
        cannot take the call and ``chunked`` runs instead.
    """
    impl = resolve_implementation(implementation)
    if impl is AttentionImpl.CPU_FLASH and bias is not None and AttentionImpl(implementation) is AttentionImpl.AUTO:
        impl = AttentionImpl.CHUNKED  # auto's CPU choice for a biased call (T5), without a fallback warning
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    if impl in KERNELS:
        kernel = {AttentionImpl.CUDNN: _cudnn, AttentionImpl.SPLASH: _splash, AttentionImpl.CPU_FLASH: _cpu_flash}[impl]
        try:
            _precheck(impl, q, bias)
            out = _partitioned(functools.partial(kernel, scale=scale), q, k, v, kv_lengths, bias)
            _note(impl)
            return out
        except _Refused as why:
            _warn_once(impl, str(why), q, k)
            impl = AttentionImpl.CHUNKED
    _note(impl)
    if impl is AttentionImpl.XLA or q.shape[1] <= query_chunk_size:
        return _scores_softmax_values(q, k, v, scale, kv_lengths, bias).astype(q.dtype)
    return _chunked(q, k, v, scale, kv_lengths, bias, query_chunk_size)


# -- what ran ------------------------------------------------------------------

_RECORDERS: list[set] = []


@contextlib.contextmanager
def recording() -> Iterator[set]:
    """Collect the implementations :func:`attention` runs with while tracing inside the block (fallbacks included:
    what actually ran, not what was asked for). The pipelines report it as the ``attention`` metric.

    Yields:
      a set of :class:`AttentionImpl` values, filled as programs are traced (empty if nothing was traced, e.g. a
      program already in JAX's trace cache).
    """
    seen: set = set()
    _RECORDERS.append(seen)
    try:
        yield seen
    finally:
        _RECORDERS.remove(seen)


def _note(impl: AttentionImpl) -> None:
    for seen in _RECORDERS:
        seen.add(impl.value)


def ran_label(seen: set, requested: AttentionImpl | str, previous: str | None = None) -> str:
    """The ``attention`` metric: the implementations that ran (``"cpu_flash"``, or ``"chunked+cpu_flash"`` when
    some calls fell back); when nothing was traced this time (the step came from JAX's trace cache), ``previous``
    (what the last trace recorded), else the resolved request."""
    if seen:
        return "+".join(sorted(seen))
    return previous if previous is not None else resolve_implementation(requested).value


def query_chunks(sq: int, query_chunk_size: int) -> tuple[int, int]:
    """``(n, chunk)``: the fewest chunks of at most ``query_chunk_size`` rows, all the same length.

    The rows are split evenly (``chunk = ceil(sq / n)``, rounded up to a multiple of 8 for
    vector-friendly tiles where that stays within ``query_chunk_size``) rather than into full chunks
    plus a padded last one: 1280 queries are two chunks of 640, not two of 1024 with 768 padded rows
    computed and thrown away.
    """
    n = -(-sq // query_chunk_size)
    even = -(-sq // n)
    chunk = min(query_chunk_size, -(-even // 8) * 8)
    return -(-sq // chunk), chunk


def _chunked(q, k, v, scale, kv_lengths, bias, query_chunk_size):
    b, sq, h, d = q.shape
    n, query_chunk_size = query_chunks(sq, query_chunk_size)
    pad = n * query_chunk_size - sq
    qp = jnp.pad(q, ((0, 0), (0, pad), (0, 0), (0, 0))).reshape(b, n, query_chunk_size, h, d).swapaxes(0, 1)
    if bias is not None and bias.shape[-2] != 1:
        bias = jnp.broadcast_to(bias, (*bias.shape[:-2], sq, bias.shape[-1]))
        bias = jnp.pad(bias, [(0, 0)] * (bias.ndim - 2) + [(0, pad), (0, 0)])
        bias = jnp.moveaxis(bias.reshape(*bias.shape[:-2], n, query_chunk_size, bias.shape[-1]), -3, 0)

        def body(args):
            qc, bc = args
            return _scores_softmax_values(qc, k, v, scale, kv_lengths, bc)

        out = jax.lax.map(body, (qp, bias))
    else:
        out = jax.lax.map(lambda qc: _scores_softmax_values(qc, k, v, scale, kv_lengths, bias), qp)
    out = out.swapaxes(0, 1).reshape(b, n * query_chunk_size, h, d)[:, :sq]
    return out.astype(q.dtype)


# -- fallbacks ---------------------------------------------------------------

_WARNED: set = set()


def _warn_once(impl: AttentionImpl, reason: str, q, k) -> None:
    key = (impl.value, reason, tuple(q.shape), tuple(k.shape), str(q.dtype))
    if key in _WARNED:
        return
    _WARNED.add(key)
    warnings.warn(
        f"attention: {impl.value!r} cannot run q {tuple(q.shape)} / k {tuple(k.shape)} {q.dtype}: {reason}; "
        "running 'chunked' instead (same result, O(chunk * Sk) memory, slower)",
        AttentionFallbackWarning,
        stacklevel=3,
    )


def _precheck(impl: AttentionImpl, q, bias) -> None:
    backend = jax.default_backend()
    if impl is AttentionImpl.CUDNN:
        if backend not in ("gpu", "cuda"):
            raise _Refused(f"cuDNN attention needs an NVIDIA GPU (backend is {backend!r})")
        if q.dtype not in (jnp.bfloat16, jnp.float16):
            raise _Refused("cuDNN flash attention takes bfloat16 or float16 inputs")
    elif impl is AttentionImpl.SPLASH:
        if backend not in ("tpu", "cpu"):
            raise _Refused(f"splash attention is a Pallas TPU kernel (backend is {backend!r}; use 'cudnn' on GPUs)")
        if bias is not None:
            raise _Refused("splash attention has no input for an additive score bias")
    else:
        if backend != "cpu":
            raise _Refused(f"cpu_flash is a kernel for the CPU backend (backend is {backend!r})")
        if _cpu_module() is None:
            raise _Refused("the native module vidax.core._attention is not built (reinstall vidax: pip install -e .)")
        if bias is not None:
            raise _Refused("cpu_flash has no input for an additive score bias")
        if not jnp.issubdtype(q.dtype, jnp.floating):
            raise _Refused(f"cpu_flash takes floating inputs, not {q.dtype}")


# -- cpu_flash (XLA FFI) -------------------------------------------------------

_CPU_TARGET = "vidax_attention_f32"


@functools.lru_cache(maxsize=1)
def _cpu_module():
    """The native module, its handler registered with XLA for the CPU platform; None if not built."""
    try:
        from vidax.core import _attention
    except ImportError:
        return None
    jax.ffi.register_ffi_target(_CPU_TARGET, _attention.handler(), platform="cpu")
    return _attention


def cpu_flash_isa() -> str | None:
    """The instruction set ``cpu_flash`` runs with here (``"avx512"``, ``"avx2"``, ``"generic"``), or None if unbuilt."""
    module = _cpu_module()
    return None if module is None else module.isa()


def _cpu_flash(q, k, v, kv_lengths, bias, *, scale):
    """The fused CPU kernel (``core/native/attention_kernel.h``): float32 in, float32 out."""
    del bias  # refused in _precheck
    b, sk = q.shape[0], k.shape[1]
    lengths = jnp.full((b,), sk, jnp.int32) if kv_lengths is None else kv_lengths.astype(jnp.int32)
    call = jax.ffi.ffi_call(_CPU_TARGET, jax.ShapeDtypeStruct(q.shape, jnp.float32), vmap_method="sequential")
    f32 = jnp.float32
    out = call(q.astype(f32), k.astype(f32), v.astype(f32), lengths, scale=np.float32(scale))
    return out.astype(q.dtype)


# -- cuDNN -------------------------------------------------------------------


def _cudnn(q, k, v, kv_lengths, bias, *, scale):
    """cuDNN flash attention, ``(B, S, H, D)`` layout as ours. Raises _Refused where cuDNN declines."""
    qlen = kvlen = None
    if kv_lengths is not None:
        kvlen = kv_lengths.astype(jnp.int32)
        qlen = jnp.full((q.shape[0],), q.shape[1], jnp.int32)  # padding is on keys only
    if bias is not None:
        bias = jnp.broadcast_to(bias, (*(1,) * (4 - bias.ndim), *bias.shape)).astype(q.dtype)
    try:
        out = jax.nn.dot_product_attention(
            q, k, v, bias=bias, scale=scale, query_seq_lengths=qlen, key_value_seq_lengths=kvlen,
            implementation="cudnn",
        )
    except (NotImplementedError, ValueError, RuntimeError, TypeError) as e:
        raise _Refused(f"cuDNN declined ({str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__})") from e
    return _zero_empty_rows(out, kv_lengths)


def _zero_empty_rows(out, kv_lengths):
    # The xla reference gives zeros for a sample with no valid key; kernels leave it undefined.
    if kv_lengths is None:
        return out
    return jnp.where((kv_lengths > 0)[:, None, None, None], out, jnp.zeros((), out.dtype))


# -- splash (Pallas TPU) ------------------------------------------------------

_LANE = 128


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


@functools.lru_cache(maxsize=64)
def _splash_kernel(heads: int, sq: int, sk: int, block_q: int, block_kv: int, interpret: bool):
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk_lib
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as mask_lib

    mask = mask_lib.MultiHeadMask([mask_lib.FullMask((sq, sk))] * heads)
    blocks = sk_lib.BlockSizes(block_q=block_q, block_kv=block_kv, block_kv_compute=block_kv)
    # The kernel object holds its mask-info arrays: make them concrete, never tracers of the
    # trace that first asked for this (cached) kernel.
    with jax.ensure_compile_time_eval():
        kernel = sk_lib.make_splash_mha_single_device(mask, block_sizes=blocks, interpret=interpret)
    return kernel, sk_lib.SegmentIds


def _splash(q, k, v, kv_lengths, bias, *, scale):
    """Splash attention: ``q`` pre-scaled, sequences padded to the block sizes, padding as segment ids."""
    del bias  # refused in _precheck
    b, sq, h, d = q.shape
    sk = k.shape[1]
    on_tpu = jax.default_backend() == "tpu"
    block_q = min(512, _round_up(sq, _LANE))
    block_kv = min(512, _round_up(sk, _LANE))
    sq_p, sk_p = _round_up(sq, block_q), _round_up(sk, block_kv)
    d_p = _round_up(d, _LANE) if on_tpu else d  # TPU lanes; zero columns change no score

    def heads_major(x, s_p):  # (B, S, H, D) -> (B, H, S_p, D_p)
        x = jnp.pad(x, ((0, 0), (0, s_p - x.shape[1]), (0, 0), (0, d_p - d)))
        return x.transpose(0, 2, 1, 3)

    # splash applies no scale: fold it into q (in float32, one rounding to q.dtype).
    qs = (q.astype(jnp.float32) * scale).astype(q.dtype)
    qh, kh, vh = heads_major(qs, sq_p), heads_major(k, sk_p), heads_major(v, sk_p)
    kernel, segment_ids = _splash_kernel(h, sq_p, sk_p, block_q, block_kv, not on_tpu)
    if kv_lengths is None and sk_p == sk:
        out = jax.vmap(kernel)(qh, kh, vh)
    else:
        lengths = jnp.full((b,), sk, jnp.int32) if kv_lengths is None else jnp.minimum(kv_lengths.astype(jnp.int32), sk)
        kv_ids = (jnp.arange(sk_p)[None, :] >= lengths[:, None]).astype(jnp.int32)  # valid 0, padding 1
        q_ids = jnp.zeros((b, sq_p), jnp.int32)
        out = jax.vmap(lambda q_, k_, v_, qi, ki: kernel(q_, k_, v_, segment_ids=segment_ids(qi, ki)))(
            qh, kh, vh, q_ids, kv_ids)
    out = out.transpose(0, 2, 1, 3)[:, :sq, :, :d].astype(q.dtype)
    return _zero_empty_rows(out, kv_lengths)


# -- partitioning (fault 7) ----------------------------------------------------


def _partitioned(kernel, q, k, v, kv_lengths, bias):
    """Run ``kernel`` per shard under a mesh whose axes GSPMD would otherwise partition.

    Outside any mesh, or inside a ``shard_map`` over every mesh axis, the kernel runs as is.
    """
    mesh = jax.sharding.get_abstract_mesh()
    auto = [] if mesh.empty else [
        name for name, kind in zip(mesh.axis_names, mesh.axis_types)
        if kind != AxisType.Manual and mesh.shape[name] > 1
    ]
    if not auto:
        return kernel(q, k, v, kv_lengths, bias)
    b, h = q.shape[0], q.shape[2]
    batch = DATA if DATA in auto and b % mesh.shape[DATA] == 0 and bias is None else None
    heads = TENSOR if TENSOR in auto and h % mesh.shape[TENSOR] == 0 and bias is None else None
    qkv = PartitionSpec(batch, None, heads, None)
    args, specs = [q, k, v], [qkv, qkv, qkv]
    if kv_lengths is not None:
        args.append(kv_lengths)
        specs.append(PartitionSpec(batch))
    if bias is not None:
        args.append(bias)
        specs.append(PartitionSpec())

    def body(*xs):
        q_, k_, v_ = xs[:3]
        rest = list(xs[3:])
        kvl = rest.pop(0) if kv_lengths is not None else None
        bs = rest.pop(0) if bias is not None else None
        return kernel(q_, k_, v_, kvl, bs)

    return jax.shard_map(body, in_specs=tuple(specs), out_specs=qkv, axis_names=set(auto), check_vma=False)(*args)


def attention_flops(b: int, sq: int, sk: int, h: int, d: int) -> float:
    """Forward FLOPs of one attention call (two matmuls): ``4 * B * H * Sq * Sk * D``."""
    return 4.0 * b * h * sq * sk * d

