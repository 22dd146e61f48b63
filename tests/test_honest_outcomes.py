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
    """The issue's case: quick mode, a wrong --model-id against the simulator. Before: every pair a
    `client` error, exit 0, the manifest `complete`."""
    with running_sim("--bench", "arith", "--ttft-ms", "0", "--itl-ms", "0") as url:
        out = tmp_path / "run" / "shard_0"
        r = shardeval_cmd("run", "--bench", "arith", "--model-url", url, "--model-id", "gpt-4o", "--max-problems", "5", "-o", str(out))
    assert r.returncode == 2, r.stderr
    line = one_error_line(r.stderr)
    assert "does not serve model 'gpt-4o'" in line and "lists sim" in line and "--model-id" in line, line
    assert records(out) == []
    m = manifest(out)
    assert m["state"] == "failed" and "does not serve model 'gpt-4o'" in m["reason"], m


def test_a_model_missing_from_the_list_sends_no_request(tmp_path: Path) -> None:
    with RawServer(ANSWER, get=models_at("/v1/models", "llama-3-8b", "qwen-2")) as server:
        cfg = write_config(tmp_path, server.url)  # model `sim`
        r = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(tmp_path / "out"))
        posts = server.posts
    assert r.returncode == 2 and posts == 0, (r.returncode, posts, r.stderr)
    line = one_error_line(r.stderr)
    assert "does not serve model 'sim'" in line and "llama-3-8b, qwen-2" in line, line


@pytest.mark.parametrize("path", ["", "/api/v1", "/v2"], ids=["no_v1", "wrong_prefix", "wrong_version"])
def test_a_base_url_without_v1_is_refused_naming_the_v1_url(tmp_path: Path, path: str) -> None:
    """Before: every request a 404 `client` error, exit 0. The base URL's /models does not answer,
    `<origin>/v1/models` does: the refusal names that URL and what it serves."""
    with RawServer(ANSWER, get=models_at("/v1/models", "sim")) as server:
        origin = f"http://127.0.0.1:{server.port}"
        cfg = write_config(tmp_path, origin + path)
        r = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(tmp_path / "out"))
        posts = server.posts
    assert r.returncode == 2 and posts == 0, (r.returncode, posts, r.stderr)
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


@pytest.mark.parametrize("path,get", [
    ("/v1", None),  # /models 404s: nothing to compare
    ("", None),  # no /v1 and no /v1/models either: no better URL to suggest
    ("", models_at("/models", "sim")),  # a server that serves the API at its root
    ("/openai", None),  # /openai/models answers an HTML page, and there is no /v1/models
], ids=["no_models_route", "no_models_anywhere", "api_at_the_root", "html_models_page"])
def test_servers_without_a_models_list_at_the_url_still_run(tmp_path: Path, path: str, get: Any) -> None:
    """Refusing is only for an endpoint that answers the question with a list: a server without
    /models runs as before (its served identity unknown)."""
    if path == "/openai":
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
