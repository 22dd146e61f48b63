"""Every output path is written into or refused, never replaced, when it is not a regular file
(H12): a FIFO a reader holds open, /dev/null, a device that refuses the bytes (/dev/full), a
symlink to any of them; a symlink to a regular file writes the file and keeps the link; `-o -`
is standard output. export -o, compare --html and merge -o's files, through the CLI as a user
runs it."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import api_eval_config, running_sim, shardeval_cmd

HANG = 60


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A finished run of 5 arith problems, twice (a second run to compare against)."""
    root = tmp_path_factory.mktemp("runs")
    with running_sim("--bench", "arith", "--ttft-ms", "1", "--itl-ms", "0") as url:
        cfg = api_eval_config(root / "config.yaml", url, n=5)
        for name in ("a", "b"):
            result = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(root / name / "shard_0"))
            assert result.returncode == 0, result.stderr
    return root


def char_device(where: Path, major: int, minor: int) -> Path:
    """A twin of /dev/null (1, 3) or /dev/full (1, 7) in the test's own directory, so that a
    shardeval that replaces the device replaces this one and not the machine's; without the
    right to create one (not root, a nodev mount), the machine's own device."""
    try:
        os.mknod(where, stat.S_IFCHR | 0o666, os.makedev(major, minor))
        with open(where, "wb"):
            pass
        return where
    except OSError:
        with __import__("contextlib").suppress(OSError):
            os.unlink(where)
        return Path({(1, 3): "/dev/null", (1, 7): "/dev/full"}[(major, minor)])


class FifoReader:
    """A FIFO at `path` and a thread that opens it for reading (before the writer comes) and keeps
    what it reads."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path, self.data = path, b""
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.opened = threading.Event()
        self.thread.start()

    def _read(self) -> None:
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)  # a reader is there from now on
        self.opened.set()
        os.set_blocking(fd, True)
        import select

        chunks = []
        while True:
            select.select([fd], [], [], 30)
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                if chunks:  # the writer came and went
                    break
                threading.Event().wait(0.02)  # no writer yet: EOF until one opens
                continue
            chunks.append(chunk)
        os.close(fd)
        self.data = b"".join(chunks)

    def result(self) -> bytes:
        self.thread.join(HANG)
        assert not self.thread.is_alive(), "the reader never saw the writer finish"
        return self.data


def csv_rows(data: bytes) -> list[str]:
    return data.decode().splitlines()


def test_export_into_a_fifo_streams_the_rows_to_its_reader(tmp_path, run):
    reader = FifoReader(tmp_path / "pipe.csv")
    assert reader.opened.wait(10)
    result = shardeval_cmd("export", str(run / "a"), "-o", str(reader.path), timeout=HANG)
    assert result.returncode == 0, result.stderr
    rows = csv_rows(reader.result())
    assert rows[0].startswith("config_hash,") and len(rows) == 1 + 5
    assert reader.path.is_fifo()  # written into, not replaced by a file


def test_export_into_a_fifo_nobody_reads_is_an_error_not_a_wait(tmp_path, run):
    fifo = tmp_path / "nobody.csv"
    os.mkfifo(fifo)
    result = shardeval_cmd("export", str(run / "a"), "-o", str(fifo), timeout=HANG)
    assert result.returncode != 0 and "no process is reading" in result.stderr and str(fifo) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and fifo.is_fifo()


def test_export_to_dev_null_keeps_the_device(tmp_path, run):
    null = char_device(tmp_path / "null.csv", 1, 3)
    result = shardeval_cmd("export", str(run / "a"), "-o", str(null), timeout=HANG)
    assert result.returncode == 0, result.stderr
    assert stat.S_ISCHR(os.stat(null).st_mode)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_export_to_a_full_device_is_a_clear_error_and_the_device_stays(tmp_path, run):
    """As root, `export -o /dev/full` replaced the device with a CSV."""
    full = char_device(tmp_path / "full.csv", 1, 7)
    result = shardeval_cmd("export", str(run / "a"), "-o", str(full), timeout=HANG)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(full) in lines[0] and "No space left on device" in lines[0], result.stderr
    assert stat.S_ISCHR(os.stat(full).st_mode), "the device was replaced"


def test_a_symlink_to_a_regular_file_writes_the_file_and_keeps_the_link(tmp_path, run):
    target = tmp_path / "data" / "latest-2026.csv"
    target.parent.mkdir()
    target.write_text("old\n")
    link = tmp_path / "latest.csv"
    link.symlink_to(target)
    result = shardeval_cmd("export", str(run / "a"), "-o", str(link), timeout=HANG)
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert len(csv_rows(target.read_bytes())) == 6


def test_a_symlink_to_a_fifo_or_a_device_is_written_through(tmp_path, run):
    reader = FifoReader(tmp_path / "pipe")
    assert reader.opened.wait(10)
    link = tmp_path / "out.jsonl"
    link.symlink_to(reader.path)
    result = shardeval_cmd("export", str(run / "a"), "-o", str(link), timeout=HANG)
    assert result.returncode == 0, result.stderr
    assert len([json.loads(line) for line in reader.result().splitlines()]) == 5
    assert link.is_symlink() and reader.path.is_fifo()


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_dash_is_standard_output(tmp_path, run, fmt):
    args = ("export", str(run / "a"), "-o", "-") + (() if fmt == "csv" else ("--format", fmt))
    proc = subprocess.run([sys.executable, "-m", "shardeval", *args], capture_output=True, timeout=HANG, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "-").exists()
    assert f"written: standard output ({fmt}, 5 rows)" in proc.stderr.decode()
    if fmt == "csv":
        assert len(csv_rows(proc.stdout)) == 6
    elif fmt == "jsonl":
        assert [json.loads(line)["problem_idx"] for line in proc.stdout.splitlines()] == [0, 1, 2, 3, 4]
    else:
        import io

        import pyarrow.parquet as pq

        assert pq.read_table(io.BytesIO(proc.stdout)).num_rows == 5


@pytest.mark.parametrize("what", ["dir", "socket"])
def test_a_path_that_cannot_take_a_file_is_refused_before_the_run_is_read(tmp_path, run, what):
    out = tmp_path / "out.csv"
    if what == "dir":
        out.mkdir()
    else:
        import socket

        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(out))
    result = shardeval_cmd("export", str(tmp_path / "no-such-run"), "-o", str(out), timeout=HANG)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"shardeval: error: -o {out}: is {'a directory' if what == 'dir' else 'a socket'}; give the path of a file to write"
    ]


def test_compare_html_into_a_fifo_and_dev_null(tmp_path, run):
    reader = FifoReader(tmp_path / "page.html")
    assert reader.opened.wait(10)
    result = shardeval_cmd("compare", str(run / "a"), str(run / "b"), "--html", str(reader.path), timeout=HANG)
    assert result.returncode == 0, result.stderr
    assert reader.result().startswith(b"<!doctype html>") and reader.path.is_fifo()
    null = char_device(tmp_path / "null.html", 1, 3)
    result = shardeval_cmd("compare", str(run / "a"), str(run / "b"), "--html", str(null), timeout=HANG)
    assert result.returncode == 0, result.stderr
    assert stat.S_ISCHR(os.stat(null).st_mode)
    dash = shardeval_cmd("compare", str(run / "a"), str(run / "b"), "--html", "-", timeout=HANG)
    assert dash.returncode == 2 and "--html -:" in dash.stderr


def test_merge_writes_into_what_its_files_link_to(tmp_path, run):
    """merge -o DIR: a report.md there that links to a device is written into, the link stays."""
    shutil.copytree(run / "a", tmp_path / "a")
    out = tmp_path / "merged_here"
    out.mkdir()
    null = char_device(tmp_path / "null", 1, 3)
    (out / "report.md").symlink_to(null)
    result = shardeval_cmd("merge", str(tmp_path / "a"), "-o", str(out), timeout=HANG)
    assert result.returncode == 0, result.stderr
    assert (out / "report.md").is_symlink() and stat.S_ISCHR(os.stat(null).st_mode)
    assert json.loads((out / "scores.json").read_text())
