"""A stand-in for the Hugging Face Hub on 127.0.0.1: the part of its HTTP API that
`datasets.load_dataset("owner/name", split=...)` uses, serving dataset repos held in memory.

The Hub itself cannot run here (no internet, and it is not software one installs), so this is a
mock of a remote service, the kind docs/guarantees.md allows. It speaks what `datasets` 5.x and
`huggingface_hub` 1.x/2.x ask, read from their requests (pointed at it with HF_ENDPOINT): HEAD and
GET of `/datasets/<repo>/resolve/<revision>/<file>` (a file's bytes with `X-Repo-Commit` and an
`ETag`, or 404 `EntryNotFound`), `/api/datasets/<repo>[/revision/<rev>]` (the repo's commit and
files) and `/api/datasets/<repo>/tree/<rev>[/<dir>]` (a folder's listing, recursive or not). A
request it does not know is 404, and every request is kept in `seen` (the test asserts on them).
"""

from __future__ import annotations

import hashlib
import json
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class Hub:
    def __init__(self, url: str, seen: list[str]) -> None:
        self.url, self.seen = url, seen


def _handler(repos: dict[str, dict[str, bytes]], seen: list[str]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def _send(self, code: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
            self.send_response(code)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, value: object) -> None:
            self._send(200, json.dumps(value).encode(), {"Content-Type": "application/json"})

        def route(self) -> None:
            seen.append(f"{self.command} {self.path}")
            split = urllib.parse.urlsplit(self.path)
            path, query = urllib.parse.unquote(split.path), urllib.parse.parse_qs(split.query)
            for repo, files in repos.items():
                resolve, api = f"/datasets/{repo}/resolve/", f"/api/datasets/{repo}"
                if path.startswith(resolve):
                    name = path[len(resolve) :].partition("/")[2]
                    if name in files:
                        etag = '"' + hashlib.sha1(files[name]).hexdigest() + '"'
                        return self._send(200, files[name], {"X-Repo-Commit": COMMIT, "ETag": etag})
                    return self._send(404, b"", {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": COMMIT})
                if path == api or path.startswith(api + "/revision/"):
                    return self._json({"id": repo, "sha": COMMIT, "siblings": [{"rfilename": f} for f in files]})
                if path.startswith(api + "/tree/"):
                    folder = path[len(api + "/tree/") :].partition("/")[2].strip("/")
                    return self._json(_tree(files, folder, query.get("recursive", ["false"])[0] == "true"))
            return self._send(404, b"{}", {"X-Error-Code": "RepoNotFound"})

        do_GET = do_HEAD = route

    return Handler


def _tree(files: dict[str, bytes], folder: str, recursive: bool) -> list[dict[str, object]]:
    """The Hub's listing of `folder`: its directories, then its files (below it too if recursive)."""
    entries: list[dict[str, object]] = []
    dirs: set[str] = set()
    for name, data in sorted(files.items()):
        if folder and not name.startswith(folder + "/"):
            continue
        parts = name[len(folder) + 1 if folder else 0 :].split("/")
        for depth in range(1, len(parts) if recursive else min(2, len(parts))):
            dirs.add("/".join([*([folder] if folder else []), *parts[:depth]]))
        if recursive or len(parts) == 1:
            entries.append({"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(data).hexdigest()})
    return [{"type": "directory", "path": d, "oid": "0" * 40, "size": 0} for d in sorted(dirs)] + entries


@contextmanager
def local_hub(repos: dict[str, dict[str, bytes]]) -> Iterator[Hub]:
    """Serve `repos` ({"owner/name": {"data/test.jsonl": bytes, ...}}) as dataset repos; the URL
    is what HF_ENDPOINT is set to."""
    seen: list[str] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(repos, seen))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Hub(f"http://127.0.0.1:{server.server_address[1]}", seen)
    finally:
        server.shutdown()
        server.server_close()
