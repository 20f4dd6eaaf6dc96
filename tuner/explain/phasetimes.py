"""Per-phase figures of one run's warm-up, from the intervals logparse.steptimes timed in it.

A phase has a figure of its own only when every stretch that touches it stays inside it: the sum of
its steps timed one by one and of its gaps (elided lines: then the figure is a phase total, not a sum
of steps). A stretch over two phases (the fork 1.17 README's prompt 1/24 -> decode 48/48) ties them
into one figure that is never split between them; a stretch that runs to the end of warm-up from a
step that is not the last may cover phases the log never shows, and says so ("and after").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..logparse.runs import EndLine, Run
from ..logparse.steptimes import Interval

# End lines after which no warm-up step of any phase follows.
_END_OF_WARMUP = ("finished", "served", "sampler")


@dataclass(frozen=True)
class PhaseTime:
    """A figure of the warm-up timeline. `steps` of `total` are covered; `gap`: the figure spans lines
    missing from the log (so it is a phase total, not a sum of steps)."""

    name: str
    seconds: float | None
    steps: int | None = None
    total: int | None = None
    gap: bool = False
    keys: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return self.steps is not None and self.total is not None and self.steps >= self.total

    def describe(self) -> str:
        if self.steps is None:
            return ""
        count = f"{self.steps} of {self.total} steps" if self.total and self.steps < self.total \
            else f"{self.steps} steps"
        return count + (", across elided lines" if self.gap else "")


def _to_end(iv: Interval) -> bool:
    return iv.kind in ("gap", "bar") and isinstance(iv.end, EndLine) and iv.end.kind in _END_OF_WARMUP


def phase_figures(run: Run, phase_name: Callable[[str], str]) -> list[PhaseTime]:
    """The run's phase figures in warm-up order; `phase_name(key)` names a warm-up key."""
    intervals = [iv for iv in run.intervals if iv.timed]
    order = run.order
    out: list[PhaseTime] = []
    for key in dict.fromkeys(s.key for s in run.steps):
        total = order.total(key) if order is not None else None
        own = [iv for iv in intervals if set(iv.keys) == {key} and not _to_end(iv)]
        crossing = [iv for iv in intervals if key in iv.keys and (set(iv.keys) != {key} or _to_end(iv))]
        if crossing or not own:
            continue
        steps = sum(n for iv in own for _, n in iv.spans)
        out.append(PhaseTime(phase_name(key), sum(iv.seconds for iv in own), min(steps, total or steps), total,
                             gap=any(iv.kind == "gap" for iv in own), keys=(key,)))
    joined: dict[tuple[str, ...], list[Interval]] = {}
    for iv in intervals:
        if len(set(iv.keys)) > 1 or _to_end(iv):
            joined.setdefault(_phase_group(iv, intervals), []).append(iv)
    for keys, ivs in joined.items():
        members = [iv for iv in intervals if set(iv.keys) <= set(keys)]
        steps = sum(n for iv in members for _, n in iv.spans)
        total = sum(order.total(k) for k in keys) if order is not None else steps
        name = " + ".join(phase_name(k).removesuffix(" warmup") for k in keys) + " warmup"
        if any(_to_end(iv) for iv in ivs):
            name += " and after"  # the stretch runs past the last phase it names
        out.append(PhaseTime(name, sum(iv.seconds for iv in members), min(steps, total), total, gap=True, keys=keys))
    first_line: dict[str, int] = {}
    for iv in intervals:
        for k in iv.keys:
            first_line.setdefault(k, iv.start_line)
    return sorted(out, key=lambda p: min(first_line.get(k, 0) for k in p.keys))  # in warm-up order


def _phase_group(iv: Interval, intervals: list[Interval]) -> tuple[str, ...]:
    """The phases a crossing stretch ties together (stretches that share a phase are one group)."""
    keys = set(iv.keys)
    grew = True
    while grew:
        grew = False
        for other in intervals:
            if (len(set(other.keys)) > 1 or _to_end(other)) and keys & set(other.keys) \
                    and not set(other.keys) <= keys:
                keys |= set(other.keys)
                grew = True
    return tuple(dict.fromkeys(k for other in intervals for k in other.keys if k in keys))
