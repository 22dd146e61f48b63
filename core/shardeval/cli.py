"""The `shardeval` command line. Heavy modules are imported inside commands, so `--help` and
`--version` never load aiohttp or msgspec."""

from __future__ import annotations

import sys
from typing import Any

import click

from shardeval import __version__
from shardeval.command_line import evaluation_options, override_option, run_cli
from shardeval.errors import EXIT_WITH_ERRORS, UsageError
from shardeval.results.ci_methods import CI_METHODS


def _plugins() -> Any:
    """shardeval.plugins, loaded when a command needs the plugins (not for --help of the group alone)."""
    from shardeval import plugins

    return plugins


class _Group(click.Group):
    """Adds plugin commands lazily: only when a command is looked up or listed."""

    _plugins_added = False

    def _add_plugin_commands(self) -> None:
        if not self._plugins_added:
            self._plugins_added = True
            _plugins().hooks().register_commands(cli=self)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            self._add_plugin_commands()
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._add_plugin_commands()
        return super().list_commands(ctx)


class _ExportCommand(click.Command):
    """`export`, whose tracker flags come from the plugins of the targets (hookspecs.export_flags),
    added when the command is parsed or its help shown: the core names no target."""

    _flags_added = False

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        if not self._flags_added:
            self._flags_added = True
            by_flag: dict[str, list[Any]] = {}
            for flag in _plugins().export_flags():
                by_flag.setdefault(flag.flag, []).append(flag)
            for name, declared in by_flag.items():
                self.params.append(
                    click.Option([name], metavar=declared[0].metavar, help="; ".join(f"--to {f.target}: {f.help}" for f in declared))
                )
        return super().get_params(ctx)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="shardeval")
def cli() -> None:
    """Sharded, resumable LLM evaluation: run shards anywhere, merge them into one set of numbers."""


@cli.command()
@evaluation_options
@click.option("-o", "--output-dir", help="This shard's output directory (default: output.dir/shard_<i>).")
@click.option("--shard", "shard_flag", metavar="I/N", help="Run shard I of N (beats every environment variable).")
@click.option("--sweep-services", metavar="NAMES", help="Sweep: evaluate only these models (comma-separated), in this order.")
@click.option("--fresh", is_flag=True, help="Start over: move earlier results aside instead of resuming.")
@click.option("--cache-dir", metavar="PATH", help="Response cache directory (beats `cache.dir`; see docs/cache.md).")
@click.option("--no-cache", is_flag=True, help="Bypass the response cache: read nothing from it, write nothing to it.")
@override_option
@click.option("--dry-run", is_flag=True, help="Show what would run or be submitted; run nothing.")
@click.option("--no-merge", is_flag=True, help="Launch the cells and end without the merge (`shardeval merge` merges them).")
def run(
    config_path: str | None,
    shard_flag: str | None,
    sweep_services: str | None,
    overrides: tuple[str, ...],
    dry_run: bool,
    fresh: bool,
    no_merge: bool,
    **quick: object,
) -> None:
    """Evaluate one shard, or hand the whole run to the configured orchestrator.

    A sweep config (a `sweep:` section) runs every model's shards; each model writes the
    ordinary run directory OUTPUT/<service>/, and a shard index counts models × shards.
    """
    from shardeval.launch.dispatch import launch

    sys.exit(
        launch(
            config_path,
            quick,
            list(overrides),
            shard_flag=shard_flag,
            fresh=fresh,
            dry_run=dry_run,
            sweep_services=sweep_services,
            merge=not no_merge,
        )
    )


@cli.command()
@click.argument("config_path", metavar="CONFIG.yaml")
@click.option("-o", "--output-dir", help="The run's output root (default: output.dir); the preparation goes to OUT/prepared/.")
@override_option
def prepare(config_path: str, output_dir: str | None, overrides: tuple[str, ...]) -> None:
    """Fetch and plan a run once, where the network is; its shards then read it offline.

    Everything a shard would fetch (data from URLs and packages, images, a task's datasets and
    tokenizer) goes into OUT/prepared/ (or `prepare.cache_dir`), checksummed, with each
    benchmark's plan; nothing is sent to a model. See docs/offline.md.
    """
    from shardeval.launch.prepare import prepare_command

    sys.exit(prepare_command(config_path, list(overrides), output_dir))


@cli.command()
@click.argument("config_path", metavar="SWEEP.yaml")
@click.option("-o", "--output-dir", help="The sweep's root (default: output.dir).")
@click.option("--once", is_flag=True, help="Evaluate what is ready now, wait for those launches, then exit (for cron).")
@override_option
def watch(config_path: str, output_dir: str | None, once: bool, overrides: tuple[str, ...]) -> None:
    """Evaluate a training run's checkpoints as they appear: each once, when it is whole.

    Polls `sweep.checkpoints.paths` every `sweep.watch.poll_s`; launches each checkpoint whose
    `ready` rule holds through the configured orchestrator; after its cells end, updates the
    sweep's merged/ files and trackers at its step. Runs until stopped (SIGTERM: no more polls,
    local launches drain) or until `sweep.watch.until` says so; see docs/watch.md.
    """
    from shardeval.watch.watcher import run_watch

    sys.exit(run_watch(config_path, overrides, output_dir, once))


@cli.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--errors-as-wrong", is_flag=True, help="Score errors as wrong answers instead of leaving them out.")
@click.option("--confidence", type=click.FloatRange(0.5, 0.999), default=0.95, show_default=True, help="Interval level.")
@click.option("--bootstrap", "bootstrap_samples", type=click.IntRange(100), default=1000, show_default=True, help="Bootstrap resamples.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap.")
@click.option(
    "--ci-method",
    type=click.Choice(CI_METHODS),
    default="auto",
    show_default=True,
    help="How a mean's interval is built; auto: Wilson/Clopper-Pearson for proportions at their "
    "effective size, normal otherwise (docs/merge.md).",
)
@click.option("-o", "--output-dir", help="Where merged/ goes (default: RUN_DIR/merged; never inside a shard directory).")
@click.option("-q", "--quiet", is_flag=True, help="Write the files; print nothing.")
@click.option(
    "--allow-mixed-models", is_flag=True, help="Pool shards whose endpoints served different weights (the report then says MIXED)."
)
@click.option(
    "--export",
    "run_exports",
    is_flag=True,
    help="Then export to the trackers of the config's `export:` list, as the end of a launch does (docs/export.md).",
)
def merge(
    run_dir: str,
    errors_as_wrong: bool,
    confidence: float,
    bootstrap_samples: int,
    seed: int,
    ci_method: str,
    output_dir: str | None,
    quiet: bool,
    allow_mixed_models: bool,
    run_exports: bool,
) -> None:
    """Merge every shard directory under RUN_DIR into RUN_DIR/merged/ and print the report.

    Safe to run any time, also while shards are still running (the report then says PARTIAL).
    Exits 0 only when every cell has an ok record (COMPLETE); 3 when the files are written but
    cells are missing (PARTIAL) or end in errors (ERRORS).
    Shard files are only read; running it twice gives byte-identical output. A sweep's directory
    merges each model into <model>/merged/, then writes merged/sweep.json, sweep.md and sweep.html.
    """
    from shardeval.launch.prepare import use_preparation_to_merge
    from shardeval.results import metrics, sweep_merge, trackers

    if prepared := use_preparation_to_merge(run_dir):  # a merge job on a node without internet (docs/offline.md)
        click.echo(f"shardeval: {prepared}", err=True)
    options = metrics.MetricOptions(confidence=confidence, bootstrap_samples=bootstrap_samples, seed=seed, ci_method=ci_method)
    merged = sweep_merge.merge_any(
        run_dir,
        out_dir=output_dir,
        confidence=confidence,
        errors_as_wrong=errors_as_wrong,
        options=options,
        allow_mixed_models=allow_mixed_models,
    )
    for line in merged.warnings:
        click.echo(f"shardeval: warning: {line}", err=True)
    for notice in merged.notices:
        click.echo(f"shardeval: {notice}", err=True)
    if not quiet:
        click.echo(merged.text, nl=False)
        click.echo(f"\nwritten: {merged.written}")
        if not merged.notices:
            click.echo(f"open {merged.page} in a browser: {merged.page_shows}")
    if run_exports:  # a tracker's failure is a warning: the merge's files and exit status stand
        trackers.export_after_merge(
            merged, lambda line: click.echo(f"shardeval: warning: {line}", err=True), lambda line: None if quiet else click.echo(line)
        )
    if merged.verdict != "COMPLETE":  # exit 0 only when every cell has an ok record (issue 24)
        click.echo(f"shardeval: not complete: {merged.verdict} (exit {EXIT_WITH_ERRORS}; the files are written)", err=True)
        sys.exit(EXIT_WITH_ERRORS)


@cli.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("-o", "--output-dir", required=True, help="Where the rescored shard directories go (outside RUN_DIR).")
@click.option("--shard", "shard_flag", metavar="I/N", help="Rescore every N-th shard directory from the I-th (also the shard variables).")
@click.option(
    "--scorer",
    "scorers",
    multiple=True,
    metavar="[BENCH=]NAME",
    help="Score with registered benchmark NAME's scorer (for BENCH only, or all).",
)
@click.option("-O", "overrides", multiple=True, metavar="benchmarks.N.params.KEY=VALUE", help="A param the scorer is built with.")
@click.option(
    "--judge",
    "judges",
    multiple=True,
    metavar="[BENCH=]SERVICE[:MODE]",
    help="Judge the saved answers again with SERVICE (one of the run's services), single or pairwise.",
)
def rescore(
    run_dir: str, output_dir: str, shard_flag: str | None, scorers: tuple[str, ...], overrides: tuple[str, ...], judges: tuple[str, ...]
) -> None:
    """Score RUN_DIR's saved answers again into new shard directories; ask no model anything.

    Records keep their answers; `extracted`, `score` and `scores` come from the current scorer or
    the one chosen; a judged benchmark's answers are judged again (docs/judges.md). RUN_DIR is only
    read; a rerun resumes. Merge NEW_DIR as any run. See docs/rescore.md.
    """
    from shardeval.launch import setup_logging
    from shardeval.run.rescore import ScorerChoice, rescore_run

    setup_logging()
    sys.exit(rescore_run(run_dir, output_dir, shard_flag, ScorerChoice.parse(scorers, overrides, judges)))


@cli.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--serve", is_flag=True, help="Serve a live page instead (progress, rate, ETA, running accuracy with its interval).")
@click.option("--host", default="127.0.0.1", show_default=True, help="With --serve: the address to listen on (0.0.0.0 exposes it).")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True, help="With --serve: the port (0: a free one).")
@click.option(
    "--interval",
    type=click.FloatRange(0.1, 3600),
    default=2.0,
    show_default=True,
    help="With --serve: seconds between reads of the shard files (and the page's refreshes).",
)
@click.pass_context
def status(ctx: click.Context, run_dir: str, serve: bool, host: str, port: int, interval: float) -> None:
    """Per-shard state, progress, errors, rate and ETA of a run (also while it runs).

    With --serve: a web page that refreshes them, with each benchmark's running accuracy and its
    interval (of a sweep: the models x benchmarks grid); it prints its URL and serves until Ctrl-C.
    """
    given = [
        f"--{name}" for name in ("host", "port", "interval") if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE
    ]
    if given and not serve:
        raise UsageError(
            f"{', '.join(given)}: only with --serve (the live page); add --serve, or drop {'them' if len(given) > 1 else 'it'}"
        )
    if serve:
        from shardeval.results.pages import serve_status

        return serve_status(run_dir, host, port, interval)
    from shardeval.results.status import status as render

    click.echo(render(run_dir))


@cli.command("export", cls=_ExportCommand)
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option(
    "-o",
    "--output",
    metavar="FILE|DIR",
    help="The file to write (replaced atomically; a pipe or a device is written into; - for standard output); "
    "with --to inspect, the folder for the .eval logs; with --to wandb, where W&B's run folders go.",
)
@click.option("--format", "fmt", metavar="parquet|csv|jsonl", help="Default: from FILE's suffix (.parquet, .csv, .jsonl).")
@click.option(
    "--allow-mixed-models",
    is_flag=True,
    help="Export shards whose endpoints served different weights (the weights column tells them apart).",
)
@click.option(
    "--to",
    "target",
    metavar="TARGET",
    help="Export to a tracker instead of a file (the built-in targets: mlflow, wandb, inspect; `shardeval plugins` "
    "lists all): one tracker run per model and benchmark, updated on re-export. Each target's own flags follow.",
)
def export_command(
    run_dir: str, output: str | None, fmt: str | None, allow_mixed_models: bool, target: str | None, **target_options: str | None
) -> None:
    """Export RUN_DIR's records to one Parquet, CSV or JSONL file, or its results to a tracker.

    A file (-o): one row per standing record (the one merge keeps per problem and repeat), in merge
    order, with the run's identity columns; a sweep's directory exports every model into one file.
    Parquet needs pyarrow: pip install 'shardeval[parquet]'.

    A tracker (--to): RUN_DIR is merged (as `shardeval merge` does), then each model and benchmark
    becomes one MLflow or W&B run (metrics with their intervals, identity, the sample table, scores.json
    and report.html) or one Inspect log; exporting again updates them. Credentials come only from the
    tracker's own environment variables. See docs/export.md.
    """
    given = [dest for dest, value in target_options.items() if value is not None]
    if target is not None or given:
        from shardeval.results import trackers

        if target is None:
            raise UsageError(trackers.flags_without_target(given))
        return trackers.export_to(run_dir, target, {**target_options, "output": output}, fmt, allow_mixed_models, click.echo)
    if output is None:
        raise UsageError(
            "export: nothing to write to; give -o FILE (a Parquet, CSV or JSONL table) or --to TARGET (a tracker: mlflow, wandb, inspect)"
        )
    from shardeval.results.export import export

    done = export(run_dir, output, fmt, allow_mixed_models=allow_mixed_models)
    for line in done.warnings:
        click.echo(f"shardeval: warning: {line}", err=True)
    missing = f"; {done.missing} cells have no record yet" if done.missing else ""
    click.echo(
        f"written: {'standard output' if output == '-' else output} ({done.format}, {done.rows} rows{missing})", err=output == "-"
    )  # the data is on stdout: the summary goes beside it, not into it


@cli.group("plugins", invoke_without_command=True)
@click.pass_context
def plugins_command(ctx: click.Context) -> None:
    """List loaded plugins: version, where each came from, what it registered.

    Plugins come from entry points of the running environment, the plugin directory
    (SHARDEVAL_PLUGIN_DIR, default: the user data dir's shardeval/plugins) and SHARDEVAL_PLUGINS.
    See docs/plugins.md.
    """
    if ctx.invoked_subcommand is not None:
        return
    from shardeval import plugins
    from shardeval.app import install_mode

    loaded = plugins.load()
    registry = plugins.registry()
    for p in loaded.loaded:
        click.echo(f"{p.name:<12} {p.module:<24} {p.version or '-':<10} {p.source}")
        if mine := plugins.registrations(registry, p.name):
            click.echo(f"{'':<12} registers: {', '.join(mine)}")
    for failure in loaded.failures:
        click.echo(f"FAILED       {failure}")
    how = (
        "`shardeval plugins install` adds plugins here, pinned to the bundled versions"
        if install_mode() == "target"
        else f"searched too; `shardeval plugins install` uses pip in the environment of {sys.executable}"
    )
    click.echo(f"plugin dir: {plugins.plugin_dir()} ({how})")


@plugins_command.command("install", short_help="Install plugins: names, wheels or project directories.")
@click.argument("specs", nargs=-1, required=True, metavar="NAME_OR_PATH...")
@click.option("--index-url", metavar="URL", help="Base URL of the package index (pip --index-url).")
@click.option("--extra-index-url", metavar="URL", multiple=True, help="Another package index (repeatable).")
@click.option("-f", "--find-links", metavar="DIR_OR_URL", multiple=True, help="Look for wheels and archives here (repeatable).")
@click.option("--no-index", is_flag=True, help="Use no package index (only --find-links and local paths).")
@click.option("--no-build-isolation", is_flag=True, help="Build from source with the build tools already installed (offline).")
@click.option("--pre", is_flag=True, help="Allow pre-release versions.")
def plugins_install(
    specs: tuple[str, ...],
    index_url: str | None,
    extra_index_url: tuple[str, ...],
    find_links: tuple[str, ...],
    no_index: bool,
    no_build_isolation: bool,
    pre: bool,
) -> None:
    """Install plugins (a package name, a wheel, or a project directory).

    From the zipapp: into the plugin directory (pip --target), using the versions of every
    package the app bundles; a plugin that needs other versions of them is refused. From a
    pip-installed shardeval: pip install into the same environment. Other pip settings come from
    pip's own config and PIP_* environment variables.
    """
    from shardeval.plugins.install import install

    options = [f"--index-url={index_url}"] if index_url else []
    options += [f"--extra-index-url={url}" for url in extra_index_url] + [f"--find-links={where}" for where in find_links]
    options += [flag for flag, on in (("--no-index", no_index), ("--no-build-isolation", no_build_isolation), ("--pre", pre)) if on]
    install(list(specs), options, click.echo)


@plugins_command.command("uninstall", short_help="Remove installed plugins (bundled ones stay).")
@click.argument("names", nargs=-1, required=True, metavar="NAME...")
def plugins_uninstall(names: tuple[str, ...]) -> None:
    """Remove installed plugins (by distribution or plugin name); bundled ones stay."""
    from shardeval.plugins.install import uninstall

    uninstall(list(names), click.echo)


def main(argv: list[str] | None = None) -> None:
    """The `shardeval` entry point."""
    run_cli(cli, argv, "shardeval")
