"""TrialRecord: a stored trial read back typed, whatever the study recorded (or, told by hand, did not)."""

from __future__ import annotations

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from tuner.vocabulary.record import TrialRecord, as_record, measured_trial, records


def _trial(number=0, state=TrialState.COMPLETE, values=(100.0, 50.0, 30.0), **attrs):
    t = create_trial(state=state, values=list(values) if values else None, params={"max_num_seqs": 64},
                     distributions={"max_num_seqs": CategoricalDistribution([32, 64])}, user_attrs=attrs)
    t.number = number
    return t


def test_a_measured_trial_reads_back_typed():
    r = TrialRecord.from_frozen(_trial(status="ok", feasible=True, booted=True, seed="release defaults",
                                       placeholders=[], metrics={"output_throughput": 100.0},
                                       observed={"warmup_s": 30.0}, env={"VLLM_X": "1"}))
    assert r.ok and r.measured and r.status_text == "ok" and not r.told_infeasible
    assert r.params == {"max_num_seqs": 64} and r.values == (100.0, 50.0, 30.0)
    assert r.metrics["output_throughput"] == 100.0 and r.observed["warmup_s"] == 30.0 and r.env == {"VLLM_X": "1"}
    assert r.seed == "release defaults" and r.placeholders == [] and r.requeued_from is None


def test_a_trial_told_by_hand_has_defaults_not_errors():
    r = TrialRecord.from_frozen(_trial(values=(1.0, 2.0, 3.0)))
    assert r.status is None and r.status_text == "complete" and r.reason == ""
    assert not r.feasible and not r.told_infeasible  # no record of a limit: not "told infeasible"
    assert not r.measured and r.placeholders is None  # stored before the attribute existed
    assert r.metrics == r.observed == r.server == {} and r.argv == []
    nulls = TrialRecord.from_frozen(_trial(reason=None, metrics=None, observed=None, status=""))
    assert nulls.reason == "" and nulls.metrics == nulls.observed == {} and nulls.status_text == "complete"


def test_infeasible_running_and_requeued_trials():
    assert TrialRecord.from_frozen(_trial(status="ok", feasible=False)).told_infeasible
    running = TrialRecord.from_frozen(_trial(state=TrialState.RUNNING, values=None))
    assert running.status_text == "running" and running.values is None and not running.measured
    again = TrialRecord.from_frozen(_trial(number=3, requeued_from=1, requeued=True))
    assert again.requeued and again.requeued_from == 1


def test_records_are_built_once_and_a_record_passes_through():
    trials = [_trial(number=n, status="ok") for n in range(3)]
    built = records(trials)
    assert [r.number for r in built] == [0, 1, 2]
    assert as_record(built[1]) is built[1] and as_record(trials[2]).number == 2


def test_a_reused_trial_points_at_the_booted_one():
    study = optuna.create_study(directions=["maximize", "minimize", "minimize"])
    study.add_trial(_trial(status="ok", booted=True, env={"VLLM_X": "1"}))
    study.add_trial(_trial(number=1, status="ok", observed={"reused_from": 0}))
    booted, reused = study.get_trials()
    assert measured_trial(study, reused).number == 0 and measured_trial(study, booted).number == 0
