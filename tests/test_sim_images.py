"""The simulator sees images, as vLLM does: it decodes every image part (Pillow), answers what does
not decode, a non-base64 data URL, too many images or a file outside the allowed folder with vLLM's
statuses and words, and knows an image benchmark's answers by the pictures' digests. Every server
is a real `shardeval sim` process on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import math
import urllib.error
import urllib.request
from typing import Any

import pytest
from conftest import running_sim

pytest.importorskip("PIL")

from shardeval.benchmark.images import split_prompt
from shardeval_benchmarks.vision_count import VisionCountBenchmark, draw

FAST = ("--ttft-ms", "0", "--itl-ms", "0")
UNDECODABLE = {
    "error": {
        "message": "Failed to load image: cannot identify image file <_io.BytesIO object>",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
}


def png(colour: tuple[int, int, int] = (200, 0, 0), size: int = 8) -> bytes:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (size, size), colour).save(out, format="PNG")
    return out.getvalue()


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def message(text: str, *urls: str) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    return {"role": "user", "content": [*parts, {"type": "text", "text": text}]}


def post(base: str, body: dict[str, Any], path: str = "/chat/completions") -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def stats(base: str) -> dict[str, int]:
    with urllib.request.urlopen(base.replace("/v1", "/sim/stats"), timeout=10) as response:
        return json.loads(response.read())


def chat(base: str, *messages: dict[str, Any], **kw: Any) -> tuple[int, dict[str, Any]]:
    return post(base, {"model": "sim", "messages": list(messages), "seed": 1, **kw})


def test_images_are_decoded_and_bad_ones_refused_as_vllm_refuses_them(tmp_path) -> None:
    media = tmp_path / "media"
    media.mkdir()
    (media / "ok.png").write_bytes(png())
    (tmp_path / "outside.png").write_bytes(png())
    (media / "link.png").symlink_to(tmp_path / "outside.png")  # resolved, as vLLM resolves it: outside
    limits = json.dumps({"image": 2})
    with running_sim(*FAST, "--limit-mm-per-prompt", limits, "--allowed-local-media-path", str(media)) as base:
        status, out = chat(base, message("What is this?", data_url(png()), data_url(png((0, 0, 200)), "image/jpeg")))
        assert status == 200 and out["choices"][0]["message"]["content"]  # the URL's type is not trusted: Pillow sniffs
        assert chat(base, message("What is this?", data_url(b"hello, not an image"))) == (400, UNDECODABLE)
        truncated = png(size=64)[:40]
        status, out = chat(base, message("?", data_url(truncated)))
        assert status == 400 and out["error"]["message"].startswith("Failed to load image: ")
        status, out = chat(base, message("?", "data:image/png;base64,@@not base64@@"))
        assert status == 400 and out["error"]["type"] == "BadRequestError"
        status, out = chat(base, message("?", "data:image/png," + "%89PNG"))
        assert status == 501 and out["error"]["message"] == "Only base64 data URLs are supported for now."
        status, out = chat(base, message("?", *[data_url(png())] * 3))
        assert status == 400 and out["error"]["param"] == "image"
        assert out["error"]["message"].startswith("At most 2 image(s) may be provided in one prompt.")
        # the limit counts the whole conversation, as vLLM's does
        status, _ = chat(
            base, message("one", data_url(png())), {"role": "assistant", "content": "ok"}, message("two", data_url(png()), data_url(png()))
        )
        assert status == 400
        assert chat(base, message("?", f"file://{media / 'ok.png'}"))[0] == 200
        for outside in (tmp_path / "outside.png", media / "link.png", media):
            status, out = chat(base, message("?", f"file://{outside}"))
            assert status == 400 and "must be a subpath of `--allowed-local-media-path" in out["error"]["message"], outside
        status, out = chat(base, {"role": "user", "content": [{"type": "image_url", "image_url": "data:,"}]})
        assert status == 400
        counted = stats(base)
    assert counted["image_requests"] == counted["requests"] == 12
    assert counted["image_errors"] == 10 and counted["images"] == 2 + 1  # what decoded, in the requests answered
    with running_sim(*FAST) as base:  # no allowed folder: file:// is refused; no limit declared: none applies
        status, out = chat(base, message("?", f"file://{media / 'ok.png'}"))
        assert (status, out["error"]["message"]) == (400, "Cannot load local files without --allowed-local-media-path.")
        assert chat(base, message("?", *[data_url(png())] * 6))[0] == 200


def test_the_answer_key_knows_a_problem_by_its_pictures() -> None:
    """Two image problems with the same words differ by their images' digests; a text problem's key is
    as it was. The sim's own image key is what benchmark_hooks builds from Problem.images."""
    from shardeval.api.benchmark import Problem
    from shardeval_sim.answers import image_key
    from shardeval_sim.benchmark_hooks import answer_key
    from shardeval.benchmark.images import describe

    red, blue = png(), png((0, 0, 200))

    class Two:
        def size(self) -> int:
            return 3

        def problems(self, indices):
            refs = [describe(red, "/dev/null", "red.png"), describe(blue, "/dev/null", "blue.png")]
            yield Problem(idx=0, id="r", prompt="<image>What colour?", reference="red", images=[refs[0]])
            yield Problem(idx=1, id="b", prompt="What colour?", reference="blue", images=[refs[1]])
            yield Problem(idx=2, id="t", prompt="What colour?", reference="none")

    key = answer_key(Two())
    digest = hashlib.sha256(red).hexdigest()
    assert key(image_key("What colour?", [digest])) == "red"
    assert key(image_key("What colour?", [hashlib.sha256(blue).hexdigest()])) == "blue"
    assert key("What colour?") == "none"
    assert key(image_key("What colour?", [hashlib.sha256(b"other").hexdigest()])) is None


def vision_body(p: Any, seed: int) -> dict[str, Any]:
    """The request shardeval sends for a vision_count problem: text and image parts in marker order."""
    content = []
    for part in split_prompt(p.prompt, len(p.images)):
        if isinstance(part, str):
            content.append({"type": "text", "text": part})
        else:
            content.append({"type": "image_url", "image_url": {"url": data_url(draw(p.images[part].name.split(":", 2)[2]))}})
    return {"model": "sim", "messages": [{"role": "user", "content": content}], "seed": seed}


def test_vision_count_gets_the_configured_accuracy() -> None:
    n, accuracy = 200, 0.7
    bench = VisionCountBenchmark({"n": n})
    problems = list(bench.problems(range(n)))
    bodies = [vision_body(p, 1000 + i) for i, p in enumerate(problems)]
    with running_sim(*FAST, "--bench", "vision_count", "--bench-param", f"n={n}", "--accuracy", str(accuracy), timeout=60) as base:

        async def ask_all() -> list[str]:
            import aiohttp

            async with aiohttp.ClientSession() as session:
                sem = asyncio.Semaphore(16)

                async def one(body: dict[str, Any]) -> str:
                    async with sem, session.post(base + "/chat/completions", json=body, timeout=aiohttp.ClientTimeout(total=30)) as r:
                        assert r.status == 200, await r.text()
                        return (await r.json())["choices"][0]["message"]["content"]

                return await asyncio.gather(*map(one, bodies))

        replies = asyncio.run(ask_all())
        assert stats(base)["images"] == sum(len(p.images) for p in problems)
        # the same words without the pictures are not known: the generic reply, scored wrong or right by chance only
        text_only = {"model": "sim", "messages": [{"role": "user", "content": problems[0].prompt}], "seed": 1}
        assert "####" in post(base, text_only)[1]["choices"][0]["message"]["content"]
    scores = [bench.score(p, r).score for p, r in zip(problems, replies)]
    observed = sum(scores) / n
    assert abs(observed - accuracy) <= 4 * math.sqrt(accuracy * (1 - accuracy) / n), observed
    assert len(set(replies)) > 50  # many forms, not one
    with running_sim(*FAST, "--bench", "vision_count", "--bench-param", "n=40", "--accuracy", "1", timeout=60) as base:
        assert all(bench.score(p, post(base, vision_body(p, 7))[1]["choices"][0]["message"]["content"]).score == 1.0 for p in problems[:40])


def test_the_sim_service_passes_the_image_keys() -> None:
    import msgspec

    from shardeval_sim.config import SimServiceConfig, sim_argv

    config = msgspec.convert(
        {"type": "sim", "limit_mm_per_prompt": {"image": 3}, "allowed_local_media_path": "/data/img"}, SimServiceConfig
    )
    argv = sim_argv(config, ["shardeval"])
    assert argv[argv.index("--limit-mm-per-prompt") + 1] == '{"image":3}'
    assert argv[argv.index("--allowed-local-media-path") + 1] == "/data/img"
    plain = sim_argv(msgspec.convert({"type": "sim"}, SimServiceConfig), ["shardeval"])
    assert "--limit-mm-per-prompt" not in plain and "--allowed-local-media-path" not in plain
    same = msgspec.convert({"type": "sim"}, SimServiceConfig).identity()
    assert config.identity() == same  # they refuse requests, they change no answer


def test_a_bad_limit_is_one_line() -> None:
    from conftest import shardeval_cmd

    done = shardeval_cmd("sim", "--limit-mm-per-prompt", "image=4", timeout=60)
    assert done.returncode == 2 and "--limit-mm-per-prompt" in done.stderr and '{"image": 4}' in done.stderr


def test_byo_rows_with_images_get_the_configured_accuracy(tmp_path) -> None:
    """Rows whose words are all the same and whose pictures differ: the simulator tells them apart by
    the images' digests, so every answer is right at accuracy 1 and wrong at accuracy 0."""
    from conftest import shardeval_cmd

    (tmp_path / "img").mkdir()
    rows = []
    for n in range(1, 7):
        (tmp_path / "img" / f"d{n}.png").write_bytes(png((20 * n, 0, 0)))
        rows.append({"id": f"q{n}", "question": "What is in <image>?", "answer": str(n), "images": [f"img/d{n}.png"]})
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for accuracy in (1.0, 0.0):
        out = tmp_path / f"out{accuracy}"
        cfg = tmp_path / "run.yaml"
        cfg.write_text(
            f"services:\n  model: {{type: sim, bench: jsonl, bench_params: {{path: '{data}'}}, accuracy: {accuracy}, ttft_ms: 0, itl_ms: 0}}\n"
            f"benchmarks:\n  - name: '{data}'\noutput: {{dir: '{out}'}}\n"
        )
        done = shardeval_cmd("run", str(cfg), timeout=120)
        assert done.returncode == 0, done.stderr
        records = [json.loads(x) for x in (out / "shard_0" / "rows" / "results.jsonl").read_text().splitlines()]
        assert len(records) == 6 and {r["score"] for r in records} == {accuracy}
