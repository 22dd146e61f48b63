"""`cluster.type: compose`: write a Compose project for the run, then print how to start it.

Written to `<output root>/compose/`: `docker-compose.yaml` and a copy of the config file
(`config.yaml`, mounted read-only at /config). The output root itself is bind-mounted at
/results (or `results_volume` names a Docker volume), so shards write `<root>/shard_<i>` exactly
as local runs do and `shardeval merge <root>` also works from the host. The shard loop is the
seed's:

    for i in 0 1 2 3; do
      NEL_SHARD_IDX=$i NEL_TOTAL_SHARDS=4 docker compose -f <root>/compose/docker-compose.yaml \
        --profile sharded run -d eval-shard
    done
    docker compose -f <root>/compose/docker-compose.yaml --profile merge run --rm eval-merge

NEL_SHARD_IDX is written as `${NEL_SHARD_IDX:-}`, not `${NEL_SHARD_IDX:?…}`: Compose interpolates
every service, profiles or not, so a required variable would also break the merge command. An
unset index reaches shardeval as an empty NEL_SHARD_IDX, a one-line error in the container.

A sweep has one service per (model, shard) cell, `shard-<model>-<i>`, each with its cell's own
arguments, and `eval-merge` depends on all of them completing: `docker compose up` runs the lot.

Nodes without internet (docs/offline.md): the launch prepares the run on this machine, into
<root>/prepared/, and the containers read it there. A bind-mounted output root shows it at
/results/prepared as it is; with `results_volume` the folder is bind-mounted read-only into the
volume at /results/prepared (long syntax, so a missing preparation is Docker's one-line refusal,
never an empty folder created in its place), and a `prepare.cache_dir` outside the root at its own
path, read-only. No copy: Compose runs on this machine's Docker, which sees these folders.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from typing import TYPE_CHECKING, Any

from shardeval.api.orchestrator import ENV_NAME, Orchestrator, dump_yaml, escape_dollars as escape
from shardeval.api.plugin import UsageError

if TYPE_CHECKING:
    from shardeval.api.orchestrator import Cell, LaunchRequest
    from shardeval_compose.config import ComposeClusterConfig

PROJECT_DIR = "compose"
PREPARED_DIR = "prepared"  # the preparation's folder under the output root (docs/offline.md)
COMPOSE_FILE = "docker-compose.yaml"
CONFIG_FILE = "config.yaml"
CONFIG_IN_CONTAINER = "/config/config.yaml"
RESULTS_DIR = "/results"
SHARD_SERVICE, MERGE_SERVICE = "eval-shard", "eval-merge"
SHARD_PROFILE, MERGE_PROFILE = "sharded", "merge"
SHARD_VARIABLES = {"NEL_SHARD_IDX", "NEL_TOTAL_SHARDS"}

_VOLUME_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")


class ComposeOrchestrator(Orchestrator):
    """Writes the Compose project and prints the commands that run it: shardeval never drives
    Docker itself, so it does not wait, and `--fresh` travels to the containers."""

    waits = False
    runs_cells = False  # it prints the commands; `shardeval watch` cannot know when they run
    fresh_on_launcher = False

    def plan(self) -> None:
        self.files = render(self.request)

    def dry_run(self) -> int:
        """The compose file on stdout (what is printed is what is written), the commands on stderr."""
        paths = self.request.write(PROJECT_DIR, self.files)
        print(self.files[COMPOSE_FILE], end="")
        print(f"shardeval: wrote {', '.join(paths.values())}", file=sys.stderr)
        print(commands(self.request, paths[COMPOSE_FILE]), end="", file=sys.stderr)
        return 0

    def submit(self) -> int:
        """Write the project; print the commands that run it."""
        paths = self.request.write(PROJECT_DIR, self.files)
        print(f"shardeval: wrote {', '.join(paths.values())}", file=sys.stderr)
        print(commands(self.request, paths[COMPOSE_FILE]), end="")
        return 0


def commands(request: LaunchRequest, path: str) -> str:
    """The seed's loop over shards, then the merge (a sweep: `up`): shardeval never drives Docker itself."""
    total = request.total
    f = shlex.quote(path)
    keys = sorted(_pass_through(request))
    export = f" (export {', '.join(keys)} first: compose passes it by name)" if keys else ""
    if request.sweep is not None:
        lines = [
            f"# {len(request.cells())} cells ({len(request.sweep.services)} models x {total} shards), each its own container; "
            f"the merge runs once all exited 0{export}:",
            f"docker compose -f {f} up",
            "# after a failure: the same `up` again (finished cells end at once), or merge what exists:",
            f"docker compose -f {f} run --rm --no-deps {MERGE_SERVICE}",
        ]
    else:
        lines = [
            f"# {total} shards, each its own container{export or ':'}",
            f"for i in $(seq 0 {total - 1}); do NEL_SHARD_IDX=$i NEL_TOTAL_SHARDS={total} "
            f"docker compose -f {f} --profile {SHARD_PROFILE} run -d {SHARD_SERVICE}; done",
            f"# when they have exited (docker ps -a --filter label=com.docker.compose.service={SHARD_SERVICE}):",
            f"docker compose -f {f} --profile {MERGE_PROFILE} run --rm {MERGE_SERVICE}",
        ]
    if getattr(request.config.cluster, "results_volume", None) is None:
        root = shlex.quote(request.output_root)
        lines.append(f"# the results are in {request.output_root}: shardeval status {root}; shardeval merge {root}")
    return "\n".join(lines) + "\n"


def render(request: LaunchRequest) -> dict[str, str]:
    """{file name: text} for the project folder: the compose file and, with a config file, its copy."""
    from shardeval import __version__

    cluster = compose_cluster(request)
    total = request.total
    image = cluster.image or f"shardeval:{__version__}"
    config_text = request.config_text()

    if cluster.results_volume is None:
        results = ".."  # the output root: the compose file lives in <root>/compose/
    elif _VOLUME_NAME.fullmatch(cluster.results_volume):
        results = cluster.results_volume
    else:
        raise UsageError(
            f"cluster.results_volume {cluster.results_volume!r}: not a Docker volume name (letters, digits, '_', '.', '-'); "
            "leave it unset to bind-mount the output root"
        )
    for var in [*cluster.env, *cluster.pass_env]:
        if not ENV_NAME.fullmatch(var):
            raise UsageError(f"cluster: {var!r} is not an environment variable name")
        if var in SHARD_VARIABLES:
            raise UsageError(f"cluster: {var} comes from the `docker compose run` command line; remove it from cluster.env/pass_env")

    prepared = _prepared_mounts(request, cluster.results_volume is not None)
    plain = [f"{k}={escape(str(v))}" for k, v in cluster.env.items()]
    passed = sorted(_pass_through(request))  # by name only: compose copies the value from the caller's environment
    both = {"user": cluster.user, "read_only": cluster.read_only, "network_mode": cluster.network_mode}
    both = {key: value for key, value in both.items() if value}  # unset ones stay out

    def shard_service(command: list[str], environment: list[str], profiles: list[str]) -> dict[str, Any]:
        shard: dict[str, Any] = {
            "image": image,
            **({"profiles": profiles} if profiles else {}),
            "entrypoint": [escape(e) for e in cluster.entrypoint],
            "command": command,
            **({"environment": environment} if environment else {}),
            "volumes": [
                *([f"./{CONFIG_FILE}:{CONFIG_IN_CONTAINER}:ro"] if config_text is not None else []),
                f"{results}:{RESULTS_DIR}",
                *prepared,
            ],
            **both,
        }
        if cluster.shm_size:
            shard["shm_size"] = cluster.shm_size
        if cluster.gpus is not None:
            device = {"driver": cluster.gpu_driver, "count": cluster.gpus, "capabilities": ["gpu"]}
            shard["deploy"] = {"resources": {"reservations": {"devices": [device]}}}
        return shard

    services: dict[str, Any] = {}
    if request.sweep is None:
        # run_args without `--shard` and `-o`: the shard comes from NEL_SHARD_IDX (the NeMo Evaluator
        # contract), and `output.dir=/results` puts it in /results/shard_<i> with no interpolation
        command = ["run", *request.run_args(CONFIG_IN_CONTAINER, escape), "-O", f"output.dir={RESULTS_DIR}"]
        index = ["NEL_SHARD_IDX=${NEL_SHARD_IDX:-}", f"NEL_TOTAL_SHARDS=${{NEL_TOTAL_SHARDS:-{total}}}"]
        services[SHARD_SERVICE] = shard_service(command, [*index, *plain, *passed], [SHARD_PROFILE])
    else:  # a sweep: one service per cell, with its own arguments, no variables to set
        for cell in request.cells():
            args = request.cell_args(cell, RESULTS_DIR, config_path=CONFIG_IN_CONTAINER, escape=escape)
            services[cell_service(cell)] = shard_service(["run", *args], [*plain, *passed], [])
    merge: dict[str, Any] = {
        "image": image,
        **({} if request.sweep else {"profiles": [MERGE_PROFILE]}),
        "entrypoint": [escape(e) for e in cluster.entrypoint],
        "command": ["merge", RESULTS_DIR],
        "volumes": [f"{results}:{RESULTS_DIR}", *prepared],
        **({"environment": list(plain)} if plain else {}),
        **both,
    }
    if request.sweep is not None:  # `up` starts it once every cell exited 0
        merge["depends_on"] = {name: {"condition": "service_completed_successfully"} for name in services}
    document: dict[str, Any] = {"services": {**services, MERGE_SERVICE: merge}}
    if cluster.results_volume is not None:
        document["volumes"] = {cluster.results_volume: {}}
    header_prepared = (
        "# The containers read the run's preparation through read-only bind mounts, which must exist: `shardeval run`\n"
        "# makes it; after --dry-run, run `shardeval prepare CONFIG -o ROOT` first (docs/offline.md).\n"
        if prepared
        else ""
    )
    if request.sweep is not None:
        header = (
            "# Rendered by shardeval (cluster.type: compose). A sweep: one container per (model, shard) cell, then\n"
            "# the merge once every cell exited 0: docker compose -f docker-compose.yaml up\n"
        )
    else:
        header = (
            "# Rendered by shardeval (cluster.type: compose). One container per shard, i = 0 … shards-1:\n"
            f"#   NEL_SHARD_IDX=$i NEL_TOTAL_SHARDS={total} docker compose -f docker-compose.yaml "
            f"--profile {SHARD_PROFILE} run -d {SHARD_SERVICE}\n"
            f"# then: docker compose -f docker-compose.yaml --profile {MERGE_PROFILE} run --rm {MERGE_SERVICE}\n"
        )
    files = {COMPOSE_FILE: dump_yaml([document], header + header_prepared, explicit_start=False)}
    if config_text is not None:
        files[CONFIG_FILE] = config_text
    return files


def _prepared_mounts(request: LaunchRequest, in_volume: bool) -> list[dict[str, Any]]:
    """What the containers need to read the run's preparation beyond /results: with a named
    volume, the host's <root>/prepared/ at /results/prepared; a `prepare.cache_dir` (outside the
    root) at its own path, as the preparation names it. Read-only: a container never changes them."""
    mounts = []
    if in_volume:
        mounts.append({"type": "bind", "source": f"../{PREPARED_DIR}", "target": f"{RESULTS_DIR}/{PREPARED_DIR}", "read_only": True})
    prepare = request.config.prepare
    if prepare is not None and prepare.cache_dir:
        cache = os.path.abspath(prepare.cache_dir)  # as `shardeval prepare` records it
        mounts.append({"type": "bind", "source": escape(cache), "target": escape(cache), "read_only": True})
    return mounts


def compose_cluster(request: LaunchRequest) -> ComposeClusterConfig:
    """The request's `cluster:` section, as this plugin's Struct decoded it."""
    from shardeval_compose.config import ComposeClusterConfig

    cluster = request.config.cluster
    if not isinstance(cluster, ComposeClusterConfig):  # decoded by another plugin's Struct
        raise TypeError(f"expected ComposeClusterConfig, got {type(cluster).__name__}")
    return cluster


def cell_service(cell: Cell) -> str:
    """`shard-<model>-<i>`: a sweep cell's service name (a model name is already a safe one)."""
    return f"shard-{re.sub(r'[^A-Za-z0-9_.-]', '-', cell.service or '')}-{cell.shard}"


def _pass_through(request: LaunchRequest) -> set[str]:
    """Variables passed by name: API keys, pass_env, and every ${VAR} the config file expands."""
    cluster = compose_cluster(request)
    names = set(cluster.pass_env) | request.config_variables()
    for name, service in request.config.services.items():
        if service.api_key_env:
            if not ENV_NAME.fullmatch(service.api_key_env):
                raise UsageError(f"services.{name}.api_key_env {service.api_key_env!r}: not an environment variable name")
            names.add(service.api_key_env)
    return names - set(cluster.env) - SHARD_VARIABLES
