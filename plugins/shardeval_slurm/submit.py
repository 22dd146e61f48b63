"""`shardeval run` with `cluster.type: slurm` and no shard selected: write the scripts, submit them.

1. render eval.sbatch + merge.sbatch (render.py) and refuse any that would hold a secret;
2. create ROOT/shard_<i>/logs/ for every shard (SLURM silently drops output whose directory is
   missing) and ROOT/logs/;
3. `--dry-run`: print the scripts and stop. Otherwise `sbatch --parsable eval.sbatch`, then
   `sbatch --parsable --dependency=afterany:<array id> merge.sbatch`, and record both ids in
   ROOT/slurm_job.json, which `shardeval status ROOT` reads to show the tasks' SLURM states.

Submitting again while this run's array still has tasks queued or running is refused (checked
before `--fresh` moves anything): two arrays appending to the same shard directories would race.
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
from typing import TYPE_CHECKING

from shardeval.api import UsageError, atomic_write
from shardeval_slurm.render import EVAL_SCRIPT, JOB_FILE, MERGE_SCRIPT, RAY_SCRIPT, check_no_secrets, render

if TYPE_CHECKING:
    from shardeval.api import LaunchRequest

log = logging.getLogger("shardeval")
SBATCH_TIMEOUT_S = 120.0


def submit(request: LaunchRequest) -> int:
    from shardeval.api import check_submission, config_hash, set_aside_shards

    files = render(request)
    check_no_secrets(files, request.config)
    root, total = os.path.abspath(request.output_root), request.total
    if not request.dry_run:
        _refuse_if_still_queued(root)  # before --fresh moves anything: a live task would write into superseded/
    if not request.fresh:
        # A changed config (say `-O benchmarks.0.repeats=3` on a finished run) is refused here, in one
        # line, not by every task after queueing while the dependent merge reports the old run. A dry
        # run only warns: it submits nothing.
        try:
            check_submission(root, config_hash(request.config), total)
        except UsageError as exc:
            if not request.dry_run:
                raise
            log.warning("%s", exc)
    elif not request.dry_run:
        set_aside_shards(root, total)  # leases first, then the move
    else:
        log.info("--fresh: earlier results are set aside when the run is submitted; a dry run moves nothing")
    os.makedirs(os.path.join(root, "logs"), exist_ok=True)
    if RAY_SCRIPT not in files:
        for i in range(total):
            os.makedirs(os.path.join(root, f"shard_{i}", "logs"), exist_ok=True)
    paths = request.write(root, files, mode=0o755)
    if request.dry_run:
        return _print_dry_run(files, paths)
    if shutil.which("sbatch") is None:
        raise UsageError(
            f"sbatch not found on PATH: run this on a SLURM login node, or pass --dry-run to only write the scripts "
            f"(written: {', '.join(paths.values())})"
        )
    record: dict[str, object] = {"submitted_at": time.time(), "total_shards": total, "root": root}
    if RAY_SCRIPT in paths:
        record["ray_job_id"] = _sbatch(paths[RAY_SCRIPT])
        log.info("submitted Ray job %s (%s): %d shards as Ray tasks, merged in the job", record["ray_job_id"], paths[RAY_SCRIPT], total)
    else:
        record["array_job_id"] = array_id = _sbatch(paths[EVAL_SCRIPT])
        log.info("submitted array job %s (%s): %d tasks, shard_<i> under %s", array_id, paths[EVAL_SCRIPT], total, root)
        if MERGE_SCRIPT in paths:
            record["merge_job_id"] = _sbatch(paths[MERGE_SCRIPT], f"--dependency=afterany:{array_id}")
            log.info("submitted merge job %s (%s), after the array ends", record["merge_job_id"], paths[MERGE_SCRIPT])
    if old := read_record(root):  # slurm_job.json: the latest submission, earlier ones kept under `previous`
        record["previous"] = [*old.pop("previous", []), old]
    atomic_write(os.path.join(root, JOB_FILE), (json.dumps(record, indent=2, sort_keys=True) + "\n").encode())
    print(f"`shardeval status {root}` shows progress and each task's SLURM state; results: {os.path.join(root, 'merged')}/")
    return 0


def _print_dry_run(files: dict[str, str], paths: dict[str, str]) -> int:
    for name, path in paths.items():
        if len(paths) > 1:
            print(f"# ===== {path} =====")
        print(files[name], end="")
    how = f"sbatch {shlex.quote(paths.get(EVAL_SCRIPT) or paths[RAY_SCRIPT])}"
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


def read_record(root: str) -> dict | None:
    try:
        with open(os.path.join(root, JOB_FILE), encoding="utf-8") as f:
            data = json.load(f)
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _refuse_if_still_queued(root: str) -> None:
    record = read_record(root)
    job = record and (record.get("array_job_id") or record.get("ray_job_id"))
    if not job or shutil.which("squeue") is None:
        return
    try:
        proc = subprocess.run(["squeue", "-h", "-r", "-j", str(job), "-o", "%T"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return
    states = proc.stdout.split() if proc.returncode == 0 else []  # -r: one line per array task, pending ones too
    if states:
        raise UsageError(
            f"{root}: job {job} of this run still has {len(states)} task(s) queued or running; two submissions would write "
            f"the same shard directories at once: wait for it, or `scancel {job}`, then submit again"
        )
