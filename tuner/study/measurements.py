"""A configuration's estimate from its repeated measurements: one place for the estimator.

A configuration (an effective key, screen.effective_key) can be measured more than once: `--remeasure N`
boots it again, `--confirm` re-measures the configurations that decide the recommendation (confirm.py),
on a new boot or as another load run on the same boot. Every measurement is a trial of its own (booted,
not screened, status ok). A measurement taken on purpose is told the configuration's estimate (its
"metrics" and values) and keeps its own figures in the attribute "measurement"; the measurements before it
are superseded (the front and the picks read only the one holding the estimate, pareto.measured_front).

The estimator is the mean of the measurements: throughput and latencies over every load run, the
warm-up over the boots only (a second load run on the same boot did not warm up again).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from ..vocabulary.record import TrialRecord

RAW_ATTR = "measurement"  # a re-measured trial's own figures (its "metrics" hold the configuration's mean)
CONFIRM_ATTR = "confirm"  # a trial tune --confirm added: why it was measured (not counted toward --n-trials)
SAME_BOOT = "same_boot_as"  # observed: the trial whose boot this load run ran on (no warm-up of its own)
WARMUP = "warmup_s"


@dataclass(frozen=True)
class Estimate:
    """What the measurements of one configuration say: every measured value per quantity, and their mean."""

    key: str
    trials: tuple[int, ...]  # the measurement trials, in order
    boots: int  # how many of them were fresh boots (the rest: another load run on a boot)
    samples: dict[str, tuple[float, ...]]  # quantity -> measured values (warmup_s: one per boot)

    @property
    def n(self) -> int:
        return len(self.trials)

    @property
    def latest(self) -> int:
        return self.trials[-1]

    def mean(self, quantity: str) -> float | None:
        values = self.samples.get(quantity)
        return statistics.fmean(values) if values else None

    def means(self) -> dict[str, float]:
        return {q: statistics.fmean(v) for q, v in self.samples.items() if v}


def own_figures(rec: TrialRecord) -> dict:
    """One measurement trial's own figures: the load test's numbers, its warm-up, the boot it ran on."""
    raw = rec.attrs.get(RAW_ATTR)
    if raw:
        return dict(raw)
    out = {k: v for k, v in rec.metrics.items() if _number(v)}
    out[WARMUP] = rec.observed.get(WARMUP)
    if rec.observed.get(SAME_BOOT) is not None:
        out[SAME_BOOT] = rec.observed[SAME_BOOT]
    return out


def result_figures(metrics: dict, observed: dict) -> dict:
    """The same for a result not yet told (TrialResult.metrics / .observed)."""
    out = {k: v for k, v in metrics.items() if _number(v)}
    out[WARMUP] = observed.get(WARMUP)
    if observed.get(SAME_BOOT) is not None:
        out[SAME_BOOT] = observed[SAME_BOOT]
    return out


def combine(figures: list[dict], key: str = "", trials: Iterable[int] = ()) -> Estimate:
    """The estimate over measurements' own figures (own_figures / result_figures), in order."""
    samples: dict[str, list[float]] = {}
    boots = 0
    for f in figures:
        fresh = f.get(SAME_BOOT) is None
        boots += fresh
        for q, v in f.items():
            if q == SAME_BOOT or not _number(v) or (q == WARMUP and not fresh):
                continue
            samples.setdefault(q, []).append(float(v))
    numbers = tuple(trials) or tuple(range(len(figures)))
    return Estimate(key, numbers, boots, {q: tuple(v) for q, v in samples.items()})


def is_measurement(rec: TrialRecord) -> bool:
    """A booted, measured, ok trial (not a reused or screened answer)."""
    return rec.booted and not rec.screened and rec.ok and rec.values is not None and rec.effective_key is not None


def by_configuration(recs: Iterable[TrialRecord]) -> dict[str, list[TrialRecord]]:
    """The measurement trials of each configuration (effective key), in trial order."""
    out: dict[str, list[TrialRecord]] = {}
    for r in sorted(recs, key=lambda r: r.number):
        if is_measurement(r):
            out.setdefault(r.effective_key, []).append(r)
    return out


def estimates(recs: Iterable[TrialRecord]) -> dict[str, Estimate]:
    """Every measured configuration's estimate."""
    return {k: combine([own_figures(r) for r in rs], k, [r.number for r in rs])
            for k, rs in by_configuration(recs).items()}


def superseded(recs: Iterable[TrialRecord]) -> set[int]:
    """Measurement trials of a configuration whose later trial holds the estimate over them (it was told the
    mean: --remeasure, --confirm); a search's re-boot that told its own measurement supersedes nothing."""
    out: set[int] = set()
    for rs in by_configuration(recs).values():
        last = max((i for i, r in enumerate(rs) if RAW_ATTR in r.attrs), default=0)
        out.update(r.number for r in rs[:last])
    return out


def representative(rs: list[TrialRecord]) -> TrialRecord:
    """The measurement a reused proposal copies: the latest that holds the estimate, else the first."""
    return next((r for r in reversed(rs) if RAW_ATTR in r.attrs), rs[0])


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
