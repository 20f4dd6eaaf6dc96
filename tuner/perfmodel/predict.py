"""predict_startup(): everything a start of one configuration does before it serves, or where it fails.

The tuner calls it before booting anything (KV blocks, buckets, which of them get HPU graphs, how long
warmup takes, whether the configuration can start at all); the simulated server runs the same
prediction, with the truth's corrections, so that it then does what was predicted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from ..buckets import BucketConfigError, BucketPlan, ServerConfig
from ..buckets.owncode import build_checked
from ..models.recurrent import IndivisibleState
from ..vocabulary.numbers import AUTO
from .capture import plan_warmup
from .corrections import Corrections
from .costs import (
    T_INIT,
    T_PROFILE,
    CostModel,
    MemorySplit,
    ServerInputs,
    SimSettings,
    draft_tokens,
    draft_weights,
    hybrid_cache,
    memory_split,
    server_config,
)
from .hardware import GiB
from .prediction import Failure, StartupPrediction, WarmupStep, devmem_error
from .rules import ReleaseRules, env_true, env_value, rules_for
from .shapes import prompt_tokens


def predict_startup(profile_name: str, sim: SimSettings, inputs: ServerInputs, env: Mapping[str, str],
                    cached_recipes: frozenset = frozenset(), corrections: Corrections = Corrections(),
                    build: Callable[[ServerConfig], BucketPlan] | None = None, step: Callable = WarmupStep,
                    keep_steps: bool = True) -> StartupPrediction:
    """Everything a start of this configuration does before it serves, or where it fails; with
    `corrections`, as calibrated (or, for the simulator's truth, as the hardware really is).

    For bulk prediction (perfmodel/bulk.py): `build` replaces the release's bucket build (a memo of it;
    the plan must be the release's and is not modified here), `step` the warmup step type (a lighter
    prediction.StepRow with the same fields), `keep_steps` False: only their sums where that is faster
    (capture.plan_warmup)."""
    rules = rules_for(profile_name)
    profile = rules.profile
    env = dict(env)
    lazy = env_value(env, profile, "PT_HPU_LAZY_MODE", "1").strip() != "0"
    pred = StartupPrediction(profile, rules, sim, env, lazy=lazy, corrections=corrections,
                             skip_warmup=env_true(env_value(env, profile, "VLLM_SKIP_WARMUP", "false")))
    pred.graphs = lazy and not sim.enforce_eager and not pred.skip_warmup
    model = sim.shape
    hybrid = _refused(inputs, model) or _hybrid_pool(profile, sim, inputs, env)
    if isinstance(hybrid, Failure):
        pred.failure = hybrid
        return pred
    pred.hybrid = hybrid
    if pred.hybrid is not None and inputs.block_size != pred.hybrid.bucket_block_size:
        inputs = replace(inputs, block_size=pred.hybrid.bucket_block_size)  # the block the runner buckets by
    pred.draft_weights = draft_weights(inputs, sim)
    cost = CostModel(sim, inputs.block_size, pred.compiled_mode, corrections, pred.hybrid, pred.draft_weights)
    pred.load_seconds = T_INIT + cost.load_time()
    pred.profile_seconds = T_PROFILE * model.layers / 32 * corrections.profile
    cfg0 = server_config(rules, model, inputs, env, num_blocks=1)
    pred.config = cfg0
    failure = _check_length(rules, inputs) or _check_flags(rules, cfg0, sim, env)
    if failure:
        pred.failure = failure
        return pred
    try:
        reserved = float(env_value(env, profile, "VLLM_GRAPH_RESERVED_MEM", "0.1"))
    except ValueError as e:  # the worker's float() raises at startup, as here
        pred.failure = Failure("config", f"ValueError: {e}")
        return pred
    # The profiling run uses the largest prompt bucket (at most max_num_batched_tokens). Size memory for
    # the budget first, then again for the largest bucket actually built: prompt buckets do not depend on
    # the KV block count, so two builds settle it.
    tokens = cfg0.max_num_batched_tokens
    derived = cfg0.max_model_len
    for _ in range(2):
        mem = memory_split(cost, tokens, reserved)
        if inputs.num_gpu_blocks_override:  # the engine sets the blocks it was told (it logs the profiled count)
            pred.blocks_override = (mem.num_blocks, inputs.num_gpu_blocks_override)
            mem = replace(mem, num_blocks=inputs.num_gpu_blocks_override)
        pred.memory = mem
        if mem.weights > mem.device_visible:
            pred.failure = Failure("load", devmem_error(model.largest_tensor_bytes(sim.dtype, sim.tp)))
            return pred
        if mem.free <= 0:
            pred.failure = Failure("profile", devmem_error(int(mem.profile_overhead)))
            return pred
        serving = inputs
        if inputs.max_model_len == AUTO:
            fitted = _auto_fit(pred, derived, cfg0, mem)
            if isinstance(fitted, Failure):
                pred.failure = fitted
                return pred
            cfg0 = replace(cfg0, max_model_len=fitted)  # the token budget stays the one set from the model's length
            serving = replace(inputs, max_model_len=fitted, max_num_batched_tokens=cfg0.max_num_batched_tokens)
        kv_failure = _check_kv(rules, cfg0, mem, cost)
        if kv_failure:
            pred.failure = kv_failure
            return pred
        pred.config = server_config(rules, model, serving, env, mem.num_blocks)
        try:
            # a plan's memoised build, else the release's own lists where they are checked (owncode)
            pred.plan = build(pred.config) if build is not None else build_checked(profile, pred.config)
        except BucketConfigError as e:
            pred.failure = Failure("buckets", f"{_bucket_error_class(e)}: {e}")
            return pred
        prompt = pred.plan.prompt
        largest = int(prompt_tokens(prompt, inputs.block_size).max()) if prompt else tokens
        if min(largest, cfg0.max_num_batched_tokens) == tokens:
            break
        tokens = min(largest, cfg0.max_num_batched_tokens)
    failure = (_compact_states(pred) if pred.hybrid is not None else None) or \
        (_vision(pred, model, inputs) if model.multimodal else None)
    if failure:
        pred.failure = failure
        return pred
    plan_warmup(pred, cost, cached_recipes, step, keep_steps)
    return pred


def _vision(pred: StartupPrediction, model, inputs: ServerInputs) -> Failure | None:
    """The multimodal warm-up phase of this start (pred.vision), or why the release stops building it."""
    from .vision import BucketConfigError, parse_limit_mm, vision_phase

    queries = [b[1] for b in pred.plan.prompt]
    try:
        pred.vision = vision_phase(model, pred.profile, pred.env, parse_limit_mm(inputs.limit_mm_per_prompt),
                                   prefix_caching=inputs.prefix_caching,
                                   max_prompt_shape=max(queries) if queries else pred.config.max_model_len,
                                   enforce_eager=pred.sim.enforce_eager)
    except BucketConfigError as e:
        return Failure("buckets", f"ValueError: {e}")
    except ValueError as e:
        return Failure("config", f"ValueError: {e}")
    return None


def _bucket_error_class(e: BucketConfigError) -> str:
    return "AssertionError" if "cannot be greater" in str(e) else "ValueError"


def _check_flags(rules: ReleaseRules, cfg: ServerConfig, sim: SimSettings, env: dict | None = None) -> Failure | None:
    t, mml, s = cfg.max_num_batched_tokens, cfg.max_model_len, cfg.max_num_seqs
    shape = sim.shape
    limit = shape.max_len_limit or shape.max_position
    if mml > limit and not env_true((env or {}).get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "")):
        # vLLM's _get_and_verify_max_len (its wording, its float: the length times a RoPE factor)
        return Failure("config", f"ValueError: User-specified max_model_len ({mml}) is greater than the derived "
                       f"max_model_len ({shape.max_len_key}={float(limit)} or model_max_length=None in model's "
                       "config.json). To allow overriding this maximum, set the env var "
                       "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme "
                       "caution. If the model uses relative position encoding (RoPE), positions exceeding "
                       "derived_max_model_len lead to nan. If the model uses absolute position encoding, positions "
                       "exceeding derived_max_model_len will cause a CUDA array out-of-bounds error.")
    if rules.engine == "v0" and t < mml:
        # vLLM v0 without chunked prefill refuses this at config time.
        return Failure("config", f"ValueError: max_num_batched_tokens ({t}) is smaller than max_model_len ({mml}). "
                       "This effectively limits the maximum sequence length to max_num_batched_tokens and makes "
                       "vLLM reject longer sequences. Please increase max_num_batched_tokens or decrease "
                       "max_model_len.")
    if t < s:
        return Failure("config", f"ValueError: max_num_batched_tokens ({t}) must be greater than or equal to "
                       f"max_num_seqs ({s}).")
    if not 0 < sim.gpu_memory_utilization <= 1:
        return Failure("config", "ValueError: GPU memory utilization must be less than 1.0. Got "
                       f"{sim.gpu_memory_utilization}.")
    heads = shape.heads
    if sim.tp < 1 or heads % sim.tp:
        return Failure("config", f"ValueError: Total number of attention heads ({heads}) must be divisible by "
                       f"tensor parallel size ({sim.tp}).")
    return None


def _check_length(rules: ReleaseRules, inputs: ServerInputs) -> Failure | None:
    asked = inputs.max_model_len
    if asked is None or asked > 0 or (asked == AUTO and rules.engine == "v1"):
        return None
    return Failure("config", f"ValueError: max_model_len ({asked}) must be a positive number of tokens"
                   + (" (-1, auto-fit to the KV cache, came with vllm-gaudi's v1 engine)" if rules.engine == "v0"
                      else " or -1 (auto-fit to the KV cache)"))


def _refused(inputs: ServerInputs, model) -> Failure | None:
    """Options vLLM refuses as it parses its arguments (a --speculative-config): the start fails at once."""
    try:
        if inputs.refused:
            raise ValueError(inputs.refused)
        draft_tokens(inputs, model)
    except ValueError as e:
        return Failure("config", f"ValueError: {e}")
    return None


def _hybrid_pool(profile: str, sim: SimSettings, inputs: ServerInputs, env: Mapping[str, str]):
    """A hybrid model's pool (hybridcache.HybridLayout), None for other models, or the Failure of a state the
    ranks cannot split (vLLM's divide() asserts as the model builds, in its own words)."""
    # Gated DeltaNet states in a tensor of their own: the runner sets VLLM_COMPACT_GDN=1 for such a model when the
    # user left it unset or empty (hpu_model_runner.__init__), before the worker reads it ("1" or "true" only)
    told = (env.get("VLLM_COMPACT_GDN") or "").strip()
    try:
        return hybrid_cache(profile, sim, inputs, told.lower() in ("1", "true") if told else True)
    except IndivisibleState as e:
        return Failure("load", f"AssertionError: {e.n} is not divisible by {e.tp}")
    except ValueError as e:  # a state dtype the layer refuses (KDA: float32 or bfloat16 only)
        return Failure("config", f"ValueError: {e}")


def _compact_states(pred: StartupPrediction) -> Failure | None:
    """Compact Gated DeltaNet states are allocated with the KV cache but outside its budget: a slot per request
    and state group in each layer slot (Qwen3.5-27B: 154 MiB a sequence). They take the memory the budget left
    (the HPU-graph reserve and the margin), and past it the first tensor's allocation fails."""
    h, mem = pred.hybrid, pred.memory
    need = h.compact_bytes(pred.config.max_num_seqs)
    if need > mem.free_after_kv:
        return Failure("states", devmem_error(h.compact_tensor_bytes(pred.config.max_num_seqs)))
    return None


def _auto_fit(pred: StartupPrediction, derived: int, cfg: ServerConfig, mem) -> int | Failure:
    """--max-model-len auto (-1): the longest context one request can hold in the KV cache, at most the model's
    own (vLLM 0.32's _auto_fit_max_model_len: one request at length L needs ceil(L / block) blocks, of the
    cache less the null block its block pool holds back)."""
    usable = mem.kv - mem.block_bytes
    fitted = min(derived, int(usable // mem.block_bytes) * cfg.block_size) if mem.block_bytes > 0 else derived
    if pred.hybrid is not None:  # the attention group's blocks, after each state group's for the one request
        h = pred.hybrid
        room = mem.num_blocks - 1 - h.state_blocks_per_request(bool(cfg.prefix_caching))
        fitted = min(derived, max(0, room // h.attention_groups) * h.attn_block_tokens)
    if fitted <= 0:
        return Failure("kv", "ValueError: Cannot auto-fit max_model_len: not enough GPU memory available to serve "
                       "even a single token. Try increasing `gpu_memory_utilization`.")
    pred.auto_fit = (derived, fitted, max(usable, 0.0))
    return fitted


def _check_kv(rules: ReleaseRules, cfg: ServerConfig, mem: MemorySplit, cost: CostModel) -> Failure | None:
    mml = cfg.max_model_len
    if rules.engine == "v0":
        if mem.num_blocks <= 0:
            return Failure("kv", "ValueError: No available memory for the cache blocks. Try increasing "
                           "`gpu_memory_utilization` when initializing the engine.")
        capacity = mem.num_blocks * cfg.block_size
        if mml > capacity:
            return Failure("kv", f"ValueError: The model's max seq len ({mml}) is larger than the maximum number "
                           f"of tokens that can be stored in KV cache ({capacity}). Try increasing "
                           "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
        return None
    needed = -(-mml // cfg.block_size) * mem.block_bytes
    kv = mem.kv
    if cost.hybrid is not None:  # one request at max_model_len: its attention blocks and its state blocks
        needed = cost.hybrid.blocks_per_request(mml, bool(cfg.prefix_caching)) * mem.block_bytes
        kv = mem.kv * cost.hybrid.hpu_factor
    if needed > kv:
        est = max(0, int(mem.kv // cost.kv_token) // cfg.block_size * cfg.block_size)
        return Failure("kv", f"ValueError: To serve at least one request with the models's max seq len ({mml}), "
                       f"({needed / GiB:.2f} GiB KV cache is needed, which is larger than the available KV cache "
                       f"memory ({max(mem.kv, 0) / GiB:.2f} GiB). Based on the available memory, the estimated "
                       f"maximum model length is {est}. Try increasing `gpu_memory_utilization` or decreasing "
                       "`max_model_len` when initializing the engine.")
    return None


def with_vision_steps(pred: StartupPrediction, logged: list) -> StartupPrediction:
    """The same start warming up the image shapes a log shows (buckets.vision.VisionStep each, in the
    log's order): where the log's settings (--limit-mm-per-prompt, the variables) are not known, its
    multimodal steps are still priced one by one from the tower. Unchanged for a text model."""
    from dataclasses import replace

    from .vision import vision_phase

    model = pred.sim.shape
    if pred.plan is None or pred.memory is None or not logged or not model.multimodal:
        return pred
    phase = pred.vision or vision_phase(model, pred.profile, pred.env, {"image": {"count": 1}},
                                        prefix_caching=pred.config.prefix_caching, max_prompt_shape=0,
                                        enforce_eager=pred.sim.enforce_eager)
    if phase is None:
        return pred
    phase = replace(phase, plan=replace(phase.plan, steps=list(logged)))
    new = replace(pred, vision=phase, steps=[], graphed_prompt=[], graphed_decode=[], prompt_graph_mem=0.0,
                  decode_graph_mem=0.0, budget=None, sampler_seconds=0.0, failure=None)
    plan_warmup(new, new.cost, frozenset())
    return new


def with_bucket_lists(pred: StartupPrediction, prompt: list, decode: list) -> StartupPrediction:
    """The same start warming up other bucket lists (a log's, where rebuilding its settings gives other
    lists): memory as predicted, warm-up steps, captures and their times planned again."""
    from dataclasses import replace

    if pred.plan is None or pred.memory is None:
        return pred
    new = replace(pred, plan=replace(pred.plan, prompt=list(prompt), decode=list(decode)), steps=[],
                  graphed_prompt=[], graphed_decode=[], prompt_graph_mem=0.0, decode_graph_mem=0.0, budget=None,
                  sampler_seconds=0.0, failure=None)
    plan_warmup(new, new.cost, frozenset())
    return new
