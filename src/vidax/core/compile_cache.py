"""JAX's persistent compilation cache, on by default for ``vidax generate``.

A fresh process compiles every program it runs: the guided transformer step, the text encoder
and the VAE's chunk programs. On this project's 2-core CPU the cold VAE programs alone take 8 s
(Wan2.1) to 18 s (CogVideoX) to compile, longer than a short generation runs
(docs/benchmarks.md, config a: end to end 22.7 s cold, 16.2 s from the cache). JAX can keep
compiled executables on disk, keyed by the program, its compile options, the backend and the
JAX/jaxlib versions, so a later process with the same shapes loads them instead; this module
points it at a per-user directory.

The directory, in order: the ``path`` argument (the CLI's ``--compile-cache``), the environment
variable ``VIDAX_COMPILE_CACHE`` (``off``, ``0``, ``none``, ``false`` or empty disable the cache),
``$XDG_CACHE_HOME/vidax/jax``, ``~/.cache/vidax/jax``. Entries are never evicted by vidax; delete
the directory to reclaim the space.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

#: ``VIDAX_COMPILE_CACHE`` values that switch the cache off.
OFF = ("", "0", "off", "none", "false", "no")

#: Programs that compile faster than this (seconds) are not written: reading an entry costs a
#: file open and a deserialisation, more than recompiling a small scheduler or embedding program.
MIN_COMPILE_TIME_S = 0.2


def default_dir() -> Path | None:
    """The cache directory to use when none is given; ``None`` when ``VIDAX_COMPILE_CACHE`` disables it."""
    env = os.environ.get("VIDAX_COMPILE_CACHE")
    if env is not None:
        return None if env.strip().lower() in OFF else Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vidax" / "jax"


def enable(path: str | os.PathLike | None = None, *, min_compile_time_s: float = MIN_COMPILE_TIME_S) -> Path | None:
    """Turn on JAX's persistent compilation cache in ``path`` (default: :func:`default_dir`).

    Call it before the first compilation of the process (JAX reads the setting when it first
    compiles). Programs compiled in ``min_compile_time_s`` seconds or more are written.

    Returns:
      The directory in use, or ``None`` if the cache stays off (disabled by ``VIDAX_COMPILE_CACHE``,
      or the directory cannot be created: then a ``RuntimeWarning`` names it and compilation
      proceeds without a cache).
    """
    import jax

    target = Path(path).expanduser() if path is not None else default_dir()
    if target is None:
        return None
    try:
        target.mkdir(parents=True, exist_ok=True)
        if not os.access(target, os.W_OK):
            raise PermissionError(f"{target} is not writable")
    except OSError as e:
        warnings.warn(f"compilation cache {target} is unusable ({e}); compiling without it "
                      "(pass --compile-cache DIR or set VIDAX_COMPILE_CACHE)", RuntimeWarning, stacklevel=2)
        return None
    jax.config.update("jax_compilation_cache_dir", str(target))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_time_s))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return target


def enable_for_api(setting: bool | str | os.PathLike | None = True) -> Path | None:
    """The Python API's default: the pipelines' ``from_pretrained(compile_cache=...)`` calls this.

    Args:
      setting: True or None: :func:`enable` at :func:`default_dir` (so ``VIDAX_COMPILE_CACHE=off`` still turns it
        off); a path: that directory; False: leave JAX's setting as it is (off unless the caller turned it on).

    Returns:
      The directory in use, or None.
    """
    if setting is False:
        return None
    return enable(None if setting is True or setting is None else setting)
