"""Shared fixtures. Every server a test talks to is a real process on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from typing import Iterator

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@contextmanager
def running_sim(*args: str, timeout: float = 20.0) -> Iterator[str]:
    """Start `shardeval sim --port 0 ARGS` and yield its base URL (http://127.0.0.1:PORT/v1).

    The simulator prints exactly one line, `shardeval sim listening on <base_url>`, once it accepts
    connections; this waits for it and stops the process afterwards.
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardeval", "sim", "--host", "127.0.0.1", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + timeout
        line = proc.stdout.readline() if proc.stdout else ""
        if "listening on" not in line or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"simulator did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}")
        yield line.strip().rsplit(" ", 1)[-1]
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def sim() -> Iterator[str]:
    """A default simulator (arith-aware, 0.7 accuracy, fast) for tests that need any real server."""
    with running_sim("--bench", "arith", "--accuracy", "0.7", "--ttft-ms", "1", "--itl-ms", "0") as url:
        yield url


def shardeval_cmd(*args: str, env: dict[str, str] | None = None, timeout: float = 120, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess, as a user would."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "shardeval", *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


def without_fallback_notice(stderr: str) -> str:
    """stderr less the one line a process prints when it runs on the stdlib msgspec fallback.

    Lets the "errors are exactly one line" checks hold on nodes where msgspec cannot load.
    """
    return "".join(line for line in stderr.splitlines(keepends=True) if not line.startswith("shardeval: notice: msgspec "))


def process_alive(pid: int) -> bool:
    """Running (zombies, which an init that does not reap may keep around, count as dead)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")
