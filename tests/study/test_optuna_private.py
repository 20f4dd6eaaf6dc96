"""tuner/study/optuna_private.py against the installed Optuna: every private call the tuner makes still
does what the tuner relies on. An Optuna upgrade that changes one fails here, by name, and not in the
middle of a night's study."""

from __future__ import annotations

import time

import optuna
import pytest
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from tuner.study import optuna_private as P


@pytest.fixture
def rdb_study(tmp_path):
    storage = RDBStorage(f"sqlite:///{tmp_path / 'study.db'}", heartbeat_interval=1, grace_period=1)
    return optuna.create_study(storage=storage, study_name="private", directions=["maximize", "minimize"])


def test_storage_and_trial_ids(rdb_study):
    trial = rdb_study.ask()
    assert P.storage_of(rdb_study) is rdb_study._storage
    tid = P.trial_id(trial)
    assert P.storage_of(rdb_study).get_trial(tid).number == trial.number
    assert P.trial_id(rdb_study.trials[0]) == tid  # a FrozenTrial names the same row


def test_heartbeat_storage_only_when_heartbeats_are_on(rdb_study):
    assert P.heartbeat_storage(rdb_study) is P.storage_of(rdb_study)
    assert P.heartbeat_storage(optuna.create_study()) is None  # in memory: no heartbeat


def test_a_trial_without_beats_goes_stale_and_is_failed_with_its_attributes(rdb_study):
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    trial = rdb_study.ask()
    storage = P.heartbeat_storage(rdb_study)
    storage.record_heartbeat(P.trial_id(trial))
    time.sleep(2.5)  # past the 1 s grace period, no further beat
    assert P.stale_trial_ids(storage, rdb_study) == [P.trial_id(trial)]
    frozen = rdb_study.trials[0]
    P.fail_trial_of_dead_tuner(rdb_study, frozen, {"status": "tuner_died"}, {"tuner_recovered": True})
    frozen = rdb_study.trials[0]
    assert frozen.state == TrialState.FAIL
    assert frozen.user_attrs["status"] == "tuner_died" and frozen.system_attrs["tuner_recovered"] is True
    assert P.stale_trial_ids(storage, rdb_study) == []


def test_constraints_are_mirrored_where_the_dashboard_reads_them(rdb_study):
    trial = rdb_study.ask()
    P.mirror_constraints(rdb_study, trial, [1.5, -2.0])
    assert rdb_study.trials[0].system_attrs["constraints"] == [1.5, -2.0]


def test_a_trial_of_chosen_parameters_leaves_the_waiting_ones_waiting(rdb_study):
    dist = {"x": optuna.distributions.CategoricalDistribution([1, 2, 3])}
    rdb_study.enqueue_trial({"x": 1})  # a seed the budget left waiting: study.ask would pop it
    trial = P.new_running_trial(rdb_study, {"x": 3}, dist, {"confirm": "why"})
    assert trial.suggest_categorical("x", [1, 2, 3]) == 3 and trial.user_attrs["confirm"] == "why"
    rdb_study.tell(trial, [1.0, 2.0])
    done, waiting = (rdb_study.get_trials(states=(s,)) for s in (TrialState.COMPLETE, TrialState.WAITING))
    assert [t.params for t in done] == [{"x": 3}]
    assert [t.system_attrs.get("fixed_params") for t in waiting] == [{"x": 1}]
