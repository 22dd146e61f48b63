"""A command outlives the reader of its output.

`shardeval run cfg 2>&1 | tee log`, then Ctrl-C: the terminal's SIGINT reaches tee too, tee dies at
once, and the next line the launcher prints meets a closed pipe (EPIPE; Python ignores SIGPIPE, so
it is a BrokenPipeError). Raised there, it ended the launcher mid-drain, exit 1, nothing printed,
and the launcher's death sent each shard SIGTERM (PR_SET_PDEATHSIG), which the shards took for a
second signal: no drain. The same for `| head`. What a command prints is a courtesy to whoever
reads it; the work (records, manifests, the merge) goes on to its end, and its exit code says how it
ended. So stdout and stderr are wrapped: the first write or flush that finds the reader gone points
that descriptor at /dev/null (as Python's own docs advise for SIGPIPE) and repeats itself there, and
every later write goes there without a word.
"""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO


class _OutlivesReader:
    """A text stream that turns a vanished reader into silence, delegating all else."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._to_devnull()
            return self._stream.write(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._to_devnull()
            self._stream.flush()  # what the buffer still held goes to /dev/null

    def _to_devnull(self) -> None:
        to_devnull(self._stream.fileno())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def to_devnull(fd: int) -> None:
    """Point `fd` at /dev/null: its reader is gone, and what is still written there goes nowhere."""
    devnull = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.dup2(devnull, fd, inheritable=False)
    finally:
        os.close(devnull)


def outlive_readers() -> None:
    """Wrap sys.stdout and sys.stderr (once; a stream that is no real file is left alone). Call
    before anything keeps a reference to them (logging handlers, click)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None or isinstance(stream, _OutlivesReader):
            continue
        try:
            stream.fileno()
        except (AttributeError, OSError, ValueError):  # pytest's capture, an io.StringIO: not ours to change
            continue
        setattr(sys, name, _OutlivesReader(stream))
