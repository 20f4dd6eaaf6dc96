"""The startup log of the chosen release, paced by simulated time (docs/bucketing.md section D.1).

`startup_events` turns a StartupPrediction into what the real server prints, in order, with the
simulated seconds between lines: weights load, profiling run, the "Free device memory" split,
"# HPU blocks", the bucket lines, one [Warmup] line per bucket, graph capture, "Warmup finished".
Failures end the sequence in the phase where the real server fails, with its error text. The events
are consumed either virtually (tests, calibration: `run_startup_virtual`) or live by the server,
which sleeps the advances off time-scaled.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..perfmodel.costs import prompt_shape
from ..perfmodel.hardware import GiB, MiB
from ..perfmodel.prediction import StartupPrediction, WarmupStep, devmem_error
from .faults import COMPILE_ERROR, Faults
from .hybridlines import alignment_lines, memory_line, runner_line
from .logfmt import SimLog, tqdm_meter
from .logfmt import format_bytes as fb
from .recipe_cache import RecipeCache

VERSIONS = {
    "fork-1.17": "0.5.3.post1+gaudi117", "fork-1.18": "0.5.3.post1+gaudi118", "fork-1.19": "0.6.4.post2+gaudi119",
    "fork-1.20": "0.6.6.post1+gaudi120", "fork-1.21.0": "0.7.2+gaudi121", "fork-1.21.2": "0.7.2+gaudi1212",
    "fork-1.22": "0.9.0.1+gaudi122", "fork-main": "0.11.0+gaudi", "fork-1.23": "0.9.0.1+gaudi123",
    "gaudi-0.10.1": "0.10.1", "gaudi-0.15.1": "0.15.1", "gaudi-0.26.0": "0.26.0", "gaudi-main": "0.27.0.dev0",
}
HOST_TOTAL, HOST_USED = 1007 * GiB, 472.25 * GiB  # host memory before loading (1.17 log: 475.2 GiB after)

_FRAMES = {  # the innermost frames of the traceback each failing phase prints
    "config": ("vllm/config.py", "_verify_args"),
    "buckets": ("vllm_hpu_extension/bucketing.py", "generate_buckets"),
    "load": ("vllm/worker/hpu_model_runner.py", "load_model"),
    "profile": ("vllm/worker/hpu_worker.py", "determine_num_available_blocks"),
    "kv": ("vllm/engine/llm_engine.py", "_initialize_kv_caches"),
    "states": ("vllm_gaudi/v1/worker/hpu_model_runner.py", "initialize_kv_cache"),  # a hybrid's compact states
    "warmup": ("vllm/worker/hpu_model_runner.py", "warmup_model"),
}


@dataclass
class SimTime:
    """Simulated seconds since the process started; SimLog stamps lines with it."""

    t: float = 0.0

    def __call__(self) -> float:
        return self.t


# Events: ("advance", seconds) | ("log", level, key, msg) | ("raw", msg, stderr) | ("bar", redraw, final)
#         | ("compiled", phase, bucket) | ("fail", exit_code) | ("hang",) | ("ready",)

# How the plugin shows its warm-up (vllm-gaudi hpu_model_runner.py warmup_graphs): "lines", a `[Warmup]` line
# per bucket (tqdm.write, printed with VLLM_DEVELOPER_MODE=1), or "tqdm", only the progress bars (its default).
LOG_STYLES = ("lines", "tqdm")
_BAR_DESC = {"prompt": "Prompt warmup processing: ", "decode": "Decode warmup processing: ",
             "unified": "Unified Attention warmup"}


def startup_events(pred: StartupPrediction, faults: Faults | None = None, log_style: str = "lines") -> Iterator[tuple]:
    if log_style not in LOG_STYLES:
        raise ValueError(f"log style {log_style!r}: not one of {', '.join(LOG_STYLES)}")
    faults = faults or Faults()
    rules, mem = pred.rules, pred.memory
    v1 = rules.engine == "v1"
    yield ("log", "INFO", "api", f"vLLM API server version {VERSIONS[pred.profile]}")
    yield ("advance", 1.0)
    if pred.failure and pred.failure.phase == "config":
        yield from _fail(pred.failure.phase, pred.failure.message)
        return
    yield from _hybrid_lines(pred)  # the platform's, once the configuration is accepted
    if rules.buckets_at_init:
        if pred.failure and pred.failure.phase == "buckets":
            yield from _fail("buckets", pred.failure.message)
            return
        yield from _bucket_lines(pred, pred.plan.log_lines)  # set up in the runner's constructor
    load = pred.load_seconds * faults.load_factor()
    if pred.failure and pred.failure.phase == "load":
        yield ("advance", load * 0.8)
        yield from _fail("load", pred.failure.message)
        return
    yield ("advance", load)
    w, total = mem.weights - pred.draft_weights, mem.device_visible  # the model's; an MTP draft's come after
    host = f"{fb(2.95 * GiB)} of host memory ({fb(HOST_USED + 2.95 * GiB)}/{fb(HOST_TOTAL)} used)"
    yield ("log", "INFO", "load", f"Pre-loading model weights on hpu:0 took {fb(w)} of device memory "
           f"({fb(w)}/{fb(total)} used) and {host}")
    yield ("log", "INFO", "wrap", f"Wrapping in HPU Graph took 0 B of device memory ({fb(w)}/{fb(total)} used) "
           f"and -252 KiB of host memory ({fb(HOST_USED + 2.95 * GiB)}/{fb(HOST_TOTAL)} used)")
    yield ("log", "INFO", "loaded", f"Loading model weights took in total {fb(w)} of device memory "
           f"({fb(w)}/{fb(total)} used) and {host}")
    if pred.draft_weights:  # the runner's drafter, loaded after the model (hpu_model_runner.load_model)
        yield ("log", "INFO", "loaded", f"Loading drafter model weights took {pred.draft_weights / 2**30:.4f} GB")
    yield ("advance", pred.profile_seconds)
    if pred.failure and pred.failure.phase == "profile":
        yield from _fail("profile", pred.failure.message)
        return
    used = mem.weights + mem.profile_overhead
    yield ("log", "INFO", "profile", f"Model profiling run took {fb(mem.profile_overhead)} of device memory "
           f"({fb(used)}/{fb(total)} used) and 180.9 MiB of host memory "
           f"({fb(HOST_USED + 3.13 * GiB)}/{fb(HOST_TOTAL)} used)")
    yield from _free_lines(pred)
    overriding = ("Overriding num_gpu_blocks={} with num_gpu_blocks_override={}".format(*pred.blocks_override)
                  if pred.blocks_override else None)  # the engine's line (the fork's llm_engine, v1's kv_cache_utils)
    if v1:
        yield from _kv_lines_v1(pred, overriding)
    else:
        profiled = pred.blocks_override[0] if pred.blocks_override else mem.num_blocks
        yield ("log", "INFO", "blocks", f"# HPU blocks: {profiled}, # CPU blocks: 0")
        if overriding:
            yield ("log", "INFO", "blocks", overriding, "llm_engine.py")
    if pred.failure and pred.failure.phase in ("kv", "states"):
        yield from _fail(pred.failure.phase, pred.failure.message)
        return
    yield ("advance", 0.5)
    if not v1:
        yield ("log", "INFO", "cache", f"Initializing cache engine took {fb(mem.kv_allocated)} of device memory "
               f"({fb(used + mem.kv_allocated)}/{fb(total)} used) and -1.238 MiB of host memory "
               f"({fb(HOST_USED + 3.13 * GiB)}/{fb(HOST_TOTAL)} used)")
    if pred.failure and pred.failure.phase == "buckets":
        yield from _fail("buckets", pred.failure.message)
        return
    # Lists built when warmup starts are never logged when warmup is skipped (fork 1.18 builds them there).
    yield from _bucket_lines(pred, ([] if rules.buckets_at_init else pred.plan.log_lines)
                             + ([] if pred.skip_warmup else pred.plan.warmup_log_lines))
    if pred.skip_warmup:
        yield ("log", "INFO", "skip", "Skipping warmup...")
        yield from _server_ready(pred)
        return
    yield from _warmup(pred, faults, bars=log_style == "tqdm" and rules.style == "gaudi")


def _hybrid_lines(pred: StartupPrediction) -> Iterator[tuple]:
    """A hybrid's start: the platform aligns its attention and state pages, the runner says its cache modes."""
    if pred.hybrid is None:
        return
    for line in alignment_lines(pred.hybrid):
        yield ("log", "INFO", "hybrid", line, "interface.py")
    if line := runner_line(pred.hybrid, pred.env):
        yield ("log", "INFO", "hybrid", line, "hpu_model_runner.py")


def _kv_lines_v1(pred: StartupPrediction, overriding: str | None) -> Iterator[tuple]:
    """The v1 engine's KV lines: the plugin's block count, then the engine core's capacity."""
    n = pred.memory.num_blocks
    if overriding:
        yield ("log", "INFO", "kv_size", overriding, "kv_cache_utils.py")
    h = pred.hybrid  # a hybrid's attention tensors hold its larger blocks as kernel blocks
    kernel_blocks = n * (h.attn_block_tokens // h.kernel_block) if h else n
    yield ("log", "INFO", "free", f"Usable num_blocks: {n}, actual allocated num_blocks (max across layers): "
           f"{kernel_blocks + 1} (_PAD_BLOCK_ID={n}, _PAD_SLOT_ID={n * pred.config.block_size})")
    if pred.auto_fit is not None:  # --max-model-len auto: the engine core's fit (vLLM 0.32's wording)
        derived, fitted, kv = pred.auto_fit
        memory = f"{round(kv / GiB, 2)} GiB HPU"
        yield ("log", "INFO", "kv_size", f"Auto-fit max_model_len: full model context length {derived} fits "
               f"in available KV cache memory ({memory})" if fitted >= derived else
               f"Auto-fit max_model_len: reduced from {derived} to {fitted} to fit in available KV cache "
               f"memory ({memory})", "kv_cache_utils.py")
    mml = pred.config.max_model_len
    tokens = n * pred.config.block_size
    concurrency = tokens / mml
    if h is not None:  # vLLM's group-aware capacity: a request's attention and state blocks
        pc = bool(pred.config.prefix_caching)
        tokens, concurrency = h.kv_tokens(n, mml, pc), h.max_concurrency(n, mml, pc)
    yield ("log", "INFO", "kv_size", f"GPU KV cache size: {tokens:,} tokens", "kv_cache_utils.py")
    yield ("log", "INFO", "kv_size", f"Maximum concurrency for {mml:,} tokens per "
           f"request: {concurrency:.2f}x", "kv_cache_utils.py")


def _fail(phase: str, message: str, code: int = 1) -> Iterator[tuple]:
    file, func = _FRAMES[phase]
    yield ("raw", "Traceback (most recent call last):", True)
    yield ("raw", '  File "/usr/local/lib/python3.10/dist-packages/vllm/entrypoints/openai/api_server.py", '
           "line 573, in run_server", True)
    yield ("raw", f'  File "/usr/local/lib/python3.10/dist-packages/{file}", line 1, in {func}', True)
    yield ("raw", message, True)
    yield ("fail", code)


def _free_lines(pred: StartupPrediction) -> Iterator[tuple]:
    """The worker's KV memory: its split, and a hybrid's cut for the states it allocates apart."""
    yield ("log", "INFO", "free", _free_line(pred))
    m = pred.memory
    if pred.hybrid is not None and (line := memory_line(pred.hybrid, m.kv - m.block_bytes)):
        yield ("log", "INFO", "free", line)


def _free_line(pred: StartupPrediction) -> str:
    m = pred.memory
    text = (f"Free device memory: {fb(m.free)}, {fb(m.usable)} usable (gpu_memory_utilization="
            f"{pred.sim.gpu_memory_utilization}), {fb(m.graph_reserved)} reserved for HPUGraphs "
            f"(VLLM_GRAPH_RESERVED_MEM={m.graph_reserved_frac}), {fb(m.kv)} reserved for KV cache")
    if pred.rules.engine == "v1":
        text += f" dummy block {fb(m.kv - m.block_bytes)} reserved for usable KV cache"
    return text


def _bucket_lines(pred: StartupPrediction, lines: list[str]) -> Iterator[tuple]:
    for line in lines:
        key = "generated" if line.startswith(("Generated", "Omitted")) else "buckets"
        yield ("log", "INFO", key, line, _bucket_file(pred.rules.style, pred.plan.strategy, key))


def _bucket_file(style: str, strategy: str, key: str) -> str | None:
    """Which module logs bucket lines: the runner (1.17/1.18), the extension's bucketing.py (1.19/1.20),
    else the strategy's module for the config and common.py for the generated lists."""
    if style == "fork-habana":
        return None
    if style == "fork-hpu-old":
        return "bucketing.py"
    return "common.py" if key == "generated" else f"{strategy}.py"


def _warmup_line(pred: StartupPrediction, step: WarmupStep) -> str:
    style = pred.rules.style
    bs = step.bucket[0]
    if pred.plan.dims == 3:
        _, q, c = prompt_shape(step.bucket) if step.phase == "prompt" else (bs, 1, step.bucket[-1])
        dims = f"batch_size:{bs} query_len:{q} num_blocks:{c}"
    elif step.phase == "prompt" or pred.profile == "fork-1.17":
        dims = f"batch_size:{bs} seq_len:{step.bucket[1]}"
    else:
        dims = f"batch_size:{bs} num_blocks:{step.bucket[1]}"
    phase = step.phase.capitalize() if step.kind == "compile" else _graph_phase(style, step.phase)
    return f"[Warmup][{phase}][{step.index}/{step.total}] {dims} free_mem:{fb(step.free_mem)}"


def _graph_phase(style: str, phase: str) -> str:
    lower = style == "fork-3d"
    return f"Graph/{phase if lower else phase.capitalize()}"


class _Bars:
    """The plugin's tqdm bars over the warm-up steps: one bar per phase, a redraw as each step ends."""

    def __init__(self, steps: list[WarmupStep]):
        self.steps, self.key, self.n, self.elapsed = steps, None, 0, 0.0

    def _total(self, i: int) -> int:
        key = (self.steps[i].kind, self.steps[i].phase)
        return sum(1 for s in self.steps if (s.kind, s.phase) == key)

    def _draw(self, final: bool = False) -> tuple:
        kind, phase = self.key
        postfix = f"{self.n - 1}/{self.total}" if self.n else None
        return ("bar", tqdm_meter(_BAR_DESC.get(phase, f"{phase.capitalize()} warmup processing: "), self.n,
                                  self.total, self.elapsed, postfix), final)

    def begin(self, i: int) -> Iterator[tuple]:
        key = (self.steps[i].kind, self.steps[i].phase)
        if key != self.key:
            if self.key is not None:
                yield from self.close()
            self.key, self.n, self.elapsed, self.total = key, 0, 0.0, self._total(i)
            yield self._draw()

    def done(self, seconds: float) -> Iterator[tuple]:
        self.n += 1
        self.elapsed += seconds
        if self.n < self.total:
            yield self._draw()

    def close(self) -> Iterator[tuple]:
        if self.key is not None:
            yield self._draw(final=True)
            self.key = None


class _VisionLines:
    """The vision warm-up's lines (buckets/vision.py, in the release's words): those printed before its
    first step, one per step (vllm-gaudi logs a step when it is done, the fork as it begins), and the
    fork's summary printed with the prompt graphs'."""

    def __init__(self, pred: StartupPrediction):
        self.before, self.steps, self.after = [], [], []
        for level, msg in pred.vision.plan.log_records if pred.vision is not None else ():
            if msg.startswith("[Warmup]"):
                self.steps.append(msg)
            elif msg.startswith("Graph/Multimodal captured"):
                self.after.append((level, msg))
            elif not self.steps:
                self.before.append((level, msg))
        self.when_done = pred.vision is not None and not pred.vision.fork
        self.n = 0

    def _line(self, step: WarmupStep) -> Iterator[tuple]:
        if self.n < len(self.steps):
            msg = self.steps[self.n].replace("free_mem:<free>", f"free_mem:{fb(step.free_mem)}")
            yield ("log", "INFO", "warmup", msg, "hpu_model_runner.py")

    def begin(self, step: WarmupStep) -> Iterator[tuple]:
        if self.n == 0:
            for level, msg in self.before:
                yield ("log", level, "buckets", msg, "vision.py" if "config file" in msg else "hpu_model_runner.py")
        if not self.when_done:
            yield from self._line(step)

    def end(self, step: WarmupStep) -> Iterator[tuple]:
        if self.when_done:
            yield from self._line(step)
        self.n += 1


def _step_done(step: WarmupStep, drawn: _Bars | None, vision: _VisionLines) -> Iterator[tuple]:
    """What the server prints as a step ends: vllm-gaudi's multimodal line, a bar's redraw."""
    if step.phase == "multimodal":
        yield from vision.end(step)
    elif drawn is not None:
        yield from drawn.done(step.seconds)


def _step_output(pred: StartupPrediction, i: int, drawn: _Bars | None, vision: _VisionLines) -> Iterator[tuple]:
    """What the server prints as step i begins: a bar's first draw (tqdm style), a tqdm.write line (the
    plugin with [Warmup] lines) or a logger line (the fork); the vision warm-up's own lines."""
    if pred.steps[i].phase == "multimodal":
        yield from vision.begin(pred.steps[i])
        return
    if drawn is not None:
        yield from drawn.begin(i)
    elif pred.rules.style == "gaudi":
        yield ("raw", _warmup_line(pred, pred.steps[i]), True)  # tqdm.write, not the logger
    else:
        yield ("log", "INFO", "warmup", _warmup_line(pred, pred.steps[i]))


def _warmup(pred: StartupPrediction, faults: Faults, bars: bool = False) -> Iterator[tuple]:
    steps, rules = pred.steps, pred.rules
    drawn = _Bars(steps) if bars else None
    fault = faults.warmup_fault()
    fault_at = int(fault[1] * max(len(steps) - 1, 0)) if fault else None
    fail_at = pred.failure.at_step if pred.failure and pred.failure.phase == "warmup" else None
    budget_line = _budget_line(pred)
    vision = _VisionLines(pred)
    elapsed = 0.0
    for i, step in enumerate(steps):
        if step.kind == "capture" and budget_line:
            yield budget_line  # printed once, when capture starts
            budget_line = None
        yield from _step_output(pred, i, drawn, vision)
        if fault_at is not None and i == fault_at:
            name = fault[0]
            yield ("advance", step.seconds / 2)
            if name == "hang-warmup":
                yield ("hang",)
                return
            yield from _fail("warmup", COMPILE_ERROR if name == "crash-warmup" else devmem_error(896 * MiB))
            return
        yield ("advance", step.seconds)
        elapsed += step.seconds
        yield from _step_done(step, drawn, vision)
        if fail_at is not None and i == fail_at:
            yield from _fail("warmup", pred.failure.message)
            return
        if step.kind != "capture" and not step.cache_hit:
            yield ("compiled", step.phase, step.bucket)
    if fail_at is not None and fail_at >= len(steps):  # e.g. an unknown capture strategy, read after the budget
        if budget_line:
            yield budget_line
        yield from _fail("warmup", pred.failure.message)
        return
    if drawn is not None:
        yield from drawn.close()
    yield from _summaries(pred)
    for level, msg in vision.after:
        yield ("log", level, "summary", msg)
    if pred.sampler_seconds:
        s = pred.config.max_num_seqs
        yield ("log", "INFO", "sampler", f"Warming up sampler with batch sizes: [0, 1, {s}] and following configs:")
        for cfg in ("temp=0.0, top_p=1.0, top_k=0", "temp=1.0, top_p=1.0, top_k=0",
                    "temp=0.7, top_p=0.9, top_k=50", "temp=0.3, top_p=0.95, top_k=20"):
            yield ("log", "INFO", "sampler", f"{cfg}, batch_changed=True")
        yield ("advance", pred.sampler_seconds)
        elapsed += pred.sampler_seconds
    allocated = pred.prompt_graph_mem + pred.decode_graph_mem
    yield ("log", "INFO", "finished", f"Warmup finished in {elapsed:.0f} secs, allocated {fb(allocated)} of "
           "device memory")
    if rules.engine == "v0":
        m = pred.memory
        yield ("log", "INFO", "init_cache", f"init_cache_engine took {fb(m.kv_allocated + allocated)} of device "
               f"memory ({fb(m.weights + m.profile_overhead + m.kv_allocated + allocated)}/{fb(m.device_visible)} "
               f"used) and 57.86 MiB of host memory ({fb(HOST_USED + 3.19 * GiB)}/{fb(HOST_TOTAL)} used)")
    yield from _server_ready(pred)


def _budget_line(pred: StartupPrediction) -> tuple | None:
    b = pred.budget
    if b is None:
        return None
    return ("log", "INFO", "budget", f"Using {fb(b.graph_free_mem)}/{fb(b.free_mem)} of free device memory for "
            f"HPUGraphs, {fb(b.prompt)} for prompt and {fb(b.decode)} for decode "
            f"(VLLM_GRAPH_PROMPT_RATIO={b.prompt_ratio})")


def _summaries(pred: StartupPrediction) -> Iterator[tuple]:
    if not pred.graphs:
        return
    style = pred.rules.style
    for phase, graphed, mem, total in (("prompt", pred.graphed_prompt, pred.prompt_graph_mem, len(pred.plan.prompt)),
                                       ("decode", pred.graphed_decode, pred.decode_graph_mem, len(pred.plan.decode))):
        pct = f"({100 * len(graphed) / max(total, 1):.1f}%)"
        if style == "fork-3d":
            text = f"{phase.capitalize()} captured:{len(graphed)} {pct} used_mem:{fb(mem)}"
        elif style == "gaudi":
            text = f"Graph/{phase.capitalize()} captured:{len(graphed)} used_mem:{fb(mem)}"
        else:
            text = (f"Graph/{phase.capitalize()} captured:{len(graphed)} {pct} used_mem:{fb(mem)} "
                    f"buckets:{sorted(graphed)}")
        yield ("log", "INFO", "summary", text)


def _server_ready(pred: StartupPrediction) -> Iterator[tuple]:
    if pred.rules.engine == "v1":
        yield ("log", "INFO", "init_engine", "init engine (profile, create kv cache, warmup model) took "
               f"{pred.load_seconds + pred.profile_seconds + pred.warmup_seconds:.2f} seconds", "core.py")
    yield ("advance", 0.5)
    yield ("ready",)


@dataclass
class VirtualStartup:
    lines: list
    seconds: float
    exit_code: int | None  # None: ready to serve
    hung: bool = False


def run_startup_virtual(pred: StartupPrediction, faults: Faults | None = None, start_wall: float = 0.0,
                        cache: RecipeCache | None = None, log_style: str = "lines") -> VirtualStartup:
    """Play the startup without sleeping; the printed lines and the simulated seconds it took."""
    clock = SimTime()
    sink: list = []
    log = SimLog(pred.rules.style, clock, start_wall, sink=sink)
    code, hung = None, False
    for ev in startup_events(pred, faults, log_style):
        kind = ev[0]
        if kind == "advance":
            clock.t += ev[1]
        elif kind in ("log", "raw", "bar"):
            emit(log, ev)
        elif kind == "compiled":
            store_recipe(cache, pred, ev[1], ev[2])
        elif kind == "fail":
            code = ev[1]
            break
        elif kind == "hang":
            hung = True
            break
    return VirtualStartup(sink, clock.t, code, hung)


def store_recipe(cache: RecipeCache | None, pred: StartupPrediction, phase: str, bucket: tuple) -> None:
    if cache is not None:
        cache.store(pred.recipe_id(phase, bucket), f"{pred.profile} {phase} {bucket}")


def emit(log: SimLog, ev: tuple) -> None:
    if ev[0] == "bar":
        log.bar(ev[1], final=ev[2])
    elif ev[0] == "raw":
        log.raw(ev[1], stderr=ev[2])
    else:
        _, level, key, msg, *file = ev
        log.log(level, key, msg, file[0] if file else None)

