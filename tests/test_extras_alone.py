"""Each extra brings what its feature needs (issue 40, point 8).

`pip install 'shardeval[inspect]'` in a fresh venv, then an Inspect benchmark against an
OpenAI-compatible server: every sample ended an `internal` error quoting Inspect's rich markup
("OpenAI Compatible API requires optional dependencies ... [bold]pip install openai[/bold]"), exit
3. The test extra installs openai, which hid it. The inspect extra now brings openai, and a missing
optional package of Inspect's is caught before any request: one line naming the extra, exit 2.

The missing package is made missing here by a stand-in `openai` that fails to import, first on the
path of the `shardeval run` process (the venv has openai, for the other tests): what Inspect sees
in a venv without it. tests/test_extras_fresh_venv.py runs each extra from a fresh venv of its own.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

from conftest import shardeval_cmd
from inspect_support import inspect_config, inspect_sim, write_tasks

ROOT = Path(__file__).resolve().parents[1]


def test_the_inspect_extra_brings_the_provider_it_uses():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(req.startswith("openai") for req in extras["inspect"]), extras["inspect"]


@pytest.mark.timeout(180)
def test_an_inspect_run_without_openai_is_one_line_before_any_request(tmp_path):
    pytest.importorskip("inspect_ai")
    stand_in = tmp_path / "without_openai" / "openai"
    stand_in.mkdir(parents=True)
    (stand_in / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'openai'\", name='openai')\n")
    tasks = write_tasks(tmp_path / "tasks", 6)
    with inspect_sim(tasks, "--log-requests", str(tmp_path / "requests.jsonl")) as url:
        cfg = inspect_config(tmp_path / "run.json", url, tasks, [{"task": "arith", "repeats": 1}])
        env = {"PYTHONPATH": os.pathsep.join([str(stand_in.parent), os.environ.get("PYTHONPATH", "")])}
        done = shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "out"), env=env, timeout=170)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.strip().splitlines() if line.startswith("shardeval: error:")]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "pip install 'shardeval[inspect]'" in lines[0] and "[bold]" not in lines[0] and "openai" in lines[0], lines[0]
    sent = (tmp_path / "requests.jsonl").read_text() if (tmp_path / "requests.jsonl").exists() else ""
    assert [json.loads(x) for x in sent.splitlines() if x.strip()] == []  # before any request
