"""The `lm_eval` benchmark: one lm-eval leaf task, its documents as problems, scored by lm-eval.

A config entry names tasks and groups; `expand` plans them (shardeval_lmeval.plan) and makes one
benchmark per leaf task, id = the task's name. A problem is one document: its metadata holds the
request bodies lm-eval would send for it (the `lm_eval` solver sends them), so the dataset
fingerprint covers every prompt, few-shot examples included (and `think_end_token`, which changes
how answers are read, when set). The response a record keeps is the list of lm-eval's answers per
request (JSON), a generated one without its thinking (shardeval_lmeval.solver); `score` runs the
task's filter pipelines and `process_results` on it, per document, as lm-eval's evaluate does:
every metric under every filter lands in `scores` ("exact_match,strict-match"), the first is the
headline `score`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

from shardeval.api.benchmark import Benchmark, decode_params, PrepareContext, Problem, Score
from shardeval.api.plugin import UsageError

from shardeval_lmeval.params import LmEvalParams
from shardeval_lmeval.plan import stable_json
from shardeval_lmeval.prepared import planned, prepare_plan

SOURCE = "benchmark lm_eval"
__all__ = ["LmEvalBenchmark", "stable_json"]
# lm-eval metrics that are right/wrong per document: their mean is an accuracy with a binomial interval
BINARY = {"acc", "acc_norm", "acc_mutual_info", "exact_match", "em", "pass@1", "prompt_level_strict_acc", "prompt_level_loose_acc"}


def _params(params: dict[str, Any]) -> LmEvalParams:
    if isinstance(params, dict) and "tasks" not in params:
        raise UsageError(
            f"{SOURCE}: needs params.tasks: lm-eval task or group names (and params.tokenizer: the served "
            "model's tokenizer); docs/lm-eval.md"
        )
    return decode_params(params, LmEvalParams, source=SOURCE)


def benchmark_id(task: str) -> str:
    """A leaf task's name as a folder name (shardeval ids: letters, digits, '.', '_', '-')."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", task).lstrip(".-") or "task"


class LmEvalBenchmark(Benchmark):
    name = "lm_eval"
    solver = "lm_eval"
    scores_from = "scorer"  # every score is lm-eval's process_results', re-made by a rescore
    metrics: tuple[str, ...] = ("accuracy", "lm_eval")

    @classmethod
    def expand(cls, params: dict[str, Any]) -> list[tuple[str, dict[str, Any]]] | None:
        p = _params(params)
        if p.task is not None:
            return None
        return [(benchmark_id(name), {**params, "task": name}) for name in planned(p).tasks]

    @classmethod
    def quick_params(cls, argument: str) -> dict[str, Any]:
        tasks = [t for t in argument.split(",") if t]
        if not tasks:
            raise UsageError("--bench lm_eval:TASKS: name lm-eval tasks or groups, e.g. --bench lm_eval:gsm8k,arc_easy")
        return {"tasks": tasks}

    @classmethod
    def default_sampling(cls, repeats: int) -> dict[str, Any]:
        return {}  # every request carries lm-eval's own temperature (its gen_kwargs; 0 by default)

    def __init__(self, params: dict[str, Any]) -> None:
        p = _params(params)
        self.plan = planned(p)
        if p.task is None:
            if len(self.plan.tasks) != 1:
                raise UsageError(
                    f"{SOURCE}: params.task is unset and the tasks hold {len(self.plan.tasks)} leaf tasks; "
                    "load the config with shardeval (it makes one benchmark per leaf task)"
                )
            p = decode_params({**params, "task": next(iter(self.plan.tasks))}, LmEvalParams, source=SOURCE)
        if p.task is None or p.task not in self.plan.tasks:
            raise UsageError(f"{SOURCE}: params.task {p.task!r} is not among the planned tasks ({', '.join(self.plan.tasks)})")
        self.params = p
        self.task_plan = self.plan.tasks[p.task]
        self.wire_model = p.wire_model()
        # how the solver reads a generated answer, when not shardeval's rule (the key is absent
        # otherwise, so the dataset fingerprint of a run without it is what it always was)
        self._reading = {"think_end_token": p.think_end_token} if p.think_end_token is not None else {}
        self.data_origin = f"lm-eval task {p.task}"
        # Corpus-level metrics (wikitext's word_perplexity: lm-eval aggregates (loglikelihood, words)
        # pairs over all documents, weighted): metric -> its registered aggregation's name. A
        # document keeps each pair's parts in `scores` ("word_perplexity,none|weighted_perplexity|0"),
        # shardeval_lmeval.metrics aggregates them with lm-eval's own function.
        aggregations = self.task_plan.aggregations
        self._corpus = {m: name for m, name in aggregations.items() if name not in PER_DOCUMENT}
        # A task without one per-document metric (every one corpus-level) has no accuracy: its
        # headline is lm-eval's numbers, never a mean of placeholder scores.
        if all(m in self._corpus for m in aggregations):
            self.metrics = ("lm_eval",)
        # What scores the answers: shards scored differently never mix (shardeval_lmeval.plan.task_plan)
        self.scorer_version = self.task_plan.scorer_version

    @property
    def task(self) -> Any:
        """The lm_eval Task that scores (in a prepared shard rebuilt on first use: shardeval_lmeval.prepared)."""
        return self.task_plan.task

    def prepare(self, ctx: PrepareContext) -> str | None:
        """Keep the plan, the task's dataset and the tokenizer in the preparation; the hash of this task's plan."""
        return prepare_plan(self.plan, ctx)[self.task_plan.name]

    def size(self) -> int:
        return len(self.task_plan.docs)

    def problem(self, idx: int) -> Problem:
        d = self.task_plan.docs[idx]
        return Problem(
            idx=idx,
            id=f"{self.task_plan.name}/{d.doc_id}",
            prompt=d.prompt,
            reference=d.target if d.target is not None else str(self.task.doc_to_target(d.doc)),
            metadata={
                "lm_eval": {
                    "task": self.task_plan.name,
                    "doc_id": d.doc_id,
                    "model": self.wire_model,
                    "requests": d.requests,
                    **self._reading,
                }
            },
        )

    def score(self, problem: Problem, response: str) -> Score:
        d = self.task_plan.docs[problem.idx]
        metrics, filtered = self.doc_metrics(d, decode_response(response, d))
        scalars = {key: float(v) for key, v in metrics.items() if _scalar(v)}
        parts = {
            f"{key}|{self._corpus[key.split(',', 1)[0]]}|{j}": float(x)
            for key, v in metrics.items()
            if _pair(v) and key.split(",", 1)[0] in self._corpus
            for j, x in enumerate(v)
        }
        headline = next(iter(scalars.values()), 0.0)
        first = next(iter(filtered.values()), [])
        extracted = first[0] if len(first) == 1 and isinstance(first[0], str) else None
        return Score(score=headline, extracted=extracted, scores={**scalars, **parts})

    def doc_metrics(self, d: Any, resps: list[list[Any]]) -> tuple[dict[str, Any], dict[str, list[Any]]]:
        """Every metric of every filter for one document, as lm-eval's evaluate computes them (the
        task's filter ensembles over the document's Instances, then process_results), and the
        filtered answers per filter."""
        from lm_eval.api.instance import Instance

        instances = [
            Instance(
                request_type=i.request_type,
                doc=i.doc,
                arguments=i.arguments,
                idx=i.idx,
                metadata=(i.task_name, i.doc_id, i.repeats),
                resps=list(r),
            )
            for i, r in zip(d.instances, resps)
        ]
        for ensemble in self.task._filters:
            ensemble.apply(instances)
        out: dict[str, Any] = {}
        filtered = {key: [i.filtered_resps[key] for i in instances] for key in instances[0].filtered_resps}
        for key, answers in filtered.items():
            for metric, value in self.task.process_results(d.doc, answers).items():
                out[f"{metric},{key}"] = value
        return out, filtered

    def fingerprint(self) -> str:
        h = hashlib.sha256()
        h.update(f"lm_eval {self.plan.lm_eval_version}\n".encode())
        h.update(self.task_plan.config_json.encode() + b"\n")
        for idx in range(self.size()):
            h.update(stable_json(self.problem(idx).metadata) + b"\n")
        return "sha256:" + h.hexdigest()


def encode_response(resps: Sequence[Sequence[object]]) -> str:
    """The record's response: lm-eval's answers, one list per request (its repeats)."""
    return json.dumps({"resps": resps}, ensure_ascii=False)


def decode_response(response: str, d: Any) -> list[list[Any]]:
    """The answers back, loglikelihood ones as lm-eval's (log-likelihood, is_greedy) tuples."""
    resps = json.loads(response)["resps"]
    if len(resps) != len(d.instances):
        raise ValueError(f"the response holds {len(resps)} answers for {len(d.instances)} requests")
    return [[lm_eval_answer(i.request_type, x) for x in r] for i, r in zip(d.instances, resps)]


def lm_eval_answer(request_type: str, saved: Any) -> Any:
    """One saved answer as lm-eval's model returns it: a loglikelihood one is a (log-likelihood,
    is_greedy) tuple, which JSON keeps as a list."""
    return tuple(saved) if request_type == "loglikelihood" else saved


PER_DOCUMENT = {"mean", "median", "nanmean"}  # aggregations of one number per document


def _pair(value: Any) -> bool:
    """A corpus-level metric's per-document item: a tuple of numbers (lm-eval's (loglikelihood, words))."""
    return isinstance(value, (tuple, list)) and bool(value) and all(_scalar(x) for x in value)


def _scalar(value: Any) -> bool:
    return isinstance(value, (int, float))  # bool too: lm-eval's exact matches are 0/1 either way
