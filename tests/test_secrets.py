"""An API key given through `api_key_env` never leaves the process: not in any file a run writes
(records, trajectories, manifests, logs, generated sbatch/Kubernetes/compose files), not on
stdout or stderr, not in an error message — even when the server echoes it back (G15)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import textwrap
from contextlib import contextmanager
from pathlib import Path
from collections.abc import Iterator

import pytest

from conftest import api_eval_config, running_sim, shardeval_cmd

KEY_VAR = "SHARDEVAL_FUZZ_API_KEY"
SECRET = "sk-shardeval-" + secrets.token_hex(16)
ENV = {KEY_VAR: SECRET}

# A server that refuses every request and quotes the Authorization header back: in a 401 body,
# in a 500 body (retried, then recorded), or in an error event inside an HTTP 200 stream. In the
# `answer_*` modes it answers instead, quoting the key inside the answer text (split across two
# stream chunks, or in a whole body) and its finish reason; in every mode /v1/models and /version
# quote it too (the weights' `root`, `owned_by`, the version).
ECHO_SERVER = textwrap.dedent(
    """
    import json, sys
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    MODE = sys.argv[1]

    class Echo(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def reply(self, status, ctype, body):
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            auth = self.headers.get("Authorization", "")
            if self.path.endswith("/models"):
                listing = {"data": [{"id": "sim", "root": "/weights/" + auth, "owned_by": auth, "max_model_len": 4096}]}
                return self.reply(200, "application/json", json.dumps(listing).encode())
            return self.reply(200, "application/json", json.dumps({"version": auth}).encode())

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            auth = self.headers.get("Authorization", "")
            key = auth.removeprefix("Bearer ")
            message = f"invalid credentials: {auth} (key {key})"
            answer = f"the key is {auth} and again {key}"
            if MODE == "answer_stream":
                cut = answer.index(key) + len(key) // 2
                chunks = [{"choices": [{"delta": {"content": answer[:cut]}}]},
                          {"choices": [{"delta": {"content": answer[cut:]}, "finish_reason": "stop " + key}]}]
                body = b"".join(b"data: " + json.dumps(c).encode() + b"\\n\\n" for c in chunks) + b"data: [DONE]\\n\\n"
                return self.reply(200, "text/event-stream", body)
            if MODE == "answer_body":
                body = {"choices": [{"message": {"role": "assistant", "content": answer}, "finish_reason": "stop " + key}]}
                return self.reply(200, "application/json", json.dumps(body).encode())
            if MODE == "stream":
                body = b"data: " + json.dumps({"error": {"message": message, "code": 500}}).encode() + b"\\n\\n"
                status, ctype = 200, "text/event-stream"
            else:
                body = json.dumps({"error": {"message": message, "type": "AuthenticationError", "code": int(MODE)}}).encode()
                status, ctype = int(MODE), "application/json"
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Echo", auth)
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    print(f"listening on http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
    server.serve_forever()
    """
)


@contextmanager
def echo_server(tmp: Path, mode: str) -> Iterator[str]:
    script = tmp / "echo_server.py"
    script.write_text(ECHO_SERVER)
    proc = subprocess.Popen([sys.executable, str(script), mode], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert "listening on" in line, line
        yield line.split()[-1]
    finally:
        proc.kill()
        proc.wait()


def assert_no_secret(*texts: str, roots: tuple[Path, ...] = ()) -> int:
    """No text and no file under the roots holds the key; returns how many files were checked."""
    needle = SECRET.encode()
    for text in texts:
        assert SECRET not in text, f"the API key is in the output: …{text[max(0, text.find(SECRET) - 80) :][:200]}…"
    n = 0
    for root in roots:
        for dirpath, _, files in os.walk(root):
            for name in files:
                path = os.path.join(dirpath, name)
                with open(path, "rb") as f:
                    assert needle not in f.read(), f"the API key is in {path}"
                n += 1
    return n


def config(tmp: Path, url: str, cluster: dict | None = None, stream: bool = True) -> Path:
    path = api_eval_config(
        tmp / "config.yaml",
        url,
        n=12,
        repeats=2,
        concurrency=8,
        output={"progress_interval_s": 0.2},
        service={"api_key_env": KEY_VAR, "stream": stream, "retries": {"attempts": 2, "backoff_base": 0.01, "backoff_max": 0.05}},
    )
    if cluster:
        path.write_text(json.dumps({**json.loads(path.read_text()), "cluster": cluster}))
    return path


def test_a_successful_run_writes_the_key_nowhere(tmp_path):
    with running_sim("--bench", "arith", "--ttft-ms", "1", "--itl-ms", "0") as url:
        out = tmp_path / "out"
        result = shardeval_cmd("run", str(config(tmp_path, url)), "--shard", "0/1", "-o", str(out), env=ENV)
        assert result.returncode == 0, result.stderr
        merged = shardeval_cmd("merge", str(tmp_path), env=ENV)
    assert merged.returncode == 0, merged.stderr
    assert assert_no_secret(result.stdout, result.stderr, merged.stdout, merged.stderr, roots=(tmp_path,)) >= 4


@pytest.mark.parametrize("mode,kind", [("401", "client"), ("500", "server_error"), ("stream", "server_error")])
def test_a_server_that_echoes_the_key_in_its_errors_never_gets_it_into_a_record_or_a_log(tmp_path, mode, kind):
    with echo_server(tmp_path, mode) as url:
        out = tmp_path / "out"
        result = shardeval_cmd("run", str(config(tmp_path, url)), "--shard", "0/1", "-o", str(out), env=ENV)
    assert result.returncode == 3, result.stderr  # every pair an error: finished with errors
    records = (out / "arith" / "results.jsonl").read_text()
    assert f'"error_kind":"{kind}"' in records and "invalid credentials: Bearer ***" in records  # scrubbed, not dropped
    assert_no_secret(result.stdout, result.stderr, roots=(tmp_path,))


@pytest.mark.parametrize("mode", ["answer_stream", "answer_body"])
def test_a_server_that_echoes_the_key_in_its_answers_never_gets_it_on_disk(tmp_path, mode):
    """The key inside the completion text, the finish reason and what /v1/models and /version say:
    replaced by `***` before anything is scored, recorded, logged or merged."""
    with echo_server(tmp_path, mode) as url:
        out = tmp_path / "out"
        result = shardeval_cmd("run", str(config(tmp_path, url, stream=mode == "answer_stream")), "--shard", "0/1", "-o", str(out), env=ENV)
        merged = shardeval_cmd("merge", str(tmp_path), env=ENV)
    assert result.returncode == 0, result.stderr
    assert merged.returncode == 0, merged.stderr
    records = (out / "arith" / "results.jsonl").read_text()
    assert records.count('"status":"ok"') == 24 and "the key is Bearer *** and again ***" in records  # scrubbed, kept
    assert '"finish_reason":"stop ***"' in records
    served = json.loads((out / "manifest.json").read_text())["served"]["model"]
    assert (served["root"], served["owned_by"], served["server_version"]) == ("/weights/Bearer ***", "Bearer ***", "Bearer ***")
    assert "the key is Bearer *** and again ***" in (out / "arith" / "trajectories.jsonl").read_text()
    assert assert_no_secret(result.stdout, result.stderr, merged.stdout, merged.stderr, roots=(tmp_path,)) >= 4


def test_a_missing_key_variable_is_one_line_naming_the_variable(tmp_path):
    result = shardeval_cmd(
        "run", str(config(tmp_path, "http://127.0.0.1:9/v1")), "--shard", "0/1", "-o", str(tmp_path / "o"), env={KEY_VAR: ""}
    )
    assert result.returncode == 2 and KEY_VAR in result.stderr and "Traceback" not in result.stderr


CLUSTERS = {
    "slurm": {"type": "slurm", "shards": 4, "walltime": "00:10:00", "partition": "debug"},
    "kubernetes": {"type": "kubernetes", "name": "secret-test", "namespace": "evals", "shards": 4},
    "compose": {"type": "compose", "shards": 2},
}


@pytest.mark.parametrize("cluster", list(CLUSTERS))
def test_generated_cluster_files_never_hold_the_key(tmp_path, cluster):
    cfg = config(tmp_path, "http://model.internal:8000/v1", CLUSTERS[cluster])
    out = tmp_path / "out"
    result = shardeval_cmd("run", str(cfg), "--dry-run", "-o", str(out), env=ENV)
    assert result.returncode == 0, result.stderr
    assert_no_secret(result.stdout, result.stderr, roots=(tmp_path,))
    assert [p for p in out.rglob("*") if p.is_file()], "nothing generated: the test proves nothing"


# --- H11: scrubbing never changes an answer; URL credentials are secrets too


def scores_accuracy(run: Path) -> float:
    return json.loads((run / "merged" / "scores.json").read_text())["arith"]["metrics"]["accuracy"]["value"]


@pytest.mark.parametrize("key", ["4", "####"])
def test_a_key_too_short_to_be_a_secret_changes_no_answer(tmp_path, key):
    """A key `4` turned every 4 of every answer into *** (accuracy 1.000 -> 0.767) and the cache
    stored the mangled text. Under MIN_SECRET_CHARS (8) a key is sent, never replaced."""
    cache = tmp_path / "cache"
    with running_sim("--bench", "arith", "--accuracy", "1.0", "--ttft-ms", "1", "--itl-ms", "0") as url:
        cfg = api_eval_config(tmp_path / "config.yaml", url, n=30, service={"api_key_env": KEY_VAR})
        cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "cache": {"dir": str(cache)}}))
        out = tmp_path / "run" / "shard_0"
        result = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(out), env={KEY_VAR: key})
        assert result.returncode == 0, result.stderr
        merged = shardeval_cmd("merge", str(tmp_path / "run"))
    assert merged.returncode == 0, merged.stderr
    records = [json.loads(line) for line in (out / "arith" / "results.jsonl").read_text().splitlines()]
    assert not any("***" in json.dumps(r) for r in records), "answers were rewritten"
    assert sum(key in (r.get("response") or "") for r in records) >= 1, "no answer holds the key: the test proves nothing"
    assert scores_accuracy(tmp_path / "run") == 1.0
    segments = "".join(p.read_text() for p in (cache / "segments").glob("*.jsonl"))
    assert segments.count('"key"') == 30 and "***" not in segments
    assert f"{KEY_VAR} holds a key of {len(key)} character(s), under the 8 of a secret" in result.stderr


@pytest.mark.parametrize("key,secret", [("k" * 7, False), ("k" * 8, True)])
def test_a_key_in_an_answer_and_in_an_error_is_replaced_in_both_or_in_neither(tmp_path, key, secret):
    """The rule is the key's length, the same for answers and for error texts; a replaced answer is logged."""
    texts = {}
    for mode in ("answer_body", "401"):
        with echo_server(tmp_path, mode) as url:
            out = tmp_path / mode
            result = shardeval_cmd("run", str(config(tmp_path, url, stream=False)), "--shard", "0/1", "-o", str(out), env={KEY_VAR: key})
        assert result.returncode == (0 if mode == "answer_body" else 3), result.stderr  # every 401 a client error (H2)
        texts[mode] = ((out / "arith" / "results.jsonl").read_text(), result.stderr)
    shown = "***" if secret else key
    assert f"the key is Bearer {shown} and again {shown}" in texts["answer_body"][0]
    assert f"invalid credentials: Bearer {shown} (key {shown})" in texts["401"][0]
    assert ("echoed the API key inside an answer" in texts["answer_body"][1]) == secret


CREDENTIAL_URLS = {  # (the URL, its secret, how it is shown)
    "user_and_password": ("http://evaluser:pw-{secret}@127.0.0.1:{port}/v1", "pw-{secret}", "http://***@127.0.0.1:{port}/v1"),
    "user_only": ("http://tok-{secret}@127.0.0.1:{port}/v1", "tok-{secret}", "http://***@127.0.0.1:{port}/v1"),
    # issue 40, point 7: secrets by their shape, not their name
    "query_session": ("http://127.0.0.1:{port}/v1?session=s-{secret}", "s-{secret}", "http://127.0.0.1:{port}/v1?session=***"),
    "fragment_token": ("http://127.0.0.1:{port}/v1#access_token=a-{secret}", "a-{secret}", "http://127.0.0.1:{port}/v1#access_token=***"),
}


@pytest.mark.parametrize("shape", list(CREDENTIAL_URLS))
@pytest.mark.parametrize("reachable", [True, False])
def test_url_credentials_reach_no_manifest_log_record_or_output(tmp_path, shape, reachable):
    """https://user:pass@host: the credentials are sent (aiohttp: basic auth) and written nowhere,
    whether the endpoint answers or cannot be reached (its URL is then in the error lines)."""
    token = secrets.token_hex(8)
    template, needle, shown = CREDENTIAL_URLS[shape]
    needle = needle.format(secret=token)
    with running_sim("--bench", "arith", "--ttft-ms", "1", "--itl-ms", "0") as sim_url:
        port = sim_url.rsplit(":", 1)[1].split("/")[0] if reachable else "9"
        url = template.format(secret=token, port=port)
        cfg = api_eval_config(tmp_path / "config.yaml", url, n=4, service={"retries": {"attempts": 1}, "unreachable_after": 2})
        out = tmp_path / "run" / "shard_0"
        result = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(out))
        merged = shardeval_cmd("merge", str(tmp_path / "run"))
        status = shardeval_cmd("status", str(tmp_path / "run"))
    texts = [result.stdout, result.stderr, merged.stdout, merged.stderr, status.stdout, status.stderr]
    # a base URL with a query or a fragment is no base URL: refused in one line (exit 2), redacted
    usable = "?" not in template and "#" not in template
    assert result.returncode == (0 if usable else 2) if reachable else result.returncode not in (0, 2), result.stderr
    for text in texts:
        assert needle not in text, text
    cfg.unlink()  # the user's own file holds the URL as written; everything shardeval wrote must not
    for dirpath, _, files in os.walk(tmp_path):
        for name in files:
            assert needle.encode() not in Path(dirpath, name).read_bytes(), os.path.join(dirpath, name)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["services"]["model"]["url"] == shown.format(port=port)
    if not (reachable and usable):
        assert shown.format(port=port) in result.stderr  # named, redacted, not dropped


@pytest.mark.parametrize("cluster", ["compose", "kubernetes"])
def test_generated_cluster_files_refuse_url_credentials_but_take_variables(tmp_path, cluster):
    token = secrets.token_hex(8)
    cfg = config(tmp_path, f"http://evaluser:pw-{token}@model.internal:8000/v1", CLUSTERS[cluster])
    result = shardeval_cmd("run", str(cfg), "--dry-run", "-o", str(tmp_path / "out"), env=ENV)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "http://***@model.internal:8000/v1" in lines[0] and "${VARIABLES}" in lines[0]
    assert token not in result.stderr + result.stdout
    assert not [p for p in (tmp_path / "out").rglob("*") if p.is_file()] if (tmp_path / "out").exists() else True
    cfg = config(tmp_path, "http://${EVAL_USER}:${EVAL_PASSWORD}@model.internal:8000/v1", CLUSTERS[cluster])
    result = shardeval_cmd(
        "run", str(cfg), "--dry-run", "-o", str(tmp_path / "out2"), env={**ENV, "EVAL_USER": "u", "EVAL_PASSWORD": "p" + token}
    )
    assert result.returncode == 0, result.stderr
    assert_no_secret(result.stdout, result.stderr, roots=(tmp_path / "out2",))


def test_secret_query_parameters_and_userinfo_are_redacted_in_any_text():
    from shardeval.redact import redact_urls, url_credentials

    text = "GET https://u:p4ss@h/v1/x?api_key=abc123&lang=en&X-Amz-Signature=f00d and https://tok@h2 (see a@b.org)"
    assert redact_urls(text) == "GET https://***@h/v1/x?api_key=***&lang=en&X-Amz-Signature=*** and https://***@h2 (see a@b.org)"
    assert url_credentials("url: https://${U}:${P:-x}@h/v1") is None
    assert url_credentials("https://h/v1?lang=en") is None and url_credentials("https://h/?token=t") == "https://h/?token=***"
    # Azure Functions' function key travels as ?code=; in a URL every value but a harmless name's is one (issue 40)
    assert (
        redact_urls("https://f.azurewebsites.net/api/v1?code=AbC123xyz&zipcode=10115")
        == "https://f.azurewebsites.net/api/v1?code=***&zipcode=***"
    )
    # outside a URL, a name only containing it (zipcode) is no secret
    assert redact_urls("GET /api/v1?code=AbC123xyz&zipcode=10115") == "GET /api/v1?code=***&zipcode=10115"
    assert url_credentials("https://h/v1?pwd=hunter22") == "https://h/v1?pwd=***"


from hypothesis import given, settings, strategies as st  # noqa: E402

from shardeval.redact import HARMLESS_PARAMS  # noqa: E402

_NAME = st.text("abcdefghijklmnopqrstuvwxyz_-.", min_size=1, max_size=12).filter(lambda n: n.lower() not in HARMLESS_PARAMS)
_VALUE = st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdef%+/._~-", min_size=6, max_size=40).map(lambda v: "Q" + v)


@settings(max_examples=400, deadline=None)
@given(
    name=_NAME,
    value=_VALUE,
    where=st.sampled_from(["query", "second", "fragment", "bare_fragment", "bare_query"]),
    scheme=st.sampled_from(["http", "https", "file", "sqlite", "databricks"]),
)
def test_every_query_value_and_fragment_of_a_url_is_a_secret_by_its_shape(name, value, where, scheme):
    """Issue 40, point 7: `#access_token=`, `?jwt=`, `?pass=`, `?bearer=`, `?session=` were not seen
    as credentials: a list of names never ends. Any value of a name not known to be harmless, and
    any fragment that is not a route or a short anchor, is `***` wherever a URL is echoed; the
    harmless names' values stay, so the URL stays recognisable."""
    from shardeval.redact import redact_urls, url_credentials

    url = {
        "query": f"{scheme}://host:5000/api?{name}={value}&lang=en",
        "second": f"{scheme}://host/p?page=2&{name}={value}",
        "fragment": f"{scheme}://host/#{name}={value}&model=m",
        "bare_fragment": f"{scheme}://host/p#{value}.{value}",
        "bare_query": f"{scheme}://host/p?{value}",
    }[where]
    text = f"cannot reach {url} (connection refused)."
    shown = redact_urls(text)
    assert value not in shown, shown
    assert url_credentials(text) is not None and value not in url_credentials(text)
    assert shown.endswith(" (connection refused).") and "host" in shown
    if where == "query":
        assert "lang=en" in shown
    if where == "second":
        assert "page=2" in shown


def test_harmless_query_names_routes_and_variables_are_kept():
    from shardeval.redact import redact_urls, url_credentials

    for url in (
        "https://h/v1?api-version=2024-06-01",
        "http://h:5000/#/experiments/3",
        "https://h/docs#install",
        "https://h/v1?key=${API_KEY}",
        "https://hf.co/d/resolve/main/x.jsonl?download=true",
    ):
        assert redact_urls(url) == url and url_credentials(url) is None, url


def test_an_mlflow_uri_with_a_token_in_its_query_or_fragment_is_refused_and_never_shown(tmp_path):
    """MLflow's connection error printed such a URI in full; now it is a credential like userinfo:
    refused before any merge, exit 2, the secret nowhere in what shardeval prints or writes."""
    pytest.importorskip("mlflow")
    token = secrets.token_hex(8)
    out = tmp_path / "out"
    with running_sim("--bench", "arith", "--ttft-ms", "1", "--itl-ms", "0") as url:
        assert shardeval_cmd("run", str(api_eval_config(tmp_path / "c.yaml", url, n=4)), "-o", str(out)).returncode == 0
    for uri in (
        f"http://127.0.0.1:9/?jwt=j{token}",
        f"http://127.0.0.1:9/#access_token=a{token}",
        f"http://127.0.0.1:9/?pass=p{token}&bearer=b{token}&session=s{token}",
    ):
        done = shardeval_cmd("export", str(out), "--to", "mlflow", "--tracking-uri", uri)
        assert done.returncode == 2, done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert "holds credentials" in line and token not in done.stdout + done.stderr, line
    for dirpath, _, files in os.walk(tmp_path):
        for name in files:
            assert token.encode() not in Path(dirpath, name).read_bytes(), os.path.join(dirpath, name)
