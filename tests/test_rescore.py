"""`shardeval rescore`: a finished run's saved answers scored again with no model server, in real
processes (a real simulator answers the run, then is stopped before any rescore)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from conftest import api_eval_config, running_sim, shardeval_cmd
from shardeval.store.records import Manifest, ResultRecord

TESTS = os.path.dirname(os.path.abspath(__file__))
SCORER_ENV = {"SHARDEVAL_PLUGINS": "rescore_scorer_plugin", "PYTHONPATH": os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")])}
N, REPEATS = 40, 2  # 80 records over two shards


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def records(path: Path) -> list[ResultRecord]:
    return [msgspec.json.decode(line, type=ResultRecord) for line in path.read_bytes().splitlines() if line]


def manifest(path: Path) -> Manifest:
    return msgspec.json.decode((path / "manifest.json").read_bytes(), type=Manifest)


# The fixture run keeps errors (5xx), and a rescore copies them: it finishes with errors (H2), exit 3.
WITH_ERRORS = 3


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A two-shard run with errors (5xx, one attempt), a duplicate and another run's record in its
    files, merged into <tmp>/merged_run; the simulator is stopped when this returns."""
    tmp = tmp_path_factory.mktemp("rescore")
    with running_sim("--bench", "arith", "--accuracy", "0.6", "--ttft-ms", "1", "--itl-ms", "0", "--fail-5xx", "0.15") as url:
        cfg = api_eval_config(tmp / "eval.yaml", url, n=N, repeats=REPEATS, concurrency=8, service={"retries": {"attempts": 1}})
        for i in range(2):
            r = shardeval_cmd("run", str(cfg), "--shard", f"{i}/2", "-o", str(tmp / "run" / f"shard_{i}"))
            assert r.returncode == 3, r.stderr  # each shard finished with errors (issue 24): not complete
    results = tmp / "run" / "shard_1" / "arith" / "results.jsonl"
    first = json.loads(results.read_bytes().splitlines()[0])
    other = {**first, "run": "0123456789ab"}  # another run's record: refused by merge, never counted
    with open(results, "ab") as f:
        f.write(json.dumps(first).encode() + b"\n" + json.dumps(other).encode() + b"\n")
    r = shardeval_cmd("merge", str(tmp / "run"), "-o", str(tmp / "merged_run"), "-q")
    assert r.returncode == 3 and "not complete: ERRORS" in r.stderr, r.stderr
    scores = json.loads((tmp / "merged_run" / "scores.json").read_text())["arith"]
    assert scores["n_errors"] > 0 and scores["n_duplicates"] == 1 and scores["n_refused"] == 1, scores
    return tmp


def test_unchanged_scorer_gives_byte_identical_merge_and_leaves_the_originals_alone(finished):
    before = tree_digest(finished / "run")
    new = finished / "same"
    for i in range(2):  # as an array: each task its shard, the model server long gone
        r = shardeval_cmd("rescore", str(finished / "run"), "-o", str(new), "--shard", f"{i}/2")
        assert r.returncode == 3, r.stderr  # the source's errors are copied: finished with errors, as the source
        assert "records/s" in r.stderr
    r = shardeval_cmd("merge", str(new), "-o", str(finished / "merged_same"), "-q")
    assert r.returncode == 3, r.stderr
    for name in ("scores.json", "arith/results.jsonl", "arith/trajectories.jsonl"):
        assert (finished / "merged_same" / name).read_bytes() == (finished / "merged_run" / name).read_bytes(), name
    assert tree_digest(finished / "run") == before
    source, rescored = manifest(finished / "run" / "shard_0"), manifest(new / "shard_0")
    assert rescored.state == source.state == "finished_with_errors" and rescored.config_hash == source.config_hash
    assert rescored.benchmarks[0].error_kinds == source.benchmarks[0].error_kinds
    assert rescored.rescored.source == str((finished / "run" / "shard_0").resolve())
    info = rescored.rescored.scorers[0]
    assert (info.benchmark, info.scorer) == ("arith", "arith")
    assert info.fingerprint == info.replaces == rescored.benchmarks[0].scorer_fingerprint == source.benchmarks[0].scorer_fingerprint
    assert b'"rescored"' not in (finished / "run" / "shard_0" / "manifest.json").read_bytes()  # other manifests unchanged
    assert "| arith: rescored with | arith from shardeval " in (finished / "merged_same" / "report.md").read_text()

    again = tree_digest(new)
    r = shardeval_cmd("rescore", str(finished / "run"), "-o", str(new))
    assert r.returncode == 3 and "nothing to do" in r.stderr, r.stderr
    records_and_manifests = lambda digest: {k: v for k, v in digest.items() if k.endswith((".jsonl", "manifest.json"))}  # noqa: E731
    assert records_and_manifests(tree_digest(new)) == records_and_manifests(again)


def test_another_scorer_changes_the_scores_and_is_named(finished):
    new = finished / "lengths"
    r = shardeval_cmd(
        "rescore",
        str(finished / "run"),
        "-o",
        str(new),
        "--scorer",
        "length_multiple",
        "-O",
        "benchmarks.0.params.modulus=3",
        "-O",
        "benchmarks.0.params.in_thread=true",
        env=SCORER_ENV,
    )
    assert r.returncode == 3, r.stderr
    for i in range(2):
        old, got = (records(root / f"shard_{i}" / "arith" / "results.jsonl") for root in (finished / "run", new))
        assert len(got) == len(old)
        for a, b in zip(old, got):
            if a.status == "ok" and a.run == b.run and b.run is not None and a.run != "0123456789ab":
                assert (b.score, b.extracted, b.scores) == (
                    float(len(a.response) % 3 == 0),
                    str(len(a.response)),
                    {"chars": float(len(a.response))},
                )
                assert msgspec.structs.replace(b, score=a.score, extracted=a.extracted, scores=a.scores) == a  # nothing else changed
            else:
                assert b == a  # errors and another run's record: copied as they are
    ok = [rec for i in range(2) for rec in records(new / f"shard_{i}" / "arith" / "results.jsonl") if rec.status == "ok"]
    assert len({rec.score for rec in ok}) == 2  # some answers of each kind: the check above was not vacuous

    info = manifest(new / "shard_0").rescored.scorers[0]
    assert (info.scorer, info.plugin, info.scorer_version, info.params["modulus"]) == (
        "length_multiple",
        "rescore_scorer_plugin",
        "length-multiple-1",
        3,
    )
    assert info.fingerprint != info.replaces and manifest(new / "shard_0").benchmarks[0].scorer_fingerprint == info.fingerprint

    r = shardeval_cmd("merge", str(new), "-o", str(finished / "merged_lengths"), "-q", env=SCORER_ENV)
    assert r.returncode == 3, r.stderr
    merged = json.loads((finished / "merged_lengths" / "scores.json").read_text())["arith"]
    standing = records(finished / "merged_lengths" / "arith" / "results.jsonl")
    per_problem: dict[int, list[float]] = {}
    for rec in standing:
        if rec.status == "ok":
            per_problem.setdefault(rec.problem_idx, []).append(rec.score)
    want = sum(sum(v) / len(v) for v in per_problem.values()) / len(per_problem)  # accuracy: mean of problem means
    assert merged["metrics"]["accuracy"]["value"] == pytest.approx(want)
    report = (finished / "merged_lengths" / "report.md").read_text()
    assert "| arith: rescored with | length_multiple from rescore_scorer_plugin" in report, report
    original = json.loads((finished / "merged_run" / "scores.json").read_text())["arith"]
    assert merged["metrics"]["accuracy"]["value"] != original["metrics"]["accuracy"]["value"]

    mixed = finished / "mixed"  # a shard scored one way beside one scored another: merge refuses
    shutil.copytree(finished / "run" / "shard_0", mixed / "shard_0")
    shutil.copytree(new / "shard_1", mixed / "shard_1")
    r = shardeval_cmd("merge", str(mixed), "-q", "-o", str(finished / "merged_mixed"), env=SCORER_ENV)
    assert r.returncode == 2 and "scorer" in r.stderr, r.stderr


def test_a_killed_rescore_resumes_without_redoing_records(finished):
    new = finished / "killed"
    args = [
        sys.executable,
        "-m",
        "shardeval",
        "rescore",
        str(finished / "run"),
        "-o",
        str(new),
        "--shard",
        "0/2",
        "--scorer",
        "length_multiple",
        "-O",
        "benchmarks.0.params.delay_s=0.05",
    ]
    out = new / "shard_0" / "arith" / "results.jsonl"
    proc = subprocess.Popen(args, env={**os.environ, **SCORER_ENV}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not (out.exists() and out.stat().st_size) and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    partial = out.read_bytes()
    whole = partial[: partial.rfind(b"\n") + 1]
    n_whole = whole.count(b"\n")
    n_source = len(records(finished / "run" / "shard_0" / "arith" / "results.jsonl"))
    assert 0 < n_whole < n_source and manifest(new / "shard_0").state == "running"
    with open(out, "ab") as f:  # what a write cut off by the kill leaves: a torn last line, cut off on resume
        f.write(b'{"benchmark":"arith","problem_i')

    r = subprocess.run(args, env={**os.environ, **SCORER_ENV}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stderr  # the source shard's errors are copied
    assert f"resuming: {n_whole} record(s) already rescored" in r.stderr
    final = out.read_bytes()
    assert final.startswith(whole) and final.count(b"\n") == n_source  # the earlier lines kept, none twice
    got = records(out)
    assert all(rec.score == float(len(rec.response) % 2 == 0) for rec in got if rec.status == "ok")
    assert manifest(new / "shard_0").state == "finished_with_errors"


@pytest.mark.parametrize("case", ["missing", "same", "inside", "unknown scorer", "other key", "bad scorer"])
def test_bad_input_is_one_line_and_exit_2(finished, case):
    run = str(finished / "run")
    argv = {
        "missing": [str(finished / "nope"), "-o", str(finished / "x")],
        "same": [run, "-o", run],
        "inside": [run, "-o", str(finished / "run" / "shard_0" / "again")],
        "unknown scorer": [run, "-o", str(finished / "x"), "--scorer", "no_such_scorer"],
        "other key": [run, "-o", str(finished / "x"), "-O", "seed=3"],
        "bad scorer": [run, "-o", str(finished / "x"), "--scorer", "arith="],
    }[case]
    before = tree_digest(finished / "run")
    r = shardeval_cmd("rescore", *argv)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    assert tree_digest(finished / "run") == before
    assert not (finished / "x").exists()  # nothing written on a refusal


def test_a_sweep_keeps_its_layout_and_merges_to_the_same_table(tmp_path):
    """<service>/shard_<i>/ of every model, and the sweep's plan: merge reads NEW_DIR as the same sweep."""
    example = os.path.join(os.path.dirname(TESTS), "examples", "sweep_sim.yaml")
    small = ["-O", "benchmarks.0.params.n=40", "-O", "benchmarks.1.params.n=40", "-O", "cluster.shards=1"]
    r = shardeval_cmd("run", example, *small, "-o", str(tmp_path / "sweep"), timeout=180)
    assert r.returncode == 0, r.stderr
    for i in range(3):  # an array of three tasks over the three models' shards
        r = shardeval_cmd("rescore", str(tmp_path / "sweep"), "-o", str(tmp_path / "again"), "--shard", f"{i}/3")
        assert r.returncode == 0, r.stderr
    assert sorted(p.parent.name + "/" + p.name for p in (tmp_path / "again").glob("*/shard_*")) == [
        "base/shard_0",
        "step1/shard_0",
        "step2/shard_0",
    ]
    for name in ("sweep", "again"):
        r = shardeval_cmd("merge", str(tmp_path / name), "-q", "-o", str(tmp_path / f"merged_{name}"))
        assert r.returncode == 0, r.stderr
    assert (tmp_path / "merged_again" / "sweep.json").read_bytes() == (tmp_path / "merged_sweep" / "sweep.json").read_bytes()


# --- a source that changed between a rescore and its rerun (guarantee H7) ---------------------------


def _copy_run(finished: Path, tmp_path: Path) -> Path:
    """A private copy of the finished run, so a test may change its files."""
    shutil.copytree(finished / "run", tmp_path / "run")
    return tmp_path / "run"


def _kill_midway(args: list[str], out: Path) -> int:
    """Start a slow rescore, kill it once it wrote something: the whole lines it left."""
    proc = subprocess.Popen(args, env={**os.environ, **SCORER_ENV}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not (out.exists() and out.read_bytes().count(b"\n") >= 2) and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    return out.read_bytes().count(b"\n")


def test_a_resumed_rescore_refuses_a_source_rewritten_with_the_same_size(finished, tmp_path):
    """H7: the source's results rewritten between a killed rescore and its resume, with the same
    lines in another order (same line count, same size: counting lines cannot see it) is refused,
    naming the file; nothing is appended to the half-done rescore."""
    run = _copy_run(finished, tmp_path)
    new = tmp_path / "new"
    args = [
        sys.executable,
        "-m",
        "shardeval",
        "rescore",
        str(run),
        "-o",
        str(new),
        "--shard",
        "0/2",
        "--scorer",
        "length_multiple",
        "-O",
        "benchmarks.0.params.delay_s=0.05",
    ]
    out = new / "shard_0" / "arith" / "results.jsonl"
    n_whole = _kill_midway(args, out)
    source = run / "shard_0" / "arith" / "results.jsonl"
    lines = source.read_bytes().splitlines(keepends=True)
    assert 0 < n_whole < len(lines) and manifest(new / "shard_0").state == "running"
    size = source.stat().st_size
    source.write_bytes(b"".join(reversed(lines)))
    assert source.stat().st_size == size
    partial = out.read_bytes()
    r = subprocess.run(args, env={**os.environ, **SCORER_ENV}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"its source {source.resolve()} was rewritten" in r.stderr and f"remove {new / 'shard_0'}" in r.stderr, r.stderr
    assert out.read_bytes() == partial


def test_a_rerun_rescore_refuses_a_truncated_source_and_catches_up_with_an_appended_one(finished, tmp_path):
    """H7 variants: after a finished rescore, a source cut short is refused (its records would be
    gaps); a source only appended to (its shard resumed) is the same source grown, and the rerun
    scores just the new records, ending with one line per source line."""
    run = _copy_run(finished, tmp_path)
    source = run / "shard_0" / "arith" / "results.jsonl"
    lines = source.read_bytes().splitlines(keepends=True)
    for name, change in (
        ("cut", lambda: source.write_bytes(b"".join(lines[:-3]))),
        ("grown", lambda: source.write_bytes(b"".join(lines + lines[:3]))),
    ):
        source.write_bytes(b"".join(lines))
        new = tmp_path / name
        r = shardeval_cmd("rescore", str(run), "-o", str(new), "--shard", "0/2")
        assert r.returncode == WITH_ERRORS, r.stderr
        out = new / "shard_0" / "arith" / "results.jsonl"
        assert out.read_bytes().count(b"\n") == len(lines)
        change()
        r = shardeval_cmd("rescore", str(run), "-o", str(new), "--shard", "0/2")
        if name == "cut":
            assert r.returncode == 2 and "was truncated since it was rescored" in r.stderr, r.stderr
            assert out.read_bytes().count(b"\n") == len(lines)
        else:
            assert r.returncode == WITH_ERRORS, r.stderr
            assert f"resuming: {len(lines)} record(s) already rescored" in r.stderr
            assert out.read_bytes().count(b"\n") == len(lines) + 3
            sources = manifest(new / "shard_0").rescored.sources
            assert sources["arith"].bytes == source.stat().st_size
            r = shardeval_cmd("rescore", str(run), "-o", str(new), "--shard", "0/2")  # and now it is done
            assert r.returncode == WITH_ERRORS and "nothing to do" in r.stderr, r.stderr


def test_a_rescore_that_recorded_no_source_is_not_resumed_blind(finished, tmp_path):
    """H7 variant: a rescore directory whose manifest holds no identity of its source (written
    before it was recorded) cannot be checked, so it is refused rather than continued."""
    new = tmp_path / "new"
    r = shardeval_cmd("rescore", str(finished / "run"), "-o", str(new), "--shard", "0/2")
    assert r.returncode == WITH_ERRORS, r.stderr
    data = json.loads((new / "shard_0" / "manifest.json").read_text())
    del data["rescored"]["sources"]
    (new / "shard_0" / "manifest.json").write_text(json.dumps(data))
    r = shardeval_cmd("rescore", str(finished / "run"), "-o", str(new), "--shard", "0/2")
    assert r.returncode == 2 and "recorded no identity of its source" in r.stderr, r.stderr


def test_a_rescore_refuses_a_source_directory_that_now_holds_another_run(finished, tmp_path):
    """H7 variant: the source shard started over (`run --fresh` with another seed: its results moved
    aside, new ones written) after it was rescored: the rerun names the other run, exit 2."""
    run = _copy_run(finished, tmp_path)
    new = tmp_path / "new"
    r = shardeval_cmd("rescore", str(run), "-o", str(new), "--shard", "0/2")
    assert r.returncode == WITH_ERRORS, r.stderr
    before = (new / "shard_0" / "arith" / "results.jsonl").read_bytes()
    with running_sim("--bench", "arith", "--accuracy", "0.6", "--ttft-ms", "1", "--itl-ms", "0") as url:
        cfg = api_eval_config(tmp_path / "eval.yaml", url, n=N, repeats=REPEATS, concurrency=8)
        config = json.loads(cfg.read_text())
        cfg.write_text(json.dumps({**config, "seed": 11}))
        r = shardeval_cmd("run", str(cfg), "--shard", "0/2", "--fresh", "-o", str(run / "shard_0"))
        assert r.returncode == 0, r.stderr
    r = shardeval_cmd("rescore", str(run), "-o", str(new), "--shard", "0/2")
    assert r.returncode == 2 and "now holds another run (config sha256:" in r.stderr, r.stderr
    assert (new / "shard_0" / "arith" / "results.jsonl").read_bytes() == before
