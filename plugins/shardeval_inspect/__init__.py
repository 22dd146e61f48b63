"""Built-in plugin: any Inspect AI task as a shardeval benchmark (docs/inspect.md).

`benchmarks: [{name: inspect, params: {task: path/to/tasks.py@my_task}}]` or
`--bench inspect:path/to/tasks.py@my_task`. Each shard runs its samples through Inspect's own
runtime (solver, tools, sandbox, scorers unchanged) against the service's endpoint; merge also
writes merged/inspect/<task>.eval, one Inspect log of every shard's samples that Inspect's viewer
opens. Inspect is the optional extra `shardeval[inspect]`, imported only when an inspect benchmark
is used. Written against shardeval.api alone, like shardeval_lmeval.
"""

from __future__ import annotations

from shardeval.api.plugin import hookimpl, Lazy


@hookimpl
def register_benchmarks(register):
    register("inspect", Lazy("shardeval_inspect.benchmark:InspectBenchmark"))


@hookimpl
def register_solvers(register):
    register("inspect", Lazy("shardeval_inspect.solver:InspectSolver"))


@hookimpl
def write_merged_outputs(result, out_dir):
    from shardeval.api.plugin import library_call
    from shardeval_inspect.outputs import write_inspect_logs  # imports no Inspect unless the run has inspect entries

    with library_call("Inspect", f"the Inspect logs under {out_dir}"):
        return write_inspect_logs(result, out_dir)


@hookimpl
def register_exporters(register):
    from shardeval_inspect.export_config import InspectExportConfig

    register("inspect", Lazy("shardeval_inspect.export:export_inspect"), config=InspectExportConfig)
