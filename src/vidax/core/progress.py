"""What a run shows while it works: one progress line per stage, none silent for more than a second.

A generation has stages of very different shapes: loading (a few components), text encoding and compilation
(one long call each, nothing to count), denoising (steps), VAE encode and decode (chunks or tiles). A
:class:`Progress` shows each as one tqdm line on stderr with its elapsed time; counted stages show ``n/total``
too. A background ticker redraws the open stage every second, so a stage that is one long call (a 20 s XLA
compile) still shows its clock moving instead of a frozen terminal.

``Progress(enabled=False)`` (the CLI's ``--no-progress`` / ``--quiet``, or ``progress=False`` in the Python API)
shows nothing and costs nothing. On several hosts only process 0 shows progress.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import IO, Any

from tqdm.auto import tqdm

from vidax.core import signals

#: Seconds between redraws of an open stage's line.
TICK_S = 1.0

_open: list = []  # the bars of the stages open now (closed by end_lines() when a run ends abnormally)
_lock = threading.Lock()


class Stage:
    """One open stage: count its units with :meth:`update` (a no-op when progress is off)."""

    def __init__(self, bar: Any = None):
        self._bar = bar

    def update(self, n: int = 1) -> None:
        """Count ``n`` more units (steps, chunks, tiles) done; a safe point for a recorded signal
        (:func:`vidax.core.signals.check`)."""
        signals.check()
        if self._bar is not None:
            self._bar.update(n)

    def set_total(self, total: int) -> None:
        """Set the unit count once it is known (e.g. the tiles of a decode)."""
        if self._bar is not None:
            self._bar.total = total
            self._bar.refresh()


_OFF = Stage()


class Progress:
    """Stage-by-stage progress on stderr (tqdm), or nothing.

    Example::

        progress = Progress()
        with progress.stage("text encoder"):
            states = encode(...)
        with progress.stage("denoising", total=50, unit="step") as stage:
            for i in range(50):
                ...
                stage.update()

    Args:
      enabled: show anything at all.
      file: the stream (default ``sys.stderr``).
      tick_s: seconds between redraws of an open stage (its elapsed time keeps moving during one long call).
    """

    def __init__(self, enabled: bool = True, *, file: IO[str] | None = None, tick_s: float = TICK_S):
        self.enabled = bool(enabled)
        self.file = file
        self.tick_s = tick_s

    @contextlib.contextmanager
    def stage(self, name: str, total: int | None = None, unit: str = "it") -> Iterator[Stage]:
        """Show stage ``name`` until the block ends (``total`` units, or an uncounted stage showing its time). Its
        start and every update are safe points for a recorded signal (:func:`vidax.core.signals.check`)."""
        signals.check()
        if not self._showing():
            yield _OFF
            return
        if total is None:
            fmt = "{desc}: {elapsed}" + (" [{n_fmt} " + unit + "]" if unit != "it" else "")
        else:
            fmt = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} " + unit + " [{elapsed}<{remaining}]"
        bar = tqdm(total=total, desc=name, unit=unit, file=self.file or sys.stderr, leave=True, bar_format=fmt,
                   dynamic_ncols=True, mininterval=0.2)
        done = threading.Event()

        def tick() -> None:
            while not done.wait(self.tick_s):
                bar.refresh()

        ticker = threading.Thread(target=tick, name=f"vidax-progress-{name}", daemon=True)
        with _lock:
            _open.append(bar)
        ticker.start()
        try:
            yield Stage(bar)
        finally:
            # Uninterrupted: a signal in ticker.join() used to skip bar.close(), leaving the line open and the
            # final message glued to it. A signal arriving here is recorded and raised when the block ends.
            with signals.deferred():
                done.set()
                ticker.join()
                _close(bar)

    def _showing(self) -> bool:
        if not self.enabled:
            return False
        try:  # only process 0 of a multi-host run shows progress
            import jax

            return jax.process_index() == 0
        except Exception:  # noqa: BLE001 - no backend yet: a single process
            return True


def _close(bar: Any) -> None:
    with _lock:
        if bar not in _open:
            return
        _open.remove(bar)
    bar.close()


def end_lines() -> None:
    """Close every progress line still open, so that what is printed next starts a line of its own.

    The command line calls it before its final message (an error, an interruption): a stage whose ``finally`` was
    cut short by an exception, or one still open in another thread, would otherwise leave its bar's line
    unterminated and the message appended to it. Safe to call at any time; a no-op when nothing is open.
    """
    with _lock:
        bars = list(_open)
    for bar in reversed(bars):
        try:
            _close(bar)
        except Exception:  # noqa: BLE001 - a broken stream: the message after this reports what went wrong
            pass


def as_progress(progress: bool | Progress | None) -> Progress:
    """``progress`` as a :class:`Progress`: True / None show, False shows nothing, a Progress is used as is."""
    if isinstance(progress, Progress):
        return progress
    return Progress(enabled=progress is None or bool(progress))
