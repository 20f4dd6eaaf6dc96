"""A trial that reused an earlier trial's measurement (never booted) stands for that same boot: the
front that report, pareto.csv, export and compare show lists the measurement once."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial

from tuner.report.frame import pareto_frame
from tuner.results.export import Filters, pick_trial
from tuner.study.pareto import measured_front

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # set_metric_names


def _study() -> optuna.Study:
    study = optuna.create_study(directions=["maximize", "minimize", "minimize"],
                                storage=optuna.storages.InMemoryStorage())
    study.set_metric_names(["output_throughput", "p99_ttft_ms", "warmup_s"])
    dist = {"max_num_seqs": CategoricalDistribution([16, 32, 64])}

    def add(seqs, values, **observed):
        study.add_trial(create_trial(params={"max_num_seqs": seqs}, distributions=dist, values=values,
                                     user_attrs={"status": "ok", "observed": observed}))

    add(64, [1450.0, 1600.0, 230.0])                  # 0: on the front
    add(16, [860.0, 4800.0, 170.0])                   # 1: on the front (fastest warmup)
    add(32, [1200.0, 3400.0, 300.0])                  # 2: dominated by 0
    add(64, [1450.0, 1600.0, 230.0], reused_from=0)   # 3: trial 0's measurement again
    return study


def test_a_reused_measurement_is_on_the_front_once():
    study = _study()
    assert sorted(t.number for t in study.best_trials) == [0, 1, 3]  # Optuna's own view has the copy
    assert sorted(t.number for t in measured_front(study)) == [0, 1]
    assert list(pareto_frame(study)["number"]) == [0, 1]
    assert pick_trial(study, "throughput", Filters()).number == 0


def test_a_copy_whose_original_is_not_on_the_front_stays():
    study = _study()
    dist = {"max_num_seqs": CategoricalDistribution([16, 32, 64])}
    study.add_trial(create_trial(params={"max_num_seqs": 32}, distributions=dist, values=[1500.0, 1500.0, 200.0],
                                 user_attrs={"status": "ok", "observed": {"reused_from": 2}}))
    assert sorted(t.number for t in measured_front(study)) == [1, 4]  # 4 dominates 0; 2 is not on it
