"""An Inspect log made from shardeval's own records, for a benchmark that is not an Inspect task
(arith, gsm8k, a JSONL file, an lm-eval task, a judged one...): what `inspect view` shows of it.

One EvalSample per standing record of the merge (merged/<bench>/results.jsonl, epoch by epoch): the
conversation its trajectory kept, the model's answer, the score the run gave it (and each named
score), or the error that ended it. A reasoning model's turn holds its thinking as Inspect holds
it, a ContentReasoning before the answer's ContentText (docs/reasoning.md): the viewer shows it
folded above the answer, and `output.completion` is the answer that was scored. The header says what was evaluated (the benchmark as task, the
served model, the identity params) and carries shardeval's metrics with their intervals, so the
numbers read in the viewer are the ones scores.json holds. Ids come from the tracker key, so a
re-export writes the same log again rather than a new evaluation.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from collections.abc import Iterator

import msgspec

from shardeval.api.exporter import TrackerRun

if TYPE_CHECKING:
    from inspect_ai.model import ModelUsage, StopReason

from shardeval_inspect.outputs import set_status

SCORER = "shardeval"
COMPLETE = "COMPLETE"  # TrackerRun.status of a run whose every cell has an ok answer
_STOP: dict[str, StopReason] = {"stop": "stop", "length": "max_tokens", "tool_calls": "tool_calls", "content_filter": "content_filter"}
_RECORD_FACTS = (
    "status",
    "error_kind",
    "attempts",
    "seed",
    "problem_idx",
    "shard",
    "cluster",
    "run",
    "finish_reason",
    "latency_s",
    "ttft_s",
    "prompt_tokens",
    "completion_tokens",
    "cached",
    "outcome",
    "reasoning_tokens",
    "reasoning_tokens_from",
)


def stable_id(key: str, part: str) -> str:
    """An id Inspect can use (22 characters, as its own) that is the same each time for the same key."""
    return hashlib.sha256(f"{key}#{part}".encode()).hexdigest()[:22]


def iso(seconds: float | None) -> str:
    return datetime.fromtimestamp(seconds or 0.0, tz=timezone.utc).isoformat()


def read_jsonl(path: str) -> Iterator[dict[str, Any]]:
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def records_log(run: TrackerRun) -> Any:
    """The EvalLog of one (model, benchmark) from its merged records and trajectories."""
    from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalPlan, EvalSpec, EvalStats

    model = run.params.get("served_model") or run.model
    conversations = {(t["problem_id"], t["repeat"]): t for t in read_jsonl(run.trajectories_file())}
    records = list(read_jsonl(run.results_file()))
    in_order = sorted(records, key=lambda rec: rec["repeat"])  # Inspect's order: epoch by epoch, each in the data's order
    samples = [sample(rec, conversations.get((rec["problem_id"], rec["repeat"])), model, run.key) for rec in in_order]
    starts = [rec["started_at"] for rec in records if rec.get("started_at")]
    ends = [rec["started_at"] + (rec.get("latency_s") or 0.0) for rec in records if rec.get("started_at")]
    usage: dict[str, ModelUsage] = {}
    for s in samples:
        for name, u in s.model_usage.items():
            usage[name] = usage[name] + u if name in usage else u
    spec = EvalSpec(
        eval_id=stable_id(run.key, "eval"),
        run_id=stable_id(run.key, "run"),
        task_id=stable_id(run.key, "task"),
        created=iso(min(starts) if starts else None),
        task=run.benchmark,
        task_version=0,
        task_args={},
        model=model,
        model_args={},
        dataset=EvalDataset(name=run.benchmark, samples=int(run.scores.get("n_problems") or 0)),
        config=EvalConfig(epochs=int(run.scores.get("repeats") or 1)),
        tags=["shardeval"],
        metadata={"shardeval": {"key": run.key, "name": run.name, "step": run.step, "status": run.status, **run.params}},
    )
    log = EvalLog(
        eval=spec,
        plan=EvalPlan(name="shardeval"),
        results=results(run, samples),
        samples=samples,
        stats=EvalStats(started_at=iso(min(starts)) if starts else "", completed_at=iso(max(ends)) if ends else "", model_usage=usage),
    )
    cells = int(run.scores.get("n_expected") or len(records))
    set_status(log, 0 if run.status == COMPLETE else cells - int(run.scores.get("n_ok") or 0), cells)
    return log


def sample(rec: dict[str, Any], conversation: dict[str, Any] | None, model: str, key: str) -> Any:
    """One record as an EvalSample: its conversation, answer, scores, or the error that ended it."""
    from inspect_ai._util.error import EvalError
    from inspect_ai.log import EvalSample
    from inspect_ai.model import ChatMessageAssistant, ModelOutput, ModelUsage

    cell = f"{rec['problem_id']}#{rec['repeat']}"
    messages = [chat_message(m, stable_id(key, f"{cell}#{i}"), rec) for i, m in enumerate((conversation or {}).get("messages", []))]
    first_answer = next((i for i, m in enumerate(messages) if m.role == "assistant"), len(messages))
    prompt: Any = messages[:first_answer] or f"(the prompt was not kept: output.trajectories was off) {rec['problem_id']}"
    response = reply_content(rec.get("response") or "", rec.get("reasoning"), rec)
    if rec["status"] == "ok" and not any(m.role == "assistant" for m in messages):
        messages.append(ChatMessageAssistant(id=stable_id(key, f"{cell}#answer"), content=response, model=model))
    output = ModelOutput.from_content(model=model, content=response, stop_reason=_STOP.get(rec.get("finish_reason") or "", "unknown"))
    usage: dict[str, ModelUsage] = {}
    if rec.get("prompt_tokens") is not None or rec.get("completion_tokens") is not None:
        i, o = rec.get("prompt_tokens") or 0, rec.get("completion_tokens") or 0
        output.usage = ModelUsage(input_tokens=i, output_tokens=o, total_tokens=i + o, reasoning_tokens=rec.get("reasoning_tokens"))
        usage = {model: output.usage}
    metadata = {k: rec[k] for k in _RECORD_FACTS if k in rec}
    if rec.get("images"):  # which images the model saw, never their bytes
        metadata["images"] = rec["images"]
    if rec.get("judge"):
        metadata["judge"] = rec["judge"]
    started = rec.get("started_at")
    error = None
    if rec["status"] != "ok":
        text = f"{rec.get('error_kind') or 'error'}: {rec.get('error') or 'no answer'}"
        error = EvalError(message=text, traceback=text, traceback_ansi=text)
    return EvalSample(
        id=rec["problem_id"],
        epoch=rec["repeat"] + 1,
        input=prompt,
        target=str(rec.get("reference") or ""),
        messages=messages,
        output=output,
        scores=scores(rec) if error is None else None,
        metadata=metadata,
        model_usage=usage,
        error=error,
        uuid=stable_id(key, cell),
        started_at=iso(started) if started else None,
        completed_at=iso(started + (rec.get("latency_s") or 0.0)) if started else None,
        total_time=rec.get("latency_s"),
    )


def chat_message(message: dict[str, Any], mid: str, rec: dict[str, Any] | None = None) -> Any:
    from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageTool, ChatMessageUser

    kinds = {"system": ChatMessageSystem, "user": ChatMessageUser, "assistant": ChatMessageAssistant, "tool": ChatMessageTool}
    kind = kinds.get(message.get("role", ""))
    content = message.get("content")
    content = content if isinstance(content, str) else json.dumps(content)
    if kind is None:  # a role Inspect has no message for: kept, as a user turn that says whose it was
        return ChatMessageUser(id=mid, content=f"[{message.get('role')}] {content}")
    if kind is ChatMessageAssistant and isinstance(message.get("reasoning"), str):  # a reasoning model's turn
        return kind(id=mid, content=reply_content(content, message["reasoning"], rec or {}))
    return kind(id=mid, content=content)


def reply_content(content: str, reasoning: str | None, rec: dict[str, Any]) -> Any:
    """A reply as Inspect holds it: its thinking as a ContentReasoning, then its answer as a
    ContentText (the record's `answer` when this is the reply the record scored and the thinking
    was inline, else the content: a server that sent the thinking apart sent the answer as the
    content); a reply without thinking stays its text."""
    if reasoning is None:
        return content
    from inspect_ai.model import ContentReasoning, ContentText

    answer = rec["answer"] if isinstance(rec.get("answer"), str) and content == rec.get("response") else content
    return [ContentReasoning(reasoning=reasoning), ContentText(text=answer)]


def scores(rec: dict[str, Any]) -> dict[str, Any]:
    """The run's score of the record (`shardeval`: the value its metrics average) and each named score."""
    from inspect_ai.scorer import Score

    out = {}
    if rec.get("score") is not None:
        out[SCORER] = Score(value=rec["score"], answer=rec.get("extracted"), metadata={"reference": rec.get("reference")})
    for name, value in (rec.get("scores") or {}).items():
        out[name if name != SCORER else f"{SCORER}.{name}"] = Score(value=value)
    return out


def results(run: TrackerRun, samples: list[Any]) -> Any:
    """shardeval's metrics as one EvalScore: each value as scores.json holds it, its interval and n as params."""
    from inspect_ai.log import EvalMetric, EvalResults, EvalScore

    metrics = {}
    for name, m in run.scores["metrics"].items():
        if m.value is None:
            continue
        metrics[name] = EvalMetric(
            name=name,
            value=m.value,
            params={"ci_low": m.ci_low, "ci_high": m.ci_high, "n": m.n, "ci_method": m.ci_method, "stderr": m.stderr},
        )
    scored = sum(1 for s in samples if s.scores)
    metadata = {k: run.scores.get(k) for k in ("n_expected", "n_ok", "n_errors", "n_missing", "errors_as_wrong")}
    if (reasoning := run.scores.get("reasoning")) is not None:  # scores.json's: cut off while thinking, thinking tokens
        metadata["reasoning"] = msgspec.to_builtins(reasoning)
    score = EvalScore(
        name=SCORER, scorer=SCORER, metrics=metrics, scored_samples=scored, unscored_samples=len(samples) - scored, metadata=metadata
    )
    return EvalResults(
        total_samples=int(run.scores.get("n_expected") or len(samples)), completed_samples=int(run.scores.get("n_ok") or 0), scores=[score]
    )
