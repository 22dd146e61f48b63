"""The runner's side of a PairsSolver (one that runs a shard's whole share itself, as Inspect's
eval loop does): every pair ends with exactly one record whichever way the solver ends, the ones
it never settled are `internal` errors naming why (never scored), and a rerun asks only those.

The solver (tests/pairs_solver_plugin.py, loaded through SHARDEVAL_PLUGINS) asks a real simulator
for each pair through the shard's own client."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import running_sim, shardeval_cmd

TESTS = os.path.dirname(os.path.abspath(__file__))
ENV = {"SHARDEVAL_PLUGINS": "pairs_solver_plugin", "PYTHONPATH": os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")])}
N, REPEATS, AFTER = 6, 2, 5


def run(tmp_path: Path, base: str, end: str) -> tuple[int, list[dict]]:
    config = tmp_path / f"{end}.json"
    config.write_text(
        json.dumps(
            {
                "services": {"model": {"type": "api", "url": base, "model": "sim"}},
                "benchmarks": [{"name": "pairs_sums", "params": {"n": N, "end": end, "after": AFTER}, "repeats": REPEATS}],
            }
        )
    )
    done = shardeval_cmd("run", str(config), "-o", str(tmp_path / end), env=ENV)
    assert "Traceback" not in done.stderr, done.stderr
    path = tmp_path / end / "pairs_sums" / "results.jsonl"
    return done.returncode, [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "end, why",
    [
        ("return", None),
        ("raise", "RuntimeError: the solver broke after 5 pairs"),
        ("early", "its solver ended without answering it"),
        ("twice", "ValueError: pairs_sums: problem p2 repeat 0 was not asked of this shard, or was settled twice"),
    ],
)
def test_every_pair_ends_with_one_record_however_the_solver_ends(tmp_path: Path, end: str, why: str | None) -> None:
    with running_sim("--ttft-ms", "0", "--itl-ms", "0") as base:
        code, records = run(tmp_path, base, end)
        pairs = [(r["problem_id"], r["repeat"]) for r in records]
        assert sorted(pairs) == sorted((f"p{i}", k) for i in range(N) for k in range(REPEATS))  # each once
        ok = [r for r in records if r["status"] == "ok"]
        assert len(ok) == AFTER if why else len(ok) == N * REPEATS
        assert all(r["score"] in (0.0, 1.0) for r in ok)
        failed = [r for r in records if r["status"] != "ok"]
        assert all(r["error_kind"] == "internal" and r["error"] == why and r["score"] is None for r in failed), failed
        assert code == (3 if why else 0)
        if why:  # a rerun asks only the pairs with no ok record (and breaks after AFTER of them again)
            again, after_rerun = run(tmp_path, base, end)
            assert again == 3  # 7 asked, 5 answered before it broke again
            fresh = after_rerun[len(records) :]
            assert {(r["problem_id"], r["repeat"]) for r in fresh} == {(r["problem_id"], r["repeat"]) for r in failed}
            assert sum(r["status"] == "ok" for r in fresh) == min(AFTER, len(failed))
