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


def test_a_running_model_gives_the_whole_sweep_a_rate_and_an_eta(tmp_path: Path) -> None:
    """The first of three models has written half of its cells and is running: the bar reads
    half of a third, and the ETA is what is left of all three models at the sweep's rate, the same
    in the text, in `collect` and in the live page's JSON."""
    import json
    import time

    import msgspec

    from shardeval.store.records import read_manifest, write_manifest
    from shardeval_pages.status_server import Snapshots

    root = tmp_path / "sweep"
    names = make_sweep(str(root), 3, 2, n_problems=12, shards=1)
    for name in names[1:]:
        shutil.rmtree(root / name)
    shard = root / names[0] / "shard_0"
    for bench in ("bench00", "bench01"):
        path = shard / bench / "results.jsonl"
        path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:6]))
    write_manifest(str(shard), msgspec.structs.replace(read_manifest(str(shard)), state="running", started_at=time.time() - 60))

    s = collect(str(root))
    assert (s.done, s.total) == (12, 3 * 24)  # a sixth of the sweep, not half of "the models started"
    assert s.rate is not None and abs(s.eta_s - (s.total - s.done) / s.rate) < 1e-6
    assert 280 < s.eta_s < 320  # 12 records in its minute: the 60 left of the sweep take five more
    snapshots = Snapshots(str(root), interval=2.0)
    try:
        page = json.loads(snapshots.compute())["sweep"]
    finally:
        snapshots.close()
    assert (page["done"], page["total"], page["not_started"]) == (12, 72, 2)
    assert abs(page["eta_s"] - s.eta_s) / s.eta_s < 0.05  # a moment later, at the same rate
    text = shardeval_cmd("status", str(root))
    assert "total: 12/72 records (16.7%) of the whole sweep, 2 model(s) not started" in text.stdout
