"""The simulator's OpenAI tool calling, as an agent sees it: scripted calls, then `submit`.

Every server is a real `shardeval sim` process on 127.0.0.1 (conftest.running_sim); the last
tests run Inspect AI's own `react()` agent with `bash()` in its `local` sandbox against one.
"""

from __future__ import annotations

import json
import os
from typing import Any
from collections.abc import Iterator

import msgspec
import openai
import pytest
from conftest import running_sim, shardeval_cmd

FAST = ("--ttft-ms", "0", "--itl-ms", "0")
SCRIPT = [{"name": "bash", "arguments": {"cmd": "ls /"}}, {"name": "python", "arguments": {"code": "print(6 * 7)"}}]
QUESTION = "What is 2 + 3?"


def function_tool(name: str, **params: str) -> dict[str, Any]:
    properties = {p: {"type": kind} for p, kind in params.items()}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"the {name} tool",
            "parameters": {"type": "object", "properties": properties, "required": list(params)},
        },
    }


BASH, PYTHON, SUBMIT = function_tool("bash", cmd="string"), function_tool("python", code="string"), function_tool("submit", answer="string")


def client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=20)


def chat(base: str, messages: list[dict[str, Any]], **kw: Any) -> Any:
    return client(base).chat.completions.create(model="sim", messages=messages, **kw)


def plain_reply(base: str, text: str) -> str:
    """The simulator's usual reply to `text` (no tools offered)."""
    return chat(base, [{"role": "user", "content": text}]).choices[0].message.content


def run_agent(base: str, tools: list[dict[str, Any]], max_turns: int = 6, **kw: Any) -> tuple[list[Any], Any]:
    """Call the simulator as an agent loop would: each tool call gets a `tool` result, until a
    reply without calls or a `submit`. Returns (the calls in order, the last choice)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Use the tools."}, {"role": "user", "content": QUESTION}]
    calls = []
    for _ in range(max_turns):
        choice = chat(base, messages, tools=tools, **kw).choices[0]
        if not choice.message.tool_calls:
            return calls, choice
        call = choice.message.tool_calls[0]
        calls.append(call)
        if call.function.name == "submit":
            return calls, choice
        messages += [
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": f"output of {call.function.name}"},
        ]
    raise AssertionError(f"no final answer after {max_turns} turns: {calls}")


@pytest.fixture(scope="module")
def default_sim() -> Iterator[str]:
    with running_sim(*FAST) as base:
        yield base


@pytest.fixture(scope="module")
def scripted_sim() -> Iterator[str]:
    with running_sim(*FAST, "--tool-calls", json.dumps(SCRIPT)) as base:
        yield base


# --- the script -------------------------------------------------------------------------------


def test_default_script_calls_the_first_tool_once_then_submits_the_usual_answer(default_sim: str) -> None:
    calls, last = run_agent(default_sim, [BASH, PYTHON, SUBMIT])
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("bash", {"cmd": "echo sim"}),
        ("submit", {"answer": plain_reply(default_sim, QUESTION)}),
    ]
    assert last.finish_reason == "tool_calls" and last.message.content is None
    assert all(c.type == "function" and c.id.startswith("call_") for c in calls) and len({c.id for c in calls}) == 2
    again, _ = run_agent(default_sim, [BASH, PYTHON, SUBMIT])  # stateless: a retried conversation gets the same calls
    assert [(c.id, c.function.arguments) for c in again] == [(c.id, c.function.arguments) for c in calls]
    code_first, _ = run_agent(default_sim, [PYTHON, SUBMIT])
    assert json.loads(code_first[0].function.arguments) == {"code": "print('sim')"}
    only_submit, _ = run_agent(default_sim, [SUBMIT])
    assert [c.function.name for c in only_submit] == ["submit"]


def test_default_arguments_follow_the_schema() -> None:
    from shardeval_sim.tools import default_arguments

    schema = {
        "type": "object",
        "required": ["path", "n", "mode", "flag", "maybe", "items"],
        "properties": {
            "path": {"type": "string"},
            "n": {"type": "integer"},
            "mode": {"enum": ["r", "w"]},
            "flag": {"type": "boolean"},
            "maybe": {"anyOf": [{"type": "null"}, {"type": "number"}]},
            "items": {"type": "array"},
            "optional": {"type": "string"},
        },
    }
    assert default_arguments(schema) == {"path": "sim", "n": 1, "mode": "r", "flag": False, "maybe": 1, "items": []}


def test_a_configured_script_runs_in_order_then_submits(scripted_sim: str) -> None:
    calls, last = run_agent(scripted_sim, [BASH, PYTHON, SUBMIT])
    assert [c.function.name for c in calls] == ["bash", "python", "submit"]
    assert [json.loads(c.function.arguments) for c in calls[:2]] == [s["arguments"] for s in SCRIPT]
    assert json.loads(calls[2].function.arguments) == {"answer": plain_reply(scripted_sim, QUESTION)}


def test_without_submit_the_script_ends_with_the_usual_text(scripted_sim: str) -> None:
    calls, last = run_agent(scripted_sim, [BASH, PYTHON])
    assert [c.function.name for c in calls] == ["bash", "python"]
    assert last.finish_reason == "stop" and last.message.content == plain_reply(scripted_sim, QUESTION)


def test_the_answer_is_the_first_user_messages_however_the_agent_nudges(default_sim: str) -> None:
    """An agent's nudge is a later user message: it restarts the round, the answer stays the task's."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    ids = set()
    for nudge in (True, False):  # a round of the default script and a nudge, then the round again
        call = chat(default_sim, messages, tools=[BASH, SUBMIT]).choices[0].message
        assert call.tool_calls[0].function.name == "bash"
        ids.add(call.tool_calls[0].id)
        messages += [call.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": call.tool_calls[0].id, "content": "sim"}]
        if nudge:
            messages.append({"role": "user", "content": "Please proceed to the next step using your best judgement."})
    submit = chat(default_sim, messages, tools=[BASH, SUBMIT]).choices[0].message.tool_calls[0]
    assert submit.function.name == "submit"
    assert json.loads(submit.function.arguments)["answer"] == plain_reply(default_sim, QUESTION)
    assert len(ids | {submit.id}) == 3  # the script ran twice, yet no call id repeats


def test_the_submitted_answer_is_right_as_often_as_the_accuracy_says() -> None:
    from shardeval import plugins

    bench = plugins.registry().get("benchmarks", "arith", where="test").factory({"n": 20})
    with running_sim(*FAST, "--bench", "arith", "--accuracy", "1") as base:
        for i in range(5):
            problem = bench.problem(i)
            messages = [
                {"role": "user", "content": problem.user_text()},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "echo sim"}'}}],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "sim"},
            ]
            submit = chat(base, messages, tools=[BASH, SUBMIT]).choices[0].message.tool_calls[0]
            assert bench.score(problem, json.loads(submit.function.arguments)["answer"]).score == 1.0


# --- tool_choice ------------------------------------------------------------------------------


def test_tool_choice_none_is_plain_text(scripted_sim: str) -> None:
    done = chat(scripted_sim, [{"role": "user", "content": QUESTION}], tools=[BASH, PYTHON, SUBMIT], tool_choice="none").choices[0]
    assert not done.message.tool_calls and done.finish_reason == "stop"
    assert done.message.content == plain_reply(scripted_sim, QUESTION)


def test_tool_choice_required_always_calls(scripted_sim: str) -> None:
    first = chat(scripted_sim, [{"role": "user", "content": QUESTION}], tools=[BASH, PYTHON], tool_choice="required").choices[0]
    assert first.message.tool_calls[0].function.name == "bash" and first.finish_reason == "tool_calls"
    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    names = []
    for _ in range(4):  # past the two-call script, with no submit offered: the first tool again
        message = chat(scripted_sim, messages, tools=[PYTHON, BASH], tool_choice="required").choices[0].message
        call = message.tool_calls[0]
        names.append(call.function.name)
        messages += [message.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": call.id, "content": "ok"}]
    assert names == ["bash", "python", "python", "python"]
    assert json.loads(call.function.arguments) == {"code": "print('sim')"}


def test_tool_choice_naming_a_tool_calls_it(scripted_sim: str) -> None:
    start = [{"role": "user", "content": QUESTION}]
    named = chat(scripted_sim, start, tools=[BASH, PYTHON, SUBMIT], tool_choice={"type": "function", "function": {"name": "bash"}})
    assert (
        json.loads(named.choices[0].message.tool_calls[0].function.arguments) == SCRIPT[0]["arguments"]
    )  # the script's next call is bash's
    other = chat(scripted_sim, start, tools=[BASH, PYTHON, SUBMIT], tool_choice={"type": "function", "function": {"name": "python"}})
    assert json.loads(other.choices[0].message.tool_calls[0].function.arguments) == {"code": "print('sim')"}  # python's defaults
    submit = chat(scripted_sim, start, tools=[BASH, SUBMIT], tool_choice={"type": "function", "function": {"name": "submit"}})
    assert json.loads(submit.choices[0].message.tool_calls[0].function.arguments) == {"answer": plain_reply(scripted_sim, QUESTION)}
    with pytest.raises(openai.BadRequestError, match="'edit'.*does not offer"):
        chat(scripted_sim, start, tools=[BASH], tool_choice={"type": "function", "function": {"name": "edit"}})
    with pytest.raises(openai.BadRequestError, match="needs tools"):
        chat(scripted_sim, start, tool_choice="required")
    with pytest.raises(openai.BadRequestError, match="tool_choice must be"):
        chat(scripted_sim, start, tools=[BASH], tool_choice="sometimes")


def test_a_script_naming_a_tool_not_offered_is_a_400(scripted_sim: str) -> None:
    with pytest.raises(openai.BadRequestError, match=r"tool_calls script \(call 0\) names the tool 'bash'.*\['python', 'submit'\]"):
        chat(scripted_sim, [{"role": "user", "content": QUESTION}], tools=[PYTHON, SUBMIT])


def test_requests_without_tools_are_answered_as_before(default_sim: str) -> None:
    done = chat(
        default_sim,
        [{"role": "user", "content": "first"}, {"role": "assistant", "content": "x"}, {"role": "user", "content": QUESTION}],
        tool_choice="auto",
    )
    assert done.choices[0].message.content == plain_reply(default_sim, QUESTION)  # the last user message, as before
    assert done.choices[0].message.tool_calls == [] and done.choices[0].finish_reason == "stop"


# --- on the wire ------------------------------------------------------------------------------


def test_streamed_tool_calls_read_back_by_the_openai_client(scripted_sim: str) -> None:
    strict = [{**t, "function": {**t["function"], "strict": True}} for t in (BASH, PYTHON, SUBMIT)]  # the SDK parses only strict tools
    messages = [{"role": "user", "content": QUESTION}]
    whole = chat(scripted_sim, messages, tools=strict)
    with client(scripted_sim).chat.completions.stream(
        model="sim", messages=messages, tools=strict, stream_options={"include_usage": True}
    ) as stream:
        events = list(stream)
        final = stream.get_final_completion()
    call, expected = final.choices[0].message.tool_calls[0], whole.choices[0].message.tool_calls[0]
    assert (call.id, call.function.name, call.function.arguments) == (expected.id, expected.function.name, expected.function.arguments)
    assert call.function.parsed_arguments == SCRIPT[0]["arguments"]
    assert final.choices[0].finish_reason == "tool_calls" and final.usage == whole.usage
    fragments = [e.arguments_delta for e in events if e.type == "tool_calls.function.arguments.delta" and e.arguments_delta]
    assert "".join(fragments) == call.function.arguments and len(fragments) == len(call.function.arguments.split())  # a word a delta


def test_faults_and_timing_apply_to_tool_calls() -> None:
    with running_sim("--ttft-ms", "0", "--itl-ms", "0", "--fail-5xx", "1") as base:
        with pytest.raises(openai.InternalServerError):
            chat(base, [{"role": "user", "content": QUESTION}], tools=[BASH])
    with running_sim("--ttft-ms", "300", "--itl-ms", "0") as base:
        import time

        t0 = time.monotonic()
        chat(base, [{"role": "user", "content": QUESTION}], tools=[BASH])
        assert time.monotonic() - t0 >= 0.3


# --- configuration ----------------------------------------------------------------------------


def test_tool_calls_count_in_the_identity_only_when_set() -> None:
    from shardeval_sim.config import SimServiceConfig, sim_argv

    plain = SimServiceConfig(type="sim")
    assert "tool_calls" not in plain.identity()  # configs from before the key keep their hash
    assert "--tool-calls" not in sim_argv(plain, ["shardeval"])
    scripted = msgspec.convert({"type": "sim", "tool_calls": SCRIPT[:1]}, SimServiceConfig)
    assert scripted.identity() == {**plain.identity(), "tool_calls": SCRIPT[:1]}
    argv = sim_argv(scripted, ["shardeval"])
    assert json.loads(argv[argv.index("--tool-calls") + 1]) == SCRIPT[:1]
    for bad in ([{"arguments": {}}], [{"name": "bash", "args": {}}], [{"name": "bash", "arguments": "ls"}], {"name": "bash"}):
        with pytest.raises(msgspec.ValidationError, match="tool_calls"):
            msgspec.convert({"type": "sim", "tool_calls": bad}, SimServiceConfig)


def test_cli_rejects_a_bad_script() -> None:
    for bad, says in (("[{", "not JSON"), ('{"name": "bash"}', "list"), ('[{"arguments": {}}]', "name")):
        result = shardeval_cmd("sim", "--port", "0", "--tool-calls", bad, timeout=30)
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert "--tool-calls" in result.stderr and says in result.stderr


# --- Inspect's react() agent ------------------------------------------------------------------


@pytest.mark.timeout(180)
@pytest.mark.parametrize("stream", [False, True])
def test_inspect_react_agent_runs_bash_in_the_local_sandbox_and_submits(tmp_path: Any, stream: bool) -> None:
    """Inspect's own react() with bash() against the simulator: the scripted command really runs
    (its output comes back as the tool result), then the agent submits the simulator's answer."""
    inspect_ai = pytest.importorskip("inspect_ai")
    from inspect_ai.agent import react
    from inspect_ai.dataset import Sample
    from inspect_ai.event import ModelEvent, ToolEvent
    from inspect_ai.log import resolve_sample_attachments
    from inspect_ai.model import get_model
    from inspect_ai.scorer import match
    from inspect_ai.tool import bash

    script = [{"name": "bash", "arguments": {"command": "echo $((6 * 7)) && pwd"}}]
    with running_sim(*FAST, "--tool-calls", json.dumps(script)) as base:
        task = inspect_ai.Task(
            dataset=[Sample(input=QUESTION, target="5")], solver=react(tools=[bash(timeout=30)]), scorer=match(), sandbox="local"
        )
        model = get_model("openai-api/sim/sim", base_url=base, api_key="unused", stream=stream)
        [log] = inspect_ai.eval(
            task, model=model, log_dir=str(tmp_path / "logs"), display="none", message_limit=12, time_limit=90, max_retries=0
        )
        answer = plain_reply(base, QUESTION)
    assert log.status == "success", log.error
    [sample] = [resolve_sample_attachments(s) for s in log.samples]  # long texts are stored once, as attachments
    assert sample.error is None
    requests = [e.call.request for e in sample.events if isinstance(e, ModelEvent) and e.call is not None]
    assert len(requests) == 2 and all(bool(r.get("stream")) == stream and r["tools"] for r in requests)
    tools = [e for e in sample.events if isinstance(e, ToolEvent)]
    assert [e.function for e in tools] == ["bash", "submit"]
    assert tools[0].arguments == script[0]["arguments"] and tools[0].error is None
    assert tools[0].result.splitlines()[0] == "42" and len(tools[0].result.splitlines()) == 2  # the real shell's output
    assert tools[1].arguments == {"answer": answer}
    results = [m for m in sample.messages if m.role == "tool"]
    assert results and results[0].function == "bash" and results[0].text.startswith("42\n")
    assert sample.output.completion.endswith(answer)
    assert os.path.isabs(tools[0].result.splitlines()[1])
