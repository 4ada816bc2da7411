"""Ctrl-C (SIGINT) and SIGTERM: a run ends cleanly at any moment, with no output published.

Three things made early signals go wrong (each reproduced): a signal raised inside JAX's garbage-collection
callback is discarded by Python ("Exception ignored in ..."), so the run went on and published its output with exit
status 0; a signal during the import of jaxlib's extension modules could crash the process; and a handler installed
after the heavy imports left the import window to Python's default.

So the handler records the signal first and raises only where raising is safe: not inside :func:`deferred` blocks
(the heavy imports), and a raise that Python discards (a garbage-collection callback, a ``__del__``) is silenced
(``sys.unraisablehook``) but stays recorded, and the next :func:`check` (every progress stage and step, the loader,
and just before outputs are published) raises it again. :func:`install` runs first thing in the ``vidax`` entry
point, before anything heavy is imported.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

_pending: int | None = None
_defer = 0
_done = False  # the outputs are published: a late signal changes nothing
_previous: dict = {}
_unraisable = None


class Terminated(BaseException):
    """SIGTERM, raised in the main thread like ``KeyboardInterrupt`` for SIGINT (``finally`` blocks run)."""


def _raise(signum: int) -> None:
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated


def _handler(signum, frame) -> None:
    global _pending
    if _done:
        return
    _pending = signum
    if _defer == 0:
        _raise(signum)


def _quiet_unraisable(info) -> None:
    # A recorded signal raised where Python discards exceptions: silent here, raised again at the next check().
    if _pending is not None and isinstance(info.exc_value, (KeyboardInterrupt, Terminated)):
        return
    (_unraisable or sys.__unraisablehook__)(info)


def install() -> bool:
    """Handle SIGINT and SIGTERM as described in the module docstring (main thread only).

    Returns:
      whether the handlers were installed (False off the main thread, where Python allows no handlers).
    """
    global _unraisable
    if threading.current_thread() is not threading.main_thread():
        return False
    for sig in (signal.SIGINT, signal.SIGTERM):
        _previous.setdefault(sig, signal.signal(sig, _handler))
    if sys.unraisablehook is not _quiet_unraisable:
        _unraisable, sys.unraisablehook = sys.unraisablehook, _quiet_unraisable
    return True


def installed() -> bool:
    """Whether :func:`install` is in effect."""
    return bool(_previous)


def uninstall() -> None:
    """Restore the handlers :func:`install` replaced and forget a recorded signal (embedding programs, tests)."""
    global _pending, _unraisable, _done
    for sig, handler in _previous.items():
        signal.signal(sig, handler)
    _previous.clear()
    if sys.unraisablehook is _quiet_unraisable:
        sys.unraisablehook = _unraisable or sys.__unraisablehook__
    _unraisable, _pending, _done = None, None, False


def published() -> None:
    """The run's outputs are published: from now on a signal is ignored (the run is complete; exit status 0).

    The handled signals are set to ``SIG_IGN`` as well: the interpreter's teardown resets Python-level handlers to
    the default action, so a signal in the last instants of the exit would otherwise kill the finished run (status
    -2 / -15, seen under load); an ignored signal stays ignored through teardown.
    """
    global _done
    _done = True
    if threading.current_thread() is threading.main_thread():
        for sig in _previous:
            signal.signal(sig, signal.SIG_IGN)


def pending() -> int | None:
    """The recorded signal number, or None."""
    return _pending


def check() -> None:
    """A safe point: raise the recorded signal (``KeyboardInterrupt`` / :class:`Terminated`) if there is one."""
    if _pending is not None and _defer == 0 and not _done:
        _raise(_pending)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A block a signal must not interrupt (importing native extension modules): a signal arriving inside is
    recorded and raised when the block ends."""
    global _defer
    _defer += 1
    try:
        yield
    finally:
        _defer -= 1
    check()
