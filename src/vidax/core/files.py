"""Writing outputs atomically: a temporary name beside the target, renamed into place when complete.

``tempfile.mkstemp`` / ``mkdtemp`` create their files and folders readable by the owner only (0600 /
0700), which would leave every video and converted checkpoint private after the rename;
:func:`publish` gives them the permissions a plain ``open`` / ``mkdir`` would (0666 / 0777 less the
process umask) before renaming.
"""

from __future__ import annotations

import os
from pathlib import Path


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
