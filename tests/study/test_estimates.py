"""How sure: the spread of configurations measured more than once (tuner/study/estimates.py), on records built
directly; tests/study/test_spread_study.py runs a --remeasure 2 study end to end."""

from __future__ import annotations

import math

import optuna
import pytest

from tuner.study.estimates import Spread, estimate, t_quantile
from tuner.vocabulary.record import TrialRecord

NAMES = ["output_throughput", "p99_ttft_ms", "warmup_s"]
DIRS = ["maximize", "minimize", "minimize"]


def rec(number: int, key: str, thr: float, ttft: float, warm: float, own: dict | None = None,
        **kw) -> TrialRecord:
    observed = {"warmup_s": warm, **kw.pop("observed", {})}
    if own is not None:  # a measurement told the configuration's mean keeps its own figures (measurements.py)
        kw["attrs"] = {"measurement": own}
    return TrialRecord(number=number, state=optuna.trial.TrialState.COMPLETE, values=(thr, ttft, warm), params={},
                       status=kw.pop("status", "ok"), booted=kw.pop("booted", True), effective_key=key,
                       metrics={"output_throughput": thr, "p99_ttft_ms": ttft}, observed=observed, **kw)


def test_a_t_interval_as_the_tables_give_it():
    e = estimate([1.0, 2.0, 3.0])
    assert (e.n, e.mean, e.sd) == (3, 2.0, 1.0)
    assert e.half == pytest.approx(4.303 / math.sqrt(3))  # t(0.975, 2)
    assert t_quantile(1) == 12.706 and t_quantile(22) == 2.086 and t_quantile(500) == 1.960


def test_one_measurement_has_no_interval_and_says_so():
    e = estimate([812.0])
    assert (e.n, e.low, e.high, e.half) == (1, None, None, None)
    assert e.text() == "812 (one measurement)" and e.overlaps(estimate([1.0, 2.0])) is None
    assert estimate([]) is None


def test_a_boot_told_the_mean_is_read_by_its_own_figures():
    """--remeasure tells a configuration's later boot the mean of all; its own figures stay beside them."""
    first = rec(0, "A", 100.0, 500.0, 60.0)
    second = rec(1, "A", 110.0, 450.0, 61.0, own={"output_throughput": 120.0, "p99_ttft_ms": 400.0, "warmup_s": 62.0})
    s = Spread([first, second], NAMES, DIRS)
    thr, ttft, warm = s.of(1)
    assert (thr.n, thr.mean, ttft.mean, warm.mean) == (2, 110.0, 450.0, 61.0)
    assert s.of(0) == s.of(1)  # one configuration, one estimate


def test_reused_screened_and_failed_records_are_not_measurements():
    recs = [rec(0, "A", 100.0, 500.0, 60.0), rec(1, "A", 100.0, 500.0, 60.0, observed={"reused_from": 0}),
            rec(2, "A", 90.0, 500.0, 60.0, screened="dominated"), rec(3, "A", 0.0, 0.0, 60.0, status="runtime_oom"),
            rec(4, "A", 80.0, 500.0, 60.0, booted=False)]
    s = Spread(recs, NAMES, DIRS)
    assert s.n(0) == 1 and s.n(1) == 1  # the reused trial stands for trial 0's boot


def study_of(a: list[tuple], b: list[tuple]) -> Spread:
    recs = [rec(i, "A", *x) for i, x in enumerate(a)] + [rec(10 + i, "B", *x) for i, x in enumerate(b)]
    return Spread(recs, NAMES, DIRS)


def test_overlapping_intervals_everywhere_they_differ_are_indistinguishable_and_the_pick_says_so():
    s = study_of([(100, 500, 60), (110, 520, 60)], [(104, 510, 60), (112, 530, 60)])
    assert s.verdict(0, 10) == (True, [0, 1])  # the warm-ups are equal: not a difference
    assert s.indistinguishable([0, 10]) == [(0, 10)]
    said = s.pick_evidence(0, 10)
    assert said.startswith("The choice rests on a difference inside the noise") and "twice and twice" in said


def test_intervals_apart_on_one_objective_tell_the_points_apart():
    s = study_of([(100, 500, 60), (101, 502, 60)], [(150, 505, 60), (151, 501, 60)])
    assert s.verdict(0, 10)[0] is False and s.indistinguishable([0, 10]) == []
    said = s.pick_evidence(0, 10)
    assert "differ beyond the noise" in said and "tok/s" in said and "p99 TTFT" not in said


def test_one_measurement_leaves_it_open_never_invents_an_interval():
    s = study_of([(100, 500, 60)], [(104, 510, 60), (112, 530, 60)])
    assert s.verdict(0, 10)[0] is None and s.indistinguishable([0, 10]) == []
    said = s.pick_evidence(0, 10)
    assert "not known" in said and "trial 0 measured once" in said and "trial 10" not in said.split("not known")[1]
    assert "one measurement" in s.describe(0) and "t-interval" in s.describe(10)
