"""A finished trial as the study stored it, typed: read a trial through TrialRecord, never through its
attribute names.

The study writes a trial's TrialResult into Optuna's user attributes (study/tell.py tell_result) and the
screen adds what it decided before any boot (study/screen.py). Everything that reads a study back (the
screen, the proposals, the shared cache, export, compare, the report) goes through
`TrialRecord.from_frozen(trial)`, so a renamed or added attribute changes one file.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import optuna

# The names of the attributes a trial carries, written by the study and the screen.
STATUS, REASON, FEASIBLE, BOOTED, REQUEUED = "status", "reason", "feasible", "booted", "requeued"
SCREENED, EFFECTIVE_KEY, CALIBRATION_SAMPLE = "screened", "effective_key", "calibration_sample"
SEED, REQUEUED_FROM, PLACEHOLDERS = "seed", "requeued_from", "placeholders"
OWNER = "owner"  # the tuner that asked for the trial: {"pid", "host", ...} (study/nodes.py)


@dataclass(frozen=True)
class TrialRecord:
    number: int
    state: optuna.trial.TrialState
    values: tuple[float, ...] | None
    params: dict[str, Any]
    status: str | None  # a TrialStatus value; None while the trial runs or when it was told by hand
    reason: str = ""
    feasible: bool = False
    booted: bool = False
    requeued: bool = False
    screened: str | None = None  # "rejected", "dominated" or "reused": decided without a boot
    effective_key: str | None = None  # what the release really reads (study/screen.py effective_key)
    server: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)
    predicted: dict[str, Any] = field(default_factory=dict)
    observed: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    calibration_sample: dict[str, float] = field(default_factory=dict)
    seed: str | None = None  # the enqueued seed's label: "release defaults", "calculator", "plan pick 1", ...
    requeued_from: int | None = None  # the trial whose parameters this one runs again (the environment failed it)
    placeholders: list[str] | None = None  # objectives told as penalties; None: stored before the attribute
    owner: dict[str, Any] = field(default_factory=dict)  # the tuner that ran it; empty: asked by hand
    attrs: dict[str, Any] = field(default_factory=dict)  # everything else the trial carries

    @classmethod
    def from_frozen(cls, trial: optuna.trial.FrozenTrial) -> TrialRecord:
        a = trial.user_attrs
        return cls(
            number=trial.number, state=trial.state, params=dict(trial.params),
            values=tuple(trial.values) if trial.values is not None else None,
            status=a.get(STATUS), reason=a.get(REASON) or "", feasible=bool(a.get(FEASIBLE)),
            booted=bool(a.get(BOOTED)), requeued=bool(a.get(REQUEUED)), screened=a.get(SCREENED),
            effective_key=a.get(EFFECTIVE_KEY), server=a.get("server") or {}, env=a.get("env") or {},
            argv=a.get("argv") or [], predicted=a.get("predicted") or {}, observed=a.get("observed") or {},
            metrics=a.get("metrics") or {}, artifacts=a.get("artifacts") or {}, timings=a.get("timings") or {},
            calibration_sample=a.get(CALIBRATION_SAMPLE) or {}, seed=a.get(SEED),
            requeued_from=a.get(REQUEUED_FROM), placeholders=a.get(PLACEHOLDERS), owner=a.get(OWNER) or {}, attrs=a,
        )

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def status_text(self) -> str:
        """The status, or the Optuna state's name while none is recorded (running, told by hand)."""
        return self.status or self.state.name.lower()

    @property
    def told_infeasible(self) -> bool:
        """Recorded outside a limit; unlike `not feasible`, a trial with no such record (told by hand) is not."""
        return FEASIBLE in self.attrs and not self.attrs[FEASIBLE]

    @property
    def settled(self) -> str:
        """How the trial was settled, in the words the trial lines and the summary use: measured (booted),
        reused (another trial's measurement of the same settings), predicted (not booted: the calibrated
        model put it behind a measured trial), rejected (before boot: invalid or over the warm-up budget
        as predicted), failed (booted and ended badly), running or waiting."""
        if self.state == optuna.trial.TrialState.RUNNING:
            return "running"
        if self.state == optuna.trial.TrialState.WAITING:
            return "waiting"
        if self.screened == "reused" or self.observed.get("reused_from") is not None:
            return "reused"
        if self.screened == "dominated":
            return "predicted"
        if self.screened == "rejected" or (not self.booted and self.status not in (None, "ok")):
            return "rejected"
        if self.booted:
            return "measured" if self.ok else "failed"
        return "told by hand" if self.status is None else "predicted"

    @property
    def measured(self) -> bool:
        """Booted and told with values: a measurement of its configuration."""
        return self.state == optuna.trial.TrialState.COMPLETE and self.booted and self.values is not None


def records(trials: Iterable[optuna.trial.FrozenTrial]) -> list[TrialRecord]:
    """The records of `trials`, in their order: built once where a loop reads a study's trials."""
    return [TrialRecord.from_frozen(t) for t in trials]


def as_record(trial: optuna.trial.FrozenTrial | TrialRecord) -> TrialRecord:
    """A trial's record; a record is taken as it is (a loop passes the ones it built)."""
    return trial if isinstance(trial, TrialRecord) else TrialRecord.from_frozen(trial)


def measured_trial(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> optuna.trial.FrozenTrial:
    """The trial that was booted for these settings: a reused trial records the result, not the env."""
    rec = TrialRecord.from_frozen(trial)
    earlier = rec.observed.get("reused_from")
    if earlier is None or rec.env:
        return trial
    match = [t for t in study.get_trials(deepcopy=False) if t.number == earlier]
    return match[0] if match else trial
