"""Judge verdicts are read as FastChat's MT-Bench judge reads them (issue 24, item 10; docs/judges.md).

The reference is FastChat's own rule, restated here from fastchat/llm_judge/common.py (lm-sys/FastChat
at 0e6d3e4, 2025-04-12; `fschat` itself cannot be imported without torch, openai and anthropic):

    one_score_pattern = re.compile("\\[\\[(\\d+\\.?\\d*)\\]\\]")
    one_score_pattern_backup = re.compile("\\[(\\d+\\.?\\d*)\\]")
    match = re.search(one_score_pattern, judgment) or re.search(one_score_pattern_backup, judgment)
    rating = ast.literal_eval(match.groups()[0]) if match else -1

    if "[[A]]" in judgment: winner = "A" elif "[[B]]" ...: "B" elif "[[C]]" ...: "tie" else "error"

A corpus of judge replies made here (prefixes, bracket styles, decimals, several ratings, case,
prose around, out-of-range values) is read by both; shardeval must agree on every reply FastChat
reads as 1..10 or as no verdict. Its one documented difference: a rating outside 1..10 is no verdict.
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import json
import re
import threading
import asyncio
from pathlib import Path
from collections.abc import Iterator

import pytest
from aiohttp import web

from conftest import running_sim, shardeval_cmd
from shardeval.benchmark.rubric import Rubric

# --- the reference: FastChat's rules, restated (see the module docstring) ---------------------------

FC_ONE = re.compile(r"\[\[(\d+\.?\d*)\]\]")
FC_ONE_BACKUP = re.compile(r"\[(\d+\.?\d*)\]")


class FastChatCrash(Exception):
    """FastChat's ast.literal_eval raised (e.g. `[[07]]`): FastChat has no reading of the reply."""


def fastchat_single(judgment: str) -> float:
    match = re.search(FC_ONE, judgment)
    if not match:
        match = re.search(FC_ONE_BACKUP, judgment)
    if not match:
        return -1
    try:
        return ast.literal_eval(match.groups()[0])
    except (SyntaxError, ValueError) as exc:
        raise FastChatCrash(str(exc)) from None


def fastchat_pairwise(judgment: str) -> str:
    if "[[A]]" in judgment:
        return "A"
    if "[[B]]" in judgment:
        return "B"
    if "[[C]]" in judgment:
        return "tie"
    return "error"


def shardeval_single(reply: str) -> float | None:
    try:
        _, _, scores = Rubric("single").verdict(reply)
    except ValueError:
        return None
    return scores["rating"]


def shardeval_pairwise(reply: str) -> str:
    try:
        verdict, _, _ = Rubric("pairwise").verdict(reply)
    except ValueError:
        return "error"
    return {"A": "A", "B": "B", "C": "tie"}[verdict]


# --- the corpus -------------------------------------------------------------------------------------

PREFIXES = ("", "Rating: ", "rating: ", "RATING:", "Rating:  ", "Score: ", "My rating is ", "Final verdict - ")
FORMS = ("[[{n}]]", "[{n}]", "[[ {n} ]]", "(({n}))", "{n}", "[[{n}/10]]", "**[[{n}]]**", "`[[{n}]]`")
NUMBERS = ("7", "7.", "7.5", "10", "1", "0", "11", "3.25", "100", "10.0", "0.5", "9.99")
PROSE = (
    ("", ""),
    ("The answer is correct but terse.\n\n", ""),
    ("", "\n\nThat is my final answer."),
    ("Explanation: steps [1] and [2] are fine.\n", ""),
    ("On a scale of 1 to 10 ", "."),
)


def single_corpus() -> list[str]:
    replies = [
        f"{before}{prefix}{form.format(n=n)}{after}"
        for prefix, form, n in itertools.product(PREFIXES, FORMS, NUMBERS)
        for before, after in [PROSE[len(prefix + form + n) % len(PROSE)]]
    ]
    # several ratings: FastChat takes the first of the first form that matches
    for a, b in itertools.product(("3", "9", "7.5", "11", "0"), ("8", "2", "12", "6.")):
        replies += [
            f"Rating: [[{a}]]\n\nOn reflection, Rating: [[{b}]]",
            f"Rating: [{a}]. Corrected: Rating: [[{b}]]",
            f"[{a}] [{b}]",
            f"Rating: [[{a}]] or [[{b}]]",
            f"Scores: [{a}, {b}] -> [[{b}]]",
        ]
    replies += [
        "",
        "No rating.",
        "I cannot judge this.",
        "Rating: seven",
        "[[seven]]",
        "[[A]]",
        "[[-3]]",
        "[[+4]]",
        "[[1e1]]",
        "[[7.5.1]]",
        "[[.5]]",
        "[[8]",
        "[8]]",
        "Rating: [[ 8]]",
        "[[٧]]",
        "Rating: [[7]]\r\n",
        "Rating: 8/10",
        "score 8 out of 10",
        "[[10]]" * 3,
        "Rating:\n[[6]]",
        "[[[5]]]",
        "[[5]]]",
    ]
    return replies


def pairwise_corpus() -> list[str]:
    tokens = ("[[A]]", "[[B]]", "[[C]]", "[A]", "[[a]]", "[[ B ]]", "A", "[[TIE]]", "[[A/B]]", "")
    replies = [f"{x} then {y}" for x, y in itertools.product(tokens, repeat=2)]
    replies += [f'Verdict: "{x}" is my answer.' for x in tokens]
    replies += [
        'Output "[[A]]" if assistant A is better, "[[B]]" if B is better, and "[[C]]" for a tie. Mine: [[B]]',
        "After careful thought: [[C]]\n",
        "[[B]][[A]]",
        "[[C]] [[B]]",
        "Assistant A is better.",
        "[[A]",
    ]
    return replies


def test_the_corpora_are_varied() -> None:
    single, pairwise = single_corpus(), pairwise_corpus()
    assert len(single) >= 200 and len(set(single)) == len(single)
    assert len(pairwise) >= 100
    readings = {fastchat_single(r) for r in single if not _crashes(r)}
    assert {-1, 7, 7.5, 0, 11, 100} <= readings  # no verdict, ints, decimals, out of range all present
    assert {fastchat_pairwise(r) for r in pairwise} == {"A", "B", "tie", "error"}


def _crashes(reply: str) -> bool:
    try:
        fastchat_single(reply)
    except FastChatCrash:
        return True
    return False


def test_single_ratings_agree_with_fastchat_on_every_reply_it_reads() -> None:
    """The first `[[N]]` anywhere (no `Rating:` needed, any case around it, `7.` a rating), else the
    first `[N]`; a rating outside 1..10 is no verdict (the one documented difference)."""
    rows: dict[str, int] = {"agree": 0, "out of 1..10 (documented)": 0, "FastChat raises": 0}
    disagree = []
    for reply in single_corpus():
        ours = shardeval_single(reply)
        try:
            theirs = fastchat_single(reply)
        except FastChatCrash:
            rows["FastChat raises"] += 1
            continue
        if theirs == -1:
            ok = ours is None
        elif 1 <= theirs <= 10:
            ok = ours == float(theirs)
        else:
            ok = ours is None
            rows["out of 1..10 (documented)"] += ok
        rows["agree"] += ok and (theirs == -1 or 1 <= theirs <= 10)
        if not ok:
            disagree.append((reply, theirs, ours))
    print(f"\nsingle, {len(single_corpus())} replies:", rows)
    assert not disagree, disagree[:10]
    assert rows["agree"] >= 200


def test_the_named_cases_read_as_fastchat_reads_them() -> None:
    """Issue 24's cases (rejected or read differently before) and what FastChat makes of them."""
    for reply, rating in [
        ("[[7]]", 7),
        ("rating: [[7]]", 7),
        ("Rating: [7]", 7),
        ("Rating: [[7.]]", 7),
        ("Rating: [[3]] ... no, Rating: [[9]]", 3),
        ("[4] then [[8]]", 8),
        ("RATING: [[10]]", 10),
    ]:
        assert fastchat_single(reply) == rating
        assert shardeval_single(reply) == rating, reply
    for reply in ("Rating: [[ 7 ]]", "Rating: [[0]]", "Rating: [[11]]", "Rating: seven"):
        assert shardeval_single(reply) is None, reply  # FastChat: -1, 0, 11, -1
    with pytest.raises(ValueError, match=r"rating 11 is outside 1\.\.10"):  # said as what it is, not as "no rating"
        Rubric("single").verdict("Rating: [[11]] then Rating: [[7]]")


def test_leading_zero_which_fastchat_cannot_read_is_the_number_it_spells() -> None:
    """FastChat's ast.literal_eval raises on `[[07]]`; shardeval reads 7 (docs/judges.md)."""
    with pytest.raises(FastChatCrash):
        fastchat_single("Rating: [[07]]")
    assert shardeval_single("Rating: [[07]]") == 7


def test_pairwise_verdicts_agree_with_fastchat_on_every_reply() -> None:
    """`[[A]]` anywhere wins, else `[[B]]`, else `[[C]]` (a reply holding two verdicts is no longer an
    error: it reads as FastChat reads it)."""
    disagree = [
        (r, fastchat_pairwise(r), shardeval_pairwise(r)) for r in pairwise_corpus() if fastchat_pairwise(r) != shardeval_pairwise(r)
    ]
    print(f"\npairwise, {len(pairwise_corpus())} replies: {len(pairwise_corpus()) - len(disagree)} agree")
    assert not disagree, disagree[:10]


# --- a real judged run: a shard asks a judge server that answers in FastChat's forms ---------------

RUN_REPLIES = (
    "Good answer.\n\n[[7]]",
    "rating: [[6]]",
    "Rating: [8]",
    "Rating: [[7.]]",
    "Rating: [[3]]\n\nOn reflection: Rating: [[9]]",
    "Step [2] is wrong. [[4]]",
    "[[10]] [[1]]",
)


@pytest.fixture
def fastchat_judge() -> Iterator[str]:
    """An OpenAI-compatible judge on 127.0.0.1 whose reply to a prompt is one of RUN_REPLIES, chosen by
    the prompt's hash: every form FastChat reads, most of which shardeval rejected or read otherwise."""

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "judge", "object": "model"}]})

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        prompt = body["messages"][-1]["content"]
        reply = RUN_REPLIES[int(hashlib.sha256(prompt.encode()).hexdigest(), 16) % len(RUN_REPLIES)]
        return web.json_response(
            {
                "id": "x",
                "object": "chat.completion",
                "model": "judge",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
        )

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    app = web.Application()
    app.add_routes([web.get("/v1/models", models), web.post("/v1/chat/completions", chat)])
    runner = web.AppRunner(app)

    async def start() -> int:
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    port = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def test_a_judged_run_scores_what_fastchat_reads(tmp_path: Path, fastchat_judge: str) -> None:
    with running_sim("--bench", "arith", "--ttft-ms", "0", "--itl-ms", "0") as model:
        config = {
            "services": {
                "model": {"type": "api", "url": model, "model": "sim"},
                "judge": {
                    "type": "api",
                    "url": fastchat_judge,
                    "model": "judge",
                    "stream": False,
                    "retries": {"attempts": 1, "backoff_base": 0.01, "backoff_max": 0.01},
                },
            },
            "benchmarks": [
                {
                    "name": "arith",
                    "params": {"n": 30},
                    "max_concurrent": 8,
                    "solver": {"service": "model", "generation": {"temperature": 0, "max_tokens": 64}},
                    "judge": {"service": "judge", "mode": "single"},
                }
            ],
            "output": {"progress_interval_s": 0},
        }
        path = tmp_path / "config.yaml"
        path.write_text(json.dumps(config))
        done = shardeval_cmd("run", str(path), "--shard", "0/1", "-o", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    recs = [json.loads(line) for line in (tmp_path / "out" / "arith" / "results.jsonl").read_text().splitlines()]
    assert len(recs) == 30
    replies = {r["judge"]["reply"] for r in recs}
    assert len(replies) >= 5  # most of the forms were asked for
    for r in recs:
        expected = fastchat_single(r["judge"]["reply"])
        assert r["status"] == "ok", r["error"]
        assert r["scores"]["rating"] == expected and r["score"] == pytest.approx(expected / 10)
        assert r["judge"]["verdict"] == f"{expected:g}"
