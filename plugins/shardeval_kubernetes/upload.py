"""The run's preparation onto the results claim, before any Job exists (docs/offline.md).

A Kubernetes launch prepares on the submitting host (the core's `before_submit`), but the pods
read the results claim, which this machine does not see. So `submit` puts the preparation there
first, with kubectl alone (nothing but the API server is reached, as `kubectl apply` already needs):

  1. the claim (when rendered) is applied, then the helper Pod of upload.yaml that mounts it;
  2. once it is Ready, `kubectl exec … cat /results/prepared/preparation.json`, then `sha256sum -c`
     of every file it lists: a claim that holds this very preparation (the same index, byte for
     byte, and every file intact) gets nothing again;
  3. else a tar stream of the preparation through `kubectl exec -i … sh -c 'tar -x …'`, unpacked
     beside the old one and moved into place whole, so a pod never reads half of one;
  4. the helper Pod is deleted (also after a failure), and only then are the Jobs applied.

A step that fails is one line naming it, exit 1, and no Job is applied: a pod that found no
preparation would fetch for itself, which on a cluster without internet fails on every node.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from shardeval.api.orchestrator import PortablePreparation

STAGING = ".prepared.upload"  # beside <results>/prepared on the claim, while the stream is unpacked
# Unpacked beside the preparation, then swapped in: a pod or merge never reads a half-written one.
UNPACK = f"""set -e
cd "$0"
rm -rf {STAGING} .prepared.old
mkdir {STAGING}
tar -x -f - -C {STAGING}
test -f {STAGING}/prepared/preparation.json
if [ -e prepared ]; then mv prepared .prepared.old; fi
mv {STAGING}/prepared prepared
rm -rf .prepared.old {STAGING}
"""


@dataclass(frozen=True)
class Target:
    """Where the preparation goes: the helper pod of upload.yaml and the claim it mounts."""

    namespace: str
    pod: str
    container: str
    claim: str
    results: str  # where the pod mounts the claim (/results, as every shard pod does)
    create_claim: bool  # eval.yaml renders the claim: apply it first
    wait_timeout: str


class StepFailed(Exception):
    """A kubectl step of the upload failed: the line to print."""


def upload_preparation(kubectl: list[str], target: Target, eval_path: str, upload_path: str, shipped: PortablePreparation) -> int:
    """Put `shipped` onto the claim through the helper pod of `upload_path` (`kubectl` is the
    command with its --context); 0 when the claim holds it, else 1 after one line saying why."""
    pod, namespace = target.pod, ["--namespace", target.namespace]
    mib = shipped.size / (1 << 20)
    say(f"the pods read the run's preparation from claim {target.claim}: putting it there through pod {target.namespace}/{pod}")
    try:
        _run(kubectl, "delete", "pod", pod, *namespace, "--ignore-not-found", "--wait=true")  # one a stopped launch left
        if target.create_claim:  # the claim the helper mounts: eval.yaml's, applied alone before anything else
            _run(kubectl, "apply", "-f", eval_path, "--selector", "app.kubernetes.io/component=results")
        _run(kubectl, "apply", "-f", upload_path)
        try:
            _run(
                kubectl,
                "wait",
                *namespace,
                "--for=condition=Ready",
                f"pod/{pod}",
                f"--timeout={target.wait_timeout}",
                hint=f"`kubectl describe pod -n {target.namespace} {pod}` says why it did not start",
            )
            exec_ = ["exec", *namespace, pod, "-c", target.container, "--"]
            if _holds(kubectl, exec_, target.results, shipped):
                say(f"the claim holds this preparation already ({len(shipped.files)} file(s), each checked); nothing uploaded")
            else:
                _stream(kubectl, [*exec_, "sh", "-c", UNPACK, target.results], shipped, target.results)
                say(f"uploaded the run's preparation to claim {target.claim}: {len(shipped.files)} file(s), {mib:.1f} MiB")
        finally:
            _run(kubectl, "delete", "pod", pod, *namespace, "--ignore-not-found", "--wait=true", quiet_failure=True)
    except StepFailed as failed:
        print(f"shardeval: {failed}", file=sys.stderr)
        return 1
    return 0


def say(line: str) -> None:
    print(f"shardeval: {line}", file=sys.stderr)


def _failed(argv: list[str], code: int, hint: str) -> StepFailed:
    return StepFailed(
        f"{shlex.join(['kubectl', *argv])} failed (exit {code}): the run's preparation is not on the claim, so no Job "
        f"was applied; {hint}, then run again"
    )


def _run(kubectl: list[str], *args: str, hint: str = "fix what kubectl said above", quiet_failure: bool = False) -> None:
    code = subprocess.run([*kubectl, *args], stdout=subprocess.DEVNULL).returncode
    if code != 0 and not quiet_failure:
        raise _failed(list(args), code, hint)


def _holds(kubectl: list[str], exec_: list[str], results: str, shipped: PortablePreparation) -> bool:
    """Whether the claim holds this very preparation: its index, byte for byte, and every file it
    lists with its sha256 (a file changed on the claim is sent again, not left for the pods to refuse)."""
    held = subprocess.run([*kubectl, *exec_, "cat", f"{results}/{shipped.index_path}"], capture_output=True)
    if held.returncode != 0 or held.stdout != shipped.index:
        return False
    if not shipped.files:
        return True
    sums = "".join(f"{sha256}  {name}\n" for name, _, sha256 in shipped.files).encode()
    check = [*exec_, "sh", "-c", 'cd "$0" && sha256sum -c -', results]
    return subprocess.run([*kubectl, "exec", "-i", *check[1:]], input=sums, capture_output=True).returncode == 0


def _stream(kubectl: list[str], args: list[str], shipped: PortablePreparation, results: str) -> None:
    """The preparation as a tar stream into `kubectl exec -i`: every file, then the index."""
    proc = subprocess.Popen([*kubectl, "exec", "-i", *args[1:]], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert proc.stdin is not None
    try:
        _write_tar(proc.stdin, shipped)
        proc.stdin.close()
    except BrokenPipeError:  # tar may stop reading at the archive's end marker, before its padding: its exit decides
        pass
    code = proc.wait()
    if code != 0:
        hint = f"the pod's image needs sh and tar (cluster.upload.image), and its user must be able to write {results}"
        raise _failed(["exec", "-i", *args[1:-2], "<unpack the preparation>"], code, hint)


def _write_tar(out: IO[bytes], shipped: PortablePreparation) -> None:
    """Owned by no one in particular (uid 0, no names): the pod's user owns what it unpacks."""
    import io

    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for name, path, _ in shipped.files:
            info = tar.gettarinfo(path, arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mode = 0o644
            with open(path, "rb") as f:
                tar.addfile(info, f)
        index = tarfile.TarInfo(shipped.index_path)
        index.size, index.mode, index.mtime = len(shipped.index), 0o644, int(time.time())
        tar.addfile(index, io.BytesIO(shipped.index))
