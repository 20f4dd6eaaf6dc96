"""A --remeasure 2 study on the simulator, end to end: every trial records its first-run window (and is held
to --slo first_p99_ttft_ms), and the terminal table, the env file's header, report.html and compare show each
configuration's spread. What the figures are is timing; what is asserted is what timing cannot change."""

from __future__ import annotations

import optuna
import pytest
from rich.console import Console

from tests.recipecache.studies import tune_enqueued
from tuner.report import write_report
from tuner.results.compare import compare_studies, print_comparison
from tuner.results.export import Filters, env_file_text, pick_trial

SPACE = {
    "name": "sure",
    "release": "fork-1.21.2",
    "server": {"max_model_len": 1024, "block_size": 128, "max_num_batched_tokens": 2048},
    "env": {"VLLM_EXPONENTIAL_BUCKETING": "false"},
    "parameters": {"max_num_seqs": {"type": "categorical", "choices": [4, 8]}},
}
# No --num-warmups: the warm pass, the first-run window, is one wave of the load (--max-concurrency 4).
# Generous limits: every measured trial is feasible on a busy machine (x 1 / 0.2 on the wall clock).
FAST = ["--num-prompts", "8", "--max-concurrency", "4", "--random-input-len", "100", "--random-output-len", "8",
        "--time-scale", "0.2", "--startup-time-scale", "0.002", "--warmup-budget", "50000", "--allow-recompiles",
        "--slo", "p99_ttft_ms=600000", "first_p99_ttft_ms=600000", "--remeasure", "2"]


def test_a_remeasured_study_records_its_first_runs_and_says_how_sure(tmp_path):
    """One study for every check (xdist hands tests to workers one by one: a module fixture would be built
    once per worker): the records first, then the env file, the terminal table, the report and compare."""
    # one configuration twice (its second proposal boots it again: --remeasure 2), one once
    run = tune_enqueued(tmp_path, SPACE, [{"max_num_seqs": n} for n in (4, 4, 8)], *FAST)
    assert run.returncode == 0, run.stderr
    study = optuna.load_study(study_name="sure", storage=f"sqlite:///{tmp_path / 'results' / 'sure' / 'study.db'}")
    trials = study.get_trials()

    # every trial records its first-run window (one wave of the load) and is held to its SLO
    assert len(trials) == 3 and all(t.user_attrs["status"] == "ok" and t.user_attrs["booted"] for t in trials)
    for t in trials:
        obs = t.user_attrs["observed"]
        m = t.user_attrs.get("measurement") or t.user_attrs["metrics"]  # a second boot is told the mean; its own here
        assert m["first_requests"] == m["warm_requests"] == obs["first_run_window"] == 4
        assert m["first_p99_ttft_ms"] > 0 and m["first_output_throughput"] > 0 and m["warm_p99_ttft_ms"] > 0
        assert obs["first_run_penalty_tail_ttft"] == pytest.approx(m["first_p99_ttft_ms"] / m["warm_p99_ttft_ms"],
                                                                   rel=1e-3)
        assert obs["first_run_not_warmed_up"] <= obs["not_warmed_up"]  # the window's share of the boot's
        told = t.user_attrs["metrics"]["first_p99_ttft_ms"]
        assert t.system_attrs["constraints:slo_first_p99_ttft_ms"] == pytest.approx(told - 600000)
    # the second boot of the configuration is told the mean of both, and keeps its own figures
    first, second = (t.user_attrs for t in trials[:2])
    assert second["observed"]["measurements"] == 2
    own = [first["metrics"]["first_p99_ttft_ms"], second["measurement"]["first_p99_ttft_ms"]]
    assert second["metrics"]["first_p99_ttft_ms"] == pytest.approx(sum(own) / 2)

    # the env file's header: the spread of a configuration booted twice; "one measurement" for the other
    twice = env_file_text(study, trials[1], "--trial", "fork-1.21.2").splitlines()
    once = env_file_text(study, trials[2], "--trial", "fork-1.21.2").splitlines()
    assert "# how sure: 2 boots of these settings; each figure's mean and 95% t-interval:" in twice
    assert sum("(n=2, 95% t-interval" in line for line in twice) == 3  # one line per objective
    assert any(line.startswith("# how sure: one measurement of these settings, no interval") for line in once)
    assert not any("t-interval" in line and "n=" in line for line in once)

    # the terminal table: n and intervals when the twice-booted configuration is on the front
    said = run.stdout + run.stderr
    on_front = bool({t.number for t in study.best_trials} & {0, 1})
    assert ("boots of the same settings" in said and "t-interval" in said) == on_front

    # the report: the first-run penalty of every trial and of the picks; the pick's spread
    write_report(study, tmp_path / "report")
    page = (tmp_path / "report" / "report.html").read_text()
    assert "first-run p99 TTFT / warm" in page  # every trial's (the trials table)
    assert "first-run p99 TTFT against the same requests once warm" in page  # the picks' (comparison table)
    assert "requests after ready (the first run)" in page  # the pick's sentence
    twice_picked = pick_trial(study, "balanced", Filters()).number in (0, 1)
    assert ("id='how-sure'>How sure: 2 boots of the pick's settings" in page) == twice_picked
    assert ("id='how-sure'>How sure: the pick is one measurement of its settings" in page) == (not twice_picked)

    # compare: the picks' boots
    console = Console(record=True, width=100)
    cmp = compare_studies(study, study)
    print_comparison(cmp, console)
    shown = console.export_text()
    twice = [s for row in cmp.best.values() for s in row if s is not None and s["trial"] in (0, 1)]
    assert all(s["n"] == 2 and s["spread"][0].n == 2 for s in twice)
    assert ("boots of the pick's settings" in shown and "±" in shown) == bool(twice)
    assert ("sure (2) (trial 1) and sure (trial 1) are indistinguishable" in shown
            or "sure (2) (trial 0) and sure (trial 0) are indistinguishable" in shown) == bool(twice)
