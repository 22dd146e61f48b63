"""Server faults under load: a real `shardeval run` at concurrency 256 against a faulty simulator.

For every fault the run must end with (docs/guarantees.md, G1-G4):
- exactly one record per (problem, repeat): nothing lost, nothing duplicated;
- every ok record identical (response, extracted answer, score) to a fault-free run's — the
  simulator answers deterministically per prompt and seed, and fault draws do not touch answers;
- errors only where the attempts ran out (attempts == retries.attempts, a retryable kind), and
  no record with more attempts than the budget;
- wall time within WALL_FACTOR x the fault-free run + WALL_SLACK_S (generous: a shared 2-core box).

Every run is bounded (a few hundred requests, subprocess timeouts) and stops by itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import api_eval_config, running_sim, shardeval_cmd
from test_client import closed_port
from test_hostile_server import run_shard

N, REPEATS, CONCURRENCY, ATTEMPTS = 200, 2, 256, 6
WALL_FACTOR, WALL_SLACK_S = 4.0, 30.0
SIM = ("--bench", "arith", "--accuracy", "0.7", "--ttft-ms", "5", "--itl-ms", "1", "--output-tokens", "12")
SAME = ("response", "extracted", "score", "reference", "seed", "finish_reason", "completion_tokens")


def write_config(
    tmp: Path,
    url: str,
    *,
    n: int = N,
    attempts: int = ATTEMPTS,
    stream: bool = True,
    service: dict | None = None,
    concurrency: int = CONCURRENCY,
    backoff_base: float = 0.05,
    backoff_max: float = 0.5,
) -> Path:
    return api_eval_config(
        tmp / f"config-{time.monotonic_ns()}.yaml",
        url,
        n=n,
        repeats=REPEATS,
        concurrency=concurrency,
        service={
            "stream": stream,
            "timeouts": {"connect": 2, "first_token": 5, "idle": 0.5},
            "retries": {"attempts": attempts, "backoff_base": backoff_base, "backoff_max": backoff_max},
            **(service or {}),
        },
        benchmark={"solver": {"generation": {"temperature": 0.7, "max_tokens": 64}}},
        output={"progress_interval_s": 5},
    )


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "arith" / "results.jsonl").read_text().splitlines() if line.strip()]


def expected_exit(out: Path) -> int:
    """0 when every pair's standing record is ok, else 3 (finished with errors, issue 24)."""
    ok = {(r["problem_idx"], r["repeat"]) for r in records(out) if r["status"] == "ok"}
    return 0 if all((r["problem_idx"], r["repeat"]) in ok for r in records(out)) else 3


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[tuple[int, int], dict], float]:
    """The fault-free run: every record keyed by (problem, repeat), and its wall time."""
    tmp = tmp_path_factory.mktemp("baseline")
    with running_sim(*SIM) as url:
        result, wall = run_shard(write_config(tmp, url), tmp / "out", timeout=240)
    assert result.returncode == 0, result.stderr
    recs = records(tmp / "out")
    assert all(r["status"] == "ok" and r["attempts"] == 1 for r in recs)
    return {(r["problem_idx"], r["repeat"]): r for r in recs}, wall


def check_against_baseline(recs: list[dict], base: dict[tuple[int, int], dict], attempts: int, kinds: set[str]) -> dict[str, int]:
    """The guarantees G1-G3 for one faulted run; returns counts for the failure message."""
    keys = [(r["problem_idx"], r["repeat"]) for r in recs]
    assert len(keys) == len(set(keys)), "duplicate records"
    assert sorted(keys) == sorted(base), "lost records"
    n_err = 0
    for r in recs:
        assert 1 <= r["attempts"] <= attempts, r
        if r["status"] == "ok":
            want = base[(r["problem_idx"], r["repeat"])]
            assert {k: r[k] for k in SAME} == {k: want[k] for k in SAME}, r
        else:
            n_err += 1
            assert r["attempts"] == attempts and r["error_kind"] in kinds and r["score"] is None, r
    return {"records": len(recs), "errors": n_err, "retried": sum(r["attempts"] > 1 for r in recs)}


FAULTS = {
    "429_storm_retry_after": (("--fail-429", "0.4", "--retry-after", "0.2"), {"rate_limited"}, True),
    "429_storm_no_retry_after": (("--fail-429", "0.5", "--retry-after", "0"), {"rate_limited"}, True),
    "5xx_500_502_503": (("--fail-5xx", "0.4", "--fail-5xx-statuses", "500,502,503"), {"server_error"}, True),
    "reset_during_stream": (("--reset", "0.3"), {"connection"}, True),
    "reset_before_response": (("--reset", "0.3"), {"connection"}, False),
    "stall_past_idle_timeout": (("--stall", "0.2", "--stall-s", "3"), {"timeout"}, True),
    "truncated_json_chunk": (("--truncate-json", "0.3"), {"protocol"}, True),
    "truncated_json_body": (("--truncate-json", "0.3"), {"protocol"}, False),
    "everything_at_once": (
        (
            "--fail-429",
            "0.1",
            "--retry-after",
            "0.1",
            "--fail-5xx",
            "0.1",
            "--reset",
            "0.1",
            "--stall",
            "0.05",
            "--stall-s",
            "3",
            "--truncate-json",
            "0.1",
            "--error-200",
            "0.05",
        ),
        {"rate_limited", "server_error", "connection", "timeout", "protocol"},
        True,
    ),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_fault_under_load_keeps_records_complete_and_correct(tmp_path, baseline, fault):
    flags, kinds, stream = FAULTS[fault]
    base, base_wall = baseline
    with running_sim(*SIM, *flags) as url:
        result, wall = run_shard(write_config(tmp_path, url, stream=stream), tmp_path / "out", timeout=240)
    assert result.returncode == expected_exit(tmp_path / "out"), result.stderr
    assert "Traceback" not in result.stderr
    counts = check_against_baseline(records(tmp_path / "out"), base, ATTEMPTS, kinds)
    assert counts["retried"] > 0, f"the fault never struck: {counts}"
    assert wall <= WALL_FACTOR * base_wall + WALL_SLACK_S, f"{fault}: {wall:.1f} s vs fault-free {base_wall:.1f} s"
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert m["state"] == ("finished_with_errors" if counts["errors"] else "complete"), m["reason"]
    assert sum(m["benchmarks"][0]["error_kinds"].values()) == counts["errors"]
    assert m["benchmarks"][0]["n_ok"] + m["benchmarks"][0]["n_error"] == N * REPEATS


# --- a server that disappears and comes back ---------------------------------------------------


def start_sim(port: int, *args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardeval", "sim", "--host", "127.0.0.1", "--port", str(port), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = proc.stdout.readline() if proc.stdout else ""
    if "listening on" not in line:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"simulator did not start on port {port}: {line!r}")
    return proc


def stop(proc: subprocess.Popen[str], sig_kill: bool = False) -> None:
    if proc.poll() is None:
        proc.kill() if sig_kill else proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_server_that_disappears_and_comes_back(tmp_path, baseline):
    """SIGKILL the server mid-run, restart it on the same port 1.5 s later: requests retry through
    the gap; any that ran out of attempts are errors of kind `connection`, and a rerun completes."""
    base, _ = baseline
    port = closed_port()  # free now: the simulator is started on it below
    url = f"http://127.0.0.1:{port}/v1"
    slow = ("--bench", "arith", "--accuracy", "0.7", "--ttft-ms", "20", "--itl-ms", "2", "--output-tokens", "12")
    cfg = write_config(tmp_path, url, attempts=8, backoff_base=0.2, backoff_max=1.0, concurrency=64)
    out = tmp_path / "out"
    server = start_sim(port, *slow)
    shard = subprocess.Popen(
        [sys.executable, "-m", "shardeval", "run", str(cfg), "--shard", "0/1", "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        results = out / "arith" / "results.jsonl"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not results.exists() or results.read_bytes().count(b"\n") < 40):
            time.sleep(0.02)
        stop(server, sig_kill=True)  # gone: connections reset, new ones refused
        time.sleep(1.5)
        server = start_sim(port, *slow)  # back, same port, same answers
        _, err = shard.communicate(timeout=180)
        assert shard.returncode == expected_exit(out), err
        recs = records(out)
        n_before_rerun = len(recs)
        counts = check_against_baseline(recs, base, 8, {"connection"})
        assert counts["retried"] > 0, counts
        if counts["errors"]:  # exhausted attempts during the gap: the rerun asks exactly those again
            again = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(out), timeout=120)
            assert again.returncode == 0, again.stderr
            recs = records(out)
            assert len(recs) == n_before_rerun + counts["errors"]
        final = {(r["problem_idx"], r["repeat"]): r for r in recs if r["status"] == "ok"}
        assert sorted(final) == sorted(base)
    finally:
        if shard.poll() is None:
            shard.kill()
            shard.wait()
        stop(server)


# --- adaptive concurrency against a rate limiter ----------------------------------------------


def run_limited(tmp: Path, adaptive: bool) -> tuple[list[dict], float]:
    """1000 requests, window cap 256, against a server that refuses (429) beyond 16 in flight."""
    with running_sim(
        "--bench", "arith", "--ttft-ms", "30", "--itl-ms", "1", "--output-tokens", "12", "--max-inflight", "16", "--retry-after", "0"
    ) as url:
        cfg = write_config(tmp, url, n=500, attempts=8, backoff_base=0.05, backoff_max=1.0, service={"adaptive": adaptive})
        out = tmp / ("adaptive" if adaptive else "fixed")
        result, wall = run_shard(cfg, out, timeout=240)
    assert result.returncode == expected_exit(out), result.stderr
    return records(out), wall


def test_adaptive_concurrency_wastes_far_fewer_attempts_than_a_fixed_window(tmp_path):
    fixed, fixed_wall = run_limited(tmp_path, adaptive=False)
    adaptive, adaptive_wall = run_limited(tmp_path, adaptive=True)
    for recs in (fixed, adaptive):
        keys = {(r["problem_idx"], r["repeat"]) for r in recs}
        assert len(keys) == len(recs) == 1000
    fixed_attempts = sum(r["attempts"] for r in fixed)
    adaptive_attempts = sum(r["attempts"] for r in adaptive)
    fixed_ok = sum(r["status"] == "ok" for r in fixed)
    adaptive_ok = sum(r["status"] == "ok" for r in adaptive)
    summary = (
        f"fixed: {fixed_attempts} attempts, {fixed_ok} ok, {fixed_wall:.1f} s; "
        f"adaptive: {adaptive_attempts} attempts, {adaptive_ok} ok, {adaptive_wall:.1f} s"
    )
    print(summary)
    assert adaptive_ok >= fixed_ok, summary
    assert adaptive_attempts <= 0.5 * fixed_attempts, summary  # far fewer 429s wasted
    assert adaptive_wall <= 1.5 * fixed_wall + 5.0, summary  # and no slower (noise allowed)


# --- the AIMD limiter itself (no server) -------------------------------------------------------


def test_aimd_halves_once_per_round_trip_respects_floor_and_cap_and_survives_cancel():
    import asyncio

    from shardeval.run.adaptive import AdaptiveSlots, make_slots

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        slots = AdaptiveSlots(64)
        assert isinstance(make_slots(8, False), asyncio.Semaphore) and isinstance(make_slots(8, True), AdaptiveSlots)
        started = loop.time()
        for _ in range(50):  # a burst of 429s from one window: one cut, not fifty
            slots.feedback(started, rate_limited=True)
        assert slots.limit == 32 and slots.n_cuts == 1 and slots.n_rate_limited == 50
        for _ in range(20):  # each new round trip that is refused cuts again, down to the floor
            slots.feedback(loop.time() + 1e-6, rate_limited=True)
            await asyncio.sleep(0)
        assert slots.limit == 1 and slots.allowed == 1
        for _ in range(10_000):  # additive increase, never past the cap
            slots.feedback(loop.time(), rate_limited=False)
        assert slots.limit == 64
        # the window really bounds attempts in flight, and a waiter cancelled after its grant hands it on
        slots.limit = 2.0
        await slots.acquire()
        await slots.acquire()
        waiter = asyncio.ensure_future(slots.acquire())
        other = asyncio.ensure_future(slots.acquire())
        await asyncio.sleep(0)
        assert not waiter.done() and slots.in_use == 2
        slots.release()  # grants `waiter` …
        waiter.cancel()  # … which is cancelled before it runs: the slot must pass to `other`
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert other.done() and slots.in_use == 2
        slots.release()
        slots.release()
        assert slots.in_use == 0

    asyncio.run(asyncio.wait_for(scenario(), 10))
