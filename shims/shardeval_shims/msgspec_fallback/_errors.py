"""msgspec's exception types, and the internal error that collects a `$.a[0]` path on its way up."""

from __future__ import annotations


class MsgspecError(Exception):
    """Base class of every error this module raises, as in msgspec."""


class DecodeError(MsgspecError, ValueError):
    """The input is not valid JSON (or is invalid for the requested type)."""


class ValidationError(DecodeError):
    """The input is valid JSON but does not match the requested type."""


class EncodeError(MsgspecError):
    """An object could not be encoded."""


class Invalid(Exception):
    """A validation failure still travelling up the converters.

    Containers append their step (`.name`, `[0]`, `[...]`) while it unwinds, so the happy path
    never builds a path; the public API turns it into a ValidationError with msgspec's wording.
    """

    __slots__ = ("message", "path", "in_key")

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.path: list[str] = []  # innermost step first
        self.in_key = False

    def render(self) -> str:
        if not self.path and not self.in_key:
            return self.message
        where = "$" + "".join(reversed(self.path))
        if self.in_key:
            return f"{self.message} - at `key` in `{where}`"
        return f"{self.message} - at `{where}`"

    def public(self) -> ValidationError:
        return ValidationError(self.render())


def out_of_range() -> Invalid:
    return Invalid("Number out of range")


def truncated() -> DecodeError:
    return DecodeError("Input data was truncated")


def malformed(what: str, pos: int) -> DecodeError:
    return DecodeError(f"JSON is malformed: {what} (byte {pos})")
