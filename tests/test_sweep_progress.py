"""A sweep's progress counts the whole sweep (issue 30): models not started yet are counted at a
started model's size, so the bar and the percentage say how much of the sweep is done, not how much
of the models that happen to have started (a 3-model sweep with one model done read 100 %)."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import shardeval_cmd
from shard_factory import make_sweep
from shardeval.results.status import collect


def test_models_not_started_count_in_the_sweeps_total(tmp_path: Path) -> None:
    root = tmp_path / "sweep"
    names = make_sweep(str(root), 3, 2, n_problems=12, shards=2)
    for name in names[1:]:  # only the first model has written (all of it)
        shutil.rmtree(root / name)
    s = collect(str(root))
    per_model = 2 * 12
    assert (s.done, s.total, s.not_started) == (per_model, 3 * per_model, 2)
    assert s.eta_s is None  # nothing running: no rate, no ETA
    text = shardeval_cmd("status", str(root))
    assert text.returncode == 0, text.stderr
    assert f"total: {per_model}/{3 * per_model} records (33.3%) of the whole sweep, 2 model(s) not started" in text.stdout

    names = make_sweep(str(tmp_path / "all"), 3, 2, n_problems=12, shards=2)  # every model done
    s = collect(str(tmp_path / "all"))
    assert (s.done, s.total, s.not_started) == (3 * per_model, 3 * per_model, 0)
