"""Every use of Optuna's private API, in one place (tested against the installed Optuna by
tests/study/test_optuna_private.py; pyproject.toml bounds optuna to the major versions checked).

The public API has no way to: start a trial with given parameters without taking a waiting one
(study.ask pops the oldest enqueued trial; tune --confirm re-measures a configuration of its choice),
beat a heartbeat for an ask/tell trial, list the trials whose heartbeat went stale, write a trial's
attributes or state once it is no longer ours (a dead tuner's trial), or mirror constraints where
optuna-dashboard reads them. When Optuna changes one of these, this module
is the one to adapt.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.trial import TrialState

__all__ = ["BaseHeartbeat", "fail_trial_of_dead_tuner", "heartbeat_storage", "mirror_constraints",
           "new_running_trial", "stale_trial_ids", "storage_of", "trial_id"]


def storage_of(study: optuna.Study) -> optuna.storages.BaseStorage:
    return study._storage


def trial_id(trial: optuna.Trial | optuna.trial.FrozenTrial) -> int:
    """The storage's id of a trial (its `number` counts within the study, the id across the storage)."""
    return trial._trial_id


def heartbeat_storage(study: optuna.Study) -> BaseHeartbeat | None:
    """The study's storage when it records heartbeats (an RDB storage with an interval), else None."""
    storage = storage_of(study)
    if isinstance(storage, BaseHeartbeat) and storage.get_heartbeat_interval():
        return storage
    return None


def stale_trial_ids(storage: BaseHeartbeat, study: optuna.Study) -> list[int]:
    return list(storage._get_stale_trial_ids(study._study_id))


def fail_trial_of_dead_tuner(study: optuna.Study, trial: optuna.trial.FrozenTrial,
                             user_attrs: dict[str, Any], system_attrs: dict[str, Any]) -> None:
    """Record what happened to a RUNNING trial whose tuner died, then fail it."""
    storage, tid = storage_of(study), trial_id(trial)
    for key, value in system_attrs.items():
        storage.set_trial_system_attr(tid, key, value)
    for key, value in user_attrs.items():
        storage.set_trial_user_attr(tid, key, value)
    storage.set_trial_state_values(tid, state=TrialState.FAIL)


def mirror_constraints(study: optuna.Study, trial: optuna.Trial, values: list[float]) -> None:
    """optuna-dashboard 0.21 reads only the legacy "constraints" system attribute."""
    storage_of(study).set_trial_system_attr(trial_id(trial), "constraints", values)


def new_running_trial(study: optuna.Study, params: dict[str, Any], distributions: dict[str, Any],
                      user_attrs: dict[str, Any]) -> optuna.Trial:
    """A RUNNING trial with these parameters, told later like an asked one (enqueued trials stay waiting)."""
    import datetime

    template = optuna.trial.FrozenTrial(
        number=-1, state=TrialState.RUNNING, value=None, datetime_start=datetime.datetime.now(),
        datetime_complete=None, params=params, distributions=distributions, user_attrs=user_attrs,
        system_attrs={}, intermediate_values={}, trial_id=-1)
    tid = storage_of(study).create_new_trial(study._study_id, template_trial=template)
    return optuna.Trial(study, tid)
