"""The shard task: one `@ray.remote` call evaluates one shard inside a Ray worker.

`evaluate_shard` does in the worker exactly what `shardeval run … --shard I/N -o <root>/shard_<i>`
does in a process (the core's `run_cell`: the same shard run, the same files), so `shardeval merge` and `shardeval status` work
unchanged and a shard can be continued by either. Resume is the default, so when Ray retries a task
(its worker died, or the shard raised `ShardAttemptFailed`) the retry skips every answer the
failed attempt already wrote. `run_shard` is that function as a Ray remote function.

A Ray worker runs tasks in its main thread and has its own SIGTERM handler; the shard installs
asyncio signal handlers there (a stop signal drains the requests in flight), so the worker's
handlers and signal wake-up fd are put back after every shard: the worker outlives the task.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import tempfile
import threading
import time
from typing import TYPE_CHECKING, Any
from collections.abc import Callable, Iterator, Mapping, Sequence

import ray

from shardeval.api.orchestrator import Config, load_config, run_cell, shard_range
from shardeval.api.plugin import hookimpl, ShardError, UsageError
from shardeval.api.records import open_regular, read_manifest, ResultRecord, RESULTS_FILE

if TYPE_CHECKING:
    from shardeval.api.records import SweepPlan

log = logging.getLogger("shardeval")

# Test-only fault injection: "crash:N:MARKER" kills the worker process (SIGKILL) after the N-th
# record this attempt writes; "raise:N:MARKER" stops the shard there and raises ShardAttemptFailed.
# MARKER is a file created atomically when the fault arms, so exactly one attempt of the run
# faults and its retry runs clean.
FAULT_ENV = "SHARDEVAL_RAY_TEST_FAULT"


class ShardAttemptFailed(Exception):
    """This attempt did not finish its shard; Ray retries it (retry_exceptions) and it resumes."""


def evaluate_shard(
    bench: str | None,
    shard_idx: int,
    total_shards: int,
    *,
    config: Config | Mapping[str, Any] | str | os.PathLike[str] | None = None,
    overrides: Sequence[str] = (),
    model_url: str | None = None,
    model_id: str | None = None,
    api_key_env: str | None = None,
    repeats: int | None = None,
    max_problems: int | None = None,
    max_concurrent: int | None = None,
    output_dir: str | None = None,
    fresh: bool = False,
    sweep: SweepPlan | None = None,
) -> dict[str, Any]:
    """Evaluate shard `shard_idx` of `total_shards` into `<output_dir>/shard_<shard_idx>/`.

    The evaluation is either quick mode (`bench` + `model_url` + `model_id`, like `shardeval run
    --bench …`) or a config: a path to a YAML file (read on the worker's machine), a mapping shaped
    like that file, or a `Config` already loaded (then only `output_dir` may be added). `bench`,
    the quick options and `overrides` (`-O` strings) apply on top of a path or mapping.
    `output_dir` is the run's root (default: the config's output.dir); pass an absolute path on
    storage the driver sees, since a relative one resolves in the worker's working directory.
    `fresh` sets earlier results aside on every attempt, so a retry would start over too.
    `sweep`: the sweep this shard is a cell of (the orchestrator passes the model's run config and
    `<sweep root>/<model>` as output_dir), recorded in its manifest for `merge` and `status`.

    Returns a small summary: shard, total, out_dir, state, reason, per-benchmark counts
    (n_ok, n_error, n_expected), records_before (lines already on disk when this attempt started:
    > 0 on a resumed retry), node_ip, node_id, pid, elapsed_s.
    """
    shard_range(0, shard_idx, total_shards)  # one-line UsageError for a bad idx/total
    quick = {
        "bench": bench,
        "model_url": model_url,
        "model_id": model_id,
        "api_key_env": api_key_env,
        "repeats": repeats,
        "max_problems": max_problems,
        "max_concurrent": max_concurrent,
    }
    cfg = _resolve_config(config, list(overrides), quick, output_dir)
    root = output_dir if output_dir is not None else cfg.output.dir
    out_dir = os.path.abspath(os.path.join(root, f"shard_{shard_idx}"))
    in_ray = ray.is_initialized()
    node_ip = ray.util.get_node_ip_address() if in_ray else "127.0.0.1"
    node_id = ray.get_runtime_context().get_node_id() if in_ray else None
    task_id = ray.get_runtime_context().get_task_id() if in_ray else None
    source = f"ray task {task_id[:16]} on {node_ip}" if task_id else f"evaluate_shard({shard_idx}, {total_shards})"
    started = time.time()
    before = _records_on_disk(out_dir, [b.name for b in cfg.benchmarks])
    fault = _Fault.from_env()
    with _signals_preserved():  # the cell writes its own logs/shard.log
        try:
            code = run_cell(
                cfg,
                shard_idx,
                total_shards,
                out_dir,
                fresh=fresh,
                sweep=sweep,
                source=source,
                listeners=[fault] if fault else [],
                on_start=fault.keep_stop if fault else None,
            )
        except UsageError:
            raise  # e.g. a changed config: retrying cannot help, and Ray does not retry it
        except Exception as exc:  # a ShardError says what failed; anything else is named by its type too
            why = exc if isinstance(exc, ShardError) else f"{type(exc).__name__}: {exc}"
            raise ShardAttemptFailed(f"shard {shard_idx}/{total_shards}: {why}") from exc
    manifest = read_manifest(out_dir)
    if code != 0 or manifest is None or manifest.state != "complete":
        why = (manifest.reason if manifest else None) or f"exit {code}"
        what = "finished with errors" if manifest is not None and manifest.state == "finished_with_errors" else "stopped before its end"
        raise ShardAttemptFailed(  # Ray sees a failed task; a retry asks the pairs without an ok answer again
            f"shard {shard_idx}/{total_shards} {what} ({why}); a retry resumes it from {out_dir}"
        )
    counts = {  # the shard's problems are its manifest's range (shuffled or not, as many)
        b.name: {"n_ok": b.n_ok, "n_error": b.n_error, "n_expected": (b.range[1] - b.range[0]) * b.repeats} for b in manifest.benchmarks
    }
    return {
        **({"service": sweep.service} if sweep else {}),
        "shard": shard_idx,
        "total": total_shards,
        "out_dir": out_dir,
        "state": manifest.state,
        "reason": manifest.reason,
        "benchmarks": counts,
        "records_before": before,
        "node_ip": node_ip,
        "node_id": node_id,
        "pid": os.getpid(),
        "elapsed_s": round(time.time() - started, 3),
    }


# Shard tasks are I/O-bound HTTP clients: one CPU each by default; the orchestrator sets
# num_cpus/num_gpus/resources/retries from the config with .options(...).
# Ray's overloads type retry_exceptions as bool; its documentation and runtime also take a list of exception types.
run_shard = ray.remote(num_cpus=1, max_retries=3, retry_exceptions=[ShardAttemptFailed])(evaluate_shard)  # type: ignore[call-overload]


def _resolve_config(
    config: Config | Mapping[str, Any] | str | os.PathLike[str] | None,
    overrides: list[str],
    quick: dict[str, Any],
    output_dir: str | None,
) -> Config:
    if isinstance(config, Config):
        given = [f"{k}=" for k, v in quick.items() if v is not None] + (["overrides"] if overrides else [])
        if given:
            raise UsageError(
                f"run_shard: a loaded Config cannot take {', '.join(given)} as well; apply them when loading it, "
                "or pass the config's path or mapping instead"
            )
        return config
    if output_dir is not None:
        quick["output_dir"] = output_dir
    if config is None or isinstance(config, (str, os.PathLike)):
        return load_config(os.fspath(config) if config is not None else None, overrides, quick)
    if isinstance(config, Mapping):
        import yaml

        with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="shardeval-config-", delete=False) as f:
            yaml.safe_dump(dict(config), f, sort_keys=False)
        try:
            return load_config(f.name, overrides, quick)
        except UsageError as exc:
            raise UsageError(str(exc).replace(f.name, "config mapping")) from None
        finally:
            os.unlink(f.name)
    raise UsageError(f"run_shard: config must be a path, a mapping or a Config, not {type(config).__name__}")


def _records_on_disk(out_dir: str, benchmarks: list[str]) -> int:
    """Result lines already written (a retry that resumes sees its earlier attempt's here)."""
    total = 0
    for name in benchmarks:
        with contextlib.suppress(FileNotFoundError), open_regular(os.path.join(out_dir, name, RESULTS_FILE)) as f:
            total += sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    return total


@contextlib.contextmanager
def _signals_preserved() -> Iterator[None]:
    """Give the worker back its SIGINT/SIGTERM handlers and wake-up fd after the shard's asyncio ones."""
    if threading.current_thread() is not threading.main_thread():
        yield  # the shard installs no handler off the main thread
        return
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    wakeup_fd = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(wakeup_fd)
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)
        signal.set_wakeup_fd(wakeup_fd)


class _Fault:
    """The test-only fault of FAULT_ENV: a `record_written` listener of one attempt's cell
    (run_cell's `listeners`). `raise` stops the shard as Ctrl-C does (run_cell's stop: the shard
    drains, marks itself interrupted and exits 130), so the attempt fails."""

    def __init__(self, mode: str, after: int) -> None:
        self.mode, self.after = mode, after
        self.count = 0
        self.fired = False
        self.stop: Callable[[], None] | None = None

    def keep_stop(self, stop: Callable[[], None]) -> None:
        self.stop = stop

    @classmethod
    def from_env(cls) -> _Fault | None:
        spec = os.environ.get(FAULT_ENV)
        if not spec:
            return None
        mode, after, marker = spec.split(":", 2)
        if mode not in ("crash", "raise"):
            raise UsageError(f"{FAULT_ENV}={spec!r}: mode must be crash or raise")
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return None  # an earlier attempt faulted already: this one runs clean
        log.warning("%s: this attempt will %s after %s records (test fault)", FAULT_ENV, mode, after)
        return cls(mode, int(after))

    @hookimpl
    def record_written(self, record: ResultRecord, out_dir: str) -> None:
        self.count += 1
        if self.fired or self.count < self.after:
            return
        self.fired = True
        if self.mode == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        elif self.stop is not None:
            self.stop()
