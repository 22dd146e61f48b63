"""`shardeval status DIR --serve`: a live page of a run's or a sweep's progress and running accuracy.

The page (PAGE below: no CDN, no request but its own `status.json`) polls the JSON endpoint. The
numbers come from shardeval.results.status.collect, the data the text command prints, with each
benchmark's running accuracy from merge's scan and the metrics plugin, and, where its JSON gives a
benchmark a `reasoning` object, the answers cut off while thinking so far. Reading a large run takes
seconds, so the server computes in one worker thread (it keeps answering meanwhile), one
computation at a time, and reuses the result for `interval` seconds: ten open tabs cost what one
does, and a closed page costs nothing. A directory with no shard yet, a shard that vanishes
mid-read: the JSON carries `error` (HTTP 200) and the page shows it and keeps polling.
Every string reaches the page's DOM as text, never as markup; the Content-Security-Policy allows
only this page's own script and style, and requests to its own origin. A request whose Host header
names another host is refused (421): a web page on evil.example whose name an attacker rebinds to
127.0.0.1 would otherwise read the run from the visitor's browser (DNS rebinding).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from collections.abc import Callable

import msgspec
from aiohttp import web

from shardeval.api.pages import LiveStatus
from shardeval.api.plugin import UsageError
from shardeval_pages.page import FOUR_DECIMALS, asset, document

log = logging.getLogger("shardeval")

STYLE = asset("status.css")
# The live page's script (assets/status.js), strict, with the pages' one rounding rule.
SCRIPT = '\n"use strict";\n' + FOUR_DECIMALS + asset("status.js")

PAGE = document(
    "shardeval status",
    '<header><h1>shardeval status</h1><bdi id="root"></bdi><span id="updated">loading…</span>'
    '</header>\n<p id="error" hidden></p><main id="view"></main>',
    style=STYLE,
    scripts=(SCRIPT,),
    head='<link rel="icon" href="data:,">\n',
).encode()


def _sha256(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode() + "'"


HEADERS = {
    "Content-Security-Policy": f"default-src 'none'; script-src {_sha256(SCRIPT)}; style-src {_sha256(STYLE)}; "
    "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


class Snapshots:
    """The status document of `root`, computed in one worker thread, at most once per `interval`
    seconds (counted from the end of the last computation, so a slow read leaves idle time). It
    follows the record files between computations: each reads only what the shards appended since."""

    def __init__(self, root: str, interval: float) -> None:
        self.root, self.interval = root, interval
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="shardeval-status")
        self._lock = asyncio.Lock()
        self._body, self._at = b"", float("-inf")
        self._status = LiveStatus(root)  # used by the one worker thread only: it follows the files between reads

    def compute(self) -> bytes:
        """The JSON document: {root, interval_s, confidence, updated_at, compute_s, error, run | sweep |
        waiting (nothing written yet, while plugins report), extra}."""
        t0 = time.perf_counter()
        doc: dict[str, Any] = {
            "root": self.root,
            "interval_s": self.interval,
            "confidence": self._status.confidence,
            "updated_at": time.time(),
            "error": None,
            "run": None,
            "sweep": None,
            "waiting": None,
            "extra": [],
        }
        try:
            self._status.fill(doc)
        except UsageError as exc:  # no shard yet, or not a run: said on the page, asked again next time
            doc["error"] = str(exc)
        except Exception as exc:  # a shard moved or half-written while read: the next read will see it whole
            log.warning("status of %s: %s: %s", self.root, type(exc).__name__, exc)
            doc["error"] = f"reading {self.root} failed: {type(exc).__name__}: {exc} (retrying)"
        doc["compute_s"] = time.perf_counter() - t0
        try:
            return msgspec.json.encode(doc)
        except UnicodeEncodeError:  # a file name that is not UTF-8 (kept as surrogates): JSON escapes them
            import json

            return json.dumps(msgspec.to_builtins(doc)).encode()

    async def get(self) -> bytes:
        async with self._lock:  # requests that arrive during a computation wait for its result
            if time.monotonic() - self._at >= self.interval:
                self._body = await asyncio.get_running_loop().run_in_executor(self._pool, self.compute)
                self._at = time.monotonic()
            return self._body

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def allowed_hosts(host: str) -> tuple[frozenset[str], bool]:
    """The host names a request may carry in its Host header when the server listens on `host`,
    and whether any IP literal is allowed too (listening on every interface: any of the machine's
    addresses may be used, and an address typed as such cannot be rebound by DNS).

    Loopback: 127.0.0.1, localhost and [::1]. Another address or name: itself and the machine's
    names (the one `--serve` prints, its fully qualified one), plus the loopback names."""
    import ipaddress
    import socket

    name = _normal(host)
    try:
        loopback = name == "localhost" or ipaddress.ip_address(name).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        return LOOPBACK_NAMES | {name}, False
    machine = {_normal(socket.gethostname()), _normal(socket.getfqdn())}
    every = name in ("0.0.0.0", "::", "")
    return frozenset(LOOPBACK_NAMES | machine | ({name} if not every else set())), every


def _normal(name: str) -> str:
    """Host names compare without case and without the root's trailing dot (`LOCALHOST.` = localhost)."""
    name = name.strip().lower()
    return name[:-1] if name.endswith(".") and not name.endswith("..") else name


def host_of(header: str | None) -> str | None:
    """The host name of a Host header value (`name`, `name:port`, `[v6]:port`), or None when it is
    missing or not of that form. The port is not checked: a tunnel may map another one, and a
    rebinding attack is in the name."""
    if not header:
        return None
    if header.startswith("["):
        name, bracket, rest = header[1:].partition("]")
        if not bracket or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        return _normal(name)
    name, colon, port = header.partition(":")
    if (colon and not port.isdigit()) or not name or any(c in name for c in " /\\@"):
        return None
    return _normal(name)


def host_guard(host: str) -> Any:
    """aiohttp middleware: 421 for a request whose Host header names no host this server answers as."""
    import ipaddress

    names, any_ip = allowed_hosts(host)

    @web.middleware
    async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
        name = host_of(request.headers.get("Host"))
        ok = name is not None and name in names
        if not ok and name is not None and any_ip:
            try:
                ipaddress.ip_address(name)
                ok = True
            except ValueError:
                pass
        if not ok:
            shown = request.headers.get("Host")
            return web.Response(
                status=421,
                text=f"shardeval status: refused: Host {shown!r} is not a name of this server "
                "(a guard against DNS rebinding); open the URL `status --serve` printed\n",
                headers=HEADERS,
            )
        return await handler(request)

    return guard


class _OneLineBadRequests(logging.Filter):
    """A malformed request (no Host header in HTTP/1.1, bad syntax) is answered 400 by aiohttp, which
    logs it with a traceback: a client's mistake is one line on our stderr, not a stack."""

    def filter(self, record: logging.LogRecord) -> bool:
        from aiohttp.http_exceptions import HttpProcessingError

        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            record.msg, record.args, record.exc_info, record.exc_text = (
                "shardeval status: answered a malformed request with %s: %s",
                (exc.code, " ".join(str(exc.message).split())),
                None,
                None,
            )
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def make_app(snapshots: Snapshots, host: str = "127.0.0.1") -> web.Application:
    """The page and its JSON, answering only requests addressed to `host` (the address listened on)."""

    async def page(request: web.Request) -> web.Response:
        return web.Response(body=PAGE, content_type="text/html", charset="utf-8", headers=HEADERS)

    async def status_json(request: web.Request) -> web.Response:
        return web.Response(body=await snapshots.get(), content_type="application/json", headers=HEADERS)

    app = web.Application(middlewares=[host_guard(host)])
    app.router.add_get("/", page)
    app.router.add_get("/status.json", status_json)
    return app


async def serve(root: str, host: str, port: int, interval: float, announce: Callable[[str], None]) -> None:
    """Serve until SIGTERM or SIGINT; announce the URL once connections are accepted."""
    snapshots = Snapshots(root, interval)
    bad_requests = _OneLineBadRequests()
    logging.getLogger("aiohttp.server").addFilter(bad_requests)
    runner = web.AppRunner(make_app(snapshots, host), access_log=None, handle_signals=False)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, shutdown_timeout=0.5).start()
    except OSError as exc:
        import errno

        await runner.cleanup()
        why = exc.strerror or str(exc) or type(exc).__name__
        fix = (
            "pick another port (--port 0 takes a free one)"
            if exc.errno in (errno.EADDRINUSE, errno.EACCES)
            else "give --host an address of this machine (127.0.0.1, 0.0.0.0 for every interface, or one of its own)"
        )
        raise UsageError(f"--host {host} --port {port}: cannot listen: {why}; {fix}") from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if host in ("0.0.0.0", "::", ""):  # every interface: name the machine, which others can reach
        import socket

        host = socket.gethostname()
    shown = f"[{host}]" if ":" in host else host
    announce(f"shardeval status: {root} on http://{shown}:{runner.addresses[0][1]}/ (Ctrl-C stops)")
    try:
        await stop.wait()
    finally:
        snapshots.close()
        await runner.cleanup()
        logging.getLogger("aiohttp.server").removeFilter(bad_requests)


def run_server(root: str, host: str, port: int, interval: float) -> None:
    """Serve the page; a directory that does not exist yet (the run is being launched) is waited for."""
    if not os.path.isdir(root):
        print(
            f"shardeval status: warning: {root} does not exist yet; the page shows the run once a shard writes there",
            file=sys.stderr,
            flush=True,
        )
    asyncio.run(serve(root, host, port, interval, lambda line: print(line, flush=True)))
