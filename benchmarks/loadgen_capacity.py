"""Load-generator capacity and timing error (measured and printed, never asserted).

1. Capacity: one client process against a fake server (its own process) that streams as fast as
   it can. Reported: token chunks (SSE events) per second of wall time, and per second of
   *client CPU* (the second figure is what the client could sustain if it had a core to itself;
   on a shared 2-core box the server steals the rest).
2. Timing error: the server sleeps a fixed time between chunks and stamps each write with
   ``time.perf_counter()``; on Linux that clock is CLOCK_MONOTONIC, shared by all processes, so
   the client's chunk arrival times (start + ttft + cumulative ITL, as in the result JSON) can be
   compared chunk by chunk with the server's. Reported: |client ITL - server gap| and the
   delivery lag (client arrival - server write).

Usage: python benchmarks/loadgen_capacity.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tuner.loadgen import run_benchmark  # noqa: E402
from tuner.workload import FixedWorkload  # noqa: E402

SERVER = ROOT / "tests" / "fake_openai_server.py"


@contextmanager
def fake_server(token_delay_ms: float, tokens_per_chunk: int = 1):
    proc = subprocess.Popen([sys.executable, str(SERVER), "--token-delay-ms", str(token_delay_ms),
                             "--tokens-per-chunk", str(tokens_per_chunk)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = proc.stdout.readline()
        if not line.startswith("LISTENING"):
            raise RuntimeError(f"fake server did not start: {line!r}")
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def capacity(base_url: str, concurrency: int, n_requests: int, out_len: int) -> dict:
    w = FixedWorkload(32, out_len, n_requests)
    cpu0 = time.process_time()
    res = asyncio.run(run_benchmark(base_url, "fake-model", w, max_concurrency=concurrency, progress=False))
    cpu = time.process_time() - cpu0
    j = res.to_json()
    chunks = j["tuner_token_chunks"]
    return {"concurrency": concurrency, "requests": n_requests, "failed": j["failed"], "chunks": chunks,
            "duration_s": j["duration"], "events_per_s": chunks / j["duration"],
            "client_cpu_s": cpu, "events_per_client_cpu_s": chunks / cpu if cpu else float("nan"),
            "client_us_per_event": 1e6 * cpu / chunks}


def timing_error(base_url: str, concurrency: int, n_requests: int, out_len: int, delay_ms: float) -> dict:
    w = FixedWorkload(32, out_len, n_requests)
    res = asyncio.run(run_benchmark(base_url, "fake-model", w, max_concurrency=concurrency, progress=False))
    j = res.to_json()
    with urllib.request.urlopen(base_url + "/debug/log") as r:  # loopback only
        server = {rec["request_id"]: rec for rec in json.load(r)}
    itl_err, lag = [], []
    for i, o in enumerate(res.outcomes):
        rec = server.get(f"tuner-{i}")
        if not o.success or rec is None:
            continue
        client_t = o.start_time + o.ttft + np.concatenate([[0.0], np.cumsum(o.itl)])
        server_t = np.asarray(rec["chunk_times"])
        if len(server_t) != len(client_t):
            continue
        lag.extend(client_t - server_t)
        itl_err.extend(np.abs(np.diff(client_t) - np.diff(server_t)))
    itl_err, lag = np.asarray(itl_err) * 1000, np.asarray(lag) * 1000
    return {"concurrency": concurrency, "delay_ms": delay_ms, "chunks_compared": int(itl_err.size),
            "failed": j["failed"], "client_mean_itl_ms": j["mean_itl_ms"],
            "itl_abs_err_ms": {"mean": itl_err.mean(), "p50": np.percentile(itl_err, 50),
                               "p99": np.percentile(itl_err, 99), "max": itl_err.max()},
            "delivery_lag_ms": {"mean": lag.mean(), "p50": np.percentile(lag, 50),
                                "p99": np.percentile(lag, 99), "max": lag.max()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller runs")
    args = ap.parse_args()
    scale = 4 if args.quick else 1

    print("== capacity: server streams 1 token per chunk with no delay ==")
    with fake_server(0.0) as url:
        asyncio.run(run_benchmark(url, "fake-model", FixedWorkload(8, 8, 4), progress=False))  # warm
        for conc in (1, 8, 64, 256):
            n = max(conc, 64)
            r = capacity(url, conc, n, out_len=max(16, 131072 // scale // n))
            print(f"conc={r['concurrency']:4d} req={r['requests']:4d} chunks={r['chunks']:7d} "
                  f"failed={r['failed']} wall={r['duration_s']:.2f}s  "
                  f"{r['events_per_s']:9.0f} events/s  "
                  f"{r['events_per_client_cpu_s']:9.0f} events/client-CPU-s  "
                  f"({r['client_us_per_event']:.1f} us client CPU per event)")

    print("\n== timing error: server sleeps between chunks, client vs server timestamps ==")
    for delay in (2.0, 10.0):
        with fake_server(delay) as url:
            for conc in (1, 16, 64):
                r = timing_error(url, conc, n_requests=max(conc, 32 // scale), out_len=64 // scale,
                                 delay_ms=delay)
                e, lag = r["itl_abs_err_ms"], r["delivery_lag_ms"]
                print(f"delay={delay:4.1f}ms conc={conc:3d} chunks={r['chunks_compared']:5d} "
                      f"client mean ITL={r['client_mean_itl_ms']:.3f}ms | |ITL err| mean={e['mean']:.3f} "
                      f"p50={e['p50']:.3f} p99={e['p99']:.3f} max={e['max']:.3f} ms | "
                      f"lag mean={lag['mean']:.3f} p99={lag['p99']:.3f} max={lag['max']:.3f} ms")


if __name__ == "__main__":
    main()
