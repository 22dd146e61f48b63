"""Issue 43 on Kubernetes: the launch prepares on the submitting host, puts the preparation onto
the results claim before any Job exists, and the shard pods and the merge Job read it there, with
no network but loopback.

No API server or kubelet can run here (tests/test_kubernetes.py says how its stand-ins work; the
same helpers are used). What kubectl does is the stand-in `KUBECTL_STUB` of that file: it records
every call, and runs what `kubectl exec` would run in the helper pod (`cat`, then `sh -c 'tar -x
…'`) on this machine, with the claim a folder, so the bytes that reach the claim are the ones the
real tar stream carries. Each rendered pod's container command (every Indexed Job index, then the
merge Job's) then runs in a network namespace with only loopback (`unshare -n`), its simulator
started inside it, against that folder as /results. The data and images come from a local TLS
server (tests/test_prepare_offline.py's), trusted only while the launch prepares.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import shardeval_cmd
from test_kubernetes import (  # noqa: F401  (kubernetes_validate: the fixture)
    by_kind,
    claim_folder,
    container_env,
    indexed_job,
    kubectl_calls,
    kubelet_expand,
    kubernetes_validate,
    local_process_env,
    manifest_problems,
    merge_job,
    mount_folders,
    rewrite_paths,
    stub_kubectl,
    validate,
)
from test_prepare_offline import Served, served  # noqa: F401  (served: the fixture)

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip") or not shutil.which("openssl"),
        reason="needs root, unshare, ip and openssl (a network namespace with only loopback)",
    ),
]

NAME = "prep-k8s"
SHARDS = 2


def write_config(tmp: Path, served: Served, **extra: Any) -> Path:
    """A BYO benchmark whose data and images are https URLs; each pod starts its own simulator."""
    sim = {"type": "sim", "ttft_ms": 0, "itl_ms": 0, "output_tokens": 4, "protocol": "chat_completions"}
    config = {
        "services": {"model": sim},
        "benchmarks": [{"name": "custom", "params": {"name": "byo", "data": f"{served.url}/byo.jsonl", "scorer": "numeric"}}],
        "cluster": {"type": "kubernetes", "name": NAME, "namespace": "evals", "shards": SHARDS},
        "output": {"progress_interval_s": 0},
        **extra,
    }
    path = tmp / "k8s.yaml"
    path.write_text(json.dumps(config))  # YAML is a superset of JSON
    return path


def launch(config: Path, root: Path, env: dict[str, str], served: Served) -> subprocess.CompletedProcess[str]:
    """`shardeval run CONFIG -o ROOT` on the submitting host: the only place the data server is trusted."""
    return shardeval_cmd("run", str(config), "-o", str(root), env={**env, "SSL_CERT_FILE": str(served.cert)}, timeout=180)


def run_offline(docs: list[dict[str, Any]], job: dict[str, Any], cluster: Path, index: int) -> subprocess.CompletedProcess[str]:
    """One pod's container as the kubelet would start it (tests/test_kubernetes.py's stand-ins),
    in a network namespace with only loopback."""
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    folders = mount_folders(docs, pod, container, cluster)
    env = container_env(container, index, {})
    argv = [rewrite_paths(kubelet_expand(a, env), folders) for a in [*container["command"], *container.get("args", [])]]
    offline = ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *argv]
    process_env = {k: v for k, v in local_process_env(env).items() if k != "SSL_CERT_FILE"}
    workdir = cluster / "workdir" / f"{container['name']}-{index}"
    workdir.mkdir(parents=True, exist_ok=True)
    return subprocess.run(offline, env=process_env, cwd=workdir, capture_output=True, text=True, timeout=240)


def test_launch_uploads_the_preparation_then_pods_and_merge_read_it_without_network(
    tmp_path: Path, served: Served, kubernetes_validate: str
) -> None:
    config = write_config(tmp_path, served)
    root, cluster = tmp_path / "out", tmp_path / "cluster"
    claim = cluster / "pvcs" / f"{NAME}-results"
    env, log = stub_kubectl(tmp_path / "bin", claim)
    seen_before = len(served.seen)

    first = launch(config, root, env, served)
    assert first.returncode == 0, first.stderr
    said = first.stderr
    order = ["prepared the run for nodes without internet", "uploaded the run's preparation to claim", "kubectl apply -f"]
    assert [said.index(words) for words in order] == sorted(said.index(words) for words in order), said
    fetched = len(served.seen) - seen_before
    assert fetched == 2, served.seen  # the data and the one image, once, on the submitting host

    # the manifests: eval.yaml as before, upload.yaml the helper pod on the same claim
    k8s = root / "k8s"
    validate(kubernetes_validate, k8s / "upload.yaml")
    validate(kubernetes_validate, k8s / "eval.yaml")
    docs = list(yaml.safe_load_all((k8s / "eval.yaml").read_text()))
    assert manifest_problems(docs) == []
    (helper,) = [d for d in yaml.safe_load_all((k8s / "upload.yaml").read_text()) if d]
    spec = helper["spec"]
    assert (helper["kind"], helper["metadata"]["name"], helper["metadata"]["namespace"]) == ("Pod", f"{NAME}-upload", "evals")
    assert (spec["restartPolicy"], spec["automountServiceAccountToken"], spec["activeDeadlineSeconds"]) == ("Never", False, 3600)
    assert spec["volumes"] == indexed_job(docs)["spec"]["template"]["spec"]["volumes"][-1:]  # the shards' claim
    assert spec["containers"][0]["volumeMounts"] == [{"name": "results", "mountPath": "/results"}]

    # kubectl: the claim and the helper, the preparation through it, the helper gone, then the Jobs
    calls = kubectl_calls(log)
    assert [c[:3] for c in calls] == [
        ["delete", "pod", f"{NAME}-upload"],  # one a launch that stopped may have left
        ["apply", "-f", str(k8s / "eval.yaml")],
        ["apply", "-f", str(k8s / "upload.yaml")],
        ["wait", "--namespace", "evals"],
        ["exec", "--namespace", "evals"],
        ["exec", "-i", "--namespace"],
        ["delete", "pod", f"{NAME}-upload"],
        ["apply", "-f", str(k8s / "eval.yaml")],
    ], calls
    assert calls[1][3:] == ["--selector", "app.kubernetes.io/component=results"] and calls[-1][3:] == []
    assert calls[3][3:] == ["--for=condition=Ready", f"pod/{NAME}-upload", "--timeout=5m"]
    assert calls[4][calls[4].index("--") :] == ["--", "cat", "/results/prepared/preparation.json"]
    assert calls[5][calls[5].index("--") :][:3] == ["--", "sh", "-c"]

    # the claim holds the preparation as the submitting host made it, and nothing half-made beside it
    local = root / "prepared"
    preparation = json.loads((local / "preparation.json").read_text())
    assert (claim / "prepared" / "preparation.json").read_bytes() == (local / "preparation.json").read_bytes()
    files = [f["path"] for f in preparation["files"]]
    assert len(files) == 2 and all((claim / "prepared" / "cache" / p).read_bytes() == (local / "cache" / p).read_bytes() for p in files)
    assert sorted(p.name for p in claim.iterdir()) == ["prepared"]

    # every shard pod, then the merge Job, with no network: they read the claim's preparation
    job = indexed_job(docs)
    assert claim_folder(docs, cluster) == claim
    pods = [run_offline(docs, job, cluster, i) for i in range(SHARDS)]
    for i, pod in enumerate(pods):
        assert pod.returncode == 0, pod.stderr
        assert f"prepared run: reading 2 prepared file(s) from {claim / 'prepared' / 'cache'}; offline" in pod.stderr, pod.stderr
        assert json.loads((claim / f"shard_{i}" / "manifest.json").read_text())["state"] == "complete"
    merged = run_offline(docs, merge_job(docs), cluster, 0)
    assert merged.returncode == 0, merged.stderr
    assert "prepared run: the merge reads 2 prepared file(s)" in merged.stderr and "COMPLETE" in merged.stdout, merged.stderr
    scores = json.loads((claim / "merged" / "scores.json").read_text())["byo"]
    assert (scores["n_expected"], scores["n_records"], scores["n_missing"], scores["n_errors"]) == (4, 4, 0, 0)
    assert len(served.seen) - seen_before == fetched  # nothing fetched by a pod

    # launched again: nothing fetched, nothing uploaded (the claim holds this very preparation)
    again = launch(config, root, env, served)
    assert again.returncode == 0, again.stderr
    assert "nothing to fetch" in again.stderr and "the claim holds this preparation already" in again.stderr, again.stderr
    later = [" ".join(c) for c in kubectl_calls(log)[len(calls) :]]
    assert [c for c in later if "sha256sum -c" in c] and not [c for c in later if "tar -x" in c], later  # checked, not sent
    assert later[-1] == f"apply -f {k8s / 'eval.yaml'}"
    assert len(served.seen) - seen_before == fetched
    assert json.loads((local / "preparation.json").read_text()) == preparation


def test_a_cache_outside_the_root_is_put_inside_the_claim_and_verified_there(tmp_path: Path, served: Served) -> None:
    """`prepare.cache_dir` (a shared folder of the submitting host) is not on the claim: the launch
    puts the files under the claim's prepared/cache and the index says so; a pod verifies them
    there, and one byte changed on the claim is one line, exit 2."""
    shared = tmp_path / "shared-cache"
    config = write_config(tmp_path, served, prepare={"cache_dir": str(shared)})
    root, cluster = tmp_path / "out", tmp_path / "cluster"
    claim = cluster / "pvcs" / f"{NAME}-results"
    env, _ = stub_kubectl(tmp_path / "bin", claim)
    first = launch(config, root, env, served)
    assert first.returncode == 0, first.stderr
    local = json.loads((root / "prepared" / "preparation.json").read_text())
    assert local["cache_dir"] == str(shared) and "cache_in_root" not in local
    on_claim = json.loads((claim / "prepared" / "preparation.json").read_text())
    assert on_claim == {**local, "cache_in_root": "prepared/cache"}
    for f in local["files"]:
        assert (claim / "prepared" / "cache" / f["path"]).read_bytes() == (shared / f["path"]).read_bytes()

    docs = list(yaml.safe_load_all((root / "k8s" / "eval.yaml").read_text()))
    pod = run_offline(docs, indexed_job(docs), cluster, 0)
    assert pod.returncode == 0, pod.stderr
    assert f"reading 2 prepared file(s) from {claim / 'prepared' / 'cache'}; offline" in pod.stderr, pod.stderr

    data = next(p for p in (claim / "prepared" / "cache").rglob("byo.jsonl"))
    raw = bytearray(data.read_bytes())
    raw[5] ^= 1
    data.write_bytes(bytes(raw))
    refused = run_offline(docs, indexed_job(docs), cluster, 1)
    assert refused.returncode == 2, refused.stderr
    last = refused.stderr.strip().splitlines()[-1]
    assert "Traceback" not in refused.stderr and str(data) in last and "is not the file prepared" in last, refused.stderr

    # launched again: a file on the claim is not the one prepared (its sha256), so the preparation is sent again
    again = launch(config, root, env, served)
    assert again.returncode == 0, again.stderr
    assert "nothing to fetch" in again.stderr and "uploaded the run's preparation" in again.stderr, again.stderr
    assert data.read_bytes() == (shared / data.relative_to(claim / "prepared" / "cache")).read_bytes()
    assert run_offline(docs, indexed_job(docs), cluster, 1).returncode == 0


@pytest.mark.parametrize(
    "fails, words",
    [
        (r"wait .*", ["kubectl wait --namespace evals --for=condition=Ready", "`kubectl describe pod -n evals prep-k8s-upload`"]),
        (r"(?s)exec -i .*", ["kubectl exec -i --namespace evals prep-k8s-upload", "needs sh and tar (cluster.upload.image)"]),
    ],
)
def test_an_upload_that_fails_is_one_line_and_applies_no_job(tmp_path: Path, served: Served, fails: str, words: list[str]) -> None:
    config = write_config(tmp_path, served)
    root = tmp_path / "out"
    env, log = stub_kubectl(tmp_path / "bin", tmp_path / "claim")
    failed = launch(config, root, {**env, "KUBECTL_STUB_FAIL": fails}, served)
    assert failed.returncode == 1, failed.stderr
    lines = [line for line in failed.stderr.splitlines() if "failed (exit 1)" in line]
    assert len(lines) == 1 and "Traceback" not in failed.stderr, failed.stderr
    assert all(w in lines[0] for w in words) and "so no Job was applied" in lines[0], lines[0]
    calls = kubectl_calls(log)
    assert ["apply", "-f", str(root / "k8s" / "eval.yaml")] not in calls, calls  # no Job
    assert calls[-1][:3] == ["delete", "pod", f"{NAME}-upload"], calls  # the helper is not left behind
    assert not (tmp_path / "claim" / "prepared").exists()
