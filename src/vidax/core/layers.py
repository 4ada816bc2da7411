"""Shared layers as pure functions over parameter dicts.

Parameters follow :mod:`vidax.checkpoint.keymap`'s layouts: a linear layer is
``{"kernel": (in, out), "bias": (out,)}``, a norm ``{"scale": (D,), "bias": (D,)}``.

Precision: matmuls take their inputs in the kernel's dtype (bf16 weights run
bf16 matmuls) and accumulate in float32; normalisations always compute in
float32, as the references' ``FP32LayerNorm`` and ``RMSNorm`` under autocast do.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

#: XLA options of convolution-heavy programs (:func:`conv_jit`) on the CPU backend. XLA:CPU hands
#: convolutions to YNNPACK by default, which runs the VAEs' 3x3 convolutions at 18-60 GFLOP/s on
#: this project's Zen 3 VM where its Eigen path (these options) runs them at 90-140, PyTorch's
#: oneDNN at 100-140. Programs of matmuls keep YNNPACK: a 128-token transformer step is 10-20%
#: faster with it.
CPU_CONV_COMPILER_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}


def conv_jit(**jit_kwargs):
    """``jax.jit`` for convolution-heavy programs (the VAEs' chunk functions), as a decorator.

    Usage: ``@conv_jit(static_argnames=("cfg",), donate_argnames=("cache",))``; the keywords are
    ``jax.jit``'s. Returns a decorator making a :class:`ConvProgram`.
    """
    return lambda fun: ConvProgram(fun, jit_kwargs)


class ConvProgram:
    """A function jitted per backend: on CPU with :data:`CPU_CONV_COMPILER_OPTIONS`, elsewhere as plain
    ``jax.jit``. The backend is read at the first call, not at import (a multi-host run initialises
    ``jax.distributed`` before any backend starts). Other attributes (``lower``, ``_cache_size``) are
    those of the backend's ``jax.jit`` object."""

    def __init__(self, fun, jit_kwargs: dict):
        self._fun, self._jit_kwargs, self._by_backend = fun, dict(jit_kwargs), {}
        self._plain = jax.jit(fun, **self._jit_kwargs)  # for calls inside other transformations
        functools.update_wrapper(self, fun)

    def _jitted(self):
        backend = jax.default_backend()
        if backend not in self._by_backend:
            options = dict(CPU_CONV_COMPILER_OPTIONS) if backend == "cpu" else None
            self._by_backend[backend] = jax.jit(self._fun, compiler_options=options, **self._jit_kwargs)
        return self._by_backend[backend]

    def __call__(self, *args, **kwargs):
        if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves((args, kwargs))):
            # Inside another transformation (jit, eval_shape, vmap): JAX takes compiler options at the top-level
            # jit only, so this call joins the enclosing program as a plain nested jit.
            return self._plain(*args, **kwargs)
        return self._jitted()(*args, **kwargs)

    def __getattr__(self, name):
        if name.startswith("__") or name in ("_fun", "_jit_kwargs", "_by_backend", "_plain"):  # (not set yet: no recursion)
            raise AttributeError(name)
        return getattr(self._jitted(), name)


def linear(p: dict, x: jax.Array, out_dtype=None) -> jax.Array:
    """``x @ kernel + bias``.

    Args:
      p: ``{"kernel": (in, out), "bias": (out,) optional}``.
      x: ``(..., in)``; cast to the kernel's dtype for the matmul.
      out_dtype: result dtype; default the kernel's dtype. The product accumulates in float32.

    Returns:
      ``(..., out)``.
    """
    w = p["kernel"]
    out_dtype = out_dtype or w.dtype
    y = jnp.matmul(x.astype(w.dtype), w, preferred_element_type=jnp.float32)
    if "bias" in p:
        y = y + p["bias"].astype(jnp.float32)
    return y.astype(out_dtype)


def layer_norm(x: jax.Array, p: dict | None = None, eps: float = 1e-6) -> jax.Array:
    """LayerNorm over the last axis, computed in float32 (reference: ``FP32LayerNorm``).

    Args:
      x: ``(..., D)``, any float dtype.
      p: ``{"scale": (D,), "bias": (D,)}``, or ``None`` for ``elementwise_affine=False``.

    Returns:
      float32 ``(..., D)``.
    """
    x = x.astype(jnp.float32)
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    y = (x - mean) * jax.lax.rsqrt(var + eps)
    if p is not None:
        y = y * p["scale"].astype(jnp.float32)
        if "bias" in p:
            y = y + p["bias"].astype(jnp.float32)
    return y


def rms_norm(x: jax.Array, p: dict | None = None, eps: float = 1e-6, out_dtype=None) -> jax.Array:
    """RMSNorm over the last axis in float32 (reference: ``torch.nn.RMSNorm``, T5 ``LayerNorm``).

    Args:
      x: ``(..., D)``.
      p: ``{"scale": (D,)}`` or ``None``.
      out_dtype: result dtype; default ``x.dtype``.

    Returns:
      ``(..., D)``.
    """
    out_dtype = out_dtype or x.dtype
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(jnp.square(xf), axis=-1, keepdims=True) + eps)
    if p is not None:
        y = y * p["scale"].astype(jnp.float32)
    return y.astype(out_dtype)


def gelu_tanh(x: jax.Array) -> jax.Array:
    """GELU, tanh approximation (PyTorch ``approximate="tanh"``)."""
    return jax.nn.gelu(x, approximate=True)


def gelu(x: jax.Array) -> jax.Array:
    """GELU, exact erf form (PyTorch default)."""
    return jax.nn.gelu(x, approximate=False)


_DN3 = ("NDHWC", "DHWIO", "NDHWC")
_DN2 = ("NHWC", "HWIO", "NHWC")


def last_frames(x: jax.Array, n: int) -> jax.Array:
    """``x[:, -n:]``: the last ``n`` frames (axis 1) of ``x``, sliced from ``x`` itself at run time.

    For the 3D VAEs' feature caches: a causal convolution's next cache is the last frames of the
    concatenation ``[cache, frames]`` it convolves. Written as a static slice, XLA rewrites it into a slice
    of ``frames`` alone, which nothing then orders after the old cache's last read; the cache being
    donated (its buffers become the new cache), XLA copies every old cache entry at the start of the
    program to be safe. Wan2.1 decode chunk at 832x480 float32: 4.86 -> 3.14 GiB of temporaries; at
    128x128, 225 -> 134 MiB. A dynamic slice at a start XLA cannot fold keeps the dependence on the
    concatenation: ``dynamic_slice`` clamps its start to ``T - n``, so the start ``T - n + isnan(x[0, -1,
    0, ...])`` (0 or 1 added) reads exactly ``x[:, -n:]`` whatever the values. The probe is taken from the
    last frame, which is always one of the new frames: XLA folds it into a read of that operand, and a
    probe of the first frame (the old cache entry) made the slice read the buffer it is written into, so
    XLA computed every new entry aside and copied it in (13 copies of 6-12 MiB per Wan decoder chunk at 128x128).

    Args:
      x: ``(B, T, ...)`` with ``T >= n``.
      n: frames to keep.

    Returns:
      ``(B, n, ...)``, equal to ``x[:, -n:]``.
    """
    t = x.shape[1]
    unknown = jnp.isnan(x[(0, t - 1) + (0,) * (x.ndim - 2)]).astype(jnp.int32)  # 0 or 1: a start XLA cannot fold, clamped to t - n
    return jax.lax.dynamic_slice_in_dim(x, t - n + unknown, n, axis=1)


def conv3d(p: dict, x: jax.Array, strides=(1, 1, 1), padding=((0, 0), (0, 0), (0, 0)),
           history: jax.Array | None = None) -> jax.Array:
    """Convolution of a channels-last video ``x (B, T, H, W, Cin)``; the 3D VAEs' one conv.

    Args:
      p: ``{"kernel": (kt, kh, kw, Cin, Cout) or (kh, kw, Cin, Cout), "bias": (Cout,)}``; a 2D kernel
        runs on every frame (``kt = 1``).
      x: ``(B, T, H, W, Cin)``, cast to the kernel's dtype.
      strides, padding: per axis ``(t, h, w)``, as ``jax.lax.conv_general_dilated``.
      history: ``(B, n, H, W, Cin)`` frames that precede ``x`` in time (a causal convolution's cache), or
        None. The result is that of ``concatenate([history, x], axis=1)``, which the CPU path never builds
        (see below). Requires ``padding[0] == (0, 0)``.

    Returns:
      ``(B, T', H', W', Cout)`` in the kernel's dtype, accumulated in float32, bias added in float32.

    Raises:
      ValueError: ``history`` with time padding.

    On the CPU backend a kernel with ``kt > 1`` runs as ``kt`` 2D convolutions over the frames,
    accumulated in float32 in a ``fori_loop``: XLA:CPU's 3D convolution is 1.3-2x slower than that on the
    Wan VAE's shapes (Wan2.1 VAE decode 5x128x128: 4.9 -> 3.2 s), and the loop keeps one tap's output live
    (unrolled, XLA kept all of them: the Wan2.2 decode chunk's temporaries went from 0.63 to 1.83 GiB; in
    the loop 0.63). Each tap gathers its frames from ``history`` and ``x`` by index (a gather and a
    select, which depend on the tap): the concatenation, loop-invariant, would be hoisted out of the loop
    by XLA and held (6 frames for a 4-frame chunk) beside each tap's copy. Time padding is selected the
    same way (zeros where a tap's frame falls outside ``x``), never materialised: a padded copy, or a
    zero history gathered from, is a constant that XLA's constant folding evaluates at compile time
    (the Wan2.1 decoder's first chunk at 128x128: 14 zero frames of 6-12 MiB, 0.25 GiB of compiler
    memory). Other backends (cuDNN, TPU) take the 3D convolution as it is.
    """
    w = p["kernel"]
    if w.ndim == 4:
        w = w[None]
    x = x.astype(w.dtype)
    history = None if history is None else history.astype(w.dtype)
    kt = w.shape[0]
    if history is not None and padding[0] != (0, 0):
        raise ValueError(f"conv3d: history and time padding {padding[0]} together; pad the history instead")
    if kt == 1 or jax.default_backend() != "cpu":
        if history is not None:
            x = jnp.concatenate([history, x], axis=1)
        y = jax.lax.conv_general_dilated(x, w, window_strides=strides, padding=padding, dimension_numbers=_DN3,
                                         preferred_element_type=jnp.float32)
    else:
        st = strides[0]
        (lo, hi), t_in = padding[0], x.shape[1]
        before = lo if history is None else history.shape[1]  # frames before x: zero padding or history
        b, t = x.shape[0], before + t_in + hi
        t_out = (t - kt) // st + 1

        def frames_of(i):
            if before == 0 and hi == 0:
                return jax.lax.dynamic_slice_in_dim(x, i, st * (t_out - 1) + 1, axis=1)[:, ::st]
            j = st * jnp.arange(t_out) + i - before  # positions in x; < 0: history or padding
            inside = ((j >= 0) & (j < t_in))[None, :, None, None, None]
            new = jnp.take(x, j, axis=1, mode="clip")
            old = 0.0 if history is None else jnp.take(history, j + before, axis=1, mode="clip")
            return jnp.where(inside, new, jnp.asarray(old, x.dtype))

        def tap(i):
            return jax.lax.conv_general_dilated(frames_of(i).reshape(b * t_out, *x.shape[2:]), w[i],
                                                window_strides=strides[1:], padding=padding[1:],
                                                dimension_numbers=_DN2, preferred_element_type=jnp.float32)

        # A loop, not an unrolled sum: one tap's output is live at a time (unrolled, XLA kept all kt).
        y = jax.lax.fori_loop(1, kt, lambda i, acc: acc + tap(i), tap(0))
        y = y.reshape(b, t_out, *y.shape[1:])
    return (y + p["bias"].astype(jnp.float32)).astype(w.dtype)


def causal_conv3d(p: dict, x: jax.Array, history: jax.Array, spatial=((0, 0), (0, 0))) -> tuple[jax.Array, jax.Array]:
    """A causal convolution step of the 3D VAEs: ``conv3d`` over ``[history, x]`` in time, and the next history.

    Args:
      p: a :func:`conv3d` parameter dict with ``kt > 1`` taps in time.
      x: ``(B, T, H, W, Cin)``, this chunk's frames.
      history: ``(B, n, H, W, Cin)``, the frames before them (the feature cache entry, ``n = kt - 1`` for a
        "same"-length output), any float dtype (cast to ``x``'s).
      spatial: the ``(h, w)`` padding.

    Returns:
      ``(y, next_history)``: ``y`` as ``conv3d(p, xp, padding=((0, 0), *spatial))`` and ``next_history = xp[:,
      -n:]`` in ``x``'s dtype, with ``xp = concatenate([history, x], axis=1)`` (the reference's ``feat_cache``
      update, e.g. ``WanCausalConv3d`` / ``CogVideoXCausalConv3d`` callers in diffusers).

    With ``T >= n`` the next history is ``x[:, -n:]``, sliced at a start that depends on ``y`` (see
    :func:`last_frames`; clamped, so exactly those frames): computed after the convolution's last read of
    ``history``, it is written straight into ``history``'s buffer when the cache is donated. With ``T == n``
    (all of ``x``) XLA would drop a whole-size slice, write ``x`` into that buffer at once and copy the old
    history first; a select on ``y`` (never taken) keeps the order. Shorter chunks (the latent stage's single
    frame) take :func:`last_frames` of the concatenation.
    """
    n = history.shape[1]
    history = history.astype(x.dtype)
    y = conv3d(p, x, padding=((0, 0), *spatial), history=history)
    t = x.shape[1]
    if t < n:
        return y, last_frames(jnp.concatenate([history, x], axis=1), n)
    after = jnp.isnan(y[(0, y.shape[1] - 1) + (0,) * (y.ndim - 2)]).astype(jnp.int32)  # 0 or 1, clamped away
    if t == n:  # a whole-size slice would fold away (and with it the dependence on y): select instead
        return y, jnp.where(after > 1, jnp.zeros_like(x), x)
    return y, jax.lax.dynamic_slice_in_dim(x, t - n + after, n, axis=1)
