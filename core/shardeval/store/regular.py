"""Reading files from directories others can write: only regular files, and never a blocking open.

A FIFO named like a cache segment or a shard's results.jsonl blocks `open()` until a writer comes
(forever, and a blocked open holds the event loop, so no stop signal is acted on); a symlink to
/dev/zero never ends. Every reader of a file a user, another run or another node may have put
there (shard directories, the response cache, sweep_plan.json, benchmark data) opens it here:
O_NONBLOCK, so opening a FIFO returns at once, then fstat on the open descriptor (no window
between a check and the open) and anything but a regular file is refused with `NotRegularFile`,
an OSError, so every caller's existing handling of an unreadable file applies. A symlink to a
regular file is followed. The files a shard appends to (its log, results, trajectories) open
through `open_append`, which never waits either.
"""

from __future__ import annotations

import errno
import os
import stat
from contextlib import suppress
from typing import BinaryIO
from collections.abc import Callable

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class NotRegularFile(OSError):
    """What is at the path is not a regular file (a FIFO, a device, a directory): not read. The
    user fixes it by moving it aside (shardeval.errors.os_error makes it exit 2)."""

    user_fixable = True

    def __init__(self, path: str, mode: int, why: str | None = None) -> None:
        super().__init__(errno.EISDIR if stat.S_ISDIR(mode) else None, why or f"{kind_of(mode)}, not a regular file", path)


def kind_of(mode: int) -> str:
    """'is a FIFO (named pipe)', 'is a character device', …: for messages."""
    return "is " + next((name for test, name in _KINDS if test(mode)), "something else")


def open_regular_fd(path: str) -> int:
    """A read-only descriptor of the regular file at `path` (blocking reads, close-on-exec).
    Raises NotRegularFile for anything else, FileNotFoundError etc. as open() does."""
    return _checked(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), path, stat.S_ISREG)


def open_regular(path: str) -> BinaryIO:
    """`open(path, "rb")`, for regular files only (see the module doc)."""
    return os.fdopen(open_regular_fd(path), "rb")


class FileTooLarge(OSError):
    """The regular file at the path holds more than the reader takes: not read past that."""

    user_fixable = True

    def __init__(self, path: str, max_bytes: int) -> None:
        super().__init__(errno.EFBIG, f"more than {max_bytes} bytes", path)
        self.max_bytes = max_bytes


def read_regular(path: str, max_bytes: int | None = None) -> bytes:
    """The whole content of the regular file at `path`; with `max_bytes`, FileTooLarge when it
    holds more (counted by reading, never from its size: a file may grow, and a size says nothing
    of what a path that was swapped since yields)."""
    with open_regular(path) as f:
        if max_bytes is None:
            return f.read()
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise FileTooLarge(path, max_bytes)
    return data


def open_append_fd(path: str) -> int:
    """A write-only, appending descriptor (created if absent) that never waits: a regular file, or
    a FIFO some process reads or a character device, written into as atomic_write does (H12). A
    FIFO nobody reads is an error at once (it hung the shard forever, deaf to SIGTERM, when its
    log was one); a directory, a socket or a block device is `NotRegularFile`."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY, 0o666)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise NotRegularFile(
                path, stat.S_IFIFO, "a FIFO that no process is reading; start its reader first, or move it aside"
            ) from None
        raise
    return _checked(fd, path, lambda mode: stat.S_ISREG(mode) or stat.S_ISFIFO(mode) or stat.S_ISCHR(mode))


def _checked(fd: int, path: str, allowed: Callable[[int], bool]) -> int:
    """`fd`, made blocking again, when what it opened is of a kind `allowed`; closed and
    NotRegularFile otherwise (checked on the open descriptor: no race with a rename)."""
    try:
        mode = os.fstat(fd).st_mode
        if not allowed(mode):
            raise NotRegularFile(path, mode)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_append(path: str, buffering: int = -1) -> BinaryIO:
    """`open(path, "ab")` that never waits (see `open_append_fd`)."""
    return os.fdopen(open_append_fd(path), "ab", buffering=buffering)


def append_line(f, data: bytes) -> None:
    """Append one whole line or raise OSError; a partial write (a disk filling up) is undone, so
    the file never holds half a record from this process."""
    view = memoryview(data)
    written = 0
    try:
        while written < len(data):
            n = f.write(view[written:])
            if not n:
                raise OSError(errno.EIO, "write made no progress")
            written += n
    except OSError:
        if written:
            with suppress(OSError):  # a torn tail left behind is skipped on read and sealed on resume
                os.ftruncate(f.fileno(), os.fstat(f.fileno()).st_size - written)
        raise
