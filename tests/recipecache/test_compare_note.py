"""`compare` between releases says that a release change invalidates a prepared recipe cache."""

from __future__ import annotations

import io

import optuna
import pytest
from rich.console import Console

from tuner.results.compare import compare_studies, print_comparison


def study(release: str) -> optuna.Study:
    s = optuna.create_study(directions=["maximize", "minimize", "minimize"])
    s.set_user_attr("space", {"name": "x", "release": release})
    s.set_metric_names(["output_throughput", "p99_ttft_ms", "warmup_s"])
    s.add_trial(optuna.trial.create_trial(values=[100.0, 50.0, 60.0], params={}, distributions={},
                                          user_attrs={"feasible": True, "server": {}, "env": {}}))
    return s


def printed(*studies) -> str:
    out = io.StringIO()
    print_comparison(compare_studies(*studies), Console(file=out, width=80))
    return " ".join(out.getvalue().split())


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_release_change_invalidates_the_cache_note():
    text = printed(study("fork-1.21.2"), study("fork-1.22"))
    assert "Recipe cache: releases differ (fork-1.21.2, fork-1.22)" in text and "invalid" in text
    assert "Recipe cache" not in printed(study("fork-1.22"), study("fork-1.22"))
