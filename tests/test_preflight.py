"""A launch checks, once and before any shard starts, what every shard would otherwise fail on
(issue 24, items 3, 4 and 16): another run in the output directory (named key by key, never
merged and printed as this one), data files, a benchmark's own pre-flight, a judge rubric its mode
cannot read, an output root that cannot be written, and what --fresh needs before it moves
anything aside. Real CLI subprocesses against the simulator on 127.0.0.1."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import REPO, running_sim, shardeval_cmd

FAST = ("--bench", "arith", "--accuracy", "0.7", "--ttft-ms", "0", "--itl-ms", "0")
TESTS = os.path.dirname(os.path.abspath(__file__))
PLUGIN_ENV = {"SHARDEVAL_PLUGINS": "preflight_plugin", "PYTHONPATH": os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")])}


def write(tmp: Path, url: str, *, shards: int | None = 2, bench: dict | None = None, extra: dict | None = None) -> Path:
    config = {
        "services": {"model": {"type": "api", "url": url, "model": "sim"}},
        "benchmarks": [{"name": "arith", "params": {"n": 6}, **(bench or {})}],
        "output": {"progress_interval_s": 0},
        **({"cluster": {"shards": shards}} if shards else {}),
        **(extra or {}),
    }
    path = tmp / "c.yaml"
    path.write_text(json.dumps(config))
    return path


def snapshot(root: Path) -> dict[str, bytes]:
    """The results and manifests under root (not the logs, lock and heartbeat a writer that
    starts and refuses touches): path -> bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
        and p.suffix in (".jsonl", ".json")
        and p.name != "heartbeat.json"
        and "merged" not in p.parts
        and "logs" not in p.parts
    }


def one_error_line(done) -> str:
    """The refusal: exit 2, exactly one line on stderr, no shard started (no `[shard` prefix), no
    traceback, nothing merged or printed as results."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("shardeval: error: "), done.stderr
    assert "[shard" not in done.stderr and "Traceback" not in done.stderr
    assert "COMPLETE" not in done.stdout and "accuracy" not in done.stdout, done.stdout
    return lines[0]


@pytest.fixture
def finished(tmp_path: Path):
    """A finished 2-shard run of arith in tmp/out, and the simulator that answered it."""
    with running_sim(*FAST) as url:
        cfg = write(tmp_path, url)
        done = shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "out"))
        assert done.returncode == 0 and "COMPLETE" in done.stdout, done.stderr
        yield url, cfg, tmp_path / "out"


# --- item 3: another run in the output directory -------------------------------------------------


@pytest.mark.parametrize(
    "args, names",
    [
        # temperature is filled with the benchmark's declared default (greedy) when unset, so it changes from 0.0
        (("-O", "benchmarks[0].solver.generation.temperature=0.2"), ["benchmarks[0].solver.generation.temperature: 0.0 -> 0.2"]),
        (("-O", "benchmarks[0].solver.generation.top_p=0.9"), ["benchmarks[0].solver.generation.top_p: unset -> 0.9"]),
        (
            ("--model-id", "other", "-O", "benchmarks.0.repeats=3"),
            ['services.model.model: "sim" -> "other"', "benchmarks[0].repeats: 1 -> 3"],
        ),
        (("-O", "benchmarks[0].params.n=8"), ["benchmarks[0].params.n: 6 -> 8"]),
        (
            ("-O", "benchmarks=[{name: arith, params: {n: 6}}, {name: arith, id: again, params: {n: 2}}]"),
            ['benchmarks[1]: unset -> {"id": "again", "name": "arith", "params": {"n": 2}'],
        ),
        (
            ("-O", "seed=7", "-O", "benchmarks[0].solver.system_prompt=Be brief."),
            ["seed: 0 -> 7", 'benchmarks[0].solver.system_prompt: unset -> "Be brief."'],
        ),
    ],
)
def test_a_changed_config_is_refused_before_any_shard_naming_each_change(finished, args, names) -> None:
    """H3: the shards of another run in -o: one line naming every changed key (unset vs set,
    nested, lists), with advice that works; exit 2, no shard started, nothing merged or printed,
    the old run's files byte for byte as they were."""
    url, cfg, out = finished
    before = snapshot(out)
    done = shardeval_cmd("run", str(cfg), "-o", str(out), *args)
    line = one_error_line(done)
    assert f"{out}/shard_0 cannot be resumed: it holds another run" in line, line
    for name in names:
        assert name in line, line
    assert "--fresh" in line and "another -o" in line
    assert snapshot(out) == before


def test_the_advice_works_and_a_change_outside_the_identity_resumes(finished) -> None:
    """H3: --fresh or another -o run the changed config; a URL or timeout change is no change."""
    url, cfg, out = finished
    resumed = shardeval_cmd("run", str(cfg), "-o", str(out), "-O", "services.model.timeouts.connect=5")
    assert resumed.returncode == 0 and "COMPLETE" in resumed.stdout and "cannot be resumed" not in resumed.stderr
    other = shardeval_cmd("run", str(cfg), "-o", str(out.parent / "other"), "-O", "benchmarks[0].solver.generation.temperature=0.2")
    assert other.returncode == 0 and "COMPLETE" in other.stdout, other.stderr
    fresh = shardeval_cmd("run", str(cfg), "-o", str(out), "--fresh", "-O", "benchmarks[0].solver.generation.temperature=0.2")
    assert fresh.returncode == 0 and "COMPLETE" in fresh.stdout, fresh.stderr
    assert all(list((out / f"shard_{k}" / "superseded").iterdir()) for k in (0, 1))


def test_a_shard_refusing_on_its_own_names_the_changes(finished) -> None:
    """H3b: a shard run by hand (as a SLURM task or pod runs it) into another run's directory
    names the changed keys too."""
    url, cfg, out = finished
    done = shardeval_cmd("run", str(cfg), "--shard", "1/2", "-o", str(out / "shard_1"), "-O", "benchmarks[0].repeats=2")
    assert done.returncode == 2
    assert f"{out}/shard_1 cannot be resumed: it holds another run" in done.stderr and "benchmarks[0].repeats: 1 -> 2" in done.stderr


def test_every_shard_refusing_merges_nothing(tmp_path: Path) -> None:
    """H3c: a refusal only the shards can see (the endpoint now serves other weights): each shard
    refuses, and the launch exits 2 without merging or printing the old run's numbers."""
    once = {"services": {"model": {"type": "api", "url": "", "model": "sim", "retries": {"attempts": 1}}}}
    with running_sim(*FAST, "--root", "/weights/a", "--fail-5xx", "0.5") as url:  # some cells left to ask again
        once["services"]["model"]["url"] = url
        cfg = write(tmp_path, url, extra=once)
        first = shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "out"))
    assert "accuracy" in first.stdout and "server" in first.stdout, first.stderr
    before = snapshot(tmp_path / "out")
    with running_sim(*FAST, "--root", "/weights/b") as url:
        cfg = write(tmp_path, url)
        done = shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr
    assert "COMPLETE" not in done.stdout and "accuracy" not in done.stdout and "merged into" not in done.stdout, done.stdout
    assert "/weights/b" in done.stderr and "every shard refused to start" in done.stderr and "nothing merged" in done.stderr
    assert snapshot(tmp_path / "out") == before


def test_a_sweep_where_one_model_refuses_merges_nothing(tmp_path: Path) -> None:
    """H3g: in a sweep, the endpoint of model b now serves other weights: b's cells refuse, a's
    resume. The sweep table printed b's earlier column among the new ones (exit 1); now the launch
    names the cells that refused, merges and prints nothing, and exits 2."""

    def sweep(url_a: str, url_b: str) -> Path:
        config = {
            "services": {
                "a": {"type": "api", "url": url_a, "model": "sim"},
                "b": {"type": "api", "url": url_b, "model": "sim", "retries": {"attempts": 1}},
            },
            # 10 problems a shard: with half of b's requests failing, each of b's shards keeps some to
            # ask again (with 3, one shard drew only successes about once in eight runs, and started nothing)
            "benchmarks": [{"name": "arith", "params": {"n": 20}}],
            "output": {"progress_interval_s": 0},
            "sweep": {"services": ["a", "b"], "baseline": "a"},
            "cluster": {"shards": 2},
        }
        path = tmp_path / "sweep.yaml"
        path.write_text(json.dumps(config))
        return path

    out = tmp_path / "out"
    with running_sim(*FAST, "--root", "/weights/a") as url_a, running_sim(*FAST, "--root", "/weights/b", "--fail-5xx", "0.5") as url_b:
        first = shardeval_cmd("run", str(sweep(url_a, url_b)), "-o", str(out))  # b has cells left to ask again
    assert "# shardeval sweep" in first.stdout and "server_error" in first.stderr, first.stderr
    before = snapshot(out / "b")
    with running_sim(*FAST, "--root", "/weights/a") as url_a, running_sim(*FAST, "--root", "/weights/c") as url_b:
        done = shardeval_cmd("run", str(sweep(url_a, url_b)), "-o", str(out))
    assert done.returncode == 2, done.stderr
    assert "b shard 0/2, b shard 1/2 refused to start" in done.stderr and "nothing merged" in done.stderr, done.stderr
    assert done.stdout == "" and "/weights/c" in done.stderr
    assert snapshot(out / "b") == before


def test_a_run_and_a_sweep_never_launch_into_each_others_root(tmp_path: Path) -> None:
    """H3f: a plain run launched with -o of a sweep's root ran its shards there, and the merge after
    them printed the old sweep's table as COMPLETE, exit 0; a sweep launched into a run's root left
    that run's shards beside its models and replaced its report. Each is one line now, exit 2,
    nothing started and nothing written."""
    with running_sim(*FAST) as url:
        sweep = {
            "services": {"a": {"type": "api", "url": url, "model": "sim"}, "b": {"type": "api", "url": url, "model": "sim"}},
            "sweep": {"services": ["a", "b"], "baseline": "a"},
            "cluster": {"shards": 2},
        }
        plain, swept = write(tmp_path, url), tmp_path / "sweep.yaml"
        config = json.loads(plain.read_text())
        swept.write_text(json.dumps({**config, **sweep}))
        for first, second in ((swept, plain), (plain, swept)):
            out = tmp_path / f"out_{first.stem}"
            done = shardeval_cmd("run", str(first), "-o", str(out))
            assert done.returncode == 0 and "COMPLETE" in done.stdout, done.stderr
            before = snapshot(out)
            line = one_error_line(shardeval_cmd("run", str(second), "-o", str(out)))
            assert f"-o {out} holds" in line and "choose another -o" in line, line
            assert snapshot(out) == before and not (out / "shard_0" / "a").exists()
    assert not (tmp_path / "out_sweep" / "shard_0").exists() and not (tmp_path / "out_c" / "sweep_plan.json").exists()


# --- item 4: everything checkable, checked once before any shard ----------------------------------


@pytest.mark.parametrize(
    "bench, says",
    [
        ({"name": "missing/trivia.jsonl", "params": {}}, "missing/trivia.jsonl"),
        ({"name": "gsm8k", "params": {"path": "no/such/gsm8k.jsonl"}}, "no/such/gsm8k.jsonl"),
        ({"name": "mmlu", "params": {"path": "no/such/mmlu.csv"}}, "no/such/mmlu.csv"),
        ({"name": "no/such/spec.yaml", "params": {}}, "no/such/spec.yaml"),
        ({"name": "mmlu", "params": {"subjects": ["astronomy", "astrology"]}}, "unknown subject 'astrology'"),
    ],
)
def test_a_missing_data_file_is_one_line_before_any_shard(tmp_path: Path, bench: dict, says: str) -> None:
    """H4: the data file of a built-in or bring-your-own benchmark is looked for once, by the
    launch, not by every shard after it started; so are the task names its params select."""
    cfg = write(tmp_path, "http://127.0.0.1:9/v1", bench=bench)
    done = shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "out"), cwd=str(tmp_path))
    assert says in one_error_line(done)
    assert not (tmp_path / "out" / "shard_0").exists()


@pytest.mark.parametrize(
    "bench, says",
    [
        ({"name": "empty.jsonl", "params": {}}, "benchmarks[0] (empty.jsonl): no problems to ask"),
        ({"name": "blank.jsonl", "params": {}}, "benchmarks[0] (blank.jsonl): no problems to ask"),
        ({"name": "arith", "params": {"n": 0}}, 'benchmarks[0] (arith): no problems to ask (its data with params {"n":0} holds none)'),
    ],
)
@pytest.mark.parametrize("shards", [2, None])
def test_a_benchmark_with_no_problems_is_one_line_before_anything_runs(tmp_path: Path, bench: dict, says: str, shards) -> None:
    """H4e: a data file with no rows (a download cut to nothing, only blank lines) or params that
    select none ran nothing, and the merge said COMPLETE with no number in it, exit 0. Now one
    line, exit 2, before any shard (as `--max-problems 0` and an empty humaneval file already were),
    for a launch of shards and for the run without them."""
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "blank.jsonl").write_text("\n\n")
    cfg = write(tmp_path, "http://127.0.0.1:9/v1", bench=bench, shards=shards)
    done = shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "out"), cwd=str(tmp_path))
    assert says in done.stderr.strip().splitlines()[-1] and done.returncode == 2, done.stderr
    assert "COMPLETE" not in done.stdout and "Traceback" not in done.stderr
    assert not (tmp_path / "out" / "shard_0").exists() and not any((tmp_path / "out").rglob("results.jsonl"))


def test_a_benchmark_plugins_own_preflight_runs_once_before_any_shard(tmp_path: Path) -> None:
    """H4b: a benchmark plugin declares a check (`Benchmark.preflight`: here an image it needs):
    the launch calls it before starting shards; one line, exit 2. A benchmark that passes it runs."""
    marker = tmp_path / "checked"
    bench = {"name": "needs_image", "params": {"image": "registry.local/missing:1", "marker": str(marker)}}
    with running_sim(*FAST) as url:
        cfg = write(tmp_path, url, bench=bench)
        done = shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "out"), env=PLUGIN_ENV)
        assert "image registry.local/missing:1 is not available" in one_error_line(done)
        assert marker.read_text().splitlines() == ["registry.local/missing:1"]  # once: in the launch, no shard started
        good = write(tmp_path, url, bench={"name": "needs_image", "params": {"image": "present", "marker": str(marker)}})
        ran = shardeval_cmd("run", str(good), "-o", str(tmp_path / "good"), env=PLUGIN_ENV)
    assert ran.returncode == 0 and "COMPLETE" in ran.stdout, ran.stderr


def test_an_output_root_that_cannot_be_written_is_refused_before_any_shard(tmp_path: Path) -> None:
    """H4c: -o under a regular file (which root cannot write under either) is one line."""
    (tmp_path / "afile").write_text("x")
    cfg = write(tmp_path, "http://127.0.0.1:9/v1")
    done = shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "afile" / "out"))
    line = one_error_line(done)
    assert f"{tmp_path}/afile/out" in line and "another -o" in line


OPEN_QA = str(Path(REPO) / "examples/byo/open_qa.yaml")


def judged_config(tmp: Path, model: str, judge: str, judge_section: dict, shards: int | None = 2) -> Path:
    return write(
        tmp,
        model,
        shards=shards,
        bench={"name": OPEN_QA, "params": {}, "solver": {"service": "model"}, "judge": judge_section},
        extra={
            "services": {"model": {"type": "api", "url": model, "model": "sim"}, "judge": {"type": "api", "url": judge, "model": "judge"}}
        },
    )


@pytest.mark.parametrize(
    "judge_section, says",
    [
        (
            {"service": "judge", "mode": "pairwise"},
            "pairwise judging with the benchmark's own rubric and verdict pattern, written for single",
        ),
        (
            {"service": "judge", "mode": "pairwise", "rubric": "Compare {answer} with {reference}."},
            "pairwise judging with the benchmark's own verdict pattern, written for single",
        ),
    ],
)
def test_a_judge_rubric_its_mode_cannot_read_is_refused_before_any_shard(tmp_path: Path, judge_section: dict, says) -> None:
    """H4d: a judged run whose rubric asks for another mode's verdict (the mapping's single rubric
    judged pairwise) would make every record a judge error: one line, exit 2, before any shard."""
    cfg = judged_config(tmp_path, "http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1", judge_section)
    done = shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "out"))
    line = one_error_line(done)
    assert says in line, line


@pytest.mark.parametrize(
    "mode, rubric, asked",
    [
        ("pairwise", "Rate {answer} from 1 to 10: Rating: [[N]]", "`[[A]]`/`[[B]]`/`[[C]]`"),
        ("single", "Is {answer} better than {reference}? End with [[A]], [[B]] or [[C]].", "`[[N]]` (as in `Rating: [[5]]`)"),
    ],
)
def test_a_custom_rubric_that_never_asks_for_the_verdict_is_refused(tmp_path: Path, mode: str, rubric: str, asked: str) -> None:
    """H4e: a config rubric without a verdict pattern must ask for what its mode's parser reads."""
    cfg = write(
        tmp_path,
        "http://127.0.0.1:9/v1",
        bench={"judge": {"service": "judge", "mode": mode, "rubric": rubric}},
        extra={
            "services": {
                "model": {"type": "api", "url": "http://127.0.0.1:9/v1", "model": "sim"},
                "judge": {"type": "api", "url": "http://127.0.0.1:9/v1", "model": "judge"},
            }
        },
    )
    line = one_error_line(shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "out")))
    assert f"never asks for {asked}, the verdict {mode} judging reads" in line, line


def test_rescore_judged_in_a_mode_its_rubric_cannot_read_is_refused_first(tmp_path: Path) -> None:
    """H4f: `rescore --judge B=J:pairwise` of a benchmark whose own rubric is single: one line,
    exit 2, nothing written (it made every record a judge error)."""
    with running_sim(*FAST) as model, running_sim("--model", "judge", "--ttft-ms", "0", "--itl-ms", "0") as judge:
        cfg = judged_config(tmp_path, model, judge, {"service": "judge"}, shards=None)
        run = tmp_path / "run"
        done = shardeval_cmd("run", str(cfg), "-o", str(run))
        assert done.returncode == 0, done.stderr
        again = shardeval_cmd("rescore", str(run), "-o", str(tmp_path / "new"), "--judge", "open_qa=judge:pairwise")
    lines = again.stderr.strip().splitlines()
    assert again.returncode == 2 and len(lines) == 1, again.stderr
    assert "pairwise judging with the benchmark's own rubric and verdict pattern, written for single" in lines[0]
    assert not (tmp_path / "new").exists() or not any((tmp_path / "new").rglob("*.jsonl"))


# --- item 16: --fresh checks before it moves anything ---------------------------------------------


def test_fresh_with_an_unusable_cache_moves_nothing(finished) -> None:
    """H16: --fresh with a cache dir under a regular file: one line, exit 2, and every earlier
    result still where it was (no superseded/)."""
    url, cfg, out = finished
    (out.parent / "afile").write_text("x")
    before = snapshot(out)
    done = shardeval_cmd("run", str(cfg), "-o", str(out), "--fresh", "-O", f"cache.dir={out.parent}/afile/cache")
    assert "response cache" in one_error_line(done)
    assert snapshot(out) == before and not any(out.rglob("superseded"))


def test_fresh_in_process_with_an_unusable_cache_moves_nothing(tmp_path: Path) -> None:
    """H16b: the same for the run that needs no orchestrator (no shards): the shard checks the
    cache before it moves its results aside."""
    (tmp_path / "afile").write_text("x")
    with running_sim(*FAST) as url:
        cfg = write(tmp_path, url, shards=None)
        assert shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "out")).returncode == 0
    before = snapshot(tmp_path / "out")
    done = shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "out"), "--fresh", "-O", f"cache.dir={tmp_path}/afile/cache")
    assert done.returncode == 2 and "response cache" in done.stderr, done.stderr
    assert snapshot(tmp_path / "out") == before and not any((tmp_path / "out").rglob("superseded"))


def test_fresh_that_cannot_move_one_shard_moves_none(finished) -> None:
    """H16c: shard_1's superseded/ is a regular file: --fresh refuses before shard_0 moves."""
    url, cfg, out = finished
    (out / "shard_1" / "superseded").write_text("not a directory")
    before = snapshot(out)
    done = shardeval_cmd("run", str(cfg), "-o", str(out), "--fresh")
    assert f"{out}/shard_1/superseded is not a directory" in one_error_line(done)
    assert snapshot(out) == before


def test_fresh_while_one_shard_is_being_written_moves_none(finished) -> None:
    """H16e: a live writer holds shard_0 (a shard run by hand, an earlier launch still going):
    --fresh refuses in one line naming it before shard_1 moves (it moved, and ran, while shard_0
    refused); once the writer is gone, --fresh sets both aside."""
    from shardeval.store.liveness import ShardLease

    url, cfg, out = finished
    before = snapshot(out)
    writer = ShardLease(str(out / "shard_0"))
    writer.acquire()  # a real lock held by another process than the launch
    try:
        done = shardeval_cmd("run", str(cfg), "-o", str(out), "--fresh")
        assert f"{out}/shard_0: already being written by pid {os.getpid()}" in one_error_line(done)
        assert snapshot(out) == before and not any(out.rglob("superseded"))
    finally:
        writer.release()
    done = shardeval_cmd("run", str(cfg), "-o", str(out), "--fresh")
    assert done.returncode == 0 and "COMPLETE" in done.stdout, done.stderr
    assert all(list((out / f"shard_{k}" / "superseded").iterdir()) for k in (0, 1))


def test_fresh_with_fewer_shards_sets_aside_the_ones_past_its_count(finished) -> None:
    """H3e: after a 3-shard run, a 2-shard one is refused naming --fresh, and --fresh works: it
    sets aside shard_2 too (it was left in place, so the merge found two runs, merged nothing and
    the launch exited 0); the SLURM/Ray driver's move does the same."""
    from shardeval.run.resume import set_aside_shards

    url, cfg, out = finished
    three = shardeval_cmd("run", str(cfg), "-o", str(out), "--fresh", "-O", "cluster.shards=3")
    assert three.returncode == 0 and "COMPLETE" in three.stdout, three.stderr
    refused = one_error_line(shardeval_cmd("run", str(cfg), "-o", str(out)))
    assert "shard_0 cannot be resumed: it holds shard 0/3, this run has 2 shards" in refused and "--fresh" in refused
    done = shardeval_cmd("run", str(cfg), "-o", str(out), "--fresh")
    assert done.returncode == 0 and "COMPLETE" in done.stdout and "2/2 shards present" in done.stdout, done.stderr
    assert not (out / "shard_2" / "manifest.json").exists() and list((out / "shard_2" / "superseded").iterdir())
    again = shardeval_cmd("run", str(cfg), "-o", str(out), "--fresh", "-O", "cluster.shards=3")
    assert again.returncode == 0, again.stderr
    moved = set_aside_shards(str(out))  # as a 2-shard SLURM or Ray launch with --fresh would
    assert [i for i, _ in moved] == [0, 1, 2] and not any((out / f"shard_{k}" / "manifest.json").exists() for k in range(3))


def test_set_aside_shards_checks_every_shard_before_moving_any(finished) -> None:
    """H16d: the driver-side --fresh of SLURM and Ray (set_aside_shards) likewise moves nothing
    when one shard cannot be moved."""
    from shardeval.errors import UsageError
    from shardeval.run.resume import set_aside_shards

    url, cfg, out = finished
    (out / "shard_1" / "superseded").write_text("not a directory")
    before = snapshot(out)
    with pytest.raises(UsageError, match="shard_1/superseded is not a directory"):
        set_aside_shards(str(out))
    assert snapshot(out) == before


def test_the_diff_is_general_over_nested_values() -> None:
    """H3d: the key-by-key diff is one mechanism over any plain value: nested dicts and lists by
    path, a missing key and null both `unset`, True never equal to 1, long values cut, and only
    what the run identity covers (concurrency or a timeout is no change)."""
    from shardeval.config.loading import config_for_manifest, load_config
    from shardeval.config.diff import changes, summary
    from shardeval.identity import identity_changes

    old = {"a": {"b": [1, {"c": None}], "d": True}, "e": "x" * 100}
    new = {"a": {"b": [1, {"c": 2}, 3], "d": 1}, "f": None}
    found = changes(old, new)
    assert found[:4] == ["a.b[1].c: unset -> 2", "a.b[2]: unset -> 3", "a.d: true -> 1", 'e: "' + "x" * 58 + "… -> unset"]
    assert len(found) == 4 and changes({"k": None}, {}) == [] and summary([str(i) for i in range(9)]).endswith("; and 3 more")
    quick = {"bench": "arith", "model_url": "http://127.0.0.1:9/v1", "model_id": "sim"}
    one = config_for_manifest(load_config(None, [], quick))
    two = config_for_manifest(
        load_config(
            None, ["benchmarks[0].max_concurrent=3", "services.model.timeouts.connect=3", "benchmarks[0].solver.generation.stop=[x]"], quick
        )
    )
    assert identity_changes(one, two) == ['benchmarks[0].solver.generation.stop: unset -> ["x"]']
