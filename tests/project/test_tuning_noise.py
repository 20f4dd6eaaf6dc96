"""The benchmark's noise model (benchmarks/tuning/noise.py): seeded and reproducible, fresh per
measurement, the first-run penalty on a fresh boot only, tails heavier than medians."""

from __future__ import annotations

import statistics

from benchmarks.tuning import noise as N

TRUE = {"output_throughput": 1000.0, "duration": 30.0, "median_ttft_ms": 100.0, "p99_ttft_ms": 400.0,
        "median_tpot_ms": 20.0, "p99_tpot_ms": 40.0, "failed": 0}


def runs(level: str, fresh: bool, n: int = 400) -> list[dict]:
    return [N.load_run(TRUE, N.LEVELS[level], N.rng_for(0, "noisy_node", "k", i), fresh_boot=fresh) for i in range(n)]


def test_each_measurement_draws_fresh_noise_reproducibly():
    a = N.load_run(TRUE, N.LEVELS["typical"], N.rng_for(3, "typical_noise", "k", 0), fresh_boot=True)
    assert a == N.load_run(TRUE, N.LEVELS["typical"], N.rng_for(3, "typical_noise", "k", 0), fresh_boot=True)
    b = N.load_run(TRUE, N.LEVELS["typical"], N.rng_for(3, "typical_noise", "k", 1), fresh_boot=True)
    c = N.load_run(TRUE, N.LEVELS["typical"], N.rng_for(3, "typical_noise", "k", 0, run=1), fresh_boot=False)
    assert a["output_throughput"] != b["output_throughput"] != c["output_throughput"]
    assert a["failed"] == 0 and a["duration"] * a["output_throughput"] == TRUE["duration"] * TRUE["output_throughput"]


def test_first_run_penalty_on_fresh_boots_only_and_heavier_tails():
    fresh, warm = runs("noisy", True), runs("noisy", False)
    assert statistics.fmean(r["output_throughput"] for r in fresh) < statistics.fmean(
        r["output_throughput"] for r in warm)
    assert statistics.fmean(r["p99_ttft_ms"] for r in fresh) > 1.2 * statistics.fmean(r["p99_ttft_ms"] for r in warm)
    spread = {k: statistics.pstdev(r[k] / TRUE[k] for r in warm) for k in ("median_ttft_ms", "p99_ttft_ms")}
    assert spread["p99_ttft_ms"] > 2 * spread["median_ttft_ms"]
    typical = runs("typical", False)
    assert statistics.pstdev(r["output_throughput"] for r in typical) < statistics.pstdev(
        r["output_throughput"] for r in warm)


def test_warmup_drifts_per_boot_and_the_noise_scenarios_are_named():
    import numpy as np

    f = [N.warmup_factor(N.LEVELS["noisy"], np.random.default_rng(i)) for i in range(300)]
    assert min(f) < 0.9 and max(f) > 1.2  # leftover recipes and host load
    assert N.level_of("typical_noise").name == "typical" and N.level_of("nominal") is None
