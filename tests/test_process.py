"""Managed server processes (core/shardeval/run/process.py) with real child processes and sockets."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import process_alive as alive

from shardeval.errors import ShardError
from shardeval.run.process import (
    ServerProcess,
    describe_exit,
    free_port,
    port_is_free,
    redact,
    resolve_port,
    self_command,
)

HEALTH_SERVER = """
import http.server, sys, time
time.sleep(float(sys.argv[2]))
print("loading weights ... done", flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""

# The leader forks a grandchild that ignores SIGTERM (like a stuck worker) and records its pid.
STUBBORN_TREE = """
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('worker up', flush=True); time.sleep(300)"])
open(sys.argv[1], "w").write(str(child.pid))
if sys.argv[2] == "leader-ignores":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("tree up", flush=True)
time.sleep(300)
"""


def script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def test_wait_http_succeeds_once_healthy_and_stops_on_exit(tmp_path: Path) -> None:
    port = free_port()
    proc = ServerProcess(
        [sys.executable, script(tmp_path, "srv.py", HEALTH_SERVER), str(port), "0.5"],
        name="fake server",
        log_path=str(tmp_path / "logs" / "srv.log"),
        env={"SHARDEVAL_TEST_MARK": "1"},
        stop_grace_s=5,
    )

    async def go() -> float:
        async with proc:
            t0 = time.monotonic()
            await proc.wait_http(f"http://127.0.0.1:{port}/health", timeout_s=15, interval_s=0.1)
            assert proc.running and proc.returncode is None
            return time.monotonic() - t0

    waited = asyncio.run(go())
    assert 0.3 < waited < 10
    assert proc.returncode is not None and not alive(proc.pid)
    log = (tmp_path / "logs" / "srv.log").read_text()
    assert "loading weights" in log and "starting fake server" in log and "stopped" in log


def test_crash_at_start_quotes_the_log(tmp_path: Path) -> None:
    crash = script(
        tmp_path,
        "crash.py",
        """
        import sys
        for i in range(30):
            print(f"init step {i}", flush=True)
        print("torch.OutOfMemoryError: CUDA out of memory", file=sys.stderr, flush=True)
        sys.exit(3)
    """,
    )
    log_path = tmp_path / "crash.log"

    async def go() -> None:
        async with ServerProcess([sys.executable, crash], name="service 'model' (vllm)", log_path=str(log_path)) as proc:
            await proc.wait_http(f"http://127.0.0.1:{free_port()}/health", timeout_s=30, interval_s=0.1)

    t0 = time.monotonic()
    with pytest.raises(ShardError) as info:
        asyncio.run(go())
    message = str(info.value)
    assert time.monotonic() - t0 < 10
    assert "exited during start-up (exit status 3)" in message
    assert "CUDA out of memory" in message and str(log_path) in message
    assert "init step 29" in message and "init step 5\n" not in message  # only the last ~20 lines


def test_slow_start_past_the_deadline_fails_and_stops(tmp_path: Path) -> None:
    slow = script(tmp_path, "slow.py", "import time\nprint('compiling graphs', flush=True)\ntime.sleep(60)\n")
    holder: dict[str, ServerProcess] = {}

    async def go() -> None:
        async with ServerProcess([sys.executable, slow], name="slow server", log_path=str(tmp_path / "slow.log"), stop_grace_s=3) as proc:
            holder["proc"] = proc
            await proc.wait_http(f"http://127.0.0.1:{free_port()}/health", timeout_s=1.0, interval_s=0.2)

    t0 = time.monotonic()
    with pytest.raises(ShardError, match=r"not healthy .* after 1 s[\s\S]*compiling graphs"):
        asyncio.run(go())
    assert time.monotonic() - t0 < 6
    assert not alive(holder["proc"].pid)


def test_wait_log_line_returns_the_match(tmp_path: Path) -> None:
    ready = script(
        tmp_path,
        "ready.py",
        "import time\ntime.sleep(0.3)\nprint('server listening on http://127.0.0.1:1234/v1', flush=True)\ntime.sleep(60)\n",
    )
    log = tmp_path / "ready.log"
    log.write_text("server listening on http://stale:1/v1\n")  # an earlier run's line must not count

    async def go() -> str:
        async with ServerProcess([sys.executable, ready], name="r", log_path=str(log), stop_grace_s=2) as proc:
            match = await proc.wait_log_line(r"listening on (http://\S+)", timeout_s=10)
            return match.group(1)

    assert asyncio.run(go()) == "http://127.0.0.1:1234/v1"


def test_wait_log_line_fails_on_early_exit(tmp_path: Path) -> None:
    async def go() -> None:
        async with ServerProcess(
            [sys.executable, "-c", "print('usage: bad flag'); raise SystemExit(2)"], name="r", log_path=str(tmp_path / "r.log")
        ) as proc:
            await proc.wait_log_line("listening", timeout_s=10)

    with pytest.raises(ShardError, match=r"exit status 2[\s\S]*usage: bad flag"):
        asyncio.run(go())


def test_missing_executable_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ShardError, match="cannot start 'no-such-binary-xyz'"):
        ServerProcess(["no-such-binary-xyz", "serve"], name="vllm", log_path=str(tmp_path / "x.log")).start()


@pytest.mark.parametrize("mode", ["leader-exits", "leader-ignores"])
def test_stop_reaches_the_whole_group_term_then_kill(tmp_path: Path, mode: str) -> None:
    pid_file = tmp_path / "worker.pid"
    proc = ServerProcess(
        [sys.executable, script(tmp_path, "tree.py", STUBBORN_TREE), str(pid_file), mode],
        name="tree",
        log_path=str(tmp_path / "tree.log"),
        stop_grace_s=1.0,
    )

    async def go() -> tuple[int, float]:
        async with proc:
            await proc.wait_log_line("tree up", timeout_s=10)
            await proc.wait_log_line("worker up", timeout_s=10)
            worker = int(pid_file.read_text())
            assert alive(worker)
            t0 = time.monotonic()
            await proc.astop()
            return worker, time.monotonic() - t0

    worker, took = asyncio.run(go())
    assert 0.9 <= took < 8  # waited the grace period for the TERM-ignoring worker, then killed
    assert not alive(worker) and not alive(proc.pid)
    expected = -15 if mode == "leader-exits" else -9
    assert proc.returncode == expected


def test_well_behaved_server_stops_quickly(tmp_path: Path) -> None:
    proc = ServerProcess(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
        name="s",
        log_path=str(tmp_path / "s.log"),
        stop_grace_s=20,
    )
    with proc:  # the sync form works too
        asyncio.run(proc.wait_log_line("up", timeout_s=10))
        t0 = time.monotonic()
    assert time.monotonic() - t0 < 3 and proc.returncode == -15


def test_stop_on_exception_inside_the_context(tmp_path: Path) -> None:
    holder: dict[str, ServerProcess] = {}

    async def go() -> None:
        async with ServerProcess([sys.executable, "-c", "import time; time.sleep(60)"], name="s", log_path=str(tmp_path / "s.log")) as proc:
            holder["proc"] = proc
            raise KeyError("boom inside")

    with pytest.raises(KeyError, match="boom inside"):
        asyncio.run(go())
    assert not alive(holder["proc"].pid)


def test_stop_when_the_task_is_cancelled(tmp_path: Path) -> None:
    holder: dict[str, ServerProcess] = {}

    async def body() -> None:
        async with ServerProcess([sys.executable, "-c", "import time; time.sleep(60)"], name="s", log_path=str(tmp_path / "s.log")) as proc:
            holder["proc"] = proc
            await asyncio.sleep(60)

    async def go() -> None:
        task = asyncio.create_task(body())
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert not alive(holder["proc"].pid)


def test_wait_exit_reports_a_death_mid_run(tmp_path: Path) -> None:
    async def go() -> int:
        async with ServerProcess(
            [sys.executable, "-c", "import time; time.sleep(0.4); raise SystemExit(7)"], name="s", log_path=str(tmp_path / "s.log")
        ) as proc:
            watchdog = asyncio.create_task(proc.wait_exit(poll_s=0.05))
            code = await asyncio.wait_for(watchdog, 10)
            assert describe_exit(code) == "exit status 7" and not proc.stopping
            return code

    assert asyncio.run(go()) == 7
    assert describe_exit(-9) == "killed by SIGKILL" and describe_exit(None) == "still running"


def test_port_helpers() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert not port_is_free("127.0.0.1", port)
        with pytest.raises(ShardError, match=rf"port {port} on 127.0.0.1 is already in use.*pick_free"):
            resolve_port("127.0.0.1", port, on_conflict="fail", what="service 'model' (vllm)")
        other = resolve_port("127.0.0.1", port, on_conflict="pick_free", what="x")
        assert other != port and port_is_free("127.0.0.1", other)
    assert port_is_free("127.0.0.1", port)
    assert resolve_port("127.0.0.1", port, on_conflict="fail", what="x") == port
    assert resolve_port("127.0.0.1", 0, on_conflict="fail", what="x") > 0


def test_secrets_never_reach_the_log(tmp_path: Path) -> None:
    assert redact(["vllm", "serve", "m", "--api-key", "sk-123", "--hf-token=hf_abc"]) == [
        "vllm",
        "serve",
        "m",
        "--api-key",
        "***",
        "--hf-token=***",
    ]
    log = tmp_path / "s.log"
    with ServerProcess([sys.executable, "-c", "pass", "--api-key", "sk-secret"], name="s", log_path=str(log)):
        pass
    assert "sk-secret" not in log.read_text()


def test_self_command_runs_this_shardeval() -> None:
    assert self_command() == [sys.executable, "-m", "shardeval"]  # pytest is not a zipapp


def test_server_dies_with_a_killed_parent(tmp_path: Path) -> None:
    """If shardeval itself is SIGKILLed (OOM killer, `kill -9`), its server must not be orphaned."""
    pid_file = tmp_path / "server.pid"
    parent = script(
        tmp_path,
        "parent.py",
        f"""
        import os, signal, sys, time
        from shardeval.run.process import ServerProcess
        proc = ServerProcess([sys.executable, "-c", "import time; time.sleep(60)"], name="s", log_path={str(tmp_path / "p.log")!r}).start()
        open({str(pid_file)!r}, "w").write(str(proc.pid))
        os.kill(os.getpid(), signal.SIGKILL)
    """,
    )
    subprocess.run([sys.executable, parent], timeout=30)
    server = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while alive(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(server)
