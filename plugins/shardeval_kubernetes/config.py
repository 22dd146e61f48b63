"""The `cluster:` keys of `type: kubernetes`: one Indexed Job (a pod per shard) and a merge Job.

Every key maps onto a field of the rendered manifests (docs/kubernetes.md has the table). Names of
derived objects (ConfigMap, PVC, ServiceAccount, merge Job) default to `<name>-…`, so two
evaluations in one namespace only need different `name`s.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from shardeval.api.orchestrator import ClusterConfig

NonNegative = Annotated[int, msgspec.Meta(ge=0)]
Positive = Annotated[int, msgspec.Meta(ge=1)]
Quantity = str | NonNegative | Annotated[float, msgspec.Meta(ge=0)]  # a Kubernetes quantity: "500m", "8Gi", 2


class _Section(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """Unknown keys are errors (with the closest valid key), like every config section."""


class Resources(_Section):
    """Container resources. `gpus` is shorthand for `limits: {<gpu_resource>: N}`."""

    requests: dict[str, Quantity] = {}
    limits: dict[str, Quantity] = {}
    gpus: NonNegative | None = None
    gpu_resource: str = "nvidia.com/gpu"  # e.g. amd.com/gpu


class Pvc(_Section):
    """Where shards write (`/results` in every pod); the merge reads the same claim.

    Shard pods run on different nodes at once, so the claim must be ReadWriteMany (NFS, CephFS,
    Filestore, EFS, …) unless parallelism is 1. `create: false` uses an existing claim `name`.
    """

    name: str | None = None  # default: <name>-results
    create: bool = True
    size: str = "10Gi"
    storage_class: str | None = None  # None: the cluster's default StorageClass
    access_modes: list[Literal["ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod", "ReadOnlyMany"]] = msgspec.field(
        default_factory=lambda: ["ReadWriteMany"]
    )


class SecretKey(_Section):
    """A key of a Kubernetes Secret, exposed to the pod as an environment variable."""

    secret: str
    key: str


class Toleration(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True, rename="camel"):
    """A pod toleration, spelled as in Kubernetes (`tolerationSeconds`), copied into the pod spec."""

    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: NonNegative | None = None


class SecurityContext(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True, rename="camel"):
    """The shardeval containers' securityContext (shard and merge), spelled as in Kubernetes.

    The image from build/Dockerfile writes nothing at start, so `readOnlyRootFilesystem: true`
    with any `runAsUser` works (tests/test_docker.py runs it so)."""

    run_as_user: NonNegative | None = None
    run_as_group: NonNegative | None = None
    run_as_non_root: bool | None = None
    read_only_root_filesystem: bool | None = None
    allow_privilege_escalation: bool | None = None


class MergeJob(_Section):
    """The Job that runs `shardeval merge /results` once the Indexed Job is Complete.

    An initContainer (`kubectl_image`) runs `kubectl wait --for=condition=complete job/<name>`
    with a ServiceAccount allowed to get/list/watch Jobs in the namespace (rendered too).
    """

    enabled: bool = True
    kubectl_image: str = "registry.k8s.io/kubectl:v1.33.0"  # shell-free; kubectl is on PATH
    wait_timeout: str = "24h"  # kubectl's --timeout: how long the merge pod waits for the shards
    backoff_limit: NonNegative = 4  # retries of the merge pod (e.g. applied before the Job exists)
    args: list[str] = []  # extra `shardeval merge` flags, e.g. ["--errors-as-wrong"]
    resources: Resources = msgspec.field(default_factory=Resources)


class Upload(_Section):
    """How a launch puts the run's preparation (made on the submitting host, docs/offline.md) onto
    the results claim before the Jobs exist: a helper pod mounts the claim, `kubectl exec` unpacks
    the preparation there (a tar stream through the API server), the pod is deleted, then the Jobs
    are applied. A claim that holds this very preparation already gets nothing again."""

    image: str | None = None  # default: `image`; it needs sh, tar and sleep (every Debian, Ubuntu or Alpine image)
    wait_timeout: str = "5m"  # kubectl wait --timeout: how long the helper pod may take to start (pull, attach)


class KubernetesClusterConfig(ClusterConfig, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """`cluster:` for Kubernetes. `shards` (inherited, default 1) is the Indexed Job's `completions`."""

    type: str = "kubernetes"
    name: str = "shardeval"  # the Indexed Job; a DNS-1123 label of at most 57 characters
    namespace: str = "default"
    image: str | None = None  # default: shardeval:<version>, built from build/Dockerfile
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    image_pull_secrets: list[str] = []
    # how the image runs shardeval, e.g. ["python3", "/opt/shardeval.pyz"] for the zipapp
    command: list[str] = msgspec.field(default_factory=lambda: ["shardeval"])
    parallelism: Positive | None = None  # pods at once; default: all shards
    backoff_limit_per_index: NonNegative = 2  # retries of one shard's pod before that index fails
    max_failed_indexes: NonNegative | None = None  # fail the whole Job once more indexes failed
    active_deadline_seconds: Positive | None = None
    ttl_seconds_after_finished: NonNegative | None = None  # let Kubernetes delete finished Jobs
    pvc: Pvc = msgspec.field(default_factory=Pvc)
    config_map: str | None = None  # default: <name>-config (holds the config file, mounted at /config)
    api_key_secret: str = "shardeval-api-keys"  # Secret holding each service's api_key_env, key = the variable name
    secret_env: dict[str, SecretKey] = {}  # further variables from Secrets, e.g. HF_TOKEN
    env: dict[str, str] = {}  # plain variables for the shard pods; never secrets
    resources: Resources = msgspec.field(default_factory=Resources)
    # A memory-backed /dev/shm for the shard pods (the container default, 64 MiB, crashes a
    # tensor-parallel vLLM). "auto": 2Gi per GPU, at least 8Gi, when a service uses 2 or more GPUs;
    # a quantity ("16Gi") always; null never. It counts against the pod's memory limit.
    shm_size: str | None = "auto"
    node_selector: dict[str, str] = {}
    tolerations: list[Toleration] = []
    service_account: str | None = None  # for the shard pods; default: none, and no API token mounted
    labels: dict[str, str] = {}  # added to every object and pod
    annotations: dict[str, str] = {}  # added to the shard pods
    security_context: SecurityContext | None = None  # of the shard and merge containers
    kube_context: str | None = None  # `kubectl --context` when applying
    merge: MergeJob = msgspec.field(default_factory=MergeJob)
    upload: Upload = msgspec.field(default_factory=Upload)
