"""`shardeval watch` on the real CPU vLLM (issue 42's acceptance): two checkpoint folders of
SmolLM2-135M-Instruct, each evaluated once through the managed `type: vllm` service, which a
checkpoint's cell starts on that checkpoint's own folder; then a third folder vLLM cannot load,
which fails in one line and leaves the sweep's other rows as they were.

The folders are hard links of the cached model's files (copies where the cache is on another
file system), with the marker, the file a trainer writes last, written last. step2 differs in
one file: its `generation_config.json` gains `"top_k": 20`. It still loads: vLLM reads that file
only for the sampling defaults of requests that leave a key out (here top_k, which at
temperature 0 picks nothing), and says so in its log, which shows that step2's vLLM read step2's
files. The changed file is written anew, never through a link into the cache.

Prepared by scripts/setup/vllm.sh (tests/vllm_real.py; skipped where it has not run). Each vLLM
start takes 25 s on an idle machine; three of them, one after another, fit in a few minutes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import shardeval_cmd
from vllm_real import managed_service, require_vllm

pytestmark = pytest.mark.timeout(1200)  # three vLLM starts on a busy 2-core machine; each watch is bounded by `until`

MARKER = "checkpoint.done"  # the file the "trainer" writes last
WATCH_TIMEOUT_S = 540  # one watch; `until: {idle_s}` ends it long before on an idle machine
N_PROBLEMS = 4


def write_checkpoint(model: Path, folder: Path, changed: dict[str, bytes] | None = None) -> None:
    """A checkpoint folder from the cached model: every file linked (or copied), `changed` files
    written anew, the marker last."""
    folder.mkdir(parents=True)
    changed = changed or {}
    for source in sorted(model.iterdir()):
        target = folder / source.name
        if source.name in changed:
            target.write_bytes(changed[source.name])
            continue
        try:
            os.link(source, target)
        except OSError:  # another file system, or links refused
            target.write_bytes(source.read_bytes())
    (folder / MARKER).write_text("done\n")


def sweep_config(path: Path, python: str, ckpt: Path) -> Path:
    template = managed_service(python, "set per checkpoint")  # `key: model` receives each checkpoint's path
    doc = {
        "services": {},
        "benchmarks": [
            {
                "name": "arith",
                "params": {"n": N_PROBLEMS},
                "max_concurrent": 4,
                "solver": {"generation": {"max_tokens": 8, "temperature": 0.0}},
            }
        ],
        "cluster": {"shards": 1},
        "output": {"progress_interval_s": 0},
        "sweep": {
            "checkpoints": {"template": template, "key": "model", "paths": f"{ckpt}/step*", "ready": {"marker": MARKER}},
            "watch": {"poll_s": 1, "retries": 0, "until": {"idle_s": 5}},
        },
    }
    path.write_text(json.dumps(doc))
    return path


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def checkpoints_state(out: Path) -> dict[str, Any]:
    try:
        return read_json(out / "watch" / "state.json")["checkpoints"]
    except (OSError, ValueError, KeyError):
        return {}


def start_watch(cfg: Path, out: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as f:
        return subprocess.Popen([sys.executable, "-m", "shardeval", "watch", str(cfg), "-o", str(out)], stdout=f, stderr=subprocess.STDOUT)


def finish(proc: subprocess.Popen[bytes], log: Path) -> tuple[int, str]:
    try:
        proc.wait(timeout=WATCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"the watch did not end by `until` within {WATCH_TIMEOUT_S} s:\n{log.read_text()[-6000:]}") from None
    return proc.returncode, log.read_text()


def vllm_start_s(vllm_log: Path) -> float:
    """Seconds from shardeval starting this cell's vLLM to its first answer being recorded (the
    header's stamp has whole seconds; the report prints it, nothing asserts it)."""
    header = next(line for line in vllm_log.read_text().splitlines() if line.startswith("# shardeval "))
    started = time.mktime(time.strptime(header.split()[2].rstrip(":"), "%Y-%m-%dT%H:%M:%S%z"))
    results = vllm_log.parent.parent / "arith" / "results.jsonl"
    first = min(json.loads(line)["started_at"] for line in results.read_text().splitlines()) if results.exists() else float("nan")
    return first - started


@dataclass
class Watched:
    """The first watch: step1 present at its start, step2 written while step1 was evaluated."""

    root: Path
    cfg: Path
    ckpt: Path
    model: Path
    code: int
    output: str
    wall_s: float


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> Watched:
    python, model_dir = require_vllm()
    model = Path(model_dir)
    base = tmp_path_factory.mktemp("watch_vllm")
    ckpt, out = base / "ckpt", base / "out"
    write_checkpoint(model, ckpt / "step1")
    cfg = sweep_config(base / "sweep.yaml", python, ckpt)
    t0 = time.monotonic()
    proc = start_watch(cfg, out, base / "watch1.log")
    try:
        deadline = time.monotonic() + 120
        while checkpoints_state(out).get("step1", {}).get("status") != "running":
            assert proc.poll() is None, (base / "watch1.log").read_text()
            assert time.monotonic() < deadline, "step1 was not launched within 120 s"
            time.sleep(0.2)
        generation = read_json(model / "generation_config.json")
        step2_generation = json.dumps({**generation, "top_k": 20}, indent=2).encode()
        write_checkpoint(model, ckpt / "step2", {"generation_config.json": step2_generation})
        code, output = finish(proc, base / "watch1.log")
    finally:
        if proc.poll() is None:
            proc.kill()
    return Watched(out, cfg, ckpt, model, code, output, time.monotonic() - t0)


def test_two_checkpoints_each_served_by_its_own_vllm_once(watched: Watched) -> None:
    out, ckpt = watched.root, watched.ckpt
    assert watched.code == 0, watched.output[-6000:]
    assert "watch ended (until: nothing new for 5 s): 2 done, 0 with errors, 0 failed; exit 0" in watched.output, watched.output
    state = checkpoints_state(out)
    assert {name: (c["status"], c["launches"]) for name, c in state.items()} == {"step1": ("done", 1), "step2": ("done", 1)}
    assert sorted(p.name for p in (out / "watch" / "logs").iterdir()) == ["step1.1.log", "step2.1.log"]
    assert state["step2"]["launched_at"] >= state["step1"]["finished_at"]  # one vLLM at a time on this machine

    starts = {}
    for name in ("step1", "step2"):
        folder, other = str(ckpt / name), str(ckpt / ("step2" if name == "step1" else "step1"))
        cell = out / name / "shard_0"
        manifest = read_json(cell / "manifest.json")
        assert manifest["state"] == "complete", manifest
        served = manifest["served"]
        assert [s["root"] for s in served.values()] == [folder], served  # the weights this cell's vLLM loaded
        vllm_log = (cell / "logs" / f"vllm-{name}.log").read_text()  # a service not named `model` logs under its name
        header = next(line for line in vllm_log.splitlines() if line.startswith("# shardeval ") and "starting" in line)
        assert f"--model {folder} " in header and other not in vllm_log, header
        results = [json.loads(line) for line in (cell / "arith" / "results.jsonl").read_text().splitlines()]
        assert len(results) == N_PROBLEMS and all(r["status"] == "ok" for r in results), results
        starts[name] = vllm_start_s(cell / "logs" / f"vllm-{name}.log")
    # step2's one changed file was read by step2's vLLM ("Default vLLM sampling parameters have been
    # overridden by the model's `generation_config.json`: `{'top_k': 20}`"), and only by it
    assert "{'top_k': 20}" in (out / "step2" / "shard_0" / "logs" / "vllm-step2.log").read_text()
    assert "top_k" not in (out / "step1" / "shard_0" / "logs" / "vllm-step1.log").read_text()

    sweep = read_json(out / "merged" / "sweep.json")
    assert sweep["services"] == ["step1", "step2"] and sweep["baseline"] == "step1" and not sweep["partial"], sweep
    assert {c["service"] for c in sweep["cells"]} == {"step1", "step2"}
    assert all(c["complete"] and c["n_ok"] == N_PROBLEMS for c in sweep["cells"]), sweep["cells"]
    rows = [r for r in sweep["vs_baseline"] if r["service"] == "step2"]
    assert rows and all(r["complete"] and r["n"] == N_PROBLEMS for r in rows), sweep["vs_baseline"]
    print(
        f"\nwatch of 2 checkpoints: {watched.wall_s:.0f} s; vLLM start to first answer: "
        + ", ".join(f"{n} {s:.0f} s" for n, s in starts.items())
    )


def test_a_checkpoint_vllm_cannot_load_fails_in_one_line_and_the_watch_goes_on(watched: Watched) -> None:
    """The same sweep watched again with a third folder whose config.json is no JSON: vLLM exits
    at start; with `retries: 0` the checkpoint is failed at once, one warning line says why, the
    watch ends by `until` with exit 1, and step1's and step2's rows are as they were."""
    assert watched.code == 0, "the first watch did not end cleanly"
    out, ckpt = watched.root, watched.ckpt
    before = read_json(out / "merged" / "sweep.json")
    write_checkpoint(watched.model, ckpt / "step3", {"config.json": b'{"architectures": ["LlamaForCausalLM"], '})
    t0 = time.monotonic()
    code, output = finish(start_watch(watched.cfg, out, out.parent / "watch2.log"), out.parent / "watch2.log")
    assert code == 1, output[-6000:]
    state = checkpoints_state(out)
    assert {name: (c["status"], c["launches"]) for name, c in state.items()} == {
        "step1": ("done", 1),
        "step2": ("done", 1),
        "step3": ("failed", 1),
    }, state
    assert sorted(p.name for p in (out / "watch" / "logs").iterdir()) == ["step1.1.log", "step2.1.log", "step3.1.log"]
    warnings = [line for line in output.splitlines() if "step3" in line and "failed" in line and "watch ended" not in line]
    assert len(warnings) == 1, output
    (line,) = warnings
    # what happened and why (the last line of the traceback vLLM's log ends with), not only that it failed
    assert "service 'step3' (vllm): exited during start-up" in line and f"{ckpt / 'step3' / 'config.json'}' is not a valid JSON" in line, (
        line
    )
    assert "watch ended (until: nothing new for 5 s): 2 done, 0 with errors, 1 failed; exit 1" in output, output
    assert state["step3"]["why"].startswith("failed after 1 launch(es): ") and "\n" not in state["step3"]["why"], state["step3"]

    status = shardeval_cmd("status", str(out), timeout=120)  # the watch's table: step3's row says why, in its one line
    assert [line for line in status.stdout.splitlines() if "step3" in line and "failed after 1 launch(es)" in line and "JSON" in line], (
        status
    )

    after = read_json(out / "merged" / "sweep.json")
    assert after["services"] == ["step1", "step2", "step3"]
    (failed,) = after["failed"]  # the row is marked failed, with why, not only missing
    assert (failed["service"], failed["shard"]) == ("step3", "0/1") and "exited during start-up" in failed["why"], failed
    assert "step3: shard 0/1 failed: service" in (out / "merged" / "sweep.md").read_text()

    def rows(doc: dict[str, Any], key: str) -> list[Any]:
        return [r for r in doc[key] if r["service"] in ("step1", "step2")]

    assert rows(after, "cells") == rows(before, "cells") and rows(after, "vs_baseline") == rows(before, "vs_baseline")
    assert not any(c["complete"] for c in after["cells"] if c["service"] == "step3"), after["cells"]
    print(f"\nwatch of a checkpoint vLLM cannot load: {time.monotonic() - t0:.0f} s")
