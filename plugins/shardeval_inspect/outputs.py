"""One Inspect log for a merged run: merged/inspect/<task>.eval, every shard's samples in one evaluation.

Inspect itself makes the log's header: the task is evaluated with `run_samples=False` (nothing is
asked), which writes the eval spec and plan `inspect eval` would write for the whole task with the
run's epochs and limits. The samples are the ones the shards saw end (each record's trajectory
keeps its EvalSample), the standing record's for each (sample, epoch); Inspect's own metrics are
then recomputed over all of them (`recompute_metrics`: the task's scorers' metrics and epoch
reducers). A run with cells missing or in error gets status `error` saying so, never `success`.
`shardeval export --to inspect` writes the same log for an inspect benchmark (shardeval_inspect.export):
`task_log`, `set_status` and `write_log` are shared by both.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from typing import TYPE_CHECKING, Any

from shardeval.api.metric import OK
from shardeval.api.plugin import UsageError
from shardeval.api.records import TRAJECTORIES_FILE

if TYPE_CHECKING:
    from inspect_ai.log import EvalLog
    from inspect_ai.model import ModelUsage

    from shardeval.api.pages import BenchmarkMerge
    from shardeval.api.records import MergeResult
    from shardeval_inspect.benchmark import InspectBenchmark

from shardeval_inspect.task import first_line

OUT = "inspect"


class NotWritten(Exception):
    """Why an Inspect task's log cannot be made from this run here (its merged results stand)."""


def inspect_entries(result: MergeResult) -> dict[str, dict[str, Any]]:
    """The run's inspect benchmark entries (as its config wrote them), by benchmark id."""
    manifest = result.run.shards[0].manifest
    return {
        b["id"]: b
        for b in manifest.config.get("benchmarks", [])
        if isinstance(b, dict) and b.get("name") == "inspect" and isinstance(b.get("id"), str)
    }  # expand() gave each its id


def served_model(result: MergeResult) -> str:
    """The model id the run's endpoint reported (the log's `model`)."""
    return next((s.model for s in result.run.shards[0].manifest.served.values()), "model")


def model_base_url(result: MergeResult, entry: dict[str, Any]) -> str | None:
    """The base URL the entry's service was asked at, as the run's manifest keeps it (secrets
    redacted there): the log's `model_base_url`. None for a server the shards started themselves
    (its address was each node's own), never the header's placeholder."""
    services = result.run.shards[0].manifest.config.get("services") or {}
    name = (entry.get("solver") or {}).get("service") or next(iter(services), None)
    url = (services.get(name) or {}).get("url") if name is not None else None
    return url if isinstance(url, str) else None


def write_inspect_logs(result: MergeResult, out_dir: str) -> list[str]:
    """Write the log of every inspect entry of the run; lines for what was not written."""
    entries = inspect_entries(result)
    if not entries:
        return []
    served = served_model(result)
    merged = {b.manifest.name: b for b in result.benchmarks}
    notes = []
    for bid, entry in entries.items():
        if bid not in merged:
            continue
        path = os.path.join(out_dir, OUT, f"{bid}.eval")
        try:
            write_log(task_log(entry, merged[bid], served, out_dir, model_base_url(result, entry)), path)
            continue
        except NotWritten as exc:
            note = f"Inspect log not written for {bid}: {exc}"
        except UsageError as exc:  # the task no longer loads here (moved, not installed): the merge itself stands
            note = f"Inspect log not written for {bid}: {exc}"
        except Exception as exc:  # Inspect refusing the header or the samples: its own files are optional
            note = f"Inspect log not written for {bid}: Inspect failed: {type(exc).__name__}: {first_line(str(exc))}"
        with contextlib.suppress(FileNotFoundError):  # an earlier merge's log would read as this one's
            os.remove(path)
        notes.append(note)
    return notes


def task_log(entry: dict[str, Any], merge: BenchmarkMerge, served: str, merged_dir: str, base_url: str | None = None) -> EvalLog:
    """The Inspect log of one inspect benchmark's merge (a BenchmarkMerge, written in `merged_dir`):
    Inspect's header for the task, the samples the shards kept, metrics and status over them.
    NotWritten says why not."""
    from inspect_ai.log import EvalSample

    from shardeval_inspect.benchmark import InspectBenchmark

    bid = merge.manifest.name
    bench = InspectBenchmark(entry.get("params") or {})
    if bench.fingerprint() != merge.manifest.dataset_fingerprint:
        raise NotWritten("the task, its arguments, its samples or inspect_ai changed since the run; merge where the task is as it was")
    path = os.path.join(merged_dir, bid, TRAJECTORIES_FILE)
    samples = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                saved = json.loads(line).get("request", {}).get("inspect", {}).get("sample")
                if saved is not None:
                    samples.append(EvalSample.model_validate(saved))
    if not samples:
        raise NotWritten("its trajectories hold no Inspect samples (output.trajectories: false?)")
    order = {str(s.id): i for i, s in enumerate(bench.loaded.samples)}
    samples.sort(key=lambda s: (s.epoch, order.get(str(s.id), len(order))))
    log = _header(bench, int(entry.get("repeats") or 1), served)
    log.eval.model_base_url = base_url  # the run's, not the header's placeholder
    log.samples = samples
    _finish(log, merge)
    return log


def _header(bench: InspectBenchmark, epochs: int, served: str) -> EvalLog:
    """The log Inspect starts for the whole task (spec, plan, dataset), with no sample run (so the
    model, at an address nothing listens on, is never asked)."""
    from inspect_ai import eval as inspect_eval

    from shardeval_inspect.provider import inspect_model
    from shardeval_inspect.solver import eval_options
    from shardeval_inspect.task import quiet_inspect

    quiet_inspect()
    model = inspect_model(served, "http://127.0.0.1:9/v1", "")
    with tempfile.TemporaryDirectory(prefix="shardeval-inspect-") as logs, contextlib.redirect_stdout(io.StringIO()):
        return inspect_eval(
            bench.loaded.task, model=model, run_samples=False, log_dir=logs, **eval_options(bench.loaded.task, bench.params, epochs)
        )[0]


def _finish(log: EvalLog, merge: BenchmarkMerge) -> None:
    """Status, metrics and stats over the merged samples, as Inspect would have them for one run."""
    from inspect_ai.log import recompute_metrics

    status = list(merge.table.status)
    samples = log.samples or []  # task_log set them
    scored = [s for s in samples if s.scores]
    if scored:
        recompute_metrics(log)
    set_status(log, sum(s != OK for s in status), len(status))
    starts = [s.started_at for s in samples if s.started_at]
    ends = [s.completed_at for s in samples if s.completed_at]
    if starts:
        log.stats.started_at = min(starts)
    if ends:
        log.stats.completed_at = max(ends)
    usage: dict[str, ModelUsage] = {}
    for s in samples:
        for model, u in (s.model_usage or {}).items():
            usage[model] = usage[model] + u if model in usage else u
    log.stats.model_usage = usage


def set_status(log: EvalLog, not_ok: int, cells: int) -> None:
    """`success` only when every (sample, epoch) cell has an ok answer; else `error`, saying how many do not."""
    from inspect_ai._util.error import EvalError

    if not not_ok:
        log.status, log.error = "success", None
        return
    log.status = "error"
    message = (
        f"shardeval merge: {not_ok} of {cells} (sample, epoch) cells have no ok answer (missing or "
        "in error); the metrics cover the samples that ended. Rerun the shards, then merge again."
    )
    log.error = EvalError(message=message, traceback=message, traceback_ansi=message)


def write_log(log: EvalLog, path: str) -> None:
    """Write `log` to `path` as a .eval file, replacing what is there in one step: it is written
    under a temporary name beside it, then renamed, so a reader never sees half a log and a
    re-export never leaves a second one."""
    from inspect_ai.log import write_eval_log

    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    temp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.tmp")  # made by Inspect, with the umask's mode
    try:
        write_eval_log(log, temp, format="eval")
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temp)
        raise
