"""Warmup order, compile times and HPU-graph capture under each release's rules (pure).

Fork <= 1.21.x (docs/bucketing.md D.6): compile every prompt bucket, then every decode bucket, largest
first; then capture graphs inside a memory budget: free memory minus the margin left by
gpu_memory_utilization, split by VLLM_GRAPH_PROMPT_RATIO, candidates ordered by
VLLM_GRAPH_PROMPT_STRATEGY / VLLM_GRAPH_DECODE_STRATEGY. A candidate is skipped when its memory,
estimated from what the graphs captured so far used per batch_seq, does not fit what is left; a second
pass hands leftover decode memory to prompt graphs (and the reverse). This is the upstream loop
(vllm-fork habana_model_runner.py `warmup_graphs`), run on simulated memory.

Fork 1.22 / main and vllm-gaudi: every bucket is compiled and captured in one pass (largest first), with
no budget; running out of device memory is an out-of-memory failure at that bucket.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .costs import T_SAMPLER, CostModel, decode_blocks, prompt_shape
from .prediction import Failure, GraphBudget, StartupPrediction, StepSums, WarmupStep, devmem_error
from .rules import env_value

_ORDERINGS = {
    "min_tokens": lambda b: (b[0] * b[1], b[1], b[0]),
    "max_bs": lambda b: (-b[0], b[1]),
}


def compile_seconds(pred: StartupPrediction, cost: CostModel, phase: str, bucket: tuple, hit: bool) -> float:
    """One bucket's compile seconds, as calibrated for its phase (also what a runtime recompile costs)."""
    if phase == "prompt":
        secs = cost.prompt_compile(*prompt_shape(bucket), cache_hit=hit)
    else:
        secs = cost.decode_compile(decode_blocks(pred.profile, bucket, cost.block_size), cache_hit=hit)
    return secs * cost.corr.warmup_factor("compile", phase)


def multimodal_steps(pred: StartupPrediction, cost: CostModel, free: float, make_step=WarmupStep) -> list:
    """The vision warm-up's steps in the release's order, each as calibrated (perfmodel/vision.py)."""
    from .vision import step_seconds

    vision = pred.vision
    factor = cost.corr.warmup_factor("compile", "multimodal")
    steps = vision.plan.steps
    prompt_s = 0.0
    if vision.fork and steps:  # each image bucket is warmed inside a prompt scenario at the longest prompt bucket
        prompt_s = cost.prompt_compile(1, steps[0].seq_len, 0)
    # [i/N] as the release prints it: the candidate's place (vllm-gaudi may warm several counts per candidate)
    return [make_step("compile+capture", "multimodal", s.index, s.total, vision.step_key(s),
                      step_seconds(vision, cost, s, prompt_s) * factor, free, label=s.modality) for s in steps]


def graph_mem(pred: StartupPrediction, cost: CostModel, phase: str, bucket: tuple) -> float:
    bs, seq, ctx = prompt_shape(bucket)
    return cost.graph_mem(pred.rules, phase, bs * (seq + ctx * cost.block_size))


def plan_warmup(pred: StartupPrediction, cost: CostModel, cached_recipes: frozenset,  # noqa: C901
                make_step=WarmupStep, keep_steps: bool = True) -> None:
    """Fill pred.steps, graphed sets and memory; set pred.failure if warmup cannot finish. `make_step`: the type
    of the steps (WarmupStep, or the lighter StepRow of bulk prediction); `keep_steps` False (bulk prediction):
    where the release captures every bucket, only the steps' sums are kept (pred.step_sums), with numpy."""
    plan, mem = pred.plan, pred.memory
    if pred.skip_warmup:
        return  # nothing compiled, nothing captured: every shape compiles at first use
    phases = (("prompt", list(plan.prompt)), ("decode", list(plan.decode)))
    pred.warmed_prompt, pred.warmed_decode = frozenset(plan.prompt), frozenset(plan.decode)
    vision = pred.vision
    if vision is not None:
        pred.warmed_images = vision.warmed_keys()
    if not keep_steps and pred.rules.capture == "all" and not cached_recipes:
        _capture_all_sums(pred, cost, phases, mem.free_after_kv)
        if vision is not None and not pred.failure:
            mm = sum(s.seconds for s in multimodal_steps(pred, cost, mem.free_after_kv, make_step))
            pred.step_sums = replace(pred.step_sums, multimodal_warmup=mm)
        if pred.rules.sampler_warmup and not pred.failure:
            pred.sampler_seconds = T_SAMPLER
        return

    def hit(phase: str, bucket: tuple) -> bool:
        return bool(cached_recipes) and pred.recipe_id(phase, bucket) in cached_recipes

    free = mem.free_after_kv
    if pred.rules.capture == "all":
        used = {"prompt": 0.0, "decode": 0.0}
        if vision is not None and not vision.fork:  # vllm-gaudi: the first phase of the warm-up
            pred.steps += multimodal_steps(pred, cost, free, make_step)
        for phase, buckets in phases:
            if phase == "decode" and vision is not None and vision.fork:  # the fork: after the prompt graphs
                pred.steps += multimodal_steps(pred, cost, free - used["prompt"], make_step)
            for i, bucket in enumerate(reversed(buckets)):
                secs = compile_seconds(pred, cost, phase, bucket, hit(phase, bucket))
                g = graph_mem(pred, cost, phase, bucket) if pred.graphs else 0.0
                step = make_step("compile+capture" if pred.graphs else "compile", phase, i + 1, len(buckets),
                                 bucket, secs + (cost.capture_time() * cost.corr.warmup_factor("compile", phase)
                                                 if pred.graphs else 0.0),
                                 free - used["prompt"] - used["decode"], hit(phase, bucket), g)
                pred.steps.append(step)
                if g and used["prompt"] + used["decode"] + g > free:
                    pred.failure = Failure("warmup", devmem_error(int(g)), at_step=len(pred.steps) - 1)
                    return
                used[phase] += g
                if pred.graphs:
                    (pred.graphed_prompt if phase == "prompt" else pred.graphed_decode).append(bucket)
        pred.prompt_graph_mem, pred.decode_graph_mem = used["prompt"], used["decode"]
    elif not keep_steps and not cached_recipes:
        compile_s = {phase: float(_compile_many(pred, cost, phase, buckets).sum()) for phase, buckets in phases}
        pred.step_sums = StepSums(prompt_warmup=compile_s["prompt"], decode_warmup=compile_s["decode"],
                                  compile=compile_s["prompt"] + compile_s["decode"])
        if pred.graphs:
            _capture_within_budget(pred, cost, free, None)
    else:
        for phase, buckets in phases:
            for i, bucket in enumerate(reversed(buckets)):
                h = hit(phase, bucket)
                pred.steps.append(make_step("compile", phase, i + 1, len(buckets), bucket,
                                            compile_seconds(pred, cost, phase, bucket, h), free, h))
        if pred.graphs:
            _capture_within_budget(pred, cost, free, make_step)
    if pred.rules.sampler_warmup and not pred.failure:
        pred.sampler_seconds = T_SAMPLER


def _capture_all_sums(pred: StartupPrediction, cost: CostModel, phases, free: float) -> None:
    """The "all" branch of plan_warmup for a whole bucket list at once, keeping the sums of its steps:
    compile (+ capture) of every bucket, largest first, prompt then decode, graph memory added up until a
    graph does not fit (the warmup's out-of-memory failure at that step)."""
    corr, order = cost.corr, [(phase, buckets[::-1]) for phase, buckets in phases]
    secs, graph, names = [], [], []
    for phase, buckets in order:
        if not buckets:
            continue
        compile_s = _compile_many(pred, cost, phase, buckets)
        tokens = np.array([b[0] * (b[1] + (b[2] if len(b) > 2 else 0) * cost.block_size) for b in buckets],
                          dtype=float) if phase == "prompt" else 0.0  # the decode graph's memory is one constant
        secs.append(compile_s)
        graph.append(cost.graph_mem(pred.rules, phase, tokens) * np.ones(len(buckets)) if pred.graphs
                     else np.zeros(len(buckets)))
        names.append(np.full(len(buckets), phase == "prompt"))
    if not secs:
        pred.step_sums = StepSums()
        return
    compile_s, g, is_prompt = np.concatenate(secs), np.concatenate(graph), np.concatenate(names)
    capture = np.where(is_prompt, corr.warmup_factor("compile", "prompt"), corr.warmup_factor("compile", "decode")
                       ) * cost.capture_time() if pred.graphs else np.zeros(len(g))
    over = np.nonzero((g > 0) & (np.cumsum(g) > free))[0]
    n = len(g) if not len(over) else int(over[0]) + 1  # steps run, the failing one included
    if len(over):
        pred.failure = Failure("warmup", devmem_error(int(g[n - 1])), at_step=n - 1)
    kept = slice(0, n - (1 if len(over) else 0))  # buckets whose graph was captured
    p = int(is_prompt.sum())
    if pred.graphs:
        pred.graphed_prompt = order[0][1][:min(kept.stop, p)]
        pred.graphed_decode = order[1][1][:max(0, kept.stop - p)]
        if not len(over):  # as plan_warmup's loop: a failed warm-up leaves the graph memory unset
            pred.prompt_graph_mem = float(g[:p].sum())
            pred.decode_graph_mem = float(g[p:].sum())
    step = compile_s[:n] + capture[:n]
    pred.step_sums = StepSums(prompt_warmup=float(step[is_prompt[:n]].sum()),
                              decode_warmup=float(step[~is_prompt[:n]].sum()), compile=float(compile_s[:n].sum()))


def _compile_many(pred: StartupPrediction, cost: CostModel, phase: str, buckets: list) -> np.ndarray:
    """compile_seconds of every bucket of a list (no recipe-cache hit), with numpy."""
    if not buckets:
        return np.zeros(0)
    factor = cost.corr.warmup_factor("compile", phase)
    if phase == "prompt":
        shape = np.array([prompt_shape(b) for b in buckets], dtype=float)
        return cost.prompt_compile(shape[:, 0], shape[:, 1], shape[:, 2]) * factor
    blocks = np.array([decode_blocks(pred.profile, b, cost.block_size) for b in buckets], dtype=float)
    return cost.decode_compile(blocks) * factor


def compile_share(pred: StartupPrediction, cost: CostModel) -> float:
    """Seconds of the warmup spent compiling (what a recipe-cache hit saves part of): the steps' time
    without their graph captures."""
    if pred.step_sums is not None:
        return pred.step_sums.compile
    total = 0.0
    for s in pred.steps:
        if s.kind == "compile":
            total += s.seconds
        elif s.kind == "compile+capture" and s.phase == "multimodal":
            total += s.seconds  # the vision warm-up's time is its compile (and, where it runs, its forward)
        elif s.kind == "compile+capture":
            total += s.seconds - cost.capture_time() * cost.corr.warmup_factor("compile", s.phase)
    return total


def _capture_within_budget(pred: StartupPrediction, cost: CostModel, free_mem: float, make_step=WarmupStep) -> None:
    """`make_step` None: bulk prediction, the capture steps only counted (pred.step_sums.capture)."""
    env, profile = pred.env, pred.profile
    graph_free = free_mem - pred.memory.margin
    try:
        ratio = float(env_value(env, profile, "VLLM_GRAPH_PROMPT_RATIO", "0.3"))
    except ValueError as e:
        pred.failure = Failure("warmup", f"ValueError: {e}", at_step=len(pred.steps))
        return
    prompt_avail = ratio * graph_free
    pred.budget = GraphBudget(free_mem, graph_free, prompt_avail, graph_free - prompt_avail, ratio)
    strategies = {}
    for phase, var, default in (("prompt", "VLLM_GRAPH_PROMPT_STRATEGY", "min_tokens"),
                                ("decode", "VLLM_GRAPH_DECODE_STRATEGY", "max_bs")):
        strategies[phase] = env_value(env, profile, var, default)
        if strategies[phase] not in _ORDERINGS:
            pred.failure = Failure("warmup", "NotImplementedError: Unsupported graph allocation strategy: "
                                   f"{strategies[phase]}", at_step=len(pred.steps))
            return
    state = {"free": free_mem, "captures": 0}
    capture_s = cost.capture_time() * cost.corr.capture
    # Per phase, in the strategy's order: the buckets, their batch_seq, the memory of their graph, and
    # which are captured (by position; a second pass skips them).
    order: dict[str, tuple[list, list, list, set]] = {}
    for phase, buckets in (("prompt", pred.plan.prompt), ("decode", pred.plan.decode)):
        ordered = sorted(buckets, key=_ORDERINGS[strategies[phase]])
        if phase == "prompt":
            seqs = [b[0] * b[1] for b in ordered]
            mems = [graph_mem(pred, cost, phase, b) for b in ordered]
        else:
            seqs = [b[0] for b in ordered]
            mems = [cost.graph_mem(pred.rules, "decode", 0)] * len(ordered)  # one constant per decode graph
        order[phase] = (ordered, seqs, mems, set())

    def capture(phase: str, available: float, start_mem: float = 0.0,
                total_batch_seq: float = 0.001) -> tuple[float, float, bool]:
        total_mem, captured_all = start_mem, True
        ordered, seqs, mems, done = order[phase]
        out = pred.graphed_prompt if phase == "prompt" else pred.graphed_decode
        for idx, batch_seq in enumerate(seqs):
            if batch_seq / total_batch_seq * total_mem >= available:
                captured_all = False
                continue
            if idx in done:
                continue
            done.add(idx)
            used = mems[idx]
            if make_step is None:  # bulk prediction: the steps' sums only
                state["captures"] += 1
            else:
                pred.steps.append(make_step("capture", phase, idx + 1, len(ordered), ordered[idx], capture_s,
                                            state["free"], graph_mem=used))
            out.append(ordered[idx])
            state["free"] -= used
            available -= used
            total_mem += used
            total_batch_seq += batch_seq
        return total_mem, total_batch_seq, captured_all

    mem_p, seq_p, all_p = capture("prompt", pred.budget.prompt)
    mem_d, seq_d, all_d = capture("decode", pred.budget.decode)
    if mem_p + mem_d < graph_free and not all_p and all_d:
        mem_p, _, all_p = capture("prompt", graph_free - mem_p - mem_d, mem_p, seq_p)
    if mem_p + mem_d < graph_free and not all_d and all_p:
        mem_d, _, _ = capture("decode", graph_free - mem_p - mem_d, mem_d, seq_d)
    pred.prompt_graph_mem, pred.decode_graph_mem = mem_p, mem_d
    if make_step is None:
        pred.step_sums = replace(pred.step_sums, capture=state["captures"] * capture_s)
