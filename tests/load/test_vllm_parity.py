"""Parity with vllm bench serve 0.32.0 and the audit's bugs, each pinned by a test that failed before:
server error text, time-scaled rates and goodput, bodies encoded before the clock, distinct prompt
bodies, trace --num-prompts/--seed, per-run request ids, vLLM's timed_trace format, headers."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time

import pytest

from tests.fake_openai_server import Behaviour, FakeOpenAIServer, FakeServerConfig
from tuner.load.client import LoadGenerator, run_benchmark
from tuner.load.datasets import build_workload
from tuner.load.metrics import RequestOutcome, peak_concurrency_1s_buckets, peak_output_and_concurrency, rescale_time
from tuner.load.trace import TraceWorkload
from tuner.load.workload import FixedWorkload, RandomWorkload


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def bench(config, workload, **kw):
    kw.setdefault("progress", False)
    async with FakeOpenAIServer(config) as srv:
        res = await run_benchmark(srv.base_url, srv.model, workload, **kw)
        return res, srv


# ------------------------------------------------------------------ server errors


def test_sse_error_event_becomes_the_request_error_text():
    cfg = FakeServerConfig(vocab_size=1000, oov_as_stream_error=True)
    res, _ = run(bench(cfg, FixedWorkload(20, 4, 3, vocab_size=5000, reserved_ids=2000)))
    assert res.completed == 0 and res.failed == 3
    for o in res.outcomes:
        assert o.failure_reason == "server error"
        assert re.fullmatch(r"server error: Token id \d+ is out of vocabulary", o.error), o.error
    summary = res.failure_summary()
    assert sum(g["count"] for g in summary["by_message"]) == 3
    assert summary["by_message"][0]["message"].startswith("server error: Token id")


def test_http_error_body_message_is_kept():
    res, _ = run(bench(FakeServerConfig(vocab_size=1000), FixedWorkload(20, 2, 2, vocab_size=5000,
                                                                        reserved_ids=2000)))
    assert res.outcomes[0].error.startswith("HTTP 400: Token id ") and "out of vocabulary" in res.outcomes[0].error


# ------------------------------------------------------------------ time scale


def test_goodput_is_judged_in_server_time_under_time_scale():
    # 60 ms of wall prefill at scale 0.1 is 600 ms of server time: it misses a 200 ms TTFT SLO.
    cfg = FakeServerConfig(default=Behaviour(token_delay_s=0.001, first_token_delay_s=0.06))
    res, _ = run(bench(cfg, FixedWorkload(8, 3, 4), goodput_slos={"ttft": 200.0}, time_scale=0.1))
    data = rescale_time(res.to_json(), 0.1)
    assert min(data["ttfts"]) >= 0.6
    assert data["request_goodput"] == 0.0
    res, _ = run(bench(cfg, FixedWorkload(8, 3, 4), goodput_slos={"ttft": 5000.0}, time_scale=0.1))
    data = rescale_time(res.to_json(), 0.1)
    assert data["request_goodput"] == pytest.approx(data["request_throughput"])


def test_request_rate_is_in_server_time_under_time_scale():
    res, _ = run(bench(FakeServerConfig(default=Behaviour(token_delay_s=0)), FixedWorkload(8, 2, 10),
                       request_rate=20.0, time_scale=0.5))
    assert res.outcomes[-1].scheduled_offset == pytest.approx(10 / 20.0 * 0.5)
    assert all(o.dispatch_offset >= o.scheduled_offset for o in res.outcomes)
    data = rescale_time(res.to_json(), 0.5)
    assert data["request_rate"] == 20.0


def test_trace_timestamps_are_in_server_time_under_time_scale():
    w = TraceWorkload(input_lens=[5, 5, 5], output_lens=[2, 2, 2], timestamps_=[0.0, 0.2, 0.4])
    res, _ = run(bench(FakeServerConfig(default=Behaviour(token_delay_s=0)), w, time_scale=0.25))
    assert [o.scheduled_offset for o in res.outcomes] == pytest.approx([0.0, 0.05, 0.1])


# ------------------------------------------------------------------ the request clock


class SlowBody(LoadGenerator):
    def payload(self, spec):
        time.sleep(0.25)  # a huge prompt being built and encoded
        return super().payload(spec)


@pytest.mark.parametrize("prebuild", [True, False])
def test_request_body_is_built_and_encoded_before_the_clock_starts(prebuild, monkeypatch):
    """Neither the request's own clock nor another stream's stamps may include building a body
    (up front for runs that fit in memory, else in a thread)."""
    if not prebuild:
        monkeypatch.setattr("tuner.load.client.PREBUILD_MAX_TOKENS", 0)

    async def go():
        async with FakeOpenAIServer(FakeServerConfig(default=Behaviour(token_delay_s=0))) as srv:
            gen = SlowBody(srv.base_url, srv.model, progress=False, max_concurrency=1)
            return await gen.run(FixedWorkload(8, 2, 2))
    res = run(go())
    assert res.completed == 2
    assert all(o.ttft < 0.2 and o.latency < 0.2 for o in res.outcomes), [o.ttft for o in res.outcomes]


# ------------------------------------------------------------------ prompts


def test_prompt_bodies_never_start_alike():
    w = RandomWorkload(64, 4, num_prompts=1000, seed=0)
    firsts = [s.prompt[0] for s in w.requests()]
    assert len(set(firsts)) == 1000  # before: offset+index collided for ~14 of 1000
    warm = [s.prompt[0] for s in w.warmup_requests(50)]
    assert not set(warm) & set(firsts)


def test_prompt_bodies_distinct_beyond_the_vocabulary():
    w = FixedWorkload(6, 2, 300, vocab_size=120, reserved_ids=10)  # 110 ids, 300 prompts
    pairs = [tuple(s.prompt[:2]) for s in w.requests()]
    assert len(set(pairs)) == 300
    assert all(10 <= t < 120 for s in w.requests() for t in s.prompt)


def _args(**kw):
    base = dict(dataset_name="random", dataset_path=None, num_prompts=None, input_len=None, output_len=None,
                random_input_len=16, random_output_len=4, random_range_ratio="0.0", random_prefix_len=0,
                vocab_size=None, seed=0, timed_trace_chunk_hash_size=16, timed_trace_sec_multiplier=1.0,
                sharegpt_output_len=None, custom_output_len=256)
    base.update(kw)
    return argparse.Namespace(**base)


def test_trace_honours_num_prompts_and_seed(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("input_len,output_len\n" + "".join(f"{10 + i},3\n" for i in range(5)))
    w = build_workload(_args(dataset_name="trace", dataset_path=p, num_prompts=3, seed=1))
    assert w.num_prompts == 3 and w.lengths()[0] == [10, 11, 12]
    other = build_workload(_args(dataset_name="trace", dataset_path=p, num_prompts=3, seed=2))
    assert [s.prompt for s in w.requests()] != [s.prompt for s in other.requests()]
    assert build_workload(_args(dataset_name="trace", dataset_path=p)).num_prompts == 5
    with pytest.raises(ValueError, match="only 5 requests"):
        build_workload(_args(dataset_name="trace", dataset_path=p, num_prompts=6))


def test_vllm_timed_trace_format_with_shared_hash_blocks(tmp_path):
    p = tmp_path / "trace.jsonl"
    rows = [{"timestamp": 1000, "input_length": 40, "output_length": 5, "hash_ids": [7, 8, 9]},
            {"timestamp": 1500, "input_length": 36, "output_length": 6, "hash_ids": [7, 8]},
            {"timestamp": 2000, "input_length": 10, "output_length": 2}]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    w = build_workload(_args(dataset_name="timed_trace", dataset_path=p, timed_trace_sec_multiplier=0.001))
    reqs = w.requests()
    assert [r.prompt_len for r in reqs] == [40, 36, 10] and [len(r.prompt) for r in reqs] == [40, 36, 10]
    assert reqs[0].prompt[:32] == reqs[1].prompt[:32]      # hash ids 7, 8: two shared 16-token blocks
    assert reqs[0].prompt[32:40] != reqs[1].prompt[32:40]  # then each its own
    assert w.timestamps() == pytest.approx([0.0, 0.5, 1.0])
    assert [r.output_len for r in reqs] == [5, 6, 2]


# ------------------------------------------------------------------ ids and headers


def test_request_ids_differ_from_run_to_run_and_headers_follow_vllm(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-secret")

    async def go():
        async with FakeOpenAIServer(FakeServerConfig(default=Behaviour(token_delay_s=0))) as srv:
            ids = []
            for _ in range(2):
                gen = LoadGenerator(srv.base_url, srv.model, progress=False, headers={"x-extra": "1"})
                await gen.run(FixedWorkload(8, 2, 2))
                ids.append(gen.request_id_prefix)
            return ids, srv
    (a, b), srv = run(go())
    assert a != b and re.fullmatch(r"bench-[0-9a-f]{8}-", a)
    assert sorted(r.request_id for r in srv.log[:2]) == [f"{a}0", f"{a}1"]


def test_chat_backend_sends_messages_and_max_completion_tokens():
    gen = LoadGenerator("http://127.0.0.1:1", "m", api="openai-chat", extra_body={"temperature": 0.5})
    body = json.loads(gen.body(FixedWorkload(5, 7, 1).requests()[0]))
    assert gen.url.endswith("/v1/chat/completions")
    assert body["max_completion_tokens"] == 7 and "max_tokens" not in body and "prompt" not in body
    assert body["messages"][0]["role"] == "user" and body["messages"][0]["content"][0]["type"] == "text"
    assert body["temperature"] == 0.5 and body["ignore_eos"] is True
    with pytest.raises(ValueError, match="does not fit"):
        LoadGenerator("http://127.0.0.1:1", "m", api="openai-chat", endpoint="/v1/completions")


# ------------------------------------------------------------------ peak definitions


def _ok(start, latency):
    o = RequestOutcome(index=0, prompt_len=1, expected_output_len=1, start_time=start, ttft=latency,
                       success=True)
    o.latency = latency
    return o


def test_peak_concurrency_exact_versus_vllm_0_32_buckets():
    # back-to-back requests inside one second: never two at once, but vLLM 0.32.0's buckets count 3
    outs = [_ok(0.0, 0.3), _ok(0.3, 0.3), _ok(0.6, 0.3)]
    assert peak_output_and_concurrency(outs)[1] == 1
    assert peak_concurrency_1s_buckets(outs) == 3
