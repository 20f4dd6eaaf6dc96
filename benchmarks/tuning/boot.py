"""The boot's log as the tuner reads it: the events a boot gives the BootTracker, the warmup abort replayed
on them, and how often that abort (on the prior model) is wrong."""

from __future__ import annotations

import random

from benchmarks.tuning.problems import Problem
from benchmarks.tuning.truth import TABLES, true_prediction
from tuner.logparse import events as ev
from tuner.perfmodel.calibration import Calibration
from tuner.perfmodel.projection import BootTracker
from tuner.trial import run as T


def boot_events(real) -> list[tuple[float, object]]:
    """The log events a boot of `real` gives the tracker, with their server times: the lines of
    tuner/sim/startup.py, already parsed (tests/perfmodel checks this against the parsed log itself)."""
    out, t = [], 1.0  # the API banner, then one second
    fail = real.failure
    if fail is not None and fail.phase in ("config", "buckets", "load"):
        return out
    t += real.load_seconds
    out.append((t, ev.ModelLoaded(device_memory=int(real.memory.weights))))
    t += real.profile_seconds
    if fail is not None and fail.phase == "profile":
        return out
    m = real.memory
    out.append((t, ev.MemorySplit(free=int(m.free), usable=int(m.usable),
                                  gpu_memory_utilization=real.sim.gpu_memory_utilization,
                                  graph_reserved=int(m.graph_reserved), graph_reserved_fraction=m.graph_reserved_frac,
                                  kv_cache=int(m.kv))))
    if fail is not None and fail.phase == "kv":
        return out
    t += 0.5
    if real.skip_warmup:
        return out
    at = fail.at_step if fail is not None and fail.phase == "warmup" else None
    elapsed = 0.0
    for i, s in enumerate(real.steps):
        out.append((t, ev.WarmupStep(phase=s.phase, graph=s.kind != "compile", index=s.index, total=s.total)))
        t += s.seconds
        elapsed += s.seconds
        if at is not None and i >= at:
            return out
    if at is not None:
        return out
    t += real.sampler_seconds
    elapsed += real.sampler_seconds
    out.append((t, ev.WarmupFinished(seconds=int(round(elapsed)),
                                     device_memory=int(real.prompt_graph_mem + real.decode_graph_mem))))
    return out


def replay_boot(tracker: BootTracker, events, budget: float | None, end: float | None = None) -> float | None:
    """Feed the boot's events to the tracker under trial.run_trial's rule; the abort time or None.
    The rule is checked as each line arrives and just before the next one (the trial polls it)."""
    for i, (t, e) in enumerate(events):
        if budget is not None and i and tracker.lines:
            before = t - 1e-6
            if (proj := tracker.project(before)) is not None and T.warmup_abort_reason(proj, budget):
                return before
        tracker.on_event(e, t)
        if budget is not None and (proj := tracker.project(t)) is not None and T.warmup_abort_reason(proj, budget):
            return t
    return None


def watcher_check(problem: Problem, scenario: str, quick: bool, sigma: float, n: int = 200) -> dict:
    """trial.run_trial's warmup abort (the tracker, on the prior model: a study's first boots) on a fixed
    sample of configurations that start: how many that fit the budget it aborts (false aborts), and how
    many over the budget it catches."""
    table, space = TABLES[(problem.key, scenario)], problem.search_space(quick)
    keys = sorted(k for k, e in table.items() if e.failure is None)
    random.Random(0).shuffle(keys)
    out = {"sampled": 0, "fit": 0, "false_aborts": 0, "over": 0, "caught": 0}
    ctx = problem.context(problem.warmup_budget_s)
    for k in keys[:n]:
        e, settings = table[k], space.settings_for(table[k].params)
        prior, real = true_prediction(problem, settings, sigma, scenario)
        tracker = BootTracker(prior, spread=Calibration().warmup_spread())
        aborted = replay_boot(tracker, boot_events(real), ctx.limits.warmup_budget_s) is not None
        fit = e.warmup_s <= problem.warmup_budget_s
        out["sampled"] += 1
        out["fit" if fit else "over"] += 1
        out["false_aborts" if fit else "caught"] += aborted
    return out
