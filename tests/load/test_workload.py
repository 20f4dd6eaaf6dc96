"""Workloads: vLLM range-ratio lengths, exact token-id prompts, arrival processes, trace files."""

import json
import math

import numpy as np
import pytest

from tuner.load.arrivals import gamma_send_offsets, plan_requests
from tuner.load.trace import TraceFormatError, TraceWorkload
from tuner.load.workload import RANGE_RATIO_CONVENTION, FixedWorkload, RandomWorkload, TokenIdSpace

# ------------------------------------------------------------------ random lengths


@pytest.mark.parametrize(
    "inp,out,r,expected",
    [
        # hand-computed from spec §1: input [floor(in(1-r)), ceil(in(1+r))],
        # output [max(1, floor(out(1-r))), max(1, ceil(out(1+r)))]
        (1000, 100, 0.25, ((750, 1250), (75, 125))),
        (101, 3, 0.3, ((70, 132), (2, 4))),  # 70.7 -> 70, 131.3 -> 132; 2.1 -> 2, 3.9 -> 4
        (10, 3, 0.85, ((1, 19), (1, 6))),  # output floor(0.45) = 0 -> clamped to 1
        (128, 1, 0.5, ((64, 192), (1, 2))),
        (512, 64, 0.0, ((512, 512), (64, 64))),
    ],
)
def test_range_ratio_bounds_are_hit_exactly(inp, out, r, expected):
    w = RandomWorkload(inp, out, r, num_prompts=20000, seed=7)
    assert w.bounds() == expected
    in_lens, out_lens = w.lengths()
    (il, ih), (ol, oh) = expected
    # many draws reach both documented ends, and never leave them (both ends inclusive)
    assert (min(in_lens), max(in_lens)) == (il, ih)
    assert (min(out_lens), max(out_lens)) == (ol, oh)


def test_lengths_follow_vllm_rng_order():
    # vLLM: rng = default_rng(seed); input lens, then output lens, then offsets, then prefix
    w = RandomWorkload(1024, 128, 0.5, num_prompts=50, seed=3)
    rng = np.random.default_rng(3)
    assert w.lengths()[0] == rng.integers(512, 1536 + 1, size=50).tolist()
    assert w.lengths()[1] == rng.integers(64, 192 + 1, size=50).tolist()


def test_same_seed_same_workload_other_seed_differs():
    a = RandomWorkload(300, 50, 0.4, num_prompts=40, seed=11, prefix_len=5)
    b = RandomWorkload(300, 50, 0.4, num_prompts=40, seed=11, prefix_len=5)
    c = RandomWorkload(300, 50, 0.4, num_prompts=40, seed=12, prefix_len=5)
    assert a.lengths() == b.lengths()
    assert [r.prompt for r in a.requests()] == [r.prompt for r in b.requests()]
    assert a.lengths() != c.lengths()
    assert a.requests()[0].prompt == a.requests()[0].prompt  # requests() is repeatable


@pytest.mark.parametrize("bad", [1.0, 1.5, -0.1])
def test_range_ratio_outside_unit_interval_is_a_clear_error(bad):
    with pytest.raises(ValueError, match=r"\[0, 1\).*vllm-range-ratio"):
        RandomWorkload(100, 10, bad, num_prompts=5, seed=0)


def test_empty_prompt_possible_is_rejected():
    with pytest.raises(ValueError, match="empty prompt"):
        RandomWorkload(1, 10, 0.5, num_prompts=5, seed=0)
    # Float arithmetic as in vLLM: 10 * (1 - 0.9) = 0.9999999999999998, floor -> 0.
    with pytest.raises(ValueError, match="empty prompt"):
        RandomWorkload(10, 3, 0.9, num_prompts=5, seed=0)
    assert RandomWorkload(10, 3, 0.9, num_prompts=5, seed=0, prefix_len=1).bounds()[0] == (0, 19)


def test_description_records_convention_and_is_json():
    w = RandomWorkload(200, 20, 0.1, num_prompts=10, seed=1, prefix_len=8)
    d = w.describe()
    assert d["range_ratio_convention"] == RANGE_RATIO_CONVENTION == "vllm-range-ratio (PR #16126)"
    # 200 * 1.1 == 220.00000000000003 in floats, so ceil gives 221 -- exactly what vLLM computes
    assert d["input_len_bounds"] == [180, 221] and d["output_len_bounds"] == [18, 22]
    assert d["prompt_format"] == "token-ids"
    assert d["prompt_len_stats"]["min"] == 8 + min(w.lengths()[0])
    json.dumps(d, allow_nan=False)
    for other in (FixedWorkload(5, 5, 2), TraceWorkload([3], [4])):
        json.dumps(other.describe(), allow_nan=False)


# ------------------------------------------------------------------ prompts


def test_prompts_have_exact_lengths_and_shared_prefix():
    w = RandomWorkload(64, 16, 0.5, num_prompts=200, seed=5, prefix_len=10)
    in_lens, out_lens = w.lengths()
    reqs = w.requests()
    prefix = reqs[0].prompt[:10]
    for r, n_in, n_out in zip(reqs, in_lens, out_lens):
        assert len(r.prompt) == r.prompt_len == 10 + n_in
        assert r.output_len == n_out
        assert r.prompt[:10] == prefix
        assert all(type(t) is int for t in r.prompt)  # JSON ints, never numpy scalars
    # distinct requests do not share their bodies (no accidental prefix-cache hits)
    assert len({tuple(r.prompt[10:20]) for r in reqs}) > 190


@pytest.mark.parametrize("vocab,reserved", [(1000, 100), (32000, 100), (300, 0), (50, 10)])
def test_ids_stay_inside_the_allowed_range_even_when_prompt_exceeds_vocab(vocab, reserved):
    w = FixedWorkload(5000, 4, 3, vocab_size=vocab, reserved_ids=reserved)
    for r in w.requests():
        assert len(r.prompt) == 5000
        assert min(r.prompt) >= reserved and max(r.prompt) < vocab


def test_random_prefix_respects_small_vocab():
    w = RandomWorkload(20, 4, 0.0, num_prompts=5, seed=0, prefix_len=500, vocab_size=1000)
    for r in w.requests():
        assert 100 <= min(r.prompt) and max(r.prompt) < 1000


def test_token_space_validation():
    with pytest.raises(ValueError, match="vocab_size"):
        TokenIdSpace(vocab_size=100, reserved_ids=100)
    with pytest.raises(ValueError):
        TokenIdSpace(vocab_size=100, reserved_ids=-1)
    assert TokenIdSpace(110, 100).run(offset=3, index=0, length=12) == [103, 104, 105, 106, 107, 108, 109,
                                                                        100, 101, 102, 103, 104]


def test_warmup_prompts_same_lengths_different_ids():
    w = RandomWorkload(50, 10, 0.5, num_prompts=4, seed=2, prefix_len=4)
    measured = w.requests()
    warm = w.warmup_requests(6)
    assert [r.prompt_len for r in warm] == [measured[i % 4].prompt_len for i in range(6)]
    assert [r.output_len for r in warm] == [measured[i % 4].output_len for i in range(6)]
    measured_prompts = {tuple(r.prompt) for r in measured}
    assert not any(tuple(r.prompt) in measured_prompts for r in warm)
    assert all(r.prompt[:4] == measured[0].prompt[:4] for r in warm)  # shared prefix kept
    assert w.warmup_requests(0) == []


def test_fixed_workload():
    w = FixedWorkload(128, 32, 7)
    assert w.num_prompts == 7
    assert [(r.prompt_len, r.output_len) for r in w.requests()] == [(128, 32)] * 7
    with pytest.raises(ValueError):
        FixedWorkload(0, 32, 7)


# ------------------------------------------------------------------ arrivals


@pytest.mark.parametrize("n,rate,burst", [(1000, 10.0, 1.0), (7, 0.5, 0.3), (1, 3.0, 4.0), (250, 123.4, 2.0)])
def test_gamma_rescaling_puts_last_request_at_n_over_rate(n, rate, burst):
    t = gamma_send_offsets(n, rate, burst, np.random.default_rng(0))
    assert len(t) == n
    assert t[-1] == n / rate  # exactly, as vLLM's rescaling intends
    assert all(b >= a for a, b in zip(t, t[1:]))
    assert t[0] > 0  # the first request also waits one gap, as in vLLM


def test_gamma_matches_vllm_formula_before_rescaling():
    rate, burst, n = 4.0, 0.5, 100
    t = gamma_send_offsets(n, rate, burst, np.random.default_rng(42))
    gaps = np.random.default_rng(42).gamma(shape=burst, scale=1 / (rate * burst), size=n)
    cum = np.cumsum(gaps)
    np.testing.assert_allclose(t, cum * (n / rate) / cum[-1], rtol=1e-12)


def test_burstiness_shapes_the_gap_spread():
    # Gamma(k, .) has coefficient of variation 1/sqrt(k): Poisson ~1, burstiness 4 ~0.5.
    for burst, cv_expected in ((1.0, 1.0), (4.0, 0.5), (0.25, 2.0)):
        t = np.array(gamma_send_offsets(50000, 100.0, burst, np.random.default_rng(1)))
        gaps = np.diff(np.concatenate([[0.0], t]))
        assert gaps.mean() == pytest.approx(1 / 100.0, rel=1e-9)
        assert gaps.std() / gaps.mean() == pytest.approx(cv_expected, rel=0.05)


def test_constant_and_infinite_rates():
    assert gamma_send_offsets(4, math.inf) == [0.0] * 4
    assert gamma_send_offsets(4, 2.0, math.inf) == pytest.approx([0.5, 1.0, 1.5, 2.0])
    assert gamma_send_offsets(0, 2.0) == []
    for bad in (dict(request_rate=0.0), dict(request_rate=-1.0), dict(request_rate=1.0, burstiness=0.0)):
        with pytest.raises(ValueError):
            gamma_send_offsets(3, **bad)


def test_plan_requests_modes():
    w = RandomWorkload(100, 10, 0.2, num_prompts=50, seed=9)
    closed, plan = plan_requests(w)
    assert plan.mode == "closed-loop" and all(r.send_offset_s == 0.0 for r in closed)
    paced, plan = plan_requests(w, request_rate=5.0, burstiness=1.0)
    assert plan.mode == "gamma" and paced[-1].send_offset_s == 50 / 5.0
    assert plan.to_dict()["request_rate"] == 5.0
    # the arrival stream is separate from the length stream: pacing does not change lengths
    assert [r.prompt for r in paced] == [r.prompt for r in closed]
    again, _ = plan_requests(w, request_rate=5.0)
    assert [r.send_offset_s for r in again] == [r.send_offset_s for r in paced]
    other, _ = plan_requests(w, request_rate=5.0, seed=1)
    assert [r.send_offset_s for r in other] != [r.send_offset_s for r in paced]
    json.dumps([r.to_dict() for r in paced]) and json.dumps(plan.to_dict())


def test_plan_requests_uses_trace_timestamps(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("input_len,output_len,timestamp\n10,2,100.5\n11,3,100.5\n12,4,102.0\n")
    w = TraceWorkload.from_file(p)
    reqs, plan = plan_requests(w)
    assert plan.mode == "trace"
    assert [r.send_offset_s for r in reqs] == [0.0, 0.0, 1.5]  # rebased to the first request
    with pytest.raises(ValueError, match="timestamps"):
        plan_requests(w, request_rate=2.0)


# ------------------------------------------------------------------ trace files


def test_trace_csv_and_jsonl(tmp_path):
    c = tmp_path / "a.csv"
    c.write_text("input_len, output_len\n100,20\n\n50,5\n")
    w = TraceWorkload.from_file(c, vocab_size=1000)
    assert w.lengths() == ([100, 50], [20, 5]) and w.timestamps() is None
    assert [len(r.prompt) for r in w.requests()] == [100, 50]
    j = tmp_path / "a.jsonl"
    j.write_text('{"input_len": 7, "output_len": 3, "timestamp": 0.25}\n\n'
                 '{"input_len": 8.0, "output_len": 1, "timestamp": 1}\n')
    w = TraceWorkload.from_file(j)
    assert w.lengths() == ([7, 8], [3, 1]) and w.timestamps() == [0.0, 0.75]
    assert w.describe()["source"] == str(j)


def test_a_trace_or_dataset_packed_or_saved_as_utf16_is_read_like_the_plain_file(tmp_path):
    import bz2
    import gzip

    from tuner.load.datasets import sharegpt
    jsonl = '{"input_len": 7, "output_len": 3, "timestamp": 0.25}\n{"input_len": 8, "output_len": 1, "timestamp": 1}\n'
    (tmp_path / "t.jsonl.gz").write_bytes(gzip.compress(jsonl.encode()))
    (tmp_path / "t.csv.bz2").write_bytes(bz2.compress(b"input_len,output_len\n100,20\n50,5\n"))
    (tmp_path / "t16.jsonl").write_bytes(b"\xff\xfe" + jsonl.encode("utf-16-le"))  # PowerShell 5's `>`
    assert TraceWorkload.from_file(tmp_path / "t.jsonl.gz").lengths() == ([7, 8], [3, 1])
    assert TraceWorkload.from_file(tmp_path / "t16.jsonl").timestamps() == [0.0, 0.75]
    assert TraceWorkload.from_file(tmp_path / "t.csv.bz2").lengths() == ([100, 50], [20, 5])
    conv = [{"id": "a", "conversations": [{"from": "human", "value": "hello there"}, {"from": "gpt", "value": "hi"}]}]
    (tmp_path / "sg.json.gz").write_bytes(gzip.compress(json.dumps(conv).encode()))
    got = sharegpt(tmp_path / "sg.json.gz", 1, 0, None, 8)
    assert got.prompts == ["hello there"] and got.output_lens == [8]
    (tmp_path / "bad.jsonl").write_bytes(b'{"input_len": 3, "output_len": 2}\n\xe2\x82\n')
    with pytest.raises(TraceFormatError, match="bad.jsonl: not text"):  # a dataset is never silently mended
        TraceWorkload.from_file(tmp_path / "bad.jsonl")


@pytest.mark.parametrize(
    "name,content,where,field",
    [
        ("m.csv", "input_len,output_len\n10,2\n11,\n", ":3:", "output_len"),
        ("f.csv", "input_len,output_len\n10,2\n1.5,2\n", ":3:", "input_len"),
        ("n.csv", "input_len,output_len\n-4,2\n", ":2:", "input_len"),
        ("z.csv", "input_len,output_len\n4,0\n", ":2:", "output_len"),
        ("t.csv", "input_len,output_len,timestamp\n4,2,abc\n", ":2:", "timestamp"),
        ("d.csv", "input_len,output_len,timestamp\n4,2,5\n4,2,3\n", ":3:", "timestamp"),
        ("mix.csv", "input_len,output_len,timestamp\n4,2,5\n4,2,\n", ":3:", "timestamp"),
        ("h.csv", "prompt_len,output_len\n4,2\n", ":1:", "input_len"),
        ("b.jsonl", '{"input_len": 3, "output_len": 2}\n{"input_len": 3,\n', ":2:", "JSON"),
        ("s.jsonl", '{"input_len": "x", "output_len": 2}\n', ":1:", "input_len"),
        ("l.jsonl", '[3, 2]\n', ":1:", "object"),
        ("bool.jsonl", '{"input_len": true, "output_len": 2}\n', ":1:", "input_len"),
        ("neg.jsonl", '{"input_len": 3, "output_len": 2, "timestamp": -1}\n', ":1:", "timestamp"),
    ],
)
def test_trace_errors_name_file_line_and_field(tmp_path, name, content, where, field):
    p = tmp_path / name
    p.write_text(content)
    with pytest.raises(TraceFormatError) as e:
        TraceWorkload.from_file(p)
    msg = str(e.value)
    assert str(p) + where in msg and field in msg


def test_trace_file_level_errors(tmp_path):
    with pytest.raises(TraceFormatError, match="not found"):
        TraceWorkload.from_file(tmp_path / "missing.csv")
    (tmp_path / "x.txt").write_text("1,2\n")
    with pytest.raises(TraceFormatError, match="unknown trace format"):
        TraceWorkload.from_file(tmp_path / "x.txt")
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(TraceFormatError, match="no requests"):
        TraceWorkload.from_file(tmp_path / "e.jsonl")
