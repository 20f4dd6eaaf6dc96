"""The Optuna study run, phase by phase: open it, recover what a dead tuner left, describe the setup,
seed, screen and guide, calibrate, run the slots, confirm the picks (--confirm), and the summary (run_study).

What a study is asked for and how it opens: options.py; its seeds: seeding.py; the slots' loop over
trials: loop.py; how a result is told to Optuna and what counts toward the budget: tell.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict

import optuna
from optuna.trial import TrialState

from ..space.fitted import bind_fitted
from ..space.schema import SearchSpace
from ..trial import run as trial_mod
from ..trial.run import TrialContext, TrialResult
from ..vocabulary.record import TrialRecord
from . import nodes, optuna_private
from .confirmrun import confirm_study
from .loop import StudyLoop, StudyRun
from .options import Constraints, Objectives, StudyOptions, open_study
from .proposals import Guide
from .question import check_question, question_of
from .screen import SEED_ATTR, Screen, refresh_calibration, seed_calibration
from .seeding import enqueue_model_seeds, enqueue_seeds


def run_study(opts: StudyOptions, space: SearchSpace, ctx: TrialContext, objectives: Objectives,
              constraints: Constraints, on_trial: Callable[[int, TrialResult], None] | None = None,
              install_sigint: bool = True, runner: Callable[..., TrialResult] | None = None) -> StudyRun:
    """Run trials on every slot until the study holds n_trials finished trials, the timeout passes,
    or a signal (Ctrl-C, SIGTERM, SIGHUP: tuner/study/interrupt.py). A second signal kills the servers
    at once (the trials are still recorded); a third leaves without recording.

    `runner(ctx, settings, trial_dir, slot, stop_event) -> TrialResult` runs one trial; the default
    boots a server (trial.run_trial). The tuning-efficiency benchmark passes a virtual-clock runner
    so that the same study loop, seeding and scoring are what it measures."""
    runner = runner or trial_mod.run_trial
    study = open_study(opts, space, objectives)
    check_question(study, question_of(ctx, objectives, constraints), opts.name)  # one study, one question
    bind_fitted(space, ctx, opts.study_dir)  # fitted bucket sets: placed on the study's workload
    owner, notes = _recover_leftovers(study, opts, ctx)
    _describe_setup(study, space, ctx, constraints)
    seeds = _seed(study, opts, space, ctx, notes)
    screen = Screen(study, ctx, opts.remeasure, opts.screening, opts.seed)
    guide = Guide(study, space, ctx, objectives, screen, opts.seed,  # the calibrated model's proposals
                  proposes=opts.sampler != "grid")
    screen.use_guide(guide)  # ... and what they predict dominated is screened before boot
    _calibrate(study, opts, ctx, notes)
    for line in notes + [f"seeded: {s}" for s in seeds]:
        ctx.say(line)
    loop = StudyLoop(opts, space, ctx, objectives, constraints, StudyRun(study=study, seeds=seeds, notes=notes),
                     screen, guide, owner, on_trial, runner)
    loop.run_slots(install_sigint, then=lambda: confirm_study(loop))  # tune --confirm, once the search ends
    return loop.summary()


def _recover_leftovers(study: optuna.Study, opts: StudyOptions, ctx: TrialContext) -> tuple[dict, list[str]]:
    """(this tuner's identity, notes): server groups an earlier run left are stopped; trials left running
    by a tuner that died, here or on another node, are failed and enqueued again."""
    from ..serve.process import cleanup_stale_groups
    from ..serve.procgroup import process_identity

    records = opts.study_dir / "run"
    ctx.records_dir = records
    notes = [f"stopped a server group left by an earlier run: pgid {g}" for g in cleanup_stale_groups(records)]
    notes += [f"trial {n} was left running by a tuner that died: failed and enqueued again"
              for n in recover_orphans(study)]
    owner = process_identity()
    notes += [f"trial {n} lost its tuner on another node (no heartbeat): failed and enqueued again"
              for n in nodes.fail_stale_trials(study, owner)]
    return owner, notes


def recover_orphans(study: optuna.Study) -> list[int]:
    """RUNNING trials whose tuner died on this host: failed and their parameters enqueued again now.

    Trials of tuners on other hosts (a shared PostgreSQL study) are left to the heartbeat: every
    node fails and re-enqueues them once their heartbeat is older than the grace (nodes.py).
    """
    from ..serve.procgroup import identity_alive

    recovered = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = t.system_attrs.get("tuner_owner") or TrialRecord.from_frozen(t).owner
        if owner and identity_alive(owner) is False:
            optuna_private.fail_trial_of_dead_tuner(study, t, {"status": "tuner_died", "requeued": True},
                                                    {"tuner_recovered": True})
            study.enqueue_trial(t.params, user_attrs={"requeued_from": t.number, **nodes.requeue_attrs(t)})
            recovered.append(t.number)
    return recovered


def _describe_setup(study: optuna.Study, space: SearchSpace, ctx: TrialContext, constraints: Constraints) -> None:
    """What the report and export name: the space and release, how the release was found, the backend, the limits."""
    study.set_user_attr("space", {"name": space.name, "source": space.source, "release": ctx.release})
    if ctx.release_detection:  # tune --release auto: the profile read off the node, and why
        study.set_user_attr("release_detection", ctx.release_detection)
    study.set_user_attr("backend", ctx.backend.describe())
    if ctx.device_model is not None:  # what the predictions assume; the report compares it with the boots' logs
        study.set_user_attr("device_model", asdict(ctx.device_model))
    study.set_user_attr("constraints", asdict(constraints))  # the limits, for the report and export to name
    if ctx.cost is not None:  # tune --cost-per-hour: the price report and export use unless given another
        study.set_user_attr("cost", ctx.cost.to_json())


def _seed(study: optuna.Study, opts: StudyOptions, space: SearchSpace, ctx: TrialContext,
          notes: list[str]) -> list[str]:
    """The seeds enqueued on a new study (enqueue_seeds, then the model's), for the log; a note when
    --baseline / --from-plan come too late for this study."""
    fresh_study = not study.trials
    seeds = enqueue_seeds(study, opts, space, ctx.release, ctx.workload.describe(), ctx.load.max_concurrency)
    if not fresh_study and (opts.baseline is not None or opts.plan_seeds):
        notes.append("--baseline / --from-plan: this study already has trials, so nothing was enqueued (they "
                     "seed a new study)")
    return seeds + enqueue_model_seeds(study, opts, space, ctx, fresh=bool(seeds))


def _calibrate(study: optuna.Study, opts: StudyOptions, ctx: TrialContext, notes: list[str]) -> None:
    """Logs of past boots (--calibrate-from) join the study's calibration once; the fit in force goes to ctx."""
    known = study.user_attrs.get(SEED_ATTR) or []
    fresh_logs = [x for x in opts.calibration_seeds if x not in known]  # a re-run adds nothing twice
    if fresh_logs:
        seed_calibration(study, fresh_logs)
        notes.append(f"calibration: {len(fresh_logs)} log(s) of past boots added")
    refresh_calibration(study, ctx)
