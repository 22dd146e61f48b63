"""Images: a shard reads and encodes each image once, however many repeats ask it, and its peak RSS
does not grow with the number of images (the encode store is a bounded LRU; problems carry digests).

Two real `shardeval run` processes against one simulator, over 100 and 1,000 distinct 224-px PNG
files (a bring-your-own JSONL), 4 repeats each; peak RSS of each comes from the kernel's rusage for
that process alone (tests/peak_rss.py). The baseline is the same run over 100 images: same request
bodies, same code path.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from conftest import running_sim
from peak_rss import run_measured

PIL = pytest.importorskip("PIL")
from PIL import Image, ImageDraw  # noqa: E402

TARGET = 1.2
REPEATS = 4


def write_images(folder: Path, n: int) -> Path:
    """n distinct pictures (each a different arrangement of dots) and a JSONL asking about each."""
    folder.mkdir()
    rows = []
    for i in range(n):
        im = Image.new("RGB", (224, 224), "white")
        d = ImageDraw.Draw(im)
        for k in range(1 + i % 9):
            x, y = 10 + (i * 37 + k * 53) % 190, 10 + (i * 11 + k * 29) % 190
            d.rectangle((x, y, x + 14, y + 14), fill=(200, (i * 7) % 256, (k * 40) % 256))
        im.save(folder / f"{i}.png")
        rows.append({"question": "How many squares? <image>", "answer": str(1 + i % 9), "images": [f"{i}.png"]})
    data = folder / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data


def measured_run(tmp: Path, url: str, n: int) -> tuple[float, dict[str, int]]:
    data = write_images(tmp / f"img{n}", n)
    cfg = tmp / f"run{n}.yaml"
    cfg.write_text(
        f'services:\n  model: {{type: api, url: "{url}", model: sim}}\n'
        f"benchmarks:\n  - name: {data}\n    repeats: {REPEATS}\n    max_concurrent: 64\n"
        f"    solver: {{generation: {{max_tokens: 8}}}}\n"
        "output: {progress_interval_s: 0, trajectories: true}\n"
    )
    out = tmp / f"out{n}"
    done = run_measured([sys.executable, "-m", "shardeval", "run", str(cfg), "--shard", "0/1", "-o", str(out)], timeout=600)
    assert done.returncode == 0, done.stderr
    with open(out / "rows" / "results.jsonl", "rb") as f:
        assert sum(1 for _ in f) == n * REPEATS
    said = re.search(r"images: (\d+) encoded, (\d+) reused, (\d+) read", (out / "logs" / "shard.log").read_text())
    assert said, "the shard did not report its image counters"
    return done.peak_mib, dict(zip(("encodes", "hits", "reads"), map(int, said.groups())))


def test_each_image_encoded_once_and_memory_flat_in_the_number_of_images(tmp_path):
    with running_sim("--ttft-ms", "0", "--itl-ms", "0", "--output-tokens", "4") as url:
        small, small_counts = measured_run(tmp_path, url, 100)
        large, large_counts = measured_run(tmp_path, url, 1_000)
    # 1,000 images x 4 repeats: each read and encoded exactly once, every other use a reuse
    assert large_counts == {"encodes": 1_000, "hits": 3_000, "reads": 1_000}, large_counts
    assert small_counts == {"encodes": 100, "hits": 300, "reads": 100}, small_counts
    ratio = large / small
    print(
        f"\npeak RSS of an image shard: 100 images {small:.1f} MiB, 1,000 images {large:.1f} MiB, "
        f"ratio {ratio:.3f} (target <= {TARGET}); encodes {large_counts}"
    )
    assert ratio <= TARGET
