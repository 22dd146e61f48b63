"""The response cache (shardeval.run.response_cache, docs/cache.md), against real simulator and shard processes."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import REPO, running_sim, shardeval_cmd
from shardeval.run.response_cache import SEGMENTS_DIR, CacheEntry, ResponseCache

FAST = ("--bench", "arith", "--ttft-ms", "0", "--itl-ms", "0")
TIMINGS = {"ttft_s", "latency_s", "started_at", "attempts"}  # what a hit may change besides `cached`
DOCS = ["The quick brown fox jumps over the lazy dog.", "A second document, a little longer than the first one is."]


def write_config(tmp: Path, url: str, cache: Path | None, *, n: int = 12, attempts: int = 3, service: dict | None = None) -> Path:
    """arith (chat, streamed, 2 repeats) and perplexity (completions, echo logprobs, unstreamed)."""
    corpus = tmp / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS))
    config = {
        "services": {
            "model": {
                "type": "api",
                "url": url,
                "model": "sim",
                "retries": {"attempts": attempts, "backoff_base": 0.01, "backoff_max": 0.02},
                **(service or {}),
            }
        },
        "benchmarks": [
            {
                "name": "arith",
                "params": {"n": n},
                "repeats": 2,
                "max_concurrent": 8,
                "solver": {"generation": {"temperature": 0.7, "max_tokens": 64}},
            },
            {"name": "perplexity", "params": {"path": str(corpus)}},
        ],
        "output": {"progress_interval_s": 0},
        **({"cache": {"dir": str(cache)}} if cache is not None else {}),
    }
    path = tmp / "config.yaml"
    path.write_text(json.dumps(config))
    return path


def records(shard: Path, bench: str = "arith") -> list[dict]:
    path = shard / bench / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run(cfg: Path, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(out), *args)


def segments(cache: Path) -> list[Path]:
    return sorted((cache / SEGMENTS_DIR).glob("*.jsonl")) if (cache / SEGMENTS_DIR).exists() else []


def without(record: dict, keys: set[str]) -> dict:
    return {k: v for k, v in record.items() if k not in keys}


def test_a_rerun_with_the_server_stopped_completes_from_the_cache(tmp_path: Path) -> None:
    """Acceptance 3: the same records but `cached` and timings; scores.json byte-identical."""
    cache = tmp_path / "cache"
    cfg = write_config(tmp_path, "http://127.0.0.1:9/v1", cache)  # the URL is set per run below
    with running_sim(*FAST) as url:
        first = run(cfg, tmp_path / "a" / "shard_0", "-O", f"services.model.url={url}")
        assert first.returncode == 0, first.stderr
    assert "cache: 0 hit(s), 26 miss(es), 26 entr(ies) written" in first.stderr
    # the simulator is stopped now: nothing listens at its URL
    second = run(cfg, tmp_path / "b" / "shard_0", "-O", f"services.model.url={url}")
    assert second.returncode == 0, second.stderr
    assert "cache: 26 hit(s), 0 miss(es), 0 entr(ies) written" in second.stderr
    for bench in ("arith", "perplexity"):
        old, new = records(tmp_path / "a" / "shard_0", bench), records(tmp_path / "b" / "shard_0", bench)
        assert len(old) == len(new) == (24 if bench == "arith" else 2)
        assert all("cached" not in r for r in old) and all(r["cached"] is True and r["attempts"] == 0 for r in new)
        assert [without(r, TIMINGS | {"cached"}) for r in old] == [without(r, TIMINGS | {"cached"}) for r in new]
        traj = [(d / "shard_0" / bench / "trajectories.jsonl").read_bytes() for d in (tmp_path / "a", tmp_path / "b")]
        assert traj[0] == traj[1]
    assert any(r["scores"]["nll"] for r in records(tmp_path / "b" / "shard_0", "perplexity"))  # logprobs came back
    for d in ("a", "b"):
        assert shardeval_cmd("merge", str(tmp_path / d), "-q").returncode == 0
    scores = [(tmp_path / d / "merged" / "scores.json").read_bytes() for d in ("a", "b")]
    assert scores[0] == scores[1]
    timing = json.loads((tmp_path / "b" / "merged" / "timing.json").read_text())["arith"]
    assert timing["n_cached"] == 24 and timing["n"] == 0
    assert json.loads((tmp_path / "a" / "merged" / "timing.json").read_text())["arith"]["n_cached"] == 0
    assert "response cache: 24 of 24 ok record(s) answered from the cache" in (tmp_path / "b" / "merged" / "report.md").read_text()


def test_another_sampling_parameter_seed_or_served_identity_is_a_miss(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cfg = write_config(tmp_path, "http://127.0.0.1:9/v1", None)
    with running_sim(*FAST) as url:
        base = ("-O", f"services.model.url={url}", "--cache-dir", str(cache))
        assert run(cfg, tmp_path / "first", *base).returncode == 0
        cases = {
            "temperature": ("-O", "benchmarks.0.solver.generation.temperature=0.3"),
            "max_tokens": ("-O", "benchmarks.0.solver.generation.max_tokens=65"),
            "seed": ("-O", "seed=7"),
        }
        for name, extra in cases.items():
            result = run(cfg, tmp_path / name, *base, *extra)
            assert result.returncode == 0, result.stderr
            assert not any("cached" in r for r in records(tmp_path / name)), name
        same = run(cfg, tmp_path / "same", *base)
        assert same.returncode == 0, same.stderr
        assert all(r.get("cached") for r in records(tmp_path / "same"))  # the control: an unchanged run hits
    with running_sim(*FAST, "--root", "/ckpt/other-weights") as other:  # same model name, other weights
        result = run(cfg, tmp_path / "other", "-O", f"services.model.url={other}", "--cache-dir", str(cache))
        assert result.returncode == 0, result.stderr
        # the answers just stored for the new weights are the ones found next time (the newest
        # entry of a key wins), in this process's own index and in a fresh one's
        again = run(cfg, tmp_path / "other_again", "-O", f"services.model.url={other}", "--cache-dir", str(cache))
        assert again.returncode == 0, again.stderr
    assert not any("cached" in r for r in records(tmp_path / "other"))
    assert result.stderr.count("are not used for") == 1 and "('/ckpt/other-weights', 1048576)" in result.stderr
    assert "(26 for another served identity)" in result.stderr
    assert all(r.get("cached") for r in records(tmp_path / "other_again"))
    assert "cache: 26 hit(s), 0 miss(es)" in again.stderr and "are not used for" not in again.stderr


def test_no_cache_reads_and_writes_nothing(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cfg = write_config(tmp_path, "http://127.0.0.1:9/v1", cache, attempts=1)
    with running_sim(*FAST) as url:
        assert run(cfg, tmp_path / "filled", "-O", f"services.model.url={url}").returncode == 0
        filled = {p: p.read_bytes() for p in segments(cache)}
        fresh = run(cfg, tmp_path / "fresh", "-O", f"services.model.url={url}", "--no-cache")
        assert fresh.returncode == 0, fresh.stderr
        assert not any("cached" in r for r in records(tmp_path / "fresh")) and "hit(s)" not in fresh.stderr
    assert {p: p.read_bytes() for p in segments(cache)} == filled  # nothing written, no segment made
    down = run(cfg, tmp_path / "down", "-O", f"services.model.url={url}", "--no-cache", "--cache-dir", str(cache))
    assert down.returncode == 1 and "unreachable" in down.stderr  # nothing read: the dead server was asked


def test_cache_hits_say_nothing_of_whether_the_endpoint_can_be_reached(tmp_path: Path) -> None:
    """A run half answered from the cache, its server gone: the hits asked nothing of the endpoint,
    so the failures to connect still add up to `unreachable` and the shard stops, as without a cache."""
    cache = tmp_path / "cache"
    cfg = write_config(tmp_path, "http://127.0.0.1:9/v1", cache, n=3, attempts=1)
    with running_sim(*FAST) as url:
        assert run(cfg, tmp_path / "filled", "-O", f"services.model.url={url}").returncode == 0
    more = run(cfg, tmp_path / "more", "-O", f"services.model.url={url}", "-O", "benchmarks.0.params.n=40")
    assert any(r.get("cached") for r in records(tmp_path / "more"))  # the cached answers did come first
    assert more.returncode == 1 and "unreachable" in more.stderr, more.stderr


def test_errors_and_cut_streams_are_never_cached(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cfg = write_config(tmp_path, "http://127.0.0.1:9/v1", cache, n=6, attempts=1, service={"unreachable_after": 0})
    with running_sim(*FAST, "--fail-5xx", "0.5", "--truncate-json", "0.5") as url:
        result = run(cfg, tmp_path / "out", "-O", f"services.model.url={url}")
    assert result.returncode == 3, result.stderr  # every pair an error: finished with errors
    recs = records(tmp_path / "out") + records(tmp_path / "out", "perplexity")
    assert len(recs) == 14 and all(r["status"] == "error" for r in recs)
    assert {r["error_kind"] for r in recs} >= {"server_error"}
    assert "0 entr(ies) written" in result.stderr and segments(cache) == []  # an empty segment is removed


def test_four_concurrent_shard_processes_leave_a_cache_every_reader_reads(tmp_path: Path) -> None:
    """Acceptance 3: 4 shards writing one cache at once; a reader indexes all of it, and a rerun of
    the 4 shards with the server stopped is answered wholly from it."""
    cache = tmp_path / "cache"
    cfg = write_config(tmp_path, "http://127.0.0.1:9/v1", cache, n=40)
    with running_sim(*FAST) as url:
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "shardeval",
                    "run",
                    str(cfg),
                    "--shard",
                    f"{i}/4",
                    "-o",
                    str(tmp_path / "a" / f"shard_{i}"),
                    "-O",
                    f"services.model.url={url}",
                ],
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(4)
        ]
        outs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, outs
    assert len(segments(cache)) == 4
    store = ResponseCache(str(cache)).open()
    try:
        assert len(store.index) == 40 * 2 + 2 and store.describe().endswith("82 entries in 4 segment(s)")
    finally:
        store.close()
    for i in range(4):
        again = run(cfg, tmp_path / "b" / f"shard_{i}", "--shard", f"{i}/4", "-O", f"services.model.url={url}")
        assert again.returncode == 0, again.stderr
        assert all(r.get("cached") for b in ("arith", "perplexity") for r in records(tmp_path / "b" / f"shard_{i}", b))


WRITER = textwrap.dedent("""
    import hashlib, sys, time
    from shardeval.run.response_cache import CacheEntry, ResponseCache
    me, n, start = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    store = ResponseCache(sys.argv[4]).open()
    while time.time() < start:
        pass
    for i in range(n):
        key = hashlib.sha256(f"{me}-{i}".encode()).hexdigest()
        store.put(CacheEntry(key=key, text=f"answer {me} {i} " + "x" * (i % 300)))
    store.close()
""")


def test_four_writer_processes_at_full_speed_lose_nothing(tmp_path: Path) -> None:
    """4 processes appending as fast as they can (a reader opening the cache meanwhile), then a
    reader reads every entry back whole."""
    import time

    cache, n = tmp_path / "cache", 3000
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(REPO, "core"), os.environ.get("PYTHONPATH", "")])}
    start = time.time() + 1.0
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(me), str(n), str(start), str(cache)], env=env) for me in range(4)]
    seen_while_writing = []
    while any(p.poll() is None for p in procs):  # readers during the writes: whole entries, at most a torn tail
        if (cache / SEGMENTS_DIR).exists():
            store = ResponseCache(str(cache)).open()
            seen_while_writing.append(len(store.index))
            assert not store.skipped.bad_lines
            store.close()
    assert [p.wait(60) for p in procs] == [0] * 4
    store = ResponseCache(str(cache)).open()
    try:
        assert len(store.index) == 4 * n
        for me in range(4):
            for i in range(n):
                entry = store.get(hashlib.sha256(f"{me}-{i}".encode()).hexdigest())
                assert entry is not None and entry.text == f"answer {me} {i} " + "x" * (i % 300)
    finally:
        store.close()
    print(
        f"\n4 writers x {n} entries; {len(seen_while_writing)} readers during the writes indexed up to "
        f"{max(seen_while_writing, default=0)} entries each"
    )


def test_a_torn_tail_and_a_bad_line_are_ignored(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (cache / SEGMENTS_DIR).mkdir(parents=True)
    key = [f"{i:016x}" + "0" * 48 for i in range(3)]
    lines = [json.dumps({"key": key[i], "text": f"t{i}"}) for i in range(3)]
    (cache / SEGMENTS_DIR / "node-1-dead.jsonl").write_text(lines[0] + "\nnot json\n" + lines[1] + "\n" + lines[2][:20])
    store = ResponseCache(str(cache)).open()
    try:
        assert len(store.index) == 2 and store.get(key[1]).text == "t1" and store.get(key[2]) is None
        assert "2 torn or undecodable line(s) ignored" in store.describe()
        store.put(CacheEntry(key=key[2], text="t2 again"))  # our own segment: indexed at once
        assert store.get(key[2]).text == "t2 again"
        assert store.get(key[1][:16] + "f" * 48) is None  # the same first 8 bytes, another key: a miss
    finally:
        store.close()


@pytest.mark.parametrize("where", ["a file", "under a file", "unwritable"])
def test_an_unusable_cache_dir_is_one_line_and_exit_2(tmp_path: Path, where: str) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    path = {"a file": blocker, "under a file": blocker / "cache", "unwritable": tmp_path / "ro"}[where]
    if where == "unwritable":
        if os.geteuid() == 0:  # root writes through permissions: take a place no one may create in
            path = Path("/sys/shardeval-test-cache")
        else:
            path.mkdir(mode=0o500)
    cfg = write_config(tmp_path, "http://127.0.0.1:9/v1", path)
    result = run(cfg, tmp_path / "out")
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert result.returncode == 2 and len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    assert errors[0].startswith("shardeval: error: ") and str(path) in errors[0] and "--no-cache" in errors[0]


def test_the_cache_is_not_part_of_the_run_identity(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, "http://127.0.0.1:9/v1", tmp_path / "c1")
    ids = [
        shardeval_cmd("run", str(cfg), "--shard", "0/1", "--dry-run", *extra).stderr.splitlines()[-1]
        for extra in ((), ("--cache-dir", str(tmp_path / "c2")), ("--no-cache",))
    ]
    assert "run identity" in ids[0] and ids[0] == ids[1] == ids[2]
    bad = shardeval_cmd("run", str(cfg), "--dry-run", "-O", "cache.dir=")
    assert bad.returncode == 2 and "cache.dir" in bad.stderr


def test_the_flags_travel_to_the_shards_an_orchestrator_starts(tmp_path: Path) -> None:
    """`--cache-dir` and `--no-cache` given to the launching command reach every local shard."""
    cache = tmp_path / "cache"
    cfg = write_config(tmp_path, "http://127.0.0.1:9/v1", None, attempts=1)
    two = ("-O", "cluster={type: local, shards: 2}")
    with running_sim(*FAST) as url:
        first = shardeval_cmd(
            "run", str(cfg), "-o", str(tmp_path / "a"), "-O", f"services.model.url={url}", *two, "--cache-dir", str(cache)
        )
        assert first.returncode == 0, first.stderr
    assert len(segments(cache)) == 2
    down = ("-O", f"services.model.url={url}", *two, "--cache-dir", str(cache))
    second = shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "b"), *down)
    assert second.returncode == 0, second.stderr
    assert all(r.get("cached") for i in range(2) for b in ("arith", "perplexity") for r in records(tmp_path / "b" / f"shard_{i}", b))
    third = shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "c"), *down, "--no-cache")
    assert third.returncode != 0 and "unreachable" in third.stderr
