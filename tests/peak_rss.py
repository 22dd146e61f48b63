"""Run a command and measure its own peak RSS, not the test process's.

Linux carries a parent's resident set into the `ru_maxrss` of every child it forks: the child's
memory map starts as a copy of the parent's, and exec keeps that high-water mark. A pytest process
that has grown to 470 MB therefore makes each child it starts report at least 470 MB, whatever the
child used (CI saw exactly that: 64 shards "at 471 MB" that use 42 MB each).

So the command is started by a small trampoline interpreter, which forks it and reports that
grandchild's rusage through a pipe. The floor is the trampoline's few MB. The grandchild dies with
the trampoline (PR_SET_PDEATHSIG), so killing the trampoline on a timeout leaves nothing behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

_TRAMPOLINE = r"""
import os, sys, time
fd, cpu, cmd = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
parent = os.getpid()
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.close(fd)
    import ctypes
    ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG = 1, SIGKILL = 9
    if os.getppid() != parent:
        os._exit(125)
    if cpu:
        os.sched_setaffinity(0, {int(cpu)})
    os.execv(cmd[0], cmd)
_, status, usage = os.wait4(pid, 0)
os.write(fd, b"%d %r" % (usage.ru_maxrss, time.perf_counter() - t0))
os.close(fd)
if os.WIFSIGNALED(status):
    import signal
    signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
    os.kill(os.getpid(), os.WTERMSIG(status))
os._exit(os.WEXITSTATUS(status))
"""


@dataclass
class Measured:
    """What one command did: its exit code, its own peak RSS and wall time, its stderr if captured."""

    returncode: int
    peak_mib: float
    wall_s: float
    stderr: str


def run_measured(
    cmd: list[str], *, cpu: int | None = None, timeout: float | None = None, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
) -> Measured:
    """Run `cmd` (argv[0] a path), optionally pinned to one CPU, and measure only it."""
    read_end, write_end = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _TRAMPOLINE, str(write_end), "" if cpu is None else str(cpu), *cmd],
            pass_fds=(write_end,),
            stdout=stdout,
            stderr=stderr,
        )
    finally:
        os.close(write_end)
    with os.fdopen(read_end, "rb") as report:
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        fields = report.read().split()
    if len(fields) != 2:
        raise RuntimeError(f"the trampoline reported nothing (exit {proc.returncode}): {cmd}")
    return Measured(proc.returncode, int(fields[0]) / 1024, float(fields[1]), err.decode(errors="replace") if err else "")
