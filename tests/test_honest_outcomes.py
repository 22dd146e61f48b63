"""A run's outcome is what happened (issue 24, items 1 and 2).

Item 1: a model the endpoint does not serve is a stop before the first request, naming what the
endpoint serves (and the /v1 URL when the given one lacks it), never a run of `client` errors that
exits 0. Servers that do not implement /models keep working.

Item 2: COMPLETE means every cell has a standing ok record. A shard whose cells end in errors ends
`finished_with_errors`, exit 3; merge says INCOMPLETE with the counts by error kind and exits 3.

Every server here is real: the simulator, or a raw asyncio server on 127.0.0.1
(tests/test_hostile_server.py's RawServer); every run is a real `shardeval` process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from conftest import api_eval_config, running_sim, shardeval_cmd
from test_client import DONE
from test_hostile_server import RawServer, Request, delta, manifest, records, response, sse, write_config

ANSWER = sse(delta("It is 2", "stop"), DONE)


def models_at(path: str, *ids: str):
    """A GET handler: `path` answers a /models list of `ids`, every other path 404."""
    listing = msgspec.json.encode({"object": "list", "data": [{"id": i, "object": "model", "root": i} for i in ids]})

    async def get(request: Request, writer: Any) -> None:
        writer.write(response(200, listing) if request.path == path else response(404, b'{"error": "not found"}'))

    return get


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("shardeval: error:")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


# =================================================================================================
# Item 1. A model the endpoint does not serve is a stop, not a run of errors
# =================================================================================================


def test_a_model_id_the_simulator_does_not_serve_stops_before_any_request(tmp_path: Path) -> None:
    """The issue's case: quick mode, a wrong --model-id against the simulator (which, as vLLM,
    answers 404 for a model it does not serve). Before: every pair a `client` error, exit 0, the
    manifest `complete`."""
    with running_sim("--bench", "arith", "--ttft-ms", "0", "--itl-ms", "0") as url:
        out = tmp_path / "run" / "shard_0"
        r = shardeval_cmd("run", "--bench", "arith", "--model-url", url, "--model-id", "gpt-4o", "--max-problems", "5", "-o", str(out))
    assert r.returncode == 2, r.stderr
    line = one_error_line(r.stderr)
    assert "does not serve model 'gpt-4o'" in line and "lists sim" in line and "--model-id" in line, line
    assert records(out) == []
    m = manifest(out)
    assert m["state"] == "failed" and "does not serve model 'gpt-4o'" in m["reason"], m


def only_models(*ids: str):
    """A POST handler as vLLM's: an answer for a listed model, a 404 for any other."""

    async def reply(request: Request, writer: Any) -> None:
        if json.loads(request.body).get("model") in ids:
            await ANSWER(request, writer)
        else:
            writer.write(response(404, b'{"error": {"message": "The model does not exist.", "code": 404}}'))

    return reply


def test_a_model_missing_from_the_list_sends_one_probe_and_no_pair(tmp_path: Path) -> None:
    with RawServer(only_models("llama-3-8b", "qwen-2"), get=models_at("/v1/models", "llama-3-8b", "qwen-2")) as server:
        cfg = write_config(tmp_path, server.url)  # model `sim`
        r = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(tmp_path / "out"))
        posts = server.posts
    assert r.returncode == 2 and posts == 1, (r.returncode, posts, r.stderr)  # the one-token probe, not a pair
    line = one_error_line(r.stderr)
    assert "does not serve model 'sim'" in line and "llama-3-8b, qwen-2" in line, line
    assert records(tmp_path / "out") == []


@pytest.mark.parametrize("listed", [("tgi",), ()], ids=["lists_another_name", "lists_nothing"])
def test_a_server_that_answers_for_any_model_name_still_runs(tmp_path: Path, listed: tuple[str, ...]) -> None:
    """TGI and llama.cpp list their own model id but answer whatever `model` a request names; an
    empty list says nothing either: the run goes on (variant)."""
    with RawServer(ANSWER, get=models_at("/v1/models", *listed)) as server:
        cfg = write_config(tmp_path, server.url, n=2, repeats=1)
        r = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert [x["status"] for x in records(tmp_path / "out")] == ["ok", "ok"]


@pytest.mark.parametrize("path", ["", "/api/v1", "/v2"], ids=["no_v1", "wrong_prefix", "wrong_version"])
def test_a_base_url_without_v1_is_refused_naming_the_v1_url(tmp_path: Path, path: str) -> None:
    """Before: every request a 404 `client` error, exit 0. The base URL's /models does not answer,
    `<origin>/v1/models` does, and a one-token request to the URL as given is refused: the refusal
    names the /v1 URL and what it serves."""

    async def only_at_v1(request: Request, writer: Any) -> None:
        if request.path == "/v1/chat/completions":
            await ANSWER(request, writer)
        else:
            writer.write(response(404, b'{"detail": "Not Found"}'))

    with RawServer(only_at_v1, get=models_at("/v1/models", "sim")) as server:
        origin = f"http://127.0.0.1:{server.port}"
        cfg = write_config(tmp_path, origin + path)
        r = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(tmp_path / "out"))
        posts = server.posts
    assert r.returncode == 2 and posts == 1, (r.returncode, posts, r.stderr)  # the one-token probe, not a pair
    line = one_error_line(r.stderr)
    assert f"set the service's url (quick mode: --model-url) to {origin}/v1" in line and "it serves sim" in line, line


def test_a_judge_model_the_endpoint_does_not_serve_stops_the_shard(tmp_path: Path) -> None:
    """The same check for every service a shard starts, a judge's too (variant)."""
    with running_sim("--bench", "arith", "--ttft-ms", "0", "--itl-ms", "0") as url:
        cfg = api_eval_config(tmp_path / "c.json", url, n=3, benchmark={"judge": {"service": "judge"}})
        config = json.loads(cfg.read_text())
        config["services"]["judge"] = {"type": "api", "url": url, "model": "gpt-judge"}
        cfg.write_text(json.dumps(config))
        r = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(tmp_path / "out"))
    assert r.returncode == 2, r.stderr
    line = one_error_line(r.stderr)
    assert "service 'judge'" in line and "does not serve model 'gpt-judge'" in line, line
    assert records(tmp_path / "out") == []


@pytest.mark.parametrize(
    "path,get",
    [
        ("/v1", None),  # /models 404s: nothing to compare
        ("", None),  # no /v1 and no /v1/models either: no better URL to suggest
        ("", models_at("/models", "sim")),  # a server that serves the API at its root
        ("/openai", None),  # /openai/models answers an HTML page, and there is no /v1/models
        ("/openai", models_at("/v1/models", "sim")),  # /v1/models lists it, but /openai answers requests too
    ],
    ids=["no_models_route", "no_models_anywhere", "api_at_the_root", "html_models_page", "answers_outside_v1_too"],
)
def test_servers_without_a_models_list_at_the_url_still_run(tmp_path: Path, path: str, get: Any) -> None:
    """Refusing is only for an endpoint that answers the question with a list: a server without
    /models runs as before (its served identity unknown)."""
    if path == "/openai" and get is None:

        async def html_then_list(request: Request, writer: Any) -> None:
            if request.path == "/openai/models":
                writer.write(response(200, b"<html>models</html>", ctype=b"text/html"))
            else:
                writer.write(response(404, b"{}"))

        get = html_then_list
    with RawServer(ANSWER, get=get) as server:
        cfg = write_config(tmp_path, f"http://127.0.0.1:{server.port}{path}", n=2, repeats=1)
        r = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert [x["status"] for x in records(tmp_path / "out")] == ["ok", "ok"]
    assert manifest(tmp_path / "out")["state"] == "complete"


# =================================================================================================
# Item 2. COMPLETE means every cell has a standing ok record
# =================================================================================================


async def refuse_every_request(request: Request, writer: Any) -> None:
    writer.write(response(400, b'{"error": {"message": "this model does not take that", "code": 400}}'))


def run_and_merge(tmp_path: Path, reply: Any, *, n: int = 3, repeats: int = 2, merge_args: tuple[str, ...] = ()) -> tuple[Any, Any, Path]:
    with RawServer(reply) as server:
        cfg = write_config(tmp_path, server.url, n=n, repeats=repeats, attempts=1)
        out = tmp_path / "run" / "shard_0"
        ran = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(out))
    merged = shardeval_cmd("merge", str(tmp_path / "run"), *merge_args)
    return ran, merged, out


def no_complete(text: str) -> bool:
    import re

    return re.search(r"\bCOMPLETE\b", text) is None


def test_a_run_of_only_errors_exits_3_and_never_says_complete(tmp_path: Path) -> None:
    """The acceptance case: every pair a `client` error. Before: the shard exited 0 with its
    manifest `complete`, and merge printed COMPLETE and exited 0."""
    ran, merged, out = run_and_merge(tmp_path, refuse_every_request)
    assert ran.returncode == 3, ran.stderr
    assert "finished with errors: 6 of 6 pairs end in errors (client 6)" in ran.stderr, ran.stderr
    m = manifest(out)
    assert m["state"] == "finished_with_errors" and m["benchmarks"][0]["error_kinds"] == {"client": 6}, m
    assert m["benchmarks"][0]["n_error"] == 6 and "6 of 6 pairs end in errors" in m["reason"]
    assert merged.returncode == 3, merged.stderr
    assert "**ERRORS**: 6 of 6 cells end in errors (6 client)" in merged.stdout, merged.stdout
    assert no_complete(merged.stdout + merged.stderr)
    report = (tmp_path / "run" / "merged" / "report.md").read_text()
    assert "**ERRORS**: 6 of 6 cells end in errors (6 client)" in report and no_complete(report)
    scores = json.loads((tmp_path / "run" / "merged" / "scores.json").read_text())
    assert scores["arith"]["complete"] is False and scores["arith"]["error_kinds"] == {"client": 6}
    status = shardeval_cmd("status", str(tmp_path / "run"))
    assert "finished_with_errors" in status.stdout and "(client 6)" in status.stdout, status.stdout


def test_a_shard_counts_its_own_pairs_when_it_says_how_many_end_in_errors(tmp_path: Path) -> None:
    """Variant: a shard of several says `N of M pairs` of its own range (M was the whole benchmark's:
    a shard of 2 said `4 of 8` for its 4 pairs); the merge counts the run's."""
    with RawServer(refuse_every_request) as server:
        cfg = write_config(tmp_path, server.url, n=4, repeats=2, attempts=1)
        ran = [shardeval_cmd("run", str(cfg), "--shard", f"{i}/2", "-o", str(tmp_path / "run" / f"shard_{i}")) for i in (0, 1)]
    for i, shard in enumerate(ran):
        assert shard.returncode == 3, shard.stderr
        assert f"shard {i}/2 finished with errors: 4 of 4 pairs end in errors (client 4)" in shard.stderr, shard.stderr
        assert "4 of 4 pairs end in errors" in manifest(tmp_path / "run" / f"shard_{i}")["reason"]
    merged = shardeval_cmd("merge", str(tmp_path / "run"))
    assert "**ERRORS**: 8 of 8 cells end in errors (8 client)" in merged.stdout, merged.stdout


def test_errors_of_several_kinds_among_answers_are_counted_by_kind(tmp_path: Path) -> None:
    """Variant: a mix of answers, protocol errors (an empty stream) and server errors; the verdict
    counts them by kind, and `--errors-as-wrong` (which scores them) does not make the run complete."""

    async def mixed(request: Request, writer: Any) -> None:  # by the request's number: 1 answer, 2 empty stream, 3 a 500
        kind = request.n % 3
        if kind == 1:
            await ANSWER(request, writer)
        elif kind == 2:
            await sse(DONE)(request, writer)
        else:
            writer.write(response(500, b'{"error": "engine died"}'))

    ran, merged, out = run_and_merge(tmp_path, mixed, n=4, repeats=3, merge_args=("--errors-as-wrong",))
    m = manifest(out)
    assert m["benchmarks"][0]["error_kinds"] == {"protocol": 4, "server_error": 4} and m["state"] == "finished_with_errors", m
    assert ran.returncode == 3, ran.stderr
    assert merged.returncode == 3 and no_complete(merged.stdout), merged.stdout
    assert "**ERRORS**: 8 of 12 cells end in errors (4 protocol, 4 server_error)" in merged.stdout, merged.stdout
    assert "scored as wrong" in merged.stdout


def test_a_rerun_that_answers_the_error_cells_makes_the_run_complete(tmp_path: Path) -> None:
    """Exit 0 and COMPLETE once every cell has an ok record: the rerun resumes, asks only the
    error cells, and the shard and the merge both say so."""
    ran, merged, out = run_and_merge(tmp_path, refuse_every_request, n=2, repeats=1)
    assert ran.returncode == 3 and merged.returncode == 3
    cfg = next(tmp_path.glob("config-*.yaml"))
    with RawServer(ANSWER) as server:
        config = json.loads(cfg.read_text())
        config["services"]["model"]["url"] = server.url
        cfg.write_text(json.dumps(config))
        again = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(out))
        asked = server.posts
    assert again.returncode == 0 and asked == 2, again.stderr
    assert manifest(out)["state"] == "complete" and manifest(out)["benchmarks"][0]["error_kinds"] == {}
    merged = shardeval_cmd("merge", str(tmp_path / "run"))
    assert merged.returncode == 0 and "**COMPLETE**" in merged.stdout, merged.stdout


def test_merge_of_a_partial_run_exits_3(tmp_path: Path) -> None:
    """PARTIAL (a shard never started) is not complete either: the files are written, exit 3."""
    with RawServer(ANSWER) as server:
        cfg = write_config(tmp_path, server.url, n=4, repeats=1)
        r = shardeval_cmd("run", str(cfg), "--shard", "0/2", "-o", str(tmp_path / "run" / "shard_0"))
    assert r.returncode == 0, r.stderr
    merged = shardeval_cmd("merge", str(tmp_path / "run"))
    assert merged.returncode == 3 and "**PARTIAL**: 2 of 4 cells missing" in merged.stdout, merged.stdout
    assert (tmp_path / "run" / "merged" / "scores.json").exists()


@pytest.mark.parametrize("shards", [None, 2], ids=["in_process", "two_local_shards"])
def test_a_local_launch_whose_shards_finish_with_errors_exits_3(tmp_path: Path, shards: int | None) -> None:
    """`shardeval run config.yaml` (no --shard): the one shard in-process, or the local
    orchestrator's shard processes, all finishing with errors: the launch exits 3 and its merge
    says ERRORS. Before: exit 0 and COMPLETE."""
    with RawServer(refuse_every_request) as server:
        cfg = write_config(tmp_path, server.url, n=4, repeats=1, attempts=1)
        extra = ("-O", f"cluster.shards={shards}") if shards else ()
        r = shardeval_cmd("run", str(cfg), *extra, "-o", str(tmp_path / "run" / ("" if shards else "shard_0")))
    assert r.returncode == 3, r.stdout + r.stderr
    assert no_complete(r.stdout + r.stderr)
    if shards:
        assert "**ERRORS**: 4 of 4 cells end in errors (4 client)" in r.stdout, r.stdout
        assert "2 of 2 shards failed or finished with errors" in r.stderr, r.stderr
    for m in (json.loads(p.read_text()) for p in (tmp_path / "run").glob("shard_*/manifest.json")):
        assert m["state"] == "finished_with_errors", m


def test_a_rescore_whose_records_end_in_judge_errors_exits_3(tmp_path: Path) -> None:
    """A rescore by a judge that never gives a verdict: every record a `judge` error. Before: the
    rescore exited 0 with its manifests `complete`, and merge said COMPLETE."""
    from test_judge import FAST
    from test_judge import write_config as judged_config

    import socket

    with socket.socket() as sock:  # one port for both judges: the rescore asks the run's judge service again
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    run, new = tmp_path / "run", tmp_path / "new"
    with running_sim("--model", "judge", "--bench", "arith", "--judge-quality", "1", *FAST, "--port", port) as judge:
        with running_sim("--bench", "arith", *FAST) as model:
            cfg = judged_config(tmp_path, model, judge, n=4, repeats=1)
            done = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(run / "shard_0"))
    assert done.returncode == 0, done.stderr
    with running_sim("--model", "judge", "--bench", "arith", "--judge-garbage", "1", *FAST, "--port", port):
        rescored = shardeval_cmd("rescore", str(run), "-o", str(new))
    assert rescored.returncode == 3, rescored.stderr
    m = manifest(new / "shard_0")
    assert m["state"] == "finished_with_errors" and m["benchmarks"][0]["error_kinds"] == {"judge": 4}, m
    merged = shardeval_cmd("merge", str(new))
    assert merged.returncode == 3 and "**ERRORS**: 4 of 4 cells end in errors (4 judge)" in merged.stdout, merged.stdout
