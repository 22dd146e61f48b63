"""Every fingerprint rule in one place: which results may be compared, resumed, merged or reused.

- the *config hash* (`config_hash`): everything in a config that changes results (seeds, each
  benchmark's keys, its solver's generation, the identity of the services it asks, its judge),
  and nothing else (URLs, ports, timeouts, concurrency, the cluster, the cache). Shards, resumes
  and merges compare it; a refused resume names what changed (`identity_changes`).
- a *service's identity* (`service_identity`): the keys of its section its plugin declares as
  changing results (`ServiceConfig.identity()`), else every key of its own section.
- a *judge's identity* (`judge_identity`) and a *rubric's* (`rubric_identity`): who judges, and how.
- the *prompt* fingerprint hashes the problems as the benchmark renders them (prompt or turns,
  reference, metadata) at a fixed set of probe indices spread over the dataset. Every shard
  computes the same probes, so two shards agree exactly when their rendering agrees, whatever
  range each one owns. A changed prompt template changes it, even where the data file did not.
- the *scorer* fingerprint hashes the scorer's declared version (`Benchmark.scorer_version`, else
  the version of the plugin that provides it) and, for scorers cheap enough to call at start-up
  (not `score_in_thread`), the scores it gives the probe problems' own reference and an empty
  answer: a changed extraction rule changes it even when nobody bumped a version.
- a *response cache key* (`response_key`): the asking service's identity, the protocol and the
  request body as sent.

The dataset fingerprint (`Benchmark.fingerprint`) is the benchmark's own: it says the rows are
the same; these say the rest is too. Hashes are over `canonical_json` (or msgspec's sorted JSON
for the fingerprints): changing any rule here changes identities users have recorded.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import msgspec

from shardeval.benchmark import Benchmark
from shardeval.benchmark.rubric import JUDGING_VERSION, Rubric
from shardeval.config import DEFAULT_REASONING_TAGS, Config, JudgeConfig, ServiceConfig
from shardeval.config.loading import config_from_data
from shardeval.config.diff import changes
from shardeval.config.sweep import model_config
from shardeval.store.records import BenchmarkManifest


def canonical_json(data: Any) -> bytes:
    """Sorted keys, no spaces, UTF-8, floats as Python writes them: the same bytes from any JSON
    library that follows these rules, so a hash never depends on one encoder's quirks."""
    plain = msgspec.to_builtins(data, str_keys=True)
    return json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def config_hash(config: Config) -> str:
    """A fingerprint of everything that changes results, and nothing else.

    Shards and resumed runs compare it: URLs, ports, API key names, timeouts, retries, concurrency,
    output settings, the cluster (shard count included) and the response cache may differ between them; seeds,
    prompts, generation parameters, repeats and the model may not.
    """
    if config.sweep is not None:  # a sweep's identity: that of each model's run, in order
        runs = {name: config_hash(model_config(config, name)) for name in config.sweep.services}
        return f"sha256:{hashlib.sha256(canonical_json(runs)).hexdigest()[:16]}"
    benchmarks = []
    for bench in config.benchmarks:
        service, solver = config.service_of(bench.solver), bench.solver
        benchmarks.append(
            {
                **({} if bench.id is None else {"id": bench.id}),  # absent: older hashes stay valid
                "name": bench.name,
                "params": bench.params,
                "repeats": bench.repeats,
                "max_problems": bench.max_problems,
                "solver": {
                    "type": solver.type,
                    "system_prompt": solver.system_prompt,
                    "generation": solver.generation,
                    "service": service_identity(service) if service is not None else None,
                },
                **({} if bench.judge is None else {"judge": judge_identity(bench.judge, config.services.get(bench.judge.service))}),
            }
        )
    payload = {"seed": config.seed, "shuffle_seed": config.shuffle_seed, "benchmarks": benchmarks}
    return f"sha256:{hashlib.sha256(canonical_json(payload)).hexdigest()[:16]}"


def service_identity(config: ServiceConfig) -> dict[str, Any]:
    """The parts of a service config that change results (for the config hash and the response
    cache key), as its plugin declares them in `identity()`; a plugin that declares nothing gets
    every key of its own section."""
    declared = config.identity()
    if declared is None:
        shared = {f.name for f in msgspec.structs.fields(ServiceConfig)}
        declared = {f.name: getattr(config, f.name) for f in msgspec.structs.fields(config) if f.name not in shared}
    # how its replies are split into thinking and answer (docs/reasoning.md): only when not the
    # default, so identities from before it existed stay what they were
    tags = {} if config.reasoning_tags == DEFAULT_REASONING_TAGS else {"reasoning_tags": config.reasoning_tags}
    thinking = {} if config.reasoning is None else {"reasoning": config.reasoning}  # how much it is asked to think
    return {"type": config.type, "protocol": config.protocol, **declared, **tags, **thinking}


def judge_identity(judge: JudgeConfig, service: ServiceConfig | None) -> dict[str, Any]:
    """What of a benchmark's judge changes its scores: the judge service's declared identity, the
    mode, rubric, verdict pattern and generation. Absent for benchmarks without a judge."""
    return {
        "service": service_identity(service) if service is not None else judge.service,
        "mode": judge.mode,
        "rubric": judge.rubric,
        "verdict": judge.verdict,
        "generation": judge.generation,
    }


def rubric_identity(rubric: Rubric) -> dict[str, Any]:
    """What of a rubric changes verdicts: the version of the default rubrics and parsers, the
    mode, the template and the pattern. It joins the benchmark's scorer fingerprint."""
    return {"judging": JUDGING_VERSION, "mode": rubric.mode, "template": rubric.template, "pattern": rubric.pattern}


def identity_view(config: Config) -> dict[str, Any]:
    """The parts of a Config that its hash covers (`config_hash`), laid out as the config file
    lays them out: seed, shuffle_seed, each benchmark's identity keys, and the identity
    (`service_identity`) of each service a benchmark's solver or judge uses."""
    used: dict[str, Any] = {}
    benchmarks = []
    for bench in config.benchmarks:
        solver = bench.solver
        entry = {
            "id": bench.id,
            "name": bench.name,
            "params": bench.params,
            "repeats": bench.repeats,
            "max_problems": bench.max_problems,
            "solver": {
                "type": solver.type,
                "service": solver.service,
                "system_prompt": solver.system_prompt,
                "generation": solver.generation,
            },
        }
        names = [solver.service]
        if bench.judge is not None:
            judge = bench.judge
            entry["judge"] = {
                "service": judge.service,
                "mode": judge.mode,
                "rubric": judge.rubric,
                "verdict": judge.verdict,
                "generation": judge.generation,
            }
            names.append(judge.service)
        for name in names:
            if name is not None and name in config.services:
                used[name] = service_identity(config.services[name])
        benchmarks.append(entry)
    view = {"seed": config.seed, "shuffle_seed": config.shuffle_seed, "services": used, "benchmarks": benchmarks}
    return msgspec.to_builtins(view, str_keys=True)


def identity_changes(old_config: dict[str, Any], new_config: dict[str, Any]) -> list[str]:
    """What of the run identity differs between two recorded configs (plain data, as a manifest
    holds them), key by key (shardeval.config.diff.changes). Both are read back as Configs; one
    that no longer reads (written by another version, a plugin gone) is compared whole, as recorded."""
    try:
        old, new = identity_view(config_from_data(old_config)), identity_view(config_from_data(new_config))
    except Exception:
        return changes(old_config, new_config)
    return changes(old, new)


def response_key_prefix(service: ServiceConfig) -> bytes:
    """The identity part of a response cache key: the asking service's declared identity (as the
    config hash has it), in canonical JSON, then a newline."""
    return canonical_json(service_identity(service)) + b"\n"


def response_key(prefix: bytes, protocol: str, payload: bytes) -> str:
    """A response cache key: SHA-256 over the service's identity (`response_key_prefix`), the
    protocol (chat or completions) and `payload`, the request body as sent, encoded with sorted
    keys (the same body, the same bytes)."""
    digest = hashlib.sha256(prefix)
    digest.update(protocol.encode() + b"\n")
    digest.update(payload)
    return digest.hexdigest()


N_PROBES = 8


def probe_indices(n_problems: int, k: int = N_PROBES) -> list[int]:
    """Up to k indices spread evenly over [0, n_problems), first and last included."""
    if n_problems <= k:
        return list(range(n_problems))  # empty for no problems
    return sorted({round(i * (n_problems - 1) / (k - 1)) for i in range(k)})


def _digest(payload: Any) -> str:
    return "sha256:" + hashlib.sha256(msgspec.json.encode(payload, order="sorted")).hexdigest()[:16]


def prompt_fingerprint(benchmark: Benchmark, n_problems: int) -> str:
    """How the benchmark renders its probe problems: the same on every shard of one run."""
    return _digest([msgspec.to_builtins(p) for p in benchmark.problems(probe_indices(n_problems))])


def scorer_fingerprint(benchmark: Benchmark, n_problems: int, provider_version: str | None, scorer: Any = None) -> str:
    """The scorer's declared version and, where cheap, its behaviour on fixed probe answers.

    `scorer` (default: the benchmark itself) is whatever scores the benchmark's problems: another
    benchmark's `score` when `shardeval rescore` is given one."""
    scorer = benchmark if scorer is None else scorer
    version = scorer.scorer_version or provider_version
    payload: dict[str, Any] = {"scorer": f"{type(scorer).__module__}.{type(scorer).__qualname__}", "version": version}
    if not scorer.score_in_thread:
        payload["probes"] = [
            [_probe_score(scorer, p, text) for text in (p.reference or "", "")] for p in benchmark.problems(probe_indices(n_problems))
        ]
    return _digest(payload)


def judged_fingerprint(scorer: str, rubric: Rubric, judge: dict[str, Any]) -> str:
    """The scorer fingerprint of a benchmark a judge scores: its own scorer's, the rubric in
    effect (`rubric_identity`) and who judges (`judge_identity`), so answers judged differently
    never mix, in a run (whose config hash has the judge too) or a rescore (which keeps its
    source's config hash)."""
    return _digest({"benchmark": scorer, "judge": rubric_identity(rubric), "judged_by": judge})


def _probe_score(benchmark: Benchmark, problem: Any, text: str) -> Any:
    try:
        score = benchmark.score(problem, text)
    except Exception as exc:  # a scorer that rejects a probe answer: how it fails is behaviour too
        return f"raises {type(exc).__name__}"
    return msgspec.to_builtins(score)


# What a fingerprint attests, as a refusal names it.
COMPARED = (("dataset_fingerprint", "data"), ("prompt_fingerprint", "prompts"), ("scorer_fingerprint", "scorer"))


def incomparable(a: BenchmarkManifest, b: BenchmarkManifest, label_a: str = "A", label_b: str = "B") -> str | None:
    """Why two runs of one benchmark (their BenchmarkManifests) are not the same questions asked
    and scored the same way, so a paired difference between them would mean nothing; None when
    every fingerprint both record agrees. A fingerprint one of them lacks (a shard written before
    it existed) cannot be compared and is passed over. Runs of different numbers of problems
    (another `max_problems`) are not compared either, and said so: their prompt and scorer
    fingerprints, taken at probes spread over each run's own problems, differ whatever the
    rendering, so naming them as the reason would be wrong."""
    n_a, n_b = getattr(a, "n_problems", None), getattr(b, "n_problems", None)
    sized = n_a is not None and n_b is not None and n_a != n_b
    parts = [
        f"the {label} differ{'s' if label == 'scorer' else ''} ({label_a} {x}, {label_b} {y})"
        for attr, label in COMPARED
        if (x := getattr(a, attr, None)) is not None
        and (y := getattr(b, attr, None)) is not None
        and x != y
        and not (sized and attr != "dataset_fingerprint")
    ]
    if sized:
        parts.append(
            f"they ask different numbers of problems ({label_a} {n_a}, {label_b} {n_b}: another max_problems), "
            "so their prompts and scorer cannot be checked against each other"
        )
    return "; ".join(parts) or None
