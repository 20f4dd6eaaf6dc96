"""`tune --confirm` on the simulator, kept small: two measured trials, a tiny load, then the confirmation
re-boots what could change the balanced pick (fresh prompts), records it as trials of its own and the
exported pick stands on the configuration's latest (averaged) record."""

from __future__ import annotations

import sys

import pytest

from tuner.study.measurements import by_configuration
from tuner.study.tell import counted
from tuner.vocabulary.cost import spent_hours
from tuner.vocabulary.record import records

from ..perfmodel.test_reuse_in_a_study import tune

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")


def test_tune_confirm_on_the_simulator(tmp_path):
    s = tune(tmp_path, "--n-trials", "2", "--confirm", "--confirm-budget", "100%", "--confirm-confidence", "0.99")
    recs = records(s.get_trials())
    summary = s.user_attrs["confirmation"]
    assert counted(s) == 2  # the search's trials; re-measurements are not counted
    assert summary["budget_h"] == pytest.approx(summary["search_h"], abs=1e-3)
    confirm = [r for r in recs if r.attrs.get("confirm")]
    assert summary["measured"] == [r.number for r in confirm]
    # A measurement starts only while the budget holds its expected cost; what it then spends is the
    # machine's doing (the simulator's start-up, scaled, grows on a busy machine): so the budget held
    # before the last measurement began.
    last = spent_hours(confirm[-1], s.user_attrs["backend"]) if confirm else 0.0
    assert summary["spent_h"] - last <= summary["budget_h"] + 1e-3
    trials = tmp_path / "results" / "reuse" / "trials"
    for r in confirm:  # a real boot of the simulator with its own log, or another load run on one
        boot = r.observed.get("same_boot_as")
        if boot is None:
            assert r.booted and (trials / f"{r.number:04d}" / "server.log").exists()
        else:
            assert list((trials / f"{boot:04d}").glob("load-run-*/bench.json"))
    latest = {rs[-1].number for rs in by_configuration(recs).values()}
    assert summary["rules"]["balanced"]["trial"] in latest
