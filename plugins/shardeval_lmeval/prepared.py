"""An lm_eval plan kept once by `shardeval prepare`, read by every shard (docs/lm-eval.md,
"Prepared runs (nodes without internet)").

`prepare_plan` runs where the network is, after lm-eval planned the tasks as always
(shardeval_lmeval.plan): into the preparation's folder `lm_eval/<hash of the plan key>/` go

- `plan.json`: lm-eval's version, the leaf tasks in lm-eval's order (what the config's group
  expands to), each task's file and its sha256 (the plan hash the preparation records);
- `tasks/<task>.json`: every document with its Instances' arguments and every request body, the
  task's identity (its config as the dataset fingerprint reads it, the scorer's version, its
  aggregations) and how lm-eval built the task (its YAML, a group's overrides, the metadata);
- `datasets/<task>/`: the task's dataset as lm-eval loaded it (`save_to_disk`);
- `tokenizer/`: the wire model's tokenizer (`save_pretrained`), for lm-eval's results files.

A prepared shard (`read_prepared_plan`) reads the index when the config is loaded and a task's
file when its benchmark is built: no lm-eval planning, no task index, no dataset or tokenizer.
lm-eval is imported only when the first document is scored: the task is rebuilt from its YAML and
its kept dataset (`rebuild_task`, as lm-eval's TaskFactory builds it), because lm-eval's filters and
`process_results` score; the rebuilt task's resolved config must equal the planned one's.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec

from shardeval.api.benchmark import PrepareContext, prepared_folder
from shardeval.api.plugin import library_call, UsageError

from shardeval_lmeval.params import EXTRA, LmEvalParams
from shardeval_lmeval.plan import _PLANS, DocPlan, plan, Plan, quiet, stable_json, TaskPlan

PLUGIN_DIR = "lm_eval"  # the preparation's folder of this plugin: one sub-folder per plan
INDEX = "plan.json"
HOW = "run `shardeval prepare CONFIG -o OUT` again where the network is (docs/offline.md)"


class KeptRequest(msgspec.Struct, array_like=True):
    """One lm-eval Instance of a document, as scoring rebuilds it."""

    request_type: str
    arguments: list[Any]  # a chat context is {"JsonChatStr": prompt}
    idx: int
    repeats: int


class KeptDoc(msgspec.Struct):
    doc_id: int
    doc: dict[str, Any]
    instances: list[KeptRequest]
    requests: list[dict[str, Any]]
    target: str


class KeptTask(msgspec.Struct):
    name: str
    config_json: str
    scorer_version: str
    aggregations: dict[str, str]
    dump_json: str  # the task's whole resolved config (stable_json): a rebuilt task must have this one
    recipe: dict[str, Any]  # how lm-eval's TaskFactory built it (shardeval_lmeval.plan.recording_builds)
    final: dict[str, Any]  # what simple_evaluate set on it after building (num_fewshot, generation_kwargs)
    dataset: str  # its folder, relative to the plan's
    docs: list[KeptDoc]


class PlanIndex(msgspec.Struct):
    lm_eval_version: str
    plan_key: str
    tasks: dict[str, str]  # leaf task -> its file (relative), in lm-eval's order
    hashes: dict[str, str]  # leaf task -> sha256 of its file
    tokenizer: str | None = None  # the wire model's tokenizer folder (relative), when it had one


@dataclass
class KeptInstance:
    """The fields of an lm-eval Instance scoring reads (shardeval_lmeval.benchmark.doc_metrics)."""

    request_type: str
    doc: dict[str, Any]
    arguments: tuple[Any, ...]
    idx: int
    task_name: str
    doc_id: int
    repeats: int


def plan_folder_key(params: LmEvalParams) -> str:
    """The preparation folder key of the plan `params` make (the plan key's hash)."""
    return f"{PLUGIN_DIR}/{hashlib.sha256(params.plan_key().encode()).hexdigest()[:16]}"


# --- where the network is: keep the plan ---------------------------------------------------------

_KEPT: dict[str, dict[str, str]] = {}  # plan folder -> task -> plan hash (a group is kept once per process)


def prepare_plan(plan: Plan, ctx: PrepareContext) -> dict[str, str]:
    """Keep `plan` in the preparation (once per process); each leaf task's plan hash."""
    folder = ctx.folder(plan_folder_key(plan.params))
    if folder not in _KEPT:
        with library_call("lm-eval", f"benchmark lm_eval: preparing {', '.join(plan.tasks)}"), quiet():
            _KEPT[folder] = _write_plan(plan, folder)
    return _KEPT[folder]


def _write_plan(plan: Plan, folder: str) -> dict[str, str]:
    files, hashes = {}, {}
    for name, task_plan in plan.tasks.items():
        file = f"tasks/{_file_name(name)}.json"
        data = msgspec.json.encode(_kept_task(plan, task_plan, folder))
        _write(os.path.join(folder, file), data)
        files[name], hashes[name] = file, hashlib.sha256(data).hexdigest()
    tokenizer = _keep_tokenizer(plan.wire_model, folder)
    index = PlanIndex(
        lm_eval_version=plan.lm_eval_version, plan_key=plan.params.plan_key(), tasks=files, hashes=hashes, tokenizer=tokenizer
    )
    _write(os.path.join(folder, INDEX), msgspec.json.encode(index))
    return hashes


def _kept_task(plan: Plan, task_plan: TaskPlan, folder: str) -> KeptTask:
    task = task_plan.task
    name = task_plan.name
    recipe = plan.recipes.get(name)
    if recipe is None or task.__class__.__name__ != "ConfigurableTask":
        raise UsageError(
            f"benchmark lm_eval: task {name} cannot be prepared: lm-eval builds it from a Python class, which a "
            "shard cannot rebuild from the kept files; run it unprepared, on nodes with the network"
        )
    dataset = f"datasets/{_file_name(name)}"
    if not hasattr(getattr(task, "dataset", None), "save_to_disk"):
        raise UsageError(f"benchmark lm_eval: task {name} cannot be prepared: its dataset is no Hugging Face dataset")
    task.dataset.save_to_disk(os.path.join(folder, dataset))
    final = {"num_fewshot": task.get_config("num_fewshot"), "generation_kwargs": task.get_config("generation_kwargs")}
    kept = KeptTask(
        name=name,
        config_json=task_plan.config_json,
        scorer_version=task_plan.scorer_version,
        aggregations=task_plan.aggregations,
        dump_json=stable_json(task.dump_config()).decode(),
        recipe=recipe,
        final=final,
        dataset=dataset,
        docs=[_kept_doc(name, d, task) for d in task_plan.docs],
    )
    _same_after_json(f"task {name}'s build (its YAML, overrides and metadata)", recipe)
    rebuild_task(kept, folder)  # a shard will rebuild it so: it must score as the planned task does
    return kept


def _kept_doc(name: str, d: DocPlan, task: Any) -> KeptDoc:
    _same_after_json(f"task {name}, document {d.doc_id}", d.doc)
    for i in d.instances:
        _same_after_json(
            f"task {name}, document {d.doc_id}'s request {i.idx}", i.arguments, encode=_encode_arguments, decode=_decode_arguments
        )
    return KeptDoc(
        doc_id=d.doc_id,
        doc=d.doc,
        instances=[KeptRequest(i.request_type, _encode_arguments(i.arguments), i.idx, i.repeats) for i in d.instances],
        requests=d.requests,
        target=str(task.doc_to_target(d.doc)),
    )


def _same_after_json(what: str, value: Any, encode: Any = lambda v: v, decode: Any = lambda v: v) -> None:
    """What a shard reads back from JSON (a document, a request's arguments, a task's build) must
    be what lm-eval planned with: refused at `shardeval prepare` otherwise."""
    try:
        back = decode(msgspec.json.decode(msgspec.json.encode(encode(value))))
    except (TypeError, msgspec.EncodeError) as exc:
        back, why = None, str(exc)
    else:
        why = "a value JSON does not keep as it is"
    if back != value:
        raise UsageError(f"benchmark lm_eval: {what} cannot be prepared ({why}); run it unprepared, on nodes with the network")


def _keep_tokenizer(wire_model: Any, folder: str) -> str | None:
    tokenizer = getattr(wire_model, "tokenizer", None)
    if tokenizer is None or not hasattr(tokenizer, "save_pretrained"):
        return None
    tokenizer.save_pretrained(os.path.join(folder, "tokenizer"))
    return "tokenizer"


def _encode_arguments(arguments: tuple[Any, ...]) -> list[Any]:
    """An Instance's arguments as JSON keeps them (a chat context: {"JsonChatStr": prompt})."""
    return [{"JsonChatStr": a.prompt} if type(a).__name__ == "JsonChatStr" else a for a in arguments]


def _decode_arguments(arguments: list[Any]) -> tuple[Any, ...]:
    def one(argument: Any) -> Any:
        if isinstance(argument, dict) and list(argument) == ["JsonChatStr"]:
            from lm_eval.models.api_models import JsonChatStr

            return JsonChatStr(argument["JsonChatStr"])
        return argument

    return tuple(one(a) for a in arguments)


def _file_name(task: str) -> str:
    safe = "".join(c if c.isalnum() or c in "_.-" else "_" for c in task).lstrip(".-") or "task"
    return safe if safe == task else f"{safe}-{hashlib.sha256(task.encode()).hexdigest()[:8]}"


def _write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


# --- a prepared shard: read it ---------------------------------------------------------------------


def planned(params: LmEvalParams) -> Plan:
    """The plan for `params`: the kept one in a prepared shard, else lm-eval's (once per process either way)."""
    key = params.plan_key()
    if key not in _PLANS and (kept := read_prepared_plan(params)) is not None:
        _PLANS[key] = kept
    return plan(params)


def read_prepared_plan(params: LmEvalParams) -> Plan | None:
    """The kept plan of `params` in a prepared shard; None when the run was not prepared for lm-eval."""
    if prepared_folder(PLUGIN_DIR) is None:
        return None
    tasks = ", ".join(params.task_list())
    folder = prepared_folder(plan_folder_key(params))
    if folder is None:
        raise UsageError(
            f"benchmark lm_eval: tasks {tasks} were not prepared with these params (the config changed since `shardeval prepare`?); {HOW}"
        )
    try:
        with open(os.path.join(folder, INDEX), "rb") as f:
            index = msgspec.json.decode(f.read(), type=PlanIndex)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise UsageError(f"benchmark lm_eval: the prepared plan of tasks {tasks} cannot be read ({exc}); {HOW}") from None
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("lm_eval")
    except PackageNotFoundError:
        raise UsageError(f"benchmark lm_eval: lm-evaluation-harness is not installed; {EXTRA}") from None
    if installed != index.lm_eval_version:
        raise UsageError(
            f"benchmark lm_eval: the run was prepared with lm-eval {index.lm_eval_version}, this node has {installed}; "
            f"install the same lm-eval on both, or {HOW}"
        )
    return Plan(params=params, lm_eval_version=index.lm_eval_version, tasks=KeptTasks(folder, index))


class KeptTasks(Mapping[str, TaskPlan]):
    """The plan's leaf tasks, each read from its file when first asked for (expanding a group reads none)."""

    def __init__(self, folder: str, index: PlanIndex) -> None:
        self.folder = folder
        self.index = index
        self._read: dict[str, TaskPlan] = {}

    def __getitem__(self, name: str) -> TaskPlan:
        if name not in self._read:
            file = self.index.tasks[name]  # KeyError: not a task of the plan
            try:
                with open(os.path.join(self.folder, file), "rb") as f:
                    kept = msgspec.json.decode(f.read(), type=KeptTask)
            except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise UsageError(f"benchmark lm_eval: the prepared plan of task {name} cannot be read ({exc}); {HOW}") from None
            self._read[name] = _task_plan(kept, self.folder)
        return self._read[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.index.tasks)

    def __len__(self) -> int:
        return len(self.index.tasks)


def _task_plan(kept: KeptTask, folder: str) -> TaskPlan:
    docs = []
    for d in kept.docs:
        instances = [
            KeptInstance(r.request_type, d.doc, _decode_arguments(r.arguments), r.idx, kept.name, d.doc_id, r.repeats) for r in d.instances
        ]
        docs.append(DocPlan(doc_id=d.doc_id, doc=d.doc, instances=instances, requests=d.requests, target=d.target))

    def load() -> Any:
        with library_call("lm-eval", f"benchmark lm_eval: task {kept.name}, rebuilt from the preparation to score"), quiet():
            return rebuild_task(kept, folder)

    return TaskPlan(
        name=kept.name,
        docs=docs,
        config_json=kept.config_json,
        scorer_version=kept.scorer_version,
        aggregations=kept.aggregations,
        load_task=load,
    )


def rebuild_task(kept: KeptTask, folder: str) -> Any:
    """The lm-eval task that planned `kept`, built as lm-eval's TaskFactory builds it (its YAML, the
    overrides, the metadata) with its dataset read from the kept copy, then set as simple_evaluate
    set it; its resolved config must be the planned one's."""
    import datasets
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.tasks._factory import TaskFactory

    dataset_dir = os.path.join(folder, kept.dataset)

    class PreparedTask(ConfigurableTask):
        def download(self, dataset_kwargs: dict[str, Any] | None = None, **kwargs: Any) -> None:
            self.dataset = datasets.load_from_disk(dataset_dir)

    recipe = kept.recipe
    yaml_path = recipe.get("yaml_path")
    entry = SimpleNamespace(name=kept.name, yaml_path=Path(yaml_path) if yaml_path else None, cfg=recipe.get("cfg"))
    config = TaskFactory(meta=recipe.get("meta"))._load_full_config(entry, recipe.get("overrides"))
    for key in ("tag", "group", "task_list"):
        config.pop(key, None)
    task = PreparedTask(config=config)
    for key, value in kept.final.items():
        if value is not None:
            task.set_config(key=key, value=json.loads(json.dumps(value)))
    dumped = stable_json(task.dump_config()).decode()
    if dumped != kept.dump_json:
        planned, now = json.loads(kept.dump_json), json.loads(dumped)
        differ = sorted(k for k in set(planned) | set(now) if planned.get(k) != now.get(k))
        raise UsageError(
            f"benchmark lm_eval: task {kept.name} rebuilt from the preparation is not the task lm-eval planned "
            f"(its {', '.join(differ)} differ: the task's YAML or lm-eval changed since); {HOW}"
        )
    return task
