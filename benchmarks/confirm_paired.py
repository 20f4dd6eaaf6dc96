"""Does confirmation pay? `full` against `full+confirm`, paired seed by seed, from a tuning-efficiency run.

    python benchmarks/confirm_paired.py benchmarks/results/RUN.json [--out FILE.json]

Both contenders search draw for draw alike (the same seed, the same noise), so per seed the difference of
their pick regrets is the confirmation's doing alone; the mean of those differences, with its standard
error, says whether it helps more than the seeds scatter. Also the confirmation's extra accelerator-hours
(its hours over the search's). `--out`: the per-seed regrets, a small file beside the table.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

RULES = ("balanced", "slo")


def paired(doc: dict) -> list[dict]:
    rows = []
    for key, pr in doc["problems"].items():
        for scenario, cell in pr["scenarios"].items():
            runs = cell.get("true_runs") or {}
            if "full" not in runs or "full+confirm" not in runs:
                continue
            extra = [r["confirm_h"] / (r["hours"] - r["confirm_h"]) for r in runs["full+confirm"]
                     if r["hours"] > r["confirm_h"]]
            for rule in RULES:
                a, b = ({r["seed"]: r[f"regret_{rule}"]["rule"] for r in runs[n] if r[f"regret_{rule}"]}
                        for n in ("full", "full+confirm"))
                seeds = sorted(set(a) & set(b))
                if len(seeds) < 2:
                    continue
                rows.append({"problem": key, "scenario": scenario, "rule": rule, "seeds": seeds,
                             "full": [a[s] for s in seeds], "confirm": [b[s] for s in seeds],
                             "extra_hours": statistics.mean(extra) if extra else None})
    return rows


def _se(values: list[float]) -> float:
    return statistics.stdev(values) / math.sqrt(len(values))


def table(rows: list[dict]) -> str:
    out = ["| problem | scenario | pick | seeds | full | full+confirm | confirm - full (paired) | share left "
           "| extra accel-h |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        d = [y - x for x, y in zip(r["full"], r["confirm"])]
        mx, my = statistics.mean(r["full"]), statistics.mean(r["confirm"])
        share = f"{100 * my / mx:.0f}%" if mx > 0.05 else "-"
        out.append(f"| {r['problem']} | {r['scenario']} | {r['rule']} | {len(r['seeds'])} | {mx:.1f} ± "
                   f"{_se(r['full']):.1f} | {my:.1f} ± {_se(r['confirm']):.1f} | {statistics.mean(d):+.1f} ± "
                   f"{_se(d):.1f} | {share} | +{100 * (r['extra_hours'] or 0):.0f}% |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("result", type=Path, help="a tuning_efficiency.py JSON with full and full+confirm")
    ap.add_argument("--out", type=Path, help="write the per-seed regrets here (JSON)")
    args = ap.parse_args()
    try:
        rows = paired(json.loads(args.result.read_text()))
    except (OSError, ValueError, KeyError) as exc:
        raise SystemExit(f"{args.result}: not a tuning_efficiency.py result ({exc})") from None
    if not rows:
        raise SystemExit(f"{args.result}: no cell holds both full and full+confirm")
    print(table(rows))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
