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

from .costs import T_SAMPLER, CostModel, decode_blocks, prompt_shape
from .prediction import Failure, GraphBudget, StartupPrediction, WarmupStep, devmem_error
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


def graph_mem(pred: StartupPrediction, cost: CostModel, phase: str, bucket: tuple) -> float:
    bs, seq, ctx = prompt_shape(bucket)
    return cost.graph_mem(pred.rules, phase, bs * (seq + ctx * cost.block_size))


def plan_warmup(pred: StartupPrediction, cost: CostModel, cached_recipes: frozenset) -> None:
    """Fill pred.steps, graphed sets and memory; set pred.failure if warmup cannot finish."""
    plan, mem = pred.plan, pred.memory
    if pred.skip_warmup:
        return  # nothing compiled, nothing captured: every shape compiles at first use
    phases = (("prompt", list(plan.prompt)), ("decode", list(plan.decode)))
    pred.warmed_prompt, pred.warmed_decode = frozenset(plan.prompt), frozenset(plan.decode)

    def hit(phase: str, bucket: tuple) -> bool:
        return bool(cached_recipes) and pred.recipe_id(phase, bucket) in cached_recipes

    free = mem.free_after_kv
    if pred.rules.capture == "all":
        used = {"prompt": 0.0, "decode": 0.0}
        for phase, buckets in phases:
            for i, bucket in enumerate(reversed(buckets)):
                secs = compile_seconds(pred, cost, phase, bucket, hit(phase, bucket))
                g = graph_mem(pred, cost, phase, bucket) if pred.graphs else 0.0
                step = WarmupStep("compile+capture" if pred.graphs else "compile", phase, i + 1, len(buckets),
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
    else:
        for phase, buckets in phases:
            for i, bucket in enumerate(reversed(buckets)):
                h = hit(phase, bucket)
                pred.steps.append(WarmupStep("compile", phase, i + 1, len(buckets), bucket,
                                             compile_seconds(pred, cost, phase, bucket, h), free, h))
        if pred.graphs:
            _capture_within_budget(pred, cost, free)
    if pred.rules.sampler_warmup and not pred.failure:
        pred.sampler_seconds = T_SAMPLER


def _capture_within_budget(pred: StartupPrediction, cost: CostModel, free_mem: float) -> None:
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
    graphed: set = set()
    state = {"free": free_mem}

    def capture(phase: str, buckets: list, available: float, start_mem: float = 0.0,
                total_batch_seq: float = 0.001) -> tuple[float, float, bool]:
        total_mem, captured_all = start_mem, True
        ordered = sorted(buckets, key=_ORDERINGS[strategies[phase]])
        for idx, bucket in enumerate(ordered):
            batch_seq = bucket[0] * bucket[1] if phase == "prompt" else bucket[0]
            if batch_seq / total_batch_seq * total_mem >= available:
                captured_all = False
                continue
            if (phase, bucket) in graphed:
                continue
            graphed.add((phase, bucket))
            used = graph_mem(pred, cost, phase, bucket)
            pred.steps.append(WarmupStep("capture", phase, idx + 1, len(ordered), bucket,
                                         cost.capture_time() * cost.corr.capture,
                                         state["free"], graph_mem=used))
            (pred.graphed_prompt if phase == "prompt" else pred.graphed_decode).append(bucket)
            state["free"] -= used
            available -= used
            total_mem += used
            total_batch_seq += batch_seq
        return total_mem, total_batch_seq, captured_all

    prompt, decode = list(pred.plan.prompt), list(pred.plan.decode)
    mem_p, seq_p, all_p = capture("prompt", prompt, pred.budget.prompt)
    mem_d, seq_d, all_d = capture("decode", decode, pred.budget.decode)
    if mem_p + mem_d < graph_free and not all_p and all_d:
        mem_p, _, all_p = capture("prompt", prompt, graph_free - mem_p - mem_d, mem_p, seq_p)
    if mem_p + mem_d < graph_free and not all_d and all_p:
        mem_d, _, _ = capture("decode", decode, graph_free - mem_p - mem_d, mem_d, seq_d)
    pred.prompt_graph_mem, pred.decode_graph_mem = mem_p, mem_d
