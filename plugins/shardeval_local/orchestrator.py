"""Run the shards of one evaluation as local processes, their output prefixed with the shard.

The shards live and die with this process: a stop signal (SIGTERM, Ctrl-C) is passed on to every
running shard, no shard starts after it, each drains and marks itself `interrupted`, and this
process exits 143 (130 for SIGINT). If this process is killed outright (SIGKILL, the OOM killer),
the kernel sends each shard SIGTERM (PR_SET_PDEATHSIG), and each shard stops its own servers.
"""

from __future__ import annotations

import asyncio
import shlex
import signal
import sys
import time

from shardeval.api import ClusterConfig, Count, die_with_parent, LaunchRequest, merge_and_report, self_command

STOP_CODES = {signal.SIGTERM: 143, signal.SIGINT: 130}


class LocalClusterConfig(ClusterConfig, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """`parallel`: how many shards run at once (default: all of them; in a sweep, as many as one
    model has, since each starts its own model server)."""

    parallel: Count | None = None  # shard processes at once

    def runs_in_process(self) -> bool:
        """Without `shards` the one shard runs right in `shardeval run` (see ClusterConfig)."""
        return not self.shards


def run_local(request: LaunchRequest) -> int:
    """Every cell (a shard; in a sweep, a shard of one model) as a child process, `parallel` at a time."""
    cells = request.cells()
    commands = [self_command() + ["run", *request.cell_args(cell)] for cell in cells]
    if request.dry_run:
        for command in commands:
            print(shlex.join(command))
        return 0
    parallel = getattr(request.config.cluster, "parallel", None) or request.total * (1 if request.sweep else len(cells))
    stop: list[signal.Signals] = []
    start = time.monotonic()
    ends = asyncio.run(_run_all(commands, [cell.label for cell in cells], parallel, stop))
    wall = time.monotonic() - start
    failed = [cell for cell, (code, _) in zip(cells, ends) if code != 0]
    for cell, (code, seconds) in zip(cells, ends):
        outcome = "not started (stopped before its turn)" if code is None else f"exit {code} after {seconds:.2f} s"
        print(f"shardeval: {cell.label}: {outcome} -> {cell.dir}", file=sys.stderr)
    busy, slots = sum(seconds for _, seconds in ends), min(parallel, len(cells))
    print(f"shardeval: {len(cells)} {'cells' if request.sweep else 'shards'} ran in {wall:.2f} s, {slots} at a time: "
          f"busy {busy:.2f} s, {busy / (slots * wall or 1):.0%} of the slots' time", file=sys.stderr)
    merge_and_report(request.output_root)
    if stop:
        print(f"shardeval: interrupted by {stop[0].name}; rerun the same command to resume the shards", file=sys.stderr)
        return STOP_CODES[stop[0]]
    if failed:
        request.report_failed(failed)
        return 1
    return 0


async def _run_all(commands: list[list[str]], labels: list[str], parallel: int,
                   stop: list[signal.Signals]) -> list[tuple[int | None, float]]:
    """Run the shard commands, `parallel` at a time; (exit code, seconds from start to exit) of
    each (None, 0: never started because a stop signal came first, which is then in `stop`)."""
    gate = asyncio.Semaphore(parallel)
    procs: list[asyncio.subprocess.Process] = []
    loop = asyncio.get_running_loop()

    def forward(sig: signal.Signals) -> None:
        if not stop:
            stop.append(sig)
        for proc in procs:
            if proc.returncode is None:
                proc.send_signal(sig)  # a second signal is passed on too: the shards stop at once

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, forward, sig)

    async def one(label: str, command: list[str]) -> tuple[int | None, float]:
        async with gate:
            if stop:
                return None, 0.0
            start = time.monotonic()
            proc = await asyncio.create_subprocess_exec(
                *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,  # signals reach shards only through forward()
                preexec_fn=die_with_parent(),  # and SIGTERM if this process is killed outright
            )
            procs.append(proc)
            if stop:  # the signal came while it was being started
                proc.send_signal(stop[0])
            assert proc.stdout is not None
            async for line in proc.stdout:
                sys.stderr.write(f"[{label}] {line.decode(errors='replace')}")
            return await proc.wait(), time.monotonic() - start

    return list(await asyncio.gather(*(one(label, c) for label, c in zip(labels, commands))))
