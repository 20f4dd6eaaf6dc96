"""Cost as an objective (issue #36 item 2): `tune --cost-per-hour P --cost-objective` makes $ per million output
tokens a fourth objective, minimised, beside throughput, latency and warm-up. On the simulator, end to end:
each trial is told the cost of its own cards and throughput; the table, the CSV and export carry it; a study
made with it is resumed only with it. On hand-written estimates: the confirmation's balanced pick weighs it."""

from __future__ import annotations

import io

import optuna
import pytest
import yaml

from tuner.cli import main
from tuner.study import confirm as C
from tuner.study.measurements import WARMUP, combine
from tuner.study.options import COST, Objectives

from ..report.conftest import FAST, cli

PRICE = 2.0  # dollars per card-hour
SPACE = {
    "name": "costobj", "release": "fork-1.21.2",
    "server": {"max_model_len": 1024, "block_size": 128, "max_num_batched_tokens": 2048},
    "env": {"VLLM_EXPONENTIAL_BUCKETING": "false"},
    "parameters": {"tensor_parallel_size": {"type": "categorical", "choices": [1, 2]},
                   "max_num_seqs": {"type": "categorical", "choices": [8, 16]}},
}
# Generous limits: every measured trial is feasible however busy the machine (conftest.LIMITS explains).
LIMITS = ["--slo", "p99_ttft_ms=600000", "--warmup-budget", "50000", "--allow-recompiles", "--no-screening"]


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory):
    """A study of two trials, one card and two cards, tuned with the cost objective."""
    root = tmp_path_factory.mktemp("costobj")
    space = root / "costobj.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    study = optuna.create_study(study_name="costobj", storage=f"sqlite:///{root / 'study.db'}",
                                directions=Objectives(cost=True).directions)
    for tp in (1, 2):
        study.enqueue_trial({"tensor_parallel_size": tp, "max_num_seqs": 8})
    out = cli("tune", "--space", str(space), "--results", str(root / "results"), "--storage",
              f"sqlite:///{root / 'study.db'}", "--n-trials", "2", "--cost-per-hour", f"{PRICE}/card",
              "--cost-objective", *FAST, *LIMITS)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return root, out.stdout


def _load(root):
    return optuna.load_study(study_name="costobj", storage=f"sqlite:///{root / 'study.db'}")


def test_each_trial_is_told_the_cost_of_its_own_cards_and_throughput(study_dir):
    root, _ = study_dir
    study = _load(root)
    assert study.metric_names == ["output_throughput", "p99_ttft_ms", "warmup_s", COST]
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE", "MINIMIZE", "MINIMIZE"]
    trials = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert [t.params["tensor_parallel_size"] for t in trials] == [1, 2]
    for t in trials:
        thr, cost = t.values[0], t.values[3]
        # the server's price for an hour (cards x $2) over the million tokens it serves in that hour
        assert cost == pytest.approx(PRICE * t.params["tensor_parallel_size"] / (thr * 3600) * 1e6, rel=1e-5)
        assert t.user_attrs["metrics"][COST] == pytest.approx(cost)
        assert t.user_attrs[COST] == pytest.approx(cost)  # the dashboard's plain number


def test_the_table_the_csv_and_export_carry_the_cost_objective(study_dir, tmp_path):
    root, stdout = study_dir
    header = next(line for line in stdout.splitlines() if "tok/s" in line and "warmup" in line)
    assert "$/Mtok" in header
    front = (root / "results" / "costobj" / "pareto.csv").read_text().splitlines()
    assert COST in front[0].split(",")
    out = cli("export", "costobj", "--results", str(root / "results"), "--storage", f"sqlite:///{root / 'study.db'}",
              "-o", str(tmp_path / "best.env"))
    assert out.returncode == 0, out.stderr
    objectives = next(line for line in (tmp_path / "best.env").read_text().splitlines()
                      if line.startswith("# objectives:"))
    assert f"{COST}=" in objectives


def test_the_study_is_resumed_only_with_the_same_objectives(study_dir, capsys):
    root, _ = study_dir
    before = len(_load(root).trials)
    assert main(["tune", "--space", str(root / "costobj.yaml"), "--results", str(root / "results"), "--storage",
                 f"sqlite:///{root / 'study.db'}", "--n-trials", "3", *FAST, *LIMITS]) == 2
    err = capsys.readouterr().err
    assert "was created with objectives" in err and "--cost-objective" in err
    assert len(_load(root).trials) == before  # nothing booted, nothing lost


def test_the_cost_objective_needs_a_price(tmp_path, capsys):
    space = tmp_path / "s.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    assert main(["tune", "--space", str(space), "--results", str(tmp_path), "--cost-objective"]) == 2
    assert "--cost-objective: give the price with --cost-per-hour" in capsys.readouterr().err
    assert not (tmp_path / "costobj").exists()


OBJ = ("output_throughput", "p99_ttft_ms", WARMUP, COST)


def _est(key, thr, lat, warm, cost):
    return combine([{OBJ[0]: thr, OBJ[1]: lat, WARMUP: warm, COST: cost}], key)


def test_the_balanced_pick_weighs_the_cost_when_it_is_an_objective():
    # one and two cards: alike in throughput, latency and warm-up; the two-card server costs twice as much
    ests = {"one": _est("one", 1000.0, 300.0, 200.0, 0.56), "two": _est("two", 1010.0, 300.0, 200.0, 1.10),
            "slow": _est("slow", 400.0, 900.0, 100.0, 1.39)}
    with_cost = C.decide(ests, set(ests), C.Question(OBJ))
    assert with_cost.picks["balanced"] == "one" and with_cost.confidence["balanced"] > 0.9
    without = C.decide(ests, set(ests), C.Question(OBJ[:3]))
    assert without.picks["balanced"] == "two"  # throughput alone: the 1% more of the two-card server


def _remeasured_study(name: str) -> optuna.Study:
    """A cost-objective study whose one configuration was booted twice (a figure and its interval)."""
    s = optuna.create_study(study_name=name, directions=Objectives(cost=True).directions)
    s.set_metric_names(Objectives(cost=True).names)
    for thr, lat, warm, cost in ((442.0, 204.0, 648.0, 2.52), (454.0, 190.0, 650.0, 2.45)):
        metrics = {"output_throughput": thr, "p99_ttft_ms": lat, COST: cost}
        s.add_trial(optuna.trial.create_trial(
            values=[thr, lat, warm, cost], params={}, distributions={},
            user_attrs={"feasible": True, "status": "ok", "booted": True, "effective_key": "k", "server": {},
                        "env": {}, "metrics": metrics, "observed": {"warmup_s": warm}}))
    return s


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_compare_shows_four_objectives_with_their_intervals_in_80_columns():
    from rich.console import Console

    from tuner.results.compare import compare_studies, print_comparison

    out = io.StringIO()
    print_comparison(compare_studies(_remeasured_study("one"), _remeasured_study("two")), Console(file=out, width=80))
    table = out.getvalue().split("Best trial per criterion", 1)[1].split("(n: boots", 1)[0]
    assert all(len(line) <= 80 for line in table.splitlines())
    assert "…" not in table  # no header, name or figure cut
    header = next(line for line in table.splitlines() if "tok/s" in line)
    assert "study" in header and "$/Mtok" in header and "warmup" in header
    assert "10 min 49 s" in table and "±" in table  # the warm-ups 648 and 650 s: mean, whole
