"""When each request is sent.

Closed loop (``request_rate = inf``: every request is ready at t=0, and the load generator's
``max_concurrency`` semaphore paces them), open loop with gamma-distributed gaps (vLLM's
``get_request``, including its rescaling of the cumulative times), vLLM's ramp-up, or a trace's own
timestamps.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .workload import RequestSpec, Workload


def gamma_send_offsets(num_prompts: int, request_rate: float, burstiness: float = 1.0,
                       rng: np.random.Generator | None = None) -> list[float]:
    """Cumulative send times as vLLM's ``get_request`` computes them (no ramp-up).

    Gaps ~ Gamma(shape=burstiness, scale=1/(rate*burstiness)); burstiness 1 is Poisson, inf is
    constant spacing. The first request also waits one gap. The cumulative times are then
    rescaled so the last request goes out at exactly ``num_prompts / rate`` (vLLM does this to
    remove the 1-2 % seed-to-seed spread of the sum; we additionally pin the last value so the
    floating-point product cannot miss it by an ulp). ``rate = inf`` sends everything at 0.
    """
    if num_prompts <= 0:
        return []
    if not request_rate > 0:
        raise ValueError(f"request_rate must be > 0 (or inf), got {request_rate}")
    if not burstiness > 0:
        raise ValueError(f"burstiness must be > 0, got {burstiness}")
    if math.isinf(request_rate):
        return [0.0] * num_prompts
    if math.isinf(burstiness):
        gaps = np.full(num_prompts, 1.0 / request_rate)
    else:
        rng = rng if rng is not None else np.random.default_rng(0)
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (request_rate * burstiness), size=num_prompts)
    cum = np.cumsum(gaps)
    target = num_prompts / request_rate
    if cum[-1] != 0:
        cum = cum * (target / cum[-1])
        cum[-1] = target
    return cum.tolist()


@dataclass(frozen=True)
class ArrivalPlan:
    """How send times were produced; serialised into the result file."""

    mode: str  # "closed-loop" | "gamma" | "trace"
    request_rate: float
    burstiness: float
    seed: int

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["request_rate"] = "inf" if math.isinf(self.request_rate) else self.request_rate
        d["burstiness"] = "inf" if math.isinf(self.burstiness) else self.burstiness
        return d


def ramp_up_send_offsets(num_prompts: int, strategy: str, start_rps: float, end_rps: float,
                         burstiness: float, rng: np.random.Generator) -> list[float]:
    """vLLM's ramp-up: request i's gap is drawn at the rate interpolated at i/(n-1) (linear, or
    geometric for "exponential"), and the cumulative times are *not* rescaled."""
    if strategy not in ("linear", "exponential"):
        raise ValueError(f"ramp-up strategy must be linear or exponential, got {strategy!r}")
    if start_rps < 0 or end_rps < start_rps or (strategy == "exponential" and start_rps == 0):
        raise ValueError(f"ramp-up needs 0 <= start <= end RPS (exponential: start > 0), got {start_rps}, {end_rps}")
    t, out = 0.0, []
    for i in range(num_prompts):
        progress = i / max(num_prompts - 1, 1)
        rate = (start_rps + (end_rps - start_rps) * progress if strategy == "linear"
                else start_rps * (end_rps / start_rps) ** progress)
        if not rate > 0:
            raise ValueError(f"ramp-up gives request {i} a non-positive rate {rate}")
        t += 1.0 / rate if math.isinf(burstiness) else float(rng.gamma(burstiness, 1.0 / (rate * burstiness)))
        out.append(t)
    return out


def plan_requests(workload: Workload, request_rate: float = math.inf, burstiness: float = 1.0,
                  seed: int | None = None, ramp_up: tuple[str, float, float] | None = None
                  ) -> tuple[list[RequestSpec], ArrivalPlan]:
    """The workload's requests with ``send_offset_s`` filled in, plus the arrival description.

    * the workload has timestamps (a trace): they are the send offsets; ``request_rate`` must be
      inf (a rate would contradict the trace);
    * ``request_rate`` finite: gamma gaps, seeded with ``seed`` (default: the workload's seed);
    * otherwise closed loop: all at t=0, the load generator's concurrency cap does the pacing.
    """
    reqs = workload.requests()
    seed = workload.seed if seed is None else int(seed)
    ts = workload.timestamps()
    if ts is not None:
        if not math.isinf(request_rate):
            raise ValueError("the workload carries its own timestamps; leave request_rate at inf "
                             "(or load the trace without timestamps)")
        offsets, plan = ts, ArrivalPlan("trace", math.inf, burstiness, seed)
    elif ramp_up is not None:
        if not math.isinf(request_rate):
            raise ValueError("a ramp-up sets the request rate; leave --request-rate at inf")
        rng = np.random.default_rng([seed, 0x41525256])
        offsets = ramp_up_send_offsets(len(reqs), *ramp_up, burstiness, rng)
        plan = ArrivalPlan(f"ramp-up-{ramp_up[0]}", math.inf, burstiness, seed)
    elif math.isinf(request_rate):
        if not request_rate > 0:
            raise ValueError(f"request_rate must be > 0, got {request_rate}")
        offsets, plan = [0.0] * len(reqs), ArrivalPlan("closed-loop", math.inf, burstiness, seed)
    else:
        # Own stream for arrivals so changing the rate does not change the lengths.
        rng = np.random.default_rng([seed, 0x41525256])  # "ARRV"
        offsets = gamma_send_offsets(len(reqs), request_rate, burstiness, rng)
        plan = ArrivalPlan("gamma", float(request_rate), float(burstiness), seed)
    for r, off in zip(reqs, offsets):
        r.send_offset_s = float(off)
    return reqs, plan
