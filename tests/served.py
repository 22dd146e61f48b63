"""Servers the tests start for a `with` block: an aiohttp app on 127.0.0.1 in a thread (a
misbehaving or recording endpoint written in the test), a proxy that records what reaches a
server, and a real `shardeval status --serve`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import aiohttp
from aiohttp import web


@contextmanager
def app_in_thread(app: web.Application, **runner_options: Any) -> Iterator[str]:
    """Serve `app` on 127.0.0.1 (a free port) from its own event loop in a thread; yield its
    origin (http://127.0.0.1:PORT); stop it when the block ends."""
    ready, loop, origin = threading.Event(), asyncio.new_event_loop(), []
    stop = asyncio.Event()

    async def main() -> None:
        runner = web.AppRunner(app, shutdown_timeout=0.1, **runner_options)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        origin.append(f"http://127.0.0.1:{runner.addresses[0][1]}")
        ready.set()
        await stop.wait()
        await runner.cleanup()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(10), "the test server did not start"
    try:
        yield origin[0]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)


@contextmanager
def status_serve(root: Path, *args: str) -> Iterator[str]:
    """`shardeval status ROOT --serve --port 0 ARGS`; yield the URL it prints; SIGTERM it after
    (it must exit 0 within 10 s, without a traceback)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardeval", "status", str(root), "--serve", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert " on http://" in line, (line, proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        yield line.split(" on ", 1)[1].split()[0]
    finally:
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise AssertionError("status --serve did not stop within 10 s of SIGTERM")  # noqa: B904
    assert proc.returncode == 0 and "Traceback" not in err, err


@dataclass
class Recording:
    """What reached a server through `recording_proxy`, in arrival order."""

    url: str  # the proxy's base URL (…/v1)
    bodies: list[dict[str, Any]] = field(default_factory=list)  # POSTed JSON bodies
    authorizations: list[str] = field(default_factory=list)  # each POST's Authorization header ("" if none)

    def clear(self) -> None:
        self.bodies.clear()
        self.authorizations.clear()


@contextmanager
def recording_proxy(upstream_url: str, recording: Recording) -> Iterator[Recording]:
    """A proxy on 127.0.0.1 in front of `upstream_url` (…/v1) that records into `recording` each
    POST body and Authorization header; yields it with its `url` set."""
    upstream = upstream_url.removesuffix("/v1")

    async def forward(request: web.Request) -> web.Response:
        data = await request.read()
        if request.method == "POST":
            recording.bodies.append(json.loads(data))
            recording.authorizations.append(request.headers.get("Authorization", ""))
        async with aiohttp.ClientSession() as session:
            async with session.request(
                request.method, upstream + request.path_qs, data=data, headers={"Content-Type": request.content_type}
            ) as reply:
                return web.Response(status=reply.status, body=await reply.read(), content_type=reply.content_type)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)
    with app_in_thread(app) as origin:
        recording.url = origin + "/v1"
        yield recording


def wait_for_records(path: Path, n: int, proc: subprocess.Popen, timeout: float = 240.0) -> None:
    """Until the shard `proc` has written `n` lines to `path` (to kill it mid-run). 240 s: an lm-eval
    shard plans its whole task first, which took over 90 s on the loaded CI host once."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= n:
            return
        assert proc.poll() is None, "the shard ended before it could be killed"
        time.sleep(0.01)
    raise AssertionError(f"{path} never reached {n} lines")


def kill_shard_mid_run(args: list[str], results: Path, n: int) -> None:
    """Start `shardeval ARGS`, SIGKILL it once it has written `n` lines to `results`, and reap it."""
    import signal

    proc = subprocess.Popen([sys.executable, "-m", "shardeval", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_records(results, n, proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
