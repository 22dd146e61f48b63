"""`cluster.type: kubernetes`: render one evaluation as Kubernetes objects (plain dicts, dumped as
one multi-document YAML at `<output root>/k8s/eval.yaml`), then `kubectl apply` them (or only
print them, --dry-run).

What gets rendered, in apply order:
  ConfigMap <name>-config      the config file, verbatim, mounted read-only at /config
  PersistentVolumeClaim        the results volume, mounted at /results by every pod (unless create: false)
  ServiceAccount/Role/RoleBinding <name>-merge   lets the merge pod get/list/watch Jobs
  Job <name>                   Indexed: one pod per shard, NEL_SHARD_IDX from the completion index
  Job <name>-merge             initContainer `kubectl wait --for=condition=complete job/<name>`,
                               then `shardeval merge /results`
and, in `<output root>/k8s/upload.yaml`, the Pod <name>-upload through which a launch puts the run's
preparation (made on the submitting host, docs/offline.md) onto the claim before it applies the
Jobs (shardeval_kubernetes.upload): the pods and the merge then read /results/prepared.

The pods run `shardeval run /config/config.yaml -o /results/shard_$(NEL_SHARD_IDX)`, so inside the
cluster every pod evaluates exactly its shard and never re-submits the Job (see shardeval.launch).
A sweep is one Indexed Job over its (model, shard) cells, each pod `run … --sweep-services <models>
--shard $(NEL_SHARD_IDX)/<models × shards> -o /results`; models whose pods differ (the GPUs their
services declare) get one Indexed Job each, `<name>-g0`, `<name>-g1`, …, all awaited by the merge.
The config file is shipped as written (not expanded): `${VAR}` references expand in the pod from
its environment, so nothing from the submitting shell's environment, secrets included, lands in
a manifest. API keys reach the pods only through `secretKeyRef`.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shardeval.api.orchestrator import ENV_NAME, EXIT_WITH_ERRORS, Orchestrator, dump_yaml, escape_dollars as escape
from shardeval.api.plugin import UsageError

if TYPE_CHECKING:
    from shardeval.api.orchestrator import Config, LaunchRequest
    from shardeval_kubernetes.config import KubernetesClusterConfig, Resources

EVAL_FILE = "eval.yaml"
UPLOAD_FILE = "upload.yaml"
CONFIG_DIR = "/config"
CONFIG_FILE = "config.yaml"
RESULTS_DIR = "/results"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
SHARD_CONTAINER = "shard"
MERGE_CONTAINER = "merge"
WAIT_CONTAINER = "wait-for-shards"
UPLOAD_CONTAINER = "upload"
UPLOAD_SECONDS = 3600  # the helper pod's life at most (activeDeadlineSeconds): a launch that stopped leaves nothing running
CONFIGMAP_LIMIT = 1024 * 1024  # bytes; the API server refuses larger ConfigMaps
RESULTS_MOUNT = {"name": "results", "mountPath": RESULTS_DIR}
API_VERSIONS = {
    "ConfigMap": "v1",
    "PersistentVolumeClaim": "v1",
    "Pod": "v1",
    "ServiceAccount": "v1",
    "Job": "batch/v1",
    "Role": "rbac.authorization.k8s.io/v1",
    "RoleBinding": "rbac.authorization.k8s.io/v1",
}

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]+")


@dataclass(frozen=True)
class ShardJob:
    """One Indexed Job: the shards of a run, or the cells of some models of a sweep."""

    name: str
    completions: int
    args: list[str]  # the pod's `run …` arguments
    gpus: int  # the most any service of its models declares (gpus())


def shard_jobs(request: LaunchRequest, cluster: KubernetesClusterConfig) -> list[ShardJob]:
    """The run's Indexed Job, or a sweep's: one, or one per pod shape (the GPUs the models'
    services declare), models kept in sweep order."""
    config = f"{CONFIG_DIR}/{CONFIG_FILE}"
    if request.sweep is None:
        return [ShardJob(cluster.name, request.total, shard_args(request), _gpus([request.config]))]
    groups: dict[int, list[str]] = {}
    for name in request.sweep.services:
        groups.setdefault(_gpus([request.sweep.configs[name]]), []).append(name)
    return [
        ShardJob(
            cluster.name if len(groups) == 1 else f"{cluster.name}-g{k}",
            len(models) * request.total,
            ["run", *request.indexed_args("$(NEL_SHARD_IDX)", models, RESULTS_DIR, config_path=config, escape=escape)],
            gpus,
        )
        for k, (gpus, models) in enumerate(groups.items())
    ]


def _gpus(configs: list[Config]) -> int:
    return max((service.gpus() for config in configs for service in config.used_services().values()), default=0)


class KubernetesOrchestrator(Orchestrator):
    """Renders the objects and applies them with kubectl: the cluster runs the pods and the merge
    Job, so it does not wait, and `--fresh` travels to the pods."""

    waits = False
    fresh_on_launcher = False
    results_on_launcher = False  # the pods write the results claim, which this machine does not see

    def plan(self) -> None:
        """Render and write `<output root>/k8s/eval.yaml` and `upload.yaml` (also in a dry run),
        after the warnings."""
        self.text, warnings = render(self.request)
        for warning in warnings:
            print(f"shardeval: warning: {warning}", file=sys.stderr)
        paths = self.request.write("k8s", {EVAL_FILE: self.text, UPLOAD_FILE: render_upload(self.request)})
        self.path, self.upload_path = paths[EVAL_FILE], paths[UPLOAD_FILE]
        if not self.request.dry_run and shutil.which("kubectl") is None:  # before the launch prepares anything
            raise UsageError(
                f"kubectl is not on PATH; the manifests are written to {self.path}: apply them with "
                f"`kubectl apply -f {self.path}` where kubectl reaches the cluster (or use --dry-run to only render them)"
            )

    def dry_run(self) -> int:
        print(self.text, end="")
        print(f"shardeval: wrote {self.path}; apply it with: kubectl apply -f {shlex.quote(self.path)}", file=sys.stderr)
        print(
            f"shardeval: for nodes without internet, `shardeval run` without --dry-run first prepares the run here and puts "
            f"the preparation on the claim through the pod of {self.upload_path} (its header says how by hand)",
            file=sys.stderr,
        )
        return 0

    def submit(self) -> int:
        """The run's preparation onto the claim first (the launch made it on this machine; the
        pods cannot see it here), then `kubectl apply`; its exit code, and what to do next."""
        from shardeval.api.orchestrator import portable_preparation
        from shardeval_kubernetes.upload import Target, upload_preparation

        request, path = self.request, self.path
        cluster = kubernetes_cluster(request)
        kubectl = shutil.which("kubectl")
        assert kubectl is not None  # plan() refused the launch without it
        base = [kubectl, *(["--context", cluster.kube_context] if cluster.kube_context else [])]
        shipped = portable_preparation(request.output_root)
        if shipped is not None:
            names = object_names(cluster)
            target = Target(
                cluster.namespace,
                names["upload"],
                UPLOAD_CONTAINER,
                names["pvc"],
                RESULTS_DIR,
                cluster.pvc.create,
                cluster.upload.wait_timeout,
            )
            if (code := upload_preparation(base, target, path, self.upload_path, shipped)) != 0:
                return code  # no Job applied: shards that found no preparation would fetch for themselves
        argv = [*base, "apply", "-f", path]
        print(f"shardeval: {shlex.join(['kubectl', *argv[1:]])}", file=sys.stderr)
        code = subprocess.run(argv).returncode
        name, namespace = cluster.name, cluster.namespace
        jobs = " ".join(job.name for job in shard_jobs(request, cluster))
        what = f"{len(request.cells())} {'cells' if request.sweep else 'shards'}"
        if code != 0:
            said = (
                f"kubectl apply failed (exit {code}). A Job's pod template cannot change once created: "
                f"`kubectl delete job -n {namespace} {jobs} {name}-merge` and run again (the results volume is kept "
                "and shards resume)"
            )
        else:
            said = (
                f"submitted {what} as Job {namespace}/{jobs.replace(' ', ', ')}. Follow: kubectl get job -n {namespace} "
                f"{jobs} -w; report: kubectl logs -n {namespace} job/{name}-merge -c merge -f"
            )
        print(f"shardeval: {said}", file=sys.stderr)
        return code


def render(request: LaunchRequest) -> tuple[str, list[str]]:
    """All objects for one run as one multi-document YAML, and what the user should hear about
    them (printed as warnings); a bad name or a clash is a one-line UsageError."""
    import msgspec

    from shardeval import __version__

    cluster = kubernetes_cluster(request)
    names = object_names(cluster)
    jobs = shard_jobs(request, cluster)
    image = cluster.image or f"shardeval:{__version__}"
    obj = _object_maker(cluster)
    config_text = request.config_text()
    secrets = _secret_env(request, cluster)
    warnings = _warnings(request, cluster, _shard_env(cluster, jobs[0].completions, secrets))
    docs: list[dict[str, Any]] = []

    volumes: list[dict[str, Any]] = [{"name": "results", "persistentVolumeClaim": {"claimName": names["pvc"]}}]
    mounts: list[dict[str, Any]] = [RESULTS_MOUNT]
    if config_text is not None:
        if len(config_text.encode()) > CONFIGMAP_LIMIT:
            raise UsageError(
                f"{request.config_path}: {len(config_text.encode())} bytes is over the 1 MiB a ConfigMap holds; "
                "move large data (prompts, datasets) into the image or onto the results volume"
            )
        docs.append(obj("ConfigMap", names["config_map"], "config", data={CONFIG_FILE: config_text}))
        volumes.insert(0, {"name": "config", "configMap": {"name": names["config_map"]}})
        mounts.insert(0, {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True})

    if cluster.pvc.create:
        pvc_spec = {
            "accessModes": list(cluster.pvc.access_modes),
            "resources": {"requests": {"storage": cluster.pvc.size}},
            **_present(storageClassName=cluster.pvc.storage_class),
        }
        docs.append(obj("PersistentVolumeClaim", names["pvc"], "results", spec=pvc_spec))

    pull_secrets = [{"name": s} for s in cluster.image_pull_secrets]
    if cluster.merge.enabled and request.merge:  # `run --no-merge` (a watcher's launch): the watcher merges
        docs += _merge_rbac(names, obj, cluster.namespace)
    for job in jobs:
        shm = shm_size(job.gpus, cluster)
        shm_volume = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm}}] if shm else []
        shm_mount = [{"name": "dshm", "mountPath": "/dev/shm"}] if shm else []
        resources = cluster.resources
        if resources.gpus is None and job.gpus:  # unset: what the services declare
            resources = msgspec.structs.replace(resources, gpus=job.gpus)
        env = _shard_env(cluster, job.completions, secrets)
        container = _container(cluster, SHARD_CONTAINER, image, job.args, env, resources, [*mounts, *shm_mount])
        docs.append(_shard_job(cluster, job, obj, container, [*volumes, *shm_volume], pull_secrets))
    if cluster.merge.enabled and request.merge:  # `run --no-merge` (a watcher's launch): the watcher merges
        docs.append(_merge_job(cluster, names, obj, image, pull_secrets, [job.name for job in jobs]))
    return dump_yaml(docs, _header(secrets, cluster.namespace)), warnings


def render_upload(request: LaunchRequest) -> str:
    """upload.yaml: the Pod a launch unpacks the run's preparation through onto the results claim
    (shardeval_kubernetes.upload). It only sleeps until `kubectl exec` has unpacked it and the
    launch deletes it, at most UPLOAD_SECONDS; it runs where and as the shard pods do (their node
    selector, tolerations, pull secrets and securityContext), so the files are theirs to read."""
    import msgspec

    from shardeval import __version__

    cluster = kubernetes_cluster(request)
    names = object_names(cluster)
    container = {
        "name": UPLOAD_CONTAINER,
        "image": cluster.upload.image or cluster.image or f"shardeval:{__version__}",
        **_present(imagePullPolicy=cluster.image_pull_policy),
        "command": ["sleep", str(UPLOAD_SECONDS)],
        **_present(securityContext=msgspec.to_builtins(cluster.security_context)),
        "volumeMounts": [RESULTS_MOUNT],
    }
    pod = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": UPLOAD_SECONDS,
        "terminationGracePeriodSeconds": 0,  # `sleep` as PID 1 ignores SIGTERM: deleted at once instead of after 30 s
        "automountServiceAccountToken": False,
        **_present(
            nodeSelector=dict(cluster.node_selector),
            tolerations=msgspec.to_builtins(cluster.tolerations),
            imagePullSecrets=[{"name": s} for s in cluster.image_pull_secrets],
        ),
        "containers": [container],
        "volumes": [{"name": "results", "persistentVolumeClaim": {"claimName": names["pvc"]}}],
    }
    header = (
        "# Rendered by shardeval (cluster.type: kubernetes): the pod through which `shardeval run` puts the run's\n"
        "# preparation (made on the submitting host) onto the results claim, before it applies eval.yaml. By hand:\n"
        f"#   shardeval prepare CONFIG -o ROOT && kubectl apply -f upload.yaml && kubectl wait -n {cluster.namespace} "
        f"--for=condition=Ready pod/{names['upload']}\n"
        f"#   tar -C ROOT -c prepared | kubectl exec -i -n {cluster.namespace} {names['upload']} -c {UPLOAD_CONTAINER} "
        f"-- tar -x -f - -C {RESULTS_DIR}\n"
        f"#   kubectl delete pod -n {cluster.namespace} {names['upload']}; then kubectl apply -f eval.yaml\n"
    )
    return dump_yaml([_object_maker(cluster)("Pod", names["upload"], UPLOAD_CONTAINER, spec=pod)], header)


def _object_maker(cluster: KubernetesClusterConfig) -> Any:
    """obj(kind, name, component, **body): a namespaced object with the run's labels."""
    base_labels = {
        "app.kubernetes.io/name": "shardeval",
        "app.kubernetes.io/instance": cluster.name,
        "app.kubernetes.io/managed-by": "shardeval",
        **cluster.labels,
    }

    def obj(kind: str, name: str, component: str, **body: Any) -> dict[str, Any]:
        labels = {**base_labels, "app.kubernetes.io/component": component}
        metadata = {"name": name, "namespace": cluster.namespace, "labels": labels}
        return {"apiVersion": API_VERSIONS[kind], "kind": kind, "metadata": metadata, **body}

    return obj


def kubernetes_cluster(request: LaunchRequest) -> KubernetesClusterConfig:
    """The request's `cluster:` section, as this plugin's Struct decoded it."""
    from shardeval_kubernetes.config import KubernetesClusterConfig

    cluster = request.config.cluster
    if not isinstance(cluster, KubernetesClusterConfig):  # decoded by another plugin's Struct
        raise TypeError(f"expected KubernetesClusterConfig, got {type(cluster).__name__}")
    return cluster


def _shard_job(
    cluster: KubernetesClusterConfig,
    job: ShardJob,
    obj: Any,
    container: dict[str, Any],
    volumes: list[dict[str, Any]],
    pull_secrets: list[dict[str, str]],
) -> dict[str, Any]:
    """One Indexed Job: a pod per completion index, NEL_SHARD_IDX from the index."""
    import msgspec

    pod = {
        "restartPolicy": "Never",
        **_present(
            serviceAccountName=cluster.service_account or None,
            # a shard never talks to the API server
            automountServiceAccountToken=None if cluster.service_account else False,
            nodeSelector=dict(cluster.node_selector),
            tolerations=msgspec.to_builtins(cluster.tolerations),
            imagePullSecrets=pull_secrets,
        ),
        "containers": [container],
        "volumes": volumes,
    }
    job_spec = {
        "completionMode": "Indexed",
        "completions": job.completions,
        "parallelism": cluster.parallelism or job.completions,
        "backoffLimitPerIndex": cluster.backoff_limit_per_index,
        **_present(maxFailedIndexes=cluster.max_failed_indexes),
        # Exit 2 is a user mistake (bad config or variable): retrying the pod cannot fix it. A node
        # drain or preemption is not the shard's fault and does not count against its retries.
        "podFailurePolicy": {
            "rules": [
                {"action": "FailIndex", "onExitCodes": {"containerName": SHARD_CONTAINER, "operator": "In", "values": [2]}},
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            ]
        },
        **_present(
            activeDeadlineSeconds=cluster.active_deadline_seconds,
            ttlSecondsAfterFinished=cluster.ttl_seconds_after_finished,
        ),
    }
    shard_job = obj("Job", job.name, "shard", spec=job_spec)
    template_meta = {"labels": shard_job["metadata"]["labels"], **_present(annotations=dict(cluster.annotations))}
    job_spec["template"] = {"metadata": template_meta, "spec": pod}
    return shard_job


def shm_size(gpus: int, cluster: KubernetesClusterConfig) -> str | None:
    """The shard pods' /dev/shm size (see KubernetesClusterConfig.shm_size), from the most GPUs
    one of their services says it uses."""
    if cluster.shm_size != "auto":
        return cluster.shm_size
    return f"{max(8, 2 * gpus)}Gi" if gpus >= 2 else None


def shard_args(request: LaunchRequest) -> list[str]:
    """`run` arguments of every shard pod: the arguments LaunchRequest.shard_args builds, minus
    `--shard` (the pod's shard comes from NEL_SHARD_IDX / NEL_TOTAL_SHARDS, the NeMo Evaluator
    contract), with the config at /config and each shard's own directory on the volume."""
    return ["run", *request.run_args(f"{CONFIG_DIR}/{CONFIG_FILE}", escape), "-o", f"{RESULTS_DIR}/shard_$(NEL_SHARD_IDX)"]


def object_names(cluster: KubernetesClusterConfig) -> dict[str, str]:
    if len(cluster.name) > 57 or not _LABEL.fullmatch(cluster.name):
        raise UsageError(
            f"cluster.name {cluster.name!r}: a Job name must be lowercase letters, digits and '-', start and end "
            "with a letter or digit, at most 57 characters (the merge Job adds '-merge'), e.g. gsm8k-llama70b"
        )
    if len(cluster.namespace) > 63 or not _LABEL.fullmatch(cluster.namespace):
        raise UsageError(f"cluster.namespace {cluster.namespace!r}: not a namespace name (lowercase letters, digits, '-')")
    names = {
        "config_map": cluster.config_map or f"{cluster.name}-config",
        "pvc": cluster.pvc.name or f"{cluster.name}-results",
        "merge": f"{cluster.name}-merge",
        "upload": f"{cluster.name}-upload",
        "api_key_secret": cluster.api_key_secret,
    }
    subjects = {"config_map": "cluster.config_map", "pvc": "cluster.pvc.name", "api_key_secret": "cluster.api_key_secret"}
    for key, where in subjects.items():
        if len(names[key]) > 253 or not _SUBDOMAIN.fullmatch(names[key]):
            raise UsageError(f"{where} {names[key]!r}: not a Kubernetes object name (lowercase letters, digits, '-', '.')")
    for var, ref in cluster.secret_env.items():
        if not _SUBDOMAIN.fullmatch(ref.secret):
            raise UsageError(f"cluster.secret_env.{var}.secret {ref.secret!r}: not a Kubernetes Secret name")
    return names


def _secret_env(request: LaunchRequest, cluster: KubernetesClusterConfig) -> dict[str, tuple[str, str]]:
    """Variable -> (Secret, key): every service's api_key_env (key = the variable's name in
    cluster.api_key_secret), then cluster.secret_env. Only names and references, never values."""
    refs: dict[str, tuple[str, str]] = {}
    for name, service in sorted(request.config.services.items()):
        var = service.api_key_env
        if not var:
            continue
        if not ENV_NAME.fullmatch(var) or not _SECRET_KEY.fullmatch(var):
            raise UsageError(f"services.{name}.api_key_env {var!r}: not an environment variable name, e.g. OPENAI_API_KEY")
        refs.setdefault(var, (cluster.api_key_secret, var))
    for var, ref in cluster.secret_env.items():
        if not ENV_NAME.fullmatch(var):
            raise UsageError(f"cluster.secret_env: {var!r} is not an environment variable name")
        if not _SECRET_KEY.fullmatch(ref.key):
            raise UsageError(f"cluster.secret_env.{var}.key {ref.key!r}: not a Secret key (letters, digits, '-', '_', '.')")
        refs[var] = (ref.secret, ref.key)
    return refs


def _header(refs: dict[str, tuple[str, str]], namespace: str) -> str:
    """How to apply the file, and to create each Secret the pods read (by variable, never a value)."""
    by_secret: dict[str, dict[str, str]] = {}  # Secret name -> {key: the variable the pods read it into}
    for var, (secret, key) in refs.items():
        by_secret.setdefault(secret, {}).setdefault(key, var)
    lines = ["# Rendered by shardeval (cluster.type: kubernetes). Apply: kubectl apply -f <this file>"]
    for secret, keys in by_secret.items():
        literals = " ".join(f'--from-literal={key}="${var}"' for key, var in keys.items())
        lines += [
            f"# The pods read {', '.join(keys.values())} from Secret {secret}; create it with:",
            f"#   kubectl create secret generic {secret} -n {namespace} {literals}",
        ]
    return "\n".join(lines) + "\n"


def _shard_env(cluster: KubernetesClusterConfig, total: int, secrets: dict[str, tuple[str, str]]) -> list[dict[str, Any]]:
    index = {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}}
    env: list[dict[str, Any]] = [{"name": "NEL_SHARD_IDX", "valueFrom": index}, {"name": "NEL_TOTAL_SHARDS", "value": str(total)}]
    reserved = {"NEL_SHARD_IDX", "NEL_TOTAL_SHARDS", "JOB_COMPLETION_INDEX"}
    for var, value in cluster.env.items():
        if not ENV_NAME.fullmatch(var):
            raise UsageError(f"cluster.env: {var!r} is not an environment variable name")
        if var in reserved or var in secrets:
            what = "set by shardeval from the completion index" if var in reserved else "read from a Secret"
            raise UsageError(f"cluster.env.{var}: {var} is {what}; remove it from cluster.env")
        env.append({"name": var, "value": escape(str(value))})
    for var, (secret, key) in secrets.items():
        if var in reserved:
            raise UsageError(f"{var} is set by shardeval from the completion index; it cannot come from a Secret")
        env.append({"name": var, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
    return env


def _present(**fields: Any) -> dict[str, Any]:
    """The optional fields that are set: None and empty ones stay out of a manifest."""
    return {key: value for key, value in fields.items() if value is not None and value != {} and value != []}


def _container(
    cluster: KubernetesClusterConfig,
    name: str,
    image: str,
    args: list[str],
    env: list[dict[str, Any]] | None,
    resources: Resources,
    mounts: list[dict[str, Any]],
) -> dict[str, Any]:
    """A shardeval container (shard or merge): how the image runs shardeval, its resources and
    the cluster's securityContext."""
    import msgspec

    limits = {k: str(v) for k, v in resources.limits.items()}
    if resources.gpus is not None:  # extended resources: requests default to limits
        limits[resources.gpu_resource] = str(resources.gpus)
    return {
        "name": name,
        "image": image,
        **_present(imagePullPolicy=cluster.image_pull_policy),
        "command": [escape(c) for c in cluster.command],
        "args": args,
        **_present(
            env=env,
            resources=_present(requests={k: str(v) for k, v in resources.requests.items()}, limits=limits),
            securityContext=msgspec.to_builtins(cluster.security_context),
        ),
        "volumeMounts": mounts,
    }


def _merge_rbac(names: dict[str, str], obj: Any, namespace: str) -> list[dict[str, Any]]:
    """The merge pod's identity: allowed to watch Jobs (what `kubectl wait` needs), nothing else."""
    account = names["merge"]
    rules = [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "watch"]}]
    return [
        obj("ServiceAccount", account, "merge"),
        obj("Role", account, "merge", rules=rules),
        obj(
            "RoleBinding",
            account,
            "merge",
            roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
            subjects=[{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        ),
    ]


def _merge_job(
    cluster: KubernetesClusterConfig,
    names: dict[str, str],
    obj: Any,
    image: str,
    pull_secrets: list[dict[str, str]],
    jobs: list[str],
) -> dict[str, Any]:
    """Waits on every Indexed Job's Complete condition (not on files), then merges the volume (a
    sweep root: every model)."""
    merge = cluster.merge
    wait = {
        "name": WAIT_CONTAINER,
        "image": merge.kubectl_image,
        "command": [
            "kubectl",
            "wait",
            "--for=condition=complete",
            *(f"job/{job}" for job in jobs),
            f"--namespace={cluster.namespace}",
            f"--timeout={merge.wait_timeout}",
        ],
    }
    args = ["merge", RESULTS_DIR, *(escape(a) for a in merge.args)]
    pod = {
        "restartPolicy": "Never",
        "serviceAccountName": names["merge"],
        **_present(imagePullSecrets=pull_secrets),
        "initContainers": [wait],
        "containers": [_container(cluster, MERGE_CONTAINER, image, args, None, merge.resources, [RESULTS_MOUNT])],
        "volumes": [{"name": "results", "persistentVolumeClaim": {"claimName": names["pvc"]}}],
    }
    job = obj("Job", names["merge"], "merge")
    spec = {
        "backoffLimit": merge.backoff_limit,
        # A merge that ran and found the run not complete (3) or was given a bad argument (2) would
        # say the same again: fail the Job at once rather than retry it backoffLimit times.
        "podFailurePolicy": {
            "rules": [
                {"action": "FailJob", "onExitCodes": {"containerName": MERGE_CONTAINER, "operator": "In", "values": [2, EXIT_WITH_ERRORS]}},
            ]
        },
        **_present(ttlSecondsAfterFinished=cluster.ttl_seconds_after_finished),
    }
    spec["template"] = {"metadata": {"labels": job["metadata"]["labels"]}, "spec": pod}
    return {**job, "spec": spec}


def _warnings(request: LaunchRequest, cluster: KubernetesClusterConfig, env: list[dict[str, Any]]) -> list[str]:
    warnings = []
    if cluster.shards is None:
        warnings.append(
            "cluster.shards is not set: one shard per model"
            if request.sweep
            else "cluster.shards is not set: rendering an Indexed Job with 1 completion (one shard)"
        )
    missing = sorted(request.config_variables(defaulted=False) - {e["name"] for e in env} - {"JOB_COMPLETION_INDEX"})
    if missing:
        warnings.append(
            f"{request.config_path} uses ${{{missing[0]}}}"
            + (f" (and {', '.join(missing[1:])})" if len(missing) > 1 else "")
            + ", which the pods do not define: the config expands in the pod, so set it in cluster.env "
            "(plain values) or cluster.secret_env, or give a default with ${VAR:-default}"
        )
    context = cluster.security_context
    if context is not None and context.run_as_non_root and context.run_as_user is None and cluster.image is None:
        warnings.append(
            "cluster.security_context.runAsNonRoot without runAsUser: the image from build/Dockerfile runs as root, "
            "so the kubelet would refuse to start it; set runAsUser (any uid works, e.g. 65534)"
        )
    modes = cluster.pvc.access_modes
    if (cluster.parallelism or len(request.cells())) > 1 and "ReadWriteMany" not in modes:
        warnings.append(
            f"cluster.pvc.access_modes {list(modes)}: shard pods on different nodes mount the results volume "
            "at once, which needs ReadWriteMany"
        )
    return warnings
