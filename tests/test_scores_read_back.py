"""What a shard says equals what it wrote (issue 40, point 4).

A scorer that returned NaN made records with `score: null` that the shard counted "6/6 ok, mean
score nan", manifest `complete`, exit 0, while its own reader and the merge skipped those lines as
undecodable (PARTIAL, 6 of 6 missing), and every rerun wrote them again. Now a score that is not a
finite number is an `internal` error record naming the scorer and the value, the shard's verdict
comes from its files read back by the merge's reader, and every record the writer can write reads
back equal. Real `shardeval run`, `merge` and `rescore` processes against the simulator; the
scorer is a plugin loaded through SHARDEVAL_PLUGINS (tests/bad_score_plugin.py).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import api_eval_config, running_sim, shardeval_cmd
from shardeval.store.records import ImageInfo, JudgeRecord, ReadReport, ResultRecord, encode_line, scan_lines, score_fault, unscorable

TESTS = os.path.dirname(os.path.abspath(__file__))
PLUGIN_ENV = {"SHARDEVAL_PLUGINS": "bad_score_plugin", "PYTHONPATH": os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")])}
SIM = ("--ttft-ms", "0", "--itl-ms", "0")


def read_back(path: Path) -> tuple[list[ResultRecord], ReadReport]:
    """The records as the merge reads them (scan_lines), and what it skipped."""
    report = ReadReport(str(path))
    return [record for _, _, record in scan_lines(str(path), ResultRecord, report)], report


def run_bad(tmp: Path, url: str, **params) -> tuple[object, Path]:
    cfg = api_eval_config(tmp / "run.yaml", url, bench="bad_scores", n=6, benchmark={"params": {"n": 6, **params}})
    out = tmp / "out"
    return shardeval_cmd("run", str(cfg), "-o", str(out), env=PLUGIN_ENV, timeout=60), out


@pytest.mark.parametrize(
    "bad, where, shown",
    [
        ("nan", "score", "score nan"),
        ("inf", "score", "score inf"),
        ("-inf", "scores", "scores['odd'] -inf"),
        ("nan", "scores", "scores['odd'] nan"),
        ("bool", "scores", "scores['odd'] True"),
        ("str", "scores", "scores['odd'] 'high'"),
    ],
)
def test_a_score_that_is_not_a_finite_number_is_an_error_naming_the_scorer(tmp_path, bad, where, shown):
    with running_sim(*SIM) as url:
        proc, out = run_bad(tmp_path, url, bad=bad, where=where)
    assert proc.returncode == 3, proc.stderr  # finished with errors, never COMPLETE
    assert "0/6 ok, 6 error(s) (internal 6)" in proc.stderr
    records, report = read_back(out / "bad_scores" / "results.jsonl")
    assert report.describe() is None and len(records) == 6  # every line reads back
    for record in records:
        assert record.status == "error" and record.error_kind == "internal" and record.score is None and record.scores == {}
        assert record.error == (
            f"the scorer of benchmark bad_scores (bad_score_plugin.BadScores) gave {shown}, not a finite "
            "number; fix the scorer (a score must be a finite number)"
        )
        assert record.response  # the answer is kept
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["state"] == "finished_with_errors" and manifest["benchmarks"][0]["error_kinds"] == {"internal": 6}
    merged = shardeval_cmd("merge", str(out), "-o", str(tmp_path / "merged"), "-q", env=PLUGIN_ENV)
    assert merged.returncode == 3 and "ERRORS" in merged.stderr, merged.stderr
    scores = json.loads((tmp_path / "merged" / "scores.json").read_text())["bad_scores"]
    assert (scores["n_errors"], scores["n_missing"], scores["error_kinds"]) == (6, 0, {"internal": 6})


def test_the_shard_counts_what_reads_back_not_what_it_holds(tmp_path):
    """Half the problems scored NaN: the summary line, the manifest and the merge agree, 3 and 3."""
    with running_sim(*SIM) as url:
        proc, out = run_bad(tmp_path, url, bad="nan", every=2)
    assert proc.returncode == 3, proc.stderr
    assert "3/6 ok, 3 error(s) (internal 3), missing 0; mean score 1.0000 over 3 ok" in proc.stderr
    manifest = json.loads((out / "manifest.json").read_text())["benchmarks"][0]
    records, _ = read_back(out / "bad_scores" / "results.jsonl")
    assert (
        (manifest["n_ok"], manifest["n_error"])
        == (sum(r.status == "ok" for r in records), sum(r.status == "error" for r in records))
        == (3, 3)
    )


def test_a_rescore_with_a_scorer_that_gives_nan_writes_errors_that_read_back(tmp_path):
    with running_sim("--bench", "arith", *SIM) as url:
        cfg = api_eval_config(tmp_path / "run.yaml", url, n=6)
        assert shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "run")).returncode == 0
    new = tmp_path / "rescored"
    proc = shardeval_cmd("rescore", str(tmp_path / "run"), "-o", str(new), "--scorer", "bad_scores", env=PLUGIN_ENV)
    assert proc.returncode == 3, proc.stderr
    records, report = read_back(new / "arith" / "results.jsonl")
    assert report.describe() is None and len(records) == 6
    assert all(r.status == "error" and r.error.startswith("rescore: bad_scores") and "gave score nan" in r.error for r in records), records


# --- every record the writer can write reads back equal ---------------------------------------------

text = st.text(max_size=40)
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
any_float = st.floats(width=64)  # nan and ±inf among them: what a scorer may give
score_value = st.one_of(any_float, st.booleans(), st.integers(-10, 10), st.just("high"))
judge = st.builds(
    JudgeRecord,
    service=text,
    model=text,
    mode=st.sampled_from(["single", "pairwise"]),
    reply=text,
    verdict=st.none() | text,
    error_kind=st.none() | text,
    attempts=st.integers(0, 5),
    latency_s=st.none() | finite,
    cached=st.booleans(),
)
image = st.builds(
    ImageInfo,
    sha256=st.text("0123456789abcdef", min_size=64, max_size=64),
    bytes=st.integers(0, 2**40),
    width=st.integers(1, 10**5),
    height=st.integers(1, 10**5),
)
unset = st.just(msgspec.UNSET)
record = st.builds(
    ResultRecord,
    benchmark=st.text(min_size=1, max_size=20),
    problem_idx=st.integers(0, 10**6),
    problem_id=text,
    repeat=st.integers(0, 100),
    seed=st.integers(0, 2**63 - 1),
    status=st.sampled_from(["ok", "error"]),
    error_kind=st.none()
    | st.sampled_from(["rate_limited", "server_error", "connection", "timeout", "protocol", "client", "internal", "judge", "image"]),
    error=st.none() | text,
    attempts=st.integers(0, 10),
    response=text,
    extracted=st.none() | text,
    reference=st.none() | text,
    score=st.none() | score_value,
    scores=st.dictionaries(text, score_value, max_size=4),
    finish_reason=st.none() | text,
    prompt_tokens=st.none() | st.integers(0, 10**6),
    completion_tokens=st.none() | st.integers(0, 10**6),
    ttft_s=st.none() | finite,
    latency_s=st.none() | finite,
    started_at=finite,
    shard=st.integers(0, 1000),
    cluster=st.none() | text,
    run=st.none() | st.text("0123456789abcdef", min_size=12, max_size=12),
    cached=unset | st.just(True),
    judge=unset | judge,
    images=unset | st.lists(image, max_size=3),
    reasoning=unset | text,
    answer=unset | text,
    reasoning_tokens=unset | st.integers(0, 10**6),
    reasoning_tokens_from=unset | st.sampled_from(["usage", "stream"]),
    outcome=unset | st.sampled_from(["truncated_reasoning", "truncated"]),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(record, min_size=1, max_size=8))
def test_every_record_the_writer_writes_the_merges_reader_reads_back_equal(tmp_path, records):
    """Every kind (ok, each error kind, judged, cached, with images, thinking, cut off) with any
    scores: written by the shard's writer (encode_line), read by the merge's (scan_lines), equal;
    a record whose scores are not all finite numbers is written as the `internal` error it is."""
    expected = []
    for r in records:
        want = msgspec.structs.replace(r, scores=dict(r.scores))
        if (fault := score_fault(want)) is not None:
            unscorable(want, "a scorer", fault)
        expected.append(want)
    path = tmp_path / "results.jsonl"
    path.write_bytes(b"".join(encode_line(r) for r in records))
    got, report = read_back(path)
    assert report.describe() is None
    assert got == expected
    for r in got:
        assert r.score is None or math.isfinite(r.score)
