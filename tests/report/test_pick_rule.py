"""Picks a person can check: the balanced pick's rule in one sentence with the runner-up and why it lost,
and `export` naming the closest trial when its limits exclude every trial."""

from __future__ import annotations

import re

import optuna
import pytest

from tuner.report.facts import balanced_rule
from tuner.results.export import ExportError, Filters, pick_trial
from tuner.study.pareto import ideal_distances

NAMES = ["output_throughput", "p99_ttft_ms", "warmup_s"]
DIRS = ["maximize", "minimize", "minimize"]
# The demo: trial 4 has more throughput and less latency for 30 s more warm-up.
FRONT = {1: [900.0, 900.0, 120.0], 3: [1243.0, 3370.0, 199.0], 4: [1475.0, 1591.0, 229.0], 5: [700.0, 600.0, 100.0]}


@pytest.fixture
def study():
    import warnings

    s = optuna.create_study(directions=DIRS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        s.set_metric_names(NAMES)
    for number in range(6):
        values = FRONT.get(number, [100.0, 9000.0, 900.0])  # 0 and 2: dominated
        t = optuna.trial.create_trial(values=values, user_attrs={"status": "ok", "feasible": True,
                                                                 "metrics": {"p99_ttft_ms": values[1]}})
        s.add_trial(t)
    return s


def test_the_rule_names_the_pick_the_runner_up_and_why(study):
    pick = pick_trial(study, "balanced", Filters())
    front = [t for t in study.best_trials]
    text = balanced_rule(front, pick, NAMES, DIRS)
    dist = dict(zip([t.number for t in front], ideal_distances([t.values for t in front], DIRS)))
    runner = min((n for n in dist if n != pick.number), key=lambda n: dist[n])
    assert text.startswith("Balanced pick rule: each objective is scaled over the feasible front from 0")
    assert f"trial {pick.number} is at {dist[pick.number]:.2f}" in text
    assert f"the runner-up, trial {runner} at {dist[runner]:.2f}, loses on " in text
    assert dist[pick.number] <= dist[runner]
    assert text.count(". ") == 0  # one sentence


def test_a_lone_front_says_so(study):
    t = study.trials[3]
    assert balanced_rule([t], t, NAMES, DIRS) == ("Trial 3 is the only trial on the feasible front, so it is the "
                                                  "balanced pick.")


def test_export_names_the_closest_trial_when_limits_exclude_all(study):
    with pytest.raises(ExportError) as info:
        pick_trial(study, "balanced", Filters(max_warmup_s=60))
    msg = str(info.value)
    assert "none of the 4 Pareto trials passes the filters (warmup <= 60 s)" in msg
    assert re.search(r"closest: trial 5 \(700 tok/s, p99_ttft_ms 600 ms, warm-up 100 s\); --max-warmup 100 would "
                     r"admit it", msg), msg
    # trial 1 misses throughput by 36%, trial 4 the TTFT limit by 59%: trial 1 is closer
    with pytest.raises(ExportError, match=r"closest: trial 1 .*; --min-throughput 900 would admit it"):
        pick_trial(study, "throughput", Filters(min_throughput=1400, metric_limits={"p99_ttft_ms": 1000}))
