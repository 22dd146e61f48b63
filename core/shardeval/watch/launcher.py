"""Launch one checkpoint's cells, and tell from the disk how they ended.

A checkpoint is launched as `shardeval run CONFIG --sweep-services NAME --no-merge -o ROOT`, a
process of its own (its own session, so a watcher killed outright leaves it and its cells
running, as a `shardeval run` of the same sweep would be). That launch is the one every
orchestrator already does for a sweep of one model: local processes, a SLURM array, an Indexed
Job, Ray tasks, Compose services. It is given the paths of every checkpoint the watch knows as
an override, so each node resolves the same models, also one whose folder the trainer deleted
since (its cells then end in errors naming the path: shardeval.run.unavailable).

How the cells ended is read from their manifests and heartbeats, the same files `status` and
`merge` read, never from the launcher's exit code alone: a watcher restarted after a kill has
no child to ask, and a scheduler's launcher exits as soon as it has submitted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass

from shardeval.run.process import self_command
from shardeval.store.discover import WATCH_DIR
from shardeval.store.liveness import pid_alive, read_heartbeat, writer_liveness
from shardeval.store.procfs import read_process
from shardeval.store.records import read_manifest

ENDED_STATES = {"complete": 0, "finished_with_errors": 3}


@dataclass(frozen=True)
class LaunchSpec:
    """What every launch of a watch shares."""

    config_path: str
    overrides: tuple[str, ...]
    root: str
    shards: int  # per model

    def command(self, name: str, paths: list[str], baseline: str) -> list[str]:
        """The launch of checkpoint `name`: every known checkpoint's path and the sweep's baseline
        now passed explicitly, so the launch's plan is the watcher's (a baseline the config names
        may not be written yet)."""
        pinned = [f"sweep.checkpoints.paths={json.dumps(paths)}", f"sweep.baseline={json.dumps(baseline)}"]
        overrides = [arg for override in (*self.overrides, *pinned) for arg in ("-O", override)]
        return [*self_command(), "run", self.config_path, *overrides, "--sweep-services", name, "--no-merge", "-o", self.root]

    def log_path(self, name: str, launch: int) -> str:
        return os.path.join(self.root, WATCH_DIR, "logs", f"{name}.{launch}.log")

    def start(self, name: str, paths: list[str], baseline: str, launch: int) -> subprocess.Popen[bytes]:
        """Start the launch; its output goes to watch/logs/<name>.<launch>.log."""
        path = self.log_path(name, launch)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "ab") as log:
            return subprocess.Popen(
                self.command(name, paths, baseline), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )


def process_start(pid: int) -> int | None:
    proc = read_process(pid)
    return proc.start if proc is not None else None


def launcher_alive(pid: int | None, start: int | None) -> bool:
    """The launch process is still running (a reused pid is not it)."""
    return pid is not None and pid_alive(pid, start)


def stop_launcher(pid: int, sig: signal.Signals) -> None:
    """Pass a stop signal to a launch (it passes it on to its cells, which drain)."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


@dataclass(frozen=True)
class CellsOutcome:
    """How a checkpoint's cells stand, from their files."""

    running: int  # cells whose writer is alive
    ended: int  # cells whose manifest says complete or finished_with_errors
    failed: int  # cells that failed, were interrupted, were lost, or never wrote a manifest
    exit_code: int  # of the ended ones: 0 when all complete, 3 when some finished with errors
    why: str  # the first failed cell's reason, in one line

    @property
    def all_ended(self) -> bool:
        return self.running == 0 and self.failed == 0


def cells_outcome(root: str, name: str, shards: int) -> CellsOutcome:
    """Read each cell's manifest (and, while it says running, its heartbeat)."""
    running = ended = failed = 0
    code, why = 0, ""
    for k in range(shards):
        cell = os.path.join(root, name, f"shard_{k}")
        manifest = read_manifest(cell)
        state = manifest.state if manifest is not None else None
        if state in ENDED_STATES:
            ended += 1
            code = max(code, ENDED_STATES[state])
            continue
        if state == "running" and (hb := read_heartbeat(cell)) is not None and not writer_liveness(hb).lost:
            running += 1
            continue
        failed += 1
        if not why:
            reason = (manifest.reason if manifest is not None else None) or "it never started"
            why = f"shard {k}/{shards}: {state or 'no manifest'}: {one_line(reason)}"
    return CellsOutcome(running, ended, failed, code, why)


def one_line(reason: str) -> str:
    """A manifest's reason for the watcher's log line and state.json: a server that failed at start
    is quoted with its log's last lines (a traceback); its first line says what happened, its last
    the error (`OSError: ... config.json ... is not a valid JSON file`). The whole stays in the
    manifest and the launch's log."""
    lines = [line.strip() for line in reason.splitlines() if line.strip()]
    if len(lines) <= 1:
        return lines[0] if lines else reason
    return f"{lines[0]} [...] {lines[-1]}"
