"""The first-run window: what the simulator's first replay does to the first wave after ready, and how alike a
first wave and a warm one are when nothing is cold (docs/load-metrics.md section 4).

Part 1, virtual clock (exact, no noise): one engine serves a wave of requests right after ready, then the same
wave again followed by more (the measured run); the window is the first wave, the reference the measured run's
first requests, as the tuner measures them. For --sim-first-replay 0, 1 (the default) and 3, on a fork (v0)
and a vllm-gaudi (v1) release. Part 2 (unless --quick): live trials on the time-scaled simulator through the
HTTP client, the same configuration booted several times, to show the scatter of the measured penalty.
Reported, not asserted: `python benchmarks/first_run.py [--quick]`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tuner.perfmodel import ServerInputs, SimSettings, predict_startup  # noqa: E402
from tuner.perfmodel.engine import Engine  # noqa: E402
from tuner.perfmodel.serving import run_virtual  # noqa: E402

RELEASES = {"fork-1.21.2": {"VLLM_EXPONENTIAL_BUCKETING": "false"}, "gaudi-main": {}}
INPUTS = ServerInputs(block_size=128, max_num_seqs=64, max_model_len=2048, max_num_batched_tokens=4096)
WAVE, MEASURED, LENGTHS = 16, 100, (512, 128)


def _figures(timings) -> tuple[float, float, float]:
    ttft = [(t.token_times[0] - t.arrival) * 1000 for t in timings]
    tokens = sum(len(t.token_times) for t in timings)
    span = max(t.token_times[-1] for t in timings) - min(t.arrival for t in timings)
    return float(np.percentile(ttft, 99)), float(np.median(ttft)), tokens / span


def virtual(release: str, first_replay: float) -> dict:
    pred = predict_startup(release, SimSettings(model="llama-3.1-8b", device="gaudi2"), INPUTS, RELEASES[release])
    engine = Engine(pred, first_replay=first_replay)
    req = (0.0, *LENGTHS)
    window = run_virtual(pred, [req] * WAVE, engine=engine, max_concurrency=WAVE)
    measured = run_virtual(pred, [req] * MEASURED, engine=engine, max_concurrency=WAVE)
    first, warm = _figures(window.timings), _figures(measured.timings[:WAVE])
    return {"first": first, "warm": warm, "penalty_p99": first[0] / warm[0], "penalty_thr": first[2] / warm[2]}


def live(boots: int, first_replay: float | None) -> list[dict]:
    """Trials of one configuration on the time-scaled simulator: each boot's window against its reference."""
    from tuner.load.workload import RandomWorkload
    from tuner.serve.backends import Backend
    from tuner.space.schema import TrialSettings
    from tuner.trial import run as T

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        backend = Backend(kind="sim", model="llama-3.1-8b", sim_release="fork-1.21.2", time_scale=0.2,
                          startup_time_scale=0.002,
                          extra_args=[] if first_replay is None else ["--sim-first-replay", f"{first_replay:g}"])
        ctx = T.TrialContext(backend=backend, workload=RandomWorkload(num_prompts=MEASURED, input_len=LENGTHS[0],
                                                                      output_len=LENGTHS[1], vocab_size=32000),
                             release="fork-1.21.2", device_model=T.DeviceModel(device="gaudi2", model="llama-3.1-8b"),
                             load=T.LoadOptions(max_concurrency=WAVE, warmup_requests=WAVE), records_dir=Path(tmp))
        settings = TrialSettings(params={}, env=dict(RELEASES["fork-1.21.2"]),
                                 server={"max_num_seqs": 64, "max_model_len": 2048, "block_size": 128,
                                         "max_num_batched_tokens": 4096})
        for i in range(boots):
            r = T.run_trial(ctx, settings, Path(tmp) / f"t{i}")
            out.append({"status": r.status.value, "p99": r.observed.get("first_run_penalty_tail_ttft"),
                        "thr": r.observed.get("first_run_penalty_output_throughput"),
                        "first_p99_ms": r.metrics.get("first_p99_ttft_ms"),
                        "warm_p99_ms": r.metrics.get("warm_p99_ttft_ms"),
                        "compiled": r.observed.get("first_run_not_warmed_up"), "all": r.observed.get("not_warmed_up")})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="the virtual clock only")
    parser.add_argument("--boots", type=int, default=4, help="live boots of one configuration (default 4)")
    parser.add_argument("--first-replay", type=float, help="the live simulator's --sim-first-replay (default: its own)")
    args = parser.parse_args()
    print(f"virtual clock: a wave of {WAVE} requests ({LENGTHS[0]} in / {LENGTHS[1]} out) right after ready, then "
          f"{MEASURED} at concurrency {WAVE}; llama-3.1-8b on gaudi2, max_num_seqs 64")
    print("| release | --sim-first-replay | first p99 / median TTFT, tok/s | warm p99 / median TTFT, tok/s "
          "| penalty p99 TTFT | penalty tok/s |")
    print("|---|---|---|---|---|---|")
    for release in RELEASES:
        for f in (0.0, 1.0, 3.0):
            v = virtual(release, f)
            a, b = v["first"], v["warm"]
            print(f"| {release} | {f:g} | {a[0]:.0f} / {a[1]:.0f} ms, {a[2]:.0f} | {b[0]:.0f} / {b[1]:.0f} ms, "
                  f"{b[2]:.0f} | x{v['penalty_p99']:.2f} | x{v['penalty_thr']:.2f} |")
    if args.quick:
        return 0
    runs = live(args.boots, args.first_replay)
    replay = "default" if args.first_replay is None else f"{args.first_replay:g}"
    print(f"\nlive, fork-1.21.2, time scale 0.2, --sim-first-replay {replay}, {args.boots} boots of one configuration:")
    for r in runs:
        print(f"  {r['status']}: first p99 {r['first_p99_ms']:.0f} ms, warm p99 {r['warm_p99_ms']:.0f} ms, "
              f"penalty p99 x{r['p99']:.2f}, tok/s x{r['thr']:.2f}; not warmed-up shapes in the window "
              f"{r['compiled']} of {r['all']}")
    p99 = [r["p99"] for r in runs if r["p99"] is not None]
    if len(p99) > 1:
        print(f"  penalty p99 TTFT: mean x{statistics.fmean(p99):.2f}, sd {statistics.stdev(p99):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
