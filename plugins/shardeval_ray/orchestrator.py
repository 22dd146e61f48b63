"""Run the shards of one evaluation as Ray tasks, then merge their directories in the driver.

Which Ray: `cluster.address` (or `--address`), else RAY_ADDRESS (what `ray job submit` gives its
entrypoint), else a cluster started with `ray start` on this machine, else a new local Ray that
listens on 127.0.0.1 only (include_dashboard=False) and is stopped when the run ends. A Ray this
process is already connected to (ray.init() in a notebook) is used as it is and left running.

The driver passes the loaded config to every task, so workers need shardeval installed but not
the config file; they write `<output-dir>/shard_<i>/` with absolute paths, so on several machines
the output directory must be shared storage (the driver merges it). A sweep is one task per
(model, shard) cell, each given its model's run config and writing `<output-dir>/<model>/shard_<i>/`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import socket
import sys
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from collections.abc import Iterator

from shardeval.api.orchestrator import CellOutcome, LaunchRequest, Orchestrator, orchestrate
from shardeval.api.plugin import UsageError

if TYPE_CHECKING:
    from shardeval.api.orchestrator import Cell

log = logging.getLogger("shardeval")

LOOPBACK = "127.0.0.1"
# Ray decides at import whether "localhost" may mean loopback; off (the default on Linux) it swaps
# 127.0.0.1 for the machine's external address and binds every port on all interfaces.
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@dataclass
class Outcome:
    """What became of one shard task (a cell of a sweep)."""

    cell: Cell
    summary: dict[str, Any] | None = None
    error: str | None = None
    usage_error: bool = False
    cancelled: bool = False

    def exit_code(self) -> int | None:
        """As the lifecycle counts it: 0, 2 (a usage error, never retried), None (cancelled), 1."""
        if self.summary is not None:
            return 0
        return None if self.cancelled else UsageError.exit_code if self.usage_error else 1


class RayOrchestrator(Orchestrator):
    """Every cell a Ray task; the driver waits for them all and merges (unless `merge: false`).
    A cell that refused is reported with the failed ones and the rest is merged; Ctrl-C cancels
    the tasks still pending (exit 130)."""

    refusal_stops_the_merge = False

    def plan(self) -> None:
        # absolute: the workers write there, and the merge reads what they wrote
        self.request = replace(self.request, output_root=os.path.abspath(self.request.output_root))
        if not self.request.config.cluster.shards:
            log.info("cluster.shards is not set: running 1 shard (set --shards N or cluster.shards)")
        root = self.request.output_root
        if not self.request.dry_run and f"{os.sep}runtime_resources{os.sep}" in root:
            log.warning(
                "output directory %s lies inside Ray's runtime_env copy of the working dir, which Ray deletes; "
                "pass an absolute --output-dir on storage that outlives the job",
                root,
            )

    def dry_run(self) -> int:
        return _print_plan(self.request, self.request.config.cluster, self.request.output_root)

    def submit(self) -> int:
        """Connect to (or start) Ray and run every cell's task; `wait` collects them."""
        cluster = self.request.config.cluster
        self._session = contextlib.ExitStack()
        description = self._session.enter_context(ray_session(cluster))
        log.info("ray: %s; %d shard task(s) -> %s", description, len(self.request.cells()), self.request.output_root)
        return 0

    def wait(self) -> None:
        with self._session:  # the Ray this run started stops once every task ended
            self._outcomes = _run_tasks(self.request, self.request.config.cluster)

    def collect(self) -> list[CellOutcome]:
        return [CellOutcome(o.cell, o.exit_code()) for o in self._outcomes]

    def merges(self) -> bool:
        from shardeval_ray.config import RayClusterConfig

        cluster = self.request.config.cluster
        return cluster.merge if isinstance(cluster, RayClusterConfig) else True


def run_ray(request: LaunchRequest) -> int:
    """The whole Ray launch (`python -m shardeval_ray`, or a notebook): the core's lifecycle."""
    return orchestrate(RayOrchestrator, request)


def resolve_address(configured: str | None, env: dict[str, str] | os._Environ[str]) -> tuple[str | None, str]:
    """(address for ray.init, or None to start a local Ray; why) without importing Ray."""
    if configured == "local":
        return None, "address local: a new local Ray"
    if configured and configured != "auto":
        return configured, f"the Ray at {configured} (cluster.address)"
    env_address = env.get("RAY_ADDRESS")
    if env_address:
        return env_address, f"the Ray at {env_address} (RAY_ADDRESS)"
    if configured == "auto":
        return "auto", "an existing Ray on this machine (address auto)"
    current = _current_cluster_file(env)
    address = ""
    with contextlib.suppress(OSError), open(current, encoding="utf-8") as f:
        address = f.read().strip()
    if address:
        if _listening(address):
            return address, f"the Ray started with `ray start` at {address} ({current})"
        log.info("ray: ignoring %s: nothing answers at %s any more", current, address)
    return None, "no running Ray found: a new local Ray"


def _current_cluster_file(env: Any) -> str:
    """Where `ray start` records the latest cluster (Ray's own rule: RAY_TMPDIR, TMPDIR, /tmp)."""
    base = env.get("RAY_TMPDIR") or (env.get("TMPDIR") if sys.platform.startswith("linux") else None) or "/tmp"
    return os.path.join(base, "ray", "ray_current_cluster")


def _listening(address: str, timeout: float = 1.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def _is_loopback(host: str | None) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address((host or "").strip("[]")).is_loopback
    except ValueError:
        return False


def _address_host(address: str) -> str:
    address = address.split("://", 1)[-1]
    return address.rpartition(":")[0] or address


@contextlib.contextmanager
def ray_session(cluster: Any) -> Iterator[str]:
    """Connect to (or start) the Ray this run uses, in words for the log; disconnect, and stop it
    if we started it."""
    node_ip = getattr(cluster, "node_ip_address", None) or os.environ.get("RAY_NODE_IP_ADDRESS")
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        yield "the Ray this process is already connected to"
        return
    address, why = resolve_address(getattr(cluster, "address", None), os.environ)
    start = address is None
    if address not in (None, "auto") and not _listening(address.split("://", 1)[-1], timeout=5.0):
        raise UsageError(f"ray: cannot use {why}: nothing answers there; start the cluster or fix the address")
    if start:
        node_ip = node_ip or LOOPBACK
    loopback = _is_loopback(node_ip) or (address is not None and _is_loopback(_address_host(address)))
    if loopback and "ray" not in sys.modules:
        os.environ.setdefault(LOOPBACK_ENV, "0")
    try:
        import ray
    except ImportError:
        raise UsageError("cluster.type ray needs Ray on this machine: pip install 'shardeval[ray]' (or scripts/setup/ray.sh)") from None
    kwargs: dict[str, Any] = {"namespace": "shardeval", "log_to_driver": True, "address": address or "local"}
    kwargs |= ({"_node_ip_address": node_ip} if node_ip else {}) | ({"include_dashboard": False} if start else {})
    began = time.monotonic()
    try:
        context = ray.init(**kwargs)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"ray: cannot use {why}: {first}") from None
    try:
        actual_ip = context.address_info.get("node_ip_address") if hasattr(context, "address_info") else None
        if start and loopback and actual_ip and not _is_loopback(actual_ip):
            log.warning(
                "ray: the local Ray uses %s, not loopback (ray was imported before %s=0 could be set)",
                actual_ip,
                LOOPBACK_ENV,
            )
        yield f"{why} on {actual_ip or node_ip or '?'} (up in {time.monotonic() - began:.1f} s)"
    finally:
        ray.shutdown()  # stops only the Ray this process started; a cluster we joined keeps running


def task_options(cluster: Any, cell: Cell) -> dict[str, Any]:
    """Ray options of one shard task, from the config (every key passed through as it is)."""
    from shardeval_ray.tasks import ShardAttemptFailed  # imports Ray

    model = f"{cell.service}-" if cell.service else ""
    options = {"name": f"shardeval-{model}shard-{cell.shard}-of-{cell.shards}", **_resource_options(cluster)}
    options["retry_exceptions"] = [ShardAttemptFailed] if cluster.retry_exceptions else False
    return options


def _resource_options(cluster: Any) -> dict[str, Any]:
    options = {
        "num_cpus": cluster.num_cpus,
        "num_gpus": cluster.num_gpus,
        "max_retries": cluster.max_retries,
        "resources": dict(cluster.resources),
        "memory": cluster.memory,
        "runtime_env": dict(cluster.runtime_env),
    }
    return {key: value for key, value in options.items() if value is not None and value != {}}


def task_call(request: LaunchRequest, cell: Cell) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """run_shard's arguments for one cell: its (model's) run config, the run's root (absolute, as
    the workers see it) and, in a sweep, the plan its manifest records."""
    sweep = request.sweep
    kwargs: dict[str, Any] = {
        "config": sweep.configs[cell.service] if sweep and cell.service else request.config,
        "output_dir": os.path.dirname(os.path.abspath(cell.dir)),
    }
    if sweep is not None:
        kwargs["sweep"] = sweep.plan(cell.service)
    return (None, cell.shard, cell.shards), kwargs


def _run_tasks(request: LaunchRequest, cluster: Any) -> list[Outcome]:
    import ray

    from shardeval_ray.tasks import run_shard

    cells = request.cells()
    refs = {}
    for cell in cells:
        args, kwargs = task_call(request, cell)
        refs[run_shard.options(**task_options(cluster, cell)).remote(*args, **kwargs)] = cell
    outcomes: dict[int, Outcome] = {}
    pending = list(refs)
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                outcomes[refs[ref].index] = outcome = _collect(ray, ref, refs[ref])
                _print_outcome(outcome)
    except KeyboardInterrupt:
        log.warning("interrupted: cancelling %d shard task(s); each stops and keeps what it wrote", len(pending))
        for ref in pending:
            ray.cancel(ref)
        grace = request.config.output.drain_timeout_s + 10
        with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C skips the wait
            ray.wait(pending, num_returns=len(pending), timeout=grace)
        for ref in pending:
            outcomes[refs[ref].index] = Outcome(refs[ref], error="cancelled (interrupted)", cancelled=True)
    return [outcomes[cell.index] for cell in cells]


def _collect(ray: Any, ref: Any, cell: Cell) -> Outcome:
    try:
        return Outcome(cell, summary=ray.get(ref))
    except UsageError as exc:  # RayTaskError is also an instance of its cause
        return Outcome(cell, error=_first_line(getattr(exc, "cause", exc)), usage_error=True)
    except ray.exceptions.TaskCancelledError:
        return Outcome(cell, error="cancelled", cancelled=True)
    except ray.exceptions.RayError as exc:
        return Outcome(cell, error=_first_line(getattr(exc, "cause", None) or exc))


def _first_line(exc: BaseException) -> str:
    line = next(filter(None, map(str.strip, str(exc).splitlines())), "")
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def _print_outcome(outcome: Outcome) -> None:
    if outcome.summary is None:
        print(f"shardeval: {outcome.cell.label} failed: {outcome.error}", file=sys.stderr)
        return
    s = outcome.summary
    parts = [f"{name} {b['n_ok']}/{b['n_expected']} ok, {b['n_error']} error(s)" for name, b in s["benchmarks"].items()]
    resumed = f", resumed over {s['records_before']} record(s) on disk" if s["records_before"] else ""
    print(
        f"shardeval: {outcome.cell.label} {s['state']}: {'; '.join(parts)}{resumed} -> {s['out_dir']} "
        f"[node {s['node_ip']} {(s['node_id'] or '?')[:8]}, pid {s['pid']}, {s['elapsed_s']:.1f} s]",
        file=sys.stderr,
    )


def _print_plan(request: LaunchRequest, cluster: Any, root: str) -> int:
    address, why = resolve_address(cluster.address, os.environ)
    if address is None:
        why += f" on {cluster.node_ip_address or os.environ.get('RAY_NODE_IP_ADDRESS') or LOOPBACK}, no dashboard"
    print(f"ray: would use {why}")
    shown = {**_resource_options(cluster), "retry_exceptions": cluster.retry_exceptions}
    print("ray: each shard task: " + ", ".join(f"{k}={v}" for k, v in shown.items()))
    for cell in request.cells():
        (_, idx, total), kwargs = task_call(request, cell)
        plan = f", sweep=<plan of {cell.service}>" if cell.service else ""
        print(
            f"run_shard.remote(None, {idx}, {total}, config=<{cell.service or 'loaded'} config>, "
            f"output_dir={kwargs['output_dir']!r}{plan}) -> {os.path.abspath(cell.dir)}"
        )
    print(f"then: merge {root} -> {os.path.join(root, 'merged')}" if cluster.merge else "then: no merge (merge: false)")
    return 0
