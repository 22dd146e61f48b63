"""Shard math and shard detection (core/shardeval/store/shards.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardeval.errors import UsageError
from shardeval.store.shards import ShardSpec, detect_shard, shard_indices, shard_range


# --- shard_range -------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 10**6), total=st.integers(1, 2000))
def test_ranges_partition_contiguously_with_sizes_within_one(n: int, total: int) -> None:
    ranges = [shard_range(n, i, total) for i in range(total)]
    assert ranges[0][0] == 0 and ranges[-1][1] == n
    for (_, end), (start, _) in zip(ranges, ranges[1:]):
        assert end == start
    sizes = [end - start for start, end in ranges]
    assert min(sizes) >= 0 and max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)  # the first n % total shards hold the extra one


def test_14000_over_8_gives_1750_each() -> None:
    assert [shard_range(14_000, i, 8) for i in range(8)] == [(i * 1750, (i + 1) * 1750) for i in range(8)]


def test_more_shards_than_problems_gives_empty_shards() -> None:
    assert [shard_range(3, i, 5) for i in range(5)] == [(0, 1), (1, 2), (2, 3), (3, 3), (3, 3)]
    assert shard_range(0, 0, 1) == (0, 0)


@pytest.mark.parametrize(
    ("n", "idx", "total", "named"),
    [
        (10, 0, 0, "total=0"),
        (10, 0, -2, "total=-2"),
        (10, 4, 4, "idx=4"),
        (10, -1, 4, "idx=-1"),
        (-1, 0, 4, "n=-1"),
        (10, 1.5, 4, "idx=1.5"),
        (10, "1", 4, "idx='1'"),
        (10, 0, True, "total=True"),
    ],
)
def test_shard_range_rejects_bad_input_naming_it(n: object, idx: object, total: object, named: str) -> None:
    with pytest.raises(UsageError) as err:
        shard_range(n, idx, total)  # type: ignore[arg-type]
    assert named in str(err.value) and "\n" not in str(err.value)


# --- shard_indices -----------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 3000), total=st.integers(1, 60), seed=st.one_of(st.none(), st.integers(0, 2**32)))
def test_indices_partition_the_problems(n: int, total: int, seed: int | None) -> None:
    shards = [list(shard_indices(n, i, total, seed)) for i in range(total)]
    assert sorted(i for shard in shards for i in shard) == list(range(n))
    assert all(shard == sorted(shard) for shard in shards)
    sizes = [len(shard) for shard in shards]
    assert max(sizes) - min(sizes) <= 1


def test_no_seed_is_the_plain_range_and_a_seed_is_stable() -> None:
    assert shard_indices(10, 1, 3, None) == range(4, 7)
    shuffled = shard_indices(1000, 2, 4, 7)
    assert shuffled == shard_indices(1000, 2, 4, 7)
    assert shuffled != list(range(500, 750))
    assert shard_indices(1000, 2, 4, 8) != shuffled


def test_bad_shuffle_seed_is_named() -> None:
    with pytest.raises(UsageError, match="shuffle_seed='x'"):
        shard_indices(10, 0, 2, "x")  # type: ignore[arg-type]


# --- detect_shard: every source ----------------------------------------------------------------


def test_nothing_set_means_no_shard() -> None:
    assert detect_shard(None, {"PATH": "/bin", "RANK": "0"}, None) is None


def test_flag() -> None:
    spec = detect_shard("2/4", {}, None)
    assert (spec.idx, spec.total) == (2, 4)
    assert spec.describe() == "shard 2/4 (from --shard 2/4)"


def test_nel_variables() -> None:
    spec = detect_shard(None, {"NEL_SHARD_IDX": "2", "NEL_TOTAL_SHARDS": "4"}, 16)
    assert spec == ShardSpec(2, 4, "NEL_SHARD_IDX=2, NEL_TOTAL_SHARDS=4")
    assert spec.describe() == "shard 2/4 (from NEL_SHARD_IDX=2, NEL_TOTAL_SHARDS=4)"


def test_nel_index_with_total_from_config() -> None:
    spec = detect_shard(None, {"NEL_SHARD_IDX": "3"}, 16)
    assert (spec.idx, spec.total) == (3, 16) and "cluster.shards=16" in spec.source


@pytest.mark.parametrize(
    ("task_ids", "low", "step"),
    [
        (range(1, 17), 1, 1),  # --array=1-16
        (range(0, 31, 2), 0, 2),  # --array=0-30:2
        (range(16), 0, 1),  # --array=0-15
        (range(5, 50, 3), 5, 3),  # --array=5-47:3
    ],
)
def test_slurm_array_normalised_by_min_and_step(task_ids: range, low: int, step: int) -> None:
    count = len(task_ids)
    seen = []
    for task_id in task_ids:
        env = {
            "SLURM_ARRAY_TASK_ID": str(task_id),
            "SLURM_ARRAY_TASK_MIN": str(low),
            "SLURM_ARRAY_TASK_STEP": str(step),
            "SLURM_ARRAY_TASK_COUNT": str(count),
            "SLURM_JOB_ID": "99",
        }
        spec = detect_shard(None, env, None)
        assert spec.total == count
        assert f"SLURM_ARRAY_TASK_ID={task_id}" in spec.describe()
        seen.append(spec.idx)
    assert seen == list(range(count))


def test_kubernetes_completion_index_takes_total_from_env_or_config() -> None:
    spec = detect_shard(None, {"JOB_COMPLETION_INDEX": "7", "NEL_TOTAL_SHARDS": "8"}, None)
    assert (spec.idx, spec.total) == (7, 8) and "JOB_COMPLETION_INDEX=7" in spec.source
    spec = detect_shard(None, {"JOB_COMPLETION_INDEX": "3"}, 8)
    assert (spec.idx, spec.total) == (3, 8) and "cluster.shards=8" in spec.source


def test_torchrun_rank_and_world_size() -> None:
    spec = detect_shard(None, {"RANK": "1", "WORLD_SIZE": "2"}, None)
    assert spec == ShardSpec(1, 2, "RANK=1, WORLD_SIZE=2")
    assert detect_shard(None, {"WORLD_SIZE": "2"}, None) is None  # both or neither


def test_priority_flag_then_nel_then_slurm_then_k8s_then_torchrun() -> None:
    env = {
        "NEL_SHARD_IDX": "1",
        "NEL_TOTAL_SHARDS": "4",
        "SLURM_ARRAY_TASK_ID": "2",
        "SLURM_ARRAY_TASK_MIN": "0",
        "SLURM_ARRAY_TASK_STEP": "1",
        "SLURM_ARRAY_TASK_COUNT": "8",
        "JOB_COMPLETION_INDEX": "3",
        "RANK": "4",
        "WORLD_SIZE": "16",
    }
    assert detect_shard("0/2", env, None).source == "--shard 0/2"
    assert detect_shard(None, env, None).idx == 1
    del env["NEL_SHARD_IDX"]
    assert detect_shard(None, env, None).idx == 2
    for key in [k for k in env if k.startswith("SLURM")]:
        del env[key]
    assert detect_shard(None, env, None).idx == 3
    del env["JOB_COMPLETION_INDEX"], env["NEL_TOTAL_SHARDS"]
    assert detect_shard(None, env, None).idx == 4


# --- detect_shard: every bad value is one line naming the variable and its value ---------------


SLURM = {"SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_STEP": "1", "SLURM_ARRAY_TASK_COUNT": "4"}


@pytest.mark.parametrize(
    ("flag", "env", "config_total", "named"),
    [
        ("5/4", {}, None, "--shard 5/4"),
        ("-1/4", {}, None, "--shard -1/4"),
        ("0/0", {}, None, "--shard 0/0"),
        ("abc", {}, None, "--shard 'abc'"),
        ("1.5/4", {}, None, "--shard '1.5/4'"),
        ("", {}, None, "--shard ''"),
        ("1/", {}, None, "--shard '1/'"),
        (None, {"NEL_SHARD_IDX": "5", "NEL_TOTAL_SHARDS": "4"}, None, "NEL_SHARD_IDX=5 is out of range for NEL_TOTAL_SHARDS=4: use 0..3"),
        (None, {"NEL_SHARD_IDX": "4", "NEL_TOTAL_SHARDS": "4"}, None, "NEL_SHARD_IDX=4"),
        (None, {"NEL_SHARD_IDX": "-1", "NEL_TOTAL_SHARDS": "4"}, None, "NEL_SHARD_IDX=-1"),
        (None, {"NEL_SHARD_IDX": "abc", "NEL_TOTAL_SHARDS": "4"}, None, "NEL_SHARD_IDX='abc'"),
        (None, {"NEL_SHARD_IDX": "1.5", "NEL_TOTAL_SHARDS": "4"}, None, "NEL_SHARD_IDX='1.5'"),
        (None, {"NEL_SHARD_IDX": "", "NEL_TOTAL_SHARDS": "4"}, None, "NEL_SHARD_IDX=''"),
        (None, {"NEL_SHARD_IDX": "0", "NEL_TOTAL_SHARDS": "0"}, None, "NEL_TOTAL_SHARDS=0"),
        (None, {"NEL_SHARD_IDX": "0", "NEL_TOTAL_SHARDS": "x"}, None, "NEL_TOTAL_SHARDS='x'"),
        (None, {"NEL_SHARD_IDX": "0", "NEL_TOTAL_SHARDS": ""}, None, "NEL_TOTAL_SHARDS=''"),
        (None, {"NEL_SHARD_IDX": "0", "NEL_TOTAL_SHARDS": "-3"}, None, "NEL_TOTAL_SHARDS=-3"),
        (None, {"NEL_SHARD_IDX": "2"}, None, "NEL_SHARD_IDX=2"),
        (None, {"NEL_SHARD_IDX": "16"}, 16, "NEL_SHARD_IDX=16 is out of range for cluster.shards=16"),
        (None, {"NEL_TOTAL_SHARDS": "4"}, None, "NEL_TOTAL_SHARDS=4"),
        (None, {**SLURM, "SLURM_ARRAY_TASK_ID": "4"}, None, "SLURM_ARRAY_TASK_ID=4"),
        (None, {**SLURM, "SLURM_ARRAY_TASK_ID": "x"}, None, "SLURM_ARRAY_TASK_ID='x'"),
        (None, {**SLURM, "SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_MIN": "2"}, None, "SLURM_ARRAY_TASK_MIN=2"),
        (None, {**SLURM, "SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_STEP": "2"}, None, "SLURM_ARRAY_TASK_STEP=2"),
        (None, {**SLURM, "SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_STEP": "0"}, None, "SLURM_ARRAY_TASK_STEP=0"),
        (None, {**SLURM, "SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "0"}, None, "SLURM_ARRAY_TASK_COUNT=0"),
        (None, {"SLURM_ARRAY_TASK_ID": "0"}, None, "SLURM_ARRAY_TASK_COUNT"),
        (None, {"JOB_COMPLETION_INDEX": "2"}, None, "JOB_COMPLETION_INDEX=2"),
        (None, {"JOB_COMPLETION_INDEX": "8", "NEL_TOTAL_SHARDS": "8"}, None, "JOB_COMPLETION_INDEX=8"),
        (None, {"JOB_COMPLETION_INDEX": "1.5"}, 8, "JOB_COMPLETION_INDEX='1.5'"),
        (None, {"RANK": "2", "WORLD_SIZE": "2"}, None, "RANK=2 is out of range for WORLD_SIZE=2"),
        (None, {"RANK": "", "WORLD_SIZE": "2"}, None, "RANK=''"),
        (None, {"RANK": "0", "WORLD_SIZE": "0"}, None, "WORLD_SIZE=0"),
    ],
)
def test_bad_values_are_one_line_naming_variable_and_value(
    flag: str | None, env: dict[str, str], config_total: int | None, named: str
) -> None:
    with pytest.raises(UsageError) as err:
        detect_shard(flag, env, config_total)
    message = str(err.value)
    assert named in message
    assert "\n" not in message and len(message) < 300
