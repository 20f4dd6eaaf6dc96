"""How far a live, time-scaled simulator run measured over HTTP is from the exact virtual-clock result.

The tuner measures the simulator like a real server: through the HTTP load client, on a machine it
shares with the server. Compressing time (`--time-scale`) makes a study faster but magnifies the
client's own overhead (about 0.1-0.5 ms per chunk on this machine) relative to the compressed step
times. This benchmark prints, for one configuration, the live metrics at several time scales next to
the virtual-clock truth. Reported, not asserted: `python benchmarks/sim_fidelity.py [--quick]`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tuner.load.workload import RandomWorkload  # noqa: E402
from tuner.perfmodel import target as M  # noqa: E402
from tuner.perfmodel.serving import run_virtual, summarize  # noqa: E402
from tuner.serve.backends import Backend  # noqa: E402
from tuner.space.schema import TrialSettings  # noqa: E402
from tuner.trial import run as T  # noqa: E402

SERVER = {"max_num_seqs": 32, "max_model_len": 2048, "block_size": 128, "max_num_batched_tokens": 4096}
ENV = {"VLLM_EXPONENTIAL_BUCKETING": "false", "VLLM_PROMPT_SEQ_BUCKET_STEP": "128"}
KEYS = ("output_throughput", "median_ttft_ms", "p99_ttft_ms", "median_itl_ms", "median_tpot_ms")


def virtual_truth(ctx: T.TrialContext, settings: TrialSettings, concurrency: int) -> dict:
    pred = M.predict(ctx, settings)
    reqs = ctx.workload.requests()
    result = run_virtual(pred, [(0.0, r.prompt_len, r.output_len) for r in reqs], max_concurrency=concurrency)
    return summarize(result.timings, result.duration)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    scales = (0.1, 0.5) if args.quick else (0.05, 0.1, 0.2, 0.5, 1.0)
    workload = RandomWorkload(512, 64, range_ratio=0.5, num_prompts=48 if args.quick else 96, seed=1)
    settings = TrialSettings(server=dict(SERVER), env=dict(ENV), params={})
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for scale in scales:
            ctx = T.TrialContext(
                backend=Backend(kind="sim", model="llama", sim_release="fork-1.21.2", time_scale=scale,
                                startup_time_scale=0.002),
                workload=workload, release="fork-1.21.2", device_model=M.DeviceModel(),
                load=T.LoadOptions(max_concurrency=args.concurrency, warmup_requests=0),
                records_dir=Path(tmp) / "run")
            if not rows:
                rows.append(("virtual (truth)", virtual_truth(ctx, settings, args.concurrency)))
            r = T.run_trial(ctx, settings, Path(tmp) / f"t{scale}")
            if not r.ok:
                print(f"scale {scale}: {r.status} {r.reason}")
                continue
            rows.append((f"live, time scale {scale:g}", r.metrics))
    truth = rows[0][1]
    print(f"fork-1.21.2, Gaudi 2, Llama-3.1-8B, {workload.num_prompts} requests 512±50% in / 64±50% out, "
          f"concurrency {args.concurrency}")
    print("| run | " + " | ".join(KEYS) + " |")
    print("|---|" + "---|" * len(KEYS))
    for label, m in rows:
        cells = []
        for k in KEYS:
            v = m.get(k, float("nan"))
            diff = "" if m is truth else f" ({(v - truth[k]) / truth[k] * 100:+.0f}%)"
            cells.append(f"{v:,.1f}{diff}")
        print(f"| {label} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
