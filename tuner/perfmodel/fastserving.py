"""The serving prediction at plan speed: the virtual clock's schedule, re-costed for each configuration.

The virtual clock (serving.run_virtual) steps the scheduler batch by batch: about 70 ms for a load test
of 100 requests, too slow for every point of a space. But which requests run in which step does not
depend on how long the steps take when the load is a closed loop (request rate inf: the client sends
the next request a millisecond after one finishes, and every step takes longer than that) and the KV
cache never runs short. It depends only on the scheduler's limits: the engine, the token budget, the
block size and which decode dimension the release pads, and max_num_seqs and the prefill batch where
they bind (a schedule that never reached them is also that of any larger ones). So one clock run per
such group records its *schedule* (the raw shape of every batch, when each request was sent, got its
tokens and finished), and every other configuration of the group re-costs that schedule with its own
buckets, graphs and step costs, by the engine's own rules (the release profile's padding, compile and
graph capture on first use, the cost model's step times), summed with numpy.

For closed loops that is the clock's result up to float rounding (tests compare them). Under open-loop
arrivals (a request rate) the batches a request joins depend on timing, so a schedule serves only the
configurations whose prefill and decode steps take within BAND of its reference's time and compile at
runtime in the same steps (a saturated one, that reached max_num_seqs, only its own pace); the others
get a clock run of their own, which becomes a reference in turn. benchmarks/plan_speed.py measures the
remaining error. A configuration whose KV cache may run short (preemptions, prompts that cannot be
admitted) or whose clock run had an idle step is not shared: the clock answers for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from ..buckets import get_profile
from ..load.metrics import percentile_key
from .capture import compile_seconds
from .costs import decode_blocks, prompt_shape
from .engine import max_prefill_seqs, runtime_graphs
from .prediction import StartupPrediction
from .serving import run_virtual
from .shapes import SharedBuckets
from .target import SERVING_KEYS, ServingTarget, serving_requests

BAND = 0.01  # open loop: a schedule serves configurations whose step times are within 1% of its reference's
TURNAROUND_S = 0.001  # run_virtual's client turnaround (a closed-loop request is sent this long after a finish)


@dataclass
class Schedule:
    """One clock run's schedule, independent of step times (see the module docstring)."""

    raw: list[tuple]  # distinct (phase, bs, query or None, ctx or decode dim), in order of first occurrence
    occ_raw: np.ndarray  # every batch of every step: its index in `raw` ...
    occ_step: np.ndarray  # ... and its step
    raw_first: np.ndarray  # the step each raw shape first runs in
    n_steps: int
    turnaround_gap: np.ndarray  # per step: the client's turnaround when the engine waited for one before it
    wake: np.ndarray  # per step: the arrival the engine waited for before it (-inf: none)
    arrival_step: np.ndarray  # per request (send order): the step its arrival fell in ...
    arrival_frac: np.ndarray  # ... and where in it (0: its start)
    freed_by: np.ndarray  # the step whose finish freed the slot the request was sent in (-1: none)
    first: np.ndarray  # the step of each request's first token ...
    last: np.ndarray  # ... and of its last
    n_out: np.ndarray
    tok_step: np.ndarray  # every token's step, request by request
    tok_start: np.ndarray  # where each request's tokens start in tok_step
    start: float  # the first arrival
    prefill_steps: np.ndarray  # which steps hold a prefill
    prefill_s: float  # the reference's summed time of those ...
    decode_s: float  # ... and of the others
    closed: bool
    max_num_seqs: int  # the reference's limits (capped at what the load can reach) ...
    max_prefills: int
    peak_running: int  # ... and the most it ever had running / prefilled in one step
    peak_prefills: int
    compile_steps: frozenset  # the steps in which a shape compiled at runtime

    def serves(self, max_num_seqs: int, max_prefills: int) -> bool:
        """The schedule is that of a configuration with these limits: the same ones, or ones that never
        bound (the reference never reached its own nor these)."""
        return ((max_num_seqs == self.max_num_seqs or self.peak_running < min(max_num_seqs, self.max_num_seqs))
                and (max_prefills == self.max_prefills or self.peak_prefills < min(max_prefills, self.max_prefills)))


@dataclass
class FastServing:
    """Serving figures of many configurations of one target (workload and arrivals): the virtual clock
    once per scheduler group (and speed band), re-costed schedules for the rest."""

    target: ServingTarget
    band: float = BAND
    percentiles: tuple[float, ...] = (50, 90, 99)
    clock_runs: int = 0
    replays: int = 0
    _requests: list | None = None
    _schedules: dict = field(default_factory=dict)  # group -> [Schedule]
    _pads: dict = field(default_factory=dict)  # (plan key, schedule id) -> buckets of its raw shapes
    _bounds: dict = field(default_factory=dict)  # (block size, max_num_seqs) -> KV blocks the load may hold

    def __post_init__(self):
        self._requests = serving_requests(self.target)
        # closed: every request is ready at once (request rate inf), so sends follow finishes only
        self.closed = bool(self._requests) and len({a for a, _, _ in self._requests}) == 1

    def predict(self, pred: StartupPrediction, keys=SERVING_KEYS) -> dict[str, float]:
        """The load test's figures (`keys`, vllm bench serve's names) of a configuration that starts."""
        if not self._requests or pred.failure is not None or pred.plan is None:
            return {}
        group = self._group(pred)
        limits = self._limits(pred)
        scheds = self._schedules.get(group) if group is not None else None
        for sched in scheds or []:
            if not sched.serves(*limits):
                continue
            d, compiled = self._durations(pred, sched)
            if d is None:
                break
            if sched.closed or (frozenset(compiled.values()) == sched.compile_steps and self._in_band(sched, d)):
                self.replays += 1
                ends = self._ends(sched, d)
                out = self._metrics(sched, ends, self._sends(sched, d, ends), keys)
                out.update({k: float(v) for k, v in (("runtime_compiles", len(compiled)), ("failed", 0)) if k in keys})
                return out
        return self._clock(pred, group, keys)

    # -- the reference: a clock run --------------------------------------------------------------------
    def _clock(self, pred: StartupPrediction, group, keys) -> dict[str, float]:
        self.clock_runs += 1
        run = run_virtual(pred, self._requests, keep_steps=True, max_concurrency=self.target.load.max_concurrency)
        summary = run.summary()
        if group is not None:
            sched = record(run, self._requests, self.target.load.max_concurrency, self.closed, *self._limits(pred))
            if sched is not None:
                self._schedules.setdefault(group, []).append(sched)
        return {k: float(summary[k]) for k in keys if summary.get(k) is not None}

    def _group(self, pred: StartupPrediction):
        """What the schedule depends on besides step times; None: not shared (the KV cache may run short).
        Limits the load never reaches count as unlimited: at most `limit` requests are ever in the server."""
        cfg = pred.config
        n = pred.num_blocks
        if n - self._kv_bound(pred.kv_block_tokens, cfg.max_num_seqs, pred.state_blocks) <= int(0.01 * n) + 1:
            return None
        reqs = self._requests
        limit = min(self.target.load.max_concurrency or len(reqs), len(reqs))
        budget = min(cfg.max_num_batched_tokens, limit * max(i + o for _, i, o in reqs))
        return pred.rules.engine, pred.profile == "fork-1.17", pred.plan.contiguous_pa, cfg.block_size, budget

    def _limits(self, pred: StartupPrediction) -> tuple[int, int]:
        """(max_num_seqs, prefill batch), each capped at the requests the load ever has in the server."""
        reqs = self._requests
        limit = min(self.target.load.max_concurrency or len(reqs), len(reqs))
        return min(pred.config.max_num_seqs, limit), min(max_prefill_seqs(pred), limit)

    def _in_band(self, sched: Schedule, d: np.ndarray) -> bool:
        """Open loop: the schedule's prefill and decode steps each take within `band` of the reference's
        time (and compiles at runtime in the same steps: a stall reshapes the batches after it)."""
        prefill, decode = d[sched.prefill_steps].sum(), d[~sched.prefill_steps].sum()
        # A server that ran max_num_seqs sequences at once was saturated: requests queued, and the slightest
        # change of pace reorders the queue (a p99 TTFT can double for 1% of step time). Only its own pace then.
        band = self.band if sched.peak_running < sched.max_num_seqs else 1e-9
        return (abs(math.log(max(prefill, 1e-12) / sched.prefill_s)) <= math.log1p(band)
                and abs(math.log(max(decode, 1e-12) / sched.decode_s)) <= math.log1p(band))

    def _kv_bound(self, block_size: int, max_num_seqs: int, state_blocks: int = 0) -> int:
        """KV blocks the load test may hold at once (an upper bound: its longest requests all running; v0 keeps
        1% free). A hybrid's requests each hold `state_blocks` more."""
        key = (block_size, max_num_seqs, state_blocks)
        if key not in self._bounds:
            reqs = self._requests
            running = min(max_num_seqs, self.target.load.max_concurrency or len(reqs), len(reqs))
            blocks = sorted((-(-(i + o) // block_size) + state_blocks for _, i, o in reqs), reverse=True)
            self._bounds[key] = sum(blocks[:running]) + 1
        return self._bounds[key]

    # -- re-costing ------------------------------------------------------------------------------------
    def _durations(self, pred: StartupPrediction, sched: Schedule) -> tuple[np.ndarray | None, dict]:
        """Each step's duration under this configuration (the engine's `_run`, batch by batch), and the shapes
        that compile at runtime with the step each first runs in."""
        buckets = self._padded(pred, sched)
        cost = pred.cost
        rt_graphs = runtime_graphs(pred)
        seen = {"prompt": pred.warmed_prompt, "decode": pred.warmed_decode}
        graphed = {"prompt": set(pred.graphed_prompt), "decode": set(pred.graphed_decode)}
        steady: dict[tuple, float] = {}
        first: dict[tuple, int] = {}
        per_raw = np.empty(len(buckets))
        for i, ((phase, *_), bucket) in enumerate(zip(sched.raw, buckets)):
            pb = (phase, bucket)
            if pb not in steady:
                warm = bucket in seen[phase]
                g = bucket in graphed[phase] or (not warm and rt_graphs)
                if phase == "prompt":
                    steady[pb] = cost.prefill_time(*prompt_shape(bucket), g)
                else:
                    steady[pb] = cost.decode_time(bucket[0], decode_blocks(pred.profile, bucket, cost.block_size), g)
                if not warm:
                    first[pb] = int(sched.raw_first[i])
            elif pb in first:
                first[pb] = min(first[pb], int(sched.raw_first[i]))
            per_raw[i] = steady[pb]
        d = np.bincount(sched.occ_step, weights=per_raw[sched.occ_raw], minlength=sched.n_steps)
        for (phase, bucket), step in first.items():  # a shape the warmup missed compiles where first met
            d[step] += compile_seconds(pred, cost, phase, bucket, False) + (cost.capture_time() if rt_graphs else 0.0)
        if d.min() < TURNAROUND_S:
            return None, {}  # a step shorter than the client's turnaround: the schedule may differ
        return d, first

    def _padded(self, pred: StartupPrediction, sched: Schedule) -> list[tuple]:
        cfg, plan = pred.config, pred.plan
        key = (pred.profile, plan.strategy, plan.dims, plan.contiguous_pa, tuple(plan.prompt), tuple(plan.decode),
               tuple(plan.unified), cfg.block_size, cfg.max_num_seqs, cfg.max_model_len, cfg.max_num_batched_tokens,
               cfg.num_hpu_blocks, id(sched))
        found = self._pads.get(key)
        if found is None:
            profile, mine = get_profile(pred.profile), _pad_copy(plan)  # runtime buckets join the copy
            found = [tuple((profile.pad_prompt(mine, bs, a, b) if phase == "prompt"
                            else profile.pad_decode(mine, bs, b)).bucket) for phase, bs, a, b in sched.raw]
            if len(self._pads) >= 4096:
                self._pads.pop(next(iter(self._pads)))
            self._pads[key] = found
        return found

    def _ends(self, sched: Schedule, d: np.ndarray) -> np.ndarray:
        """When each step ends. Busy steps follow one another; where the clock's engine was idle, a step
        waits for a client turnaround after a finish (closed loop: the same gap) or for an arrival (open
        loop: that time, unless the previous step ends later)."""
        base = np.cumsum(d + sched.turnaround_gap)
        before = np.concatenate(([0.0], base[:-1]))
        return base + np.maximum.accumulate(np.maximum(sched.wake - before, sched.start))

    def _sends(self, sched: Schedule, d: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """When each request is sent: its arrival, placed at the same point of the step it fell in (the
        schedule keeps its composition, so the arrivals move with the steps), and after a closed loop's
        finish plus the client's turnaround."""
        k = sched.arrival_step
        send = ends[k] - d[k] * (1.0 - sched.arrival_frac)
        freed = sched.freed_by >= 0
        send[freed] = np.maximum(send[freed], ends[sched.freed_by[freed]] + TURNAROUND_S)
        return send

    def _metrics(self, sched: Schedule, ends: np.ndarray, send: np.ndarray, keys) -> dict[str, float]:
        ttft = ends[sched.first] - send
        e2el = ends[sched.last] - send
        many = sched.n_out > 1
        tpot = (e2el[many] - ttft[many]) / (sched.n_out[many] - 1)
        duration = float(ends[sched.last].max() - sched.start) if len(sched.last) else 0.0
        out: dict[str, float] = {"duration": duration, "completed": float(len(sched.first)),
                                 "output_throughput": float(sched.n_out.sum() / duration) if duration > 0 else 0.0}
        values = {"ttft": ttft, "e2el": e2el, "tpot": tpot}
        wanted = set(keys)
        if any(k.endswith("_itl_ms") for k in wanted):
            gaps = np.diff(ends[sched.tok_step])
            inner = np.ones(len(gaps), dtype=bool)
            inner[sched.tok_start[1:] - 1] = False  # the step from one request's last token to the next's first
            values["itl"] = gaps[inner]
        for name, v in values.items():
            asked = [k for k in wanted if k.endswith(f"_{name}_ms")]
            if not asked:
                continue
            v = np.sort(v) if len(v) else np.zeros(1)
            for k in asked:
                stat = k[:-len(f"_{name}_ms")]
                if stat == "mean":
                    out[k] = float(np.mean(v) * 1000)
                elif stat == "median":
                    out[k] = float(_median(v) * 1000)
                elif stat == "std":
                    out[k] = float(np.std(v) * 1000)
            for p in self.percentiles:
                if (k := f"p{percentile_key(p)}_{name}_ms") in wanted:
                    out[k] = float(_percentile(v, p) * 1000)
        return {k: out[k] for k in keys if k in out}


def record(run, requests: list, max_concurrency: int | None, closed: bool, max_num_seqs: int = 0,
           max_prefills: int = 0) -> Schedule | None:
    """The schedule of one clock run of `requests`; None when it cannot be shared (an idle step, a failed
    request)."""
    steps = run.steps
    if not steps or any(kind == "idle" for _, _, kind, _ in steps) or any(not t.ok for t in run.timings):
        return None
    starts = np.array([s for s, _, _, _ in steps])
    ends = starts + np.array([dur for _, dur, _, _ in steps])
    index: dict[tuple, int] = {}
    occ_raw, occ_step, raw_first = [], [], []
    for k, (_, _, _, shapes) in enumerate(steps):
        for sh in shapes:
            key = (sh.phase, *sh.raw)
            if key not in index:
                index[key] = len(index)
                raw_first.append(k)
            occ_raw.append(index[key])
            occ_step.append(k)
    step_of_end = {}
    for k, e in enumerate(ends.tolist()):
        step_of_end.setdefault(e, k)
    timings = run.timings  # in send order, which is arrival order
    tok = [[step_of_end[t] for t in r.token_times] for r in timings]
    arrival = np.array(sorted(float(a) for a, _, _ in requests))
    limit = max_concurrency or len(timings)
    finishes = sorted(r[-1] for r in tok)  # a finish frees a slot; the k-th request past the limit takes the
    freed_by = np.array([finishes[i - limit] if i >= limit else -1 for i in range(len(timings))])  # (k-limit)-th
    idle = np.zeros(len(steps))
    idle[1:] = starts[1:] - ends[:-1]
    turnaround = np.where(np.abs(idle - TURNAROUND_S) <= 1e-9, TURNAROUND_S, 0.0)
    wake = np.where((idle > 1e-12) & (turnaround == 0.0), starts, -np.inf)
    if closed and np.isfinite(wake).any():
        return None  # a closed loop idle for another reason than a client turnaround: not a pure schedule
    arrival_step = np.clip(np.searchsorted(starts, arrival, side="right") - 1, 0, len(steps) - 1)
    span = ends[arrival_step] - starts[arrival_step]
    frac = np.clip((arrival - starts[arrival_step]) / np.where(span > 0, span, 1.0), 0.0, 1.0)
    lengths = np.array([len(r) for r in tok])
    durations = ends - starts
    prefill = np.array([kind != "decode" for _, _, kind, _ in steps])
    return Schedule(
        raw=list(index), occ_raw=np.array(occ_raw), occ_step=np.array(occ_step), raw_first=np.array(raw_first),
        n_steps=len(steps), turnaround_gap=turnaround, wake=wake, arrival_step=arrival_step, arrival_frac=frac,
        freed_by=freed_by, first=np.array([r[0] for r in tok]), last=np.array([r[-1] for r in tok]),
        n_out=lengths, tok_step=np.array([k for r in tok for k in r]),
        tok_start=np.concatenate(([0], np.cumsum(lengths)[:-1])), start=float(starts[0]),
        prefill_steps=prefill, prefill_s=float(durations[prefill].sum()), decode_s=float(durations[~prefill].sum()),
        closed=closed, max_num_seqs=max_num_seqs, max_prefills=max_prefills, peak_running=run.stats.peak_running,
        peak_prefills=run.stats.peak_prefills,
        compile_steps=frozenset(k for k, (_, _, _, shapes) in enumerate(steps) if any(sh.compiled for sh in shapes)))


def _median(v: np.ndarray) -> float:
    """np.median of sorted values, without its per-call overhead (the same arithmetic)."""
    n = len(v)
    return float(v[n // 2]) if n % 2 else float(np.mean(v[n // 2 - 1:n // 2 + 1]))


def _percentile(v: np.ndarray, p: float) -> float:
    """np.percentile (linear) of sorted values, with numpy's interpolation formula."""
    index = (p / 100) * (len(v) - 1)
    lo = int(math.floor(index))
    hi = min(lo + 1, len(v) - 1)
    t = index - lo
    a, b = float(v[lo]), float(v[hi])
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


def _pad_copy(plan):
    """What padding may change of a plan, copied (the engine deep-copies it: too slow here): the lists,
    which runtime buckets join, and the containers of its state; derived indexes are left to rebuild."""
    state = {k: (type(v)(v) if isinstance(v, (list, set, dict)) else v) for k, v in plan.state.items()
             if not k.startswith("index_")}
    # Lists a plan's configurations share (shapes.SharedBuckets): the copy pads through their index until a
    # runtime bucket joins it (buckets/vllm_gaudi/padding.py); never changed themselves
    state["shared_lists"] = {phase: lst for phase, lst in (("prompt", plan.prompt), ("decode", plan.decode))
                             if isinstance(lst, SharedBuckets)}
    return replace(plan, prompt=list(plan.prompt), decode=list(plan.decode), unified=list(plan.unified), state=state)
