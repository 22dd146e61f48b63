"""The sandbox against hostile programs, with real subprocesses.

Every attack must be contained AND scored as a failure, and the evaluation must go on: a normal
program run right afterwards passes. Attacks come twice where it matters: as plain Python (the
prelude refuses them) and with the prelude bypassed through ctypes (the kernel layers must hold;
those checks run only where `sandbox_layers()` reports the layer, e.g. as root in a container).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import REPO, process_alive
from shardeval.run.process import processes
from shardeval_benchmarks.sandbox import SandboxResult, run_sandboxed, sandbox_layers

# Undo the prelude's import block and reach libc directly: what a determined attacker would do.
BYPASS = "import sys\nsys.meta_path.pop(0)\nimport ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"


def run(code: str, timeout_s: float = 5.0, memory_mb: int = 512, **kwargs) -> SandboxResult:
    return run_sandboxed(code, timeout_s=timeout_s, memory_mb=memory_mb, **kwargs)


def layer(name: str) -> bool:
    return bool(sandbox_layers().get(name))


def assert_failed_then_goes_on(result: SandboxResult) -> None:
    assert not result.passed, result
    after = run("print(sum(range(10)))")
    assert after.passed and after.stdout == "45\n", after


def live_processes(session: int | None = None, uid: int | None = None) -> list[int]:
    """Running (not zombie) processes in `session` or owned by `uid`."""
    return [p.pid for p in processes(uid=True) if p.alive and (p.session == session or (uid is not None and p.uid == uid))]


def ids_line(result: SandboxResult) -> dict[str, int]:
    """The `IDS {...}` line a test program printed first."""
    line = next(line for line in result.stdout.splitlines() if line.startswith("IDS "))
    return json.loads(line[4:])


PRINT_IDS = "import os, json\nprint('IDS ' + json.dumps({'sid': os.getsid(0), 'uid': os.getuid(), 'pid': os.getpid()}), flush=True)\n"


# -- ordinary programs ----------------------------------------------------------------------------


def test_a_normal_program_passes_and_a_failing_one_fails():
    ok = run("import math\nprint(math.factorial(5))")
    assert ok.passed and ok.returncode == 0 and ok.stdout == "120\n" and ok.reason == "ok"
    assert not ok.timed_out
    for code, reason in (("import sys\nsys.exit(3)", "exit status 3"), ("assert 1 == 2", "exit status 1"), ("def f(:\n", "exit status 1")):
        bad = run(code)
        assert not bad.passed and bad.reason == reason, bad
    assert "AssertionError" in run("assert 1 == 2").stderr
    assert "SyntaxError" in run("def f(:\n").stderr


def test_stdin_is_closed():
    result = run("import sys\nprint(repr(sys.stdin.read()))\ninput()")
    assert not result.passed and result.stdout == "''\n" and "EOFError" in result.stderr


def test_the_program_can_use_its_own_directory_which_is_removed_afterwards():
    code = (
        "import os, tempfile\nprint(os.getcwd())\nopen('notes.txt', 'w').write('x')\n"
        "fd, path = tempfile.mkstemp(); os.close(fd)\nos.makedirs('a/b'); open('a/b/c', 'w').write('y')\n"
        "os.chmod('a/b', 0); os.chmod('a', 0)\nprint(open('notes.txt').read())\n"
    )
    result = run(code)
    assert result.passed, result
    workdir = result.stdout.splitlines()[0]
    assert result.stdout.splitlines()[1] == "x"
    assert not os.path.exists(workdir)


# -- runaway programs -----------------------------------------------------------------------------


def test_infinite_loop_times_out_and_its_process_group_is_dead():
    start = time.monotonic()
    result = run(PRINT_IDS + "while True:\n    pass\n", timeout_s=1.0)
    elapsed = time.monotonic() - start
    assert result.timed_out and not result.passed and result.reason == "timed out after 1 s"
    assert elapsed < 4.0
    ids = ids_line(result)
    assert live_processes(session=ids["sid"]) == []
    assert not process_alive(ids["pid"])
    assert_failed_then_goes_on(result)


def test_a_sleeping_program_is_stopped_by_the_wall_clock_not_only_cpu_time():
    start = time.monotonic()
    result = run("import time\ntime.sleep(60)", timeout_s=1.0)
    assert result.timed_out and time.monotonic() - start < 4.0
    assert_failed_then_goes_on(result)


def test_fork_bomb_is_refused_by_the_prelude():
    result = run(PRINT_IDS + "while True:\n    os.fork()\n", timeout_s=2.0)
    assert not result.passed and not result.timed_out
    assert "PermissionError" in result.stderr and "os.fork is disabled" in result.stderr
    assert live_processes(session=ids_line(result)["sid"]) == []
    for code in (
        "import subprocess\nsubprocess.run(['true'])",
        "import os\nos.system('true')",
        "import os\nos.execv('/bin/true', ['true'])",
    ):
        denied = run(code)
        assert not denied.passed and "PermissionError" in denied.stderr, denied
    assert_failed_then_goes_on(result)


def test_fork_bomb_with_the_prelude_bypassed_is_bounded_and_leaves_no_process():
    start = time.monotonic()
    result = run(BYPASS + PRINT_IDS + "while True:\n    libc.fork()\n", timeout_s=2.0)
    elapsed = time.monotonic() - start
    assert not result.passed and result.timed_out
    assert elapsed < 8.0, elapsed
    ids = ids_line(result)
    assert live_processes(session=ids["sid"]) == []
    if layer("uid"):  # a per-run uid: nothing of it may be left anywhere
        assert ids["uid"] != 0
        assert live_processes(uid=ids["uid"]) == []
    assert_failed_then_goes_on(result)


def test_a_process_that_leaves_the_session_is_killed_too():
    """setsid + double fork escapes a process-group kill; the supervisor (a subreaper) and the
    uid sweep must still find it."""
    code = BYPASS + (
        "import os, time\n"
        "if libc.fork() == 0:\n"
        "    libc.setsid()\n"
        "    if libc.fork() == 0:\n"
        "        print('escapee', os.getpid(), flush=True)\n"
        "        time.sleep(120)\n"
        "    libc._exit(0)\n"
        "time.sleep(0.5)\n"
        "raise SystemExit(1)\n"
    )
    result = run(code, timeout_s=5.0)
    assert not result.passed
    escapee = int(next(line for line in result.stdout.splitlines() if line.startswith("escapee")).split()[1])
    assert not process_alive(escapee)
    assert_failed_then_goes_on(result)


def test_memory_hog_fails_fast_and_the_machine_is_fine():
    start = time.monotonic()
    result = run("x = bytearray(10 * 1024**3)\nprint('allocated')", timeout_s=10.0, memory_mb=256)
    assert not result.passed and "MemoryError" in result.stderr and "allocated" not in result.stdout
    growing = run("chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 1024**2))", timeout_s=10.0, memory_mb=256)
    assert not growing.passed and not growing.timed_out and "MemoryError" in growing.stderr
    assert time.monotonic() - start < 8.0
    assert_failed_then_goes_on(result)


def test_output_flood_is_capped_and_stopped_early():
    start = time.monotonic()
    result = run("while True:\n    print('x' * 1000)", timeout_s=10.0, max_output_bytes=10_000)
    assert not result.passed and not result.timed_out
    assert len(result.stdout) <= 10_000 and result.reason == "output exceeded 10000 bytes"
    errors = run("import sys\nwhile True:\n    sys.stderr.write('e' * 4096)", timeout_s=10.0, max_output_bytes=10_000)
    assert not errors.passed and len(errors.stderr) <= 10_000
    assert time.monotonic() - start < 8.0  # killed when the cap is hit, not at the timeout
    assert_failed_then_goes_on(result)


def test_a_huge_file_is_stopped_by_the_file_size_limit():
    result = run("with open('big', 'wb') as f:\n    while True:\n        f.write(b'x' * (1 << 20))", timeout_s=10.0)
    assert not result.passed and not result.timed_out
    assert "SIGXFSZ" in result.reason or "File too large" in result.stderr, result
    assert_failed_then_goes_on(result)


# -- network ---------------------------------------------------------------------------------------


@pytest.fixture
def listener():
    """A TCP server on 127.0.0.1 that records whether anyone connected."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    connected: list[bool] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except (TimeoutError, OSError):
                continue
            connected.append(True)
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], connected
    stop.set()
    thread.join()
    server.close()


def test_sockets_are_refused(listener):
    port, connected = listener
    attempts = [
        f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)",
        f"import socket\ns = socket.socket()\ns.connect(('127.0.0.1', {port}))",
        f"import urllib.request\nurllib.request.urlopen('http://127.0.0.1:{port}/', timeout=2)",
        "import socket\nsocket.getaddrinfo('example.com', 80)",
    ]
    for code in attempts:
        result = run(code)
        assert not result.passed and "network access" in result.stderr and "disabled" in result.stderr, (code, result)
    assert connected == []
    assert_failed_then_goes_on(result)


def test_sockets_with_the_prelude_bypassed_reach_nothing(listener):
    if not layer("netns"):
        pytest.skip("no network namespace here: only the prelude refuses sockets")
    port, connected = listener
    code = (
        "import _socket\nraw = _socket.socket.__mro__[1]\ns = raw(_socket.AF_INET, _socket.SOCK_STREAM)\n"
        f"s.settimeout(2)\ns.connect(('127.0.0.1', {port}))\nprint('connected')"
    )
    result = run(code)
    assert not result.passed and "connected" not in result.stdout
    assert "unreachable" in result.stderr.lower() or "refused" in result.stderr.lower(), result.stderr
    time.sleep(0.3)
    assert connected == []
    assert_failed_then_goes_on(result)


# -- secrets and the file system -------------------------------------------------------------------

SECRET_PROGRAM = r"""
import os
print("ENV", dict(os.environ))
pid = os.getpid()
while pid > 1:  # every ancestor's environment, the shardeval process included
    with open(f"/proc/{pid}/stat") as f:
        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
    for path in (f"/proc/{pid}/environ", f"/proc/{ppid}/environ"):
        try:
            with open(path, "rb") as f:
                print(path, f.read())
        except Exception as exc:
            print(path, "refused:", type(exc).__name__)
    pid = ppid
"""

RAW_SECRET_PROGRAM = (
    BYPASS
    + r"""
import os
def raw_read(path):
    fd = libc.open(path.encode(), 0)
    if fd < 0:
        return "errno %d" % ctypes.get_errno()
    buf = ctypes.create_string_buffer(1 << 16)
    n = libc.read(fd, buf, len(buf))
    libc.close(fd)
    return buf.raw[: max(n, 0)]
pid = os.getpid()
while pid > 1:
    with open(f"/proc/{pid}/stat") as f:
        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
    print("RAW", ppid, raw_read(f"/proc/{ppid}/environ"))
    print("STAT", ppid, raw_read(f"/proc/{ppid}/stat")[:20])
    pid = ppid
"""
)

# The sandbox is driven from a separate process started WITH the secret in its environment, so the
# secret really is in /proc/<that pid>/environ (a variable set later in-process would not be).
DRIVER = r"""
import json, sys
from shardeval_benchmarks.sandbox import run_sandboxed
result = run_sandboxed(sys.stdin.read(), timeout_s=10, memory_mb=512)
print(json.dumps(result.__dict__))
print("DRIVER_ALIVE")
"""


def run_from_driver(code: str) -> tuple[dict, str]:
    env = dict(os.environ, SHARDEVAL_TEST_SECRET="s3cr3t", OPENAI_API_KEY="sk-s3cr3t")
    proc = subprocess.run([sys.executable, "-c", DRIVER], input=code, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.endswith("DRIVER_ALIVE\n"), proc
    return json.loads(proc.stdout.splitlines()[0]), proc.stdout


def test_environment_secrets_are_not_visible(monkeypatch):
    monkeypatch.setenv("SHARDEVAL_TEST_SECRET", "s3cr3t")
    result = run(SECRET_PROGRAM)
    assert "s3cr3t" not in result.stdout + result.stderr
    assert "ENV {'PATH': '/usr/bin:/bin', 'HOME':" in result.stdout
    result, raw = run_from_driver(SECRET_PROGRAM)
    assert result["passed"], result
    assert "s3cr3t" not in raw
    assert "environ refused: PermissionError" in result["stdout"]


def test_environment_secrets_stay_hidden_with_the_prelude_bypassed():
    if not layer("uid"):
        pytest.skip("not root: a bypassed prelude can read same-user /proc/<pid>/environ (documented)")
    result, raw = run_from_driver(RAW_SECRET_PROGRAM)
    assert result["passed"], result
    assert "STAT" in result["stdout"] and "errno 13" in result["stdout"]  # it did look, and was refused
    assert "s3cr3t" not in raw


def test_shardeval_cannot_be_killed_from_inside():
    result, _ = run_from_driver("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)")
    assert not result["passed"] and "PermissionError" in result["stderr"]
    if layer("uid"):
        code = BYPASS + (
            "import os\npid = os.getpid()\n"
            "for _ in range(3):\n"
            "    with open(f'/proc/{pid}/stat') as f:\n"
            "        pid = int(f.read().rsplit(')', 1)[1].split()[1])\n"
            "    print(pid, libc.kill(pid, 9), ctypes.get_errno())\n"
        )
        result, _ = run_from_driver(code)  # run_from_driver asserts that the driver survived
        assert result["passed"] and result["stdout"].count(" -1 1\n") == 3, result


def test_writes_outside_the_directory_are_refused():
    targets = [f"/tmp/escape-{uuid.uuid4().hex}", os.path.join(REPO, f"escape-{uuid.uuid4().hex}")]
    try:
        for target in targets:
            for code in (
                f"open({target!r}, 'w').write('x')",
                f"import os\nos.close(os.open({target!r}, os.O_WRONLY | os.O_CREAT))",
                f"import pathlib\npathlib.Path({target!r}).write_text('x')",
                f"import os\nos.symlink('/etc/passwd', 'link')\nos.rename('link', {target!r})",
            ):
                result = run(code)
                assert not result.passed and "PermissionError" in result.stderr, (code, result)
                assert not os.path.lexists(target), code
        if layer("mountns") or layer("uid"):
            for target in targets:
                result = run(BYPASS + f"fd = libc.open({target.encode()!r}, 0o101, 0o644)\nprint(fd, ctypes.get_errno())")
                assert result.passed and result.stdout.startswith("-1 "), result
                assert not os.path.lexists(target)
        assert_failed_then_goes_on(run(f"open({targets[0]!r}, 'a')"))
    finally:
        for target in targets:
            if os.path.lexists(target):
                os.unlink(target)


def test_the_program_runs_unprivileged_when_we_are_root():
    result = run("import os\nprint(os.getuid(), os.getgid(), os.getgroups())")
    uid, gid, *_ = result.stdout.split()
    if layer("uid"):
        assert int(uid) != 0 and int(gid) != 0 and result.stdout.rstrip().endswith("[]")
    elif os.geteuid() != 0:
        assert int(uid) == os.geteuid() or int(uid) == 65534  # 65534: seen from a user namespace


# -- concurrency -----------------------------------------------------------------------------------


def test_many_threads_at_once_each_get_their_own_result():
    cases = [
        ("print('ok {i}')", True, False),
        ("raise SystemExit({i} % 3)", None, False),
        ("import time\ntime.sleep(30)", False, True),
        ("import os\nprint(os.getcwd())\nopen('f', 'w').write('{i}')\nassert open('f').read() == '{i}'", True, False),
    ]
    jobs = [(i, *cases[i % len(cases)]) for i in range(16)]

    def one(job):
        i, code, expect, timeout = job
        return i, run(code.format(i=i), timeout_s=1.5)

    with ThreadPoolExecutor(8) as pool:
        results = dict(pool.map(one, jobs))
    cwds = set()
    for i, code, expect, timeout in jobs:
        result = results[i]
        if expect is None:
            expect = i % 3 == 0
        assert result.passed is expect and result.timed_out is timeout, (i, result)
        if code.startswith("print('ok"):
            assert result.stdout == f"ok {i}\n"
        if "getcwd" in code:
            cwds.add(result.stdout.strip())
    assert len(cwds) == 4  # every run had its own directory


def test_a_sandbox_that_cannot_start_is_a_failed_answer_not_an_exception(monkeypatch):
    import shardeval_benchmarks.sandbox as module

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(module.tempfile, "mkdtemp", full_disk)
    result = run("print('never runs')")
    assert not result.passed and result.returncode is None and "No space left" in result.reason


def test_bad_arguments_are_a_programming_error():
    with pytest.raises(ValueError):
        run_sandboxed("pass", timeout_s=0, memory_mb=512)
    with pytest.raises(ValueError):
        run_sandboxed("pass", timeout_s=1, memory_mb=1)


# -- without root ----------------------------------------------------------------------------------

UNPRIVILEGED_DRIVER = r"""
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sandbox import run_sandboxed, sandbox_layers
BYPASS = %r
out = {"uid": os.getuid(), "layers": sandbox_layers()}
out["ok"] = run_sandboxed("print(6 * 7)", timeout_s=5, memory_mb=256).__dict__
out["loop"] = run_sandboxed("while True: pass", timeout_s=1, memory_mb=256).__dict__
out["fork"] = run_sandboxed("import os\nos.fork()", timeout_s=5, memory_mb=256).__dict__
out["escape"] = run_sandboxed(BYPASS + "import os, time\nif libc.fork() == 0:\n    libc.setsid()\n    if libc.fork() == 0:\n        print('escapee', os.getpid(), flush=True)\n        time.sleep(120)\n    libc._exit(0)\ntime.sleep(0.5)\n", timeout_s=5, memory_mb=256).__dict__
out["dir"] = run_sandboxed("import os\nos.mkdir('d')\nos.chmod('d', 0)\nprint(os.getcwd())", timeout_s=5, memory_mb=256).__dict__
print(json.dumps(out))
"""


def python_for(uid: int) -> str | None:
    """An interpreter `uid` may run (ours may live under /root, which it cannot enter)."""
    for candidate in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        try:
            probe = subprocess.run(
                [candidate, "-c", "import sys; assert sys.version_info >= (3, 10)"],
                user=uid,
                group=uid,
                extra_groups=[],
                capture_output=True,
                timeout=30,
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if probe.returncode == 0:
            return candidate
    return None


def test_an_unprivileged_user_still_gets_a_working_contained_sandbox(tmp_path):
    """The same module run by `nobody`: the uid and mount layers are gone, but programs run,
    timeouts and the fork refusal hold, and the supervisor still kills a process that left the session."""
    if os.geteuid() != 0:
        pytest.skip("needs root to become another user")
    python = python_for(65534)
    if python is None:
        pytest.skip("no Python interpreter that the nobody user may run")
    import tempfile

    import shardeval
    import shardeval_benchmarks.sandbox as module

    where = tempfile.mkdtemp(prefix="sandbox-nobody-")
    try:
        os.chmod(where, 0o755)
        with open(module.__file__) as src, open(os.path.join(where, "sandbox.py"), "w") as dst:
            dst.write(src.read())
        shutil.copytree(
            os.path.dirname(shardeval.__file__),
            os.path.join(where, "shardeval"),  # its /proc reader
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        with open(os.path.join(where, "driver.py"), "w") as f:
            f.write(UNPRIVILEGED_DRIVER % BYPASS)
        os.chmod(os.path.join(where, "sandbox.py"), 0o644)
        os.chmod(os.path.join(where, "driver.py"), 0o644)
        proc = subprocess.run(
            [python, os.path.join(where, "driver.py")],
            user=65534,
            group=65534,
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=where,
            env={"PATH": "/usr/bin:/bin"},
        )
    finally:
        shutil.rmtree(where, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["uid"] == 65534 and not out["layers"].get("uid")
    assert out["ok"]["passed"] and out["ok"]["stdout"] == "42\n"
    assert out["loop"]["timed_out"] and not out["loop"]["passed"]
    assert not out["fork"]["passed"] and "PermissionError" in out["fork"]["stderr"]
    escapee = int(out["escape"]["stdout"].split()[1])
    assert not process_alive(escapee)
    assert out["dir"]["passed"] and not os.path.exists(out["dir"]["stdout"].strip())
    assert "own uid (not root)" in proc.stderr  # the weaker isolation is announced, not silent
