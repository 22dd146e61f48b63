"""Files read from directories others can write are read only when they are regular files, and
never waited on (H14): a FIFO, a device or a directory named like a cache segment, a shard's
results.jsonl or manifest.json, a heartbeat, a sweep_plan.json or a benchmark's data file is
skipped or refused in one line, and a stop signal is acted on while the cache is being read.
Real shard, merge and simulator processes; every wait is bounded."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import api_eval_config, running_sim, shardeval_cmd

HANG = 60  # s: a command that takes this long is waiting on something it should never wait on


def cache_config(tmp: Path, url: str, cache: Path, **output) -> Path:
    path = api_eval_config(tmp / "config.yaml", url, n=6, output=output)
    path.write_text(json.dumps({**json.loads(path.read_text()), "cache": {"dir": str(cache)}}))
    return path


def plant(where: Path, kind: str) -> None:
    """Put something that is not a regular file at `where`."""
    where.parent.mkdir(parents=True, exist_ok=True)
    if where.exists() or where.is_symlink():
        where.unlink()
    if kind == "fifo":
        os.mkfifo(where)
    elif kind == "dir":
        where.mkdir()
    elif kind == "dev_zero":  # endless: read to its end, it fills the memory
        where.symlink_to("/dev/zero")
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["fifo", "dir", "dev_zero"])
def test_a_cache_segment_that_is_not_a_regular_file_is_skipped_not_waited_on(tmp_path, kind):
    """A FIFO in segments/ hung every shard forever (open() waited for a writer)."""
    cache = tmp_path / "cache"
    plant(cache / "segments" / f"planted-{kind}.jsonl", kind)
    with running_sim("--bench", "arith", "--ttft-ms", "1", "--itl-ms", "0") as url:
        result = shardeval_cmd("run", str(cache_config(tmp_path, url, cache)), "--shard", "0/1", "-o", str(tmp_path / "out"), timeout=HANG)
    assert result.returncode == 0, result.stderr
    assert f"cache: segment {cache / 'segments' / f'planted-{kind}.jsonl'} skipped: is a" in result.stderr
    assert "not a regular file" in result.stderr
    assert "cache: 0 hit(s), 6 miss(es), 6 entr(ies) written" in result.stderr
    planted = cache / "segments" / f"planted-{kind}.jsonl"
    assert planted.is_symlink() if kind == "dev_zero" else (planted.is_fifo() if kind == "fifo" else planted.is_dir())


SLOW_INDEX = """
import os, sys, time
import shardeval.run.response_cache as cache
real = cache.ResponseCache._index_segment
def slow(self, path, *args):  # a cache on a slow file system: each segment takes a while to read
    open(os.environ["INDEXING_MARK"], "a").close()
    time.sleep(0.3)
    return real(self, path, *args)
cache.ResponseCache._index_segment = slow
from shardeval.cli import main
sys.argv[0] = "shardeval"
main()
"""


def test_a_stop_signal_while_the_cache_is_read_stops_the_shard_within_the_drain_deadline(tmp_path):
    """Reading the cache ran in the event loop, so a SIGTERM waited until every segment was read
    (here 200 x 0.3 s = 60 s); drain_timeout_s holds in this phase too."""
    cache = tmp_path / "cache"
    (cache / "segments").mkdir(parents=True)
    for i in range(200):
        (cache / "segments" / f"old-{i:03d}.jsonl").write_bytes(b"")
    mark = tmp_path / "indexing"
    cfg = cache_config(tmp_path, "http://127.0.0.1:9/v1", cache, drain_timeout_s=3)
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_INDEX, "run", str(cfg), "--shard", "0/1", "-o", str(tmp_path / "out")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "INDEXING_MARK": str(mark)},
    )
    try:
        deadline = time.monotonic() + 30
        while not mark.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert mark.exists(), "the shard never started reading the cache"
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=HANG)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err
    assert took < 3 + 2, f"stopped {took:.1f} s after SIGTERM (drain_timeout_s 3)"
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["state"] == "interrupted" and manifest["reason"] == "SIGTERM"
    assert sorted(p.name for p in (cache / "segments").iterdir()) == [f"old-{i:03d}.jsonl" for i in range(200)]  # none of ours


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """One finished shard (arith), copied by each test that spoils it."""
    root = tmp_path_factory.mktemp("run")
    with running_sim("--bench", "arith", "--ttft-ms", "1", "--itl-ms", "0") as url:
        cfg = api_eval_config(root / "config.yaml", url, n=4)
        result = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(root / "run" / "shard_0"))
    assert result.returncode == 0, result.stderr
    return root / "run"


@pytest.mark.parametrize(
    "name,kind",
    [
        ("arith/results.jsonl", "fifo"),
        ("arith/trajectories.jsonl", "fifo"),
        ("manifest.json", "fifo"),
        ("manifest.json", "dev_zero"),
        ("arith/results.jsonl", "dev_zero"),
    ],
)
def test_merge_refuses_a_shard_file_that_is_not_a_regular_file_in_one_line(tmp_path, finished_run, name, kind):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    plant(run / "shard_0" / name, kind)
    result = shardeval_cmd("merge", str(run), timeout=HANG)  # merge reads trajectories too: merged/ holds them
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(run / "shard_0" / name) in lines[0] and "not a regular file" in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_a_heartbeat_or_a_sweep_plan_that_is_a_fifo_is_no_evidence_not_a_hang(tmp_path, finished_run):
    """status and merge read a running shard's heartbeat and a sweep root's sweep_plan.json."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    manifest = json.loads((run / "shard_0" / "manifest.json").read_text())
    (run / "shard_0" / "manifest.json").write_text(json.dumps({**manifest, "state": "running"}))
    plant(run / "shard_0" / "heartbeat.json", "fifo")
    plant(run / "sweep_plan.json", "fifo")
    status = shardeval_cmd("status", str(run), timeout=HANG)
    assert status.returncode == 0, status.stderr
    # no heartbeat to read is no evidence that the writer is gone: the shard still reads as running
    assert any(line.split()[:2] == ["0", "running"] for line in status.stdout.splitlines()), status.stdout
    merged = shardeval_cmd("merge", str(run), timeout=HANG)  # an ordinary run: the plan file is no plan
    assert merged.returncode == 3 and "PARTIAL" in merged.stderr, merged.stderr  # a running shard: partial, written (H2)
    assert json.loads((run / "merged" / "scores.json").read_text())["arith"]["n_ok"] == 4


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_a_benchmark_data_file_that_is_not_a_regular_file_is_one_line_exit_2(tmp_path, kind):
    data = tmp_path / "qa.jsonl"
    plant(data, kind)
    spec = tmp_path / "qa.yaml"
    spec.write_text("name: qa\ndata: qa.jsonl\nscorer: exact\n")
    cfg = api_eval_config(tmp_path / "config.yaml", "http://127.0.0.1:9/v1", bench=str(spec), benchmark={"params": {}})
    result = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(tmp_path / "out"), timeout=HANG)
    assert result.returncode == 2, result.stderr
    what = "is a FIFO (named pipe), not a data file" if kind == "fifo" else "is a character device, not a data file"
    assert what in result.stderr and "qa.jsonl" in result.stderr and "Traceback" not in result.stderr


def quick_shard(url: str, out: Path) -> subprocess.CompletedProcess[str]:
    return shardeval_cmd(
        "run",
        "--bench",
        "arith",
        "--model-url",
        url,
        "--model-id",
        "sim",
        "-o",
        str(out),
        "--max-problems",
        "3",
        "--no-cache",
        timeout=HANG,
    )


def test_a_shard_log_that_is_a_fifo_nobody_reads_is_one_line_not_a_hang(tmp_path):
    """The files a shard appends to open without waiting: a FIFO at logs/shard.log hung the shard
    forever in open(), deaf to SIGTERM, holding shard.lock (the timeout here was the only way out).
    Variants: a FIFO that a process reads gets the log; a link to /dev/null takes it."""
    with running_sim("--bench", "arith", "--accuracy", "1.0", "--ttft-ms", "0", "--itl-ms", "0") as url:
        plant(tmp_path / "fifo" / "logs" / "shard.log", "fifo")
        started = time.monotonic()
        done = quick_shard(url, tmp_path / "fifo")
        assert time.monotonic() - started < 20
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        line = done.stderr.strip().splitlines()[-1]
        assert "shard.log" in line and "FIFO" in line and "no process is reading" in line
        assert (tmp_path / "fifo" / "logs" / "shard.log").is_fifo()  # left as it was

        read = tmp_path / "read" / "logs" / "shard.log"
        plant(read, "fifo")
        fd = os.open(read, os.O_RDONLY | os.O_NONBLOCK)  # a reader holds it open (a small log fits the pipe's buffer)
        try:
            done = quick_shard(url, tmp_path / "read")
            got = os.read(fd, 1 << 16)
        finally:
            os.close(fd)
        assert done.returncode == 0, done.stderr
        assert b"3/3 ok" in got and read.is_fifo()

        null = tmp_path / "null" / "logs" / "shard.log"
        null.parent.mkdir(parents=True)
        null.symlink_to("/dev/null")
        done = quick_shard(url, tmp_path / "null")
        assert done.returncode == 0, done.stderr
        assert null.is_symlink() and Path("/dev/null").is_char_device()
