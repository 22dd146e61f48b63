"""Servers the tests start for a `with` block: an aiohttp app on 127.0.0.1 in a thread (a
misbehaving or recording endpoint written in the test), and a real `shardeval status --serve`."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

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
    proc = subprocess.Popen([sys.executable, "-m", "shardeval", "status", str(root), "--serve", "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
            raise AssertionError("status --serve did not stop within 10 s of SIGTERM")
    assert proc.returncode == 0 and "Traceback" not in err, err
