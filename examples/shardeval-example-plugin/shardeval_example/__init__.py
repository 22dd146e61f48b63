"""shardeval-example: a third-party plugin that registers one benchmark, `capitals`.

shardeval imports this module through the `shardeval` entry point (see pyproject.toml) and calls
its hooks. Keep the module light: import the benchmark class inside the hook, so `shardeval
--help` never pays for it.
"""

from __future__ import annotations

from shardeval.api.plugin import Register, hookimpl


@hookimpl
def register_benchmarks(register: Register) -> None:
    from shardeval_example.capitals import CapitalsBenchmark

    register("capitals", CapitalsBenchmark)
