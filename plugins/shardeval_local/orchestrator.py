"""Run the shards of one evaluation as local processes, their output prefixed with the shard.

The shards live and die with this process: a stop signal (SIGTERM, Ctrl-C) is passed on to every
running shard, no shard starts after it, each drains and marks itself `interrupted`, and this
process exits 143 (130 for SIGINT). If this process is killed outright (SIGKILL, the OOM killer),
the kernel sends each shard SIGHUP (PR_SET_PDEATHSIG): it drains as for a stop signal, or, when a stop
was already passed on, simply goes on draining (a launcher's death is not a second signal), and each
shard stops its own servers. Output nobody reads any more (`| tee` died) ends none of this
(shardeval.closed_output).
"""

from __future__ import annotations

import asyncio
import math
import shlex
import signal
import sys
import time

from shardeval.api.orchestrator import CellOutcome, ClusterConfig, die_with_parent, Orchestrator
from shardeval.api.plugin import Count
from shardeval.api.records import percent
from shardeval.api.service import self_command


class LocalClusterConfig(ClusterConfig, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """`parallel`: how many shards run at once (default: all of them; in a sweep, as many as one
    model has, since each starts its own model server)."""

    parallel: Count | None = None  # shard processes at once

    def runs_in_process(self) -> bool:
        """Without `shards` the one shard runs right in `shardeval run` (see ClusterConfig)."""
        return not self.shards

    def shards_read_local_files(self) -> bool:
        """Every shard is a process on this machine: `run` checks the benchmarks' data once, first."""
        return True


class LocalOrchestrator(Orchestrator):
    """Every cell (a shard; in a sweep, a shard of one model) as a child process, `parallel` at a
    time, the one expected to take longest first (next_cell). The core's lifecycle does the rest:
    `--fresh` before the first starts, the merge, the exit code."""

    def plan(self) -> None:
        self.cells = self.request.cells()
        self.commands = [self_command() + ["run", *self.request.cell_args(cell)] for cell in self.cells]
        self.stop: list[signal.Signals] = []
        self.ends: list[tuple[int | None, float]] = []

    def dry_run(self) -> int:
        for command in self.commands:
            print(shlex.join(command))
        return 0

    def submit(self) -> int:
        """Nothing to hand over ahead: `wait` starts the processes, `parallel` at a time."""
        request = self.request
        self.parallel = getattr(request.config.cluster, "parallel", None) or request.total * (1 if request.sweep else len(self.cells))
        return 0

    def wait(self) -> None:
        start = time.monotonic()
        cells = self.cells
        self.ends = asyncio.run(_run_all(self.commands, [c.label for c in cells], [c.shard for c in cells], self.parallel, self.stop))
        self.wall = time.monotonic() - start

    def collect(self) -> list[CellOutcome]:
        """Each cell's exit and time, then how busy the slots were."""
        cells, ends = self.cells, self.ends
        for cell, (code, seconds) in zip(cells, ends):
            outcome = "not started (stopped before its turn)" if code is None else f"exit {code} after {seconds:.2f} s"
            print(f"shardeval: {cell.label}: {outcome} -> {cell.dir}", file=sys.stderr)
        busy, slots, wall = sum(seconds for _, seconds in ends), min(self.parallel, len(cells)), self.wall
        print(
            f"shardeval: {len(cells)} {'cells' if self.request.sweep else 'shards'} ran in {wall:.2f} s, {slots} at a time: "
            f"busy {busy:.2f} s, {percent(busy / (slots * wall or 1))} of the slots' time",
            file=sys.stderr,
        )
        return [CellOutcome(cell, code, seconds) for cell, (code, seconds) in zip(cells, ends)]

    def stopped_by(self) -> signal.Signals | None:
        return self.stop[0] if self.stop else None


def next_cell(pending: list[int], shard_of: list[int], started: dict[int, float], took: dict[int, float], now: float) -> int:
    """The pending cell to start next: the one expected to take longest, so that no long cell is
    left for the end of a sweep while the other slots sit idle. Every model of a sweep asks the
    same problems at the same shard index, so a cell is expected to take as long as the longest
    finished cell of its shard index, or at least as long as one still running has so far. Cells
    of an index not seen yet come first (they may be the long ones, and they teach the estimate),
    and ties keep the launch order; a plain run (each index once) keeps its order."""
    expected: dict[int, float] = {}  # shard index -> seconds
    for j, seconds in [*took.items(), *((j, now - t) for j, t in started.items())]:
        expected[shard_of[j]] = max(expected.get(shard_of[j], 0.0), seconds)
    return max(pending, key=lambda i: (expected.get(shard_of[i], math.inf), -i))


async def _run_all(
    commands: list[list[str]], labels: list[str], shard_of: list[int], parallel: int, stop: list[signal.Signals]
) -> list[tuple[int | None, float]]:
    """Run the cell commands, `parallel` at a time, longest expected first (next_cell); (exit
    code, seconds from start to exit) of each (None, 0: never started because a stop signal came
    first, which is then in `stop`)."""
    procs: list[asyncio.subprocess.Process] = []
    loop = asyncio.get_running_loop()
    ends: list[tuple[int | None, float]] = [(None, 0.0)] * len(commands)
    started: dict[int, float] = {}  # running cells: when they started
    took: dict[int, float] = {}  # finished cells: how long they took

    def forward(sig: signal.Signals) -> None:
        if not stop:
            stop.append(sig)
        for proc in procs:
            if proc.returncode is None:
                proc.send_signal(sig)  # a second signal is passed on too: the shards stop at once

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, forward, sig)

    async def one(i: int) -> None:
        proc = await asyncio.create_subprocess_exec(
            *commands[i],
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # signals reach shards only through forward()
            preexec_fn=die_with_parent(signal.SIGHUP),  # and SIGHUP if this process is killed outright
        )
        procs.append(proc)
        if stop:  # the signal came while it was being started
            proc.send_signal(stop[0])
        assert proc.stdout is not None
        async for line in proc.stdout:
            sys.stderr.write(f"[{labels[i]}] {line.decode(errors='replace')}")
        code = await proc.wait()
        took[i] = time.monotonic() - started.pop(i)
        ends[i] = code, took[i]

    pending, running = list(range(len(commands))), set[asyncio.Task[None]]()
    while running or (pending and not stop):
        while pending and len(running) < parallel and not stop:
            i = next_cell(pending, shard_of, started, took, time.monotonic())
            pending.remove(i)
            started[i] = time.monotonic()
            running.add(asyncio.create_task(one(i)))
        done, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()  # a cell that could not be started at all raises here, as before
    return ends
