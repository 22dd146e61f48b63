"""Inspect's own viewer on a merged run (issue 27): `inspect view` started on merged/inspect/ serves
the log shardeval wrote from 2 shards, and headless chromium (tests/browser.py) shows the
evaluation, its model, its score and its full sample count.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from browser import browser, visit  # noqa: F401  (browser is a fixture)
from inspect_support import inspect_config, inspect_sim, inspect_view, merge, read_log, run_shards, write_tasks

pytest.importorskip("inspect_ai")
pytestmark = pytest.mark.timeout(240)

N = 20
EPOCHS = 2


@pytest.fixture(scope="module")
def merged_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tasks.py@arith, 2 epochs, run in 2 shards and merged: the folder of merged/inspect/arith.eval."""
    root = tmp_path_factory.mktemp("view")
    tasks = write_tasks(root / "tasks", N)
    with inspect_sim(tasks) as url:
        cfg = inspect_config(root / "config.json", url, tasks, [{"task": "arith", "repeats": EPOCHS}])
        run_shards(cfg, root / "run", 2)
    merged = merge(root / "run")
    assert merged.returncode == 0, merged.stderr
    return root / "run" / "merged" / "inspect"


def test_inspect_view_serves_the_merged_log_and_chromium_shows_every_sample(merged_logs: Path, browser) -> None:
    log = read_log(merged_logs / "arith.eval")
    assert len(log.samples) == N * EPOCHS
    accuracy = log.results.scores[0].metrics["accuracy"].value
    with inspect_view(merged_logs) as origin:
        with urllib.request.urlopen(origin + "/api/logs", timeout=10) as reply:
            listed = json.loads(reply.read())
        assert [(Path(f["name"]).name, f["task"]) for f in listed["files"]] == [("arith.eval", "arith")]
        ready = f"() => document.body.innerText.includes('{N * EPOCHS} Samples')"
        with visit(browser, origin + "/", ready=ready, timeout_ms=30_000) as v:
            text = v.page.inner_text("body")
            assert v.exceptions == []
            assert v.foreign_requests() == []  # the viewer and the log, all from inspect view itself
    assert "arith" in text and "openai-api/shardeval/sim" in text
    assert f"{N} x {EPOCHS} samples" in text  # the dataset line: every sample, every epoch
    assert f"{N * EPOCHS} rows" in text  # the samples list
    assert f"{accuracy:g}" in text and 0 < accuracy < 1
    assert "s00" in text  # the list starts with the first sample
