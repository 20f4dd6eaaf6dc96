"""Which Pareto trials of a shared-cache study are re-booted cold (tuner/study/sharedcache.py), on records
whose answers are known: the exported picks first, then the others whose predicted cold warmup is
uncertain, judged by the error the picks' own re-boots showed."""

from __future__ import annotations

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from tuner.study.sharedcache import PRIOR_ERROR_PER_SHARE, REBOOT_ATTR, WIDE_BAND, cold_reboots, extrapolated_share


def _trial(x, values, rate, cold=100.0, cached=40.0, measured_cold=None):
    observed = {"status": "ok", "warmup_s": 50.0, "recipe_cache_hit_rate": rate}
    if measured_cold is not None:
        observed["warmup_cold_s"] = measured_cold
    return create_trial(state=TrialState.COMPLETE, values=values, params={"x": x},
                        distributions={"x": CategoricalDistribution(list(range(10)))},
                        user_attrs={"status": "ok", "feasible": True, "observed": observed,
                                    "predicted": {"warmup_cold_s": cold, "warmup_cached_s": cached}})


def _study(trials):
    study = optuna.create_study(directions=["maximize", "minimize", "minimize"])
    for t in trials:
        study.add_trial(t)
    return study


def test_share_extrapolated_is_the_hit_rate_times_the_cached_part():
    t = _trial(0, [1, 1, 1], rate=0.5, cold=100.0, cached=40.0)
    assert extrapolated_share(t) == 0.5 * 0.6
    assert extrapolated_share(_trial(0, [1, 1, 1], rate=None)) is None


def test_picks_first_then_only_the_uncertain_ones():
    # a front of four (each best at something): 0 measured cold; 1 a pick; 2 and 3 predicted
    study = _study([_trial(0, [10, 5, 5], rate=0.0, measured_cold=90.0),
                    _trial(1, [9, 1, 6], rate=1.0),             # share 0.6
                    _trial(2, [8, 6, 1], rate=0.1),             # share 0.06
                    _trial(3, [7, 0.5, 9], rate=0.9)])          # share 0.54
    order, truth = [], {1: 99.0, 2: 100.0, 3: 50.0}

    def measure(t, why):
        order.append((t.number, why))
        return truth[t.number]

    done = cold_reboots(study, {1}, measure)
    # the pick's prediction (100 s) was 1% off its measured 99 s over a share of 0.6: error per share
    # 0.017; trial 2's band 0.06 x 0.017 and trial 3's 0.54 x 0.017 are both narrow
    assert order == [(1, "an exported pick")] and done == [1]
    assert study.user_attrs[REBOOT_ATTR]["1"]["warmup_cold_s"] == 99.0


def test_a_pick_that_was_far_off_widens_the_others_bands():
    # trials 0 (the pick, share 0.6), 1 (share 0.06), 2 (share 0.54)
    study = _study([_trial(1, [9, 1, 6], rate=1.0), _trial(2, [8, 6, 1], rate=0.1), _trial(3, [7, 0.5, 9], rate=0.9)])
    order = []

    def measure(t, why):
        order.append(t.number)
        return 70.0 if t.number == 0 else 100.0  # the pick's prediction was 43% off

    cold_reboots(study, {0}, measure)
    # error per share 0.43 / 0.6 = 0.71: trial 2 (share 0.54, band 39%) is measured, trial 1 (share 0.06,
    # band 4%) is not
    assert order == [0, 2]


def test_without_a_pick_to_learn_from_the_prior_judges():
    study = _study([_trial(2, [8, 6, 1], rate=0.1), _trial(3, [7, 0.5, 9], rate=0.9)])
    order = []
    cold_reboots(study, set(), lambda t, why: order.append(t.number) or 100.0)
    assert 0.06 * PRIOR_ERROR_PER_SHARE <= WIDE_BAND < 0.54 * PRIOR_ERROR_PER_SHARE
    assert order == [1]
