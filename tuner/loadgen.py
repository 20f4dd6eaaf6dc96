"""The async streaming load client, pinned to ``vllm bench serve`` (metrics: tuner/metrics.py).

Definitions (docs/load-metrics.md §1, checked against vllm/benchmarks/serve.py):

* start = ``time.perf_counter()`` just before the POST; TTFT = arrival of the first SSE ``data:``
  message with non-empty ``choices`` (an empty-text chunk counts); ITL = gaps between successive
  choices-bearing messages, **per chunk** (a chunk carrying k tokens is one gap); latency (E2EL) =
  last choices-bearing message - start (the usage chunk and ``[DONE]`` do not count).
* success = HTTP 200 and at least one choices-bearing message; everything else is a failure,
  counted and described, never raised.
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
import time
from typing import Any, Callable, Mapping, Sequence

import aiohttp
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tuner.metrics import ERROR_EXCERPT, BenchmarkResult, RequestOutcome, compute_metrics, validate_goodput_slos
from tuner.workload import RequestSpec, Workload, plan_requests

COMPLETIONS_PATH = "/v1/completions"
READ_BUFSIZE = 16 * 1024 * 1024  # vllm #39963: long contexts overflow aiohttp's default buffer
DEFAULT_REQUEST_TIMEOUT_S = 1800.0  # a hung server must fail the trial, not stall the night


# ---- SSE parsing


class SSELineSplitter:
    """Reassembles lines from arbitrary network chunks (a line may span many reads).

    Lines end with ``\\n`` (a preceding ``\\r`` is dropped). We split bytes, not text: the
    newline byte never occurs inside a UTF-8 multi-byte sequence, so a split read cannot break
    a character. There is no line-length cap (long prompts echoed back stay parseable).
    """

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[str]:
        self._buf += data
        if b"\n" not in data:
            return []
        *lines, rest = bytes(self._buf).split(b"\n")
        self._buf = bytearray(rest)
        return [ln.rstrip(b"\r").decode("utf-8", errors="replace") for ln in lines]

    def finish(self) -> list[str]:
        """The unterminated last line, if the stream ended without a newline."""
        rest, self._buf = bytes(self._buf), bytearray()
        return [rest.rstrip(b"\r").decode("utf-8", errors="replace")] if rest.strip() else []


def sse_data(line: str) -> str | None:
    """The payload of a ``data:`` line, else None (blank lines, ``:`` comments, other fields)."""
    if not line.startswith("data:"):
        return None
    payload = line[5:]
    return payload[1:] if payload.startswith(" ") else payload


class StreamRecorder:
    """Per-request timing state; fed (line, arrival time) pairs, so it is testable offline."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.ttft: float | None = None
        self.itl: list[float] = []
        self.last_token_ts = start
        self.chunks = 0
        self.text: list[str] = []
        self.usage: dict | None = None
        self.done = False
        self.stream_errors: list[str] = []

    def on_line(self, line: str, ts: float) -> None:
        payload = sse_data(line)
        if payload is None:
            return
        payload = payload.strip()
        if payload == "[DONE]":
            self.done = True
            return
        if not payload:
            return
        try:
            msg = json.loads(payload)
        except json.JSONDecodeError as e:
            raise ValueError(f"invalid JSON in SSE data ({e.msg}): {payload[:80]!r}") from None
        if not isinstance(msg, dict):
            return
        choices = msg.get("choices")
        if choices:
            if self.ttft is None:
                self.ttft = ts - self.start
            else:
                self.itl.append(ts - self.last_token_ts)
            self.last_token_ts = ts
            self.chunks += 1
            self.text.append(choices[0].get("text") or "")
        if isinstance(msg.get("usage"), dict):
            self.usage = msg["usage"]  # last one wins (continuous usage stats are cumulative)
        if "error" in msg:
            self.stream_errors.append(str(msg["error"])[:ERROR_EXCERPT])


# ---- The client


class LoadGenerator:
    """One benchmark run against ``base_url``; :meth:`cancel_all` stops it promptly.

    Only ``{base_url}/v1/completions`` is contacted, with ``trust_env=False`` so an HTTP proxy
    variable cannot reroute loopback traffic. ``cancel_all`` cancels in-flight streams and
    closes their connections (a real vLLM asked to stop waits for its open clients), marks the
    unfinished requests failed ("cancelled") and lets :meth:`run` return the partial result.
    Cancelling the task running :meth:`run` also closes every stream, then re-raises.
    """

    def __init__(self, base_url: str, model: str, *, max_concurrency: int | None = None,
                 request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S, temperature: float = 0.0,
                 extra_body: Mapping[str, Any] | None = None, progress: bool = True,
                 on_request_done: Callable[[int, int], None] | None = None,
                 request_id_prefix: str = "tuner") -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if max_concurrency is not None and max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1 or None, got {max_concurrency}")
        self.url = base_url.rstrip("/") + COMPLETIONS_PATH
        self.model = model
        self.max_concurrency = max_concurrency
        self.request_timeout_s = request_timeout_s
        self.temperature = temperature
        self.extra_body = dict(extra_body or {})
        self.progress = progress
        self.on_request_done = on_request_done  # (done, total) of the measured pass, for a caller's display
        self.request_id_prefix = request_id_prefix
        self._tasks: set[asyncio.Task] = set()
        self._dispatcher: asyncio.Task | None = None
        self._cancelled = False

    def payload(self, spec: RequestSpec) -> dict[str, Any]:
        return {"model": self.model, "prompt": spec.prompt, "max_tokens": spec.output_len,
                "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
                "temperature": self.temperature, **self.extra_body}

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
                       sem: asyncio.Semaphore | contextlib.nullcontext, tag: str) -> None:
        try:
            async with sem:
                await self._stream(session, spec, out, tag)
        except asyncio.CancelledError:
            if not out.start_time:
                out.fail("cancelled", "cancelled while waiting for a concurrency slot")
            raise

    async def _stream(self, session: aiohttp.ClientSession, spec: RequestSpec, out: RequestOutcome,
                      tag: str) -> None:
        out.start_time = time.perf_counter()
        out.client_queue_time = out.start_time - out.arrival_time
        rec = StreamRecorder(out.start_time)
        resp: aiohttp.ClientResponse | None = None
        try:
            async with session.post(self.url, json=self.payload(spec),
                                    headers={"x-request-id": f"{tag}-{spec.index}"},
                                    timeout=aiohttp.ClientTimeout(total=self.request_timeout_s)) as resp:
                out.http_status = resp.status
                if resp.status != 200:
                    body = (await _read_excerpt(resp)).decode("utf-8", "replace")
                    out.fail(f"http {resp.status}", f"HTTP {resp.status} {resp.reason or ''}: {body}".strip())
                    return
                splitter = SSELineSplitter()
                async for data in resp.content.iter_any():
                    ts = time.perf_counter()
                    for line in splitter.feed(data):
                        rec.on_line(line, ts)
                for line in splitter.finish():
                    rec.on_line(line, time.perf_counter())
            out.absorb(rec)
            if rec.ttft is None:
                out.fail("no token chunk", "HTTP 200 but the stream carried no chunk with choices")
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

    async def _run_pass(self, session: aiohttp.ClientSession, specs: list[RequestSpec], tag: str,
                        progress_cb=None) -> tuple[list[RequestOutcome], float]:
        """Dispatch ``specs`` at their send offsets; return outcomes (in spec order) and duration."""
        sem = asyncio.Semaphore(self.max_concurrency) if self.max_concurrency else contextlib.nullcontext()
        outs = [RequestOutcome(index=s.index, prompt_len=s.prompt_len, expected_output_len=s.output_len,
                               scheduled_offset=s.send_offset_s) for s in specs]
        t0 = time.perf_counter()

        async def dispatch() -> None:
            for spec, out in zip(specs, outs):
                # loop: the event loop may wake a timer a hair early; a request is never sent early
                while (wait := t0 + spec.send_offset_s - time.perf_counter()) > 0:
                    await asyncio.sleep(wait)
                out.arrival_time = time.perf_counter()
                out.sent, out.dispatch_offset = True, out.arrival_time - t0
                task = asyncio.create_task(self._request(session, spec, out, sem, tag))
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

    async def run(self, workload: Workload, *, request_rate: float = math.inf, burstiness: float = 1.0,
                  warmup_requests: int = 0, goodput_slos: Mapping[str, float] | None = None,
                  percentiles: Sequence[float] = (50, 90, 99), seed: int | None = None) -> BenchmarkResult:
        slos = validate_goodput_slos(goodput_slos)
        specs, plan = plan_requests(workload, request_rate, burstiness, seed)
        self._cancelled = False
        connector = aiohttp.TCPConnector(limit=self.max_concurrency or 0,
                                         limit_per_host=self.max_concurrency or 0)
        async with aiohttp.ClientSession(connector=connector, trust_env=False,
                                         read_bufsize=READ_BUFSIZE) as session:
            warm_specs = workload.warmup_requests(warmup_requests)
            warm_tag = f"{self.request_id_prefix}-warmup"
            warm_outs, warm_dur = await self._run_pass(session, warm_specs, warm_tag)
            warm_failed = [o for o in warm_outs if not o.success]
            warmup = {"requests": len(warm_specs), "failed": len(warm_failed), "duration": warm_dur,
                      "errors": [o.error[:ERROR_EXCERPT] for o in warm_failed[:3]]}
            outs, duration = [], 0.0
            if not self._cancelled:
                done = [0]

                def advance(bar):
                    bar.advance(bar.task_ids[0])
                    done[0] += 1
                    if self.on_request_done is not None:
                        self.on_request_done(done[0], len(specs))

                with _progress_bar(len(specs), self.progress) as bar, _frozen_gc():
                    outs, duration = await self._run_pass(session, specs, self.request_id_prefix,
                                                          lambda: advance(bar))
        if self._cancelled and not outs:  # cancelled during the warm pass
            outs = [RequestOutcome(index=s.index, prompt_len=s.prompt_len, expected_output_len=s.output_len,
                                   scheduled_offset=s.send_offset_s) for s in specs]
            for o in outs:
                o.fail("not sent", "not sent: the run was cancelled first")
        return BenchmarkResult(
            model=self.model, endpoint=self.url, request_rate=request_rate, burstiness=burstiness,
            max_concurrency=self.max_concurrency, percentiles=tuple(percentiles), goodput_slos=slos,
            duration=duration, outcomes=outs,
            metrics=compute_metrics(outs, duration, percentiles, slos),
            workload=workload.describe(), arrivals=plan.to_dict(), warmup=warmup,
            cancelled=self._cancelled)


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
                        temperature: float = 0.0, seed: int | None = None,
                        on_request_done: Callable[[int, int], None] | None = None) -> BenchmarkResult:
    """Warm pass (``warmup_requests``, unmeasured), then the measured run; see :class:`LoadGenerator`.

    Cancel the awaiting task to stop early: every stream is closed before CancelledError propagates.
    """
    gen = LoadGenerator(base_url, model, max_concurrency=max_concurrency,
                        request_timeout_s=request_timeout_s, temperature=temperature, progress=progress,
                        on_request_done=on_request_done)
    return await gen.run(workload, request_rate=request_rate, burstiness=burstiness,
                         warmup_requests=warmup_requests, goodput_slos=goodput_slos,
                         percentiles=percentiles, seed=seed)
