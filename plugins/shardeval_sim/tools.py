"""The simulator's OpenAI tool calling: which tool call (if any) answers a chat request that offers `tools`.

Stateless and deterministic, so a retried or resumed request gets the same answer:

- The step is how many assistant turns with `tool_calls` the conversation holds after its last
  user message (an agent's loop adds assistant tool-call turns and `tool` results; a new user
  message starts a new round).
- The script is the configured `tool_calls` (`[{"name": "bash", "arguments": {"cmd": "ls"}}, ...]`),
  or when unset the default script: one call of the first offered tool that is not `submit`, with
  arguments built from its JSON schema (`default_arguments`).
- Step k < len(script) calls script[k]. After the script, a request offering a tool named `submit`
  calls it with `{"answer": <the simulator's usual reply to the first user message>}`, so an agent
  submits what the answer key says and accuracy works as without tools; otherwise the reply is
  plain text (the usual one).
- `tool_choice`: "none": plain text, never a call; "required": always a call (the next scripted
  one, else `submit`, else the first tool); `{"type": "function", "function": {"name": X}}`: a call
  of X (the next scripted call's arguments when it names X, else X's default arguments);
  "auto" or absent: the script as above.
- A call naming a tool the request does not offer is a 400 (a misconfigured script shows at once).

The text the answer key sees is the FIRST user message when tools are offered: an agent's nudges
and retry prompts arrive as later user messages, and the final answer must not change with them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

SUBMIT = "submit"
SCRIPT_EXAMPLE = '[{"name": "bash", "arguments": {"cmd": "echo hi"}}]'
# Harmless values for the parameter names of common agent tools (Inspect's bash/python, shells).
_KNOWN_ARGUMENTS: dict[str, str] = {"cmd": "echo sim", "command": "echo sim", "code": "print('sim')"}


class ToolRequestError(ValueError):
    """A request whose tools, tool_choice or script cannot be answered (the server's 400)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class ToolCall:
    """One call the simulated model makes: `arguments` is the JSON string OpenAI sends."""

    id: str
    name: str
    arguments: str

    def as_message(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


def parse_script(text: str) -> list[dict[str, Any]]:
    """A `--tool-calls` JSON value as a checked script; ValueError says what is wrong."""
    try:
        script = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc}); expected e.g. {SCRIPT_EXAMPLE}") from None
    return check_script(script)


def check_script(script: Any) -> list[dict[str, Any]]:
    """The script as a list of {"name": str, "arguments": dict}; ValueError if it is not one."""
    if not isinstance(script, list):
        raise ValueError(f"expected a JSON list of calls, e.g. {SCRIPT_EXAMPLE}")
    checked = []
    for i, call in enumerate(script):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
            raise ValueError(f'call {i}: expected an object with a non-empty "name", e.g. {SCRIPT_EXAMPLE}')
        if set(call) - {"name", "arguments"}:
            raise ValueError(f"call {i}: unknown keys {sorted(set(call) - {'name', 'arguments'})} (only name and arguments)")
        arguments = call.get("arguments", {})
        if not isinstance(arguments, dict):
            raise ValueError(f'call {i} ({call["name"]}): "arguments" must be an object')
        checked.append({"name": call["name"], "arguments": arguments})
    return checked


def offered_tools(body: dict[str, Any]) -> dict[str, dict[str, Any]] | None:
    """name -> JSON schema of the parameters of each function tool the request offers (None: no tools)."""
    tools = body.get("tools")
    if tools is None or tools == []:
        return None
    if not isinstance(tools, list):
        raise ToolRequestError("tools must be a list", "tools")
    offered: dict[str, dict[str, Any]] = {}
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) and tool.get("type", "function") == "function" else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ToolRequestError('each tool must be {"type": "function", "function": {"name": ..., "parameters": ...}}', "tools")
        parameters = function.get("parameters") or {}
        offered[function["name"]] = parameters if isinstance(parameters, dict) else {}
    return offered


def _value_for(name: str, schema: Any) -> Any:
    """A deterministic, harmless value of a parameter from its name and JSON schema."""
    schema = schema if isinstance(schema, dict) else {}
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind is None:  # anyOf/oneOf (an Optional in Inspect's schemas): the first variant that is not null
        variants = [v for v in schema.get("anyOf", schema.get("oneOf", [])) if isinstance(v, dict) and v.get("type") != "null"]
        return _value_for(name, variants[0]) if variants else _KNOWN_ARGUMENTS.get(name, "sim")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    return {"integer": 1, "number": 1, "boolean": False, "array": [], "object": {}, "null": None}.get(
        kind, _KNOWN_ARGUMENTS.get(name, "sim")
    )


def _properties(schema: dict[str, Any]) -> dict[str, Any]:
    """A parameters schema's `properties`, {} when it has none (or not a mapping)."""
    properties = schema.get("properties")
    return properties if isinstance(properties, dict) else {}


def default_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """Arguments for a tool from its parameters' schema: each required parameter gets a fixed value
    (`cmd`/`command`: `echo sim`, `code`: `print('sim')`, other strings `sim`, numbers 1, ...)."""
    properties = _properties(schema)
    required = [r for r in schema.get("required", []) if isinstance(r, str)] if isinstance(schema.get("required"), list) else []
    return {name: _value_for(name, properties.get(name)) for name in required}


def submit_arguments(schema: dict[str, Any], answer: str) -> dict[str, Any]:
    """The submit tool's arguments: the answer in `answer` (Inspect's), else in its first required parameter."""
    arguments = default_arguments(schema)
    properties = _properties(schema)
    key = "answer" if "answer" in properties or not arguments else next(iter(arguments))
    return {**arguments, key: answer}


def user_text(messages: list[dict[str, Any]], text_of: Any) -> str:
    """The first user message's text (the task's prompt; later user messages are an agent's nudges)."""
    return next((text_of(m.get("content")) for m in messages if m.get("role") == "user"), "")


def step_of(messages: list[dict[str, Any]]) -> int:
    """Assistant turns with tool calls after the last user message: how far the script has got."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    return sum(1 for m in messages[last_user + 1 :] if m.get("role") == "assistant" and m.get("tool_calls"))


def _call_id(prompt: str, turn: int, name: str, arguments: str) -> str:
    """`call_<hash>` of the call and where it is in the conversation: the same on a retry, and
    different for each turn (a nudge restarts the script, yet every id in a conversation is new)."""
    digest = hashlib.blake2b(f"{turn}\x1f{name}\x1f{arguments}\x1f{prompt}".encode("utf-8", "surrogatepass"), digest_size=12)
    return "call_" + digest.hexdigest()


def plan_call(
    body: dict[str, Any], offered: dict[str, dict[str, Any]], script: list[dict[str, Any]] | None, prompt: str, answer: Any
) -> ToolCall | None:
    """The call answering a request that offers tools, or None for a plain text reply.

    `answer()` is the usual reply text to `prompt` (called only when submitting), `script` the
    configured one (None: the default script)."""
    messages = body.get("messages") or []
    step = step_of(messages)
    if script is None:
        first = next((name for name in offered if name != SUBMIT), None)
        script = [] if first is None else [{"name": first, "arguments": default_arguments(offered[first])}]
    choice = body.get("tool_choice", "auto")
    scripted = script[step] if step < len(script) else None

    if choice == "none":
        return None
    if choice in ("auto", None, "required"):
        if scripted is not None:
            name, arguments = scripted["name"], scripted["arguments"]
        elif SUBMIT in offered:
            name, arguments = SUBMIT, None
        elif choice == "required":
            name = next(iter(offered))
            arguments = None
        else:
            return None
    elif (
        isinstance(choice, dict)
        and choice.get("type") == "function"
        and isinstance(choice.get("function"), dict)
        and isinstance(choice["function"].get("name"), str)
    ):
        name = choice["function"]["name"]
        arguments = scripted["arguments"] if scripted is not None and scripted["name"] == name else None
    else:
        raise ToolRequestError(
            f'tool_choice must be "none", "auto", "required" or {{"type": "function", "function": {{"name": ...}}}}, got {choice!r}',
            "tool_choice",
        )
    if name not in offered:
        source = "tool_choice names" if isinstance(choice, dict) else f"the simulator's tool_calls script (call {step}) names"
        raise ToolRequestError(
            f"{source} the tool {name!r}, which the request does not offer (tools: {sorted(offered)})",
            "tool_choice" if isinstance(choice, dict) else "tools",
        )
    if arguments is None:
        arguments = submit_arguments(offered[name], answer()) if name == SUBMIT else default_arguments(offered[name])
    encoded = json.dumps(arguments, ensure_ascii=False)
    return ToolCall(id=_call_id(prompt, len(messages), name, encoded), name=name, arguments=encoded)
