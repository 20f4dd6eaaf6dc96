"""The streaming client and its metrics, against the fake server and on hand-made records.

No assertion depends on wall-clock speed: aggregates are recomputed from the per-request lists,
and the only timing bounds used are causal ones (a response cannot arrive before the server has
slept through its injected delays).
"""

import asyncio
import json
import math

import numpy as np
import pytest

from tests.fake_openai_server import Behaviour, FakeOpenAIServer, FakeServerConfig
from tuner.load.client import LoadGenerator, SSELineSplitter, StreamRecorder, run_benchmark
from tuner.load.metrics import (
    RequestOutcome,
    compute_metrics,
    peak_output_and_concurrency,
    percentile_key,
    validate_goodput_slos,
)
from tuner.load.trace import TraceWorkload
from tuner.load.workload import FixedWorkload, RandomWorkload

PCTS = (50, 90, 99)

# verbatim shape of a genuine vLLM stream (docs/real-vllm-cpu.md §6), shortened
VLLM_STREAM = (
    b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,'
    b'"text":" _","logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'
    b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,'
    b'"text":" given \xc3\xa9","logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'
    b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,'
    b'"text":"","logprobs":null,"finish_reason":"length","stop_reason":null}]}\n\n'
    b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[],'
    b'"usage":{"prompt_tokens":6,"total_tokens":14,"completion_tokens":8},"system_fingerprint":"x"}\n\n'
    b"data: [DONE]\n\n"
)


def run(coro, timeout=60):
    # the timeout only guards against a hang; no test asserts on speed
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def bench(config, workload, **kw):
    kw.setdefault("progress", False)
    kw.setdefault("request_id_prefix", "t-")
    async with FakeOpenAIServer(config) as srv:
        res = await run_benchmark(srv.base_url, srv.model, workload, **kw)
        return res, srv


def recompute(values, name):
    v = list(values) or [0]
    out = {f"mean_{name}_ms": np.mean(v) * 1000, f"median_{name}_ms": np.median(v) * 1000,
           f"std_{name}_ms": np.std(v) * 1000}
    out.update({f"p{p}_{name}_ms": np.percentile(v, p) * 1000 for p in PCTS})
    return out


# ------------------------------------------------------------------ SSE parsing (offline)


def lines_of(stream: bytes, cuts):
    sp, out, prev = SSELineSplitter(), [], 0
    for c in list(cuts) + [len(stream)]:
        out += sp.feed(stream[prev:c])
        prev = c
    return out + sp.finish()


def test_sse_splitter_is_robust_to_every_split_point():
    whole = lines_of(VLLM_STREAM, [])
    assert [ln for ln in whole if ln][-1] == "data: [DONE]"
    assert " given é" in whole[2]  # UTF-8 decoded
    for cut in range(1, len(VLLM_STREAM)):
        assert lines_of(VLLM_STREAM, [cut]) == whole
    rng = np.random.default_rng(0)
    for _ in range(50):  # many random multi-way splits, including inside the é bytes
        cuts = sorted(rng.choice(np.arange(1, len(VLLM_STREAM)), size=12, replace=False).tolist())
        assert lines_of(VLLM_STREAM, cuts) == whole


def test_sse_splitter_crlf_and_unterminated_last_line():
    assert lines_of(VLLM_STREAM.replace(b"\n", b"\r\n"), [37]) == lines_of(VLLM_STREAM, [])
    sp = SSELineSplitter()
    assert sp.feed(b"data: a\ndata: [DO") == ["data: a"]
    assert sp.finish() == ["data: [DO"] and sp.finish() == []


def feed(rec, lines_with_times):
    for line, ts in lines_with_times:
        rec.on_line(line, ts)


def test_recorder_timing_definitions_with_synthetic_clock():
    tok = lambda text: 'data: {"choices":[{"index":0,"text":"' + text + '"}]}'  # noqa: E731
    rec = StreamRecorder(start=10.0)
    feed(rec, [(": ping comment", 10.05), ("", 10.05), ("event: x", 10.06),
               (tok(""), 10.1),          # empty text still counts as the first token chunk
               (tok(" a"), 10.3), (tok(" b c"), 10.35),
               ('data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":9}}', 10.9),
               ("data: [DONE]", 11.0)])
    out = RequestOutcome(index=0, prompt_len=4, expected_output_len=9)
    out.absorb(rec)
    assert out.ttft == pytest.approx(0.1)
    assert out.itl == pytest.approx([0.2, 0.05])  # chunk level: one gap per chunk
    assert out.latency == pytest.approx(0.35)     # usage chunk and [DONE] excluded
    assert (out.output_tokens, out.output_tokens_source, out.prompt_len) == (9, "usage", 5)
    assert out.chunks == 3 and out.done_received and out.generated_text == " a b c"


@pytest.mark.parametrize("keep_text", [True, False])
def test_a_reasoning_models_chat_chunks_are_timed_and_only_the_answer_kept(keep_text):
    """Qwen3, DeepSeek-R1, gpt-oss behind a reasoning parser: the thinking streams in delta.reasoning (vLLM
    0.32; reasoning_content before) with content null. vLLM's client times those chunks as tokens (the
    server is decoding) and keeps only content as text; so do we."""
    chunk = lambda delta: "data: " + json.dumps({"choices": [{"index": 0, "delta": delta}]})  # noqa: E731
    rec = StreamRecorder(start=0.0, kind="chat", keep_text=keep_text)
    for line, ts in [(chunk({"role": "assistant", "content": ""}), 1.0),
                     (chunk({"reasoning": "Let me", "content": None}), 1.5),
                     (chunk({"reasoning_content": " think", "content": None}), 2.0),
                     (chunk({"content": "Paris"}), 2.5),
                     ('data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}', 2.6),
                     ("data: [DONE]", 2.7)]:
        rec.on_lines([line.encode()], ts)  # the client's path: unparsed token chunks when no text is kept
    out = RequestOutcome(index=0, prompt_len=7, expected_output_len=3)
    out.absorb(rec)
    assert out.ttft == pytest.approx(1.0) and out.itl == pytest.approx([0.5, 0.5, 0.5])
    assert out.latency == pytest.approx(2.5) and out.output_tokens == 3
    assert out.generated_text == ("Paris" if keep_text else "")


def test_recorder_without_usage_counts_chunks_and_rejects_bad_json():
    rec = StreamRecorder(start=0.0)
    feed(rec, [('data:{"choices":[{"text":"x"}]}', 1.0), ('data: {"choices":[{"text":"y"}]}', 2.0)])
    out = RequestOutcome(index=0, prompt_len=4, expected_output_len=9)
    out.absorb(rec)
    assert (out.output_tokens, out.output_tokens_source, out.prompt_len) == (2, "chunks", 4)
    with pytest.raises(ValueError, match="invalid JSON"):
        rec.on_line('data: {"choices": [', 3.0)


# ------------------------------------------------------------------ metrics (offline)


def ok(i, start, ttft, itl, out_tokens, prompt=10):
    o = RequestOutcome(index=i, prompt_len=prompt, expected_output_len=out_tokens, start_time=start,
                       ttft=ttft, itl=list(itl), output_tokens=out_tokens, success=True)
    o.latency = ttft + sum(itl)
    return o


def bad(i):
    o = RequestOutcome(index=i, prompt_len=99, expected_output_len=5)
    o.fail("http 500", "HTTP 500")
    return o


def test_compute_metrics_by_hand():
    outs = [ok(0, 0.0, 0.1, [0.02, 0.02, 0.04], 4),   # tpot (0.18-0.1)/3
            ok(1, 0.5, 0.3, [], 1),                    # 1 token: no TPOT sample, TPOT 0 for goodput
            ok(2, 1.2, 0.2, [0.5], 6, prompt=20),      # bundled chunks: tpot (0.7-0.2)/5 = 0.1
            bad(3)]
    m = compute_metrics(outs, duration=2.0, percentiles=PCTS, goodput_slos={"ttft": 200, "tpot": 50})
    assert (m["completed"], m["failed"]) == (3, 1)
    assert (m["total_input_tokens"], m["total_output_tokens"]) == (40, 11)  # failed excluded
    assert m["request_throughput"] == 1.5 and m["output_throughput"] == 5.5
    assert m["total_token_throughput"] == 25.5
    tpots = [0.08 / 3, 0.1]
    assert m["mean_tpot_ms"] == pytest.approx(np.mean(tpots) * 1000)
    assert m["p99_tpot_ms"] == pytest.approx(np.percentile(tpots, 99) * 1000)
    assert m["mean_itl_ms"] == pytest.approx(np.mean([0.02, 0.02, 0.04, 0.5]) * 1000)
    assert m["std_ttft_ms"] == pytest.approx(np.std([0.1, 0.3, 0.2]) * 1000)
    # good: #0 (ttft 100 ms, tpot 26.7 ms) and #2 at exactly the ttft SLO? no: 200 ms <= 200 ok but
    # tpot 100 ms > 50; #1 ttft 300 > 200. So 1 good request.
    assert m["request_goodput"] == 0.5
    assert compute_metrics(outs, 2.0, PCTS, {"ttft": 300})["request_goodput"] == 1.5  # inclusive
    assert compute_metrics(outs, 2.0, PCTS, {"tpot": 0})["request_goodput"] == 0.5  # the 1-token one
    assert compute_metrics(outs, 2.0, PCTS, {"e2el": 190})["request_goodput"] == 0.5
    assert compute_metrics(outs, 2.0, PCTS)["request_goodput"] is None


def test_empty_statistics_are_zero_like_vllm():
    m = compute_metrics([bad(0)], duration=1.0, percentiles=(99.9,))
    assert m["completed"] == 0 and m["mean_ttft_ms"] == 0.0 and m["p99.9_itl_ms"] == 0.0
    assert m["max_output_tokens_per_s"] == 0.0 and m["max_concurrent_requests"] == 0
    assert compute_metrics([], duration=0.0)["request_throughput"] == 0.0
    assert percentile_key(99) == "99" and percentile_key(99.9) == "99.9" and percentile_key(50.0) == "50"


def test_peak_output_rate_counts_chunk_arrivals_per_second_bucket():
    outs = [ok(0, 0.0, 0.5, [0.1, 0.1, 0.1, 0.5], 50),  # chunks at .5 .6 .7 .8 1.3
            ok(1, 0.2, 0.7, [0.05], 2),                  # chunks at .9 .95
            ok(2, 1.0, 0.1, [0.1], 2)]                   # chunks at 1.1 1.2
    # bucket 0 holds 6 chunk arrivals; vLLM counts chunks, not the 50 tokens they carry
    assert peak_output_and_concurrency(outs)[0] == 6.0


def test_peak_concurrency_sweep_line_half_open():
    outs = [ok(0, 0.0, 1.0, [], 1), ok(1, 1.0, 1.0, [], 1),  # touching intervals do not overlap
            ok(2, 0.5, 0.2, [], 1), ok(3, 0.6, 2.0, [], 1)]
    assert peak_output_and_concurrency(outs)[1] == 3  # at t=0.6: #0, #2, #3
    assert peak_output_and_concurrency(outs[:2])[1] == 1


def test_goodput_slo_validation():
    assert validate_goodput_slos({"ttft": 100, "e2el": 5}) == {"ttft": 100.0, "e2el": 5.0}
    with pytest.raises(ValueError, match="itl"):
        validate_goodput_slos({"itl": 5})
    with pytest.raises(ValueError, match="non-negative"):
        validate_goodput_slos({"ttft": -1})


# ------------------------------------------------------------------ against the fake server


def test_usage_tokens_bundled_and_omitted_chunks_and_request_body():
    # 3 tokens per chunk, tokens 0-2 and 6 decode to "" and empty chunks are not sent (vLLM)
    beh = Behaviour(token_delay_s=0.001, tokens_per_chunk=3, empty_text_tokens=frozenset({0, 1, 2, 6}),
                    omit_empty_chunks=True)
    w = FixedWorkload(17, 10, 4, vocab_size=1000)
    res, srv = run(bench(FakeServerConfig(default=beh, vocab_size=1000), w, max_concurrency=2))
    j = res.to_json()
    assert j["completed"] == 4 and j["failed"] == 0
    assert j["output_lens"] == [10] * 4 and j["total_output_tokens"] == 40  # from usage
    assert j["input_lens"] == [17] * 4 and j["total_input_tokens"] == 68
    # chunks [0,1,2] omitted; [3,4,5] [6,7,8] [9] sent -> 3 chunks, 2 gaps per request
    for rec in srv.log:
        assert rec.chunk_tokens == [3, 3, 1]
    assert [len(x) for x in j["itls"]] == [2] * 4 and j["tuner_token_chunks"] == 12
    assert j["tuner_output_tokens_source"] == {"usage": 4}
    body = srv.log[0].body
    assert body["max_tokens"] == 10 and body["ignore_eos"] is True and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert "temperature" not in body  # like vLLM (since 0.11): the server's default unless --temperature
    assert body["model"] == "fake-model"
    assert all(isinstance(t, int) and 100 <= t < 1000 for t in body["prompt"])


def test_prompt_lengths_reach_the_server_exactly():
    w = RandomWorkload(40, 6, 0.5, num_prompts=30, seed=4, prefix_len=3, vocab_size=1000)
    res, srv = run(bench(FakeServerConfig(default=Behaviour(token_delay_s=0), vocab_size=1000), w,
                         max_concurrency=8))
    sent = {r.request_id: (r.prompt_len, r.max_tokens) for r in srv.log}
    for spec in w.requests():
        assert sent[f"t-{spec.index}"] == (spec.prompt_len, spec.output_len)
    assert res.to_json()["input_lens"] == [s.prompt_len for s in w.requests()]


def test_aggregates_equal_numpy_recomputation_from_per_request_lists():
    beh = Behaviour(token_delay_s=0.002, tokens_per_chunk=2)
    cfg = FakeServerConfig(default=beh, by_prompt_len={31: Behaviour(http_status=500)})
    w = TraceWorkload(input_lens=[30, 31, 32, 33, 34, 35, 36, 37], output_lens=[1, 2, 3, 4, 5, 6, 7, 9])
    res, _ = run(bench(cfg, w, max_concurrency=3))
    j = json.loads(res.dumps())  # survives a JSON round trip
    good = [i for i, e in enumerate(j["errors"]) if not e]
    assert len(good) == j["completed"] == 7 and j["failed"] == 1
    ttfts = [j["ttfts"][i] for i in good]
    lats = [j["latencies"][i] for i in good]
    outs = [j["output_lens"][i] for i in good]
    itls = [g for i in good for g in j["itls"][i]]
    tpots = [(lat - t) / (n - 1) for lat, t, n in zip(lats, ttfts, outs) if n > 1]
    expected = {**recompute(ttfts, "ttft"), **recompute(lats, "e2el"), **recompute(itls, "itl"),
                **recompute(tpots, "tpot")}
    for k, v in expected.items():
        assert j[k] == pytest.approx(v, rel=1e-12, abs=1e-12), k
    assert j["request_throughput"] == pytest.approx(7 / j["duration"])
    assert j["output_throughput"] == pytest.approx(sum(outs) / j["duration"])
    assert j["total_token_throughput"] == pytest.approx((sum(outs) + 30 + sum(range(32, 38))) / j["duration"])
    # latency = ttft + sum of chunk gaps, per request (last token chunk, not usage/[DONE])
    for i in good:
        assert j["latencies"][i] == pytest.approx(j["ttfts"][i] + sum(j["itls"][i]), abs=1e-9)
        assert len(j["itls"][i]) == math.ceil(j["output_lens"][i] / 2) - 1  # 2 tokens per chunk


def test_tpot_formula_and_causal_bounds_on_a_controlled_request():
    beh = Behaviour(token_delay_s=0.004, first_token_delay_s=0.02)
    res, srv = run(bench(FakeServerConfig(default=beh), FixedWorkload(8, 6, 1)))
    o = res.outcomes[0]
    assert o.success and o.output_tokens == 6 and len(o.itl) == 5
    assert res.metrics["mean_tpot_ms"] == pytest.approx((o.latency - o.ttft) / 5 * 1000)
    # the client cannot see a chunk before the server slept for it
    assert o.ttft >= 0.02 + 0.004 and o.latency >= 0.02 + 6 * 0.004
    server_gaps = np.diff(srv.log[0].chunk_times)
    assert len(server_gaps) == len(o.itl)


def test_without_usage_chunk_tokens_are_counted_from_chunks():
    beh = Behaviour(token_delay_s=0, send_usage=False, empty_text_tokens=frozenset({2}),
                    omit_empty_chunks=True)
    res, _ = run(bench(FakeServerConfig(default=beh), FixedWorkload(5, 6, 3)))
    j = res.to_json()
    assert j["output_lens"] == [5, 5, 5]  # one token's chunk was never sent: undercount, as documented
    assert j["tuner_output_tokens_source"] == {"chunks": 3}


def test_failures_are_counted_described_and_excluded():
    cfg = FakeServerConfig(default=Behaviour(token_delay_s=0.001), by_prompt_len={
        11: Behaviour(http_status=500),
        12: Behaviour(token_delay_s=0.001, abort_after_chunks=2),
        13: Behaviour(hang_s=30.0),
        14: Behaviour(token_delay_s=0.001, send_usage=False, send_done=False, abort_after_chunks=0),
    })
    w = TraceWorkload(input_lens=[10, 11, 12, 13, 14, 10], output_lens=[4] * 6)
    res, srv = run(bench(cfg, w, request_timeout_s=2.0))
    j = res.to_json()
    assert (j["completed"], j["failed"]) == (2, 4)
    errs = j["errors"]
    assert errs[0] == "" and errs[5] == ""
    assert errs[1].startswith("HTTP 500") and "injected failure" in errs[1]
    assert errs[2].startswith("ClientPayloadError")
    assert errs[3].startswith("timeout")
    assert errs[4]  # connection dropped before any token chunk
    assert j["output_lens"] == [4, 0, 0, 0, 0, 4] and j["total_input_tokens"] == 20
    f = j["tuner_failures"]
    assert f["count"] == 4 and f["by_reason"]["http 500"] == 1 and f["by_reason"]["timeout"] == 1
    assert f["by_reason"]["ClientPayloadError"] >= 1 and sum(f["by_reason"].values()) == 4
    assert "injected failure" in f["examples"]["http 500"][0]
    # a partial stream is not a success even though it carried token chunks
    assert res.outcomes[2].chunks == 2 and not res.outcomes[2].success
    assert j["mean_e2el_ms"] == pytest.approx(np.mean([j["latencies"][0], j["latencies"][5]]) * 1000)


def test_vocab_mismatch_is_reported_not_raised():
    w = FixedWorkload(20, 2, 3)  # ids up to 32000
    res, _ = run(bench(FakeServerConfig(vocab_size=1000), w))
    assert res.completed == 0 and res.failed == 3
    assert "out of vocabulary" in res.outcomes[0].error and "HTTP 400" in res.outcomes[0].error
    res, _ = run(bench(FakeServerConfig(vocab_size=1000), FixedWorkload(20, 2, 3, vocab_size=1000)))
    assert res.completed == 3


def test_goodput_against_slos_on_a_live_run():
    cfg = FakeServerConfig(default=Behaviour(token_delay_s=0.001),
                           by_prompt_len={20: Behaviour(token_delay_s=0.001, first_token_delay_s=0.3)})
    w = TraceWorkload(input_lens=[10, 20, 10, 20, 10], output_lens=[3, 3, 1, 3, 3])
    slo = {"ttft": 250.0, "tpot": 1000.0}
    res, _ = run(bench(cfg, w, goodput_slos=slo))
    j = res.to_json()
    good = sum(1 for t, lat, n in zip(j["ttfts"], j["latencies"], j["output_lens"])
               if t <= 0.25 and ((lat - t) / (n - 1) if n > 1 else 0.0) <= 1.0)
    assert j["request_goodput"] == pytest.approx(good / j["duration"])
    assert good <= 3  # the two slow-prefill requests cannot meet 250 ms (they slept 300 ms)
    assert j["tuner_goodput_slos_ms"] == slo
    res, _ = run(bench(cfg, w, goodput_slos={"e2el": 1e9}))
    assert res.to_json()["request_goodput"] == pytest.approx(res.to_json()["request_throughput"])
    res, _ = run(bench(cfg, w))
    assert res.to_json()["request_goodput"] is None


def test_concurrency_cap_queue_times_and_vllm_fields():
    w = FixedWorkload(16, 5, 12)
    res, srv = run(bench(FakeServerConfig(default=Behaviour(token_delay_s=0.002)), w, max_concurrency=3))
    j = res.to_json()
    assert srv.max_in_flight <= 3 and j["max_concurrent_requests"] <= 3
    assert all(q >= 0 for q in j["queue_times"])
    assert j["max_concurrency"] == 3 and j["request_rate"] == "inf"
    assert "mean_client_queue_time_ms" in j and "mean_e2el_including_client_queue_ms" not in j
    incl = [lat + q for lat, q in zip(j["latencies"], j["queue_times"])]
    assert j["tuner_e2el_including_client_queue"]["mean_e2el_including_client_queue_ms"] == \
        pytest.approx(np.mean(incl) * 1000)
    for key in ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
                "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
                "max_output_tokens_per_s", "max_concurrent_requests", "input_lens", "output_lens",
                "ttfts", "itls", "latencies", "start_times", "queue_times", "generated_texts", "errors",
                "date", "backend", "model_id", "num_prompts", "burstiness",
                *(f"{s}_{m}_ms" for s in ("mean", "median", "std", "p50", "p90", "p99")
                  for m in ("ttft", "tpot", "itl", "e2el"))):
        assert key in j, key
    slim = res.to_json(detailed=False)
    assert "itls" not in slim and "latencies" in slim and "queue_times" in slim
    json.dumps(j, allow_nan=False)


def test_request_rate_dispatch_follows_the_plan():
    w = FixedWorkload(8, 2, 10)
    res, _ = run(bench(FakeServerConfig(default=Behaviour(token_delay_s=0)), w, request_rate=200.0,
                       max_concurrency=4))
    j = res.to_json()
    assert j["request_rate"] == 200.0 and j["tuner_arrivals"]["mode"] == "gamma"
    assert "mean_e2el_including_client_queue_ms" in j
    offs = [o.scheduled_offset for o in res.outcomes]
    assert offs[-1] == 10 / 200.0
    assert all(o.dispatch_offset >= o.scheduled_offset for o in res.outcomes)  # never early
    assert j["duration"] >= offs[-1]


def test_trace_timestamps_drive_dispatch(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps({"input_len": 5, "output_len": 2, "timestamp": 7 + t}) + "\n"
                         for t in (0.0, 0.05, 0.05, 0.1)))
    res, _ = run(bench(FakeServerConfig(default=Behaviour(token_delay_s=0)), TraceWorkload.from_file(p)))
    assert [o.scheduled_offset for o in res.outcomes] == pytest.approx([0.0, 0.05, 0.05, 0.1])
    assert all(o.dispatch_offset >= o.scheduled_offset for o in res.outcomes)
    assert res.to_json()["tuner_arrivals"]["mode"] == "trace"


def test_warmup_is_sent_but_not_counted():
    w = FixedWorkload(9, 3, 4)
    res, srv = run(bench(FakeServerConfig(default=Behaviour(token_delay_s=0)), w, warmup_requests=3))
    ids = [r.request_id for r in srv.log]
    assert sorted(ids[:3]) == ["t-warmup-0", "t-warmup-1", "t-warmup-2"]
    assert sorted(ids[3:], key=lambda x: int(x[2:])) == [f"t-{i}" for i in range(4)]
    j = res.to_json()
    assert j["num_prompts"] == 4 and j["completed"] == 4
    assert j["tuner_warmup"]["requests"] == 3 and j["tuner_warmup"]["failed"] == 0
    warm_prompts = {tuple(r.body["prompt"]) for r in srv.log[:3]}
    assert not warm_prompts & {tuple(r.body["prompt"]) for r in srv.log[3:]}


def test_split_writes_and_crlf_over_the_network():
    beh = Behaviour(token_delay_s=0.001, split_writes=True, crlf=True, tokens_per_chunk=2)
    res, _ = run(bench(FakeServerConfig(default=beh), FixedWorkload(6, 5, 3)))
    assert res.completed == 3 and res.to_json()["output_lens"] == [5, 5, 5]
    assert [len(o.itl) for o in res.outcomes] == [2, 2, 2]
    assert res.outcomes[0].generated_text == " t0 t1 t2 t3 t4"
    assert res.to_json()["tuner_streams_without_done"] == 0


def test_cancel_all_closes_streams_and_returns_partial_result():
    async def main():
        cfg = FakeServerConfig(default=Behaviour(token_delay_s=0.05))
        async with FakeOpenAIServer(cfg) as srv:
            gen = LoadGenerator(srv.base_url, srv.model, max_concurrency=2, progress=False)
            task = asyncio.create_task(gen.run(FixedWorkload(10, 1000, 5)))
            while len(srv.log) < 2:  # both streams open
                await asyncio.sleep(0.01)
            await gen.cancel_all()
            res = await task
            for _ in range(200):  # let the server notice the disconnects
                if all(r.disconnected for r in srv.log):
                    break
                await asyncio.sleep(0.01)
            return res, srv

    res, srv = run(main(), timeout=30)
    assert res.cancelled and res.completed == 0 and res.failed == 5
    # closed loop: all 5 dispatched at t=0, 2 streaming, 3 waiting for a concurrency slot
    assert res.failure_summary()["by_reason"] == {"cancelled": 5}
    errors = [o.error for o in res.outcomes]
    assert errors.count("cancelled while in flight") == 2
    assert errors.count("cancelled while waiting for a concurrency slot") == 3
    assert len(srv.log) == 2 and all(r.disconnected and not r.finished for r in srv.log)
    json.dumps(res.to_json(), allow_nan=False)


def test_cancel_all_before_paced_requests_are_due_marks_them_not_sent():
    async def main():
        async with FakeOpenAIServer(FakeServerConfig(default=Behaviour(token_delay_s=0.05))) as srv:
            gen = LoadGenerator(srv.base_url, srv.model, progress=False)
            # 20 requests at 1 req/s: the last is due 20 s after the start
            task = asyncio.create_task(gen.run(FixedWorkload(10, 1000, 20), request_rate=1.0))
            while not srv.log:
                await asyncio.sleep(0.01)
            await gen.cancel_all()
            return await task

    res = run(main(), timeout=30)
    reasons = res.failure_summary()["by_reason"]
    assert res.cancelled and res.completed == 0 and reasons["cancelled"] >= 1
    assert reasons["cancelled"] + reasons["not sent"] == 20
    assert all(not o.sent for o in res.outcomes if o.failure_reason == "not sent")


def test_cancelling_run_benchmark_task_closes_streams():
    async def main():
        async with FakeOpenAIServer(FakeServerConfig(default=Behaviour(token_delay_s=0.05))) as srv:
            task = asyncio.create_task(run_benchmark(srv.base_url, srv.model, FixedWorkload(10, 1000, 3),
                                                     progress=False))
            while len(srv.log) < 3:
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            for _ in range(200):
                if all(r.disconnected for r in srv.log):
                    break
                await asyncio.sleep(0.01)
            return srv

    srv = run(main(), timeout=30)
    assert len(srv.log) == 3 and all(r.disconnected and not r.finished for r in srv.log)


def test_progress_bar_path_runs(capsys):
    res, _ = run(bench(FakeServerConfig(default=Behaviour(token_delay_s=0)), FixedWorkload(4, 2, 3),
                       progress=True))
    assert res.completed == 3
    assert capsys.readouterr().out == ""  # the bar goes to stderr, stdout stays clean


def test_bad_arguments_fail_before_any_request():
    with pytest.raises(ValueError, match="http"):
        LoadGenerator("127.0.0.1:8000", "m")
    with pytest.raises(ValueError, match="max_concurrency"):
        LoadGenerator("http://127.0.0.1:1", "m", max_concurrency=0)
    with pytest.raises(ValueError, match="goodput"):
        run(run_benchmark("http://127.0.0.1:1", "m", FixedWorkload(1, 1, 1), goodput_slos={"x": 1},
                          progress=False))


def test_a_cancelled_run_does_not_wait_for_a_probe_in_flight():
    """--probe-request-rate: a probe the server holds (60 s here) is cancelled with the run, not awaited;
    the run's timeout (30 s) would fail the test if it were."""
    async def main():
        cfg = FakeServerConfig(default=Behaviour(token_delay_s=0.05), accept_text=True,
                               by_prompt_len={1: Behaviour(hang_s=60)})  # the probe ("Hi", one token) hangs
        async with FakeOpenAIServer(cfg) as srv:
            gen = LoadGenerator(srv.base_url, srv.model, max_concurrency=2, progress=False)
            task = asyncio.create_task(gen.run(FixedWorkload(10, 1000, 5), probe_rate=5))
            while not any(r.prompt_len == 1 for r in srv.log):  # the probe is in flight
                await asyncio.sleep(0.01)
            await gen.cancel_all()
            return await task

    res = run(main(), timeout=30)
    assert res.cancelled and res.probes == {}  # no probe finished: none reported, as vLLM reports none
