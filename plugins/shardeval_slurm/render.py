"""Render one evaluation as SLURM batch scripts: `eval.sbatch` (the array) and `merge.sbatch`
(submit.render picks these, or ray_template's ray.sbatch with `ray: true`).

Pure text, no SLURM needed, so `--dry-run` and the render tests run anywhere. Written to the
output root:

    eval.sbatch    #SBATCH --array=0-<N-1>[%max_parallel]; task i exports NEL_SHARD_IDX=i and
                   runs `shardeval run CONFIG --shard i/N -o ROOT/shard_i`, which starts the model
                   service (e.g. vLLM) itself, evaluates the shard and stops the service
    merge.sbatch   `shardeval merge ROOT`; submitted with --dependency=afterany:<array job id>

The array task id *is* the shard index (not normalised by SLURM_ARRAY_TASK_MIN), so resubmitting
a subset with `sbatch --array=3,7 eval.sbatch` reruns exactly shards 3 and 7, which resume.

A sweep is the same array over (model, shard) cells, model-major (task c = shard c mod S of model
c div S): each task runs `shardeval run CONFIG --sweep-services <models, in order> --shard c/(M·S)
-o ROOT` (LaunchRequest.indexed_args), writing ROOT/<model>/shard_<i>; SLURM's own output goes
to ROOT/logs/, since the task learns its model only when it runs.

Quoting: every static word goes through shlex; the one dynamic part, the shard index, is written
as "${NEL_SHARD_IDX}". `#SBATCH` lines are not shell: sbatch splits them on whitespace and honours
quotes, so values with spaces are double-quoted there. Secrets are never written: the scripts
name the config file (re-read, and `${VAR}` re-expanded, on the node from the environment sbatch
passes on) and `check_no_secrets` refuses a script that would hold a secret's value anyway.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import shlex
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from shardeval import __version__
from shardeval.api.orchestrator import ENV_NAME
from shardeval.api.plugin import UsageError, is_secret

if TYPE_CHECKING:
    from shardeval.api.orchestrator import Config, LaunchRequest
    from shardeval_slurm.config import NodePool, SlurmClusterConfig

EVAL_SCRIPT = "eval.sbatch"
MERGE_SCRIPT = "merge.sbatch"
RAY_SCRIPT = "ray.sbatch"
JOB_FILE = "slurm_job.json"
SHARD_VAR = "NEL_SHARD_IDX"
# Stands for the shard index while argv is built; becomes "${NEL_SHARD_IDX}" in the script.
_INDEX = "\x00shard-index\x00"
_PLAIN = re.compile(r"[\w@%+=:,./\-]+")
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH", re.I)


@dataclass(frozen=True)
class Pool:
    """The node pool the array runs on (`name` None: the cluster's own resources), for messages too."""

    name: str | None
    spec: NodePool
    partition: str | None


def eval_script(request: LaunchRequest) -> str:
    """The array's script, relative to the output root: eval.sbatch; for a launch of one sweep
    model (`--sweep-services NAME`: each checkpoint of `shardeval watch`) <model>/eval.sbatch, so
    each checkpoint's script stays beside its cells and the next checkpoint's does not replace it."""
    sweep = request.sweep
    if sweep is not None and len(sweep.services) == 1:
        return os.path.join(sweep.services[0], EVAL_SCRIPT)
    return EVAL_SCRIPT


def shell_word(arg: str) -> str:
    """One argv word for bash: static text quoted by shlex, the shard index as "${NEL_SHARD_IDX}"."""
    return f'"${{{SHARD_VAR}}}"'.join(shlex.quote(part) if part else "" for part in arg.split(_INDEX)) or "''"


def shell_line(argv: list[str]) -> str:
    return " ".join(shell_word(a) for a in argv)


def sbatch_value(value: str, what: str) -> str:
    """A value for an `#SBATCH --flag=VALUE` line (sbatch splits those on whitespace, honours quotes)."""
    if "\n" in value or "\r" in value or "\x00" in value:
        raise UsageError(f"{what}: {value!r} contains a line break, which an #SBATCH line cannot carry")
    if _PLAIN.fullmatch(value):
        return value
    if '"' not in value:
        return f'"{value}"'
    if "'" not in value:
        return f"'{value}'"
    raise UsageError(f"{what}: {value!r} contains both quote characters, which an #SBATCH line cannot carry")


def slurm_path(path: str) -> str:
    """A literal path inside an --output/--error pattern: `%` is SLURM's pattern character."""
    return path.replace("%", "%%")


def comment(text: str) -> str:
    """Text inside a `#` comment line: one line, whatever it holds."""
    return " ".join(text.split())


def node_command(cluster: SlurmClusterConfig) -> list[str]:
    """How a node invokes shardeval: `cluster.command`, else this very shardeval (absolute path;
    the one file through its own launcher, so each node picks its own Python)."""
    from shardeval.api.orchestrator import node_command as this_shardeval

    if cluster.command is not None:
        if not cluster.command or not all(cluster.command):
            raise UsageError("cluster.command: must be a non-empty list of words, e.g. [python3, /shared/shardeval.pyz]")
        return list(cluster.command)
    return this_shardeval()


def choose_pool(config: Config) -> Pool:
    """The one node pool every array task asks for; several pools would need a heterogeneous job."""
    cluster: SlurmClusterConfig = config.cluster  # type: ignore[assignment]
    pools = cluster.node_pools
    wanted = {name: p for name, s in config.used_services().items() if (p := getattr(s, "node_pool", None))}
    distinct = sorted(set(wanted.values()))
    sharded = f"`shards: {cluster.shards}`" if cluster.shards else "a sharded array job"
    if len(distinct) > 1:
        where = ", ".join(f"services.{s} on {p}" for s, p in wanted.items())
        raise UsageError(
            f"cluster.node_pools: the services run on several node pools ({where}), which needs a heterogeneous "
            f"SLURM job, and {sharded} does not combine with heterogeneous jobs; put every service on one pool, "
            "or make one `type: api` with the url of an endpoint that already runs"
        )
    if distinct:
        name = distinct[0]
        if name not in pools:
            close = difflib.get_close_matches(name, list(pools), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else f"defined: {', '.join(pools) or 'none'}"
            service = next(s for s, p in wanted.items() if p == name)
            raise UsageError(f"services.{service}.node_pool: no node pool {name!r} in cluster.node_pools; {hint}")
    elif len(pools) > 1:
        raise UsageError(
            f"cluster.node_pools defines several pools ({', '.join(pools)}) and no service names one with "
            f"`node_pool:`; {sharded} is one array job on one pool (`shards` does not combine with "
            "heterogeneous jobs): keep one pool, or set services.<name>.node_pool"
        )
    else:
        name = next(iter(pools), None)
    from shardeval_slurm.config import NodePool

    spec = pools[name] if name is not None else NodePool()
    return Pool(name=name, spec=spec, partition=spec.partition or cluster.partition)


def service_launch_lines(config: Config, command: list[str], free_ports: bool = False) -> list[str]:
    """What each task's `shardeval run` starts before evaluating, for the script's comment block
    (with `free_ports`, as each service's port_override() makes it)."""
    import msgspec

    lines = []
    for name, service in config.used_services().items():
        if free_ports and (override := service.port_override()):
            service = msgspec.structs.replace(service, **override)
        pool = getattr(service, "node_pool", None)
        label = f"services.{name} ({service.type}{f', node pool {pool}' if pool else ''})"
        lines.append(f"{label}: {service.launch_line(command)}")
    return lines


def _directive(flag: str, value: str | int | None, what: str) -> list[str]:
    if value is None:
        return []
    return [f"#SBATCH --{flag}={sbatch_value(str(value), what)}"]


def _directives(section: object, keys: list[str], at: str) -> list[str]:
    """`#SBATCH --key=value` for each of `keys` that the config `section` (at `at`) sets."""
    return [line for key in keys for line in _directive(key.replace("_", "-"), getattr(section, key), f"{at}.{key}")]


def _common_head(cluster: SlurmClusterConfig, walltime: str, partition: str | None, cwd: str, resources: list[str], logs: str) -> list[str]:
    """--time (from `walltime`, a key of cluster), where and as whom every job of the run runs, its
    `resources`, and its output and error files `logs`.out/.err (appended to across requeues)."""
    lines = _directive("time", getattr(cluster, walltime), f"cluster.{walltime}")
    lines += _directive("partition", partition, "cluster.partition")
    lines += _directives(cluster, ["account", "qos"], "cluster")
    lines += [*_directive("chdir", cwd, "the working directory"), *resources]
    for flag, ext in (("output", "out"), ("error", "err")):
        lines += _directive(flag, f"{logs}.{ext}", "the output directory")
    return lines + ["#SBATCH --open-mode=append"]


_GRES_GPUS = re.compile(r"(?:^|,)gpu(?::[^:,]+)?:(\d+)(?:,|$)")


def check_gpus(config: Config, pool: Pool) -> int | None:
    """GPUs one array task gets (per node × nodes), from `gpus_per_node` or a `gpu[:type]:N` gres
    (None when the pool asks for none we can read); refuse a pool with fewer than a service needs
    (each service says, gpus())."""
    spec = pool.spec
    per_node = spec.gpus_per_node
    if per_node is None and spec.gres and (found := _GRES_GPUS.search(spec.gres)):
        per_node = int(found.group(1))
    if per_node is None:
        return None
    have = per_node * spec.nodes
    for name, service in config.used_services().items():
        if (need := service.gpus()) > have:
            where = f"cluster.node_pools.{pool.name}" if pool.name else "cluster"
            raise UsageError(
                f"services.{name} needs {need} GPUs on its node, and {where} asks for {have} per task; "
                f"raise its gres/gpus_per_node, or lower the service's parallelism"
            )
    return have


def _pool_directives(pool: Pool, gpus: int | None = None) -> list[str]:
    spec, at = pool.spec, f"cluster.node_pools.{pool.name}" if pool.name else "cluster"
    keys = ["nodes", "ntasks_per_node", "gres", "gpus_per_node", "cpus_per_task", "mem"]
    if gpus:  # SLURM takes one of --cpus-per-task / --cpus-per-gpu, and one of --mem / --mem-per-gpu
        keys += ["cpus_per_gpu"] if spec.cpus_per_task is None else []
        keys += ["mem_per_gpu"] if spec.mem is None else []
    lines = _directives(spec, [*keys, "constraint"], at)
    if spec.exclusive:
        lines.append("#SBATCH --exclusive")
    return lines


def _extra_flags(cluster: SlurmClusterConfig) -> list[str]:
    for i, flag in enumerate(cluster.sbatch_extra_flags):
        if not flag.startswith("-") or "\n" in flag or "\r" in flag:
            raise UsageError(
                f"cluster.sbatch_extra_flags[{i}]: {flag!r} is not one sbatch flag; write it as on the command line, e.g. --mail-type=END"
            )
    return [f"#SBATCH {flag}" for flag in cluster.sbatch_extra_flags]


def _environment(cluster: SlurmClusterConfig) -> list[str]:
    """`cluster.setup` lines verbatim, then `cluster.env` as exports (values quoted, names checked)."""
    for key in cluster.env:
        if not ENV_NAME.fullmatch(key):
            raise UsageError(f"cluster.env.{key}: not a shell variable name (letters, digits and _, not first a digit)")
    setup = ["# cluster.setup", *cluster.setup] if cluster.setup else []
    return setup + [f"export {key}={shlex.quote(value)}" for key, value in cluster.env.items()]


def render_array(request: LaunchRequest, pool: Pool, command: list[str], cwd: str) -> str:
    """The array: task c runs cell c (a shard; in a sweep, shard c mod S of model c div S)."""
    cluster: SlurmClusterConfig = request.config.cluster  # type: ignore[assignment]
    root, total, sweep = request.output_root, request.total, request.sweep
    cells = len(request.cells())
    # a sweep task's model directory is only known once the task runs: SLURM's files go to ROOT/logs/
    logs = os.path.join(slurm_path(root), *(["logs"] if sweep else ["shard_%a", "logs"]), "slurm-%A_%a")
    array = f"0-{cells - 1}" + (f"%{cluster.max_parallel}" if cluster.max_parallel else "")
    gpus = check_gpus(request.config, pool)
    ports = [] if pool.spec.exclusive else free_port_overrides(request.config)
    request = replace(request, overrides=[*request.overrides, *ports])
    args = request.indexed_args(_INDEX)  # in a sweep: --sweep-services frozen in this order
    source = request.config_path or "the command line (quick mode)"
    if sweep is None:
        what = [
            f"# One array task per shard: task i evaluates shard i of {total} into {comment(root)}/shard_i.",
            "# Submit: sbatch eval.sbatch. Rerun some shards (they resume): sbatch --array=3,7 eval.sbatch",
        ]
        cell = [f"shard ${{{SHARD_VAR}}}/{total}"]
        logs_note, whose = "shard_i/logs/", "these"
    else:
        models = ", ".join(sweep.services)
        what = [
            f"# A sweep: one array task per (model, shard) cell, model-major: task c evaluates shard c mod {total}",
            f"# of model c div {total} into {comment(root)}/<model>/shard_<i>, the models in this order: {comment(models)}.",
            f"# Resources: one spec for the whole array, checked against the services of every model ({comment(models)}).",
            "# Submit with `shardeval run` (it submits only the cells not yet complete). Rerun some cells (they",
            "# resume; a complete one exits at once): sbatch --array=3,7 eval.sbatch",
        ]
        cell = [f"models=({shell_line(list(sweep.services))})", f"cell $idx = ${{models[idx / {total}]}} shard $((idx % {total}))/{total}"]
        logs_note, whose = "<model>/shard_i/logs/; SLURM's own output goes to logs/", "its model's"
    lines = [
        "#!/bin/bash",
        f"# Generated by shardeval {__version__} (cluster.type: slurm) from {comment(source)}.",
        *what,
        f"#SBATCH --job-name={sbatch_value(cluster.job_name, 'cluster.job_name')}",
        f"#SBATCH --array={array}",
        *_common_head(cluster, "walltime", pool.partition, cwd, _pool_directives(pool, gpus), logs),
        "#SBATCH --requeue" if cluster.requeue else "#SBATCH --no-requeue",
        f"#SBATCH --signal=B:USR1@{stop_before_limit(request.config, cluster)}",
        *_extra_flags(cluster),
        "#",
        f"# Each task's `shardeval run` starts {whose} services itself, waits until they answer,",
        f"# evaluates the {'cell' if sweep else 'shard'} and stops them (their logs go to {logs_note}):",
        *(f"#   {comment(line)}" for line in service_launch_lines(request.config, command, free_ports=bool(ports))),
        *([f"# Tasks may share a node (no --exclusive), so each picks a free port: {', '.join(ports)}."] if ports else []),
        "# API keys are not in this file: services name them with api_key_env, and sbatch passes the",
        "# submitting shell's environment on to the tasks (its default, --export=ALL).",
        "",
        "set -eo pipefail",
        f'if [ -z "${{SLURM_ARRAY_TASK_ID:-}}" ] && [ -z "${{{SHARD_VAR}:-}}" ]; then',
        f'  echo "eval.sbatch: submit it with sbatch (it is an array job), or set {SHARD_VAR} to run one {"cell" if sweep else "shard"} here" >&2',
        "  exit 2",
        "fi",
        f"# The array task id is the {'cell' if sweep else 'shard'} index, so `sbatch --array=3,7` reruns exactly "
        f"{'cells' if sweep else 'shards'} 3 and 7.",
        f"idx=${{SLURM_ARRAY_TASK_ID:-${SHARD_VAR}}}",
        'case "$idx" in',
        f"  ''|*[!0-9]*) echo \"eval.sbatch: {'cell' if sweep else 'shard'} index '$idx' is not a number 0..{cells - 1}\" >&2; exit 2 ;;",
        "esac",
        f"export {SHARD_VAR}=$idx NEL_TOTAL_SHARDS={cells}",
        *([cell[0]] if sweep else []),
        f'echo "shardeval: SLURM job ${{SLURM_JOB_ID:-none}} (array ${{SLURM_ARRAY_JOB_ID:-none}}_'
        f'${{SLURM_ARRAY_TASK_ID:-none}}, restart ${{SLURM_RESTART_COUNT:-0}}) on $(hostname): {cell[-1]}" >&2',
        *_environment(cluster),
        *run_and_stop_in_time(shell_line([*command, "run", *args]), cluster),
        "",
    ]
    return "\n".join(lines)


def free_port_overrides(config: Config) -> list[str]:
    """`-O` overrides that give each task's managed services a free port (as each service says,
    port_override()), so two tasks on one node never collide on a fixed one."""
    services = config.used_services().items()
    return [f"services.{name}.{key}={value}" for name, s in services for key, value in (s.port_override() or {}).items()]


def stop_before_limit(config: Config, cluster: SlurmClusterConfig) -> int:
    """Seconds before the time limit at which the batch shell is told to stop the shard."""
    seconds = math.ceil(config.output.drain_timeout_s + cluster.stop_margin_s)
    if seconds > 65535:  # SLURM keeps the signal time in 16 bits
        raise UsageError(
            f"output.drain_timeout_s + cluster.stop_margin_s = {seconds} s: SLURM's --signal takes at most 65535 s; lower them"
        )
    return seconds


def run_and_stop_in_time(run_line: str, cluster: SlurmClusterConfig) -> list[str]:
    """The shard runs as a child of the batch shell, which alone receives the early USR1
    (`--signal=B:`) and turns it into SIGTERM for the shard only: the shard drains, then stops the
    model server it started, instead of SLURM killing both at once at the limit. A TERM or INT sent
    to the batch shell (`scancel -b`) is passed on the same way. With `requeue_on_timeout`, a shard
    stopped by the early signal puts its task back in the queue, where it resumes."""
    if cluster.requeue_on_timeout and not cluster.requeue:
        raise UsageError(
            f"cluster.requeue_on_timeout: {cluster.requeue_on_timeout} needs cluster.requeue: true "
            "(a --no-requeue job can never be requeued); set one of them"
        )
    lines = [
        "# Near the time limit SLURM sends USR1 to this shell alone (--signal=B:USR1@…); it stops the shard",
        "# with SIGTERM, which drains requests in flight, then stops the services it started.",
        "pid=''",
        "timelimit=0",
        'stop() { [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || true; }',
        "trap 'timelimit=1; echo \"shardeval: time limit near: stopping the shard so it drains\" >&2; stop' USR1",
        "trap stop TERM INT",
        f"{run_line} &",
        "pid=$!",
        'while kill -0 "$pid" 2>/dev/null; do wait "$pid" || true; done',
        'rc=0; wait "$pid" || rc=$?',
    ]
    if cluster.requeue_on_timeout:
        limit = cluster.requeue_on_timeout
        task = "${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}${SLURM_ARRAY_TASK_ID:+_$SLURM_ARRAY_TASK_ID}"
        lines += [
            'if [ "$timelimit" = 1 ] && [ -n "${SLURM_JOB_ID:-}" ]; then',
            f'  if [ "${{SLURM_RESTART_COUNT:-0}}" -lt {limit} ]; then',
            f'    echo "shardeval: requeue $((${{SLURM_RESTART_COUNT:-0}} + 1)) of {limit} (cluster.requeue_on_timeout): '
            'the task goes back in the queue and resumes" >&2',
            f'    scontrol requeue "{task}" || echo "shardeval: scontrol requeue failed; rerun with sbatch --array=$idx" >&2',
            "  else",
            f'    echo "shardeval: not requeued: {limit} requeue(s) used (cluster.requeue_on_timeout); rerun with sbatch --array=$idx" >&2',
            "  fi",
            "fi",
        ]
    lines.append('exit "$rc"')
    return lines


def render_merge(cluster: SlurmClusterConfig, pool: Pool, command: list[str], root: str, cwd: str, export: bool = False) -> str:
    """merge.sbatch; with `export` (the config has an `export:` list) the merge then exports to
    those trackers (`shardeval merge --export`), reading the list from the shards' manifests."""
    logs = os.path.join(slurm_path(root), "logs", "merge-%j")
    one_task = ["#SBATCH --nodes=1", "#SBATCH --ntasks=1"]
    partition = cluster.merge_partition or cluster.partition or pool.partition
    lines = [
        "#!/bin/bash",
        f"# Generated by shardeval {__version__} (cluster.type: slurm): merge the shards under {comment(root)}.",
        "# Submitted with --dependency=afterany:<array job id>; run it again any time (merge is idempotent):",
        "#   sbatch merge.sbatch   or   shardeval merge <root>",
        f"#SBATCH --job-name={sbatch_value(cluster.job_name + '-merge', 'cluster.job_name')}",
        *_common_head(cluster, "merge_walltime", partition, cwd, one_task, logs),
        "",
        "set -eo pipefail",
        *_environment(cluster),
        f"exec {shell_line([*command, 'merge', root, *(['--export'] if export else [])])}",
        "",
    ]
    return "\n".join(lines)


def check_no_secrets(files: dict[str, str], config: Config) -> None:
    """Refuse to write a script that would contain a secret's value (named, never shown): the value
    of an api_key_env target or of a secret-looking variable."""
    names = {s.api_key_env for s in config.services.values() if s.api_key_env}
    names |= {k for k in os.environ if _SECRET_NAME.search(k)}
    for name in sorted(names):
        value = os.environ.get(name, "")
        for file, text in files.items():
            if is_secret(value) and value in text:  # a shorter value is no secret (shardeval.redact)
                raise UsageError(
                    f"refusing to write {file}: it would contain the value of ${name}, and generated scripts never hold "
                    "secrets; keep it in the submitting environment (sbatch passes it on) and refer to it by name "
                    "(api_key_env, or ${" + name + "} in the config file, which expands on the node)"
                )
