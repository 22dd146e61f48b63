"""`shardeval compare RUN_A RUN_B`: is B better than A on the problems both answered, and how sure?

Each run is read the way merge reads it (deduplicated, errors kept apart), then every benchmark
the two share and ask the same way (the same data, prompt and scorer fingerprints) is compared
pairwise by `compare_tables`; one asked otherwise is named, never compared.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from collections.abc import Mapping

    from shardeval.api.pages import BenchmarkMerge


def pairable(run_a: str, run_b: str, a: Mapping[str, BenchmarkMerge], b: Mapping[str, BenchmarkMerge], verb: str) -> dict[str, str]:
    """{benchmark: why it is not paired} over the benchmarks both runs hold; refused (one line, exit
    2) when they share none, or ask none of them the same way: only the same questions, asked and
    scored the same way, are paired (docs/merge.md). `verb`: the command, for the advice."""
    from shardeval.api.metric import incomparable
    from shardeval.api.plugin import UsageError

    if not (shared := [name for name in a if name in b]):
        raise UsageError(f"{run_a} ({', '.join(a)}) and {run_b} ({', '.join(b)}) share no benchmark; {verb} runs of the same benchmark")
    apart = {name: why for name in shared if (why := incomparable(a[name].manifest, b[name].manifest))}
    if len(apart) == len(shared):
        listed = "; ".join(f"{name}: {why}" for name, why in apart.items())
        raise UsageError(
            f"{run_a} and {run_b} do not ask the same questions ({listed}); a difference between them would "
            f"not be the models' — {verb} runs of the same data and problems, prompts and scorer "
            "(a run scored otherwise can be rescored with the other's scorer: shardeval rescore)"
        )
    return apart


def render(name_a: str, name_b: str, results: list[dict[str, Any]], confidence: float) -> str:
    from shardeval.api.records import fmt, fmt_p, md_text, percent

    lines = [f"# shardeval compare: B = {md_text(name_b)} vs A = {md_text(name_a)}", ""]
    for r in results:
        if "not_compared" in r:
            lines += [f"## {md_text(r['benchmark'])}", "", f"- not compared: {md_text(r['not_compared'])}", ""]
            continue
        m = r.get("mcnemar")
        lines += [
            f"## {md_text(r['benchmark'])}",
            "",
            f"- problems compared: {r['n_shared']}, on {r['n_cells']} (problem, repeat) cells valid in both (only in A: {r['n_only_a']}, only in B: {r['n_only_b']}, "
            f"shared but without a valid answer in one run: {r['n_shared_without_samples']})",
            f"- A mean {fmt(r['a_mean'])}, B mean {fmt(r['b_mean'])}",
            f"- difference B − A: {fmt(r['diff'])} ± {fmt(r['stderr'])} (stderr); {percent(confidence)} interval "
            f"[{fmt(r['ci_low'])}, {fmt(r['ci_high'])}] ({r['ci_method']}, clustered by {r['clustered_by']}); "
            f"p = {fmt_p(r['p_value'])} ({r['test']})",
            f"- correlation of per-problem scores: {fmt(r['correlation'], 3)}",
            f"- McNemar exact test: p = {fmt_p(m.get('p_value'))} (A right, B wrong: {m.get('a_right_b_wrong')}; "
            f"A wrong, B right: {m.get('a_wrong_b_right')})"
            if m is not None
            else f"- McNemar: not applicable ({r.get('mcnemar_reason')})",
            f"- minimum detectable effect at 80 % power: {fmt(r['mde'])} ({r['details'].get('mde_formula', '')})",
            "",
        ]
    return "\n".join(lines)


@click.command("compare")
@click.argument("run_a", type=click.Path(file_okay=False))
@click.argument("run_b", type=click.Path(file_okay=False))
@click.option("--confidence", type=click.FloatRange(0.5, 0.999), default=0.95, show_default=True, help="Interval level.")
@click.option("--errors-as-wrong", is_flag=True, help="Score errors as wrong answers in both runs.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Also write the comparison as one self-contained HTML page with charts.",
)
def compare_command(run_a: str, run_b: str, confidence: float, errors_as_wrong: bool, as_json: bool, html_path: str | None) -> None:
    """Paired comparison of two runs (directories of shards) on the problems they share."""
    from shardeval.api.metric import MetricOptions
    from shardeval.api.plugin import UsageError
    from shardeval.api.records import check_output, merge_run, refuse_inside_shard
    from shardeval_metrics.compare import compare_tables

    if html_path == "-":
        raise UsageError(
            "--html -: the comparison's text goes to standard output; give the page a FILE "
            "(a pipe or a device, such as /dev/stdout with its text sent elsewhere, is written into)"
        )
    if html_path and check_output(html_path, "--html") == "file":  # before any run is read
        refuse_inside_shard(html_path, "--html")
    options = MetricOptions(confidence=confidence)

    def merged(run: str) -> dict[str, BenchmarkMerge]:
        return {x.manifest.name: x for x in merge_run(run, errors_as_wrong=errors_as_wrong, options=options, keep_ids=True).benchmarks}

    a, b = merged(run_a), merged(run_b)
    apart = pairable(run_a, run_b, a, b, "compare")
    shared = [name for name in a if name in b]
    results = [
        {"benchmark": name, "not_compared": apart[name]} if name in apart else compare_tables(a[name].table, b[name].table, options)
        for name in shared
    ]
    if as_json:
        click.echo(json.dumps(results, indent=2, sort_keys=True))
    else:
        click.echo(render(run_a, run_b, results, confidence))
    if html_path:
        write_page(html_path, run_a, run_b, a, b, results, confidence, errors_as_wrong)


def write_page(
    path: str,
    run_a: str,
    run_b: str,
    a: dict[str, BenchmarkMerge],
    b: dict[str, BenchmarkMerge],
    results: list[dict[str, Any]],
    confidence: float,
    errors_as_wrong: bool,
) -> None:
    """Have the pages plugin draw the page; without its JavaScript the comparison above stands and
    one line on stderr says how to get the page (exit 0). A path that cannot be written is one line, exit 2."""
    from shardeval.api.pages import compare_page
    from shardeval.api.plugin import os_error

    try:
        notice = compare_page(path, run_a, run_b, a, b, results, confidence, errors_as_wrong)
    except OSError as exc:
        raise os_error(exc, "write the comparison page to", alternative="pass --html a writable FILE") from None
    if notice:
        click.echo(f"shardeval: {notice}", err=True)
