"""The slots' loop over one study: each slot asks a trial, takes it through its phases and tells it,
until the budget, the timeout or a signal ends the run (StudyLoop); what the run ended with (StudyRun).
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.trial import TrialState

from ..serve.pauses import pause_clock
from ..serve.redact import redact_env
from ..space.fitted import pin_to_trial
from ..space.schema import SearchSpace, TrialSettings
from ..trial.run import Slot, TrialContext, TrialResult
from ..vocabulary.errors import RuntimeFailure, StorageUnavailable
from ..vocabulary.errors.disk import (
    DISK_ERRNOS,
    DiskError,
    disk_error,
    is_disk_failure,
    require_space,
    write_text,
    writing,
)
from ..vocabulary.record import OWNER
from ..vocabulary.status import TrialStatus
from . import nodes, optuna_private
from .dashboard import TrialDashboard
from .interrupt import Interrupt
from .options import Constraints, Objectives, StudyOptions
from .proposals import Guide
from .screen import Screen, effective_key, refresh_calibration
from .seeding import trial_settings
from .storage import write_failure
from .tell import counted, tell_result

ELSEWHERE = "--results DIR"  # where else a study's files can go, said when its disk refuses them


@dataclass
class StudyRun:
    """What a study's run ended with (run_study returns it, and so does tuner.tune)."""

    study: optuna.Study
    ran: int = 0
    interrupted: bool = False
    signal: str | None = None  # what interrupted it: SIGINT, SIGTERM or SIGHUP
    exit_status: int = 0  # 128 + the signal's number once interrupted
    interrupted_trials: list[int] = field(default_factory=list)  # recorded interrupted, enqueued again
    seeds: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    study_dir: Path | None = None  # where its report, trials.csv and best.env are


class StudyLoop:
    """The slots' loop over one study, phase by phase: ask_trial, claim_or_wait (the same configuration
    running elsewhere), screen (told without a boot), run_trial, tell_trial (and write its files); the stop
    conditions (want_more, done_here) and a tuner error (give_up) end it. Optuna is called on a local `study`
    and `trial` (tests/project/test_dependency_bounds.py reads those calls), and no phase takes an Optuna
    method's name. One object serves every slot's thread: what changes per trial travels in arguments,
    what is shared is guarded by `lock`."""

    def __init__(self, opts: StudyOptions, space: SearchSpace, ctx: TrialContext, objectives: Objectives,
                 constraints: Constraints, run: StudyRun, screen: Screen, guide: Guide, owner: dict,
                 on_trial: Callable[[int, TrialResult], None] | None, runner: Callable[..., TrialResult]):
        self.opts, self.space, self.ctx, self.objectives, self.constraints = opts, space, ctx, objectives, constraints
        self.run, self.study, self.screen, self.guide, self.owner = run, run.study, screen, guide, owner
        self.on_trial, self.runner = on_trial, runner
        self.stop = threading.Event()
        self.device_said = False  # the server's device differed from --device, said once (_check_device)
        self.interrupt = Interrupt(self.stop)  # installed by run_slots, while the slots run
        self.lock = threading.Lock()
        self.ask_lock = nodes.AskLock(optuna_private.storage_of(self.study), nodes.storage_url(opts.storage_url),
                                      opts.name)
        self.errors: list[BaseException] = []
        self.deadline = time.monotonic() + opts.timeout_s if opts.timeout_s else math.inf
        self.reaper = nodes.StaleReaper(self.study, owner, on_failed=lambda n: ctx.say(
            f"trial {n} lost its tuner on another node (no heartbeat): failed and enqueued again"))
        self.dashboard = TrialDashboard(opts.study_dir, ctx.backend)  # notes and artifacts, when installed
        if self.dashboard.missing:
            ctx.say(self.dashboard.missing)

    # ------------------------------------------------------------------------------------ the slots
    def run_slots(self, install_sigint: bool, then: Callable[[], object] | None = None) -> None:
        """A thread per slot, waited for; the signal handlers while they run (main thread only), and a
        second signal hurries every server. `then` (tune --confirm) runs once they end, under the same handlers."""
        threads = [threading.Thread(target=self.slot_loop, args=(slot,), name=f"slot-{slot.index}", daemon=True)
                   for slot in self.opts.slots]
        signals = install_sigint and threading.current_thread() is threading.main_thread()
        if threading.current_thread() is threading.main_thread():
            pause_clock()  # started here, where SIGCONT can be taken: a trial asks it whether the tuner was paused
        try:
            with self.reaper, (self.interrupt if signals else contextlib.nullcontext()):
                for t in threads:
                    t.start()
                for t in threads:
                    while t.is_alive():
                        t.join(0.2)
                        if self.interrupt.hurry_due():  # a second signal: no grace for the servers any more
                            from ..serve.process import hurry_all

                            hurry_all()
                if then is not None:
                    then()
        finally:
            self.stop.set()

    def summary(self) -> StudyRun:
        """The run as it ended: the signal that stopped it; the first error a slot met is raised."""
        run, interrupt = self.run, self.interrupt
        if interrupt.signum is not None:
            run.interrupted, run.signal, run.exit_status = True, interrupt.name, 128 + interrupt.signum
        if self.errors:
            raise self.errors[0]
        return run

    def slot_loop(self, slot: Slot) -> None:
        """Ask, then take the trial through its phases; with nothing to ask, wait while another node's
        running trial may still fail and come back."""
        while True:
            asked = self.ask_trial()
            if asked is None:
                if self.done_here():
                    return
                self.stop.wait(self.reaper.interval or 1.0)
                continue
            trial, heartbeat = asked
            try:
                self.run_one(trial, heartbeat, slot)
            except optuna.exceptions.UpdateFinishedTrialError:
                # Our heartbeat went silent too long (a storage outage) and another node failed the
                # trial and enqueued its parameters again: its result files stay, go on.
                self.ctx.say(f"trial {trial.number} was failed meanwhile by another node "
                                      "(heartbeat missed); its parameters run again")
            except BaseException as exc:
                self.give_up(trial, exc)
                return
            finally:
                heartbeat.stop()

    # ------------------------------------------------------------------------------ stop conditions
    def want_more(self) -> bool:
        """No stop, time left, and fewer trials counted (on every node) than --n-trials."""
        return not self.stop.is_set() and time.monotonic() < self.deadline and counted(self.study) < self.opts.n_trials

    def done_here(self) -> bool:
        """Nothing more to ask: done, unless another node's running trial may still fail and come back."""
        return (self.stop.is_set() or time.monotonic() >= self.deadline
                or not nodes.others_running(self.study, self.owner))

    # --------------------------------------------------------------------------------- the phases
    def ask_trial(self) -> tuple[optuna.Trial, nodes.Heartbeat] | None:
        """The next trial and its heartbeat, or None: enough trials, time or a stop."""
        study = self.study
        with self.lock, self.ask_lock:  # count and ask atomically, across nodes too
            if not self.want_more():
                return None
            trial = study.ask()
            trial.set_user_attr(OWNER, self.owner)
            return trial, nodes.Heartbeat(study, trial)  # beats at once: a death is noticed

    def run_one(self, trial: optuna.Trial, heartbeat: nodes.Heartbeat, slot: Slot) -> None:
        """An asked trial: claim or wait, screen, run (unless told without a boot), tell."""
        settings = trial_settings(self.space, trial)
        trial.set_user_attr("slot", slot.index)
        result = self.claim_or_wait(trial, settings)
        if result is None:
            result, run_ctx = self.screen.decide(trial, settings, slot.index)  # a result told without a boot?
        if result is None:
            result, settings = self.run_trial(trial, settings, run_ctx, slot)
        heartbeat.stop()
        self.tell_trial(trial, result, settings)

    def claim_or_wait(self, trial: optuna.Trial, settings: TrialSettings) -> TrialResult | None:
        """Claim the trial's effective settings; when other trials are running them, wait for those to end
        (then None: the screen reuses their result) or for a stop (an interrupted result)."""
        key = effective_key(self.ctx, settings)
        with self.lock, self.ask_lock:  # claims of one configuration are ordered across nodes (screen.claim)
            ahead = self.screen.claim(trial, key)
        return self.screen.wait_for(trial, ahead, self.stop, settings) if ahead else None

    def run_trial(self, trial: optuna.Trial, settings: TrialSettings, run_ctx: TrialContext,
                  slot: Slot) -> tuple[TrialResult, TrialSettings]:
        """Boot and measure (the runner): its result, and the settings it ran with (a fitted set pinned to
        the trial's own copy)."""
        trial_dir = self._trial_dir(trial)
        # A server that cannot write its log fails for no fault of its settings: not booted.
        require_space(self.opts.study_dir, elsewhere=ELSEWHERE)
        settings = pin_to_trial(settings, trial_dir)  # a fitted set boots from its own copy
        result = self.runner(run_ctx, settings, trial_dir, slot, self.stop)
        if not result.ok and not result.status.config_failure:
            require_space(self.opts.study_dir, elsewhere=ELSEWHERE)  # did it fail for want of disk?
        return result, settings

    def tell_trial(self, trial: optuna.Trial, result: TrialResult, settings: TrialSettings) -> None:
        """Write the trial's files, record and tell its result, refit the calibration and let the guide
        propose; a disk that refused the files stops the study once the result is told."""
        if result.status is TrialStatus.INTERRUPTED and self.interrupt.name:
            result.reason = f"{result.reason} ({self.interrupt.name} to the tuner)"
        files_failed = None
        try:
            _write_trial_files(self._trial_dir(trial), result, settings)
        except DiskError as exc:  # the measurement is still told; the study stops after it
            files_failed = exc
        with self.lock:
            self.screen.record(trial, result)
            self._attach(trial, result, settings, files_failed is None)
            tell_result(self.study, trial, result, self.objectives, self.constraints)
            self.dashboard.note(trial, result, self.objectives, self.constraints)
            self.run.ran += 1
            if result.status is TrialStatus.INTERRUPTED:
                self.run.interrupted_trials.append(trial.number)
            if result.calibration_sample:
                refresh_calibration(self.study, self.ctx)
            self.guide.after_tell(result.booted, more=self.want_more())
        if self.on_trial:
            self.on_trial(trial.number, result)
        if files_failed is not None:
            raise files_failed
        self._check_device(trial.number, result)
        setup = result.observed.get("setup_failure")
        if setup:  # every other configuration would fail alike: stop, keeping what was recorded
            self.stop.set()
            self.errors.append(RuntimeFailure(
                f"trial {trial.number}: every request failed the same way, whatever the settings: {setup}. The study "
                f"stops; its trials are kept, and the same command resumes it once this is fixed"))

    def _check_device(self, number: int, result: TrialResult) -> None:
        """Say once when the server's own memory lines show another Gaudi than the study was told (--device):
        its predictions (pre-boot checks, plan, KV blocks) use the figures of the device it was told."""
        told = self.ctx.device_model.device if self.ctx.device_model else None
        seen = result.observed.get("device_seen")
        if self.device_said or told is None or seen is None or seen == told:
            return
        self.device_said = True
        self.ctx.say(f"trial {number}: the server reports {result.observed['device_memory_gib']:g} GiB per card, a "
                     f"{seen}, but the study was told --device {told}: its predictions (pre-boot checks, the "
                     f"model's KV blocks and warm-up) start from {told}'s figures, which the boots then correct; "
                     f"the same command with --device {seen} predicts from {seen}'s")

    def _attach(self, trial: optuna.Trial, result: TrialResult, settings: TrialSettings, files_written: bool) -> None:
        """The trial's files as optuna-dashboard artifacts; a disk that refuses them is said once."""
        if not files_written or self.dashboard.failed:
            return
        self.dashboard.attach(trial, self._trial_dir(trial), result, settings)
        if self.dashboard.failed:
            self.ctx.say(self.dashboard.failed)

    def give_up(self, trial: optuna.Trial, exc: BaseException) -> None:
        """Not a trial outcome (a bad space expression, a storage failure, a bug): keep the record, stop
        every slot, and let the caller see the error."""
        study = self.study
        exc = _explained(exc, self.opts)
        self.errors.append(exc)
        self.stop.set()
        with self.lock, contextlib.suppress(Exception):  # the trial may have been told already
            if is_disk_failure(exc) or isinstance(exc, StorageUnavailable):
                # The disk or the database failed, not the settings: they run again on resume.
                tell_result(study, trial, TrialResult(status=TrialStatus.INTERRUPTED, reason=str(exc)[:500],
                                                      params=dict(trial.params)), self.objectives, self.constraints)
            else:
                trial.set_user_attr("status", "tuner_error")
                trial.set_user_attr("reason", f"{type(exc).__name__}: {exc}"[:500])
                study.tell(trial, state=TrialState.FAIL)

    def _trial_dir(self, trial: optuna.Trial) -> Path:
        return self.opts.study_dir / "trials" / f"{trial.number:04d}"


def _write_trial_files(trial_dir: Path, result: TrialResult, settings: TrialSettings) -> None:
    with writing(trial_dir, ELSEWHERE):
        trial_dir.mkdir(parents=True, exist_ok=True)
    env_path = trial_dir / "trial.env"
    lines = [f"{k}={v}" for k, v in sorted(redact_env(settings.env).items())]
    write_text(env_path, "\n".join(lines) + "\n", ELSEWHERE)
    result.artifacts["env_file"] = str(env_path)
    write_text(trial_dir / "result.json", json.dumps(result.to_json(), indent=2, default=str), ELSEWHERE)


def _explained(exc: BaseException, opts: StudyOptions) -> BaseException:
    """A disk or database failure as one line naming the path and the remedy (the study is intact)."""
    if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS:
        exc = disk_error(exc, opts.study_dir, ELSEWHERE)
    if isinstance(exc, DiskError) and "re-run" not in str(exc):
        return DiskError(f"{exc}; everything recorded so far is kept: re-run the same command to resume", exc.path,
                         exc.errno)
    return write_failure(exc, opts.storage_url) or exc
