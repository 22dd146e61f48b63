"""`shardeval gate` (GO / NO-GO / INCONCLUSIVE, exit 0 / 4 / 5) and `shardeval plan` (the problems
a decision needs). The statistics are shardeval_metrics.decision's; docs/decisions.md.

Runs are read as compare reads them (merge_run, deduplicated, errors apart), and only benchmarks
asked the same way are paired (`incomparable`): runs that share none are one line, exit 2.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from shardeval.api.metric import GateRule, ScoreTable
    from shardeval.api.pages import BenchmarkMerge
    from shardeval_metrics.decision import BenchmarkDecision, GateResult, NotCompared, Requirement, SweepGate

GATE_FILE = "gate.json"
PRIMARY = ("accuracy", "mean")  # the primary score's mean, as compare and a sweep pair it


def _benches(value: str | None) -> list[str] | None:
    return [b.strip() for b in value.split(",") if b.strip()] if value else None


def _merged(run: str, alpha: float, errors_as_wrong: bool) -> dict[str, BenchmarkMerge]:
    from shardeval.api.metric import MetricOptions
    from shardeval.api.records import merge_run

    options = MetricOptions(confidence=1.0 - 2.0 * alpha)
    return {x.manifest.name: x for x in merge_run(run, errors_as_wrong=errors_as_wrong, options=options, keep_ids=True).benchmarks}


def _table(merge: BenchmarkMerge, metric: str) -> tuple[ScoreTable | None, str | None]:
    """The table whose primary score the gate pairs, or why none: the primary score for
    accuracy / mean (a benchmark whose headline metric is one of them), else the records'
    `scores[metric]`."""
    from shardeval.api.metric import headline_metric

    table = merge.table
    if metric in PRIMARY:
        if headline_metric(merge.manifest.metrics) is None:
            return None, (
                f"its metrics ({', '.join(merge.manifest.metrics)}) are no mean of per-answer scores; "
                "the gate pairs answers (accuracy, mean, or a record's scores.KEY)"
            )
        return table, None
    if metric not in table.extra:
        return None, f"its records carry no scores.{metric} (they have: {', '.join(sorted(table.extra)) or 'none'})"
    return dataclasses.replace(table, score=table.extra[metric]), None


def only(
    a: dict[str, BenchmarkMerge], b: dict[str, BenchmarkMerge], benches: list[str] | None
) -> tuple[dict[str, BenchmarkMerge], dict[str, BenchmarkMerge]]:
    """The two runs' benchmarks that `--bench` names (all without it); one it names that the runs
    do not both hold is one line, exit 2."""
    from shardeval.api.plugin import UsageError

    shared = [name for name in a if name in b]
    if benches is None or not shared:
        return a, b
    if unknown := [x for x in benches if x not in shared]:
        raise UsageError(f"--bench {','.join(unknown)}: not a benchmark both runs hold; they share {', '.join(shared)}")
    return {n: m for n, m in a.items() if n in benches}, {n: m for n, m in b.items() if n in benches}


def gate_runs(
    base: str,
    cand: str,
    a: dict[str, BenchmarkMerge],
    b: dict[str, BenchmarkMerge],
    *,
    margin: float,
    alpha: float,
    target_power: float,
    metric: str,
    benches: list[str] | None,
) -> GateResult:
    """The gate of candidate run `cand` against `base`, both merged; refused (UsageError) as compare
    refuses runs that share no benchmark or ask none the same way."""
    from shardeval import __version__
    from shardeval.api.plugin import UsageError
    from shardeval_metrics.command import pairable
    from shardeval_metrics.decision import NotCompared, decide_summary, gate, summarize

    a, b = only(a, b, benches)
    shared = [name for name in a if name in b]
    apart = pairable(base, cand, a, b, "gate")
    not_compared: list[NotCompared] = []
    decisions: list[BenchmarkDecision] = []
    for name in shared:
        ta, why = _table(a[name], metric)
        tb, why_b = _table(b[name], metric)
        why = apart.get(name) or why or why_b
        if why is not None or ta is None or tb is None:
            not_compared.append(NotCompared(name, why or "no table"))
            continue
        decisions.append(decide_summary(summarize(ta, tb, alpha), margin, alpha, target_power))
    if not decisions:
        listed = "; ".join(f"{x.benchmark}: {x.why}" for x in not_compared)
        raise UsageError(f"--metric {metric}: no benchmark of {base} and {cand} can be gated on it ({listed})")
    return gate(
        decisions,
        base=base,
        candidate=cand,
        margin=margin,
        alpha=alpha,
        target_power=target_power,
        metric=metric,
        not_compared=not_compared,
        version=__version__,
    )


def gate_pairs(
    pairs: list[tuple[ScoreTable, ScoreTable]],
    rule: GateRule,
    benchmarks: list[str],
    metrics: list[str],
    not_compared: dict[str, str],
    baseline: str,
    candidate: str,
) -> dict[str, Any]:
    """A sweep model's gate (the `gate_verdicts` hook; sweep.json's `gate`): the same decisions
    and overall rule as `shardeval gate` on the two runs, as gate.json holds them. A pair whose
    headline metric is no mean of per-answer scores is not compared, as the command's --metric
    accuracy leaves it out."""
    import msgspec

    from shardeval import __version__
    from shardeval_metrics.decision import NotCompared, decide_summary, gate, summarize

    apart = [NotCompared(name, why) for name, why in not_compared.items()]
    decisions: list[BenchmarkDecision] = []
    for (ta, tb), name, metric in zip(pairs, benchmarks, metrics):
        if metric not in PRIMARY:
            apart.append(NotCompared(name, f"its headline metric ({metric}) is no mean of per-answer scores"))
            continue
        decisions.append(decide_summary(summarize(ta, tb, rule.alpha), rule.margin, rule.alpha, rule.power))
    result = gate(
        decisions,
        base=baseline,
        candidate=candidate,
        margin=rule.margin,
        alpha=rule.alpha,
        target_power=rule.power,
        metric="accuracy",
        not_compared=apart,
        version=__version__,
    )
    return msgspec.to_builtins(result)


def render_gate(result: GateResult) -> list[str]:
    from shardeval.api.records import fmt, md_text, percent

    lines = [
        f"# shardeval gate: {result.verdict}: candidate {md_text(result.candidate)} vs baseline {md_text(result.base)}",
        "",
        f"margin {result.margin:g}, alpha {result.alpha:g} (one-sided), metric {result.metric}; "
        f"overall GO needs every benchmark GO; NO-GO claims are Holm-adjusted across {len(result.benchmarks)} benchmark(s)",
        "",
    ]
    for d in result.benchmarks:
        lines.append(
            f"- **{md_text(d.benchmark)}: {d.verdict}**: diff {fmt(d.diff)}, one-sided {percent(1 - d.alpha)} bounds "
            f"[{fmt(d.lower)}, {fmt(d.upper)}] ({d.method}, {d.n_problems} problems, {d.n_cells} cells, "
            f"{d.n_clusters} clusters by {d.clustered_by}); {d.reason}"
        )
        if d.plan is not None and d.plan.problems is not None:
            p = d.plan
            repeats = f", or {p.repeats} repeats of the {p.problems_now} problems" if p.repeats is not None else ""
            lines.append(
                f"  - would likely settle ({p.settles_to}, power {percent(p.power)} if the difference is {fmt(p.assumed_diff)}) "
                f"with {p.problems} problems at {p.repeats_now:g} repeat(s){repeats}"
            )
        elif d.plan is not None:
            lines.append(
                f"  - no number of problems settles it at the observed difference {fmt(d.plan.assumed_diff)} (it sits on the margin)"
            )
        if not d.complete:
            lines.append(
                f"  - paired on the cells both runs answered: {d.n_problems_only_base} problems only in the baseline, "
                f"{d.n_problems_only_cand} only in the candidate"
            )
    for x in result.not_compared:
        lines.append(f"- {md_text(x.benchmark)}: not gated: {md_text(x.why)}")
    return lines


def _write(path: str, doc: Any) -> None:
    import msgspec

    from shardeval.api.plugin import os_error
    from shardeval.api.records import atomic_write

    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        atomic_write(path, msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n")
    except OSError as exc:
        raise os_error(exc, "write the verdict to", alternative="pass --output a writable FILE") from None


@click.command("gate")
@click.argument("base_run", type=click.Path(file_okay=False))
@click.argument("cand_run", type=click.Path(file_okay=False), required=False)
@click.option("--margin", type=click.FloatRange(0.0, 1.0, min_open=True), required=True, help="δ: how much worse the candidate may be.")
@click.option(
    "--alpha",
    type=click.FloatRange(0.0, 0.25, min_open=True),
    default=0.05,
    show_default=True,
    help="One-sided error rate of each verdict.",
)
@click.option(
    "--power",
    "target_power",
    type=click.FloatRange(0.5, 0.999),
    default=0.8,
    show_default=True,
    help="Power the plan of an INCONCLUSIVE verdict aims at.",
)
@click.option("--metric", default="accuracy", show_default=True, help="accuracy (the answers' scores), or a record's scores.KEY as KEY.")
@click.option("--bench", "bench", metavar="A,B", help="Only these benchmarks.")
@click.option("--errors-as-wrong", is_flag=True, help="Score errors as wrong answers in both runs.")
@click.option("--json", "as_json", is_flag=True, help="Print gate.json instead of the text.")
@click.option(
    "--output",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="Where gate.json goes (default: CAND_RUN/merged/ or SWEEP_DIR/merged/).",
)
def gate_command(
    base_run: str,
    cand_run: str | None,
    margin: float,
    alpha: float,
    target_power: float,
    metric: str,
    bench: str | None,
    errors_as_wrong: bool,
    as_json: bool,
    output: str | None,
) -> None:
    """GO / NO-GO / INCONCLUSIVE for CAND_RUN against BASE_RUN (or every model of SWEEP_DIR against
    its baseline), with stated error rates; exit 0 / 4 / 5. See docs/decisions.md."""
    import msgspec

    from shardeval.api.plugin import UsageError
    from shardeval.api.records import check_output, refuse_inside_shard, scores_digest
    from shardeval_metrics.decision import GateResult

    if output == "-":
        raise UsageError("--output -: the verdict's text goes to standard output (--json prints gate.json there); give --output a FILE")
    if output and check_output(output, "--output") == "file":  # before any run is read
        refuse_inside_shard(output, "--output")
    if cand_run is None:
        doc: GateResult | SweepGate = gate_sweep(
            base_run,
            margin=margin,
            alpha=alpha,
            target_power=target_power,
            metric=metric,
            benches=_benches(bench),
            errors_as_wrong=errors_as_wrong,
        )
        where = output or os.path.join(base_run, "merged", GATE_FILE)
    else:
        a, b = _merged(base_run, alpha, errors_as_wrong), _merged(cand_run, alpha, errors_as_wrong)
        doc = gate_runs(
            base_run, cand_run, a, b, margin=margin, alpha=alpha, target_power=target_power, metric=metric, benches=_benches(bench)
        )
        doc.candidate_scores = scores_digest([m.table for m in b.values()], errors_as_wrong)
        where = output or os.path.join(cand_run, "merged", GATE_FILE)
    if output is None:
        refuse_inside_shard(where, "gate.json")
    _write(where, doc)
    if as_json:
        click.echo(msgspec.json.format(msgspec.json.encode(doc), indent=2))
    else:
        lines = render_gate(doc) if isinstance(doc, GateResult) else render_sweep(doc)
        click.echo("\n".join([*lines, "", f"gate.json: {where}"]))
    sys.exit(doc.exit_code)


def gate_sweep(
    root: str, *, margin: float, alpha: float, target_power: float, metric: str, benches: list[str] | None, errors_as_wrong: bool
) -> SweepGate:
    """Every model of the sweep at `root` against its baseline, each its own gate (and Holm family)."""
    from shardeval import __version__
    from shardeval.api.plugin import UsageError
    from shardeval.api.records import model_roots, read_plan
    from shardeval_metrics.decision import EXIT_CODES, SweepGate, worst

    plan = read_plan(root)
    if plan is None:
        raise UsageError(
            f"{root} is no sweep (no sweep_plan.json, no model folders); give a baseline and a candidate run: "
            f"shardeval gate BASE_RUN CAND_RUN --margin {margin:g}"
        )
    roots = dict(model_roots(root, plan))
    if roots.get(plan.baseline) is None:
        raise UsageError(f"{root}: the baseline {plan.baseline} has no run yet; run it, then gate the sweep")
    base = _merged(str(roots[plan.baseline]), alpha, errors_as_wrong)
    models, missing = [], []
    for name in plan.services:
        if name == plan.baseline:
            continue
        if roots.get(name) is None:
            missing.append(name)
            continue
        cand = _merged(str(roots[name]), alpha, errors_as_wrong)
        models.append(
            gate_runs(
                plan.baseline, name, base, cand, margin=margin, alpha=alpha, target_power=target_power, metric=metric, benches=benches
            )
        )
    verdict = worst([m.verdict for m in models])
    return SweepGate(
        verdict=verdict,
        exit_code=EXIT_CODES[verdict],
        baseline=plan.baseline,
        margin=margin,
        alpha=alpha,
        power=target_power,
        metric=metric,
        models=models,
        missing=missing,
        version=__version__,
    )


def render_sweep(doc: SweepGate) -> list[str]:
    from shardeval.api.records import md_text

    lines = [f"# shardeval gate: sweep against {md_text(doc.baseline)}: {doc.verdict} (the worst model's)", ""]
    for m in doc.models:
        lines += [f"## {md_text(m.candidate)}: {m.verdict}", *render_gate(m)[2:], ""]
    if doc.missing:
        lines.append(f"no run yet: {', '.join(doc.missing)}")
    return lines


# --- plan ----------------------------------------------------------------------------------------


def render_plan(reqs: list[Requirement]) -> list[str]:
    from shardeval.api.records import fmt, md_text, percent

    lines = ["# shardeval plan", ""]
    for r in reqs:
        needed = ", ".join(f"{'no number of problems' if n is None else f'{n:,} problems'} at {k} repeat(s)" for k, n in r.problems.items())
        now = f"power now {percent(r.power_now)}" if r.power_now is not None else "power now unknown"
        detect = f", detects a regression of {fmt(r.detectable_now)} now" if r.detectable_now is not None else ""
        lines += [
            f"- **{md_text(r.benchmark)}**: {r.target} (power {percent(r.power)}, one-sided alpha {r.alpha:g}): "
            f"needs {needed}. With {r.problems_now:,} problems × {r.repeats_now:g} repeat(s): {now}{detect}.",
            f"  - spread per problem {fmt(r.sd_per_problem)} (under the null {fmt(r.sd_null)}): {r.source}"
            + (f"; {r.note}" if r.note else ""),
        ]
    return lines


@click.command("plan")
@click.argument("base_run", type=click.Path(file_okay=False), required=False)
@click.option("--detect", type=click.FloatRange(0.0, 1.0, min_open=True), help="The regression NO-GO should catch (cand − base = −DETECT).")
@click.option(
    "--margin", type=click.FloatRange(0.0, 1.0, min_open=True), help="The gate's margin: problems for GO when the candidate is as good."
)
@click.option("--power", "target_power", type=click.FloatRange(0.5, 0.999), default=0.8, show_default=True)
@click.option("--alpha", type=click.FloatRange(0.0, 0.25, min_open=True), default=0.05, show_default=True, help="One-sided, as the gate's.")
@click.option(
    "--against", "against", type=click.Path(file_okay=False), help="A candidate (or pilot) run: the pairing's spread measured, not guessed."
)
@click.option(
    "--correlation",
    type=click.FloatRange(-1.0, 1.0),
    default=0.0,
    show_default=True,
    help="Without --against: the per-problem correlation of the two models (0: independent, a worst case for models that agree).",
)
@click.option(
    "--bench",
    "bench",
    metavar="NAME",
    help="Before any run: a benchmark (its size from its registration); with BASE_RUN: only these (A,B).",
)
@click.option("-p", "--param", "params", multiple=True, metavar="KEY=VALUE", help="With --bench before any run: the benchmark's params.")
@click.option(
    "--accuracy",
    type=click.FloatRange(0.0, 1.0),
    default=0.5,
    show_default=True,
    help="Before any run: the baseline's expected accuracy (0.5: the widest spread).",
)
@click.option("--problems", type=click.IntRange(2), help="Before any run: the problems a run will have (default: the benchmark's size).")
@click.option("--json", "as_json", is_flag=True)
def plan_command(
    base_run: str | None,
    detect: float | None,
    margin: float | None,
    target_power: float,
    alpha: float,
    against: str | None,
    correlation: float,
    bench: str | None,
    params: tuple[str, ...],
    accuracy: float,
    problems: int | None,
    as_json: bool,
) -> None:
    """Problems and repeats a decision needs: from a finished run's own spread (BASE_RUN, with
    --against CAND_RUN the pair's), or before any run from a benchmark's size (--bench NAME)."""
    import msgspec

    from shardeval.api.plugin import UsageError
    from shardeval_metrics.decision import proportions_requirement, requirements, spread_of_pair, spread_of_run, summarize

    if detect is None and margin is None:
        raise UsageError("plan needs --detect D (the regression NO-GO should catch) or --margin M (the gate's margin), or both")
    reqs: list[Requirement] = []
    if base_run is None:
        if bench is None:
            raise UsageError("plan needs BASE_RUN (a finished run) or --bench NAME (before any run)")
        size = problems or _bench_size(bench, params)
        reqs = proportions_requirement(bench, size, accuracy, alpha=alpha, target_power=target_power, detect=detect, margin=margin)
    else:
        if params or problems is not None:
            raise UsageError("-p and --problems plan a benchmark before any run (--bench NAME without BASE_RUN); a run has its own size")
        a = _merged(base_run, alpha, False)
        chosen = _benches(bench)
        if chosen and (unknown := [x for x in chosen if x not in a]):
            raise UsageError(f"--bench {','.join(unknown)}: not in {base_run}; it holds {', '.join(a)}")
        b = _merged(against, alpha, False) if against else None
        for name, merge in a.items():
            if chosen and name not in chosen:
                continue
            if b is not None:
                if name not in b:
                    continue
                spread = spread_of_pair(summarize(merge.table, b[name].table, alpha), margin or 0.0)
            else:
                spread = spread_of_run(merge.table, correlation)
            reqs += requirements(spread, alpha=alpha, target_power=target_power, margin=margin, detect=detect)
        if not reqs:
            raise UsageError(f"{base_run} and {against} share no benchmark; plan with runs of the same benchmark")
    if as_json:
        click.echo(msgspec.json.format(msgspec.json.encode(reqs), indent=2))
    else:
        click.echo("\n".join(render_plan(reqs)))


def _bench_size(name: str, params: tuple[str, ...]) -> int:
    from shardeval.api.benchmark import BenchmarkConfig, make_benchmark
    from shardeval.api.plugin import parse_key_values, registry

    bench = make_benchmark(BenchmarkConfig(name=name, params=parse_key_values(params, "-p", "shots=8")), "plan", registry())[0]
    return int(bench.size())
