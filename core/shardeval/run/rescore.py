"""`shardeval rescore`: score a finished run's saved answers again, asking no model anything.

Each shard directory of RUN_DIR becomes an ordinary shard directory under NEW_DIR (same relative
path, so a sweep keeps its <service>/shard_<i>/ layout). Its results are the source's, line for
line and in the same order: an `ok` record of the shard's own gets `extracted`, `score` and
`scores` from the scorer; errors and records that are not the shard's own (shardeval.store.standing)
are copied unchanged, so merge decides every cell, duplicate and refusal exactly as it did for
RUN_DIR. Trajectories are copied. The manifest is the source's with the scorer's fingerprint and
`rescored` (which scorer, from which shard): merge never mixes shards scored differently.

One output line per readable source record is what makes a rescore resumable: a rerun counts the
whole lines already written and goes on from the next source record. That count means something
only while the source still starts with the records rescored, so the manifest records each source
file's size and hash (`rescored.sources`) and a rerun refuses a source truncated or rewritten since
(an appended one is the same source grown: the rerun catches up). The scorer is anything with
`score(problem, text)`, `score_in_thread` and `scorer_version`: today a registered benchmark.
"""

from __future__ import annotations

import copy
import logging
import os
import re
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import islice
from typing import Any
from collections.abc import Iterator

import msgspec

from shardeval import __version__, plugins
from shardeval.store.atomic import atomic_write
from shardeval.benchmark import Benchmark, Problem
from shardeval.config import BenchmarkConfig, JudgeConfig
from shardeval.config.loading import decode_service
from shardeval.explain import Where
from shardeval.config.reading import apply_overrides
from shardeval.errors import EXIT_WITH_ERRORS, UsageError, os_error
from shardeval.identity import judge_identity, judged_fingerprint, scorer_fingerprint
from shardeval.run.judging import JudgeServices, apply_verdict, metrics_when_judged, rubric_for
from shardeval.run.runner import make_benchmark
from shardeval.run.service import ServiceContext
from shardeval.run.solver import generation_params
from shardeval.store.discover import PLAN_FILE, find_shard_dirs, refuse_inside_shard
from shardeval.store.liveness import ShardLease
from shardeval.store.shards import detect_shard
from shardeval.store.regular import open_append, read_regular
from shardeval.store.records import (
    LOGS_DIR,
    RESULTS_FILE,
    IMAGES_FILE,
    TRAJECTORIES_FILE,
    BenchmarkManifest,
    Manifest,
    ReadReport,
    RescoreProvenance,
    ResultRecord,
    ScorerInfo,
    SourceFile,
    encode_line,
    read_manifest,
    scan_lines,
    score_fault,
    unscorable,
    write_manifest,
)
from shardeval.store.standing import Membership, count_cells, standing_error_kinds

log = logging.getLogger("shardeval")

SCORER_FLAG = "--scorer"
JUDGE_FLAG = "--judge"
PARAM_OVERRIDE = re.compile(r"benchmarks\.\d+\.params\..+")


class WholeLine(msgspec.Struct):
    """Any JSON object: counts the whole lines a rescore already wrote, decoding nothing else."""


@dataclass(frozen=True)
class ScorerChoice:
    """What the command line says to score with: `--scorer [BENCH=]NAME` (another registered
    benchmark's `score`, for one benchmark of the run or all) and `-O benchmarks.N.params.KEY=VALUE`
    (params the scorer is built with). Nothing given: each benchmark's own scorer, as it is now."""

    names: dict[str | None, str]  # benchmark in the run (None: every one) -> scorer name
    overrides: tuple[str, ...]
    judges: dict[str | None, tuple[str, str | None]] = field(default_factory=dict)  # benchmark -> (judge service, mode)

    @classmethod
    def parse(cls, scorers: tuple[str, ...], overrides: tuple[str, ...], judges: tuple[str, ...] = ()) -> ScorerChoice:
        chosen: dict[str | None, tuple[str, str | None]] = {}
        for text in judges:
            bench, sep, rest = text.rpartition("=")
            service, _, mode = rest.partition(":")
            if not service or (sep and not bench) or mode not in ("", "single", "pairwise"):
                raise UsageError(f"{JUDGE_FLAG} {text!r}: expected [BENCH=]SERVICE[:single|pairwise], e.g. {JUDGE_FLAG} judge:pairwise")
            chosen[bench or None] = (service, mode or None)
        names: dict[str | None, str] = {}
        for text in scorers:
            bench, sep, name = text.rpartition("=")
            if not name or (sep and not bench):
                raise UsageError(f"{SCORER_FLAG} {text!r}: expected NAME or BENCH=NAME, e.g. {SCORER_FLAG} arith=my_scorer")
            names[bench or None] = name
        for text in overrides:
            key = re.sub(r"\[(\d+)\]", r".\1", text.partition("=")[0].strip())
            if not PARAM_OVERRIDE.fullmatch(key):
                raise UsageError(
                    f"-O {text}: rescore changes only how answers are scored; give -O benchmarks.N.params.KEY=VALUE, "
                    f"or {SCORER_FLAG} NAME for another scorer"
                )
        if both := sorted(str(b) for b in set(names) & set(chosen)):
            raise UsageError(
                f"{SCORER_FLAG} and {JUDGE_FLAG} both name {both[0] if both[0] != 'None' else 'every benchmark'}; "
                "give one scorer or one judge per benchmark"
            )
        return cls(names, overrides, chosen)


@dataclass
class BenchmarkRescore:
    """One benchmark of a shard: its problems come from the run's own benchmark, its scores from `scorer`."""

    manifest: BenchmarkManifest
    data: Benchmark
    scorer: Benchmark  # `data` itself unless another scorer was chosen
    info: ScorerInfo
    judge: JudgeSpec | None = None  # set: a judge scores it again (asked now; the model never)


@dataclass
class JudgeSpec:
    """The judge a rescore asks for one benchmark: a service of the run's config, its rubric."""

    service: str
    config: Any  # its ServiceConfig
    rubric: Any  # shardeval.benchmark.rubric.Rubric
    params: dict[str, Any]  # generation parameters
    max_concurrent: int


def plan_scorers(manifest: Manifest, choice: ScorerChoice, where: str) -> list[BenchmarkRescore]:
    """Rebuild each benchmark from the config in the shard's manifest (its data must be unchanged:
    the problems give the references) and the scorer chosen for it, with its fingerprint."""
    registry = plugins.registry()
    stored: list[Any] = manifest.config.get("benchmarks", []) if isinstance(manifest.config, dict) else []
    scored = copy.deepcopy(manifest.config) if isinstance(manifest.config, dict) else {}
    apply_overrides(scored, choice.overrides, Where(source=f"{where}/manifest.json"))
    _refuse_unplannable(manifest, choice, where, stored)
    return [
        _plan_one(manifest, choice, where, registry, i, bm, original, wanted)
        for i, (bm, original, wanted) in enumerate(zip(manifest.benchmarks, stored, scored.get("benchmarks", stored)))
    ]


def _refuse_unplannable(manifest: Manifest, choice: ScorerChoice, where: str, stored: list[Any]) -> None:
    """Before anything is built: a --scorer for a benchmark the shard does not have, or a
    manifest with no config for its benchmarks (an old shardeval's), is refused."""
    names = [bm.name for bm in manifest.benchmarks]
    if unknown := [b for b in choice.names if b is not None and b not in names]:
        raise UsageError(f"{SCORER_FLAG} {unknown[0]}=…: {where} has no benchmark {unknown[0]!r} (it has: {', '.join(names)})")
    if len(stored) != len(manifest.benchmarks):
        raise UsageError(f"{where}/manifest.json holds no config for its benchmarks (written by an old shardeval?); it cannot be rescored")


def _plan_one(
    manifest: Manifest,
    choice: ScorerChoice,
    where: str,
    registry: Any,
    i: int,
    bm: BenchmarkManifest,
    original: dict[str, Any],
    wanted: dict[str, Any],
) -> BenchmarkRescore:
    """One benchmark's rescore: its data rebuilt (and checked unchanged), then its judge asked
    again, or the scorer chosen (its own by default) with its fingerprint."""
    run_config = BenchmarkConfig(name=original["name"], params=original.get("params") or {})
    data, entry = make_benchmark(run_config, f"benchmarks[{i}].name", registry)
    if (found := data.fingerprint()) != bm.dataset_fingerprint:
        raise UsageError(
            f"{where}: the data of {bm.name} changed since the run ({found}, the run had {bm.dataset_fingerprint}); "
            "rescore needs the data the answers were given for"
        )
    name = choice.names.get(bm.name, choice.names.get(None, original["name"]))
    # a scorer named for this benchmark beats a judge named for all of them
    asked = choice.judges.get(bm.name) or (None if bm.name in choice.names else choice.judges.get(None))
    params = wanted.get("params") or {}
    if asked is not None or (original.get("judge") and bm.name not in choice.names and None not in choice.names):
        if params != (original.get("params") or {}):
            raise UsageError(
                f"-O benchmarks.{i}.params: {bm.name} is judged again, and a judge takes no scorer params; "
                f"drop the -O, or name a scorer with {SCORER_FLAG} {bm.name}=NAME"
            )
        return _judged(manifest, bm, data, entry, original, asked, where)  # its judge, or the one named, asked again
    scorer = data
    if name != run_config.name or params != run_config.params:
        scorer, entry = make_benchmark(BenchmarkConfig(name=name, params=params), SCORER_FLAG, registry)
    if scorer.scores_from == "solver":
        raise UsageError(
            f"{where}: {bm.name} was scored by its solver (its task's own scorers, run where it ran), which "
            f"rescore cannot run again; name another scorer with {SCORER_FLAG} {bm.name}=NAME, or run it again"
        )
    version = plugins.plugin_version(entry.plugin)
    fingerprint = scorer_fingerprint(data, bm.n_problems, version, scorer=scorer)
    info = ScorerInfo(
        benchmark=bm.name,
        scorer=name,
        params=params,
        plugin=entry.plugin,
        plugin_version=version,
        scorer_version=scorer.scorer_version,
        fingerprint=fingerprint,
        replaces=bm.scorer_fingerprint,
    )
    return BenchmarkRescore(msgspec.structs.replace(bm, scorer_fingerprint=fingerprint), data, scorer, info)


def _judged(
    manifest: Manifest,
    bm: BenchmarkManifest,
    data: Benchmark,
    entry: Any,
    original: dict[str, Any],
    asked: tuple[str, str | None] | None,
    where: str,
) -> BenchmarkRescore:
    """A benchmark scored again by a judge: the run's own (its `judge` section), or the service
    `--judge` names (a service of the run's config), with the mode given or the run's."""
    services = manifest.config.get("services", {}) if isinstance(manifest.config, dict) else {}
    judge = msgspec.convert(original.get("judge") or {"service": ""}, JudgeConfig)
    if asked is not None:
        judge = msgspec.structs.replace(judge, service=asked[0], mode=asked[1] or judge.mode)
    if judge.service not in services:
        raise UsageError(
            f"{JUDGE_FLAG} {judge.service}: {where} has no service {judge.service!r} in its config "
            f"(it has: {', '.join(services) or 'none'}); a judge must be one of the run's services"
        )

    config = decode_service(judge.service, services[judge.service], Where(source=f"{where}/manifest.json"))
    url = getattr(config, "url", "") or ""  # a service type without a URL has none to hide
    if "***" in str(url):  # shardeval.redact: manifests keep no credentials
        raise UsageError(
            f"{JUDGE_FLAG} {judge.service}: its URL held credentials, which {where}/manifest.json does not keep "
            f"({url}); rescore cannot reach it: give the judge's key through api_key_env instead"
        )
    rubric = rubric_for(judge, data)
    version = plugins.plugin_version(entry.plugin)
    identity = msgspec.to_builtins(judge_identity(judge, config))
    fingerprint = judged_fingerprint(scorer_fingerprint(data, bm.n_problems, version), rubric, identity)
    info = ScorerInfo(
        benchmark=bm.name,
        scorer=f"judge {judge.service} ({rubric.mode})",
        params=identity,
        plugin=entry.plugin,
        plugin_version=version,
        fingerprint=fingerprint,
        replaces=bm.scorer_fingerprint,
    )
    max_concurrent = int(original.get("max_concurrent") or 32)
    spec = JudgeSpec(judge.service, config, rubric, generation_params(judge.generation, config), max_concurrent)
    metrics = bm.metrics if original.get("metrics") else list(metrics_when_judged(data))  # as a run judged so would report
    return BenchmarkRescore(msgspec.structs.replace(bm, scorer_fingerprint=fingerprint, metrics=metrics), data, data, info, spec)


def rescore_run(run_dir: str, out_dir: str, shard_flag: str | None, choice: ScorerChoice) -> int:
    """Rescore this task's shard directories of RUN_DIR into NEW_DIR (all of them without a shard
    selection; with `--shard I/N` or a shard variable every N-th one from the I-th)."""
    if not os.path.isdir(run_dir):
        raise UsageError(f"{run_dir}: no such directory; give the run's output directory (the one that holds shard_<i>/)")
    src, dst = os.path.realpath(run_dir), os.path.realpath(out_dir)
    if dst == src or dst.startswith(src + os.sep) or src.startswith(dst + os.sep):
        raise UsageError(
            f"-o {out_dir}: the rescored shards must go outside {run_dir} (and not around it), or a merge "
            f"would read both; give another directory, e.g. -o {run_dir.rstrip('/')}_rescored"
        )
    paths, _ = find_shard_dirs(run_dir)
    if not paths:
        raise UsageError(f"{run_dir}: no shard directories (folders with a manifest.json) found; point at a run's output directory")
    refuse_other_run(run_dir, out_dir)
    units = sorted(paths, key=lambda p: (getattr(read_manifest(p), "shard_idx", 0), p))
    spec = detect_shard(shard_flag, os.environ, len(units))
    mine = units if spec is None else units[spec.idx :: spec.total]
    states = []
    with JudgeServices() as judges:  # a judge is started once for every shard of this task
        for path in mine:
            states.append(rescore_shard(path, os.path.join(out_dir, os.path.relpath(path, run_dir)), choice, judges))
    plan_file = os.path.join(run_dir, PLAN_FILE)
    try:
        if mine and os.path.exists(plan_file) and not os.path.exists(os.path.join(out_dir, PLAN_FILE)):
            # a sweep's model list, so merge reads NEW_DIR as the same sweep
            atomic_write(os.path.join(out_dir, PLAN_FILE), read_regular(plan_file))
    except OSError as exc:
        raise os_error(exc, "write", alternative="give another directory with -o") from None
    if failed := [path for path, state in zip(mine, states) if state == "finished_with_errors"]:
        # as a run's shard: records that end in errors (judge errors, say) are not a complete rescore (issue 24)
        log.warning(
            "%d of %d rescored shard(s) finished with errors (%s): their manifests count them by kind; "
            "merge says ERRORS; to ask again, rescore into another -o",
            len(failed),
            len(mine),
            ", ".join(failed),
        )
        return EXIT_WITH_ERRORS
    return 0


def refuse_other_run(run_dir: str, out_dir: str) -> None:
    """Before anything is written: NEW_DIR is no other run's. Inside any shard directory (another
    run's) it is refused, and so is a NEW_DIR holding a shard that is not a rescore of RUN_DIR's
    (another run, a rescore of another): rescored shards written beside them would be merged with
    them, and that run's directories would get this rescore's lock and heartbeat files."""
    refuse_inside_shard(out_dir, "-o")
    if not os.path.isdir(out_dir):
        return
    src = os.path.realpath(run_dir)
    for path in find_shard_dirs(out_dir)[0]:
        manifest = read_manifest(path)
        rescored = getattr(manifest, "rescored", None)
        source = getattr(rescored, "source", None)
        if not isinstance(source, str) or not source.startswith(src + os.sep):
            what = "a shard that no rescore wrote" if not isinstance(source, str) else f"a rescore of {source}"
            raise UsageError(
                f"-o {out_dir} holds another run: {path} is {what}, not a rescore of {run_dir}; give an empty "
                f"directory or an earlier rescore of this run, e.g. -o {run_dir.rstrip('/')}_rescored"
            )


def rescore_shard(src: str, dst: str, choice: ScorerChoice, judges: JudgeServices) -> str:
    """Rescore one shard directory into `dst`, resuming what an earlier rescore of it left there;
    return the rescored shard's state (`finished_with_errors` when records there end in errors)."""
    manifest = read_manifest(src)
    assert manifest is not None  # found by its manifest
    if manifest.state == "running":
        raise UsageError(f"{src}: the shard is still running (or its process was lost): let it finish, or rerun it, then rescore")
    benches = plan_scorers(manifest, choice, src)
    new = msgspec.structs.replace(
        manifest,
        state="running",
        reason=None,
        benchmarks=[b.manifest for b in benches],
        rescored=RescoreProvenance(source=os.path.realpath(src), at=time.time(), shardeval=__version__, scorers=[b.info for b in benches]),
    )
    results = {b.manifest.name: os.path.join(src, b.manifest.name, RESULTS_FILE) for b in benches}
    try:
        os.makedirs(dst, exist_ok=True)
    except OSError as exc:
        raise os_error(exc, "write", alternative="give another directory with -o") from None
    lease = ShardLease(dst)
    lease.acquire()  # one writer per directory, as for a run: a second rescore of it is refused
    try:
        earlier = read_manifest(dst)
        if (done := _resume(dst, earlier, new, results)) is not None:
            log.info("%s: already rescored (%s); nothing to do", dst, done)
            return done
        write_manifest(dst, new)
        for b in benches:
            log.info("%s: rescoring %s", dst, describe(b.info))
            own = Membership.of(manifest, b.manifest)
            (rejudge_benchmark(src, dst, b, own, manifest, judges) if b.judge else rescore_benchmark(src, dst, b, own))
            # counted from what the file now holds, by the rule merge uses: right after a resume too
            b.manifest.n_ok, b.manifest.n_error, _ = count_cells(os.path.join(dst, b.manifest.name, RESULTS_FILE), own)
            b.manifest.error_kinds = (
                standing_error_kinds(os.path.join(dst, b.manifest.name, RESULTS_FILE), own) if b.manifest.n_error else {}
            )
        new.state, new.reason, new.finished_at = manifest.state, manifest.reason, manifest.finished_at
        _count_errors(new, manifest, benches)
        write_manifest(dst, new)
    except OSError as exc:
        raise os_error(exc, "write rescored records under", fix="the source is untouched; free space and rerun to resume") from None
    finally:
        lease.release()
    return new.state


def _resume(dst: str, earlier: Manifest | None, new: Manifest, results: dict[str, str]) -> str | None:
    """Check what `dst` holds against the rescore about to be written (an earlier rescore of the
    same shard, from the same source bytes, or nothing) and record the sources' identity in
    `new`; return the earlier state when that rescore had finished (nothing to do), else None."""
    if earlier is not None and (why := _not_resumable(earlier, new)) is not None:
        raise UsageError(f"-o {dst}: {why}; give another -o (or move that directory aside)")
    consumed = earlier.rescored.sources if earlier is not None else {}  # type: ignore[union-attr]
    new.rescored.sources, changed = read_sources(results, consumed)  # type: ignore[union-attr]
    if earlier is not None and (changed or not consumed):
        why = changed or "it was written by a rescore that recorded no identity of its source, so what it holds cannot be checked"
        raise UsageError(
            f"-o {dst}: {why}; the records rescored so far may no longer be the source's: remove {dst} "
            f"to rescore it again, or give another -o"
        )
    if earlier is not None and earlier.state != "running" and consumed == new.rescored.sources:  # type: ignore[union-attr]
        return earlier.state
    return None


def _count_errors(new: Manifest, manifest: Manifest, benches: list[BenchmarkRescore]) -> None:
    """A finished shard whose rescored records end in errors (a judge's, say) finishes with
    errors, its reason counting them by kind: every pair has a record, not every one an answer."""
    kinds: dict[str, int] = {}
    for b in benches:
        for kind, n in b.manifest.error_kinds.items():
            kinds[kind] = kinds.get(kind, 0) + n
    if kinds and new.state in ("complete", "finished_with_errors"):
        cells = sum(Membership.of(manifest, b.manifest).n_cells for b in benches)
        text = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))
        new.state, new.reason = "finished_with_errors", f"{sum(kinds.values())} of {cells} pairs end in errors ({text})"


def _not_resumable(earlier: Manifest, new: Manifest) -> str | None:
    """Why what `dst` holds is not an earlier rescore of the same shard with the same scorers."""
    if isinstance(earlier.rescored, msgspec.UnsetType):
        return "it holds a shard that no rescore wrote"
    if earlier.rescored.source != new.rescored.source:  # type: ignore[union-attr]
        return f"it holds a rescore of another shard ({earlier.rescored.source})"
    if earlier.config_hash != new.config_hash:  # the source directory holds another run now (--fresh, another config)
        return f"its source {earlier.rescored.source} now holds another run (config {earlier.config_hash} -> {new.config_hash})"
    if [b.scorer_fingerprint for b in earlier.benchmarks] != [b.scorer_fingerprint for b in new.benchmarks]:
        used = ", ".join(f"{s.benchmark}: {s.scorer}" for s in earlier.rescored.scorers)
        return f"it was rescored with another scorer ({used})"
    return None


def rescore_benchmark(src: str, dst: str, b: BenchmarkRescore, own: Membership) -> None:
    """Stream one results file through the scorer (in a thread pool if the scorer asks for one),
    appending in source order after what an earlier rescore wrote; copy the trajectories. An ok
    record the scorer fails on becomes an `internal` error, as in a run."""
    name = b.manifest.name
    src_path, out_path = os.path.join(src, name, RESULTS_FILE), os.path.join(dst, name, RESULTS_FILE)
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    done = _lines_written(out_path)
    if done:
        log.info("%s/%s: resuming: %d record(s) already rescored", dst, name, done)
    problem = lru_cache(maxsize=4096)(b.data.problem)  # repeats of one problem are read once
    report = ReadReport(src_path)
    tally = {"ok": 0, "changed": 0, "copied": 0, "failed": 0}

    def score(item: tuple[ResultRecord, Problem | None]) -> tuple[bytes, bool, bool]:
        """(the record's line, whether its score changed, whether the scorer failed on it)."""
        record, p = item
        if p is None:
            return encode_line(record), False, False
        before, failed = record.score, False
        try:
            rescore_record(record, p, b.scorer, b.data)
            if (fault := score_fault(record)) is not None:  # as in a run: never written as a line no reader decodes
                unscorable(record, f"rescore: {b.info.scorer}", fault)
                failed = True
        except Exception as exc:  # as in a run: the scorer's failure is an `internal` error, never a score
            record.status, record.error_kind, record.error = "error", "internal", f"rescore: {type(exc).__name__}: {exc}"
            record.score, record.extracted, record.scores, failed = None, None, {}, True
        return encode_line(record), record.score != before, failed

    def items() -> Iterator[tuple[ResultRecord, Problem | None]]:
        for _, _, record in islice(scan_lines(src_path, ResultRecord, report), done, None):
            mine = record.status == "ok" and own.refuse(record) is None  # errors and others' records: copied
            tally["ok" if mine else "copied"] += 1
            yield record, problem(record.problem_idx) if mine else None  # problems are read here, in one thread

    started = time.perf_counter()
    workers = os.cpu_count() or 1
    pool = ThreadPoolExecutor(workers, "rescore") if b.scorer.score_in_thread else None
    try:
        with open_append(out_path) as out:
            stream = items()  # in source order: one batch in the pool at a time, one record at a time without
            while batch := list(islice(stream, 4 * workers if pool else 1)):
                for line, changed, failed in pool.map(score, batch) if pool else map(score, batch):
                    out.write(line)
                    tally["changed"] += changed
                    tally["failed"] += failed
    finally:
        if pool:
            pool.shutdown(wait=True)
    elapsed = time.perf_counter() - started
    copy_kept_files(src, dst, name)
    n = tally["ok"] + tally["copied"]
    log.info(
        "%s/%s: %d record(s): %d rescored with %s (%d changed score, %d failed: `internal` errors), %d copied "
        "(errors, not this shard's own); %.3f s, %.0f records/s",
        dst,
        name,
        n,
        tally["ok"],
        b.info.scorer,
        tally["changed"],
        tally["failed"],
        tally["copied"],
        elapsed,
        n / elapsed if elapsed > 0 else 0.0,
    )
    if (skipped := report.describe()) is not None:
        log.warning("%s (copied as merge reads them)", skipped)


def rejudge_benchmark(src: str, dst: str, b: BenchmarkRescore, own: Membership, manifest: Manifest, judges: JudgeServices) -> None:
    """Ask the judge again about every saved answer of the shard's own (`ok` records and `judge`
    errors; other errors and others' records are copied), in source order and resumable as
    `rescore_benchmark`. `judges` starts the judge the first time any shard asks for it."""
    import asyncio

    assert b.judge is not None
    name, spec = b.manifest.name, b.judge
    src_path, out_path = os.path.join(src, name, RESULTS_FILE), os.path.join(dst, name, RESULTS_FILE)
    os.makedirs(os.path.join(dst, LOGS_DIR), exist_ok=True)
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    done = _lines_written(out_path)
    problem = lru_cache(maxsize=4096)(b.data.problem)
    report = ReadReport(src_path)
    tally = {"judged": 0, "copied": 0, "delta": 0}

    async def go() -> None:
        ctx = ServiceContext(os.path.join(dst, LOGS_DIR), manifest.shard_idx, manifest.total_shards)  # the log of a judge started here
        judge = await judges.judge(spec.service, spec.config, spec.rubric, spec.params, spec.max_concurrent, ctx)

        async def one(record: ResultRecord) -> bytes:
            if not (own.refuse(record) is None and (record.status == "ok" or record.error_kind == "judge")):
                tally["copied"] += 1
                return encode_line(record)
            was_ok = record.status == "ok"
            if record.outcome == "truncated_reasoning":  # no answer within its budget: it stays 0, nothing to judge
                tally["copied"] += 1
                return encode_line(record)
            verdict = await judge.grade(problem(record.problem_idx), record.judged_text(), record.seed)
            apply_verdict(record, verdict)
            tally["judged"] += 1
            tally["delta"] += (record.status != "ok") - (not was_ok)
            return encode_line(record)

        with open_append(out_path) as out:
            stream = islice(scan_lines(src_path, ResultRecord, report), done, None)
            while batch := [record for _, _, record in islice(stream, 2 * spec.max_concurrent)]:
                for line in await asyncio.gather(*map(one, batch)):
                    out.write(line)

    started = time.perf_counter()
    judges.run(go())
    copy_kept_files(src, dst, name)
    log.info(
        "%s/%s: %d answer(s) judged again by %s, %d record(s) copied; %+d error(s); %.3f s",
        dst,
        name,
        tally["judged"],
        spec.service,
        tally["copied"],
        tally["delta"],
        time.perf_counter() - started,
    )


_ABSENT = object()


def rescore_record(record: ResultRecord, problem: Problem, scorer: Benchmark, data: Benchmark) -> None:
    """Replace the record's `extracted`, `score` and `scores` with the scorer's. Named scores the
    solver measured (not the run's own scorer: log-probabilities, nll) are kept and win on a clash,
    as when the record was made: they are the keys whose value the run's scorer does not give.
    The scorer reads only the answer (`ResultRecord.scored_text`); a reply cut off while it
    thought (`truncated_reasoning`) scores 0 with the named scores of no answer, as when it was made."""
    truncated = record.outcome == "truncated_reasoning"
    new = scorer.score(problem, "" if truncated else record.scored_text())
    if truncated:
        new = msgspec.structs.replace(new, score=0.0, extracted=None)
    if not isinstance(record.judge, msgspec.UnsetType):  # a judge scored it: its verdict and scores go, not kept as measured
        record.judge, record.scores = msgspec.UNSET, {}
    measured: dict[str, float] = {}
    if record.scores and data.scores_from == "scorer_and_solver":
        own = new if scorer is data else data.score(problem, "" if truncated else record.scored_text())
        measured = {k: v for k, v in record.scores.items() if own.scores.get(k, _ABSENT) != v}
    record.score, record.extracted = new.score, new.extracted
    record.scores = {**new.scores, **measured} if measured else new.scores


def read_sources(paths: dict[str, str], consumed: dict[str, SourceFile]) -> tuple[dict[str, SourceFile], str | None]:
    """Each source results file as it is now, and why one is not what an earlier rescore read
    (None: each still starts with the bytes it read). A file only appended to is the same source
    grown (its shard resumed after the rescore began): the rescore goes on into the new records.
    A file shorter, or whose first bytes differ, was truncated or rewritten (its run restarted
    with --fresh): the lines rescored so far would be duplicates or gaps, so it is refused."""
    now, why = {}, None
    for name, path in paths.items():
        before = consumed.get(name)
        now[name], prefix = source_file(path, before.bytes if before is not None else None)
        if before is None or why is not None:
            continue
        if now[name].bytes < before.bytes:
            why = f"its source {path} was truncated since it was rescored ({before.bytes} bytes then, {now[name].bytes} now)"
        elif prefix != before.sha256:
            why = f"its source {path} was rewritten since it was rescored (its first {before.bytes} bytes differ)"
    return now, why


def source_file(path: str, prefix: int | None = None) -> tuple[SourceFile, str | None]:
    """The file's size and hash, and the hash of its first `prefix` bytes (None when it is shorter).
    A missing file (a benchmark with no record) is empty."""
    import hashlib

    h, size, at_prefix = hashlib.sha256(), 0, None
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                if prefix is not None and size <= prefix < size + len(chunk):
                    head = h.copy()
                    head.update(chunk[: prefix - size])
                    at_prefix = "sha256:" + head.hexdigest()
                h.update(chunk)
                size += len(chunk)
    except FileNotFoundError:
        pass
    digest = "sha256:" + h.hexdigest()
    if prefix is not None and prefix == size:
        at_prefix = digest
    return SourceFile(bytes=size, sha256=digest), at_prefix


def _lines_written(path: str) -> int:
    """The whole lines an interrupted rescore wrote; a torn last line (its interrupted write) is cut
    off, since this file is derived and the next record rewrites it in full."""
    report, end, n = ReadReport(path), 0, 0
    for start, length, _ in scan_lines(path, WholeLine, report):
        n, end = n + 1, start + length
    if report.torn_tail or report.bad_lines:
        log.info("%s: cutting an interrupted write after its %d whole line(s)", path, n)
        os.truncate(path, end)
    return n


def copy_kept_files(src: str, dst: str, name: str) -> None:
    """The benchmark's files a rescore does not change, copied as they are: its trajectories and
    the thumbnails of the images it sent (for report.html)."""
    for file in (TRAJECTORIES_FILE, IMAGES_FILE):
        _copy_file(os.path.join(src, name, file), os.path.join(dst, name, file))


def _copy_file(src: str, dst: str) -> None:
    """Copy a file as it is (replaced atomically, so a rerun copies it again whole)."""
    if not os.path.exists(src):
        return
    tmp = f"{dst}.tmp"
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def describe(info: ScorerInfo) -> str:
    """One line naming a scorer, for logs and the report."""
    by = f" from {info.plugin_version or info.plugin}" if info.plugin else ""
    params = f" with {msgspec.json.encode(info.params).decode()}" if info.params else ""
    return f"{info.benchmark}: {info.scorer}{params}{by} (scorer {info.fingerprint})"
