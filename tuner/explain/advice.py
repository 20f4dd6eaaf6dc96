"""Advice from a read log: what the same release would build with other settings, and what that would
cost in warm-up, before anything boots.

The bucket counts come from the bucket engine (exact for the release). The warm-up figures are scaled
from the log's own warm-up: the observed seconds per bucket of each phase times the alternative's
bucket count, so a slow device or a big model is already in them. They are predictions, and say so.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field

from ..buckets import BucketConfigError, ServerConfig, calc, get_profile, names
from ..buckets.coverage import close_gaps, coverage_gaps
from .analysis import PhaseBuckets, ReleaseGuess
from .timeline import Timeline

# Which shipped search space fits which release family (a starting point for `tune`).
_SPACES = {
    "fork-1.19": "search_spaces/fork-1.21-linear.yaml", "fork-1.20": "search_spaces/fork-1.21-linear.yaml",
    "fork-1.21.0": "search_spaces/fork-1.21-linear.yaml", "fork-1.21.2": "search_spaces/fork-1.21-linear.yaml",
    "fork-1.22": "search_spaces/fork-1.22-exponential.yaml", "fork-main": "search_spaces/fork-1.22-exponential.yaml",
    "fork-1.23": "search_spaces/fork-1.22-exponential.yaml",
    "gaudi-0.26.0": "search_spaces/vllm-gaudi.yaml", "gaudi-main": "search_spaces/vllm-gaudi.yaml",
}
# Releases without a space of their own: the nearest shipped one, run with --release (tune drops the
# parameters that release does not read, and says so). vllm-gaudi 0.10.1/0.15.1 crash on the
# VLLM_BUCKETING_STRATEGY values of vllm-gaudi.yaml, so they take the fork's exponential space.
_BORROWED = {"fork-1.17": "search_spaces/fork-1.21-linear.yaml", "fork-1.18": "search_spaces/fork-1.21-linear.yaml",
             "gaudi-0.10.1": "search_spaces/fork-1.22-exponential.yaml",
             "gaudi-0.15.1": "search_spaces/fork-1.22-exponential.yaml"}

_DIM_VARS = {  # logged dim name -> the variable stem it comes from
    ("prompt", "bs"): "VLLM_PROMPT_BS_BUCKET", ("prompt", "seq"): "VLLM_PROMPT_SEQ_BUCKET",
    ("prompt", "query"): "VLLM_PROMPT_QUERY_BUCKET", ("decode", "bs"): "VLLM_DECODE_BS_BUCKET",
    ("decode", "block"): "VLLM_DECODE_BLOCK_BUCKET", ("decode", "blocks"): "VLLM_DECODE_BLOCK_BUCKET",
    ("decode", "seq"): "VLLM_DECODE_SEQ_BUCKET",  # fork 1.17: context tokens per sequence
    ("prompt", "blocks"): "VLLM_PROMPT_CTX_BUCKET",
}


@dataclass(frozen=True)
class Alternative:
    name: str
    description: str
    env: dict[str, str]
    strategy: str | None
    prompt_buckets: int | None
    decode_buckets: int | None
    predicted_warmup_s: float | None
    error: str | None = None
    predicted_kv_blocks: int | None = None  # with the performance model (explain --model-shape)
    predicted_warmup_band: tuple[float, float] | None = None  # its 2-sd range (performance model)
    # why it is no option for this server: its bucket count or warm-up far beyond the logged run's
    unusable: str | None = None
    # what its buckets leave uncovered for this server (coverage.py); an alternative with gaps is never the advice
    gaps: tuple[str, ...] = ()
    # the MAX values raised so that it covers the server (an alternative passes its own checks, or says why not)
    raised: tuple[str, ...] = ()


@dataclass
class Advice:
    profile: str | None
    server: dict | None                       # the ServerConfig the advice assumed, as a dict
    assumptions: list[str] = field(default_factory=list)
    alternatives: list[Alternative] = field(default_factory=list)
    tune_command: list[str] | None = None
    notes: list[str] = field(default_factory=list)
    predicted_by: str = "the log's per-bucket pace"  # or the performance model calibrated with the log
    # the engine's rebuild of the logged settings against the logged lists: None when they agree (or
    # nothing was rebuilt), else what differs, said wherever the advice is shown
    rebuild_mismatch: str | None = None
    graph_reserve: object | None = None  # analysis.ReserveHint: the graph reserve the warm-up left unused


def _max_of(phases: dict[str, PhaseBuckets], phase: str, dim_index: int) -> int | None:
    """The largest value of a bucket dimension: from the listed buckets when the list is whole, else
    from the logged config's max (a cut list only gives a lower bound)."""
    p = phases.get(phase)
    if p is None:
        return None
    if p.complete and len(p.ranges) > dim_index:
        return p.ranges[dim_index][1]
    values = list((p.config or {}).values())
    if len(values) > dim_index and len(values[dim_index]) >= 3:
        return values[dim_index][2]
    return None


def _cut(phases: dict[str, PhaseBuckets]) -> str:
    cut = [p for p in phases.values() if not p.complete and p.listed]
    return "; ".join(f"the {p.phase} bucket list is cut after {p.listed} of {p.count} buckets" for p in cut)


def env_from_configs(phases: dict[str, PhaseBuckets]) -> dict[str, str]:
    """The linear MIN/STEP/MAX the log's bucket config lines show, as the variables that set them."""
    env = {}
    for phase, p in phases.items():
        for dim, values in (p.config or {}).items():
            stem = _DIM_VARS.get((phase, dim))
            if stem and len(values) >= 3:
                env[f"{stem}_MIN"], env[f"{stem}_STEP"], env[f"{stem}_MAX"] = (str(v) for v in values[:3])
    return env


def _longest_sequence(phases: dict[str, PhaseBuckets]) -> int:
    """The shortest max_model_len the logged buckets allow: never below a prompt length or a decode
    context the log shows (fork 1.17 decodes over seq_len in tokens: its decode buckets reach it)."""
    longest = _max_of(phases, "prompt", 1) or 0
    decode = phases.get("decode")
    if decode is not None and decode.dims[-1:] == ("seq",):
        longest = max(longest, _max_of(phases, "decode", len(decode.dims) - 1) or 0)
    return longest


def server_from_log(phases: dict[str, PhaseBuckets], kv_blocks: int | None, *, block_size: int,
                    max_model_len: int | None, max_num_seqs: int | None,
                    max_num_batched_tokens: int | None, token_budget: int | None,
                    omitted: int = 0) -> tuple[ServerConfig, list[str]]:
    """The server a log's buckets were built for. The token budget: given, else the engine's settings,
    else the Omitted line's; when only an omission count is logged, the largest batch x length the
    whole prompt list kept (any budget from there to the smallest omitted bucket builds the same)."""
    assumed = []
    seqs = max_num_seqs or _max_of(phases, "decode", 0)
    if not seqs or not (max_model_len or _max_of(phases, "prompt", 1)):
        cut = _cut(phases)
        raise BucketConfigError(f"{cut}: its largest values are not in the log" if cut else
                                "the decode batch sizes or the prompt lengths are not in the log")
    if max_num_seqs is None:
        assumed.append(f"max_num_seqs={seqs} (the largest decode batch bucket)")
    mml = max_model_len or _longest_sequence(phases)
    if max_model_len is None:
        assumed.append(f"max_model_len={mml} (the longest sequence the log's buckets hold: prompt length, or "
                       "a decode context in tokens; pass --max-model-len)")
    budget = max_num_batched_tokens or token_budget
    if budget is None:
        prompt = phases.get("prompt")
        if prompt is not None and prompt.complete and prompt.max_tokens and omitted:
            budget = prompt.max_tokens
            assumed.append(f"max_num_batched_tokens={budget} (inferred: the log omits {omitted} prompt buckets "
                           "without printing the budget; the largest batch x length it kept)")
        elif prompt is not None and prompt.complete and prompt.max_tokens:
            # prompt buckets with a context dimension are chunks of a prefill (v1): the budget may be below
            # max_model_len; without one a prompt is prefilled whole, so the budget holds the longest
            chunked = len(prompt.dims) >= 3
            budget = prompt.max_tokens if chunked else max(prompt.max_tokens, mml)
            assumed.append(f"max_num_batched_tokens={budget} (the largest batch x length among the logged "
                           "prompt buckets)")
        else:
            budget = max(mml, (_max_of(phases, "prompt", 0) or 1) * mml)
            assumed.append(f"max_num_batched_tokens={budget} (no prompt bucket was omitted by a token budget)")
    blocks = kv_blocks
    if blocks is None:
        decode = phases.get("decode")
        largest = decode.ranges[-1][1] if decode and decode.ranges else None
        blocks = max(largest or 0, seqs * math.ceil(mml / block_size))
        assumed.append(f"KV blocks={blocks} (not in the log: the larger of the largest decode block bucket and "
                       "max_num_seqs x blocks per sequence)")
    return ServerConfig(block_size=block_size, max_num_seqs=seqs, max_model_len=mml,
                        max_num_batched_tokens=budget, num_hpu_blocks=blocks), assumed


def _unclamped(phases: dict[str, PhaseBuckets], blocks: int) -> bool:
    """main's decode block range stops at 3 x the KV blocks unless the runner skips the clamp (hybrid and
    interleaved sliding-window models): a logged range past it says the runner did."""
    decode = phases.get("decode")
    block = (decode.config or {}).get("block") if decode else None
    return bool(block) and len(block) > 2 and block[2] > 3 * blocks


def _predict(timeline: Timeline, logged: dict[str, PhaseBuckets], prompt: int, decode: int) -> float | None:
    """The log's warm-up scaled by bucket counts, phase by phase (prompt and decode paced separately,
    from the primary run's timed stretches)."""
    total = timeline.warmup_total_s
    shares = timeline.phase_shares()
    step_sum = sum(shares.values())
    if total is None:
        total = step_sum or None
    if not total:
        return None
    predicted = 0.0
    buckets = sum(p.count for ph, p in logged.items() if ph in ("prompt", "decode") and p.count)
    for phase, count in (("prompt", prompt), ("decode", decode)):
        seen = logged.get(phase)
        if seen is None or not seen.count:
            continue
        # without timed steps, every logged bucket is taken to cost the same
        weight = shares[phase] / step_sum if step_sum else seen.count / buckets
        predicted += total * weight * count / seen.count
    return predicted or None   # no phase both counted and timed: unknown, never 0 s for a warm-up that ran


def _build(profile_name: str, cfg: ServerConfig, env: dict[str, str], strategy: str | None):
    from dataclasses import replace
    return get_profile(profile_name).build(replace(cfg, env=env), strategy)


# An alternative this far beyond the logged run (buckets, or predicted warm-up) is no option for the
# server: a calculator fed a huge max_model_len proposes 100,000+ buckets and days of warm-up.
UNUSABLE_FACTOR = 10


def unusable_reason(alt: Alternative, logged_buckets: int, logged_warmup_s: float | None) -> str | None:
    """Why `alt` is far beyond the logged run (None: within UNUSABLE_FACTOR of it on both counts)."""
    built = (alt.prompt_buckets or 0) + (alt.decode_buckets or 0)
    if logged_buckets and built > UNUSABLE_FACTOR * logged_buckets:
        return (f"{built:,} buckets, {built / logged_buckets:.0f}x the logged run's {logged_buckets:,}: far more than "
                "this server ever warmed up")
    warmup = alt.predicted_warmup_s
    if logged_warmup_s and warmup and warmup > UNUSABLE_FACTOR * logged_warmup_s:
        return (f"{warmup:,.0f} s of predicted warm-up, {warmup / logged_warmup_s:.0f}x the logged run's "
                f"{logged_warmup_s:,.0f} s")
    return None


def mark_unusable(advice: Advice, by_phase: dict[str, PhaseBuckets], logged_warmup_s: float | None) -> None:
    """Set `unusable` on every alternative far beyond the logged run (never on the rebuild "as logged")."""
    from dataclasses import replace

    logged = sum(p.count for ph, p in by_phase.items() if ph in ("prompt", "decode") and p.count)
    base = next((a for a in advice.alternatives if a.name == "as logged" and a.error is None), None)
    warmup = logged_warmup_s or (base.predicted_warmup_s if base else None)
    advice.alternatives = [a if a.name == "as logged" or a.error is not None
                           else replace(a, unusable=unusable_reason(a, logged, warmup))
                           for a in advice.alternatives]


def advise(release: ReleaseGuess, phases: list[PhaseBuckets], timeline: Timeline, kv_blocks: int | None,
           token_budget: int | None, *, block_size: int = 128, max_model_len: int | None = None,
           max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None,
           input_len: int | None = None, output_len: int | None = None,
           log_path: str | None = None, omitted: int = 0) -> Advice:
    by_phase = {p.phase: p for p in phases}
    profile = release.profile
    advice = Advice(profile=profile, server=None)
    if profile is None or not by_phase:
        advice.notes.append("no Gaudi bucket lines in this log: nothing to compare settings against")
        return advice
    try:
        cfg, assumed = server_from_log(by_phase, kv_blocks, block_size=block_size, max_model_len=max_model_len,
                                       max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                                       token_budget=token_budget, omitted=omitted)
    except BucketConfigError as exc:
        advice.notes.append(f"cannot rebuild the buckets from this log ({exc}); pass --max-num-seqs and "
                            "--max-model-len")
        return advice
    advice.server = {"block_size": cfg.block_size, "max_num_seqs": cfg.max_num_seqs,
                     "max_model_len": cfg.max_model_len, "max_num_batched_tokens": cfg.max_num_batched_tokens,
                     "num_hpu_blocks": cfg.num_hpu_blocks}
    advice.assumptions += assumed
    prof = get_profile(profile)
    inputs = {k: v for k, v in release.inputs if k in prof.model_inputs}
    if "skip_decode_block_clamp" in prof.model_inputs and _unclamped(by_phase, cfg.num_hpu_blocks):
        inputs["skip_decode_block_clamp"] = True
        advice.assumptions.append("the whole decode block range (the logged decode block range reaches past 3 x the "
                                  "KV blocks: a hybrid or sliding-window model, whose range main does not clamp)")
    if inputs:   # what the log shows of the runner, e.g. a habana_main build's token budget filter
        from dataclasses import replace
        cfg = replace(cfg, **inputs)
        advice.server.update(inputs)
    logged_env = env_from_configs(by_phase)
    logged_strategy = strategy_from_configs(by_phase)
    strategy = logged_strategy if logged_strategy in prof.strategies else prof.default_strategy
    candidates = [("as logged", f"the logged settings rebuilt for {profile} (a check of this reading)",
                   {**prof.strategy_env(strategy), **logged_env}, strategy)]

    inp = input_len or max(128, (cfg.max_model_len // 2) // 128 * 128)
    out = output_len or inp
    if input_len is None or output_len is None:
        advice.assumptions.append(f"workload {inp} in / {out} out tokens (pass --input-len/--output-len)")
    if "linear" in prof.strategies:
        try:
            result = calc.calculate(calc.CalcInputs(input_len=inp, output_len=out, bs_list=(cfg.max_num_seqs,),
                                                    bucket_size=cfg.block_size))
            calc_env, calc_notes = calc.release_env(result, profile)
            advice.notes += [f"calculator: {n}" for n in calc_notes]
            candidates.append(("calculator", f"hpu-vllm-bucket-calc for {inp}/{out} tokens at batch "
                               f"{cfg.max_num_seqs}", {**prof.strategy_env("linear"), **calc_env}, "linear"))
        except (calc.CalcInputError, ValueError) as exc:
            advice.notes.append(f"calculator: {exc}")
    other = next((s for s in prof.strategies if s != strategy), None)
    if other is not None:
        candidates.append((other, f"the {other} strategy with the same limits",
                           {**prof.strategy_env(other), **logged_env}, other))
    if strategy == "linear" and logged_env:
        coarse = dict(logged_env)
        for key in ("VLLM_PROMPT_SEQ_BUCKET_STEP", "VLLM_PROMPT_QUERY_BUCKET_STEP", "VLLM_DECODE_BLOCK_BUCKET_STEP",
                    "VLLM_DECODE_SEQ_BUCKET_STEP"):
            if key in coarse:
                coarse[key] = str(int(coarse[key]) * 2)
        candidates.append(("coarser steps", "linear with twice the sequence and block steps",
                           {**prof.strategy_env("linear"), **coarse}, "linear"))
    for name, desc, env, strat in candidates:
        # Through the one name resolver: advice never sets a variable its release does not read.
        env, dropped = names.keep_read(env, profile)
        if dropped:
            advice.notes.append(f"{name}: {profile} does not read {', '.join(dropped)}; left out")
        advice.alternatives.append(_alternative(name, desc, env, strat, profile, cfg, timeline, by_phase))
    mark_unusable(advice, by_phase, timeline.warmup_total_s)
    advice.rebuild_mismatch = rebuild_mismatch(advice, by_phase)
    advice.tune_command = tune_command(profile, log_path)
    if profile not in _SPACES:
        advice.notes.append(f"no shipped search space for {profile}: the command borrows {_BORROWED[profile]} "
                            f"with --release {profile} (tune drops what {profile} does not read); copy it and "
                            f"set `release: {profile}` to make it yours")
    return advice


def _alternative(name: str, desc: str, env: dict[str, str], strat: str | None, profile: str, cfg: ServerConfig,
                 timeline: Timeline, by_phase: dict[str, PhaseBuckets]) -> Alternative:
    """One alternative built for the server; one that leaves a limit uncovered has its MAX raised to cover it
    (said), except the logged settings, which stay what the server ran (their gaps are named)."""
    engine = get_profile(profile).engine
    try:
        plan = _build(profile, cfg, env, strat)
        gaps = coverage_gaps(plan, cfg, engine)
        raised: list[str] = []
        if gaps and name != "as logged" and plan.strategy == "linear":
            env, raised = close_gaps(env, gaps)
            plan = _build(profile, cfg, env, strat)
            gaps = coverage_gaps(plan, cfg, engine)
    except BucketConfigError as exc:
        return Alternative(name, desc, env, strat, None, None, None, error=str(exc))
    return Alternative(name, desc, env, plan.strategy, len(plan.prompt), len(plan.decode),
                       _predict(timeline, by_phase, len(plan.prompt), len(plan.decode)),
                       gaps=tuple(g.message for g in gaps), raised=tuple(raised))


def tune_command(profile: str, log_path: str | None) -> list[str]:
    """The study that verifies the advice on the real server (MODEL is the user's to fill in)."""
    space = _SPACES.get(profile) or _BORROWED[profile]
    cmd = ["bucket-tuner", "tune", "--space", space, "--backend", "vllm", "--model", "MODEL", "--n-trials", "30"]
    if profile not in _SPACES:
        cmd += ["--release", profile]
    if log_path:
        cmd += ["--calibrate-from", log_path]
    return cmd


def rebuild_mismatch(advice: Advice, by_phase: dict[str, PhaseBuckets]) -> str | None:
    """Where the engine's rebuild of the logged settings does not give the logged bucket counts."""
    logged = next((a for a in advice.alternatives if a.name == "as logged"), None)
    if logged is None:
        return None
    if logged.error is not None:
        return f"the logged settings could not be rebuilt for {advice.profile}: {logged.error}"
    got = {"prompt": logged.prompt_buckets, "decode": logged.decode_buckets}
    seen = {ph: p.count for ph, p in by_phase.items() if ph in got and p.count}
    differ = {ph: n for ph, n in seen.items() if got[ph] != n}
    if not differ:
        return None
    built = " and ".join(f"{got[ph]} {ph}" for ph in seen)
    shown = " and ".join(f"{n} {ph}" for ph, n in seen.items())
    return (f"the engine rebuilds the logged settings as {built} buckets, the log shows {shown}: the settings "
            "assumed are not exactly the server's, and figures derived from them are approximate")


def strategy_from_configs(by_phase: dict[str, PhaseBuckets]) -> str:
    for p in by_phase.values():
        if p.config:
            width = max(len(v) for v in p.config.values())
            if width == 4:
                return "exponential"
            if width == 5:
                return "padding_aware"
    return "linear"


def command_text(cmd: list[str]) -> str:
    return " ".join(shlex.quote(c) for c in cmd)
