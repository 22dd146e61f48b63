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

from shardeval.api import (
    EXIT_WITH_ERRORS, ClusterConfig, Count, die_with_parent, LaunchRequest, merge_and_report, self_command, set_aside_shards,
    UsageError, percent,
)

STOP_CODES = {signal.SIGTERM: 143, signal.SIGINT: 130}
REFUSED = UsageError.exit_code  # a shard that refused its arguments, config or output directory


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


def run_local(request: LaunchRequest) -> int:
    """Every cell (a shard; in a sweep, a shard of one model) as a child process, `parallel` at a
    time, the one expected to take longest first (next_cell)."""
    cells = request.cells()
    commands = [self_command() + ["run", *request.cell_args(cell)] for cell in cells]
    if request.dry_run:
        for command in commands:
            print(shlex.join(command))
        return 0
    if request.fresh:  # here, once per model's run, as on a SLURM or Ray driver: every lease first, then
        for run in request.runs():  # the move, so one shard that cannot move leaves every other where it was
            set_aside_shards(run.root)
    parallel = getattr(request.config.cluster, "parallel", None) or request.total * (1 if request.sweep else len(cells))
    stop: list[signal.Signals] = []
    start = time.monotonic()
    ends = asyncio.run(_run_all(commands, [cell.label for cell in cells], [cell.shard for cell in cells], parallel, stop))
    wall = time.monotonic() - start
    failed = [cell for cell, (code, _) in zip(cells, ends) if code != 0]
    for cell, (code, seconds) in zip(cells, ends):
        outcome = "not started (stopped before its turn)" if code is None else f"exit {code} after {seconds:.2f} s"
        print(f"shardeval: {cell.label}: {outcome} -> {cell.dir}", file=sys.stderr)
    busy, slots = sum(seconds for _, seconds in ends), min(parallel, len(cells))
    print(f"shardeval: {len(cells)} {'cells' if request.sweep else 'shards'} ran in {wall:.2f} s, {slots} at a time: "
          f"busy {busy:.2f} s, {percent(busy / (slots * wall or 1))} of the slots' time", file=sys.stderr)
    refused = [cell for cell, (code, _) in zip(cells, ends) if code == REFUSED]
    if not stop and refused:
        # each refused before it wrote anything (its reason is above): what its directory holds is not this
        # run's, and a merge would print it as if it were (in a sweep: a model's old column among the new ones)
        if len(refused) == len(cells):
            print(f"shardeval: every {'cell' if request.sweep else 'shard'} refused to start (exit {REFUSED}, the reason above); "
                  f"nothing merged: what {request.output_root} holds is not this run", file=sys.stderr)
        else:
            print(f"shardeval: {', '.join(cell.label for cell in refused)} refused to start (exit {REFUSED}, the reason above); "
                  f"nothing merged: what {'their directories hold' if len(refused) > 1 else 'its directory holds'} is not "
                  f"this run's; fix that and rerun the same command to resume", file=sys.stderr)
        return REFUSED
    merge_and_report(request.output_root)
    if stop:
        print(f"shardeval: interrupted by {stop[0].name}; rerun the same command to resume the shards", file=sys.stderr)
        return STOP_CODES[stop[0]]
    if failed:
        request.report_failed(failed)
        # every shard that did not succeed finished, with errors: exit 3 as they did; anything else 1
        return EXIT_WITH_ERRORS if all(ends[cells.index(cell)][0] == EXIT_WITH_ERRORS for cell in failed) else 1
    return 0


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


async def _run_all(commands: list[list[str]], labels: list[str], shard_of: list[int], parallel: int,
                   stop: list[signal.Signals]) -> list[tuple[int | None, float]]:
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
            *commands[i], stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
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

    pending, running = list(range(len(commands))), set()
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
