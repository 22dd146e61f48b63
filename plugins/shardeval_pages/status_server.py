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
from typing import Any, Callable

import msgspec
from aiohttp import web

from shardeval.api import NOTHING_YET, Followed, MetricOptions, SweepStatus, UsageError, collect_or_nothing, plugin_status
from shardeval_pages.page import FOUR_DECIMALS, document

log = logging.getLogger("shardeval")

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.2em 2em;color:#1d232b;background:#fafbfc}
h1{font-size:1.3em;margin:0 .6em 0 0;display:inline}header{margin-bottom:.8em}
#updated{color:#667;margin-left:1em}#error{background:#fde8e8;border:1px solid #e0a0a0;padding:.5em .8em;white-space:pre-wrap}
.stale{opacity:.55}table{border-collapse:collapse;margin:.4em 0 1.2em;background:#fff}
th,td{border:1px solid #dde1e6;padding:.25em .6em;text-align:right;vertical-align:top}th{background:#f0f2f5}
td.l,th.l{text-align:left}progress{width:9em;vertical-align:middle}.ci{color:#556;font-size:.9em}
.s-running{color:#0b62c4}.s-complete{color:#17803d}.s-lost,.s-failed{color:#c4210b;font-weight:600}
.s-interrupted{color:#b86e00}.warn{color:#b86e00}.s-not-started{color:#889}.err{color:#c4210b}ul.notes{padding-left:1.2em}ul.notes li{white-space:pre-wrap}
pre{background:#fff;border:1px solid #dde1e6;padding:.5em}h2{font-size:1.1em;margin:.6em 0 .2em}
"""

SCRIPT = '\n"use strict";\n' + FOUR_DECIMALS + r"""
// Every string goes in as a text node or a property: never innerHTML.
function el(tag, props, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k.startsWith("data-")) e.setAttribute(k, String(v)); else e[k] = v;
  }
  for (const c of kids) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  return e;
}
const text = (s) => el("bdi", {}, s);  // names may hold RTL marks: isolate them
const rate = (r) => (r ? r.toFixed(1) : "—");
const eta = (s) => (s === null || s === undefined ? "—" : s.toFixed(0) + "s");
const fmt = (x) => (x === null || x === undefined ? "—" : fourDecimals(x));  // as the text status rounds
const k = (key, value) => el("span", {"data-k": key}, value);
const bar = (done, total) => el("progress", {value: Math.min(done, total), max: Math.max(total, 1)});
const row = (key, cells) => el("tr", {"data-row": key}, ...cells.map((c) => (c instanceof Node && c.tagName === "TD" ? c : el("td", {}, c))));
const td = (cls, ...kids) => el("td", {className: cls}, ...kids);
const table = (heads, rows) => el("table", {}, el("tr", {}, ...heads.map((h, i) => el("th", {className: i ? "" : "l"}, h))), ...rows);
const state = (s) => el("span", {className: "s-" + s.replace(" ", "-"), "data-k": "state"}, s);
const errors = (n) => el("span", {className: n ? "err" : "", "data-k": "errors"}, n);
const counts = (x) => [bar(x.records, x.expected), el("span", {}, k("records", x.records), "/", k("expected", x.expected))];

function accuracy(b) {
  if (!b.value) return [k("metric", b.metric || "—"), ""];
  const v = b.value;
  return [el("span", {}, k("value", fmt(v.value)), " ", el("span", {className: "ci"}, "[", k("ci_low", fmt(v.ci_low)), ", ",
          k("ci_high", fmt(v.ci_high)), "]")), el("span", {className: "ci"}, k("ci_method", v.ci_method), " n=", k("n", v.n))];
}

// A reasoning model's answers cut off while thinking, counted apart (the benchmark's `reasoning`,
// present only where it has thinking or cut-off replies): "truncated while thinking: 3 of 40".
function thinking(b) {
  const r = b.reasoning;
  if (!r) return null;
  return el("span", {className: r.truncated_reasoning ? "warn" : "", "data-k": "reasoning"}, "truncated while thinking: ",
            k("truncated_reasoning", r.truncated_reasoning), " of ", k("n_answered", r.n_answered));
}

function shardTable(run, prefix) {
  const rows = run.shards.map((p) => row(prefix + "shard:" + p.idx + ":" + p.path, [
    td("l", k("idx", p.idx)), td("l", state(p.state)), ...counts(p), errors(p.errors), k("rate", rate(p.rate)),
    k("eta", eta(p.eta_s)), td("l", text(p.path))]));
  for (const m of run.missing) rows.push(row(prefix + "shard:" + m.idx + ":", [td("l", k("idx", m.idx)), td("l", state("not started")),
    "", "", "", "", "", td("l", text(m.where))]));
  return table(["shard", "state", "progress", "records", "errors", "req/s", "eta", "directory"], rows);
}

function notes(run, who) {
  const out = [];
  for (const p of run.shards) { if (p.note) out.push(who + p.note); for (const w of p.warnings) out.push(who + w); }
  for (const m of run.missing) if (who) out.push(who + "shard " + m.idx + " not started");
  for (const t of run.mixed) out.push(who + "warning: shards served by different models: " + t + " (merge refuses them)");
  for (const b of run.benchmarks) for (const t of b.problems) out.push(who + b.name + ": " + t);
  return out;
}

function total(done, all, suffix, ...more) {
  return el("p", {"data-row": "total"}, bar(done, all), " total: ", k("done", done), "/", k("total", all), " records (",
            all ? (100 * done / all).toFixed(1) + "%" : "—", ")" + suffix, ...more);
}

function runView(run) {
  const reasoning = run.benchmarks.some((b) => b.reasoning);  // the column only where a benchmark thinks
  const benches = run.benchmarks.map((b) => row("bench:" + b.name, [td("l", text(b.name)), ...counts(b), errors(b.errors),
    ...accuracy(b), ...(reasoning ? [td("l", thinking(b))] : []), k("rate", rate(b.rate)), k("eta", eta(b.eta_s))]));
  return [total(run.done, run.total, ""),
          el("h2", {}, "benchmarks"), table(["benchmark", "progress", "records", "errors", "running accuracy [" + CONFIDENCE + " interval]", "method",
                                             ...(reasoning ? ["reasoning"] : []), "req/s", "eta"], benches),
          el("h2", {}, "shards"), shardTable(run, ""), notes(run, "")];
}

function sweepView(sw, open) {
  const names = [];
  for (const m of sw.models) if (m.run) for (const b of m.run.benchmarks) if (!names.includes(b.name)) names.push(b.name);
  const rows = sw.models.map((m) => {
    if (!m.run) return row("model:" + m.name, [td("l", text(m.name)), ...names.map(() => td("", state("not started"))), "—", "not started"]);
    const byName = Object.fromEntries(m.run.benchmarks.map((b) => [b.name, b]));
    const cells = names.map((n) => {
      const b = byName[n];
      if (!b) return td("", "—");
      const [value, method] = accuracy(b);
      return el("td", {"data-row": "grid:" + m.name + ":" + n, className: "l"}, counts(b)[0], " ", counts(b)[1], el("br"),
                "errors ", errors(b.errors), " · eta ", k("eta", eta(b.eta_s)), el("br"), value, el("br"), method,
                ...(b.reasoning ? [el("br"), thinking(b)] : []));
    });
    const summary = Object.entries(m.run.states).map(([s, n]) => n + " " + s).join(", ");
    const rate0 = m.run.benchmarks.length ? m.run.benchmarks[0].rate : null;
    return row("model:" + m.name, [td("l", text(m.name), m.name === sw.baseline ? " (baseline)" : ""), ...cells, rate(rate0), td("l", summary)]);
  });
  const details = sw.models.filter((m) => m.run).map((m) => el("details", {open: open.has(m.name), "data-model": m.name},
    el("summary", {}, "shards of ", text(m.name)), shardTable(m.run, m.name + ":")));
  const counted = sw.not_started ? ", " + sw.not_started + " model(s) not started counted at a started one's size" : "";
  return [total(sw.done, sw.total, " of the whole sweep" + counted + " · ", k("rate", rate(sw.rate)), " req/s · eta ",
                k("eta", eta(sw.eta_s))),
          el("p", {}, "sweep: " + sw.services.length + " models x " + sw.shards + " shard(s), baseline ", text(sw.baseline)),
          table(["model", ...names, "req/s", "shards"], rows), ...details,
          sw.models.flatMap((m) => (m.run ? notes(m.run, m.name + ": ") : []))];
}

let interval = 2, updates = 0, CONFIDENCE = "95%";
function show(doc) {
  const view = document.getElementById("view"), err = document.getElementById("error");
  document.getElementById("root").textContent = doc.root;
  err.hidden = !doc.error;
  err.textContent = doc.error || "";
  const when = new Date(doc.updated_at * 1000).toLocaleTimeString();
  document.getElementById("updated").textContent = "read at " + when + " in " + doc.compute_s.toFixed(2) + " s";
  if (doc.error) { view.classList.add("stale"); return; }
  view.classList.remove("stale");
  const open = new Set(Array.from(view.querySelectorAll("details[open]")).map((d) => d.dataset.model));
  const parts = doc.sweep ? sweepView(doc.sweep, open) : doc.run ? runView(doc.run) : [el("p", {}, doc.waiting || ""), []];
  const lines = parts.pop().concat(doc.extra);
  if (lines.length) parts.push(el("h2", {}, "notes"), el("ul", {className: "notes"}, ...lines.map((t) => el("li", {}, text(t)))));
  view.replaceChildren(...parts);
  document.body.dataset.updates = String(++updates);
}

async function poll() {
  try {
    const r = await fetch("status.json", {cache: "no-store"});
    if (!r.ok) throw new Error("HTTP " + r.status);
    const doc = await r.json();
    interval = doc.interval_s || interval;
    CONFIDENCE = Math.round(doc.confidence * 100) + "%";
    show(doc);
  } catch (e) {
    const err = document.getElementById("error");
    err.hidden = false;
    err.textContent = "cannot read status.json from the server: " + e.message + " (retrying)";
    document.getElementById("view").classList.add("stale");
  }
  setTimeout(poll, interval * 1000);
}
poll();
"""

PAGE = document("shardeval status", '<header><h1>shardeval status</h1><bdi id="root"></bdi><span id="updated">loading…</span>'
                '</header>\n<p id="error" hidden></p><main id="view"></main>',
                style=STYLE, scripts=(SCRIPT,), head='<link rel="icon" href="data:,">\n').encode()


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
        self._followed = Followed()  # used by the one worker thread only

    def compute(self) -> bytes:
        """The JSON document: {root, interval_s, confidence, updated_at, compute_s, error, run | sweep |
        waiting (nothing written yet, while plugins report), extra}."""
        t0 = time.perf_counter()
        doc: dict[str, Any] = {"root": self.root, "interval_s": self.interval, "confidence": MetricOptions().confidence,
                               "updated_at": time.time(), "error": None,
                               "run": None, "sweep": None, "waiting": None, "extra": []}
        try:
            doc["extra"] = plugin_status(self.root)
            s = collect_or_nothing(self.root, doc["extra"], metrics=True, followed=self._followed)
            if s is None:
                doc["waiting"] = NOTHING_YET
            else:
                doc["sweep" if isinstance(s, SweepStatus) else "run"] = s
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
            return web.Response(status=421, text=f"shardeval status: refused: Host {shown!r} is not a name of this server "
                                                 "(a guard against DNS rebinding); open the URL `status --serve` printed\n",
                                headers=HEADERS)
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
                "shardeval status: answered a malformed request with %s: %s", (exc.code, " ".join(str(exc.message).split())), None, None)
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
        fix = ("pick another port (--port 0 takes a free one)" if exc.errno in (errno.EADDRINUSE, errno.EACCES)
               else "give --host an address of this machine (127.0.0.1, 0.0.0.0 for every interface, or one of its own)")
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
        print(f"shardeval status: warning: {root} does not exist yet; the page shows the run once a shard writes there",
              file=sys.stderr, flush=True)
    asyncio.run(serve(root, host, port, interval, lambda line: print(line, flush=True)))
