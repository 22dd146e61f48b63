"""Progress for people and for batch logs: a live line on a terminal, periodic plain lines otherwise."""

from __future__ import annotations

import asyncio
import logging
import sys
import time

log = logging.getLogger("shardeval")


class Progress:
    """Counts finished requests; a background task reports them. `advance` is cheap (hot path)."""

    def __init__(self, name: str, shard, total: int, done: int = 0, interval: float = 30.0) -> None:
        self.name = name
        self.shard = shard
        self.total = total
        self.done = done
        self.start_done = done
        self.errors = 0
        self.tty = sys.stderr.isatty()
        self.interval = 0.5 if self.tty else interval
        self._task: asyncio.Task | None = None
        self._t0 = time.monotonic()

    def advance(self, ok: bool) -> None:
        self.done += 1
        if not ok:
            self.errors += 1

    def line(self) -> str:
        elapsed = time.monotonic() - self._t0
        rate = (self.done - self.start_done) / elapsed if elapsed > 0 else 0.0  # this run's answers only
        eta = f"{(self.total - self.done) / rate:.0f} s" if rate > 0 else "?"
        pct = 100.0 * self.done / self.total if self.total else 100.0
        return (
            f"shard {self.shard.idx}/{self.shard.total} {self.name}: {self.done}/{self.total} ({pct:.1f}%) "
            f"errors {self.errors}  {rate:.1f} req/s  eta {eta}"
        )

    def start(self) -> None:
        self._t0 = time.monotonic()
        if self.total and self.interval > 0:
            self._task = asyncio.ensure_future(self._report())

    async def _report(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            if self.tty:
                sys.stderr.write("\r" + self.line() + "\x1b[K")
                sys.stderr.flush()
            else:
                log.info("%s", self.line())

    def stop(self) -> None:
        if self._task:
            self._task.cancel()
            self._task = None
        if self.tty and self.total:
            sys.stderr.write("\r" + self.line() + "\x1b[K\n")
            sys.stderr.flush()
