"""One boot followed against its prediction: where warmup is in the release's order, the projected
total warmup, and the facts calibration compares with the prior prediction.

The projection does not extrapolate the early pace: releases warm the largest buckets up first, so
the first steps are the slowest. It knows every remaining step from the predicted bucket list (in the
release's warmup order, with its calibrated cost), and scales them by this boot's own observed /
predicted ratio over the steps done so far, shrunk towards the calibrated model while few steps have
been seen. The lower bound uses that ratio's uncertainty: a boot is aborted only when even the lower
bound is over the budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .hardware import GiB
from .prediction import StartupPrediction, WarmupStep

STEP_SD = 0.3  # log scatter of one step's duration around its prediction (a real log is noisier than a model)
Z = 2.0  # lower bound: z standard deviations below the central projection


def step_key(step: WarmupStep) -> str:
    """The log watcher's phase key of a step: "prompt", "decode", "graph/prompt", "graph/decode"."""
    return step.phase if step.kind == "compile" else f"graph/{step.phase}"


def step_id(key: str, index: int, total: int) -> str:
    return f"{key}#{index}/{total}"


def correction_of(step: WarmupStep) -> str:
    """Which correction scales a step's time (corrections.Corrections.warmup_factor)."""
    if step.kind == "capture":
        return "capture"
    if step.phase == "multimodal":
        return "multimodal_warmup"
    return "prompt_warmup" if step.phase == "prompt" else "decode_warmup"


def prediction_facts(pred: StartupPrediction | None) -> dict[str, Any]:
    """What a prediction says, in the keys `calibration.observation_sample` compares."""
    if pred is None:
        return {}
    facts: dict[str, Any] = {"load_s": pred.load_seconds, "profile_s": pred.profile_seconds}
    mem = pred.memory
    if mem is not None:
        facts.update(free_gib=mem.free / GiB, kv_cache_gib=mem.kv / GiB, block_gib=mem.block_bytes / GiB,
                     kv_blocks=mem.num_blocks)
    graphs = len(pred.graphed_prompt) + len(pred.graphed_decode)
    if graphs:
        facts.update(graphs=graphs, graph_mem_gib=(pred.prompt_graph_mem + pred.decode_graph_mem) / GiB)
    facts["steps"] = {step_id(step_key(s), s.index, s.total): [correction_of(s), s.seconds] for s in pred.steps}
    if pred.failure is None:
        facts["warmup_s"] = pred.warmup_seconds
    return facts


@dataclass(frozen=True)
class Projection:
    total_s: float  # projected warmup ("Warmup finished in N secs")
    low_s: float  # lower bound (z standard deviations)
    elapsed_s: float
    steps_done: int
    steps_total: int
    ratio: float  # this boot's observed / predicted pace, as estimated


class BootTracker:
    """Feed it the log watcher's events with their times (server seconds); ask for the projection."""

    def __init__(self, pred: StartupPrediction | None, spread: float = 0.15, started_at: float = 0.0):
        self.pred = pred
        self.spread = max(spread, 0.02)
        self.started_at = started_at
        steps = pred.steps if pred is not None and not pred.skip_warmup else []
        # The sampler warmup (vllm-gaudi) prints no step line: it counts as part of the last step.
        self._seconds = [s.seconds for s in steps]
        if self._seconds and pred is not None:
            self._seconds[-1] += pred.sampler_seconds
        self._before = [0.0]  # predicted seconds of the steps before each position
        for x in self._seconds:
            self._before.append(self._before[-1] + x)
        self._pos = {step_id(step_key(s), s.index, s.total): i for i, s in enumerate(steps)}
        self._by_key: dict[str, list[int]] = {}
        for i, s in enumerate(steps):
            self._by_key.setdefault(step_key(s), []).append(i)
        self.lines: list[tuple[float, str, int | None]] = []  # (t, step id, position in the prediction)
        self.t_loaded: float | None = None
        self.t_profiled: float | None = None
        self.t_finished: float | None = None
        self.finished_s: float | None = None
        self.graph_mem_bytes: int | None = None
        self.free_bytes: int | None = None
        self.kv_bytes: int | None = None

    # -- input --------------------------------------------------------------------------------------
    def on_event(self, ev, t: float) -> None:
        name = type(ev).__name__
        if name in ("WarmupStep", "WarmupProgress"):
            index = ev.index if name == "WarmupStep" else ev.done + 1
            if name == "WarmupProgress" and ev.done >= ev.total:
                return
            sid = step_id(ev.key, index, ev.total)
            if self.lines and self.lines[-1][1] == sid:
                return  # a redraw of the same step
            self.lines.append((t, sid, self._position(ev.key, index, ev.total)))
        elif name == "ModelLoaded":
            self.t_loaded = t
        elif name == "MemorySplit":
            self.t_profiled = self.t_profiled or t
            self.free_bytes, self.kv_bytes = ev.free, ev.kv_cache
        elif name == "WarmupFinished":
            self.t_finished, self.finished_s = t, float(ev.seconds)
            self.graph_mem_bytes = ev.device_memory

    def _position(self, key: str, index: int, total: int) -> int | None:
        exact = self._pos.get(step_id(key, index, total))
        if exact is not None:
            return exact
        where = self._by_key.get(key)
        if not where or total <= 0:
            return None
        # The release built another list than predicted: the same share of the phase's predicted steps.
        return where[min(len(where) - 1, int((index - 1) / total * len(where)))]

    # -- projection ---------------------------------------------------------------------------------
    def project(self, now: float) -> Projection | None:
        """The projected warmup, or None when this boot's steps cannot be placed in the prediction."""
        if self.finished_s is not None:
            n = len(self._seconds)
            return Projection(self.finished_s, self.finished_s, self.finished_s, n, n, 1.0)
        if not self.lines or not self._seconds:
            return None
        t0 = self.lines[0][0]
        t_cur, _, p = self.lines[-1]
        if p is None:
            return None
        s = self._seconds
        done_pred, elapsed_done = self._before[p], t_cur - t0
        m, sd = 0.0, self.spread  # prior: the calibrated prediction, with one configuration's scatter
        if p > 0 and done_pred > 0 and elapsed_done > 0:
            obs_sd = STEP_SD / math.sqrt(p)
            precision = 1 / sd**2 + 1 / obs_sd**2
            m = math.log(elapsed_done / done_pred) / obs_sd**2 / precision
            sd = math.sqrt(1 / precision)
        rest = self._before[-1] - self._before[p + 1]
        since = now - t_cur

        def total(r: float) -> float:
            return (now - t0) + max(0.0, s[p] * r - since) + rest * r

        return Projection(total(math.exp(m)), total(math.exp(m - Z * sd)), now - t0, p, len(s), math.exp(m))

    # -- what the boot showed -------------------------------------------------------------------------
    def facts(self) -> dict[str, Any]:
        """Observed figures, in prediction_facts' keys (durations of the steps whose end was seen)."""
        out: dict[str, Any] = {}
        if self.t_loaded is not None:
            out["load_s"] = self.t_loaded - self.started_at - 1.0  # the API banner's second (sim/startup)
        if self.t_loaded is not None and self.t_profiled is not None:
            out["profile_s"] = self.t_profiled - self.t_loaded
        if self.free_bytes is not None:
            out["free_gib"] = self.free_bytes / GiB
        if self.kv_bytes:
            out["kv_cache_gib"] = self.kv_bytes / GiB
        if self.graph_mem_bytes:
            out["graph_mem_gib"] = self.graph_mem_bytes / GiB
        steps = {}
        ends = [t for t, _, _ in self.lines[1:]]
        if self.t_finished is not None and self.lines:
            ends.append(self.t_finished - (self.pred.sampler_seconds if self.pred else 0.0))
        for (t, sid, _), end in zip(self.lines, ends):
            steps[sid] = max(0.0, end - t)
        out["steps"] = steps
        return out
