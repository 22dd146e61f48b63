"""The SLURM side of `shardeval status ROOT`: each array task's state, from `scontrol show job`.

`scontrol -o show job <id>` lists every task of an array (one line each, pending tasks folded into
one line with a range such as `ArrayTaskId=4-15%4`) for as long as slurmctld remembers the job
(MinJobAge, 300 s by default, after it ends). Without slurmdbd there is no `sacct`, so past that
the status says the controller forgot the job; the shard directories still tell the whole story.

Each task is named by its cell (in a sweep, `step1 shard 1/2`: task c is shard c mod S of model
c div S, in the models' order slurm_job.json recorded), and tasks that ended cancelled, failed or
out of time, whose cell is not complete on disk, get the one line that resubmits them.

slurm_job.json holds the latest submission and every earlier one under `previous`. A sweep root
that `shardeval watch` fills gets one submission per checkpoint (`--sweep-services NAME`), so what
is asked per model (is its array still queued? which script reruns it?) is read from the newest
submission that queued that model's cells, and `status` shows every array that is the newest for
some model.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from shardeval_slurm.render import EVAL_SCRIPT, JOB_FILE

# end states after which a task's cell needs running again (UNKNOWN: cancelled while pending, no record)
RESUBMIT = {"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "UNKNOWN"}
_FIELD = re.compile(r"(?:^|\s)([A-Za-z][\w:/.\-]*)=")


@dataclass
class TaskState:
    task: str  # array index, or "-" for a plain job
    state: str
    reason: str
    run_time: str
    nodes: str
    restarts: str


def parse_fields(line: str) -> dict[str, str]:
    """`Key=value Key2=value with spaces ...` (one `scontrol -o` line) as a dict."""
    matches = list(_FIELD.finditer(line))
    ends = [m.start() for m in matches[1:]] + [len(line)]
    return {m.group(1): line[m.end() : end].strip() for m, end in zip(matches, ends)}


def expand_tasks(spec: str) -> list[str]:
    """`0-3,7,10-14:2%4` → ['0', '1', '2', '3', '7', '10', '12', '14'] (throttle dropped)."""
    out: list[str] = []
    for part in spec.split("%")[0].split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?(?::(\d+))?", part.strip())
        if not m:
            if part.strip():
                out.append(part.strip())
            continue
        lo, hi, step = int(m[1]), int(m[2] or m[1]), int(m[3] or 1)
        out += [str(i) for i in range(lo, hi + 1, max(step, 1))]
    return out


def job_tasks(job_id: str, timeout: float = 30.0) -> list[TaskState] | str:
    """Every task of `job_id` (sorted by index), or a one-line reason why nothing is known."""
    if shutil.which("scontrol") is None:
        return "scontrol not on PATH: no live SLURM state here"
    try:
        proc = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"scontrol did not answer within {timeout:.0f} s"
    if proc.returncode != 0:
        said = " ".join(proc.stderr.split())
        if "Invalid job id" in said:
            return (
                "no longer known to slurmctld (it forgets jobs MinJobAge after they end; `sacct -j " + job_id + "` where accounting runs)"
            )
        return said or f"scontrol exit {proc.returncode}"
    tasks: list[TaskState] = []
    for f in map(parse_fields, proc.stdout.splitlines()):
        if not f.get("JobId"):
            continue
        reason, nodes, spec = f.get("Reason", "None"), f.get("NodeList", ""), f.get("ArrayTaskId")
        common = dict(
            state=f.get("JobState", "?"),
            reason="" if reason == "None" else reason,
            run_time=f.get("RunTime", ""),
            nodes="" if nodes == "(null)" else nodes,
            restarts=f.get("Restarts", "0"),
        )
        tasks += [TaskState(task=task, **common) for task in (expand_tasks(spec) if spec else ["-"])]
    return sorted(tasks, key=_by_index)


@dataclass(frozen=True)
class Layout:
    """Which cell an array task id is, from slurm_job.json: a shard of the run, or in a sweep
    shard `id mod shards` of model `id div shards` (`services` in the submitted order)."""

    root: str
    shards: int
    services: list[str] | None = None
    script: str = EVAL_SCRIPT  # the array's script, relative to root (a one-model launch: <model>/eval.sbatch)

    @classmethod
    def of(cls, record: dict, root: str) -> Layout:
        sweep = record.get("sweep") or {}
        shards = int(sweep.get("shards") or record.get("total_shards") or 1)
        return cls(root, shards, sweep.get("services"), str(record.get("script") or EVAL_SCRIPT))

    def models(self, tasks: list[int]) -> list[str]:
        """The sweep models whose cells are among `tasks` (in the models' order)."""
        services = self.services or []
        return [name for i, name in enumerate(services) if any(i * self.shards <= t < (i + 1) * self.shards for t in tasks)]

    def label(self, task: int) -> str:
        if self.services is None:
            return f"shard {task}/{self.shards}"
        model = self.services[task // self.shards] if task // self.shards < len(self.services) else "?"
        return f"{model} shard {task % self.shards}/{self.shards}"

    def complete(self, task: int) -> bool:
        from shardeval.api.records import read_manifest

        if self.services is None:
            where = os.path.join(self.root, f"shard_{task}")
        elif task // self.shards < len(self.services):
            where = os.path.join(self.root, self.services[task // self.shards], f"shard_{task % self.shards}")
        else:
            return False
        manifest = read_manifest(where)
        return manifest is not None and manifest.state == "complete"

    def resubmit(self, tasks: list[int]) -> str:
        return f"sbatch --array={array_spec(tasks)} {shlex.quote(os.path.join(self.root, self.script))}"


def read_record(root: str) -> dict | None:
    """ROOT/slurm_job.json, what this plugin recorded when it submitted (None: it did not)."""
    try:
        with open(os.path.join(root, JOB_FILE), encoding="utf-8") as f:
            data = json.load(f)
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


@contextmanager
def record_lock(root: str) -> Iterator[None]:
    """Held while a submission reads and rewrites slurm_job.json: a watcher submits several
    checkpoints of one root at once, and a submission lost from the file is an array nobody waits for."""
    import fcntl

    with open(os.path.join(root, f".{JOB_FILE}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def submissions(record: dict) -> list[dict]:
    """Every submission slurm_job.json holds, newest first (the latest, then `previous` from its end)."""
    earlier = record.get("previous")
    latest = {key: value for key, value in record.items() if key != "previous"}
    return [latest, *reversed(earlier if isinstance(earlier, list) else [])]


def job_of(submission: dict) -> str | None:
    job = submission.get("array_job_id") or submission.get("ray_job_id")
    return str(job) if job else None


def submitted_tasks(submission: dict) -> list[int]:
    tasks = submission.get("tasks")
    if isinstance(tasks, list):
        return [int(t) for t in tasks]
    return list(range(int(submission.get("total_shards") or 0)))


def latest_submission(record: dict, service: str | None = None) -> dict | None:
    """The newest submission that queued cells of sweep model `service` (None: the newest of all)."""
    for submission in submissions(record):
        if service is None or service in Layout.of(submission, "").models(submitted_tasks(submission)):
            return submission
    return None


def current_submissions(record: dict) -> list[dict]:
    """The submissions `status` shows, oldest first: the latest alone outside a sweep; in a sweep,
    each that is the newest to have queued some model's cells (one per checkpoint of a watch)."""
    every = submissions(record)
    if not every[0].get("sweep"):
        return every[:1]
    current: list[dict] = []
    covered: set[str] = set()
    for submission in every:
        models = set(Layout.of(submission, "").models(submitted_tasks(submission))) if submission.get("sweep") else set()
        if submission is every[0] or models - covered:
            current.append(submission)
        covered |= models
    return current[::-1]


def live_tasks(job_ids: list[str], timeout: float = 30.0) -> int | None:
    """How many tasks of these jobs SLURM still holds (pending, running, completing): 0 once they
    all ended (or slurmctld forgot them); None when squeue cannot tell (not here, no answer)."""
    if not job_ids or shutil.which("squeue") is None:
        return None
    # a list of ids (even of one, with a repeat) makes squeue skip ids it no longer knows instead of failing
    ids = ",".join([*job_ids, job_ids[0]])
    try:
        proc = subprocess.run(["squeue", "-h", "-r", "-j", ids, "-o", "%T"], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return len(proc.stdout.split()) if proc.returncode == 0 else None  # -r: one line per array task, pending ones too


def array_spec(ids: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] → '0-2,5,7-8': an --array list."""
    spans: list[list[int]] = []
    for i in sorted(set(ids)):
        if spans and spans[-1][1] == i - 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in spans)


def render_jobs(record: dict, run_dir: str) -> str:
    """The `slurm:` block of `shardeval status` for what slurm_job.json (in run_dir) recorded: its
    latest submission; in a sweep, every array that is the newest for some model, oldest first."""
    lines: list[str] = []
    forgotten: list[tuple[str, str]] = []  # (job, its models) slurmctld no longer knows, said in one line
    shown = current_submissions(record)
    for submission in shown:
        layout = Layout.of(submission, run_dir)
        for key, label in (("array_job_id", "array job"), ("ray_job_id", "Ray job"), ("merge_job_id", "merge job")):
            job = submission.get(key)
            if not job:
                continue
            tasks = job_tasks(str(job))
            if isinstance(tasks, str) and key == "array_job_id" and len(shown) > 1 and tasks.startswith("no longer known"):
                forgotten.append((str(job), ", ".join(layout.models(submitted_tasks(submission)))))
            elif isinstance(tasks, str):
                lines.append(f"slurm {label} {job}: {tasks}")
            elif key != "array_job_id":
                t = tasks[0] if tasks else None
                detail = f" ({t.reason})" if t and t.reason else ""
                lines.append(f"slurm {label} {job}: {t.state if t else ''}{detail}")
            else:
                lines += _array_lines(job, tasks, submission, layout)
    if forgotten:
        jobs = ", ".join(f"{job} ({models})" for job, models in forgotten)
        lines.insert(0, f"slurm array jobs {jobs}: ended; no longer known to slurmctld (the cells' directories tell how)")
    return "\n".join(lines)


def _array_lines(job: str, tasks: list[TaskState], record: dict, layout: Layout) -> list[str]:
    known = {t.task for t in tasks}
    submitted = record.get("tasks")
    for i in submitted if isinstance(submitted, list) else range(int(record.get("total_shards") or 0)):
        if str(i) not in known:  # cancelled while pending: slurmctld keeps no record of it
            tasks.append(TaskState(str(i), "UNKNOWN", "no record (cancelled before it started?)", "", "", ""))
    tasks.sort(key=_by_index)
    summary = ", ".join(f"{n} {state}" for state, n in sorted(Counter(t.state for t in tasks).items()))
    cells = {t.task: layout.label(int(t.task)) if t.task.isdigit() else "" for t in tasks}
    width = max(map(len, cells.values()), default=0) if layout.services else 0
    cell = (lambda text: f" {text:<{width}}") if width else (lambda text: "")
    lines = [
        f"slurm array job {job}: {summary}",
        f"  {'task':<6}{cell('cell')} {'state':<12} {'time':>10} {'restarts':>8}  {'node':<12} reason",
    ]
    for t in tasks:
        lines.append(f"  {t.task:<6}{cell(cells[t.task])} {t.state:<12} {t.run_time:>10} {t.restarts:>8}  {t.nodes:<12} {t.reason}")
    again = [int(t.task) for t in tasks if t.state in RESUBMIT and t.task.isdigit() and not layout.complete(int(t.task))]
    if again:
        names = "; ".join(f"task {i} = {layout.label(i)}" for i in again[:8]) + ("; …" if len(again) > 8 else "")
        lines.append(
            f"  {len(again)} task(s) ended without completing their {'cell' if layout.services else 'shard'} "
            f"({names}); resubmit them (they resume): {layout.resubmit(again)}"
        )
    return lines


def sweep_rerun_hint(run_dir: str, shards: list[int]) -> str | None:
    """For a sweep model's directory ROOT/<model>: `sbatch --array=<its cells> <script>`, when this
    plugin submitted the model (ROOT/slurm_job.json names it): the script of the newest submission
    that lists the model, unless a later submission has rewritten that script since."""
    root, model = os.path.split(os.path.normpath(run_dir))
    record = read_record(root)
    rewritten: set[str] = set()
    for submission in submissions(record) if record else []:
        layout = Layout.of(submission, root)
        if submission.get("array_job_id") and layout.services and model in layout.services and layout.script not in rewritten:
            first = layout.services.index(model) * layout.shards
            return f"`{layout.resubmit([first + k for k in shards])}`"
        rewritten.add(layout.script)
    return None


def _by_index(t: TaskState) -> tuple[int, int]:
    return (0, int(t.task)) if t.task.isdigit() else (1, 0)
