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
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..load.client import NO_GENERATING_API, run_benchmark
from ..load.firstrun import PREFIXES as FIRST_RUN_PREFIXES
from ..load.metrics import rescale_time
from ..load.options import LoadOptions
from ..load.workload import Workload
from ..logparse import BucketNotPrepared, LogWatcher, NotWarmedUp, StepGraphCompilation, last_error
from ..logparse.device import card_memory, device_of_memory
from ..perfmodel.calibration import Calibration, observation_sample
from ..perfmodel.checks import TrialPrediction, rejection
from ..perfmodel.projection import BootTracker
from ..perfmodel.target import DeviceModel, predict_calibrated, predict_serving
from ..serve.backends import Backend
from ..serve.pauses import MIN_PAUSE_S, pause_clock
from ..serve.ports import find_free_port
from ..serve.process import OutcomeKind, ServerProcess, device_env
from ..serve.redact import redact_argv, redact_env
from ..space.schema import TrialSettings
from ..vocabulary.display import above
from ..vocabulary.status import TrialStatus
from .cost import METRIC as COST_METRIC
from .cost import CostRate, cards, per_mtok
from .result import TrialResult

if TYPE_CHECKING:
    from ..recipecache.warmupmode import WarmupOptions
    from .loadsweep import LoadSweep


@dataclass
class Limits:
    """In the server's own time (simulated seconds for a time-scaled simulator)."""

    boot_timeout_s: float = 900.0
    warmup_timeout_s: float = 7200.0
    warmup_budget_s: float | None = None  # abort (and reject before boot) above this predicted warmup
    stop_grace_s: float = 10.0  # per signal (SIGINT, then SIGTERM), before SIGKILL of the group
    # the same when the tuner itself is being stopped (a signal): inside a scheduler's 30 s grace period
    interrupt_grace_s: float = 5.0
    wall_slack_s: float = 30.0  # added to every time-scaled wall-clock limit (process start-up jitter)


@dataclass
class TrialContext:
    """Everything the trials of one study share. It is also the model's target
    (perfmodel.target.ServingTarget: release, device_model, calibration, workload, load)."""

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
    # the corrections fitted from this study's boots (the study refreshes it after every trial)
    calibration: Calibration | None = None
    predict_serving: bool = True  # also predict the load test's figures (decode-step calibration)
    # tune --warmup cold|cached and --shared-recipe-cache (warmupmode.WarmupOptions); None: cold, no cache
    warmup: WarmupOptions | None = None
    preboot_reject: bool = True  # False: boot even what the model rejects (exploration)
    # several load points per boot (a loadsweep.LoadSweep; None: one load test with `load`)
    load_sweep: LoadSweep | None = None
    measure_load: bool = True  # False: stop once ready (a boot that only measures the warmup)
    # tune --release auto: what was read off the node and why (detect.Detection.describe()); None: given
    release_detection: dict | None = None
    # tune --cost-per-hour (cost.CostRate): each measured load also gets cost.METRIC ($ per M output tokens)
    cost: CostRate | None = None
    # tune --confirm: asked after each load run with every run's metrics so far; True: one more load run
    # on the same server, with fresh prompts (study/confirmrun.py records each as a measurement)
    again: Callable[[list[dict]], bool] | None = None

    def say(self, text: str) -> None:
        """One line of the study's live output (progress), if anyone listens."""
        if self.progress is not None:
            self.progress(text)


@dataclass
class Slot:
    """Where a trial runs: its index among parallel slots and its devices (None: the default)."""

    index: int = 0
    devices: list[str] | None = None


# ---------------------------------------------------------------------------------------- pre-boot
# (the predictions themselves: tuner/perfmodel/target.py; a TrialContext is a target)

def pre_boot_check(ctx: TrialContext, settings: TrialSettings,
                   tp: TrialPrediction | None = None) -> tuple[dict[str, Any], TrialResult | None]:
    """(prediction summary, a rejection result or None). A rejected trial costs no boot. Only what is
    confidently wrong is rejected: the release's own refusal, out of memory even with favourable memory
    corrections, or a warmup whose lower bound is over the budget."""
    tp = tp or predict_calibrated(ctx, settings)
    if tp is None:
        return {}, None
    summary = tp.summary()
    refused = rejection(tp, ctx.limits.warmup_budget_s) if ctx.preboot_reject else None
    if refused is None:
        return summary, None
    return summary, TrialResult(status=refused[0], reason=refused[1], predicted=summary)


# ------------------------------------------------------------------------------------------- a trial

# The study database's credentials are the tuner's alone: no server process gets them.
_TUNER_ONLY_ENV = ("PGPASSWORD", "PGPASSFILE", "BUCKET_TUNER_STORAGE")


def server_environment(settings: TrialSettings, slot: Slot, backend: Backend,
                       release: str | None = None) -> dict[str, str]:
    """The complete environment of the server: ours minus stray bucket settings, plus the release's
    compilation log (diagnostics only: never exported), plus the trial's."""
    from ..buckets.runtime import diagnostic_env

    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("VLLM_", "PT_HPU_")) and k not in _TUNER_ONLY_ENV}
    if backend.kind == "vllm":
        env.update(device_env(slot.devices))
    env.update(diagnostic_env(release))
    env.update(settings.env)
    return env


class _SafeWatcher:
    """The log watcher (and the boot tracker it feeds), fed from the server's log thread and read from
    the trial thread. The tracker works in server seconds: wall seconds / the startup time scale."""

    def __init__(self, expect_graphs: bool, tracker: BootTracker | None = None, scale: float = 1.0):
        self.lock = threading.Lock()
        self.watcher = LogWatcher(expect_graphs=expect_graphs)
        self.tracker, self.scale = tracker, scale
        self.first_line_at: float | None = None  # time.monotonic() the server's first line was read
        # (time.monotonic() the line was read, kind) of each shape compiled while serving: the first-run
        # window counts those read before its last request ended
        self.serving_events: list[tuple[float, str]] = []
        self.card_gib: float | None = None  # device memory per card, as the server's memory lines report it

    def on_line(self, line: str, t: float) -> None:
        with self.lock:
            if self.card_gib is None:
                self.card_gib = card_memory(line)
            if self.first_line_at is None:
                self.first_line_at = t
                if self.tracker is not None and self.tracker.started_at and self.scale != 1.0:
                    # A time-scaled server's own phases start with its first line; the interpreter's start
                    # before it runs in real time, so it counts once, not 1/scale times (a genuine
                    # server runs at scale 1: nothing changes for it).
                    launched = self.tracker.started_at * self.scale
                    self.tracker.started_at = t / self.scale - (t - launched)
            for ev in self.watcher.feed(line, t):
                if self.tracker is not None:
                    self.tracker.on_event(ev, t / self.scale)
                kind = _serving_event(ev)
                if kind is not None:
                    self.serving_events.append((t, kind))

    def events_until(self, t: float) -> dict[str, int]:
        """Shapes compiled while serving, by kind, read from the log up to monotonic time `t`."""
        with self.lock:
            out: dict[str, int] = {}
            for when, kind in self.serving_events:
                if when <= t:
                    out[kind] = out.get(kind, 0) + 1
            return out

    def project(self, now: float):
        if self.tracker is None:
            return None
        with self.lock:
            return self.tracker.project(now / self.scale)

    def read(self, fn):
        with self.lock:
            return fn(self.watcher)


def _serving_event(ev) -> str | None:
    """A log event that says a shape was compiled while serving (the counts of _observe), or None."""
    if isinstance(ev, NotWarmedUp):
        return "not_warmed_up"
    if isinstance(ev, BucketNotPrepared):
        return "buckets_not_prepared"
    if isinstance(ev, StepGraphCompilation) and ev.compilations > 0:
        return "compile_steps"
    return None


LOAD_RERUNS_AFTER_PAUSE = 1  # a load test paused again after its rerun: the configuration waits for a new boot


def run_trial(ctx: TrialContext, settings: TrialSettings, trial_dir: Path, slot: Slot | None = None,
              stop_event: threading.Event | None = None) -> TrialResult:
    """Run one trial; always returns a classified result and never leaves a process behind."""
    phases = _TrialRun(ctx, settings, trial_dir, slot or Slot(), stop_event)
    rejected = phases.check_before_boot()
    if rejected is not None:
        return rejected
    with ServerProcess(records_dir=ctx.records_dir, on_line=phases.watch.on_line) as srv:
        outcome = phases.boot(srv)
        if phases.paused_while_booting(outcome):
            pass  # the tuner was stopped and resumed: nothing this boot showed is the configuration's alone
        elif outcome.ok:
            phases.measure(srv)
        else:
            phases.classify_failure(srv, outcome)
        phases.stop(srv)
    return phases.finish(srv, outcome)


class _TrialRun:
    """The phases of one trial, in order: check_before_boot, boot, measure (or classify_failure), stop,
    finish. Each phase fills the trial's one TrialResult."""

    def __init__(self, ctx: TrialContext, settings: TrialSettings, trial_dir: Path, slot: Slot,
                 stop_event: threading.Event | None):
        self.ctx, self.settings, self.trial_dir, self.slot, self.stop_event = ctx, settings, trial_dir, slot, stop_event
        trial_dir.mkdir(parents=True, exist_ok=True)
        self.t0 = time.monotonic()
        self.tp = predict_calibrated(ctx, settings)
        self.base = dict(params=settings.params, server=settings.server, env=redact_env(settings.env))
        self.measured_ctx = ctx  # the context whose load the metrics were measured under (a sweep's point)
        self.shared = ctx.warmup.shared if ctx.warmup is not None else None
        self.cache_before = None

    # ------------------------------------------------------------------------------------- phases
    def check_before_boot(self) -> TrialResult | None:
        """A rejection that costs no boot (the model's confident refusal), or None: boot it."""
        ctx, settings, tp = self.ctx, self.settings, self.tp
        self.predicted, rejected = pre_boot_check(ctx, settings, tp)
        if rejected is None and ctx.warmup is not None and ctx.preboot_reject:
            from ..recipecache.warmupmode import cached_budget_rejection

            refused = cached_budget_rejection(ctx, settings, tp)
            if refused is not None:
                rejected = TrialResult(status=refused[0], reason=refused[1], predicted=self.predicted)
        if rejected is not None:
            rejected.__dict__.update(self.base)
            rejected.timings = {"total_s": round(time.monotonic() - self.t0, 3)}
            return rejected
        backend = ctx.backend
        self.scale = backend.startup_scale  # boot and warmup run at the startup time scale
        self.port = find_free_port(ctx.host)
        self.argv = backend.argv(settings.server, ctx.host, self.port)
        self.base_url = f"http://{ctx.host}:{self.port}"
        self.log_path = self.trial_dir / "server.log"
        self.tracker = BootTracker(tp.calibrated if tp else None, spread=ctx.calibration.warmup_spread()
                                   if ctx.calibration else 0.15)
        self.watch = _SafeWatcher(expect_graphs=bool(self.predicted.get("prompt_graphs")), tracker=self.tracker,
                                  scale=self.scale)
        self.result = TrialResult(status=TrialStatus.OK, predicted=self.predicted, argv=redact_argv(self.argv),
                                  booted=True, artifacts={"server_log": str(self.log_path)}, **self.base)
        return None

    def boot(self, srv: ServerProcess):
        """Start the server and wait until it serves, watching the warm-up (and aborting it over budget)."""
        ctx, limits, scale = self.ctx, self.ctx.limits, self.scale
        self.srv = srv
        _slot_status(ctx, self.slot, f"booting {ctx.backend.kind} on port {self.port}")
        env = server_environment(self.settings, self.slot, ctx.backend, ctx.release)
        if self.shared is not None:  # tune --shared-recipe-cache: the study's recipes, never exported
            env.update(self.shared.env(self.settings.server))
            self.cache_before = self.shared.snapshot(self.settings.server)
        self.t_boot = time.monotonic()
        srv.start(self.argv, env, self.log_path, port=self.port)
        self.tracker.started_at = (srv.started_at or time.monotonic()) / scale
        outcome = srv.wait_ready(
            self.base_url,
            boot_timeout_s=limits.boot_timeout_s * scale + limits.wall_slack_s,
            warmup_timeout_s=limits.warmup_timeout_s * scale + limits.wall_slack_s,
            warmup_started=self._warmup_started,
            should_abort=self._should_abort,
            oom_seen=lambda: self.watch.read(lambda w: w.oom_seen),
        )
        self.t_ready = time.monotonic()
        self.result.timings["boot_and_warmup_s"] = round(self.t_ready - self.t0, 3)
        first = self.watch.first_line_at
        if first is not None and scale != 1.0:  # real seconds inside it (vocabulary/cost.py device_seconds)
            self.result.timings["before_first_line_s"] = round(first - self.t0, 3)
        return outcome

    def paused_while_booting(self, outcome) -> bool:
        """The tuner was stopped and resumed (serve/pauses.py) while the server booted: its warm-up figure, or
        a timeout or budget abort, took the pause for the configuration's. Measured again (requeued) unless
        the boot failed on its own (out of memory, an exit)."""
        paused = pause_clock().paused_s(self.t_boot, self.t_ready)
        if paused < MIN_PAUSE_S or outcome.kind in (OutcomeKind.WARMUP_OOM, OutcomeKind.BOOT_FAILURE,
                                                     OutcomeKind.PORT_IN_USE):
            return False
        self.result.observed["paused_s"] = {"boot": round(paused, 1)}
        self.result.status = TrialStatus.INTERRUPTED
        what = "warm-up time" if outcome.ok else outcome.kind.value.replace("_", " ")
        self.result.reason = (f"the tuner was stopped for {paused:.0f} s while the server booted (Ctrl-Z, kill -STOP "
                              f"or a scheduler's suspend, then resumed): its {what} is not the configuration's; "
                              "measured again")
        return True

    def classify_failure(self, srv: ServerProcess, outcome) -> None:
        result = self.result
        result.status = TrialStatus.from_outcome(outcome.kind)
        if outcome.kind is OutcomeKind.BOOT_FAILURE and srv.warmup_started_at is not None:
            result.status = TrialStatus.CRASH  # it got as far as warmup: not a launch problem
        if outcome.kind is OutcomeKind.WARMUP_OVER_BUDGET and outcome.reason == "interrupted":
            result.status = TrialStatus.INTERRUPTED
        result.reason = outcome.reason + _last_error(outcome.log_tail)
        if _stopping(self.stop_event) and result.status is not TrialStatus.INTERRUPTED:
            # The tuner is being stopped (a second signal kills the group): not the configuration's doing.
            result.status, result.reason = TrialStatus.INTERRUPTED, f"interrupted ({outcome.reason})"

    def measure(self, srv: ServerProcess) -> None:
        """The warm pass and the load test (or a sweep of load points); a server that died meanwhile."""
        ctx, result, watch = self.ctx, self.result, self.watch
        if not ctx.measure_load:
            _slot_status(ctx, self.slot, "ready; warmup measured, no load test")
            return
        _slot_status(ctx, self.slot, "ready; load test")
        run_load = _unpaused(_priced(_run_load, ctx.cost, cards(self.argv, self.settings.server)), ctx.say)
        if ctx.load_sweep is not None:  # the serving prediction below is for the chosen point's load
            chosen = ctx.load_sweep.run(ctx, srv, self.base_url, self.trial_dir, result, watch, self.stop_event,
                                        self.slot, run_load)
            self.measured_ctx = ctx_with_load(ctx, chosen)
        else:
            run_load(ctx, srv, self.base_url, self.trial_dir, result, watch, self.stop_event, self.slot)
            self.more_runs(srv)
        ended = srv.check(lambda: watch.read(lambda w: w.oom_seen))
        if ended is not None and result.status in (TrialStatus.OK, TrialStatus.LOAD_ERRORS):
            # Died during (or right after) the load test: its requests failed because of that.
            result.status = TrialStatus.RUNTIME_OOM if watch.read(lambda w: w.oom_seen) else TrialStatus.CRASH
            result.reason = ended.reason + _last_error(ended.log_tail)

    def more_runs(self, srv: ServerProcess) -> None:
        """ctx.again: more load runs on this boot, each with fresh prompts (another workload seed), while it
        asks; each run's figures and seconds go to observed["same_boot_runs"] (not into this result's)."""
        ctx, result = self.ctx, self.result
        runs: list[dict] = []
        while (ctx.again is not None and result.ok and not _stopping(self.stop_event)
               and srv.check(lambda: self.watch.read(lambda w: w.oom_seen)) is None
               and ctx.again([result.metrics] + [r["metrics"] for r in runs])):
            seed = int(getattr(ctx.workload, "seed", 0)) + 1 + len(runs)
            extra = TrialResult(status=TrialStatus.OK)
            where = self.trial_dir / f"load-run-{len(runs) + 2}"
            where.mkdir(parents=True, exist_ok=True)
            t0 = time.monotonic()
            run_load = _unpaused(_priced(_run_load, ctx.cost, cards(self.argv, self.settings.server)), ctx.say)
            run_load(replace(ctx, workload=replace(ctx.workload, seed=seed)), srv, self.base_url, where, extra,
                     self.watch, self.stop_event, self.slot)
            if not extra.ok:
                break
            runs.append({"metrics": extra.metrics, "seed": seed, "load_s": round(time.monotonic() - t0, 3)})
        if runs:
            result.observed["same_boot_runs"] = runs

    def stop(self, srv: ServerProcess) -> None:
        extra = sum(r["load_s"] for r in self.result.observed.get("same_boot_runs") or [])  # their own records
        self.result.timings["load_s"] = round(time.monotonic() - self.t_ready - extra, 3)
        limits = self.ctx.limits
        g = min(limits.stop_grace_s, limits.interrupt_grace_s) if _stopping(self.stop_event) else limits.stop_grace_s
        srv.stop(grace_int_s=g, grace_term_s=g, grace_kill_s=5.0)

    def finish(self, srv: ServerProcess, outcome) -> TrialResult:
        """What the stopped server showed: its log's figures, the model's check, both warm-up figures."""
        ctx, result, watch = self.ctx, self.result, self.watch
        stop = srv.stop_report
        if stop is not None:
            result.observed["stop"] = {"ended_by": stop.ended_by, "exit_code": stop.exit_code,
                                       "leftover": stop.leftover, "elapsed_s": round(stop.elapsed_s, 2),
                                       "first_signal_s": stop.first_signal_s}
        _observe(result, watch, self.scale, self.t_ready - (srv.started_at or self.t0), outcome.ok)
        if self.tp is not None:
            record_model_check(self.measured_ctx, result, self.tp, watch.read(lambda w: self.tracker.facts()))
        if ctx.warmup is not None:
            from ..recipecache.prepare import shapes_compiled
            from ..recipecache.warmupmode import finish_trial

            hit_rate = None
            if self.shared is not None:
                hit_rate = self.shared.hit_rate(self.settings.server, self.cache_before,
                                                shapes_compiled(watch.read(lambda w: w.summary()).warmup_steps))
                for note in self.shared.take_notes():
                    ctx.say(note)
            finish_trial(ctx, self.settings, result, self.tp, hit_rate)
        result.timings["total_s"] = round(time.monotonic() - self.t0, 3)
        return result

    # ---------------------------------------------------------------------------- the boot's watch
    def _warmup_started(self) -> bool:
        return self.watch.read(lambda w: w.progress() is not None or w.stage != "startup")

    def _should_abort(self) -> str | None:
        ctx, watch, scale = self.ctx, self.watch, self.scale
        if self.stop_event is not None and self.stop_event.is_set():
            return "interrupted"
        proj = watch.project(time.monotonic())
        if ctx.on_progress is not None:
            prog, eta = watch.read(lambda w: (w.progress(), w.projected_remaining_s()))
            if proj is not None:
                eta = max(0.0, proj.total_s - proj.elapsed_s) * scale
            if prog is not None:
                ctx.on_progress(self.slot.index, f"warmup {prog[0]}", prog[1], prog[2], eta)
        budget = ctx.limits.warmup_budget_s
        if budget is None:
            return None
        if proj is not None:  # the known bucket list at this boot's own pace: abort when surely over
            return warmup_abort_reason(proj, budget)
        # No prediction to place the steps in (another backend, an unexpected list): the early pace.
        remaining = watch.read(lambda w: w.projected_remaining_s())
        started = self.srv.warmup_started_at
        if remaining is None or started is None:
            return None
        projected = (time.monotonic() - started + remaining) / scale
        if projected > budget * 1.1:  # 10% slack: early pace estimates are noisy
            return f"projected warmup {above(projected, budget)} s exceeds the budget of {budget:g} s"
        return None


def _stopping(stop_event: threading.Event | None) -> bool:
    return stop_event is not None and stop_event.is_set()


def _stopped_by_user(stop_event) -> bool:
    """The tuner is being stopped (a load sweep's guard also stops at its own deadline: not this)."""
    user_stop = getattr(stop_event, "user_stop", None)
    return user_stop() if user_stop is not None else _stopping(stop_event)


def ctx_with_load(ctx: TrialContext, load: LoadOptions | None) -> TrialContext:
    """The context with another load (a sweep's chosen point); unchanged for None."""
    return ctx if load is None else replace(ctx, load=load)


def _unpaused(run_load, say):
    """`run_load` run again on the same boot when the tuner was stopped and resumed during it (serve/pauses.py:
    its latencies would hold the pause); the second run's first window is no longer the first after ready, so
    its first-run figures are dropped. Paused again: interrupted, measured again on a new boot (requeued).
    Every load test of a trial goes through it: the single one, each point of a sweep, each same-boot run."""

    def unpaused(ctx, srv, base_url, trial_dir, result, watch, stop_event, slot) -> None:
        paused_total = 0.0
        for attempt in range(1 + LOAD_RERUNS_AFTER_PAUSE):
            t_load = time.monotonic()
            run_load(ctx, srv, base_url, trial_dir, result, watch, stop_event, slot)
            paused = pause_clock().paused_s(t_load, time.monotonic())
            if paused < MIN_PAUSE_S or result.status is TrialStatus.INTERRUPTED:
                break
            paused_total += paused
            result.observed["paused_s"] = {"load": round(paused_total, 1), "load_runs": attempt + 2}
            if attempt == LOAD_RERUNS_AFTER_PAUSE or _stopping(stop_event) \
                    or srv.check(lambda: watch.read(lambda w: w.oom_seen)) is not None:
                result.status = TrialStatus.INTERRUPTED
                result.reason = (f"the tuner was stopped for {paused_total:.0f} s during the load tests (Ctrl-Z, kill "
                                 "-STOP or a scheduler's suspend, then resumed): measured again")
                return
            say(f"the tuner was stopped for {paused:.0f} s during the load test: its latencies hold the pause; "
                "running it again on the same server")
            result.status, result.reason, result.metrics = TrialStatus.OK, "", {}
        if paused_total:  # the rerun's warm pass met a warm server: no first-run figure of this boot is left
            for key in [k for k in result.metrics if k.startswith(FIRST_RUN_PREFIXES)]:
                del result.metrics[key]
            for key in [k for k in result.observed if k.startswith("first_run_")]:
                del result.observed[key]
            result.observed["first_run_unmeasured"] = "the tuner was paused during the load test"

    return unpaused


def _priced(run_load, rate: CostRate | None, n_cards: int):
    """`run_load` that also writes the measured load's cost per million output tokens into the metrics, so
    that `--slo cost_per_mtok=...` is a limit like any other (and a load sweep's points are chosen by it)."""
    if rate is None:
        return run_load

    def priced(ctx, srv, base_url, trial_dir, result, *rest) -> None:
        run_load(ctx, srv, base_url, trial_dir, result, *rest)
        value = per_mtok(rate, n_cards, result.metrics.get("output_throughput"))
        if value is not None:
            result.metrics[COST_METRIC] = round(value, 6)

    return priced


def _run_load(ctx, srv, base_url, trial_dir, result, watch, stop_event, slot) -> None:
    lo = ctx.load

    async def main():
        bench = asyncio.ensure_future(run_benchmark(
            base_url, ctx.backend.api_model_name, ctx.workload,
            max_concurrency=lo.max_concurrency, request_rate=lo.request_rate, burstiness=lo.burstiness,
            warmup_requests=lo.warmup_requests, goodput_slos=lo.goodput_slos, percentiles=lo.percentiles,
            percentile_metrics=lo.percentile_metrics, progress=False,
            on_request_done=(None if ctx.on_progress is None else
                             lambda done, total: ctx.on_progress(slot.index, "load test", done, total, None)),
            request_timeout_s=lo.request_timeout_s * ctx.backend.time_scale + ctx.limits.wall_slack_s,
            time_scale=ctx.backend.time_scale,  # rates and goodput SLOs are in the server's own time
            # images go in chat requests, as `vllm bench serve --backend openai-chat` sends them
            **({"api": "openai-chat"} if ctx.workload.image_count() else {}),
        ))
        # Watchdog: a crashed server or a Ctrl-C ends the load test now, with its streams closed.
        while not bench.done():
            await asyncio.wait({bench}, timeout=0.5)
            if bench.done():
                break
            crashed = srv.check(lambda: watch.read(lambda w: w.oom_seen))
            if crashed is not None or _stopping(stop_event):
                bench.cancel()
                await asyncio.gather(bench, return_exceptions=True)
                return None if _stopped_by_user(stop_event) else crashed  # a hurried stop kills the server
        return bench.result()

    outcome = asyncio.run(main())
    if outcome is None or not hasattr(outcome, "to_json"):
        if outcome is None:
            result.status, result.reason = TrialStatus.INTERRUPTED, "interrupted during the load test"
        else:
            oom = watch.read(lambda w: w.oom_seen)
            result.status = TrialStatus.RUNTIME_OOM if oom else TrialStatus.CRASH
            result.reason = outcome.reason + _last_error(outcome.log_tail)
        return
    bench_json = rescale_time(outcome.to_json(detailed=True), ctx.backend.time_scale)
    bench_path = trial_dir / "bench.json"
    bench_path.write_text(json.dumps(bench_json))
    result.artifacts["bench_json"] = str(bench_path)
    result.metrics = {k: v for k, v in bench_json.items() if not isinstance(v, (list, dict))}
    record_first_run(result, bench_json.get("tuner_first_run") or {}, watch)
    failed = bench_json.get("failed", 0)
    if failed:
        # The server's own messages, most frequent first: "40 x server error: Token id 7000 is ..."
        groups = bench_json.get("tuner_failures", {}).get("by_message") or []
        said = "; ".join(f"{g['count']} x {g['message']}" for g in groups[:3])
        more = f"; and {len(groups) - 3} more distinct errors" if len(groups) > 3 else ""
        result.status = TrialStatus.LOAD_ERRORS
        result.reason = f"{failed} of {bench_json.get('num_prompts')} requests failed: {said}{more}"
        setup = setup_failure(groups, failed, bench_json.get("num_prompts"))
        if setup:
            result.observed["setup_failure"] = setup


# What every request failing with one of these says: the server, its model or its key, not the trial's settings
# (which only size buckets and memory); every other configuration would fail alike.
_SETUP_REMEDY = (
    (NO_GENERATING_API, "the server serves a pooling model, which vLLM gives no generating API: bucket-tuner tune "
                          "measures generating models; load this one with `bucket-tuner bench --backend "
                          "openai-embeddings` (or vllm-pooling, vllm-rerank)"),
    ("does not exist", "the server does not serve the model the requests name: check --model and "
                       "--served-model-name"),
    ("HTTP 401", "the server requires an API key: set OPENAI_API_KEY (and VLLM_API_KEY for the server)"),
    ("HTTP 403", "the server refused the API key: check OPENAI_API_KEY"),
    ("HTTP 404", "the server has no such route for the requests: check the server's API and --server-args"),
)


def setup_failure(groups: list[dict], failed: int, sent: int | None) -> str | None:
    """Why a trial whose every request failed with a refusal of the server's setup (HTTP 401, 403, 404) failed,
    and what to do; None when any request got through or another failure is among them."""
    if not groups or not sent or failed < sent:
        return None
    messages = [g["message"] for g in groups]
    if not all(m.startswith(("HTTP 401", "HTTP 403", "HTTP 404")) for m in messages):
        return None
    return next(remedy for key, remedy in _SETUP_REMEDY if key in messages[0])


def record_first_run(result: TrialResult, first: dict, watch: _SafeWatcher) -> None:
    """The first-run window's figures (tuner/load/firstrun.py) into the trial's metrics (first_* / warm_*:
    what --slo first_p99_ttft_ms limits), its penalties and the shapes compiled in it into observed."""
    if not first:
        return
    result.metrics.update({k: v for k, v in first.items() if k.startswith(FIRST_RUN_PREFIXES)})
    obs = result.observed
    obs["first_run_window"] = first.get("window")
    obs["first_run_tail"] = first.get("tail")
    for key in ("penalty_tail_ttft", "penalty_median_ttft", "penalty_output_throughput"):
        value = first.get(key)
        obs[f"first_run_{key}"] = None if value is None else round(value, 4)
    end = first.get("window_end_perf_counter")
    if end is not None:  # the client's clock to the log reader's (both monotonic, different origins)
        events = watch.events_until(end + time.monotonic() - time.perf_counter())
        obs["first_run_not_warmed_up"] = events.get("not_warmed_up", 0)
        obs["first_run_buckets_not_prepared"] = events.get("buckets_not_prepared", 0)
        obs["first_run_compile_steps"] = events.get("compile_steps", 0)


def _observe(result: TrialResult, watch: _SafeWatcher, scale: float, ready_after_s: float, ready: bool):
    s = watch.read(lambda w: w.summary())
    obs = result.observed
    if s.prompt_buckets is not None or "prompt" in s.generated:
        obs["prompt_buckets"] = s.generated["prompt"].count
    if "decode" in s.generated:
        obs["decode_buckets"] = s.generated["decode"].count
    if s.hpu_blocks is not None:
        obs["kv_blocks"] = s.hpu_blocks
    if s.engine_version:  # the second witness of the release `--release auto` read off the node
        obs["engine_version"] = s.engine_version
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
    card = watch.card_gib
    if card is not None:  # the node as the server sees it, whatever the study was told (--device)
        obs["device_memory_gib"] = card
        if (seen := device_of_memory(card)) is not None:
            obs["device_seen"] = seen
    images = image_recompiles(s)
    if images is not None:
        obs["image_recompiles"] = images
    obs["buckets_not_prepared"] = len(s.buckets_not_prepared)
    obs["preemptions"] = s.preemptions
    # The fork's per-step compilation log (set by server_environment where the release has it)
    obs["compile_steps_under_load"] = s.compile_steps_under_load
    obs["compilations_under_load"] = s.compilations_under_load
    if s.oom is not None:
        obs["oom_stage"] = s.oom_stage
        if result.status == TrialStatus.CRASH and s.oom_stage in ("ready", "serving"):
            result.status = TrialStatus.RUNTIME_OOM


def image_recompiles(s) -> dict[str, int] | None:
    """Vision-encoder recompiles per image bucket ("3520 patches", "4 images") from the log's
    `Configuration: ('multimodal', images, patches) was not warmed-up!` lines; None for a server that
    shows neither a multimodal warm-up nor such a line (a text model)."""
    mm = [e for e in s.not_warmed_up if e.phase == "multimodal" and len(e.shape) == 2]
    if not mm and not any(k.endswith("multimodal") for k in s.warmup_steps):
        return None
    out: dict[str, int] = {}
    for e in mm:
        images, patches = e.shape
        label = f"{patches} patches" if images == 1 else f"{images} images"
        out[label] = out.get(label, 0) + 1
    return out


def warmup_abort_reason(proj, budget: float) -> str | None:
    """Abort when even the projection's lower bound is over the budget, or the warmup already is."""
    if proj.elapsed_s > budget:
        return f"warmup has run {above(proj.elapsed_s, budget)} s, over the budget of {budget:g} s"
    if proj.low_s > budget:
        return (f"projected warmup {proj.total_s:.0f} s (at least {above(proj.low_s, budget)} s after "
                f"{proj.steps_done} of {proj.steps_total} steps) exceeds the budget of {budget:g} s")
    return None


def record_model_check(ctx: TrialContext, result: TrialResult, tp: TrialPrediction, facts: dict) -> None:
    """Predicted vs observed for the record, and this boot's calibration sample (prior vs observed)."""
    obs = result.observed
    for key in ("load_s", "profile_s", "free_gib", "graph_mem_gib"):
        if facts.get(key) is not None:
            obs[key] = round(facts[key], 4)
    graphs = [obs[k] for k in ("prompt_graphs", "decode_graphs") if obs.get(k) is not None]
    observed = {**facts, "kv_blocks": obs.get("kv_blocks"), "graphs": sum(graphs) if graphs else None,
                "median_tpot_ms": result.metrics.get("median_tpot_ms") if result.ok else None}
    prior = tp.prior_facts(observed)  # its steps at the boot's own memory: the same buckets on both sides
    if result.ok and ctx.predict_serving and tp.prior.failure is None:
        prior["median_tpot_ms"] = predict_serving(ctx, tp.prior).get("median_tpot_ms")
        result.predicted.update({k: round(v, 3) for k, v in predict_serving(ctx, tp.calibrated).items()})
    result.calibration_sample = {k: round(v, 5) for k, v in observation_sample(prior, observed).items()}


def _last_error(tail: list[str]) -> str:
    text = last_error(tail or [])  # an ERROR line or a traceback, never a warning that quotes one
    return f" | last error: {text[-300:]}" if text else ""


def _slot_status(ctx: TrialContext, slot: Slot, text: str) -> None:
    """A slot's stage: on its progress bar when there is one, else as a status line."""
    if ctx.on_progress is not None:
        ctx.on_progress(slot.index, text, 0, 0, None)
    else:
        ctx.say(f"slot {slot.index}: {text}")
