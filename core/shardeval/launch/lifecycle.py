"""The orchestrator lifecycle: what every `cluster.type` does, run by the core in one order.

An orchestrator plugin fills phases (`plan`, `dry_run`, `submit`, `wait`, `collect`) of an
`Orchestrator`; `run_lifecycle` calls them in order and writes, once for every orchestrator, the
parts of a launch that users rely on being the same everywhere: `--dry-run` starts nothing,
`--fresh` sets earlier results aside on the launcher (every lease first, then the move) before
anything is submitted, the cells that refused to start keep a merge from presenting another run's
results, the merge and its report at the end, the stop-signal message, the failed-shard report,
and the exit code (0; 2 when cells refused; 3 when every failed cell finished with errors; 130 /
143 after a stop signal; 1 otherwise).

The older form of an orchestrator, a plain `factory(request) -> exit code` that does all of this
itself, still works: `orchestrate` runs what a registered factory returns, an `Orchestrator` through
the lifecycle and an exit code as it is.
"""

from __future__ import annotations

import signal
import sys
from dataclasses import dataclass
from typing import Callable, ClassVar

from shardeval.errors import EXIT_WITH_ERRORS, UsageError
from shardeval.launch.orchestrator import Cell, LaunchRequest, merge_and_report

REFUSED = UsageError.exit_code  # a cell that refused its arguments, config or output directory
STOP_CODES = {signal.SIGTERM: 143, signal.SIGINT: 130}


@dataclass(frozen=True)
class CellOutcome:
    """How one cell of a launch ended, as its orchestrator saw it."""

    cell: Cell
    exit_code: int | None  # its exit code; None: it never ran to an exit (not started after a stop, cancelled)
    seconds: float = 0.0  # from its start to its end, where the orchestrator measures it


class Orchestrator:
    """One launch on one kind of cluster: the phases a `cluster.type` plugin fills.

    Registered as `register("name", MyOrchestrator, config=MyClusterConfig)` (or a `Lazy` naming
    the class); the core makes one per launch with the `LaunchRequest` and runs `run_lifecycle`.
    Class attributes declare how the orchestrator takes part in the protocol:

    - `waits`: True when `submit` + `wait` see every cell end here (local processes, Ray tasks),
      so the core collects, merges and picks the exit code. False when the cells are handed to a
      scheduler that runs them later with its own merge (a SLURM array and its merge job, an
      Indexed Job, a Compose project): `submit`'s code is the launch's.
    - `fresh_on_launcher`: True when `--fresh` sets earlier results aside here, once, before
      `submit` (a retried or requeued task then resumes instead of starting over); False when
      `--fresh` travels to the nodes in their arguments (`run_args()`).
    - `refusal_stops_the_merge`: True when cells that exited 2 keep the launch from merging (each
      refused before it wrote anything, so what its directory holds is not this run's); False
      when they are reported with the other failed cells and the rest is merged.
    """

    waits: ClassVar[bool] = True
    fresh_on_launcher: ClassVar[bool] = True
    refusal_stops_the_merge: ClassVar[bool] = True

    def __init__(self, request: LaunchRequest) -> None:
        self.request = request

    def plan(self) -> None:
        """What to run, before anything is printed, moved or submitted: render the files, check
        what only this orchestrator can (a mistake raises UsageError: one line, exit 2). May
        replace `self.request` (say, with an absolute output root), which the later phases use."""

    def dry_run(self) -> int:
        """`--dry-run`: print what `submit` would do, start nothing; the exit code (0)."""
        raise NotImplementedError(f"{type(self).__name__} has no dry run")

    def submit(self) -> int:
        """Hand every cell to where it runs: 0 when they were handed over, else the launch's exit
        code (nothing to wait for). Of an orchestrator that does not wait, the launch's code."""
        raise NotImplementedError(f"{type(self).__name__} submits nothing")

    def wait(self) -> None:
        """Return when every submitted cell has ended (or a stop signal ended the launch)."""

    def collect(self) -> list[CellOutcome]:
        """One outcome per cell, in `request.cells()` order; say what this orchestrator says of
        each (its exit and time, where it ran)."""
        return []

    def merges(self) -> bool:
        """Whether the launch ends with the merge (`merge: false` sections say no)."""
        return True

    def stopped_by(self) -> signal.Signals | None:
        """The stop signal (SIGTERM, SIGINT) that ended the launch here, if one did: the cells
        were told, none started after it, and the launch exits 143 / 130."""
        return None


OrchestratorFactory = Callable[[LaunchRequest], "Orchestrator | int"]


def orchestrate(factory: OrchestratorFactory, request: LaunchRequest) -> int:
    """Run one launch with a registered orchestrator: an `Orchestrator` class (or a factory that
    makes one) through the lifecycle; the older form, a function that does the whole launch and
    returns its exit code, as it is."""
    made = factory(request)
    if isinstance(made, Orchestrator):
        return run_lifecycle(made)
    return made


def run_lifecycle(orchestrator: Orchestrator) -> int:
    """The launch, in order: plan, dry run (and stop), `--fresh`, submit, wait, collect, settle."""
    orchestrator.plan()
    request = orchestrator.request
    if request.dry_run:
        return orchestrator.dry_run()
    if request.fresh and orchestrator.fresh_on_launcher:
        from shardeval.run.resume import set_aside_shards  # not at the top: plugins import this module when they load

        for run in request.runs():  # once per model's run: every lease first, then the move, so one shard that
            set_aside_shards(run.root)  # cannot move leaves every other where it was
    code = orchestrator.submit()
    if code != 0 or not orchestrator.waits:
        return code
    orchestrator.wait()
    return settle(orchestrator, orchestrator.collect())


def settle(orchestrator: Orchestrator, outcomes: list[CellOutcome]) -> int:
    """After every cell ended: refused cells, the merge and its report, the stop signal, the
    failed cells, and the launch's exit code."""
    request = orchestrator.request
    stop = orchestrator.stopped_by()
    refused = [o.cell for o in outcomes if o.exit_code == REFUSED]
    if stop is None and refused and orchestrator.refusal_stops_the_merge:
        say_refused(request, refused, len(outcomes))
        return REFUSED
    if orchestrator.merges():
        merge_and_report(request.output_root)
    else:
        print(f"shardeval: not merged (merge: false); `shardeval merge {request.output_root}` merges the shards", file=sys.stderr)
    if stop is not None:
        print(f"shardeval: interrupted by {stop.name}; rerun the same command to resume the shards", file=sys.stderr)
        return STOP_CODES[stop]
    failed = [o for o in outcomes if o.exit_code != 0]
    if not failed:
        return 0
    request.report_failed([o.cell for o in failed])
    return failed_exit_code(failed)


def failed_exit_code(failed: list[CellOutcome]) -> int:
    """The launch's code when cells failed: 130 when some were cancelled by an interrupt; 3
    when every one finished with errors (as they exited), 2 when every one refused; else 1."""
    if any(o.exit_code is None for o in failed):
        return STOP_CODES[signal.SIGINT]
    codes = {o.exit_code for o in failed}
    return EXIT_WITH_ERRORS if codes == {EXIT_WITH_ERRORS} else REFUSED if codes == {REFUSED} else 1


def say_refused(request: LaunchRequest, refused: list[Cell], cells: int) -> None:
    """Each refused before it wrote anything (its reason is above): what its directory holds is
    not this run's, and a merge would print it as if it were (in a sweep: a model's old column
    among the new ones)."""
    if len(refused) == cells:
        print(f"shardeval: every {'cell' if request.sweep else 'shard'} refused to start (exit {REFUSED}, the reason above); "
              f"nothing merged: what {request.output_root} holds is not this run", file=sys.stderr)
    else:
        print(f"shardeval: {', '.join(cell.label for cell in refused)} refused to start (exit {REFUSED}, the reason above); "
              f"nothing merged: what {'their directories hold' if len(refused) > 1 else 'its directory holds'} is not "
              f"this run's; fix that and rerun the same command to resume", file=sys.stderr)
