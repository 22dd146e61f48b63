"""No command that reads shard directories writes into one (docs/guarantees.md, E6).

`shardeval merge RUN -o RUN/shard_1` used to write the merged results.jsonl over shard 1's own:
its records were replaced by the whole run's. Every writer of what it read (merge and a sweep's
merge with -o, export -o, compare --html) now asks one check first, so every path of the kind is
refused, in one line with exit 2, before anything is written: a shard being read, a folder inside
it, another run's shard, a model's shard in a sweep, a symlink that leads into one. A shard's own
merged/ folder stays allowed (`shardeval merge RUN/shard_0` writes there by default).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from conftest import shardeval_cmd
from shard_factory import make_shard


def digest(root: Path) -> dict[str, str]:
    """Every file under root but merge outputs, by content."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "merged" not in p.parts
    }


def make_run(root: Path, shards: int = 2) -> Path:
    for i in range(shards):
        make_shard(str(root), i, shards, n_problems=6)
    return root


def make_sweep(root: Path) -> Path:
    """Two models of two shards each, with the plan file a launch writes."""
    for model in ("base", "step1"):
        make_run(root / model)
    (root / "sweep_plan.json").write_text(json.dumps({"services": ["base", "step1"], "baseline": "base", "shards": 2}))
    return root


# (command, the path it writes, given relative to tmp_path; the run it reads is tmp_path/run)
REFUSED = [
    (["merge", "{run}", "-o", "{run}/shard_1"], "-o"),  # the shard itself: its results.jsonl would be replaced
    (["merge", "{run}", "-o", "{run}/shard_1/arith"], "-o"),  # a folder inside it
    (["merge", "{run}", "-o", "{other}/shard_0"], "-o"),  # another run's shard
    (["merge", "{run}", "-o", "{link}"], "-o"),  # a symlink whose target is a shard
    (["export", "{run}", "-o", "{run}/shard_0/arith/results.jsonl"], "-o"),
    (["export", "{run}", "-o", "{other}/shard_1/rows.csv"], "-o"),
    (["compare", "{run}", "{other}", "--html", "{run}/shard_0/manifest.json"], "--html"),
    (["compare", "{run}", "{other}", "--html", "{other}/shard_1/arith/page.html"], "--html"),
]


@pytest.mark.parametrize("argv, flag", REFUSED)
def test_a_path_inside_any_shard_is_refused_before_anything_is_written(tmp_path: Path, argv: list[str], flag: str) -> None:
    run, other = make_run(tmp_path / "run"), make_run(tmp_path / "other")
    (tmp_path / "link").symlink_to(run / "shard_0")
    before = digest(tmp_path)
    r = shardeval_cmd(*(a.format(run=run, other=other, link=tmp_path / "link") for a in argv))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith(f"shardeval: error: {flag} ") and "is inside the shard directory" in r.stderr
    assert "RUN_DIR/merged/" in r.stderr  # the fix
    assert digest(tmp_path) == before  # no shard file touched, nothing new written
    assert not any("merged" in p.parts for p in tmp_path.rglob("*") if p.is_file())


def test_a_sweep_merged_into_a_models_shard_is_refused(tmp_path: Path) -> None:
    sweep = make_sweep(tmp_path / "sweep")
    before = digest(tmp_path)
    for out in (sweep / "step1" / "shard_0", sweep / "base" / "shard_1" / "arith"):
        r = shardeval_cmd("merge", "-q", str(sweep), "-o", str(out))
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "is inside the shard directory" in r.stderr, r.stderr
        assert digest(tmp_path) == before
    r = shardeval_cmd("merge", "-q", str(sweep))  # the default, and -o beside the shards, still merge
    assert r.returncode == 0 and (sweep / "merged" / "sweep.json").is_file(), r.stderr
    assert digest(tmp_path) == before


def test_a_shards_own_merged_folder_and_paths_beside_shards_are_allowed(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run")
    before = digest(tmp_path)
    lone = shardeval_cmd("merge", "-q", str(run / "shard_0"))  # one shard merged on its own: <shard>/merged/
    # one shard of two: written, but PARTIAL (exit 3, issue 24)
    assert lone.returncode == 3 and (run / "shard_0" / "merged" / "scores.json").is_file(), lone.stderr
    beside = shardeval_cmd("merge", "-q", str(run), "-o", str(run / "elsewhere"))
    assert beside.returncode == 0 and json.loads((run / "elsewhere" / "scores.json").read_text())["arith"]["n_records"] == 6
    rows = shardeval_cmd("export", str(run), "-o", str(run / "shard_0" / "merged" / "rows.csv"))
    assert rows.returncode == 0, rows.stderr
    page = shardeval_cmd("compare", str(run), str(run), "--html", str(run / "elsewhere" / "compare.html"))
    assert page.returncode == 0 and (run / "elsewhere" / "compare.html").is_file(), page.stderr
    (tmp_path / "unrelated").mkdir()
    (tmp_path / "unrelated" / "manifest.json").write_text('{"name": "a web app, not a shard"}')
    foreign = shardeval_cmd("merge", "-q", str(run), "-o", str(tmp_path / "unrelated" / "out"))
    assert foreign.returncode == 0, foreign.stderr  # a manifest.json that is not shardeval's is no shard
    (tmp_path / "odd" / "manifest.json").mkdir(parents=True)  # one that cannot be read is none either
    odd = shardeval_cmd("merge", "-q", str(run), "-o", str(tmp_path / "odd" / "out"))
    assert odd.returncode == 0, odd.stderr
    assert {k: v for k, v in digest(tmp_path).items() if not k.startswith(("run/elsewhere", "unrelated", "odd"))} == before
