"""A tuner stopped and resumed (Ctrl-Z then fg, kill -STOP / -CONT, a scheduler's suspend) measures nothing while
its clock runs on (tuner/serve/pauses.py): a load test it was running is run again on the same boot, a boot it
was timing is measured again (requeued), never told to the sampler as the configuration's figures."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tuner.serve import pauses as P
from tuner.trial import run as T
from tuner.vocabulary.status import TrialStatus

from .test_trial import context, run

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc and SIGSTOP")


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_a_gap_a_resume_explains_is_a_pause_and_a_short_or_unexplained_one_is_not():
    now = FakeClock()
    c = P.PauseClock(clock=now)
    now.t += 0.2
    c.tick()
    now.t += 1.0          # a busy machine's late tick: no pause
    c.tick()
    now.t += 6.0          # stopped for six seconds, then resumed
    c.resumed()
    now.t += 0.2
    c.tick()              # the ticker wakes after the handler took the gap: nothing more
    now.t += 5.0          # a late tick with no resume and under SURE_PAUSE_S: not a pause
    c.tick()
    assert c.pauses() == [(101.2, 107.2)]
    assert c.paused_s(100.0, 200.0) == pytest.approx(6.0)
    assert c.paused_s(104.0, 105.0) == pytest.approx(1.0) and c.paused_s(108.0, 200.0) == 0.0
    now.t += P.SURE_PAUSE_S + 1   # a stop whose SIGCONT no handler saw (the clock started off the main thread)
    c.tick()
    assert len(c.pauses()) == 2


CHILD = r"""
import sys, time
from tuner.serve.pauses import pause_clock
c = pause_clock()
print("ready", flush=True)
sys.stdin.readline()
time.sleep(0.5)
print(repr(c.pauses()), flush=True)
"""


def test_a_real_stop_and_continue_is_seen():
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        os.kill(child.pid, signal.SIGSTOP)
        time.sleep(3.0)
        os.kill(child.pid, signal.SIGCONT)
        out, _ = child.communicate("go\n", timeout=60)
    finally:
        child.kill()
    pauses = eval(out.strip())  # noqa: S307 - the child's own repr of a list of float pairs
    assert any(b - a >= 2.5 for a, b in pauses), pauses


class Paused:
    """pause_clock() for a trial: the first `windows` it is asked about held a pause of `seconds`."""

    def __init__(self, seconds: float, windows: int = 1, skip: int = 0):
        self.seconds, self.windows, self.skip, self.asked = seconds, windows, skip, 0

    def paused_s(self, start, end):
        self.asked += 1
        return self.seconds if self.skip < self.asked <= self.skip + self.windows else 0.0


def test_a_load_test_the_tuner_was_paused_in_is_run_again_on_the_same_boot(tmp_path, monkeypatch):
    clock = Paused(6.0, skip=1)  # the boot clean, the first load test paused
    monkeypatch.setattr(T, "pause_clock", lambda: clock)
    r = run(tmp_path, context(tmp_path))
    assert r.status == TrialStatus.OK, r.reason
    assert r.observed["paused_s"] == {"load": 6.0, "load_runs": 2}
    assert r.metrics["completed"] == 12 and r.metrics["failed"] == 0   # the second run's figures
    assert not [k for k in r.metrics if k.startswith(("first_", "warm_"))]
    assert r.observed["first_run_unmeasured"] and not [k for k in r.observed if k.startswith("first_run_p")]


def test_a_load_test_paused_twice_waits_for_a_new_boot(tmp_path, monkeypatch):
    clock = Paused(4.0, windows=2, skip=1)
    monkeypatch.setattr(T, "pause_clock", lambda: clock)
    r = run(tmp_path, context(tmp_path))
    assert r.status == TrialStatus.INTERRUPTED   # requeued by the study (study/tell.py)
    assert "stopped for 8 s during the load tests" in r.reason


def test_a_boot_the_tuner_was_paused_in_is_measured_again_not_told_as_its_warmup(tmp_path, monkeypatch):
    clock = Paused(30.0)
    monkeypatch.setattr(T, "pause_clock", lambda: clock)
    r = run(tmp_path, context(tmp_path))
    assert r.status == TrialStatus.INTERRUPTED   # requeued by the study (study/tell.py), not told as infeasible
    assert r.observed["paused_s"] == {"boot": 30.0}
    assert "stopped for 30 s while the server booted" in r.reason and "its warm-up time is not" in r.reason
    assert not r.metrics   # no load test on a boot whose figures are not the configuration's


def test_a_sweep_point_the_tuner_was_paused_in_is_run_again(tmp_path, monkeypatch):
    from .test_load_sweep import sweep_context

    clock = Paused(6.0, skip=1)  # the boot clean, the first point's load test paused, the second point clean
    monkeypatch.setattr(T, "pause_clock", lambda: clock)
    r = run(tmp_path, sweep_context(tmp_path, "rate=20,40", prompts=12))
    assert r.status == TrialStatus.OK, r.reason
    first, second = r.observed["load_sweep"]
    assert first["paused_s"] == {"load": 6.0, "load_runs": 2} and first["status"] == "ok"
    assert first["metrics"]["completed"] == 12 and "paused_s" not in second
