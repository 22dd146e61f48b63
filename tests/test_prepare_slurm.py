"""Issue 43 on a real SLURM: the launch prepares on the submitting host, the nodes read what it
prepared, and neither the array tasks nor the merge job open anything from the network.

The one-node SLURM of scripts/setup/slurm.sh (the `slurm` fixture of tests/test_slurm.py). A BYO
benchmark whose data and images are http:// URLs of a server this test runs; the managed simulator
of each task reads the same mapping. `shardeval run` prepares (the data and the images fetched
into OUT/prepared/cache, checksummed) and only then submits the array, held (`--hold`), so
the test can stop the data server, and remove the submitting host's own download cache, before
any task starts: a task that fetched anything would fail.

The node-side check: the tasks and the merge job run with a `sitecustomize.py` on PYTHONPATH (a
`cluster.setup` line) that records, in every Python process they start (each shard, its
simulator, the merge), every name looked up and every socket connected to. The test reads those
records: each task's and the merge job's processes were watched, and nothing was looked up or
connected to but loopback addresses other than the stopped data server (the shard's own
simulator: its model endpoint).
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from datetime import datetime
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, shardeval_cmd
from test_slurm import done, jobs, logs, slurm, tasks, wait_until  # noqa: F401  (fixtures: a running SLURM, jobs cancelled after)

pytestmark = pytest.mark.timeout(300)

TRIVIA = Path(REPO) / "examples" / "byo" / "trivia.jsonl"
SHARDS = 3

# Loaded by every Python process of a task or of the merge job (PYTHONPATH, from cluster.setup):
# one JSON line per event into $SHARDEVAL_TEST_NETLOG/<pid>.jsonl, written before the call is made.
NETWORK_RECORDER = '''\
"""Records every name lookup and socket connect of this process (tests/test_prepare_slurm.py)."""
import json
import os
import socket

_folder = os.environ.get("SHARDEVAL_TEST_NETLOG")
if _folder:
    _path = os.path.join(_folder, f"{os.getpid()}.jsonl")
    _slurm = {key: os.environ.get(key) for key in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID")}

    def _note(event, **what):
        with open(_path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"event": event, "pid": os.getpid(), **_slurm, **what}) + "\\n")

    with open("/proc/self/cmdline", "rb") as _f:
        _note("start", argv=[a.decode(errors="replace") for a in _f.read().split(b"\\0") if a][:6])
    _connect, _connect_ex, _getaddrinfo = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo

    def _where(sock, address):
        return {"family": int(sock.family), "address": list(address) if isinstance(address, tuple) else str(address)}

    def connect(self, address):
        _note("connect", **_where(self, address))
        return _connect(self, address)

    def connect_ex(self, address):
        _note("connect", **_where(self, address))
        return _connect_ex(self, address)

    def getaddrinfo(host, *args, **kwargs):
        _note("lookup", host=host if isinstance(host, str) else repr(host))
        return _getaddrinfo(host, *args, **kwargs)

    socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = connect, connect_ex, getaddrinfo
'''


class DataServer:
    """The "internet": a local http server of the benchmark's data and images, which records
    each path it served and is stopped once the run is prepared."""

    def __init__(self, folder: Path) -> None:
        self.served: list[str] = []
        outer = self

        class Handler(SimpleHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                outer.served.append(self.path)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(folder)))
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


@pytest.fixture
def data_server(tmp_path: Path) -> Iterator[DataServer]:
    """trivia.jsonl with one picture a row, every file an http:// URL of the server."""
    pil = pytest.importorskip("PIL.Image", reason="images need pillow (the `images` extra)")
    folder = tmp_path / "www"
    (folder / "img").mkdir(parents=True)
    for name, colour in (("red", (200, 30, 30)), ("blue", (30, 30, 200))):
        pil.new("RGB", (8, 8), colour).save(folder / "img" / f"{name}.png")
    server = DataServer(folder)
    rows = [json.loads(line) for line in TRIVIA.read_text().splitlines() if line.strip()]
    with open(folder / "trivia.jsonl", "w", encoding="utf-8") as f:
        for i, row in enumerate(rows):
            f.write(json.dumps({**row, "images": [f"{server.url}/img/{('red', 'blue')[i % 2]}.png"]}) + "\n")
    try:
        yield server
    finally:
        server.stop()


def write_config(tmp_path: Path, server: DataServer, root: Path, netlog: Path, recorder: Path) -> Path:
    spec = tmp_path / "trivia_url.yaml"
    spec.write_text(
        "name: trivia_url\n"
        f"data: {server.url}/trivia.jsonl\n"
        "fields: {id: id, input: question, target: answer, category: category}\n"
        'prompt: "Question: {input}\\nAnswer:"\n'
        "scorer: exact\n"
        "metrics: [accuracy]\n"
    )
    config: dict[str, Any] = {
        "services": {"model": {"type": "sim", "bench": str(spec), "accuracy": 0.7, "ttft_ms": 5, "itl_ms": 0}},
        "benchmarks": [
            {
                "name": "custom",
                "params": {"spec": str(spec)},
                "repeats": 2,
                "max_concurrent": 8,
                "solver": {"type": "simple", "service": "model", "generation": {"temperature": 0.7, "max_tokens": 32}},
            }
        ],
        "cluster": {
            "type": "slurm",
            "shards": SHARDS,
            "walltime": "00:10:00",
            "partition": "debug",
            "max_parallel": SHARDS,
            "sbatch_extra_flags": ["--hold"],  # queued until the test has taken the "internet" away
            "setup": [f"export PYTHONPATH={recorder}$${{PYTHONPATH:+:$$PYTHONPATH}}"],  # $$: a literal $ in a config
            "env": {"SHARDEVAL_TEST_NETLOG": str(netlog)},
        },
        "output": {"dir": str(root), "progress_interval_s": 0},
    }
    path = tmp_path / "prepared_slurm.yaml"
    path.write_text(json.dumps(config))  # YAML is a superset of JSON
    return path


def network_events(netlog: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted(netlog.glob("*.jsonl")) for line in path.read_text().splitlines()]


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def slurm_time(job: str, key: str) -> float:
    """A job's SubmitTime, StartTime, … (local time, to the second) as a Unix time."""
    text = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True, timeout=60, check=True).stdout
    value = next(word.split("=", 1)[1] for word in text.split() if word.startswith(f"{key}="))
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S").timestamp()


def test_launch_prepares_then_tasks_and_merge_read_it_without_network(
    slurm: str,
    tmp_path: Path,
    jobs: list[str],
    data_server: DataServer,
) -> None:
    root, netlog, recorder = tmp_path / "prepared run", tmp_path / "netlog", tmp_path / "recorder"
    netlog.mkdir()
    recorder.mkdir()
    (recorder / "sitecustomize.py").write_text(NETWORK_RECORDER)
    config = write_config(tmp_path, data_server, root, netlog, recorder)
    login_cache = tmp_path / "login-cache"  # the submitting host's own download cache: gone before the tasks run
    env = {"SHARDEVAL_CACHE_DIR": str(login_cache)}

    launch = shardeval_cmd("run", str(config), "-o", str(root), env=env, timeout=180)
    assert launch.returncode == 0, launch.stderr
    record = json.loads((root / "slurm_job.json").read_text())
    array, merge = record["array_job_id"], record["merge_job_id"]
    jobs += [array, merge]

    # Prepared on the submitting host, before the array was submitted
    said = launch.stderr
    assert "prepared the run for nodes without internet: 1 benchmark(s)" in said, said
    assert said.index("prepared the run for nodes without internet") < said.index("submitted array job"), said
    preparation = json.loads((root / "prepared" / "preparation.json").read_text())
    assert int(preparation["prepared_at"]) <= slurm_time(array, "SubmitTime")
    assert preparation["cache_in_root"] == "prepared/cache" and preparation["cache_dir"] == str(root / "prepared" / "cache")
    [bench] = preparation["benchmarks"]
    assert (bench["name"], bench["n_problems"]) == ("trivia_url", 23)
    prepared = {f["path"] for f in preparation["files"]}
    assert any(p.startswith("datasets/") and p.endswith("/trivia.jsonl") for p in prepared), prepared
    assert sum(p.startswith("images/") for p in prepared) >= 2, prepared  # both pictures, by URL
    assert {"/trivia.jsonl", "/img/red.png", "/img/blue.png"} <= set(data_server.served), data_server.served
    assert tasks(array) == {str(i): "PENDING" for i in range(SHARDS)}  # held: nothing ran yet

    # The "internet" goes away; so does every copy but the preparation's
    data_server.stop()
    served_before = len(data_server.served)
    shutil.rmtree(login_cache)
    subprocess.run(["scontrol", "release", array], check=True, timeout=60)
    wait_until("the merge job to finish", lambda: done(merge), timeout=240, root=root)
    assert tasks(array) == {str(i): "COMPLETED" for i in range(SHARDS)}, logs(root)
    assert tasks(merge) == {"-": "COMPLETED"}, logs(root)
    assert len(data_server.served) == served_before

    scores = json.loads((root / "merged" / "scores.json").read_text())["trivia_url"]
    assert (scores["n_expected"], scores["n_records"], scores["n_missing"], scores["n_errors"]) == (46, 46, 0, 0), scores
    for i in range(SHARDS):
        err = (root / f"shard_{i}" / "logs" / f"slurm-{array}_{i}.err").read_text()
        assert f"prepared run: reading {len(prepared)} prepared file(s) from {root / 'prepared' / 'cache'}; offline" in err, err
        assert json.loads((root / f"shard_{i}" / "manifest.json").read_text())["state"] == "complete"
    merge_err = (root / "logs" / f"merge-{merge}.err").read_text()
    assert f"prepared run: the merge reads {len(prepared)} prepared file(s)" in merge_err, merge_err
    assert "COMPLETE" in (root / "logs" / f"merge-{merge}.out").read_text()

    # The node-side check: every process of every task and of the merge job was watched ...
    events = network_events(netlog)
    starts = [e for e in events if e["event"] == "start"]
    task_jobs = {e["SLURM_ARRAY_TASK_ID"] for e in starts if e["SLURM_ARRAY_JOB_ID"] == array}
    assert task_jobs == {str(i) for i in range(SHARDS)}, starts
    assert any(e["SLURM_JOB_ID"] == merge and "merge" in e["argv"] for e in starts), starts
    sims = [e for e in starts if e["SLURM_ARRAY_JOB_ID"] == array and "sim" in e["argv"]]
    assert len(sims) == SHARDS, starts  # each task's own simulator
    # ... and none looked up a name or connected anywhere but loopback, never to the data server
    lookups = [e for e in events if e["event"] == "lookup"]
    connects = [e for e in events if e["event"] == "connect" and e["family"] in (2, 10)]  # AF_INET, AF_INET6
    assert connects, "the shards talked to their simulators: the recorder sees connects"
    assert not [e for e in lookups if not is_loopback(e["host"])], lookups
    assert not [e for e in connects if not is_loopback(e["address"][0])], connects
    assert not [e for e in connects if e["address"][1] == data_server.port], connects

    # Launched again: the run is prepared (nothing to fetch) and complete (nothing submitted)
    again = shardeval_cmd("run", str(config), "-o", str(root), timeout=120)
    assert again.returncode == 0, again.stderr
    assert "nothing to fetch" in again.stderr and "prepared the run" not in again.stderr, again.stderr
    assert "already complete: nothing submitted" in again.stdout, again.stdout
    assert json.loads((root / "prepared" / "preparation.json").read_text()) == preparation


def test_a_preparation_found_under_another_mount_reads_its_cache_there(tmp_path: Path) -> None:
    """A container mounts the run's root at /results, not where the submitting host prepared it:
    the default cache (inside the root) is found under the root the preparation was found at;
    a cache outside the root (prepare.cache_dir, a shared folder) stays where it was."""
    from shardeval.store.prepared import list_files, new_preparation, read_preparation, verify, write_preparation

    prepared_at = tmp_path / "login" / "run"
    cache = prepared_at / "prepared" / "cache"
    (cache / "datasets").mkdir(parents=True)
    (cache / "datasets" / "data.jsonl").write_text('{"q": 1}\n')
    preparation = new_preparation("0", "login", str(cache), "hash", str(prepared_at))
    preparation.files = list_files(str(cache))
    write_preparation(str(prepared_at), preparation)
    mounted = tmp_path / "results"
    shutil.move(str(prepared_at), mounted)

    found = read_preparation(str(mounted))
    assert found is not None and found.cache_dir == str(mounted / "prepared" / "cache")
    assert verify(found) is None

    shared = tmp_path / "shared-cache"
    shared.mkdir()
    outside = new_preparation("0", "login", str(shared), "hash", str(mounted))
    write_preparation(str(mounted), outside)
    found = read_preparation(str(mounted))
    assert found is not None and (found.cache_in_root, found.cache_dir) == (None, str(shared))
