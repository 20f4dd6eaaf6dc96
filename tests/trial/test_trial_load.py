"""The trial's load step (tuner/trial/run.py _run_load) on the simulator: server errors become load_errors
with the server's own message, and goodput is judged in the server's time under a time scale."""

from __future__ import annotations

import json
import sys

import pytest

from tuner.load.workload import FixedWorkload
from tuner.vocabulary.status import TrialStatus

from .test_trial import context, run

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")


def test_out_of_vocabulary_prompts_are_load_errors_with_the_servers_message(tmp_path):
    ctx = context(tmp_path)
    # ids below 999999 while the simulated llama-3.1 vocabulary is 128256: the server rejects most
    ctx.workload = FixedWorkload(160, 16, num_prompts=12, vocab_size=999_999)
    r = run(tmp_path, ctx)
    assert r.status == TrialStatus.LOAD_ERRORS
    assert "requests failed: " in r.reason and "x server error: Token id " in r.reason
    assert "is out of vocabulary" in r.reason


def test_trial_goodput_counts_requests_meeting_the_slo_in_server_time(tmp_path):
    ctx = context(tmp_path)
    ctx.load.goodput_slos = {"ttft": 50.0}
    r = run(tmp_path, ctx)
    assert r.status == TrialStatus.OK, r.reason
    bench = json.loads((tmp_path / "trial" / "bench.json").read_text())
    good = sum(1 for t, e in zip(bench["ttfts"], bench["errors"]) if not e and t * 1000 <= 50.0)
    assert bench["tuner_time_scale"] == 0.2
    assert bench["request_goodput"] == pytest.approx(good / bench["duration"])
