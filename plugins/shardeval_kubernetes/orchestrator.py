"""`cluster.type: kubernetes`: write the manifests, then `kubectl apply` them (or only print them).

The pods run `shardeval run /config/config.yaml -o /results/shard_$(NEL_SHARD_IDX)` with
NEL_SHARD_IDX from their completion index, so inside the cluster every pod evaluates exactly its
shard and never re-submits the Job (see shardeval.launch).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shardeval.api import LaunchRequest


def submit(request: LaunchRequest) -> int:
    """Render and write `<output root>/k8s/eval.yaml`; print it (--dry-run) or apply it."""
    from shardeval.api import UsageError
    from shardeval_kubernetes.render import render

    text, warnings = render(request)
    for warning in warnings:
        print(f"shardeval: warning: {warning}", file=sys.stderr)
    path = request.write("k8s", {"eval.yaml": text})["eval.yaml"]
    cluster = request.config.cluster
    if request.dry_run:
        print(text, end="")
        print(f"shardeval: wrote {path}; apply it with: kubectl apply -f {shlex.quote(path)}", file=sys.stderr)
        return 0
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise UsageError(
            f"kubectl is not on PATH; the manifests are written to {path}: apply them with "
            f"`kubectl apply -f {path}` where kubectl reaches the cluster (or use --dry-run to only render them)"
        )
    argv = [kubectl, *(["--context", cluster.kube_context] if cluster.kube_context else []), "apply", "-f", path]
    print(f"shardeval: {shlex.join(['kubectl', *argv[1:]])}", file=sys.stderr)
    code = subprocess.run(argv).returncode
    name, namespace = cluster.name, cluster.namespace
    if code != 0:
        print(
            f"shardeval: kubectl apply failed (exit {code}). A Job's pod template cannot change once created: "
            f"`kubectl delete job -n {namespace} {name} {name}-merge` and run again (the results volume is kept "
            "and shards resume)",
            file=sys.stderr,
        )
        return code
    print(
        f"shardeval: submitted {request.total} shards as Job {namespace}/{name}. Follow: "
        f"kubectl get job -n {namespace} {name} -w; report: kubectl logs -n {namespace} job/{name}-merge -c merge -f",
        file=sys.stderr,
    )
    return 0
