"""`shardeval sim`: the command line of the simulator. Light on purpose (click only at import);
the server, aiohttp and msgspec load when the command runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from collections.abc import Callable

import click

from shardeval.api.plugin import UsageError
from shardeval_sim.settings import SIM_DEFAULTS as D
from shardeval_sim.settings import REASONING_FORMS, SimSettings, bench_names

if TYPE_CHECKING:
    from shardeval.api.benchmark import Benchmark

RATE = click.FloatRange(0.0, 1.0)
NON_NEGATIVE = click.FloatRange(min=0.0)


def sim_benchmark(bench: str, params: dict[str, Any], where: str) -> Benchmark:
    """The benchmark whose answers the simulator knows, named as a benchmarks: entry names one (a
    registered name, a data file read by `jsonl`, a YAML mapping read by `custom`), or a UsageError.
    Building one reads no rows, so a config can be checked with it before anything starts."""
    from shardeval.api.benchmark import BenchmarkConfig, make_benchmark
    from shardeval.api.plugin import registry

    return make_benchmark(BenchmarkConfig(name=bench, params=params), where, registry())[0]


def check_settings(settings: SimSettings, spell: Callable[[str], str]) -> None:
    """What the flags' types cannot say, as one line naming the setting as `spell` writes it (the
    flag for `shardeval sim`, the config key for a `type: sim` service, checked before any shard
    starts): the fault rates' sum, the 5xx statuses, the benchmark and its params."""
    total = sum(settings.fault_rates().values())
    if total > 1.0 + 1e-9:
        keys = " + ".join(spell(key) for key in ("fail_429", "fail_5xx", "reset", "stall", "error_200", "truncate_json"))
        raise UsageError(f"fault rates sum to {total:g} ({keys}); each attempt gets at most one fault, so the sum must be <= 1")
    try:
        statuses = [int(s) for s in settings.fail_5xx_statuses.split(",")]
    except ValueError:
        statuses = []
    if not statuses or not all(500 <= s <= 599 for s in statuses):
        raise UsageError(
            f"{spell('fail_5xx_statuses')} {settings.fail_5xx_statuses!r}: expected comma-separated statuses 500-599, e.g. 500,502,503"
        )
    for bench in bench_names(settings.bench):
        try:
            sim_benchmark(bench, settings.bench_params, spell("bench"))
        except UsageError as exc:  # an unknown name says where already; the benchmark's own words do not
            message = str(exc)
            raise UsageError(message if message.startswith(spell("bench") + ":") else f"{spell('bench')} {bench!r}: {message}") from None


def load_known(bench: str | list[str] | None, params: dict[str, Any]) -> tuple[Any, ...]:
    """What the simulator knows of each benchmark named (see sim_benchmark), in order, each with
    `bench_params`: its answer key (prompt text -> reference), its reply renderer (a benchmark may
    shape whole replies: code, letters) and its grader (question, reference, answer) -> right?, its
    own scorer, for judge mode."""
    from shardeval.api.benchmark import Problem
    from shardeval_sim.answers import Known
    from shardeval_sim.benchmark_hooks import answer_key, reply_renderer

    def known(benchmark: Benchmark) -> Known:
        def grade(question: str, reference: str, answer: str) -> bool:
            score = benchmark.score(Problem(idx=0, id="judged", prompt=question, reference=reference), answer).score
            return score is not None and score >= 1.0  # None: a score in no mean, which was a TypeError here

        return Known(answer_key(benchmark), reply_renderer(benchmark), grade)

    return tuple(known(sim_benchmark(name, params, "--bench")) for name in bench_names(bench))


def _media_limits(ctx: click.Context, param: click.Parameter, value: str | None) -> dict[str, Any] | None:
    """--limit-mm-per-prompt JSON as vLLM takes it: {"image": 4} or {"image": {"count": 4, ...}}."""
    if value is None:
        return None
    import json

    try:
        limits = json.loads(value)
    except ValueError:
        limits = None
    counts = [v.get("count") if isinstance(v, dict) else v for v in limits.values()] if isinstance(limits, dict) else [None]
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
        raise click.BadParameter(f"{value!r}: expected JSON like '{{\"image\": 4}}' (a count >= 0 per modality), as vLLM takes it")
    return limits


def _tool_script(ctx: click.Context, param: click.Parameter, value: str | None) -> list[dict[str, Any]] | None:
    """--tool-calls JSON, checked (stdlib only, so `--help` stays light)."""
    if value is None:
        return None
    from shardeval_sim.tools import parse_script

    try:
        return parse_script(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command("sim")
@click.option("--host", default=D.host, show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=D.port, show_default=True, help="Port; 0 picks a free one.")
@click.option("--model", default=D.model, show_default=True, help="The served model name (requests naming another get 404, as from vLLM).")
@click.option("--served-model-name", hidden=True, help="vLLM-compatible alias: the served name (wins over --model).")
@click.option("--tensor-parallel-size", type=int, hidden=True, help="vLLM-compatible, ignored.")
@click.option(
    "--bench",
    "benches",
    multiple=True,
    help="A benchmark whose answers the simulator knows: a registered name, or a data file or YAML mapping as a "
    "benchmarks: entry names one; repeatable (a prompt is answered by the first that knows it).",
)
@click.option(
    "--bench-param",
    "bench_params",
    multiple=True,
    metavar="KEY=VALUE",
    help="Benchmark parameter (YAML value), given to every --bench; repeatable.",
)
@click.option(
    "--accuracy",
    type=RATE,
    default=D.accuracy,
    show_default=True,
    help="Probability of a right answer (deterministic per prompt and seed).",
)
@click.option("--ttft-ms", type=NON_NEGATIVE, default=D.ttft_ms, show_default=True, help="Time to first token.")
@click.option("--itl-ms", type=NON_NEGATIVE, default=D.itl_ms, show_default=True, help="Time between tokens.")
@click.option(
    "--output-tokens",
    type=click.IntRange(min=1),
    default=D.output_tokens,
    show_default=True,
    help="Words per answer, the final `#### <answer>` included.",
)
@click.option(
    "--output-tokens-tail",
    type=click.FloatRange(min=0.0, min_open=True),
    metavar="ALPHA",
    help="Heavy-tailed answer lengths: --output-tokens × Pareto(ALPHA) words, drawn from the prompt alone (the same "
    "on every server), at most 100 × --output-tokens (unset: all --output-tokens long; benchmark-shaped "
    "replies such as code keep their own length).",
)
@click.option("--fail-429", type=RATE, default=D.fail_429, show_default=True, help="Rate of 429 responses.")
@click.option(
    "--retry-after", type=NON_NEGATIVE, default=D.retry_after, show_default=True, help="Retry-After seconds on a 429 (0: no header)."
)
@click.option("--fail-5xx", type=RATE, default=D.fail_5xx, show_default=True, help="Rate of 500/503 responses (alternating).")
@click.option(
    "--fail-5xx-statuses",
    default=D.fail_5xx_statuses,
    show_default=True,
    help="Comma-separated 5xx statuses that --fail-5xx cycles through, e.g. 500,502,503.",
)
@click.option("--reset", type=RATE, default=D.reset, show_default=True, help="Rate of connections aborted mid-stream.")
@click.option("--stall", type=RATE, default=D.stall, show_default=True, help="Rate of streams that go quiet for --stall-s.")
@click.option("--stall-s", type=NON_NEGATIVE, default=D.stall_s, show_default=True, help="Length of a stall in seconds.")
@click.option(
    "--error-200", type=RATE, default=D.error_200, show_default=True, help='Rate of HTTP 200 streams carrying `data: {"error": ...}`.'
)
@click.option(
    "--truncate-json",
    type=RATE,
    default=D.truncate_json,
    show_default=True,
    help="Rate of responses cut off in the middle of a JSON chunk.",
)
@click.option(
    "--max-inflight",
    type=click.IntRange(min=0),
    default=D.max_inflight,
    show_default=True,
    help="A rate limiter: 429 (with --retry-after) when this many requests are already in flight (0: no limit).",
)
@click.option(
    "--judge-quality",
    type=RATE,
    default=D.judge_quality,
    show_default=True,
    help="Judge mode (prompts asking for `Rating: [[N]]` or [[A]]/[[B]]/[[C]]): probability of the right verdict, else a random one.",
)
@click.option(
    "--judge-garbage",
    type=RATE,
    default=D.judge_garbage,
    show_default=True,
    help="Rate of judge replies with no verdict (drawn per attempt).",
)
@click.option(
    "--tool-calls",
    metavar="JSON",
    callback=_tool_script,
    help='Scripted tool calls for requests that offer `tools`, e.g. \'[{"name": "bash", "arguments": {"cmd": "ls"}}]\'; '
    "then `submit` with the usual answer when offered, else the usual text (unset: one call of the first "
    "offered tool with arguments from its schema).",
)
@click.option(
    "--limit-mm-per-prompt",
    metavar="JSON",
    callback=_media_limits,
    help='Images one prompt may carry, as vLLM\'s flag: \'{"image": 4}\' (more: HTTP 400, param "image"; unset: no limit).',
)
@click.option(
    "--allowed-local-media-path",
    metavar="DIR",
    help="A folder file:// image URLs may point below, as vLLM's flag (unset: file:// URLs are refused with 400).",
)
@click.option(
    "--reasoning-form",
    type=click.Choice(REASONING_FORMS),
    default=D.reasoning_form,
    show_default=True,
    help="Imitate a reasoning model on vLLM: thinking in delta/message `reasoning` (field), in `reasoning_content`, "
    "or inline as <think>…</think> before the answer (no reasoning parser); chat requests only. The answer "
    "is the one without reasoning, after \\n\\n; max_tokens, enable_thinking, reasoning_effort and "
    "thinking_token_budget are honoured.",
)
@click.option(
    "--reasoning-tokens",
    type=click.IntRange(min=1),
    default=D.reasoning_tokens,
    show_default=True,
    help="Thinking tokens per reply (the mean with --reasoning-tokens-tail), ×0.25/×1/×4 for reasoning_effort low/medium/high.",
)
@click.option(
    "--reasoning-tokens-tail",
    type=click.FloatRange(min=0.0, min_open=True),
    metavar="ALPHA",
    help="Heavy-tailed thinking: --reasoning-tokens × Pareto(ALPHA) tokens, drawn from the prompt alone, at most 100 × "
    "--reasoning-tokens (unset: fixed).",
)
@click.option(
    "--usage-reasoning-tokens/--no-usage-reasoning-tokens",
    default=D.usage_reasoning_tokens,
    show_default=True,
    help="Report usage.completion_tokens_details.reasoning_tokens (off: a client must count the thinking itself).",
)
@click.option(
    "--vary-unseeded",
    is_flag=True,
    default=D.vary_unseeded,
    help="Answer a request without a seed (and temperature not 0) afresh each time the same body is asked, as a "
    "sampling server without a seed does: the k-th ask is drawn as with its own seed (Inspect's epochs). Off: "
    "the same reply every time.",
)
@click.option("--log-requests", metavar="PATH", help="Append every request body, as JSON on one line, to PATH as it arrives (for tests).")
@click.option(
    "--weights-log",
    metavar="PATH",
    help="Load the weights at start-up, before the listening line: read every file under --root (which must be a folder; "
    "a config.json in it must be JSON, else exit 1 with one line) and append one JSON line to PATH: "
    '{"root", "at", "pid", "files": {relative path: sha256}} (for tests: which weights each server was started on).',
)
@click.option("--seed", type=int, default=D.seed, show_default=True, help="Seed for answers and fault draws.")
@click.option("--root", metavar="PATH", help="The weights /v1/models reports as `root`, as vLLM does (default: the model name).")
@click.option(
    "--max-model-len", type=click.IntRange(min=1), default=D.max_model_len, show_default=True, help="The context length /v1/models reports."
)
def sim_command(
    served_model_name: str | None, tensor_parallel_size: int | None, benches: tuple[str, ...], bench_params: tuple[str, ...], **opts: Any
) -> None:
    """Run the built-in OpenAI-compatible simulator (for demos, tests and benchmarks).

    Faults are drawn per request attempt and are exclusive, so their rates must sum to at most 1.
    Prints `shardeval sim listening on http://HOST:PORT/v1` once it accepts connections and runs
    until SIGTERM or Ctrl-C.
    """
    from shardeval.api.plugin import parse_key_values  # YAML values, one parser for every such flag

    if served_model_name:
        opts["model"] = served_model_name
    bench = None if not benches else benches[0] if len(benches) == 1 else list(benches)
    settings = SimSettings(bench=bench, bench_params=parse_key_values(bench_params, "--bench-param", "n=500"), **opts)
    check_settings(settings, lambda key: "--" + key.replace("_", "-"))
    known = load_known(settings.bench, settings.bench_params)
    if settings.weights_log is not None:
        from shardeval_sim.weights import load_weights

        load_weights(settings.root, settings.weights_log)

    import asyncio

    from shardeval_sim.server import serve

    asyncio.run(serve(settings, known))
