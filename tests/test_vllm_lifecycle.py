"""The managed `vllm` service inside a real `shardeval run`: the server dying mid-run, and SIGTERM.
A third-party managed service (tests/managed_service_plugin.py) dies the same way.

The simulator stands in for vLLM (it accepts vLLM's flags), launched through a tiny wrapper
that writes its pid to a file first, so the test can kill exactly that server and check that it is
gone afterwards. The other lifecycle paths (slow start, crash at start, port taken, exception in
the evaluation) are in tests/test_vllm_service.py; the same paths against a real vLLM are in
tests/test_vllm_real.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import process_alive as alive

N_PROBLEMS = 120


def write_config(tmp_path: Path, pidfile: Path, itl_ms: float = 20.0, kind: str = "vllm") -> Path:
    """A config whose `model` service is `type: vllm`, launching the simulator as vLLM would be
    (or the third-party `type: wrapped`, launching it as written)."""
    wrapper = tmp_path / "pidwrap.py"
    wrapper.write_text(
        f"import os, sys\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\nos.execv(sys.executable, [sys.executable, *sys.argv[1:]])\n"
    )
    launch = [
        sys.executable, str(wrapper), "-m", "shardeval", "sim", "--bench", "arith", "--ttft-ms", "100",
        "--itl-ms", str(itl_ms), "--output-tokens", "16", "--model",
    ]  # fmt: skip
    service = {"type": "vllm", "model": "sim", "launch_command": launch, "port": 0, "startup_timeout_s": 60, "stop_timeout_s": 5}
    if kind == "wrapped":
        service = {"type": "wrapped", "argv": [*launch, "sim", "--host", "127.0.0.1", "--port", "0"]}
    cfg = {
        "services": {"model": service},
        "benchmarks": [{"name": "arith", "params": {"n": N_PROBLEMS}, "max_concurrent": 4}],
        "output": {"progress_interval_s": 0},
    }
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(cfg))  # JSON is YAML
    return path


def start_shard(config: Path, out: Path) -> subprocess.Popen[str]:
    path = os.pathsep.join(p for p in (os.path.dirname(__file__), os.environ.get("PYTHONPATH")) if p)
    return subprocess.Popen(
        [sys.executable, "-m", "shardeval", "run", str(config), "--shard", "0/1", "-o", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "SHARDEVAL_PLUGINS": "managed_service_plugin", "PYTHONPATH": path},
    )


def wait_for_records(out: Path, n: int, proc: subprocess.Popen[str], timeout: float = 90.0) -> None:
    """Until the shard has written `n` results (generous deadline: the CI machine may be busy)."""
    results = out / "arith" / "results.jsonl"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if results.exists() and results.read_bytes().count(b"\n") >= n:
            return
        assert proc.poll() is None, proc.communicate()[0]
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"no {n} records within {timeout} s: {proc.communicate()[0]}")


def read_records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "arith" / "results.jsonl").read_text().splitlines()]


def wait_dead(pid: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


@pytest.mark.parametrize("kind", ["vllm", "wrapped"])
def test_server_killed_mid_run_fails_the_shard_with_the_reason(tmp_path: Path, kind: str) -> None:
    pidfile = tmp_path / "server.pid"
    config = write_config(tmp_path, pidfile, kind=kind)
    out = tmp_path / "shard0"
    proc = start_shard(config, out)
    wait_for_records(out, 8, proc)
    server = int(pidfile.read_text())
    os.killpg(server, signal.SIGKILL)  # the whole group, as the OOM killer or an admin would
    t0 = time.monotonic()
    output, _ = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 30, "the shard noticed the dead server late (retrying into a closed port?)"
    assert proc.returncode == 1, output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["state"] == "failed"
    assert manifest["reason"].startswith(f"service 'model' ({kind}) exited with status -9 (killed by SIGKILL): ")
    assert "exited with status -9" in output  # one clear line for the user too
    records = read_records(out)  # every line whole; what finished is kept
    assert 8 <= len(records) < N_PROBLEMS
    for r in records:  # requests cut by the death are not recorded, or recorded as unscored errors
        assert r["status"] == "ok" or (r["error_kind"] == "connection" and r.get("score") is None), r
    n_ok = sum(r["status"] == "ok" for r in records)
    assert manifest["benchmarks"][0]["n_ok"] == n_ok

    # A rerun (the server healthy again) resumes: only what is missing is asked, nothing twice.
    rerun = start_shard(config, out)
    output, _ = rerun.communicate(timeout=180)
    assert rerun.returncode == 0, output
    ok = [(r["problem_idx"], r["repeat"]) for r in read_records(out) if r["status"] == "ok"]
    assert len(ok) == len(set(ok)) == N_PROBLEMS
    assert json.loads((out / "manifest.json").read_text())["state"] == "complete"
    assert wait_dead(int(pidfile.read_text()))


def test_sigterm_of_the_shard_stops_the_server(tmp_path: Path) -> None:
    pidfile = tmp_path / "server.pid"
    out = tmp_path / "shard0"
    proc = start_shard(write_config(tmp_path, pidfile), out)
    wait_for_records(out, 4, proc)
    server = int(pidfile.read_text())
    assert alive(server)
    proc.send_signal(signal.SIGTERM)  # what SLURM sends at the time limit or on scancel
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, output
    assert wait_dead(server), "the vllm child outlived the shard"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["state"] == "interrupted" and manifest["reason"] == "SIGTERM"
    log = (out / "logs" / "vllm.log").read_text()
    assert "stopped" in log
    records = read_records(out)
    assert all(r["status"] == "ok" for r in records)  # drained, not cut
