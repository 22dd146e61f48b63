"""Struct field names as encoded: the `rename=` option ("camel", "kebab", a mapping, a callable)."""

from __future__ import annotations

from typing import Any, Callable


def _camel(name: str, cap_first: bool) -> str:
    """Leading underscores stay; later words are title-cased and joined (`a_b__c_` -> `aBC`)."""
    parts = name.split("_")
    if len(parts) == 1 and not cap_first:
        return name
    out = []
    first = True
    for part in parts:
        if first:
            if not part:
                out.append("_")
                continue
            first = False
            out.append(part.title() if cap_first else part)
        else:
            out.append(part.title())
    return "".join(out)


_NAMED: dict[str, Callable[[str], str]] = {
    "lower": str.lower,
    "upper": str.upper,
    "camel": lambda n: _camel(n, False),
    "pascal": lambda n: _camel(n, True),
    "kebab": lambda n: n.strip("_").replace("_", "-"),
}


def renamer(rename: Any) -> Callable[[str], str]:
    """A function mapping a field name to its encoded name."""
    if rename is None:
        return lambda name: name
    if isinstance(rename, str):
        try:
            return _NAMED[rename]
        except KeyError:
            raise ValueError(
                f"rename must be one of {{'lower', 'upper', 'camel', 'pascal', 'kebab'}}, got {rename!r}"
            ) from None
    if callable(rename):
        def call(name: str) -> str:
            new = rename(name)
            if new is None:
                return name
            if not isinstance(new, str):
                raise TypeError(f"Expected calling `rename` to return a `str` or `None`, got {type(new).__name__}")
            return new
        return call
    if hasattr(rename, "get"):
        def lookup(name: str) -> str:
            new = rename.get(name)
            return name if new is None else new
        return lookup
    raise TypeError("`rename` must be a str, callable, or mapping")
