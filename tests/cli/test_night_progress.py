"""The study-level progress line: done of planned, boots, accelerator-hours, the best so far and the
time left, estimated from this run's boots; checked on a virtual-clock study (no wall clock involved)."""

from __future__ import annotations

from tuner.commands.tuneprogress import NightProgress
from tuner.trial.result import TrialResult
from tuner.vocabulary.status import TrialStatus


def _boot(total_s: float, thr: float, tp: int = 1) -> TrialResult:
    return TrialResult(status=TrialStatus.OK, booted=True, metrics={"output_throughput": thr},
                       server={"tensor_parallel_size": tp},
                       timings={"total_s": total_s, "boot_and_warmup_s": total_s - 60.0, "load_s": 60.0})


def test_the_estimate_is_the_boots_to_go_times_this_runs_mean_boot_over_the_slots():
    night = NightProgress(planned=20, slots=2, done_before=8, backend={"kind": "vllm"}, best=(900.0, 3))
    assert night.seconds_left() is None and "unknown until the first boot" in night.line()
    night.record(8, _boot(600.0, 1000.0, tp=2))
    night.record(9, _boot(1200.0, 800.0))
    night.record(10, TrialResult(status=TrialStatus.OK, booted=False, observed={"reused_from": 8}))
    # 20 - 10 = 10 boots to go, 5 rounds of 2 slots, 900 s a boot
    assert night.seconds_left() == 5 * 900.0
    line = night.line()
    assert line.startswith("progress: 10 of 20 measured (2 this run, 1 reused or screened)")
    assert "best so far 1,000 tok/s (trial 8)" in line and "10 boots to go" in line
    # device time: 600 s on 2 cards + 1200 s on 1 card = 2400 card-seconds
    assert "0.67 accelerator-hours" in line


def test_an_infeasible_trial_is_not_the_best_and_a_finished_budget_says_so():
    night = NightProgress(planned=1, slots=1, done_before=0, backend={"kind": "vllm"})
    night.record(0, _boot(100.0, 5000.0), feasible=False)
    assert night.best is None and "budget reached" in night.line()
