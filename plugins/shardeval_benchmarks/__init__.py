"""Built-in plugin: arith, data files (jsonl), gsm8k, humaneval, mmlu, perplexity and YAML-mapped
custom benchmarks, plus the `shardeval benchmarks` command.

Registered through the `shardeval` entry-point group like any third-party benchmark package.
Each benchmark's module is imported when the benchmark is first built, so one that cannot import
(a missing optional dependency) is reported when used and never hides the others.
"""

from __future__ import annotations

import importlib

from shardeval.api import hookimpl

BUILTIN = {
    "arith": ("shardeval_benchmarks.arith", "ArithBenchmark"),
    "jsonl": ("shardeval_benchmarks.jsonl", "JsonlBenchmark"),
    "gsm8k": ("shardeval_benchmarks.gsm8k", "Gsm8kBenchmark"),
    "humaneval": ("shardeval_benchmarks.humaneval", "HumanEvalBenchmark"),
    "mmlu": ("shardeval_benchmarks.mmlu", "MmluBenchmark"),
    "perplexity": ("shardeval_benchmarks.perplexity", "PerplexityBenchmark"),
    "custom": ("shardeval_benchmarks.custom", "CustomBenchmark"),
}


class LazyBenchmark:
    """A benchmark class imported on first use; calling it builds the benchmark."""

    def __init__(self, module: str, attr: str) -> None:
        self.__module__ = module
        self.attr = attr

    def load(self) -> type:
        return getattr(importlib.import_module(self.__module__), self.attr)

    def __call__(self, params):
        return self.load()(params)

    def __repr__(self) -> str:
        return f"<benchmark {self.__module__}.{self.attr}>"


@hookimpl
def register_benchmarks(register):
    for name, (module, attr) in BUILTIN.items():
        register(name, LazyBenchmark(module, attr))


@hookimpl
def register_commands(cli):
    from shardeval_benchmarks.command import benchmarks_command

    cli.add_command(benchmarks_command)
