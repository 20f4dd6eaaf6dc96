"""With nothing feasible, the closest trial's advice names the limit that excluded it (SLO, warm-up
budget, recompiles, failed requests) with a value past the limit in force, in `tune`/`report` (the
terminal summary) and `export` (its error): never a budget the trial already met."""

from __future__ import annotations

import io
import re
import warnings
from dataclasses import asdict

import optuna
import pytest
from rich.console import Console

from tuner.commands.export import _pick
from tuner.report.facts import closest_admission
from tuner.report.terminal import print_pareto
from tuner.results.export import ExportError, Filters
from tuner.study.options import Constraints, Objectives
from tuner.study.tell import tell_result
from tuner.trial.run import TrialResult, warmup_abort_reason
from tuner.vocabulary.status import TrialStatus

LIMITS = Constraints(slos_ms={"p99_ttft_ms": 3000.0}, warmup_budget_s=600.0)


def _study(*results: tuple[TrialResult, dict]) -> optuna.Study:
    objectives = Objectives()
    study = optuna.create_study(directions=objectives.directions)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(objectives.names)
    study.set_user_attr("constraints", asdict(LIMITS))  # as tuner/study/run.py records them
    for result, attrs in results:
        trial = study.ask()
        for k, v in attrs.items():
            trial.set_user_attr(k, v)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            tell_result(study, trial, result, objectives, LIMITS)
    return study


def _stopped_boot(projected_total: float, low: float, elapsed: float = 40.0) -> tuple[TrialResult, dict]:
    """A boot the live watch stopped: its own pace (a busy machine) projected a warm-up over the budget that
    the prediction (291 s) was well within."""
    class Projection:
        elapsed_s, total_s, low_s, steps_done, steps_total = elapsed, projected_total, low, 6, 40

    reason = warmup_abort_reason(Projection(), LIMITS.warmup_budget_s)
    return (TrialResult(status=TrialStatus.WARMUP_OVER_BUDGET, reason=reason, booted=True,
                        predicted={"warmup_s": 291.0, "warmup_low_s": 240.0}), {"booted": True})


def _slo_miss(p99: float, recompiles: int = 0) -> tuple[TrialResult, dict]:
    return (TrialResult(status=TrialStatus.OK, booted=True, metrics={"output_throughput": 1100.0, "p99_ttft_ms": p99},
                        observed={"warmup_s": 291.0, "not_warmed_up": recompiles}), {"booted": True})


def _screened(predicted: float, low: float) -> tuple[TrialResult, dict]:
    return (TrialResult(status=TrialStatus.WARMUP_OVER_BUDGET, reason="predicted warmup over the budget",
                        predicted={"warmup_s": predicted, "warmup_low_s": low}), {"screened": "rejected"})


def _figures(sentence: str) -> list[tuple[str, float, float]]:
    """(flag, admitting value, limit now) of each change."""
    return [(flag, float(value), float(now)) for flag, value, now in
            re.findall(r"(--\S+?)[ =](?:p99_ttft_ms=)?([\d.]+) \(now ([\d.]+)", sentence)]


def test_a_boot_stopped_at_its_own_pace_is_advised_the_budget_that_pace_needs():
    """The README's study on a busy machine: the prediction (291 s) met the 600 s budget, the live watch
    stopped the boot at a projected 700 s. The advice was '--warmup-budget 292 (now 600; predicted 291 s)'."""
    admit = closest_admission(_study(_stopped_boot(700.0, 650.0)))
    text = admit.sentence()
    assert ("--warmup-budget 700 (now 600; its boot was stopped when its own pace put the warm-up at 700 s; "
            "predicted 291 s)") in text, text
    assert all(value > now for _, value, now in _figures(text)), text
    assert "--warmup-budget 292" not in text


def test_a_boot_stopped_after_running_past_the_budget_is_advised_what_it_had_run():
    admit = closest_admission(_study(_stopped_boot(900.0, 700.0, elapsed=650.4)))
    assert admit.changes[0].startswith("--warmup-budget 650 (now 600; its boot was stopped when its own pace put "
                                       "the warm-up at 650 s")


def test_a_measured_slo_miss_ranks_before_a_trial_that_never_served():
    """One change for an unbooted trial must not outrank the SLO a served trial broke (with a recompile)."""
    study = _study(_screened(640.0, 610.0), _slo_miss(3400.0, recompiles=1), _stopped_boot(700.0, 650.0))
    admit = closest_admission(study)
    assert admit.trial.number == 1 and admit.measured
    assert admit.changes == ["--slo p99_ttft_ms=3400 (now 3000)",
                             "--allow-recompiles (1 shape(s) compiled while serving)"]


def test_a_rejection_before_boot_is_advised_the_predicted_warmup_above_the_budget():
    admit = closest_admission(_study(_screened(640.0, 610.0)))
    assert admit.changes == ["--warmup-budget 640 (now 600; predicted 640 s)"] and not admit.measured


def test_a_record_whose_figures_do_not_exceed_the_limit_is_not_advised_a_limit_it_met():
    """A stopped boot whose reason names no figure over the budget: no advice rather than a wrong one."""
    odd = (TrialResult(status=TrialStatus.WARMUP_OVER_BUDGET, reason="stopped", booted=True,
                       predicted={"warmup_s": 291.0}), {"booted": True})
    assert closest_admission(_study(odd)) is None


def test_tune_report_and_export_say_the_same_advice():
    study = _study(_stopped_boot(700.0, 650.0))
    out = io.StringIO()
    print_pareto(study, Console(file=out, width=200))  # what tune ends with and report prints
    expected = closest_admission(study).sentence()
    assert expected[1:] in out.getvalue()
    with pytest.raises(ExportError) as info:
        _pick(study, "balanced", Filters())
    assert expected in str(info.value)
