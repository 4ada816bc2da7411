"""Writing outputs atomically: a temporary name beside the target, renamed into place when complete.

``tempfile.mkstemp`` / ``mkdtemp`` create their files and folders readable by the owner only (0600 /
0700), which would leave every video and converted checkpoint private after the rename;
:func:`publish` gives them the permissions a plain ``open`` / ``mkdir`` would (0666 / 0777 less the
process umask) before renaming.
"""

from __future__ import annotations

import os
from pathlib import Path

from vidax.core import signals


def _umask() -> int:
    mask = os.umask(0o022)  # read by setting it: restored at once
    os.umask(mask)
    return mask


def publish(tmp: str | os.PathLike, path: str | os.PathLike) -> Path:
    """Give ``tmp`` (a file or folder) the default permissions, then rename it to ``path`` (replacing a file).

    Returns:
      ``path``.
    """
    tmp, path = Path(tmp), Path(path)
    os.chmod(tmp, (0o777 if tmp.is_dir() else 0o666) & ~_umask())
    os.replace(tmp, path)
    return path


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class staged:
    """Write several outputs and publish them together: each gets a temporary name in its destination's folder;
    when the block ends normally they are flushed to disk and renamed into place, all of them, or none (an existing
    file at a destination is restored if a later rename fails); on an error or a signal every temporary file is
    removed and the destinations are untouched.

    Example::

        with staged(video_path, metrics_path) as (tmp_video, tmp_metrics):
            encode(frames, tmp_video)
            tmp_metrics.write_text(json.dumps(metrics))

    Args:
      *paths: the destinations (their folders must exist).
      before_publish: called after everything is written, before the first rename (the CLI's last signal check).
      after_publish: called once every rename is done, in the same stretch that no signal interrupts
        (:func:`vidax.core.signals.deferred`): the renames happen all or none, and a signal arriving during them is
        judged by what ``after_publish`` records (the CLI: the run is complete).
    """

    def __init__(self, *paths: str | os.PathLike, before_publish=None, after_publish=None):
        self.paths = [Path(p) for p in paths]
        self.before_publish = before_publish
        self.after_publish = after_publish
        self.tmps: list[Path] = []

    def __enter__(self) -> list[Path]:
        import tempfile

        try:
            for p in self.paths:
                fd, tmp = tempfile.mkstemp(prefix=f".{p.stem}.", suffix=f".part{p.suffix}", dir=p.parent)
                os.close(fd)
                self.tmps.append(Path(tmp))
        except BaseException:
            self._discard()
            raise
        return list(self.tmps)

    def __exit__(self, kind, value, tb) -> None:
        if kind is not None:
            self._discard()
            return
        try:
            for tmp in self.tmps:
                _fsync(tmp)
            if self.before_publish is not None:
                self.before_publish()
            with signals.deferred():
                self._publish()
                if self.after_publish is not None:
                    self.after_publish()
        except BaseException:
            self._discard()
            raise

    def _publish(self) -> None:
        backups: list[tuple[Path, Path]] = []
        done: list[Path] = []
        try:
            for p in self.paths:  # keep what each destination holds until every rename has succeeded
                if p.is_file():
                    backup = p.with_name(f".{p.name}.{os.getpid()}.previous")
                    try:
                        os.link(p, backup)
                    except OSError:  # a file system without hard links: published without the safety copy
                        continue
                    backups.append((backup, p))
            for tmp, p in zip(self.tmps, self.paths):
                publish(tmp, p)
                done.append(p)
        except BaseException:
            for p in done:
                if not any(dest == p for _, dest in backups):
                    p.unlink(missing_ok=True)
            for backup, p in backups:
                if p in done:
                    os.replace(backup, p)
                else:  # (untouched: the backup is a second name of the same file, which rename would keep)
                    backup.unlink(missing_ok=True)
            raise
        for backup, _ in backups:
            backup.unlink(missing_ok=True)
        folder_fd = os.open(self.paths[0].parent, os.O_RDONLY)
        try:
            os.fsync(folder_fd)
        finally:
            os.close(folder_fd)

    def _discard(self) -> None:
        for tmp in self.tmps:
            tmp.unlink(missing_ok=True)
