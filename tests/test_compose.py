"""`cluster.type: compose`: the rendered file checked by the real docker-compose, its services run here.

This file needs no Docker engine (tests/test_docker.py runs the same loop in a real one, where
scripts/setup/docker.sh can start it). Debian's docker-compose 1.29
(installed by scripts/setup/k8s_compose.sh from the session fixture) parses, validates and
interpolates the file without one: `docker-compose -f FILE config`, given the caller's environment,
prints each service exactly as `docker compose run` would create it (command, environment with
pass-through variables filled in, bind mounts as absolute host paths). The tests run that resolved
entrypoint + command on this machine with that environment, for NEL_SHARD_IDX 0..3 and then the
merge service, against a real simulator.

Stand-ins, only for what needs the engine: the container itself (the process runs here, with the
venv's `shardeval` first on PATH as the image's would be), and its mounts: container paths in the
arguments (/config/…, /results) are rewritten to host folders — the ones compose resolved, except
that /results of the checked-in example goes to a temporary folder instead of the repository.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import REPO, running_sim, shardeval_cmd

SECRET_VALUE = "sk-compose-test-0123456789-do-not-leak"
KEY_VAR = "SHARDEVAL_COMPOSE_TEST_KEY"
SHARD_VARS = ("NEL_SHARD_IDX", "NEL_TOTAL_SHARDS", "JOB_COMPLETION_INDEX", "SLURM_ARRAY_TASK_ID", "RANK", "WORLD_SIZE")

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="session")
def docker_compose() -> str:
    """Debian's docker-compose, installed by the project's setup script (idempotent)."""
    setup = subprocess.run(["bash", os.path.join(REPO, "scripts", "setup", "k8s_compose.sh")], capture_output=True, text=True, timeout=900)
    assert setup.returncode == 0, setup.stdout + setup.stderr
    import shutil

    path = shutil.which("docker-compose")
    assert path, "docker-compose missing after scripts/setup/k8s_compose.sh"
    return path


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This machine's environment without shard variables or the key, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in SHARD_VARS and k != KEY_VAR and not k.startswith("SLURM_")}
    env.update(extra or {})
    return env


def compose_config(tool: str, path: Path, env: dict[str, str]) -> dict[str, Any]:
    """`docker-compose -f FILE config` with this environment: validated and interpolated."""
    result = subprocess.run([tool, "-f", str(path), "config"], capture_output=True, text=True, env=clean_env(env), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return yaml.safe_load(result.stdout)


def api_config(url: str, shards: int = 4, n: int = 40, repeats: int = 2, cluster_extra: str = "") -> str:
    return f"""
services:
  model: {{type: api, url: "{url}", model: sim, api_key_env: {KEY_VAR}}}
benchmarks:
  - name: arith
    params: {{n: {n}}}
    repeats: {repeats}
    max_concurrent: 16
cluster:
  type: compose
  shards: {shards}
{cluster_extra}
output: {{progress_interval_s: 0}}
"""


def render(tmp: Path, config_text: str, *args: str, env: dict[str, str] | None = None):
    """`shardeval run CONFIG --dry-run -o ROOT`: returns (compose file path, CompletedProcess)."""
    cfg = tmp / "compose.yaml"
    cfg.write_text(config_text)
    root = tmp / "out"
    result = shardeval_cmd("run", str(cfg), *args, "--dry-run", "-o", str(root), env=env)
    assert result.returncode == 0, result.stderr
    path = root / "compose" / "docker-compose.yaml"
    assert path.read_text() == result.stdout  # what is printed is what is written
    return path, result


# --- running a service's command here, the way the container would --------------------------


def service_process(service: dict[str, Any], results: Path | None, workdir: Path) -> subprocess.Popen[str]:
    """Start one resolved service (from `docker-compose config`) as a local process.

    `config` prints strings re-escaped (`$` as `$$`); the container gets them unescaped. Pass-through
    variables come out with the caller's value (or null when unset: then they are absent)."""
    mounts = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):  # long syntax (the preparation's read-only binds)
            mounts[volume["target"]] = Path(volume["source"])
            continue
        host, container = (volume.split(":") + [""])[:2]
        mounts[container] = Path(host)
    if results is not None:
        mounts["/results"] = results

    def local(arg: str) -> str:
        arg = arg.replace("$$", "$")
        for container, host in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
            arg = re.sub(rf"(^|=){re.escape(container)}(?=/|$)", lambda m: m.group(1) + str(host), arg)  # noqa: B023
        return arg

    argv = [local(a) for a in [*service.get("entrypoint", []), *service.get("command", [])]]
    env = clean_env({k: str(v).replace("$$", "$") for k, v in service.get("environment", {}).items() if v is not None})
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    workdir.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(argv, env=env, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def run_shards_and_merge(tool: str, path: Path, total: int, caller_env: dict[str, str], tmp: Path, results: Path | None = None) -> str:
    """The seed's loop (`NEL_SHARD_IDX=$i NEL_TOTAL_SHARDS=N docker compose … run -d eval-shard`),
    all shards at once as `-d` starts them, then `… --profile merge run eval-merge`."""
    procs = []
    for i in range(total):
        resolved = compose_config(tool, path, {**caller_env, "NEL_SHARD_IDX": str(i), "NEL_TOTAL_SHARDS": str(total)})
        shard = resolved["services"]["eval-shard"]
        assert shard["profiles"] == ["sharded"]
        assert shard["environment"]["NEL_SHARD_IDX"] == str(i) and shard["environment"]["NEL_TOTAL_SHARDS"] == str(total)
        procs.append(service_process(shard, results, tmp / "workdir" / f"shard-{i}"))
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    for i, (proc, out) in enumerate(zip(procs, outputs)):
        assert proc.returncode == 0, f"shard {i} exited {proc.returncode}:\n{out}"
        assert f"shard {i}/{total} (from NEL_SHARD_IDX={i}, NEL_TOTAL_SHARDS={total})" in out
    merge = compose_config(tool, path, caller_env)["services"]["eval-merge"]  # no shard variables set
    assert merge["profiles"] == ["merge"]
    proc = service_process(merge, results, tmp / "workdir" / "merge")
    out = proc.communicate(timeout=240)[0]
    assert proc.returncode == 0, out
    return out


def assert_all_files_free_of(root: Path, text: str) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            assert text.encode() not in path.read_bytes(), f"{text!r} found in {path}"


# --- tests -------------------------------------------------------------------------------------


def test_rendered_file_validates_and_names_the_key_only(tmp_path, docker_compose):
    extra = """
  image: registry.example.com/shardeval:0.1.0
  env: {HF_HOME: /results/hf, PRICE: "costs $5 $${NOT_INTERPOLATED}"}
  pass_env: [HF_TOKEN]
  gpus: 2
  shm_size: 16gb
  user: "1000:1000"
  read_only: true
  network_mode: host
"""
    path, result = render(tmp_path, api_config("http://127.0.0.1:9/v1", cluster_extra=extra), env={KEY_VAR: SECRET_VALUE})
    raw = yaml.safe_load(path.read_text())
    shard = raw["services"]["eval-shard"]
    assert shard["profiles"] == ["sharded"] and raw["services"]["eval-merge"]["profiles"] == ["merge"]
    assert KEY_VAR in shard["environment"] and "HF_TOKEN" in shard["environment"]  # pass-through by name
    assert shard["command"] == ["run", "/config/config.yaml", "-O", "output.dir=/results"]
    assert raw["services"]["eval-merge"]["command"] == ["merge", "/results"]
    assert_all_files_free_of(tmp_path, SECRET_VALUE)
    assert SECRET_VALUE not in result.stdout + result.stderr

    # valid with no variables set at all: how `--profile merge run eval-merge` sees it
    resolved = compose_config(docker_compose, path, {})
    shard = resolved["services"]["eval-shard"]
    assert shard["environment"]["NEL_SHARD_IDX"] == "" and shard["environment"]["NEL_TOTAL_SHARDS"] == "4"
    assert shard["environment"]["PRICE"].replace("$$", "$") == "costs $5 ${NOT_INTERPOLATED}"
    assert shard["deploy"]["resources"]["reservations"]["devices"] == [{"driver": "nvidia", "count": 2, "capabilities": ["gpu"]}]
    assert (shard["shm_size"], shard["user"], shard["network_mode"], shard["read_only"]) == ("16gb", "1000:1000", "host", True)
    merge = resolved["services"]["eval-merge"]
    assert (merge["user"], merge["network_mode"], merge["read_only"]) == ("1000:1000", "host", True)
    volumes = dict(v.split(":", 1) for v in shard["volumes"])
    assert volumes[str(tmp_path / "out" / "compose" / "config.yaml")] == "/config/config.yaml:ro"
    assert volumes[str(tmp_path / "out")] == "/results:rw"  # the output root, as local runs use it


def test_each_service_runs_locally_against_a_real_simulator_and_merges(tmp_path, docker_compose):
    with running_sim("--bench", "arith", "--accuracy", "0.7", "--ttft-ms", "1", "--itl-ms", "0") as url:
        path, _ = render(tmp_path, api_config(url, shards=4), env={KEY_VAR: SECRET_VALUE})
        report = run_shards_and_merge(docker_compose, path, 4, {KEY_VAR: SECRET_VALUE}, tmp_path)
        whole = shardeval_cmd(
            "run", str(tmp_path / "compose.yaml"), "--shard", "0/1", "-o", str(tmp_path / "whole" / "shard_0"), env={KEY_VAR: SECRET_VALUE}
        )
        assert whole.returncode == 0, whole.stderr
    root = tmp_path / "out"  # bind-mounted at /results: shards land beside compose/, as in local runs
    assert sorted(p.name for p in root.glob("shard_*")) == [f"shard_{i}" for i in range(4)]
    assert "COMPLETE" in report
    scores = json.loads((root / "merged" / "scores.json").read_text())["arith"]
    assert (scores["n_problems"], scores["n_expected"], scores["n_records"]) == (40, 80, 80)
    assert (scores["n_missing"], scores["n_errors"], scores["n_duplicates"]) == (0, 0, 0)
    assert shardeval_cmd("merge", "-q", str(tmp_path / "whole")).returncode == 0
    assert (root / "merged" / "scores.json").read_bytes() == (tmp_path / "whole" / "merged" / "scores.json").read_bytes()
    # the key reached every shard (the client refuses to start without it) but no file on disk
    assert_all_files_free_of(tmp_path, SECRET_VALUE)


def test_seed_example_is_the_rendering_validates_and_runs(tmp_path, docker_compose):
    """examples/compose/deploy/ is exactly what examples/compose/arith_sim.yaml renders; its four
    shard runs (each starting its own simulator) and the merge run here."""
    example = Path(REPO, "examples", "compose")
    result = shardeval_cmd("run", str(example / "arith_sim.yaml"), "--dry-run", "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    for name in ("docker-compose.yaml", "config.yaml"):
        assert (tmp_path / "out" / "compose" / name).read_text() == (example / "deploy" / name).read_text(), (
            "regenerate: shardeval run examples/compose/arith_sim.yaml --dry-run -o /tmp/r && cp /tmp/r/compose/* examples/compose/deploy/"
        )
    assert "NEL_SHARD_IDX=$i NEL_TOTAL_SHARDS=4 docker compose -f" in result.stderr
    results = tmp_path / "results"
    results.mkdir()
    report = run_shards_and_merge(docker_compose, example / "deploy" / "docker-compose.yaml", 4, {}, tmp_path, results=results)
    assert "COMPLETE" in report
    scores = json.loads((results / "merged" / "scores.json").read_text())["arith"]
    assert (scores["n_records"], scores["n_missing"], scores["n_errors"]) == (160, 0, 0)


def test_commands_escaping_and_user_mistakes(tmp_path, docker_compose):
    prompt = "Pay $5 or ${HOME} $(x) $$"
    path, _ = render(
        tmp_path,
        api_config("http://127.0.0.1:9/v1", cluster_extra="  results_volume: eval-results"),
        "-O",
        f"benchmarks.0.solver.system_prompt={prompt}",
    )
    resolved = compose_config(docker_compose, path, {"NEL_SHARD_IDX": "1"})
    assert "eval-results" in resolved["volumes"]
    command = [a.replace("$$", "$") for a in resolved["services"]["eval-shard"]["command"]]
    assert command == ["run", "/config/config.yaml", "-O", f"benchmarks.0.solver.system_prompt={prompt}", "-O", "output.dir=/results"]
    prepared = {"type": "bind", "source": str(tmp_path / "out" / "prepared"), "target": "/results/prepared", "read_only": True}
    assert resolved["services"]["eval-merge"]["volumes"] == ["eval-results:/results:rw", prepared]

    # without --dry-run: files written, the seed's commands printed, Docker never called
    ran = shardeval_cmd("run", str(tmp_path / "compose.yaml"), "-o", str(tmp_path / "out2"))
    assert ran.returncode == 0, ran.stderr
    assert "for i in $(seq 0 3); do NEL_SHARD_IDX=$i NEL_TOTAL_SHARDS=4 docker compose -f" in ran.stdout
    assert "--profile sharded run -d eval-shard; done" in ran.stdout
    assert "--profile merge run --rm eval-merge" in ran.stdout and f"export {KEY_VAR}" in ran.stdout
    assert (tmp_path / "out2" / "compose" / "docker-compose.yaml").is_file()

    # an eval-shard run without NEL_SHARD_IDX fails in the container with one line, exit 2
    shard = compose_config(docker_compose, path, {})["services"]["eval-shard"]
    proc = service_process(shard, tmp_path / "res", tmp_path / "wd")
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 2 and "NEL_SHARD_IDX=''" in out and out.strip().count("\n") == 0, out

    for extra, words in (
        ("  results_volume: ../up", "cluster.results_volume '../up'"),
        ("  env: {NEL_SHARD_IDX: '1'}", "NEL_SHARD_IDX comes from the `docker compose run` command line"),
        ("  gpus: some", "cluster.gpus"),
        ("  netwrk_mode: host", "did you mean 'network_mode'"),
    ):
        cfg = tmp_path / "bad.yaml"
        cfg.write_text(api_config("http://127.0.0.1:9/v1", cluster_extra=extra))
        bad = shardeval_cmd("run", str(cfg), "--dry-run", "-o", str(tmp_path / "bad"))
        assert bad.returncode == 2, (extra, bad.stderr)
        assert bad.stderr.strip().count("\n") == 0 and words in bad.stderr, (extra, bad.stderr)


def test_a_sweep_is_one_service_per_model_shard_cell_and_the_merge_depends_on_all(tmp_path, docker_compose):
    """2 simulated models x 2 shards: services shard-<model>-<i>, each with its cell's arguments (no
    variables to set), run here as `docker compose up` would, then eval-merge merges the sweep."""
    sim = "type: sim, bench: arith, ttft_ms: 1, itl_ms: 0, output_tokens: 8"
    config = f"""
services:
  base: {{{sim}, accuracy: 0.3}}
  step1: {{{sim}, accuracy: 0.9}}
benchmarks:
  - {{name: arith, params: {{n: 12}}, max_concurrent: 8}}
sweep: {{services: [base, step1], baseline: base}}
cluster: {{type: compose, shards: 2, env: {{NOTE: "costs $5"}}}}
output: {{progress_interval_s: 0}}
"""
    path, result = render(tmp_path, config)
    assert "docker compose -f" in result.stderr and " up" in result.stderr and "run --rm --no-deps eval-merge" in result.stderr
    resolved = compose_config(docker_compose, path, {})
    cells = [f"shard-{model}-{k}" for model in ("base", "step1") for k in range(2)]
    assert set(resolved["services"]) == {*cells, "eval-merge"}
    merge = resolved["services"]["eval-merge"]
    assert merge["depends_on"] == {name: {"condition": "service_completed_successfully"} for name in cells}
    assert "profiles" not in merge  # `docker compose up` starts it
    for name in cells:
        model, k = name.split("-")[1:]
        service = resolved["services"][name]
        assert "profiles" not in service and "NEL_SHARD_IDX" not in service.get("environment", {})
        assert service["command"] == ["run", "/config/config.yaml", "--sweep-services", model, "--shard", f"{k}/2", "-o", "/results"]
        assert service["environment"]["NOTE"].replace("$$", "$") == "costs $5"

    procs = {name: service_process(resolved["services"][name], None, tmp_path / "workdir" / name) for name in cells}
    for name, proc in procs.items():
        out = proc.communicate(timeout=240)[0]
        assert proc.returncode == 0, f"{name}:\n{out}"
    root = tmp_path / "out"  # the output root, bind-mounted at /results
    for name in cells:
        model, k = name.split("-")[1:]
        manifest = json.loads((root / model / f"shard_{k}" / "manifest.json").read_text())
        assert (manifest["state"], manifest["sweep"]["service"]) == ("complete", model)
    proc = service_process(merge, None, tmp_path / "workdir" / "merge")
    out = proc.communicate(timeout=240)[0]
    assert proc.returncode == 0, out
    sweep = json.loads((root / "merged" / "sweep.json").read_text())
    accuracy = {c["service"]: c for c in sweep["cells"] if c["metric"] == "accuracy"}
    assert set(accuracy) == {"base", "step1"} and all(c["n"] == 12 for c in accuracy.values())
    (diff,) = [d for d in sweep["vs_baseline"] if d["metric"] == "accuracy"]
    assert diff["service"] == "step1" and diff["diff"] > 0  # the 0.9 simulator beats the 0.3 one


def test_the_containers_see_the_preparation_the_launch_made(tmp_path, docker_compose):
    """Nodes without internet (docs/offline.md): `shardeval run` prepares into ROOT/prepared/ before
    it writes the project. A bind-mounted root shows it at /results/prepared as it is; a named
    volume gets it bind-mounted read-only at /results/prepared (long syntax: a missing one is
    Docker's refusal, never an empty folder), and a `prepare.cache_dir` at its own path, read-only.
    tests/test_docker.py runs both in the real engine with no network."""
    config = api_config("http://127.0.0.1:9/v1", shards=2)
    cfg = tmp_path / "compose.yaml"
    cfg.write_text(config)
    bound = shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "bound"))
    assert bound.returncode == 0, bound.stderr
    assert "prepared the run for nodes without internet" in bound.stderr
    assert (tmp_path / "bound" / "prepared" / "preparation.json").is_file()
    resolved = compose_config(docker_compose, tmp_path / "bound" / "compose" / "docker-compose.yaml", {"NEL_SHARD_IDX": "0"})
    for name in ("eval-shard", "eval-merge"):  # the root, prepared/ in it: nothing more to mount
        volumes = resolved["services"][name]["volumes"]
        assert f"{tmp_path / 'bound'}:/results:rw" in volumes and not [v for v in volumes if isinstance(v, dict)], volumes

    shared = tmp_path / "shared cache"
    cfg.write_text(
        config.replace("cluster:", "prepare: {cache_dir: '%s'}\ncluster:" % shared).replace(
            "shards: 2", "shards: 2\n  results_volume: evals"
        )
    )
    held = shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "held"))
    assert held.returncode == 0, held.stderr
    path = tmp_path / "held" / "compose" / "docker-compose.yaml"
    assert "read the run's preparation through read-only bind mounts" in path.read_text()  # the header says so, and how after --dry-run
    resolved = compose_config(docker_compose, path, {"NEL_SHARD_IDX": "0"})
    expected = [
        "evals:/results:rw",
        {"type": "bind", "source": str(tmp_path / "held" / "prepared"), "target": "/results/prepared", "read_only": True},
        {"type": "bind", "source": str(shared), "target": str(shared), "read_only": True},
    ]
    assert resolved["services"]["eval-merge"]["volumes"] == expected
    assert resolved["services"]["eval-shard"]["volumes"][1:] == expected
    preparation = json.loads((tmp_path / "held" / "prepared" / "preparation.json").read_text())
    assert preparation["cache_dir"] == str(shared)  # the path the containers see it at
