"""`shardeval run` with `cluster.type: slurm` and no shard selected: write the scripts, submit them.

1. render eval.sbatch + merge.sbatch (render.py; ray.sbatch: ray_template.py) and refuse any that would hold a secret;
2. create ROOT/shard_<i>/logs/ for every shard (SLURM silently drops output whose directory is
   missing) and ROOT/logs/;
3. `--dry-run`: print the scripts and stop. Otherwise `sbatch --parsable eval.sbatch`, then
   `sbatch --parsable --dependency=afterany:<array id> merge.sbatch`, and record both ids in
   ROOT/slurm_job.json, which `shardeval status ROOT` reads to show the tasks' SLURM states.

Only the cells not yet complete are submitted (`sbatch --array=<list>` overrides the script's own
line): a shard whose manifest says complete, of this config, with an ok record for every pair, is
left out, so rerunning a finished sweep with a model added queues only that model's cells.

A sweep (`sweep:`) is one array over (model, shard) cells, model-major, each task running
`shardeval run … --sweep-services <the models, in order> --shard c/(M·S) -o ROOT`; the checks
above run for each model's directory ROOT/<model>/, and slurm_job.json records the models' order
and the tasks submitted, so `status` names each task by its cell. A launch of one model
(`--sweep-services NAME`: what `shardeval watch` submits for each checkpoint) writes its script
into that model's directory, ROOT/<model>/eval.sbatch, so launches of several checkpoints into one
root never overwrite each other's script; they add to slurm_job.json under a lock.

Submitting again while an array of this run still has tasks queued or running is refused (checked
before `--fresh` moves anything): two arrays appending to the same shard directories would race.
In a sweep only the arrays that queued cells of the models submitted now count: each checkpoint of
a watch is its own array, queued beside the others.
A root whose shards hold another run (another config hash or shard count) is refused before
submitting, as each task's resume would refuse it after queueing. `--fresh` sets earlier results
aside here, at submission, and is not passed to the tasks, so a requeued task resumes instead of
starting over.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from shardeval.api.orchestrator import Orchestrator
from shardeval.api.plugin import UsageError
from shardeval.api.records import atomic_write
from shardeval_slurm.jobs import array_spec, job_of, latest_submission, live_tasks, read_record, record_lock
from shardeval_slurm.ray_template import render_ray
from shardeval_slurm.render import (
    JOB_FILE,
    MERGE_SCRIPT,
    RAY_SCRIPT,
    check_no_secrets,
    choose_pool,
    eval_script,
    node_command,
    render_array,
    render_merge,
)

if TYPE_CHECKING:
    from shardeval.api.orchestrator import LaunchRequest
    from shardeval_slurm.config import SlurmClusterConfig

log = logging.getLogger("shardeval")
SBATCH_TIMEOUT_S = 120.0


def render(request: LaunchRequest, cwd: str | None = None) -> dict[str, str]:
    """{file name: text} to write under the output root: eval.sbatch and merge.sbatch, or
    ray.sbatch with `ray: true`."""
    cluster: SlurmClusterConfig = request.config.cluster  # type: ignore[assignment]
    cwd = cwd or os.getcwd()
    config_path = os.path.abspath(request.config_path) if request.config_path else None
    request = replace(request, output_root=os.path.abspath(request.output_root), config_path=config_path, fresh=False)
    pool = choose_pool(request.config)
    command = node_command(cluster)
    if cluster.ray and request.sweep is not None:
        raise UsageError(
            "cluster.ray: true does not run sweeps (its one Ray job runs the shards of one model); set cluster.ray: false "
            "for one array of (model, shard) tasks, or use cluster.type: ray"
        )
    if cluster.ray:
        return {RAY_SCRIPT: render_ray(request, pool, command, cwd)}
    files = {eval_script(request): render_array(request, pool, command, cwd)}
    if cluster.merge and request.merge:  # `run --no-merge` (a watcher's launch): the watcher merges
        files[MERGE_SCRIPT] = render_merge(cluster, pool, command, request.output_root, cwd, export=bool(request.config.export))
    return files


class SlurmOrchestrator(Orchestrator):
    """Submits an array job (and its merge job, which waits for it): SLURM runs the cells later,
    so it does not wait; `--fresh` sets earlier results aside here, at submission."""

    waits = False

    def plan(self) -> None:
        """Render and check the scripts; refuse what every task would refuse after queueing."""
        from shardeval.api.orchestrator import check_submission, config_hash

        self.files = render(self.request)
        check_no_secrets(self.files, self.request.config)
        self.request = request = replace(self.request, output_root=os.path.abspath(self.request.output_root))
        if not request.dry_run:
            self._refuse_without_sbatch()  # before the core prepares the run for the nodes (docs/offline.md)
            _refuse_if_still_queued(request)  # before --fresh moves anything: a live task would write into superseded/
        if request.fresh:
            return  # the lifecycle sets each run's shards aside (not in a dry run)
        for run in request.runs():  # one run, or each model of a sweep in ROOT/<model>/
            # A changed config (say `-O benchmarks.0.repeats=3` on a finished run) is refused here, in one
            # line, not by every task after queueing while the dependent merge reports the old run. A dry
            # run only warns: it submits nothing.
            try:
                check_submission(run.root, config_hash(run.config), request.total, run.config)
            except UsageError as exc:
                if not request.dry_run:
                    raise
                log.warning("%s", exc)

    def dry_run(self) -> int:
        if self.request.fresh:
            log.info("--fresh: earlier results are set aside when the run is submitted; a dry run moves nothing")
        paths, todo, array = self._write()
        return _print_dry_run(self.files, paths, array, eval_script(self.request))

    def submit(self) -> int:
        request = self.request
        paths, todo, array = self._write()
        root, cells, script = request.output_root, request.cells(), eval_script(request)
        what = "cells" if request.sweep else "shards"
        if not todo and RAY_SCRIPT not in paths:
            print(
                f"every one of the {len(cells)} {what} under {root} is already complete: nothing submitted; "
                f"`shardeval merge {root}` merges them"
            )
            return 0
        record: dict[str, object] = {"submitted_at": time.time(), "total_shards": request.total, "root": root}
        if RAY_SCRIPT in paths:
            record["ray_job_id"] = _sbatch(paths[RAY_SCRIPT])
            log.info(
                "submitted Ray job %s (%s): %d shards as Ray tasks, merged in the job",
                record["ray_job_id"],
                paths[RAY_SCRIPT],
                request.total,
            )
        else:
            record["array_job_id"] = array_id = _sbatch(paths[script], *array)
            record["tasks"], record["script"] = todo, script
            if request.sweep is not None:
                record["sweep"] = {"services": list(request.sweep.services), "shards": request.total}
            skipped = f", {len(cells) - len(todo)} complete {what} left out" if len(todo) < len(cells) else ""
            layout = "<model>/shard_<i>" if request.sweep else "shard_<i>"
            log.info("submitted array job %s (%s): %d tasks%s, %s under %s", array_id, paths[script], len(todo), skipped, layout, root)
            if MERGE_SCRIPT in paths:
                record["merge_job_id"] = _sbatch(paths[MERGE_SCRIPT], f"--dependency=afterany:{array_id}")
                log.info("submitted merge job %s (%s), after the array ends", record["merge_job_id"], paths[MERGE_SCRIPT])
        _add_record(root, record)
        print(f"`shardeval status {root}` shows progress and each task's SLURM state; results: {os.path.join(root, 'merged')}/")
        return 0

    def _refuse_without_sbatch(self) -> None:
        """Not a SLURM login node: the scripts are written (to take to one), nothing is submitted."""
        if shutil.which("sbatch") is None:
            paths, _, _ = self._write()
            raise UsageError(
                f"sbatch not found on PATH: run this on a SLURM login node, or pass --dry-run to only write the scripts "
                f"(written: {', '.join(paths.values())})"
            )

    def _write(self) -> tuple[dict[str, str], list[int], list[str]]:
        """The logs folders (SLURM silently drops output whose directory is missing) and the
        scripts; then which cells to submit: {name: path}, the cells' indices, the --array flag."""
        from shardeval.api.orchestrator import config_hash

        request = self.request
        root, total = request.output_root, request.total
        os.makedirs(os.path.join(root, "logs"), exist_ok=True)
        if RAY_SCRIPT not in self.files and request.sweep is None:
            for i in range(total):
                os.makedirs(os.path.join(root, f"shard_{i}", "logs"), exist_ok=True)
        for name in self.files:  # a one-model launch's script goes into its model's directory
            os.makedirs(os.path.join(root, os.path.dirname(name)), exist_ok=True)
        paths = request.write(root, self.files, mode=0o755)
        cells, hashes = request.cells(), [config_hash(run.config) for run in request.runs()]
        todo = [c.index for c in cells if request.fresh or not cell_complete(c.dir, hashes[c.index // total])]
        return paths, todo, array_flag(todo, len(cells), request.config.cluster)  # type: ignore[arg-type]


def cell_complete(cell_dir: str, config_hash: str) -> bool:
    """Whether a cell's task would find nothing to do: its manifest says complete, of this config,
    and every pair has an ok record (the core's own rule for starting no server)."""
    from shardeval.api.orchestrator import nothing_to_ask
    from shardeval.api.records import read_manifest

    manifest = read_manifest(cell_dir)
    return (
        manifest is not None and manifest.state == "complete" and manifest.config_hash == config_hash and nothing_to_ask(cell_dir, manifest)
    )


def array_flag(todo: list[int], cells: int, cluster: SlurmClusterConfig) -> list[str]:
    """`--array=<the cells to run>[%max_parallel]` when that is not the script's own 0-<cells-1>."""
    if todo == list(range(cells)):
        return []
    return [f"--array={array_spec(todo)}" + (f"%{cluster.max_parallel}" if cluster.max_parallel else "")]


def _print_dry_run(files: dict[str, str], paths: dict[str, str], array: list[str], script: str) -> int:
    for name, path in paths.items():
        if len(paths) > 1:
            print(f"# ===== {path} =====")
        print(files[name], end="")
    how = shlex.join(["sbatch", *(array if script in paths else []), paths.get(script) or paths[RAY_SCRIPT]])
    if MERGE_SCRIPT in paths:
        how += f", then sbatch --dependency=afterany:<array job id> {shlex.quote(paths[MERGE_SCRIPT])}"
    print(f"shardeval: dry run: wrote {', '.join(paths.values())}; nothing submitted (to submit: {how})", file=sys.stderr)
    return 0


def _sbatch(script: str, *flags: str) -> str:
    """Submit; the job id (`--parsable` prints `ID` or `ID;CLUSTER`). sbatch's refusal is a user error."""
    argv = ["sbatch", "--parsable", *flags, script]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=SBATCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise UsageError(f"sbatch did not answer within {SBATCH_TIMEOUT_S:.0f} s (is slurmctld up? try `scontrol ping`)") from None
    job_id = proc.stdout.strip().split(";")[0]
    if proc.returncode != 0 or not job_id.isdigit():
        said = " ".join(proc.stderr.split()) or proc.stdout.strip() or f"exit {proc.returncode}"
        raise UsageError(f"sbatch refused {os.path.basename(script)}: {said}")
    return job_id


def _add_record(root: str, record: dict[str, object]) -> None:
    """slurm_job.json: this submission, the earlier ones kept under `previous` (read and rewritten
    under a lock: the watcher submits several checkpoints into one root at once)."""
    with record_lock(root):
        if old := read_record(root):
            record["previous"] = [*old.pop("previous", []), old]
        atomic_write(os.path.join(root, JOB_FILE), (json.dumps(record, indent=2, sort_keys=True) + "\n").encode())


def _refuse_if_still_queued(request: LaunchRequest) -> None:
    """Refuse while an array that queued cells submitted now (of this run; in a sweep, of the
    models submitted now) still has tasks queued or running."""
    root = request.output_root
    record = read_record(root)
    if not record:
        return
    services: list[str | None] = list(request.sweep.services) if request.sweep is not None else [None]
    jobs = sorted({job for name in services if (sub := latest_submission(record, name)) and (job := job_of(sub))})
    live = live_tasks(jobs)
    if live:
        which = f"job {jobs[0]}" if len(jobs) == 1 else f"jobs {', '.join(jobs)}"
        raise UsageError(
            f"{root}: {which} of this run still {'has' if len(jobs) == 1 else 'have'} {live} task(s) queued or running; two submissions would write "
            f"the same shard directories at once: wait for it, or `scancel {' '.join(jobs)}`, then submit again"
        )
