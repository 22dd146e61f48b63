"""The simulator's HTTP server: an OpenAI-compatible API shaped like vLLM's, with timing and faults.

Routes: GET /v1/models, POST /v1/chat/completions, POST /v1/completions, GET /health, GET /version.
Streams are SSE: `data: {json}\n\n` per event (a role event first for chat, one event per token,
`finish_reason` on the last token's event), a `choices: []` usage event when
`stream_options.include_usage` is set, then `data: [DONE]`. Like vLLM, a request naming another
model gets 404; `max_tokens` (or `max_completion_tokens`) truncates with finish_reason `length`;
`temperature: 0` makes the reply independent of `seed` (greedy decoding). `n > 1` and `stop`
are accepted and ignored, and so are `logprobs` in chat and in streams.

Tool calling (`shardeval_sim.tools` decides what to call): a chat request offering `tools` is
answered with one call per turn, deterministic per conversation: `message.tool_calls` =
[{id "call_<hash>", type "function", function {name, arguments: a JSON string}}], content null,
finish_reason `tool_calls`; streamed as OpenAI and vLLM stream it (a role event carrying the call's
id and name, then the arguments a word per event). completion_tokens counts the arguments' words;
`max_tokens` does not cut a call. A `tool_choice` or a script naming a tool the request does not
offer is a 400. Requests without `tools` are answered as before.

Log-probabilities, as vLLM's /v1/completions gives them for multiple-choice scoring and
perplexity: a non-streamed completions request with `logprobs: N` gets `choices[0].logprobs` =
{tokens, token_logprobs, top_logprobs, text_offset} for its generated tokens, and with `echo: true`
for the prompt's tokens first (the text is then prompt + reply; `max_tokens: 0` generates
nothing). Tokens come from `answers.tokenize`, logprobs from `answers.token_logprob` (a pure
function of the token's text, so tests can compute the exact value); the prompt's first token has
a null logprob, as in vLLM; text_offset is each token's position in `choices[0].text`;
top_logprobs holds only the token itself. `echo` with `stream: true` is refused (400).

Images, as vLLM reads them: every `image_url` part of a chat request is loaded and decoded in full
with Pillow before anything is answered. Base64 `data:` URLs, and `file://` URLs under
`--allowed-local-media-path`; an image that does not decode is HTTP 400 "Failed to load image:
cannot identify image file <_io.BytesIO object>", a data URL without `;base64` is 501, more images
than `--limit-mm-per-prompt` is 400 with param "image", a file:// URL outside the allowed folder
(or with none set) is 400, all worded as vLLM words them. (vLLM answers a file:// URL with no
allowed folder 500; the simulator says 400, a client error, so no client retries it.) The answer
key sees the pictures: a prompt with images is looked up by its text and the sha256 of each
image's bytes (`answers.image_key`). GET /sim/stats counts requests, image requests, images
decoded and image errors, so a test can tell that no request reached the server.

Reasoning models (`--reasoning-form`, shardeval_sim.reasoning): a chat reply thinks before the
answer it would give without reasoning, the thinking in delta/message `reasoning` or
`reasoning_content`, or inline between `<think>` tags, one event per token as the answer is;
usage's `completion_tokens` counts both and `completion_tokens_details.reasoning_tokens` the
thinking (unless `--no-usage-reasoning-tokens`). Completions requests and tool calls do not think.
`--log-requests PATH` appends every JSON body, one line each, as it arrives, so a test can see
what a server was asked (a judge's prompts, say).

Faults are drawn once per request attempt; reset, stall, in-band error and truncated JSON (a chunk
cut off mid-object, then the end of the body) strike after the first few events of a stream.
`--max-inflight K` is a rate limiter apart from the drawn faults: a request arriving while K are
being answered gets 429 (with `--retry-after`), as from a proxy guarding a saturated server. It is the server in the client-overhead benchmark, so the hot path builds
events from pre-encoded byte templates, writes one event per `resp.write` while on schedule, and
coalesces events that are already due (all of them when `--itl-ms 0`) into one write.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import functools
import hashlib
import io
import itertools
import os
import random
import re
import signal
import sys
import time
from typing import Any, BinaryIO
from urllib.parse import urlparse
from urllib.request import url2pathname

from aiohttp import web
import msgspec
from shardeval_sim.answers import (
    CHOSEN_LOGPROB,
    SHUNNED_LOGPROB,
    Answerer,
    Judger,
    Known,
    Reply,
    count_tokens,
    cut,
    image_key,
    split_words,
    token_logprob,
    tokenize,
)
from shardeval_sim.reasoning import Ask, ReasoningRequestError, Thinker, inline_tokens, parse_ask
from shardeval_sim.settings import SimSettings, bench_names
from shardeval_sim.tools import ToolCall, ToolRequestError, offered_tools, plan_call, user_text

_json_encode = msgspec.json.encode
_json_decode = msgspec.json.decode
_SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
_DONE = b"data: [DONE]\n\n"
_FAULT_AFTER_EVENTS = 3  # a reset, stall or in-band error comes after this many events
UNSEEDED_MEMORY = 1 << 20  # --vary-unseeded: request bodies remembered (about 100 MB at most)


class Faults:
    """Draws at most one fault per request attempt from a seeded RNG (so a retry can succeed)."""

    def __init__(self, settings: SimSettings) -> None:
        self.rng = random.Random(f"faults:{settings.seed}")
        rates = {kind: rate for kind, rate in settings.fault_rates().items() if rate > 0}
        self.bounds = list(zip(itertools.accumulate(rates.values()), rates))  # (cumulative rate, kind)
        self.statuses = itertools.cycle(int(s) for s in settings.fail_5xx_statuses.split(","))  # --fail-5xx's, in turn

    def draw(self) -> str | None:
        u = self.rng.random()
        return next((kind for bound, kind in self.bounds if u < bound), None)


class BadRequest(Exception):
    def __init__(self, status: int, message: str, kind: str = "BadRequestError", param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param


def error_response(status: int, message: str, kind: str, param: str | None = None, headers: dict[str, str] | None = None) -> web.Response:
    body = _json_encode({"error": {"message": message, "type": kind, "param": param, "code": status}})
    return web.Response(status=status, body=body, content_type="application/json", headers=headers)


def _content_text(content: Any) -> str:
    """A message's text: a string, or the text parts of a multi-part content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    if content is None:
        return ""
    raise BadRequest(400, "message content must be a string or a list of parts", param="messages")


def _image_urls(content: Any) -> list[str]:
    """The URLs of a message's `image_url` parts, checked as vLLM's part parser checks them."""
    if not isinstance(content, list):
        return []
    urls = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "image_url":
            value = part.get("image_url")
            if not isinstance(value, dict) or not isinstance(value.get("url"), str):
                raise BadRequest(400, "image_url must be an object with a string `url` (image_url.url Field required)", param="messages")
            urls.append(value["url"])
    return urls


def image_limit(limit_mm_per_prompt: dict[str, Any] | None) -> int | None:
    """Images per prompt under a vLLM-style `{"image": 4}` or `{"image": {"count": 4, ...}}` (None: no limit)."""
    value = (limit_mm_per_prompt or {}).get("image")
    if isinstance(value, dict):
        value = value.get("count")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError:
        raise BadRequest(
            500, "the simulator decodes images with Pillow, which is not installed here: pip install pillow", kind="InternalServerError"
        ) from None
    return Image


def load_image(url: str, allowed_local_media_path: str | None) -> bytes:
    """The bytes of one image URL, decoded in full as vLLM decodes them; raises BadRequest with
    vLLM's status and wording when they cannot be had or are not an image."""
    if url.startswith("data:"):
        head, sep, payload = url.partition(",")
        if not sep:
            raise BadRequest(400, "Failed to load image: a data URL needs a comma before its payload")
        if not head.endswith(";base64"):
            raise BadRequest(501, "Only base64 data URLs are supported for now.", kind="NotImplementedError")
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise BadRequest(400, str(exc)) from None
    elif url.startswith("file:"):
        if not allowed_local_media_path:
            raise BadRequest(400, "Cannot load local files without --allowed-local-media-path.")
        parsed = urlparse(url)
        path = os.path.realpath(url2pathname(parsed.netloc + parsed.path))
        root = os.path.realpath(allowed_local_media_path)
        if path == root or os.path.commonpath([path, root]) != root:  # strictly below it, symlinks resolved
            raise BadRequest(400, f"The file path {path} must be a subpath of `--allowed-local-media-path {allowed_local_media_path}`.")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise BadRequest(400, f"Failed to load image: {exc.strerror or exc}") from None
    elif url.startswith(("http://", "https://")):
        raise BadRequest(400, "the simulator does not fetch http(s) images; send a base64 data: URL")
    else:
        raise BadRequest(400, "The URL must be either a HTTP, data or file URL.")
    Image = _pillow()
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
    except Exception as exc:  # Pillow raises many kinds; vLLM wraps them all in one ValueError
        raise BadRequest(400, "Failed to load image: " + re.sub(r" at 0x[0-9a-fA-F]+>", ">", str(exc))) from None
    return data


def _int_field(body: dict[str, Any], name: str, minimum: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise BadRequest(400, f"{name} must be an integer >= {minimum}, got {value!r}", param=name)
    return value


class Simulator:
    """Request handling for one server process; `app()` wires it into aiohttp."""

    def __init__(self, settings: SimSettings, known: tuple[Known, ...] = (), request_log: BinaryIO | None = None) -> None:
        self.settings = settings
        self.judger = Judger(known, settings.judge_quality, settings.seed)
        self.garbage = random.Random(f"judge-garbage:{settings.seed}")  # a per-attempt draw, so a retry or rerun can differ
        self.served = settings.model
        self.answerer = Answerer(known, settings.accuracy, settings.output_tokens, settings.seed, settings.output_tokens_tail)
        self.faults = Faults(settings)
        # Reasoning mode (shardeval_sim.reasoning): None answers as a model that does not think.
        self.form = settings.reasoning_form
        self.thinker = None if self.form == "none" else Thinker(settings.reasoning_tokens, settings.reasoning_tokens_tail, settings.seed)
        self._thought_key = "reasoning" if self.form == "field" else "reasoning_content"  # where the field forms put the thinking
        self._thought_field = self._thought_key.encode()
        self.request_log = request_log  # --log-requests: every JSON body, a line each, as it arrives
        self.ttft = settings.ttft_ms / 1000.0
        self.itl = settings.itl_ms / 1000.0
        self.ids = itertools.count(1)
        self.inflight = 0  # requests being answered now (for --max-inflight)
        self._asked: dict[bytes, int] = {}  # --vary-unseeded: times each body (by digest) was asked, oldest first
        self.image_limit = image_limit(settings.limit_mm_per_prompt)
        self.stats = {"requests": 0, "image_requests": 0, "images": 0, "image_errors": 0}  # GET /sim/stats
        self._model_json = _json_encode(self.served)
        self._token = functools.lru_cache(maxsize=4096)(_json_encode)  # a token's JSON string, cached
        model = {
            "id": self.served,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "shardeval-sim",
            "root": settings.root or self.served,
            "parent": None,
            "max_model_len": settings.max_model_len,
        }
        self._models_body = _json_encode({"object": "list", "data": [model]})
        retry = settings.retry_after
        self._retry_headers = {"Retry-After": f"{retry:g}"} if retry > 0 else None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/version", self.version)
        app.router.add_get("/sim/stats", self.stats_route)
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_post("/v1/completions", self._handle)
        return app

    # --- small routes ----------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def models(self, request: web.Request) -> web.Response:
        return web.Response(body=self._models_body, content_type="application/json")

    async def version(self, request: web.Request) -> web.Response:
        """vLLM's `/version`; here the simulator's own (shardeval's) version."""
        from shardeval import __version__

        return web.Response(body=_json_encode({"version": f"shardeval-sim {__version__}"}), content_type="application/json")

    async def stats_route(self, request: web.Request) -> web.Response:
        """What reached this server: POSTed requests, those with images, images decoded, image errors."""
        return web.Response(body=_json_encode(self.stats), content_type="application/json")

    # --- completions -----------------------------------------------------------------------

    def _images(self, messages: list[Any]) -> dict[int, list[str]]:
        """The sha256 of each image of each message (by index), every image loaded and decoded:
        the whole request's count against --limit-mm-per-prompt first (vLLM counts before it loads)."""
        try:
            urls = {i: found for i, m in enumerate(messages) if (found := _image_urls(m.get("content")))}
        except BadRequest:
            self.stats["image_requests"] += 1
            self.stats["image_errors"] += 1
            raise
        if not urls:
            return {}
        self.stats["image_requests"] += 1
        try:
            total = sum(map(len, urls.values()))
            if self.image_limit is not None and total > self.image_limit:
                raise BadRequest(
                    400,
                    f"At most {self.image_limit} image(s) may be provided in one prompt. Set --limit-mm-per-prompt to increase this limit.",
                    param="image",
                )
            digests = {
                i: [hashlib.sha256(load_image(url, self.settings.allowed_local_media_path)).hexdigest() for url in found]
                for i, found in urls.items()
            }
        except BadRequest:
            self.stats["image_errors"] += 1
            raise
        self.stats["images"] += total
        return digests

    def _parse(self, body: Any, chat: bool) -> tuple[str, int]:
        """(text the answer key sees, prompt token count) from a chat or completions body."""
        if not isinstance(body, dict):
            raise BadRequest(400, "request body must be a JSON object")
        model = body.get("model")
        if model is not None and model != self.served:
            raise BadRequest(404, f"The model `{model}` does not exist.", kind="NotFoundError", param="model")
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise BadRequest(400, "messages must be a non-empty list", param="messages")
            text, n_prompt = "", 0
            if not all(isinstance(m, dict) for m in messages):
                raise BadRequest(400, "each message must be an object", param="messages")
            images = self._images(messages)
            for i, m in enumerate(messages):
                content = _content_text(m.get("content"))
                n_prompt += count_tokens(content)
                for call in m.get("tool_calls") or ():  # an agent's earlier calls are prompt too
                    function = call.get("function") if isinstance(call, dict) else None
                    if isinstance(function, dict):
                        n_prompt += 1 + count_tokens(str(function.get("arguments") or ""))
                if m.get("role") == "user":
                    text = image_key(content, images[i]) if i in images else content
            return text, n_prompt
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise BadRequest(400, "prompt must be a string (batched prompts are not simulated)", param="prompt")
        return prompt, count_tokens(prompt)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        chat = request.path == "/v1/chat/completions"
        self.stats["requests"] += 1
        try:
            try:
                raw = await request.read()
                body = _json_decode(raw)
            except msgspec.DecodeError as exc:
                raise BadRequest(400, f"invalid JSON body: {exc}") from None
            if self.request_log is not None:  # one write per line: shards sharing the file interleave whole lines
                self.request_log.write(_json_encode(body) + b"\n")
            text, n_prompt = self._parse(body, chat)
            max_tokens = _int_field(body, "max_tokens", 0)
            if chat and body.get("max_completion_tokens") is not None:
                max_tokens = _int_field(body, "max_completion_tokens", 0)
            seed = _int_field(body, "seed", -(1 << 63))
            if body.get("temperature") == 0:
                seed = None  # greedy decoding: the same prompt gets the same reply whatever the seed
            elif seed is None and self.settings.vary_unseeded:
                seed = self._unseeded_draw(raw)
            stream = bool(body.get("stream"))
            echo, logprobs = (False, None) if chat else self._logprob_fields(body, stream)
            call, text = self._tool_call(body, text, seed) if chat else (None, text)
            ask = self._ask(body) if chat and self.thinker is not None else None
        except BadRequest as exc:
            return error_response(exc.status, exc.message, exc.kind, exc.param)
        options = body.get("stream_options")
        include_usage = stream and isinstance(options, dict) and bool(options.get("include_usage"))

        limit = self.settings.max_inflight
        if limit and self.inflight >= limit:  # a rate limiter in front of a busy server
            return error_response(
                429, f"simulated rate limit: {limit} requests already in flight", "RateLimitError", headers=self._retry_headers
            )
        # Draw this attempt's fault, then answer (or fail) as it says.
        fault = self.faults.draw()
        if fault == "429":
            return error_response(429, "simulated rate limit: slow down", "RateLimitError", headers=self._retry_headers)
        if fault == "5xx":
            status = next(self.faults.statuses)
            kind = "InternalServerError" if status == 500 else "ServiceUnavailableError"
            return error_response(status, f"simulated server error {status}", kind)
        self.inflight += 1
        try:
            if call is not None:  # the request offers tools and the script says to call one
                reply = Reply(tokens=split_words(call.arguments), finish_reason="tool_calls")
                if stream:
                    return await self._stream(request, reply, self._tool_events(call, reply, n_prompt, include_usage), chat, fault)
                return await self._respond(request, reply, chat, n_prompt, fault, call=call)
            if Judger.mode(text) is not None:  # a judge prompt: a verdict (or, at --judge-garbage, none)
                garbage = self.settings.judge_garbage > 0 and self.garbage.random() < self.settings.judge_garbage
                tokens, plant = self.judger.compose(text, seed, garbage)
            else:
                tokens, plant = self.answerer.compose(text, seed)
            if ask is None or self.thinker is None:
                reply = cut(tokens, max_tokens)
            else:  # a reasoning model's chat reply: thinking, then the same answer
                reply = self.thinker.reply(text, seed, tokens, plant, ask, max_tokens)
            if stream:
                return await self._stream(request, reply, self._events(reply, chat, n_prompt, include_usage, ask is not None), chat, fault)
            chosen = self._chosen(text, seed) if echo and logprobs is not None else None
            return await self._respond(
                request,
                reply,
                chat,
                n_prompt,
                fault,
                echo=text if echo else None,
                logprobs=logprobs is not None,
                reasoning=ask is not None,
                chosen=chosen,
            )
        finally:
            self.inflight -= 1

    def _unseeded_draw(self, raw: bytes) -> int | None:
        """--vary-unseeded: the seed the k-th ask of this exact body is answered with: None the first
        time (the reply without the flag), then seeds below any a request may name (_int_field's
        minimum), so a draw never equals a seeded request's. The multiset of replies to k asks is
        fixed whatever their order. Bodies are remembered up to UNSEEDED_MEMORY, oldest forgotten."""
        digest = hashlib.blake2b(raw, digest_size=16).digest()
        asked = self._asked.pop(digest, 0)
        self._asked[digest] = asked + 1
        if len(self._asked) > UNSEEDED_MEMORY:
            del self._asked[next(iter(self._asked))]
        return None if asked == 0 else -(1 << 63) - asked

    def _chosen(self, text: str, seed: int | None) -> tuple[int, float] | None:
        """(where the right option starts in `text`, the logprob each of its tokens gets) when `text`
        is a known multiple-choice question's context followed by its right option; else None (every
        token keeps its own logprob). See `answers.Answerer.continuation`."""
        found = self.answerer.continuation(text)
        if found is None or not found[1]:
            return None
        start = found[0]
        return start, CHOSEN_LOGPROB if self.answerer.chooses_right(text[:start], seed) else SHUNNED_LOGPROB

    def _tool_call(self, body: dict[str, Any], text: str, seed: int | None) -> tuple[ToolCall | None, str]:
        """(the tool call that answers this chat request or None, the text the answer key sees).
        Without `tools` nothing changes; with them see `shardeval_sim.tools`."""
        try:
            offered = offered_tools(body)
            if offered is None:
                choice = body.get("tool_choice")
                if choice not in (None, "none", "auto"):
                    raise ToolRequestError(f"tool_choice {choice!r} needs tools, and the request offers none", "tool_choice")
                return None, text
            prompt = user_text(body["messages"], _content_text)
            call = plan_call(body, offered, self.settings.tool_calls, prompt, lambda: self.answerer.reply(prompt, seed, None).text)
        except ToolRequestError as exc:
            raise BadRequest(400, str(exc), param=exc.param) from None
        return call, prompt

    @staticmethod
    def _ask(body: dict[str, Any]) -> Ask:
        """What a chat request asks of a reasoning model's thinking (400 for what vLLM refuses)."""
        try:
            return parse_ask(body)
        except ReasoningRequestError as exc:
            raise BadRequest(400, str(exc), param=exc.param) from None

    def _usage_details(self, reply: Reply, reasoning: bool) -> bytes:
        """`,"completion_tokens_details":{...}` for a reasoning model's chat reply (b"" otherwise)."""
        if not reasoning or not self.settings.usage_reasoning_tokens:
            return b""
        return b',"completion_tokens_details":{"reasoning_tokens":%d}' % reply.thinking

    @staticmethod
    def _logprob_fields(body: dict[str, Any], stream: bool) -> tuple[bool, int | None]:
        """(echo, logprobs) of a completions request; None: no logprobs asked (or a stream: ignored)."""
        echo = body.get("echo")
        if echo is not None and not isinstance(echo, bool):
            raise BadRequest(400, f"echo must be true or false, got {echo!r}", param="echo")
        if echo and stream:
            raise BadRequest(400, "the simulator supports echo only with stream: false", param="echo")
        logprobs = _int_field(body, "logprobs", 0)
        if logprobs is not None and logprobs > 20:
            raise BadRequest(400, f"logprobs must be at most 20, got {logprobs}", param="logprobs")
        return bool(echo), None if stream else logprobs

    async def _respond(
        self,
        request: web.Request,
        reply: Reply,
        chat: bool,
        n_prompt: int,
        fault: str | None,
        *,
        echo: str | None = None,
        logprobs: bool = False,
        call: ToolCall | None = None,
        reasoning: bool = False,
        chosen: tuple[int, float] | None = None,
    ) -> web.StreamResponse:
        n = len(reply.tokens)
        delay = self.ttft + self.itl * max(0, n - 1)
        if fault == "stall":
            delay += self.settings.stall_s
        if delay > 0:
            await asyncio.sleep(delay)
        if fault == "reset":
            if request.transport is not None:
                request.transport.abort()
            return web.Response()
        if fault == "truncate_json":
            return web.Response(
                body=b'{"id":"chatcmpl-sim","object":"chat.completion","choices":[{"index":0,"mess', content_type="application/json"
            )
        if fault == "error_200":
            body = {
                "error": {
                    "message": "simulated error inside an HTTP 200 response",
                    "type": "InternalServerError",
                    "param": None,
                    "code": 500,
                }
            }
            return web.Response(body=_json_encode(body), content_type="application/json")
        text = reply.text
        if chat:
            message: dict[str, Any] = (
                {"role": "assistant", "content": None, "tool_calls": [call.as_message()]}
                if call is not None
                else {"role": "assistant", "content": text, "tool_calls": []}
            )
            if reasoning and self.form == "inline":
                message["content"] = "".join(inline_tokens(reply))
            elif reasoning:  # a reasoning parser's split: the thinking in its field, the answer (if begun) as content
                k = reply.thinking
                answer = "".join(reply.tokens[k:])
                message["content"] = answer if answer or not reply.thought else None
                message[self._thought_key] = "".join(reply.tokens[:k]) or None
            choice: dict[str, Any] = {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": reply.finish_reason,
                "stop_reason": None,
            }
            rid, kind = f"chatcmpl-sim{next(self.ids):x}", "chat.completion"
        else:
            prefix = echo if echo is not None else ""
            generated = reply.tokens
            if prefix and generated and not prefix[-1].isspace() and not generated[0][:1].isspace():
                generated = [" " + generated[0], *generated[1:]]  # a reply after an echoed prompt starts a new word
                text = "".join(generated)
            lp = _logprobs(tokenize(prefix), generated, chosen) if logprobs else None
            choice = {"index": 0, "text": prefix + text, "logprobs": lp, "finish_reason": reply.finish_reason, "stop_reason": None}
            rid, kind = f"cmpl-sim{next(self.ids):x}", "text_completion"
        usage: dict[str, Any] = {"prompt_tokens": n_prompt, "total_tokens": n_prompt + n, "completion_tokens": n}
        if reasoning and self.settings.usage_reasoning_tokens:
            usage["completion_tokens_details"] = {"reasoning_tokens": reply.thinking}
        out = {"id": rid, "object": kind, "created": int(time.time()), "model": self.served, "choices": [choice], "usage": usage}
        return web.Response(body=_json_encode(out), content_type="application/json")

    def _events(self, reply: Reply, chat: bool, n_prompt: int, include_usage: bool, reasoning: bool = False) -> list[bytes]:
        """Every SSE event of one stream, built from byte templates. A reasoning model's thinking
        is one event per token as its answer is: in the form's field, or inline in the content."""
        rid = next(self.ids)
        created = str(int(time.time())).encode()
        model_json = self._model_json
        if chat:
            head = b'data: {"id":"chatcmpl-sim%x","object":"chat.completion.chunk","created":%s,"model":%s,"choices":' % (
                rid,
                created,
                model_json,
            )
            pre = head + b'[{"index":0,"delta":{"content":'
            mid = b'},"logprobs":null,"finish_reason":null}]}\n\n'
            end = b'},"logprobs":null,"finish_reason":"%s","stop_reason":null}]}\n\n' % reply.finish_reason.encode()
            events = [head + b'[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n']
        else:
            head = b'data: {"id":"cmpl-sim%x","object":"text_completion","created":%s,"model":%s,"choices":' % (rid, created, model_json)
            pre = head + b'[{"index":0,"text":'
            mid = b',"logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'
            end = b',"logprobs":null,"finish_reason":"%s","stop_reason":null}]}\n\n' % reply.finish_reason.encode()
            events = []
        tokens = reply.tokens
        token = self._token
        if reasoning and self.form == "inline":
            tokens = inline_tokens(reply)
        if reasoning and self.form != "inline" and reply.thinking:
            k = reply.thinking
            thought = head + b'[{"index":0,"delta":{"%s":' % self._thought_field
            parts = [thought + token(t) for t in tokens[:k]]
            parts.extend(pre + token(t) for t in tokens[k:])
            events.extend(p + mid for p in parts[:-1])
            events.append(parts[-1] + end)
        else:
            events.extend(pre + token(t) + mid for t in tokens[:-1])
            events.append(pre + (token(tokens[-1]) if tokens else b'""') + end)
        if include_usage:
            n = len(tokens)
            events.append(
                b'%s[],"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d%s}}\n\n'
                % (head, n_prompt, n_prompt + n, n, self._usage_details(reply, reasoning))
            )
        events.append(_DONE)
        return events

    def _tool_events(self, call: ToolCall, reply: Reply, n_prompt: int, include_usage: bool) -> list[bytes]:
        """A streamed tool call as OpenAI and vLLM send it: the role with the call's id and name (no
        arguments yet), one arguments fragment per token (finish_reason `tool_calls` on the last),
        the usage event, [DONE]. The same shape as a text stream, so timing and faults apply alike."""
        head = b'data: {"id":"chatcmpl-sim%x","object":"chat.completion.chunk","created":%d,"model":%s,"choices":' % (
            next(self.ids),
            int(time.time()),
            self._model_json,
        )
        opening = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"index": 0, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}],
        }
        events = [head + b'[{"index":0,"delta":%s,"logprobs":null,"finish_reason":null}]}\n\n' % _json_encode(opening)]
        for i, fragment in enumerate(reply.tokens):
            delta = {"tool_calls": [{"index": 0, "function": {"arguments": fragment}}]}
            finish = b'"tool_calls"' if i == len(reply.tokens) - 1 else b"null"
            events.append(head + b'[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}]}\n\n' % (_json_encode(delta), finish))
        if include_usage:
            n = len(reply.tokens)
            events.append(
                b'%s[],"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}}\n\n' % (head, n_prompt, n_prompt + n, n)
            )
        events.append(_DONE)
        return events

    async def _stream(self, request: web.Request, reply: Reply, events: list[bytes], chat: bool, fault: str | None) -> web.StreamResponse:
        """Send `events` (from `_events` or `_tool_events`) on schedule, with this attempt's fault."""
        n = len(events)
        first = 1 if chat else 0  # a chat stream's role event comes before the tokens
        n_tokens_events = len(reply.tokens) + first
        # event i is due at ttft + (k-1)*itl where k counts token events; role, usage, DONE ride along
        due = [self.ttft + self.itl * max(0, min(i, n_tokens_events - 1) - first) for i in range(n)]
        fault_at = min(_FAULT_AFTER_EVENTS, n - 1) if fault in ("reset", "stall", "error_200", "truncate_json") else n

        resp = web.StreamResponse(status=200, headers=_SSE_HEADERS)
        loop = asyncio.get_running_loop()
        with contextlib.suppress(ConnectionError):  # the client went away: nothing more to say
            await resp.prepare(request)
            t0 = loop.time()
            i = 0
            while i < n:
                if i == fault_at:
                    if fault == "reset":
                        if request.transport is not None:
                            request.transport.abort()
                        return resp
                    if fault == "truncate_json":  # a chunk whose JSON is cut off, then the end
                        await resp.write(events[i][: max(8, len(events[i]) // 2)].rstrip(b"\n") + b"\n\n")
                        return resp
                    if fault == "error_200":
                        await resp.write(
                            b'data: {"error":{"message":"simulated error inside an HTTP 200 stream",'
                            b'"type":"InternalServerError","param":null,"code":500}}\n\n'
                        )
                        return resp
                    # stall: go quiet, then carry on with the same spacing
                    await asyncio.sleep(self.settings.stall_s)
                    t0 += self.settings.stall_s
                    fault_at = n
                now = loop.time()
                wait = t0 + due[i] - now
                if wait > 0:
                    await asyncio.sleep(wait)
                    now = loop.time()
                limit = fault_at if i < fault_at else n
                j = i + 1
                while j < limit and t0 + due[j] <= now:
                    j += 1
                await resp.write(events[i] if j == i + 1 else b"".join(events[i:j]))
                i = j
        return resp


def _logprobs(prompt_tokens: list[str], generated: list[str], chosen: tuple[int, float] | None = None) -> dict[str, Any]:
    """vLLM's completions `logprobs` object for the echoed prompt's tokens, then the generated ones;
    `chosen` (start, value): the prompt's tokens from character `start` on get `value`."""
    tokens = prompt_tokens + generated
    values: list[float | None] = [token_logprob(t) for t in tokens]
    offsets = list(itertools.accumulate(map(len, tokens[:-1]), initial=0)) if tokens else []
    if chosen is not None:
        start, value = chosen
        for i in range(len(prompt_tokens)):
            if offsets[i] >= start:
                values[i] = value
    if prompt_tokens:
        values[0] = None  # nothing precedes the prompt's first token
    top = [None if v is None else {t: v} for t, v in zip(tokens, values)]
    return {"text_offset": offsets, "token_logprobs": values, "tokens": tokens, "top_logprobs": top}


async def serve(settings: SimSettings, known: tuple[Known, ...] = (), *, announce: Any = print) -> None:
    """Run until SIGTERM or SIGINT; print the one readiness line once connections are accepted."""
    request_log = None
    if settings.log_requests:
        try:
            request_log = open(settings.log_requests, "ab", buffering=0)  # unbuffered: each body is on disk as it arrives
        except OSError as exc:
            from shardeval.api.plugin import UsageError

            raise UsageError(f"--log-requests {settings.log_requests}: cannot open it for appending: {exc.strerror or exc}") from None
    sim = Simulator(settings, known, request_log)
    runner = web.AppRunner(sim.app(), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port, backlog=2048, shutdown_timeout=0.5)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        from shardeval.api.plugin import UsageError

        raise UsageError(f"--port {settings.port}: cannot listen on {settings.host}: {exc.strerror or exc}") from None
    port = runner.addresses[0][1]
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    faults = ", ".join(f"{k} {v:g}" for k, v in settings.fault_rates().items() if v) or "none"
    benches = bench_names(settings.bench)
    bench = f"{', '.join(benches)} (accuracy {settings.accuracy:g})" if benches else "none"
    tail = f" × Pareto({settings.output_tokens_tail:g})" if settings.output_tokens_tail else ""
    if settings.reasoning_form != "none":
        think_tail = f" × Pareto({settings.reasoning_tokens_tail:g})" if settings.reasoning_tokens_tail else ""
        tail += f", reasoning {settings.reasoning_form} ({settings.reasoning_tokens} tokens{think_tail})"
    print(
        f"shardeval sim: model {settings.model!r}, bench {bench}, ttft {settings.ttft_ms:g} ms, "
        f"itl {settings.itl_ms:g} ms, {settings.output_tokens} tokens{tail}, faults: {faults}, seed {settings.seed}",
        file=sys.stderr,
        flush=True,
    )
    announce(f"shardeval sim listening on http://{host}:{port}/v1", flush=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        if request_log is not None:
            request_log.close()
