"""A tiny, deterministic OpenAI-compatible completions server for load-generator tests.

It speaks the streaming format a real vLLM sends (docs/real-vllm-cpu.md §6): one ``data: {json}``
event per chunk, the last token chunk carrying ``finish_reason``, then (if the client asked with
``stream_options.include_usage``) a ``"choices": []`` chunk with ``usage``, then ``data: [DONE]``.

It also answers /v1/chat/completions (the content rendered into the real-vLLM tier's chat template and
counted with a local tokenizer, when given one, which also answers vLLM's /tokenize and /detokenize),
refuses every /v1 path without the right key when started with one (401 {"error": "Unauthorized"},
as vLLM's --api-key does), lists an alias with the model behind it as ``root`` in /v1/models, and
rejects prompts longer than ``max_model_len`` with vLLM's HTTP 400.

What each request does is a :class:`Behaviour`, chosen by the request's *prompt length* (so the
choice is deterministic whatever the concurrency): per-token delay, several tokens per chunk,
tokens whose text decodes to "" (optionally not sent at all, as vLLM does), no usage chunk,
HTTP errors, an abort mid-stream, or a hang (for timeouts). Every request is logged with the
server-side ``time.perf_counter()`` of each chunk write; on Linux that clock is system-wide, so a
client in another process can compare its own arrival times with it.

In-process use (tests)::

    async with FakeOpenAIServer(FakeServerConfig(...)) as srv:
        await run_benchmark(srv.base_url, srv.model, workload, ...)
        srv.log  # list[RequestRecord]

Standalone (benchmarks): ``python tests/fake_openai_server.py --token-delay-ms 0`` prints
``LISTENING <port>`` and serves until killed; ``GET /debug/log`` returns the request log.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import time
from dataclasses import asdict, dataclass, field, replace

from aiohttp import web

MODEL = "fake-model"
LOG_KEY: web.AppKey[list] = web.AppKey("log", list)
STATS_KEY: web.AppKey[dict] = web.AppKey("stats", dict)
PROFILE_KEY: web.AppKey[list] = web.AppKey("profile", list)  # the profiler calls, in order


@dataclass(frozen=True)
class Behaviour:
    token_delay_s: float = 0.002      # server "decode" time per token, slept before each chunk
    first_token_delay_s: float = 0.0  # extra "prefill" time before the first chunk
    tokens_per_chunk: int = 1         # bundle k tokens into one SSE chunk
    empty_text_tokens: frozenset[int] = frozenset()  # 0-based token positions whose text is ""
    omit_empty_chunks: bool = False   # real vLLM: a non-final chunk with "" text is not sent
    send_usage: bool = True           # honour stream_options.include_usage
    send_done: bool = True
    http_status: int = 200            # != 200: reply with an error JSON body instead
    abort_after_chunks: int | None = None  # drop the connection after this many token chunks
    hang_s: float = 0.0               # sleep this long before answering (timeouts)
    split_writes: bool = False        # write each event in two pieces (tests SSE reassembly)
    crlf: bool = False                # use \r\n line endings
    events_per_write: int = 1         # coalesce this many events per socket write (capacity benchmark)


@dataclass
class FakeServerConfig:
    default: Behaviour = field(default_factory=Behaviour)
    by_prompt_len: dict[int, Behaviour] = field(default_factory=dict)
    vocab_size: int = 32000
    model: str = MODEL
    oov_as_stream_error: bool = False  # vLLM 0.32: a streamed request with a bad id gets 200 + SSE error event
    accept_text: bool = False  # text prompts count one token per word (to serve vLLM's own client)
    root: str | None = None  # /v1/models "root": the model behind the served name (default: the name)
    api_key: str | None = None  # like vllm serve --api-key: /v1/* without "Bearer <key>" gets 401
    tokenizer_dir: str | None = None  # counts chat prompts with this tokenizer.json (else one token per word)
    max_model_len: int | None = None  # prompt + output tokens beyond this: HTTP 400, as vLLM
    profiler: bool = False  # like vllm serve --profiler-config: /start_profile and /stop_profile exist

    def behaviour_for(self, prompt_len: int) -> Behaviour:
        return self.by_prompt_len.get(prompt_len, self.default)


@dataclass
class RequestRecord:
    seq: int
    request_id: str | None
    received_at: float
    prompt_len: int
    max_tokens: int
    body: dict
    status: int = 200
    chunk_times: list[float] = field(default_factory=list)   # perf_counter as each token chunk is written
    chunk_tokens: list[int] = field(default_factory=list)    # tokens carried by each sent chunk
    completion_tokens: int = 0
    finished: bool = False
    disconnected: bool = False


def _token_text(i: int, b: Behaviour) -> str:
    return "" if i in b.empty_text_tokens else f" t{i}"


CHAT_TEMPLATE = "<s>{role}: {content}\n"  # the real-vLLM tier's tiny model's template, per message
GENERATION_PROMPT = "assistant: "
THINKING_OFF = "<think></think>"  # what a Qwen3-style template appends under enable_thinking=False


def chat_prompt_text(messages) -> str | None:
    """The messages rendered as the tier's template renders them (None when they are malformed)."""
    if not isinstance(messages, list) or not messages:
        return None
    out = []
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if not isinstance(content, str):
            return None
        out.append(CHAT_TEMPLATE.format(role=m.get("role", "user"), content=content))
    return "".join(out) + GENERATION_PROMPT


def _tokenizer(config: FakeServerConfig):
    if config.tokenizer_dir is None:
        return None
    from tokenizers import Tokenizer

    return Tokenizer.from_file(f"{config.tokenizer_dir}/tokenizer.json")


def _counter(config: FakeServerConfig):
    """Token count of a rendered text: the tokenizer's (no specials added: the template holds them)."""
    tok = _tokenizer(config)
    if tok is None:
        return lambda text: max(1, len(text.split()))
    return lambda text: len(tok.encode(text, add_special_tokens=False).ids)


def build_app(config: FakeServerConfig, log: list[RequestRecord] | None = None) -> web.Application:
    log = log if log is not None else []

    @web.middleware
    async def key_check(request: web.Request, handler):
        if config.api_key is not None and request.path.startswith("/v1") and \
                request.headers.get("Authorization") != f"Bearer {config.api_key}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    app = web.Application(middlewares=[key_check])
    count_text = _counter(config)
    app[LOG_KEY] = log
    counter = {"n": 0}
    stats = app[STATS_KEY] = {"in_flight": 0, "max_in_flight": 0}

    async def health(_req: web.Request) -> web.Response:
        return web.Response(text="")

    async def models(_req: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": config.model, "object": "model", "owned_by": "fake", "root": config.root or config.model}]})

    async def debug_log(_req: web.Request) -> web.Response:
        return web.json_response([{k: v for k, v in asdict(r).items() if k != "body"} for r in log])

    def error(status: int, message: str) -> web.Response:
        return web.json_response({"error": {"message": message, "type": "BadRequestError",
                                            "code": status}}, status=status)

    tok = _tokenizer(config)

    async def tokenize(request: web.Request) -> web.Response:  # vLLM's, with the server's tokenizer
        body = await request.json()
        if body.get("model") != config.model:
            return error(404, f"The model `{body.get('model')}` does not exist.")
        if "messages" in body:  # vLLM's chat form: the template rendered, no specials added (the template has them)
            text = chat_prompt_text(body["messages"])
            if text is None:
                return error(400, "malformed messages")
            if (body.get("chat_template_kwargs") or {}).get("enable_thinking") is False:
                text += THINKING_OFF
            ids = tok.encode(text, add_special_tokens=bool(body.get("add_special_tokens", False))).ids
        else:
            ids = tok.encode(body["prompt"], add_special_tokens=bool(body.get("add_special_tokens", True))).ids
        return web.json_response({"tokens": ids, "count": len(ids), "max_model_len": config.max_model_len})

    async def detokenize(request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("model") != config.model:
            return error(404, f"The model `{body.get('model')}` does not exist.")
        return web.json_response({"prompt": tok.decode(body["tokens"], skip_special_tokens=False)})

    async def chat_completions(request: web.Request) -> web.StreamResponse:
        return await completions(request, chat=True)

    async def completions(request: web.Request, chat: bool = False) -> web.StreamResponse:
        received = time.perf_counter()
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return error(400, "body is not JSON")
        prompt, max_tokens = body.get("prompt"), body.get("max_tokens")
        if chat:
            text = chat_prompt_text(body.get("messages"))
            if text is None:
                return error(400, "messages must be a non-empty list of {role, content}")
            prompt, max_tokens = list(range(count_text(text))), body.get("max_completion_tokens")
        elif isinstance(prompt, str) and prompt and config.accept_text:  # e.g. vLLM's own client (benchmarks)
            prompt = list(range(len(prompt.split()) or 1))
        rec = RequestRecord(seq=counter["n"], request_id=request.headers.get("x-request-id"),
                            received_at=received,
                            prompt_len=len(prompt) if isinstance(prompt, list) else -1,
                            max_tokens=max_tokens if isinstance(max_tokens, int) else -1, body=body)
        counter["n"] += 1
        log.append(rec)
        if not (isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt)):
            rec.status = 400
            return error(400, "this fake server only accepts token-id prompts")
        bad = [t for t in prompt if not 0 <= t < config.vocab_size]
        if bad and config.oov_as_stream_error and body.get("stream"):
            resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            err = {"error": {"message": f"Token id {max(bad)} is out of vocabulary", "type": "BadRequestError",
                             "param": None, "code": 400}}
            await resp.write(f"data: {json.dumps(err)}\n\ndata: [DONE]\n\n".encode())
            await resp.write_eof()
            return resp
        if bad:
            rec.status = 400
            return error(400, f"Token id {bad[0]} is out of vocabulary")
        if not isinstance(max_tokens, int) or max_tokens < 1:
            rec.status = 400
            return error(400, "max_tokens must be a positive integer")
        if body.get("model") != config.model:
            rec.status = 404
            return error(404, f"The model `{body.get('model')}` does not exist.")
        if config.max_model_len is not None and len(prompt) + max_tokens > config.max_model_len:
            rec.status = 400
            return error(400, f"This model's maximum context length is {config.max_model_len} tokens. However, "
                              f"you requested {len(prompt) + max_tokens} tokens ({len(prompt)} in the messages, "
                              f"{max_tokens} in the completion). Please reduce the length of the messages or "
                              "completion.")

        stats["in_flight"] += 1
        stats["max_in_flight"] = max(stats["max_in_flight"], stats["in_flight"])
        try:
            return await _answer(request, rec, body, prompt, max_tokens, chat)
        finally:
            stats["in_flight"] -= 1

    async def _answer(request, rec, body, prompt, max_tokens, chat=False) -> web.StreamResponse:
        b = config.behaviour_for(len(prompt))
        if b.hang_s:
            await asyncio.sleep(b.hang_s)
        if b.http_status != 200:
            rec.status = b.http_status
            return web.json_response({"error": {"message": "injected failure", "type": "InternalServerError",
                                                "code": b.http_status}}, status=b.http_status)

        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream",
                                                       "Cache-Control": "no-cache"})
        await resp.prepare(request)
        nl = "\r\n" if b.crlf else "\n"
        base = {"id": f"{'chatcmpl' if chat else 'cmpl'}-{rec.seq}",
                "object": "chat.completion.chunk" if chat else "text_completion", "created": 0, "model": config.model}

        pending: list[bytes] = []
        encoded: dict[tuple[str, bool], str] = {}

        async def send(obj, token_chunk: bool = False, flush: bool = False) -> None:
            payload = obj if isinstance(obj, str) else json.dumps({**base, **obj}, separators=(",", ":"))
            data = f"data: {payload}{nl}{nl}".encode()
            if b.events_per_write > 1:
                pending.append(data)
                if token_chunk:
                    rec.chunk_times.append(time.perf_counter())
                if len(pending) < b.events_per_write and not flush:
                    return
                data, token_chunk = b"".join(pending), False
                pending.clear()
            if b.split_writes and len(data) > 2:
                half = len(data) // 2
                await resp.write(data[:half])
                await asyncio.sleep(0.001)
                data = data[half:]
            if token_chunk:  # stamped just before the write that completes the event
                rec.chunk_times.append(time.perf_counter())
            await resp.write(data)

        try:
            n_tok = max_tokens
            sent_chunks = 0
            first = True
            for start in range(0, n_tok, b.tokens_per_chunk):
                idx = range(start, min(n_tok, start + b.tokens_per_chunk))
                delay = b.token_delay_s * len(idx) + (b.first_token_delay_s if first else 0.0)
                first = False
                if delay or not pending:
                    await asyncio.sleep(delay)  # sleep(0) still yields to other streams
                text = "".join(_token_text(i, b) for i in idx)
                last = idx[-1] == n_tok - 1
                rec.completion_tokens += len(idx)
                if text == "" and b.omit_empty_chunks and not last:
                    continue
                if b.abort_after_chunks is not None and sent_chunks >= b.abort_after_chunks:
                    rec.disconnected = True
                    # Drop the TCP connection mid-body: the client sees an incomplete chunked body.
                    request.transport.abort()
                    return resp
                key = (text, last)  # token events repeat: encode each distinct one once (a fast server)
                if key not in encoded:
                    said = {"delta": {"content": text}} if chat else {"text": text}
                    encoded[key] = json.dumps({**base, "choices": [
                        {"index": 0, **said, "logprobs": None, "finish_reason": "length" if last else None,
                         "stop_reason": None}]}, separators=(",", ":"))
                await send(encoded[key], token_chunk=True)
                rec.chunk_tokens.append(len(idx))
                sent_chunks += 1
            opts = body.get("stream_options") or {}
            if b.send_usage and opts.get("include_usage"):
                await send({"choices": [], "usage": {"prompt_tokens": len(prompt),
                                                     "total_tokens": len(prompt) + n_tok,
                                                     "completion_tokens": n_tok}})
            if b.send_done:
                await send("[DONE]", flush=True)
            elif pending:
                await resp.write(b"".join(pending))
            await resp.write_eof()
            rec.finished = True
        except (ConnectionResetError, asyncio.CancelledError):
            rec.disconnected = True
            raise
        return resp

    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/debug/log", debug_log)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    if tok is not None:
        app.router.add_post("/tokenize", tokenize)
        app.router.add_post("/detokenize", detokenize)
    if config.profiler:
        async def profile(request: web.Request) -> web.Response:
            app[PROFILE_KEY].append(request.path)
            return web.Response(status=200)

        app[PROFILE_KEY] = []
        app.router.add_post("/start_profile", profile)
        app.router.add_post("/stop_profile", profile)
    return app


class FakeOpenAIServer:
    """Run the app on 127.0.0.1 with an ephemeral port inside the current event loop."""

    def __init__(self, config: FakeServerConfig | None = None, sock: socket.socket | None = None):
        self.config = config or FakeServerConfig()
        self.log: list[RequestRecord] = []
        self._sock = sock
        self._runner: web.AppRunner | None = None
        self.app: web.Application | None = None
        self.port: int | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def model(self) -> str:
        return self.config.model

    @property
    def max_in_flight(self) -> int:
        """Most requests the server was answering at the same time."""
        return self.app[STATS_KEY]["max_in_flight"]

    async def start(self) -> FakeOpenAIServer:
        self.app = build_app(self.config, self.log)
        # handler_cancellation: a client disconnect cancels the handler, so the log shows it.
        self._runner = web.AppRunner(self.app, access_log=None, handler_cancellation=True,
                                     shutdown_timeout=1.0)
        await self._runner.setup()
        if self._sock is None:
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
        else:
            site = web.SockSite(self._runner, self._sock)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeOpenAIServer:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.stop()


def serve_forever(config: FakeServerConfig, sock: socket.socket | None = None) -> None:
    """Blocking: serve on ``sock`` (or a new ephemeral port) and print ``LISTENING <port>``."""

    async def main() -> None:
        srv = await FakeOpenAIServer(config, sock=sock).start()
        print(f"LISTENING {srv.port}", flush=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass


def _cli(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--token-delay-ms", type=float, default=2.0)
    ap.add_argument("--tokens-per-chunk", type=int, default=1)
    ap.add_argument("--vocab-size", type=int, default=32000)
    ap.add_argument("--events-per-write", type=int, default=1)
    args = ap.parse_args(argv)
    cfg = FakeServerConfig(default=replace(Behaviour(), token_delay_s=args.token_delay_ms / 1000,
                                           tokens_per_chunk=args.tokens_per_chunk,
                                           events_per_write=args.events_per_write),
                           vocab_size=args.vocab_size, oov_as_stream_error=True, accept_text=True)
    serve_forever(cfg)


if __name__ == "__main__":
    _cli(sys.argv[1:])
