"""How fast `bucket-tuner plan` answers a space, and how close its serving figures are to the virtual clock.

For each shipped space with a release profile: a plan (tuner/plan/build.make_plan, the command's code) of
up to --points configurations at tune's default load (100 prompts of 512/128 tokens, 16 at a time: a
closed loop) and at the tuning-efficiency benchmark's open-loop load (200 prompts of 512/256 tokens, range
0.5, Poisson 6.5 req/s): wall time, CPU time per predicted configuration, virtual-clock runs, replayed
schedules and bucket builds. Then, on --sample configurations spread evenly over each plan's startable
points, the plan's figures (perfmodel/fastserving.py) against the virtual clock run on the same startup
prediction (target.predict_serving, the reference): median and max relative error of the throughput, the
p99 TTFT and the median TPOT. The startup figures need no such table: they are the model's own, exactly
(tests/perfmodel/test_bulk.py).

Usage: python benchmarks/plan_speed.py [--quick] [--points N] [--sample N] [--spaces demo,vllm-gaudi,...]
Writes benchmarks/results/plan_speed[-quick].json and .md; prints the tables.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tuner.load.workload import RandomWorkload  # noqa: E402
from tuner.perfmodel.target import DeviceModel, LoadShape, ModelTarget, predict, predict_serving  # noqa: E402
from tuner.plan.build import make_plan  # noqa: E402
from tuner.plan.evaluate import FEASIBLE, Evaluator, Limits  # noqa: E402
from tuner.space.schema import SearchSpace  # noqa: E402

SPACES = ("demo", "fork-1.21-linear", "fork-1.22-exponential", "vllm-gaudi", "vllm-gaudi-fitted")
LOADS = {
    "closed": (RandomWorkload(512, 128, 0.0, num_prompts=100), LoadShape(max_concurrency=16)),
    "poisson": (RandomWorkload(512, 256, 0.5, num_prompts=200), LoadShape(request_rate=6.5)),
}
AGREEMENT = ("output_throughput", "p99_ttft_ms", "median_tpot_ms")


def plan_space(name: str, load: str, points: int, sample: int) -> dict:
    space = SearchSpace.load(ROOT / "search_spaces" / f"{name}.yaml")
    space.check_release(space.release)
    workload, shape = LOADS[load]
    target = ModelTarget(space.release, DeviceModel(), workload=workload, load=shape)
    evaluator = Evaluator(target, Limits(warmup_budget_s=600.0))
    plan = make_plan(space, evaluator, points)
    started = [p for p in plan.points if p.vector is not None]
    step = max(1, len(started) // sample) if started else 1
    errors: dict[str, list[float]] = {k: [] for k in AGREEMENT}
    t0 = time.process_time()
    checked = started[::step][:sample]
    for p in checked:
        pred = predict(target, space.settings_for(p.values), evaluator.central)
        clock = predict_serving(target, pred)
        for k in AGREEMENT:
            errors[k].append(abs(p.figures[k] / clock[k] - 1.0))
    clock_ms = 1000 * (time.process_time() - t0) / max(1, len(checked))
    t = plan.timing
    return {"space": name, "load": load, "points": t["points"], "sampled": plan.sampled,
            "wall_s": round(t["wall_s"], 2), "cpu_s": round(t["cpu_s"], 2),
            "per_point_ms": round(t["per_point_ms"], 3), "clock_runs": t["clock_runs"], "replays": t["replays"],
            "bucket_builds": t["bucket_builds"], "feasible": plan.count(FEASIBLE), "front": len(plan.front),
            "distinct": plan.distinct, "checked": len(checked), "clock_ms_per_config": round(clock_ms, 1),
            "agreement": {k: {"median": statistics.median(v), "max": max(v)} if v else None
                          for k, v in errors.items()}}


def markdown(rows: list[dict]) -> str:
    out = ["| space | load | points | wall s | CPU ms / point | clock runs | replays | builds | "
           "thr err median / max | p99 TTFT err median / max | TPOT err median / max |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        a = r["agreement"]
        cells = [f"{100 * a[k]['median']:.2f}% / {100 * a[k]['max']:.2f}%" if a[k] else "-" for k in AGREEMENT]
        out.append(f"| {r['space']} | {r['load']} | {r['points']:,}{' (sample)' if r['sampled'] else ''} | "
                   f"{r['wall_s']:.1f} | {r['per_point_ms']:.2f} | {r['clock_runs']} | {r['replays']:,} | "
                   f"{r['bucket_builds']:,} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="3,000 points, 20 checked per space")
    ap.add_argument("--points", type=int, help="configurations per plan (default 50,000; quick 3,000)")
    ap.add_argument("--sample", type=int, help="configurations checked against the clock (default 60; quick 20)")
    ap.add_argument("--spaces", default=",".join(SPACES))
    ap.add_argument("--loads", default=",".join(LOADS))
    ap.add_argument("--out", help="output stem (default benchmarks/results/plan_speed[-quick])")
    args = ap.parse_args(argv)
    points = args.points or (3000 if args.quick else 50_000)
    sample = args.sample or (20 if args.quick else 60)
    rows = []
    for load in args.loads.split(","):
        for name in args.spaces.split(","):
            r = plan_space(name, load, points, sample)
            rows.append(r)
            print(f"{name} / {load}: {r['points']:,} points in {r['wall_s']:.1f} s wall, "
                  f"{r['per_point_ms']:.2f} ms CPU each", file=sys.stderr, flush=True)
    table = markdown(rows)
    print(table)
    stem = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / (
        "plan_speed" + ("-quick" if args.quick else ""))
    stem.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{stem}.json").write_text(json.dumps({"points": points, "sample": sample, "rows": rows}, indent=1) + "\n")
    Path(f"{stem}.md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
