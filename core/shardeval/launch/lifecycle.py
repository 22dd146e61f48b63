"""The orchestrator lifecycle: what every `cluster.type` does, run by the core in one order.

An orchestrator plugin fills phases (`plan`, `dry_run`, `submit`, `wait`, `collect`) of an
`Orchestrator` (shardeval.launch.orchestrator, beside the request it is given, so a plugin that
loads imports nothing heavy); `run_lifecycle` calls them in order and writes, once for every
orchestrator, the parts of a launch that users rely on being the same everywhere: `--dry-run` starts nothing,
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
from typing import Any
from collections.abc import Callable

from shardeval.config.loading import load_config
from shardeval.config.sweep import plan_sweep
from shardeval.errors import EXIT_WITH_ERRORS, UsageError
from shardeval.launch.orchestrator import Cell, CellOutcome, LaunchRequest, merge_and_report, Orchestrator
from shardeval.run.resume import set_aside_shards

REFUSED = UsageError.exit_code  # a cell that refused its arguments, config or output directory
STOP_CODES = {signal.SIGTERM: 143, signal.SIGINT: 130}


OrchestratorFactory = Callable[[LaunchRequest], "Orchestrator | int"]


def load_request(
    config_path: str | None,
    overrides: list[str],
    quick: dict[str, Any],
    output_dir: str | None,
    *,
    dry_run: bool,
    fresh: bool,
) -> LaunchRequest:
    """The request of a launch that an orchestrator's own command starts (`python -m
    shardeval_ray`): the config loaded as `shardeval run` loads it, its sweep planned."""
    config = load_config(config_path, overrides, quick)
    sweep = plan_sweep(config) if config.sweep is not None else None  # a sweep: one cell per (model, shard)
    return LaunchRequest.create(config, config_path, overrides, quick, output_dir, dry_run=dry_run, fresh=fresh, sweep=sweep)


def orchestrate(factory: OrchestratorFactory, request: LaunchRequest, before_submit: Callable[[], None] | None = None) -> int:
    """Run one launch with a registered orchestrator: an `Orchestrator` class (or a factory that
    makes one) through the lifecycle; the older form, a function that does the whole launch and
    returns its exit code, as it is. `before_submit`: see run_lifecycle."""
    made = factory(request)
    if isinstance(made, Orchestrator):
        return run_lifecycle(made, before_submit)
    return made


def run_lifecycle(orchestrator: Orchestrator, before_submit: Callable[[], None] | None = None) -> int:
    """The launch, in order: plan, dry run (and stop), `--fresh`, submit, wait, collect, settle.
    `before_submit` runs once the launch is checked and before anything is submitted (the core
    prepares a cluster's run there: a launch refused by `plan` leaves the run's preparation as it was)."""
    orchestrator.plan()
    request = orchestrator.request
    if request.dry_run:
        return orchestrator.dry_run()
    if request.fresh and orchestrator.fresh_on_launcher:
        for run in request.runs():  # once per model's run: every lease first, then the move, so one shard that
            set_aside_shards(run.root)  # cannot move leaves every other where it was
    if before_submit is not None:
        before_submit()
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
    if orchestrator.merges() and request.merge:
        merge_and_report(request.output_root)
    else:
        why = "merge: false" if request.merge else "--no-merge"
        print(f"shardeval: not merged ({why}); `shardeval merge {request.output_root}` merges the shards", file=sys.stderr)
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
        print(
            f"shardeval: every {'cell' if request.sweep else 'shard'} refused to start (exit {REFUSED}, the reason above); "
            f"nothing merged: what {request.output_root} holds is not this run",
            file=sys.stderr,
        )
    else:
        print(
            f"shardeval: {', '.join(cell.label for cell in refused)} refused to start (exit {REFUSED}, the reason above); "
            f"nothing merged: what {'their directories hold' if len(refused) > 1 else 'its directory holds'} is not "
            f"this run's; fix that and rerun the same command to resume",
            file=sys.stderr,
        )
