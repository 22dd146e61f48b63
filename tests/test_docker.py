"""build/Dockerfile, the Compose loop and the Kubernetes Indexed Job's containers, in a real Docker engine.

scripts/setup/docker.sh provides the engine: Debian trixie's dockerd 26.1 with the Compose v2 and
buildx CLI plugins, from packages unpacked under the CI cache (nothing installed system-wide), its
own data root, exec root and socket, and a base image made by debootstrap (bookworm, python3) and
`docker import`, since no registry is reachable.
The session fixture starts the daemon and stops it at the end when it started it. Containers reach
a simulator on the host's 127.0.0.1 with the host network, or start their own.

What is real: `docker build -f build/Dockerfile .` (classic builder and BuildKit), every container,
the seed's loop run by Debian's docker-compose 1.29 and by `docker compose` v2. What
is not: Kubernetes. No API server or kubelet can run here, so the Job controller's part — a pod
per completion index, the downward-API index, secretKeyRef, `$(VAR)` expansion, mounting the
ConfigMap and the claim, the merge Job's `kubectl wait` — is done by this test with the helpers
of tests/test_kubernetes.py; what runs in the image is each rendered container's exact command,
args, env and securityContext.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import pytest
import yaml

from conftest import REPO, running_sim, shardeval_cmd
from test_compose import docker_compose  # noqa: F401  (the fixture: Debian's docker-compose, installed if missing)
from zipapp_support import built_zipapp

CACHE = Path(os.environ.get("SHARDEVAL_CI_CACHE", "/var/cache/shardeval-ci"))
SETUP = Path(REPO, "scripts", "setup", "docker.sh")
SECRET_VALUE = "sk-docker-test-0123456789-do-not-leak"
KEY_VAR = "SHARDEVAL_DOCKER_TEST_KEY"
LABEL = "org.shardeval.test=test_docker"
SHARD_VARS = ("NEL_SHARD_IDX", "NEL_TOTAL_SHARDS", "JOB_COMPLETION_INDEX", "SLURM_ARRAY_TASK_ID", "RANK", "WORLD_SIZE")
UID = 1000  # not in the image's /etc/passwd: an arbitrary uid, as on OpenShift or with `user: "$(id -u)"`
SIM_ARGS = ("--bench", "arith", "--accuracy", "0.7", "--ttft-ms", "1", "--itl-ms", "0")
PROJECTS = ("shardeval-test-compose", "shardeval-test-example", "shardeval-test-prepared")  # COMPOSE_PROJECT_NAME of each loop

pytestmark = pytest.mark.timeout(300)


# --- the engine --------------------------------------------------------------------------------


def read_env_file() -> dict[str, str]:
    path = CACHE / "docker" / "env"
    if not path.exists():
        return {}
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


@pytest.fixture(scope="session")
def engine() -> Iterator[dict[str, str]]:
    """The environment that reaches the daemon (DOCKER_HOST, its CLI first on PATH), started here
    if it was not running, stopped at the end (then no process of it is left)."""
    was_running = subprocess.run(["bash", str(SETUP), "status"], capture_output=True, timeout=60).returncode == 0
    start = subprocess.run(["bash", str(SETUP), "start"], capture_output=True, text=True, timeout=900)
    assert start.returncode == 0, start.stdout + start.stderr
    why = re.search(r"Docker engine unavailable: (.*)", start.stderr)
    if why:  # its one line (the env file may be stale, or not writable by a non-root user)
        pytest.skip(f"no Docker engine: {why.group(1)}")
    found = read_env_file()
    assert "SHARDEVAL_DOCKER_HOST" in found, f"{CACHE / 'docker' / 'env'} after docker.sh start: {found}\n{start.stderr}"
    env = {
        k: v for k, v in os.environ.items() if k not in SHARD_VARS and k != KEY_VAR and not k.startswith(("SLURM_", "DOCKER_", "COMPOSE_"))
    }
    env.update(DOCKER_HOST=found["SHARDEVAL_DOCKER_HOST"], PATH=found["SHARDEVAL_DOCKER_PATH"] + os.pathsep + env["PATH"])
    if "SHARDEVAL_DOCKER_CONFIG" in found:  # where the CLI finds the compose and buildx plugins
        env["DOCKER_CONFIG"] = found["SHARDEVAL_DOCKER_CONFIG"]
    env["SHARDEVAL_DOCKER_BASE"] = found["SHARDEVAL_DOCKER_BASE"]
    try:
        yield env
    finally:
        left = docker(env, "ps", "-aq", "--filter", f"label={LABEL}", check=False).stdout.split()
        for project in PROJECTS:
            left += docker(env, "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}", check=False).stdout.split()
        if left:
            docker(env, "rm", "-f", *left, check=False)
        docker(env, "network", "prune", "-f", check=False)
        docker(env, "image", "prune", "-f", check=False)  # earlier builds' layers, not the cache
        if not was_running:
            stop = subprocess.run(["bash", str(SETUP), "stop"], capture_output=True, text=True, timeout=120)
            assert stop.returncode == 0, stop.stderr
            pkgroot = str(CACHE / "docker" / "pkgroot")
            assert not [p for p in Path("/proc").glob("[0-9]*") if _exe(p).startswith(pkgroot)], "daemon processes left running"


def _exe(proc: Path) -> str:
    try:
        return os.readlink(proc / "exe")
    except OSError:
        return ""


def docker(env: dict[str, str], *args: str, check: bool = True, timeout: float = 180, **kw) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["docker", *args], env=env, capture_output=True, text=True, timeout=timeout, **kw)
    if check:
        assert result.returncode == 0, f"docker {' '.join(args)}: {result.stdout}{result.stderr}"
    return result


@pytest.fixture(scope="session")
def image(engine) -> str:
    """`docker build -f build/Dockerfile .` from the repository, as the docs say, on the imported
    base; tagged as both renderers' default image, so rendered files run unchanged."""
    from shardeval import __version__

    pyz = built_zipapp()
    tag = f"shardeval:{__version__}"
    classic = {**engine, "DOCKER_BUILDKIT": "0"}  # with buildx installed, BuildKit is the default
    build = docker(
        classic,
        "build",
        "--network=host",
        "-f",
        "build/Dockerfile",
        "--build-arg",
        f"BASE={engine['SHARDEVAL_DOCKER_BASE']}",
        "-t",
        tag,
        ".",
        cwd=REPO,
        timeout=600,
    )
    # the classic builder reads only ./.dockerignore: the context is the file
    sent = re.search(r"(?:Sending build context to Docker daemon|transferring context:)\s+([\d.]+)([kMG]?B)", build.stdout + build.stderr)
    assert sent, build.stdout[:2000]
    size = float(sent.group(1)) * {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}[sent.group(2)]
    assert size < pyz.stat().st_size + 1e6, f"build context {sent.group(0)}: .dockerignore does not keep the tree out"
    return tag


def chowned(path: Path, uid: int = UID) -> Path:
    """A folder a non-root container can write: what `user: "$(id -u)"` on your own folder means."""
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, uid, uid)
    return path


def owners(root: Path) -> set[int]:
    return {p.stat().st_uid for p in root.rglob("*")}


def assert_all_files_free_of(root: Path, text: str) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            assert text.encode() not in path.read_bytes(), f"{text!r} found in {path}"


def reference_scores(config: Path, tmp: Path, env: dict[str, str] | None = None) -> bytes:
    """merged/scores.json of the same config run unsharded on the host."""
    whole = shardeval_cmd("run", str(config), "--shard", "0/1", "-o", str(tmp / "whole" / "shard_0"), env=env)
    assert whole.returncode == 0, whole.stderr
    assert shardeval_cmd("merge", "-q", str(tmp / "whole")).returncode == 0
    return (tmp / "whole" / "merged" / "scores.json").read_bytes()


def api_config(url: str, cluster: str) -> str:
    return f"""
services:
  model: {{type: api, url: "{url}", model: sim, api_key_env: {KEY_VAR}}}
benchmarks:
  - name: arith
    params: {{n: 40}}
    repeats: 2
    max_concurrent: 16
cluster:
{cluster}
output: {{progress_interval_s: 0}}
"""


# --- the image ---------------------------------------------------------------------------------


@pytest.mark.timeout(900)  # the first test: starting the engine may set it up from nothing (about 3 minutes)
def test_image_entrypoint_read_only_and_non_root(engine, image):
    """The image runs `shardeval` as its entrypoint with nothing writable and any uid."""
    config = json.loads(docker(engine, "image", "inspect", image).stdout)[0]["Config"]
    assert (config["Entrypoint"], config["Cmd"]) == (["shardeval"], ["--help"])
    from shardeval import __version__

    for user in ("65534:65534", f"{UID}:{UID}", "0:0"):
        ran = docker(engine, "run", "--rm", "--label", LABEL, "--network=none", "--read-only", "--user", user, image, "--version")
        assert ran.stdout.strip() == f"shardeval, version {__version__}" and ran.stderr == "", (user, ran)
    # BuildKit reads build/Dockerfile.dockerignore instead; the same Dockerfile builds with it too
    kit = {**engine, "DOCKER_BUILDKIT": "1"}
    docker(
        kit,
        "build",
        "--network=host",
        "-f",
        "build/Dockerfile",
        "--build-arg",
        f"BASE={engine['SHARDEVAL_DOCKER_BASE']}",
        "-t",
        "shardeval-test:buildkit",
        ".",
        cwd=REPO,
        timeout=600,
    )
    ran = docker(engine, "run", "--rm", "--label", LABEL, "--network=none", "--read-only", "shardeval-test:buildkit", "--version")
    assert ran.stdout.strip() == f"shardeval, version {__version__}"
    docker(engine, "rmi", "shardeval-test:buildkit")


def test_one_shard_in_the_container_equals_the_host_run(engine, image, tmp_path):
    """A real evaluation in the container (read-only root, uid 1000, the host's network) against a
    simulator on the host, then the merge in the container: the same scores as on the host."""
    work = chowned(tmp_path / "results")
    with running_sim(*SIM_ARGS) as url:
        config = tmp_path / "eval.yaml"
        config.write_text(api_config(url, "  type: local"))
        env = {**engine, KEY_VAR: SECRET_VALUE}
        common = [
            "run",
            "--rm",
            "--label",
            LABEL,
            "--network=host",
            "--read-only",
            "--user",
            f"{UID}:{UID}",
            "-v",
            f"{config}:/config/eval.yaml:ro",
            "-v",
            f"{work}:/results",
        ]
        ran = docker(env, *common, "-e", KEY_VAR, image, "run", "/config/eval.yaml", "--shard", "0/1", "-o", "/results/shard_0")
        assert "shard 0/1 arith" in ran.stderr and "80/80 ok, 0 error(s)" in ran.stderr, ran.stderr  # 40 problems x 2
        reference = reference_scores(config, tmp_path, env={KEY_VAR: SECRET_VALUE})
    merged = docker(engine, *common, image, "merge", "/results")
    assert "COMPLETE" in merged.stdout + merged.stderr
    assert (work / "merged" / "scores.json").read_bytes() == reference
    assert owners(work) == {UID}
    assert_all_files_free_of(work, SECRET_VALUE)


# --- Compose -----------------------------------------------------------------------------------


@pytest.fixture(params=["docker-compose", "docker compose"])
def compose_cli(request, engine) -> list[str]:
    """Debian's docker-compose 1.29, then the `docker compose` v2 plugin docker.sh installs: the
    rendered file and the seed's loop must work with both."""
    if request.param == "docker-compose":
        return [request.getfixturevalue("docker_compose")]
    return ["docker", "compose"]


def compose_loop(
    tool: list[str], engine: dict[str, str], path: Path, total: int, caller_env: dict[str, str], project: str
) -> tuple[list[dict[str, Any]], str]:
    """The seed's loop, `NEL_SHARD_IDX=$i NEL_TOTAL_SHARDS=N docker-compose -f F --profile sharded
    run -d eval-shard` for every i, each waited for (bounded), then `--profile merge run --rm
    eval-merge`. Returns the shard containers' `docker inspect` and the merge's output."""
    env = {**engine, **caller_env, "COMPOSE_PROJECT_NAME": project}
    names = []
    for i in range(total):
        started = subprocess.run(
            [*tool, "-f", str(path), "--profile", "sharded", "run", "-d", "eval-shard"],
            env={**env, "NEL_SHARD_IDX": str(i), "NEL_TOTAL_SHARDS": str(total)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert started.returncode == 0, started.stdout + started.stderr
        names.append(started.stdout.split()[-1])  # `run -d` prints the container's name
    inspected = []
    for i, name in enumerate(names):
        code = docker(engine, "wait", name, timeout=180).stdout.strip()
        logs = docker(engine, "logs", name)
        assert code == "0", f"shard {i} exited {code}:\n{logs.stdout}{logs.stderr}"
        assert f"shard {i}/{total} (from NEL_SHARD_IDX={i}, NEL_TOTAL_SHARDS={total})" in logs.stdout + logs.stderr
        inspected.append({**json.loads(docker(engine, "inspect", name).stdout)[0], "Logs": logs.stdout + logs.stderr})
        docker(engine, "rm", name)
    merge = subprocess.run(
        [*tool, "-f", str(path), "--profile", "merge", "run", "--rm", "eval-merge"], env=env, capture_output=True, text=True, timeout=180
    )
    assert merge.returncode == 0, merge.stdout + merge.stderr
    return inspected, merge.stdout + merge.stderr


def test_compose_loop_read_only_non_root_equals_a_local_run(engine, image, compose_cli, tmp_path):
    """`cluster.type: compose` with `read_only`, `user` and the host network, rendered by shardeval,
    run by the seed's loop against a simulator on the host: complete, equal to an unsharded run,
    every file the non-root uid's, and the key (passed by name) in no file."""
    cluster = f'  type: compose\n  shards: 4\n  read_only: true\n  user: "{UID}:{UID}"\n  network_mode: host'
    root = chowned(tmp_path / "out")
    with running_sim(*SIM_ARGS) as url:
        config = tmp_path / "compose.yaml"
        config.write_text(api_config(url, cluster))
        rendered = shardeval_cmd("run", str(config), "--dry-run", "-o", str(root), env={KEY_VAR: SECRET_VALUE})
        assert rendered.returncode == 0, rendered.stderr
        path = root / "compose" / "docker-compose.yaml"
        shard = yaml.safe_load(path.read_text())["services"]["eval-shard"]
        assert (shard["read_only"], shard["user"], shard["network_mode"]) == (True, f"{UID}:{UID}", "host")
        inspected, report = compose_loop(compose_cli, engine, path, 4, {KEY_VAR: SECRET_VALUE}, PROJECTS[0])
        reference = reference_scores(config, tmp_path, env={KEY_VAR: SECRET_VALUE})
    for container in inspected:
        assert container["HostConfig"]["ReadonlyRootfs"] is True and container["Config"]["User"] == f"{UID}:{UID}"
        assert container["HostConfig"]["NetworkMode"] == "host"
    assert "COMPLETE" in report
    assert sorted(p.name for p in root.glob("shard_*")) == [f"shard_{i}" for i in range(4)]
    scores = json.loads((root / "merged" / "scores.json").read_text())["arith"]
    assert (scores["n_problems"], scores["n_expected"], scores["n_records"]) == (40, 80, 80)
    assert (scores["n_missing"], scores["n_errors"], scores["n_duplicates"]) == (0, 0, 0)
    assert (root / "merged" / "scores.json").read_bytes() == reference
    assert owners(root / "merged") | owners(root / "shard_0") == {UID}
    assert_all_files_free_of(tmp_path, SECRET_VALUE)


def test_checked_in_compose_example_runs_as_is(engine, image, compose_cli, tmp_path):
    """examples/compose/deploy/, byte for byte, in a folder of its own: each shard container starts
    its own simulator on the project's network (compose creates it), then the merge."""
    project = tmp_path / "compose"
    project.mkdir()
    for name in ("docker-compose.yaml", "config.yaml"):
        shutil.copy(Path(REPO, "examples", "compose", "deploy", name), project / name)
    _, report = compose_loop(compose_cli, engine, project / "docker-compose.yaml", 4, {}, PROJECTS[1])
    assert "COMPLETE" in report
    scores = json.loads((tmp_path / "merged" / "scores.json").read_text())["arith"]  # `..` is the output root
    assert (scores["n_records"], scores["n_missing"], scores["n_errors"]) == (160, 0, 0)
    down = subprocess.run(
        [*compose_cli, "-f", str(project / "docker-compose.yaml"), "down"],
        capture_output=True,
        text=True,
        env={**engine, "COMPOSE_PROJECT_NAME": PROJECTS[1]},
        timeout=120,
    )
    assert down.returncode == 0, down.stderr


@pytest.fixture
def data_server(tmp_path: Path) -> Iterator[tuple[str, list[str], Any]]:
    """The "internet" of a prepared run: an http server on the host's 127.0.0.1 serving a BYO
    JSONL; (its URL, the paths it served, a function that stops it)."""
    import threading
    from functools import partial
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    folder = tmp_path / "www"
    folder.mkdir()
    rows = [{"id": f"q{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(6)]
    (folder / "byo.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    seen: list[str] = []

    class Handler(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            seen.append(self.path)

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    stopped = []

    def stop() -> None:
        if not stopped:
            stopped.append(True)
            server.shutdown()
            server.server_close()

    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/byo.jsonl", seen, stop
    finally:
        stop()


@pytest.mark.parametrize(
    "cli, volume",
    [("docker compose", "eval-results"), ("docker-compose", "eval-results"), ("docker compose", None)],
    ids=["v2-results_volume", "1.29-results_volume", "v2-bind-mounted-root"],
)
def test_compose_launch_prepares_and_containers_without_network_read_it(engine, image, tmp_path, data_server, request, cli, volume):
    """Issue 43 with Compose: `shardeval run` prepares on this machine (the data server is the
    "internet"), the server is stopped, then every shard container and the merge run with
    `network_mode: none` (only loopback: each starts its own simulator) and read the preparation:
    with `results_volume` through the read-only bind into the volume, else in the bind-mounted
    root. Launched again, nothing is fetched."""
    url, seen, stop = data_server
    tool = ["docker", "compose"] if cli == "docker compose" else [request.getfixturevalue("docker_compose")]
    config = {
        "services": {"model": {"type": "sim", "ttft_ms": 0, "itl_ms": 0, "output_tokens": 4}},
        "benchmarks": [{"name": "custom", "params": {"name": "byo", "data": url, "scorer": "numeric"}, "repeats": 2}],
        "cluster": {"type": "compose", "shards": 2, "network_mode": "none", **({"results_volume": volume} if volume else {})},
        "output": {"progress_interval_s": 0},
    }
    cfg, root = tmp_path / "compose.yaml", tmp_path / "out"
    cfg.write_text(json.dumps(config))  # YAML is a superset of JSON
    launch = shardeval_cmd("run", str(cfg), "-o", str(root))
    assert launch.returncode == 0, launch.stderr
    assert "prepared the run for nodes without internet: 1 benchmark(s), 1 file(s)" in launch.stderr, launch.stderr
    assert seen == ["/byo.jsonl"]
    stop()  # the containers could not reach it anyway (network_mode: none); now nothing could

    path = root / "compose" / "docker-compose.yaml"
    env = {**engine, "COMPOSE_PROJECT_NAME": PROJECTS[2]}
    try:
        inspected, report = compose_loop(tool, engine, path, 2, {}, PROJECTS[2])
        for container in inspected:
            assert container["HostConfig"]["NetworkMode"] == "none"
            assert "prepared run: reading 1 prepared file(s) from /results/prepared/cache; offline" in container["Logs"], container["Logs"]
            prepared = [m for m in container["Mounts"] if m["Destination"] == "/results/prepared"]
            if volume:  # the host's folder, read-only, inside the volume
                assert [(m["Type"], m["Source"], m["RW"]) for m in prepared] == [("bind", str(root / "prepared"), False)], prepared
            else:  # the root itself is /results
                assert prepared == [] and any(m["Source"] == str(root) and m["Destination"] == "/results" for m in container["Mounts"])
        assert "prepared run: the merge reads 1 prepared file(s)" in report and "COMPLETE" in report, report
        if volume:  # the results are in the volume, not under the root
            assert not list(root.glob("shard_*"))
            volume_mount = f"{PROJECTS[2]}_{volume}:/r:ro"
            cat = docker(engine, "run", "--rm", "--label", LABEL, "-v", volume_mount, "--entrypoint", "cat", image, "/r/merged/scores.json")
            scores_text = cat.stdout
        else:
            scores_text = (root / "merged" / "scores.json").read_text()
        scores = json.loads(scores_text)["byo"]
        assert (scores["n_expected"], scores["n_records"], scores["n_missing"], scores["n_errors"]) == (12, 12, 0, 0), scores

        again = shardeval_cmd("run", str(cfg), "-o", str(root))
        assert again.returncode == 0, again.stderr
        assert "nothing to fetch" in again.stderr and "prepared the run" not in again.stderr, again.stderr
        assert seen == ["/byo.jsonl"]
        if volume:  # no preparation (say, after --dry-run): Docker's one-line refusal, and no empty folder made in its place
            shutil.move(root / "prepared", tmp_path / "moved-away")
            shard = {**env, "NEL_SHARD_IDX": "0", "NEL_TOTAL_SHARDS": "2"}
            refused = subprocess.run(
                [*tool, "-f", str(path), "--profile", "sharded", "run", "--rm", "eval-shard"],
                env=shard,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert refused.returncode != 0 and "bind source path does not exist" in refused.stdout + refused.stderr, refused
            assert not (root / "prepared").exists()
    finally:
        down = subprocess.run([*tool, "-f", str(path), "down", "-v"], capture_output=True, text=True, env=env, timeout=120)
        assert down.returncode == 0, down.stderr
        if volume:  # `down -v` of Compose v2 leaves the volume of services that are all in profiles
            docker(engine, "volume", "rm", "-f", f"{PROJECTS[2]}_{volume}")


# --- Kubernetes --------------------------------------------------------------------------------


def run_container(
    engine: dict[str, str], image: str, container: dict[str, Any], env: dict[str, str], mounts: dict[str, tuple[Path, bool]], network: str
) -> str:
    """`docker run -d` of one rendered container: its command as entrypoint + args, its env
    (values already resolved as the kubelet would), its securityContext, the given mounts."""
    from test_kubernetes import kubelet_expand

    argv = [kubelet_expand(a, env) for a in [*container["command"], *container.get("args", [])]]
    context = container.get("securityContext", {})
    flags = ["--label", LABEL, f"--network={network}"]
    if "runAsUser" in context:
        flags += ["--user", f"{context['runAsUser']}:{context.get('runAsGroup', 0)}"]
    if context.get("readOnlyRootFilesystem"):
        flags.append("--read-only")
    for path, (folder, read_only) in mounts.items():
        flags += ["-v", f"{folder}:{path}{':ro' if read_only else ''}"]
    for name in env:
        flags += ["-e", name]  # by name: the values come from the docker client's environment
    run = docker({**engine, **env}, "run", "-d", *flags, "--entrypoint", argv[0], image, *argv[1:])
    return run.stdout.strip()


def test_indexed_job_containers_run_in_the_image(engine, image, tmp_path):
    """The seed's shape (8 completions, NEL_SHARD_IDX from the completion-index annotation,
    NEL_TOTAL_SHARDS=8) with a read-only root and a non-root uid from `security_context`: every
    index's rendered container, then the merge Job's, in the image; equal to an unsharded run."""
    from test_kubernetes import container_env, indexed_job, merge_job, mount_folders

    cluster = (
        "  type: kubernetes\n  name: arith-docker\n  namespace: evals\n  shards: 8\n"
        f"  security_context: {{runAsUser: {UID}, runAsGroup: {UID}, runAsNonRoot: true, readOnlyRootFilesystem: true}}"
    )
    secrets = {("shardeval-api-keys", KEY_VAR): SECRET_VALUE}
    with running_sim(*SIM_ARGS) as url:
        config = tmp_path / "k8s.yaml"
        config.write_text(api_config(url, cluster))
        rendered = shardeval_cmd("run", str(config), "--dry-run", "-o", str(tmp_path / "out"), env={KEY_VAR: SECRET_VALUE})
        assert rendered.returncode == 0, rendered.stderr
        docs = list(yaml.safe_load_all((tmp_path / "out" / "k8s" / "eval.yaml").read_text()))
        job = indexed_job(docs)
        pod = job["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["image"] == image and container["securityContext"]["readOnlyRootFilesystem"] is True
        cluster_dir = tmp_path / "cluster"
        folders = mount_folders(docs, pod, container, cluster_dir)  # the ConfigMap's files, the claim's folder
        claim = chowned(folders["/results"])
        read_only = {m["mountPath"]: m.get("readOnly", False) for m in container["volumeMounts"]}
        mounts = {path: (folder, read_only[path]) for path, folder in folders.items()}
        ids = [
            run_container(engine, image, container, container_env(container, i, secrets), mounts, "host")
            for i in range(job["spec"]["completions"])
        ]  # parallelism = completions: all at once
        for i, cid in enumerate(ids):
            code = docker(engine, "wait", cid, timeout=180).stdout.strip()
            logs = docker(engine, "logs", cid)
            assert code == "0", f"index {i} exited {code}:\n{logs.stdout}{logs.stderr}"
            assert f"shard {i}/8 (from NEL_SHARD_IDX={i}, NEL_TOTAL_SHARDS=8)" in logs.stdout + logs.stderr
            docker(engine, "rm", cid)
        reference = reference_scores(config, tmp_path, env={KEY_VAR: SECRET_VALUE})
    for i in range(8):
        manifest = json.loads((claim / f"shard_{i}" / "manifest.json").read_text())
        assert (manifest["shard_idx"], manifest["total_shards"], manifest["state"]) == (i, 8, "complete")

    # the merge Job's main container; its initContainer's `kubectl wait` needs the API server
    merge_pod = merge_job(docs)["spec"]["template"]["spec"]
    (merge,) = merge_pod["containers"]
    merge_mounts = {m["mountPath"]: (folders[m["mountPath"]], m.get("readOnly", False)) for m in merge["volumeMounts"]}
    assert "env" not in merge  # a plain Job: no index, no key
    cid = run_container(engine, image, merge, {}, merge_mounts, "none")
    code = docker(engine, "wait", cid, timeout=180).stdout.strip()
    logs = docker(engine, "logs", cid)
    assert code == "0" and "COMPLETE" in logs.stdout + logs.stderr, logs.stdout + logs.stderr
    docker(engine, "rm", cid)
    assert (claim / "merged" / "scores.json").read_bytes() == reference
    assert owners(claim) == {UID}
    assert_all_files_free_of(tmp_path, SECRET_VALUE)
