"""The first requests after ready against as many warm ones (tuner/load/firstrun.py), the simulator's first
replay that makes the difference (tuner/perfmodel/engine.py), and the --slo keys that limit it."""

from __future__ import annotations

import numpy as np
import pytest

from tuner.load.firstrun import first_run_figures
from tuner.load.metrics import RequestOutcome, rescale_time
from tuner.perfmodel import ServerInputs, SimSettings, predict_startup
from tuner.perfmodel.engine import Engine
from tuner.perfmodel.serving import run_virtual
from tuner.study.options import slo_key_problem


def outcome(index: int, sent_at: float, ttft: float, tokens: int = 10, latency: float | None = None,
            ok: bool = True) -> RequestOutcome:
    o = RequestOutcome(index=index, prompt_len=100, expected_output_len=tokens, sent=True, arrival_time=sent_at,
                       start_time=sent_at, ttft=ttft, latency=latency if latency is not None else ttft + 1.0,
                       output_tokens=tokens, success=ok)
    return o


def test_the_window_is_the_warm_pass_and_the_reference_as_many_measured_requests_in_send_order():
    warm = [outcome(i, 0.0, ttft=0.5 + 0.1 * i) for i in range(4)]
    # sent out of index order: the reference is the first four *sent*, whatever their index
    measured = [outcome(0, 10.3, ttft=0.9), outcome(1, 10.0, ttft=0.2), outcome(2, 10.1, ttft=0.2),
                outcome(3, 10.2, ttft=0.3), outcome(4, 10.05, ttft=0.3), outcome(5, 11.0, ttft=5.0)]
    f = first_run_figures(warm, measured, percentiles=(50, 99))
    assert f["window"] == f["first_requests"] == f["warm_requests"] == 4
    assert f["first_median_ttft_ms"] == pytest.approx(np.median([500, 600, 700, 800]))
    assert f["warm_median_ttft_ms"] == pytest.approx(np.median([200, 300, 200, 300]))  # not 900 or 5000
    assert f["warm_p99_ttft_ms"] == pytest.approx(np.percentile([200, 300, 200, 300], 99))
    assert f["tail"] == "p99"
    assert f["penalty_tail_ttft"] == pytest.approx(f["first_p99_ttft_ms"] / f["warm_p99_ttft_ms"])
    # throughput: the set's tokens over its first send to its last token
    assert f["first_output_throughput"] == pytest.approx(40 / 1.8)
    assert f["warm_output_throughput"] == pytest.approx(40 / (10.2 + 1.3 - 10.0))
    assert f["window_end_perf_counter"] == pytest.approx(1.8)


def test_no_warm_pass_means_no_window_and_failures_are_counted_not_timed():
    assert first_run_figures([], [outcome(0, 0.0, 0.1)], (50, 99)) == {}
    warm = [outcome(0, 0.0, 0.4), outcome(1, 0.0, 99.0, ok=False)]
    f = first_run_figures(warm, [outcome(0, 5.0, 0.1), outcome(1, 5.0, 0.1)], (50, 99))
    assert f["first_failed"] == 1 and f["first_median_ttft_ms"] == pytest.approx(400)


def test_a_time_scaled_servers_first_run_figures_come_back_in_its_own_time():
    bench = {"tuner_first_run": {"first_p99_ttft_ms": 10.0, "first_output_throughput": 100.0, "window": 8,
                                 "penalty_tail_ttft": 1.5}}
    out = rescale_time(bench, 0.1)["tuner_first_run"]
    assert out == {"first_p99_ttft_ms": 100.0, "first_output_throughput": 10.0, "window": 8,
                   "penalty_tail_ttft": 1.5}


def _waves(first_replay: float):
    """The first wave after ready and the same wave again, on one engine in virtual time (no noise)."""
    pred = predict_startup("fork-1.21.2", SimSettings(model="llama-3.1-8b", device="gaudi2"),
                           ServerInputs(block_size=128, max_num_seqs=64, max_model_len=2048,
                                        max_num_batched_tokens=4096), {"VLLM_EXPONENTIAL_BUCKETING": "false"})
    engine = Engine(pred, first_replay=first_replay)
    wave = [(0.0, 512, 128)] * 16
    return [run_virtual(pred, wave, engine=engine, max_concurrency=16) for _ in range(2)]


def _p99_ttft_and_throughput(run) -> tuple[float, float]:
    ttft = [t.token_times[0] - t.arrival for t in run.timings]
    tokens = sum(len(t.token_times) for t in run.timings)
    return float(np.percentile(ttft, 99)), tokens / run.duration


def test_the_simulators_first_replay_slows_the_first_wave_only():
    first0, again0 = (_p99_ttft_and_throughput(r) for r in _waves(0.0))
    first1, again1 = (_p99_ttft_and_throughput(r) for r in _waves(1.0))
    assert first0 == pytest.approx(again0)  # without it a warm server repeats itself exactly
    assert first1[0] > 1.2 * again1[0] and first1[1] < 0.95 * again1[1]  # the first wave pays once...
    assert again1 == pytest.approx(again0)  # ...and the wave after it runs as warm as ever


@pytest.mark.parametrize("key", ["p99_ttft_ms", "median_tpot_ms", "mean_e2el_ms", "first_p99_ttft_ms",
                                 "first_median_ttft_ms", "p90_itl_ms"])
def test_slo_keys_the_load_test_reports(key):
    assert slo_key_problem(key, (50, 90, 99), warm_requests=16) is None


@pytest.mark.parametrize("key, says", [
    ("p99_ttft", "not a latency"), ("ttft_ms", "not a latency"), ("p95_ttft_ms", "p95 is not reported"),
    ("first_p99_tpot_ms", "TTFT only"), ("first_p95_ttft_ms", "p95 is not reported"), ("first_ttft", "not a latency"),
])
def test_slo_keys_refused_say_why_with_the_key(key, says):
    problem = slo_key_problem(key, (50, 90, 99), warm_requests=16)
    assert problem is not None and key in problem and says in problem


def test_a_first_run_slo_needs_a_warm_pass():
    problem = slo_key_problem("first_p99_ttft_ms", (50, 99), warm_requests=0)
    assert problem is not None and "--num-warmups 0" in problem
    assert slo_key_problem("p99_ttft_ms", (50, 99), warm_requests=0) is None
