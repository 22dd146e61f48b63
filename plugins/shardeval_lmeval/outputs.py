"""lm-eval's own output files for a merged run: merged/lm_eval/<model>/results_<date>.json and
samples_<task>_<date>.jsonl, written by lm-eval's EvaluationTracker as `lm_eval --log_samples`
writes them, so tools that read lm-eval results read a shardeval run unchanged.

The merge replays: lm-eval plans the same requests again (same params, same seeds, so the same
Instances; a document's answers are saved in the order of its requests) and simple_evaluate runs with a stand-in model that answers each request with the
answer the shards saved for it. lm-eval then does all the rest itself: filters, process_results,
corpus-level aggregation over every shard's documents, stderr, group consolidation. Written
only when every document of every task of the entry has an ok answer: lm-eval's numbers over a
partial run would look like the whole one.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any

from shardeval.api.benchmark import decode_params
from shardeval.api.metric import OK
from shardeval.api.plugin import UsageError
from shardeval.api.records import MergeResult, RESULTS_FILE

from shardeval_lmeval.benchmark import benchmark_id, lm_eval_answer, LmEvalBenchmark, SOURCE
from shardeval_lmeval.params import LmEvalParams
from shardeval_lmeval.plan import quiet, setup, simple_evaluate, stand_in_model

OUT = "lm_eval"


def write_lm_eval_outputs(result: MergeResult, out_dir: str) -> list[str]:
    """Write lm-eval's files for every lm_eval entry of the run; lines for what was not written."""
    manifest = result.run.shards[0].manifest
    served = next((s.model for s in manifest.served.values()), "model")
    services = manifest.config.get("services") or {}
    merged = {b.manifest.name: b for b in result.benchmarks}
    entries: dict[str, tuple[dict[str, Any], dict[str, str]]] = {}  # plan key -> (params, task -> benchmark id)
    urls: dict[str, str | None] = {}  # plan key -> the service's URL, as the config gave it
    for bench in manifest.config.get("benchmarks", []):
        if not isinstance(bench, dict) or bench.get("name") != LmEvalBenchmark.name:
            continue
        params = dict(bench.get("params") or {})
        p = decode_params(params, LmEvalParams, source=SOURCE)
        task = p.task
        if task is None:  # never in a run's config: loading it gave every entry its leaf task (LmEvalBenchmark.expand)
            continue
        entry = entries.setdefault(p.plan_key(), ({k: v for k, v in params.items() if k != "task"}, {}))
        service: object = services.get(bench.get("service") or "model") or next(iter(services.values()), {})
        urls.setdefault(p.plan_key(), service.get("url") if isinstance(service, dict) else None)
        entry[1][task] = bench.get("id") or benchmark_id(task)
    if not entries:
        return []
    _remove_earlier(os.path.join(out_dir, OUT))
    notes = []
    for key, (params, ids) in entries.items():
        try:
            note = _write_entry(params, ids, merged, out_dir, served, urls.get(key))
        except UsageError as exc:
            note = f"lm-eval results not written: {exc}"
        if note:
            notes.append(note)
    return notes


def _remove_earlier(folder: str) -> None:
    """An earlier merge's lm-eval files (their names carry the time they were written): a merge
    leaves only its own. Only lm-eval's file names are touched, nothing else in the folder."""
    for path in glob.glob(os.path.join(glob.escape(folder), "*", "results_*.json")) + glob.glob(
        os.path.join(glob.escape(folder), "*", "samples_*.jsonl")
    ):
        os.remove(path)


def _write_entry(params: dict[str, Any], ids: dict[str, str], merged: dict[str, Any], out_dir: str, served: str, url: str | None) -> str:
    incomplete = [bid for bid in ids.values() if bid not in merged or any(s != OK for s in merged[bid].table.status)]
    if incomplete:
        return (
            f"lm-eval results not written for {', '.join(ids.values())}: {', '.join(incomplete)} "
            "not complete (every document needs an ok answer); rerun the missing shards, then merge again"
        )
    # The replay plans again, from the task YAMLs and data as they are now: they must still make the
    # requests the shards made, or saved answers would be scored against other prompts.
    replanned = [
        bid
        for task, bid in ids.items()
        if LmEvalBenchmark({**params, "task": task}).fingerprint() != merged[bid].manifest.dataset_fingerprint
    ]
    if replanned:
        return (
            f"lm-eval results not written for {', '.join(ids.values())}: lm-eval now plans other requests for "
            f"{', '.join(replanned)} than the run made (a task's YAML, its data or lm-eval changed since); "
            "merge where the tasks are as they were"
        )
    p = decode_params(params, LmEvalParams, source=SOURCE)
    answers: dict[tuple[str, int, int], list[Any]] = {}  # (task, doc_id, request idx) -> its answers
    for task, bid in ids.items():
        with open(os.path.join(out_dir, bid, RESULTS_FILE), encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                if record["status"] != "ok" or record["repeat"] != 0:
                    continue
                doc_id = int(record["problem_id"].rsplit("/", 1)[1])
                for idx, resps in enumerate(json.loads(record["response"])["resps"]):
                    answers[(task, doc_id, idx)] = resps
    with quiet():
        results = _replay(setup(p), answers, p, os.path.join(out_dir, OUT), served, url)
    return "" if results else f"lm-eval results not written for {', '.join(ids.values())}: lm-eval returned nothing"


def base_url(url: str | None, chat: bool) -> str | None:
    """lm-eval's base_url for a service URL (…/v1 or the server's root): the endpoint it posts to."""
    if not url:
        return None
    root = url.rstrip("/")
    root = root if root.endswith("/v1") else root + "/v1"
    return root + ("/chat/completions" if chat else "/completions")


def run_model_args(p: LmEvalParams, served: str, url: str | None) -> dict[str, Any]:
    """The `--model_args` lm-eval would have been given for this run: the served model's name, the
    service's endpoint and the params' tokenizer (planning used a placeholder name; none is kept)."""
    args = p.model_args(served)
    endpoint = base_url(url, p.wire_model() == "local-chat-completions")
    return {"model": served, **({"base_url": endpoint} if endpoint else {}), **{k: v for k, v in args.items() if k != "model"}}


def _replay(
    lm_eval: Any, answers: dict[tuple[str, int, int], list[Any]], p: LmEvalParams, output_path: str, served: str, url: str | None = None
) -> Any:
    """simple_evaluate again, as planned, with each request answered from the saved answers."""
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.loggers.utils import add_tokenizer_info

    served_count: dict[tuple[str, int, int], int] = {}

    def answer(kind: str, requests: list[Any]) -> list[Any]:
        out = []
        for inst in requests:  # lm-eval sends each Instance `repeats` times in a row
            key = (inst.task_name, inst.doc_id, inst.idx)
            n = served_count.get(key, 0)
            served_count[key] = n + 1
            out.append(lm_eval_answer(kind, answers[key][n]))
        return out

    tracker = EvaluationTracker(output_path=output_path)
    model_args = f"model={served}"
    results = simple_evaluate(
        lm_eval.config,
        lm_eval.manager,
        stand_in_model(lm_eval.wire_model, answer),
        bootstrap_iters=p.bootstrap_iters,
        log_samples=True,
        evaluation_tracker=tracker,
        model_args=model_args,
    )
    if results is None:
        return None
    results["config"]["model"] = f"shardeval ({p.wire_model()})"
    args = run_model_args(p, served, url)
    results["config"]["model_args"] = args
    for config in results.get("configs", {}).values():  # lm-eval copies the model args into each task's metadata
        if isinstance(config.get("metadata"), dict) and "model" in config["metadata"]:
            config["metadata"].update(args)
    add_tokenizer_info(results, lm_eval.wire_model)  # the run's tokenizer (the stand-in has none)
    samples = results.pop("samples")
    tracker.save_results_aggregated(results=results, samples=samples)
    for task_name in results["configs"]:
        tracker.save_results_samples(task_name=task_name, samples=samples[task_name])
    return results
