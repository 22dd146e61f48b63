"""One way to write an output file: a reader, or the node after a crash, sees the old content or the new, never half.

What is at the path decides how (docs/guarantees.md, H12), for every file shardeval writes:
- nothing, or a regular file: written to a temp file beside it and renamed over it (atomic);
- a symlink: followed; the file it names is replaced (atomically, beside it), the link stays;
- a FIFO or a character device (`/dev/stdout`, `/dev/null`, a pipe a reader holds open): written
  into as a stream, never replaced. A FIFO that no process reads is an error, not a wait, and a
  device that refuses the bytes (/dev/full) is the write's error; the device stays what it was;
- a directory, a block device or a socket: refused (`check_output`, before any work where the
  caller can; atomic_write raises the same error otherwise).
`-` names standard output for the commands that take a file to write (`write_output`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import threading
from collections.abc import Callable, Iterable

from shardeval.closed_output import to_devnull
from shardeval.errors import UsageError
from shardeval.store.regular import kind_of

STDOUT = "-"


class NotWritableHere(OSError):
    """What is at an output path cannot take a file: a directory, a block device, a socket."""

    user_fixable = True  # shardeval.errors.os_error: one line, exit 2


def _chunks(data: bytes | Iterable[bytes]) -> Iterable[bytes]:
    return [data] if isinstance(data, (bytes, bytearray, memoryview)) else data  # type: ignore[list-item]


def output_kind(path: str) -> str:
    """'file' (absent or a regular file, possibly through symlinks: replaced atomically), 'stream'
    (a FIFO or a character device: written into) or 'stdout' (`-`). Raises NotWritableHere for
    what cannot take a file."""
    if path == STDOUT:
        return "stdout"
    try:
        mode = os.stat(path).st_mode  # follows symlinks: what the path names in the end
    except (FileNotFoundError, NotADirectoryError):
        return "file"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
        return "stream"
    what = kind_of(mode)
    code = errno.EISDIR if stat.S_ISDIR(mode) else None
    raise NotWritableHere(code, f"{what}; give the path of a file to write", path)


def check_output(path: str, flag: str) -> str:
    """`output_kind`, with what cannot take a file as one UsageError line naming `flag`, so a
    command can refuse it before it reads anything."""
    try:
        return output_kind(path)
    except NotWritableHere as exc:
        raise UsageError(f"{flag} {path}: {exc.strerror}") from None


def write_output(path: str, data: bytes | Iterable[bytes]) -> None:
    """`atomic_write`, and `-` for standard output."""
    if path == STDOUT:
        out = sys.stdout.buffer
        try:
            for chunk in _chunks(data):
                out.write(chunk)
            out.flush()
        except BrokenPipeError:  # `export -o - | head`: the reader took what it wanted (shardeval.closed_output)
            to_devnull(out.fileno())
        return
    atomic_write(path, data)


def atomic_write(path: str, data: bytes | Iterable[bytes], before_rename: Callable[[], None] | None = None) -> None:
    """Write `data` (bytes, or an iterable of chunks) to a temp file beside `path`, fsync it, rename
    it over `path`, fsync the directory. `before_rename` may raise to abandon the write. On any
    failure the temp file is removed and `path` is untouched; a failed write's OSError names `path`,
    the file the user knows, not the temp file. A symlink is followed, a FIFO or a character
    device is written into (see the module doc)."""
    if output_kind(path) == "stream":
        return _write_into(path, data, before_rename)
    path = os.path.realpath(path) if os.path.islink(path) else path  # the link stays, the file it names is replaced
    tmp = f"{path}.{os.getpid()}-{threading.get_ident()}.tmp"  # unique per writer; the umask sets its mode
    try:
        with open(tmp, "wb") as f:
            f.writelines(_chunks(data))  # C loop: merge writes 2M chunks
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


def _write_into(path: str, data: bytes | Iterable[bytes], before_rename: Callable[[], None] | None) -> None:
    """Stream into a FIFO or a character device: no temp file, no rename, no truncation. Opened
    without blocking, so a FIFO with no reader is an error at once, then written with blocking
    writes (a slow reader slows the writer down)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise OSError(errno.ENXIO, "a FIFO that no process is reading; start its reader first", path) from None
        raise
    try:
        if not (stat.S_ISFIFO(mode := os.fstat(fd).st_mode) or stat.S_ISCHR(mode)):  # it changed since it was looked at
            raise OSError(errno.EAGAIN, "changed while being opened; rerun", path)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "wb", closefd=False) as f:
            f.writelines(_chunks(data))
        if before_rename is not None:
            before_rename()
    except OSError as exc:
        if exc.filename is None:
            exc.filename = path
        raise
    finally:
        os.close(fd)
