"""Every extra works alone (issue 40, points 8 and 12): a fresh venv per extra, as a user makes it.

The test extra installs every optional package at once, which hid that `shardeval[inspect]` lacked
openai (every sample an error) and that `shardeval[mlflow]` could not open MLflow 3's default store.
Here each extra gets its own venv with nothing but `pip install 'shardeval[EXTRA]'` from a wheel of
this checkout, and runs its feature once, as its example in examples/ documents it, offline: no
PYTHONPATH, nothing of the test venv. The base install (no extra) runs the main job.

Each case is bounded (install and run); pip reads the registry or its cache, nothing else is
reached: every server is a simulator on 127.0.0.1, every tracker a local store.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from collections.abc import Callable

import pytest

ROOT = Path(__file__).resolve().parents[1]
INSTALL_TIMEOUT_S = 420
RUN_TIMEOUT_S = 240
pytestmark = pytest.mark.timeout(INSTALL_TIMEOUT_S + 3 * RUN_TIMEOUT_S)
OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
SMALL_ARITH = ("benchmarks.0.params.n=24", "benchmarks.0.repeats=2", "cluster.shards=2", "output.progress_interval_s=0")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel of this checkout (what `pip install shardeval` gets), built once for every case, from a
    copy of the sources: setuptools' build/ folder in the checkout may hold modules since removed."""
    out = tmp_path_factory.mktemp("wheel")
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for name in ("core", "plugins", "shims"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(source), "-w", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (found,) = out.glob("shardeval-*.whl")
    return found


class Venv:
    """A fresh venv holding shardeval with one extra (or none), and commands run in it as a user runs them."""

    def __init__(self, path: Path, home: Path) -> None:
        self.path, self.home = path, home

    def env(self, **extra: str) -> dict[str, str]:
        keep = {
            k: v
            for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME") and not k.startswith(("WANDB_", "MLFLOW_", "HF_"))
        }
        return {
            **keep,
            "PATH": f"{self.path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            "VIRTUAL_ENV": str(self.path),
            "HOME": str(self.home),
            **OFFLINE,
            **extra,
        }

    def run(self, *args: str, cwd: Path = ROOT, timeout: float = RUN_TIMEOUT_S, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.path / "bin" / args[0]), *args[1:]], cwd=cwd, env=self.env(**env), capture_output=True, text=True, timeout=timeout
        )

    def shardeval(self, *args: str, **kwargs) -> subprocess.CompletedProcess[str]:
        done = self.run("shardeval", *args, **kwargs)
        assert done.returncode == 0, f"shardeval {' '.join(args)}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done

    def python(self, code: str, **kwargs) -> str:
        done = self.run("python", "-c", code, **kwargs)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout


def fresh_venv(tmp_path: Path, wheel: Path, extra: str) -> Venv:
    path = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=120)
    requirement = f"shardeval[{extra}] @ {wheel.as_uri()}" if extra else f"shardeval @ {wheel.as_uri()}"
    done = subprocess.run(
        [str(path / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", requirement],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    home = tmp_path / "home"
    home.mkdir()
    return Venv(path, home)


def scores(out: Path) -> dict:
    return json.loads((out / "merged" / "scores.json").read_text())


def metric(out: Path, bench: str, name: str) -> float:
    return scores(out)[bench]["metrics"][name]["value"]


def records(out: Path, bench: str) -> list[dict]:
    return [
        json.loads(line)
        for path in sorted(out.glob(f"shard_*/{bench}/results.jsonl"))
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def small_arith_run(venv: Venv, tmp_path: Path) -> Path:
    out = tmp_path / "arith"
    venv.shardeval("run", "examples/arith_sim.yaml", "-o", str(out), *[a for o in SMALL_ARITH for a in ("-O", o)])
    return out


# --- what each extra is for, run once -------------------------------------------------------------


def base(venv: Venv, tmp_path: Path) -> None:
    """No extra: the README's main job (a sharded run and merge against the simulator)."""
    out = small_arith_run(venv, tmp_path)
    assert "COMPLETE" in (out / "merged" / "report.md").read_text()
    page = (out / "merged" / "report.html").read_text()
    assert "dataset.charts" in page and "vegaEmbed" in page  # the pages' own script and Vega's, as package data
    assert len(records(out, "arith")) == 48
    absent = venv.python(
        "import importlib.util as u; print([m for m in ('lm_eval', 'inspect_ai', 'PIL', 'mlflow', 'wandb', "
        "'pyarrow', 'ray', 'openai') if u.find_spec(m)])"
    )
    assert absent.strip() == "[]", absent  # the base install brings no extra's package


def lm_eval(venv: Venv, tmp_path: Path) -> None:
    """examples/lm_eval_local: an lm-eval multiple-choice task over a local JSONL, the served model's
    tokenizer on disk, offline; the simulator picks the right option at its accuracy, so lm-eval's
    acc is the share of questions whose coin came up right, not the share of one label."""
    out = tmp_path / "lm_eval"
    venv.shardeval("run", "examples/lm_eval_local/run.yaml", "-o", str(out))
    got = records(out, "capitals_mc")
    assert len(got) == 16 and all(r["status"] == "ok" for r in got), got[:2]
    right = [r["scores"]["acc,none"] for r in got]
    assert 0 < sum(right) < 16  # accuracy 0.75: some right, some wrong
    labels = {r["reference"] for r in got}
    assert len(labels) == 4  # the right option is in every position, so acc is not "the share of label 0"
    assert metric(out, "capitals_mc", "acc,none") == pytest.approx(sum(right) / 16)


def inspect(venv: Venv, tmp_path: Path) -> None:
    """examples/inspect_local: an Inspect task with its own three epochs against the simulator, which
    answers each epoch afresh (Inspect sends no seed), so a sample's epochs can differ."""
    out = tmp_path / "inspect"
    venv.shardeval("run", "examples/inspect_local/run.yaml", "-o", str(out))
    got = records(out, "capitals")
    assert len(got) == 48 and all(r["status"] == "ok" for r in got), got[:2]
    by_sample: dict[str, set] = {}
    for r in got:
        by_sample.setdefault(r["problem_id"], set()).add(r["score"])
    assert any(len(s) > 1 for s in by_sample.values()), by_sample  # epochs differ
    assert list((out / "merged" / "inspect").glob("*.eval"))  # Inspect's own log, written back


def images(venv: Venv, tmp_path: Path) -> None:
    """examples/vision_sim.yaml: images drawn, sent and decoded by the simulator (Pillow on both ends)."""
    out = tmp_path / "vision"
    venv.shardeval(
        "run",
        "examples/vision_sim.yaml",
        "-o",
        str(out),
        "-O",
        "benchmarks.0.params.n=12",
        "-O",
        "services.model.bench_params.n=12",
        "-O",
        "benchmarks.0.repeats=1",
        "-O",
        "cluster.shards=2",
        "-O",
        "output.progress_interval_s=0",
    )
    got = records(out, "vision_count")
    assert len(got) == 12 and all(r["status"] == "ok" for r in got), got[:2]
    assert 0 < sum(r["score"] for r in got) < 12


def mlflow(venv: Venv, tmp_path: Path) -> None:
    """`export --to mlflow` with nothing configured: MLflow 3's default store (sqlite:///mlflow.db
    in the folder it runs in), which mlflow-skinny alone cannot open."""
    out = small_arith_run(venv, tmp_path)
    where = tmp_path / "here"
    where.mkdir()
    venv.shardeval("export", str(out), "--to", "mlflow", cwd=where)
    assert (where / "mlflow.db").is_file()
    runs = venv.python(
        "from mlflow import MlflowClient; c = MlflowClient(); e = c.get_experiment_by_name('arith'); "
        "print(len(c.search_runs([e.experiment_id])))",
        cwd=where,
    )
    assert runs.strip() == "1", runs


def wandb(venv: Venv, tmp_path: Path) -> None:
    """`export --to wandb`, offline (W&B's own offline mode: the run is written to local files)."""
    out = small_arith_run(venv, tmp_path)
    venv.shardeval(
        "export",
        str(out),
        "--to",
        "wandb",
        "--project",
        "extras",
        WANDB_MODE="offline",
        WANDB_DIR=str(tmp_path / "wandb"),
        WANDB_CONFIG_DIR=str(tmp_path / "wandb-config"),
    )
    assert list((tmp_path / "wandb").rglob("*.wandb")), "no offline run written"


def parquet(venv: Venv, tmp_path: Path) -> None:
    """`export --format parquet`, read back by the pyarrow the extra installed."""
    out = small_arith_run(venv, tmp_path)
    venv.shardeval("export", str(out), "-o", str(tmp_path / "rows.parquet"))
    rows = venv.python(f"import pyarrow.parquet as pq; print(pq.read_table({str(tmp_path / 'rows.parquet')!r}).num_rows)")
    assert rows.strip() == "48", rows


def ray(venv: Venv, tmp_path: Path) -> None:
    """examples/ray_arith_sim.yaml: a local Ray started, shard tasks run in its workers, merged. A new
    local Ray (`cluster.address=local`), never one a test beside this one started with `ray start`."""
    out = tmp_path / "ray"
    venv.shardeval(
        "run",
        "examples/ray_arith_sim.yaml",
        "-o",
        str(out),
        *[a for o in SMALL_ARITH for a in ("-O", o)],
        "-O",
        "cluster.address=local",
        timeout=RUN_TIMEOUT_S * 2,
    )
    assert len(records(out, "arith")) == 48
    assert "COMPLETE" in (out / "merged" / "report.md").read_text()


FEATURES: dict[str, Callable[[Venv, Path], None]] = {
    "": base,
    "lm-eval": lm_eval,
    "inspect": inspect,
    "images": images,
    "mlflow": mlflow,
    "wandb": wandb,
    "parquet": parquet,
    "ray": ray,
}


def test_every_extra_of_the_package_is_checked_here() -> None:
    import tomllib

    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    assert extras - {"test"} == set(FEATURES) - {""}


@pytest.mark.parametrize("extra", list(FEATURES), ids=lambda e: e or "base")
def test_an_extra_alone_in_a_fresh_venv_runs_its_feature(tmp_path: Path, wheel: Path, extra: str) -> None:
    venv = fresh_venv(tmp_path, wheel, extra)
    FEATURES[extra](venv, tmp_path)
