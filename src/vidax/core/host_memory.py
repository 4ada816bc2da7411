"""Return the host heap's free pages to the OS after XLA compilations (glibc ``malloc_trim``).

Compiling a large program (a VAE decoder chunk: hundreds of convolutions) allocates and frees hundreds of MiB
of small objects on the host. glibc keeps freed memory inside its heap arenas, where it stays resident and
counts in the process's RSS; on the CPU backend that host memory is the same RAM the weights and activations
live in. Measured on the Wan2.1 VAE decoder at 128x128 (docs/design.md, "Host memory"): 140 MiB stayed
resident after its first compile and came back with ``malloc_trim(0)``.

:func:`trim_after_compiles` installs a JAX monitoring listener that calls :func:`trim` after each backend
compilation (or persistent-cache read) that took at least ``min_seconds``; small programs are skipped, their
heap churn being small. Not glibc (musl, macOS): both are no-ops.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import threading

import jax.monitoring

#: JAX's monitoring event for one backend compilation (``jax._src.dispatch.BACKEND_COMPILE_EVENT``).
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"

_lock = threading.Lock()
_min_seconds: float | None = None  # the installed listener's threshold; None: not installed


@functools.cache
def _malloc_trim():
    """glibc's ``malloc_trim``, or None where the C library has none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


def trim() -> bool:
    """Give the free pages of every glibc heap arena back to the OS now (``malloc_trim(0)``).

    Returns:
      True if memory was released, False if none was or the C library is not glibc.
    """
    fn = _malloc_trim()
    return bool(fn(0)) if fn is not None else False


def _listener(event: str, duration_secs: float, **_):
    if event == BACKEND_COMPILE_EVENT and duration_secs >= _min_seconds:
        trim()


def trim_after_compiles(min_seconds: float = 0.2) -> bool:
    """Call :func:`trim` after every XLA compilation of at least ``min_seconds`` (process-wide, idempotent).

    Args:
      min_seconds: compilations shorter than this are not followed by a trim.

    Returns:
      True if the listener is installed (now or before), False where the C library is not glibc.
    """
    global _min_seconds
    if _malloc_trim() is None:
        return False
    with _lock:
        if _min_seconds is None:
            jax.monitoring.register_event_duration_secs_listener(_listener)
        _min_seconds = min_seconds
    return True
