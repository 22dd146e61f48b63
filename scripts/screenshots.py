"""Remake the screenshots in docs/ from real runs against the built-in simulator, in headless
Chromium (Debian's; scripts/setup/chromium.sh installs it):

- docs/report.png: report.html of the README's quickstart (examples/arith_sim.yaml);
- docs/sweep.png: sweep.html of twelve checkpoints of a training run on two benchmarks;
- docs/status_serve.png: `shardeval status --serve` of that sweep while its shards run.

    .venv/bin/python scripts/screenshots.py        # about half a minute; writes the three files

A maintainer's tool, not part of the test command: the pages it shows are tested in tests/.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SHARDEVAL = [sys.executable, "-m", "shardeval"]
WIDTH = 1280
# Twelve checkpoints whose accuracy climbs and levels off, as a training run's do.
STEPS = [f"step{1000 * (i + 1)}" for i in range(12)]
ACCURACY = [round(0.25 + 0.55 * (1 - 0.72**i), 3) for i in range(12)]


def sweep_config(path: Path, *, ttft_ms: int) -> Path:
    config = {
        "services": {s: {"type": "sim", "bench": "arith", "accuracy": a, "ttft_ms": ttft_ms, "itl_ms": 0} for s, a in zip(STEPS, ACCURACY)},
        "benchmarks": [
            {"name": "arith", "params": {"n": 120}, "max_concurrent": 8},
            {"name": "arith", "id": "arith_hard", "params": {"n": 80, "seed": 7}, "repeats": 2, "max_concurrent": 8},
        ],
        "sweep": {"services": STEPS, "baseline": STEPS[0]},
        "cluster": {"type": "local", "shards": 2, "parallel": 2},
        "output": {"progress_interval_s": 0},
    }
    path.write_text(json.dumps(config))
    return path


def shoot(
    browser, url: str, out: Path, *, height: int, ready: str | None = "document.body.dataset.charts === 'drawn'", settle_s: float = 0.0
) -> None:
    page = browser.new_page(viewport={"width": WIDTH, "height": height})
    page.goto(url, wait_until="load")
    if ready:
        page.wait_for_function(ready, timeout=60_000)
    time.sleep(settle_s)
    page.screenshot(path=str(out))
    page.close()
    print(f"wrote {out}")


def main() -> None:
    chromium = shutil.which("chromium")
    if chromium is None:
        sys.exit("screenshots: chromium is not installed: run scripts/setup/chromium.sh (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    work = Path(tempfile.mkdtemp(prefix="shardeval-screens-"))
    running = status = None
    try:
        # run where the pages will name their folders as a user's would: relative ones
        quick, sweep, live = work / "eval_results" / "arith_sim", work / "training_run", work / "training_run_live"
        subprocess.run([*SHARDEVAL, "run", str(ROOT / "examples" / "arith_sim.yaml")], cwd=work, check=True, capture_output=True)
        subprocess.run(
            [*SHARDEVAL, "run", str(sweep_config(work / "sweep.json", ttft_ms=1)), "-o", sweep.name],
            cwd=work,
            check=True,
            capture_output=True,
        )
        # the same sweep, slower, watched while it runs
        running = subprocess.Popen(
            [*SHARDEVAL, "run", str(sweep_config(work / "live.json", ttft_ms=120)), "-o", live.name],
            cwd=work,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(8)
        status = subprocess.Popen(
            [*SHARDEVAL, "status", live.name, "--serve", "--interval", "1"],
            cwd=work,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        url = re.search(r"http://\S+", status.stdout.readline()).group().rstrip("/") + "/"
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
            shoot(browser, url, DOCS / "status_serve.png", height=1000, ready=None, settle_s=3)
            shoot(browser, (quick / "merged" / "report.html").as_uri(), DOCS / "report.png", height=1400)
            shoot(browser, (sweep / "merged" / "sweep.html").as_uri(), DOCS / "sweep.png", height=1500)
            browser.close()
    finally:  # the live sweep and its page stop with the script, whatever happened
        for process in (status, running):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
