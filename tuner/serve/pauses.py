"""Times the tuner was stopped and resumed: Ctrl-Z then `fg`/`bg`, `kill -STOP` then `-CONT`, a scheduler's
suspend and resume (Slurm's `scontrol suspend`, a cgroup freezer, `docker pause`).

A stopped tuner measures nothing while its clock runs on: a load test it was running records the pause in
its requests' latencies, and a warm-up it was timing takes the pause as the server's (when the scheduler
stopped the server too, the server's own "warm-up finished in N s" includes it as well). Neither figure is
the configuration's. A ticker thread notes the monotonic time every TICK_S; after a resume its next tick
finds the gap. A gap is a pause when it is at least MIN_PAUSE_S long and a SIGCONT arrived (what every
resume sends), or when it is so long (SURE_PAUSE_S) that no busy machine delays a sleeping thread that much: a
cgroup freezer (`docker pause`, a scheduler that freezes rather than signals) thaws without a SIGCONT, so its
shorter pauses go unseen.
The trial asks how much of its warm-up and of its load test fell in pauses (tuner/trial/run.py).
"""

from __future__ import annotations

import signal
import threading
import time

TICK_S = 0.2
MIN_PAUSE_S = 2.0    # a resume after a shorter stop changes no figure worth a second measurement
SURE_PAUSE_S = 15.0  # a tick this late is a stop, SIGCONT seen or not (a handler installed off the main thread)


class PauseClock:
    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self._lock = threading.Lock()
        self._last = clock()
        self._gaps: list[tuple[float, float]] = []   # (last tick before, first tick after), each long enough
        self._resumes: list[float] = []              # when a SIGCONT was handled
        self._thread: threading.Thread | None = None

    def start(self) -> PauseClock:
        """Tick in the background; take SIGCONT when called from the main thread (signals reach only it)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="pause-clock", daemon=True)
            self._thread.start()
            if threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGCONT"):
                previous = signal.getsignal(signal.SIGCONT)

                def on_resume(signum, frame):
                    self.resumed()
                    if callable(previous):
                        previous(signum, frame)

                signal.signal(signal.SIGCONT, on_resume)
        return self

    def _run(self) -> None:
        while True:
            time.sleep(TICK_S)
            self.tick()

    def tick(self) -> None:
        now = self.clock()
        with self._lock:
            if now - self._last >= MIN_PAUSE_S:
                self._gaps.append((self._last, now))
            self._last = now

    def resumed(self) -> None:
        """A SIGCONT: noted, and the gap since the last tick taken now if the ticker has not yet woken."""
        now = self.clock()
        with self._lock:
            self._resumes.append(now)
            if now - self._last >= MIN_PAUSE_S:
                self._gaps.append((self._last, now))
                self._last = now

    def pauses(self) -> list[tuple[float, float]]:
        """The pauses so far: gaps a resume explains (a SIGCONT handled within a minute of the gap's end; the
        main thread runs the handler when it next can), or too long for anything else."""
        with self._lock:
            gaps, resumes = list(self._gaps), list(self._resumes)
        return [(a, b) for a, b in gaps
                if b - a >= SURE_PAUSE_S or any(a <= r <= b + 60.0 for r in resumes)]

    def paused_s(self, start: float, end: float) -> float:
        """Seconds of pauses inside [start, end] (monotonic times); the ticks' granularity either side."""
        return sum(max(0.0, min(b, end) - max(a, start)) for a, b in self.pauses())


_CLOCK: PauseClock | None = None
_CLOCK_LOCK = threading.Lock()


def pause_clock() -> PauseClock:
    """The process's one PauseClock, started on first use (a study starts it from its main thread)."""
    global _CLOCK
    with _CLOCK_LOCK:
        if _CLOCK is None:
            _CLOCK = PauseClock().start()
        return _CLOCK
