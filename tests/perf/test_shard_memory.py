"""Memory: a shard's peak RSS must not grow with the dataset (DESIGN.md §10: within 1.25x).

Two real `shardeval run` processes against one simulator, over 1,000 and 100,000 `arith`
problems; peak RSS of each comes from the kernel's rusage for that process alone (tests/peak_rss.py).
"""

from __future__ import annotations

import sys

from conftest import running_sim
from peak_rss import run_measured

TARGET = 1.25


def peak_rss_mib(config: str, out: str) -> float:
    done = run_measured([sys.executable, "-m", "shardeval", "run", config, "--shard", "0/1", "-o", out])
    assert done.returncode == 0, done.stderr
    return done.peak_mib


def write_config(path: str, url: str, n: int) -> str:
    with open(path, "w") as f:
        f.write(
            f"""
services:
  model: {{type: api, url: "{url}", model: sim}}
benchmarks:
  - name: arith
    params: {{n: {n}}}
    max_concurrent: 128
    solver: {{generation: {{max_tokens: 16}}}}
output: {{progress_interval_s: 0, trajectories: true}}
"""
        )
    return path


def test_peak_rss_is_flat_in_dataset_size(tmp_path):
    with running_sim("--bench", "arith", "--ttft-ms", "0", "--itl-ms", "0", "--output-tokens", "8") as url:
        small = peak_rss_mib(write_config(str(tmp_path / "s.yaml"), url, 1_000), str(tmp_path / "small"))
        large = peak_rss_mib(write_config(str(tmp_path / "l.yaml"), url, 100_000), str(tmp_path / "large"))
    with open(tmp_path / "large" / "arith" / "results.jsonl", "rb") as f:
        assert sum(1 for _ in f) == 100_000
    ratio = large / small
    print(
        f"\npeak RSS of a shard: 1,000 problems {small:.1f} MiB, 100,000 problems {large:.1f} MiB, ratio {ratio:.3f} (target <= {TARGET})"
    )
    assert ratio <= TARGET
