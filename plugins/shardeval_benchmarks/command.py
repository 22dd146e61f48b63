"""`shardeval benchmarks`: what can be evaluated, which plugin registered it, and how big it is.

Listing builds each benchmark with its default params to learn its size and data source; that is
cheap for the built-ins (generated data, or small files in installed packages) and `--no-load`
skips it. A benchmark that needs params or whose data is missing shows its one-line reason; the
listing itself never fails. With NAME (a registered name, a data file or a BYO mapping .yaml) it
describes that one benchmark with the params given, and `--show N` prints its first prompts.
"""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING, Any

import click

from shardeval.api.plugin import UsageError

if TYPE_CHECKING:
    from shardeval.api.benchmark import Benchmark


def _summary(factory: Any) -> str:
    """The first sentence of the benchmark module's docstring (what it is, in its author's words)."""
    load = getattr(factory, "load", None)  # a shardeval.api.Lazy: import its module to read the doc
    if callable(load):
        try:
            factory = load()
        except Exception as exc:
            return f"cannot import: {type(exc).__name__}: {exc}"
    module = sys.modules.get(getattr(factory, "__module__", ""), None)
    doc = (getattr(module, "__doc__", None) or getattr(factory, "__doc__", None) or "").strip()
    first = " ".join(doc.split("\n\n")[0].split())
    return re.split(r"(?<!\bal)\.\s", first)[0].rstrip(".")


def _origin(benchmark: Benchmark) -> str:
    """Where a built benchmark's rows come from: its `data_origin` (set by datasets-based benchmarks)."""
    return str(benchmark.data_origin or "")


@click.command("benchmarks")
@click.argument("name", required=False)
@click.option("-p", "--param", "params", multiple=True, metavar="KEY=VALUE", help="Benchmark parameter (YAML value), for NAME; repeatable.")
@click.option("--show", type=click.IntRange(0), default=0, help="With NAME: print the first N prompts and references.")
@click.option("--no-load", is_flag=True, help="List names and plugins only; build nothing, read no data.")
def benchmarks_command(name: str | None, params: tuple[str, ...], show: int, no_load: bool) -> None:
    """List registered benchmarks (plugin, size, data source), or describe NAME."""
    from shardeval.api.plugin import parse_key_values, registry as plugin_registry  # YAML values, one parser for every such flag

    registry = plugin_registry()
    if name is not None:
        _describe(name, parse_key_values(params, "-p", "shots=8"), show, registry)
        return
    if params:
        raise UsageError("-p/--param needs a benchmark NAME: shardeval benchmarks NAME -p key=value")
    table = registry.entries["benchmarks"]
    rows = [("NAME", "PLUGIN", "PROBLEMS", "SOURCE")]
    for entry in sorted(table.values(), key=lambda e: e.name):
        size, source = "-", _summary(entry.factory)
        if not no_load:
            try:
                bench = entry.factory({})
                size, source = str(bench.size()), _origin(bench) or source
            except UsageError as exc:
                size, source = "?", f"unavailable: {exc}"
            except Exception as exc:  # a third-party benchmark's bug must not hide the others
                size, source = "?", f"failed to load: {type(exc).__name__}: {exc}"
        rows.append((entry.name, entry.plugin, size, source))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        click.echo(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}")
    click.echo("\nAlso: any data file path (.jsonl, .jsonl.gz, .json, .csv, .parquet) or BYO mapping (.yaml) as a benchmark name.")


def _describe(name: str, params: dict[str, Any], show: int, registry: Any) -> None:
    from shardeval.api.benchmark import BenchmarkConfig, make_benchmark

    bench = make_benchmark(BenchmarkConfig(name=name, params=params), "benchmarks", registry)[0]
    entry = registry.entries["benchmarks"].get(name)
    plugin = entry.plugin if entry else ("benchmarks (custom)" if name.lower().endswith((".yaml", ".yml")) else "benchmarks (jsonl)")
    click.echo(f"name:        {bench.name}")
    click.echo(f"plugin:      {plugin}")
    click.echo(f"about:       {_summary(type(bench))}")
    click.echo(f"problems:    {bench.size()}")
    if _origin(bench):
        click.echo(f"source:      {_origin(bench)}")
    click.echo(f"fingerprint: {bench.fingerprint()}")
    click.echo(f"metrics:     {', '.join(bench.metrics)}")
    for problem in bench.problems(range(min(show, bench.size()))):
        click.echo(
            f"\n--- problem {problem.idx} (id {problem.id}, reference {problem.reference!r}"
            + (f", cluster {problem.cluster!r}" if problem.cluster else "")
            + ")"
        )
        if problem.messages:
            for m in problem.messages:
                click.echo(f"[{m.get('role')}] {m.get('content')}")
        else:
            click.echo(problem.prompt or "")
