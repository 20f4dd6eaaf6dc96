"""No orphan, ever: a server whose tuner died is stopped by its watchdog within seconds, without anyone
re-running the tuner (tuner/serve/watchdog.py). A small "tuner" script starts a fake vLLM tree (children,
a grandchild, a child that escapes the group with setsid) through ServerProcess and is then killed
with SIGKILL: no atexit hook, no `with` block, no signal handler runs in it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tuner.serve.ports import find_free_port
from tuner.serve.process import ServerProcess
from tuner.serve.watchdog import STEPS_S

from ...conftest import ROOT
from ...serve.test_server import FAKE, child_pids, group_members, live, tagged, wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")

TUNER = r"""
import json, os, sys, time
from tuner.serve.process import ServerProcess
argv, records, log, url = json.loads(sys.argv[1])
srv = ServerProcess(records_dir=records).start(argv, dict(os.environ), log)
assert srv.wait_ready(url, boot_timeout_s=15, warmup_timeout_s=15).ok
deadline = time.monotonic() + 10
while len(srv.alive_pids()) < 5 and time.monotonic() < deadline:  # leader, 2 children, grandchild, escaped
    time.sleep(0.05)
print(json.dumps({"pgid": srv.pgid, "pids": srv.alive_pids(), "watchdog": srv._guard.proc.pid}), flush=True)
time.sleep(120)
"""


def fake_argv(tag: str, port: int, *flags) -> list[str]:
    return [sys.executable, str(FAKE), "--tag", tag, "--host", "127.0.0.1", "--port", str(port),
            "--spawn-children", "2", "--grandchild", "--setsid-child", *flags]


@pytest.mark.parametrize("stubborn", [False, True], ids=["polite", "ignores-sigint-sigterm"])
def test_server_of_a_killed_tuner_is_stopped_by_its_watchdog(tmp_path, stubborn):
    tag, port = uuid.uuid4().hex, find_free_port()
    argv = fake_argv(tag, port, *(["--ignore-sigint", "--ignore-sigterm"] if stubborn else []))
    records, log = tmp_path / "run", tmp_path / "server.log"
    tuner = subprocess.Popen([sys.executable, "-c", TUNER,
                              json.dumps([argv, str(records), str(log), f"http://127.0.0.1:{port}"])],
                             stdout=subprocess.PIPE, text=True, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        info = json.loads(tuner.stdout.readline())
        pids = set(info["pids"])
        assert len(pids) == 5 and any(live(p) for p in pids)
        escaped = [p for p in pids if p not in group_members(info["pgid"])]
        assert len(escaped) == 1, "the fake's setsid child should have left the group"
        tuner.kill()  # SIGKILL
        tuner.wait(10)
        # Within seconds, with nobody running anything: the whole tree, the escaped child included. The
        # stubborn tree takes the watchdog's whole escalation (~11 s); a busy machine may stretch it
        # (20 s was once too short beside a second suite), so the wait allows three times that.
        wait_for(lambda: not any(live(p) for p in pids) and not group_members(info["pgid"]),
                 timeout=3 * sum(grace for _, grace in STEPS_S) + 10, what="the orphaned server tree to be stopped")
        wait_for(lambda: not live(info["watchdog"]), timeout=5, what="the watchdog to exit")
    finally:
        if tuner.poll() is None:
            tuner.kill()
            tuner.wait()
        tuner.stdout.close()
        for pid in tagged(tag):  # never leave anything behind, even when an assertion failed
            os.kill(pid, 9)
    assert tagged(tag) == []
    assert not list(records.glob("server-*.json")), "the watchdog removes the record of a group it stopped"
    text = log.read_text()
    assert "watchdog: the tuner is gone; stopping server group" in text
    assert ("stopped (SIGKILL)" if stubborn else "stopped (SIGINT)") in text


def test_a_normal_stop_releases_the_watchdog(tmp_path):
    tag, port = uuid.uuid4().hex, find_free_port()
    lines = []
    srv = ServerProcess(records_dir=tmp_path / "run", on_line=lambda line, t: lines.append(line))
    try:
        srv.start(fake_argv(tag, port), dict(os.environ), tmp_path / "server.log")
        assert srv.wait_ready(f"http://127.0.0.1:{port}", boot_timeout_s=15, warmup_timeout_s=15).ok
        watchdog = srv._guard.proc
        assert watchdog.poll() is None and live(watchdog.pid)
        # Its own session: the terminal's Ctrl-C to the tuner's group never reaches it.
        assert os.getsid(watchdog.pid) == watchdog.pid
        kids = wait_for(lambda: len(child_pids(lines)) == 4 and child_pids(lines), what="4 kids")
        report = srv.stop(grace_int_s=15, grace_term_s=5, grace_kill_s=2)  # SIGINT expected: a long grace
    finally:
        srv.stop()
        for pid in tagged(tag):
            os.kill(pid, 9)
    # Released, not triggered: it exited 0 (reaped by stop()) while the tuner's own SIGINT stopped the
    # tree in order, without waiting for the watchdog to read its release first.
    assert watchdog.returncode == 0
    assert report.ended_by == "SIGINT" and report.clean
    assert report.first_signal_s is not None and 0 <= report.first_signal_s <= report.elapsed_s
    assert watchdog.pid not in report.alive_before["SIGINT"]
    assert set(report.alive_before["SIGINT"]) == kids | {srv.pid}
    assert "watchdog" not in Path(tmp_path / "server.log").read_text()


def test_without_a_watchdog_the_group_outlives_a_killed_tuner(tmp_path):
    """The control: the same kill without the watchdog leaves the tree (the issue's orphan)."""
    tag, port = uuid.uuid4().hex, find_free_port()
    script = TUNER.replace("ServerProcess(records_dir=records)", "ServerProcess(records_dir=records, watchdog=False)")
    script = script.replace('"watchdog": srv._guard.proc.pid', '"watchdog": None')
    tuner = subprocess.Popen([sys.executable, "-c", script,
                              json.dumps([fake_argv(tag, port), str(tmp_path / "run"), str(tmp_path / "s.log"),
                                          f"http://127.0.0.1:{port}"])],
                             stdout=subprocess.PIPE, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        info = json.loads(tuner.stdout.readline())
        tuner.kill()
        tuner.wait(10)
        time.sleep(2)
        assert group_members(info["pgid"]), "without the watchdog the group should still be there"
    finally:
        tuner.stdout.close()
        for pid in tagged(tag):
            os.kill(pid, 9)
