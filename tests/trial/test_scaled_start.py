"""A time-scaled server (the simulator at --startup-time-scale S) compresses its own phases, not the interpreter's
start before its first log line: that part is real time and counts once, not 1/S times (issue #36: the
probes sized from a simulated study's time before warm-up were some 100-600 s too long). A genuine server
runs at scale 1 and is unchanged."""

from __future__ import annotations

import pytest

from tuner.perfmodel.projection import BootTracker
from tuner.trial.run import _SafeWatcher
from tuner.vocabulary.cost import device_seconds
from tuner.vocabulary.record import TrialRecord

BANNER = "INFO 11-28 09:00:00 [api_server.py:1] vLLM API server version 0.7.2+gaudi1212"


def _watched(scale: float, launched: float, first_line: float) -> BootTracker:
    tracker = BootTracker(None)
    tracker.started_at = launched / scale  # as TrialRun.boot sets it: server seconds of the launch
    watch = _SafeWatcher(expect_graphs=False, tracker=tracker, scale=scale)
    watch.on_line(BANNER, first_line)
    watch.on_line(BANNER, first_line + 0.5)  # later lines move nothing
    assert watch.first_line_at == first_line
    return tracker


def test_the_interpreters_start_counts_once_on_a_time_scaled_server():
    # launched at 100 s, first line 0.8 s later, scale 0.01: the first line is 0.8 server seconds after the
    # launch (not 80), and from there on a wall second is 100 server seconds
    tracker = _watched(0.01, 100.0, 100.8)
    assert 100.8 / 0.01 - tracker.started_at == pytest.approx(0.8)
    assert 101.8 / 0.01 - tracker.started_at == pytest.approx(100.8)


def test_a_genuine_server_keeps_its_wall_clock():
    tracker = _watched(1.0, 100.0, 112.0)  # vLLM's imports took 12 s before its first line
    assert tracker.started_at == pytest.approx(100.0)


def _held(timings: dict) -> float:
    rec = TrialRecord(number=0, state=None, values=None, params={}, status="ok", timings=timings)
    return device_seconds(rec, {"time_scale": 0.5, "startup_time_scale": 0.01})


def test_accelerator_time_scales_the_boot_after_the_first_line_only():
    # 3 wall seconds to ready, 0.8 of them before the first line; a 10 s load test at scale 0.5
    assert _held({"boot_and_warmup_s": 3.0, "load_s": 10.0, "before_first_line_s": 0.8}) == pytest.approx(
        0.8 + 2.2 / 0.01 + 10.0 / 0.5)
    # records made before the figure existed: the whole boot scaled, as it was
    assert _held({"boot_and_warmup_s": 3.0, "load_s": 10.0}) == pytest.approx(3.0 / 0.01 + 10.0 / 0.5)
