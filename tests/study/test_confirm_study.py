"""tune --confirm inside a study (tuner/study/confirmrun.py) on a fake runner: deterministic figures, no server.
Every re-measurement is a trial of its own (the records --remeasure produces), the latest of a configuration
holds the mean of all of them, the front reads only the latest, and the budget holds."""

from __future__ import annotations

import statistics

import optuna
import pytest

from tuner.load.workload import FixedWorkload
from tuner.serve.backends import Backend
from tuner.space.schema import SearchSpace
from tuner.study.confirm import ConfirmOptions
from tuner.study.measurements import RAW_ATTR, SAME_BOOT, by_configuration, estimates, own_figures
from tuner.study.options import Constraints, Objectives, StudyOptions, open_study
from tuner.study.pareto import measured_front
from tuner.study.run import run_study
from tuner.study.tell import counted
from tuner.trial.run import TrialContext, TrialResult
from tuner.vocabulary.record import records
from tuner.vocabulary.status import TrialStatus

SPACE = {"name": "confirm", "server": {}}  # its parameter: max_num_seqs over a study's values (confirm_study)
# True figures: 16 and 32 are the balanced candidates, 5% apart in p99 TTFT (inside its noise).
TRUE = {8: (100.0, 150.0, 60.0), 16: (180.0, 400.0, 70.0), 32: (180.0, 420.0, 70.0), 64: (260.0, 2000.0, 90.0)}
WOBBLE = [1.0, 1.12, 0.9, 1.05, 0.95, 1.1, 0.92, 1.0]  # one measurement's p99 factor, in turn


class Runner:
    """Answers from TRUE with a fixed p99 wobble per measurement; boots cost 600 s, load runs 60 s."""

    def __init__(self):
        self.count: dict[int, int] = {}
        self.seeds: list[int] = []
        self.asked_again = 0

    def figures(self, s: int) -> dict:
        n = self.count[s] = self.count.get(s, 0) + 1
        thr, lat, _ = TRUE[s]
        return {"output_throughput": thr, "p99_ttft_ms": lat * WOBBLE[n % len(WOBBLE)], "failed": 0}

    def __call__(self, ctx, settings, trial_dir=None, slot=None, stop_event=None) -> TrialResult:
        s = settings.server["max_num_seqs"]
        self.seeds.append(ctx.workload.seed)
        res = TrialResult(status=TrialStatus.OK, booted=True, params=settings.params, server=settings.server,
                          metrics=self.figures(s), observed={"warmup_s": TRUE[s][2]},
                          timings={"accelerator_s": 660.0, "boot_and_warmup_s": 600.0, "load_s": 60.0})
        runs = []
        while ctx.again is not None and ctx.again([res.metrics] + [r["metrics"] for r in runs]):
            self.asked_again += 1
            runs.append({"metrics": self.figures(s), "seed": len(runs) + 1, "load_s": 60.0, "accelerator_s": 60.0})
        if runs:
            res.observed["same_boot_runs"] = runs
        return res


def confirm_study(root, name: str, values, runner, budget_share: float):
    """A study (in memory) over max_num_seqs in `values`: the search measures each once, in order, with
    `runner`, then --confirm with `budget_share` of the search's hours."""
    space = SearchSpace.from_dict({**SPACE, "parameters": {"max_num_seqs": {"type": "categorical",
                                                                             "choices": list(values)}}})
    ctx = TrialContext(backend=Backend(kind="sim", model="m"), workload=FixedWorkload(10, 10, num_prompts=1, seed=7))
    opts = StudyOptions(name=name, results_root=root, sampler="random", n_trials=len(values), enqueue_defaults=False,
                        confirm=ConfirmOptions(budget_share=budget_share),
                        storage_object=optuna.storages.InMemoryStorage())
    study = open_study(opts, space, Objectives())
    for s in values:
        study.enqueue_trial({"max_num_seqs": s})
    run = run_study(opts, space, ctx, Objectives(), Constraints(allow_recompiles=True), install_sigint=False,
                    runner=runner)
    return run.study, runner


@pytest.fixture(scope="module")
def confirmed(tmp_path_factory):
    """The search measures the four configurations, then --confirm with half its hours."""
    return confirm_study(tmp_path_factory.mktemp("confirm"), "confirm", TRUE, Runner(), 0.5)


def test_confirmation_remeasures_the_close_picks_and_records_every_measurement(confirmed):
    study, runner = confirmed
    recs = records(study.get_trials())
    confirm = [r for r in recs if r.attrs.get("confirm")]
    assert confirm, "the balanced pick is inside the noise: something is re-measured"
    assert counted(study) == 4  # re-measurements do not count toward --n-trials
    assert {r.params["max_num_seqs"] for r in confirm} <= {16, 32}  # the picks and their rival, nothing else
    assert all(r.booted and r.ok and r.effective_key for r in confirm)

    # Every measurement is a record; the latest of each configuration is told the mean of them all.
    for rs in by_configuration(recs).values():
        own = [own_figures(r)["p99_ttft_ms"] for r in rs]
        assert rs[-1].metrics["p99_ttft_ms"] == statistics.fmean(own)
        assert rs[-1].values[1] == statistics.fmean(own)
        if len(rs) > 1:
            assert RAW_ATTR in rs[-1].attrs and rs[-1].observed["measurements"] == len(rs)
    # The front holds only the latest measurement of each configuration.
    latest = {rs[-1].number for rs in by_configuration(recs).values()}
    assert {t.number for t in measured_front(study)} <= latest

    summary = study.user_attrs["confirmation"]
    assert summary["measured"] == [r.number for r in confirm]
    assert summary["spent_h"] <= summary["budget_h"] + 1e-9
    assert summary["budget_h"] == pytest.approx(0.5 * summary["search_h"], abs=1e-3)
    assert summary["rules"]["balanced"]["trial"] in latest


def test_load_runs_on_the_same_boot_are_records_without_a_warmup_of_their_own(confirmed):
    study, runner = confirmed
    recs = records(study.get_trials())
    same_boot = [r for r in recs if r.observed.get(SAME_BOOT) is not None]
    assert runner.asked_again > 0 and same_boot, "p99 in doubt, warm-ups equal: another load run is cheaper"
    by_number = {r.number: r for r in recs}
    for r in same_boot:
        boot = by_number[r.observed[SAME_BOOT]]
        assert boot.effective_key == r.effective_key and boot.observed.get(SAME_BOOT) is None
        assert r.timings["accelerator_s"] == 60.0  # charged its load run only
    est = estimates(recs)[same_boot[0].effective_key]
    assert est.boots < est.n and len(est.samples["warmup_s"]) == est.boots
    # Confirmation boots ran with fresh prompts: a workload seed of their own, not the search's (7).
    confirm_boot_seeds = runner.seeds[4:]
    assert confirm_boot_seeds and 7 not in confirm_boot_seeds
    assert len(set(confirm_boot_seeds)) == len(confirm_boot_seeds)


# Clearly apart: the redraws settle the picks at once, on the prior noise alone.
APART = {8: (100.0, 100.0, 60.0), 64: (1000.0, 5000.0, 600.0)}


class ApartRunner:
    def __init__(self):
        self.booted: list[int] = []

    def __call__(self, ctx, settings, trial_dir=None, slot=None, stop_event=None) -> TrialResult:
        s = settings.server["max_num_seqs"]
        self.booted.append(s)
        thr, lat, warm = APART[s]
        return TrialResult(status=TrialStatus.OK, booted=True, params=settings.params, server=settings.server,
                           metrics={"output_throughput": thr, "p99_ttft_ms": lat, "failed": 0},
                           observed={"warmup_s": warm},
                           timings={"accelerator_s": 660.0, "boot_and_warmup_s": 600.0, "load_s": 60.0})


def _apart_study(tmp_path, budget_share: float):
    return confirm_study(tmp_path, "apart", APART, ApartRunner(), budget_share)


def test_a_pick_measured_once_is_measured_again_however_settled_it_looks(tmp_path):
    study, runner = _apart_study(tmp_path, budget_share=0.7)  # 0.26 h: one boot (0.18 h x 1.25 margin)
    confirm = [r for r in records(study.get_trials()) if r.attrs.get("confirm")]
    pick = study.user_attrs["confirmation"]["rules"]["balanced"]
    assert len(confirm) == 1 and runner.booted == [8, 64, confirm[0].params["max_num_seqs"]]
    assert "measured once" in confirm[0].attrs["confirm"]
    assert pick["settled"] and pick["trial"] == confirm[0].number  # the re-measured pick holds the mean


def test_a_budget_that_cannot_pay_a_boot_measures_nothing(tmp_path):
    study, runner = _apart_study(tmp_path, budget_share=0.1)  # 0.04 h: less than a boot (0.18 h x 1.25)
    assert runner.booted == [8, 64]
    assert study.user_attrs["confirmation"]["measured"] == []
