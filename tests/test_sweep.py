"""Sweeps: every model × every benchmark in one launch, merged into one table (issue 16).

Real processes throughout: the CLI in a subprocess, the local orchestrator, simulators on
127.0.0.1 (managed by the shards, or started here and reached as `type: api`).
"""

from __future__ import annotations

import json
import os
import shutil
from contextlib import ExitStack
from pathlib import Path

import pytest
import yaml

from browser import browser, visit  # noqa: F401  (browser is a fixture)
from conftest import REPO, running_sim, shardeval_cmd
from shardeval.config.loading import load_config
from shardeval.store.records import read_manifest
from shardeval.config.sweep import model_config
from shardeval.identity import config_hash

EXAMPLE = os.path.join(REPO, "examples", "sweep_sim.yaml")


def _sweep_json(root: Path) -> dict:
    return json.loads((root / "merged" / "sweep.json").read_text())


@pytest.fixture(scope="module")
def example_run(tmp_path_factory) -> Path:
    """examples/sweep_sim.yaml run as a user runs it (then merged again, as a user may)."""
    root = tmp_path_factory.mktemp("sweep") / "out"
    run = shardeval_cmd("run", EXAMPLE, "-o", str(root), timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    merge = shardeval_cmd("merge", str(root))
    assert merge.returncode == 0, merge.stderr
    assert "## vs baseline" in merge.stdout
    return root


def test_example_table_contains_the_true_accuracies_and_right_signs(example_run: Path) -> None:
    config = yaml.safe_load(Path(EXAMPLE).read_text())
    truth = {name: section["accuracy"] for name, section in config["services"].items()}
    doc = _sweep_json(example_run)
    assert doc["baseline"] == "base" and doc["services"] == ["base", "step1", "step2"]
    cells = [c for c in doc["cells"] if c["metric"] == "accuracy"]
    assert sorted((c["service"], c["benchmark"]) for c in cells) == sorted((s, b) for s in truth for b in ("arith", "arith_b"))  # 3 x 2
    for c in cells:
        assert c["ci_low"] <= truth[c["service"]] <= c["ci_high"], c
        assert c["complete"] and c["n"] == 400
    vs = doc["vs_baseline"]
    assert len(vs) == 4  # two models x two benchmarks
    for row in vs:
        true_diff = truth[row["service"]] - truth["base"]
        assert row["diff"] > 0 and row["ci_low"] > 0 and true_diff > 0, row  # the sign is right and sure
        assert row["ci_low"] <= true_diff <= row["ci_high"], row
        assert row["test"] == "mcnemar_exact" and row["complete"] and row["n"] == 400
        assert row["p_value"] <= row["p_holm"] <= 1 and row["p_holm"] < 0.01
    md = (example_run / "merged" / "sweep.md").read_text()
    assert "| step2 |" in md and "base (baseline)" in md


def test_each_model_is_an_ordinary_run(example_run: Path, tmp_path: Path) -> None:
    """<out>/<service>/ merges, compares and shows status on its own, with the identity the same
    single-model config has."""
    single = yaml.safe_load(Path(EXAMPLE).read_text())
    single["services"] = {"model": single["services"]["step1"]}
    del single["sweep"]
    (tmp_path / "single.yaml").write_text(yaml.safe_dump(single))
    step1 = example_run / "step1"
    manifest = read_manifest(str(step1 / "shard_0"))
    assert manifest.config_hash == config_hash(load_config(str(tmp_path / "single.yaml")))  # service names are not identity
    assert manifest.config_hash == config_hash(model_config(load_config(EXAMPLE), "step1"))
    assert manifest.sweep.service == "step1" and manifest.sweep.services == ["base", "step1", "step2"]
    before = (step1 / "merged" / "scores.json").read_bytes()
    merged = shardeval_cmd("merge", "-q", str(step1), "-o", str(tmp_path / "alone"))
    assert merged.returncode == 0, merged.stderr
    assert (tmp_path / "alone" / "scores.json").read_bytes() == before
    compare = shardeval_cmd("compare", str(example_run / "base"), str(step1), "--json")
    assert compare.returncode == 0, compare.stderr
    assert all(r["diff"] > 0 for r in json.loads(compare.stdout))
    status = shardeval_cmd("status", str(step1))
    assert status.returncode == 0 and "complete" in status.stdout


def test_status_shows_the_grid(example_run: Path, tmp_path: Path) -> None:
    root = tmp_path / "copy"
    shutil.copytree(example_run, root)
    shutil.rmtree(root / "step2" / "shard_1")
    out = shardeval_cmd("status", str(root))
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines()]
    grid = {(r[0], r[1]): r for r in rows if len(r) > 2 and r[0] in ("base", "step1", "step2")}
    assert set(grid) == {(m, b) for m in ("base", "step1", "step2") for b in ("arith", "arith_b")}
    assert grid["base", "arith"][2] == "400/400" and grid["step2", "arith"][2] == "200/400"
    assert "step2: shard 1 not started" in out.stdout


def _api_sweep(path: Path, urls: dict[str, str], root: Path, n: int = 40) -> Path:
    config = {
        "services": {name: {"type": "api", "url": url, "model": "sim"} for name, url in urls.items()},
        "benchmarks": [
            {"name": "arith", "params": {"n": n}, "max_concurrent": 8},
            {"name": "arith", "id": "arith_b", "params": {"n": n, "seed": 3}, "max_concurrent": 8},
        ],
        "sweep": {"services": list(urls), "baseline": next(iter(urls))},
        "cluster": {"type": "local", "shards": 2, "parallel": 2},
        "output": {"dir": str(root), "progress_interval_s": 0},
    }
    path.write_text(json.dumps(config))
    return path


def _results(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.glob("*/shard_*/*/results.jsonl"))}


def test_adding_a_model_asks_only_its_cells(tmp_path: Path) -> None:
    """The old models' servers are stopped before the rerun: their cells start nothing, ask
    nothing and do not fail; only the new model's requests are asked."""
    root = tmp_path / "out"
    with ExitStack() as old:
        urls = {
            name: old.enter_context(running_sim("--bench", "arith", "--accuracy", acc, "--ttft-ms", "1", "--itl-ms", "0"))
            for name, acc in (("a", "0.5"), ("b", "0.6"), ("c", "0.7"))
        }
        first = shardeval_cmd("run", str(_api_sweep(tmp_path / "three.yaml", urls, root)), timeout=180)
        assert first.returncode == 0, first.stderr[-3000:]
    before = _results(root)
    assert len(before) == 3 * 2 * 2  # models x shards x benchmarks
    with running_sim("--bench", "arith", "--accuracy", "0.9", "--ttft-ms", "1", "--itl-ms", "0") as new_url:
        rerun = shardeval_cmd("run", str(_api_sweep(tmp_path / "four.yaml", {**urls, "d": new_url}, root)), timeout=180)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    after = _results(root)
    assert {k: v for k, v in after.items() if not k.startswith("d/")} == before  # nothing rewritten
    new = [line for k, v in after.items() if k.startswith("d/") for line in v.splitlines()]
    assert len(new) == 2 * 40 and all(json.loads(line)["status"] == "ok" for line in new)
    for name in ("a", "b", "c"):
        for shard in (0, 1):
            assert f"[{name} shard {shard}/2] shardeval: every pair of this shard already has an ok record" in rerun.stderr
            log = (root / name / f"shard_{shard}" / "logs" / "shard.log").read_text()
            assert log.count("serving") == 1  # the service line of the first run only: the rerun reached no endpoint
    doc = _sweep_json(root)
    assert doc["services"] == ["a", "b", "c", "d"] and not doc["partial"]
    assert {r["service"] for r in doc["vs_baseline"]} == {"b", "c", "d"}


@pytest.fixture(scope="module")
def api_run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("api_sweep")
    root = tmp / "out"
    with ExitStack() as servers:
        urls = {
            name: servers.enter_context(
                running_sim("--bench", "arith", "--accuracy", acc, "--ttft-ms", "1", "--itl-ms", "0", "--model", "sim")
            )
            for name, acc in (("a", "0.5"), ("b", "0.8"))
        }
        run = shardeval_cmd("run", str(_api_sweep(tmp / "two.yaml", urls, root, n=30)), timeout=180)
    assert run.returncode == 0, run.stderr[-3000:]
    return root


def _merge_both(root: Path, model: str, tmp: Path, *flags: str) -> tuple[dict, dict]:
    """(the sweep merge's scores.json of `model`, a standalone merge of <root>/<model>'s)."""
    sweep = shardeval_cmd("merge", "-q", *flags, str(root))
    alone = shardeval_cmd("merge", "-q", *flags, str(root / model), "-o", str(tmp / "alone"))
    assert sweep.returncode == alone.returncode and sweep.returncode in (0, 3), sweep.stderr + alone.stderr
    return (json.loads((root / model / "merged" / "scores.json").read_text()), json.loads((tmp / "alone" / "scores.json").read_text()))


def test_duplicated_and_missing_cells_merge_as_in_a_single_run(api_run: Path, tmp_path: Path) -> None:
    root = tmp_path / "dup"
    shutil.copytree(api_run, root)
    shutil.copytree(root / "b" / "shard_0", root / "b" / "copy_of_shard_0")  # a shard copied twice
    in_sweep, alone = _merge_both(root, "b", tmp_path)
    assert in_sweep == alone and in_sweep["arith"]["n_duplicates"] == 15 and in_sweep["arith"]["n_ok"] == 30
    shutil.rmtree(root / "b" / "copy_of_shard_0")
    shutil.rmtree(root / "b" / "shard_1")  # half of model b never ran
    in_sweep, alone = _merge_both(root, "b", tmp_path)
    assert in_sweep == alone and in_sweep["arith"]["n_missing"] == 15 and in_sweep["arith"]["partial"]
    doc = _sweep_json(root)
    assert doc["partial"]
    row = next(r for r in doc["vs_baseline"] if r["benchmark"] == "arith")
    assert not row["complete"] and row["n"] == 15 and row["n_only_baseline"] == 15  # paired on the cells both have
    assert "†" in (root / "merged" / "sweep.md").read_text() and "‡ 15/30" in (root / "merged" / "sweep.md").read_text()


def test_mixed_identity_is_refused_per_model_as_in_a_single_run(api_run: Path, tmp_path: Path) -> None:
    root = tmp_path / "mixed"
    shutil.copytree(api_run, root)
    path = root / "b" / "shard_1" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["served"]["b"]["root"] = "/weights/other"  # shard 1 of b says it was served other weights
    path.write_text(json.dumps(manifest))
    alone = shardeval_cmd("merge", "-q", str(root / "b"), "-o", str(tmp_path / "alone"))
    sweep = shardeval_cmd("merge", "-q", str(root))
    assert alone.returncode == sweep.returncode == 2
    assert sweep.stderr.strip() == alone.stderr.strip().replace("shardeval: error: ", "shardeval: error: sweep model 'b': ")
    in_sweep, alone_scores = _merge_both(root, "b", tmp_path, "--allow-mixed-models")
    assert in_sweep == alone_scores and in_sweep["arith"]["mixed_models"]


def test_a_launch_index_selects_a_cell(tmp_path: Path) -> None:
    """NEL_SHARD_IDX over models × shards (model-major), as a SLURM array or Indexed Job gives it."""
    out = shardeval_cmd("run", EXAMPLE, "--dry-run", "-o", str(tmp_path), env={"NEL_SHARD_IDX": "3", "NEL_TOTAL_SHARDS": "6"})
    assert out.returncode == 0, out.stderr
    assert f"-> {tmp_path}/step1/shard_1/arith" in out.stdout and "sweep cell 3 of 6: step1" in out.stderr
    picked = shardeval_cmd("run", EXAMPLE, "--dry-run", "-o", str(tmp_path), "--sweep-services", "step2,base", "--shard", "1/4")
    assert f"-> {tmp_path}/step2/shard_1/arith" in picked.stdout, picked.stderr


@pytest.mark.parametrize(
    "argv, env, message",
    [
        (["--shard", "0/5"], {}, "does not split over the sweep's 3 models"),
        (["--sweep-services", "base,nope"], {}, "'nope' is not a model of the sweep; its models: base, step1, step2"),
        (["--sweep-services", "base,base"], {}, "give each model once"),
        (["--model-url", "http://127.0.0.1:9/v1"], {}, "is a sweep of several models"),
        (["-O", "sweep.baseline=zzz"], {}, "sweep.baseline: 'zzz' is not one of the sweep's models"),
        (["-O", "sweep.services=[base, ghost]"], {}, "sweep.services[1]: no service 'ghost'"),
        (["-O", "benchmarks.0.solver.service=base", "-O", "benchmarks.1.solver.service=base"], {}, "none runs against the sweep's models"),
    ],
)
def test_bad_sweep_input_is_one_line(argv: list[str], env: dict[str, str], message: str, tmp_path: Path) -> None:
    out = shardeval_cmd("run", EXAMPLE, "--dry-run", "-o", str(tmp_path), *argv, env=env)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in out.stderr


def test_checkpoints_from_a_glob(tmp_path: Path) -> None:
    """One service per checkpoint folder, in natural order, named after it; a rerun finds new ones."""
    for step in ("step2", "step10", "step1"):
        (tmp_path / "ckpt" / step).mkdir(parents=True)
    config = {
        "services": {"base": {"type": "sim", "bench": "arith", "model": "base"}},
        "benchmarks": [{"name": "arith", "params": {"n": 4}}],
        "sweep": {"services": ["base"], "checkpoints": {"template": "base", "paths": f"{tmp_path}/ckpt/step*/"}},
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(json.dumps(config))
    loaded = load_config(str(path))
    assert loaded.sweep.services == ["base", "step1", "step2", "step10"] and loaded.sweep.baseline == "base"
    assert loaded.services["step10"].model == f"{tmp_path}/ckpt/step10/"
    assert model_config(loaded, "step2").benchmarks[0].solver.service == "step2"
    (tmp_path / "ckpt" / "step20").mkdir()
    assert load_config(str(path)).sweep.services[-1] == "step20"
    config["sweep"]["checkpoints"]["paths"] = [f"{tmp_path}/ckpt/step1", f"{tmp_path}/other/step1"]
    path.write_text(json.dumps(config))
    out = shardeval_cmd("run", str(path), "--dry-run")
    assert out.returncode == 2 and "would be service 'step1', which is already defined; set sweep.checkpoints.prefix" in out.stderr


def test_compare_and_the_sweep_report_the_same_interval_and_p(example_run: Path, browser) -> None:
    """Issue 24, item 9: one function for paired intervals. `compare base step2` and the sweep's
    vs-baseline row of the same pair give the same interval, stderr and p (they differed in the
    4th decimal: z against t), and a p below 0.0001 reads `<0.0001` in compare's text, sweep.md and
    both pages, never 0.0000."""
    doc = _sweep_json(example_run)
    for service in ("step1", "step2"):
        got = shardeval_cmd("compare", str(example_run / "base"), str(example_run / service), "--json")
        assert got.returncode == 0, got.stderr
        by_bench = {r["benchmark"]: r for r in json.loads(got.stdout)}
        rows = [r for r in doc["vs_baseline"] if r["service"] == service]
        assert sorted(r["benchmark"] for r in rows) == sorted(by_bench) == ["arith", "arith_b"]
        for row in rows:
            mine = by_bench[row["benchmark"]]
            for key in ("diff", "stderr", "ci_low", "ci_high", "p_value", "df", "test", "ci_method"):
                assert mine[key] == row[key], (service, row["benchmark"], key, mine[key], row[key])
            assert mine["n_cells"] == row["n"] == 400
    text = shardeval_cmd("compare", str(example_run / "base"), str(example_run / "step2"), "--html", str(example_run.parent / "cmp.html"))
    assert text.returncode == 0, text.stderr
    tiny = [r for r in doc["vs_baseline"] if r["p_value"] < 0.0001]
    assert tiny, "the example has a pair with p < 0.0001"
    assert "p = <0.0001" in text.stdout and "p = 0.0000" not in text.stdout
    md = (example_run / "merged" / "sweep.md").read_text()
    assert "| <0.0001 |" in md and "| 0.0000 |" not in md
    html = (example_run.parent / "cmp.html").read_text()
    assert "&lt;0.0001</td>" in html and ">0.0000</td>" not in html
    # sweep.html's differences are a table its script draws: read as shown, in Chromium
    with visit(browser, (example_run / "merged" / "sweep.html").as_uri(), ready="document.body.dataset.charts") as v:
        shown = v.page.eval_on_selector_all(
            "#vs-table td[data-key$='/p_value'], #vs-table td[data-key$='/p_holm']",
            "tds => tds.map(td => [JSON.parse(td.dataset.value), td.textContent])",
        )
    assert len(shown) == 2 * len(doc["vs_baseline"])
    assert all(text == (f"{p:.4f}" if p >= 0.0001 else "<0.0001") for p, text in shown), shown
    assert any(text == "<0.0001" for _, text in shown) and not any(text == "0.0000" for _, text in shown)


def test_p_values_read_the_same_everywhere() -> None:
    """One formatting function for every output; p exactly 0 and None included."""
    from shardeval_pages.page import p_cell
    from shardeval.results.report import fmt_p

    assert [fmt_p(p) for p in (0.0, 1e-300, 0.00009999, 0.0001, 0.03125, 1.0, None)] == [
        "<0.0001",
        "<0.0001",
        "<0.0001",
        "0.0001",
        "0.0312",
        "1.0000",
        "—",
    ]
    assert ">&lt;0.0001</td>" in p_cell(0.0, "k") and 'data-value="0.0"' in p_cell(0.0, "k")
    assert ">0.0312</td>" in p_cell(0.03125, "k")
