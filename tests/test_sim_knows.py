"""The simulator answers what the integrations' examples ask, sensibly (issue 40, point 12).

Before: a `type: sim` service knew one benchmark, so a second benchmark of the run was answered at
random; every option of an lm-eval multiple-choice question got the same kind of log-likelihood
(a hash of its words), so lm-eval's accuracy was whatever the hash made of the labels, not the
configured accuracy; and an Inspect task's epochs (the same body, no seed) all got one reply.
Each is checked against a real simulator over HTTP, and end to end through `shardeval run`.
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO, running_sim, shardeval_cmd
from shardeval_sim.answers import token_logprob, tokenize

pytestmark = pytest.mark.timeout(180)
CAPITALS = Path(REPO) / "examples" / "lm_eval_local"
TRIVIA = os.path.join(REPO, "examples", "byo", "trivia.yaml")


def post(url: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def questions() -> list[dict]:
    return [json.loads(line) for line in (CAPITALS / "capitals.jsonl").read_text().splitlines() if line.strip()]


def choice_logprobs(url: str, row: dict, seed: int | None = 1234) -> list[float]:
    """Each option's log-likelihood as lm-eval reads it from an echo: the continuation's tokens."""
    context = f"Question: {row['question']}\nAnswer:"
    out = []
    for choice in row["choices"]:
        body = {
            "model": "sim",
            "prompt": context + " " + choice,
            "echo": True,
            "logprobs": 1,
            "max_tokens": 1,
            "temperature": 0,
            **({"seed": seed} if seed is not None else {}),
        }
        lp = post(url, "/completions", body)["choices"][0]["logprobs"]
        start = len(tokenize(context))
        continuation = lp["token_logprobs"][start : len(tokenize(context + " " + choice))]
        assert continuation and all(v is not None and v <= 0 for v in continuation)
        out.append(sum(continuation))
    return out


@pytest.mark.parametrize("accuracy, right", [(1.0, 16), (0.0, 0)])
def test_a_multiple_choice_question_is_answered_at_the_accuracy_whatever_the_label(accuracy: float, right: int) -> None:
    rows = questions()
    assert {row["choices"].index(row["answer"]) for row in rows} == {0, 1, 2, 3}
    with running_sim("--bench", str(CAPITALS / "capitals.yaml"), "--accuracy", str(accuracy), "--ttft-ms", "0", "--itl-ms", "0") as url:
        picked = [max(range(4), key=lambda i, lp=choice_logprobs(url, row): lp[i]) for row in rows]  # noqa: B008
    assert sum(row["choices"][p] == row["answer"] for row, p in zip(rows, picked)) == right


def test_at_half_some_right_some_wrong_and_other_tokens_keep_their_own_values() -> None:
    rows = questions()
    with running_sim("--bench", str(CAPITALS / "capitals.yaml"), "--accuracy", "0.5", "--ttft-ms", "0", "--itl-ms", "0") as url:
        picked = [max(range(4), key=lambda i, lp=choice_logprobs(url, row): lp[i]) for row in rows]  # noqa: B008
        wrong = next(c for c in rows[0]["choices"] if c != rows[0]["answer"])
        prompt = f"Question: {rows[0]['question']}\nAnswer: {wrong}"
        lp = post(url, "/completions", {"model": "sim", "prompt": prompt, "echo": True, "logprobs": 1, "max_tokens": 0})
        unknown = post(
            url,
            "/completions",
            {
                "model": "sim",
                "prompt": "Question: What is the capital of Atlantis?\nAnswer: Poseidonia",
                "echo": True,
                "logprobs": 1,
                "max_tokens": 0,
            },
        )
    hits = sum(row["choices"][p] == row["answer"] for row, p in zip(rows, picked))
    assert 0 < hits < 16, hits
    tokens = tokenize(prompt)
    assert lp["choices"][0]["logprobs"]["token_logprobs"][1:] == [token_logprob(t) for t in tokens[1:]]  # a wrong option: untouched
    values = unknown["choices"][0]["logprobs"]["token_logprobs"]
    assert values[1:] == [token_logprob(t) for t in unknown["choices"][0]["logprobs"]["tokens"][1:]]  # an unknown question: untouched


# Two lm-eval runs (lm-eval's import, its task plan, the tokenizer): 147 s of a full test command's
# parallel pass on 2026-12-06, and past the module's 180 s once when the machine was busier.
@pytest.mark.timeout(480)
def test_lm_eval_reads_the_configured_accuracy_through_the_example(tmp_path: Path) -> None:
    """The example lm-eval task end to end (lm-eval's own scoring): accuracy 1 and 0 read as 1 and 0."""
    pytest.importorskip("lm_eval")
    env = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    for accuracy in (1.0, 0.0):
        out = tmp_path / f"acc{accuracy}"
        done = shardeval_cmd(
            "run",
            "examples/lm_eval_local/run.yaml",
            "-o",
            str(out),
            "-O",
            f"services.model.accuracy={accuracy}",
            env=env,
            cwd=REPO,
            timeout=220,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        metrics = json.loads((out / "merged" / "scores.json").read_text())["capitals_mc"]["metrics"]
        assert metrics["acc,none"]["value"] == metrics["acc_norm,none"]["value"] == accuracy


def test_one_service_knows_several_benchmarks(tmp_path: Path) -> None:
    """`bench: [arith, trivia.yaml]`: both benchmarks of the run at accuracy 1; the same run with the
    service knowing only arith gets trivia wrong (its answers are then random numbers)."""

    def run(bench: object, name: str) -> dict:
        config = {
            "services": {"model": {"type": "sim", "bench": bench, "accuracy": 1.0, "ttft_ms": 0, "itl_ms": 0}},
            "benchmarks": [{"name": "arith", "params": {"n": 12}}, {"name": TRIVIA}],
            "output": {"progress_interval_s": 0},
        }
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(config))
        done = shardeval_cmd("run", str(path), "-o", str(tmp_path / name), timeout=170)
        assert done.returncode == 0, done.stderr[-3000:]
        assert shardeval_cmd("merge", str(tmp_path / name), timeout=120).returncode == 0
        scores = json.loads((tmp_path / name / "merged" / "scores.json").read_text())
        return {bench: scores[bench]["metrics"]["accuracy"]["value"] for bench in scores}

    both = run(["arith", TRIVIA], "both")
    assert set(both.values()) == {1.0}, both
    one = run("arith", "one")
    assert one["arith"] == 1.0 and min(one.values()) < 1.0, one


def test_a_bench_list_is_checked_entry_by_entry_and_one_name_keeps_its_identity(tmp_path: Path) -> None:
    from shardeval_sim.config import SimServiceConfig, sim_argv

    assert SimServiceConfig(type="sim", bench="arith").identity()["bench"] == "arith"  # runs from before lists keep their identity
    argv = sim_argv(SimServiceConfig(type="sim", bench=["arith", TRIVIA]), ["shardeval"])
    assert argv[argv.index("--bench") + 1] == "arith" and argv.count("--bench") == 2
    config = {
        "services": {"model": {"type": "sim", "bench": ["arith", "no/such/file.jsonl"]}},
        "benchmarks": [{"name": "arith", "params": {"n": 3}}],
    }
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(config))
    done = shardeval_cmd("run", str(path), "-o", str(tmp_path / "out"), timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "no/such/file.jsonl" in done.stderr and not (tmp_path / "out").exists()


def test_unseeded_requests_are_drawn_afresh_only_when_asked() -> None:
    body = {"model": "sim", "messages": [{"role": "user", "content": "What is 17 + 25?"}], "max_tokens": 16}

    def replies(url: str, extra: dict, times: int = 8) -> list[str]:
        return [post(url, "/chat/completions", {**body, **extra})["choices"][0]["message"]["content"] for _ in range(times)]

    with running_sim("--bench", "arith", "--accuracy", "0.5", "--ttft-ms", "0", "--itl-ms", "0") as url:
        assert len(set(replies(url, {}))) == 1  # the default: the same body, the same reply
    with running_sim("--bench", "arith", "--accuracy", "0.5", "--ttft-ms", "0", "--itl-ms", "0", "--vary-unseeded") as url:
        fresh = replies(url, {})
        assert len(set(fresh)) > 1
        assert len(set(replies(url, {"seed": 7}))) == 1  # a seeded request is fixed by its seed
        assert len(set(replies(url, {"temperature": 0}))) == 1  # greedy: one reply
    with running_sim("--bench", "arith", "--accuracy", "0.5", "--ttft-ms", "0", "--itl-ms", "0", "--vary-unseeded") as url:
        assert replies(url, {}) == fresh  # the k-th ask is drawn alike on every server
    with running_sim("--bench", "arith", "--accuracy", "0.5", "--ttft-ms", "0", "--itl-ms", "0") as url:
        assert replies(url, {}, 1) == fresh[:1]  # the first ask is the reply without the flag
