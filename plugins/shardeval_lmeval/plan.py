"""The plan of an lm_eval benchmark: every request lm-eval would send, made by lm-eval itself in
one process, then split by document.

`lm_eval.simple_evaluate` runs as the CLI runs it (its EvaluatorConfig, its seeds, its TaskManager
with the include path), with a stand-in model that answers nothing: lm-eval loads the tasks, draws
each document's few-shot examples from its sampler as it walks the documents in order, and builds
the Instances. Those are the plan. Because the plan is always the one-process plan, the prompts
do not depend on how many shards share the work (docs/lm-eval.md explains lm-eval's #1719).
One plan per process and key: expanding the config and building each leaf task's benchmark share it.

A prepared run (`shardeval prepare`, docs/lm-eval.md "Prepared runs") kept the plan on disk
(shardeval_lmeval.prepared): a shard then reads it there and runs none of this planning.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import hashlib
import json
import logging
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Iterator, Mapping

from shardeval.api.plugin import library_call, UsageError

from shardeval_lmeval.params import LmEvalParams, require_lm_eval
from shardeval_lmeval.wire import Wire, build_model

log = logging.getLogger("shardeval.lm_eval")

SUPPORTED = ("loglikelihood", "loglikelihood_rolling", "generate_until")
CHAT_MODEL = "local-chat-completions"  # the one lm-eval API model that reads think_end_token
# a node without internet cannot load a dataset or tokenizer from the Hub: planned where the network is, it need not
OFFLINE_HINT = "on a node without internet, prepare the run where the network is: `shardeval prepare CONFIG -o OUT` (docs/offline.md)"
PLACEHOLDER_MODEL = "served-model"  # bodies are planned before the served model is known; the solver names it


ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
# The task config keys that score answers rather than make requests (the rest is the dataset's identity).
SCORING_KEYS = ("filter_list", "metric_list", "process_results")


@dataclass
class DocPlan:
    doc_id: int
    doc: dict[str, Any]
    instances: list[Any]  # lm_eval Instances, by idx (a prepared plan's: shardeval_lmeval.prepared.KeptInstance)
    requests: list[dict[str, Any]]  # per instance: {"type", "idx", "repeats", "wire": [{"body", "ctxlen"?}]}
    target: str | None = None  # the task's doc_to_target, as text (None: asked of the task when needed)

    @property
    def prompt(self) -> str:
        """The first request's context, as text (a chat one's JSON)."""
        first = self.instances[0].arguments[0]
        return first if isinstance(first, str) else getattr(first, "prompt", str(first))


@dataclass
class TaskPlan:
    """One leaf task's documents and what identifies how they are asked and scored. `task` is the
    lm_eval Task that scores them (its filters and process_results): the one that planned them, or
    in a prepared shard one rebuilt from the kept dataset the first time a document is scored."""

    name: str
    docs: list[DocPlan]
    config_json: str  # the task's resolved config without its scoring keys (stable_json): the requests' identity
    scorer_version: str  # "lm_eval <hash>" of lm-eval's version, the scoring keys and the metadata
    aggregations: dict[str, str]  # metric -> the name lm-eval registered its aggregation under ("" if none)
    load_task: Callable[[], Any]
    _task: Any = None

    @property
    def task(self) -> Any:
        if self._task is None:
            self._task = self.load_task()
        return self._task


@dataclass
class Plan:
    params: LmEvalParams
    lm_eval_version: str
    tasks: Mapping[str, TaskPlan]
    groups: dict[str, Any] = field(default_factory=dict)
    config: Any = None  # lm-eval's EvaluatorConfig
    wire_model: Any = None  # lm-eval's API model that made the bodies (its chat template, its tokenizer)
    recipes: dict[str, dict[str, Any]] = field(default_factory=dict)  # task -> how lm-eval built it (recording_builds)


_PLANS: dict[str, Plan] = {}


def plan(params: LmEvalParams) -> Plan:
    """The plan for `params` (made once per process; a prepared shard's is read: shardeval_lmeval.prepared)."""
    key = params.plan_key()
    if key not in _PLANS:
        tasks = params.task or ", ".join(params.task_list())
        with library_call("lm-eval", f"benchmark lm_eval: tasks {tasks[:80] + '…' if len(tasks) > 80 else tasks}"):
            _PLANS[key] = _make(params)
    return _PLANS[key]


def evaluator_config(params: LmEvalParams, model_args: dict[str, Any]) -> Any:
    """lm-eval's EvaluatorConfig for these params, normalised as the CLI normalises its flags."""
    from lm_eval.config.evaluate_config import EvaluatorConfig

    options: dict[str, Any] = {
        "tasks": params.task_list(),
        "include_path": params.include_path,
        "num_fewshot": params.num_fewshot,
        "apply_chat_template": params.apply_chat_template,
        "fewshot_as_multiturn": params.fewshot_as_multiturn,
        "system_instruction": params.system_instruction,
        "gen_kwargs": params.gen_kwargs,
        "limit": params.limit,
        "model": params.wire_model(),
        "model_args": dict(model_args),
    }
    if params.seed is not None:
        options["seed"] = params.seed
    try:
        return EvaluatorConfig(**options)._configure()
    except (ValueError, TypeError) as exc:
        raise UsageError(f"benchmark lm_eval: {exc}") from None


@dataclass
class Setup:
    """What lm-eval is run with: its version, its EvaluatorConfig, the TaskManager, the API model."""

    version: str
    config: Any
    manager: Any
    wire_model: Any


def setup(params: LmEvalParams) -> Setup:
    """lm-eval set up as the CLI sets itself up for `params` (no task loaded yet); bad params: one line."""
    version = require_lm_eval()
    if not params.task_list():
        raise UsageError("benchmark lm_eval: params.tasks is empty; name lm-eval tasks or groups, e.g. tasks: [gsm8k]")
    if params.include_path is not None and not os.path.isdir(params.include_path):
        raise UsageError(f"benchmark lm_eval: params.include_path {params.include_path!r} is not a directory")
    if params.think_end_token is not None and params.wire_model() != CHAT_MODEL:
        raise UsageError(
            f"benchmark lm_eval: params.think_end_token is read only by lm-eval's {CHAT_MODEL} (lm-eval "
            f"{version}'s {params.wire_model()} ignores it and scores the whole text); use it with "
            f"apply_chat_template: true (model {CHAT_MODEL}), or leave it out (shardeval then scores the text "
            "after the service's reasoning_tags closing tag; docs/lm-eval.md)"
        )
    model_args = params.model_args(PLACEHOLDER_MODEL)
    if model_args.get("tokenizer") == PLACEHOLDER_MODEL:
        raise UsageError(
            "benchmark lm_eval: params.tokenizer is not set; name the served model's Hugging Face "
            "tokenizer (a name or a local path), or set tokenizer_backend: none for text prompts"
        )
    with quiet():  # the tokenizer first: on a node without internet it is the quick one to fail
        model = _wire_model(params, model_args)
        config = evaluator_config(params, model_args)
        manager = _task_manager(config)
    return Setup(version=version, config=config, manager=manager, wire_model=model)


def _make(params: LmEvalParams) -> Plan:
    s = setup(params)
    recipes: dict[str, dict[str, Any]] = {}
    with quiet():
        wire = Wire(s.wire_model)
        with recording_builds(recipes):
            loaded = _plan_requests(s.config, s.manager, wire.model)
        tasks = {name: task_plan(name, task, _docs(name, task, wire), s.version) for name, task in loaded["tasks"].items()}
    return Plan(
        params=params,
        lm_eval_version=s.version,
        tasks=tasks,
        groups=loaded.get("groups", {}),
        config=s.config,
        wire_model=wire.model,
        recipes=recipes,
    )


def task_plan(name: str, task: Any, docs: list[DocPlan], version: str) -> TaskPlan:
    """A planned task with its identity: the requests' config and the scorer's version."""
    config = task.dump_config()
    scoring = {key: config.pop(key, None) for key in SCORING_KEYS}
    # What scores them: the scorer's identity, so shards scored differently never mix, while
    # `shardeval rescore` may re-score saved answers after a filter is edited.
    scorer = hashlib.sha256(stable_json({"lm_eval": version, "scoring": scoring, "metadata": config.get("metadata")})).hexdigest()[:16]
    return TaskPlan(
        name=name,
        docs=docs,
        config_json=stable_json(config).decode(),
        scorer_version=f"lm_eval {scorer}",
        aggregations={m: aggregation_name(f) for m, f in task.aggregation().items()},
        load_task=lambda: task,
    )


def aggregation_name(fn: Any) -> str:
    """The name lm-eval registered an aggregation function under ("" when it is not registered)."""
    import lm_eval.api.metrics  # noqa: F401  (registers lm-eval's aggregations)
    from lm_eval.api.registry import AGGREGATION_REGISTRY

    return next((name for name, f in AGGREGATION_REGISTRY.items() if f is fn), "")


def stable_json(data: Any) -> bytes:
    """A task config as bytes that are the same in every process: a `!function` (process_results,
    doc_to_text, …) is its module and name, never its repr, which holds a memory address; a set
    is sorted."""

    def named(obj: Any) -> Any:
        if isinstance(obj, (set, frozenset)):  # str() of a set follows the process's hash seed
            return sorted(obj, key=str)
        if callable(obj):
            return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__qualname__)}"
        return ADDRESS.sub("", str(obj))

    return json.dumps(data, sort_keys=True, default=named).encode()


@contextlib.contextmanager
def recording_builds(recipes: dict[str, dict[str, Any]]) -> Iterator[None]:
    """Keep, per task lm-eval builds, what its TaskFactory built it from (the YAML's path or the
    inline config, the overrides a group gave it, the TaskManager's metadata): a prepared shard
    rebuilds the task for scoring from that, without lm-eval's task index (shardeval_lmeval.prepared)."""
    from lm_eval.tasks._factory import TaskFactory

    build = TaskFactory._build_task

    def recorded(factory: Any, entry: Any, overrides: dict[str, Any] | None) -> Any:
        task = build(factory, entry, overrides)
        name = getattr(getattr(task, "config", None), "task", None)
        if isinstance(name, str):
            recipes[name] = {
                "yaml_path": str(entry.yaml_path) if entry.yaml_path else None,
                "cfg": None if entry.yaml_path else copy.deepcopy(entry.cfg),
                "overrides": copy.deepcopy(overrides),
                "meta": copy.deepcopy(factory._meta),
            }
        return task

    TaskFactory._build_task = recorded
    try:
        yield
    finally:
        TaskFactory._build_task = build


def _task_manager(config: Any) -> Any:
    """lm-eval's TaskManager with the tasks resolved (an unknown one: one line with the closest names)."""
    try:
        return config.process_tasks(config.metadata)
    except ValueError as exc:
        text = str(exc)
        if "Tasks not found" not in text:
            raise UsageError(f"benchmark lm_eval: {text}") from None
        from lm_eval.tasks import TaskManager

        known = TaskManager(include_path=config.include_path).all_tasks
        missing = [t.strip() for t in text.split(":", 1)[1].split(",")]
        hints = "; ".join(
            f"{m!r}: did you mean {', '.join(difflib.get_close_matches(m, known, n=3, cutoff=0.5)) or 'nothing close'}?" for m in missing
        )
        raise UsageError(
            f"benchmark lm_eval: unknown lm-eval task(s) {', '.join(missing)} ({hints}); "
            "`lm_eval ls tasks` lists them, params.include_path adds your own"
        ) from None


def _wire_model(params: LmEvalParams, model_args: dict[str, Any]) -> Any:
    try:
        return build_model(params.wire_model(), model_args)
    except (OSError, ValueError) as exc:  # a tokenizer that cannot be loaded (offline, a wrong name)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(
            f"benchmark lm_eval: the tokenizer {model_args.get('tokenizer')!r} cannot be loaded ({first}); "
            f"set params.tokenizer to the served model's tokenizer (a local path works offline); {OFFLINE_HINT}"
        ) from None


def stand_in_model(wire_model: Any, answer: Any = None) -> Any:
    """lm-eval's model interface without a model: each request method returns `answer(kind,
    instances)` (None: empty answers, for planning); chat templates are the wire model's."""
    from lm_eval.api.model import LM

    def answers(kind: str, requests: list[Any], empty: Any) -> list[Any]:
        stand_in.asked = True
        return [empty] * len(requests) if answer is None else answer(kind, requests)

    class StandIn(LM):
        asked = False

        def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[Any]:
            return answers("loglikelihood", requests, (0.0, False))

        def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[Any]:
            return answers("loglikelihood_rolling", requests, 0.0)

        def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[Any]:
            return answers("generate_until", requests, "")

        def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> Any:
            return wire_model.apply_chat_template(chat_history, add_generation_prompt)

        @property
        def tokenizer_name(self) -> str:
            return wire_model.tokenizer_name

        def chat_template(self, chat_template: bool | str = False) -> str | None:
            return wire_model.chat_template(chat_template) if hasattr(wire_model, "chat_template") else None

    stand_in = StandIn()
    return stand_in


def simple_evaluate(config: Any, manager: Any, model: Any, **options: Any) -> Any:
    """lm_eval.simple_evaluate with the CLI's options from `config` (its EvaluatorConfig)."""
    from lm_eval import simple_evaluate as evaluate

    seeds = config.seed or [None] * 4
    return evaluate(
        model=model,
        tasks=config.tasks,
        num_fewshot=config.num_fewshot,
        limit=config.limit,
        system_instruction=config.system_instruction,
        apply_chat_template=config.apply_chat_template,
        fewshot_as_multiturn=bool(config.fewshot_as_multiturn),
        gen_kwargs=config.gen_kwargs,
        task_manager=manager,
        random_seed=seeds[0],
        numpy_random_seed=seeds[1],
        torch_random_seed=seeds[2],
        fewshot_random_seed=seeds[3],
        **options,
    )


def _plan_requests(config: Any, manager: Any, wire_model: Any) -> dict[str, Any]:
    """Run simple_evaluate with a stand-in model; return what its TaskManager loaded (tasks with Instances)."""
    loaded: dict[str, Any] = {}
    load = manager.load

    def keep(task_list: Any) -> Any:
        loaded.update(load(task_list))
        return loaded

    manager.load = keep
    planner = stand_in_model(wire_model)
    try:
        simple_evaluate(config, manager, planner, bootstrap_iters=0, log_samples=False)
    except Exception as exc:
        if not planner.asked:  # failed while loading or planning: the user's task, data or options
            raise UsageError(
                f"benchmark lm_eval: lm-eval cannot plan {', '.join(map(str, config.tasks))}: {_one_line(exc)}; {OFFLINE_HINT}"
            ) from None
        # scoring the planner's empty answers failed: nothing of the plan depends on it
    for name, task in loaded.get("tasks", {}).items():
        kind = task.get_config("output_type")
        if kind not in ("multiple_choice", *SUPPORTED):
            raise UsageError(
                f"benchmark lm_eval: task {name} has output_type {kind!r}; shardeval runs "
                f"{', '.join(('multiple_choice', *SUPPORTED))} tasks"
            )
    return loaded


def _docs(name: str, task: Any, wire: Wire) -> list[DocPlan]:
    by_doc: dict[int, list[Any]] = {}
    for inst in task.instances:
        by_doc.setdefault(inst.doc_id, []).append(inst)
    docs = []
    for doc_id in sorted(by_doc):
        instances = sorted(by_doc[doc_id], key=lambda i: i.idx)
        requests = [{"type": i.request_type, "idx": i.idx, "repeats": i.repeats, "wire": wire.requests(i)} for i in instances]
        docs.append(DocPlan(doc_id=doc_id, doc=instances[0].doc, instances=instances, requests=requests))
    return docs


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 400 else text[:397] + "..."


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """lm-eval, datasets and transformers log, draw progress bars and run `git describe` (whose
    "fatal: not a git repository" lands on the terminal) for every task; a shard's log needs none
    of it, and a refused task's one line must stay one line. Their loggers are raised to ERROR,
    datasets' own bars are off (tqdm reads TQDM_DISABLE only once), and stdout and stderr go to
    /dev/null meanwhile: Python's streams and the file descriptors (a subprocess writes to those).
    Errors are raised, not printed, and reported after this block."""
    from datasets.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    loggers = [logging.getLogger(n) for n in ("lm_eval", "lm-eval", "datasets", "transformers")]
    levels = [lg.level for lg in loggers]
    old = os.environ.get("TQDM_DISABLE")
    os.environ["TQDM_DISABLE"] = "1"
    bars_were_disabled = are_progress_bars_disabled()
    disable_progress_bars()
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)
        if not bars_were_disabled:
            enable_progress_bars()
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
        if old is None:
            os.environ.pop("TQDM_DISABLE", None)
        else:
            os.environ["TQDM_DISABLE"] = old
