"""Everything the report's sections read, gathered once per study."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import optuna
import pandas as pd
from optuna.trial import FrozenTrial, TrialState

from ..study.estimates import Spread
from ..study.pareto import measured_front
from ..vocabulary.record import TrialRecord, records
from .facts import (
    BASELINE_SEED,
    CALCULATOR_SEED,
    DEFAULTS_SEED,
    Limits,
    release_of,
    safe_pick,
    seed_trial,
    study_limits,
)
from .frame import directions, objective_names, trials_frame
from .padding import Padding, padding
from .startup import LogFacts, read_log


@dataclass
class ReportData:
    study: optuna.Study
    names: list[str]
    dirs: list[str]
    frame: pd.DataFrame
    trials: list[FrozenTrial]
    front: list[FrozenTrial]
    limits: Limits
    release: str | None
    backend: dict[str, Any]
    pick: FrozenTrial | None            # the export's balanced pick (what best.env holds)
    best: FrozenTrial | None            # best throughput within the study's limits
    defaults: FrozenTrial | None        # the release-defaults seed trial
    calculator: FrozenTrial | None      # the static calculator's seed trial
    baseline: FrozenTrial | None = None  # tune --baseline: what the user runs today
    records: dict[int, TrialRecord] = field(default_factory=dict)  # of `trials`, by number
    spread: Spread | None = None  # each configuration's measurements: mean and interval (study/estimates.py)
    _logs: dict[int, LogFacts | None] = field(default_factory=dict)
    _pads: dict[int, Padding] = field(default_factory=dict)

    @property
    def pareto(self) -> set[int]:
        return {t.number for t in self.front}

    def record(self, t: FrozenTrial) -> TrialRecord:
        """The trial's record, built once by gather; a trial read again since (a pick of a running study,
        finished in between) gets its own."""
        rec = self.records.get(t.number)
        if rec is None or rec.state != t.state or rec.attrs != t.user_attrs:
            rec = TrialRecord.from_frozen(t)
        return rec

    def log(self, t: FrozenTrial) -> LogFacts | None:
        if t.number not in self._logs:
            self._logs[t.number] = read_log(self.record(t).artifacts.get("server_log"))
        return self._logs[t.number]

    def padding(self, t: FrozenTrial) -> Padding | None:
        facts = self.log(t)
        if facts is None:
            return None
        if t.number not in self._pads:
            self._pads[t.number] = padding(self.record(t), facts.generated, self.max_concurrency(t))
        return self._pads[t.number]

    def max_concurrency(self, t: FrozenTrial) -> int | None:
        value = self.record(t).metrics.get("max_concurrency")
        return int(value) if isinstance(value, (int, float)) else None

    def measured(self) -> list[FrozenTrial]:
        return [t for t in self.trials if t.state == TrialState.COMPLETE and self.record(t).ok]

    def label(self, t: FrozenTrial | None) -> str:
        if t is None:
            return "-"
        seed = self.record(t).seed
        return f"trial {t.number}" + (f" ({seed})" if seed else "")


def gather(study: optuna.Study) -> ReportData:
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    front = sorted(measured_front(study), key=lambda t: -t.values[0]) if trials else []
    recs = records(trials)
    names, dirs = objective_names(study), directions(study)
    return ReportData(
        study=study, names=names, dirs=dirs, frame=trials_frame(study),
        trials=trials, front=front, limits=study_limits(study), release=release_of(study),
        backend=study.user_attrs.get("backend") or {},
        pick=safe_pick(study, "balanced"), best=safe_pick(study, "throughput"),
        defaults=seed_trial(study, DEFAULTS_SEED), calculator=seed_trial(study, CALCULATOR_SEED),
        baseline=seed_trial(study, BASELINE_SEED), records={r.number: r for r in recs},
        spread=Spread(recs, names, dirs),
    )
