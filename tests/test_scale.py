"""Scale: an `arith` run split into 64 shards, run as local processes against one simulator, merged.

CI runs a reduced but real form (20,000 problems x 64 shards, 4 shards at a time). The full
1,000,000-problem run is the same code:

    .venv/bin/python tests/test_scale.py --problems 1000000 --shards 64 --parallel 4 --out /tmp/scale

It prints wall time, peak RSS per shard (each shard's own, tests/peak_rss.py) and merge time. Figures are in
docs/guarantees.md (G17).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import running_sim
from peak_rss import run_measured


@dataclass
class ScaleResult:
    problems: int
    shards: int
    wall_s: float
    merge_s: float
    peak_rss_mb: list[float]
    scores: dict

    def summary(self) -> str:
        rss = sorted(self.peak_rss_mb)
        return (
            f"{self.problems} problems x {self.shards} shards: run {self.wall_s:.1f} s "
            f"({self.problems / self.wall_s:.0f} req/s), peak RSS per shard median {rss[len(rss) // 2]:.0f} MB "
            f"max {rss[-1]:.0f} MB, merge {self.merge_s:.1f} s"
        )


def write_config(root: Path, url: str, problems: int) -> Path:
    path = root / "scale.yaml"
    path.write_text(
        f"""
services:
  model:
    type: api
    url: {url}
    model: sim
    timeouts: {{connect: 10, first_token: 60, idle: 30}}
    retries: {{attempts: 5, backoff_base: 0.1, backoff_max: 2}}
benchmarks:
  - name: arith
    params: {{n: {problems}}}
    max_concurrent: 64
    solver: {{generation: {{temperature: 0.7, max_tokens: 32}}}}
output: {{progress_interval_s: 60}}
"""
    )
    return path


def run_scale(root: Path, problems: int, shards: int, parallel: int, timeout_s: float) -> ScaleResult:
    """Every shard a `shardeval run --shard i/N` process, `parallel` at a time, then one merge."""
    deadline = time.monotonic() + timeout_s
    with running_sim("--bench", "arith", "--accuracy", "0.7", "--ttft-ms", "0", "--itl-ms", "0", "--output-tokens", "8") as url:
        cfg = write_config(root, url, problems)
        t0 = time.monotonic()

        def shard(i: int) -> float:
            """Run shard i; its own peak RSS in MiB (the trampoline keeps pytest's out of it)."""
            with open(root / f"shard_{i}.log", "wb") as log:
                done = run_measured(
                    [
                        sys.executable,
                        "-m",
                        "shardeval",
                        "run",
                        str(cfg),
                        "--shard",
                        f"{i}/{shards}",
                        "-o",
                        str(root / "run" / f"shard_{i}"),
                    ],
                    timeout=max(1.0, deadline - time.monotonic()),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            if done.returncode != 0:
                raise RuntimeError(f"shard {i} exited {done.returncode}: {(root / f'shard_{i}.log').read_text()[-2000:]}")
            return done.peak_mib

        pool = ThreadPoolExecutor(parallel)
        try:
            rss = list(pool.map(shard, range(shards)))
        finally:
            pool.shutdown(cancel_futures=True)  # a failed shard stops the rest from starting
        wall = time.monotonic() - t0
    t1 = time.monotonic()
    merged = subprocess.run(
        [sys.executable, "-m", "shardeval", "merge", str(root / "run")],
        capture_output=True,
        text=True,
        timeout=max(60.0, deadline - t1 + 60),
    )
    merge_s = time.monotonic() - t1
    if merged.returncode != 0:
        raise RuntimeError(f"merge failed: {merged.stderr}")
    scores = json.loads((root / "run" / "merged" / "scores.json").read_text())
    return ScaleResult(problems, shards, wall, merge_s, rss, scores)


def test_20000_problems_in_64_shards_run_and_merge_in_bounded_time(tmp_path):
    result = run_scale(tmp_path, problems=20_000, shards=64, parallel=4, timeout_s=240)
    print(result.summary())
    arith = result.scores["arith"]
    assert (arith["n_expected"], arith["n_records"], arith["n_missing"], arith["n_errors"], arith["n_duplicates"]) == (
        20_000,
        20_000,
        0,
        0,
        0,
    )
    assert 0.65 < arith["metrics"]["accuracy"]["value"] < 0.75  # the simulator's 0.7, n = 20,000
    # A shard measures 42 MB here (G17); 150 leaves room for another allocator or Python, and still
    # catches a shard whose memory follows its share of the dataset.
    assert len(result.peak_rss_mb) == 64 and max(result.peak_rss_mb) < 150, result.summary()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--out", type=Path, default=None, help="kept afterwards when given; else a temporary directory")
    parser.add_argument("--timeout-s", type=float, default=4 * 3600)
    args = parser.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="shardeval-scale"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        result = run_scale(root, args.problems, args.shards, args.parallel, args.timeout_s)
        arith = result.scores["arith"]
        print(result.summary())
        print(json.dumps({k: arith[k] for k in ("n_expected", "n_records", "n_missing", "n_errors", "n_duplicates")}))
    finally:
        if args.out is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
