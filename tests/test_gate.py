"""`shardeval gate` and `shardeval plan` on the simulator (issue 44's acceptance).

End to end, real processes: a sweep of three simulated models on `arith` (the built-in generated
benchmark at GSM8K's size, 1,319 problems, and a second one of 100), run by `shardeval run` with
the local orchestrator: `base` (accuracy 0.70), `same` (0.70, an identical candidate) and `worse`
(0.65, five points worse). Then `shardeval gate` and `shardeval plan` as a user runs them.

The 200 run pairs. 200 full runs through the simulator would take minutes; they are drawn with the
simulator's own answer model instead, and decided by the real decision code (`decide`). The
simulator's answer to a request is right when a coin falls below its accuracy, the coin being
blake2b(f"{server seed}\\x1f{request seed}\\x1f{prompt text}")[:8] / 2^64 (shardeval_sim.answers,
`Answerer.compose`). The test first checks that this formula gives every score of the real run,
for all three models, from the prompts and request seeds in the run's trajectories; then it draws
200 pairs by giving the simulators 200 other server seeds (the simulator's `--seed`), the
baseline and the candidate the same one, as two simulators started alike are (a candidate then
answers right only where the baseline does, or, identical, exactly where it does). The figures
for candidates with a seed of their own (answers independent of the baseline's) are printed too:
5 points worse is NO-GO about as often, but an identical candidate answering independently is GO
only about a third of the time at 1,319 problems, since its answers differ from the baseline's on
about 42 % of problems by chance; `plan` says how many problems that needs (about 6,400).
"""

from __future__ import annotations

import hashlib
import json
import math
from array import array
from pathlib import Path

import numpy as np
import pytest
import yaml
from statsmodels.stats.proportion import samplesize_proportions_2indep_onetail

from conftest import shardeval_cmd
from shardeval.results.metrics import OK, ScoreTable
from shardeval_metrics.decision import GO, INCONCLUSIVE, NO_GO, decide
from shardeval_metrics.dist import t_ppf

SIM = {"type": "sim", "bench": "arith", "ttft_ms": 0, "itl_ms": 0, "output_tokens": 8}
ACCURACY = {"base": 0.70, "same": 0.70, "worse": 0.65}


def sweep_config(path: Path, out: Path, n_small: int = 100) -> Path:
    config = {
        "services": {name: {**SIM, "accuracy": acc} for name, acc in ACCURACY.items()},
        "benchmarks": [
            {
                "name": "arith",
                "params": {"n": 1319},
                "max_concurrent": 64,
                "solver": {"type": "simple", "generation": {"temperature": 0.7, "max_tokens": 16}},
            },
            {
                "name": "arith",
                "id": "arith_small",
                "params": {"n": n_small, "seed": 7},
                "max_concurrent": 64,
                "solver": {"type": "simple", "generation": {"temperature": 0.7, "max_tokens": 16}},
            },
        ],
        "sweep": {"services": list(ACCURACY), "baseline": "base"},
        "cluster": {"type": "local", "shards": 2, "parallel": 3},
        "output": {"dir": str(out), "progress_interval_s": 0},
    }
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("gate")
    out = root / "out"
    run = shardeval_cmd("run", str(sweep_config(root / "sweep.yaml", out)), "-o", str(out), timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    return out


def gate(*args: str):
    return shardeval_cmd("gate", *args, timeout=120)


def test_a_sweep_is_gated_model_by_model_with_its_exit_code_and_gate_json(sweep: Path) -> None:
    done = gate(str(sweep), "--margin", "0.02")
    assert done.returncode == 4, done.stderr  # NO-GO: `worse` regressed
    doc = json.loads((sweep / "merged" / "gate.json").read_text())
    assert doc["kind"] == "shardeval-gate-sweep" and doc["verdict"] == NO_GO and doc["baseline"] == "base"
    by_model = {m["candidate"]: {b["benchmark"]: b for b in m["benchmarks"]} for m in doc["models"]}
    same, worse = by_model["same"], by_model["worse"]
    assert same["arith"]["verdict"] == GO and same["arith"]["lower"] > -0.02
    assert same["arith_small"]["verdict"] == INCONCLUSIVE
    assert worse["arith"]["verdict"] == NO_GO and worse["arith"]["upper"] < -0.02 and worse["arith"]["beyond_margin"]
    for b in worse.values():
        assert {"diff", "lower", "upper", "alpha", "margin", "n_problems", "n_cells", "n_clusters", "method", "p_worse_holm"} <= set(b)
    assert "worse: NO-GO" in done.stdout and "same: INCONCLUSIVE" in done.stdout


def test_at_100_problems_the_plan_names_the_problems_the_power_formula_gives(sweep: Path, tmp_path: Path) -> None:
    """An identical candidate on 100 problems: INCONCLUSIVE; the plan is the score test's power
    formula at no observed spread: n with t_(n-1, 0.95) * sqrt(δ(1 − δ) / n) = δ, i.e. 135; and a
    run of that many problems is GO."""
    done = gate(str(sweep / "base"), str(sweep / "same"), "--margin", "0.02", "--bench", "arith_small", "--json")
    assert done.returncode == 5, done.stderr
    (d,) = json.loads(done.stdout)["benchmarks"]
    assert d["verdict"] == INCONCLUSIVE and d["plan"]["settles_to"] == GO
    formula = next(n for n in range(2, 10_000) if t_ppf(0.95, n - 1) * math.sqrt(0.02 * 0.98 / n) < 0.02)
    assert d["plan"]["problems"] == formula == 135
    # the number plan names settles it
    out = tmp_path / "out"
    run = shardeval_cmd(
        "run",
        str(sweep_config(tmp_path / "sweep.yaml", out, n_small=formula)),
        "-o",
        str(out),
        "--sweep-services",
        "base,same",
        timeout=240,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    again = gate(str(out / "base"), str(out / "same"), "--margin", "0.02", "--bench", "arith_small", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["benchmarks"][0]["verdict"] == GO


def test_two_runs_exit_0_4_5_and_refuse_what_compare_refuses(sweep: Path, tmp_path: Path, sim: str) -> None:
    base, same, worse = (str(sweep / m) for m in ACCURACY)
    assert gate(base, same, "--margin", "0.02", "--bench", "arith").returncode == 0
    assert (Path(same) / "merged" / "gate.json").is_file()
    assert gate(base, worse, "--margin", "0.02").returncode == 4
    assert gate(base, same, "--margin", "0.02").returncode == 5  # arith GO, arith_small INCONCLUSIVE: not every one GO
    # bad input: one line, exit 2
    for args, words in [
        ((base, same, "--margin", "0.02", "--bench", "mmlu"), "--bench mmlu"),
        ((base, "--margin", "0.02"), "is no sweep"),
        ((base, same, "--margin", "0.02", "--output", str(Path(base) / "shard_0" / "g.json")), "inside the shard directory"),
        ((base, same, "--margin", "0.02", "--metric", "nope"), "scores.nope"),
        ((base, same, "--margin", "0"), "--margin"),
    ]:
        done = gate(*args)
        assert done.returncode == 2 and words in done.stderr and len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)
    # a run of other problems (30 of them, against a simulator) is refused as compare refuses it
    other = tmp_path / "other"
    run = shardeval_cmd("run", "--bench", "arith", "--max-problems", "30", "--model-url", sim, "--model-id", "sim", "-o", str(other))
    assert run.returncode == 0, run.stderr
    done = gate(base, str(other), "--margin", "0.02")
    assert done.returncode == 2 and "do not ask the same questions" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_plan_equals_statsmodels_before_a_run_and_measures_a_pair(sweep: Path) -> None:
    done = shardeval_cmd("plan", "--bench", "arith", "-p", "n=1319", "--detect", "0.05", "--accuracy", "0.7", "--json")
    assert done.returncode == 0, done.stderr
    (req,) = json.loads(done.stdout)
    assert req["problems_now"] == 1319
    expected = samplesize_proportions_2indep_onetail(0.05, 0.65, 0.8, alpha=0.05, alternative="larger")
    assert req["problems"]["1"] == math.ceil(expected)
    pair = shardeval_cmd(
        "plan", str(sweep / "base"), "--against", str(sweep / "same"), "--margin", "0.02", "--bench", "arith_small", "--json"
    )
    assert pair.returncode == 0, pair.stderr
    assert json.loads(pair.stdout)[0]["problems"]["1"] == 135
    alone = shardeval_cmd("plan", str(sweep / "base"), "--margin", "0.02", "--bench", "arith", "--json")
    assert alone.returncode == 0 and json.loads(alone.stdout)[0]["problems"]["1"] > 5000  # independent answers: ~6,400
    bad = shardeval_cmd("plan", str(sweep / "base"))
    assert bad.returncode == 2 and "--detect" in bad.stderr


# --- the 200 pairs --------------------------------------------------------------------------------


def asked(run: Path, bench: str) -> list[tuple[str, int, str, float]]:
    """(problem id, request seed, prompt text the simulator keys on, score) of every record, by id."""
    out = {}
    for shard in sorted(run.glob("shard_*")):
        traj = {(t["problem_id"], t["repeat"]): t for t in map(json.loads, (shard / bench / "trajectories.jsonl").read_text().splitlines())}
        for r in map(json.loads, (shard / bench / "results.jsonl").read_text().splitlines()):
            t = traj[(r["problem_id"], r["repeat"])]
            text = next(m["content"] for m in t["messages"] if m["role"] == "user")
            out[r["problem_id"]] = (r["problem_id"], t["request"]["seed"], text, r["score"])
    return [out[k] for k in sorted(out)]


def coins(server_seed: int, requests: list[tuple[str, int, str, float]]) -> np.ndarray:
    """The simulator's coin per request (shardeval_sim.answers.Answerer.compose)."""
    return np.array(
        [
            int.from_bytes(
                hashlib.blake2b(f"{server_seed}\x1f{seed}\x1f{text}".encode("utf-8", "surrogatepass"), digest_size=32).digest()[:8], "big"
            )
            / 2.0**64
            for _, seed, text, _ in requests
        ]
    )


def table(x: np.ndarray, ids: list[str]) -> ScoreTable:
    x = np.asarray(x, dtype=np.float64)
    return ScoreTable(
        benchmark="arith",
        n_problems=x.size,
        repeats=1,
        score=array("d", x.tobytes()),
        status=bytearray([OK]) * x.size,
        problem_ids=list(ids),
    )


def test_200_run_pairs_drawn_with_the_simulators_answer_model(sweep: Path) -> None:
    requests = asked(sweep / "base", "arith")
    assert len(requests) == 1319
    for model, accuracy in ACCURACY.items():  # the formula is the simulator's: it gives every real score
        mine = asked(sweep / model, "arith")
        assert [r[1:3] for r in mine] == [r[1:3] for r in requests]  # the same requests: paired
        assert np.array_equal(coins(0, mine) < accuracy, np.array([r[3] for r in mine]) == 1.0), model
    ids = [r[0] for r in requests]
    counts = {(kind, coupled): 0 for kind in ("worse", "same") for coupled in (True, False)}
    for seed in range(1, 201):
        base_coin = coins(seed, requests)
        base = table(base_coin < 0.70, ids)
        for coupled in (True, False):
            cand_coin = base_coin if coupled else coins(seed + 100_000, requests)
            counts["worse", coupled] += decide(base, table(cand_coin < 0.65, ids), 0.02).verdict == NO_GO
            counts["same", coupled] += decide(base, table(cand_coin < 0.70, ids), 0.02).verdict == GO
    rates = {k: v / 200 for k, v in counts.items()}
    print(
        f"\n200 pairs at 1,319 problems, margin 0.02, alpha 0.05: 5 points worse NO-GO {rates['worse', True]:.3f} "
        f"(same server seed) / {rates['worse', False]:.3f} (own seed); identical GO {rates['same', True]:.3f} (same seed) "
        f"/ {rates['same', False]:.3f} (own seed, answers independent)"
    )
    assert rates["worse", True] >= 0.80 and rates["worse", False] >= 0.80
    assert rates["same", True] >= 0.95
