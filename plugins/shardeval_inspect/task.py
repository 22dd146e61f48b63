"""Finding an Inspect task and reading its samples, once per process, with one-line errors.

A task is `file.py@name`, `file.py` (its only task) or a name in Inspect's registry (a package's
`@task`, such as `inspect_evals/gsm8k`). Inspect itself loads it (its loader imports the file and
creates the task with the arguments), so the samples, solver and scorers are exactly what
`inspect eval` would run. What Inspect accepts silently is checked here: task arguments the task
function does not take, and a sandbox this node cannot provide.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect as pyinspect
import io
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from shardeval.api.plugin import library_call, UsageError

from shardeval_inspect.offline import install, prepared_task_folder, recording, replaying, use_prepared_files
from shardeval_inspect.params import InspectParams, require_inspect

if TYPE_CHECKING:
    from inspect_ai import Task
    from inspect_ai.dataset import Dataset, Sample


@dataclass(frozen=True)
class LoadedTask:
    """An Inspect Task with what identifies it: the source's hash and Inspect's version."""

    task: Task
    samples: tuple[Sample, ...]  # in the dataset's order, every one with an id
    source_sha256: str  # the file that defines the task (for a registered task, its module's file)
    inspect_version: str
    datasets: tuple[tuple[str, Dataset], ...] = ()  # the loader calls its creation made (recorded; empty when prepared)
    prepared: str | None = None  # its folder in the run's preparation, when this shard reads one

    @property
    def name(self) -> str:
        return str(self.task.name)


def load(params: InspectParams) -> LoadedTask:
    """The task `params` name, created with its arguments (cached: a shard plans, runs and merges it).
    Whatever Inspect raises on the way (reading the task's dataset too) is one line (library_call)."""
    with library_call("Inspect", f"benchmarks[].params.task {params.task[:120]!r}"):
        return _load(params.task, _frozen(params.task_args))


def _frozen(args: dict[str, Any]) -> str:
    return json.dumps(args, sort_keys=True)


@lru_cache(maxsize=16)
def _load(spec: str, args_json: str) -> LoadedTask:
    version = require_inspect()
    quiet_inspect()
    from inspect_ai._eval.loader import load_tasks  # the loader `inspect eval` uses

    args = json.loads(args_json)
    where = f"benchmarks[].params.task {spec!r}"
    path = spec.split("@", 1)[0]
    if path.endswith(".py") and not os.path.isfile(path):
        raise UsageError(f"{where}: no such file {os.path.abspath(path)}; give `path/to/tasks.py@task_name` or a registered task name")
    install()  # Inspect's dataset loaders, recorded or given back (a prepared run: shardeval_inspect.offline)
    prepared = prepared_task_folder(spec, args_json)
    try:
        with _silenced(), _datasets(prepared, discovering=True):
            tasks = load_tasks([spec], {})
    except UsageError as exc:  # a dataset that needs the network, or was not prepared
        raise UsageError(f"{where}: {exc}") from None
    except Exception as exc:  # an import error in the file, a task name it does not define, ...
        raise UsageError(f"{where}: Inspect cannot load it: {type(exc).__name__}: {first_line(str(exc))}") from None
    if len(tasks) != 1:
        found = "no task" if not tasks else f"{len(tasks)} tasks ({', '.join(t.name for t in tasks)})"
        raise UsageError(
            f"{where}: it names {found}; give one task as `file.py@task_name` or a registered name "
            "(a package's task must be installed: pip install it)"
        )
    function = _task_function(spec, tasks[0].name)
    _check_args(where, function, args)
    try:
        with _silenced(), _datasets(prepared) as recorded:
            task = load_tasks([spec], args)[0]
    except UsageError as exc:
        raise UsageError(f"{where}: {exc}") from None
    except Exception as exc:
        raise UsageError(f"{where}: Inspect cannot create it with task_args {args}: {type(exc).__name__}: {first_line(str(exc))}") from None
    samples = tuple(_with_ids(task.dataset))
    if not samples:
        raise UsageError(f"{where}: its dataset has no samples")
    if prepared is not None:  # files its samples name by URL: the prepared copies (use_prepared_files)
        try:
            use_prepared_files(task, samples, prepared)
        except UsageError as exc:
            raise UsageError(f"{where}: {exc}") from None
    return LoadedTask(
        task=task,
        samples=samples,
        source_sha256=_source_hash(path, function),
        inspect_version=version,
        datasets=tuple(recorded),
        prepared=prepared,
    )


@contextlib.contextmanager
def _datasets(prepared: str | None, discovering: bool = False) -> Iterator[list[tuple[str, Dataset]]]:
    """While Inspect creates the task: its datasets given back from the preparation (`prepared`),
    else read as always and recorded (what `shardeval prepare` keeps)."""
    if prepared is not None:
        with replaying(prepared, discovering):
            yield []
    else:
        with recording(discovering) as recorded:
            yield recorded


def _task_function(spec: str, name: str) -> Any:
    """The @task function behind a loaded task (to read its parameters and source)."""
    from inspect_ai._util.registry import registry_lookup

    return registry_lookup("task", name) or registry_lookup("task", spec)


def _check_args(where: str, function: Any, args: dict[str, Any]) -> None:
    """Inspect passes unknown -T arguments on without a word; a typo would silently run the default."""
    if function is None or not args:
        return
    signature = pyinspect.signature(function)
    if any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
        return
    known = [n for n, p in signature.parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if unknown := sorted(set(args) - set(known)):
        raise UsageError(
            f"{where}: task_args {unknown[0]!r} is not an argument of the task (it takes: "
            f"{', '.join(known) or 'none'}); fix the name or drop it"
        )


def _with_ids(dataset: Dataset) -> list[Sample]:
    """The samples, each with its id: Inspect numbers samples without one 1, 2, ... in dataset order."""
    samples = list(dataset)
    for i, sample in enumerate(samples):
        if sample.id is None:
            sample.id = i + 1
    ids = [str(s.id) for s in samples]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise UsageError(
            f"the task's dataset has the sample id {dup!r} more than once; sample ids must be unique (shardeval shards and resumes by id)"
        )
    return samples


def _source_hash(path: str, function: Any) -> str:
    """sha256 of the task's source file: the file named, else the module that defines the task."""
    source = path if path.endswith(".py") and os.path.isfile(path) else None
    if source is None and function is not None:
        with contextlib.suppress(TypeError, OSError):
            source = pyinspect.getsourcefile(pyinspect.unwrap(function))
    if source is None:
        return "unknown"
    with open(source, "rb") as f:
        return "sha256:" + hashlib.sha256(f.read()).hexdigest()


def sandbox_type(task: Task, params: InspectParams) -> str | None:
    """The sandbox the samples run in: the params' override, else the task's (or its samples')."""
    if params.sandbox:
        return params.sandbox.split(":", 1)[0]
    spec = getattr(task, "sandbox", None)
    return getattr(spec, "type", None) if spec is not None else None


def task_dir(spec: str) -> str:
    """The folder a task's sandbox files are read from: the task file's, else the working directory."""
    path = spec.split("@", 1)[0]
    return os.path.dirname(os.path.abspath(path)) if path.endswith(".py") else os.getcwd()


def docker_configs(loaded: LoadedTask, params: InspectParams) -> list[Any]:
    """Each docker sandbox's config (a compose file, a Dockerfile, None: Inspect's default) the
    task's samples run in: the params' override, else the task's and its samples' own."""
    if params.sandbox:
        kind, _, config = params.sandbox.partition(":")
        return [config or None] if kind == "docker" else []
    specs = [getattr(loaded.task, "sandbox", None), *(getattr(s, "sandbox", None) for s in loaded.samples)]
    return [spec.config for spec in specs if spec is not None and spec.type == "docker"] or []


def check_sandbox(where: str, kind: str | None) -> None:
    """A sandbox this node cannot provide fails every sample: say so once, before any request."""
    if kind in (None, "local"):
        return
    if kind == "docker":
        fix = "install Docker Engine >= 24.0.6 with Compose v2, or set params.sandbox: local to run its tools on the node itself"
        if shutil.which("docker") is None:
            raise UsageError(f"{where}: the task runs in a `docker` sandbox and this node has no `docker` command; {fix}")
        try:
            compose = subprocess.run(["docker", "compose", "version", "--short"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise UsageError(f"{where}: the task runs in a `docker` sandbox and `docker compose version` failed ({exc}); {fix}") from None
        if compose.returncode != 0:
            raise UsageError(
                f"{where}: the task runs in a `docker` sandbox and this node's docker has no Compose v2 plugin "
                f"(`docker compose version`: {first_line(compose.stderr or compose.stdout)}); {fix}"
            )
        return
    from inspect_ai.util._sandbox.registry import registry_find_sandboxenv  # a plugin's sandbox (k8s, ...)

    try:
        registry_find_sandboxenv(kind)
    except Exception:
        raise UsageError(
            f"{where}: sandbox {kind!r} is not one Inspect knows on this node; install its package, "
            "or set params.sandbox to docker or local"
        ) from None


def quiet_inspect() -> None:
    """Inspect draws its own console (a task header, progress): shardeval shows its own progress."""
    os.environ.setdefault("INSPECT_DISPLAY", "none")
    from inspect_ai.util._display import init_display_type

    init_display_type(os.environ["INSPECT_DISPLAY"])


@contextlib.contextmanager
def _silenced():
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def first_line(text: str) -> str:
    """A message's first line: what a one-line error quotes of another tool's message."""
    text = (text or "").strip()
    return text.splitlines()[0] if text else "(no message)"
