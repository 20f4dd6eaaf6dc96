"""The live warmup projection: the known bucket list in the release's order, at this boot's own pace."""

from __future__ import annotations

import pytest

from tuner.logparse import LogWatcher
from tuner.perfmodel import Corrections
from tuner.perfmodel.projection import BootTracker
from tuner.trial.run import warmup_abort_reason

from .helpers import boot, predict


def follow(real, prior, budget=None):
    """Projections after every line, and when the abort rule would have fired."""
    tracker, seen, abort = BootTracker(prior), [], []

    def check(t):
        proj = tracker.project(t)
        if proj is not None:
            seen.append((t, proj))
            if budget is not None and not abort and warmup_abort_reason(proj, budget):
                abort.append(t)

    boot(real, tracker, check)
    return tracker, seen, abort


@pytest.mark.parametrize("release,env", [("fork-1.21.2", None), ("fork-1.22", {}), ("gaudi-main", {})])
def test_projection_is_right_from_the_first_steps_when_the_model_is(release, env):
    pred = predict(release=release, env=env)
    tracker, seen, _ = follow(pred, pred)
    total = pred.warmup_seconds
    assert tracker.finished_s == pytest.approx(total, abs=1.0)
    # Largest buckets first: the early pace is far above the mean, the projection is not fooled by it.
    for _, proj in seen:
        assert proj.total_s == pytest.approx(total, rel=0.02)
        assert proj.low_s <= total + 1.0


def test_a_slower_machine_is_learnt_from_the_boot_itself_and_never_aborted_when_it_fits():
    prior = predict()
    real = predict(Corrections(prompt_warmup=1.6, decode_warmup=1.6, capture=1.6))
    budget = real.warmup_seconds * 1.05  # fits, barely
    tracker, seen, abort = follow(real, prior, budget)
    assert not abort
    late = [proj for _, proj in seen if proj.steps_done >= proj.steps_total // 3]
    assert late and all(proj.total_s == pytest.approx(real.warmup_seconds, rel=0.05) for proj in late)


def test_over_the_budget_is_aborted_early():
    prior = predict()
    real = predict(Corrections(prompt_warmup=2.0, decode_warmup=2.0, capture=2.0))
    budget = real.warmup_seconds / 1.5
    _, seen, abort = follow(real, prior, budget)
    warmup_start = seen[0][0]
    assert abort and abort[0] - warmup_start < 0.5 * budget


def test_the_old_pace_extrapolation_would_have_aborted_what_fits():
    """Why the projection changed: the watcher's early-pace estimate overshoots on largest-first releases."""
    pred = predict()
    watcher_first, tracker_first = [], []
    tracker = BootTracker(pred)
    w = LogWatcher(expect_graphs=True)

    from tuner.sim.logfmt import SimLog
    from tuner.sim.startup import SimTime, emit, startup_events
    clock, sink = SimTime(), []
    log = SimLog(pred.rules.style, clock, 0.0, sink=sink)
    start = None
    for ev in startup_events(pred):
        if ev[0] == "advance":
            clock.t += ev[1]
        elif ev[0] in ("log", "raw"):
            emit(log, ev)
            for line in sink:
                for e in w.feed(line, clock.t):
                    tracker.on_event(e, clock.t)
            sink.clear()
            if w.progress() is not None and start is None:
                start = clock.t
            if start is not None and len(watcher_first) < 3 and w.projected_remaining_s(clock.t) is not None:
                watcher_first.append(clock.t - start + w.projected_remaining_s(clock.t))
                tracker_first.append(tracker.project(clock.t).total_s)
        elif ev[0] in ("fail", "ready"):
            break
    assert max(watcher_first) > 1.3 * pred.warmup_seconds
    assert all(t == pytest.approx(pred.warmup_seconds, rel=0.02) for t in tracker_first)


def test_no_prediction_no_projection():
    tracker = BootTracker(None)
    assert tracker.project(10.0) is None
