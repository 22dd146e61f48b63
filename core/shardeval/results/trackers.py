"""Results where teams already look: a merged run or sweep as tracker runs (MLflow, W&B, Inspect logs).

`shardeval export RUN --to NAME` and a config's `export:` list both come here. The core merges
first (as `shardeval merge` does: merged/ is written, scores.json and report.html included), then
describes what to export as plain data, a TrackerExport of TrackerRuns, and hands it to the
target's exporter (a plugin: the `register_exporters` hook). The rules every target keeps are
decided here, once, so MLflow, W&B and Inspect read the same (docs/export.md):

- One tracker run per (model, benchmark). Its `key` is `<run id>/<benchmark>`, where the run id is
  the model's own config hash (shardeval.store.records.run_id): a target finds its tracker run by
  that key and updates it, and never makes a second. A sweep re-exported after a new checkpoint
  adds only that model's runs, since the other models' run ids did not change. A PARTIAL run
  exported and later completed updates the same tracker run, whose `status` says which it was.
- `step`: the checkpoint number in a sweep model's name (`step2000`, `ckpt-500`, `iter_0001000`,
  `checkpoint-3`: 2000, 500, 1000, 3), else the model's position in the sweep; 0 for a plain run.
- `params` never change for a key (what was evaluated, on what, with what), `tags` may (the
  status, the version that exported it); `metrics` hold every metric's value, interval bounds and
  n, the cell counts, and in a sweep the paired difference against the baseline, under names every
  tracker accepts (`metric_name`): `accuracy`, `accuracy_ci_low`, `accuracy_ci_high`, `accuracy_n`,
  `vs_baseline/accuracy/diff`; for a benchmark whose answers thought (scores.json's `reasoning`),
  the answers cut off while thinking and after answering, counts and rates, and the thinking
  tokens' statistics (`REASONING_METRICS`).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Collection, Sequence

import msgspec

from shardeval import __version__, plugins
from shardeval.config import ExportConfig
from shardeval.config.loading import decode_exports
from shardeval.errors import ShardError, UsageError
from shardeval.explain import Where
from shardeval.results.export import export as export_table
from shardeval.results.merge import COMPLETE, ERRORS, PARTIAL, MergeResult
from shardeval.results.outputs import REPORT_HTML
from shardeval.results.report import counts, scores_document
from shardeval.results.sweep_merge import Merged, ModelMerge, merge_any
from shardeval.store.discover import EXPORT_FILE, MERGED_DIR, read_export_list
from shardeval.store.records import run_id

SCORES_JSON = "scores.json"
# A checkpoint number: the digits after one of these words, the last such in the name.
_STEP = re.compile(r"(?i)(?:global[_-]?step|step|iter(?:ation)?|checkpoint|ckpt|epoch)[-_=]?(\d+)")
_UNSAFE = re.compile(r"[^A-Za-z0-9_\-. :]")


def metric_name(name: str) -> str:
    """A metric's name as every tracker takes it: MLflow refuses `@` and most punctuation, so
    `pass@1` becomes `pass_at_1` and anything else outside [A-Za-z0-9_-. :] an underscore. A `/`
    too: MLflow's file store makes it a folder, and `x` beside `x/y` could not both be stored."""
    return _UNSAFE.sub("_", name.replace("@", "_at_"))


def checkpoint_step(name: str | None, position: int) -> int:
    """The checkpoint number in a model's name (`step2000` → 2000), else its position in the sweep."""
    if name:
        found = _STEP.findall(name)
        if found:
            return int(found[-1])
        if name.isdigit():
            return int(name)
    return position


@dataclass
class TrackerRun:
    """One (model, benchmark) of a merged run or sweep: what one tracker run holds."""

    key: str  # `<run id>/<benchmark>`: how a target finds its tracker run again
    run_id: str  # the first 12 hex digits of the model's config hash
    config_hash: str
    model: str  # the sweep's service, or `model` for a plain run
    benchmark: str
    step: int
    status: str  # COMPLETE, PARTIAL (cells missing) or ERRORS (every cell answered, some in error)
    params: dict[str, str]  # identity: never changes for a key
    tags: dict[str, str]  # may change between exports: status, who exported
    metrics: dict[str, float]  # tracker-safe names (metric_name) -> value; only finite values
    scores: dict[str, Any]  # this benchmark's entry of scores.json, as written
    vs_baseline: list[dict[str, Any]]  # a sweep's paired differences for it (sweep.json rows); [] for the baseline or a run
    run_root: str  # the model's run directory (its shard_<i>/ folders)
    merged_dir: str  # where its merge was written: scores.json, report.html, <benchmark>/results.jsonl, trajectories.jsonl
    merge: MergeResult = field(repr=False)  # the merge of the model's run it comes from

    @property
    def name(self) -> str:
        """The tracker run's display name."""
        return f"{self.model}/{self.benchmark}"

    def artifacts(self, folder: str) -> list[str]:
        """The files to attach: the per-sample table (written into `folder`: Parquet when pyarrow
        is installed, else JSONL), scores.json and report.html (when the merge drew it)."""
        try:
            import pyarrow  # noqa: F401

            fmt = "parquet"
        except ImportError:
            fmt = "jsonl"
        table = os.path.join(folder, f"samples.{fmt}")
        export_table(self.run_root, table, fmt, allow_mixed_models=True, benchmarks={self.benchmark})
        found = [os.path.join(self.merged_dir, name) for name in (SCORES_JSON, REPORT_HTML)]
        return [table, *[path for path in found if os.path.exists(path)]]

    def results_file(self) -> str:
        """merged/<benchmark>/results.jsonl: its standing records in (problem, repeat) order."""
        return os.path.join(self.merged_dir, self.benchmark, "results.jsonl")

    def trajectories_file(self) -> str:
        """merged/<benchmark>/trajectories.jsonl: the conversation of each standing record."""
        return os.path.join(self.merged_dir, self.benchmark, "trajectories.jsonl")


@dataclass
class TrackerExport:
    """A merged run (one model) or sweep (each model) as the tracker runs a target writes."""

    root: str
    sweep: bool
    baseline: str | None  # a sweep's baseline model
    runs: list[TrackerRun]
    verdict: str  # the merge's verdict line: COMPLETE, or PARTIAL/ERRORS with counts
    notes: list[str] = field(default_factory=list)  # models with nothing to export yet


def _provenance(result: MergeResult) -> dict[str, str]:
    """Where and with what the run's shards ran; a fact that varies lists every value."""
    facts: dict[str, set[str]] = {}
    for shard in result.run.shards:
        m, p = shard.manifest, shard.manifest.provenance
        for name, value in (
            ("shardeval_version", p.shardeval if p else m.version),
            ("build", p and p.build_id),
            ("python", p and p.python),
            ("platform", p and p.platform),
            ("host", p and p.host),
        ):
            if value:
                facts.setdefault(name, set()).add(str(value))
    return {name: ", ".join(sorted(values)) for name, values in facts.items()}


def _served(result: MergeResult, bench_index: int) -> dict[str, str]:
    """The model the benchmark asked, as its endpoint reported it (first shard that knows)."""
    for shard in result.run.shards:
        manifest = shard.manifest
        service = manifest.benchmarks[bench_index].service if bench_index < len(manifest.benchmarks) else None
        served = manifest.served.get(service) if service else next(iter(manifest.served.values()), None)
        if served is not None:
            found = {"served_model": served.model, "weights": served.root, "max_model_len": served.max_model_len}
            return {k: str(v) for k, v in found.items() if v is not None}
    return {}


# A benchmark's ReasoningCounts (scores.json's `reasoning`) as tracker metrics: name -> its value.
REASONING_METRICS: dict[str, Callable[[Any], Any]] = {
    "truncated_reasoning": lambda r: r.truncated_reasoning,
    "truncated_reasoning_rate": lambda r: r.truncated_reasoning_rate,
    "truncated": lambda r: r.truncated,
    "truncated_rate": lambda r: r.truncated_rate,
    "with_reasoning": lambda r: r.with_reasoning,
    "reasoning_tokens_n": lambda r: r.reasoning_tokens and r.reasoning_tokens.n,
    "reasoning_tokens_mean": lambda r: r.reasoning_tokens and r.reasoning_tokens.mean,
    "reasoning_tokens_p50": lambda r: r.reasoning_tokens and r.reasoning_tokens.p50,
    "reasoning_tokens_p90": lambda r: r.reasoning_tokens and r.reasoning_tokens.p90,
    "reasoning_tokens_max": lambda r: r.reasoning_tokens and r.reasoning_tokens.max,
}


def _metrics(entry: dict[str, Any], vs: list[dict[str, Any]]) -> dict[str, float]:
    out: dict[str, Any] = {k: entry[k] for k in ("n_expected", "n_ok", "n_errors", "n_missing")}
    if (reasoning := entry.get("reasoning")) is not None:  # absent for a model that does not think: no metric
        out |= {name: value(reasoning) for name, value in REASONING_METRICS.items()}
    for name, value in entry["metrics"].items():
        base = metric_name(name)
        out |= {base: value.value, f"{base}_ci_low": value.ci_low, f"{base}_ci_high": value.ci_high, f"{base}_n": value.n}
    for row in vs:
        base = f"vs_baseline/{metric_name(row['metric'])}"
        out |= {f"{base}/{part}": row.get(part) for part in ("diff", "ci_low", "ci_high", "p_value", "p_holm", "n")}
    return {k: float(v) for k, v in out.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def _chosen(models: Sequence[ModelMerge], services: Collection[str] | None) -> list[tuple[int, ModelMerge]]:
    """The models to export, each with its position in the sweep (its step when its name has none)."""
    return [(position, m) for position, m in enumerate(models) if services is None or m.service in services]


def gate_tags(doc: dict[str, Any] | None, service: str | None, benchmark: str) -> dict[str, str]:
    """A sweep model's verdict against the baseline (`sweep.gate`, docs/decisions.md) as tags: the
    model's (`shardeval.gate`) and this benchmark's (`shardeval.gate.benchmark`); none without a rule
    or for the baseline. Tags, not params: a verdict may change while the model's cells complete."""
    gate = doc.get("gate") if doc is not None else None
    if not gate:
        return {}
    model = next((m for m in gate["models"] if m["service"] == service), None)
    if model is None:
        return {}
    row = next((r for r in model.get("benchmarks", []) if r.get("benchmark") == benchmark), None)
    tags = {"shardeval.gate": str(model.get("verdict")), "shardeval.gate.margin": f"{gate['rule']['margin']:g}"}
    return tags | ({"shardeval.gate.benchmark": str(row.get("verdict"))} if row is not None else {})


def tracker_key(run_id: str, model: str | None, benchmark: str) -> str:
    """`<run id>/<benchmark>`; a sweep's model (`model`) is named too: two models whose configs
    hash alike (checkpoints behind one endpoint, a simulator's `root`) are still two tracker runs."""
    return f"{run_id}/{model}/{benchmark}" if model is not None else f"{run_id}/{benchmark}"


def tracker_export(merged: Merged, services: Collection[str] | None = None) -> TrackerExport:
    """The tracker runs of a merge (shardeval.results.sweep_merge.Merged: a run's or a sweep's);
    with `services`, of those models of a sweep only (a watched sweep exports the new checkpoint:
    the others are in the tracker already, at their steps, which stay theirs)."""
    doc = merged.sweep_document
    sweep = doc is not None
    runs, notes = [], []
    for position, model in _chosen(merged.models, services):
        if model.result is None:
            notes.append(f"{model.service}: {model.note or 'nothing merged'}; nothing exported for it")
            continue
        result = model.result
        scores = scores_document(result)
        config_hash = result.run.config_hash
        rid = run_id(config_hash)
        name = model.service or "model"
        step = checkpoint_step(model.service, position) if sweep else 0
        merged_dir = os.path.join(result.run.root, MERGED_DIR)
        provenance = _provenance(result)
        for i, b in enumerate(result.benchmarks):
            bench, c = b.manifest.name, counts(b)
            status = PARTIAL if c["n_missing"] else ERRORS if c["n_errors"] else COMPLETE
            vs = [row for row in (doc or {}).get("vs_baseline", []) if row["service"] == model.service and row["benchmark"] == bench]
            key = tracker_key(rid, model.service, bench)  # a sweep's models are named (service None: a run)
            params = {
                "shardeval.run_id": rid,
                "config_hash": config_hash,
                "model": name,
                "benchmark": bench,
                **_served(result, i),
                "repeats": str(b.manifest.repeats),
                "n_problems": str(b.manifest.n_problems),
                "dataset_fingerprint": b.manifest.dataset_fingerprint or "",
                "prompt_fingerprint": b.manifest.prompt_fingerprint or "",
                "scorer_fingerprint": b.manifest.scorer_fingerprint or "",
                **provenance,
            }
            tags = {
                "shardeval.key": key,
                "shardeval.run_id": rid,
                "shardeval.model": name,
                "shardeval.benchmark": bench,
                "shardeval.status": status,
                "shardeval.partial": str(status == PARTIAL).lower(),
                "shardeval.step": str(step),
                "shardeval.exported_by": __version__,
                "shardeval.root": os.path.abspath(merged.root),
                **({"shardeval.baseline": doc["baseline"]} if doc is not None else {}),
                **gate_tags(doc, model.service, bench),
            }
            runs.append(
                TrackerRun(
                    key=key,
                    run_id=rid,
                    config_hash=config_hash,
                    model=name,
                    benchmark=bench,
                    step=step,
                    status=status,
                    params={k: v for k, v in params.items() if v != ""},
                    tags=tags,
                    metrics=_metrics(scores[bench], vs),
                    scores=scores[bench],
                    vs_baseline=vs,
                    run_root=result.run.root,
                    merged_dir=merged_dir,
                    merge=result,
                )
            )
    return TrackerExport(os.path.abspath(merged.root), sweep, doc["baseline"] if doc is not None else None, runs, merged.verdict, notes)


Exporter = Callable[[ExportConfig, TrackerExport], list[str]]


def exporter(target: ExportConfig) -> Exporter:
    return plugins.registry().get("exporters", target.to, where="export").factory


def check_target(target: ExportConfig) -> None:
    """What can be checked before any merge: the target's library is installed (its `check()`)."""
    target.check()


def run_export(target: ExportConfig, export: TrackerExport) -> list[str]:
    """Export to one target: its lines for the user. A target's failure is one line: a UsageError
    (exit 2: a missing extra, a bad value) or a ShardError (exit 1: the tracker unreachable or
    refusing), never a traceback."""
    try:
        return exporter(target)(target, export) or []
    except (UsageError, ShardError):
        raise
    except Exception as exc:  # the tracker's library failing in its own words: one line, not its traceback
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        raise ShardError(f"export to {target.to} failed: {type(exc).__name__}: {first}") from None


def configured_targets(merged: Merged) -> list[ExportConfig]:
    """The `export:` list of the last launch (<root>/export.json), else of the config the run's
    shards ran with (their manifests record it: shards run by hand, then `merge --export`)."""
    entries = read_export_list(merged.root)
    if entries is not None:
        return decode_exports(entries, Where(source=os.path.join(merged.root, EXPORT_FILE)))
    for model in merged.models:
        if model.result is not None and model.result.run.shards:
            entries = model.result.run.shards[0].manifest.config.get("export") or []
            return decode_exports(entries, Where(source="manifest.json"))
    return []


def export_after_merge(
    merged: Merged, warn: Callable[[str], None], say: Callable[[str], None], services: Collection[str] | None = None
) -> None:
    """The end of a launch: each configured target in turn. A failure is a warning and never fails
    the merge, whose files are already written. `services`: only those models of a sweep (as
    `tracker_export`)."""
    try:
        targets = configured_targets(merged)
    except UsageError as exc:
        warn(f"export: {exc}")
        return
    if not targets:
        return
    export = tracker_export(merged, services)
    for target in targets:
        try:
            check_target(target)
            for line in run_export(target, export):
                say(line)
        except (UsageError, ShardError) as exc:
            warn(
                f"export to {target.to} not done: {exc} (the merged results are written; `shardeval export "
                f"{export.root} --to {target.to}` tries again)"
            )


def flags_without_target(dests: list[str]) -> str:
    """The line for tracker flags given without --to: which targets take them."""
    declared = [f for f in plugins.export_flags() if f.dest in dests]
    names = sorted({f.flag for f in declared})
    targets = sorted({f.target for f in declared})
    return f"{', '.join(names)}: only with --to (a tracker); add {' or '.join(f'--to {t}' for t in targets)}, or drop it"


def target_from_flags(target: str, options: dict[str, str | None]) -> ExportConfig:
    """`--to NAME` and its flags as that target's config section: each flag sets the key its plugin
    declared for it (hookspecs.export_flags); `-o` (`output`) is the core's and sets `dir`. A flag
    of another target is refused, naming the flags this one takes."""
    struct = plugins.registry().get("exporters", target, where="--to").config
    fields = {f.name: f for f in msgspec.structs.fields(struct)} if struct is not None else {}
    keys = {f.dest: (f.flag, f.key) for f in plugins.export_flags() if f.target == target and f.key in fields}
    if "dir" in fields:
        keys["output"] = ("-o", "dir")
    section: dict[str, str] = {"to": target}
    for dest, value in options.items():
        if value is not None and dest not in keys:
            flag = next((f.flag for f in plugins.export_flags() if f.dest == dest), "-o" if dest == "output" else dest)
            takes = ", ".join(flag for flag, _ in keys.values()) or "none"
            raise UsageError(f"{flag}: not an option of --to {target} (it takes {takes})")
        if value is not None:
            section[keys[dest][1]] = value
    for flag, key in keys.values():
        if fields[key].required and key not in section:
            raise UsageError(
                f"--to {target} needs {flag} (e.g. {flag} {'DIR' if key == 'dir' else key.upper()}); see `shardeval export --help`"
            )
    return decode_exports([section], Where(source="command line"), at="--to")[0]


def export_to(
    root: str, target: str, options: dict[str, str | None], fmt: str | None, allow_mixed_models: bool, echo: Callable[..., None]
) -> None:
    """`shardeval export ROOT --to TARGET`: the target checked before any merge, then the merge
    (written as `shardeval merge` writes it), then the export; `echo` as click's."""
    if fmt is not None:
        raise UsageError(f"--format {fmt}: only for a file (-o); a tracker (--to {target}) takes no format")
    config = target_from_flags(target, options)
    check_target(config)  # the tracker's library is installed, the folder writable: before any merge
    merged = merge_any(root, allow_mixed_models=allow_mixed_models)
    for line in merged.warnings:
        echo(f"shardeval: warning: {line}", err=True)
    for notice in merged.notices:
        echo(f"shardeval: {notice}", err=True)
    export = tracker_export(merged)
    for note in export.notes:
        echo(f"shardeval: {note}", err=True)
    for line in run_export(config, export):
        echo(line)
    if export.verdict != COMPLETE:
        echo(
            f"shardeval: exported a run that is not complete: {export.verdict} (each tracker run says its status; "
            "export again when it is, and the same tracker runs are updated)",
            err=True,
        )
