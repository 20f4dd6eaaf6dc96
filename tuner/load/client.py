"""The async streaming load client, pinned to ``vllm bench serve`` (metrics: tuner/load/metrics.py).

Definitions (docs/load-metrics.md §1, checked against vllm/benchmarks/serve.py):

* start = ``time.perf_counter()`` just before the POST; TTFT = arrival of the first SSE ``data:``
  message with non-empty ``choices`` (an empty-text chunk counts); ITL = gaps between successive
  choices-bearing messages, **per chunk** (a chunk carrying k tokens is one gap); latency (E2EL) =
  last choices-bearing message - start (the usage chunk and ``[DONE]`` do not count).
* success = HTTP 200 and at least one choices-bearing message (a /v1/responses stream: a token event,
  and its terminal event: tuner/load/sse.py); everything else is a failure, counted and described, never
  raised.
* output/prompt tokens come from the final ``usage`` chunk: a real vLLM does not send a chunk
  whose tokens decode to "", so counting chunks undercounts. Without usage we count chunks.
* aggregates over successful requests only, numpy mean/median/population std and default
  (linear) percentiles, in ms, empty sets reported as 0 (vLLM's ``np.mean(x or 0)``).

We stamp each message with the time its bytes were read from the socket (one stamp per read):
messages that arrive coalesced in one read really did arrive together.

Name clash to keep in mind when comparing tools: GuideLLM's ``inter_token_latency_ms`` is our
(vLLM's) TPOT; its ``time_per_output_token_ms`` includes TTFT and has no vLLM equivalent; our ITL
pools per-chunk gaps. AIPerf drops empty first chunks from TTFT; vLLM and we count them.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import math
import os
import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import numpy as np
import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .arrivals import plan_requests
from .firstrun import first_run_figures
from .metrics import (
    ERROR_EXCERPT,
    PERCENTILE_METRICS,
    QUEUE_METRICS,
    BenchmarkResult,
    RequestOutcome,
    compute_metrics,
    compute_pooling_metrics,
    probe_figures,
    validate_goodput_slos,
)
from .options import BACKENDS
from .pooling import (
    ID_KINDS,
    IMAGE_KINDS,
    POOLING_ROUTES,
    BatchRecipe,
    pooling_payload,
    read_answer,
    spec_inputs,
)
from .sse import SSELineSplitter, StreamRecorder, error_text, sse_data  # noqa: F401 (re-exported)
from .workload import RequestSpec, TextPrompt, Workload

COMPLETIONS_PATH = "/v1/completions"
CHAT_PATH = "/v1/chat/completions"
RESPONSES_PATH = "/v1/responses"
LORA_ASSIGNMENTS = ("random", "round-robin")  # vllm bench serve's --lora-assignment
# flavour -> (stream kind (sse.py), default path, the ending vLLM's client requires of the URL)
_ROUTES = {"openai": ("completions", COMPLETIONS_PATH, "completions"),
           "vllm": ("completions", COMPLETIONS_PATH, "completions"),
           "openai-chat": ("chat", CHAT_PATH, "chat/completions"),
           "openai-responses": ("responses", RESPONSES_PATH, "responses"), **POOLING_ROUTES}
_loads = orjson.loads  # orjson: ~3x faster per chunk than json (the client's hot path), and encodes
_NUMPY = orjson.OPT_SERIALIZE_NUMPY  # numpy id arrays directly (a 128k-token prompt in ~1 ms)


def _dumps(body: dict) -> bytes:
    return orjson.dumps(body, option=_NUMPY)


READ_BUFSIZE = 16 * 1024 * 1024  # vllm #39963: long contexts overflow aiohttp's default buffer
DEFAULT_REQUEST_TIMEOUT_S = 1800.0  # a hung server must fail the trial, not stall the night
PREBUILD_MAX_TOKENS = 4_000_000  # ~25 MB of encoded bodies; larger runs encode per request, in a thread
PREBUILD_MAX_IMAGE_BYTES = 256 << 20  # pixels of the run's images; random pixels JPEG-encode to about as much


# ---- SSE parsing


def _default_request_id_prefix() -> str:
    return f"bench-{uuid.uuid4().hex[:8]}-"  # vLLM's default: ids differ from run to run


def auth_refusal(status: int) -> str | None:
    """The plain sentence for a server that refused us for want of a key (vLLM's --api-key answers 401)."""
    if status == 401:
        return ("HTTP 401 Unauthorized: the server requires an API key; set OPENAI_API_KEY "
                "(the variable vllm bench serve reads)")
    if status == 403:
        return "HTTP 403 Forbidden: the server refused the API key; check OPENAI_API_KEY"
    return None


def auth_headers(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """vLLM's request headers: JSON, ``Authorization: Bearer $OPENAI_API_KEY`` if set, then --header."""
    headers = {"Content-Type": "application/json"}
    key = os.environ.get("OPENAI_API_KEY")
    if key:
        headers["Authorization"] = f"Bearer {key}"
    headers.update(extra or {})
    return headers


class LoadGenerator:
    """One benchmark run against ``base_url``; :meth:`cancel_all` stops it promptly.

    Only ``{base_url}{endpoint}`` is contacted, with ``trust_env=False`` so an HTTP proxy variable
    cannot reroute loopback traffic. ``api`` (the API flavour) "openai"/"vllm" streams /v1/completions with
    token-id prompts; "openai-chat" streams /v1/chat/completions (``max_completion_tokens``) and
    "openai-responses" /v1/responses (``input``, ``max_output_tokens``, ``store: false``), each with a
    text prompt from ``prompt_text(ids)``. Request bodies are encoded to bytes before a request's
    clock starts. ``cancel_all`` cancels in-flight streams and closes their connections (a real
    vLLM asked to stop waits for its open clients), marks the unfinished requests failed
    ("cancelled") and lets :meth:`run` return the partial result. Cancelling the task running
    :meth:`run` also closes every stream, then re-raises.
    """

    def __init__(self, base_url: str, model: str, *, max_concurrency: int | None = None,
                 request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S, temperature: float | None = None,
                 extra_body: Mapping[str, Any] | None = None, progress: bool = True,
                 on_request_done: Callable[[int, int], None] | None = None,
                 request_id_prefix: str | None = None, api: str = "openai",
                 endpoint: str | None = None, ignore_eos: bool = True,
                 headers: Mapping[str, str] | None = None,
                 prompt_text: Callable[[Sequence[int]], str] | None = None, keep_text: bool = True,
                 logprobs: int | None = None, lora_modules: Sequence[str] = (), lora_assignment: str = "random",
                 verify_tls: bool = True) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if max_concurrency is not None and max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1 or None, got {max_concurrency}")
        if api not in BACKENDS:  # said as "backend": the name bench's flag and tuner.bench() take
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {api!r}")
        self.api = api
        self.kind, default_path, ending = _ROUTES[api]
        self.pooling = api in POOLING_ROUTES  # one JSON answer, no stream (tuner/load/pooling.py)
        self._send = self._pooled if self.pooling else self._stream
        self.chat = self.kind == "chat"  # the only flavour that carries images
        endpoint = endpoint or default_path
        if not endpoint.endswith(ending):
            raise ValueError(f"--endpoint {endpoint!r} does not fit --backend {api} (its path ends in {ending})")
        self.url = base_url.rstrip("/") + endpoint
        self.model = model
        if lora_assignment not in LORA_ASSIGNMENTS:
            raise ValueError(f"lora_assignment must be one of {', '.join(LORA_ASSIGNMENTS)}, got {lora_assignment!r}")
        if logprobs is not None and logprobs < 0:
            raise ValueError(f"--logprobs must be 0 or more, got {logprobs}")
        self.logprobs = logprobs  # vLLM's client sends it to the completions API only
        self.lora_modules, self.lora_assignment = list(lora_modules), lora_assignment
        self._models: dict[int, str] = {}  # request index -> its LoRA adapter (vLLM's --lora-modules)
        self.verify_tls = verify_tls  # False: vLLM's --insecure (self-signed certificates)
        self.max_concurrency = max_concurrency
        self.request_timeout_s = request_timeout_s
        self.extra_body = dict(extra_body or {})
        if temperature is not None:
            self.extra_body.setdefault("temperature", temperature)
        self.ignore_eos = ignore_eos
        self.headers = auth_headers(headers)
        self.prompt_text = prompt_text or synthetic_text
        self.keep_text = keep_text  # generated texts are only written with --save-detailed
        self.progress = progress
        self.on_request_done = on_request_done  # (done, total) of the measured pass, for a caller's display
        self.request_id_prefix = request_id_prefix if request_id_prefix is not None else _default_request_id_prefix()
        self._tasks: set[asyncio.Task] = set()
        self._dispatcher: asyncio.Task | None = None
        self._cancelled = False

    @property
    def text_prompts(self) -> bool:
        """Whether prompts are sent as text (chat and responses: the server's chat template wraps them; rerank
        and Infinity take no token ids)."""
        return self.kind not in ("completions", *ID_KINDS)

    def assign_adapters(self, indices: Sequence[int], seed: int) -> None:
        """vLLM's --lora-modules: each request names one adapter as its model, drawn at random (seeded) or in
        turn (round-robin), in request order."""
        if not self.lora_modules:
            return
        rng = random.Random(seed)
        for n, i in enumerate(indices):
            self._models[i] = (self.lora_modules[n % len(self.lora_modules)] if self.lora_assignment == "round-robin"
                               else rng.choice(self.lora_modules))

    def payload(self, spec: RequestSpec) -> dict[str, Any]:
        """The request body (a dict; :meth:`body` is what is sent)."""
        model = self._models.get(spec.index, self.model)
        if self.pooling:
            if spec.images and self.kind not in IMAGE_KINDS:
                raise ValueError(f"request {spec.index} carries images: the {self.api} backend sends text; "
                                 "images go with openai-embeddings-clip, -vlm2vec or infinity-embeddings-clip")
            extra = {"ignore_eos": True} if self.ignore_eos and self.kind != "rerank" else {}  # vLLM's
            return pooling_payload(self.kind, model, spec.prompt if self.text_prompts else spec.prompt_array,
                                   isinstance(spec.recipe, BatchRecipe), self.prompt_text, {**extra, **self.extra_body},
                                   [im.content_part() for im in spec.images], spec.index)
        body: dict[str, Any] = {"model": model}
        if spec.images and not self.chat:
            raise ValueError(f"request {spec.index} carries images: they need --backend openai-chat")
        text = None
        if self.text_prompts:  # chat and responses send text; a text dataset's as it is, token ids made text
            prompt = spec.prompt
            text = prompt if isinstance(prompt, str) else self.prompt_text(prompt)
        if self.kind == "responses":
            body["input"] = text
            body["max_output_tokens"] = spec.output_len
        elif self.chat:
            # vLLM's _get_chat_content: the text part (or a prompt's own interleaved parts), then the images
            # (mm_position "last")
            own = getattr(spec.recipe, "parts", None)
            parts = [*(own if own is not None else [{"type": "text", "text": text}]),
                     *(im.content_part() for im in spec.images)]
            body["messages"] = [{"role": "user", "content": parts}]
            body["max_completion_tokens"] = spec.output_len
        else:
            body["prompt"] = spec.prompt_array
            body["max_tokens"] = spec.output_len
            if self.logprobs is not None:
                body["logprobs"] = self.logprobs
        body["stream"] = True
        if self.kind == "responses":
            body["store"] = False  # vLLM's client: a server storing responses would grow over the run
        else:
            body["stream_options"] = {"include_usage": True}
        if self.ignore_eos:
            body["ignore_eos"] = True
        body.update(self.extra_body)
        return body

    def body(self, spec: RequestSpec) -> bytes:
        return _dumps(self.payload(spec))

    async def close(self) -> None:
        """Alias of :meth:`cancel_all` for shutdown paths."""
        await self.cancel_all()

    async def cancel_all(self) -> None:
        """Cancel the dispatcher and every in-flight request; returns once they have unwound."""
        self._cancelled = True
        pending = [t for t in (self._dispatcher, *self._tasks) if t is not None and not t.done()]
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def _request(self, session: aiohttp.ClientSession, spec: RequestSpec, out: RequestOutcome,
                       sem: asyncio.Semaphore | contextlib.nullcontext, request_id: str,
                       body: bytes | None) -> None:
        try:
            if body is None:  # a big run: encode in a thread, so other streams' stamps are not held up
                body = await asyncio.to_thread(self.body, spec)
            async with sem:
                await self._send(session, body, out, request_id)
        except asyncio.CancelledError:
            if not out.start_time:
                out.fail("cancelled", "cancelled while waiting for a concurrency slot")
            raise

    async def _stream(self, session: aiohttp.ClientSession, body: bytes, out: RequestOutcome,
                      request_id: str) -> None:
        request = self._post(session, body, out, request_id)
        rec = StreamRecorder(out.start_time, self.kind, self.keep_text)
        resp: aiohttp.ClientResponse | None = None
        perf_counter = time.perf_counter
        try:
            async with request as resp:
                out.http_status = resp.status
                if resp.status != 200:
                    await _refused(resp, out, self.pooling)
                    return
                splitter = SSELineSplitter()
                feed, on_lines = splitter.feed_bytes, rec.on_lines
                async for data in resp.content.iter_any():
                    on_lines(feed(data), perf_counter())
                for line in splitter.finish():
                    rec.on_line(line, perf_counter())
            out.absorb(rec)
            if rec.stream_errors:
                # vLLM reports a failed request as an error event in a 200 stream; if tokens came
                # first the answer is cut short, so the request failed either way.
                where = "" if rec.ttft is None else f" after {rec.chunks} chunks"
                out.fail("server error", f"server error{where}: {rec.stream_errors[0]}")
            elif rec.ttft is None:
                out.fail("no token chunk", "HTTP 200 but the stream carried no token event"
                         if self.kind == "responses" else "HTTP 200 but the stream carried no chunk with choices")
            elif self.kind == "responses" and not rec.done:
                out.fail("cut stream", f"the stream ended after {rec.chunks} token events without its terminal "
                         "event (response.completed): the response was cut")
            else:
                out.success = True
        except asyncio.CancelledError:
            out.absorb(rec)
            out.fail("cancelled", "cancelled while in flight")
            if resp is not None:
                resp.close()  # drop the connection now so the server sees the disconnect
            raise
        except asyncio.TimeoutError:
            out.absorb(rec)
            out.fail("timeout", f"timeout: no complete response within {self.request_timeout_s} s")
        except Exception as e:  # noqa: BLE001 - every failure is recorded, none is fatal
            out.absorb(rec)
            out.fail(type(e).__name__, f"{type(e).__name__}: {e}"[: 2 * ERROR_EXCERPT])

    def _post(self, session: aiohttp.ClientSession, body: bytes, out: RequestOutcome, request_id: str):
        """The POST of one request (to enter with ``async with``), its clock started now: vLLM's start, just
        before the request is sent."""
        headers = {**self.headers, "x-request-id": request_id}
        out.start_time = time.perf_counter()
        out.client_queue_time = out.start_time - out.arrival_time
        return session.post(self.url, data=body, headers=headers,
                            timeout=aiohttp.ClientTimeout(total=self.request_timeout_s))

    async def _pooled(self, session: aiohttp.ClientSession, body: bytes, out: RequestOutcome,
                      request_id: str) -> None:
        """One pooling request (vLLM's _run_pooling_request): latency = the whole answer read; the prompt
        tokens from its usage. An answer without the embeddings, data or ranking asked for is a failure."""
        request = self._post(session, body, out, request_id)
        resp: aiohttp.ClientResponse | None = None
        try:
            async with request as resp:
                out.http_status = resp.status
                if resp.status != 200:
                    await _refused(resp, out, self.pooling)
                    return
                raw = await resp.read()
                metadata = resp.headers.get("metadata")
            out.latency = out.ttft = time.perf_counter() - out.start_time
            tokens, failure = read_answer(self.kind, self.extra_body.get("encoding_format"), raw, metadata)
            if failure is not None:
                out.fail("bad answer", failure)
                return
            if tokens is not None:
                out.prompt_len = tokens
            out.success = True
        except asyncio.CancelledError:
            out.fail("cancelled", "cancelled while in flight")
            if resp is not None:
                resp.close()
            raise
        except asyncio.TimeoutError:
            out.fail("timeout", f"timeout: no complete response within {self.request_timeout_s} s")
        except Exception as e:  # noqa: BLE001 - every failure is recorded, none is fatal
            out.fail(type(e).__name__, f"{type(e).__name__}: {e}"[: 2 * ERROR_EXCERPT])

    async def _run_pass(self, session: aiohttp.ClientSession, specs: list[RequestSpec], prefix: str,
                        progress_cb=None) -> tuple[list[RequestOutcome], float]:
        """Dispatch ``specs`` at their send offsets; return outcomes (in spec order) and duration."""
        sem = asyncio.Semaphore(self.max_concurrency) if self.max_concurrency else contextlib.nullcontext()
        outs = [RequestOutcome(index=s.index, prompt_len=s.prompt_len, expected_output_len=s.output_len,
                               scheduled_offset=s.send_offset_s, inputs=spec_inputs(self.kind, s)) for s in specs]
        # Bodies are encoded before any clock starts: all of them up front when they fit in memory,
        # else each one off the event loop before its request is timed.
        prebuilt = (sum(s.prompt_len for s in specs) <= PREBUILD_MAX_TOKENS
                    and sum(im.raw_bytes for s in specs for im in s.images) <= PREBUILD_MAX_IMAGE_BYTES)
        bodies = [self.body(s) for s in specs] if prebuilt else [None] * len(specs)
        t0 = time.perf_counter()

        async def dispatch() -> None:
            for spec, out, body in zip(specs, outs, bodies):
                # loop: the event loop may wake a timer a hair early; a request is never sent early
                while (wait := t0 + spec.send_offset_s - time.perf_counter()) > 0:
                    await asyncio.sleep(wait)
                out.arrival_time = time.perf_counter()
                out.sent, out.dispatch_offset = True, out.arrival_time - t0
                task = asyncio.create_task(self._request(session, spec, out, sem, f"{prefix}{spec.index}", body))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                if progress_cb is not None:
                    task.add_done_callback(lambda _t: progress_cb())

        self._dispatcher = asyncio.create_task(dispatch())
        try:
            await asyncio.gather(self._dispatcher, return_exceptions=True)
            while self._tasks:
                await asyncio.gather(*list(self._tasks), return_exceptions=True)
        except asyncio.CancelledError:
            await self.cancel_all()
            raise
        finally:
            self._dispatcher = None
        duration = time.perf_counter() - t0
        for o in outs:
            if not o.sent:
                o.fail("not sent", "not sent: the run was cancelled first")
        return outs, duration

    async def probe(self, session: aiohttp.ClientSession, prompt: list[int], max_tokens: int = 1) -> str | None:
        """Send one small request; the error text, or None when it succeeded."""
        spec = RequestSpec(index=0, prompt_len=len(prompt), output_len=max_tokens, recipe=_FixedPrompt(prompt))
        out = RequestOutcome(index=0, prompt_len=len(prompt), expected_output_len=max_tokens)
        out.arrival_time = time.perf_counter()
        await self._send(session, self.body(spec), out, f"{self.request_id_prefix}probe")
        return None if out.success else out.error

    async def wait_ready(self, session: aiohttp.ClientSession, spec: RequestSpec, timeout_s: float) -> None:
        """vLLM's --ready-check-timeout-sec: retry the first request every 5 s until it succeeds."""
        deadline = time.monotonic() + timeout_s
        while True:
            out = RequestOutcome(index=0, prompt_len=spec.prompt_len, expected_output_len=spec.output_len)
            out.arrival_time = time.perf_counter()
            await self._send(session, self.body(spec), out, f"{self.request_id_prefix}ready")
            if out.success:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise ReadyCheckFailed(f"initial test run failed: {out.error}")
            await asyncio.sleep(min(5.0, left))

    async def _probe_loop(self, rate: float, time_scale: float, stop: asyncio.Event,
                          outs: list[RequestOutcome]) -> None:
        """vLLM's --probe-request-rate: one-token "Hi" requests for one token, one after another, `rate` a second
        beside the run and outside --max-concurrency, on a connection pool of their own (vLLM's share the run's,
        whose --max-concurrency limit can queue them behind it)."""
        body = self.body(RequestSpec(index=-1, prompt_len=1, output_len=1, recipe=TextPrompt("Hi")))
        interval = time_scale / rate
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(**({} if self.verify_tls else {"ssl": False})),
                                         trust_env=False, read_bufsize=READ_BUFSIZE) as session:
            while not stop.is_set():
                out = RequestOutcome(index=len(outs), prompt_len=1, expected_output_len=1)
                out.arrival_time = time.perf_counter()
                await self._send(session, body, out, f"{self.request_id_prefix}probe-{len(outs)}")
                outs.append(out)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), interval)

    def session(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(limit=self.max_concurrency or 0,
                                         limit_per_host=self.max_concurrency or 0,
                                         **({} if self.verify_tls else {"ssl": False}))
        return aiohttp.ClientSession(connector=connector, trust_env=False, read_bufsize=READ_BUFSIZE)

    async def run(self, workload: Workload, *, request_rate: float = math.inf, burstiness: float = 1.0,
                  warmup_requests: int = 0, goodput_slos: Mapping[str, float] | None = None,
                  percentiles: Sequence[float] = (50, 90, 99), seed: int | None = None,
                  time_scale: float = 1.0, percentile_metrics: Sequence[str] = PERCENTILE_METRICS + QUEUE_METRICS,
                  ramp_up: tuple[str, float, float] | None = None, ready_check_timeout_s: float = 0.0,
                  run_info: Mapping[str, Any] | None = None, probe_rate: float = 0.0) -> BenchmarkResult:
        """``request_rate``, ramp-up rates, trace timestamps and SLOs are in the server's time: against
        a server compressed by ``time_scale`` they are sent ``1/time_scale`` times faster. ``probe_rate``:
        vLLM's --probe-request-rate, probes beside the measured run (:meth:`_probe_loop`)."""
        slos = validate_goodput_slos(goodput_slos)
        if not 0 < time_scale <= 1:
            raise ValueError(f"time_scale must be in (0, 1], got {time_scale}")
        specs, plan = plan_requests(workload, request_rate, burstiness, seed, ramp_up=ramp_up)
        for s in specs:
            s.send_offset_s *= time_scale
        self.assign_adapters([s.index for s in specs], workload.seed if seed is None else seed)
        self._cancelled = False
        async with self.session() as session:
            if ready_check_timeout_s > 0 and specs:
                await self.wait_ready(session, specs[0], ready_check_timeout_s)
            warm_specs = workload.warmup_requests(warmup_requests)
            warm_outs, warm_dur = await self._run_pass(session, warm_specs, f"{self.request_id_prefix}warmup-")
            warm_failed = [o for o in warm_outs if not o.success]
            warmup = {"requests": len(warm_specs), "failed": len(warm_failed), "duration": warm_dur,
                      "errors": [o.error[:ERROR_EXCERPT] for o in warm_failed[:3]]}
            outs, duration = [], 0.0
            probe_outs: list[RequestOutcome] = []
            if not self._cancelled:
                done = [0]

                def advance(bar):
                    bar.advance(bar.task_ids[0])
                    done[0] += 1
                    if self.on_request_done is not None:
                        self.on_request_done(done[0], len(specs))

                stop = asyncio.Event()
                probing = (asyncio.create_task(self._probe_loop(probe_rate, time_scale, stop, probe_outs))
                           if probe_rate > 0 else None)
                try:
                    with _progress_bar(len(specs), self.progress) as bar, _frozen_gc():
                        outs, duration = await self._run_pass(session, specs, self.request_id_prefix,
                                                              lambda: advance(bar))
                finally:
                    stop.set()
                    if probing is not None:
                        if self._cancelled:  # a stopped run does not wait for a probe in flight
                            probing.cancel()
                        await asyncio.gather(probing, return_exceptions=True)
        first_run = first_run_figures(warm_outs, outs, percentiles) if outs else {}
        if self._cancelled and not outs:  # cancelled during the warm pass
            outs = [RequestOutcome(index=s.index, prompt_len=s.prompt_len, expected_output_len=s.output_len,
                                   scheduled_offset=s.send_offset_s) for s in specs]
            for o in outs:
                o.fail("not sent", "not sent: the run was cancelled first")
        info = {"api": self.api, **(run_info or {})}
        if ramp_up is not None:
            info["ramp_up"] = {"ramp_up_strategy": ramp_up[0], "ramp_up_start_rps": ramp_up[1],
                               "ramp_up_end_rps": ramp_up[2]}
        return BenchmarkResult(
            model=self.model, endpoint=self.url, request_rate=request_rate, burstiness=burstiness,
            max_concurrency=self.max_concurrency, percentiles=tuple(percentiles), goodput_slos=slos,
            duration=duration, outcomes=outs,
            metrics=(compute_pooling_metrics(outs, duration, percentiles, percentile_metrics) if self.pooling
                     else compute_metrics(outs, duration, percentiles, slos, time_scale=time_scale,
                                          percentile_metrics=percentile_metrics)),
            workload=workload.describe(), arrivals=plan.to_dict(), warmup=warmup,
            cancelled=self._cancelled, run_info=info, percentile_metrics=tuple(percentile_metrics),
            first_run=first_run, probes=probe_figures(probe_outs) if probe_rate > 0 else {}, pooling=self.pooling)


class ReadyCheckFailed(Exception):
    """The endpoint never answered the first request within --ready-check-timeout-sec."""


@dataclass(frozen=True)
class _FixedPrompt:
    """A recipe for a literal prompt (probes)."""

    ids: tuple[int, ...]

    def __init__(self, ids: Sequence[int]) -> None:
        object.__setattr__(self, "ids", tuple(ids))

    def build(self) -> list[int]:
        return list(self.ids)

    def build_array(self) -> np.ndarray:
        return np.asarray(self.ids, dtype=np.int64)


_WORDS = ("the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "on", "was", "be",
          "by", "at", "this", "from", "or", "an", "data", "model", "time", "value", "system", "result")


def synthetic_text(ids: Sequence[int]) -> str:
    """A text prompt of about len(ids) words, distinct per id sequence (chat without a tokenizer)."""
    n = len(_WORDS)
    return " ".join(_WORDS[int(i) % n] + ("" if int(i) < n else str(int(i) // n % 97)) for i in ids)


# A route the server does not have (FastAPI's and aiohttp's 404 bodies): vLLM registers only the APIs of the
# tasks its model supports, so a pooling model has no generating API and a generating model no pooling one.
_NO_ROUTE = ("Not Found", "404: Not Found")
NO_GENERATING_API = "vLLM gives it no generating API"  # what a study that meets it reads (trial.run.setup_failure)
_ROUTE_HINT = {True: "no such route: is the server serving a pooling model (vllm serve ... --runner pooling)?",
               False: f"no such route: if the server serves a pooling model ({NO_GENERATING_API}), load it with "
                      "--backend openai-embeddings, vllm-pooling or vllm-rerank; else check --base-url and "
                      "--endpoint"}


async def _refused(resp: aiohttp.ClientResponse, out: RequestOutcome, pooling: bool) -> None:
    """A non-200 answer recorded as the failure it says (the server's own message when it gave one)."""
    text = (await _read_excerpt(resp)).decode("utf-8", "replace")
    try:
        message = error_text(json.loads(text))
    except ValueError:
        message = text.strip()
    if resp.status == 404 and message in _NO_ROUTE:
        message = f"{message} ({_ROUTE_HINT[pooling]})"
    out.fail(f"http {resp.status}", auth_refusal(resp.status)
             or f"HTTP {resp.status}: {message or resp.reason or ''}".strip())


async def _read_excerpt(resp: aiohttp.ClientResponse) -> bytes:
    """The first ERROR_EXCERPT bytes of an error body (never the whole of a huge one)."""
    body = b""
    while len(body) < ERROR_EXCERPT:
        part = await resp.content.read(ERROR_EXCERPT - len(body))
        if not part:
            break
        body += part
    return body


@contextlib.contextmanager
def _frozen_gc():
    """Move everything allocated so far out of the collector's reach for the measured pass.

    vLLM's client does the same (``freeze_gc_heap``): in a process that has loaded optuna,
    pandas and friends, a full collection walks all of it and the pause lands in someone's ITL.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _progress_bar(total: int, enabled: bool) -> Progress:
    """requests done / total on stderr (stdout stays clean for JSON), or nothing when disabled."""
    bar = Progress(TextColumn("requests"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=Console(stderr=True), disable=not enabled)
    bar.add_task("requests", total=total)
    return bar


async def run_benchmark(base_url: str, model: str, workload: Workload, *,
                        max_concurrency: int | None = None, request_rate: float = math.inf,
                        burstiness: float = 1.0, warmup_requests: int = 0,
                        goodput_slos: Mapping[str, float] | None = None,
                        percentiles: Sequence[float] = (50, 90, 99), progress: bool = True,
                        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
                        temperature: float | None = None, seed: int | None = None,
                        on_request_done: Callable[[int, int], None] | None = None,
                        time_scale: float = 1.0, percentile_metrics: Sequence[str] | None = None,
                        **client: Any) -> BenchmarkResult:
    """Warm pass (``warmup_requests``, unmeasured), then the measured run; see :class:`LoadGenerator`
    (``client``: its other keyword arguments) and :meth:`LoadGenerator.run` for ``time_scale``.

    Cancel the awaiting task to stop early: every stream is closed before CancelledError propagates.
    """
    gen = LoadGenerator(base_url, model, max_concurrency=max_concurrency,
                        request_timeout_s=request_timeout_s, temperature=temperature, progress=progress,
                        on_request_done=on_request_done, **client)
    extra = {} if percentile_metrics is None else {"percentile_metrics": tuple(percentile_metrics)}
    return await gen.run(workload, request_rate=request_rate, burstiness=burstiness,
                         warmup_requests=warmup_requests, goodput_slos=goodput_slos,
                         percentiles=percentiles, seed=seed, time_scale=time_scale, **extra)
