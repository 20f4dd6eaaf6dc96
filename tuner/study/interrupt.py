"""Stopping a study on the signals people and schedulers send, all the way Ctrl-C does.

SIGINT (Ctrl-C), SIGTERM (the kubelet, Slurm's scancel and `--signal`, systemd, docker stop), SIGHUP (the ssh
session closed) and the schedulers' warnings that a job is about to be ended (SIGUSR1: Slurm's `--signal`
without a name, Grid Engine's `-notify`; SIGUSR2: LSF's run limit, Grid Engine before SIGKILL; SIGXCPU: a CPU-
time limit under LSF, PBS or ulimit) all mean "stop": no trial is asked for any more; each running trial stops
its server group (SIGINT, SIGTERM, SIGKILL with short grace periods, trial.run), is recorded as interrupted
and its parameters enqueued again; the run records go with the servers. A second signal hurries: every server
group is killed at once and the trials are still recorded. A third gives up recording (tuner.errors.Stopped
unwinds at once; the exit hook still kills the servers, and the next run fails what it left RUNNING).

The handlers are installed for all of them because a process that is PID 1 of its PID namespace (the
tuner as a container's command) gets no signal whose action is the default: without a handler
SIGTERM is dropped, and the kubelet SIGKILLs the tuner at the end of its grace period. A handler only
notes the signal and sets the stop event; the study's main thread does the rest.
"""

from __future__ import annotations

import signal
import threading

from ..vocabulary.errors import Stopped
from ..vocabulary.errors.hangup import detach_dead_outputs

# a job-ending warning's default action ends the process on the spot (SIGXCPU with a core dump), leaving
# its servers running and its trial RUNNING: each is a stop here
WARNINGS = tuple(getattr(signal, name) for name in ("SIGUSR1", "SIGUSR2", "SIGXCPU") if hasattr(signal, name))
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, *WARNINGS)
GIVE_UP_AFTER = 3  # this many signals: stop recording and leave at once


class Interrupt:
    """The study's stop event, set by the first of SIGNALS; `with Interrupt(stop):` installs the handlers
    (main thread only) and restores the previous ones on leaving."""

    def __init__(self, stop: threading.Event):
        self.stop = stop
        self.received: list[int] = []
        self._previous: dict[int, object] = {}
        self._hurried = False

    def __enter__(self) -> Interrupt:
        for sig in SIGNALS:
            self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _on_signal(self, signum, _frame) -> None:
        self.received.append(signum)
        if signum == signal.SIGHUP:  # the terminal may be gone: keep writing to it from failing the stop
            detach_dead_outputs()
        if len(self.received) >= GIVE_UP_AFTER:
            raise Stopped(signum)
        self.stop.set()

    @property
    def signum(self) -> int | None:
        """The first signal received (None: none)."""
        return self.received[0] if self.received else None

    @property
    def name(self) -> str | None:
        return signal.Signals(self.signum).name if self.signum is not None else None

    def hurry_due(self) -> bool:
        """True once, when a second signal has come: time to kill the servers without grace."""
        if len(self.received) >= 2 and not self._hurried:
            self._hurried = True
            return True
        return False

    @property
    def hurried(self) -> bool:
        return self._hurried
