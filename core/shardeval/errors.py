"""User-facing failures: one line, exit code 2, never a traceback.

Anything a user can fix (a config key, an environment variable, a path) raises `UsageError`;
the CLI prints its message as a single line and exits 2. Infrastructure failures during a run are
recorded per request instead and never reach here.
"""

from __future__ import annotations


# Exit codes: 0 every cell has an ok record (COMPLETE); 1 an infrastructure failure (ShardError);
# 2 a mistake in the user's input (UsageError); 3 finished, but not every cell has an ok record: a
# shard or rescore whose cells end in errors (manifest state `finished_with_errors`), a merge whose
# verdict is not COMPLETE (PARTIAL, ERRORS); 130 / 143 stopped by SIGINT / SIGTERM.
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
