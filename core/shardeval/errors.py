"""User-facing failures: one line, exit code 2, never a traceback.

Anything a user can fix (a config key, an environment variable, a path) raises `UsageError`;
the CLI prints its message as a single line and exits 2. Infrastructure failures during a run are
recorded per request instead and never reach here.
"""

from __future__ import annotations

import errno
from contextlib import contextmanager
from collections.abc import Iterator


# Exit codes: 0 every cell has an ok record (COMPLETE); 1 an infrastructure failure (ShardError);
# 2 a mistake in the user's input (UsageError); 3 finished, but not every cell has an ok record: a
# shard or rescore whose cells end in errors (manifest state `finished_with_errors`), a merge whose
# verdict is not COMPLETE (PARTIAL, ERRORS); 130 / 143 stopped by SIGINT / SIGTERM. `shardeval gate`
# (the metrics plugin) adds 4 NO-GO and 5 INCONCLUSIVE (0 GO): no other command exits with them.
EXIT_WITH_ERRORS = 3


class UsageError(Exception):
    """A mistake in the user's input: the message names the thing, the value and the fix."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()) if "\n" not in message else message.replace("\n", " "))


class ShardError(Exception):
    """A shard could not run to completion for a reason outside the user's input (exit 1)."""

    exit_code = 1


# What the user fixes by pointing elsewhere (exit 2), as opposed to what the machine must fix (exit 1:
# a full disk, a quota, an I/O error).
_USER_ERRNOS = frozenset({"EROFS", "EACCES", "EPERM", "ENOTDIR", "EISDIR", "EEXIST", "ENOENT", "ENAMETOOLONG", "ELOOP"})
_FIXES = {
    "ENOSPC": "free space and rerun",
    "EDQUOT": "free space in your quota and rerun",
    "EROFS": "choose a writable location or remount it read-write",
    "EACCES": "choose a location you may write to, or fix its permissions",
    "EPERM": "choose a location you may write to, or fix its permissions",
}


def os_error(exc: OSError, verb: str, *, fix: str | None = None, alternative: str | None = None) -> UsageError | ShardError:
    """One line for a failed file operation: what (`verb` and the path), why (strerror and errno
    name) and the fix (`fix`, else the usual one for that errno, then `alternative`); a UsageError
    when pointing elsewhere fixes it, else a ShardError."""
    import errno

    code = errno.errorcode.get(exc.errno or 0, "")
    where = exc.filename if exc.filename is not None else "a file"
    why = exc.strerror or str(exc) or type(exc).__name__
    advice = fix or _FIXES.get(code, "check the path and rerun")
    if alternative:
        advice += f", or {alternative}"
    text = f"cannot {verb} {where}: {why}" + (f" ({code})" if code else "") + f"; {advice}"
    return UsageError(text) if code in _USER_ERRNOS or getattr(exc, "user_fixable", False) else ShardError(text)


# How a library says the network failed: the exception types on the way (requests', urllib3's, httpx's,
# the standard library's) and, for a library that kept only the text, its words.
_NETWORK_TYPES = {
    "ConnectionError",
    "ConnectTimeout",
    "ReadTimeout",
    "Timeout",
    "MaxRetryError",
    "NewConnectionError",
    "ConnectionRefusedError",
    "ConnectionResetError",
    "TimeoutError",
    "gaierror",
    "ProxyError",
    "SSLError",
    "ConnectError",
    "ReadError",
    "RemoteProtocolError",
}
_NETWORK_WORDS = (
    "max retries exceeded",
    "failed to establish a new connection",
    "connection refused",
    "connection reset",
    "name or service not known",
    "temporary failure in name resolution",
    "timed out",
    "deadline exceeded",
    "no route to host",
    "network is unreachable",
)


def network_failure(exc: BaseException | None) -> bool:
    """Whether a library's failure is the network's (a connection or name-resolution error anywhere
    on the exception's chain, or a message that says one), so that an error names its true cause:
    a server that answered with an error of its own is never "check the network"."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if any(cls.__name__ in _NETWORK_TYPES for cls in type(exc).__mro__) or any(w in str(exc).lower() for w in _NETWORK_WORDS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


# An OSError from a library looking at what the user named: the input's fault (exit 2), not the machine's.
_INPUT_ERRNOS = {"ENAMETOOLONG", "ENOENT", "ENOTDIR", "EISDIR", "ELOOP", "EACCES", "EPERM", "EINVAL", "EILSEQ"}
# What a library raises about the input it was handed (a task name, a task file, an image): exit 2.
_INPUT_EXCEPTIONS = (ValueError, LookupError, TypeError, SyntaxError, NameError, AttributeError, AssertionError, ImportError)


@contextmanager
def library_call(library: str, subject: str) -> Iterator[None]:
    """The one boundary around a call into another tool (lm-eval, Inspect, MLflow, W&B, Pillow) at
    planning, loading, merging and export: whatever it raises becomes one line naming `subject`
    (the input: a task name, a task file, an image, a store), never a traceback. The input's fault
    (an OSError about the path it names, ENAMETOOLONG for a 300-character task name; a ValueError,
    a KeyError, a SyntaxError in a task file; a package it needs that is missing) is a UsageError,
    exit 2; anything else (the network, the disk, a bug) a ShardError, exit 1. shardeval's own
    errors, Ctrl-C and exits pass through."""
    try:
        yield
    except (UsageError, ShardError):
        raise
    except OSError as exc:
        name = errno.errorcode.get(exc.errno or 0, "")
        what = f"{library}: {_first_line(exc.strerror or str(exc))}"
        if name in _INPUT_ERRNOS and not network_failure(exc):
            raise UsageError(f"{subject}: {what}; check the name or path given") from None
        raise ShardError(f"{subject}: {what}") from None
    except Exception as exc:
        said = f"{library}: {type(exc).__name__}: {_first_line(str(exc))}"
        if isinstance(exc, ImportError) and getattr(exc, "name", None):
            raise UsageError(
                f"{subject}: {library} needs the package {exc.name}, which is not installed: pip install it "
                f"(or the shardeval extra that brings {library})"
            ) from None
        if isinstance(exc, _INPUT_EXCEPTIONS) and not network_failure(exc):
            raise UsageError(f"{subject}: {said}") from None
        raise ShardError(f"{subject}: {said}") from None


def _first_line(text: str, limit: int = 300) -> str:
    """A library's message as one line of at most `limit` characters (URL secrets are taken out
    where the line is printed: run_cli)."""
    line = next((part.strip() for part in str(text).splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"
