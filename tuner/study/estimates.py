"""How sure a figure is: the spread of a configuration measured more than once, and what it decides.

A configuration is its effective settings (study/screen.py effective_key): every booted trial that ended ok
with the same key is one measurement of it (`tune --remeasure N` boots it N times, `tune --confirm` adds
boots or load runs on a boot; a told value may be their mean, so each measurement's own figures are read
as measurements.own_figures keeps them). For each figure of each configuration:

* n measurements, their mean, and a 95% Student t-interval for the mean, mean +- t(0.975, n-1) s / sqrt(n)
  (s: the sample standard deviation); with n = 1 there is no interval: "one measurement", never a guess;
* two front points are indistinguishable when, on every objective where their means differ, both were
  measured at least twice and their intervals overlap; they are told apart when an objective's intervals
  are apart; otherwise (one measurement somewhere) it is not known;
* the balanced pick's evidence against its runner-up says which of the three it is.

Report, export, the terminal table and compare read it (it imports only the vocabulary, below them all).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import optuna

from ..vocabulary import display
from ..vocabulary.record import TrialRecord, records
from .measurements import RAW_ATTR, SAME_BOOT, WARMUP, own_figures

LEVEL = 0.95
# Student t quantiles t(0.975, df), df = n - 1 (standard tables); between rows the next smaller df's (wider)
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
         20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}
_Z975 = 1.960
ONE = "one measurement"


def formatter(name: str) -> Callable[[float], str]:
    """The display function of a figure named `name` (durations as durations, so that ranges read well)."""
    if name.endswith("_s"):
        return display.seconds
    if name.endswith("_ms"):
        return display.millis
    return lambda v: display.metric(name, v)


def t_quantile(df: int) -> float:
    """t(0.975, df): the two-sided 95% Student quantile."""
    if df < 1:
        raise ValueError(f"a t-interval needs at least 2 measurements (df >= 1), got df {df}")
    if df > max(_T975):
        return _Z975
    return _T975[max(k for k in _T975 if k <= df)]


@dataclass(frozen=True)
class Estimate:
    """A figure measured n times: its mean and, from n = 2, its 95% t-interval."""

    n: int
    mean: float
    low: float | None = None  # None: one measurement, no interval
    high: float | None = None
    sd: float | None = None

    @property
    def half(self) -> float | None:
        return None if self.low is None else (self.high - self.low) / 2

    def overlaps(self, other: Estimate) -> bool | None:
        """Whether the two intervals share a point; None when either is a single measurement."""
        if self.low is None or other.low is None:
            return None
        return self.low <= other.high and other.low <= self.high

    def text(self, fmt: Callable[[float], str] = display.num) -> str:
        """'1,234 tok/s (n=3, 95% t-interval 1,200-1,268 tok/s)' or '1,234 tok/s (one measurement)'."""
        if self.low is None:
            return f"{fmt(self.mean)} ({ONE})"
        return f"{fmt(self.mean)} (n={self.n}, 95% t-interval {display.span(self.low, self.high, fmt)})"

    def short(self, fmt: Callable[[float], str] = display.num) -> str:
        """For a table cell: '1,234 tok/s ±34' (n in its own column), or the mean alone for one measurement."""
        if self.half is None:
            return fmt(self.mean)
        half = fmt(self.half)
        unit = fmt(self.mean).split()[-1]
        return f"{fmt(self.mean)} ±{half.removesuffix(' ' + unit) if ' ' in half else half}"


def estimate(values: Iterable[float]) -> Estimate | None:
    """The estimate of repeated measurements of one figure (None for none)."""
    xs = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not xs:
        return None
    mean = statistics.fmean(xs)
    if len(xs) == 1:
        return Estimate(1, mean)
    sd = statistics.stdev(xs)
    half = t_quantile(len(xs) - 1) * sd / math.sqrt(len(xs))
    return Estimate(len(xs), mean, mean - half, mean + half, sd)


def verdict(ea: Sequence[Estimate | None], eb: Sequence[Estimate | None]) -> tuple[bool | None, list[int]]:
    """(indistinguishable?, the objectives where the means differ) of two configurations' estimates: True
    when the intervals overlap on every one of them, False when one's are apart, None when a single
    measurement leaves it open."""
    differ = [k for k, (x, y) in enumerate(zip(ea, eb)) if x is not None and y is not None and x.mean != y.mean]
    overlaps = [ea[k].overlaps(eb[k]) for k in differ]
    if any(o is False for o in overlaps):
        return False, differ
    if not differ:
        repeated = all(e is None or e.n > 1 for e in (*ea, *eb)) and any(e is not None for e in ea)
        return (True if repeated else None), differ
    if any(o is None for o in overlaps):
        return None, differ
    return True, differ


def figure_of(rec: TrialRecord, key: str) -> float | None:
    """One measurement's own figure `key`: a metric, or warmup_s (the warm-up the study scores; none for a
    second load run on a boot, which did not warm up again)."""
    own = own_figures(rec)
    if key == WARMUP and RAW_ATTR not in rec.attrs and rec.observed.get(SAME_BOOT) is None:
        value = rec.observed.get("warmup_scored_s", rec.observed.get("warmup_s"))
    else:
        value = own.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def configuration(rec: TrialRecord) -> str:
    """What counts as the same configuration: the effective key, else the trial alone."""
    return rec.effective_key or f"trial {rec.number}"


def is_measurement(rec: TrialRecord) -> bool:
    """A boot of its configuration that served its load (not a reused record, not a screened one)."""
    return rec.measured and rec.ok and not rec.screened and rec.observed.get("reused_from") is None


class Spread:
    """The estimates of a study's configurations, on its objectives (`names`, `dirs`)."""

    def __init__(self, recs: Sequence[TrialRecord], names: Sequence[str], dirs: Sequence[str]):
        self.names, self.dirs = list(names), list(dirs)
        self.by_number = {r.number: r for r in recs}
        self.groups: dict[str, list[TrialRecord]] = {}
        for r in recs:
            if is_measurement(r):
                self.groups.setdefault(configuration(r), []).append(r)

    @classmethod
    def of_study(cls, study: optuna.Study) -> Spread:
        names = study.metric_names or [f"objective_{i}" for i in range(len(study.directions))]
        return cls(records(study.get_trials(deepcopy=False)), names, [d.name.lower() for d in study.directions])

    def measurements(self, number: int) -> list[TrialRecord]:
        """The boots of trial `number`'s configuration (a reused trial: those of the trial it reused)."""
        rec = self.by_number.get(number)
        if rec is None:
            return []
        earlier = rec.observed.get("reused_from")
        if earlier is not None and earlier in self.by_number:
            rec = self.by_number[earlier]
        return self.groups.get(configuration(rec), [])

    def n(self, number: int) -> int:
        return len(self.measurements(number))

    def figure(self, number: int, key: str) -> Estimate | None:
        return estimate(figure_of(r, key) for r in self.measurements(number))

    def of(self, number: int) -> list[Estimate | None]:
        """The estimates of trial `number`'s configuration on the study's objectives."""
        return [self.figure(number, k) for k in self.names]

    def repeated(self, numbers: Iterable[int]) -> bool:
        """Whether any of these trials' configurations was measured more than once."""
        return any(self.n(x) > 1 for x in numbers)

    def verdict(self, a: int, b: int) -> tuple[bool | None, list[int]]:
        """verdict() of trials a's and b's configurations."""
        return verdict(self.of(a), self.of(b))

    def indistinguishable(self, numbers: Sequence[int]) -> list[tuple[int, int]]:
        """Pairs of these (front) trials, of different configurations, that the noise cannot tell apart."""
        out = []
        for i, a in enumerate(numbers):
            for b in numbers[i + 1:]:
                if self.measurements(a) is not self.measurements(b) and self.verdict(a, b)[0] is True:
                    out.append((a, b))
        return out

    def describe(self, number: int, sep: str = "; ") -> str:
        """'tok/s 1,234 tok/s (n=3, 95% t-interval ...); p99 TTFT ...' for one trial's configuration."""
        parts = [f"{display.short(k)} {e.text(formatter(k))}" for k, e in zip(self.names, self.of(number))
                 if e is not None]
        return sep.join(parts)

    def pick_evidence(self, pick: int, runner: int) -> str:
        """On what evidence the pick beat its runner-up, in one sentence (the noise named when it decides)."""
        if self.measurements(pick) and self.measurements(pick) is self.measurements(runner):
            return (f"Its runner-up, trial {runner}, is another boot of the same settings: one configuration, "
                    f"measured {_times(self.n(pick))} ({self.describe(pick)}).")
        same, differ = self.verdict(pick, runner)
        np_, nr = self.n(pick), self.n(runner)
        counts = f"{_times(np_)} and {_times(nr)}"
        if same is None:
            single = [f"trial {x}" for x, n in ((pick, np_), (runner, nr)) if n < 2]
            return (f"Whether the pick, trial {pick}, and trial {runner} differ by more than run-to-run noise is "
                    f"not known: {' and '.join(single)} measured once (tune --remeasure 2 boots each configuration "
                    "twice).")
        if same:
            return (f"The choice rests on a difference inside the noise: measured {counts}, trial {pick} and trial "
                    f"{runner} have overlapping {LEVEL:.0%} intervals on every objective where they differ "
                    f"({self._pair_text(pick, runner, differ)}); either is as good a pick on this evidence.")
        apart = [k for k in differ if self.of(pick)[k].overlaps(self.of(runner)[k]) is False]
        return (f"Trials {pick} (the pick) and {runner} differ beyond the noise: measured {counts}, their "
                f"{LEVEL:.0%} intervals are apart on {self._pair_text(pick, runner, apart)}.")

    def _pair_text(self, a: int, b: int, keys: Sequence[int]) -> str:
        ea, eb = self.of(a), self.of(b)
        out = []
        for k in keys:
            name, fmt = self.names[k], formatter(self.names[k])
            out.append(f"{display.short(name)} {ea[k].short(fmt)} against {eb[k].short(fmt)}")
        return "; ".join(out)


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")
