"""Has the study converged? The feasible front's hypervolume after each trial, against the trial
count and against the accelerator-hours spent, and a plain verdict."""

from __future__ import annotations

from dataclasses import dataclass, field

import optuna
from optuna.trial import TrialState

from ..study.pareto import hypervolume, pareto_indices
from ..vocabulary.record import records
from .facts import accelerator_hours
from .frame import directions

GAIN_WORTH_MORE = 0.02  # the last trials still added 2% of the final hypervolume: keep going


@dataclass
class Convergence:
    numbers: list[int] = field(default_factory=list)      # trial numbers in order
    share: list[float] = field(default_factory=list)      # hypervolume after each, share of the final one
    hours: list[float] = field(default_factory=list)      # accelerator-hours spent up to each
    last_improved: int | None = None
    window: int = 0
    gain: float = 0.0
    verdict: str = ""


def reference(points: list, dirs: list[str]) -> list[float]:
    """Worse than every point: 0 for a maximised objective, 10% above the worst for a minimised one."""
    ref = []
    for i, d in enumerate(dirs):
        col = [p[i] for p in points] or [0.0]
        ref.append(0.0 if d == "maximize" else max(col) * 1.1 + 1e-9)
    return ref


def front_volume(points: list, ref: list[float], dirs: list[str]) -> float:
    if not points:
        return 0.0
    return hypervolume([points[i] for i in pareto_indices(points, dirs)], ref, dirs)


def convergence(study: optuna.Study) -> Convergence:
    dirs = directions(study)
    backend = study.user_attrs.get("backend") or {}
    trials = sorted((t for t in study.get_trials(deepcopy=False)
                     if t.state in (TrialState.COMPLETE, TrialState.FAIL)), key=lambda t: t.number)
    recs = records(trials)
    feasible = [t for t, r in zip(trials, recs) if t.state == TrialState.COMPLETE and r.feasible and t.values]
    ref = reference([t.values for t in feasible], dirs)
    out = Convergence()
    seen: list = []
    spent = 0.0
    volumes = []
    for t, r in zip(trials, recs):
        spent += accelerator_hours(r, backend)
        if t in feasible:
            seen.append(t.values)
        volumes.append(front_volume(seen, ref, dirs))
        out.numbers.append(t.number)
        out.hours.append(spent)
    final = volumes[-1] if volumes else 0.0
    out.share = [v / final if final else 0.0 for v in volumes]
    for n, a, b in zip(out.numbers[1:], volumes, volumes[1:]):
        if b > a * (1 + 1e-9):
            out.last_improved = n
    if volumes and volumes[0] > 0 and out.last_improved is None:
        out.last_improved = out.numbers[0]
    out.window = max(3, len(volumes) // 4)
    if len(volumes) > out.window and final:
        out.gain = 1.0 - volumes[-1 - out.window] / final
    out.verdict = _verdict(out, len(trials), len(feasible))
    return out


def _verdict(c: Convergence, n: int, n_feasible: int) -> str:
    if n_feasible < 3:
        return (f"Only {n_feasible} of {n} trials are feasible: too few to judge. Run more trials, or "
                "relax the limits or the search space so that more configurations qualify.")
    if n <= c.window:
        return f"{n} trials are too few to judge convergence; run more."
    where = f"The front last grew at trial {c.last_improved}"
    if c.gain >= GAIN_WORTH_MORE:
        return (f"{where}; the last {c.window} trials still added {c.gain:.0%} of its hypervolume, "
                "so more trials would likely pay off.")
    return (f"{where}; the last {c.window} trials added {c.gain:.1%} of its hypervolume, so the front has "
            "settled: more trials of this space would likely add little (widen the space or change the "
            "workload to learn more).")
