"""Run untrusted Python (a model's code plus a benchmark's tests) in a contained subprocess.

Stdlib and shardeval's /proc reader only, Linux first, thread-safe: `run_sandboxed` may be called
from many scoring threads at once. Whatever the program does, the result is a `SandboxResult`; a program that misbehaves
fails, it never raises into the caller. Defence in depth, not a VM; the layers:

1. A fresh interpreter, `python -I -S -B` (no user site, no PYTHON* variables, no .pth hooks),
   started with `-c` (works from a zipapp) in its own session and process group, with its own
   temporary directory as cwd/HOME/TMPDIR (removed afterwards, whatever the program did to its
   permissions), stdin closed, and an environment of exactly PATH, HOME, TMPDIR and LANG:
   nothing is inherited, so no API key is visible in `os.environ`.
2. Kernel resource limits, soft = hard so the program cannot raise them: address space
   (`memory_mb`), CPU seconds (about the wall-clock timeout), file size (64 MiB), open files,
   processes (64), no core dumps.
3. A supervisor: the interpreter forks before running anything untrusted; the parent stays
   behind as a child subreaper (PR_SET_CHILD_SUBREAPER), so every process the program starts
   (double forks and setsid included) remains its descendant. When the program exits it kills
   and reaps all of them, then exits with the program's status.
4. As root (containers, cluster nodes): the program runs under a per-run unprivileged uid from a
   private pool (61440-63487; a uid the password or group database knows, or that any process
   uses, is skipped; a flock per uid keeps concurrent shardeval processes on one node apart),
   with no supplementary groups and `no_new_privs`. So it cannot read /proc/<shardeval>/environ,
   signal or ptrace shardeval or the supervisor, or write root-owned files; RLIMIT_NPROC is
   enforced (the kernel ignores it for root) and bounds a fork bomb; and every process of that
   uid is killed after the run. Also as root: a private network namespace (no interface up, not
   even loopback) and a private mount namespace where every mount except the sandbox directory
   is read-only (an interpreter installed where that uid cannot read, e.g. pyenv under /root, is
   bind-mounted read-only into the sandbox directory). Not root: an unprivileged user + network
   namespace where the kernel allows one.
5. A prelude before the model's code: sockets, process creation (fork, exec, spawn, subprocess,
   os.system), os.kill, ctypes, writes outside the sandbox directory and reads of
   /proc/*/environ raise PermissionError / ImportError. Most violations become a clean error.
6. The parent enforces the wall-clock timeout, caps captured output (it reads in a loop and kills
   the program once `max_output_bytes` is exceeded) and, on timeout and after every exit, kills
   the process group and sweeps /proc for anything left in the session (and, as root, of the uid).

The prelude is plain Python that determined code can undo; what then still holds, as root and
not, is docs/benchmarks.md's "What it does not stop" (the one place it is written).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import logging
import os
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from collections.abc import Callable

from shardeval.api.benchmark import Proc, describe_exit, processes, read_process

log = logging.getLogger("shardeval")

PROGRAM_NAME = "main.py"
UID_BASE = 61440  # the pool lies below nobody (65534) so it fits a 0-65535 user namespace map
UID_COUNT = 2048
FSIZE_BYTES = 64 << 20  # the largest file the program may write
NOFILE = 256
NPROC = 64  # tasks (processes and threads) of the program's uid
KILL_GRACE_S = 1.0  # how long the supervisor gets to reap, or an escaped process to free the pipes
BUSY_TTL_S = 5.0  # how old the snapshot of uids in use may be when picking one


@dataclass(frozen=True)
class SandboxResult:
    """Outcome of one sandboxed run; `passed` is exit status 0 within every limit."""

    passed: bool
    returncode: int | None
    timed_out: bool
    stdout: str
    stderr: str
    reason: str


# --------------------------------------------------------------------------------------------
# The boot script: runs in the child before the model's code. Trusted code, passed with -c so
# it works from a zipapp (no file on disk needed). Its arguments are key=value settings.
# --------------------------------------------------------------------------------------------
BOOT = r'''
import os, resource, sys
cfg = dict(arg.split("=", 1) for arg in sys.argv[1:])  # key=value; json would cost 10 ms of imports
for _key in ("mem", "cpu", "fsize", "nofile", "nproc", "uid", "probe"):
    if _key in cfg:
        cfg[_key] = int(cfg[_key])
with open(cfg["prog"], "rb") as _f:
    _src = _f.read()
layers = {"uid": False, "netns": False, "mountns": False, "no_new_privs": False, "subreaper": False}
try:
    import ctypes
    _libc = ctypes.CDLL(None, use_errno=True)
except Exception:
    ctypes = _libc = None

def _ok(fn, *args):
    """Whether fn(*args) succeeded: every kernel layer is best effort, and the probe reports which held."""
    try:
        fn(*args)
        return True
    except (OSError, ValueError):
        return False

def _limit(res, soft, hard=None):
    _ok(resource.setrlimit, res, (soft, soft if hard is None else hard))

def _call(name, *args):
    """A libc call that returns 0 on success; OSError otherwise (or where libc lacks it)."""
    fn = getattr(_libc, name, None) if _libc is not None else None
    if fn is None or fn(*args) != 0:
        raise OSError(ctypes.get_errno() if fn is not None else 0, name + " failed")

def _unshare(flags):
    if hasattr(os, "unshare"):
        os.unshare(flags)
    else:
        _call("unshare", flags)

def _mount(src, target, flags):
    enc = lambda s: None if s is None else os.fsencode(s)
    _call("mount", enc(src), enc(target), None, ctypes.c_ulong(flags) if ctypes else flags, None)

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18

def _readonly_except(keep):
    """A private mount namespace where every mount is read-only except the sandbox directory."""
    _unshare(0x00020000)  # CLONE_NEWNS
    keep_flags = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": 1024, "nodiratime": 2048, "relatime": 1 << 21}
    _mount(None, "/", MS_REC | MS_PRIVATE)  # first: nothing below may propagate to the host
    _mount(keep, keep, MS_BIND)
    _mount(None, keep, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV)
    with open("/proc/self/mountinfo", "rb") as f:
        rows = [line.split() for line in f]
    for row in rows:
        target = row[4]
        for escaped, char in ((b"\\040", b" "), (b"\\011", b"\t"), (b"\\012", b"\n"), (b"\\134", b"\\")):
            target = target.replace(escaped, char)
        if target == os.fsencode(keep):
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        for opt in row[5].decode().split(","):
            flags |= keep_flags.get(opt, 0)
        _ok(_mount, None, target, flags)
    os.chdir(keep)  # the old cwd is the directory on the read-only mount below

def _reachable(path):
    """Can a uid with no groups (an "other") list and enter `path`? Needs o+x on every ancestor."""
    import stat
    parts = os.path.realpath(path).split("/")
    if not all(os.stat("/".join(parts[:i]) or "/").st_mode & stat.S_IXOTH for i in range(1, len(parts) + 1)):
        return False
    return bool(os.stat(path).st_mode & stat.S_IROTH)

def _expose(hidden, workdir):
    """Bind import directories the unprivileged uid cannot reach (a Python under /root) into the
    sandbox directory, read-only, and point sys.path and loaded packages' __path__ there."""
    moved = {}
    hidden = [h for h in hidden if not any(h.startswith(o + "/") for o in hidden)]
    for i, entry in enumerate(hidden):
        target = os.path.join(workdir, ".python", str(i))
        os.makedirs(target)
        _mount(entry, target, MS_BIND | MS_REC)
        _mount(None, target, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
        moved[entry] = target
    def swap(p):
        for old, new in moved.items():
            if p == old or p.startswith(old + "/"):
                return new + p[len(old):]
        return p
    sys.path[:] = [swap(p) for p in sys.path]
    for mod in list(sys.modules.values()):
        path = getattr(mod, "__path__", None)
        if isinstance(path, list):
            path[:] = [swap(p) if isinstance(p, str) else p for p in path]
    sys.path_importer_cache.clear()

if os.geteuid() == 0:
    layers["netns"] = _ok(_unshare, 0x40000000)  # CLONE_NEWNET: no interface is up, not even loopback
    layers["mountns"] = _ok(_readonly_except, cfg["dir"])
    if cfg.get("uid") is not None:
        _hidden = [p for p in sys.path if p and os.path.isdir(p) and not _reachable(p)]
        if _hidden and not (layers["mountns"] and _ok(_expose, _hidden, cfg["dir"])):
            cfg["uid"] = None  # the unprivileged uid could not even import the standard library
else:
    layers["netns"] = _ok(_unshare, 0x10000000 | 0x40000000)  # CLONE_NEWUSER | CLONE_NEWNET

def _live_descendants(root):
    """Pids below `root` in the process tree (zombies left out), from one /proc snapshot."""
    kids = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                raw = f.read()
        except OSError:
            continue
        fields = raw[raw.rfind(b")") + 2:].split()
        if fields[0] not in (b"Z", b"X"):
            kids.setdefault(int(fields[1]), []).append(int(name))
    found, todo = [], [root]
    while todo:
        for pid in kids.get(todo.pop(), ()):
            found.append(pid)
            todo.append(pid)
    return found

def _supervise(child):
    """The supervisor: a subreaper that outlives the program, then kills and reaps everything
    the program left behind (double forks and setsid included) and exits with its status."""
    import signal, time
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)  # hold no pipe: the parent sees EOF once the program's tree is gone
    _limit(resource.RLIMIT_CORE, 0)
    status = None
    try:  # ends with ChildProcessError: no child left means no descendant left (orphans come to us)
        while status is None:
            pid, st = os.waitpid(-1, 0)
            if pid == child:
                status = st
        while True:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
            pidfds = {}
            for pid in _live_descendants(os.getpid()):
                try:
                    pidfds[pid] = os.pidfd_open(pid)
                except (AttributeError, OSError):
                    _ok(os.kill, pid, signal.SIGKILL)
            still = set(_live_descendants(os.getpid())) if pidfds else set()
            for pid, pidfd in pidfds.items():
                if pid in still:  # still ours behind this pidfd: no pid-reuse race
                    _ok(signal.pidfd_send_signal, pidfd, signal.SIGKILL)
                os.close(pidfd)
            time.sleep(0.002)
    except ChildProcessError:
        pass
    if status is not None and os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        _ok(signal.signal, sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if status is not None and os.WIFEXITED(status) else 1)

layers["subreaper"] = _ok(_call, "prctl", 36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
if layers["subreaper"]:
    _child = os.fork()
    if _child:
        _supervise(_child)

_limit(resource.RLIMIT_CORE, 0)
_limit(resource.RLIMIT_FSIZE, cfg["fsize"])
_limit(resource.RLIMIT_NOFILE, cfg["nofile"])
_limit(resource.RLIMIT_NPROC, cfg["nproc"])
_limit(resource.RLIMIT_CPU, cfg["cpu"], cfg["cpu"] + 1)
_limit(resource.RLIMIT_AS, cfg["mem"])

if cfg.get("uid") is not None:
    try:
        os.setgroups([])
        os.setresgid(cfg["uid"], cfg["uid"], cfg["uid"])
        os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
    except OSError as exc:  # fail closed: never run the program as root by accident
        sys.stderr.write("sandbox: could not switch to uid %d: %s\n" % (cfg["uid"], exc))
        os._exit(125)
    layers["uid"] = os.getuid() == cfg["uid"] and os.geteuid() == cfg["uid"]
layers["no_new_privs"] = _ok(_call, "prctl", 38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
if cfg.get("probe"):
    print(" ".join("%s=%d" % item for item in layers.items()))
    sys.exit(0)

# ---- the prelude: refuse what the model's code has no business doing --------------------
import builtins, errno, io, posix, _io, _socket, _posixsubprocess

_SANDBOX = os.path.realpath(cfg["dir"])
_realpath = os.path.realpath
_readlink = os.readlink
_fspath = os.fspath
_PermissionError = PermissionError

def _deny(what):
    def denied(*args, **kwargs):
        raise _PermissionError(errno.EPERM, what + " is disabled in the sandbox")
    return denied

for _name in ("fork", "forkpty", "system", "popen", "execv", "execve", "execl", "execle", "execlp",
              "execlpe", "execvp", "execvpe", "fexecve", "spawnv", "spawnve", "spawnvp", "spawnvpe",
              "spawnl", "spawnle", "spawnlp", "spawnlpe", "posix_spawn", "posix_spawnp", "kill",
              "killpg", "setsid", "pidfd_open"):
    for _mod in (os, posix):
        if hasattr(_mod, _name):
            setattr(_mod, _name, _deny("os." + _name))
_posixsubprocess.fork_exec = _deny("starting processes")

# Patching _socket is enough: socket.py (imported later by the program, if at all) subclasses
# _socket.socket and copies its functions, so it inherits the refusals.
_RealSocket = _socket.socket
class _NoNetworkSocket(_RealSocket):
    __slots__ = ()  # socket.py's subclass adds __weakref__ itself
    def __init__(self, family=-1, type=-1, proto=-1, fileno=None):
        if fileno is None:  # socketpair() wraps existing local fds; anything else is refused
            raise _PermissionError(errno.EACCES, "network access is disabled in the sandbox")
        _RealSocket.__init__(self, family, type, proto, fileno)
_socket.socket = _socket.SocketType = _NoNetworkSocket
for _name in ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr", "getnameinfo"):
    if hasattr(_socket, _name):
        setattr(_socket, _name, _deny("network access (socket." + _name + ")"))

def _resolve(path, dir_fd=None):
    if isinstance(path, int):
        path = _readlink("/proc/self/fd/%d" % path)
    path = _fspath(path)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if dir_fd is not None and not path.startswith("/"):
        path = _readlink("/proc/self/fd/%d" % dir_fd) + "/" + path
    return _realpath(path)

def _check(path, write, dir_fd=None):
    try:
        real = _resolve(path, dir_fd)
    except (OSError, TypeError, ValueError):
        return  # the real call reports the problem
    if real.startswith("/proc/") and real.endswith("/environ"):
        raise _PermissionError(errno.EACCES, "reading process environments is disabled in the sandbox")
    if write and real != _SANDBOX and not real.startswith(_SANDBOX + "/"):
        raise _PermissionError(errno.EACCES, "writing outside the sandbox directory is disabled: %s" % real)

_real_open = _io.open
def open(file, mode="r", *args, **kwargs):
    _check(file, any(c in mode for c in "wax+"))
    return _real_open(file, mode, *args, **kwargs)
builtins.open = io.open = _io.open = open

class FileIO(_io.FileIO):
    def __init__(self, file, mode="r", *args, **kwargs):
        _check(file, any(c in mode for c in "wax+"))
        _io.FileIO.__init__(self, file, mode, *args, **kwargs)
io.FileIO = _io.FileIO = FileIO

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_real_os_open = os.open
def _os_open(path, flags, mode=0o777, *, dir_fd=None):
    _check(path, flags & _WRITE_FLAGS, dir_fd)
    return _real_os_open(path, flags, mode, dir_fd=dir_fd)
os.open = posix.open = _os_open

def _guard(fn, positions):
    def guarded(*args, **kwargs):
        for i in positions:
            if i < len(args):
                key = ("src_dir_fd", "dst_dir_fd")[i] if fn.__name__ in ("rename", "replace", "link") else "dir_fd"
                _check(args[i], True, kwargs.get(key, kwargs.get("dir_fd")))
        for name in ("path", "src", "dst"):
            if name in kwargs:
                _check(kwargs[name], True, kwargs.get("dir_fd"))
        return fn(*args, **kwargs)
    return guarded

for _name, _pos in (("mkdir", (0,)), ("rmdir", (0,)), ("remove", (0,)), ("unlink", (0,)), ("rename", (0, 1)),
                    ("replace", (0, 1)), ("link", (0, 1)), ("symlink", (1,)), ("chmod", (0,)), ("chown", (0,)),
                    ("lchown", (0,)), ("truncate", (0,)), ("utime", (0,)), ("mkfifo", (0,)), ("mknod", (0,)),
                    ("setxattr", (0,)), ("removexattr", (0,)), ("chroot", (0,))):
    for _mod in (os, posix):
        if hasattr(_mod, _name):
            setattr(_mod, _name, _guard(getattr(_mod, _name), _pos))

class _BlockImports:
    BLOCKED = frozenset({"ctypes", "_ctypes", "cffi", "_cffi_backend"})
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.partition(".")[0] in cls.BLOCKED:
            raise ImportError("import of %r is disabled in the sandbox" % name)
        return None
for _name in [m for m in sys.modules if m.partition(".")[0] in _BlockImports.BLOCKED]:
    del sys.modules[_name]
sys.meta_path.insert(0, _BlockImports)

builtins.exit = builtins.quit = sys.exit  # -S leaves them undefined

import types as _types
_main = _types.ModuleType("__main__")
_main.__file__ = cfg["prog"]
_main.__builtins__ = builtins
sys.modules["__main__"] = _main
sys.argv = [cfg["prog"]]
_code = compile(_src, cfg["prog"], "exec")
del _src, _libc, ctypes, _f, cfg
exec(_code, _main.__dict__)
'''


# ---- the parent side ---------------------------------------------------------------------


def run_sandboxed(code: str, *, timeout_s: float, memory_mb: int, max_output_bytes: int = 64_000) -> SandboxResult:
    """Run `code` as a Python program in the sandbox; passed iff it exits 0 within every limit."""
    if timeout_s <= 0 or memory_mb < 32 or max_output_bytes < 0:
        raise ValueError(f"run_sandboxed: timeout_s={timeout_s!r} must be > 0, memory_mb={memory_mb!r} >= 32, max_output_bytes >= 0")
    sandbox_layers()  # probed (and logged) once per process
    return _sandboxed(code, timeout_s, memory_mb, max_output_bytes)


def _sandboxed(code: str, timeout_s: float, memory_mb: int, cap: int, probe: bool = False) -> SandboxResult:
    try:
        workdir = tempfile.mkdtemp(prefix="shardeval-sandbox-")
    except OSError as exc:
        return _not_run(f"could not create the sandbox directory: {exc}")
    try:
        uid = _UID_POOL.acquire() if _root_mode() else None
    except (OSError, RuntimeError) as exc:
        _remove_tree(workdir)
        return _not_run(f"could not start the program: {exc}")
    clean = False
    try:
        result, clean = _run(code, workdir, uid, timeout_s, memory_mb, cap, probe)
        return result
    except OSError as exc:  # e.g. a full disk: the answer cannot be shown to pass
        return _not_run(f"sandbox error: {exc}")
    finally:
        if uid is not None:
            _UID_POOL.release(uid, clean)
        _remove_tree(workdir)


def _not_run(reason: str) -> SandboxResult:
    """The program could not be run: a failed answer (the runner never sees an exception), logged."""
    log.warning("sandbox: %s", reason)
    return SandboxResult(False, None, False, "", "", reason)


def sandbox_layers() -> dict[str, bool]:
    """Which kernel layers this machine gives the sandbox (uid, netns, mountns, no_new_privs, subreaper).

    Probed once per process by booting a sandbox that reports instead of running code; tests
    and `shardeval` logs use it to say what protection is really in place.
    """
    with _LAYERS_LOCK:  # many scoring threads may ask at once: one probe
        return dict(_probe_layers())


_LAYERS_LOCK = threading.Lock()


@functools.cache
def _probe_layers() -> dict[str, bool]:
    probe = _sandboxed("", 30.0, 256, 64_000, probe=True)
    if not probe.passed:
        log.warning("sandbox: probing its layers failed (%s)", probe.reason)
        return {}
    layers = {k: v == "1" for k, _, v in (item.partition("=") for item in probe.stdout.split())}
    log.info("sandbox: kernel layers in place: %s", ", ".join(k for k, v in layers.items() if v) or "none")
    if not layers.get("uid"):
        log.warning(
            "sandbox: evaluated code runs under this process's own uid (not root); code that "
            "defeats the in-process guards could read this user's other processes' environments "
            "(API keys) or files; run evaluations as root in a container for a per-run uid"
        )
    return layers


@functools.cache  # first asked by the layer probe, under _LAYERS_LOCK: decided once
def _root_mode() -> bool:
    """Root with a usable uid pool: the strong mode (a per-run uid, NPROC enforced, uid sweep)."""
    root_mode = os.geteuid() == 0 and _UID_POOL.usable()
    if os.geteuid() == 0 and not root_mode:
        log.warning(
            "sandbox: running as root but cannot switch to an unprivileged uid; "
            "sandboxed code keeps root's uid (only the prelude and namespaces contain it)"
        )
    return root_mode


def _argv(workdir: str, uid: int | None, timeout_s: float, memory_mb: int, probe: bool) -> list[str]:
    """The interpreter running BOOT with its key=value settings."""
    cfg = {
        "prog": os.path.join(workdir, PROGRAM_NAME),
        "dir": os.path.realpath(workdir),
        "mem": int(memory_mb) << 20,
        "cpu": max(1, int(timeout_s + 0.999)) + 1,
        "fsize": FSIZE_BYTES,
        "nofile": NOFILE,
        "nproc": NPROC,
        "uid": uid,
        "probe": 1 if probe else None,  # report the layers instead of running the program
    }
    return [sys.executable, "-I", "-S", "-B", "-c", BOOT, *(f"{k}={v}" for k, v in cfg.items() if v is not None)]


def _run(code: str, workdir: str, uid: int | None, timeout_s: float, memory_mb: int, cap: int, probe: bool) -> tuple[SandboxResult, bool]:
    """(the result, whether no process of the run is left, zombies included)."""
    prog = os.path.join(workdir, PROGRAM_NAME)
    with open(prog, "w", encoding="utf-8", errors="surrogatepass") as f:
        f.write(code)
    if uid is not None:
        os.chown(workdir, uid, uid)
    try:
        proc = subprocess.Popen(
            _argv(workdir, uid, timeout_s, memory_mb, probe),
            cwd=workdir,
            # the whole environment of the program: nothing inherited, so no secret can leak through it
            env={"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:  # e.g. EAGAIN under a process limit: the answer cannot pass
        return _not_run(f"could not start the program: {exc}"), True
    with proc:  # leaving closes the pipes and reaps the supervisor: after _kill_tree, which needs its pid held
        try:
            out, err, timed_out, overflow = _collect(proc, timeout_s, cap)
        finally:
            clean = _kill_tree(proc, uid)
    rc = proc.returncode
    if timed_out:
        reason = f"timed out after {timeout_s:g} s"
    elif overflow:
        reason = f"output exceeded {cap} bytes"
    elif rc == 0:
        reason = "ok"
    else:
        hint = {int(signal.SIGXCPU): " (CPU time limit)", int(signal.SIGXFSZ): " (file size limit)", int(signal.SIGKILL): " (killed)"}
        reason = describe_exit(rc) + hint.get(-rc, "")
    passed = rc == 0 and not timed_out and not overflow
    return SandboxResult(passed, rc, timed_out, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), reason), clean


def _collect(proc: subprocess.Popen, timeout_s: float, cap: int) -> tuple[bytes, bytes, bool, bool]:
    """Read stdout/stderr up to `cap` bytes each until the program exits or the deadline passes.

    Returns (stdout, stderr, timed_out, overflow). Exit is watched through a pidfd where the
    kernel has one (no polling); the child is never reaped here.
    """
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None and proc.stderr is not None
    bufs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    sel = selectors.DefaultSelector()
    for fd in bufs:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ, "pipe")
    try:
        pidfd = os.pidfd_open(proc.pid)
        sel.register(pidfd, selectors.EVENT_READ, "exit")
    except (AttributeError, OSError):
        pidfd = None
    timed_out = overflow = False
    exited_at: float | None = None
    try:
        while True:
            now = time.monotonic()
            if exited_at is None and pidfd is None and _has_exited(proc):
                exited_at = now
            # once it has exited, only the pipes still open are registered
            if exited_at is not None and (not sel.get_map() or now - exited_at > KILL_GRACE_S):
                break
            if exited_at is None and now >= deadline:
                timed_out = True
                break
            wait = (deadline - now) if exited_at is None else (exited_at + KILL_GRACE_S - now)
            for key, _ in sel.select(max(0.0, wait if pidfd is not None else min(wait, 0.05))):  # no pidfd: poll
                if key.data == "exit":  # the supervisor has killed and reaped the program's tree
                    sel.unregister(key.fd)
                    exited_at = time.monotonic()
                    continue
                try:
                    chunk = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                buf = bufs[key.fd]
                overflow |= len(buf) + len(chunk) > cap
                buf += chunk[: max(0, cap - len(buf))]
            if overflow:
                break
    finally:
        sel.close()
        if pidfd is not None:
            os.close(pidfd)
    return bytes(bufs[proc.stdout.fileno()]), bytes(bufs[proc.stderr.fileno()]), timed_out, overflow


def _has_exited(proc: subprocess.Popen) -> bool:
    """Whether the child has exited, without reaping it (its pid stays reserved) where the
    platform has waitid; elsewhere (not Linux, a development machine) it is reaped."""
    if proc.returncode is not None:
        return True
    if not hasattr(os, "waitid"):
        return proc.poll() is not None
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _kill_tree(proc: subprocess.Popen, uid: int | None) -> bool:
    """Kill everything the run started; `proc` is the supervisor, our unreaped child.

    Normally the supervisor has already killed and reaped the program's whole tree and exited.
    On a timeout (or if the program got rid of its supervisor) the program and its descendants
    (its uid, session or group; the supervisor spared) are killed first, so the supervisor can
    reap them (an init that does not reap would keep them as zombies); then, once it has exited
    or after a grace period, the supervisor's group and anything left. Called before the
    supervisor is reaped, so its pid (the group and session id) cannot have been reused by an
    unrelated process. Returns whether nothing of the run is left, zombies included.
    """
    pid = proc.pid

    def ours(info: Proc) -> bool:  # the supervisor itself spared
        return info.pid != pid and (info.session == pid or info.pgrp == pid or (uid is not None and info.uid == uid))

    if not _has_exited(proc):
        _kill_matching(ours, zombies_ok=True)
        deadline = time.monotonic() + KILL_GRACE_S
        while not _has_exited(proc) and time.monotonic() < deadline:
            time.sleep(0.002)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    return _kill_matching(ours)


def _kill_matching(match: Callable[[Proc], bool], rounds: int = 200, zombies_ok: bool = False) -> bool:
    """SIGKILL live processes that `match` until none is left.

    True when none is left (zombies count unless `zombies_ok`); False if some survived.
    """
    for attempt in range(rounds):
        procs = [p for p in processes(uid=True) if match(p)]
        live = [p for p in procs if p.alive]
        if not live:
            return zombies_ok or not procs
        for p in live:
            _kill_pid(p.pid, match)
        time.sleep(min(0.001 * (attempt + 1), 0.02))
    return False


def _kill_pid(pid: int, match: Callable[[Proc], bool]) -> None:
    """Kill one pid; with a pidfd, only if the process behind it still matches (no pid-reuse race)."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        return
    with contextlib.suppress(OSError):
        info = read_process(pid, uid=True)
        if info is not None and match(info):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    os.close(pidfd)


def _remove_tree(path: str) -> None:
    """Remove the sandbox directory even if the program made parts of it unreadable."""

    def fix(func: object, p: str, exc: object) -> None:  # onexc's exc, or onerror's exc_info: unused
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(p), stat.S_IRWXU)
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, stat.S_IRWXU)
                shutil.rmtree(p, ignore_errors=True)
            else:
                os.unlink(p)

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=fix)
    else:
        shutil.rmtree(path, onerror=fix)
    if os.path.exists(path):
        log.warning("sandbox: could not remove %s", path)


class _UidPool:
    """Unprivileged uids for sandboxed programs, one per concurrent run, exclusive across processes.

    A uid is used only if no user or group database entry names it and no process runs under it;
    a flock on <tmp>/shardeval-sandbox-uids/<uid>.lock (a root-only directory) is held while it is
    in use, so several shardeval processes on one node never share a uid.
    """

    def __init__(self, base: int, count: int) -> None:
        self.base, self.count = base, count
        self.lock = threading.Lock()
        self.held: dict[int, int] = {}  # uid -> lock file descriptor
        self.skip: set[int] = set()  # named in passwd/group, or left with survivors or zombies
        self.next = base
        self._busy: tuple[float, set[int]] | None = None

    def usable(self) -> bool:
        """Can we switch to a pool uid here (root, a lock directory, a uid mapped in our namespace)?
        Asked once per process, by the cached _root_mode."""
        try:
            uid = self.acquire()
            try:
                probe = subprocess.run(
                    [
                        sys.executable,
                        "-I",
                        "-S",
                        "-c",
                        f"import os; os.setgroups([]); os.setresgid({uid},{uid},{uid}); os.setresuid({uid},{uid},{uid})",
                    ],
                    env={"PATH": "/usr/bin:/bin"},
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=30,
                )
                return probe.returncode == 0
            finally:
                self.release(uid, True)
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            log.debug("sandbox: uid pool unusable: %s", exc)
            return False

    @functools.cached_property
    def _lock_dir(self) -> str:
        path = os.path.join(tempfile.gettempdir(), "shardeval-sandbox-uids")
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o077:
            raise OSError(errno.EPERM, f"{path} must be a directory owned by root with mode 0700")
        return path

    def acquire(self) -> int:
        lock_dir = self._lock_dir
        busy = self._busy_uids()
        with self.lock:
            for step in range(self.count):
                uid = self.base + (self.next - self.base + step) % self.count
                if uid in self.held or uid in self.skip or uid in busy:
                    continue
                if _uid_named(uid):
                    self.skip.add(uid)
                    continue
                fd = os.open(os.path.join(lock_dir, f"{uid}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    os.close(fd)
                    continue
                self.held[uid] = fd
                self.next = self.base + (uid - self.base + 1) % self.count
                return uid
        raise RuntimeError(f"sandbox: every uid in {self.base}-{self.base + self.count - 1} is in use")

    def _busy_uids(self) -> set[int]:
        """Uids any process runs under (a snapshot at most BUSY_TTL_S old; our own runs are
        tracked in `held`, and a uid comes back only when its sweep found nothing left)."""
        now = time.monotonic()
        if self._busy is None or now - self._busy[0] > BUSY_TTL_S:
            self._busy = (now, {p.uid for p in processes(uid=True) if p.uid is not None})
        return self._busy[1]

    def release(self, uid: int, clean: bool) -> None:
        """Give the uid back; one that still has processes (even zombies) is not used again."""
        with self.lock:
            fd = self.held.pop(uid, None)
            if not clean:
                self.skip.add(uid)
        if fd is not None:
            os.close(fd)


def _uid_named(uid: int) -> bool:
    import grp
    import pwd

    for lookup in (pwd.getpwuid, grp.getgrgid):
        with contextlib.suppress(KeyError):
            return bool(lookup(uid))
    return False


_UID_POOL = _UidPool(UID_BASE, UID_COUNT)
