"""`cluster.type: kubernetes`: rendered manifests checked offline, and every pod's command run for real.

No kube-apiserver or kubelet can run on these machines (shared/RECIPES.md), so:
- schema: the real `kubernetes-validate --strict -k 1.33.0` CLI (and the newest schemas it ships),
  installed by scripts/setup/k8s_compose.sh from the session fixture;
- semantics the schemas lack: `manifest_problems()` below (completionMode, restartPolicy, Indexed
  needs completions, backoffLimitPerIndex needs Indexed, secretKeyRef for keys, `$(VAR)` references
  that resolve, the merge Job's wait and RBAC, …);
- behaviour: each pod's container command runs on this machine, for every completion index, with
  the environment Kubernetes would inject, against a real simulator; then the merge Job's main
  container, and the merged scores are checked.

Stand-ins, only for what needs the API server or kubelet: the downward-API value of the
completion-index annotation and JOB_COMPLETION_INDEX (set to the index), secretKeyRef (resolved
from a dict standing in for the Secret), `$(VAR)` expansion (`kubelet_expand`, the kubelet's
rules), volume mounts (a ConfigMap's data written to a folder, a PVC as a folder: mountPaths in the
args are rewritten to those folders), the merge initContainer's `kubectl wait` (its condition,
Complete, is what running the merge only after every shard pod exited 0 means), and `kubectl
apply` (a stub kubectl on PATH that records its argv).
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

KV_VERSION = "1.33.0"
SECRET_VALUE = "sk-k8s-test-0123456789-do-not-leak"
KEY_VAR = "SHARDEVAL_K8S_TEST_KEY"
ANNOTATION_PATH = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
SHARD_VARS = ("NEL_SHARD_IDX", "NEL_TOTAL_SHARDS", "JOB_COMPLETION_INDEX", "SLURM_ARRAY_TASK_ID", "RANK", "WORLD_SIZE")

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="session")
def kubernetes_validate() -> str:
    """The real validator, installed into .venv by the project's setup script (idempotent)."""
    setup = subprocess.run(["bash", os.path.join(REPO, "scripts", "setup", "k8s_compose.sh")], capture_output=True, text=True, timeout=900)
    assert setup.returncode == 0, setup.stdout + setup.stderr
    path = os.path.join(os.path.dirname(sys.executable), "kubernetes-validate")
    assert os.access(path, os.X_OK), f"{path} missing after scripts/setup/k8s_compose.sh"
    return path


def validate(tool: str, path: Path, version: str = KV_VERSION) -> None:
    result = subprocess.run([tool, "--strict", "-k", version, str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ERROR" not in result.stdout + result.stderr


# --- rendering ---------------------------------------------------------------------------------


def api_config(url: str, shards: int = 8, n: int = 40, repeats: int = 2, cluster_extra: str = "") -> str:
    return f"""
services:
  model: {{type: api, url: "{url}", model: sim, api_key_env: {KEY_VAR}}}
benchmarks:
  - name: arith
    params: {{n: {n}}}
    repeats: {repeats}
    max_concurrent: 16
cluster:
  type: kubernetes
  name: arith-test
  namespace: evals
  shards: {shards}
{cluster_extra}
output: {{progress_interval_s: 0}}
"""


def render(tmp: Path, config_text: str | None, *args: str, env: dict[str, str] | None = None, name: str = "k8s.yaml"):
    """`shardeval run CONFIG --dry-run -o ROOT`: returns (documents, manifest path, CompletedProcess)."""
    root = tmp / "out"
    argv = ["run"]
    if config_text is not None:
        cfg = tmp / name
        cfg.write_text(config_text)
        argv.append(str(cfg))
    result = shardeval_cmd(*argv, *args, "--dry-run", "-o", str(root), env=env)
    assert result.returncode == 0, result.stderr
    path = root / "k8s" / "eval.yaml"
    assert path.read_text() == result.stdout  # what is printed is what is written
    return list(yaml.safe_load_all(path.read_text())), path, result


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d and d.get("kind") == kind]


def indexed_job(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (job,) = [j for j in by_kind(docs, "Job") if j["spec"].get("completionMode") == "Indexed"]
    return job


def merge_job(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (job,) = [j for j in by_kind(docs, "Job") if j["spec"].get("completionMode") != "Indexed"]
    return job


# --- semantic checks kubernetes-validate does not do -------------------------------------------

_VAR_REF = re.compile(r"\$\$|\$\(([^)]*)\)")
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def manifest_problems(docs: list[dict[str, Any]], secret_vars: set[str] = frozenset()) -> list[str]:
    """Rules the JSON schemas cannot express (the API server's validation, and our own contract)."""
    problems: list[str] = []
    names = {(d["kind"], d["metadata"]["name"]) for d in docs if d}
    for job in by_kind(docs, "Job"):
        name, spec = job["metadata"]["name"], job["spec"]
        pod = spec["template"]["spec"]
        where = f"Job {name}"
        if not _LABEL.fullmatch(name) or len(name) > 63:
            problems.append(f"{where}: name is not a DNS-1123 label")
        if pod.get("restartPolicy") not in ("Never", "OnFailure"):
            problems.append(f"{where}: restartPolicy must be Never or OnFailure in a Job, got {pod.get('restartPolicy')!r}")
        mode = spec.get("completionMode", "NonIndexed")
        if mode not in ("NonIndexed", "Indexed"):
            problems.append(f"{where}: completionMode {mode!r} is not NonIndexed or Indexed")
        if mode == "Indexed" and not (isinstance(spec.get("completions"), int) and spec["completions"] >= 1):
            problems.append(f"{where}: completionMode Indexed requires completions >= 1")
        for field in ("backoffLimitPerIndex", "maxFailedIndexes"):
            if field in spec and mode != "Indexed":
                problems.append(f"{where}: {field} requires completionMode Indexed")
        if "maxFailedIndexes" in spec and "backoffLimitPerIndex" not in spec:
            problems.append(f"{where}: maxFailedIndexes requires backoffLimitPerIndex")
        if ("backoffLimitPerIndex" in spec or "podFailurePolicy" in spec) and pod.get("restartPolicy") != "Never":
            problems.append(f"{where}: backoffLimitPerIndex / podFailurePolicy require restartPolicy Never")
        if spec.get("parallelism", 1) < 0 or spec.get("completions", 1) < 0:
            problems.append(f"{where}: negative parallelism or completions")
        containers = pod.get("containers", [])
        for rule in spec.get("podFailurePolicy", {}).get("rules", []):
            if rule["action"] not in ("FailJob", "FailIndex", "Ignore", "Count"):
                problems.append(f"{where}: podFailurePolicy action {rule['action']!r}")
            if rule["action"] == "FailIndex" and "backoffLimitPerIndex" not in spec:
                problems.append(f"{where}: podFailurePolicy FailIndex requires backoffLimitPerIndex")
            exit_codes = rule.get("onExitCodes")
            if exit_codes and exit_codes.get("containerName") not in {c["name"] for c in containers}:
                problems.append(f"{where}: podFailurePolicy names container {exit_codes.get('containerName')!r}, not in the pod")
            if exit_codes and exit_codes["operator"] not in ("In", "NotIn"):
                problems.append(f"{where}: onExitCodes operator {exit_codes['operator']!r}")
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for container in [*pod.get("initContainers", []), *containers]:
            cwhere = f"{where} container {container['name']}"
            env = container.get("env", [])
            defined = {e["name"] for e in env} | ({"JOB_COMPLETION_INDEX"} if mode == "Indexed" else set())
            for text in [*container.get("command", []), *container.get("args", [])]:
                for m in _VAR_REF.finditer(text):
                    if m.group(1) is not None and m.group(1) not in defined:
                        problems.append(f"{cwhere}: $({m.group(1)}) is not an env var of the container; the kubelet leaves it literal")
            for e in env:
                source = e.get("valueFrom", {})
                if e["name"] in secret_vars and "secretKeyRef" not in source:
                    problems.append(f"{cwhere}: {e['name']} must come from a secretKeyRef, not a value")
                if "fieldRef" in source and "job-completion-index" in source["fieldRef"]["fieldPath"]:
                    if source["fieldRef"]["fieldPath"] != ANNOTATION_PATH or mode != "Indexed":
                        problems.append(f"{cwhere}: completion index fieldRef {source['fieldRef']['fieldPath']!r}")
            for mount in container.get("volumeMounts", []):
                volume = volumes.get(mount["name"])
                if volume is None:
                    problems.append(f"{cwhere}: volumeMount {mount['name']!r} has no volume")
                elif "configMap" in volume and ("ConfigMap", volume["configMap"]["name"]) not in names:
                    problems.append(f"{cwhere}: ConfigMap {volume['configMap']['name']!r} is not rendered")
    for job in by_kind(docs, "Job"):
        pod = job["spec"]["template"]["spec"]
        for init in pod.get("initContainers", []):
            command = init.get("command", [])
            if command[:2] != ["kubectl", "wait"]:
                continue
            targets = [a.split("/", 1)[1] for a in command if a.startswith("job/")]
            namespace = next((a.split("=", 1)[1] for a in command if a.startswith("--namespace=")), None)
            indexed = {j["metadata"]["name"] for j in by_kind(docs, "Job") if j["spec"].get("completionMode") == "Indexed"}
            if "--for=condition=complete" not in command or not targets or not {("Job", t) for t in targets} <= names:
                problems.append(f"Job {job['metadata']['name']}: initContainer does not wait for an rendered Job's Complete condition")
            if not indexed <= set(targets):
                problems.append(f"Job {job['metadata']['name']}: does not wait for Indexed Job(s) {sorted(indexed - set(targets))}")
            if namespace != job["metadata"]["namespace"]:
                problems.append(f"Job {job['metadata']['name']}: kubectl wait in namespace {namespace!r}")
            if not any(a.startswith("--timeout=") for a in command):
                problems.append(f"Job {job['metadata']['name']}: kubectl wait without --timeout")
            if not can_watch_jobs(docs, pod.get("serviceAccountName"), job["metadata"]["namespace"]):
                problems.append(f"Job {job['metadata']['name']}: its ServiceAccount may not get/list/watch jobs")
    return problems


def can_watch_jobs(docs: list[dict[str, Any]], account: str | None, namespace: str) -> bool:
    """A RoleBinding in the namespace binds the account to a rendered Role allowing get/list/watch on batch jobs."""
    if not account or ("ServiceAccount", account) not in {(d["kind"], d["metadata"]["name"]) for d in docs}:
        return False
    roles = {r["metadata"]["name"]: r for r in by_kind(docs, "Role") if r["metadata"]["namespace"] == namespace}
    for binding in by_kind(docs, "RoleBinding"):
        if binding["metadata"]["namespace"] != namespace or binding["roleRef"]["kind"] != "Role":
            continue
        subjects = binding["subjects"]
        if not any(s["kind"] == "ServiceAccount" and s["name"] == account and s.get("namespace") == namespace for s in subjects):
            continue
        role = roles.get(binding["roleRef"]["name"])
        for rule in (role or {}).get("rules", []):
            if "batch" in rule["apiGroups"] and "jobs" in rule["resources"] and {"get", "list", "watch"} <= set(rule["verbs"]):
                return True
    return False


# --- running a pod's container here, the way the kubelet would -------------------------------


def kubelet_expand(text: str, env: dict[str, str]) -> str:
    """The kubelet's $(VAR) expansion: `$$` is `$`, `$(NAME)` a defined variable's value (an
    undefined one stays as written), any other `$` literal."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i) and (end := text.find(")", i + 2)) != -1:
            name = text[i + 2 : end]
            out.append(env[name] if name in env else text[i : end + 1])
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def container_env(container: dict[str, Any], index: int, secrets: dict[tuple[str, str], str]) -> dict[str, str]:
    """What the pod of completion `index` sees: JOB_COMPLETION_INDEX (the Job controller adds it),
    then the container's env in order (values may use $(earlier vars)); Secrets from `secrets`."""
    env = {"JOB_COMPLETION_INDEX": str(index)}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = kubelet_expand(item["value"], env)
            continue
        source = item["valueFrom"]
        if "fieldRef" in source:
            assert source["fieldRef"]["fieldPath"] == ANNOTATION_PATH, source
            env[item["name"]] = str(index)
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            env[item["name"]] = secrets[(ref["name"], ref["key"])]
        else:
            raise AssertionError(f"unsupported env source {source}")
    return env


def mount_folders(docs: list[dict[str, Any]], pod: dict[str, Any], container: dict[str, Any], tmp: Path) -> dict[str, Path]:
    """mountPath -> a local folder: a ConfigMap's data as files, a PVC as a folder (shared by claim name),
    an emptyDir as a folder."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    folders = {}
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        if "configMap" in volume:
            (cm,) = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"] == volume["configMap"]["name"]]
            folder = tmp / "configmaps" / cm["metadata"]["name"]
            folder.mkdir(parents=True, exist_ok=True)
            for key, value in cm["data"].items():
                (folder / key).write_text(value)
        elif "emptyDir" in volume:  # /dev/shm: a folder of its own
            folder = tmp / "emptydirs" / mount["name"]
            folder.mkdir(parents=True, exist_ok=True)
        else:
            folder = tmp / "pvcs" / volume["persistentVolumeClaim"]["claimName"]
            folder.mkdir(parents=True, exist_ok=True)
        folders[mount["mountPath"]] = folder
    return folders


def rewrite_paths(arg: str, folders: dict[str, Path]) -> str:
    """Container paths in an argument (whole, or after `=`) -> the local folders standing in for mounts."""
    for mount, folder in sorted(folders.items(), key=lambda kv: -len(kv[0])):
        arg = re.sub(rf"(^|=){re.escape(mount)}(?=/|$)", lambda m: m.group(1) + str(folder), arg)  # noqa: B023
    return arg


def local_process_env(pod_env: dict[str, str]) -> dict[str, str]:
    """This machine's environment minus anything that could pick a shard or carry the key, plus the
    pod's variables; `shardeval` on PATH is the venv's (what the image's PATH gives the pod)."""
    env = {k: v for k, v in os.environ.items() if k not in SHARD_VARS and k != KEY_VAR and not k.startswith("SLURM_")}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.update(pod_env)
    return env


def start_container(docs, pod, container, tmp: Path, index: int, secrets) -> subprocess.Popen[str]:
    folders = mount_folders(docs, pod, container, tmp)
    env = container_env(container, index, secrets)
    argv = [rewrite_paths(kubelet_expand(a, env), folders) for a in [*container["command"], *container.get("args", [])]]
    workdir = tmp / "workdir" / f"{container['name']}-{index}"
    workdir.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(argv, env=local_process_env(env), cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def run_indexed_job(docs: list[dict[str, Any]], tmp: Path, secrets: dict[tuple[str, str], str]) -> list[str]:
    """Every completion index's pod at once (parallelism = completions), like the Job controller."""
    job = indexed_job(docs)
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    procs = [start_container(docs, pod, container, tmp, i, secrets) for i in range(job["spec"]["completions"])]
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    for i, (proc, out) in enumerate(zip(procs, outputs)):
        assert proc.returncode == 0, f"pod {i} exited {proc.returncode}:\n{out}"
    return outputs


def run_merge_job(docs: list[dict[str, Any]], tmp: Path) -> str:
    """The merge Job's main container; its initContainer's wait (Job Complete) holds: every pod exited 0."""
    pod = merge_job(docs)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    proc = start_container(docs, pod, container, tmp, 0, {})
    out = proc.communicate(timeout=240)[0]
    assert proc.returncode == 0, out
    return out


def claim_folder(docs: list[dict[str, Any]], tmp: Path) -> Path:
    volumes = indexed_job(docs)["spec"]["template"]["spec"]["volumes"]
    claim = next(v["persistentVolumeClaim"]["claimName"] for v in volumes if "persistentVolumeClaim" in v)
    return tmp / "pvcs" / claim


# A stand-in for kubectl (no API server can run here): it records each call's argv, one JSON line
# a call, in $KUBECTL_STUB_LOG; a call whose words (after --context) fully match the regex
# $KUBECTL_STUB_FAIL exits $KUBECTL_STUB_EXIT (default 1); `exec … -- CMD` runs CMD here, its
# stdin passed on, with /results in its words standing for the claim's folder $KUBECTL_STUB_CLAIM
# (what the helper pod's container would do with its mount); every other call exits 0.
KUBECTL_STUB = """\
import json, os, re, subprocess, sys

argv = sys.argv[1:]
with open(os.environ["KUBECTL_STUB_LOG"], "a", encoding="utf-8") as log:
    log.write(json.dumps(argv) + "\\n")
words = argv[2:] if argv[:1] == ["--context"] else argv
fail = os.environ.get("KUBECTL_STUB_FAIL")
if fail and re.fullmatch(fail, " ".join(words)):
    sys.exit(int(os.environ.get("KUBECTL_STUB_EXIT", "1")))
if words[:1] == ["exec"]:
    claim = os.environ["KUBECTL_STUB_CLAIM"]
    os.makedirs(claim, exist_ok=True)
    command = [w.replace("/results", claim) for w in words[words.index("--") + 1 :]]
    sys.exit(subprocess.run(command).returncode)
"""


def stub_kubectl(folder: Path, claim: Path | None = None) -> tuple[dict[str, str], Path]:
    """kubectl on PATH as the stand-in above: (the environment that puts it first, its log)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kubectl").write_text(f"#!{sys.executable}\n{KUBECTL_STUB}")
    (folder / "kubectl").chmod(0o755)
    log = folder / "kubectl.log"
    env = {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}", "KUBECTL_STUB_LOG": str(log)}
    if claim is not None:
        env["KUBECTL_STUB_CLAIM"] = str(claim)
    return env, log


def kubectl_calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def assert_all_files_free_of(root: Path, *texts: str) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            content = path.read_bytes()
            for text in texts:
                assert text.encode() not in content, f"{text!r} found in {path}"


# --- tests -------------------------------------------------------------------------------------


def test_manifests_pass_kubernetes_validate_and_the_semantic_checks(tmp_path, kubernetes_validate):
    extra = """
  image: registry.example.com/shardeval:0.1.0
  image_pull_policy: IfNotPresent
  image_pull_secrets: [regcred]
  parallelism: 4
  backoff_limit_per_index: 3
  max_failed_indexes: 2
  active_deadline_seconds: 86400
  ttl_seconds_after_finished: 3600
  env: {HF_HOME: /results/hf, PRICE: "costs $(literal) $5"}
  secret_env: {HF_TOKEN: {secret: hf, key: token}}
  resources: {requests: {cpu: "4", memory: 16Gi}, limits: {memory: 32Gi}, gpus: 2}
  node_selector: {pool: gpu}
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  service_account: eval-runner
  labels: {team: evals}
  annotations: {note: hello}
  pvc: {size: 50Gi, storage_class: nfs, access_modes: [ReadWriteMany]}
  merge: {args: [--errors-as-wrong], wait_timeout: 48h, resources: {requests: {cpu: 500m}}}
  security_context: {runAsUser: 1000, runAsGroup: 1000, runAsNonRoot: true, readOnlyRootFilesystem: true, allowPrivilegeEscalation: false}
"""
    docs, path, result = render(tmp_path, api_config("http://127.0.0.1:9/v1", cluster_extra=extra), env={KEY_VAR: SECRET_VALUE})
    validate(kubernetes_validate, path)
    validate(kubernetes_validate, path, "1.37.0")  # the newest schemas the validator ships
    assert manifest_problems(docs, {KEY_VAR, "HF_TOKEN"}) == []
    assert [d["kind"] for d in docs] == ["ConfigMap", "PersistentVolumeClaim", "ServiceAccount", "Role", "RoleBinding", "Job", "Job"]

    job = indexed_job(docs)
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 8, 4)
    assert (spec["backoffLimitPerIndex"], spec["maxFailedIndexes"]) == (3, 2)
    assert pod["restartPolicy"] == "Never" and pod["serviceAccountName"] == "eval-runner"
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NEL_SHARD_IDX"]["valueFrom"] == {"fieldRef": {"fieldPath": ANNOTATION_PATH}}
    assert env["NEL_TOTAL_SHARDS"]["value"] == "8"
    assert env[KEY_VAR]["valueFrom"] == {"secretKeyRef": {"name": "shardeval-api-keys", "key": KEY_VAR}}
    assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf", "key": "token"}}
    assert kubelet_expand(env["PRICE"]["value"], {"literal": "x"}) == "costs $(literal) $5"  # escaped for the kubelet
    assert container["args"] == ["run", "/config/config.yaml", "-o", "/results/shard_$(NEL_SHARD_IDX)"]
    assert container["resources"]["limits"] == {"memory": "32Gi", "nvidia.com/gpu": "2"}
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/config", "/results"}
    merge = merge_job(docs)["spec"]["template"]["spec"]
    assert merge["initContainers"][0]["command"] == [
        "kubectl",
        "wait",
        "--for=condition=complete",
        "job/arith-test",
        "--namespace=evals",
        "--timeout=48h",
    ]
    assert merge["containers"][0]["args"] == ["merge", "/results", "--errors-as-wrong"]
    # a merge that exits 3 (ran; the run is not complete) or 2 is not retried: it would say the same again
    assert merge_job(docs)["spec"]["podFailurePolicy"]["rules"] == [
        {"action": "FailJob", "onExitCodes": {"containerName": merge["containers"][0]["name"], "operator": "In", "values": [2, 3]}}
    ]
    context = {
        "runAsUser": 1000,
        "runAsGroup": 1000,
        "runAsNonRoot": True,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
    }
    assert container["securityContext"] == context == merge["containers"][0]["securityContext"]  # run so in tests/test_docker.py
    assert "securityContext" not in merge["initContainers"][0]  # kubectl's image, its own user
    assert all(d["metadata"]["labels"]["team"] == "evals" for d in docs)
    # the key is named, never written: not in any file, not in the output
    assert_all_files_free_of(tmp_path, SECRET_VALUE)
    assert SECRET_VALUE not in result.stdout + result.stderr


def test_the_checks_catch_broken_manifests(tmp_path, kubernetes_validate):
    """The validator and the semantic checks are not no-ops: break a rendered manifest and they object."""
    docs, path, _ = render(tmp_path, api_config("http://127.0.0.1:9/v1"))
    job = indexed_job(docs)
    pod = job["spec"]["template"]["spec"]
    broken = json.loads(json.dumps(docs))
    bj = indexed_job(broken)
    bj["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    del bj["spec"]["completions"]
    bj["spec"]["template"]["spec"]["containers"][0]["args"][-1] = "/results/shard_$(JOB_INDEX)"
    key = next(e for e in bj["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"] == KEY_VAR)
    key.pop("valueFrom")
    key["value"] = "literal"
    merge_job(broken)["spec"]["template"]["spec"]["serviceAccountName"] = "default"
    problems = "\n".join(manifest_problems(broken, {KEY_VAR}))
    for expected in (
        "restartPolicy must be Never or OnFailure",
        "Indexed requires completions",
        "$(JOB_INDEX)",
        f"{KEY_VAR} must come from a secretKeyRef",
        "may not get/list/watch jobs",
    ):
        assert expected in problems
    pod["containers"][0]["bogus"] = 1
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump_all(docs))
    result = subprocess.run([kubernetes_validate, "--strict", "-k", KV_VERSION, str(bad)], capture_output=True, text=True)
    assert result.returncode != 0 and "bogus" in result.stdout + result.stderr
    # the version matters too: before 1.29 a podFailurePolicy rule needed onPodConditions, and
    # backoffLimitPerIndex did not exist before 1.28 (docs/kubernetes.md: Kubernetes >= 1.29)
    result = subprocess.run([kubernetes_validate, "--strict", "-k", "1.28.0", str(path)], capture_output=True, text=True)
    assert result.returncode != 0 and "did not validate for resource job/arith-test" in result.stdout + result.stderr


def test_every_pod_and_the_merge_job_run_locally_against_a_real_simulator(tmp_path, kubernetes_validate):
    """The seed's shape (8 completions, NEL_SHARD_IDX from the completion index, NEL_TOTAL_SHARDS=8):
    each pod's exact command line, run here for indexes 0..7, then the merge Job's."""
    with running_sim("--bench", "arith", "--accuracy", "0.7", "--ttft-ms", "1", "--itl-ms", "0") as url:
        docs, path, result = render(tmp_path, api_config(url, shards=8, n=40, repeats=2), env={KEY_VAR: SECRET_VALUE})
        validate(kubernetes_validate, path)
        assert manifest_problems(docs, {KEY_VAR}) == []
        outputs = run_indexed_job(docs, tmp_path / "cluster", {("shardeval-api-keys", KEY_VAR): SECRET_VALUE})
        # the whole run in one process, for the reference scores
        cfg = tmp_path / "k8s.yaml"
        whole = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(tmp_path / "whole" / "shard_0"), env={KEY_VAR: SECRET_VALUE})
        assert whole.returncode == 0, whole.stderr
    for i, out in enumerate(outputs):
        assert f"shard {i}/8 (from NEL_SHARD_IDX={i}, NEL_TOTAL_SHARDS=8)" in out
    results = claim_folder(docs, tmp_path / "cluster")
    assert sorted(p.name for p in results.iterdir()) == [f"shard_{i}" for i in range(8)]
    for i in range(8):
        manifest = json.loads((results / f"shard_{i}" / "manifest.json").read_text())
        assert (manifest["shard_idx"], manifest["total_shards"], manifest["state"]) == (i, 8, "complete")

    report = run_merge_job(docs, tmp_path / "cluster")
    assert "COMPLETE" in report
    scores = json.loads((results / "merged" / "scores.json").read_text())["arith"]
    assert (scores["n_problems"], scores["n_expected"], scores["n_records"]) == (40, 80, 80)
    assert (scores["n_missing"], scores["n_errors"], scores["n_duplicates"]) == (0, 0, 0)
    assert scores["metrics"]["accuracy"]["n"] == 40
    assert shardeval_cmd("merge", "-q", str(tmp_path / "whole")).returncode == 0
    assert (results / "merged" / "scores.json").read_bytes() == (tmp_path / "whole" / "merged" / "scores.json").read_bytes()
    assert_all_files_free_of(tmp_path, SECRET_VALUE)  # manifests, shard records, logs, merged output


def test_seed_example_is_the_rendering_and_validates(tmp_path, kubernetes_validate):
    """examples/k8s/deploy/k8s/eval-indexed-job.yaml is exactly what examples/k8s/gsm8k_indexed.yaml renders."""
    example = Path(REPO, "examples", "k8s")
    checked_in = example / "deploy" / "k8s" / "eval-indexed-job.yaml"
    root = tmp_path / "out"
    result = shardeval_cmd("run", str(example / "gsm8k_indexed.yaml"), "--dry-run", "-o", str(root))
    assert result.returncode == 0, result.stderr
    assert (root / "k8s" / "eval.yaml").read_text() == checked_in.read_text(), (
        "regenerate: shardeval run examples/k8s/gsm8k_indexed.yaml --dry-run -o /tmp/r && "
        "cp /tmp/r/k8s/eval.yaml examples/k8s/deploy/k8s/eval-indexed-job.yaml"
    )
    validate(kubernetes_validate, checked_in)
    docs = list(yaml.safe_load_all(checked_in.read_text()))
    assert manifest_problems(docs, {"HF_TOKEN"}) == []
    job = indexed_job(docs)
    assert (job["spec"]["completionMode"], job["spec"]["completions"]) == ("Indexed", 8)
    env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["NEL_SHARD_IDX"]["valueFrom"]["fieldRef"]["fieldPath"] == ANNOTATION_PATH
    assert env["NEL_TOTAL_SHARDS"]["value"] == "8"
    # the config travels verbatim and loads in the pod as the shard it names
    (cm,) = by_kind(docs, "ConfigMap")
    assert cm["data"]["config.yaml"] == (example / "gsm8k_indexed.yaml").read_text()


def test_runnable_example_runs_its_pods_locally(tmp_path, kubernetes_validate):
    """examples/k8s/arith_sim.yaml: each pod starts its own simulator, so the pods run as rendered."""
    root = tmp_path / "out"
    result = shardeval_cmd("run", str(Path(REPO, "examples", "k8s", "arith_sim.yaml")), "--dry-run", "-o", str(root))
    assert result.returncode == 0, result.stderr
    path = root / "k8s" / "eval.yaml"
    validate(kubernetes_validate, path)
    docs = list(yaml.safe_load_all(path.read_text()))
    assert manifest_problems(docs) == []
    run_indexed_job(docs, tmp_path / "cluster", {})
    report = run_merge_job(docs, tmp_path / "cluster")
    assert "COMPLETE" in report
    scores = json.loads((claim_folder(docs, tmp_path / "cluster") / "merged" / "scores.json").read_text())["arith"]
    assert (scores["n_records"], scores["n_missing"], scores["n_errors"]) == (160, 0, 0)


def test_quick_mode_ships_flags_not_a_config_and_escapes_dollars(tmp_path, kubernetes_validate):
    """Without a config file the quick flags travel in the args; user text is escaped for the kubelet."""
    prompt = "Price: $(cost) or $$5, ${HOME}"
    docs, path, result = render(
        tmp_path,
        None,
        "--bench",
        "arith",
        "--model-url",
        "http://127.0.0.1:9/v1",
        "--model-id",
        "sim",
        "--api-key-env",
        KEY_VAR,
        "-O",
        "cluster.type=kubernetes",
        "-O",
        "cluster.shards=2",
        "-O",
        f"benchmarks.0.solver.system_prompt={prompt}",
        env={KEY_VAR: SECRET_VALUE},
    )
    validate(kubernetes_validate, path)
    assert manifest_problems(docs, {KEY_VAR}) == []
    assert by_kind(docs, "ConfigMap") == []
    container = indexed_job(docs)["spec"]["template"]["spec"]["containers"][0]
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/results"}
    expanded = [kubelet_expand(a, {"NEL_SHARD_IDX": "1", "cost": "EXPANDED"}) for a in container["args"]]
    assert expanded == [
        "run",
        "--bench",
        "arith",
        "--model-url",
        "http://127.0.0.1:9/v1",
        "--model-id",
        "sim",
        "--api-key-env",
        KEY_VAR,
        "-O",
        "cluster.type=kubernetes",
        "-O",
        "cluster.shards=2",
        "-O",
        f"benchmarks.0.solver.system_prompt={prompt}",
        "-o",
        "/results/shard_1",
    ]
    assert "cluster.shards is not set" not in result.stderr
    assert SECRET_VALUE not in path.read_text()


def test_apply_runs_kubectl_and_user_mistakes_are_one_line(tmp_path):
    """`kubectl apply` needs an API server: a stub kubectl on PATH records the argv instead."""
    cfg = tmp_path / "k8s.yaml"
    cfg.write_text(api_config("http://127.0.0.1:9/v1", cluster_extra="  kube_context: lab"))
    root = tmp_path / "out"
    env, log = stub_kubectl(tmp_path / "bin", tmp_path / "claim")

    ok = shardeval_cmd("run", str(cfg), "-o", str(root), env=env)
    assert ok.returncode == 0, ok.stderr
    calls = kubectl_calls(log)
    assert all(call[:2] == ["--context", "lab"] for call in calls), calls  # every call, the upload's too
    assert calls[-1] == ["--context", "lab", "apply", "-f", str(root / "k8s" / "eval.yaml")]
    assert "kubectl logs -n evals job/arith-test-merge" in ok.stderr

    eval_apply = f"apply -f {root}/k8s/eval.yaml"
    failed = shardeval_cmd("run", str(cfg), "-o", str(root), env={**env, "KUBECTL_STUB_FAIL": re.escape(eval_apply)})
    assert failed.returncode == 1 and "kubectl delete job -n evals arith-test arith-test-merge" in failed.stderr

    empty = tmp_path / "empty-bin"
    empty.mkdir()
    missing = shardeval_cmd("run", str(cfg), "-o", str(root), env={"PATH": str(empty)})
    assert missing.returncode == 2
    assert missing.stderr.strip().count("\n") == 0 and "kubectl is not on PATH" in missing.stderr
    assert (root / "k8s" / "eval.yaml").is_file()

    for extra, words in (
        ("  name: Bad_Name", "cluster.name 'Bad_Name'"),
        ("  namepsace: evals2", "did you mean 'namespace'"),
        ("  env: {NEL_SHARD_IDX: '3'}", "cluster.env.NEL_SHARD_IDX"),
        ("  backoff_limit_per_index: -1", "cluster.backoff_limit_per_index"),
        ("  tolerations: [{key: a, operator: Sometimes}]", "cluster.tolerations[0].operator"),
        ("  security_context: {runAsUsr: 5}", "did you mean 'runAsUser'"),
    ):
        text = api_config("http://127.0.0.1:9/v1", cluster_extra=extra).replace("  name: arith-test\n", "", 1 if "name:" in extra else 0)
        cfg.write_text(text)
        bad = shardeval_cmd("run", str(cfg), "--dry-run", "-o", str(tmp_path / "bad"))
        assert bad.returncode == 2, (extra, bad.stderr)
        assert bad.stderr.strip().count("\n") == 0 and words in bad.stderr, (extra, bad.stderr)


def test_config_variables_the_pods_lack_are_warned_about(tmp_path):
    text = api_config("${SIM_URL}", shards=2, cluster_extra="  env: {SET_HERE: x}").replace(
        "max_concurrent: 16", "max_concurrent: 16\n    solver: {system_prompt: '${SET_HERE} ${WITH_DEFAULT:-d}'}"
    )
    docs, path, result = render(tmp_path, text, env={"SIM_URL": "http://127.0.0.1:9/v1", "SET_HERE": "y"})
    assert "uses ${SIM_URL}, which the pods do not define" in result.stderr
    assert "runAsNonRoot" not in result.stderr
    _, _, nonroot = render(tmp_path, api_config("http://127.0.0.1:9/v1", cluster_extra="  security_context: {runAsNonRoot: true}"))
    assert "runAsNonRoot without runAsUser: the image from build/Dockerfile runs as root" in nonroot.stderr
    assert "SET_HERE" not in result.stderr and "WITH_DEFAULT" not in result.stderr
    (cm,) = by_kind(docs, "ConfigMap")
    assert "${SIM_URL}" in cm["data"]["config.yaml"]  # shipped as written, expanded in the pod


@pytest.mark.parametrize(
    "tp, shm_key, expected",
    [
        (4, "", "8Gi"),  # auto: at least 8Gi once a service spans two or more GPUs
        (8, "", "16Gi"),  # auto: 2Gi per GPU
        (1, "", None),  # one GPU: no NCCL shared-memory traffic, the default /dev/shm is enough
        (1, "  shm_size: 32Gi", "32Gi"),  # a quantity: always
        (8, "  shm_size: null", None),  # null: never
    ],
)
def test_dev_shm_is_memory_backed_and_sized_from_the_services_gpus(tmp_path, kubernetes_validate, tp, shm_key, expected):
    """A tensor-parallel vLLM crashes on a container's 64 MiB /dev/shm: the shard pods get a
    memory-backed one, sized from the GPUs the service says it uses (its gpus())."""
    config = f"""
services:
  model: {{type: vllm, model: /models/m, tensor_parallel_size: {tp}}}
benchmarks: [{{name: arith, params: {{n: 8}}}}]
cluster:
  type: kubernetes
  name: shm-test
  shards: 2
  resources: {{gpus: {tp}}}
{shm_key}
"""
    docs, path, _ = render(tmp_path, config)
    validate(kubernetes_validate, path)
    pod = indexed_job(docs)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    shm_volumes = [v for v in pod["volumes"] if v.get("emptyDir", {}).get("medium") == "Memory"]
    shm_mounts = [m for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    if expected is None:
        assert shm_volumes == [] and shm_mounts == []
    else:
        (volume,) = shm_volumes
        assert volume["emptyDir"]["sizeLimit"] == expected
        assert [m["name"] for m in shm_mounts] == [volume["name"]]


# --- sweeps ------------------------------------------------------------------------------------


def sim_sweep_config(shards: int = 2, n: int = 12) -> str:
    """Two simulated models of different accuracy; every pod starts its cell's own simulator."""
    sim = "type: sim, bench: arith, ttft_ms: 1, itl_ms: 0, output_tokens: 8"
    return f"""
services:
  base: {{{sim}, accuracy: 0.3}}
  step1: {{{sim}, accuracy: 0.9}}
benchmarks:
  - {{name: arith, params: {{n: {n}}}, max_concurrent: 8}}
sweep: {{services: [base, step1], baseline: base}}
cluster: {{type: kubernetes, name: sweep-test, namespace: evals, shards: {shards}}}
output: {{progress_interval_s: 0}}
"""


def test_a_sweep_is_one_indexed_job_over_model_shard_cells_and_its_pods_run(tmp_path, kubernetes_validate):
    """2 models x 2 shards: one Indexed Job of 4 completions (cell c = shard c mod 2 of model c div 2),
    each pod's exact command run here for its index, then the merge Job merges the sweep root. No
    API server is available here: the Job controller's and kubelet's parts are the module's stand-ins."""
    docs, path, _ = render(tmp_path, sim_sweep_config())
    validate(kubernetes_validate, path)
    assert manifest_problems(docs) == []
    job = indexed_job(docs)
    assert (job["metadata"]["name"], job["spec"]["completions"], job["spec"]["parallelism"]) == ("sweep-test", 4, 4)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["args"] == [
        "run",
        "/config/config.yaml",
        "--sweep-services",
        "base,step1",
        "--shard",
        "$(NEL_SHARD_IDX)/4",
        "-o",
        "/results",
    ]
    assert {e["name"]: e.get("value") for e in container["env"]}["NEL_TOTAL_SHARDS"] == "4"
    outputs = run_indexed_job(docs, tmp_path / "cluster", {})
    for index, out in enumerate(outputs):
        model, shard = ("base", "step1")[index // 2], index % 2
        assert f"shard {shard}/2 (from --shard {index}/4; sweep cell {index} of 4: {model})" in out, out
    results = claim_folder(docs, tmp_path / "cluster")
    for index in range(4):
        model, shard = ("base", "step1")[index // 2], index % 2
        manifest = json.loads((results / model / f"shard_{shard}" / "manifest.json").read_text())
        assert (manifest["shard_idx"], manifest["total_shards"], manifest["state"]) == (shard, 2, "complete")

    report = run_merge_job(docs, tmp_path / "cluster")
    assert "base" in report and "step1" in report
    sweep = json.loads((results / "merged" / "sweep.json").read_text())
    assert sweep["baseline"] == "base"
    accuracy = {c["service"]: c for c in sweep["cells"] if c["metric"] == "accuracy"}
    assert set(accuracy) == {"base", "step1"} and all(c["n"] == 12 for c in accuracy.values())
    (diff,) = [d for d in sweep["vs_baseline"] if d["metric"] == "accuracy"]
    assert diff["service"] == "step1" and diff["diff"] > 0  # the 0.9 simulator beats the 0.3 one
    for model in ("base", "step1"):  # each model's folder is an ordinary run, merged as one
        assert json.loads((results / model / "merged" / "scores.json").read_text())["arith"]["n_missing"] == 0


def test_sweep_models_needing_different_gpus_get_one_indexed_job_each(tmp_path, kubernetes_validate):
    """Pods are sized from the GPUs a model's services declare: models of one size share a Job
    (<name>-g0, <name>-g1, in sweep order), and the merge Job waits for every one. Each pod's
    command, run here with --dry-run (no vLLM), evaluates the cell its index names."""
    config = """
services:
  base: {type: vllm, model: /ckpt/base, tensor_parallel_size: 4}
  big: {type: vllm, model: /ckpt/big, tensor_parallel_size: 8}
  step1: {type: vllm, model: /ckpt/step1, tensor_parallel_size: 4}
benchmarks:
  - {name: arith, params: {n: 9}}
sweep: {services: [base, big, step1], baseline: base}
cluster: {type: kubernetes, name: sweep-gpu, shards: 3, parallelism: 2}
"""
    docs, path, _ = render(tmp_path, config)
    validate(kubernetes_validate, path)
    assert manifest_problems(docs) == []
    jobs = {j["metadata"]["name"]: j for j in by_kind(docs, "Job")}
    assert list(jobs) == ["sweep-gpu-g0", "sweep-gpu-g1", "sweep-gpu-merge"]
    wait = jobs["sweep-gpu-merge"]["spec"]["template"]["spec"]["initContainers"][0]["command"]
    assert [a for a in wait if a.startswith("job/")] == ["job/sweep-gpu-g0", "job/sweep-gpu-g1"]
    expected = {"sweep-gpu-g0": (["base", "step1"], "4", "8Gi"), "sweep-gpu-g1": (["big"], "8", "16Gi")}
    for name, (models, gpus, shm) in expected.items():
        spec = jobs[name]["spec"]
        pod = spec["template"]["spec"]
        (container,) = pod["containers"]
        assert (spec["completions"], spec["parallelism"]) == (3 * len(models), 2)
        assert container["args"][2:6] == ["--sweep-services", ",".join(models), "--shard", f"$(NEL_SHARD_IDX)/{3 * len(models)}"]
        assert container["resources"]["limits"] == {"nvidia.com/gpu": gpus}
        assert [v["emptyDir"]["sizeLimit"] for v in pod["volumes"] if "emptyDir" in v] == [shm]
        folders = mount_folders(docs, pod, container, tmp_path / "cluster")
        for index in range(spec["completions"]):
            env = container_env(container, index, {})
            argv = [rewrite_paths(kubelet_expand(a, env), folders) for a in [*container["command"], *container["args"]]]
            ran = subprocess.run([*argv, "--dry-run"], env=local_process_env(env), capture_output=True, text=True, timeout=120)
            assert ran.returncode == 0, ran.stderr
            model, shard = models[index // 3], index % 3
            assert f"shard {shard}/3 arith: problems [{3 * shard}, {3 * shard + 3}) of 9" in ran.stdout, ran.stdout
            assert str(folders["/results"] / model / f"shard_{shard}" / "arith") in ran.stdout
    # an explicit resources.gpus is what every Job asks for
    docs, _, _ = render(tmp_path, config.replace("parallelism: 2", "resources: {gpus: 8}"))
    limits = [j["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] for j in by_kind(docs, "Job")[:2]]
    assert limits == [{"nvidia.com/gpu": "8"}] * 2
