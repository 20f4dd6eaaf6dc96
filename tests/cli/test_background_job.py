"""A tuner started as a shell's background job has SIGINT ignored; the servers it starts must not inherit
that (an ignored signal stays ignored across exec), or the first signal of every stop would be lost."""

from __future__ import annotations

import signal
import subprocess
import sys

from ..conftest import ROOT

PROBE = r"""
import os, signal, subprocess, sys
from tuner.cli import _stop_on_signals
if sys.argv[1] == "tuner":
    _stop_on_signals("tune")  # what main() does before any command runs
child = subprocess.run([sys.executable, "-c",
                        "import signal; h = signal.getsignal(signal.SIGINT); print('ignored' "
                        "if h == signal.SIG_IGN else 'default' if h == signal.default_int_handler else h)"],
                       capture_output=True, text=True, check=True)
os.kill(os.getpid(), signal.SIGINT)  # still deaf to it itself, as it was started
print(child.stdout.strip(), "survived")
"""


def _as_background_job(mode: str) -> str:
    proc = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=60,
                          cwd=ROOT, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_servers_of_a_background_tuner_obey_sigint_and_the_tuner_stays_deaf_to_it():
    assert _as_background_job("plain") == "ignored survived"  # what a child inherits without the tuner's care
    assert _as_background_job("tuner") == "default survived"
