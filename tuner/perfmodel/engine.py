"""A continuous-batching scheduler with vLLM's limits, stepping on whatever clock drives it.

`Engine.step(now)` picks the next batch the way the release's engine would, pads it to a bucket through
the bucket engine, and returns how long the step takes (cost model) and which requests got a token.
It never sleeps and never reads a clock: `serving.run_virtual` advances time by the returned durations,
the simulator's `clocks.LiveDriver` sleeps them off (time-scaled) behind the HTTP server. Both therefore see the same
steps, so a virtual run predicts a live one.

* v0 (vllm-fork): a step is either prefills (first-come first-served while max_num_seqs,
  max_num_batched_tokens and free KV blocks allow) or one decode of every running sequence; a decode
  that needs a block when none is free preempts the newest running sequence by recompute, with the
  scheduler's warning.
* v1 (vllm-gaudi): one token budget per step, running requests first; prompts longer than the budget
  are prefilled in chunks (with context blocks); the HPU runner splits the step's prefills into batches
  of at most max_num_prefill_seqs and runs the decodes as one batch.

The first execution of a shape that warmup did not compile pays the compile time and logs the release's
"was not warmed-up" warning; shapes without an HPU graph run at the no-graph speed. With `first_replay`
(the simulator's; the model's own virtual runs leave it at 0) the first execution of a warmed shape after
ready also takes `first_replay` times its step time once more: warm-up compiles under PT_COMPILE_ONLY_MODE,
so a shape's first hardware execution loads its recipe then (vllm-gaudi #1188, "first replay").
"""

from __future__ import annotations

import copy
import heapq
import math
import random
from collections import deque
from dataclasses import dataclass, field

from ..buckets import BucketPlan, get_profile
from ..buckets.runtime import supports_compile_log
from .capture import compile_seconds
from .costs import CostModel, decode_blocks, prompt_shape
from .prediction import StartupPrediction
from .rules import env_value

PREEMPT_MSG = ("Sequence group {rid}-0 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough "
               "KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or "
               "tensor_parallel_size to provide more KV cache memory.")


@dataclass(eq=False)  # identity, not field-by-field comparison: the scheduler tests membership a lot
class SimRequest:
    rid: str
    prompt_len: int
    max_tokens: int
    arrival: float
    generated: int = 0  # tokens produced so far (streamed to the client)
    computed: int = 0  # tokens whose KV is in the cache
    blocks: list = field(default_factory=list)
    preemptions: int = 0
    running: bool = False  # in the engine's running list
    error: str | None = None  # set when the engine gives up on the request
    # Tokens to prefill before the next token: the prompt, or after a recompute preemption the prompt
    # plus everything generated so far.
    prefill_len: int = -1
    images: tuple = ()  # (width, height) of each image of a VL request: encoded before its first prefill chunk
    encoded: bool = False
    block_hashes: tuple = ()  # its prompt's full blocks (prefixcache.block_hashes), for a prefix-caching engine
    cache_checked: bool = False  # its cached prefix was looked up (once per admission)

    def __post_init__(self):
        if self.prefill_len < 0:
            self.prefill_len = self.prompt_len

    @property
    def prefilling(self) -> bool:
        return self.computed < self.prefill_len

    @property
    def done(self) -> bool:
        return self.generated >= self.max_tokens


@dataclass(frozen=True)
class Shape:
    """One batch of a step: the bucket it ran in, and what was really in it (padding = the difference)."""

    phase: str
    bucket: tuple
    graphed: bool
    compiled: bool  # compiled at runtime in this step (not warmed up)
    bs: int  # real sequences
    tokens: int  # real tokens processed (prefill: the chunks; decode: one per sequence)
    # what was padded: (bs, query, ctx blocks) of a prompt batch, (bs, None, decode dim) of a decode batch;
    # perfmodel/fastserving.py pads the same batches into another configuration's buckets
    raw: tuple = ()


@dataclass
class StepResult:
    duration: float
    kind: str  # "prefill", "decode" or "mixed"
    emitted: list  # SimRequests that received one more token at the end of the step
    finished: list
    logs: list  # (level, key, message) the release prints when the step starts
    shapes: list  # Shape per batch run in the step
    prompt_tokens: int = 0


@dataclass
class EngineStats:
    steps: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    runtime_compiles: int = 0
    finished: int = 0
    busy_seconds: float = 0.0
    # the most sequences running and prompts prefilled in one step: fastserving.py tells from them whether
    # max_num_seqs and the prefill batch ever limited the schedule
    peak_running: int = 0
    peak_prefills: int = 0
    image_compiles: dict = field(default_factory=dict)  # image bucket -> encoder recompiles (first use only)
    images: int = 0  # images encoded
    # prompt tokens found in the prefix cache (v1's vllm:prompt_tokens_cached); prompt_tokens counts them too,
    # as vLLM v1's prompt_tokens_total counts whole prompts
    prompt_tokens_cached: int = 0


def max_prefill_seqs(pred: StartupPrediction) -> int:
    """Prompts one prefill batch may hold."""
    cfg = pred.config
    if pred.rules.engine != "v1":
        return cfg.max_num_prefill_seqs or cfg.max_num_seqs
    # vllm-gaudi runs prompts one at a time unless VLLM_PROMPT_BS_BUCKET_MAX says otherwise (A.6).
    value = env_value(pred.env, pred.profile, "VLLM_PROMPT_BS_BUCKET_MAX")
    return max(1, int(value)) if value and value.strip().isdigit() else 1


def runtime_graphs(pred: StartupPrediction) -> bool:
    """Shapes first met at runtime get a graph only where the release captures everything."""
    return pred.rules.capture == "all" and pred.lazy and not pred.sim.enforce_eager


class Engine:
    def __init__(self, pred: StartupPrediction, noise: float = 0.0, seed: int = 0, on_compile=None,
                 cached_recipes: frozenset = frozenset(), first_replay: float = 0.0):
        if pred.failure or pred.plan is None:
            raise ValueError("cannot serve a configuration whose startup fails")
        self.pred = pred
        self.profile = get_profile(pred.profile)
        # A private copy: the 3-D releases append the buckets they improvise at runtime to the plan.
        self.plan: BucketPlan = copy.deepcopy(pred.plan)
        cfg = pred.config
        self.v1 = pred.rules.engine == "v1"
        self.block_size, self.num_blocks = cfg.block_size, pred.num_blocks
        # a hybrid's pool: attention blocks of kv_block_tokens, and state_blocks more for each running request
        self.kv_block_tokens, self.state_blocks = pred.kv_block_tokens, pred.state_blocks
        self.max_num_seqs, self.token_budget = cfg.max_num_seqs, cfg.max_num_batched_tokens
        self.max_prefill_seqs = max_prefill_seqs(pred)
        self.cost: CostModel = pred.cost
        self.seen = {("prompt", b) for b in pred.warmed_prompt} | {("decode", b) for b in pred.warmed_decode}
        self.graphed = {("prompt", b) for b in pred.graphed_prompt} | {("decode", b) for b in pred.graphed_decode}
        self.seen |= {("multimodal", k) for k in pred.warmed_images}
        self.runtime_graphs = runtime_graphs(pred)
        self.cached = cached_recipes  # recipe keys on disk: a runtime compile of those is a cache hit
        self.on_compile = on_compile  # callback(phase, bucket, key): the server stores the recipe
        # vllm-fork's per-step compilation log (VLLM_HPU_LOG_STEP_GRAPH_COMPILATION, V0 worker only)
        flag = env_value(pred.env, pred.profile, "VLLM_HPU_LOG_STEP_GRAPH_COMPILATION", "0") or "0"
        self.log_compiles = flag.strip() != "0" and supports_compile_log(pred.profile)
        self._step_compile_s: list[float] = []
        self.free_blocks = list(range(self.num_blocks))  # a heap: lowest ids first, as a defragmented cache
        self.watermark = 0 if self.v1 else int(0.01 * self.num_blocks)
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.stats = EngineStats()
        self._pads: dict = {}
        self._rng = random.Random(seed)
        self.noise = noise
        self.first_replay = first_replay
        self.executed: set = set()  # shapes run since ready (a warmed one's first run pays first_replay)
        self._run_factor = math.exp(self._rng.gauss(0, noise)) if noise > 0 else 1.0
        # prefixcache.PrefixCache of a v1 server with prefix caching (the simulated server sets it; a request
        # without block hashes never hits it, so predictions from lengths alone are unchanged)
        self.prefix_cache = None

    # -- requests ---------------------------------------------------------------------------------
    def add_request(self, req: SimRequest) -> None:
        self.waiting.append(req)

    def abort(self, rid: str) -> None:
        for r in list(self.running):
            if r.rid == rid:
                self._stop_running(r)
        self.waiting = deque(r for r in self.waiting if r.rid != rid)

    def _start_running(self, r: SimRequest) -> None:
        r.running = True
        self.running.append(r)

    def _stop_running(self, r: SimRequest) -> None:
        r.running = False
        self.running.remove(r)
        self._free(r)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    @property
    def kv_usage(self) -> float:
        return 1 - len(self.free_blocks) / self.num_blocks if self.num_blocks else 0.0

    # -- blocks ---------------------------------------------------------------------------------
    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.kv_block_tokens) + self.state_blocks

    def _room(self, r: SimRequest) -> int:
        """Tokens this request could still hold: its blocks and every free one."""
        return (len(r.blocks) + len(self.free_blocks) - self.state_blocks) * self.kv_block_tokens - r.computed

    def _grow(self, req: SimRequest, tokens: int) -> bool:
        need = self._blocks_for(tokens) - len(req.blocks)
        if need <= 0:
            return True
        if len(self.free_blocks) < need:
            return False
        req.blocks.extend(heapq.heappop(self.free_blocks) for _ in range(need))
        return True

    def _free(self, req: SimRequest) -> None:
        for b in req.blocks:
            heapq.heappush(self.free_blocks, b)
        req.blocks = []

    def _preempt(self, victim: SimRequest, logs: list) -> None:
        self._stop_running(victim)
        victim.computed = 0
        victim.cache_checked = False
        victim.prefill_len = victim.prompt_len + victim.generated
        victim.preemptions += 1
        self.waiting.appendleft(victim)
        self.stats.preemptions += 1
        # v0 warns on the first preemption and every 50th after; the v1 engine only counts them.
        if not self.v1 and (self.stats.preemptions - 1) % 50 == 0:
            logs.append(("WARNING", "preempt", PREEMPT_MSG.format(rid=victim.rid)))

    def _prefilled(self, r: SimRequest, emitted: list) -> None:
        """A prompt computed to its end: its first token is out, and its full blocks are cached."""
        r.generated += 1
        emitted.append(r)
        if self.prefix_cache is not None and r.block_hashes:
            self.prefix_cache.insert(r.block_hashes)

    # -- one step -------------------------------------------------------------------------------
    def step(self, now: float) -> StepResult:
        logs: list = []
        if self.v1:
            prefills, decodes = self._schedule_v1(logs)
        else:
            prefills = self._schedule_v0_prefill()
            decodes = [] if prefills else self._schedule_v0_decode(logs)
        if not prefills and not decodes:
            return self._unschedulable(logs)
        self.stats.peak_running = max(self.stats.peak_running, len(self.running))
        self.stats.peak_prefills = max(self.stats.peak_prefills, len(prefills))
        duration, shapes, emitted, prompt_tokens = 0.0, [], [], 0
        inputs = self._input_stats(prefills, decodes) if self.log_compiles else ""
        for r, _ in prefills:
            if r.images and not r.encoded:
                duration += self._encode(r, shapes, logs)
        for i in range(0, len(prefills), self.max_prefill_seqs):
            chunk = prefills[i:i + self.max_prefill_seqs]
            query = max(n for _, n in chunk)
            ctx = max(r.computed // self.block_size for r, _ in chunk) if self.v1 else 0
            duration += self._run("prompt", len(chunk), query, ctx, shapes, logs, sum(n for _, n in chunk))
            for r, n in chunk:
                r.computed += n
                prompt_tokens += n
                if not r.prefilling:
                    self._prefilled(r, emitted)
        if decodes:
            duration += self._run("decode", len(decodes), None, self._decode_dim(decodes), shapes, logs, len(decodes))
            for r in decodes:
                r.computed += 1
                r.generated += 1
                emitted.append(r)
        finished = [r for r in emitted if r.done]
        if finished:
            for r in finished:
                r.running = False
                self._free(r)
            self.running = [r for r in self.running if r.running]
        if self.noise > 0:
            duration *= self._run_factor * math.exp(self._rng.gauss(0, self.noise / 2))
        st = self.stats
        st.steps += 1
        st.prompt_tokens += prompt_tokens
        st.generation_tokens += len(emitted)
        st.finished += len(finished)
        st.busy_seconds += duration
        kind = "mixed" if prefills and decodes else ("prefill" if prefills else "decode")
        if self._step_compile_s:
            if self.log_compiles:
                logs.append(("WARNING", "step_compile", self._compile_line(inputs)))
            self._step_compile_s = []
        return StepResult(duration, kind, emitted, finished, logs, shapes, prompt_tokens)

    def _unschedulable(self, logs: list) -> StepResult:
        # Nothing fits. With sequences running, make room by preempting the newest; with none, the head
        # request can never be served (v0 ignores it with this warning): it finishes with an error, so
        # no driver loops forever.
        if self.running:
            self._preempt(self.running[-1], logs)
            return StepResult(0.0, "idle", [], [], logs, [])
        r = self.waiting.popleft()
        self._free(r)
        r.error = (f"Input prompt ({r.prefill_len} tokens) is too long and exceeds the capacity of "
                   "block_manager")
        logs.append(("WARNING", "preempt", r.error))
        return StepResult(0.0, "idle", [], [r], logs, [])

    def _schedule_v0_prefill(self) -> list:
        batch, tokens = [], 0
        while self.waiting and len(self.running) < self.max_num_seqs and len(batch) < self.max_prefill_seqs:
            r = self.waiting[0]
            n = r.prefill_len
            if tokens + n > self.token_budget:
                break
            if len(self.free_blocks) - self._blocks_for(n) < self.watermark or not self._grow(r, n):
                break
            self.waiting.popleft()
            self._start_running(r)
            batch.append((r, n))
            tokens += n
        return batch

    def _schedule_v0_decode(self, logs: list) -> list:
        for r in list(self.running):
            if not r.running:
                continue  # preempted below to make room for an older sequence
            while not self._grow(r, r.computed + 1):
                self._preempt(self.running[-1], logs)  # the newest sequence goes first
                if not r.running:
                    break
        return list(self.running)

    def _schedule_v1(self, logs: list) -> tuple[list, list]:
        budget, decodes, prefills = self.token_budget, [], []
        for r in list(self.running):
            if not r.running or budget <= 0:
                continue
            if r.prefilling:  # a chunked prefill carries on
                n = min(r.prefill_len - r.computed, budget, self._room(r))
                if n <= 0 or not self._grow(r, r.computed + n):
                    continue
                prefills.append((r, n))
                budget -= n
                continue
            while not self._grow(r, r.computed + 1):
                self._preempt(self.running[-1], logs)
                if not r.running:
                    break
            if r.running:
                decodes.append(r)
                budget -= 1
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            r = self.waiting[0]
            if self.prefix_cache is not None and not r.cache_checked and r.block_hashes:
                r.cache_checked = True  # its cached prefix is computed already: only the rest is prefilled
                r.computed = self.prefix_cache.hit_tokens(r.block_hashes, r.prefill_len)
                self.stats.prompt_tokens += r.computed
                self.stats.prompt_tokens_cached += r.computed
            n = min(r.prefill_len - r.computed, budget, self._room(r))  # a chunk may also stop at the free blocks
            if n <= 0 or not self._grow(r, r.computed + n):
                break
            self.waiting.popleft()
            self._start_running(r)
            prefills.append((r, n))
            budget -= n
        decodes = [r for r in decodes if r.running]
        return prefills, decodes

    def _decode_dim(self, batch: list) -> int:
        if self.pred.profile == "fork-1.17":
            return max(r.computed + 1 for r in batch)  # the longest sequence, in tokens
        if self.plan.contiguous_pa:
            return max(max(r.blocks) for r in batch) + 1  # highest block id in use
        return sum(len(r.blocks) for r in batch)  # block references of the batch

    def _pad(self, phase: str, bs: int, dim_a, dim_b, logs: list):
        key = (phase, bs, dim_a, dim_b)
        res = self._pads.get(key)
        if res is None:
            if phase == "prompt":
                res = self.profile.pad_prompt(self.plan, bs, dim_a, dim_b)
            else:
                res = self.profile.pad_decode(self.plan, bs, dim_b)
            self._pads[key] = res
            if res.warning:
                logs.append(("WARNING", "bucket_fallback", res.warning))
        return res.bucket

    def _run(self, phase: str, bs: int, query, dim, shapes: list, logs: list, tokens: int) -> float:
        bucket = tuple(self._pad(phase, bs, query, dim, logs))
        t, compiled = 0.0, False
        if (phase, bucket) not in self.seen:
            logs.append(("WARNING", "not_warmed", self._not_warmed(phase, bucket)))
            key = self.pred.recipe_id(phase, bucket)
            secs = compile_seconds(self.pred, self.cost, phase, bucket, key in self.cached)
            self._step_compile_s.append(secs)
            t += secs
            self.seen.add((phase, bucket))
            self.stats.runtime_compiles += 1
            compiled = True
            if self.runtime_graphs:
                self.graphed.add((phase, bucket))
                t += self.cost.capture_time()
            if self.on_compile:
                self.on_compile(phase, bucket, key)
        graphed = (phase, bucket) in self.graphed
        if phase == "prompt":
            run = self.cost.prefill_time(*prompt_shape(bucket), graphed)
        else:
            run = self.cost.decode_time(bucket[0], decode_blocks(self.pred.profile, bucket, self.block_size), graphed)
        if (phase, bucket) not in self.executed:
            self.executed.add((phase, bucket))
            if not compiled:  # compiled just now: the compile above already ran it
                t += self.first_replay * run
        t += run
        shapes.append(Shape(phase, bucket, graphed, compiled, bs, tokens, (bs, query, dim)))
        return t

    def _encode(self, r: SimRequest, shapes: list, logs: list) -> float:
        """The vision encoder over a request's images, in their image buckets (perfmodel/vision.py): a
        bucket the warm-up did not compile compiles first, on the critical path."""
        from .vision import encoder_compile_seconds, encoder_seconds, image_key, key_patches

        r.encoded = True
        phase = self.pred.vision
        if phase is None:
            return 0.0
        if phase.plan.is_batch_based:
            keys = [image_key(phase, 0, 0, len(r.images))]
        else:
            keys = [image_key(phase, w, h) for w, h in r.images]
        t = 0.0
        for key in keys:
            patches = key_patches(phase, key)
            compiled = ("multimodal", key) not in self.seen
            if compiled:
                images = key[1] if key[0] == "batch" else 1
                logs.append(("WARNING", "not_warmed", f"Configuration: ('multimodal', {images}, {patches}) "
                                                      "was not warmed-up!"))
                t += encoder_compile_seconds(phase.tower, patches) * self.cost.corr.multimodal_warmup
                self.seen.add(("multimodal", key))
                self.stats.runtime_compiles += 1
                self.stats.image_compiles[key] = self.stats.image_compiles.get(key, 0) + 1
            t += encoder_seconds(self.cost, phase.tower, patches)
            shapes.append(Shape("multimodal", key, True, compiled, len(r.images), patches))
        self.stats.images += len(r.images)
        return t

    def _input_stats(self, prefills: list, decodes: list) -> str:
        """The fork's step description, taken before the step runs."""
        reqs = [r for r, _ in prefills] + list(decodes)
        ctx = max(r.prompt_len + r.generated for r in reqs)
        return (f"is_prompt: {bool(prefills)}, num_seqs: {len(reqs)}, max_context_len: {ctx}, "
                f"max_num_blocks {(ctx - 1) // self.block_size + 1}")

    def _compile_line(self, inputs: str) -> str:
        """The fork's hpu_worker line: the bridge's graph_compilation stats (count, total, average;
        the time unit is a GUESS: microseconds), then the step's input stats."""
        n, total = len(self._step_compile_s), int(sum(self._step_compile_s) * 1e6)
        return (f"VLLM_HPU_STEP_GRAPH_COMPILATION: [('TotalNumber', {n}), ('TotalTime', {total}), "
                f"('AvgTime', {total / n:.1f})], {inputs}")

    def _not_warmed(self, phase: str, bucket: tuple) -> str:
        if self.plan.dims == 2:
            return f"Configuration: ({phase}, {bucket[0]}, {bucket[1]}) was not warmed-up!"
        return f"Configuration: {(phase, *bucket)!r} was not warmed-up!"
