"""Built-in plugin: the self-contained `arith` benchmark and benchmarks read from JSONL files.

Registered through the `shardeval` entry-point group like any third-party benchmark package.
"""

from __future__ import annotations

from shardeval.hookspecs import hookimpl


@hookimpl
def register_benchmarks(register):
    from shardeval_benchmarks.arith import ArithBenchmark
    from shardeval_benchmarks.jsonl import JsonlBenchmark
    from shardeval_benchmarks.humaneval import HumanEvalBenchmark
    from shardeval_benchmarks.gsm8k import Gsm8kBenchmark
    from shardeval_benchmarks.custom import CustomBenchmark
    from shardeval_benchmarks.mmlu import MmluBenchmark
    from shardeval_benchmarks.perplexity import PerplexityBenchmark

    register("arith", ArithBenchmark)
    register("jsonl", JsonlBenchmark)
    register("humaneval", HumanEvalBenchmark)
    register("gsm8k", Gsm8kBenchmark)
    register("custom", CustomBenchmark)
    register("mmlu", MmluBenchmark)
    register("perplexity", PerplexityBenchmark)


@hookimpl
def register_commands(cli):
    from shardeval_benchmarks.command import benchmarks_command

    cli.add_command(benchmarks_command)
