"""`tune --load-sweep`: one boot, several load points.

A boot and its warmup cost minutes to hours; a load test costs seconds to minutes. With a sweep, each
trial runs the load test at every point in order (`rate=2,4,8` requests/s or `concurrency=8,16,32`)
on the same warmed-up server, so one boot yields the configuration's throughput-latency curve.

Every point is recorded (trial attribute observed.load_sweep, one bench.json per point under
trials/NNNN/sweep/). The trial's metrics, and so its objectives and constraints, are those of one
point: the last one measured (`--objective-from-sweep last`, the default: what a single load test
gives), or the one with the highest output throughput among those meeting the --slo limits without
failed requests (`best-within-slo`). A point that fails keeps the points before it; a server that dies
under one of the loads ends the sweep and the trial as it would end a single load test.

The trial hands its own load step (trial._run_load) to `LoadSweep.run`; this module reads only the
trial's result type (result.py) and the load options, so the trial and the sweep make no import cycle.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..load.firstrun import PREFIXES as FIRST_RUN_PREFIXES
from ..load.options import LoadOptions
from ..vocabulary.status import TrialStatus
from .result import TrialResult

KINDS = {"rate": "--request-rate", "concurrency": "--max-concurrency"}
MODES = ("last", "best-within-slo")
MAX_POINTS = 8  # a sweep is a few points, not a benchmark campaign on one boot
DEFAULT_BUDGET_S = 3600.0  # server seconds for all the points of one trial
SKIPPED = "skipped"  # not started: the budget ran out, or an earlier point ended the server
OVER_BUDGET = "over_budget"  # started and cut at the sweep's deadline: no metrics
# What the server or the user did during a point: nothing after it can run.
_ENDS_SWEEP = (TrialStatus.CRASH, TrialStatus.RUNTIME_OOM, TrialStatus.INTERRUPTED)


class LoadSweepError(ValueError):
    """A --load-sweep value that names no valid sweep."""


@dataclass(frozen=True)
class LoadPoint:
    kind: str  # "rate" or "concurrency"
    value: float

    @property
    def label(self) -> str:
        return f"{self.kind}={self.value:g}"

    def apply(self, load: LoadOptions, first: bool) -> LoadOptions:
        """The load options of this point; only the first point runs the unmeasured warm pass."""
        changed = replace(load, warmup_requests=load.warmup_requests if first else 0)
        if self.kind == "rate":
            return replace(changed, request_rate=self.value)
        return replace(changed, max_concurrency=int(self.value))


def parse_load_sweep(text: str) -> list[LoadPoint]:
    """`rate=2,4,8` or `concurrency=8,16,32` -> the points, in the order given."""
    kind, sep, values = (text or "").partition("=")
    kind = kind.strip()
    if not sep or kind not in KINDS:
        raise LoadSweepError(f"--load-sweep {text!r}: expected rate=R1,R2,... or concurrency=C1,C2,..., "
                             f"e.g. rate=2,4,8")
    items = [v.strip() for v in values.split(",")]
    if not values.strip() or any(not v for v in items):
        raise LoadSweepError(f"--load-sweep {text!r}: give comma-separated values after {kind}=")
    if len(items) > MAX_POINTS:
        raise LoadSweepError(f"--load-sweep {text!r}: {len(items)} points; at most {MAX_POINTS} per boot")
    points = []
    for raw in items:
        try:
            value = float(raw)
        except ValueError:
            raise LoadSweepError(f"--load-sweep {text!r}: {raw!r} is not a number") from None
        if kind == "rate" and not value > 0:  # inf is fine: all requests at once, as --request-rate inf
            raise LoadSweepError(f"--load-sweep {text!r}: rate {raw!r} must be > 0 requests/s (or inf)")
        if kind == "concurrency" and not (math.isfinite(value) and value >= 1 and value == int(value)):
            raise LoadSweepError(f"--load-sweep {text!r}: concurrency {raw!r} must be a whole number >= 1")
        points.append(LoadPoint(kind, value))
    labels = [p.label for p in points]
    repeated = sorted({x for x in labels if labels.count(x) > 1})
    if repeated:
        raise LoadSweepError(f"--load-sweep {text!r}: {', '.join(repeated)} given twice")
    return points


# ----------------------------------------------------------------------------------- choosing a point

def slo_misses(metrics: Mapping[str, Any], slos_ms: Mapping[str, float], allow_failed: bool = False) -> list[str]:
    """Why a measured point does not meet the limits (empty: it meets them)."""
    misses = []
    for key, limit in slos_ms.items():
        value = metrics.get(key)
        if value is None:
            misses.append(f"{key} not reported")
        elif value > limit:
            misses.append(f"{key} {value:.1f} > {limit:g}")
    failed = metrics.get("failed") or 0
    if failed and not allow_failed:
        misses.append(f"{failed} failed requests")
    return misses


def _excess(metrics: Mapping[str, Any], slos_ms: Mapping[str, float], allow_failed: bool) -> float:
    """How far a point is from meeting the limits (0: it meets them): relative excess, summed."""
    total = 0.0
    for key, limit in slos_ms.items():
        value = metrics.get(key)
        total += 1e6 if value is None else max(0.0, value - limit) / max(limit, 1e-9)
    if not allow_failed:
        total += 1e3 * float(metrics.get("failed") or 0) / max(1.0, float(metrics.get("num_prompts") or 1))
    return total


def select_point(points: list[dict[str, Any]], mode: str) -> int | None:
    """The index of the point whose metrics the trial reports, among the measured ones (None: none was).

    last: the last measured point. best-within-slo: the highest output throughput among the points that
    meet the limits (`meets_slo`); when none does, the one closest to meeting them (then the trial is
    infeasible on that point's own figures)."""
    measured = [i for i, p in enumerate(points) if p.get("metrics")]
    if not measured:
        return None
    if mode == "last":
        return measured[-1]
    if mode != "best-within-slo":
        raise LoadSweepError(f"unknown --objective-from-sweep {mode!r}; choose one of {', '.join(MODES)}")
    meeting = [i for i in measured if points[i].get("meets_slo")]
    if meeting:
        return max(meeting, key=lambda i: (float(points[i]["metrics"].get("output_throughput") or 0.0), -i))
    return min(measured, key=lambda i: (points[i].get("excess", math.inf), i))


# ------------------------------------------------------------------------------------- the sweep

class _Deadline:
    """The stop event _run_load polls: the user's Ctrl-C, or the sweep's deadline (wall clock)."""

    def __init__(self, stop_event: threading.Event | None, deadline: float):
        self.stop_event, self.deadline = stop_event, deadline

    def user_stop(self) -> bool:
        return self.stop_event is not None and self.stop_event.is_set()

    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    def is_set(self) -> bool:
        return self.user_stop() or self.expired()


_FIRST_RUN = FIRST_RUN_PREFIXES  # a point's first-window figures (tuner/load/firstrun.py)


def _first_run_of(scratch: TrialResult) -> tuple[dict, dict]:
    """A point's first-run figures: metrics first_* / warm_* and observed first_run_* (trial/run.py)."""
    return ({k: v for k, v in scratch.metrics.items() if k.startswith(_FIRST_RUN)},
            {k: v for k, v in scratch.observed.items() if k.startswith("first_run_")})


@dataclass
class LoadSweep:
    """The sweep of a study (TrialContext.load_sweep): its points, how the trial's metrics are chosen,
    the --slo limits that choice uses, and the time bound of one trial's sweep (server seconds)."""

    points: list[LoadPoint]
    mode: str = "last"
    slos_ms: dict[str, float] = field(default_factory=dict)
    allow_failed_requests: bool = False
    budget_s: float | None = DEFAULT_BUDGET_S

    def __post_init__(self):
        if self.mode not in MODES:
            raise LoadSweepError(f"unknown --objective-from-sweep {self.mode!r}; choose one of {', '.join(MODES)}")
        if not self.points or len(self.points) > MAX_POINTS:
            raise LoadSweepError(f"a load sweep has 1 to {MAX_POINTS} points, got {len(self.points)}")

    def point_slos(self) -> dict[str, float]:
        """The --slo limits a point is chosen by: not the first-run window's, which only the first point has
        (the trial is held to them, whichever point it reports)."""
        return {k: v for k, v in self.slos_ms.items() if not k.startswith(FIRST_RUN_PREFIXES)}

    def describe(self) -> dict[str, Any]:
        return {"points": [p.label for p in self.points], "mode": self.mode, "budget_s": self.budget_s}

    def run(self, ctx, srv, base_url: str, trial_dir: Path, result: TrialResult, watch, stop_event, slot,
            run_load: Callable[..., None]) -> LoadOptions | None:
        """Run every point on the ready server `srv`; fill `result` (metrics, status, the curve).
        Returns the load options of the chosen point (for the model's serving prediction), or None."""
        scale = ctx.backend.time_scale
        start = time.monotonic()
        deadline = math.inf if self.budget_s is None else start + self.budget_s * scale
        guard = _Deadline(stop_event, deadline)
        records: list[dict[str, Any]] = []
        ended: dict[str, Any] | None = None  # the point after which nothing more can run
        after_ready: tuple[dict, dict] = ({}, {})  # the first point's first-run (metrics, observed)
        for i, point in enumerate(self.points):
            record: dict[str, Any] = {"point": point.label, "kind": point.kind, "value": point.value}
            records.append(record)
            if ended is not None or guard.is_set():
                why = ("the server ended at " + ended["point"] if ended is not None else
                       "interrupted" if guard.user_stop() else f"the sweep's budget of {self.budget_s:g} s ran out")
                record.update(status=SKIPPED, reason=why)
                if ended is None and guard.user_stop():  # Ctrl-C between points: the trial is incomplete
                    ended = {"point": point.label, "status": TrialStatus.INTERRUPTED.value,
                             "reason": "interrupted before this point"}
                continue
            scratch = TrialResult(status=TrialStatus.OK)
            point_dir = trial_dir / "sweep" / f"{i + 1:02d}-{point.kind}-{point.value:g}"
            point_dir.mkdir(parents=True, exist_ok=True)
            t0 = time.monotonic()
            run_load(replace(ctx, load=point.apply(ctx.load, first=i == 0)), srv, base_url, point_dir, scratch,
                     watch, guard, slot)
            record["load_s"] = round(time.monotonic() - t0, 3)
            if scratch.observed.get("paused_s"):  # the tuner was stopped during it: run again (trial._unpaused)
                record["paused_s"] = scratch.observed["paused_s"]
            cut = scratch.status == TrialStatus.INTERRUPTED and not guard.user_stop() and guard.expired()
            if cut:
                record.update(status=OVER_BUDGET, reason=f"cut at the sweep's budget of {self.budget_s:g} s")
                continue
            record.update(status=scratch.status.value, reason=scratch.reason)
            if i == 0:  # only the first point's first window follows ready: the trial's first-run figures
                after_ready = _first_run_of(scratch)
            if scratch.metrics:
                record["metrics"] = {k: v for k, v in scratch.metrics.items() if not k.startswith("tuner_")}
                record["bench_json"] = scratch.artifacts.get("bench_json")
                slos = self.point_slos()
                misses = slo_misses(record["metrics"], slos, self.allow_failed_requests)
                record.update(meets_slo=not misses and scratch.status == TrialStatus.OK, slo_misses=misses,
                              excess=round(_excess(record["metrics"], slos, self.allow_failed_requests), 6))
            if scratch.status in _ENDS_SWEEP:
                ended = record
        return self._conclude(ctx, result, records, ended, after_ready)

    def _conclude(self, ctx, result: TrialResult, records: list[dict[str, Any]], ended: dict[str, Any] | None,
                  after_ready: tuple[dict, dict] = ({}, {})) -> LoadOptions | None:
        chosen = select_point(records, self.mode)
        for i, r in enumerate(records):
            r["selected"] = i == chosen
        result.observed["load_sweep"] = records
        result.observed["load_sweep_mode"] = self.mode
        measured = sum(1 for r in records if r.get("metrics"))
        if chosen is not None:
            r = records[chosen]
            result.observed["load_sweep_selected"] = r["point"]
            result.metrics = {k: v for k, v in r["metrics"].items() if not k.startswith(_FIRST_RUN)}
            result.metrics.update(after_ready[0])
            result.observed.update(after_ready[1])
            if r.get("bench_json"):
                result.artifacts["bench_json"] = r["bench_json"]
            result.status = TrialStatus(r["status"])
            result.reason = f"{r['point']}: {r['reason']}" if r.get("reason") else ""
        if ended is not None:  # the server died or the user stopped: the trial ends as a single test would
            result.status = TrialStatus(ended["status"])
            kept = f"; {measured} earlier point(s) kept" if measured else ""
            result.reason = f"at {ended['point']}: {ended['reason']}{kept}"
        elif chosen is None:
            result.status = TrialStatus.LOAD_ERRORS
            result.reason = (f"no point of the load sweep finished within its budget of {self.budget_s:g} s"
                             if any(r["status"] == OVER_BUDGET for r in records) else "no point of the load sweep "
                             "was measured")
        if chosen is None:
            return None
        return self.points[chosen].apply(ctx.load, first=chosen == 0)
