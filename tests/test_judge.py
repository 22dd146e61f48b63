"""LLM-as-judge benchmarks (shardeval.run.judging, docs/judges.md) against real simulator processes:
the model and the judge are two `shardeval sim` servers, the shard a real `shardeval run`."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from conftest import REPO, running_sim, shardeval_cmd
from shardeval.config.loading import load_config
from shardeval.identity import config_hash

FAST = ("--ttft-ms", "0", "--itl-ms", "0")
RETRY_ONCE = {"attempts": 1, "backoff_base": 0.01, "backoff_max": 0.01}  # a 5xx from the judge is final at once


def write_config(
    tmp: Path,
    model_url: str,
    judge_url: str,
    *,
    mode: str = "single",
    n: int = 40,
    repeats: int = 2,
    cache: Path | None = None,
    bench: dict | None = None,
) -> Path:
    config = {
        "services": {
            "model": {"type": "api", "url": model_url, "model": "sim"},
            "judge": {"type": "api", "url": judge_url, "model": "judge", "retries": RETRY_ONCE, "max_response_bytes": 65536},
        },
        "benchmarks": [
            {
                "name": "arith",
                "params": {"n": n},
                "repeats": repeats,
                "max_concurrent": 8,
                "solver": {"service": "model", "generation": {"temperature": 0.7, "max_tokens": 64}},
                "judge": {"service": "judge", "mode": mode},
                **(bench or {}),
            }
        ],
        "output": {"progress_interval_s": 0},
        **({"cache": {"dir": str(cache)}} if cache is not None else {}),
    }
    path = tmp / "config.yaml"
    path.write_text(json.dumps(config))
    return path


def records(out: Path, bench: str = "arith") -> list[dict]:
    return [json.loads(line) for line in (out / bench / "results.jsonl").read_text().splitlines()]


def standing(out: Path, bench: str = "arith") -> dict[tuple[int, int], dict]:
    """The standing record of each cell (shardeval.store.standing: ok beats error, the last error stands)."""
    cells: dict[tuple[int, int], dict] = {}
    for r in records(out, bench):
        key = (r["problem_idx"], r["repeat"])
        if key not in cells or (cells[key]["status"] != "ok"):
            cells[key] = r
    return cells


def model_answer(response: str) -> str:
    return response.rsplit("####", 1)[-1].strip()


def check_verdicts(recs: list[dict], mode: str) -> int:
    """Every ok record's score is what the judge's raw reply says (parsed here independently), and
    with a judge that is always right (quality 1), the verdict matches the answer's truth."""
    n = 0
    for r in recs:
        if r["status"] != "ok":
            continue
        reply = r["judge"]["reply"]
        right = model_answer(r["response"]) == r["reference"]
        if mode == "single":
            rating = int(re.findall(r"Rating: \[\[(\d+)\]\]", reply)[-1])
            assert r["score"] == rating / 10 and r["scores"]["rating"] == rating and r["judge"]["verdict"] == str(rating)
            assert (rating >= 8) == right, (rating, r["response"], r["reference"])
        else:
            choice = re.findall(r"\[\[([ABC])\]\]", reply)[-1]
            assert r["score"] == {"A": 1.0, "B": 0.0, "C": 0.5}[choice] == r["scores"]["preference"]
            assert choice == ("C" if right else "B")
        assert r["judge"]["service"] == "judge" and r["judge"]["model"] == "judge" and r["judge"]["mode"] == mode
        assert r["judge"]["latency_s"] is not None and r["judge"]["completion_tokens"] > 0
        n += 1
    return n


@pytest.mark.parametrize("mode", ["single", "pairwise"])
def test_scores_are_what_the_judge_said(tmp_path: Path, mode: str) -> None:
    """Acceptance 1: 100 % of parseable verdicts become the record's score; merge reports them."""
    with (
        running_sim("--bench", "arith", "--accuracy", "0.5", *FAST) as model,
        running_sim("--model", "judge", "--bench", "arith", "--judge-quality", "1", *FAST) as judge,
    ):
        cfg = write_config(tmp_path, model, judge, mode=mode)
        out = tmp_path / "out"
        done = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(out))
        assert done.returncode == 0, done.stderr
    recs = records(out)
    assert len(recs) == 80 and check_verdicts(recs, mode) == 80
    scores = {r["score"] for r in recs}
    assert len(scores) > 1  # right and wrong answers both seen: the verdicts are not constant
    merged = shardeval_cmd("merge", str(tmp_path / "out"), "-o", str(tmp_path / "merged"))
    assert merged.returncode == 0, merged.stderr
    summary = json.loads((tmp_path / "merged" / "scores.json").read_text())["arith"]
    assert summary["metrics"]["mean"]["value"] == pytest.approx(sum(r["score"] for r in recs) / len(recs))


def test_the_simulated_judge_is_deterministic_and_its_quality_counts(tmp_path: Path) -> None:
    """The same run twice gets the same verdicts; at `--judge-quality 0` they are drawn, not the truth."""
    with (
        running_sim("--bench", "arith", *FAST) as model,
        running_sim("--model", "judge", "--bench", "arith", "--judge-quality", "0", *FAST) as judge,
    ):
        cfg = write_config(tmp_path, model, judge, n=60, repeats=1)
        for out in ("a", "b"):
            assert shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(tmp_path / out)).returncode == 0
    a, b = (sorted(records(tmp_path / out), key=lambda r: r["problem_idx"]) for out in ("a", "b"))  # written as they finish
    assert [r["judge"]["reply"] for r in a] == [r["judge"]["reply"] for r in b]
    ratings = [r["scores"]["rating"] for r in a]
    assert len(set(ratings)) >= 6  # uniform over 1..10, not 8..10 / 1..3 by the answer's truth
    assert any((rating >= 8) != (model_answer(r["response"]) == r["reference"]) for r, rating in zip(a, ratings))


def test_judge_failures_are_judge_errors_and_a_rerun_asks_only_the_judge(tmp_path: Path) -> None:
    """5xx storms and replies with no verdict end as `judge` errors (never scores, the answer
    kept), counted apart by merge; a rerun with the model's server stopped judges them again."""
    cache = tmp_path / "cache"
    out = tmp_path / "out"
    with running_sim("--bench", "arith", *FAST) as model:
        with running_sim(
            "--model", "judge", "--bench", "arith", "--judge-quality", "1", "--fail-5xx", "0.25", "--judge-garbage", "0.25", *FAST
        ) as judge:
            cfg = write_config(tmp_path, model, judge, cache=cache)
            first = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(out))
        assert first.returncode == 3, first.stderr  # finished with judge errors: not complete (issue 24)
        before = records(out)
        errors = [r for r in before if r["status"] == "error"]
        kinds = {r["error_kind"] for r in errors}
        assert kinds == {"judge"}, kinds
        assert any("server_error" in r["error"] for r in errors) and any("no rating" in r["error"] for r in errors)
        for r in errors:  # never scored; the model's answer is kept, and the judge's reply or failure
            assert r["score"] is None and "####" in r["response"]
            assert r["judge"]["verdict"] is None
        merged = shardeval_cmd("merge", str(out), "-o", str(tmp_path / "m1"))
        assert merged.returncode == 3 and "ERRORS" in merged.stdout, merged.stderr
        summary = json.loads((tmp_path / "m1" / "scores.json").read_text())["arith"]
        assert summary["error_kinds"] == {"judge": len(errors)} and summary["n_errors"] == len(errors)
    # the model's server is gone: a rerun must not ask it (a request would be a connection error)
    with running_sim("--model", "judge", "--bench", "arith", "--judge-quality", "1", *FAST) as judge:
        cfg = write_config(tmp_path, "http://127.0.0.1:9/v1", judge, cache=cache)
        second = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(out))
    assert second.returncode == 0, second.stderr + second.stdout
    after = records(out)
    new = after[len(before) :]
    assert len(new) == len(errors) and all(r["status"] == "ok" for r in new)
    old = {(r["problem_idx"], r["repeat"]): r for r in errors}
    for r in new:  # the same answer, now judged; none came from a cached garbage reply
        was = old[(r["problem_idx"], r["repeat"])]
        assert r["response"] == was["response"] and r["started_at"] == was["started_at"] and not r["judge"]["cached"]
    assert check_verdicts(list(standing(out).values()), "single") == 80


def test_a_judged_run_from_the_cache_asks_no_judge(tmp_path: Path) -> None:
    """The judge's answers go through the response cache like any service's."""
    cache = tmp_path / "cache"
    with running_sim("--bench", "arith", *FAST) as model, running_sim("--model", "judge", "--bench", "arith", *FAST) as judge:
        cfg = write_config(tmp_path, model, judge, n=10, repeats=1, cache=cache)
        assert shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(tmp_path / "a")).returncode == 0
    cfg = write_config(tmp_path, "http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1", n=10, repeats=1, cache=cache)
    again = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(tmp_path / "b"))
    assert again.returncode == 0, again.stderr
    a, b = (sorted(records(tmp_path / out), key=lambda r: r["problem_idx"]) for out in ("a", "b"))  # written as they finish
    assert all(r["judge"]["cached"] and r["cached"] for r in b)
    assert [(r["score"], r["judge"]["reply"]) for r in a] == [(r["score"], r["judge"]["reply"]) for r in b]


def test_judge_sim_example_runs_offline_and_merges(tmp_path: Path) -> None:
    """Acceptance 0: examples/judge_sim.yaml, the simulator as model and judge, 2 shards, merged."""
    out = tmp_path / "out"
    done = shardeval_cmd(
        "run",
        str(Path(REPO) / "examples" / "judge_sim.yaml"),
        "-O",
        f"output.dir={out}",
        "-O",
        "benchmarks.0.params.n=30",
        "-O",
        "benchmarks.1.params.n=30",
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    scores = json.loads((out / "merged" / "scores.json").read_text())
    for name in ("arith", "arith_pairwise"):
        assert scores[name]["n_ok"] == 30 and scores[name]["metrics"]["mean"]["value"] is not None


def test_byo_judged_benchmark_from_yaml(tmp_path: Path) -> None:
    """examples/byo/open_qa.yaml: a judged benchmark with its own rubric and verdict pattern, no Python."""
    with running_sim(*FAST) as model, running_sim("--model", "judge", *FAST) as judge:
        cfg = write_config(
            tmp_path, model, judge, bench={"name": str(Path(REPO) / "examples/byo/open_qa.yaml"), "params": {}, "repeats": 1}
        )
        config = json.loads(cfg.read_text())
        del config["benchmarks"][0]["judge"]["mode"]  # the mapping's own mode (single)
        cfg.write_text(json.dumps(config))
        done = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    recs = records(tmp_path / "out", "open_qa")
    assert len(recs) == 8 and all(r["status"] == "ok" for r in recs)
    for r in recs:
        prompt_rating = int(re.findall(r"Rating: \[\[(\d+)\]\]", r["judge"]["reply"])[-1])
        assert r["score"] == prompt_rating / 10 and r["judge"]["mode"] == "single"


def config_file(tmp: Path, text: str) -> Path:
    path = tmp / "c.yaml"
    path.write_text(textwrap.dedent(text))
    return path


BASE = """
services:
  model: {type: api, url: "http://127.0.0.1:9/v1", model: m}
  judge: {type: api, url: "http://127.0.0.1:9/v1", model: judge-70b}
benchmarks:
  - name: arith
    solver: {service: model}
    judge: JUDGE
"""


@pytest.mark.parametrize(
    "judge, says",
    [
        ("{service: nobody}", "benchmarks[0].judge.service: no service 'nobody' to judge with; defined: model, judge"),
        ("{service: judge, mode: triple}", "benchmarks[0].judge.mode"),
        ("{service: judge, rubric: 'Rate {answr}'}", "rubric uses {answr}; a rubric may use {question}, {answer} and {reference}"),
        ("{service: judge, rubric: 'Rate {answer!x}'}", "rubric cannot be filled with text"),  # fails only when filled
        ("{service: judge, rubric: 'Rate {answer:d}'}", "rubric cannot be filled with text"),
        ("{service: judge, verdict: '([0-9'}", "verdict '([0-9' is not a valid regular expression"),
    ],
)
def test_judge_config_errors_are_one_line(tmp_path: Path, judge: str, says: str) -> None:
    done = shardeval_cmd("run", str(config_file(tmp_path, BASE.replace("JUDGE", judge))), "--shard", "0/1", "-o", str(tmp_path / "o"))
    assert done.returncode == 2 and says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_judged_byo_benchmark_needs_a_judge(tmp_path: Path) -> None:
    text = BASE.replace("    judge: JUDGE\n", "").replace("name: arith", f"name: {REPO}/examples/byo/open_qa.yaml")
    done = shardeval_cmd("run", str(config_file(tmp_path, text)), "--shard", "0/1", "-o", str(tmp_path / "o"))
    errors = [line for line in done.stderr.splitlines() if line.startswith("shardeval: error:")]
    assert done.returncode == 2 and len(errors) == 1 and "is scored by a judge" in errors[0] and "Traceback" not in done.stderr, done.stderr


def test_the_judge_is_part_of_the_run_identity(tmp_path: Path) -> None:
    def hash_of(judge: str | None, model: str = "judge-70b") -> str:
        text = BASE.replace("judge-70b", model)
        text = text.replace("    judge: JUDGE\n", "") if judge is None else text.replace("JUDGE", judge)
        return config_hash(load_config(str(config_file(tmp_path, text))))

    plain = hash_of("{service: judge}")
    assert plain == hash_of("{service: judge}")
    others = [
        hash_of(None),
        hash_of("{service: judge}", model="judge-8b"),
        hash_of("{service: judge, mode: pairwise}"),
        hash_of("{service: judge, rubric: 'Rate {answer}: Rating: [[N]]'}"),
        hash_of("{service: judge, verdict: '(\\d+)'}"),
        hash_of("{service: judge, generation: {temperature: 0.5}}"),
    ]
    assert len({plain, *others}) == 1 + len(others)
    # where the judge runs is not its identity
    moved = config_file(
        tmp_path,
        BASE.replace("JUDGE", "{service: judge}").replace(
            'judge: {type: api, url: "http://127.0.0.1:9/v1"', 'judge: {type: api, url: "http://10.0.0.1:8000/v1", retries: {attempts: 9}'
        ),
    )
    assert config_hash(load_config(str(moved))) == plain


def test_rescore_judges_saved_answers_again_and_asks_no_model(tmp_path: Path) -> None:
    """`shardeval rescore` of a judged run asks its judge again (the model's server is stopped):
    the same judge merges to byte-identical scores; `--judge judge:pairwise` re-judges every
    answer pairwise, and the manifest names that judge."""
    run, new, other = tmp_path / "run", tmp_path / "new", tmp_path / "pairwise"
    with running_sim("--model", "judge", "--bench", "arith", "--judge-quality", "1", *FAST) as judge:
        with running_sim("--bench", "arith", *FAST) as model:
            cfg = write_config(tmp_path, model, judge, n=12)
            for i in range(2):
                done = shardeval_cmd("run", str(cfg), "--shard", f"{i}/2", "-o", str(run / f"shard_{i}"))
                assert done.returncode == 0, done.stderr
        for args in ((str(run), "-o", str(new)), (str(run), "-o", str(other), "--judge", "judge:pairwise")):
            done = shardeval_cmd("rescore", *args)
            assert done.returncode == 0, done.stderr
    for d in (run, new, other):
        assert shardeval_cmd("merge", str(d), "-o", str(d / "merged")).returncode == 0
    assert (new / "merged" / "scores.json").read_bytes() == (run / "merged" / "scores.json").read_bytes()
    recs = [r for i in range(2) for r in records(other / f"shard_{i}")]
    assert len(recs) == 24 and check_verdicts(recs, "pairwise") == 24
    manifest = json.loads((other / "shard_0" / "manifest.json").read_text())
    assert manifest["rescored"]["scorers"][0]["scorer"] == "judge judge (pairwise)"
    bad = shardeval_cmd("rescore", str(run), "-o", str(tmp_path / "x"), "--judge", "nobody")
    errors = [line for line in bad.stderr.splitlines() if "error" in line]
    assert bad.returncode == 2 and len(errors) == 1 and "no service 'nobody'" in errors[0], bad.stderr


def test_rescore_starts_a_managed_judge_once_for_all_its_shards_and_benchmarks(tmp_path: Path) -> None:
    """A judge the rescore starts itself (`type: sim`: a server process, as a managed vLLM is)
    starts once for a rescore of 2 shards x 2 judged benchmarks, not once per benchmark of each
    shard (a vLLM judge would load its model four times); every answer is judged by it, and the
    server is stopped when the rescore ends."""
    run, new = tmp_path / "run", tmp_path / "new"
    with running_sim("--model", "judge", "--bench", "arith", "--judge-quality", "1", *FAST) as judge:
        with running_sim("--bench", "arith", *FAST) as model:
            cfg = write_config(tmp_path, model, judge, n=6, repeats=1)
            config = json.loads(cfg.read_text())
            bench = {**config["benchmarks"][0], "judge": {"service": "first", "mode": "single"}}
            config["benchmarks"] = [{**bench, "id": "arith_a"}, {**bench, "id": "arith_b"}]
            config["services"]["first"] = config["services"]["judge"]  # the run's judge; the rescore's is managed
            config["services"]["judge"] = {"type": "sim", "model": "judge", "bench": "arith", "judge_quality": 1, "ttft_ms": 0, "itl_ms": 0}
            cfg.write_text(json.dumps(config))
            for i in range(2):
                done = shardeval_cmd("run", str(cfg), "--shard", f"{i}/2", "-o", str(run / f"shard_{i}"))
                assert done.returncode == 0, done.stderr
    done = shardeval_cmd("rescore", str(run), "-o", str(new), "--judge", "judge")  # the model and the run's judge are gone
    assert done.returncode == 0, done.stderr
    logs = sorted(new.rglob("sim-judge.log"))
    starts = [line for log in logs for line in log.read_text().splitlines() if ": starting service 'judge'" in line]
    assert len(starts) == 1, (logs, starts)
    recs = [r for i in range(2) for b in ("arith_a", "arith_b") for r in records(new / f"shard_{i}", b)]
    assert len(recs) == 12 and check_verdicts(recs, "single") == 12  # each asked the managed judge (service "judge")
    assert logs[0].read_text().count("service 'judge' (sim) stopped") == 1


def test_rescore_keeps_judges_apart_and_says_what_a_judge_changes(tmp_path: Path) -> None:
    """Who judged is part of the scorer fingerprint, so a shard judged again by another service
    never pools with one its original judge scored; a benchmark judged for the first time by a
    rescore reports `mean`, as a run judged so would; a plain --scorer takes the judge's verdict
    and rating off a judged record; params for a benchmark that is judged again are refused, and a
    scorer named for the benchmark beats a judge named for all."""
    run, again, plain = tmp_path / "run", tmp_path / "by_model", tmp_path / "plain"
    with running_sim("--model", "judge", "--bench", "arith", "--judge-quality", "1", *FAST) as judge:
        with running_sim("--bench", "arith", *FAST) as model:
            cfg = write_config(tmp_path, model, judge, n=8, repeats=1)
            for i in range(2):
                assert shardeval_cmd("run", str(cfg), "--shard", f"{i}/2", "-o", str(run / f"shard_{i}")).returncode == 0
            done = shardeval_cmd("rescore", str(run), "-o", str(again), "--judge", "arith=model", "--shard", "0/2")
            assert done.returncode == 0, done.stderr
        unjudged = tmp_path / "unjudged"
        cfg2 = write_config(tmp_path, "http://127.0.0.1:9/v1", judge, n=8, repeats=1)
        text = json.loads(cfg2.read_text())
        del text["benchmarks"][0]["judge"]
        cfg2.write_text(json.dumps(text))
        with running_sim("--bench", "arith", *FAST) as model:
            done = shardeval_cmd("run", str(cfg2), "--shard", "0/1", "-o", str(unjudged / "shard_0"), "-O", f"services.model.url={model}")
            assert done.returncode == 0, done.stderr
        first = shardeval_cmd("rescore", str(unjudged), "-o", str(tmp_path / "first_judged"), "--judge", "judge")
        assert first.returncode == 0, first.stderr
        both = shardeval_cmd("rescore", str(unjudged), "-o", str(tmp_path / "scorer_wins"), "--judge", "judge", "--scorer", "arith=arith")
        assert both.returncode == 0, both.stderr
    import shutil

    shutil.copytree(run / "shard_1", again / "shard_1")  # the original judge's shard beside one the model judged
    mixed = shardeval_cmd("merge", str(again))
    assert mixed.returncode == 2 and "scorer" in mixed.stderr and len(mixed.stderr.strip().splitlines()) == 1, mixed.stderr
    assert json.loads((tmp_path / "first_judged" / "shard_0" / "manifest.json").read_text())["benchmarks"][0]["metrics"] == ["mean"]
    assert all("judge" not in r for r in records(tmp_path / "scorer_wins" / "shard_0"))
    done = shardeval_cmd("rescore", str(run), "-o", str(plain), "--scorer", "arith=arith")
    assert done.returncode == 0, done.stderr
    recs = [r for i in range(2) for r in records(plain / f"shard_{i}")]
    assert recs and all("judge" not in r and "rating" not in r["scores"] and r["score"] in (0.0, 1.0) for r in recs if r["status"] == "ok")
    bad = shardeval_cmd("rescore", str(run), "-o", str(tmp_path / "x"), "-O", "benchmarks.0.params.n=9")
    assert bad.returncode == 2 and "a judge takes no scorer params" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr


@pytest.mark.timeout(900)
def test_a_real_cpu_vllm_as_the_judge(tmp_path: Path) -> None:
    """A managed real vLLM (CPU, SmolLM2-135M, `completions`) judges the simulator's answers, with a
    few-shot rubric that ends where the rating starts and a verdict pattern for the number it writes. A 135M
    model's taste is not asserted, the contract is: every record is `ok` with the score its raw
    reply says, or a `judge` error whose reply holds no rating 1..10; and some are `ok`."""
    from vllm_real import SERVED_NAME, managed_service, require_vllm

    python, model = require_vllm()
    rubric = (
        "Rate each answer from 1 to 10.\n\nQuestion: What is 2 + 2?\nAnswer: 4\nRating: [[10]]\n\n"
        "Question: What is 3 + 5?\nAnswer: 9\nRating: [[1]]\n\nQuestion: {question}\nAnswer: {answer}\nRating: [["
    )
    verdict = r"\A\s*(\d+)"
    config = {
        "services": {
            "model": {"type": "sim", "bench": "arith", "ttft_ms": 0, "itl_ms": 0},
            "judge": managed_service(python, model, protocol="completions"),
        },
        "benchmarks": [
            {
                "name": "arith",
                "params": {"n": 6},
                "max_concurrent": 4,
                "solver": {"service": "model"},
                "judge": {"service": "judge", "rubric": rubric, "verdict": verdict, "generation": {"max_tokens": 8}},
            }
        ],
        "output": {"progress_interval_s": 0},
    }
    cfg = tmp_path / "config.yaml"
    cfg.write_text(json.dumps(config))
    done = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(tmp_path / "out"), timeout=800)
    assert done.returncode == 0, done.stderr[-3000:]
    recs = records(tmp_path / "out")
    assert len(recs) == 6
    for r in recs:
        j = r["judge"]
        assert j["model"] == SERVED_NAME and j["completion_tokens"] and j["latency_s"] > 0
        found = [int(n) for n in re.findall(verdict, j["reply"])]
        if r["status"] == "ok":
            assert found and 1 <= found[-1] <= 10 and r["score"] == found[-1] / 10 and r["scores"]["rating"] == found[-1]
        else:
            assert r["error_kind"] == "judge" and r["score"] is None and "####" in r["response"]
            assert not found or not 1 <= found[-1] <= 10
    assert any(r["status"] == "ok" for r in recs), [r["judge"]["reply"] for r in recs]
