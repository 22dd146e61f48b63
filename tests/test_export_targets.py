"""The core's side of exporting to trackers (docs/export.md), through a probe target loaded with
SHARDEVAL_PLUGINS (tests/export_probe_plugin.py) that writes down what the core hands every
exporter: which runs, keys, steps, statuses and metrics, when a config's `export:` runs (the end of
a launch, `merge --export`, never a plain merge), what a failing target does there (a warning; the
merge stands), and the command line's refusals. Each tracker's own tests check what it writes
(test_export_mlflow.py, test_export_wandb.py, test_export_inspect.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import shardeval_cmd

TESTS = os.path.dirname(os.path.abspath(__file__))
SIM = {"type": "sim", "bench": "arith", "accuracy": 0.7, "ttft_ms": 0, "itl_ms": 0, "output_tokens": 8}

pytestmark = pytest.mark.timeout(180)


def env(probe: Path) -> dict[str, str]:
    return {
        "SHARDEVAL_PLUGINS": "export_probe_plugin",
        "PYTHONPATH": os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]),
        "PROBE_FILE": str(probe),
    }


def config(tmp: Path, name: str = "c.yaml", *, export: list | None = None, sweep: list[str] | None = None, n: int = 12) -> Path:
    data: dict = {
        "services": {"model": SIM} if sweep is None else {s: {**SIM, "accuracy": 0.5 + 0.1 * i} for i, s in enumerate(sweep)},
        "benchmarks": [{"name": "arith", "params": {"n": n}}, {"name": "arith", "id": "arith_b", "params": {"n": n, "seed": 7}}],
        "cluster": {"type": "local", "shards": 2},
        "output": {"progress_interval_s": 0},
        **({"sweep": {"services": sweep}} if sweep else {}),
        **({"export": export} if export is not None else {}),
    }
    path = tmp / name
    path.write_text(json.dumps(data))
    return path


def exports(probe: Path) -> list[dict]:
    return [json.loads(line) for line in probe.read_text().splitlines()] if probe.exists() else []


def one_line(done, code: int) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code, done.stderr
    assert len(lines) == 1 and lines[0].startswith("shardeval: error: ") and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def test_config_export_runs_at_the_end_of_a_local_launch_and_keeps_the_run_identity(tmp_path: Path) -> None:
    probe, out = tmp_path / "probe.jsonl", tmp_path / "out"
    plain = shardeval_cmd("run", str(config(tmp_path, "plain.yaml")), "-o", str(out), env=env(probe))
    assert plain.returncode == 0, plain.stderr
    assert exports(probe) == []  # no export: section, nothing exported
    hashes = {json.loads((out / f"shard_{i}" / "manifest.json").read_text())["config_hash"] for i in range(2)}

    # The same run with an `export:` list: the identity is unchanged (the run resumes, nothing is
    # asked again), and the end of the launch exports after the merge.
    done = shardeval_cmd("run", str(config(tmp_path, export=[{"to": "probe"}])), "-o", str(out), env=env(probe))
    assert done.returncode == 0, done.stderr
    assert "probe: 2 runs" in done.stdout and "COMPLETE" in done.stdout
    manifests = [json.loads((out / f"shard_{i}" / "manifest.json").read_text()) for i in range(2)]
    assert {m["config_hash"] for m in manifests} == hashes
    # the launch's list, for the merge that ends it wherever it runs (`merge --export`): shards
    # that had nothing left to ask kept their manifests, so those cannot be where it is read
    assert json.loads((out / "export.json").read_text()) == [{"to": "probe"}]
    [sent] = exports(probe)
    scores = json.loads((out / "merged" / "scores.json").read_text())
    assert (sent["sweep"], sent["verdict"], sent["root"]) == (False, "COMPLETE", str(out))
    run_id = next(iter(hashes)).split(":")[1][:12]
    assert [r["key"] for r in sent["runs"]] == [f"{run_id}/arith", f"{run_id}/arith_b"]
    for r in sent["runs"]:
        assert (r["model"], r["step"], r["status"], r["tags"]["shardeval.status"], r["tags"]["shardeval.partial"]) == (
            "model",
            0,
            "COMPLETE",
            "COMPLETE",
            "false",
        )
        assert r["params"]["config_hash"] == next(iter(hashes)) and r["params"]["weights"] == "sim"
        assert r["params"]["shardeval_version"] and r["params"]["host"]
        s = scores[r["benchmark"]]
        for name, m in s["metrics"].items():  # every metric: value, bounds and n, to the last digit
            safe = name.replace("@", "_at_")
            assert (r["metrics"][safe], r["metrics"][f"{safe}_ci_low"], r["metrics"][f"{safe}_ci_high"], r["metrics"][f"{safe}_n"]) == (
                m["value"],
                m["ci_low"],
                m["ci_high"],
                m["n"],
            )
        assert (r["metrics"]["n_ok"], r["metrics"]["n_expected"], r["metrics"]["n_errors"]) == (s["n_ok"], s["n_expected"], 0)
        assert r["results_file"] == str(out / "merged" / r["benchmark"] / "results.jsonl")

    # A launch without the list removes it: an old list never exports a new launch.
    again = shardeval_cmd("run", str(config(tmp_path, "plain.yaml")), "-o", str(out), env=env(probe))
    assert again.returncode == 0 and not (out / "export.json").exists() and len(exports(probe)) == 1, again.stderr


def test_a_failing_target_at_the_end_of_a_launch_is_a_warning_and_the_merge_stands(tmp_path: Path) -> None:
    probe, out = tmp_path / "probe.jsonl", tmp_path / "out"
    targets = [{"to": "probe", "fail": "unreachable"}, {"to": "probe", "fail": "crash"}, {"to": "probe"}]
    done = shardeval_cmd("run", str(config(tmp_path, export=targets)), "-o", str(out), env=env(probe))
    assert done.returncode == 0, done.stderr  # every cell ok: the tracker's failure does not fail the evaluation
    assert (out / "merged" / "scores.json").exists() and (out / "merged" / "report.html").exists()
    warned = [line for line in done.stderr.splitlines() if "export to probe not done" in line]
    assert len(warned) == 2 and "Traceback" not in done.stderr, done.stderr
    assert "cannot reach the probe tracker" in warned[0] and f"shardeval export {out} --to probe" in warned[0]
    assert "RuntimeError: the probe library broke" in warned[1] and "second line" not in done.stderr
    assert len(exports(probe)) == 1  # the next target still ran

    # `merge` alone never exports; `merge --export` runs the config's list, read from the manifests
    again = shardeval_cmd("merge", str(out), "-q", env=env(probe))
    assert again.returncode == 0 and len(exports(probe)) == 1, again.stderr
    again = shardeval_cmd("merge", str(out), "--export", env=env(probe))
    assert again.returncode == 0 and len(exports(probe)) == 2, again.stderr
    assert again.stderr.count("export to probe not done") == 2


def test_a_sweep_exports_one_run_per_model_and_benchmark_with_steps_and_differences(tmp_path: Path) -> None:
    probe, out = tmp_path / "probe.jsonl", tmp_path / "out"
    done = shardeval_cmd("run", str(config(tmp_path, sweep=["base", "step1000", "step2000"])), "-o", str(out), env=env(probe))
    assert done.returncode == 0, done.stderr
    first = shardeval_cmd("export", str(out), "--to", "probe", env=env(probe))
    assert first.returncode == 0 and "probe: 6 runs" in first.stdout, first.stderr
    [sent] = exports(probe)
    assert (sent["sweep"], sent["baseline"]) == (True, "base")
    steps = {(r["model"], r["benchmark"]): r["step"] for r in sent["runs"]}
    assert steps == {(m, b): s for m, s in (("base", 0), ("step1000", 1000), ("step2000", 2000)) for b in ("arith", "arith_b")}
    doc = json.loads((out / "merged" / "sweep.json").read_text())
    for r in sent["runs"]:
        rows = [v for v in doc["vs_baseline"] if (v["service"], v["benchmark"]) == (r["model"], r["benchmark"])]
        assert r["vs_baseline"] == len(rows) == (0 if r["model"] == "base" else 1)
        for row in rows:
            assert r["metrics"][f"vs_baseline/{row['metric']}/diff"] == row["diff"]
            assert r["metrics"][f"vs_baseline/{row['metric']}/p_holm"] == row["p_holm"]
    keys = {r["model"]: r["key"].split("/")[0] for r in sent["runs"]}
    assert len(set(keys.values())) == 3  # each model's own run identity

    # A new checkpoint: the sweep's identity changes, the old models' keys do not (a tracker adds
    # only the new model's runs).
    grown = config(tmp_path, "grown.yaml", sweep=["base", "step1000", "step2000", "step3000"])
    done = shardeval_cmd("run", str(grown), "-o", str(out), env=env(probe))
    assert done.returncode == 0, done.stderr
    assert shardeval_cmd("export", str(out), "--to", "probe", env=env(probe)).returncode == 0
    second = exports(probe)[1]
    again = {r["model"]: r["key"].split("/")[0] for r in second["runs"]}
    assert {m: again[m] for m in keys} == keys and again.keys() - keys.keys() == {"step3000"}


def test_a_partial_run_exports_as_partial_then_as_complete_under_the_same_keys(tmp_path: Path) -> None:
    probe, out = tmp_path / "probe.jsonl", tmp_path / "out"
    cfg = config(tmp_path, export=[{"to": "probe"}])
    half = shardeval_cmd("run", str(cfg), "--shard", "0/2", "-o", str(out / "shard_0"), env=env(probe))
    assert half.returncode == 0, half.stderr
    done = shardeval_cmd("export", str(out), "--to", "probe", env=env(probe))
    assert done.returncode == 0, done.stderr  # the export did what it was asked; it says the run is not complete
    assert "not complete: PARTIAL" in done.stderr
    partial = exports(probe)[0]
    assert partial["verdict"].startswith("PARTIAL") and {r["status"] for r in partial["runs"]} == {"PARTIAL"}
    assert {r["tags"]["shardeval.partial"] for r in partial["runs"]} == {"true"}
    assert all(r["metrics"]["n_missing"] > 0 for r in partial["runs"])
    rest = shardeval_cmd("run", str(cfg), "--shard", "1/2", "-o", str(out / "shard_1"), env=env(probe))
    assert rest.returncode == 0, rest.stderr
    assert shardeval_cmd("export", str(out), "--to", "probe", env=env(probe)).returncode == 0
    complete = exports(probe)[1]
    assert [r["key"] for r in complete["runs"]] == [r["key"] for r in partial["runs"]]
    assert {r["status"] for r in complete["runs"]} == {"COMPLETE"} and complete["verdict"] == "COMPLETE"
    # shards run by hand (no launch, no export.json): `merge --export` takes the list their manifests recorded
    assert not (out / "export.json").exists()
    merged = shardeval_cmd("merge", str(out), "--export", env=env(probe))
    assert merged.returncode == 0 and "probe: 2 runs" in merged.stdout and len(exports(probe)) == 3, merged.stderr


def test_export_command_line_refusals(tmp_path: Path) -> None:
    probe, out = tmp_path / "probe.jsonl", tmp_path / "out"
    e = env(probe)
    assert "give -o FILE" in one_line(shardeval_cmd("export", str(out), env=e), 2)
    assert "--project: only with --to" in one_line(
        shardeval_cmd("export", str(out), "-o", str(tmp_path / "t.csv"), "--project", "p", env=e), 2
    )
    assert "unknown exporter 'mlfow'; did you mean 'mlflow'?" in one_line(shardeval_cmd("export", str(out), "--to", "mlfow", env=e), 2)
    line = one_line(shardeval_cmd("export", str(out), "--to", "probe", "--tracking-uri", "file:///x", env=e), 2)
    assert "--tracking-uri: not an option of --to probe" in line
    assert "--format csv: only for a file" in one_line(shardeval_cmd("export", str(out), "--to", "probe", "--format", "csv", env=e), 2)
    # refused before anything is read or merged: the run does not even exist
    assert not out.exists() and not probe.exists()
    # a config's export: list is checked when the config is read, before any shard starts
    bad = shardeval_cmd("run", str(config(tmp_path, "bad.yaml", export=[{"to": "probe", "experimnt": "x"}])), "-o", str(out), env=e)
    assert "export[0]" in one_line(bad, 2) and "experimnt" in bad.stderr and not out.exists()
    bad = shardeval_cmd("run", str(config(tmp_path, "bad.yaml", export=[{"to": "tensorboard"}])), "-o", str(out), env=e)
    line = one_line(bad, 2)
    assert "export[0].to" in line and "unknown exporter 'tensorboard'" in line and "mlflow" in line and "wandb" in line
    bad = shardeval_cmd("run", str(config(tmp_path, "bad.yaml", export=[{"project": "x"}])), "-o", str(out), env=e)
    assert "missing required key 'to'" in one_line(bad, 2)


def test_a_target_brings_its_own_flag_and_the_core_names_none(tmp_path: Path) -> None:
    """The probe plugin declares `--probe-file` (hookspecs.export_flags): `export --help` shows it, it
    sets the probe's `file`, another target refuses it naming what that target takes, and given
    without --to it names the target that takes it. The core's command line names no target's flag."""
    probe, elsewhere = tmp_path / "probe.jsonl", tmp_path / "given.jsonl"
    e = env(probe)
    assert "--probe-file FILE" in shardeval_cmd("export", "--help", env=e).stdout
    assert "--probe-file" not in shardeval_cmd("export", "--help").stdout  # without the plugin, no such flag
    out = tmp_path / "out"
    assert shardeval_cmd("run", str(config(tmp_path)), "-o", str(out), env=e).returncode == 0
    done = shardeval_cmd("export", str(out), "--to", "probe", "--probe-file", str(elsewhere), env=e)
    assert done.returncode == 0, done.stderr
    assert len(exports(elsewhere)) == 1 and not probe.exists()
    line = one_line(shardeval_cmd("export", str(out), "--to", "mlflow", "--probe-file", "x", env=e), 2)
    assert line.endswith("--probe-file: not an option of --to mlflow (it takes --tracking-uri, --experiment)"), line
    line = one_line(shardeval_cmd("export", str(out), "-o", str(tmp_path / "t.csv"), "--probe-file", "x", env=e), 2)
    assert "--probe-file: only with --to (a tracker); add --to probe" in line
    core = (Path(TESTS).parent / "core" / "shardeval" / "cli.py").read_text() + (
        Path(TESTS).parent / "core" / "shardeval" / "results" / "trackers.py"
    ).read_text()
    assert not any(flag in core for flag in ("--tracking-uri", "--experiment", "--project", "--entity"))


def test_sweep_models_whose_configs_hash_alike_are_still_two_tracker_runs(tmp_path: Path) -> None:
    """Two checkpoints served by the simulator differ only in `root`, which is not part of the
    config hash (the server reports it): one tracker run each, never one run updated twice."""
    probe, out = tmp_path / "probe.jsonl", tmp_path / "out"
    cfg = tmp_path / "alike.yaml"
    services = {name: {**SIM, "root": f"/ckpt/{name}"} for name in ("step100", "step200")}
    cfg.write_text(
        json.dumps(
            {
                "services": services,
                "benchmarks": [{"name": "arith", "params": {"n": 6}}],
                "sweep": {"services": list(services)},
                "export": [{"to": "probe"}],
            }
        )
    )
    done = shardeval_cmd("run", str(cfg), "-o", str(out), env=env(probe))
    assert done.returncode == 0, done.stderr
    runs = exports(probe)[-1]["runs"]
    assert len({r["key"].split("/")[0] for r in runs}) == 1  # the same config hash
    assert sorted(r["key"].split("/", 1)[1] for r in runs) == ["step100/arith", "step200/arith"]
