"""The memory figures the tests assert on are the measured process's own (tests/peak_rss.py).

A big test process must not show up in its children's peaks: CI once had 64 shards "at 471 MB"
because pytest had grown to 471 MB by the time it forked them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from peak_rss import run_measured

BALLAST_MIB = 300


def touch(n_mib: int) -> str:
    """Python source that makes n_mib MiB resident."""
    return f"b = bytearray({n_mib} << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\n"


@pytest.fixture
def big_parent():
    """This process, made BALLAST_MIB bigger for the length of a test."""
    ballast = bytearray(BALLAST_MIB << 20)
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    yield
    del ballast


def test_a_small_child_of_a_big_parent_reports_its_own_small_peak(big_parent):
    plain = subprocess.Popen([sys.executable, "-c", "pass"])
    _, _, usage = os.wait4(plain.pid, 0)
    assert usage.ru_maxrss / 1024 >= BALLAST_MIB, "the kernel no longer counts the parent: the trampoline may go"
    assert run_measured([sys.executable, "-c", "pass"]).peak_mib < 60


@pytest.mark.parametrize("n_mib", [80, 200])
def test_a_child_that_grows_reports_what_it_grew_to(big_parent, n_mib):
    peak = run_measured([sys.executable, "-c", touch(n_mib)]).peak_mib
    assert n_mib <= peak < n_mib + 60, peak


def test_exit_codes_signals_stderr_and_the_pinned_cpu_come_through(tmp_path):
    failed = run_measured([sys.executable, "-c", "import sys; sys.stderr.write('named thing'); sys.exit(3)"])
    assert (failed.returncode, failed.stderr) == (3, "named thing")
    killed = run_measured([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"])
    assert killed.returncode == -15
    cpu, seen = max(os.sched_getaffinity(0)), tmp_path / "cpus"
    pinned = run_measured(
        [sys.executable, "-c", f"import os, pathlib; pathlib.Path({str(seen)!r}).write_text(repr(sorted(os.sched_getaffinity(0))))"],
        cpu=cpu,
    )
    assert pinned.returncode == 0 and seen.read_text() == repr([cpu]) and pinned.wall_s > 0


def test_a_timeout_leaves_no_process_behind(tmp_path):
    marker = tmp_path / "alive"
    child = f"import time, pathlib\nwhile True:\n    pathlib.Path({str(marker)!r}).write_text(str(time.time()))\n    time.sleep(0.05)\n"
    with pytest.raises(subprocess.TimeoutExpired):
        run_measured([sys.executable, "-c", child], timeout=1.5)
    last = marker.read_text()
    time.sleep(0.5)
    assert marker.read_text() == last, "the measured command outlived the trampoline"
