"""The plan's serving model (perfmodel/fastserving.py) against the virtual clock it replays.

Closed loops (every request ready at once, a concurrency limit): the re-costed schedule is the clock's
result, for every release family, with runtime compiles and with configurations the clock has to answer
itself (a KV cache that may run short). Open loops (a request rate): an approximation whose error on a
fixed sample stays within the bounds below (benchmarks/plan_speed.py measures it on the shipped spaces)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest

from tuner.load.workload import RandomWorkload
from tuner.perfmodel.fastserving import FastServing
from tuner.perfmodel.target import DeviceModel, LoadShape, ModelTarget, predict, predict_serving
from tuner.plan.points import space_points
from tuner.space.schema import SearchSpace

SPACES = Path(__file__).resolve().parents[2] / "search_spaces"
KEYS = ("output_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "median_itl_ms",
        "p99_e2el_ms", "mean_ttft_ms")


def target(release: str, load: LoadShape, prompts: int = 40) -> ModelTarget:
    return ModelTarget(release, DeviceModel(), workload=RandomWorkload(384, 48, 0.5, num_prompts=prompts), load=load)


def preds(name: str, tgt: ModelTarget, n: int):
    space = SearchSpace.load(SPACES / f"{name}.yaml")
    space.check_release(space.release)
    out = [predict(tgt, space.settings_for(v)) for v in space_points(space, max_points=n, seed=1).values]
    return [p for p in out if p.failure is None]


def clock(tgt: ModelTarget, pred) -> dict:
    from tuner.perfmodel.serving import run_virtual
    from tuner.perfmodel.target import serving_requests

    summary = run_virtual(pred, serving_requests(tgt), max_concurrency=tgt.load.max_concurrency).summary()
    return {k: summary[k] for k in (*KEYS, "runtime_compiles")}


@pytest.mark.parametrize("name", ["demo", "fork-1.22-exponential", "vllm-gaudi"])
def test_closed_loop_replay_is_the_virtual_clock(name):
    space = SearchSpace.load(SPACES / f"{name}.yaml")
    tgt = target(space.release, LoadShape(max_concurrency=8))
    fast = FastServing(tgt)
    configs = preds(name, tgt, 14)
    for pred in configs:
        got, want = fast.predict(pred, KEYS), clock(tgt, pred)
        for k in KEYS:
            assert got[k] == pytest.approx(want[k], rel=1e-9), (k, pred.plan.strategy)
    assert fast.replays > 0 and fast.clock_runs < len(configs)  # the schedule was shared


def test_runtime_compiles_are_replayed_where_the_clock_meets_them():
    # prompts up to 576 tokens against prompt buckets that stop at 256: shapes the warm-up never compiled
    space = SearchSpace.from_dict({
        "release": "fork-1.21.2", "server": {"max_model_len": 2048, "block_size": 128, "max_num_batched_tokens": 4096},
        "env": {"VLLM_EXPONENTIAL_BUCKETING": "false", "VLLM_PROMPT_SEQ_BUCKET_MAX": "256"},
        "parameters": {"VLLM_GRAPH_RESERVED_MEM": {"type": "categorical", "choices": [0.05, 0.1, 0.2]},
                       "max_num_seqs": {"type": "categorical", "choices": [8, 16]}}})
    tgt = target("fork-1.21.2", LoadShape(max_concurrency=8))
    fast = FastServing(tgt)
    for values in space_points(space).values:
        pred = predict(tgt, space.settings_for(values))
        got, want = fast.predict(pred, (*KEYS, "runtime_compiles")), clock(tgt, pred)
        assert want["runtime_compiles"] > 0 and got["runtime_compiles"] == want["runtime_compiles"]
        for k in KEYS:
            assert got[k] == pytest.approx(want[k], rel=1e-9)
    assert fast.replays >= 4


def test_a_kv_cache_that_may_run_short_is_answered_by_the_clock():
    space = SearchSpace.from_dict({
        "release": "fork-1.21.2", "server": {"max_model_len": 2048, "block_size": 128, "max_num_batched_tokens": 4096,
                                             "max_num_seqs": 64},
        "env": {"VLLM_DECODE_BLOCK_BUCKET_MIN": "16", "VLLM_DECODE_BLOCK_BUCKET_STEP": "16"},
        "parameters": {"gpu_memory_utilization": {"type": "categorical", "choices": [0.9, 0.95]}}})
    tgt = target("fork-1.21.2", LoadShape(max_concurrency=64), prompts=64)
    fast = FastServing(tgt)
    from tuner.perfmodel import Corrections

    for values in space_points(space).values:  # a KV block 60x its size: a few dozen blocks for 64 requests
        pred = predict(tgt, space.settings_for(values), Corrections(kv_block=60.0))
        assert pred.failure is None and pred.num_blocks < 120
        assert fast.predict(pred, KEYS) == pytest.approx({k: v for k, v in clock(tgt, pred).items() if k in KEYS})
    assert fast.replays == 0 and fast.clock_runs == 2


def test_open_loop_replay_stays_close_to_the_clock():
    tgt = target("fork-1.21.2", LoadShape(request_rate=6.5), prompts=120)
    fast = FastServing(tgt)
    configs = preds("fork-1.21-linear", tgt, 40)
    errors = {k: [] for k in ("output_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms")}
    for pred in configs:
        got, want = fast.predict(pred, tuple(errors)), predict_serving(tgt, pred)
        for k in errors:
            errors[k].append(abs(got[k] / want[k] - 1))
    assert fast.replays >= 5  # some configurations shared a schedule
    for k, e in errors.items():
        assert statistics.median(e) < 0.01, k
        assert max(e) < (0.35 if "p99" in k else 0.1), k
    assert all(math.isfinite(x) for e in errors.values() for x in e)
