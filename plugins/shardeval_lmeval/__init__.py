"""Built-in plugin: any lm-evaluation-harness task as shardeval benchmarks (docs/lm-eval.md).

`benchmarks: [{name: lm_eval, params: {tasks: [...]}}]` or `--bench lm_eval:gsm8k,arc_easy`. lm-eval
plans the requests in one process, shards send them, lm-eval scores them; the merge also writes
lm-eval's own results_*.json and samples_*.jsonl. lm-eval is the optional extra
`shardeval[lm-eval]`, imported only when an lm_eval benchmark is used. Written against
shardeval.api alone: the template for the next adapter.
"""

from __future__ import annotations

from shardeval.api.plugin import hookimpl, Lazy


@hookimpl
def register_benchmarks(register):
    register("lm_eval", Lazy("shardeval_lmeval.benchmark:LmEvalBenchmark"))


@hookimpl
def register_solvers(register):
    register("lm_eval", Lazy("shardeval_lmeval.solver:LmEvalSolver"))


@hookimpl
def register_metrics(register):
    register("lm_eval", Lazy("shardeval_lmeval.metrics:lm_eval_metrics"))


@hookimpl
def write_merged_outputs(result, out_dir):
    from shardeval.api.plugin import library_call
    from shardeval_lmeval.outputs import write_lm_eval_outputs  # imports no lm-eval unless the run has lm_eval entries

    with library_call("lm-eval", f"the lm-eval results under {out_dir}"):
        return write_lm_eval_outputs(result, out_dir)
