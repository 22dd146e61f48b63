"""The shard process's life: stop signals against a deadline, liveness, one writer, the local
orchestrator's children, and --fresh's log.

Every test runs real `shardeval run` processes and sends them real signals. The servers are real
on 127.0.0.1: the simulator, or a small aiohttp server (in a thread of the test) whose streams
can be made to send `: ping` comments forever, the server that keeps a shard from ever draining.
Every wait is bounded; leftover processes a failing test started are killed by pid.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from collections.abc import Iterator

import pytest
from aiohttp import web

from conftest import api_eval_config, process_alive, process_table, shardeval_cmd
from served import app_in_thread

DRAIN_S = 2.0
MARGIN_S = 8.0  # process exit, stopping the client and servers, a busy 2-core CI box


# --- a server that answers, or pings forever ------------------------------------------------------


def _chunk(content: str, finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": {"content": content}, "finish_reason": finish}
    return b"data: " + json.dumps({"id": "c", "object": "chat.completion.chunk", "model": "sim", "choices": [choice]}).encode() + b"\n\n"


class PingServer:
    """Every `stall_every`-th chat request (1: all) is a stream of `: ping` comments that never
    ends (the client's idle timeout never fires); the others get a short answer at once."""

    def __init__(self, stall_every: int = 1) -> None:
        self.stall_every = stall_every
        self.requests = 0
        self.url = ""

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if self.requests % self.stall_every == 0:
            while True:
                await resp.write(b": ping\n\n")
                await asyncio.sleep(0.2)
        await resp.write(_chunk("#### 3"))
        await resp.write(_chunk("", "stop"))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "sim", "root": "sim", "max_model_len": 1048576}]})


@contextmanager
def ping_server(stall_every: int = 1) -> Iterator[PingServer]:
    server, app = PingServer(stall_every), web.Application()
    app.router.add_post("/v1/chat/completions", server.chat)
    app.router.add_get("/v1/models", server.models)
    with app_in_thread(app, handler_cancellation=True) as origin:
        server.url = f"{origin}/v1"
        yield server


# --- helpers --------------------------------------------------------------------------------------


def write_config(tmp: Path, url: str, n: int, concurrency: int, name: str = "config.yaml") -> Path:
    """One attempt per request, short answers, the test's drain deadline."""
    return api_eval_config(
        tmp / name,
        url,
        n=n,
        concurrency=concurrency,
        service={"retries": {"attempts": 1}},
        benchmark={"solver": {"type": "simple", "service": "model", "generation": {"max_tokens": 16}}},
        output={"drain_timeout_s": DRAIN_S},
    )


def start(*args: str, env: dict[str, str] | None = None, prefix: list[str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*(prefix or []), sys.executable, "-m", "shardeval", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def wait_for(what: str, check, timeout: float = 30.0, proc: subprocess.Popen[str] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, ValueError, KeyError):
            pass
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode} before {what}: {proc.communicate()}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def wait_dead(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not process_alive(pid)


def children(pid: int) -> list[int]:
    return [p for p, (parent, _) in process_table().items() if parent == pid]


@pytest.fixture
def leftovers(tmp_path: Path) -> Iterator[None]:
    """After the test: SIGKILL, by pid, any process still running whose command line names this
    test's directory (a shard a failing test left behind), and the servers it started."""
    yield
    needle = str(tmp_path).encode()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if needle in cmdline:
                for pid in [int(entry), *children(int(entry))]:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass


def stop_and_time(proc: subprocess.Popen[str], sig: signal.Signals) -> tuple[float, str]:
    """Send `sig`; the seconds until the process exits (killed, and the test failed, past the bound)."""
    t0 = time.monotonic()
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=DRAIN_S + MARGIN_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"still running {DRAIN_S + MARGIN_S:g} s after {sig.name} (drain_timeout_s {DRAIN_S:g}):\n{err[-3000:]}")  # noqa: B904
    return time.monotonic() - t0, err


def check_interrupted(out: Path, proc: subprocess.Popen[str], err: str, sig: signal.Signals) -> None:
    assert proc.returncode == {signal.SIGTERM: 143, signal.SIGINT: 130}[sig], err
    assert "Traceback" not in err
    m = manifest(out)
    assert m["state"] == "interrupted" and m["reason"] == sig.name
    results = out / "arith" / "results.jsonl"
    recs = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    assert len({(r["problem_idx"], r["repeat"]) for r in recs}) == len(recs)


# --- 1. a stop signal is obeyed within drain_timeout_s, whatever the shard is doing ----------------


@pytest.mark.parametrize(
    "phase, sig, stall_every, n, concurrency",
    [
        ("waiting_for_a_slot", signal.SIGTERM, 1, 40, 2),  # every stream pings forever: the window is full
        ("waiting_for_a_slot", signal.SIGINT, 1, 40, 2),
        ("after_dispatch_finished", signal.SIGTERM, 1, 2, 4),  # all dispatched, draining the last ones
        ("while_dispatching", signal.SIGTERM, 40, 4000, 8),  # answers flowing, a few streams stuck
    ],
)
def test_a_stop_signal_stops_within_the_drain_deadline(tmp_path, leftovers, phase, sig, stall_every, n, concurrency):
    with ping_server(stall_every) as server:
        cfg = write_config(tmp_path, server.url, n=n, concurrency=concurrency)
        out = tmp_path / "out"
        proc = start("run", str(cfg), "-o", str(out))
        if phase == "while_dispatching":
            wait_for("records flowing", lambda: lines(out / "arith" / "results.jsonl") >= 60, proc=proc)
            assert 1 <= server.requests // stall_every and proc.poll() is None
        else:
            wait_for("requests in flight", lambda: server.requests >= min(n, concurrency), proc=proc)
            time.sleep(0.5)  # let the dispatcher block on the full window, or reach the drain
        elapsed, err = stop_and_time(proc, sig)
    check_interrupted(out, proc, err, sig)
    assert DRAIN_S - 0.5 <= elapsed <= DRAIN_S + MARGIN_S, elapsed  # the stuck streams had their time, then no more
    assert "a rerun will ask them again" in err  # the stuck requests were cancelled, unrecorded
    if phase == "while_dispatching":
        assert lines(out / "arith" / "results.jsonl") >= 60


def test_a_stop_signal_during_a_managed_servers_start_up_stops_it_and_the_shard(tmp_path, leftovers):
    """A server that takes (here: forever) to become healthy, as vLLM loading weights does."""
    pidfile = tmp_path / "server.pid"
    server = tmp_path / "slow_server.py"
    server.write_text(f"import os, time\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n")
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        json.dumps(
            {
                "services": {
                    "model": {
                        "type": "vllm",
                        "model": "sim",
                        "launch_command": [sys.executable, str(server)],
                        "port": 0,
                        "startup_timeout_s": 600,
                        "stop_timeout_s": 5,
                    }
                },
                "benchmarks": [{"name": "arith", "params": {"n": 10}}],
                "output": {"progress_interval_s": 0, "drain_timeout_s": DRAIN_S},
            }
        )
    )
    out = tmp_path / "out"
    proc = start("run", str(cfg), "--shard", "0/1", "-o", str(out))
    wait_for("the server to start", lambda: pidfile.read_text().strip().isdigit(), proc=proc)
    time.sleep(0.5)
    elapsed, err = stop_and_time(proc, signal.SIGTERM)
    check_interrupted(out, proc, err, signal.SIGTERM)
    assert elapsed <= DRAIN_S + MARGIN_S
    assert wait_dead(int(pidfile.read_text()), 10), "the half-started server outlived the shard"


# --- 2. a shard whose process is gone is `lost`, and listed for rerun ----------------------------


def status(root: Path) -> str:
    result = shardeval_cmd("status", str(root), timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def status_row(text: str, idx: int) -> list[str]:
    return next(line.split() for line in text.splitlines() if line.split()[:1] == [str(idx)])


def merge_report(root: Path) -> str:
    """The report of a merge of a run with a lost shard: written, but not complete (exit 3, issue 24)."""
    result = shardeval_cmd("merge", str(root), timeout=60)
    assert result.returncode == 3 and "not complete: PARTIAL" in result.stderr, result.stderr
    return result.stdout


def test_a_sigkilled_shard_is_lost_at_once_listed_for_rerun_and_resumable(tmp_path, leftovers, sim):
    root = tmp_path / "run"
    done = shardeval_cmd("run", str(write_config(tmp_path, sim, 12, 4, name="fast.yaml")), "--shard", "1/2", "-o", str(root / "shard_1"))
    assert done.returncode == 0, done.stderr
    with ping_server() as server:
        cfg = write_config(tmp_path, server.url, n=12, concurrency=2)
        proc = start("run", str(cfg), "--shard", "0/2", "-o", str(root / "shard_0"))
        wait_for("requests in flight", lambda: server.requests >= 2, proc=proc)
        assert status_row(status(root), 0)[1] == "running"
        proc.kill()
        proc.communicate()
        assert manifest(root / "shard_0")["state"] == "running"  # a killed process cannot say goodbye
        text = status(root)
        row = status_row(text, 0)
        assert row[1] == "lost" and row[-2] == "—", text  # no ETA
        assert "shard 0 lost since " in text and f"pid {proc.pid} on {socket.gethostname()} is gone" in text
        report = merge_report(root)
        assert "**LOST**: shard_0" in report and "still running" not in report
        assert "rerun shard(s) 0: `shardeval run CONFIG --shard I/2`" in report
    rerun = shardeval_cmd("run", str(write_config(tmp_path, sim, 12, 4, name="fast.yaml")), "--shard", "0/2", "-o", str(root / "shard_0"))
    assert rerun.returncode == 0, rerun.stderr  # the dead writer's lock and heartbeat do not block it
    assert status_row(status(root), 0)[1] == "complete"


def test_a_shard_on_another_host_is_running_while_it_beats_and_lost_once_its_heartbeat_is_stale(tmp_path, leftovers):
    """Another host's pid cannot be checked: the heartbeat's age decides. The shard runs in its own
    UTS namespace under another host name (period 0.3 s, so lost after 18 x 0.3 = 5.4 s)."""
    if subprocess.run(["unshare", "-u", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare -u is not allowed here (it needs CAP_SYS_ADMIN)")
    root = tmp_path / "run"
    with ping_server() as server:
        cfg = write_config(tmp_path, server.url, n=12, concurrency=2)
        prefix = ["unshare", "-u", "sh", "-c", 'hostname shardeval-node-b && exec "$@"', "sh"]
        proc = start("run", str(cfg), "--shard", "0/1", "-o", str(root / "shard_0"), env={"SHARDEVAL_HEARTBEAT_S": "0.3"}, prefix=prefix)
        beat = root / "shard_0" / "heartbeat.json"
        wait_for("a heartbeat", lambda: json.loads(beat.read_text())["host"] == "shardeval-node-b", proc=proc)
        time.sleep(7.0)  # past the staleness bound: only a refreshed heartbeat keeps it `running`
        assert status_row(status(root), 0)[1] == "running"
        proc.kill()
        proc.communicate()
        assert status_row(status(root), 0)[1] == "running"  # cannot know yet: its last beat is fresh
        time.sleep(6.0)
        text = status(root)
        assert status_row(text, 0)[1] == "lost", text
        assert f"no heartbeat from pid {proc.pid} on shardeval-node-b for " in text
        assert "**LOST**: shard_0" in merge_report(root)


# --- 3. one writer per shard directory -----------------------------------------------------------


@pytest.mark.parametrize("flags", [(), ("--fresh",)])
def test_a_second_writer_is_refused_in_one_line_naming_the_holder(tmp_path, leftovers, flags):
    out = tmp_path / "out"
    with ping_server() as server:
        cfg = write_config(tmp_path, server.url, n=12, concurrency=2)
        first = start("run", str(cfg), "--shard", "0/1", "-o", str(out))
        wait_for("requests in flight", lambda: server.requests >= 2 and (out / "manifest.json").exists(), proc=first)
        before = sorted(p.name for p in out.iterdir())
        second = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(out), *flags, timeout=30)
        assert second.returncode == 2, second.stderr
        (line,) = second.stderr.splitlines()[-1:]
        assert line.startswith(f"shardeval: error: -o {out}: already being written by pid {first.pid} on {socket.gethostname()} ")
        assert "Traceback" not in second.stderr and "another -o" in line
        assert sorted(p.name for p in out.iterdir()) == before  # --fresh moved nothing aside
        assert server.requests == 2  # the second process asked nothing
        assert manifest(out)["state"] == "running"
        elapsed, err = stop_and_time(first, signal.SIGTERM)
    check_interrupted(out, first, err, signal.SIGTERM)


# --- 4. the local orchestrator: signals forwarded, children die with it ----------------------------


def write_local_config(tmp: Path, shards: int, parallel: int | None = None, drain_s: float = DRAIN_S) -> Path:
    path = tmp / "local.yaml"
    path.write_text(
        json.dumps(
            {
                "services": {"model": {"type": "sim", "bench": "arith", "ttft_ms": 300, "itl_ms": 5}},
                "benchmarks": [{"name": "arith", "params": {"n": 400}, "max_concurrent": 2}],
                "cluster": {"type": "local", "shards": shards, **({"parallel": parallel} if parallel else {})},
                "output": {"progress_interval_s": 0, "drain_timeout_s": drain_s},
            }
        )
    )
    return path


# The drain the tests of a whole drain allow: every request in flight (0.3 s each) ends well within it,
# even on a loaded 2-core box, so a cancelled one means the drain was cut short, not slow.
WHOLE_DRAIN_S = 15.0


@pytest.mark.parametrize("sig, shards, parallel", [(signal.SIGTERM, 2, None), (signal.SIGINT, 2, 1)])
def test_the_local_orchestrator_passes_a_stop_signal_on_and_exits_like_its_shards(tmp_path, leftovers, sig, shards, parallel):
    root = tmp_path / "run"
    proc = start("run", str(write_local_config(tmp_path, shards, parallel)), "-o", str(root))
    running = range(parallel or shards)
    for i in running:
        wait_for(f"shard {i}'s records", lambda i=i: lines(root / f"shard_{i}" / "arith" / "results.jsonl") >= 2, timeout=60, proc=proc)
    t0 = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == {signal.SIGTERM: 143, signal.SIGINT: 130}[sig], err
    assert time.monotonic() - t0 <= DRAIN_S + 2 * MARGIN_S  # the shards' drain, their servers' stop, the merge
    assert f"interrupted by {sig.name}" in err and "shards failed" not in err
    for i in running:
        m = manifest(root / f"shard_{i}")
        assert m["state"] == "interrupted" and m["reason"] == sig.name
    for i in range(len(running), shards):  # no shard starts after the signal
        assert not (root / f"shard_{i}").exists() and f"shard {i}/{shards}: not started" in err


def test_shards_and_their_servers_die_with_a_killed_local_orchestrator(tmp_path, leftovers):
    root = tmp_path / "run"
    proc = start("run", str(write_local_config(tmp_path, 2)), "-o", str(root))
    for i in range(2):
        shard = root / f"shard_{i}"
        wait_for(f"shard {i}'s records", lambda: lines(shard / "arith" / "results.jsonl") >= 2, timeout=60, proc=proc)  # noqa: B023
    shards = children(proc.pid)
    assert len(shards) == 2, shards
    pids = [*shards, *(server for pid in shards for server in children(pid))]
    assert len(pids) == 4, f"each shard runs one simulator: {pids}"
    proc.kill()  # SIGKILL: the orchestrator can pass nothing on
    proc.communicate()
    left = [pid for pid in pids if not wait_dead(pid, DRAIN_S + MARGIN_S)]
    assert not left, f"outlived their orchestrator: {left}"
    for i in range(2):  # each shard was told (SIGHUP), so it drained and said so
        m = manifest(root / f"shard_{i}")
        assert m["state"] == "interrupted" and m["reason"] == "SIGHUP"


def pipeline_into(reader: list[str], *args: str) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    """`shardeval ARGS 2>&1 | READER` as a shell starts it: both in one new process group (the
    terminal's foreground group), so a Ctrl-C (SIGINT to the group) reaches both, as it does there."""

    # A foreground job's SIGINT is the default action; a test run from a background job (`cmd &`, CI)
    # inherits it ignored, and then tee would not die: set it back, as a terminal's shell does.
    def foreground() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    sink = subprocess.Popen(reader, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, process_group=0, preexec_fn=foreground)
    launcher = subprocess.Popen(
        [sys.executable, "-m", "shardeval", *args],
        stdout=sink.stdin,
        stderr=subprocess.STDOUT,
        process_group=sink.pid,
        preexec_fn=foreground,
    )
    assert sink.stdin is not None
    sink.stdin.close()  # only the launcher holds the pipe's writing end now
    return sink, launcher


def shard_logs(root: Path) -> str:
    return "".join(p.read_text() for p in sorted(root.glob("shard_*/logs/shard.log")))


def test_ctrl_c_through_a_pipe_drains_like_without_it(tmp_path, leftovers):
    """`shardeval run cfg 2>&1 | tee log`, Ctrl-C: tee dies at once, so the launcher's next line
    meets a closed pipe. Before, that killed the launcher (exit 1, nothing printed), and its death
    sent each shard SIGTERM (PR_SET_PDEATHSIG) 0.1 s after the SIGINT, which the shards took for a
    second signal: no drain, the requests in flight lost. Now the launcher outlives its closed
    output, the shards drain, and it exits 130."""
    root = tmp_path / "run"
    tee, launcher = pipeline_into(
        ["tee", str(tmp_path / "log")], "run", str(write_local_config(tmp_path, 2, drain_s=WHOLE_DRAIN_S)), "-o", str(root)
    )
    for i in range(2):
        wait_for(f"shard {i}'s records", lambda i=i: lines(root / f"shard_{i}" / "arith" / "results.jsonl") >= 2, timeout=60)
    os.killpg(tee.pid, signal.SIGINT)
    assert tee.wait(timeout=10) == -signal.SIGINT
    assert launcher.wait(timeout=WHOLE_DRAIN_S + 2 * MARGIN_S) == 130
    logs = shard_logs(root)
    assert "SIGINT: no new requests" in logs
    assert "second" not in logs and "cancelled" not in logs and "cancelling" not in logs, logs  # every shard drained
    for i in range(2):
        m = manifest(root / f"shard_{i}")
        assert m["state"] == "interrupted" and m["reason"] == "SIGINT"
    assert (root / "merged" / "scores.json").exists()  # the launcher went on to merge, talking to no one


def test_a_launcher_that_dies_mid_drain_does_not_cut_the_drain_short(tmp_path, leftovers):
    """The launcher passes SIGINT on, then is killed outright (the OOM killer, a kill -9): the
    kernel sends each shard SIGHUP for its death (once for each thread of the launcher's that dies:
    the shard saw two SIGTERMs when it was SIGTERM). That is no one asking for haste, so it is not
    the shards' second signal: each drains what it has in flight and says so."""
    root = tmp_path / "run"
    proc = start("run", str(write_local_config(tmp_path, 2, drain_s=WHOLE_DRAIN_S)), "-o", str(root))
    for i in range(2):
        wait_for(f"shard {i}'s records", lambda i=i: lines(root / f"shard_{i}" / "arith" / "results.jsonl") >= 2, timeout=60, proc=proc)
    pids = children(proc.pid)
    proc.send_signal(signal.SIGINT)
    wait_for("the shards to hear SIGINT", lambda: shard_logs(root).count("SIGINT: no new requests") == 2, timeout=10)
    proc.kill()
    proc.communicate()
    assert all(wait_dead(pid, WHOLE_DRAIN_S + MARGIN_S) for pid in pids)
    logs = shard_logs(root)
    assert logs.count("SIGHUP: the launcher or terminal has gone; the drain goes on") >= 2, logs
    assert "second" not in logs and "cancelled" not in logs and "cancelling" not in logs, logs
    for i in range(2):
        m = manifest(root / f"shard_{i}")
        assert m["state"] == "interrupted" and m["reason"] == "SIGINT"


def test_a_reader_that_stops_reading_does_not_stop_the_run(tmp_path, leftovers):
    """`shardeval run cfg | head -c 1`: the reader leaves after one byte and no signal comes. The
    run goes on to the end, every shard complete, exit 0; what it prints goes nowhere."""
    cfg = tmp_path / "small.yaml"
    cfg.write_text(
        json.dumps(
            {
                "services": {"model": {"type": "sim", "bench": "arith", "ttft_ms": 20}},
                "benchmarks": [{"name": "arith", "params": {"n": 40}, "max_concurrent": 2}],
                "cluster": {"type": "local", "shards": 2},
                "output": {"progress_interval_s": 0},
            }
        )
    )
    root = tmp_path / "run"
    head, launcher = pipeline_into(["head", "-c", "1"], "run", str(cfg), "-o", str(root))
    assert head.wait(timeout=30) == 0
    assert launcher.wait(timeout=120) == 0
    for i in range(2):
        m = manifest(root / f"shard_{i}")
        assert m["state"] == "complete", m
    assert json.loads((root / "merged" / "scores.json").read_text())


def test_an_export_to_a_reader_that_stops_reading_ends_quietly(tmp_path):
    """`shardeval export RUN -o - | head -c 100`: the rows outgrow the pipe, the reader leaves; the
    export stops writing, with no traceback and exit 0 (a BrokenPipeError escaped before)."""
    from shard_factory import make_shard

    make_shard(str(tmp_path / "run"), 0, 1, n_problems=5000)
    head, export = pipeline_into(["head", "-c", "100"], "export", str(tmp_path / "run"), "--format", "jsonl", "-o", "-")
    assert head.wait(timeout=60) == 0
    assert export.wait(timeout=120) == 0


# --- 5. --fresh: the new run logs into the new logs/shard.log -------------------------------------


def test_fresh_logs_into_the_new_shard_log_not_the_superseded_one(tmp_path, sim):
    cfg = write_config(tmp_path, sim, n=6, concurrency=2)
    out = tmp_path / "out"
    summary = "shard 0/1 arith: problems"
    assert shardeval_cmd("run", str(cfg), "-o", str(out)).returncode == 0
    fresh = shardeval_cmd("run", str(cfg), "-o", str(out), "--fresh", "-O", "benchmarks.0.repeats=2")
    assert fresh.returncode == 0, fresh.stderr
    (old,) = (out / "superseded").iterdir()
    assert (old / "logs" / "shard.log").read_text().count(summary) == 1  # the first run's, untouched
    new = (out / "logs" / "shard.log").read_text()
    assert new.count(summary) == 1 and "12/12 ok" in new
    assert not (old / "shard.lock").exists() and (out / "shard.lock").exists()  # the writer's lock stays put
