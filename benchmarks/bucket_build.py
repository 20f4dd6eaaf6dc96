"""Time building the bucket lists of the largest vector (65,281 prompt buckets).

Reported, not asserted: `python benchmarks/bucket_build.py [--repeat N]`.
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

from tuner.buckets import get_profile  # noqa: E402

VECTOR_DIR = ROOT / "tests" / "data" / "vectors"  # upstream bucket lists, see SOURCES.md there


def largest_row():
    best = None
    for path in sorted(VECTOR_DIR.glob("*.json")):
        data = json.loads(path.read_text())
        for name, row in data["results"].items():
            if "prompt" not in row:
                continue
            n = row["prompt"]["count"] + row["decode"]["count"]
            if best is None or n > best[0]:
                best = (n, path.name, name, data, row)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    from tests.test_vectors import ROW_PROFILE, row_config

    _, file_name, row_name, data, row = largest_row()
    profile = get_profile(ROW_PROFILE[row_name.split("/")[0]])
    cfg = row_config(data, row)
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        plan = profile.build(cfg)
        times.append(time.perf_counter() - t0)
    print(f"vector {file_name} row {row_name}: {len(plan.prompt)} prompt + {len(plan.decode)} decode buckets")
    print(f"build time over {args.repeat} runs: median {statistics.median(times)*1000:.1f} ms, "
          f"min {min(times)*1000:.1f} ms, max {max(times)*1000:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
