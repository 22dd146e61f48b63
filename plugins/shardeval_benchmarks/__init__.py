"""Built-in plugin: arith, vision_count (generated images), data files (jsonl), gsm8k, humaneval,
mmlu, perplexity and YAML-mapped custom benchmarks, plus the `shardeval benchmarks` command.

Registered through the `shardeval` entry-point group like any third-party benchmark package.
Each benchmark's module is imported when the benchmark is first built, so one that cannot import
(a missing optional dependency) is reported when used and never hides the others.
"""

from __future__ import annotations

from shardeval.api.plugin import Lazy, hookimpl

BUILTIN = {
    "arith": "shardeval_benchmarks.arith:ArithBenchmark",
    "vision_count": "shardeval_benchmarks.vision_count:VisionCountBenchmark",
    "jsonl": "shardeval_benchmarks.jsonl:JsonlBenchmark",
    "gsm8k": "shardeval_benchmarks.gsm8k:Gsm8kBenchmark",
    "humaneval": "shardeval_benchmarks.humaneval:HumanEvalBenchmark",
    "mmlu": "shardeval_benchmarks.mmlu:MmluBenchmark",
    "perplexity": "shardeval_benchmarks.perplexity:PerplexityBenchmark",
    "custom": "shardeval_benchmarks.custom:CustomBenchmark",
}


@hookimpl
def register_benchmarks(register):
    for name, target in BUILTIN.items():
        register(name, Lazy(target))


@hookimpl
def register_commands(cli):
    from shardeval_benchmarks.command import benchmarks_command

    cli.add_command(benchmarks_command)
