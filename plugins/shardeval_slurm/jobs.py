"""The SLURM side of `shardeval status ROOT`: each array task's state, from `scontrol show job`.

`scontrol -o show job <id>` lists every task of an array (one line each, pending tasks folded into
one line with a range such as `ArrayTaskId=4-15%4`) for as long as slurmctld remembers the job
(MinJobAge, 300 s by default, after it ends). Without slurmdbd there is no `sacct`, so past that
the status says the controller forgot the job; the shard directories still tell the whole story.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass

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
            return "no longer known to slurmctld (it forgets jobs MinJobAge after they end; `sacct -j " + job_id + "` where accounting runs)"
        return said or f"scontrol exit {proc.returncode}"
    tasks: list[TaskState] = []
    for f in map(parse_fields, proc.stdout.splitlines()):
        if not f.get("JobId"):
            continue
        reason, nodes, spec = f.get("Reason", "None"), f.get("NodeList", ""), f.get("ArrayTaskId")
        common = dict(
            state=f.get("JobState", "?"), reason="" if reason == "None" else reason, run_time=f.get("RunTime", ""),
            nodes="" if nodes == "(null)" else nodes, restarts=f.get("Restarts", "0"),
        )
        tasks += [TaskState(task=task, **common) for task in (expand_tasks(spec) if spec else ["-"])]
    return sorted(tasks, key=_by_index)


def render_jobs(record: dict) -> str:
    """The `slurm:` block of `shardeval status` for what slurm_job.json recorded."""
    lines = []
    for key, label in (("array_job_id", "array job"), ("ray_job_id", "Ray job"), ("merge_job_id", "merge job")):
        job = record.get(key)
        if not job:
            continue
        tasks = job_tasks(str(job))
        if isinstance(tasks, str):
            lines.append(f"slurm {label} {job}: {tasks}")
        elif key != "array_job_id":
            t = tasks[0] if tasks else None
            detail = f" ({t.reason})" if t and t.reason else ""
            lines.append(f"slurm {label} {job}: {t.state if t else ''}{detail}")
        else:
            known = {t.task for t in tasks}
            for i in range(int(record.get("total_shards") or 0)):
                if str(i) not in known:  # cancelled while pending: slurmctld keeps no record of it
                    tasks.append(TaskState(str(i), "UNKNOWN", "no record (cancelled before it started?)", "", "", ""))
            tasks.sort(key=_by_index)
            summary = ", ".join(f"{n} {state}" for state, n in sorted(Counter(t.state for t in tasks).items()))
            lines.append(f"slurm {label} {job}: {summary}")
            lines.append(f"  {'task':<6} {'state':<12} {'time':>10} {'restarts':>8}  {'node':<12} reason")
            for t in tasks:
                lines.append(f"  {t.task:<6} {t.state:<12} {t.run_time:>10} {t.restarts:>8}  {t.nodes:<12} {t.reason}")
    return "\n".join(lines)


def _by_index(t: TaskState) -> tuple[int, int]:
    return (0, int(t.task)) if t.task.isdigit() else (1, 0)
