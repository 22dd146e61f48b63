"""Built-in plugin: the self-contained `arith` benchmark and benchmarks read from JSONL files.

Registered through the `shardeval` entry-point group like any third-party benchmark package.
"""

from __future__ import annotations

from shardeval.hookspecs import hookimpl


@hookimpl
def register_benchmarks(register):
    from shardeval_benchmarks.arith import ArithBenchmark
    from shardeval_benchmarks.jsonl import JsonlBenchmark

    register("arith", ArithBenchmark)
    register("jsonl", JsonlBenchmark)
