"""`shardeval merge` on shard directories shaped to go wrong: overlapping, missing, torn,
mixed-config, empty, foreign and orphaned. Each gets the right count or the right refusal;
nothing is double-counted, nothing silently dropped, shard files are never modified."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import shardeval_cmd
from shard_factory import make_shard, record
from shardeval.errors import UsageError
from shardeval.results.merge import merge_run
from shardeval.results.outputs import write_merged
from shardeval.results.report import counts


def digest_tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "merged" not in p.parts
    }


def scores(root: Path) -> dict:
    return json.loads((root / "merged" / "scores.json").read_text())


def merged_keys(root: Path, bench: str = "arith") -> list[tuple[int, int]]:
    lines = (root / "merged" / bench / "results.jsonl").read_text().splitlines()
    return [(json.loads(l)["problem_idx"], json.loads(l)["repeat"]) for l in lines]


def test_complete_run_sorted_and_counted(tmp_path):
    for i in range(4):
        make_shard(str(tmp_path), i, 4, n_problems=50, repeats=3)
    before = digest_tree(tmp_path)
    write_merged(merge_run(str(tmp_path)))
    s = scores(tmp_path)["arith"]
    assert (s["n_expected"], s["n_records"], s["n_missing"], s["n_errors"], s["n_duplicates"]) == (150, 150, 0, 0, 0)
    assert s["partial"] is False
    assert merged_keys(tmp_path) == [(p, r) for p in range(50) for r in range(3)]
    traj = (tmp_path / "merged" / "arith" / "trajectories.jsonl").read_text().splitlines()
    assert [(json.loads(l)["problem_idx"], json.loads(l)["repeat"]) for l in traj] == merged_keys(tmp_path)
    assert digest_tree(tmp_path) == before  # shard files untouched


def test_merging_twice_is_byte_identical(tmp_path):
    for i in range(3):
        make_shard(str(tmp_path), i, 3, n_problems=40, repeats=2)
    write_merged(merge_run(str(tmp_path)))
    first = {p.name: p.read_bytes() for p in (tmp_path / "merged").rglob("*") if p.is_file()}
    write_merged(merge_run(str(tmp_path)))
    second = {p.name: p.read_bytes() for p in (tmp_path / "merged").rglob("*") if p.is_file()}
    assert first == second and len(first) == 6  # report.html too


def test_a_shard_copied_twice_is_not_double_counted(tmp_path):
    for i in range(2):
        make_shard(str(tmp_path), i, 2, n_problems=20, repeats=2)
    shutil.copytree(tmp_path / "shard_1", tmp_path / "backup" / "shard_1_copy")
    result = merge_run(str(tmp_path))
    c = counts(result.benchmarks[0])
    assert (c["n_records"], c["n_duplicates"], c["n_conflicts"]) == (40, 20, 0)
    assert result.run.duplicated_shards() == {1: ["backup/shard_1_copy", "shard_1"]}
    write_merged(result)
    assert merged_keys(tmp_path) == [(p, r) for p in range(20) for r in range(2)]


def test_two_runs_of_the_same_shard_that_disagree_keep_one_and_count_the_conflict(tmp_path):
    make_shard(str(tmp_path), 0, 1, n_problems=10, score=lambda p, r: 1.0, name="a")
    make_shard(str(tmp_path), 0, 1, n_problems=10, score=lambda p, r: 1.0 if p < 7 else 0.0, name="b")
    result = merge_run(str(tmp_path))
    c = counts(result.benchmarks[0])
    assert (c["n_records"], c["n_duplicates"], c["n_conflicts"]) == (10, 10, 3)
    # the deterministic rule: the first directory in path order stands
    assert list(result.benchmarks[0].table.score) == [1.0] * 10


def test_missing_last_shard_and_missing_pairs_name_the_shards_to_rerun(tmp_path):
    make_shard(str(tmp_path), 0, 4, n_problems=40)
    make_shard(str(tmp_path), 1, 4, n_problems=40, records=[record("arith", p, 0, 1) for p in range(10, 17)])  # 3 missing
    make_shard(str(tmp_path), 2, 4, n_problems=40)
    result = merge_run(str(tmp_path))  # shard 3, the last one, never started
    c = counts(result.benchmarks[0])
    assert (c["n_expected"], c["n_records"], c["n_missing"]) == (40, 27, 13)
    assert result.run.missing_shards() == [3] and result.rerun_shards() == [1, 3]
    assert result.partial
    write_merged(result)
    report = (tmp_path / "merged" / "report.md").read_text()
    assert "PARTIAL" in report and "rerun shard(s) 1,3: `shardeval run CONFIG --shard I/4` for each" in report
    assert "--array" not in report  # no SLURM launched this run: no SLURM advice
    # the orchestrator that launched a run adds its own way (asked through the rerun_hint hook)
    (tmp_path / "slurm_job.json").write_text('{"array_job_id": "77", "total_shards": 4}')
    write_merged(merge_run(str(tmp_path)))
    report = (tmp_path / "merged" / "report.md").read_text()
    assert f"rerun shard(s) 1,3: `sbatch --array=1,3 {tmp_path}/eval.sbatch`, or `shardeval run" in report


def test_torn_and_undecodable_lines_are_reported_not_fatal(tmp_path):
    make_shard(str(tmp_path), 0, 1, n_problems=10)
    path = tmp_path / "shard_0" / "arith" / "results.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:5]) + b"garbage that is not json\n" + b"".join(lines[5:8]) + lines[8][:30])
    result = merge_run(str(tmp_path))
    cells = result.benchmarks[0].cells
    assert counts(result.benchmarks[0])["n_records"] == 8 and counts(result.benchmarks[0])["n_missing"] == 2
    assert len(cells.unreadable) == 2 and any("torn" in u for u in cells.unreadable)


def test_the_end_of_a_launch_warns_as_merge_does(tmp_path, capsys):
    """A local or Ray launch ends with merge_and_report: what the merge could not read is said
    there too, in the same lines `shardeval merge` prints (it used to be said by merge alone)."""
    from shardeval.launch.orchestrator import merge_and_report

    make_shard(str(tmp_path), 0, 1, n_problems=10)
    path = tmp_path / "shard_0" / "arith" / "results.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:5]) + b"garbage that is not json\n" + b"".join(lines[5:]))
    merge_and_report(str(tmp_path))
    launch = capsys.readouterr()
    merged = shardeval_cmd("merge", str(tmp_path))
    said = [line for line in merged.stderr.splitlines() if "warning" in line]
    assert merged.returncode == 0 and said == ["shardeval: warning: shard_0/arith/results.jsonl: 1 unreadable line(s) skipped"], (
        merged.stderr
    )
    assert [line for line in launch.err.splitlines() if "warning" in line] == said
    assert f"merged into {tmp_path / 'merged'}/" in launch.out


def test_mixed_configs_are_refused_naming_the_odd_shard(tmp_path):
    for i in range(4):
        make_shard(str(tmp_path), i, 4, n_problems=8, config_hash="sha256:aaaa" if i != 2 else "sha256:bbbb")
    with pytest.raises(UsageError) as err:
        merge_run(str(tmp_path))
    msg = str(err.value)
    assert "shard_2 (config sha256:bbbb)" in msg and "other 3 shard(s) (config sha256:aaaa)" in msg and "\n" not in msg


@pytest.mark.parametrize(
    "field,kwargs,needle",
    [("total", {"total": 3}, "total shards"), ("data", {"fingerprint": "sha256:other"}, "arith data")],
)
def test_other_mixtures_are_refused(tmp_path, field, kwargs, needle):
    make_shard(str(tmp_path), 0, 2, n_problems=8)
    make_shard(str(tmp_path), 1, 2, n_problems=8)
    total = kwargs.pop("total", 2)
    make_shard(str(tmp_path), 1, total, n_problems=8, name="odd", **kwargs)
    with pytest.raises(UsageError, match=needle):
        merge_run(str(tmp_path))


def test_empty_shards_when_there_are_more_shards_than_problems(tmp_path):
    for i in range(5):
        make_shard(str(tmp_path), i, 5, n_problems=3)
    result = merge_run(str(tmp_path))
    c = counts(result.benchmarks[0])
    assert (c["n_expected"], c["n_records"], c["n_missing"]) == (3, 3, 0) and not result.partial


def test_records_of_another_benchmark_and_orphans_are_counted(tmp_path):
    make_shard(str(tmp_path), 0, 1, n_problems=5, records=[record("arith", p, 0, 0) for p in range(5)] + [record("gsm8k", 1, 0, 0)])
    (tmp_path / "stray" / "arith").mkdir(parents=True)
    (tmp_path / "stray" / "arith" / "results.jsonl").write_text("")
    result = merge_run(str(tmp_path))
    assert result.benchmarks[0].cells.n_foreign == 1
    assert result.run.orphans == ["stray/arith"]
    assert counts(result.benchmarks[0])["n_records"] == 5


def test_errors_are_kept_apart_and_superseded_by_a_later_ok(tmp_path):
    recs = [record("arith", p, 0, 0, status="error") for p in range(6)]
    recs += [record("arith", p, 0, 0, score=1.0) for p in range(3)]  # a rerun fixed three
    make_shard(str(tmp_path), 0, 1, n_problems=6, records=recs)
    result = merge_run(str(tmp_path))
    c = counts(result.benchmarks[0])
    assert (c["n_records"], c["n_errors"], c["n_superseded_errors"], c["error_kinds"]) == (6, 3, 3, {"server_error": 3})
    assert c["error_rate"] == 0.5
    wrong = merge_run(str(tmp_path), errors_as_wrong=True)
    assert list(wrong.benchmarks[0].table.score) == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    assert [s for s in result.benchmarks[0].table.score if s == s] == [1.0, 1.0, 1.0]  # NaN for errors


def test_merge_while_a_shard_is_running_says_partial(tmp_path):
    make_shard(str(tmp_path), 0, 2, n_problems=10)
    make_shard(str(tmp_path), 1, 2, n_problems=10, state="running", records=[record("arith", 5, 0, 1)])
    result = merge_run(str(tmp_path))
    assert result.partial and result.rerun_shards() == []  # running shards are not told to rerun
    write_merged(result)
    assert "still running: shard_1" in (tmp_path / "merged" / "report.md").read_text()


def test_merge_and_status_cli_errors_are_one_line(tmp_path):
    missing = shardeval_cmd("merge", str(tmp_path / "nope"))
    stderr = missing.stderr
    assert missing.returncode == 2 and stderr.startswith("shardeval: error:") and stderr.count("\n") == 1
    (tmp_path / "empty").mkdir()
    empty = shardeval_cmd("merge", str(tmp_path / "empty"))
    assert empty.returncode == 2 and "no shard directories" in empty.stderr
    make_shard(str(tmp_path / "run"), 0, 2, n_problems=10, state="running")
    st = shardeval_cmd("status", str(tmp_path / "run"))
    assert st.returncode == 0 and "running" in st.stdout and "not started" in st.stdout


def test_superseded_results_are_not_merged(tmp_path):
    make_shard(str(tmp_path), 0, 1, n_problems=4)
    make_shard(str(tmp_path / "shard_0" / "superseded" / "20260101T000000Z"), 0, 1, n_problems=4, name=".", config_hash="sha256:old")
    result = merge_run(str(tmp_path))  # the old config's files do not count as a mixture
    assert len(result.run.shards) == 1 and counts(result.benchmarks[0])["n_duplicates"] == 0
    assert os.path.exists(tmp_path / "shard_0" / "superseded")


def test_status_tells_a_shard_directory_made_in_advance_from_a_missing_one(tmp_path):
    """SLURM's submit makes shard_<i>/logs/ before any task runs (it drops output whose folder is
    missing): such a shard is `not started` in its folder, not "(no directory)"."""
    from shardeval.results.status import status

    make_shard(str(tmp_path), 0, 3, n_problems=30)
    (tmp_path / "shard_1" / "logs").mkdir(parents=True)
    text = status(str(tmp_path))
    rows = {line.split()[0]: line for line in text.splitlines() if line[:1].isdigit()}
    assert rows["1"].endswith("shard_1 (no manifest yet)") and "not started" in rows["1"]
    assert rows["2"].endswith("(no directory)")
