"""The process table, read from /proc: which processes exist, their state, group and start time.

The one reader of it, for stopping a server's process group (shardeval.run.process), for a
heartbeat's liveness (shardeval.store.liveness) and for a sandbox's leftovers. Standard library
only, no asyncio: `status` reads heartbeats through it and stays light.
"""

from __future__ import annotations

import os
from typing import NamedTuple


class Proc(NamedTuple):
    """One process as /proc lists it."""

    pid: int
    state: str  # `Z` and `X` are zombies and the dead, which an init that does not reap may keep listed
    ppid: int
    pgrp: int
    session: int
    start: int  # clock ticks after boot: tells the process from a later one given the same pid
    uid: int | None  # the real uid, read only when asked for (one more file per process)

    @property
    def alive(self) -> bool:
        return self.state not in ("Z", "X")


def read_process(pid: int, uid: bool = False) -> Proc | None:
    """One process from /proc/PID/stat (and /proc/PID/status for `uid`); None when it is gone or
    there is no /proc. The one reader of /proc's process table: process stops, liveness, sandbox."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        real_uid = None
        if uid:
            with open(f"/proc/{pid}/status", "rb") as f:
                real_uid = int(next(line for line in f if line.startswith(b"Uid:")).split()[1])
        # fields after the parenthesised command: state ppid pgrp session ...; field 22 is starttime
        fields = stat[stat.rfind(b")") + 2 :].split()
        return Proc(pid, fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19]), real_uid)
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def processes(uid: bool = False) -> list[Proc]:
    """Every process now (empty where there is no /proc)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    found = (read_process(int(entry), uid) for entry in entries if entry.isdigit())
    return [proc for proc in found if proc is not None]
