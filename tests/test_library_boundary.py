"""Library exceptions do not escape as tracebacks (issue 40, point 5).

A 300-character lm-eval task name raised `OSError: File name too long` inside lm-eval's task
lookup: a traceback, exit 1. Every call into another tool at planning, loading, merging and export
goes through one boundary (shardeval.api.library_call): one line naming the input, exit 2 when it
is the input's fault, 1 otherwise. Real `shardeval run` processes for lm-eval and Inspect; the
classification itself with the exceptions those libraries raise.
"""

from __future__ import annotations

import errno
import json

import pytest

from conftest import shardeval_cmd
from shardeval.api.plugin import library_call, ShardError, UsageError


def one_line(proc, code: int) -> str:
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    (line,) = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert line.startswith("shardeval: error: ")
    return line


@pytest.mark.timeout(180)
@pytest.mark.parametrize("task", ["t" * 300, "arc_easy," + "t" * 300])
def test_an_lm_eval_task_name_lm_eval_cannot_look_up_is_one_line(tmp_path, task):
    pytest.importorskip("lm_eval")
    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        json.dumps(
            {
                "services": {"model": {"type": "api", "url": "http://127.0.0.1:9/v1", "model": "m"}},
                "benchmarks": [{"name": "lm_eval", "params": {"tasks": [task], "tokenizer_backend": "none"}}],
            }
        )
    )
    line = one_line(shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "out"), timeout=170), 2)
    assert "benchmark lm_eval" in line and "lm-eval" in line, line  # as lm-eval's lookup failed, or as an unknown task
    assert not (tmp_path / "out").exists()


INSPECT_TASKS = {
    "syntax_error": "def broken(:\n",
    "raises_at_import": "raise RuntimeError('the task module will not load')\n",
    "dataset_raises": (
        "from inspect_ai import Task, task\nfrom inspect_ai.dataset import json_dataset\n"
        "@task\ndef t():\n    return Task(dataset=json_dataset('nowhere/missing.jsonl'))\n"
    ),
}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("case", list(INSPECT_TASKS))
def test_an_inspect_task_file_inspect_cannot_load_is_one_line(tmp_path, case):
    pytest.importorskip("inspect_ai")
    (tmp_path / "tasks.py").write_text(INSPECT_TASKS[case])
    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        json.dumps(
            {
                "services": {"model": {"type": "api", "url": "http://127.0.0.1:9/v1", "model": "m"}},
                "benchmarks": [{"name": "inspect", "params": {"task": f"{tmp_path / 'tasks.py'}@t"}}],
            }
        )
    )
    line = one_line(shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "out"), timeout=170), 2)
    assert "tasks.py@t" in line and "Inspect" in line, line


@pytest.mark.parametrize(
    "raised, kind, words",
    [
        (OSError(errno.ENAMETOOLONG, "File name too long"), UsageError, "File name too long; check the name or path given"),
        (FileNotFoundError(errno.ENOENT, "No such file or directory"), UsageError, "No such file or directory"),
        (OSError(errno.ECONNREFUSED, "Connection refused"), ShardError, "Connection refused"),
        (OSError(errno.ENOSPC, "No space left on device"), ShardError, "No space left on device"),
        (KeyError("acc_norm"), UsageError, "KeyError: 'acc_norm'"),
        (SyntaxError("invalid syntax"), UsageError, "SyntaxError: invalid syntax"),
        (ModuleNotFoundError("No module named 'openai'", name="openai"), UsageError, "needs the package openai, which is not installed"),
        (RuntimeError("something inside\nwith a second line"), ShardError, "RuntimeError: something inside"),
    ],
)
def test_the_boundary_says_whose_fault_in_one_line(raised, kind, words):
    with pytest.raises(kind) as caught:
        with library_call("lm-eval", "benchmark lm_eval: tasks x"):
            raise raised
    text = str(caught.value)
    assert text.startswith("benchmark lm_eval: tasks x: ") and words in text and "\n" not in text, text


def test_the_boundary_lets_shardevals_own_errors_and_ctrl_c_through():
    for own in (UsageError("mine"), ShardError("mine"), KeyboardInterrupt()):
        with pytest.raises(type(own)):
            with library_call("Inspect", "x"):
                raise own
