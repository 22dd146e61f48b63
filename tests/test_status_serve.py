"""`shardeval status DIR --serve` in headless Chromium, against real runs in progress.

Every server is a real process: the simulator, `shardeval run` shards (one SIGKILLed and rerun),
a sweep through the local orchestrator, and `shardeval status --serve` itself. The page must show
counts that advance, the lost shard and then its progress again, the numbers of its own JSON and
of `shardeval status`, the accuracy `shardeval merge` computes, hostile strings as text, and make
no console error and no request off its own origin.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import msgspec
import pytest

from browser import browser, visit  # noqa: F401  (browser is a fixture)
from conftest import api_eval_config, running_sim, shardeval_cmd
from served import status_serve
from shard_factory import make_shard

VIEW = (1100, 700)
SLOW_SIM = ("--bench", "arith", "--accuracy", "0.7", "--ttft-ms", "60", "--itl-ms", "1", "--output-tokens", "4")

# {data-row: {data-k: text}} of everything the page shows as numbers
ROWS = """() => Object.fromEntries(Array.from(document.querySelectorAll('[data-row]')).map(r => [r.dataset.row,
  Object.fromEntries(Array.from(r.querySelectorAll('[data-k]')).map(e => [e.dataset.k, e.textContent]))]))"""
UPDATES = "() => +(document.body.dataset.updates || 0)"


@contextmanager
def serving(root: Path, interval: float = 0.3) -> Iterator[str]:
    """`shardeval status ROOT --serve --port 0`; yield its URL (on 127.0.0.1); SIGTERM it after."""
    with status_serve(root, "--interval", str(interval)) as url:
        assert url.startswith("http://127.0.0.1:"), url
        yield url


def fetch_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "status.json", timeout=30) as r:
        return json.loads(r.read())


def wait_page(v, predicate: str, timeout_s: float = 30) -> None:
    v.page.wait_for_function(predicate, timeout=timeout_s * 1000)


def rows(v) -> dict[str, dict[str, str]]:
    return v.page.evaluate(ROWS)


def shown_after_next_update(v) -> dict[str, dict[str, str]]:
    """The page's numbers once it has rendered a document read after this call."""
    n = v.page.evaluate(UPDATES)
    wait_page(v, f"() => +(document.body.dataset.updates || 0) >= {n + 2}")
    return rows(v)


def text_rows(root: Path) -> dict[int, list[str]]:
    """`shardeval status ROOT`'s shard rows: idx -> [state, records/expected, errors, …]."""
    out = shardeval_cmd("status", str(root))
    assert out.returncode == 0, out.stderr
    return {int(line.split()[0]): line.split()[1:] for line in out.stdout.splitlines() if line[:1].isdigit()}


def close(shown: str, value: float | None) -> bool:
    """A 4-digit number on the page is the JSON's value, rounded."""
    return (shown == "—") if value is None else abs(float(shown) - value) <= 0.5e-4 + 1e-12


def check_accuracy(shown: dict[str, str], metric: dict[str, Any], merged: dict[str, Any]) -> None:
    """Page == JSON for value and interval; JSON == what `shardeval merge` wrote in scores.json."""
    for key in ("value", "ci_low", "ci_high"):
        assert close(shown[key], metric[key]), (key, shown, metric)
        assert metric[key] == pytest.approx(merged[key], abs=1e-12), (key, metric, merged)
    assert shown["ci_method"] == metric["ci_method"] == merged["ci_method"] and int(shown["n"]) == metric["n"] == merged["n"]


def start_shard(cfg: Path, out: Path, i: int, total: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "shardeval", "run", str(cfg), "--shard", f"{i}/{total}", "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(procs: list[subprocess.Popen[str]], timeout: float = 90) -> None:
    for p in procs:
        _, err = p.communicate(timeout=timeout)
        assert p.returncode == 0, err


def test_a_run_in_progress_advances_survives_a_killed_shard_and_agrees_with_json_text_and_merge(browser, tmp_path: Path) -> None:
    """Two shards against a slow simulator. Before any shard: the page says so. Then the counts
    advance; shard 0 is SIGKILLed (the page shows it lost, with the same numbers as the JSON and
    `shardeval status`), rerun (it resumes: running, then more records); at the end every number
    equals the JSON and the text, and the accuracy and its interval equal the merge's."""
    run = tmp_path / "run"
    run.mkdir()
    procs: list[subprocess.Popen[str]] = []
    with running_sim(*SLOW_SIM) as sim_url, serving(run) as url, visit(browser, url, viewport=VIEW) as v:
        try:
            wait_page(v, "() => !document.getElementById('error').hidden")
            assert "no shard directories" in v.page.text_content("#error")  # waiting for the first shard, not broken
            cfg = api_eval_config(tmp_path / "run.json", sim_url, n=300, concurrency=2)
            procs = [start_shard(cfg, run / f"shard_{i}", i, 2) for i in range(2)]
            done = "() => +(document.querySelector('[data-row=total] [data-k=done]') || {textContent: 0}).textContent"
            shard0 = "+(document.querySelector('[data-row=\"shard:0:shard_0\"] [data-k=records]') || {textContent: 0}).textContent"
            wait_page(v, f"() => {shard0} >= 5")
            first = v.page.evaluate(done)
            wait_page(v, f"() => ({done})() > {first}")  # advances while the page stays open

            procs[0].send_signal(signal.SIGKILL)
            procs[0].wait(10)
            wait_page(
                v,
                "() => Array.from(document.querySelectorAll('[data-row^=\"shard:0:\"] [data-k=state]')).some(e => e.textContent === 'lost')",
            )
            shown = shown_after_next_update(v)["shard:0:shard_0"]
            doc = fetch_json(url)
            lost = next(p for p in doc["run"]["shards"] if p["idx"] == 0)
            text = text_rows(run)[0]
            assert shown["state"] == lost["state"] == text[0] == "lost"
            assert f"{shown['records']}/{shown['expected']}" == f"{lost['records']}/{lost['expected']}" == text[1]
            assert int(shown["errors"]) == lost["errors"] == int(text[2])
            assert 0 < lost["records"] < lost["expected"]
            assert "shard 0 lost since" in v.page.text_content("ul.notes")

            procs[0] = start_shard(cfg, run / "shard_0", 0, 2)  # the rerun resumes
            wait_page(
                v,
                "() => Array.from(document.querySelectorAll('[data-row^=\"shard:0:\"]')).some(r => "
                f"r.querySelector('[data-k=state]').textContent !== 'lost' && +r.querySelector('[data-k=records]').textContent > {lost['records']})",
            )
            finish(procs)
            wait_page(v, "() => document.querySelectorAll('[data-row^=\"shard:\"] .s-complete').length === 2")
            shown, doc, text = shown_after_next_update(v), fetch_json(url), text_rows(run)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        assert v.errors() == [] and v.foreign_requests() == []
    merged = shardeval_cmd("merge", "-q", str(run))
    assert merged.returncode == 0, merged.stderr
    scores = json.loads((run / "merged" / "scores.json").read_text())["arith"]["metrics"]["accuracy"]
    for p in doc["run"]["shards"]:
        row, line = shown[f"shard:{p['idx']}:{p['path']}"], text_rows(run)[p["idx"]]
        assert (row["state"], f"{row['records']}/{row['expected']}", int(row["errors"])) == (
            p["state"],
            f"{p['records']}/{p['expected']}",
            p["errors"],
        )
        assert line[:3] == [p["state"], f"{p['records']}/{p['expected']}", str(p["errors"])] == text[p["idx"]][:3]
    assert (shown["total"]["done"], shown["total"]["total"]) == (str(doc["run"]["done"]), str(doc["run"]["total"])) == ("300", "300")
    bench = doc["run"]["benchmarks"][0]
    assert (shown["bench:arith"]["records"], shown["bench:arith"]["errors"]) == (str(bench["records"]), str(bench["errors"]))
    check_accuracy(shown["bench:arith"], bench["value"], scores)


HOSTILE_BENCH = "<img src=x onerror=alert(1)>\"'\u200fبنچ"  # a directory name: no slash
HOSTILE_ROOT = "<script>alert(1)</script>\"'\u200f\u202e"


def test_hostile_names_and_warnings_are_shown_as_text(browser, tmp_path: Path) -> None:
    """A benchmark named with markup, quotes and RTL marks, an endpoint that reported markup as its
    weights (the mixed-models warning quotes it), a shard directory whose name is not UTF-8: all
    shown as text, nothing injected or run."""
    from shardeval.store.records import ServedModel, read_manifest, write_manifest

    root = tmp_path / "run"
    for i, weights in ((0, "/w/a"), (1, HOSTILE_ROOT)):
        # shard 1's directory name is not UTF-8 (byte 0xff): Python holds it as a lone surrogate
        path = make_shard(str(root), i, 2, n_problems=20, bench=HOSTILE_BENCH, name=None if i == 0 else "shard_1_\udcff")
        m = read_manifest(path)
        write_manifest(path, msgspec.structs.replace(m, served={"model": ServedModel(model="m", root=weights)}))
    with serving(root) as url, visit(browser, url, viewport=VIEW) as v:
        dialogs: list[str] = []
        v.page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        wait_page(v, "() => +(document.body.dataset.updates || 0) >= 1")
        body = v.page.text_content("body")
        assert HOSTILE_BENCH in body and HOSTILE_ROOT in body
        assert v.page.evaluate(
            "() => [document.querySelector('img'), document.querySelectorAll('script').length, document.querySelector('[onerror]')]"
        ) == [None, 1, None]
        shown = v.page.evaluate(
            "name => Array.from(document.querySelectorAll('[data-row]')).find(r => r.dataset.row === 'bench:' + name)"
            ".querySelector('bdi').textContent",
            HOSTILE_BENCH,
        )
        assert shown == HOSTILE_BENCH
        assert rows(v)["shard:1:shard_1_\udcff"]["state"] == "complete"  # shown (the byte as a lone surrogate)
        doc = fetch_json(url)
        assert doc["run"]["benchmarks"][0]["name"] == HOSTILE_BENCH and HOSTILE_ROOT in doc["run"]["mixed"][0]
        assert v.errors() == [] and v.foreign_requests() == [] and dialogs == []


def test_shards_that_appear_and_vanish_keep_the_page_working(browser, tmp_path: Path) -> None:
    """An empty directory, then a shard, then a second, then the first moved away and a manifest
    cut in half: the page follows each step or shows the error, and keeps polling (no 500)."""
    root = tmp_path / "run"
    root.mkdir()
    with serving(root, interval=0.2) as url, visit(browser, url, viewport=VIEW) as v:
        wait_page(v, "() => !document.getElementById('error').hidden")
        make_shard(str(root), 0, 2, n_problems=10)
        wait_page(v, "() => document.querySelector('[data-row=\"shard:0:shard_0\"]') !== null")
        assert rows(v)["shard:1:"]["state"] == "not started"
        make_shard(str(root), 1, 2, n_problems=10, state="running")
        wait_page(v, "() => document.querySelector('[data-row=\"shard:1:shard_1\"]') !== null")
        shutil.move(root / "shard_0", tmp_path / "elsewhere")
        wait_page(v, "() => document.querySelector('[data-row=\"shard:0:shard_0\"]') === null")
        manifest = root / "shard_1" / "manifest.json"
        whole = manifest.read_bytes()
        manifest.write_bytes(whole[:20])  # cut mid-write (by hand: shardeval replaces it atomically)
        wait_page(v, "() => !document.getElementById('error').hidden")
        assert "not a valid shardeval manifest" in fetch_json(url)["error"]
        manifest.write_bytes(whole)
        shutil.move(tmp_path / "elsewhere", root / "shard_0")
        wait_page(v, "() => document.getElementById('error').hidden && document.querySelector('[data-row=\"shard:0:shard_0\"]') !== null")
        assert v.errors() == [] and v.foreign_requests() == []


def _sweep_config(path: Path, urls: dict[str, str], out: Path) -> Path:
    config = {
        "services": {name: {"type": "api", "url": url, "model": "sim"} for name, url in urls.items()},
        "benchmarks": [
            {"name": "arith", "params": {"n": 60}, "max_concurrent": 2},
            {"name": "arith", "id": "arith_b", "params": {"n": 60, "seed": 3}, "max_concurrent": 2},
        ],
        "sweep": {"services": list(urls), "baseline": next(iter(urls))},
        "cluster": {"type": "local", "shards": 2, "parallel": 2},
        "output": {"dir": str(out), "progress_interval_s": 0},
    }
    path.write_text(json.dumps(config))
    return path


def test_a_sweep_in_progress_shows_the_grid_advancing_and_its_numbers(browser, tmp_path: Path) -> None:
    """Two models x two benchmarks through the local orchestrator: the grid's counts advance, and
    at the end each cell equals the JSON, `shardeval status`'s grid and each model's merged accuracy."""
    out = tmp_path / "sweep"
    out.mkdir()
    slow = ("--ttft-ms", "40", "--itl-ms", "1", "--output-tokens", "4", "--bench", "arith")
    with running_sim(*slow, "--accuracy", "0.5") as base, running_sim(*slow, "--accuracy", "0.9") as better:
        cfg = _sweep_config(tmp_path / "sweep.json", {"base": base, "better": better}, out)
        # served from the start: before the plan and the first shard exist the page says so, then fills in
        proc = subprocess.Popen(
            [sys.executable, "-m", "shardeval", "run", str(cfg)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        try:
            with serving(out) as url, visit(browser, url, viewport=VIEW) as v:
                done = "() => +(document.querySelector('[data-row=total] [data-k=done]') || {textContent: 0}).textContent"
                wait_page(v, f"() => ({done})() >= 5", timeout_s=60)
                first = v.page.evaluate(done)
                # the bar counts the whole sweep from the start, a model not started yet included, with its ETA
                row = v.page.evaluate(
                    "() => ({total: document.querySelector('[data-row=total] [data-k=total]').textContent, "
                    "eta: document.querySelector('[data-row=total] [data-k=eta]').textContent})"
                )
                assert row["total"] == "240" and row["eta"], row
                wait_page(v, f"() => ({done})() > {first}")
                _, err = proc.communicate(timeout=120)
                assert proc.returncode == 0, err
                wait_page(v, f"() => ({done})() === 240")
                shown, doc = shown_after_next_update(v), fetch_json(url)
                assert v.errors() == [] and v.foreign_requests() == []
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = shardeval_cmd("status", str(out))
    assert text.returncode == 0, text.stderr
    grid = {(r[0], r[1]): r for r in (line.split() for line in text.stdout.splitlines()) if len(r) > 3 and r[0] in ("base", "better")}
    assert [m["name"] for m in doc["sweep"]["models"]] == ["base", "better"]
    for m in doc["sweep"]["models"]:
        scores = json.loads((out / m["name"] / "merged" / "scores.json").read_text())
        for b in m["run"]["benchmarks"]:
            cell = shown[f"grid:{m['name']}:{b['name']}"]
            assert (cell["records"], cell["expected"], cell["errors"]) == (str(b["records"]), str(b["expected"]), str(b["errors"]))
            assert grid[m["name"], b["name"]][2:4] == [f"{b['records']}/{b['expected']}", str(b["errors"])]
            check_accuracy(cell, b["value"], scores[b["name"]]["metrics"]["accuracy"])
    assert doc["sweep"]["done"] == doc["sweep"]["total"] == 240


# --- the server itself -----------------------------------------------------------------------------


def test_one_computation_at_a_time_cached_and_the_server_answers_meanwhile(tmp_path: Path) -> None:
    """Twenty requests during a slow read cost one computation; the page itself is served while the
    thread reads; the next read starts only after `interval`."""
    import aiohttp
    from aiohttp import web

    from shardeval_pages.status_server import Snapshots, make_app

    make_shard(str(tmp_path), 0, 1, n_problems=10)
    calls: list[float] = []

    class Slow(Snapshots):
        def compute(self) -> bytes:
            calls.append(time.monotonic())
            time.sleep(0.8)
            return super().compute()

    async def scenario() -> None:
        snapshots = Slow(str(tmp_path), interval=1.0)
        runner = web.AppRunner(make_app(snapshots))
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        base = f"http://127.0.0.1:{runner.addresses[0][1]}/"
        try:
            async with aiohttp.ClientSession() as session:

                async def get(path: str) -> bytes:
                    async with session.get(base + path) as r:
                        assert r.status == 200
                        return await r.read()

                jsons = [asyncio.create_task(get("status.json")) for _ in range(20)]
                await asyncio.sleep(0.1)
                t0 = time.monotonic()
                assert b"<script>" in await get("")
                assert time.monotonic() - t0 < 0.5  # answered while the thread reads
                bodies = await asyncio.gather(*jsons)
                assert len(calls) == 1 and len(set(bodies)) == 1
                await get("status.json")
                assert len(calls) == 1  # cached
                await asyncio.sleep(1.1)
                await get("status.json")
                assert len(calls) == 2
        finally:
            snapshots.close()
            await runner.cleanup()

    with ThreadPoolExecutor(1) as pool:  # its own thread: Playwright's sync API may hold this one's event loop
        pool.submit(lambda: asyncio.run(scenario())).result(timeout=60)


def test_a_directory_not_there_yet_is_waited_for_and_bad_input_is_one_line(tmp_path: Path) -> None:
    with serving(tmp_path / "not_yet") as url:  # a run being launched: its directory comes a moment later
        assert "not_yet: no such directory" in fetch_json(url)["error"]
        port = url.rsplit(":", 1)[1].strip("/")
        taken = shardeval_cmd("status", str(tmp_path), "--serve", "--port", port, timeout=30)
    assert taken.returncode == 2 and taken.stderr.count("\n") == 1, taken.stderr
    assert f"--port {port}: cannot listen" in taken.stderr and "Traceback" not in taken.stderr
    bad = shardeval_cmd("status", str(tmp_path), "--serve", "--interval", "0", timeout=30)
    assert bad.returncode == 2 and "--interval" in bad.stderr
    alone = shardeval_cmd("status", str(tmp_path), "--port", "8080", timeout=30)
    assert alone.returncode == 2 and alone.stderr.count("\n") == 1 and "--port: only with --serve" in alone.stderr


def test_a_value_halfway_between_two_shown_numbers_reads_as_the_text_rounds_it(browser, tmp_path: Path) -> None:
    """1/32 = 0.03125 shows as 0.0312 on the live page, as Python rounds it in the text and the
    Markdown (the exact value, a tie to even), not as JavaScript's toFixed would (0.0313)."""
    root = tmp_path / "run"
    make_shard(str(root), 0, 1, n_problems=32, score=lambda p, r: float(p == 0))
    with serving(root) as url, visit(browser, url, viewport=VIEW) as v:
        wait_page(v, "() => document.querySelector('[data-row=\"bench:arith\"] [data-k=value]') !== null")
        assert fetch_json(url)["run"]["benchmarks"][0]["value"]["value"] == 0.03125
        assert rows(v)["bench:arith"]["value"] == "0.0312"
