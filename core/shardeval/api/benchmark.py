"""shardeval.api.benchmark: what a benchmark plugin needs: what a benchmark is, its params, its
rows, how an answer is read and scored, its images. The names and what each is for are listed once
in shardeval/api/roles.py (docs/plugins.md shows them); a name loads its core module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardeval.api.roles import serve

if TYPE_CHECKING:  # made from shardeval/api/roles.py by scripts/dev/api_roles_rewrite.py --blocks
    from shardeval.benchmark import Benchmark as Benchmark, Problem as Problem, Score as Score
    from shardeval.config import BenchmarkConfig as BenchmarkConfig
    from shardeval.run.runner import make_benchmark as make_benchmark
    from shardeval.benchmark.params import ParamsStruct as ParamsStruct, DataParams as DataParams, decode_params as decode_params
    from shardeval.benchmark.datasets import (
        RowsBenchmark as RowsBenchmark,
        Rows as Rows,
        JsonlRows as JsonlRows,
        open_rows as open_rows,
        open_from_params as open_from_params,
        package_data as package_data,
    )
    from shardeval.benchmark.answers import (
        final_answer as final_answer,
        normalize as normalize,
        normalize_text as normalize_text,
        as_number as as_number,
        extract_numeric as extract_numeric,
        numbers_equal as numbers_equal,
        extract_choice as extract_choice,
        extract_choice_vlm as extract_choice_vlm,
        normalize_vqa as normalize_vqa,
        vqa_accuracy as vqa_accuracy,
    )
    from shardeval.benchmark.rubric import Rubric as Rubric
    from shardeval.benchmark.downloads import (
        PrepareContext as PrepareContext,
        prepared_folder as prepared_folder,
        preparing as preparing,
        PREPARE_HINT as PREPARE_HINT,
    )
    from shardeval.benchmark.reasoning import split_reply as split_reply, DEFAULT_TAGS as DEFAULT_TAGS
    from shardeval.benchmark.images import (
        describe as describe,
        IMAGE_MARKER as IMAGE_MARKER,
        register_generator as register_generator,
        offer_image_bytes as offer_image_bytes,
    )
    from shardeval.store.procfs import processes as processes, read_process as read_process, Proc as Proc
    from shardeval.run.process import describe_exit as describe_exit
else:  # type checkers read the imports above; at run time each name is imported on first use
    __getattr__, __dir__, __all__ = serve("benchmark")
