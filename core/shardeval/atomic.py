"""One way to replace a file: a reader, or the node after a crash, sees the old content or the new, never half."""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Callable, Iterable


def atomic_write(path: str, data: bytes | Iterable[bytes], before_rename: Callable[[], None] | None = None) -> None:
    """Write `data` (bytes, or an iterable of chunks) to a temp file beside `path`, fsync it, rename
    it over `path`, fsync the directory. `before_rename` may raise to abandon the write. On any
    failure the temp file is removed and `path` is untouched; a failed write's OSError names `path`,
    the file the user knows, not the temp file."""
    tmp = f"{path}.{os.getpid()}-{threading.get_ident()}.tmp"  # unique per writer; the umask sets its mode
    try:
        with open(tmp, "wb") as f:
            f.writelines([data] if isinstance(data, (bytes, bytearray, memoryview)) else data)  # C loop: merge writes 2M chunks
            f.flush()
            os.fsync(f.fileno())
        if before_rename is not None:
            before_rename()
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename in (None, tmp):
            exc.filename = path
        raise
    # The rename itself survives a crash only once the directory is on disk; some filesystems
    # cannot fsync a directory, and the file is already in place.
    with contextlib.suppress(OSError):
        fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
