"""Nothing mixed, ever: run identity, served identity, output names, fingerprints, one standing rule.

Every run here is a real `shardeval run` process against a real simulator on 127.0.0.1 (also
launched by the `vllm` service plugin, standing in for vLLM: it reports `root` as vLLM does).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from conftest import running_sim, shardeval_cmd
from shard_factory import make_shard, record
from shardeval.config.loading import load_config
from shardeval.identity import config_hash
from shardeval.store.records import Manifest, ServedModel, encode_line, read_manifest, write_manifest

# --- the vLLM service's identity ------------------------------------------------------------------

VLLM_BASE = {"type": "vllm", "model": "/ckpt/step1000", "served_model_name": "policy"}

# Each key that changes what vLLM answers, with a second value.
VLLM_IDENTITY_CHANGES = {
    "model": "/ckpt/step2000",
    "served_model_name": "policy-v2",
    "revision": "abc123",
    "dtype": "bfloat16",
    "quantization": "fp8",
    "tensor_parallel_size": 4,
    "pipeline_parallel_size": 2,
    "max_model_len": 4096,
    "generation_config": "vllm",
    "extra_args": ["--enable-prefix-caching"],
}
# Keys that change where or how it runs, never what it answers.
VLLM_TRANSPORT_CHANGES = {
    "port": 9001,
    "host": "0.0.0.0",
    "startup_timeout_s": 60.0,
    "stop_timeout_s": 5.0,
    "node_pool": "gpu-a100",
    "health_path": "/v1/models",
    "api_key_env": "OTHER_KEY",
    "adaptive": True,
}


def vllm_config_hash(tmp_path: Path, **service: Any) -> str:
    cfg = tmp_path / f"c{len(list(tmp_path.iterdir()))}.yaml"
    cfg.write_text(json.dumps({"services": {"model": {**VLLM_BASE, **service}}, "benchmarks": [{"name": "arith"}]}))
    return config_hash(load_config(str(cfg)))


@pytest.mark.parametrize("key", sorted(VLLM_IDENTITY_CHANGES))
def test_each_vllm_identity_key_changes_the_run_identity(tmp_path: Path, key: str) -> None:
    assert vllm_config_hash(tmp_path, **{key: VLLM_IDENTITY_CHANGES[key]}) != vllm_config_hash(tmp_path)


@pytest.mark.parametrize("key", sorted(VLLM_TRANSPORT_CHANGES))
def test_vllm_transport_keys_leave_the_run_identity(tmp_path: Path, key: str) -> None:
    assert vllm_config_hash(tmp_path, **{key: VLLM_TRANSPORT_CHANGES[key]}) == vllm_config_hash(tmp_path)


def test_a_written_out_launch_command_counts_only_without_standard_args(tmp_path: Path) -> None:
    a = ["python", "-m", "sglang.launch_server", "--model-path", "{model}", "--dtype", "half"]
    b = [*a[:-1], "float"]
    assert vllm_config_hash(tmp_path, launch_command=a) == vllm_config_hash(tmp_path, launch_command=b)
    assert vllm_config_hash(tmp_path, launch_command=a, standard_args=False) != vllm_config_hash(
        tmp_path, launch_command=b, standard_args=False
    )


def test_every_builtin_service_declares_its_identity() -> None:
    from shardeval import plugins

    services = plugins.registry().entries["services"]
    assert {"api", "sim", "vllm"} <= set(services)
    assert [name for name, e in services.items() if not e.config.declares_identity()] == []
    assert plugins.undeclared_identities(plugins.registry()) == []


UNDECLARED_PLUGIN = """
from shardeval.config import ServiceConfig
from shardeval.hookspecs import hookimpl


class NoIdentityConfig(ServiceConfig, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    url: str = "http://127.0.0.1:1/v1"
    weights: str = "w1"


@hookimpl
def register_services(register):
    register("noident", lambda *a: None, config=NoIdentityConfig)
"""


def test_a_service_without_declared_identity_is_warned_at_load_and_counts_every_key(tmp_path: Path) -> None:
    (tmp_path / "noident_plugin.py").write_text(UNDECLARED_PLUGIN)
    env = {"SHARDEVAL_PLUGINS": "noident_plugin", "PYTHONPATH": str(tmp_path)}
    listed = shardeval_cmd("plugins", env=env)
    assert listed.returncode == 0, listed.stderr
    warning = [line for line in listed.stderr.splitlines() if "noident" in line]
    assert len(warning) == 1 and "does not declare which of its keys change results" in warning[0]
    assert "identity()" in warning[0]
    # Undeclared: every key of its own section is identity (safe), transport keys it shares are not.
    sys.path.insert(0, str(tmp_path))
    try:
        from noident_plugin import NoIdentityConfig

        from shardeval.identity import service_identity

        one = service_identity(NoIdentityConfig(type="noident"))
        assert one == {"type": "noident", "protocol": "chat_completions", "url": "http://127.0.0.1:1/v1", "weights": "w1"}
        assert service_identity(NoIdentityConfig(type="noident", weights="w2")) != one
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("noident_plugin", None)


# --- defect 1: a new checkpoint never resumes from the old one's records -------------------------


def vllm_sim_config(tmp_path: Path, weights: str, n: int = 12) -> Path:
    """A `vllm` service whose engine is the simulator: it reports `root: <weights>` like vLLM."""
    launch = [
        sys.executable,
        "-m",
        "shardeval",
        "sim",
        "--ttft-ms",
        "0",
        "--itl-ms",
        "0",
        "--bench",
        "arith",
        "--bench-param",
        f"n={n}",
        "--root",
        "{model}",
    ]
    cfg = tmp_path / f"vllm_{os.path.basename(weights)}.yaml"
    cfg.write_text(
        json.dumps(
            {
                "services": {
                    "model": {
                        "type": "vllm",
                        "model": weights,
                        "served_model_name": "policy",
                        "port": 0,
                        "launch_command": launch,
                        "startup_timeout_s": 60,
                        "stop_timeout_s": 5,
                    }
                },
                "benchmarks": [{"name": "arith", "params": {"n": n}, "max_concurrent": 4}],
            }
        )
    )
    return cfg


def test_a_new_checkpoint_is_refused_on_resume_and_in_merge(tmp_path: Path) -> None:
    old, new = vllm_sim_config(tmp_path, "/ckpt/step1000"), vllm_sim_config(tmp_path, "/ckpt/step2000")
    out = tmp_path / "run"
    first = shardeval_cmd("run", str(old), "--shard", "0/2", "-o", str(out / "shard_0"), timeout=120)
    assert first.returncode == 0, first.stderr
    m = read_manifest(str(out / "shard_0"))
    assert m is not None and m.served["model"].root == "/ckpt/step1000" and m.served["model"].model == "policy"

    again = shardeval_cmd("run", str(new), "--shard", "0/2", "-o", str(out / "shard_0"), timeout=120)
    assert again.returncode == 2
    lines = again.stderr.strip().splitlines()
    assert len(lines) == 2 and "cannot be resumed" in lines[-1] and "--fresh" in lines[-1], again.stderr  # the shard line, then the error

    other = shardeval_cmd("run", str(new), "--shard", "1/2", "-o", str(out / "shard_1"), timeout=120)
    assert other.returncode == 0, other.stderr
    merged = shardeval_cmd("merge", str(out))
    assert merged.returncode == 2 and "shard_1" in merged.stderr and "config" in merged.stderr
    assert len(merged.stderr.strip().splitlines()) == 1


# --- acceptance 2: shards served different weights ------------------------------------------------


def api_config(tmp_path: Path, n: int = 20) -> Path:
    cfg = tmp_path / "api.yaml"
    cfg.write_text(
        "services:\n  model: {type: api, url: '${SIM_URL}', model: sim, retries: {attempts: 2, backoff_base: 0.05}}\n"
        f"benchmarks:\n  - {{name: arith, params: {{n: {n}}}, repeats: 2, max_concurrent: 8}}\n"
    )
    return cfg


def test_shards_served_by_different_weights_are_refused_unless_allowed(tmp_path: Path) -> None:
    cfg, out = api_config(tmp_path), tmp_path / "run"
    sim_args = ("--bench", "arith", "--bench-param", "n=20", "--ttft-ms", "0", "--itl-ms", "0")
    with running_sim(*sim_args, "--root", "/a") as url_a, running_sim(*sim_args, "--root", "/b") as url_b:
        for idx, url in ((0, url_a), (1, url_b)):
            done = shardeval_cmd("run", str(cfg), "--shard", f"{idx}/2", "-o", str(out / f"shard_{idx}"), env={"SIM_URL": url})
            assert done.returncode == 0, done.stderr
        assert read_manifest(str(out / "shard_1")).served["model"].root == "/b"

        merged = shardeval_cmd("merge", str(out))
        lines = merged.stderr.strip().splitlines()
        assert merged.returncode == 2 and len(lines) == 1, merged.stderr
        assert "shard_1" in lines[0] and "root /b" in lines[0] and "root /a" in lines[0] and "--allow-mixed-models" in lines[0]
        assert "shard_0 (" not in lines[0]  # the odd one is named, not the majority

        untouched = shardeval_cmd("run", str(cfg), "--shard", "0/2", "-o", str(out / "shard_0"), env={"SIM_URL": url_b})
        assert untouched.returncode == 0 and "nothing to ask, no service started" in untouched.stderr  # complete: asks no one
        results = out / "shard_0" / "arith" / "results.jsonl"
        results.write_bytes(b"".join(results.read_bytes().splitlines(keepends=True)[:-3]))  # 3 pairs left to ask
        before = (out / "shard_0" / "manifest.json").read_bytes()
        resumed = shardeval_cmd("run", str(cfg), "--shard", "0/2", "-o", str(out / "shard_0"), env={"SIM_URL": url_b})
        lines = resumed.stderr.strip().splitlines()
        assert resumed.returncode == 2, resumed.stderr
        assert "cannot be resumed" in lines[-1] and "root /a" in lines[-1] and "root /b" in lines[-1] and "--fresh" in lines[-1]
        assert "Traceback" not in resumed.stderr
        assert (out / "shard_0" / "manifest.json").read_bytes() == before  # the refusal left it as it was

        status = shardeval_cmd("status", str(out))
        assert status.returncode == 0 and "different models" in status.stdout

    allowed = shardeval_cmd("merge", str(out), "--allow-mixed-models")
    assert allowed.returncode == 3 and "not complete: PARTIAL" in allowed.stderr, allowed.stderr  # written; cells missing
    report = (out / "merged" / "report.md").read_text()
    assert "MIXED MODELS" in report and "**varies**: /a (shard_0); /b (shard_1)" in report
    scores = json.loads((out / "merged" / "scores.json").read_text())
    assert scores["arith"]["mixed_models"] and scores["arith"]["n_ok"] == 37


def test_a_resume_against_the_same_weights_goes_on(tmp_path: Path) -> None:
    cfg, out = api_config(tmp_path), tmp_path / "one"
    with running_sim("--bench", "arith", "--bench-param", "n=20", "--root", "/a", "--fail-5xx", "0.3") as url:
        first = shardeval_cmd("run", str(cfg), "-o", str(out), env={"SIM_URL": url})
        assert first.returncode == 3, first.stderr  # finished with 5xx errors: a rerun asks them again
    with running_sim("--bench", "arith", "--bench-param", "n=20", "--root", "/a") as url:
        again = shardeval_cmd("run", str(cfg), "-o", str(out), env={"SIM_URL": url})
        assert again.returncode == 0, again.stderr
    m = read_manifest(str(out))
    assert m.state == "complete" and m.served["model"].root == "/a" and m.served["model"].server_version


def test_an_endpoint_without_models_route_is_recorded_as_unknown(tmp_path: Path) -> None:
    """A server without /v1/models: the shard runs, the served identity is unknown, nothing is compared."""
    from shardeval.results.merge import merge_run

    root = tmp_path / "run"
    for idx, served in enumerate((ServedModel(model="m", error="/v1/models: HTTP 404"), ServedModel(model="m", root="/a"))):
        path = make_shard(str(root), idx, 2, n_problems=10)
        m = read_manifest(path)
        m.served = {"model": served}
        write_manifest(path, m)
    assert merge_run(str(root)).run.mixed_served == []


# --- defect 2: output names are unique or refused --------------------------------------------------


def test_two_data_files_of_one_name_are_refused_then_told_apart_by_id(tmp_path: Path, sim: str) -> None:
    for folder, answer in (("a", "1"), ("b", "2")):
        (tmp_path / folder).mkdir()
        rows = [{"id": f"{folder}{i}", "prompt": f"What is {i} + {answer}?", "reference": str(i + int(answer))} for i in range(5)]
        (tmp_path / folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    body = "services:\n  model: {type: api, url: '%s', model: sim}\nbenchmarks:\n" % sim
    clash = tmp_path / "clash.yaml"
    clash.write_text(body + f"  - name: {tmp_path}/a/test.jsonl\n  - name: {tmp_path}/b/test.jsonl\n")
    refused = shardeval_cmd("run", str(clash), "-o", str(tmp_path / "out"))
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "benchmarks[0]" in lines[-1] and "benchmarks[1]" in lines[-1] and "<out>/test/" in lines[-1] and "id:" in lines[-1]
    assert not (tmp_path / "out" / "test").exists()  # refused before anything was written

    fixed = tmp_path / "fixed.yaml"
    fixed.write_text(body + f"  - name: {tmp_path}/a/test.jsonl\n  - {{name: {tmp_path}/b/test.jsonl, id: test_b}}\n")
    ran = shardeval_cmd("run", str(fixed), "-o", str(tmp_path / "out"))
    assert ran.returncode == 0, ran.stderr
    for folder, offset in (("test", 1), ("test_b", 2)):
        lines = [json.loads(line) for line in (tmp_path / "out" / folder / "results.jsonl").read_text().splitlines()]
        assert sorted(int(r["reference"]) for r in lines) == [i + offset for i in range(5)]
        assert {r["benchmark"] for r in lines} == {folder}


def test_the_same_benchmark_twice_needs_distinct_ids(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    base = "services:\n  model: {type: api, url: 'http://127.0.0.1:1/v1', model: m}\nbenchmarks:\n"
    cfg.write_text(base + "  - {name: arith, params: {n: 5}}\n  - {name: arith, params: {n: 9}}\n")
    with pytest.raises(Exception, match=r"give each a distinct `id`"):
        load_config(str(cfg))
    cfg.write_text(base + "  - {name: arith, id: small, params: {n: 5}}\n  - {name: arith, id: small, params: {n: 9}}\n")
    with pytest.raises(Exception, match=r"benchmarks\[1\]\.id: 'small' is already benchmarks\[0\]"):
        load_config(str(cfg))
    cfg.write_text(base + "  - {name: arith, id: 'a/b', params: {n: 5}}\n")
    with pytest.raises(Exception, match=r"not a usable folder name"):
        load_config(str(cfg))
    cfg.write_text(base + "  - {name: arith, id: small, params: {n: 5}}\n  - {name: arith, id: big, params: {n: 9}}\n")
    assert [b.id for b in load_config(str(cfg)).benchmarks] == ["small", "big"]


# --- one rule for which record stands --------------------------------------------------------------


def test_runner_merge_and_status_agree_on_the_standing_record(tmp_path: Path) -> None:
    """Cell 0: ok, error, ok with other content → the first ok. Cell 1: error, error → the last
    error. Cell 2: error then ok → the ok. Cell 3: nothing. Plus a line of another benchmark."""
    from shardeval.results.merge import merge_run
    from shardeval.store.records import read_manifest
    from shardeval.run.runner import ShardRun, Tally
    from shardeval.store.standing import Membership
    from shardeval.store.discover import load_shards
    from shardeval.results.status import shard_progress

    lines = [
        record("arith", 0, 0, 0, score=1.0),
        record("arith", 0, 0, 0, status="error", error="boom"),
        msgspec.structs.replace(record("arith", 0, 0, 0, score=0.0), response="#### 99", extracted="99"),
        record("arith", 1, 0, 0, status="error", error="first"),
        msgspec.structs.replace(record("arith", 1, 0, 0, status="error", error="latest"), error_kind="timeout"),
        record("arith", 2, 0, 0, status="error", error="retried"),
        record("arith", 2, 0, 0, score=1.0),
        record("other", 3, 0, 0, score=1.0),
    ]
    shard = make_shard(str(tmp_path / "run"), 0, 1, n_problems=4, records=lines)
    results = os.path.join(shard, "arith", "results.jsonl")

    # runner (resume): which cells count as done, and the score it resumes with
    runner = ShardRun.__new__(ShardRun)
    tally = Tally(4, 1)
    manifest = read_manifest(shard)
    own = Membership.of(manifest, manifest.benchmarks[0])
    assert runner._resume(results, os.path.join(shard, "arith", "trajectories.jsonl"), tally, own) == 2
    assert list(tally.status) == [1, 2, 1, 0] and tally.score_sum == 2.0 and tally.n_scored == 2

    # merge
    b = merge_run(str(tmp_path / "run")).benchmarks[0]
    assert list(b.cells.status) == list(tally.status)
    assert list(b.cells.score)[:1] == [1.0] and b.cells.score[2] == 1.0
    assert b.cells.n_duplicates == 1 and b.cells.n_conflicts == 1 and b.cells.n_superseded_errors == 1
    assert b.cells.n_foreign == 1
    with open(results, "rb") as f:
        f.seek(b.cells.offset[1])
        assert json.loads(f.read(b.cells.length[1]))["error"] == "latest"

    # status: cells, not lines
    progress = shard_progress(load_shards(str(tmp_path / "run")))[0]
    assert (progress.records, progress.errors) == (3, 1)


# --- prompt and scorer fingerprints ----------------------------------------------------------------


def test_prompt_and_scorer_fingerprints_see_what_the_data_fingerprint_does_not() -> None:
    from shardeval.identity import probe_indices, prompt_fingerprint, scorer_fingerprint
    from shardeval_benchmarks.arith import ArithBenchmark

    class Reworded(ArithBenchmark):
        def problem(self, idx):  # the same data, asked another way
            p = super().problem(idx)
            return msgspec.structs.replace(p, prompt="Answer briefly. " + (p.prompt or ""))

    class Stricter(ArithBenchmark):
        def score(self, problem, response):
            s = super().score(problem, response)
            return msgspec.structs.replace(s, score=0.0) if response.strip() == problem.reference else s

    base, reworded, stricter = ArithBenchmark({"n": 50}), Reworded({"n": 50}), Stricter({"n": 50})
    assert prompt_fingerprint(base, 50) == prompt_fingerprint(ArithBenchmark({"n": 50}), 50)
    assert prompt_fingerprint(reworded, 50) != prompt_fingerprint(base, 50)
    assert scorer_fingerprint(stricter, 50, None) != scorer_fingerprint(base, 50, None)
    assert scorer_fingerprint(base, 50, None) == scorer_fingerprint(ArithBenchmark({"n": 50}), 50, None)
    bumped = ArithBenchmark({"n": 50})
    bumped.scorer_version = "2"
    assert scorer_fingerprint(bumped, 50, None) != scorer_fingerprint(base, 50, None)
    assert probe_indices(3) == [0, 1, 2] and probe_indices(100) == [0, 14, 28, 42, 57, 71, 85, 99]


@pytest.mark.parametrize("field", ["prompt_fingerprint", "scorer_fingerprint"])
def test_merge_and_resume_refuse_shards_rendered_or_scored_differently(tmp_path: Path, field: str) -> None:
    from shardeval.errors import UsageError
    from shardeval.results.merge import merge_run
    from shardeval.run.resume import mismatch

    root = tmp_path / "run"
    for idx in range(3):
        path = make_shard(str(root), idx, 3, n_problems=9)
        m = read_manifest(path)
        setattr(m.benchmarks[0], field, "sha256:new" if idx != 1 else "sha256:old")
        write_manifest(path, m)
    with pytest.raises(UsageError, match=r"shard_1 \(arith (prompts|scorer) sha256:old\)"):
        merge_run(str(root))
    old, new = read_manifest(str(root / "shard_1")), read_manifest(str(root / "shard_0"))
    new = msgspec.structs.replace(new, shard_idx=1)
    new.benchmarks[0].range = old.benchmarks[0].range
    reason = mismatch(old, new)
    assert reason and "sha256:old → sha256:new" in reason


# --- provenance ------------------------------------------------------------------------------------


def test_every_manifest_carries_provenance_and_the_report_flags_what_varies(tmp_path: Path, sim: str) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("services:\n  model: {type: api, url: '%s', model: sim}\nbenchmarks:\n  - {name: arith, params: {n: 8}}\n" % sim)
    out = tmp_path / "run"
    for idx in range(2):
        done = shardeval_cmd("run", str(cfg), "--shard", f"{idx}/2", "-o", str(out / f"shard_{idx}"))
        assert done.returncode == 0, done.stderr
    m = read_manifest(str(out / "shard_0"))
    p = m.provenance
    assert p.shardeval and p.python.startswith("CPython 3.") and p.host and p.platform.startswith("linux")
    assert p.plugins["benchmarks"].startswith("shardeval ") and p.build_id is None  # not the one-file app
    b = m.benchmarks[0]
    assert b.dataset_fingerprint and b.prompt_fingerprint and b.scorer_fingerprint and b.service == "model"
    assert m.served["model"].root == "sim" and m.served["model"].max_model_len == 1 << 20

    merged = shardeval_cmd("merge", str(out))
    assert merged.returncode == 0, merged.stderr
    report = (out / "merged" / "report.md").read_text()
    assert "## Provenance" in report and "varies" not in report
    assert report.count(f"| python | {p.python} |") == 1

    m1 = read_manifest(str(out / "shard_1"))
    m1.provenance.python = "CPython 3.12.1"
    write_manifest(str(out / "shard_1"), m1)
    assert shardeval_cmd("merge", str(out)).returncode == 0
    report = (out / "merged" / "report.md").read_text()
    assert f"| python | **varies**: {p.python} (shard_0); CPython 3.12.1 (shard_1) |" in report


def test_dry_run_prints_the_run_identity(tmp_path: Path) -> None:
    def identity(**service: Any) -> str:
        cfg = tmp_path / "d.yaml"
        cfg.write_text(
            json.dumps({"services": {"model": {**VLLM_BASE, **service}}, "benchmarks": [{"name": "arith", "params": {"n": 10}}]})
        )
        done = shardeval_cmd("run", str(cfg), "--dry-run", "-o", str(tmp_path / "o"))
        assert done.returncode == 0, done.stderr
        assert "run identity" not in done.stdout  # stdout is what a dry run renders (a script, manifests)
        line = next(line for line in done.stderr.splitlines() if line.startswith("shardeval: run identity: "))
        return line.split()[3]

    assert identity() == identity(port=9000)
    assert identity() != identity(model="/ckpt/step2000")
    assert identity().startswith("sha256:")


def test_old_manifests_without_the_new_fields_still_load() -> None:
    old = {
        "version": "0.0.9",
        "shard_idx": 0,
        "total_shards": 1,
        "shard_source": "x",
        "config_hash": "sha256:1",
        "benchmarks": [{"name": "arith", "range": [0, 1], "repeats": 1, "n_problems": 1, "dataset_fingerprint": "d"}],
    }
    m = msgspec.json.decode(json.dumps(old), type=Manifest)
    assert m.served == {} and m.provenance is None and m.benchmarks[0].prompt_fingerprint is None
    assert encode_line(m)


@pytest.mark.parametrize(
    "section, key",
    [
        ({"type": "api", "url": "http://h:1/v1", "model": "m"}, "a1fef1f93be30d25822e64bf6ba64d94422aec153bfdd85bf13331eb736d039c"),
        ({"type": "sim"}, "40aea7ad8c8c31561793cb8350ef2b3cf4cd3cfb6e85b9a2c73d85b4bb8061c7"),
        ({"type": "vllm", "model": "org/w", "port": 8000}, "90f2e4dbc87f812d3519c0eb6135f6a4778bf1b8ff2d96192ee0dd51cffad7a9"),
    ],
)
def test_the_response_cache_key_is_the_one_earlier_caches_were_written_with(section: dict, key: str) -> None:
    """The key's rule moved into shardeval.identity (issue 25); the keys it gives are the ones
    ClientCache.key gave before, so a cache written then still answers."""
    from shardeval.config.loading import decode_service
    from shardeval.explain import Where
    from shardeval.identity import response_key, response_key_prefix
    from shardeval.run.response_cache import ClientCache

    service = decode_service("model", section, Where(source="test"))
    body = b'{"messages":[],"seed":1}'
    assert response_key(response_key_prefix(service), "chat_completions", body) == key
    assert ClientCache(None, service).key("chat_completions", body) == key  # type: ignore[arg-type]
