"""The `inspect` benchmark: one Inspect task, its samples as problems, scored by the task's own scorers.

A problem is one sample (its id kept: shards and resume go by it); `repeats` are Inspect's epochs.
Inspect's runtime answers and scores it in the shard (shardeval_inspect.solver), so a record's
scores are the scorers' values as Inspect's `value_to_float` reads them: `scores[scorer]` for each
scorer (`scorer/key` for a scorer with several values), the first one the headline `score`.
The dataset fingerprint covers Inspect's version, the task's source file, its arguments, the limits
and every sample, so a shard never resumes or merges with answers to another task.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from typing import TYPE_CHECKING, Any

from shardeval.api.benchmark import Benchmark, decode_params, PrepareContext, preparing, Problem, Score
from shardeval.api.plugin import UsageError

from shardeval_inspect.offline import (
    images_line,
    keep,
    keep_files,
    missing_images,
    PREPARED_KEY,
    remote_files,
    SANDBOX_FILE,
    sandbox_images,
    task_key,
)
from shardeval_inspect.params import InspectParams
from shardeval_inspect.provider import check_provider
from shardeval_inspect.task import check_sandbox, docker_configs, load, LoadedTask, sandbox_type, task_dir

if TYPE_CHECKING:
    from inspect_ai.model import ChatMessage

SOURCE = "benchmark inspect"


def inspect_params(params: dict[str, Any]) -> InspectParams:
    if isinstance(params, dict) and "task" not in params:
        raise UsageError(f"{SOURCE}: needs params.task: `path/to/tasks.py@task_name` or a registered Inspect task; docs/inspect.md")
    return decode_params(params, InspectParams, source=SOURCE)


def benchmark_id(name: str) -> str:
    """A task's name as a folder name (shardeval ids: letters, digits, '.', '_', '-')."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name).lstrip(".-") or "task"


class InspectBenchmark(Benchmark):
    name = "inspect"
    solver = "inspect"
    scores_from = "solver"  # the task's scorers ran inside Inspect, where the sample ran (its sandbox)
    metrics = ("accuracy", "pass@k")
    requests_note = (
        "Inspect's runtime makes them, with the task's own GenerateConfig; the solver.generation keys that "
        "are set override it, as `inspect eval --temperature ...` would"
    )

    @classmethod
    def expand(cls, params: dict[str, Any]) -> list[tuple[str, dict[str, Any]]] | None:
        """One benchmark named after its task (its folder, its merged log): loading it here checks
        the task, its arguments and its sandbox before anything is asked."""
        loaded = load(inspect_params(params))
        return [(benchmark_id(loaded.name), params)]

    @classmethod
    def quick_params(cls, argument: str) -> dict[str, Any]:
        if not argument:
            raise UsageError("--bench inspect:TASK: give the task, e.g. --bench inspect:path/to/tasks.py@my_task")
        return {"task": argument}

    @classmethod
    def default_repeats(cls, params: dict[str, Any]) -> int | None:
        """The task's own `epochs` (`Task(epochs=Epochs(3, "mean"))`) when the config leaves
        `repeats` out, as `inspect eval` runs it: 1 instead of 3 gave another number than Inspect's."""
        epochs = getattr(load(inspect_params(params)).task, "epochs", None)
        return epochs if isinstance(epochs, int) and epochs > 1 else None

    @classmethod
    def default_sampling(cls, repeats: int) -> dict[str, Any]:
        """Nothing: the task's own GenerateConfig (and Inspect's defaults) decide, as under `inspect eval`."""
        return {}

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = inspect_params(params)
        self.raw_params = dict(params)  # the solver loads the same task from them (cached)
        self.loaded: LoadedTask = load(self.params)
        self.scorer_version = f"inspect_ai {self.loaded.inspect_version}; task {self.loaded.source_sha256}"

    def preflight(self) -> None:
        check_provider()
        if preparing():  # the login node need not run the sandbox: the nodes must (their images: `prepare`)
            return
        where = f"{SOURCE} {self.params.task!r}"
        check_sandbox(where, sandbox_type(self.loaded.task, self.params))
        if self.loaded.prepared is not None:  # a prepared shard, offline: the sandbox's images must be here already
            check_prepared_images(where, self.loaded.prepared)

    def prepare(self, ctx: PrepareContext) -> str | None:
        """Keep the task's datasets as Inspect loaded them and the files its samples name by URL
        (shardeval_inspect.offline), and say which sandbox images the nodes must have (docker images
        are not moved: one line)."""
        spec, args = self.params.task, json.dumps(self.params.task_args, sort_keys=True)
        folder = ctx.folder(os.path.join(PREPARED_KEY, task_key(spec, args)))
        kept = keep(folder, list(self.loaded.datasets))
        keep_files(folder, remote_files(self.loaded.samples))  # what Inspect would fetch when a sample's sandbox starts
        if sandbox_type(self.loaded.task, self.params) == "docker":
            images, built = sandbox_images(docker_configs(self.loaded, self.params), task_dir(spec))
            with open(os.path.join(folder, SANDBOX_FILE), "w", encoding="utf-8") as f:
                json.dump({"images": images, "built": built}, f, indent=1)
            print(images_line(self.loaded.name, images, built), file=sys.stderr)
        return kept

    def size(self) -> int:
        return len(self.loaded.samples)

    def problem(self, idx: int) -> Problem:
        sample = self.loaded.samples[idx]
        prompt, messages = _input(sample.input)
        return Problem(
            idx=idx,
            id=str(sample.id),
            prompt=prompt,
            messages=messages,
            reference=_target(sample.target),
            metadata={"inspect": {"id": sample.id, "params": self.raw_params}},
        )

    def score(self, problem: Problem, response: str) -> Score:
        raise UsageError(f"{SOURCE}: its answers are scored by the task's own scorers, inside Inspect (the `inspect` solver)")

    def fingerprint(self) -> str:
        h = hashlib.sha256()
        h.update(
            json.dumps(
                {"inspect_ai": self.loaded.inspect_version, "source": self.loaded.source_sha256, "params": self.params.identity()},
                sort_keys=True,
            ).encode()
        )
        for sample in self.loaded.samples:
            h.update(sample.model_dump_json(exclude_none=True).encode() + b"\n")
        return "sha256:" + h.hexdigest()


def _input(value: str | list[ChatMessage]) -> tuple[str | None, list[dict[str, str]] | None]:
    if isinstance(value, str):
        return value, None
    return None, [{"role": m.role, "content": m.text} for m in value]


def _target(target: str | list[str]) -> str | None:
    if isinstance(target, list):
        return ", ".join(target)
    return target or None


def check_prepared_images(where: str, prepared: str) -> None:
    """A prepared shard's docker sandbox images, present on this node before any sample runs (one
    line, exit 2, when one is not: a node without internet cannot pull it)."""
    try:
        with open(os.path.join(prepared, SANDBOX_FILE), encoding="utf-8") as f:
            images = json.load(f).get("images", [])
    except FileNotFoundError:
        return
    if missing := missing_images(images):
        raise UsageError(
            f"{where}: its docker sandbox needs the image(s) {', '.join(missing)}, which this node does not have, and a "
            "prepared run does not pull (`shardeval prepare` named them); docker pull or docker load them on the node "
            "(docs/offline.md)"
        )
