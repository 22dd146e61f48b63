"""`shardeval watch`'s own state: <out>/watch/state.json, what it knows of each checkpoint.

The watcher replaces the file atomically after every change, so a watcher killed at any moment
restarts from what it last wrote, and `shardeval status` reads what is ready, running, done,
failed and when the next poll is, without asking the watcher. The watcher's liveness is the
lease beside it (watch/shard.lock and watch/heartbeat.json, shardeval.store.liveness).
"""

from __future__ import annotations

import os
from typing import Literal

import msgspec

from shardeval.store.atomic import atomic_write
from shardeval.store.discover import WATCH_DIR
from shardeval.store.records import pretty_json
from shardeval.store.regular import read_regular

STATE_FILE = "state.json"

# What the watcher knows of a checkpoint, in the order a checkpoint goes through them:
# waiting (seen, not whole yet), running (its cells launched), then done (every cell complete),
# errors (every cell ended, some pairs in errors: exit 3), failed (its launch failed more often
# than `watch.retries` allows: exit 1 or 2), deleted (gone before it was ever launched).
CheckpointStatus = Literal["waiting", "running", "done", "errors", "failed", "deleted"]
ENDED: tuple[CheckpointStatus, ...] = ("done", "errors", "failed")


class CheckpointState(msgspec.Struct, kw_only=True):  # every key written: state.json is read by people too
    """One checkpoint of a watched sweep, by its service name."""

    name: str
    path: str  # "" for a service the sweep lists by name (evaluated once, when the watch starts)
    status: CheckpointStatus = "waiting"
    why: str = ""  # what it waits for, why it failed, or what the verdict of its cells was
    first_seen: float = 0.0
    ready_at: float | None = None  # when its `ready` rule first held
    fingerprint: str | None = None  # the files (names, sizes, times) as they were when it was launched
    launches: int = 0  # how often its cells were launched
    failures: int = 0  # launches whose cells did not all end (retried up to watch.retries)
    launched_at: float | None = None
    finished_at: float | None = None
    launcher_pid: int | None = None  # the `shardeval run` that launched it, while it runs
    launcher_start: int | None = None  # that process's start time (a pid reused later is not it)
    exit_code: int | None = None  # of its last launch, as its cells ended
    deleted_at: float | None = None  # the trainer deleted it (its rows are kept unless keep_results_of_deleted is false)
    superseded: list[str] = []  # folders its earlier results were moved to when it was rewritten in place


class WatchState(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The whole of <out>/watch/state.json."""

    config: str  # the sweep config the watcher reads
    started_at: float
    polls: int = 0
    last_poll_at: float | None = None
    next_poll_at: float | None = None
    poll_s: float = 60.0
    checkpoints: dict[str, CheckpointState] = {}
    stopped: str | None = None  # why the watch ended (`until`, a stop signal, --once); None while it watches
    exit_code: int | None = None


def state_path(root: str) -> str:
    return os.path.join(root, WATCH_DIR, STATE_FILE)


def read_watch_state(root: str) -> WatchState | None:
    """The state a watcher left at `root`; None when none has watched it (or the file is unreadable)."""
    try:
        return msgspec.json.decode(read_regular(state_path(root)), type=WatchState)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def write_watch_state(root: str, state: WatchState) -> None:
    os.makedirs(os.path.join(root, WATCH_DIR), exist_ok=True)
    atomic_write(state_path(root), pretty_json(state))
