"""tune --confirm's decision (tuner/study/confirm.py) and the estimator (tuner/study/measurements.py), on
estimates written by hand: which picks stand within the noise, who their rivals are, what is measured
next and whether on the same boot."""

from __future__ import annotations

import math

import pytest

from tuner.study import confirm as C
from tuner.study.measurements import SAME_BOOT, WARMUP, combine

OBJ = ("output_throughput", "p99_ttft_ms", "warmup_s")


def est(key: str, thr: list[float], lat: list[float], warm: list[float]):
    """An estimate from measurements (one boot each)."""
    return combine([{OBJ[0]: a, OBJ[1]: b, WARMUP: c} for a, b, c in zip(thr, lat, warm)], key)


def test_estimator_means_load_runs_over_all_and_warmup_over_boots():
    e = combine([{"output_throughput": 100.0, WARMUP: 50.0}, {"output_throughput": 110.0, WARMUP: 50.0, SAME_BOOT: 0},
                 {"output_throughput": 120.0, WARMUP: 70.0}], "k", [0, 1, 2])
    assert e.n == 3 and e.boots == 2 and e.latest == 2
    assert e.mean("output_throughput") == pytest.approx(110.0)
    assert e.mean(WARMUP) == pytest.approx(60.0)  # the same-boot run did not warm up again
    assert e.samples[WARMUP] == (50.0, 70.0)


def test_clearly_separated_picks_are_settled_with_nothing_to_measure():
    ests = {"a": est("a", [100], [200], [100]), "b": est("b", [200], [400], [200]), "c": est("c", [150], [900], [300])}
    d = C.decide(ests, set(ests), C.Question(OBJ))
    assert d.picks["balanced"] in {"a", "b"}
    assert d.settled(0.9) and d.confidence["balanced"] >= 0.99
    assert C.next_measurement(d, ests) is None


def front_with(b: dict, b2: dict) -> dict:
    """Two ends of a front and, between them, the balanced candidates b and b2."""
    return {"low": est("low", [100], [100], [100]), "high": est("high", [300], [1000], [300]), "b": b, "b2": b2}


def test_a_rival_within_the_noise_is_named_and_both_are_worth_measuring():
    # b and b2 differ by 5% in p99 latency: the tail latency's noise (15%) can swap them.
    ests = front_with(est("b", [200], [400], [200]), est("b2", [200], [420], [200]))
    d = C.decide(ests, set(ests), C.Question(OBJ))
    pick = d.picks["balanced"]
    assert pick in {"b", "b2"}
    rival = ({"b", "b2"} - {pick}).pop()
    assert rival in d.rivals["balanced"]
    assert not d.settled(0.9)
    assert d.involvement[pick] > 0 and d.involvement[rival] > 0
    assert C.next_measurement(d, ests) in {"b", "b2"}
    assert "low" not in d.rivals["balanced"] and "high" not in d.rivals["balanced"]


def test_repeated_measurements_settle_the_same_question():
    few = front_with(est("b", [200], [380], [200]), est("b2", [200], [440], [200]))
    many = front_with(est("b", [200] * 12, [380] * 12, [200] * 12), est("b2", [200] * 12, [440] * 12, [200] * 12))
    q = C.Question(OBJ)
    assert C.decide(many, set(many), q).confidence["balanced"] > C.decide(few, set(few), q).confidence["balanced"]


def test_an_slo_borderline_pick_is_doubted_through_its_own_noise():
    # The highest throughput under 300 ms is measured at 290 ms: a redraw breaks the SLO often.
    ests = {"edge": est("edge", [300], [290], [100]), "safe": est("safe", [250], [150], [100])}
    q = C.Question(OBJ, pick_slos={"p99_ttft_ms": 300.0})
    d = C.decide(ests, set(ests), q)
    assert d.picks["slo:p99_ttft_ms"] == "edge"
    assert d.confidence["slo:p99_ttft_ms"] < 0.9
    assert d.involvement["edge"] > 0
    assert C.next_measurement(d, ests) == "edge"
    # Twelve load runs put it clearly under the limit: the SLO pick stands.
    sure = {**ests, "edge": est("edge", [300] * 12, [240] * 12, [100] * 12)}
    assert C.decide(sure, set(sure), q).confidence["slo:p99_ttft_ms"] >= 0.9


def test_an_ineligible_configuration_is_never_picked():
    ests = {"a": est("a", [100], [200], [100]), "bad": est("bad", [500], [100], [50])}
    d = C.decide(ests, {"a"}, C.Question(OBJ))
    assert d.picks["balanced"] == "a" and d.settled(0.9)


def one_boot(key: str, runs: int, lat: float, warm: float):
    """A configuration measured in `runs` load runs on a single boot."""
    return combine([{OBJ[0]: 200.0, OBJ[1]: lat, WARMUP: warm, **({SAME_BOOT: 0} if i else {})} for i in range(runs)],
                   key)


def test_another_load_run_when_latency_is_in_doubt_a_new_boot_when_the_warmup_is():
    # Latency in doubt (5% apart, one load run each), the same warm-up: a cheap load run on the same boot helps.
    lat = front_with(one_boot("b", 1, 400, 200), one_boot("b2", 1, 420, 200))
    d = C.decide(lat, set(lat), C.Question(OBJ))
    k = C.next_measurement(d, lat)
    assert d.warmup_share[k] < 0.5
    assert C.another_run(d, lat, k, run_h=0.01, boot_h={x: 0.1 for x in lat})
    # Eight load runs each pinned their latency; their warm-ups (one boot each) are 3% apart: a load run
    # does not measure that, a boot does.
    warm = front_with(one_boot("b", 8, 400, 200), one_boot("b2", 8, 400, 206))
    d = C.decide(warm, set(warm), C.Question(OBJ))
    k = C.next_measurement(d, warm)
    assert k in {"b", "b2"} and d.warmup_share[k] > 0.5
    assert not C.another_run(d, warm, k, run_h=0.01, boot_h={x: 0.1 for x in warm})


def test_pooled_noise_starts_at_the_prior_and_follows_the_repeats():
    one = [est("a", [100], [200], [100])]
    assert C.pooled_sd(one, "p99_ttft_ms") == pytest.approx(C.PRIOR_SD["tail"])
    assert C.pooled_sd(one, "median_ttft_ms") == pytest.approx(C.PRIOR_SD["median"])
    steady = [est(k, [100] * 10, [200] * 10, [100] * 10) for k in "abc"]  # 27 repeats, no spread
    assert C.pooled_sd(steady, "p99_ttft_ms") < 0.5 * C.PRIOR_SD["tail"]
    wild = [est(k, [100] * 4, [100, 300, 100, 300], [100] * 4) for k in "abc"]
    assert C.pooled_sd(wild, "p99_ttft_ms") > 2 * C.PRIOR_SD["tail"]
    assert math.isfinite(C.pooled_sd(wild, "output_throughput"))


def test_confirm_budget_flag_reads_a_share_or_hours():
    from tuner.commands import UsageError
    from tuner.commands.tuneconfirm import parse_budget

    assert parse_budget("15%") == (0.15, None)
    assert parse_budget("2.5h") == (None, 2.5)
    assert parse_budget("90m") == (None, 1.5)
    with pytest.raises(UsageError, match="--confirm-budget 'lots'"):
        parse_budget("lots")
