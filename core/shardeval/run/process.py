"""Managed server processes: start a model server, wait until it answers, always stop it.

Used by the `vllm` and `sim` services (and any third-party service that launches a server): the
Endpoint such a service yields carries its ServerProcess (`process=`), which the runner watches.
The child runs in its own process group with stdout and stderr appended to a log file, so
stopping it reaches every worker it forked (vLLM forks one per GPU) and a failure can quote the
log. Stopping is SIGTERM to the group, a grace period, then SIGKILL; it runs on every exit path
of the context manager (exceptions and cancellation included). Two safety nets: an `atexit` hook
stops a process a caller forgot, and on Linux the child gets SIGTERM if shardeval itself is killed.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from typing import Literal
from collections.abc import Iterator, Mapping, Sequence

from shardeval.app import zipapp_path
from shardeval.errors import ShardError
from shardeval.store.procfs import Proc, processes, read_process  # noqa: F401 - Proc: re-exported for the sandbox

PortConflict = Literal["fail", "pick_free"]

_LIVE: set[ServerProcess] = set()  # started and not yet stopped, for the atexit net
_SECRET_FLAGS = ("--api-key", "--hf-token", "--token", "--password")


def self_command() -> list[str]:
    """The argv prefix that runs this same shardeval: the zipapp when we are one, else `-m`."""
    zipapp = zipapp_path()
    return [sys.executable, zipapp] if zipapp else [sys.executable, "-m", "shardeval"]


def node_command() -> list[str]:
    """The argv prefix a script for *another* node uses to run this same shardeval: the one file
    through its own sh launcher, which picks that node's Python (the interpreter that submitted may
    not exist there); an installed package as self_command(), its path shared or the same."""
    zipapp = zipapp_path()
    return ["/bin/sh", zipapp] if zipapp else self_command()


def port_is_free(host: str, port: int) -> bool:
    """True when nothing listens on (host, port): binding succeeds the way a server's would."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR like uvicorn/aiohttp: sockets in TIME_WAIT do not count as taken.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free now (another process may still take it before we use it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def resolve_port(host: str, port: int, *, on_conflict: PortConflict, what: str) -> int:
    """The port to launch on: `port` if free; else a free one (`pick_free`) or a clear failure.

    Port 0 always means "pick a free one".
    """
    if port != 0 and port_is_free(host, port):
        return port
    if port == 0 or on_conflict == "pick_free":
        return free_port(host)
    raise ShardError(
        f"{what}: port {port} on {host} is already in use (a server left over from an earlier run?); "
        "stop it, choose another `port`, or set `port_conflict: pick_free` (or `port: 0`)"
    )


def redact(argv: Sequence[str]) -> list[str]:
    """argv with the values of secret-bearing flags replaced, for log lines and errors."""
    out = list(argv)
    for i, arg in enumerate(out):
        flag, eq, _ = arg.partition("=")
        if flag in _SECRET_FLAGS:
            if eq:
                out[i] = flag + "=***"
            elif i + 1 < len(out):
                out[i + 1] = "***"
    return out


def _group_alive(pgid: int) -> bool:
    """Does any non-zombie process remain in the group? (Orphaned zombies may never be reaped.)"""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not os.path.isdir("/proc/self"):
        return True
    return any(p.pgrp == pgid and p.alive for p in processes())


def die_with_parent(sig: signal.Signals = signal.SIGTERM):
    """A `preexec_fn` (Linux): the child gets `sig` when the process starting it dies, even by
    SIGKILL or the OOM killer, so a server holding GPUs or a shard is never orphaned. The kernel
    ties this to the starting thread, so start children from a long-lived thread (the event
    loop's), never a worker thread. A parent that died before the child could ask is caught by
    comparing the parent pid after the call. None where there is no prctl."""
    if sys.platform != "linux":
        return None
    parent = os.getpid()

    def preexec() -> None:
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(sig))  # PR_SET_PDEATHSIG
        except Exception:  # pragma: no cover - best effort
            return
        if os.getppid() != parent:  # already orphaned: the signal will never come, so act now
            os.kill(os.getpid(), int(sig))

    return preexec


class ServerProcess:
    """One server child: started in its own process group, logged to a file, stopped for sure.

    Use as a context manager (sync or async): entering starts it, leaving stops it whatever
    happened inside. `returncode` (None while running) and `wait_exit()` tell a caller that the
    server died mid-run; `stopping` tells that death apart from our own stop.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        name: str,
        log_path: str,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stop_grace_s: float = 15.0,
        die_with_parent: bool = True,
    ) -> None:
        if not argv:
            raise ValueError("argv must not be empty")
        self.argv = [str(a) for a in argv]
        self.name = name
        self.log_path = log_path
        self.env = dict(env or {})
        self.cwd = cwd
        self.stop_grace_s = stop_grace_s
        self.die_with_parent = die_with_parent
        self.popen: subprocess.Popen[bytes] | None = None
        self._log_start = 0
        self.stopping = False  # True once stop() began: an exit after this is ours, not a crash

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> ServerProcess:
        """Launch the child; a missing executable is a ShardError naming it, not a traceback."""
        if self.popen is not None:
            raise RuntimeError(f"{self.name} already started")
        os.makedirs(os.path.dirname(os.path.abspath(self.log_path)), exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._log_start = log.tell()
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            log.write(f"# shardeval {stamp}: starting {self.name}: {shlex.join(redact(self.argv))}\n".encode())
            log.flush()
            try:
                self.popen = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, **self.env},
                    cwd=self.cwd,
                    start_new_session=True,  # own process group: stop() reaches its workers too
                    preexec_fn=die_with_parent() if self.die_with_parent else None,
                )
            except OSError as exc:
                raise ShardError(f"{self.name}: cannot start {self.argv[0]!r}: {exc.strerror or exc}") from None
        _LIVE.add(self)
        return self

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    @property
    def returncode(self) -> int | None:
        """None while the server runs; its exit status (negative: killed by signal) once it ended."""
        return self.popen.poll() if self.popen else None

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    async def wait_exit(self, poll_s: float = 0.25) -> int:
        """Return when the server process ends, with its exit status; run it as a watchdog task."""
        while self.popen is not None and self.returncode is None:
            await asyncio.sleep(poll_s)
        return self.returncode or 0

    # --- readiness -------------------------------------------------------------------------

    def log_tail(self, lines: int = 20) -> str:
        """The last lines this run wrote to its log (not earlier runs appended to the same file)."""
        data = b""
        with contextlib.suppress(OSError), open(self.log_path, "rb") as f:
            f.seek(max(self._log_start, f.seek(0, os.SEEK_END) - 64 * 1024))
            data = f.read()
        return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])

    def _failure(self, reason: str) -> ShardError:
        quoted = "\n".join("    " + line for line in self.log_tail(20).splitlines()) or "    (empty)"
        return ShardError(f"{self.name}: {reason}; last lines of {self.log_path}:\n{quoted}")

    def _check_alive(self) -> None:
        code = self.returncode
        if code is not None:
            raise self._failure(f"exited during start-up ({describe_exit(code)})")

    async def wait_http(self, url: str, *, timeout_s: float, interval_s: float = 0.5) -> None:
        """Poll `url` until it answers 200; fail (quoting the log) on early exit or the deadline."""
        import aiohttp

        deadline = time.monotonic() + timeout_s
        probe = aiohttp.ClientTimeout(total=max(0.5, min(5.0, interval_s * 4)))
        last = "no answer yet"
        async with aiohttp.ClientSession(timeout=probe) as session:
            while True:
                self._check_alive()
                try:
                    async with session.get(url) as resp:
                        if resp.status == 200:
                            self._check_alive()  # a leftover server on the port must not pass for ours
                            return
                        last = f"HTTP {resp.status}"
                except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                    last = type(exc).__name__
                self._check_alive()
                if time.monotonic() >= deadline:
                    raise self._failure(f"not healthy at {url} after {timeout_s:g} s (last probe: {last})")
                await asyncio.sleep(min(interval_s, max(0.0, deadline - time.monotonic())))

    async def wait_log_line(self, pattern: str | re.Pattern[str], *, timeout_s: float, interval_s: float = 0.05) -> re.Match[str]:
        """Wait for a line matching `pattern` in this run's log (a readiness line); return the match."""
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout_s
        offset = self._log_start
        pending = b""
        while True:
            exited = self.returncode is not None
            data = b""
            with contextlib.suppress(OSError), open(self.log_path, "rb") as f:
                f.seek(offset)
                data = f.read()
            offset += len(data)
            pending += data
            *complete, pending = pending.split(b"\n")
            for raw in complete:
                match = regex.search(raw.decode("utf-8", "replace"))
                if match:
                    return match
            if exited:  # read everything it wrote before giving up
                self._check_alive()
            if time.monotonic() >= deadline:
                raise self._failure(f"did not report ready within {timeout_s:g} s")
            await asyncio.sleep(interval_s)

    # --- stopping --------------------------------------------------------------------------

    def _stop_steps(self) -> Iterator[float]:
        """The stop procedure as a generator of waits, shared by the sync and async drivers."""
        popen = self.popen
        if popen is None or self not in _LIVE:  # never started, or stopped already
            return
        pgid = popen.pid  # start_new_session: the child leads its own group
        self.stopping = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_grace_s
        while time.monotonic() < deadline:
            if popen.poll() is not None and not _group_alive(pgid):
                return
            yield 0.05
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        kill_deadline = time.monotonic() + 5.0
        while (popen.poll() is None or _group_alive(pgid)) and time.monotonic() < kill_deadline:
            yield 0.02

    def _finish_stop(self) -> int | None:
        code = self.returncode
        if self in _LIVE:
            _LIVE.discard(self)
            with contextlib.suppress(OSError), open(self.log_path, "ab") as log:
                log.write(f"# shardeval: {self.name} stopped (exit status {code})\n".encode())
        return code

    def stop(self) -> int | None:
        """SIGTERM the group, wait `stop_grace_s`, SIGKILL what is left; return the exit status."""
        for wait in self._stop_steps():
            time.sleep(wait)
        return self._finish_stop()

    async def astop(self) -> int | None:
        """`stop()` without blocking the event loop; if cancelled, finishes the stop synchronously."""
        steps = self._stop_steps()
        try:
            for wait in steps:
                await asyncio.sleep(wait)
        except BaseException:
            for wait in steps:  # never leave a server behind, even when the caller is cancelled
                time.sleep(wait)
            self._finish_stop()
            raise
        return self._finish_stop()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> ServerProcess:
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.astop()

    def __repr__(self) -> str:
        return f"ServerProcess({self.name!r}, pid={self.pid}, returncode={self.returncode})"


@atexit.register
def _stop_leftovers() -> None:
    """Safety net: an interpreter exiting normally never leaves a managed server running."""
    for proc in list(_LIVE):
        with contextlib.suppress(Exception):  # best effort at exit
            proc.stop_grace_s = min(proc.stop_grace_s, 5.0)
            proc.stop()


def describe_exit(code: int | None) -> str:
    """`exit status 3` / `killed by SIGKILL` for messages about a server that died."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


__all__ = [
    "PortConflict",
    "ServerProcess",
    "describe_exit",
    "die_with_parent",
    "free_port",
    "port_is_free",
    "processes",
    "read_process",
    "redact",
    "resolve_port",
    "self_command",
]
