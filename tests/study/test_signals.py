"""The signals schedulers and terminals send to a running `bucket-tuner tune` (tuner/study/interrupt.py): SIGTERM
(kubelet, scancel, systemd), SIGHUP (the ssh session closed, here a pseudo-terminal that goes away), SIGINT
(Ctrl-C) and the job-ending warnings SIGUSR1, SIGUSR2 and SIGXCPU each stop the trial in flight with its
server group, record it as interrupted, remove the run records and exit 128 + signal within a scheduler's 30 s
grace; the same command resumes. Also: the tuner as PID 1 of its own PID namespace (how a container runs it)
and a second signal that hurries the stop. The deploy templates' signals (Slurm's --signal, the Job's grace
period) are checked in tests/study/nodes/test_deploy_templates.py.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from ..conftest import ROOT
from .test_study_e2e import FAST, SPACE, _read, assert_no_server_left, load, write_space

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")

GRACE_S = 30  # the kubelet's default terminationGracePeriodSeconds, and Slurm's default KillWait
ONE_CONFIG = {**SPACE, "parameters": {"max_num_seqs": {"type": "categorical", "choices": [8, 16]}}}


def tune_argv(space: Path, results: Path, slow: bool = True) -> list[str]:
    # A slow start-up (scale 0.02: a few seconds of warmup) so that the signal lands mid-trial; the
    # resumed run needs no such time.
    return [sys.executable, "-m", "tuner.cli", "tune", "--space", str(space), "--results", str(results),
            "--n-trials", "1", "--no-seed-defaults", *FAST, *(["--startup-time-scale", "0.02"] if slow else [])]


def wait_for_warmup(results: Path, proc_alive, timeout_s: float = 60) -> Path:
    log = results / "e2e" / "trials" / "0000" / "server.log"
    deadline = time.monotonic() + timeout_s
    while "[Warmup]" not in _read(log) and time.monotonic() < deadline and proc_alive():
        time.sleep(0.05)
    assert "[Warmup]" in _read(log), "the first trial never reached warmup"
    return log


def processes_mentioning(text: str) -> dict[int, str]:
    """Live processes whose command line holds `text` (the tuner and the watchdogs name the results folder)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if text in cmd and state not in "ZX":
            out[int(entry.name)] = cmd
    return out


def assert_stopped_cleanly(tmp_path: Path, results: Path, signame: str) -> optuna.trial.FrozenTrial:
    """No process left, no RUNNING trial, no run record; the trial in flight recorded as interrupted."""
    study = load(tmp_path)
    assert_no_server_left(study)
    assert not processes_mentioning(str(results)), processes_mentioning(str(results))
    assert not list((results / "e2e" / "run").glob("server-*.json")), "run records left behind"
    states = [(t.number, t.state.name, t.user_attrs.get("status")) for t in study.trials]
    assert not [s for s in states if s[1] == "RUNNING"], states
    first = study.trials[0]
    assert (first.state.name, first.user_attrs["status"]) == ("FAIL", "interrupted"), states
    assert f"({signame} to the tuner)" in first.user_attrs["reason"]
    # The tuner stopped the group itself, in order (SIGINT first), not the kernel or the watchdog.
    stop = first.user_attrs["observed"]["stop"]
    assert stop["ended_by"] in ("SIGINT", "SIGTERM") and stop["leftover"] == [], stop
    return first


def assert_resumes(tmp_path: Path, space: Path, interrupted: optuna.trial.FrozenTrial) -> None:
    again = subprocess.run([*tune_argv(space, tmp_path / "results", slow=False), "--no-report"], cwd=ROOT,
                           capture_output=True, text=True, timeout=240)
    assert again.returncode == 0, again.stderr[-2000:]
    study = load(tmp_path)
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert [(t.user_attrs.get("requeued_from"), t.params) for t in complete] == [(0, interrupted.params)]
    assert_no_server_left(study)


def run_in_pty(cmd: list[str]) -> tuple[int, int]:
    """Start cmd as a session leader on a new pseudo-terminal (an ssh session's shape): (pid, master fd)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: become the tuner; nothing else runs here
        try:
            os.chdir(ROOT)
            os.execv(cmd[0], cmd)
        finally:
            os._exit(127)
    return pid, fd


def drain(fd: int) -> None:
    """Read what the tuner wrote to its terminal (a full pty would block it)."""
    while select.select([fd], [], [], 0)[0]:
        try:
            if not os.read(fd, 65536):
                return
        except OSError:
            return


def waitpid(pid: int, timeout_s: float) -> int | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    return None


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGXCPU])
def test_a_signal_stops_the_trial_cleanly_within_the_grace_period(tmp_path, sig):
    """SIGUSR1, SIGUSR2 and SIGXCPU: the warnings Slurm (--signal with no name), Grid Engine (-notify) and
    LSF (run or CPU limit) send before they end a job; their default action would kill the tuner on the
    spot, its server running and its trial RUNNING."""
    space, results = write_space(tmp_path, ONE_CONFIG), tmp_path / "results"
    cmd = tune_argv(space, results)
    tuner = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_warmup(results, lambda: tuner.poll() is None)
        sent = time.monotonic()
        tuner.send_signal(sig)
        _, err = tuner.communicate(timeout=GRACE_S)
        took = time.monotonic() - sent
    finally:
        if tuner.poll() is None:
            tuner.kill()
            tuner.wait()
    print(f"\n{sig.name}: exit {tuner.returncode} after {took:.2f} s")
    assert tuner.returncode == 128 + sig, err[-2000:]
    lines = [line for line in err.splitlines() if line.startswith(f"interrupted by {sig.name}:")]
    assert len(lines) == 1 and "trial 0 stopped, recorded as interrupted" in lines[0], err[-2000:]
    assert "Traceback" not in err
    interrupted = assert_stopped_cleanly(tmp_path, results, sig.name)
    assert_resumes(tmp_path, space, interrupted)


def test_a_closed_terminal_sighup_stops_the_trial_cleanly(tmp_path):
    """The ssh session ends: the kernel hangs the terminal up and sends SIGHUP; every write to the
    terminal then fails (EIO), and the stop must still finish, record, and exit 129."""
    space, results = write_space(tmp_path, ONE_CONFIG), tmp_path / "results"
    cmd = tune_argv(space, results)
    pid, fd = run_in_pty(cmd)
    code = None
    try:
        log = results / "e2e" / "trials" / "0000" / "server.log"
        deadline = time.monotonic() + 60
        while "[Warmup]" not in _read(log) and time.monotonic() < deadline:
            drain(fd)
            time.sleep(0.05)
        assert "[Warmup]" in _read(log), "the first trial never reached warmup"
        sent = time.monotonic()
        os.close(fd)  # the session's terminal goes away
        fd = None
        code = waitpid(pid, GRACE_S)
        took = time.monotonic() - sent
    finally:
        if fd is not None:
            os.close(fd)
        if code is None:  # not reaped yet: it did not stop
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    print(f"\nSIGHUP (terminal closed): exit {code} after {took:.2f} s")
    assert code == 128 + signal.SIGHUP
    interrupted = assert_stopped_cleanly(tmp_path, results, "SIGHUP")
    assert (results / "e2e" / "report.html").exists(), "the stop finished: the report was written"
    assert_resumes(tmp_path, space, interrupted)


def _unshare_pid1() -> list[str] | None:
    """The unshare prefix that runs a command as PID 1 of a new PID namespace, or None if not permitted."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    prefix = [unshare, "--pid", "--fork", "--mount-proc"]
    try:
        probe = subprocess.run([*prefix, sys.executable, "-c", "import os; print(os.getpid())"],
                               capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return prefix if probe.returncode == 0 and probe.stdout.strip() == "1" else None


def _child_of(pid: int, timeout_s: float = 30) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for task in Path(f"/proc/{pid}/task").iterdir():
            kids = (task / "children").read_text().split()
            if kids:
                return int(kids[0])
        time.sleep(0.05)
    raise AssertionError("unshare started no child")


def test_sigterm_to_the_tuner_as_pid_1_of_its_namespace(tmp_path, capsys):
    """A container's command is PID 1 of its PID namespace, and the kernel drops a signal PID 1 has no
    handler for: without one, SIGTERM from the kubelet is ignored until its SIGKILL."""
    prefix = _unshare_pid1()
    if prefix is None:
        with capsys.disabled():
            print("\nSKIPPED: unshare --pid --fork --mount-proc is not permitted here (needs CAP_SYS_ADMIN "
                  "or user namespaces)")
        pytest.skip("unshare --pid --fork --mount-proc is not permitted here")
    space, results = write_space(tmp_path, ONE_CONFIG), tmp_path / "results"
    cmd = tune_argv(space, results)
    outer = subprocess.Popen([*prefix, *cmd], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
    try:
        tuner = _child_of(outer.pid)
        ns_pids = re.search(r"^NSpid:\s+(.*)$", Path(f"/proc/{tuner}/status").read_text(), re.M).group(1).split()
        assert ns_pids[-1] == "1", f"the tuner is not PID 1 of its namespace: NSpid {ns_pids}"
        wait_for_warmup(results, lambda: outer.poll() is None)
        sent = time.monotonic()
        os.kill(tuner, signal.SIGTERM)  # from the parent namespace, as the container runtime sends it
        _, err = outer.communicate(timeout=GRACE_S)
        took = time.monotonic() - sent
    finally:
        if outer.poll() is None:
            os.kill(tuner, signal.SIGKILL)
            outer.wait()
    print(f"\nSIGTERM to PID 1: exit {outer.returncode} after {took:.2f} s")
    assert outer.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert "interrupted by SIGTERM: trial 0 stopped" in err
    interrupted = assert_stopped_cleanly(tmp_path, results, "SIGTERM")
    assert_resumes(tmp_path, space, interrupted)


def test_a_second_signal_kills_the_server_group_at_once_and_still_records(tmp_path):
    # The server hangs in warmup and ignores SIGINT (a process stuck in native code): the first signal's
    # stop would wait out the SIGINT grace; the second skips it and kills the group.
    data = {**ONE_CONFIG, "env": {**SPACE["env"], "BUCKET_TUNER_SIM_FAULT": "hang-warmup:at=0"}}
    space, results = write_space(tmp_path, data), tmp_path / "results"
    tuner = subprocess.Popen(tune_argv(space, results), cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        wait_for_warmup(results, lambda: tuner.poll() is None)
        (record,) = (results / "e2e" / "run").glob("server-*.json")
        server = json.loads(record.read_text())["pid"]
        deadline = time.monotonic() + 30
        while not ignores_sigint(server) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ignores_sigint(server), "the simulator never reached its hang"
        sent = time.monotonic()
        tuner.send_signal(signal.SIGTERM)
        time.sleep(1.0)  # inside the SIGINT grace of the stop (5 s when the tuner is being stopped)
        tuner.send_signal(signal.SIGTERM)
        _, err = tuner.communicate(timeout=GRACE_S)
        took = time.monotonic() - sent
    finally:
        if tuner.poll() is None:
            tuner.kill()
            tuner.wait()
    print(f"\ntwo SIGTERMs 1 s apart: exit {tuner.returncode} after {took:.2f} s")
    assert tuner.returncode == 128 + signal.SIGTERM, err[-2000:]
    study = load(tmp_path)
    first = study.trials[0]
    assert (first.state.name, first.user_attrs["status"]) == ("FAIL", "interrupted")
    stop = first.user_attrs["observed"]["stop"]
    # SIGINT was sent and ignored; SIGTERM's step was skipped; SIGKILL ended it.
    assert stop["ended_by"] == "SIGKILL" and stop["leftover"] == [], stop
    assert_no_server_left(study)
    assert not processes_mentioning(str(results))
    assert not list((results / "e2e" / "run").glob("server-*.json"))


def ignores_sigint(pid: int) -> bool:
    """/proc's mask of ignored signals holds SIGINT (bit 1)."""
    status = _read(Path(f"/proc/{pid}/status"))
    m = re.search(r"^SigIgn:\s+([0-9a-f]+)$", status, re.M)
    return bool(m and int(m.group(1), 16) & (1 << (signal.SIGINT - 1)))
