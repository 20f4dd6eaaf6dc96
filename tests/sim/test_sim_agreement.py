"""A live run (HTTP, real time) and a virtual run (no sleeping) of the same workload agree.

The live server serves at time scale 1.0 (it starts up compressed), the client sends each request at
its arrival time and measures TTFT, TPOT and E2EL itself, as `vllm bench serve` does. The virtual run
is `tuner.sim.run_virtual` on the same configuration.

What separates them is only the HTTP path and event-loop wake-ups (~1 ms each on a quiet machine), so
the live run can only be slower: asserted here, each mean and the run's duration at least the virtual
value less 10% + 5 ms (a simulator that under-slept, or counted a step twice less, would fail). How much
slower it is depends on how busy the machine is: a measurement, printed here (pytest -s) and reported by
benchmarks/sim_fidelity.py, never asserted (the suite's other workers share the same two cores).
"""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp

from tuner.perfmodel import ServerInputs, SimSettings, predict_startup
from tuner.perfmodel.serving import RequestTiming
from tuner.sim import run_virtual, summarize

from .test_sim_server import CAL_ARGS, CAL_ENV, MODEL, SimProcess

WORKLOAD = [(0.06 * i, 100 + (i * 211) % 900, 24) for i in range(16)]


async def _one(session, base, arrival, t0, n_in, n_out) -> RequestTiming:
    await asyncio.sleep(max(0.0, t0 + arrival - time.perf_counter()))
    timing = RequestTiming(f"r{arrival}", time.perf_counter() - t0, n_in, n_out)
    body = {"model": MODEL, "prompt": list(range(7, 7 + n_in)), "max_tokens": n_out, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    async with session.post(base + "/v1/completions", json=body) as resp:
        async for raw in resp.content:
            line = raw.strip()
            if line.startswith(b"data: {"):
                if json.loads(line[6:]).get("choices"):
                    timing.token_times.append(time.perf_counter() - t0)
    return timing


async def _live(base: str, workload) -> tuple[list[RequestTiming], float]:
    async with aiohttp.ClientSession() as session:
        t0 = time.perf_counter()
        timings = await asyncio.gather(*(_one(session, base, a, t0, i, o) for a, i, o in workload))
    return list(timings), max(t.token_times[-1] for t in timings)


def test_live_run_agrees_with_virtual_run():
    pred = predict_startup("fork-1.17", SimSettings(gpu_memory_utilization=0.5), ServerInputs(128, 4, 2048, 4096),
                           CAL_ENV)
    virtual = run_virtual(pred, WORKLOAD).summary()
    with SimProcess(CAL_ARGS, CAL_ENV, scale=1.0, extra=["--sim-startup-time-scale", "0.005"]) as srv:
        srv.wait_ready()
        asyncio.run(_live(srv.base, [(0.0, 100, 2)]))  # discarded: the first request pays Python's imports
        timings, duration = asyncio.run(_live(srv.base, WORKLOAD))
    live = summarize(timings, duration)
    assert live["completed"] == len(WORKLOAD) == virtual["completed"]
    rows, outside = ["metric            virtual      live    difference"], []
    for key in ("mean_ttft_ms", "mean_tpot_ms", "mean_e2el_ms", "duration"):
        v, l = virtual[key], live[key]
        rows.append(f"{key:15s} {v:9.2f} {l:9.2f} {l - v:+9.2f} ({100 * (l - v) / v:+.1f}%)")
        if l < v - 0.10 * v - (5.0 if key.endswith("_ms") else 0.005):
            outside.append(key)
    print("\n" + "\n".join(rows))
    assert not outside, f"faster than the virtual clock allows (10% + 5 ms): {outside}\n" + "\n".join(rows)
    assert [len(t.token_times) for t in timings] == [n_out for _, _, n_out in WORKLOAD]
