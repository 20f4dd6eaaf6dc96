"""One trial end to end: settings -> (pre-boot check) -> boot, watch, warm pass, measure, stop -> a record.

The order of a trial (README.md "The way data flows through one trial"):
1. the release profile expands the settings, predicts the buckets and the warmup cost, and rejects
   invalid or over-budget configurations before anything boots (such a trial costs no boot);
2. the server starts in its own process group; the log watcher follows warmup live and can abort
   when the projected warmup exceeds the budget;
3. readiness, one unmeasured warm pass, the measured load test;
4. teardown of the whole process tree, whatever happened;
5. metrics and server-side findings (bucket counts, KV blocks, graphs, recompiles) -> TrialResult.
Every ending is classified; nothing is raised for a failed trial.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from .backends import Backend
from .loadgen import run_benchmark
from .logparse import LogWatcher
from .metrics import rescale_time
from .redact import redact_argv, redact_env
from .server import OutcomeKind, ServerProcess, device_env, find_free_port
from .space import TrialSettings
from .workload import Workload

# Failure classes (README, Conventions). The first group is the configuration's fault: the sampler
# is told the trial was infeasible. The second is the environment's: the trial is failed and retried.
OK = "ok"
INVALID_CONFIG = "invalid_config"
WARMUP_OVER_BUDGET = "warmup_over_budget"
WARMUP_OOM = "warmup_oom"
RUNTIME_OOM = "runtime_oom"
LOAD_ERRORS = "load_errors"
CONFIG_FAILURES = (INVALID_CONFIG, WARMUP_OVER_BUDGET, WARMUP_OOM, RUNTIME_OOM, LOAD_ERRORS)
BOOT_FAILURE = "boot_failure"
PORT_IN_USE = "port_in_use"
BOOT_TIMEOUT = "boot_timeout"
WARMUP_TIMEOUT = "warmup_timeout"
CRASH = "crash"
INTERRUPTED = "interrupted"

_OUTCOME_CLASS = {
    OutcomeKind.BOOT_FAILURE: BOOT_FAILURE,
    OutcomeKind.PORT_IN_USE: PORT_IN_USE,
    OutcomeKind.WARMUP_OOM: WARMUP_OOM,
    OutcomeKind.WARMUP_TIMEOUT: WARMUP_TIMEOUT,
    OutcomeKind.BOOT_TIMEOUT: BOOT_TIMEOUT,
    OutcomeKind.WARMUP_OVER_BUDGET: WARMUP_OVER_BUDGET,
    OutcomeKind.CRASH: CRASH,
}


@dataclass
class LoadOptions:
    max_concurrency: int | None = 16
    request_rate: float = math.inf
    burstiness: float = 1.0
    warmup_requests: int = 8  # the unmeasured warm pass
    goodput_slos: dict[str, float] | None = None
    percentiles: tuple[float, ...] = (50, 90, 99)
    request_timeout_s: float = 600.0


@dataclass
class Limits:
    """In the server's own time (simulated seconds for a time-scaled simulator)."""

    boot_timeout_s: float = 900.0
    warmup_timeout_s: float = 7200.0
    warmup_budget_s: float | None = None  # abort (and reject before boot) above this predicted warmup
    stop_grace_s: float = 10.0  # per signal (SIGINT, then SIGTERM), before SIGKILL of the group
    wall_slack_s: float = 30.0  # added to every time-scaled wall-clock limit (process start-up jitter)


@dataclass
class DeviceModel:
    """What the target hardware and model are, for pre-boot prediction (None: no prediction)."""

    device: str = "gaudi2"
    model: str = "llama-3.1-8b"
    dtype: str = "bf16"


@dataclass
class TrialContext:
    """Everything the trials of one study share."""

    backend: Backend
    workload: Workload
    release: str | None = None  # release profile that interprets the env (None: not a Gaudi server)
    device_model: DeviceModel | None = None
    load: LoadOptions = field(default_factory=LoadOptions)
    limits: Limits = field(default_factory=Limits)
    records_dir: Path | None = None  # where server process-group records live
    host: str = "127.0.0.1"
    progress: Callable[[str], None] | None = None  # one-line status updates
    # live progress of a slot: (slot, what, done, total, eta_wall_s or None); e.g. a progress bar
    on_progress: Callable[[int, str, int, int, float | None], None] | None = None


@dataclass
class Slot:
    """Where a trial runs: its index among parallel slots and its devices (None: the default)."""

    index: int = 0
    devices: list[str] | None = None


@dataclass
class TrialResult:
    status: str
    reason: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    server: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # redacted
    argv: list[str] = field(default_factory=list)  # redacted
    predicted: dict[str, Any] = field(default_factory=dict)
    observed: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)  # vllm bench serve aggregate fields
    artifacts: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)  # wall seconds of the trial's phases
    booted: bool = False

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def warmup_s(self) -> float | None:
        return self.observed.get("warmup_s", self.predicted.get("warmup_s") if not self.booted else None)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------------------------------- pre-boot

def predict(ctx: TrialContext, settings: TrialSettings):
    """The release's buckets and the device model's startup prediction, or None without a model."""
    if ctx.release is None or ctx.device_model is None:
        return None
    from .sim.costmodel import ServerInputs, SimSettings, predict_startup

    s = settings.server
    sim = SimSettings(
        model=ctx.device_model.model,
        device=ctx.device_model.device,
        dtype=ctx.device_model.dtype,
        tp=int(s.get("tensor_parallel_size", 1)),
        gpu_memory_utilization=float(s.get("gpu_memory_utilization", 0.9)),
        enforce_eager=bool(s.get("enforce_eager", False)),
    )
    inputs = ServerInputs(
        block_size=int(s.get("block_size", 128)),
        max_num_seqs=int(s.get("max_num_seqs", 256)),
        max_model_len=s.get("max_model_len"),
        max_num_batched_tokens=s.get("max_num_batched_tokens"),
        prefix_caching=s.get("enable_prefix_caching"),
        max_num_prefill_seqs=s.get("max_num_prefill_seqs"),
    )
    return predict_startup(ctx.release, sim, inputs, settings.env)


def _prediction_summary(pred) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if pred.plan is not None:
        out.update(strategy=pred.plan.strategy, prompt_buckets=len(pred.plan.prompt),
                   decode_buckets=len(pred.plan.decode))
    if pred.memory is not None:
        out["kv_blocks"] = pred.num_blocks
    if pred.failure is None:
        out.update(warmup_s=round(pred.warmup_seconds, 2), prompt_graphs=len(pred.graphed_prompt),
                   decode_graphs=len(pred.graphed_decode))
    else:
        out["failure"] = f"{pred.failure.phase}: {pred.failure.message}"
    return out


def pre_boot_check(ctx: TrialContext, settings: TrialSettings) -> tuple[dict[str, Any], TrialResult | None]:
    """(prediction summary, a rejection result or None). A rejected trial costs no boot."""
    pred = predict(ctx, settings)
    if pred is None:
        return {}, None
    summary = _prediction_summary(pred)
    if pred.failure is not None:
        # The release itself refuses the settings (bucket errors, flags) or memory cannot fit them.
        return summary, TrialResult(status=INVALID_CONFIG, reason=summary["failure"], predicted=summary)
    budget = ctx.limits.warmup_budget_s
    if budget is not None and pred.warmup_seconds > budget:
        return summary, TrialResult(
            status=WARMUP_OVER_BUDGET,
            reason=f"predicted warmup {pred.warmup_seconds:.0f} s exceeds the budget of {budget:g} s "
                   f"({summary.get('prompt_buckets')} prompt + {summary.get('decode_buckets')} decode buckets)",
            predicted=summary,
        )
    return summary, None


# ------------------------------------------------------------------------------------------- a trial

# The study database's credentials are the tuner's alone: no server process gets them.
_TUNER_ONLY_ENV = ("PGPASSWORD", "PGPASSFILE", "BUCKET_TUNER_STORAGE")


def server_environment(settings: TrialSettings, slot: Slot, backend: Backend) -> dict[str, str]:
    """The complete environment of the server: ours minus stray bucket settings, plus the trial's."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("VLLM_", "PT_HPU_")) and k not in _TUNER_ONLY_ENV}
    if backend.kind == "vllm":
        env.update(device_env(slot.devices))
    env.update(settings.env)
    return env


class _SafeWatcher:
    """The log watcher, fed from the server's log thread and read from the trial thread."""

    def __init__(self, expect_graphs: bool):
        self.lock = threading.Lock()
        self.watcher = LogWatcher(expect_graphs=expect_graphs)

    def on_line(self, line: str, t: float) -> None:
        with self.lock:
            self.watcher.feed(line, t)

    def read(self, fn):
        with self.lock:
            return fn(self.watcher)


def run_trial(ctx: TrialContext, settings: TrialSettings, trial_dir: Path, slot: Slot | None = None,
              stop_event: threading.Event | None = None) -> TrialResult:
    """Run one trial; always returns a classified result and never leaves a process behind."""
    slot = slot or Slot()
    trial_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    predicted, rejected = pre_boot_check(ctx, settings)
    base = dict(params=settings.params, server=settings.server, env=redact_env(settings.env))
    if rejected is not None:
        rejected.__dict__.update(base)
        rejected.timings = {"total_s": round(time.monotonic() - t0, 3)}
        return rejected

    backend, limits = ctx.backend, ctx.limits
    scale = backend.startup_scale  # boot and warmup run at the startup time scale
    port = find_free_port(ctx.host)
    argv = backend.argv(settings.server, ctx.host, port)
    base_url = f"http://{ctx.host}:{port}"
    log_path = trial_dir / "server.log"
    watch = _SafeWatcher(expect_graphs=bool(predicted.get("prompt_graphs")))
    result = TrialResult(status=OK, predicted=predicted, argv=redact_argv(argv), booted=True,
                         artifacts={"server_log": str(log_path)}, **base)

    def warmup_started() -> bool:
        return watch.read(lambda w: w.progress() is not None or w.stage != "startup")

    def should_abort() -> str | None:
        if stop_event is not None and stop_event.is_set():
            return "interrupted"
        if ctx.on_progress is not None:
            prog, eta = watch.read(lambda w: (w.progress(), w.projected_remaining_s()))
            if prog is not None:
                ctx.on_progress(slot.index, f"warmup {prog[0]}", prog[1], prog[2], eta)
        budget = limits.warmup_budget_s
        if budget is None:
            return None
        remaining = watch.read(lambda w: w.projected_remaining_s())
        started = srv.warmup_started_at
        if remaining is None or started is None:
            return None
        projected = (time.monotonic() - started + remaining) / scale
        if projected > budget * 1.1:  # 10% slack: early pace estimates are noisy
            return f"projected warmup {projected:.0f} s exceeds the budget of {budget:g} s"
        return None

    with ServerProcess(records_dir=ctx.records_dir, on_line=watch.on_line) as srv:
        _slot_status(ctx, slot, f"booting {backend.kind} on port {port}")
        srv.start(argv, server_environment(settings, slot, backend), log_path, port=port)
        outcome = srv.wait_ready(
            base_url,
            boot_timeout_s=limits.boot_timeout_s * scale + limits.wall_slack_s,
            warmup_timeout_s=limits.warmup_timeout_s * scale + limits.wall_slack_s,
            warmup_started=warmup_started,
            should_abort=should_abort,
            oom_seen=lambda: watch.read(lambda w: w.oom_seen),
        )
        t_ready = time.monotonic()
        result.timings["boot_and_warmup_s"] = round(t_ready - t0, 3)
        if not outcome.ok:
            result.status = _OUTCOME_CLASS[outcome.kind]
            if outcome.kind is OutcomeKind.BOOT_FAILURE and srv.warmup_started_at is not None:
                result.status = CRASH  # it got as far as warmup: not a launch problem
            if outcome.kind is OutcomeKind.WARMUP_OVER_BUDGET and outcome.reason == "interrupted":
                result.status = INTERRUPTED
            result.reason = outcome.reason + _last_error(outcome.log_tail)
        else:
            _slot_status(ctx, slot, "ready; load test")
            _run_load(ctx, srv, base_url, trial_dir, result, watch, stop_event, slot)
            ended = srv.check(lambda: watch.read(lambda w: w.oom_seen))
            if ended is not None and result.status in (OK, LOAD_ERRORS):
                # Died during (or right after) the load test: its requests failed because of that.
                result.status = RUNTIME_OOM if watch.read(lambda w: w.oom_seen) else CRASH
                result.reason = ended.reason + _last_error(ended.log_tail)
        result.timings["load_s"] = round(time.monotonic() - t_ready, 3)
        g = limits.stop_grace_s
        srv.stop(grace_int_s=g, grace_term_s=g, grace_kill_s=5.0)
    stop = srv.stop_report
    if stop is not None:
        result.observed["stop"] = {"ended_by": stop.ended_by, "leftover": stop.leftover}
    _observe(result, watch, scale, t_ready - (srv.started_at or t0), outcome.ok)
    result.timings["total_s"] = round(time.monotonic() - t0, 3)
    return result


def _run_load(ctx, srv, base_url, trial_dir, result, watch, stop_event, slot) -> None:
    lo = ctx.load

    async def main():
        bench = asyncio.ensure_future(run_benchmark(
            base_url, ctx.backend.api_model_name, ctx.workload,
            max_concurrency=lo.max_concurrency, request_rate=lo.request_rate, burstiness=lo.burstiness,
            warmup_requests=lo.warmup_requests, goodput_slos=lo.goodput_slos, percentiles=lo.percentiles,
            progress=False,
            on_request_done=(None if ctx.on_progress is None else
                             lambda done, total: ctx.on_progress(slot.index, "load test", done, total, None)),
            request_timeout_s=lo.request_timeout_s * ctx.backend.time_scale + ctx.limits.wall_slack_s,
            time_scale=ctx.backend.time_scale,  # rates and goodput SLOs are in the server's own time
        ))
        # Watchdog: a crashed server or a Ctrl-C ends the load test now, with its streams closed.
        while not bench.done():
            await asyncio.wait({bench}, timeout=0.5)
            if bench.done():
                break
            crashed = srv.check(lambda: watch.read(lambda w: w.oom_seen))
            if crashed is not None or (stop_event is not None and stop_event.is_set()):
                bench.cancel()
                await asyncio.gather(bench, return_exceptions=True)
                return crashed
        return bench.result()

    outcome = asyncio.run(main())
    if outcome is None or not hasattr(outcome, "to_json"):
        if outcome is None:
            result.status, result.reason = INTERRUPTED, "interrupted during the load test"
        else:
            oom = watch.read(lambda w: w.oom_seen)
            result.status = RUNTIME_OOM if oom else CRASH
            result.reason = outcome.reason + _last_error(outcome.log_tail)
        return
    bench_json = rescale_time(outcome.to_json(detailed=True), ctx.backend.time_scale)
    bench_path = trial_dir / "bench.json"
    bench_path.write_text(json.dumps(bench_json))
    result.artifacts["bench_json"] = str(bench_path)
    result.metrics = {k: v for k, v in bench_json.items() if not isinstance(v, (list, dict))}
    failed = bench_json.get("failed", 0)
    if failed:
        # The server's own messages, most frequent first: "40 x server error: Token id 7000 is ..."
        groups = bench_json.get("tuner_failures", {}).get("by_message") or []
        said = "; ".join(f"{g['count']} x {g['message']}" for g in groups[:3])
        more = f"; and {len(groups) - 3} more distinct errors" if len(groups) > 3 else ""
        result.status = LOAD_ERRORS
        result.reason = f"{failed} of {bench_json.get('num_prompts')} requests failed: {said}{more}"


def _observe(result: TrialResult, watch: _SafeWatcher, scale: float, ready_after_s: float, ready: bool):
    s = watch.read(lambda w: w.summary())
    obs = result.observed
    if s.prompt_buckets is not None or "prompt" in s.generated:
        obs["prompt_buckets"] = s.generated["prompt"].count
    if "decode" in s.generated:
        obs["decode_buckets"] = s.generated["decode"].count
    if s.hpu_blocks is not None:
        obs["kv_blocks"] = s.hpu_blocks
    for phase, cap in s.graph_captured.items():
        obs[f"{phase.split('/')[-1].lower()}_graphs"] = cap.count
    if s.warmup_finished is not None:
        obs["warmup_s"] = float(s.warmup_finished.seconds)
        obs["warmup_source"] = "log: Warmup finished"
    elif ready:
        # A backend with no "Warmup finished" line (a CPU/CUDA vLLM): launch to ready, said as such.
        obs["warmup_s"] = round(ready_after_s / scale, 3)
        obs["warmup_source"] = "launch to ready"
    obs["not_warmed_up"] = len(s.not_warmed_up)
    obs["buckets_not_prepared"] = len(s.buckets_not_prepared)
    obs["preemptions"] = s.preemptions
    if s.oom is not None:
        obs["oom_stage"] = s.oom_stage
        if result.status == CRASH and s.oom_stage in ("ready", "serving"):
            result.status = RUNTIME_OOM


def _last_error(tail: list[str]) -> str:
    for line in reversed(tail or []):
        text = line.strip()
        if "Error" in text or "error" in text:
            return f" | last error: {text[-300:]}"
    return ""


def _status(ctx: TrialContext, text: str) -> None:
    if ctx.progress is not None:
        ctx.progress(text)


def _slot_status(ctx: TrialContext, slot: Slot, text: str) -> None:
    """A slot's stage: on its progress bar when there is one, else as a status line."""
    if ctx.on_progress is not None:
        ctx.on_progress(slot.index, text, 0, 0, None)
    else:
        _status(ctx, f"slot {slot.index}: {text}")
