"""Issue 39, the outputs: a reasoning model's answers counted apart everywhere numbers are shown.

Shards are written with the project's own writer (tests/shard_factory.py), shaped as the runner
writes a reasoning model's records (docs/reasoning.md): every kind of reply in one benchmark, an
error with thinking (never counted), an error superseded by a plain answer, and duplicates whose
second copy says otherwise (only the standing one counts). The counts are worked out here by hand
and the token statistics with numpy, then read back from every output: scores.json, report.md,
the text merge prints, `shardeval status` (text and the live page's JSON, also while shards grow),
sweep.json and sweep.md, the export's columns, MLflow's file store, a W&B offline run and an
Inspect log read with Inspect's own reader. A run without thinking shows none of it anywhere.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
import subprocess
from pathlib import Path

import msgspec
import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import shardeval_cmd
from shard_factory import make_shard, make_sweep, record
from shardeval.results.export import REASONING
from shardeval.results.follow import Followed
from shardeval.results.status import collect, status
from shardeval.store.records import encode_line, run_id

pytestmark = pytest.mark.timeout(240)

BENCH, N, REPEATS, SHARDS = "arith", 40, 2, 2
RUN = run_id("sha256:test")
THOUGHT = "Let me think. 6 times 7 is 42.\nCheck: 42 / 7 = 6. Düsseldorf 計算"  # not ASCII: the scan never decodes it


def kind(p: int) -> int:
    return p % 8


def records_of(p: int, r: int, shard: int) -> list:
    """The lines one (problem, repeat) cell gets, by the kind of its problem (8 kinds, 5 problems each)."""
    k, answer = kind(p), f"#### {p}"
    if k == 0:  # cut off while thinking: no answer, scored 0
        return [
            record(
                BENCH,
                p,
                r,
                shard,
                0.0,
                run=RUN,
                reasoning=THOUGHT,
                answer="",
                response=f"<think>{THOUGHT}",
                reasoning_tokens=1000 + 10 * p + r,
                reasoning_tokens_from="usage",
                outcome="truncated_reasoning",
                finish_reason="length",
            )
        ]
    if k == 1:  # thought inline, then answered; tokens counted from the stream
        return [
            record(
                BENCH,
                p,
                r,
                shard,
                1.0,
                run=RUN,
                reasoning=THOUGHT,
                answer=answer,
                response=f"<think>{THOUGHT}</think>{answer}",
                reasoning_tokens=20 * p + r,
                reasoning_tokens_from="stream",
            )
        ]
    if k == 2:  # no thinking, cut off after the answer began: scored as it stands
        return [record(BENCH, p, r, shard, 1.0, run=RUN, outcome="truncated", finish_reason="length")]
    if k == 3:  # a non-thinking mode's empty <think></think>: thinking present, but blank
        return [
            record(
                BENCH,
                p,
                r,
                shard,
                1.0,
                run=RUN,
                reasoning="\n\n",
                answer=answer,
                reasoning_tokens=0,
                reasoning_tokens_from="usage",
                response=f"<think>\n\n</think>{answer}",
            )
        ]
    if k == 4:  # an error that thought, then a plain answer that stands
        return [
            record(BENCH, p, r, shard, status="error", run=RUN, reasoning=THOUGHT, reasoning_tokens=99, outcome="truncated"),
            record(BENCH, p, r, shard, 1.0, run=RUN),
        ]
    if k == 5:  # an error with thinking, never answered: no ok cell
        return [record(BENCH, p, r, shard, status="error", run=RUN, reasoning=THOUGHT, reasoning_tokens=77, reasoning_tokens_from="usage")]
    if k == 6:  # thought, answered; a duplicate says otherwise and is ignored
        return [
            record(BENCH, p, r, shard, 1.0, run=RUN, reasoning=THOUGHT, reasoning_tokens=500, reasoning_tokens_from="usage"),
            record(
                BENCH,
                p,
                r,
                shard,
                0.0,
                run=RUN,
                reasoning=THOUGHT,
                reasoning_tokens=9999,
                reasoning_tokens_from="stream",
                outcome="truncated_reasoning",
            ),
        ]
    return [record(BENCH, p, r, shard, 1.0, run=RUN)]  # a plain answer


def shard_lines(shard: int) -> list:
    lo, hi = (0, N // 2) if shard == 0 else (N // 2, N)
    return [rec for p in range(lo, hi) for r in range(REPEATS) for rec in records_of(p, r, shard)]


def expected() -> dict:
    """scores.json's `reasoning` of the run, by hand: 10 cells (5 problems x 2 repeats) of each kind."""
    cells = [(p, r) for p in range(N) for r in range(REPEATS)]
    tokens = sorted(
        [1000 + 10 * p + r for p, r in cells if kind(p) == 0] + [20 * p + r for p, r in cells if kind(p) == 1] + [0] * 10 + [500] * 10
    )
    assert len(tokens) == 40
    return {
        "n_answered": 70,  # 80 cells, 10 of them errors (kind 5)
        "truncated_reasoning": 10,  # kind 0 (kind 6's second copy does not stand)
        "truncated": 10,  # kind 2 (kind 4's error does not count)
        "with_reasoning": 30,  # kinds 0, 1, 6 (kind 3's thinking is blank)
        "reasoning_tokens": {
            "n": 40,
            "mean": float(np.mean(tokens)),
            "p50": float(np.percentile(tokens, 50)),
            "p90": float(np.percentile(tokens, 90)),
            "max": max(tokens),
            "from": {"usage": 30, "stream": 10},
        },
    }


def line_of(r: dict) -> str:
    t = r["reasoning_tokens"]
    return (
        f"truncated while thinking: 10 of 70 (14.3 %); cut off after answering: 10; 30 of 70 with thinking; thinking tokens "
        f"mean {t['mean']:.0f}, p50 {t['p50']:.0f}, p90 {t['p90']:.0f}, max {t['max']} (usage 30, stream 10)"
    )


def build(root: Path) -> Path:
    for shard in range(SHARDS):
        make_shard(str(root), shard, SHARDS, n_problems=N, repeats=REPEATS, records=shard_lines(shard))
    return root


@pytest.fixture(scope="module")
def merged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The run, merged by the CLI: (its directory, what merge printed)."""
    root = build(tmp_path_factory.mktemp("reasoning") / "run")
    done = shardeval_cmd("merge", str(root))
    assert done.returncode == 3, done.stderr  # ERRORS: kind 5's cells end in errors
    return root, done.stdout


def live_page_json(root: Path) -> bytes:
    """status.json as `status --serve` answers it."""
    from shardeval_pages.status_server import Snapshots

    snapshots = Snapshots(str(root), 0)
    try:
        return snapshots.compute()
    finally:
        snapshots.close()


def test_scores_json_report_md_and_the_merge_text_count_the_thinking_apart(merged: tuple[Path, str]) -> None:
    root, printed = merged
    want = expected()
    assert want["reasoning_tokens"]["p50"] == 500.0 and want["reasoning_tokens"]["max"] == 1321  # the numbers are not trivial
    entry = json.loads((root / "merged" / "scores.json").read_text())[BENCH]
    assert entry["reasoning"] == want
    assert (entry["n_ok"], entry["n_errors"], entry["metrics"]["accuracy"]["n"]) == (70, 10, 35)  # n: problems answered
    line = f"- reasoning: {line_of(want)}"
    assert line == (
        "- reasoning: truncated while thinking: 10 of 70 (14.3 %); cut off after answering: 10; 30 of 70 with "
        "thinking; thinking tokens mean 500, p50 500, p90 1169, max 1321 (usage 30, stream 10)"
    )
    assert line in (root / "merged" / "report.md").read_text().splitlines()
    assert line in printed.splitlines()


def test_status_text_and_the_live_pages_json_say_the_same_counts(merged: tuple[Path, str]) -> None:
    root, _ = merged
    want = expected()
    assert f"{BENCH}: {line_of(want)}" in status(str(root)).splitlines()
    doc = json.loads(live_page_json(root))
    assert doc["error"] is None
    [bench] = doc["run"]["benchmarks"]
    assert bench["reasoning"] == want


def test_status_counts_the_thinking_as_shards_append_and_equals_a_fresh_read(tmp_path: Path) -> None:
    """One Followed across refreshes, the files growing between them: each refresh equals a fresh
    read's counts, and the last one the merge's."""
    root = tmp_path / "run"
    lines = {shard: shard_lines(shard) for shard in range(SHARDS)}
    for shard in range(SHARDS):
        make_shard(str(root), shard, SHARDS, n_problems=N, repeats=REPEATS, state="running", records=[])
    followed = Followed()
    seen, written = [], dict.fromkeys(range(SHARDS), 0)
    for step in (3, 17, 30, None):
        for shard in range(SHARDS):
            new = lines[shard][written[shard] : step]
            with open(root / f"shard_{shard}" / BENCH / "results.jsonl", "ab") as f:
                f.write(b"".join(encode_line(rec) for rec in new))
            written[shard] += len(new)
        live = collect(str(root), followed=followed)
        fresh = collect(str(root))
        got = [msgspec.to_builtins(b.reasoning) if b.reasoning is not msgspec.UNSET else None for b in live.benchmarks]
        assert got == [msgspec.to_builtins(b.reasoning) if b.reasoning is not msgspec.UNSET else None for b in fresh.benchmarks]
        seen.append(got[0])
    # the first 3 lines of each shard: problem 0 cut off while thinking twice, problem 1 answered; problem 20 an error,
    # then a plain answer (standing), then an error again
    assert (seen[0]["n_answered"], seen[0]["truncated_reasoning"], seen[0]["with_reasoning"]) == (4, 2, 3)
    assert [s["n_answered"] for s in seen] == sorted(s["n_answered"] for s in seen)
    assert seen[-1] == expected()


def test_a_sweep_carries_the_counts_per_model_and_benchmark_cell(tmp_path: Path) -> None:
    """Model step2000 thinks on bench01 only; its cells say so, the other cells have no `reasoning`."""

    def fields(m: int, b: int, p: int, r: int) -> dict:
        if (m, b) != (1, 1):
            return {}
        if p % 3 == 0:
            return {
                "reasoning": "hmm",
                "answer": "",
                "reasoning_tokens": 4096,
                "reasoning_tokens_from": "usage",
                "outcome": "truncated_reasoning",
            }
        return {"reasoning": "so", "answer": f"#### {p}", "reasoning_tokens": 100 * p, "reasoning_tokens_from": "usage"}

    root = tmp_path / "sweep"
    make_sweep(str(root), 3, 2, n_problems=12, fields=fields)
    done = shardeval_cmd("merge", str(root))
    assert done.returncode == 0, done.stderr
    doc = json.loads((root / "merged" / "sweep.json").read_text())
    tokens = sorted([4096] * 4 + [100 * p for p in range(12) if p % 3])
    want = {
        "n_answered": 12,
        "truncated_reasoning": 4,
        "truncated": 0,
        "with_reasoning": 12,
        "reasoning_tokens": {
            "n": 12,
            "mean": float(np.mean(tokens)),
            "p50": float(np.percentile(tokens, 50)),
            "p90": float(np.percentile(tokens, 90)),
            "max": 4096,
            "from": {"usage": 12, "stream": 0},
        },
    }
    for cell in doc["cells"]:
        if (cell["service"], cell["benchmark"]) == ("step2000", "bench01"):
            assert cell["reasoning"] == want, cell
        else:
            assert "reasoning" not in cell, cell
    assert {c["metric"] for c in doc["cells"] if "reasoning" in c} == {"accuracy", "pass@1"}  # every metric row of the cell
    t = want["reasoning_tokens"]
    row = f"| step2000 | bench01 | 4 of 12 (33.3 %) | 0 | 12 | {t['mean']:.0f} | {t['p50']:.0f} | {t['p90']:.0f} | 4096 |"
    sweep_md = (root / "merged" / "sweep.md").read_text().splitlines()
    assert "## reasoning" in sweep_md and row in sweep_md and row in done.stdout.splitlines()
    table = sweep_md[sweep_md.index("## reasoning") :]
    table = table[: table.index("", 2)]  # to the blank line after the table
    assert sum(line.startswith("| step") for line in table) == 1  # only the cell that thought
    said = status(str(root)).splitlines()
    assert [line for line in said if "while thinking" in line] == [
        f"step2000 bench01: truncated while thinking: 4 of 12 (33.3 %); "
        f"cut off after answering: 0; 12 of 12 with thinking; thinking "
        f"tokens mean {t['mean']:.0f}, p50 {t['p50']:.0f}, p90 "
        f"{t['p90']:.0f}, max 4096 (usage 12)"
    ]
    model_scores = json.loads((root / "step2000" / "merged" / "scores.json").read_text())
    assert model_scores["bench01"]["reasoning"] == want and "reasoning" not in model_scores["bench00"]


def test_a_run_without_thinking_has_no_reasoning_anywhere(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    for shard in range(SHARDS):
        make_shard(str(root), shard, SHARDS, n_problems=N, repeats=REPEATS)
    done = shardeval_cmd("merge", str(root))
    assert done.returncode == 0, done.stderr
    scores = json.loads((root / "merged" / "scores.json").read_text())
    assert list(scores[BENCH]) == [
        "n_problems",
        "repeats",
        "n_expected",
        "n_records",
        "n_ok",
        "n_missing",
        "n_errors",
        "error_rate",
        "error_kinds",
        "n_duplicates",
        "n_conflicts",
        "n_superseded_errors",
        "n_refused",
        "partial",
        "complete",
        "errors_as_wrong",
        "metrics",
    ]  # the keys it had before issue 39, in their order
    for text in (
        (root / "merged" / "scores.json").read_text(),
        (root / "merged" / "report.md").read_text(),
        done.stdout,
        status(str(root)),
    ):
        assert "reasoning" not in text.replace(str(tmp_path), "") and "thinking" not in text.replace(str(tmp_path), "")
    assert "reasoning" not in live_page_json(root).decode()
    sweep = tmp_path / "sweep"
    make_sweep(str(sweep), 2, 1)
    assert shardeval_cmd("merge", str(sweep)).returncode == 0
    assert "reasoning" not in (sweep / "merged" / "sweep.json").read_text() + (sweep / "merged" / "sweep.md").read_text()
    out = tmp_path / "rows.jsonl"
    assert shardeval_cmd("export", str(root), "-o", str(out)).returncode == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == N * REPEATS and all(row[k] is None for row in rows for k in REASONING)


def test_the_export_has_the_reasoning_columns_of_each_standing_record(merged: tuple[Path, str], tmp_path: Path) -> None:
    root, _ = merged
    standing = [json.loads(line) for line in (root / "merged" / BENCH / "results.jsonl").read_text().splitlines()]
    want = [{k: rec.get(k) for k in REASONING} for rec in standing]
    assert [w["outcome"] for w in want].count("truncated_reasoning") == 10 and [w["reasoning"] for w in want].count(THOUGHT) == 40
    for fmt in ("parquet", "csv", "jsonl"):
        out = tmp_path / f"rows.{fmt}"
        done = shardeval_cmd("export", str(root), "-o", str(out))
        assert done.returncode == 0, done.stderr
        if fmt == "parquet":
            table = pq.read_table(out)
            assert [str(table.schema.field(k).type) for k in REASONING] == ["string", "string", "int64", "string", "string"]
            got = [{k: row[k] for k in REASONING} for row in table.to_pylist()]
            assert got == want
        elif fmt == "jsonl":
            assert [{k: json.loads(line)[k] for k in REASONING} for line in out.read_text().splitlines()] == want
        else:
            with open(out, newline="", encoding="utf-8") as f:
                got = [{k: row[k] for k in REASONING} for row in csv.DictReader(f)]
            assert got == [{k: "" if v is None else str(v) for k, v in w.items()} for w in want]


def test_the_export_ends_a_batch_early_when_its_thinking_is_long(monkeypatch: pytest.MonkeyPatch) -> None:
    import shardeval.results.export as export_module

    monkeypatch.setattr(export_module, "BATCH_TEXT", 100)
    rows = [("x" * 40, i) for i in range(7)] + [(None, 7), (None, 8)]
    assert [len(b) for b in export_module.batches(iter(rows), ["reasoning", "i"])] == [3, 3, 3]
    assert [len(b) for b in export_module.batches(iter(rows), ["other", "i"])] == [9]


def tracker_metrics(r: dict) -> dict[str, float]:
    t = r["reasoning_tokens"]
    return {
        "truncated_reasoning": 10,
        "truncated_reasoning_rate": 10 / 70,
        "truncated": 10,
        "truncated_rate": 10 / 70,
        "with_reasoning": 30,
        "reasoning_tokens_n": 40,
        "reasoning_tokens_mean": t["mean"],
        "reasoning_tokens_p50": t["p50"],
        "reasoning_tokens_p90": t["p90"],
        "reasoning_tokens_max": t["max"],
    }


def copy_run(root: Path, to: Path) -> Path:
    shutil.copytree(root, to, ignore=shutil.ignore_patterns("merged"))
    return to


def test_mlflow_logs_the_truncation_and_the_thinking_tokens(
    merged: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mlflow")
    from mlflow import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    root, store = copy_run(merged[0], tmp_path / "run"), tmp_path / "mlruns"
    env = {"MLFLOW_ALLOW_FILE_STORE": "true", "MLFLOW_TRACKING_URI": store.as_uri()}
    done = shardeval_cmd("export", str(root), "--to", "mlflow", "--experiment", "exp", env=env)
    assert done.returncode == 0, done.stderr
    client = MlflowClient(tracking_uri=store.as_uri())
    [run] = client.search_runs([client.get_experiment_by_name("exp").experiment_id])
    want = tracker_metrics(expected())
    assert {k: run.data.metrics[k] for k in want} == want  # to the last digit
    assert run.data.metrics["n_ok"] == 70

    plain, plain_store = tmp_path / "plain", tmp_path / "plain_mlruns"
    make_shard(str(plain), 0, 1, n_problems=8)
    env["MLFLOW_TRACKING_URI"] = plain_store.as_uri()
    assert shardeval_cmd("export", str(plain), "--to", "mlflow", "--experiment", "exp", env=env).returncode == 0
    client = MlflowClient(tracking_uri=plain_store.as_uri())
    [run] = client.search_runs([client.get_experiment_by_name("exp").experiment_id])
    assert "accuracy" in run.data.metrics and not set(want) & set(run.data.metrics)


def test_wandb_offline_run_holds_the_truncation_and_the_thinking_tokens(merged: tuple[Path, str], tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    from test_export_wandb import export as wandb_export, offline_runs, wandb_env  # W&B's own record log, read back

    unshare = subprocess.run(["unshare", "-rn", "true"], capture_output=True)  # as there: proof that no network is touched
    if unshare.returncode != 0:
        pytest.skip(f"unshare -rn is not permitted here ({unshare.stderr.decode().strip()})")
    root = copy_run(merged[0], tmp_path / "run")
    done = wandb_export(root, wandb_env(tmp_path / "home"))
    assert done.returncode == 0, done.stderr
    [run] = offline_runs(root / "merged" / "wandb")
    want = tracker_metrics(expected())
    assert {k: run.summary[k] for k in want} == want
    assert {k: run.history[0][k] for k in want} == want


def test_inspect_log_holds_the_thinking_as_content_reasoning(merged: tuple[Path, str], tmp_path: Path) -> None:
    pytest.importorskip("inspect_ai")
    from inspect_ai.log import read_eval_log
    from inspect_ai.model import ContentReasoning, ContentText

    root, logs = copy_run(merged[0], tmp_path / "run"), tmp_path / "logs"
    done = shardeval_cmd("export", str(root), "--to", "inspect", "-o", str(logs))
    assert done.returncode in (0, 3), done.stderr
    log = read_eval_log(str(logs / f"{BENCH}.eval"))
    by_cell = {(s.id, s.epoch): s for s in log.samples}
    standing = {
        (r["problem_id"], r["repeat"] + 1): r
        for r in (json.loads(line) for line in (root / "merged" / BENCH / "results.jsonl").read_text().splitlines())
    }
    for cell, rec in standing.items():
        s = by_cell[cell]
        if rec["status"] != "ok":
            continue
        reply = s.messages[-1]
        assert reply.role == "assistant"
        if "reasoning" in rec:
            thought, answer = reply.content
            assert isinstance(thought, ContentReasoning) and isinstance(answer, ContentText)
            assert (thought.reasoning, answer.text) == (rec["reasoning"], rec.get("answer", rec["response"]))
            assert s.output.completion == rec.get("answer", rec["response"])  # the answer that was scored, not the thinking
            assert isinstance(s.output.message.content[0], ContentReasoning)
            assert s.output.usage.reasoning_tokens == rec.get("reasoning_tokens")
            assert s.metadata["reasoning_tokens"] == rec["reasoning_tokens"]
        else:
            assert reply.content == rec["response"] and s.output.completion == rec["response"]
        assert s.metadata.get("outcome") == rec.get("outcome")
    truncated = [s for s in log.samples if s.metadata.get("outcome") == "truncated_reasoning"]
    assert len(truncated) == 10 and all(s.output.completion == "" and s.scores["shardeval"].value == 0.0 for s in truncated)
    assert log.results.scores[0].metadata["reasoning"] == expected()
    assert not math.isnan(log.results.scores[0].metrics["accuracy"].value)


def test_a_line_whose_text_is_not_a_string_is_skipped_by_the_scan_as_by_every_reader(tmp_path: Path) -> None:
    """The scan decodes records whole (a narrower decode that skipped the texts let a line with a
    number for its response stand in the merge, while every other reader refused it): the merge
    and the export leave it out alike and say so."""
    root = tmp_path / "run"
    make_shard(str(root), 0, 1, n_problems=3)
    path = root / "shard_0" / BENCH / "results.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + lines[1].replace(b'"response":"#### 1"', b'"response":1') + lines[2])
    assert b'"response":1,' in path.read_bytes()
    merged = shardeval_cmd("merge", str(root))
    assert merged.returncode == 3 and "unreadable line(s)" in merged.stdout, merged.stdout  # a cell is missing: PARTIAL
    done = shardeval_cmd("export", str(root), "-o", str(tmp_path / "rows.jsonl"), "--format", "jsonl")
    assert "Traceback" not in done.stderr, done.stderr
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert [r["problem_idx"] for r in rows] == [0, 2]
