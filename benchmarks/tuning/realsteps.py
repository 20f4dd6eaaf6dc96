"""Scenario "real_steps": a node whose warm-up steps cost what real logs' timed steps cost.

The other scenarios scale the model's own cost rules (a compile x2 is still the model's shape of cost).
Here every warm-up step of the truth takes the seconds the public logs show for steps of its kind and
phase, interpolated over the step's size (prompt: padded tokens; decode: KV blocks read) and flat beyond
the sizes the logs cover: the cost rules of docs/calibration.md 7.2 play no part in the truth.

Points come from the timed facts (the `fidelity` starts of tests/data/log-samples/facts.yaml) read with
logparse.steptimes: every contiguous stretch of one kind and phase of a start's warm-up (compile,
capture, or compile and capture in one step) is one point, (mean size of its steps, seconds per step),
its sizes taken from the bucket lists the start's settings build. Each problem takes the starts of its
device and warm-up style: problem linear (fork-1.21.2, Gaudi 2) the fork 1.17 README's two runs (compile
steps from the run without graphs, captures from the run with graphs); problems on another device or
style have no real steps and refuse the scenario.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np

from tuner.logparse.steptimes import elision_lines, events_of, read_step_times
from tuner.perfmodel.costs import CACHE_HIT, decode_blocks, prompt_shape
from tuner.perfmodel.evidence import step_order

# problem -> timed starts whose steps its truth takes (facts.yaml fidelity ids): same device, same style
SOURCES = {"linear": ("fork-1.17-readme-nographs", "fork-1.17-readme")}
MIN_SECONDS = 3.0  # a stretch shorter than three ticks of 1-s timestamps is not a point on its own


def _size(pred, step) -> float:
    if step.phase == "prompt":
        bs, seq, ctx = prompt_shape(step.bucket)
        return float(bs * (seq + ctx * pred.config.block_size))
    return float(decode_blocks(pred.profile, step.bucket, pred.config.block_size))


def _kind(step) -> str:
    return "capture" if step.kind == "capture" else "compile"  # compile+capture steps stay whole


def _stretches(pred, intervals) -> list[list]:
    """Contiguous timed intervals whose steps are all of one kind and phase."""
    out: list[list] = []
    last_key = None
    for iv in intervals:
        steps = [pred.steps[p] for p in range(iv.first, iv.stop)] if iv.kind != "dropped" else []
        keys = {(_kind(s), s.phase) for s in steps}
        if len(keys) != 1:
            last_key = None
            continue
        (key,) = keys
        if out and last_key == key and out[-1][-1].stop == iv.first:
            out[-1].append(iv)
        else:
            out.append([iv])
        last_key = key
    return out


@functools.cache
def points(problem: str) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """(kind, phase) -> (sizes, seconds per step), sorted by size."""
    from benchmarks.model_fidelity import load_cases  # the same facts the fidelity benchmark reads
    from tuner.explain import read_log
    from tuner.perfmodel.target import predict

    wanted = SOURCES.get(problem)
    if not wanted:
        raise ValueError(f"scenario real_steps: no timed real log for problem {problem!r} (has: {', '.join(SOURCES)})")
    raw: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for case in [c for c in load_cases() if c.id in wanted]:
        pred = predict(case.ctx, case.settings)
        lines = case.log_lines()
        st = read_step_times(events_of(read_log(lines).events), elision_lines(lines), step_order(pred))
        for stretch in _stretches(pred, st.run.intervals if st.run else []):
            secs = sum(iv.seconds for iv in stretch)
            steps = [pred.steps[p] for iv in stretch for p in range(iv.first, iv.stop)]
            if secs >= MIN_SECONDS:
                size = float(np.mean([_size(pred, s) for s in steps]))
                raw.setdefault((_kind(steps[0]), steps[0].phase), []).append((size, secs / len(steps)))
    out = {}
    for key, pts in raw.items():
        pts.sort()
        out[key] = (np.array([p[0] for p in pts]), np.array([p[1] for p in pts]))
    return out


def real_steps(problem: str, pred):
    """`pred` (the truth's prediction of one configuration) with every warm-up step costing what the real
    logs' steps of its kind, phase and size cost; a recipe-cache hit keeps its share of a cold step."""
    table = points(problem)
    steps = []
    for s in pred.steps:
        key = (_kind(s), s.phase)
        if key not in table:
            key = next((k for k in table if k[0] == key[0]), None) or next(iter(table))
        sizes, secs = table[key]
        cold = float(np.interp(_size(pred, s), sizes, secs))
        hit = CACHE_HIT[pred.sim.dtype] * pred.corrections.cache_hit if s.cache_hit else 1.0
        steps.append(replace(s, seconds=cold * hit))
    return replace(pred, steps=steps)
