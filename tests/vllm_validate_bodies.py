"""Check chat request bodies the way a vLLM server reads them; run with the vLLM venv's python.

    $SHARDEVAL_VLLM_PYTHON tests/vllm_validate_bodies.py [--allowed-local-media-path DIR] [--limit-image N] < bodies.jsonl

One body per stdin line. Each goes through what vLLM 0.32's OpenAI server does with a request
before the model sees it, so a body that passes here is one the server would accept:

1. `ChatCompletionRequest.model_validate` (what FastAPI runs: a failure is a 400). Its content
   parts are lax `total=False` TypedDicts, so it lets through an `image_url` given as a bare
   string; hence
2. each content part through vLLM's own part parser, `_parse_chat_message_content_mm_part`
   (vllm/renderers/chat_utils.py; private, so tests/test_vllm_request_model.py pins that it is
   used) and through openai's public part TypeAdapters (which stand alone if the private one
   moves); both must accept it and agree on what it is, and
3. each image URL through vLLM's `MediaConnector.fetch_image`, which decodes it as the server
   does (base64 only, Pillow full load, RGB; `file://` only strictly under the allowed path),
   built with the same `allowed_local_media_path` the service declares.

With `--limit-image N`, a body with more than N images fails, as the server's
`--limit-mm-per-prompt '{"image": N}'` would refuse it.

Prints a first line `{"vllm": version, "part_parsers": ["vllm", "openai"]}`, then one line per body:
`{"line": n, "ok": true, "images": k}` or `{"line": n, "ok": false, "error": "Type: message"}`.
This file runs outside shardeval's environment: it imports only vLLM's venv.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any
from collections.abc import Callable

import vllm
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.multimodal.media.connector import MediaConnector

PartParser = Callable[[dict[str, Any]], tuple[str, Any]]


def openai_part_parser() -> PartParser:
    """openai's public part types: text needs `text: str`, an image `image_url: {url: str}`."""
    from openai.types.chat import ChatCompletionContentPartImageParam, ChatCompletionContentPartTextParam
    from pydantic import TypeAdapter

    image, text = TypeAdapter(ChatCompletionContentPartImageParam), TypeAdapter(ChatCompletionContentPartTextParam)

    def parse(part: dict[str, Any]) -> tuple[str, Any]:
        if isinstance(part, dict) and part.get("type") == "text":
            return "text", text.validate_python(part)["text"]
        return "image_url", image.validate_python(part)["image_url"]["url"]

    return parse


def part_parsers() -> dict[str, PartParser]:
    """vLLM's own per-part parser (vllm 0.32: vllm/renderers/chat_utils.py; it moved there from
    vllm/entrypoints/chat_utils.py) where it still is, and always openai's public part types, so
    the check stands if the private name moves."""
    parsers = {"openai": openai_part_parser()}
    try:
        from vllm.renderers.chat_utils import _parse_chat_message_content_mm_part
    except ImportError:
        return parsers
    return {"vllm": _parse_chat_message_content_mm_part, **parsers}


def check(body: Any, parsers: dict[str, PartParser], connector: MediaConnector, limit: int | None) -> int:
    """The number of images in `body`; raises what the server would answer an error for."""
    ChatCompletionRequest.model_validate(body)
    images = 0
    for message in body["messages"]:
        content = message.get("content")
        for part in content if isinstance(content, list) else []:
            parsed = {name: parse(part) for name, parse in parsers.items()}
            kind, value = parsed[next(iter(parsers))]
            if kind not in ("text", "image_url") or not isinstance(value, str):
                raise ValueError(f"part {part!r:.120}: parsed as {kind!r} with {type(value).__name__}, not text or an image URL")
            if len(set(parsed.values())) > 1:
                raise ValueError(f"part {part!r:.120}: the parsers disagree: {parsed!r:.200}")
            if kind == "image_url":
                connector.fetch_image(value)
                images += 1
    if limit is not None and images > limit:
        raise ValueError(f"{images} images, over --limit-image {limit}")
    return images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allowed-local-media-path", default="")
    parser.add_argument("--limit-image", type=int, default=None)
    args = parser.parse_args()
    parsers = part_parsers()
    connector = MediaConnector(allowed_local_media_path=args.allowed_local_media_path)
    print(json.dumps({"vllm": vllm.__version__, "part_parsers": list(parsers)}), flush=True)
    for n, line in enumerate(sys.stdin, 1):
        try:
            result = {"line": n, "ok": True, "images": check(json.loads(line), parsers, connector, args.limit_image)}
        except Exception as exc:  # what the server turns into an error answer: ValidationError, ValueError, ...
            result = {"line": n, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
