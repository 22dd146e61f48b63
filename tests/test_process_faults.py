"""Process faults: SIGKILL at random points, SIGTERM, and a disk that fills up while writing.

Each trial is a real `shardeval run` subprocess against a real simulator on 127.0.0.1; every one is
bounded (tens of requests, subprocess timeouts) and stops by itself.
"""

from __future__ import annotations

import json
import random
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import api_eval_config, running_sim, shardeval_cmd
from shardeval.store.records import ReadReport, ResultRecord, TrajectoryRecord, read_jsonl

N, REPEATS = 40, 2
TIMING = {"ttft_s", "latency_s", "started_at", "shard", "attempts"}
SIM = ("--bench", "arith", "--accuracy", "0.7", "--ttft-ms", "15", "--itl-ms", "1", "--output-tokens", "12")


def write_config(tmp: Path, url: str, n: int = N, concurrency: int = 8) -> Path:
    return api_eval_config(
        tmp / "config.yaml",
        url,
        n=n,
        repeats=REPEATS,
        concurrency=concurrency,
        service={"retries": {"attempts": 3, "backoff_base": 0.05, "backoff_max": 0.2}},
        benchmark={"solver": {"generation": {"temperature": 0.7, "max_tokens": 64}}},
        output={"progress_interval_s": 5, "drain_timeout_s": 5},
    )


def records(shard_dir: Path) -> list[dict]:
    out = []
    for line in (shard_dir / "arith" / "results.jsonl").read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a torn line left by a kill: skipped, as the reader does
            pass
    return out


def canonical(recs: list[dict]) -> list[dict]:
    ok = [{k: v for k, v in r.items() if k not in TIMING} for r in recs if r["status"] == "ok"]
    return sorted(ok, key=lambda r: (r["problem_idx"], r["repeat"]))


def merge(root: Path) -> bytes:
    result = shardeval_cmd("merge", str(root), timeout=60)
    assert result.returncode == 0, result.stderr
    return (root / "merged" / "scores.json").read_bytes()


def line_count(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


@pytest.fixture(scope="module")
def sim_url() -> str:
    with running_sim(*SIM) as url:
        yield url


@pytest.fixture(scope="module")
def reference(sim_url: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], bytes]:
    """An uninterrupted run: its ok records (without timing) and its merged scores.json bytes."""
    root = tmp_path_factory.mktemp("reference")
    cfg = write_config(root, sim_url)
    result = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(root / "run" / "shard_0"))
    assert result.returncode == 0, result.stderr
    return canonical(records(root / "run" / "shard_0")), merge(root / "run")


@pytest.mark.parametrize("seed", range(20))
def test_sigkill_at_a_random_point_then_rerun_gives_identical_scores(tmp_path, sim_url, reference, seed):
    """Kill after a seeded random number of records (0 = during start-up), rerun, merge: the merged
    scores.json is byte-identical to an uninterrupted run's, with no duplicate and no loss."""
    rng = random.Random(seed)
    total = N * REPEATS
    kill_after = rng.choice([0, rng.randrange(1, total)])
    cfg = write_config(tmp_path, sim_url)
    out = tmp_path / "run" / "shard_0"
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardeval", "run", str(cfg), "--shard", "0/1", "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    results = out / "arith" / "results.jsonl"
    if kill_after == 0:
        time.sleep(rng.uniform(0.05, 0.8))  # somewhere in start-up: imports, manifest, first requests
    else:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None and line_count(results) < kill_after:
            time.sleep(0.003)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    rerun = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(out))
    assert rerun.returncode == 0, rerun.stderr
    recs = records(out)
    keys = [(r["problem_idx"], r["repeat"]) for r in recs if r["status"] == "ok"]
    assert len(keys) == len(set(keys)) == total, "duplicate or lost records"
    assert canonical(recs) == reference[0]
    assert merge(tmp_path / "run") == reference[1]
    assert json.loads((out / "manifest.json").read_text())["state"] == "complete"


def test_sigterm_then_rerun_completes_with_identical_scores(tmp_path, reference):
    """SIGTERM: a clean stop (exit 143, `interrupted`, nothing torn), and the rerun finishes the job."""
    with running_sim("--bench", "arith", "--accuracy", "0.7", "--ttft-ms", "150", "--itl-ms", "1", "--output-tokens", "12") as url:
        cfg = write_config(tmp_path, url)
        out = tmp_path / "run" / "shard_0"
        proc = subprocess.Popen(
            [sys.executable, "-m", "shardeval", "run", str(cfg), "--shard", "0/1", "-o", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and line_count(out / "arith" / "results.jsonl") < 10:
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 143 and "Traceback" not in err, err
        m = json.loads((out / "manifest.json").read_text())
        assert m["state"] == "interrupted" and m["reason"] == "SIGTERM"
        report = ReadReport(str(out / "arith" / "results.jsonl"))
        partial = list(read_jsonl(report.path, ResultRecord, report))
        assert not report.torn_tail and not report.bad_lines and 10 <= len(partial) < N * REPEATS
        rerun = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(out))
        assert rerun.returncode == 0, rerun.stderr
    assert canonical(records(out)) == reference[0]
    assert merge(tmp_path / "run") == reference[1]


# --- a disk that fills up ------------------------------------------------------------------------


def check_write_failure(result: subprocess.CompletedProcess[str], out: Path, needle: str) -> int:
    """The shard stopped with one clear line, exit 1, manifest failed with the reason, and what it
    wrote before is readable without a single bad line. Returns how many records survived."""
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if needle in line]
    assert len(errors) == 1 and errors[0].startswith("shardeval: shard 0/1 failed: cannot write records"), result.stderr
    assert "rerun" in errors[0], errors[0]
    m = json.loads((out / "manifest.json").read_text())
    assert m["state"] == "failed" and needle in m["reason"], m
    n = 0
    for kind, name in ((ResultRecord, "results.jsonl"), (TrajectoryRecord, "trajectories.jsonl")):
        report = ReadReport(str(out / "arith" / name))
        got = list(read_jsonl(report.path, kind, report))
        assert not report.torn_tail and not report.bad_lines, report.describe()
        if kind is ResultRecord:
            n = len(got)
            assert len({(r.problem_idx, r.repeat) for r in got}) == n
    assert n > 0, "the disk filled up before the first record: the test proves nothing"
    return n


def test_disk_full_on_a_real_tmpfs_stops_with_a_clear_error(tmp_path, sim_url, reference):
    mnt = tmp_path / "small"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.decode().strip()}); the RLIMIT_FSIZE test covers it")
    try:
        cfg = write_config(tmp_path, sim_url, n=400)
        out = mnt / "shard_0"
        result = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(out))
        n = check_write_failure(result, out, "No space left on device")
        assert n < 400 * REPEATS
        # the same directory, moved to a roomy disk, resumes: space freed, shard rerun
        roomy = tmp_path / "roomy" / "shard_0"
        roomy.parent.mkdir()
        subprocess.run(["cp", "-a", str(out), str(roomy)], check=True)
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
    again = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(roomy))
    assert again.returncode == 0, again.stderr
    assert len({(r["problem_idx"], r["repeat"]) for r in records(roomy) if r["status"] == "ok"}) == 400 * REPEATS


def _limit_file_size() -> None:
    """In the child: files may not grow past 48 KiB; writes beyond fail with EFBIG, not a signal."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (48 * 1024, 48 * 1024))


def test_write_error_injected_with_a_file_size_limit_stops_with_a_clear_error(tmp_path, sim_url):
    """Unprivileged twin of the tmpfs test: RLIMIT_FSIZE makes the kernel refuse writes (EFBIG)."""
    cfg = write_config(tmp_path, sim_url, n=400)
    out = tmp_path / "shard_0"
    result = subprocess.run(
        [sys.executable, "-m", "shardeval", "run", str(cfg), "--shard", "0/1", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit_file_size,
    )
    check_write_failure(result, out, "File too large")
    again = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(out))  # no limit now: resumes
    assert again.returncode == 0, again.stderr
    assert len({(r["problem_idx"], r["repeat"]) for r in records(out) if r["status"] == "ok"}) == 400 * REPEATS
