"""The study-level line of `tune`, printed after every trial: what a user checks at midnight over ssh.

    progress: 12 of 20 measured (4 this run, 3 reused or screened), 0.42 accelerator-hours this run;
    best 1,474 tok/s (trial 11); about 6 min left (8 boots to go x 45 s, the mean of 4 boots this run, 1 slot)

Time left is the boots still to go times the mean wall time of this run's boots, shared over the slots;
before the first boot it is unknown and says so. Plain text: a log file reads it as the terminal does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import optuna

from ..report.facts import accelerator_hours
from ..vocabulary import display
from ..vocabulary.record import TrialRecord


@dataclass
class NightProgress:
    planned: int  # --n-trials: measured trials the study should hold
    slots: int
    done_before: int  # counted toward the budget when this run started
    backend: dict  # Backend.describe(): the time scales that turn simulated wall time into node time
    boots: int = 0
    other: int = 0  # settled without a boot (reused, predicted, rejected)
    accel_h: float = 0.0
    wall_s: list[float] = field(default_factory=list)
    best: tuple[float, int] | None = None  # (output tok/s, trial): the study's best feasible so far

    def record(self, number: int, result, feasible: bool = True) -> None:
        """One finished trial; `feasible`: within the study's limits (the best counts only those)."""
        if not result.booted:
            self.other += 1
            return
        self.boots += 1
        rec = TrialRecord(number=number, state=optuna.trial.TrialState.COMPLETE, values=None,
                          params=dict(result.params), status=str(result.status), server=dict(result.server),
                          argv=list(result.argv), timings=dict(result.timings))
        self.accel_h += accelerator_hours(rec, self.backend)
        if result.timings.get("total_s") is not None:
            self.wall_s.append(float(result.timings["total_s"]))
        thr = result.metrics.get("output_throughput")
        if result.ok and feasible and thr is not None and (self.best is None or thr > self.best[0]):
            self.best = (float(thr), number)

    @property
    def done(self) -> int:
        return self.done_before + self.boots

    def seconds_left(self) -> float | None:
        """Wall seconds to finish the budget at this run's pace; None before the first boot."""
        if not self.wall_s:
            return None
        to_go = max(0, self.planned - self.done)
        return math.ceil(to_go / max(1, self.slots)) * (sum(self.wall_s) / len(self.wall_s))

    def line(self) -> str:
        done = min(self.done, self.planned)
        head = (f"progress: {done} of {self.planned} measured ({self.boots} this run"
                + (f", {self.other} reused or screened" if self.other else "") + f"), "
                f"{self.accel_h:.2f} accelerator-hours this run")
        best = f"; best so far {self.best[0]:,.0f} tok/s (trial {self.best[1]})" if self.best else ""
        left = self.seconds_left()
        to_go = max(0, self.planned - self.done)
        if to_go == 0:
            eta = "; budget reached"
        elif left is None:
            eta = "; time left unknown until the first boot ends"
        else:
            mean = sum(self.wall_s) / len(self.wall_s)
            eta = (f"; about {display.seconds(left)} left ({to_go} boots to go x {display.seconds(mean)}, the "
                   f"mean of {len(self.wall_s)} boot{'s' if len(self.wall_s) != 1 else ''} this run, "
                   f"{self.slots} slot{'s' if self.slots != 1 else ''})")
        return head + best + eta


# ------------------------------------------------------------------------------ the live lines

def trial_line(number: int, result, objectives, constraints, elapsed_s: float) -> str:
    """The live line of a finished trial: a measured trial outside a limit reads as a miss, with the figures."""
    from ..study.dashboard import trial_story

    story = trial_story(result, objectives, constraints)
    colour = {"miss": "yellow", "ok": "green"}.get(story.tone, "red")
    return f"trial {number} ({result.settled}): [{colour}]{story.head}[/]{story.rest} ({elapsed_s:.0f} s elapsed)"


def interrupted_line(run) -> str:
    """What a signal did to the run, in one line."""
    numbers = run.interrupted_trials
    said = (f"trial{'s' if len(numbers) > 1 else ''} {', '.join(map(str, numbers))} stopped, recorded as "
            "interrupted and enqueued again" if numbers else "stopped between trials")
    return (f"interrupted by {run.signal}: {said}; everything recorded so far is kept; "
            "re-run the same command to resume")


class SlotBars:
    """One live line per slot: its stage, warmup buckets or requests done / total, time left."""

    def __init__(self, console, slots):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[eta]}"), console=console, transient=True)
        self.tasks = {s.index: self.progress.add_task(f"slot {s.index}", total=None, eta="") for s in slots}

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc):
        self.progress.stop()

    def print(self, text: str) -> None:
        self.progress.console.print(text)

    def update(self, slot: int, what: str, done: int, total: int, eta: float | None) -> None:
        self.progress.update(self.tasks[slot], description=f"slot {slot}: {what}", completed=done,
                             total=total or None, eta=f"~{eta:.0f} s left" if eta else "")
