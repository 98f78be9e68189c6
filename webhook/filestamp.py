"""Whether a mounted file changed since it was last read, for the files the controller re-reads (the
serving certificate and key, the group API's token).

Secrets mounted from Kubernetes change by a symlink swap: a file is compared by what `os.stat` sees
through the link (mtime, size, inode, device), every reload interval, not by its path or its content.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["FileStamp", "stamp"]

FileStamp = tuple[int, int, int, int] | None
"""What a file looked like (mtime_ns, size, inode, device); None when it could not be read."""


def stamp(path: Path) -> FileStamp:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_mtime_ns, info.st_size, info.st_ino, info.st_dev)
