"""Perplexity through the real CLI: `shardeval run` shards against the simulator, `shardeval merge`.

The simulator's logprobs are a documented pure function of each token's text, so the expected
perplexity is computed here independently, from the documents alone. Deliberately unequal shards
(10 documents in 3 shards: 4/3/3) must merge to exactly the unsharded bytes.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path

import pytest

from conftest import running_sim, shardeval_cmd
from shardeval.errors import UsageError

DOCS = [
    "The cat sat on the mat.",
    "A much longer document, with punctuation; numbers like 3.14159 and 42, and several clauses that go on for a while.",
    "single",
    "Tabs\tand  double  spaces  count as part of the next token.",
    "Ünïcödé wörds — and an em dash.",
    "one two three four five six seven eight nine ten eleven twelve",
    "trailing whitespace stays a token of its own   ",
    "Short one.",
    "x y",
    "The last document of the corpus ends here, after ten documents in all.",
]


def tokens(text: str) -> list[str]:
    """The simulator's documented tokenizer: words with their leading whitespace, trailing whitespace alone."""
    return re.findall(r"\s*\S+|\s+", text)


def logprob(token: str) -> float:
    """The simulator's documented logprob: -(1 + (blake2b-64(token) mod 1000) / 250)."""
    h = int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "big")
    return -(1.0 + (h % 1000) / 250.0)


def expected(docs: list[str]) -> tuple[list[float], list[int], float]:
    """Per-document nll and scored tokens (all but each document's first), and the corpus perplexity."""
    nll = [-math.fsum(logprob(t) for t in tokens(d)[1:]) for d in docs]
    n = [len(tokens(d)) - 1 for d in docs]
    return nll, n, math.exp(math.fsum(nll) / sum(n))


def write_config(tmp: Path, url: str, params: str) -> Path:
    path = tmp / "perplexity.yaml"
    path.write_text(
        f"""
services:
  model: {{type: api, url: "{url}", model: sim}}
benchmarks:
  - name: perplexity
    params: {params}
    max_concurrent: 8
output: {{progress_interval_s: 0}}
"""
    )
    return path


def records(shard_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (shard_dir / "perplexity" / "results.jsonl").read_text().splitlines()]


def run_and_merge(cfg: Path, root: Path, total: int) -> dict:
    for i in range(total):
        result = shardeval_cmd("run", str(cfg), "--shard", f"{i}/{total}", "-o", str(root / f"shard_{i}"))
        assert result.returncode == 0, result.stderr
    merged = shardeval_cmd("merge", str(root))
    assert merged.returncode == 0, merged.stderr
    return json.loads((root / "merged" / "scores.json").read_text())


@pytest.fixture(scope="module")
def url():
    with running_sim("--ttft-ms", "0", "--itl-ms", "0") as base:
        yield base


def test_sharded_perplexity_is_exact_and_identical_to_unsharded(tmp_path: Path, url: str) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": d, "id": f"doc{i}"}) + "\n" for i, d in enumerate(DOCS)))
    cfg = write_config(tmp_path, url, f"{{path: {json.dumps(str(corpus))}, id_field: id}}")
    run_and_merge(cfg, tmp_path / "whole", 1)
    split = run_and_merge(cfg, tmp_path / "split", 3)
    assert [len(records(tmp_path / "split" / f"shard_{i}")) for i in range(3)] == [4, 3, 3]
    assert (tmp_path / "whole" / "merged" / "scores.json").read_bytes() == (tmp_path / "split" / "merged" / "scores.json").read_bytes()

    nll, n, ppl = expected(DOCS)
    recs = sorted((r for i in range(3) for r in records(tmp_path / "split" / f"shard_{i}")), key=lambda r: r["problem_idx"])
    assert [r["problem_id"] for r in recs] == [f"doc{i}" for i in range(10)]
    assert all(r["status"] == "ok" for r in recs)
    assert [r["scores"]["nll"] for r in recs] == nll  # each document's sum is exact (fsum on both sides)
    assert [r["scores"]["tokens"] for r in recs] == n
    assert recs[2]["scores"]["tokens"] == 0 and recs[2]["score"] is None  # "single": nothing to score
    assert recs[0]["score"] == pytest.approx(nll[0] / n[0], rel=1e-15)

    bench = split["perplexity"]
    assert bench["n_problems"] == 10 and bench["n_errors"] == 0 and bench["n_missing"] == 0
    metric = bench["metrics"]["perplexity"]
    assert metric["value"] == pytest.approx(ppl, rel=1e-12)
    assert metric["ci_low"] < metric["value"] < metric["ci_high"]
    assert bench["metrics"]["token_nll"]["value"] == pytest.approx(math.log(ppl), rel=1e-12)
    print(f"\nperplexity of the {len(DOCS)}-document corpus: {metric['value']!r} (expected {ppl!r}), {sum(n)} tokens")


def test_windows_and_plain_text_give_the_same_value(tmp_path: Path, url: str) -> None:
    """A .txt corpus (one document per line) split into 24-character windows with 8 characters of
    context: every token is still scored once (the simulator's logprobs ignore the context)."""
    docs = [d for d in DOCS if d.strip() == d]  # a line's surrounding whitespace is not part of a .txt document
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(docs[:3]) + "\n\n" + "\n".join(docs[3:]) + "\n")  # blank lines are skipped
    cfg = write_config(tmp_path, url, f"{{path: {json.dumps(str(corpus))}, max_chars_per_request: 24, context_chars: 8}}")
    scores = run_and_merge(cfg, tmp_path / "windows", 2)
    assert scores["perplexity"]["n_problems"] == len(docs)
    assert scores["perplexity"]["metrics"]["perplexity"]["value"] == pytest.approx(expected(docs)[2], rel=1e-12)
    traj = [json.loads(line) for line in (tmp_path / "windows" / "shard_0" / "perplexity" / "trajectories.jsonl").read_text().splitlines()]
    assert max(len(t["request"]["windows"]) for t in traj) > 1


def test_params_mistakes_are_one_line_usage_errors(tmp_path: Path) -> None:
    from shardeval_benchmarks.perplexity import PerplexityBenchmark

    corpus = tmp_path / "c.txt"
    corpus.write_text("a b\n")
    for params, message in [
        ({}, "no corpus given"),
        ({"path": str(tmp_path / "missing.txt")}, "no such file"),
        ({"path": str(corpus), "max_chars": 5}, "unknown key"),
        ({"path": str(corpus), "max_chars_per_request": 10, "context_chars": 10}, "context_chars must be"),
        ({"path": str(corpus), "context_chars": 3}, "needs params.max_chars_per_request"),
    ]:
        with pytest.raises(UsageError, match=message):
            PerplexityBenchmark(params)
    bench = PerplexityBenchmark({"path": str(corpus)})
    assert bench.size() == 1 and bench.metrics == ("perplexity",)
    assert bench.problem(0).metadata == {"scoring": "loglikelihood"}
