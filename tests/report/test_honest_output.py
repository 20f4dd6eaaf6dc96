"""A study's output says what went wrong: an SLO miss reads as a miss live and in trials.csv's reason, the
data files hold no placeholder numbers (the penalties stay inside Optuna), a rejection's "at least" figure
is above the budget it is compared with, and with nothing feasible the closest trial and the smallest
change that admits it are named."""

from __future__ import annotations

import math
import os
import re

import pandas as pd
import pytest
import yaml

from tuner.cli import main
from tuner.vocabulary.display import above

SPACE = {
    "name": "honest",
    "release": "fork-1.21.2",
    "server": {"max_model_len": 1024, "block_size": 128, "max_num_batched_tokens": 2048},
    "env": {"VLLM_EXPONENTIAL_BUCKETING": "false"},
    "parameters": {"max_num_seqs": {"type": "categorical", "choices": [8, 16, 32]},
                   "VLLM_PROMPT_SEQ_BUCKET_STEP": {"type": "categorical", "choices": [128, 256]}},
}
FAST = ["--num-prompts", "16", "--num-warmups", "1", "--max-concurrency", "8", "--random-input-len", "200",
        "--random-output-len", "16", "--time-scale", "0.2", "--startup-time-scale", "0.002", "--allow-recompiles"]
SLO_MS = 5  # no simulated server meets a 5 ms p99 TTFT


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    ws = tmp_path_factory.mktemp("honest")
    (ws / "space.yaml").write_text(yaml.safe_dump(SPACE))
    cwd = os.getcwd()
    os.chdir(ws)
    try:
        import contextlib
        import io

        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(err):
            code = main(["tune", "--space", "space.yaml", "--n-trials", "3", "--slo", f"p99_ttft_ms={SLO_MS}", *FAST])
    finally:
        os.chdir(cwd)
    assert code == 0, err.getvalue()
    return ws / "results" / "honest", err.getvalue()


def test_an_slo_miss_reads_as_a_miss_live_and_in_reason(study):
    folder, output = study
    live = " ".join(output.split())  # rich wraps at 80 columns
    assert re.search(rf"trial \d+ \(measured\): SLO miss p99_ttft_ms [\d,.]+ > {SLO_MS} \(thr", live), output
    trials = pd.read_csv(folder / "trials.csv")
    measured = trials[trials["status"] == "ok"]
    assert len(measured) >= 1
    for _, row in measured.iterrows():
        assert row["reason"].startswith("SLO miss p99_ttft_ms ")
        shown = float(row["reason"].split()[3].replace(",", ""))
        assert shown > SLO_MS and abs(shown - row["p99_ttft_ms"]) < 1


def test_nothing_feasible_names_the_closest_trial_and_the_change(study):
    folder, output = study
    text = " ".join(output.split())
    found = re.search(r"Closest trial: (\d+); the smallest change that admits it: --slo p99_ttft_ms=(\d+) "
                      rf"\(now {SLO_MS}\)", text)
    assert found, output
    trials = pd.read_csv(folder / "trials.csv").set_index("number")
    closest, limit = int(found.group(1)), int(found.group(2))
    assert limit >= trials.loc[closest, "p99_ttft_ms"]
    assert trials.loc[closest, "p99_ttft_ms"] == trials[trials["status"] == "ok"]["p99_ttft_ms"].min()


def test_data_files_hold_no_placeholder_numbers(study, tmp_path):
    from tuner.commands.studyargs import load_study
    from tuner.report.frame import trials_frame
    from tuner.study.tell import LATENCY_PENALTY_MS

    folder, _ = study
    trials = pd.read_csv(folder / "trials.csv")
    assert not (trials[["output_throughput", "p99_ttft_ms"]] == LATENCY_PENALTY_MS).any().any()
    # A trial the configuration broke: its told values are penalties; the frame leaves them empty.
    s, _ = load_study(str(folder), folder.parent, None)
    frame = trials_frame(s)
    for t in s.get_trials(deepcopy=False):
        row = frame[frame["number"] == t.number].iloc[0]
        for name in t.user_attrs.get("placeholders", []):
            assert pd.isna(row[name]), (t.number, name, row[name])


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_penalties_of_a_broken_trial_stay_inside_optuna(tmp_path):
    import optuna

    from tuner.report.frame import trials_frame
    from tuner.study.options import Constraints, Objectives
    from tuner.study.tell import tell_result
    from tuner.trial.run import TrialResult
    from tuner.vocabulary.status import TrialStatus

    objectives = Objectives()
    study = optuna.create_study(directions=objectives.directions)
    study.set_metric_names(objectives.names)
    trial = study.ask()
    result = TrialResult(status=TrialStatus.WARMUP_OVER_BUDGET, reason="over", predicted={"warmup_s": 300.0})
    tell_result(study, trial, result, objectives, Constraints(warmup_budget_s=240))
    told = study.trials[0].values
    assert told[0] == 0.0 and told[1] >= 1e4  # the sampler sees the penalties
    row = trials_frame(study).iloc[0]
    assert all(pd.isna(row[n]) for n in objectives.names)  # the data file does not


@pytest.mark.parametrize("value,limit,shown", [(240.4, 240, "240.4"), (240.04, 240, "240.04"), (300, 240, "300"),
                                               (4874.3, 3000, "4,874")])
def test_over_a_limit_is_shown_over_it(value, limit, shown):
    assert above(value, limit) == shown and float(shown.replace(",", "")) > limit


def test_a_rejection_never_reads_at_least_the_budget():
    from tuner.trial.run import warmup_abort_reason

    class Projection:
        elapsed_s, total_s, low_s, steps_done, steps_total = 10.0, 300.0, 240.3, 3, 40

    reason = warmup_abort_reason(Projection(), 240.0)
    low = float(re.search(r"at least ([\d.]+) s", reason).group(1))
    assert low > 240 and not math.isclose(low, 240)
