"""What the loaded plugins registered: benchmarks, solvers, services, orchestrators, metrics."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Callable

from shardeval.errors import UsageError

KINDS = ("benchmarks", "solvers", "services", "orchestrators", "metrics")


@dataclass(frozen=True)
class Entry:
    name: str
    factory: Any
    plugin: str
    config: type | None = None


@dataclass
class Registry:
    entries: dict[str, dict[str, Entry]] = field(default_factory=lambda: {k: {} for k in KINDS})
    problems: list[str] = field(default_factory=list)

    def registrar(self, kind: str, plugin: str) -> Callable[..., None]:
        """The `register` callback a plugin's hook receives; it records who registered what."""
        table = self.entries[kind]

        def register(name: str, factory: Any, config: type | None = None) -> None:
            if name in table:
                self.problems.append(
                    f"plugin {plugin!r} registers {kind[:-1]} {name!r}, already registered by "
                    f"{table[name].plugin!r}; the first one is kept"
                )
                return
            table[name] = Entry(name=name, factory=factory, plugin=plugin, config=config)

        return register

    def get(self, kind: str, name: str, where: str) -> Entry:
        """Look up a registration or fail with one line naming the value, the choices and the fix."""
        table = self.entries[kind]
        if name in table:
            return table[name]
        close = difflib.get_close_matches(name, list(table), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        known = ", ".join(sorted(table)) or "none"
        raise UsageError(
            f"{where}: unknown {kind[:-1]} {name!r}; {hint}registered: {known} "
            f"(`shardeval plugins` lists what is loaded)"
        )
