"""Built-in plugin: the `slurm` orchestrator (`cluster.type: slurm`): an array job, one task per
shard (in a sweep, per (model, shard) cell), each running `shardeval run … --shard i/N` (so a task
never re-submits the array), then a merge job; render.py writes the scripts, submit.py submits
them and records the job ids that `shardeval status` reads (and that the launch_pending hook
reads, which `shardeval watch` asks whether a checkpoint's array is still queued). With
`ray: true`, one Ray job over the allocation (ray_template.py).

Registered through the `shardeval` entry-point group like any third-party plugin. Heavy imports
(msgspec via the config Struct) happen inside the hooks, so loading plugins for `--help` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardeval.api.plugin import hookimpl

if TYPE_CHECKING:
    from shardeval.api.plugin import Register


@hookimpl
def register_orchestrators(register: Register) -> None:
    from shardeval.api.plugin import Lazy
    from shardeval_slurm.config import SlurmClusterConfig

    # writes eval.sbatch and merge.sbatch under the output root and submits them (see submit.py)
    register("slurm", Lazy("shardeval_slurm.submit:SlurmOrchestrator"), config=SlurmClusterConfig)


@hookimpl
def run_status(run_dir: str) -> str | None:
    """Each task's SLURM state, when this plugin submitted the run (ROOT/slurm_job.json exists)."""
    from shardeval_slurm.jobs import read_record, render_jobs

    record = read_record(run_dir)
    return render_jobs(record, run_dir) if record else None


@hookimpl
def launch_pending(run_dir: str, service: str | None) -> bool | None:
    """Whether the array of the newest submission that queued this model's cells (the run's, when
    `service` is None) still has tasks queued or running, from squeue; None when this plugin did not
    submit it (no ROOT/slurm_job.json naming it) or squeue cannot answer."""
    from shardeval_slurm.jobs import job_of, latest_submission, live_tasks, read_record

    record = read_record(run_dir)
    submission = latest_submission(record, service) if record else None
    job = job_of(submission) if submission else None
    live = live_tasks([job]) if job else None
    return None if live is None else live > 0


@hookimpl
def rerun_hint(run_dir: str, shards: list[int]) -> str | None:
    """`sbatch --array=…` of this run's own script, when this plugin submitted it (of a sweep
    model's directory: the sweep's script, with the model's cells)."""
    import os
    import shlex

    from shardeval_slurm.jobs import read_record, sweep_rerun_hint
    from shardeval_slurm.render import EVAL_SCRIPT, RAY_SCRIPT

    record = read_record(run_dir)
    if not record:
        return sweep_rerun_hint(run_dir, shards)
    if record.get("sweep"):
        return None  # a sweep root: its shards are its models' (hinted per model directory)
    if record.get("ray_job_id"):
        return f"`sbatch {shlex.quote(os.path.join(run_dir, RAY_SCRIPT))}` (Ray on SLURM; complete shards finish at once)"
    listed = ",".join(map(str, shards))
    return f"`sbatch --array={listed} {shlex.quote(os.path.join(run_dir, EVAL_SCRIPT))}`"
