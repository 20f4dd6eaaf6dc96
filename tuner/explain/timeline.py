"""The warm-up timeline of a read log: per start of the server, the figures its timestamps support
(the intervals logparse.steptimes timed, summed per phase in phasetimes.py), the slowest steps timed
one by one, the server's own total, what the reading left out and why, and whether warm-up was
skipped. Pure functions of a `LogReading`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..logparse import BucketVariable, ConfigValue, Milestone, ModelLoaded, ProfilingRun
from ..logparse.runs import Run
from ..logparse.steptimes import Interval
from .phasetimes import PhaseTime, phase_figures
from .reading import LogReading


@dataclass(frozen=True)
class Step:
    phase: str
    index: int
    total: int
    shape: tuple[int, ...]
    seconds: float | None      # to its true successor; None when lines are missing or there is no time
    run: int = 0
    line_no: int = 0


@dataclass(frozen=True)
class RunView:
    """One start of the server in the log: where it is and what its warm-up figures are."""

    index: int
    first_line: int
    last_line: int
    start: str | None          # its first timestamp as printed
    why: str
    phases: list[PhaseTime]
    warmup_total_s: float | None
    steps: int
    lender: int | None = None


@dataclass
class Timeline:
    phases: list[PhaseTime] = field(default_factory=list)   # of the primary run
    steps: list[Step] = field(default_factory=list)          # every run's, in line order
    intervals: list[Interval] = field(default_factory=list)  # every run's, timed or dropped
    notes: list[str] = field(default_factory=list)  # runs left out; the primary run's gaps and drops
    warmup_total_s: float | None = None     # the server's own "Warmup finished in N secs" (primary run)
    log_span_s: float | None = None
    complete: bool = False                     # warm-up finished in the primary run
    skipped: bool = False
    skip_evidence: str | None = None
    runs: list[RunView] = field(default_factory=list)
    primary: int | None = None

    @property
    def slowest(self) -> list[Step]:
        """The slowest steps timed one by one (to their true successor) in the primary run."""
        timed = [s for s in self.steps if s.seconds is not None and s.run == (self.primary or 0)]
        return sorted(timed, key=lambda s: -s.seconds)[:5]

    @property
    def other_runs(self) -> list[RunView]:
        return [r for r in self.runs if r.index != self.primary and (r.steps or r.warmup_total_s is not None)]

    def seconds_per_bucket(self, phase: str) -> float | None:
        """Mean seconds per warmed-up bucket of a phase (prompt / decode, graph lines included), from
        the primary run's single-phase figures."""
        figures = [p for p in self.phases if p.keys and all(k.split("/")[-1] == phase for k in p.keys)
                   and p.seconds is not None and p.steps]
        steps = sum(p.steps for p in figures)
        return sum(p.seconds for p in figures) / steps if steps else None

    def phase_shares(self) -> dict[str, float]:
        """Seconds of the primary run per bucket phase (prompt / decode, graph capture included); a
        stretch over both is shared by the steps it covers (a prediction's weight, not a fact)."""
        shares = {"prompt": 0.0, "decode": 0.0}
        for iv in self.intervals:
            if iv.run != (self.primary or 0) or not iv.timed:
                continue
            total = sum(n for _, n in iv.spans)
            for key, n in iv.spans:
                base = key.split("/")[-1]
                if base in shares and total:
                    shares[base] += iv.seconds * n / total
        return shares


def timeline(reading: LogReading) -> Timeline:
    tl = Timeline(log_span_s=reading.last_time_s)
    s = reading.summary
    primary = reading.primary
    tl.primary = primary.index if primary else None
    loads = loader_seconds(reading.run_events())
    prof = next((t for t in reading.run_events() if isinstance(t.event, ProfilingRun)
                 and t.event.seconds is not None), None)
    if loads:
        tl.phases.append(PhaseTime("load weights", sum(loads.values())))
    elif (took := _weights_load_s(reading)) is not None:
        tl.phases.append(PhaseTime("load weights", took))
    if prof:
        tl.phases.append(PhaseTime("profiling run", prof.event.seconds))
    for run in reading.runs:
        view = _view(reading, run)
        tl.runs.append(view)
        tl.intervals += run.intervals
        # by line and step: every redraw of a tqdm bar is on the same physical line
        exact = {(iv.start.line_no, iv.start.key, iv.start.index): iv.seconds for iv in run.intervals if iv.exact}
        tl.steps += [Step(st.phase, st.index, st.total, st.shape, exact.get((st.line_no, st.key, st.index)),
                          run.index, st.line_no) for st in run.steps]
        if primary is not None and run.index == primary.index:
            tl.phases += view.phases
            _add_stage_phases(reading, run, tl.phases)
    if reading.step_times is not None:
        tl.notes = list(reading.step_times.notes)
    if s.warmup_finished:
        tl.warmup_total_s = float(s.warmup_finished.seconds)
        tl.complete = True
    tl.skip_evidence = _skip_evidence(reading)
    tl.skipped = tl.skip_evidence is not None and not any(st.run == tl.primary for st in tl.steps)
    tl.complete = tl.complete or s.warmup_skipped     # "Skipping warmup..." ends the warm-up stage
    return tl


def _milestone(name: str):
    return lambda e: isinstance(e, Milestone) and e.name == name


# vllm-gaudi's start-up stages without a line per step: (its start, its end, phase name); the INC (FP8)
# quantisation of the weights on the device ends with its memory line
_STAGES = ((_milestone("inc_prepare"), lambda e: isinstance(e, ModelLoaded) and e.part == "inc", "INC quantisation"),
           (_milestone("sampler_warmup"), _milestone("sampler_warmup_done"), "sampler warmup"),
           (_milestone("pooler_warmup"), _milestone("pooler_warmup_done"), "pooler warmup"),
           (_milestone("defragmenter_warmup"), _milestone("defragmenter_warmup_done"), "defragmenter warmup"))


def _add_stage_phases(reading: LogReading, run, phases: list[PhaseTime]) -> None:
    """The sampler's, pooler's and defragmenter's warm-ups, from their start line to their 'completed
    successfully' (the first of each in the run, timed at both ends), before or after the bucket phases as
    they ran."""
    events = [t for t in reading.events[run.first:run.end] if t.time_s is not None]
    first_step = min((st.line_no for st in run.steps), default=None)
    for starts, ends, label in _STAGES:
        start = next((t for t in events if starts(t.event)), None)
        end = next((t for t in events if start and ends(t.event) and t.line_no > start.line_no), None)
        if start is None or end is None or end.time_s < start.time_s:
            continue
        phase = PhaseTime(label, end.time_s - start.time_s)
        before = first_step is not None and end.line_no < first_step
        phases.insert(next((i for i, p in enumerate(phases) if p.keys), len(phases)) if before else len(phases),
                      phase)


def loader_seconds(events) -> dict[str, float]:
    """The loader's own times, by part: vLLM's times building the model ("init") and loading its weights
    ("weights") apart; the first figure of each (the load is both)."""
    out: dict[str, float] = {}
    for t in events:
        if isinstance(t.event, ModelLoaded) and t.event.seconds is not None:
            out.setdefault(t.event.part, t.event.seconds)
    return out


def _weights_load_s(reading: LogReading) -> float | None:
    """The fork prints no load time: from its loader's "Loading weights on hpu" to the last "Loading model
    weights took" after it (whole seconds, as the stamps)."""
    events = reading.run_events()
    start = next((t for t in events if isinstance(t.event, Milestone) and t.event.name == "weights_loading"
                  and t.time_s is not None), None)
    if start is None:
        return None
    ends = [t.time_s for t in events if isinstance(t.event, ModelLoaded) and t.time_s is not None
            and t.line_no > start.line_no]
    return max(ends) - start.time_s if ends and max(ends) >= start.time_s else None


def _view(reading: LogReading, run: Run) -> RunView:
    eager = any(not st.graph for st in run.steps)

    def name(key: str) -> str:
        graph = key.startswith("graph/")
        base = key.removeprefix("graph/")   # "prompt", or a pass of its own such as fork 1.22's "mix/prompt"
        if base == "multimodal":
            return "multimodal warmup"      # the vision encoder's graphs: never a separate capture pass
        return ("graph capture " if graph and eager else "") + f"{base} warmup"

    first_stamp = next((t.text for t in reading.events[run.first:run.end] if t.time_s is not None), None)
    return RunView(run.index, run.first_line, run.last_line, _stamp_text(first_stamp), run.why,
                   phase_figures(run, name), run.finished_s, len(run.steps), run.lender)


_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d|\b\d\d-\d\d \d\d:\d\d:\d\d")


def _stamp_text(line: str | None) -> str | None:
    m = _STAMP.search(line or "")
    return m.group(0) if m else None


def _skip_evidence(reading: LogReading) -> str | None:
    """Why warm-up is (to be) skipped: the server's "Skipping warmup...", the extension's runtime dump
    `skip_warmup: True`, or VLLM_SKIP_WARMUP=true among the logged variables."""
    if reading.summary.warmup_skipped:
        return "'Skipping warmup...'"
    for t in reading.run_events():
        e = t.event
        if isinstance(e, ConfigValue) and e.name == "skip_warmup" and e.value.strip().lower() in _TRUE:
            return f"runtime dump skip_warmup: {e.value.strip()}"
        if isinstance(e, ConfigValue) and e.name == "VLLM_SKIP_WARMUP" and e.value.strip().lower() in _TRUE:
            return f"HpuEnvFlags VLLM_SKIP_WARMUP: {e.value.strip()}"
        if isinstance(e, BucketVariable) and e.name == "VLLM_SKIP_WARMUP" and str(e.value).strip().lower() in _TRUE:
            return f"VLLM_SKIP_WARMUP={e.value}"
    return None


_TRUE = ("1", "true", "t", "yes", "y", "on")
