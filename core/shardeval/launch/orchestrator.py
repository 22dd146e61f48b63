"""The launch request: what a `cluster.type` plugin receives when no shard is selected.

An orchestrator turns one `shardeval run` into N shard runs (local processes, a SLURM array, an
Indexed Job, Ray tasks, Compose services). Each of those runs `cell_args(...)`: the same command
with `--shard I/N` and its own output directory, so a shard never re-submits the run.
`Orchestrator` holds the phases a plugin fills; shardeval.launch.lifecycle runs them in order.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypedDict
from collections.abc import Callable

from shardeval.config import Config
from shardeval.errors import UsageError
from shardeval.redact import url_credentials
from shardeval.store.atomic import atomic_write

if TYPE_CHECKING:
    from typing import Unpack  # Python 3.11; the zipapp runs on 3.10, where annotations stay strings

    from shardeval.config.sweep import Sweep

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# ${VAR} / ${VAR:-default} in the config text ($$ escapes), as shardeval.config expands them
_REFERENCE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}")


@dataclass(frozen=True)
class Cell:
    """One unit of a launch: a shard of a run (of one model, in a sweep)."""

    index: int  # its place in the launch's numbering: the shard, or model-major in a sweep
    service: str | None  # the sweep model it evaluates; None outside a sweep
    shard: int
    shards: int
    dir: str  # its output directory

    @property
    def label(self) -> str:
        """`shard 3/4`, or `step1 shard 1/2` in a sweep: for messages."""
        return f"{self.service + ' ' if self.service else ''}shard {self.shard}/{self.shards}"


@dataclass(frozen=True)
class ModelRun:
    """One ordinary run of a launch: the whole run, or one model of a sweep in <root>/<service>/."""

    service: str | None
    root: str
    config: Config


class RunArgs(TypedDict, total=False):
    """What `run_args` takes, passed on by cell_args, indexed_args and shard_args."""

    config_path: str | None
    escape: Callable[[str], str]


@dataclass(frozen=True)
class LaunchRequest:
    config: Config
    config_path: str | None
    overrides: list[str]
    quick: dict[str, Any] = field(default_factory=dict)
    output_root: str = "./eval_results"
    dry_run: bool = False
    fresh: bool = False
    sweep: Sweep | None = None  # set: the config is a sweep; these are its models, in cell order
    merge: bool = True  # False (`run --no-merge`, a watcher's launches): the launch ends without the merge

    @classmethod
    def create(
        cls,
        config: Config,
        config_path: str | None,
        overrides: list[str],
        quick: dict[str, Any],
        output_dir: str | None,
        *,
        dry_run: bool,
        fresh: bool,
        sweep: Sweep | None = None,
        merge: bool = True,
    ) -> LaunchRequest:
        """The request as the command line gives it: the quick flags that are set; -o, else output.dir."""
        quick = {k: v for k, v in quick.items() if v is not None}
        root = output_dir or config.output.dir
        return cls(config, config_path, overrides, quick, root, dry_run=dry_run, fresh=fresh, sweep=sweep, merge=merge)

    def runs(self) -> list[ModelRun]:
        """The ordinary runs this launch writes: one, or one per sweep model (in cell order)."""
        if self.sweep is None:
            return [ModelRun(None, self.output_root, self.config)]
        return [ModelRun(name, os.path.join(self.output_root, name), self.sweep.configs[name]) for name in self.sweep.services]

    def cells(self) -> list[Cell]:
        """Every shard of every run, in launch order (model-major in a sweep)."""
        total = self.total
        return [
            Cell(i * total + k, run.service, k, total, os.path.join(run.root, f"shard_{k}"))
            for i, run in enumerate(self.runs())
            for k in range(total)
        ]

    def cell_args(self, cell: Cell, root: str | None = None, **run: Unpack[RunArgs]) -> list[str]:
        """Arguments after `shardeval run` that make a node run exactly this cell; `root`: where
        the node sees the output root, `run`: run_args' config_path/escape."""
        root = root or self.output_root
        if cell.service is None:
            return self.shard_args(cell.shard, cell.shards, os.path.join(root, f"shard_{cell.shard}"), **run)
        return [*self.run_args(**run), "--sweep-services", cell.service, "--shard", f"{cell.shard}/{cell.shards}", "-o", root]

    def indexed_args(self, index: str, services: list[str] | None = None, root: str | None = None, **run: Unpack[RunArgs]) -> list[str]:
        """Arguments after `shardeval run` for a node that knows only its index in the launch (a
        SLURM array task, an Indexed Job pod): `index` is how the node's command line spells it
        (a shell variable). In a sweep, the index runs over `services` (default: all) × shards.
        `root` and `run` as in cell_args."""
        root = root or self.output_root
        if self.sweep is None:
            return self.shard_args(index, self.total, os.path.join(root, f"shard_{index}"), **run)
        names = services or list(self.sweep.services)
        total = len(names) * self.total
        return [*self.run_args(**run), "--sweep-services", ",".join(names), "--shard", f"{index}/{total}", "-o", root]

    @property
    def total(self) -> int:
        """How many shards the run has: `cluster.shards`, 1 when unset."""
        return self.config.cluster.shards or 1

    def shard_dir(self, idx: int) -> str:
        return os.path.join(self.output_root, f"shard_{idx}")

    def config_text(self) -> str | None:
        """The config file as written, for orchestrators that ship it to their nodes (its ${VAR}s
        expand there); None in quick mode, where the flags travel in the shard's arguments."""
        return Path(self.config_path).read_text(encoding="utf-8") if self.config_path else None

    def config_variables(self, defaulted: bool = True) -> set[str]:
        """The ${VAR}s the config file expands on the node (with `defaulted` False, only those
        without a `:-default`); none in quick mode."""
        found = _REFERENCE.finditer(self.config_text() or "")
        return {m.group(1) for m in found if m.group(1) and (defaulted or not m.group(2))}

    def write(self, folder: str, files: dict[str, str], mode: int | None = None) -> dict[str, str]:
        """Write {name: text} into `folder` (under the output root unless absolute), made if
        missing, each file replaced whole; {name: its path}."""
        for name, text in files.items():  # a generated file never holds a URL's credentials
            if (url := url_credentials(text)) is not None:
                raise UsageError(
                    f"refusing to write {name}: it would hold the credentials of {url}, and generated files never hold "
                    "secrets; give them as ${VARIABLES} in the config file (they expand on the node), or the key through "
                    "api_key_env"
                )
        folder = os.path.join(self.output_root, folder)
        os.makedirs(folder, exist_ok=True)
        paths = {name: os.path.join(folder, name) for name in files}
        for name, path in paths.items():
            atomic_write(path, files[name].encode())
            if mode is not None:
                os.chmod(path, mode)
        return paths

    def run_args(self, config_path: str | None = None, escape: Callable[[str], str] = str) -> list[str]:
        """Arguments after `shardeval run` that repeat this run: the config file (`config_path`:
        where the node sees it), the quick flags, the -O overrides and --fresh; `escape` makes each
        value literal for the file the arguments are written into (Compose, Kubernetes)."""
        args = [config_path or self.config_path] if self.config_path else []
        for flag, value in self.quick.items():  # only the flags given (create drops the rest)
            args += [f"--{flag.replace('_', '-')}", escape(str(value))]
        for override in self.overrides:
            args += ["-O", escape(override)]
        return args + (["--fresh"] if self.fresh else [])

    def report_failed(self, failed: list[Cell] | list[int]) -> None:
        """Name the shards (cells, or shard numbers of a single run) that failed; rerunning resumes them."""
        failed = [self.cells()[c] if isinstance(c, int) else c for c in failed]
        what = f"{len(failed)} of {len(self.cells())} {'cells' if self.sweep else 'shards'}"
        names = ", ".join(c.label if c.service else str(c.shard) for c in failed)
        print(
            f"shardeval: {what} failed or finished with errors ({names}); rerun the same command to resume them "
            "(a resume asks the pairs without an ok answer again)",
            file=sys.stderr,
        )

    def shard_args(self, idx: int | str, total: int, output_dir: str | None = None, **run: Unpack[RunArgs]) -> list[str]:
        """Arguments after `shardeval run` that make a node run exactly shard idx of total."""
        return [*self.run_args(**run), "--shard", f"{idx}/{total}", "-o", output_dir or self.shard_dir(int(idx))]


@dataclass(frozen=True)
class CellOutcome:
    """How one cell of a launch ended, as its orchestrator saw it."""

    cell: Cell
    exit_code: int | None  # its exit code; None: it never ran to an exit (not started after a stop, cancelled)
    seconds: float = 0.0  # from its start to its end, where the orchestrator measures it


class Orchestrator:
    """One launch on one kind of cluster: the phases a `cluster.type` plugin fills.

    Registered as `register("name", MyOrchestrator, config=MyClusterConfig)` (or a `Lazy` naming
    the class); the core makes one per launch with the `LaunchRequest` and runs `run_lifecycle`.
    Class attributes declare how the orchestrator takes part in the protocol:

    - `waits`: True when `submit` + `wait` see every cell end here (local processes, Ray tasks),
      so the core collects, merges and picks the exit code. False when the cells are handed to a
      scheduler that runs them later with its own merge (a SLURM array and its merge job, an
      Indexed Job, a Compose project): `submit`'s code is the launch's.
    - `runs_cells`: False when `submit` starts nothing and prints the commands that would (a
      Compose project): `shardeval watch`, which must know when cells run, refuses it.
    - `results_on_launcher`: False when the cells write where the launching machine cannot read
      (Kubernetes' results claim): `shardeval watch`, which reads each cell's manifest, refuses it.
    - `fresh_on_launcher`: True when `--fresh` sets earlier results aside here, once, before
      `submit` (a retried or requeued task then resumes instead of starting over); False when
      `--fresh` travels to the nodes in their arguments (`run_args()`).
    - `refusal_stops_the_merge`: True when cells that exited 2 keep the launch from merging (each
      refused before it wrote anything, so what its directory holds is not this run's); False
      when they are reported with the other failed cells and the rest is merged.
    """

    waits: ClassVar[bool] = True
    runs_cells: ClassVar[bool] = True  # False: `submit` only writes files and prints how to run them (Compose)
    results_on_launcher: ClassVar[bool] = True  # False: the cells write where the launcher cannot read (a PVC)
    fresh_on_launcher: ClassVar[bool] = True
    refusal_stops_the_merge: ClassVar[bool] = True

    def __init__(self, request: LaunchRequest) -> None:
        self.request = request

    def plan(self) -> None:
        """What to run, before anything is printed, moved or submitted: render the files, check
        what only this orchestrator can (a mistake raises UsageError: one line, exit 2). May
        replace `self.request` (say, with an absolute output root), which the later phases use."""

    def dry_run(self) -> int:
        """`--dry-run`: print what `submit` would do, start nothing; the exit code (0)."""
        raise NotImplementedError(f"{type(self).__name__} has no dry run")

    def submit(self) -> int:
        """Hand every cell to where it runs: 0 when they were handed over, else the launch's exit
        code (nothing to wait for). Of an orchestrator that does not wait, the launch's code."""
        raise NotImplementedError(f"{type(self).__name__} submits nothing")

    def wait(self) -> None:
        """Return when every submitted cell has ended (or a stop signal ended the launch)."""

    def collect(self) -> list[CellOutcome]:
        """One outcome per cell, in `request.cells()` order; say what this orchestrator says of
        each (its exit and time, where it ran)."""
        return []

    def merges(self) -> bool:
        """Whether the launch ends with the merge (`merge: false` sections say no)."""
        return True

    def stopped_by(self) -> signal.Signals | None:
        """The stop signal (SIGTERM, SIGINT) that ended the launch here, if one did: the cells
        were told, none started after it, and the launch exits 143 / 130."""
        return None


def escape_dollars(text: str) -> str:
    """Make text literal for Compose (which interpolates ${VAR} and $VAR in every string) and for
    the kubelet (which expands $(VAR) in a container's command, args and env values)."""
    return text.replace("$", "$$")


def dump_yaml(documents: list[dict[str, Any]], header: str = "", explicit_start: bool = True) -> str:
    """YAML documents in insertion order, without anchors; multi-line strings (a config file) as
    `|` blocks."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    Dumper.ignore_aliases = lambda self, data: True  # type: ignore[method-assign]  # no &id001 anchors
    return header + yaml.dump_all(
        documents, Dumper=Dumper, sort_keys=False, default_flow_style=False, width=120, explicit_start=explicit_start
    )


def merge_and_report(root: str) -> None:
    """The step a launch that waits for its shards ends with (the lifecycle's `settle`; an
    orchestrator of the older form calls it itself): merge what they wrote (also
    after a failure: the report then says what is missing) and print the report (of a sweep: the
    models × benchmarks table). What could not be read, and what the merge left out (no HTML
    without the plotting extra), are said on stderr as `shardeval merge` says them. Then the
    config's `export:` targets (shardeval.results.trackers): a failing one is a warning."""
    # Not at the top: orchestrator plugins import this module when plugins load; merge loads when a run ends.
    from shardeval.results import sweep_merge, trackers

    try:
        merged = sweep_merge.merge_any(root)
    except UsageError as exc:
        print(f"shardeval: nothing to merge: {exc}", file=sys.stderr)
        return
    for line in merged.warnings:
        print(f"shardeval: warning: {line}", file=sys.stderr)
    for notice in merged.notices:
        print(f"shardeval: {notice}", file=sys.stderr)
    print(merged.text, end="")
    print(f"\nmerged into {merged.out}/ — `shardeval merge {root}` redoes it, `shardeval status {root}` shows progress")
    if not merged.notices:
        print(f"open {merged.page} in a browser: {merged.page_shows}")
    # the config's `export:` targets; a tracker that fails is a warning, the merge stands
    trackers.export_after_merge(merged, lambda line: print(f"shardeval: warning: {line}", file=sys.stderr), print)
