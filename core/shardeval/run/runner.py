"""Running one shard: plan its problems, stream requests through a bounded window, append records.

Memory stays flat in the dataset size: problems are generated lazily, at most `window` tasks
exist at once, and which (problem, repeat) pairs are done is a bytearray, not a set of tuples.
Every finished answer is written and flushed before the next is awaited, so a crash loses at most
the requests in flight; a rerun resumes from what is on disk.
"""

from __future__ import annotations

import asyncio
import functools
import io
import logging
import logging.handlers
import os
import signal
import threading
import time
from array import array
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, BinaryIO, TypeVar
from collections.abc import Awaitable, Callable, Iterator

import msgspec

from shardeval import __version__, plugins
from shardeval.run.adaptive import AdaptiveSlots, make_slots
from shardeval.benchmark import Benchmark, Problem, Score
from shardeval.run.response_cache import ResponseCache, check_usable
from shardeval.run.client import Client, Completion
from shardeval.config import BenchmarkConfig, Config
from shardeval.config.loading import config_for_manifest
from shardeval.errors import EXIT_WITH_ERRORS, ShardError, UsageError, os_error
from shardeval.identity import config_hash, judge_identity, judged_fingerprint, prompt_fingerprint, scorer_fingerprint
from shardeval.benchmark.reasoning import DEFAULT_TAGS, ReplySplit, reply_outcome, split_reply
from shardeval.benchmark.rubric import Rubric
from shardeval.run.judging import Judge, Verdict, apply_verdict, metrics_when_judged, rubric_for
from shardeval.store.liveness import ShardLease
from shardeval.store.prepared import Preparation, planned_otherwise
from shardeval.run.process import ServerProcess, describe_exit
from shardeval.run.progress import Progress
from shardeval.store.records import (
    LOGS_DIR,
    MANIFEST_FILE,
    RESULTS_FILE,
    TRAJECTORIES_FILE,
    BenchmarkManifest,
    Manifest,
    ReadReport,
    ResultRecord,
    SweepPlan,
    TrajectoryRecord,
    encode_line,
    pretty_json,
    run_id,
    score_fault,
    seal_torn_tail,
    unscorable,
    write_manifest,
)
from shardeval.run.provenance import collect_provenance, read_served
from shardeval.store.regular import append_line, open_append, open_append_fd
from shardeval.redact import RedactingFilter
from shardeval.run.reachability import Reachability
from shardeval.config.sampling import registered_name
from shardeval.plugins.register import Entry
from shardeval.run.resume import make_output_dir, prepare_output_dir, refuse, served_mismatch
from shardeval.store.seeds import request_seed
from shardeval.run.service import ServiceContext
from shardeval.store.shards import ShardSpec, shard_indices
from shardeval.numbers import fmt
from shardeval.store.standing import ERROR, OK, SUPERSEDE, TAKE, Cells, Membership, decide, nothing_to_ask, own_records, read_cells
from shardeval.run.solver import Attempt, ServiceHandle, SolvePairs, Solver, as_solver, generation_params
from shardeval.run.thumbnails import ThumbnailLog
from shardeval.run.unavailable import append_records, gone_completion
from shardeval.benchmark.images import DEFAULT_MAX_IMAGE_BYTES, STORE as IMAGE_STORE, image_limit

log = logging.getLogger("shardeval")
# SIGHUP: the launcher that started the shard, or the terminal, has gone (see ShardRunner._on_signal)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
T = TypeVar("T")


@dataclass
class BenchmarkPlan:
    """One benchmark as this shard sees it: which problems, how often, where records go."""

    config: BenchmarkConfig
    benchmark: Benchmark
    n_problems: int
    indices: range | list[int]
    fingerprint: str
    prompt_fingerprint: str | None = None
    scorer_fingerprint: str | None = None
    run: str | None = None  # run_id(config hash): every record carries it, so a copied-in file is told apart
    rubric: Rubric | None = None  # how its judge is asked and read, when a judge scores it (shardeval.benchmark.rubric)
    # the tags its model writes its thinking between (its service's `reasoning_tags`; None: never split inline)
    reasoning_tags: tuple[str, str] | None = DEFAULT_TAGS

    @property
    def name(self) -> str:
        """Its name in records and its folder: the config's `id`, else the benchmark's own name."""
        return self.config.id if self.config.id is not None else self.benchmark.name

    def default_metrics(self) -> tuple[str, ...]:
        """The benchmark's own metrics, or those of its judging (judging.metrics_when_judged)."""
        return tuple(self.benchmark.metrics) if self.rubric is None else metrics_when_judged(self.benchmark)

    def manifest(self) -> BenchmarkManifest:
        lo, hi = (
            (self.indices.start, self.indices.stop)
            if isinstance(self.indices, range)
            else ((min(self.indices), max(self.indices) + 1) if self.indices else (0, 0))
        )
        return BenchmarkManifest(
            name=self.name,
            range=(lo, hi),
            repeats=self.config.repeats,
            n_problems=self.n_problems,
            dataset_fingerprint=self.fingerprint,
            metrics=list(self.config.metrics if self.config.metrics is not None else self.default_metrics()),
            prompt_fingerprint=self.prompt_fingerprint,
            scorer_fingerprint=self.scorer_fingerprint,
            service=self.config.solver.service,
        )


@dataclass
class Tally:
    """Per-benchmark work of this shard: status per (problem, repeat) as it goes (what to ask, what
    a resume skips), pooled latencies and scores. The verdict is not taken from it but from the
    records as they read back (shardeval.store.standing.read_cells)."""

    n_problems: int
    repeats: int
    status: bytearray = field(init=False)
    latencies: array = field(default_factory=lambda: array("f"))
    score_sum: float = 0.0
    n_scored: int = 0
    errors: Counter[str] = field(default_factory=Counter)  # this session's error records by kind

    def __post_init__(self) -> None:
        self.status = bytearray(self.n_problems * self.repeats)

    def add(self, record: ResultRecord, fresh: bool = True) -> None:
        cell = record.problem_idx * self.repeats + record.repeat
        self.status[cell] = OK if record.status == "ok" else ERROR
        if record.status == "ok":
            if record.score is not None:
                self.score_sum += record.score
                self.n_scored += 1
            if fresh and record.latency_s is not None:
                self.latencies.append(record.latency_s)
        elif fresh:
            self.errors[record.error_kind or "unknown"] += 1


def plan_benchmarks(config: Config, shard: ShardSpec) -> list[BenchmarkPlan]:
    """Build every benchmark of the config with its shard range and fingerprints; refuse two that
    would write the same <out>/<name>/ (one line naming both and how to tell them apart)."""
    registry = plugins.registry()
    plans: list[BenchmarkPlan] = []
    run = run_id(config_hash(config))
    for i, bc in enumerate(config.benchmarks):
        benchmark, entry, rubric = build_benchmark(config, i, registry)
        n = benchmark.size() if bc.max_problems is None else min(bc.max_problems, benchmark.size())
        indices = shard_indices(n, shard.idx, shard.total, config.shuffle_seed)
        plan = BenchmarkPlan(bc, benchmark, n, indices, benchmark.fingerprint(), run=run)
        service = config.service_of(bc.solver)
        if service is not None:
            plan.reasoning_tags = service.reasoning_tags
        clash = next((j for j, other in enumerate(plans) if other.name == plan.name), None)
        if clash is not None:
            raise UsageError(
                f"benchmarks[{clash}] ({plans[clash].config.name}) and benchmarks[{i}] ({bc.name}) would both write "
                f"<out>/{plan.name}/; give one a distinct id, e.g. `id: {plan.name}_2` in benchmarks[{i}]"
            )
        plan.prompt_fingerprint = prompt_fingerprint(benchmark, n)
        plan.scorer_fingerprint = scorer_fingerprint(benchmark, n, plugins.plugin_version(entry.plugin))
        if bc.judge is not None and rubric is not None:  # a judge scores it: its rubric is the scorer
            plan.rubric = rubric
            plan.scorer_fingerprint = judged_fingerprint(
                plan.scorer_fingerprint, plan.rubric, judge_identity(bc.judge, config.services.get(bc.judge.service))
            )
        plans.append(plan)
    return plans


def build_benchmark(config: Config, i: int, registry) -> tuple[Benchmark, Entry, Rubric | None]:
    """benchmarks[i] built and checked as far as it can be without asking anything: its data
    (the factory reads it), its own pre-flight (`Benchmark.preflight`), and for a judged one the
    rubric in effect against its mode. What a shard does first, and what `run` does once for every
    benchmark before it starts shards on this machine (shardeval.launch.preflight)."""
    bc = config.benchmarks[i]
    benchmark, entry = make_benchmark(bc, f"benchmarks[{i}].name", registry)
    benchmark.preflight()
    if benchmark.has_images:
        check_images(config, i, benchmark)
    if benchmark.size() == 0:  # it would run nothing and merge as COMPLETE, with no number in it
        params = f" with params {msgspec.json.encode(bc.params).decode()}" if bc.params else ""
        raise UsageError(
            f"benchmarks[{i}] ({bc.id or bc.name}): no problems to ask (its data{params} holds none); "
            "give it data that has problems, or leave it out"
        )
    if bc.judge is None and benchmark.judge_rubric is not None:
        raise UsageError(
            f"benchmarks[{i}] ({bc.name}) is scored by a judge (it has a judge section); name the judge service, "
            f"e.g. `judge: {{service: judge}}` in benchmarks[{i}], with `judge:` under services:"
        )
    rubric = rubric_for(bc.judge, benchmark) if bc.judge is not None else None
    return benchmark, entry, rubric


def check_images(config: Config, i: int, benchmark: Benchmark) -> None:
    """A benchmark with images needs a chat service and a solver that sends them, and its images
    must fit what that service takes: each refused in one line before any request."""
    bc = config.benchmarks[i]
    where = f"benchmarks[{i}] ({bc.id or bc.name})"
    service = config.service_of(bc.solver)
    if service is not None and service.protocol != "chat_completions":
        raise UsageError(
            f"{where} has images, which only chat requests carry, but service {bc.solver.service!r} uses protocol "
            f"{service.protocol}; set protocol: chat_completions on it"
        )
    if bc.solver.type == "loglikelihood":
        raise UsageError(
            f"{where} has images, but solver.type loglikelihood scores text only; use the simple solver (leave solver.type out)"
        )
    limit = image_limit(service.limit_mm_per_prompt) if service is not None else None
    benchmark.check_images(limit, service.max_image_bytes if service is not None else DEFAULT_MAX_IMAGE_BYTES, where)


def make_benchmark(bc: BenchmarkConfig, where: str, registry) -> tuple[Benchmark, Entry]:
    """A registered name; a data file path (read with the built-in `jsonl` benchmark); or a YAML
    mapping path (a bring-your-own benchmark, read with the built-in `custom` benchmark).
    Returns the benchmark and the registration that built it."""
    name, params = registered_name(bc.name, dict(bc.params), registry)
    entry = registry.get("benchmarks", name, where)
    return entry.factory(params), entry


class _Refused(Exception):
    """A resume refused (its endpoint serves other weights): the error to raise, and the shard's
    directory is left as it was."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class ShardRun:
    """Everything one shard does, from its output directory to its final manifest."""

    def __init__(
        self,
        config: Config,
        shard: ShardSpec,
        out_dir: str,
        fresh: bool = False,
        sweep: SweepPlan | None = None,
        unavailable: str | None = None,
        preparation: Preparation | None = None,
    ) -> None:
        self.config = config
        self.preparation = preparation  # the run was prepared (docs/offline.md): this shard plans as it did
        # why the model cannot be served at all (a deleted checkpoint, shardeval.run.unavailable):
        # then no service is started and every pair to ask is recorded as an error naming this
        self.unavailable = unavailable
        self.sweep = sweep  # the sweep this shard is a cell of, for its manifest
        self.shard = shard
        self.out_dir = out_dir
        self.fresh = fresh
        self.stopping: str | None = None
        self.service_failure: str | None = None  # set when a managed server died, or the endpoint is unreachable
        self.write_failure: str | None = None  # set when a record could not be written (disk full, …)
        self._inflight: set[asyncio.Task] = set()
        self._reachability: dict[str, Reachability] = {}  # per service: has its endpoint ever answered?
        self.hooks = plugins.hooks()
        self.record_hook = bool(self.hooks.record_written.get_hookimpls())
        self._lease: ShardLease | None = None  # the one-writer lock and heartbeat of out_dir
        self._stop_signal: asyncio.Future[None] | None = None  # done at the first stop signal
        self._drain_timer: asyncio.TimerHandle | None = None  # drain_timeout_s after that signal
        self._window: asyncio.Semaphore | None = None  # the benchmark being dispatched: its request places
        self.cache: ResponseCache | None = None  # the response cache, when the config names one (opened in `_run`)
        # holds the lines until logs/shard.log can open (in `_run`), then that file
        self._log: logging.Handler = logging.handlers.MemoryHandler(capacity=10_000, flushLevel=logging.CRITICAL + 1)

    async def run(self) -> int:
        """Run the shard (`_run`); whatever happens, then close its log and give up the directory.

        Stop signals are handled from the first moment; log lines are held in memory until
        logs/shard.log can be opened (after --fresh has moved an earlier run's logs aside).
        """
        log.addHandler(self._log)
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            with suppress(NotImplementedError, RuntimeError):  # not the main thread (e.g. a Ray worker)
                loop.add_signal_handler(sig, self._on_signal, sig)
                self._stop_signal = self._stop_signal or loop.create_future()
        try:
            return await self._run()
        except ShardError as exc:
            log.error("shard %d/%d failed: %s", self.shard.idx, self.shard.total, exc)
            raise
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                with suppress(NotImplementedError, RuntimeError):
                    loop.remove_signal_handler(sig)
            if self._drain_timer is not None:
                self._drain_timer.cancel()
            if self.cache is not None:
                log.info("%s", self.cache.summary())
                self.cache.close()
            log.removeHandler(self._log)
            self._log.close()
            if self._lease is not None:
                self._lease.release()

    async def _run(self) -> int:
        """The shard's phases, in order: plan, prepare the output (or find nothing left to ask),
        answer every benchmark, read back what was written, settle the manifest, exit."""
        plans = plan_benchmarks(self.config, self.shard)
        if (prepared := self.preparation) is not None:  # a prepared run: planned here as it was there
            for plan in plans:
                if why := planned_otherwise(prepared, plan.name, plan.n_problems, plan.fingerprint, plan.prompt_fingerprint):
                    raise UsageError(why)
            log.info("prepared run: reading %d prepared file(s) from %s; offline", len(prepared.files), prepared.cache_dir)
        manifest = self._new_manifest(plans)
        resumed, finished = await self._prepare_output(manifest)
        if finished:
            return 0
        self.hooks.shard_started(manifest=manifest, out_dir=self.out_dir)
        tallies: list[Tally] = []
        refused = False
        try:
            try:
                if self.unavailable is not None:
                    cells = self._record_unavailable(plans, manifest, tallies, self.unavailable)
                else:
                    cells = await self._answer(plans, manifest, resumed, tallies)
            except _Refused as exc:
                refused = True
                raise exc.error from None
        except BaseException as exc:
            manifest.state = "failed"
            manifest.reason = str(exc) if isinstance(exc, (ShardError, UsageError)) else f"{type(exc).__name__}: {exc}"
            if isinstance(exc, OSError):  # the machine, not the user: an infrastructure failure (exit 1)
                raise ShardError(manifest.reason) from None
            raise
        else:
            self._settle(manifest, plans, tallies, cells)
        finally:
            manifest.finished_at = time.time()
            if refused and resumed is not None:
                write_final_manifest(self.out_dir, resumed)  # a refused resume leaves the directory as it was
            else:
                write_final_manifest(self.out_dir, manifest)
                self.hooks.shard_finished(manifest=manifest, out_dir=self.out_dir)
        for plan, tally, bm in zip(plans, tallies, manifest.benchmarks):
            print_summary(plan, tally, bm, self.shard, manifest.finished_at - manifest.started_at)
        return self._exit_code(manifest)

    def _new_manifest(self, plans: list[BenchmarkPlan]) -> Manifest:
        return Manifest(
            version=__version__,
            shard_idx=self.shard.idx,
            total_shards=self.shard.total,
            shard_source=self.shard.source,
            config_hash=config_hash(self.config),
            benchmarks=[p.manifest() for p in plans],
            started_at=time.time(),
            permutation_seed=self.config.shuffle_seed,
            config=config_for_manifest(self.config),
            provenance=collect_provenance(),
            sweep=self.sweep,
        )

    async def _prepare_output(self, manifest: Manifest) -> tuple[Manifest | None, bool]:
        """(the manifest of the run resumed or None, whether nothing is left to ask); the cache opened
        and logs/shard.log started. What fails here is the output directory: one line, exit 2 or 1."""
        try:
            # become its one writer (a second is refused, naming the holder) before anything in it is read
            make_output_dir(self.out_dir)
            self._lease = ShardLease(self.out_dir)
            self._lease.acquire()
            if self.fresh and self.config.cache is not None:  # what it can check before --fresh moves anything aside
                check_usable(self.config.cache.dir)
            resumed = prepare_output_dir(self.out_dir, manifest, self.fresh)
            if resumed is not None and nothing_to_ask(self.out_dir, manifest):
                # A finished shard run again (a sweep relaunched for a new model): no server, no request,
                # and a complete manifest left as it is; one that stopped after its last record is closed.
                log.info("every pair of this shard already has an ok record: nothing to ask, no service started")
                if resumed.state != "complete":
                    resumed.state, resumed.reason, resumed.finished_at = "complete", None, time.time()
                    resumed.benchmarks = manifest.benchmarks
                    write_manifest(self.out_dir, resumed)
                return resumed, True
            if self.config.cache is not None:  # a directory that cannot be used is one line, exit 2, before anything is asked
                self.cache = await self._open_cache(self.config.cache.dir)
            if resumed is not None:
                manifest.served = dict(resumed.served)  # kept until the endpoints say what they serve now
            self._open_shard_log()
            write_manifest(self.out_dir, manifest)
        except OSError as exc:
            raise os_error(exc, "write", alternative="give another output directory with -o") from None
        return resumed, False

    def _open_shard_log(self) -> None:
        """logs/shard.log opens now, after --fresh moved an earlier run's logs aside, and gets the
        lines held so far."""
        os.makedirs(os.path.join(self.out_dir, LOGS_DIR), exist_ok=True)
        handler = QuietFileHandler(os.path.join(self.out_dir, LOGS_DIR, "shard.log"))
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        handler.addFilter(RedactingFilter())  # no URL credentials in shard.log
        early, self._log = self._log, handler
        early.setTarget(handler)  # type: ignore[attr-defined]
        early.flush()
        log.removeHandler(early)
        log.addHandler(handler)

    async def _answer(self, plans: list[BenchmarkPlan], manifest: Manifest, resumed: Manifest | None, tallies: list[Tally]) -> list[Cells]:
        """Start the services, answer each benchmark in turn (appending its tally), then read back
        what was written: what the shard says is what it wrote, read by the merge's reader, not what
        it counted. Raises ShardError when a pair is left without a record (not when stopping)."""
        async with AsyncExitStack() as stack:
            handles = await self._start_services(plans, stack)
            served = {name: handle.served for name, handle in handles.items() if handle.served is not None}
            reason = served_mismatch(resumed, served) if resumed is not None else None
            if reason:
                raise _Refused(refuse(self.out_dir, reason))
            manifest.served.update(served)
            write_manifest(self.out_dir, manifest)
            for plan, bm in zip(plans, manifest.benchmarks):
                if self.stopping or self.service_failure or self.write_failure:
                    break
                judge = self._judge(plan, handles)
                tallies.append(
                    await self._run_benchmark(plan, handles[plan.config.solver.named_service()], Membership.of(manifest, bm), judge)
                )
            return self._read_back(plans, manifest, tallies)

    def _read_back(self, plans: list[BenchmarkPlan], manifest: Manifest, tallies: list[Tally]) -> list[Cells]:
        """The records of the benchmarks answered, as the merge's reader reads them, counted into the
        manifest; raises ShardError when the service or a write failed, or a pair has no record."""
        cells = [
            read_cells(os.path.join(self.out_dir, bm.name, RESULTS_FILE), Membership.of(manifest, bm))
            for bm in manifest.benchmarks[: len(tallies)]
        ]
        for bm, read in zip(manifest.benchmarks, cells):
            bm.n_ok, bm.n_error, bm.error_kinds = read.n_ok, read.n_error, read.error_kinds
        failure = self.service_failure or self.write_failure or (None if self.stopping else missing_pairs(plans, cells))
        if failure:
            raise ShardError(failure)
        return cells

    def _record_unavailable(self, plans: list[BenchmarkPlan], manifest: Manifest, tallies: list[Tally], reason: str) -> list[Cells]:
        """The model cannot be served (`unavailable`): no service started, nothing asked; every pair
        without an ok record gets a `checkpoint_gone` error naming `reason` (shardeval.run.unavailable)."""
        log.warning("%s; no service started, every pair of this shard is recorded as a `checkpoint_gone` error", reason)
        completion = gone_completion(reason)
        for plan, bm in zip(plans, manifest.benchmarks):
            bench_dir = os.path.join(self.out_dir, plan.name)
            tally = Tally(plan.n_problems, plan.config.repeats)
            os.makedirs(bench_dir, exist_ok=True)
            self._resume(
                os.path.join(bench_dir, RESULTS_FILE), os.path.join(bench_dir, TRAJECTORIES_FILE), tally, Membership.of(manifest, bm)
            )
            seeds = functools.partial(request_seed, self.config.seed, plan.name)
            records = (make_record(plan, p, r, seeds(p.id, r), completion, self.shard.idx) for p, r in pending_work(plan, tally))
            append_records(bench_dir, records, functools.partial(self._written, tally))
            tallies.append(tally)
        return self._read_back(plans, manifest, tallies)

    def _written(self, tally: Tally, record: ResultRecord) -> None:
        """A record written without a request (`_record_unavailable`): counted, and the
        `record_written` hook told, as `_keep` does for an answer. An error leaves its pair pending,
        so counting as `pending_work` goes is safe."""
        tally.add(record)
        if self.record_hook:
            self.hooks.record_written(record=record, out_dir=self.out_dir)

    def _settle(self, manifest: Manifest, plans: list[BenchmarkPlan], tallies: list[Tally], cells: list[Cells]) -> None:
        """The state of a shard that ran to its end (or was stopped): complete only when every pair
        has an ok record; every pair recorded but some in errors is finished_with_errors (issue 24)."""
        manifest.state = "interrupted" if self.stopping else "complete"
        manifest.reason = self.stopping
        if not self.stopping and (errors := sum((Counter(read.error_kinds) for read in cells), Counter())):
            pairs = sum(len(plan.indices) * plan.config.repeats for plan, _ in zip(plans, tallies))  # this shard's pairs
            manifest.state = "finished_with_errors"
            kinds = ", ".join(f"{k} {v}" for k, v in sorted(errors.items(), key=lambda kv: (-kv[1], kv[0])))
            counted = f"{sum(errors.values())} of {pairs} pairs end in errors ({kinds})"
            manifest.reason = (
                f"{self.unavailable}: {counted}" if self.unavailable else f"{counted}; rerun the shard to ask them again (it resumes)"
            )

    def _exit_code(self, manifest: Manifest) -> int:
        if self.stopping:
            return 128 + signal.Signals[self.stopping].value  # 143 SIGTERM, 130 SIGINT, 129 SIGHUP
        if manifest.state == "finished_with_errors":
            log.warning("shard %d/%d finished with errors: %s", self.shard.idx, self.shard.total, manifest.reason)
            return EXIT_WITH_ERRORS
        return 0

    async def _start_services(self, plans: list[BenchmarkPlan], stack: AsyncExitStack) -> dict[str, ServiceHandle]:
        """Start (or locate) every service the plans use. A stop signal abandons a start-up at once
        (a server loading weights may take many minutes): the handles so far are returned, the
        server being started is stopped, and run() sees `stopping` before using any handle."""
        ctx = ServiceContext(os.path.join(self.out_dir, LOGS_DIR), self.shard.idx, self.shard.total)
        handles: dict[str, ServiceHandle] = {}
        judges = [plan.config.judge.service for plan in plans if plan.config.judge is not None]
        for name in dict.fromkeys([*(plan.config.solver.named_service() for plan in plans), *judges]):  # each once: models, then judges
            handle = await self._unless_stopped(self._start_service(name, plans, stack, ctx))
            if handle is None:
                break
            handles[name] = handle
        return handles

    async def _start_service(self, name: str, plans: list[BenchmarkPlan], stack: AsyncExitStack, ctx: ServiceContext) -> ServiceHandle:
        service_config = self.config.services[name]
        factory = plugins.registry().get("services", service_config.type, f"services.{name}.type").factory
        endpoint = await stack.enter_async_context(factory(name, service_config, ctx))
        if endpoint.process is not None:
            watcher = asyncio.ensure_future(self._watch_service(endpoint.process))
            stack.callback(watcher.cancel)  # unwound before the service itself is stopped
        pool = max(p.config.max_concurrent for p in plans if name in (p.config.solver.service, p.config.judge and p.config.judge.service))
        client = await stack.enter_async_context(Client(endpoint, service_config, pool))
        served = await read_served(client, endpoint.base_url, endpoint.model, name)
        if self.cache is not None:
            client.use_cache(self.cache, served)
        log.info("service %s: %s model %s (%s), serving %s", name, endpoint.base_url, endpoint.model, endpoint.protocol, served.describe())
        return ServiceHandle(endpoint=endpoint, client=client, served=served)

    async def _open_cache(self, directory: str) -> ResponseCache | None:
        """The response cache, indexed in a thread so the event loop keeps acting on a stop signal
        (a cache of millions of entries on NFS takes a while): a signal tells the thread to stop
        and returns None at once, the shard then ends as `interrupted` like any other stop. A
        daemon thread, not the loop's executor: one stuck in a read of a hung file system would
        otherwise hold the process at exit, past the drain deadline."""
        store, stop = ResponseCache(directory), threading.Event()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[ResponseCache] = loop.create_future()

        def settle(result: ResponseCache | None, error: BaseException | None) -> None:
            if not done.done():
                done.set_exception(error) if error is not None else done.set_result(result)  # type: ignore[arg-type]

        def index() -> None:
            try:
                result, error = store.open(stop), None
                if stop.is_set():  # opened just as the wait was given up: nobody will use or close it
                    store.close()
            except BaseException as exc:  # handed to the loop, which raises it where the shard awaits it
                result, error = None, exc
            with suppress(RuntimeError):  # the loop is gone: nobody waits any more
                loop.call_soon_threadsafe(settle, result, error)

        threading.Thread(target=index, name="shardeval-cache-index", daemon=True).start()
        try:
            opened = await self._unless_stopped(done)
        finally:
            stop.set()  # whatever ended the wait (a signal, our own cancel), the thread stops indexing
        if opened is not None:
            log.info("%s", opened.describe())
        return opened

    async def _unless_stopped(self, awaitable: Awaitable[T]) -> T | None:
        """Await `awaitable`, unless a stop signal comes first: then cancel it, wait for it to
        unwind (a server being started is stopped) and return None. What the shard waits on
        without a deadline of its own (a server's start-up) waits this way, so a signal is acted
        on at once."""
        task = asyncio.ensure_future(awaitable)
        if self._stop_signal is None:  # no signal handling (not the main thread): nothing to race
            return await task
        try:
            if not self._stop_signal.done():
                racing: set[asyncio.Future[Any]] = {task, self._stop_signal}
                await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # we were cancelled ourselves: never leave the work running alone
            task.cancel()
            raise
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
            if task.cancelled():
                return None
        return task.result()

    async def _watch_service(self, process: ServerProcess) -> None:
        """Fail fast when a server this shard launched dies mid-run (OOM, a crash, someone's kill).

        Without this, every request would burn its retries against a closed port and be recorded
        as an error. Instead: stop dispatching, cancel what is in flight (not recorded; a rerun asks
        it again), and let run() mark the manifest failed with this reason and exit 1.
        """
        code = await process.wait_exit()
        if process.stopping or self.stopping:
            return  # our own stop, or the shard is already on its way out
        lines = [line for line in process.log_tail(40).splitlines() if line.strip() and not line.startswith("# shardeval")]
        last = lines[-1].strip()[:300] if lines else "(no output)"
        status = f"{code} ({describe_exit(code)})" if code < 0 else str(code)
        self.service_failure = f"{process.name} exited with status {status}: {last}"
        log.error("%s; stopping the shard (see %s)", self.service_failure, process.log_path)
        self._cancel_inflight()

    def _on_signal(self, sig: signal.Signals) -> None:
        """First signal: no new requests, and drain_timeout_s from now, not from whenever the shard
        next looks, for those in flight (SLURM sends SIGKILL KillWait seconds after SIGTERM). A
        start-up (`_unless_stopped`) or a wait for a place in the window is abandoned at once.
        Second signal: cancel what is in flight now. SIGHUP is never a second signal: it says the
        launcher that started this shard has ended (the local orchestrator asks for it at its death,
        PR_SET_PDEATHSIG, once per thread of its that dies) or the terminal has gone, which is no one
        asking for haste (`run | tee` and Ctrl-C killed the launcher mid-drain: the shards took its
        death for a second signal and dropped what was in flight)."""
        if self.stopping and sig == signal.SIGHUP:
            log.warning("SIGHUP: the launcher or terminal has gone; the drain goes on")
            return
        if self.stopping:
            log.warning("second %s: cancelling requests in flight now", sig.name)
            self._cancel_inflight()
            return
        self.stopping = sig.name
        timeout = self.config.output.drain_timeout_s
        if self._stop_signal is not None and not self._stop_signal.done():
            self._stop_signal.set_result(None)
        if self._window is not None:  # a dispatcher waiting for a place wakes, sees `stopping`, gives it back
            self._window.release()
        self._drain_timer = asyncio.get_running_loop().call_later(timeout, self._drain_expired, sig.name)
        log.warning("%s: no new requests; waiting up to %.0f s for those in flight (signal again to stop now)", sig.name, timeout)

    def _drain_expired(self, signame: str) -> None:
        """drain_timeout_s after the stop signal: cancel what is still in flight, unrecorded (a
        rerun asks it again)."""
        self._drain_timer = None
        pending = sum(not task.done() for task in self._inflight)
        if pending:
            log.warning(
                "%d request(s) still unfinished %g s after %s: cancelled; a rerun will ask them again",
                pending,
                self.config.output.drain_timeout_s,
                signame,
            )
        self._cancel_inflight()

    def _judge(self, plan: BenchmarkPlan, handles: dict[str, ServiceHandle]) -> Judge | None:
        """The benchmark's judge (None: its own scorer scores it), with its own window of requests."""
        jc = plan.config.judge
        if jc is None or plan.rubric is None:
            return None
        handle = handles[jc.service]
        slots = make_slots(plan.config.max_concurrent, handle.client.config.adaptive)
        return Judge(
            jc.service,
            plan.rubric,
            ServiceHandle(handle.endpoint, handle.client, slots, handle.served),
            generation_params(jc.generation, handle.client.config),
        )

    async def _run_benchmark(self, plan: BenchmarkPlan, handle: ServiceHandle, own: Membership, judge: Judge | None = None) -> Tally:
        """Ask every pair of the shard's share not yet answered; `own` says which records on disk are
        this shard's (shardeval.store.standing: merge and status build the same from the manifest). A pair
        whose standing record is a `judge` error is not asked again: its saved answer goes to the
        judge again."""
        bench_dir = os.path.join(self.out_dir, plan.name)
        os.makedirs(bench_dir, exist_ok=True)
        results_path = os.path.join(bench_dir, RESULTS_FILE)
        traj_path = os.path.join(bench_dir, TRAJECTORIES_FILE)
        tally = Tally(plan.n_problems, plan.config.repeats)
        rejudge: dict[tuple[int, int], ResultRecord] = {}  # (problem, repeat) -> its judge error record
        n_resumed = self._resume(results_path, traj_path, tally, own, rejudge if judge is not None else None)
        slots = make_slots(plan.config.max_concurrent, handle.client.config.adaptive)
        solver = self._solver(plan, ServiceHandle(handle.endpoint, handle.client, slots, handle.served, plan.config.max_concurrent))
        total = len(plan.indices) * plan.config.repeats
        progress = Progress(plan.name, self.shard, total, done=n_resumed, interval=self.config.output.progress_interval_s)
        if n_resumed:
            log.info("%s: resuming: %d of %d already ok on disk", plan.name, n_resumed, total)

        with (
            open_append(results_path, buffering=0) as results,
            open_append(traj_path, buffering=0) as trajectories,
            PairAnswerer(plan, self.shard.idx, judge, rejudge, handle.client.scrub, tally, self.config.output.trajectories) as answerer,
            thumbnails_of(plan, bench_dir) as thumbnails,
        ):
            output = BenchmarkOutput(bench_dir, results, trajectories, tally, progress, thumbnails)
            share = BenchmarkShare(self, plan, tally, answerer, output, self._reachability_of(plan, handle, total - n_resumed))
            progress.start()
            try:
                await solver.answer_share(share)  # each pair on its own, or all at once (a PairsSolver)
            finally:
                progress.stop()
        log_adaptive(plan.name, slots)
        if plan.benchmark.has_images:
            stats = IMAGE_STORE.stats()
            log.info(
                "%s: images: %d encoded, %d reused, %d read (this process, all benchmarks)",
                plan.name,
                stats["encodes"],
                stats["hits"],
                stats["reads"],
            )
        return tally

    def _solver(self, plan: BenchmarkPlan, handle: ServiceHandle) -> Solver:
        """The benchmark's solver (how a problem becomes requests), asking through `handle`."""
        where = f"benchmarks[{self.config.benchmarks.index(plan.config)}].solver.type"
        return as_solver(plugins.registry().get("solvers", plan.config.solver.type, where).factory(plan.config.solver, handle))

    def _reachability_of(self, plan: BenchmarkPlan, handle: ServiceHandle, to_ask: int) -> Reachability:
        """Whether the benchmark's model endpoint has ever answered: one watch per service, kept
        across its benchmarks once it has; `to_ask` caps how many failures in a row it waits for."""
        reach = self._reachability.get(plan.config.solver.named_service())
        if reach is None or not reach.reachable:
            limit = min(handle.client.config.unreachable_after, to_ask)
            reach = self._reachability[plan.config.solver.named_service()] = Reachability(handle.endpoint.base_url, limit)
        return reach

    async def _dispatch(self, pairs: Iterator[tuple[Problem, int]], ask: Callable[[Problem, int], Awaitable[None]], places: int) -> None:
        """Start `ask` for each pair in order, at most `places` at once, until the pairs run out or
        the shard is stopping (a signal, a dead server, a refused write); then wait for those in
        flight. What ends them early cancels them: the stop signal's deadline, a second signal, a
        dead server, a refused write."""
        window = asyncio.Semaphore(places)
        self._window = window  # a stop signal frees a place in it, so a dispatcher waiting for one wakes
        self._inflight = set()

        def finished(task: asyncio.Task) -> None:
            self._inflight.discard(task)
            window.release()
            if not task.cancelled() and task.exception() is not None:
                log.error("request task failed: %r", task.exception())

        for problem, repeat in pairs:
            await window.acquire()
            if self.stopping or self.service_failure or self.write_failure:
                window.release()
                break
            task = asyncio.ensure_future(ask(problem, repeat))
            self._inflight.add(task)
            task.add_done_callback(finished)
        while self._inflight:
            await asyncio.wait(set(self._inflight))

    async def _solve_pairs(
        self,
        solve_pairs: SolvePairs,
        plan: BenchmarkPlan,
        tally: Tally,
        answerer: PairAnswerer,
        output: BenchmarkOutput,
        reach: Reachability,
    ) -> None:
        """Hand every pending pair to a PairsSolver's `solve_pairs` at once and write each record as
        it settles one. Its task is the one request in flight, so a stop cancels it as it would
        requests; a pair it did not settle, when it returns or fails, gets an `internal` error record."""
        todo = {(p.idx, r): (p, r, request_seed(self.config.seed, plan.name, p.id, r)) for p, r in pending_work(plan, tally)}
        if not todo:
            return

        async def settle(problem: Problem, repeat: int, attempt: Attempt) -> None:
            pair = todo.pop((problem.idx, repeat), None)
            if pair is None:
                raise ValueError(f"{plan.name}: problem {problem.id} repeat {repeat} was not asked of this shard, or was settled twice")
            self._keep(output, reach, *await answerer.settle(*pair, attempt))

        task = asyncio.ensure_future(solve_pairs(list(todo.values()), settle))
        self._window, self._inflight = None, {task}
        await asyncio.wait({task})
        self._inflight = set()
        if task.cancelled() or self.stopping or self.service_failure or self.write_failure:
            return  # stopped: the pairs not settled are asked again on rerun
        failure = task.exception()
        why = f"{type(failure).__name__}: {failure}" if failure else "its solver ended without answering it"
        for problem, repeat, seed in list(todo.values()):
            self._keep(output, reach, *answerer.failed(problem, repeat, seed, None, why))
        todo.clear()

    def _keep(self, output: BenchmarkOutput, reach: Reachability, record: ResultRecord, line: bytes, traj_line: bytes | None) -> None:
        """Write one answer, then let the others know: the progress line, the endpoint's
        reachability, the `record_written` hook. A write the disk refuses stops the shard."""
        if self.write_failure:
            return  # the disk already refused a record: this answer is asked again on rerun
        try:
            output.append(record, line, traj_line)
        except OSError as exc:
            self._on_write_error(exc, output.dir)
            return
        output.progress.advance(record.status == "ok")
        # an answer from the cache, or a saved one judged again (no new trajectory), asked
        # nothing of the model's endpoint: it says nothing of whether it can be reached
        if record.cached is not True and traj_line is not None:
            if unreachable := reach.observe(record.status, record.error_kind, record.error):
                self._on_unreachable(unreachable)
        if self.record_hook:
            self.hooks.record_written(record=record, out_dir=self.out_dir)

    def _on_unreachable(self, reason: str) -> None:
        """The service's endpoint never answered (shardeval.run.reachability): stop the shard as if its
        server had died. The connection error records written stay; requests in flight are
        cancelled unrecorded; run() marks the manifest failed with the reason and exits 1."""
        if not self.service_failure:
            self.service_failure = reason
            log.debug("%s", reason)  # the CLI prints it once, as the shard's error line
            self._cancel_inflight()

    def _on_write_error(self, exc: OSError, where: str) -> None:
        """A record could not be written (a full disk, a quota, a lost mount): stop the shard.

        Going on would answer requests whose records cannot be kept. What is on disk stays valid
        (a half-written line is undone by append_line); requests in flight are cancelled unrecorded
        and asked again when the shard is rerun after space is freed.
        """
        if self.write_failure:
            return
        fix = "the records already written are intact; free space and rerun the shard to resume"
        self.write_failure = str(os_error(OSError(exc.errno, exc.strerror or str(exc), where), "write records under", fix=fix))
        log.debug("%s", self.write_failure)  # the CLI prints it once, as the shard's error line
        self._cancel_inflight()

    def _cancel_inflight(self) -> None:
        """Cancel the requests in flight (unrecorded: a rerun asks them again), but not the caller's own."""
        current = asyncio.current_task()
        for task in list(self._inflight):
            if task is not current:
                task.cancel()

    def _resume(
        self, results_path: str, traj_path: str, tally: Tally, own: Membership, rejudge: dict[tuple[int, int], ResultRecord] | None = None
    ) -> int:
        """Load what earlier runs of this shard recorded; report torn or bad lines and refuse records
        that are not its own (another run's or shard's: those cells are asked again). Returns ok count.
        `rejudge` (a judged benchmark) receives the standing `judge` error records: their answers
        are judged again without asking the model."""
        for path in (results_path, traj_path):
            try:
                if seal_torn_tail(path):
                    log.warning("%s: its last line was cut off by an interrupted write; it is ignored", path)
            except OSError as exc:
                raise os_error(exc, "seal the torn last line of") from None
        report = ReadReport(results_path)
        for _, _, record in own_records(results_path, own, report):
            current = tally.status[record.problem_idx * tally.repeats + record.repeat]
            if decide(current, record.status == "ok") in (TAKE, SUPERSEDE):  # shardeval.store.standing's rule
                tally.add(record, fresh=False)
                if rejudge is not None:
                    cell = (record.problem_idx, record.repeat)
                    if record.error_kind == "judge" and record.status == "error":
                        rejudge[cell] = record
                    else:
                        rejudge.pop(cell, None)
        if report.bad_lines or report.foreign:
            log.warning("%s", report.describe())
        return tally.status.count(OK)


@dataclass
class BenchmarkOutput:
    """Where one benchmark's answers go: its two files (opened for append, unbuffered), the count of
    what is on disk, and the progress line."""

    dir: str
    results: BinaryIO
    trajectories: BinaryIO
    tally: Tally
    progress: Progress
    thumbnails: ThumbnailLog | None = None  # images.jsonl, for a benchmark with images

    def append(self, record: ResultRecord, line: bytes, traj_line: bytes | None) -> None:
        """The record's line, then its trajectory's, then the thumbnails of images first sent;
        raises OSError. A record on disk is counted even if what follows cannot be written."""
        append_line(self.results, line)
        self.tally.add(record)
        if traj_line is not None:
            append_line(self.trajectories, traj_line)
        if self.thumbnails is not None:
            self.thumbnails.write_new()


@contextmanager
def thumbnails_of(plan: BenchmarkPlan, bench_dir: str) -> Iterator[ThumbnailLog | None]:
    """The benchmark's images.jsonl while it runs (None for a benchmark without images)."""
    if not plan.benchmark.has_images:
        yield None
        return
    log_file = ThumbnailLog(bench_dir, IMAGE_STORE)
    try:
        yield log_file
    finally:
        log_file.close()


@dataclass
class BenchmarkShare:
    """The shard's share of one benchmark as its solver answers it (shardeval.run.solver.Share):
    either way, each record goes through the same writer, and the shard's stop rules hold."""

    run: ShardRun
    plan: BenchmarkPlan
    tally: Tally
    answerer: PairAnswerer
    output: BenchmarkOutput
    reach: Reachability

    async def ask_each(self, solve: Callable[[Problem, int], Awaitable[Attempt]]) -> None:
        """Each pending pair as its own task; twice the benchmark's concurrency in flight, since
        tasks sleeping in a retry backoff hold a window place but no slot."""
        run, plan, answerer, output, reach = self.run, self.plan, self.answerer, self.output, self.reach

        async def ask(problem: Problem, repeat: int) -> None:
            seed = request_seed(run.config.seed, plan.name, problem.id, repeat)
            run._keep(output, reach, *await answerer.answer(problem, repeat, seed, solve))

        await run._dispatch(pending_work(plan, self.tally), ask, 2 * plan.config.max_concurrent)

    async def ask_all(self, solve_pairs: SolvePairs) -> None:
        """Every pending pair at once, to another tool's runtime (a PairsSolver)."""
        await self.run._solve_pairs(solve_pairs, self.plan, self.tally, self.answerer, self.output, self.reach)


class PairAnswerer:
    """One (problem, repeat) pair's record and its encoded lines: the solver asks the model (or a
    `judge` error's saved answer goes to the judge again, `rejudge`), the judge grades it, the
    benchmark scores it, in a thread pool when its scoring takes real time (`score_in_thread`;
    the pool is shut down when the `with` block ends)."""

    def __init__(
        self,
        plan: BenchmarkPlan,
        shard_idx: int,
        judge: Judge | None,
        rejudge: dict[tuple[int, int], ResultRecord],
        scrub: Callable[[str], str],
        tally: Tally,
        write_trajectories: bool,
    ) -> None:
        self.plan = plan
        self.shard_idx = shard_idx
        self.judge = judge
        self.rejudge = rejudge  # (problem, repeat) -> its judge error record; taken as it is answered
        self.scrub = scrub  # the client's: no key in an error message
        self.tally = tally  # to log only the first `internal` error
        self.write_trajectories = write_trajectories
        self.scorer = ThreadPoolExecutor(os.cpu_count() or 1, "score") if plan.benchmark.score_in_thread else None

    def __enter__(self) -> PairAnswerer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.scorer:
            self.scorer.shutdown(wait=True)

    async def answer(
        self, problem: Problem, repeat: int, seed: int, solve: Callable[[Problem, int], Awaitable[Attempt]]
    ) -> tuple[ResultRecord, bytes, bytes | None]:
        """The pair's record and its encoded lines, `solve` asking the model. Any exception on the
        way (the solver, the client, the scorer, a value that cannot be encoded) becomes an
        `internal` error record instead, so that no pair is ever left without one; a rerun asks it
        again."""
        attempt = None
        try:
            saved = self.rejudge.pop((problem.idx, repeat), None)
            # a judge error's saved answer goes to the judge again; the model is not asked
            attempt = Attempt(saved_completion(saved), [], {}) if saved is not None else await solve(problem, seed)
            return await self._settle(problem, repeat, seed, attempt, saved is not None)
        except Exception as exc:  # CancelledError is not an Exception: a cancel still cancels
            return self.failed(problem, repeat, seed, attempt, f"{type(exc).__name__}: {exc}")

    async def settle(self, problem: Problem, repeat: int, seed: int, attempt: Attempt) -> tuple[ResultRecord, bytes, bytes | None]:
        """The record of an answer a PairsSolver got itself; as `answer`, never raises."""
        try:
            return await self._settle(problem, repeat, seed, attempt, False)
        except Exception as exc:
            return self.failed(problem, repeat, seed, attempt, f"{type(exc).__name__}: {exc}")

    async def _settle(
        self, problem: Problem, repeat: int, seed: int, attempt: Attempt, rejudged: bool
    ) -> tuple[ResultRecord, bytes, bytes | None]:
        verdict = None
        c = attempt.completion
        if self.judge is not None and c.status == "ok":
            split = split_of(c, self.plan.reasoning_tags)
            if reply_outcome(split, c.finish_reason) != "truncated_reasoning":  # no answer to judge: it scores 0
                verdict = await self.judge.grade(problem, split.shown(), seed)  # the judge never reads the thinking
        args = (self.plan, problem, repeat, seed, attempt.completion, self.shard_idx, attempt.scores, verdict, attempt.score)
        if self.scorer:
            record = await asyncio.get_running_loop().run_in_executor(self.scorer, make_record, *args)
        else:
            record = make_record(*args)
        if rejudged:  # its conversation is already in trajectories.jsonl, from the first time
            return record, encode_line(record), None
        return record, encode_line(record), self.trajectory(problem, repeat, record, attempt.messages, attempt.request)

    def failed(
        self, problem: Problem, repeat: int, seed: int, attempt: Attempt | None, why: str
    ) -> tuple[ResultRecord, bytes, bytes | None]:
        """An error of kind `internal`: what went wrong (key scrubbed), never scored, with what the
        request got if it got that far; a rerun asks it again."""
        message = self.scrub(why)
        c = getattr(attempt, "completion", None)
        c = c if isinstance(c, Completion) else Completion(status="error", started_at=time.time())
        c = msgspec.structs.replace(c, status="error", error_kind="internal", error=message)
        record = make_record(self.plan, problem, repeat, seed, c, self.shard_idx)
        if not self.tally.errors["internal"]:  # the first is logged (a record is counted as it is written)
            log.warning(
                "%s: problem %s repeat %d: %s; recorded as an `internal` error, asked again on rerun "
                "(later ones are counted in the summary)",
                self.plan.name,
                problem.id,
                repeat,
                message,
            )
        return record, encode_line(record), self.trajectory(problem, repeat, record, [], {})

    def trajectory(self, problem: Problem, repeat: int, record: ResultRecord, messages: list, request: dict) -> bytes | None:
        """The pair's conversation as a trajectories.jsonl line; None when the config keeps none."""
        if not self.write_trajectories:
            return None
        if record.reasoning is not msgspec.UNSET and messages and messages[-1].get("role") == "assistant":
            messages = [*messages[:-1], {**messages[-1], "reasoning": record.reasoning}]  # the thinking beside the raw reply
        return encode_line(
            TrajectoryRecord(
                benchmark=self.plan.name,
                problem_idx=problem.idx,
                problem_id=problem.id,
                repeat=repeat,
                messages=messages,
                request=request,
                status=record.status,
            )
        )


def log_adaptive(name: str, slots: asyncio.Semaphore | AdaptiveSlots) -> None:
    """With adaptive concurrency, say how far the benchmark's window came down."""
    if isinstance(slots, AdaptiveSlots) and slots.n_cuts:
        log.info(
            "%s: adaptive concurrency: %d 429(s), window cut %d time(s), lowest %.1f, now %.1f of %d",
            name,
            slots.n_rate_limited,
            slots.n_cuts,
            slots.min_limit,
            slots.limit,
            slots.cap,
        )


class QuietFileHandler(logging.FileHandler):
    """The shard's log file, second to stderr: when it cannot be written (the disk filled up), it
    stops, instead of printing logging's traceback into the one line the user should see."""

    broken = False

    def _open(self) -> io.TextIOWrapper:
        """Never a blocking open: a FIFO nobody reads at logs/shard.log hung the shard forever, deaf
        to SIGTERM, holding its lock (shardeval.store.regular.open_append_fd)."""
        return open(open_append_fd(self.baseFilename), "a", encoding=self.encoding, errors=self.errors)

    def emit(self, record: logging.LogRecord) -> None:
        if not self.broken:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        self.broken = True

    def close(self) -> None:  # a write that failed in emit is flushed again here: on a full disk, no raise
        try:
            super().close()
        except OSError:
            self.broken = True


def write_final_manifest(out_dir: str, manifest: Manifest) -> None:
    """Write the closing manifest; never raise (that would hide why the shard stopped).

    On a full disk the atomic replace cannot get a new file's blocks: fall back to rewriting
    manifest.json in place, which reuses the blocks it already holds.
    """
    try:
        write_manifest(out_dir, manifest)
    except OSError as first:
        path = os.path.join(out_dir, MANIFEST_FILE)
        try:
            with open(path, "r+b") as f:
                f.write(pretty_json(manifest))
                f.truncate()
        except OSError as exc:
            log.error("cannot write %s: %s (and in place: %s)", path, first.strerror or first, exc.strerror or exc)


def pending_work(plan: BenchmarkPlan, tally: Tally) -> Iterator[tuple[Problem, int]]:
    """(problem, repeat) pairs of this shard not yet answered ok, generated lazily in order."""
    repeats = plan.config.repeats
    status = tally.status
    for problem in plan.benchmark.problems(plan.indices):
        base = problem.idx * repeats
        for repeat in range(repeats):
            if status[base + repeat] != OK:
                yield problem, repeat


def saved_completion(record: ResultRecord) -> Completion:
    """The model's answer as a `judge` error record saved it, to be judged again."""
    return Completion(
        status="ok",
        text=record.response,
        finish_reason=record.finish_reason,
        prompt_tokens=record.prompt_tokens,
        completion_tokens=record.completion_tokens,
        ttft_s=record.ttft_s,
        latency_s=record.latency_s,
        started_at=record.started_at,
        attempts=record.attempts,
        cached=record.cached is True,
        **saved_reasoning(record),
    )


def saved_reasoning(record: ResultRecord) -> dict[str, Any]:
    """The Completion fields that give a saved record's reply the split it had: the server's
    reasoning field when the thinking came in one (its `answer` is then the whole content), and
    its thinking tokens; inline thinking is split again from the content by the same rule."""
    fields: dict[str, Any] = {}
    if record.reasoning is not msgspec.UNSET and record.answer is msgspec.UNSET:
        fields["reasoning"] = record.reasoning
    if record.reasoning_tokens is not msgspec.UNSET:
        fields["reasoning_tokens"] = record.reasoning_tokens
        fields["reasoning_tokens_from"] = record.reasoning_tokens_from or None
    return fields


def make_record(
    plan: BenchmarkPlan,
    problem: Problem,
    repeat: int,
    seed: int,
    c: Completion,
    shard: int,
    extra: dict[str, float] | None = None,
    verdict: Verdict | None = None,
    own: Score | None = None,
) -> ResultRecord:
    """The record of one answer; `extra` (the solver's own scores, e.g. log-probabilities) joins the
    benchmark's named scores and wins on a clash: the solver measured it. With a judge's `verdict`,
    the judge scores it, or makes it an error of kind `judge` (the answer is kept). `own`: the
    solver's whole verdict (another tool's scorers), taken instead of the benchmark's `score`.

    A reasoning model's reply is split here (`split_of`): the benchmark scores only the answer; a
    reply cut off while it thought is scored 0 (`truncated_reasoning`), never from its thinking."""
    record = ResultRecord(
        benchmark=plan.name,
        problem_idx=problem.idx,
        problem_id=problem.id,
        repeat=repeat,
        seed=seed,
        status=c.status,
        error_kind=c.error_kind,
        error=c.error,
        attempts=c.attempts,
        response=c.text,
        reference=problem.reference,
        finish_reason=c.finish_reason,
        prompt_tokens=c.prompt_tokens,
        completion_tokens=c.completion_tokens,
        ttft_s=c.ttft_s,
        latency_s=c.latency_s,
        started_at=c.started_at,
        shard=shard,
        cluster=problem.cluster,
        run=plan.run,
    )
    if c.cached:
        record.cached = True
    if problem.images:
        record.images = [ref.info() for ref in problem.images]
    split = split_of(c, plan.reasoning_tags)
    keep_reasoning(record, c, split)
    if verdict is not None:
        apply_verdict(record, verdict, extra)
    elif c.status == "ok":  # errors are never scored: they are not wrong answers
        if record.outcome == "truncated_reasoning":  # no answer within its budget: 0, whatever its thinking says;
            # its named scores are those of no answer (what "" scores: a metric's own value for nothing said)
            score = Score(score=0.0, scores=plan.benchmark.score(problem, "").scores if own is None and plan.rubric is None else {})
        else:
            score = own if own is not None else plan.benchmark.score(problem, split.answer)
        record.score, record.extracted, record.scores = score.score, score.extracted, score.scores
        if extra:
            record.scores = {**record.scores, **extra}
    if record.status == "ok" and (fault := score_fault(record)) is not None:
        unscorable(record, scorer_named(plan, fault, extra, own, verdict), fault)
    return record


def scorer_named(plan: BenchmarkPlan, fault: str, extra: dict[str, float] | None, own: Score | None, verdict: Verdict | None) -> str:
    """Who gave a record's bad score, for its error: the solver's own measure, the judge, the
    solver's scorers (another tool's, e.g. lm-eval's process_results), or the benchmark's scorer."""
    if extra and any(fault.startswith(f"scores[{key!r}]") for key in extra):
        return f"the solver of {plan.name} (its measured scores)"
    if verdict is not None:
        return f"the judge of {plan.name}"
    if own is not None:
        return f"the scorers the solver of {plan.name} ran"
    return f"the scorer of benchmark {plan.name} ({type(plan.benchmark).__module__}.{type(plan.benchmark).__qualname__})"


def split_of(c: Completion, tags: tuple[str, str] | None) -> ReplySplit:
    """A completion's reply split into thinking and answer (shardeval.benchmark.reasoning)."""
    return split_reply(c.text, c.reasoning, tags)


def keep_reasoning(record: ResultRecord, c: Completion, split: ReplySplit) -> None:
    """Put a reply's thinking, its answer (when not the whole content), its thinking tokens and,
    for a reply cut off at its length limit, its outcome on the record."""
    if split.reasoning is not None:
        record.reasoning = split.reasoning
        if split.answer != c.text:
            record.answer = split.answer
    if c.reasoning_tokens is not None and (split.reasoning is not None or c.reasoning_tokens):
        record.reasoning_tokens = c.reasoning_tokens
        if c.reasoning_tokens_from is not None:
            record.reasoning_tokens_from = c.reasoning_tokens_from
    if c.status == "ok":
        outcome = reply_outcome(split, c.finish_reason)
        if outcome is not None:
            record.outcome = outcome


def missing_pairs(plans: list[BenchmarkPlan], cells: list[Cells]) -> str | None:
    """Why a shard that ran to its end is not complete: pairs with no record that reads back (a
    request task that ended without writing one, or a line its reader cannot decode). None when
    every pair of every benchmark run has a readable record."""
    expected = {plan.name: len(plan.indices) * plan.config.repeats for plan, _ in zip(plans, cells)}
    gaps = {plan.name: expected[plan.name] - read.n_ok - read.n_error for plan, read in zip(plans, cells)}
    missing = sum(gaps.values())
    if not missing:
        return None
    parts = ", ".join(f"{name} {gap}" for name, gap in gaps.items() if gap)
    skipped = "; ".join(text for read in cells if (text := read.report.describe()) is not None)
    return (
        f"{missing} of {sum(expected.values())} pair(s) have no readable record after the run ({parts}): their request "
        f"tasks ended without writing one{', or what they wrote does not read back (' + skipped + ')' if skipped else ''}; "
        "rerun the shard to ask them"
    )


def print_summary(plan: BenchmarkPlan, tally: Tally, bm: BenchmarkManifest, shard: ShardSpec, elapsed: float) -> None:
    """The shard's line for one benchmark: its counts as its records read back (the manifest's), the
    mean score, latencies and errors of the answers this session got."""
    n_ok, n_err = bm.n_ok, bm.n_error
    total = len(plan.indices) * plan.config.repeats
    mean = tally.score_sum / tally.n_scored if tally.n_scored else float("nan")
    lat = sorted(tally.latencies)
    p50 = lat[len(lat) // 2] if lat else float("nan")
    p95 = lat[min(len(lat) - 1, int(len(lat) * 0.95))] if lat else float("nan")
    rate = len(lat) / elapsed if elapsed > 0 else 0.0
    errors = ", ".join(f"{k} {v}" for k, v in sorted(tally.errors.items())) or "none"
    log.info(
        "shard %d/%d %s: problems [%d, %d) x %d repeats: %d/%d ok, %d error(s) (%s), missing %d; "
        "mean score %s over %d ok; latency p50 %.3f s p95 %.3f s; %.1f req/s",
        shard.idx,
        shard.total,
        plan.name,
        *plan.manifest().range,
        plan.config.repeats,
        n_ok,
        total,
        n_err,
        errors,
        total - n_ok - n_err,
        fmt(mean),
        tally.n_scored,
        p50,
        p95,
        rate,
    )
