"""The serving model: a workload run to completion on the scheduler's virtual clock (no sleeping).

`run_virtual` runs (arrival_time, input_len, output_len) requests through the Engine by jumping from
step end to step end: deterministic, the model's prediction of a load test, and what the benchmarks use
as the true expected metrics of a configuration. The simulator's LiveDriver (tuner/sim/clocks.py) runs
the same engine time-scaled behind HTTP, so a virtual run predicts a live one. Metrics follow
`vllm bench serve` (docs/load-metrics.md section 1).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..load.metrics import RequestOutcome, compute_metrics
from .engine import Engine, EngineStats, SimRequest
from .prediction import StartupPrediction


@dataclass
class RequestTiming:
    rid: str
    arrival: float
    prompt_len: int
    output_len: int
    token_times: list = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and len(self.token_times) == self.output_len

    @property
    def ttft(self) -> float:
        return self.token_times[0] - self.arrival

    @property
    def e2el(self) -> float:
        return self.token_times[-1] - self.arrival

    @property
    def itls(self) -> list[float]:
        return [b - a for a, b in zip(self.token_times, self.token_times[1:])]

    @property
    def tpot(self) -> float:
        n = len(self.token_times)
        return (self.e2el - self.ttft) / (n - 1) if n > 1 else 0.0


def to_outcomes(timings: list[RequestTiming]) -> list[RequestOutcome]:
    """Simulated requests as the load client records them, one token per chunk."""
    out = []
    for i, t in enumerate(timings):
        o = RequestOutcome(index=i, prompt_len=t.prompt_len, expected_output_len=t.output_len, sent=True,
                           start_time=t.arrival, output_tokens=len(t.token_times), chunks=len(t.token_times))
        if t.ok:
            o.success, o.ttft, o.latency, o.itl = True, t.ttft, t.e2el, t.itls
        else:
            o.fail("simulated", t.error or "incomplete")
        out.append(o)
    return out


def summarize(timings: list[RequestTiming], duration: float, percentiles=(50, 90, 99),
              goodput_slos=None) -> dict:
    """vllm bench serve's aggregates, by the same code the load client uses (tuner.load.metrics)."""
    return compute_metrics(to_outcomes(timings), duration, percentiles, goodput_slos)


@dataclass
class RunResult:
    timings: list[RequestTiming]
    duration: float
    stats: EngineStats
    logs: list = field(default_factory=list)  # (sim_time, level, key, message)
    steps: list = field(default_factory=list)  # (start, duration, kind, [engine.Shape])

    def summary(self) -> dict:
        res = summarize(self.timings, self.duration)
        res.update(num_preemptions=self.stats.preemptions, runtime_compiles=self.stats.runtime_compiles)
        return res


def run_virtual(pred: StartupPrediction, workload: Iterable[tuple[float, int, int]], noise: float = 0.0,
                seed: int = 0, keep_steps: bool = False, max_concurrency: int | None = None,
                turnaround_s: float = 0.001, engine: Engine | None = None) -> RunResult:
    """Run `workload` on a fresh engine in simulated time; returns per-request timings and aggregates.

    `max_concurrency` makes it a closed loop, like the load client's semaphore: a request is sent at
    its arrival time or `turnaround_s` after one of the `max_concurrency` in flight finishes (the
    client reads the end of a stream and posts the next request), whichever is later. A request that
    reaches the server while a step runs waits for that step, as on the real server. `engine`: run on
    this one instead (a second run on the same server: what the first one compiled and ran stays so).
    """
    engine = engine or Engine(pred, noise=noise, seed=seed)
    pending = sorted(((float(a), int(i), int(o)) for a, i, o in workload), key=lambda w: w[0])
    timings: dict[str, RequestTiming] = {}
    result = RunResult([], 0.0, engine.stats)
    start = pending[0][0] if pending else 0.0
    now, k, in_flight = start, 0, 0
    limit = max_concurrency or len(pending) or 1
    freed: list[float] = []  # when slots freed by finished requests can send again
    while k < len(pending) or engine.has_work():
        while k < len(pending) and in_flight < limit:
            a = pending[k][0]
            if freed and k >= limit:  # a closed-loop request goes out when a slot frees up
                a = max(a, freed[0])
            if a > now:
                break
            if freed and k >= limit:
                freed.pop(0)
            _, i, o = pending[k]
            rid = f"cmpl-{k:032x}"
            # The client's clock starts when it sends.
            timings[rid] = RequestTiming(rid, a, i, o)
            engine.add_request(SimRequest(rid, i, o, a))
            k += 1
            in_flight += 1
        if not engine.has_work():
            nxt = pending[k][0]
            if freed and k >= limit:
                nxt = max(nxt, freed[0])
            now = max(now, nxt)
            continue
        res = engine.step(now)
        end = now + res.duration
        result.logs.extend((now, *entry) for entry in res.logs)
        if keep_steps:
            result.steps.append((now, res.duration, res.kind, res.shapes))
        for r in res.emitted:
            timings[r.rid].token_times.append(end)
        for r in res.finished:
            in_flight -= 1
            if max_concurrency:
                freed.append(end + turnaround_s)
            if r.error:
                timings[r.rid].error = r.error
        now = end
    result.timings = list(timings.values())
    ends = [t.token_times[-1] for t in result.timings if t.token_times]
    result.duration = (max(ends) if ends else now) - start
    return result
