"""`status --serve` answers only requests addressed to it (issue 24, item 17; docs/status.md).

A page on evil.example whose name an attacker rebinds to 127.0.0.1 makes the visitor's browser send
`Host: evil.example:PORT` to the local server; answering would hand the run to that page (DNS
rebinding). Every request here is raw HTTP over a socket, with the Host header under test, to a real
`shardeval status --serve` process.
"""

from __future__ import annotations

import socket
from contextlib import contextmanager
from pathlib import Path
from collections.abc import Iterator

import pytest

from served import status_serve
from shard_factory import make_shard


@contextmanager
def serving(root: Path, *args: str) -> Iterator[tuple[str, int]]:
    """`shardeval status ROOT --serve --port 0 ARGS`; yield (the host its URL names, its port)."""
    with status_serve(root, *args) as url:
        host, _, port = url.split("://", 1)[1].split("/", 1)[0].rpartition(":")
        yield host, int(port)


def ask(port: int, host: str | None, path: str = "/", version: str = "1.1", to: str = "127.0.0.1") -> tuple[int, bytes]:
    """(status, body) of a GET sent as raw bytes to to:port with `Host: host` (None: no Host header)."""
    head = f"GET {path} HTTP/{version}\r\n" + (f"Host: {host}\r\n" if host is not None else "") + "Connection: close\r\n\r\n"
    with socket.create_connection((to, port), timeout=10) as s:
        s.sendall(head.encode("latin-1"))
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    make_shard(str(tmp_path), 0, 1, n_problems=5)
    return tmp_path


def test_loopback_answers_its_own_names_and_refuses_any_other(run_dir: Path) -> None:
    with serving(run_dir) as (shown, port):
        assert shown == "127.0.0.1"
        for host in (
            f"127.0.0.1:{port}",
            f"localhost:{port}",
            f"[::1]:{port}",
            f"LOCALHOST:{port}",
            f"LocalHost.:{port}",
            "127.0.0.1",
            "localhost",
            "[::1]",
            "localhost:9999",
        ):  # no port / a tunnel's port: the name is what counts
            status, body = ask(port, host)
            assert status == 200 and b"<script>" in body, host
            assert ask(port, host, "/status.json")[0] == 200, host
        for host in (
            f"evil.example:{port}",
            "evil.example",
            f"127.0.0.1.evil.example:{port}",
            f"localhost.evil.example:{port}",
            f"127.0.0.2:{port}",
            f"0.0.0.0:{port}",
            f"192.168.1.20:{port}",
            f"127.0.0.1:{port}@evil.example",
            f"127.0.0.1:x{port}",
            f"::1:{port}",
            "",
            f"[::1]x:{port}",
            f"evil.example:{port}, 127.0.0.1:{port}",
        ):
            for path in ("/", "/status.json"):
                status, body = ask(port, host, path)
                assert status == 421, (host, path, status)
                assert b"<script>" not in body and b"records" not in body and b"DNS rebinding" in body  # nothing of the run
        status, body = ask(port, None, "/", "1.0")  # no Host at all: not a browser's request, nothing to check it by
        assert status == 421 and b"<script>" not in body
        status, body = ask(port, None, "/status.json", "1.1")
        assert status in (400, 421) and b"records" not in body


def test_every_interface_answers_the_printed_name_and_addresses_not_other_names(run_dir: Path) -> None:
    """--host 0.0.0.0: the machine's name as printed, its fully qualified name, any IP address typed
    as such (an address cannot be rebound), localhost; never a name that is not the machine's."""
    with serving(run_dir, "--host", "0.0.0.0") as (shown, port):
        assert shown == socket.gethostname()
        for host in (
            f"{shown}:{port}",
            f"{shown.upper()}:{port}",
            f"{socket.getfqdn()}:{port}",
            f"127.0.0.1:{port}",
            f"10.1.2.3:{port}",
            f"[fe80::1]:{port}",
            f"localhost:{port}",
        ):
            assert ask(port, host)[0] == 200, host
        for host in (f"evil.example:{port}", f"{shown}.evil.example:{port}", f"10.1.2.3.nip.io:{port}"):
            assert ask(port, host)[0] == 421, host


def own_address() -> str | None:
    """A non-loopback IPv4 address of this machine (the one its default route leaves from), if any."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # UDP: no packet is sent, only a route chosen
        except OSError:
            return None
        address = s.getsockname()[0]
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def test_another_address_answers_itself_and_the_machines_names(run_dir: Path) -> None:
    """--host naming one address of the machine: that address, the machine's names; not another name."""
    address = own_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    with serving(run_dir, "--host", address) as (shown, port):
        assert shown == address
        for host in (f"{address}:{port}", f"{socket.gethostname()}:{port}", f"{socket.getfqdn()}:{port}", address):
            assert ask(port, host, to=address)[0] == 200, host
        for host in (f"evil.example:{port}", f"{address}.evil.example:{port}", f"{socket.gethostname()}.evil.example:{port}"):
            assert ask(port, host, to=address)[0] == 421, host
