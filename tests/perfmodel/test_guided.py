"""The calibrated model's part in a study (tuner/study/proposals.py): proposals near the measured front, and
proposals a measured point beats even at the favourable end of their prediction not booted."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import CategoricalDistribution

from tuner.load.workload import RandomWorkload
from tuner.perfmodel import Corrections
from tuner.perfmodel import target as M
from tuner.perfmodel.calibration import Calibration
from tuner.serve.backends import Backend
from tuner.space.schema import SearchSpace
from tuner.study import screen as measured
from tuner.study.options import COST, Constraints, Objectives
from tuner.study.proposals import Guide, serving_estimate
from tuner.study.screen import Screen
from tuner.study.tell import tell_result
from tuner.trial import run as T
from tuner.trial.cost import CostRate
from tuner.vocabulary.status import TrialStatus

CHOICES = {"max_num_seqs": [8, 16, 32], "VLLM_DECODE_BS_BUCKET_STEP": [8, 16]}
SPACE = {"name": "guided", "release": "fork-1.21.2",
         "server": {"max_model_len": 1024, "block_size": 128, "max_num_batched_tokens": 2048},
         "parameters": {k: {"type": "categorical", "choices": v} for k, v in CHOICES.items()}}


def setup(values, objectives: Objectives | None = None):
    """A study holding one measured configuration (max_num_seqs 8, step 8) with these objective values."""
    objectives = objectives or Objectives()
    space = SearchSpace.from_dict(SPACE)
    ctx = T.TrialContext(backend=Backend("sim", model="m", sim_release="fork-1.21.2"),
                         workload=RandomWorkload(200, 16, num_prompts=16), release="fork-1.21.2",
                         device_model=M.DeviceModel(), load=T.LoadOptions(max_concurrency=8, warmup_requests=2),
                         limits=T.Limits(warmup_budget_s=10_000.0), cost=CostRate(2.0, "$2/card-hour"))
    ctx.calibration = Calibration().update({"decode_step": 0.0, "prompt_warmup": 0.0, "decode_warmup": 0.0})
    study = optuna.create_study(directions=objectives.directions)
    study.add_trial(optuna.trial.create_trial(
        params={"max_num_seqs": 8, "VLLM_DECODE_BS_BUCKET_STEP": 8}, values=values,
        distributions={k: CategoricalDistribution(v) for k, v in CHOICES.items()},
        user_attrs={"feasible": True, "status": "ok", "booted": True}))
    screen = Screen(study, ctx)
    guide = Guide(study, space, ctx, objectives, screen)
    screen.use_guide(guide)
    return space, ctx, study, guide, screen


def test_a_proposal_beaten_everywhere_by_a_measured_point_is_not_booted(monkeypatch):
    space, ctx, study, guide, screen = setup([1e6, 1.0, 1.0])  # a measured point nothing can beat
    settings = space.settings_for({"max_num_seqs": 32, "VLLM_DECODE_BS_BUCKET_STEP": 16})
    result = guide.dominated(settings, M.predict_calibrated(ctx, settings))
    assert result is not None and result.status is TrialStatus.OK and not result.booted
    assert "predicted dominated by trial 0" in result.reason and result.timings["accelerator_s"] == 0.0
    assert result.metrics["output_throughput"] > 0 and result.warmup_s == result.predicted["warmup_s"]
    # In the study loop: told without a boot, marked, not counted, not a measurement to reuse.
    monkeypatch.setattr(measured, "EXPLORE_SHARE", 0.0)  # no exploration share this time
    trial = study.ask({k: CategoricalDistribution(v) for k, v in CHOICES.items()})
    told, _ = screen.decide(trial, settings, 0)
    assert told is not None and not told.booted and trial.user_attrs["screened"] == "dominated"
    screen.record(trial, told)
    tell_result(study, trial, told, Objectives(), Constraints(warmup_budget_s=10_000.0))
    frozen = study.trials[-1]
    assert not measured.counts_toward_budget(frozen) and frozen.user_attrs["feasible"]
    assert not screen.measurements(frozen.user_attrs["effective_key"])
    assert [n for n, _, _ in guide.measured_front()] == [0]  # the prediction is not a measured point


def test_with_the_cost_objective_a_point_must_also_be_cheaper_to_screen_a_proposal():
    settings_of = {"max_num_seqs": 32, "VLLM_DECODE_BS_BUCKET_STEP": 16}
    # faster, quicker and earlier, but dearer per token than any prediction: the proposal boots
    space, ctx, *_, guide, _ = setup([1e6, 1.0, 1.0, 1e9], Objectives(cost=True))
    settings = space.settings_for(settings_of)
    assert guide.dominated(settings, M.predict_calibrated(ctx, settings)) is None
    # and cheaper too: not booted, told its predicted cost ($2 a card-hour over its tokens)
    space, ctx, *_, guide, _ = setup([1e6, 1.0, 1.0, 1e-9], Objectives(cost=True))
    result = guide.dominated(settings, M.predict_calibrated(ctx, settings))
    assert result is not None and not result.booted
    thr = result.metrics["output_throughput"]
    assert result.metrics[COST] == pytest.approx(2.0 / (thr * 3600) * 1e6)


def test_a_proposal_the_measured_front_does_not_beat_boots():
    space, ctx, study, guide, _ = setup([1.0, 1e9, 1e9])  # a measured point everything beats
    settings = space.settings_for({"max_num_seqs": 32, "VLLM_DECODE_BS_BUCKET_STEP": 16})
    assert guide.dominated(settings, M.predict_calibrated(ctx, settings)) is None


def test_the_guide_enqueues_the_neighbour_with_the_largest_predicted_gain_every_other_boot():
    space, ctx, study, guide, _ = setup([1.0, 1e5, 1e4])
    assert guide.after_tell(booted=True) is None  # one boot since the last proposal: the sampler's turn
    proposed = guide.after_tell(booted=True)
    assert proposed is not None and proposed != {"max_num_seqs": 8, "VLLM_DECODE_BS_BUCKET_STEP": 8}
    waiting = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert len(waiting) == 1 and waiting[0].user_attrs["seed"].startswith("performance model")
    assert guide.after_tell(booted=True, more=False) is None  # the study is done: nothing left behind


def test_the_guide_never_proposes_a_configuration_that_is_booting_now():
    """Another slot or node running a configuration: proposing it again would only wait for its result (a
    screened reuse that does not count toward --n-trials), so the proposal is the next best one."""
    space, ctx, study, guide, screen = setup([1.0, 1e5, 1e4])
    first = guide.propose()
    assert first is not None
    running = study.ask({k: CategoricalDistribution(v) for k, v in CHOICES.items()})
    screen.claim(running, measured.effective_key(ctx, space.settings_for(first)))
    second = guide.propose()
    assert second is not None and second != first
    study.tell(running, state=optuna.trial.TrialState.FAIL)  # it ended without a measurement: fair game again
    assert guide.propose() == first


def test_under_the_grid_sampler_the_guide_screens_but_never_enqueues():
    space, ctx, study, guide, _ = setup([1.0, 1e5, 1e4])
    guide.proposes = False  # what run_study sets for --sampler grid
    assert [guide.after_tell(booted=True) for _ in range(4)] == [None] * 4
    assert not study.get_trials(states=(optuna.trial.TrialState.WAITING,))


def test_calibrated_serving_follows_the_step_factors():
    prior = {"output_throughput": 100.0, "p99_ttft_ms": 50.0, "median_tpot_ms": 10.0}
    est = serving_estimate(prior, Corrections(decode_step=1.25, prefill_step=2.0))
    assert est == {"output_throughput": 80.0, "p99_ttft_ms": 100.0, "median_tpot_ms": 12.5}
