"""What `shardeval status` says of a sweep's watcher (<out>/watch/state.json and its lease): is
it alive, when it polls next, and each checkpoint's state (waiting and for what, running, done,
with errors, failed, deleted)."""

from __future__ import annotations

import os
import time

from shardeval.results.quoting import plain_text as q
from shardeval.store.discover import WATCH_DIR
from shardeval.store.liveness import clock, read_heartbeat, writer_liveness
from shardeval.store.watch_state import CheckpointState, WatchState, read_watch_state


def watch_status(root: str, now: float | None = None) -> list[str]:
    """The lines for status (none when no watcher ever watched `root`)."""
    state = read_watch_state(root)
    if state is None:
        return []
    now = time.time() if now is None else now
    lines = [f"watch: {_watcher(root, state, now)}"]
    counts: dict[str, int] = {}
    for c in state.checkpoints.values():
        counts[c.status] = counts.get(c.status, 0) + 1
    lines.append("watch: " + (", ".join(f"{n} {status}" for status, n in counts.items()) or "no checkpoint found yet"))
    lines += [f"  {q(c.name):<16} {c.status:<8} {_detail(c)}" for c in state.checkpoints.values()]
    return lines


def _watcher(root: str, state: WatchState, now: float) -> str:
    hb = read_heartbeat(os.path.join(root, WATCH_DIR))
    alive = hb is not None and hb.ended_at is None and not writer_liveness(hb, now).lost
    polled = f"{state.polls} poll(s), the last at {clock(state.last_poll_at)}" if state.last_poll_at else "no poll yet"
    if alive:
        assert hb is not None
        nxt = f"; next poll in {max(state.next_poll_at - now, 0):.0f} s" if state.next_poll_at else ""
        return f"watched by pid {hb.pid} on {q(hb.host)} since {clock(hb.started_at)}: {polled}{nxt}"
    ended = (
        f"ended ({q(state.stopped)}, exit {state.exit_code})" if state.stopped else "not running (it stopped without saying why: killed?)"
    )
    return f"{ended}; {polled}; `shardeval watch {q(state.config)} -o {q(root)}` resumes it"


def _detail(c: CheckpointState) -> str:
    parts = [q(c.why)] if c.why else []
    if c.launches > 1:
        parts.append(f"{c.launches} launches")
    if c.deleted_at is not None:
        parts.append("deleted by the trainer")
    if c.superseded:
        parts.append(f"rewritten in place {len(c.superseded)} time(s)")
    return "; ".join(parts)
