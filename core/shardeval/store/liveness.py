"""One writer per shard directory, and proof that the writer is still alive.

Two processes appending to one shard directory ask every pair twice and interleave their records;
a shard whose node was lost leaves a manifest that says `running` forever. Both are settled here:

- `shard.lock` is held with `flock(LOCK_EX | LOCK_NB)` for the whole run. The kernel drops the
  lock when the process dies however it dies, so a killed shard never blocks its rerun. The file
  holds the holder's host and pid, for the one-line refusal a second writer gets. It is never
  deleted or moved (a new file at the same path would be a second, independent lock).
- `heartbeat.json` (`records.Heartbeat`) is replaced atomically every `period_s` by a thread, so
  a busy event loop (a long resume read, scoring) cannot make a live shard look dead. A reader
  (`status`, `merge`) calls a `running` shard lost when its writer is provably gone: on the same
  machine (host, boot and pid namespace) by its pid; elsewhere when the heartbeat is older than
  `stale_after_s`; and at once when the writer left without closing its manifest (`ended_at`).
- The heartbeat is also the lock's fallback: where flock is not supported (some network
  filesystems), a fresh heartbeat of another live process refuses the second writer just the
  same. Not covered: NFS mounted with `local_lock=flock|all`, where flock succeeds on each node
  without seeing the others (a granted lock is trusted, see `_lock`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass

import msgspec

from shardeval.store.atomic import atomic_write
from shardeval.errors import UsageError, os_error
from shardeval.store.procfs import read_process
from shardeval.store.records import HEARTBEAT_FILE, LOCK_FILE, Heartbeat
from shardeval.store.regular import read_regular

log = logging.getLogger("shardeval")

PERIOD_ENV = "SHARDEVAL_HEARTBEAT_S"
DEFAULT_PERIOD_S = 5.0
# Lost after 18 periods (90 s by default) without a refresh. The margin is for readers on other
# nodes of a shared filesystem: NFS caches directory attributes for up to 60 s (acdirmax), so a
# reader may see a replaced heartbeat.json that late; then one period, then clock skew.
STALE_PERIODS = 18
_UNSUPPORTED = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


def heartbeat_period() -> float:
    """Seconds between heartbeats: SHARDEVAL_HEARTBEAT_S, else 5."""
    raw = os.environ.get(PERIOD_ENV)
    if not raw:
        return DEFAULT_PERIOD_S
    with contextlib.suppress(ValueError):
        if 0 < (value := float(raw)) < 3600:
            return value
    raise UsageError(f"{PERIOD_ENV}={raw!r}: must be seconds between heartbeats, above 0 and below 3600 (default {DEFAULT_PERIOD_S:g})")


def _machine() -> tuple[str | None, str | None]:
    """(boot id, pid namespace) of this process: with the host name, where a heartbeat's pid can be checked."""
    boot_id = pid_ns = None
    with contextlib.suppress(OSError), open("/proc/sys/kernel/random/boot_id") as f:
        boot_id = f.read().strip()
    with contextlib.suppress(OSError):
        pid_ns = os.readlink("/proc/self/ns/pid")
    return boot_id, pid_ns


def this_process(period_s: float, started_at: float) -> Heartbeat:
    boot_id, pid_ns = _machine()
    return Heartbeat(
        host=socket.gethostname(),
        pid=os.getpid(),
        started_at=started_at,
        updated_at=time.time(),
        period_s=period_s,
        stale_after_s=STALE_PERIODS * period_s,
        boot_id=boot_id,
        pid_ns=pid_ns,
        pid_start=getattr(read_process(os.getpid()), "start", None),
        job=scheduler_job(os.environ),
    )


def scheduler_job(env: os._Environ[str] | dict[str, str]) -> str | None:
    """The batch job this process runs in, as its scheduler names it: a SLURM array task
    (`123_4`) or job, a Kubernetes Indexed Job's pod (its host name is the pod's name)."""
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        return f"SLURM job {env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    if env.get("SLURM_JOB_ID"):
        return f"SLURM job {env['SLURM_JOB_ID']}"
    if env.get("JOB_COMPLETION_INDEX"):
        return f"Kubernetes index {env['JOB_COMPLETION_INDEX']}"
    return None


def same_machine(hb: Heartbeat) -> bool:
    """Can this process check `hb.pid` itself? Same host name, same boot, same pid namespace."""
    known = None not in (hb.boot_id, hb.pid_ns)
    return known and hb.host == socket.gethostname() and (hb.boot_id, hb.pid_ns) == _machine()


def pid_alive(pid: int, start: int | None) -> bool:
    """Running (not a zombie) and the same process that wrote the heartbeat, not a reuse of its pid."""
    proc = read_process(pid)
    if proc is None:
        return os.path.exists(f"/proc/{pid}")  # listed but unreadable: cannot tell, so alive
    return proc.alive and (start is None or proc.start == start)


@dataclass(frozen=True)
class Liveness:
    """What a shard's heartbeat says about its writer."""

    lost: bool
    since: float  # the last sign of life
    why: str  # names the writer: "pid 1234 on node17 is gone"


def writer_liveness(hb: Heartbeat, now: float | None = None) -> Liveness:
    """Is the process that wrote `hb` still alive? Asked of its pid on the same machine, of the
    heartbeat's age elsewhere; lost at once when it left without closing its manifest."""
    now = time.time() if now is None else now
    holder = f"pid {hb.pid} on {hb.host}"
    if hb.ended_at is not None:
        return Liveness(True, hb.ended_at, f"{holder} ended without closing its manifest")
    if same_machine(hb):
        if not pid_alive(hb.pid, hb.pid_start):
            return Liveness(True, hb.updated_at, f"{holder} is gone")
        return Liveness(False, hb.updated_at, f"{holder} is running")
    age = now - hb.updated_at
    if age > hb.stale_after_s:
        return Liveness(True, hb.updated_at, f"no heartbeat from {holder} for {age:.0f} s (lost after {hb.stale_after_s:g} s)")
    return Liveness(False, hb.updated_at, f"{holder} beat {max(age, 0):.0f} s ago")


def read_heartbeat(out_dir: str, name: str = HEARTBEAT_FILE) -> Heartbeat | None:
    """The shard's heartbeat (or the lock file's holder); None when there is none (never started,
    or written before heartbeats existed) or it cannot be read: no evidence either way."""
    try:
        return msgspec.json.decode(read_regular(os.path.join(out_dir, name)), type=Heartbeat)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def clock(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


class ShardLease:
    """The right to write one shard directory, held from `acquire()` to `release()`."""

    def __init__(self, out_dir: str, period_s: float | None = None) -> None:
        self.out_dir = out_dir
        self.period_s = heartbeat_period() if period_s is None else period_s
        self.lock_path = os.path.join(out_dir, LOCK_FILE)
        self.path = os.path.join(out_dir, HEARTBEAT_FILE)
        self._fd: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._me: Heartbeat | None = None
        self._warned = False

    def acquire(self) -> None:
        """Take the directory or refuse in one line naming the holder (UsageError, exit 2)."""
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:  # the one wording of every output that cannot be written (exit 2 or 1)
            raise os_error(exc, "write", alternative="give another output directory with -o") from None
        try:
            locked = self._lock(fd)
            me = this_process(self.period_s, time.time())
            other = read_heartbeat(self.out_dir) if not locked else None
            if other is not None and other.ended_at is None and (other.host, other.pid, other.pid_start) != (me.host, me.pid, me.pid_start):
                if not writer_liveness(other).lost:  # no lock to ask: a live writer's heartbeat keeps us out
                    raise UsageError(self._refusal(other))
            with contextlib.suppress(OSError):  # who holds it, for a refused second writer; not needed to hold it
                os.ftruncate(fd, 0)
                os.pwrite(fd, msgspec.json.encode(me) + b"\n", 0)
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._me = fd, me
        self._write()
        self._thread = threading.Thread(target=self._beat, name="shardeval-heartbeat", daemon=True)
        self._thread.start()

    def check_free(self) -> None:
        """Refuse, as `acquire` would, a directory that a live writer holds now; take nothing and
        write nothing (a launch's check before --fresh moves any shard's results aside)."""
        try:
            fd = os.open(self.lock_path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return  # no lock file: no writer yet (one that cannot be read: the shard itself says why)
        try:
            if not self._lock(fd):  # no file locks here: the heartbeat decides, as in acquire
                other = read_heartbeat(self.out_dir)
                if other is not None and other.ended_at is None and not writer_liveness(other).lost:
                    raise UsageError(self._refusal(other))
        finally:
            os.close(fd)  # and with it the lock just taken

    def _lock(self, fd: int) -> bool:
        """True once locked; False where this filesystem has no locks (then the heartbeat decides).

        A lock that was granted is trusted over an earlier writer's fresh heartbeat: that writer
        is dead (a container restarted, a pod replaced), and refusing its successor for the
        staleness period would fail retries that orchestrators count."""
        import fcntl

        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            raise UsageError(self._refusal(self._holder())) from None
        except OSError as exc:
            if exc.errno not in _UNSUPPORTED:
                raise
            log.warning(
                "%s: file locks are not supported here (%s); the heartbeat alone keeps out a second writer", self.lock_path, exc.strerror
            )
            return False

    def _holder(self) -> Heartbeat | None:
        """Who holds the lock, from the lock file (which it writes just after locking: retry briefly)."""
        deadline = time.monotonic() + 2.0
        while (holder := read_heartbeat(self.out_dir, LOCK_FILE)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        return holder

    def _refusal(self, holder: Heartbeat | None) -> str:
        hb = read_heartbeat(self.out_dir)
        if holder is not None and hb is not None and (hb.host, hb.pid) == (holder.host, holder.pid):
            holder = hb  # the lock file says who, the heartbeat says when last
        if holder is None:
            who = "another process (its host and pid could not be read from shard.lock)"
        else:
            age = max(0.0, time.time() - holder.updated_at)
            job = f"{holder.job}, " if holder.job else ""
            who = f"pid {holder.pid} on {holder.host} ({job}since {clock(holder.started_at)}, last heartbeat {age:.0f} s ago)"
        return (
            f"-o {self.out_dir}: already being written by {who}; a shard directory takes one writer, two would ask "
            "every pair twice: wait for it to finish, stop it, or give this run another -o"
        )

    def _write(self, ended: bool = False) -> None:
        assert self._me is not None
        now = time.time()
        self._me.updated_at = now
        if ended:
            self._me.ended_at = now
        data = msgspec.json.encode(self._me) + b"\n"
        with contextlib.suppress(OSError):
            return atomic_write(self.path, data)
        try:  # a full disk has no block for a new file: rewrite in place (a reader may then see half
            with open(self.path, "r+b") as f:  # of it once, which it takes as no evidence either way)
                f.write(data)
                f.truncate()
        except OSError as exc:  # never stops the shard; the next beat tries again
            if not self._warned:
                self._warned = True
                log.warning("cannot write %s (%s); status may call this shard lost", self.path, exc.strerror or exc)

    def _beat(self) -> None:
        while not self._stop.wait(self.period_s):
            self._write()

    def release(self) -> None:
        """Stop the heartbeat, mark it ended (a manifest still `running` then reads as lost), unlock."""
        if self._fd is None:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.period_s + 5.0)
        self._write(ended=True)
        os.close(self._fd)  # closing the only descriptor releases the flock
        self._fd = None
