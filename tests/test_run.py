"""End to end: real `shardeval run` processes against a real simulator on 127.0.0.1.

Covers the issue's acceptance: N manual shards cover every (problem, repeat) exactly once; a shard
killed with SIGKILL and rerun completes with no duplicate and no loss; 1 shard and 4 shards give
identical records apart from timing; resume refuses a changed config; SIGTERM marks `interrupted`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import api_eval_config, running_sim, shardeval_cmd

TIMING = {"ttft_s", "latency_s", "started_at", "shard"}


def write_config(tmp: Path, url: str, n: int = 60, repeats: int = 2, output: dict | None = None) -> Path:
    return api_eval_config(
        tmp / "config.yaml",
        url,
        n=n,
        repeats=repeats,
        concurrency=16,
        service={"retries": {"attempts": 3, "backoff_base": 0.05, "backoff_max": 0.2}},
        benchmark={
            "solver": {
                "type": "simple",
                "service": "model",
                "system_prompt": "You are careful.",
                "generation": {"temperature": 0.7, "max_tokens": 64},
            }
        },
        output={"progress_interval_s": 0.5, **(output or {})},
    )


def records(shard_dir: Path, bench: str = "arith") -> list[dict]:
    path = shard_dir / bench / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def manifest(shard_dir: Path) -> dict:
    return json.loads((shard_dir / "manifest.json").read_text())


def run_shard(cfg: Path, out: Path, idx: int, total: int, *args: str) -> subprocess.CompletedProcess[str]:
    return shardeval_cmd("run", str(cfg), "-o", str(out), *args, env={"NEL_SHARD_IDX": str(idx), "NEL_TOTAL_SHARDS": str(total)})


def test_four_manual_shards_cover_every_pair_exactly_once(tmp_path, sim):
    cfg = write_config(tmp_path, sim, n=61, repeats=2)
    keys = []
    for i in range(4):
        result = run_shard(cfg, tmp_path / f"shard_{i}", i, 4)
        assert result.returncode == 0, result.stderr
        assert f"shard {i}/4 (from NEL_SHARD_IDX={i}, NEL_TOTAL_SHARDS=4)" in result.stderr
        m = manifest(tmp_path / f"shard_{i}")
        assert m["state"] == "complete" and m["shard_idx"] == i and m["total_shards"] == 4
        recs = records(tmp_path / f"shard_{i}")
        lo, hi = m["benchmarks"][0]["range"]
        assert {r["problem_idx"] for r in recs} == set(range(lo, hi))
        assert all(r["status"] == "ok" and r["shard"] == i for r in recs)
        keys += [(r["problem_idx"], r["repeat"]) for r in recs]
        traj = (tmp_path / f"shard_{i}" / "arith" / "trajectories.jsonl").read_text().splitlines()
        assert len(traj) == len(recs)
        assert json.loads(traj[0])["messages"][0] == {"role": "system", "content": "You are careful."}
    assert sorted(keys) == [(p, r) for p in range(61) for r in range(2)]
    # scores are meaningful: the simulator answers correctly with probability 0.7
    scores = [r["score"] for i in range(4) for r in records(tmp_path / f"shard_{i}")]
    assert 0.5 < sum(scores) / len(scores) < 0.9


def test_one_shard_and_four_shards_give_identical_records(tmp_path, sim):
    cfg = write_config(tmp_path, sim, n=40, repeats=3)
    assert shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(tmp_path / "whole")).returncode == 0
    split = []
    for i in range(4):
        assert shardeval_cmd("run", str(cfg), "--shard", f"{i}/4", "-o", str(tmp_path / f"s{i}")).returncode == 0
        split += records(tmp_path / f"s{i}")

    def canon(recs: list[dict]) -> list[dict]:
        return sorted(({k: v for k, v in r.items() if k not in TIMING} for r in recs), key=lambda r: (r["problem_idx"], r["repeat"]))

    whole = canon(records(tmp_path / "whole"))
    assert whole == canon(split)
    assert len({r["seed"] for r in whole}) == len(whole)  # repeats get distinct seeds
    assert manifest(tmp_path / "whole")["config_hash"] == manifest(tmp_path / "s0")["config_hash"]


def wait_for_lines(path: Path, n: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= n:
            return
        time.sleep(0.02)
    raise AssertionError(f"{path} never reached {n} lines")


@pytest.mark.parametrize("kill_after", [5, 40, 110])
def test_sigkill_mid_run_then_rerun_loses_and_duplicates_nothing(tmp_path, kill_after):
    with running_sim("--bench", "arith", "--accuracy", "0.7", "--ttft-ms", "5", "--itl-ms", "1") as url:
        cfg = write_config(tmp_path, url, n=80, repeats=2)
        out = tmp_path / "shard_0"
        proc = subprocess.Popen(
            [sys.executable, "-m", "shardeval", "run", str(cfg), "--shard", "0/1", "-o", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_lines(out / "arith" / "results.jsonl", kill_after)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        partial = records(out)
        assert 0 < len(partial) < 160, "the kill must land mid-run"
        assert manifest(out)["state"] == "running"  # a killed shard cannot say goodbye
        result = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(out))
        assert result.returncode == 0, result.stderr
        assert "resuming" in result.stderr
    final = [r for r in records(out) if r["status"] == "ok"]
    keys = [(r["problem_idx"], r["repeat"]) for r in final]
    assert sorted(keys) == [(p, r) for p in range(80) for r in range(2)]  # no loss, no duplicate
    assert manifest(out)["state"] == "complete"
    assert manifest(out)["benchmarks"][0]["n_ok"] == 160


def test_resume_refuses_a_changed_config_and_fresh_sets_old_results_aside(tmp_path, sim):
    cfg = write_config(tmp_path, sim, n=10, repeats=1)
    out = tmp_path / "out"
    assert shardeval_cmd("run", str(cfg), "-o", str(out)).returncode == 0
    before = (out / "arith" / "results.jsonl").read_bytes()
    changed = shardeval_cmd("run", str(cfg), "-o", str(out), "-O", "benchmarks.0.repeats=2")
    assert changed.returncode == 2
    (error,) = [line for line in changed.stderr.splitlines() if line.startswith("shardeval: error:")]
    assert "cannot be resumed" in error and "--fresh" in error and "Traceback" not in changed.stderr
    assert (out / "arith" / "results.jsonl").read_bytes() == before  # nothing touched
    fresh = shardeval_cmd("run", str(cfg), "-o", str(out), "-O", "benchmarks.0.repeats=2", "--fresh")
    assert fresh.returncode == 0, fresh.stderr
    (old,) = (out / "superseded").iterdir()
    assert (old / "arith" / "results.jsonl").read_bytes() == before
    assert len(records(out)) == 20


def test_rerun_of_a_complete_shard_asks_nothing_again(tmp_path, sim):
    cfg = write_config(tmp_path, sim, n=12, repeats=1)
    out = tmp_path / "out"
    assert shardeval_cmd("run", str(cfg), "-o", str(out)).returncode == 0
    before = (out / "arith" / "results.jsonl").read_bytes()
    again = shardeval_cmd("run", str(cfg), "-o", str(out))
    assert again.returncode == 0
    assert (out / "arith" / "results.jsonl").read_bytes() == before


def test_errors_are_recorded_not_scored_and_retried_on_rerun(tmp_path):
    with running_sim("--fail-5xx", "1.0") as url:
        cfg = write_config(tmp_path, url, n=6, repeats=1)
        out = tmp_path / "out"
        result = shardeval_cmd("run", str(cfg), "-o", str(out))
        assert result.returncode == 3, result.stderr  # every pair an error: finished with errors, not complete
        recs = records(out)
        assert len(recs) == 6
        assert all(r["status"] == "error" and r["error_kind"] == "server_error" for r in recs)
        assert all(r["score"] is None and r["attempts"] == 3 for r in recs)
        assert manifest(out)["benchmarks"][0]["n_error"] == 6
        assert manifest(out)["state"] == "finished_with_errors"
    with running_sim("--bench", "arith", "--accuracy", "1.0") as url:
        cfg = write_config(tmp_path, url, n=6, repeats=1)  # same config hash: the URL is not part of it
        assert shardeval_cmd("run", str(cfg), "-o", str(out)).returncode == 0
    recs = records(out)
    assert [r["status"] for r in recs] == ["error"] * 6 + ["ok"] * 6  # history kept, errors retried
    assert all(r["score"] == 1.0 for r in recs[6:])
    assert manifest(out)["benchmarks"][0]["n_ok"] == 6


def test_sigterm_stops_cleanly_and_marks_interrupted(tmp_path):
    with running_sim("--ttft-ms", "200", "--itl-ms", "5") as url:
        cfg = write_config(tmp_path, url, n=400, repeats=1, output={"drain_timeout_s": 5})
        out = tmp_path / "out"
        proc = subprocess.Popen(
            [sys.executable, "-m", "shardeval", "run", str(cfg), "-o", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_for_lines(out / "arith" / "results.jsonl", 20)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    m = manifest(out)
    assert m["state"] == "interrupted" and m["reason"] == "SIGTERM"
    recs = records(out)
    assert 20 <= len(recs) < 400
    assert len({(r["problem_idx"], r["repeat"]) for r in recs}) == len(recs)
    assert m["benchmarks"][0]["n_ok"] == len(recs)


def test_quick_mode_against_a_running_endpoint(tmp_path, sim):
    out = tmp_path / "quick"
    result = shardeval_cmd(
        "run",
        "--bench",
        "arith",
        "--model-url",
        sim + "/chat/completions",
        "--model-id",
        "sim",
        "--max-problems",
        "8",
        "-n",
        "2",
        "-o",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    recs = records(out)
    assert len(recs) == 16 and {r["problem_idx"] for r in recs} == set(range(8))
    assert "8/16 ok" not in result.stderr and "16/16 ok" in result.stderr


def test_sigint_stops_cleanly_with_exit_130(tmp_path):
    with running_sim("--ttft-ms", "200", "--itl-ms", "5") as url:
        cfg = write_config(tmp_path, url, n=400, repeats=1)
        out = tmp_path / "out"
        proc = subprocess.Popen(
            [sys.executable, "-m", "shardeval", "run", str(cfg), "-o", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_for_lines(out / "arith" / "results.jsonl", 10)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "Traceback" not in err
    assert manifest(out)["state"] == "interrupted" and manifest(out)["reason"] == "SIGINT"


def test_resume_over_a_torn_last_line(tmp_path, sim):
    cfg = write_config(tmp_path, sim, n=10, repeats=1)
    out = tmp_path / "out"
    assert shardeval_cmd("run", str(cfg), "-o", str(out)).returncode == 0
    results = out / "arith" / "results.jsonl"
    lines = results.read_bytes().splitlines(keepends=True)
    torn = b"".join(lines[:7]) + lines[7][:25]  # a crash cut the 8th write short
    results.write_bytes(torn)
    again = shardeval_cmd("run", str(cfg), "-o", str(out))
    assert again.returncode == 0, again.stderr
    assert "cut off" in again.stderr
    data = results.read_bytes()
    assert data.startswith(torn)  # the fragment is kept, sealed, never rewritten
    recs = records_tolerant(results)
    assert sorted(r["problem_idx"] for r in recs) == list(range(10))


def records_tolerant(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return out


def test_progress_plain_lines_in_batch_logs_and_a_live_line_on_a_terminal(tmp_path):
    import pty

    with running_sim("--ttft-ms", "30", "--itl-ms", "1") as url:
        cfg = write_config(tmp_path, url, n=150, repeats=1)
        batch = shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "batch"), "-O", "benchmarks.0.max_concurrent=4")
        assert batch.returncode == 0
        assert any(line.startswith("shardeval: shard 0/1 arith: ") and "req/s" in line for line in batch.stderr.splitlines())
        assert "\r" not in batch.stderr
        primary, secondary = pty.openpty()
        proc = subprocess.Popen(
            [sys.executable, "-m", "shardeval", "run", str(cfg), "-o", str(tmp_path / "tty"), "-O", "benchmarks.0.max_concurrent=4"],
            stdin=subprocess.DEVNULL,
            stdout=secondary,
            stderr=secondary,
        )
        os.close(secondary)
        chunks = []
        while True:
            try:
                data = os.read(primary, 4096)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        assert proc.wait(30) == 0
        os.close(primary)
    screen = b"".join(chunks).decode(errors="replace")
    assert "\r" in screen and "150/150 (100.0%)" in screen
