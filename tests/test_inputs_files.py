"""Hardening, round two: what a careless user or a broken file system can do.

Bad lines in a shard's record files, results copied in from another run or shard, a read-only
output directory, a disk that is still full on the rerun, a merge that cannot write, data files
that are not UTF-8. Every test runs the real `shardeval` CLI in a subprocess against a real
simulator on 127.0.0.1, on real files: a real tmpfs filled to the brim, a real read-only bind
mount (in a private mount namespace). The answer is always one line and the right exit code,
never a traceback, and no `.tmp` file is left behind.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from conftest import running_sim, shardeval_cmd
from shardeval.store.records import ResultRecord, read_jsonl

N = 12
SIM = ("--bench", "arith", "--accuracy", "0.7", "--ttft-ms", "1", "--itl-ms", "0")


@pytest.fixture(scope="module")
def sim_url():
    with running_sim(*SIM) as url:
        yield url


def write_config(path: Path, url: str, n: int = N, seed: int = 0) -> Path:
    path.write_text(
        f"""
services:
  model: {{type: api, url: {url}, model: sim, retries: {{attempts: 2, backoff_base: 0.01, backoff_max: 0.05}}}}
benchmarks:
  - name: arith
    params: {{n: {n}}}
    max_concurrent: 4
seed: {seed}
output: {{progress_interval_s: 30, drain_timeout_s: 2}}
"""
    )
    return path


def run_shard(cfg: Path, out: Path, shard: str = "0/1", wrap: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "shardeval", "run", str(cfg), "--shard", shard, "-o", str(out)]
    return subprocess.run((wrap or []) + argv, capture_output=True, text=True, timeout=120)


def no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr and "Logging error" not in result.stderr, result.stderr


def one_error_line(result: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    """The command failed with `code` and said why in exactly one line (no traceback)."""
    no_traceback(result)
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = [l for l in result.stderr.splitlines() if "error" in l or "failed" in l]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def tmp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.endswith(".tmp")]


def ok_cells(shard_dir: Path) -> set[tuple[int, int]]:
    path = str(shard_dir / "arith" / "results.jsonl")
    return {(r.problem_idx, r.repeat) for r in read_jsonl(path, ResultRecord) if r.status == "ok"} & {(p, 0) for p in range(N)}


@pytest.fixture(scope="module")
def finished_shard(tmp_path_factory, sim_url) -> tuple[Path, Path]:
    """A complete one-shard run of N problems: (config, shard directory), copied by each test."""
    root = tmp_path_factory.mktemp("finished")
    cfg = write_config(root / "config.yaml", sim_url)
    out = root / "run" / "shard_0"
    result = run_shard(cfg, out)
    assert result.returncode == 0, result.stderr
    assert len(ok_cells(out)) == N
    return cfg, out


def copy_run(finished_shard, tmp_path: Path) -> tuple[Path, Path]:
    cfg, out = finished_shard
    run = tmp_path / "run"
    shutil.copytree(out.parent, run)
    return cfg, run / "shard_0"


# --- every kind of bad line: resume, merge and status go on and report -----------------------------


def _template(lines: list[bytes], **change) -> bytes:
    """A real record line of this run with some fields changed (kept bytes: invalid JSON allowed)."""
    rec = json.loads(lines[0])
    rec.update(change)
    return json.dumps(rec).encode() + b"\n"


BAD_LINES = {
    # invalid UTF-8 inside an otherwise well-formed record of a cell the rerun must fill
    "invalid_utf8": lambda t: [t[0].replace(b'"response":"', b'"response":"\xff\xfe\xc3(')],
    "not_json": lambda t: [b"this is not json\n", b'{"benchmark": "arith", \n'],
    "json_of_another_type": lambda t: [b"[1, 2, 3]\n", b"42\n", b"null\n", b'"a string"\n', b"true\n"],
    "wrong_shape": lambda t: [b'{"foo": 1}\n', b"{}\n", _template(t, seed=None)],
    "a_field_of_the_wrong_type": lambda t: [
        _template(t, response=5),
        _template(t, problem_idx="3"),
        _template(t, scores={"x": "high"}),
    ],
    "wild_values": lambda t: [
        _template(t, completion_tokens=2**40),
        _template(t, status="maybe"),
        _template(t, problem_idx=2**70),
        _template(t, repeat=-1),
        _template(t, score=1e999),
    ],
    "nul_block": lambda t: [b"\0" * 8192 + b"\n", b"\0" * 300 + t[0]],
    "huge_line": lambda t: [b'{"benchmark": "arith", "response": "' + b"x" * (16 << 20) + b'"}\n'],
}


@pytest.mark.parametrize("kind", sorted(BAD_LINES))
def test_every_kind_of_bad_line_is_skipped_and_reported_by_resume_merge_and_status(finished_shard, tmp_path, kind):
    """Half the cells are lost, then bad lines that look like them are appended to results.jsonl
    and trajectories.jsonl: the rerun asks exactly the lost cells again and warns; merge and
    status count the same cells, report the skipped lines, and the merged files hold only valid
    records."""
    cfg, out = copy_run(finished_shard, tmp_path)
    results, trajectories = out / "arith" / "results.jsonl", out / "arith" / "trajectories.jsonl"
    kept = results.read_bytes().splitlines(keepends=True)
    lost = kept[N // 2 :]  # their cells are missing now; the bad lines are built from them
    results.write_bytes(b"".join(kept[: N // 2]))
    bad = b"".join(BAD_LINES[kind](lost))
    for path in (results, trajectories):
        with open(path, "ab") as f:
            f.write(bad)

    rerun = run_shard(cfg, out)
    no_traceback(rerun)
    assert rerun.returncode == 0, rerun.stderr
    warned = [l for l in rerun.stderr.splitlines() if "results.jsonl" in l and "skipped" in l]
    assert len(warned) == 1, rerun.stderr
    assert len(ok_cells(out)) == N

    merged = shardeval_cmd("merge", str(out.parent))
    no_traceback(merged)
    assert merged.returncode == 0, merged.stderr
    assert "unreadable line(s)" in merged.stdout or "refused" in merged.stdout, merged.stdout
    scores = json.loads((out.parent / "merged" / "scores.json").read_text())["arith"]
    assert (scores["n_ok"], scores["n_missing"]) == (N, 0), scores
    for name, kind_ in (("results.jsonl", ResultRecord), ("trajectories.jsonl", None)):
        lines = (out.parent / "merged" / "arith" / name).read_bytes().splitlines()
        assert len(lines) == N
        for line in lines:  # every merged line is a valid record of this run
            (msgspec.json.decode(line, type=kind_) if kind_ else json.loads(line))

    status = shardeval_cmd("status", str(out.parent))
    no_traceback(status)
    assert status.returncode == 0, status.stderr
    assert f"{N}/{N}" in status.stdout and "warning: shard_0/arith/results.jsonl" in status.stdout, status.stdout


# --- records of another run or shard: refused, counted, said loudly -----------------------------


def _strip_run(path: Path) -> None:
    """Make the records look written by a shardeval from before the `run` field."""
    lines = [json.loads(l) for l in path.read_bytes().splitlines()]
    path.write_bytes(b"".join(json.dumps({k: v for k, v in r.items() if k != "run"}).encode() + b"\n" for r in lines))


@pytest.mark.parametrize("source", ["another_run", "another_run_before_the_run_field", "another_shard"])
def test_results_copied_in_from_elsewhere_are_refused_by_resume_merge_and_status(tmp_path, sim_url, source):
    """Shard 0 of a 2-shard run gets a results.jsonl from another run (another seed; with and
    without the `run` field) or from shard 1: status never shows more done than expected, merge
    refuses those records and lists the file, and the rerun asks the shard's own cells again."""
    cfg = write_config(tmp_path / "a.yaml", sim_url, n=10)
    run = tmp_path / "run"
    for i in (0, 1):
        assert run_shard(cfg, run / f"shard_{i}", f"{i}/2").returncode == 0
    if source == "another_shard":
        donor = run / "shard_1" / "arith" / "results.jsonl"
    else:
        other = write_config(tmp_path / "b.yaml", sim_url, n=10, seed=7)
        assert run_shard(other, tmp_path / "other" / "shard_0").returncode == 0
        donor = tmp_path / "other" / "shard_0" / "arith" / "results.jsonl"
        if source == "another_run_before_the_run_field":
            _strip_run(donor)
            _strip_run(run / "shard_0" / "arith" / "results.jsonl")  # its own old records still count
    target = run / "shard_0" / "arith" / "results.jsonl"
    own = target.read_bytes()
    target.write_bytes(donor.read_bytes())  # copied over the shard's own file
    n_foreign = len(donor.read_bytes().splitlines())

    status = shardeval_cmd("status", str(run))
    no_traceback(status)
    assert status.returncode == 0, status.stderr
    assert "0/5" in status.stdout and "total: 5/10" in status.stdout, status.stdout
    assert f"{n_foreign} record(s) that are not this shard's own" in status.stdout, status.stdout

    merged = shardeval_cmd("merge", str(run))
    no_traceback(merged)
    assert merged.returncode == 3, merged.stderr  # written, but PARTIAL: the refused records' cells are missing
    scores = json.loads((run / "merged" / "scores.json").read_text())["arith"]
    assert (scores["n_records"], scores["n_missing"], scores["n_refused"]) == (5, 5, n_foreign), scores
    refused = [l for l in merged.stdout.splitlines() if f"refused {n_foreign} record(s)" in l]
    assert "PARTIAL" in merged.stdout and len(refused) == 1 and "shard_0/arith/results.jsonl: " in refused[0], merged.stdout
    assert [l for l in merged.stderr.splitlines() if l.startswith("shardeval: warning: shard_0/arith/results.jsonl")]

    rerun = run_shard(cfg, run / "shard_0", "0/2")
    no_traceback(rerun)
    assert rerun.returncode == 0, rerun.stderr
    assert [l for l in rerun.stderr.splitlines() if f"{n_foreign} record(s) that are not this shard's own" in l]
    assert "5/5 ok" in rerun.stderr, rerun.stderr  # asked again, not taken from the copied file
    merged = shardeval_cmd("merge", str(run))
    scores = json.loads((run / "merged" / "scores.json").read_text())["arith"]
    assert (scores["n_ok"], scores["n_missing"]) == (10, 0) and "COMPLETE" in merged.stdout, merged.stdout
    if source == "another_run_before_the_run_field":
        target.write_bytes(own)  # the shard's own records without the field: still its own
        status = shardeval_cmd("status", str(run))
        assert "5/5" in status.stdout and "warning" not in status.stdout, status.stdout


# --- output that cannot be written: one line, the right exit code, no debris ----------------------


def needs_mounts() -> None:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare for real tmpfs and read-only bind mounts")


def read_only(paths: list[Path]) -> list[str]:
    """A prefix for argv: run it in a private mount namespace where each path is a read-only bind mount."""
    binds = " && ".join(f"mount --bind {p} {p} && mount -o remount,bind,ro {p}" for p in paths)
    return ["unshare", "-m", "sh", "-c", f'mount --make-rprivate / && {binds} && exec "$@"', "sh"]


def fill(mnt: Path) -> None:
    """Fill a tmpfs to the last byte."""
    fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (1 << 16, 4096, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError:
                    break
    finally:
        os.close(fd)


@pytest.fixture
def small_tmpfs(tmp_path):
    needs_mounts()
    mnt = tmp_path / "small"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.mark.parametrize("state", ["new", "resumed"])
def test_a_read_only_output_directory_is_one_line_and_exit_2(finished_shard, tmp_path, state):
    needs_mounts()
    cfg, out = copy_run(finished_shard, tmp_path)
    if state == "new":
        shutil.rmtree(out)
    before = {p: p.read_bytes() for p in out.parent.rglob("*") if p.is_file()}
    result = run_shard(cfg, out, wrap=read_only([out.parent]))
    line = one_error_line(result, 2, "Read-only file system (EROFS)", str(out))
    assert line.startswith("shardeval: error: cannot write") and "writable" in line, line
    assert {p: p.read_bytes() for p in out.parent.rglob("*") if p.is_file()} == before


def test_a_rerun_while_the_disk_is_still_full_is_one_line_and_leaves_no_tmp(small_tmpfs, sim_url, tmp_path):
    cfg = write_config(tmp_path / "config.yaml", sim_url)
    out = small_tmpfs / "shard_0"
    shutil.rmtree(out, ignore_errors=True)
    first = run_shard(cfg, out)
    assert first.returncode == 0, first.stderr
    fill(small_tmpfs)  # a complete shard run again has nothing to write: the full disk does not matter
    complete = subprocess.run(
        [sys.executable, "-m", "shardeval", "run", str(cfg), "--shard", "0/1", "-o", str(out)], capture_output=True, text=True, timeout=120
    )
    assert complete.returncode == 0 and "nothing to ask" in complete.stderr and tmp_files(small_tmpfs) == [], complete.stderr
    os.unlink(small_tmpfs / "filler")
    path = out / "arith" / "results.jsonl"
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:-2]))  # two pairs left: a rerun must write
    results = path.read_bytes()
    fill(small_tmpfs)
    for fresh in ([], ["--fresh"]):
        again = subprocess.run(
            [sys.executable, "-m", "shardeval", "run", str(cfg), "--shard", "0/1", "-o", str(out), *fresh],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if again.returncode == 0 and fresh:  # --fresh only renames: it may fit; then it must have worked
            continue
        one_error_line(again, 1, "No space left on device (ENOSPC)", "free space")
        assert tmp_files(small_tmpfs) == []
    kept = [p.read_bytes() for p in out.rglob("results.jsonl")]  # in place, or set aside by --fresh
    assert kept == [results], kept
    os.unlink(small_tmpfs / "filler")
    done = run_shard(cfg, out)
    assert done.returncode == 0, done.stderr


def test_merge_on_a_full_disk_is_one_line_exit_1_and_leaves_no_tmp(finished_shard, small_tmpfs):
    cfg, out = finished_shard
    shutil.copytree(out.parent, small_tmpfs / "run")
    fill(small_tmpfs)
    result = shardeval_cmd("merge", str(small_tmpfs / "run"))
    one_error_line(result, 1, "No space left on device (ENOSPC)", "merged", "-o DIR")
    assert tmp_files(small_tmpfs) == []


def test_merge_of_a_read_only_run_directory_is_one_line_exit_2_and_minus_o_works(finished_shard, tmp_path):
    needs_mounts()
    cfg, out = copy_run(finished_shard, tmp_path)
    run = out.parent
    argv = [sys.executable, "-m", "shardeval", "merge", str(run)]
    result = subprocess.run(read_only([run]) + argv, capture_output=True, text=True, timeout=60)
    one_error_line(result, 2, "Read-only file system (EROFS)", str(run / "merged"))
    assert not (run / "merged").exists() and tmp_files(run) == []
    elsewhere = tmp_path / "elsewhere"
    result = subprocess.run(read_only([run]) + argv + ["-o", str(elsewhere), "-q"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads((elsewhere / "scores.json").read_text())["arith"]["n_ok"] == N


# --- data files that are not UTF-8 or cannot be read through --------------------------------------

DATA = {
    "bad.jsonl": b'{"question": "1+1", "answer": "2"}\n{"question": "caf\xe9", "answer": "3"}\n',
    "bad.json": b'[{"question": "caf\xe9", "answer": "3"}]',
    "bad2.json": b'{"question": "caf\xe9", "answer": "3"}\n{"question": "1+1", "answer": "2"}\n',
    "bad.csv": b"question,answer\n1+1,2\ncaf\xe9,3\n",
    "cut.jsonl.gz": None,  # a gzip file cut off mid-stream
}


@pytest.mark.parametrize("name", sorted(DATA))
def test_a_data_file_that_is_not_utf8_or_is_cut_off_is_one_line_exit_2(tmp_path, name):
    import gzip

    path = tmp_path / name
    data = DATA[name]
    path.write_bytes(data if data is not None else gzip.compress(b'{"question": "1+1", "answer": "2"}\n' * 200)[:60])
    result = shardeval_cmd(
        "run",
        "--bench",
        str(path),
        "--model-url",
        "http://127.0.0.1:9/v1",
        "--model-id",
        "m",
        "-o",
        str(tmp_path / "out"),
        "--dry-run",
    )
    one_error_line(result, 2, str(path))
    assert "UTF-8" in result.stderr or "cannot read the data file" in result.stderr, result.stderr
